# Eva's answers in Discord: typing while she thinks, then the reply posted in the channel.
#
# Shell. With a model client the reply comes from eva.model.reply (memory, tools,
# quota); without one, Eva says she is offline and quotes what recall finds.
# Invariants: replies never ping @everyone or roles, only the asker; a reply longer
# than Discord allows is split; a failing answer is logged and the chat goes on.
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from functools import partial

import anthropic
import hikari
import trio
from hikari.api import RESTClient

from eva.core.events import ReplyWritten
from eva.core.keys import StreamId
from eva.core.recall import RecallView
from eva.core.settings import ModelSettings
from eva.discord.bridge import aio
from eva.discord.mapping import offline_reply, split_reply, without_mention
from eva.discord.reply_sender import ReplySender
from eva.live.inputs import Post, Recall, RecordReply
from eva.live.supervisor import Supervisor, wall_clock_ms
from eva.model.reply import write_reply

log = logging.getLogger(__name__)

TYPING_EVERY_S = 8.0
TYPING_TIMEOUT_S = 5.0
RECENT_ANSWERS = 1024
"""Answers whose model time `Answerer.model_seconds` keeps."""


class Answerer:
    """Answers the messages that ask Eva something, in their channel."""

    def __init__(
        self,
        bot: hikari.GatewayBot,
        supervisor: Supervisor,
        client: anthropic.AsyncAnthropic | None,
        models: ModelSettings,
        eva_id: int,
        sender: ReplySender | None = None,
    ) -> None:
        self.bot = bot
        self.sender = sender
        self.supervisor = supervisor
        self.client = client
        self.models = models
        self.eva_id = eva_id
        self.eva_name = "Eva"
        self.replies_sent = 0
        # The latest questions answered with the model, and how long each waited on it.
        self.model_seconds: deque[tuple[int, float]] = deque(maxlen=RECENT_ANSWERS)

    async def answer(self, stream: StreamId, question: Post, ahead: Sequence[Post] = ()) -> None:
        """Think (typing shown meanwhile), then post the answer as a reply to the question.

        `ahead`: the posts that came before the question and may not be stored yet, the
        question last (see GetPrompt); empty when the question is stored.
        """
        try:
            async with trio.open_nursery() as nursery:
                typing = trio.CancelScope()
                nursery.start_soon(self._keep_typing, stream.channel_id, typing)
                text, record = await self._reply_text(stream, question, ahead)
                typing.cancel()
                await self._post_reply(stream.channel_id, question, text)
            if record is not None:  # recorded once it is out: posting waits for no commit
                await self.supervisor.ask(stream, RecordReply(reply=record))
        except Exception:
            log.exception("answering message %d in %s failed", question.message_id, stream)

    async def _keep_typing(self, channel_id: int, scope: trio.CancelScope) -> None:
        """Show Eva typing until `scope` is cancelled.

        A typing request already sent is let finish (within TYPING_TIMEOUT_S) instead of
        being cancelled, while the reply goes out behind it: the reply waits neither for
        it nor for its cancelling, and hikari keeps its connection.
        """
        with scope:
            while True:
                deadline = trio.current_time() + TYPING_TIMEOUT_S
                with trio.CancelScope(shield=True, deadline=deadline):
                    try:
                        await aio(lambda: self._typing_once(channel_id))
                    except hikari.HikariError as error:
                        log.debug("typing indicator in %d failed: %s", channel_id, error)
                await trio.sleep(TYPING_EVERY_S)

    async def _typing_once(self, channel_id: int) -> None:
        await self.bot.rest.trigger_typing(channel_id)

    async def _reply_text(
        self, stream: StreamId, question: Post, ahead: Sequence[Post]
    ) -> tuple[str, ReplyWritten | None]:
        if self.client is None:
            query = without_mention(question.content, self.eva_id, self.eva_name)
            view = await self.supervisor.ask(stream, Recall(query=query)) if query else None
            hits = [] if not isinstance(view, RecallView) else [
                line for window in view.windows for line in window
            ]
            return offline_reply(query, hits), None
        outcome = await write_reply(
            self.supervisor,
            stream,
            question,
            self.client,
            self.models,
            wall_clock_ms(),
            record=False,
            ahead=ahead,
        )
        self.model_seconds.append((question.message_id, outcome.model_seconds))
        return outcome.text, outcome.unrecorded

    async def _post_reply(self, channel_id: int, question: Post, text: str) -> None:
        for number, piece in enumerate(split_reply(text)):

            async def create(
                rest: RESTClient, piece: str = piece, first: bool = number == 0
            ) -> hikari.Message:
                return await rest.create_message(
                    channel_id,
                    piece,
                    reply=hikari.Snowflake(question.message_id) if first else hikari.UNDEFINED,
                    reply_must_exist=False,
                    mentions_everyone=False,
                    role_mentions=False,
                    user_mentions=[hikari.Snowflake(question.author_id)],
                    mentions_reply=True,
                )

            if self.sender is not None:  # on its own loop, not behind the gateway's traffic
                await self.sender.send(create)
            else:
                await aio(partial(create, self.bot.rest))
        self.replies_sent += 1

