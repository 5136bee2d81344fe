# Forget planning: whose messages go, which stored events must lose their words, what to prove.
#
# Pure: it reads the projections through the `Tables` protocol and returns
# values; it never writes, and never keeps a person's words anywhere but in the
# values it returns to the caller, who holds them in memory only.
# Invariants: a rewritten event keeps its tag, sequence number, indexes, ids
# and times, so the stream stays replayable and replay still equals the live
# projections; only words (texts, names, attachment names) and the author ids
# of superseded lines are removed.
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Iterator
from itertools import islice

import ahocorasick
import msgspec

from eva.core import keys
from eva.core.events import (
    AnyEvent,
    ForgetRequested,
    LineWritten,
    LogRewritten,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    decode_event,
)
from eva.core.keys import StreamId
from eva.core.projection import read_meta
from eva.core.sealed_events import keys_destroyed
from eva.core.slots import read_slot, read_slots
from eva.core.state import (
    MessageSlot,
    StreamMeta,
    decode_line_slot,
    decode_meta,
    encode_record,
)
from eva.core.tables import Tables

_PEPPER = b"eva-forget-v1:"
PROOF_MIN_BYTES = 8
PIECE_CHARS = 4096
"""The longest string put in a text search's automaton: a longer text is looked for as
pieces of this length (its last piece the last PIECE_CHARS characters), each of which
found counts as the text found. The automaton's builder overflows its stack on a
string of some 550,000 characters."""


def pieces(text: str) -> list[str]:
    """`text` cut for a search (see PIECE_CHARS)."""
    if len(text) <= PIECE_CHARS:
        return [text]
    cut = [text[at : at + PIECE_CHARS] for at in range(0, len(text) - PIECE_CHARS, PIECE_CHARS)]
    return [*cut, text[-PIECE_CHARS:]]


def person_hash(person_id: int) -> str:
    """The id a forget was recorded under before records were keyed: a hash of the
    Discord user id with no secret (anyone with a member list can recompute it)."""
    return hashlib.sha256(_PEPPER + str(person_id).encode()).hexdigest()[:24]


class PersonHashes:
    """The ids a person's forgets are recorded under.

    With a secret (from the key store, outside the data directory) a new record is
    hashed with it: the data files and a member list do not tell who was forgotten.
    A record written before that carries the unkeyed `person_hash`; both still match.
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret
        self._known: dict[int, tuple[str, ...]] = {}

    def recorded(self, person_id: int) -> str:
        """The hash a new record of this person carries."""
        return self.all_of(person_id)[0]

    def all_of(self, person_id: int) -> tuple[str, ...]:
        """Every hash a record of this person may carry, the one new records use first."""
        known = self._known.get(person_id)
        if known is None:
            legacy = person_hash(person_id)
            if self.secret is None:
                known = (legacy,)
            else:
                keyed = hmac.new(self.secret, str(person_id).encode(), hashlib.sha256)
                known = (keyed.hexdigest()[:24], legacy)
            if len(self._known) < 1 << 16:
                self._known[person_id] = known
        return known


UNKEYED = PersonHashes()
"""The hashes of a data directory no key store was ever given."""


class Forgotten:
    """Whether a message belongs to what a person asked to be forgotten: written by them at
    or before their latest forget request in the channel (StreamMeta.forgotten).

    A person who forgot themselves comes back only through what they write after it.
    """

    def __init__(self, forgotten: dict[str, int], hashes: PersonHashes) -> None:
        self.forgotten = forgotten
        self.hashes = hashes

    def __call__(self, author_id: int, at_ms: int) -> bool:
        if not self.forgotten:
            return False
        return any(
            at_ms <= self.forgotten.get(person, -1) for person in self.hashes.all_of(author_id)
        )


def record_forgotten(tables: Tables) -> None:
    """Give each stream's record the times its forgotten people asked, read off its log.

    For a data directory written before records kept them: the same values a
    replay of the log gives (eva.core.projection), so replay still agrees.
    """
    tag = b"forget.requested"
    for key, data in list(tables.scan("streams", b"", b"\xff" * 17)):
        meta = decode_meta(data)
        stream = keys.stream_of(key)
        prefix = keys.stream_prefix(stream)
        for _, raw in tables.scan("events", prefix, keys.prefix_end(prefix)):
            if tag not in raw:
                continue
            event = decode_event(raw)
            if isinstance(event, ForgetRequested):
                meta.forgotten[event.person_hash] = max(
                    event.at_ms, meta.forgotten.get(event.person_hash, event.at_ms)
                )
        tables.put("streams", key, encode_record(meta))


def person_messages(
    tables: Tables, stream: StreamId, person: str, hashes: PersonHashes
) -> tuple[int, ...]:
    """The indexes of the not yet erased messages of the person whose hash is `person`."""
    meta = read_meta(tables, stream)
    if meta is None:
        return ()
    indexes: list[int] = []
    for index, slot in read_slots(tables, stream, meta, 0, meta.messages):
        if slot.deleted:
            continue
        posted = _event(tables, stream, slot.posted_seq)
        assert isinstance(posted, MessagePosted)
        # one whose keys are destroyed is nobody's any more (a copy made before a forget,
        # restored): whatever forget comes next erases it
        if person in hashes.all_of(posted.author_id) or keys_destroyed(posted):
            indexes.append(index)
    return tuple(indexes)


def stored_texts(
    tables: Tables, stream: StreamId, person: str, hashes: PersonHashes
) -> list[str]:
    """Every text of the person still held by a stored event (posts and edits, live or not).

    Run before the log is rewritten, this is what a forget must prove gone;
    after a crash it still finds what the interrupted forget had not erased.
    """
    prefix = keys.stream_prefix(stream)
    theirs: set[int] = set()
    texts: list[str] = []
    for _, data in tables.scan("events", prefix, keys.prefix_end(prefix)):
        event = decode_event(data)
        if isinstance(event, MessagePosted):
            if person not in hashes.all_of(event.author_id):
                continue
            theirs.add(event.index)
        elif not (isinstance(event, MessageEdited) and event.index in theirs):
            continue
        texts.append(event.content)
        texts.extend(event.attachments)
    return [text for text in texts if text]


def _event(tables: Tables, stream: StreamId, seq: int) -> AnyEvent:
    data = tables.get("events", keys.event_key(stream, seq))
    if data is None:
        raise LookupError(f"{stream}: event {seq} is missing")
    return decode_event(data)


def purge_plan(tables: Tables, stream: StreamId) -> Iterator[tuple[int, AnyEvent, AnyEvent]]:
    """The stored events that still hold words no projection uses: (position, the event,
    the event without them).

    That is: the texts of erased messages, old texts of edited messages, and
    superseded lines (lines made again after a forget, a deletion or an edit).
    """
    meta = read_meta(tables, stream)
    if meta is None:
        return
    prefix = keys.stream_prefix(stream)
    for key, data in tables.scan("events", prefix, keys.prefix_end(prefix)):
        event = decode_event(data)
        seq = keys.seq_of(key)
        cleaned = _cleaned(tables, stream, meta, seq, event)
        if cleaned is not None:
            yield seq, event, cleaned


def count_unpurged(tables: Tables) -> None:
    """Count in each stream's record the deletions and edits since its log was last
    rewritten (StreamMeta.unpurged), as the projection counts them: for a data directory
    written before the record kept that count."""
    for key, data in list(tables.scan("streams", b"", b"\xff" * 17)):
        meta = decode_meta(data)
        stream = keys.stream_of(key)
        prefix = keys.stream_prefix(stream)
        count = 0
        for _, stored in tables.scan("events", prefix, keys.prefix_end(prefix)):
            match decode_event(stored):
                case MessageDeleted() | MessageEdited():
                    count += 1
                case LogRewritten():
                    count = 0
                case _:
                    pass
        if count != meta.unpurged:
            meta.unpurged = count
            tables.put("streams", key, encode_record(meta))


def purged_texts(before: AnyEvent, after: AnyEvent) -> list[str]:
    """The message texts a purge takes out of an event (what a file scan then looks for):
    a deleted or edited-away message's words and attachment names; none of a line's."""
    if not isinstance(before, MessagePosted | MessageEdited) or not isinstance(
        after, MessagePosted | MessageEdited
    ):
        return []
    if (before.content, before.attachments) == (after.content, after.attachments):
        return []
    return [text for text in (before.content, *before.attachments) if text]


def _cleaned(
    tables: Tables, stream: StreamId, meta: StreamMeta, seq: int, event: AnyEvent
) -> AnyEvent | None:
    cleaned = _wordless(tables, stream, meta, seq, event)
    if keys_destroyed(event):  # read blank, but its words are still there, sealed: they go
        return msgspec.structs.replace(cleaned if cleaned is not None else event, sealed=b"")
    return cleaned


def _wordless(
    tables: Tables, stream: StreamId, meta: StreamMeta, seq: int, event: AnyEvent
) -> AnyEvent | None:
    match event:
        case MessagePosted():
            slot = _slot(tables, stream, meta, event.index)
            if slot.deleted:
                wordless = msgspec.structs.replace(  # nor who wrote it: no trace of a forget
                    event, author_id=0, author_name="", content="", attachments=(),
                    reply_to=None,
                )
            elif slot.content_seq != seq:
                wordless = msgspec.structs.replace(event, content="", attachments=())
            else:
                return None
            return None if wordless == event else wordless
        case MessageEdited():
            slot = _slot(tables, stream, meta, event.index)
            if slot.deleted or slot.content_seq != seq:
                blank = msgspec.structs.replace(event, content="", attachments=())
                return None if blank == event else blank
            return None
        case LineWritten():
            data = tables.get("lines", keys.line_key(stream, event.start, event.size))
            current = data is not None and decode_line_slot(data).seq == seq
            if current or (not event.text and not event.authors):
                return None
            return msgspec.structs.replace(event, text="", authors=())
        case _:
            return None


def _slot(tables: Tables, stream: StreamId, meta: StreamMeta, index: int) -> MessageSlot:
    slot = read_slot(tables, stream, meta, index)
    if slot is None:
        raise LookupError(f"{stream}: no message at index {index}")
    return slot


def proof_texts(forgotten: list[str], surviving: Iterable[str]) -> list[str]:
    """The forgotten texts a file scan can look for without false alarms.

    Texts under PROOF_MIN_BYTES are too common to prove anything, and a text
    that someone else also wrote (it appears in a surviving text) may rightly
    stay; the rest must appear nowhere, but for `joined_from`. One pass over
    the surviving texts, read `SURVIVING_BATCH` at a time, finds them all.
    """
    candidates = [
        text
        for text in dict.fromkeys(t.strip() for t in forgotten)
        if len(text.encode()) >= PROOF_MIN_BYTES
    ]
    if not candidates:
        return []
    automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
    for number, text in enumerate(candidates):
        for piece in pieces(text):
            automaton.add_word(piece, number)
    automaton.make_automaton()
    shared: set[int] = set()
    texts = iter(surviving)
    while batch := list(islice(texts, SURVIVING_BATCH)):
        shared.update(number for _, number in automaton.iter("\0".join(batch)))
    return [text for number, text in enumerate(candidates) if number not in shared]


SURVIVING_BATCH = 10_000
"""Surviving texts searched together by `proof_texts` (joined by NULs, which no text
holds a match across)."""


JOIN_SPACES_MOST = 32
"""Spaces in a text beyond which `joined_from` does not look for joins in it."""


def join_corpus(surviving: Iterable[str]) -> str:
    """The surviving texts for `joined_from`: white space collapsed, each between NULs."""
    collapsed = (" ".join(text.split()) for text in surviving)
    return "\0" + "\0".join(text for text in collapsed if text) + "\0"


def joined_from(text: str, corpus: str) -> bool:
    """Whether `text` can be read across the joins of surviving texts (`join_corpus`).

    A line joins the utterances it keeps with a space (eva.core.summarize), so it
    can hold a text nobody wrote: "So its open source" and "?" read "So its open
    source ?", which holds "open source ?". Such a text is the end of one
    surviving text, then whole ones, then the start of another, each part
    between spaces of `text`. Found in a file, it proves nothing, and a scan
    that found only such texts found no words of the person.
    """
    spaces = [at for at, character in enumerate(text) if character == " "]
    if not spaces or len(spaces) > JOIN_SPACES_MOST:
        return False
    # reached[k]: text up to its k-th space reads as a text's end and whole texts.
    reached: list[bool] = []
    for k, space in enumerate(spaces):
        ok = f"{text[:space]}\0" in corpus or any(
            reached[j] and f"\0{text[spaces[j] + 1 : space]}\0" in corpus for j in range(k)
        )
        reached.append(ok)
    return any(
        ok and f"\0{text[space + 1 :]}" in corpus for ok, space in zip(reached, spaces, strict=True)
    )
