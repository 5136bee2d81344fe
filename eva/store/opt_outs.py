# The "don't remember me" records, read and written in the store's `opt_outs` table.
#
# Shell. The bot reads them all at its start (`OptedOut`) and changes them with the
# person's command; the commands that store messages read them before they store any.
from __future__ import annotations

from eva.core.keys import OPT_OUTS
from eva.core.opt_out import (
    OptedOut,
    OptOut,
    OptOutBy,
    decode_opt_out,
    encode_opt_out,
    of_opt_out_key,
    opt_out_key,
)
from eva.core.tables import Tables
from eva.store.event_store import EventStore


def read_opt_outs(store: EventStore) -> dict[tuple[int, str], OptOut]:
    with store.backend.reading() as tables:
        return {
            of_opt_out_key(bytes(key)): decode_opt_out(data)
            for key, data in tables.scan(OPT_OUTS, b"", b"\xff" * 64)
        }


def opted_out(store: EventStore) -> OptedOut:
    return OptedOut(read_opt_outs(store), store.hashes)


def set_opt_out(
    store: EventStore, guild_id: int, user_id: int, out: bool, by: OptOutBy, now_ms: int
) -> bool:
    """Record that the person is (out) or is no longer (not out) kept out of the guild's
    memory; whether anything changed."""
    hashes = store.hashes.all_of(user_id)

    def change(tables: Tables) -> bool:
        if out:
            key = opt_out_key(guild_id, hashes[0])
            if tables.get(OPT_OUTS, key) is not None:
                return False
            tables.put(OPT_OUTS, key, encode_opt_out(OptOut(at_ms=now_ms, by=by)))
            return True
        changed = False
        for person in hashes:
            key = opt_out_key(guild_id, person)
            if tables.get(OPT_OUTS, key) is not None:
                tables.delete(OPT_OUTS, key)
                changed = True
        return changed

    return store.backend.write(change)
