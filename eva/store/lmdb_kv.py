# The LMDB backend: one environment per data directory, opened once per process.
#
# Knows LMDB and files; knows nothing of events. Invariants:
# - commits are durable when `write` returns (sync and metasync on);
# - a write that fills the map grows the map and runs again, never fails for it;
# - the map is resized only while no transaction of this process is open (LMDB
#   leaves that to its caller): a resize waits for open reads to end and holds
#   new ones back until it is done; a map another process grew is adopted the
#   same way;
# - stale reader slots left by a killed process are cleared at open;
# - the same directory opened twice in one process gives the same environment;
# - `release_pages` only drops this process's view of pages it read through the
#   map; their bytes stay in the file and the page cache, and the next read maps
#   them again.
from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import count, takewhile
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from eva.core.chain import seal_all
from eva.core.forget import count_unpurged, record_forgotten
from eva.core.keys import (
    ALL_TABLES,
    AUTHORS_INDEXED,
    DISCORD_IDS_BY_MESSAGE,
    FORGOTTEN_IN_RECORDS,
    LAYOUT,
    LOGS_SEALED,
    MESSAGE_SLOTS_IN_BLOCKS,
    POSTINGS_BY_BUCKET,
    UNPURGED_COUNTED,
    Table,
    stream_first_discord_id_key,
)
from eva.core.projection import index_again
from eva.core.slots import hold_open_slots
from eva.core.tables import Tables
from eva.store.kv import COPY_BYTES
from eva.store.private import private_dir, private_files
from eva.store.scratch_env import open_scratch_env
from eva.store.writer_lock import take_writer_lock

T = TypeVar("T")

INITIAL_MAP_BYTES = 64 * 1024 * 1024
DATA_FILE = "data.mdb"
LMDB_LOCK_FILE = "lock.mdb"
"""LMDB's lock file, beside the data file."""
COMPACT_DIR = "compacting"
COPY_CHUNK = 65536
GATE_POLL_S = 0.0005
"""How often a resize waiting for reads to end looks again, and a read waiting for
a resize (both are short)."""

_open_lock = threading.Lock()
_open_backends: dict[tuple[str, bool], LmdbBackend] = {}
_OLDER_READ_ONLY = (
    "the data directory {path} is read-only here and was written by an older Eva, whose "
    "layout must be brought up to date by a command that writes: open it once with write access"
)


class LmdbTables:
    """The `Tables` protocol over one LMDB transaction."""

    def __init__(self, txn: Any, dbs: dict[Table, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, table: Table, key: bytes) -> bytes | None:
        value: bytes | None = self._txn.get(key, db=self._dbs[table])
        return value

    def put(self, table: Table, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._dbs[table])

    def put_many(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self._txn.cursor(db=self._dbs[table]).putmulti(entries)

    def put_absent(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self._txn.cursor(db=self._dbs[table]).putmulti(entries, overwrite=False)

    def delete(self, table: Table, key: bytes) -> None:
        self._txn.delete(key, db=self._dbs[table])

    def holds_any(self, table: Table, keys: Iterable[bytes]) -> bool:
        get, db = self._txn.get, self._dbs[table]
        return any(get(key, db=db) is not None for key in keys)

    def transaction_id(self) -> int | None:
        txn_id: int = self._txn.id()
        return txn_id

    def first_key(self, table: Table, start: bytes, stop: bytes) -> bytes | None:
        """The first key with start <= key < stop, by one cursor step."""
        cursor = self._txn.cursor(db=self._dbs[table])
        if not cursor.set_range(start):
            return None
        key: bytes = cursor.key()
        return key if key < stop else None

    def scan(self, table: Table, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries with start <= key < stop, in key order, iterated in C."""
        db = self._dbs[table]
        entries = self._txn.cursor(db=db)
        if not entries.set_range(start):
            return iter(())
        if not self._txn.cursor(db=db).set_range(stop):  # no key from `stop` on
            return entries.iternext()  # type: ignore[no-any-return]
        # Two cursors in step: one yields the keys below `stop`, the other the
        # value of each key it yields (zip stops at the first key past the
        # range, before taking a value for it).
        values = self._txn.cursor(db=db)
        values.set_range(start)
        below = takewhile(stop.__gt__, entries.iternext(values=False))
        return zip(below, values.iternext(keys=False), strict=False)


class _Gate:
    """Keeps read transactions out while the map is resized (`LmdbBackend._resize_map`).

    A read counts itself in, then looks whether a resize is under way (and if so
    counts itself out and waits); a resize raises its flag, then waits until
    every read counted in has counted itself out. Both counts are
    `itertools.count`, whose `next` is one atomic step, so the path of a read
    takes no lock. The resize reads the exits before the entries: a difference
    of zero then means no read was open when it looked.
    """

    __slots__ = ("entered", "left", "resizing")

    def __init__(self) -> None:
        self.entered = count()
        self.left = count()
        self.resizing = False

    def wait_resized(self) -> None:
        while self.resizing:
            time.sleep(GATE_POLL_S)

    def close(self) -> None:
        """Keep new reads out, and return once the open ones have ended."""
        self.resizing = True
        while True:
            left = _count_value(self.left)
            if _count_value(self.entered) == left:
                return
            time.sleep(GATE_POLL_S)

    def open(self) -> None:
        self.resizing = False


def _count_value(counter: count[int]) -> int:
    """The next value of an `itertools.count`, without taking it."""
    return int(repr(counter)[len("count(") : -1])


class _Reading:
    """A read transaction for a `with` block (a plain class: the cheapest way in and out)."""

    __slots__ = ("_backend", "_txn")

    def __init__(self, backend: LmdbBackend) -> None:
        self._backend = backend
        self._txn: Any = None

    def __enter__(self) -> LmdbTables:
        backend = self._backend
        gate = backend.gate
        while True:
            next(gate.entered)
            if gate.resizing:
                next(gate.left)
                gate.wait_resized()
                continue
            try:
                self._txn = backend.env.begin(buffers=False)
                break
            except lmdb.MapResizedError:  # another process grew the map
                next(gate.left)
                backend.adopt_map_size()
            except BaseException:
                next(gate.left)
                raise
        return LmdbTables(self._txn, backend.dbs)

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._txn.abort()
        finally:
            self._txn = None
            next(self._backend.gate.left)


class LmdbBackend:
    """One LMDB environment holding every table of a data directory."""

    def __init__(
        self, path: Path, map_bytes: int = INITIAL_MAP_BYTES, *, readonly: bool = False
    ) -> None:
        self.readonly = readonly
        self.path = path
        if not readonly:
            private_dir(path)
        self._writer_lock: int | None = None
        self._write_lock = threading.Lock()
        self.gate = _Gate()
        self.commits = 0
        self.map_grown = 0
        self._open(map_bytes)
        self._follow_layout()

    def _open(self, map_bytes: int) -> None:
        path = self.path
        try:
            self.env = lmdb.open(
                str(path),
                map_size=max(map_bytes, _file_bytes(path)),
                max_dbs=len(ALL_TABLES) + 4,
                sync=True,
                metasync=True,
                readahead=False,
                max_readers=512,
                # a directory this process cannot write (a read-only file system, say) is
                # read without LMDB's lock file: nothing can be writing it
                readonly=self.readonly,
                lock=not self.readonly,
            )
        except lmdb.Error as error:  # LMDB says what the file system said, without a type
            raise _typed(error, path) from error
        self.stale_readers_cleared = 0 if self.readonly else int(self.env.reader_check())
        if not self.readonly:
            private_files(path / DATA_FILE, path / LMDB_LOCK_FILE)
        try:
            self.dbs: dict[Table, Any] = {
                table: self.env.open_db(table.encode(), create=not self.readonly)
                for table in ALL_TABLES
            }
        except lmdb.Error as error:
            self.env.close()
            if not self.readonly:  # creating a table was refused: the disk, not the layout
                raise OSError(
                    f"the data directory {path} could not be written ({error}): "
                    "is its disk full?"
                ) from error
            raise OSError(_OLDER_READ_ONLY.format(path=path)) from error

    def _follow_layout(self) -> None:
        """Bring what a data directory holds in an older layout to the one used now, in
        one transaction (so a crash leaves it all old or all new), once; a directory
        that holds none is marked as following it."""
        with self.reading() as tables:
            if all(tables.get(LAYOUT, marker) is not None for marker, _ in LAYOUT_STEPS):
                return
        if self.readonly:
            raise OSError(_OLDER_READ_ONLY.format(path=self.path))
        self.write(_follow_layout)

    def hold_writer_lock(self) -> None:
        """Take the directory's writer lock for as long as this backend is open
        (eva.store.writer_lock); WriterBusy if another process holds it."""
        if self._writer_lock is None:
            self._writer_lock = take_writer_lock(self.path)
            # A compacting copy a crashed writer left. Only the writer clears it: a
            # process that opens the directory to read may do so while the writer
            # is building one (`compact`).
            shutil.rmtree(self.path / COMPACT_DIR, ignore_errors=True)

    def reading(self) -> _Reading:
        """A read transaction, as a `with` block. Never hold one while calling `write`
        in the same thread: a write that must grow the map waits for every read."""
        return _Reading(self)

    def write(self, work: Callable[[Tables], T]) -> T:
        if self.readonly:
            raise OSError(f"the data directory {self.path} is read-only here: nothing was written")
        with self._write_lock:
            while True:
                try:
                    txn = self.env.begin(write=True)
                except lmdb.MapResizedError:  # another process grew the map
                    self._resize_map(0)
                    continue
                try:
                    result = work(LmdbTables(txn, self.dbs))
                    txn.commit()
                except lmdb.MapFullError:
                    txn.abort()
                    self._resize_map(self.map_bytes() * 2)
                    self.map_grown += 1
                    continue
                except lmdb.Error as error:  # the file system refused: a full disk, an I/O error
                    txn.abort()
                    raise OSError(
                        f"the data directory {self.path} could not be written ({error}); "
                        "nothing of this write was kept: is its disk full?"
                    ) from error
                except BaseException:
                    txn.abort()
                    raise
                self.commits += 1
                return result

    def adopt_map_size(self) -> None:
        """Take on the larger map another process set (LMDB's MDB_MAP_RESIZED)."""
        with self._write_lock:
            self._resize_map(0)

    def _resize_map(self, size: int) -> None:
        """Set the map's size (0: adopt the size another process set) once no
        transaction of this process is open: the caller holds the write lock and no
        read; the open reads are waited for, and new ones wait meanwhile."""
        self.gate.close()
        try:
            self.env.set_mapsize(size)
        finally:
            self.gate.open()

    def compact(self) -> tuple[int, int]:
        """Rewrite the data file by a copy of the live entries that replaces it atomically.

        LMDB keeps the old bytes of rewritten values in freed pages, and the
        keys of deleted entries as separators in branch pages; its own
        compacting copy (`env.copy(compact=True)`) copies those branch pages
        as they are. So the copy is built anew: every live entry inserted in
        key order into an empty file, which holds neither. The caller pauses
        every writer; reads taken before this call must be finished. Returns
        the file size before and after.
        """
        with self._write_lock:
            before = _file_bytes(self.path)
            target = self.path / COMPACT_DIR
            shutil.rmtree(target, ignore_errors=True)
            private_dir(target, exist_ok=False)
            try:
                _copy_live(self.env, self.dbs, target, self.map_bytes())
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)  # the room it took, given back
                raise
            self._replace_data(target / DATA_FILE)
            return before, _file_bytes(self.path)

    def copy_to(self, target: Path) -> int:
        """Write a compacting copy of the environment as one snapshot into the new directory
        `target` (its data file synced), while writers go on; return its size. Like
        `compact`'s copy, it holds live entries only: no freed page of erased words."""
        private_dir(target, exist_ok=False)
        _copy_live(self.env, self.dbs, target, self.map_bytes())
        _fsync_file(target / DATA_FILE)
        return _file_bytes(target)

    def replace_data(self, data_file: Path) -> None:
        """Put another environment's data file (in a folder of this directory, such as
        COMPACT_DIR) in place of this one's, atomically; the caller holds the writer lock
        and no read of this process is open."""
        with self._write_lock:
            self._replace_data(data_file)

    def _replace_data(self, data_file: Path) -> None:
        map_size = max(self.map_bytes(), os.stat(data_file).st_size)
        _fsync_file(data_file)
        self.gate.close()  # no read may use the environment while it is swapped
        try:
            self.env.close()
            os.replace(data_file, self.path / DATA_FILE)
            fsync_dir(self.path)
            shutil.rmtree(data_file.parent, ignore_errors=True)
            self._open(map_size)
        finally:
            self.gate.open()

    def map_bytes(self) -> int:
        size: int = self.env.info()["map_size"]
        return size

    def release_pages(self) -> None:
        """Let go of the pages of the data file this process has read through LMDB's map.

        Every page a read touches stays in the process's resident memory until the
        kernel needs it back, so a command that reads a whole large directory
        (replay, a build, an import's growing tree) would count the whole file as
        its own. Those pages are the file's, cached by the kernel: unmapping them
        (madvise MADV_DONTNEED on the read-only shared map) costs a later read only
        a fault, which finds them in the page cache. Linux only; elsewhere nothing.
        Safe from any thread: it counts itself in as a read does, so the map is not
        resized or replaced meanwhile.
        """
        gate = self.gate
        while True:
            next(gate.entered)
            if not gate.resizing:
                break
            next(gate.left)
            gate.wait_resized()
        try:
            release_mapping(self.path / DATA_FILE)
        finally:
            next(gate.left)

    def close(self) -> None:
        with _open_lock:
            _open_backends.pop((str(self.path.resolve()), self.readonly), None)
        self.env.close()
        if self._writer_lock is not None:
            os.close(self._writer_lock)
            self._writer_lock = None


_REFUSALS = {
    "Permission denied": errno.EACCES,
    "Operation not permitted": errno.EPERM,
}


def _typed(error: lmdb.Error, path: Path) -> OSError:
    """LMDB's refusal to open as the OSError it stands for: a PermissionError when the
    file system denied it (LMDB gives only the words, no errno)."""
    text = str(error)
    for words, number in _REFUSALS.items():
        if text.endswith(words):
            return PermissionError(number, words, str(path))
    return OSError(f"LMDB cannot open it: {text}")


def open_backend_to_read(path: Path | str) -> LmdbBackend | None:
    """The environment this process has open for a data directory, in either mode."""
    resolved = str(Path(path).resolve())
    with _open_lock:
        return _open_backends.get((resolved, False)) or _open_backends.get((resolved, True))


def open_backend(
    path: Path | str, map_bytes: int = INITIAL_MAP_BYTES, *, readonly: bool = False
) -> LmdbBackend:
    """The process's one environment for a data directory, opened on first use (with
    `readonly`, one that only reads, for a directory this process cannot write)."""
    resolved = str(Path(path).resolve())
    with _open_lock:
        backend = _open_backends.get((resolved, readonly))
        if backend is None:
            backend = LmdbBackend(Path(resolved), map_bytes, readonly=readonly)
            _open_backends[(resolved, readonly)] = backend
        return backend


def _follow_layout(tables: Tables) -> None:
    """Take each step of LAYOUT_STEPS not taken yet (a process may have taken it while this
    one waited for the write), and mark it taken."""
    for marker, step in LAYOUT_STEPS:
        if tables.get(LAYOUT, marker) is None:
            step(tables)
            tables.put(LAYOUT, marker, b"")


def _discord_ids_by_message(tables: Tables) -> None:
    """Rewrite `discord_ids` keys from the stream-first layout to the message-first one."""
    stream_first = list(tables.scan("discord_ids", b"", b"\xff" * 25))
    for key, _ in stream_first:
        tables.delete("discord_ids", key)
    tables.put_many(
        "discord_ids", sorted((stream_first_discord_id_key(k), v) for k, v in stream_first)
    )


LAYOUT_STEPS: tuple[tuple[bytes, Callable[[Tables], None]], ...] = (
    (DISCORD_IDS_BY_MESSAGE, _discord_ids_by_message),
    (MESSAGE_SLOTS_IN_BLOCKS, hold_open_slots),
    (FORGOTTEN_IN_RECORDS, record_forgotten),
    (LOGS_SEALED, seal_all),
    (AUTHORS_INDEXED, index_again),
    (POSTINGS_BY_BUCKET, index_again),
    (UNPURGED_COUNTED, count_unpurged),
)
"""How a data directory is brought to the layout used now, in order: each step under the
`layout` entry that marks it taken."""


def _copy_live(source: Any, dbs: dict[Table, Any], target: Path, map_bytes: int) -> None:
    """A new environment at `target` holding every live entry of `source`, and nothing else;
    an OSError if it cannot be written (LMDB's own error names no cause a reader knows).

    The pages read and written are let go of after each transaction, so the copy of
    a large file holds a chunk of it, not the whole file, in this process's memory.
    """
    try:
        _copy_into(source, dbs, target, map_bytes)
    except lmdb.Error as error:
        raise OSError(
            f"a copy of the data directory into {target} could not be written ({error}): "
            "is its disk full?"
        ) from error


def _copy_into(source: Any, dbs: dict[Table, Any], target: Path, map_bytes: int) -> None:
    fresh = open_scratch_env(target, map_bytes)
    private_files(target / DATA_FILE)

    def release() -> None:
        release_mapping(Path(source.path()) / DATA_FILE)
        release_mapping(target / DATA_FILE)

    try:
        with source.begin() as reading:
            for table in ALL_TABLES:
                _copy_table(reading.cursor(db=dbs[table]), fresh, table, release)
        fresh.sync(True)
    finally:
        fresh.close()


def _copy_table(entries: Any, fresh: Any, table: Table, release: Callable[[], None]) -> None:
    """Append one table's entries, in key order, a transaction each COPY_CHUNK entries or
    COPY_BYTES of them (a recall index entry can be large)."""
    db = fresh.open_db(table.encode())
    chunk: list[tuple[bytes, bytes]] = []
    size = 0
    for key, value in entries.iternext():
        chunk.append((key, value))
        size += len(key) + len(value)
        if len(chunk) >= COPY_CHUNK or size >= COPY_BYTES:
            _append_chunk(fresh, db, chunk)
            release()
            chunk, size = [], 0
    if chunk:
        _append_chunk(fresh, db, chunk)


def _append_chunk(fresh: Any, db: Any, chunk: list[tuple[bytes, bytes]]) -> None:
    with fresh.begin(write=True, db=db) as writing:
        writing.cursor().putmulti(chunk, append=True)


_MADV_DONTNEED = 4  # Linux


def release_mapping(data_file: Path) -> None:
    """madvise(MADV_DONTNEED) on every mapping of `data_file` in this process (see
    `LmdbBackend.release_pages`)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return
    name = os.fsencode(str(data_file))
    libc = _libc()
    if libc is None:
        return
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == name:
            low, high = (int(part, 16) for part in fields[0].split(b"-"))
            libc.madvise(ctypes.c_void_p(low), ctypes.c_size_t(high - low), _MADV_DONTNEED)


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    """Make a directory's entries durable (a file created, renamed or removed in it)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _file_bytes(path: Path) -> int:
    try:
        return os.stat(path / DATA_FILE).st_size
    except FileNotFoundError:
        return 0
