# A gateway MESSAGE_CREATE payload read straight into a Post, without hikari's models.
#
# Pure: a decoded JSON object in, a Post (or None) out. Messages are nearly all of a busy
# shard's traffic, and building hikari's message, member and user objects for each costs
# more than storing it; the bot reads the few fields it keeps from the payload instead.
# Invariants: for every payload hikari would turn into a GuildMessageCreateEvent, the Post
# equals what eva.discord.messages.post_from makes of hikari's message (the tests check
# this through hikari's own entity factory); a payload missing a field Eva needs raises
# PayloadError naming it.
from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from eva.core.keys import StreamId
from eva.discord.mapping import display_name, mentions_eva, post_of
from eva.live.inputs import Post

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
CHAT_TYPE_CODES = frozenset({0, 19, 20, 23})
"""Discord's message types that are chat: default, reply, slash command, context menu."""


class PayloadError(ValueError):
    """A message payload that lacks a field Eva needs, or holds one of the wrong kind."""


def chat_post(payload: Mapping[str, Any], eva_id: int, eva_name: str) -> Post | None:
    """The post a MESSAGE_CREATE payload stores; None for direct messages and non-chat types.

    Every field the post keeps is checked for its kind and range here, at the edge:
    a payload Discord would never send is left out with a PayloadError, never stored.
    """
    kind = payload.get("type")
    if payload.get("guild_id") is None or not isinstance(kind, int) or kind not in CHAT_TYPE_CODES:
        return None
    try:
        author = payload["author"]
        member = payload.get("member") or {}
        names = {eva_id: eva_name}
        for user in payload.get("mentions") or ():
            username = user.get("username")
            if isinstance(username, str):
                names[snowflake(user["id"], "a mention's id")] = display_name(
                    None, _text_or_none(user.get("global_name")), username
                )
        content = whole_text(payload.get("content") or "", "the content")
        name = display_name(
            _text_or_none(member.get("nick")),
            _text_or_none(author.get("global_name")),
            _text(author["username"], "the author's username"),
        )
        files = [_text(a["filename"], "an attachment's file name")
                 for a in payload.get("attachments") or ()]
        reply_to = _reply_to(payload)
        return post_of(
            message_id=snowflake(payload["id"], "the message id"),
            author_id=snowflake(author["id"], "the author's id"),
            author_name=name,
            is_bot=bool(author.get("bot")),
            timestamp=_moment(payload["timestamp"]),
            content=content,
            referenced_message_id=reply_to,
            attachment_filenames=files,
            mention_names=names,
        )
    except KeyError as missing:
        raise PayloadError(f"message {payload.get('id')!r} has no {missing}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as error:
        raise PayloadError(f"message {payload.get('id')!r} is malformed: {error}") from None


def chat_stream(payload: Mapping[str, Any]) -> StreamId:
    """The guild channel a message payload belongs to; PayloadError if its ids are not ids."""
    return StreamId(
        snowflake(payload.get("guild_id"), "the guild id"),
        snowflake(payload.get("channel_id"), "the channel id"),
    )


def snowflake(value: object, what: str) -> int:
    """A Discord id given as digits (or a number): positive and below 2**64."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PayloadError(f"{what} is not an id: {value!r}")
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise PayloadError(f"{what} is not an id: {value[:40]!r}")
    number = int(value)
    if not 0 < number < 2**64:
        raise PayloadError(f"{what} is out of range: {number}")
    return number


def whole_text(value: object, what: str) -> str:
    """Text as the log can hold it: a lone surrogate (half of a UTF-16 pair, which JSON can
    carry but UTF-8 cannot) becomes U+FFFD, so the message is kept and shows the gap."""
    if not isinstance(value, str):
        raise PayloadError(f"{what} is not text: {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", value)
    return value


_text = whole_text


def _text_or_none(value: object) -> str | None:
    return whole_text(value, "a name") if isinstance(value, str) else None


def _moment(value: object) -> datetime:
    moment = datetime.fromisoformat(_text(value, "the timestamp"))
    if moment.tzinfo is None:
        raise PayloadError(f"the timestamp {value!r} has no time zone")
    return moment


def asks_eva(payload: Mapping[str, Any], eva_id: int) -> bool:
    """Whether a person (not a bot) mentions Eva or replies to her in this payload."""
    try:
        if payload["author"].get("bot"):
            return False
        referenced = payload.get("referenced_message")
        author = referenced.get("author") if referenced else None
        return mentions_eva(
            payload.get("content") or "",
            [user["id"] for user in payload.get("mentions") or ()],
            eva_id,
            int(author["id"]) if author else None,
        )
    except KeyError as missing:
        raise PayloadError(f"message {payload.get('id')!r} has no {missing}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise PayloadError(f"message {payload.get('id')!r} is malformed: {error}") from None


def _reply_to(payload: Mapping[str, Any]) -> int | None:
    referenced = payload.get("referenced_message")
    if referenced:
        return snowflake(referenced["id"], "the replied-to message's id")
    reference = payload.get("message_reference")
    if reference and reference.get("message_id") is not None:
        return snowflake(reference["message_id"], "the replied-to message's id")
    return None
