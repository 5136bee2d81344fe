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

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from eva.core.keys import StreamId, stream_prefix
from eva.core.recall_index import (
    POSTING_SIZE,
    open_postings,
    read_totals,
    term_postings,
)
from eva.core.tables import Tables
from eva.core.terms import term_bytes

# A term in more messages than this is scored only for messages that rarer
# query terms already found, once those are at least `limit` (see `search`).
COMMON_DF: Final = 2000
K1: Final = 1.2
B: Final = 0.75
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


def _term_records(df: int, term: bytes, postings: list[tuple[int, bytes]]) -> _TermRecords:
    records = np.frombuffer(b"".join(data for _, data in postings), dtype=_RECORD)
    counts = [len(data) // POSTING_SIZE for _, data in postings]
    bases = np.repeat(np.array([base for base, _ in postings], dtype=np.int64), counts)
    return _TermRecords(
        df,
        term,
        bases + records["offset"],
        records["length"].astype(np.float64),
        records["tf"].astype(np.float64),
    )


def search(
    tables: Tables,
    stream: StreamId,
    query: str,
    limit: int,
    unindexed: Iterable[tuple[int, str]] = (),
) -> SearchResult:
    """The stream's messages best matching the words of `query`, by BM25.

    `unindexed` are (index, text) of messages the index does not hold yet
    (the projection indexes messages in whole chunks); they are searched,
    and weigh in the statistics, exactly as if it held them.

    Hits are ranked by score, best first; equal scores put the newer message
    first. `total` counts every message holding at least one query term.
    Terms are scored from the rarest up. A term found in more than
    `COMMON_DF` messages, once rarer terms (in at most `COMMON_DF` each) have
    found at least `limit` messages, is scored only for the messages already
    found: a message matching nothing but such common words could not have
    ranked among them in ordinary cases. Those messages still count in
    `total`. A query of common words alone is scored in full.
    """
    prefix = stream_prefix(stream)
    length, per_bucket = read_totals(tables, prefix)
    query_terms = list(dict.fromkeys(term_bytes(query)))
    open_found, open_documents, open_length = open_postings(unindexed, query_terms)
    documents = sum(per_bucket) + open_documents
    length += open_length
    if documents == 0 or limit <= 0:
        return SearchResult([], 0)
    buckets = [bucket for bucket, count in enumerate(per_bucket) if count]
    found: list[_TermRecords] = []
    for term in query_terms:
        postings, df = term_postings(tables, prefix, term, buckets)
        postings.extend(open_found[term])
        df += len(open_found[term])
        if df:
            found.append(_term_records(df, term, postings))
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


def _best(
    found: list[_TermRecords], size: int, documents: int, length: int, limit: int
) -> SearchResult:
    """Score the terms' records (rarest first) over messages 0..size-1 and rank them."""
    scores = np.zeros(size, dtype=np.float64)
    scored = np.zeros(size, dtype=np.bool_)  # messages with a score
    matched = np.zeros(size, dtype=np.bool_)  # messages holding any query term
    length_weight = K1 * B * documents / length
    constant = K1 * (1 - B)
    rare_found = 0  # messages found by terms in at most COMMON_DF messages
    for records in found:
        df, indexes, tfs = records.df, records.indexes, records.tfs
        weight = math.log(1 + (documents - df + 0.5) / (df + 0.5)) * (K1 + 1)
        term_scores = weight * tfs / (tfs + constant + length_weight * records.lengths)
        matched[indexes] = True
        if df > COMMON_DF and rare_found >= limit:
            known = scored[indexes]
            scores[indexes[known]] += term_scores[known]
            continue
        scores[indexes] += term_scores
        scored[indexes] = True
        if df <= COMMON_DF:
            rare_found = int(np.count_nonzero(scored))
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
