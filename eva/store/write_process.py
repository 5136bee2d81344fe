# A second process that commits the live writer's groups, on a core of its own.
#
# Applying events to the projections is Python work, and it is most of what
# a commit costs; in a thread of the serving process it shares one
# interpreter lock with the trio loop, and LMDB hands that lock over at every
# read and write, so the two threads take turns at every store operation.
# In a child interpreter the commit runs beside the loop instead. The child
# opens the same data directory (LMDB serializes writers across processes,
# and readers here see each commit once it is made) and does exactly what
# `EventStore.append_many` does here: one write transaction per group, each
# batch landing whole or refused whole, durable before the answer is sent.
#
# Events cross the pipe as the bytes the log stores, a whole group encoded
# here in one call (msgpack nests: an event inside the frame is the bytes it
# has alone), so an event that cannot be stored is refused here with the
# error the store gives. The child dies with the thread that started it (Linux:
# PR_SET_PDEATHSIG), so it is started from the thread of the trio loop,
# never from a worker thread that may leave: a killed bot leaves no writer
# behind, and a commit cut short that way is undone by LMDB (its senders were
# never answered). If the child dies, the group in flight fails (it may or
# may not have landed) and the next group starts a new child. Protocol:
# frames of eva.store.pipes, msgpack bodies, one answer per request, in order.
from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO, NoReturn

import msgspec

from eva.core.events import AnyEvent, decode_event
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.store.event_store import Appended, Batch, EventStore, stored_events
from eva.store.lmdb_kv import open_backend
from eva.store.pipes import child_command, child_env, frame, read_frame

YOUNG_GENERATION = 10_000
"""New objects between two collections of the young generation (Python: 700)."""
CLOSE_WAIT_S = 10.0
"""How long closing waits for the child to finish its commit and leave."""


class _OutBatch(msgspec.Struct, array_like=True):
    """A batch as it is sent: its events encoded in the frame, each as the log stores it."""

    guild_id: int
    channel_id: int
    events: Sequence[AnyEvent]


class _RawBatch(msgspec.Struct, array_like=True):
    """A batch as it is received: each event's bytes, as the log stores them."""

    guild_id: int
    channel_id: int
    events: list[msgspec.Raw]


class _Result(msgspec.Struct, array_like=True):
    first: int = 0
    count: int = 0
    refused: str | None = None  # the Rejected message, for a batch refused whole


class _Committed(msgspec.Struct, tag="committed", array_like=True):
    results: list[_Result]


class _Failed(msgspec.Struct, tag="failed", array_like=True):
    error: str  # the commit failed as a whole (the disk, the map): nothing landed


_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(list[_RawBatch])
_answers = msgspec.msgpack.Decoder(_Committed | _Failed)


class WriteProcessError(RuntimeError):
    """A group could not be committed by the write process."""


class Submitted:
    """A group handed to the child, waiting for its answer (see `WriteProcess.wait`)."""

    __slots__ = ("answer", "batches", "results", "sent")

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.results: list[Appended | Rejected | None] = [None] * len(batches)
        self.sent: list[int] = []  # the positions of the batches sent
        self.answer: _Committed | _Failed | None = None


class WriteProcess:
    """The serving side: `append_many` as the store has it, committed by the child.

    `start` (on the thread that is to outlive the child) before each group.
    Groups may be handed over (`submit`) while earlier ones are committed; the
    child commits them in that order, and `wait` takes each one's answer, in
    any thread.
    """

    def __init__(self, data: Path) -> None:
        self.data = data
        self._lock = threading.Lock()  # starts and stops
        self._sending = threading.Lock()  # the requests go in the order they wait in
        self._reading = threading.Lock()  # one thread reads the answers at a time
        self._process: subprocess.Popen[bytes] | None = None
        self._waiting: deque[Submitted] = deque()  # sent, in order, not answered yet
        self.started = 0

    def append_many(self, batches: list[Batch]) -> list[Appended | Rejected]:
        """Commit `batches` in one write transaction; see `EventStore.append_many`."""
        return self.wait(self.submit(batches))

    def submit(self, batches: list[Batch]) -> Submitted:
        """Hand a group to the child; its events that cannot be stored are refused here."""
        submitted = Submitted(batches)
        out = [_OutBatch(b.stream.guild_id, b.stream.channel_id, b.events) for b in batches]
        try:
            body = _encoder.encode(out)  # the whole group in one call
            submitted.sent = list(range(len(batches)))
        except (OverflowError, TypeError, ValueError):  # find the batches that cannot be
            for position, batch in enumerate(batches):  # stored, as the store words it
                try:
                    stored_events(batch)
                except Rejected as refused:
                    submitted.results[position] = refused
                    continue
                submitted.sent.append(position)
            body = _encoder.encode([out[position] for position in submitted.sent])
        if not submitted.sent:
            submitted.answer = _Committed([])
            return submitted
        request = frame(body)
        with self._sending:
            process = self._process
            if process is None:
                raise WriteProcessError("the write process is not started")
            assert process.stdin is not None
            self._waiting.append(submitted)
            try:
                process.stdin.write(request)
                process.stdin.flush()
            except OSError:  # it died: `wait` says so
                pass
        return submitted

    def wait(self, submitted: Submitted) -> list[Appended | Rejected]:
        """The results of a group submitted, once the child has committed it."""
        while submitted.answer is None:
            with self._reading:
                if submitted.answer is None:
                    self._read_answer()
        answer = submitted.answer
        if isinstance(answer, _Failed):
            raise WriteProcessError(answer.error)
        if len(answer.results) != len(submitted.sent):
            raise WriteProcessError("the write process answered for other batches")
        results = submitted.results
        for position, result in zip(submitted.sent, answer.results, strict=True):
            stream = submitted.batches[position].stream
            results[position] = (
                Rejected(result.refused)
                if result.refused is not None
                else Appended(stream, result.first, result.count)
            )
        return [result for result in results if result is not None]

    def _read_answer(self) -> None:
        """Read the next answer, which is the earliest waiting group's."""
        with self._lock:
            process, started = self._process, self.started
        body = None
        if process is not None and process.stdout is not None:
            try:
                body = read_frame(process.stdout)
            except (OSError, ValueError):  # ValueError: the pipe was closed meanwhile
                body = None
        with self._lock:
            if self.started != started:  # a new child came meanwhile: `start` failed its
                return  # groups, and what was read here is the old one's
            if body is None:  # every group waiting fails with it
                self._fail_waiting()
                self._stop(kill=True)
                return
            self._waiting.popleft().answer = _answers.decode(body)

    def _fail_waiting(self) -> None:
        """Fail every group sent to the child and not answered (the caller holds `_lock`)."""
        for waiting in self._waiting:
            waiting.answer = _Failed("the write process stopped before it answered")
        self._waiting.clear()

    def start(self) -> None:
        """Start the child unless it is running (after `suspend`, or if it died)."""
        with self._lock:
            process = self._process
            if process is not None and process.poll() is None:
                return
            if process is not None:  # it died: what it was sent is lost with it
                self._fail_waiting()
                self._stop()
            self._process = subprocess.Popen(
                child_command("eva.store.write_process", str(self.data)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=child_env(),
            )
            self.started += 1

    def suspend(self) -> None:
        """Let the child leave once every group handed to it is answered: the data file
        may be swapped now; the next group starts a new child on the new file."""
        with self._lock:
            assert not self._waiting, "suspended with groups waiting for their answers"
            self._stop()

    def close(self) -> None:
        """Stop the child; a group still waiting for its answer fails."""
        with self._lock:
            self._fail_waiting()
            self._stop()

    def _stop(self, kill: bool = False) -> None:
        """Stop the child (the caller holds `_lock`)."""
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        assert process.stdin is not None
        assert process.stdout is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def serve(store: EventStore, requests: IO[bytes], answers: IO[bytes]) -> None:
    """The child's side: commit each request's batches and answer, until the input ends."""
    while (body := read_frame(requests)) is not None:
        answer: _Committed | _Failed
        try:
            answer = _Committed(_commit(store, _requests.decode(body)))
        except Exception as error:  # the whole commit failed: the sender hears why
            answer = _Failed(f"{type(error).__name__}: {error}")
        answers.write(frame(_encoder.encode(answer)))
        answers.flush()


def _commit(store: EventStore, raw: list[_RawBatch]) -> list[_Result]:
    results: list[_Result | None] = [None] * len(raw)
    batches: list[Batch] = []
    stored: list[list[bytes]] = []
    positions: list[int] = []
    for position, item in enumerate(raw):
        stream = StreamId(item.guild_id, item.channel_id)
        try:
            events = [decode_event(data) for data in item.events]
        except msgspec.DecodeError as error:
            results[position] = _Result(refused=f"{stream}: an event cannot be stored: {error}")
            continue
        positions.append(position)
        batches.append(Batch(stream, events))
        stored.append([bytes(data) for data in item.events])
    for position, result in zip(positions, store.append_many(batches, stored), strict=True):
        results[position] = (
            _Result(refused=str(result))
            if isinstance(result, Rejected)
            else _Result(result.first, result.count)
        )
    return [result for result in results if result is not None]


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies; leave if it is gone already."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed pipe still ends it
        pass
    if os.getppid() != parent:
        os._exit(0)


def main() -> NoReturn:
    _die_with_parent()
    # A stop signal sent to the whole process group (Ctrl-C, a service manager) is the
    # parent's to handle: it finishes the commits under way, then closes the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Each commit makes and drops thousands of short-lived objects (decoded events,
    # keys): the young generation is collected every YOUNG_GENERATION of them, as
    # a serving process does, and what start-up made is left out of full collections.
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
    backend = open_backend(Path(sys.argv[1]))
    serve(EventStore(backend), sys.stdin.buffer, sys.stdout.buffer)
    backend.close()
    os._exit(0)


if __name__ == "__main__":
    main()
