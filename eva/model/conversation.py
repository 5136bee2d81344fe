# One reply's exchange with the model, without the model: what to send next, and what the
# model's answer means (run these tools, check these details once, or that is the answer).
#
# Pure: it holds the conversation and the counts, and never calls anything; eva.model.reply
# sends its requests, runs the tools it asks for and hands back what they gave. Its tests
# feed it responses.
# Invariants: at most `tool_rounds` rounds of tools, then one last request that may not use
# them; a check round (an answer stating details Eva did not read) is given once and takes
# a round; only the newest tool result carries a cache mark, and none when the next round
# is the last; a round whose results would take the prompt past the reply model's price
# tier sends them as unread and makes the next request the last.
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from anthropic.types import (
    CacheControlEphemeralParam,
    Message,
    MessageParam,
    TextBlock,
    TextBlockParam,
    ToolChoiceParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
)

from eva.core.costs import add_usage
from eva.core.events import Usage
from eva.core.grounding import Grounding, ground
from eva.core.prompt import Part, tokens_at_most
from eva.core.settings import ModelSettings
from eva.model.prompts import EMPTY_ANSWER_TEXT, check_text

Step = Literal["tools", "check", "done"]
UNREAD_TEXT = (
    "(not read: adding this would make the prompt too long; answer with what you have read)"
)


@dataclass(frozen=True, slots=True)
class ToolDone:
    """What one tool use gave, for the conversation."""

    use: ToolUseBlock
    text: str
    is_error: bool
    verbatim: bool  # people's own words (else summary lines)


@dataclass
class Conversation:
    """The requests of one reply and what came back (see the module's note)."""

    settings: ModelSettings
    messages: list[MessageParam]
    tool_result_ttl: str | None  # the layout's mark for the newest tool result
    limit_tokens: int | None  # the prompt a later round must stay under (None: no tier)
    bytes_per_token: float
    read_texts: list[str]  # what Eva read in people's own words
    summary_texts: list[str]  # what she read only in summary lines
    names: list[str]
    round_number: int = 0
    forced_last: bool = False
    checked: bool = False
    answer: str = ""
    grounding: Grounding | None = None  # of the latest answer, once matched
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    requests: list[Usage] = field(default_factory=list)
    uses: list[ToolUseBlock] = field(default_factory=list)  # waiting for their results
    tool_calls: int = 0
    tool_log: list[tuple[str, str]] = field(default_factory=list)
    _assistant: list[TextBlockParam | ToolUseBlockParam] = field(default_factory=list)

    @property
    def last(self) -> bool:
        """Whether the next request is the last, and may not use tools."""
        return self.forced_last or self.round_number == self.settings.tool_rounds

    def request(self) -> tuple[list[MessageParam], ToolChoiceParam]:
        """The messages of the next request and its tool choice."""
        choice: ToolChoiceParam = {"type": "none"} if self.last else {"type": "auto"}
        return list(self.messages), choice

    def answered(self, response: Message, usage: Usage) -> Step:
        """Take the model's response (`usage` is its usage as Eva records it): tools to
        run (`uses`), a check round to send, or the answer is done."""
        self.requests.append(usage)
        self.usage = add_usage(self.usage, usage)
        self.model = response.model or self.model or self.settings.reply_model
        self.answer = "".join(b.text for b in response.content if isinstance(b, TextBlock))
        uses = [b for b in response.content if isinstance(b, ToolUseBlock)]
        last = self.last
        if not uses and not last and self.settings.check_guesses and not self.checked:
            grounding = ground(self.answer.strip(), self.read_texts, self.summary_texts,
                               self.names)
            if grounding.guessed:  # one more round to check, before it goes out
                self.checked = True
                unread = [d.text for d in grounding.details if d.kind != "read"]
                self.messages = [
                    *without_result_marks(self.messages),
                    {"role": "assistant", "content": assistant_blocks(response)},
                    {"role": "user", "content": check_text(unread)},
                ]
                self.round_number += 1
                return "check"
            self.grounding = grounding
        if last or not uses:
            return "done"
        self.uses = uses
        self._assistant = assistant_blocks(response)
        self.messages.append({"role": "assistant", "content": self._assistant})
        return "tools"

    def tools_done(self, done: list[ToolDone]) -> bool:
        """Take what the tools gave, in the order of `uses`; whether the guard left them
        unread (the prompt would pass the price tier), which makes the next request last."""
        results: list[ToolResultBlockParam] = []
        for tool in done:
            self.tool_calls += 1
            arguments = json.dumps(tool.use.input, ensure_ascii=False, sort_keys=True)
            self.tool_log.append((tool.use.name[:64], arguments))
            results.append({
                "type": "tool_result",
                "tool_use_id": tool.use.id,
                "content": tool.text,
                "is_error": tool.is_error,
            })
        added = tokens_at_most(
            json.dumps([self._assistant, results], ensure_ascii=False), self.bytes_per_token
        )
        guarded = (
            self.limit_tokens is not None
            and self.requests[-1].prompt_tokens + added > self.limit_tokens
        )
        if guarded:
            results = [unread(result) for result in results]
            self.forced_last = True
            ttl = None
        else:  # an entry the next round reads; none when the next round is the last
            for tool in done:  # what Eva is shown she has read (unread results she has not)
                if not tool.is_error:
                    (self.read_texts if tool.verbatim else self.summary_texts).append(tool.text)
            last_round = self.round_number + 1 == self.settings.tool_rounds
            ttl = None if last_round else self.tool_result_ttl
        self.messages = [*without_result_marks(self.messages), results_turn(results, ttl)]
        self.uses = []
        self.round_number += 1
        return guarded

    def final(self) -> tuple[str, Grounding]:
        """The answer to post, and where each detail it states came from."""
        text = self.answer.strip() or EMPTY_ANSWER_TEXT
        grounding = self.grounding
        if grounding is None or text != self.answer.strip():  # not matched as it stands
            grounding = ground(text, self.read_texts, self.summary_texts, self.names)
        return text, grounding


# -- the request's parts ----------------------------------------------------------------


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


def unread(result: ToolResultBlockParam) -> ToolResultBlockParam:
    return {
        "type": "tool_result",
        "tool_use_id": result["tool_use_id"],
        "content": UNREAD_TEXT,
        "is_error": True,
    }


def results_turn(results: list[ToolResultBlockParam], ttl: str | None) -> MessageParam:
    """The user turn of tool results, the last one marked with `ttl` if it is not None."""
    if ttl is not None and results:
        results = [*results[:-1], {**results[-1], "cache_control": cache_mark(ttl)}]
    return {"role": "user", "content": results}


def without_result_marks(messages: list[MessageParam]) -> list[MessageParam]:
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


def assistant_blocks(response: Message) -> list[TextBlockParam | ToolUseBlockParam]:
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
