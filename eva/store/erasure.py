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
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from pathlib import Path

import ahocorasick

from eva.core import keys
from eva.core.chain import seal_from
from eva.core.events import AnyEvent, LogRewritten, decode_event
from eva.core.forget import (
    join_corpus,
    joined_from,
    pieces,
    proof_texts,
    purge_plan,
    purged_texts,
)
from eva.core.keys import StreamId
from eva.core.projection import Projector, indexed_text, read_meta
from eva.core.sealed_events import event_texts
from eva.core.state import StreamMeta
from eva.core.tables import Tables
from eva.core.terms import terms
from eva.store.event_store import (
    Batch,
    EventStore,
    Sealer,
    read_messages,
    stored_events,
    write_batch,
)
from eva.store.lmdb_kv import LmdbBackend


@dataclass(frozen=True, slots=True)
class Purged:
    """What a purge of one stream did."""

    rewritten: int
    """Events rewritten without their words."""
    texts: list[str]
    """The message texts it took out of the log (what a file scan then looks for)."""


def purge_stream(store: EventStore, stream: StreamId, now_ms: int | None = None) -> Purged:
    """Rewrite every event of the stream that holds words no projection uses.

    One transaction rewrites them, seals the log again from the first of them
    (eva.core.chain) and records which positions it rewrote (LogRewritten): a
    crash leaves all of it or none. The record is written too when nothing is
    left to rewrite but deletions or edits wait for a purge (StreamMeta.unpurged),
    which it clears.
    """
    with store.backend.reading() as tables:
        plan = list(purge_plan(tables, stream))
        meta = read_meta(tables, stream)
    if plan or (meta is not None and meta.unpurged):
        at_ms = int(time.time() * 1000) if now_ms is None else now_ms
        rewrites = [(seq, after) for seq, _, after in plan]
        store.backend.write(_Rewrite(stream, rewrites, at_ms, store.sealer))
    texts = [text for _, before, after in plan for text in purged_texts(before, after)]
    return Purged(len(plan), texts)


def unpurged(store: EventStore) -> list[StreamMeta]:
    """The streams whose log still holds texts deleted or edited away
    (StreamMeta.unpurged)."""
    return [meta for meta in store.streams() if meta.unpurged]


@dataclass(frozen=True, slots=True)
class PurgeRound:
    """What `purge_ready` did: streams purged, the texts taken out, streams still waiting."""

    purged: int
    texts: list[str]
    waiting: int


def purge_ready(store: EventStore) -> PurgeRound:
    """Purge every stream whose deleted and edited texts wait, once its lines are made
    again (StreamMeta.stale), and compact the data file if any was: LMDB keeps the old
    bytes in freed pages until then. Nothing else may write meanwhile."""
    texts: list[str] = []
    purged = waiting = 0
    for meta in unpurged(store):
        if meta.stale:
            waiting += 1
        else:
            texts += purge_stream(store, StreamId(meta.guild_id, meta.channel_id)).texts
            purged += 1
    backend = store.backend
    if purged and isinstance(backend, LmdbBackend):
        backend.compact()
    return PurgeRound(purged, texts, waiting)


@dataclass(frozen=True, slots=True)
class _Rewrite:
    """The write transaction of a stream's rewritten events (safe to run again)."""

    stream: StreamId
    plan: list[tuple[int, AnyEvent]]
    at_ms: int
    sealer: Sealer | None = None

    def __call__(self, tables: Tables) -> None:
        events = [event for _, event in self.plan]
        rewritten = stored_events(tables, self.stream, events, self.sealer)
        for (seq, _), data in zip(self.plan, rewritten, strict=True):
            tables.put("events", keys.event_key(self.stream, seq), data)
        positions = tuple(sorted(seq for seq, _ in self.plan))
        resealed = seal_from(tables, self.stream, positions[0]) if positions else 0
        record = LogRewritten(at_ms=self.at_ms, positions=positions, resealed=resealed)
        projector = Projector(tables)
        write_batch(tables, projector, Batch(self.stream, [record]), self.sealer)
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
    # (where a text found stands in that list, a file holding it: its path in the directory)
    found_in: tuple[tuple[int, str], ...] = ()

    @property
    def files_found(self) -> tuple[str, ...]:
        """The files that hold any text found, by their paths within the directory."""
        return tuple(sorted({path for _, path in self.found_in}))

    def without(self, explained: set[int]) -> ScanReport:
        """This report, the texts found at the places `explained` counted as not found."""
        kept = tuple((at, times) for at, times in self.found if at not in explained)
        hits = sum(times for _, times in kept)
        found_in = tuple((at, path) for at, path in self.found_in if at not in explained)
        return replace(self, hits=hits, texts_found=len(kept), found=kept, found_in=found_in)


RELEASE_MESSAGES = 8192
"""Messages `surviving_texts` reads between two releases of the pages it read."""
SCAN_CHUNK = 16 << 20
"""Bytes of a file searched at a time by `scan_files`."""


LOG_OPENED = "(the log, opened with the keys)"
"""Where a text found in the opened log is said to be (`scan_files` with `log`)."""


def scan_files(
    directory: Path, texts: list[str], log: Iterable[str] = ()
) -> ScanReport:
    """Count every occurrence of each text's UTF-8 bytes in every file under `directory`,
    and in `log` (the texts of the directory's log as they read opened: sealed words are
    in no file as they are).

    A file is read `SCAN_CHUNK` bytes at a time, each chunk searched with the
    end of the one before it (one byte short of the longest text), so a text
    across two chunks is found once, and memory stays that of one chunk.
    """
    first_at: dict[str, int] = {}
    for at, text in enumerate(texts):
        if text:
            first_at.setdefault(text, at)
    patterns = list(first_at)
    if not patterns:
        return ScanReport(0, 0, 0, 0, 0)
    automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
    # Files are read as Latin-1, one character per byte, so the UTF-8 bytes of a
    # text are matched exactly, wherever they start.
    encoded = [text.encode().decode("latin-1") for text in patterns]
    longest = 0
    for number, text in enumerate(encoded):
        for piece in pieces(text):
            automaton.add_word(piece, number)
            longest = max(longest, len(piece))
    automaton.make_automaton()
    keep = longest - 1  # of a chunk, searched again with the next
    files = total = hits = 0
    found: Counter[int] = Counter()
    found_in: set[tuple[int, str]] = set()

    def search(within: str, chunks: Iterable[bytes]) -> None:
        nonlocal total, hits
        tail = ""
        for chunk in chunks:
            total += len(chunk)
            searched = tail + chunk.decode("latin-1")
            for end, number in automaton.iter(searched):
                if end >= len(tail):  # one ending in the tail was counted before
                    hits += 1
                    found[number] += 1
                    found_in.add((first_at[patterns[number]], within))
            tail = searched[max(len(searched) - keep, 0) :] if keep else ""

    for root, _, names in os.walk(directory):
        for name in names:
            files += 1
            path = Path(root) / name
            with open(path, "rb") as file:
                chunks = iter(partial(file.read, SCAN_CHUNK), b"")
                search(path.relative_to(directory).as_posix(), chunks)
    search(LOG_OPENED, _chunked(log))
    places = tuple(sorted((first_at[patterns[number]], times) for number, times in found.items()))
    return ScanReport(
        len(patterns), files, total, hits, len(found), places, tuple(sorted(found_in))
    )


def _chunked(texts: Iterable[str]) -> Iterator[bytes]:
    """Texts as UTF-8, a newline after each, in chunks of about `SCAN_CHUNK` bytes."""
    chunk: list[bytes] = []
    size = 0
    for text in texts:
        data = text.encode() + b"\n"
        chunk.append(data)
        size += len(data)
        if size >= SCAN_CHUNK:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


def log_texts(store: EventStore) -> Iterator[str]:
    """The texts of every event of every stream as they read opened (eva.core.sealed_events
    .event_texts), read a stream at a time."""
    for meta in store.streams():
        stream = StreamId(meta.guild_id, meta.channel_id)
        prefix = keys.stream_prefix(stream)
        with store.backend.reading() as tables:
            for count, (_, data) in enumerate(
                tables.scan("events", prefix, keys.prefix_end(prefix))
            ):
                yield from event_texts(decode_event(data))
                if count % RELEASE_MESSAGES == RELEASE_MESSAGES - 1:
                    store.backend.release_pages()


def surviving_texts(
    store: EventStore, guilds: Container[int] | None = None, channel: int | None = None
) -> Iterator[str]:
    """The texts of every message still stored, of everyone, in every channel (of
    `guilds` only, if given), and their search terms as the recall index keeps them
    (words folded in case and accents); read a channel at a time as they are asked for."""
    for meta in store.streams():
        if guilds is not None and meta.guild_id not in guilds:
            continue
        if channel is not None and meta.channel_id != channel:
            continue
        stream = StreamId(meta.guild_id, meta.channel_id)
        with store.backend.reading() as tables:
            for count, (_, message) in enumerate(read_messages(tables, stream, 0, meta.messages)):
                yield message.content
                yield from message.attachments
                yield " ".join(terms(indexed_text(message.content, message.attachments)))
                if count % RELEASE_MESSAGES == RELEASE_MESSAGES - 1:
                    store.backend.release_pages()  # the pages read so far (a long channel)


PROOF_TEXTS_MOST = 60_000
"""Texts of a guild that left a directory (moved or erased) it is scanned for, at most: a
guild of more is checked by an even spread of them (a page kept by mistake holds many
messages, so it is found all the same), and the scan's memory stays bounded."""
TEXTS_PER_MESSAGE = 3
"""About how many texts `surviving_texts` gives a message (its text, its search terms and
any attachment)."""


def texts_of_guilds(
    store: EventStore, guilds: Container[int], most: int = PROOF_TEXTS_MOST,
    channels: int | None = None,
) -> list[str]:
    """The texts of the messages of the guilds that the store holds (of one channel of
    them, if `channels` names it), and their search terms: of every one, or of an even
    spread of them when there are more than `most`."""
    messages = sum(
        m.messages for m in store.streams()
        if m.guild_id in guilds and channels in (None, m.channel_id)
    )
    every = max(1, -(-messages * TEXTS_PER_MESSAGE // most))
    texts = surviving_texts(store, guilds, channels)
    return list(islice(texts, 0, None, every))[:most]


def prove_erased(store: EventStore, data_dir: Path, forgotten: list[str]) -> ScanReport:
    """Scan every file of `data_dir` for the forgotten texts that prove anything
    (`proof_texts`); a text found that reads across the joins of surviving texts
    (`joined_from`) does not count as found."""
    return scan_proof(store, data_dir, proof_texts(forgotten, surviving_texts(store)))


def scan_proof(store: EventStore, data_dir: Path, texts: list[str]) -> ScanReport:
    """`prove_erased` of texts `proof_texts` chose already."""
    scan = scan_files(data_dir, texts, log_texts(store))
    if not scan.hits:
        return scan
    corpus = join_corpus(surviving_texts(store))
    return scan.without({at for at, _ in scan.found if joined_from(texts[at], corpus)})
