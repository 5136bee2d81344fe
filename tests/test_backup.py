"""eva backup and eva restore: a hot compacted copy, verified back, that never brings back
someone forgotten after it was taken."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import lmdb
import pytest
import trio
from fleet import posts
from test_forget import PEOPLE, built, forget_from, marker, markers_in_files

from eva.cli.main import main
from eva.core.forget import person_hash
from eva.core.keys import StreamId
from eva.store.backup import MANIFEST
from eva.store.event_store import Batch, EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.writer_lock import take_writer_lock

FORGOTTEN = 202
BUSY = StreamId(9, 3)


def eva(*argv: str, dirs: list[Path]) -> int:
    try:
        return main(list(argv))
    finally:
        for directory in dirs:
            if (directory / "data.mdb").exists():
                open_backend(directory).close()


@pytest.fixture
def backed_up(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A live directory, a backup taken while a writer appended to it, and then a forget
    of one person in the live directory (after the backup)."""
    live, backup = tmp_path / "live", tmp_path / "backup"
    store, _ = trio.run(built, live)
    held = take_writer_lock(live)  # the bot holds it; a backup only reads

    def keep_writing() -> None:
        for start in range(0, 400, 8):
            batch = posts(BUSY, start + 8)[start:]
            store.append_many([Batch(BUSY, batch)])

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        assert main(["backup", str(backup), "--data", str(live), "--json"]) == 0
    finally:
        writer.join()
    os.close(held)
    forgotten = [marker(FORGOTTEN, i) for i in range(160)]
    assert markers_in_files(backup, forgotten)  # taken before the forget
    trio.run(forget_from, store, live, FORGOTTEN, [StreamId(9, c) for c in (1, 2)])
    assert not markers_in_files(live, forgotten)
    open_backend(live).close()
    return live, backup, forgotten


def test_a_backup_taken_while_a_writer_writes_is_whole_and_compact(
    backed_up: tuple[Path, Path, list[str]]
) -> None:
    _, backup, _ = backed_up
    manifest = json.loads((backup / MANIFEST).read_text())["streams"]
    assert {"9/1", "9/2"} <= set(manifest)
    busy = manifest.get(str(BUSY))
    assert busy is None or busy[0] % 8 == 0  # whole commits only: one snapshot
    assert not (backup.parent / "backup.partial").exists()
    assert sorted(p.name for p in backup.iterdir()) == ["backup.json", "data.mdb"]


def test_a_restore_over_the_live_directory_forgets_again_whoever_it_forgot_since(
    backed_up: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    live, backup, forgotten = backed_up
    assert eva("restore", str(backup), "--data", str(live), dirs=[live]) == 1
    err = capsys.readouterr().err
    assert "--replace" in err  # it holds data: refused without --replace
    assert eva("restore", str(backup), "--data", str(live), "--replace", dirs=[live]) == 0
    out = capsys.readouterr().out
    assert "every one replays to its backed-up digest" in out
    assert "forgot again 1 person(s)" in out
    assert not markers_in_files(live, forgotten)
    others = [marker(p, i) for p in PEOPLE if p != FORGOTTEN for i in range(160)]
    assert markers_in_files(live, others)
    store = EventStore(open_backend(live))
    for stream in (StreamId(9, 1), StreamId(9, 2)):
        meta = store.meta(stream)
        assert meta is not None and person_hash(FORGOTTEN) in meta.forgotten
        assert not meta.forgetting
    open_backend(live).close()
    assert eva("replay", "--data", str(live), "--quiet", dirs=[live]) == 0


def test_a_restore_elsewhere_takes_the_forget_records_it_is_given(
    backed_up: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live, backup, forgotten = backed_up
    fresh = tmp_path / "fresh"
    argv = ["restore", str(backup), "--data", str(fresh), "--forgets-from", str(live), "--json"]
    assert eva(*argv, dirs=[live, fresh]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["forgotten_again"] == 1 and report["messages_erased"] > 0
    assert not markers_in_files(fresh, forgotten)

    # without any newer record it cannot know, and says so
    bare = tmp_path / "bare"
    assert eva("restore", str(backup), "--data", str(bare), dirs=[bare]) == 0
    assert "no newer forget records were read" in capsys.readouterr().err


def test_a_backup_that_does_not_verify_is_refused_and_nothing_changes(
    backed_up: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live, backup, _ = backed_up
    manifest = json.loads((backup / MANIFEST).read_text())
    manifest["streams"]["9/1"][2] = "0" * 64
    (backup / MANIFEST).write_text(json.dumps(manifest))
    before = (live / "data.mdb").read_bytes()
    argv = ["restore", str(backup), "--data", str(live), "--replace"]
    assert eva(*argv, dirs=[live]) == 1
    err = capsys.readouterr().err
    assert "does not verify" in err and len(err.strip().splitlines()) == 1
    assert (live / "data.mdb").read_bytes() == before
    assert eva("backup", str(backup), "--data", str(live), dirs=[live]) == 1
    assert "exists already" in capsys.readouterr().err
    assert eva("restore", str(tmp_path), "--data", str(live), dirs=[live]) == 1
    assert "no backup made by `eva backup`" in capsys.readouterr().err


def test_a_backup_inside_the_data_directory_is_refused(
    backed_up: tuple[Path, Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    live, _, _ = backed_up
    before = sorted(p.name for p in live.iterdir())
    assert main(["backup", "--data", str(live), str(live / "inside")]) == 1
    assert "inside the data directory" in capsys.readouterr().err
    open_backend(live).close()
    assert sorted(p.name for p in live.iterdir()) == before


def test_a_full_disk_during_a_backup_or_a_compaction_is_one_line_and_leaves_no_copy(
    backed_up: tuple[Path, Path, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # LMDB reports a refused write as a bare lmdb.Error; a half-written copy would hold
    # everyone's words where no forget looks, and the room it took.
    from eva.store import lmdb_kv

    live, _, _ = backed_up
    copy_into = lmdb_kv._copy_into

    def full(source: object, dbs: object, target: Path, map_bytes: int) -> None:
        copy_into(source, dbs, target, map_bytes)
        raise lmdb.Error("mdb_txn_commit: No space left on device")

    monkeypatch.setattr(lmdb_kv, "_copy_into", full)
    capsys.readouterr()
    target = tmp_path / "second"
    assert eva("backup", "--data", str(live), str(target), dirs=[live]) == 1
    err = capsys.readouterr().err
    assert "could not be written" in err and "is its disk full?" in err
    assert not target.exists() and not (tmp_path / "second.partial").exists()

    before = (live / "data.mdb").read_bytes()
    backend = open_backend(live)
    try:
        with pytest.raises(OSError, match="is its disk full"):
            backend.compact()
    finally:
        backend.close()
    assert sorted(p.name for p in live.iterdir()) == ["data.mdb", "eva.lock", "lock.mdb"]
    assert (live / "data.mdb").read_bytes() == before


def test_a_restore_into_a_new_directory_cut_short_by_a_full_disk_is_run_again_plainly(
    backed_up: tuple[Path, Path, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import errno
    import shutil

    _, backup, _ = backed_up
    target = tmp_path / "restored"
    copyfile = shutil.copyfile

    def no_room(source: Path, destination: Path) -> None:
        Path(destination).write_bytes(Path(source).read_bytes()[:4096])
        raise OSError(errno.ENOSPC, "No space left on device", str(source))

    monkeypatch.setattr(shutil, "copyfile", no_room)
    capsys.readouterr()
    assert eva("restore", "--data", str(target), str(backup), dirs=[target, backup]) == 1
    err = capsys.readouterr().err
    assert f"could not be copied into {target}" in err and "disk full" in err
    assert not (target / "compacting").exists()
    monkeypatch.setattr(shutil, "copyfile", copyfile)
    assert eva("restore", "--data", str(target), str(backup), dirs=[target, backup]) == 0
    assert "does not verify" not in capsys.readouterr().err


def test_a_restore_whose_forgets_meet_a_full_disk_says_they_are_pending(
    backed_up: tuple[Path, Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from eva.cli import cmd_forget

    live, backup, forgotten = backed_up
    finish = cmd_forget.finish_pending

    def no_room(*args: object, **kwargs: object) -> object:
        raise OSError(f"the data directory {live} could not be written: is its disk full?")

    monkeypatch.setattr(cmd_forget, "finish_pending", no_room)
    capsys.readouterr()
    assert eva("restore", str(backup), "--data", str(live), "--replace", dirs=[live]) == 1
    err = capsys.readouterr().err
    assert "is its disk full?" in err and "the forgets it owes are pending" in err
    monkeypatch.setattr(cmd_forget, "finish_pending", finish)
    assert eva("forget", "--resume", "--data", str(live), dirs=[live]) == 0
    assert not markers_in_files(live, forgotten)


def test_a_restore_erases_again_a_server_erased_since_and_keeps_newer_switches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    from eva.core.opt_out import EVERY_GUILD
    from eva.store.guild_erasure import erasure_of
    from eva.store.opt_outs import read_opt_outs, set_opt_out
    from eva.store.switches import read_switches, set_switch

    live, backup = tmp_path / "live", tmp_path / "backup"
    trio.run(built, live)
    open_backend(live).close()
    assert eva("backup", str(backup), "--data", str(live), dirs=[live]) == 0
    everyone = [marker(p, i) for p in PEOPLE for i in range(160)]
    assert markers_in_files(backup, everyone)
    # after the backup: the server is erased, a channel is turned off, someone kept out
    assert eva("forget", "--guild", "9", "--yes", "--data", str(live), dirs=[live]) == 0
    store = EventStore(open_backend(live))
    now = int(time.time() * 1000)
    set_switch(store, StreamId(8, 5), False, "moderator", now)
    set_opt_out(store, EVERY_GUILD, 303, True, "self", now)
    set_opt_out(store, 9, 101, True, "self", now)
    open_backend(live).close()
    capsys.readouterr()
    assert eva("restore", str(backup), "--data", str(live), "--replace", dirs=[live]) == 0
    assert not markers_in_files(live, everyone)  # the server erased again, at once
    store = EventStore(open_backend(live))
    try:
        record = erasure_of(store, 9)
        assert record is not None and record.done_ms and record.found == 0
        assert not read_switches(store)[StreamId(8, 5)].on
        # nothing of the erased server stays but its record: its keep-outs went with it
        assert {guild for guild, _ in read_opt_outs(store)} == {EVERY_GUILD}
        assert store.streams() == []
    finally:
        open_backend(live).close()
