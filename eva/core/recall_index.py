# The word index behind `recall`: a projection kept in the "postings" table.
# (eva.core.recall_search searches it.)
#
# Pure: it reads and writes through the `Tables` protocol; it knows no file,
# clock or lock, and it does not know what a message is, only (index, text).
# Layout, per stream (P = the stream's 16-byte prefix):
#   P + b"\x00"                                      ->  the stream's totals
#   P + b"\x01" + bucket (u32 BE) + term UTF-8       ->  the term's postings in the bucket
#   P + b"\x02" + term UTF-8                         ->  nothing: some bucket holds the term
# A bucket holds the messages `bucket * 4096 .. bucket * 4096 + 4095`. A
# postings value is one 5-byte record per message holding the term, sorted by
# index: offset in the bucket (u16 LE), document length in terms (u16 LE,
# capped), term frequency (u8, capped). The totals are the summed document
# length (u64 BE) then the number of indexed messages per bucket (u32 BE each),
# up to the last bucket that has one. A bucket's postings sit together, so they
# grow at the end of the table as messages come; the keys of the third kind,
# with no value, are the terms the index holds, so the terms that begin so are
# found in one range, and a term it does not hold costs one lookup.
# Invariants: the bytes are a function of the set of indexed (index, text)
# pairs alone, whatever order or batches they came in; a message with no terms
# is not indexed; no key exists for a term no indexed message holds, so a
# removed message leaves no trace of its words in keys or values.
from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Final

import msgspec
import numpy as np

from eva.core.keys import StreamId, Table, prefix_end, stream_prefix
from eva.core.terms import ASCII_FOLD, MAX_TERM_CHARS, term_bytes

if TYPE_CHECKING:  # the projector imports this module
    from eva.core.tables import Tables

POSTINGS: Final[Table] = "postings"
BUCKET_BITS: Final = 12
BUCKET_SIZE: Final = 1 << BUCKET_BITS

_MAX_TF: Final = 0xFF
_MAX_LENGTH: Final = 0xFFFF
_OFFSET_MASK: Final = BUCKET_SIZE - 1
# The most distinct terms `indexed_forms` looks at for one start.
MAX_FORMS_WALKED: Final = 400
_TOTALS_SUFFIX: Final = b"\x00"
_IN_BUCKET: Final = b"\x01"
_TERM_HELD: Final = b"\x02"
_POSTING = struct.Struct("<HHB")  # offset, document length, term frequency
POSTING_SIZE: Final = _POSTING.size
_OFFSET = struct.Struct("<H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_SWAP: Final = sys.byteorder == "big"
assert array("I").itemsize == 4, "totals need 4-byte array('I')"


def _totals_key(prefix: bytes) -> bytes:
    return prefix + _TOTALS_SUFFIX


def _decode_totals(data: bytes | None) -> tuple[int, list[int]]:
    """(summed document length, indexed messages per bucket)."""
    if data is None:
        return 0, []
    length: int = _U64.unpack_from(data)[0]
    per_bucket = array("I", data[_U64.size :])
    if not _SWAP:
        per_bucket.byteswap()
    return length, per_bucket.tolist()


def _encode_totals(length: int, per_bucket: list[int]) -> bytes | None:
    while per_bucket and per_bucket[-1] == 0:
        per_bucket.pop()
    if not per_bucket:
        return None
    counts = array("I", per_bucket)
    if not _SWAP:
        counts.byteswap()
    return _U64.pack(length) + counts.tobytes()


def _records_by_offset(data: bytes) -> dict[int, bytes]:
    """A bucket's postings, each record by its offset."""
    size = _POSTING.size
    return {
        _OFFSET.unpack_from(data, start)[0]: data[start : start + size]
        for start in range(0, len(data), size)
    }


class PreparedBucket(msgspec.Struct, array_like=True):
    """One bucket's changes, ready to write: what `PostingBuffer.prepare` makes of texts."""

    number: int
    added: dict[bytes, bytes]  # term -> the added messages' records, in offset order
    removed: dict[bytes, list[int]]  # term -> offsets of removed messages that held it
    docs: int  # change in indexed messages
    length: int  # change in summed document length


class PreparedStream(msgspec.Struct, array_like=True):
    """A buffer's changes to one stream, ready to write, bucket by bucket."""

    guild_id: int
    channel_id: int
    buckets: list[PreparedBucket]


@dataclass(slots=True)
class _BucketChanges:
    """What one buffer changes in one bucket of one stream, while it is gathered."""

    # term -> the records of the messages added, in offset order
    added: dict[bytes, bytes] = field(default_factory=dict)
    # term -> offsets of removed messages that held it
    removed: defaultdict[bytes, set[int]] = field(default_factory=lambda: defaultdict(set))
    docs: int = 0  # change in indexed messages
    length: int = 0  # change in summed document length


class _StreamChanges:
    """What one transaction changes in one stream's index: the texts before and after."""

    __slots__ = ("added", "removed")

    def __init__(self) -> None:
        self.added: dict[int, str] = {}  # index -> text indexed once the buffer is written
        self.removed: dict[int, str] = {}  # index -> text indexed before, to be taken out

    def prepare(self) -> list[PreparedBucket]:
        """The changes gathered per bucket; an index both removed and added is an edit."""
        buckets: defaultdict[int, _BucketChanges] = defaultdict(_BucketChanges)
        for index, text in self.removed.items():
            words = term_bytes(text)
            if words:
                bucket = buckets[index >> BUCKET_BITS]
                offset = index & _OFFSET_MASK
                for word in set(words):
                    bucket.removed[word].add(offset)
                bucket.docs -= 1
                bucket.length -= min(len(words), _MAX_LENGTH)
        for number, added, docs, length in gather(sorted(self.added.items())):
            bucket = buckets[number]
            bucket.added = added
            bucket.docs += docs
            bucket.length += length
        return [
            PreparedBucket(
                number,
                bucket.added,
                {term: sorted(offsets) for term, offsets in bucket.removed.items()},
                bucket.docs,
                bucket.length,
            )
            for number, bucket in buckets.items()
        ]


Gathered = tuple[int, dict[bytes, bytes], int, int]
"""One bucket's postings of added texts: (bucket, term -> records, messages, summed length)."""


def gather(texts: Sequence[tuple[int, str]]) -> list[Gathered]:
    """The postings of `texts` ((index, text) in increasing index order), bucket by bucket.

    Each message's record goes once into the list of each of its words, which
    stays in offset order; the terms come in the order they first occur. A
    bucket's words are counted with numpy: each word is made a number once (the
    one Python step a word takes), and the records are sorted, counted and laid
    out as arrays.
    """
    gathered: list[Gathered] = []
    first = 0
    while first < len(texts):
        number = texts[first][0] >> BUCKET_BITS
        last = bisect_left(texts, (number + 1) << BUCKET_BITS, first, key=_index_of)
        bucket = _gather_bucket(number, texts[first:last])
        if bucket is not None:
            gathered.append(bucket)
        first = last
    return gathered


_RECORDS = np.dtype([("offset", "<u2"), ("length", "<u2"), ("tf", "u1")])
_DOC_END: Final = b"\x00"
"""Ends each message's words in a bucket's word list: no term is this byte."""


def _index_of(pair: tuple[int, str]) -> int:
    return pair[0]


def _folded(text: str) -> bytes:
    """A text's terms as one string of bytes, split by ASCII white space: its ASCII
    folded at once, else `term_bytes` joined (UTF-8 has no ASCII byte inside a letter)."""
    if text.isascii():
        return text.encode().translate(ASCII_FOLD)
    return b" ".join(term_bytes(text))


def _gather_bucket(number: int, texts: Sequence[tuple[int, str]]) -> Gathered | None:
    """The postings of one bucket's texts, or None if none of them has a term."""
    words = b" \x00 ".join([_folded(text) for _, text in texts]).split()
    words.append(_DOC_END)
    terms = list(dict.fromkeys(words))
    number_of = dict(zip(terms, range(len(terms)), strict=True))
    ids = np.fromiter(map(number_of.__getitem__, words), np.int64, len(words))
    ends = ids == number_of[_DOC_END]
    doc = np.cumsum(ends) - ends  # each word's message, by its place in `texts`
    # words over the limit: of ASCII texts (term_bytes drops the others' by characters, and
    # keeps words of up to so many characters, more bytes)
    dropped = np.fromiter(map(len, terms), np.int64, len(terms)) > MAX_TERM_CHARS
    for place in np.flatnonzero(dropped).tolist():
        dropped[place] = terms[place].isascii()
    dropped[number_of[_DOC_END]] = True
    kept = ~dropped[ids]
    ids, doc = ids[kept], doc[kept]
    if not len(ids):
        return None
    lengths = np.minimum(np.bincount(doc, minlength=len(texts)), _MAX_LENGTH)
    pairs, tf = np.unique((ids << BUCKET_BITS) | doc, return_counts=True)
    term_ids, docs = pairs >> BUCKET_BITS, pairs & _OFFSET_MASK
    records = np.empty(len(pairs), _RECORDS)
    records["offset"] = np.fromiter(map(_index_of, texts), np.int64, len(texts))[docs] & (
        _OFFSET_MASK
    )
    records["length"] = lengths[docs]
    records["tf"] = np.minimum(tf, _MAX_TF)
    data = records.tobytes()
    starts = np.flatnonzero(np.r_[True, term_ids[1:] != term_ids[:-1]])
    stops = np.r_[starts[1:], len(pairs)] * _POSTING.size
    postings = {
        terms[term]: data[start : stop]
        for term, start, stop in zip(
            term_ids[starts].tolist(), (starts * _POSTING.size).tolist(), stops.tolist(),
            strict=True,
        )
    }
    indexed = lengths > 0
    return number, postings, int(indexed.sum()), int(lengths.sum())


class StreamTexts(msgspec.Struct, array_like=True):
    """A buffer's changes to one stream: texts to index and texts to take out, by index."""

    guild_id: int
    channel_id: int
    added: dict[int, str]
    removed: dict[int, str]


class PostingBuffer:
    """Index changes collected during one write transaction, written by `flush`.

    Each (term, bucket) key is read and written once per flush, however many
    messages touched it. `flush` leaves the buffer as it is, so a backend that
    runs a transaction again may flush the same buffer into the new attempt;
    a new transaction takes a new buffer.
    """

    def __init__(self) -> None:
        self._streams: dict[StreamId, _StreamChanges] = {}

    def _changes(self, stream: StreamId) -> _StreamChanges:
        changes = self._streams.get(stream)
        if changes is None:
            changes = self._streams[stream] = _StreamChanges()
        return changes

    def add(self, stream: StreamId, index: int, text: str) -> None:
        """Index message `index` as saying `text` (it must not be indexed already)."""
        self._changes(stream).added[index] = text

    def remove(self, stream: StreamId, index: int, text: str) -> None:
        """Unindex message `index`; `text` is what was indexed for it."""
        changes = self._changes(stream)
        if index in changes.added:  # added in this buffer: as if never added
            del changes.added[index]
        else:
            changes.removed.setdefault(index, text)

    def changes(self) -> list[StreamTexts]:
        """What the buffer holds, per stream: the texts to index and those to take out."""
        return [
            StreamTexts(stream.guild_id, stream.channel_id, changes.added, changes.removed)
            for stream, changes in self._streams.items()
        ]

    @classmethod
    def of_changes(cls, streams: Iterable[StreamTexts]) -> PostingBuffer:
        """A buffer holding what `changes` gave."""
        buffer = cls()
        for texts in streams:
            changes = buffer._changes(StreamId(texts.guild_id, texts.channel_id))
            changes.added.update(texts.added)
            changes.removed.update(texts.removed)
        return buffer

    def prepare(self) -> list[PreparedStream]:
        """The buffer's changes made ready to write: the costly part of `flush`, and pure."""
        return [
            PreparedStream(stream.guild_id, stream.channel_id, changes.prepare())
            for stream, changes in self._streams.items()
        ]

    def flush(self, tables: Tables) -> None:
        """Write every collected change into `tables`."""
        write_prepared(tables, self.prepare())


def write_prepared(tables: Tables, streams: Iterable[PreparedStream]) -> None:
    """Write changes that `PostingBuffer.prepare` made, as its `flush` would."""
    for prepared in streams:
        prefix = stream_prefix(StreamId(prepared.guild_id, prepared.channel_id))
        totals = _Totals.read(tables, prefix)
        gone: set[bytes] = set()  # terms a bucket no longer holds
        for bucket in prepared.buckets:
            if totals.indexed(bucket.number):
                gone |= _write_bucket(tables, prefix, bucket)
            else:
                _write_new_bucket(tables, prefix, bucket)
            totals.change(bucket)
        totals.write(tables, prefix)
        buckets = [number for number, count in enumerate(totals.per_bucket) if count]
        for term in sorted(gone):
            if not any(tables.get(POSTINGS, _bucket_head(prefix, n) + term) for n in buckets):
                tables.delete(POSTINGS, _term_key(prefix, term))


def _bucket_head(prefix: bytes, number: int) -> bytes:
    """What the keys of a bucket's postings start with; the term follows."""
    return prefix + _IN_BUCKET + _U32.pack(number)


def _term_key(prefix: bytes, term: bytes) -> bytes:
    """The key saying that the index holds `term`."""
    return prefix + _TERM_HELD + term


def _write_new_bucket(tables: Tables, prefix: bytes, bucket: PreparedBucket) -> None:
    """Write a bucket that has no indexed message yet, so none of its keys exists."""
    head = _bucket_head(prefix, bucket.number)
    added = bucket.added
    terms = sorted(added)
    tables.put_many(POSTINGS, [(head + term, added[term]) for term in terms])
    tables.put_absent(POSTINGS, [(_term_key(prefix, term), b"") for term in terms])


def _write_bucket(tables: Tables, prefix: bytes, bucket: PreparedBucket) -> set[bytes]:
    """Apply one bucket's changes, reading and writing each of its keys once; the terms
    whose key in the bucket went."""
    head = _bucket_head(prefix, bucket.number)
    get, put = tables.get, tables.put
    removed = bucket.removed
    new: list[bytes] = []
    gone: set[bytes] = set()
    for term, added in bucket.added.items():
        key = head + term
        old = get(POSTINGS, key)
        if old is None:
            put(POSTINGS, key, added)
            new.append(term)
        elif term not in removed and _OFFSET.unpack_from(added)[0] > _last_offset(old):
            # New messages after every stored one (the live case): the records
            # grow at the end, with the same bytes a full re-encoding gives.
            put(POSTINGS, key, old + added)
        else:
            _merge_postings(tables, key, old, added, removed.get(term, []))
    for term, offsets in removed.items():
        if term not in bucket.added:
            key = head + term
            old = get(POSTINGS, key)
            if old is not None and not _merge_postings(tables, key, old, b"", offsets):
                gone.add(term)
    tables.put_absent(POSTINGS, [(_term_key(prefix, term), b"") for term in sorted(new)])
    return gone


def _merge_postings(
    tables: Tables, key: bytes, old: bytes, added: bytes, removed: Iterable[int]
) -> bool:
    """Write the records of `old` but `removed` with `added` over them, or delete the key
    when none is left; whether it is kept."""
    records = _records_by_offset(old)
    for offset in removed:
        records.pop(offset, None)
    records.update(_records_by_offset(added))
    if records:
        tables.put(POSTINGS, key, b"".join([records[offset] for offset in sorted(records)]))
        return True
    tables.delete(POSTINGS, key)
    return False


def _last_offset(data: bytes) -> int:
    offset: int = _OFFSET.unpack_from(data, len(data) - _POSTING.size)[0]
    return offset


class _Totals:
    """A stream's totals record while a flush changes it."""

    def __init__(self, old: bytes | None) -> None:
        self.old = old
        self.length, self.per_bucket = _decode_totals(old)

    @classmethod
    def read(cls, tables: Tables, prefix: bytes) -> _Totals:
        return cls(tables.get(POSTINGS, _totals_key(prefix)))

    def indexed(self, number: int) -> int:
        """How many messages of a bucket are indexed."""
        return self.per_bucket[number] if number < len(self.per_bucket) else 0

    def change(self, bucket: PreparedBucket) -> None:
        per_bucket = self.per_bucket
        if bucket.number >= len(per_bucket):
            per_bucket.extend([0] * (bucket.number + 1 - len(per_bucket)))
        per_bucket[bucket.number] += bucket.docs
        self.length += bucket.length

    def write(self, tables: Tables, prefix: bytes) -> None:
        data = _encode_totals(self.length, self.per_bucket)
        if data is not None:
            tables.put(POSTINGS, _totals_key(prefix), data)
        elif self.old is not None:
            tables.delete(POSTINGS, _totals_key(prefix))


def read_totals(tables: Tables, prefix: bytes) -> tuple[int, list[int]]:
    """A stream's summed document length and its indexed messages per bucket."""
    return _decode_totals(tables.get(POSTINGS, _totals_key(prefix)))


def term_postings(
    tables: Tables, prefix: bytes, term: bytes, buckets: Iterable[int]
) -> tuple[list[tuple[int, bytes]], int]:
    """A term's postings in `buckets` (base index, records) and how many messages hold it."""
    if tables.get(POSTINGS, _term_key(prefix, term)) is None:
        return [], 0
    found: list[tuple[int, bytes]] = []
    df = 0
    for bucket in buckets:
        data = tables.get(POSTINGS, _bucket_head(prefix, bucket) + term)
        if data is not None:
            found.append((bucket << BUCKET_BITS, data))
            df += len(data) // _POSTING.size
    return found, df


def indexed_forms(
    tables: Tables, prefix: bytes, start: bytes, wanted: Callable[[bytes], bool]
) -> list[bytes]:
    """The terms of a stream's index that begin with `start` and that `wanted` accepts,
    of the first MAX_FORMS_WALKED that begin so."""
    low = _term_key(prefix, start)
    skip = len(low) - len(start)
    walked = islice(tables.scan(POSTINGS, low, prefix_end(low)), MAX_FORMS_WALKED)
    return [term for key, _ in walked if wanted(term := bytes(key[skip:]))]


class OpenChunk:
    """The postings of messages the index does not hold yet, as it would hold them.

    Gathered once from (index, text) pairs, searched any number of times:
    `records` gives the postings of every term that a test accepts, one
    record per message holding it, laid out as in a bucket. Holds the
    number of messages with terms and their summed length too.
    """

    __slots__ = ("_by_term", "_roots", "_stems", "documents", "length")

    def __init__(self, texts: Iterable[tuple[int, str]]) -> None:
        self._by_term: dict[bytes, list[tuple[int, bytes]]] = {}
        self._stems: dict[bytes, list[bytes]] | None = None  # terms by stem, when asked
        self._roots: dict[bytes, list[bytes]] = {}  # and by each of their roots
        self.documents = self.length = 0
        pack = _POSTING.pack
        for index, text in texts:
            terms = term_bytes(text)
            if not terms:
                continue
            self.documents += 1
            doc_length = min(len(terms), _MAX_LENGTH)
            self.length += doc_length
            base, offset = index - (index & _OFFSET_MASK), index & _OFFSET_MASK
            counts: dict[bytes, int] = {}
            for term in terms:
                counts[term] = counts.get(term, 0) + 1
            for term, tf in counts.items():
                record = (base, pack(offset, doc_length, min(tf, _MAX_TF)))
                self._by_term.setdefault(term, []).append(record)

    def records(self, term: bytes) -> list[tuple[int, bytes]]:
        """The postings of one term: (base index, one record) per message holding it."""
        return self._by_term.get(term, [])

    def terms_starting(self, start: bytes) -> list[bytes]:
        """The terms the messages hold that begin with `start`."""
        return [term for term in self._by_term if term.startswith(start)]

    def records_of_family(
        self,
        roots_of: Callable[[bytes], Iterable[bytes]],
        stem: bytes,
        roots: Iterable[bytes],
    ) -> list[tuple[int, bytes]]:
        """The postings of every term of a word's family (eva.core.stems.related): each
        term one of whose roots (by `roots_of`, the same each call, its stem first)
        is `stem`, or whose stem is one of `roots`."""
        if self._stems is None:
            self._stems, self._roots = {}, {}
            for term in self._by_term:
                for place, root in enumerate(roots_of(term)):
                    if place == 0:
                        self._stems.setdefault(root, []).append(term)
                    self._roots.setdefault(root, []).append(term)
        family = [term for root in roots for term in self._stems.get(root, [])]
        family += self._roots.get(stem, [])
        return [record for term in dict.fromkeys(family) for record in self._by_term[term]]
