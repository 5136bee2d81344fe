# `eva memory`, `eva zoom` and `eva recall`: what Eva reads, and her two tools.
from __future__ import annotations

import argparse

import msgspec

from eva.cli.common import (
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
from eva.core.block import ShownMessage
from eva.core.recall import render_view
from eva.core.render import visible
from eva.memory.view import (
    RECALL_CAP_BYTES,
    RowText,
    ZoomError,
    channel_zone,
    memory_text,
    recall,
    row_lines,
    tail_messages,
    zoom,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = subparsers.add_parser(
        "memory",
        help="print a channel's memory block: the row in <memory> tags, then the tail",
        description="Print the memory block exactly as Eva's prompt uses it.",
    )
    add_channel_argument(memory)
    add_data_option(memory)
    add_settings_option(memory)
    add_json_option(memory)
    memory.set_defaults(run=run_memory)

    zoom_parser = subparsers.add_parser(
        "zoom",
        help="open a line into its two halves, or show one whole message",
        description=(
            "Show the two lines under the line at START+SIZE, rendered like the row; "
            "with size 1, the whole message with its author and time."
        ),
    )
    add_channel_argument(zoom_parser)
    zoom_parser.add_argument("address", help="a line address START+SIZE, e.g. 1024+256 or 17+1")
    zoom_parser.add_argument("--page", type=int, default=1, help="page of a long message")
    add_data_option(zoom_parser)
    add_settings_option(zoom_parser)
    add_json_option(zoom_parser)
    zoom_parser.set_defaults(run=run_zoom)

    recall_parser = subparsers.add_parser(
        "recall",
        help="search a channel's original messages by their words",
        description=(
            "Rank the channel's messages by the words given (BM25, case and accents folded) "
            "and show each hit with the two messages before and after it."
        ),
    )
    add_channel_argument(recall_parser)
    recall_parser.add_argument("words", nargs="+", help="the words to look for")
    recall_parser.add_argument(
        "--cap",
        type=int,
        default=RECALL_CAP_BYTES,
        help="most bytes of output (default %(default)s)",
    )
    add_data_option(recall_parser)
    add_settings_option(recall_parser)
    add_json_option(recall_parser)
    recall_parser.set_defaults(run=run_recall)


def message_json(message: ShownMessage) -> dict[str, object]:
    value = msgspec.to_builtins(message)
    assert isinstance(value, dict)
    return value


def run_memory(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    store = open_store(args.data)
    stream = find_stream(store, args.channel)
    if not args.json:
        print(visible(memory_text(store, stream, settings)))
        return 0
    meta = store.meta(stream)
    row = store.published_row(stream)
    lines = row_lines(store, stream, channel_zone(meta, settings), RowText())
    print_json(
        {
            "channel": str(stream),
            "frontier": meta.row_frontier if meta else 0,
            "row": [
                {"address": f"{start}+{size}", "text": text}
                for (start, size), text in zip(row.entries if row else (), lines, strict=True)
            ],
            "tail": [message_json(m) for m in tail_messages(store, stream)],
            "text": memory_text(store, stream, settings),
        }
    )
    return 0


def run_zoom(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    store = open_store(args.data)
    stream = find_stream(store, args.channel)
    try:
        zoomed = zoom(store, stream, args.address, settings, args.page)
    except ZoomError as error:
        raise UserError(str(error)) from None
    if args.json:
        print_json(
            {
                "channel": str(stream),
                "address": args.address,
                "lines": [{"address": line.address, "text": line.text} for line in zoomed.lines],
                "message": message_json(zoomed.message) if zoomed.message else None,
                "page": zoomed.page,
                "pages": zoomed.pages,
                "text": zoomed.text,
            }
        )
    else:
        print(visible(zoomed.text))
    return 0


def run_recall(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    store = open_store(args.data)
    stream = find_stream(store, args.channel)
    if args.cap < 200:
        raise UserError(f"--cap must be at least 200 bytes, not {args.cap}")
    view = recall(store, stream, " ".join(args.words), settings, args.cap)
    if args.json:
        value = msgspec.to_builtins(view)
        assert isinstance(value, dict)
        value["channel"] = str(stream)
        print_json(value)
    else:
        print(visible(render_view(view, args.cap)))
    return 0
