# Local chat for `eva serve-local`: chat lines, stable ids, and exported messages as inputs.
#
# Pure: plain values in and out; no clock (the caller passes the time), no IO.
# Invariants: an id derived from a name is the same in every run and process;
# message ids from `MessageIds` strictly increase.
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from eva.core.keys import StreamId

LOCAL_GUILD = 0
DEFAULT_CHANNEL = "#local"
DISCORD_EPOCH_MS = 1_420_070_400_000

_CHAT_LINE = re.compile(
    r"^(?:(?P<channel>#[^\s:#]+)\s+)?(?P<name>[^\s#:][^:]{0,79}?)\s*:\s?(?P<text>.*\S.*)$"
)


@dataclass(frozen=True, slots=True)
class ChatLine:
    """One line of local chat: the channel's name (without `#`), the author and the text."""

    channel: str
    author: str
    text: str


def parse_chat_line(line: str, default_channel: str = DEFAULT_CHANNEL) -> ChatLine | None:
    """`#CHANNEL NAME: text` or `NAME: text` as a ChatLine; None if the line is neither."""
    match = _CHAT_LINE.match(line.strip())
    if match is None:
        return None
    channel = (match["channel"] or default_channel).removeprefix("#")
    return ChatLine(channel, match["name"].strip(), match["text"].strip())


def stable_id(kind: str, name: str) -> int:
    """A 63-bit id derived from `name` alone: the same in every run and process."""
    person = f"eva-local-{kind}".encode()[:16]
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=person).digest()
    return int.from_bytes(digest, "big") >> 1


def local_stream(channel: str) -> StreamId:
    """The stream of a local channel, by its name without `#`."""
    return StreamId(LOCAL_GUILD, stable_id("channel", channel))


class MessageIds:
    """Snowflake-like message ids from the wall clock, strictly increasing."""

    def __init__(self) -> None:
        self.last = 0

    def next(self, now_ms: int) -> int:
        self.last = max(self.last + 1, max(0, now_ms - DISCORD_EPOCH_MS) << 22)
        return self.last
