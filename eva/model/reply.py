# Eva answers a message: one request with her memory, a few rounds of tools, a reply.
#
# Shell: it calls the model through the anthropic SDK and reads the channel
# only through its actor (`Supervisor.ask`); the tools are eva.model.tools and
# the prompt's parts eva.core.prompt, the same the planner prices.
# Invariants: the cache marks are the layout's (eva.core.prompt.layout_marks):
# on the system prompt (covering the tools), the row, the tail's last chunk,
# and the newest tool result while another round may follow; never more than
# four, none on the new message. The first request stays under the guard's
# budget and every later one under the reply model's price tier. At most
# `tool_rounds` rounds of tools, then one last request that may not use them
# (tool_choice none: the tools stay in the request so that prefix stays cached).
# A reply is recorded only when the model gave one, with each request's usage;
# a refusal or a model failure records none. The guild's monthly quota is
# checked before any call, and a guild's own reply model is used if it has one.
from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import cast

import anthropic
from anthropic.types import (
    Message,
    MessageParam,
    OutputConfigParam,
    TextBlockParam,
    ToolChoiceParam,
    ToolUseBlock,
)

from eva.core.events import ReplyWritten, Usage
from eva.core.grounding import Grounding
from eva.core.keys import StreamId
from eva.core.prices import BYTES_PER_TOKEN, Price
from eva.core.prompt import (
    MemoryPrompt,
    Part,
    PromptBudget,
    layout_marks,
    prompt_parts,
    tokens_at_most,
)
from eva.core.settings import ModelSettings
from eva.live.inputs import GetPrompt, Post, RecordReply, RecordTool
from eva.live.supervisor import Supervisor
from eva.model.client import (
    ModelCallFailed,
    ModelRequestRefused,
    SpendLimitReached,
    call_with_retries,
)
from eva.model.conversation import Conversation, ToolDone, text_block
from eva.model.prompts import (
    APOLOGY_TEXT,
    SYSTEM_PROMPT,
    TOOLS,
    new_message_text,
    refusal_text,
)
from eva.model.tools import run_tool
from eva.store.event_store import EventStore

log = logging.getLogger(__name__)

TOOL_USE_SYSTEM_TOKENS = 400
"""Tokens the Messages API adds to the system prompt when tools are offered (a ceiling)."""
EMPTY_TAIL_TEXT = "(no messages after the memory above yet)"


@dataclass(frozen=True, slots=True)
class ReplyOutcome:
    """What came of a question: the text to post and what it took."""

    text: str
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    quota_left: int | None = 0  # replies left to the guild this month; None: no cap
    refused: bool = False  # the guild's replies for the month were used up; no model call
    failed: bool = False  # the model did not answer; `text` is an apology, nothing recorded
    unrecorded: ReplyWritten | None = None  # the record for the caller to append, if asked to
    model_seconds: float = 0.0  # wall time spent waiting on the model, retries included
    grounding: Grounding | None = None  # where each detail the reply states came from
    tools: tuple[tuple[str, str], ...] = ()  # each tool call: its name and arguments (JSON)


class _ModelFailed(Exception):
    """The model could not be reached (after retries): Eva apologises."""


_MODEL_ERRORS = (SpendLimitReached, ModelRequestRefused, ModelCallFailed, anthropic.APIError)


Create = Callable[[], Awaitable[Message]]


async def _call(create: Create, settings: ModelSettings, what: str) -> Message:
    """One request, tried again by eva.model.client while retrying can help."""
    try:
        return await call_with_retries(create, settings, what)
    except _MODEL_ERRORS as error:
        raise _ModelFailed(f"{type(error).__name__}: {error}") from error


# -- quota ----------------------------------------------------------------------


def reply_month(wall_ms: int) -> str:
    """`YYYY-MM` of a wall-clock time, in UTC: the month a reply counts against."""
    return datetime.fromtimestamp(wall_ms / 1000, UTC).strftime("%Y-%m")


def guild_replies(store: EventStore, guild_id: int, month: str) -> int:
    """Replies Eva wrote in `month` across every channel of a guild."""
    return sum(
        meta.replies
        for meta in store.streams()
        if meta.guild_id == guild_id and meta.reply_month == month
    )


# -- the request ------------------------------------------------------------------


TOOLS_TEXT = json.dumps(list(TOOLS), ensure_ascii=False, sort_keys=True)
"""The tools as the guard measures them (the request's JSON of them is about this size)."""


def reply_price(settings: ModelSettings) -> Price | None:
    """The reply model's price, None when the table does not know it."""
    return settings.prices.get(settings.reply_model)


def prompt_budget(settings: ModelSettings, question_text: str) -> PromptBudget:
    """What the memory may take of a reply's first request, by the guard's token ceiling."""
    price = reply_price(settings)
    per = price.bytes_per_token if price is not None else BYTES_PER_TOKEN
    fixed = (
        tokens_at_most(TOOLS_TEXT, per)
        + TOOL_USE_SYSTEM_TOKENS
        + tokens_at_most(SYSTEM_PROMPT, per)
        + tokens_at_most(question_text, per)
    )
    return PromptBudget(
        tokens=settings.reply_prompt_tokens_max, fixed_tokens=fixed, bytes_per_token=per
    )


def round_limit(settings: ModelSettings) -> int | None:
    """The prompt size a later round must stay under: the reply model's price tier less the
    output it may write (None when the model prices every size alike)."""
    price = reply_price(settings)
    tier = None if price is None else price.tier_tokens
    return None if tier is None else tier - settings.reply_max_tokens


def usage_of(message: Message) -> Usage:
    """One response's usage as Eva records it, the one-hour part of its cache writes apart."""
    usage = message.usage
    split = usage.cache_creation
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_write_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_tokens=usage.cache_read_input_tokens or 0,
        cache_write_1h_tokens=0 if split is None else split.ephemeral_1h_input_tokens,
    )


# -- the reply ------------------------------------------------------------------------


async def write_reply(
    supervisor: Supervisor,
    stream: StreamId,
    question: Post,
    client: anthropic.AsyncAnthropic,
    settings: ModelSettings,
    wall_ms: int,
    record: bool = True,
    ahead: Sequence[Post] = (),
) -> ReplyOutcome:
    """Eva's answer to `question` in `stream`, with her memory and tools of that channel only.

    Refuses without calling the model when the guild's replies for the month
    are used up; apologises (recording no reply) when the model fails. With
    `record` False the reply.written event is returned in `unrecorded` for the
    caller to append once the answer is out, so posting it waits for no commit.
    `ahead` are the posts that came before the question and may not be stored yet,
    the question last (see GetPrompt): the memory shows them all the same.
    """
    settings = settings.for_guild(stream.guild_id)
    store = supervisor.shared.store
    month = reply_month(wall_ms)
    limit = settings.replies_per_guild_month
    used = guild_replies(store, stream.guild_id, month)
    if limit and used >= limit:  # 0: no cap
        log.info("reply in %s refused: guild %d used %d of %d replies in %s",
                 stream, stream.guild_id, used, limit, month)
        return ReplyOutcome(text=refusal_text(limit), quota_left=0, refused=True)

    question_text = new_message_text(question.author_name, question.at_ms, question.content)
    budget = prompt_budget(settings, question_text)
    memory = await supervisor.ask(stream, GetPrompt(ahead=tuple(ahead), budget=budget))
    assert isinstance(memory, MemoryPrompt)
    system_part, talk = _conversation(settings, memory, question, question_text, budget)
    ask = _Asker(client, settings, [text_block(system_part)], f"reply in {stream}")
    try:
        while (step := talk.answered(*await ask(*talk.request()))) != "done":
            if step == "tools":
                done = [await _run(supervisor, stream, use) for use in talk.uses]
                if talk.tools_done(done):
                    log.warning(
                        "reply in %s: tool results left unread to keep the prompt under %d "
                        "tokens", stream, talk.limit_tokens,
                    )
    except _ModelFailed as error:
        log.error("reply in %s failed, the model did not answer: %s", stream, error)
        return ReplyOutcome(
            text=APOLOGY_TEXT,
            tool_calls=talk.tool_calls,
            usage=talk.usage,
            quota_left=max(limit - used, 0) if limit else None,
            failed=True,
            model_seconds=ask.waited,
            tools=tuple(talk.tool_log),
        )
    text, grounding = talk.final()
    reply = ReplyWritten(
        at_ms=wall_ms,
        model=talk.model,
        usage=talk.usage,
        to_message_id=question.message_id,
        tool_calls=talk.tool_calls,
        text_bytes=len(text.encode()),
        month=month,
        requests=tuple(talk.requests),
        grounding=grounding,
    )
    outcome = ReplyOutcome(
        text=text, tool_calls=talk.tool_calls, usage=talk.usage, model_seconds=ask.waited,
        grounding=grounding, tools=tuple(talk.tool_log),
    )
    if not record:
        left = max(limit - used - 1, 0) if limit else None
        return replace(outcome, quota_left=left, unrecorded=reply)
    await supervisor.ask(stream, RecordReply(reply=reply))
    left = max(limit - guild_replies(store, stream.guild_id, month), 0) if limit else None
    return replace(outcome, quota_left=left)


def _conversation(
    settings: ModelSettings,
    memory: MemoryPrompt,
    question: Post,
    question_text: str,
    budget: PromptBudget,
) -> tuple[Part, Conversation]:
    """The system prompt's part, and the conversation's first request: the memory, the
    tail and the question, in the layout's parts."""
    system_part, *first_parts = prompt_parts(
        settings.cache_layout, SYSTEM_PROMPT, memory, question_text, EMPTY_TAIL_TEXT
    )
    return system_part, Conversation(
        settings=settings,
        messages=[{"role": "user", "content": [text_block(part) for part in first_parts]}],
        tool_result_ttl=layout_marks(settings.cache_layout).tool_result,
        limit_tokens=round_limit(settings),
        bytes_per_token=budget.bytes_per_token,
        # what Eva reads in this turn: people's own words, and summary lines
        read_texts=["".join(memory.tail), question_text],
        summary_texts=[memory.row],
        names=[question.author_name],
    )


class _Asker:
    """Sends the conversation's requests (tried again while retrying helps), and counts the
    time spent waiting on the model."""

    def __init__(
        self, client: anthropic.AsyncAnthropic, settings: ModelSettings,
        system: list[TextBlockParam], what: str,
    ) -> None:
        self.client, self.settings, self.system, self.what = client, settings, system, what
        self.tools = list(TOOLS)  # the mark on the system prompt covers them
        self.effort: OutputConfigParam | anthropic.Omit = (
            anthropic.omit
            if settings.reply_effort is None
            else cast(OutputConfigParam, {"effort": settings.reply_effort})
        )
        self.waited = 0.0

    async def __call__(
        self, messages: list[MessageParam], choice: ToolChoiceParam
    ) -> tuple[Message, Usage]:
        async def create() -> Message:
            return await self.client.messages.create(
                model=self.settings.reply_model,
                max_tokens=self.settings.reply_max_tokens,
                tools=self.tools,
                tool_choice=choice,
                system=self.system,
                messages=messages,
                output_config=self.effort,
            )

        asked = time.perf_counter()
        try:
            response = await _call(create, self.settings, self.what)
        finally:
            self.waited += time.perf_counter() - asked
        return response, usage_of(response)


async def _run(supervisor: Supervisor, stream: StreamId, use: ToolUseBlock) -> ToolDone:
    """Run one tool the model asked for, and record that it was called."""
    result = await run_tool(supervisor, stream, use.name, use.input)
    arguments = json.dumps(use.input, ensure_ascii=False, sort_keys=True)
    await supervisor.ask(
        stream,
        RecordTool(name=use.name[:64], arguments=arguments, result_bytes=len(result.text.encode())),
    )
    return ToolDone(use=use, text=result.text, is_error=result.is_error, verbatim=result.verbatim)
