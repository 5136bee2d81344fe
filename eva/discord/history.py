# What a channel said while Eva was away: fetched over REST, stored in order, answered.
#
# Shell (trio, with hikari's REST through the bridge). On start-up, and when a
# moderator asks, a channel's history after its last stored message is read page
# by page, oldest first, and each message goes to the channel's actor like a live
# one; the actor skips those already stored, so nothing is stored twice.
# It may not know the bot: it needs only what `HistoryHost` names (the store, the
# supervisor, Eva's id and name, the claims on questions) and a way to read a
# page of a channel's messages after an id (`MessagePages`).
# Invariants: a question found there is answered only if Eva claimed it (it was
# neither stored nor claimed before), it is recent, and none of Eva's own
# replies in that history answers it already.
from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Protocol

import hikari

from eva.core.forget import Forgotten
from eva.core.keys import StreamId
from eva.core.opt_out import OptedOut
from eva.discord.bridge import aio
from eva.discord.mapping import display_name
from eva.discord.messages import CHAT_TYPES, asks_eva, post_from
from eva.live.inputs import Post
from eva.live.supervisor import Supervisor, wall_clock_ms
from eva.store.event_store import EventStore

log = logging.getLogger(__name__)

BACKFILL_PAGE = 100
BACKFILL_MOST = 10_000
BACKFILL_REPLY_WINDOW_MS = 5 * 60_000


Stored = Callable[[StreamId, Post, "int | None"], None]
"""A hook called once a post's answer is back from the actor (durable); for benchmarks."""


class MessagePages(Protocol):
    """Reads a channel's messages over REST, a page at a time."""

    async def page_after(self, channel_id: int, after: int) -> list[hikari.Message]:
        """Up to a page of the channel's messages after the id `after`, oldest first
        (asyncio)."""
        ...


class HistoryHost(Protocol):
    """What history needs of the bot that runs it."""

    store: EventStore
    supervisor: Supervisor
    eva_id: int
    eva_name: str
    on_stored: Stored | None
    opted_out: OptedOut  # the people who asked not to be kept

    def claim(self, stream: StreamId, post: Post) -> bool:
        """Take the right to answer a message: False if it was stored before or is claimed
        already."""
        ...

    def unclaim(self, post: Post) -> None:
        """Drop the claim on a message once it is stored (or its storing failed)."""
        ...

    def answer_soon(self, stream: StreamId, question: Post) -> None:
        """Answer a stored question in the background."""
        ...


class RestPages:
    """`MessagePages` through hikari's REST client."""

    def __init__(self, rest: hikari.api.RESTClient) -> None:
        self.rest = rest

    async def page_after(self, channel_id: int, after: int) -> list[hikari.Message]:
        found = self.rest.fetch_messages(channel_id, after=hikari.Snowflake(after))
        page = [message async for message in found.limit(BACKFILL_PAGE)]
        return sorted(page, key=lambda message: int(message.id))


class History:
    """Fetches and stores the messages a channel got while Eva was not listening."""

    def __init__(self, eva: HistoryHost, pages: MessagePages) -> None:
        self.eva = eva
        self.pages = pages

    async def fetch_missed(self, stream: StreamId, forced: bool) -> int:
        """Store the channel's messages after its last stored one; how many were new.

        Unless `forced`, a channel with nothing stored is left alone: nothing was missed.
        """
        eva = self.eva
        after = self._last_message_id(stream)
        if after is None and not forced:
            return 0
        cursor = after or 0
        stored = 0
        fetched = 0
        questions: list[Post] = []
        replied: set[int] = set()  # the messages Eva's own replies in this history answer
        meta = eva.store.meta(stream)
        forgotten = Forgotten(meta.forgotten if meta is not None else {}, eva.store.hashes)
        skipped = 0
        while fetched < BACKFILL_MOST:
            page = await aio(partial(self.pages.page_after, stream.channel_id, cursor))
            for message in page:
                if message.type not in CHAT_TYPES:
                    continue
                author = message.author
                name = display_name(None, author.global_name, author.username)
                post = post_from(message, eva.eva_id, eva.eva_name, name)
                if forgotten(post.author_id, post.at_ms) or eva.opted_out(
                    stream.guild_id, post.author_id
                ):  # they asked to be forgotten since, or not to be kept
                    skipped += 1
                    continue
                if int(author.id) == eva.eva_id and post.reply_to is not None:
                    replied.add(post.reply_to)
                asks = asks_eva(eva.eva_id, message) and eva.claim(stream, post)
                if await self._store(stream, post, asks):
                    stored += 1
                    if asks:
                        questions.append(post)
            fetched += len(page)
            if len(page) < BACKFILL_PAGE:
                break
            cursor = int(page[-1].id)
        self._answer_missed(stream, questions, replied)
        if stored:
            log.info("backfill of %s stored %d missed messages", stream, stored)
        if skipped:
            log.info("backfill of %s skipped %d messages of forgotten people", stream, skipped)
        return stored

    def _last_message_id(self, stream: StreamId) -> int | None:
        store = self.eva.store
        meta = store.meta(stream)
        if meta is None or meta.messages == 0:
            return None
        last = store.message(stream, meta.messages - 1)
        return None if last is None else last.posted.message_id

    async def _store(self, stream: StreamId, post: Post, claimed: bool) -> bool:
        """Store a message fetched from history; True if it was new."""
        eva = self.eva
        try:
            index = await eva.supervisor.ask(stream, post)
        finally:
            if claimed:
                eva.unclaim(post)
        if eva.on_stored is not None:
            eva.on_stored(stream, post, index)
        return index is not None

    def _answer_missed(self, stream: StreamId, questions: list[Post], replied: set[int]) -> None:
        """Answer the recent questions found in history that Eva has not replied to there."""
        now_ms = wall_clock_ms()
        for question in questions:
            recent = now_ms - question.at_ms <= BACKFILL_REPLY_WINDOW_MS
            if recent and question.message_id not in replied:
                self.eva.answer_soon(stream, question)
