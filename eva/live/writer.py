# The one writer of a process: appends from every actor, committed in groups.
#
# Shell: a trio task that takes append requests from a bounded channel, runs
# one write transaction for all the requests that arrived together in a worker
# thread (so the trio loop never waits on a commit), and answers each sender
# once its events are durable. No task awaits while it holds a transaction:
# the transaction lives and dies inside the thread.
#
# A group is every append waiting, in the order they came, up to MAX_GROUP:
# people's posts and compression's lines alike.
from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from eva.core.events import AnyEvent
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.store.event_store import Appended, Batch, EventStore

log = logging.getLogger(__name__)

MAX_GROUP = 512
"""Appends a group takes at most."""


OnDone = Callable[[Appended | BaseException], None]
"""Told how an append queued with `Writer.append_later` ended: its Appended once durable,
or what refused or failed it (Rejected, or the commit's error)."""


@dataclass(slots=True)
class _Request:
    batch: Batch
    on_stored: Callable[[], None] | None = None
    on_done: OnDone | None = None
    done: trio.Event | None = None  # for a sender that waits (`append`)
    result: Appended | Rejected | None = None
    error: BaseException | None = None
    grouped: bool = False  # taken into a group: its events are final


Queued = _Request
"""An append queued with `Writer.append_later`, which more events may join (`Writer.join`)
until it is taken into a group."""


@dataclass(frozen=True, slots=True)
class WriterStatistics:
    """Counts since the writer opened."""

    commits: int
    appends: int
    events: int
    largest_group: int


class Writer:
    """Appends events for any channel; `append` returns once they are durable."""

    def __init__(self, store: EventStore, capacity: int) -> None:
        self.store = store
        self._send, self._receive = trio.open_memory_channel[_Request](capacity)
        self._commits = 0
        self._appends = 0
        self._events = 0
        self._largest = 0
        self._paused = trio.Lock()
        self._closed = False

    async def append(
        self,
        stream: StreamId,
        events: Sequence[AnyEvent],
        on_stored: Callable[[], None] | None = None,
    ) -> Appended:
        """Append `events` to `stream` atomically; raises Rejected if they do not fit.

        `on_stored` is called once they are durable, before any task that waits
        on the commit runs (and not if they are refused), so that what a caller
        keeps beside the store is never behind what another task reads there.
        """
        done = trio.Event()
        request = _Request(Batch(stream, list(events)), on_stored, done=done)
        await self._put(request)
        await done.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        if isinstance(request.result, Rejected):
            raise request.result
        return request.result

    async def append_later(
        self, stream: StreamId, events: Sequence[AnyEvent], on_done: OnDone
    ) -> Queued:
        """Queue an append and return before it is stored; it waits only for room.

        `on_done` is called once, when the commit that holds it is answered
        (before any task waiting on that commit runs): with the Appended, or
        with what refused or failed it. Appends are answered in the order of
        their commits, so a sender's appends end in the order it queued them.
        `on_done` must not await, and what it raises is logged and dropped.
        """
        request = _Request(Batch(stream, list(events)), on_done=on_done)
        await self._put(request)
        return request

    def append_later_nowait(
        self, stream: StreamId, events: Sequence[AnyEvent], on_done: OnDone
    ) -> Queued | None:
        """`append_later` if there is room now; None, with nothing queued, if not."""
        request = _Request(Batch(stream, list(events)), on_done=on_done)
        return request if self._put_nowait(request) else None

    def join(self, queued: Queued, events: Sequence[AnyEvent]) -> bool:
        """Add `events` to an append still waiting for a group, to be stored with it, all
        or nothing; False, with nothing done, once it has gone into one."""
        if queued.grouped:
            return False
        batch = queued.batch
        queued.batch = Batch(batch.stream, [*batch.events, *events])
        return True

    async def _put(self, request: _Request) -> None:
        # No turn of the scheduler to queue it while there is room: the wait is one.
        if not self._put_nowait(request):
            await self._send.send(request)

    def _put_nowait(self, request: _Request) -> bool:
        try:
            self._send.send_nowait(request)
        except trio.WouldBlock:
            return False
        return True

    def statistics(self) -> WriterStatistics:
        return WriterStatistics(self._commits, self._appends, self._events, self._largest)

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Hold every commit until the block ends (for swapping the data file)."""
        async with self._paused:
            yield

    async def run(self) -> None:
        """Commit requests in groups until the channel closes; then finish what is queued."""
        async with self._receive:
            while True:
                try:
                    first = await self._receive.receive()
                except trio.EndOfChannel:
                    break
                async with self._paused:
                    await self._commit(self._next_group(first))

    def _next_group(self, first: _Request) -> list[_Request]:
        """`first` and every append waiting behind it, up to MAX_GROUP."""
        group = [first]
        while len(group) < MAX_GROUP:
            try:
                group.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        for request in group:
            request.grouped = True
        return group

    async def _commit(self, group: list[_Request]) -> None:
        """Commit a group in a worker thread of this process."""
        batches = [request.batch for request in group]
        try:
            results = await trio.to_thread.run_sync(self.store.append_many, batches)
        except BaseException as error:
            self._fail(group, error)
            if not isinstance(error, Exception):
                raise
            return
        self._answer(group, results)

    def _fail(self, group: list[_Request], error: BaseException) -> None:
        """Answer every sender with the error; the writer carries on."""
        for request in group:
            request.error = error
            _finish(request, error)

    def _answer(self, group: list[_Request], results: list[Appended | Rejected]) -> None:
        self._commits += 1
        self._appends += len(group)
        self._events += sum(len(request.batch.events) for request in group)
        self._largest = max(self._largest, len(group))
        for request, result in zip(group, results, strict=True):
            request.result = result
            if request.on_stored is not None and not isinstance(result, Rejected):
                request.on_stored()
            _finish(request, result)

    def close(self) -> None:
        """No more appends; `run` returns once the queued ones are committed."""
        self._closed = True
        self._send.close()

    @property
    def accepting(self) -> bool:
        """Whether appends are still taken (the writer was not closed)."""
        return not self._closed


def _finish(request: _Request, outcome: Appended | BaseException) -> None:
    """Tell the sender how its append ended: its callback, or the event it waits on."""
    on_done = request.on_done
    if on_done is not None:
        request.on_done = None  # a sender's callback may hold the request: no cycle
        try:
            on_done(outcome)
        except Exception:  # the sender's fault: the writer and the other senders carry on
            log.exception("an append's on_done failed")
    if request.done is not None:
        request.done.set()


@asynccontextmanager
async def open_writer(store: EventStore, capacity: int = 1024) -> AsyncIterator[Writer]:
    """A running writer; on exit it commits what was queued and stops."""
    writer = Writer(store, capacity)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        try:
            yield writer
        finally:
            writer.close()
