"""Channel actors under a supervisor: quiet and overflow publishes, retries, sleep, bursts.

Every test runs on the mock clock (`autojump_clock`) over a real LMDB store in
its own directory. One thing needs care: the writer commits in a worker
thread, and a task waiting for a thread counts as blocked, so the mock clock
would jump (and `wait_all_tasks_blocked` return) while a commit runs.
`WatchedStore` counts the commits handed to a thread and `hold_clock` keeps
the loop busy until the writer has them back: commits take no mock time, and
`wait_all_tasks_blocked()` means that all background work is done.
"""

from __future__ import annotations

import gc
import itertools
import logging
import random
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.lowlevel
import trio.testing

from eva.core.address import Address
from eva.core.events import LineWritten, MessagePosted, RowPublished, ToolCalled
from eva.core.keys import StreamId
from eva.core.projection import Rejected, rendered_size
from eva.core.prompt import MemoryPrompt
from eva.core.settings import KIB, MINUTE_MS, LiveSettings, MemorySettings
from eva.core.summarize import OfflineSummarizer, Summarizer, Summary, Task
from eva.core.timing import compression_due
from eva.live import prompt_tail
from eva.live.channel_state import _InFlight
from eva.live.inputs import Delete, Edit, GetPrompt, Post, Recall, RecordTool, Zoom
from eva.live.posting import POST_BATCH, POSTS_IN_FLIGHT
from eva.live.request import Request
from eva.live.supervisor import (
    POSTED_START_DELAY_S,
    WAKES_PER_TURN,
    Supervisor,
    open_supervisor,
)
from eva.live.writer import Writer
from eva.memory.compress import run_cutoff
from eva.memory.view import ZoomError, memory_text
from eva.store.event_store import Appended, Batch, EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

BASE_MS = 1_700_000_000_000
MINUTE_S = MINUTE_MS / 1000
SMALL = MemorySettings(
    compress_at_bytes=6 * KIB,
    tail_keep_bytes=2 * KIB,
    overflow_tail_bytes=12 * KIB,
    row_high_bytes=12 * KIB,
    row_low_bytes=6 * KIB,
    prompt_tail_max_bytes=16 * KIB,
)
# One task per model request: no merge waits in the ready queue to fill a request,
# so once the model answers again the queue must run empty.
ONE_TASK = msgspec.structs.replace(SMALL, tasks_per_request=1)
LIVE = LiveSettings()
STREAM = StreamId(1, 2)


def mock_wall_ms() -> int:
    """Event times that follow the mock clock."""
    return int(trio.current_time() * 1000) + BASE_MS


class WatchedStore(EventStore):
    """The LMDB event store, counting the commits the writer hands to a worker thread."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.commits_started = 0
        self.commit_started = trio.Event()

    @property  # type: ignore[override]
    def append_many(self) -> Callable[[Sequence[Batch]], list[Appended | Rejected]]:
        # The writer reads this on the trio thread, just before it starts the thread.
        self.commits_started += 1
        self.commit_started.set()
        return super().append_many


async def hold_clock(store: WatchedStore, writer: Writer) -> None:
    """Keep the loop busy from the start of each commit until the writer has its result."""
    while True:
        await store.commit_started.wait()
        store.commit_started = trio.Event()
        while store.commits_started > writer.statistics().commits:
            await trio.lowlevel.checkpoint()


def fresh_store(tmp_path: Path) -> WatchedStore:
    return WatchedStore(open_backend(tmp_path / "data"))


@asynccontextmanager
async def running(
    store: WatchedStore,
    summarizer: Summarizer | None = None,
    settings: MemorySettings = SMALL,
    live: LiveSettings = LIVE,
    resume: bool = True,
) -> AsyncIterator[Supervisor]:
    """A supervisor on the mock clock, with commits held to no mock time."""
    async with open_supervisor(
        store,
        summarizer or OfflineSummarizer(),
        settings,
        live,
        wall_ms=mock_wall_ms,
        resume=resume,
    ) as supervisor, trio.open_nursery() as nursery:
        nursery.start_soon(hold_clock, store, supervisor.shared.writer)
        yield supervisor
        nursery.cancel_scope.cancel()


async def settle() -> None:
    """Wait until every task, background work included, waits for input or for time."""
    await trio.testing.wait_all_tasks_blocked()


def message(stream: StreamId, index: int, size: int = 150, at_ms: int | None = None) -> Post:
    """The post at `index` of `stream`: about `size` bytes, with a word to recall it by."""
    head = f"message {index} about topic{index % 7} in {stream.channel_id}: "
    filler = " ".join(f"w{(index * 31 + k) % 997}" for k in range(size // 4))
    return Post(
        message_id=stream.channel_id * 1_000_000 + index,
        author_id=index % 3,
        author_name=f"person{index % 3}",
        at_ms=mock_wall_ms() if at_ms is None else at_ms,
        content=(head + filler)[: max(size, len(head))],
    )


def posted(store: EventStore, stream: StreamId) -> list[MessagePosted]:
    return [event for _, event in store.events(stream) if isinstance(event, MessagePosted)]


def assert_stored_once_in_order(
    store: EventStore, count: int, stream: StreamId = STREAM
) -> None:
    """`stream` holds messages 0 .. count-1, each once and in order, and replays to the
    same projections."""
    assert [e.message_id for e in posted(store, stream)] == [
        message(stream, n).message_id for n in range(count)
    ]
    assert replay_stream(store, stream).ok


def publishes(store: EventStore, stream: StreamId) -> list[RowPublished]:
    return [event for _, event in store.events(stream) if isinstance(event, RowPublished)]


def line_addresses(store: EventStore, stream: StreamId) -> list[tuple[int, int]]:
    return [(e.start, e.size) for _, e in store.events(stream) if isinstance(e, LineWritten)]


def leaves_without_holes(store: EventStore, stream: StreamId) -> bool:
    """Whether the leaves written are exactly those before the leaf frontier.

    A run that gave up on a leaf leaves a hole: leaves after it, none at it.
    """
    leaves = {start for start, size in line_addresses(store, stream) if size == 1}
    return leaves == set(range(meta_of(store, stream).leaf_frontier))


def meta_of(store: EventStore, stream: StreamId) -> Any:
    meta = store.meta(stream)
    assert meta is not None
    return meta


async def post_range(supervisor: Supervisor, start: int, stop: int) -> None:
    """Post messages start..stop-1 of STREAM, each stored before the next."""
    for index in range(start, stop):
        assert await supervisor.ask(STREAM, message(STREAM, index)) == index


async def asleep_with_a_message(supervisor: Supervisor, streams: list[StreamId]) -> None:
    """Store message 0 in each channel, then wait until every actor sleeps."""
    for stream in streams:
        await supervisor.ask(stream, message(stream, 0))
    await trio.sleep(LIVE.idle_seconds + 1)
    await settle()
    assert supervisor.awake() == []


async def prompt(supervisor: Supervisor, stream: StreamId = STREAM) -> str:
    memory = await supervisor.ask(stream, GetPrompt())
    assert isinstance(memory, MemoryPrompt)
    return memory.block


def split_prompt(text: str) -> tuple[list[str], list[str]]:
    """The row lines inside <memory> and the tail lines after it."""
    inside, _, tail = text.partition("</memory>")
    row = [line for line in inside.removeprefix("<memory>").split("\n") if line]
    return row, [line for line in tail.split("\n") if line]


async def test_quiet_publish_after_thirty_minutes(tmp_path: Path, autojump_clock: Any) -> None:
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        for index in range(60):
            assert await supervisor.ask(STREAM, message(STREAM, index)) == index
        last_input_ms = mock_wall_ms()
        await settle()
        meta = meta_of(store, STREAM)
        assert meta.leaf_frontier > 0, "the compression run wrote no leaves"
        assert leaves_without_holes(store, STREAM)
        assert not compression_due(meta, SMALL)
        assert publishes(store, STREAM) == []
        before = await prompt(supervisor)
        assert split_prompt(before)[0] == [] and len(split_prompt(before)[1]) == 60

        await trio.sleep(29 * MINUTE_S)
        await settle()
        assert publishes(store, STREAM) == []
        assert await prompt(supervisor) == before

        await trio.sleep(MINUTE_S + 1)
        await settle()
        [row] = publishes(store, STREAM)
        assert row.reason == "quiet"
        assert row.at_ms - last_input_ms == SMALL.quiet_ms
        assert row.frontier == meta.leaf_frontier
        after = await prompt(supervisor)
        row_lines, tail_lines = split_prompt(after)
        assert row_lines, "the published row is not in <memory>"
        assert len(tail_lines) == 60 - row.frontier
        assert tail_lines[0].startswith(f"[{row.frontier}] ")
        assert len(after.encode()) < len(before.encode())
        assert after == memory_text(store, STREAM, SMALL)
    assert replay_stream(store, STREAM).ok


async def test_lines_compression_wrote_are_measured_so_a_publish_reads_none_back(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lines of a compression run are measured by its task once they are stored:
    the quiet publish that follows finds every line of its row measured, and reads
    none back from the store."""
    store = fresh_store(tmp_path)
    settings = msgspec.structs.replace(SMALL, overflow_tail_bytes=256 * KIB)  # quiet only
    async with running(store, settings=settings) as supervisor:
        for index in range(1100):
            await supervisor.submit_all(STREAM, [message(STREAM, index, size=60)])
        await settle()
        assert publishes(store, STREAM) == []
        meta = meta_of(store, STREAM)
        assert meta.leaf_frontier > 1000
        found: list[object] = []  # lines read back (those asked for and not written aside)
        lines = store.lines

        def read_lines(stream: StreamId, at: Any) -> Any:
            read = lines(stream, at)
            found.extend(read)
            return read

        monkeypatch.setattr(store, "lines", read_lines)
        await trio.sleep(31 * MINUTE_S)
        await settle()
        [row] = publishes(store, STREAM)
        assert row.reason == "quiet" and row.frontier == meta.leaf_frontier
        assert found == [], "a line of the row was not measured"
        assert await prompt(supervisor) == memory_text(store, STREAM, settings)
    assert replay_stream(store, STREAM).ok


async def test_overflow_publish_when_the_chat_never_goes_quiet(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    sizes: list[int] = []
    published_after: int | None = None
    async with running(store) as supervisor:
        for index in range(120):
            post = message(STREAM, index, size=200)
            sizes.append(rendered_size(post.author_name, post.content, post.attachments))
            await supervisor.ask(STREAM, post)
            await settle()  # the publish follows the answer, before the next input
            if published_after is None and publishes(store, STREAM):
                published_after = index
            await trio.sleep(MINUTE_S)
            await settle()
        rows = publishes(store, STREAM)
    assert published_after is not None, "no publish although the tail passed the overflow mark"
    # It published on the very message that took the tail past the mark.
    assert sum(sizes[: published_after + 1]) > SMALL.overflow_tail_bytes
    assert sum(sizes[:published_after]) <= SMALL.overflow_tail_bytes
    assert len(rows) >= 2
    assert {row.reason for row in rows} == {"overflow"}
    meta = meta_of(store, STREAM)
    assert meta.tail_bytes <= SMALL.overflow_tail_bytes + max(sizes)
    assert replay_stream(store, STREAM).ok


class BrokenModel:
    """A summarizer that raises until `healthy` is set; it records when it was called."""

    def __init__(self) -> None:
        self.healthy = False
        self.failed_at: list[float] = []
        self.offline = OfflineSummarizer()

    async def summarize(self, tasks: Sequence[Task]) -> list[Summary]:
        if not self.healthy:
            self.failed_at.append(trio.current_time())
            raise ConnectionError("the model is unreachable")
        return await self.offline.summarize(tasks)


async def test_no_publish_while_lines_are_missing_then_retry_finishes(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    model = BrokenModel()
    sent = 0
    async with running(store, model, ONE_TASK) as supervisor:
        for _ in range(8):
            for _ in range(6):
                assert await supervisor.ask(STREAM, message(STREAM, sent, size=700)) == sent
                sent += 1
            await trio.sleep(30 * MINUTE_S)
            await settle()
            meta = meta_of(store, STREAM)
            assert meta.messages == sent
            assert meta.lines == 0 and meta.leaf_frontier == 0
            assert publishes(store, STREAM) == []
            text = await prompt(supervisor)
            assert len(text.encode()) <= SMALL.prompt_tail_max_bytes + 64
            assert f"[{sent - 1}] " in text, "the newest message is not in the prompt"
        assert "are not shown here: no published line covers them yet" in text
        assert text == memory_text(store, STREAM, SMALL)

        # Retries back off: 5 s, then doubling, up to 600 s between runs.
        runs = sorted(set(model.failed_at))
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(runs)]
        assert gaps[:4] == [5, 10, 20, 40]
        assert max(gaps) == LIVE.retry_most_seconds
        assert gaps == sorted(gaps)
        assert supervisor.statistics().runs_failed == len(runs)
        assert STREAM in supervisor.awake(), "the actor slept with a retry pending"

        model.healthy = True
        await trio.sleep(LIVE.retry_most_seconds + 1)
        await settle()
        meta = meta_of(store, STREAM)
        assert meta.leaf_frontier == run_cutoff(store, STREAM, SMALL) > 0
        assert meta.ready == 0
        rows = publishes(store, STREAM)
        assert rows, "no publish after the lines were finished"
        assert rows[-1].frontier == meta.leaf_frontier
        row_lines, _ = split_prompt(await prompt(supervisor))
        assert row_lines
    assert replay_stream(store, STREAM).ok


class OneBadLeaf:
    """A summarizer that fails every batch holding one leaf, until `healthy` is set."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.healthy = False
        self.offline = OfflineSummarizer()

    async def summarize(self, tasks: Sequence[Task]) -> list[Summary]:
        if not self.healthy and any(t.address == Address(self.start, 1) for t in tasks):
            raise ConnectionError("the model is unreachable")
        return await self.offline.summarize(tasks)


async def test_retry_finishes_the_leaves_a_failed_run_left(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    model = OneBadLeaf(3)
    async with running(store, model, ONE_TASK) as supervisor:
        # 9 long messages pass the mark; the run keeps the newest two (under 2 KiB).
        for index in range(9):
            await supervisor.ask(STREAM, message(STREAM, index, size=700))
        await settle()
        leaves = sorted(s for s, n in line_addresses(store, STREAM) if n == 1)
        assert leaves == [0, 1, 2, 4, 5, 6], "the run should leave a hole at the bad leaf"
        assert meta_of(store, STREAM).leaf_frontier == 3

        model.healthy = True
        await trio.sleep(LIVE.retry_first_seconds + 1)
        await settle()
        assert leaves_without_holes(store, STREAM)
        assert meta_of(store, STREAM).leaf_frontier == 7
        assert supervisor.statistics().runs_failed == 1


async def test_a_read_that_wakes_a_channel_is_answered_and_keeps_it_awake(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # The actor's read task takes a read off its inbox one scheduling turn before it
    # serves it. A read is counted from the moment it is queued, so the actor cannot
    # decide to sleep in that turn: it would cut off a read that writes (a tool record)
    # unanswered. Here the delete of an unknown message is served without a pause
    # while the tool record behind it is in that turn; trio orders each turn's tasks
    # at random, so two dozen channels see both orders.
    store = fresh_store(tmp_path)
    streams = [StreamId(1, 100 + n) for n in range(24)]
    async with running(store) as supervisor:
        await asleep_with_a_message(supervisor, streams)
        for n, stream in enumerate(streams):
            requests = await supervisor.submit_all(
                stream,
                [
                    Delete(message_ids=(999,), at_ms=mock_wall_ms()),
                    RecordTool(name="recall", arguments="{}", result_bytes=n),
                ],
            )
            with trio.fail_after(5):
                assert [await request.result() for request in requests] == [0, None]
            assert stream in supervisor.awake(), "a channel just read went back to sleep"
    for n, stream in enumerate(streams):
        tools = [e for _, e in store.events(stream) if isinstance(e, ToolCalled)]
        assert [tool.result_bytes for tool in tools] == [n]


async def test_idle_actor_sleeps_and_wakes_with_the_same_state(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    idle = LIVE.idle_seconds
    async with running(store) as supervisor:
        # Nothing pending: it sleeps after idle_seconds without input.
        await post_range(supervisor, 0, 10)
        small_chat = await prompt(supervisor)
        await trio.sleep(idle - 1)
        await settle()
        assert supervisor.awake() == [STREAM]
        await trio.sleep(2)
        await settle()
        assert supervisor.awake() == []
        assert supervisor.statistics().slept == 1
        assert await prompt(supervisor) == small_chat
        assert supervisor.statistics().woken == 2
        await settle()
        # Being read keeps it awake a while (a question may follow), then it sleeps again.
        assert supervisor.awake() == [STREAM]
        await trio.sleep(idle + 1)
        await settle()
        assert supervisor.awake() == []

        # A publish pending keeps it awake past idle_seconds.
        await post_range(supervisor, 10, 70)
        await trio.sleep(idle + 1)
        await settle()
        assert supervisor.awake() == [STREAM]
        await trio.sleep(SMALL.quiet_ms / 1000)
        await settle()
        assert publishes(store, STREAM)
        assert supervisor.awake() == []

        before = await prompt(supervisor)
        start, size = max(line_addresses(store, STREAM), key=lambda address: address[1])
        assert size > 1
        zoomed = await supervisor.ask(STREAM, Zoom(address=f"{start}+{size}"))
        leaf = await supervisor.ask(STREAM, Zoom(address="65+1"))
        found = await supervisor.ask(STREAM, Recall(query="topic3"))
        await trio.sleep(idle + 1)
        await settle()
        assert supervisor.awake() == []
        statistics = supervisor.statistics()
        assert statistics.slept == statistics.woken

        assert await prompt(supervisor) == before
        assert supervisor.statistics().woken == statistics.woken + 1
        assert await supervisor.ask(STREAM, Zoom(address=f"{start}+{size}")) == zoomed
        assert len(zoomed.lines) == 2
        assert await supervisor.ask(STREAM, Zoom(address="65+1")) == leaf
        assert leaf.message is not None and leaf.message.index == 65
        assert await supervisor.ask(STREAM, Recall(query="topic3")) == found
        assert found.total == len([i for i in range(70) if i % 7 == 3])
        assert before == memory_text(store, STREAM, SMALL)


class ActorStarts(trio.abc.Instrument):
    """Counts, for each turn of the scheduler, the actors that take their first step."""

    def __init__(self) -> None:
        self.turns: list[int] = [0]
        self.seen: set[trio.lowlevel.Task] = set()

    def before_io_wait(self, timeout: float) -> None:
        if self.turns[-1]:
            self.turns.append(0)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("ChannelActor.run") and task not in self.seen:
            self.seen.add(task)
            self.turns[-1] += 1


async def test_many_channels_woken_at_once_start_a_few_in_each_turn(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Waking is spread over turns of the scheduler, so commits are answered between
    them; a channel not started yet takes posts at once and answers them."""
    store = fresh_store(tmp_path)
    streams = [StreamId(9, n) for n in range(5 * WAKES_PER_TURN)]
    answers: list[Any] = []
    async with running(store) as supervisor:
        await asleep_with_a_message(supervisor, streams)
        starts = ActorStarts()
        trio.lowlevel.add_instrument(starts)
        try:
            for stream in streams:
                supervisor.wake(stream)
            taken = supervisor.post_now(
                streams[-1], [Request(message(streams[-1], 1), on_answer=answers.append)]
            )
            assert taken  # its actor has not started: the post goes at once all the same
            await settle()
        finally:
            trio.lowlevel.remove_instrument(starts)
        assert sum(starts.turns) == len(streams)
        assert max(starts.turns) == WAKES_PER_TURN
        assert [request.answered() for request in answers] == [1]
        for stream in streams:
            assert await prompt(supervisor, stream) == memory_text(store, stream, SMALL)
    assert_stored_once_in_order(store, 2, streams[-1])


async def test_a_channel_woken_by_posts_begins_its_loop_after_a_delay(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """Posts to a sleeping channel are stored before its loop begins, which waits
    POSTED_START_DELAY_S; an input that needs the loop begins it at once."""
    store = fresh_store(tmp_path)
    streams = [StreamId(9, n) for n in range(3)]
    loops = lambda: sorted(  # noqa: E731
        n for n in task_names() if n.endswith("ChannelActor.run")
    )
    answers: list[Any] = []
    async with running(store) as supervisor:
        start = trio.current_time()
        for stream in streams:
            request = Request(message(stream, 0), on_answer=lambda r: answers.append(r.answered()))
            assert supervisor.post_now(stream, [request])
        await settle()
        assert answers == [0, 0, 0]  # stored, with no loop running
        assert supervisor.awake() == streams and loops() == []
        prompt_of_one = await supervisor.submit(streams[1], GetPrompt())
        await settle()
        assert len(loops()) == 1 and trio.current_time() == start  # begun at once
        assert (await prompt_of_one.result()).block == memory_text(store, streams[1], SMALL)
        await trio.sleep_until(start + POSTED_START_DELAY_S)
        await settle()
        assert len(loops()) == len(streams)
    for stream in streams:
        assert_stored_once_in_order(store, 1, stream)


def task_names() -> list[str]:
    """The names of every task running, from the root task down."""
    names: list[str] = []
    tasks = [trio.lowlevel.current_root_task()]
    while tasks:
        task = tasks.pop()
        if task is None:
            continue
        names.append(task.name)
        tasks.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return names


async def test_the_task_that_serves_reads_starts_with_the_first_read(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A channel woken by posts runs one task; its first read starts the second, which
    serves the reads queued before it started, in order, and stays until it sleeps."""
    store = fresh_store(tmp_path)
    readers = lambda: [n for n in task_names() if n.endswith("_serve_reads")]  # noqa: E731
    async with running(store) as supervisor:
        await post_range(supervisor, 0, 5)
        await trio.sleep(POSTED_START_DELAY_S)  # its loop begins
        await settle()
        assert supervisor.awake() == [STREAM] and readers() == []
        first = await supervisor.submit(STREAM, GetPrompt())
        second = await supervisor.submit(STREAM, Recall(query="topic3"))
        assert len(readers()) == 1
        assert (await first.result()).block == memory_text(store, STREAM, SMALL)
        assert (await second.result()).total == 1
        await post_range(supervisor, 5, 6)
        assert await prompt(supervisor) == memory_text(store, STREAM, SMALL)
        assert len(readers()) == 1
        await trio.sleep(LIVE.idle_seconds + 1)
        await settle()
        assert supervisor.awake() == [] and readers() == []
        assert await prompt(supervisor) == memory_text(store, STREAM, SMALL)  # woken by a read


async def test_a_woken_channel_reads_its_tail_at_the_first_prompt_and_then_keeps_it(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waking reads no messages: a channel woken by posts reads its tail when first
    asked for a prompt, and keeps it up to date from then on."""
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        await post_range(supervisor, 0, 10)
    reads: list[StreamId] = []
    read = prompt_tail.tail_messages
    monkeypatch.setattr(
        prompt_tail, "tail_messages",
        lambda store, stream: reads.append(stream) or read(store, stream),
    )
    store = WatchedStore(store.backend)  # a new process
    async with running(store, resume=False) as supervisor:
        await post_range(supervisor, 10, 12)
        await settle()
        assert reads == []
        first = await prompt(supervisor)
        assert reads == [STREAM]
        assert first == memory_text(store, STREAM, SMALL)
        assert len(split_prompt(first)[1]) == 12
        await post_range(supervisor, 12, 13)
        assert await prompt(supervisor) == memory_text(store, STREAM, SMALL)
        assert reads == [STREAM]


async def test_an_actor_idle_while_its_posts_commit_sleeps_once_they_are_stored(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 0)) == 0
        await settle()
        async with supervisor.shared.writer.paused():
            late = await supervisor.submit_all(STREAM, [message(STREAM, 1)])
            await trio.sleep(LIVE.idle_seconds + 1)  # a commit slower than the actor idles
            await settle()
            assert supervisor.awake() == [STREAM]  # its posts in flight keep it awake
        assert await late[0].result() == 1
        await settle()
        assert supervisor.awake() == []


async def test_a_prompt_shows_the_posts_ahead_as_they_will_be_stored(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        await post_range(supervisor, 0, 5)
        # A question's lane: two posts stored already, three not yet (one seen twice).
        ahead = [message(STREAM, index) for index in (3, 4, 5, 6, 6, 7)]
        early = await supervisor.ask(STREAM, GetPrompt(ahead=tuple(ahead)))
        for post in ahead:
            await supervisor.ask(STREAM, post)
        assert isinstance(early, MemoryPrompt)
        assert early.block == await prompt(supervisor)
        _, tail = split_prompt(early.block)
        assert [line.split("]")[0] for line in tail] == [f"[{index}" for index in range(8)]


@pytest.mark.slow
async def test_a_hundred_channels_at_once(tmp_path: Path, autojump_clock: Any) -> None:
    store = fresh_store(tmp_path)
    streams = [StreamId(1, 100 + c) for c in range(100)]
    answers: dict[StreamId, list[int]] = {stream: [] for stream in streams}
    sent: dict[StreamId, list[int]] = {stream: [] for stream in streams}

    async def sender(stream: StreamId, rng: random.Random) -> None:
        for index in range(60):
            post = message(stream, index, size=rng.choice([40, 150, 400]))
            sent[stream].append(post.message_id)
            answers[stream].append(await supervisor.ask(stream, post))
            if rng.random() < 0.3:
                await trio.lowlevel.checkpoint()

    async with running(store) as supervisor:
        async with trio.open_nursery() as nursery:
            for number, stream in enumerate(streams):
                nursery.start_soon(sender, stream, random.Random(number))
        await settle()
        statistics = supervisor.statistics()
    for stream in streams:
        assert answers[stream] == list(range(60)), stream
        stored = posted(store, stream)
        assert [event.index for event in stored] == list(range(60))
        assert [event.message_id for event in stored] == sent[stream]
        meta = meta_of(store, stream)
        assert meta.messages == 60
        assert replay_stream(store, stream).ok, stream
    assert sum(meta_of(store, s).lines for s in streams) > 0, "no compression ran"
    assert statistics.appends >= 6000
    assert statistics.commits * 10 < statistics.appends, statistics


class ChaosModel:
    """Fails, hangs or answers late, at random, until `healthy` is set."""

    def __init__(self, rng: random.Random, timeout_s: float) -> None:
        self.rng = rng
        self.timeout_s = timeout_s
        self.healthy = False
        self.offline = OfflineSummarizer()
        self.outcomes: dict[str, int] = {"fail": 0, "hang": 0, "late": 0, "ok": 0}

    async def summarize(self, tasks: Sequence[Task]) -> list[Summary]:
        if self.healthy:
            self.outcomes["ok"] += 1
            return await self.offline.summarize(tasks)
        roll = self.rng.random()
        if roll < 0.35:
            self.outcomes["fail"] += 1
            raise RuntimeError("the model failed")
        if roll < 0.6:
            self.outcomes["hang"] += 1
            await trio.sleep_forever()
        self.outcomes["late"] += 1
        await trio.sleep(self.rng.uniform(0.5, 1.5 * self.timeout_s))
        return await self.offline.summarize(tasks)


async def test_a_failing_hanging_model_never_blocks_the_chat(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    live = LiveSettings(model_timeout_seconds=30, retry_most_seconds=300)
    model = ChaosModel(random.Random(7), live.model_timeout_seconds)
    streams = [StreamId(3, c) for c in (1, 2, 3)]
    count = 150

    async def chat(stream: StreamId, rng: random.Random) -> None:
        for index in range(count):
            post = message(stream, index, size=rng.choice([60, 200, 600, 900]))
            with trio.fail_after(1):
                assert await supervisor.ask(stream, post) == index
            if index % 10 == 0:
                with trio.fail_after(1):
                    text = await prompt(supervisor, stream)
                assert f"[{index}] " in text
            await trio.sleep(rng.uniform(1, 40))

    async with running(store, model, ONE_TASK, live) as supervisor:
        async with trio.open_nursery() as nursery:
            for number, stream in enumerate(streams):
                nursery.start_soon(chat, stream, random.Random(number))
        for stream in streams:
            assert meta_of(store, stream).messages == count
        assert model.outcomes["fail"] and model.outcomes["hang"] and model.outcomes["late"]
        assert supervisor.statistics().runs_failed > 0

        model.healthy = True
        await trio.sleep(live.retry_most_seconds + live.model_timeout_seconds + 1)
        await settle()
        for stream in streams:
            meta = meta_of(store, stream)
            assert meta.ready == 0, stream
            assert leaves_without_holes(store, stream), stream
            assert not compression_due(meta, SMALL), stream
            addresses = line_addresses(store, stream)
            assert len(addresses) == len(set(addresses)), f"{stream}: a line written twice"
        await trio.sleep(SMALL.quiet_ms / 1000)
        await settle()
        for stream in streams:
            meta = meta_of(store, stream)
            assert meta.row_frontier == meta.leaf_frontier, stream
            assert await prompt(supervisor, stream) == memory_text(store, stream, SMALL)
            assert replay_stream(store, stream).ok, stream


async def test_bad_input_is_answered_with_its_error_and_the_channel_goes_on(
    tmp_path: Path, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = fresh_store(tmp_path)
    other = StreamId(1, 3)
    async with running(store) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 0)) == 0
        assert await supervisor.ask(other, message(other, 0)) == 0
        unknown = Edit(message_id=424242, at_ms=mock_wall_ms(), content="new words")
        assert await supervisor.ask(STREAM, unknown) is False

        bad = Post(message_id=77, author_id=1, author_name="mallory", at_ms=1, content="\ud800")
        with caplog.at_level(logging.ERROR, logger="eva.live.actor"):
            with pytest.raises(Rejected, match="cannot be stored"):
                await supervisor.ask(STREAM, bad)
            with pytest.raises(ZoomError):
                await supervisor.ask(STREAM, Zoom(address="not an address"))
        failed = [record for record in caplog.records if record.name == "eva.live.actor"]
        assert len(failed) == 1  # a bad zoom address is answered, not logged as a crash
        assert "mallory" in failed[0].getMessage() and failed[0].exc_info is not None
        assert supervisor.statistics().crashes == 1

        assert await supervisor.ask(STREAM, message(STREAM, 1)) == 1
        edit = Edit(message_id=message(STREAM, 1).message_id, at_ms=2, content="fixed")
        assert await supervisor.ask(STREAM, edit) is True
        assert await supervisor.ask(other, message(other, 1)) == 1
        assert STREAM in supervisor.awake() and other in supervisor.awake()
        text = await prompt(supervisor)
        assert "[1] " in text and "fixed" in text
    assert [e.message_id for e in posted(store, STREAM)] == [
        message(STREAM, 0).message_id,
        message(STREAM, 1).message_id,
    ]
    assert store.index_of(STREAM, 77) is None
    assert replay_stream(store, STREAM).ok and replay_stream(store, other).ok


async def test_full_inboxes_slow_senders_down_and_drop_nothing(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    live = LiveSettings(inbox_capacity=2, writer_capacity=1)
    streams = [StreamId(5, 1), StreamId(5, 2)]
    senders = 3 * POST_BATCH + 30  # more than an actor takes in while the writer is held
    done: list[tuple[StreamId, int]] = []

    async def send(stream: StreamId, number: int) -> None:
        await supervisor.ask(stream, message(stream, number))
        done.append((stream, number))

    async with running(store, live=live) as supervisor:
        writer = supervisor.shared.writer
        async with trio.open_nursery() as nursery, writer.paused():
            for stream in streams:
                for number in range(senders):
                    nursery.start_soon(send, stream, number)
            await settle()
            assert done == []
            assert all(store.meta(stream) is None for stream in streams)
            for stream in streams:
                # Batches of posts in the actor's hands (held by the writer, or waiting for
                # room there): as many as skip the inbox, and a batch the loop took from
                # it. Two in its inbox, the rest wait to send.
                held = sum(len(f.posts) for f in supervisor._actors[stream]._in_flight)
                inbox = supervisor._actors[stream].send.statistics()
                assert inbox.current_buffer_used == live.inbox_capacity
                assert 0 < held <= POSTS_IN_FLIGHT + POST_BATCH
                assert inbox.tasks_waiting_send == senders - held - live.inbox_capacity > 0
        await settle()
    assert sorted(done) == sorted((s, n) for s in streams for n in range(senders))
    for stream in streams:
        stored = posted(store, stream)
        assert sorted(e.message_id for e in stored) == [
            message(stream, n).message_id for n in range(senders)
        ]
        assert [e.index for e in stored] == list(range(senders))
        assert replay_stream(store, stream).ok


async def test_result_soon_takes_a_given_answer_without_a_checkpoint() -> None:
    given, failed, pending = Request(GetPrompt()), Request(GetPrompt()), Request(GetPrompt())
    given.reply("the answer")
    failed.reply(error=ValueError("the actor's error"))
    with trio.testing.assert_no_checkpoints():
        assert await given.result_soon() == "the answer"
        with pytest.raises(ValueError, match="the actor's error"):
            await failed.result_soon()
    with trio.testing.assert_checkpoints():
        assert await given.result() == "the answer"  # `result` always gives a turn

    async def answer_later() -> None:
        await trio.sleep(0.01)
        pending.reply(7)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_later)
        with trio.testing.assert_checkpoints():
            assert await pending.result_soon() == 7  # it waits for an answer not given yet


async def test_leaves_show_the_messages_as_edited_and_deleted_before_them(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # The actor keeps the messages it stored for the leaves; a change must reach them.
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        await post_range(supervisor, 0, 6)
        edit = Edit(message_id=message(STREAM, 2).message_id, at_ms=2, content="edited words")
        assert await supervisor.ask(STREAM, edit) is True
        gone = Delete(message_ids=(message(STREAM, 4).message_id,), at_ms=3)
        assert await supervisor.ask(STREAM, gone) == 1
        index = 6
        while meta_of(store, STREAM).leaf_frontier < 6:  # until the early ones have leaves
            await supervisor.ask(STREAM, message(STREAM, index))
            index += 1
        await trio.testing.wait_all_tasks_blocked()
    leaves = {
        event.start: event.text
        for _, event in store.events(STREAM)
        if isinstance(event, LineWritten) and event.size == 1
    }
    assert leaves[2] == f"{message(STREAM, 2).author_name}: edited words"
    assert leaves[4] == ""  # an erased message leaves an empty leaf
    assert leaves[3] == f"{message(STREAM, 3).author_name}: {message(STREAM, 3).content}"
    assert replay_stream(store, STREAM).ok


class GatedStore(EventStore):
    """Commits wait in the writer's worker thread until the test opens the gate."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.gate = threading.Event()
        self.gate.set()
        self.commits_started = 0

    def append_many(self, batches: Sequence[Batch]) -> list[Appended | Rejected]:
        self.commits_started += 1
        self.gate.wait(10)
        return super().append_many(batches)


async def test_a_channel_sends_posts_while_one_commits_and_joins_those_not_taken_yet(
    tmp_path: Path,
) -> None:
    """Posts of an idle actor go to the writer from the sender's task: one batch commits
    while the next waits for the writer, and posts that come meanwhile join the one
    waiting (one append); each is answered by its commit, in order, and an edit behind
    them waits until they are stored. On trio's real clock: a commit is held in its
    thread."""
    store = GatedStore(open_backend(tmp_path / "data"))
    async with open_supervisor(store, OfflineSummarizer(), SMALL, LIVE) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 0)) == 0
        await trio.sleep(0.05)  # the actor waits for input
        actor = supervisor._actors[STREAM]
        appends = supervisor.statistics().appends
        store.gate.clear()
        first = await supervisor.submit_all(STREAM, [message(STREAM, 1)])
        assert len(actor._in_flight) == 1  # handed over before the sender's next turn
        with trio.fail_after(5):
            while store.commits_started < 2:  # the writer took it; its commit waits  # noqa: ASYNC110
                await trio.sleep(0.001)  # a thread counts the commits: no event to wait on
        second = await supervisor.submit_all(STREAM, [message(STREAM, 2)])
        third = await supervisor.submit_all(STREAM, [message(STREAM, 3), message(STREAM, 4)])
        assert [len(flight.posts) for flight in actor._in_flight] == [1, 3]
        fixed = Edit(message_id=message(STREAM, 4).message_id, at_ms=1, content="fixed")
        edit = await supervisor.submit(STREAM, fixed)
        await trio.sleep(0.05)
        assert not any(request.is_done for request in [*first, *second, *third, edit])
        store.gate.set()
        answers = [await request.result() for request in [*first, *second, *third]]
        assert answers == [1, 2, 3, 4]
        assert await edit.result() is True
        assert supervisor.statistics().appends - appends == 3  # 1; 2 to 4; the edit
        assert "fixed" in await prompt(supervisor)
    assert_stored_once_in_order(store, 5)


async def test_a_refused_batch_in_flight_is_stored_one_by_one_and_the_ones_behind_it_too(
    tmp_path: Path,
) -> None:
    store = GatedStore(open_backend(tmp_path / "data"))
    bad = Post(message_id=77, author_id=1, author_name="mallory", at_ms=1, content="\ud800")
    async with open_supervisor(store, OfflineSummarizer(), SMALL, LIVE) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 0)) == 0
        await trio.sleep(0.05)  # the actor waits for input
        store.gate.clear()
        mixed = await supervisor.submit_all(STREAM, [message(STREAM, 1), bad])
        with trio.fail_after(5):
            while store.commits_started < 2:  # its commit waits  # noqa: ASYNC110
                await trio.sleep(0.001)  # a thread counts the commits: no event to wait on
        behind = await supervisor.submit_all(STREAM, [message(STREAM, 2)])
        joined = await supervisor.submit_all(STREAM, [message(STREAM, 3)])
        assert [len(f.posts) for f in supervisor._actors[STREAM]._in_flight] == [2, 2]
        store.gate.set()
        assert await mixed[0].result() == 1
        with pytest.raises(Rejected, match="cannot be stored"):
            await mixed[1].result()
        # Refused for the gap the bad one left, then stored one by one, in order.
        assert await behind[0].result() == 2
        assert await joined[0].result() == 3
    assert_stored_once_in_order(store, 4)


async def test_an_answer_taken_by_a_callback_is_given_once_and_its_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Any] = []
    given = Request(GetPrompt(), on_answer=lambda request: seen.append(request.answered()))
    given.reply("the answer")
    assert seen == ["the answer"]
    late = Request(GetPrompt())
    late.reply("already there")
    late.when_answered(lambda request: seen.append(request.answered()))  # called at once
    assert seen == ["the answer", "already there"]

    def broken(request: Request) -> None:
        raise RuntimeError("the sender's own mistake")

    failing = Request(GetPrompt(), on_answer=broken)
    failing.reply("an answer")  # the actor carries on
    assert failing.is_done and "the sender's own mistake" in caplog.text


async def test_posts_skip_the_inbox_only_when_nothing_of_the_channel_is_ahead(
    tmp_path: Path, autojump_clock: Any
) -> None:
    store = fresh_store(tmp_path)
    answers: list[Any] = []

    def requests(*numbers: int) -> list[Request]:
        return [
            Request(message(STREAM, n), on_answer=lambda r: answers.append(r.answered()))
            for n in numbers
        ]

    async with running(store) as supervisor:
        assert supervisor.post_now(STREAM, requests(0))  # asleep: taken as it wakes
        assert supervisor.awake() == [STREAM]
        assert not supervisor.post_now(STREAM, requests(0, 1))  # 0 is in flight: not now
        await settle()
        assert answers == [0]
        # Stored before: the channel reads no store for it, so the commit
        # finds it, and it is answered as stored before, once.
        assert supervisor.post_now(STREAM, requests(0))
        await settle()
        assert answers == [0, None]
        edit = Edit(message_id=message(STREAM, 0).message_id, at_ms=1, content="fixed")
        async with supervisor.shared.writer.paused():
            pending = await supervisor.submit(STREAM, edit)
            assert not supervisor.post_now(STREAM, requests(1))  # the edit is ahead
            await settle()
            assert not supervisor.post_now(STREAM, requests(1))  # and being served
        assert await pending.result() is True
        await settle()
        assert supervisor.post_now(STREAM, requests(1))
        await settle()
        assert answers == [0, None, 1]
    assert [e.message_id for e in posted(store, STREAM)] == [
        message(STREAM, n).message_id for n in range(2)
    ]


async def test_a_post_that_wakes_a_channel_is_its_last_input_for_the_quiet_publish(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A post taken as its channel wakes counts as its newest input: waking reads when
    the channel last had one from the store, but keeps the post's, so a publish that
    was due waits for quiet after the post."""
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        await post_range(supervisor, 0, 70)
        await settle()
    meta = meta_of(store, STREAM)
    assert meta.leaf_frontier > meta.row_frontier and not publishes(store, STREAM)
    await trio.sleep(2 * SMALL.quiet_ms / 1000)  # long quiet, with no process running
    answers: list[Any] = []
    store = WatchedStore(store.backend)  # a new process
    async with running(store, resume=False) as supervisor:  # the post wakes it
        assert supervisor.awake() == []
        posted_at = trio.current_time()
        late = message(STREAM, 70)
        assert supervisor.post_now(STREAM, [Request(late, on_answer=answers.append)])
        await settle()
        assert [request.answered() for request in answers] == [70]
        assert publishes(store, STREAM) == []
        await trio.sleep(SMALL.quiet_ms / 1000 - 1)
        await settle()
        assert publishes(store, STREAM) == []
        await trio.sleep(2)
        await settle()
        [row] = publishes(store, STREAM)
        assert row.reason == "quiet"
        assert row.at_ms - late.at_ms == SMALL.quiet_ms
        assert trio.current_time() - posted_at < SMALL.quiet_ms / 1000 + 2
    assert replay_stream(store, STREAM).ok


async def test_a_post_stored_before_the_channel_woke_is_found_and_stored_once(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Posts handed on need no read of the store; one stored before the actor last read it
    is refused by the commit with its batch, whose other posts still land in order."""
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        for number in range(3):
            assert await supervisor.ask(STREAM, message(STREAM, number)) == number
    answers: list[Any] = []

    def requests(*numbers: int) -> list[Request]:
        return [
            Request(message(STREAM, n), on_answer=lambda r: answers.append(r.answered()))
            for n in numbers
        ]

    store = WatchedStore(store.backend)  # a new process: every actor reads anew
    async with running(store) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 3)) == 3
        await settle()
        reads: list[object] = []
        read = store.meta_and_indexes
        monkeypatch.setattr(
            store, "meta_and_indexes", lambda *args: reads.append(args) or read(*args)
        )
        assert supervisor.post_now(STREAM, requests(4, 1, 5))  # 1 was stored by another life
        assert reads == []
        await settle()
        assert sorted(answers, key=lambda a: -1 if a is None else a) == [None, 4, 5]
        assert supervisor.post_now(STREAM, requests(6, 2))
        await settle()
        assert supervisor.post_now(STREAM, requests(7))
        await settle()
    assert answers[-3:] == [6, None, 7]
    assert_stored_once_in_order(store, 8)


async def test_a_post_sent_again_alone_is_answered_as_stored_before_and_stored_once(
    tmp_path: Path,
) -> None:
    """Discord may send a message twice: a post sent alone again, while its first copy
    is in flight or once it landed, is answered as stored before (None), is stored once,
    and the posts sent alone around it land in order. On trio's real clock: a commit is
    held in its thread."""
    store = GatedStore(open_backend(tmp_path / "data"))
    answers: list[Any] = []

    async def send(supervisor: Supervisor, number: int) -> bool:
        """Hand the post on at once if the channel takes it, else through its inbox;
        whether it went at once."""
        take = lambda request: answers.append(request.answered())  # noqa: E731
        if supervisor.post_now(STREAM, [Request(message(STREAM, number), on_answer=take)]):
            return True
        for request in await supervisor.submit_all(STREAM, [message(STREAM, number)]):
            request.when_answered(take)
        return False

    async def answered(count: int) -> None:
        with trio.fail_after(5):
            while len(answers) < count:  # noqa: ASYNC110 (answers come by callback)
                await trio.sleep(0.01)
        await trio.sleep(0.05)  # the actor waits for input again

    async with open_supervisor(store, OfflineSummarizer(), SMALL, LIVE) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 0)) == 0
        await trio.sleep(0.05)
        store.gate.clear()
        assert await send(supervisor, 1)
        assert not await send(supervisor, 1), "a copy of a post in flight waits for it"
        await trio.sleep(0.05)
        assert answers == []
        store.gate.set()
        await answered(2)
        assert await send(supervisor, 2)
        await answered(3)
        assert await send(supervisor, 1), "taken for a new post; the store refuses it"
        await answered(4)
        assert await send(supervisor, 3)
        await answered(5)
    assert answers == [1, None, 2, None, 3]
    assert_stored_once_in_order(store, 4)


async def test_stored_posts_leave_no_cycles_for_the_collector(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """What a post leaves behind is freed when its answer is taken: a cycle would wait
    for a full collection, which stops the loop for as long as it takes."""
    store = fresh_store(tmp_path)
    async with running(store) as supervisor:
        assert await supervisor.ask(STREAM, message(STREAM, 0)) == 0
        await settle()
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for number in range(1, 20):
                assert await supervisor.ask(STREAM, message(STREAM, number)) == number
            gc.collect()
            left = [kind for kind in map(type, gc.garbage) if kind in (_InFlight, Request)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert left == []
