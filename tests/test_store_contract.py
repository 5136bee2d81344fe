# The store contract: one suite of tests every storage backend must pass.
#
# In the eventsourcing library's manner, `StoreContract` holds the tests and
# each backend subclasses it with a way to open a fresh store; LMDB adds the
# tests only a file-backed store can pass (reopen, map growth, one
# environment per directory). Every LMDB store lives in its own tmp_path and
# is closed at the end, so the per-process backend cache never leaks between
# tests.
from __future__ import annotations

import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

from eva.core import keys
from eva.core.address import Address
from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    ForgetApplied,
    ForgetRequested,
    LineWritten,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    RowPublished,
    ToolCalled,
)
from eva.core.keys import StreamId
from eva.core.projection import INDEX_CHUNK, Rejected, indexed_upto
from eva.core.recall_index import PostingBuffer
from eva.core.recall_search import search
from eva.core.render import LINE_LIMIT_BYTES
from eva.core.slots import SLOT_BLOCK
from eva.core.state import decode_meta, encode_record
from eva.core.tables import Tables
from eva.store import lmdb_kv
from eva.store import replay as replay_module
from eva.store.event_store import READ_CHUNK, Appended, Batch, EventStore
from eva.store.memory_kv import MemoryBackend
from eva.store.replay import LogMovedError, repair_stream, replay_stream

A = StreamId(1, 10)
B = StreamId(1, 11)
C = StreamId(2, 20)


def posted(index: int, content: str = "", *, message_id: int | None = None) -> MessagePosted:
    return MessagePosted(
        at_ms=1_600_000_000_000 + index * 1000,
        index=index,
        message_id=1000 + index if message_id is None else message_id,
        author_id=7 + index % 3,
        author_name=f"user{index % 3}",
        content=content or f"message {index}",
    )


def line(start: int, size: int, text: str = "a line") -> LineWritten:
    return LineWritten(at_ms=5, start=start, size=size, text=text, first_ms=1, last_ms=2)


def tree(messages: int) -> list[LineWritten]:
    """Every line over `messages` messages, each after its halves: leaves first, then up."""
    lines = []
    size = 1
    while size <= messages:
        lines += [line(start, size) for start in range(0, messages - size + 1, size)]
        size *= 2
    return lines


def row(entries: tuple[tuple[int, int], ...], frontier: int) -> RowPublished:
    return RowPublished(at_ms=9, entries=entries, frontier=frontier)


def assert_replays(store: EventStore) -> None:
    for meta in store.streams():
        result = replay_stream(store, StreamId(meta.guild_id, meta.channel_id))
        assert result.ok, result
        assert result.events == meta.position


class StoreContract:
    """The tests every backend passes; subclasses provide `store`."""

    @pytest.fixture
    def store(self) -> Iterator[EventStore]:
        raise NotImplementedError

    def test_append_numbers_from_zero_without_gap(self, store: EventStore) -> None:
        first = store.append(A, [posted(0), posted(1)])
        second = store.append(A, [posted(2)])
        third = store.append(A, [ToolCalled(at_ms=1, name="zoom"), posted(3), posted(4)])
        assert first == Appended(A, 0, 2)
        assert second == Appended(A, 2, 1)
        assert third == Appended(A, 3, 3)
        assert [seq for seq, _ in store.events(A)] == list(range(6))
        meta = store.meta(A)
        assert meta is not None
        assert (meta.position, meta.messages) == (6, 5)

    def test_each_append_carries_the_record_as_its_batch_left_it(self, store: EventStore) -> None:
        first, second, other = store.append_many(
            [Batch(A, [posted(0), posted(1)]), Batch(A, [posted(2)]), Batch(B, [posted(0)])]
        )
        assert isinstance(first, Appended) and isinstance(second, Appended)
        assert isinstance(other, Appended)
        records = [decode_meta(r.meta) for r in (first, second, other) if r.meta is not None]
        assert [(m.channel_id, m.position, m.messages) for m in records] == [
            (A.channel_id, 2, 2),
            (A.channel_id, 3, 3),
            (B.channel_id, 1, 1),
        ]
        assert records[1] == store.meta(A), "the last batch's record is the one stored"
        assert records[2] == store.meta(B)

    def test_events_read_back_equal(self, store: EventStore) -> None:
        events: list[AnyEvent] = [
            ChannelDescribed(at_ms=1, guild_id=1, channel_id=10, channel_name="general"),
            posted(0, "héllo ✨"),
            MessageEdited(at_ms=3, index=0, message_id=1000, content="edited", attachments=("a",)),
            line(0, 1),
            row(((0, 1),), 1),
            ToolCalled(at_ms=4, name="recall", arguments='{"q": "x"}', result_bytes=12),
        ]
        store.append(A, events)
        assert [event for _, event in store.events(A)] == events
        assert store.event(A, 2) == events[2]
        assert store.event(A, 6) is None
        assert [seq for seq, _ in store.events(A, 2, 4)] == [2, 3]

    def test_unknown_stream_reads_empty(self, store: EventStore) -> None:
        assert list(store.events(A)) == []
        assert store.meta(A) is None
        assert store.message(A, 0) is None
        assert store.published_row(A) is None
        assert store.streams() == []

    def test_empty_batch_keeps_nothing(self, store: EventStore) -> None:
        assert store.append(A, []) == Appended(A, 0, 0)
        assert store.streams() == []
        assert_replays(store)

    def test_append_many_lands_every_stream(self, store: EventStore) -> None:
        store.append(B, [posted(0)])
        results = store.append_many(
            [Batch(A, [posted(0), posted(1)]), Batch(B, [posted(1)]), Batch(C, [posted(0)])]
        )
        assert results == [Appended(A, 0, 2), Appended(B, 1, 1), Appended(C, 0, 1)]
        assert [m.position for m in store.streams()] == [2, 2, 1]
        assert_replays(store)

    def test_two_batches_of_one_stream_in_one_call(self, store: EventStore) -> None:
        results = store.append_many([Batch(A, [posted(0)]), Batch(A, [posted(1), posted(2)])])
        assert results == [Appended(A, 0, 1), Appended(A, 1, 2)]
        assert [e.index for _, e in store.events(A) if isinstance(e, MessagePosted)] == [0, 1, 2]

    @pytest.mark.parametrize(
        ("bad", "reason"),
        [
            ([posted(0), posted(2)], "index"),
            ([posted(0), posted(1, message_id=1000)], "already stored"),
            ([posted(0), posted(1, message_id=-1)], "out of range"),
            ([MessageEdited(at_ms=1, index=0, message_id=999, content="x")], "no message"),
            ([MessageEdited(at_ms=1, index=-1, message_id=1000, content="x")], "no message"),
            ([MessageEdited(at_ms=1, index=5, message_id=1005, content="x")], "no message"),
            ([MessageDeleted(at_ms=1, index=2**64 - 1, message_id=1000)], "no message"),
            ([posted(0), line(0, 3)], "bad line address"),
            ([posted(0), posted(1), line(1, 2)], "bad line address"),
            ([posted(0), line(-1, 1)], "bad line address"),
            ([posted(0), line(0, 0)], "bad line address"),
            ([posted(0), line(0, 2)], "passes the last message"),
            ([posted(0), line(0, 1, "x" * (LINE_LIMIT_BYTES + 1))], "over 512 bytes"),
            ([posted(0), line(0, 1, "é" * (LINE_LIMIT_BYTES // 2) + "x")], "over 512 bytes"),
            ([posted(0), posted(1), line(0, 2)], "before its halves"),
            ([posted(0), posted(1), line(0, 1), line(0, 2)], "before its halves"),
            ([posted(0), posted(1), *tree(2), row(((0, 1), (2, 1)), 2)], "does not continue"),
            ([posted(0), posted(1), *tree(2), row(((1, 1),), 1)], "does not continue"),
            ([posted(0), posted(1), *tree(2), row(((1, 2),), 2)], "does not continue"),
            ([posted(0), posted(1), *tree(2), row(((0, 1), (1, 2)), 3)], "does not continue"),
            ([posted(0), posted(1), *tree(2), row(((0, 2),), 1)], "frontier"),
            ([posted(0), posted(1), *tree(2), row(((0, 1),), 2)], "frontier"),
            ([posted(0), posted(1), line(0, 1), row(((0, 1), (1, 1)), 2)], "has no line"),
            ([posted(0), posted(1), *tree(2)[:2], row(((0, 2),), 2)], "has no line"),
        ],
    )
    def test_batch_that_does_not_fit_is_refused_alone(
        self, store: EventStore, bad: list[AnyEvent], reason: str
    ) -> None:
        store.append(B, [posted(0)])
        before = list(store.events(B))
        results = store.append_many(
            [Batch(A, [ToolCalled(at_ms=1, name="first"), *bad]), Batch(B, [posted(1)])]
        )
        refused, landed = results
        assert isinstance(refused, Rejected)
        assert reason in str(refused)
        assert landed == Appended(B, 1, 1)
        assert list(store.events(A)) == []
        assert store.meta(A) is None
        assert store.message(A, 0) is None
        assert store.index_of(A, 1000) is None
        assert list(store.events(B)) == [*before, (1, posted(1))]
        assert_replays(store)
        with pytest.raises(Rejected, match=reason):
            store.append(A, [ToolCalled(at_ms=1, name="first"), *bad])

    def test_refused_batch_in_a_known_stream_leaves_it_as_it_was(self, store: EventStore) -> None:
        store.append(A, [posted(0), posted(1), line(0, 1)])
        before_events = list(store.events(A))
        before_meta = store.meta(A)
        results = store.append_many(
            [
                Batch(
                    A, [posted(2), MessageDeleted(at_ms=1, index=2, message_id=1002), line(0, 8)]
                ),
                Batch(C, [posted(0)]),
                Batch(A, [posted(2, "kept")]),
            ]
        )
        assert isinstance(results[0], Rejected)
        assert results[1:] == [Appended(C, 0, 1), Appended(A, 3, 1)]
        assert list(store.events(A)) == [*before_events, (3, posted(2, "kept"))]
        meta = store.meta(A)
        assert before_meta is not None
        assert meta is not None
        assert (meta.position, meta.messages, meta.deleted) == (4, 3, 0)
        message = store.message(A, 2)
        assert message is not None
        assert (message.content, message.deleted) == ("kept", False)
        assert_replays(store)

    def test_every_batch_refused(self, store: EventStore) -> None:
        results = store.append_many([Batch(A, [posted(1)]), Batch(B, [line(0, 1)])])
        assert all(isinstance(result, Rejected) for result in results)
        assert store.streams() == []

    def test_message_by_index_and_by_discord_id(self, store: EventStore) -> None:
        store.append(A, [posted(i) for i in range(5)])
        store.append(B, [posted(0, "other channel", message_id=1003)])
        assert store.index_of(A, 1003) == 3
        assert store.index_of(B, 1003) == 0
        assert store.index_of(A, 99) is None
        message = store.message(A, 3)
        assert message is not None
        assert message.posted == posted(3)
        assert (message.content, message.edited_at_ms, message.deleted) == (
            "message 3",
            None,
            False,
        )
        assert store.message(A, 5) is None

    def test_the_ids_of_new_messages_go_to_the_end_of_their_table(self, store: EventStore) -> None:
        # Discord's ids grow with time across channels: posts to many channels, in the
        # order they were made, go to the end of the id table one after the other
        # (not to one place per channel), and each is still found in its own channel.
        streams = [StreamId(3, 30 + n) for n in range(5)]
        made = []
        for index in range(3):
            for n, stream in enumerate(streams):
                message_id = 5000 + index * 10 + n
                store.append(stream, [posted(index, message_id=message_id)])
                made.append(message_id)
        with store.backend.reading() as tables:
            held = [
                keys.decode_u64(key[:8]) for key, _ in tables.scan("discord_ids", b"", b"\xff" * 25)
            ]
        assert held == made
        assert [store.index_of(stream, 5020 + n) for n, stream in enumerate(streams)] == [2] * 5
        assert store.index_of(streams[0], 5021) is None
        assert_replays(store)

    def test_replay_finds_and_repair_mends_a_lost_discord_id(self, store: EventStore) -> None:
        # A channel's ids do not sit together in their table; replay still finds one that
        # went missing, and only in its own channel, and repair puts it back.
        store.append(A, [posted(i) for i in range(4)])
        store.append(B, [posted(0, message_id=1002)])  # the same id in another channel
        store.backend.write(
            lambda tables: tables.delete("discord_ids", keys.discord_id_key(A, 1002))
        )
        damaged = replay_stream(store, A)
        assert not damaged.ok and damaged.differing == ("discord_ids",)
        assert replay_stream(store, B).ok
        assert repair_stream(store, A).rewritten == ("discord_ids",)
        assert store.index_of(A, 1002) == 2 and store.index_of(B, 1002) == 0
        assert_replays(store)

    def test_meta_and_indexes_read_together(self, store: EventStore) -> None:
        assert store.meta_and_indexes(A, [1000]) == (None, [None])
        store.append(A, [posted(i) for i in range(3)])
        meta, indexes = store.meta_and_indexes(A, [1002, 99, 1000, 1002])
        assert meta == store.meta(A)
        assert meta is not None and meta.messages == 3
        assert indexes == [2, None, 0, 2]

    def test_edit_shows_new_text(self, store: EventStore) -> None:
        store.append(A, [posted(0, "first"), posted(1)])
        store.append(A, [MessageEdited(at_ms=77, index=0, message_id=1000, content="second")])
        store.append(
            A,
            [
                MessageEdited(
                    at_ms=88, index=0, message_id=1000, content="third", attachments=("f",)
                )
            ],
        )
        message = store.message(A, 0)
        assert message is not None
        assert (message.content, message.attachments, message.edited_at_ms) == ("third", ("f",), 88)
        assert message.posted.content == "first"
        untouched = store.message(A, 1)
        assert untouched is not None
        assert untouched.edited_at_ms is None
        assert_replays(store)

    def test_delete_marks_slot_and_keeps_index(self, store: EventStore) -> None:
        store.append(A, [posted(0), posted(1)])
        store.append(A, [MessageDeleted(at_ms=5, index=0, message_id=1000)])
        store.append(A, [MessageDeleted(at_ms=6, index=0, message_id=1000)])  # twice is harmless
        store.append(A, [posted(2)])
        gone = store.message(A, 0)
        assert gone is not None
        assert gone.deleted
        assert store.index_of(A, 1000) == 0
        kept = store.message(A, 2)
        assert kept is not None
        assert not kept.deleted
        meta = store.meta(A)
        assert meta is not None
        assert (meta.messages, meta.deleted) == (3, 1)
        with pytest.raises(Rejected, match="deleted"):
            store.append(A, [MessageEdited(at_ms=7, index=0, message_id=1000, content="x")])
        assert_replays(store)

    def test_slots_of_a_whole_block_are_in_the_table_and_the_rest_in_the_record(
        self, store: EventStore
    ) -> None:
        # The same 37 posts to A in uneven batches and to B one by one: where each
        # slot is kept depends on the messages alone, and every message reads the same.
        sizes = [1, 5, 16, 3, 12]
        start = 0
        for size in sizes:
            store.append(A, [posted(i) for i in range(start, start + size)])
            start += size
        for i in range(37):
            store.append(B, [posted(i)])

        def kept(stream: StreamId) -> tuple[list[int], int]:
            prefix = keys.stream_prefix(stream)
            with store.backend.reading() as tables:
                held = tables.scan("messages", prefix, keys.prefix_end(prefix))
                in_table = [keys.seq_of(key) for key, _ in held]
            meta = store.meta(stream)
            assert meta is not None
            return in_table, len(meta.open_slots)

        assert kept(A) == kept(B) == (list(range(SLOT_BLOCK * 2)), 37 - SLOT_BLOCK * 2)
        texts = [message.content for _, message in store.messages(A, 0, 37)]
        assert texts == [f"message {i}" for i in range(37)]
        assert [i for i, _ in store.messages(A, 30, 40)] == list(range(30, 37))
        assert store.message(A, 36) is not None and store.message(A, 37) is None

        # An edit and a deletion change a slot where it is kept, in the table or the record.
        for index in (3, 33):
            store.append(
                A, [MessageEdited(at_ms=9, index=index, message_id=1000 + index, content="new")]
            )
        for index in (4, 34):
            store.append(A, [MessageDeleted(at_ms=9, index=index, message_id=1000 + index)])
        assert kept(A) == (list(range(SLOT_BLOCK * 2)), 37 - SLOT_BLOCK * 2)
        changed = {i: m for i, m in store.messages(A, 0, 37) if m.content == "new" or m.deleted}
        assert {i: (m.content, m.deleted) for i, m in changed.items()} == {
            3: ("new", False),
            4: ("message 4", True),
            33: ("new", False),
            34: ("message 34", True),
        }
        with pytest.raises(Rejected, match="deleted"):
            store.append(A, [MessageEdited(at_ms=9, index=34, message_id=1034, content="x")])
        store.append(A, [posted(i) for i in range(37, 48)])  # fills the third block
        assert kept(A) == (list(range(SLOT_BLOCK * 3)), 0)
        message = store.message(A, 34)
        assert message is not None and message.deleted
        assert_replays(store)

    def test_lines_by_address(self, store: EventStore) -> None:
        store.append(A, [posted(i) for i in range(4)])
        store.append(A, [line(0, 1, "leaf 0"), line(1, 1, "leaf 1"), line(0, 2, "pair")])
        store.append(A, [line(2, 1), line(3, 1), line(2, 2), line(0, 4)])
        store.append(A, [line(0, 2, "pair again")])  # a line made again replaces the old one
        first = store.line(A, 0, 1)
        assert first is not None
        assert first.text == "leaf 0"
        pair = store.line(A, 0, 2)
        assert pair is not None
        assert pair.text == "pair again"
        assert store.line(A, 2, 2) == line(2, 2)
        assert store.line(A, 0, 8) is None
        assert store.line(A, 4, 1) is None
        assert store.line(B, 0, 1) is None
        meta = store.meta(A)
        assert meta is not None
        assert meta.lines == 8
        assert_replays(store)

    def test_lines_of_one_level_in_a_range(self, store: EventStore) -> None:
        store.append(A, [posted(i) for i in range(6)])
        store.append(A, [line(0, 1, "leaf 0"), line(1, 1), line(0, 2), line(3, 1, "leaf 3")])
        store.append(B, [posted(i) for i in range(3)])
        store.append(B, [line(1, 1, "leaf of B")])
        leaves = store.lines_of_level(A, 1, 1, 5)
        assert {address: found.text for address, found in leaves.items()} == {
            Address(1, 1): "a line",
            Address(3, 1): "leaf 3",
        }
        assert store.lines_of_level(A, 2, 0, 4) == {Address(0, 2): line(0, 2)}
        assert store.lines_of_level(A, 1, 4, 6) == {}
        assert store.lines_of_level(A, 1, 3, 3) == {}
        assert list(store.lines_of_level(B, 1, 0, 3)) == [Address(1, 1)]

    def test_line_at_the_limit_fits(self, store: EventStore) -> None:
        text = "é" * (LINE_LIMIT_BYTES // 2)
        store.append(A, [posted(0), line(0, 1, text)])
        stored = store.line(A, 0, 1)
        assert stored is not None
        assert stored.text == text

    def test_published_row(self, store: EventStore) -> None:
        store.append(A, [posted(i) for i in range(6)])
        store.append(A, tree(6))
        assert store.published_row(A) is None
        store.append(A, [row(((0, 4), (4, 1)), 5), ToolCalled(at_ms=1, name="zoom")])
        store.append(A, [row((), 0)])
        store.append(A, [row(((0, 4), (4, 2)), 6), ToolCalled(at_ms=1, name="zoom")])
        assert store.published_row(A) == row(((0, 4), (4, 2)), 6)
        meta = store.meta(A)
        assert meta is not None
        assert meta.row_seq == 6 + len(tree(6)) + 3
        assert_replays(store)

    def test_channel_described(self, store: EventStore) -> None:
        store.append(
            A,
            [
                ChannelDescribed(
                    at_ms=1,
                    guild_id=1,
                    channel_id=10,
                    guild_name="g",
                    channel_name="general",
                    time_zone="Europe/Paris",
                )
            ],
        )
        meta = store.meta(A)
        assert meta is not None
        assert (meta.guild_name, meta.channel_name, meta.time_zone) == (
            "g",
            "general",
            "Europe/Paris",
        )

    def test_streams_listing(self, store: EventStore) -> None:
        for stream in (C, A, B):
            store.append(stream, [posted(0)])
        listed = [(m.guild_id, m.channel_id) for m in store.streams()]
        assert listed == [tuple(A), tuple(B), tuple(C)]
        big = StreamId(keys.MAX_U64, keys.MAX_U64)
        store.append(big, [posted(0)])
        assert [StreamId(m.guild_id, m.channel_id) for m in store.streams()][-1] == big
        assert next(iter(store.events(C)))[1] == posted(0)

    def test_tables_scan_a_range_and_put_many(self, store: EventStore) -> None:
        stored = [b"a1", b"a2", b"b1", b"b2", b"c"]
        store.backend.write(
            lambda tables: tables.put_many("ready", [(key, key + b"!") for key in stored])
        )
        ranges = [(b"a", b"b"), (b"b", b"c"), (b"b", b"d"), (b"", b"\xff"), (b"d", b"e")]
        ranges += [(b"a2", b"b2"), (b"0", b"a"), (b"b1", b"b1")]
        with store.backend.reading() as tables:
            for start, stop in ranges:
                wanted = [(key, key + b"!") for key in stored if start <= key < stop]
                assert list(tables.scan("ready", start, stop)) == wanted

    def test_tables_tell_whether_they_hold_any_of_some_keys(self, store: EventStore) -> None:
        def staged(tables: Tables) -> list[bool]:
            tables.put("ready", b"new", b"")
            tables.delete("ready", b"gone")
            return [
                tables.holds_any("ready", [b"x", b"new"]),
                tables.holds_any("ready", [b"gone"]),
                tables.holds_any("ready", iter([b"kept", b"y"])),
                tables.holds_any("ready", []),
                tables.holds_any("lines", [b"kept"]),  # another table
            ]

        stored = [(b"gone", b""), (b"kept", b"")]
        store.backend.write(lambda tables: tables.put_many("ready", stored))
        assert store.backend.write(staged) == [True, False, True, False, False]
        with store.backend.reading() as tables:
            assert tables.holds_any("ready", [b"a", b"new", b"b"])
            assert not tables.holds_any("ready", [b"gone", b"kep", b"kept!"])

    def test_reads_in_chunks(self, store: EventStore) -> None:
        count = READ_CHUNK * 2 + 17
        tools = [ToolCalled(at_ms=i, name="t") for i in range(count)]
        store.append(A, tools[: READ_CHUNK + 3])
        store.append(A, tools[READ_CHUNK + 3 :])
        store.append(B, [posted(0)])  # the next stream must not leak into A's reads
        read = list(store.events(A))
        assert [seq for seq, _ in read] == list(range(count))
        assert [event for _, event in read] == tools
        assert [seq for seq, _ in store.events(A, READ_CHUNK - 1)] == list(
            range(READ_CHUNK - 1, count)
        )
        assert len(list(store.raw_events(A, 5, READ_CHUNK * 2 + 5))) == READ_CHUNK * 2
        assert_replays(store)

    def test_repair_writes_the_rebuild_over_what_differs_and_nothing_else(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store.append(A, [posted(i, f"word{i} common") for i in range(40)])
        store.append(B, [posted(i) for i in range(3)])
        assert repair_stream(store, A).rewritten == ()
        prefix = keys.stream_prefix(A)
        with store.backend.reading() as tables:
            [(slot_key, _), *_] = tables.scan("messages", prefix, keys.prefix_end(prefix))
            b_rows = list(tables.scan("messages", keys.stream_prefix(B), b"\xff" * 17))

        def damage(tables: Tables) -> None:
            tables.delete("messages", slot_key)
            tables.put("ready", prefix + b"stray", b"")

        store.backend.write(damage)
        assert not replay_stream(store, A).ok
        repaired = repair_stream(store, A)
        assert repaired.rewritten == ("messages", "ready") and repaired.events == 40
        assert_replays(store)
        with store.backend.reading() as tables:
            assert list(tables.scan("messages", keys.stream_prefix(B), b"\xff" * 17)) == b_rows

        # Events appended after the rebuild read the log: nothing is written.
        store.backend.write(damage)
        rebuild = replay_module.rebuild

        def rebuild_then_append(*args: Any, **kwargs: Any) -> Any:
            rebuilt = rebuild(*args, **kwargs)
            store.append(A, [posted(40)])
            return rebuilt

        monkeypatch.setattr(replay_module, "rebuild", rebuild_then_append)
        with pytest.raises(LogMovedError):
            repair_stream(store, A)
        with store.backend.reading() as tables:
            assert tables.get("messages", slot_key) is None

    def test_a_long_streams_repair_is_rewritten_in_pieces_and_finished_when_cut_short(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # As for a channel of millions of events: rebuilt on disk, rewritten a few at a time.
        monkeypatch.setattr(replay_module, "MEMORY_REBUILD_EVENTS", 10)
        monkeypatch.setattr(replay_module, "REWRITE_ROWS", 3)
        store.append(A, [posted(i, f"word{i} common") for i in range(40)])
        store.append(B, [posted(i) for i in range(3)])
        prefix = keys.stream_prefix(A)
        with store.backend.reading() as tables:
            slots = list(tables.scan("messages", prefix, keys.prefix_end(prefix)))

        def damage(tables: Tables) -> None:
            for key, _ in slots[:7]:
                tables.delete("messages", key)
            tables.delete("discord_ids", keys.discord_id_key(A, 1005))
            tables.put("ready", prefix + b"stray", b"")

        store.backend.write(damage)
        write = store.backend.write
        writes = 0

        def cut_short(work: Any) -> Any:
            nonlocal writes
            writes += 1
            if writes == 4:
                raise OSError("killed")
            return write(work)

        monkeypatch.setattr(store.backend, "write", cut_short)
        with pytest.raises(OSError, match="killed"):
            repair_stream(store, A)
        monkeypatch.setattr(store.backend, "write", write)
        assert not replay_stream(store, A).ok  # part rewritten
        repaired = repair_stream(store, A)
        assert set(repaired.rewritten) <= {"messages", "discord_ids", "ready"}
        assert repaired.events == 40
        assert_replays(store)
        assert store.index_of(A, 1005) == 5

    def test_a_full_scratch_disk_is_named_as_the_scratch_not_the_data(
        self, store: EventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(replay_module, "MEMORY_REBUILD_EVENTS", 10)
        store.append(A, [posted(i) for i in range(20)])

        def refused(self: object, work: object) -> None:
            raise lmdb.Error("mdb_txn_commit: No space left on device")

        monkeypatch.setattr(replay_module._Scratch, "write", refused)
        with pytest.raises(OSError, match=r"scratch copy .* Set TMPDIR"):
            replay_stream(store, A)
        with pytest.raises(OSError, match="scratch copy"):
            repair_stream(store, A)
        monkeypatch.undo()
        assert replay_stream(store, A).ok

    def test_recall_indexes_messages_in_whole_chunks_with_their_text_then(
        self, store: EventStore
    ) -> None:
        def indexed(query: str) -> list[int]:
            with store.backend.reading() as tables:
                return sorted(index for index, _ in search(tables, A, query, 1000).hits)

        def postings() -> list[bytes]:
            prefix = keys.stream_prefix(A)
            with store.backend.reading() as tables:
                return [key for key, _ in tables.scan("postings", prefix, keys.prefix_end(prefix))]

        # Where A's first chunk ends; the next one is INDEX_CHUNK long.
        first = next(m for m in range(1, INDEX_CHUNK + 1) if indexed_upto(A, m) == m)
        second = first + INDEX_CHUNK
        assert indexed_upto(A, second - 1) == first
        store.append(A, [posted(i, f"word{i} common") for i in range(second - 1)])
        assert indexed("common") == list(range(first))
        # Edited and deleted before their chunk fills: indexed as they read then.
        edited, deleted, later = first + 3, first + 4, first + 5
        store.append(
            A, [MessageEdited(at_ms=5, index=edited, message_id=1000 + edited, content="fresh")]
        )
        store.append(A, [MessageDeleted(at_ms=6, index=deleted, message_id=1000 + deleted)])
        assert indexed("fresh") == [], "an open chunk is not in the index"
        store.append(A, [posted(second - 1, "last common")])
        assert indexed("common") == [i for i in range(second) if i not in (edited, deleted)]
        assert indexed("fresh") == [edited]
        assert indexed(f"word{edited}") == indexed(f"word{deleted}") == []
        # Once indexed, an edit changes the index at once.
        store.append(
            A, [MessageEdited(at_ms=7, index=later, message_id=1000 + later, content="later")]
        )
        assert indexed("later") == [later] and indexed(f"word{later}") == []
        store.append(A, [posted(second, "next chunk")])
        assert indexed("next") == [], "the next chunk waits until it fills"
        assert_replays(store)


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> Iterator[EventStore]:
        return EventStore(MemoryBackend())


class TestLmdbStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventStore]:
        backend = lmdb_kv.open_backend(tmp_path / "data")
        yield EventStore(backend)
        backend.close()

    def test_what_a_store_knows_of_lines_gives_way_to_another_writer(
        self, store: EventStore, tmp_path: Path
    ) -> None:
        # The store remembers which lines exist across its commits; a commit made by
        # another writer in between (here another store over the same directory, and a
        # write straight to the backend) must make it look again.
        other = EventStore(store.backend)
        store.append(A, [posted(i) for i in range(4)])
        store.append(A, [line(0, 1)])  # looks up its sibling 1+1: absent
        other.append(A, [line(1, 1)])
        store.append(A, [line(0, 2)])  # its halves exist now
        store.append(A, [line(2, 1)])  # looks up 3+1: absent
        store.backend.write(lambda tables: None)  # a commit that writes nothing
        other.append(A, [line(3, 1)])
        store.backend.write(lambda tables: None)
        store.append(A, [line(2, 2), line(0, 4)])
        meta = store.meta(A)
        assert meta is not None and meta.lines == 7 and meta.ready == 0
        with pytest.raises(Rejected):  # and it still refuses a line before its halves
            store.append(A, [line(4, 4)])
        assert_replays(store)

    def test_what_a_store_knows_of_stream_records_gives_way_to_another_writer(
        self, store: EventStore
    ) -> None:
        # The store starts each batch from the record its last commit left; another
        # writer's commit in between, or a refused batch, must not leave it behind.
        other = EventStore(store.backend)
        store.append(A, [posted(0), posted(1)])
        other.append(A, [posted(2)])
        assert store.append(A, [posted(3)]) == Appended(A, 3, 1)
        results = store.append_many([Batch(A, [posted(4), line(0, 8)]), Batch(B, [posted(0)])])
        assert isinstance(results[0], Rejected)
        assert store.append(A, [posted(4)]) == Appended(A, 4, 1)
        stored_b = store.meta(B)
        assert stored_b is not None
        renamed = msgspec.structs.replace(stored_b, channel_name="renamed")
        store.backend.write(
            lambda tables: tables.put("streams", keys.stream_prefix(B), encode_record(renamed))
        )
        assert store.append(B, [ToolCalled(at_ms=2, name="look")]) == Appended(B, 1, 1)
        meta_a, meta_b = store.meta(A), store.meta(B)
        assert meta_a is not None and (meta_a.position, meta_a.messages) == (5, 5)
        assert meta_b is not None and (meta_b.position, meta_b.channel_name) == (2, "renamed")

    def test_ids_kept_by_channel_first_are_rekeyed_once_at_open(self, tmp_path: Path) -> None:
        # A data directory written while `discord_ids` keys started with the channel:
        # opening it rewrites them, once, and nothing about the messages changes.
        path = tmp_path / "older"
        backend = lmdb_kv.open_backend(path)
        store = EventStore(backend)
        store.append(A, [posted(i) for i in range(3)])
        store.append(B, [posted(0, message_id=1001)])  # A's message 1 has the same id

        def as_written_before(tables: Tables) -> None:
            rows = list(tables.scan("discord_ids", b"", b"\xff" * 25))
            for key, _ in rows:
                tables.delete("discord_ids", key)
            for key, value in rows:
                message_id, guild, channel = struct.unpack(">QQQ", key)
                tables.put("discord_ids", struct.pack(">QQQ", guild, channel, message_id), value)
            tables.delete("layout", keys.DISCORD_IDS_BY_MESSAGE)

        backend.write(as_written_before)
        events = list(store.events(A))
        backend.close()

        reopened = lmdb_kv.open_backend(path)
        again = EventStore(reopened)
        assert [again.index_of(A, 1000 + i) for i in range(3)] == [0, 1, 2]
        assert again.index_of(B, 1001) == 0
        assert list(again.events(A)) == events
        assert_replays(again)
        with pytest.raises(Rejected, match="already stored"):
            again.append(A, [posted(3, message_id=1002)])
        with reopened.reading() as tables:
            rekeyed = list(tables.scan("discord_ids", b"", b"\xff" * 25))
        reopened.close()
        once_more = lmdb_kv.open_backend(path)
        with once_more.reading() as tables:
            assert list(tables.scan("discord_ids", b"", b"\xff" * 25)) == rekeyed
        once_more.close()

    def test_slots_kept_all_in_the_table_move_to_the_record_once_at_open(
        self, tmp_path: Path
    ) -> None:
        # A data directory written while every slot was kept in `messages`: opening it
        # moves the slots past each stream's last whole block into its record, once.
        path = tmp_path / "older"
        backend = lmdb_kv.open_backend(path)
        store = EventStore(backend)
        store.append(A, [posted(i) for i in range(SLOT_BLOCK + 3)])
        store.append(A, [MessageDeleted(at_ms=9, index=SLOT_BLOCK + 1, message_id=1017)])
        store.append(B, [posted(i) for i in range(SLOT_BLOCK)])
        store.append(C, [posted(0)])

        def as_written_before(tables: Tables) -> None:
            for key, data in list(tables.scan("streams", b"", b"\xff" * 17)):
                meta = decode_meta(data)
                stream = keys.stream_of(key)
                first = meta.messages - len(meta.open_slots)
                for offset, slot in enumerate(meta.open_slots):
                    tables.put(
                        "messages", keys.message_key(stream, first + offset), encode_record(slot)
                    )
                meta.open_slots = []
                tables.put("streams", key, encode_record(meta))
            tables.delete("layout", keys.MESSAGE_SLOTS_IN_BLOCKS)

        backend.write(as_written_before)
        before = {s: store.messages(s, 0, 100) for s in (A, B, C)}
        backend.close()

        reopened = lmdb_kv.open_backend(path)
        again = EventStore(reopened)
        assert {s: again.messages(s, 0, 100) for s in (A, B, C)} == before
        opened = {s: again.meta(s) for s in (A, B, C)}
        assert {s: len(m.open_slots) for s, m in opened.items() if m is not None} == {
            A: 3,
            B: 0,
            C: 1,
        }
        assert_replays(again)
        again.append(A, [posted(i) for i in range(SLOT_BLOCK + 3, SLOT_BLOCK * 2)])
        assert [i for i, _ in again.messages(A, 0, 100)] == list(range(SLOT_BLOCK * 2))
        assert_replays(again)
        record = again.meta(A)
        reopened.close()
        once_more = EventStore(lmdb_kv.open_backend(path))
        assert once_more.meta(A) == record
        once_more.backend.close()

    def test_records_written_before_they_kept_forgotten_people_learn_them_once_at_open(
        self, tmp_path: Path
    ) -> None:
        # A data directory whose records predate StreamMeta.forgotten: opening it reads the
        # tombstones off each log into its record, as a replay would, once.
        path = tmp_path / "older"
        backend = lmdb_kv.open_backend(path)
        store = EventStore(backend)
        store.append(A, [posted(i) for i in range(3)])
        store.append(
            A,
            [
                ForgetRequested(at_ms=50, person_hash="p1"),
                ForgetApplied(at_ms=51, person_hash="p1"),
                ForgetRequested(at_ms=70, person_hash="p2"),
            ],
        )
        store.append(B, [posted(0)])
        written = {s: store.meta(s) for s in (A, B)}
        assert written[A] is not None and written[A].forgotten == {"p1": 50, "p2": 70}

        def as_written_before(tables: Tables) -> None:
            for key, data in list(tables.scan("streams", b"", b"\xff" * 17)):
                meta = decode_meta(data)
                meta.forgotten = {}
                tables.put("streams", key, encode_record(meta))
            tables.delete("layout", keys.FORGOTTEN_IN_RECORDS)

        backend.write(as_written_before)
        assert store.meta(A).forgotten == {}  # type: ignore[union-attr]
        backend.close()
        reopened = EventStore(lmdb_kv.open_backend(path))
        assert {s: reopened.meta(s) for s in (A, B)} == written
        assert_replays(reopened)
        reopened.backend.close()

    def test_an_index_written_before_it_held_authors_is_built_again_once_at_open(
        self, tmp_path: Path
    ) -> None:
        # A data directory whose recall index holds each message's text alone: opening it
        # indexes every message again with its author's name words, as a replay would.
        path = tmp_path / "older"
        backend = lmdb_kv.open_backend(path)
        store = EventStore(backend)
        messages = 2 * INDEX_CHUNK + 7
        store.append(A, [posted(i, f"word{i % 5} text") for i in range(messages)])
        store.append(A, [MessageEdited(at_ms=9, index=3, message_id=1003, content="edited")])
        store.append(A, [MessageDeleted(at_ms=9, index=4, message_id=1004)])
        mark = b"0by0user1"

        def user1(tables: Tables) -> list[int]:
            return [index for index, _ in search(tables, A, [mark], 10_000).hits]

        def read_user1(store: EventStore) -> list[int]:
            with store.backend.reading() as tables:
                return user1(tables)

        expected = read_user1(store)
        assert sorted(expected) == [i for i in range(1, indexed_upto(A, messages), 3) if i != 4]

        def as_indexed_before(tables: Tables) -> None:
            prefix = keys.stream_prefix(A)
            for key, _ in list(tables.scan("postings", prefix, keys.prefix_end(prefix))):
                tables.delete("postings", key)
            buffer = PostingBuffer()
            for index in range(indexed_upto(A, messages)):
                if index != 4:
                    buffer.add(A, index, "edited" if index == 3 else f"word{index % 5} text")
            buffer.flush(tables)
            tables.delete("layout", keys.AUTHORS_INDEXED)

        backend.write(as_indexed_before)
        assert read_user1(store) == []
        backend.close()
        reopened = EventStore(lmdb_kv.open_backend(path))
        assert read_user1(reopened) == expected
        assert_replays(reopened)
        reopened.backend.close()

    def test_an_index_keyed_by_term_first_is_keyed_by_bucket_once_opened(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "older"
        backend = lmdb_kv.open_backend(path)
        store = EventStore(backend)
        messages = 3 * INDEX_CHUNK
        store.append(A, [posted(i, f"word{i % 5} text x{i}") for i in range(messages)])

        def found(store: EventStore, query: str) -> list[int]:
            with store.backend.reading() as tables:
                return sorted(index for index, _ in search(tables, A, query, 10_000).hits)

        expected = {query: found(store, query) for query in ("word3", "x17 x400", "text")}
        assert expected["word3"] and expected["x17 x400"] == [17, 400]
        prefix = keys.stream_prefix(A)

        def keyed_by_term_first(tables: Tables) -> None:
            # the older layout: P + term + 0 + bucket, and no list of a term's buckets
            rows = list(tables.scan("postings", prefix, keys.prefix_end(prefix)))
            for key, value in rows:
                tables.delete("postings", key)
                kind = key[len(prefix) : len(prefix) + 1]
                if kind == b"\x00":
                    tables.put("postings", key, value)
                elif kind == b"\x01":
                    bucket, term = key[len(prefix) + 1 : len(prefix) + 5], key[len(prefix) + 5 :]
                    tables.put("postings", prefix + term + b"\x00" + bucket, value)
            tables.delete("layout", keys.POSTINGS_BY_BUCKET)

        backend.write(keyed_by_term_first)
        assert found(store, "word3") == []
        backend.close()
        reopened = EventStore(lmdb_kv.open_backend(path))
        assert {query: found(reopened, query) for query in expected} == expected
        with reopened.backend.reading() as tables:
            rows = tables.scan("postings", prefix, keys.prefix_end(prefix))
            kinds = {key[len(prefix) : len(prefix) + 1] for key, _ in rows}
        assert kinds == {b"\x00", b"\x01", b"\x02"}
        assert_replays(reopened)
        reopened.backend.close()

    def test_first_key_steps_to_the_first_key_of_a_range(self, tmp_path: Path) -> None:
        backend = lmdb_kv.open_backend(tmp_path / "data")

        def fill(tables: Tables) -> None:
            for key in (b"b1", b"b3", b"c"):
                tables.put("postings", key, b"value")

        backend.write(fill)
        with backend.reading() as tables:
            assert tables.first_key("postings", b"b", b"c") == b"b1"
            assert tables.first_key("postings", b"b2", b"c") == b"b3"
            assert tables.first_key("postings", b"b4", b"c") is None
            assert tables.first_key("postings", b"d", b"e") is None
        backend.close()

    def test_only_the_writer_clears_a_compacting_copy_left_behind(self, tmp_path: Path) -> None:
        # A reader opening the directory may do so while the writer builds a copy; the
        # copy a crashed writer left is cleared by the next process that takes the lock.
        path = tmp_path / "data"
        lmdb_kv.open_backend(path).close()
        left = path / lmdb_kv.COMPACT_DIR
        left.mkdir()
        (left / "data.mdb").write_bytes(b"half a copy")
        reader = lmdb_kv.open_backend(path)
        assert (left / "data.mdb").exists()
        reader.close()
        writer = lmdb_kv.open_backend(path)
        writer.hold_writer_lock()
        assert not left.exists()
        writer.close()

    def test_append_many_is_one_commit(self, store: EventStore) -> None:
        backend = store.backend
        assert isinstance(backend, lmdb_kv.LmdbBackend)
        before = backend.commits
        results = store.append_many(
            [Batch(A, [posted(0)]), Batch(B, [posted(1)]), Batch(C, [posted(0), posted(1)])]
        )
        assert backend.commits == before + 1
        assert isinstance(results[1], Rejected)
        assert backend.commits == before + 1
        store.append(A, [posted(1)])
        assert backend.commits == before + 2

    def test_data_survives_close_and_reopen(self, tmp_path: Path) -> None:
        path = tmp_path / "data"
        backend = lmdb_kv.open_backend(path)
        store = EventStore(backend)
        store.append(A, [posted(0), posted(1), *tree(2), row(((0, 2),), 2)])
        store.append(B, [posted(0), MessageEdited(at_ms=9, index=0, message_id=1000, content="e")])
        events = {stream: list(store.events(stream)) for stream in (A, B)}
        metas = store.streams()
        backend.close()

        reopened = lmdb_kv.open_backend(path)
        try:
            assert reopened is not backend
            again = EventStore(reopened)
            assert {stream: list(again.events(stream)) for stream in (A, B)} == events
            assert again.streams() == metas
            assert again.published_row(A) == row(((0, 2),), 2)
            edited = again.message(B, 0)
            assert edited is not None
            assert edited.content == "e"
            assert again.append(A, [posted(2)]) == Appended(A, 6, 1)
            assert_replays(again)
        finally:
            reopened.close()

    def test_map_grows_instead_of_failing(self, tmp_path: Path) -> None:
        path = tmp_path / "data"
        backend = lmdb_kv.open_backend(path, map_bytes=64 * 1024)
        try:
            store = EventStore(backend)
            start_map = backend.map_bytes()
            big = "x" * 3000
            for chunk in range(10):
                store.append(A, [posted(chunk * 100 + i, big) for i in range(100)])
            store.append(B, [posted(0, "y" * 1_000_000)])  # one event bigger than the map
            assert backend.map_grown > 0
            assert backend.map_bytes() > start_map
            read = list(store.events(A))
            assert len(read) == 1000
            assert all(isinstance(e, MessagePosted) and e.content == big for _, e in read)
            message = store.message(B, 0)
            assert message is not None
            assert len(message.content) == 1_000_000
            assert_replays(store)
        finally:
            backend.close()
        reopened = lmdb_kv.open_backend(path, map_bytes=64 * 1024)
        try:
            assert len(list(EventStore(reopened).events(A))) == 1000
        finally:
            reopened.close()

    def test_reads_in_another_thread_go_on_while_the_map_grows(self, tmp_path: Path) -> None:
        # LMDB lets a map be resized only while no transaction of the process is
        # open; the live writer grows it in its thread while the trio thread reads.
        backend = lmdb_kv.open_backend(tmp_path / "data", map_bytes=64 * 1024)
        try:
            store = EventStore(backend)
            store.append(A, [posted(0)])
            stop = threading.Event()
            failures: list[BaseException] = []
            reads = 0

            def keep_reading() -> None:
                nonlocal reads
                while not stop.is_set():
                    try:
                        meta = store.meta(A)
                        assert meta is not None and meta.messages >= 1
                        assert len(list(store.events(A, 0, 3))) >= 1
                        reads += 1
                    except BaseException as error:  # reported below, with the count
                        failures.append(error)

            reader = threading.Thread(target=keep_reading)
            reader.start()
            try:
                for chunk in range(40):
                    store.append(A, [posted(1 + chunk * 25 + i, "z" * 2000) for i in range(25)])
            finally:
                stop.set()
                reader.join()
            assert backend.map_grown >= 3
            assert reads > 0
            assert failures == []
            assert len(list(store.events(A))) == 1 + 40 * 25
            assert_replays(store)
        finally:
            backend.close()

    def test_a_map_another_process_grew_is_taken_on(self, tmp_path: Path) -> None:
        path = tmp_path / "data"
        backend = lmdb_kv.open_backend(path, map_bytes=64 * 1024)
        try:
            store = EventStore(backend)
            store.append(A, [posted(0)])
            before = backend.map_bytes()
            subprocess.run([sys.executable, "-c", _GROWER, str(path)], check=True, timeout=60)
            assert len(list(store.events(B))) == 200  # read: the new size is taken on
            assert backend.map_bytes() > before
            assert store.append(A, [posted(1)]) == Appended(A, 1, 1)
            assert_replays(store)
        finally:
            backend.close()

    def test_same_directory_gives_same_backend(self, tmp_path: Path) -> None:
        path = tmp_path / "data"
        first = lmdb_kv.open_backend(path)
        try:
            assert lmdb_kv.open_backend(path) is first
            assert lmdb_kv.open_backend(str(path)) is first
            assert lmdb_kv.open_backend(tmp_path / "data" / ".." / "data") is first
            assert lmdb_kv.open_backend(tmp_path / "other") is not first
        finally:
            lmdb_kv.open_backend(tmp_path / "other").close()
            first.close()
        assert lmdb_kv.open_backend(path) is not first
        lmdb_kv.open_backend(path).close()

    def test_stale_readers_are_cleared_at_open(self, tmp_path: Path) -> None:
        # LMDB resets its reader table when the opener is alone, so a stale slot
        # survives only while another process keeps the environment open.
        path = tmp_path / "data"
        lmdb_kv.open_backend(path).close()
        keeper = _start_holder(path, "open")
        try:
            reader = _start_holder(path, "read")
            reader.send_signal(signal.SIGKILL)
            reader.wait()
            backend = lmdb_kv.open_backend(path)
            try:
                assert backend.stale_readers_cleared == 1
                assert backend.env.reader_check() == 0
                assert EventStore(backend).append(A, [posted(0)]) == Appended(A, 0, 1)
            finally:
                backend.close()
        finally:
            keeper.send_signal(signal.SIGKILL)
            keeper.wait()


# A child that opens the environment ("open") or also takes a reader slot
# ("read"), says so, and waits to be killed.
_HOLDER = """
import sys, time
from pathlib import Path
from typing import Any
from eva.store.lmdb_kv import open_backend
backend = open_backend(Path(sys.argv[1]))
if sys.argv[2] == "read":
    with backend.reading():
        print("ready", flush=True)
        time.sleep(60)
print("ready", flush=True)
time.sleep(60)
"""


# A child that appends enough to channel B to grow the map several times.
_GROWER = """
import sys
from pathlib import Path
from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
store = EventStore(open_backend(Path(sys.argv[1]), map_bytes=64 * 1024))
for i in range(200):
    store.append(StreamId(1, 11), [MessagePosted(
        at_ms=i, index=i, message_id=5000 + i, author_id=7, author_name="g", content="g" * 4000
    )])
"""


def _start_holder(path: Path, mode: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), mode], stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"ready\n"
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        child.stdout.close()
    return child


def test_a_compacting_copy_in_many_transactions_holds_every_entry_and_lets_pages_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Large values (a recall index entry can be megabytes) end a copy's transaction
    # by their bytes, and the pages read are released after each; nothing is lost.
    backend = lmdb_kv.open_backend(tmp_path / "data")
    entries = {
        "postings": [
            (f"term{n:04d}".encode(), bytes([n % 251]) * (n * 97 % 9000)) for n in range(600)
        ],
        "lines": [(f"line{n:05d}".encode(), b"%d" % n) for n in range(3000)],
    }
    monkeypatch.setattr(lmdb_kv, "COPY_BYTES", 64 << 10)
    monkeypatch.setattr(lmdb_kv, "COPY_CHUNK", 500)
    released: list[Path] = []
    release = lmdb_kv.release_mapping
    monkeypatch.setattr(lmdb_kv, "release_mapping", lambda f: (released.append(f), release(f)))
    try:
        backend.write(
            lambda tables: [
                tables.put_many(table, rows)
                for table, rows in entries.items()  # type: ignore[arg-type]
            ]
        )
        before, after = backend.compact()
        assert before > 0 and after > 0
        with backend.reading() as tables:
            for table, rows in entries.items():
                assert list(tables.scan(table, b"", b"\xff")) == sorted(rows)  # type: ignore[arg-type]
    finally:
        backend.close()
    # each transaction releases the source and the copy: 6 of lines, some 35 of postings (2.6 MB)
    assert len(released) >= 2 * (6 + 35)


def test_a_table_the_disk_has_no_room_to_create_is_a_full_disk_not_an_old_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = lmdb.open

    class NoRoom:
        def __init__(self, env: Any) -> None:
            self._env = env

        def open_db(self, name: bytes, create: bool = True) -> Any:
            raise lmdb.Error("mdb_txn_commit: No space left on device")

        def __getattr__(self, name: str) -> Any:
            return getattr(self._env, name)

    monkeypatch.setattr(lmdb_kv.lmdb, "open", lambda *a, **k: NoRoom(opened(*a, **k)))
    with pytest.raises(OSError, match=r"could not be written .* is its disk full") as refused:
        lmdb_kv.open_backend(tmp_path / "data")
    assert "older Eva" not in str(refused.value)
