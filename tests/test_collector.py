# The garbage collector while a process serves chat (eva.live.collector).
#
# `eva serve-local` runs in this process here, so the test can look at the
# collector from inside the feed: young objects collected less often,
# start-up frozen; both undone once serving ends. In a burst of messages the
# writer holds collections, until the burst ends or too many young objects
# wait.
from __future__ import annotations

import gc
from pathlib import Path

import trio
from test_writer import posted

from eva.cli.serve_frame import Session, serve
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.live.collector import (
    HELD_MOST,
    YOUNG_GENERATION,
    held_in_burst,
    hold_in_burst,
    serving_collector,
)
from eva.live.inputs import Post
from eva.live.pace import Pace
from eva.live.supervisor import Supervisor, wall_clock_ms
from eva.live.writer import open_writer
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend


async def test_serving_sets_the_collector_and_puts_it_back(tmp_path: Path) -> None:
    backend = open_backend(tmp_path / "data")
    store = EventStore(backend)
    stream = StreamId(1, 2)
    seen: dict[str, object] = {}

    async def feed(supervisor: Supervisor) -> None:
        seen["threshold"] = gc.get_threshold()
        seen["frozen"] = gc.get_freeze_count()
        post = Post(message_id=10, author_id=3, author_name="ann", at_ms=1000, content="hello")
        seen["index"] = await supervisor.ask(stream, post)

    before = gc.get_threshold()
    try:
        await serve(store, MemorySettings(), Session("stdin"), wall_clock_ms, feed)
    finally:
        backend.close()
    assert seen["index"] == 0
    assert seen["threshold"] == (YOUNG_GENERATION, *before[1:])
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_burst_holds_collections_until_it_ends_or_the_young_grow_too_many() -> None:
    assert gc.isenabled()
    hold_in_burst(True)  # not serving: nothing changes
    assert gc.isenabled() and not held_in_burst()
    with serving_collector():
        hold_in_burst(True)
        assert not gc.isenabled() and held_in_burst()
        kept = [[n] for n in range(HELD_MOST + 1)]  # young objects that stay alive
        assert gc.get_count()[0] > HELD_MOST
        hold_in_burst(True)  # still a burst, but too many uncollected: collected now
        assert gc.get_count()[0] < HELD_MOST and not gc.isenabled()
        del kept
        hold_in_burst(False)
        assert gc.isenabled() and not held_in_burst()
        hold_in_burst(True)
    assert gc.isenabled() and not held_in_burst()  # serving ended inside a burst


async def test_the_writer_holds_collections_in_a_burst_and_ends_the_hold_when_quiet(
    tmp_path: Path, autojump_clock: object
) -> None:
    store = EventStore(open_backend(tmp_path / "data"))
    pace = Pace(busy_messages_per_s=100.0, window_s=0.05)
    stream = StreamId(1, 2)
    with serving_collector():
        async with open_writer(store, pace=pace) as writer:
            for index in range(40):  # 400 messages a second: a burst at this pace
                await writer.append(stream, [posted(index)])
                await trio.sleep(0.0025)
            assert held_in_burst() and not gc.isenabled()
            await trio.sleep(pace.quiet_after_s + 0.01)  # nothing comes: quiet
            assert not held_in_burst() and gc.isenabled()
    assert gc.isenabled()
