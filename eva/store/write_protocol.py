# What the serving process and its write process say to each other.
#
# Shell, no IO: the messages, and the encoders and decoders built once. A
# request is a group of batches, its events encoded in the frame as the log
# stores them (msgpack nests: an event inside the frame is the bytes it has
# alone); the answer is one result per batch sent, or why the whole commit
# failed. Frames are eva.store.pipes's; answers come in the order of requests.
# Neither trio nor a process is known here, so the child imports only this.
from __future__ import annotations

from collections.abc import Sequence

import msgspec

from eva.core.events import AnyEvent


class OutBatch(msgspec.Struct, array_like=True):
    """A batch as it is sent: its events encoded in the frame, each as the log stores it."""

    guild_id: int
    channel_id: int
    events: Sequence[AnyEvent]


class RawBatch(msgspec.Struct, array_like=True):
    """A batch as it is received: each event's bytes, as the log stores them."""

    guild_id: int
    channel_id: int
    events: list[msgspec.Raw]


class Result(msgspec.Struct, array_like=True):
    first: int = 0
    count: int = 0
    refused: str | None = None  # the Rejected message, for a batch refused whole
    meta: bytes | None = None  # the stream's record as the batch left it (Appended.meta)


class Committed(msgspec.Struct, tag="committed", array_like=True):
    results: list[Result]


class Failed(msgspec.Struct, tag="failed", array_like=True):
    error: str  # the commit failed as a whole (the disk, the map): nothing landed


encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(list[RawBatch])
answer_decoder = msgspec.msgpack.Decoder(Committed | Failed)
