# The tables a transaction reads and writes, as the pure core sees them.
#
# A protocol only: eva.store.lmdb_kv gives it over an LMDB transaction and
# eva.store.memory_kv over dicts, so the core's rules run the same on both.
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from eva.core.keys import Table


class Tables(Protocol):
    """Byte-keyed tables inside one transaction."""

    def get(self, table: Table, key: bytes) -> bytes | None: ...

    def put(self, table: Table, key: bytes, value: bytes) -> None: ...

    def put_many(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        """Put each (key, value), as `put` would one by one."""
        ...

    def put_absent(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        """Put each (key, value) whose key the table does not hold yet; a key it holds keeps
        its value, and its page is not written."""
        ...

    def delete(self, table: Table, key: bytes) -> None: ...

    def holds_any(self, table: Table, keys: Iterable[bytes]) -> bool:
        """Whether the table holds at least one of `keys`."""
        ...

    def transaction_id(self) -> int | None:
        """The id of the transaction (LMDB's: one more than the last commit's, for a
        write), or None where there is none."""
        ...

    def scan(self, table: Table, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries with start <= key < stop, in key order."""
        ...

    def first_key(self, table: Table, start: bytes, stop: bytes) -> bytes | None:
        """The first key with start <= key < stop, if any (its value is not read)."""
        ...
