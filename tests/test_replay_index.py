"""A long replay's recall index, rebuilt in a child process beside the rest."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import keyed

import eva.store.replay as replay_module
from eva.cli.cmd_import import import_bytes
from eva.core.events import MessageDeleted, MessageEdited, MessagesErased
from eva.core.keys import StreamId, prefix_end, stream_prefix
from eva.core.replay import digest, projection_rows
from eva.core.tables import Tables
from eva.demo.friends import friends_export
from eva.store import lmdb_kv, replay_index
from eva.store.event_store import EventStore
from eva.store.replay import replay_stream


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "REBUILD_BATCH", 333)  # batches of both kinds
    monkeypatch.setattr(replay_module, "MEMORY_REBUILD_EVENTS", 1000)  # a scratch environment
    # a thread another test left idle in this worker would keep the child from forking
    monkeypatch.setattr(replay_module, "may_fork_beside", lambda: True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    report = import_bytes(tmp_path / "data", friends_export(2500), Path("friends.json"))
    opened = keyed(EventStore(lmdb_kv.open_backend(tmp_path / "data")))
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    # edits, deletions and an erasure: the child is sent texts to take out as well
    posted = {index: message for index, message in opened.messages(stream, 0, 2000)}
    opened.append(stream, [
        MessageEdited(at_ms=1, index=7, message_id=posted[7].posted.message_id,
                      content="a newer text with zanzibarquux"),
        MessageDeleted(at_ms=2, index=1500, message_id=posted[1500].posted.message_id),
        MessagesErased(at_ms=3, indexes=(30, 31, 1999), person_hash="a" * 24),
    ])
    yield opened
    opened.backend.close()


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[bytes | None]:
    """What each child answered."""
    found: list[bytes | None] = []
    answer = replay_index.IndexBeside.answer

    def recorded(self: replay_index.IndexBeside) -> bytes | None:
        found.append(digest := answer(self))
        return digest

    monkeypatch.setattr(replay_index.IndexBeside, "answer", recorded)
    return found


def the_stream(store: EventStore) -> StreamId:
    [meta] = store.streams()
    return StreamId(meta.guild_id, meta.channel_id)


def test_the_index_rebuilt_beside_gives_what_one_process_gives(
    store: EventStore, answers: list[bytes | None]
) -> None:
    stream = the_stream(store)
    with store.backend.reading() as tables:
        whole = digest(projection_rows(tables, stream))
    alone = replay_stream(store, stream, index_beside_from=10**9)
    beside = replay_stream(store, stream, index_beside_from=1)
    assert alone.ok and beside.ok
    assert beside.live_digest == beside.rebuilt_digest == alone.live_digest == whole
    assert (beside.events, beside.log) == (alone.events, alone.log)
    assert len(answers) == 1 and answers[0] is not None  # the child answered


def test_a_changed_posting_is_found_by_the_index_beside(store: EventStore) -> None:
    stream = the_stream(store)
    prefix = stream_prefix(stream)
    with store.backend.reading() as tables:
        whole = digest(projection_rows(tables, stream))
        key, value = list(tables.scan("postings", prefix, prefix_end(prefix)))[500]

    def change(tables: Tables) -> None:
        tables.put("postings", key, value + b"\x00")

    store.backend.write(change)
    changed = replay_stream(store, stream, index_beside_from=1)
    assert changed.differing == ("postings",)
    assert changed.rebuilt_digest == whole
    assert changed == replay_stream(store, stream, index_beside_from=10**9)


def test_a_child_that_fails_leaves_the_replay_to_do_the_index_itself(
    store: EventStore, monkeypatch: pytest.MonkeyPatch, answers: list[bytes | None]
) -> None:
    stream = the_stream(store)
    expected = replay_stream(store, stream, index_beside_from=10**9)

    def failing(*_: object) -> None:
        raise OSError("the scratch disk is full")

    monkeypatch.setattr(replay_index, "_rebuild", failing)  # the forked child has it too
    assert replay_stream(store, stream, index_beside_from=1) == expected
    assert answers == [None]


def test_a_process_with_threads_does_not_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_index, "cores", lambda: 2)
    running = [1]
    monkeypatch.setattr(threading, "active_count", lambda: running[0])
    assert replay_index.may_fork_beside()
    running[0] = 2
    assert not replay_index.may_fork_beside()
    running[0] = 1
    monkeypatch.setattr(replay_index, "cores", lambda: 1)
    assert not replay_index.may_fork_beside()
