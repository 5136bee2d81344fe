# A Hypothesis state machine over the LMDB store: random appends, restarts, replays.
#
# The machine keeps a plain model of every stream (the events it expects,
# the messages with their latest text, the lines by address, the row) and its
# own projections, applied batch by batch as batches land. Invariants, checked
# after every step: the events read back equal the model's; the live
# projections equal a replay from scratch, and both equal the machine's own;
# messages, lines and the row read through the store equal the model's.
# Batches the model knows do not fit must be refused alone, keeping nothing.
from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from eva.core import keys
from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    LineWritten,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    RowPublished,
    ToolCalled,
    encode_event,
)
from eva.core.keys import StreamId
from eva.core.memtables import MemoryTables
from eva.core.projection import Projector, Rejected
from eva.core.render import LINE_LIMIT_BYTES
from eva.core.replay import digest, projection_rows
from eva.store import lmdb_kv
from eva.store.event_store import Appended, Batch, EventStore
from eva.store.replay import replay_stream

STREAMS = (StreamId(1, 100), StreamId(1, 101), StreamId(2, 100))
TINY_MAP = 64 * 1024

short_text = st.text(max_size=24)
line_text = st.one_of(
    st.text(max_size=40),
    st.just("x" * LINE_LIMIT_BYTES),
    st.just("é" * (LINE_LIMIT_BYTES // 2)),
)


@dataclass
class ModelMessage:
    posted: MessagePosted
    content: str
    attachments: tuple[str, ...]
    edited_at_ms: int | None = None
    deleted: bool = False


@dataclass
class ModelStream:
    events: list[AnyEvent] = field(default_factory=list)
    messages: list[ModelMessage] = field(default_factory=list)
    lines: dict[tuple[int, int], LineWritten] = field(default_factory=dict)
    row: RowPublished | None = None
    channel_name: str = ""

    def apply(self, event: AnyEvent) -> None:
        """What a valid event does, written plainly (not with the projector)."""
        self.events.append(event)
        match event:
            case MessagePosted():
                self.messages.append(ModelMessage(event, event.content, event.attachments))
            case MessageEdited():
                message = self.messages[event.index]
                message.content, message.attachments = event.content, event.attachments
                message.edited_at_ms = event.at_ms
            case MessageDeleted():
                self.messages[event.index].deleted = True
            case LineWritten():
                self.lines[event.start, event.size] = event
            case RowPublished():
                self.row = event
            case ChannelDescribed():
                self.channel_name = event.channel_name
            case _:
                pass


def writable_addresses(state: ModelStream) -> list[tuple[int, int]]:
    """Every line address that may be written now: a leaf, or a line whose halves exist."""
    found = [(start, 1) for start in range(len(state.messages))]
    for start, size in state.lines:
        if start % (size * 2) == 0 and (start + size, size) in state.lines:
            found.append((start, size * 2))
    return found


def missing_halves(state: ModelStream) -> list[tuple[int, int]]:
    """Addresses inside the messages posted whose halves are not both written yet."""
    count = len(state.messages)
    found = []
    size = 2
    while size <= count:
        for start in range(0, count - size + 1, size):
            half = size // 2
            if (start, half) not in state.lines or (start + half, half) not in state.lines:
                found.append((start, size))
        size *= 2
    return found


def line_event(at: int, start: int, size: int, text: str) -> LineWritten:
    return LineWritten(at_ms=at, start=start, size=size, text=text, first_ms=at - 5, last_ms=at)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="eva-stateful-"))
        self.backend = lmdb_kv.open_backend(self.dir, map_bytes=TINY_MAP)
        self.store = EventStore(self.backend)
        self.model = {stream: ModelStream() for stream in STREAMS}
        self.tables = MemoryTables()
        self.clock = 1_700_000_000_000
        self.next_id = 5000

    def teardown(self) -> None:
        self.backend.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- making events -------------------------------------------------------

    def tick(self) -> int:
        self.clock += 1000
        return self.clock

    def valid_event(self, data: st.DataObject, stream: StreamId, state: ModelStream) -> AnyEvent:
        count = len(state.messages)
        kinds = ["posted", "posted", "posted", "tool", "described"]
        if count:
            kinds += ["deleted", "line", "line", "row"]
        if any(size > 1 for _, size in writable_addresses(state)):
            kinds += ["merge", "merge"]
        if any(not m.deleted for m in state.messages):
            kinds += ["edited", "edited"]
        kind = data.draw(st.sampled_from(kinds))
        at = self.tick()
        if kind == "posted":
            self.next_id += data.draw(st.integers(1, 3))
            return MessagePosted(
                at_ms=at,
                index=count,
                message_id=self.next_id,
                author_id=data.draw(st.integers(1, 4)),
                author_name=data.draw(st.sampled_from(["ann", "bo", "cé"])),
                content=data.draw(short_text),
                attachments=data.draw(st.lists(short_text, max_size=2).map(tuple)),
            )
        if kind == "edited":
            live = [i for i, m in enumerate(state.messages) if not m.deleted]
            index = data.draw(st.sampled_from(live))
            message_id = state.messages[index].posted.message_id
            return MessageEdited(
                at_ms=at, index=index, message_id=message_id, content=data.draw(short_text)
            )
        if kind == "deleted":
            index = data.draw(st.integers(0, count - 1))
            message_id = state.messages[index].posted.message_id
            return MessageDeleted(at_ms=at, index=index, message_id=message_id)
        if kind in ("line", "merge"):
            addresses = writable_addresses(state)
            if kind == "merge":
                addresses = [(start, size) for start, size in addresses if size > 1]
            start, size = data.draw(st.sampled_from(addresses))
            text = data.draw(line_text)
            return LineWritten(
                at_ms=at, start=start, size=size, text=text, first_ms=at - 5, last_ms=at
            )
        if kind == "row":
            entries: list[tuple[int, int]] = []
            covered = 0
            while True:
                sizes = sorted(size for start, size in state.lines if start == covered)
                if not sizes or not data.draw(st.integers(0, 5), label="go on"):
                    break
                size = data.draw(st.sampled_from(sizes))
                entries.append((covered, size))
                covered += size
            return RowPublished(at_ms=at, entries=tuple(entries), frontier=covered)
        if kind == "tool":
            return ToolCalled(at_ms=at, name=data.draw(st.sampled_from(["zoom", "recall"])))
        return ChannelDescribed(
            at_ms=at,
            guild_id=stream.guild_id,
            channel_id=stream.channel_id,
            channel_name=data.draw(short_text),
        )

    def invalid_event(self, data: st.DataObject, state: ModelStream) -> AnyEvent:
        count = len(state.messages)
        at = self.tick()
        kinds = ["wrong index", "unknown edit", "line past end", "long line", "row gap"]
        if count:
            kinds += ["duplicate id", "bad address", "row frontier", "row without line"]
        if missing_halves(state):
            kinds.append("line before halves")
        if any(m.deleted for m in state.messages):
            kinds.append("edit deleted")
        kind = data.draw(st.sampled_from(kinds))
        if kind in ("wrong index", "duplicate id"):
            wrong = kind == "wrong index"
            index = data.draw(st.sampled_from([count + 1, count + 7] + ([count - 1] * bool(count))))
            return MessagePosted(
                at_ms=at,
                index=index if wrong else count,
                message_id=self.next_id + 1 if wrong else state.messages[-1].posted.message_id,
                author_id=1,
                author_name="ann",
            )
        if kind == "unknown edit":
            index = data.draw(st.integers(0, count + 2))
            return MessageEdited(at_ms=at, index=index, message_id=self.next_id + 99, content="?")
        if kind == "edit deleted":
            gone = [m.posted for m in state.messages if m.deleted]
            posted = data.draw(st.sampled_from(gone))
            return MessageEdited(
                at_ms=at, index=posted.index, message_id=posted.message_id, content="?"
            )
        if kind == "line before halves":
            start, size = data.draw(st.sampled_from(missing_halves(state)))
            return LineWritten(at_ms=at, start=start, size=size, text="x", first_ms=0, last_ms=0)
        if kind in ("line past end", "long line", "bad address"):
            start, size, text = {
                "line past end": (count, 1, "x"),
                "long line": (0, 1, "x" * (LINE_LIMIT_BYTES + 1)),
                "bad address": (max(0, count - 1), 3, "x") if count >= 3 else (1, 2, "x"),
            }[kind]
            return LineWritten(at_ms=at, start=start, size=size, text=text, first_ms=0, last_ms=0)
        if kind == "row without line":
            index = data.draw(st.integers(0, count - 1))
            if (index, 1) in state.lines:
                return RowPublished(at_ms=at, entries=((0, count + 1),), frontier=count + 1)
            entries = tuple((i, 1) for i in range(index + 1))
            return RowPublished(at_ms=at, entries=entries, frontier=index + 1)
        if kind == "row gap":
            return RowPublished(at_ms=at, entries=((1, 1),), frontier=1)
        return RowPublished(at_ms=at, entries=((0, 1),), frontier=2)

    # -- rules ---------------------------------------------------------------

    @initialize(data=st.data())
    def chat_a_little(self, data: st.DataObject) -> None:
        """Start every stream with a few messages and their leaves, in one group commit."""
        batches = []
        for stream in STREAMS:
            state = self.model[stream]
            for index in range(data.draw(st.integers(0, 6), label="messages")):
                self.next_id += 1
                state.apply(
                    MessagePosted(
                        at_ms=self.tick(),
                        index=index,
                        message_id=self.next_id,
                        author_id=1,
                        author_name="ann",
                        content=f"hello {index}",
                    )
                )
            for index in range(len(state.messages)):
                state.apply(line_event(self.tick(), index, 1, f"ann: hello {index}"))
            batches.append(Batch(stream, list(state.events)))
        results = self.store.append_many(batches)
        assert results == [Appended(b.stream, 0, len(b.events)) for b in batches]
        self.project(batches)

    @rule(data=st.data())
    def append_many(self, data: st.DataObject) -> None:
        scratch = {stream: copy.deepcopy(state) for stream, state in self.model.items()}
        batches: list[Batch] = []
        expected: list[Appended | None] = []
        for _ in range(data.draw(st.integers(1, 3), label="batches")):
            stream = data.draw(st.sampled_from(STREAMS), label="stream")
            valid = data.draw(st.integers(0, 3), label="fits") > 0
            trial = copy.deepcopy(scratch[stream])
            first = len(trial.events)
            events: list[AnyEvent] = []
            for _ in range(data.draw(st.integers(0, 4), label="events")):
                event = self.valid_event(data, stream, trial)
                trial.apply(event)
                events.append(event)
            if valid:
                scratch[stream] = trial
                expected.append(Appended(stream, first, len(events)))
            else:
                # Last, so that it is judged against the state the batch built.
                events.append(self.invalid_event(data, trial))
                expected.append(None)
            batches.append(Batch(stream, events))

        results = self.store.append_many(batches)

        assert len(results) == len(batches)
        for batch, want, got in zip(batches, expected, results, strict=True):
            if want is None:
                assert isinstance(got, Rejected), (batch, got)
                note_event("a batch refused")
                continue
            assert got == want
            self.project([batch])
            for appended in batch.events:
                if isinstance(appended, RowPublished) and appended.entries:
                    note_event("a row over lines published")
                if isinstance(appended, LineWritten) and appended.size > 1:
                    note_event("a merge line written")
        self.model = scratch

    def project(self, batches: list[Batch]) -> None:
        """Apply landed batches to the machine's own projections, as the store should."""
        projector = Projector(self.tables)
        for batch in batches:
            first = projector.meta(batch.stream).position
            for seq, event in enumerate(batch.events, start=first):
                self.tables.put("events", keys.event_key(batch.stream, seq), encode_event(event))
                projector.apply(batch.stream, seq, event)
        projector.flush()

    @rule()
    def restart(self) -> None:
        if self.backend.map_grown:
            note_event("the map grew")
        self.backend.close()
        self.backend = lmdb_kv.open_backend(self.dir, map_bytes=TINY_MAP)
        assert self.backend.stale_readers_cleared == 0
        self.store = EventStore(self.backend)

    @precondition(lambda self: any(m.events for m in self.model.values()))
    @rule(data=st.data())
    def read_from_the_middle(self, data: st.DataObject) -> None:
        stream = data.draw(st.sampled_from([s for s in STREAMS if self.model[s].events]))
        events = self.model[stream].events
        start = data.draw(st.integers(0, len(events)))
        stop = data.draw(st.integers(start, len(events) + 2))
        read = list(self.store.events(stream, start, stop))
        assert read == list(enumerate(events))[start:stop]

    # -- invariants ----------------------------------------------------------

    @invariant()
    def events_read_back_equal_the_model(self) -> None:
        for stream, state in self.model.items():
            assert [e for _, e in self.store.events(stream)] == state.events
            assert [s for s, _ in self.store.events(stream)] == list(range(len(state.events)))

    @invariant()
    def projections_equal_a_replay_and_the_machines_own(self) -> None:
        listed = {StreamId(m.guild_id, m.channel_id) for m in self.store.streams()}
        assert listed == {stream for stream in STREAMS if self.model[stream].events}
        for stream in STREAMS:
            result = replay_stream(self.store, stream)
            assert result.ok, result
            own = digest(projection_rows(self.tables, stream))
            assert result.rebuilt_digest == own
            assert result.events == len(self.model[stream].events)

    @invariant()
    def reads_equal_the_model(self) -> None:
        for stream, state in self.model.items():
            for index, want in enumerate(state.messages):
                got = self.store.message(stream, index)
                assert got is not None
                assert got.posted == want.posted
                assert (got.content, got.attachments) == (want.content, want.attachments)
                assert (got.edited_at_ms, got.deleted) == (want.edited_at_ms, want.deleted)
                assert self.store.index_of(stream, want.posted.message_id) == index
            assert self.store.message(stream, len(state.messages)) is None
            for (start, size), line in state.lines.items():
                assert self.store.line(stream, start, size) == line
            assert self.store.published_row(stream) == state.row
            meta = self.store.meta(stream)
            if not state.events:
                assert meta is None
                continue
            assert meta is not None
            assert meta.position == len(state.events)
            assert meta.messages == len(state.messages)
            assert meta.deleted == sum(m.deleted for m in state.messages)
            assert meta.lines == sum(isinstance(e, LineWritten) for e in state.events)
            assert meta.channel_name == state.channel_name


StoreMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase
