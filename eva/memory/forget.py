# Forget me: erase a person's messages and every line made from them, for real, and prove it.
#
# Shell: drives the steps over a store. Per channel (inside the channel's
# actor when the bot runs): the tombstone, the erased slots, the stale lines
# made again, the row published again. Then for the whole data directory: the
# stored events rewritten without the words, the compacting copy (writes
# paused), the scan of every file for the person's texts, and the audit record.
# Invariants: every step can run again after a crash with the same end state;
# the person's texts live only in this process's memory while it runs; a scan
# that finds anything is a loud failure, and the forget then stays pending.
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from eva.core.events import (
    ErasureUnproven,
    ForgetApplied,
    ForgetBy,
    ForgetRequested,
    LineWritten,
    MessagesErased,
)
from eva.core.forget import person_messages, stored_texts
from eva.core.keys import StreamId
from eva.core.projection import Rejected, read_meta
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer, Summarizer
from eva.memory.compress import Append
from eva.memory.publish import LineSizes, publish
from eva.memory.remake import remake
from eva.memory.view import channel_zone
from eva.store.erasure import prove_erased, purge_stream
from eva.store.event_store import Batch, EventStore
from eva.store.lmdb_kv import DATA_FILE, LmdbBackend
from eva.store.writer_lock import LOCK_FILE

log = logging.getLogger(__name__)

Pause = Callable[[], AbstractAsyncContextManager[None]]


class ErasureFailed(RuntimeError):
    """Words of a forgotten person were still found after the forget: never a quiet failure."""


@dataclass(slots=True)
class StreamErased:
    """What erasing one person did in one channel."""

    stream: StreamId
    messages: int = 0
    lines: int = 0
    model_tasks: int = 0
    texts: list[str] = field(default_factory=list)
    resumed: bool = False  # a forget left pending here by an earlier run
    # files an earlier run's check found the person's words in (ErasureUnproven)
    unproven_in: tuple[str, ...] = ()


@dataclass(slots=True)
class ForgetReport:
    """What a forget did, for the person asking and for the audit (no content)."""

    person_hash: str
    channels: list[str] = field(default_factory=list)
    messages_erased: int = 0
    lines_remade: int = 0
    model_tasks: int = 0
    events_rewritten: int = 0
    texts_checked: int = 0
    leftover_hits: int = 0
    # texts erased from the log by an earlier, interrupted run could not be looked for again
    unchecked: bool = False
    data_bytes_before: int = 0
    data_bytes_after: int = 0
    keys_destroyed: int = 0  # the person's keys in the servers they are forgotten in
    erase_s: float = 0.0
    purge_s: float = 0.0
    compact_s: float = 0.0
    scan_s: float = 0.0

    def count(self, erased: StreamErased) -> None:
        """Add one channel's erasure (counts only)."""
        self.channels.append(str(erased.stream))
        self.messages_erased += erased.messages
        self.lines_remade += erased.lines
        self.model_tasks += erased.model_tasks


async def erase_in_stream(
    store: EventStore,
    stream: StreamId,
    person: str,
    by: ForgetBy,
    summarizer: Summarizer,
    append: Append,
    settings: MemorySettings,
    now_ms: int,
    sizes: LineSizes | None = None,
) -> StreamErased | None:
    """Erase the person's messages in one channel and remake the lines above them.

    None when the channel holds no words of the person (not even in deleted
    messages not yet purged) and no forget of theirs is pending there. Safe
    to run again: what is done is not done twice.
    """
    meta = store.meta(stream)
    if meta is None:
        return None
    with store.backend.reading() as tables:
        indexes = person_messages(tables, stream, person, store.hashes)
        # Their deleted messages count too: the log holds their words until purged.
        texts = stored_texts(tables, stream, person, store.hashes)
        if not indexes and not texts and person not in meta.forgetting:
            return None
    result = StreamErased(stream, len(indexes), texts=texts)
    if person in meta.forgetting:
        result.resumed = True
        result.messages, result.lines, result.unproven_in = _done_before(
            store, stream, person, meta.position
        )
        result.messages += len(indexes)
    else:
        await append(stream, [ForgetRequested(at_ms=now_ms, person_hash=person, by=by)])
    if indexes:
        await append(stream, [MessagesErased(at_ms=now_ms, person_hash=person, indexes=indexes)])
    # The fallback makes lines within the channel's line limit, or they could not land.
    fallback = OfflineSummarizer(settings.line_limit)
    stats = await remake(store, stream, summarizer, append, settings, now_ms, fallback=fallback)
    result.lines += (
        stats.leaves_verbatim + stats.merges_glue + stats.leaves_model + stats.merges_model
    )
    result.model_tasks = stats.leaves_model + stats.merges_model
    remade = store.meta(stream)
    if remade is not None and remade.row_seq >= 0:
        sizes = sizes if sizes is not None else LineSizes()
        sizes.clear()
        tz = channel_zone(remade, settings)
        await publish(store, stream, append, settings, now_ms, "forget", tz, sizes)
    return result


def _done_before(
    store: EventStore, stream: StreamId, person: str, position: int
) -> tuple[int, int, tuple[str, ...]]:
    """Messages erased and lines made in the stream since the person's pending tombstone,
    and the files a check found their words in since then.

    What an interrupted run did, so that a resumed forget's audit record
    counts the whole forget, not only the part after the crash.
    """
    last = store.event(stream, position - 1)
    if isinstance(last, ForgetRequested) and last.person_hash == person:
        return 0, 0, ()  # the tombstone was just written: nothing done yet
    messages = lines = 0
    files: set[str] = set()
    for _, event in store.events(stream):
        match event:
            case ForgetRequested() if event.person_hash == person:
                messages = lines = 0
                files = set()
            case MessagesErased() if event.person_hash == person:
                messages += len(event.indexes)
            case ErasureUnproven() if event.person_hash == person:
                files.update(event.files)
            case LineWritten():
                lines += 1
    return messages, lines, tuple(sorted(files))


OWN_FILES = frozenset({DATA_FILE, "lock.mdb", LOCK_FILE})
"""The files of a data directory that are Eva's: a forget rewrites them."""


def _named(files: tuple[str, ...], data_dir: Path) -> str:
    return ", ".join(str(data_dir / name) for name in files) or str(data_dir)


@asynccontextmanager
async def no_pause() -> AsyncIterator[None]:
    """For a process with no other writer."""
    yield


async def finish_forget(
    store: EventStore,
    data_dir: Path,
    person: str,
    erased: Sequence[StreamErased],
    append: Append,
    pause: Pause,
    now_ms: int,
    report: ForgetReport,
) -> ForgetReport:
    """Rewrite the log without the words, compact the file, prove it, and record the forget."""
    started = time.perf_counter()
    streams = [e.stream for e in erased]
    async with pause():
        for stream in streams:
            report.events_rewritten += purge_stream(store, stream).rewritten
        report.purge_s = time.perf_counter() - started
        started = time.perf_counter()
        backend = store.backend
        if isinstance(backend, LmdbBackend):
            report.data_bytes_before, report.data_bytes_after = backend.compact()
        report.compact_s = time.perf_counter() - started
    started = time.perf_counter()
    forgotten = [text for e in erased for text in e.texts]
    scan = prove_erased(store, data_dir, forgotten)
    report.scan_s = time.perf_counter() - started
    report.texts_checked, report.leftover_hits = scan.texts, scan.hits
    if scan.hits:
        files = scan.files_found
        unproven = ErasureUnproven(
            at_ms=now_ms, person_hash=person, files=files, texts=scan.texts_found, hits=scan.hits
        )
        for e in erased:
            await append(e.stream, [unproven])
        raise ErasureFailed(
            f"forget of {person}: {scan.texts_found} of {scan.texts} texts still found "
            f"({scan.hits} times) in {_named(files, data_dir)}; the forget stays pending"
        )
    # Words an earlier check found in a file Eva does not own can be looked for no more
    # (the log holds them no longer): the forget waits until that file is gone.
    kept = sorted(
        {
            name
            for e in erased
            for name in e.unproven_in
            if name not in OWN_FILES and (data_dir / name).exists()
        }
    )
    if kept:
        raise ErasureFailed(
            f"forget of {person}: an earlier check found their words in "
            f"{_named(tuple(kept), data_dir)}, which is still there; Eva erases only its own "
            "files: delete it or move it out of the data directory, then run "
            "`eva forget --resume`; the forget stays pending"
        )
    report.unchecked = any(e.resumed and not e.texts for e in erased)
    report.keys_destroyed += destroy_keys(store, person, {e.stream.guild_id for e in erased})
    for e in erased:
        await append(
            e.stream,
            [ForgetApplied(at_ms=now_ms, person_hash=person, messages=e.messages, lines=e.lines)],
        )
    return report


def destroy_keys(store: EventStore, person: str, guilds: Iterable[int]) -> int:
    """Destroy the person's keys in each of `guilds` none of whose channels holds their words
    any more; how many keys there were. A copy of the data taken before (a backup) then
    shows none of their words to anyone: they are sealed with those keys."""
    sealer = store.sealer
    if sealer is None:
        return 0
    gone = 0
    for guild in sorted(guilds):
        channels = [
            StreamId(meta.guild_id, meta.channel_id)
            for meta in store.streams()
            if meta.guild_id == guild
        ]
        if not holding_words(store, person, channels, pending_too=True):
            gone += sealer.destroy_person(guild, person)
    return gone


async def forget(
    store: EventStore,
    data_dir: Path,
    person: str,
    streams: Sequence[StreamId],
    by: ForgetBy,
    summarizer: Summarizer,
    append: Append,
    settings: MemorySettings,
    now_ms: int,
    pause: Pause = no_pause,
) -> ForgetReport:
    """The whole forget of one person over `streams`, in one process with no other writer."""
    report = ForgetReport(person)
    started = time.perf_counter()
    request_everywhere(store, person, streams, by, now_ms)
    erased = []
    for stream in streams:
        result = await erase_in_stream(
            store, stream, person, by, summarizer, append, settings, now_ms
        )
        if result is not None:
            erased.append(result)
            report.count(result)
    report.erase_s = time.perf_counter() - started
    if not erased:
        return report
    return await finish_forget(store, data_dir, person, erased, append, pause, now_ms, report)


def request_everywhere(
    store: EventStore, person: str, streams: Sequence[StreamId], by: ForgetBy, now_ms: int
) -> int:
    """Append the tombstone in every channel holding the person's words, in one commit;
    how many channels got one (none already pending there).

    Before anything is erased, so that a crash at any later step leaves the
    forget pending in every channel it must reach, not only in those it had
    reached (`pending_forgets` finds it there).
    """
    return append_tombstones(store, person, holding_words(store, person, streams), by, now_ms)


def holding_words(
    store: EventStore, person: str, streams: Sequence[StreamId], *, pending_too: bool = False
) -> list[StreamId]:
    """The channels of `streams` that hold words of the person and no pending forget of
    theirs yet (or, `pending_too`, whether one is pending or not); read only: it may run
    while others write."""
    found = []
    with store.backend.reading() as tables:
        for stream in streams:
            meta = read_meta(tables, stream)
            if meta is None or (person in meta.forgetting and not pending_too):
                continue
            if person_messages(tables, stream, person, store.hashes) or stored_texts(
                tables, stream, person, store.hashes
            ):
                found.append(stream)
    return found


def append_tombstones(
    store: EventStore, person: str, streams: Sequence[StreamId], by: ForgetBy, now_ms: int
) -> int:
    """A tombstone in each of `streams` where none of the person's is pending, in one
    commit; how many were appended."""
    tombstone = ForgetRequested(at_ms=now_ms, person_hash=person, by=by)
    batches = []
    with store.backend.reading() as tables:
        for stream in streams:
            meta = read_meta(tables, stream)
            if meta is not None and person not in meta.forgetting:
                batches.append(Batch(stream, [tombstone]))
    for result in store.append_many(batches) if batches else []:
        if isinstance(result, Rejected):
            raise result
    return len(batches)


def pending_forgets(store: EventStore) -> dict[str, list[StreamId]]:
    """Forgets a crash left unfinished: person hash -> the channels where it is pending."""
    pending: dict[str, list[StreamId]] = {}
    for meta in store.streams():
        for person in meta.forgetting:
            pending.setdefault(person, []).append(StreamId(meta.guild_id, meta.channel_id))
    return pending
