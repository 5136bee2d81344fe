# Compression takes turns: one channel's step per turn of the scheduler.
#
# Shell (trio). Trio runs every ready task once per turn of its scheduler and
# only then looks at IO. When two hundred channels compress at once, one turn
# runs a step of each: tens of milliseconds in which no commit's answer is
# taken in, so the writer waits for work, and no post or prompt moves.
# A step that takes its turn here first runs alone among its kind: the others
# wait in line, so a turn of the scheduler holds at most one of them and the
# loop comes back to IO between any two. Invariant: every task in line gets
# its turn, in the order it asked (trio's Lock is fair).
from __future__ import annotations

import trio


class Turns:
    """A line for background steps; `take` before each one."""

    def __init__(self) -> None:
        self._lock = trio.Lock()
        self.taken = 0

    async def take(self) -> None:
        """Wait for this task's turn; return in a later turn of the scheduler than the
        last step taken, with the next task in line let in after this one."""
        async with self._lock:
            self.taken += 1
            await trio.lowlevel.checkpoint()

    def statistics(self) -> trio.LockStatistics:
        return self._lock.statistics()
