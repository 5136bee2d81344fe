# The fake Discord's gateway: websocket sessions, dispatches, and what a test does to them.
#
# Test support (a part of FakeDiscord, see eva.testing.fake_discord). A connection gets
# HELLO, then IDENTIFY makes a session for one shard or RESUME takes an old one back; events
# go to the sessions that own their guild. Tests cut connections, send RECONNECT and read
# every frame that went either way.
# Invariants: a websocket that asks for `compress=zlib-stream` gets every payload compressed
# then flushed with Z_SYNC_FLUSH (ending in 00 00 ff ff), one that asks for `zstd-stream`
# (hikari does when a zstd module is there) gets each as a flushed zstd block: one stream
# per connection, under a per-connection lock so frames leave in compression order. Dispatch
# `s` numbers are per session and strictly increase; a session keeps its dispatches so
# RESUME replays those after the client's `seq`. A guild belongs to shard
# (guild_id >> 22) % shard_count of each identified session; only that session gets its
# events; an event for a session that is disconnected waits in its backlog for a RESUME (as
# on Discord), and one for a shard nobody identified is lost (`undelivered`). Without the
# MESSAGE_CONTENT intent, messages lose their content as on Discord. The compressors come
# from private or optional modules, so they are Any.
from __future__ import annotations

import asyncio
import importlib
import json
import secrets
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from eva.testing.fake_discord.state import DiscordState
from eva.testing.fake_discord.world import JSON, member_json, shard_of

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


class Gateway(DiscordState):
    """The gateway part of the fake: sessions, dispatches, dropped connections."""

    _frames: list[Frame]
    _ws_connects: list[tuple[str, dict[str, str]]]
    _undelivered: list[tuple[str, int]]
    _sessions: dict[str, _Session]
    _conns: dict[int, _Conn]
    _conn_ids: Iterator[int]

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

    # ----------------------------------------------------------------- inspection

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

    @property
    def undelivered(self) -> list[tuple[str, int]]:
        """(event, guild id) dispatched while no session had identified for the guild's shard:
        lost, as on Discord. (Events for a session that is only disconnected wait for RESUME.)"""
        with self._lock:
            return list(self._undelivered)

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

    # ----------------------------------------------------------------- internals

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
