# The records the projections keep per stream, and their stored encoding.
#
# Knows nothing of storage; these are plain values. Records are array-like:
# fields are only ever added at the end, with defaults, like events.
# Message and line records point at events by sequence number instead of
# copying their text, so the text of the chat is stored once, in the log.
from __future__ import annotations

import msgspec


class MessageSlot(msgspec.Struct, array_like=True, gc=False):
    """A message by index: the event that posted it and the one holding its text now."""

    posted_seq: int
    content_seq: int
    deleted: bool = False
    size: int = 0  # bytes of the rendered message (its leaf text if it fits); 0 once deleted


class StreamMeta(msgspec.Struct, array_like=True, gc=False):
    """Where a stream's projections stand: the position reached and its counts."""

    guild_id: int
    channel_id: int
    position: int = 0  # events applied; the next event's sequence number
    messages: int = 0  # messages posted; the next message's index
    guild_name: str = ""
    channel_name: str = ""
    time_zone: str = "UTC"
    row_seq: int = -1  # the latest row.published event, or -1
    lines: int = 0  # line.written events applied
    deleted: int = 0  # messages deleted or erased
    first_ms: int = 0  # time of the first message
    last_ms: int = 0  # time of the latest message
    leaf_frontier: int = 0  # every message before it has a leaf
    unleafed_bytes: int = 0  # rendered bytes of the messages from leaf_frontier on
    row_frontier: int = 0  # the published row covers the messages before it
    tail_bytes: int = 0  # rendered bytes of the messages from row_frontier on
    row_bytes: int = 0  # rendered bytes of the published row
    ready: int = 0  # merges whose halves both exist and whose line is due
    stale: int = 0  # lines whose text is wrong now and must be made again
    forgetting: list[str] = msgspec.field(default_factory=list)  # forgets not yet applied
    reply_month: str = ""  # the month (YYYY-MM) `replies` counts
    replies: int = 0  # replies Eva wrote in this channel in `reply_month`
    # Slots of the messages past the last whole block (eva.core.slots), oldest first.
    open_slots: list[MessageSlot] = msgspec.field(default_factory=list)
    # Person hash -> the time of their latest forget request: what they wrote until then
    # never comes back (an import, a restored export, a backfill); what they write after
    # it is theirs again.
    forgotten: dict[str, int] = msgspec.field(default_factory=dict)
    # message.deleted and message.edited events since the log was last rewritten without
    # the words they took away (log.rewritten): while any, those words may still be in
    # the log, and a purge is owed.
    unpurged: int = 0


class LineSlot(msgspec.Struct, array_like=True, gc=False):
    """A line by address: the line.written event that holds its text now."""

    seq: int


_encoder = msgspec.msgpack.Encoder()
_meta_decoder = msgspec.msgpack.Decoder(StreamMeta)
_slot_decoder = msgspec.msgpack.Decoder(MessageSlot)
_line_decoder = msgspec.msgpack.Decoder(LineSlot)


def encode_record(record: StreamMeta | MessageSlot | LineSlot) -> bytes:
    return _encoder.encode(record)


def decode_meta(data: bytes) -> StreamMeta:
    return _meta_decoder.decode(data)


def decode_slot(data: bytes) -> MessageSlot:
    return _slot_decoder.decode(data)


def decode_line_slot(data: bytes) -> LineSlot:
    return _line_decoder.decode(data)
