# The event store: append-only streams with their projections, over a backend.
#
# Every append writes the events and applies them to the projections in one
# transaction, so the two never disagree, and a batch is all or nothing.
# Appends that arrive together share one transaction (`append_many`); a batch
# that does not fit its stream is refused alone, the others still land.
# Reads never hold a transaction across an await: they return plain values.
from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

import msgspec

from eva.core import keys
from eva.core.address import Address, address_at
from eva.core.chain import seal, seal_before, seals
from eva.core.events import (
    AnyEvent,
    DamagedLog,
    LineWritten,
    MessageEdited,
    MessagePosted,
    RowPublished,
    SealedWithoutKeys,
    decode_event,
    decode_stored,
    encode_event,
)
from eva.core.forget import UNKEYED, PersonHashes
from eva.core.keys import CHAIN, LAYOUT, SEALED_AT_REST, StreamId
from eva.core.projection import Projector, Rejected, read_meta
from eva.core.sealed_events import keys_destroyed
from eva.core.slots import read_slot, read_slots
from eva.core.state import (
    MessageSlot,
    StreamMeta,
    decode_line_slot,
    decode_meta,
    encode_record,
)
from eva.core.tables import Tables
from eva.store.key_store import KeyStoreError
from eva.store.kv import Backend

READ_CHUNK = 4096
E = TypeVar("E", bound=AnyEvent)


@dataclass(frozen=True, slots=True)
class Batch:
    """Events for one stream, to be appended together or not at all."""

    stream: StreamId
    events: Sequence[AnyEvent]


@dataclass(frozen=True, slots=True)
class Appended:
    """Where a batch landed: sequence numbers `first .. first+count-1`.

    With it comes the stream's record as the batch left it, encoded as the
    `streams` table holds it, so that the sender need not read it back.
    """

    stream: StreamId
    first: int
    count: int
    meta: bytes | None = field(default=None, compare=False, repr=False)


class StoredMessage(msgspec.Struct, frozen=True, gc=False):
    """A message as it reads now: the posted event with its latest text."""

    posted: MessagePosted
    content: str
    attachments: tuple[str, ...]
    edited_at_ms: int | None
    deleted: bool


class Sealer(Protocol):
    """Seals what events say of people with their keys, and destroys a person's keys
    (eva.store.key_ring.KeyRing)."""

    def seal_events(
        self, guild_id: int, events: Sequence[AnyEvent], edited_author: Callable[[int], int]
    ) -> list[AnyEvent]: ...

    def destroy_person(self, guild_id: int, person_hash: str) -> int:
        """Destroy every key the person has had in the server; how many there were."""
        ...

    def destroy_server(self, guild_id: int) -> int:
        """Destroy the keys of everyone in the server; how many there were."""
        ...


def stored_events(
    tables: Tables, stream: StreamId, events: Sequence[AnyEvent], sealer: Sealer | None = None
) -> list[bytes]:
    """The bytes the log stores for events of `stream`, sealed by `sealer` if given;
    Rejected if one cannot be stored, KeyStoreError if the directory seals what it
    writes and no `sealer` is given."""
    if sealer is not None:
        events = sealer.seal_events(
            stream.guild_id, events, partial(_edited_author, tables, stream, events)
        )
    elif tables.get(LAYOUT, SEALED_AT_REST) is not None:
        raise KeyStoreError(
            "this data directory seals what it writes with people's keys, and it was opened "
            "without its key store: nothing is written in the clear"
        )
    stored = []
    for offset, event in enumerate(events):
        try:
            data = encode_event(event)
            decode_stored(data)  # what cannot be read back is never stored (about 1 µs)
        except (OverflowError, TypeError, ValueError, msgspec.ValidationError) as error:
            raise Rejected(
                f"{stream}: event {offset} of the batch cannot be stored: {error}"
            ) from error
        stored.append(data)
    return stored


def _edited_author(
    tables: Tables, stream: StreamId, events: Sequence[AnyEvent], index: int
) -> int:
    """The author of message `index` (among `events`, else stored), for sealing its edit;
    the server (0) if there is no such message."""
    for event in events:
        if isinstance(event, MessagePosted) and event.index == index:
            return event.author_id
    found = read_message(tables, stream, index)
    return 0 if found is None else found.posted.author_id


def write_batch(
    tables: Tables, projector: Projector, batch: Batch, sealer: Sealer | None = None
) -> Appended:
    """Append one batch inside an open write transaction."""
    first = projector.meta(batch.stream).position
    stored = stored_events(tables, batch.stream, batch.events, sealer)
    count = len(stored)
    previous = seal_before(tables, batch.stream, first)
    if count == 1:  # a batch of one is the most common: no cursor, no key list
        key = keys.event_key(batch.stream, first)
        tables.put("events", key, stored[0])
        tables.put(CHAIN, key, seal(previous, stored[0]))
    else:
        event_keys = keys.event_keys(batch.stream, first, count)
        tables.put_many("events", zip(event_keys, stored, strict=True))
        tables.put_many(CHAIN, zip(event_keys, seals(previous, stored), strict=True))
    try:
        projector.apply_all(batch.stream, first, batch.events)
    except (struct.error, OverflowError, TypeError) as error:  # a field out of its range
        raise Rejected(
            f"{batch.stream}: the batch does not fit the projections: {error}"
        ) from error
    return Appended(batch.stream, first, count, encode_record(projector.meta(batch.stream)))


KNOWN_LINES_MOST = 1 << 19
"""Line keys the store remembers across its write transactions before it starts afresh."""
KNOWN_METAS_MOST = 1 << 16
"""Stream records the store remembers across its write transactions before it starts afresh."""


class EventStore:
    """Streams of events per guild channel, with their projections.

    Applying a line asks whether other lines exist (its halves, its sibling,
    its parent), and most were asked or written by an earlier transaction of
    this store; every batch starts from its stream's record, which the last
    transaction that touched the stream left. The store remembers both from
    the transactions it committed, for as long as nothing else commits in
    between: a write transaction's id is one more than the last commit's, so
    a gap says that another writer (a process, or code writing to the backend
    directly) came in between, and what it remembers is dropped. Only for
    backends whose transactions have ids (LMDB).
    """

    def __init__(self, backend: Backend, hashes: PersonHashes = UNKEYED) -> None:
        self.backend = backend
        # How forgets are recorded here: keyed once a key store is bound (eva.store.key_binding).
        self.hashes = hashes
        # What seals people's words with their keys, once a key store is bound.
        self.sealer: Sealer | None = None
        self._known_lines: dict[bytes, bool] = {}
        # Stream records as the last commit left them; a transaction takes out those it
        # uses (and gives them back if it commits), so one that fails leaves none behind.
        self._known_metas: dict[StreamId, StreamMeta] = {}
        self._known_after = -1  # the transaction whose commit the two follow
        self._known_lock = threading.Lock()

    # -- writing ---------------------------------------------------------

    def append(self, stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
        """Append events to one stream atomically; raises Rejected if one does not fit."""
        result = self.append_many([Batch(stream, events)])[0]
        if isinstance(result, Rejected):
            raise result
        return result

    def append_many(self, batches: Sequence[Batch]) -> list[Appended | Rejected]:
        """Append many batches in one transaction (group commit).

        Each batch lands whole or is refused whole; a refused batch is answered
        with its `Rejected` error and does not stop the others.
        """
        refused: dict[int, Rejected] = {}
        seen: list[tuple[int, Projector]] = []  # the last attempt's transaction
        while True:
            try:
                results = self.backend.write(
                    lambda tables: self._write_all(tables, batches, refused, seen)
                )
            except _BatchRefused as refusal:
                refused[refusal.position] = refusal.error
                continue
            if seen:  # the last attempt is the one that committed
                self._learn(*seen[-1])
            return results

    def _write_all(
        self,
        tables: Tables,
        batches: Sequence[Batch],
        refused: dict[int, Rejected],
        seen: list[tuple[int, Projector]] | None = None,
    ) -> list[Appended | Rejected]:
        txn_id = tables.transaction_id()
        known = self._known_at(txn_id)
        projector = (
            Projector(tables)
            if known is None
            else Projector(tables, known_lines=known[0], known_metas=known[1])
        )
        results: list[Appended | Rejected] = []
        for position, batch in enumerate(batches):
            error = refused.get(position)
            if error is not None:
                results.append(error)
                continue
            try:
                results.append(write_batch(tables, projector, batch, self.sealer))
            except Rejected as exc:
                raise _BatchRefused(position, exc) from exc
        projector.flush()
        if txn_id is not None and seen is not None:
            seen.append((txn_id, projector))
        return results

    def _known_at(
        self, txn_id: int | None
    ) -> tuple[dict[bytes, bool], dict[StreamId, StreamMeta]] | None:
        """What is known of lines and stream records before write transaction `txn_id`:
        nothing unless the last commit was this store's own."""
        if txn_id is None:
            return None
        with self._known_lock:
            if self._known_after != txn_id - 1:
                self._known_lines, self._known_metas = {}, {}
                self._known_after = txn_id - 1
            return self._known_lines, self._known_metas

    def _learn(self, txn_id: int, projector: Projector) -> None:
        """Remember what write transaction `txn_id`, committed, saw of lines and left of
        the stream records it used."""
        with self._known_lock:
            if self._known_after != txn_id - 1:
                self._known_lines, self._known_metas = {}, {}
            if len(self._known_lines) >= KNOWN_LINES_MOST:
                self._known_lines = {}
            if len(self._known_metas) >= KNOWN_METAS_MOST:
                self._known_metas = {}
            self._known_lines.update(projector.lines_seen)
            self._known_metas.update(projector.metas)
            self._known_after = txn_id

    # -- reading ---------------------------------------------------------

    def streams(self) -> list[StreamMeta]:
        """Every stream's record, in key order."""
        with self.backend.reading() as tables:
            return [decode_meta(v) for _, v in tables.scan("streams", b"", b"\xff" * 17)]

    def meta(self, stream: StreamId) -> StreamMeta | None:
        with self.backend.reading() as tables:
            return read_meta(tables, stream)

    def events(
        self, stream: StreamId, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, AnyEvent]]:
        """The stream's events from `start`, read in chunks of short transactions, each
        checked against its seal (DamagedLog names the first that does not match)."""
        previous: bytes | None = None
        for seq, data, sealed in self._stored(stream, start, stop, sealed=True):
            if previous is None:
                with self.backend.reading() as tables:
                    previous = seal_before(tables, stream, seq)
            previous = seal(previous, data)
            if sealed != previous:
                raise altered(stream, seq)
            yield seq, decoded(stream, seq, data)

    def raw_events(
        self, stream: StreamId, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """The stored bytes of the stream's events, in order."""
        for seq, data, _ in self._stored(stream, start, stop, sealed=False):
            yield seq, data

    def _stored(
        self, stream: StreamId, start: int, stop: int | None, *, sealed: bool
    ) -> Iterator[tuple[int, bytes, bytes | None]]:
        """(sequence number, stored bytes, and if `sealed` the stored seal) of the stream's
        events from `start`, read in chunks of short transactions."""
        end = (
            keys.event_key(stream, stop)
            if stop is not None
            else keys.prefix_end(keys.stream_prefix(stream))
        )
        position = start
        while True:
            with self.backend.reading() as tables:
                chunk = []
                for key, data in tables.scan("events", keys.event_key(stream, position), end):
                    found = tables.get(CHAIN, key) if sealed else None
                    chunk.append((keys.seq_of(key), data, None if found is None else bytes(found)))
                    if len(chunk) == READ_CHUNK:
                        break
            yield from chunk
            if len(chunk) < READ_CHUNK:
                return
            position = chunk[-1][0] + 1

    def event(self, stream: StreamId, seq: int) -> AnyEvent | None:
        with self.backend.reading() as tables:
            return read_event(tables, stream, seq)

    def index_of(self, stream: StreamId, message_id: int) -> int | None:
        """The channel index of a Discord message id, if stored."""
        return self.indexes_of(stream, [message_id])[0]

    def indexes_of(self, stream: StreamId, message_ids: Sequence[int]) -> list[int | None]:
        """The channel index of each Discord message id, if stored (in one read)."""
        with self.backend.reading() as tables:
            found = [
                tables.get("discord_ids", keys.discord_id_key(stream, message_id))
                for message_id in message_ids
            ]
        return [None if data is None else keys.decode_u64(data) for data in found]

    def meta_and_indexes(
        self, stream: StreamId, message_ids: Sequence[int]
    ) -> tuple[StreamMeta | None, list[int | None]]:
        """The stream's record and `indexes_of` the ids, from one snapshot."""
        with self.backend.reading() as tables:
            meta = read_meta(tables, stream)
            found = [
                tables.get("discord_ids", keys.discord_id_key(stream, message_id))
                for message_id in message_ids
            ]
        return meta, [None if data is None else keys.decode_u64(data) for data in found]

    def message(self, stream: StreamId, index: int) -> StoredMessage | None:
        """The message at `index` with its latest text, or None past the end."""
        with self.backend.reading() as tables:
            return read_message(tables, stream, index)

    def line(self, stream: StreamId, start: int, size: int) -> LineWritten | None:
        """The line at address `start+size`, if written."""
        with self.backend.reading() as tables:
            return read_line(tables, stream, start, size)

    def lines(self, stream: StreamId, addresses: Iterable[Address]) -> dict[Address, LineWritten]:
        """The lines written at `addresses`, read in one transaction."""
        found: dict[Address, LineWritten] = {}
        with self.backend.reading() as tables:
            for address in addresses:
                line = read_line(tables, stream, address.start, address.size)
                if line is not None:
                    found[address] = line
        return found

    def lines_of_level(
        self, stream: StreamId, size: int, start: int, stop: int
    ) -> dict[Address, LineWritten]:
        """The lines of one size written from `start` to before `stop`, in one range read
        (a level's lines sit together, so the absent ones cost nothing)."""
        found: dict[Address, LineWritten] = {}
        with self.backend.reading() as tables:
            slots = tables.scan(
                "lines", keys.line_key(stream, start, size), keys.line_key(stream, stop, size)
            )
            for key, data in slots:
                found[address_at(*keys.address_of_line_key(key))] = _line_of(tables, stream, data)
        return found

    def messages(self, stream: StreamId, start: int, stop: int) -> list[tuple[int, StoredMessage]]:
        """Messages start..stop-1 that were stored, erased ones too, in one transaction."""
        with self.backend.reading() as tables:
            return list(read_messages(tables, stream, start, stop, deleted=True))

    def ready(self, stream: StreamId) -> list[tuple[int, int]]:
        """Merges whose halves both exist and whose line is due, lowest level first."""
        prefix = keys.stream_prefix(stream)
        with self.backend.reading() as tables:
            found = tables.scan("ready", prefix, keys.prefix_end(prefix))
            return [keys.address_of_line_key(key) for key, _ in found]

    def stale(self, stream: StreamId) -> list[tuple[int, int]]:
        """Lines whose text is wrong now (erased or edited messages under them), lowest first."""
        prefix = keys.stream_prefix(stream)
        with self.backend.reading() as tables:
            found = tables.scan("stale", prefix, keys.prefix_end(prefix))
            return [keys.address_of_line_key(key) for key, _ in found]

    def sizes_newest_first(self, stream: StreamId, stop: int) -> Iterator[tuple[int, int]]:
        """(index, rendered bytes) of messages from the newest back to `stop`."""
        with self.backend.reading() as tables:
            meta = read_meta(tables, stream)
            if meta is None:
                return
            sizes = [
                (index, slot.size)
                for index, slot in read_slots(tables, stream, meta, stop, meta.messages)
            ]
        yield from reversed(sizes)

    def published_row(self, stream: StreamId) -> RowPublished | None:
        """The row Eva reads now, if one was published."""
        with self.backend.reading() as tables:
            meta = read_meta(tables, stream)
            if meta is None or meta.row_seq < 0:
                return None
            return stored_event(tables, stream, meta.row_seq, RowPublished)


def read_message(tables: Tables, stream: StreamId, index: int) -> StoredMessage | None:
    """A message by index inside an open transaction."""
    meta = read_meta(tables, stream)
    slot = None if meta is None else read_slot(tables, stream, meta, index)
    return None if slot is None else _message_of(tables, stream, slot)


def read_messages(
    tables: Tables, stream: StreamId, start: int, stop: int, *, deleted: bool = False
) -> Iterator[tuple[int, StoredMessage]]:
    """Messages start..stop-1 in order (erased ones only if `deleted`), in one scan."""
    meta = read_meta(tables, stream)
    if meta is None:
        return
    for index, slot in read_slots(tables, stream, meta, start, stop):
        if deleted or not slot.deleted:
            message = _message_of(tables, stream, slot)
            if deleted or not message.deleted:
                yield index, message


def _message_of(tables: Tables, stream: StreamId, slot: MessageSlot) -> StoredMessage:
    posted = stored_event(tables, stream, slot.posted_seq, MessagePosted)
    content, attachments, edited = posted.content, posted.attachments, posted.edited_at_ms
    if slot.content_seq != slot.posted_seq:
        edit = stored_event(tables, stream, slot.content_seq, MessageEdited)
        content, attachments, edited = edit.content, edit.attachments, edit.at_ms
    # sealed with keys destroyed since (a copy made before a forget): erased, as it will be
    gone = slot.deleted or keys_destroyed(posted)
    return StoredMessage(posted, content, attachments, edited, gone)


def read_line(tables: Tables, stream: StreamId, start: int, size: int) -> LineWritten | None:
    """A line by address inside an open transaction."""
    data = tables.get("lines", keys.line_key(stream, start, size))
    return None if data is None else _line_of(tables, stream, data)


def _line_of(tables: Tables, stream: StreamId, slot_data: bytes) -> LineWritten:
    """The line event a line slot points at."""
    return stored_event(tables, stream, decode_line_slot(slot_data).seq, LineWritten)


def stored_event(tables: Tables, stream: StreamId, seq: int, kind: type[E]) -> E:
    """The event at `seq`, which a projection says is a `kind`; DamagedLog if it is
    missing, does not decode, or is another kind."""
    event = read_event(tables, stream, seq)
    if event is None:
        raise DamagedLog(f"{stream}: event {seq} is missing from the log")
    if not isinstance(event, kind):
        raise DamagedLog(
            f"{stream}: event {seq} is a {type(event).__name__} where a {kind.__name__} was "
            "expected: the projections do not fit the log (`eva replay --repair`)"
        )
    return event


def read_event(tables: Tables, stream: StreamId, seq: int) -> AnyEvent | None:
    """The event at `seq` inside an open transaction, checked against its seal; None if
    there is none; DamagedLog if it does not match its seal or does not decode."""
    key = keys.event_key(stream, seq)
    data = tables.get("events", key)
    if data is None:
        return None
    sealed = tables.get(CHAIN, key)
    if sealed is None or bytes(sealed) != seal(seal_before(tables, stream, seq), data):
        raise altered(stream, seq)
    return decoded(stream, seq, data)


def altered(stream: StreamId, seq: int) -> DamagedLog:
    return DamagedLog(
        f"{stream}: event {seq} does not match its seal: it was altered or damaged after it "
        "was written; `eva replay` checks the whole log"
    )


def decoded(stream: StreamId, seq: int, data: bytes) -> AnyEvent:
    """An event from its stored bytes; DamagedLog, naming it, if they do not decode."""
    try:
        return decode_event(data)
    except SealedWithoutKeys as error:
        raise KeyStoreError(f"{stream}: event {seq} cannot be read: {error}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise DamagedLog(
            f"{stream}: event {seq} does not decode ({error}); `eva replay` checks the "
            "whole log"
        ) from None


class _BatchRefused(Exception):
    def __init__(self, position: int, error: Rejected) -> None:
        super().__init__(position, error)
        self.position = position
        self.error = error
