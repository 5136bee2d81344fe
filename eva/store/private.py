# Files that hold people's words are their owner's alone to read.
#
# A data directory, a backup and every copy Eva makes of them (a compaction, a
# restore's staging) hold everyone's messages. Eva creates such a directory
# 0700 and its files 0600, whatever the umask: another user of the machine
# cannot list or read them. A directory the operator made keeps its mode; the
# files in it are 0600 all the same.
from __future__ import annotations

import contextlib
import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path, *, exist_ok: bool = True) -> None:
    """Create `path` (and its missing parents) if it is not there; one created here is
    0700. FileExistsError if it exists and `exist_ok` is false."""
    if path.is_dir() and exist_ok:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=PRIVATE_DIR, exist_ok=exist_ok)
    os.chmod(path, PRIVATE_DIR)  # the umask may have taken more away, or less


def private_files(*paths: Path) -> None:
    """Make each of these files that exists 0600."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, PRIVATE_FILE)


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file only its owner may read, synced."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with open(descriptor, "w", encoding="utf-8") as handle:
        os.fchmod(descriptor, PRIVATE_FILE)
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def replace_private(path: Path, data: bytes) -> None:
    """Put `data` at `path` whole or not at all: written to a file beside it only its
    owner may read, synced, then renamed over it, and the rename synced."""
    temporary = path.with_name(f".{path.name}.new")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE)
        written = 0
        while written < len(data):
            written += os.write(descriptor, data[written:])
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
