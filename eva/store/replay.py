# Replay against the live store: rebuild each stream and compare, byte for byte.
#
# One read transaction per stream, so the events and the live projections it
# compares are the same snapshot even while a writer keeps appending. The
# log's seals are checked as the rebuild reads it (eva.core.chain). What a
# replay holds follows a batch of events and a chunk of rows, not the stream:
# the rebuild is written into a scratch LMDB environment of its own (in a
# temporary directory, removed after), a batch of events a transaction, while
# the events the projections read back come from the live log. Then each
# projection table is walked beside its rebuilt twin a chunk of rows at a
# time, compared and digested as it goes (eva.core.digest's digests, the same
# bytes). A long stream's recall index is rebuilt and compared beside the
# rest, in a child process (eva.store.replay_index), where a second core
# lets it. `repair_stream` writes a rebuild over the live projection tables that
# differ from it (after a projection's layout changed, or damage), in one write
# that first checks the log still ends where the rebuild read it.
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import lmdb
import msgspec

from eva.core import keys
from eva.core.chain import ChainCheck, ChainChecker, check_stream
from eva.core.digest import RowsDigest, TableDigests, combined_digest, differing_tables
from eva.core.events import decode_event
from eva.core.keys import ALL_TABLES, CHAIN, DISCORD_IDS, EVENTS, PROJECTION_TABLES, StreamId, Table
from eva.core.memtables import MemoryTables
from eva.core.projection import Projector, Rejected, read_meta
from eva.core.recall_index import POSTINGS, PostingBuffer
from eva.core.replay import apply_stored, projection_rows, rebuild
from eva.core.tables import Tables
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import DATA_FILE, LmdbBackend, LmdbTables, release_mapping
from eva.store.replay_index import IndexBeside, index_beside, may_fork_beside
from eva.store.scratch_env import open_scratch_env

REBUILD_BATCH = 4096
"""Events applied to the scratch environment in one of its transactions."""
MEMORY_REBUILD_EVENTS = 16384
"""A stream of fewer events is rebuilt in memory (a few MB at most), not in a scratch
environment on disk."""
INDEX_BESIDE_EVENTS = 16384
"""A stream of at least this many events has its recall index rebuilt beside the rest, in
a child process, when this process may use a second core."""
COMPARE_CHUNK = 4096
"""Rows of a table compared and digested at a time."""
RELEASE_BYTES = 4 << 20
"""Bytes read between two releases of the mapped pages read (LmdbBackend.release_pages)."""
_SCRATCH_MAP_BYTES = 1 << 40  # address space only: the file grows as it is written
_ALL_KEYS = (b"", b"\xff" * 32)  # every key of a scratch table: it holds one stream


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
    index_beside_from: int = INDEX_BESIDE_EVENTS,
) -> ReplayResult:
    """Rebuild one stream's projections from its events and compare with the live ones,
    checking the log's seals on the way (eva.core.chain) unless told not to.

    A stream of `index_beside_from` events or more has its recall index rebuilt in
    a child process beside the rest (eva.store.replay_index), when the store is
    LMDB and a second core is there; should the child fail, the stream is
    replayed again in this process alone. A log that
    cannot be replayed (an event that does not decode, or one the projections
    refuse) gives a result that says which event, never an error.
    """
    meta = store.meta(stream)
    short = meta is None or meta.position < MEMORY_REBUILD_EVENTS
    backend = store.backend
    try:
        if (
            meta is not None
            and meta.position >= index_beside_from
            and isinstance(backend, LmdbBackend)
            and may_fork_beside()
        ):
            beside = partial(
                index_beside, stream=stream, scratch=_scratch, digest=_rebuilt_postings_digest
            )
            with _in_memory() if short else _scratch() as scratch:
                found = _replay(store, stream, scratch, progress, check_seals, beside)
            if found is not None:
                return found
        with _in_memory() if short else _scratch() as scratch:
            result = _replay(store, stream, scratch, progress, check_seals)
        assert result is not None  # only the index beside can fail to answer
        return result
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


Beside = Callable[[], AbstractContextManager[IndexBeside]]
"""Starts the child that rebuilds the recall index."""


def _replay(
    store: EventStore,
    stream: StreamId,
    scratch: _Scratch | _MemoryScratch,
    progress: Callable[[int], None] | None,
    check_seals: bool,
    beside: Beside | None = None,
) -> ReplayResult | None:
    """The replay of one stream into `scratch`, the recall index in a child that `beside`
    starts if given; None if that child gave no answer."""
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)

    def release() -> None:
        store.backend.release_pages()
        scratch.release_pages()

    with (
        store.backend.reading() as live,
        nullcontext(None) if beside is None else beside() as index,
    ):
        events = live.scan("events", prefix, end)
        checker = ChainChecker(stream, live.scan(CHAIN, prefix, end)) if check_seals else None
        lines: dict[bytes, bool] = {}
        read = 0
        for batch in _batches(events, REBUILD_BATCH):
            if checker is not None:
                checker.check(batch)
            scratch.write(partial(_apply, live, stream, batch, lines, index))
            if progress is not None:
                progress(len(batch))
            read += sum(len(data) for _, data in batch)
            if read >= RELEASE_BYTES:
                release()
                read = 0
        log = None if checker is None else checker.finish()
        if index is not None:
            index.sent_all()
        with scratch.reading() as rebuilt:
            meta = read_meta(rebuilt, stream)
            digests = {
                table: _table_digests(live, rebuilt, stream, table, release)
                for table in PROJECTION_TABLES
                if index is None or table != POSTINGS
            }
        if index is not None:
            live_postings = _live_digest(live, stream, POSTINGS, release)
            made = index.answer()
            if made is None:
                return None
            digests[POSTINGS] = (live_postings, made)
    live_digests: TableDigests = {table: pair[0] for table, pair in digests.items()}
    rebuilt_digests: TableDigests = {table: pair[1] for table, pair in digests.items()}
    return ReplayResult(
        stream=stream,
        events=0 if meta is None else meta.position,
        live_digest=combined_digest(live_digests),
        rebuilt_digest=combined_digest(rebuilt_digests),
        differing=tuple(differing_tables(live_digests, rebuilt_digests)),
        log=log,
    )


def _batches(
    stored: Iterable[tuple[bytes, bytes]], size: int
) -> Iterator[list[tuple[bytes, bytes]]]:
    entries = iter(stored)
    while batch := list(islice(entries, size)):
        yield batch


def _apply(
    live: Tables,
    stream: StreamId,
    batch: list[tuple[bytes, bytes]],
    lines: dict[bytes, bool],
    index: IndexBeside | None,
    rebuilt: Tables,
) -> None:
    """Apply a batch of stored events to the rebuild, its recall index changes sent to
    `index` if given. `lines` holds whether the lines the batch before looked up or wrote
    exist, and is given those of this batch (the halves of a merge were mostly written
    just before it)."""
    tables = _Rebuilding(live, rebuilt)
    postings = None if index is None else PostingBuffer()
    projector = Projector(tables, postings, known_lines=lines)
    apply_stored(tables, projector, stream, batch)
    projector.flush()
    if index is not None and postings is not None:
        index.send(postings)
    lines.clear()
    lines.update(projector.lines_seen)


def _rebuilt_postings_digest(rebuilt: Tables, release: Callable[[], None]) -> bytes:
    """The digest of the recall index a scratch environment holds (in the child that
    rebuilt it)."""
    return _digest_of(rebuilt.scan(POSTINGS, *_ALL_KEYS), release)


def _live_digest(
    live: Tables, stream: StreamId, table: Table, release: Callable[[], None]
) -> bytes:
    """The digest of the stream's rows of a live table whose rows sit together (not
    `discord_ids`)."""
    prefix = keys.stream_prefix(stream)
    return _digest_of(live.scan(table, prefix, keys.prefix_end(prefix)), release)


def _table_digests(
    live: Tables,
    rebuilt: Tables,
    stream: StreamId,
    table: Table,
    release: Callable[[], None],
) -> tuple[bytes, bytes]:
    """The digests of one projection table of the stream, live and rebuilt, each as
    eva.core.digest.table_digest gives them, found a chunk of rows at a time.

    The live rows are digested as
    they are compared with the rebuilt ones, read once each; only a table that
    differs is read again, to digest each side on its own.
    """

    if table == DISCORD_IDS:
        return _discord_id_digests(live, rebuilt, release)

    def live_rows() -> Iterator[tuple[bytes, bytes]]:
        prefix = keys.stream_prefix(stream)
        return live.scan(table, prefix, keys.prefix_end(prefix))

    def rebuilt_rows() -> Iterator[tuple[bytes, bytes]]:
        return rebuilt.scan(table, *_ALL_KEYS)

    digest = RowsDigest()
    same = True
    twin = rebuilt_rows()
    for chunk in _chunks(live_rows(), release):
        if same:
            digest.update(chunk)
            same = list(islice(twin, len(chunk))) == chunk
    if same and next(twin, None) is None:  # the same rows, so as many
        return digest.finish(), digest.finish()
    return _digest_of(live_rows(), release), _digest_of(rebuilt_rows(), release)


def _discord_id_digests(
    live: Tables, rebuilt: Tables, release: Callable[[], None]
) -> tuple[bytes, bytes]:
    """`_table_digests` of `discord_ids`, whose rows of a stream do not sit together: the
    live rows are those under the keys the rebuild made, looked up as the rebuilt rows
    are read (once)."""
    get = live.get
    live_digest, rebuilt_digest = RowsDigest(), RowsDigest()
    for chunk in _chunks(rebuilt.scan(DISCORD_IDS, *_ALL_KEYS), release):
        rebuilt_digest.update(chunk)
        live_digest.update(
            [(key, value) for key, _ in chunk if (value := get(DISCORD_IDS, key)) is not None]
        )
    return live_digest.finish(), rebuilt_digest.finish()


def _digest_of(rows: Iterator[tuple[bytes, bytes]], release: Callable[[], None]) -> bytes:
    digest = RowsDigest()
    for chunk in _chunks(rows, release):
        digest.update(chunk)
    return digest.finish()


def _chunks(
    rows: Iterator[tuple[bytes, bytes]], release: Callable[[], None]
) -> Iterator[list[tuple[bytes, bytes]]]:
    """Rows a chunk at a time, the mapped pages released every RELEASE_BYTES read."""
    read = 0
    for chunk in _batches(rows, COMPARE_CHUNK):
        yield chunk
        read += sum(len(key) + len(value) for key, value in chunk)
        if read >= RELEASE_BYTES:
            release()
            read = 0


class _Rebuilding:
    """The tables a rebuild writes: the scratch environment's, with the live log's events
    (the projections read earlier events back; the log is there already, so the
    rebuild writes none)."""

    def __init__(self, live: Tables, rebuilt: Tables) -> None:
        self._live = live
        self._rebuilt = rebuilt

    def _of(self, table: Table) -> Tables:
        return self._live if table == EVENTS else self._rebuilt

    def get(self, table: Table, key: bytes) -> bytes | None:
        return self._of(table).get(table, key)

    def put(self, table: Table, key: bytes, value: bytes) -> None:
        if table != EVENTS:
            self._rebuilt.put(table, key, value)

    def put_many(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        if table != EVENTS:
            self._rebuilt.put_many(table, entries)

    def put_absent(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        if table != EVENTS:
            self._rebuilt.put_absent(table, entries)

    def delete(self, table: Table, key: bytes) -> None:
        if table != EVENTS:
            self._rebuilt.delete(table, key)

    def holds_any(self, table: Table, keys: Iterable[bytes]) -> bool:
        return self._of(table).holds_any(table, keys)

    def transaction_id(self) -> int | None:
        return None

    def scan(self, table: Table, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._of(table).scan(table, start, stop)

    def first_key(self, table: Table, start: bytes, stop: bytes) -> bytes | None:
        return self._of(table).first_key(table, start, stop)


class _Scratch:
    """A throwaway LMDB environment: no syncing, one stream's rebuilt projections."""

    def __init__(self, path: Path) -> None:
        self._file = path / DATA_FILE
        self._env = open_scratch_env(path, _SCRATCH_MAP_BYTES)
        self._dbs: dict[Table, Any] = {
            table: self._env.open_db(table.encode()) for table in ALL_TABLES
        }

    def write(self, work: Callable[[Tables], None]) -> None:
        with self._env.begin(write=True) as txn:
            work(LmdbTables(txn, self._dbs))

    @contextmanager
    def reading(self) -> Iterator[Tables]:
        with self._env.begin(buffers=False) as txn:
            yield LmdbTables(txn, self._dbs)

    def release_pages(self) -> None:
        release_mapping(self._file)

    def close(self) -> None:
        self._env.close()


class _MemoryScratch:
    """A short stream's rebuild, held in memory: for a few thousand events, making an
    LMDB environment costs more than the rebuild itself."""

    def __init__(self) -> None:
        self._tables = MemoryTables()

    def write(self, work: Callable[[Tables], None]) -> None:
        work(self._tables)

    @contextmanager
    def reading(self) -> Iterator[Tables]:
        yield self._tables

    def release_pages(self) -> None:
        pass


@contextmanager
def _in_memory() -> Iterator[_MemoryScratch]:
    yield _MemoryScratch()


SCRATCH_PREFIX = "eva-replay-"
"""The start of a scratch folder's name, before the id of the process that made it."""


def clear_left_scratch(folder: Path) -> list[Path]:
    """Remove the scratch folders in `folder` of replays that were killed (named for a
    process that is gone); returns them."""
    cleared = []
    for path in folder.glob(f"{SCRATCH_PREFIX}*-*"):
        owner = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not _running(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            cleared.append(path)
    return cleared


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextmanager
def _scratch() -> Iterator[_Scratch]:
    """A scratch environment in a folder of the temporary directory, removed after; one
    a killed replay left there is removed by the next."""
    clear_left_scratch(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as folder:
        try:
            scratch = _Scratch(Path(folder))
            try:
                yield scratch
            finally:
                scratch.close()
        except lmdb.Error as error:  # the scratch's file system refused, not the data's
            raise OSError(
                f"the scratch copy a long channel is rebuilt in, under {tempfile.gettempdir()}, "
                f"could not be written ({error}): is that disk full? Set TMPDIR to a folder "
                "with room (about the size of the data directory)"
            ) from error


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
    replaced by the rebuilt one; a stream that matches is left alone. A
    short stream is rebuilt in memory and rewritten in one write
    transaction. A long one (`MEMORY_REBUILD_EVENTS` events or more) is
    rebuilt in a scratch environment and rewritten `REWRITE_ROWS` entries a
    transaction, its record last, so memory stays bounded: one cut short
    leaves its projections part rewritten, and running it again finishes
    it. Raises `LogMovedError`, writing nothing, when events were appended
    to the stream after the rebuild read it: run it while nothing else
    writes to the data directory.
    """
    meta = store.meta(stream)
    if meta is not None and meta.position >= MEMORY_REBUILD_EVENTS:
        with _scratch() as scratch:
            return _repair_long(store, stream, scratch, progress)
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


REWRITE_ROWS = 8192
"""Entries a long stream's repair deletes or writes in one transaction."""


def _repair_long(
    store: EventStore,
    stream: StreamId,
    scratch: _Scratch,
    progress: Callable[[int], None] | None,
) -> RepairResult:
    """`repair_stream` of a long stream: rebuilt into `scratch` and compared a chunk at a
    time (as `eva replay` does), then each differing table rewritten in pieces."""
    result = _replay(store, stream, scratch, progress, check_seals=False)
    assert result is not None  # no index beside: the replay answers
    if not result.differing:
        return RepairResult(stream, result.events, ())
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)

    def unmoved(tables: Tables) -> None:
        after = tables.scan("events", keys.event_key(stream, result.events), end)
        if next(iter(after), None) is not None:
            raise LogMovedError(f"{stream}: events were added while it was rebuilt")

    store.backend.write(unmoved)
    differing = [table for table in PROJECTION_TABLES if table in result.differing]
    tables_in_order = sorted(differing, key=lambda table: table == "streams")  # the record last
    with scratch.reading() as rebuilt:
        for table in tables_in_order:
            if table == DISCORD_IDS:  # a stream's ids do not sit together: the ones it made
                made = [bytes(key) for key, _ in rebuilt.scan(DISCORD_IDS, *_ALL_KEYS)]
                for start in range(0, len(made), REWRITE_ROWS):
                    piece = made[start : start + REWRITE_ROWS]
                    store.backend.write(partial(_delete_keys, table=table, found=piece))
            else:
                while store.backend.write(partial(_delete_first, table=table, prefix=prefix)):
                    pass
            rows = rebuilt.scan(table, *_ALL_KEYS)
            while piece_rows := [(bytes(k), bytes(v)) for k, v in islice(rows, REWRITE_ROWS)]:
                store.backend.write(partial(_put_rows, table=table, rows=piece_rows))
                store.backend.release_pages()
                scratch.release_pages()
    return RepairResult(stream, result.events, result.differing)


def _delete_keys(tables: Tables, table: Table, found: list[bytes]) -> None:
    for key in found:
        if tables.get(table, key) is not None:
            tables.delete(table, key)


def _delete_first(tables: Tables, table: Table, prefix: bytes) -> int:
    """Delete up to `REWRITE_ROWS` of the stream's entries of `table`; how many went."""
    entries = tables.scan(table, prefix, keys.prefix_end(prefix))
    found = [bytes(key) for key, _ in islice(entries, REWRITE_ROWS)]
    for key in found:
        tables.delete(table, key)
    return len(found)


def _put_rows(tables: Tables, table: Table, rows: list[tuple[bytes, bytes]]) -> None:
    tables.put_many(table, rows)
