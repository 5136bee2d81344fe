"""Invariants of the row: coverage, the sawtooth's marks, growth only at the end."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eva.core.address import (
    Address,
    format_address,
    halves,
    is_valid,
    last,
    level,
    parent,
    parse_address,
    sibling,
)
from eva.core.row import (
    append_leaves,
    due,
    frontier,
    is_row,
    merge_most_due,
    mergeable_pairs,
    most_due_pair,
    row_bytes,
    sawtooth,
)


def has_line_for(seed: int, missing_one_in: int) -> Callable[[Address], bool]:
    """A deterministic 'does this parent exist?' answer; missing_one_in=0 means all exist."""

    def has_line(address: Address) -> bool:
        if missing_one_in == 0:
            return True
        return hash((seed, address.start, address.size)) % missing_one_in != 0

    return has_line


def line_bytes_for(seed: int) -> Callable[[Address], int]:
    def line_bytes(address: Address) -> int:
        return 20 + level(address.size) * 8 + hash((seed, address.start)) % 40

    return line_bytes


def assert_is_row(row: list[Address], covered: int) -> None:
    assert all(is_valid(address) for address in row)
    assert [address.start for address in row] == [
        sum(earlier.size for earlier in row[:position]) for position in range(len(row))
    ]
    assert frontier(row) == covered
    assert is_row(row)


publishes = st.lists(
    st.tuples(st.integers(0, 80), st.integers(0, 3000), st.integers(0, 3000)),
    min_size=1,
    max_size=8,
)


@settings(deadline=None)
@given(
    steps=publishes,
    seed=st.integers(0, 2**16),
    missing_one_in=st.sampled_from([0, 0, 2, 5]),
)
def test_row_stays_a_row_and_sawtooth_keeps_its_marks(
    steps: list[tuple[int, int, int]], seed: int, missing_one_in: int
) -> None:
    has_line = has_line_for(seed, missing_one_in)
    line_bytes = line_bytes_for(seed)
    row: list[Address] = []
    covered = 0
    for new_messages, mark_a, mark_b in steps:
        low, high = sorted((mark_a, mark_b))
        covered += new_messages
        grown = append_leaves(row, covered)
        assert grown[: len(row)] == row
        assert_is_row(grown, covered)

        result = sawtooth(grown, line_bytes, has_line, high=high, low=low)
        assert_is_row(result.row, covered)
        assert result.row_bytes == row_bytes(result.row, line_bytes)
        if row_bytes(grown, line_bytes) <= high:
            assert result.row == grown
            assert result.merges == ()
        elif result.stopped_early:
            assert result.row_bytes > low
            assert merge_most_due(result.row, has_line) is None
        else:
            assert result.row_bytes <= low

        # The sawtooth makes exactly the merges repeated merge_most_due makes.
        expected = grown
        for merged in result.merges:
            position = most_due_pair(expected, has_line)
            assert position is not None
            assert parent(expected[position]) == merged
            next_row = merge_most_due(expected, has_line)
            assert next_row is not None
            expected = next_row
        assert expected == result.row
        row = result.row


@settings(deadline=None)
@given(st.integers(0, 300), st.integers(0, 300))
def test_appending_leaves_only_grows_the_end(first: int, more: int) -> None:
    row = append_leaves([], first)
    merged = row
    while (step := merge_most_due(merged, lambda _: True)) is not None:
        merged = step
    grown = append_leaves(merged, first + more)
    assert grown[: len(merged)] == merged
    assert grown[len(merged) :] == [Address(index, 1) for index in range(first, first + more)]


def test_append_leaves_refuses_to_shrink() -> None:
    with pytest.raises(ValueError, match="already covers 4"):
        append_leaves(append_leaves([], 4), 3)


def test_mergeable_pairs_are_aligned_siblings_only() -> None:
    # 1+1,2+1 are adjacent and the same size but not siblings; 2+2,4+2 likewise.
    row = [Address(0, 1), Address(1, 1), Address(2, 2), Address(4, 2), Address(6, 1)]
    assert mergeable_pairs(row) == [0]
    assert mergeable_pairs([Address(0, 2), Address(2, 1), Address(3, 1)]) == [1]


def test_merge_skips_pairs_whose_parent_is_missing() -> None:
    row = [Address(0, 1), Address(1, 1), Address(2, 1), Address(3, 1)]
    # 0+1,1+1 is more due, but its parent line 0+2 does not exist yet.
    assert merge_most_due(row, lambda address: address != Address(0, 2)) == [
        Address(0, 1),
        Address(1, 1),
        Address(2, 2),
    ]
    assert merge_most_due(row, lambda _: False) is None


def test_equal_due_goes_to_the_oldest_pair() -> None:
    # At T=7, pair 0+2,2+2 (level 1, last 3) and pair 4+1,5+1 (level 0, last 5)
    # are both due 2: the older one merges first.
    row = [Address(0, 2), Address(2, 2), Address(4, 1), Address(5, 1), Address(6, 1)]
    assert due(3, 1, 7) == due(5, 0, 7) == 2
    assert merge_most_due(row, lambda _: True) == [
        Address(0, 4),
        Address(4, 1),
        Address(5, 1),
        Address(6, 1),
    ]
    result = sawtooth(row, lambda _: 10, lambda _: True, high=0, low=0)
    assert result.merges[:2] == (Address(0, 4), Address(4, 2))


@given(
    st.integers(0, 10_000),
    st.integers(0, 12),
    st.integers(0, 10_000),
    st.integers(0, 12),
)
def test_due_is_exact(last_a: int, level_a: int, last_b: int, level_b: int) -> None:
    covered = max(last_a, last_b) + 1
    assert due(last_a, level_a, covered) == Fraction(covered - last_a, 2**level_a)
    assert (due(last_a, level_a, covered) > due(last_b, level_b, covered)) == (
        (covered - last_a) * 2**level_b > (covered - last_b) * 2**level_a
    )


@given(st.integers(0, 2**20), st.integers(0, 20))
def test_address_helpers_agree(position: int, address_level: int) -> None:
    size = 2**address_level
    address = Address(position * size, size)
    assert is_valid(address)
    assert parse_address(format_address(address)) == address
    assert level(address.size) == address_level
    assert last(address) == address.start + size - 1
    assert sibling(sibling(address)) == address
    assert parent(address) == parent(sibling(address))
    older, newer = halves(parent(address))
    assert {older, newer} == {address, sibling(address)}
    assert last(newer) == last(parent(address))


@pytest.mark.parametrize("text", ["8+3", "6+4", "8", "+4", "8+0", "-8+4", "8 + 4", "8+4x", "a+b"])
def test_parse_address_rejects_with_help(text: str) -> None:
    with pytest.raises(ValueError, match=r"START\+SIZE.*e\.g\. 8\+4"):
        parse_address(text)


def test_halves_of_a_leaf_is_an_error() -> None:
    with pytest.raises(ValueError, match="no halves"):
        halves(Address(3, 1))
