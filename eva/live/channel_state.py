# What a channel's actor knows: what every actor shares, and its own channel's state.
#
# Shell (trio). `ChannelState` is the base of `ChannelActor` (eva.live.actor), whose parts
# each add what the actor does: `compressing` (when it compresses and publishes), `posting`
# (how posts are pipelined to the writer), `reads` (how it serves a prompt and the other
# reads), `channel_inputs` (what it does with each input), `sleep` (how it sleeps and
# wakes). An actor is awake only while its channel is active or has work pending; its state
# is in LMDB, so waking costs a read, not a replay.
# Invariants: every part runs on the one trio thread of the process, so each sees a whole
# state between awaits; the actor writes its channel's events only through the process's
# writer; the lines a compression run writes are measured once stored, by the run's task.
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import trio

from eva.core.events import AnyEvent, LineWritten
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.state import StreamMeta
from eva.core.summarize import Summarizer
from eva.live.inputs import Post
from eva.live.prompt_tail import PromptTail
from eva.live.request import Request
from eva.live.turns import Turns
from eva.live.writer import Queued, Writer
from eva.memory.publish import LineSizes
from eva.memory.view import RowText
from eva.store.event_store import Appended, EventStore, StoredMessage


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
    purge_later: Callable[[StreamId], None] = lambda stream: None
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


_Inbox = tuple[trio.MemorySendChannel[Request], trio.MemoryReceiveChannel[Request]]


class ChannelState:
    """The state of one guild channel's actor, and the helpers every part of it uses."""

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

    def _meta(self) -> StreamMeta | None:
        return self.shared.store.meta(self.stream)

    async def _write(self, events: list[AnyEvent]) -> Appended:
        """Append this channel's events through the process's writer."""
        return await self.shared.writer.append(self.stream, events)

    async def _append(self, stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
        """The `Append` that compression and publishing write through.

        The lines written are measured once they are stored, by the task that
        wrote them (a run stores a step's lines at a time), so that a publish
        seldom reads one back. Not as the writer takes in the commit's answer:
        every post of that commit would wait for it.
        """
        appended = await self.shared.writer.append(stream, events)
        if lines := [event for event in events if isinstance(event, LineWritten)]:
            self.sizes.learn(lines)
        return appended

    def _touch(self, at_ms: int) -> None:
        self.last_input = trio.current_time()
        self.last_input_ms = at_ms
        self._touched = True

    def _last_active(self) -> float:
        """When the channel last had an input or was read: it sleeps once idle since."""
        return max(self.last_input, self.last_read)

    def _call_loop(self) -> None:
        """Have the loop look at once at what it must do: it stops waiting, or starts
        now if it waits to begin (see Supervisor._actor)."""
        self._waiting.cancel()
        if not (self.started or self.start_queued):
            self.shared.start_loop(self.stream)

    async def _serve(self, request: Request) -> None:
        """Serve one input and answer it (see eva.live.channel_inputs)."""
        raise NotImplementedError
