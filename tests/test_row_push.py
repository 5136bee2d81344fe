"""The row rule reproduces Taelin's rollback `push`, as DESIGN.md "The row" claims."""

from __future__ import annotations

from eva.core.address import Address, parse_address
from eva.core.row import append_leaves, merge_most_due, sawtooth

# push's list: (message index, bit) pairs, newest first.
PushList = list[tuple[int, int]]


def push(entries: PushList, index: int) -> PushList:
    """Taelin's rollback push: a binary counter over message indexes, newest first."""
    if not entries:
        return [(index, 0)]
    (newest, bit), rest = entries[0], entries[1:]
    if bit == 0:
        return [(newest, 1), *rest]
    return [(index, 0), *push(rest, newest)]


def always(_: Address) -> bool:
    return True


def push_starts(entries: PushList) -> list[int]:
    """push's indexes, oldest first."""
    return [index for index, _ in reversed(entries)]


def test_push_after_0_to_9_matches_design_example() -> None:
    entries: PushList = []
    for index in range(10):
        entries = push(entries, index)
    assert [index for index, _ in entries] == [8, 4, 0]
    row = [Address(start, end - start) for start, end in zip([0, 4, 8], [4, 8, 10], strict=True)]
    assert row == [parse_address("0+4"), parse_address("4+4"), parse_address("8+2")]


def test_row_rule_reproduces_push_for_20000_messages() -> None:
    entries: PushList = []
    row: list[Address] = []
    for index in range(20_001):
        entries = push(entries, index)
        row = append_leaves(row, index + 1)
        merges = 0
        while len(row) > len(entries):
            merged = merge_most_due(row, always)
            assert merged is not None, f"no pair could merge after message {index}"
            row = merged
            merges += 1
        assert merges <= 1
        assert [address.start for address in row] == push_starts(entries), index


def test_row_after_0_to_9_is_the_design_example() -> None:
    entries: PushList = []
    row: list[Address] = []
    for index in range(10):
        entries = push(entries, index)
        row = append_leaves(row, index + 1)
        while len(row) > len(entries):
            merged = merge_most_due(row, always)
            assert merged is not None
            row = merged
    assert row == [Address(0, 4), Address(4, 4), Address(8, 2)]


def test_due_prefers_the_newer_shorter_pair_in_the_design_example() -> None:
    # At T=10: pair 0+4,4+4 has due (10-7)/4 = 3/4; pair 8+1,9+1 has due (10-9)/1 = 1.
    row = [Address(0, 4), Address(4, 4), Address(8, 1), Address(9, 1)]
    assert merge_most_due(row, always) == [Address(0, 4), Address(4, 4), Address(8, 2)]


def test_due_is_not_simply_newest_first() -> None:
    # Within push's steps the most due pair is always the newest one, so this
    # pins the order a sawtooth makes from eight leaves (T=8), by hand:
    # leaf pairs are due 7, 5, 3, 1 (oldest first); 0+2,2+2 is due (8-3)/2 = 5/2;
    # 4+2,6+2 is due (8-7)/2 = 1/2; 0+4,4+4 is due (8-7)/4 = 1/4.
    row = append_leaves([], 8)
    result = sawtooth(row, lambda _: 100, always, high=0, low=0)
    assert result.merges == (
        Address(0, 2),
        Address(2, 2),
        Address(4, 2),
        Address(0, 4),
        Address(6, 2),
        Address(4, 4),
        Address(0, 8),
    )
    assert result.row == [Address(0, 8)]
