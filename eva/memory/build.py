# Building memory outside the live bot: at once (`build`), or along a chat's own timeline (`play`).
#
# Shell: drives compression and publishing over a store with a summarizer.
# `build` acts as if the chat had gone quiet now; `play` appends messages in
# their order and lets compression and publishing happen when the rules of
# eva.core.timing say, with the messages' own timestamps as the clock.
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

from eva.core.events import AnyEvent, LineWritten, MessagePosted, PublishReason, RowPublished
from eva.core.keys import StreamId
from eva.core.projection import rendered_size
from eva.core.settings import MemorySettings
from eva.core.summarize import Summarizer
from eva.core.timing import compression_due, publish_reason
from eva.memory.compress import CompressStats, compress, run_cutoff
from eva.memory.publish import LineSizes, MeasuredLines, publish
from eva.memory.view import channel_zone
from eva.store.event_store import Appended, EventStore

BUILD_BLOCK = 8192
"""Messages a build works through at a time: their leaves and every merge under a block
of this many are held in memory and appended in one commit (eva.memory.compress)."""


@dataclass(slots=True)
class BuildReport:
    """What a build or a played timeline did."""

    stats: CompressStats = field(default_factory=CompressStats)
    publishes: int = 0
    runs: int = 0
    row_bytes_max: int = 0
    tail_bytes_max: int = 0
    last_row: RowPublished | None = None


@dataclass(slots=True)
class Memory:
    """A channel's memory being built in this process."""

    store: EventStore
    stream: StreamId
    summarizer: Summarizer
    settings: MemorySettings
    sizes: LineSizes = field(default_factory=LineSizes)
    report: BuildReport = field(default_factory=BuildReport)
    on_appended: Callable[[Sequence[AnyEvent]], None] | None = None
    """Told of each batch of events once stored (a progress bar counts the lines)."""
    measured: tuple[MeasuredLines, tzinfo] | None = None
    """While a build runs: the sizes of the lines it wrote, rendered in the channel's zone,
    so that its publish reads none of them back."""

    async def _append(self, stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
        appended = self.store.append(stream, events)
        if self.measured is not None:
            measured, tz = self.measured
            measured.learn((e for e in events if isinstance(e, LineWritten)), tz)
        if self.on_appended is not None:
            self.on_appended(events)
        return appended

    async def compress(
        self,
        now_ms: int,
        upto: int | None = None,
        urgent: bool = True,
        block: int | None = None,
    ) -> None:
        """One compression run up to `upto` (default: keep the newest ~12 KiB as tail).

        Unless `urgent`, merges that would only part-fill a request wait for the next run.
        With `block`, the run goes through the messages a block at a time (a build).
        """
        if upto is None:
            upto = run_cutoff(self.store, self.stream, self.settings)
        stats = await compress(
            self.store,
            self.stream,
            self.summarizer,
            self._append,
            self.settings,
            now_ms,
            upto,
            urgent,
            block=block,
        )
        self.report.stats.add(stats)
        self.report.runs += 1

    async def publish(self, now_ms: int, reason: PublishReason) -> RowPublished | None:
        """Publish if there is anything new to show."""
        tz = channel_zone(self.store.meta(self.stream), self.settings)
        known = self.measured[0] if self.measured is not None and self.measured[1] == tz else None
        row = await publish(
            self.store,
            self.stream,
            self._append,
            self.settings,
            now_ms,
            reason,
            tz,
            self.sizes,
            known,
        )
        if row is not None:
            self.report.publishes += 1
            self.report.row_bytes_max = max(self.report.row_bytes_max, row.row_bytes)
            self.report.last_row = row
        return row

    def _note_tail(self) -> None:
        meta = self.store.meta(self.stream)
        if meta is not None:
            self.report.tail_bytes_max = max(self.report.tail_bytes_max, meta.tail_bytes)

    async def build(self, now_ms: int) -> BuildReport:
        """Compress and publish to completion, as if the chat had gone quiet now."""
        meta = self.store.meta(self.stream)
        self.measured = (MeasuredLines(), channel_zone(meta, self.settings))
        try:
            if meta is not None and (
                meta.unleafed_bytes > self.settings.tail_keep_bytes or meta.ready > 0
            ):  # new leaves to write, or merges a stopped run left ready
                await self.compress(now_ms, block=BUILD_BLOCK)
            await self.publish(now_ms, "build")
        finally:
            self.measured = None
        self._note_tail()
        return self.report

    async def play(self, posts: Iterable[MessagePosted]) -> BuildReport:
        """Append `posts` in order; compress and publish when the rules say, on their clock."""
        settings = self.settings
        pending: list[MessagePosted] = []
        pending_bytes = 0
        last_ms: int | None = None
        for post in posts:
            if last_ms is not None and post.at_ms - last_ms >= settings.quiet_ms:
                # Waiting messages change no leaf, so whether to publish is known without them.
                meta = self.store.meta(self.stream)
                quiet_at = last_ms + settings.quiet_ms
                if meta is not None and publish_reason(meta, quiet_at, last_ms, settings):
                    await self._flush(pending)
                    pending, pending_bytes = [], 0
                    await self._maybe_publish(quiet_at, last_ms)
            pending.append(post)
            pending_bytes += rendered_size(post.author_name, post.content, post.attachments)
            last_ms = post.at_ms
            meta = self.store.meta(self.stream)
            unleafed = (meta.unleafed_bytes if meta else 0) + pending_bytes
            tail = (meta.tail_bytes if meta else 0) + pending_bytes
            if unleafed > settings.compress_at_bytes or tail > settings.overflow_tail_bytes:
                await self._flush(pending)
                pending, pending_bytes = [], 0
                meta = self.store.meta(self.stream)
                if meta is not None and compression_due(meta, settings):
                    await self.compress(post.at_ms, urgent=False)
                await self._maybe_publish(post.at_ms, post.at_ms)
        await self._flush(pending)
        if last_ms is not None:
            await self._maybe_publish(last_ms + settings.quiet_ms, last_ms)
        return self.report

    async def _flush(self, pending: list[MessagePosted]) -> None:
        if pending:
            self.store.append(self.stream, pending)
            self._note_tail()

    async def _maybe_publish(self, now_ms: int, last_input_ms: int) -> None:
        meta = self.store.meta(self.stream)
        if meta is None:
            return
        reason = publish_reason(meta, now_ms, last_input_ms, self.settings)
        if reason is not None:
            await self.publish(now_ms, reason)
