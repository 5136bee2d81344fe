# Replay of a long stream, whose recall index is rebuilt by a worker process.
#
# The worker must give the same verdict and digests as rebuilding everything
# in one process, catch a changed or missing postings entry, and never be left
# running, whether it answers, fails, or replay stops on its way.
from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eva.core.digest import encoded_rows, table_digest
from eva.core.events import MessageDeleted, MessageEdited, MessagePosted, MessagesErased
from eva.core.keys import StreamId, prefix_end, stream_prefix
from eva.core.memtables import MemoryTables
from eva.core.recall_index import POSTINGS, PostingBuffer, PreparedStream
from eva.core.replay import POSTINGS_BATCH
from eva.core.tables import Tables
from eva.store import index_worker, lmdb_kv
from eva.store import replay as replay_module
from eva.store.event_store import EventStore
from eva.store.replay import replay_stream

STREAM = StreamId(3, 30)
OTHER = StreamId(3, 31)
WORDS = ["alpha", "beta", "Gamma", "delta", "Émile", "東京", "x1", "zz", "swap", "atomic"]
MESSAGES = 2 * POSTINGS_BATCH + 700  # three buffers for the worker, messages in three buckets


def posted(index: int, rng: random.Random) -> MessagePosted:
    return MessagePosted(
        at_ms=1_600_000_000_000 + index * 1000,
        index=index,
        message_id=10_000 + index,
        author_id=index % 5,
        author_name=f"user{index % 5}",
        content=" ".join(rng.choices(WORDS, k=rng.randint(0, 8))),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    """A long stream with edits, deletions and an erasure, and a short one beside it."""
    rng = random.Random(11)
    backend = lmdb_kv.open_backend(tmp_path / "data")
    store = EventStore(backend)
    messages = [posted(index, rng) for index in range(MESSAGES)]
    for start in range(0, MESSAGES, 3000):
        store.append(STREAM, messages[start : start + 3000])
    store.append(
        STREAM,
        [
            MessageEdited(at_ms=1, index=5, message_id=10_005, content="atomic swap edited"),
            MessageEdited(at_ms=2, index=5000, message_id=15_000, content="later words"),
            MessageDeleted(at_ms=3, index=7, message_id=10_007),
            MessagesErased(at_ms=4, person_hash="h", indexes=(4096, 4097, 8000)),
        ],
    )
    store.append(OTHER, [posted(index, rng) for index in range(40)])
    yield store
    backend.close()


def replay(store: EventStore, *, worker: bool) -> replay_module.ReplayResult:
    return replay_stream(store, STREAM, index_worker_min_events=1 if worker else 10**9)


def change_postings(store: EventStore, change: str) -> None:
    prefix = stream_prefix(STREAM)
    with store.backend.reading() as tables:
        key, value = next(
            (key, value)
            for key, value in tables.scan("postings", prefix, prefix_end(prefix))
            if b"swap" in key
        )

    def write(tables: Tables) -> None:
        if change == "value":
            tables.put("postings", key, value[:-1] + bytes([value[-1] ^ 1]))
        else:
            tables.delete("postings", key)

    store.backend.write(write)


@pytest.mark.parametrize("late_start", [0.0, 0.5])
def test_the_worker_gives_the_verdict_and_digests_of_one_process(
    store: EventStore, monkeypatch: pytest.MonkeyPatch, late_start: float
) -> None:
    # A worker that starts late leaves its buffers to be taken back and
    # prepared by the replaying process, in the worker's queue order.
    late = f"import time; time.sleep({late_start}); from eva.store.index_worker import main; main()"
    monkeypatch.setattr(index_worker, "WORKER_COMMAND", [sys.executable, "-c", late])
    prepared_here = []
    prepare = PostingBuffer.prepare

    def counted(self: PostingBuffer) -> list[PreparedStream]:
        prepared_here.append(self)
        return prepare(self)

    alone = replay(store, worker=False)
    monkeypatch.setattr(PostingBuffer, "prepare", counted)
    shared = replay(store, worker=True)
    assert alone.ok and shared.ok
    assert shared == alone
    assert shared.events == MESSAGES + 4
    if late_start:
        assert prepared_here  # the buffers holding the edits and the erasure among them


@pytest.mark.parametrize("change", ["value", "key"])
@pytest.mark.parametrize("worker", [False, True])
def test_a_changed_postings_entry_is_caught(store: EventStore, change: str, worker: bool) -> None:
    good = replay(store, worker=worker)
    change_postings(store, change)
    result = replay(store, worker=worker)
    assert not result.ok
    assert result.differing == ("postings",)
    assert result.rebuilt_digest == good.rebuilt_digest
    assert result.live_digest != good.live_digest


def test_other_tables_are_still_checked_here(store: EventStore) -> None:
    prefix = stream_prefix(STREAM)
    with store.backend.reading() as tables:
        key, _ = next(iter(tables.scan("messages", prefix, prefix_end(prefix))))

    def damage(tables: Tables) -> None:
        tables.put("messages", key, b"\x93\x00\x00\xc2")

    store.backend.write(damage)
    assert replay(store, worker=True).differing == ("messages",)


def test_a_short_stream_needs_no_worker(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_process(*_: object, **__: object) -> None:
        raise AssertionError("started a worker")

    monkeypatch.setattr(index_worker.subprocess, "Popen", no_process)
    assert replay_stream(store, OTHER).ok


def test_a_failing_worker_is_an_error_and_is_reaped(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = [sys.executable, "-c", "import sys; sys.exit(3)"]
    monkeypatch.setattr(index_worker, "WORKER_COMMAND", gone)
    with pytest.raises(index_worker.IndexWorkerError):
        replay(store, worker=True)
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child left behind


def test_a_replay_that_stops_kills_its_worker(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stop(_: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replay_stream(store, STREAM, stop, index_worker_min_events=1)
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
    assert replay(store, worker=True).ok


def test_a_replay_that_stops_while_preparing_does_not_wait_for_its_worker(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    asleep = [sys.executable, "-c", "import time; time.sleep(60)"]  # reads nothing
    monkeypatch.setattr(index_worker, "WORKER_COMMAND", asleep)

    def broken(_: PostingBuffer) -> list[PreparedStream]:
        raise KeyboardInterrupt

    monkeypatch.setattr(PostingBuffer, "prepare", broken)  # here only, not in the worker
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        replay(store, worker=True)
    assert time.monotonic() - started < 30
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_a_comparison_asked_early_and_twice_is_answered_once() -> None:
    # Replay asks before it digests its own tables, then waits for the answer.
    buffer = PostingBuffer()
    buffer.add(STREAM, 0, "atomic swap")
    buffer.add(STREAM, 1, "swap again")
    built = MemoryTables()
    buffer.flush(built)
    live = encoded_rows(built.rows(POSTINGS))
    with index_worker.open_index_worker() as worker:
        worker.send_live(live)
        worker.write(buffer)
        worker.ask_compare()
        worker.ask_compare()
        assert worker.compare() is None
    with index_worker.open_index_worker() as worker:
        worker.send_live(live)
        worker.ask_compare()  # before any change: the worker holds no postings
        assert worker.compare() == table_digest([])
