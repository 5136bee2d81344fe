# One writing process per data directory: an advisory lock on `eva.lock`, with its pid.
#
# Shell. LMDB lets many processes write one environment, one transaction at a time, so
# two eva processes writing the same directory would not damage it, but their streams
# would: each appends from the position it read. A writing command (and the bot) takes
# this lock first; a second one is told who holds it. The lock is the kernel's (flock):
# it goes with the process, however it ends, so a killed process leaves nothing to clean.
# The file descriptor is not inherited by child processes.
from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "eva.lock"


class WriterBusy(Exception):
    """Another process holds the data directory's writer lock."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        who = f" (pid {pid})" if pid is not None else ""
        super().__init__(
            f"another eva process is writing to {directory}{who}; stop it, or wait for it to "
            "finish, and run this again"
        )
        self.pid = pid


def take_writer_lock(directory: Path) -> int:
    """Take the directory's writer lock; return its file descriptor (close it to let go).
    Raises WriterBusy naming the holder's pid."""
    descriptor = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _pid_in(descriptor)
        os.close(descriptor)
        raise WriterBusy(directory, holder) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor


def _pid_in(descriptor: int) -> int | None:
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
