# Stream identity and the byte keys of every stored table.
#
# Knows nothing of LMDB; it only fixes how keys are laid out so that one
# stream's entries sit together and sort in the order they are read.
# Invariants: every key of a stream starts with its 16-byte prefix
# (guild id, channel id, big-endian), so a prefix scan sees exactly one stream,
# but for the `discord_ids` table, whose keys start with the message id (see
# `discord_id_key`); numbers in keys are big-endian unsigned, so byte order is
# numeric order.
from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, Literal, NamedTuple, TypeAlias

Table: TypeAlias = Literal[
    "events", "streams", "messages", "discord_ids", "lines", "ready", "postings", "stale",
    "batches", "layout", "chain", "erasures", "switches", "opt_outs",
]

EVENTS: Final = "events"
DISCORD_IDS: Final = "discord_ids"
# Every table that is derived from the events, in the order replay compares them.
PROJECTION_TABLES: Final[tuple[Table, ...]] = (
    "streams",
    "messages",
    "discord_ids",
    "lines",
    "ready",
    "postings",
    "stale",
)
# The one table that belongs to no stream: which message batch each line task
# went out in (keyed by the task's fingerprint), so a restart takes up a batch
# in flight instead of paying for its tasks again. Not derived from events.
BATCHES: Final = "batches"
# Which layout a data directory follows, where it changed (`DISCORD_IDS_BY_MESSAGE`,
# `MESSAGE_SLOTS_IN_BLOCKS`).
LAYOUT: Final = "layout"
# The seal of each event, under the event's own key (eva.core.chain): part of the log, not
# derived from it.
CHAIN: Final = "chain"
# Whole servers erased or to be erased (eva.core.erasures), by guild: records of no stream,
# kept when every stream of the guild is gone.
ERASURES: Final = "erasures"
# Whether Eva keeps each channel a moderator or the operator turned her memory on or off in
# (eva.core.channel_switch), by guild and channel: records of no stream.
SWITCHES: Final = "switches"
# The people who asked Eva never to keep what they write in a server (eva.core.opt_out), by
# guild and keyed hash of their id: records of no stream.
OPT_OUTS: Final = "opt_outs"
ALL_TABLES: Final[tuple[Table, ...]] = (
    "events", *PROJECTION_TABLES, BATCHES, LAYOUT, CHAIN, ERASURES, SWITCHES, OPT_OUTS
)
DISCORD_IDS_BY_MESSAGE: Final = b"discord_ids"
"""The `layout` entry saying that `discord_ids` keys start with the message id; a data
directory written before holds keys that start with the stream prefix."""
MESSAGE_SLOTS_IN_BLOCKS: Final = b"message_slots"
"""The `layout` entry saying that the slots past a stream's last whole block are kept in
its record (eva.core.slots); a data directory written before holds them in `messages`."""
FORGOTTEN_IN_RECORDS: Final = b"forgotten"
"""The `layout` entry saying that each stream's record holds when its forgotten people
asked (StreamMeta.forgotten); a data directory written before holds records without it."""

SEALED_AT_REST: Final = b"sealed_at_rest"
"""The `layout` entry saying that the directory's writes seal people's words with their
keys (eva.store.key_ring); a directory without it writes them in the clear."""
LOGS_SEALED: Final = b"sealed"
"""The `layout` entry saying that every event has its seal in `chain`; a data directory
written before holds none."""
AUTHORS_INDEXED: Final = b"authors_indexed"
"""The `layout` entry saying that the recall index holds each message's author name words
(eva.core.projection.index_text); a data directory written before holds its text alone."""
UNPURGED_COUNTED: Final = b"unpurged_counted"
"""The `layout` entry saying that each stream's record counts the deletions and edits its
log has not been purged of (StreamMeta.unpurged); a data directory written before holds
records without that count."""
POSTINGS_BY_BUCKET: Final = b"postings_by_bucket"
"""The `layout` entry saying that the recall index's keys start with their bucket, beside
a key of no value for each term it holds (eva.core.recall_index); a data directory written
before holds keys that start with the term."""

_U64 = struct.Struct(">Q")
_PREFIX = struct.Struct(">QQ")
_PREFIX_U64 = struct.Struct(">QQQ")
_LINE = struct.Struct(">QQBQ")
MAX_U64: Final = 2**64 - 1


class StreamId(NamedTuple):
    """A guild channel: the unit that owns one event stream."""

    guild_id: int
    channel_id: int

    def __str__(self) -> str:
        return f"{self.guild_id}/{self.channel_id}"


def parse_stream(text: str) -> StreamId:
    """`GUILD/CHANNEL` as printed by `str(StreamId)`; raises ValueError otherwise."""
    guild, sep, channel = text.partition("/")
    if not sep or not guild.isdigit() or not channel.isdigit():
        raise ValueError(f"not a channel id of the form GUILD/CHANNEL: {text!r}")
    stream = StreamId(int(guild), int(channel))
    if stream.guild_id > MAX_U64 or stream.channel_id > MAX_U64:
        raise ValueError(f"channel id out of range: {text!r}")
    return stream


def stream_prefix(stream: StreamId) -> bytes:
    """The 16 bytes every key of the stream starts with (and its `streams` key)."""
    return _PREFIX.pack(stream.guild_id, stream.channel_id)


def stream_of(key: bytes) -> StreamId:
    """The stream a key belongs to."""
    guild, channel = _PREFIX.unpack_from(key)
    return StreamId(guild, channel)


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with `prefix`."""
    return (int.from_bytes(prefix, "big") + 1).to_bytes(len(prefix), "big")


def event_key(stream: StreamId, seq: int) -> bytes:
    return _PREFIX_U64.pack(stream.guild_id, stream.channel_id, seq)


def message_key(stream: StreamId, index: int) -> bytes:
    return _PREFIX_U64.pack(stream.guild_id, stream.channel_id, index)


def discord_id_key(stream: StreamId, message_id: int) -> bytes:
    """The message id first, then the stream: Discord's ids grow with time across every
    channel, so the ids of new messages go to the end of the table, and a commit of
    posts to many channels writes one or two of its pages instead of one a channel.
    A stream's entries are found from the ids of its posts (`eva.core.replay`)."""
    return _PREFIX_U64.pack(message_id, stream.guild_id, stream.channel_id)


def discord_id_keys(stream: StreamId, message_ids: Iterable[int]) -> list[bytes]:
    """`discord_id_key` of each id, in order."""
    pack, guild, channel = _PREFIX_U64.pack, stream.guild_id, stream.channel_id
    return [pack(message_id, guild, channel) for message_id in message_ids]


def stream_first_discord_id_key(key: bytes) -> bytes:
    """A `discord_ids` key as data directories written before `DISCORD_IDS_BY_MESSAGE`
    hold it (stream prefix, then message id), in the layout used now."""
    guild, channel, message_id = _PREFIX_U64.unpack(key)
    return _PREFIX_U64.pack(message_id, guild, channel)


def message_keys(stream: StreamId, start: int, count: int) -> list[bytes]:
    """`message_key` of indexes start .. start+count-1."""
    pack, guild, channel = _PREFIX_U64.pack, stream.guild_id, stream.channel_id
    return [pack(guild, channel, index) for index in range(start, start + count)]


def event_keys(stream: StreamId, first: int, count: int) -> list[bytes]:
    """`event_key` of sequence numbers first .. first+count-1."""
    return message_keys(stream, first, count)  # the same layout


def line_key(stream: StreamId, start: int, size: int) -> bytes:
    """Lines sort by level, then start: a level's lines sit together."""
    return _LINE.pack(stream.guild_id, stream.channel_id, size.bit_length() - 1, start)


def stale_key(stream: StreamId, start: int, size: int) -> bytes:
    """A line whose text is wrong now (a message under it was erased or edited)."""
    return line_key(stream, start, size)


def address_of_line_key(key: bytes) -> tuple[int, int]:
    """The (start, size) of a `line_key` (a `ready` or `stale` entry is keyed the same)."""
    _, _, level, start = _LINE.unpack(key)
    return start, 1 << level


def seq_of(key: bytes) -> int:
    """The trailing number of an event, message or discord-id key."""
    value: int = _U64.unpack_from(key, 16)[0]
    return value


def encode_u64(value: int) -> bytes:
    return _U64.pack(value)


def decode_u64(data: bytes) -> int:
    value: int = _U64.unpack(data)[0]
    return value
