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
from itertools import islice

from eva.core import keys
from eva.core.chain import seal, seal_before
from eva.core.events import AnyEvent, decode_stored
from eva.core.keys import CHAIN, LAYOUT, SEALED_AT_REST, StreamId
from eva.core.projection import index_messages, indexed_upto, read_meta
from eva.core.recall_index import POSTINGS
from eva.core.sealed_events import is_sealable
from eva.core.tables import Tables
from eva.store.event_store import EventStore, Sealer, stored_events
from eva.store.lmdb_kv import LmdbBackend

CHUNK_EVENTS = 8192
"""Events of a stream sealed in one transaction."""
SEALING_AT = b"sealing_at"
INDEXING_AGAIN = b"indexing_again"
"""The `layout` entry of a directory sealed whose recall index is being made again."""
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
        tables.put(LAYOUT, INDEXING_AGAIN, b"1")

    store.backend.write(done)
    # the recall index, which held the words as they are, made again by keyed hashes
    for meta in store.streams():
        _index_again(store, StreamId(meta.guild_id, meta.channel_id))
    store.backend.write(lambda tables: tables.delete(LAYOUT, INDEXING_AGAIN))
    backend = store.backend
    if isinstance(backend, LmdbBackend):
        backend.compact()
    return sealed


def sealing_owed(tables: Tables) -> bool:
    """Whether the directory does not seal yet, or its sealing was cut short."""
    return (
        tables.get(LAYOUT, SEALED_AT_REST) is None
        or tables.get(LAYOUT, INDEXING_AGAIN) is not None
    )


def _index_again(store: EventStore, stream: StreamId) -> None:
    """Make the stream's recall index again, a chunk of keys or messages a transaction."""
    prefix = keys.stream_prefix(stream)
    while store.backend.write(partial(_drop_index, prefix=prefix)):
        pass
    meta = store.meta(stream)
    if meta is None:
        return
    upto = indexed_upto(stream, meta.messages)
    for start in range(0, upto, CHUNK_EVENTS):
        stop = min(start + CHUNK_EVENTS, upto)
        store.backend.write(partial(_index_chunk, stream=stream, start=start, stop=stop))


def _drop_index(tables: Tables, prefix: bytes) -> int:
    """Delete up to `CHUNK_EVENTS` keys of a stream's recall index; how many."""
    doomed = [bytes(key) for key, _ in islice(
        tables.scan(POSTINGS, prefix, keys.prefix_end(prefix)), CHUNK_EVENTS
    )]
    for key in doomed:
        tables.delete(POSTINGS, key)
    return len(doomed)


def _index_chunk(tables: Tables, stream: StreamId, start: int, stop: int) -> None:
    meta = read_meta(tables, stream)
    assert meta is not None
    index_messages(tables, stream, meta, start, stop)


def _seal_chunk(tables: Tables, stream: StreamId, start: int, stop: int, sealer: Sealer) -> int:
    """Seal events start..stop-1 of the stream and make their seals again; how many."""
    prefix = keys.stream_prefix(stream)
    scanned = tables.scan("events", keys.event_key(stream, start), keys.prefix_end(prefix))
    rows = [(bytes(key), data) for key, data in islice(scanned, stop - start)]
    plain: list[tuple[bytes, AnyEvent]] = []
    for key, data in rows:
        event = decode_stored(data)
        if is_sealable(event) and not event.sealed:
            plain.append((key, event))
    rewritten = stored_events(tables, stream, [event for _, event in plain], sealer)
    new = dict(zip([key for key, _ in plain], rewritten, strict=True))
    tables.put_many("events", new.items())
    # the seals from here on change with any event rewritten before: made again, all of them
    previous = seal_before(tables, stream, start)
    made = []
    for key, data in rows:
        previous = seal(previous, new.get(key, data))
        made.append((key, previous))
    tables.put_many(CHAIN, made)
    tables.put(LAYOUT, SEALING_AT, _AT.pack(stream.guild_id, stream.channel_id, stop))
    return len(plain)


def say_on_stderr(text: str) -> None:
    print(text, file=sys.stderr)
