# Searching the recall index: the messages that best match a query's words, by BM25.
#
# Pure: it reads the index through the `Tables` protocol and knows nothing of
# its layout but what eva.core.recall_index hands it (a term's postings, one
# 5-byte record per message). The scores are worked out with numpy over all
# of a term's records at once: a query of common words touches tens of
# thousands of them. Invariants: the result depends only on the indexed
# messages, the open ones passed in and the query; equal scores put the
# newer message first; `total` counts every message holding a query term.
from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from eva.core.keys import StreamId, stream_prefix
from eva.core.recall_index import (
    POSTING_SIZE,
    OpenChunk,
    indexed_forms,
    read_totals,
    term_postings,
)
from eva.core.slots import read_slots
from eva.core.state import decode_meta
from eva.core.stems import family_prefix, related, stem, stem_roots
from eva.core.tables import Tables
from eva.core.terms import AUTHOR_MARK, term_bytes

# A term in more messages than this is scored only for messages that rarer
# query terms already found, once those are at least `limit` (see `search`).
COMMON_DF: Final = 2000
K1: Final = 1.2
# How much a named person's own message counts, against a mention of their name: when
# the question asks about more than the person, and when it asks about them alone.
AUTHOR_BOOST: Final = 0.3
AUTHOR_ALONE_BOOST: Final = 1.0
# A named person's own message that speaks of themselves ("I", "my", "we") counts
# this much more again: what people say about themselves is what a question about
# them is after.
SELF_WORDS: Final = (b"i", b"me", b"my", b"myself", b"we", b"our")
SELF_BOOST: Final = 1.0
# The most messages a span may hold for `longest_within` to look through them.
SPAN_READ: Final = 5000
# A question's word this long or longer names a person whose name word it starts.
MIN_NAME_START: Final = 4
COVERAGE: Final = 0.0
B: Final = 0.3
# Scores are summed in arrays over every message index up to the highest hit while
# that is at most this many; past it, over the messages that hold a query term.
DENSE_MESSAGES: Final = 1 << 20

# A posting record: offset in its bucket, document length in terms, term frequency.
_RECORD: Final = np.dtype([("offset", "<u2"), ("length", "<u2"), ("tf", "u1")])
assert _RECORD.itemsize == POSTING_SIZE

_Ints = npt.NDArray[np.int64]
_Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best hits, (index, score) from best to worst, and how many messages matched."""

    hits: list[tuple[int, float]]
    total: int


@dataclass(frozen=True, slots=True)
class _TermRecords:
    """One query term's postings as arrays: message indexes, lengths and frequencies."""

    df: int
    term: bytes
    indexes: _Ints
    lengths: _Floats
    tfs: _Floats
    authors: float = 0.0  # for the marks of named people's own messages: their boost
    boosted: _Floats | None = None  # for author marks: a factor on each record's score


def _term_records(word: bytes, postings: list[tuple[int, bytes]]) -> _TermRecords:
    """One word's records from the postings of its forms; a message holding two forms
    counts once, with their frequencies summed."""
    records = np.frombuffer(b"".join(data for _, data in postings), dtype=_RECORD)
    counts = [len(data) // POSTING_SIZE for _, data in postings]
    bases = np.repeat(np.array([base for base, _ in postings], dtype=np.int64), counts)
    indexes = bases + records["offset"]
    lengths = records["length"].astype(np.float64)
    tfs = records["tf"].astype(np.float64)
    held, first, inverse = np.unique(indexes, return_index=True, return_inverse=True)
    if len(held) < len(indexes):
        indexes, lengths = held, lengths[first]
        tfs = np.bincount(inverse, weights=tfs, minlength=len(held)).astype(np.float64)
    return _TermRecords(len(indexes), word, indexes, lengths, tfs)


def search(
    tables: Tables,
    stream: StreamId,
    query: str | Sequence[bytes],
    limit: int,
    unindexed: Iterable[tuple[int, str]] | OpenChunk = (),
    *,
    within: Sequence[tuple[int, int]] = (),
    authors: Sequence[bytes] = (),
    author_boost: float = AUTHOR_BOOST,
    written_by: Sequence[bytes] = (),
) -> SearchResult:
    """The stream's messages best matching the words of `query`, by BM25.

    `query` is a text or its words (index terms). Each word matches every
    indexed term of its family (eva.core.stems.related: its stem, or one
    with a derivational suffix more or less): they count together as one
    term would. `unindexed` are (index, text) of messages the index does
    not hold yet (the projection indexes messages in whole chunks), or their
    `OpenChunk`; they are searched, and weigh in the statistics, exactly as
    if it held them.
    `within`, if given, are [start, stop) ranges of message indexes: only
    messages in them are ranked or counted, while the statistics stay those
    of the whole channel.

    `written_by`, if given, are the marks of one person's name words: only
    messages holding every one of them (that person's) are ranked or counted.

    `authors` are the index's marks of people the question names
    (eva.core.terms.author_words): their own messages count as one more
    word, as if each said the name, `author_boost` times over, and more the
    longer the message (a person's long messages say more about them than
    their "ok"s), and twice as much (`SELF_BOOST`) when it speaks of
    themselves ("I", "my", "we": `SELF_WORDS`).

    Hits are ranked by score, best first; equal scores put the newer message
    first. `total` counts every message holding at least one query word.
    Words are scored from the rarest up. A word found in more than
    `COMMON_DF` messages, once rarer words (in at most `COMMON_DF` each) have
    found at least `limit` messages, is scored only for the messages already
    found: a message matching nothing but such common words could not have
    ranked among them in ordinary cases. Those messages still count in
    `total`. A query of common words alone is scored in full.
    """
    prefix = stream_prefix(stream)
    length, per_bucket = read_totals(tables, prefix)
    words = term_bytes(query) if isinstance(query, str) else list(query)
    query_words = list({stem(word): word for word in reversed(words)}.values())[::-1]
    chunk = unindexed if isinstance(unindexed, OpenChunk) else OpenChunk(unindexed)
    documents = sum(per_bucket) + chunk.documents
    length += chunk.length
    if documents == 0 or limit <= 0:
        return SearchResult([], 0)
    buckets = [bucket for bucket, count in enumerate(per_bucket) if count]
    found: list[_TermRecords] = []
    for word in query_words:
        postings = [
            posting
            for form in _forms(tables, prefix, word)
            for posting in term_postings(tables, prefix, form, buckets)[0]
        ]
        postings.extend(chunk.records_of_family(stem_roots, stem(word), stem_roots(word)))
        if postings:
            found.append(_term_records(word, postings))
    marks = [
        posting
        for mark in authors
        for posting in [*term_postings(tables, prefix, mark, buckets)[0], *chunk.records(mark)]
    ]
    if marks:
        own_records = replace(_term_records(b"", marks), authors=author_boost)
        selfish = [
            posting
            for word in SELF_WORDS
            for posting in [*term_postings(tables, prefix, word, buckets)[0], *chunk.records(word)]
        ]
        if selfish:  # their words about themselves count more
            held = _term_records(b"", selfish).indexes
            own_records = replace(
                own_records,
                boosted=(1 + SELF_BOOST * np.isin(own_records.indexes, held)).astype(np.float64),
            )
        found.append(own_records)
    if within:
        found = [kept for kept in (_kept(records, within) for records in found) if kept]
    if written_by:
        own = _held_by_all(tables, prefix, buckets, chunk, written_by)
        found = [kept for kept in (_only(records, own) for records in found) if kept]
    if not found:
        return SearchResult([], 0)
    found.sort(key=lambda records: (records.df, records.term))
    size = max(int(records.indexes.max()) for records in found) + 1
    if size <= DENSE_MESSAGES:
        return _best(found, size, documents, length, limit)
    # A long channel: score over the messages the terms hold, numbered in index order.
    held, places = np.unique(np.concatenate([r.indexes for r in found]), return_inverse=True)
    ends = np.cumsum([len(r.indexes) for r in found])[:-1]
    numbered = [
        replace(records, indexes=part)
        for records, part in zip(found, np.split(places.astype(np.int64), ends), strict=True)
    ]
    result = _best(numbered, len(held), documents, length, limit)
    return SearchResult([(int(held[i]), score) for i, score in result.hits], result.total)


def people_named(
    tables: Tables, stream: StreamId, words: Sequence[bytes], chunk: OpenChunk | None = None
) -> dict[bytes, list[bytes]]:
    """The index's marks of the people whose names `words` hold (eva.core.terms.author_words),
    by the word that names them.

    A word names a person when it is a word of their name, or the start of
    one and at least `MIN_NAME_START` letters long ("jl777" names "jl777c").
    `chunk` holds messages the index does not hold yet.
    """
    prefix = stream_prefix(stream)
    mark = AUTHOR_MARK.encode()
    held = [] if chunk is None else chunk.terms_starting(mark)
    found: dict[bytes, list[bytes]] = {}
    for word in words:
        start = mark + word
        if len(word) >= MIN_NAME_START:
            named = indexed_forms(tables, prefix, start, lambda _term: True)
            named += [term for term in held if term.startswith(start)]
        else:
            named = indexed_forms(tables, prefix, start, start.__eq__)
            named += [term for term in held if term == start]
        if named:
            found[word] = list(dict.fromkeys(named))
    return found


def _forms(tables: Tables, prefix: bytes, word: bytes) -> list[bytes]:
    """The indexed terms that are forms of `word` or of its family (eva.core.stems.related)."""
    wanted = stem(word)
    if wanted == word and not word.isalpha():  # numbers and the like: the word alone
        return [word]
    roots = stem_roots(word)
    return indexed_forms(
        tables, prefix, family_prefix(word), lambda term: related(term, wanted, roots)
    )


def _held_by_all(
    tables: Tables, prefix: bytes, buckets: list[int], chunk: OpenChunk, marks: Sequence[bytes]
) -> _Ints:
    """The indexes of the messages holding every one of `marks`, in order."""
    held: _Ints | None = None
    for mark in marks:
        postings = [*term_postings(tables, prefix, mark, buckets)[0], *chunk.records(mark)]
        indexes = _term_records(mark, postings).indexes if postings else np.zeros(0, np.int64)
        held = indexes if held is None else np.intersect1d(held, indexes)
    return np.zeros(0, np.int64) if held is None else held


def _only(records: _TermRecords, indexes: _Ints) -> _TermRecords | None:
    """The records of the messages among `indexes` (the word's `df` unchanged)."""
    return _masked(records, np.isin(records.indexes, indexes))


def _kept(records: _TermRecords, within: Sequence[tuple[int, int]]) -> _TermRecords | None:
    """The records of messages inside the `within` ranges (the word's `df` unchanged)."""
    bounds = np.array([edge for span in sorted(within) for edge in span], dtype=np.int64)
    # An index inside [start, stop) falls after an odd number of the sorted edges.
    return _masked(records, np.searchsorted(bounds, records.indexes, side="right") % 2 == 1)


def _masked(records: _TermRecords, inside: npt.NDArray[np.bool_]) -> _TermRecords | None:
    """The records `inside` marks; None if it marks none."""
    if not inside.any():
        return None
    return replace(
        records,
        indexes=records.indexes[inside],
        lengths=records.lengths[inside],
        tfs=records.tfs[inside],
        boosted=None if records.boosted is None else records.boosted[inside],
    )


def _best(
    found: list[_TermRecords], size: int, documents: int, length: int, limit: int
) -> SearchResult:
    """Score the terms' records (rarest first) over messages 0..size-1 and rank them."""
    scores = np.zeros(size, dtype=np.float64)
    scored = np.zeros(size, dtype=np.bool_)  # messages with a score
    matched = np.zeros(size, dtype=np.bool_)  # messages holding any query term
    words = np.zeros(size, dtype=np.float64)  # how many query words each message holds
    length_weight = K1 * B * documents / length
    constant = K1 * (1 - B)
    rare_found = 0  # messages found by terms in at most COMMON_DF messages
    for records in found:
        df, indexes, tfs = records.df, records.indexes, records.tfs
        weight = math.log(1 + (documents - df + 0.5) / (df + 0.5)) * (K1 + 1)
        if records.authors:  # longer own messages count more, 1 at the mean length
            mean = length / documents
            term_scores = weight * records.authors * 2 * records.lengths / (records.lengths + mean)
            if records.boosted is not None:
                term_scores = term_scores * records.boosted
        else:
            term_scores = weight * tfs / (tfs + constant + length_weight * records.lengths)
        matched[indexes] = True
        words[indexes] += 1
        if df > COMMON_DF and rare_found >= limit:
            known = scored[indexes]
            scores[indexes[known]] += term_scores[known]
            continue
        scores[indexes] += term_scores
        scored[indexes] = True
        if df <= COMMON_DF:
            rare_found = int(np.count_nonzero(scored))
    if COVERAGE and len(found) > 1:  # a message holding more of the words ranks higher
        scores *= (words / len(found)) ** COVERAGE
    return SearchResult(_ranked(scores, scored, limit), int(np.count_nonzero(matched)))


def _ranked(scores: _Floats, scored: npt.NDArray[np.bool_], limit: int) -> list[tuple[int, float]]:
    """The `limit` best (index, score), best first; equal scores put the higher index first."""
    candidates = np.flatnonzero(scored)
    values = scores[candidates]
    if len(candidates) > limit:  # keep those at least as good as the limit-th best
        threshold = np.partition(values, len(values) - limit)[len(values) - limit]
        keep = values >= threshold
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, values))[::-1][:limit]
    return [
        (int(index), float(score))
        for index, score in zip(candidates[order], values[order], strict=True)
    ]


def longest_within(
    tables: Tables,
    stream: StreamId,
    within: Sequence[tuple[int, int]],
    count: int,
    hidden: frozenset[int] = frozenset(),
) -> list[int]:
    """The `count` longest messages posted in the `within` ranges of indexes, longest
    first (the newer of two as long), none of `hidden`; none at all if the ranges
    hold more than `SPAN_READ` messages.

    For a question about a time whose words few messages then hold: a span's
    long messages are where most of what happened in it was said.
    """
    data = tables.get("streams", stream_prefix(stream))
    meta = None if data is None else decode_meta(data)
    if meta is None or sum(stop - start for start, stop in within) > SPAN_READ:
        return []
    sizes = [
        (slot.size, index)
        for start, stop in within
        for index, slot in read_slots(tables, stream, meta, start, stop)
        if not slot.deleted and index not in hidden
    ]
    return [index for _, index in heapq.nlargest(count, sizes)]
