# The pace of background appends: how many of compression's line events the
# writer's next group may take.
#
# Plain: times are passed in (the writer's trio clock), nothing else is read.
# The rules:
# - once no group has held people's messages (posts, edits, deletions) for
#   `quiet_after_s`, or when the writer is closing: up to QUIET_EVENTS a group,
#   group after group, since a commit's cost is mostly its own and not its
#   events'. Eva's own rows and records do not count as people's: a catch-up
#   publishes often;
# - else, at the lines' turn (every `every_s`): up to TURN_EVENTS, with the
#   urgent appends waiting or alone. Urgent appends that never let up cannot
#   starve lines: background work is slowed, never stopped;
# - else, with nothing urgent waiting and no burst on: up to ALONE_EVENTS;
# - else (a burst: people's messages faster than `busy_messages_per_s`, counted
#   over `window_s` or more) none. Compression's runs each wait for their lines
#   to be stored, so in a burst they take only a small share of the process
#   and the burst is stored without racing them for the cores; they catch up
#   once it ends.
# The first append a group takes goes whole, however long (the writer's rule).
from __future__ import annotations

import math
from dataclasses import dataclass, field

QUIET_EVENTS = 1024
"""Background events a group takes once nobody posts."""
TURN_EVENTS = 256
"""Background events a group takes at the lines' turn."""
ALONE_EVENTS = 128
"""Background events a group of nothing else takes while people post at an everyday rate."""
QUIET_AFTER_S = 0.25
"""Seconds since a group last held people's messages after which the writer counts as quiet."""
EVERY_S = 0.2
"""Seconds between the lines' turns while people post."""
BUSY_MESSAGES_PER_S = 5000.0
"""People's messages a second from which they count as a burst."""
WINDOW_S = 0.1
"""Seconds, at least, over which the rate of people's messages is counted."""


@dataclass(slots=True)
class Pace:
    """The rules above for one writer, with what they remember between groups."""

    quiet_after_s: float = QUIET_AFTER_S
    every_s: float = EVERY_S
    busy_messages_per_s: float = BUSY_MESSAGES_PER_S
    window_s: float = WINDOW_S
    closing: bool = False
    busy: bool = False  # a burst is on, as last counted
    _last_people: float = field(default=-math.inf, init=False)
    _last_lines: float = field(default=-math.inf, init=False)  # a group last took lines
    _counted: int = field(default=0, init=False)
    _counted_from: float = field(default=-math.inf, init=False)

    def start(self, now: float) -> None:
        """The writer starts: the first turn and the first count run from `now`."""
        self._last_lines = self._counted_from = now

    def budget(self, now: float, people: int, urgent: bool, waiting: bool) -> int:
        """Background events the group made at `now` may take; it holds `people` of
        people's messages, and urgent appends or not; `waiting`: background appends
        wait (if so and the budget is not 0, the lines' turn is used)."""
        if people:
            self._last_people = now
            self._counted += people
        span = now - self._counted_from
        if span >= self.window_s:
            self.busy = self._counted >= self.busy_messages_per_s * span
            self._counted, self._counted_from = 0, now
        if self.closing or now - self._last_people >= self.quiet_after_s:
            budget = QUIET_EVENTS
        elif now - self._last_lines >= self.every_s:
            budget = TURN_EVENTS
        elif not urgent and not self.busy:
            budget = ALONE_EVENTS
        else:
            return 0
        if waiting:
            self._last_lines = now
        return budget

    def due(self) -> float:
        """When background appends waiting with nothing urgent may go: at once unless a
        burst is on; in one, at the lines' next turn or once quiet."""
        if self.closing or not self.busy:
            return -math.inf
        return min(self._last_people + self.quiet_after_s, self._last_lines + self.every_s)
