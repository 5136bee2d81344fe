# Child interpreters that serve this process over pipes: how they start, how frames go.
#
# Shell. A child is `python -S -m MODULE`: without `site`, which would spend
# a good part of its start finding packages that this process found already;
# it is given this process's import path instead. Frames on the pipes are a
# 4-byte big-endian length and a body; a reader of a pipe that does not block
# gathers them with `FrameBuffer`.
from __future__ import annotations

import ctypes
import os
import signal
import struct
import sys
from typing import IO

import msgspec

import eva

_IMPORTED = (eva, msgspec)  # the packages children import from outside the standard library
_LENGTH = struct.Struct(">I")


def child_command(module: str, *arguments: str) -> list[str]:
    """The command line of a child interpreter running `module`."""
    return [sys.executable, "-S", "-m", module, *arguments]


def child_env() -> dict[str, str]:
    """This process's environment, with the directories it imports eva and msgspec from
    first on the child's import path."""
    found = [os.path.dirname(os.path.dirname(module.__file__ or "")) for module in _IMPORTED]
    path = [*found, *(entry for entry in sys.path if os.path.isdir(entry))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    return env


def become_child() -> None:
    """Set up a child interpreter: it dies with the thread that started it (Linux:
    PR_SET_PDEATHSIG; elsewhere the closed pipe ends it), and a stop signal sent to
    the whole process group (Ctrl-C, a service manager) is left to the parent, which
    finishes what is under way and then closes the pipe."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it is gone already
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def frame(body: bytes) -> bytes:
    """`body` as one frame."""
    return _LENGTH.pack(len(body)) + body


def read_frame(source: IO[bytes]) -> bytes | None:
    """The next frame's body, or None at the end of the input (or a frame cut short)."""
    header = source.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    body = source.read(length)
    if len(body) < length:
        return None
    return body


class FrameBuffer:
    """Bytes read from a pipe as they come, handed out a whole frame at a time."""

    __slots__ = ("_data", "_start")

    def __init__(self) -> None:
        self._data = bytearray()
        self._start = 0  # where the next frame begins in `_data`

    def feed(self, data: bytes) -> None:
        """Add bytes just read."""
        if self._start:
            del self._data[: self._start]
            self._start = 0
        self._data += data

    def next_frame(self) -> bytes | None:
        """The next whole frame's body, or None until more bytes are fed."""
        data, start = self._data, self._start
        if len(data) - start < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(data, start)
        end = start + _LENGTH.size + length
        if len(data) < end:
            return None
        self._start = end
        return bytes(data[start + _LENGTH.size : end])
