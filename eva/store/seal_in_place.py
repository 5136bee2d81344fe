# Sealing a data directory written before: its logs rewritten with people's words sealed.
#
# Shell. The first writing command to open a directory that does not seal yet
# (eva.store.key_binding) seals every event that holds words or names in the clear,
# a chunk of a stream at a time: each chunk's events rewritten sealed and the
# chunk's seals of the log made again from the one before it, in one transaction
# that also records how far it got. A run cut short goes on from there; the seals
# of the rest of that stream are wrong only until it does. Once every stream is
# done the directory is marked as sealing and the data file is compacted, so that
# the freed pages that held the words in the clear go too.
from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from functools import partial

from eva.core import keys
from eva.core.chain import seal_from
from eva.core.events import AnyEvent, decode_stored
from eva.core.keys import LAYOUT, SEALED_AT_REST, StreamId
from eva.core.sealed_events import is_sealable
from eva.core.tables import Tables
from eva.store.event_store import EventStore, Sealer, stored_events
from eva.store.lmdb_kv import LmdbBackend

CHUNK_EVENTS = 8192
"""Events of a stream sealed in one transaction."""
SEALING_AT = b"sealing_at"
"""The `layout` entry of a sealing under way: the stream and the position it got to."""
_AT = struct.Struct(">QQQ")


def seal_in_place(
    store: EventStore, sealer: Sealer, say: Callable[[str], None] | None = None
) -> int:
    """Seal every event of every stream that holds words or names in the clear, mark the
    directory as sealing what it writes (`SEALED_AT_REST`), and compact it; how many
    events were sealed."""
    with store.backend.reading() as tables:
        found = tables.get(LAYOUT, SEALING_AT)
    resume = None if found is None else _AT.unpack(bytes(found))
    metas = store.streams()
    total = sum(meta.position for meta in metas)
    if say is not None and total:
        say(f"eva: sealing the {total:,} events of {len(metas)} channels with people's keys "
            "(once, for this data directory)")
    sealed = 0
    for meta in metas:
        stream = StreamId(meta.guild_id, meta.channel_id)
        start = 0
        if resume is not None:
            if (meta.guild_id, meta.channel_id) < resume[:2]:
                continue  # done before the run was cut short
            if (meta.guild_id, meta.channel_id) == resume[:2]:
                start = resume[2]
        while start < meta.position:
            stop = min(start + CHUNK_EVENTS, meta.position)
            chunk = partial(_seal_chunk, stream=stream, start=start, stop=stop, sealer=sealer)
            sealed += store.backend.write(chunk)
            start = stop
    def done(tables: Tables) -> None:
        tables.delete(LAYOUT, SEALING_AT)
        tables.put(LAYOUT, SEALED_AT_REST, b"1")

    store.backend.write(done)
    backend = store.backend
    if sealed and isinstance(backend, LmdbBackend):
        backend.compact()
    return sealed


def _seal_chunk(tables: Tables, stream: StreamId, start: int, stop: int, sealer: Sealer) -> int:
    """Seal events start..stop-1 of the stream and make their seals again; how many."""
    plain: list[tuple[bytes, AnyEvent]] = []
    for key, data in tables.scan(
        "events", keys.event_key(stream, start), keys.event_key(stream, stop)
    ):
        event = decode_stored(data)
        if is_sealable(event) and not event.sealed:
            plain.append((bytes(key), event))
    rewritten = stored_events(tables, stream, [event for _, event in plain], sealer)
    tables.put_many("events", zip([key for key, _ in plain], rewritten, strict=True))
    # the seals from here on change with any event rewritten before: made again, all of them
    seal_from(tables, stream, start, stop)
    tables.put(LAYOUT, SEALING_AT, _AT.pack(stream.guild_id, stream.channel_id, stop))
    return len(plain)


def say_on_stderr(text: str) -> None:
    print(text, file=sys.stderr)
