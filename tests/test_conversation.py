# A reply's conversation, fed the model's responses by hand: no server, no store.
from __future__ import annotations

from typing import Any

from anthropic.types import Message, TextBlock, ToolUseBlock
from anthropic.types import Usage as ApiUsage

from eva.core.events import Usage
from eva.core.settings import ModelSettings
from eva.model.conversation import UNREAD_TEXT, Conversation, ToolDone

USAGE = Usage(input_tokens=100, output_tokens=10)


def response(*blocks: TextBlock | ToolUseBlock) -> Message:
    return Message(
        id="msg", type="message", role="assistant", model="claude-haiku-5-5",
        content=list(blocks), stop_reason="end_turn", stop_sequence=None,
        usage=ApiUsage(input_tokens=100, output_tokens=10),
    )


def text(words: str) -> TextBlock:
    return TextBlock(type="text", text=words)


def recall(number: int) -> ToolUseBlock:
    return ToolUseBlock(type="tool_use", id=f"use{number}", name="recall",
                        input={"query": f"ferry {number}"})


def conversation(rounds: int = 2, limit: int | None = None, check: bool = True) -> Conversation:
    return Conversation(
        settings=ModelSettings(tool_rounds=rounds, check_guesses=check),
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Bo: when is the ferry?"}]}
        ],
        tool_result_ttl="5m",
        limit_tokens=limit,
        bytes_per_token=1.0,
        read_texts=["Ann: the ferry leaves at noon"],
        summary_texts=[],
        names=["Bo"],
    )


def results_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [block for block in message["content"] if block.get("type") == "tool_result"]


def test_tool_rounds_then_a_last_request_without_tools() -> None:
    talk = conversation(rounds=2)
    for number in (1, 2):
        messages, choice = talk.request()
        assert choice == {"type": "auto"}
        assert talk.answered(response(recall(number)), USAGE) == "tools"
        assert [use.id for use in talk.uses] == [f"use{number}"]
        guarded = talk.tools_done(
            [ToolDone(use=talk.uses[0], text=f"found {number}", is_error=False, verbatim=True)]
        )
        assert not guarded
    messages, choice = talk.request()
    assert choice == {"type": "none"}  # the tools stay in the request, unusable
    # only the newest result carried a mark, and none once the next round is the last
    marked = [r for m in messages if m["role"] == "user" for r in results_of(dict(m))
              if "cache_control" in r]
    assert marked == []
    assert talk.answered(response(text("The ferry leaves at noon.")), USAGE) == "done"
    answer, grounding = talk.final()
    assert answer == "The ferry leaves at noon."
    assert talk.tool_calls == 2 and len(talk.requests) == 3
    assert talk.usage.input_tokens == 300 and talk.tool_log[0][0] == "recall"
    assert not grounding.guessed


def test_an_answer_with_details_not_read_gets_one_check_round() -> None:
    talk = conversation(rounds=3)
    assert talk.answered(response(text("The ferry leaves at 15:45 from pier 9.")), USAGE) == (
        "check"
    )
    messages, choice = talk.request()
    assert choice == {"type": "auto"} and talk.checked
    assert "15:45" in str(messages[-1]["content"]) and "Before this answer" in str(messages[-1])
    # the same guess again: no second check, it goes out as it stands
    assert talk.answered(response(text("The ferry leaves at 15:45 from pier 9.")), USAGE) == (
        "done"
    )
    assert talk.final()[1].guessed
    unchecked = conversation(rounds=3, check=False)
    assert unchecked.answered(response(text("It leaves at 15:45.")), USAGE) == "done"


def test_results_that_would_pass_the_price_tier_go_unread_and_the_next_request_is_last() -> None:
    talk = conversation(rounds=4, limit=150)  # 100 prompt tokens so far, a byte a token
    assert talk.answered(response(recall(1)), USAGE) == "tools"
    guarded = talk.tools_done(
        [ToolDone(use=talk.uses[0], text="x" * 500, is_error=False, verbatim=True)]
    )
    assert guarded and talk.last
    messages, choice = talk.request()
    assert choice == {"type": "none"}
    [result] = results_of(dict(messages[-1]))
    assert result["content"] == UNREAD_TEXT and result["is_error"] is True
    assert "x" * 500 not in talk.read_texts  # what was not shown was not read either
