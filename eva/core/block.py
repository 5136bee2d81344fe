# The pieces of the memory block: tail messages as lines, the row inside <memory> tags,
# the note that stands for tail messages left out.
#
# Pure: it is handed the row's lines and the tail's messages as values and
# returns text; eva.core.prompt puts the pieces together as Eva's prompt uses
# them. Invariants: erased messages are never shown; a note names the messages
# it stands for, so zoom and recall can still reach them.
from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache

import msgspec

from eva.core.render import defuse_tags, render_message

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
    message_id: int = 0  # the Discord id, 0 if not known
    reply_to: int | None = None  # the Discord id of the message it replies to


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


_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
CONTINUATION = "\n  "
"""How a message's second and later lines begin: indented, so that no line of a message can
pose as the start of another (`[index] ...`)."""


def fence(text: str) -> str:
    """A message's text as the tail shows it: word for word, but every line after the first
    indented and anything shaped like the memory's own tags defused (< made U+2039), so that
    a message cannot pass for another person's message or for the memory's structure."""
    return _LINE_BREAK.sub(CONTINUATION, defuse_tags(text))


def message_line(message: ShownMessage, tz: tzinfo = UTC) -> str:
    """`[index] YYYY-MM-DD HH:MM Name: text`, the text word for word (fenced, see `fence`)."""
    edited = " (edited)" if message.edited else ""
    body = render_message(message.author_name, message.content, message.attachments)
    return f"[{message.index}] {local_minute(message.at_ms, tz)}{edited} {fence(body)}"


def tail_lines(messages: Sequence[ShownMessage], tz: tzinfo = UTC) -> list[tuple[int, str]]:
    """(index, rendered line) of each message still shown, oldest first."""
    return [(m.index, message_line(m, tz)) for m in messages if not m.deleted]


def lines_over_cap(lines: Sequence[tuple[int, str]], cap_bytes: int) -> int:
    """How many of the oldest lines to leave out so that the rest, each with its newline,
    fit in `cap_bytes`."""
    sizes = [len(line.encode()) + 1 for _, line in lines]
    total = sum(sizes)
    first = 0
    while total > cap_bytes and first < len(lines):
        total -= sizes[first]
        first += 1
    return first


def cut_note(first: int, last: int) -> str:
    """The line that stands in the tail for messages `first..last` left out of it."""
    return (
        f"[messages {first}..{last} are not shown here: "
        "no published line covers them yet; zoom and recall reach them]"
    )


def memory_row(row_lines: Sequence[str]) -> str:
    """The row inside <memory> tags."""
    row = "\n".join(row_lines)
    return f"<memory>\n{row}\n</memory>" if row else "<memory>\n</memory>"
