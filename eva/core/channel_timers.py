# A channel's timers: when its actor next looks at it, when it counts as idle, and how long
# a retry waits after a failure (a compression run, or the bot's commit the disk refused).
#
# Pure: times are arguments, in seconds of the actor's clock (trio's, which tests run on a
# mock clock); nothing here reads a clock. The shell (eva.live.sleep, eva.live.compressing,
# eva.discord.bot) asks these and acts.
# Invariants: only future deadlines count, so a timer never fires twice for one thing; the
# quiet publish is timed once per quiet spell (the spell that began with the last input);
# waits between retries double up to a ceiling.
from __future__ import annotations

from typing import NamedTuple


def is_idle(now: float, last_active: float, idle_seconds: float) -> bool:
    """Whether a channel last active (an input or a read) at `last_active` is idle now."""
    return now - last_active >= idle_seconds


def next_deadline(
    *,
    now: float,
    retry_at: float,
    publish_pending: bool,
    last_input: float,
    quiet_timer_for: float,
    quiet_seconds: float,
    last_active: float,
    idle_seconds: float,
) -> float:
    """The next timer: a retry, the quiet publish (once per quiet spell), going idle.

    `retry_at` is inf when no retry waits; `quiet_timer_for` is the last input whose
    quiet spell the quiet timer fired for already. Compression finishing and new
    inputs reach the actor through its inbox, not through a timer.
    """
    deadlines = [retry_at]
    if publish_pending and quiet_timer_for != last_input:
        deadlines.append(last_input + quiet_seconds)
    idle = last_active + idle_seconds
    if idle > now:
        deadlines.append(idle)
    return min(deadlines)


class Fired(NamedTuple):
    """Which timers are due when the actor wakes on its deadline."""

    retry: bool  # a failed run is tried again now
    quiet: bool  # the chat has been quiet since the last input long enough to publish


def fired(now: float, retry_at: float, last_input: float, quiet_seconds: float) -> Fired:
    """The timers due at `now`."""
    return Fired(retry=now >= retry_at, quiet=now >= last_input + quiet_seconds)


def next_retry_delay(delay: float, most: float) -> float:
    """The wait before the retry after one that waited `delay` failed too: twice as long,
    at most `most`."""
    return min(delay * 2, most)
