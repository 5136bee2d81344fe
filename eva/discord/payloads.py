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

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from eva.discord.mapping import display_name, mentions_eva, post_of
from eva.live.inputs import Post

CHAT_TYPE_CODES = frozenset({0, 19, 20, 23})
"""Discord's message types that are chat: default, reply, slash command, context menu."""


class PayloadError(ValueError):
    """A message payload that lacks a field Eva needs, or holds one of the wrong kind."""


def chat_post(payload: Mapping[str, Any], eva_id: int, eva_name: str) -> Post | None:
    """The post a MESSAGE_CREATE payload stores; None for direct messages and non-chat types."""
    if payload.get("guild_id") is None or payload.get("type") not in CHAT_TYPE_CODES:
        return None
    try:
        author = payload["author"]
        member = payload.get("member") or {}
        names = {eva_id: eva_name}
        for user in payload.get("mentions") or ():
            username = user.get("username")
            if isinstance(username, str):
                names[int(user["id"])] = display_name(None, user.get("global_name"), username)
        return post_of(
            message_id=int(payload["id"]),
            author_id=int(author["id"]),
            author_name=display_name(
                member.get("nick"), author.get("global_name"), author["username"]
            ),
            is_bot=bool(author.get("bot")),
            timestamp=datetime.fromisoformat(payload["timestamp"]),
            content=payload.get("content") or "",
            referenced_message_id=_reply_to(payload),
            attachment_filenames=[a["filename"] for a in payload.get("attachments") or ()],
            mention_names=names,
        )
    except KeyError as missing:
        raise PayloadError(f"message {payload.get('id')!r} has no {missing}") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise PayloadError(f"message {payload.get('id')!r} is malformed: {error}") from None


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
        return int(referenced["id"])
    reference = payload.get("message_reference")
    if reference and reference.get("message_id") is not None:
        return int(reference["message_id"])
    return None
