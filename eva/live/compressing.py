# When a channel compresses and publishes: its compression runs, their retries, its publishes.
#
# Shell (trio; a part of ChannelActor, see eva.live.channel_state). Whether a run is due,
# how far it reaches and how long a failed one waits are decided in the pure core
# (eva.core.timing, eva.core.channel_timers); this part starts the run's task, takes in its
# end and publishes when the chat has gone quiet or the tail overflows.
# Invariants: at most one compression run per channel; a run's end reaches the actor through
# its inbox, as an input; a publish happens only with new leaves to add; after a failed run
# the channel tries again after a wait that doubles up to `retry_most_seconds`.
from __future__ import annotations

import logging
import math

import trio

from eva.core.channel_timers import next_retry_delay
from eva.core.events import PublishReason
from eva.core.state import StreamMeta
from eva.core.timing import publish_reason, run_reach, run_wanted
from eva.live.channel_state import ChannelState
from eva.live.request import CompressionDone, Request
from eva.memory.compress import CompressStats, compress, run_cutoff
from eva.memory.publish import publish
from eva.memory.remake import remake
from eva.memory.view import RowText, channel_zone

log = logging.getLogger("eva.live.actor")  # the channel actor's log, whichever part of it speaks


class Compressing(ChannelState):
    """The part of a channel's actor that runs compression and publishes."""

    def _publish_pending(self) -> bool:
        meta = self._meta()
        return meta is not None and meta.leaf_frontier > meta.row_frontier

    def _maybe_compress(self, force: bool = False, meta: StreamMeta | None = None) -> None:
        """Start a compression run if one is due (`meta`: the stream's record, if just read)."""
        if self.compressing or self.retry_at != math.inf:
            return
        meta = meta or self._meta()
        if meta is None or not run_wanted(meta, self.shared.settings, force):
            return
        self.compressing = True
        self._compress_scope = trio.CancelScope()
        self._compress_idle = trio.Event()
        self.shared.nursery.start_soon(self._compress)

    async def _compress(self) -> None:
        shared = self.shared
        stats: CompressStats | None = None
        error: BaseException | None = None
        with self._compress_scope:
            try:
                meta = self._meta()
                if meta is not None and meta.stale:
                    stats = await remake(
                        shared.store,
                        self.stream,
                        shared.summarizer,
                        self._append,
                        shared.settings,
                        shared.wall_ms(),
                    )
                    self.sizes.clear()  # lines were made again: render them anew
                    self.row_text = RowText()
                    self.unleafed.clear()
                meta = self._meta()
                cutoff = run_cutoff(shared.store, self.stream, shared.settings)
                upto = run_reach(cutoff, meta, self.unfinished_upto, shared.settings)
                self.unfinished_upto = upto
                more = await compress(
                    shared.store,
                    self.stream,
                    shared.summarizer,
                    self._append,
                    shared.settings,
                    shared.wall_ms(),
                    upto,
                    urgent=False,
                    unleafed=self.unleafed,
                    pause=shared.turns.take,
                )
                meta = self._meta()
                if meta is not None:  # what has its leaf now is read no more
                    for index in [i for i in self.unleafed if i < meta.leaf_frontier]:
                        del self.unleafed[index]
                if stats is None:
                    stats = more
                else:
                    stats.add(more)
            except Exception as caught:
                error = caught
                log.exception("compression of %s failed", self.stream)
        self._compress_idle.set()
        request = Request(CompressionDone(stats, error))
        if self.stopped:
            return
        self.inbox_pending += 1
        try:
            await self.send.send(request)
        except BaseException:
            self.inbox_pending -= 1
            raise

    async def _stop_compression(self) -> None:
        """Cancel a running compression and wait until it has stopped writing."""
        if self.compressing:
            self._compress_scope.cancel()
            await self._compress_idle.wait()

    async def _compression_done(self, done: CompressionDone) -> None:
        self.compressing = False
        stats = done.stats
        if stats is not None:
            self.shared.tasks_done += (
                stats.leaves_model + stats.merges_model + stats.leaves_verbatim + stats.merges_glue
            )
        if done.error is not None or (stats is not None and stats.pending):
            self.shared.runs_failed += 1
            self.retry_at = trio.current_time() + self.retry_delay
            most = self.shared.live.retry_most_seconds
            self.retry_delay = next_retry_delay(self.retry_delay, most)
        else:
            self.retry_delay = self.shared.live.retry_first_seconds
            self.unfinished_upto = 0
        await self._maybe_publish()
        self._maybe_compress()

    async def _maybe_publish(self) -> None:
        meta = self._meta()
        if meta is None:
            return
        now_ms = math.ceil(trio.current_time() * 1000)
        last_ms = math.floor(self.last_input * 1000)
        reason: PublishReason | None = publish_reason(meta, now_ms, last_ms, self.shared.settings)
        if reason is None:
            return
        tz = channel_zone(meta, self.shared.settings)
        published = await publish(
            self.shared.store,
            self.stream,
            self._append,
            self.shared.settings,
            self.shared.wall_ms(),
            reason,
            tz,
            self.sizes,
        )
        if published is not None:
            self.row_text = RowText()  # the prompt reads the new row from what publish rendered
