# Reading a DiscordChatExporter export piece by piece, so that memory follows a chunk of
# messages and not the whole export.
#
# Pure: byte blocks in (the shell reads them from a file), values out. msgspec
# cannot decode a JSON array a piece at a time, so the export is read twice.
# `outline_export` finds each message's extent with a splitter (a regular
# expression that follows strings and brackets, nothing else) and decodes the
# messages a chunk at a time with the same msgspec types as `parse_export`,
# which checks every one of them; it returns the fields other than the
# messages and where each chunk lies. Once two messages have shown what lies
# between them (`},` and the white space before `{`), a chunk is found by
# counting that joint instead, and taken if it decodes as messages: text cut
# inside a message never does (its brackets do not close), and what does not
# is split by the splitter. `export_chunks` then reads the chunks
# again at those places, with no splitting, unless the outline kept them: an
# export of at most `keep_bytes` of messages is held decoded from the first
# read, and read once. Invariants:
# - whatever the splitter cannot follow (malformed JSON, a message that does not
#   decode, nesting deeper than it follows, two `messages` fields) raises
#   `NotStreamable` and nothing else: the caller then parses the export whole
#   (`parse_export`), whose verdict and error messages are the ones that count;
# - an export the splitter follows gives exactly the messages and fields that
#   `parse_export` gives for it: each message is decoded alone by msgspec, in
#   order, and the other fields are decoded together as one object;
# - the bytes held at a time are about one chunk and one block, besides the decoded
#   messages of an export small enough to keep.
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from eva.core.dce import ChannelExport, Message, utc_ms

CHUNK_MESSAGES = 8192
"""Messages decoded, and later stored, together."""

_UTF8_BOM = b"\xef\xbb\xbf"
_WS = re.compile(rb"[ \t\n\r]*+")
_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
NESTING = 24
"""Arrays and objects inside one message that the splitter follows; a DCE message has
about five levels (an embed's fields)."""


def _nested(depth: int) -> bytes:
    """A bracketed value holding at most `depth` levels of brackets: strings are skipped
    whole, so brackets inside them do not count. Possessive, so a value cut off by the
    end of a block fails at once instead of backtracking."""
    inner = rb"(?!)"
    for _ in range(depth):
        inner = rb'[\[{](?:[^"{}\[\]]++|' + _STRING + rb"|" + inner + rb")*+[\]}]"
    return inner


_VALUE = re.compile(_nested(NESTING) + rb"|" + _STRING + rb'|[^"{}\[\],: \t\n\r]++', re.DOTALL)
_KEY = re.compile(_STRING, re.DOTALL)
_messages_decoder = msgspec.json.Decoder(tuple[Message, ...])
_head_decoder = msgspec.json.Decoder(ChannelExport)
_key_decoder = msgspec.json.Decoder(str)


class NotStreamable(Exception):
    """The export cannot be read piece by piece; parse it whole (`parse_export`)."""


@dataclass(frozen=True, slots=True)
class ExportOutline:
    """An export checked piece by piece: everything but its messages, and where they are."""

    head: ChannelExport
    """The export's fields, its messages left out."""
    messages: int
    latest_ms: int | None
    """The latest time a message was posted at, if there is a message."""
    chunks: tuple[tuple[int, int], ...]
    """Where each chunk's messages lie, as byte offsets (a BOM left out): the text of
    messages from the first's start to the last's end, commas between."""
    kept: tuple[tuple[Message, ...], ...] | None = None
    """Each chunk's messages, decoded, if the export's messages took at most the
    `keep_bytes` asked for: then there is no need to read it again."""


def outline_export(
    blocks: Iterable[bytes], chunk_messages: int = CHUNK_MESSAGES, keep_bytes: int = 0
) -> ExportOutline:
    """Check an export given as byte blocks, a chunk of messages at a time; NotStreamable
    if it cannot be followed so (then `parse_export` over the whole says why, if anything
    is wrong). The decoded chunks are kept if their text takes at most `keep_bytes`."""
    reader = _Reader(blocks)
    head: list[bytes] = []
    chunks: list[tuple[int, int]] = []
    kept: list[tuple[Message, ...]] | None = []
    kept_bytes = 0

    def keep(start: int, end: int, decoded: tuple[Message, ...]) -> None:
        nonlocal kept, kept_bytes
        kept_bytes += end - start
        if kept is not None and kept_bytes <= keep_bytes:
            kept.append(decoded)
        else:
            kept = None

    messages = 0
    latest: int | None = None
    position = reader.expect(reader.skip(0), b"{") + 1
    position = reader.skip(position)
    if reader.char(position) == b"}":
        return ExportOutline(_decode_head(head), 0, None, (), ())
    listed = False
    while True:
        key = reader.match(_KEY, position)
        name = _key_decoder.decode(key.text)
        position = reader.expect(reader.skip(key.stop), b":") + 1
        position = reader.skip(position)
        if name != "messages":
            value = reader.match(_VALUE, position)
            head.append(key.text + b":" + value.text)
            position = value.stop
        elif listed:
            raise NotStreamable("two lists of messages")
        else:
            listed = True
            head.append(key.text + b":[]")
            position = reader.skip(reader.expect(position, b"[") + 1)
            if reader.char(position) == b"]":
                position += 1
            else:
                start, count = position, 0
                joint: bytes | None = None  # what lies between two messages, with their `}{`
                counted = False  # whether the joints were counted for this chunk already
                while True:
                    if joint is not None and not counted:
                        # The rest of the chunk by the joints between its messages; the
                        # splitter takes a chunk whose text that does not decode, and
                        # the export's last message, after which no joint comes.
                        counted = True
                        wanted = chunk_messages - count
                        found = reader.end_of_nth(joint, position, wanted)
                        if found is not None and found[1] < wanted:  # the export's last ones
                            count += found[1]
                            position = found[0] + len(joint) - 2  # its last message's `{`
                            continue
                        end = None if found is None else found[0]
                        decoded = None if end is None else _messages_or_none(
                            reader.text(start, end)
                        )
                        if end is not None and decoded:
                            newest = max(utc_ms(m.timestamp) for m in decoded)
                            latest = newest if latest is None else max(latest, newest)
                            chunks.append((start, end))
                            keep(start, end, decoded)
                            messages += len(decoded)
                            reader.forget_before(end)
                            start = position = end + len(joint) - 2  # the next `{`
                            count, counted = 0, False
                            continue
                    message = reader.match(_VALUE, position)
                    count += 1
                    position = reader.skip(message.stop)
                    after = reader.char(position)
                    if after not in (b",", b"]"):
                        raise NotStreamable("no ',' or ']' after a message")
                    if after == b"]" or count == chunk_messages:
                        decoded = _decode_messages(reader.text(start, message.stop))
                        newest = max(utc_ms(m.timestamp) for m in decoded)
                        latest = newest if latest is None else max(latest, newest)
                        chunks.append((start, message.stop))
                        keep(start, message.stop, decoded)
                        messages += len(decoded)
                        reader.forget_before(message.stop)
                        start, count, counted = -1, 0, False
                    position += 1
                    if after == b"]":
                        break
                    following = reader.skip(position)
                    if joint is None and message.text.endswith(b"}"):
                        between = reader.text(message.stop, following)
                        if reader.char(following) == b"{":
                            joint = b"}" + between + b"{"
                    position = following
                    if start < 0:
                        start = position
        position = reader.skip(position)
        after = reader.char(position)
        if after == b"}":
            break
        if after != b",":
            raise NotStreamable("no ',' or '}' after a field")
        position = reader.skip(position + 1)
    if not reader.ends_at(reader.skip(position + 1)):
        raise NotStreamable("text after the export")
    return ExportOutline(
        _decode_head(head), messages, latest, tuple(chunks), None if kept is None else tuple(kept)
    )


def export_chunks(
    blocks: Iterable[bytes], chunks: Iterable[tuple[int, int]]
) -> Iterator[tuple[Message, ...]]:
    """The messages of each chunk an outline found, read again from the same bytes;
    NotStreamable if they no longer decode (the export changed in between)."""
    reader = _Reader(blocks)
    for start, end in chunks:
        yield _decode_messages(reader.text(start, end))
        reader.forget_before(end)


def _messages_or_none(text: bytes) -> tuple[Message, ...] | None:
    """The messages of a run of them, or None if the text is not one (it was cut
    inside a message: its brackets do not close) or a message does not decode."""
    try:
        return _messages_decoder.decode(b"[" + text + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _decode_messages(text: bytes) -> tuple[Message, ...]:
    try:
        return _messages_decoder.decode(b"[" + text + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise NotStreamable(str(error)) from None


def _decode_head(fields: list[bytes]) -> ChannelExport:
    try:
        return _head_decoder.decode(b"{" + b",".join(fields) + b"}")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise NotStreamable(str(error)) from None


class _Reader:
    """The export's bytes as a window over its blocks, addressed by absolute offset."""

    def __init__(self, blocks: Iterable[bytes]) -> None:
        self._blocks = iter(blocks)
        self._data = b""
        self._base = 0  # the offset of self._data[0]
        self._ended = False
        self._first = True

    def _more(self) -> bool:
        """Read one more block; False at the end of the export."""
        for block in self._blocks:
            if self._first:
                self._first = False
                block = block.removeprefix(_UTF8_BOM)
            if block:
                self._data += block
                return True
        self._ended = True
        return False

    def forget_before(self, position: int) -> None:
        """Drop the bytes before `position`: nothing will ask for them again."""
        cut = position - self._base
        if cut > 0:
            self._data = self._data[cut:]
            self._base = position

    def _hold(self, end: int) -> bool:
        """Whether the bytes up to `end` are read (reading more as needed)."""
        while end - self._base > len(self._data):
            if not self._more():
                return False
        return True

    def text(self, start: int, end: int) -> bytes:
        if not self._hold(end):
            raise NotStreamable("the export ends early")
        return self._data[start - self._base : end - self._base]

    def char(self, position: int) -> bytes:
        return self.text(position, position + 1) if self._hold(position + 1) else b""

    def ends_at(self, position: int) -> bool:
        return not self._hold(position + 1)

    def skip(self, position: int) -> int:
        """The first position from `position` on that is not white space."""
        while True:
            end = _WS.match(self._data, position - self._base)
            assert end is not None  # white space matches the empty string
            if end.end() < len(self._data) or not self._more():
                return end.end() + self._base

    def end_of_nth(self, joint: bytes, position: int, count: int) -> tuple[int, int] | None:
        """Just past the `}` of the `count`th `joint` from `position` on (reading more as
        needed), or of the last one if the export has fewer, and how many that is; None
        if it has none."""
        at = position - self._base
        seen = last = 0
        while seen < count:
            while (found := self._data.find(joint, at)) < 0:
                at = max(at, len(self._data) - len(joint) + 1)
                if not self._more():
                    return None if seen == 0 else (last, seen)
            at = found + len(joint) - 1
            seen += 1
            last = at - len(joint) + 2 + self._base
        return last, seen

    def expect(self, position: int, char: bytes) -> int:
        if self.char(position) != char:
            raise NotStreamable(f"expected {char.decode()}")
        return position

    def match(self, pattern: re.Pattern[bytes], position: int) -> _Found:
        """The match of `pattern` at `position`, with bytes after it read (so that it is
        known to be whole); NotStreamable if there is none."""
        while True:
            found = pattern.match(self._data, position - self._base)
            if found is not None and found.end() < len(self._data):
                return _Found(found.group(), found.end() + self._base)
            if not self._more():
                if found is None:
                    raise NotStreamable("a value the splitter cannot follow")
                return _Found(found.group(), found.end() + self._base)


@dataclass(frozen=True, slots=True)
class _Found:
    text: bytes
    stop: int  # the offset just past it
