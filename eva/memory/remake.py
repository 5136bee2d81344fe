# Making stale lines again: after a forget, a deletion or an edit, bottom-up from the leaves.
#
# Shell: reads the `stale` projection (the lines whose text is wrong now),
# remakes each level from the level below, by glue or by the summarizer, and
# appends the new lines. An erased message's leaf becomes empty. When the
# model cannot make a line, the offline summarizer makes it instead: a forget
# must finish whether or not the model answers, so no stale text survives.
from __future__ import annotations

from itertools import groupby

from eva.core.address import Address
from eva.core.events import LineWritten
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import Summarizer, Task
from eva.core.tree import glue_or_task
from eva.memory.compress import (
    Append,
    CompressStats,
    Run,
    append_lines,
    halves_of,
    leaf_for,
    merged_line,
    stage,
    summarize_round,
)
from eva.store.event_store import EventStore


async def remake(
    store: EventStore,
    stream: StreamId,
    summarizer: Summarizer,
    append: Append,
    settings: MemorySettings,
    now_ms: int,
    fallback: Summarizer | None = None,
) -> CompressStats:
    """Make every stale line of the stream again, level by level; returns what it did.

    With a `fallback`, a line the summarizer cannot make is made by the
    fallback instead; without one it stays stale for a later run.
    """
    run = Run(store, stream, append, settings, now_ms)
    stale = [Address(start, size) for start, size in store.stale(stream)]
    ordered = sorted(stale, key=lambda a: (a.size, a.start))
    for _, group in groupby(ordered, key=lambda a: a.size):
        level = list(group)
        lines, tasks = _level_work(run, level)
        lines.extend(await _ask(run, summarizer, tasks, fallback))
        await append_lines(run, lines)
        if any(address not in run.written for address in level):
            break  # a line of this level could not be made; the levels above must wait
    run.stats.pending = len(run.given_up)
    return run.stats


def _level_work(run: Run, addresses: list[Address]) -> tuple[list[LineWritten], list[Task]]:
    lines: list[LineWritten] = []
    tasks: list[Task] = []
    for address in addresses:
        work: LineWritten | Task
        if address.size == 1:
            work = leaf_for(run, address.start)
        else:
            left, right = halves_of(run, address)
            made = glue_or_task(address, left.text, right.text, run.settings.line_limit)
            if isinstance(made, str):
                run.stats.merges_glue += 1
                lines.append(merged_line(run, address, left, right, made, "glue"))
                continue
            work = made
        if isinstance(work, LineWritten):
            lines.append(work)
        else:
            tasks.append(work)
    return stage(run, lines), tasks


async def _ask(
    run: Run, summarizer: Summarizer, tasks: list[Task], fallback: Summarizer | None
) -> list[LineWritten]:
    """The lines made for `tasks`: by the summarizer, else by the fallback."""
    made: list[LineWritten] = []
    round_size = run.settings.tasks_per_request * run.settings.model_calls_in_flight
    pending = tasks
    while pending:
        again: list[Task] = []
        for start in range(0, len(pending), round_size):
            chunk = pending[start : start + round_size]
            retry, lines = await summarize_round(run, summarizer, chunk)
            again.extend(retry)
            made.extend(lines)
        pending = again
    failed = [task for task in tasks if task.address in run.given_up]
    if failed and fallback is not None:
        run.given_up.difference_update(task.address for task in failed)
        _, lines = await summarize_round(run, fallback, failed)
        made.extend(lines)
    return made
