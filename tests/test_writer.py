"""The process's writer: group commits, and what a sender keeps beside the store.

Real LMDB in a temp directory; the writer commits in a worker thread as it
does while serving.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from eva.core.events import AnyEvent, LineWritten, MessagePosted
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.live.writer import MAX_GROUP, open_writer
from eva.store.event_store import Appended, EventStore
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


def leaves(start: int, count: int) -> list[LineWritten]:
    return [
        LineWritten(at_ms=1, start=i, size=1, text=f"ann: message {i}", first_ms=1, last_ms=1)
        for i in range(start, start + count)
    ]


async def test_appends_that_wait_go_in_one_commit_in_the_order_they_came(tmp_path: Path) -> None:
    """Lines and posts alike: a group takes every append waiting, up to MAX_GROUP."""
    store = store_in(tmp_path)
    landed: dict[str, int] = {}  # what -> the commit it landed in
    async with open_writer(store) as writer:
        await writer.append(A, [posted(i) for i in range(300 + MAX_GROUP)])
        start = writer.statistics().commits

        async def send(what: str, stream: StreamId, events: list[AnyEvent]) -> None:
            def stored() -> None:
                landed[what] = writer.statistics().commits - start

            await writer.append(stream, events, stored)

        async with trio.open_nursery() as nursery, writer.paused():
            nursery.start_soon(send, "lines", A, leaves(0, 300))
            await trio.testing.wait_all_tasks_blocked()
            for number in range(MAX_GROUP):
                nursery.start_soon(send, f"line {number}", A, leaves(300 + number, 1))
                await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "post", B, [posted(0)])
            await trio.testing.wait_all_tasks_blocked()
    assert landed["lines"] == 1
    assert {landed[f"line {n}"] for n in range(MAX_GROUP - 1)} == {1}
    assert landed[f"line {MAX_GROUP - 1}"] == landed["post"] == 2
    meta = store.meta(A)
    assert meta is not None and meta.lines == MAX_GROUP + 300


async def test_appends_queued_without_waiting_are_told_in_order_failures_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each sender of `append_later` is told once, in commit order: where its events
    landed, or why they were refused; a sender's broken callback harms nobody else."""
    store = store_in(tmp_path)
    told: list[tuple[str, object]] = []
    orphan = LineWritten(at_ms=1, start=7, size=1, text="no message", first_ms=1, last_ms=1)

    def tell(name: str) -> Callable[[Appended | BaseException], None]:
        return lambda outcome: told.append((name, outcome))

    def broken(outcome: Appended | BaseException) -> None:
        raise RuntimeError("the sender's own mistake")

    async with open_writer(store) as writer:
        async with writer.paused():  # all of them queue before the first commit
            await writer.append_later(A, [posted(0), posted(1)], tell("first"))
            await writer.append_later(A, [orphan], tell("orphan"))
            await writer.append_later(B, [posted(0)], broken)
            await writer.append_later(A, [posted(2)], tell("second"))
            await writer.append_later(A, [posted(9)], tell("gap"))  # index 3 is next
            assert told == []
        async with writer.paused():  # a later commit, told after the first
            await writer.append_later(A, [posted(3)], tell("third"))
    assert [name for name, _ in told] == ["first", "orphan", "second", "gap", "third"]
    outcome = dict(told)
    assert outcome["first"] == Appended(A, 0, 2)
    assert outcome["second"] == Appended(A, 2, 1)
    assert outcome["third"] == Appended(A, 3, 1)
    assert isinstance(outcome["orphan"], Rejected) and isinstance(outcome["gap"], Rejected)
    assert "the sender's own mistake" in caplog.text
    assert [e.index for _, e in store.events(A)] == [0, 1, 2, 3]  # type: ignore[attr-defined]
    assert store.meta(B) is not None


async def test_append_later_nowait_queues_only_while_there_is_room(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    told: list[Appended | BaseException] = []
    async with open_writer(store, capacity=2) as writer, writer.paused():
        await writer.append_later(A, [posted(0)], told.append)
        await trio.testing.wait_all_tasks_blocked()  # the writer holds it, waiting
        assert writer.append_later_nowait(A, [posted(1)], told.append)
        assert writer.append_later_nowait(A, [posted(2)], told.append)
        assert not writer.append_later_nowait(A, [posted(3)], told.append)
    assert told == [Appended(A, 0, 1), Appended(A, 1, 1), Appended(A, 2, 1)]
    meta = store.meta(A)
    assert meta is not None and meta.messages == 3


async def test_events_join_a_queued_append_until_it_goes_into_a_group(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    told: list[Appended | BaseException] = []
    async with open_writer(store) as writer:
        async with writer.paused():
            queued = await writer.append_later(A, [posted(0)], told.append)
            assert writer.join(queued, [posted(1), posted(2)])  # stored with it, at once
        assert await writer.append(A, [posted(3)]) == Appended(A, 3, 1)  # a later commit
        assert not writer.join(queued, [posted(4)])  # gone: nothing joins it now
    assert told == [Appended(A, 0, 3)]
    assert writer.statistics().appends == 2
    meta = store.meta(A)
    assert meta is not None and meta.messages == 4
