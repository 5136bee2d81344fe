# Word stems: which words of the recall index are forms of a question's word.
#
# Pure: a term in, its stem out. The stems are the Snowball project's English
# stemmer (the `snowballstemmer` package, which uses PyStemmer's C code where
# it is installed): "installing", "installed" and "installs" share the stem
# "instal". Only words of three or more ASCII letters are stemmed; any other
# term (numbers, names with digits, other scripts) is its own stem, since an
# English stemmer would only mangle it. The index keeps the words as written
# (eva.core.recall_index); a question's word is matched to every indexed word
# with its stem (eva.core.recall_search), so nothing stored depends on the
# stemmer. A word's family goes further than its stem: "snorer" and "snore",
# "agreement" and "agree" have other stems, but one is the other with an
# English derivational suffix (`related`). Invariant: `stem` and `related`
# are functions of their terms alone.
from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Final

import snowballstemmer

# The shortest start two forms of a stem share, for looking forms up by prefix.
MIN_PREFIX: Final = 3

# English derivational suffixes (and the plural "s", and "r" after a final "e"):
# a word with one of these, less it, is of the same family as the rest.
DERIVATIONAL: Final = (
    *(b"s", b"r", b"er", b"or", b"ist", b"ment", b"ness", b"ity", b"ary", b"ery", b"ion"),
    *(b"ation", b"al", b"ial", b"ic", b"ive", b"ous", b"ful", b"less", b"able", b"ible"),
    *(b"ly", b"ship", b"hood", b"dom", b"ism"),
)

_local = threading.local()  # a stemmer keeps state between calls: one per thread


def _stemmer() -> snowballstemmer.BaseStemmer:
    stemmer: snowballstemmer.BaseStemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


@functools.lru_cache(maxsize=65536)
def stem(term: bytes) -> bytes:
    """The stem of an index term (UTF-8, folded as eva.core.terms folds it)."""
    if len(term) < MIN_PREFIX or not term.isalpha() or not term.isascii():
        return term
    return _stemmer().stemWord(term.decode()).encode()  # type: ignore[no-any-return]


def forms_prefix(term: bytes) -> bytes:
    """A start that every indexed form with the same stem as `term` is taken to share.

    The stem less its last letter: English stems drop a final "e" ("moving"
    and "move" share "mov") or turn "y" into "i" ("family" and "families"
    share "famil"), so the stem itself is not always a prefix of each form.
    """
    stemmed = stem(term)
    if stemmed == term and not term.isalpha():
        return term
    return stemmed[: max(len(stemmed) - 1, MIN_PREFIX)]


@functools.lru_cache(maxsize=65536)
def stem_roots(term: bytes) -> tuple[bytes, ...]:
    """The stem of `term`, then the stems of what is left of it less each derivational
    suffix it ends with (at least `MIN_PREFIX` letters left), each once: "agreement"
    gives "agreement" and "agre" (the stem of "agree")."""
    if not term.isalpha() or not term.isascii():
        return (stem(term),)
    less = (
        stem(term[: -len(suffix)])
        for suffix in DERIVATIONAL
        if term.endswith(suffix) and len(term) - len(suffix) >= MIN_PREFIX
    )
    return tuple(dict.fromkeys((stem(term), *less)))


def related(term: bytes, wanted: bytes, roots: Sequence[bytes]) -> bool:
    """Whether `term` is of the family of a word with stem `wanted` and roots `roots`
    (`stem_roots`): one's stem is among the other's roots."""
    return stem(term) in roots or wanted in stem_roots(term)


def family_prefix(term: bytes) -> bytes:
    """A start that every indexed word of `term`'s family is taken to share: the
    shortest `forms_prefix` of its roots."""
    roots = stem_roots(term)
    if len(roots) == 1:
        return forms_prefix(term)
    return min((forms_prefix(root) for root in roots), key=len)
