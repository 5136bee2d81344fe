# The world a fake Discord holds: users, guilds, channels, their snowflakes, and their JSON.
#
# Test support, no IO: values and the payloads Discord would send for them. Payloads are
# minimal but carry every field hikari 2.x reads; permissions are only sketched (every role
# has them all). Typing: payloads are JSON = dict[str, Any] (their shape is Discord's,
# checked by hikari itself).
# Invariants: snowflakes are unique and increase with the clock; a guild's id may be chosen
# to land on a shard, which is (guild_id >> 22) % shard_count, as Discord computes it.
from __future__ import annotations

import base64
import itertools
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
ALL_PERMISSIONS = str((1 << 50) - 1)
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


def _rest_form(msg: JSON) -> JSON:
    """A stored message as REST returns it: no guild_id, no member."""
    return {k: v for k, v in msg.items() if k not in ("guild_id", "member")}
