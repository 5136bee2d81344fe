"""Message batches outlive the process: a restart takes up a batch in flight, never pays twice.

The real anthropic SDK talks to the fake Messages API on loopback; the batch book lives in
real LMDB in a temp directory, closed and opened again as a restart would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import trio
from conftest import keyed
from test_line_writer import (
    LEFT,
    LIMIT,
    RIGHT,
    TASK,
    RecordingFake,
    chat_line,
    filled,
    good_answer,
    settings,
)

from eva.cli.cmd_import import import_bytes
from eva.core.address import Address
from eva.core.events import LineWritten
from eva.core.keys import StreamId
from eva.core.settings import KIB, MemorySettings
from eva.core.summarize import MergeTask, Summary, Task
from eva.demo.friends import friends_export
from eva.memory.build import Memory
from eva.model.batch_book import DAY_MS, KEEP_DAYS, BatchBook, BatchRef
from eva.model.client import make_client
from eva.model.line_writer import ClaudeLineWriter
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import LmdbBackend, open_backend
from eva.testing.fake_anthropic import FakeMessagesAPI

BatchRefDecoder = msgspec.msgpack.Decoder(BatchRef)

MERGES: list[Task] = [
    MergeTask(address=Address(8, 4), left_text=LEFT, right_text=RIGHT),
    MergeTask(address=Address(16, 8), left_text=LEFT, right_text=RIGHT + " and more"),
    MergeTask(address=Address(32, 16), left_text=LEFT + " again", right_text=RIGHT),
]


@asynccontextmanager
async def writer_with_book(
    fake: FakeMessagesAPI, backend: LmdbBackend, **changes: Any
) -> AsyncIterator[ClaudeLineWriter]:
    model_settings = settings(base_url=fake.url, use_batches=True, **changes)
    async with make_client(model_settings, fake.key) as client:
        yield ClaudeLineWriter(client, model_settings, LIMIT, backoff_first_s=0.01,
                               book=BatchBook(backend))


async def stopped_while_waiting(fake: FakeMessagesAPI, data: Path, tasks: Sequence[Task]) -> None:
    """Send `tasks` as a batch that keeps running, and stop (cancel) while waiting for it."""
    fake.hold_batches = True
    backend = open_backend(data)
    try:
        async with writer_with_book(fake, backend) as writer, trio.open_nursery() as nursery:
            nursery.start_soon(writer.summarize, tasks, False)
            fingerprints = [writer._fingerprint(task) for task in tasks]
            while not BatchBook(backend).find(fingerprints):  # noqa: ASYNC110 - another task's write
                await trio.sleep(0.01)
            await trio.sleep(0.05)  # polling, as a batch taking hours would be
            nursery.cancel_scope.cancel()
    finally:
        backend.close()
    fake.hold_batches = False


async def after_restart(
    fake: FakeMessagesAPI, data: Path, tasks: Sequence[Task], *, urgent: bool
) -> tuple[list[Summary], ClaudeLineWriter]:
    """Open the data directory again and ask for `tasks`; the book is empty afterwards."""
    backend = open_backend(data)
    try:
        async with writer_with_book(fake, backend) as writer:
            summaries = await writer.summarize(tasks, urgent=urgent)
            fingerprints = [writer._fingerprint(task) for task in tasks]
        assert BatchBook(backend).find(fingerprints) == {}, "taken lines leave the book"
    finally:
        backend.close()
    return summaries, writer


def posts(fake: FakeMessagesAPI) -> list[str]:
    return [r.path for r in fake.requests if r.method == "POST"]


def usage_sum(summaries: Sequence[Summary]) -> tuple[int, int, int, int]:
    usages = [s.usage for s in summaries if s.usage is not None]
    return (
        sum(u.input_tokens for u in usages),
        sum(u.output_tokens for u in usages),
        sum(u.cache_write_tokens for u in usages),
        sum(u.cache_read_tokens for u in usages),
    )


def reported(message: dict[str, Any]) -> tuple[int, int, int, int]:
    usage = message["usage"]
    return (
        usage["input_tokens"],
        usage["output_tokens"],
        usage.get("cache_creation_input_tokens") or 0,
        usage.get("cache_read_input_tokens") or 0,
    )


async def test_a_batch_in_flight_at_a_stop_is_taken_up_after_the_restart(tmp_path: Path) -> None:
    fake = FakeMessagesAPI(answer=good_answer)
    with fake.serve():
        await stopped_while_waiting(fake, tmp_path, MERGES)
        assert posts(fake) == ["/v1/messages/batches"]
        summaries, writer = await after_restart(fake, tmp_path, MERGES, urgent=False)
    assert posts(fake) == ["/v1/messages/batches"], "nothing was sent again"
    assert writer.batches_resumed == 1
    assert [s.text for s in summaries] == [filled(a) for a in ("8+4", "16+8", "32+16")]
    [message] = fake.batch_messages()
    assert usage_sum(summaries) == reported(message), "the batch is charged once, in full"
    assert all(s.batch_usage == s.usage for s in summaries), "at the batch price"


async def test_a_batch_serves_its_tasks_however_they_are_asked_after_the_restart(
    tmp_path: Path,
) -> None:
    fake = FakeMessagesAPI(answer=good_answer)
    with fake.serve():
        await stopped_while_waiting(fake, tmp_path, MERGES)
        backend = open_backend(tmp_path)
        try:
            async with writer_with_book(fake, backend) as writer:
                first = await writer.summarize(MERGES[2:], urgent=False)
                rest = await writer.summarize(MERGES[:2], urgent=False)
        finally:
            backend.close()
    assert posts(fake) == ["/v1/messages/batches"]
    assert [s.text for s in first + rest] == [filled(a) for a in ("32+16", "8+4", "16+8")]
    [message] = fake.batch_messages()
    assert usage_sum(first + rest) == reported(message), "each task pays its own share once"


async def test_an_urgent_call_does_not_wait_for_a_batch_still_running(tmp_path: Path) -> None:
    fake = FakeMessagesAPI(answer=good_answer)
    with fake.serve():
        await stopped_while_waiting(fake, tmp_path, MERGES)
        fake.hold_batches = True  # it is still running after the restart
        summaries, _ = await after_restart(fake, tmp_path, MERGES, urgent=True)
    assert posts(fake) == ["/v1/messages/batches", "/v1/messages"]
    assert [s.text for s in summaries] == [filled(a) for a in ("8+4", "16+8", "32+16")]
    assert all(s.batch_usage is None for s in summaries), "the direct request is full price"


async def test_a_batch_gone_is_struck_off_and_its_tasks_asked_again(tmp_path: Path) -> None:
    fake = FakeMessagesAPI(answer=good_answer)
    with fake.serve():
        await stopped_while_waiting(fake, tmp_path, MERGES)
        fake.drop_batches()  # its results expired meanwhile
        summaries, writer = await after_restart(fake, tmp_path, MERGES, urgent=False)
    assert posts(fake) == ["/v1/messages/batches", "/v1/messages/batches"]
    assert writer.batches_resumed == 0
    assert [s.text for s in summaries] == [filled(a) for a in ("8+4", "16+8", "32+16")]


async def test_a_task_whose_text_changed_is_sent_anew(tmp_path: Path) -> None:
    fake = FakeMessagesAPI(answer=good_answer)
    changed = MergeTask(address=Address(8, 4), left_text=LEFT, right_text="Cy: (erased)")
    with fake.serve():
        await stopped_while_waiting(fake, tmp_path, MERGES[:1])
        backend = open_backend(tmp_path)
        try:
            async with writer_with_book(fake, backend) as writer:
                summaries = await writer.summarize([changed], urgent=False)
        finally:
            backend.close()
    assert posts(fake) == ["/v1/messages/batches", "/v1/messages/batches"]
    assert writer.batches_resumed == 0
    sent = [r.body for r in fake.requests if r.path == "/v1/messages/batches"][-1]
    assert "(erased)" in str(sent)
    assert [s.text for s in summaries] == [filled("8+4")]


async def test_the_book_forgets_batches_older_than_the_api_keeps_them(tmp_path: Path) -> None:
    now = [10 * KEEP_DAYS * DAY_MS]
    backend = open_backend(tmp_path)
    try:
        book = BatchBook(backend, clock_ms=lambda: now[0])
        old = BatchRef("msgbatch_old", "lines-0-2", now[0] - (KEEP_DAYS + 1) * DAY_MS)
        await book.record([b"o" * 16], old)
        assert book.find([b"o" * 16]) == {}, "too old to hold an answer"
        fresh = BatchRef("msgbatch_new", "lines-2-2", now[0])
        await BatchBook(backend, clock_ms=lambda: now[0]).record([b"n" * 16], fresh)
        with backend.reading() as tables:
            kept = [key for key, _ in tables.scan("batches", b"", b"\xff" * 17)]
        assert kept == [b"n" * 16], "the old entry was pruned"
    finally:
        backend.close()


async def test_compression_stopped_while_batches_run_finishes_after_the_restart_paying_once(
    tmp_path: Path,
) -> None:
    report = import_bytes(tmp_path, friends_export(400), Path("friends.json"))
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    memory_settings = MemorySettings(
        compress_at_bytes=6 * KIB, tail_keep_bytes=2 * KIB, overflow_tail_bytes=12 * KIB,
        row_high_bytes=12 * KIB, row_low_bytes=6 * KIB, prompt_tail_max_bytes=16 * KIB,
        model_calls_in_flight=1,
    )
    fake = RecordingFake(answer=chat_line, hold_batches=True)
    with fake.serve():
        backend = open_backend(tmp_path)
        try:
            store = keyed(EventStore(backend))
            async with writer_with_book(fake, backend) as writer, trio.open_nursery() as nursery:
                memory = Memory(store, stream, writer, memory_settings)
                nursery.start_soon(partial(memory.compress, 10**13, urgent=False))
                with trio.fail_after(10):
                    while not booked_batches(backend):  # noqa: ASYNC110 - another task's write
                        await trio.sleep(0.01)
                await trio.sleep(0.05)
                nursery.cancel_scope.cancel()  # the process stops with a batch running
            before = booked_batches(backend)
        finally:
            backend.close()
        fake.hold_batches = False
        backend = open_backend(tmp_path)  # and starts again
        try:
            store = keyed(EventStore(backend))
            async with writer_with_book(fake, backend) as writer:
                built = await Memory(store, stream, writer, memory_settings).build(10**13)
            lines = [e for _, e in store.events(stream) if isinstance(e, LineWritten)]
            meta = store.meta(stream)
            assert meta is not None and meta.ready == 0, "the merges left ready are done"
            assert booked_batches(backend) == set(), "every line taken leaves the book"
        finally:
            backend.close()
    assert writer.batches_resumed >= 1
    assert before <= {r.path.rsplit("/", 1)[-1] for r in fake.requests if r.method == "GET"}
    addresses = [(line.start, line.size) for line in lines]
    assert len(addresses) == len(set(addresses)), "no line written twice"
    asked = [a for r in fake.requests if r.method == "POST" for a in TASK.findall(str(r.body))]
    assert len(asked) == len(set(asked)), "no task sent twice: nothing paid for twice"
    model_lines = [line for line in lines if line.how == "model"]
    assert len(model_lines) == len(asked) > 0
    assert built.stats.rejected_replies == 0
    output = sum(line.usage.output_tokens for line in model_lines if line.usage)
    assert output == sum(reply["usage"]["output_tokens"] for reply in fake.replies)


def booked_batches(backend: LmdbBackend) -> set[str]:
    """The batch ids the book holds now."""
    with backend.reading() as tables:
        return {BatchRefDecoder.decode(value).batch_id
                for _, value in tables.scan("batches", b"", b"\xff" * 17)}
