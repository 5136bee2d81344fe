"""Benchmark the model side on the shared sample: requests, tokens and cost of compression.

Plays the 45,707-message sample (read in place, never copied) through
compression and publishing on its own timeline, with the real anthropic SDK
and the Claude line writer talking to the fake Messages API on loopback, which
answers every task with a line that fills the 512-byte limit. The fake counts
tokens as UTF-8 bytes / 4. Then runs `eva simulate-cache` on the same sample
with a question to Eva every few minutes. The last line printed is one JSON object.

    python scripts/bench_model.py [--export PATH] [--every-minutes M]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from eva.cli.cmd_import import import_bytes
from eva.core.costs import cost_of
from eva.core.events import LineWritten, MessagePosted, Usage
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings, ModelSettings
from eva.memory.build import Memory
from eva.model.client import make_client
from eva.model.line_writer import ClaudeLineWriter
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.testing.fake_anthropic import FakeMessagesAPI

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"
TASK = re.compile(r'<task address="(\d+\+\d+)"')
FILLER = "word " * 200


def full_lines(body: dict[str, Any]) -> str:
    """Answer every task of a line request with a line of exactly 512 bytes."""
    messages = body.get("messages", [])
    text = messages[-1]["content"] if messages else ""
    if not isinstance(text, str):
        text = " ".join(block.get("text", "") for block in text)
    answers = []
    for address in TASK.findall(text) or TASK.findall(json.dumps(messages)):
        head = f"Someone: line for {address} "
        answers.append(f'<line address="{address}">{(head + FILLER)[:512].rstrip()}</line>')
    return "\n".join(answers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, default=SAMPLE)
    parser.add_argument("--every-minutes", type=float, default=3.0)
    args = parser.parse_args()
    if not args.export.exists():
        print(f"no sample at {args.export}; nothing to measure", file=sys.stderr)
        return 0
    raw = gzip.decompress(args.export.read_bytes())
    memory_settings = MemorySettings()
    fake = FakeMessagesAPI(answer=full_lines)
    with tempfile.TemporaryDirectory(prefix="eva-bench-model-") as tmp, fake.serve():
        data = Path(tmp)
        report = import_bytes(data, raw, args.export)
        source = StreamId(int(report.guild_id), int(report.channel_id))
        store = EventStore(open_backend(data))
        posts = [e for _, e in store.events(source) if isinstance(e, MessagePosted)]
        played = StreamId(source.guild_id, source.channel_id + 1)
        settings = ModelSettings(base_url=fake.url, batch_poll_seconds=0.0, use_batches=False)
        writer = ClaudeLineWriter(make_client(settings, fake.key), settings)
        started = time.perf_counter()
        built = trio.run(Memory(store, played, writer, memory_settings).play, posts)
        build_s = time.perf_counter() - started
        lines = [
            e for _, e in store.events(played) if isinstance(e, LineWritten) and e.how == "model"
        ]
    usage = Usage(
        input_tokens=sum(line.usage.input_tokens for line in lines if line.usage),
        output_tokens=sum(line.usage.output_tokens for line in lines if line.usage),
        cache_write_tokens=sum(line.usage.cache_write_tokens for line in lines if line.usage),
        cache_read_tokens=sum(line.usage.cache_read_tokens for line in lines if line.usage),
    )
    price = settings.prices[settings.line_model]
    requests = len(fake.message_requests())
    simulated = subprocess.run(
        [
            sys.executable,
            "-m",
            "eva.cli.main",
            "simulate-cache",
            str(args.export),
            "--every-minutes",
            str(args.every_minutes),
            "--policy",
            "quiet",
            "--ttl",
            "5m",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    simulation = json.loads(simulated.stdout.strip().splitlines()[-1])
    quiet = next(r for r in simulation["results"] if r["policy"] == "quiet")
    result = {
        "messages": len(posts),
        "requests": requests,
        "tasks": len(lines),
        "requests_per_message": round(requests / len(posts), 4),
        "tasks_per_request": round(len(lines) / max(requests, 1), 2),
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "line_model": settings.line_model,
        "price_per_mtok_in_out": [price.input, price.output],
        "list_cost_usd": round(cost_of(usage, price), 2),
        "batch_cost_usd": round(cost_of(usage, price, batch=True), 2),
        "reply_cache_read_share": quiet["reply_cache_read_share"],
        "reply_every_minutes": args.every_minutes,
        "reply_cost_usd": quiet["usd_per_reply"],
        "publishes": built.publishes,
        "build_s": round(build_s, 1),
        "tokens_are": "UTF-8 bytes / 4, counted by the fake",
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
