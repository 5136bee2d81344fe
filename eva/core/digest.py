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
