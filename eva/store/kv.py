# The contract every storage backend keeps: transactions over byte tables.
#
# The event store is written once against this contract; LMDB and the
# in-memory backend implement it, and one contract test suite runs on both.
# A write is a function run inside one transaction: it either all lands or
# none of it does, and the backend may run it again (LMDB does after growing
# its map), so it must not have effects outside the tables it is given.
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from eva.core.tables import Tables

T = TypeVar("T")

COPY_BYTES = 16 << 20
"""Bytes of entries a copy (a compaction, a backup, a reshard) writes in one transaction,
at most: a recall index entry can be megabytes, so a count of entries alone does not
bound what a transaction holds."""


class Backend(Protocol):
    """Byte tables with atomic, durable write transactions."""

    def reading(self) -> AbstractContextManager[Tables]:
        """A read-only snapshot for the length of the `with` block."""
        ...

    def write(self, work: Callable[[Tables], T]) -> T:
        """Run `work` in one write transaction and commit it durably."""
        ...

    def release_pages(self) -> None:
        """Let go of what reads left resident that the backend can read again (LMDB's
        mapped pages); a long read calls it now and then, between transactions."""
        ...

    def close(self) -> None: ...
