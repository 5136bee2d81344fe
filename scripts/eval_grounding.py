"""Did Eva read it, or guess? Questions whose answer is a number in an old message.

Builds the demo chat's memory (or takes --data and --channel), and makes questions from
the channel's own history: a message under the published row (not in the tail) holding a
number that a line of the row also shows, so the number is in Eva's prompt only as a
summary. Each question quotes the message with the number blanked out and asks for it.
Every question goes through `eva ask`'s reply path twice, without and with the round that
checks details Eva did not read (ModelSettings.check_guesses), and each answer is
counted as:

- right: the reply gives the number;
- read first: the number is grounded `read` (Eva opened the message, or recall showed it,
  before she stated it);
- from the summary: a number the reply states is grounded `summary` only (right or not);
- made up: the reply states a number found nowhere.

With ANTHROPIC_API_KEY the questions go to Claude. Without one, --model careful or hasty
picks a scripted model on the fake Messages API: careful recalls the quoted words and
answers from the message it finds; hasty answers at once from the row line.

    python scripts/eval_grounding.py [--questions 40] [--model careful|hasty] [--seed 1]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import msgspec
import trio

from eva.cli.cmd_ask import ask
from eva.cli.cmd_import import import_bytes
from eva.cli.common import open_store
from eva.core.address import Address
from eva.core.keys import StreamId
from eva.core.render import render_line
from eva.core.settings import MemorySettings, ModelSettings
from eva.core.state import StreamMeta
from eva.core.summarize import OfflineSummarizer
from eva.demo.friends import friends_export
from eva.live.inputs import Post
from eva.memory.build import Memory
from eva.store.event_store import EventStore
from eva.testing.fake_anthropic import JSON, FakeMessagesAPI

NUMBER = re.compile(r"(?<![\w.:])\d+(?:[.:,]\d+)?(?![\w])")
DIGITS = re.compile(r"\d+")
BLANK = "___"
CLOZE_WORDS = 8


class Question(msgspec.Struct, frozen=True):
    index: int
    author: str
    number: str
    cloze: str

    def text(self) -> str:
        return f'What number did {self.author} write in "{self.cloze}"? Give the number.'


def asked_at(meta: StreamMeta) -> int:
    """When the questions are asked: an hour after the channel's last message."""
    return meta.last_ms + 3_600_000


def _clock(at_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at_ms / 1000))


def questions(store: EventStore, stream: StreamId, count: int, seed: int) -> list[Question]:
    """Questions about numbers the row shows only as a summary."""
    row = store.published_row(stream)
    meta = store.meta(stream)
    if row is None or meta is None:
        return []
    # numbers the prompt shows word for word (the tail with its indexes and times, the
    # row's addresses and dates, its lines of one message, the time of the question) make
    # no question; a time's digits count alone too, as the grounding reads them
    shown = [_clock(asked_at(meta))]
    for index, m in store.messages(stream, row.frontier, meta.messages):
        shown.append(f"[{index}] {_clock(m.posted.at_ms)} {m.content}")
    row_lines = store.lines(stream, [Address(start, size) for start, size in row.entries])
    for address, line in row_lines.items():
        header = render_line(address, "", line.first_ms, line.last_ms)
        shown.append(header if address.size > 1 else f"{header} {line.text}")
    in_tail = {n for text in shown for n in (*NUMBER.findall(text), *DIGITS.findall(text))}
    addresses = [Address(start, size) for start, size in row.entries if size > 1]
    lines = store.lines(stream, addresses)
    found: dict[int, Question] = {}
    for address in addresses:
        line = lines.get(address)
        if line is None:
            continue
        shown = set(NUMBER.findall(line.text))
        for index, message in store.messages(stream, address.start, address.start + address.size):
            numbers = [n for n in NUMBER.findall(message.content)
                       if n in shown and n not in in_tail and len(n) > 1]
            if message.deleted or not numbers or index in found:
                continue
            number = numbers[0]
            words = message.content.replace(number, BLANK, 1).split()
            at = next(i for i, word in enumerate(words) if BLANK in word)
            cloze = " ".join(words[max(0, at - CLOZE_WORDS // 2) : at + CLOZE_WORDS // 2 + 1])
            found[index] = Question(index, message.posted.author_name, number, cloze)
    # a cloze that several messages share has no one answer
    shared = Counter(question.cloze for question in found.values())
    chosen = sorted((q for q in found.values() if shared[q.cloze] == 1), key=lambda q: q.index)
    random.Random(seed).shuffle(chosen)
    return chosen[:count]


# -- the scripted models ------------------------------------------------------------------

_CLOZE = re.compile(r'write in "(.*?)"\?')
CHECKING = "Before this answer is posted"


def _question_text(body: JSON) -> str:
    first = body["messages"][0]["content"]
    return str(first[-1]["text"] if isinstance(first, list) else first)


def _fill(cloze: str, text: str) -> str | None:
    """The number that stands in the blank of `cloze` somewhere in `text`."""
    before = cloze.partition(BLANK)[0]
    pattern = re.escape(before.split()[-1] if before.split() else "") + r"\s*(\d+(?:[.:,]\d+)?)"
    found = re.search(pattern, text)
    return found.group(1) if found else None


def careful(body: JSON) -> str | list[JSON]:
    """Recalls the quoted words first, and answers from the message it finds."""
    cloze = _CLOZE.search(_question_text(body))
    if cloze is None:
        return "I do not know."
    last = body["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"] if (
        isinstance(last, list)) else []
    if not results:
        words = " ".join(w for w in cloze.group(1).replace(BLANK, " ").split() if len(w) > 3)
        return [{"type": "tool_use", "id": "toolu_1", "name": "recall", "input": {"query": words}}]
    number = _fill(cloze.group(1), str(results[-1].get("content", "")))
    return f"It was {number}." if number else "I could not find it."


def hasty(body: JSON) -> str | list[JSON]:
    """Answers at once from the row, whatever the row line says; asked to check a detail it
    did not read, it checks as the careful one does."""
    if any(CHECKING in str(m["content"]) for m in body["messages"] if m["role"] == "user"):
        return careful(body)
    cloze = _CLOZE.search(_question_text(body))
    first = body["messages"][0]["content"]
    row = str(first[0]["text"]) if isinstance(first, list) else ""
    number = _fill(cloze.group(1), row) if cloze else None
    return f"It was {number or 42}."


# -- the run ------------------------------------------------------------------------------


def judge(question: Question, answer: dict[str, Any]) -> dict[str, bool]:
    reply = str(answer["reply"])
    right = question.number in NUMBER.findall(reply)
    grounding = answer.get("grounding") or {"details": []}
    numbers = [d for d in grounding["details"] if NUMBER.fullmatch(d["text"].strip("$€£%"))]
    kind = next((d["kind"] for d in numbers if question.number in d["text"]), None)
    return {
        "right": right,
        "read_first": kind == "read",
        "from_summary": any(d["kind"] == "summary" for d in numbers),
        "made_up": any(d["kind"] == "unsupported" for d in numbers),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        data = args.data
        if data is None:
            data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="eva-eval-")))
            report = import_bytes(data, friends_export(args.messages), Path("demo.json"))
            stream = StreamId(int(report.guild_id), int(report.channel_id))
            store = open_store(data, write=True)
            trio.run(Memory(store, stream, OfflineSummarizer(), MemorySettings()).build,
                     int(time.time() * 1000))
        else:
            store = open_store(data, write=True)
            meta = next(m for m in store.streams()
                        if args.channel in (f"{m.guild_id}/{m.channel_id}", m.channel_name))
            stream = StreamId(meta.guild_id, meta.channel_id)
        asked = questions(store, stream, args.questions, args.seed)
        key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
        models = ModelSettings(replies_per_guild_month=10**9)
        how = "Claude"
        if not key:
            fake = stack.enter_context(
                FakeMessagesAPI(answer=careful if args.model == "careful" else hasty).serve()
            )
            key, how = fake.key, f"the fake Messages API, {args.model} model"
            models = msgspec.structs.replace(models, base_url=fake.url)
        results: dict[str, Any] = {"questions": len(asked), "model": how}
        for check in (False, True):
            counts = {"right": 0, "read_first": 0, "from_summary": 0, "made_up": 0}
            settings = msgspec.structs.replace(models, check_guesses=check)
            meta = store.meta(stream)
            at_ms = int(time.time() * 1000) if meta is None else asked_at(meta)
            for question in asked:
                post = Post(message_id=1, author_id=1, author_name="someone",
                            at_ms=at_ms, content=question.text())
                answer = trio.run(ask, store, stream, post, MemorySettings(), settings, key,
                                  post.at_ms)
                for name, hit in judge(question, answer).items():
                    counts[name] += hit
            results["with_check" if check else "without_check"] = counts
            print(f"{'with' if check else 'without'} the check: {counts}", file=sys.stderr)
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument(
        "--messages", type=int, default=2500,
        help="demo chat size (enough for merged lines in a row of the default size)",
    )
    parser.add_argument("--data", type=Path, default=None, help="a data directory instead")
    parser.add_argument("--channel", default=None, help="with --data: GUILD/CHANNEL or name")
    parser.add_argument("--model", choices=["careful", "hasty"], default="careful",
                        help="without a key: which scripted model answers")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.data is not None and args.channel is None:
        parser.error("--data needs --channel")
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
