# A synthetic year of chat among friends, as a DiscordChatExporter JSON export.
#
# For demos and tests: it gives the memory a realistic channel to build,
# compress, publish and search without shipping anyone's real messages.
# It knows nothing of the store or the memory; it only writes export bytes.
# Invariants: the output depends only on the arguments (one `random.Random`,
# no clock, no global random state), holds exactly `messages` messages in time
# order with strictly increasing times and unique snowflake-like ids, and
# parses with `eva.core.dce.parse_export`. The words of `DEMO_QUERY` occur in
# only a few scripted messages, never in the filler.
from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

from eva.demo.friends_text import (
    BOT_TEMPLATES,
    CHAT_TEMPLATES,
    LINK_TEMPLATES,
    PHOTO_TEMPLATES,
    RAMBLE_SENTENCES,
    REPLY_TEMPLATES,
    SCENES,
    WORDS,
)

GUILD_ID = "1130000000000000001"
GUILD_NAME = "The Flat Upstairs"
CHANNEL_ID = "1130000000000000002"
CHANNEL_NAME = "friends"
DEMO_QUERY = "durian cheesecake"

FIRST_DAY = date(2025, 1, 1)
DAYS = 365
_DISCORD_EPOCH_MS = 1_420_070_400_000
_DAY_MS = 86_400_000
_LONG_BYTES = 560


@dataclass(frozen=True, slots=True)
class Friend:
    """One member of the channel, with the UTC offset their client writes times in."""

    key: str
    user_id: str
    username: str
    nickname: str
    offset_min: int
    is_bot: bool = False


FRIENDS: tuple[Friend, ...] = (
    Friend("maya", "1130000000000000101", "mayalind", "Maya", 60),
    Friend("jonas", "1130000000000000102", "jonas.b", "Jonas", 60),
    Friend("zoe", "1130000000000000103", "zoe_h", "Zoë", 0),
    Friend("priya", "1130000000000000104", "priya.r", "Priya", 330),
    Friend("dev", "1130000000000000105", "devmakes", "Dev", -300),
    Friend("kenji", "1130000000000000106", "kenji_t", "Kenji", 540),
    Friend("biscuit", "1130000000000000199", "Biscuit", "Biscuit", 0, is_bot=True),
)
_BY_KEY = {friend.key: friend for friend in FRIENDS}
_PEOPLE = tuple(friend for friend in FRIENDS if not friend.is_bot)
_BOT = _BY_KEY["biscuit"]


@dataclass(slots=True)
class _Draft:
    """A message before ids are known; `content` None means filler, written later."""

    at_ms: int
    author: Friend
    content: str | None = None
    attachments: tuple[str, ...] = ()
    reply_to: _Draft | None = None
    edited_ms: int | None = None
    wants_reply: bool = False


class _Fill(dict[str, str]):
    """`str.format_map` fillers: each `{word}` is a fresh random pick from WORDS."""

    def __init__(self, rng: random.Random, name: str) -> None:
        super().__init__(name=name)
        self._rng = rng

    def __missing__(self, key: str) -> str:
        return self._rng.choice(WORDS[key])


def friends_export(messages: int = 4000, seed: int = 7) -> bytes:
    """A year (2025) of chat among six friends and a bot, as DCE JSON bytes.

    Exactly `messages` messages; the same arguments always give the same bytes.
    Scripted scenes (a trip, a birthday, a board-game project, running jokes)
    are kept while they fit in half of `messages`; the rest is filler chat.
    """
    if messages < 0:
        raise ValueError("messages must be >= 0")
    rng = random.Random(seed)
    drafts = _scene_drafts(rng, messages // 2)
    drafts += _filler_drafts(rng, messages - len(drafts))
    drafts.sort(key=lambda draft: draft.at_ms)
    _space_out(drafts)
    _write_filler(rng, drafts)
    return _encode(drafts)


# -- timeline ----------------------------------------------------------------


def _day_ms(day: int) -> int:
    start = datetime.combine(FIRST_DAY, datetime.min.time(), UTC) + timedelta(days=day)
    return int(start.timestamp() * 1000)


def _scene_drafts(rng: random.Random, budget: int) -> list[_Draft]:
    """The scripted scenes that fit in `budget` messages, each a quick exchange."""
    drafts: list[_Draft] = []
    for month_day, lines in SCENES:
        if len(drafts) + len(lines) > budget:
            continue
        day = (date.fromisoformat(f"2025-{month_day}") - FIRST_DAY).days
        at = _day_ms(day) + rng.randint(9 * 60, 20 * 60) * 60_000
        previous: _Draft | None = None
        for author, text, *files in lines:
            at += rng.randint(25, 240) * 1000
            reply = text.startswith("^")
            draft = _Draft(
                at_ms=at,
                author=_BY_KEY[author],
                content=text.removeprefix("^"),
                attachments=tuple(files),
                reply_to=previous if reply else None,
            )
            drafts.append(draft)
            previous = draft
    return drafts


def _day_weights(rng: random.Random) -> list[float]:
    """How busy each day is: some quiet days, some bursts, busier weekends."""
    weights = []
    for day in range(DAYS):
        roll = rng.random()
        if roll < 0.12:
            weight = 0.0
        elif roll < 0.2:
            weight = rng.uniform(3.0, 6.0)
        else:
            weight = rng.lognormvariate(0.0, 0.5)
        if (FIRST_DAY + timedelta(days=day)).weekday() >= 5:
            weight *= 1.3
        weights.append(weight)
    return weights


def _share_out(total: int, weights: Sequence[float]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders first)."""
    whole = sum(weights) or 1.0
    exact = [total * weight / whole for weight in weights]
    counts = [int(share) for share in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _filler_drafts(rng: random.Random, total: int) -> list[_Draft]:
    """Filler messages spread over the year in sessions; their text comes later.

    A day's sessions are conversations that follow one another, at least ten
    minutes apart; a burst day has seconds between messages, a calm one minutes.
    """
    weights = _day_weights(rng)
    drafts: list[_Draft] = []
    for day, count in enumerate(_share_out(total, weights)):
        if count == 0:
            continue
        burst = weights[day] >= 3.0
        sessions = 1 + count // rng.randint(10, 20)
        shares = _share_out(count, [rng.random() + 0.2 for _ in range(sessions)])
        if (FIRST_DAY + timedelta(days=day)).weekday() == 0:
            drafts.append(_Draft(at_ms=_day_ms(day) + 8 * 3_600_000, author=_BOT))
            shares[shares.index(max(shares))] -= 1
        at = _day_ms(day)
        for share in shares:
            at = max(at + 600_000, _day_ms(day) + rng.randint(6 * 60, 22 * 60) * 60_000)
            people = rng.sample(_PEOPLE, rng.randint(2, 5))
            author = rng.choice(people)
            for _ in range(share):
                at += int(rng.expovariate(1 / (20 if burst else 150)) * 1000) + 2000
                if rng.random() < 0.75:
                    author = rng.choice([p for p in people if p is not author])
                drafts.append(_Draft(at_ms=at, author=author))
    return drafts


def _space_out(drafts: list[_Draft]) -> None:
    """Make times strictly increasing (a message at least 1 s after the one before)."""
    last = 0
    for draft in drafts:
        draft.at_ms = max(draft.at_ms, last + 1000)
        last = draft.at_ms


# -- text ----------------------------------------------------------------------


def _write_filler(rng: random.Random, drafts: list[_Draft]) -> None:
    """Text, replies, attachments and edits for the filler, in time order."""
    for number, draft in enumerate(drafts):
        if draft.content is not None:
            continue
        if draft.author.is_bot:
            draft.content = rng.choice(BOT_TEMPLATES).format_map(_Fill(rng, ""))
            continue
        roll = rng.random()
        if number and roll < 0.09:
            target = drafts[rng.randint(max(0, number - 6), number - 1)]
            draft.reply_to = target
            draft.content = _fill(rng, REPLY_TEMPLATES, target.author.nickname)
        elif roll < 0.14:
            draft.content = _fill(rng, PHOTO_TEMPLATES, _other(rng, draft.author))
            draft.attachments = _photos(rng, draft.at_ms)
        elif roll < 0.18:
            draft.content = _fill(rng, LINK_TEMPLATES, _other(rng, draft.author))
        elif roll < 0.187:
            draft.content = _ramble(rng, draft.author)
        else:
            draft.content = _fill(rng, CHAT_TEMPLATES, _other(rng, draft.author))
        if rng.random() < 0.02:
            draft.edited_ms = draft.at_ms + rng.randint(15, 900) * 1000
            draft.content += rng.choice(WORDS["edit"])


def _fill(rng: random.Random, templates: Sequence[str], name: str) -> str:
    return rng.choice(templates).format_map(_Fill(rng, name))


def _other(rng: random.Random, author: Friend) -> str:
    return rng.choice([p.nickname for p in _PEOPLE if p is not author])


def _photos(rng: random.Random, at_ms: int) -> tuple[str, ...]:
    stamp = datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y%m%d_%H%M%S")
    names = [
        f"IMG_{rng.randint(1000, 9999)}.jpg",
        f"PXL_{stamp}.jpg",
        f"Screenshot_{stamp[:8]}.png",
        f"gerald_day{rng.randint(2, 300)}.jpg",
        "reaction.gif",
    ]
    return tuple(rng.sample(names, rng.choice((1, 1, 1, 2, 3))))


def _ramble(rng: random.Random, author: Friend) -> str:
    """A long message, well over the line limit once rendered."""
    sentences: list[str] = []
    fill = _Fill(rng, _other(rng, author))
    while len(" ".join(sentences).encode()) < _LONG_BYTES:
        sentences.append(rng.choice(RAMBLE_SENTENCES).format_map(fill))
    return " ".join(sentences)


# -- export --------------------------------------------------------------------


def _encode(drafts: list[_Draft]) -> bytes:
    ids = {id(draft): _snowflake(draft.at_ms, n) for n, draft in enumerate(drafts)}
    export = {
        "guild": {"id": GUILD_ID, "name": GUILD_NAME, "iconUrl": None},
        "channel": {
            "id": CHANNEL_ID,
            "type": "GuildTextChat",
            "categoryId": None,
            "category": "Text Channels",
            "name": CHANNEL_NAME,
            "topic": "plans, photos, Gerald updates",
        },
        "dateRange": {"after": None, "before": None},
        "exportedAt": _stamp(_day_ms(DAYS) + 3_600_000, 0),
        "messages": [_message(draft, ids) for draft in drafts],
        "messageCount": len(drafts),
    }
    return json.dumps(export, ensure_ascii=False, indent=1).encode("utf-8")


def _snowflake(at_ms: int, counter: int) -> str:
    return str(((at_ms - _DISCORD_EPOCH_MS) << 22) + counter % 4096)


def _stamp(at_ms: int, offset_min: int) -> str:
    zone = timezone(timedelta(minutes=offset_min))
    return datetime.fromtimestamp(at_ms / 1000, zone).isoformat(timespec="milliseconds")


def _message(draft: _Draft, ids: dict[int, str]) -> dict[str, Any]:
    author = draft.author
    message_id = ids[id(draft)]
    reply = draft.reply_to
    return {
        "id": message_id,
        "type": "Default" if reply is None else "Reply",
        "timestamp": _stamp(draft.at_ms, author.offset_min),
        "timestampEdited": (
            None if draft.edited_ms is None else _stamp(draft.edited_ms, author.offset_min)
        ),
        "callEndedTimestamp": None,
        "isPinned": False,
        "content": draft.content or "",
        "author": {
            "id": author.user_id,
            "name": author.username,
            "discriminator": "0000",
            "nickname": author.nickname,
            "color": None,
            "isBot": author.is_bot,
            "roles": [],
            "avatarUrl": None,
        },
        "attachments": [
            {
                "id": str(int(message_id) + 1 + n),
                "url": f"https://cdn.discordapp.com/attachments/{CHANNEL_ID}/{message_id}/{name}",
                "fileName": name,
                "fileSizeBytes": 40_000 + (int(message_id) >> 22) % 3_000_000,
            }
            for n, name in enumerate(draft.attachments)
        ],
        "embeds": [],
        "stickers": [],
        "reactions": [],
        "mentions": [],
        "inlineEmojis": [],
        **(
            {}
            if reply is None
            else {
                "reference": {
                    "messageId": ids[id(reply)],
                    "channelId": CHANNEL_ID,
                    "guildId": GUILD_ID,
                }
            }
        ),
    }
