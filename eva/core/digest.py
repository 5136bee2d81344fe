# Digests of projection tables: how replay compares them byte for byte.
#
# Pure. A table's digest is a SHA-256 over its keys and values in key order,
# the row count last (so rows can be digested as they are read, without
# counting them first); a stream's digest is one over the names and digests
# of its tables. Equal digests mean equal bytes, so two processes can compare
# tables by sending 32 bytes instead of the tables. Digests are compared
# within one run and never stored.
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from eva.core.keys import PROJECTION_TABLES, Table

TableDigests = dict[Table, bytes]


def table_digest(rows: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A SHA-256 over one table's keys and values, in key order: each row a msgpack
    [key, value] pair, then the count of rows as eight bytes."""
    digest = RowsDigest()
    digest.update(rows)
    return digest.finish()


def combined_digest(digests: TableDigests) -> str:
    """A stream's digest: a SHA-256 over each table's name and digest, in table order."""
    combined = hashlib.sha256()
    for table in PROJECTION_TABLES:
        combined.update(table.encode() + b"\x00" + digests[table])
    return combined.hexdigest()


def differing_tables(live: TableDigests, rebuilt: TableDigests) -> list[str]:
    """The tables whose entries are not byte-for-byte equal, by their digests."""
    return [table for table in PROJECTION_TABLES if live[table] != rebuilt[table]]


class RowsDigest:
    """`table_digest` of rows given a chunk at a time."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._count = 0

    def update(self, rows: Sequence[tuple[bytes, bytes]]) -> None:
        if not rows:
            return
        encoded = msgspec.msgpack.encode(rows)
        self._hash.update(memoryview(encoded)[len(_array_header(len(rows))) :])
        self._count += len(rows)

    def finish(self) -> bytes:
        done = self._hash.copy()
        done.update(self._count.to_bytes(8, "big"))
        return done.digest()


def _array_header(count: int) -> bytes:
    """The msgpack header of an array of `count` items."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")
