# Search terms: what a word is, for the recall index and for queries alike.
#
# Pure: text in, terms out. A term is a word folded in case and accents; a
# Han or kana character is a term alone. ASCII text takes a fast path on
# bytes; other text is folded run by run and joins that path when only ASCII
# words are left. Invariant: `terms` and `term_bytes` give the same words.
from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final

MAX_TERM_CHARS: Final = 40
# Before each word of a message's author name, in the recall index: "Steve Lee"
# is indexed as the words "0by0steve" and "0by0lee" with every message of his,
# which no chat writes, so the index finds a person's own messages.
AUTHOR_MARK: Final = "0by0"

# Han, kana and CJK compatibility ideographs: each character is its own term,
# since these scripts do not put spaces between words.
_CJK: Final = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U0003134f"
)
_WORD = re.compile(f"[^\\W_{_CJK}]+|[{_CJK}]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _ascii_table(*, fold_case: bool) -> bytes:
    """A `bytes.translate` table keeping letters and digits and making the rest spaces."""
    table = bytearray(b" " * 256)
    for kept in b"0123456789abcdefghijklmnopqrstuvwxyz":
        table[kept] = kept
    for upper in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        table[upper] = upper + 32 if fold_case else upper
    return bytes(table)


ASCII_FOLD: Final = _ascii_table(fold_case=True)
"""Folds ASCII text for its terms: letters lower case, digits kept, every other byte a
space (so `bytes.split` gives the words)."""
_ASCII_SPLIT: Final = _ascii_table(fold_case=False)
# A word over the limit is a run of that many non-spaces: with every
# non-space byte made an "a", one substring search finds it.
_NON_SPACE_AS_A: Final = bytes(byte if byte == 0x20 else 0x61 for byte in range(256))
_OVERLONG: Final = b"a" * (MAX_TERM_CHARS + 1)


@functools.lru_cache(maxsize=8192)
def _fold_run(run: str) -> str:
    """A run of non-ASCII characters without its marks; a space if no word is left in it.

    A space splits words as the run's characters would, and lets a text whose
    words are all ASCII take the fast path.
    """
    kept = "".join(c for c in run if unicodedata.category(c) != "Mn")
    return kept if not kept or _WORD.search(kept) else " "


def _fold_runs(match: re.Match[str]) -> str:
    return _fold_run(match.group())


def terms(text: str) -> list[str]:
    """The search terms of `text`, in order: words folded in case and accents.

    A word is a run of letters and digits; a Han or kana character is a word
    alone. Words over 40 characters (hashes, pasted blobs) are dropped.
    """
    return [word.decode() for word in term_bytes(text)]


def term_bytes(text: str) -> list[bytes]:
    """The `terms` of `text` in UTF-8, as the index keys hold them."""
    if text.isascii():
        spaced = text.encode().translate(ASCII_FOLD)
    else:
        folded = _NON_ASCII.sub(_fold_runs, unicodedata.normalize("NFKD", text.casefold()))
        if not folded.isascii():
            return _unicode_words(folded)
        # Casefold and NFKD may leave capitals ("℃" gives "°C"): split, fold no more.
        spaced = folded.encode().translate(_ASCII_SPLIT)
    words = spaced.split()
    if len(spaced) > MAX_TERM_CHARS and _OVERLONG in spaced.translate(_NON_SPACE_AS_A):
        return [word for word in words if len(word) <= MAX_TERM_CHARS]
    return words


def _unicode_words(folded: str) -> list[bytes]:
    # Recompose what dropping the marks leaves (Hangul jamo into syllables).
    found = _WORD.findall(unicodedata.normalize("NFC", folded))
    if len(folded) > MAX_TERM_CHARS:
        found = [word for word in found if len(word) <= MAX_TERM_CHARS]
    # No word holds a newline, so one join and one split encode them all.
    return "\n".join(found).encode().split(b"\n") if found else []


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)  # a channel's few hundred names, met with each message
def author_words(author_name: str) -> str:
    """The words of an author's name as the recall index holds them with each message
    of theirs: each behind `AUTHOR_MARK`. A word that would not stay one word behind
    the mark (a Han or kana character) is left out."""
    marked = [AUTHOR_MARK + word for word in terms(author_name)]
    return " ".join(word for word in marked if terms(word) == [word])
