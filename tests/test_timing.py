"""When a channel publishes: decided from its record and the time alone."""

from __future__ import annotations

from eva.core.settings import MemorySettings
from eva.core.state import StreamMeta
from eva.core.timing import overflow_due, publish_reason, run_reach, run_wanted

SETTINGS = MemorySettings(overflow_tail_bytes=1000, quiet_ms=60_000)


def meta(tail_bytes: int, leaf_frontier: int, row_frontier: int = 10) -> StreamMeta:
    return StreamMeta(
        guild_id=1, channel_id=2, messages=100, tail_bytes=tail_bytes,
        leaf_frontier=leaf_frontier, row_frontier=row_frontier,
    )


def test_an_overflowing_tail_publishes_only_with_new_leaves() -> None:
    long_with_leaves = meta(tail_bytes=1001, leaf_frontier=20)
    long_without = meta(tail_bytes=1001, leaf_frontier=10)
    short_with_leaves = meta(tail_bytes=1000, leaf_frontier=20)
    assert overflow_due(long_with_leaves, SETTINGS)
    assert not overflow_due(long_without, SETTINGS)  # a publish would change nothing
    assert not overflow_due(short_with_leaves, SETTINGS)
    assert publish_reason(long_with_leaves, 0, 0, SETTINGS) == "overflow"
    assert publish_reason(long_without, 10**9, 0, SETTINGS) is None
    assert publish_reason(short_with_leaves, 0, 0, SETTINGS) is None
    assert publish_reason(short_with_leaves, 60_000, 0, SETTINGS) == "quiet"


def test_a_run_is_wanted_when_asked_for_when_lines_are_stale_or_compression_is_due() -> None:
    settings = MemorySettings(compress_at_bytes=1000, tail_keep_bytes=100)
    quiet = StreamMeta(guild_id=1, channel_id=2, unleafed_bytes=1000)
    assert not run_wanted(quiet, settings)
    assert run_wanted(quiet, settings, force=True)
    assert run_wanted(StreamMeta(guild_id=1, channel_id=2, stale=3), settings)
    assert run_wanted(StreamMeta(guild_id=1, channel_id=2, unleafed_bytes=1001), settings)


def test_a_run_reaches_its_cutoff_only_when_compression_is_due() -> None:
    settings = MemorySettings(compress_at_bytes=1000, tail_keep_bytes=100)
    due = StreamMeta(guild_id=1, channel_id=2, leaf_frontier=40, unleafed_bytes=1001)
    not_due = StreamMeta(guild_id=1, channel_id=2, leaf_frontier=40, unleafed_bytes=10)
    assert run_reach(90, due, 0, settings) == 90
    assert run_reach(90, not_due, 0, settings) == 40  # only the merges left ready
    assert run_reach(90, not_due, 60, settings) == 60  # and what a failed run left undone
    assert run_reach(90, None, 0, settings) == 90
