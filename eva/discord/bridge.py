# The two event loops of the bot's thread, trio's and hikari's asyncio, and calls across them.
#
# Shell. trio-asyncio runs an asyncio loop inside trio. `open_asyncio_loop`
# opens that loop, and the two helpers below are the only places that cross
# from one loop to the other.
from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import trio
import trio_asyncio  # type: ignore[import-untyped]

T = TypeVar("T")
log = logging.getLogger(__name__)

READY_BATCH = 64
"""Asyncio callbacks that run one after another, at most, before trio's tasks get a turn."""


@asynccontextmanager
async def open_asyncio_loop(ready_batch: int = READY_BATCH) -> AsyncIterator[Any]:
    """trio-asyncio's loop, made to run the asyncio callbacks that are ready in batches.

    On its own, trio-asyncio takes its callbacks one at a time, and waits on
    its queue for each one: a full turn of trio's scheduler per callback, and
    hikari queues several for every gateway message. asyncio's own loop runs,
    in each turn, every callback that was ready when the turn began. Here,
    after each callback the loop waited for, it also runs the ones already
    queued, up to `ready_batch` of them, before the other trio tasks run.
    The order of callbacks and timers is unchanged.
    """
    async with trio_asyncio.open_loop() as loop:
        run_ready_in_batches(loop, ready_batch)
        yield loop


def run_ready_in_batches(loop: Any, ready_batch: int = READY_BATCH) -> bool:
    """Make a running trio-asyncio loop take its queued callbacks in batches.

    It works through the loop's step, `_main_loop_one(no_wait)`, which
    trio-asyncio itself calls with `no_wait=True` to drain its queue when it
    stops: that call runs one callback or due timer, or raises `WouldBlock`
    when nothing is ready. A trio-asyncio without that step is left as it is
    (returns False); the bot is then only slower.
    """
    step = getattr(loop, "_main_loop_one", None)
    if step is None or not hasattr(loop, "_stopped"):
        log.warning("this trio-asyncio has no loop step to batch; callbacks run one at a time")
        return False

    async def step_then_ready(no_wait: bool = False) -> None:
        await step(no_wait)
        for _ in range(ready_batch):
            # A callback stopped the loop: run nothing after it.
            if loop._stopped.is_set():
                return
            try:
                await step(True)
            except trio.WouldBlock:
                return

    loop._main_loop_one = step_then_ready
    return True


async def aio(fn: Callable[[], Awaitable[T]]) -> T:
    """Await an asyncio coroutine (hikari's) from trio."""
    return cast(T, await trio_asyncio.aio_as_trio(fn)())


def run_trio(fn: Callable[[], Awaitable[T]]) -> Awaitable[T]:
    """Run a trio coroutine function from asyncio code (a hikari listener)."""
    return cast(Awaitable[T], trio_asyncio.trio_as_aio(fn)())
