# What Eva reads: the memory block and the zoom tool, read from one channel's store.
#
# Shell: short read transactions; the texts come from the core (eva.core.block,
# eva.core.render). Every call sees one channel only.
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from eva.core.address import Address, format_address, halves, parse_address
from eva.core.block import ShownMessage, message_line, tail_lines
from eva.core.forget import PersonHashes, person_messages
from eva.core.keys import StreamId, decode_u64, discord_id_key
from eva.core.projection import index_text, indexed_upto
from eva.core.prompt import memory_prompt
from eva.core.recall import RecallView, recall_view
from eva.core.recall_index import OpenChunk
from eva.core.recall_query import index_ranges, read_query
from eva.core.recall_search import (
    AUTHOR_ALONE_BOOST,
    AUTHOR_BOOST,
    SearchResult,
    longest_within,
    people_named,
    search,
)
from eva.core.render import cut_to_bytes, render_line
from eva.core.settings import MemorySettings
from eva.core.state import StreamMeta
from eva.core.tables import Tables
from eva.core.terms import AUTHOR_MARK, term_bytes
from eva.memory.publish import LineSizes
from eva.store.event_store import (
    EventStore,
    StoredMessage,
    read_line,
    read_message,
    read_messages,
)

ZOOM_PAGE_BYTES = 4000
WITHHELD_LINE = "(being made again: it holds words of a person being forgotten)"
WITHHELD_MESSAGE = "(this message is being erased: its author asked to be forgotten)"


def withheld(
    tables: Tables, stream: StreamId, meta: StreamMeta | None, hashes: PersonHashes
) -> frozenset[int]:
    """The messages whose author's forget is recorded and not finished: while it runs (or
    after a crash cut it short), nothing shows them or a line made from them."""
    if meta is None or not meta.forgetting:
        return frozenset()
    return frozenset(
        index
        for person in meta.forgetting
        for index in person_messages(tables, stream, person, hashes)
    )


def withheld_now(store: EventStore, stream: StreamId, meta: StreamMeta | None) -> frozenset[int]:
    """`withheld` in a read of its own, taken only when a forget is pending at all."""
    if meta is None or not meta.forgetting:
        return frozenset()
    with store.backend.reading() as tables:
        return withheld(tables, stream, meta, store.hashes)


def covers_withheld(address: Address, hidden: frozenset[int]) -> bool:
    """Whether the line at `address` covers a withheld message."""
    return any(address.start <= index < address.start + address.size for index in hidden)


def withhold_lines(lines: list[str], hidden: frozenset[int]) -> list[str]:
    """Rendered row lines, each that covers a withheld message shown by its address only."""
    if not hidden:
        return lines
    out = []
    for line in lines:
        address = parse_address(line.split(" ", 1)[0])
        out.append(f"{format_address(address)} {WITHHELD_LINE}"
                   if covers_withheld(address, hidden) else line)
    return out


def channel_zone(meta: StreamMeta | None, settings: MemorySettings) -> tzinfo:
    """The channel's time zone, else the settings' one, else UTC."""
    for name in (meta.time_zone if meta else "", settings.time_zone):
        if not name:
            continue
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return ZoneInfo("UTC")


def shown(index: int, message: StoredMessage) -> ShownMessage:
    """A stored message as the prompt and the tools show it."""
    return ShownMessage(
        index=index,
        at_ms=message.posted.at_ms,
        author_name=message.posted.author_name,
        content=message.content,
        attachments=message.attachments,
        edited=message.edited_at_ms is not None,
        deleted=message.deleted,
        message_id=message.posted.message_id,
        reply_to=message.posted.reply_to,
    )


@dataclass(slots=True)
class RowText:
    """The rendered row of the last publish, kept until the next one (`row_seq` changes)."""

    row_seq: int = -2
    lines: list[str] = field(default_factory=list)


def row_lines(
    store: EventStore,
    stream: StreamId,
    tz: tzinfo,
    cache: RowText,
    rendered: LineSizes | None = None,
) -> list[str]:
    """The rendered lines of the published row, oldest first.

    With `rendered` (what publishing measured), only lines it lacks are read.
    """
    meta = store.meta(stream)
    if meta is None or meta.row_seq < 0:
        return []
    if cache.row_seq == meta.row_seq and (rendered is None or rendered.zone == tz):
        return cache.lines
    row = store.published_row(stream)
    assert row is not None
    if rendered is not None:
        addresses = [Address(*entry) for entry in row.entries]
        rendered.fill(store, stream, addresses, tz)
        lines = [rendered.render(store, stream, address, tz) for address in addresses]
    else:
        lines = []
        with store.backend.reading() as tables:
            for start, size in row.entries:
                line = read_line(tables, stream, start, size)
                if line is None:
                    raise LookupError(f"{stream}: row line {start}+{size} is missing")
                address = Address(start, size)
                lines.append(render_line(address, line.text, line.first_ms, line.last_ms, tz))
    cache.row_seq, cache.lines = meta.row_seq, lines
    return lines


def tail_messages(store: EventStore, stream: StreamId) -> list[ShownMessage]:
    """The messages after the row's frontier, oldest first, erased ones left out."""
    meta = store.meta(stream)
    if meta is None:
        return []
    with store.backend.reading() as tables:
        hidden = withheld(tables, stream, meta, store.hashes)
        found = read_messages(tables, stream, meta.row_frontier, meta.messages)
        return [shown(index, message) for index, message in found if index not in hidden]


def memory_text(
    store: EventStore, stream: StreamId, settings: MemorySettings, cache: RowText | None = None
) -> str:
    """The memory block exactly as Eva's prompt uses it."""
    meta = store.meta(stream)
    tz = channel_zone(meta, settings)
    lines = row_lines(store, stream, tz, cache if cache is not None else RowText())
    lines = withhold_lines(lines, withheld_now(store, stream, meta))
    tail = tail_lines(tail_messages(store, stream), tz)
    return memory_prompt(lines, tail, settings.prompt_tail_max_bytes).block


class ZoomError(ValueError):
    """A zoom that cannot be answered; the message says what a valid one looks like."""


class ZoomLine(msgspec.Struct, frozen=True):
    """One half shown by a zoom: its address and its rendered row entry."""

    address: str
    text: str


class Zoomed(msgspec.Struct, frozen=True, kw_only=True):
    """What a zoom shows: two lines, or one message (a page of it when long)."""

    text: str
    lines: list[ZoomLine] = []
    message: ShownMessage | None = None
    page: int = 1
    pages: int = 1


def zoom(
    store: EventStore, stream: StreamId, address_text: str, settings: MemorySettings, page: int = 1
) -> Zoomed:
    """The two lines under a line, rendered like the row; for size 1 the whole message."""
    try:
        address = parse_address(address_text)
    except ValueError as error:
        raise ZoomError(str(error)) from None
    meta = store.meta(stream)
    count = meta.messages if meta else 0
    if address.start + address.size > count:
        raise ZoomError(
            f"{format_address(address)} passes the last message; "
            f"this channel has messages 0..{count - 1}"
        )
    tz = channel_zone(meta, settings)
    hidden = withheld_now(store, stream, meta)
    if address.size == 1:
        if address.start in hidden:
            return Zoomed(text=f"[{address.start}] {WITHHELD_MESSAGE}")
        return _zoom_message(store, stream, address.start, tz, page)
    if page != 1:
        raise ZoomError(
            f"{format_address(address)} is a line over {address.size} messages: it has no "
            "pages (a single message, INDEX+1, has them when it is long)"
        )
    with store.backend.reading() as tables:
        if read_line(tables, stream, *address) is None:
            raise ZoomError(
                f"no line at {format_address(address)} yet; zoom a line shown in the row, "
                "one of its halves, or a single message as INDEX+1"
            )
        lines = []
        for half in halves(address):
            line = read_line(tables, stream, *half)
            assert line is not None
            rendered = render_line(half, line.text, line.first_ms, line.last_ms, tz)
            if covers_withheld(half, hidden):
                rendered = f"{format_address(half)} {WITHHELD_LINE}"
            lines.append(ZoomLine(format_address(half), rendered))
    return Zoomed(text="\n".join(line.text for line in lines), lines=lines)


def _zoom_message(store: EventStore, stream: StreamId, index: int, tz: tzinfo, page: int) -> Zoomed:
    message = store.message(stream, index)
    if message is None or message.deleted:
        return Zoomed(text=f"[{index}] (this message was deleted or erased)")
    shown_message = shown(index, message)
    pages = _pages(message_line(shown_message, tz), ZOOM_PAGE_BYTES)
    if not 1 <= page <= len(pages):
        raise ZoomError(f"message {index} has pages 1..{len(pages)}, not {page}")
    text = pages[page - 1]
    if len(pages) > 1:
        text += f"\n(page {page} of {len(pages)} of message {index})"
    return Zoomed(text=text, message=shown_message, page=page, pages=len(pages))


RECALL_HITS = 100
# The last few channels' messages past the recall index, gathered for search: a
# conversation's recalls come one after another while its channel stands still.
OPEN_CHUNKS_KEPT = 16
_open_chunks: weakref.WeakKeyDictionary[
    object, dict[tuple[StreamId, int, frozenset[int]], OpenChunk]
] = weakref.WeakKeyDictionary()
"""Per backend (gone with it: an id could be another backend's once this one is freed)."""
RECALL_CAP_BYTES = 12_000  # `eva recall`: about what an answer was when recall was first measured


def recall(
    store: EventStore,
    stream: StreamId,
    query: str,
    settings: MemorySettings,
    cap_bytes: int = RECALL_CAP_BYTES,
    now_ms: int | None = None,
    *,
    person: str | None = None,
    after: date | None = None,
    before: date | None = None,
) -> RecallView:
    """Search the channel's original messages; each hit with the messages around it.

    The question is read as eva.core.recall_query reads it: its content
    words, and the times it names (as asked at `now_ms`, by default now),
    which the search keeps to unless no message there matches. The people
    it names (eva.core.recall_search.people_named) have their own messages
    count as if they said the name.

    `person` (a display name, as recall shows it), `after` and `before`
    (days in the channel's time zone: from `after` on, before `before`) keep
    the search to that person's messages and those days, whatever the
    question says.
    """
    meta = store.meta(stream)
    tz = channel_zone(meta, settings)
    asked_ms = int(time.time() * 1000) if now_ms is None else now_ms
    with store.backend.reading() as tables:
        hidden = withheld(tables, stream, meta, store.hashes)
        messages = meta.messages if meta is not None else 0

        read: dict[int, StoredMessage | None] = {}  # each message read once a recall

        def message_at(index: int) -> ShownMessage | None:
            if index not in read:
                read[index] = read_message(tables, stream, index)
            message = read[index]
            return None if message is None or index in hidden else shown(index, message)

        first_ms, last_ms = _time_at(tables, stream, 0), _time_at(tables, stream, messages - 1)
        question = read_query(query, tz, asked_ms, first_ms, last_ms)
        position = meta.position if meta is not None else 0
        unindexed = _unindexed(store, tables, stream, position, messages, hidden)
        chosen = after is not None or before is not None
        spans = (
            ((_day_ms(after, tz, first_ms), _day_ms(before, tz, last_ms + 1)),)
            if chosen
            else question.spans
        )
        within = index_ranges(spans, lambda index: _time_at(tables, stream, index), messages)
        if chosen and not within:  # no message was posted on those days
            return RecallView(query=query, total=0, shown_hits=0, more=0, windows=())
        result = _searched(
            tables, stream, question.words, unindexed, person, within, chosen, hidden
        )

        def index_of(message_id: int) -> int | None:
            data = tables.get("discord_ids", discord_id_key(stream, message_id))
            return None if data is None else decode_u64(data)

        return recall_view(
            query, result, message_at, cap_bytes=cap_bytes, tz=tz, index_of=index_of
        )


def _searched(
    tables: Tables,
    stream: StreamId,
    words: tuple[bytes, ...],
    unindexed: OpenChunk,
    person: str | None,
    within: list[tuple[int, int]],
    chosen: bool,
    hidden: frozenset[int],
) -> SearchResult:
    """The hits for the question's words: the people it names count their own messages,
    `person` keeps to theirs; within the times asked (`chosen`) or named, and when the
    question's own times hold nothing, at any time; a time the question names with few
    hits adds what else was said then."""
    mark = AUTHOR_MARK.encode()
    by = [mark + word for word in term_bytes(person.removeprefix("@"))] if person else []
    named = people_named(tables, stream, words, unindexed)
    marks = [mark for found in named.values() for mark in found]
    boost = AUTHOR_ALONE_BOOST if set(words) <= set(named) else AUTHOR_BOOST

    def searched(within: list[tuple[int, int]]) -> SearchResult:
        return search(
            tables, stream, words, RECALL_HITS, unindexed,
            within=within, authors=marks, author_boost=boost, written_by=by,
        )

    result = searched(within)
    if within and not result.hits and not chosen:  # nothing said then: search every time
        result = searched([])
    elif within and len(result.hits) < RECALL_HITS and not (by or chosen):
        # a time the question names: what else was said then
        found = {index for index, _ in result.hits}
        longest = longest_within(tables, stream, within, RECALL_HITS, hidden | found)
        extra = [(index, 0.0) for index in longest[: RECALL_HITS - len(found)]]
        result = SearchResult([*result.hits, *extra], result.total)
    return result


def _unindexed(
    store: EventStore,
    tables: Tables,
    stream: StreamId,
    position: int,
    messages: int,
    hidden: frozenset[int],
) -> OpenChunk:
    """The channel's messages past the recall index, gathered for search: kept for the
    next recall while the channel stands still at `position`."""
    key = (stream, position, hidden)
    chunks = _open_chunks.setdefault(store.backend, {})
    unindexed = chunks.get(key)
    if unindexed is None:
        open_chunk = read_messages(tables, stream, indexed_upto(stream, messages), messages)
        unindexed = chunks[key] = OpenChunk(
            (index, index_text(posted.author_name, message.content, message.attachments))
            for index, message in open_chunk
            if index not in hidden
            for posted in (message.posted,)
        )
        while len(chunks) > OPEN_CHUNKS_KEPT:
            del chunks[next(iter(chunks))]
    return unindexed


def _day_ms(day: date | None, tz: tzinfo, default: int) -> int:
    """When `day` begins in `tz`, in UTC milliseconds (`default` for no day)."""
    if day is None:
        return default
    return int(datetime(day.year, day.month, day.day, tzinfo=tz).timestamp() * 1000)


def _time_at(tables: Tables, stream: StreamId, index: int) -> int:
    """When message `index` was posted (the nearest stored one after it, if it has gone)."""
    for probe in range(index, index + 64):
        message = read_message(tables, stream, probe) if probe >= 0 else None
        if message is not None:
            return message.posted.at_ms
    return 0


def _pages(text: str, page_bytes: int) -> list[str]:
    pages = []
    rest = text
    while len(rest.encode()) > page_bytes:
        head = cut_to_bytes(rest, page_bytes)
        if not head:
            break
        pages.append(head)
        rest = rest[len(head) :].lstrip(" ")
    pages.append(rest)
    return pages
