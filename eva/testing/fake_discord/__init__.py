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
#
# Its parts, each a layer of `FakeDiscord`: `world` (users, guilds, channels and their JSON),
# `state` (what every part shares: the lock, the loop, the REST requests recorded), `gateway`
# (sessions and dispatches), `messages` (posts, edits, deletions, the bot's messages),
# `interactions` (slash commands, buttons, callbacks, followups), `rest` (routes and scripted
# failures) and `server` (the whole, served in its own thread). This module names what tests use.
# Invariants: the parts' state is mutated under one lock; see each part for its own.
from __future__ import annotations

from eva.testing.fake_discord.gateway import (
    INTENT_GUILD_MESSAGES,
    INTENT_GUILDS,
    INTENT_MESSAGE_CONTENT,
    OP_DISPATCH,
    OP_HEARTBEAT,
    OP_HEARTBEAT_ACK,
    OP_HELLO,
    OP_IDENTIFY,
    OP_INVALID_SESSION,
    OP_PRESENCE,
    OP_RECONNECT,
    OP_REQUEST_MEMBERS,
    OP_RESUME,
    OP_VOICE,
    Frame,
    GatewayCompressor,
    zstd_module,
)
from eva.testing.fake_discord.interactions import Followup, InteractionResponse
from eva.testing.fake_discord.messages import Posting
from eva.testing.fake_discord.server import FakeDiscord, wait_until
from eva.testing.fake_discord.state import Request
from eva.testing.fake_discord.world import (
    ALL_PERMISSIONS,
    API_PREFIX,
    DISCORD_EPOCH_MS,
    JSON,
    MESSAGE_FLAG_EPHEMERAL,
    MESSAGE_FLAG_LOADING,
    Channel,
    Guild,
    User,
    bot_token,
    iso,
    member_json,
    shard_of,
    snowflake_time_ms,
)

__all__ = [
    "ALL_PERMISSIONS",
    "API_PREFIX",
    "DISCORD_EPOCH_MS",
    "INTENT_GUILDS",
    "INTENT_GUILD_MESSAGES",
    "INTENT_MESSAGE_CONTENT",
    "JSON",
    "MESSAGE_FLAG_EPHEMERAL",
    "MESSAGE_FLAG_LOADING",
    "OP_DISPATCH",
    "OP_HEARTBEAT",
    "OP_HEARTBEAT_ACK",
    "OP_HELLO",
    "OP_IDENTIFY",
    "OP_INVALID_SESSION",
    "OP_PRESENCE",
    "OP_RECONNECT",
    "OP_REQUEST_MEMBERS",
    "OP_RESUME",
    "OP_VOICE",
    "Channel",
    "FakeDiscord",
    "Followup",
    "Frame",
    "GatewayCompressor",
    "Guild",
    "InteractionResponse",
    "Posting",
    "Request",
    "User",
    "bot_token",
    "iso",
    "member_json",
    "shard_of",
    "snowflake_time_ms",
    "wait_until",
    "zstd_module",
]
