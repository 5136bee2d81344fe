"""Eva's slash commands through the real hikari client, the fake Discord and a real supervisor.

A small harness stands in for eva.discord.bot: a GatewayBot under trio-asyncio whose
InteractionCreateEvent listener calls `handle_interaction` with a context over real LMDB in
tmp_path, holding a built memory of three people's messages. Every wait has a timeout.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import hikari
import msgspec
import pytest
import trio
import trio_asyncio  # type: ignore[import-untyped]
from holding import held

from eva.core.events import ForgetRequested, MessagePosted
from eva.core.forget import person_hash
from eva.core.keys import StreamId
from eva.core.opt_out import OptedOut
from eva.core.recall import render_view
from eva.core.settings import KIB, LiveSettings, MemorySettings, ModelSettings
from eva.core.summarize import OfflineSummarizer
from eva.discord import command_texts as texts
from eva.discord.commands import (
    ButtonId,
    command_definitions,
    handle_interaction,
    parse_button,
    register_commands,
)
from eva.live.inputs import Recall, Zoom
from eva.live.supervisor import Supervisor, open_supervisor
from eva.memory.build import Memory
from eva.memory.forget import ErasureFailed, ForgetReport
from eva.memory.view import RowText, channel_zone, row_lines
from eva.store.event_store import EventStore
from eva.store.guild_erasure import erasure_of
from eva.store.lmdb_kv import open_backend
from eva.store.opt_outs import opted_out, read_opt_outs
from eva.store.switches import Switches, read_switches
from eva.testing.fake_discord import (
    FakeDiscord,
    Guild,
    InteractionResponse,
    User,
    interactions,
    wait_until,
)

T = TypeVar("T")
JSON = dict[str, Any]
SETTINGS = MemorySettings(
    compress_at_bytes=3 * KIB,
    tail_keep_bytes=1 * KIB,
    overflow_tail_bytes=6 * KIB,
    row_high_bytes=6 * KIB,
    row_low_bytes=3 * KIB,
)
LIVE = LiveSettings(purge_delay_seconds=3600, idle_seconds=3600)
INTENTS = hikari.Intents.GUILDS | hikari.Intents.GUILD_MESSAGES | hikari.Intents.MESSAGE_CONTENT
BASE_MS = 1_700_000_000_000
POSTS = 120
BACKFILLED = 7


class Discord(FakeDiscord):
    """The fake, where some members hold no permission at all (the fake gives everyone all)."""

    def __init__(self) -> None:
        super().__init__()
        self.powerless: set[int] = set()

    async def _dispatch(self, guild_id: int, event: str, data: JSON) -> int:
        if event == "INTERACTION_CREATE" and int(data["member"]["user"]["id"]) in self.powerless:
            data["member"]["permissions"] = "0"  # the stored interaction is this same dict
        return await super()._dispatch(guild_id, event, data)


@dataclass(frozen=True)
class Context:
    """The context eva.discord.bot hands the commands."""

    supervisor: Supervisor
    store: EventStore
    eva_id: int
    run_trio: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
    model_settings: ModelSettings
    memory_settings: MemorySettings
    backfill: Callable[[int], Awaitable[int]]
    switches: Switches
    opted_out: OptedOut


@dataclass
class World:
    fake: Discord
    guild: Guild
    alice: User  # a moderator
    bob: User
    carol: User  # no permissions
    store: EventStore
    supervisor: Supervisor
    data_dir: Path
    said: dict[int, list[str]]
    bot: hikari.GatewayBot
    backfills: list[int] = field(default_factory=list)
    context: Any = None  # what the commands get (Context), once the bot is made

    @property
    def stream(self) -> StreamId:
        return StreamId(self.guild.id, self.guild.general.id)

    def command(self, user: User, name: str, options: Any = ()) -> JSON:
        return self.fake.slash_command(self.guild.id, self.guild.general.id, user, name, options)

    def press(self, user: User, custom_id: str, message: JSON) -> JSON:
        return self.fake.press_button(
            self.guild.id, self.guild.general.id, user, custom_id, message
        )

    async def response(self, sent: JSON) -> InteractionResponse:
        """The one initial response to interaction `sent`."""
        found = await wait_until(
            lambda: self.fake.interaction_responses(int(sent["id"])), sleep=trio.sleep, within=10
        )
        [response] = found
        return response

    async def edited(self, sent: JSON, where: Callable[[str], bool]) -> str:
        """The content of the latest edit of `sent`'s response that satisfies `where`."""

        def edits() -> list[str]:
            return [
                f.content or ""
                for f in self.fake.followups
                if f.token == sent["token"] and f.kind == "edit" and where(f.content or "")
            ]

        found = await wait_until(edits, sleep=trio.sleep, within=20)
        return found[-1]

    def message_of(self, sent: JSON) -> JSON:
        """The bot's message that answered interaction `sent` (ephemeral ones included)."""
        [message] = [
            m
            for m in self.fake.bot_messages(self.guild.general.id)
            if m.get("interaction_metadata", {}).get("id") == sent["id"]
        ]
        return message


def marker(name: str, number: int) -> str:
    return f"zz{name}q{number:03d}zz"


def in_files(directory: Path, needles: list[str]) -> set[str]:
    """The needles the directory still holds: in its files, or in its log opened."""
    return held(directory, needles)


def buttons(message: JSON) -> list[str]:
    return [c["custom_id"] for row in message["components"] for c in row["components"]]


async def fill(store: EventStore, guild: Guild, people: list[User]) -> dict[int, list[str]]:
    """Three people's messages in two channels; the general channel's memory is built."""
    said: dict[int, list[str]] = {p.id: [] for p in people}
    for channel, count in ((guild.general.id, POSTS), (guild.channels[1].id, 9)):
        stream = StreamId(guild.id, channel)
        posts = []
        for number in range(count):
            person = people[number % len(people)]
            words = marker(f"{person.username}{channel % 1000}", number)
            said[person.id].append(words)
            posts.append(
                MessagePosted(
                    at_ms=BASE_MS + number * 60_000,
                    index=number,
                    message_id=channel + 1 + number,
                    author_id=person.id,
                    author_name=person.username,
                    content=f"{words} " + "blah " * (4 + number % 7),
                )
            )
        store.append(stream, posts)
    general = StreamId(guild.id, guild.general.id)
    await Memory(store, general, OfflineSummarizer(), SETTINGS).build(BASE_MS + POSTS * 60_000)
    return said


async def run_trio(work: Callable[[], Awaitable[T]]) -> T:
    result: T = await trio_asyncio.trio_as_aio(work)()
    return result


@asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[World]:
    """The fake Discord, a built memory, a supervisor over it, and a bot answering commands."""
    fake = Discord()
    guild = fake.add_guild("komodo")
    alice, bob, carol = (fake.add_user(name) for name in ("alice", "bob", "carol"))
    fake.powerless.add(carol.id)
    data_dir = tmp_path / "data"
    store = EventStore(open_backend(data_dir))
    said = await fill(store, guild, [alice, bob, carol])
    with fake.serve():
        async with (
            trio_asyncio.open_loop(),
            open_supervisor(store, OfflineSummarizer(), SETTINGS, LIVE, resume=False) as sup,
        ):
            bot = hikari.GatewayBot(
                token=fake.token,
                rest_url=fake.rest_url,
                intents=INTENTS,
                logs=None,
                banner=None,
                suppress_optimization_warning=True,
            )
            world = World(fake, guild, alice, bob, carol, store, sup, data_dir, said, bot)

            async def backfill(channel_id: int) -> int:  # a trio function, as the bot's
                await trio.lowlevel.checkpoint()
                world.backfills.append(channel_id)
                return BACKFILLED

            context = Context(
                supervisor=sup,
                store=store,
                eva_id=fake.bot_user.id,
                run_trio=run_trio,
                model_settings=ModelSettings(),
                memory_settings=SETTINGS,
                backfill=backfill,
                switches=Switches(store, "all"),
                opted_out=opted_out(store),
            )
            world.context = context

            async def on_interaction(event: hikari.InteractionCreateEvent) -> None:
                await handle_interaction(event.interaction, context)

            bot.subscribe(hikari.InteractionCreateEvent, on_interaction)
            with trio.fail_after(10):
                await trio_asyncio.aio_as_trio(bot.start)(check_for_updates=False)
                await trio_asyncio.aio_as_trio(register_commands)(
                    bot.rest, hikari.Snowflake(fake.application_id), [hikari.Snowflake(guild.id)]
                )
            try:
                yield world
            finally:
                with trio.fail_after(10):
                    await trio_asyncio.aio_as_trio(bot.close)()
    assert fake.errors == []


@pytest.fixture(autouse=True)
def button_answers_name_their_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discord's metadata of a button's interaction names the message the button is on; the
    fake leaves `interacted_message_id` out, and hikari cannot read a new message answering a
    button press without it. (To be fixed in eva.testing.fake_discord; patched here meanwhile.)
    """
    original = interactions._interaction_metadata

    def metadata(inter: JSON) -> JSON:
        out = original(inter)
        if inter["type"] == 3 and "message" in inter:
            out["interaction_metadata"]["interacted_message_id"] = inter["message"]["id"]
        return out

    monkeypatch.setattr(interactions, "_interaction_metadata", metadata)


@pytest.fixture(autouse=True)
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A failing command is logged at ERROR (and hikari logs what it cannot parse): none here."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [r.getMessage() for r in caplog.get_records("call") if r.levelno >= logging.ERROR]
    assert errors == []


async def test_registration_records_every_command_with_options_and_permissions(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as world:
        registered = {c["name"]: c for c in world.fake.commands(world.guild.id)}
        await trio_asyncio.aio_as_trio(register_commands)(
            world.bot.rest, hikari.Snowflake(world.fake.application_id), []
        )
        global_names = [c["name"] for c in world.fake.commands(None)]
    names = [
        "forget-me", "memory", "recall", "zoom", "privacy", "my-data", "forget-member",
        "backfill", "dont-remember-me", "remember-me", "memory-here",
    ]
    assert list(registered) == names
    assert global_names == names
    assert [b.name for b in command_definitions()] == names
    options = {
        name: [(o["name"], o["type"], o.get("required", False)) for o in c.get("options", [])]
        for name, c in registered.items()
    }
    assert options == {
        "forget-me": [],
        "memory": [],
        "recall": [("query", 3, True)],
        "zoom": [("address", 3, True)],
        "privacy": [],
        "my-data": [],
        "forget-member": [("member", 6, True)],
        "backfill": [],
        "dont-remember-me": [],
        "remember-me": [],
        "memory-here": [("state", 3, True)],
    }
    assert [c["value"] for c in registered["memory-here"]["options"][0]["choices"]] == [
        "on", "off", "off-and-erase"
    ]
    moderators = int(hikari.Permissions.MANAGE_MESSAGES)
    permissions = {n: c["default_member_permissions"] for n, c in registered.items()}
    assert {n: p if p is None else int(p) for n, p in permissions.items()} == {
        n: moderators if n in ("forget-member", "backfill", "memory-here") else None
        for n in names
    }
    assert all(c["contexts"] == [0] for c in registered.values())  # servers only
    assert all(0 < len(c["description"]) <= 100 for c in registered.values())


def test_button_ids_carry_the_action_and_the_people() -> None:
    me = ButtonId("forget-me", "confirm", 42, 42)
    assert me.custom_id() == "forget-me:confirm:42"
    assert parse_button(me.custom_id()) == me
    member = ButtonId("forget-member", "cancel", 7, 9)
    assert member.custom_id() == "forget-member:cancel:7:9"
    assert parse_button(member.custom_id()) == member
    for stale in (
        "forget:42",
        "forget-me:maybe:42",
        "forget-me:confirm:x",
        "forget-member:confirm:7",
    ):
        assert parse_button(stale) is None


def test_long_tool_output_is_cut_to_one_discord_message() -> None:
    text = "\n".join(f"[{i}] 2024-01-01 00:00 ann: {'é😀' * 40} ```" for i in range(200))
    block = texts.fitted_block(text)
    assert len(block.encode("utf-16-le")) // 2 <= 2000
    assert block.endswith(texts.CUT_NOTE)
    assert block.count("```") == 2  # the fences inside the text cannot close the block
    assert texts.fitted_block("short") == "```\nshort\n```"


async def test_my_data_answers_with_a_file_only_the_asker_sees(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        sent = world.command(world.bob, "my-data")
        response = await world.response(sent)
        content = await world.edited(sent, lambda text: "What I keep about you" in text)
        edits = world.fake.requests("PATCH", f"/webhooks/*/{sent['token']}/messages/@original")
    assert (response.type, response.ephemeral) == (5, True)  # deferred, ephemeral
    bobs = len(world.said[world.bob.id])
    assert f"user {world.bob.id} " in content and f"{bobs} messages" in content
    assert [r.files for r in edits if r.files] == [(f"eva-data-{world.bob.id}.json",)]


async def test_my_data_too_large_for_one_file_comes_in_parts_each_within_the_limit(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as world:
        world.fake.upload_limit = limit = 1_000  # what the interaction says, and enforces
        sent = world.command(world.bob, "my-data")
        content = await world.edited(sent, lambda text: "What I keep about you" in text)
        files = int(content.split("The ", 1)[1].split()[0])  # "The N files sent here"
        await wait_until(  # every file after the first comes in a message of its own
            lambda: len(world.fake.requests("POST", f"/webhooks/*/{sent['token']}")) == files - 1,
            sleep=trio.sleep, within=10,
        )
        uploads = [
            (name, data)
            for request in world.fake.requests(None, f"/webhooks/*/{sent['token']}*")
            for name, data in zip(request.files, request.contents, strict=True)
        ]
    assert 3 <= len(uploads) <= 10 and all(len(data) <= limit for _, data in uploads)
    assert f"The {len(uploads)} files sent here" in content
    parts = [msgspec.json.decode(gzip.decompress(data)) for _, data in uploads]
    assert [(p["part"], p["parts"]) for p in parts] == [(n, len(uploads)) for n in
                                                      range(1, len(uploads) + 1)]
    assert [name for name, _ in uploads] == [
        f"eva-data-{world.bob.id}-{n}-of-{len(uploads)}.json.gz" for n in range(1, len(uploads) + 1)
    ]
    theirs = sorted(m["content"].split()[0] for p in parts for m in p["messages"])
    assert theirs == sorted(world.said[world.bob.id])
    lines = [line for p in parts for line in p["lines"]]
    assert lines and any(line["others"] for line in lines)
    others = world.said[world.alice.id] + world.said[world.carol.id]
    assert not any(mark in line["text"] for line in lines for mark in others)
    assert all(line["text"].startswith("bob: ") or not line["text"] for line in lines
               if line["others"])


async def test_privacy_answers_ephemerally(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        response = await world.response(world.command(world.bob, "privacy"))
    assert (response.type, response.ephemeral) == (4, True)
    assert response.content == texts.PRIVACY
    assert len(texts.PRIVACY) <= 2000
    for words in ("/forget-me", "LMDB", "model provider", "deleted in Discord"):
        assert words in texts.PRIVACY
    # what it must not claim: no copy anywhere, or memory only from the day she joined
    assert "no copy of your words is left" not in texts.PRIVACY
    assert "/backfill" in texts.PRIVACY and "quotes you stays" in texts.PRIVACY
    # the delay it names is the default one
    assert "ten minutes" in texts.PRIVACY and LiveSettings().purge_delay_seconds == 600


async def test_memory_shows_the_row_ends_and_the_sizes(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        response = await world.response(world.command(world.bob, "memory"))
        meta = world.store.meta(world.stream)
        assert meta is not None
        lines = row_lines(world.store, world.stream, channel_zone(meta, SETTINGS), RowText())
        elsewhere = await world.response(
            world.fake.slash_command(
                world.guild.id, world.guild.channels[1].id, world.bob, "memory"
            )
        )
    assert (response.type, response.ephemeral) == (4, True)
    content = response.content or ""
    assert len(lines) > 2 * 3 + 1
    for line in [*lines[:3], *lines[-3:]]:
        assert line[:200] in content
    assert lines[3][:200] not in content
    assert f"The row has {len(lines)} lines" in content
    assert f"covering messages 0..{meta.row_frontier - 1}" in content
    assert f"the tail holds {meta.messages - meta.row_frontier} messages" in content
    assert f"{meta.tail_bytes / 1024:.1f} KiB" in content or f"{meta.tail_bytes} bytes" in content
    assert f"({meta.row_bytes / 1024:.1f} KiB)" in content
    assert f"{POSTS} messages in all" in content
    assert "No lines yet" in (elsewhere.content or "")  # a channel with messages but no row
    assert "9 messages in all" in (elsewhere.content or "")


async def test_recall_and_zoom_answer_with_the_tools_output(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        query = world.said[world.bob.id][5]
        recalled = await world.response(world.command(world.carol, "recall", {"query": query}))
        view = await world.supervisor.ask(world.stream, Recall(query=query))
        row = world.store.published_row(world.stream)
        assert row is not None
        start, size = next(entry for entry in row.entries if entry[1] > 1)
        address = f"{start}+{size}"
        zoomed = await world.response(world.command(world.carol, "zoom", {"address": address}))
        halves = await world.supervisor.ask(world.stream, Zoom(address=address))
        one = await world.response(world.command(world.carol, "zoom", {"address": "5+1"}))
        message = await world.supervisor.ask(world.stream, Zoom(address="5+1"))
        bad = await world.response(world.command(world.carol, "zoom", {"address": "banana"}))
        beyond = await world.response(world.command(world.carol, "zoom", {"address": "512+512"}))
    assert all(r.ephemeral for r in (recalled, zoomed, one, bad, beyond))
    assert view.total == 1
    assert recalled.content == texts.fitted_block(render_view(view, 8000))
    assert query in (recalled.content or "")
    assert zoomed.content == texts.fitted_block(halves.text)
    assert len(halves.lines) == 2
    assert one.content == texts.fitted_block(message.text)
    assert world.said[world.carol.id][1] in (one.content or "")  # message 5 is carol's
    for error in (bad, beyond):
        content = error.content or ""
        assert content.startswith("Cannot zoom there: ")
        assert "\n" not in content
    assert "'banana' is not an address" in (bad.content or "")
    assert "passes the last message" in (beyond.content or "")


async def test_forget_me_asks_checks_the_presser_and_erases_the_person(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        alice, bob = world.said[world.alice.id], world.said[world.bob.id]
        assert in_files(world.data_dir, alice) == set(alice)
        asked = world.command(world.alice, "forget-me")
        question = await world.response(asked)
        assert (question.type, question.ephemeral) == (4, True)
        assert question.content == texts.FORGET_ME_ASK
        message = world.message_of(asked)
        confirm, always, cancel = buttons(message)
        assert (confirm, always, cancel) == (
            f"forget-me:confirm:{world.alice.id}",
            f"forget-me:always:{world.alice.id}",
            f"forget-me:cancel:{world.alice.id}",
        )

        intruder = await world.response(world.press(world.bob, confirm, message))
        assert (intruder.type, intruder.ephemeral, intruder.content) == (4, True, texts.NOT_YOURS)
        assert in_files(world.data_dir, alice) == set(alice)

        pressed = world.press(world.alice, confirm, message)
        working = await world.response(pressed)
        assert (working.type, working.content) == (7, texts.FORGETTING)
        recorded = await world.edited(pressed, lambda text: text.startswith("Recorded"))
        assert recorded == texts.forget_recorded("you")
        done = await world.edited(pressed, lambda text: text.startswith("Done"))
        assert in_files(world.data_dir, alice) == set()
        assert in_files(world.data_dir, bob) == set(bob)
        final = world.message_of(asked)
    assert done == (
        f"Done: Eva has forgotten you in this server. {len(alice)} messages erased in 2 "
        f"channels, " + done.split("channels, ", 1)[1]
    )
    assert ", 0 found." in done
    checked = int(done.split("; ", 1)[1].split(" text")[0])
    assert checked >= len(alice)
    assert final["flags"] & 64  # still the ephemeral message, now without buttons
    assert (final["content"], final["components"]) == (done, [])


async def test_an_erasure_that_cannot_be_verified_is_said_plainly_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(tmp_path) as world:

        async def unverified(person_id: int, **_: Any) -> ForgetReport:
            raise ErasureFailed("forget of someone: 1 of 40 texts still found (1 times) in data")

        world.supervisor.forget = unverified  # type: ignore[method-assign]
        asked = world.command(world.bob, "forget-me")
        await world.response(asked)
        message = world.message_of(asked)
        pressed = world.press(world.bob, buttons(message)[0], message)
        said = await world.edited(pressed, lambda text: text == texts.ERASURE_UNVERIFIED)
        # the promise was recorded before the erasure failed: it stays pending, durable
        pending = [meta.forgetting for meta in world.store.streams()]
        assert any(person_hash(world.bob.id) in f for f in pending)
    assert said == texts.ERASURE_UNVERIFIED
    assert "could not verify" in said
    errors = [r for r in caplog.get_records("call") if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(":")[0] for r in errors] == ["ERASURE NOT VERIFIED"]
    caplog.clear()  # the error was the point


async def test_forget_me_cancel_leaves_everything(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        asked = world.command(world.bob, "forget-me")
        await world.response(asked)
        message = world.message_of(asked)
        *_, cancel = buttons(message)
        cancelled = await world.response(world.press(world.bob, cancel, message))
        every = [words for said in world.said.values() for words in said]
        assert in_files(world.data_dir, every) == set(every)
        meta = world.store.meta(world.stream)
        tombstones = [
            e for _, e in world.store.events(world.stream) if isinstance(e, ForgetRequested)
        ]
    assert (cancelled.type, cancelled.content) == (7, texts.CANCELLED)
    assert world.message_of(asked)["components"] == []
    assert meta is not None
    assert (meta.messages, meta.deleted, meta.forgetting) == (POSTS, 0, [])
    assert tombstones == []


async def test_forget_member_is_for_moderators(tmp_path: Path) -> None:
    def member(user_id: int) -> list[JSON]:
        return [{"name": "member", "type": 6, "value": str(user_id)}]

    async with running(tmp_path) as world:
        bob = world.said[world.bob.id]
        refused = await world.response(
            world.command(world.carol, "forget-member", member(world.bob.id))
        )
        herself = await world.response(
            world.command(world.alice, "forget-member", member(world.fake.bot_user.id))
        )
        asked = world.command(world.alice, "forget-member", member(world.bob.id))
        question = await world.response(asked)
        message = world.message_of(asked)
        confirm, _cancel = buttons(message)
        assert confirm == f"forget-member:confirm:{world.alice.id}:{world.bob.id}"
        # The member being forgotten cannot press the moderator's button, nor can anyone else.
        intruder = await world.response(world.press(world.bob, confirm, message))
        assert in_files(world.data_dir, bob) == set(bob)
        # A button naming someone without the permission (lost since, or forged) does nothing.
        forged = f"forget-member:confirm:{world.carol.id}:{world.bob.id}"
        powerless = await world.response(world.press(world.carol, forged, message))
        assert in_files(world.data_dir, bob) == set(bob)
        pressed = world.press(world.alice, confirm, message)
        done = await world.edited(pressed, lambda text: text.startswith("Done"))
        assert in_files(world.data_dir, bob) == set()
        others = world.said[world.alice.id] + world.said[world.carol.id]
        assert in_files(world.data_dir, others) == set(others)
        tombstones = [
            e for _, e in world.store.events(world.stream) if isinstance(e, ForgetRequested)
        ]
    assert (refused.ephemeral, refused.content) == (True, texts.NOT_MODERATOR)
    assert (herself.ephemeral, herself.content) == (True, texts.NOT_HERSELF)
    assert question.ephemeral
    assert f"<@{world.bob.id}>" in (question.content or "")
    assert (intruder.ephemeral, intruder.content) == (True, texts.NOT_YOURS)
    assert (powerless.ephemeral, powerless.content) == (True, texts.NOT_MODERATOR)
    assert done.startswith(f"Done: Eva has forgotten <@{world.bob.id}> in this server.")
    assert f"{len(bob)} messages erased" in done
    assert [t.by for t in tombstones] == ["moderator"]


async def test_backfill_is_for_moderators_and_fetches_the_channel(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        refused = await world.response(world.command(world.carol, "backfill"))
        assert world.backfills == []
        asked = world.command(world.alice, "backfill")
        deferred = await world.response(asked)
        done = await world.edited(asked, lambda text: "stored" in text)
    assert (refused.ephemeral, refused.content) == (True, texts.NOT_MODERATOR)
    assert (deferred.type, deferred.ephemeral) == (5, True)
    assert done == f"Fetched the history Eva missed: {BACKFILLED} messages stored."
    assert world.backfills == [world.guild.general.id]


async def test_unknown_commands_and_stale_buttons_get_a_clear_answer(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        unknown = await world.response(world.command(world.bob, "dance"))
        asked = world.command(world.bob, "privacy")
        await world.response(asked)
        message = world.message_of(asked)
        stale = await world.response(world.press(world.bob, "forget:old-style", message))
    assert (unknown.ephemeral, unknown.content) == (True, texts.unknown_command("dance"))
    assert (stale.type, stale.ephemeral, stale.content) == (4, True, texts.STALE_BUTTON)


async def test_memory_here_turns_a_channel_off_and_erases_it_for_moderators_only(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as world:
        general = world.stream
        refused = await world.response(
            world.command(world.carol, "memory-here", {"state": "off"})
        )
        assert refused.content == texts.NOT_MODERATOR and read_switches(world.store) == {}
        off = await world.response(world.command(world.alice, "memory-here", {"state": "off"}))
        assert off.ephemeral and "I no longer keep" in (off.content or "")
        assert not read_switches(world.store)[general].on
        erased = await world.response(
            world.command(world.alice, "memory-here", {"state": "off-and-erase"})
        )
        assert "being erased" in (erased.content or "")
        record = await wait_until(
            lambda: (r := erasure_of(world.store, general.guild_id, general.channel_id))
            and r.done_ms and r,
            sleep=trio.sleep, within=15,
        )
        assert record.reason == "moderator" and record.found == 0
        assert world.store.meta(general) is None
        on = await world.response(world.command(world.alice, "memory-here", {"state": "on"}))
        assert "I keep" in (on.content or "") and read_switches(world.store)[general].on
    kept_here = [w for said in world.said.values() for w in said
                 if f"{general.channel_id % 1000}q" in w]
    elsewhere = [w for said in world.said.values() for w in said if w not in kept_here]
    assert kept_here and in_files(world.data_dir, kept_here) == set()
    assert in_files(world.data_dir, elsewhere) == set(elsewhere)


async def test_dont_remember_me_and_forget_me_always_keep_the_person_out(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as world:
        guild = world.guild.id
        said = await world.response(world.command(world.carol, "dont-remember-me"))
        assert (said.ephemeral, said.content) == (True, texts.DONT_REMEMBER_ME)
        carol = world.store.hashes.recorded(world.carol.id)
        assert set(read_opt_outs(world.store)) == {(guild, carol)}
        assert world.context.opted_out(guild, world.carol.id)  # in force at once
        back = await world.response(world.command(world.carol, "remember-me"))
        assert back.content == texts.REMEMBER_ME and read_opt_outs(world.store) == {}
        assert not world.context.opted_out(guild, world.carol.id)
        # forget me, and don't remember me: both
        asked = world.command(world.bob, "forget-me")
        await world.response(asked)
        message = world.message_of(asked)
        pressed = world.press(world.bob, f"forget-me:always:{world.bob.id}", message)
        done = await world.edited(pressed, lambda text: text.startswith("Done"))
        assert done.endswith(texts.KEPT_OUT_TOO) and len(done) <= 2000
        bob = world.store.hashes.recorded(world.bob.id)
        assert set(read_opt_outs(world.store)) == {(guild, bob)}
    assert in_files(world.data_dir, world.said[world.bob.id]) == set()
