# From Discord payload values to Eva's inputs, and from Eva's answers to Discord messages.
#
# Pure: plain values in (ids, names, datetimes, text), values out; no hikari, trio, lmdb or
# anthropic, no clock (callers pass "now"). The gateway shell reads its hikari events into
# these arguments, so almost all of what the bot decides is tested without Discord.
# Invariants: a channel and each thread is its own stream (guild id, channel id); a reply
# is split into pieces of at most `limit` UTF-16 code units (how Discord counts), never
# inside a character or a combining sequence, and the pieces hold the whole text.
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from eva.core.keys import StreamId
from eva.core.recall import RecallLine
from eva.core.shards import shard_of
from eva.live.inputs import Delete, Edit, Post

DISCORD_LIMIT = 2000
OFFLINE_NOTE = "(Eva is offline: no model is connected, so she can only quote her memory.)"
OFFLINE_HITS = 5

_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ZWJ = "\u200d"


def stream_of(guild_id: int, channel_id: int) -> StreamId:
    """The stream of a guild channel or thread."""
    return StreamId(int(guild_id), int(channel_id))


def shard_for(guild_id: int, shard_count: int) -> int:
    """The shard Discord puts a guild on."""
    return shard_of(guild_id, shard_count)


def at_ms(moment: datetime) -> int:
    """A timezone-aware datetime as milliseconds since the Unix epoch."""
    return round(moment.timestamp() * 1000)


def display_name(nickname: str | None, global_name: str | None, username: str) -> str:
    """The name a person shows in a guild: nickname, else global name, else username."""
    for name in (nickname, global_name, username):
        if name and name.strip():
            return name.strip()
    return username


def readable(content: str, names: Mapping[int, str]) -> str:
    """`content` with user mentions `<@id>` of known people written `@Name`."""

    def name(match: re.Match[str]) -> str:
        known = names.get(int(match.group(1)))
        return match.group(0) if known is None else f"@{known}"

    return _USER_MENTION.sub(name, content)


def post_of(
    *,
    message_id: int,
    author_id: int,
    author_name: str,
    is_bot: bool,
    timestamp: datetime,
    content: str,
    referenced_message_id: int | None = None,
    attachment_filenames: Sequence[str] = (),
    mention_names: Mapping[int, str] | None = None,
) -> Post:
    """A message created in a channel (by a person, another bot or Eva herself)."""
    return Post(
        message_id=int(message_id),
        author_id=int(author_id),
        author_name=author_name,
        at_ms=at_ms(timestamp),
        content=readable(content, mention_names or {}),
        bot=is_bot,
        reply_to=None if referenced_message_id is None else int(referenced_message_id),
        attachments=tuple(attachment_filenames),
    )


def edit_of(
    *,
    message_id: int,
    content: str,
    edited_at: datetime | None,
    now_ms: int,
    attachment_filenames: Sequence[str] = (),
    mention_names: Mapping[int, str] | None = None,
) -> Edit:
    """A message's new text; timed at its edit stamp, else at `now_ms`."""
    return Edit(
        message_id=int(message_id),
        at_ms=now_ms if edited_at is None else at_ms(edited_at),
        content=readable(content, mention_names or {}),
        attachments=tuple(attachment_filenames),
    )


def delete_of(message_ids: Iterable[int], now_ms: int) -> Delete:
    """Messages deleted in Discord (one, or a bulk delete), oldest id first."""
    return Delete(message_ids=tuple(sorted({int(i) for i in message_ids})), at_ms=now_ms)


def mentions_eva(
    content: str,
    mentioned_user_ids: Iterable[int],
    eva_id: int,
    referenced_author_id: int | None,
) -> bool:
    """Whether a message speaks to Eva: it mentions her, or replies to one of her messages."""
    if referenced_author_id is not None and int(referenced_author_id) == eva_id:
        return True
    if any(int(user) == eva_id for user in mentioned_user_ids):
        return True
    return any(int(found) == eva_id for found in _USER_MENTION.findall(content))


def without_mention(content: str, eva_id: int, eva_name: str = "Eva") -> str:
    """The question with Eva's own mention taken out (raw `<@id>` or written `@Name`)."""
    text = re.sub(rf"<@!?{eva_id}>", " ", content)
    text = re.sub(rf"(?<!\w)@{re.escape(eva_name)}\b", " ", text)
    return " ".join(text.split())


# -- replies ------------------------------------------------------------------------


def utf16_units(text: str) -> int:
    """Discord's length of a text: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _joins(char: str) -> bool:
    """A character that belongs with the one before it (no cut just before it)."""
    return (
        unicodedata.combining(char) != 0
        or char == _ZWJ
        or 0xFE00 <= ord(char) <= 0xFE0F  # variation selectors
        or 0x1F3FB <= ord(char) <= 0x1F3FF  # skin tones
        or 0xE0020 <= ord(char) <= 0xE007F  # tag characters
    )


def _fitting(text: str, limit: int) -> int:
    """How many characters of `text` fit in `limit` UTF-16 units."""
    units = 0
    for count, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return count
    return len(text)


def _cut_at(text: str, end: int) -> int:
    """Where to cut the head of `text` that is at most `end` characters long."""
    for separator in ("\n\n", "\n", " "):
        found = text.rfind(separator, 0, end + len(separator))
        if found > 0:
            return found
    cut = end
    while cut > 1 and (_joins(text[cut]) or text[cut - 1] == _ZWJ):
        cut -= 1
    return cut


def split_reply(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """`text` in pieces Discord accepts: at paragraphs, else lines, else words, else characters.

    The separator a piece ends at is dropped; no piece is empty or blank.
    """
    if limit < 2:
        raise ValueError("a reply piece must hold at least two UTF-16 units")
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        end = _fitting(rest, limit)
        if end == len(rest):
            pieces.append(rest)
            break
        cut = _cut_at(rest, end)
        piece = rest[:cut].rstrip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].lstrip()
    return pieces


def offline_reply(question: str, hits: Sequence[RecallLine], limit: int = DISCORD_LIMIT) -> str:
    """What Eva says without a model: that she is offline, and the messages recall found."""
    if not question.strip():
        return f"{OFFLINE_NOTE} Ask me about something and I will look it up in my memory."
    shown = [line for line in hits if line.hit][:OFFLINE_HITS]
    if not shown:
        return f"{OFFLINE_NOTE} I found nothing about “{question}” in this channel."
    lines = [OFFLINE_NOTE, f"What I remember about “{question}”:"]
    for line in shown:
        quote = f"> {line.time} {line.author}: {line.text}"
        if utf16_units("\n".join([*lines, quote])) > limit:
            break
        lines.append(quote)
    return "\n".join(lines)
