"""The pace of compression's lines in the writer's groups: plain rules over given times."""

from __future__ import annotations

import math

from eva.live.pace import ALONE_EVENTS, QUIET_EVENTS, TURN_EVENTS, Pace


def started(**settings: float) -> Pace:
    pace = Pace(quiet_after_s=0.25, every_s=0.2, busy_messages_per_s=1000, window_s=0.1)
    for name, value in settings.items():
        setattr(pace, name, value)
    pace.start(0.0)
    return pace


def test_lines_go_alone_between_everyday_posts_and_wait_beside_them() -> None:
    pace = started()
    assert pace.budget(0.01, people=1, urgent=True, waiting=True) == 0
    assert pace.budget(0.02, people=0, urgent=False, waiting=True) == ALONE_EVENTS
    assert pace.budget(0.03, people=1, urgent=True, waiting=True) == 0
    assert pace.due() == -math.inf  # no burst: lines with nothing urgent go at once


def test_lines_go_along_with_posts_at_their_turn_so_they_are_never_starved() -> None:
    pace = started()
    # Posts in every group, at an everyday rate: lines wait beside them until their turn.
    budgets = [pace.budget(t / 100, people=1, urgent=True, waiting=True) for t in range(1, 60)]
    turns = [t for t, budget in zip(range(1, 60), budgets, strict=True) if budget]
    assert turns == [20, 40]
    assert {budgets[t - 1] for t in turns} == {TURN_EVENTS}


def test_a_turn_is_used_only_by_lines_that_wait() -> None:
    pace = started()
    assert pace.budget(0.3, people=1, urgent=True, waiting=False) == TURN_EVENTS
    assert pace.budget(0.31, people=1, urgent=True, waiting=True) == TURN_EVENTS
    assert pace.budget(0.32, people=1, urgent=True, waiting=True) == 0


def test_in_a_burst_lines_go_only_at_their_turns_even_with_nothing_urgent() -> None:
    pace = started()
    assert pace.budget(0.05, people=200, urgent=True, waiting=True) == 0
    assert not pace.busy  # counted over a window of 0.1 s at least
    assert pace.budget(0.1, people=200, urgent=True, waiting=True) == 0
    assert pace.busy  # 400 in 0.1 s: 4,000 a second against 1,000
    assert pace.budget(0.11, people=0, urgent=False, waiting=True) == 0
    assert pace.due() == 0.2  # the first turn, a turn's length from the start
    assert pace.budget(0.19, people=200, urgent=True, waiting=True) == 0
    assert pace.budget(0.2, people=0, urgent=False, waiting=True) == TURN_EVENTS
    assert pace.busy
    assert pace.due() == 0.4
    assert pace.budget(0.21, people=0, urgent=False, waiting=True) == 0

def test_a_burst_ends_when_the_rate_falls() -> None:
    pace = started()
    pace.budget(0.1, people=500, urgent=True, waiting=True)
    assert pace.busy
    pace.budget(0.25, people=10, urgent=True, waiting=True)  # 10 in 0.15 s
    assert not pace.busy
    assert pace.budget(0.26, people=0, urgent=False, waiting=True) == ALONE_EVENTS


def test_once_nobody_posts_lines_go_in_long_groups_whatever_eva_appends() -> None:
    pace = started()
    pace.budget(0.125, people=500, urgent=True, waiting=True)
    assert pace.busy
    # Eva's own rows are urgent, but not people's: they do not hold quiet off.
    assert pace.budget(0.25, people=0, urgent=True, waiting=True) == TURN_EVENTS
    assert pace.budget(0.3125, people=0, urgent=True, waiting=True) == 0
    assert pace.budget(0.375, people=0, urgent=True, waiting=True) == QUIET_EVENTS
    assert pace.budget(0.5, people=0, urgent=True, waiting=True) == QUIET_EVENTS


def test_a_closing_writer_lets_every_line_go() -> None:
    pace = started()
    pace.budget(0.1, people=500, urgent=True, waiting=True)
    assert pace.budget(0.15, people=0, urgent=False, waiting=True) == 0
    pace.closing = True
    assert pace.due() == -math.inf
    assert pace.budget(0.15, people=0, urgent=False, waiting=True) == QUIET_EVENTS
