# Where a stream's message slots are kept: the table for whole blocks, the record for the rest.
#
# Pure: reads and writes through the `Tables` protocol. A message's slot
# (eva.core.state.MessageSlot) is held in the `messages` table once its block
# of SLOT_BLOCK messages is full, and in the stream's own record
# (`StreamMeta.open_slots`) until then. A post therefore changes only the
# record, which every commit writes anyway, and not a page of the `messages`
# table as well: while many channels are busy, a commit holds about one post
# per channel, and each page it changes is copied and flushed whole.
# Invariant: `open_slots` holds exactly the slots of the messages from
# `messages - messages % SLOT_BLOCK` on, so where a slot is kept depends on
# the events alone, never on how they were grouped into commits.
from __future__ import annotations

from collections.abc import Iterator

from eva.core import keys
from eva.core.keys import StreamId
from eva.core.state import MessageSlot, StreamMeta, decode_meta, decode_slot, encode_record
from eva.core.tables import Tables

SLOT_BLOCK = 16
"""Messages whose slots go into the `messages` table together, once the last is posted."""


def in_table(meta: StreamMeta) -> int:
    """How many of the stream's first messages have their slots in the table."""
    return meta.messages - len(meta.open_slots)


def read_slot(tables: Tables, stream: StreamId, meta: StreamMeta, index: int) -> MessageSlot | None:
    """The slot of message `index`, or None if there is no such message.

    A slot held in the record is the record's own object, so a change to it shows
    there at once; keep a changed slot with `put_slot` wherever it is held.
    """
    first_open = in_table(meta)
    if index >= first_open:
        return meta.open_slots[index - first_open] if index < meta.messages else None
    data = tables.get("messages", keys.message_key(stream, index))
    return None if data is None else decode_slot(data)


def read_slots(
    tables: Tables, stream: StreamId, meta: StreamMeta, start: int, stop: int
) -> Iterator[tuple[int, MessageSlot]]:
    """(index, slot) of the messages start..stop-1 there are, in order."""
    first_open = in_table(meta)
    if start < first_open:
        found = tables.scan(
            "messages",
            keys.message_key(stream, start),
            keys.message_key(stream, min(stop, first_open)),
        )
        for key, data in found:
            yield keys.seq_of(key), decode_slot(data)
    for index in range(max(start, first_open), min(stop, meta.messages)):
        yield index, meta.open_slots[index - first_open]


def put_slot(
    tables: Tables, stream: StreamId, meta: StreamMeta, index: int, slot: MessageSlot
) -> None:
    """Keep the changed slot of an existing message `index`."""
    first_open = in_table(meta)
    if index >= first_open:
        meta.open_slots[index - first_open] = slot
    else:
        tables.put("messages", keys.message_key(stream, index), encode_record(slot))


def add_slots(tables: Tables, stream: StreamId, meta: StreamMeta, slots: list[MessageSlot]) -> None:
    """Keep the slots of messages just posted (from index `meta.messages` on), and count them.

    Each block they fill goes into the table, as one run of keys.
    """
    open_slots = meta.open_slots
    open_slots.extend(slots)
    meta.messages += len(slots)
    full = len(open_slots) - meta.messages % SLOT_BLOCK
    if full:
        first = meta.messages - len(open_slots)
        tables.put_many(
            "messages",
            zip(
                keys.message_keys(stream, first, full),
                map(encode_record, open_slots[:full]),
                strict=True,
            ),
        )
        del open_slots[:full]


def hold_open_slots(tables: Tables) -> None:
    """Move the slots past each stream's last whole block from the table into its record.

    For a data directory written while every slot was kept in the table; a
    record that holds its open slots already is left as it is.
    """
    for key, data in list(tables.scan("streams", b"", b"\xff" * 17)):
        meta = decode_meta(data)
        first_open = meta.messages - meta.messages % SLOT_BLOCK
        if meta.open_slots or first_open == meta.messages:
            continue
        stream = keys.stream_of(key)
        held = list(
            tables.scan(
                "messages",
                keys.message_key(stream, first_open),
                keys.message_key(stream, meta.messages),
            )
        )
        for slot_key, _ in held:
            tables.delete("messages", slot_key)
        meta.open_slots = [decode_slot(slot_data) for _, slot_data in held]
        tables.put("streams", key, encode_record(meta))
