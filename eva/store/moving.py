# A stream's stored entries, copied whole from one data directory to another, or removed.
#
# Shell: reads and writes two backends. A stream is every entry under its prefix
# in the log (events and their seals) and in each projection table, and its
# `discord_ids` entries, found from the ids of the posts in its log. Copies keep
# the bytes as they are, so the log's seals (which chain to the stream's own
# ids, never to the directory) and the replay digest hold in the new place.
# Invariants: a stream's record (`streams`) is written last, in the same
# transaction as its last entries, so a target that holds the record holds the
# whole stream, and one that holds entries without the record holds a copy cut
# short, which the next copy clears first; copying or removing again is harmless.
# The `batches` table (task fingerprints, no text, of no one stream) is not moved.
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice

from eva.core import keys
from eva.core.chain import first_seal
from eva.core.digest import RowsDigest, TableDigests, combined_digest
from eva.core.keys import CHAIN, DISCORD_IDS, EVENTS, PROJECTION_TABLES, StreamId, Table
from eva.core.projection import read_meta
from eva.core.replay import posted_id_keys
from eva.core.tables import Tables
from eva.store.kv import COPY_BYTES, Backend

STREAM_TABLES: tuple[Table, ...] = (EVENTS, CHAIN, *PROJECTION_TABLES)
"""Every table holding entries of a stream; `streams` (its record) is written last."""
RECORD: Table = "streams"
COPY_ROWS = 50_000
"""Entries a copy writes in one transaction, at most (but whole small streams together)."""
DIGEST_ROWS = 4096
"""Entries hashed at a time when a stream's digest is worked out."""
DELETE_ROWS = 4096
"""Entries read at a time when a stream is removed."""

Rows = list[tuple[Table, bytes, bytes]]


@dataclass(frozen=True, slots=True)
class StreamState:
    """What says two copies of a stream are the same: its events, the newest seal (which
    follows from every event before it) and the digest of its projections."""

    events: int
    head: str
    digest: str


def stream_state(
    tables: Tables, stream: StreamId, release: Callable[[], None] = lambda: None
) -> StreamState | None:
    """The stream's state inside an open transaction; None if it has no record.
    `release` lets go of the pages read so far (LmdbBackend.release_pages), called
    now and then."""
    meta = read_meta(tables, stream)
    if meta is None:
        return None
    if meta.position == 0:
        head = first_seal(stream)
    else:
        found = tables.get(CHAIN, keys.event_key(stream, meta.position - 1))
        head = b"" if found is None else bytes(found)
    return StreamState(meta.position, head.hex(), streamed_digest(tables, stream, release))


def streamed_digest(
    tables: Tables, stream: StreamId, release: Callable[[], None] = lambda: None
) -> str:
    """eva.core.replay.digest of the stream's projections, read a chunk at a time
    (`release` called after each)."""
    ids = posted_id_keys(tables, stream, release, DIGEST_ROWS)
    digests: TableDigests = {}
    for table in PROJECTION_TABLES:
        digest = RowsDigest()
        rows = _table_rows(tables, stream, table, ids)
        while chunk := list(islice(rows, DIGEST_ROWS)):
            digest.update(chunk)
            release()
        digests[table] = digest.finish()
    return combined_digest(digests)


def stream_entries(
    tables: Tables, stream: StreamId, release: Callable[[], None] = lambda: None
) -> Iterator[tuple[Table, bytes, bytes]]:
    """Every entry of the stream, table by table, its record last, read as they are asked
    for (a long stream is never held whole; `release` is called now and then)."""
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    for table in (EVENTS, CHAIN):
        for key, value in tables.scan(table, prefix, end):
            yield table, bytes(key), bytes(value)
    ids = posted_id_keys(tables, stream, release, DIGEST_ROWS)
    for table in (*(t for t in PROJECTION_TABLES if t != RECORD), RECORD):
        for key, value in _table_rows(tables, stream, table, ids):
            yield table, bytes(key), bytes(value)


def _table_rows(
    tables: Tables, stream: StreamId, table: Table, ids: list[bytes]
) -> Iterator[tuple[bytes, bytes]]:
    """One projection table's entries of the stream in key order (`discord_ids`: those
    held under `ids`), as eva.core.replay.projection_rows gives them."""
    if table == DISCORD_IDS:
        get = tables.get
        return ((key, value) for key in ids if (value := get(DISCORD_IDS, key)) is not None)
    prefix = keys.stream_prefix(stream)
    return iter(tables.scan(table, prefix, keys.prefix_end(prefix)))


def holds_entries(tables: Tables, stream: StreamId) -> bool:
    """Whether any entry of the stream's log or record is stored."""
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    return any(
        next(iter(tables.scan(table, prefix, end)), None) is not None
        for table in (EVENTS, CHAIN, RECORD)
    )


def _delete_entries(
    tables: Tables, stream: StreamId, release: Callable[[], None] = lambda: None
) -> int:
    """Delete the stream's entries, found `DELETE_ROWS` at a time (`release` called after
    each); how many went."""
    deleted = 0
    for key in posted_id_keys(tables, stream, release, DIGEST_ROWS):  # from the log: before it goes
        if tables.get(DISCORD_IDS, key) is not None:
            tables.delete(DISCORD_IDS, key)
            deleted += 1
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    for table in STREAM_TABLES:
        if table == DISCORD_IDS:
            continue
        while chunk := [bytes(k) for k, _ in islice(tables.scan(table, prefix, end), DELETE_ROWS)]:
            for key in chunk:
                tables.delete(table, key)
            deleted += len(chunk)
            release()
    return deleted


def remove_streams(backend: Backend, streams: Sequence[StreamId]) -> int:
    """Delete every entry of the streams in one transaction; how many entries went.

    The words stay in the file's freed pages until it is compacted
    (`LmdbBackend.compact`).
    """
    return backend.write(
        lambda tables: sum(_delete_entries(tables, s, backend.release_pages) for s in streams)
    )


@dataclass(frozen=True, slots=True)
class Copied:
    """What copying one stream found in the target and did."""

    stream: StreamId
    source: StreamState
    already: bool  # the target held the same stream already (an earlier run copied it)
    conflict: StreamState | None = None  # the target holds another stream of these ids


def copy_streams(
    source: Backend, target: Backend, streams: Sequence[StreamId], rows_most: int | None = None
) -> list[Copied]:
    """Copy the streams' entries from `source` to `target`, whole small streams together
    and a long one in several transactions, its record in the last. A long stream is
    read as it is written, `rows_most` entries at a time, never held whole.

    A stream the target holds already is left alone: the same one is `already`
    copied, another one a `conflict`. A stream without a record in the target but
    with entries there (a copy cut short) is cleared first.
    """
    rows_most = rows_most or COPY_ROWS
    results: list[Copied] = []
    pending: Rows = []
    for stream in streams:
        with source.reading() as tables:
            state = stream_state(tables, stream, source.release_pages)
        if state is None:
            continue
        with target.reading() as tables:
            there = stream_state(tables, stream)
            cut_short = there is None and holds_entries(tables, stream)
        if there is not None:
            conflict = None if there == state else there
            results.append(Copied(stream, state, already=conflict is None, conflict=conflict))
            continue
        if cut_short:
            _flush(target, pending)
            target.write(partial(_delete_entries, stream=stream))
        with source.reading() as tables:
            held = 0  # bytes pending
            for entry in stream_entries(tables, stream, source.release_pages):
                pending.append(entry)
                held += len(entry[1]) + len(entry[2])
                if len(pending) >= rows_most or held >= COPY_BYTES:
                    _flush(target, pending)
                    source.release_pages()
                    target.release_pages()  # the pages its writes read
                    held = 0
        results.append(Copied(stream, state, already=False))
    _flush(target, pending)
    return results


def _flush(target: Backend, pending: Rows, rows_most: int | None = None) -> None:
    """Write the pending entries: all of them, or with `rows_most`, every whole piece of
    that many (the rest stays pending). Cleared as they are written."""
    pieces = list(_pieces(pending, rows_most))
    for piece in pieces:
        target.write(partial(_put, rows=piece))
    written = sum(len(piece) for piece in pieces)
    del pending[:written]


def _pieces(rows: Rows, size: int | None) -> Iterator[Rows]:
    if size is None:
        if rows:
            yield rows
        return
    for start in range(0, len(rows) - size + 1, size):
        yield rows[start : start + size]


def _put(tables: Tables, rows: Rows) -> None:
    for table, key, value in rows:
        tables.put(table, key, value)
