"""LineSizes: the row lines an actor has rendered, kept across publishes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, tzinfo

import msgspec
import pytest

from eva.core.address import Address
from eva.core.events import LineWritten
from eva.core.keys import StreamId
from eva.core.render import render_line
from eva.memory import publish as publish_module
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


def without_a_read(
    ask: Callable[[EventStore, StreamId, Address, tzinfo], object],
    *addresses: tuple[int, int],
) -> set[Address]:
    """The lines of `addresses` that `ask` (a LineSizes' render or measure) answers
    without a read."""
    empty = EventStore(MemoryBackend())  # any read would find nothing
    found = set()
    for address in (Address(*a) for a in addresses):
        try:
            ask(empty, STREAM, address, UTC)
        except LookupError:
            continue
        found.add(address)
    return found


def readable(sizes: LineSizes, *addresses: tuple[int, int]) -> set[Address]:
    return without_a_read(sizes.render, *addresses)


def measurable(sizes: LineSizes, *addresses: tuple[int, int]) -> set[Address]:
    return without_a_read(sizes.measure, *addresses)


ALL = ((0, 1), (1, 1), (0, 2), (2, 1), (3, 1), (2, 2), (0, 4), (4, 1))


def test_nothing_is_learnt_before_the_zone_is_known() -> None:
    sizes = LineSizes()
    sizes.learn([line(0, 1)])
    sizes.use_zone(UTC)
    assert measurable(sizes, (0, 1)) == set()


def test_a_line_is_rendered_only_once_it_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[Address] = []

    def counted(address: Address, text: str, first_ms: int, last_ms: int, tz: tzinfo) -> str:
        rendered.append(address)
        return render_line(address, text, first_ms, last_ms, tz)

    monkeypatch.setattr(publish_module, "render_line", counted)
    sizes = learnt(*ALL)
    assert rendered == []
    assert measurable(sizes, (0, 2)) == {Address(0, 2)}
    assert readable(sizes, (0, 2)) == {Address(0, 2)}
    assert rendered == [Address(0, 2)]


def test_a_line_learnt_again_reads_as_made_again() -> None:
    sizes = learnt((0, 1))
    empty = EventStore(MemoryBackend())
    before = sizes.render(empty, STREAM, Address(0, 1), UTC)
    sizes.learn([msgspec.structs.replace(line(0, 1), text="made again")])
    after = sizes.render(empty, STREAM, Address(0, 1), UTC)
    assert before != after and after.endswith("|made again")
    assert sizes.measure(empty, STREAM, Address(0, 1), UTC) == len(after.encode())


def test_keep_holds_the_row_the_lines_past_its_end_and_the_sizes_above_it() -> None:
    sizes = learnt(*ALL)
    sizes.keep([Address(0, 2), Address(2, 1)])
    # The row, and past its end (3, 1) and (4, 1), written while the row was chosen,
    # read without a read; and so are measured the lines above the row's that a
    # later publish may merge into. What was merged away is read again.
    assert readable(sizes, (0, 2), (2, 1), (3, 1), (4, 1)) == {
        Address(0, 2), Address(2, 1), Address(3, 1), Address(4, 1)
    }
    assert measurable(sizes, *ALL) == {
        Address(0, 2), Address(0, 4), Address(2, 1), Address(2, 2), Address(3, 1), Address(4, 1)
    }
    assert readable(sizes, (0, 1), (1, 1)) == set()


def test_keep_holds_what_was_measured_before_as_what_was_not() -> None:
    sizes = learnt(*ALL)
    assert measurable(sizes, *ALL) == {Address(*a) for a in ALL}  # all rendered now
    sizes.keep([Address(0, 2), Address(2, 1)])
    assert measurable(sizes, *ALL) == {
        Address(0, 2), Address(0, 4), Address(2, 1), Address(2, 2), Address(3, 1), Address(4, 1)
    }
    assert readable(sizes, (0, 1), (1, 1), (0, 4)) == set()


def test_keep_of_an_empty_row_keeps_every_line() -> None:
    sizes = learnt((0, 1), (1, 1))
    sizes.keep([])
    assert readable(sizes, (0, 1), (1, 1)) == measurable(sizes, (0, 1), (1, 1)) == {
        Address(0, 1), Address(1, 1)
    }
