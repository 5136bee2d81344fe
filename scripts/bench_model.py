"""Benchmark the tree's model side on the shared sample: tasks, requests, tokens and dollars.

Plays the 45,707-message sample (read in place, never copied) through compression
and publishing on its own timeline, with the real anthropic SDK and the Claude
line writer talking to the fake Messages API on loopback, which counts tokens
with the newer tokenizer's estimate (eva.core.prices.BYTES_PER_TOKEN). Two
fakes answer the line requests:

- worst: every line fills the 512-byte limit, whatever the target asks;
- realistic: a model that keeps to the target size it is given but writes no
  more than the text holds: a merged line is about 45% of its two halves, a long
  message's leaf about 300 bytes, each within the task's target range.

The realistic fake runs once per line target share (ModelSettings.line_target_share),
since the target decides how often two lines glue into their parent with no call;
the default share is always among them, and its figure is the one reported as
`realistic_*`.
Dollars are at the price table's Claude Haiku 5.5 rates, list and through the
Message Batches API. The last line printed is one JSON object.

    python scripts/bench_model.py [--export PATH] [--shares 0.45,1.0]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

from eva.cli.cmd_import import import_bytes
from eva.core.costs import cost_of
from eva.core.events import LineWritten, MessagePosted, Usage
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings, ModelSettings
from eva.memory.build import Memory
from eva.model.client import make_client
from eva.model.line_writer import ClaudeLineWriter
from eva.store.key_binding import key_store_at, keyed_store
from eva.store.lmdb_kv import open_backend
from eva.testing.fake_anthropic import JSON, FakeMessagesAPI

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"
TASK = re.compile(
    r'<task address="(\d+\+\d+)" kind="(message|merge)"[^>]*?input="(\d+) bytes[^"]*"'
    r'[^>]*?target="(\d+) to (\d+) bytes"'
)
FILLER = "word " * 200
LIMIT = 512
MERGE_SHARE = 0.45
LEAF_BYTES = 300


def _request_text(body: JSON) -> str:
    messages = body.get("messages", [])
    text = messages[-1]["content"] if messages else ""
    if not isinstance(text, str):
        text = " ".join(block.get("text", "") for block in text)
    return str(text)


def _line(address: str, size: int) -> str:
    head = f"Someone: line for {address} "
    return f'<line address="{address}">{(head + FILLER)[:size].rstrip()}</line>'


def worst_lines(body: JSON) -> str:
    """Every task answered with a line of exactly the limit."""
    return "\n".join(_line(m[0], LIMIT) for m in TASK.findall(_request_text(body)))


def realistic_lines(body: JSON) -> str:
    """Every task answered within its target, with no more than its text holds."""
    answers = []
    for address, kind, given, low, high in TASK.findall(_request_text(body)):
        wanted = int(int(given) * MERGE_SHARE) if kind == "merge" else LEAF_BYTES
        answers.append(_line(address, max(int(low), min(int(high), wanted))))
    return "\n".join(answers)


def build(raw: bytes, export: Path, answer: Any, share: float) -> dict[str, Any]:
    """Play the sample through the line writer against a fake answering with `answer`."""
    fake = FakeMessagesAPI(answer=answer)
    with (
        tempfile.TemporaryDirectory(prefix="eva-bench-model-") as tmp,
        tempfile.TemporaryDirectory() as keys,
        fake.serve(),
        key_store_at(Path(keys) / "keys"),  # never the operator's key store
    ):
        data = Path(tmp)
        report = import_bytes(data, raw, export)
        source = StreamId(int(report.guild_id), int(report.channel_id))
        store = keyed_store(open_backend(data), write=True)
        posts = [e for _, e in store.events(source) if isinstance(e, MessagePosted)]
        played = StreamId(source.guild_id, source.channel_id + 1)
        settings = ModelSettings(
            base_url=fake.url, batch_poll_seconds=0.0, use_batches=False,
            line_target_share=share,
        )
        writer = ClaudeLineWriter(make_client(settings, fake.key), settings)
        started = time.perf_counter()
        built = trio.run(Memory(store, played, writer, MemorySettings()).play, posts)
        seconds = time.perf_counter() - started
        lines = [e for _, e in store.events(played) if isinstance(e, LineWritten)]
        requests = len(fake.message_requests())
    model = [line for line in lines if line.how == "model"]
    usage = Usage(
        input_tokens=sum(line.usage.input_tokens for line in model if line.usage),
        output_tokens=sum(line.usage.output_tokens for line in model if line.usage),
        cache_write_tokens=sum(line.usage.cache_write_tokens for line in model if line.usage),
        cache_read_tokens=sum(line.usage.cache_read_tokens for line in model if line.usage),
    )
    price = settings.prices[settings.line_model]
    merged = [len(line.text.encode()) for line in model if line.size > 1]
    # Each line's usage is its share of one request of a few tasks, far under any price
    # tier; priced line by line (their sum priced as one request would pass the tier).
    list_usd = sum(cost_of(line.usage, price) for line in model if line.usage)
    batch_usd = sum(cost_of(line.usage, price, batch=True) for line in model if line.usage)
    return {
        "share": share,
        "messages": len(posts),
        "requests": requests,
        "tasks": len(model),
        "glued": sum(line.how == "glue" for line in lines),
        "requests_per_message": round(requests / len(posts), 4),
        "tasks_per_message": round(len(model) / len(posts), 4),
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "mean_merged_line_bytes": round(sum(merged) / max(len(merged), 1)),
        "list_usd": round(list_usd, 3),
        "batch_usd": round(batch_usd, 3),
        "publishes": built.publishes,
        "build_s": round(seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, default=SAMPLE)
    default_share = ModelSettings().line_target_share
    parser.add_argument("--shares", default=f"{default_share},1.0",
                        help="line target shares to try with the realistic fake, besides the "
                        f"default ({default_share}), which is always tried")
    args = parser.parse_args()
    if not args.export.exists():
        print(f"no sample at {args.export}; nothing to measure", file=sys.stderr)
        return 0
    try:
        asked = [float(share) for share in args.shares.split(",") if share.strip()]
    except ValueError:
        parser.error(f"--shares takes numbers such as 0.45,1.0, not {args.shares!r}")
    if not all(0 < share <= 1 for share in asked):
        parser.error("--shares: each share must be above 0 and at most 1")
    shares = list(dict.fromkeys([default_share, *asked]))
    data = args.export.read_bytes()
    raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    worst = build(raw, args.export, worst_lines, default_share)
    print("worst", json.dumps(worst), file=sys.stderr)
    realistic = []
    for share in shares:
        realistic.append(build(raw, args.export, realistic_lines, share))
        print("realistic", json.dumps(realistic[-1]), file=sys.stderr)
    chosen = realistic[0]  # the default share's
    price = msgspec.to_builtins(ModelSettings().prices[ModelSettings().line_model])
    result = {
        "messages": worst["messages"],
        "line_model": ModelSettings().line_model,
        "price_per_mtok": price,
        "tokens_are": "UTF-8 bytes / eva.core.prices.BYTES_PER_TOKEN, counted by the fake",
        "list_cost_usd": worst["list_usd"],
        "batch_cost_usd": worst["batch_usd"],
        "requests_per_message": worst["requests_per_message"],
        "worst_tasks_per_message": worst["tasks_per_message"],
        "line_target_share": default_share,
        "realistic_list_usd": chosen["list_usd"],
        "realistic_batch_usd": chosen["batch_usd"],
        "realistic_tasks_per_message": chosen["tasks_per_message"],
        "realistic_by_share": realistic,
        "worst": worst,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
