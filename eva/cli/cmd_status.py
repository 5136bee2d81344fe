# `eva status`: where every channel of a data directory stands, for a person or a script.
#
# Read-only: it opens the store, reads each stream's record and the event of
# its published row, and prints. It may run while a server writes to the same
# directory (LMDB readers never block the writer); the figures are those of
# one moment per channel, not one moment for the whole directory.
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from eva.cli.common import (
    add_data_option,
    add_json_option,
    add_settings_option,
    load_settings,
    open_store,
    print_json,
)
from eva.core.events import RowPublished
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.state import StreamMeta
from eva.core.timing import compression_due
from eva.store.event_store import EventStore


@dataclass(frozen=True, slots=True)
class ChannelStatus:
    """One channel's figures."""

    channel: str
    channel_name: str
    messages: int
    tail_bytes: int
    row_bytes: int
    row_lines: int
    leaf_frontier: int
    pending_tasks: int
    last_publish_ms: int | None
    last_publish_reason: str | None

    def to_json(self) -> dict[str, Any]:
        value = asdict(self)
        value["last_publish_at"] = iso_time(self.last_publish_ms)
        return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="per channel figures of a data directory: messages, tail, row, pending work",
        description=(
            "Show, for every channel of a data directory, its messages, tail and row "
            "bytes, row lines, leaf frontier, pending compression tasks and last publish. "
            "Read-only; safe while a server runs on the same directory."
        ),
    )
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def pending_tasks(meta: StreamMeta, settings: MemorySettings) -> int:
    """Merges ready now and lines to remake, plus the unleafed messages when compression is due.

    The second part is an estimate: a run leaves the newest ~`tail_keep_bytes`
    without leaves, so it writes somewhat fewer leaves than this counts.
    """
    unleafed = meta.messages - meta.leaf_frontier if compression_due(meta, settings) else 0
    return meta.ready + meta.stale + unleafed


def channel_status(store: EventStore, meta: StreamMeta, settings: MemorySettings) -> ChannelStatus:
    """The figures of the channel whose record is `meta`."""
    stream = StreamId(meta.guild_id, meta.channel_id)
    row = store.event(stream, meta.row_seq) if meta.row_seq >= 0 else None
    published = row if isinstance(row, RowPublished) else None
    return ChannelStatus(
        channel=str(stream),
        channel_name=meta.channel_name,
        messages=meta.messages,
        tail_bytes=meta.tail_bytes,
        row_bytes=meta.row_bytes,
        row_lines=len(published.entries) if published else 0,
        leaf_frontier=meta.leaf_frontier,
        pending_tasks=pending_tasks(meta, settings),
        last_publish_ms=published.at_ms if published else None,
        last_publish_reason=published.reason if published else None,
    )


def directory_status(store: EventStore, settings: MemorySettings) -> list[ChannelStatus]:
    """Every channel's figures, in key order."""
    return [channel_status(store, meta, settings) for meta in store.streams()]


def totals(channels: list[ChannelStatus]) -> dict[str, int]:
    """The sums over channels of the figures that add up."""
    return {
        "channels": len(channels),
        "messages": sum(c.messages for c in channels),
        "tail_bytes": sum(c.tail_bytes for c in channels),
        "row_bytes": sum(c.row_bytes for c in channels),
        "row_lines": sum(c.row_lines for c in channels),
        "pending_tasks": sum(c.pending_tasks for c in channels),
    }


def status_json(channels: list[ChannelStatus]) -> dict[str, Any]:
    return {"channels": [c.to_json() for c in channels], "totals": totals(channels)}


def status_table(channels: list[ChannelStatus]) -> str:
    """The figures as a table with a totals line."""
    header = (
        "channel", "name", "messages", "tail B", "row B", "lines", "leaves", "pending",
        "last publish",
    )
    rows = [
        (
            c.channel,
            f"#{c.channel_name}" if c.channel_name else "-",
            f"{c.messages:,}",
            f"{c.tail_bytes:,}",
            f"{c.row_bytes:,}",
            f"{c.row_lines:,}",
            f"{c.leaf_frontier:,}",
            f"{c.pending_tasks:,}",
            _publish_text(c),
        )
        for c in channels
    ]
    total = totals(channels)
    rows.append(
        (
            f"total ({total['channels']} channels)",
            "",
            f"{total['messages']:,}",
            f"{total['tail_bytes']:,}",
            f"{total['row_bytes']:,}",
            f"{total['row_lines']:,}",
            "",
            f"{total['pending_tasks']:,}",
            "",
        )
    )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    numeric = {2, 3, 4, 5, 6, 7}

    def line(row: tuple[str, ...]) -> str:
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join(line(row) for row in [header, *rows])


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    store = open_store(args.data)
    channels = directory_status(store, settings)
    if args.json:
        print_json(status_json(channels))
    else:
        print(status_table(channels))
    return 0


def iso_time(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="seconds")


def _publish_text(status: ChannelStatus) -> str:
    if status.last_publish_ms is None:
        return "never"
    return f"{iso_time(status.last_publish_ms)} ({status.last_publish_reason})"
