# The fake Discord's interactions: slash commands, buttons, and the bot's answers to them.
#
# Test support (a part of FakeDiscord, see eva.testing.fake_discord). A test runs a command
# or presses a button (INTERACTION_CREATE); the bot answers through the callback route and
# the interaction's webhook (followups, edits of the original response), all recorded.
# Registered commands are kept per guild (None: global) as Discord returns them.
# Invariants: an interaction is acknowledged once (a second callback is refused with 40060);
# a deferred response is a loading message until its first edit; ephemeral answers are
# never echoed on the gateway.
from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from eva.testing.fake_discord.messages import Messages
from eva.testing.fake_discord.state import _FILES
from eva.testing.fake_discord.world import (
    ALL_PERMISSIONS,
    JSON,
    MESSAGE_FLAG_EPHEMERAL,
    MESSAGE_FLAG_LOADING,
    User,
    _rest_form,
    member_json,
)


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


class Interactions(Messages):
    """The interactions part of the fake: commands, buttons, callbacks and followups."""

    _interactions: dict[int, JSON]
    _responses: list[InteractionResponse]
    _original: dict[str, int]
    _followups: list[Followup]
    _commands: dict[int | None, list[JSON]]

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

    # ----------------------------------------------------------------- inspection

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

    # ----------------------------------------------------------------- internals

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
            "attachment_size_limit": self.upload_limit,
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

    # --- REST handlers: (self, request, body, *path groups) -> (status, json)

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
        if "attachments" in body:
            changes["attachments"] = self._attachments(body["attachments"])
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
