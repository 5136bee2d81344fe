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


def remove_guild_records(backend: Backend, guilds: Iterable[int]) -> int:
    """Delete the servers' records (not those for every server); how many went."""
    wanted = sorted(set(guilds) - {EVERY_GUILD})

    def delete(tables: Tables) -> int:
        gone = 0
        for table in GUILD_TABLES:
            for guild in wanted:
                for key, _ in _of_guild(tables, table, guild):
                    tables.delete(table, key)
                    gone += 1
        return gone

    return backend.write(delete) if wanted else 0
