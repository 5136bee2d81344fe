# Projections: how each event changes the derived tables of its stream.
#
# Pure: it reads and writes through the `Tables` protocol and never touches a
# file, a clock or a lock. The store calls it inside the same write
# transaction that appends the events, so the log and its projections never
# disagree. Invariants: an event is applied only at the stream's position
# (applying one twice is an error); an event that does not fit the state is
# rejected with `Rejected` before anything of its batch is kept.
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import assert_never

from eva.core import keys
from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    ErasureUnproven,
    ForgetApplied,
    ForgetRequested,
    LineWritten,
    LogRewritten,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    MessagesErased,
    ReplyWritten,
    RowPublished,
    ToolCalled,
    decode_event,
)
from eva.core.keys import StreamId
from eva.core.recall_index import POSTINGS, PostingBuffer
from eva.core.render import LINE_LIMIT_BYTES, render_message, utf8_size
from eva.core.slots import add_slots, put_slot, read_slot, read_slots
from eva.core.state import (
    LineSlot,
    MessageSlot,
    StreamMeta,
    decode_meta,
    encode_record,
)
from eva.core.tables import Tables
from eva.core.terms import author_words

INDEX_CHUNK = 512
"""Messages enter the recall index in whole chunks of this many, when a chunk fills.

Indexing a chunk at once writes each of its words' keys once, not once per
message; recall reads the messages of the open chunk directly. Where the
chunks start is shifted per channel, so that channels busy at once do not
all fill a chunk in the same commit."""


def chunk_shift(stream: StreamId) -> int:
    """How far a stream's chunk boundaries sit before the multiples of INDEX_CHUNK."""
    mixed = (stream.channel_id * 0x9E3779B97F4A7C15) & 0xFFFF_FFFF_FFFF_FFFF
    return (mixed >> 32) % INDEX_CHUNK


def indexed_upto(stream: StreamId, messages: int) -> int:
    """How many of a stream's first messages the recall index covers: its whole chunks."""
    return max(0, messages - (messages + chunk_shift(stream)) % INDEX_CHUNK)


class Rejected(ValueError):
    """An event that cannot be applied to the stream as it stands."""


def read_meta(tables: Tables, stream: StreamId) -> StreamMeta | None:
    data = tables.get("streams", keys.stream_prefix(stream))
    return None if data is None else decode_meta(data)


class Projector:
    """Applies events to the projection tables of one transaction.

    Stream records are cached while a batch is applied and written by `flush`,
    so a batch of many events costs one read and one write of each record.
    A caller that knows the records as the tables hold them (`known_metas`,
    see EventStore) lends them: the projector takes each out of that mapping
    as it first needs it, and the records it ends with are `metas`.
    The recall index's changes are collected in a `PostingBuffer`: the
    projector's own, written into the tables by `flush`, or one the caller
    passes in and writes itself.
    """

    def __init__(
        self,
        tables: Tables,
        postings: PostingBuffer | None = None,
        known_lines: Mapping[bytes, bool] | None = None,
        known_metas: dict[StreamId, StreamMeta] | None = None,
    ) -> None:
        self._tables = tables
        # Whether lines exist, by key, as the tables held them before this transaction,
        # where the caller knows it (see EventStore): asked before the tables.
        self._known_lines = known_lines
        self._known_metas = known_metas
        self._metas: dict[StreamId, StreamMeta] = {}
        self._writes_postings = postings is None
        self._postings = PostingBuffer() if postings is None else postings
        # Texts of the open chunk's messages posted or edited in this
        # transaction (None once erased), so filling a chunk reads few events.
        self._open_texts: dict[StreamId, dict[int, str | None]] = {}
        # Whether each line looked up or written in this transaction exists, by key: a
        # merge, its halves and their siblings are asked about again and again.
        self._lines: dict[bytes, bool] = {}

    def meta(self, stream: StreamId) -> StreamMeta:
        """The stream's record as it stands in this transaction (new if unknown)."""
        meta = self._metas.get(stream)
        if meta is None:
            known = self._known_metas
            meta = known.pop(stream, None) if known is not None else None
            if meta is None:
                meta = read_meta(self._tables, stream) or StreamMeta(
                    guild_id=stream.guild_id, channel_id=stream.channel_id
                )
            self._metas[stream] = meta
        return meta

    @property
    def metas(self) -> dict[StreamId, StreamMeta]:
        """The stream records this transaction used, as they stand now."""
        return self._metas

    @property
    def lines_seen(self) -> dict[bytes, bool]:
        """Whether each line looked up or written in this transaction exists, by key."""
        return self._lines

    def flush(self) -> None:
        """Write the recall index (if the projector's own) and the cached stream records.

        An empty stream gets no record.
        """
        if self._writes_postings:
            self._postings.flush(self._tables)
        for stream, meta in self._metas.items():
            if meta.position > 0:
                self._tables.put("streams", keys.stream_prefix(stream), encode_record(meta))

    def apply(self, stream: StreamId, seq: int, event: AnyEvent) -> None:
        """Apply one event stored at `seq`; raises Rejected if it does not fit."""
        meta = self.meta(stream)
        if seq != meta.position:
            raise Rejected(f"{stream}: event {seq} applied at position {meta.position}")
        match event:
            case MessagePosted():
                self._posted(stream, meta, seq, event)
            case MessageEdited():
                self._edited(stream, meta, seq, event)
            case MessageDeleted():
                self._deleted(stream, meta, event)
            case LineWritten():
                self._line(stream, meta, seq, event)
            case RowPublished():
                self._row(stream, meta, event)
            case ChannelDescribed():
                meta.guild_name = event.guild_name
                meta.channel_name = event.channel_name
                meta.time_zone = event.time_zone
            case MessagesErased():
                self._erased(stream, meta, event)
            case ForgetRequested():
                if event.person_hash not in meta.forgetting:
                    meta.forgetting.append(event.person_hash)
                meta.forgotten[event.person_hash] = max(
                    event.at_ms, meta.forgotten.get(event.person_hash, event.at_ms)
                )
            case ForgetApplied():
                if event.person_hash in meta.forgetting:
                    meta.forgetting.remove(event.person_hash)
            case ReplyWritten():
                if event.month != meta.reply_month:
                    meta.reply_month, meta.replies = event.month, 0
                meta.replies += 1
            case LogRewritten():
                meta.unpurged = 0
            case ToolCalled() | ErasureUnproven():
                pass
            case _:
                assert_never(event)
        meta.position = seq + 1

    def apply_all(self, stream: StreamId, first_seq: int, events: Iterable[AnyEvent]) -> None:
        """Apply events stored one after the other from `first_seq` on, runs of posts at once."""
        seq = first_seq
        posts: list[MessagePosted] = []
        meta = self.meta(stream)
        for event in events:
            if isinstance(event, MessagePosted):
                posts.append(event)
                continue
            if posts:
                self.apply_posts(stream, seq, posts)
                seq += len(posts)
                posts = []
            if isinstance(event, LineWritten) and seq == meta.position:  # a run's lines
                self._line(stream, meta, seq, event)
                meta.position = seq + 1
            else:
                self.apply(stream, seq, event)
            seq += 1
        if posts:
            self.apply_posts(stream, seq, posts)

    def apply_posts(
        self, stream: StreamId, first_seq: int, events: Sequence[MessagePosted]
    ) -> None:
        """Apply messages posted one after the other, stored from `first_seq` on.

        The same as applying each in turn, with the same errors, at a fraction of the
        cost: a run of posts is most of what any stream holds. A run of one (the
        common batch while many channels are busy) goes the way `apply` takes, which
        builds no lists for it.
        """
        meta = self.meta(stream)
        count, first_index = len(events), meta.messages
        if not count:
            return
        if count == 1 and first_seq == meta.position:
            self._posted(stream, meta, first_seq, events[0])
            meta.position = first_seq + 1
            return
        ids = [event.message_id for event in events]
        in_range = min(ids) >= 0 and max(ids) <= keys.MAX_U64
        id_keys = keys.discord_id_keys(stream, ids) if in_range else []
        tables = self._tables
        if (
            first_seq != meta.position
            or [event.index for event in events] != list(range(first_index, first_index + count))
            or len(id_keys) != count
            or len(set(ids)) != count
            or tables.holds_any("discord_ids", id_keys)
        ):  # something does not fit: find and report it as `apply` does
            for offset, event in enumerate(events):
                self.apply(stream, first_seq + offset, event)
            return
        encode_u64 = keys.encode_u64
        tables.put_many(
            "discord_ids",
            zip(id_keys, map(encode_u64, range(first_index, first_index + count)), strict=True),
        )
        sizes = [rendered_size(e.author_name, e.content, e.attachments) for e in events]
        slots = [
            MessageSlot(posted_seq=seq, content_seq=seq, size=size)
            for seq, size in zip(range(first_seq, first_seq + count), sizes, strict=True)
        ]
        add_slots(tables, stream, meta, slots)
        if first_index == 0:
            meta.first_ms = events[0].at_ms
        meta.last_ms = max(meta.last_ms, max(event.at_ms for event in events))
        added = sum(sizes)
        meta.unleafed_bytes += added
        meta.tail_bytes += added
        texts = self._open_texts.get(stream)
        if texts is None:
            texts = self._open_texts[stream] = {}
        texts.update(
            zip(
                range(first_index, first_index + count),
                [index_text(e.author_name, e.content, e.attachments) for e in events],
                strict=True,
            )
        )
        end = first_index + count
        # Each chunk that fills: from the first chunk end past first_index on.
        chunk_end = first_index + 1 + (-(first_index + 1 + chunk_shift(stream))) % INDEX_CHUNK
        while chunk_end <= end:
            self._index_chunk(stream, meta, max(0, chunk_end - INDEX_CHUNK), chunk_end)
            chunk_end += INDEX_CHUNK
        meta.position = first_seq + count

    def _posted(self, stream: StreamId, meta: StreamMeta, seq: int, event: MessagePosted) -> None:
        index, message_id, at_ms = event.index, event.message_id, event.at_ms
        if index != meta.messages:
            raise Rejected(f"{stream}: message index {index}, expected {meta.messages}")
        if not 0 <= message_id <= keys.MAX_U64:
            raise Rejected(f"{stream}: message id {message_id} is out of range")
        tables = self._tables
        id_key = keys.discord_id_key(stream, message_id)
        if tables.get("discord_ids", id_key) is not None:
            raise Rejected(f"{stream}: message id {message_id} is already stored")
        tables.put("discord_ids", id_key, keys.encode_u64(index))
        size = rendered_size(event.author_name, event.content, event.attachments)
        add_slots(tables, stream, meta, [MessageSlot(posted_seq=seq, content_seq=seq, size=size)])
        if index == 0:
            meta.first_ms = at_ms
        if at_ms > meta.last_ms:
            meta.last_ms = at_ms
        meta.unleafed_bytes += size
        meta.tail_bytes += size
        self._open_text(
            stream, index, index_text(event.author_name, event.content, event.attachments)
        )
        if indexed_upto(stream, meta.messages) == meta.messages:
            self._index_chunk(stream, meta, max(0, meta.messages - INDEX_CHUNK), meta.messages)

    def _open_text(self, stream: StreamId, index: int, text: str | None) -> None:
        texts = self._open_texts.get(stream)
        if texts is None:
            texts = self._open_texts[stream] = {}
        texts[index] = text

    def _index_chunk(self, stream: StreamId, meta: StreamMeta, start: int, stop: int) -> None:
        """Index the messages start..stop-1 that are not erased, with their text now."""
        texts = self._open_texts.get(stream, {})
        for index in range(start, stop):
            if index in texts:
                text = texts.pop(index)
            else:
                slot = read_slot(self._tables, stream, meta, index)
                if slot is None:
                    raise Rejected(f"{stream}: message {index} is missing from its chunk")
                text = None if slot.deleted else self._indexed(stream, slot)
            if text is not None:
                self._postings.add(stream, index, text)

    def _reindex(
        self, stream: StreamId, meta: StreamMeta, index: int, old: MessageSlot, text: str | None
    ) -> None:
        """Message `index` says `text` now (None: erased); `old` is its slot before."""
        if index >= indexed_upto(stream, meta.messages):
            self._open_text(stream, index, text)  # its chunk is indexed when it fills
            return
        self._postings.remove(stream, index, self._indexed(stream, old))
        if text is not None:
            self._postings.add(stream, index, text)

    def _slot(self, stream: StreamId, meta: StreamMeta, index: int, message_id: int) -> MessageSlot:
        if not (0 <= index <= keys.MAX_U64 and 0 <= message_id <= keys.MAX_U64):
            raise Rejected(f"{stream}: no message {message_id} at index {index}")
        slot = read_slot(self._tables, stream, meta, index)
        stored = self._tables.get("discord_ids", keys.discord_id_key(stream, message_id))
        if slot is None or stored is None or keys.decode_u64(stored) != index:
            raise Rejected(f"{stream}: no message {message_id} at index {index}")
        return slot

    def _edited(self, stream: StreamId, meta: StreamMeta, seq: int, event: MessageEdited) -> None:
        slot = self._slot(stream, meta, event.index, event.message_id)
        if slot.deleted:
            raise Rejected(f"{stream}: message {event.index} was deleted; it cannot be edited")
        posted = self._posted_event(stream, slot)
        size = rendered_size(posted.author_name, event.content, event.attachments)
        self._resize(meta, event.index, slot.size, size)
        text = index_text(posted.author_name, event.content, event.attachments)
        self._reindex(stream, meta, event.index, slot, text)
        slot.content_seq = seq
        slot.size = size
        put_slot(self._tables, stream, meta, event.index, slot)
        self._mark_stale(stream, meta, event.index)
        meta.unpurged += 1

    def _deleted(self, stream: StreamId, meta: StreamMeta, event: MessageDeleted) -> None:
        slot = self._slot(stream, meta, event.index, event.message_id)
        if not slot.deleted:
            self._erase(stream, meta, event.index, slot)
        meta.unpurged += 1

    def _erased(self, stream: StreamId, meta: StreamMeta, event: MessagesErased) -> None:
        for index in event.indexes:
            slot = read_slot(self._tables, stream, meta, index)
            if slot is None:
                raise Rejected(f"{stream}: no message at index {index} to erase")
            if not slot.deleted:
                self._erase(stream, meta, index, slot)

    def _erase(self, stream: StreamId, meta: StreamMeta, index: int, slot: MessageSlot) -> None:
        """Make a message an erased slot: no text, no size, no postings, lines above stale."""
        self._resize(meta, index, slot.size, 0)
        self._reindex(stream, meta, index, slot, None)
        slot.deleted = True
        slot.size = 0
        meta.deleted += 1
        put_slot(self._tables, stream, meta, index, slot)
        self._mark_stale(stream, meta, index)

    def _mark_stale(self, stream: StreamId, meta: StreamMeta, index: int) -> None:
        """Mark the leaf of `index` and every line above it as due to be made again.

        Every existing ancestor of a stale line is stale already (a line made
        over a stale half is stale itself), so the walk stops at the first one.
        """
        start, size = index, 1
        while self._has_line(stream, meta, start, size):
            key = keys.stale_key(stream, start, size)
            if self._tables.get("stale", key) is not None:
                return
            self._tables.put("stale", key, b"")
            meta.stale += 1
            size *= 2
            start -= start % size

    @staticmethod
    def _resize(meta: StreamMeta, index: int, old: int, new: int) -> None:
        if index >= meta.leaf_frontier:
            meta.unleafed_bytes += new - old
        if index >= meta.row_frontier:
            meta.tail_bytes += new - old

    def _posted_event(self, stream: StreamId, slot: MessageSlot) -> MessagePosted:
        data = self._tables.get("events", keys.event_key(stream, slot.posted_seq))
        event = None if data is None else decode_event(data)
        if not isinstance(event, MessagePosted):
            raise Rejected(f"{stream}: event {slot.posted_seq} is not the message it should be")
        return event

    def _indexed(self, stream: StreamId, slot: MessageSlot) -> str:
        """The text the recall index holds for a message now."""
        data = self._tables.get("events", keys.event_key(stream, slot.content_seq))
        event = None if data is None else decode_event(data)
        if not isinstance(event, MessagePosted | MessageEdited):
            raise Rejected(f"{stream}: event {slot.content_seq} holds no message text")
        posted = event if isinstance(event, MessagePosted) else self._posted_event(stream, slot)
        return index_text(posted.author_name, event.content, event.attachments)

    def _size(self, stream: StreamId, meta: StreamMeta, index: int) -> int:
        slot = read_slot(self._tables, stream, meta, index)
        return 0 if slot is None else slot.size

    def _line(self, stream: StreamId, meta: StreamMeta, seq: int, event: LineWritten) -> None:
        size, start = event.size, event.start
        if size < 1 or size & (size - 1) or start < 0 or start % size:
            raise Rejected(f"{stream}: bad line address {start}+{size}")
        if start + size > meta.messages:
            raise Rejected(
                f"{stream}: line {start}+{size} passes the last message ({meta.messages - 1})"
            )
        if utf8_size(event.text) > LINE_LIMIT_BYTES:
            raise Rejected(f"{stream}: line {start}+{size} is over {LINE_LIMIT_BYTES} bytes")
        tables = self._tables
        if size > 1:
            half = size // 2
            if not (
                self._has_line(stream, meta, start, half)
                and self._has_line(stream, meta, start + half, half)
            ):
                raise Rejected(f"{stream}: line {start}+{size} is written before its halves")
        # A merge's key in `ready` is its line's key (keys.line_key).
        line_key = keys.line_key(stream, start, size)
        tables.put("lines", line_key, encode_record(LineSlot(seq)))
        self._lines[line_key] = True
        meta.lines += 1
        if meta.stale:  # with no stale line in the stream, none can be stale now
            self._restale(stream, meta, start, size)
        # only merges are ever ready
        if size > 1 and meta.ready and tables.get("ready", line_key) is not None:
            tables.delete("ready", line_key)
            meta.ready -= 1
        parent_size = size * 2
        parent_start = start - start % parent_size
        if parent_start + parent_size <= meta.messages and self._has_line(
            stream, meta, start ^ size, size
        ):
            parent_key = keys.line_key(stream, parent_start, parent_size)
            if not self._has_key(parent_key):
                tables.put("ready", parent_key, b"")
                meta.ready += 1
        if size == 1 and start == meta.leaf_frontier:
            frontier = start
            while frontier < meta.messages and self._has_line(stream, meta, frontier, 1):
                meta.unleafed_bytes -= self._size(stream, meta, frontier)
                frontier += 1
            meta.leaf_frontier = frontier

    def _restale(self, stream: StreamId, meta: StreamMeta, start: int, size: int) -> None:
        """A line written over a stale half is stale too; one made from fresh halves is not."""
        key = keys.stale_key(stream, start, size)
        was_stale = self._tables.get("stale", key) is not None
        half_stale = size > 1 and any(
            self._tables.get("stale", keys.stale_key(stream, half, size // 2)) is not None
            for half in (start, start + size // 2)
        )
        if half_stale and not was_stale:
            self._tables.put("stale", key, b"")
            meta.stale += 1
        elif was_stale and not half_stale:
            self._tables.delete("stale", key)
            meta.stale -= 1

    def _has_line(self, stream: StreamId, meta: StreamMeta, start: int, size: int) -> bool:
        """Whether a line exists: a leaf before the leaf frontier without a look (every
        message before it has one, and a line once written is never taken away)."""
        if size == 1 and start < meta.leaf_frontier:
            return True
        return self._has_key(keys.line_key(stream, start, size))

    def _has_key(self, key: bytes) -> bool:
        """Whether the line with `line_key` `key` exists."""
        known = self._lines.get(key)
        if known is None:
            if self._known_lines is not None:
                known = self._known_lines.get(key)
            if known is None:
                known = self._tables.get("lines", key) is not None
            self._lines[key] = known
        return known

    def _row(self, stream: StreamId, meta: StreamMeta, event: RowPublished) -> None:
        covered = 0
        for start, size in event.entries:
            if start != covered or size < 1 or size & (size - 1) or start % size:
                raise Rejected(f"row entry {start}+{size} does not continue at {covered}")
            if not self._has_line(stream, meta, start, size):
                raise Rejected(f"{stream}: row entry {start}+{size} has no line")
            covered += size
        if covered != event.frontier or event.frontier > meta.messages:
            raise Rejected(
                f"row covers {covered} messages, frontier {event.frontier}, "
                f"stream has {meta.messages}"
            )
        old, new = meta.row_frontier, event.frontier
        low, high = min(old, new), max(old, new)
        if meta.messages - new < high - low:  # the new tail is the shorter read: a build's
            # first row moves a whole channel out of the tail
            tail = read_slots(self._tables, stream, meta, new, meta.messages)
            meta.tail_bytes = sum(slot.size for _, slot in tail)
        else:
            moved = sum(slot.size for _, slot in read_slots(self._tables, stream, meta, low, high))
            meta.tail_bytes += moved if new < old else -moved
        meta.row_frontier = new
        meta.row_bytes = event.row_bytes
        meta.row_seq = meta.position


def index_again(tables: Tables) -> None:
    """Build every stream's recall index anew from the messages it holds.

    For a data directory indexed before the index held authors' names
    (`index_text`): the same postings a replay of the log gives.
    """
    for key, data in list(tables.scan("streams", b"", b"\xff" * 17)):
        meta = decode_meta(data)
        stream = keys.stream_of(key)
        prefix = keys.stream_prefix(stream)
        for old, _ in list(tables.scan(POSTINGS, prefix, keys.prefix_end(prefix))):
            tables.delete(POSTINGS, old)
        projector = Projector(tables)
        for index, slot in read_slots(tables, stream, meta, 0, indexed_upto(stream, meta.messages)):
            if not slot.deleted:
                projector._postings.add(stream, index, projector._indexed(stream, slot))
        projector.flush()


def indexed_text(content: str, attachments: tuple[str, ...]) -> str:
    """What recall searches in a message: its text and its attachments' names."""
    return " ".join((content, *attachments)) if attachments else content


def index_text(author_name: str, content: str, attachments: tuple[str, ...]) -> str:
    """What the recall index holds for a message: `indexed_text` and its author's name
    words behind their mark (eva.core.terms.author_words)."""
    return f"{indexed_text(content, attachments)} {author_words(author_name)}"


def rendered_size(name: str, content: str, attachments: tuple[str, ...]) -> int:
    """Bytes of a message as its leaf would read it (`render_message`, encoded)."""
    if attachments:
        return len(render_message(name, content, attachments).encode())
    return utf8_size(name) + 2 + utf8_size(content)
