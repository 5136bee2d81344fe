# The fake Discord itself: made with its world, served on loopback in a thread of its own.
#
# Test support. `FakeDiscord` is the parts together (world, gateway, messages, interactions,
# REST): an aiohttp server on 127.0.0.1 (any free port) with its own asyncio loop in its own
# thread, so hikari may run under plain asyncio or trio-asyncio, in any loop.
# Invariants: the world is built before or while serving (a guild added while serving is sent
# as GUILD_CREATE to its shard); on leaving `serve()` every websocket is closed and the
# thread joined; an error that stopped the server is raised to the caller of `serve()`.
from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

from aiohttp import web

from eva.testing.fake_discord.gateway import Frame, _Conn, _Session
from eva.testing.fake_discord.interactions import Followup, InteractionResponse
from eva.testing.fake_discord.rest import Rest, _Failure
from eva.testing.fake_discord.state import Request, T
from eva.testing.fake_discord.world import JSON, Channel, Guild, User, _Snowflakes, bot_token


class FakeDiscord(Rest):
    """Discord REST under /api/v10 and a zlib-stream gateway, on loopback. Use `serve()`."""

    def __init__(
        self,
        *,
        token: str | None = None,
        shard_count: int = 1,
        heartbeat_interval_ms: int = 41_250,
        bot_name: str = "Eva",
        echo_bot_messages: bool = True,
        max_concurrency: int = 16,
    ) -> None:
        self.shard_count = shard_count
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.echo_bot_messages = echo_bot_messages
        self.max_concurrency = max_concurrency
        self.upload_limit = 10 * 1024 * 1024  # bytes a file may hold; more is refused (413)
        self._ids = _Snowflakes()
        self.bot_user = User(self._ids.next(), bot_name, bot=True)
        self.application_id = self.bot_user.id
        # hikari parses the token: its first segment must be base64 of the bot's id.
        self.token = token or bot_token(self.bot_user.id)
        self.guilds: dict[int, Guild] = {}
        self.users: dict[int, User] = {self.bot_user.id: self.bot_user}
        self._lock = threading.RLock()
        self._requests: list[Request] = []
        self._frames: list[Frame] = []
        self._ws_connects: list[tuple[str, dict[str, str]]] = []
        self._errors: list[BaseException] = []
        self._failures: list[_Failure] = []
        self.rest_in_flight = 0  # REST requests being answered (a pusher may wait for them)
        self._messages: dict[int, JSON] = {}  # id -> gateway form (with guild_id)
        self._history: dict[int, list[int]] = {}  # channel id -> message ids, oldest first
        self._bot_messages: list[int] = []
        self._typing: list[int] = []
        self._interactions: dict[int, JSON] = {}
        self._responses: list[InteractionResponse] = []
        self._original: dict[str, int] = {}  # interaction token -> original response message id
        self._followups: list[Followup] = []
        self._undelivered: list[tuple[str, int]] = []
        self._commands: dict[int | None, list[JSON]] = {}
        self._sessions: dict[str, _Session] = {}
        self._conns: dict[int, _Conn] = {}
        self._conn_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ----------------------------------------------------------------- world setup

    def add_guild(
        self,
        name: str = "guild",
        *,
        shard: int | None = None,
        channels: Sequence[str] = ("general", "random"),
        thread: str = "a-thread",
    ) -> Guild:
        """A guild with text channels and one thread in the first; on `shard` if given
        (of this fake's shard_count). Sent as GUILD_CREATE if its shard is connected."""
        gid = self._ids.next(shard=shard, shard_count=self.shard_count)
        chans = [Channel(self._ids.next(), gid, n, position=i) for i, n in enumerate(channels)]
        threads = [Channel(self._ids.next(), gid, thread, 11, chans[0].id, self.bot_user.id)]
        guild = Guild(gid, name, self.bot_user.id, chans, threads, [self.bot_user])
        guild.members.extend(u for u in self.users.values() if u is not self.bot_user)
        with self._lock:
            self.guilds[gid] = guild
            for c in (*chans, *threads):
                self._history[c.id] = []
        if self._loop is not None:
            self._call(lambda: self._dispatch(gid, "GUILD_CREATE", guild.to_json(gateway=True)))
        return guild

    def remove_bot(self, guild: Guild) -> None:
        """The bot is removed from the guild (kicked, or the server deleted): GUILD_DELETE
        without `unavailable`, and the guild gone from the fake. `add_guild` again brings
        it back as a new join (GUILD_CREATE) if given the same id (`readd_guild`)."""
        with self._lock:
            self.guilds.pop(guild.id, None)
        if self._loop is not None:
            self._call(lambda: self._dispatch(guild.id, "GUILD_DELETE", {"id": str(guild.id)}))

    def readd_guild(self, guild: Guild) -> None:
        """The bot is invited back to a guild it was removed from: GUILD_CREATE."""
        with self._lock:
            self.guilds[guild.id] = guild
        if self._loop is not None:
            self._call(
                lambda: self._dispatch(guild.id, "GUILD_CREATE", guild.to_json(gateway=True))
            )

    def add_user(self, username: str, *, bot: bool = False) -> User:
        """A user, member of every guild (added before the guilds are sent, or not cached)."""
        user = User(self._ids.next(), username, bot=bot, global_name=username.title())
        with self._lock:
            self.users[user.id] = user
            for g in self.guilds.values():
                g.members.append(user)
        return user

    # ----------------------------------------------------------------- serving

    @contextlib.contextmanager
    def serve(self, port: int = 0) -> Iterator[FakeDiscord]:
        """Run the server in a thread with its own loop until the block ends, on loopback
        `port` (0: any free one; `self.port` says which)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        # A plain selector loop, not asyncio.new_event_loop(): under trio-asyncio the policy
        # refuses to make loops from inside trio (and it would be the wrong kind anyway).
        loop = asyncio.SelectorEventLoop()
        up = threading.Event()
        stop = asyncio.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                loop.run_until_complete(self._main(sock, up, stop))
            except BaseException as e:  # reported to the caller of serve()
                errors.append(e)
                up.set()
            finally:
                sock.close()
                loop.close()

        thread = threading.Thread(target=run, name="fake-discord", daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()
        up.wait(10)
        if errors:
            raise errors[0]
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(10)
            self._loop = self._thread = None
            if errors:
                raise errors[0]

    async def _main(self, sock: socket.socket, up: threading.Event, stop: asyncio.Event) -> None:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway/resume", self._gateway)
        app.router.add_route("*", "/{tail:.*}", self._rest)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
            up.set()
            await stop.wait()
            for conn in list(self._conns.values()):
                with contextlib.suppress(Exception):
                    await conn.ws.close(code=1001, message=b"fake discord shutting down")
        finally:
            await runner.cleanup()


async def wait_until(
    predicate: Callable[[], T],
    *,
    sleep: Callable[[float], Awaitable[object]],
    within: float = 5.0,
    interval: float = 0.01,
) -> T:
    """Poll `predicate` until truthy and return its value; `sleep` is asyncio.sleep or
    trio.sleep, so this works under either. Raises TimeoutError."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within}s")
        await sleep(interval)
