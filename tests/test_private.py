"""Data directories, backups and their copies are their owner's alone, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.store import lmdb_kv
from eva.store.backup import stage, take_backup
from eva.store.event_store import EventStore

STREAM = StreamId(1, 2)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The usual umask, one that takes nothing away, and one that leaves group bits."""
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


@pytest.fixture
def store(tmp_path: Path, umask: int) -> Iterator[EventStore]:
    backend = lmdb_kv.open_backend(tmp_path / "new" / "data")
    backend.hold_writer_lock()
    opened = EventStore(backend)
    opened.append(STREAM, [
        MessagePosted(at_ms=1, index=0, message_id=10, author_id=3, author_name="Ann",
                      content="my bank PIN is 9081"),
    ])
    yield opened
    backend.close()


def test_a_data_directory_eva_makes_is_hers_alone(store: EventStore, tmp_path: Path) -> None:
    data = tmp_path / "new" / "data"
    assert mode(data) == 0o700
    assert {name: mode(data / name) for name in ("data.mdb", "lock.mdb", "eva.lock")} == {
        "data.mdb": 0o600, "lock.mdb": 0o600, "eva.lock": 0o600,
    }
    assert isinstance(store.backend, lmdb_kv.LmdbBackend)
    store.backend.compact()  # the compacted file takes the data file's place
    assert mode(data / "data.mdb") == 0o600 and mode(data) == 0o700


def test_a_backup_and_a_restores_staging_are_theirs_alone(
    store: EventStore, tmp_path: Path
) -> None:
    target = tmp_path / "backups" / "monday"
    take_backup(store, tmp_path / "new" / "data", target)
    assert mode(target) == 0o700
    assert {path.name: mode(path) for path in target.iterdir()} == {
        "data.mdb": 0o600, "backup.json": 0o600,
    }
    staging = tmp_path / "staging"
    stage(target, staging)
    assert (mode(staging), mode(staging / "data.mdb")) == (0o700, 0o600)


def test_a_directory_the_operator_made_keeps_its_mode_and_eva_s_files_are_private(
    tmp_path: Path, umask: int
) -> None:
    made = tmp_path / "made"
    made.mkdir()
    os.chmod(made, 0o750)
    backend = lmdb_kv.open_backend(made)
    try:
        assert mode(made) == 0o750
        assert mode(made / "data.mdb") == mode(made / "lock.mdb") == 0o600
    finally:
        backend.close()
