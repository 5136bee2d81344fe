# An input on its way to a channel's actor, with the slot its answer goes in.
#
# Shell (trio). A sender makes a `Request`, puts it in the actor's inbox and either waits
# for its answer (`result`) or has a callback called with it (`when_answered`); the actor
# answers it once (`reply`), with a value or with the error the input raised.
# Invariants: the actor answers each request once; a waiting sender's event is made only for a
# sender that waits; what a callback raises is logged and dropped, never the actor's.
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from eva.live.inputs import ChannelInput
from eva.memory.compress import CompressStats

log = logging.getLogger("eva.live.actor")  # the channel actor's log, whichever part of it speaks


@dataclass(slots=True)
class Request:
    """An input on its way to an actor, with the slot its answer goes in."""

    item: ChannelInput | CompressionDone
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


@dataclass(frozen=True, slots=True)
class CompressionDone:
    """A compression run of the channel ended (sent by the run's task to the actor)."""

    stats: CompressStats | None
    error: BaseException | None
