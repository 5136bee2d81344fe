# The recall index of a long replay, rebuilt in a second process.
#
# Building the recall index is about half of what a replay does, and it needs
# nothing but the index's changes: each batch's `PostingBuffer`. So a replay
# of a long stream forks a child, sends it each batch's changes as it goes
# (msgpack over a pipe), and does the rest itself; the child writes them into
# a scratch environment of its own and answers with the digest of what it
# built, which the replay compares with the digest of the live index. Each
# process holds a batch and a chunk of rows, as a replay in one process does.
# The child says when it wrote each batch; while it is more than `BEHIND` batches behind,
# the replay prepares a batch's changes itself (`PostingBuffer.prepare`, the costly part)
# and sends them ready to write, so both end at about the same time whatever either has
# to do (a sealed log costs the replay more to read).
# Invariants: the child reads nothing but what it is sent (it never touches
# the data directory or the environment it inherits, and leaves by os._exit,
# as multiprocessing's fork children do); a process with threads does not
# fork; should the child fail, the answer is None and the replay does the
# index itself.
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from eva.core.keys import StreamId
from eva.core.recall_index import (
    PostingBuffer,
    PreparedStream,
    StreamTexts,
    write_prepared,
)
from eva.core.tables import Tables


class _Texts(msgspec.Struct, tag="texts", array_like=True):
    """A batch's changes: the texts to index and to take out."""

    streams: list[StreamTexts]


class _Prepared(msgspec.Struct, tag="prepared", array_like=True):
    """A batch's changes, prepared by the replay (PostingBuffer.prepare)."""

    streams: list[PreparedStream]


_changes = msgspec.msgpack.Encoder()
_decode_changes = msgspec.msgpack.Decoder(_Texts | _Prepared)
BEHIND = 2
"""Batches the child may have in hand before the replay prepares the next one itself."""
_ACK = b"+"
"""What the child sends after writing a batch (an answer never starts so)."""


class _Answer(msgspec.Struct, array_like=True):
    """The child's answer: the digest of the postings it built, or why there is none."""

    rebuilt: bytes = b""
    failed: str = ""


_answers = msgspec.msgpack.Decoder(_Answer)
_END = b""
"""Sent after the last batch's changes."""
WAITING_BATCHES = 16
"""Batches of changes the child takes in ahead of the one it writes."""
CHILD_SECONDS = 600.0
"""How long the replay waits for the child's answer once every batch is sent."""

Digest = Callable[[Tables, Callable[[], None]], bytes]
"""How the replay digests the rebuilt postings (eva.store.replay's own way), given the
scratch tables and a way to let go of mapped pages."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def may_fork_beside() -> bool:
    """Whether a replay may fork a child beside it: this process may run on more than
    one core, and runs no other thread (forking one that does is not safe)."""
    return cores() > 1 and threading.active_count() == 1


class IndexBeside:
    """The replaying side of the child: send it changes, then ask for its answer."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._broken = False
        self._ended = False
        self._sent = 0
        self._written = 0

    def send(self, buffer: PostingBuffer) -> None:
        """Hand the child one batch's index changes (prepared here if it is behind)."""
        if self._broken:
            return
        try:
            while self._connection.poll(0) and self._connection.recv_bytes() == _ACK:
                self._written += 1
        except (OSError, EOFError):
            self._broken = True
            return
        here = self._sent - self._written > BEHIND
        self._sent += 1
        batch = _Prepared(buffer.prepare()) if here else _Texts(buffer.changes())
        try:
            self._connection.send_bytes(_changes.encode(batch))
        except OSError:  # the child is gone: its answer will say so
            self._broken = True

    def sent_all(self) -> None:
        """Tell the child that every batch is sent."""
        if not self._broken and not self._ended:
            self._ended = True
            try:
                self._connection.send_bytes(_END)
            except OSError:
                self._broken = True

    def answer(self) -> bytes | None:
        """The digest of the postings the child built; None if it failed."""
        self.sent_all()
        try:
            data = _ACK
            while data == _ACK:
                if not self._connection.poll(CHILD_SECONDS):
                    return None
                data = self._connection.recv_bytes()
            found = _answers.decode(data)
        except (OSError, EOFError, msgspec.DecodeError):
            return None
        return None if found.failed else found.rebuilt


@contextmanager
def index_beside(
    stream: StreamId, scratch: Callable[[], Any], digest: Digest
) -> Iterator[IndexBeside]:
    """A child that rebuilds `stream`'s recall index from the changes it is sent, in a
    scratch environment `scratch` makes, and answers with `digest` of it."""
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    child = partial(_child, theirs, scratch, digest)
    process = context.Process(target=child, name=f"eva-replay-index-{stream.channel_id}",
                              daemon=True)
    process.start()
    theirs.close()
    try:
        yield IndexBeside(ours)
    finally:
        ours.close()
        process.join(5.0)
        if process.is_alive():
            process.kill()
            process.join()


def _receive(connection: Connection, waiting: queue.Queue[bytes]) -> None:
    """Take what the replay sends as it comes, so that it seldom waits on the pipe."""
    try:
        while (data := connection.recv_bytes()) != _END:
            waiting.put(data)
    except (OSError, EOFError):
        pass
    waiting.put(_END)


def _child(connection: Connection, scratch: Callable[[], Any], digest: Digest) -> None:
    # Ctrl-C is the replay's to answer: it closes the pipe, which ends the child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        answer = _rebuild(connection, scratch, digest)
    except Exception as error:  # the replay does the index itself, and says nothing of it
        answer = _Answer(failed=f"{type(error).__name__}: {error}")
    with suppress(OSError):
        connection.send_bytes(msgspec.msgpack.encode(answer))


def _rebuild(connection: Connection, scratch: Callable[[], Any], digest: Digest) -> _Answer:
    waiting: queue.Queue[bytes] = queue.Queue(WAITING_BATCHES)
    reader = threading.Thread(target=_receive, args=(connection, waiting), daemon=True)
    reader.start()
    with scratch() as rebuilt:
        while (data := waiting.get()) != _END:
            match _decode_changes.decode(data):
                case _Texts(streams):
                    rebuilt.write(PostingBuffer.of_changes(streams).flush)
                case _Prepared(streams):
                    rebuilt.write(partial(write_prepared, streams=streams))
            with suppress(OSError):
                connection.send_bytes(_ACK)
            rebuilt.release_pages()
        with rebuilt.reading() as tables:
            made = digest(tables, rebuilt.release_pages)
    return _Answer(rebuilt=made)
