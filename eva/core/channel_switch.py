# Which channels Eva keeps: her memory turned off or on per channel by a moderator.
#
# Pure. By default (`listen = "all"`) she keeps every channel she can read but those turned
# off; with `listen = "chosen"` only those turned on. A channel off is not kept at all:
# its messages are not stored, backfilled or imported, and she does not answer in it;
# its slash commands still work, so that it can be turned on again.
from __future__ import annotations

import struct
from typing import Literal, TypeAlias

import msgspec

from eva.core.keys import StreamId
from eva.core.settings import Listen

SwitchBy: TypeAlias = Literal["operator", "moderator"]
_KEY = struct.Struct(">QQ")


class ChannelSwitch(msgspec.Struct, frozen=True, kw_only=True):
    on: bool
    at_ms: int
    by: SwitchBy


def switch_key(stream: StreamId) -> bytes:
    return _KEY.pack(stream.guild_id, stream.channel_id)


def stream_of_switch_key(key: bytes) -> StreamId:
    guild_id, channel_id = _KEY.unpack(key)
    return StreamId(guild_id, channel_id)


def encode_switch(switch: ChannelSwitch) -> bytes:
    return msgspec.msgpack.encode(switch)


def decode_switch(data: bytes) -> ChannelSwitch:
    return msgspec.msgpack.decode(data, type=ChannelSwitch)


def keeps(switch: ChannelSwitch | None, listen: Listen) -> bool:
    """Whether Eva keeps a channel with this switch (None: never turned)."""
    if switch is None:
        return listen == "all"
    return switch.on
