"""Micro-benchmark of the recall index on the shared channel sample.

Reads ../shared/data/komodo-talk-general.dce.json.gz (relative to the project
root) in place, builds the index in memory (and in LMDB in a temporary
directory), and times tokenize+index throughput and query latency. The last
line printed is a JSON object with the numbers.

    python scripts/bench_recall.py [--no-lmdb] [--queries 500]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import tempfile
import time
from pathlib import Path

from eva.core.keys import StreamId
from eva.core.memtables import MemoryTables
from eva.core.recall_index import PostingBuffer
from eva.core.recall_search import search
from eva.core.tables import Tables
from eva.core.terms import terms

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT.parent / "shared" / "data" / "komodo-talk-general.dce.json.gz"
STREAM = StreamId(1, 2)


def load_texts() -> list[str]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as file:
        export = json.load(file)
    return [message["content"] for message in export["messages"]]


def build(tables: Tables, texts: list[str]) -> float:
    """Index every text in one buffer and flush it; returns seconds taken."""
    started = time.perf_counter()
    buffer = PostingBuffer()
    for index, text in enumerate(texts):
        buffer.add(STREAM, index, text)
    buffer.flush(tables)
    return time.perf_counter() - started


def make_queries(texts: list[str], count: int) -> list[str]:
    """Queries of 1-3 words taken from random messages, seeded."""
    rng = random.Random(20240601)
    queries: list[str] = []
    while len(queries) < count:
        words = terms(rng.choice(texts))
        if not words:
            continue
        size = rng.choice((1, 1, 2, 2, 3))
        queries.append(" ".join(rng.sample(words, min(size, len(words)))))
    return queries


def time_queries(tables: Tables, queries: list[str]) -> dict[str, float]:
    latencies = []
    for query in queries:
        started = time.perf_counter()
        search(tables, STREAM, query, 20)
        latencies.append(time.perf_counter() - started)
    return _percentiles(latencies)


def time_appends(tables: Tables, texts: list[str], count: int = 300) -> dict[str, float]:
    """Live-style appends after the import: one message per buffer and flush."""
    latencies = []
    for offset, text in enumerate(texts[:count]):
        started = time.perf_counter()
        buffer = PostingBuffer()
        buffer.add(STREAM, len(texts) + offset, text)
        buffer.flush(tables)
        latencies.append(time.perf_counter() - started)
    # Take them out again so the queries see the sample as it is.
    buffer = PostingBuffer()
    for offset, text in enumerate(texts[:count]):
        buffer.remove(STREAM, len(texts) + offset, text)
    buffer.flush(tables)
    return _percentiles(latencies)


def _percentiles(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)

    def at(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3)

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": at(1.0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-lmdb", action="store_true", help="skip the LMDB run")
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    if not SAMPLE.exists():
        print(f"sample not found at {SAMPLE}; skipping")
        print(json.dumps({"skipped": True}))
        return 0
    texts = load_texts()
    messages = len(texts)
    report: dict[str, object] = {"messages": messages}

    started = time.perf_counter()
    for text in texts:
        terms(text)
    tokenize = time.perf_counter() - started
    report["tokenize_msgs_per_s"] = round(messages / tokenize)

    memory = MemoryTables()
    seconds = build(memory, texts)
    report["memory_index_msgs_per_s"] = round(messages / seconds)
    postings = memory.data["postings"]
    report["postings_keys"] = len(postings)
    report["postings_bytes"] = sum(len(k) + len(v) for k, v in postings.items())

    report["memory_append_one"] = time_appends(memory, texts)

    queries = make_queries(texts, args.queries)
    report["memory_query"] = time_queries(memory, queries)

    if not args.no_lmdb:
        from eva.store.lmdb_kv import open_backend

        with tempfile.TemporaryDirectory() as directory:
            backend = open_backend(directory)
            try:
                started = time.perf_counter()
                backend.write(lambda tables: build(tables, texts))
                report["lmdb_index_msgs_per_s"] = round(messages / (time.perf_counter() - started))
                with backend.reading() as tables:
                    report["lmdb_query"] = time_queries(tables, queries)
            finally:
                backend.close()

    for key, value in report.items():
        print(f"{key}: {value}")
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
