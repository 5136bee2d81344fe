# Replay: rebuild a stream's projections from its events alone, and digest them.
#
# Pure: it takes stored event bytes and returns tables and digests. The shell
# compares the rebuilt tables with the live ones, byte for byte, by their
# digests (eva.core.digest).
from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice

from eva.core import keys
from eva.core.digest import TableDigests, combined_digest, table_digest
from eva.core.events import decode_event
from eva.core.keys import PROJECTION_TABLES, StreamId, Table
from eva.core.memtables import MemoryTables
from eva.core.projection import Projector, Tables
from eva.core.recall_index import PostingBuffer

ProjectionRows = dict[Table, list[tuple[bytes, bytes]]]

PROGRESS_STEP = 8192
# Events applied between two hand-overs of the recall index's changes.
POSTINGS_BATCH = 4096


def rebuild(
    stream: StreamId,
    stored_events: Iterable[tuple[int, bytes]],
    progress: Callable[[int], None] | None = None,
    write_postings: Callable[[PostingBuffer], None] | None = None,
) -> MemoryTables:
    """The projections of one stream, applied from its first event on.

    The tables hold that stream's entries and nothing else. Given
    `write_postings`, the recall index's changes go to it instead, one buffer
    per `POSTINGS_BATCH` events, and the tables hold no postings.
    """
    tables = MemoryTables()
    if write_postings is None:
        projector = Projector(tables)
        _apply(tables, projector, stream, stored_events, progress)
        projector.flush()
        return tables
    events = iter(stored_events)
    while batch := list(islice(events, POSTINGS_BATCH)):
        postings = PostingBuffer()
        projector = Projector(tables, postings)
        _apply(tables, projector, stream, batch, progress)
        projector.flush()
        write_postings(postings)
    return tables


def _apply(
    tables: MemoryTables,
    projector: Projector,
    stream: StreamId,
    events: Iterable[tuple[int, bytes]],
    progress: Callable[[int], None] | None,
) -> None:
    apply = projector.apply
    count = 0
    for seq, data in events:
        tables.put("events", keys.event_key(stream, seq), data)
        apply(stream, seq, decode_event(data))
        count += 1
        if progress is not None and count % PROGRESS_STEP == 0:
            progress(PROGRESS_STEP)
    if progress is not None:
        progress(count % PROGRESS_STEP)


def projection_rows(tables: Tables, stream: StreamId) -> ProjectionRows:
    """Every projection entry of a stream, table by table, in key order."""
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    return {table: list(tables.scan(table, prefix, end)) for table in PROJECTION_TABLES}


def table_digests(rows: ProjectionRows) -> TableDigests:
    return {table: table_digest(rows.get(table, [])) for table in PROJECTION_TABLES}


def digest(rows: ProjectionRows) -> str:
    """The digest of a stream's projections (see `combined_digest`)."""
    return combined_digest(table_digests(rows))
