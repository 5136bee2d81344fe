# `eva serve-local` and `eva status`, run as the commands a person runs, in subprocesses.
#
# Each test feeds a real process (standard input lines, or an export it
# replays) and then reads the data directory back with `eva status --json` and
# `eva memory`: what the server acknowledged must be there, in its channel.
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eva.live.local_chat import ChatLine, local_stream, parse_chat_line

EVA = [sys.executable, "-m", "eva.cli.main"]
TIMEOUT_S = 60.0


def eva(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EVA, *args], input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def status(data: Path) -> dict[str, Any]:
    done = eva("status", "--json", "--data", str(data))
    assert done.returncode == 0, done.stderr
    value: dict[str, Any] = json.loads(done.stdout)
    return value


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["channel_name"]: c for c in report["channels"]}


def write_small_marks(path: Path) -> Path:
    path.write_text(
        "[memory]\n"
        "compress_at_bytes = 800\n"
        "tail_keep_bytes = 200\n"
        "overflow_tail_bytes = 1200\n"
    )
    return path


def chat(count: int) -> list[str]:
    """Lines alternating between #general and #random, each text unique to its channel."""
    lines = []
    for i in range(count):
        channel = "general" if i % 2 == 0 else "random"
        author = ["Ann Lee", "Bob", "Cy"][i % 3]
        lines.append(f"#{channel} {author}: {channel}-note-{i} about the weekly plans and more")
    return lines


def test_parse_chat_line() -> None:
    parsed = parse_chat_line("#general Ann Lee: hi: there")
    assert parsed == ChatLine("general", "Ann Lee", "hi: there")
    assert parse_chat_line("Bob: hello") == ChatLine("local", "Bob", "hello")
    assert parse_chat_line("Bob: hello", "#side") == ChatLine("side", "Bob", "hello")
    for bad in ("no colon here", "#general: who?", "Bob:", "Bob:   ", ": text", "#a #b C: x"):
        assert parse_chat_line(bad) is None, bad
    assert local_stream("general") == local_stream("general")
    assert local_stream("general") != local_stream("random")
    assert local_stream("general").channel_id < 2**63


def test_stdin_lines_reach_their_channels(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = write_small_marks(tmp_path / "settings.toml")
    lines = chat(60)
    lines.insert(7, "this line names nobody")
    done = eva(
        "serve-local", "--data", str(data), "--settings", str(settings), "--json",
        stdin="\n".join(lines) + "\n",
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"line 8 skipped: expected 'NAME: text'", done.stderr), done.stderr
    summary = json.loads(done.stdout)
    assert summary["stored"] == 60
    assert summary["skipped_lines"] == 1

    channels = by_name(status(data))
    assert set(channels) == {"general", "random"}
    for channel in channels.values():
        assert channel["messages"] == 30
        # compression ran past the small mark and finished before the exit: only the
        # newest ~200 bytes lack leaves, and at most a request's worth of merges waits
        assert 30 - 5 <= channel["leaf_frontier"] < 30
        assert channel["pending_tasks"] < 8
        assert channel["row_lines"] > 0
        assert channel["last_publish_reason"] == "overflow"

    memory = eva("memory", "#general", "--data", str(data))
    assert memory.returncode == 0, memory.stderr
    assert "general-note-58" in memory.stdout  # the newest message, word for word in the tail
    assert "Ann Lee" in memory.stdout
    assert "random-note" not in memory.stdout


def test_second_run_continues_the_channel(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = eva("serve-local", "--data", str(data), stdin="Ann: one\nBob: two\n")
    assert first.returncode == 0, first.stderr
    second = eva("serve-local", "--data", str(data), "--acks", stdin="Ann: three\n")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == "#local 2"
    assert by_name(status(data))["local"]["messages"] == 3


def write_export(path: Path, count: int) -> Path:
    messages = [
        {
            "id": str(900_000_000_000_000_000 + i),
            "type": "Default",
            "timestamp": f"2021-03-04T10:{i // 60:02d}:{i % 60:02d}.000+00:00",
            "content": f"exported message {i} says hello",
            "author": {"id": str(100 + i % 4), "name": f"person{i % 4}", "isBot": False},
        }
        for i in range(count)
    ]
    export = {
        "guild": {"id": "4242", "name": "Test Guild"},
        "channel": {"id": "777", "name": "replayed"},
        "messages": messages,
    }
    path.write_text(json.dumps(export))
    return path


def test_export_replay_stores_every_message(tmp_path: Path) -> None:
    data = tmp_path / "data"
    export = write_export(tmp_path / "export.json", 150)
    args = ("serve-local", "--data", str(data), "--export", str(export), "--speed", "0",
            "--json", "--quiet")
    done = eva(*args)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["stored"], summary["already_stored"]) == (150, 0)
    channel = status(data)["channels"][0]
    assert channel["channel"] == "4242/777"
    assert (channel["channel_name"], channel["messages"]) == ("replayed", 150)

    again = eva(*args)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["stored"], summary["already_stored"]) == (0, 150)
    assert status(data)["channels"][0]["messages"] == 150

    memory = eva("memory", "4242/777", "--data", str(data))
    assert "person1: exported message 149 says hello" in memory.stdout


def test_an_export_replayed_leaves_out_people_kept_out_and_channels_turned_off(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    export = write_export(tmp_path / "export.json", 40)
    args = ("serve-local", "--data", str(data), "--export", str(export), "--speed", "0",
            "--json", "--quiet")
    kept_out = eva("opt-out", "--user", "101", "--guild", "4242", "--data", str(data))
    assert kept_out.returncode == 0, kept_out.stderr
    done = eva(*args)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stored"] == 30  # person1 (id 101) wrote 10 of the 40
    off = eva("channel", "off", "4242/777", "--data", str(data))
    assert off.returncode == 0, off.stderr
    again = eva("serve-local", "--data", str(data), "--export",
                str(write_export(tmp_path / "more.json", 60)), "--speed", "0", "--quiet")
    assert again.returncode == 0, again.stderr
    assert "memory of 4242/777 is off" in again.stderr
    assert status(data)["channels"][0]["messages"] == 30


def read_acks(process: subprocess.Popen[bytes], count: int, buffer: bytearray) -> list[str]:
    """Wait for `count` ack lines on the process's stdout (failing after TIMEOUT_S)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + TIMEOUT_S
    while buffer.count(b"\n") < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {bytes(buffer)!r} acknowledged"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, "the server closed its output early"
            buffer += chunk
    return bytes(buffer).decode().splitlines()


@pytest.mark.parametrize("to", ["process", "process group"])
def test_sigterm_stops_cleanly_and_keeps_what_was_acked(tmp_path: Path, to: str) -> None:
    data = tmp_path / "data"
    process = subprocess.Popen(
        [*EVA, "serve-local", "--data", str(data), "--acks"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdin is not None
    try:
        buffer = bytearray()
        process.stdin.write(("\n".join(chat(40)) + "\n").encode())
        process.stdin.flush()
        read_acks(process, 40, buffer)
        process.stdin.write(("\n".join(chat(40)[:10]) + "\n").encode())  # in flight at the stop
        process.stdin.flush()
        if to == "process group":
            os.killpg(process.pid, signal.SIGTERM)
        else:
            process.send_signal(signal.SIGTERM)  # stdin stays open: only the signal can stop it
        started = time.monotonic()
        out, err = process.communicate(timeout=10)
        stopped_in = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()
    assert stopped_in < 5.0
    assert "stopped by SIGTERM" in err.decode()
    acked: dict[str, list[int]] = {}
    for line in (bytes(buffer) + out).decode().splitlines():
        match = re.fullmatch(r"#(\w+) (\d+)", line)
        if match:
            acked.setdefault(match[1], []).append(int(match[2]))
    assert sorted(acked) == ["general", "random"]
    channels = by_name(status(data))
    for name, indexes in acked.items():
        assert sorted(indexes) == list(range(len(indexes)))  # each channel's own order
        assert channels[name]["messages"] >= len(indexes) >= 20


def test_a_disk_that_fills_up_ends_the_run_with_what_was_acked_and_no_traceback(
    tmp_path: Path,
) -> None:
    # A file size limit makes the data file's writes fail past it, as a full disk does
    # (CPython ignores SIGXFSZ, so the write fails with EFBIG). Before, compression
    # failing again and again after the input ended kept the process waiting for ever.
    import resource

    data = tmp_path / "data"
    lines = "".join(f"Ann Lee: note {i} about the weekly plans and the garden\n"
                    for i in range(1200))

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (500 * 1024, resource.RLIM_INFINITY))

    full = subprocess.run(
        [*EVA, "serve-local", "--data", str(data), "--acks"],
        input=lines, capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=limited,
    )
    acked = [line for line in full.stdout.splitlines() if line.startswith("#local ")]
    assert full.returncode == 1 and "Traceback" not in full.stderr
    assert "is its disk full?" in full.stderr
    assert 0 < len(acked) < 1200
    again = eva("serve-local", "--data", str(data), stdin="")
    assert again.returncode == 0, again.stderr
    assert by_name(status(data))["local"]["messages"] == len(acked)
    assert eva("replay", "--data", str(data)).returncode == 0


def test_settling_gives_up_once_a_compression_run_fails_after_the_input(tmp_path: Path) -> None:
    # What a full disk does to the live pipeline after the input ended: runs fail, each
    # retried later than the one before. The run's end waits for none of them.
    from dataclasses import dataclass

    import trio

    from eva.cli.serve_frame import settle
    from eva.core.events import MessagePosted
    from eva.core.keys import StreamId
    from eva.core.settings import MemorySettings
    from eva.store.event_store import EventStore
    from eva.store.lmdb_kv import open_backend

    @dataclass
    class Counts:
        appends: int = 0
        runs_failed: int = 0

    class Failing:
        def __init__(self) -> None:
            self.counts = Counts()

        def statistics(self) -> Counts:
            self.counts.runs_failed += 1  # a run fails between any two looks
            return Counts(self.counts.appends, self.counts.runs_failed)

    store = EventStore(open_backend(tmp_path / "data"))
    settings = MemorySettings(compress_at_bytes=1024, tail_keep_bytes=256)
    store.append(StreamId(1, 2), [
        MessagePosted(at_ms=1_700_000_000_000 + i, index=i, message_id=10 + i, author_id=1,
                      author_name="Ann", content="words " * 20)
        for i in range(40)
    ])

    async def main() -> bool:
        with trio.fail_after(5):
            return await settle(store, settings, Failing())  # type: ignore[arg-type]

    try:
        assert trio.run(main) is False
    finally:
        store.backend.close()
