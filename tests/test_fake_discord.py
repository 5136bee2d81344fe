# The fake Discord against the real hikari GatewayBot, under plain asyncio (asyncio.run).
#
# Proves the fake speaks enough Discord for hikari: READY + GUILD_CREATE fill the cache, users'
# messages and interactions arrive as hikari events, the bot's REST calls are recorded, a dropped
# connection is resumed, shards see only their guilds, a scripted 429 is retried. The bot will
# later run under trio-asyncio; here only the fake is under test. Every wait has a timeout.
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import hikari
import pytest
import trio
import trio_asyncio  # type: ignore[import-untyped]

from eva.testing.fake_discord import (
    OP_HEARTBEAT,
    OP_HEARTBEAT_ACK,
    OP_IDENTIFY,
    OP_RESUME,
    FakeDiscord,
    GatewayCompressor,
    Guild,
    Posting,
    User,
    shard_of,
    wait_until,
    zstd_module,
)

E = TypeVar("E", bound=hikari.Event)
INTENTS = hikari.Intents.GUILDS | hikari.Intents.GUILD_MESSAGES | hikari.Intents.MESSAGE_CONTENT
LISTENED: tuple[type[hikari.Event], ...] = (
    hikari.StartedEvent,
    hikari.ShardReadyEvent,
    hikari.ShardResumedEvent,
    hikari.GuildMessageCreateEvent,
    hikari.GuildMessageUpdateEvent,
    hikari.GuildMessageDeleteEvent,
    hikari.GuildBulkMessageDeleteEvent,
    hikari.InteractionCreateEvent,
)


class Events:
    """Every hikari event the bot got, in order."""

    def __init__(self) -> None:
        self.seen: list[hikari.Event] = []

    async def record(self, event: hikari.Event) -> None:
        self.seen.append(event)

    def of(self, kind: type[E], where: Callable[[E], bool] = lambda _: True) -> list[E]:
        return [e for e in self.seen if isinstance(e, kind) and where(e)]

    async def wait(
        self, kind: type[E], where: Callable[[E], bool] = lambda _: True, within: float = 5.0
    ) -> E:
        found = await wait_until(lambda: self.of(kind, where), sleep=asyncio.sleep, within=within)
        return found[0]


@contextlib.asynccontextmanager
async def running_bot(
    fake: FakeDiscord, intents: hikari.Intents = INTENTS, **start: Any
) -> AsyncIterator[tuple[hikari.GatewayBot, Events]]:
    bot = hikari.GatewayBot(
        token=fake.token,
        rest_url=fake.rest_url,
        intents=intents,
        logs=None,  # hikari's default logging setup also turns DeprecationWarnings on
        banner=None,
        suppress_optimization_warning=True,
    )
    events = Events()
    for kind in LISTENED:
        bot.subscribe(kind, events.record)
    await asyncio.wait_for(bot.start(check_for_updates=False, **start), 10)
    try:
        await events.wait(hikari.StartedEvent)
        yield bot, events
    finally:
        await asyncio.wait_for(bot.close(), 10)


def run(scenario: Callable[[], Any]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 15))


@pytest.fixture(autouse=True)
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """hikari logs (not raises) what it cannot parse: any ERROR means the fake sent bad data."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [r.getMessage() for r in caplog.get_records("call") if r.levelno >= logging.ERROR]
    assert errors == []


@pytest.fixture
def world() -> Iterator[tuple[FakeDiscord, Guild, User]]:
    fake = FakeDiscord()
    guild = fake.add_guild("komodo")
    alice = fake.add_user("alice")
    with fake.serve():
        yield fake, guild, alice
    assert fake.errors == []


def test_bot_identifies_becomes_ready_and_caches_the_guild(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, _alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (bot, events):
            ready = await events.wait(hikari.ShardReadyEvent)
            assert ready.my_user.id == fake.bot_user.id
            assert ready.unavailable_guilds == [guild.id]
            await wait_until(lambda: bot.cache.get_guild(guild.id), sleep=asyncio.sleep)
            cached = bot.cache.get_guild_channels_view_for_guild(guild.id)
            assert {c.name for c in cached.values()} >= {"general", "random"}
            assert bot.cache.get_thread(guild.thread.id) is not None
            assert bot.cache.get_member(guild.id, fake.bot_user.id) is not None
            await wait_until(lambda: fake.frames(op=OP_HEARTBEAT), sleep=asyncio.sleep)
            assert fake.frames(op=OP_HEARTBEAT_ACK, direction="out")

    run(scenario)
    identify = fake.frames(op=OP_IDENTIFY)[0].payload["d"]
    assert identify["token"] == fake.token
    assert identify["shard"] == [0, 1]
    assert identify["intents"] == int(INTENTS)
    path, query = fake.gateway_connects[0]
    assert (path, query["v"], query["encoding"]) == ("/gateway", "10", "json")
    # zstd-stream when a zstd module is there (Python 3.14, or hikari's speedups), else zlib
    assert query["compress"] in ("zlib-stream", "zstd-stream")
    assert fake.requests("GET")[0].path == "/gateway/bot"
    assert fake.unknown_requests == []


def test_posted_message_arrives_and_the_reply_is_recorded(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (bot, events):
            posted = fake.post_message(guild.id, guild.general.id, alice, "hello Eva")
            event = await events.wait(hikari.GuildMessageCreateEvent)
            assert event.content == "hello Eva"
            assert event.author_id == alice.id
            assert event.channel_id == guild.general.id
            assert event.guild_id == guild.id
            assert event.message.id == int(posted["id"])
            assert not event.is_bot

            await bot.rest.trigger_typing(guild.general.id)
            sent = await bot.rest.create_message(
                guild.general.id, f"hi <@{alice.id}>", reply=event.message, user_mentions=False
            )
            assert sent.content == f"hi <@{alice.id}>"
            # Discord echoes the bot's own message over the gateway.
            echo = await events.wait(hikari.GuildMessageCreateEvent, lambda e: e.is_bot)
            assert echo.message.id == sent.id

            history = [m async for m in bot.rest.fetch_messages(guild.general.id)]
            assert [m.id for m in history] == [sent.id, event.message.id]  # newest first
            older = [m async for m in bot.rest.fetch_messages(guild.general.id, before=sent.id)]
            assert [m.id for m in older] == [event.message.id]
            newer = await bot.rest.fetch_messages(guild.general.id, after=event.message.id)
            assert [m.id for m in newer] == [sent.id]

    run(scenario)
    assert fake.typing == [guild.general.id]
    [mine] = fake.bot_messages(guild.general.id)
    assert mine["content"] == f"hi <@{alice.id}>"
    assert (
        mine["message_reference"]["message_id"] == fake.channel_messages(guild.general.id)[0]["id"]
    )
    assert mine["mentions"] == []  # allowed_mentions said no users
    [post] = fake.requests("POST", "/channels/*/messages")
    assert post.body["allowed_mentions"] == {"parse": []}
    assert post.headers["Authorization"] == f"Bot {fake.token}"


def test_edit_delete_and_bulk_delete_arrive(world: tuple[FakeDiscord, Guild, User]) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (_bot, events):
            first = fake.post_message(guild.id, guild.general.id, alice, "one")
            second = fake.post_message(guild.id, guild.general.id, alice, "two")
            third = fake.post_message(guild.id, guild.thread.id, alice, "in the thread")
            fake.edit_message(first, "one, edited")
            edited = await events.wait(hikari.GuildMessageUpdateEvent)
            assert edited.message.id == int(first["id"])
            assert edited.message.content == "one, edited"
            fake.delete_message(third)
            deleted = await events.wait(hikari.GuildMessageDeleteEvent)
            assert (deleted.message_id, deleted.channel_id) == (int(third["id"]), guild.thread.id)
            fake.bulk_delete([first, second])
            bulk = await events.wait(hikari.GuildBulkMessageDeleteEvent)
            assert bulk.message_ids == {int(first["id"]), int(second["id"])}
            threaded = events.of(
                hikari.GuildMessageCreateEvent, lambda e: e.content == "in the thread"
            )
            assert threaded[0].channel_id == guild.thread.id

    run(scenario)
    assert fake.channel_messages(guild.general.id) == []


def test_messages_posted_together_arrive_in_order_as_if_posted_one_by_one(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world
    bob = fake.add_user("bob")

    async def scenario() -> None:
        async with running_bot(fake) as (_bot, events):
            alone = fake.post_message(guild.id, guild.general.id, alice, "first")
            together = fake.post_messages([
                Posting(guild.id, guild.general.id, bob, "second"),
                Posting(guild.id, guild.thread.id, alice, "third"),
                Posting(guild.id, guild.general.id, bob, "fourth", referenced_message=alone),
            ])
            await events.wait(hikari.GuildMessageCreateEvent, lambda e: e.content == "fourth")
            created = events.of(hikari.GuildMessageCreateEvent)
            assert [e.content for e in created] == ["first", "second", "third", "fourth"]
            assert [e.message_id for e in created[1:]] == [int(m["id"]) for m in together]
            assert [e.author_id for e in created] == [alice.id, bob.id, alice.id, bob.id]
            assert created[2].channel_id == guild.thread.id
            assert created[3].message.referenced_message is not None
            assert created[3].message.referenced_message.id == int(alone["id"])
            sent = fake.frames(direction="out")
            seqs = [f.payload["s"] for f in sent if f.payload.get("t") == "MESSAGE_CREATE"]
            assert len(seqs) == 4
            assert seqs == list(range(seqs[0], seqs[0] + 4))

    run(scenario)
    assert [m["content"] for m in fake.channel_messages(guild.general.id)] == [
        "first", "second", "fourth"
    ]


def test_slash_command_gets_an_ephemeral_answer_and_a_followup(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (bot, events):
            builder = bot.rest.slash_command_builder("ask", "Ask Eva").add_option(
                hikari.CommandOption(type=hikari.OptionType.STRING, name="q", description="what")
            )
            [registered] = await bot.rest.set_application_commands(
                fake.application_id, [builder], guild=guild.id
            )
            assert registered.name == "ask"

            sent = fake.slash_command(guild.id, guild.general.id, alice, "ask", {"q": "why?"})
            event = await events.wait(hikari.InteractionCreateEvent)
            inter = event.interaction
            assert isinstance(inter, hikari.CommandInteraction)
            assert inter.command_name == "ask"
            assert inter.command_id == registered.id
            assert inter.options is not None
            assert [(o.name, o.value) for o in inter.options] == [("q", "why?")]
            assert inter.user.id == alice.id
            assert inter.channel_id == guild.general.id
            assert inter.id == int(sent["id"])

            await inter.create_initial_response(
                hikari.ResponseType.MESSAGE_CREATE, "ok", flags=hikari.MessageFlag.EPHEMERAL
            )
            await inter.execute("and more")

            deferred = fake.slash_command(guild.id, guild.general.id, alice, "ask", {"q": "slow"})
            later = await events.wait(
                hikari.InteractionCreateEvent, lambda e: e.interaction.id == int(deferred["id"])
            )
            slow = later.interaction
            assert isinstance(slow, hikari.CommandInteraction)
            await slow.create_initial_response(hikari.ResponseType.DEFERRED_MESSAGE_CREATE)
            await slow.edit_initial_response("done thinking")

    run(scenario)
    assert [c["name"] for c in fake.commands(guild.id)] == ["ask"]
    first, second = fake.interaction_responses()
    assert (first.type, first.content, first.flags, first.ephemeral) == (4, "ok", 64, True)
    assert second.type == 5
    contents = [m["content"] for m in fake.bot_messages(guild.general.id)]
    assert contents == ["ok", "and more", "done thinking"]
    # The ephemeral answer is not in the channel's history; the others are.
    history = [m["content"] for m in fake.channel_messages(guild.general.id)]
    assert history == ["and more", "done thinking"]
    assert [(f.kind, f.target, f.content) for f in fake.followups] == [
        ("create", None, "and more"),
        ("edit", "@original", "done thinking"),
    ]


def test_interaction_response_with_a_file_comes_as_multipart(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (_bot, events):
            fake.slash_command(guild.id, guild.general.id, alice, "export", {})
            inter = (await events.wait(hikari.InteractionCreateEvent)).interaction
            assert isinstance(inter, hikari.CommandInteraction)
            await inter.create_initial_response(
                hikari.ResponseType.MESSAGE_CREATE,
                "here",
                attachment=hikari.Bytes(b"some memory", "memory.txt"),
                flags=hikari.MessageFlag.EPHEMERAL,
            )

    run(scenario)
    [response] = fake.interaction_responses()
    assert (response.content, response.flags, response.files) == ("here", 64, ("memory.txt",))
    [callback] = fake.requests("POST", "/interactions/*/callback")
    assert callback.headers["Content-Type"].startswith("multipart/form-data")


def test_button_press_arrives_as_component_interaction_and_updates_the_message(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (bot, events):
            row = bot.rest.build_message_action_row().add_interactive_button(
                hikari.ButtonStyle.DANGER, "forget:42", label="Forget"
            )
            sent = await bot.rest.create_message(guild.general.id, "forget it?", component=row)
            [message] = fake.bot_messages(guild.general.id)
            assert message["components"][0]["components"][0]["custom_id"] == "forget:42"

            fake.press_button(guild.id, guild.general.id, alice, "forget:42", message)
            inter = (await events.wait(hikari.InteractionCreateEvent)).interaction
            assert isinstance(inter, hikari.ComponentInteraction)
            assert inter.custom_id == "forget:42"
            assert inter.message.id == sent.id
            assert inter.user.id == alice.id
            await inter.create_initial_response(
                hikari.ResponseType.MESSAGE_UPDATE, "forgotten", components=[]
            )
            update = await events.wait(hikari.GuildMessageUpdateEvent)
            assert update.message.id == sent.id

    run(scenario)
    [response] = fake.interaction_responses()
    assert (response.type, response.content) == (7, "forgotten")
    [message] = fake.bot_messages(guild.general.id)
    assert (message["content"], message["components"]) == ("forgotten", [])


def test_dropped_connection_resumes_and_missed_messages_are_replayed(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (_bot, events):
            fake.post_message(guild.id, guild.general.id, alice, "before")
            await events.wait(hikari.GuildMessageCreateEvent)
            fake.drop_connection(0)
            fake.post_message(guild.id, guild.general.id, alice, "while away")
            await events.wait(hikari.ShardResumedEvent)
            fake.post_message(guild.id, guild.general.id, alice, "after")
            await events.wait(hikari.GuildMessageCreateEvent, lambda e: e.content == "after")
            contents = [e.content for e in events.of(hikari.GuildMessageCreateEvent)]
            assert contents == ["before", "while away", "after"]

    run(scenario)
    assert fake.identifies() == 1
    [resume] = fake.frames(op=OP_RESUME)
    assert resume.payload["d"]["token"] == fake.token
    assert fake.gateway_connects[-1][0] == "/gateway/resume"  # READY's resume_gateway_url


def test_invalidated_session_identifies_again(world: tuple[FakeDiscord, Guild, User]) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (_bot, events):
            fake.drop_connection(0, code=4000, invalidate=True)
            await wait_until(lambda: fake.identifies() == 2, sleep=asyncio.sleep, within=8)
            await wait_until(lambda: 0 in fake.connected_shards(), sleep=asyncio.sleep)
            fake.post_message(guild.id, guild.general.id, alice, "new session")
            event = await events.wait(hikari.GuildMessageCreateEvent)
            assert event.content == "new session"

    run(scenario)
    assert len(fake.frames(op=OP_RESUME)) <= 1  # hikari may try to resume first; it is refused


def test_two_shards_each_get_only_their_guilds() -> None:
    fake = FakeDiscord(shard_count=2)
    g0 = fake.add_guild("zero", shard=0)
    g1 = fake.add_guild("one", shard=1)
    bob = fake.add_user("bob")
    assert (shard_of(g0.id, 2), shard_of(g1.id, 2)) == (0, 1)

    async def scenario() -> None:
        async with (
            running_bot(fake, shard_ids=[0], shard_count=2) as (_a, ev0),
            running_bot(fake, shard_ids=[1], shard_count=2) as (_b, ev1),
        ):
            assert (await ev0.wait(hikari.ShardReadyEvent)).unavailable_guilds == [g0.id]
            assert (await ev1.wait(hikari.ShardReadyEvent)).unavailable_guilds == [g1.id]
            fake.post_message(g0.id, g0.general.id, bob, "to zero")
            fake.post_message(g1.id, g1.general.id, bob, "to one")
            await ev0.wait(hikari.GuildMessageCreateEvent)
            await ev1.wait(hikari.GuildMessageCreateEvent)
            await asyncio.sleep(0.1)  # give a misrouted message time to show up
            assert [e.content for e in ev0.of(hikari.GuildMessageCreateEvent)] == ["to zero"]
            assert [e.content for e in ev1.of(hikari.GuildMessageCreateEvent)] == ["to one"]

    with fake.serve():
        run(scenario)
    assert fake.errors == []
    assert fake.undelivered == []
    assert sorted(f.payload["d"]["shard"][0] for f in fake.frames(op=OP_IDENTIFY)) == [0, 1]


def test_scripted_429_is_retried_and_the_message_lands_once(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, _alice = world
    fake.rate_limit("POST", "/channels/*/messages", retry_after=0.3)

    async def scenario() -> None:
        async with running_bot(fake) as (bot, _events):
            start = time.monotonic()
            await bot.rest.create_message(guild.general.id, "patience")
            assert time.monotonic() - start >= 0.25

    run(scenario)
    posts = fake.requests("POST", "/channels/*/messages")
    statuses = [p.status for p in posts]
    assert statuses[0] == 429
    assert statuses[-1] == 200
    assert set(statuses[:-1]) == {429}
    assert [m["content"] for m in fake.bot_messages()] == ["patience"]


def test_unknown_routes_are_404_and_recorded(world: tuple[FakeDiscord, Guild, User]) -> None:
    fake, guild, _alice = world

    async def scenario() -> None:
        async with running_bot(fake) as (bot, _events):
            with pytest.raises(hikari.NotFoundError):
                await bot.rest.fetch_roles(guild.id)
            assert (await bot.rest.fetch_guild(guild.id)).name == "komodo"
            assert (await bot.rest.fetch_channel(guild.general.id)).name == "general"
            assert (await bot.rest.fetch_my_user()).id == fake.bot_user.id
            assert (await bot.rest.fetch_application()).id == fake.application_id

    run(scenario)
    assert [(r.method, r.path) for r in fake.unknown_requests] == [
        ("GET", f"/guilds/{guild.id}/roles")
    ]


def test_without_message_content_intent_content_is_empty(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    fake, guild, alice = world

    async def scenario() -> None:
        intents = hikari.Intents.GUILDS | hikari.Intents.GUILD_MESSAGES
        async with running_bot(fake, intents=intents) as (_bot, events):
            fake.post_message(guild.id, guild.general.id, alice, "secret")
            fake.post_message(
                guild.id, guild.general.id, alice, "hey Eva", mentions=[fake.bot_user]
            )
            await events.wait(hikari.GuildMessageCreateEvent, lambda e: e.content == "hey Eva")
            first = events.of(hikari.GuildMessageCreateEvent)[0]
            assert first.content is None

    run(scenario)


async def test_the_same_bot_works_under_trio_asyncio(
    world: tuple[FakeDiscord, Guild, User],
) -> None:
    # Eva will run hikari under trio-asyncio; the fake's own loop lives in its thread either way.
    fake, guild, alice = world
    async with trio_asyncio.open_loop():
        bot = hikari.GatewayBot(
            token=fake.token,
            rest_url=fake.rest_url,
            intents=INTENTS,
            logs=None,
            banner=None,
            suppress_optimization_warning=True,
        )
        events = Events()
        bot.subscribe(hikari.GuildMessageCreateEvent, events.record)
        with trio.fail_after(10):
            await trio_asyncio.aio_as_trio(bot.start)(check_for_updates=False)
            try:
                fake.post_message(guild.id, guild.general.id, alice, "hello from trio")
                found = await wait_until(
                    lambda: events.of(hikari.GuildMessageCreateEvent), sleep=trio.sleep
                )
                assert found[0].content == "hello from trio"
                await trio_asyncio.aio_as_trio(bot.rest.create_message)(guild.general.id, "hi")
            finally:
                await trio_asyncio.aio_as_trio(bot.close)()
    assert [m["content"] for m in fake.bot_messages()] == ["hi"]


@pytest.mark.parametrize("name", ["zlib-stream", "zstd-stream"])
def test_gateway_frames_are_one_compressed_stream(name: str) -> None:
    compressor = GatewayCompressor.for_name(name)
    if compressor is None:
        pytest.skip(f"no module for {name} here")
    payloads = [b'{"op":10}', b'{"op":0,"t":"READY"}' * 50, "{\"d\":\"caf\u00e9\"}".encode()]
    frames = [compressor.frame(payload) for payload in payloads]
    if name == "zlib-stream":
        inflator = zlib.decompressobj()
        assert all(frame.endswith(b"\x00\x00\xff\xff") for frame in frames)
        assert [inflator.decompress(frame) for frame in frames] == payloads
    else:
        decompressor = zstd_module().ZstdDecompressor()
        assert [decompressor.decompress(frame) for frame in frames] == payloads
    assert GatewayCompressor.for_name("deflate") is None
