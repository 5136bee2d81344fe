# Text forms of memory: a message as a leaf, a line as a row entry, and byte budgets.
#
# Pure: it is handed texts, times (UTC milliseconds) and a time zone value; it
# reads no clock and no time zone database of its own.
# Invariants: a rendered row entry is one line (no line breaks of any kind);
# `cut_to_bytes` returns a prefix of its input that fits the limit in UTF-8 and
# never splits a character, nor a character from the marks that join onto it.
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache

from eva.core.address import Address, format_address

LINE_LIMIT_BYTES = 512

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BREAK_CHARACTERS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""What `str.splitlines` breaks at (and \\r\\n, as one break)."""
_ZERO_WIDTH_JOINER = "\u200d"
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")
"""A whitespace character with none after it (`\\s` is what `str.isspace` says)."""


def utf8_size(text: str) -> int:
    """The number of bytes of `text` in UTF-8."""
    # An ASCII string knows it is one without a scan: a byte per character.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def fits(text: str, limit: int = LINE_LIMIT_BYTES) -> bool:
    """Whether `text` is at most `limit` bytes of UTF-8."""
    return utf8_size(text) <= limit


def flatten_line_breaks(text: str) -> str:
    """`text` with every line break (\\r\\n, \\n, \\r, \\u2028, ...) turned into one space.

    `str.splitlines` breaks at exactly these, so it does the work (one scan in C, and
    nothing to build for a text of one line); a break at the very end leaves a space.
    """
    lines = text.splitlines()
    at_end = text[-1:] in _BREAK_CHARACTERS if text else False
    if len(lines) <= 1 and not at_end:
        return text
    joined = " ".join(lines)
    return f"{joined} " if at_end else joined


def local_date(at_ms: int, tz: tzinfo = UTC) -> str:
    """The calendar date `YYYY-MM-DD` of a UTC millisecond time, seen in `tz`.

    Worked out once per UTC hour and zone where the date holds for the whole
    hour, else once per minute (zone offsets are whole minutes since long
    before chat existed), since a row renders many lines of one day.
    """
    minute = at_ms // 60_000
    date = _date_of_hour(minute // 60, tz)
    return date if date is not None else _date_of_minute(minute, tz)


@lru_cache(maxsize=16384)
def _date_of_hour(hour: int, tz: tzinfo) -> str | None:
    """The date of every minute of a UTC hour in `tz`; None if it changes within the hour.

    The offset is the same at the hour's first and last minute and no zone
    changes its offset twice within an hour, so local time runs straight
    through it: a date that is the same at both ends holds throughout.
    """
    first = (_EPOCH + timedelta(hours=hour)).astimezone(tz)
    last = (_EPOCH + timedelta(hours=hour, minutes=59)).astimezone(tz)
    if first.utcoffset() != last.utcoffset() or first.date() != last.date():
        return None
    return first.date().isoformat()


@lru_cache(maxsize=16384)
def _date_of_minute(minute: int, tz: tzinfo) -> str:
    return (_EPOCH + timedelta(minutes=minute)).astimezone(tz).date().isoformat()


def date_span(first_ms: int, last_ms: int, tz: tzinfo = UTC) -> str:
    """`YYYY-MM-DD` when both times fall on one day in `tz`, else `YYYY-MM-DD..YYYY-MM-DD`."""
    first_day = local_date(first_ms, tz)
    last_day = local_date(last_ms, tz)
    return first_day if first_day == last_day else f"{first_day}..{last_day}"


# Characters a terminal acts on instead of showing: C0 and C1 controls but tab and line
# feed, and the controls of text direction, which can make a line read backwards.
_UNSEEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` for a person's terminal: each control character shown as `<U+XXXX>`, so
    that none moves the cursor, rings, or turns the line around. JSON keeps text exact."""
    return _UNSEEN.sub(lambda m: f"<U+{ord(m.group(0)):04X}>", text)


_OUR_TAGS = re.compile(r"<(/?)(memory)\b", re.IGNORECASE)


def defuse_tags(text: str) -> str:
    """`text` with anything shaped like the memory block's own tags (`<memory>`, `</memory>`)
    given U+2039 for its `<`, so that chat text can never close or open the block."""
    return _OUR_TAGS.sub(lambda m: f"\u2039{m.group(1)}{m.group(2)}", text)


def render_line(address: Address, text: str, first_ms: int, last_ms: int, tz: tzinfo = UTC) -> str:
    """One row entry: `start+size DATE|text`, all on one line, the block's tags defused."""
    entry = format_address(address)
    return f"{entry} {date_span(first_ms, last_ms, tz)}|{defuse_tags(flatten_line_breaks(text))}"


_RESIZING = re.compile("[<\r\x85\u2028\u2029]")
"""What can make a row entry's text take other bytes than the line's own: a tag that
`defuse_tags` changes, or a line break that is not one byte (\\r\\n is one break);
`flatten_line_breaks` makes each one-byte break one space."""


def line_bytes(address: Address, text: str, first_ms: int, last_ms: int, tz: tzinfo = UTC) -> int:
    """`utf8_size(render_line(...))`, without building the entry where its text is the
    line's own."""
    if _RESIZING.search(text) is not None:
        return utf8_size(render_line(address, text, first_ms, last_ms, tz))
    head = len(str(address.start)) + len(str(address.size)) + 3  # "+", " " and "|"
    return head + len(date_span(first_ms, last_ms, tz)) + utf8_size(text)


def render_row(lines: Iterable[str]) -> str:
    """The rendered row: its entries, oldest first, one per line."""
    return "\n".join(lines)


def render_message(name: str, content: str, attachments: Sequence[str] = ()) -> str:
    """A message as it reads in memory: `Name: text` with each attachment named."""
    if not attachments:  # most messages: no list to build
        return f"{name}: {content}"
    parts = [content] if content else []
    parts.extend(f"[attachment: {attachment}]" for attachment in attachments)
    return f"{name}: {' '.join(parts)}"


def join_glue(older: str, newer: str) -> str:
    """Two sibling lines glued into their parent: joined by a newline.

    An empty half (an erased message) adds nothing, so no stray newline appears.
    """
    if not older:
        return newer
    if not newer:
        return older
    return f"{older}\n{newer}"


def _joins_previous(character: str) -> bool:
    """Whether `character` belongs to the character before it (a cut may not go before it)."""
    return (
        unicodedata.category(character) in ("Mn", "Mc", "Me")
        or character == _ZERO_WIDTH_JOINER
        or "\ufe00" <= character <= "\ufe0f"
        or "\U0001f3fb" <= character <= "\U0001f3ff"
    )


def _is_cut_point(text: str, position: int) -> bool:
    """Whether text[:position] ends between two whole characters as a reader sees them."""
    if position in (0, len(text)):
        return True
    return not _joins_previous(text[position]) and text[position - 1] != _ZERO_WIDTH_JOINER


def _longest_prefix_in(text: str, limit: int) -> int:
    """The length in characters of the longest prefix of `text` within `limit` bytes."""
    if text.isascii():  # a byte a character
        return min(len(text), max(limit, 0))
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return len(text)
    return len(encoded[: max(limit, 0)].decode("utf-8", errors="ignore"))


def cut_to_bytes(text: str, limit: int) -> str:
    """The start of `text` within `limit` UTF-8 bytes, cut after a word when it can be.

    Returns `text` itself when it fits. Otherwise cuts at the last space inside
    the limit (dropping the trailing spaces); with no space, cuts between
    characters, keeping combining marks and joined emoji with their base.
    """
    end = _longest_prefix_in(text, limit)
    if end == len(text):
        return text
    # The last whitespace at or before `end`, in C: the last plain space, unless
    # another kind of space comes after it (looked for only in the word after it).
    position = text.rfind(" ", 0, end + 1)
    other = _LAST_SPACE.search(text, position + 1, end + 1)
    if other is not None:
        position = other.start()
    if position > 0:
        cut = text[:position].rstrip()
        if cut:
            return cut
    while end > 0 and not _is_cut_point(text, end):
        end -= 1
    return text[:end]
