# The in-memory backend: the same contract as LMDB, held in dicts.
#
# For tests and for rebuilding projections during replay. Nothing survives
# the process; a write that raises leaves the tables as they were.
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from eva.core.memtables import MemoryTables, OverlayTables
from eva.core.tables import Tables

T = TypeVar("T")


class MemoryBackend:
    """Dict tables; each write runs over a staging overlay and commits at the end."""

    def __init__(self) -> None:
        self.tables = MemoryTables()

    @contextmanager
    def reading(self) -> Iterator[Tables]:
        yield self.tables.copy()

    def write(self, work: Callable[[Tables], T]) -> T:
        overlay = OverlayTables(self.tables)
        result = work(overlay)
        overlay.commit()
        return result

    def release_pages(self) -> None:
        pass  # the tables are the memory itself

    def close(self) -> None:
        pass
