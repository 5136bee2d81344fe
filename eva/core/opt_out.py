# "Don't remember me": the people who asked Eva never to keep what they write in a server.
#
# Pure. A person is recorded by the hash forgets are recorded under (keyed by the key
# store: the record does not say who), per server, or for every server (guild 0). From
# then on their messages are not stored, backfilled or imported; Eva may still read one
# that asks her something, to answer it, but never keeps it.
from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Literal, TypeAlias

import msgspec

from eva.core.forget import PersonHashes

OptOutBy: TypeAlias = Literal["self", "operator"]
EVERY_GUILD = 0
_GUILD = struct.Struct(">Q")


class OptOut(msgspec.Struct, frozen=True, kw_only=True):
    at_ms: int
    by: OptOutBy


def opt_out_key(guild_id: int, person: str) -> bytes:
    return _GUILD.pack(guild_id) + person.encode()


def of_opt_out_key(key: bytes) -> tuple[int, str]:
    """(guild id, person hash) of a key."""
    return _GUILD.unpack(key[:8])[0], key[8:].decode()


def encode_opt_out(record: OptOut) -> bytes:
    return msgspec.msgpack.encode(record)


def decode_opt_out(data: bytes) -> OptOut:
    return msgspec.msgpack.decode(data, type=OptOut)


class OptedOut:
    """Whether an author asked not to be kept in a guild, from the records."""

    def __init__(self, records: Mapping[tuple[int, str], OptOut], hashes: PersonHashes) -> None:
        self.people = {key for key in records}
        self.hashes = hashes

    def __call__(self, guild_id: int, author_id: int) -> bool:
        if not self.people:
            return False
        return any(
            (guild, person) in self.people
            for person in self.hashes.all_of(author_id)
            for guild in (guild_id, EVERY_GUILD)
        )
