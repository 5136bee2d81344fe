# `eva simulate-cache`: how much of Eva's reply prompts the prompt cache would serve.
#
# Shell around eva.core.cache_model. It plays an export through the memory in
# a temporary data directory with the offline summarizer (nothing is sent
# anywhere, the data directory of --data is never touched) and replays Eva's
# reply prompts against a model of the prompt cache.
# Invariants: tokens are estimated as UTF-8 bytes / 4, rounded up per block,
# and the output says so.
# Assumptions: one request per reply (no tool rounds), sent at the message's
# time; a fixed REPLY_OUTPUT_TOKENS of output; the tail cap
# (prompt_tail_max_bytes) is not applied; "eager" is the same play with a
# quiet time of zero, so a publish follows every compression run.
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo
from pathlib import Path
from typing import Any, Literal, TypeAlias

import msgspec
import trio

from eva.cli.cmd_cost import load_model_settings
from eva.cli.cmd_import import read_export
from eva.cli.common import (
    UserError,
    add_json_option,
    add_settings_option,
    load_settings,
    print_json,
)
from eva.core.address import Address
from eva.core.block import ShownMessage, message_line
from eva.core.cache_model import TTL_SECONDS, Block, CacheSimulator, RequestUsage, block_key
from eva.core.costs import CACHE_TTLS, cost_of
from eva.core.dce import ExportError, export_events, parse_export
from eva.core.events import (
    AnyEvent,
    LineWritten,
    MessagePosted,
    RowPublished,
    Usage,
)
from eva.core.keys import StreamId
from eva.core.render import render_line
from eva.core.settings import MemorySettings, Price
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.memory.view import channel_zone
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

Policy: TypeAlias = Literal["quiet", "eager"]
POLICIES: tuple[Policy, ...] = ("quiet", "eager")

MENTION = re.compile(r"\beva\b", re.IGNORECASE)
"""A message talks to Eva when it holds "eva" as a word, in any case; "@Eva" included.

An export of a channel Eva was never in holds no `<@id>` mention of her, so
the word is the whole definition."""

BYTES_PER_TOKEN = 4
TICK_QUESTION = "New message. Answer it as Eva.\nSomeone: hey Eva, what do you make of this?"
"""The question that comes on the --every-minutes clock (made unique by its time)."""
REPLY_OUTPUT_TOKENS = 150
"""Output tokens assumed per reply: a few chat sentences (replies are short by prompt)."""
TOOL_USE_OVERHEAD_TOKENS = 346
"""Tokens the Messages API adds to the system prompt when tools are offered (auto choice)."""
FALLBACK_PREFIX_TOKENS = 2500
"""Tools + system prompt when eva.model.prompts cannot be read: about its size in 2025."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = subparsers.add_parser(
        "simulate-cache",
        help="replay an export and estimate how much of Eva's reply prompts the cache serves",
        description=(
            "Play a DiscordChatExporter export through the memory (offline summarizer, "
            "temporary data directory, nothing sent anywhere), put reply turns where "
            "people mention Eva (and every N messages or M minutes if asked), and feed "
            "each reply prompt to a model of Anthropic's prompt cache. Compares swapping "
            "the row only at publishes (quiet) with swapping as soon as lines are written "
            "(eager), for 5-minute and 1-hour cache entries. Tokens are UTF-8 bytes / 4."
        ),
    )
    simulate.add_argument("export", type=Path, metavar="EXPORT", help="the export file")
    simulate.add_argument("--every", type=int, default=None, metavar="N",
                          help="also a reply turn at every N-th message")
    simulate.add_argument("--every-minutes", type=float, default=None, metavar="M",
                          help="also a question to Eva every M minutes of chat time, from "
                          "the first message to the last (not posted into the chat)")
    simulate.add_argument("--ttl", choices=["5m", "1h", "both"], default="both")
    simulate.add_argument("--policy", choices=["quiet", "eager", "both"], default="both")
    add_settings_option(simulate)
    add_json_option(simulate)
    simulate.set_defaults(run=run_simulate)


def reply_turns(posts: Sequence[MessagePosted], every: int | None) -> set[int]:
    """The indexes of the messages Eva answers: those that mention her, and every N-th."""
    return {
        post.index
        for post in posts
        if MENTION.search(post.content) or (every is not None and (post.index + 1) % every == 0)
    }


def play_export(
    events: Sequence[AnyEvent], stream: StreamId, settings: MemorySettings
) -> list[AnyEvent]:
    """The channel's whole log after playing `events` on their own clock, offline."""
    posts = [e for e in events if isinstance(e, MessagePosted)]
    others = [e for e in events if not isinstance(e, MessagePosted)]
    with tempfile.TemporaryDirectory(prefix="eva-simulate-") as directory:
        backend = open_backend(Path(directory))
        try:
            store = EventStore(backend)
            if others:
                store.append(stream, others)
            memory = Memory(store, stream, OfflineSummarizer(settings.line_limit), settings)
            trio.run(memory.play, posts)
            return [event for _, event in store.events(stream)]
        finally:
            backend.close()


def policy_settings(settings: MemorySettings, policy: Policy) -> MemorySettings:
    """The memory settings a policy plays with.

    Eager swaps as soon as lines are ready: with a quiet time of zero, the
    played timeline publishes right after every compression run, so every
    reply turn after a run sees the new row.
    """
    return settings if policy == "quiet" else msgspec.structs.replace(settings, quiet_ms=0)


@dataclass(frozen=True, slots=True)
class PromptShape:
    """The fixed parts of a reply prompt, in tokens."""

    prefix_tokens: int
    prefix_source: str


def tokens_of(text: str) -> int:
    """The estimated tokens of a text: UTF-8 bytes / 4, rounded up."""
    return math.ceil(len(text.encode()) / BYTES_PER_TOKEN)


def prompt_shape() -> PromptShape:
    """Tools + system prompt as Eva sends them, measured from eva.model.prompts if present."""
    try:
        from eva.model.prompts import SYSTEM_PROMPT, TOOLS
    except ImportError:
        return PromptShape(FALLBACK_PREFIX_TOKENS, "assumed constant")
    tools = json.dumps(list(TOOLS), ensure_ascii=False)
    measured = tokens_of(SYSTEM_PROMPT) + tokens_of(tools) + TOOL_USE_OVERHEAD_TOKENS
    return PromptShape(measured, "eva.model.prompts (SYSTEM_PROMPT + TOOLS + tool-use overhead)")


def reply_prompts(
    log: Iterable[AnyEvent],
    message_lines: Sequence[str],
    turns: set[int],
    shape: PromptShape,
    tz: tzinfo,
    every_minutes: float | None = None,
) -> Iterator[tuple[float, list[Block]]]:
    """(time in seconds, blocks) of each reply turn's prompt, in the order of the log.

    The prompt is: tools + system (marked), the row inside <memory> tags
    (marked), the tail as one block per stretch of messages between reply
    turns (the newest marked), then the new message (unmarked). The row is
    the one published before the message arrived; it is rendered once per
    publish and the tail's blocks are kept from turn to turn, so a turn costs
    only its new stretch. With `every_minutes`, a question to Eva also comes
    at every tick of that clock from the first message to the last; those
    questions are not posted into the chat (the memory keeps the export's
    own timing).
    """
    prefix = Block(shape.prefix_tokens, "tools+system", mark=True)
    rendered: dict[tuple[int, int], str] = {}
    row = _row_block([])
    chunks: list[Block] = []
    open_from = 0
    posted = 0
    tick_ms = 0 if every_minutes is None else max(1, round(every_minutes * 60_000))
    next_tick: int | None = None

    def prompt(upto: int, new_text: str) -> list[Block]:
        nonlocal open_from
        if open_from < upto:
            text = "".join(line + "\n" for line in message_lines[open_from:upto])
            chunks.append(Block(tokens_of(text), block_key(text)))
            open_from = upto
        tail = [*chunks[:-1], replace(chunks[-1], mark=True)] if chunks else []
        new = Block(tokens_of(new_text), block_key(new_text))
        return [prefix, row, *tail, new]

    for event in log:
        if isinstance(event, MessagePosted | RowPublished) and next_tick is not None:
            while next_tick < event.at_ms:
                question = f"{TICK_QUESTION} ({next_tick})"
                yield next_tick / 1000, prompt(posted, question)
                next_tick += tick_ms
        if isinstance(event, LineWritten):
            address = Address(event.start, event.size)
            rendered[(event.start, event.size)] = render_line(
                address, event.text, event.first_ms, event.last_ms, tz
            )
        elif isinstance(event, RowPublished):
            row = _row_block([rendered[entry] for entry in event.entries])
            chunks, open_from = [], event.frontier
        elif isinstance(event, MessagePosted):
            if next_tick is None and tick_ms:
                next_tick = event.at_ms + tick_ms
            if event.index in turns:
                new_text = f"New message. Answer it as Eva.\n{message_lines[event.index]}"
                yield event.at_ms / 1000, prompt(event.index, new_text)
            posted = event.index + 1


def _row_block(lines: Sequence[str]) -> Block:
    text = "<memory>\n" + "".join(line + "\n" for line in lines) + "</memory>\n"
    return Block(tokens_of(text), block_key(text), mark=True)


# -- eva simulate-cache: the results -----------------------------------------------


@dataclass(slots=True)
class SimulationResult:
    """What one (policy, ttl) pair read, wrote and cost over every reply turn."""

    policy: Policy
    ttl: str
    publishes: int = 0
    reply_turns: int = 0
    read: int = 0
    write: int = 0
    uncached: int = 0
    usd_total: float | None = 0.0

    def add(self, usage: RequestUsage, price: Price | None) -> None:
        self.reply_turns += 1
        self.read += usage.read
        self.write += usage.write
        self.uncached += usage.uncached
        if price is None:
            self.usd_total = None
        elif self.usd_total is not None:
            self.usd_total += cost_of(
                Usage(
                    input_tokens=usage.uncached,
                    output_tokens=REPLY_OUTPUT_TOKENS,
                    cache_write_tokens=usage.write,
                    cache_read_tokens=usage.read,
                ),
                price,
                cache_ttl=self.ttl,
            )

    @property
    def prompt_tokens(self) -> int:
        return self.read + self.write + self.uncached

    def to_json(self) -> dict[str, Any]:
        per_reply = (
            None if self.usd_total is None or not self.reply_turns
            else round(self.usd_total / self.reply_turns, 6)
        )
        return {
            "policy": self.policy,
            "ttl": self.ttl,
            "publishes": self.publishes,
            "reply_turns": self.reply_turns,
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_per_reply": round(self.prompt_tokens / max(self.reply_turns, 1)),
            "cache_read_tokens": self.read,
            "cache_write_tokens": self.write,
            "uncached_tokens": self.uncached,
            "reply_cache_read_share": round(self.read / max(self.prompt_tokens, 1), 5),
            "usd_per_reply": per_reply,
            "usd_total": None if self.usd_total is None else round(self.usd_total, 4),
        }


def simulate(
    events: Sequence[AnyEvent],
    stream: StreamId,
    settings: MemorySettings,
    turns: set[int],
    policies: Sequence[Policy],
    ttls: Sequence[str],
    price: Price | None,
    shape: PromptShape,
    every_minutes: float | None = None,
) -> list[SimulationResult]:
    """Play the export once per policy and replay its reply prompts once per ttl."""
    posts = [e for e in events if isinstance(e, MessagePosted)]
    tz = channel_zone(None, settings)
    message_lines = [message_line(_shown(post), tz) for post in posts]
    results = []
    for policy in policies:
        log = play_export(events, stream, policy_settings(settings, policy))
        publishes = sum(isinstance(e, RowPublished) for e in log)
        policy_results = [SimulationResult(policy, ttl, publishes=publishes) for ttl in ttls]
        caches = [CacheSimulator(TTL_SECONDS[ttl]) for ttl in ttls]
        for now_s, blocks in reply_prompts(
            log, message_lines, turns, shape, tz, every_minutes
        ):
            for cache, result in zip(caches, policy_results, strict=True):
                result.add(cache.request(blocks, now_s), price)
        results.extend(policy_results)
    return results


def _shown(post: MessagePosted) -> ShownMessage:
    return ShownMessage(
        index=post.index,
        at_ms=post.at_ms,
        author_name=post.author_name,
        content=post.content,
        attachments=post.attachments,
        edited=post.edited_at_ms is not None,
    )


def run_simulate(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.every is not None and args.every < 1:
        raise UserError("--every must be at least 1")
    if args.every_minutes is not None and args.every_minutes <= 0:
        raise UserError("--every-minutes must be positive")
    settings = load_settings(args.settings)
    models = load_model_settings(args.settings)
    raw = read_export(args.export)
    try:
        export = parse_export(raw)
    except ExportError as error:
        raise UserError(f"cannot read {args.export}: {error}") from None
    del raw
    events = export_events(export, None, lambda _: None)
    posts = [e for e in events if isinstance(e, MessagePosted)]
    turns = reply_turns(posts, args.every)
    policies: list[Policy] = list(POLICIES) if args.policy == "both" else [args.policy]
    ttls = list(CACHE_TTLS) if args.ttl == "both" else [args.ttl]
    price = models.prices.get(models.reply_model)
    shape = prompt_shape()
    results = simulate(
        events, export.stream, settings, turns, policies, ttls, price, shape, args.every_minutes
    )
    summary = {
        "export": str(args.export),
        "messages": len(posts),
        "mention_turns": sum(bool(MENTION.search(p.content)) for p in posts),
        "every": args.every,
        "every_minutes": args.every_minutes,
        "tokens": f"estimated as UTF-8 bytes / {BYTES_PER_TOKEN}, rounded up per block",
        "prefix_tokens": shape.prefix_tokens,
        "prefix_source": shape.prefix_source,
        "reply_model": models.reply_model,
        "reply_model_priced": price is not None,
        "output_tokens_per_reply": REPLY_OUTPUT_TOKENS,
        "results": [result.to_json() for result in results],
        "seconds": round(time.perf_counter() - started, 2),
    }
    if args.json:
        print_json(summary, sys.stdout)
        return 0
    print(describe_simulation(summary))
    return 0


def describe_simulation(summary: dict[str, Any]) -> str:
    """The simulation's summary as a table."""
    out = [
        f"{summary['export']}: {summary['messages']:,} messages, "
        f"{summary['results'][0]['reply_turns'] if summary['results'] else 0:,} reply turns "
        f"({summary['mention_turns']:,} mention Eva)",
        f"tokens {summary['tokens']}; tools + system {summary['prefix_tokens']:,} tokens "
        f"({summary['prefix_source']}); {summary['output_tokens_per_reply']} output tokens "
        f"per reply at {summary['reply_model']} list prices",
        f"{'policy':<7}{'ttl':<4}{'publishes':>10}{'tokens/reply':>14}{'read share':>12}"
        f"{'$/reply':>10}{'$ total':>11}",
    ]
    for r in summary["results"]:
        per = "unpriced" if r["usd_per_reply"] is None else f"{r['usd_per_reply']:.4f}"
        total = "unpriced" if r["usd_total"] is None else f"{r['usd_total']:,.2f}"
        out.append(
            f"{r['policy']:<7}{r['ttl']:<4}{r['publishes']:>10,}{r['prompt_tokens_per_reply']:>14,}"
            f"{r['reply_cache_read_share']:>12.2%}{per:>10}{total:>11}"
        )
    out.append(f"({summary['seconds']} s; played offline in a temporary directory)")
    return "\n".join(out)
