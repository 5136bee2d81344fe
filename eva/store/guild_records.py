# What a data directory keeps of a server besides its channels' streams: the channel
# switches, the people kept out ("don't remember me") and the erasure records.
#
# Shell. Each such table is keyed by guild id first, so a server's records are one range;
# a "don't remember me" for every server is under guild 0 and belongs to every directory.
# A reshard moves a server's records with its channels (copied before the channels leave
# the source, so a move cut short and run again loses none).
from __future__ import annotations

import struct
from collections.abc import Iterable

from msgspec.structs import replace

from eva.core.erasures import decode_erasure, encode_erasure, erasure_key
from eva.core.keys import ERASURES, OPT_OUTS, SWITCHES, Table
from eva.core.opt_out import EVERY_GUILD
from eva.core.tables import Tables
from eva.store.kv import Backend

GUILD_TABLES: tuple[Table, ...] = (SWITCHES, OPT_OUTS, ERASURES)
_GUILD = struct.Struct(">Q")


def _of_guild(tables: Tables, table: Table, guild: int) -> list[tuple[bytes, bytes]]:
    start = _GUILD.pack(guild)
    end = _GUILD.pack(guild + 1)
    return [(bytes(key), bytes(value)) for key, value in tables.scan(table, start, end)]


def copy_guild_records(source: Backend, target: Backend, guilds: Iterable[int]) -> int:
    """Copy the servers' records (and every "don't remember me" for all servers) from
    `source` to `target`, over what the target holds under the same keys; how many."""
    wanted = sorted(set(guilds))
    with source.reading() as tables:
        rows = [
            (table, key, value)
            for table in GUILD_TABLES
            for guild in wanted
            for key, value in _of_guild(tables, table, guild)
        ]
        rows += [(OPT_OUTS, key, value) for key, value in _of_guild(tables, OPT_OUTS, EVERY_GUILD)]

    def put(tables: Tables) -> int:
        for table, key, value in rows:
            tables.put(table, key, value)
        return len(rows)

    return target.write(put) if rows else 0


def remove_guild_records(
    backend: Backend, guilds: Iterable[int], of: tuple[Table, ...] = GUILD_TABLES
) -> int:
    """Delete the servers' records in the tables `of` (not those for every server); how
    many went."""
    wanted = sorted(set(guilds) - {EVERY_GUILD})

    def delete(tables: Tables) -> int:
        gone = 0
        for table in of:
            for guild in wanted:
                for key, _ in _of_guild(tables, table, guild):
                    tables.delete(table, key)
                    gone += 1
        return gone

    return backend.write(delete) if wanted else 0


def carry_newer_records(newer: Backend, staged: Backend, now_ms: int) -> list[int]:
    """Before a backup is put in place: what a newer directory (the one restored over, or
    another the operator names) says of servers and people wins over the backup's. Its
    switches and keep-outs are copied over the backup's; its erasures, done or owed, are
    owed again in the backup (a server erased since is erased again, at once). Returns
    the servers whose erasure the backup now owes."""
    carried: tuple[Table, ...] = (SWITCHES, OPT_OUTS)
    with newer.reading() as tables:
        rows = [
            (table, bytes(key), bytes(value))
            for table in carried
            for key, value in tables.scan(table, b"", b"\xff" * 64)
        ]
        erasures = [
            decode_erasure(value) for _, value in tables.scan(ERASURES, b"", b"\xff" * 17)
        ]
    owed = [
        replace(record, done_ms=0, found=0, due_ms=min(record.due_ms, now_ms))
        if record.done_ms else record
        for record in erasures
        if record.pending or record.done_ms
    ]

    def put(tables: Tables) -> None:
        for table, key, value in rows:
            tables.put(table, key, value)
        for record in owed:
            tables.put(ERASURES, erasure_key(record.guild_id, record.channel_id),
                       encode_erasure(record))

    if rows or owed:
        staged.write(put)
    return sorted({record.guild_id for record in owed})
