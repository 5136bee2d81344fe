"""Texts deleted or edited away leave the files for good: the purge they are owed is in the
log, survives a stop, and is finished at the next start or by the next command that writes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from eva.cli.main import main
from eva.core import keys
from eva.core.events import LogRewritten, MessageDeleted, MessageEdited, MessagePosted
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings, MemorySettings
from eva.core.state import encode_record
from eva.core.summarize import OfflineSummarizer
from eva.core.tables import Tables
from eva.live.inputs import Delete, Edit, Post
from eva.live.supervisor import open_supervisor
from eva.store import lmdb_kv
from eva.store.erasure import purge_stream
from eva.store.event_store import EventStore
from eva.store.replay import replay_stream

STREAM = StreamId(7, 70)
PIN = "my bank PIN is 9081, do not tell anyone"
TYPO = "meet at the blue door at seven sharp"
SLOW = LiveSettings(purge_delay_seconds=3600, idle_seconds=3600)


def in_files(directory: Path, needles: list[str]) -> set[str]:
    blob = b"".join(
        (Path(root) / name).read_bytes() for root, _, names in os.walk(directory) for name in names
    )
    return {needle for needle in needles if needle.encode() in blob}


def posted(index: int, content: str) -> MessagePosted:
    return MessagePosted(at_ms=1_700_000_000_000 + index * 60_000, index=index,
                         message_id=500 + index, author_id=3, author_name="Ann", content=content)


def chat() -> list[MessagePosted]:
    ordinary = [posted(i, f"ordinary talk {i}") for i in range(2, 9)]
    return [posted(0, PIN), posted(1, TYPO), *ordinary]


def test_the_purge_owed_is_counted_in_the_log_and_a_purge_clears_it(tmp_path: Path) -> None:
    store = EventStore(lmdb_kv.open_backend(tmp_path))
    store.append(STREAM, chat())
    store.append(STREAM, [MessageDeleted(at_ms=2, index=0, message_id=500)])
    store.append(STREAM, [MessageEdited(at_ms=3, index=1, message_id=501, content="at eight")])
    meta = store.meta(STREAM)
    assert meta is not None and meta.unpurged == 2
    assert replay_stream(store, STREAM).ok  # a replay counts it alike
    purged = purge_stream(store, STREAM)
    assert purged.rewritten == 2 and sorted(purged.texts) == sorted([PIN, TYPO])
    meta = store.meta(STREAM)
    assert meta is not None and meta.unpurged == 0
    # deleted again (Discord may send it twice): owed, though no word is left to take out
    store.append(STREAM, [MessageDeleted(at_ms=4, index=0, message_id=500)])
    assert (meta := store.meta(STREAM)) is not None and meta.unpurged == 1
    again = purge_stream(store, STREAM)
    assert (again.rewritten, again.texts) == (0, [])
    assert (meta := store.meta(STREAM)) is not None and meta.unpurged == 0
    [(_, last)] = list(store.events(STREAM))[-1:]
    assert isinstance(last, LogRewritten) and last.positions == ()
    assert replay_stream(store, STREAM).ok
    store.backend.close()


def test_a_directory_written_before_the_count_is_counted_once_opened(tmp_path: Path) -> None:
    backend = lmdb_kv.open_backend(tmp_path)
    store = EventStore(backend)
    store.append(STREAM, chat())
    store.append(STREAM, [MessageDeleted(at_ms=2, index=0, message_id=500)])
    prefix = keys.stream_prefix(STREAM)

    def written_before(tables: Tables) -> None:
        meta = store.meta(STREAM)
        assert meta is not None
        meta.unpurged = 0
        tables.put("streams", prefix, encode_record(meta))
        tables.delete("layout", keys.UNPURGED_COUNTED)

    backend.write(written_before)
    assert not replay_stream(store, STREAM).ok
    backend.close()
    reopened = EventStore(lmdb_kv.open_backend(tmp_path))
    meta = reopened.meta(STREAM)
    assert meta is not None and meta.unpurged == 1
    assert replay_stream(reopened, STREAM).ok
    reopened.backend.close()


async def post_all(supervisor: object) -> None:
    for message in chat():
        await supervisor.ask(STREAM, Post(
            message_id=message.message_id, author_id=message.author_id,
            author_name=message.author_name, at_ms=message.at_ms, content=message.content,
        ))


async def test_a_purge_a_stop_cut_short_is_finished_at_the_next_start(tmp_path: Path) -> None:
    # the bot is stopped within the purge delay: the texts stay in the log over the stop
    store = EventStore(lmdb_kv.open_backend(tmp_path))
    async with open_supervisor(store, OfflineSummarizer(), MemorySettings(), SLOW) as first:
        await post_all(first)
        assert await first.ask(STREAM, Delete(message_ids=(500,), at_ms=1)) == 1
        assert await first.ask(STREAM, Edit(message_id=501, at_ms=2, content="at eight"))
    assert in_files(tmp_path, [PIN, TYPO]) == {PIN, TYPO}
    meta = store.meta(STREAM)
    assert meta is not None and meta.unpurged == 2
    async with open_supervisor(store, OfflineSummarizer(), MemorySettings(), SLOW) as second:
        for _ in range(600):  # at most 30 s: at once, not after the hour's delay
            if second.last_scan is not None:
                break
            await trio.sleep(0.05)
        assert second.last_scan is not None and second.last_scan.hits == 0
    assert in_files(tmp_path, [PIN, TYPO]) == set()
    assert in_files(tmp_path, ["at eight", "ordinary talk 5"]) == {"at eight", "ordinary talk 5"}
    assert (meta := store.meta(STREAM)) is not None and meta.unpurged == 0
    assert replay_stream(store, STREAM).ok
    store.backend.close()


@pytest.fixture
def closed_backends() -> Iterator[None]:
    yield
    for backend in list(lmdb_kv._open_backends.values()):
        backend.close()


@pytest.mark.usefixtures("closed_backends")
def test_status_shows_it_and_the_next_writing_command_finishes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    store = EventStore(lmdb_kv.open_backend(data))
    store.append(STREAM, chat())
    store.append(STREAM, [MessageDeleted(at_ms=2, index=0, message_id=500)])
    store.backend.close()
    assert main(["status", "--data", str(data), "--json"]) == 0
    [channel] = json.loads(capsys.readouterr().out)["channels"]
    assert channel["purges_pending"] == 1
    assert main(["status", "--data", str(data)]) == 0
    assert "deleted or edited away still in the log of 1 channel" in (
        capsys.readouterr().out
    )
    assert in_files(data, [PIN]) == {PIN}
    export = tmp_path / "empty.json"
    export.write_text(json.dumps({
        "guild": {"id": "7", "name": "g"}, "channel": {"id": "70", "name": "c"}, "messages": [],
    }))
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    assert "taking texts deleted or edited away out of 1 channel" in (
        capsys.readouterr().err
    )
    assert in_files(data, [PIN]) == set()
    assert main(["status", "--data", str(data), "--json"]) == 0
    [channel] = json.loads(capsys.readouterr().out)["channels"]
    assert channel["purges_pending"] == 0
