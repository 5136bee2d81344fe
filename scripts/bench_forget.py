"""Benchmark forget me on the shared sample: erase its most active poster, for real.

Imports the 45,707-message sample (read in place, never copied) into a temporary
data directory, plays its messages through compression and publishing into a
second stream as scripts/bench_memory.py does (the offline summarizer stands
in for the model, so no time goes to model latency), then forgets the person
who posted most, in every stream, exactly as `eva forget --user` does. The
last line printed is one JSON object.

    python scripts/bench_forget.py [--export PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import trio

from eva.cli.cmd_import import import_bytes
from eva.core.events import AnyEvent, MessagePosted
from eva.core.forget import person_hash
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.memory.forget import ForgetReport, forget
from eva.store.event_store import Appended
from eva.store.key_binding import key_store_at, keyed_store
from eva.store.lmdb_kv import open_backend

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"


def directory_mb(directory: Path) -> float:
    total = sum(
        (Path(root) / name).stat().st_size
        for root, _, names in os.walk(directory)
        for name in names
    )
    return round(total / 1e6, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, default=SAMPLE)
    args = parser.parse_args()
    if not args.export.exists():
        print(f"no sample at {args.export}; nothing to measure", file=sys.stderr)
        return 0
    raw = args.export.read_bytes()
    raw = gzip.decompress(raw) if args.export.suffix == ".gz" else raw
    settings = MemorySettings()
    with (
        tempfile.TemporaryDirectory(prefix="eva-bench-forget-") as tmp,
        tempfile.TemporaryDirectory() as keys,
        key_store_at(Path(keys) / "keys"),  # never the operator's key store
    ):
        data = Path(tmp)
        started = time.perf_counter()
        imported = import_bytes(data, raw, args.export)
        source = StreamId(int(imported.guild_id), int(imported.channel_id))
        store = keyed_store(open_backend(data), write=True)
        posts = [e for _, e in store.events(source) if isinstance(e, MessagePosted)]
        played = StreamId(source.guild_id, source.channel_id + 1)
        trio.run(Memory(store, played, OfflineSummarizer(), settings).play, posts)
        prepare_s = time.perf_counter() - started

        poster, posted = Counter(post.author_id for post in posts).most_common(1)[0]
        streams = [StreamId(m.guild_id, m.channel_id) for m in store.streams()]
        mb_before = directory_mb(data)

        async def append(stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
            return store.append(stream, events)

        async def run() -> ForgetReport:
            return await forget(
                store,
                data,
                person_hash(poster),
                streams,
                "moderator",
                OfflineSummarizer(settings.line_limit),
                append,
                settings,
                int(time.time() * 1000),
            )

        started = time.perf_counter()
        report = trio.run(run)
        forget_s = time.perf_counter() - started
        result = {
            "messages": len(posts),
            "streams": len(streams),
            "poster_messages": posted,
            "messages_erased": report.messages_erased,
            "lines_remade": report.lines_remade,
            "model_tasks": report.model_tasks,
            "events_rewritten": report.events_rewritten,
            "forget_s": round(forget_s, 2),
            "erase_s": round(report.erase_s, 2),
            "purge_s": round(report.purge_s, 2),
            "compact_s": round(report.compact_s, 2),
            "scan_s": round(report.scan_s, 2),
            "texts_checked": report.texts_checked,
            "leftover_hits": report.leftover_hits,
            "data_dir_mb_before": mb_before,
            "data_dir_mb_after": directory_mb(data),
            "prepare_s": round(prepare_s, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        open_backend(data).close()
    print(json.dumps(result))
    return 0 if result["leftover_hits"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
