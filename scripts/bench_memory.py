"""Benchmark the memory on the shared sample: import, then its timeline through compression.

Imports the 45,707-message sample (read in place, never copied), then plays its
messages in order with their real timestamps through compression and publishing
into a second stream, with the offline summarizer standing in for the model.
Then it times zoom, recall and rendering the memory block. The last line printed
is one JSON object.

    python scripts/bench_memory.py [--export PATH] [--queries N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from eva.cli.cmd_import import import_bytes
from eva.core.address import Address, format_address, halves
from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.core.terms import terms
from eva.memory.build import Memory
from eva.memory.view import RowText, memory_text, recall, zoom
from eva.store.key_binding import key_store_at, keyed_store
from eva.store.lmdb_kv import open_backend

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"


def p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, default=SAMPLE)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    if not args.export.exists():
        print(f"no sample at {args.export}; nothing to measure", file=sys.stderr)
        return 0
    raw = gzip.decompress(args.export.read_bytes()) if args.export.suffix == ".gz" else (
        args.export.read_bytes()
    )
    settings = MemorySettings()
    with (
        tempfile.TemporaryDirectory(prefix="eva-bench-memory-") as tmp,
        tempfile.TemporaryDirectory() as keys,
        key_store_at(Path(keys) / "keys"),  # never the operator's key store
    ):
        data = Path(tmp)
        started = time.perf_counter()
        report = import_bytes(data, raw, args.export)
        import_s = time.perf_counter() - started
        source = StreamId(int(report.guild_id), int(report.channel_id))
        store = keyed_store(open_backend(data), write=True)
        posts = [e for _, e in store.events(source) if isinstance(e, MessagePosted)]
        played = StreamId(source.guild_id, source.channel_id + 1)
        memory = Memory(store, played, OfflineSummarizer(), settings)
        started = time.perf_counter()
        built = trio.run(memory.play, posts)
        build_s = time.perf_counter() - started
        meta = store.meta(played)
        assert meta is not None

        rng = random.Random(11)
        row = store.published_row(played)
        assert row is not None
        zoom_times = []
        for _ in range(2000):
            start, size = rng.choice(row.entries)
            address = Address(start, size)
            if size > 1 and rng.random() < 0.5:
                address = rng.choice(halves(address))
            began = time.perf_counter()
            zoom(store, played, format_address(address), settings)
            zoom_times.append(time.perf_counter() - began)

        queries = []
        while len(queries) < args.queries:
            words = terms(rng.choice(posts).content)
            if words:
                count = rng.randint(1, min(3, len(words)))
                queries.append(" ".join(rng.sample(words, count)))
        recall_times = []
        for query in queries:
            began = time.perf_counter()
            recall(store, played, query, settings)
            recall_times.append(time.perf_counter() - began)

        block_times = []
        cache = RowText()
        block = memory_text(store, played, settings, cache)
        for _ in range(300):
            began = time.perf_counter()
            memory_text(store, played, settings, cache)
            block_times.append(time.perf_counter() - began)
        cold_times = []
        for _ in range(30):
            began = time.perf_counter()
            memory_text(store, played, settings, RowText())
            cold_times.append(time.perf_counter() - began)

        stats = built.stats
        result = {
            "messages": len(posts),
            "leaves_verbatim": stats.leaves_verbatim,
            "leaves_model": stats.leaves_model,
            "merges_glue": stats.merges_glue,
            "merges_model": stats.merges_model,
            "model_requests": stats.model_requests,
            "model_input_bytes": stats.model_input_bytes,
            "model_output_bytes": stats.model_output_bytes,
            "publishes": built.publishes,
            "compression_runs": built.runs,
            "row_bytes_max": built.row_bytes_max,
            "tail_bytes_max": built.tail_bytes_max,
            "prompt_bytes_max": built.row_bytes_max + built.tail_bytes_max,
            "prompt_bytes_final": len(block.encode()),
            "build_s": round(build_s, 2),
            "zoom_p99_ms": p99_ms(zoom_times),
            "recall_p99_ms": p99_ms(recall_times),
            "recall_p50_ms": round(statistics.median(recall_times) * 1000, 3),
            "memory_block_p99_ms": p99_ms(block_times),
            "memory_block_cold_p99_ms": p99_ms(cold_times),
            "import_s": round(import_s, 3),
            "import_msgs_per_s": round(len(posts) / import_s),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
