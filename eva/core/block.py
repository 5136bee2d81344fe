# The memory block: the rendered row inside <memory> tags, then the tail word for word.
#
# Pure: it is handed the row's lines and the tail's messages as values and
# returns the exact text Eva's prompt uses. Invariants: the tail never passes
# its byte cap (the oldest messages are cut, with a note naming them, so zoom
# and recall can still reach them); erased messages are never shown.
from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache

import msgspec

from eva.core.render import render_message

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ShownMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message as the prompt and the tools show it."""

    index: int
    at_ms: int
    author_name: str
    content: str
    attachments: tuple[str, ...] = ()
    edited: bool = False
    deleted: bool = False


def local_minute(at_ms: int, tz: tzinfo = UTC) -> str:
    """`YYYY-MM-DD HH:MM` of a UTC millisecond time in `tz`."""
    return _minute(at_ms // 60_000, tz)


@lru_cache(maxsize=8192)
def _minute(minute: int, tz: tzinfo) -> str:
    moment = (_EPOCH + timedelta(minutes=minute)).astimezone(tz)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}"
    )


def message_line(message: ShownMessage, tz: tzinfo = UTC) -> str:
    """`[index] YYYY-MM-DD HH:MM Name: text`, the text word for word."""
    edited = " (edited)" if message.edited else ""
    body = render_message(message.author_name, message.content, message.attachments)
    return f"[{message.index}] {local_minute(message.at_ms, tz)}{edited} {body}"


def render_tail(messages: Sequence[ShownMessage], cap_bytes: int, tz: tzinfo = UTC) -> str:
    """The tail, oldest first, cut from the oldest end to stay within `cap_bytes`."""
    return cap_tail(tail_lines(messages, tz), cap_bytes)


def tail_lines(messages: Sequence[ShownMessage], tz: tzinfo = UTC) -> list[tuple[int, str]]:
    """(index, rendered line) of each message still shown, oldest first."""
    return [(m.index, message_line(m, tz)) for m in messages if not m.deleted]


def cap_tail(lines: Sequence[tuple[int, str]], cap_bytes: int) -> str:
    """Rendered tail lines joined, the oldest cut (with a note naming them) to fit `cap_bytes`."""
    sizes = [len(line.encode()) + 1 for _, line in lines]
    total = sum(sizes)
    first = 0
    while total > cap_bytes and first < len(lines):
        total -= sizes[first]
        first += 1
    if first == 0:
        return "\n".join(line for _, line in lines)
    note = (
        f"[messages {lines[0][0]}..{lines[first - 1][0]} are not shown here: "
        "no published line covers them yet; zoom and recall reach them]"
    )
    return "\n".join([note, *(line for _, line in lines[first:])])


def memory_block(row_lines: Sequence[str], tail: str) -> str:
    """The row inside <memory> tags, then the tail."""
    row = "\n".join(row_lines)
    inside = f"<memory>\n{row}\n</memory>" if row else "<memory>\n</memory>"
    return f"{inside}\n{tail}" if tail else inside
