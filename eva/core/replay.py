# Replay: rebuild a stream's projections from its events alone, and digest them.
#
# Pure: it takes stored event bytes and returns tables and digests. The shell
# compares the rebuilt tables with the live ones, byte for byte, by their
# digests (eva.core.digest).
from __future__ import annotations

from collections.abc import Callable, Iterable

from eva.core import keys
from eva.core.digest import TableDigests, combined_digest, table_digest
from eva.core.events import MessagePosted, decode_event
from eva.core.keys import DISCORD_IDS, PROJECTION_TABLES, StreamId, Table
from eva.core.memtables import MemoryTables
from eva.core.projection import Projector
from eva.core.tables import Tables

ProjectionRows = dict[Table, list[tuple[bytes, bytes]]]


def rebuild(
    stream: StreamId,
    stored_events: Iterable[tuple[bytes, bytes]],
    progress: Callable[[int], None] | None = None,
) -> MemoryTables:
    """The projections of one stream, applied from its first event on, in memory.

    `stored_events` are the stream's entries of the events table, (key,
    stored bytes) in key order. The tables hold that stream's entries and
    nothing else. (`eva replay` rebuilds into a scratch environment instead,
    eva.store.replay, so that a long stream is not held whole.)
    """
    tables = MemoryTables()
    events = list(stored_events)
    projector = Projector(tables)
    apply_stored(tables, projector, stream, events)
    projector.flush()
    if progress is not None:
        progress(len(events))
    return tables


def apply_stored(
    tables: Tables, projector: Projector, stream: StreamId, events: list[tuple[bytes, bytes]]
) -> None:
    """Apply a stream's stored events, (key, stored bytes) one after the other, writing
    them into `tables` too."""
    # The projector reads earlier events (an edit, its message); later ones
    # being there already changes nothing.
    tables.put_many("events", events)
    if not events:
        return
    first = keys.seq_of(events[0][0])
    if keys.seq_of(events[-1][0]) - first == len(events) - 1:  # no gap: runs of posts at once
        projector.apply_all(stream, first, [decode_event(data) for _, data in events])
        return
    for key, data in events:  # the projector rejects the event after a gap
        projector.apply(stream, keys.seq_of(key), decode_event(data))


def projection_rows(
    tables: Tables, stream: StreamId, discord_ids: Iterable[bytes] | None = None
) -> ProjectionRows:
    """Every projection entry of a stream, table by table, in key order.

    A stream's `discord_ids` entries do not sit together (see
    `keys.discord_id_key`): they are looked up under `discord_ids` (say, the keys
    a rebuild of the stream made), else under the ids of the posts in its log.
    """
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    return {
        table: discord_id_rows(tables, stream, discord_ids)
        if table == DISCORD_IDS
        else list(tables.scan(table, prefix, end))
        for table in PROJECTION_TABLES
    }


def posted_id_keys(
    tables: Tables, stream: StreamId, release: Callable[[], None] = lambda: None, every: int = 4096
) -> list[bytes]:
    """The `discord_ids` keys of the messages posted in the stream's log, in key order
    (they do not sit together: see keys.discord_id_key); `release` is called every
    `every` events read."""
    prefix = keys.stream_prefix(stream)
    found = []
    for count, (_, data) in enumerate(tables.scan("events", prefix, keys.prefix_end(prefix))):
        if isinstance(event := decode_event(data), MessagePosted):
            found.append(keys.discord_id_key(stream, event.message_id))
        if count % every == every - 1:
            release()
    return sorted(found)


def discord_id_rows(
    tables: Tables, stream: StreamId, candidates: Iterable[bytes] | None = None
) -> list[tuple[bytes, bytes]]:
    """The `discord_ids` entries held under `candidates` (by default the keys of the ids
    of the messages posted in the stream's log), in key order."""
    if candidates is None:
        candidates = posted_id_keys(tables, stream)
    get = tables.get
    return sorted(
        (key, index) for key in candidates if (index := get(DISCORD_IDS, key)) is not None
    )


def table_digests(rows: ProjectionRows) -> TableDigests:
    return {table: table_digest(rows.get(table, [])) for table in PROJECTION_TABLES}


def digest(rows: ProjectionRows) -> str:
    """The digest of a stream's projections (see `combined_digest`)."""
    return combined_digest(table_digests(rows))


def rebuilt_digests(
    rebuilt: MemoryTables, live_rows: ProjectionRows, live: TableDigests
) -> TableDigests:
    """The digests of the rebuilt tables, given the live rows and their digests.

    A table that holds exactly the live rows has the live digest; only one
    that differs is digested on its own.
    """
    return {
        table: live[table]
        if rebuilt.holds(table, live_rows[table])
        else table_digest(rebuilt.rows(table))
        for table in PROJECTION_TABLES
    }
