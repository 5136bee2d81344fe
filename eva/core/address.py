# Addresses of memory lines: `start+size` names the messages start .. start+size-1.
#
# Pure arithmetic on message indexes; knows nothing of text, time or storage.
# Invariants of a valid address: size is a power of two (>= 1), start >= 0 and
# start is a multiple of size. Every helper here takes and returns valid
# addresses; `parse_address` is the one door for text from outside.
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import msgspec

ADDRESS_HELP = (
    "an address is START+SIZE with SIZE a power of two and START a multiple of SIZE, e.g. 8+4"
)

_ADDRESS_TEXT = re.compile(r"(\d+)\+(\d+)", re.ASCII)


class Address(msgspec.Struct, frozen=True, order=True, array_like=True, gc=False):
    """The line covering the `size` messages from index `start` on.

    A record the cyclic collector never tracks (a live channel keeps tens of
    thousands of addresses in its caches; a tuple subclass would stay tracked and
    lengthen every collection), encoded as `[start, size]`. It is not equal to a
    plain tuple: compare addresses with addresses. `start, size = address` works.
    """

    start: int
    size: int

    def __iter__(self) -> Iterator[int]:
        yield self.start
        yield self.size


def is_power_of_two(number: int) -> bool:
    """Whether `number` is 1, 2, 4, 8, ..."""
    return number > 0 and number & (number - 1) == 0


def is_valid(address: Address) -> bool:
    """Whether `address` is aligned: size a power of two, start a multiple of size."""
    start, size = address.start, address.size
    return start >= 0 and is_power_of_two(size) and start % size == 0


def parse_address(text: str) -> Address:
    """The address written as `start+size`, e.g. `8+2`; ValueError when it is not valid."""
    match = _ADDRESS_TEXT.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an address: {ADDRESS_HELP}")
    address = Address(int(match.group(1)), int(match.group(2)))
    if not is_valid(address):
        raise ValueError(f"{text!r} is not an address: {ADDRESS_HELP}")
    return address


def format_address(address: Address) -> str:
    """The text form `start+size`."""
    return f"{address.start}+{address.size}"


def address_at(start: int, size: int) -> Address:
    """`Address(start, size)` (it checks nothing)."""
    return Address(start, size)


def addresses_of(pairs: Iterable[tuple[int, int]]) -> list[Address]:
    """Addresses from (start, size) pairs, as a row event holds them."""
    return [Address(start, size) for start, size in pairs]


def leaves(start: int, stop: int) -> list[Address]:
    """The leaves of messages start..stop-1."""
    return [Address(index, 1) for index in range(start, stop)]


def leaf(index: int) -> Address:
    """The address of the leaf of message `index`."""
    return Address(index, 1)


def level(size: int) -> int:
    """The level of a line of `size` messages: log2(size); leaves are level 0."""
    if not is_power_of_two(size):
        raise ValueError(f"size {size} is not a power of two")
    return size.bit_length() - 1


def last(address: Address) -> int:
    """The index of the last message the line covers."""
    return address.start + address.size - 1


def parent(address: Address) -> Address:
    """The line one level up that contains `address` as one of its halves."""
    start, size = address.start, address.size
    double = size * 2
    return Address(start - start % double, double)


def sibling(address: Address) -> Address:
    """The other half of `address`'s parent."""
    start, size = address.start, address.size
    return Address(start ^ size, size)


def halves(address: Address) -> tuple[Address, Address]:
    """The older and newer halves of a line of size >= 2."""
    start, size = address.start, address.size
    if size < 2:
        raise ValueError(f"the leaf {format_address(address)} has no halves")
    half = size // 2
    return Address(start, half), Address(start + half, half)
