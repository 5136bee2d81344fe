# The supervisor: one actor task per active guild channel, all in one nursery.
#
# Shell (trio). It starts an actor on a channel's first input and forgets it
# when the actor goes to sleep; at start-up it wakes every channel whose
# projections say work is unfinished (compression due, merges ready, a
# publish due). Many wakes at once are spread over turns of the scheduler,
# and a channel woken by a post begins its loop a little later, after the
# burst (its posts need no loop). Model calls of every channel share one
# capacity limiter.
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from eva.core.erasures import Erasure, ErasureReason, describe_erasure
from eva.core.events import ForgetBy
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.summarize import Summarizer
from eva.core.timing import compression_due
from eva.live.actor import ChannelActor
from eva.live.channel_state import Shared
from eva.live.inputs import ChannelInput, ForgetHere
from eva.live.models import LimitedSummarizer
from eva.live.reads import READ_INPUTS
from eva.live.request import Request
from eva.live.writer import open_writer
from eva.memory.forget import (
    ErasureFailed,
    ForgetReport,
    StreamErased,
    append_tombstones,
    finish_forget,
    holding_words,
    pending_forgets,
)
from eva.store.erasure import ScanReport, prove_erased, purge_ready, unpurged
from eva.store.event_store import EventStore
from eva.store.guild_erasure import (
    DAY_MS,
    ask_erasure,
    came_back,
    due_erasures,
    erase_guild,
    erasure_records,
)
from eva.store.lmdb_kv import LmdbBackend

log = logging.getLogger(__name__)


WAKES_PER_TURN = 16
"""Actors started in one turn of the scheduler at most. Each wake reads the channel's
record and sets its tasks up (tens of microseconds); thousands at once, as at start-up
or when a busy server's channels all wake, would hold the loop for a tenth of a second
and more in one turn, with commits answered and the gateway heard only after it."""

POSTED_START_DELAY_S = 0.1
"""How long the actor of a channel woken by a post waits before its loop starts. Its
posts go to the writer without the loop (ChannelActor.post_now), and what the loop
serves besides (timers of seconds and more, compression's end) can wait that long; an
input that needs the loop starts it at once. So when many channels wake in one burst,
their loops start after it instead of during it, when every turn is full."""


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

    def __init__(self, shared: Shared, nursery: trio.Nursery, data_dir: Path | None) -> None:
        self.shared = shared
        self._nursery = nursery
        self._data_dir = data_dir
        self._actors: dict[StreamId, ChannelActor] = {}
        self._to_start: deque[StreamId] = deque()  # channels to wake, oldest first
        self._starting = False
        # Actors made for a post, with the time their loops start, oldest first.
        self._posted: deque[tuple[float, StreamId]] = deque()
        self._delaying = False
        self._woken = 0
        self._slept = 0
        self._purge_wanted = trio.Event()
        self._erasures_wanted = trio.Event()
        self._erasure_waits = False  # an erasure due waits for an actor to sleep
        self._left: set[int] | None = None  # servers whose erasure Eva's leaving owes
        self.last_scan: ScanReport | None = None
        shared.purge_later = self._purge_later
        shared.start_loop = self._start_soon

    async def ask(self, stream: StreamId, item: ChannelInput) -> Any:
        """Send `item` to the channel's actor and wait for its answer.

        Waits while the actor's inbox is full (a burst slows the sender down).
        Raises what the actor raised for this input.
        """
        request = await self.submit(stream, item)
        return await request.result()

    async def submit(self, stream: StreamId, item: ChannelInput) -> Request:
        """Queue `item` for the channel's actor; await `.result()` of what it returns.

        A sender that submits several inputs before awaiting their results lets
        the actor store queued posts in one commit; their order is kept.
        """
        return (await self.submit_all(stream, [item]))[0]

    async def submit_all(self, stream: StreamId, items: Sequence[ChannelInput]) -> list[Request]:
        """Queue `items` in order, and await `.result()` of each.

        They go into the inbox without a pause between them while it has room, so the
        actor finds posts that arrived together side by side and stores them in one
        commit; a full inbox makes this wait, as `submit` does. It is a point where
        the caller may be cancelled, but it lets other tasks run only when it waits
        for room: the caller's next step is to wait for the answers, and one turn of
        the scheduler there is enough.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        requests = [Request(item) for item in items]
        if self.post_now(stream, requests):  # nothing of the channel ahead: no inbox
            return requests
        for request in requests:
            item = request.item
            reading = isinstance(item, READ_INPUTS)
            while True:
                actor = self._actor(stream, loop_now=True)
                inbox = actor.read_inbox() if reading else actor.send
                queued = False
                actor.reads_pending += reading  # counted before it can be taken
                actor.inbox_pending += not reading
                if reading:
                    actor.want_reader()
                try:
                    try:
                        inbox.send_nowait(request)
                    except trio.WouldBlock:
                        await inbox.send(request)
                    queued = True
                    break
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    continue  # it went to sleep just now; the next one takes it
                finally:
                    if not queued:
                        actor.reads_pending -= reading
                        actor.inbox_pending -= not reading
        return requests

    def post_now(self, stream: StreamId, requests: list[Request]) -> bool:
        """Hand posts to their channel's writer at once, if nothing of the channel is ahead
        of them (see ChannelActor.post_now); each request's `on_answer` takes its answer
        (a post stored before is answered before this returns).

        False, with nothing sent, when they must go through `submit_all` instead.
        """
        return bool(requests) and self._actor(stream, loop_now=False).post_now(requests)

    def wake(self, stream: StreamId) -> None:
        """Start the channel's actor if it sleeps: made and started with the next few,
        unless an input makes it first."""
        self._start_soon(stream)

    def _actor(self, stream: StreamId, loop_now: bool) -> ChannelActor:
        """The channel's actor, made if it sleeps; its loop starts with the next few
        (`loop_now`: the input needs it) or after POSTED_START_DELAY_S."""
        actor = self._actors.get(stream)
        if actor is None:
            actor = self._make(stream)
            if not loop_now:
                self._start_after_delay(stream)
        if loop_now:
            self._start_soon(stream)
        return actor

    def _make(self, stream: StreamId) -> ChannelActor:
        actor = self._actors[stream] = ChannelActor(self.shared, stream)
        self._woken += 1
        return actor

    def _start_soon(self, stream: StreamId) -> None:
        """Start the channel's loop with the next few, unless it has begun or waits in
        the queue already; the actor of a sleeping channel is made then."""
        actor = self._actors.get(stream)
        if actor is not None:
            if actor.started or actor.start_queued:
                return
            actor.start_queued = True
        self._to_start.append(stream)
        if not self._starting:
            self._starting = True
            self._nursery.start_soon(self._start_actors)

    def _start_after_delay(self, stream: StreamId) -> None:
        self._posted.append((trio.current_time() + POSTED_START_DELAY_S, stream))
        if not self._delaying:
            self._delaying = True
            self._nursery.start_soon(self._start_posted)

    async def _start_posted(self) -> None:
        """Queue the actors made for posts once their delay is over, unless an input
        started them meanwhile, or they are started or queued already."""
        try:
            while self._posted:
                await trio.sleep_until(self._posted[0][0])
                now = trio.current_time()
                while self._posted and self._posted[0][0] <= now:
                    stream = self._posted.popleft()[1]
                    if stream in self._actors:  # not asleep again already
                        self._start_soon(stream)
        finally:
            self._delaying = False

    async def _start_actors(self) -> None:
        """Make and start the actors of the channels queued, WAKES_PER_TURN a turn; an
        actor made already takes posts (ChannelActor.post_now) and queues its other
        inputs in its inbox until it starts."""
        try:
            while self._to_start:
                for _ in range(min(WAKES_PER_TURN, len(self._to_start))):
                    stream = self._to_start.popleft()
                    actor = self._actors.get(stream) or self._make(stream)
                    if not actor.started:
                        actor.started = True
                        self._nursery.start_soon(actor.run, self._asleep)
                await trio.lowlevel.checkpoint()
        finally:
            self._starting = False

    def _asleep(self, actor: ChannelActor) -> None:
        if self._actors.get(actor.stream) is actor:
            del self._actors[actor.stream]
            self._slept += 1
            if self._erasure_waits:  # an erasure that waited for it may go now
                self._erasures_wanted.set()

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

    # -- forgetting -------------------------------------------------------------

    async def record_forget(
        self, person_id: int, *, guild_id: int | None = None, by: ForgetBy = "self"
    ) -> int:
        """The promise of a forget, before any of it is done: a tombstone in every channel
        (of one guild, if given) that holds the person's words, durable when this returns.
        From then on a restart finishes the forget (`resume_forgets`). How many channels
        got one."""
        store = self.shared.store
        person = store.hashes.recorded(person_id)
        streams = [
            StreamId(meta.guild_id, meta.channel_id)
            for meta in store.streams()
            if guild_id is None or meta.guild_id == guild_id
        ]
        holding = await trio.to_thread.run_sync(holding_words, store, person, streams)
        async with self.shared.writer.paused():  # as a purge does: no commit of ours meanwhile
            return append_tombstones(store, person, holding, by, self.shared.wall_ms())

    async def forget(
        self,
        person_id: int | None = None,
        *,
        person: str | None = None,
        guild_id: int | None = None,
        by: ForgetBy = "self",
    ) -> ForgetReport:
        """Forget a person in every channel (of one guild, if given), and prove it.

        Each channel's actor erases and remakes its own lines; then, with every
        write paused, the log is rewritten, the file compacted and scanned.
        Raises ErasureFailed if any of the person's texts is still found.
        """
        if person is None:
            if person_id is None:
                raise ValueError("forget needs a person id or a person hash")
            person = self.shared.store.hashes.recorded(person_id)
        store = self.shared.store
        report = ForgetReport(person)
        started = time.perf_counter()
        erased: list[StreamErased] = []
        for meta in store.streams():
            if guild_id is not None and meta.guild_id != guild_id:
                continue
            stream = StreamId(meta.guild_id, meta.channel_id)
            result = await self.ask(stream, ForgetHere(person_hash=person, by=by))
            if result is not None:
                erased.append(result)
                report.count(result)
        report.erase_s = time.perf_counter() - started
        if not erased or self._data_dir is None:
            return report
        return await finish_forget(
            store,
            self._data_dir,
            person,
            erased,
            self.shared.writer.append,
            self.shared.writer.paused,
            self.shared.wall_ms(),
            report,
        )

    def _purge_later(self, stream: StreamId) -> None:
        self._purge_wanted.set()

    async def run_purges(self) -> None:
        """Remove deleted and edited texts from the data file a while after they go; those
        a stop left in the log (StreamMeta.unpurged), at once."""
        await self.purge_now()
        while True:
            await self._purge_wanted.wait()
            await trio.sleep(self.shared.live.purge_delay_seconds)
            self._purge_wanted = trio.Event()
            await self.purge_now()

    async def purge_now(self) -> ScanReport | None:
        """Rewrite the log without deleted and edited texts, compact, and scan for them.

        Streams whose lines are still being made again wait for the next round.
        """
        store = self.shared.store
        if not unpurged(store):  # nothing owed: the writer goes on undisturbed
            return None
        async with self.shared.writer.paused():
            done = purge_ready(store)
        if done.waiting:
            self._purge_wanted.set()
        if not done.purged or self._data_dir is None:
            return None
        scan = prove_erased(store, self._data_dir, done.texts)
        self.last_scan = scan
        if scan.hits:
            log.error(
                "ERASURE FAILED: %d deleted or edited texts still found %d times in %s",
                scan.texts_found,
                scan.hits,
                ", ".join(scan.files_found),
            )
        return scan

    async def left_server(self, guild_id: int) -> None:
        """Eva was removed from the server: its erasure is owed once the grace period ends."""
        now = self.shared.wall_ms()
        grace_ms = int(self.shared.live.left_server_grace_days * DAY_MS)
        async with self.shared.writer.paused():
            ask_erasure(self.shared.store, guild_id, "left", now, now + grace_ms)
        self.left_pending(guild_id)  # the servers left are known before this one is added
        assert self._left is not None
        self._left.add(guild_id)
        log.info("left guild %d: its data is erased from %d unless Eva comes back",
                 guild_id, now + grace_ms)
        self._erasures_wanted.set()

    async def erase_channel(self, stream: StreamId, by: ErasureReason) -> None:
        """Erase what is kept of one channel (its memory turned off): recorded now, done
        once its actor is asleep (`erase_due`)."""
        now = self.shared.wall_ms()
        async with self.shared.writer.paused():
            ask_erasure(self.shared.store, stream.guild_id, by, now, now, stream.channel_id)
        self._erasures_wanted.set()

    def left_pending(self, guild_id: int) -> bool:
        """Whether an erasure is owed because Eva left the server (the records read once,
        then kept here: only this process writes them while it runs)."""
        if self._left is None:
            self._left = {
                record.guild_id for record in erasure_records(self.shared.store)
                if record.pending and record.reason == "left" and not record.channel_id
            }
        return guild_id in self._left

    async def back_in_server(self, guild_id: int) -> None:
        """Eva is in the server (again): an erasure owed because she left is cancelled."""
        if not self.left_pending(guild_id):
            return
        store = self.shared.store
        async with self.shared.writer.paused():
            if came_back(store, guild_id, self.shared.wall_ms()):
                log.info("back in guild %d: its erasure is cancelled", guild_id)
        if self._left is not None:
            self._left.discard(guild_id)

    async def run_erasures(self) -> None:
        """Erase the servers whose erasure is owed: at start, then every
        erasure_check_seconds (or as soon as a grace period of none is asked)."""
        while True:
            await self.erase_due()
            with trio.move_on_after(self.shared.live.erasure_check_seconds):
                await self._erasures_wanted.wait()
            self._erasures_wanted = trio.Event()

    async def erase_due(self) -> list[Erasure]:
        """Erase each server whose erasure is due and none of whose channels is being
        worked on now (those wait for the next round); what was done."""
        store = self.shared.store
        done = []
        self._erasure_waits = False
        for record in due_erasures(store, self.shared.wall_ms()):
            if self._data_dir is None:
                continue
            if any(
                stream.guild_id == record.guild_id and record.channel_id in (0, stream.channel_id)
                for stream in self._actors
            ):
                self._erasure_waits = True
                continue
            async with self.shared.writer.paused():
                ended = await trio.to_thread.run_sync(
                    erase_guild, store, self._data_dir, record.guild_id, self.shared.wall_ms(),
                    record.channel_id,
                )
            if ended.found:
                log.error("ERASURE FAILED: %s", describe_erasure(ended))
            else:
                log.info("%s", describe_erasure(ended))
                if self._left is not None and not ended.channel_id:
                    self._left.discard(ended.guild_id)
            done.append(ended)
        return done

    async def resume_forgets(self) -> None:
        """Finish every forget a crash left pending."""
        for person in pending_forgets(self.shared.store):
            try:
                await self.forget(person=person)
            except ErasureFailed:
                log.exception("a pending forget could not be finished")

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
    data_dir: Path | None = None,
) -> AsyncIterator[Supervisor]:
    """A running supervisor with its writer; on exit, in-flight commits finish first."""
    settings = settings or MemorySettings()
    live = live or LiveSettings()
    limited = LimitedSummarizer(
        summarizer, trio.CapacityLimiter(settings.model_calls_in_flight), live.model_timeout_seconds
    )
    async with (
        open_writer(store, live.writer_capacity) as writer,
        trio.open_nursery() as nursery,
    ):
        shared = Shared(store, writer, limited, settings, live, nursery, wall_ms)
        backend = store.backend
        if data_dir is None and isinstance(backend, LmdbBackend):
            data_dir = backend.path
        supervisor = Supervisor(shared, nursery, data_dir)
        nursery.start_soon(supervisor.run_purges)
        nursery.start_soon(supervisor.run_erasures)
        if resume:
            count = supervisor.resume_unfinished()
            if count:
                log.info("resuming unfinished work in %d channels", count)
            if pending_forgets(store):
                nursery.start_soon(supervisor.resume_forgets)
        try:
            yield supervisor
        finally:
            nursery.cancel_scope.cancel()
