# Start a child program that prints "ack ..." lines, let it run a random while, SIGKILL it.
#
# Shared by the crash tests of the store and of the live pipeline; the parent
# reads back every line the child printed before it died.
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path


def child_env() -> dict[str, str]:
    """The environment with the project on PYTHONPATH, for a child started from a test."""
    paths = [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def kill_while_running(
    args: list[str], rng: random.Random, early_s: float, after_ack_s: tuple[float, float]
) -> bytes:
    """Run `python *args`, kill it with SIGKILL, and return all it wrote to stdout.

    One time in ten it dies within `early_s` of starting (before its first
    acknowledgement, maybe); otherwise a random time within `after_ack_s`
    after its first acknowledgement.
    """
    child = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    assert child.stdout is not None
    assert child.stderr is not None
    try:
        if rng.random() < 0.1:
            time.sleep(rng.uniform(0.0, early_s))
            first = b""
        else:
            first = child.stdout.readline()
            assert first.startswith(b"ack "), (first, child.stderr.read() if child.poll() else b"")
            time.sleep(rng.uniform(*after_ack_s))
        assert child.poll() is None, child.stderr.read().decode()
    finally:
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
        child.stdout.close()
        child.stderr.close()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return first + rest
