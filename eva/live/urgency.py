# Work a person is waiting for goes first.
#
# Shell (trio). One process shares one loop between storing bursts of chat,
# compressing, and answering someone who asked Eva a question. Trio runs ready
# tasks in turn, so under a burst every step of an answer waits behind a round
# of background steps. While urgent work is under way (`urgent()`), background
# work that asks (`yield_to_urgent()`) waits before its next step, for at most
# `max_wait_s`, so a reply is never starved of the loop and a burst never of
# storage for long. Invariant: the wait ends as soon as no urgent work is left.
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

MAX_WAIT_S = 0.25


class Urgency:
    """Counts the urgent work under way; background steps wait while there is some."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._under_way = 0
        self._clear = trio.Event()
        self._clear.set()
        self.waits = 0  # background steps that waited

    @contextmanager
    def urgent(self) -> Iterator[None]:
        """Mark the block as work someone is waiting for."""
        if self._under_way == 0:
            self._clear = trio.Event()
        self._under_way += 1
        try:
            yield
        finally:
            self._under_way -= 1
            if self._under_way == 0:
                self._clear.set()

    def under_way(self) -> bool:
        """Whether urgent work is under way now."""
        return self._under_way > 0

    async def yield_to_urgent(self) -> None:
        """Wait while urgent work is under way (at most `max_wait_s`); at once otherwise."""
        if self._under_way:
            self.waits += 1
            with trio.move_on_after(self.max_wait_s):
                await self._clear.wait()
