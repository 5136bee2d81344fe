"""Replies go first: a second REST client on its own thread posts them, and background
work yields to them while they are under way."""

from __future__ import annotations

import hikari
import pytest
import trio

from eva.discord.reply_sender import open_reply_sender
from eva.live.urgency import Urgency
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


async def test_background_steps_wait_while_a_reply_is_under_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    urgency = Urgency(max_wait_s=10.0)
    steps: list[float] = []

    async def background() -> None:
        for _ in range(3):
            await urgency.yield_to_urgent()
            steps.append(trio.current_time())
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        with urgency.urgent():
            nursery.start_soon(background)
            await trio.sleep(4)  # the reply takes 4 s: no background step meanwhile
            assert steps == []
        await trio.lowlevel.checkpoint()
    assert steps == [4.0, 5.0, 6.0], "it went on the moment the reply was done"


async def test_a_long_urgent_stretch_never_starves_background_work(
    autojump_clock: trio.testing.MockClock,
) -> None:
    urgency = Urgency(max_wait_s=0.25)
    with urgency.urgent():
        started = trio.current_time()
        await urgency.yield_to_urgent()
        assert trio.current_time() - started == pytest.approx(0.25)
    started = trio.current_time()
    await urgency.yield_to_urgent()
    assert trio.current_time() == started, "no wait once nothing is urgent"
    assert urgency.waits == 1
