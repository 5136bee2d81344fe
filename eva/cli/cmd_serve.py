# `eva serve-local`: the live supervisor without Discord, fed chat lines or a replayed export.
#
# Shell: it runs the same actors, writer and compression as the bot, with the
# offline summarizer, and stands in for the gateway by turning standard input
# lines (or an export's messages) into `Post` inputs. It knows nothing of
# Discord: local channels live in guild 0 with ids hashed from their names.
# This module holds the command and its standard-input feed; eva.cli.serve_export
# replays an export, and eva.cli.serve_frame is the frame both run in.
# Invariants: a message is reported stored only after the supervisor answered
# (it is durable then); on SIGINT/SIGTERM the feeding stops, the supervisor
# exits and its writer commits what was queued; messages of one channel reach
# its actor in the order they were read.
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import trio

from eva.cli.cmd_import import read_export
from eva.cli.common import (
    UserError,
    add_data_option,
    add_json_option,
    add_settings_option,
    load_live_settings,
    load_settings,
    log_one_line,
    open_store,
)
from eva.cli.serve_export import ScaledClock, serve_export
from eva.cli.serve_frame import Session, report, serve, warn
from eva.core.dce import ChannelExport, ExportError, parse_export
from eva.core.settings import MemorySettings
from eva.live.inputs import Describe, Post
from eva.live.local_chat import (
    DEFAULT_CHANNEL,
    ChatLine,
    MessageIds,
    local_stream,
    parse_chat_line,
    stable_id,
)
from eva.live.supervisor import Supervisor, wall_clock_ms
from eva.store.event_store import EventStore

LOCAL_GUILD_NAME = "local"
SENDER_QUEUE = 256
READ_BYTES = 65536
EXIT_INTERRUPTED = 130


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve-local",
        help="run Eva's live memory without Discord, fed from standard input or an export",
        description=(
            "Run the live supervisor (actors, group commits, background compression with "
            "the offline summarizer) without Discord. By default it reads chat lines from "
            "standard input, '#CHANNEL NAME: text' or 'NAME: text'; at the end of input it "
            "waits for compression to finish and prints a summary. With --export it "
            "replays a DiscordChatExporter export with its timing sped up."
        ),
    )
    parser.add_argument(
        "--export", type=Path, default=None, metavar="EXPORT",
        help="replay this DiscordChatExporter export (.json or .json.gz) instead of stdin",
    )
    parser.add_argument(
        "--speed", type=float, default=3600.0,
        help="with --export: how many times faster than the chat happened (0: no waiting; "
        "default 3600, an hour a second)",
    )
    parser.add_argument(
        "--channel", default=DEFAULT_CHANNEL,
        help=f"channel for stdin lines that name none (default {DEFAULT_CHANNEL})",
    )
    parser.add_argument(
        "--acks", action="store_true",
        help="print '#CHANNEL INDEX' on standard output once each stdin message is stored",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress or status lines")
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    live = load_live_settings(args.settings)  # every setting checked before anything opens
    if args.speed < 0 or args.speed != args.speed or args.speed == float("inf"):
        raise UserError(f"--speed must be a number of at least 0, not {args.speed}")
    export: ChannelExport | None = None
    if args.export is not None:
        try:
            export = parse_export(read_export(args.export))
        except ExportError as error:
            raise UserError(f"cannot replay {args.export}: {error}") from None
    store = open_store(args.data, must_exist=False, write=True)
    log_one_line("serve-local")
    if export is None:
        session = Session("stdin", live)
        trio.run(serve_stdin, store, settings, args.channel, sys.stdout if args.acks else None,
                 session)
    else:
        session = Session("export", live)
        clock = ScaledClock(args.speed) if args.speed > 0 else None
        trio.run(serve_export, store, settings, export, clock, args.quiet, session, clock=clock)
    report(store, settings, session, args.json)
    if session.stopped_by is not None:
        print(
            f"eva serve-local: stopped by {session.stopped_by}; "
            f"{session.stored:,} messages stored in this run",
            file=sys.stderr,
        )
    if session.unsettled:
        print(
            "eva serve-local: compression failed after the input ended and was left as it "
            "is; every stored message is kept, and the next run (or eva build) finishes it",
            file=sys.stderr,
        )
    if session.stopped_by == "SIGINT":
        return EXIT_INTERRUPTED
    return 1 if session.failed or session.unsettled else 0


# -- standard input -------------------------------------------------------------


async def serve_stdin(
    store: EventStore,
    settings: MemorySettings,
    default_channel: str,
    acks: TextIO | None,
    session: Session,
) -> None:
    """Feed standard input's chat lines to a supervisor until EOF or a stop signal."""
    await serve(store, settings, session, wall_clock_ms,
                lambda supervisor: feed_lines(supervisor, store, stdin_lines(), default_channel,
                                              acks, session))


async def stdin_lines() -> AsyncIterator[bytes]:
    """Standard input's lines, read in a worker thread (abandoned if cancelled).

    It reads the file descriptor itself, not `sys.stdin`, so an abandoned read
    holds no Python lock the interpreter needs at exit.
    """
    pending = b""
    while True:
        chunk = await trio.to_thread.run_sync(os.read, 0, READ_BYTES, abandon_on_cancel=True)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line
    if pending:
        yield pending


async def feed_lines(
    supervisor: Supervisor,
    store: EventStore,
    lines: AsyncIterator[bytes],
    default_channel: str,
    acks: TextIO | None,
    session: Session,
) -> None:
    """Post every chat line to its channel; channels are fed concurrently, each in order."""
    ids = MessageIds()
    senders: dict[str, trio.MemorySendChannel[Post]] = {}
    async with trio.open_nursery() as nursery:
        try:
            async for raw in lines:
                session.lines_read += 1
                chat = _decode(raw, session.lines_read, default_channel)
                if chat is None:
                    if raw.strip():
                        session.skipped_lines += 1
                    continue
                send = senders.get(chat.channel)
                if send is None:
                    send, receive = trio.open_memory_channel[Post](SENDER_QUEUE)
                    senders[chat.channel] = send
                    nursery.start_soon(
                        send_channel, supervisor, store, chat.channel, receive, acks, session
                    )
                now_ms = wall_clock_ms()
                post = Post(
                    message_id=ids.next(now_ms),
                    author_id=stable_id("author", chat.author),
                    author_name=chat.author,
                    at_ms=now_ms,
                    content=chat.text,
                )
                await send.send(post)
        finally:
            for send in senders.values():
                send.close()


def _decode(raw: bytes, number: int, default_channel: str) -> ChatLine | None:
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        warn(f"line {number} skipped: not valid UTF-8")
        return None
    chat = parse_chat_line(text, default_channel)
    if chat is None:
        shown = text.strip()
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        warn(f"line {number} skipped: expected 'NAME: text' or '#CHANNEL NAME: text', "
              f"got {shown!r}")
    return chat


async def send_channel(
    supervisor: Supervisor,
    store: EventStore,
    channel: str,
    posts: trio.MemoryReceiveChannel[Post],
    acks: TextIO | None,
    session: Session,
) -> None:
    """Name the channel if the store does not know it yet, then post its messages in order."""
    stream = local_stream(channel)
    session.streams[stream] = None
    async with posts:
        meta = store.meta(stream)
        if meta is None or meta.channel_name != channel:
            zone = meta.time_zone if meta is not None else "UTC"
            describe = Describe(guild_name=LOCAL_GUILD_NAME, channel_name=channel, time_zone=zone)
            await supervisor.ask(stream, describe)
        async for post in posts:
            try:
                index = await supervisor.ask(stream, post)
            except Exception as error:  # the actor logged it; this message is lost, go on
                session.failed += 1
                warn(f"#{channel}: a message could not be stored: {error}")
                continue
            if index is None:
                session.already_stored += 1
                continue
            session.stored += 1
            if acks is not None:
                acks.write(f"#{channel} {index}\n")
                acks.flush()
