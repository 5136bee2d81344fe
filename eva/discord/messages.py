# hikari's message objects read into our own inputs (the values live in eva.discord.mapping).
#
# Shell: it knows hikari's types, nothing else; the rules are mapping's pure functions.
from __future__ import annotations

from collections.abc import Mapping, Sequence

import hikari

from eva.discord.mapping import display_name, mentions_eva, post_of
from eva.discord.payloads import CHAT_TYPE_CODES
from eva.live.inputs import Post

CHAT_TYPES = frozenset(hikari.MessageType(code) for code in CHAT_TYPE_CODES)
"""The kinds of message that are chat (joins, pins and boosts are not)."""


def mention_names(users: object, eva_id: int, eva_name: str) -> dict[int, str]:
    """Display names of the users a message mentions (Eva's own included)."""
    names = {eva_id: eva_name}
    if isinstance(users, Mapping):
        for user in users.values():
            if isinstance(user, hikari.PartialUser) and isinstance(user.username, str):
                global_name = user.global_name if isinstance(user.global_name, str) else None
                names[int(user.id)] = display_name(None, global_name, user.username)
    return names


def post_from(message: hikari.Message, eva_id: int, eva_name: str, author_name: str) -> Post:
    """The input that stores a hikari message."""
    referenced = message.referenced_message
    reference = message.message_reference
    if referenced is not None:
        reply_to: int | None = int(referenced.id)
    elif reference is not None and reference.id is not None:
        reply_to = int(reference.id)
    else:
        reply_to = None
    return post_of(
        message_id=message.id,
        author_id=message.author.id,
        author_name=author_name,
        is_bot=message.author.is_bot,
        timestamp=message.timestamp,
        content=message.content or "",
        referenced_message_id=reply_to,
        attachment_filenames=[a.filename for a in message.attachments],
        mention_names=mention_names(message.user_mentions, eva_id, eva_name),
    )


def asks_eva(eva_id: int, message: hikari.Message) -> bool:
    """Whether a person (not a bot) mentions Eva or replies to her."""
    if message.author.is_bot:
        return False
    referenced = message.referenced_message
    author = None if referenced is None else referenced.author
    mentioned = message.user_mentions_ids
    return mentions_eva(
        message.content or "",
        mentioned if isinstance(mentioned, Sequence) else (),
        eva_id,
        int(author.id) if isinstance(author, hikari.PartialUser) else None,
    )
