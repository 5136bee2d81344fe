# Which key store a data directory belongs to, and holding it to that one.
#
# Shell. The first command that writes to a data directory with a key store binds the
# two: the store's id goes in the directory's `layout` table, and from then on the
# directory's forgets are recorded under hashes keyed by that store. A directory bound to
# a store is opened only with it: never with none, another, or a new one made in its place.
from __future__ import annotations

from eva.core.keys import LAYOUT
from eva.core.tables import Tables
from eva.store.event_store import EventStore
from eva.store.key_store import KEYS_ENV, KeyStore, KeyStoreError, default_path

BOUND_TO = b"key_store"
"""The `layout` entry that holds the id of the key store the directory is bound to."""


def bound_id(store: EventStore) -> str | None:
    """The id of the key store `store` is bound to, if it is."""
    with store.backend.reading() as tables:
        found = tables.get(LAYOUT, BOUND_TO)
    return None if found is None else found.decode()


def bind(store: EventStore, key_store: KeyStore | None, *, write: bool) -> None:
    """Give `store` the hashes of its key store, binding the two first if `write`s and
    the store is bound to none. KeyStoreError when the directory is bound to a store
    and `key_store` is missing or another one."""
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
