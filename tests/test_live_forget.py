"""Forget, delete and edit while the supervisor runs: words leave the files, the channel goes on."""

from __future__ import annotations

from pathlib import Path

import trio
from holding import held

from eva.core.keys import StreamId
from eva.core.settings import KIB, LiveSettings, MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.live.inputs import Delete, Edit, GetPrompt, Post, Recall
from eva.live.supervisor import open_supervisor
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

SETTINGS = MemorySettings(
    compress_at_bytes=3 * KIB,
    tail_keep_bytes=1 * KIB,
    overflow_tail_bytes=6 * KIB,
    row_high_bytes=4 * KIB,
    row_low_bytes=2 * KIB,
)
LIVE = LiveSettings(purge_delay_seconds=60, idle_seconds=3600)
STREAMS = (StreamId(5, 1), StreamId(5, 2))
PEOPLE = {11: "Ann", 22: "Bo", 33: "Cy"}


def marker(person: int, stream: StreamId, number: int) -> str:
    return f"zz{person}q{stream.channel_id}q{number:03d}zz"


def in_files(directory: Path, needles: list[str]) -> set[str]:
    """The needles the directory still holds: in its files, or in its log opened."""
    return held(directory, needles)


async def fill(supervisor: object, start_ms: int) -> dict[int, list[str]]:
    said: dict[int, list[str]] = {p: [] for p in PEOPLE}
    for number in range(90):
        for stream in STREAMS:
            person = list(PEOPLE)[number % 3]
            text = f"{marker(person, stream, number)} " + "blah " * (4 + number % 7)
            said[person].append(marker(person, stream, number))
            await supervisor.ask(  # type: ignore[attr-defined]
                stream,
                Post(
                    message_id=stream.channel_id * 1000 + number,
                    author_id=person,
                    author_name=PEOPLE[person],
                    at_ms=start_ms + number * 1000,
                    content=text,
                ),
            )
    return said


async def test_forget_while_running(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    store = EventStore(open_backend(tmp_path))
    base = 1_700_000_000_000
    async with open_supervisor(
        store,
        OfflineSummarizer(),
        SETTINGS,
        LIVE,
        wall_ms=lambda: base + int(trio.current_time() * 1000),
    ) as supervisor:
        said = await fill(supervisor, base)
        await trio.sleep(1)
        assert in_files(tmp_path, said[22]) == set(said[22])
        report = await supervisor.forget(22, guild_id=5)
        assert report.messages_erased == 60
        assert report.leftover_hits == 0
        assert report.texts_checked > 0
        assert in_files(tmp_path, said[22]) == set()
        assert in_files(tmp_path, said[11] + said[33]) == set(said[11] + said[33])
        prompt = await supervisor.ask(STREAMS[0], GetPrompt())
        assert "zz22q" not in prompt.block
        found = await supervisor.ask(STREAMS[0], Recall(query=marker(22, STREAMS[0], 1)))
        assert found.total == 0
        # The channel carries on.
        index = await supervisor.ask(
            STREAMS[0],
            Post(message_id=999_999, author_id=11, author_name="Ann", at_ms=base, content="hi"),
        )
        assert index == 90
    for stream in STREAMS:
        assert replay_stream(store, stream).ok
        meta = store.meta(stream)
        assert meta is not None
        assert meta.forgetting == []
        assert meta.stale == 0


async def test_deleted_and_edited_texts_leave_the_files(tmp_path: Path) -> None:
    # On the real clock: commits run in a worker thread, and a mock clock would jump
    # past the purge delay while one is under way.
    store = EventStore(open_backend(tmp_path))
    base = 1_700_000_000_000
    live = LiveSettings(purge_delay_seconds=0.3, idle_seconds=3600)
    async with open_supervisor(store, OfflineSummarizer(), SETTINGS, live) as supervisor:
        said = await fill(supervisor, base)
        gone = said[33][0]  # stream 1, number 2
        edited = said[11][0]  # stream 1, number 0
        assert await supervisor.ask(STREAMS[0], Delete(message_ids=(1002,), at_ms=base)) == 1
        assert await supervisor.ask(
            STREAMS[0], Edit(message_id=1000, at_ms=base, content="new words instead")
        )
        assert in_files(tmp_path, [gone, edited]) == {gone, edited}
        for _ in range(600):  # at most 30 s
            if supervisor.last_scan is not None and not in_files(tmp_path, [gone, edited]):
                break
            await trio.sleep(0.05)
        assert supervisor.last_scan is not None
        assert supervisor.last_scan.hits == 0
        assert in_files(tmp_path, [gone, edited]) == set()
        assert in_files(tmp_path, ["new words instead"]) == {"new words instead"}
        others = [m for m in said[22] if m.startswith("zz22q1")]
        assert in_files(tmp_path, others) == set(others)
    assert replay_stream(store, STREAMS[0]).ok
