# MemoryTables.holds: whether a table holds exactly the rows given, in any order it was written.
from __future__ import annotations

import pytest

from eva.core.memtables import MemoryTables, OverlayTables

ROWS = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def tables_written(order: list[tuple[bytes, bytes]]) -> MemoryTables:
    tables = MemoryTables()
    tables.put_many("postings", order)
    return tables


@pytest.mark.parametrize("order", [ROWS, ROWS[::-1], [ROWS[1], ROWS[0], ROWS[2]]])
def test_the_same_rows_are_held_whatever_order_they_were_written_in(
    order: list[tuple[bytes, bytes]],
) -> None:
    assert tables_written(order).holds("postings", ROWS)


@pytest.mark.parametrize(
    "rows",
    [
        [(b"a", b"1"), (b"b", b"2"), (b"c", b"4")],  # a value differs
        [(b"a", b"1"), (b"b", b"2"), (b"d", b"3")],  # a key differs
        ROWS[:2],  # a row is missing
        [*ROWS, (b"d", b"4")],  # a row too many
        [],
    ],
)
@pytest.mark.parametrize("order", [ROWS, ROWS[::-1]])
def test_other_rows_are_not_held(
    rows: list[tuple[bytes, bytes]], order: list[tuple[bytes, bytes]]
) -> None:
    assert not tables_written(order).holds("postings", rows)


def test_an_empty_table_holds_no_rows() -> None:
    assert MemoryTables().holds("postings", [])
    assert not MemoryTables().holds("postings", ROWS[:1])


def test_first_key_of_a_range_sees_staged_changes() -> None:
    base = MemoryTables()
    for key in (b"b1", b"b3", b"c"):
        base.put("postings", key, b"value")
    assert base.first_key("postings", b"b", b"c") == b"b1"
    assert base.first_key("postings", b"b4", b"c") is None
    staged = OverlayTables(base)
    staged.delete("postings", b"b1")
    staged.put("postings", b"b2", b"value")
    assert staged.first_key("postings", b"b", b"c") == b"b2"
