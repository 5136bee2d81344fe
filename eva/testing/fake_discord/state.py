# What every part of the fake Discord shares: its world, its lock, its loop, what it was asked.
#
# Test support (the base of FakeDiscord, see eva.testing.fake_discord). The parts above it
# (gateway, messages, interactions, REST) each declare the state they own; FakeDiscord's
# constructor makes it all.
# Invariants: state is mutated under `_lock` (on the fake's loop once serving), and readers
# take snapshots under it. A blocking helper (`_call`) runs on the fake's loop and is refused
# from that loop's own thread.
from __future__ import annotations

import asyncio
import fnmatch
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from eva.testing.fake_discord.world import API_PREFIX, Channel, Guild, User, _Snowflakes

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Request:
    """One REST request the fake received (path without /api/v10)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any  # parsed JSON (from the body or multipart payload_json), or None
    files: tuple[str, ...]  # multipart file names
    status: int
    route: str | None  # the fake's route regex, "scripted" for a scripted failure, None: unknown
    contents: tuple[bytes, ...] = ()  # the multipart files' bytes, in the order of `files`


_FILES = web.RequestKey("fake_discord_files", tuple[str, ...])
"""The names of the files a multipart request carried (set by the REST part as it reads it)."""
_FILE_CONTENTS = web.RequestKey("fake_discord_file_contents", tuple[bytes, ...])
"""Their bytes, in the same order."""


class DiscordState:
    """The state every part of the fake reads: the world, the lock, the loop and the requests."""

    shard_count: int
    heartbeat_interval_ms: int
    echo_bot_messages: bool
    max_concurrency: int
    _ids: _Snowflakes
    bot_user: User
    application_id: int
    token: str
    guilds: dict[int, Guild]
    users: dict[int, User]
    _lock: threading.RLock
    _requests: list[Request]
    _errors: list[BaseException]
    rest_in_flight: int
    upload_limit: int
    _loop: asyncio.AbstractEventLoop | None
    _thread: threading.Thread | None
    port: int

    def channel(self, channel_id: int) -> Channel:
        for g in self.guilds.values():
            for c in (*g.channels, *g.threads):
                if c.id == channel_id:
                    return c
        raise KeyError(channel_id)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def rest_url(self) -> str:
        return f"{self.url}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn()` on the fake's loop and wait for it (from any other thread)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the fake is not serving")
        if threading.current_thread() is self._thread:
            raise RuntimeError("blocking helper called from the fake's own loop")

        async def run() -> T:
            return await fn()

        coro: Coroutine[Any, Any, T] = run()
        return asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    def _record(
        self,
        request: web.Request,
        path: str,
        body: Any,
        files: tuple[str, ...],
        status: int,
        route: str | None,
    ) -> None:
        rec = Request(
            request.method,
            path,
            dict(request.query),
            dict(request.headers),
            body,
            files,
            status,
            route,
            request.get(_FILE_CONTENTS, ()),
        )
        with self._lock:
            self._requests.append(rec)

    # --- handlers: (self, request, body, *path groups) -> (status, json)

    def requests(self, method: str | None = None, pattern: str | None = None) -> list[Request]:
        """REST requests so far (path without /api/v10), filtered by method and fnmatch pattern."""
        with self._lock:
            out = list(self._requests)
        return [
            r
            for r in out
            if (method is None or r.method == method.upper())
            and (pattern is None or fnmatch.fnmatchcase(r.path, pattern))
        ]

    @property
    def unknown_requests(self) -> list[Request]:
        """Requests to routes the fake does not know (answered 404)."""
        with self._lock:
            return [r for r in self._requests if r.route is None]

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised inside the fake's handlers (its own bugs): tests should expect none."""
        with self._lock:
            return list(self._errors)
