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
# stemmer. Invariant: `stem` is a function of the term alone.
from __future__ import annotations

import functools
import threading
from typing import Final

import snowballstemmer

# The shortest start two forms of a stem share, for looking forms up by prefix.
MIN_PREFIX: Final = 3

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
