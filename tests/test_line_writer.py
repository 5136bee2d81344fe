"""The line writer with the real anthropic SDK against the fake Messages API on loopback."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anthropic
import pytest
import trio
from conftest import keyed

from eva.cli.cmd_import import import_bytes
from eva.core.address import Address
from eva.core.events import LineWritten
from eva.core.keys import StreamId
from eva.core.render import cut_to_bytes, utf8_size
from eva.core.settings import KIB, MemorySettings, ModelSettings
from eva.core.summarize import LeafTask, MergeTask, Summary, Task, summarize_tasks
from eva.demo.friends import friends_export
from eva.live.models import LimitedSummarizer
from eva.memory.build import Memory
from eva.model.client import (
    ModelCallFailed,
    ModelRequestRefused,
    SpendLimitReached,
    classify,
    make_client,
)
from eva.model.line_prompt import LINE_INSTRUCTIONS, task_text
from eva.model.line_writer import ClaudeLineWriter
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.testing.fake_anthropic import (
    OVERLOADED,
    SPEND_LIMIT,
    Failure,
    FakeMessagesAPI,
    rate_limited,
)

JSON = dict[str, Any]
LIMIT = 512
TASK = re.compile(r'<task address="([^"]+)" kind="(\w+)"')
ASKED_AGAIN = re.compile(r"Your line for (\S+) is (\d+) bytes, (\d+) over")

LONG = "Ann: " + " ".join(f"we should meet at the harbour at {n} pm on 2025-03-{n:02d}"
                           for n in range(1, 20))
LEFT = "Ann: the trip is on 2025-05-02, Lisbon, 3 nights / Bo: I'll book the flat " + "x" * 200
RIGHT = "Cy: I can drive from Porto / Ann: then we meet at 10 am at the station " + "y" * 200
TASKS: list[Task] = [
    LeafTask(address=Address(3, 1), name="Ann", text=LONG),
    MergeTask(address=Address(8, 4), left_text=LEFT, right_text=RIGHT),
    MergeTask(address=Address(16, 8), left_text=LEFT, right_text=RIGHT),
]


@dataclass
class RecordingFake(FakeMessagesAPI):
    """The fake that also keeps every message it answered with (for their usage)."""

    replies: list[JSON] = field(default_factory=list)

    def reply(self, body: JSON) -> JSON:
        message = super().reply(body)
        self.replies.append(message)
        return message


class BrokenBatches(RecordingFake):
    """A fake whose Message Batches endpoint is down (503) while /v1/messages works."""

    def _create_batch(self, handler: BaseHTTPRequestHandler, body: JSON) -> None:
        self._send(handler, 503, {"type": "error",
                                  "error": {"type": "api_error", "message": "down"}})


def text_of(content: str | list[JSON]) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


def last_user(body: JSON) -> str:
    return text_of(body["messages"][-1]["content"])


def asked(body: JSON) -> list[str]:
    """The task addresses of a request (those of its first user turn)."""
    return [address for address, _ in TASK.findall(text_of(body["messages"][0]["content"]))]


def filled(address: str, size: int = LIMIT, tag: str = "") -> str:
    """A line for `address` of exactly `size` bytes, with a non-ASCII name in it."""
    start = f"Zoë{tag}: line {address} says"
    words, dots = divmod(size - utf8_size(start), 5)
    return start + " word" * words + "." * dots


def tags(lines: dict[str, str]) -> str:
    return "\n".join(f'<line address="{a}">{text}</line>' for a, text in lines.items())


def good_answer(body: JSON) -> str:
    return tags({address: filled(address) for address in asked(body)})


def settings(**changes: Any) -> ModelSettings:
    base: dict[str, Any] = {"retries": 3, "batch_poll_seconds": 0.01,
                            "request_timeout_seconds": 5.0}
    return ModelSettings(**{**base, **changes})


@asynccontextmanager
async def writer_for(
    fake: FakeMessagesAPI, key: str = "test-key", **changes: Any
) -> AsyncIterator[ClaudeLineWriter]:
    model_settings = settings(base_url=fake.url, **changes)
    async with make_client(model_settings, key) as client:
        yield ClaudeLineWriter(client, model_settings, LIMIT, backoff_first_s=0.01)


def total_usage(summaries: Sequence[Summary]) -> tuple[int, int, int, int]:
    usages = [s.usage for s in summaries]
    assert all(u is not None for u in usages)
    return (
        sum(u.input_tokens for u in usages if u),
        sum(u.output_tokens for u in usages if u),
        sum(u.cache_write_tokens for u in usages if u),
        sum(u.cache_read_tokens for u in usages if u),
    )


def replied_usage(fake: RecordingFake) -> tuple[int, int, int, int]:
    usages = [reply["usage"] for reply in fake.replies]
    return (
        sum(u["input_tokens"] for u in usages),
        sum(u["output_tokens"] for u in usages),
        sum(u["cache_creation_input_tokens"] for u in usages),
        sum(u["cache_read_input_tokens"] for u in usages),
    )


async def test_one_request_carries_instructions_cache_mark_and_every_task() -> None:
    fake = RecordingFake(answer=good_answer)
    with fake.serve():
        async with writer_for(fake) as writer:
            summaries = await writer.summarize(TASKS)
            again = await writer.summarize(TASKS)
    [first, _] = fake.message_requests()
    body = first.body
    assert body["model"] == "claude-haiku-5-5"
    assert body["system"] == [
        {"type": "text", "text": LINE_INSTRUCTIONS, "cache_control": {"type": "ephemeral"}}
    ]
    prompt = last_user(body)
    assert TASK.findall(prompt) == [("3+1", "message"), ("8+4", "merge"), ("16+8", "merge")]
    assert 'author="Ann"' in prompt and LONG in prompt and LEFT in prompt and RIGHT in prompt
    assert f'input="{utf8_size(LONG)} bytes, {len(LONG)} characters"' in prompt
    assert "at most 512 bytes: about 512 characters of plain Latin text" in prompt
    assert "accented letters count 2, most emoji 4" in prompt
    assert [s.address for s in summaries] == [t.address for t in TASKS]
    assert [s.text for s in summaries] == [filled(a) for a in ("3+1", "8+4", "16+8")]
    assert all(s.batch_usage is None for s in summaries), "the direct request is full price"
    assert all(s.model == "claude-haiku-5-5" and utf8_size(s.text) <= LIMIT for s in summaries)
    # The instructions are a cached prefix: written by the first request, read by the next.
    assert total_usage(summaries)[2] > 0 and total_usage(summaries)[3] == 0
    assert total_usage(again)[2] == 0 and total_usage(again)[3] == total_usage(summaries)[2]
    assert tuple(map(sum, zip(total_usage(summaries), total_usage(again), strict=True))) == (
        replied_usage(fake)
    )


async def test_usage_is_split_evenly_for_input_and_by_length_for_output() -> None:
    def uneven(body: JSON) -> str:
        sizes = {"3+1": 100, "8+4": 300, "16+8": 500}
        return tags({address: filled(address, sizes[address]) for address in asked(body)})

    fake = RecordingFake(answer=uneven)
    with fake.serve():
        async with writer_for(fake) as writer:
            summaries = await writer.summarize(TASKS)
    usages = [s.usage for s in summaries]
    assert all(u is not None for u in usages)
    inputs = [u.input_tokens for u in usages if u]
    outputs = [u.output_tokens for u in usages if u]
    assert max(inputs) - min(inputs) <= 1
    assert outputs[0] < outputs[1] < outputs[2]
    assert total_usage(summaries) == replied_usage(fake)


async def test_a_line_too_long_is_sent_back_in_the_same_conversation() -> None:
    def answer(body: JSON) -> str:
        again = ASKED_AGAIN.findall(last_user(body))
        if again:
            return tags({address: filled(address, 500, "-short") for address, _, _ in again})
        return tags({a: filled(a, 587 if a == "8+4" else LIMIT) for a in asked(body)})

    fake = RecordingFake(answer=answer)
    with fake.serve():
        async with writer_for(fake) as writer:
            summaries = await writer.summarize(TASKS)
    first, second = fake.message_requests()
    first_answer = fake.replies[0]["content"][0]["text"]
    assert second.body["messages"] == [
        first.body["messages"][0],
        {"role": "assistant", "content": first_answer},
        {
            "role": "user",
            "content": "Your line for 8+4 is 587 bytes, 75 over the 512-byte limit. "
            "Write it again, shorter.",
        },
    ]
    assert second.body["system"] == first.body["system"]
    texts = {s.address: s.text for s in summaries}
    assert texts == {
        Address(3, 1): filled("3+1"),
        Address(8, 4): filled("8+4", 500, "-short"),
        Address(16, 8): filled("16+8"),
    }
    assert total_usage(summaries) == replied_usage(fake)


async def test_the_shortest_of_lines_too_long_is_kept_and_cut_at_a_word_last() -> None:
    sizes = iter([700, 530, 600, 560])
    versions: list[str] = []

    def answer(body: JSON) -> str:
        version = filled("8+4", next(sizes), f"-{len(versions)}")
        versions.append(version)
        return tags({"8+4": version})

    fake = RecordingFake(answer=answer)
    with fake.serve():
        async with writer_for(fake, too_long_retries=3) as writer:
            [summary] = await writer.summarize([TASKS[1]])
    requests = fake.message_requests()
    assert len(requests) == 4, "one request and three to shorten"
    assert [m["role"] for m in requests[-1].body["messages"]] == ["user", "assistant"] * 3 + [
        "user"
    ]
    assert "Your line for 8+4 is 600 bytes, 88 over" in last_user(requests[-1].body)
    assert summary.text == cut_to_bytes(versions[1], LIMIT), "the 530-byte answer, cut"
    assert summary.text.startswith("Zoë-1:") and utf8_size(summary.text) <= LIMIT
    assert not summary.text.endswith(" ") and versions[1].startswith(summary.text)
    assert total_usage([summary]) == replied_usage(fake)


def missing_one(addresses: list[str]) -> str:
    return tags({a: filled(a) for a in addresses[:-1]})


def duplicate_one(addresses: list[str]) -> str:
    return tags({a: filled(a) for a in addresses}) + "\n" + tags({addresses[0]: filled("again")})


def empty_one(addresses: list[str]) -> str:
    return tags({a: ("  " if a == addresses[1] else filled(a)) for a in addresses})


def wrong_address(addresses: list[str]) -> str:
    return tags({("99+1" if a == addresses[2] else a): filled(a) for a in addresses})


def garbage(addresses: list[str]) -> str:
    return "Sure! Here are your summaries: " + " ".join(filled(a) for a in addresses)


@pytest.mark.parametrize(
    ("bad", "re_asked"),
    [
        (missing_one, ["16+8"]),
        (duplicate_one, ["3+1"]),
        (empty_one, ["8+4"]),
        (wrong_address, ["16+8"]),
        (garbage, ["3+1", "8+4", "16+8"]),
    ],
)
async def test_bad_answers_in_a_batch_are_asked_again_alone(
    bad: Callable[[list[str]], str], re_asked: list[str]
) -> None:
    def answer(body: JSON) -> str:
        addresses = asked(body)
        return bad(addresses) if len(addresses) > 1 else good_answer(body)

    fake = RecordingFake(answer=answer)
    with fake.serve():
        async with writer_for(fake) as writer:
            summaries = await writer.summarize(TASKS)
    first, *alone = fake.message_requests()
    assert len(asked(first.body)) == 3
    assert [asked(request.body) for request in alone] == [[a] for a in re_asked]
    assert [s.address for s in summaries] == [t.address for t in TASKS]
    assert all(s.text == filled(f"{s.address.start}+{s.address.size}") for s in summaries)
    assert total_usage(summaries) == replied_usage(fake)


async def test_a_task_with_no_usable_answer_even_alone_gets_no_summary() -> None:
    fake = RecordingFake(answer=lambda body: missing_one(asked(body)))
    with fake.serve():
        async with writer_for(fake) as writer:
            summaries = await writer.summarize(TASKS)
    assert [s.address for s in summaries] == [Address(3, 1), Address(8, 4)]
    assert len(fake.message_requests()) == 2


async def test_a_failing_follow_up_keeps_the_lines_already_written() -> None:
    def answer(body: JSON) -> str:
        addresses = asked(body)
        if len(addresses) > 1:
            return tags({a: filled(a, 600 if a == "8+4" else LIMIT) for a in addresses[:-1]})
        return good_answer(body)

    fake = RecordingFake(answer=answer)
    fake.script.extend([Failure(200), OVERLOADED, OVERLOADED, OVERLOADED, OVERLOADED])
    with fake.serve():
        async with writer_for(fake, retries=1) as writer:
            summaries = await writer.summarize(TASKS)
    assert len(fake.message_requests()) == 5, "the first, two to shorten, two alone"
    assert [s.address for s in summaries] == [Address(3, 1), Address(8, 4)]
    assert summaries[1].text == cut_to_bytes(filled("8+4", 600), LIMIT)


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (OVERLOADED, "529 overloaded"),
        (Failure(500), "500 server error"),
        (Failure(504, "api_error", "gateway timeout"), "504 gateway timeout"),
        (Failure(drop=True), "connection dropped"),
        (Failure(hang_s=1.5), "timeout"),
    ],
)
async def test_passing_failures_are_retried(
    failure: Failure, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = RecordingFake(answer=good_answer)
    fake.script.extend([failure, failure])
    caplog.set_level(logging.WARNING, logger="eva.model.client")
    with fake.serve():
        async with writer_for(fake, request_timeout_seconds=0.5) as writer:
            summaries = await writer.summarize(TASKS)
    assert len(fake.message_requests()) == 3
    assert [s.text for s in summaries] == [filled(a) for a in ("3+1", "8+4", "16+8")]
    assert all(s.batch_usage is None for s in summaries), "the direct request is full price"
    assert f"model call for 3 line tasks failed ({kind}), retry 1 of 3 in" in caplog.text
    assert f"failed ({kind}), retry 2 of 3 in" in caplog.text


async def test_a_rate_limit_waits_as_long_as_retry_after_says() -> None:
    fake = RecordingFake(answer=good_answer)
    fake.script.append(rate_limited(0.4))
    with fake.serve():
        async with writer_for(fake) as writer:
            started = trio.current_time()
            summaries = await writer.summarize(TASKS)
            elapsed = trio.current_time() - started
    assert len(fake.message_requests()) == 2
    assert len(summaries) == 3
    assert elapsed >= 0.4


async def test_retries_run_out() -> None:
    fake = RecordingFake(answer=good_answer)
    fake.script.extend([OVERLOADED] * 5)
    with fake.serve():
        async with writer_for(fake, retries=2) as writer:
            with pytest.raises(ModelCallFailed, match="failed 3 times; last: 529 overloaded"):
                await writer.summarize(TASKS)
    assert len(fake.message_requests()) == 3


async def test_the_spend_limit_is_never_retried() -> None:
    fake = RecordingFake(answer=good_answer)
    fake.script.extend([SPEND_LIMIT, SPEND_LIMIT])
    with fake.serve():
        async with writer_for(fake) as writer:
            with pytest.raises(SpendLimitReached, match="spend limit"):
                await writer.summarize(TASKS)
    assert len(fake.message_requests()) == 1


async def test_a_wrong_key_is_refused_at_once() -> None:
    fake = RecordingFake(answer=good_answer)
    with fake.serve():
        async with writer_for(fake, key="wrong-key") as writer:
            with pytest.raises(ModelRequestRefused, match="401 authentication failed"):
                await writer.summarize(TASKS)
    assert len(fake.message_requests()) == 1


def test_classify_names_what_went_wrong() -> None:
    request = anthropic._base_client.httpx2.Request("POST", "http://x/v1/messages")
    assert classify(anthropic.APITimeoutError(request)) == "timeout"
    assert classify(anthropic.APIConnectionError(request=request)) == "connection dropped"
    assert classify(ValueError("x")) == "ValueError"


async def test_background_work_goes_through_message_batches_with_the_same_lines() -> None:
    fake = RecordingFake(answer=good_answer)
    with fake.serve():
        async with writer_for(fake, use_batches=True) as writer:
            direct = await writer.summarize(TASKS)
            batched = await writer.summarize(TASKS, urgent=False)
            limited = LimitedSummarizer(writer, trio.CapacityLimiter(1))
            through_limit = await limited.summarize(TASKS, urgent=False)
    paths = [(r.method, r.path.split("/msgbatch_")[0]) for r in fake.requests]
    assert paths.count(("POST", "/v1/messages")) == 1, "only the urgent call is direct"
    assert paths.count(("POST", "/v1/messages/batches")) == 2
    assert any(path.endswith("/results") for _, path in ((r.method, r.path) for r in fake.requests))
    batch_body = next(r.body for r in fake.requests if r.path == "/v1/messages/batches")
    [request] = batch_body["requests"]
    assert request["custom_id"] == "lines-3-1"
    assert request["params"]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert [s.text for s in batched] == [s.text for s in direct] == [s.text for s in through_limit]
    assert total_usage(batched) != (0, 0, 0, 0)
    assert all(s.batch_usage == s.usage for s in batched), "all of it went as a batch"
    assert all(s.batch_usage is None for s in direct)


async def test_without_batches_or_when_urgent_requests_are_direct() -> None:
    fake = RecordingFake(answer=good_answer)
    with fake.serve():
        async with writer_for(fake, use_batches=False) as writer:
            await writer.summarize(TASKS, urgent=False)
    assert [r.path for r in fake.requests] == ["/v1/messages"]


async def test_a_failing_batch_falls_back_to_a_direct_request() -> None:
    fake = BrokenBatches(answer=good_answer)
    with fake.serve():
        async with writer_for(fake, use_batches=True, retries=1) as writer:
            summaries = await writer.summarize(TASKS, urgent=False)
    assert [r.path for r in fake.requests] == ["/v1/messages/batches"] * 2 + ["/v1/messages"]
    assert [s.text for s in summaries] == [filled(a) for a in ("3+1", "8+4", "16+8")]
    assert all(s.batch_usage is None for s in summaries), "the direct request is full price"


async def test_summarizers_without_urgent_still_work_in_background_runs() -> None:
    class Plain:
        async def summarize(self, tasks: Sequence[Task]) -> list[Summary]:
            return [Summary(address=t.address, text="x", model="plain") for t in tasks]

    summaries = await summarize_tasks(Plain(), TASKS, urgent=False)
    assert [s.model for s in summaries] == ["plain"] * 3


def chat_line(body: JSON) -> str:
    """An answer that keeps the start of each task's own text, as long as the limit allows."""
    prompt = last_user(body)
    lines = {}
    for address, content in re.findall(
        r'<task address="([^"]+)"[^>]*>\n(.*?)\n</task>', prompt, re.DOTALL
    ):
        words = " ".join(re.sub(r"</?(earlier|later)>", " ", content).split())
        lines[address] = cut_to_bytes(words, LIMIT - 8)
    return tags(lines)


async def test_memory_builds_model_lines_through_the_fake_api(tmp_path: Path) -> None:
    report = import_bytes(tmp_path, friends_export(400), Path("friends.json"))
    store = keyed(EventStore(open_backend(tmp_path)))
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    memory_settings = MemorySettings(
        compress_at_bytes=6 * KIB,
        tail_keep_bytes=2 * KIB,
        overflow_tail_bytes=12 * KIB,
        row_high_bytes=12 * KIB,
        row_low_bytes=6 * KIB,
        prompt_tail_max_bytes=16 * KIB,
    )
    fake = RecordingFake(answer=chat_line)
    with fake.serve():
        async with writer_for(fake) as writer:
            built = await Memory(store, stream, writer, memory_settings).build(10**13)
    assert built.publishes == 1
    assert built.stats.leaves_model > 0 and built.stats.merges_model > 0
    assert built.stats.rejected_replies == 0
    lines = [e for _, e in store.events(stream) if isinstance(e, LineWritten)]
    model_lines = [line for line in lines if line.how == "model"]
    assert len(model_lines) == built.stats.leaves_model + built.stats.merges_model
    assert all(utf8_size(line.text) <= LIMIT for line in lines)
    assert all(line.model == "claude-haiku-5-5" for line in model_lines)
    assert all(line.usage is not None and line.usage.output_tokens > 0 for line in model_lines)
    recorded = [line.usage for line in model_lines if line.usage]
    assert sum(u.output_tokens for u in recorded) == sum(
        reply["usage"]["output_tokens"] for reply in fake.replies
    )
    prompt_tokens = sum(
        u.input_tokens + u.cache_write_tokens + u.cache_read_tokens for u in recorded
    )
    assert prompt_tokens == sum(
        reply["usage"]["input_tokens"]
        + reply["usage"]["cache_creation_input_tokens"]
        + reply["usage"]["cache_read_input_tokens"]
        for reply in fake.replies
    )
    assert len(fake.message_requests()) == built.stats.model_requests


async def test_batched_background_calls_get_their_own_limit_and_a_day(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Slow:
        def __init__(self, batches: bool) -> None:
            self.background_batches = batches
            self.seen: list[bool] = []

        async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
            self.seen.append(urgent)
            await trio.sleep(200)  # longer than the urgent time limit
            return []

    batching = Slow(batches=True)
    limited = LimitedSummarizer(batching, trio.CapacityLimiter(1), timeout_s=100)
    with pytest.raises(TimeoutError):
        await limited.summarize([], urgent=True)
    assert await limited.summarize([], urgent=False) == []  # a batch: a day's limit
    assert limited.failures == 1
    assert batching.seen == [True, False]
    direct = LimitedSummarizer(Slow(batches=False), trio.CapacityLimiter(1), timeout_s=100)
    with pytest.raises(TimeoutError):
        await direct.summarize([], urgent=False)  # not batched: the usual limit


def test_the_target_share_shrinks_merges_and_leaves_long_messages_whole() -> None:
    merge = MergeTask(address=Address(0, 2), left_text="a" * 400, right_text="b" * 400)
    leaf = LeafTask(address=Address(2, 1), name="Ann", text="c" * 900)
    assert 'target="435 to 512 bytes"' in task_text(merge, 512)
    assert 'target="217 to 256 bytes"' in task_text(merge, 512, 0.5)
    assert 'target="435 to 512 bytes"' in task_text(leaf, 512, 0.5)
