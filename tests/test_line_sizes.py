"""LineSizes: the row lines an actor has rendered, kept across publishes."""

from __future__ import annotations

from datetime import UTC

import pytest

from eva.core.address import Address
from eva.core.events import LineWritten
from eva.core.keys import StreamId
from eva.core.render import render_line
from eva.memory.publish import LineSizes
from eva.store.event_store import EventStore
from eva.store.memory_kv import MemoryBackend

STREAM = StreamId(1, 2)
DAY_MS = 86_400_000


def line(start: int, size: int) -> LineWritten:
    return LineWritten(
        at_ms=1, start=start, size=size, text=f"line {start}+{size}\nsecond",
        first_ms=start * DAY_MS, last_ms=(start + size - 1) * DAY_MS,
    )


def learnt(*addresses: tuple[int, int]) -> LineSizes:
    sizes = LineSizes()
    sizes.use_zone(UTC)
    sizes.learn(line(*address) for address in addresses)
    return sizes


def test_a_learnt_line_is_rendered_as_the_row_shows_it_without_a_read() -> None:
    sizes = learnt((0, 1), (1, 1), (0, 2))
    empty = EventStore(MemoryBackend())  # any read would find nothing
    for start, size in [(0, 1), (1, 1), (0, 2)]:
        address = Address(start, size)
        expected = render_line(address, line(start, size).text, start * DAY_MS,
                               (start + size - 1) * DAY_MS, UTC)
        assert sizes.render(empty, STREAM, address, UTC) == expected
        assert sizes.measure(empty, STREAM, address, UTC) == len(expected.encode())


def test_nothing_is_learnt_before_the_zone_is_known() -> None:
    sizes = LineSizes()
    sizes.learn([line(0, 1)])
    assert not sizes.sizes and not sizes.texts


def test_keep_holds_the_row_the_lines_past_its_end_and_the_sizes_above_it() -> None:
    sizes = learnt((0, 1), (1, 1), (0, 2), (2, 1), (3, 1), (2, 2), (0, 4), (4, 1))
    sizes.keep([Address(0, 2), Address(2, 1)])
    # Past the row's end: (3, 1) and (4, 1), written while the row was chosen.
    assert set(sizes.texts) == {Address(0, 2), Address(2, 1), Address(3, 1), Address(4, 1)}
    # Sizes also of the lines above the row's that a later publish may merge into.
    assert set(sizes.sizes) == {
        Address(0, 2), Address(0, 4), Address(2, 1), Address(2, 2), Address(3, 1), Address(4, 1)
    }
    empty = EventStore(MemoryBackend())
    assert sizes.render(empty, STREAM, Address(4, 1), UTC).startswith("4+1 ")
    with pytest.raises(LookupError):  # merged away: read again, and not in this store
        sizes.render(empty, STREAM, Address(0, 1), UTC)


def test_keep_of_an_empty_row_keeps_every_line() -> None:
    sizes = learnt((0, 1), (1, 1))
    sizes.keep([])
    assert set(sizes.texts) == set(sizes.sizes) == {Address(0, 1), Address(1, 1)}
