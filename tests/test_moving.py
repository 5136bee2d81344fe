# A stream's state as reshard reads it (eva.store.moving): its digest worked out a chunk
# of rows at a time is the digest of the whole tables, and the pages read are let go of
# after every chunk, so a channel of a million messages is never held whole.
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_forget_cli import built, store_of  # noqa: F401

from eva.core.keys import StreamId, Table
from eva.core.replay import digest, projection_rows
from eva.core.tables import Tables
from eva.store import moving
from eva.store.lmdb_kv import open_backend


class Counting:
    """Tables that count the entries read since `release` was last called."""

    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self.read = self.most = self.releases = 0

    def _one(self) -> None:
        self.read += 1
        self.most = max(self.most, self.read)

    def get(self, table: Table, key: bytes) -> bytes | None:
        self._one()
        return self._tables.get(table, key)

    def scan(self, table: Table, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        for row in self._tables.scan(table, start, stop):
            self._one()
            yield row

    def release(self) -> None:
        self.releases += 1
        self.read = 0


def test_the_streamed_digest_is_the_whole_digest_read_a_chunk_at_a_time(
    built: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(moving, "DIGEST_ROWS", 16)
    streams = [StreamId(m.guild_id, m.channel_id) for m in store_of(built).streams()]
    backend = open_backend(built)
    try:
        with backend.reading() as tables:
            for stream in streams:
                counting = Counting(tables)
                streamed = moving.streamed_digest(counting, stream, counting.release)  # type: ignore[arg-type]
                assert streamed == digest(projection_rows(tables, stream))
                # the ids' pass may end a part chunk before a table's first: two chunks at most
                assert counting.most <= 2 * 16
                assert counting.releases > 4
    finally:
        backend.close()
