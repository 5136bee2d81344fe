# A fake Discord on loopback (REST + gateway) for tests: the real hikari client connects to it.
#
# What for: tests start it, point `hikari.GatewayBot(token=fake.token, rest_url=fake.rest_url)`
# at it, then act as users (post, edit, delete messages, run slash commands, press buttons), drop
# connections, script 429s, and assert on what the bot did (every REST call, every gateway frame,
# the messages it sent, its interaction responses). No internet, no real token: `fake.token` is
# Discord-shaped because hikari decodes the bot id from the token's first segment.
#
# How it runs: an aiohttp server on 127.0.0.1 (any free port) with its own asyncio loop in its own
# thread, so hikari may run under plain asyncio or trio-asyncio, in any loop. The action methods
# (`post_message`, ...) are blocking calls safe from any thread but the fake's: they run on the
# fake's loop and return once the frame is written, never waiting for hikari to read it, so calling
# them from the loop that runs hikari is fine. To wait for what the bot does, poll with
# `wait_until(..., sleep=asyncio.sleep or trio.sleep)`: never block the bot's loop.
#
# What it may not know: Discord's full object model. Payloads are minimal but carry every field
# hikari 2.x reads; permissions, rate-limit buckets, member chunking and DMs are only sketched.
# REST message objects carry no guild_id (as Discord's do not); gateway ones do. The bot's own
# messages are echoed as MESSAGE_CREATE (as Discord does; `echo_bot_messages=False` turns it off).
# Typing: payloads are JSON = dict[str, Any] (their shape is Discord's, checked by hikari itself);
# the compressors come from private or optional modules, so they are Any too.
#
# Invariants: state is mutated under `_lock` (on the fake's loop once serving), and readers take
# snapshots under it. A websocket that asks for `compress=zlib-stream` gets every payload compressed
# then flushed with Z_SYNC_FLUSH (ending in 00 00 ff ff), one that asks for `zstd-stream` (hikari
# does when a zstd module is there) gets each as a flushed zstd block: one stream per connection,
# under a per-connection lock so frames leave in compression order. Dispatch `s` numbers are per
# session and strictly increase; a session keeps its dispatches so RESUME replays those after the
# client's `seq`. A guild belongs to shard (guild_id >> 22) % shard_count of each identified
# session; only that session gets its events; an event for a session that is disconnected waits in
# its backlog for a RESUME (as on Discord), and one for a shard nobody identified is lost
# (`undelivered`).
from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import importlib
import itertools
import json
import re
import secrets
import socket
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

from aiohttp import BodyPartReader, WSMsgType, web

JSON = dict[str, Any]
T = TypeVar("T")

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
ALL_PERMISSIONS = str((1 << 50) - 1)

# Gateway opcodes and intents the fake understands.
OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_PRESENCE, OP_VOICE = 0, 1, 2, 3, 4
OP_RESUME, OP_RECONNECT, OP_REQUEST_MEMBERS, OP_INVALID_SESSION = 6, 7, 8, 9
OP_HELLO, OP_HEARTBEAT_ACK = 10, 11
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_MESSAGE_CONTENT = 1 << 15
_EVENT_INTENT = {
    "GUILD_CREATE": INTENT_GUILDS,
    "MESSAGE_CREATE": INTENT_GUILD_MESSAGES,
    "MESSAGE_UPDATE": INTENT_GUILD_MESSAGES,
    "MESSAGE_DELETE": INTENT_GUILD_MESSAGES,
    "MESSAGE_DELETE_BULK": INTENT_GUILD_MESSAGES,
}
MESSAGE_FLAG_EPHEMERAL = 64
MESSAGE_FLAG_LOADING = 128


def snowflake_time_ms(snowflake: int) -> int:
    return (snowflake >> 22) + DISCORD_EPOCH_MS


def iso(snowflake: int) -> str:
    return datetime.fromtimestamp(snowflake_time_ms(snowflake) / 1000, UTC).isoformat()


def bot_token(bot_id: int, secret: str = "fake-token") -> str:
    """A Discord-shaped bot token: base64(bot id) . timestamp . secret (hikari reads the id)."""
    return f"{base64.b64encode(str(bot_id).encode()).decode()}.AAAAAA.{secret}"


def shard_of(guild_id: int, shard_count: int) -> int:
    """The shard that owns a guild, as Discord computes it."""
    return (guild_id >> 22) % shard_count


@dataclass(frozen=True, slots=True)
class User:
    id: int
    username: str
    bot: bool = False
    global_name: str | None = None

    def to_json(self) -> JSON:
        return {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "bot": self.bot,
            "system": False,
            "public_flags": 0,
            "flags": 0,
            "banner": None,
            "accent_color": None,
            "avatar_decoration_data": None,
        }


@dataclass(frozen=True, slots=True)
class Channel:
    id: int
    guild_id: int
    name: str
    type: int = 0  # 0 text, 11 public thread
    parent_id: int | None = None
    owner_id: int | None = None
    position: int = 0

    def to_json(self) -> JSON:
        out: JSON = {
            "id": str(self.id),
            "type": self.type,
            "guild_id": str(self.guild_id),
            "name": self.name,
            "parent_id": None if self.parent_id is None else str(self.parent_id),
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        if self.type == 11:
            stamp = iso(self.id)
            out |= {
                "owner_id": str(self.owner_id),
                "message_count": 0,
                "total_message_count": 0,
                "member_count": 1,
                "applied_tags": [],
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": stamp,
                    "locked": False,
                    "create_timestamp": stamp,
                },
            }
        else:
            out |= {
                "position": self.position,
                "permission_overwrites": [],
                "topic": None,
                "nsfw": False,
                "default_auto_archive_duration": 1440,
            }
        return out


@dataclass(slots=True)
class Guild:
    id: int
    name: str
    owner_id: int
    channels: list[Channel]
    threads: list[Channel]
    members: list[User] = field(default_factory=list)

    @property
    def general(self) -> Channel:
        """The first text channel."""
        return self.channels[0]

    @property
    def thread(self) -> Channel:
        return self.threads[0]

    def to_json(self, *, gateway: bool) -> JSON:
        out: JSON = {
            "id": str(self.id),
            "name": self.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(self.owner_id),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "widget_enabled": False,
            "widget_channel_id": None,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "features": [],
            "application_id": None,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "max_presences": None,
            "max_members": 500_000,
            "max_video_channel_users": 25,
            "vanity_url_code": None,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "incidents_data": None,
            "roles": [
                {
                    "id": str(self.id),  # @everyone has the guild's id
                    "name": "@everyone",
                    "color": 0,
                    "hoist": False,
                    "icon": None,
                    "unicode_emoji": None,
                    "position": 0,
                    "permissions": ALL_PERMISSIONS,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "emojis": [],
            "stickers": [],
        }
        if gateway:
            out |= {
                "joined_at": iso(self.id),
                "large": False,
                "unavailable": False,
                "lazy": True,
                "member_count": len(self.members),
                "members": [member_json(u, self.id) for u in self.members],
                "channels": [c.to_json() for c in self.channels],
                "threads": [t.to_json() for t in self.threads],
                "presences": [],
                "voice_states": [],
                "stage_instances": [],
                "guild_scheduled_events": [],
                "soundboard_sounds": [],
            }
        return out


def member_json(user: User, guild_id: int, *, with_user: bool = True) -> JSON:
    out: JSON = {
        "nick": None,
        "avatar": None,
        "banner": None,
        "roles": [],
        "joined_at": iso(guild_id),
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "communication_disabled_until": None,
    }
    if with_user:
        out["user"] = user.to_json()
    return out


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


@dataclass(frozen=True, slots=True)
class Frame:
    """One gateway payload, in from the client or out to it."""

    conn: int
    shard: tuple[int, int] | None
    direction: str  # "in" | "out"
    payload: JSON

    @property
    def op(self) -> int:
        return int(self.payload["op"])


@dataclass(frozen=True, slots=True)
class InteractionResponse:
    """A POST /interactions/{id}/{token}/callback."""

    interaction_id: int
    token: str
    type: int  # 4 message, 5 deferred, 6 deferred update, 7 update, 9 modal
    data: JSON
    files: tuple[str, ...]

    @property
    def flags(self) -> int:
        return int(self.data.get("flags") or 0)

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & MESSAGE_FLAG_EPHEMERAL)

    @property
    def content(self) -> str | None:
        content = self.data.get("content")
        return None if content is None else str(content)


@dataclass(frozen=True, slots=True)
class Followup:
    """A webhook call with an interaction's token: POST /webhooks/{app}/{token} ("create") or
    PATCH /webhooks/{app}/{token}/messages/{@original|id} ("edit")."""

    token: str
    kind: str  # "create" | "edit"
    target: str | None  # "@original" or a message id for edits
    body: JSON

    @property
    def content(self) -> str | None:
        content = self.body.get("content")
        return None if content is None else str(content)


@dataclass(slots=True)
class _Failure:
    method: str
    pattern: str
    status: int
    body: JSON
    headers: dict[str, str]
    times: int  # how many more times it starts (a request, or a rate-limit window)
    window: float = 0.0  # a 429's retry_after: the route stays limited this long
    until: float = 0.0  # the current window ends (time.time())
    is_global: bool = False
    scope: str = "user"
    bucket: str = ""

    def answer(self, now: float) -> tuple[JSON, dict[str, str]]:
        if not self.window:
            return self.body, self.headers
        left = round(max(self.until - now, 0.001), 3)
        body: JSON = {"message": "You are being rate limited.", "retry_after": left}
        body |= {"global": self.is_global, "code": 0}
        headers = {"Retry-After": f"{left:.3f}", "X-RateLimit-Scope": self.scope}
        if self.is_global:
            headers["X-RateLimit-Global"] = "true"
        else:
            headers |= {
                "X-RateLimit-Limit": "5",
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": f"{self.until:.3f}",
                "X-RateLimit-Reset-After": f"{left:.3f}",
                "X-RateLimit-Bucket": self.bucket,
            }
        return body, headers


class GatewayCompressor:
    """One connection's gateway compression: each payload one frame of a single stream."""

    def __init__(self, name: str, compressor: Any) -> None:
        self.name = name
        self._compressor = compressor

    @classmethod
    def for_name(cls, name: str) -> GatewayCompressor | None:
        """The compressor for `compress=name`, or None if the fake cannot speak it."""
        if name == "zlib-stream":
            return cls(name, zlib.compressobj())
        if name == "zstd-stream":
            zstd = zstd_module()
            return None if zstd is None else cls(name, zstd.ZstdCompressor())
        return None

    def frame(self, raw: bytes) -> bytes:
        if self.name == "zlib-stream":
            return bytes(self._compressor.compress(raw) + self._compressor.flush(zlib.Z_SYNC_FLUSH))
        return bytes(self._compressor.compress(raw, mode=self._compressor.FLUSH_BLOCK))


def zstd_module() -> Any:
    """The zstd module hikari would use (the standard one from 3.14, else the backport)."""
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


@dataclass(slots=True)
class _Conn:
    id: int
    ws: web.WebSocketResponse
    request: web.Request
    compressor: GatewayCompressor | None  # None for plain text frames
    send_lock: asyncio.Lock
    session: _Session | None = None


@dataclass(slots=True)
class _Session:
    id: str
    shard: tuple[int, int]
    intents: int
    seq: int = 0
    backlog: list[JSON] = field(default_factory=list)
    conn: _Conn | None = None
    invalid: bool = False

    def owns(self, guild_id: int) -> bool:
        return shard_of(guild_id, self.shard[1]) == self.shard[0]


class Posting(NamedTuple):
    """One message a user posts (see `FakeDiscord.post_messages`)."""

    guild_id: int
    channel_id: int
    author: User
    content: str
    mentions: Sequence[User] = ()
    referenced_message: JSON | None = None


class _Snowflakes:
    """Unique, increasing snowflakes from the clock; optionally landing on a given shard."""

    def __init__(self) -> None:
        self._last_ms = 0
        self._inc = itertools.count()
        self._lock = threading.Lock()

    def next(self, *, shard: int | None = None, shard_count: int = 1) -> int:
        with self._lock:
            ms = max(int(time.time() * 1000) - DISCORD_EPOCH_MS, self._last_ms)
            if shard is not None:
                while ms % shard_count != shard:
                    ms += 1
            self._last_ms = ms
            return (ms << 22) | (next(self._inc) & 0x3FFFFF)


class FakeDiscord:
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

    def add_user(self, username: str, *, bot: bool = False) -> User:
        """A user, member of every guild (added before the guilds are sent, or not cached)."""
        user = User(self._ids.next(), username, bot=bot, global_name=username.title())
        with self._lock:
            self.users[user.id] = user
            for g in self.guilds.values():
                g.members.append(user)
        return user

    def channel(self, channel_id: int) -> Channel:
        for g in self.guilds.values():
            for c in (*g.channels, *g.threads):
                if c.id == channel_id:
                    return c
        raise KeyError(channel_id)

    # ----------------------------------------------------------------- serving

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def rest_url(self) -> str:
        return f"{self.url}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @contextlib.contextmanager
    def serve(self) -> Iterator[FakeDiscord]:
        """Run the server in a thread with its own loop until the block ends."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
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

    # ----------------------------------------------------------------- test actions (gateway)

    def post_message(
        self,
        guild_id: int,
        channel_id: int,
        author: User,
        content: str,
        mentions: Sequence[User] = (),
        referenced_message: JSON | None = None,
    ) -> JSON:
        """A user posts: MESSAGE_CREATE to the owning shard. Returns the message (gateway form)."""
        posting = Posting(guild_id, channel_id, author, content, mentions, referenced_message)
        return self.post_messages([posting])[0]

    def post_messages(self, postings: Sequence[Posting]) -> list[JSON]:
        """Users post one after the other, as `post_message` does each, in one call to the
        fake's loop (a pusher that posts many spends less on handing each over)."""

        async def go() -> list[JSON]:
            posted = []
            for guild_id, channel_id, author, content, mentions, reference in postings:
                msg = self._new_message(
                    guild_id, channel_id, author, content, mentions=mentions, reference=reference
                )
                self._store(msg)
                await self._dispatch(guild_id, "MESSAGE_CREATE", msg)
                posted.append(msg)
            return posted

        return self._call(go)

    def edit_message(self, message: JSON | int, content: str) -> JSON:
        """The author edits: MESSAGE_UPDATE (full message, edited_timestamp set)."""

        async def go() -> JSON:
            msg = self._edit(message, {"content": content})
            await self._dispatch(int(msg["guild_id"]), "MESSAGE_UPDATE", msg)
            return msg

        return self._call(go)

    def delete_message(self, message: JSON | int) -> None:
        """MESSAGE_DELETE; the message leaves the history."""

        async def go() -> None:
            msg = self._unstore(message)
            data = {"id": msg["id"], "channel_id": msg["channel_id"], "guild_id": msg["guild_id"]}
            await self._dispatch(int(msg["guild_id"]), "MESSAGE_DELETE", data)

        self._call(go)

    def bulk_delete(self, messages: Sequence[JSON | int]) -> None:
        """MESSAGE_DELETE_BULK for messages of one channel."""

        async def go() -> None:
            gone = [self._unstore(m) for m in messages]
            channels = {m["channel_id"] for m in gone}
            if len(channels) != 1:
                raise ValueError("bulk_delete needs messages of exactly one channel")
            data = {
                "ids": [m["id"] for m in gone],
                "channel_id": gone[0]["channel_id"],
                "guild_id": gone[0]["guild_id"],
            }
            await self._dispatch(int(gone[0]["guild_id"]), "MESSAGE_DELETE_BULK", data)

        self._call(go)

    def slash_command(
        self,
        guild_id: int,
        channel_id: int,
        user: User,
        name: str,
        options: Mapping[str, str | int | float | bool] | Sequence[JSON] = (),
    ) -> JSON:
        """INTERACTION_CREATE type 2 (a chat-input command). `options` as {name: value} (type
        inferred) or raw option objects. Returns the interaction (with id and token)."""
        if isinstance(options, Mapping):
            opts = [{"name": k, "type": _option_type(v), "value": v} for k, v in options.items()]
        else:
            opts = [dict(o) for o in options]
        command = self._find_command(name, guild_id)
        data: JSON = {
            "id": command["id"] if command else str(self._ids.next()),
            "name": name,
            "type": 1,
            "options": opts,
        }
        if command and command.get("guild_id"):
            data["guild_id"] = command["guild_id"]
        return self._interaction(2, guild_id, channel_id, user, data)

    def press_button(
        self, guild_id: int, channel_id: int, user: User, custom_id: str, message: JSON
    ) -> JSON:
        """INTERACTION_CREATE type 3 (a button on `message`, e.g. one from `bot_messages()`)."""
        data = {"custom_id": custom_id, "component_type": 2}
        return self._interaction(3, guild_id, channel_id, user, data, message=message)

    def dispatch(self, guild_id: int, event: str, data: JSON) -> None:
        """Any raw dispatch to the shard owning `guild_id`."""
        self._call(lambda: self._dispatch(guild_id, event, data))

    def drop_connection(
        self, shard: int, *, code: int | None = None, invalidate: bool = False
    ) -> None:
        """Cut the shard's websocket: abruptly (TCP abort) by default, or with close `code`.
        With `invalidate`, its session is forgotten so a RESUME gets INVALID_SESSION(false)."""

        async def go() -> None:
            for s in self._sessions.values():
                if s.shard[0] != shard or s.conn is None:
                    continue
                conn, s.conn = s.conn, None
                s.invalid = s.invalid or invalidate
                if code is None:
                    transport = conn.request.transport
                    if transport is not None:
                        transport.abort()
                else:
                    await conn.ws.close(code=code, message=b"fake discord dropped the connection")

        self._call(go)

    def send_reconnect(self, shard: int) -> None:
        """Op 7 RECONNECT to the shard: hikari should reconnect and resume."""

        async def go() -> None:
            for s in self._sessions.values():
                if s.shard[0] == shard and s.conn is not None:
                    await self._send(s.conn, {"op": OP_RECONNECT, "d": None, "s": None, "t": None})

        self._call(go)

    # ----------------------------------------------------------------- failures

    def fail(
        self,
        method: str,
        pattern: str,
        *,
        status: int = 500,
        body: JSON | None = None,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` requests matching (method, fnmatch pattern on the path without
        /api/v10, e.g. "/channels/*/messages") get this answer instead."""
        with self._lock:
            self._failures.append(
                _Failure(
                    method.upper(),
                    pattern,
                    status,
                    body or {"message": "500: Internal Server Error", "code": 0},
                    dict(headers or {}),
                    times,
                )
            )

    def rate_limit(
        self,
        method: str,
        pattern: str,
        *,
        retry_after: float = 0.25,
        times: int = 1,
        is_global: bool = False,
        scope: str = "user",
    ) -> None:
        """Rate-limit the route as Discord does: the next matching request starts a window of
        `retry_after` seconds (`times` windows in all) during which every matching request gets
        429 with the time left in the body's retry_after (float seconds) and in the Retry-After,
        X-RateLimit-Reset-After / -Reset / -Remaining: 0 / -Bucket / -Scope headers."""
        with self._lock:
            self._failures.append(
                _Failure(
                    method.upper(),
                    pattern,
                    429,
                    {},
                    {},
                    times,
                    window=retry_after,
                    is_global=is_global,
                    scope=scope,
                    bucket=secrets.token_hex(16),
                )
            )

    # ----------------------------------------------------------------- inspection

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

    def frames(
        self, *, shard: int | None = None, op: int | None = None, direction: str = "in"
    ) -> list[Frame]:
        """Gateway payloads received from clients ("in") or sent to them ("out")."""
        with self._lock:
            out = list(self._frames)
        return [
            f
            for f in out
            if f.direction == direction
            and (shard is None or (f.shard is not None and f.shard[0] == shard))
            and (op is None or f.op == op)
        ]

    def bot_messages(self, channel_id: int | None = None) -> list[JSON]:
        """Messages the bot created (REST, interaction responses, followups), oldest first,
        as they are now (edits applied), in REST form."""
        with self._lock:
            msgs = [self._messages[i] for i in self._bot_messages if i in self._messages]
            return [
                _rest_form(m)
                for m in msgs
                if channel_id is None or int(m["channel_id"]) == channel_id
            ]

    def channel_messages(self, channel_id: int) -> list[JSON]:
        """The channel's history (users' and bot's), oldest first, REST form."""
        with self._lock:
            return [_rest_form(self._messages[i]) for i in self._history.get(channel_id, [])]

    @property
    def typing(self) -> list[int]:
        with self._lock:
            return list(self._typing)

    def interaction_responses(self, interaction_id: int | None = None) -> list[InteractionResponse]:
        with self._lock:
            return [
                r
                for r in self._responses
                if interaction_id is None or r.interaction_id == interaction_id
            ]

    @property
    def followups(self) -> list[Followup]:
        with self._lock:
            return list(self._followups)

    def commands(self, guild_id: int | None = None) -> list[JSON]:
        """Registered slash commands: global (None) or for a guild."""
        with self._lock:
            return list(self._commands.get(guild_id, []))

    @property
    def undelivered(self) -> list[tuple[str, int]]:
        """(event, guild id) dispatched while no session had identified for the guild's shard:
        lost, as on Discord. (Events for a session that is only disconnected wait for RESUME.)"""
        with self._lock:
            return list(self._undelivered)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised inside the fake's handlers (its own bugs): tests should expect none."""
        with self._lock:
            return list(self._errors)

    @property
    def gateway_connects(self) -> list[tuple[str, dict[str, str]]]:
        """(path, query) of every websocket connection attempt: "/gateway" or "/gateway/resume"."""
        with self._lock:
            return list(self._ws_connects)

    def connected_shards(self) -> set[int]:
        with self._lock:
            return {s.shard[0] for s in self._sessions.values() if s.conn is not None}

    def identifies(self, shard: int | None = None) -> int:
        return len(self.frames(shard=shard, op=OP_IDENTIFY))

    def resumes(self) -> int:
        return len(self.frames(op=OP_RESUME))

    # ----------------------------------------------------------------- gateway internals

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self._ws_connects.append((request.path, dict(request.query)))
        compress = request.query.get("compress")
        compressor = None if compress is None else GatewayCompressor.for_name(compress)
        if compress is not None and compressor is None:
            self._record(request, request.path, None, (), 400, "gateway")
            return web.json_response({"message": f"unsupported compress={compress}"}, status=400)
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        conn = _Conn(
            next(self._conn_ids),
            ws,
            request,
            compressor,
            asyncio.Lock(),
        )
        with self._lock:
            self._conns[conn.id] = conn
        try:
            hello = {"heartbeat_interval": self.heartbeat_interval_ms, "_trace": ["fake-gateway"]}
            await self._send(conn, {"op": OP_HELLO, "d": hello, "s": None, "t": None})
            async for msg in ws:
                if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    break
                payload = json.loads(msg.data)
                with self._lock:
                    shard = conn.session.shard if conn.session else None
                    self._frames.append(Frame(conn.id, shard, "in", payload))
                await self._on_frame(conn, payload)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        except Exception as e:  # a bug in the fake: kept for the test to see
            with self._lock:
                self._errors.append(e)
            await ws.close(code=4000, message=b"fake discord error")
        finally:
            with self._lock:
                self._conns.pop(conn.id, None)
                if conn.session is not None and conn.session.conn is conn:
                    conn.session.conn = None
        return ws

    async def _on_frame(self, conn: _Conn, payload: JSON) -> None:
        op, d = payload.get("op"), payload.get("d") or {}
        if op == OP_HEARTBEAT:
            await self._send(conn, {"op": OP_HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == OP_IDENTIFY:
            await self._identify(conn, d)
        elif op == OP_RESUME:
            await self._resume(conn, d)
        elif conn.session is None:
            await conn.ws.close(code=4003, message=b"Not authenticated.")
        elif op == OP_REQUEST_MEMBERS:
            await self._members_chunk(conn, d)
        elif op in (OP_PRESENCE, OP_VOICE):
            pass
        else:
            await conn.ws.close(code=4001, message=b"Unknown opcode.")

    def _token_ok(self, token: object) -> bool:
        return token in (self.token, f"Bot {self.token}")

    async def _identify(self, conn: _Conn, d: JSON) -> None:
        if conn.session is not None:
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return
        if not self._token_ok(d.get("token")):
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        shard_id, shard_count = d.get("shard", [0, 1])
        if not 0 <= shard_id < shard_count:
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return
        intents = d.get("intents")
        if not isinstance(intents, int) or intents < 0 or intents >= 1 << 26:
            await conn.ws.close(code=4013, message=b"Invalid intent(s).")
            return
        session = _Session(secrets.token_hex(16), (shard_id, shard_count), intents, conn=conn)
        with self._lock:
            for old in self._sessions.values():  # a new IDENTIFY for a shard supersedes the old
                if old.shard == session.shard:
                    old.invalid = True
            self._sessions[session.id] = session
            conn.session = session
        guilds = [g for g in self.guilds.values() if session.owns(g.id)]
        ready = {
            "v": 10,
            "user": self.bot_user.to_json()
            | {"verified": True, "mfa_enabled": False, "locale": "en-US", "premium_type": 0},
            "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway/resume",
            "shard": [shard_id, shard_count],
            "application": {"id": str(self.application_id), "flags": 0},
            "private_channels": [],
            "presences": [],
            "relationships": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "auth": {},
            "user_settings": {},
            "_trace": ["fake-gateway"],
        }
        await self._session_dispatch(session, "READY", ready)
        for g in guilds:
            await self._session_dispatch(session, "GUILD_CREATE", g.to_json(gateway=True))

    async def _resume(self, conn: _Conn, d: JSON) -> None:
        session = self._sessions.get(str(d.get("session_id")))
        if session is None or session.invalid or not self._token_ok(d.get("token")):
            await self._send(conn, {"op": OP_INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        if session.conn is not None and session.conn is not conn:
            old, session.conn = session.conn, None
            await old.ws.close(code=4000, message=b"session resumed elsewhere")
        seq = int(d.get("seq") or 0)
        with self._lock:
            session.conn = conn
            conn.session = session
            missed = [p for p in session.backlog if p["s"] > seq]
        for payload in missed:
            await self._send(conn, payload)
        await self._session_dispatch(session, "RESUMED", {"_trace": ["fake-gateway"]})

    async def _members_chunk(self, conn: _Conn, d: JSON) -> None:
        assert conn.session is not None
        guild = self.guilds.get(int(d.get("guild_id", 0)))
        if guild is None:
            return
        chunk: JSON = {
            "guild_id": str(guild.id),
            "members": [member_json(u, guild.id) for u in guild.members],
            "chunk_index": 0,
            "chunk_count": 1,
            "not_found": [],
        }
        if d.get("nonce") is not None:
            chunk["nonce"] = d["nonce"]
        await self._session_dispatch(conn.session, "GUILD_MEMBERS_CHUNK", chunk)

    async def _dispatch(self, guild_id: int, event: str, data: JSON) -> int:
        """Send an event to every live session owning the guild; returns how many got it."""
        sessions = [s for s in self._sessions.values() if not s.invalid and s.owns(guild_id)]
        if not sessions:
            with self._lock:
                self._undelivered.append((event, guild_id))
        sent = 0
        for s in sessions:
            need = _EVENT_INTENT.get(event, 0)
            if need and not s.intents & need:
                continue
            await self._session_dispatch(s, event, self._for_intents(s, event, data))
            sent += 1
        return sent

    def _for_intents(self, session: _Session, event: str, data: JSON) -> JSON:
        """Without MESSAGE_CONTENT, guild messages not from the bot nor mentioning it lose
        content, embeds, attachments and components (as Discord does)."""
        if (
            event not in ("MESSAGE_CREATE", "MESSAGE_UPDATE")
            or session.intents & INTENT_MESSAGE_CONTENT
        ):
            return data
        me = str(self.bot_user.id)
        if data.get("author", {}).get("id") == me or any(u["id"] == me for u in data["mentions"]):
            return data
        return data | {"content": "", "embeds": [], "attachments": [], "components": []}

    async def _session_dispatch(self, session: _Session, event: str, data: JSON) -> None:
        with self._lock:
            session.seq += 1
            payload = {"op": OP_DISPATCH, "t": event, "s": session.seq, "d": data}
            session.backlog.append(payload)
            conn = session.conn
        if conn is not None:
            await self._send(conn, payload)

    async def _send(self, conn: _Conn, payload: JSON) -> None:
        raw = json.dumps(payload).encode()
        with self._lock:
            shard = conn.session.shard if conn.session else None
            self._frames.append(Frame(conn.id, shard, "out", payload))
        try:
            async with conn.send_lock:
                if conn.compressor is None:
                    await conn.ws.send_str(raw.decode())
                else:
                    await conn.ws.send_bytes(conn.compressor.frame(raw))
        except (ConnectionResetError, RuntimeError):
            pass  # the client went away; a RESUME will replay dispatches from the backlog

    # ----------------------------------------------------------------- messages

    def _new_message(
        self,
        guild_id: int,
        channel_id: int,
        author: User,
        content: str,
        *,
        mentions: Sequence[User] = (),
        reference: JSON | int | None = None,
        extra: JSON | None = None,
    ) -> JSON:
        mid = self._ids.next()
        msg: JSON = {
            "id": str(mid),
            "type": 0,
            "channel_id": str(channel_id),
            "guild_id": str(guild_id),
            "author": author.to_json(),
            "member": member_json(author, guild_id, with_user=False),
            "content": content,
            "timestamp": iso(mid),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [u.to_json() for u in mentions],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "flags": 0,
        }
        if reference is not None:
            ref_id = reference if isinstance(reference, int) else int(reference["id"])
            msg["type"] = 19
            msg["message_reference"] = {
                "type": 0,
                "message_id": str(ref_id),
                "channel_id": str(channel_id),
                "guild_id": str(guild_id),
            }
            ref = self._messages.get(ref_id)
            msg["referenced_message"] = None if ref is None else _rest_form(ref)
        if extra:
            msg |= extra
        return msg

    def _store(self, msg: JSON) -> None:
        with self._lock:
            mid = int(msg["id"])
            self._messages[mid] = msg
            if not int(msg.get("flags") or 0) & MESSAGE_FLAG_EPHEMERAL:
                self._history.setdefault(int(msg["channel_id"]), []).append(mid)

    def _get(self, message: JSON | int) -> JSON:
        mid = message if isinstance(message, int) else int(message["id"])
        return self._messages[mid]

    def _edit(self, message: JSON | int, changes: JSON) -> JSON:
        with self._lock:
            msg = dict(self._get(message))
            msg |= changes
            if "components" in changes:
                msg["components"] = _numbered(changes["components"])
            msg["edited_timestamp"] = datetime.now(UTC).isoformat()
            self._messages[int(msg["id"])] = msg
            return msg

    def _unstore(self, message: JSON | int) -> JSON:
        with self._lock:
            msg = self._messages.pop(int(message if isinstance(message, int) else message["id"]))
            hist = self._history.get(int(msg["channel_id"]), [])
            if int(msg["id"]) in hist:
                hist.remove(int(msg["id"]))
            return msg

    def _bot_message(self, channel_id: int, body: JSON, *, extra: JSON | None = None) -> JSON:
        """A message the bot sends, from a create-message-like body."""
        channel = self.channel(channel_id)
        content = str(body.get("content") or "")
        msg = self._new_message(
            channel.guild_id,
            channel_id,
            self.bot_user,
            content,
            mentions=self._mentioned(content, body.get("allowed_mentions")),
            reference=_reference_id(body.get("message_reference")),
            extra={
                "embeds": body.get("embeds") or [],
                "components": _numbered(body.get("components")),
                "flags": int(body.get("flags") or 0),
                "tts": bool(body.get("tts", False)),
            }
            | (extra or {}),
        )
        if body.get("nonce") is not None:
            msg["nonce"] = body["nonce"]
        self._store(msg)
        with self._lock:
            self._bot_messages.append(int(msg["id"]))
        return msg

    def _mentioned(self, content: str, allowed: Any) -> list[User]:
        ids = [int(m) for m in re.findall(r"<@!?(\d+)>", content)]
        users = [self.users[i] for i in dict.fromkeys(ids) if i in self.users]
        if isinstance(allowed, dict):
            parse = allowed.get("parse") or []
            listed = {int(u) for u in allowed.get("users") or []}
            users = [u for u in users if "users" in parse or u.id in listed]
        return users

    async def _echo(self, event: str, msg: JSON) -> None:
        if self.echo_bot_messages and not int(msg.get("flags") or 0) & MESSAGE_FLAG_EPHEMERAL:
            await self._dispatch(int(msg["guild_id"]), event, msg)

    # ----------------------------------------------------------------- interactions

    def _interaction(
        self,
        kind: int,
        guild_id: int,
        channel_id: int,
        user: User,
        data: JSON,
        *,
        message: JSON | None = None,
    ) -> JSON:
        channel = self.channel(channel_id)
        iid = self._ids.next()
        payload: JSON = {
            "id": str(iid),
            "application_id": str(self.application_id),
            "type": kind,
            "data": data,
            "guild_id": str(guild_id),
            "guild": {"id": str(guild_id), "locale": "en-US", "features": []},
            "channel_id": str(channel_id),
            "channel": channel.to_json() | {"permissions": ALL_PERMISSIONS},
            "member": member_json(user, guild_id) | {"permissions": ALL_PERMISSIONS},
            "token": secrets.token_urlsafe(48),
            "version": 1,
            "app_permissions": ALL_PERMISSIONS,
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(guild_id)},
            "context": 0,
            "attachment_size_limit": 26_214_400,
        }
        if message is not None:
            payload["message"] = _rest_form(self._messages.get(int(message["id"]), message))

        async def go() -> JSON:
            with self._lock:
                self._interactions[iid] = payload
            await self._dispatch(guild_id, "INTERACTION_CREATE", payload)
            return payload

        return self._call(go)

    def _find_command(self, name: str, guild_id: int) -> JSON | None:
        with self._lock:
            for cmd in (*self._commands.get(guild_id, []), *self._commands.get(None, [])):
                if cmd["name"] == name:
                    return cmd
        return None

    def _by_token(self, token: str) -> JSON | None:
        with self._lock:
            for inter in self._interactions.values():
                if inter["token"] == token:
                    return inter
        return None

    # ----------------------------------------------------------------- REST internals

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        self.rest_in_flight += 1
        try:
            return await self._answer_rest(request)
        finally:
            self.rest_in_flight -= 1

    async def _answer_rest(self, request: web.Request) -> web.StreamResponse:
        body, files = await _read_body(request)
        path = request.path
        if path.startswith(API_PREFIX):
            path = path[len(API_PREFIX) :]
        failure = self._take_failure(request.method, path)
        if failure is not None:
            status, out, headers = failure
            self._record(request, path, body, files, status, "scripted")
            return web.json_response(out, status=status, headers=headers)
        for method, regex, handler, needs_auth in _ROUTES if path != request.path else ():
            if method != request.method:
                continue
            m = re.fullmatch(regex, path)
            if m is None:
                continue
            if needs_auth and request.headers.get("Authorization") != f"Bot {self.token}":
                status, out = 401, {"message": "401: Unauthorized", "code": 0}
            else:
                try:
                    status, out = await handler(self, request, body, *m.groups())
                except KeyError:
                    status, out = 404, {"message": "Unknown object", "code": 10003}
                except Exception as e:  # a bug in the fake: kept for the test to see
                    with self._lock:
                        self._errors.append(e)
                    status, out = 500, {"message": f"fake discord error: {e!r}", "code": 0}
            self._record(request, path, body, files, status, regex)
            if status == 204:
                return web.Response(status=204)
            return web.json_response(out, status=status)
        self._record(request, path, body, files, 404, None)
        return web.json_response({"message": "404: Not Found", "code": 0}, status=404)

    def _take_failure(self, method: str, path: str) -> tuple[int, JSON, dict[str, str]] | None:
        now = time.time()
        with self._lock:
            for f in list(self._failures):
                if f.method != method or not fnmatch.fnmatchcase(path, f.pattern):
                    continue
                if now < f.until:  # inside a rate-limit window
                    return (f.status, *f.answer(now))
                if f.times <= 0:
                    self._failures.remove(f)
                    continue
                f.times -= 1
                f.until = now + f.window
                return (f.status, *f.answer(now))
        return None

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
        )
        with self._lock:
            self._requests.append(rec)

    # --- handlers: (self, request, body, *path groups) -> (status, json)

    async def _h_gateway_bot(self, _r: web.Request, _b: Any) -> tuple[int, Any]:
        return 200, {
            "url": self.gateway_url,
            "shards": self.shard_count,
            "session_start_limit": {
                "total": 1000,
                "remaining": 999,
                "reset_after": 14_400_000,
                "max_concurrency": self.max_concurrency,
            },
        }

    async def _h_gateway(self, _r: web.Request, _b: Any) -> tuple[int, Any]:
        return 200, {"url": self.gateway_url}

    async def _h_me(self, _r: web.Request, _b: Any) -> tuple[int, Any]:
        me = self.bot_user.to_json()
        return 200, me | {
            "verified": True,
            "mfa_enabled": False,
            "locale": "en-US",
            "premium_type": 0,
            "email": None,
        }

    async def _h_application(self, _r: web.Request, _b: Any) -> tuple[int, Any]:
        return 200, {
            "id": str(self.application_id),
            "name": self.bot_user.username,
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "bot": self.bot_user.to_json(),
            "bot_public": False,
            "bot_require_code_grant": False,
            "verify_key": "00" * 32,
            "flags": 0,
            "owner": self.bot_user.to_json() | {"bot": False},
            "team": None,
            "approximate_guild_count": len(self.guilds),
            "approximate_user_install_count": 0,
            "redirect_uris": [],
            "interactions_endpoint_url": None,
            "tags": [],
            "integration_types_config": {},
        }

    async def _h_channel(self, _r: web.Request, _b: Any, cid: str) -> tuple[int, Any]:
        return 200, self.channel(int(cid)).to_json()

    async def _h_guild(self, _r: web.Request, _b: Any, gid: str) -> tuple[int, Any]:
        return 200, self.guilds[int(gid)].to_json(gateway=False)

    async def _h_create_message(self, _r: web.Request, body: Any, cid: str) -> tuple[int, Any]:
        msg = self._bot_message(int(cid), body or {})
        await self._echo("MESSAGE_CREATE", msg)
        return 200, _rest_form(msg)

    async def _h_get_message(self, _r: web.Request, _b: Any, cid: str, mid: str) -> tuple[int, Any]:
        with self._lock:
            msg = self._messages[int(mid)]
        if msg["channel_id"] != cid:
            raise KeyError(mid)
        return 200, _rest_form(msg)

    async def _h_edit_message(
        self, _r: web.Request, body: Any, cid: str, mid: str
    ) -> tuple[int, Any]:
        keys = ("content", "embeds", "components", "flags", "allowed_mentions")
        msg = self._edit(int(mid), {k: v for k, v in (body or {}).items() if k in keys})
        await self._echo("MESSAGE_UPDATE", msg)
        return 200, _rest_form(msg)

    async def _h_delete_message(
        self, _r: web.Request, _b: Any, cid: str, mid: str
    ) -> tuple[int, Any]:
        msg = self._unstore(int(mid))
        data = {"id": msg["id"], "channel_id": msg["channel_id"], "guild_id": msg["guild_id"]}
        if self.echo_bot_messages:
            await self._dispatch(int(msg["guild_id"]), "MESSAGE_DELETE", data)
        return 204, None

    async def _h_history(self, request: web.Request, _b: Any, cid: str) -> tuple[int, Any]:
        limit = max(1, min(100, int(request.query.get("limit", "50"))))
        with self._lock:
            ids = list(self._history[int(cid)])  # oldest first
            if "before" in request.query:
                before = int(request.query["before"])
                ids = [i for i in ids if i < before][-limit:]
            elif "after" in request.query:
                after = int(request.query["after"])
                ids = [i for i in ids if i > after][:limit]
            elif "around" in request.query:
                around = int(request.query["around"])
                older = [i for i in ids if i < around][-(limit // 2) :] if limit > 1 else []
                newer = [i for i in ids if i >= around][: limit - len(older)]
                ids = older + newer
            else:
                ids = ids[-limit:]
            return 200, [_rest_form(self._messages[i]) for i in reversed(ids)]  # newest first

    async def _h_typing(self, _r: web.Request, _b: Any, cid: str) -> tuple[int, Any]:
        self.channel(int(cid))
        with self._lock:
            self._typing.append(int(cid))
        return 204, None

    async def _h_reaction(self, _r: web.Request, _b: Any, *_groups: str) -> tuple[int, Any]:
        return 204, None

    async def _h_callback(
        self, request: web.Request, body: Any, iid: str, token: str
    ) -> tuple[int, Any]:
        with self._lock:
            inter = self._interactions.get(int(iid))
        if inter is None or inter["token"] != token:
            return 404, {"message": "Unknown interaction", "code": 10062}
        if token in self._original or any(r.token == token for r in self._responses):
            return 400, {"message": "Interaction has already been acknowledged.", "code": 40060}
        body = body or {}
        kind = int(body.get("type", 0))
        data = body.get("data") or {}
        files = request.get(_FILES, ())
        with self._lock:
            self._responses.append(InteractionResponse(int(iid), token, kind, data, files))
        channel_id = int(inter["channel_id"])
        meta = _interaction_metadata(inter)
        msg: JSON | None = None
        if kind == 4:
            msg = self._bot_message(channel_id, data, extra=meta)
            await self._echo("MESSAGE_CREATE", msg)
        elif kind == 5:
            flags = MESSAGE_FLAG_LOADING | (int(data.get("flags") or 0) & MESSAGE_FLAG_EPHEMERAL)
            msg = self._bot_message(channel_id, {"flags": flags}, extra=meta)
            await self._echo("MESSAGE_CREATE", msg)
        elif kind in (6, 7) and "message" in inter:
            msg = self._get(int(inter["message"]["id"]))
            if kind == 7:
                keys = ("content", "embeds", "components")
                msg = self._edit(msg, {k: v for k, v in data.items() if k in keys})
                await self._echo("MESSAGE_UPDATE", msg)
        if msg is not None:
            with self._lock:
                self._original[token] = int(msg["id"])
        if request.query.get("with_response", "").lower() != "true":
            return 204, None
        flags = int((msg or {}).get("flags") or 0)
        out: JSON = {
            "interaction": {
                "id": iid,
                "type": inter["type"],
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(flags & MESSAGE_FLAG_EPHEMERAL),
            }
        }
        if msg is not None:
            out["interaction"]["response_message_id"] = msg["id"]
        out["resource"] = {"type": kind}
        if msg is not None and kind in (4, 5, 7):
            out["resource"]["message"] = _rest_form(msg)
        return 200, out

    async def _h_webhook_message(
        self, request: web.Request, body: Any, app: str, token: str, which: str
    ) -> tuple[int, Any]:
        inter = self._by_token(token)
        if inter is None or app != str(self.application_id):
            return 404, {"message": "Unknown Webhook", "code": 10015}
        mid = self._original.get(token) if which == "@original" else int(which)
        if mid is None or mid not in self._messages:
            return 404, {"message": "Unknown Message", "code": 10008}
        if request.method == "GET":
            return 200, _rest_form(self._messages[mid])
        if request.method == "DELETE":
            msg = self._unstore(mid)
            if self.echo_bot_messages and not int(msg.get("flags") or 0) & MESSAGE_FLAG_EPHEMERAL:
                data = {
                    "id": msg["id"],
                    "channel_id": msg["channel_id"],
                    "guild_id": msg["guild_id"],
                }
                await self._dispatch(int(msg["guild_id"]), "MESSAGE_DELETE", data)
            return 204, None
        body = body or {}
        with self._lock:
            self._followups.append(Followup(token, "edit", which, body))
        keys = ("content", "embeds", "components", "allowed_mentions")
        changes = {k: v for k, v in body.items() if k in keys}
        old_flags = int(self._messages[mid].get("flags") or 0)
        changes["flags"] = old_flags & ~MESSAGE_FLAG_LOADING
        msg = self._edit(mid, changes)
        await self._echo("MESSAGE_UPDATE", msg)
        return 200, _rest_form(msg)

    async def _h_followup(
        self, _r: web.Request, body: Any, app: str, token: str
    ) -> tuple[int, Any]:
        inter = self._by_token(token)
        if inter is None or app != str(self.application_id):
            return 404, {"message": "Unknown Webhook", "code": 10015}
        body = body or {}
        with self._lock:
            self._followups.append(Followup(token, "create", None, body))
        extra = _interaction_metadata(inter)
        msg = self._bot_message(int(inter["channel_id"]), body, extra=extra)
        await self._echo("MESSAGE_CREATE", msg)
        return 200, _rest_form(msg)

    async def _h_put_commands(
        self, _r: web.Request, body: Any, app: str, gid: str | None = None
    ) -> tuple[int, Any]:
        guild_id = None if gid is None else int(gid)
        with self._lock:
            old = {c["name"]: c for c in self._commands.get(guild_id, [])}
            out = []
            for cmd in body or []:
                prev = old.get(cmd["name"])
                out.append(
                    {
                        "id": prev["id"] if prev else str(self._ids.next()),
                        "application_id": app,
                        "version": str(self._ids.next()),
                        "type": 1,
                        "description": "",
                        "options": [],
                        "default_member_permissions": None,
                        "nsfw": False,
                        "integration_types": [0],
                        "contexts": None,
                        "name_localizations": None,
                        "description_localizations": None,
                        "guild_id": gid,
                    }
                    | cmd
                )
            self._commands[guild_id] = out
        return 200, out

    async def _h_put_guild_commands(
        self, r: web.Request, body: Any, app: str, gid: str
    ) -> tuple[int, Any]:
        return await self._h_put_commands(r, body, app, gid)

    async def _h_get_commands(
        self, _r: web.Request, _b: Any, app: str, gid: str | None = None
    ) -> tuple[int, Any]:
        return 200, self.commands(None if gid is None else int(gid))

    async def _h_get_guild_commands(
        self, r: web.Request, b: Any, app: str, gid: str
    ) -> tuple[int, Any]:
        return await self._h_get_commands(r, b, app, gid)


_Handler = Callable[..., Awaitable[tuple[int, Any]]]
_FILES = web.RequestKey("fake_discord_files", tuple[str, ...])
_S = r"(\d+)"
_TOKEN = r"([^/]+)"
_WEBHOOK_MESSAGE = f"/webhooks/{_S}/{_TOKEN}/messages/(@original|\\d+)"
_REACTION = f"/channels/{_S}/messages/{_S}/reactions/{_TOKEN}/@me"
_ROUTES: list[tuple[str, str, _Handler, bool]] = [  # method, path regex, handler, needs bot auth
    ("GET", "/gateway/bot", FakeDiscord._h_gateway_bot, True),
    ("GET", "/gateway", FakeDiscord._h_gateway, False),
    ("GET", "/users/@me", FakeDiscord._h_me, True),
    ("GET", "/oauth2/applications/@me", FakeDiscord._h_application, True),
    ("GET", "/applications/@me", FakeDiscord._h_application, True),
    ("GET", f"/channels/{_S}", FakeDiscord._h_channel, True),
    ("GET", f"/guilds/{_S}", FakeDiscord._h_guild, True),
    ("POST", f"/channels/{_S}/messages", FakeDiscord._h_create_message, True),
    ("GET", f"/channels/{_S}/messages", FakeDiscord._h_history, True),
    ("GET", f"/channels/{_S}/messages/{_S}", FakeDiscord._h_get_message, True),
    ("PATCH", f"/channels/{_S}/messages/{_S}", FakeDiscord._h_edit_message, True),
    ("DELETE", f"/channels/{_S}/messages/{_S}", FakeDiscord._h_delete_message, True),
    ("POST", f"/channels/{_S}/typing", FakeDiscord._h_typing, True),
    ("PUT", _REACTION, FakeDiscord._h_reaction, True),
    ("DELETE", _REACTION, FakeDiscord._h_reaction, True),
    ("POST", f"/interactions/{_S}/{_TOKEN}/callback", FakeDiscord._h_callback, False),
    ("GET", _WEBHOOK_MESSAGE, FakeDiscord._h_webhook_message, False),
    ("PATCH", _WEBHOOK_MESSAGE, FakeDiscord._h_webhook_message, False),
    ("DELETE", _WEBHOOK_MESSAGE, FakeDiscord._h_webhook_message, False),
    ("POST", f"/webhooks/{_S}/{_TOKEN}", FakeDiscord._h_followup, False),
    ("PUT", f"/applications/{_S}/commands", FakeDiscord._h_put_commands, True),
    ("GET", f"/applications/{_S}/commands", FakeDiscord._h_get_commands, True),
    ("PUT", f"/applications/{_S}/guilds/{_S}/commands", FakeDiscord._h_put_guild_commands, True),
    ("GET", f"/applications/{_S}/guilds/{_S}/commands", FakeDiscord._h_get_guild_commands, True),
]


async def _read_body(request: web.Request) -> tuple[Any, tuple[str, ...]]:
    """JSON body, or multipart/form-data with payload_json (+ files, names kept)."""
    if not request.can_read_body:
        return None, ()
    if request.content_type.startswith("multipart/"):
        body: Any = None
        files: list[str] = []
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):  # nested multipart: not sent by hikari
                continue
            if part.name == "payload_json":
                body = json.loads(await part.read(decode=True))
            else:
                await part.read()
                files.append(part.filename or part.name or "")
        request[_FILES] = tuple(files)
        return body, tuple(files)
    raw = await request.read()
    if not raw:
        return None, ()
    try:
        return json.loads(raw), ()
    except ValueError:
        return raw.decode(errors="replace"), ()


def _rest_form(msg: JSON) -> JSON:
    """A stored message as REST returns it: no guild_id, no member."""
    return {k: v for k, v in msg.items() if k not in ("guild_id", "member")}


def _numbered(components: Any) -> list[JSON]:
    """Components as Discord returns them: every one (nested too) has an integer "id", numbered
    depth-first from 1 where the sender gave none (hikari requires it on buttons)."""
    out: list[JSON] = [dict(c) for c in components or []]
    counter = itertools.count(1)

    def walk(items: list[JSON]) -> None:
        for item in items:
            item.setdefault("id", next(counter))
            for key in ("components", "accessory"):
                child = item.get(key)
                if isinstance(child, list):
                    item[key] = kids = [dict(c) for c in child]
                    walk(kids)
                elif isinstance(child, dict):
                    item[key] = kid = dict(child)
                    walk([kid])

    walk(out)
    return out


def _reference_id(ref: Any) -> int | None:
    if isinstance(ref, dict) and ref.get("message_id") is not None:
        return int(ref["message_id"])
    return None


def _interaction_metadata(inter: JSON) -> JSON:
    user = inter["member"]["user"]
    return {
        "application_id": inter["application_id"],
        "webhook_id": inter["application_id"],
        "interaction_metadata": {
            "id": inter["id"],
            "type": inter["type"],
            "user": user,
            "authorizing_integration_owners": inter["authorizing_integration_owners"],
        },
    }


def _option_type(value: object) -> int:
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return 4
    if isinstance(value, float):
        return 10
    return 3


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
