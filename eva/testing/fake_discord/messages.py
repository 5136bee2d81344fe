# The fake Discord's messages: what users post, edit and delete, and what the bot sends.
#
# Test support (a part of FakeDiscord, see eva.testing.fake_discord). Messages are kept in
# their gateway form (with guild_id); REST answers them without guild_id and member, as
# Discord does. The bot's own messages are echoed as MESSAGE_CREATE (as Discord does;
# `echo_bot_messages=False` turns it off), ephemeral ones never.
# Invariants: a channel's history is its messages oldest first, ephemeral ones left out; an
# edit sets `edited_timestamp` and numbers the components Discord would number.
from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from eva.testing.fake_discord.gateway import Gateway
from eva.testing.fake_discord.world import (
    JSON,
    MESSAGE_FLAG_EPHEMERAL,
    User,
    _rest_form,
    iso,
    member_json,
)


class Posting(NamedTuple):
    """One message a user posts (see `FakeDiscord.post_messages`)."""

    guild_id: int
    channel_id: int
    author: User
    content: str
    mentions: Sequence[User] = ()
    referenced_message: JSON | None = None


class Messages(Gateway):
    """The messages part of the fake: users' posts and the bot's, by gateway and by REST."""

    _messages: dict[int, JSON]
    _history: dict[int, list[int]]
    _bot_messages: list[int]
    _typing: list[int]

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

    # ----------------------------------------------------------------- inspection

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

    # ----------------------------------------------------------------- internals

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
                "attachments": self._attachments(body.get("attachments")),
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

    def _attachments(self, sent: Any) -> list[JSON]:
        """The attachments of a message the bot sends, as Discord gives them back."""
        made = []
        for attachment in sent if isinstance(sent, list) else []:
            aid = self._ids.next()
            name = str(attachment.get("filename") or "file")
            url = f"{self.url}/attachments/{aid}/{name}"
            made.append({"id": str(aid), "filename": name, "url": url, "proxy_url": url,
                         "size": int(attachment.get("size") or 0)})
        return made

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
