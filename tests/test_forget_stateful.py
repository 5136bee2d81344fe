# Forget as a state machine: posts, edits, deletes, builds, restarts and forgets in any order.
#
# Every message holds a marker word no other message holds, so where a text
# went can be told from its marker alone. The model keeps, per message, its
# author and current marker, and the markers that must leave: those of people
# forgotten (every text they ever wrote, edits and deleted ones included) and
# those superseded by an edit or a deletion. Invariants:
# - always: replay of every stream equals its live projections; every kept
#   message reads as the model says; no forgotten or superseded marker is in a
#   message or the recall index, and no forgotten marker is in a current line;
# - after a forget: no forgotten marker in any byte of any file, nothing pending;
# - after a purge (remake, rewrite and compaction of every stream, what the
#   bot's delayed purge does for edits and deletes): no superseded marker in a
#   current line or a file either, no stale line, and every kept message's
#   marker still in the files.
# FORGET_EXAMPLES=1000 in the environment runs a longer search.
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import trio
from holding import held
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eva.core import keys
from eva.core.events import AnyEvent, MessageDeleted, MessageEdited, MessagePosted
from eva.core.forget import person_hash
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.memory.forget import forget
from eva.memory.remake import remake
from eva.store.erasure import purge_stream
from eva.store.event_store import Appended, EventStore, read_line
from eva.store.lmdb_kv import LmdbBackend, open_backend
from eva.store.replay import replay_stream

SETTINGS = MemorySettings(
    line_limit=128,
    compress_at_bytes=1024,
    tail_keep_bytes=256,
    overflow_tail_bytes=2048,
    row_high_bytes=1536,
    row_low_bytes=768,
).check()
PEOPLE = (101, 202, 303)
STREAMS = (StreamId(5, 1), StreamId(5, 2))
SUMMARIZER = OfflineSummarizer(SETTINGS.line_limit)
# Forgets use a summarizer whose lines are too long for the line limit, like a
# model that fails every time: a forget must still finish, by its fallback.
TOO_LONG = OfflineSummarizer(4 * SETTINGS.line_limit)
START_MS = 1_700_000_000_000


@dataclass(slots=True)
class Kept:
    """A message as the model expects it to read."""

    author: int
    marker: str
    attachment: bool
    deleted: bool = False


def file_bytes(directory: Path) -> bytes:
    return b"\0".join(
        (Path(root) / name).read_bytes() for root, _, names in os.walk(directory) for name in names
    )


@dataclass
class Model:
    messages: dict[StreamId, list[Kept]] = field(default_factory=lambda: {s: [] for s in STREAMS})
    written: dict[int, set[str]] = field(default_factory=lambda: {p: set() for p in PEOPLE})
    forgotten: set[str] = field(default_factory=set)
    superseded: set[str] = field(default_factory=set)
    count: int = 0

    def new_marker(self, person: int) -> str:
        self.count += 1
        marker = f"mk{person}x{self.count}zq"
        self.written[person].add(marker)
        return marker


class ForgetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="eva-forget-stateful-"))
        self.backend: LmdbBackend = open_backend(self.directory)
        self.store = EventStore(self.backend)
        self.model = Model()
        self.now_ms = START_MS

    def tick(self) -> int:
        self.now_ms += 60_000
        return self.now_ms

    async def append(self, stream: StreamId, events: list[AnyEvent]) -> Appended:
        return self.store.append(stream, events)

    def teardown(self) -> None:
        self.backend.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- rules ---------------------------------------------------------------

    @rule(
        stream=st.sampled_from(STREAMS),
        posts=st.lists(
            st.tuples(st.sampled_from(PEOPLE), st.integers(0, 40), st.booleans()),
            min_size=1,
            max_size=8,
        ),
    )
    def post(self, stream: StreamId, posts: list[tuple[int, int, bool]]) -> None:
        kept = self.model.messages[stream]
        events: list[AnyEvent] = []
        for person, words, attachment in posts:
            marker = self.model.new_marker(person)
            index = len(kept)
            kept.append(Kept(person, marker, attachment and words % 3 == 0))
            events.append(
                MessagePosted(
                    at_ms=self.tick(),
                    index=index,
                    message_id=stream.channel_id * 100_000 + index,
                    author_id=person,
                    author_name=f"person{person}",
                    content=f"{marker} " + "word " * words,
                    attachments=(f"{marker}.png",) if kept[-1].attachment else (),
                )
            )
        self.store.append(stream, events)

    def live(self, stream: StreamId) -> list[int]:
        return [i for i, m in enumerate(self.model.messages[stream]) if not m.deleted]

    @precondition(lambda self: any(self.live(s) for s in STREAMS))
    @rule(data=st.data(), words=st.integers(0, 40))
    def edit(self, data: st.DataObject, words: int) -> None:
        stream = data.draw(st.sampled_from([s for s in STREAMS if self.live(s)]))
        index = data.draw(st.sampled_from(self.live(stream)))
        message = self.model.messages[stream][index]
        self.model.superseded.add(message.marker)
        message.marker = self.model.new_marker(message.author)
        message.attachment = False
        edited = MessageEdited(
            at_ms=self.tick(),
            index=index,
            message_id=stream.channel_id * 100_000 + index,
            content=f"{message.marker} edited " + "word " * words,
        )
        self.store.append(stream, [edited])

    @precondition(lambda self: any(self.live(s) for s in STREAMS))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        stream = data.draw(st.sampled_from([s for s in STREAMS if self.live(s)]))
        index = data.draw(st.sampled_from(self.live(stream)))
        message = self.model.messages[stream][index]
        message.deleted = True
        self.model.superseded.add(message.marker)
        deleted = MessageDeleted(
            at_ms=self.tick(), index=index, message_id=stream.channel_id * 100_000 + index
        )
        self.store.append(stream, [deleted])

    @rule(stream=st.sampled_from(STREAMS))
    def build(self, stream: StreamId) -> None:
        if self.store.meta(stream) is not None:
            memory = Memory(self.store, stream, SUMMARIZER, SETTINGS)
            trio.run(memory.build, self.tick())

    @rule()
    def restart(self) -> None:
        self.backend.close()
        self.backend = open_backend(self.directory)
        self.store = EventStore(self.backend)

    @rule(person=st.sampled_from(PEOPLE))
    def forget(self, person: int) -> None:
        async def run() -> None:
            report = await forget(
                self.store,
                self.directory,
                person_hash(person),
                STREAMS,
                "self",
                TOO_LONG,
                self.append,
                SETTINGS,
                self.tick(),
            )
            assert report.leftover_hits == 0

        trio.run(run)
        model = self.model
        model.forgotten |= model.written[person]
        model.written[person] = set()
        for stream in STREAMS:
            for message in model.messages[stream]:
                message.deleted = message.deleted or message.author == person
        assert self.markers_in_files(model.forgotten) == set()
        for meta in self.store.streams():
            assert meta.forgetting == []

    @rule()
    def purge(self) -> None:
        async def run() -> None:
            for stream in STREAMS:
                if self.store.meta(stream) is not None:
                    await remake(self.store, stream, SUMMARIZER, self.append, SETTINGS, self.tick())
                    purge_stream(self.store, stream)
            self.backend.compact()

        trio.run(run)
        gone = self.model.forgotten | self.model.superseded
        assert self.markers_in_files(gone) == set()
        lines = self.line_texts()
        assert not [m for m in gone if m in lines]
        kept = {m.marker for s in STREAMS for m in self.model.messages[s] if not m.deleted}
        assert self.markers_in_files(kept) == kept
        for meta in self.store.streams():
            assert meta.stale == 0

    # -- invariants ----------------------------------------------------------

    def markers_in_files(self, markers: set[str]) -> set[str]:
        return held(self.directory, markers)

    def line_texts(self) -> str:
        texts = []
        with self.backend.reading() as tables:
            for stream in STREAMS:
                prefix = keys.stream_prefix(stream)
                for key, _ in tables.scan("lines", prefix, keys.prefix_end(prefix)):
                    line = read_line(tables, stream, *keys.address_of_line_key(key))
                    assert line is not None
                    texts.append(line.text)
        return "\n".join(texts)

    @invariant()
    def replay_equals_live(self) -> None:
        for stream in STREAMS:
            if self.store.meta(stream) is not None:
                result = replay_stream(self.store, stream)
                assert result.ok, result

    @invariant()
    def messages_read_as_the_model_says(self) -> None:
        for stream in STREAMS:
            for index, kept in enumerate(self.model.messages[stream]):
                message = self.store.message(stream, index)
                assert message is not None
                assert message.deleted == kept.deleted
                if not kept.deleted:
                    assert message.content.split()[0] == kept.marker
                    assert message.attachments == (
                        (f"{kept.marker}.png",) if kept.attachment else ()
                    )

    @invariant()
    def gone_words_are_in_no_message_line_or_index(self) -> None:
        gone = self.model.forgotten | self.model.superseded
        texts = []
        postings = []
        with self.backend.reading() as tables:
            for stream in STREAMS:
                for index in range(len(self.model.messages[stream])):
                    message = self.store.message(stream, index)
                    assert message is not None
                    if not message.deleted:
                        texts.extend([message.content, *message.attachments])
                prefix = keys.stream_prefix(stream)
                for key, value in tables.scan("postings", prefix, keys.prefix_end(prefix)):
                    postings.extend([key, value])
        held = "\n".join(texts)
        index = b"\n".join(postings)
        assert not [m for m in gone if m in held]
        assert not [m for m in gone if m.encode() in index]
        lines = self.line_texts()
        assert not [m for m in self.model.forgotten if m in lines]


ForgetMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("FORGET_EXAMPLES", "25")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestForgetMachine = ForgetMachine.TestCase
