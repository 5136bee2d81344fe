# DiscordChatExporter (DCE) JSON exports: their shape, and the events they become.
#
# Pure: bytes in, values out. No file, clock or store is touched; what the
# store already holds reaches `export_events` as values and a lookup function.
# Invariants:
# - `parse_export` either returns a fully checked export or raises
#   `ExportError` saying what is wrong and where (the message number, 0-based,
#   and its id when known); the fast path is one msgspec decode, and the slow
#   diagnosis runs only after that decode failed;
# - every id in a checked export is 1..19 decimal digits, so it fits a u64;
#   every time carries its UTC offset;
# - text that is not valid Unicode (a lone UTF-16 surrogate such as "\ud800",
#   or invalid UTF-8) is refused, never repaired: the log stores UTF-8;
# - the Structs are not tracked by the cyclic GC (they hold no cycles), which
#   keeps decoding a large export fast;
# - `export_events` (and `ExportEvents`, which gives them a chunk of messages at
#   a time) never posts a message id twice: ids already stored, and repeated ids
#   inside one export (the first wins), post nothing, so importing the same
#   export again adds nothing.
from __future__ import annotations

import json
import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import msgspec

from eva.core.events import AnyEvent, ChannelDescribed, MessageEdited, MessagePosted
from eva.core.keys import StreamId
from eva.core.state import StreamMeta

_ID_PATTERN = r"^[0-9]{1,19}$"
Snowflake = Annotated[str, msgspec.Meta(pattern=_ID_PATTERN)]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]


class ExportError(ValueError):
    """An export that cannot be imported; the message says what is wrong and where."""


class Guild(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    id: Snowflake
    name: str = ""


class Channel(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    id: Snowflake
    name: str = ""
    category: str | None = None
    topic: str | None = None


class Author(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    id: Snowflake
    name: str
    nickname: str | None = None
    is_bot: bool = False


class Attachment(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    id: str = ""
    url: str = ""
    file_name: str = ""
    file_size_bytes: int = 0


class Reference(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    message_id: Snowflake | None = None
    channel_id: Snowflake | None = None
    guild_id: Snowflake | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    id: Snowflake
    type: str = "Default"
    timestamp: Timestamp
    timestamp_edited: Timestamp | None = None
    content: str
    author: Author
    attachments: tuple[Attachment, ...] = ()
    reference: Reference | None = None


class ChannelExport(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """One channel as DCE exports it; unknown fields are ignored."""

    guild: Guild
    channel: Channel
    exported_at: Timestamp | None = None
    messages: tuple[Message, ...] = ()

    @property
    def stream(self) -> StreamId:
        return StreamId(int(self.guild.id), int(self.channel.id))


@dataclass(frozen=True, slots=True)
class KnownMessage:
    """A message the store already holds, as `export_events` needs to see it."""

    index: int
    content: str
    attachments: tuple[str, ...]
    deleted: bool = False


_decoder = msgspec.json.Decoder(ChannelExport)
_UTF8_BOM = b"\xef\xbb\xbf"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_ONE_MINUTE = timedelta(minutes=1)


# DiscordChatExporter's formats and its CLI's `-f Json`: its docs (.docs/Using-the-CLI.md,
# "Changing the format"), checked 2026-12-07.
REEXPORT = (
    "Eva reads DiscordChatExporter's JSON exports: export the channel again in the JSON "
    "format (JSON in the app's format list, -f Json on its command line)"
)


def other_format(data: bytes) -> str | None:
    """What a file is, by its first bytes, when it is plainly not a JSON export (another of
    DiscordChatExporter's formats, an archive); None otherwise."""
    head = data.removeprefix(_UTF8_BOM).lstrip()[:512]
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (unpack it first)"
    if head[:1] == b"<":
        return "an HTML page (DiscordChatExporter's HTML format)"
    first = head.split(b"\n", 1)[0]
    if head[:1] not in (b"{", b"[") and b"," in first:
        return "a CSV file (DiscordChatExporter's CSV format)"
    if head[:1] not in (b"{", b"[", b""):
        return "plain text (DiscordChatExporter's TXT format, perhaps)"
    return None


def parse_export(data: bytes) -> ChannelExport:
    """The export held in `data` (DCE JSON); raises ExportError if it is not one."""
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    kind = other_format(data)
    if kind is not None:
        raise ExportError(f"the file is {kind}, not a JSON export. {REEXPORT}")
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as error:
        raise ExportError(_explain_invalid(data, str(error))) from None
    except msgspec.DecodeError as error:
        raise ExportError(_explain_malformed(data, str(error))) from None
    except RecursionError:
        raise ExportError(
            "the export nests arrays or objects too deeply to read (thousands of levels); "
            "no DiscordChatExporter export does, so the file is damaged or not an export"
        ) from None


def utc_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch (UTC) of an aware time, floored."""
    return (moment - _EPOCH) // _ONE_MS


def attachment_names(message: Message) -> tuple[str, ...]:
    """The file names of a message's attachments (the URL's last part if a name is absent)."""
    return tuple(a.file_name or a.url.rsplit("/", 1)[-1] for a in message.attachments)


def export_events(
    export: ChannelExport,
    meta: StreamMeta | None,
    known: Callable[[int], KnownMessage | None],
    skip: Callable[[int, int], bool] | None = None,
) -> list[AnyEvent]:
    """The events that bring the stream up to date with the export.

    `meta` is the stream's record as stored (None for a new stream) and
    `known(message_id)` the stored message with that Discord id, if any; it is
    not called while the stream holds no message. Returns a `ChannelDescribed`
    first when the names differ from the stored ones, then, in export order, a
    `MessagePosted` for each new message (indexes continue from the stored
    count) and a `MessageEdited` for each stored message whose text or
    attachments changed. Deleted messages stay deleted. A new message for which
    `skip(author_id, at_ms)` is true (a forgotten person's, eva.core.forget.Forgotten)
    is left out.
    """
    latest = max((utc_ms(m.timestamp) for m in export.messages), default=None)
    described = channel_described(export, latest, meta)
    events: list[AnyEvent] = [] if described is None else [described]
    events += ExportEvents(meta, known, skip).of(export.messages)
    return events


class SeenIds:
    """A set of message ids that holds 8 bytes an id while they come in ascending order,
    as an export lists them (one out of order is kept in a plain set)."""

    def __init__(self) -> None:
        self._ascending = array("Q")
        self._others: set[int] = set()

    def add(self, message_id: int) -> bool:
        """Add an id; whether it was new."""
        ascending = self._ascending
        if not ascending or message_id > ascending[-1]:
            ascending.append(message_id)
            return True
        at = bisect_left(ascending, message_id)
        if (at < len(ascending) and ascending[at] == message_id) or message_id in self._others:
            return False
        self._others.add(message_id)
        return True

    def __len__(self) -> int:
        return len(self._ascending) + len(self._others)


class ExportEvents:
    """The events of an export's messages, given a chunk at a time (`export_events`
    without the channel's description): what it remembers across chunks is the next
    index and the ids seen, so a repeated id posts nothing however far apart its
    copies are."""

    def __init__(
        self,
        meta: StreamMeta | None,
        known: Callable[[int], KnownMessage | None],
        skip: Callable[[int, int], bool] | None = None,
    ) -> None:
        self.next_index = 0 if meta is None else meta.messages
        # Only a stream that held messages before can know one: those posted from
        # here on are in `seen`.
        self._lookup = known if self.next_index else None
        self._skip = skip
        self.seen = SeenIds()

    def of(self, messages: Iterable[Message]) -> list[AnyEvent]:
        """The events of the next messages of the export, in its order."""
        events: list[AnyEvent] = []
        lookup, skip, seen = self._lookup, self._skip, self.seen
        for message in messages:
            message_id = int(message.id)
            if not seen.add(message_id):
                continue
            stored = None if lookup is None else lookup(message_id)
            if stored is None:
                if skip is not None and skip(int(message.author.id), utc_ms(message.timestamp)):
                    continue
                events.append(_posted(message, message_id, self.next_index))
                self.next_index += 1
                continue
            attachments = attachment_names(message)
            if stored.deleted or (
                stored.content == message.content and stored.attachments == attachments
            ):
                continue
            edited_at = message.timestamp_edited or message.timestamp
            events.append(
                MessageEdited(
                    at_ms=utc_ms(edited_at),
                    index=stored.index,
                    message_id=message_id,
                    content=message.content,
                    attachments=attachments,
                )
            )
        return events


def channel_described(
    export: ChannelExport, latest_ms: int | None, meta: StreamMeta | None
) -> ChannelDescribed | None:
    """The event that names the channel, if the stored names differ from the export's.

    `latest_ms` is the latest time a message of the export was posted at (None
    for none): the event's time when the export does not say when it was made.
    """
    guild_name, channel_name = export.guild.name, export.channel.name
    if meta is not None and (meta.guild_name, meta.channel_name) == (guild_name, channel_name):
        return None
    if export.exported_at is not None:
        at_ms = utc_ms(export.exported_at)
    elif latest_ms is not None:
        at_ms = latest_ms
    else:
        at_ms = 0 if meta is None else meta.last_ms
    stream = export.stream
    return ChannelDescribed(
        at_ms=at_ms,
        guild_id=stream.guild_id,
        channel_id=stream.channel_id,
        guild_name=guild_name,
        channel_name=channel_name,
        time_zone="UTC" if meta is None else meta.time_zone,
    )


def _posted(message: Message, message_id: int, index: int) -> MessagePosted:
    moment = message.timestamp
    offset = moment.utcoffset()
    author = message.author
    reference = message.reference
    edited = message.timestamp_edited
    return MessagePosted(
        at_ms=utc_ms(moment),
        index=index,
        message_id=message_id,
        author_id=int(author.id),
        author_name=author.nickname or author.name,
        bot=author.is_bot,
        utc_offset_min=0 if offset is None else offset // _ONE_MINUTE,
        content=message.content,
        reply_to=(
            None if reference is None or reference.message_id is None else int(reference.message_id)
        ),
        attachments=attachment_names(message) if message.attachments else (),
        edited_at_ms=None if edited is None else utc_ms(edited),
    )


# -- diagnosis: runs only after the fast decode failed -----------------------

_AT = re.compile(r"^(?P<problem>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_MESSAGE_PATH = re.compile(r"^\$\.messages\[(?P<index>\d+)\]\.?(?P<rest>.*)$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_BYTE = re.compile(r"\(byte (?P<byte>\d+)\)")
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class _Stop(Exception):
    """Where the slow scan of an export stopped, and why."""

    def __init__(self, position: int, reason: str, complete: int) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason
        self.complete = complete


def _explain_invalid(data: bytes, error: str) -> str:
    """A msgspec validation error, told in terms of the export's messages."""
    match = _AT.match(error)
    problem, path = (match["problem"], match["path"]) if match else (error, "$")
    missing = _MISSING.match(problem)
    message = _MESSAGE_PATH.match(path)
    if message is None:
        field = path.removeprefix("$").removeprefix(".")
        if missing:
            field = f"{field}.{missing['field']}" if field else missing["field"]
            return f"the export has no `{field}`; is this a DiscordChatExporter JSON export?"
        if not field:
            detail = problem[:1].lower() + problem[1:]
            return f"the export is not a DiscordChatExporter JSON object ({detail})"
        return f"the export's `{field}` {_reword(problem)}"
    index = int(message["index"])
    field = message["rest"]
    raw = _message_at(data, index)
    if missing:
        field = f"{field}.{missing['field']}" if field else missing["field"]
        return f"{_message_name(index, raw)}: `{field}` is missing"
    if not field:  # the message itself: null, a list, a number
        return f"{_message_name(index, raw)} is not a message object (it is {_show(raw)})"
    value = _value_at(raw, field)
    shown = "" if value is None else f" (it is {_show(value)})"
    return f"{_message_name(index, raw)}: `{field}` {_reword(problem)}{shown}"


def _reword(problem: str) -> str:
    if problem.startswith("Expected `str` matching regex"):
        return "is not a Discord id (1 to 19 decimal digits)"
    if problem.startswith("Invalid RFC3339"):
        return "is not an ISO 8601 time such as 2018-04-03T01:48:00.000+00:00"
    if problem.startswith("Expected `datetime` with a timezone"):
        return "has no UTC offset (such as +00:00)"
    if problem.startswith("Expected `"):
        return "has the wrong type: " + problem[:1].lower() + problem[1:]
    return problem[:1].lower() + problem[1:]


def _message_name(index: int, raw: Any) -> str:
    message_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(message_id, str) and re.match(_ID_PATTERN, message_id):
        return f"message {index} (id {message_id})"
    return f"message {index}"


def _value_at(raw: Any, field: str) -> Any:
    value = raw
    for part in filter(None, re.split(r"\.|\[(\d+)\]", field) if field else []):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _message_at(data: bytes, index: int) -> Any:
    """Message `index` as plain JSON values, or None if it cannot be reached."""
    text = data.decode("utf-8", errors="replace")
    try:
        for field, number, _position, message in _scan_export(text):
            if field == "messages" and number == index:
                return message
    except _Stop:
        return None
    return None


def _explain_malformed(data: bytes, error: str) -> str:
    """A msgspec decode error, with the number of complete messages before it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as bad:
        return _explain_bad_utf8(data, bad.start)
    try:
        for field, number, position, value in _scan_export(text):
            surrogate = _lone_surrogate(value)
            if surrogate is None:
                continue
            inner, offset = surrogate
            where = (
                f"{_message_name(number, value)}: `{inner}`"
                if field == "messages"
                else f"the export's `{'.'.join(filter(None, (field, inner)))}`"
            )
            return (
                f"{where} holds a lone UTF-16 surrogate at character {offset} "
                f"(line {_line(text, position)}), which is not valid Unicode; "
                "replace it (for example with \\ufffd)"
            )
    except _Stop as stop:
        return _stopped(text, stop, error)
    return f"the export is not valid JSON: {error}"


def _stopped(text: str, stop: _Stop, error: str) -> str:
    messages = f"after {stop.complete} complete message{'s' if stop.complete != 1 else ''}"
    if error.startswith("Input data was truncated") or text[stop.position :].strip() == "":
        return f"the export is truncated: it ends {messages}"
    byte = _BYTE.search(error)
    where = f"line {_line(text, stop.position)}"
    if byte is not None:
        where += f", byte {byte['byte']}"
    return f"the export is malformed JSON at {where}, {messages}: {stop.reason}"


def _explain_bad_utf8(data: bytes, start: int) -> str:
    prefix = data[:start].decode("utf-8")
    try:
        for _ in _scan_export(prefix):
            pass
    except _Stop as stop:
        if stop.complete or "messages" in prefix:
            return (
                f"the export is not valid UTF-8 at byte {start} "
                f"(line {_line(prefix, len(prefix))}), in message {stop.complete}"
            )
    return f"the export is not valid UTF-8 at byte {start} (line {_line(prefix, len(prefix))})"


def _line(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _lone_surrogate(value: Any, path: str = "") -> tuple[str, int] | None:
    """The field path and character offset of the first lone surrogate in `value`."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as bad:
            return path, bad.start
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _lone_surrogate(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for number, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{number}]")
            if found is not None:
                return found
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _scan_export(text: str) -> Iterator[tuple[str, int, int, Any]]:
    """The export's top-level fields and messages one by one, with the stdlib decoder.

    Yields (field, number, start, value): for each message ("messages", its
    number, where it starts, its value), for other fields (name, -1, start, value).
    Slow, but it knows how far it got: it raises `_Stop` with the number of
    complete messages where the text stops being a DCE export.
    """
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    complete = 0

    def skip(position: int) -> int:
        found = _WHITESPACE.match(text, position)
        return position if found is None else found.end()

    def expect(position: int, chars: str, what: str) -> int:
        position = skip(position)
        if text[position : position + 1] not in tuple(chars):
            got = "the end" if position >= len(text) else repr(text[position])
            raise _Stop(position, f"expected {what}, found {got}", complete)
        return position

    def value(position: int) -> tuple[Any, int]:
        try:
            return decoder.raw_decode(text, position)
        except (json.JSONDecodeError, ValueError) as error:
            at = error.pos if isinstance(error, json.JSONDecodeError) else position
            reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            raise _Stop(at, reason, complete) from None
        except RecursionError:
            raise _Stop(position, "arrays or objects nested too deeply", complete) from None

    position = expect(0, "{", "a JSON object")
    position = skip(position + 1)
    if text[position : position + 1] == "}":
        return
    while True:
        position = expect(position, '"', "a field name")
        key, position = value(position)
        position = expect(position, ":", "':'") + 1
        if key == "messages":
            position = expect(position, "[", "the list of messages")
            position = skip(position + 1)
            if text[position : position + 1] != "]":
                while True:
                    start = skip(position)
                    message, position = value(start)
                    yield "messages", complete, start, message
                    complete += 1
                    position = expect(position, ",]", "',' or ']' after a message")
                    if text[position] == "]":
                        break
                    position += 1
            position += 1
        else:
            start = skip(position)
            found, position = value(start)
            yield key, -1, start, found
        position = expect(position, ",}", "',' or '}'")
        if text[position] == "}":
            return
        position += 1
