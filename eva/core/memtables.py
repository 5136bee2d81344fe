# Byte-keyed tables held in dicts: the in-memory twin of the LMDB tables.
#
# Used by replay to rebuild projections beside the live ones, and by the
# in-memory store. Pure data: no IO. Scans sort the keys they visit, which is
# fine for the sizes these tables hold while a replay or test runs.
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import eq, itemgetter

from eva.core.keys import ALL_TABLES, Table


class MemoryTables:
    """Dict-backed tables implementing the `Tables` protocol."""

    def __init__(self) -> None:
        self.data: dict[Table, dict[bytes, bytes]] = {table: {} for table in ALL_TABLES}

    def get(self, table: Table, key: bytes) -> bytes | None:
        return self.data[table].get(key)

    def put(self, table: Table, key: bytes, value: bytes) -> None:
        self.data[table][key] = value

    def put_many(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self.data[table].update(entries)

    def put_absent(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        rows = self.data[table]
        for key, value in entries:
            rows.setdefault(key, value)

    def delete(self, table: Table, key: bytes) -> None:
        self.data[table].pop(key, None)

    def holds_any(self, table: Table, keys: Iterable[bytes]) -> bool:
        return not self.data[table].keys().isdisjoint(keys)

    def transaction_id(self) -> int | None:
        return None

    def first_key(self, table: Table, start: bytes, stop: bytes) -> bytes | None:
        return min((k for k in self.data[table] if start <= k < stop), default=None)

    def scan(self, table: Table, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        rows = self.data[table]
        for key in sorted(k for k in rows if start <= k < stop):
            yield key, rows[key]

    def rows(self, table: Table) -> list[tuple[bytes, bytes]]:
        """Every entry of a table, in key order."""
        rows = self.data[table]
        ordered = sorted(rows)  # the keys alone: sorting (key, value) pairs costs triple
        return list(zip(ordered, map(rows.__getitem__, ordered), strict=True))

    def holds(self, table: Table, rows: Sequence[tuple[bytes, bytes]]) -> bool:
        """Whether a table holds exactly `rows` (each key once), byte for byte."""
        entries = self.data[table]
        if len(entries) != len(rows):
            return False
        # Written in key order, as a replay writes most: one lazy pass, which
        # stops at the first pair out of place and builds no list.
        if all(map(eq, entries.items(), rows)):
            return True
        found = map(entries.get, map(itemgetter(0), rows))
        return all(map(eq, found, map(itemgetter(1), rows)))

    def copy(self) -> MemoryTables:
        twin = MemoryTables()
        twin.data = {table: dict(rows) for table, rows in self.data.items()}
        return twin


class OverlayTables:
    """Writes staged over a base, kept only on `commit`: one write transaction."""

    def __init__(self, base: MemoryTables) -> None:
        self._base = base
        self._staged: dict[Table, dict[bytes, bytes | None]] = {t: {} for t in ALL_TABLES}

    def get(self, table: Table, key: bytes) -> bytes | None:
        staged = self._staged[table]
        if key in staged:
            return staged[key]
        return self._base.get(table, key)

    def put(self, table: Table, key: bytes, value: bytes) -> None:
        self._staged[table][key] = bytes(value)

    def put_many(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self._staged[table].update((key, bytes(value)) for key, value in entries)

    def put_absent(self, table: Table, entries: Iterable[tuple[bytes, bytes]]) -> None:
        for key, value in entries:
            if self.get(table, key) is None:
                self.put(table, key, value)

    def delete(self, table: Table, key: bytes) -> None:
        self._staged[table][key] = None

    def holds_any(self, table: Table, keys: Iterable[bytes]) -> bool:
        return any(self.get(table, key) is not None for key in keys)

    def transaction_id(self) -> int | None:
        return None

    def first_key(self, table: Table, start: bytes, stop: bytes) -> bytes | None:
        return next((key for key, _ in self.scan(table, start, stop)), None)

    def scan(self, table: Table, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        staged = self._staged[table]
        merged: dict[bytes, bytes | None] = {
            k: v for k, v in self._base.data[table].items() if start <= k < stop
        }
        for key, value in staged.items():
            if start <= key < stop:
                merged[key] = value
        for key in sorted(merged):
            value = merged[key]
            if value is not None:
                yield key, value

    def commit(self) -> None:
        for table, staged in self._staged.items():
            rows = self._base.data[table]
            for key, value in staged.items():
                if value is None:
                    rows.pop(key, None)
                else:
                    rows[key] = value
