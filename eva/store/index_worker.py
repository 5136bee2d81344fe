# A second process that writes the recall index while replay does the rest.
#
# Building the recall index is most of a replay's work, and it needs nothing
# but the index's changes. So replay hands each `PostingBuffer` to this worker
# as soon as a batch of events is applied, and goes on with the other
# projections; the worker writes the buffers into tables of its own with the
# same code the live store uses, then compares its postings with the live
# ones it is sent. It reads nothing else, so it sees exactly the snapshot the
# replay reads. It serves one stream, answers one comparison, and leaves.
# When replay is done with the rest, it takes back the buffers not sent yet,
# the latest first, and prepares them itself (`take_last`, `fill`), so that
# neither process waits long for the other, however late the worker started.
#
# The worker is a new interpreter (`python -m eva.store.index_worker`), so it
# shares no memory, lock or file with the replaying process but its pipes.
# Protocol on stdin and stdout: frames of a 4-byte big-endian length and a
# msgpack body; requests are applied in the order they are sent.
from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
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
from eva.store.pipes import child_command, child_env, frame, read_frame

# Without `site` (-S): the worker's start is on a replay's critical path, and a
# third of it (some 20 ms here) is site finding packages that this process has
# found already (see eva.store.pipes).
WORKER_COMMAND = child_command("eva.store.index_worker")


class _Write(msgspec.Struct, tag="write", array_like=True):
    streams: list[StreamTexts]


class _WritePrepared(msgspec.Struct, tag="write_prepared", array_like=True):
    streams: list[PreparedStream]


class _Live(msgspec.Struct, tag="live", array_like=True):
    rows: msgspec.Raw  # the live postings of the stream, as `encoded_rows` made them


class _Compare(msgspec.Struct, tag="compare", array_like=True):
    pass


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Write | _WritePrepared | _Live | _Compare)
_rows_decoder = msgspec.msgpack.Decoder(list[tuple[bytes, bytes]])


class IndexWorkerError(RuntimeError):
    """The index worker stopped before it answered."""


class _Slot:
    """A buffer's place in the queue, kept while the replaying process prepares it."""

    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: bytes | None = None  # the prepared changes, once they are


_Item = PostingBuffer | _Slot | bytes | None  # None stops the sender


class IndexWorker:
    """The replaying side of a worker: hands it index changes, asks how they compare.

    A sender thread writes the requests, in order, so that handing one over
    never waits for the worker to read it. The buffers it has not sent yet
    stay in a queue, from which the replaying process may take the latest
    back (`take_last`) to prepare them itself; each keeps its place, so the
    worker still writes every change in order.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._requests = process.stdin
        self._answers = process.stdout
        self._pending: deque[_Item] = deque()
        self._changed = threading.Condition()
        self._stopping = False
        self._asked = False
        self._sender = threading.Thread(target=self._send_all, name="index-worker-sender")
        self._sender.start()

    def write(self, postings: PostingBuffer) -> None:
        """Hand over a buffer of index changes; returns at once."""
        self._queue(postings)

    def take_last(self) -> tuple[_Slot, PostingBuffer] | None:
        """The latest buffer not sent yet, if any, and the place it keeps in the queue.

        The caller prepares it and hands the result to `fill`; the worker
        meanwhile goes on with the earlier buffers.
        """
        with self._changed:
            for position in range(len(self._pending) - 1, -1, -1):
                item = self._pending[position]
                if isinstance(item, PostingBuffer):
                    slot = self._pending[position] = _Slot()
                    return slot, item
        return None

    def fill(self, slot: _Slot, prepared: list[PreparedStream]) -> None:
        """Put changes prepared here (see `PostingBuffer.prepare`) in a buffer's place."""
        prepared_frame = frame(_encoder.encode(_WritePrepared(prepared)))
        with self._changed:
            slot.frame = prepared_frame
            self._changed.notify()

    def send_live(self, live: bytes) -> None:
        """Hand over the live postings the rebuilt ones are to equal, as `encoded_rows`
        made them; returns at once."""
        self._queue(frame(_encoder.encode(_Live(msgspec.Raw(live)))))

    def ask_compare(self) -> None:
        """Ask for the comparison once every change is handed over; returns at once,
        so the worker compares while the caller goes on (see `compare`)."""
        if not self._asked:
            self._asked = True
            self._queue(frame(_encoder.encode(_Compare())))

    def compare(self) -> bytes | None:
        """Whether the stream's postings, once every change is written, are the live ones.

        None if they are, byte for byte; else the `table_digest` of the
        rebuilt postings. Asks first if `ask_compare` was not called. The
        worker then leaves.
        """
        self.ask_compare()
        answer = read_frame(self._answers)
        if answer is None:
            raise IndexWorkerError("the index worker stopped before it answered")
        return answer or None

    def close(self, *, kill: bool = False) -> None:
        """Wait for the worker to leave, or stop it at once with `kill`."""
        if kill:
            self._process.kill()
            with self._changed:
                self._stopping = True
                self._changed.notify()
        self._queue(None)
        self._sender.join()
        self._answers.close()
        self._process.wait()

    def _queue(self, item: _Item) -> None:
        with self._changed:
            self._pending.append(item)
            self._changed.notify()

    def _send_all(self) -> None:
        try:
            with self._requests:
                while (request := self._next_frame()) is not None:
                    self._requests.write(request)
                    self._requests.flush()
        except OSError:  # the worker is gone; `compare` reports it
            pass

    def _next_frame(self) -> bytes | None:
        """The next request to send, once it is ready; None to stop."""
        with self._changed:
            self._changed.wait_for(lambda: self._stopping or self._ready())
            if self._stopping:
                return None
            item = self._pending.popleft()
        if isinstance(item, PostingBuffer):
            return frame(_encoder.encode(_Write(item.changes())))
        if isinstance(item, _Slot):
            return item.frame
        return item

    def _ready(self) -> bool:
        return bool(self._pending) and not (
            isinstance(self._pending[0], _Slot) and self._pending[0].frame is None
        )


@contextmanager
def open_index_worker() -> Iterator[IndexWorker]:
    """A worker process, waited for when the block ends (killed if the block raised)."""
    process = subprocess.Popen(
        WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env()
    )
    worker = IndexWorker(process)
    try:
        yield worker
    except BaseException:
        worker.close(kill=True)
        raise
    worker.close()


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The worker's side: write changes as they come, answer the comparison, return."""
    tables = MemoryTables()
    live: list[tuple[bytes, bytes]] = []
    while (body := read_frame(requests)) is not None:
        match _decoder.decode(body):
            case _Write(streams=streams):
                PostingBuffer.of_changes(streams).flush(tables)
            case _WritePrepared(streams=prepared):
                write_prepared(tables, prepared)
            case _Live(rows=rows):
                live = _rows_decoder.decode(rows)
            case _Compare():
                same = tables.holds(POSTINGS, live)
                answers.write(frame(b"" if same else table_digest(tables.rows(POSTINGS))))
                answers.flush()
                return


def main() -> NoReturn:
    """The worker process: serve stdin and stdout, then leave at once (the heap is
    dropped whole rather than object by object)."""
    serve(sys.stdin.buffer, sys.stdout.buffer)
    os._exit(0)


if __name__ == "__main__":
    main()
