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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

import anthropic
from anthropic.types import (
    CacheControlEphemeralParam,
    Message,
    MessageParam,
    OutputConfigParam,
    TextBlock,
    TextBlockParam,
    ToolChoiceParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
)

from eva.core.costs import add_usage
from eva.core.events import ReplyWritten, Usage
from eva.core.grounding import Grounding, ground
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
from eva.model.prompts import (
    APOLOGY_TEXT,
    EMPTY_ANSWER_TEXT,
    SYSTEM_PROMPT,
    TOOLS,
    check_text,
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


def cache_mark(ttl: str) -> CacheControlEphemeralParam:
    """A cache mark of lifetime `ttl`: five minutes ("5m") or an hour ("1h")."""
    if ttl == "1h":
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


def text_block(part: Part) -> TextBlockParam:
    """One part of the prompt as a text block, with its cache mark if it has one."""
    if part.ttl is None:
        return {"type": "text", "text": part.text}
    return {"type": "text", "text": part.text, "cache_control": cache_mark(part.ttl)}


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
        log.info(
            "reply in %s refused: guild %d used %d of %d replies in %s",
            stream,
            stream.guild_id,
            used,
            limit,
            month,
        )
        return ReplyOutcome(text=refusal_text(limit), quota_left=0, refused=True)

    question_text = new_message_text(question.author_name, question.at_ms, question.content)
    budget = prompt_budget(settings, question_text)
    memory = await supervisor.ask(stream, GetPrompt(ahead=tuple(ahead), budget=budget))
    assert isinstance(memory, MemoryPrompt)
    marks = layout_marks(settings.cache_layout)
    system_part, *first_parts = prompt_parts(
        settings.cache_layout, SYSTEM_PROMPT, memory, question_text, EMPTY_TAIL_TEXT
    )
    tools = list(TOOLS)  # the mark on the system prompt covers them
    system = [text_block(system_part)]
    messages: list[MessageParam] = [
        {"role": "user", "content": [text_block(part) for part in first_parts]}
    ]
    limit_tokens = round_limit(settings)
    effort: OutputConfigParam | anthropic.Omit = (
        anthropic.omit
        if settings.reply_effort is None
        else cast(OutputConfigParam, {"effort": settings.reply_effort})
    )
    per = budget.bytes_per_token
    # what Eva reads in this turn: people's own words, and summary lines
    read_texts = ["".join(memory.tail), question_text]
    summary_texts = [memory.row]
    tool_log: list[tuple[str, str]] = []
    usage = Usage()
    requests: list[Usage] = []
    tool_calls = 0
    model = settings.reply_model
    answer = ""
    waited = 0.0
    checked = False  # the round that checks unread details was given
    grounding: Grounding | None = None  # of the latest answer, once it was matched
    names = [question.author_name]
    try:
        forced_last = False
        for round_number in range(settings.tool_rounds + 1):
            last = forced_last or round_number == settings.tool_rounds
            choice: ToolChoiceParam = {"type": "none"} if last else {"type": "auto"}
            sent = list(messages)

            async def create(
                sent: list[MessageParam] = sent, choice: ToolChoiceParam = choice
            ) -> Message:
                return await client.messages.create(
                    model=settings.reply_model,
                    max_tokens=settings.reply_max_tokens,
                    tools=tools,
                    tool_choice=choice,
                    system=system,
                    messages=sent,
                    output_config=effort,
                )

            asked = time.perf_counter()
            try:
                response = await _call(create, settings, f"reply in {stream}")
            finally:
                waited += time.perf_counter() - asked
            requests.append(usage_of(response))
            usage = add_usage(usage, requests[-1])
            model = response.model or model
            answer = "".join(b.text for b in response.content if isinstance(b, TextBlock))
            uses = [b for b in response.content if isinstance(b, ToolUseBlock)]
            if not uses and not last and settings.check_guesses and not checked:
                grounding = ground(answer.strip(), read_texts, summary_texts, names)
                if grounding.guessed:  # one more round to check, before it goes out
                    checked = True
                    unread = [d.text for d in grounding.details if d.kind != "read"]
                    grounding = None  # the answer that follows is matched again
                    messages = [
                        *_without_result_marks(messages),
                        {"role": "assistant", "content": _assistant_blocks(response)},
                        {"role": "user", "content": check_text(unread)},
                    ]
                    continue
            if last or not uses:
                break
            assistant = _assistant_blocks(response)
            messages.append({"role": "assistant", "content": assistant})
            results: list[ToolResultBlockParam] = []
            for use in uses:
                result = await run_tool(supervisor, stream, use.name, use.input)
                tool_calls += 1
                arguments = json.dumps(use.input, ensure_ascii=False, sort_keys=True)
                tool_log.append((use.name[:64], arguments))
                if not result.is_error:
                    (read_texts if result.verbatim else summary_texts).append(result.text)
                await supervisor.ask(
                    stream,
                    RecordTool(
                        name=use.name[:64],
                        arguments=arguments,
                        result_bytes=len(result.text.encode()),
                    ),
                )
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": result.text,
                        "is_error": result.is_error,
                    }
                )
            added = tokens_at_most(json.dumps([assistant, results], ensure_ascii=False), per)
            if limit_tokens is not None and requests[-1].prompt_tokens + added > limit_tokens:
                log.warning(
                    "reply in %s: tool results left unread to keep the prompt under %d tokens",
                    stream,
                    limit_tokens,
                )
                results = [_unread(result) for result in results]
                forced_last = True
                ttl = None
            else:  # an entry the next round reads; none when the next round is the last
                ttl = None if round_number + 1 == settings.tool_rounds else marks.tool_result
            messages = [*_without_result_marks(messages), _results_turn(results, ttl)]
    except _ModelFailed as error:
        log.error("reply in %s failed, the model did not answer: %s", stream, error)
        return ReplyOutcome(
            text=APOLOGY_TEXT,
            tool_calls=tool_calls,
            usage=usage,
            quota_left=max(limit - used, 0) if limit else None,
            failed=True,
            model_seconds=waited,
            tools=tuple(tool_log),
        )

    text = answer.strip() or EMPTY_ANSWER_TEXT
    if grounding is None or text != answer.strip():  # not matched above as it stands
        grounding = ground(text, read_texts, summary_texts, names)
    reply = ReplyWritten(
        at_ms=wall_ms,
        model=model,
        usage=usage,
        to_message_id=question.message_id,
        tool_calls=tool_calls,
        text_bytes=len(text.encode()),
        month=month,
        requests=tuple(requests),
        grounding=grounding,
    )
    if not record:
        left = max(limit - used - 1, 0) if limit else None
        return ReplyOutcome(
            text=text,
            tool_calls=tool_calls,
            usage=usage,
            quota_left=left,
            unrecorded=reply,
            model_seconds=waited,
            grounding=grounding,
            tools=tuple(tool_log),
        )
    await supervisor.ask(stream, RecordReply(reply=reply))
    left = max(limit - guild_replies(store, stream.guild_id, month), 0) if limit else None
    return ReplyOutcome(
        text=text, tool_calls=tool_calls, usage=usage, quota_left=left, model_seconds=waited,
        grounding=grounding, tools=tuple(tool_log),
    )


UNREAD_TEXT = (
    "(not read: adding this would make the prompt too long; answer with what you have read)"
)


def _unread(result: ToolResultBlockParam) -> ToolResultBlockParam:
    return {
        "type": "tool_result",
        "tool_use_id": result["tool_use_id"],
        "content": UNREAD_TEXT,
        "is_error": True,
    }


def _results_turn(results: list[ToolResultBlockParam], ttl: str | None) -> MessageParam:
    """The user turn of tool results, the last one marked with `ttl` if it is not None."""
    if ttl is not None and results:
        results = [*results[:-1], {**results[-1], "cache_control": cache_mark(ttl)}]
    return {"role": "user", "content": results}


def _without_result_marks(messages: list[MessageParam]) -> list[MessageParam]:
    """The conversation with the marks of earlier tool results taken off: only the newest
    carries one, so a request never holds more than four."""
    out: list[MessageParam] = []
    for message in messages:
        content = message["content"]
        if message["role"] == "user" and not isinstance(content, str) and any(
            isinstance(block, dict) and block.get("type") == "tool_result"
            and "cache_control" in block
            for block in content
        ):
            content = [
                {k: v for k, v in block.items() if k != "cache_control"}  # type: ignore[misc]
                if isinstance(block, dict) and block.get("type") == "tool_result"
                else block
                for block in content
            ]
            out.append({"role": "user", "content": content})
        else:
            out.append(message)
    return out


def _assistant_blocks(response: Message) -> list[TextBlockParam | ToolUseBlockParam]:
    """The model's turn as it is sent back: its text and tool uses (empty text left out)."""
    blocks: list[TextBlockParam | ToolUseBlockParam] = []
    for block in response.content:
        if isinstance(block, TextBlock) and block.text:
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolUseBlock):
            # The API wants an object here; a malformed one is answered as an error anyway.
            given = block.input if isinstance(block.input, dict) else {}
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": given})
    return blocks
