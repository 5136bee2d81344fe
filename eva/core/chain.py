# The seal of a channel's log: each event's stored bytes chained to the seal before.
#
# Pure. The seal of event i is blake2b(seal of event i-1 + stored bytes of
# event i), 16 bytes; the first event chains to a seal made from the stream's
# own prefix, so a log cannot be moved to another channel and still verify.
# Seals sit in the `chain` table under the event's own key. Anyone who changes
# a stored event, flips a byte in it, drops one or puts one in the middle
# breaks the chain from there on: `check` names the first event whose seal
# does not follow. Rewriting an event on purpose (a forget erasing words)
# seals again from the first rewritten event to the end, in the same
# transaction, and says so in the log (LogRewritten). The newest seal, the
# head, changes with every event; an operator who keeps a copy of it can tell
# later whether anything before it was rewritten.
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from itertools import chain, islice

import msgspec

from eva.core import keys
from eva.core.keys import CHAIN, StreamId
from eva.core.tables import Tables

SEAL_BYTES = 16
CHECK_BATCH = 4096
"""Events `check` reads and checks at a time."""


def first_seal(stream: StreamId) -> bytes:
    """What the stream's first event chains to."""
    origin = b"eva log " + keys.stream_prefix(stream)
    return hashlib.blake2b(origin, digest_size=SEAL_BYTES).digest()


def seal(previous: bytes, stored: bytes | memoryview) -> bytes:
    """The seal of an event whose stored bytes are `stored`, after `previous`."""
    digest = hashlib.blake2b(previous, digest_size=SEAL_BYTES)
    digest.update(stored)
    return digest.digest()


def seals(previous: bytes, stored: Iterable[bytes]) -> list[bytes]:
    """The seals of events stored one after another, after `previous`."""
    made = []
    for data in stored:
        previous = seal(previous, data)
        made.append(previous)
    return made


def seal_before(tables: Tables, stream: StreamId, seq: int) -> bytes:
    """The seal event `seq` chains to. A seal that is missing gives sixteen zero bytes,
    so what follows is sealed still and `check` names the gap."""
    if seq == 0:
        return first_seal(stream)
    found = tables.get(CHAIN, keys.event_key(stream, seq - 1))
    return bytes(SEAL_BYTES) if found is None else bytes(found)


def seal_from(tables: Tables, stream: StreamId, start: int, stop: int | None = None) -> int:
    """Seal the stream's events again from `start` to its end (or to `stop`, not
    included); return how many."""
    previous = seal_before(tables, stream, start)
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix) if stop is None else keys.event_key(stream, stop)
    made = []
    for key, data in tables.scan("events", keys.event_key(stream, start), end):
        previous = seal(previous, data)
        made.append((bytes(key), previous))
    tables.put_many(CHAIN, made)
    return len(made)


def seal_all(tables: Tables) -> None:
    """Seal every stream's log from its first event (a data directory written before
    logs were sealed)."""
    for key, _ in list(tables.scan("streams", b"", b"\xff" * 17)):
        seal_from(tables, keys.stream_of(key), 0)


class ChainBreak(msgspec.Struct, frozen=True):
    """The first event of a stream whose seal does not follow from the one before."""

    position: int
    why: str


class ChainCheck(msgspec.Struct, frozen=True):
    """What a check of a stream's seals found: events checked, the newest seal, and the
    first break if any."""

    events: int
    head: str
    broken: ChainBreak | None = None

    @property
    def ok(self) -> bool:
        return self.broken is None


class ChainChecker:
    """Checks a stream's events against their seals as the events go by.

    `check` takes the stream's events (key, stored bytes) in key order, a batch
    at a time, so a rebuild can read the log once for both.
    """

    def __init__(self, stream: StreamId, stored_seals: Iterable[tuple[bytes, bytes]]) -> None:
        self.stream = stream
        self._seals = iter(stored_seals)
        self._previous = first_seal(stream)
        self._next = 0
        self.broken: ChainBreak | None = None

    def check(self, batch: Sequence[tuple[bytes, bytes]]) -> None:
        """Check the next events of the stream, in key order."""
        if not batch:
            return
        first, previous = self._next, self._previous
        made = []
        blake2b = hashlib.blake2b
        for _, data in batch:
            digest = blake2b(previous, digest_size=SEAL_BYTES)
            digest.update(data)
            previous = digest.digest()
            made.append(previous)
        if self.broken is not None:
            self._previous, self._next = previous, keys.seq_of(batch[-1][0]) + 1
            return
        stored = list(islice(self._seals, len(batch)))
        if (
            keys.seq_of(batch[0][0]) == first
            and keys.seq_of(batch[-1][0]) == first + len(batch) - 1
            and [key for key, _ in stored] == [key for key, _ in batch]
            and [bytes(seal) for _, seal in stored] == made
        ):  # the common case: every event there and sealed as it should be
            self._previous, self._next = previous, first + len(batch)
            return
        self._seals = chain(stored, self._seals)  # find the first break, event by event
        for key, data in batch:
            self._check_one(key, data)

    def _check_one(self, key: bytes, data: bytes) -> None:
        seq = keys.seq_of(key)
        computed = seal(self._previous, data)
        self._previous = computed
        expected = self._next
        self._next = seq + 1
        if self.broken is not None:
            return
        if seq != expected:
            self.broken = ChainBreak(expected, f"event {expected} is missing from the log")
            return
        stored = next(self._seals, None)
        if stored is None or keys.seq_of(stored[0]) != seq:
            self.broken = ChainBreak(seq, f"event {seq} has no seal")
            # the seal read belongs to a later event: nothing after this is compared
            return
        if bytes(stored[1]) != computed:
            self.broken = ChainBreak(
                seq, f"event {seq} does not match its seal: it was altered or damaged"
            )

    def finish(self) -> ChainCheck:
        """The verdict, once every event went by."""
        if self.broken is None:
            extra = next(self._seals, None)
            if extra is not None:
                at = keys.seq_of(extra[0])
                self.broken = ChainBreak(at, f"event {at} is sealed but missing from the log")
        return ChainCheck(events=self._next, head=self._previous.hex(), broken=self.broken)


def check(
    stream: StreamId,
    events: Iterable[tuple[bytes, bytes]],
    stored_seals: Iterable[tuple[bytes, bytes]],
) -> ChainCheck:
    """Check a stream's events (key, stored bytes, in key order) against its seals."""
    checker = ChainChecker(stream, stored_seals)
    entries = iter(events)
    while batch := list(islice(entries, CHECK_BATCH)):
        checker.check(batch)
    return checker.finish()


def check_stream(tables: Tables, stream: StreamId) -> ChainCheck:
    """Check one stream's log against its seals inside an open transaction."""
    prefix = keys.stream_prefix(stream)
    end = keys.prefix_end(prefix)
    return check(stream, tables.scan("events", prefix, end), tables.scan(CHAIN, prefix, end))
