"""Compression takes turns: one step per turn of the scheduler, in the order asked.

A run over real LMDB in a temp directory pauses before every stretch of its
work, so the actors' runs can be made to take turns.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import trio
from conftest import keyed

from eva.cli.cmd_import import import_bytes
from eva.core.events import AnyEvent, LineWritten
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.demo.friends import friends_export
from eva.live.turns import Turns
from eva.memory.compress import APPEND_CHUNK, STEP_CHUNK, compress
from eva.store.event_store import Appended, EventStore
from eva.store.lmdb_kv import open_backend


async def test_steps_take_turns_one_per_turn_of_the_scheduler() -> None:
    turns = Turns()
    ticks = 0
    steps: list[tuple[str, int]] = []  # (whose step, the scheduler's turn it ran in)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async def channel(name: str) -> None:
        for _ in range(3):
            await turns.take()
            steps.append((name, ticks))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        async with trio.open_nursery() as channels:
            for name in "abc":
                channels.start_soon(channel, name)
        nursery.cancel_scope.cancel()
    order = [name for name, _ in steps]
    assert sorted(order[:3]) == ["a", "b", "c"]
    assert order == order[:3] * 3  # in line, each in its turn, in the order first asked
    turns_of_steps = [tick for _, tick in steps]
    assert len(set(turns_of_steps)) == len(steps)  # never two steps in one turn
    assert turns.taken == 9
    assert turns.statistics().tasks_waiting == 0


async def test_a_run_pauses_before_every_stretch_of_its_work(tmp_path: Path) -> None:
    report = import_bytes(tmp_path, friends_export(3 * STEP_CHUNK), Path("friends.json"))
    store = keyed(EventStore(open_backend(tmp_path)))
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    timeline: list[str] = []

    async def append(target: StreamId, events: list[AnyEvent]) -> Appended:
        timeline.append(f"append {sum(isinstance(e, LineWritten) for e in events)}")
        return await trio.to_thread.run_sync(store.append, target, events)

    async def pause() -> None:
        timeline.append("pause")
        await trio.lowlevel.checkpoint()

    meta = store.meta(stream)
    assert meta is not None
    stats = await compress(
        store, stream, OfflineSummarizer(), append, MemorySettings(), 0, meta.messages,
        pause=pause,
    )
    assert stats.leaves_verbatim + stats.leaves_model == meta.messages
    assert timeline[0] == "pause"  # before anything is read
    assert timeline[-1] == "pause"
    # Work resumes after appends only through a pause, and no more than STEP_CHUNK
    # messages or merges are looked at between two pauses.
    for before, after in itertools.pairwise(timeline):
        if before.startswith("append"):
            assert after == "pause" or after.startswith("append")
    # Before the first lines go: the first pause, then one every STEP_CHUNK messages.
    first_append = next(i for i, entry in enumerate(timeline) if entry != "pause")
    assert first_append >= 1 + meta.messages // STEP_CHUNK
    assert max(int(entry.split()[1]) for entry in timeline if entry != "pause") <= APPEND_CHUNK
