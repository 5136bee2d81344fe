"""Runs of posts applied at once land exactly as the same events applied one by one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eva.core.events import AnyEvent, MessageDeleted, MessageEdited, MessagePosted, encode_event
from eva.core.keys import StreamId, event_keys
from eva.core.memtables import MemoryTables
from eva.core.projection import Projector, Rejected

STREAMS = [StreamId(1, channel) for channel in (3, 40, 12345, 2**40 + 7)]


@st.composite
def histories(draw: st.DrawFn) -> tuple[StreamId, list[list[AnyEvent]]]:
    """A stream and its events in batches: mostly posts, edits and deletions that fit, and
    now and then a batch with one event that does not (a wrong index, an id already stored
    or out of range), which refuses the whole batch."""
    stream = draw(st.sampled_from(STREAMS))
    batches: list[list[AnyEvent]] = []
    ids: list[int] = []  # of the messages stored, by index
    gone: set[int] = set()  # their indexes deleted
    for _ in range(draw(st.integers(1, 4))):
        batch: list[AnyEvent] = []
        size = draw(st.integers(0, 150))
        odd_at = draw(st.one_of(st.none(), st.integers(0, max(0, size - 1))))
        count, deleted = len(ids), set(gone)
        for position in range(size):
            live = [i for i in range(len(ids)) if i not in deleted]
            kind = draw(st.sampled_from(["post"] * 10 + ["edit", "delete"] * bool(live)))
            if position == odd_at:
                index = draw(st.sampled_from([count + 1, *([count - 1] * bool(count))]))
                message_id = draw(st.sampled_from([-1, *ids[-2:], 10**7]))
                if message_id == 10**7:  # a fresh id: then the index is what is wrong
                    message_id += position
                else:
                    index = count
                kind = "odd"
            if kind in ("edit", "delete"):
                index = draw(st.sampled_from(live))
                if kind == "edit":
                    batch.append(MessageEdited(at_ms=count, index=index, message_id=ids[index],
                                               content=draw(st.text(max_size=8))))
                else:
                    batch.append(MessageDeleted(at_ms=count, index=index, message_id=ids[index]))
                    deleted.add(index)
                continue
            if kind == "post":
                index, message_id = count, 1000 + len(ids) * 10 + position * 7919
            batch.append(MessagePosted(
                at_ms=draw(st.integers(0, 10**6)), index=index, message_id=message_id,
                author_id=1, author_name=draw(st.sampled_from(["ann", "bö"])),
                content=draw(st.text(max_size=12)),
                attachments=draw(st.lists(st.text(max_size=4), max_size=1).map(tuple)),
            ))
            count += 1
        if odd_at is None or not size:  # it lands: the next batch follows it
            ids += [e.message_id for e in batch if isinstance(e, MessagePosted)]
            gone = deleted
        batches.append(batch)
    return stream, batches


def land(
    stream: StreamId, batches: list[list[AnyEvent]], at_once: bool
) -> tuple[MemoryTables, list[str]]:
    """Apply each batch in a transaction of its own (dropped whole when refused)."""
    tables, refusals = MemoryTables(), []
    for batch in batches:
        trial = tables.copy()
        projector = Projector(trial)
        first = projector.meta(stream).position
        trial.put_many("events", zip(event_keys(stream, first, len(batch)),
                                     map(encode_event, batch), strict=True))
        try:
            if at_once:
                projector.apply_all(stream, first, batch)
            else:
                for offset, event in enumerate(batch):
                    projector.apply(stream, first + offset, event)
            projector.flush()
        except Rejected as error:
            refusals.append(str(error))
            continue
        tables = trial
    return tables, refusals


@settings(max_examples=80, deadline=None)
@given(histories())
def test_runs_of_posts_land_as_the_events_one_by_one(
    history: tuple[StreamId, list[list[AnyEvent]]],
) -> None:
    stream, batches = history
    one_by_one, refused_one_by_one = land(stream, batches, at_once=False)
    at_once, refused_at_once = land(stream, batches, at_once=True)
    assert refused_at_once == refused_one_by_one, "the same refusals, with the same words"
    assert at_once.data == one_by_one.data, "the same tables, byte for byte"
