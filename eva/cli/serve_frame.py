# The frame every `eva serve-local` run shares: its counts, the supervisor under stop
# signals, waiting for compression to settle, and the summary at the end.
#
# Shell (trio). The feeds (standard input in eva.cli.cmd_serve, an export's replay in
# eva.cli.serve_export) each get the supervisor and post through it.
# Invariants: the cancel scope of a stop signal sits inside the supervisor, so the
# supervisor still exits normally and its writer commits every queued append; a run
# settles only once no channel has compression due or lines to remake and the writer has
# had nothing to commit for one poll.
from __future__ import annotations

import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from eva.cli.cmd_status import ChannelStatus, channel_status, status_table, totals
from eva.cli.common import print_json
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.core.timing import compression_due
from eva.live.collector import freeze_start_up, serving_collector
from eva.live.supervisor import Supervisor, open_supervisor
from eva.store.event_store import EventStore

SETTLE_POLL_S = 0.1


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
    unsettled: bool = False  # compression failed after the input ended and was left


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
                    session.unsettled = not await settle(store, settings, supervisor)
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


async def settle(store: EventStore, settings: MemorySettings, supervisor: Supervisor) -> bool:
    """Wait until no channel has compression due or lines to remake, and writes have
    stopped; False at once if a compression run fails meanwhile (a full disk, say, would
    make it fail again and again, ever later): what is left is done by the next run.

    Merges may stay ready at rest (a run leaves a request's worth less than
    full for the next one), so ready merges alone do not count as unfinished.
    The store shows what is due; a run in progress between two of its writes
    can look finished there, so this also waits until the writer has had
    nothing to commit for one poll (the offline summarizer never pauses a run).
    """
    appends = -1
    failed = supervisor.statistics().runs_failed
    while True:
        statistics = supervisor.statistics()
        if statistics.runs_failed > failed:
            return False
        done = not any(
            meta.stale or compression_due(meta, settings) for meta in store.streams()
        )
        if done and statistics.appends == appends:
            return True
        appends = statistics.appends
        await trio.sleep(SETTLE_POLL_S)


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


def warn(text: str) -> None:
    """One line on standard error, named for the command."""
    print(f"eva serve-local: {text}", file=sys.stderr, flush=True)
