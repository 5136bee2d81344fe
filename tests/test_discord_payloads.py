# MESSAGE_CREATE payloads read without hikari's models give the same Post as through them.
from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import hikari
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eva.discord.mapping import display_name
from eva.discord.messages import CHAT_TYPES, post_from
from eva.discord.messages import asks_eva as message_asks_eva
from eva.discord.payloads import CHAT_TYPE_CODES, PayloadError, asks_eva, chat_post

EVA = 1_100_000_000_000_000_001
EVA_NAME = "Eva"
TOKEN = base64.b64encode(str(EVA).encode()).decode().rstrip("=") + ".stamp.secret"


@pytest.fixture(scope="module")
def gateway() -> hikari.GatewayBot:
    return hikari.GatewayBot(TOKEN, banner=None, logs=None, suppress_optimization_warning=True)


def through_hikari(gateway: hikari.GatewayBot, payload: dict[str, Any]) -> tuple[Any, bool]:
    """What the bot made of a payload through hikari's GuildMessageCreateEvent."""
    event = gateway.event_factory.deserialize_message_create_event(None, payload)  # type: ignore[arg-type]
    if not isinstance(event, hikari.GuildMessageCreateEvent):
        return None, False
    message = event.message
    if message.type not in CHAT_TYPES:
        return None, False
    nickname = event.member.nickname if event.member is not None else None
    author = message.author
    name = display_name(nickname, author.global_name, author.username)
    return post_from(message, EVA, EVA_NAME, name), message_asks_eva(EVA, message)


snowflakes = st.integers(min_value=1 << 22, max_value=(1 << 63) - 1)
names = st.text(min_size=0, max_size=12)
some_names = st.one_of(st.none(), names)


@st.composite
def users(draw: st.DrawFn, user_id: int | None = None) -> dict[str, Any]:
    user: dict[str, Any] = {
        "id": str(user_id if user_id is not None else draw(snowflakes)),
        "username": draw(names.filter(bool)),
        "global_name": draw(some_names),
        "discriminator": "0",
        "avatar": None,
    }
    bot = draw(st.sampled_from([None, False, True]))
    if bot is not None:
        user["bot"] = bot
    return user


@st.composite
def moments(draw: st.DrawFn) -> str:
    when = draw(st.datetimes(min_value=datetime(2015, 1, 1), max_value=datetime(2040, 1, 1)))
    offset = draw(st.sampled_from([0, 60, -300, 330, 765]))
    return when.replace(tzinfo=timezone(timedelta(minutes=offset))).isoformat(
        timespec="microseconds"
    )


@st.composite
def messages(draw: st.DrawFn, nested: bool = True) -> dict[str, Any]:
    author = draw(st.one_of(users(), users(EVA)))
    mentioned = draw(
        st.lists(st.one_of(users(), users(EVA)), max_size=3, unique_by=lambda u: u["id"])
    )
    words = [draw(names), *(f"<@{u['id']}>" for u in mentioned), draw(names)]
    if draw(st.booleans()):
        words.append(f"<@!{EVA}>")
    payload: dict[str, Any] = {
        "id": str(draw(snowflakes)),
        "type": draw(st.sampled_from([*sorted(CHAT_TYPE_CODES), 6, 7, 18])),
        "channel_id": "2200000000000000002",
        "author": author,
        "content": " ".join(draw(st.permutations(words))),
        "timestamp": draw(moments()),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentioned,
        "mention_roles": [],
        "attachments": [
            {
                "id": str(draw(snowflakes)),
                "filename": name,
                "size": 1,
                "url": "https://x/a",
                "proxy_url": "https://x/a",
            }
            for name in draw(st.lists(names.filter(bool), max_size=2))
        ],
        "embeds": [],
        "pinned": False,
        "flags": 0,
    }
    if draw(st.booleans()):
        payload["guild_id"] = "3300000000000000003"
        if draw(st.booleans()):
            payload["member"] = {
                "nick": draw(some_names),
                "roles": [],
                "joined_at": "2020-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
            }
    if nested and draw(st.booleans()):
        target = draw(messages(nested=False))
        payload["message_reference"] = {
            "type": 0,
            "message_id": target["id"],
            "channel_id": payload["channel_id"],
        }
        if draw(st.booleans()):
            payload["referenced_message"] = target
    return payload


@settings(max_examples=300, deadline=None)
@given(messages())
def test_a_payload_reads_as_hikari_reads_it(
    gateway: hikari.GatewayBot, payload: dict[str, Any]
) -> None:
    expected, expected_asks = through_hikari(gateway, payload)
    post = chat_post(payload, EVA, EVA_NAME)
    assert post == expected
    if post is not None:
        assert asks_eva(payload, EVA) == expected_asks


def test_a_mention_of_eva_by_a_person_asks_her_and_names_are_written_out() -> None:
    payload = {
        "id": "4400000000000000004",
        "type": 0,
        "guild_id": "3",
        "channel_id": "2",
        "author": {"id": "7", "username": "kenji", "global_name": "Kenji"},
        "member": {"nick": "Ken"},
        "content": f"<@{EVA}> what did <@8> bring?",
        "timestamp": "2024-05-01T12:30:15.250000+02:00",
        "mentions": [{"id": str(EVA), "username": "eva"}, {"id": "8", "username": "maya"}],
        "attachments": [{"filename": "cake.jpg"}],
    }
    post = chat_post(payload, EVA, EVA_NAME)
    assert post is not None
    assert post.author_name == "Ken"
    assert post.content == "@eva what did @maya bring?"
    assert post.at_ms == round(
        datetime(2024, 5, 1, 10, 30, 15, 250_000, tzinfo=UTC).timestamp() * 1000
    )
    assert post.attachments == ("cake.jpg",)
    assert asks_eva(payload, EVA)
    assert not asks_eva({**payload, "author": {**payload["author"], "bot": True}}, EVA)


PLAIN: dict[str, Any] = {
    "id": "5",
    "type": 0,
    "guild_id": "3",
    "channel_id": "2",
    "author": {"id": "7", "username": "kenji"},
    "content": "hi",
    "timestamp": "2024-05-01T12:30:15+00:00",
}
"""A guild message with just the fields Eva reads."""


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"author": None}, "malformed"),
        ({"timestamp": "yesterday"}, "malformed"),
        ({"id": "x"}, "malformed"),
        ({"attachments": [{}]}, "'filename'"),
    ],
)
def test_a_broken_payload_is_named_in_the_error(change: dict[str, Any], what: str) -> None:
    payload = PLAIN | change
    with pytest.raises(PayloadError, match=what):
        chat_post(payload, EVA, EVA_NAME)


def test_a_payload_without_an_author_is_named() -> None:
    payload = {"id": "5", "type": 0, "guild_id": "3", "channel_id": "2", "content": "hi"}
    with pytest.raises(PayloadError, match="has no 'author'"):
        chat_post(payload, EVA, EVA_NAME)


def test_chat_is_plain_messages_replies_and_commands() -> None:
    assert {
        hikari.MessageType.DEFAULT,
        hikari.MessageType.REPLY,
        hikari.MessageType.CHAT_INPUT,
        hikari.MessageType.CONTEXT_MENU_COMMAND,
    } == CHAT_TYPES


def test_a_mention_without_an_id_is_named_when_asking() -> None:
    payload = PLAIN | {"mentions": [{"username": "maya"}]}
    with pytest.raises(PayloadError, match="has no 'id'"):
        asks_eva(payload, EVA)
