# Replay against the live store: rebuild each stream and compare, byte for byte.
#
# One read transaction per stream, so the events and the live projections it
# compares are the same snapshot even while a writer keeps appending. The
# log's seals are checked as the rebuild reads it (eva.core.chain). A long
# stream's recall index is rebuilt by an index worker process from the index
# changes this process hands it, while this process rebuilds the rest and
# digests the live tables; the two halves meet in the digests. A short
# stream is all done here: starting a worker would cost more than it saves.
# `repair_stream` writes a rebuild over the live projection tables that differ
# from it (after a projection's layout changed, or damage), in one write that
# first checks the log still ends where the rebuild read it.
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from eva.core import keys
from eva.core.chain import ChainCheck, ChainChecker, check_stream
from eva.core.digest import (
    TableDigests,
    combined_digest,
    differing_tables,
    encoded_digest,
    encoded_rows,
)
from eva.core.events import decode_event
from eva.core.keys import CHAIN, DISCORD_IDS, PROJECTION_TABLES, StreamId
from eva.core.projection import Rejected, read_meta
from eva.core.recall_index import POSTINGS
from eva.core.replay import discord_id_rows, projection_rows, rebuild, rebuilt_digests
from eva.core.tables import Tables
from eva.store.event_store import EventStore
from eva.store.index_worker import IndexWorker, open_index_worker

# From this many events on, a stream's recall index is rebuilt in a worker.
INDEX_WORKER_MIN_EVENTS = 16384


@dataclass(frozen=True, slots=True)
class ReplayResult:
    stream: StreamId
    events: int
    live_digest: str
    rebuilt_digest: str
    differing: tuple[str, ...]
    log: ChainCheck | None = None  # the log's seals, if they were checked
    damaged: str = ""  # why the log could not be replayed at all

    @property
    def ok(self) -> bool:
        sealed = self.log is None or self.log.ok
        return (
            sealed
            and not self.damaged
            and not self.differing
            and self.live_digest == self.rebuilt_digest
        )


def replay_stream(
    store: EventStore,
    stream: StreamId,
    progress: Callable[[int], None] | None = None,
    *,
    check_seals: bool = True,
    index_worker_min_events: int = INDEX_WORKER_MIN_EVENTS,
) -> ReplayResult:
    """Rebuild one stream's projections from its events and compare with the live ones,
    checking the log's seals on the way (eva.core.chain) unless told not to.

    A log that cannot be replayed (an event that does not decode, or one the
    projections refuse) gives a result that says which event, never an error.
    """
    meta = store.meta(stream)
    try:
        if meta is None or meta.position < index_worker_min_events:
            return _replay(store, stream, progress, None, check_seals)
        with open_index_worker() as worker:
            return _replay(store, stream, progress, worker, check_seals)
    except (msgspec.DecodeError, msgspec.ValidationError, Rejected) as error:
        return _damaged(store, stream, error)


def _damaged(store: EventStore, stream: StreamId, error: Exception) -> ReplayResult:
    """The result for a log the rebuild stopped in: the first event that does not
    decode, or else what the projections refused, with the seals' verdict."""
    prefix = keys.stream_prefix(stream)
    with store.backend.reading() as tables:
        log = check_stream(tables, stream)
        why = f"the rebuild stopped: {error}"
        for key, data in tables.scan("events", prefix, keys.prefix_end(prefix)):
            try:
                decode_event(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as failure:
                why = f"event {keys.seq_of(key)} does not decode ({failure})"
                break
    if log.broken is not None and why.startswith("the rebuild stopped"):
        why = f"{log.broken.why}; {why}"  # the seals name the event the rebuild tripped on
    return ReplayResult(stream, log.events, "", "", (), log, why)


def _replay(
    store: EventStore,
    stream: StreamId,
    progress: Callable[[int], None] | None,
    worker: IndexWorker | None,
    check_seals: bool,
) -> ReplayResult:
    events, live, rebuilt, log = _rebuild_and_digest(store, stream, progress, worker, check_seals)
    if worker is not None:  # the postings were rebuilt there
        rebuilt[POSTINGS] = worker.compare() or live[POSTINGS]
    return ReplayResult(
        stream=stream,
        events=events,
        live_digest=combined_digest(live),
        rebuilt_digest=combined_digest(rebuilt),
        differing=tuple(differing_tables(live, rebuilt)),
        log=log,
    )


def _rebuild_and_digest(
    store: EventStore,
    stream: StreamId,
    progress: Callable[[int], None] | None,
    worker: IndexWorker | None,
    check_seals: bool,
) -> tuple[int, TableDigests, TableDigests, ChainCheck | None]:
    """Events applied, live and rebuilt digests, the seals' verdict: all but the
    worker's part.

    The tables it builds are dropped when it returns, while the worker may
    still be finishing.
    """
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    with store.backend.reading() as tables:
        # The live rows first, so that the worker reads the live postings while
        # the rebuild here is under way, and only compares once it has the last
        # of its buffers. The stream's Discord ids are looked up afterwards, under
        # the keys the rebuild made (found without reading the log twice).
        live_rows = projection_rows(tables, stream, discord_ids=())
        encoded = {table: encoded_rows(rows) for table, rows in live_rows.items()}
        if worker is not None:
            worker.send_live(encoded[POSTINGS])
        events = tables.scan("events", prefix, end)
        checker = ChainChecker(stream, tables.scan(CHAIN, prefix, end)) if check_seals else None
        rebuilt_tables = rebuild(
            stream,
            events if checker is None else checker.follow(events),
            progress,
            None if worker is None else worker.write,
        )
        log = None if checker is None else checker.finish()
        made = (key for key, _ in rebuilt_tables.rows(DISCORD_IDS))
        live_rows[DISCORD_IDS] = discord_id_rows(tables, stream, made)
        encoded[DISCORD_IDS] = encoded_rows(live_rows[DISCORD_IDS])
    if worker is not None:
        _prepare_the_latest(worker)
        worker.ask_compare()  # it compares while the digests are made here
    live: TableDigests = {table: encoded_digest(data) for table, data in encoded.items()}
    rebuilt = rebuilt_digests(rebuilt_tables, live_rows, live)
    meta = read_meta(rebuilt_tables, stream)
    return 0 if meta is None else meta.position, live, rebuilt, log


def _prepare_the_latest(worker: IndexWorker) -> None:
    """Prepare here the buffers the worker has not started, from the latest back,
    until it has started them all: the two processes meet about in the middle."""
    while (taken := worker.take_last()) is not None:
        slot, postings = taken
        worker.fill(slot, postings.prepare())


class LogMovedError(RuntimeError):
    """The stream's log grew while its projections were being rebuilt for a repair."""


@dataclass(frozen=True, slots=True)
class RepairResult:
    stream: StreamId
    events: int
    rewritten: tuple[str, ...]  # the projection tables written anew, in table order


def repair_stream(
    store: EventStore, stream: StreamId, progress: Callable[[int], None] | None = None
) -> RepairResult:
    """Make one stream's projections exactly what its events give.

    Each projection table of the stream that differs from a rebuild is
    replaced by the rebuilt one, in one write transaction; a stream that
    matches is left alone. Raises `LogMovedError`, writing nothing, when
    events were appended to the stream after the rebuild read it: run it
    while nothing else writes to the data directory.
    """
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    with store.backend.reading() as tables:
        rebuilt = rebuild(stream, tables.scan("events", prefix, end), progress)
        made = [key for key, _ in rebuilt.rows(DISCORD_IDS)]
        live_rows = projection_rows(tables, stream, made)
        differing = tuple(
            table for table in PROJECTION_TABLES if not rebuilt.holds(table, live_rows[table])
        )
    meta = read_meta(rebuilt, stream)
    events = 0 if meta is None else meta.position
    if not differing:
        return RepairResult(stream, events, ())

    def rewrite(tables: Tables) -> None:
        after = tables.scan("events", keys.event_key(stream, events), end)
        if next(iter(after), None) is not None:
            raise LogMovedError(f"{stream}: events were added while it was rebuilt")
        live = projection_rows(tables, stream, made)
        for table in differing:
            for key, _ in live[table]:
                tables.delete(table, key)
            tables.put_many(table, rebuilt.rows(table))

    store.backend.write(rewrite)
    return RepairResult(stream, events, differing)
