"""How much of a chat's story survives in the row, and how cut up its lines are.

The facts are the details the demo generator's storyline plants (eva/demo/friends_text.py,
SCENES): every number, time, date, amount and name a scripted message states, found by
the same detail finder the reply grounding uses (eva.core.grounding.stated_details), each
with the message that states it. The demo chat `eva demo` shows is imported and built
with the offline summarizer (or the summarizer of --model, with a key), and a fact
survives when the row line over its message still says it (case and accents aside).
Reported: the share of facts that survive, over all and per level of the row's lines
(size 1 is the message itself), and the cut marks ("…") per row line. With --shared, the
same for the shared channel, whose facts are the details of its long messages.

    python scripts/eval_summaries.py [--shared]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from eva.cli.cmd_import import import_bytes, read_export
from eva.cli.common import open_store
from eva.core.address import Address
from eva.core.grounding import fold, stated_details
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import ELLIPSIS, OfflineSummarizer
from eva.demo.friends import friends_export
from eva.demo.friends_text import SCENES
from eva.store.event_store import EventStore

DEMO_MESSAGES = 4000  # what `eva demo` imports
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"
LONG_MESSAGE_CHARS = 300
SHARED_FACTS_MOST = 400


def scene_facts() -> list[tuple[str, str]]:
    """(message text, detail) for every detail a scripted message states."""
    facts = []
    for _day, lines in SCENES:
        for _author, text, *_files in lines:
            message = text.removeprefix("^")
            for detail, _kind, _value in stated_details(message):
                facts.append((message, detail))
    return facts


def build(raw: bytes, name: str, place: Path) -> tuple[EventStore, StreamId]:
    data = place / name
    report = import_bytes(data, raw, Path(f"{name}.json"))
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    store = open_store(data, write=True)
    trio.run(_build, store, stream)
    return store, stream


async def _build(store: EventStore, stream: StreamId) -> None:
    from eva.memory.build import Memory

    await Memory(store, stream, OfflineSummarizer(), MemorySettings()).build(
        int(time.time() * 1000)
    )


def measure(store: EventStore, stream: StreamId, facts: list[tuple[str, str]]) -> dict[str, Any]:
    """Survival of `facts` (message text, detail) in the row over their messages."""
    row = store.published_row(stream)
    meta = store.meta(stream)
    assert row is not None
    assert meta is not None
    addresses = [Address(start, size) for start, size in row.entries]
    lines = store.lines(stream, addresses)
    texts = {a: lines[a].text for a in addresses if a in lines}
    where: dict[str, list[int]] = {}
    for index, stored in store.messages(stream, 0, meta.messages):
        where.setdefault(" ".join(stored.content.split()), []).append(index)
    kept: Counter[int] = Counter()
    seen: Counter[int] = Counter()
    survived = tail = unplaced = 0
    for text, detail in facts:
        indexes = where.get(" ".join(text.split()))
        if not indexes:
            unplaced += 1
            continue
        index = indexes[0]
        if index >= row.frontier:
            tail += 1  # word for word under the row: not the summarizer's to keep
            continue
        address = next(a for a in addresses if a.start <= index < a.start + a.size)
        level = address.size.bit_length() - 1
        seen[level] += 1
        if fold(detail) in fold(texts.get(address, "")):
            kept[level] += 1
            survived += 1
    judged = sum(seen.values())
    cuts = sum(text.count(ELLIPSIS) for text in texts.values())
    return {
        "facts": len(facts),
        "facts_under_the_row": judged,
        "facts_in_the_tail": tail,
        "facts_not_found": unplaced,
        "survived": survived,
        "survived_share": round(survived / judged, 3) if judged else None,
        "by_level": {
            str(level): {"facts": seen[level], "survived": kept[level]}
            for level in sorted(seen)
        },
        "row_lines": len(texts),
        "cut_marks": cuts,
        "cut_marks_per_line": round(cuts / max(len(texts), 1), 2),
    }


def shared_facts(store: EventStore, stream: StreamId) -> list[tuple[str, str]]:
    """The details of the shared channel's long messages."""
    meta = store.meta(stream)
    assert meta is not None
    facts: list[tuple[str, str]] = []
    for _, message in store.messages(stream, 0, meta.messages):
        if len(message.content) >= LONG_MESSAGE_CHARS and not message.deleted:
            facts.extend((message.content, d) for d, _, _ in stated_details(message.content))
        if len(facts) >= SHARED_FACTS_MOST:
            break
    return facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", action="store_true", help="the shared channel too")
    args = parser.parse_args()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="eva-eval-lines-") as temp:
        store, stream = build(friends_export(DEMO_MESSAGES), "demo", Path(temp))
        result["demo"] = measure(store, stream, scene_facts())
        print(f"demo: {result['demo']}", file=sys.stderr)
        if args.shared and SHARED.exists():
            store, stream = build(read_export(SHARED), "shared", Path(temp))
            result["shared"] = measure(store, stream, shared_facts(store, stream))
            print(f"shared: {result['shared']}", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
