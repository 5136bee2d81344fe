# A channel's lane: the bot's jobs for one channel in the order Discord sent them.
#
# Shell (trio). Listeners put jobs on a lane without awaiting (`put`); one task per lane
# takes them in order and marks each one done once the actor has answered it (`done`).
# Invariants: `unstored` holds the posts put and not yet done, oldest first, so a
# question's prompt can show every message that reached the channel before it, stored or
# not; `others` counts the other jobs (edits, deletions, history fetches) not yet done.
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


Job = Ingest | Change | Backfill


class Lane:
    """One channel's jobs, in order, and what of them is not done yet."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[Job](math.inf)
        self.unstored: deque[Post] = deque()
        self.others = 0

    def put(self, job: Job) -> None:
        """Queue `job` behind the others (never blocks)."""
        if isinstance(job, Ingest):
            self.unstored.append(job.post)
        else:
            self.others += 1
        self.send.send_nowait(job)

    def done(self, job: Job) -> None:
        """Mark the oldest job not done yet, `job`, as done."""
        if isinstance(job, Ingest):
            self.unstored.popleft()
        else:
            self.others -= 1

    def close(self) -> None:
        """No more jobs: the lane's task finishes the queued ones and returns."""
        self.send.close()
