# Whole servers erased (the operator's `eva forget --guild`, or a server Eva left, once its
# grace period is over), and single channels a moderator turned off and erased.
#
# Shell: reads and writes the store, compacts its file and scans it. The record
# (eva.core.erasures) is written first, durably: an erasure cut short is owed, and the
# next command that writes (or the bot's start) finishes it. Then every entry of the
# server's channels is removed in one transaction, the file compacted, and every file of
# the directory scanned for the server's texts, read before they went and held in memory
# only, as a forget proves itself; the record says what was found.
# Invariants: a record is written before any entry goes; a record done is never undone;
# only a server Eva left is waiting, and her coming back cancels only that.
from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace

from eva.core.erasures import (
    Erasure,
    ErasureReason,
    decode_erasure,
    encode_erasure,
    erasure_key,
)
from eva.core.keys import ERASURES, OPT_OUTS, SWITCHES, StreamId
from eva.core.tables import Tables
from eva.store.erasure import prove_erased, texts_of_guilds
from eva.store.event_store import EventStore
from eva.store.guild_records import remove_guild_records
from eva.store.lmdb_kv import LmdbBackend
from eva.store.moving import remove_streams

DAY_MS = 86_400_000


def erasure_records(store: EventStore) -> list[Erasure]:
    """Every server's latest erasure record, by guild id."""
    with store.backend.reading() as tables:
        return [decode_erasure(data) for _, data in tables.scan(ERASURES, b"", b"\xff" * 17)]


def erasure_of(store: EventStore, guild_id: int, channel_id: int = 0) -> Erasure | None:
    with store.backend.reading() as tables:
        data = tables.get(ERASURES, erasure_key(guild_id, channel_id))
    return None if data is None else decode_erasure(data)


def _put(store: EventStore, record: Erasure) -> None:
    def put(tables: Tables) -> None:
        key = erasure_key(record.guild_id, record.channel_id)
        tables.put(ERASURES, key, encode_erasure(record))

    store.backend.write(put)


def ask_erasure(
    store: EventStore, guild_id: int, reason: ErasureReason, now_ms: int, due_ms: int,
    channel_id: int = 0,
) -> Erasure:
    """Record that the server (or one channel of it) is to be erased at `due_ms` (the
    promise, durable when this returns); a pending record stays as it is, but asking for
    it now makes it due now."""
    current = erasure_of(store, guild_id, channel_id)
    if current is not None and current.pending:
        if due_ms < current.due_ms:
            current = replace(current, reason=reason, due_ms=due_ms)
            _put(store, current)
        return current
    record = Erasure(
        guild_id=guild_id, channel_id=channel_id, reason=reason, asked_ms=now_ms, due_ms=due_ms
    )
    _put(store, record)
    return record


def came_back(store: EventStore, guild_id: int, now_ms: int) -> bool:
    """Eva is in the server again: a pending erasure because she left is cancelled."""
    current = erasure_of(store, guild_id)
    if current is None or not current.pending or current.reason != "left":
        return False
    _put(store, replace(current, cancelled_ms=now_ms))
    return True


def due_erasures(store: EventStore, now_ms: int) -> list[Erasure]:
    """The pending erasures whose time has come, oldest first."""
    due = [r for r in erasure_records(store) if r.pending and r.due_ms <= now_ms]
    return sorted(due, key=lambda r: (r.due_ms, r.guild_id))


def erase_guild(
    store: EventStore, data_dir: Path, guild_id: int, now_ms: int, channel_id: int = 0
) -> Erasure:
    """Erase every channel of the server (or the one channel) and prove it (see the
    module's note); the record as it ends: done, or still pending with what the scan
    found."""
    current = erasure_of(store, guild_id, channel_id)
    if current is None or not current.pending:
        raise ValueError(f"no erasure of guild {guild_id} ({channel_id}) is pending")
    metas = [
        m for m in store.streams()
        if m.guild_id == guild_id and channel_id in (0, m.channel_id)
    ]
    streams = [StreamId(m.guild_id, m.channel_id) for m in metas]
    texts = texts_of_guilds(store, {guild_id}, channels=channel_id or None)  # in memory only
    channels = tuple(sorted({*current.channels, *(m.channel_id for m in metas)}))
    messages = current.messages + sum(m.messages for m in metas)
    if streams:
        # what the scan needs to know survives a crash: the channels, how many messages
        _put(store, replace(current, channels=channels, messages=messages))
        remove_streams(store.backend, streams)
    if isinstance(store.backend, LmdbBackend):
        store.backend.compact()
    scan = prove_erased(store, data_dir, texts)
    ended = replace(
        current,
        channels=channels,
        messages=messages,
        texts_checked=scan.texts,
        found=scan.hits,
        done_ms=now_ms if scan.hits == 0 else 0,
    )
    whole = ended.done_ms and not channel_id
    if whole and store.sealer is not None:  # no copy of it shows anyone's words again
        store.sealer.destroy_server(guild_id)  # first: cut short, the erasure runs again
    _put(store, ended)
    if whole:  # nothing of the server stays but this record
        remove_guild_records(store.backend, [guild_id], of=(SWITCHES, OPT_OUTS))
    return ended
