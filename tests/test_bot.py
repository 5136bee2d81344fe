# Eva in Discord, end to end: the real hikari client under trio-asyncio against the fake
# Discord, over real LMDB, with the fake Messages API standing in for Claude.
#
# `run_bot` runs in a trio nursery and is stopped at the end of each test (as a stop signal
# would); what it stored is read back from its data directory. Every wait has a timeout.
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import keyed
from holding import held

from eva.cli.main import main
from eva.core.events import ReplyWritten
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings
from eva.discord.bot import EvaBot
from eva.discord.mapping import OFFLINE_NOTE
from eva.discord.process import run_bot
from eva.live.collector import YOUNG_GENERATION
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.testing.fake_anthropic import FakeMessagesAPI
from eva.testing.fake_discord import JSON, FakeDiscord, Guild, User, wait_until

ANSWER = "The boat is called Marigold, Bob."


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    fake = FakeDiscord()
    fake.add_user("alice")
    fake.add_user("bob")
    fake.add_guild("komodo")
    with fake.serve():
        yield fake
    assert fake.errors == []


@pytest.fixture
def model() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(answer=lambda body: ANSWER).serve() as running:
        yield running


def first_requests(model: FakeMessagesAPI) -> list[Any]:
    """The requests that began a reply: not the round that asks Eva to check details she
    did not read (this model names a boat nobody mentioned, so each reply gets one)."""
    return [
        r for r in model.message_requests()
        if "Before this answer is posted" not in str(r.body["messages"][-1]["content"])
    ]


def world(fake: FakeDiscord) -> tuple[Guild, User, User, User]:
    guild = next(iter(fake.guilds.values()))
    users = {u.username: u for u in fake.users.values()}
    return guild, users["alice"], users["bob"], fake.bot_user


@asynccontextmanager
async def eva_running(
    fake: FakeDiscord, data: Path, model: FakeMessagesAPI | None = None, **options: Any
) -> AsyncIterator[EvaBot]:
    """`run_bot` in a nursery; stopped (as by a signal) when the block ends."""
    keys: dict[str, Any] = {}
    if model is not None:
        keys = {"anthropic_key": model.key, "anthropic_base_url": model.url}
    run = partial(
        run_bot, fake.token, data, rest_url=fake.rest_url, handle_signals=False, **keys, **options
    )
    collector = gc.get_threshold()
    async with trio.open_nursery() as nursery:
        with trio.fail_after(15):
            eva: EvaBot = await nursery.start(run)
        # Serving, the process collects young objects less often and start-up is frozen.
        assert gc.get_threshold()[0] == YOUNG_GENERATION
        assert gc.get_freeze_count() > 0
        try:
            yield eva
        finally:
            eva.stop()
            with trio.fail_after(15):
                await eva.wait_stopped()
    assert fake.errors == []
    assert gc.get_threshold() == collector
    assert gc.get_freeze_count() == 0


def store_of(data: Path) -> EventStore:
    return keyed(EventStore(open_backend(data)))


def contents(store: EventStore, stream: StreamId) -> list[tuple[str, str, bool]]:
    """(author, text, deleted) of every stored message of a channel, by index."""
    meta = store.meta(stream)
    out = []
    for index in range(meta.messages if meta is not None else 0):
        message = store.message(stream, index)
        assert message is not None
        out.append((message.posted.author_name, message.content, message.deleted))
    return out


def texts(store: EventStore, stream: StreamId) -> list[str]:
    return [text for _, text, deleted in contents(store, stream) if not deleted]


async def until(predicate: Callable[[], Any], within: float = 8.0) -> Any:
    return await wait_until(predicate, sleep=trio.sleep, within=within)


def mention(eva: User) -> str:
    return f"<@{eva.id}>"


# -- messages into streams ----------------------------------------------------------------


async def test_commits_the_disk_refuses_are_stored_again_in_order(
    fake: FakeDiscord, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the disk refuses commits (as when it is full), no message is lost: each channel
    submits its refused posts again, in order, until they land; the bot keeps serving."""
    guild, alice, _bob, _eva = world(fake)
    general, random = guild.general, guild.channels[1]
    data = tmp_path / "data"
    refusing = {"commits": 0}
    append_many = EventStore.append_many

    def full_disk(self: EventStore, *args: Any, **kwargs: Any) -> Any:
        if refusing["commits"] > 0:
            refusing["commits"] -= 1
            raise OSError(28, "No space left on device")
        return append_many(self, *args, **kwargs)

    monkeypatch.setattr(EventStore, "append_many", full_disk)
    live = LiveSettings(retry_first_seconds=0.05, retry_most_seconds=0.2)
    async with eva_running(fake, data, live=live):
        fake.post_message(guild.id, general.id, alice, "before the disk filled")
        store = store_of(data)
        stream = StreamId(guild.id, general.id)
        await until(lambda: texts(store, stream) == ["before the disk filled"])
        refusing["commits"] = 6
        wanted: dict[int, list[str]] = {general.id: ["before the disk filled"], random.id: []}
        for i in range(12):
            channel = (general, random)[i % 2]
            fake.post_message(guild.id, channel.id, alice, f"while full {i}")
            wanted[channel.id].append(f"while full {i}")
        for channel_id, texts_wanted in wanted.items():
            each, count = StreamId(guild.id, channel_id), len(texts_wanted)
            await until(lambda s=each, n=count: len(texts(store, s)) >= n, 15)
            assert texts(store, each) == texts_wanted
    assert refusing["commits"] == 0


async def test_slash_commands_are_registered_globally_or_in_the_test_guilds(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    guild, _alice, _bob, _eva = world(fake)
    async with eva_running(fake, tmp_path / "global"):
        pass
    assert "forget-me" in [c["name"] for c in fake.commands(None)]
    assert fake.commands(guild.id) == []
    other = FakeDiscord()
    testing = other.add_guild("testing")
    elsewhere = other.add_guild("elsewhere")
    with other.serve():
        live = LiveSettings(command_guilds=(testing.id,))
        async with eva_running(other, tmp_path / "testing", live=live):
            pass
    assert "forget-me" in [c["name"] for c in other.commands(testing.id)]
    assert other.commands(elsewhere.id) == [] and other.commands(None) == []


async def test_messages_land_in_their_channel_streams_in_order(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    guild, alice, bob, _eva = world(fake)
    general, random, thread = guild.general, guild.channels[1], guild.thread
    other_bot = fake.add_user("helper", bot=True)
    data = tmp_path / "data"
    async with eva_running(fake, data):
        expected: dict[int, list[str]] = {general.id: [], random.id: [], thread.id: []}
        for i in range(40):
            channel = (general, random, thread)[i % 3]
            author = (alice, bob)[i % 2]
            fake.post_message(guild.id, channel.id, author, f"message {i} from {author.username}")
            expected[channel.id].append(f"message {i} from {author.username}")
        fake.post_message(guild.id, general.id, other_bot, "beep")
        expected[general.id].append("beep")
        store = store_of(data)
        for channel_id, wanted in expected.items():
            stream = StreamId(guild.id, channel_id)
            count = len(wanted)
            await until(lambda s=stream, n=count: len(texts(store, s)) == n)
            assert texts(store, stream) == wanted
    general_stream = StreamId(guild.id, general.id)
    stored = contents(store, general_stream)
    assert stored[0][0] == "Alice"  # display names: the global name
    last = store.message(general_stream, len(stored) - 1)
    assert last is not None and last.posted.bot and last.posted.author_name == "Helper"
    meta = store.meta(StreamId(guild.id, thread.id))
    assert meta is not None and (meta.guild_name, meta.channel_name) == ("komodo", "a-thread")
    assert fake.bot_messages() == []  # nobody spoke to Eva


# -- replies ----------------------------------------------------------------------------


def model_prompts(model: FakeMessagesAPI) -> list[str]:
    return [
        "\n".join(block.get("text", "") for message in r.body["messages"]
                  for block in message["content"] if isinstance(block, dict))
        for r in model.message_requests()
    ]


async def test_a_mention_and_a_reply_to_eva_are_answered_from_memory(
    fake: FakeDiscord, model: FakeMessagesAPI, tmp_path: Path
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general = guild.general
    data = tmp_path / "data"
    stream = StreamId(guild.id, general.id)
    async with eva_running(fake, data, model) as bot:
        fake.post_message(guild.id, general.id, alice, "we named the boat Marigold yesterday")
        question = fake.post_message(
            guild.id, general.id, bob, f"{mention(eva_user)} what is the boat called? @everyone",
            mentions=[eva_user],
        )
        [reply] = await until(lambda: fake.bot_messages(general.id))
        store = store_of(data)
        # Eva's own message comes back through the gateway and is stored like any other.
        await until(lambda: len(contents(store, stream)) == 3)
        # Another person answers Eva's message with a Discord reply (no @mention): a question.
        fake.post_message(guild.id, general.id, alice, "and who named it?",
                          referenced_message=reply)
        replies = await until(lambda: len(fake.bot_messages(general.id)) == 2
                              and fake.bot_messages(general.id))
        await until(lambda: len(contents(store, stream)) == 5)
        waited = dict(bot.answerer.model_seconds)

    assert reply["content"] == ANSWER
    # Each answer noted how long it waited on the model, by the question it answered.
    assert list(waited) == [int(question["id"]), int(replies[1]["message_reference"]["message_id"])]
    assert all(seconds > 0 for seconds in waited.values())
    assert reply["message_reference"]["message_id"] == question["id"]
    assert replies[1]["message_reference"]["message_id"] != question["id"]
    posts = fake.requests("POST", "/channels/*/messages")
    assert [p.status for p in posts] == [200, 200]
    for post in posts:
        allowed = post.body["allowed_mentions"]
        assert "everyone" not in allowed["parse"] and "roles" not in allowed["parse"]
        assert allowed.get("roles", []) == []
    assert posts[0].body["allowed_mentions"]["users"] == [str(bob.id)]
    assert posts[1].body["allowed_mentions"]["users"] == [str(alice.id)]
    assert fake.typing[:1] == [general.id]
    # The model was asked with the channel's memory: the tail holds the earlier messages.
    first, second = model_prompts(model)
    assert "we named the boat Marigold yesterday" in first
    assert "what is the boat called?" in first
    assert ANSWER in second  # Eva's own reply is in the memory the second time
    stored = contents(store, stream)
    assert [author for author, _, _ in stored] == ["Alice", "Bob", "Eva", "Alice", "Eva"]
    assert stored[1][1].startswith("@Eva what is the boat called?")
    answered = [e for _, e in store.events(stream) if isinstance(e, ReplyWritten)]
    assert [e.to_message_id for e in answered] == [int(question["id"]), answered[1].to_message_id]


async def test_offline_eva_answers_from_recall_and_says_she_is_offline(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general = guild.general
    async with eva_running(fake, tmp_path / "data"):
        fake.post_message(guild.id, general.id, alice, "the marigold boat leaves at noon")
        fake.post_message(guild.id, general.id, alice, "lunch was good")
        fake.post_message(guild.id, general.id, bob, f"{mention(eva_user)} marigold",
                          mentions=[eva_user])
        [reply] = await until(lambda: fake.bot_messages(general.id))
    assert reply["content"].startswith(OFFLINE_NOTE)
    assert "Alice: the marigold boat leaves at noon" in reply["content"]
    assert "lunch" not in reply["content"]


# -- edits and deletes ------------------------------------------------------------------


async def test_edits_are_recorded_and_deletes_become_erased_slots(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    guild, alice, bob, _eva = world(fake)
    general = guild.general
    stream = StreamId(guild.id, general.id)
    data = tmp_path / "data"
    async with eva_running(fake, data, live=LiveSettings(purge_delay_seconds=0.1)) as eva:
        first = fake.post_message(guild.id, general.id, alice, "the meeting is on monday")
        second = fake.post_message(guild.id, general.id, bob, "my secret is swordfish")
        third = fake.post_message(guild.id, general.id, bob, "one")
        fourth = fake.post_message(guild.id, general.id, bob, "two")
        fake.post_message(guild.id, general.id, alice, "kept")
        store = store_of(data)
        await until(lambda: len(contents(store, stream)) == 5)
        fake.edit_message(first, "the meeting is on tuesday")
        fake.delete_message(second)
        fake.bulk_delete([third, fourth])
        await until(lambda: texts(store, stream) == ["the meeting is on tuesday", "kept"])
        # A while later the deleted and edited texts leave the data file too.
        scan = await until(lambda: eva.supervisor.last_scan)
    stored = contents(store, stream)
    assert [deleted for _, _, deleted in stored] == [False, True, True, True, False]
    assert scan.hits == 0
    for path in data.iterdir():
        if path.is_file():
            raw = path.read_bytes()
            assert b"swordfish" not in raw and b"monday" not in raw


async def test_a_message_deleted_just_before_a_stop_leaves_the_files_at_the_next_start(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    guild, alice, bob, _eva = world(fake)
    general = guild.general
    stream = StreamId(guild.id, general.id)
    data = tmp_path / "data"
    live = LiveSettings(purge_delay_seconds=3600)  # the stop comes long before the purge
    async with eva_running(fake, data, live=live):
        secret = fake.post_message(guild.id, general.id, bob, "my bank PIN is 9081")
        fake.post_message(guild.id, general.id, alice, "kept")
        store = store_of(data)
        await until(lambda: len(contents(store, stream)) == 2)
        fake.delete_message(secret)
        await until(lambda: texts(store, stream) == ["kept"])
    assert held(data, ["bank PIN is 9081"]) == {"bank PIN is 9081"}  # in the log, sealed
    async with eva_running(fake, data, live=live) as eva:
        scan = await until(lambda: eva.supervisor.last_scan)
    assert scan.hits == 0
    assert held(data, ["bank PIN is 9081", "9081"]) == set()


async def test_message_events_keep_discords_order_and_a_malformed_one_is_left_out(
    fake: FakeDiscord, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    guild, alice, bob, _eva = world(fake)
    general = guild.general
    stream = StreamId(guild.id, general.id)
    data = tmp_path / "data"
    async with eva_running(fake, data):
        first = fake.post_message(guild.id, general.id, alice, "draft")
        # A create without an author is left out with a warning; the events after it
        # still reach the log in Discord's order.
        broken = {**first, "id": str(int(first["id"]) + 1)}
        del broken["author"]
        fake.dispatch(guild.id, "MESSAGE_CREATE", broken)
        fake.edit_message(first, "final")
        fake.post_message(guild.id, general.id, bob, "after the edit")
        fake.delete_message(first)
        fake.post_message(guild.id, general.id, bob, "after the delete")
        store = store_of(data)
        await until(lambda: texts(store, stream) == ["after the edit", "after the delete"])
    kinds = [type(event).__name__ for _, event in store.events(stream)]
    assert [k for k in kinds if k in {"MessagePosted", "MessageEdited", "MessageDeleted"}] == [
        "MessagePosted",
        "MessageEdited",
        "MessagePosted",
        "MessageDeleted",
        "MessagePosted",
    ]
    warnings = [record.message for record in caplog.records]
    assert any("MESSAGE_CREATE event from Discord was left out" in w for w in warnings)


# -- shards -------------------------------------------------------------------------------


async def test_two_processes_each_get_only_their_guilds(tmp_path: Path) -> None:
    fake = FakeDiscord(shard_count=2)
    g0 = fake.add_guild("zero", shard=0)
    g1 = fake.add_guild("one", shard=1)
    bob = fake.add_user("bob")
    data0, data1 = tmp_path / "shard0", tmp_path / "shard1"
    with fake.serve():
        async with (
            eva_running(fake, data0, shard_ids=[0], shard_count=2),
            eva_running(fake, data1, shard_ids=[1], shard_count=2),
        ):
            for i in range(5):
                fake.post_message(g0.id, g0.general.id, bob, f"to zero {i}")
                fake.post_message(g1.id, g1.thread.id, bob, f"to one {i}")
            s0, s1 = store_of(data0), store_of(data1)
            await until(lambda: len(texts(s0, StreamId(g0.id, g0.general.id))) == 5)
            await until(lambda: len(texts(s1, StreamId(g1.id, g1.thread.id))) == 5)
    assert {m.guild_id for m in s0.streams()} == {g0.id}
    assert {m.guild_id for m in s1.streams()} == {g1.id}
    assert texts(s1, StreamId(g1.id, g1.thread.id)) == [f"to one {i}" for i in range(5)]
    assert fake.undelivered == []
    assert fake.errors == []


# -- failures: a dropped gateway, a 429, a restart ------------------------------------------


async def test_a_dropped_gateway_and_a_429_lose_nothing_and_reply_once(
    fake: FakeDiscord, model: FakeMessagesAPI, tmp_path: Path
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general = guild.general
    stream = StreamId(guild.id, general.id)
    data = tmp_path / "data"
    fake.rate_limit("POST", "/channels/*/messages", retry_after=0.3)
    async with eva_running(fake, data, model):
        store = store_of(data)
        fake.post_message(guild.id, general.id, alice, "before the drop")
        await until(lambda: len(contents(store, stream)) == 1)
        fake.drop_connection(0)
        fake.post_message(guild.id, general.id, alice, "while the gateway is down")
        fake.post_message(guild.id, general.id, bob, f"{mention(eva_user)} still there?",
                          mentions=[eva_user])
        await until(lambda: fake.resumes() >= 1)
        fake.post_message(guild.id, general.id, alice, "after the resume")
        await until(lambda: fake.bot_messages(general.id))
        await until(lambda: len(contents(store, stream)) == 5)
        await trio.sleep(0.3)  # time for a duplicate, if there were one
    stored = texts(store, stream)
    assert stored[:3] == ["before the drop", "while the gateway is down", "@Eva still there?"]
    assert sorted(stored[3:]) == sorted(["after the resume", ANSWER])  # the reply waited out a 429
    statuses = [p.status for p in fake.requests("POST", "/channels/*/messages")]
    assert statuses[0] == 429 and statuses[-1] == 200 and statuses.count(200) == 1
    assert len(fake.bot_messages()) == 1
    assert len(first_requests(model)) == 1


async def test_a_restart_backfills_what_was_missed_once_and_answers_no_mention_twice(
    fake: FakeDiscord, model: FakeMessagesAPI, tmp_path: Path
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general, thread = guild.general, guild.thread
    stream = StreamId(guild.id, general.id)
    thread_stream = StreamId(guild.id, thread.id)
    data = tmp_path / "data"
    async with eva_running(fake, data, model):
        store = store_of(data)
        fake.post_message(guild.id, general.id, alice, "first")
        fake.post_message(guild.id, thread.id, alice, "thread first")
        fake.post_message(guild.id, general.id, bob, f"{mention(eva_user)} hello?",
                          mentions=[eva_user])
        await until(lambda: fake.bot_messages(general.id))
        await until(lambda: len(contents(store, stream)) == 3)
        await until(lambda: len(contents(store, thread_stream)) == 1)
    # Eva is down: these are sent to nobody and only history keeps them.
    fake.post_message(guild.id, general.id, alice, "missed one")
    fake.post_message(guild.id, thread.id, bob, "missed in the thread")
    fake.post_message(guild.id, general.id, bob, f"{mention(eva_user)} are you back?",
                      mentions=[eva_user])
    fake.post_message(guild.id, general.id, alice, "missed three")
    async with eva_running(fake, data, model):
        await until(lambda: len(contents(store, stream)) >= 6)
        await until(lambda: len(fake.bot_messages(general.id)) == 2)
        await until(lambda: len(contents(store, stream)) == 7)
        fake.post_message(guild.id, general.id, alice, "live again")
        await until(lambda: len(contents(store, stream)) == 8)
        await until(lambda: len(contents(store, thread_stream)) == 2)
        await trio.sleep(0.3)  # time for a duplicate, if there were one
    assert texts(store, stream) == [
        "first",
        "@Eva hello?",
        ANSWER,
        "missed one",
        "@Eva are you back?",
        "missed three",
        ANSWER,
        "live again",
    ]
    assert texts(store, thread_stream) == ["thread first", "missed in the thread"]
    replies = fake.bot_messages(general.id)
    assert len(replies) == 2  # the old mention was not answered again; the missed one was
    questions = [m for m in fake.channel_messages(general.id) if "<@" in m["content"]]
    assert [r["message_reference"]["message_id"] for r in replies] == [q["id"] for q in questions]
    assert len(first_requests(model)) == 2
    fetches = fake.requests("GET", "/channels/*/messages")
    assert {r.query.get("after") for r in fetches} >= {replies[0]["id"]}  # the last one stored


async def test_a_question_eva_replied_to_before_it_was_stored_is_not_answered_again(
    fake: FakeDiscord, model: FakeMessagesAPI, tmp_path: Path
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general = guild.general
    stream = StreamId(guild.id, general.id)
    data = tmp_path / "data"
    async with eva_running(fake, data, model):
        store = store_of(data)
        fake.post_message(guild.id, general.id, alice, "first")
        await until(lambda: len(contents(store, stream)) == 1)
    # Eva answers before a question is stored: a crash between the two leaves the question
    # and her reply in Discord's history only.
    question = fake.post_message(guild.id, general.id, bob, f"{mention(eva_user)} hello?",
                                 mentions=[eva_user])
    fake.post_message(guild.id, general.id, eva_user, "Hello, Bob.", referenced_message=question)
    async with eva_running(fake, data, model):
        await until(lambda: len(contents(store, stream)) == 3)
        await trio.sleep(0.3)  # time for a duplicate, if there were one
    assert texts(store, stream) == ["first", "@Eva hello?", "Hello, Bob."]
    assert fake.bot_messages() == []
    assert model.message_requests() == []


# -- the command line ---------------------------------------------------------------------


def test_eva_run_without_a_token_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("DISCORD_TOKEN", raising=False)
    status = main(["run", "--data", str(tmp_path / "data")])
    assert status == 2
    assert "DISCORD_TOKEN" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def run_eva(fake: FakeDiscord, data: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["DISCORD_TOKEN"] = fake.token
    return subprocess.Popen(
        [sys.executable, "-m", "eva.cli.main", "run", "--data", str(data),
         "--rest-url", fake.rest_url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_eva_run_stores_messages_and_exits_cleanly_on_sigterm(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    guild, alice, _bob, _eva = world(fake)
    data = tmp_path / "data"
    process = run_eva(fake, data)
    try:
        await until(lambda: 0 in fake.connected_shards() or process.poll() is not None, 20)
        assert process.poll() is None
        await until(lambda: fake.frames(op=0, direction="out"), 5)
        await trio.sleep(0.5)  # let the guild arrive before the messages
        for i in range(20):
            fake.post_message(guild.id, guild.general.id, alice, f"line {i}")
        await trio.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        await until(lambda: process.poll() is not None, 10)
    finally:
        if process.poll() is None:
            process.kill()
        _out, err = process.communicate(timeout=5)
    assert process.returncode == 0, err
    assert "ANTHROPIC_API_KEY is not set" in err
    messages: list[JSON] = fake.channel_messages(guild.general.id)
    assert len(messages) == 20
    store = store_of(data)
    assert texts(store, StreamId(guild.id, guild.general.id)) == [f"line {i}" for i in range(20)]


def test_eva_run_with_a_malformed_token_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "not a token at all")
    status = main(["run", "--data", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert status == 1
    assert "does not look like a bot token" in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()


def test_eva_run_names_a_reply_model_the_price_table_lacks_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "not a token at all")  # it stops after the start
    settings = tmp_path / "eva.toml"
    settings.write_text('[models]\nguild_reply_models = { "5" = "claude-sonnet-4" }\n')
    assert main(["run", "--data", str(tmp_path / "data"), "--settings", str(settings)]) == 1
    err = capsys.readouterr().err
    assert "eva run: claude-sonnet-4 is not in the price table" in err


def test_gateway_refusals_are_explained_in_words_an_operator_can_act_on() -> None:
    import hikari

    from eva.discord.process import connect_error

    intents = hikari.GatewayServerClosedConnectionError("Disallowed intent(s).", code=4014)
    assert "Privileged Gateway Intents" in connect_error(intents)
    assert "Message Content" in connect_error(intents)
    refused = hikari.UnauthorizedError("http://x/api/v10/gateway/bot", {}, b"", "401: Unauthorized")
    assert "refused DISCORD_TOKEN" in connect_error(refused)
    assert "4004" in connect_error(hikari.GatewayServerClosedConnectionError("no", code=4004))
