# What every test shares: a key store of its own, never the one in the home directory.
from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import TypeVar

import pytest

EventStoreT = TypeVar("EventStoreT")


@pytest.fixture(autouse=True, scope="session")
def key_store_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """EVA_KEYS names a directory of this test process (and the processes it starts),
    made before any test runs: no command's output depends on being the first to write."""
    from eva.store.key_store import open_key_store

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EVA_KEYS", str(tmp_path_factory.mktemp("keys") / "store"))
        patch.delenv("EVA_MASTER_KEY", raising=False)
        with contextlib.redirect_stderr(io.StringIO()):  # its notice, said once
            open_key_store(create=True)
        yield


@pytest.fixture(autouse=True)
def own_key_store(
    key_store_of_the_tests: None,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each test a copy of the tests' key store (the same store: the same master key and
    record): a forget destroys people's keys in it, as in an operator's, and the copies of
    one data directory the tests make share their keys, so no test may take another's."""
    import shutil
    from pathlib import Path

    copy = tmp_path_factory.mktemp("own-keys") / "store"
    shutil.copytree(Path(os.environ["EVA_KEYS"]), copy)
    monkeypatch.setenv("EVA_KEYS", str(copy))


@contextlib.contextmanager
def key_store_of_its_own(where: object) -> Iterator[None]:
    """EVA_KEYS names a copy of the key store it names now, made at `where`, while inside:
    for a fixture wider than a test that forgets someone (destroying their keys), so that
    the tests after it find the keys of the directories they copy."""
    import shutil
    from pathlib import Path

    assert isinstance(where, Path)
    shutil.copytree(Path(os.environ["EVA_KEYS"]), where)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EVA_KEYS", str(where))
        yield


def keyed_hash(person_id: int) -> str:
    """The hash a forget of `person_id` is recorded under by a command (the tests' store)."""
    from eva.store.key_store import open_key_store

    store = open_key_store(create=True)
    assert store is not None and os.environ["EVA_KEYS"] == str(store.path)
    return store.person_hashes().recorded(person_id)


def sealed_directory(directory: object) -> None:
    """Bind the data directory at `directory` to the tests' key store, sealing in place what
    it holds (what a first writing command does), quietly; the directory is closed after."""
    from pathlib import Path

    from eva.store.event_store import EventStore
    from eva.store.key_binding import bind
    from eva.store.key_store import open_key_store
    from eva.store.lmdb_kv import open_backend

    assert isinstance(directory, Path)
    backend = open_backend(directory)
    try:
        bind(EventStore(backend), open_key_store(create=True), write=True, say=None)
    finally:
        backend.close()


def keyed(store: EventStoreT, *, write: bool = True) -> EventStoreT:
    """`store` bound to the tests' key store, as a command that writes binds it (a directory
    that seals is written only through a store that has its keys), or one that reads."""
    from eva.store.event_store import EventStore
    from eva.store.key_binding import bind
    from eva.store.key_store import open_key_store

    assert isinstance(store, EventStore)
    bind(store, open_key_store(create=True), write=write, say=None)
    return store
