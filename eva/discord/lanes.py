# A channel's lane: the bot's jobs for one channel in the order Discord sent them.
#
# Shell (trio). Listeners put jobs on a lane without awaiting (`put`); one task per lane
# takes them in order (`take`) and marks each one done once the actor has answered it
# (`done`). While the task waits with nothing queued (`idle`), a post may skip the lane
# and go to the actor at once; it is counted as not done all the same (`track`).
# Invariants: `unstored` holds the posts put and not yet done, oldest first, so a
# question's prompt can show every message that reached the channel before it, stored or
# not; `others` counts the other jobs (edits, deletions, history fetches) not yet done;
# `unanswered` counts the posts submitted whose answer has not come.
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import trio

from eva.live.inputs import Delete, Edit, Post


@dataclass(frozen=True, slots=True)
class Ingest:
    """Store a post; answer it once stored if `answer`; `claimed` while the bot holds the
    right to answer it (see EvaBot.claim)."""

    post: Post
    answer: bool = False
    claimed: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """Apply an edit or a deletion."""

    item: Edit | Delete
    attachments_known: bool = True


@dataclass(slots=True)
class Backfill:
    """Fetch and store the channel's history since its last stored message."""

    forced: bool  # fetch even a channel with nothing stored (the moderator's command)
    done: trio.Event = field(default_factory=trio.Event)
    stored: int = 0


@dataclass(frozen=True, slots=True)
class StoreAgain:
    """Submit again the posts whose commit failed (a post that skipped the lane failed
    while the lane's task waited for a job: this wakes it)."""


Job = Ingest | Change | Backfill | StoreAgain


class Lane:
    """One channel's jobs, in order, and what of them is not done yet."""

    def __init__(self) -> None:
        self.send: trio.MemorySendChannel[Job]
        self.receive: trio.MemoryReceiveChannel[Job]
        self.send, self.receive = trio.open_memory_channel(math.inf)  # typed above: cheaper
        self.unstored: deque[Post] = deque()
        self.others = 0
        self.queued = 0  # put and not taken by the lane's task yet
        self.waiting = False  # the lane's task waits for a job
        self.unanswered = 0  # posts submitted and not answered yet
        self.failed: list[Ingest] = []  # posts whose commit failed, to be submitted again
        self._answered: trio.Event | None = None

    def idle(self) -> bool:
        """Whether the lane's task waits with nothing queued: a post may skip the lane."""
        return self.waiting and not self.queued

    def put(self, job: Job) -> None:
        """Queue `job` behind the others (never blocks)."""
        self.track(job)
        self.send.send_nowait(job)
        self.queued += 1

    def track(self, job: Job) -> None:
        """Count `job` as not done yet (`put` does; a post that skips the lane too)."""
        if isinstance(job, Ingest):
            self.unstored.append(job.post)
        else:
            self.others += 1

    def untrack(self, job: Ingest) -> None:
        """Undo the `track` of the post just tracked."""
        assert self.unstored[-1] is job.post
        self.unstored.pop()

    async def take(self) -> Job | None:
        """The next job (None once the lane is closed and empty), for the lane's task."""
        self.waiting = True
        try:
            job = await self.receive.receive()
        except trio.EndOfChannel:
            return None
        finally:
            self.waiting = False
        self.queued -= 1
        return job

    def take_nowait(self) -> Job | None:
        """The next job if one is queued, else None."""
        try:
            job = self.receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return None
        self.queued -= 1
        return job

    def done(self, job: Job) -> None:
        """Mark `job` as done (posts are done in the order they were stored, which is the
        order they came in but for a post stored before, answered at once)."""
        if isinstance(job, Ingest):
            if self.unstored and self.unstored[0] is job.post:
                self.unstored.popleft()
            else:
                self.unstored.remove(job.post)
        else:
            self.others -= 1

    def submitted(self, count: int) -> None:
        """`count` posts went to the actor; `answered` is called once for each."""
        self.unanswered += count

    def answered(self) -> None:
        self.unanswered -= 1
        if not self.unanswered and self._answered is not None:
            self._answered.set()

    async def all_answered(self) -> None:
        """Wait until every post submitted is answered."""
        while self.unanswered:
            self._answered = trio.Event()
            await self._answered.wait()

    def close(self) -> None:
        """No more jobs: the lane's task finishes the queued ones and returns."""
        self.send.close()
