# `eva build`: run compression and publishing to completion, as if the chat had gone quiet.
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Awaitable, Callable, Sequence

import trio

from eva.cli.cmd_forget import finish_left_forgets, finish_left_purges
from eva.cli.common import (
    Progress,
    UserError,
    add_channel_argument,
    add_data_option,
    add_json_option,
    add_settings_option,
    find_stream,
    load_settings,
    open_store,
    print_json,
)
from eva.cli.forget_guild import finish_owed_erasures
from eva.core.events import AnyEvent, LineWritten
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer, Summarizer
from eva.memory.build import BuildReport, Memory
from eva.store.event_store import EventStore


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "build",
        help="compress and publish a channel's memory as if the chat had gone quiet",
        description=(
            "Write leaves for every message except about the newest 12 KiB, every merge "
            "that becomes ready, and publish the new row. Uses the built-in offline "
            "summarizer (no network) unless --model is given."
        ),
    )
    add_channel_argument(parser, optional=True)
    parser.add_argument(
        "--model",
        action="store_true",
        help="write lines with Claude (needs ANTHROPIC_API_KEY; the [models] table sets which)",
    )
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(
        run=run,
        interrupted="the lines made and rows published so far are kept; run it again to "
        "finish",
    )


def line_summarizer(
    args: argparse.Namespace, settings: MemorySettings, store: EventStore
) -> tuple[Summarizer, Callable[[], Awaitable[None]]]:
    """The offline summarizer, or with --model the Claude line writer; and how to close it."""
    if not args.model:
        return OfflineSummarizer(settings.line_limit), _nothing
    key = os.environ.get("ANTHROPIC_API_KEY", "")
    if not key:
        raise UserError("--model needs ANTHROPIC_API_KEY set to an Anthropic API key")
    from eva.cli.cmd_cost import load_model_settings
    from eva.model.batch_book import BatchBook
    from eva.model.client import make_client
    from eva.model.line_writer import ClaudeLineWriter

    models = load_model_settings(args.settings)
    client = make_client(models, key)
    book = BatchBook(store.backend)
    return ClaudeLineWriter(client, models, settings.line_limit, book=book), client.close


async def _nothing() -> None:
    pass


async def build_channel(
    store: EventStore,
    stream: StreamId,
    summarizer: Summarizer,
    settings: MemorySettings,
    now_ms: int,
) -> BuildReport:
    """Build one channel's memory to completion."""
    return await Memory(store, stream, summarizer, settings).build(now_ms)


PROGRESS_FROM_LINES = 2000
"""A channel with at least this many lines to write shows a progress bar while it builds."""


async def build_shown(
    store: EventStore,
    stream: StreamId,
    summarizer: Summarizer,
    settings: MemorySettings,
    now_ms: int,
    *,
    quiet: bool = False,
) -> BuildReport:
    """`build_channel`, with a progress bar on standard error for a long one: the lines
    written so far against about two for each message without a leaf (its leaf, and a
    merge above it)."""
    memory = Memory(store, stream, summarizer, settings)
    meta = store.meta(stream)
    total = 0 if meta is None else 2 * (meta.messages - meta.leaf_frontier) + meta.ready
    progress = Progress(f"build {stream}", total, quiet=quiet or total < PROGRESS_FROM_LINES)

    def count(events: Sequence[AnyEvent]) -> None:
        lines = sum(isinstance(event, LineWritten) for event in events)
        progress.advance(min(lines, total - progress.done))

    memory.on_appended = count
    report = await memory.build(now_ms)
    progress.advance(total - progress.done)
    progress.close()
    return report


def report_json(
    stream: StreamId, report: BuildReport, seconds: float, store: EventStore | None = None
) -> dict[str, object]:
    stats = report.stats
    row = report.last_row
    if row is None and store is not None:  # nothing new: the row as it stands
        row = store.published_row(stream)
    return {
        "channel": str(stream),
        "leaves_verbatim": stats.leaves_verbatim,
        "leaves_model": stats.leaves_model,
        "merges_glue": stats.merges_glue,
        "merges_model": stats.merges_model,
        "model_requests": stats.model_requests,
        "pending": stats.pending,
        "publishes": report.publishes,
        "row_lines": len(row.entries) if row else 0,
        "row_bytes": row.row_bytes if row else 0,
        "frontier": row.frontier if row else 0,
        "seconds": round(seconds, 3),
    }


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    store = open_store(args.data, write=True)
    finish_left_forgets(store, args.data, settings)
    finish_left_purges(store, args.data)
    finish_owed_erasures(store, args.data)
    if args.channel:
        streams = [find_stream(store, args.channel)]
    else:
        streams = [StreamId(m.guild_id, m.channel_id) for m in store.streams()]
    summarizer, close = line_summarizer(args, settings, store)

    async def build_all() -> list[dict[str, object]]:
        results = []
        try:
            for stream in streams:
                started = time.perf_counter()
                now_ms = int(time.time() * 1000)
                report = await build_shown(store, stream, summarizer, settings, now_ms,
                                           quiet=args.json)
                seconds = time.perf_counter() - started
                results.append(report_json(stream, report, seconds, store))
        finally:
            await close()
        return results

    results = trio.run(build_all)
    finish_left_purges(store, args.data)  # those whose lines this build made again
    if args.json:
        print_json({"channels": results})
        return 0
    for result in results:
        if not result["publishes"]:
            print(f"{result['channel']}: nothing new to build; " + (
                f"its row stays {result['row_lines']} lines ({result['row_bytes']} bytes) over "
                f"{result['frontier']} messages" if result["row_lines"] else
                "no row yet: its messages all fit in the tail, kept word for word"
            ))
            continue
        print(
            f"{result['channel']}: {result['leaves_verbatim']} verbatim and "
            f"{result['leaves_model']} compressed leaves, {result['merges_glue']} glued and "
            f"{result['merges_model']} summarized merges; row of {result['row_lines']} lines "
            f"({result['row_bytes']} bytes) over {result['frontier']} messages "
            f"in {result['seconds']} s"
        )
        if result["pending"]:
            print(f"  {result['pending']} lines could not be made and wait for the next run")
    return 0
