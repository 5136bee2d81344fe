"""The process's writer: group commits, and what a sender keeps beside the store.

Real LMDB in a temp directory; the writer commits in a worker thread as it
does while serving.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from eva.core.events import LineWritten, MessagePosted
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.live.writer import open_writer
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

A = StreamId(1, 10)
B = StreamId(1, 11)


def posted(index: int) -> MessagePosted:
    return MessagePosted(
        at_ms=1_700_000_000_000 + index,
        index=index,
        message_id=500 + index,
        author_id=3,
        author_name="ann",
        content=f"message {index}",
    )


def store_in(tmp_path: Path) -> EventStore:
    return EventStore(open_backend(tmp_path / "data"))


async def test_on_stored_runs_once_the_events_are_durable_before_the_sender_resumes(
    tmp_path: Path,
) -> None:
    store = store_in(tmp_path)
    seen: list[tuple[str, int]] = []

    def stored(name: str, stream: StreamId) -> None:
        meta = store.meta(stream)
        seen.append((name, 0 if meta is None else meta.messages))

    async def send(name: str, stream: StreamId) -> None:
        await writer.append(stream, [posted(0), posted(1)], lambda: stored(name, stream))
        # Both requests went in one group: both callbacks ran before either sender.
        seen.append((f"{name} resumed", len(seen)))

    async with open_writer(store) as writer, trio.open_nursery() as nursery:
        nursery.start_soon(send, "a", A)
        nursery.start_soon(send, "b", B)
    assert sorted(seen[:2]) == [("a", 2), ("b", 2)]  # the stored events are read back
    assert sorted(name for name, _ in seen[2:]) == ["a resumed", "b resumed"]
    assert all(count >= 2 for _, count in seen[2:])
    assert writer.statistics().commits == 1


async def test_on_stored_is_not_called_for_refused_events(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    called: list[str] = []
    orphan = LineWritten(at_ms=1, start=0, size=1, text="no message", first_ms=1, last_ms=1)
    async with open_writer(store) as writer:
        with pytest.raises(Rejected):
            await writer.append(A, [orphan], lambda: called.append("orphan"))
        await writer.append(A, [posted(0)], lambda: called.append("post"))
    assert called == ["post"]
    assert store.meta(A) is not None and store.meta(A).position == 1  # type: ignore[union-attr]
