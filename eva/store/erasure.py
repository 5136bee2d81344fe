# Physical erasure: rewrite stored events without their words, and prove no byte is left.
#
# Shell: writes through the store's backend and reads files. The decisions
# (which events, what they become) are the core's (eva.core.forget).
# Invariants: a stream's rewrite is one transaction with its new seals and its
# record, and rewriting twice is harmless; the file scan reads every byte of
# every file under the directory.
from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Container
from dataclasses import dataclass, replace
from pathlib import Path

import ahocorasick

from eva.core import keys
from eva.core.chain import seal_from
from eva.core.events import AnyEvent, LogRewritten, encode_event
from eva.core.forget import join_corpus, joined_from, proof_texts, purge_plan
from eva.core.keys import StreamId
from eva.core.projection import Projector, indexed_text
from eva.core.tables import Tables
from eva.core.terms import terms
from eva.store.event_store import Batch, EventStore, read_messages, write_batch


def purge_stream(store: EventStore, stream: StreamId, now_ms: int | None = None) -> int:
    """Rewrite every event of the stream that holds words no projection uses; return how many.

    One transaction rewrites them, seals the log again from the first of them
    (eva.core.chain) and records which positions it rewrote (LogRewritten): a
    crash leaves all of it or none.
    """
    with store.backend.reading() as tables:
        plan = list(purge_plan(tables, stream))
    if plan:
        at_ms = int(time.time() * 1000) if now_ms is None else now_ms
        store.backend.write(_Rewrite(stream, plan, at_ms))
    return len(plan)


@dataclass(frozen=True, slots=True)
class _Rewrite:
    """The write transaction of a stream's rewritten events (safe to run again)."""

    stream: StreamId
    plan: list[tuple[int, AnyEvent]]
    at_ms: int

    def __call__(self, tables: Tables) -> None:
        for seq, event in self.plan:
            tables.put("events", keys.event_key(self.stream, seq), encode_event(event))
        positions = tuple(sorted(seq for seq, _ in self.plan))
        resealed = seal_from(tables, self.stream, positions[0])
        record = LogRewritten(at_ms=self.at_ms, positions=positions, resealed=resealed)
        projector = Projector(tables)
        write_batch(tables, projector, Batch(self.stream, [record]))
        projector.flush()


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


def surviving_texts(store: EventStore, guilds: Container[int] | None = None) -> list[str]:
    """The texts of every message still stored, of everyone, in every channel (of
    `guilds` only, if given), and their search terms as the recall index keeps them
    (words folded in case and accents)."""
    texts: list[str] = []
    for meta in store.streams():
        if guilds is not None and meta.guild_id not in guilds:
            continue
        stream = StreamId(meta.guild_id, meta.channel_id)
        with store.backend.reading() as tables:
            for _, message in read_messages(tables, stream, 0, meta.messages):
                texts.append(message.content)
                texts.extend(message.attachments)
                texts.append(" ".join(terms(indexed_text(message.content, message.attachments))))
    return texts


def prove_erased(store: EventStore, data_dir: Path, forgotten: list[str]) -> ScanReport:
    """Scan every file of `data_dir` for the forgotten texts that prove anything
    (`proof_texts`); a text found that reads across the joins of surviving texts
    (`joined_from`) does not count as found."""
    surviving = surviving_texts(store)
    texts = proof_texts(forgotten, surviving)
    scan = scan_files(data_dir, texts)
    if not scan.hits:
        return scan
    corpus = join_corpus(surviving)
    return scan.without({at for at, _ in scan.found if joined_from(texts[at], corpus)})
