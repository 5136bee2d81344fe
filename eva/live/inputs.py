# What a channel's actor can be asked: the inputs the Discord gateway and tools send.
#
# Plain values; no IO. Each input is answered: a post with the index it got
# (or None when that Discord message was already stored), a prompt request
# with the text of the prompt, a tool with its answer.
from __future__ import annotations

from typing import TypeAlias

import msgspec

from eva.core.events import ForgetBy, MessagePosted, ReplyWritten
from eva.core.prompt import PromptBudget


class Post(msgspec.Struct, frozen=True, kw_only=True):
    """A message posted in the channel."""

    message_id: int
    author_id: int
    author_name: str
    at_ms: int
    content: str = ""
    bot: bool = False
    utc_offset_min: int = 0
    reply_to: int | None = None
    attachments: tuple[str, ...] = ()


def posted_event(post: Post, index: int) -> MessagePosted:
    """The event that stores a post at channel index `index`."""
    return MessagePosted(
        at_ms=post.at_ms,
        index=index,
        message_id=post.message_id,
        author_id=post.author_id,
        author_name=post.author_name,
        bot=post.bot,
        utc_offset_min=post.utc_offset_min,
        content=post.content,
        reply_to=post.reply_to,
        attachments=post.attachments,
    )


def post_of(event: MessagePosted) -> Post:
    """The post that stored `event`: a stored or exported message fed in again."""
    return Post(
        message_id=event.message_id,
        author_id=event.author_id,
        author_name=event.author_name,
        at_ms=event.at_ms,
        content=event.content,
        bot=event.bot,
        utc_offset_min=event.utc_offset_min,
        reply_to=event.reply_to,
        attachments=event.attachments,
    )


class Edit(msgspec.Struct, frozen=True, kw_only=True):
    """New text for a message; unknown ids are answered False."""

    message_id: int
    at_ms: int
    content: str
    attachments: tuple[str, ...] = ()


class Delete(msgspec.Struct, frozen=True, kw_only=True):
    """Messages deleted in Discord (one, or many at once); answered with how many were known."""

    message_ids: tuple[int, ...]
    at_ms: int


class Describe(msgspec.Struct, frozen=True, kw_only=True):
    """The channel's names and time zone."""

    guild_name: str = ""
    channel_name: str = ""
    time_zone: str = "UTC"


class GetPrompt(msgspec.Struct, frozen=True, kw_only=True):
    """The memory block Eva's prompt uses now: the published row and the tail.

    `ahead` are posts that reached the channel before the question (the question last)
    and may not be stored yet: those not stored are shown at the tail's end, at the
    indexes they will get, so a reply need not wait for them to be stored.
    """

    ahead: tuple[Post, ...] = ()
    budget: PromptBudget | None = None
    """The most the reply's first request may hold; the oldest tail lines, then the oldest
    row lines, are left out to fit it (with a note naming them)."""


class Zoom(msgspec.Struct, frozen=True, kw_only=True):
    """The zoom tool: the two lines under `address`, or one message."""

    address: str
    page: int = 1


class Recall(msgspec.Struct, frozen=True, kw_only=True):
    """The recall tool: the channel's messages best matching `query`, only those of
    `person` and of the days from `after` and before `before` if given (YYYY-MM-DD)."""

    query: str
    person: str | None = None
    after: str | None = None
    before: str | None = None


class DateOf(msgspec.Struct, frozen=True, kw_only=True):
    """The date tool: when message `index` was posted."""

    index: int


class RecordTool(msgspec.Struct, frozen=True, kw_only=True):
    """Append a tool.called event for a call Eva made (arguments as JSON text)."""

    name: str
    arguments: str
    result_bytes: int


class RecordReply(msgspec.Struct, frozen=True, kw_only=True):
    """Append a reply.written event; answered with the guild channel's reply count this month."""

    reply: ReplyWritten


class ForgetHere(msgspec.Struct, frozen=True, kw_only=True):
    """Erase one person in this channel (the supervisor runs the rest of the forget)."""

    person_hash: str
    by: ForgetBy = "self"


ChannelInput: TypeAlias = (
    Post
    | Edit
    | Delete
    | Describe
    | GetPrompt
    | Zoom
    | Recall
    | DateOf
    | RecordTool
    | RecordReply
    | ForgetHere
)
