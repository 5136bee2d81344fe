"""A channel actor's timers: decided from the times and the state alone, no clock read."""

from __future__ import annotations

import math

from eva.core.channel_timers import Fired, fired, is_idle, next_deadline, next_retry_delay


def deadline(**changes: float | bool) -> float:
    values: dict[str, float | bool] = {
        "now": 100.0,
        "retry_at": math.inf,
        "publish_pending": False,
        "last_input": 90.0,
        "quiet_timer_for": -math.inf,
        "quiet_seconds": 1800.0,
        "last_active": 90.0,
        "idle_seconds": 60.0,
    }
    values.update(changes)
    return next_deadline(**values)  # type: ignore[arg-type]


def test_an_actor_with_nothing_pending_wakes_to_go_idle() -> None:
    assert deadline() == 150.0


def test_a_pending_publish_wakes_it_once_the_chat_is_quiet_once_per_spell() -> None:
    assert deadline(publish_pending=True, idle_seconds=5000.0) == 90.0 + 1800.0
    # the quiet timer fired for this input already: only going idle is left
    assert deadline(publish_pending=True, quiet_timer_for=90.0) == 150.0


def test_only_future_deadlines_count_but_a_retry_always_does() -> None:
    assert deadline(last_active=10.0) == math.inf  # idle already: no timer left
    assert deadline(last_active=10.0, retry_at=120.0) == 120.0
    assert deadline(retry_at=120.0) == 120.0


def test_idle_once_the_idle_time_has_passed_since_the_last_activity() -> None:
    assert not is_idle(159.9, 100.0, 60.0)
    assert is_idle(160.0, 100.0, 60.0)


def test_the_timers_that_fired() -> None:
    assert fired(100.0, math.inf, 90.0, 30.0) == Fired(retry=False, quiet=False)
    assert fired(120.0, 120.0, 90.0, 30.0) == Fired(retry=True, quiet=True)
    assert fired(119.0, 100.0, 90.0, 30.0) == Fired(retry=True, quiet=False)


def test_retries_wait_twice_as_long_each_time_up_to_a_ceiling() -> None:
    delays = [1.0]
    for _ in range(6):
        delays.append(next_retry_delay(delays[-1], 20.0))
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
