# The fake Discord's REST API: its routes, their answers, and the failures a test scripts.
#
# Test support (a part of FakeDiscord, see eva.testing.fake_discord). Every request under
# /api/v10 is matched against a table of routes and recorded with its answer; a test may
# script failures (`fail`) or Discord's rate limits (`rate_limit`) for a route pattern.
# Invariants: a scripted failure answers before any route; a rate-limit window answers 429
# with the time left until it ends; routes that need the bot's token answer 401 without it;
# an unknown route is 404 and counted in `unknown_requests`; an error in a handler is the
# fake's own bug, answered 500 and kept for the test in `errors`.
from __future__ import annotations

import fnmatch
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

from eva.testing.fake_discord.interactions import Interactions
from eva.testing.fake_discord.state import _FILE_CONTENTS, _FILES
from eva.testing.fake_discord.world import API_PREFIX, JSON, _rest_form


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


class Rest(Interactions):
    """The REST part of the fake: routing, scripted failures and the plain routes."""

    _failures: list[_Failure]

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

    # ----------------------------------------------------------------- internals

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        self.rest_in_flight += 1
        try:
            return await self._answer_rest(request)
        finally:
            self.rest_in_flight -= 1

    async def _answer_rest(self, request: web.Request) -> web.StreamResponse:
        body, files, contents = await _read_body(request)
        largest = max(map(len, contents), default=0)
        path = request.path
        if path.startswith(API_PREFIX):
            path = path[len(API_PREFIX) :]
        failure = self._take_failure(request.method, path)
        if failure is None and largest > self.upload_limit:  # as Discord refuses it
            failure = 413, {"message": "Request entity too large", "code": 40005}, {}
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


_Handler = Callable[..., Awaitable[tuple[int, Any]]]
_S = r"(\d+)"
_TOKEN = r"([^/]+)"
_WEBHOOK_MESSAGE = f"/webhooks/{_S}/{_TOKEN}/messages/(@original|\\d+)"
_REACTION = f"/channels/{_S}/messages/{_S}/reactions/{_TOKEN}/@me"
_ROUTES: list[tuple[str, str, _Handler, bool]] = [  # method, path regex, handler, needs bot auth
    ("GET", "/gateway/bot", Rest._h_gateway_bot, True),
    ("GET", "/gateway", Rest._h_gateway, False),
    ("GET", "/users/@me", Rest._h_me, True),
    ("GET", "/oauth2/applications/@me", Rest._h_application, True),
    ("GET", "/applications/@me", Rest._h_application, True),
    ("GET", f"/channels/{_S}", Rest._h_channel, True),
    ("GET", f"/guilds/{_S}", Rest._h_guild, True),
    ("POST", f"/channels/{_S}/messages", Rest._h_create_message, True),
    ("GET", f"/channels/{_S}/messages", Rest._h_history, True),
    ("GET", f"/channels/{_S}/messages/{_S}", Rest._h_get_message, True),
    ("PATCH", f"/channels/{_S}/messages/{_S}", Rest._h_edit_message, True),
    ("DELETE", f"/channels/{_S}/messages/{_S}", Rest._h_delete_message, True),
    ("POST", f"/channels/{_S}/typing", Rest._h_typing, True),
    ("PUT", _REACTION, Rest._h_reaction, True),
    ("DELETE", _REACTION, Rest._h_reaction, True),
    ("POST", f"/interactions/{_S}/{_TOKEN}/callback", Rest._h_callback, False),
    ("GET", _WEBHOOK_MESSAGE, Rest._h_webhook_message, False),
    ("PATCH", _WEBHOOK_MESSAGE, Rest._h_webhook_message, False),
    ("DELETE", _WEBHOOK_MESSAGE, Rest._h_webhook_message, False),
    ("POST", f"/webhooks/{_S}/{_TOKEN}", Rest._h_followup, False),
    ("PUT", f"/applications/{_S}/commands", Rest._h_put_commands, True),
    ("GET", f"/applications/{_S}/commands", Rest._h_get_commands, True),
    ("PUT", f"/applications/{_S}/guilds/{_S}/commands", Rest._h_put_guild_commands, True),
    ("GET", f"/applications/{_S}/guilds/{_S}/commands", Rest._h_get_guild_commands, True),
]


async def _read_body(request: web.Request) -> tuple[Any, tuple[str, ...], tuple[bytes, ...]]:
    """JSON body, or multipart/form-data with payload_json (+ files, names kept; each
    attachment the payload lists gets the `size` of its file, as Discord measures it),
    and the files' contents."""
    if not request.can_read_body:
        return None, (), ()
    if request.content_type.startswith("multipart/"):
        body: Any = None
        files: list[str] = []
        contents: list[bytes] = []
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):  # nested multipart: not sent by hikari
                continue
            if part.name == "payload_json":
                body = json.loads(await part.read(decode=True))
            else:
                contents.append(bytes(await part.read()))
                files.append(part.filename or part.name or "")
        request[_FILES] = tuple(files)
        request[_FILE_CONTENTS] = tuple(contents)
        if isinstance(body, dict) and isinstance(body.get("attachments"), list):
            for attachment, content in zip(body["attachments"], contents, strict=False):
                if isinstance(attachment, dict):
                    attachment["size"] = len(content)
        return body, tuple(files), tuple(contents)
    raw = await request.read()
    if not raw:
        return None, (), ()
    try:
        return json.loads(raw), (), ()
    except ValueError:
        return raw.decode(errors="replace"), (), ()
