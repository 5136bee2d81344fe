# A second process that writes the recall index while replay does the rest.
#
# Building the recall index is most of a replay's work, and it needs nothing
# but the index's changes. So replay hands each `PostingBuffer` to this worker
# as soon as a batch of events is applied, and goes on with the other
# projections; the worker writes the buffers into tables of its own by the
# same `PostingBuffer.flush` the live store uses, and answers with the digest
# of the stream's postings. It reads nothing but what it is sent, so it sees
# exactly the snapshot the replay reads. It holds one stream at a time.
#
# The worker is forked, so it starts at once with every module loaded; it
# touches nothing it inherits but its pipes and leaves by `os._exit`. Forking
# is only safe while no other thread runs, so `forkable` says when to use one.
# Protocol on the pipes: frames of a 4-byte big-endian length and a msgpack body.
from __future__ import annotations

import os
import queue
import signal
import struct
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, NoReturn

import msgspec

from eva.core.digest import table_digest
from eva.core.keys import StreamId, prefix_end, stream_prefix
from eva.core.memtables import MemoryTables
from eva.core.recall_index import POSTINGS, PostingBuffer, StreamTexts

_LENGTH = struct.Struct(">I")


class _Write(msgspec.Struct, tag="write", array_like=True):
    streams: list[StreamTexts]


class _Finish(msgspec.Struct, tag="finish", array_like=True):
    guild_id: int
    channel_id: int


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Write | _Finish)


class IndexWorkerError(RuntimeError):
    """The index worker stopped before it answered."""


def forkable() -> bool:
    """Whether a worker may be forked now: the platform can, and no other thread runs."""
    return hasattr(os, "fork") and threading.active_count() == 1


class IndexWorker:
    """The replaying side of a worker: hands it index changes, asks for a digest."""

    def __init__(self, pid: int, requests: IO[bytes], answers: IO[bytes]) -> None:
        self._pid = pid
        self._requests = requests
        self._answers = answers
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_all, name="index-worker-sender")
        self._sender.start()

    def write(self, postings: PostingBuffer) -> None:
        """Hand over a buffer of index changes; returns at once (a thread sends it)."""
        self._outbox.put(_frame(_encoder.encode(_Write(postings.changes()))))

    def finish(self, stream: StreamId) -> bytes:
        """The `table_digest` of the stream's postings once every buffer is written.

        The worker then forgets the stream, ready for the next one.
        """
        self._outbox.put(_frame(_encoder.encode(_Finish(stream.guild_id, stream.channel_id))))
        answer = _read_frame(self._answers)
        if answer is None:
            raise IndexWorkerError("the index worker stopped before it answered")
        return answer

    def close(self, *, kill: bool = False) -> None:
        """Stop the worker: once it has read what it was sent, or at once with `kill`."""
        if kill:
            os.kill(self._pid, signal.SIGKILL)
        self._outbox.put(None)
        self._sender.join()
        self._answers.close()
        os.waitpid(self._pid, 0)

    def _send_all(self) -> None:
        try:
            with self._requests:
                while (frame := self._outbox.get()) is not None:
                    self._requests.write(frame)
                    self._requests.flush()
        except OSError:  # the worker is gone; `finish` reports it
            pass


@contextmanager
def open_index_worker() -> Iterator[IndexWorker]:
    """A forked worker, stopped when the block ends (killed if the block raised).

    Call it only while `forkable()`.
    """
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(requests_write)
        os.close(answers_read)
        _serve_and_exit(requests_read, answers_write)
    os.close(requests_read)
    os.close(answers_write)
    worker = IndexWorker(pid, os.fdopen(requests_write, "wb"), os.fdopen(answers_read, "rb"))
    try:
        yield worker
    except BaseException:
        worker.close(kill=True)
        raise
    worker.close()


def _serve_and_exit(requests_fd: int, answers_fd: int) -> NoReturn:
    """The worker process's whole life: serve its pipes, then leave without unwinding."""
    code = 0
    try:
        with os.fdopen(requests_fd, "rb") as requests, os.fdopen(answers_fd, "wb") as answers:
            serve(requests, answers)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        code = 1
    finally:
        os._exit(code)


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The worker's side: write buffers as they come, answer each finish with a digest."""
    tables = MemoryTables()
    while (body := _read_frame(requests)) is not None:
        match _decoder.decode(body):
            case _Write(streams=streams):
                PostingBuffer.of_changes(streams).flush(tables)
            case _Finish(guild_id=guild_id, channel_id=channel_id):
                prefix = stream_prefix(StreamId(guild_id, channel_id))
                rows = tables.rows(POSTINGS)
                if rows and not (rows[0][0] >= prefix and rows[-1][0] < prefix_end(prefix)):
                    raise IndexWorkerError("postings of another stream were written")
                answers.write(_frame(table_digest(rows)))
                answers.flush()
                tables = MemoryTables()


def _frame(body: bytes) -> bytes:
    return _LENGTH.pack(len(body)) + body


def _read_frame(source: IO[bytes]) -> bytes | None:
    """The next frame's body, or None at the end of the input."""
    header = source.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    body = source.read(length)
    if len(body) < length:
        return None
    return body
