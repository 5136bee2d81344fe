# A child interpreter that answers each request sent down a pipe, in order.
#
# Shell. The child is `python -S -m MODULE ARGUMENTS` (eva.store.pipes); it
# reads frames from its standard input and writes one answer frame for each
# to its standard output. This side sends requests while earlier ones are
# still being worked on and takes each answer to the request that waits for
# it, over pipes that never block the trio loop, with no thread between. The
# child dies with the thread that started it (it asks Linux to), so `start`
# is called from the thread of the trio loop. If the child dies, every
# request sent to it fails (it may or may not have been carried out) and the
# next `start` makes a new one.
from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections import deque
from collections.abc import Sequence

import trio

from eva.store.pipes import FrameBuffer, child_command, child_env, frame

CLOSE_WAIT_S = 10.0
"""How long closing waits for the child to finish its request and leave."""
READ_BYTES = 1 << 16
"""The most read from the answer pipe at once (a pipe holds 64 KiB)."""


class ChildGone(RuntimeError):
    """The child stopped before it answered, or was never started."""


class Pending:
    """A request sent, waiting for its answer (or for the news that none will come)."""

    __slots__ = ("answer", "gone")

    def __init__(self) -> None:
        self.answer: bytes | None = None
        self.gone: str | None = None

    @property
    def settled(self) -> bool:
        return self.answer is not None or self.gone is not None

    def result(self) -> bytes:
        """The answer's body; ChildGone if none came."""
        if self.gone is not None:
            raise ChildGone(self.gone)
        assert self.answer is not None
        return self.answer


class PipeChild:
    """One child interpreter at a time, started anew after it dies."""

    def __init__(self, module: str, arguments: Sequence[str] = ()) -> None:
        self.command = child_command(module, *arguments)
        self._lock = threading.Lock()  # starts and stops (`suspend` may run in a thread)
        self.process: subprocess.Popen[bytes] | None = None
        self._waiting: deque[Pending] = deque()  # sent, in order, not answered yet
        self._frames = FrameBuffer()  # answers read from the pipe, whole frames handed out
        self._sender = trio.Lock()  # one trio task writes a frame at a time
        self._reader = False  # a task is reading the answer pipe
        self._frame_taken = trio.Event()  # set (and made anew) after each answer read
        self.started = 0


    async def send(self, body: bytes) -> Pending:
        """Send a request's body, as fast as the pipe takes it; `answer` for its answer.

        Tasks that send at once take turns. Cancelled halfway, the child is
        stopped, since it could only misread what follows; the requests it was
        sent fail.
        """
        try:
            self._sender.acquire_nowait()  # the common case: no other sender, no wait
        except trio.WouldBlock:
            await self._sender.acquire()
        try:
            return await self._send(frame(body))
        finally:
            self._sender.release()

    async def _send(self, request: bytes) -> Pending:
        pending = Pending()
        with self._lock:
            process = self._running()
            assert process.stdin is not None
            self._waiting.append(pending)
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
                if self.process is process:
                    self._fail_waiting()
                    self._stop(kill=True)
            raise
        return pending

    async def answer(self, pending: Pending) -> bytes:
        """The answer to a request sent; ChildGone if the child stopped first.

        One task reads the pipe at a time; an answer it reads for another
        request wakes that request's task.
        """
        while not pending.settled:
            if self._reader:
                await self._frame_taken.wait()
                continue
            self._reader = True
            try:
                with self._lock:
                    process, started = self.process, self.started
                body = await self._next_frame(process)
                self._take(body, started)
            finally:
                self._reader = False
                self._frame_taken.set()
                self._frame_taken = trio.Event()
        return pending.result()

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

    def _running(self) -> subprocess.Popen[bytes]:
        process = self.process
        if process is None:
            raise ChildGone(f"{self.command[-1]}: the child is not started")
        return process

    def _take(self, body: bytes | None, started: int) -> None:
        """Give the answer read (None: the child is gone) to the earliest waiting request."""
        with self._lock:
            if self.started != started:  # a new child came meanwhile: `start` failed its
                return  # requests, and what was read here is the old one's
            if body is None:  # every request waiting fails with it
                self._fail_waiting()
                self._stop(kill=True)
                return
            self._waiting.popleft().answer = body

    def _fail_waiting(self) -> None:
        """Fail every request sent and not answered (the caller holds `_lock`)."""
        for waiting in self._waiting:
            waiting.gone = "the child process stopped before it answered"
        self._waiting.clear()

    def start(self) -> None:
        """Start the child unless it is running (after `suspend`, or if it died)."""
        with self._lock:
            process = self.process
            if process is not None and process.poll() is None:
                return
            if process is not None:  # it died: what it was sent is lost with it
                self._fail_waiting()
                self._stop()
            process = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env()
            )
            assert process.stdin is not None
            assert process.stdout is not None
            os.set_blocking(process.stdin.fileno(), False)
            os.set_blocking(process.stdout.fileno(), False)
            self._frames = FrameBuffer()
            self.process = process
            self.started += 1

    def suspend(self) -> None:
        """Let the child leave once every request sent is answered; the next request
        starts a new one."""
        with self._lock:
            assert not self._waiting, "suspended with requests waiting for their answers"
            self._stop()

    def close(self) -> None:
        """Stop the child; a request still waiting for its answer fails."""
        with self._lock:
            self._fail_waiting()
            self._stop()

    def _stop(self, kill: bool = False) -> None:
        """Stop the child (the caller holds `_lock`)."""
        process, self.process = self.process, None
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
