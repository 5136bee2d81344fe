# Eva's replies go out through a REST client of their own, on a thread of their own.
#
# Shell. hikari's asyncio loop carries the gateway: under a burst of chat it always
# has frames to decode and events to dispatch, and a REST call made on it waits
# behind them at each of its steps. A person waiting for Eva should not wait for
# that, so replies are posted by a second hikari REST client running on a plain
# asyncio loop in a thread, idle but for replies. It keeps its own rate-limit
# buckets (hikari's, for the routes replies use) and shares nothing with the
# gateway's client but the token.
# Invariants: `send` returns only once Discord answered (or raises what hikari
# raised); cancelling it cancels the call; `open_reply_sender` stops the thread.
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import TypeVar

import hikari
import trio

T = TypeVar("T")

Call = Callable[[hikari.api.RESTClient], Awaitable[T]]


class ReplySender:
    """A hikari REST client on its own thread and loop; `send` runs a call on it from trio."""

    def __init__(self, token: str, rest_url: str | None = None) -> None:
        self._token = token
        self._rest_url = rest_url
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: hikari.api.RESTClient | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="eva-replies", daemon=True)

    async def start(self) -> None:
        self._thread.start()
        await trio.to_thread.run_sync(self._ready.wait)
        if self._failed is not None:
            raise self._failed

    async def send(self, call: Call[T]) -> T:
        """The result of `call(rest)`, run on the sender's loop."""
        loop, client = self._loop, self._client
        if loop is None or client is None:
            raise RuntimeError("the reply sender is not running")
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        async def run() -> T:
            return await call(client)

        coroutine = run()
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError:  # the loop closed meanwhile
            coroutine.close()
            raise RuntimeError("the reply sender is not running") from None

        def wake(_: concurrent.futures.Future[T]) -> None:
            with suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        try:
            await done.wait()
        except BaseException:
            future.cancel()
            raise
        return future.result()

    async def close(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread.is_alive():
            await trio.to_thread.run_sync(self._thread.join)

    def _run(self) -> None:
        loop = asyncio.SelectorEventLoop()  # a plain loop, whatever the main thread's policy
        try:
            loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to `start` if it was still waiting
            self._failed = error
        finally:
            self._loop = self._client = None
            self._ready.set()
            loop.close()

    async def _serve(self) -> None:
        app = hikari.RESTApp(url=self._rest_url)
        await app.start()
        try:
            client = app.acquire(self._token, hikari.TokenType.BOT)
            client.start()
            try:
                self._stop = asyncio.Event()
                self._client = client
                self._loop = asyncio.get_running_loop()
                self._ready.set()
                await self._stop.wait()
            finally:
                await client.close()
        finally:
            await app.close()


@asynccontextmanager
async def open_reply_sender(token: str, rest_url: str | None = None) -> AsyncIterator[ReplySender]:
    """A running ReplySender, stopped when the block ends."""
    sender = ReplySender(token, rest_url)
    await sender.start()
    try:
        yield sender
    finally:
        with trio.CancelScope(shield=True):
            await sender.close()
