# The word index behind `recall`: a projection kept in the "postings" table.
#
# Pure: it reads and writes through the `Tables` protocol; it knows no file,
# clock or lock, and it does not know what a message is, only (index, text).
# Layout, per stream (P = the stream's 16-byte prefix):
#   P + term UTF-8 + b"\x00" + bucket (u32 BE)  ->  the bucket's postings
#   P + b"\x00"                                 ->  the stream's totals
# A bucket holds the messages `bucket * 4096 .. bucket * 4096 + 4095`. Its
# value is three little-endian arrays of the same length n, sorted by index:
# offsets in the bucket (u16), document lengths in terms (u16, capped),
# term frequencies (u8, capped). The totals are the summed document length
# (u64 BE) then the number of indexed messages per bucket (u32 BE each), up to
# the last bucket that has one.
# Invariants: the bytes are a function of the set of indexed (index, text)
# pairs alone, whatever order or batches they came in; a message with no terms
# is not indexed; no key exists for a term no indexed message holds, so a
# removed message leaves no trace of its words in keys or values.
from __future__ import annotations

import heapq
import math
import re
import struct
import sys
import unicodedata
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from eva.core.keys import StreamId, Table, stream_prefix

if TYPE_CHECKING:  # the projector imports this module
    from eva.core.projection import Tables

POSTINGS: Final[Table] = "postings"
MAX_TERM_CHARS: Final = 40
BUCKET_BITS: Final = 12
BUCKET_SIZE: Final = 1 << BUCKET_BITS
# A term in more messages than this is scored only for messages that rarer
# query terms already found, once those are at least `limit` (see `search`).
COMMON_DF: Final = 2000
K1: Final = 1.2
B: Final = 0.75

_MAX_TF: Final = 0xFF
_MAX_LENGTH: Final = 0xFFFF
_OFFSET_MASK: Final = BUCKET_SIZE - 1
_TERM_END: Final = b"\x00"
_TOTALS_SUFFIX: Final = b"\x00"
_REMOVED: Final = -1
_U32 = struct.Struct(">I")
_ONE_POSTING = struct.Struct("<HHB")
_U64 = struct.Struct(">Q")
_SWAP: Final = sys.byteorder == "big"
assert array("H").itemsize == 2, "postings need 2-byte array('H')"
assert array("I").itemsize == 4, "totals need 4-byte array('I')"

# Han, kana and CJK compatibility ideographs: each character is its own term,
# since these scripts do not put spaces between words.
_CJK: Final = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U0003134f"
)
_WORD = re.compile(f"[^\\W_{_CJK}]+|[{_CJK}]")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _drop_marks(match: re.Match[str]) -> str:
    return "".join(c for c in match.group() if unicodedata.category(c) != "Mn")


def terms(text: str) -> list[str]:
    """The search terms of `text`, in order: words folded in case and accents.

    A word is a run of letters and digits; a Han or kana character is a word
    alone. Words over 40 characters (hashes, pasted blobs) are dropped.
    """
    if text.isascii():
        folded = text.lower()
        words = _ASCII_WORD.findall(folded)
    else:
        folded = unicodedata.normalize("NFKD", text.casefold())
        # Recompose what dropping the marks leaves (Hangul jamo into syllables).
        folded = unicodedata.normalize("NFC", _NON_ASCII.sub(_drop_marks, folded))
        words = _WORD.findall(folded)
    if len(folded) > MAX_TERM_CHARS:
        return [word for word in words if len(word) <= MAX_TERM_CHARS]
    return words


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best hits, (index, score) from best to worst, and how many messages matched."""

    hits: list[tuple[int, float]]
    total: int


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


def _encode_bucket(offsets: list[int], packed: list[int]) -> bytes:
    """Postings (sorted offsets, tf << 16 | length) as offsets, lengths, frequencies."""
    offset_array = array("H", offsets)
    length_array = array("H", [value & _MAX_LENGTH for value in packed])
    if _SWAP:
        offset_array.byteswap()
        length_array.byteswap()
    try:
        frequencies = bytes([value >> 16 for value in packed])
    except ValueError:  # a term said more than 255 times in one message
        frequencies = bytes([min(value >> 16, _MAX_TF) for value in packed])
    return offset_array.tobytes() + length_array.tobytes() + frequencies


def _decode_bucket(data: bytes) -> tuple[array[int], array[int], bytes]:
    """The (offsets, lengths, frequencies) of a bucket's postings."""
    n = len(data) // 5
    offsets = array("H", data[: 2 * n])
    lengths = array("H", data[2 * n : 4 * n])
    if _SWAP:
        offsets.byteswap()
        lengths.byteswap()
    return offsets, lengths, data[4 * n :]


def _bucket_entries(data: bytes) -> dict[int, int]:
    offsets, lengths, frequencies = _decode_bucket(data)
    return {
        offset: (tf << 16) | length
        for offset, length, tf in zip(offsets, lengths, frequencies, strict=True)
    }


def _term_slots() -> defaultdict[str, dict[int, int]]:
    return defaultdict(dict)


class _StreamChanges:
    """What one transaction changes in one stream's index."""

    __slots__ = ("docs", "length", "postings", "removed")

    def __init__(self) -> None:
        # bucket -> term -> {offset: tf << 16 | length, or _REMOVED}; the last
        # change to a message wins, so remove-then-add (an edit) keeps the add.
        self.postings: defaultdict[int, defaultdict[str, dict[int, int]]] = defaultdict(_term_slots)
        self.removed: set[int] = set()  # indexes removed in this buffer
        self.docs: dict[int, int] = {}  # bucket -> change in indexed messages
        self.length = 0  # change in summed document length


class PostingBuffer:
    """Index changes collected during one write transaction, written by `flush`.

    Each (term, bucket) key is read and written once per flush, however many
    messages touched it. `flush` leaves the buffer as it is, so a backend that
    runs a transaction again may flush the same buffer into the new attempt;
    a new transaction takes a new buffer.
    """

    def __init__(self) -> None:
        self._streams: dict[StreamId, _StreamChanges] = {}

    def add(self, stream: StreamId, index: int, text: str) -> None:
        """Index message `index` as saying `text` (it must not be indexed already)."""
        self._record(stream, index, text, adding=True)

    def remove(self, stream: StreamId, index: int, text: str) -> None:
        """Unindex message `index`; `text` is what was indexed for it."""
        self._record(stream, index, text, adding=False)

    def _record(self, stream: StreamId, index: int, text: str, *, adding: bool) -> None:
        words = terms(text)
        if not words:
            return
        length = min(len(words), _MAX_LENGTH)
        changes = self._streams.get(stream)
        if changes is None:
            changes = self._streams[stream] = _StreamChanges()
        bucket = index >> BUCKET_BITS
        postings = changes.postings[bucket]
        offset = index & _OFFSET_MASK
        if not adding:
            changes.removed.add(index)
            for term in words:
                postings[term][offset] = _REMOVED
        elif index in changes.removed:
            # Removed earlier in this buffer (an edit): overwrite the markers.
            for term, tf in Counter(words).items():
                postings[term][offset] = (tf << 16) | length
        else:
            first = (1 << 16) | length
            for term in words:
                slots = postings[term]
                if offset in slots:
                    slots[offset] += 1 << 16
                else:
                    slots[offset] = first
        step = 1 if adding else -1
        changes.docs[bucket] = changes.docs.get(bucket, 0) + step
        changes.length += step * length

    def flush(self, tables: Tables) -> None:
        """Write every collected change into `tables`."""
        for stream, changes in self._streams.items():
            prefix = stream_prefix(stream)
            for bucket, by_term in changes.postings.items():
                suffix = _TERM_END + _U32.pack(bucket)
                for term, slots in by_term.items():
                    _write_bucket(tables, prefix + term.encode() + suffix, slots)
            _write_totals(tables, prefix, changes)


def _write_bucket(tables: Tables, key: bytes, slots: dict[int, int]) -> None:
    """Apply the changes {offset: posting or _REMOVED} to one (term, bucket) key."""
    old = tables.get(POSTINGS, key)
    if old is None:
        if len(slots) == 1:
            ((offset, value),) = slots.items()
            if value != _REMOVED:
                tf = min(value >> 16, _MAX_TF)
                tables.put(POSTINGS, key, _ONE_POSTING.pack(offset, value & _MAX_LENGTH, tf))
            return
        offsets = sorted(slots)
        values = list(map(slots.__getitem__, offsets))
        if _REMOVED not in values:
            tables.put(POSTINGS, key, _encode_bucket(offsets, values))
            return
    else:
        offsets = sorted(slots)
        values = list(map(slots.__getitem__, offsets))
        count = len(old) // 5
        last = int.from_bytes(old[2 * count - 2 : 2 * count], "little")
        if offsets[0] > last and _REMOVED not in values:
            # New messages after every stored one (the live case): the arrays
            # grow at their ends, with the same bytes a full re-encoding gives.
            new = _encode_bucket(offsets, values)
            more = len(offsets)
            tables.put(
                POSTINGS,
                key,
                old[: 2 * count]
                + new[: 2 * more]
                + old[2 * count : 4 * count]
                + new[2 * more : 4 * more]
                + old[4 * count :]
                + new[4 * more :],
            )
            return
    entries = {} if old is None else _bucket_entries(old)
    for offset, value in slots.items():
        if value == _REMOVED:
            entries.pop(offset, None)
        else:
            entries[offset] = value
    if entries:
        offsets = sorted(entries)
        tables.put(POSTINGS, key, _encode_bucket(offsets, list(map(entries.__getitem__, offsets))))
    elif old is not None:
        tables.delete(POSTINGS, key)


def _write_totals(tables: Tables, prefix: bytes, changes: _StreamChanges) -> None:
    key = _totals_key(prefix)
    old = tables.get(POSTINGS, key)
    length, per_bucket = _decode_totals(old)
    for bucket, step in changes.docs.items():
        if bucket >= len(per_bucket):
            per_bucket.extend([0] * (bucket + 1 - len(per_bucket)))
        per_bucket[bucket] += step
    data = _encode_totals(length + changes.length, per_bucket)
    if data is not None:
        tables.put(POSTINGS, key, data)
    elif old is not None:
        tables.delete(POSTINGS, key)


_Postings: TypeAlias = "list[tuple[int, array[int], array[int], bytes]]"


def _read_postings(
    tables: Tables, prefix: bytes, term: str, buckets: list[int]
) -> tuple[_Postings, int]:
    """A term's postings per bucket (base index, offsets, lengths, tfs) and its df."""
    base = prefix + term.encode() + _TERM_END
    found: _Postings = []
    df = 0
    for bucket in buckets:
        data = tables.get(POSTINGS, base + _U32.pack(bucket))
        if data is not None:
            offsets, lengths, frequencies = _decode_bucket(data)
            found.append((bucket << BUCKET_BITS, offsets, lengths, frequencies))
            df += len(offsets)
    return found, df


def search(tables: Tables, stream: StreamId, query: str, limit: int) -> SearchResult:
    """The stream's messages best matching the words of `query`, by BM25.

    Hits are ranked by score, best first; equal scores put the newer message
    first. `total` counts every message holding at least one query term.
    Terms are scored from the rarest up. A term found in more than
    `COMMON_DF` messages, once rarer terms (in at most `COMMON_DF` each) have
    found at least `limit` messages, is scored only for the messages already
    found: a message matching nothing but such common words could not have
    ranked among them in ordinary cases, and scoring it would cost the most.
    Those messages still count in `total`. A query of common words alone is
    scored in full.
    """
    prefix = stream_prefix(stream)
    length, per_bucket = _decode_totals(tables.get(POSTINGS, _totals_key(prefix)))
    documents = sum(per_bucket)
    if documents == 0 or limit <= 0:
        return SearchResult([], 0)
    buckets = [bucket for bucket, count in enumerate(per_bucket) if count]
    found: list[tuple[int, str, _Postings]] = []
    for term in dict.fromkeys(terms(query)):
        postings, df = _read_postings(tables, prefix, term, buckets)
        if df:
            found.append((df, term, postings))
    found.sort(key=lambda item: (item[0], item[1]))

    scores: dict[int, float] = {}
    matched: set[int] | None = None
    length_weight = K1 * B * documents / length
    constant = K1 * (1 - B)
    rare_found = 0  # messages found by terms in at most COMMON_DF messages
    for df, _, postings in found:
        weight = math.log(1 + (documents - df + 0.5) / (df + 0.5)) * (K1 + 1)
        if df > COMMON_DF and rare_found >= limit:
            if matched is None:
                matched = set(scores)
            for base, offsets, lengths, frequencies in postings:
                matched.update(map(base.__add__, offsets))
                for offset, doc_length, tf in zip(offsets, lengths, frequencies, strict=True):
                    index = base + offset
                    score = scores.get(index)
                    if score is not None:
                        norm = tf + constant + length_weight * doc_length
                        scores[index] = score + weight * tf / norm
            continue
        for base, offsets, lengths, frequencies in postings:
            for offset, doc_length, tf in zip(offsets, lengths, frequencies, strict=True):
                index = base + offset
                norm = tf + constant + length_weight * doc_length
                scores[index] = scores.get(index, 0.0) + weight * tf / norm
        if df <= COMMON_DF:
            rare_found = len(scores)
    best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], item[0]))
    total = len(scores) if matched is None else len(matched)
    return SearchResult(best, total)
