"""Building memory over a real store: lines, rows, publishes, the block, zoom and recall."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import keyed
from msgspec.structs import replace

from eva.cli.cmd_import import import_bytes
from eva.core.address import Address, format_address, halves
from eva.core.events import LineWritten, MessageDeleted, MessagePosted, RowPublished
from eva.core.keys import StreamId
from eva.core.render import utf8_size
from eva.core.settings import KIB, MINUTE_MS, MemorySettings
from eva.core.summarize import LeafTask, OfflineSummarizer, Summary, Task
from eva.demo.friends import DEMO_QUERY, friends_export
from eva.memory.build import Memory
from eva.memory.view import memory_text, recall, zoom
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

SMALL = MemorySettings(
    compress_at_bytes=6 * KIB,
    tail_keep_bytes=2 * KIB,
    overflow_tail_bytes=12 * KIB,
    row_high_bytes=12 * KIB,
    row_low_bytes=6 * KIB,
    prompt_tail_max_bytes=16 * KIB,
)


def imported(tmp_path: Path, messages: int) -> tuple[EventStore, StreamId]:
    report = import_bytes(tmp_path, friends_export(messages), Path("friends.json"))
    return keyed(EventStore(open_backend(tmp_path))), StreamId(
        int(report.guild_id), int(report.channel_id)
    )


def posts_of(store: EventStore, stream: StreamId) -> list[MessagePosted]:
    return [e for _, e in store.events(stream) if isinstance(e, MessagePosted)]


def fresh_stream(tmp_path: Path, name: str) -> tuple[EventStore, StreamId]:
    return keyed(EventStore(open_backend(tmp_path / name))), StreamId(1, 2)


def rows_published(store: EventStore, stream: StreamId) -> list[RowPublished]:
    return [e for _, e in store.events(stream) if isinstance(e, RowPublished)]


def lines_written(store: EventStore, stream: StreamId) -> list[LineWritten]:
    return [e for _, e in store.events(stream) if isinstance(e, LineWritten)]


async def test_build_makes_a_row_of_short_lines_and_replays(tmp_path: Path) -> None:
    store, stream = imported(tmp_path, 800)
    report = await Memory(store, stream, OfflineSummarizer(), SMALL).build(10**13)
    meta = store.meta(stream)
    assert meta is not None
    assert report.publishes == 1
    assert report.stats.leaves_model > 0, "the demo chat has messages too long to be leaves"
    assert report.stats.merges_model > 0 and report.stats.merges_glue > 0
    lines = lines_written(store, stream)
    assert lines and all(utf8_size(line.text) <= 512 for line in lines)
    assert len({(line.start, line.size) for line in lines}) == len(lines), "a line written twice"
    row = store.published_row(stream)
    assert row is not None
    covered = 0
    for start, size in row.entries:
        assert start == covered and start % size == 0 and size & (size - 1) == 0
        covered += size
    assert covered == row.frontier == meta.row_frontier == meta.leaf_frontier
    assert meta.tail_bytes <= SMALL.tail_keep_bytes
    assert row.row_bytes <= SMALL.row_low_bytes or row.row_bytes <= SMALL.row_high_bytes
    assert replay_stream(store, stream).ok


async def test_memory_block_is_the_row_then_the_tail_word_for_word(tmp_path: Path) -> None:
    store, stream = imported(tmp_path, 500)
    await Memory(store, stream, OfflineSummarizer(), SMALL).build(10**13)
    block = memory_text(store, stream, SMALL)
    row_part, tail_part = block.split("</memory>\n")
    assert row_part.startswith("<memory>\n0+")
    meta = store.meta(stream)
    assert meta is not None
    for index in range(meta.row_frontier, meta.messages):
        message = store.message(stream, index)
        assert message is not None
        assert f"[{index}] " in tail_part
        assert message.content in tail_part
    row = store.published_row(stream)
    assert row is not None  # the row covers every message before the tail, and none after
    assert sum(size for _, size in row.entries) == meta.row_frontier
    assert max(start + size for start, size in row.entries) == meta.row_frontier


async def test_zoom_reaches_every_message_in_log2_steps(tmp_path: Path) -> None:
    store, stream = imported(tmp_path, 600)
    await Memory(store, stream, OfflineSummarizer(), SMALL).build(10**13)
    row = store.published_row(stream)
    assert row is not None
    rng = random.Random(3)
    for start, size in row.entries:
        target = rng.randrange(start, start + size)
        address = Address(start, size)
        steps = 0
        while address.size > 1:
            shown = zoom(store, stream, format_address(address), SMALL)
            assert [line.address for line in shown.lines] == [
                format_address(half) for half in halves(address)
            ]
            left, right = halves(address)
            address = left if target < right.start else right
            steps += 1
        assert steps == size.bit_length() - 1
        final = zoom(store, stream, format_address(address), SMALL)
        message = store.message(stream, target)
        assert message is not None and final.message is not None
        assert final.message.index == target
        assert message.content[:50] in final.text


async def test_zoom_errors_say_what_a_valid_address_is(tmp_path: Path) -> None:
    store, stream = imported(tmp_path, 100)
    with pytest.raises(ValueError, match="power of two"):
        zoom(store, stream, "3+3", SMALL)
    with pytest.raises(ValueError, match=r"messages 0\.\.99"):
        zoom(store, stream, "96+8", SMALL)
    with pytest.raises(ValueError, match="no line"):
        zoom(store, stream, "0+64", SMALL)


async def test_played_timeline_publishes_on_quiet_and_row_grows_only_at_its_end(
    tmp_path: Path,
) -> None:
    store, stream = imported(tmp_path, 3000)
    posts = posts_of(store, stream)
    target, target_stream = fresh_stream(tmp_path, "played")
    memory = Memory(target, target_stream, OfflineSummarizer(), SMALL)
    report = await memory.play(
        [MessagePosted(**{**_fields(p), "message_id": p.message_id}) for p in posts]
    )
    rows = rows_published(target, target_stream)
    assert len(rows) == report.publishes >= 5
    assert {row.reason for row in rows} <= {"quiet", "overflow"}
    assert "quiet" in {row.reason for row in rows}
    for older, newer in itertools.pairwise(rows):
        merged = older.row_bytes > 0 and newer.entries[: len(older.entries)] != older.entries
        if not merged:
            assert newer.entries[: len(older.entries)] == older.entries
            added = newer.entries[len(older.entries) :]
            assert all(size == 1 for _, size in added)
        assert newer.frontier > older.frontier
    assert all(row.row_bytes <= SMALL.row_high_bytes + 2 * 600 for row in rows)
    assert replay_stream(target, target_stream).ok


def _fields(post: MessagePosted) -> dict[str, object]:
    return {f: getattr(post, f) for f in post.__struct_fields__}


def chat(
    count: int, gap_ms: int, size: int = 200, start_ms: int = 1_700_000_000_000
) -> list[MessagePosted]:
    return [
        MessagePosted(
            at_ms=start_ms + i * gap_ms,
            index=i,
            message_id=10_000 + i,
            author_id=1 + i % 3,
            author_name=("Ann", "Bo", "Cy")[i % 3],
            content=f"message {i} " + "x" * size,
        )
        for i in range(count)
    ]


async def test_no_quiet_gap_publishes_on_overflow(tmp_path: Path) -> None:
    store, stream = fresh_stream(tmp_path, "busy")
    report = await Memory(store, stream, OfflineSummarizer(), SMALL).play(chat(400, 60_000))
    reasons = [row.reason for row in rows_published(store, stream)]
    assert reasons[:-1] and set(reasons[:-1]) == {"overflow"}
    assert reasons[-1] == "quiet"  # the chat ends, and then it is quiet
    assert report.tail_bytes_max <= SMALL.overflow_tail_bytes + 300


async def test_a_quiet_half_hour_publishes_at_once(tmp_path: Path) -> None:
    store, stream = fresh_stream(tmp_path, "quiet")
    first = chat(40, 10_000)  # about 9 KiB: past the 6 KiB compression mark, not overflowing
    later = chat(5, 10_000, start_ms=first[-1].at_ms + 31 * MINUTE_MS)
    later = [
        MessagePosted(**{**_fields(p), "index": 40 + i, "message_id": 20_000 + i})
        for i, p in enumerate(later)
    ]
    await Memory(store, stream, OfflineSummarizer(), SMALL).play([*first, *later])
    rows = rows_published(store, stream)
    assert rows[0].reason == "quiet"
    assert rows[0].at_ms == first[-1].at_ms + 30 * MINUTE_MS
    assert rows[0].frontier <= 40


class FailingSummarizer:
    """Raises for every request, like a model that is down."""

    calls = 0

    async def summarize(self, tasks: Sequence[Task]) -> list[Summary]:
        self.calls += 1
        raise ConnectionError("model unreachable")


class GarbageSummarizer:
    """Answers with text that may never land: empty, too long, or for another address."""

    async def summarize(self, tasks: Sequence[Task]) -> list[Summary]:
        garbage = ["", "   ", "y" * 600, "é" * 300]
        return [
            Summary(address=Address(t.address.start + 1, t.address.size), text="x", model="bad")
            if i % 5 == 4
            else Summary(address=t.address, text=garbage[i % 4], model="bad")
            for i, t in enumerate(tasks)
        ]


@pytest.mark.parametrize("summarizer", [FailingSummarizer(), GarbageSummarizer()])
async def test_a_failing_model_writes_no_bad_line_and_the_prompt_stays_bounded(
    tmp_path: Path, summarizer: FailingSummarizer | GarbageSummarizer
) -> None:
    store, stream = fresh_stream(tmp_path, type(summarizer).__name__)
    settings = MemorySettings(
        compress_at_bytes=6 * KIB,
        tail_keep_bytes=2 * KIB,
        overflow_tail_bytes=12 * KIB,
        row_high_bytes=12 * KIB,
        row_low_bytes=6 * KIB,
        prompt_tail_max_bytes=8 * KIB,
    )
    posts = chat(300, 5 * MINUTE_MS, size=600)  # every message too long to be a leaf
    await Memory(store, stream, summarizer, settings).play(posts)
    assert all(line.how != "model" for line in lines_written(store, stream))
    assert rows_published(store, stream) == []
    block = memory_text(store, stream, settings)
    tail = block.split("</memory>\n", 1)[1]
    assert utf8_size(tail) <= settings.prompt_tail_max_bytes + 200
    assert "zoom and recall reach them" in tail
    assert f"[{len(posts) - 1}] " in tail, "the newest message is always shown"
    # The model comes back: the next build finishes the work.
    report = await Memory(store, stream, OfflineSummarizer(), settings).build(10**13)
    assert report.stats.leaves_model > 0
    assert rows_published(store, stream)
    assert replay_stream(store, stream).ok


async def test_recall_finds_rare_words_and_forgets_deleted_messages(tmp_path: Path) -> None:
    store, stream = imported(tmp_path, 4000)
    view = recall(store, stream, DEMO_QUERY, SMALL)
    hits = [m.index for window in view.windows for m in window if m.hit]
    assert view.total >= 3 and hits
    for index in hits:
        message = store.message(stream, index)
        assert message is not None
        words = " ".join((message.content, *message.attachments)).lower()
        assert "durian" in words or "cheesecake" in words
    deleted = hits[0]
    message = store.message(stream, deleted)
    assert message is not None
    store.append(
        stream,
        [MessageDeleted(at_ms=1, index=deleted, message_id=message.posted.message_id)],
    )
    again = recall(store, stream, DEMO_QUERY, SMALL)
    assert deleted not in [m.index for window in again.windows for m in window]
    assert again.total == view.total - 1
    assert replay_stream(store, stream).ok


class RecordingSummarizer(OfflineSummarizer):
    """The offline summarizer, noting for each request whether it was urgent."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[bool, bool]] = []  # (urgent, holds a leaf)

    async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
        self.calls.append((urgent, any(isinstance(t, LeafTask) for t in tasks)))
        return await super().summarize(tasks)


async def test_leaves_are_urgent_and_merges_may_wait_for_batches(tmp_path: Path) -> None:
    store, stream = fresh_stream(tmp_path, "urgency")
    summarizer = RecordingSummarizer()
    long_ones = chat(40, 60_000, size=600)  # too long to be leaves: leaf tasks
    glued_by_model = chat(400, 60_000, size=300, start_ms=long_ones[-1].at_ms + 60_000)
    posts = [
        *long_ones,
        *(replace(p, index=40 + i, message_id=50_000 + i) for i, p in enumerate(glued_by_model)),
    ]
    await Memory(store, stream, summarizer, SMALL).play(posts)
    with_leaves = {urgent for urgent, leaf in summarizer.calls if leaf}
    merges_only = {urgent for urgent, leaf in summarizer.calls if not leaf}
    assert with_leaves == {True}
    assert merges_only == {False}
