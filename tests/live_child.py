# The program test_live_crash.py kills: live ingest through the supervisor, compression running.
#
# Run as `python tests/live_child.py DATA_DIR SEED [--finish]`. It opens the
# store, runs `open_supervisor` with the offline summarizer and small settings
# (so compression runs and publishes happen every few dozen messages), and
# feeds three channels, each continuing from the messages already stored.
# After each `ask(Post)` returns (the message is durable) it prints and
# flushes `ack GUILD CHANNEL MESSAGE_ID INDEX`. The post at a given channel and
# index is always the same (`expected_post`), so the parent can check it.
# With `--finish` it only resumes the unfinished work, waits until every actor
# has finished and gone to sleep, prints `finished` and exits 0.
from __future__ import annotations

import random
import sys
from pathlib import Path

import trio

from eva.core.keys import StreamId
from eva.core.settings import KIB, LiveSettings, MemorySettings
from eva.core.state import StreamMeta
from eva.core.summarize import OfflineSummarizer
from eva.core.timing import compression_due
from eva.live.inputs import Post
from eva.live.supervisor import Supervisor, open_supervisor
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

STREAMS = (StreamId(7, 1), StreamId(7, 2), StreamId(8, 1))
SETTINGS = MemorySettings(
    compress_at_bytes=6 * KIB,
    tail_keep_bytes=2 * KIB,
    overflow_tail_bytes=12 * KIB,
    row_high_bytes=12 * KIB,
    row_low_bytes=6 * KIB,
    prompt_tail_max_bytes=16 * KIB,
    quiet_ms=300,
    tasks_per_request=1,  # no merge waits in the ready queue to fill a request
)
LIVE = LiveSettings(idle_seconds=0.3, retry_first_seconds=0.1, retry_most_seconds=1.0)
SIZES = (30, 120, 300, 700)  # 700 is too long to be a leaf: the summarizer writes it
FINISH_TIMEOUT_S = 30.0
POLL_S = 0.05


def expected_post(stream: StreamId, index: int) -> Post:
    """The message the child posts at `index` of `stream`, every time."""
    size = SIZES[index * 37 % 11 % len(SIZES)]
    words = " ".join(f"w{(index * 13 + k) % 101}" for k in range(size // 4))
    return Post(
        message_id=stream.guild_id * 10**9 + stream.channel_id * 10**6 + index,
        author_id=index % 4,
        author_name=f"person {index % 4}",
        at_ms=1_600_000_000_000 + index * 1000,
        content=f"{stream} message {index}: {words}"[:size],
    )


def unfinished(meta: StreamMeta) -> bool:
    """Whether a stream has compression, merges or a publish left to do."""
    return (
        meta.ready > 0
        or compression_due(meta, SETTINGS)
        or meta.leaf_frontier > meta.row_frontier
    )


async def feed(supervisor: Supervisor, stream: StreamId, start: int, seed: int) -> None:
    rng = random.Random(seed)
    index = start
    while True:
        post = expected_post(stream, index)
        answer = await supervisor.ask(stream, post)
        if answer != index:
            raise AssertionError(f"{stream}: message {index} was stored at {answer}")
        sys.stdout.write(f"ack {stream.guild_id} {stream.channel_id} {post.message_id} {index}\n")
        sys.stdout.flush()
        index += 1
        if rng.random() < 0.01:
            await trio.sleep(0.4)  # quiet and idle: a quiet publish, an actor going to sleep
        else:
            await trio.sleep(rng.uniform(0, 0.004))


async def main(data_dir: Path, seed: int, finish: bool) -> int:
    store = EventStore(open_backend(data_dir))
    async with open_supervisor(store, OfflineSummarizer(), SETTINGS, LIVE) as supervisor:
        if finish:
            for _ in range(round(FINISH_TIMEOUT_S / POLL_S)):  # polls: the store has no events
                if not supervisor.awake() and not any(unfinished(m) for m in store.streams()):
                    print("finished", flush=True)
                    return 0
                await trio.sleep(POLL_S)
            print(f"still working: {store.streams()}", file=sys.stderr, flush=True)
            return 1
        async with trio.open_nursery() as nursery:
            for number, stream in enumerate(STREAMS):
                meta = store.meta(stream)
                start = 0 if meta is None else meta.messages
                nursery.start_soon(feed, supervisor, stream, start, seed * 10 + number)
    return 0


if __name__ == "__main__":
    flags = sys.argv[3:]
    sys.exit(
        trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), "--finish" in flags)
    )
