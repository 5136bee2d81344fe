# Records of whole servers (or channels) erased: asked by the operator or a moderator, or
# owed once Eva left a server.
#
# Pure data and its keys. A record is written before any of the server's data goes (the
# promise), finished when the file is compacted and scanned as a forget proves itself,
# and kept afterwards with counts only: which channels, how many messages, when, why, and
# what the scan found. A server Eva left waits out its grace period first; her coming
# back within it cancels the erasure, which the record keeps too.
from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Literal, TypeAlias

import msgspec

ErasureReason: TypeAlias = Literal["operator", "left", "moderator"]
_KEY = struct.Struct(">QQ")


class Erasure(msgspec.Struct, frozen=True, kw_only=True):
    guild_id: int
    reason: ErasureReason
    channel_id: int = 0  # one channel of the server, or 0: all of it
    asked_ms: int  # when the operator asked, or when Eva left the server
    due_ms: int  # when the erasure is to be done (the end of the grace period)
    channels: tuple[int, ...] = ()  # set when it is done
    messages: int = 0
    done_ms: int = 0  # 0 until erased and proven
    cancelled_ms: int = 0  # Eva came back before it was due
    texts_checked: int = 0
    found: int = 0  # texts of the server the last scan found (done only at 0)

    @property
    def pending(self) -> bool:
        return not self.done_ms and not self.cancelled_ms


def erasure_key(guild_id: int, channel_id: int = 0) -> bytes:
    return _KEY.pack(guild_id, channel_id)


def encode_erasure(record: Erasure) -> bytes:
    return msgspec.msgpack.encode(record)


def decode_erasure(data: bytes) -> Erasure:
    return msgspec.msgpack.decode(data, type=Erasure)


def describe_erasure(record: Erasure) -> str:
    """One line for `eva status` and `eva audit`, with counts only."""
    why = (
        f"Eva left the server on {_day(record.asked_ms)}" if record.reason == "left"
        else f"the {record.reason} asked on {_day(record.asked_ms)}"
    )
    what = (
        f"guild {record.guild_id}" if not record.channel_id
        else f"channel {record.guild_id}/{record.channel_id}"
    )
    if record.cancelled_ms:
        return (
            f"{what}: not erased: {why} and came back on "
            f"{_day(record.cancelled_ms)}"
        )
    if record.done_ms:
        return (
            f"{what}: erased on {_day(record.done_ms)} ({why}): "
            f"{len(record.channels)} channels, {record.messages} messages; "
            f"{record.texts_checked} texts checked in every file: {record.found} found"
        )
    return f"{what}: to be erased from {_day(record.due_ms)} ({why})" + (
        f"; {record.found} texts of it still found in a file" if record.found else ""
    )


def _day(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
