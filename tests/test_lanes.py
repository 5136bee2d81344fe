"""A channel's lane in the bot: jobs in order, what is not done yet, when a post may skip it."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from eva.discord.lanes import Backfill, Change, Ingest, Lane
from eva.live.inputs import Delete, Post


def post(number: int) -> Post:
    return Post(message_id=number, author_id=1, author_name="ann", at_ms=number, content="hi")


async def test_a_post_skips_the_lane_only_while_its_task_waits_with_nothing_queued(
    autojump_clock: Any,
) -> None:
    lane = Lane()
    taken: list[object] = []

    async def task() -> None:
        while (job := await lane.take()) is not None:
            taken.append(job)
            while (more := lane.take_nowait()) is not None:
                taken.append(more)
            await trio.sleep(1)  # busy with the job

    async with trio.open_nursery() as nursery:
        assert not lane.idle()  # the task has not started waiting
        nursery.start_soon(task)
        await trio.testing.wait_all_tasks_blocked()
        assert lane.idle()
        first = Ingest(post(1))
        lane.put(first)
        assert not lane.idle()  # queued, though the task has not run yet
        await trio.testing.wait_all_tasks_blocked()
        assert taken == [first] and not lane.idle()  # busy
        lane.put(Ingest(post(2)))
        lane.put(Change(Delete(message_ids=(1,), at_ms=3)))
        assert lane.queued == 2
        lane.close()
    assert len(taken) == 3 and lane.queued == 0


def test_posts_are_done_as_answered_and_a_post_answered_early_leaves_the_others() -> None:
    lane = Lane()
    jobs = [Ingest(post(n)) for n in range(3)]
    for job in jobs:
        lane.put(job)
    backfill = Backfill(forced=False)
    lane.put(backfill)
    assert list(lane.unstored) == [post(0), post(1), post(2)] and lane.others == 1
    lane.done(jobs[2])  # stored before: answered ahead of the two in flight
    assert list(lane.unstored) == [post(0), post(1)]
    lane.done(jobs[0])
    lane.done(jobs[1])
    lane.done(backfill)
    assert not lane.unstored and lane.others == 0
    skipping = Ingest(post(9))  # a post that tried to skip the lane and could not
    lane.track(skipping)
    assert list(lane.unstored) == [post(9)]
    lane.untrack(skipping)
    assert not lane.unstored


async def test_all_answered_waits_for_every_post_submitted() -> None:
    lane = Lane()
    lane.submitted(2)
    done = trio.Event()

    async def wait() -> None:
        await lane.all_answered()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        lane.answered()
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        lane.answered()
    assert done.is_set()
