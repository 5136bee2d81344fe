# How a channel's actor sleeps and wakes: its timers, when it may stop, what it resumes.
#
# Shell (trio; a part of ChannelActor, see eva.live.channel_state). The deadlines and the
# idle rule are the pure core's (eva.core.channel_timers); this part reads the state they
# need and acts when they fire.
# Invariants: an actor sleeps only once idle with nothing pending (no run, no post in
# flight or refused, no publish due, no retry waiting, nothing in either inbox); waking
# resumes what the projections say is unfinished, without reading the tail.
from __future__ import annotations

import math

import trio

from eva.core.channel_timers import fired, is_idle, next_deadline
from eva.live.channel_inputs import ChannelInputs


class Sleeping(ChannelInputs):
    """The part of a channel's actor that keeps its timers."""

    def _may_sleep(self) -> bool:
        if not is_idle(trio.current_time(), self._last_active(), self.shared.live.idle_seconds):
            return False  # the common case, asked once per input: decided without a read
        stats = self.receive.statistics()
        reads_waiting = 0 if self._reads is None else self._reads[1].statistics().tasks_waiting_send
        return (
            not self.compressing
            and not self._in_flight
            and not self._refused
            and not self._overflowing
            and not self._publish_pending()
            and self.retry_at == math.inf
            and stats.current_buffer_used == 0
            and stats.tasks_waiting_send == 0
            and reads_waiting == 0
            and self.reads_pending == 0
        )

    def _next_deadline(self) -> float:
        """The next timer (see eva.core.channel_timers.next_deadline)."""
        return next_deadline(
            now=trio.current_time(),
            retry_at=self.retry_at,
            publish_pending=self._publish_pending(),
            last_input=self.last_input,
            quiet_timer_for=self._quiet_timer_for,
            quiet_seconds=self.shared.settings.quiet_ms / 1000,
            last_active=self._last_active(),
            idle_seconds=self.shared.live.idle_seconds,
        )

    async def _wake(self) -> None:
        """Resume what the projections say is unfinished (a publish due, compression due).

        The tail is read when first asked for (`prompt`), not here: when many
        channels wake at once, most are woken by posts, and reading each one's
        tail would hold the loop while those posts wait for their commits.
        """
        meta = self._meta()
        if meta is None:
            return
        if meta.messages and not self._touched:  # else posts taken since are the last input
            quiet_for = self.shared.wall_ms() - meta.last_ms
            self.last_input_ms = meta.last_ms
            self.last_input = trio.current_time() - max(0, quiet_for) / 1000
        await self._maybe_publish()
        self._maybe_compress(force=meta.ready > 0)

    async def _on_timer(self) -> None:
        """Act on the timers that fired: a retry of compression, the quiet publish."""
        quiet_seconds = self.shared.settings.quiet_ms / 1000
        due = fired(trio.current_time(), self.retry_at, self.last_input, quiet_seconds)
        if due.retry:
            self.retry_at = math.inf
            self._maybe_compress(force=True)
        if due.quiet:
            self._quiet_timer_for = self.last_input
        await self._maybe_publish()
