# What the tree's lines would cost from the line model, estimated from a played log.
#
# Pure: handed a channel's log (as the offline summarizer played it) and a
# price, it prices every line that needed a model as if the line model had
# written it, task by task, requests as the line writer groups them. It may
# not know what the line model would really write: it takes the played lines'
# sizes. Invariants: glued and verbatim lines are free; a model missing from
# the table costs nothing here and is reported unpriced by the caller.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eva.core.costs import cost_of
from eva.core.events import AnyEvent, LineWritten, MessagePosted, Usage
from eva.core.prices import BYTES_PER_TOKEN, Price
from eva.core.render import render_message
from eva.core.summarize import OFFLINE_MODEL

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class TreeBill:
    """What the lines of the played log would cost from the line model, estimated."""

    model_tasks: int
    requests: int
    free_lines: int
    usd: float
    by_day: dict[int, float]


def bill_tree(
    log: Sequence[AnyEvent],
    price: Price | None,
    instructions_tokens: int,
    tasks_per_request: int,
    batch: bool,
    task_frame_tokens: int = 40,
) -> TreeBill:
    """Price every line the log's offline summarizer made as if the line model had made it.

    A leaf task reads its message, a merge its two halves as they stood; each
    writes its line. Tasks go `tasks_per_request` to a request; a compression
    run (the lines written at one time) writes the cached instructions once and
    every later request of the run reads them. Glued and verbatim lines are free.
    """
    per = price.bytes_per_token if price is not None else BYTES_PER_TOKEN
    texts: dict[tuple[int, int], str] = {}
    messages: dict[int, str] = {}
    runs: dict[int, list[tuple[int, int]]] = {}
    free = 0
    for event in log:
        if isinstance(event, MessagePosted):
            messages[event.index] = render_message(
                event.author_name, event.content, event.attachments
            )
        elif isinstance(event, LineWritten):
            if event.how == "model" and event.model == OFFLINE_MODEL:
                if event.size == 1:
                    source = messages.get(event.start, "")
                else:
                    half = event.size // 2
                    source = texts.get((event.start, half), "") + texts.get(
                        (event.start + half, half), ""
                    )
                run = runs.setdefault(event.at_ms, [])
                run.append((math.ceil(len(source.encode()) / per) + task_frame_tokens,
                            math.ceil(len(event.text.encode()) / per) + task_frame_tokens // 4))
            else:
                free += 1
            texts[(event.start, event.size)] = event.text
    usd = 0.0
    requests = tasks = 0
    by_day: dict[int, float] = {}
    for at_ms, run in runs.items():
        for first in range(0, len(run), tasks_per_request):
            chunk = run[first:first + tasks_per_request]
            usage = Usage(
                input_tokens=sum(task_in for task_in, _ in chunk),
                output_tokens=sum(task_out for _, task_out in chunk),
                cache_write_tokens=instructions_tokens if first == 0 else 0,
                cache_read_tokens=0 if first == 0 else instructions_tokens,
            )
            cost = 0.0 if price is None else cost_of(usage, price, batch=batch)
            usd += cost
            by_day[at_ms // DAY_MS] = by_day.get(at_ms // DAY_MS, 0.0) + cost
            requests += 1
            tasks += len(chunk)
    return TreeBill(model_tasks=tasks, requests=requests, free_lines=free, usd=usd,
                    by_day=by_day)
