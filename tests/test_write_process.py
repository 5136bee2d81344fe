"""The write process: groups committed by a child interpreter, as the store commits them.

Real LMDB in a temp directory, a real child process. The same groups go to a
store in this process and to the write process over another directory; both
must answer alike and end with the same log and projections.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from killing import child_env

from eva.core.events import LineWritten, MessagePosted, ToolCalled
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.core.replay import projection_rows
from eva.live.writer import open_writer
from eva.store.event_store import Appended, Batch, EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream
from eva.store.write_process import Submitted, WriteProcess, WriteProcessError

A = StreamId(1, 10)
B = StreamId(2, 20)


def posted(index: int, content: str = "") -> MessagePosted:
    return MessagePosted(
        at_ms=1_700_000_000_000 + index * 1000,
        index=index,
        message_id=900 + index,
        author_id=5,
        author_name="bo",
        content=content or f"message {index} ünïcode ✓",
    )


def leaf(index: int) -> LineWritten:
    return LineWritten(
        at_ms=1, start=index, size=1, text=f"bo: message {index}", first_ms=1, last_ms=1
    )


def groups() -> list[list[Batch]]:
    """Groups as the writer makes them: several streams, a refused batch, one that cannot
    be encoded, lines over the messages."""
    return [
        [Batch(A, [posted(0), posted(1)]), Batch(B, [posted(0)])],
        [
            Batch(A, [leaf(0), leaf(1)]),
            Batch(B, [leaf(5)]),  # no message 5 in B: refused whole
            Batch(A, [ToolCalled(at_ms=2, name="x" * 3, result_bytes=2**70)]),  # too big an int
            Batch(B, [posted(1, "a" * 100_000), leaf(0)]),
            Batch(B, [posted(2, "half a pair \ud800")]),  # not UTF-8: refused here
        ],
        [Batch(A, [LineWritten(at_ms=3, start=0, size=2, text="bo twice", first_ms=1, last_ms=1)])],
    ]


def store_at(path: Path) -> EventStore:
    return EventStore(open_backend(path))


def snapshot(store: EventStore, stream: StreamId) -> tuple[object, ...]:
    """A stream's log, byte for byte and decoded, and its projections."""
    with store.backend.reading() as tables:
        rows = projection_rows(tables, stream)
    return list(store.raw_events(stream)), list(store.events(stream)), rows


def answers(results: list[Appended | Rejected]) -> list[object]:
    return [str(r) if isinstance(r, Rejected) else r for r in results]


def big_group(first: int, count: int) -> list[Batch]:
    """Posts of 100 kB each: the frame is many times what a pipe holds."""
    return [Batch(A, [posted(i, f"{i} " + "b" * 100_000) for i in range(first, first + count)])]


async def first_commit(process: WriteProcess) -> subprocess.Popen[bytes]:
    """Start the child and commit message 0 of A through it; the child."""
    process.start()
    assert await process.answer(await process.send([Batch(A, [posted(0)])])) == [
        Appended(A, 0, 1)
    ]
    child = process.child.process
    assert child is not None
    return child


async def test_the_write_process_commits_as_the_store_does(tmp_path: Path) -> None:
    here = store_at(tmp_path / "here")
    there = store_at(tmp_path / "there")
    process = WriteProcess(tmp_path / "there")
    try:
        for group in [*groups(), big_group(2, 40)]:  # the last is many times a pipe's size
            process.start()
            theirs, ours = await process.append_many(group), here.append_many(group)
            assert answers(theirs) == answers(ours)
            assert [getattr(r, "meta", None) for r in theirs] == [
                getattr(r, "meta", None) for r in ours
            ], "the same records as each batch left them"
    finally:
        process.close()
    assert process.started == 1
    for stream in (A, B):
        assert snapshot(there, stream) == snapshot(here, stream)
        assert replay_stream(there, stream).ok


async def test_a_dead_write_process_fails_its_group_and_the_next_starts_anew(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path / "data")
    process = WriteProcess(tmp_path / "data")
    try:
        child = await first_commit(process)
        child.kill()
        child.wait()
        with pytest.raises(WriteProcessError):
            await process.append_many([Batch(A, [posted(1)])])
        process.start()
        results = await process.append_many([Batch(A, [posted(1)])])
        assert results == [Appended(A, 1, 1)]
        assert process.started == 2
    finally:
        process.close()
    assert [event for _, event in store.events(A)] == [posted(0), posted(1)]


async def test_a_group_is_refused_without_a_start(tmp_path: Path) -> None:
    process = WriteProcess(tmp_path / "data")
    with pytest.raises(WriteProcessError):
        await process.append_many([Batch(A, [posted(0)])])


async def test_the_writer_commits_through_the_process_and_pauses_it(tmp_path: Path) -> None:
    store = store_at(tmp_path / "data")
    stored: list[str] = []
    async with open_writer(store, process=True) as writer:
        assert writer.process is not None
        async with trio.open_nursery() as nursery:
            for number, stream in enumerate((A, B)):
                events = [posted(i) for i in range(50)]
                nursery.start_soon(
                    lambda s=stream, e=events, n=number: writer.append(
                        s, e, lambda: stored.append(f"stream {n}")
                    )
                )
        async with writer.paused():  # the data file may be swapped here: the child is gone
            assert writer.process.child.process is None
        assert await writer.append(A, [leaf(0)]) == Appended(A, 50, 1)
        with pytest.raises(Rejected):
            await writer.append(B, [leaf(99)])
        assert writer.process.started == 2
    assert sorted(stored) == ["stream 0", "stream 1"]
    for stream in (A, B):
        assert replay_stream(store, stream).ok
    meta = store.meta(A)
    assert meta is not None and meta.messages == 50 and meta.lines == 1


CHILD = """
import sys, time
from pathlib import Path
import trio
from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.store.event_store import Batch
from eva.store.write_process import WriteProcess
process = WriteProcess(Path(sys.argv[1]))
process.start()
post = MessagePosted(at_ms=1, index=0, message_id=1, author_id=1, author_name="a")
trio.run(process.append_many, [Batch(StreamId(1, 1), [post])])
print(process.child.process.pid, flush=True)
time.sleep(60)
"""


def test_the_write_process_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        env=child_env(),
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    else:
        pytest.fail(f"the write process {pid} outlived its parent")
    store = store_at(tmp_path / "data")
    assert [seq for seq, _ in store.events(StreamId(1, 1))] == [0]


async def test_groups_handed_over_together_are_answered_each_its_own(tmp_path: Path) -> None:
    store = store_at(tmp_path / "data")
    process = WriteProcess(tmp_path / "data")
    try:
        process.start()
        first = await process.send([Batch(A, [posted(0), posted(1)])])
        second = await process.send([Batch(B, [posted(0)]), Batch(A, [posted(2)])])
        third = await process.send([Batch(A, [leaf(7)])])  # no message 7: refused
        # Waited for out of order: whoever reads, each group gets its own answer.
        assert answers(await process.answer(third)) == [
            f"{A}: line 7+1 passes the last message (2)"
        ]
        assert await process.answer(second) == [Appended(B, 0, 1), Appended(A, 2, 1)]
        assert await process.answer(first) == [Appended(A, 0, 2)]
    finally:
        process.close()
    assert [seq for seq, _ in store.events(A)] == [0, 1, 2]


async def test_groups_sent_to_a_child_that_died_fail_and_a_new_child_answers_its_own(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path / "data")
    process = WriteProcess(tmp_path / "data")
    try:
        child = await first_commit(process)
        child.kill()
        child.wait()
        lost = await process.send([Batch(A, [posted(1)])])  # sent to the dead child
        process.start()  # a new child, before anyone waited for the lost group
        after = await process.send([Batch(A, [posted(1)]), Batch(B, [posted(0)])])
        with trio.fail_after(20):  # a mix-up of answers would wait for ever
            assert await process.answer(after) == [Appended(A, 1, 1), Appended(B, 0, 1)]
        with pytest.raises(WriteProcessError):
            await process.answer(lost)
    finally:
        process.close()
    assert [event for _, event in store.events(A)] == [posted(0), posted(1)]




async def test_groups_sent_together_are_answered_each_its_own_in_any_order(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path / "data")
    process = WriteProcess(tmp_path / "data")
    got: dict[str, list[object]] = {}
    try:
        process.start()
        first = await process.send([Batch(A, [posted(0), posted(1)])])
        second = await process.send([*big_group(2, 20), Batch(B, [posted(0)])])
        third = await process.send([Batch(A, [leaf(99)])])  # no message 99: refused

        async def take(name: str, submitted: Submitted) -> None:
            got[name] = answers(await process.answer(submitted))

        async with trio.open_nursery() as nursery:  # the last group's task reads first
            for name, submitted in (("third", third), ("second", second), ("first", first)):
                nursery.start_soon(take, name, submitted)
                await trio.testing.wait_all_tasks_blocked()
    finally:
        process.close()
    assert got == {
        "first": [Appended(A, 0, 2)],
        "second": [Appended(A, 2, 20), Appended(B, 0, 1)],
        "third": [f"{A}: line 99+1 passes the last message (21)"],
    }
    assert [seq for seq, _ in store.events(A)] == list(range(22))


async def test_a_send_cancelled_halfway_stops_the_child_and_the_next_starts_anew(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path / "data")
    process = WriteProcess(tmp_path / "data")
    try:
        child = await first_commit(process)
        os.kill(child.pid, signal.SIGSTOP)  # it reads nothing more: the pipe fills up
        waiting = await process.send([Batch(B, [posted(0)])])  # sent whole, not answered
        with trio.move_on_after(0.5) as scope:
            await process.send(big_group(1, 20))
        assert scope.cancelled_caught
        assert process.child.process is None  # stopped: it could only misread the rest
        with pytest.raises(WriteProcessError):
            await process.answer(waiting)
        process.start()
        assert await process.answer(await process.send(big_group(1, 2))) == [Appended(A, 1, 2)]
    finally:
        process.close()
    assert [seq for seq, _ in store.events(A)] == [0, 1, 2]
    assert list(store.events(B)) == []
