# Ranking recall's hits: the people a question names.
#
# Pure: search results and what is known of the messages they found (who
# wrote each, on which day) in, ranked hits out. Two rules on top of BM25
# (eva.core.recall_search): a message written by a person the question names
# counts as if it said the name, so "what did jl777 say about fees" ranks
# jl777's own words on fees above others' pings of jl777. (Lowering each
# further hit from a day already shown, to spread an answer over days, was
# measured on scripts/eval_recall.py and found fewer answers: it is not done.)
# Invariants: the result holds no index twice, best first; equal scores keep
# the newer message first.
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from eva.core.terms import term_bytes

# How much more a named person's own message counts than the same words from
# someone else.
AUTHOR_BOOST: Final = 1.0
# A question word as short as this names a person only if it is their whole name word.
MIN_NAME_PREFIX: Final = 4

Hits = Sequence[tuple[int, float]]


def name_words(author_name: str) -> tuple[bytes, ...]:
    """The words of an author's name as the index folds words ("Zoë" gives b"zoe")."""
    return tuple(term_bytes(author_name))


def names_in(words: Iterable[bytes], author: Sequence[bytes]) -> frozenset[bytes]:
    """The question's words that name `author` (given as `name_words`).

    A word names them when it is a word of their name, or when one is the
    start of the other and the shorter has at least four letters ("jl777"
    for "jl777c", "tony" for "tonyl").
    """
    named = set()
    for word in words:
        for part in author:
            if word == part or (
                min(len(word), len(part)) >= MIN_NAME_PREFIX
                and (part.startswith(word) or word.startswith(part))
            ):
                named.add(word)
    return frozenset(named)


def with_authors(plain: Hits, without_names: Hits, by_named: Callable[[int], bool]) -> list[
    tuple[int, float]
]:
    """The hits of a search for every word (`plain`) joined with those of a search
    without the words that name people (`without_names`), in which a named
    person's messages count `1 + AUTHOR_BOOST` times; each message keeps its
    better score."""
    best: dict[int, float] = dict(plain)
    for index, score in without_names:
        if by_named(index):
            boosted = score * (1 + AUTHOR_BOOST)
            if boosted > best.get(index, 0.0):
                best[index] = boosted
    return sorted(best.items(), key=lambda hit: (hit[1], hit[0]), reverse=True)
