"""The process's writer: group commits, and what a sender keeps beside the store.

Real LMDB in a temp directory; the writer commits in a worker thread as it
does while serving.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from eva.core.events import AnyEvent, LineWritten, MessagePosted
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.live.pace import ALONE_EVENTS, QUIET_EVENTS, Pace
from eva.live.writer import open_writer
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


@pytest.mark.parametrize("process", [False, True], ids=["thread", "write process"])
async def test_people_go_first_and_lines_go_in_short_commits_of_their_own(
    tmp_path: Path, process: bool
) -> None:
    """Queued behind thousands of lines, a post lands in the next commit, alone; then,
    while people post at an everyday rate, the lines go in groups of their own of about
    ALONE_EVENTS events (the first append of a group goes whole)."""
    store = store_in(tmp_path)
    landed: list[tuple[str, int]] = []  # (what, the commit it landed in)

    everyday = Pace(quiet_after_s=math.inf, every_s=math.inf, busy_messages_per_s=math.inf)
    async with open_writer(store, process=process, pace=everyday) as writer:
        await writer.append(A, [posted(i) for i in range(2412)])

        async def send(
            what: str, stream: StreamId, events: list[AnyEvent], background: bool
        ) -> None:
            def stored() -> None:
                landed.append((what, writer.statistics().commits))

            await writer.append(stream, events, stored, background=background)

        start = writer.statistics().commits
        # Everything below queues up while the writer is paused.
        async with trio.open_nursery() as nursery, writer.paused():
            for number in range(8):
                lines = leaves(number * 300, 300)
                nursery.start_soon(send, f"lines {number}", A, lines, True)
                await trio.testing.wait_all_tasks_blocked()
            for number in range(12):
                lines = leaves(2400 + number, 1)
                nursery.start_soon(send, f"line {number}", A, lines, True)
                await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "post", B, [posted(0)], False)
            await trio.testing.wait_all_tasks_blocked()
    commit = {what: number - start for what, number in landed}
    assert commit["post"] == 1
    assert [commit[f"lines {n}"] for n in range(8)] == list(range(2, 10))
    assert ALONE_EVENTS < 300
    # Short appends share a commit, up to the limit.
    assert {commit[f"line {n}"] for n in range(12)} == {10}
    meta = store.meta(A)
    assert meta is not None and meta.lines == 2412


async def test_lines_go_in_long_commits_once_nobody_posts(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    landed: dict[int, int] = {}  # append number -> the commit it landed in
    async with open_writer(store, pace=Pace(quiet_after_s=0.005)) as writer:
        await writer.append(A, [posted(i) for i in range(2400)])
        start = writer.statistics().commits

        async def send(number: int) -> None:
            def stored() -> None:
                landed[number] = writer.statistics().commits - start

            await writer.append(A, leaves(number * 300, 300), stored, background=True)

        await trio.sleep(0.01)  # longer ago than quiet_after_s: nobody posts now
        async with trio.open_nursery() as nursery, writer.paused():
            for number in range(8):
                nursery.start_soon(send, number)
                await trio.testing.wait_all_tasks_blocked()
    # About QUIET_EVENTS at a time: the group that passes it ends.
    assert QUIET_EVENTS == 1024
    assert landed == {0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2, 7: 2}


async def test_in_a_burst_a_line_waits_for_its_turn_while_posts_go(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    # Every rate of people's messages counts as a burst, measured at every group.
    burst = Pace(quiet_after_s=math.inf, every_s=0.3, busy_messages_per_s=0, window_s=0)
    line_landed: list[float] = []
    posts = 0
    async with open_writer(store, pace=burst) as writer:
        started = trio.current_time()
        await writer.append(A, [posted(0)])

        async def line() -> None:
            def stored() -> None:
                line_landed.append(trio.current_time())

            await writer.append(A, leaves(0, 1), stored, background=True)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(line)
            with trio.fail_after(10):
                while not line_landed:
                    posts += 1
                    await writer.append(StreamId(2, posts), [posted(0)])
                    await trio.sleep(0.005)  # the line alone would go now, were it not a burst
    # The writer started a moment before `started`: its first turn came 0.3 s after.
    assert line_landed[0] - started >= 0.25
    assert posts >= 3, "posts went one after the other while the line waited"
    meta = store.meta(A)
    assert meta is not None and meta.lines == 1


@pytest.mark.parametrize("process", [False, True], ids=["thread", "write process"])
async def test_appends_queued_without_waiting_are_told_in_order_failures_too(
    tmp_path: Path, process: bool, caplog: pytest.LogCaptureFixture
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

    async with open_writer(store, process=process) as writer:
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
