# A second process that commits the live writer's groups, on a core of its own.
#
# Applying events to the projections is Python work, and it is most of what
# a commit costs; in a thread of the serving process it shares one
# interpreter lock with the trio loop, and LMDB hands that lock over at every
# read and write, so the two threads take turns at every store operation.
# In a child interpreter (eva.store.write_child) the commit runs beside the
# loop instead. The child opens the same data directory (LMDB serializes
# writers across processes, and readers here see each commit once it is
# made) and does exactly what `EventStore.append_many` does here.
#
# This is the serving side. A whole group is encoded here in one call, so an
# event that cannot be stored is refused here with the error the store gives.
# The trio writer talks to the child through pipes that never block (`send`,
# `answer`), with no thread between: a hop to a worker thread and back costs
# more than a small commit. `submit` and `wait` do the same with blocking
# pipes, for code outside trio. The child dies with the thread that started it
# (Linux: PR_SET_PDEATHSIG), so `start` is called from the thread of the trio
# loop, never from a worker thread that may leave: a killed bot leaves no
# writer behind, and a commit cut short that way is undone by LMDB (its
# senders were never answered). If the child dies, the groups sent to it fail
# (they may or may not have landed) and the next group starts a new child.
from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections import deque
from pathlib import Path

import trio

from eva.core.projection import Rejected
from eva.store.event_store import Appended, Batch, stored_events
from eva.store.pipes import FrameBuffer, child_command, child_env, frame, read_frame
from eva.store.write_protocol import Committed, Failed, OutBatch, answer_decoder, encoder

CLOSE_WAIT_S = 10.0
"""How long closing waits for the child to finish its commit and leave."""
READ_BYTES = 1 << 16
"""The most read from the answer pipe at once (a pipe holds 64 KiB)."""


class WriteProcessError(RuntimeError):
    """A group could not be committed by the write process."""


class Submitted:
    """A group handed to the child, waiting for its answer (see `WriteProcess.wait`)."""

    __slots__ = ("answer", "batches", "results", "sent")

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.results: list[Appended | Rejected | None] = [None] * len(batches)
        self.sent: list[int] = []  # the positions of the batches sent
        self.answer: Committed | Failed | None = None


class WriteProcess:
    """The serving side: `append_many` as the store has it, committed by the child.

    `start` (on the thread that is to outlive the child) before each group.
    Groups may be handed over while earlier ones are committed; the child
    commits them in that order. With `nonblocking` (for a trio task), groups
    go with `send` and answers come with `answer`, one task sending at a
    time; otherwise with `submit`, and `wait` in any thread.
    """

    def __init__(self, data: Path, *, nonblocking: bool = False) -> None:
        self.data = data
        self.nonblocking = nonblocking
        self._lock = threading.Lock()  # starts and stops
        self._sending = threading.Lock()  # the requests go in the order they wait in
        self._reading = threading.Lock()  # one thread reads the answers at a time
        self._process: subprocess.Popen[bytes] | None = None
        self._waiting: deque[Submitted] = deque()  # sent, in order, not answered yet
        self._frames = FrameBuffer()  # answers read from the pipe that does not block
        self._reader = False  # a task is reading the answer pipe
        self._frame_taken = trio.Event()  # set (and made anew) after each answer read
        self.started = 0

    # -- blocking pipes ----------------------------------------------------------

    def append_many(self, batches: list[Batch]) -> list[Appended | Rejected]:
        """Commit `batches` in one write transaction; see `EventStore.append_many`."""
        return self.wait(self.submit(batches))

    def submit(self, batches: list[Batch]) -> Submitted:
        """Hand a group to the child; its events that cannot be stored are refused here."""
        assert not self.nonblocking, "a process with pipes that do not block is sent to by `send`"
        submitted, request = self._encoded(batches)
        if request is None:
            return submitted
        with self._sending:
            process = self._running()
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
                    with self._lock:
                        process, started = self._process, self.started
                    body = None
                    if process is not None and process.stdout is not None:
                        try:
                            body = read_frame(process.stdout)
                        except (OSError, ValueError):  # ValueError: the pipe closed meanwhile
                            body = None
                    self._take(body, started)
        return self._results(submitted)

    # -- pipes that do not block (trio) ---------------------------------------------

    async def send(self, batches: list[Batch]) -> Submitted:
        """`submit` for a trio task: the frame goes as fast as the pipe takes it.

        Cancelled halfway, the child is stopped, since it could only misread
        what follows; the groups it was sent fail.
        """
        assert self.nonblocking, "a process with blocking pipes is sent to by `submit`"
        submitted, request = self._encoded(batches)
        if request is None:
            return submitted
        with self._lock:
            process = self._running()
            assert process.stdin is not None
            self._waiting.append(submitted)
        fd = process.stdin.fileno()
        view = memoryview(request)
        try:
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(fd)
        except (OSError, trio.ClosedResourceError):  # it died: `answer` says so
            pass
        except BaseException:
            with self._lock:
                if self._process is process:
                    self._fail_waiting()
                    self._stop(kill=True)
            raise
        return submitted

    async def answer(self, submitted: Submitted) -> list[Appended | Rejected]:
        """`wait` for a trio task: the results of a group sent, once committed.

        One task reads the pipe at a time; an answer it reads for another
        group wakes that group's task.
        """
        while submitted.answer is None:
            if self._reader:
                await self._frame_taken.wait()
                continue
            self._reader = True
            try:
                with self._lock:
                    process, started = self._process, self.started
                body = await self._next_frame(process)
                self._take(body, started)
            finally:
                self._reader = False
                self._frame_taken.set()
                self._frame_taken = trio.Event()
        return self._results(submitted)

    async def _next_frame(self, process: subprocess.Popen[bytes] | None) -> bytes | None:
        """The next answer's body, or None if the child is gone."""
        frames = self._frames
        while (body := frames.next_frame()) is None:
            if process is None or process.stdout is None:
                return None
            try:
                fd = process.stdout.fileno()
                data = os.read(fd, READ_BYTES)
            except BlockingIOError:
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:  # stopped meanwhile
                    return None
                continue
            except (OSError, ValueError):  # ValueError: the pipe was closed meanwhile
                return None
            if not data:
                return None
            frames.feed(data)
        return body

    # -- both ----------------------------------------------------------------------

    def _encoded(self, batches: list[Batch]) -> tuple[Submitted, bytes | None]:
        """The group and the frame to send it in; no frame if no batch can be stored."""
        submitted = Submitted(batches)
        out = [OutBatch(b.stream.guild_id, b.stream.channel_id, b.events) for b in batches]
        try:
            body = encoder.encode(out)  # the whole group in one call
            submitted.sent = list(range(len(batches)))
        except (OverflowError, TypeError, ValueError):  # find the batches that cannot be
            for position, batch in enumerate(batches):  # stored, as the store words it
                try:
                    stored_events(batch)
                except Rejected as refused:
                    submitted.results[position] = refused
                    continue
                submitted.sent.append(position)
            body = encoder.encode([out[position] for position in submitted.sent])
        if not submitted.sent:
            submitted.answer = Committed([])
            return submitted, None
        return submitted, frame(body)

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is None:
            raise WriteProcessError("the write process is not started")
        return process

    def _take(self, body: bytes | None, started: int) -> None:
        """Give the answer read (None: the child is gone) to the earliest waiting group."""
        with self._lock:
            if self.started != started:  # a new child came meanwhile: `start` failed its
                return  # groups, and what was read here is the old one's
            if body is None:  # every group waiting fails with it
                self._fail_waiting()
                self._stop(kill=True)
                return
            self._waiting.popleft().answer = answer_decoder.decode(body)

    @staticmethod
    def _results(submitted: Submitted) -> list[Appended | Rejected]:
        answer = submitted.answer
        if isinstance(answer, Failed):
            raise WriteProcessError(answer.error)
        assert answer is not None
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

    def _fail_waiting(self) -> None:
        """Fail every group sent to the child and not answered (the caller holds `_lock`)."""
        for waiting in self._waiting:
            waiting.answer = Failed("the write process stopped before it answered")
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
            process = subprocess.Popen(
                child_command("eva.store.write_child", str(self.data)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=child_env(),
            )
            if self.nonblocking:
                assert process.stdin is not None
                assert process.stdout is not None
                os.set_blocking(process.stdin.fileno(), False)
                os.set_blocking(process.stdout.fileno(), False)
                self._frames = FrameBuffer()
            self._process = process
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
        _closing(process.stdin.fileno())
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _closing(process.stdout.fileno())
        process.stdout.close()


def _closing(fd: int) -> None:
    """Wake a trio task waiting on `fd` before it is closed (it sees the pipe closed)."""
    with contextlib.suppress(RuntimeError):  # not on the trio thread: no task can wait on it
        trio.lowlevel.notify_closing(fd)
