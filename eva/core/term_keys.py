# How a stream's recall index names its terms: as they are, or by keyed hashes.
#
# Pure (the secret is given). A directory that seals people's words (eva.core.keys
# .SEALED_AT_REST) holds no word of theirs in its index either: each term is named by
# a keyed hash of it (8 bytes, under a secret made from the server's own key, so a
# copy of the data without the key store names nothing). A prefix walk cannot find a
# word's family among hashes, so each term is also filed under the families it
# belongs to, each a hash too: its stem, each of its roots (eva.core.stems), and, for
# a mark of an author's name, each start of the name a question may give. A word's
# family is then the terms filed under its roots' stems and under its own stem's root:
# eva.core.stems.related exactly, as the open chunk finds it. A directory that does
# not seal keeps its terms as they are.
from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from eva.core.keys import LAYOUT, SEALED_AT_REST, StreamId
from eva.core.stems import stem, stem_roots
from eva.core.terms import AUTHOR_MARK

if TYPE_CHECKING:
    from eva.core.tables import Tables

KEY_BYTES: Final = 8
MIN_NAME_START: Final = 4
"""The fewest letters of a word that name an author whose name word starts with it."""
_MARK: Final = AUTHOR_MARK.encode()
_MOST_CACHED: Final = 1 << 16
_STEM, _ROOT, _START = b"\x00s", b"\x00r", b"\x00p"  # no term holds a zero byte


class TermKeys:
    """How one stream's index names terms: `key` of a term, and the families a hashed
    index files it under."""

    __slots__ = ("_cache", "secret")

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret
        self._cache: dict[bytes, bytes] = {}

    @property
    def hashed(self) -> bool:
        return self.secret is not None

    def key(self, term: bytes) -> bytes:
        """The name of `term` in the index: itself, or its keyed hash."""
        if self.secret is None:
            return term
        found = self._cache.get(term)
        if found is None:
            found = hashlib.blake2b(term, key=self.secret, digest_size=KEY_BYTES).digest()
            if len(self._cache) >= _MOST_CACHED:
                self._cache.clear()
            self._cache[term] = found
        return found

    def families(self, term: bytes) -> list[bytes]:
        """The families a hashed index files `term` under (none for a plain one)."""
        if self.secret is None:
            return []
        made = [self.key(_STEM + stem(term))]
        made += [self.key(_ROOT + root) for root in stem_roots(term)]
        if term.startswith(_MARK):
            first = len(_MARK) + MIN_NAME_START
            made += [self.key(_START + term[:end]) for end in range(first, len(term) + 1)]
        return list(dict.fromkeys(made))

    def family_of_word(self, word: bytes) -> list[bytes]:
        """The families whose terms are of `word`'s family (eva.core.stems.related): those
        filed under a stem among its roots, and under its stem as a root."""
        made = [self.key(_STEM + root) for root in stem_roots(word)]
        made.append(self.key(_ROOT + stem(word)))
        return list(dict.fromkeys(made))

    def names_starting(self, start: bytes) -> bytes:
        """The family of the author marks that begin with `start` (a mark and at least
        `MIN_NAME_START` letters)."""
        return self.key(_START + start)


PLAIN: Final = TermKeys(None)

SecretOf = Callable[[int, bool], bytes | None]
"""The secret of a server's index (from its key), made if asked and there is none; None
if there is none."""
_secret_of: SecretOf | None = None
_known: dict[tuple[int, bytes], TermKeys] = {}


def use_index_secrets(secret_of: SecretOf | None) -> None:
    """Name terms in sealing directories with the secrets `secret_of` gives, from now on,
    in this process (eva.store.key_binding installs the key ring's)."""
    global _secret_of
    _secret_of = secret_of
    _known.clear()


def term_keys(tables: Tables, stream: StreamId, *, write: bool = False) -> TermKeys:
    """How the index of `stream` in `tables` names its terms. A sealing directory with no
    secret to be had names them by a secret of nothing: nothing is found in it (its
    server was erased, or the process has not its key store)."""
    if tables.get(LAYOUT, SEALED_AT_REST) is None:
        return PLAIN
    secret = None if _secret_of is None else _secret_of(stream.guild_id, write)
    if secret is None:
        if write:
            raise LookupError("a sealing directory's index is written with its server's key")
        return TermKeys(b"\x00" * 32)
    found = _known.get((stream.guild_id, secret))
    if found is None:
        found = _known[(stream.guild_id, secret)] = TermKeys(secret)
    return found
