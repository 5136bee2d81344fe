# The supervisor: one actor task per active guild channel, all in one nursery.
#
# Shell (trio). It starts an actor on a channel's first input and forgets it
# when the actor goes to sleep; at start-up it wakes every channel whose
# projections say work is unfinished (compression due, merges ready, a
# publish due). Model calls of every channel share one capacity limiter.
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.summarize import Summarizer
from eva.core.timing import compression_due
from eva.live.actor import ChannelActor, Request, Shared
from eva.live.inputs import ChannelInput
from eva.live.models import LimitedSummarizer
from eva.live.writer import open_writer
from eva.store.event_store import EventStore

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    """Counts for status lines and benchmarks."""

    awake: int
    woken: int
    slept: int
    tasks_done: int
    runs_failed: int
    crashes: int
    model_calls: int
    commits: int
    appends: int


class Supervisor:
    """Routes each input to its channel's actor, starting the actor when needed."""

    def __init__(self, shared: Shared, nursery: trio.Nursery) -> None:
        self.shared = shared
        self._nursery = nursery
        self._actors: dict[StreamId, ChannelActor] = {}
        self._woken = 0
        self._slept = 0

    async def ask(self, stream: StreamId, item: ChannelInput) -> Any:
        """Send `item` to the channel's actor and wait for its answer.

        Waits while the actor's inbox is full (a burst slows the sender down).
        Raises what the actor raised for this input.
        """
        request = Request(item)
        while True:
            actor = self._actor(stream)
            try:
                await actor.send.send(request)
                break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue  # it went to sleep just now; the next one takes it
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.answer

    def wake(self, stream: StreamId) -> None:
        """Start the channel's actor if it sleeps."""
        self._actor(stream)

    def _actor(self, stream: StreamId) -> ChannelActor:
        actor = self._actors.get(stream)
        if actor is None:
            actor = ChannelActor(self.shared, stream)
            self._actors[stream] = actor
            self._woken += 1
            self._nursery.start_soon(actor.run, self._asleep)
        return actor

    def _asleep(self, actor: ChannelActor) -> None:
        if self._actors.get(actor.stream) is actor:
            del self._actors[actor.stream]
            self._slept += 1

    def awake(self) -> list[StreamId]:
        return list(self._actors)

    def resume_unfinished(self) -> int:
        """Wake every channel with work left over from before a stop; return how many."""
        woken = 0
        settings = self.shared.settings
        for meta in self.shared.store.streams():
            due = (
                compression_due(meta, settings)
                or meta.ready > 0
                or meta.leaf_frontier > meta.row_frontier
            )
            if due:
                self.wake(StreamId(meta.guild_id, meta.channel_id))
                woken += 1
        return woken

    def statistics(self) -> SupervisorStatistics:
        writer = self.shared.writer.statistics()
        summarizer = self.shared.summarizer
        calls = summarizer.calls if isinstance(summarizer, LimitedSummarizer) else 0
        return SupervisorStatistics(
            awake=len(self._actors),
            woken=self._woken,
            slept=self._slept,
            tasks_done=self.shared.tasks_done,
            runs_failed=self.shared.runs_failed,
            crashes=self.shared.crashes,
            model_calls=calls,
            commits=writer.commits,
            appends=writer.appends,
        )


@asynccontextmanager
async def open_supervisor(
    store: EventStore,
    summarizer: Summarizer,
    settings: MemorySettings | None = None,
    live: LiveSettings | None = None,
    wall_ms: Callable[[], int] = wall_clock_ms,
    resume: bool = True,
) -> AsyncIterator[Supervisor]:
    """A running supervisor with its writer; on exit, in-flight commits finish first."""
    settings = settings or MemorySettings()
    live = live or LiveSettings()
    limited = LimitedSummarizer(
        summarizer, trio.CapacityLimiter(settings.model_calls_in_flight), live.model_timeout_seconds
    )
    async with open_writer(store, live.writer_capacity) as writer, trio.open_nursery() as nursery:
        shared = Shared(store, writer, limited, settings, live, nursery, wall_ms)
        supervisor = Supervisor(shared, nursery)
        if resume:
            count = supervisor.resume_unfinished()
            if count:
                log.info("resuming unfinished work in %d channels", count)
        try:
            yield supervisor
        finally:
            nursery.cancel_scope.cancel()
