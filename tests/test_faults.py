"""Faults of the machine under the command line: each ends in one clear line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eva.cli.main import main
from eva.demo.friends import friends_export
from eva.store.lmdb_kv import open_backend


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "friends.json"
    path.write_bytes(friends_export(200))
    return path


@pytest.mark.parametrize("command", [["import", "{export}"], ["status"], ["memory", "friends"],
                                     ["build"], ["plan", "--data", "{data}"]])
def test_a_file_where_the_data_directory_should_be(
    command: list[str], export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    args = [a.format(export=export, data=data) for a in command]
    if "--data" not in args:
        args += ["--data", str(data)]
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "is a file, not a data directory" in err and "Traceback" not in err
    assert data.read_text() == "not a directory"


def test_a_data_directory_under_a_file(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("x")
    capsys.readouterr()
    assert main(["import", str(export), "--data", str(tmp_path / "afile" / "data")]) == 1
    err = capsys.readouterr().err
    assert "cannot open the data directory" in err and "Traceback" not in err


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A small file system to remount read-only (needs root and tmpfs; skipped elsewhere)."""
    mount = _tmpfs(tmp_path, "8m")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def test_a_read_only_file_system(
    read_only: Path, export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = read_only / "data"
    assert main(["import", str(export), "--data", str(data)]) == 0
    open_backend(data).close()  # the process keeps its environment open; let go of it
    remounted = subprocess.run(["mount", "-o", "remount,ro", str(read_only)],
                               capture_output=True, check=False)
    if remounted.returncode != 0:
        pytest.skip("cannot remount read-only here")
    capsys.readouterr()
    for args in (["import", str(export)], ["build"], ["forget", "--user", "5"]):
        assert main([*args, "--data", str(data)]) == 1
        err = capsys.readouterr().err
        assert "is read-only here, and this command writes to it" in err, args
        assert err.count("\n") == 1 and "Traceback" not in err, args
    # what only reads works on it
    for args in (["status"], ["memory", "friends"], ["recall", "friends", "trip"],
                 ["audit", "friends"], ["replay"]):
        assert main([*args, "--data", str(data)]) == 0, args
        assert "Traceback" not in capsys.readouterr().err
    assert main(["import", str(export), "--data", str(read_only / "new")]) == 1
    assert "Read-only file system" in capsys.readouterr().err


def _tmpfs(tmp_path: Path, size: str) -> Path:
    mount = tmp_path / f"fs-{size}"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    return mount


def test_a_full_disk_refuses_the_write_and_keeps_what_was_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mount = _tmpfs(tmp_path, "640k")
    try:
        data = mount / "data"
        small, big = tmp_path / "small.json", tmp_path / "big.json"
        small.write_bytes(friends_export(60))
        big.write_bytes(friends_export(3000))
        assert main(["import", str(small), "--data", str(data)]) == 0
        capsys.readouterr()
        assert main(["import", str(big), "--data", str(data)]) == 1
        err = capsys.readouterr().err
        assert "could not be written" in err and "disk full" in err and "Traceback" not in err
        assert main(["status", "--data", str(data), "--json"]) == 0
        [channel] = json.loads(capsys.readouterr().out)["channels"]
        assert channel["messages"] == 60  # the refused import left nothing of itself
        assert main(["replay", "--data", str(data)]) == 0
    finally:
        open_backend(mount / "data").close()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def test_a_damaged_record_ends_in_one_line(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data)]) == 0
    backend = open_backend(data)

    def damage(tables: Any) -> None:
        for key, value in tables.scan("events", b"", b"\xff" * 40):
            if b"message.posted" in value:
                broken = bytearray(value)
                broken[3] ^= 0xFF
                broken[-5] ^= 0x55
                tables.put("events", key, bytes(broken))
                return

    backend.write(damage)
    backend.close()
    capsys.readouterr()
    status = main(["memory", "friends", "--data", str(data)])
    err = capsys.readouterr().err
    assert status == 1
    # every event read is checked against its seal before it is decoded
    assert "event 1 does not match its seal" in err and "damaged" in err
    assert "Traceback" not in err and err.count("\n") == 1
    # the audit checks the log's seals first, and names the first event that broke them
    assert main(["audit", "friends", "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "broken at event 1" in err
    assert main(["replay", "--data", str(data)]) == 1
    captured = capsys.readouterr()
    assert "LOG DAMAGED: event 1 does not decode" in captured.out
    assert "Traceback" not in captured.err


def test_a_fault_of_evas_own_is_one_line_unless_asked_for_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import eva.cli.cmd_status as status

    def broken(*args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(status, "directory_status", broken)
    data = tmp_path / "data"
    (tmp_path / "e.json").write_bytes(friends_export(20))
    assert main(["import", str(tmp_path / "e.json"), "--data", str(data), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["status", "--data", str(data)]) == 70
    err = capsys.readouterr().err
    assert "unexpected RuntimeError: a bug" in err and "EVA_DEBUG=1" in err
    monkeypatch.setenv("EVA_DEBUG", "1")
    with pytest.raises(RuntimeError, match="a bug"):
        main(["status", "--data", str(data)])


def test_a_second_writer_is_told_who_writes(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    open_backend(data).close()  # lets go of its writer lock
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    writer = subprocess.Popen(
        [sys.executable, "-m", "eva.cli.main", "serve-local", "--acks", "--quiet",
         "--data", str(data)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        writer.stdin.write(b"#friends Ann: holding the directory\n")
        writer.stdin.flush()
        assert writer.stdout.readline().startswith(b"#friends")  # it is serving
        capsys.readouterr()
        for args in (["build"], ["import", str(export)], ["forget", "--user", "5"]):
            assert main([*args, "--data", str(data)]) == 1, args
            err = capsys.readouterr().err
            assert f"another eva process is writing to {data} (pid {writer.pid})" in err
        assert main(["status", "--data", str(data)]) == 0  # reading goes on
    finally:
        writer.communicate(timeout=30)
    capsys.readouterr()
    assert main(["build", "--data", str(data)]) == 0  # once it is gone, the next one writes
    open_backend(data).close()


def test_a_file_that_may_not_be_written_leaves_reading_to_work(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """data.mdb made immutable (which stops root too, where file modes do not): commands
    that read open it read-only; those that write say so in one line."""
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    open_backend(data).close()
    made = subprocess.run(["chattr", "+i", str(data / "data.mdb")], capture_output=True,
                          check=False)
    if made.returncode != 0:
        pytest.skip("cannot make a file immutable here")
    try:
        capsys.readouterr()
        for args in (["status"], ["memory", "friends"], ["recall", "friends", "trip"]):
            assert main([*args, "--data", str(data)]) == 0, args
        open_backend(data, readonly=True).close()  # as the next command's own process would
        for args in (["build"], ["import", str(export)]):
            assert main([*args, "--data", str(data)]) == 1, args
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "Operation not permitted" in err, args
    finally:
        subprocess.run(["chattr", "-i", str(data / "data.mdb")], check=False)
        open_backend(data, readonly=True).close()
        open_backend(data).close()
