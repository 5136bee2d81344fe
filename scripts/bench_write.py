"""Benchmark the write path alone: what a commit costs, and what each post and line adds.

Commits groups of events into a fresh data directory the way the serving process's
writer does (`EventStore.append_many`), in this process, and times the CPU and the
wall time of each commit. Three shapes:

- posts to many channels: G posts a commit, each to another of --channels
  channels (a busy server: about one post per channel in each commit);
- posts to one channel: G posts a commit, all to one channel;
- lines: one channel's verbatim leaves, then its glued merges level by level,
  G a commit (what compression writes).

For the first shape it fits cost = F + c * G over the group sizes, in CPU and
in wall time: F is what a commit costs whatever it holds, c what each post
adds. Wall time adds what LMDB's two flushes per commit wait for the disk,
which grows with the pages a commit dirties. The text is synthetic, so no
shared data is needed, and the live pipeline's timing does not enter: builds
can be compared on a shared machine with fewer rounds than bench_live needs.
The last line printed is one JSON object.

    python scripts/bench_write.py [--channels 200] [--commits 300] [--groups 1,4,16,64]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from eva.core.events import AnyEvent, LineWritten, MessagePosted
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.core.render import LINE_LIMIT_BYTES, cut_to_bytes, join_glue, render_message
from eva.store.event_store import Batch, EventStore
from eva.store.lmdb_kv import open_backend

GUILD = 1
START_MS = 1_700_000_000_000
FIRST_ID = 10**15
WARM_POSTS = 100
"""Posts each channel holds before anything is timed, so the tables have some depth."""
WORDS = (
    "the", "a", "we", "you", "it", "is", "was", "and", "but", "so", "if", "not", "yes",
    "no", "maybe", "later", "today", "tomorrow", "build", "test", "ship", "fix", "bug",
    "patch", "release", "meeting", "coffee", "lunch", "game", "map", "server", "discord",
    "bot", "memory", "line", "row", "tail", "merge", "leaf", "glue", "lmdb", "trio",
    "python", "rust", "cat",
)


class Feed:
    """Posts for many channels, numbered as each channel's store expects them."""

    def __init__(self, channels: int, seed: int = 7) -> None:
        self.streams = [StreamId(GUILD, 1000 + n) for n in range(channels)]
        self.next_index = dict.fromkeys(self.streams, 0)
        self.next_id = FIRST_ID
        self.rng = random.Random(seed)
        self.turn = 0  # the channel the next round-robin post goes to

    def post(self, stream: StreamId) -> MessagePosted:
        index = self.next_index[stream]
        self.next_index[stream] = index + 1
        self.next_id += 1
        who = self.rng.randrange(12)
        words = self.rng.randint(3, 30)
        return MessagePosted(
            at_ms=START_MS + self.next_id - FIRST_ID,
            index=index,
            message_id=self.next_id,
            author_id=who,
            author_name=f"person{who}",
            content=" ".join(self.rng.choice(WORDS) for _ in range(words)),
        )

    def spread(self, count: int) -> list[Batch]:
        """`count` posts, each to the next channel in turn."""
        batches = []
        for _ in range(count):
            stream = self.streams[self.turn % len(self.streams)]
            self.turn += 1
            batches.append(Batch(stream, [self.post(stream)]))
        return batches


def commit(store: EventStore, batches: Sequence[Batch]) -> tuple[float, float]:
    """CPU and wall seconds of one group commit of `batches`; raises if one is refused."""
    wall, cpu = time.perf_counter(), time.thread_time()
    results = store.append_many(batches)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    refused = [result for result in results if isinstance(result, Rejected)]
    if refused:
        raise SystemExit(f"bench_write: a batch was refused: {refused[0]}")
    return cpu, wall


def timed(store: EventStore, groups: Sequence[Sequence[Batch]], events: int) -> dict[str, float]:
    cpu = wall = 0.0
    for batches in groups:
        spent, waited = commit(store, batches)
        cpu, wall = cpu + spent, wall + waited
    return {
        "commits": len(groups),
        "cpu_us_per_commit": round(cpu / len(groups) * 1e6, 1),
        "wall_us_per_commit": round(wall / len(groups) * 1e6, 1),
        "cpu_us_per_event": round(cpu / events * 1e6, 2),
    }


def fit(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of y = F + c * x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def leaves_and_merges(
    posts: Sequence[MessagePosted], first_ms: int
) -> list[list[LineWritten]]:
    """The verbatim leaves of `posts`, then each level of glued merges above them."""
    level = [
        LineWritten(
            at_ms=first_ms,
            start=post.index,
            size=1,
            text=render_message(post.author_name, post.content),
            first_ms=post.at_ms,
            last_ms=post.at_ms,
            authors=(post.author_id,),
        )
        for post in posts
    ]
    levels = [level]
    while len(level) > 1:
        level = [
            LineWritten(
                at_ms=first_ms,
                start=left.start,
                size=left.size * 2,
                text=cut_to_bytes(join_glue(left.text, right.text), LINE_LIMIT_BYTES),
                first_ms=left.first_ms,
                last_ms=right.last_ms,
                authors=tuple(sorted({*left.authors, *right.authors})),
                how="glue",
            )
            for left, right in zip(level[::2], level[1::2], strict=False)
        ]
        levels.append(level)
    return levels


def in_groups(stream: StreamId, events: Sequence[AnyEvent], size: int) -> list[list[Batch]]:
    return [[Batch(stream, list(events[i : i + size]))] for i in range(0, len(events), size)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--commits", type=int, default=300, help="timed commits per shape and size")
    parser.add_argument("--groups", default="1,4,16,64", help="group sizes G, comma-separated")
    args = parser.parse_args()
    try:
        sizes = [int(size) for size in args.groups.split(",")]
    except ValueError:
        parser.error(f"--groups takes whole numbers separated by commas, not {args.groups!r}")
    if args.channels < 1 or args.commits < 1 or not sizes or min(sizes) < 1:
        parser.error("--channels, --commits and every group size must be at least 1")
    if max(sizes) > args.channels:
        parser.error(f"a group of posts to many channels needs {max(sizes)} channels")

    feed = Feed(args.channels)
    result: dict[str, object] = {"channels": args.channels, "commits": args.commits}
    with tempfile.TemporaryDirectory(prefix="eva-bench-write-") as tmp:
        backend = open_backend(Path(tmp) / "data")
        store = EventStore(backend)
        for _ in range(WARM_POSTS):
            commit(store, feed.spread(args.channels))
        print(f"warmed up: {WARM_POSTS} posts in each of {args.channels} channels", file=sys.stderr)

        many: dict[str, dict[str, float]] = {}
        for size in sizes:
            groups = [feed.spread(size) for _ in range(args.commits)]
            many[str(size)] = timed(store, groups, size * args.commits)
            print(f"posts to many channels, {size} a commit: {many[str(size)]}", file=sys.stderr)
        result["posts_to_many_channels"] = many
        for kind in ("cpu", "wall"):
            points = [(size, many[str(size)][f"{kind}_us_per_commit"]) for size in sizes]
            fixed, per_post = fit(points)
            result[f"commit_{kind}_us_fixed"] = round(fixed, 1)
            result[f"post_{kind}_us_each"] = round(per_post, 2)

        one: dict[str, dict[str, float]] = {}
        for size in sizes:
            streams = feed.streams
            groups = [
                [Batch(stream, [feed.post(stream) for _ in range(size)])]
                for stream in (streams[i % len(streams)] for i in range(args.commits))
            ]
            one[str(size)] = timed(store, groups, size * args.commits)
            print(f"posts to one channel, {size} a commit: {one[str(size)]}", file=sys.stderr)
        result["posts_to_one_channel"] = one

        lines: dict[str, dict[str, float]] = {}
        for n, size in enumerate(sizes):
            stream = StreamId(GUILD, 900 + n)  # a channel of its own for each size
            feed.next_index[stream] = 0
            count = 1 << max(1, (size * args.commits - 1).bit_length())  # whole levels
            posts = [feed.post(stream) for _ in range(count)]
            for start in range(0, count, 4096):
                commit(store, [Batch(stream, posts[start : start + 4096])])
            levels = leaves_and_merges(posts, START_MS)
            written = [line for level in levels for line in level]
            lines[str(size)] = timed(store, in_groups(stream, written, size), len(written))
            print(f"lines, {size} a commit: {lines[str(size)]}", file=sys.stderr)
        result["lines"] = lines
        backend.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
