# The garbage collector while a process serves chat (eva.live.collector).
#
# `eva serve-local` runs in this process here, so the test can look at the
# collector from inside the feed: young objects collected less often,
# start-up frozen; both undone once serving ends.
from __future__ import annotations

import gc
from pathlib import Path

from eva.cli.serve_frame import Session, serve
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.live.collector import YOUNG_GENERATION
from eva.live.inputs import Post
from eva.live.supervisor import Supervisor, wall_clock_ms
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

