# `eva serve-local`: the live supervisor without Discord, fed chat lines or a replayed export.
#
# Shell: it runs the same actors, writer and compression as the bot, with the
# offline summarizer, and stands in for the gateway by turning standard input
# lines (or an export's messages) into `Post` inputs. It knows nothing of
# Discord: local channels live in guild 0 with ids hashed from their names.
# Invariants: a message is reported stored only after the supervisor answered
# (it is durable then); on SIGINT/SIGTERM the feeding stops, the supervisor
# exits and its writer commits what was queued; messages of one channel reach
# its actor in the order they were read.
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import trio

from eva.cli.cmd_import import read_export
from eva.cli.cmd_status import ChannelStatus, channel_status, iso_time, status_table, totals
from eva.cli.common import (
    Progress,
    UserError,
    add_data_option,
    add_json_option,
    add_settings_option,
    load_live_settings,
    load_settings,
    open_store,
    print_json,
)
from eva.core.dce import ChannelExport, ExportError, export_events, parse_export
from eva.core.events import MessagePosted, RowPublished, decode_event
from eva.core.forget import Forgotten
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.core.timing import compression_due
from eva.live.collector import freeze_start_up, serving_collector
from eva.live.inputs import Describe, Post, post_of
from eva.live.local_chat import (
    DEFAULT_CHANNEL,
    ChatLine,
    MessageIds,
    local_stream,
    parse_chat_line,
    stable_id,
)
from eva.live.supervisor import Supervisor, open_supervisor, wall_clock_ms
from eva.store.event_store import EventStore

LOCAL_GUILD_NAME = "local"
SENDER_QUEUE = 256
READ_BYTES = 65536
STATUS_EVERY_S = 3.0
SETTLE_POLL_S = 0.1
EXIT_INTERRUPTED = 130

# -- the session ----------------------------------------------------------------


@dataclass(slots=True)
class Session:
    """What this run did, counted as it goes."""

    mode: str
    live: LiveSettings = field(default_factory=LiveSettings)
    started: float = field(default_factory=time.perf_counter)
    lines_read: int = 0
    skipped_lines: int = 0
    stored: int = 0
    already_stored: int = 0
    failed: int = 0
    streams: dict[StreamId, None] = field(default_factory=dict)
    stopped_by: str | None = None


class ScaledClock(trio.abc.Clock):
    """A trio clock that runs `rate` times faster than real time (for replays)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._origin = 0.0

    def start_clock(self) -> None:
        self._origin = time.perf_counter()

    def current_time(self) -> float:
        return (time.perf_counter() - self._origin) * self.rate

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return max(0.0, (deadline - self.current_time()) / self.rate)


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
    return EXIT_INTERRUPTED if session.stopped_by == "SIGINT" else 0


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
        _warn(f"line {number} skipped: not valid UTF-8")
        return None
    chat = parse_chat_line(text, default_channel)
    if chat is None:
        shown = text.strip()
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        _warn(f"line {number} skipped: expected 'NAME: text' or '#CHANNEL NAME: text', "
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
                _warn(f"#{channel}: a message could not be stored: {error}")
                continue
            if index is None:
                session.already_stored += 1
                continue
            session.stored += 1
            if acks is not None:
                acks.write(f"#{channel} {index}\n")
                acks.flush()


# -- export replay -------------------------------------------------------------


@dataclass(slots=True)
class ReplayTime:
    """The replay's "now": chat time, paced by the (scaled) trio clock when there is one."""

    paced: bool
    latest_ms: int
    origin_ms: int = 0
    origin_s: float | None = None

    def start(self, at_ms: int) -> None:
        self.origin_ms, self.origin_s = at_ms, trio.current_time()
        self.latest_ms = max(self.latest_ms, at_ms)

    def due_s(self, at_ms: int) -> float:
        """The clock time at which a message of chat time `at_ms` is fed."""
        assert self.origin_s is not None
        return self.origin_s + (at_ms - self.origin_ms) / 1000

    def now_ms(self) -> int:
        if self.paced and self.origin_s is not None:
            paced = self.origin_ms + int((trio.current_time() - self.origin_s) * 1000)
            return max(self.latest_ms, paced)
        return self.latest_ms


async def serve_export(
    store: EventStore,
    settings: MemorySettings,
    export: ChannelExport,
    clock: ScaledClock | None,
    quiet: bool,
    session: Session,
) -> None:
    """Replay `export` through a supervisor, paced by `clock` (None: as fast as possible)."""
    stream = export.stream
    session.streams[stream] = None
    meta = store.meta(stream)
    forgotten = Forgotten(meta.forgotten if meta is not None else {})  # they stay gone
    posts = [post_of(e) for e in export_events(export, None, _unknown, forgotten)
             if isinstance(e, MessagePosted)]
    first_ms = posts[0].at_ms if posts else (meta.last_ms if meta else 0)
    replay_time = ReplayTime(paced=clock is not None, latest_ms=first_ms)

    async def feed(supervisor: Supervisor) -> None:
        if meta is None or (meta.guild_name, meta.channel_name) != (
            export.guild.name, export.channel.name
        ):
            describe = Describe(
                guild_name=export.guild.name,
                channel_name=export.channel.name,
                time_zone=meta.time_zone if meta is not None else "UTC",
            )
            await supervisor.ask(stream, describe)
        progress = Progress("replay", len(posts), sys.stderr, quiet=quiet)
        watcher = StatusLines(store, stream, supervisor, replay_time, progress)
        rate = clock.rate if clock is not None else 1.0
        async with trio.open_nursery() as nursery:
            if not quiet:
                nursery.start_soon(watcher.run, STATUS_EVERY_S * rate)
            try:
                await replay_posts(supervisor, store, stream, posts, replay_time, progress,
                                   session)
            finally:
                progress.close()
                nursery.cancel_scope.cancel()

    await serve(store, settings, session, replay_time.now_ms, feed)


async def replay_posts(
    supervisor: Supervisor,
    store: EventStore,
    stream: StreamId,
    posts: list[Post],
    replay_time: ReplayTime,
    progress: Progress,
    session: Session,
) -> None:
    """Post each message at its paced time; messages already stored are passed over at once."""
    for post in posts:
        session.lines_read += 1
        if store.index_of(stream, post.message_id) is not None:
            session.already_stored += 1
            progress.advance()
            continue
        if replay_time.origin_s is None:
            replay_time.start(post.at_ms)
        if replay_time.paced:
            await trio.sleep_until(replay_time.due_s(post.at_ms))
        replay_time.latest_ms = max(replay_time.latest_ms, post.at_ms)
        try:
            index = await supervisor.ask(stream, post)
        except Exception as error:  # the actor logged it; go on with the next message
            session.failed += 1
            _warn(f"message {post.message_id} could not be stored: {error}")
            index = None
        else:
            if index is None:
                session.already_stored += 1
            else:
                session.stored += 1
        progress.advance()


class StatusLines:
    """Every few seconds, one line on standard error: where the replayed channel stands."""

    def __init__(
        self,
        store: EventStore,
        stream: StreamId,
        supervisor: Supervisor,
        replay_time: ReplayTime,
        progress: Progress,
    ) -> None:
        self.store = store
        self.stream = stream
        self.supervisor = supervisor
        self.replay_time = replay_time
        self.progress = progress
        meta = store.meta(stream)
        self.position = meta.position if meta is not None else 0
        self.publishes = 0

    def count_publishes(self) -> int:
        """Row publishes appended since the replay began (reads only the new events)."""
        for seq, data in self.store.raw_events(self.stream, self.position):
            if isinstance(decode_event(data), RowPublished):
                self.publishes += 1
            self.position = seq + 1
        return self.publishes

    def line(self) -> str:
        meta = self.store.meta(self.stream)
        stats = self.supervisor.statistics()
        if meta is None:
            return "status: no messages yet"
        return (
            f"status: {meta.messages:,} messages, tail {meta.tail_bytes:,} B, "
            f"row {meta.row_bytes:,} B, {self.count_publishes()} publishes, "
            f"{stats.tasks_done:,} tasks done; chat time "
            f"{iso_time(self.replay_time.now_ms())}"
        )

    async def run(self, every_s: float) -> None:
        out = self.progress.out
        while True:
            await trio.sleep(every_s)
            prefix = "\r\033[K" if self.progress.tty else ""
            out.write(f"{prefix}{self.line()}\n")
            out.flush()


def _unknown(message_id: int) -> None:
    return None


# -- the common frame: supervisor, signals, settling ---------------------------------


async def serve(
    store: EventStore,
    settings: MemorySettings,
    session: Session,
    wall_ms: Callable[[], int],
    feed: Callable[[Supervisor], Awaitable[None]],
) -> None:
    """Run `feed(supervisor)`, then wait for compression; a stop signal cuts both short.

    The cancel scope sits inside the supervisor, so on a signal the supervisor
    still exits normally and its writer commits every queued append.
    """
    summarizer = OfflineSummarizer(settings.line_limit)
    with serving_collector():
        async with open_supervisor(
            store, summarizer, settings, session.live, wall_ms
        ) as supervisor:
            freeze_start_up()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(watch_signals, scope, session)
                    await feed(supervisor)
                    await settle(store, settings, supervisor)
                    nursery.cancel_scope.cancel()


async def watch_signals(
    scope: trio.CancelScope,
    session: Session,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """On SIGINT or SIGTERM, note which and cancel `scope`."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            session.stopped_by = signal.Signals(signum).name
            scope.cancel()
            return


async def settle(store: EventStore, settings: MemorySettings, supervisor: Supervisor) -> None:
    """Wait until no channel has compression due or lines to remake, and writes have stopped.

    Merges may stay ready at rest (a run leaves a request's worth less than
    full for the next one), so ready merges alone do not count as unfinished.
    The store shows what is due; a run in progress between two of its writes
    can look finished there, so this also waits until the writer has had
    nothing to commit for one poll (the offline summarizer never pauses a run).
    """
    appends = -1
    while True:
        now = supervisor.statistics().appends
        done = not any(
            meta.stale or compression_due(meta, settings) for meta in store.streams()
        )
        if done and now == appends:
            return
        appends = now
        await trio.sleep(SETTLE_POLL_S)


# -- the summary -----------------------------------------------------------------


def report(store: EventStore, settings: MemorySettings, session: Session, as_json: bool) -> None:
    """Print what this run did and where its channels stand."""
    channels: list[ChannelStatus] = []
    for stream in session.streams:
        meta = store.meta(stream)
        if meta is not None:
            channels.append(channel_status(store, meta, settings))
    seconds = round(time.perf_counter() - session.started, 3)
    if as_json:
        print_json(
            {
                "mode": session.mode,
                "lines_read": session.lines_read,
                "stored": session.stored,
                "already_stored": session.already_stored,
                "skipped_lines": session.skipped_lines,
                "failed": session.failed,
                "stopped_by": session.stopped_by,
                "seconds": seconds,
                "channels": [c.to_json() for c in channels],
                "totals": totals(channels),
            }
        )
        return
    print(
        f"stored {session.stored:,} messages in {len(channels)} channels in {seconds:.2f} s"
        f" ({session.already_stored:,} already stored, {session.skipped_lines:,} lines skipped"
        f"{f', {session.failed:,} failed' if session.failed else ''})"
    )
    if channels:
        print(status_table(channels))


def _warn(text: str) -> None:
    print(f"eva serve-local: {text}", file=sys.stderr, flush=True)
