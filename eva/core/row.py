# The row: the lines Eva reads, and the rule that decides which of them merge.
#
# Pure: works on addresses only. It does not know line texts, only what the
# caller tells it through `has_line` (does a line exist at this address?) and
# `line_bytes` (how many bytes that line renders to).
# Invariants of a row: its addresses are valid and cover messages 0 .. F-1
# (F = the frontier) exactly once, oldest first. Appending leaves only adds at
# the end; a merge replaces two adjacent siblings by their parent in place.
# Which pair merges first is decided by `due`, compared exactly (no floats),
# with ties going to the oldest pair.
from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import NamedTuple

from eva.core.address import Address, is_valid, last, leaves, level, parent

HIGH_MARK_BYTES = 96 * 1024
LOW_MARK_BYTES = 48 * 1024

HasLine = Callable[[Address], bool]
LineBytes = Callable[[Address], int]


def frontier(row: Sequence[Address]) -> int:
    """F: the number of messages the row covers (its last entry ends at F-1)."""
    return last(row[-1]) + 1 if row else 0


def is_row(row: Sequence[Address]) -> bool:
    """Whether `row` is valid addresses covering 0 .. F-1 exactly once, oldest first."""
    expected_start = 0
    for address in row:
        if not is_valid(address) or address.start != expected_start:
            return False
        expected_start += address.size
    return True


def append_leaves(row: Sequence[Address], new_frontier: int) -> list[Address]:
    """The row extended by one leaf for each message from its frontier up to `new_frontier`."""
    old_frontier = frontier(row)
    if new_frontier < old_frontier:
        raise ValueError(f"the row already covers {old_frontier} messages, not {new_frontier}")
    return [*row, *leaves(old_frontier, new_frontier)]


def is_pair(older: Address, newer: Address) -> bool:
    """Whether two adjacent entries are siblings (l, i) and (l, i+1) with i even."""
    return older.size == newer.size and older.start % (older.size * 2) == 0


def mergeable_pairs(row: Sequence[Address]) -> list[int]:
    """Positions p in the row where row[p] and row[p+1] form a pair, oldest first."""
    return [p for p in range(len(row) - 1) if is_pair(row[p], row[p + 1])]


def due(pair_last: int, pair_level: int, covered: int) -> Fraction:
    """How due a pair is for merging: (T - last) / 2**l.

    `covered` is T, the number of messages the row covers; `pair_last` the
    index of the pair's last message; `pair_level` the level l of each half.
    """
    return Fraction(covered - pair_last, 2**pair_level)


def _due_key(pair_last: int, pair_level: int, covered: int, scale_bits: int) -> int:
    """`due` times 2**scale_bits, an exact integer while pair_level <= scale_bits."""
    return (covered - pair_last) << (scale_bits - pair_level)


def _scale_bits(covered: int) -> int:
    # A pair at level l covers 2**(l+1) <= covered messages, so l < covered.bit_length().
    return covered.bit_length()


def most_due_pair(row: Sequence[Address], has_line: HasLine) -> int | None:
    """The position of the most due pair whose parent line exists (oldest among equals)."""
    covered = frontier(row)
    scale_bits = _scale_bits(covered)
    best_position: int | None = None
    best_key = -1
    for position in range(len(row) - 1):
        older = row[position]
        if not is_pair(older, row[position + 1]):
            continue
        key = _due_key(last(older) + older.size, level(older.size), covered, scale_bits)
        if key > best_key and has_line(parent(older)):
            best_position, best_key = position, key
    return best_position


def merge_at(row: Sequence[Address], position: int) -> list[Address]:
    """The row with the pair at `position` replaced by its parent."""
    older = row[position]
    if position + 1 >= len(row) or not is_pair(older, row[position + 1]):
        raise ValueError(f"no pair at position {position}")
    return [*row[:position], parent(older), *row[position + 2 :]]


def merge_most_due(row: Sequence[Address], has_line: HasLine) -> list[Address] | None:
    """The row after merging its most due pair whose parent exists; None if none can merge."""
    position = most_due_pair(row, has_line)
    return None if position is None else merge_at(row, position)


def row_bytes(row: Sequence[Address], line_bytes: LineBytes) -> int:
    """The size of the rendered row: its lines joined by newlines."""
    return sum(line_bytes(address) for address in row) + max(len(row) - 1, 0)


class SawtoothResult(NamedTuple):
    """What one sawtooth did: the new row, the parents it merged in order, its bytes."""

    row: list[Address]
    merges: tuple[Address, ...]
    stopped_early: bool
    """True when the row stayed above the low mark because no pair could merge."""
    row_bytes: int


def sawtooth(
    row: Sequence[Address],
    line_bytes: LineBytes,
    has_line: HasLine,
    high: int = HIGH_MARK_BYTES,
    low: int = LOW_MARK_BYTES,
    *,
    record_merges: bool = True,
) -> SawtoothResult:
    """Merge by priority once the rendered row passes `high`, until it is at most `low`.

    Makes exactly the merges that repeated `merge_most_due` would make. Stops
    early, leaving the rest for the next publish, when no pair has its parent.
    Without `record_merges` the result's `merges` is empty (a build's first
    publish merges about once per message, and needs only the row). The work
    is held in arrays (each entry's start, size and bytes) and the heap in one
    integer a pair, so a row of a million leaves costs tens of bytes a leaf.
    """
    if low > high:
        raise ValueError(f"the low mark {low} is above the high mark {high}")
    sizes = array("q", map(line_bytes, row))
    total = sum(sizes) + max(len(row) - 1, 0)
    if total <= high:
        return SawtoothResult(list(row), (), False, total)

    covered = frontier(row)
    scale_bits = _scale_bits(covered)
    count = len(row)
    starts = array("q", [address.start for address in row])
    spans = array("q", [address.size for address in row])
    # A doubly linked list over positions; a merge keeps the older node for the parent.
    newer_of = array("q", range(1, count + 1))
    older_of = array("q", range(-1, count - 1))
    alive = bytearray(b"\x01") * count
    # Heap items: (bound - due key, start, older node) packed into one integer, so that
    # integer order is the order of those triples; the newer node is the older's
    # neighbour (each entry is in at most one pair).
    bound = 1 << (2 * scale_bits + 1)  # above every due key
    heap: list[int] = []
    push = heapq.heappush

    def offer(older_node: int, newer_node: int) -> None:
        """Queue the pair of two neighbours if they are siblings and their parent exists."""
        if older_node < 0 or newer_node >= count:
            return
        span = spans[older_node]
        start = starts[older_node]
        double = span * 2
        if span != spans[newer_node] or start % double or not has_line(Address(start, double)):
            return
        # the due key of the pair (its last message start+double-1, its halves' level)
        key = (covered - start - double + 1) << (scale_bits - span.bit_length() + 1)
        push(heap, (bound - key) << 128 | start << 64 | older_node)

    for node in range(count - 1):
        offer(node, node + 1)

    merges: list[Address] = []
    mask = (1 << 64) - 1
    while total > low and heap:
        item = heapq.heappop(heap)
        older_node = item & mask
        newer_node = newer_of[older_node]
        start, span = starts[older_node], spans[older_node]
        # Items never go stale (each entry is in at most one pair); checked anyway.
        if not (
            alive[older_node]
            and newer_node < count
            and alive[newer_node]
            and start == (item >> 64) & mask
            and span == spans[newer_node]
            and start % (span * 2) == 0
        ):
            continue
        merged = Address(start, span * 2)  # the parent: a pair's start is its parent's
        total -= sizes[older_node] + sizes[newer_node] + 1
        spans[older_node] = merged.size
        sizes[older_node] = line_bytes(merged)
        total += sizes[older_node]
        alive[newer_node] = False
        after = newer_of[newer_node]
        newer_of[older_node] = after
        if after < count:
            older_of[after] = older_node
        if record_merges:
            merges.append(merged)
        offer(older_of[older_node], older_node)
        offer(older_node, after)

    new_row = [Address(starts[node], spans[node]) for node in range(count) if alive[node]]
    return SawtoothResult(new_row, tuple(merges), total > low, total)
