# Digests of projection tables: how replay compares them byte for byte.
#
# Pure. A table's digest is a SHA-256 over its keys and values in key order;
# a stream's digest is one over the names and digests of its tables. Equal
# digests mean equal bytes, so two processes can compare tables by sending
# 32 bytes instead of the tables.
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from eva.core.keys import PROJECTION_TABLES, Table

TableDigests = dict[Table, bytes]


def table_digest(rows: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A SHA-256 over one table's keys and values, in key order (`encoded_rows`)."""
    return encoded_digest(encoded_rows(rows))


def encoded_rows(rows: Sequence[tuple[bytes, bytes]]) -> bytes:
    """Rows as one msgpack array of [key, value] pairs: what `table_digest` hashes."""
    return msgspec.msgpack.encode(rows)


def encoded_digest(encoded: bytes) -> bytes:
    """The `table_digest` of rows that `encoded_rows` encoded."""
    return hashlib.sha256(encoded).digest()


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
    """`table_digest` of rows given a chunk at a time, their count known beforehand: the
    SHA-256 of the msgpack array that `encoded_rows` makes of them all."""

    def __init__(self, count: int) -> None:
        self._hash = hashlib.sha256(array_header(count))

    def update(self, rows: Sequence[tuple[bytes, bytes]]) -> None:
        encoded = msgspec.msgpack.encode(rows)
        self._hash.update(memoryview(encoded)[len(array_header(len(rows))) :])

    def finish(self) -> bytes:
        return self._hash.digest()


def array_header(count: int) -> bytes:
    """The msgpack header of an array of `count` items."""
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")
