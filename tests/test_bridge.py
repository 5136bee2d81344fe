"""The asyncio loop under trio: ready callbacks run in batches, in order; trio still gets turns."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio_asyncio  # type: ignore[import-untyped]

from eva.discord.bridge import READY_BATCH, open_asyncio_loop, run_ready_in_batches


class LoopSteps(trio.abc.Instrument):
    """Counts the turns trio gives the asyncio loop's own task."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("_main_loop"):
            self.steps += 1


async def run_queued(
    opener: Callable[[], AbstractAsyncContextManager[Any]], count: int
) -> tuple[list[int], int]:
    """Queue `count` callbacks at once; (the order they ran in, the loop task's turns)."""
    ran: list[int] = []
    done = trio.Event()

    def callback(number: int) -> None:
        ran.append(number)
        if number == count - 1:
            done.set()

    async with opener() as loop:
        await trio.sleep(0.01)  # the loop is idle, waiting on its queue
        steps = LoopSteps()
        trio.lowlevel.add_instrument(steps)
        try:
            for number in range(count):
                loop.call_soon(callback, number)
            with trio.fail_after(5):
                await done.wait()
        finally:
            trio.lowlevel.remove_instrument(steps)
    return ran, steps.steps


async def callbacks_per_turn(ran: list[int], count: int) -> list[int]:
    """Take trio turns until `count` callbacks ran; how many ran between two of ours."""
    seen: list[int] = []
    while len(ran) < count:
        await trio.lowlevel.checkpoint()
        seen.append(len(ran))
    return [after - before for before, after in zip([0, *seen], seen, strict=False)]


async def test_queued_callbacks_run_in_order_in_a_few_turns() -> None:
    ran, steps = await run_queued(open_asyncio_loop, 50)
    assert ran == list(range(50))
    assert steps <= 3


async def test_stock_trio_asyncio_takes_a_turn_per_callback() -> None:
    """What the batching saves: the loop as trio-asyncio ships it."""
    ran, steps = await run_queued(trio_asyncio.open_loop, 50)
    assert ran == list(range(50))
    assert steps >= 50


@pytest.mark.parametrize("batch", [1, 8, READY_BATCH])
async def test_trio_tasks_run_between_batches(batch: int) -> None:
    ran: list[int] = []
    async with open_asyncio_loop(batch) as loop:
        await trio.sleep(0.01)
        for number in range(300):
            loop.call_soon(ran.append, number)
        with trio.fail_after(5):
            jumps = await callbacks_per_turn(ran, 300)
    assert ran == list(range(300))
    # A loop turn runs the callback it waited for and at most `batch` more; trio may
    # order one round of runnable tasks either way, so two loop turns can fall
    # between two turns of this task, never more.
    assert max(jumps) <= 2 * (batch + 1)
    assert len(jumps) >= 300 // (2 * (batch + 1))


async def test_timers_tasks_and_a_clean_stop() -> None:
    order: list[str] = []

    async def sleeper(name: str, seconds: float) -> str:
        await asyncio.sleep(seconds)
        order.append(name)
        return name

    async def both() -> list[str]:
        asyncio.get_running_loop().call_later(0.02, order.append, "timer")
        asyncio.get_running_loop().call_soon(order.append, "soon")
        return list(await asyncio.gather(sleeper("late", 0.04), sleeper("early", 0.01)))

    with trio.fail_after(5):
        async with open_asyncio_loop():
            assert await trio_asyncio.aio_as_trio(both)() == ["late", "early"]
    assert order == ["soon", "early", "timer", "late"]


async def test_a_loop_without_the_step_is_left_alone() -> None:
    class Other:
        pass

    other = Other()
    assert run_ready_in_batches(other) is False
    assert not hasattr(other, "_main_loop_one")
