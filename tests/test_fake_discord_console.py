# `eva fake-discord` and `eva run` in two processes, as an operator trying Eva would run them.
from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from eva.cli.main import main


class Terminal:
    """A process whose standard output lines are read as they come."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "eva.cli.main", *argv], env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                self.lines.put(line.rstrip("\n"))
        except (OSError, ValueError):  # closed by stop()
            return

    def type(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def wait_for(self, pattern: str, within: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + within
        while True:
            for line in self.seen:
                found = re.search(pattern, line)
                if found:
                    self.seen.remove(line)
                    return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line matched {pattern!r}; seen: {self.seen}")
            try:
                self.seen.append(self.lines.get(timeout=left))
            except queue.Empty:
                continue

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
        finally:
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    pipe.close()


def test_a_member_typed_into_the_fake_discord_is_answered_by_eva_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "DISCORD_TOKEN")}
    fake = Terminal(["fake-discord", "--port", "0", "--data", str(tmp_path / "data")], env)
    eva: Terminal | None = None
    try:
        start = fake.wait_for(r"DISCORD_TOKEN=(\S+) eva run --rest-url (\S+) --data (\S+)")
        token, rest_url, data = start.groups()
        assert data == str(tmp_path / "data")
        eva = Terminal(["run", "--rest-url", rest_url, "--data", data],
                       env | {"DISCORD_TOKEN": token})
        fake.wait_for(r"^\* Eva is connected")
        time.sleep(1.0)  # the server reaches her before the first post
        fake.type("the cabin in Reine costs 2,940 NOK a night")
        fake.type("bo: great, I will book the ferry for June 14")
        fake.type("cy: @Eva what does the cabin in Reine cost?")
        fake.wait_for(r"^Eva in #general: \(Eva is offline")  # no key: she quotes recall
        fake.wait_for(r"^    .*[Aa]nn: the cabin in Reine costs 2,940 NOK a night")
        fake.type("/privacy")
        fake.wait_for(r"^Eva in #general, only you see it: \*\*What Eva stores\*\*")
        fake.type("/as ann")
        fake.type("/my-data")
        fake.wait_for(r"^Eva in #general( \(edited\))?, only you see it: "
                      r".*\[files: \S+ \([1-9][\d,]* bytes\)\]")
        fake.type("/forget-me")
        fake.wait_for(r"^Eva in #general, only you see it: "
                      r".*\[buttons: /confirm, /always, /cancel\]")
        fake.type("/cancel")
        fake.wait_for(r"^Eva in #general \(edited\), only you see it: Nothing was forgotten")
        fake.type("/as nobody")
        fake.wait_for(r"^no member 'nobody'; the members are ann, bo, cy")
        fake.type("/dance")
        fake.wait_for(r"^not understood: '/dance'")
        fake.type("/quit")
        assert fake.process.wait(timeout=15) == 0
    finally:
        fake.stop()
        if eva is not None:
            eva.stop()


def test_fake_discord_refuses_a_port_in_use_and_bad_members(
    capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["fake-discord", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"port {port} is in use" in err and "Traceback" not in err
    assert main(["fake-discord", "--members", "ann,ANN"]) == 1
    assert "names someone twice" in capsys.readouterr().err
    assert main(["fake-discord", "--members", "ann,b o"]) == 1
    assert "--members must be names" in capsys.readouterr().err
