# Physical erasure: rewrite stored events without their words, and prove no byte is left.
#
# Shell: writes through the store's backend and reads files. The decisions
# (which events, what they become) are the core's (eva.core.forget).
# Invariants: each rewrite batch is one transaction and rewriting twice is
# harmless; the file scan reads every byte of every file under the directory.
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import ahocorasick

from eva.core import keys
from eva.core.events import AnyEvent, encode_event
from eva.core.forget import purge_plan
from eva.core.keys import StreamId
from eva.core.tables import Tables
from eva.store.event_store import EventStore

REWRITE_CHUNK = 2048


def purge_stream(store: EventStore, stream: StreamId) -> int:
    """Rewrite every event of the stream that holds words no projection uses; return how many."""
    with store.backend.reading() as tables:
        plan = list(purge_plan(tables, stream))
    for start in range(0, len(plan), REWRITE_CHUNK):
        store.backend.write(_Rewrite(stream, plan[start : start + REWRITE_CHUNK]))
    return len(plan)


@dataclass(frozen=True, slots=True)
class _Rewrite:
    """One write transaction of rewritten events (safe to run again)."""

    stream: StreamId
    chunk: list[tuple[int, AnyEvent]]

    def __call__(self, tables: Tables) -> None:
        for seq, event in self.chunk:
            tables.put("events", keys.event_key(self.stream, seq), encode_event(event))


@dataclass(frozen=True, slots=True)
class ScanReport:
    """What a scan of a directory's files found."""

    texts: int
    files: int
    bytes: int
    hits: int
    texts_found: int
    # (where a text found stands in the list scanned for, times found), never the text
    found: tuple[tuple[int, int], ...] = ()

    def without(self, explained: set[int]) -> ScanReport:
        """This report, the texts found at the places `explained` counted as not found."""
        kept = tuple((at, times) for at, times in self.found if at not in explained)
        hits = sum(times for _, times in kept)
        return replace(self, hits=hits, texts_found=len(kept), found=kept)


def scan_files(directory: Path, texts: list[str]) -> ScanReport:
    """Count every occurrence of each text's UTF-8 bytes in every file under `directory`."""
    first_at: dict[str, int] = {}
    for at, text in enumerate(texts):
        if text:
            first_at.setdefault(text, at)
    patterns = list(first_at)
    if not patterns:
        return ScanReport(0, 0, 0, 0, 0)
    automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
    for number, text in enumerate(patterns):
        # Files are read as Latin-1, one character per byte, so the UTF-8 bytes
        # of a text are matched exactly, wherever they start.
        automaton.add_word(text.encode().decode("latin-1"), number)
    automaton.make_automaton()
    files = total = hits = 0
    found: Counter[int] = Counter()
    for root, _, names in os.walk(directory):
        for name in names:
            data = (Path(root) / name).read_bytes()
            files += 1
            total += len(data)
            for _, number in automaton.iter(data.decode("latin-1")):
                hits += 1
                found[number] += 1
    places = tuple(sorted((first_at[patterns[number]], times) for number, times in found.items()))
    return ScanReport(len(patterns), files, total, hits, len(found), places)
