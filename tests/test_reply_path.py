"""Replies go first: a second REST client on its own thread posts them."""

from __future__ import annotations

import hikari
import pytest

from eva.discord.reply_sender import open_reply_sender
from eva.testing.fake_discord import FakeDiscord


async def test_the_reply_sender_posts_through_discord_rest_and_reports_its_errors() -> None:
    fake = FakeDiscord()
    guild = fake.add_guild("home", channels=["general"])
    channel = guild.channels[0].id
    with fake.serve():
        async with open_reply_sender(fake.token, fake.rest_url) as sender:
            sent = await sender.send(lambda rest: rest.create_message(channel, "hello from Eva"))
            with pytest.raises(hikari.NotFoundError):
                await sender.send(lambda rest: rest.create_message(424242, "nowhere"))
    assert [m["content"] for m in fake.bot_messages(channel)] == ["hello from Eva"]
    assert int(sent.id) == int(fake.bot_messages(channel)[0]["id"])


async def test_the_reply_sender_stops_with_its_block() -> None:
    fake = FakeDiscord()
    with fake.serve():
        async with open_reply_sender(fake.token, fake.rest_url) as sender:
            pass
        with pytest.raises(RuntimeError):
            await sender.send(lambda rest: rest.fetch_my_user())
