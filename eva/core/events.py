# The event vocabulary of a channel's stream: one tagged union of frozen Structs.
#
# Knows nothing of storage or IO; it only says what can happen in a channel.
# Invariants (the log is read back for years, so these never change):
# - every tag is explicit and stable; a tag is never reused for another shape;
# - events are array-like, so fields are never reordered or removed, and a
#   field added later goes at the end of its Struct with a default;
# - times are integer milliseconds since the Unix epoch in UTC, with the
#   writer's UTC offset in minutes kept beside message times;
# - forget events hold a hashed person id and counts, never content;
# - what people wrote and who they are is sealed with their keys when the store has
#   them (eva.core.sealed_events): `decode_event` gives the event opened, by what the
#   process installed (`use_opener`), so the rest of the code reads plain events.
from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeAlias

import msgspec

from eva.core.grounding import Grounding


class Event(
    msgspec.Struct, frozen=True, kw_only=True, array_like=True, tag_field="type", gc=False
):
    """Base of every event.

    Each event declares `at_ms` (when it happened, UTC milliseconds) as its own
    first field: fields of a keyword-only base would be laid out after the
    subclass's, and a field added later would then shift them.
    """


class ChannelDescribed(Event, frozen=True, tag="channel.described"):
    """The names and time zone of a channel, as last seen."""

    at_ms: int
    guild_id: int
    channel_id: int
    guild_name: str = ""
    channel_name: str = ""
    time_zone: str = "UTC"
    sealed: bytes = b""
    """The fields that say what people wrote or who they are, sealed (eva.core.sealed_events);
    those fields are blank in the stored event while it is. Empty in events stored before."""


class MessagePosted(Event, frozen=True, tag="message.posted"):
    """A chat message; `index` numbers the channel's messages from 0 with no gap."""

    at_ms: int
    index: int
    message_id: int
    author_id: int
    author_name: str
    bot: bool = False
    utc_offset_min: int = 0
    content: str = ""
    reply_to: int | None = None
    attachments: tuple[str, ...] = ()
    edited_at_ms: int | None = None
    sealed: bytes = b""
    """The fields that say what people wrote or who they are, sealed (eva.core.sealed_events);
    those fields are blank in the stored event while it is. Empty in events stored before."""


class MessageEdited(Event, frozen=True, tag="message.edited"):
    """New text for a message already posted; `at_ms` is the edit time."""

    at_ms: int
    index: int
    message_id: int
    content: str
    attachments: tuple[str, ...] = ()
    sealed: bytes = b""
    """The fields that say what people wrote or who they are, sealed (eva.core.sealed_events);
    those fields are blank in the stored event while it is. Empty in events stored before."""


class MessageDeleted(Event, frozen=True, tag="message.deleted"):
    """A message deleted in Discord; its index stays as an erased slot."""

    at_ms: int
    index: int
    message_id: int


LineHow: TypeAlias = Literal["verbatim", "glue", "model"]


class Usage(msgspec.Struct, frozen=True, kw_only=True, array_like=True, gc=False):
    """Token usage of the model call that made a line."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_1h_tokens: int = 0
    """The part of `cache_write_tokens` written with a one-hour lifetime (the rest: 5 minutes)."""

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt of the call: uncached input, cache writes and cache reads."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens


class LineWritten(Event, frozen=True, tag="line.written"):
    """A line of memory at address `start+size` (size a power of two, start a multiple)."""

    at_ms: int
    start: int
    size: int
    text: str
    first_ms: int
    last_ms: int
    authors: tuple[int, ...] = ()
    how: LineHow = "verbatim"
    model: str = ""
    usage: Usage | None = None
    batch_usage: Usage | None = None
    """The part of `usage` charged through the Message Batches API (at its discount)."""
    sealed: bytes = b""
    """The fields that say what people wrote or who they are, sealed (eva.core.sealed_events);
    those fields are blank in the stored event while it is. Empty in events stored before."""


PublishReason: TypeAlias = Literal["quiet", "overflow", "build", "forget", "start"]


class RowPublished(Event, frozen=True, tag="row.published"):
    """The row Eva reads from now on: addresses oldest first, covering 0..frontier-1."""

    at_ms: int
    entries: tuple[tuple[int, int], ...]
    frontier: int
    reason: PublishReason = "build"
    row_bytes: int = 0


class ToolCalled(Event, frozen=True, tag="tool.called"):
    """A tool call Eva made while answering, with its arguments as JSON text."""

    at_ms: int
    name: str
    arguments: str = "{}"
    result_bytes: int = 0
    sealed: bytes = b""
    """The fields that say what people wrote or who they are, sealed (eva.core.sealed_events);
    those fields are blank in the stored event while it is. Empty in events stored before."""


ForgetBy: TypeAlias = Literal["self", "moderator", "deleted", "edited", "operator"]


class ReplyWritten(Event, frozen=True, tag="reply.written"):
    """Eva answered someone: the model, its usage over every round, the tool calls made."""

    at_ms: int
    model: str
    usage: Usage
    to_message_id: int = 0
    tool_calls: int = 0
    text_bytes: int = 0
    month: str = ""  # YYYY-MM (UTC) the reply counts against in its guild's quota
    requests: tuple[Usage, ...] = ()
    """The usage of each request of the reply, in order (`usage` is their sum); a price tier
    is decided per request on its own prompt. Empty in replies recorded before it was kept."""
    grounding: Grounding | None = None
    """Where each detail the reply states came from (eva.core.grounding); None in replies
    recorded before it was kept."""
    sealed: bytes = b""
    """The fields that say what people wrote or who they are, sealed (eva.core.sealed_events);
    those fields are blank in the stored event while it is. Empty in events stored before."""


class ForgetRequested(Event, frozen=True, tag="forget.requested"):
    """A tombstone: a person asked to be forgotten (or a moderator did it for them)."""

    at_ms: int
    person_hash: str
    by: ForgetBy = "self"


class ForgetApplied(Event, frozen=True, tag="forget.applied"):
    """The audit record of a finished forget: counts only, never content."""

    at_ms: int
    person_hash: str
    messages: int = 0
    lines: int = 0


class ErasureUnproven(Event, frozen=True, tag="erasure.unproven"):
    """A forget's check found words of the person still in files of the data directory:
    which files (paths within it), how many texts and how often; never the texts. The
    forget stays pending until none of those files holds them."""

    at_ms: int
    person_hash: str
    files: tuple[str, ...]
    texts: int = 0
    hits: int = 0


class MessagesErased(Event, frozen=True, tag="messages.erased"):
    """A forgotten person's messages become erased slots: indexes stay, words go."""

    at_ms: int
    person_hash: str
    indexes: tuple[int, ...]


class LogRewritten(Event, frozen=True, tag="log.rewritten"):
    """Stored events rewritten without words that no projection uses any more (a forgotten
    person's messages, deleted and edited texts, lines made again), and the log sealed
    again (eva.core.chain) from the first of them to this record, in one transaction.
    No positions: a purge found no such words left (the deletions and edits before it
    are purged all the same)."""

    at_ms: int
    positions: tuple[int, ...]
    resealed: int = 0


AnyEvent: TypeAlias = (
    ChannelDescribed
    | MessagePosted
    | MessageEdited
    | MessageDeleted
    | LineWritten
    | RowPublished
    | ToolCalled
    | ForgetRequested
    | ForgetApplied
    | ErasureUnproven
    | MessagesErased
    | ReplyWritten
    | LogRewritten
)

EVENT_TYPES: tuple[type[Event], ...] = (
    ChannelDescribed,
    MessagePosted,
    MessageEdited,
    MessageDeleted,
    LineWritten,
    RowPublished,
    ToolCalled,
    ForgetRequested,
    ForgetApplied,
    ErasureUnproven,
    MessagesErased,
    ReplyWritten,
    LogRewritten,
)

class DamagedLog(ValueError):
    """A stored event is missing, does not decode, or is not the kind its projection
    points at: the log or its projections are damaged."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(AnyEvent)


def encode_event(event: AnyEvent) -> bytes:
    """The stored bytes of an event."""
    return _encoder.encode(event)


class SealedWithoutKeys(msgspec.DecodeError):
    """A stored event whose sealed fields this process has no key store to open."""


Opener = Callable[[AnyEvent], AnyEvent]
"""Opens an event's sealed fields (eva.store.key_ring), or raises msgspec.DecodeError."""
_opener: Opener | None = None


def use_opener(opener: Opener | None) -> None:
    """Open sealed events with `opener` from now on, in this process (None: none)."""
    global _opener
    _opener = opener


def decode_event(data: bytes | memoryview) -> AnyEvent:
    """An event from its stored bytes, its sealed fields opened; raises
    msgspec.DecodeError on bad bytes, or on sealed ones this process cannot open."""
    event = _decoder.decode(data)
    if getattr(event, "sealed", b""):
        if _opener is None:
            raise SealedWithoutKeys(
                "it is sealed, and no key store is open to read it (EVA_KEYS)"
            )
        return _opener(event)
    return event


def decode_stored(data: bytes | memoryview) -> AnyEvent:
    """An event from its stored bytes as they are: sealed fields left sealed."""
    return _decoder.decode(data)


def event_tag(event: Event) -> str:
    """The stable tag of an event, as written in the log and the schema."""
    tag = event.__struct_config__.tag
    assert isinstance(tag, str)
    return tag
