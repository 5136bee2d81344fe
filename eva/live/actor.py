# One guild channel's actor: turns inputs into events, runs compression, publishes on quiet.
#
# Shell (trio). An actor is awake only while its channel is active or has
# work pending; its state is in LMDB, so waking costs a read, not a replay.
# Invariants: the inbox is bounded (a burst slows senders down, nothing is
# dropped); an input that fails is logged with the input and answered with the
# error, and the actor carries on; at most one compression run per channel;
# a publish happens only with new leaves to add. Posts are pipelined: the
# actor hands a batch to the writer and takes the next in while it is
# committed (up to POSTS_IN_FLIGHT posts), each answered when its commit is;
# every other input of the channel waits until the posts before it are stored.
# Posts that come while the channel's last batch still waits for the writer
# to take it join that batch, so a channel's posts go in one append whenever
# the writer is behind, and one by one, at once, when it is not.
# While the actor waits for input with nothing of its channel queued, posts
# skip the inbox: the sender's task hands them to the writer itself
# (`post_now`), with the actor's state, as the actor would have; a post costs
# no turn of the actor's task then.
from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, assert_never

import trio

from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    LineWritten,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    PublishReason,
    ToolCalled,
)
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.core.prompt import MemoryPrompt, PromptBudget, memory_prompt
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.state import StreamMeta, decode_meta
from eva.core.summarize import Summarizer
from eva.core.timing import compression_due, overflow_due, publish_reason
from eva.live.inputs import (
    ChannelInput,
    DateOf,
    Delete,
    Describe,
    Edit,
    ForgetHere,
    GetPrompt,
    Post,
    Recall,
    RecordReply,
    RecordTool,
    Zoom,
    posted_event,
)
from eva.live.prompt_tail import PromptTail
from eva.live.turns import Turns
from eva.live.writer import Queued, Writer
from eva.memory.compress import CompressStats, compress, run_cutoff
from eva.memory.forget import StreamErased, erase_in_stream
from eva.memory.publish import LineSizes, publish
from eva.memory.remake import remake
from eva.memory.view import (
    RowText,
    ZoomError,
    channel_zone,
    recall,
    row_lines,
    zoom,
)
from eva.store.event_store import Appended, EventStore, StoredMessage

log = logging.getLogger(__name__)


READ_INPUTS = (GetPrompt, Zoom, Recall, DateOf, RecordTool, RecordReply)
"""Inputs served apart from posts: reads, and the records of Eva's own calls."""

POST_BATCH = 256
"""Most posts stored in one commit when they queue up for one channel."""

POSTS_IN_FLIGHT = 64
"""A channel hands posts to the writer while fewer than this many of its posts wait for
their commit. Many channels with a message now and then each send theirs at once; a
channel in a burst has about a batch in flight, the rest waiting in its inbox and its
sender's lane, so a flood slows its sender down instead of piling up in commits."""


@dataclass(slots=True)
class Request:
    """An input on its way to an actor, with the slot its answer goes in."""

    item: ChannelInput | _CompressionDone
    answer: Any = None
    error: BaseException | None = None
    is_done: bool = False
    _waiter: trio.Event | None = None  # made only for a sender that waits
    on_answer: Callable[[Request], None] | None = None
    """Called with the request once it is answered, for a sender that does not wait: it
    must not await, and what it raises is logged and dropped."""

    def reply(self, answer: Any = None, error: BaseException | None = None) -> None:
        self.answer, self.error, self.is_done = answer, error, True
        if self._waiter is not None:
            self._waiter.set()
        if self.on_answer is not None:
            try:
                self.on_answer(self)
            except Exception:  # the sender's fault: the actor carries on
                log.exception("the answer to %r could not be taken", self.item)

    def when_answered(self, on_answer: Callable[[Request], None]) -> None:
        """Have `on_answer` called with the request once it is answered (now, if it is)."""
        self.on_answer = on_answer
        if self.is_done:
            self.on_answer = None
            on_answer(self)

    async def result(self) -> Any:
        """The answer, once there is one; raises what the actor raised for this input."""
        await self._wait()
        return self.answered()

    async def result_soon(self) -> Any:
        """`result`, with no turn of the scheduler when the answer is already there.

        For a task that takes the answers of many requests in turn (a commit
        answers a whole batch at once) and checkpoints elsewhere in its loop.
        """
        if not self.is_done:
            await self._wait()
        return self.answered()

    async def _wait(self) -> None:
        if self.is_done:
            await trio.lowlevel.checkpoint()
            return
        if self._waiter is None:
            self._waiter = trio.Event()
        await self._waiter.wait()

    def answered(self) -> Any:
        """The answer given, or what the actor raised; only once `is_done`."""
        if self.error is not None:
            raise self.error
        return self.answer


_Inbox = tuple[trio.MemorySendChannel[Request], trio.MemoryReceiveChannel[Request]]


@dataclass(frozen=True, slots=True)
class _CompressionDone:
    stats: CompressStats | None
    error: BaseException | None


@dataclass(slots=True)
class Shared:
    """What every actor of a process shares."""

    store: EventStore
    writer: Writer
    summarizer: Summarizer
    settings: MemorySettings
    live: LiveSettings
    nursery: trio.Nursery
    wall_ms: Callable[[], int]
    tasks_done: int = 0
    runs_failed: int = 0
    crashes: int = 0
    purge_later: Callable[[StreamId, list[str]], None] = lambda stream, texts: None
    start_loop: Callable[[StreamId], None] = lambda stream: None  # an actor's, not begun yet
    turns: Turns = field(default_factory=Turns)  # the channels' compression steps, in turn


@dataclass(slots=True)
class _InFlight:
    """A batch of posts handed to the writer, not answered yet."""

    requests: list[Request]
    posts: list[Post]
    indexes: list[int | None]  # None: stored before
    events: list[AnyEvent]  # what stores the new ones
    end: int  # the index after its last new post
    queued: Queued | None = None  # its append, which later posts may join
    answered: bool = False  # stored or refused
    _waiter: trio.Event | None = None

    async def wait_answered(self) -> None:
        if not self.answered:
            if self._waiter is None:
                self._waiter = trio.Event()
            await self._waiter.wait()

    def answer(self) -> None:
        self.answered = True
        if self._waiter is not None:
            self._waiter.set()


class _Place(NamedTuple):
    """Where a post is, or goes when stored next: its channel index."""

    at: int
    stored: bool


class ChannelActor:
    """The actor of one guild channel."""

    def __init__(self, shared: Shared, stream: StreamId) -> None:
        self.shared = shared
        self.stream = stream
        # Made by a plain call: subscripting the channel's type at run time costs more
        # than the channel itself, and thousands of actors are made when a server wakes.
        self.send: trio.MemorySendChannel[Request]
        self.receive: trio.MemoryReceiveChannel[Request]
        self.send, self.receive = trio.open_memory_channel(shared.live.inbox_capacity)
        # Reads (prompt, tools) and records of Eva's own calls do not wait behind posts;
        # their inbox is made with the first one (`read_inbox`).
        self._reads: _Inbox | None = None
        self.started = False  # its task was started (by the supervisor)
        self.start_queued = False  # the supervisor starts it with the next few
        self.compressing = False
        self.retry_at = math.inf
        self.retry_delay = shared.live.retry_first_seconds
        self.last_input = trio.current_time()
        self.last_input_ms = shared.wall_ms()
        self._touched = False  # an input was taken (`_touch`): waking keeps its time
        self.last_read = -math.inf  # a read keeps the channel awake, not from going quiet
        self.row_text = RowText()
        self.sizes = LineSizes()
        self.tail = PromptTail()
        # The messages this actor stored and compression has not made leaves of yet, as
        # the store would read them back; dropped whole when any message changes.
        self.unleafed: dict[int, StoredMessage] = {}
        self.stopped = False
        self._in_flight: deque[_InFlight] = deque()  # oldest first
        self._posts_in_flight = 0
        self._in_flight_ids: dict[int, int] = {}  # message id -> index, of posts in flight
        # The index the next new post takes, known without a read while this actor has
        # handed on every post of its stream since it last read the store and none was
        # refused (see `_places`).
        self._next_index: int | None = None
        self._refused: list[Request] = []  # posts of batches refused whole: served one by one
        self._overflowing = False  # a landed batch took the tail past the overflow mark
        # Inputs sent to the inbox and not taken yet (counted by the sender), and whether
        # the loop is doing anything but waiting for one: posts skip the inbox only when
        # neither (see `post_now`). A new actor takes posts before its loop starts: waking
        # (`_wake`) may publish or start compression, which posts in flight never stop.
        self.inbox_pending = 0
        self._serving = False
        self.unfinished_upto = 0  # the cutoff of a run that left leaves undone
        self._quiet_timer_for = -math.inf
        # Reads queued and not yet answered, counted by the sender from the moment it
        # queues one: the read task takes a read off the inbox a turn before it serves
        # it, and the actor must not sleep in that turn.
        self.reads_pending = 0
        # The loop's nursery while it runs and the task that serves reads has not started.
        self._readers: trio.Nursery | None = None
        self._waiting = trio.CancelScope()
        self._compress_scope = trio.CancelScope()
        self._compress_idle = trio.Event()
        self._compress_idle.set()

    # -- the loop -------------------------------------------------------------

    async def run(self, on_sleep: Callable[[ChannelActor], None]) -> None:
        """Serve inputs until idle with nothing pending; then call `on_sleep` and return.

        A second task serves reads (the prompt, zoom, recall, date) and the
        records of Eva's own calls, so a reply never waits behind a burst of
        posts; both tasks run on one trio thread, so each read sees a whole state.
        It starts with the first read (`want_reader`): most channels woken
        together are woken by posts, and a task fewer makes each wake cheaper.
        """
        await self._wake()
        try:
            async with self.receive, trio.open_nursery() as nursery:
                self._readers = nursery
                if self.reads_pending:
                    self.want_reader()
                while not self._may_sleep():
                    if self._refused:
                        await self._settle_posts()
                    if self._overflowing:
                        self._overflowing = False
                        await self._after_posts(None)
                    request = None
                    deadline = self._next_deadline()
                    with trio.move_on_at(deadline) as self._waiting:
                        self._serving = False
                        request = await self.receive.receive()
                    self._serving = True
                    if request is not None:
                        self.inbox_pending -= 1
                    if request is None:
                        await self._on_timer()
                    elif isinstance(request.item, Post):
                        await self._serve_posts(request)
                    else:
                        await self._serve_after_posts(request)
                on_sleep(self)  # no await between the check and leaving the registry
                self.stopped = True
                self._readers = None
                nursery.cancel_scope.cancel()
        finally:
            if self._reads is not None:  # a read sent from now on finds the inbox closed
                self._reads[1].close()

    def want_reader(self) -> None:
        """A read is queued (the sender calls this before it sends one): start the task
        that serves reads unless it runs; if the loop has not begun, it starts it."""
        if self._readers is not None:
            self._readers.start_soon(self._serve_reads)
            self._readers = None

    def read_inbox(self) -> trio.MemorySendChannel[Request]:
        """Where reads go: made with the first one (closed already once the actor has
        stopped, so a sender finds it so and goes to the channel's next actor)."""
        if self._reads is None:
            send: trio.MemorySendChannel[Request]
            receive: trio.MemoryReceiveChannel[Request]
            send, receive = trio.open_memory_channel(self.shared.live.inbox_capacity)
            self._reads = send, receive
            if self.stopped:
                receive.close()
        return self._reads[0]

    async def _serve_reads(self) -> None:
        assert self._reads is not None  # a read was queued before this task started
        async for request in self._reads[1]:
            try:
                await self._serve(request)
            finally:
                self.reads_pending -= 1
                self.last_read = trio.current_time()
            self._waiting.cancel()  # let the main loop see whether it may sleep now

    def _may_sleep(self) -> bool:
        if trio.current_time() - self._last_active() < self.shared.live.idle_seconds:
            return False  # the common case, asked once per input: decided without a read
        stats = self.receive.statistics()
        reads_waiting = 0 if self._reads is None else self._reads[1].statistics().tasks_waiting_send
        return (
            not self.compressing
            and not self._in_flight
            and not self._refused
            and not self._overflowing
            and not self._publish_pending()
            and self.retry_at == math.inf
            and stats.current_buffer_used == 0
            and stats.tasks_waiting_send == 0
            and reads_waiting == 0
            and self.reads_pending == 0
        )

    def _last_active(self) -> float:
        """When the channel last had an input or was read: it sleeps once idle since."""
        return max(self.last_input, self.last_read)

    def _publish_pending(self) -> bool:
        meta = self._meta()
        return meta is not None and meta.leaf_frontier > meta.row_frontier

    def _next_deadline(self) -> float:
        """The next timer: a retry, the quiet publish (once per quiet spell), going idle.

        Only future deadlines count, so a timer never fires twice for one thing;
        compression finishing and new inputs wake the actor through its inbox.
        """
        now = trio.current_time()
        deadlines = [self.retry_at]
        if self._publish_pending() and self._quiet_timer_for != self.last_input:
            deadlines.append(self.last_input + self.shared.settings.quiet_ms / 1000)
        idle = self._last_active() + self.shared.live.idle_seconds
        if idle > now:
            deadlines.append(idle)
        return min(deadlines)

    async def _wake(self) -> None:
        """Resume what the projections say is unfinished (a publish due, compression due).

        The tail is read when first asked for (`prompt`), not here: when many
        channels wake at once, most are woken by posts, and reading each one's
        tail would hold the loop while those posts wait for their commits.
        """
        meta = self._meta()
        if meta is None:
            return
        if meta.messages and not self._touched:  # else posts taken since are the last input
            quiet_for = self.shared.wall_ms() - meta.last_ms
            self.last_input_ms = meta.last_ms
            self.last_input = trio.current_time() - max(0, quiet_for) / 1000
        await self._maybe_publish()
        self._maybe_compress(force=meta.ready > 0)

    async def _on_timer(self) -> None:
        now = trio.current_time()
        if now >= self.retry_at:
            self.retry_at = math.inf
            self._maybe_compress(force=True)
        if now >= self.last_input + self.shared.settings.quiet_ms / 1000:
            self._quiet_timer_for = self.last_input
        await self._maybe_publish()

    async def _serve(self, request: Request) -> None:
        item = request.item
        try:
            if isinstance(item, _CompressionDone):
                await self._compression_done(item)
                request.reply()
                return
            request.reply(await self._handle(item))
        except ZoomError as error:  # a bad address from a person or a model: an answer, not a crash
            request.reply(error=error)
        except Exception as error:  # an input that fails must not stop the channel
            self.shared.crashes += 1
            log.exception("channel %s failed on input %r", self.stream, item)
            request.reply(error=error)

    async def _handle(self, item: ChannelInput) -> Any:
        match item:
            case Post():
                indexes, meta = await self._posts([item])
                if meta is not None:
                    await self._after_posts(meta)
                return indexes[0]
            case Edit():
                return await self._edit(item)
            case Delete():
                return await self._delete(item)
            case Describe():
                await self._write(
                    [
                        ChannelDescribed(
                            at_ms=self.shared.wall_ms(),
                            guild_id=self.stream.guild_id,
                            channel_id=self.stream.channel_id,
                            guild_name=item.guild_name,
                            channel_name=item.channel_name,
                            time_zone=item.time_zone,
                        )
                    ]
                )
                return None
            case GetPrompt():
                return self.prompt(item.ahead, item.budget)
            case Zoom():
                return zoom(
                    self.shared.store, self.stream, item.address, self.shared.settings, item.page
                )
            case Recall():
                return recall(self.shared.store, self.stream, item.query, self.shared.settings)
            case ForgetHere():
                return await self._forget(item)
            case DateOf():
                message = self.shared.store.message(self.stream, item.index)
                if message is None:
                    return None
                return message.posted.at_ms
            case RecordTool():
                tool = ToolCalled(
                    at_ms=self.shared.wall_ms(),
                    name=item.name,
                    arguments=item.arguments,
                    result_bytes=item.result_bytes,
                )
                await self._write([tool])
                return None
            case RecordReply():
                await self._write([item.reply])
                meta = self._meta()
                return meta.replies if meta is not None else 0
            case _:
                assert_never(item)

    # -- inputs ---------------------------------------------------------------

    async def _serve_posts(self, first: Request) -> None:
        """Serve a post and the posts queued right behind it, stored in one commit."""
        batch = [first]
        after: Request | None = None
        while len(batch) < POST_BATCH:
            try:
                queued = self.receive.receive_nowait()
            except trio.WouldBlock:
                break
            self.inbox_pending -= 1
            if not isinstance(queued.item, Post):
                after = queued
                break
            batch.append(queued)
        await self._send_posts(batch)
        if after is not None:
            await self._serve_after_posts(after)

    async def _serve_after_posts(self, request: Request) -> None:
        """Serve an input other than a post once the posts before it are stored (a
        compression run's end needs no wait: it is not the channel's input)."""
        if not isinstance(request.item, _CompressionDone):
            await self._settle_posts()
        await self._serve(request)

    async def _send_posts(self, batch: list[Request]) -> None:
        """Hand a batch of posts to the writer; `_landed` answers them once committed.

        Waits for the oldest batches in flight while POSTS_IN_FLIGHT posts are. A post
        already in flight again (Discord sent it twice) waits for it to land,
        so it is answered as stored before.
        """
        posts = [request.item for request in batch if isinstance(request.item, Post)]
        if self._refused or any(post.message_id in self._in_flight_ids for post in posts):
            await self._settle_posts()
        flight = self._take_off(batch, posts)
        if flight is not None:
            try:
                flight.queued = await self.shared.writer.append_later(
                    self.stream, flight.events, lambda outcome: self._landed(flight, outcome)
                )
            except Exception as error:  # not queued: the writer is closing
                self._land(flight)
                self._failed_posts(batch, error)
                return
        while self._posts_in_flight >= POSTS_IN_FLIGHT:
            await self._in_flight[0].wait_answered()

    def post_now(self, batch: list[Request]) -> bool:
        """Hand posts to the writer from the sender's task, as `_send_posts` would.

        Only while the loop waits for input, or has not started yet, and
        nothing is queued for it (so nothing of the channel is ahead of them),
        no post of theirs is in flight, they take the posts in flight to
        POSTS_IN_FLIGHT at most, and the writer has room; False, with nothing
        done, when they must go through the inbox.
        """
        if (
            self._serving
            or self.inbox_pending
            or self.stopped
            or self._refused
            or self._overflowing
            or self._posts_in_flight + len(batch) > POSTS_IN_FLIGHT
        ):
            return False
        if len(batch) == 1:  # the common case, with no list made to check it
            post = batch[0].item
            if not isinstance(post, Post) or post.message_id in self._in_flight_ids:
                return False
            posts = [post]
        else:
            posts = [request.item for request in batch if isinstance(request.item, Post)]
            if len(posts) != len(batch) or any(
                post.message_id in self._in_flight_ids for post in posts
            ):
                return False
        flight = self._take_off(batch, posts)
        if flight is None:
            return True  # answered already, or joined the last batch
        flight.queued = self.shared.writer.append_later_nowait(
            self.stream, flight.events, lambda outcome: self._landed(flight, outcome)
        )
        if flight.queued is None:
            self._land(flight)  # the writer is full: back out, and wait in the inbox
            return False
        return True

    def _take_off(self, batch: list[Request], posts: list[Post]) -> _InFlight | None:
        """Give the posts their indexes and put them in flight: a new batch, for the
        caller to queue its events, or None when there is nothing to queue (each is
        answered already, or they joined the last batch, still waiting for the writer)."""
        end = self._next_index
        if end is not None and len(posts) == 1 and posts[0].message_id not in self._in_flight_ids:
            post = posts[0]  # the common case: one new post, its index known (see `_places`)
            indexes: list[int | None] = [end]
            events: list[AnyEvent] = [posted_event(post, end)]
            self._touch(post.at_ms)
            self._in_flight_ids[post.message_id] = end
            end += 1
        else:
            try:
                indexes, events = self._new_posts(posts, unread=True)
            except Exception as error:  # a store that cannot be read must not stop the channel
                self._failed_posts(batch, error)
                return None
            if not events:
                for request, index in zip(batch, indexes, strict=True):
                    request.reply(index)
                return None
            self._touch(max(post.at_ms for post in posts))
            end = 0
            for post, index in zip(posts, indexes, strict=True):
                if index is not None:  # new posts take the next indexes in order: the last ends
                    self._in_flight_ids[post.message_id] = index
                    end = index + 1
        self._next_index = end
        self._posts_in_flight += len(batch)
        last = self._in_flight[-1] if self._in_flight else None
        if last is not None and last.queued is not None and self.shared.writer.join(
            last.queued, events
        ):
            last.requests.extend(batch)
            last.posts.extend(posts)
            last.indexes.extend(indexes)
            last.events.extend(events)
            last.end = end
            return None
        flight = _InFlight(list(batch), posts, indexes, events, end)  # the sender's list stays
        self._in_flight.append(flight)
        return flight

    def _landed(self, flight: _InFlight, outcome: Appended | BaseException) -> None:
        """A batch's commit is answered (called by the writer, in commit order)."""
        self._land(flight)
        if isinstance(outcome, Rejected):  # one of them does not fit: one by one, so only it fails
            self._next_index = None  # the batches behind it read the store again
            self._refused.extend(flight.requests)
            self._call_loop()
            return
        if isinstance(outcome, BaseException):
            self._failed_posts(flight.requests, outcome)
            return
        meta: StreamMeta | None = None
        try:
            meta = self._stored(flight.posts, flight.indexes, flight.events, outcome.meta)
        except Exception:  # they are stored: they are answered so; the tail is read again
            self.shared.crashes += 1
            log.exception(
                "channel %s failed after storing %d posts", self.stream, len(flight.events)
            )
            self.tail.forget()
            self.unleafed.clear()
        for request, index in zip(flight.requests, flight.indexes, strict=True):
            request.reply(index)
        if not self._in_flight and trio.current_time() - self._last_active() >= (
            self.shared.live.idle_seconds
        ):
            self._waiting.cancel()  # idle while these were committed: it may sleep now
        if meta is None or self.stopped:
            return
        if overflow_due(meta, self.shared.settings):
            self._overflowing = True  # the loop publishes; a publish needs awaits
            self._call_loop()
        else:
            self._maybe_compress(meta=meta)

    def _call_loop(self) -> None:
        """Have the loop look at once at what it must do: it stops waiting, or starts
        now if it waits to begin (see Supervisor._actor)."""
        self._waiting.cancel()
        if not (self.started or self.start_queued):
            self.shared.start_loop(self.stream)

    def _land(self, flight: _InFlight) -> None:
        """Take a batch out of flight."""
        flight.queued = None  # its append's callback holds it: no cycle left for the collector
        self._in_flight.remove(flight)  # the oldest, but for a batch never queued
        self._posts_in_flight -= len(flight.requests)
        for post, index in zip(flight.posts, flight.indexes, strict=True):
            if index is not None:
                self._in_flight_ids.pop(post.message_id, None)
        flight.answer()

    def _failed_posts(self, requests: list[Request], error: BaseException) -> None:
        self._next_index = None
        self.shared.crashes += 1
        log.error("channel %s failed on %d posts: %r", self.stream, len(requests), error)
        for request in requests:
            request.reply(error=error)

    async def _settle_posts(self) -> None:
        """Wait until every batch in flight is answered, then serve the refused posts."""
        while self._in_flight:
            await self._in_flight[-1].wait_answered()
        refused, self._refused = self._refused, []
        for request in refused:
            await self._serve(request)

    def _places(self, posts: Sequence[Post], unread: bool = False) -> list[_Place | None]:
        """Where each post is stored, or goes if stored next; None for a repeat of one before.

        With `unread`, while the next index is known (`_next_index`), the store is
        not read: a post stored before this actor last read it is then taken for a
        new one, and the write process refuses its batch (each is then served
        alone, and answered as stored before). Each post in flight is still found.
        """
        next_known = self._next_index if unread else None
        if next_known is not None:
            found = self._in_flight_ids.get
            stored: list[int | None] = [found(post.message_id) for post in posts]
            next_index = next_known
        else:
            meta, stored = self.shared.store.meta_and_indexes(
                self.stream, [post.message_id for post in posts]
            )
            if self._in_flight:  # posts handed to the writer have their indexes already
                stored = [
                    self._in_flight_ids.get(post.message_id) if at is None else at
                    for post, at in zip(posts, stored, strict=True)
                ]
            next_index = max([meta.messages if meta is not None else 0]
                             + [index + 1 for index in stored if index is not None]
                             + [self._in_flight[-1].end if self._in_flight else 0])
        seen: set[int] = set()
        places: list[_Place | None] = []
        for post, stored_at in zip(posts, stored, strict=True):
            if post.message_id in seen:
                places.append(None)
            elif stored_at is not None:
                places.append(_Place(stored_at, stored=True))
            else:
                places.append(_Place(next_index, stored=False))
                next_index += 1
            seen.add(post.message_id)
        return places

    def _new_posts(
        self, posts: list[Post], unread: bool = False
    ) -> tuple[list[int | None], list[AnyEvent]]:
        """Each post's index (None if stored before), and the events that store the new
        (`unread`: see `_places`)."""
        indexes = [
            None if place is None or place.stored else place.at
            for place in self._places(posts, unread)
        ]
        events: list[AnyEvent] = [
            posted_event(post, index)
            for post, index in zip(posts, indexes, strict=True)
            if index is not None
        ]
        return indexes, events

    async def _posts(self, posts: list[Post]) -> tuple[list[int | None], StreamMeta | None]:
        """Store posts (in one append); each gets its index, or None if already stored.

        With the indexes comes the stream's record once they are stored (None if
        none was new).
        """
        self._next_index = None  # read the store; posts to come read it again
        indexes, events = self._new_posts(posts)
        if not events:
            return indexes, None
        appended = await self._write(events)
        self._touch(max(post.at_ms for post in posts))
        return indexes, self._stored(posts, indexes, events, appended.meta)

    def _stored(
        self,
        posts: Sequence[Post],
        indexes: list[int | None],
        events: list[AnyEvent],
        record: bytes | None,
    ) -> StreamMeta:
        """Keep up with posts just stored (their unleafed messages, the tail); returns
        the stream's record as they left it (`record`, the append's, or read if None)."""
        for event in events:
            if isinstance(event, MessagePosted):
                self.unleafed[event.index] = StoredMessage(
                    event, event.content, event.attachments, event.edited_at_ms, False
                )
        meta = decode_meta(record) if record is not None else self._meta()
        assert meta is not None
        tz = channel_zone(meta, self.shared.settings)
        self.tail.add(zip(posts, indexes, strict=True), tz)
        self.sizes.use_zone(tz)  # lines are measured as they are written, from the first
        return meta

    async def _after_posts(self, meta: StreamMeta | None) -> None:
        """What stored posts set going: a publish if the tail overflows, compression.

        Run once their senders have their answers, which need neither; `meta` is
        the stream's record read since they were stored (None: read it now)."""
        meta = meta or self._meta()
        if meta is None:
            return
        if overflow_due(meta, self.shared.settings):
            await self._maybe_publish()
            self._maybe_compress()  # the publish moved the record on
            return
        self._maybe_compress(meta=meta)

    async def _edit(self, edit: Edit) -> bool:
        index = self.shared.store.index_of(self.stream, edit.message_id)
        if index is None:
            return False
        message = self.shared.store.message(self.stream, index)
        if message is None or message.deleted or message.content == edit.content:
            return False
        self.unleafed.clear()  # before the edit lands: a run started now reads the store
        await self._write(
            [
                MessageEdited(
                    at_ms=edit.at_ms,
                    index=index,
                    message_id=edit.message_id,
                    content=edit.content,
                    attachments=edit.attachments,
                )
            ]
        )
        self.tail.forget()
        self.shared.purge_later(self.stream, [message.content, *message.attachments])
        self._maybe_compress()
        return True

    async def _delete(self, delete: Delete) -> int:
        events: list[AnyEvent] = []
        texts: list[str] = []
        for message_id in dict.fromkeys(delete.message_ids):
            index = self.shared.store.index_of(self.stream, message_id)
            if index is None:
                continue
            message = self.shared.store.message(self.stream, index)
            if message is not None and not message.deleted:
                deleted = MessageDeleted(at_ms=delete.at_ms, index=index, message_id=message_id)
                events.append(deleted)
                texts.extend([message.content, *message.attachments])
        if events:
            self.unleafed.clear()  # before the deletions land, as for an edit
            await self._write(events)
            self.tail.forget()
            self.shared.purge_later(self.stream, texts)
            self._maybe_compress()
        return len(events)

    async def _forget(self, item: ForgetHere) -> StreamErased | None:
        """Erase a person here; compression is stopped first so no old text lands after."""
        await self._stop_compression()
        self.unleafed.clear()
        erased = await erase_in_stream(
            self.shared.store,
            self.stream,
            item.person_hash,
            item.by,
            self.shared.summarizer,
            self._append,
            self.shared.settings,
            self.shared.wall_ms(),
            self.sizes,
        )
        self.tail.forget()
        return erased

    def _touch(self, at_ms: int) -> None:
        self.last_input = trio.current_time()
        self.last_input_ms = at_ms
        self._touched = True

    # -- the prompt -----------------------------------------------------------

    def prompt(
        self, ahead: Sequence[Post] = (), budget: PromptBudget | None = None
    ) -> MemoryPrompt:
        """The memory as Eva's prompt uses it now, with the posts of `ahead` that the tail
        does not hold yet after it (see GetPrompt), fitted to `budget` if one is given.

        The tail comes in chunks that end where earlier prompts of this row ended,
        and this prompt's end is remembered for the next (see MemoryPrompt).
        """
        store, settings = self.shared.store, self.shared.settings
        meta = self._meta()
        tz = channel_zone(meta, settings)
        lines = row_lines(store, self.stream, tz, self.row_text, self.sizes)
        self.tail.follow(store, self.stream, meta, tz)
        tail = self.tail.lines
        if ahead:  # stored or not, at the indexes they have or will get
            places = self._places(ahead)
            at = [None if place is None else place.at for place in places]
            tail = tail + self.tail.lines_after(list(zip(ahead, at, strict=True)), tz)
        memory = memory_prompt(
            lines, tail, settings.prompt_tail_max_bytes, budget, self.tail.cuts
        )
        if memory.tail_end:
            self.tail.ended_prompt(memory.tail_end)
        return memory

    # -- compression and publishing ---------------------------------------------

    def _maybe_compress(self, force: bool = False, meta: StreamMeta | None = None) -> None:
        """Start a compression run if one is due (`meta`: the stream's record, if just read)."""
        if self.compressing or self.retry_at != math.inf:
            return
        meta = meta or self._meta()
        if meta is None or not (force or meta.stale or compression_due(meta, self.shared.settings)):
            return
        self.compressing = True
        self._compress_scope = trio.CancelScope()
        self._compress_idle = trio.Event()
        self.shared.nursery.start_soon(self._compress)

    async def _compress(self) -> None:
        shared = self.shared
        stats: CompressStats | None = None
        error: BaseException | None = None
        with self._compress_scope:
            try:
                meta = self._meta()
                if meta is not None and meta.stale:
                    stats = await remake(
                        shared.store,
                        self.stream,
                        shared.summarizer,
                        self._append,
                        shared.settings,
                        shared.wall_ms(),
                    )
                    self.sizes.clear()  # lines were made again: render them anew
                    self.row_text = RowText()
                    self.unleafed.clear()
                meta = self._meta()
                upto = run_cutoff(shared.store, self.stream, shared.settings)
                if meta is not None and not compression_due(meta, shared.settings):
                    upto = meta.leaf_frontier  # only the merges left ready
                upto = max(upto, self.unfinished_upto)  # and what a failed run left
                self.unfinished_upto = upto
                more = await compress(
                    shared.store,
                    self.stream,
                    shared.summarizer,
                    self._append,
                    shared.settings,
                    shared.wall_ms(),
                    upto,
                    urgent=False,
                    unleafed=self.unleafed,
                    pause=shared.turns.take,
                )
                meta = self._meta()
                if meta is not None:  # what has its leaf now is read no more
                    for index in [i for i in self.unleafed if i < meta.leaf_frontier]:
                        del self.unleafed[index]
                if stats is None:
                    stats = more
                else:
                    stats.add(more)
            except Exception as caught:
                error = caught
                log.exception("compression of %s failed", self.stream)
        self._compress_idle.set()
        request = Request(_CompressionDone(stats, error))
        if self.stopped:
            return
        self.inbox_pending += 1
        try:
            await self.send.send(request)
        except BaseException:
            self.inbox_pending -= 1
            raise

    async def _stop_compression(self) -> None:
        """Cancel a running compression and wait until it has stopped writing."""
        if self.compressing:
            self._compress_scope.cancel()
            await self._compress_idle.wait()

    async def _compression_done(self, done: _CompressionDone) -> None:
        self.compressing = False
        stats = done.stats
        if stats is not None:
            self.shared.tasks_done += (
                stats.leaves_model + stats.merges_model + stats.leaves_verbatim + stats.merges_glue
            )
        if done.error is not None or (stats is not None and stats.pending):
            self.shared.runs_failed += 1
            self.retry_at = trio.current_time() + self.retry_delay
            self.retry_delay = min(self.retry_delay * 2, self.shared.live.retry_most_seconds)
        else:
            self.retry_delay = self.shared.live.retry_first_seconds
            self.unfinished_upto = 0
        await self._maybe_publish()
        self._maybe_compress()

    async def _maybe_publish(self) -> None:
        meta = self._meta()
        if meta is None:
            return
        now_ms = math.ceil(trio.current_time() * 1000)
        last_ms = math.floor(self.last_input * 1000)
        reason: PublishReason | None = publish_reason(meta, now_ms, last_ms, self.shared.settings)
        if reason is None:
            return
        tz = channel_zone(meta, self.shared.settings)
        published = await publish(
            self.shared.store,
            self.stream,
            self._append,
            self.shared.settings,
            self.shared.wall_ms(),
            reason,
            tz,
            self.sizes,
        )
        if published is not None:
            self.row_text = RowText()  # the prompt reads the new row from what publish rendered

    # -- helpers --------------------------------------------------------------

    def _meta(self) -> StreamMeta | None:
        return self.shared.store.meta(self.stream)

    async def _write(self, events: list[AnyEvent]) -> Appended:
        """Append this channel's events through the process's writer."""
        return await self.shared.writer.append(self.stream, events)

    async def _append(self, stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
        """The `Append` that compression and publishing write through; lines go in the
        background (see eva.live.writer).

        The lines written are measured once they are stored, by the task that
        wrote them (a run stores a step's lines at a time), so that a publish
        seldom reads one back. Not as the writer takes in the commit's answer:
        every post of that commit would wait for it.
        """
        lines = [event for event in events if isinstance(event, LineWritten)]
        if not lines:  # a row: the actor waits for it before it serves the next posts
            return await self.shared.writer.append(stream, events)
        appended = await self.shared.writer.append(stream, events, background=True)
        self.sizes.learn(lines)
        return appended
