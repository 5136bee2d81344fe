# Which key store a data directory belongs to, and holding it to that one.
#
# Shell. The first command that writes to a data directory with a key store binds the
# two: the store's id goes in the directory's `layout` table, and from then on the
# directory's forgets are recorded under hashes keyed by that store. A directory bound to
# a store is opened only with it: never with none, another, or a new one made in its place.
from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path

from eva.core.events import use_opener
from eva.core.keys import LAYOUT, SEALED_AT_REST
from eva.core.tables import Tables
from eva.store.event_store import EventStore
from eva.store.key_ring import KeyRing
from eva.store.key_store import KEYS_ENV, KeyStore, KeyStoreError, default_path, open_key_store
from eva.store.kv import Backend
from eva.store.seal_in_place import say_on_stderr, seal_in_place

BOUND_TO = b"key_store"
"""The `layout` entry that holds the id of the key store the directory is bound to."""


def bound_id(store: EventStore) -> str | None:
    """The id of the key store `store` is bound to, if it is."""
    with store.backend.reading() as tables:
        found = tables.get(LAYOUT, BOUND_TO)
    return None if found is None else found.decode()


def bind(
    store: EventStore,
    key_store: KeyStore | None,
    *,
    write: bool,
    say: Callable[[str], None] | None = say_on_stderr,
) -> None:
    """Give `store` the hashes and the keys of its key store, binding the two first if
    `write`s and the store is bound to none; a writing bind of a directory that does not
    seal yet seals what it holds in place first (eva.store.seal_in_place, which `say`s
    so). KeyStoreError when the directory is bound to a store and `key_store` is missing
    or another one."""
    bound = bound_id(store)
    if bound is None:
        if not write or key_store is None:
            return

        def mark(tables: Tables) -> None:
            if tables.get(LAYOUT, BOUND_TO) is None:
                tables.put(LAYOUT, BOUND_TO, key_store.id.encode())

        store.backend.write(mark)
        bound = bound_id(store)
    if key_store is None:
        raise KeyStoreError(
            f"this data directory is keyed with key store {bound}, and there is none at "
            f"{default_path()}: set {KEYS_ENV} to where it is"
        )
    if key_store.id != bound:
        raise KeyStoreError(
            f"this data directory is keyed with key store {bound}, not with the one at "
            f"{key_store.path} ({key_store.id}): set {KEYS_ENV} to where {bound} is"
        )
    store.hashes = key_store.person_hashes()
    ring = ring_of(key_store)
    use_opener(ring.open)  # what was sealed reads opened
    if write and not seals_at_rest(store):  # written before: sealed in place, once
        seal_in_place(store, ring, say)
    store.sealer = ring if seals_at_rest(store) else None


def seals_at_rest(store: EventStore) -> bool:
    """Whether `store`'s directory seals what it writes."""
    with store.backend.reading() as tables:
        return tables.get(LAYOUT, SEALED_AT_REST) is not None


_rings: dict[str, KeyRing] = {}


def ring_of(key_store: KeyStore) -> KeyRing:
    """This process's key ring of `key_store` (one per store: it keeps what it unwrapped)."""
    ring = _rings.get(key_store.id)
    if ring is None or ring.people.folder.parent != key_store.path:
        ring = _rings[key_store.id] = KeyRing(key_store)
    return ring


def keyed_store(backend: Backend, *, write: bool) -> EventStore:
    """A store over `backend` bound to the key store EVA_KEYS names (made if `write`s and
    there is none), as a command binds it: a directory that seals is read and written
    only with its keys. For scripts that open a directory a command made."""
    store = EventStore(backend)
    bind(store, open_key_store(create=write), write=write, say=None)
    return store


@contextmanager
def key_store_at(folder: Path) -> Iterator[KeyStore]:
    """EVA_KEYS names a key store made quietly at `folder` while inside: benchmarks and
    checks never write people's keys into the operator's store."""
    before = os.environ.get(KEYS_ENV)
    os.environ[KEYS_ENV] = str(folder)
    try:
        with redirect_stderr(io.StringIO()):
            made = open_key_store(create=True)
        assert made is not None
        yield made
    finally:
        if before is None:
            os.environ.pop(KEYS_ENV, None)
        else:
            os.environ[KEYS_ENV] = before
