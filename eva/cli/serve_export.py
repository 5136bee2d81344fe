# `eva serve-local --export`: a DiscordChatExporter export replayed on its own clock.
#
# Shell (trio). Each message is posted at its chat time, paced by a trio clock that runs
# `--speed` times faster than real time (or as fast as the actors take them), with a
# status line on standard error every few seconds.
# Invariants: messages are posted in the export's order, one at a time, each once the one
# before it was answered; a message stored before is passed over at once, and the people
# who asked to be forgotten stay gone; the replay's "now" never goes back.
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import trio

from eva.cli.cmd_status import iso_time
from eva.cli.common import Progress
from eva.cli.serve_frame import Session, serve, warn
from eva.core.dce import ChannelExport, export_events
from eva.core.events import MessagePosted, RowPublished, decode_event
from eva.core.forget import Forgotten
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.live.inputs import Describe, Post, post_of
from eva.live.supervisor import Supervisor
from eva.store.event_store import EventStore
from eva.store.opt_outs import opted_out
from eva.store.switches import read_switches

STATUS_EVERY_S = 3.0


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
    switch = read_switches(store).get(stream)
    if switch is not None and not switch.on:
        warn(f"Eva's memory of {stream} is off: nothing of the export is fed "
             f"(eva channel on {stream} keeps it)")
        return
    forgotten = Forgotten(meta.forgotten if meta is not None else {}, store.hashes)  # stay gone
    kept_out = opted_out(store)  # and those who asked not to be kept stay out

    def left_out(author_id: int, at_ms: int) -> bool:
        return forgotten(author_id, at_ms) or kept_out(stream.guild_id, author_id)

    posts = [post_of(e) for e in export_events(export, None, _unknown, left_out)
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
            warn(f"message {post.message_id} could not be stored: {error}")
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
