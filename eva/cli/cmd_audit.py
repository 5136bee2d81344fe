# `eva audit`: the history of a channel's memory, or its row as it stood at a time.
from __future__ import annotations

import argparse
from datetime import UTC, datetime

import msgspec

from eva.cli.common import (
    UserError,
    add_channel_argument,
    add_data_option,
    add_json_option,
    find_stream,
    open_store,
    print_json,
)
from eva.core.address import Address
from eva.core.audit import AuditEntry, history, row_at
from eva.core.chain import check_stream
from eva.core.erasures import describe_erasure
from eva.core.keys import StreamId
from eva.core.render import render_line, visible
from eva.core.settings import MemorySettings
from eva.memory.view import channel_zone, withheld_now, withhold_lines
from eva.store.guild_erasure import erasure_records


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="the history of a channel's memory from its log",
        description=(
            "Print when each line was written and how (verbatim, glue, or which model with "
            "its tokens), each publish with its reason and row size, and each forget "
            "(never its content). The log's seals are checked first: a history whose log "
            "was altered is refused, naming the first event that does not follow; the last "
            "line gives the newest seal (the head), which changes if anything before it "
            "is rewritten. With --at, show the row as it stood at that time."
        ),
    )
    add_channel_argument(parser)
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--at",
        metavar="TIME",
        help="the row published at or before this time of publishing (ISO date or time, "
        "e.g. 2026-06-01 or 2026-06-01T12:00+02:00; UTC if no offset)",
    )
    when.add_argument(
        "--chat-at",
        metavar="TIME",
        help="the row Eva read when the chat reached this time (the time people wrote, "
        "not when the memory was built)",
    )
    add_data_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def parse_time(text: str) -> int:
    """UTC milliseconds of an ISO date or date-time; a bare date means its end (23:59:59.999)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"not a time: {text!r}; use ISO form like 2019-06-01 or 2019-06-01T12:00"
        ) from None
    if len(text) == 10:
        moment = moment.replace(hour=23, minute=59, second=59, microsecond=999000)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def format_ms(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def run(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    stream = find_stream(store, args.channel)
    if args.at is not None or args.chat_at is not None:
        chat = args.chat_at is not None
        return show_row_at(args, stream, parse_time(args.chat_at if chat else args.at), chat)
    with store.backend.reading() as tables:
        log = check_stream(tables, stream)
    entries = [] if log.broken is not None else history(store.events(stream))
    erasures = [  # the server's, or this channel's: owed, cancelled or (a channel kept) done
        record for record in erasure_records(store)
        if record.guild_id == stream.guild_id and record.channel_id in (0, stream.channel_id)
    ]
    if args.json:
        print_json(
            {
                "channel": str(stream),
                "entries": [_entry_json(e) for e in entries],
                "log": {
                    "ok": log.ok,
                    "events": log.events,
                    "head": log.head,
                    "broken_at": None if log.broken is None else log.broken.position,
                    "why": None if log.broken is None else log.broken.why,
                },
                "erasures": [msgspec.to_builtins(record) for record in erasures],
            }
        )
        return 0 if log.ok else 1
    for entry in entries:
        if entry.messages_before:
            print(f"{'':19}  ... {entry.messages_before} messages posted")
        if entry.kind != "messages":
            print(f"{format_ms(entry.at_ms)}  #{entry.seq} {entry.detail}")
    if log.broken is not None:
        raise UserError(
            f"the log of {stream} is broken at event {log.broken.position}: {log.broken.why}; "
            "its history cannot be trusted from there on (`eva replay` checks every channel)"
        )
    if not entries:
        print("no events in this channel")
    print(f"log: {log.events} events, each sealed to the one before; head {log.head}")
    for record in erasures:
        print(describe_erasure(record))
    return 0


def _entry_json(entry: AuditEntry) -> dict[str, object]:
    value = msgspec.to_builtins(entry)
    assert isinstance(value, dict)
    return value


def show_row_at(
    args: argparse.Namespace, stream: StreamId, time_ms: int, chat_time: bool = False
) -> int:
    store = open_store(args.data)
    zone = channel_zone(store.meta(stream), MemorySettings())
    found = row_at(store.events(stream), time_ms, chat_time=chat_time)
    if found is None:
        first = row_at(store.events(stream), 2**62)
        built = "" if first is None else (
            f"; its first row was published {format_ms(first.row.at_ms)} (a time of "
            "publishing: use --at for those)"
        )
        if chat_time:
            raise UserError(
                f"no row was published in {stream} before its chat reached {args.chat_at}"
                f"{built}"
            )
        raise UserError(
            f"no row was published in {stream} at or before {args.at} (a time of "
            f"publishing; --chat-at takes a time of the chat){built}"
        )
    rendered = []
    for (start, size), line in zip(found.row.entries, found.lines, strict=True):
        if line is None:
            rendered.append(f"{start}+{size} ?|(line missing from the log)")
        else:
            rendered.append(
                render_line(Address(start, size), line.text, line.first_ms, line.last_ms, zone)
            )
    # a forget under way: its person's words stay out
    rendered = withhold_lines(rendered, withheld_now(store, stream, store.meta(stream)))
    if args.json:
        print_json(
            {
                "channel": str(stream),
                "published_seq": found.publish_seq,
                "published_at": format_ms(found.row.at_ms),
                "reason": found.row.reason,
                "frontier": found.row.frontier,
                "lines": [
                    {"address": f"{s}+{z}", "text": text}
                    for (s, z), text in zip(found.row.entries, rendered, strict=True)
                ],
            }
        )
        return 0
    print(
        f"row published {format_ms(found.row.at_ms)} (#{found.publish_seq}, "
        f"{found.row.reason}), {len(found.row.entries)} lines over {found.row.frontier} "
        f"messages{' (as Eva read the chat then)' if chat_time else ''}:"
    )
    for text in rendered:
        print(visible(text))
    return 0
