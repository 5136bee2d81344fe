# A second process that writes the recall index while replay does the rest.
#
# Building the recall index is most of a replay's work, and it needs nothing
# but the index's changes. So replay hands each `PostingBuffer` to this worker
# as soon as a batch of events is applied, and goes on with the other
# projections; the worker writes the buffers into tables of its own with the
# same code the live store uses, then compares its postings with the live
# ones it is sent. It reads nothing else, so it sees exactly the snapshot the
# replay reads. It holds one stream at a time. Buffers it has not been sent
# yet when replay is done with the rest, replay may take back and prepare
# itself (`take_back`), so that neither process waits long for the other.
#
# The worker is forked, so it starts at once with every module loaded; it
# touches nothing it inherits but its pipes and leaves by `os._exit`. Forking
# is only safe while no other thread runs, so `forkable` says when to use one.
# Protocol on the pipes: frames of a 4-byte big-endian length and a msgpack
# body; requests are applied in the order they are sent.
from __future__ import annotations

import os
import signal
import struct
import sys
import threading
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import IO, NoReturn

import msgspec

from eva.core.digest import table_digest
from eva.core.memtables import MemoryTables
from eva.core.recall_index import (
    POSTINGS,
    PostingBuffer,
    PreparedStream,
    StreamTexts,
    write_prepared,
)

_LENGTH = struct.Struct(">I")
Rows = list[tuple[bytes, bytes]]


class _Write(msgspec.Struct, tag="write", array_like=True):
    streams: list[StreamTexts]


class _WritePrepared(msgspec.Struct, tag="write_prepared", array_like=True):
    streams: list[PreparedStream]


class _Live(msgspec.Struct, tag="live", array_like=True):
    keys: list[bytes]  # the live postings of the stream, in key order
    values: list[bytes]


class _Compare(msgspec.Struct, tag="compare", array_like=True):
    pass


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Write | _WritePrepared | _Live | _Compare)


class IndexWorkerError(RuntimeError):
    """The index worker stopped before it answered."""


def forkable() -> bool:
    """Whether a worker may be forked now: the platform can, and no other thread runs."""
    return hasattr(os, "fork") and threading.active_count() == 1


class IndexWorker:
    """The replaying side of a worker: hands it index changes, asks how they compare.

    A sender thread writes the requests, in order, so that handing one over
    never waits for the worker to read it.
    """

    def __init__(self, pid: int, requests: IO[bytes], answers: IO[bytes]) -> None:
        self._pid = pid
        self._requests = requests
        self._answers = answers
        # Buffers not sent yet, and frames ready to send; None stops the sender.
        self._pending: deque[PostingBuffer | bytes | None] = deque()
        self._queued = threading.Condition()
        self._sender = threading.Thread(target=self._send_all, name="index-worker-sender")
        self._sender.start()

    def write(self, postings: PostingBuffer) -> None:
        """Hand over a buffer of index changes; returns at once."""
        self._queue(postings)

    def take_back(self) -> list[PostingBuffer]:
        """Take back about half of the buffers not sent yet: the later ones, in order.

        The worker goes on with the earlier ones (and those it has already);
        the caller prepares these itself and hands them over again with
        `write_prepared`, in the same order, before anything else.
        """
        with self._queued:
            # The worker still has the buffer it is on and the one being sent.
            count = min(len(self._pending), (len(self._pending) + 2) // 2)
            taken = [self._pending.pop() for _ in range(count)]
        buffers = [item for item in reversed(taken) if isinstance(item, PostingBuffer)]
        assert len(buffers) == count, "take_back comes before any other request"
        return buffers

    def write_prepared(self, prepared: list[PreparedStream]) -> None:
        """Hand over changes prepared here (see `PostingBuffer.prepare`); returns at once."""
        self._queue(_frame(_encoder.encode(_WritePrepared(prepared))))

    def send_live(self, live: Rows) -> None:
        """Hand over the live postings the rebuilt ones are to equal; returns at once."""
        keys, values = list(map(itemgetter(0), live)), list(map(itemgetter(1), live))
        self._queue(_frame(_encoder.encode(_Live(keys, values))))

    def compare(self) -> bytes | None:
        """Whether the stream's postings, once every change is written, are the live ones.

        None if they are, byte for byte; else the `table_digest` of the
        rebuilt postings. The worker then forgets the stream, ready for the
        next one.
        """
        self._queue(_frame(_encoder.encode(_Compare())))
        answer = _read_frame(self._answers)
        if answer is None:
            raise IndexWorkerError("the index worker stopped before it answered")
        return answer or None

    def close(self, *, kill: bool = False) -> None:
        """Stop the worker: once it has read what it was sent, or at once with `kill`."""
        if kill:
            os.kill(self._pid, signal.SIGKILL)
        self._queue(None)
        self._sender.join()
        self._answers.close()
        os.waitpid(self._pid, 0)

    def _queue(self, item: PostingBuffer | bytes | None) -> None:
        with self._queued:
            self._pending.append(item)
            self._queued.notify()

    def _send_all(self) -> None:
        try:
            with self._requests:
                while (item := self._next()) is not None:
                    if isinstance(item, PostingBuffer):
                        item = _frame(_encoder.encode(_Write(item.changes())))
                    self._requests.write(item)
                    self._requests.flush()
        except OSError:  # the worker is gone; `compare` reports it
            pass

    def _next(self) -> PostingBuffer | bytes | None:
        with self._queued:
            self._queued.wait_for(lambda: bool(self._pending))
            return self._pending.popleft()


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
    """The worker's side: write changes as they come, answer each comparison."""
    tables = MemoryTables()
    live = _Live([], [])
    while (body := _read_frame(requests)) is not None:
        match _decoder.decode(body):
            case _Write(streams=streams):
                PostingBuffer.of_changes(streams).flush(tables)
            case _WritePrepared(streams=prepared):
                write_prepared(tables, prepared)
            case _Live() as live:
                pass
            case _Compare():
                rebuilt = tables.data[POSTINGS]
                same = len(rebuilt) == len(live.keys) and (
                    list(map(rebuilt.get, live.keys)) == live.values
                )
                answers.write(_frame(b"" if same else table_digest(tables.rows(POSTINGS))))
                answers.flush()
                tables, live = MemoryTables(), _Live([], [])


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
