# Replay: rebuild a stream's projections from its events alone, and digest them.
#
# Pure: it takes stored event bytes and returns tables and digests. The shell
# compares the rebuilt tables with the live ones, byte for byte.
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import msgspec

from eva.core import keys
from eva.core.events import decode_event
from eva.core.keys import PROJECTION_TABLES, StreamId
from eva.core.memtables import MemoryTables
from eva.core.projection import Projector, Tables

ProjectionRows = dict[keys.Table, list[tuple[bytes, bytes]]]


def rebuild(
    stream: StreamId,
    stored_events: Iterable[tuple[int, bytes]],
    progress: Callable[[int], None] | None = None,
) -> MemoryTables:
    """The projections of one stream, applied from its first event on."""
    tables = MemoryTables()
    projector = Projector(tables)
    apply = projector.apply
    count = 0
    for seq, data in stored_events:
        tables.put("events", keys.event_key(stream, seq), data)
        apply(stream, seq, decode_event(data))
        count += 1
        if progress is not None and count % 8192 == 0:
            progress(8192)
    if progress is not None:
        progress(count % 8192)
    projector.flush()
    return tables


def projection_rows(tables: Tables, stream: StreamId) -> ProjectionRows:
    """Every projection entry of a stream, table by table, in key order."""
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    return {table: list(tables.scan(table, prefix, end)) for table in PROJECTION_TABLES}


def digest(rows: ProjectionRows) -> str:
    """A SHA-256 over every table name, key and value, in order (as one msgpack document)."""
    document = [(table, rows.get(table, [])) for table in PROJECTION_TABLES]
    return hashlib.sha256(msgspec.msgpack.encode(document)).hexdigest()


def differing_tables(live: ProjectionRows, rebuilt: ProjectionRows) -> list[str]:
    """The tables whose entries are not byte-for-byte equal."""
    return [t for t in PROJECTION_TABLES if live.get(t, []) != rebuilt.get(t, [])]
