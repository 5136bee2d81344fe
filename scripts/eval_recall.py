"""How often recall shows a message that answers the question, per kind of question.

Runs the questions of scripts/recall_questions.json (each written with the
indexes of the messages that answer it) through `eva recall` as it runs for a
person and for Eva's tool, over the generated friends' chat of the demo and
the shared channel sample (../shared/data/komodo-talk-general.dce.json.gz,
read in place; its questions are skipped when it is absent). A question is
found when any of its evidence messages is among those the answer shows,
as a hit or as context. The same run scores a plain BM25 baseline
(rank_bm25 over the same words, each message a `date author: text` line; the
top 5 messages, each with two neighbours) for comparison.

The questions are split by a hash of their id into a tuning half and a
held-out half; both are reported. A third part, "fresh" (ids fa-, fd-), was
written once recall's method was settled, by reading the chats alone
without asking recall anything, and nothing was changed after it was first
run: the least biased figure.

    python scripts/eval_recall.py [--chat demo|komodo] [--cap 12000] [--show-misses]
                                  [--curve 2000,4000,6000,8000,12000]

It also reports the hit rate against the bytes shown: at each budget of
--curve, Eva's recall rendered within it, beside BM25 given exactly the bytes
Eva's answer used for the same question (hits in score order, each with two
neighbours on either side, while they fit).

The last line printed is a JSON object with every figure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eva.cli.cmd_import import import_bytes, read_export
from eva.cli.common import open_store
from eva.core.keys import StreamId
from eva.core.projection import indexed_text
from eva.core.recall import render_view
from eva.core.settings import MemorySettings
from eva.core.terms import terms
from eva.demo.friends import friends_export
from eva.memory.view import RECALL_CAP_BYTES, recall
from eva.store.event_store import EventStore

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "scripts" / "recall_questions.json"
SAMPLE = ROOT.parent / "shared" / "data" / "komodo-talk-general.dce.json.gz"
KINDS = ("fact", "several", "person", "time", "wordform")
HALVES = ("tuning", "held-out", "fresh")
BASELINE_HITS = 5
ROUNDS = 3
BASELINE_CONTEXT = 2
BASELINE_MESSAGE_BYTES = 300


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    chat: str
    kind: str
    question: str
    evidence: tuple[int, ...]
    fresh: bool = False

    @property
    def half(self) -> str:
        """Which part the question is in: "fresh" if it was written once recall was
        settled, else one of two halves fixed by its id alone."""
        if self.fresh:
            return "fresh"
        digest = hashlib.sha256(self.id.encode()).digest()
        return HALVES[digest[0] & 1]


@dataclass(slots=True)
class Tally:
    """Questions asked and found, per (half, kind)."""

    asked: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    found: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    sizes: list[int] = field(default_factory=list)
    seconds: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    misses: list[Question] = field(default_factory=list)

    def add(self, question: Question, shown: Iterable[int], size: int) -> None:
        key = (question.half, question.kind)
        self.asked[key] += 1
        self.sizes.append(size)
        if set(shown) & set(question.evidence):
            self.found[key] += 1
        else:
            self.misses.append(question)

    def rate(self, half: str | None = None, kind: str | None = None) -> float:
        keys = [
            key
            for key in self.asked
            if (half is None or key[0] == half) and (kind is None or key[1] == kind)
        ]
        asked = sum(self.asked[key] for key in keys)
        return sum(self.found[key] for key in keys) / asked if asked else float("nan")

    def count(self, half: str | None = None, kind: str | None = None) -> int:
        return sum(
            asked
            for key, asked in self.asked.items()
            if (half is None or key[0] == half) and (kind is None or key[1] == kind)
        )


def load_questions(path: Path, chats: Sequence[str]) -> list[Question]:
    raw = json.loads(path.read_text())
    questions = [
        Question(
            id=item["id"],
            chat=item["chat"],
            kind=item["kind"],
            question=item["question"],
            evidence=tuple(item["evidence"]),
            fresh=item.get("fresh", False),
        )
        for item in raw
        if item["chat"] in chats
    ]
    unknown = {q.kind for q in questions} - set(KINDS)
    if unknown:
        raise SystemExit(f"{path}: unknown kinds {sorted(unknown)}")
    return questions


def chat_store(chat: str, root: Path) -> tuple[EventStore, StreamId] | None:
    """The chat imported into a fresh data directory under `root`; None if it is absent."""
    if chat == "demo":
        raw = friends_export(4000)
    elif SAMPLE.exists():
        raw = read_export(SAMPLE)
    else:
        return None
    data = root / chat
    report = import_bytes(data, raw, Path(chat), quiet=True)
    return open_store(data), StreamId(int(report.guild_id), int(report.channel_id))


def ask_eva(
    store: EventStore,
    stream: StreamId,
    questions: Sequence[Question],
    cap: int,
    tally: Tally,
) -> None:
    """Ask every question once to warm the caches, then `ROUNDS` times for the figures:
    a question's time is the median of its rounds (the machine is shared)."""
    settings = MemorySettings()
    for question in questions:
        recall(store, stream, question.question, settings, cap)
    for question in questions:
        rounds = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            view = recall(store, stream, question.question, settings, cap)
            text = render_view(view, cap)
            rounds.append(time.perf_counter() - started)
        tally.seconds[question.chat].append(statistics.median(rounds))
        shown = [line.index for window in view.windows for line in window]
        tally.add(question, shown, len(text.encode()))


class Baseline:
    """Plain BM25 over every message's words: the top 5, each with two neighbours."""

    def __init__(self, store: EventStore, stream: StreamId) -> None:
        from rank_bm25 import BM25Okapi  # the baseline alone uses it

        meta = store.meta(stream)
        assert meta is not None
        self.lines: list[str] = []
        self.indexes: list[int] = []
        documents: list[list[str]] = []
        for index, message in store.messages(stream, 0, meta.messages):
            if message.deleted:
                continue
            text = indexed_text(message.content, message.attachments)
            self.indexes.append(index)
            at = datetime.fromtimestamp(message.posted.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")
            line = f"{at} {message.posted.author_name}: {' '.join(text.split())}"
            self.lines.append(line.encode()[:BASELINE_MESSAGE_BYTES].decode(errors="ignore"))
            documents.append(terms(text) or [""])
        self.bm25 = BM25Okapi(documents)
        self._ranked: dict[str, list[int]] = {}

    def ask(self, questions: Sequence[Question], tally: Tally) -> None:
        for question in questions:
            scores = self.bm25.get_scores(terms(question.question))
            best = sorted(range(len(scores)), key=lambda i: -scores[i])[:BASELINE_HITS]
            shown: set[int] = set()
            for place in best:
                low = max(place - BASELINE_CONTEXT, 0)
                shown.update(range(low, min(place + BASELINE_CONTEXT + 1, len(self.lines))))
            text = "\n".join(self.lines[place] for place in sorted(shown))
            tally.add(question, (self.indexes[place] for place in shown), len(text.encode()))

    def ranked(self, question: Question) -> list[int]:
        """The messages that share a word with the question, best BM25 score first
        (worked out once a question)."""
        found = self._ranked.get(question.id)
        if found is None:
            scores = self.bm25.get_scores(terms(question.question))
            order = sorted(range(len(scores)), key=lambda i: -scores[i])
            found = self._ranked[question.id] = [i for i in order if scores[i] > 0]
        return found

    def ask_within(self, question: Question, budget: int, tally: Tally) -> None:
        """BM25 given `budget` bytes: hits in score order, each with its two neighbours
        on either side, added while the lines shown fit (joined by newlines)."""
        shown: set[int] = set()
        used = 0
        for place in self.ranked(question):
            low = max(place - BASELINE_CONTEXT, 0)
            window = [p for p in range(low, min(place + BASELINE_CONTEXT + 1, len(self.lines)))
                      if p not in shown]
            size = sum(len(self.lines[p].encode()) + 1 for p in window)
            if used + size > budget + 1:  # the first line has no newline before it
                break
            shown.update(window)
            used += size
        tally.add(question, (self.indexes[place] for place in shown), max(used - 1, 0))


def ask_curve(
    store: EventStore,
    stream: StreamId,
    questions: Sequence[Question],
    budgets: Sequence[int],
    baseline: Baseline | None,
    curve: dict[int, dict[str, Tally]],
) -> None:
    """Each question at each byte budget: Eva's recall as it renders within it, and BM25
    given exactly the bytes Eva's answer used for the same question."""
    settings = MemorySettings()
    for budget in budgets:
        tallies = curve.setdefault(budget, {"eva": Tally(), "bm25": Tally()})
        for question in questions:
            view = recall(store, stream, question.question, settings, budget)
            text = render_view(view, budget)
            used = len(text.encode())
            tallies["eva"].add(
                question, [line.index for window in view.windows for line in window], used
            )
            if baseline is not None:
                baseline.ask_within(question, used, tallies["bm25"])


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def report(tallies: dict[str, Tally]) -> dict[str, Any]:
    """Print the table of hit rates and return every figure."""
    names = list(tallies)
    columns = [f"{name} {half}" for name in names for half in HALVES]
    header = f"{'kind':<10}" + "".join(f"{column:>22}" for column in columns)
    print(header)
    rows: dict[str, Any] = {}
    for kind in (*KINDS, None):
        label = kind or "all"
        cells = []
        for name in names:
            for half in HALVES:
                tally = tallies[name]
                rate, asked = tally.rate(half, kind), tally.count(half, kind)
                cells.append(f"{rate:>14.0%} of {asked:>4}")
                rows.setdefault(label, {})[f"{name} {half}"] = round(rate, 3)
        print(f"{label:<10}" + "".join(f"{cell:>22}" for cell in cells))
    figures: dict[str, Any] = {"rates": rows}
    for name, tally in tallies.items():
        overall = tally.rate()
        mean_bytes = statistics.mean(tally.sizes) if tally.sizes else 0
        print(
            f"{name}: {overall:.1%} of {tally.count()} questions found; "
            f"{mean_bytes:,.0f} bytes per answer (p90 {percentile(tally.sizes, 0.9):,.0f})"
        )
        figures[name] = {
            "found": round(overall, 4),
            "questions": tally.count(),
            "bytes_mean": round(mean_bytes),
            "bytes_p90": percentile(tally.sizes, 0.9),
        }
        for chat, seconds in tally.seconds.items():
            p50, p99 = percentile(seconds, 0.5), percentile(seconds, 0.99)
            print(f"{name}: recall on {chat} p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
            figures[name][chat] = {"p50_ms": round(p50 * 1000, 2), "p99_ms": round(p99 * 1000, 2)}
    return figures


def report_curve(curve: dict[int, dict[str, Tally]]) -> dict[str, Any]:
    """Print hit rate against bytes shown, Eva beside BM25 at the same bytes, per split;
    return the figures, per kind too."""
    print(f"{'bytes':>7}" + "".join(
        f"{name + ' ' + half:>18}" for name in ("eva", "bm25") for half in HALVES
    ) + f"{'eva bytes used':>16}")
    figures: dict[str, Any] = {}
    for budget, tallies in sorted(curve.items()):
        cells = [tallies[name].rate(half) for name in ("eva", "bm25") for half in HALVES]
        used = statistics.mean(tallies["eva"].sizes) if tallies["eva"].sizes else 0
        print(f"{budget:>7,}" + "".join(f"{cell:>18.0%}" for cell in cells) + f"{used:>16,.0f}")
        figures[str(budget)] = {
            name: {
                half: round(tallies[name].rate(half), 3) for half in (*HALVES, None)
                if half is not None
            } | {"all": round(tallies[name].rate(), 3)} | {
                kind: round(tallies[name].rate(kind=kind), 3) for kind in KINDS
            }
            for name in ("eva", "bm25")
        } | {
            "eva_bytes_mean": round(used),
            "bm25_bytes_mean": round(statistics.mean(tallies["bm25"].sizes))
            if tallies["bm25"].sizes else 0,
        }
    return figures


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--chat", choices=("demo", "komodo"), action="append")
    parser.add_argument("--cap", type=int, default=RECALL_CAP_BYTES, help="bytes per answer")
    parser.add_argument("--no-baseline", action="store_true", help="skip the BM25 baseline")
    parser.add_argument("--show-misses", action="store_true", help="list what Eva missed")
    parser.add_argument(
        "--curve", default="2000,4000,6000,8000,12000",
        help="byte budgets to report hit rate against, BM25 given the same bytes ('' skips)",
    )
    args = parser.parse_args(argv)
    budgets = [int(part) for part in args.curve.split(",") if part.strip()]
    curve: dict[int, dict[str, Tally]] = {}
    chats = args.chat or ["demo", "komodo"]
    questions = load_questions(args.questions, chats)
    tallies = {"eva": Tally()} | ({} if args.no_baseline else {"bm25": Tally()})
    with tempfile.TemporaryDirectory() as root:
        for chat in chats:
            asked = [q for q in questions if q.chat == chat]
            opened = chat_store(chat, Path(root)) if asked else None
            if opened is None:
                if asked:
                    print(f"{chat}: the shared sample is absent; its questions are skipped")
                continue
            store, stream = opened
            ask_eva(store, stream, asked, args.cap, tallies["eva"])
            baseline = None if args.no_baseline else Baseline(store, stream)
            if baseline is not None:
                baseline.ask(asked, tallies["bm25"])
            ask_curve(store, stream, asked, budgets, baseline, curve)
    figures = report(tallies)
    if curve:
        figures["by_bytes"] = report_curve(curve)
    if args.show_misses:
        for question in tallies["eva"].misses:
            print(f"  missed {question.id} ({question.kind}, {question.half}): {question.question}")
    print(json.dumps(figures).replace("NaN", "null"))
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
