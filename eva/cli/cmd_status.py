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
from pathlib import Path
from typing import Any

import msgspec

from eva.cli.cmd_cost import load_model_settings, unsplit_ttl
from eva.cli.common import (
    UserError,
    add_data_option,
    add_json_option,
    add_settings_option,
    load_settings,
    open_store,
    print_json,
)
from eva.core.costs import CostReport, sum_costs
from eva.core.erasures import describe_erasure
from eva.core.events import LineWritten, ReplyWritten, RowPublished
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings, ModelSettings
from eva.core.state import StreamMeta
from eva.core.timing import pending_tasks
from eva.plan.server_month import PLAN_REPLIES, PLAN_USD
from eva.store.event_store import EventStore
from eva.store.guild_erasure import erasure_records
from eva.store.opt_outs import read_opt_outs
from eva.store.switches import read_switches


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
    forgets_pending: int = 0
    """Forgets recorded here and not finished yet (a crash cut them short)."""
    purges_pending: int = 0
    """Deletions and edits whose old words the log still holds (StreamMeta.unpurged)."""

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
            "bytes, row lines, leaf frontier, pending compression tasks and last publish; "
            "then, for every guild, what its recorded model calls cost this month at list "
            "prices against its plan. Read-only; safe while a server runs on the same "
            "directory. Given several data directories (DIR...: shard 0, 1, ... in order) or "
            "one folder holding them, it shows per shard its guilds, channels, messages, "
            "disk and pending work, and names every guild held in more than one; with "
            "--shard-count M, every guild not in the shard that owns it for M shards "
            "((guild_id >> 22) % M), and exits 1 if there is any."
        ),
    )
    parser.add_argument(
        "dirs",
        nargs="*",
        type=Path,
        metavar="DIR",
        help="the data directories of several shards, in shard order, or one folder of them",
    )
    parser.add_argument(
        "--shard-count",
        type=int,
        metavar="M",
        help="check that every guild sits in the shard that owns it for M shards",
    )
    parser.add_argument("--month", default=None, metavar="YYYY-MM",
                        help="the month whose spend to show per guild (default: this one, UTC)")
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


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
        forgets_pending=len(meta.forgetting),
        purges_pending=meta.unpurged,
    )


@dataclass(frozen=True, slots=True)
class GuildSpend:
    """What one guild's recorded model calls cost in one month, against its plan."""

    guild_id: int
    guild_name: str
    month: str
    usd: float
    lines_usd: float
    replies_usd: float
    replies: int
    unpriced: tuple[str, ...]
    grounded: int = 0  # replies of the month whose details were matched (eva.core.grounding)
    guessed: int = 0  # of those, replies that state a detail Eva did not read word for word
    by_channel: tuple[tuple[str, int, int], ...] = ()  # (#name, guessed, grounded) a channel
    reply_cap: int = PLAN_REPLIES  # replies a month at most (ModelSettings); 0: no cap

    def to_json(self) -> dict[str, Any]:
        return {
            "guild_id": self.guild_id,
            "guild_name": self.guild_name,
            "month": self.month,
            "usd": round(self.usd, 6),
            "lines_usd": round(self.lines_usd, 6),
            "replies_usd": round(self.replies_usd, 6),
            "replies": self.replies,
            "reply_cap": self.reply_cap or None,
            "plan_usd": PLAN_USD,
            "plan_replies": PLAN_REPLIES,
            "share_of_plan": round(self.usd / PLAN_USD, 6),
            "unpriced": list(self.unpriced),
            "grounded_replies": self.grounded,
            "guessed_replies": self.guessed,
            "channels": [
                {"channel": name, "guessed_replies": guessed, "grounded_replies": grounded}
                for name, guessed, grounded in self.by_channel
            ],
        }


def month_bounds(month: str) -> tuple[int, int]:
    """The first and the past-last UTC millisecond of a `YYYY-MM` month."""
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    following = (start + timedelta(days=32)).replace(day=1)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return (int((start - epoch).total_seconds() * 1000),
            int((following - epoch).total_seconds() * 1000))


def first_seq_at(store: EventStore, stream: StreamId, end: int, at_ms: int) -> int:
    """The first event of the stream at or after `at_ms`, found by halving (events are
    appended as time goes, so their times rise with their positions)."""
    low, high = 0, end
    while low < high:
        middle = (low + high) // 2
        event = store.event(stream, middle)
        if event is not None and event.at_ms < at_ms:
            low = middle + 1
        else:
            high = middle
    return low


def guild_spend(
    store: EventStore, metas: list[StreamMeta], models: ModelSettings, month: str
) -> list[GuildSpend]:
    """Each guild's spend in `month` from the usage its channels recorded, at list prices."""
    start, stop = month_bounds(month)
    reports: dict[int, CostReport] = {}
    names: dict[int, str] = {}
    replies: dict[int, int] = {}
    grounded: dict[int, int] = {}
    guessed: dict[int, int] = {}
    channels: dict[int, list[tuple[str, int, int]]] = {}
    for meta in metas:
        stream = StreamId(meta.guild_id, meta.channel_id)
        first = first_seq_at(store, stream, meta.position, start)
        events = [
            event for _, event in store.events(stream, first)
            if start <= event.at_ms < stop and isinstance(event, LineWritten | ReplyWritten)
        ]
        report = sum_costs(events, models.prices, cache_ttl=unsplit_ttl(models))
        here = [e.grounding for e in events if isinstance(e, ReplyWritten) and e.grounding]
        if here:
            grounded[meta.guild_id] = grounded.get(meta.guild_id, 0) + len(here)
            caught = sum(g.guessed for g in here)
            guessed[meta.guild_id] = guessed.get(meta.guild_id, 0) + caught
            name = f"#{meta.channel_name}" if meta.channel_name else str(stream)
            channels.setdefault(meta.guild_id, []).append((name, caught, len(here)))
        reports.setdefault(meta.guild_id, CostReport()).add(report)
        names[meta.guild_id] = meta.guild_name or names.get(meta.guild_id, "")
        if meta.reply_month == month:
            replies[meta.guild_id] = replies.get(meta.guild_id, 0) + meta.replies
    return [
        GuildSpend(
            guild_id=guild,
            guild_name=names[guild],
            month=month,
            usd=report.usd,
            lines_usd=report.kind_usd("lines"),
            replies_usd=report.kind_usd("replies"),
            replies=replies.get(guild, 0),
            unpriced=tuple(report.unpriced),
            grounded=grounded.get(guild, 0),
            guessed=guessed.get(guild, 0),
            by_channel=tuple(channels.get(guild, ())),
            reply_cap=models.replies_per_guild_month,
        )
        for guild, report in sorted(reports.items())
    ]


def spend_table(spends: list[GuildSpend]) -> str:
    """One line per guild: its month's spend against the plan."""
    out = []
    for spend in spends:
        name = f" ({spend.guild_name})" if spend.guild_name else ""
        unpriced = f"; unpriced: {', '.join(spend.unpriced)}" if spend.unpriced else ""
        cap = (f"{spend.replies:,} of {spend.reply_cap:,} replies (replies_per_guild_month)"
               if spend.reply_cap else f"{spend.replies:,} replies (no cap)")
        out.append(
            f"guild {spend.guild_id}{name}, {spend.month}: ${spend.usd:,.4f} spent at list "
            f"prices (lines ${spend.lines_usd:,.4f}, replies ${spend.replies_usd:,.4f}; "
            f"{spend.usd / PLAN_USD:.1%} of the ${PLAN_USD:.0f} plan's price), {cap}{unpriced}"
            + (f"; guessed in {spend.guessed} of {spend.grounded} replies"
               if spend.grounded else "")
        )
        out.extend(
            f"  {name}: guessed in {caught} of {count} replies this month"
            for name, caught, count in spend.by_channel
        )
    return "\n".join(out)


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
    if args.dirs or args.shard_count is not None:
        return run_fleet(args)
    settings = load_settings(args.settings)
    models = load_model_settings(args.settings)
    month = args.month or datetime.now(UTC).strftime("%Y-%m")
    try:
        month_bounds(month)
    except (ValueError, OverflowError):  # OverflowError: the month after 9999-12
        raise UserError(f"--month must be YYYY-MM, not {month!r}") from None
    store = open_store(args.data)
    channels = directory_status(store, settings)
    spends = guild_spend(store, store.streams(), models, month)
    erasures = erasure_records(store)
    off = sorted(str(s) for s, switch in read_switches(store).items() if not switch.on)
    kept_out = len(read_opt_outs(store))
    if args.json:
        print_json({**status_json(channels), "guilds": [s.to_json() for s in spends],
                    "erasures": [msgspec.to_builtins(r) for r in erasures],
                    "channels_off": off, "people_kept_out": kept_out})
    else:
        print(status_table(channels))
        for record in erasures:
            print(describe_erasure(record))
        if off:
            print(f"Eva's memory is off in {len(off)} channel(s): {', '.join(off[:5])}"
                  + (", ..." if len(off) > 5 else "") + " (eva channel lists them)")
        if kept_out:
            print(f"{kept_out} keep-out(s) of people who asked not to be remembered "
                  "(eva opt-out counts them per server)")
        for line in (
            _owed(
                [c.channel for c in channels if c.forgets_pending], "forget in progress in",
                "the next command that writes to this directory finishes it (eva forget "
                "--resume, import, build, serve-local, run)",
            ),
            _owed(
                [f"{c.channel}: {c.purges_pending}" for c in channels if c.purges_pending],
                "texts deleted or edited away still in the log of",
                "the bot takes them out a while after they go, or the next command that "
                "writes (import, build, forget, serve-local, run) at once",
            ),
        ):
            if line:
                print(line)
        if spends:
            print(spend_table(spends))
    return 0


def _owed(channels: list[str], what: str, finish: str) -> str:
    """A line saying in which channels (the first five named) work is owed, and how it gets
    done; empty if in none."""
    if not channels:
        return ""
    named = ", ".join(channels[:5]) + (", ..." if len(channels) > 5 else "")
    return f"{what} {len(channels)} channel(s) ({named}): {finish}"


def run_fleet(args: argparse.Namespace) -> int:
    """`eva status DIR... [--shard-count M]`: per shard, and where each guild sits."""
    from eva.cli import status_fleet

    settings = load_settings(args.settings)
    dirs = status_fleet.shard_dirs(args.dirs or [args.data])
    status_fleet.check_count(dirs, args.shard_count)
    shards, holders = status_fleet.fleet_status(dirs, settings)
    wrong = status_fleet.out_of_place(holders, args.shard_count)
    if args.json:
        print_json(status_fleet.fleet_json(shards, wrong, args.shard_count))
    else:
        print(status_fleet.fleet_table(shards))
        for line in status_fleet.placement_lines(shards, wrong, args.shard_count):
            print(line)
    return 1 if wrong else 0


def iso_time(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="seconds")


def _publish_text(status: ChannelStatus) -> str:
    if status.last_publish_ms is None:
        return "never"
    return f"{iso_time(status.last_publish_ms)} ({status.last_publish_reason})"
