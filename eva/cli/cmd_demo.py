# `eva demo`: Eva's main job offline, end to end, on a generated chat or a real export.
#
# Import, build with the offline summarizer, then show the memory block, a
# zoom from a row line down to one message, and a recall. Every step is a
# command of its own too; the demo prints them so a person can go on by hand.
from __future__ import annotations

import argparse
import time
from pathlib import Path

import trio

from eva.cli.cmd_build import build_channel
from eva.cli.cmd_import import import_bytes, read_export
from eva.cli.common import UserError, add_settings_option, load_settings, open_store
from eva.core.address import Address, format_address, halves
from eva.core.keys import StreamId
from eva.core.recall import render_view
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.core.terms import terms
from eva.demo.friends import DEMO_QUERY, friends_export
from eva.memory.view import memory_text, recall, zoom
from eva.store.event_store import EventStore

SHOWN_ROW_LINES = 12
SHOWN_TAIL_LINES = 8


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="build Eva's memory of a chat offline and show what she reads",
        description=(
            "Import a chat (by default one the project generates: six friends over a "
            "year), build its memory with the offline summarizer, and show the memory "
            "block, a zoom down to one message and a recall."
        ),
    )
    parser.add_argument("export", nargs="?", type=Path, help="a DiscordChatExporter JSON export")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path("eva-demo-data"),
        help="data directory for the demo (default ./eva-demo-data)",
    )
    parser.add_argument("--messages", type=int, default=4000, help="size of the generated chat")
    parser.add_argument("--query", help="what to recall (default: a question the chat answers)")
    parser.add_argument("--full", action="store_true", help="print the whole memory block")
    add_settings_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    if args.export is None:
        if not 1 <= args.messages <= 200_000:
            raise UserError(f"--messages must be between 1 and 200000, not {args.messages}")
        raw = friends_export(args.messages)
        source = Path(f"generated chat of {args.messages} messages")
        query = args.query or DEMO_QUERY
    else:
        raw = read_export(args.export)
        source = args.export
        query = args.query
    started = time.perf_counter()
    report = import_bytes(args.data, raw, source, quiet=True)
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    print(f"Eva demo: #{report.channel_name} in {report.guild_name}, from {source}")
    print(f"data directory: {args.data}")
    print(
        f"\n1. import: {report.added} messages stored ({report.already_present} already there), "
        f"{report.messages} in the channel, by {report.authors} people"
    )
    store = open_store(args.data, write=True)
    now_ms = int(time.time() * 1000)
    summarizer = OfflineSummarizer(settings.line_limit)
    build = trio.run(build_channel, store, stream, summarizer, settings, now_ms)
    stats = build.stats
    meta = store.meta(stream)
    assert meta is not None
    print(
        f"2. build: {stats.leaves_verbatim} leaves word for word, {stats.leaves_model} "
        f"compressed; {stats.merges_glue} merges glued, {stats.merges_model} summarized; "
        f"row of {meta.row_bytes} bytes over {meta.row_frontier} messages, tail of "
        f"{meta.messages - meta.row_frontier} messages ({time.perf_counter() - started:.1f} s)"
    )
    print("\n3. the memory block Eva reads:\n")
    print(_abridged(memory_text(store, stream, settings), args.full))
    query = query or _pick_query(store, stream)
    found = recall(store, stream, query, settings)
    target = _first_hit(found.windows, meta.row_frontier)
    channel = report.channel_name or str(stream)
    print(f"\n4. zoom from the row down to message {target}:\n")
    _zoom_down(store, stream, settings, target, f"eva zoom {channel} {{}} --data {args.data}")
    print(f'\n5. recall "{query}":\n')
    print(render_view(found, 8000))
    data = args.data
    print(
        "\nGo on by hand:\n"
        f"  eva memory {channel} --data {data}\n"
        f"  eva zoom {channel} 0+1 --data {data}\n"
        f"  eva recall {channel} WORDS... --data {data}\n"
        f"  eva tree {channel} --svg tree.svg --data {data}\n"
        f"  eva audit {channel} --data {data}"
    )
    return 0


def _abridged(block: str, full: bool) -> str:
    lines = block.split("\n")
    if full:
        return block
    end = lines.index("</memory>")
    row, tail = lines[1:end], lines[end + 1 :]
    shown = ["<memory>", *row[:SHOWN_ROW_LINES]]
    if len(row) > SHOWN_ROW_LINES + 3:
        shown.append(f"  ... {len(row) - SHOWN_ROW_LINES - 3} more row lines ...")
        shown.extend(row[-3:])
    else:
        shown.extend(row[SHOWN_ROW_LINES:])
    shown.append("</memory>")
    if len(tail) > SHOWN_TAIL_LINES:
        shown.append(f"  ... {len(tail) - SHOWN_TAIL_LINES} earlier tail lines ...")
    shown.extend(tail[-SHOWN_TAIL_LINES:])
    shown.append("(abridged; --full or `eva memory` prints it whole)")
    return "\n".join(shown)


def _first_hit(windows: object, frontier: int) -> int:
    """The best recall hit the row covers, else the row's first message."""
    for window in windows:  # type: ignore[attr-defined]
        for message in window:
            if message.hit and message.index < frontier:
                return int(message.index)
    return 0


def _zoom_down(
    store: EventStore, stream: StreamId, settings: MemorySettings, target: int, command: str
) -> None:
    """Zoom from the row line over `target` down to it, each step shown as the `command`
    (with `{}` for the address) a person can paste to do it again."""
    row = store.published_row(stream)
    if row is None:
        print("(no row yet: the chat is short enough to be all tail)")
        return
    start, size = next((s, z) for s, z in row.entries if s <= target < s + z)
    address = Address(start, size)
    while True:
        print(f"$ {command.format(format_address(address))}")
        print(zoom(store, stream, format_address(address), settings).text)
        if address.size == 1:
            return
        left, right = halves(address)
        address = left if target < right.start else right


def _pick_query(store: EventStore, stream: StreamId) -> str:
    """A word from the middle of the chat that recall can find."""
    meta = store.meta(stream)
    assert meta is not None
    for index in range(meta.messages // 2, meta.messages):
        message = store.message(stream, index)
        if message is None or message.deleted:
            continue
        words = [w for w in terms(message.content) if len(w) >= 6 and w.isalpha()]
        if words:
            return max(words, key=len)
    return "hello"
