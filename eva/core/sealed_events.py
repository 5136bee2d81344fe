# Which fields of an event are sealed, for whom, and what the stored event keeps in the clear.
#
# Pure. An event that holds people's words or names is stored as its skeleton: those
# fields blank, and the fields themselves in `sealed` (eva.core.sealing). What stays in
# the clear is what the projections need to place the event (times, indexes, ids of
# messages, addresses of lines), never what anyone wrote or who wrote it. A message is
# sealed for its author, an edit for the author of the message it edits, a line for
# every person it credits, and what belongs to the server (its channels' names, the
# tools Eva called, her replies' grounding) for the server.
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import msgspec

from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    LineWritten,
    MessageEdited,
    MessagePosted,
    ReplyWritten,
    ToolCalled,
    event_tag,
)
from eva.core.grounding import Grounding
from eva.core.sealing import SERVER

Sealable = (
    MessagePosted | MessageEdited | LineWritten | ChannelDescribed | ToolCalled | ReplyWritten
)

# The sealed fields of each kind, and what they read blank: the one list of them.
_BLANK: dict[type, dict[str, Any]] = {
    MessagePosted: {"author_id": 0, "author_name": "", "content": "", "attachments": ()},
    MessageEdited: {"content": "", "attachments": ()},
    LineWritten: {"text": "", "authors": ()},
    ChannelDescribed: {"guild_name": "", "channel_name": ""},
    ToolCalled: {"arguments": ""},
    ReplyWritten: {"grounding": None},
}
_FIELDS: dict[type, tuple[str, ...]] = {kind: tuple(blank) for kind, blank in _BLANK.items()}
_DECODERS: dict[type, msgspec.msgpack.Decoder[Any]] = {
    MessagePosted: msgspec.msgpack.Decoder(tuple[int, str, str, tuple[str, ...]]),
    MessageEdited: msgspec.msgpack.Decoder(tuple[str, tuple[str, ...]]),
    LineWritten: msgspec.msgpack.Decoder(tuple[str, tuple[int, ...]]),
    ChannelDescribed: msgspec.msgpack.Decoder(tuple[str, str]),
    ToolCalled: msgspec.msgpack.Decoder(tuple[str]),
    ReplyWritten: msgspec.msgpack.Decoder(tuple[Grounding | None]),
}
_ASSOCIATED: dict[type, bytes] = {kind: event_tag(kind).encode() for kind in _FIELDS}  # type: ignore[arg-type]
_replace = msgspec.structs.replace
# The sealed fields put back, each kind by name: a replay opens every event, and a dict
# of them made for each would cost it a tenth (`test_every_kind_seals_and_opens_whole`).
_PUT_BACK: dict[type, Callable[[Any, Any], AnyEvent]] = {
    MessagePosted: lambda e, v: _replace(
        e, author_id=v[0], author_name=v[1], content=v[2], attachments=v[3], sealed=b""
    ),
    MessageEdited: lambda e, v: _replace(e, content=v[0], attachments=v[1], sealed=b""),
    LineWritten: lambda e, v: _replace(e, text=v[0], authors=v[1], sealed=b""),
    ChannelDescribed: lambda e, v: _replace(e, guild_name=v[0], channel_name=v[1], sealed=b""),
    ToolCalled: lambda e, v: _replace(e, arguments=v[0], sealed=b""),
    ReplyWritten: lambda e, v: _replace(e, grounding=v[0], sealed=b""),
}
_encoder = msgspec.msgpack.Encoder()
ERASED_SEAL = b"\x00erased"
"""What `sealed` holds in an event read whose keys were destroyed: its fields read blank,
and a purge writes it again without its sealed words (never stored: a blob starts with its
version, never a zero byte)."""
SEALABLE: frozenset[type] = frozenset(_FIELDS)


def is_sealable(event: AnyEvent) -> TypeGuard[Sealable]:
    """Whether the event has fields to seal (its kind may hold people's words or names)."""
    return type(event) in SEALABLE


def people_of(event: Sealable, edited_author: int = SERVER) -> tuple[int, ...]:
    """Whose keys seal the event, each once, in no order: the author of a message, the
    author of the message an edit changes (`edited_author`), every person a line credits
    (the server, for a line that credits none), else the server."""
    match event:
        case MessagePosted(author_id=author):
            return (author,)
        case MessageEdited():
            return (edited_author,)
        case LineWritten(authors=authors) if authors:
            return tuple(dict.fromkeys(authors))
        case _:
            return (SERVER,)


def secret_fields(event: Sealable) -> bytes:
    """The fields of the event that are sealed, encoded."""
    return _encoder.encode(tuple(getattr(event, name) for name in _FIELDS[type(event)]))


def associated(event: Sealable) -> bytes:
    """What a blob is bound to besides its keys: the kind of event it belongs to."""
    return _ASSOCIATED[type(event)]


def skeleton(event: Sealable, blob: bytes) -> AnyEvent:
    """The event as stored: its sealed fields blank and `blob` holding them."""
    return msgspec.structs.replace(event, **_BLANK[type(event)], sealed=blob)


def opened(event: Sealable, fields: bytes | None) -> AnyEvent:
    """A stored event with its sealed fields back (`fields`, as `secret_fields` gave
    them), or blank and marked `ERASED_SEAL` if None (the keys that sealed them are
    destroyed: erased)."""
    kind = type(event)
    if fields is None:
        return msgspec.structs.replace(event, **_BLANK[kind], sealed=ERASED_SEAL)
    return _PUT_BACK[kind](event, _DECODERS[kind].decode(fields))


def event_texts(event: AnyEvent) -> list[str]:
    """What the event says of people in words: the texts among its sealable fields (the
    words and names a forget must prove gone), none for other kinds."""
    if not is_sealable(event):
        return []
    found: list[str] = []
    _texts_in(msgspec.to_builtins([getattr(event, name) for name in _FIELDS[type(event)]]), found)
    return found


def _texts_in(value: object, found: list[str]) -> None:
    if isinstance(value, str):
        if value:
            found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _texts_in(item, found)
    elif isinstance(value, list):
        for item in value:
            _texts_in(item, found)


def keys_destroyed(event: AnyEvent) -> bool:
    """Whether the event was read with the keys that sealed it destroyed (`ERASED_SEAL`)."""
    return getattr(event, "sealed", b"") == ERASED_SEAL
