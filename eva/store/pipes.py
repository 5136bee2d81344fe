# Child interpreters that serve this process over pipes: how they start, how frames go.
#
# Shell. A child is `python -S -m MODULE`: without `site`, which would spend
# a good part of its start finding packages that this process found already;
# it is given this process's import path instead. Frames on the pipes are a
# 4-byte big-endian length and a body.
from __future__ import annotations

import os
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
