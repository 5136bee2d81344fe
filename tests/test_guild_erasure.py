# Whole servers erased: `eva forget --guild G`, and a server Eva left once its grace is over.
#
# The CLI parts run on copies of test_forget_cli's data directory (guild 9 with two
# channels, guild 8 with one); the bot part runs the real bot against the fake Discord.
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import msgspec
import pytest
import trio
from test_bot import eva_running, fake, store_of, until  # noqa: F401
from test_forget import markers_in_files
from test_forget_cli import GUILD_9, QUIET, built, close, eva, markers_of  # noqa: F401

from eva.cli.common import open_store as opened
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings
from eva.store.event_store import EventStore
from eva.store.guild_erasure import DAY_MS, ask_erasure, erasure_of
from eva.store.moving import remove_streams
from eva.store.opt_outs import read_opt_outs, set_opt_out
from eva.store.replay import replay_stream
from eva.store.switches import read_switches, set_switch
from eva.testing.fake_discord import FakeDiscord

EVERYONE = (101, 202, 303, 404)


@pytest.fixture
def data(built: Path, tmp_path: Path) -> Path:  # noqa: F811
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    return copy


def guild_markers(streams: tuple[StreamId, ...]) -> list[str]:
    return [mark for person in EVERYONE for mark in markers_of(person, streams)]


def open_store(data: Path) -> EventStore:
    """The directory as a command that writes opens it: bound to the tests' key store."""
    return opened(data, write=True)


def test_a_whole_server_is_erased_and_proven_and_the_others_stay(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nine, eight = guild_markers(GUILD_9), guild_markers((QUIET,))
    assert markers_in_files(data, nine) == set(nine)
    capsys.readouterr()
    # asked without --yes and not at a terminal: refused, nothing changed
    assert eva("forget", "--guild", "9", data=data) == 1
    assert "give --yes" in capsys.readouterr().err
    assert markers_in_files(data, nine) == set(nine)
    assert eva("forget", "--guild", "7", "--yes", data=data) == 1
    assert "no channel of guild 7" in capsys.readouterr().err

    store = open_store(data)
    try:
        now = int(time.time() * 1000)
        set_switch(store, GUILD_9[0], False, "moderator", now)
        set_switch(store, QUIET, True, "moderator", now)
        set_opt_out(store, 9, 101, True, "self", now)
    finally:
        close(data)
    assert eva("forget", "--guild", "9", "--yes", "--json", data=data) == 0
    [record] = json.loads(capsys.readouterr().out)["erasures"]
    assert record["guild_id"] == 9 and record["reason"] == "operator"
    assert record["channels"] == [1, 2] and record["messages"] == 160
    assert record["done_ms"] > 0 and record["found"] == 0 and record["texts_checked"] > 0
    # nothing of guild 9 in any file; guild 8 whole and replaying as before
    assert markers_in_files(data, nine) == set()
    assert markers_in_files(data, eight) == set(eight)
    store = open_store(data)
    try:
        assert [(m.guild_id, m.channel_id) for m in store.streams()] == [(8, 1)]
        assert replay_stream(store, QUIET).ok
        # nothing of guild 9 but the record: its switches and keep-outs went too
        assert list(read_switches(store)) == [QUIET] and read_opt_outs(store) == {}
    finally:
        close(data)
    # status and audit say what became of it, with counts only
    assert eva("status", data=data) == 0
    out = capsys.readouterr().out
    assert "guild 9: erased on" in out and "2 channels, 160 messages" in out and "0 found" in out
    assert eva("audit", "9/1", data=data) == 1
    assert "guild 9: erased on" in capsys.readouterr().err


def test_an_erasure_cut_short_is_finished_by_the_next_command_that_writes(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nine = guild_markers(GUILD_9)
    store = open_store(data)
    try:
        now = int(time.time() * 1000)
        ask_erasure(store, 9, "operator", now, now)
        remove_streams(store.backend, list(GUILD_9))  # killed here: the words in freed pages
    finally:
        close(data)
    assert markers_in_files(data, nine)  # not yet compacted away
    capsys.readouterr()
    assert eva("build", data=data) == 0
    assert "erasing first: guild 9: to be erased" in capsys.readouterr().err
    assert markers_in_files(data, nine) == set()
    store = open_store(data)
    try:
        record = erasure_of(store, 9)
        assert record is not None and record.done_ms and not record.pending
    finally:
        close(data)


def test_a_server_left_waits_out_its_grace_and_coming_back_cancels_it(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nine = guild_markers(GUILD_9)
    now = int(time.time() * 1000)
    store = open_store(data)
    try:
        ask_erasure(store, 9, "left", now, now + 30 * DAY_MS)
    finally:
        close(data)
    assert eva("build", data=data) == 0  # not due: nothing erased
    assert markers_in_files(data, nine) == set(nine)
    capsys.readouterr()
    assert eva("status", data=data) == 0
    assert "guild 9: to be erased from" in capsys.readouterr().out
    assert eva("audit", "9/1", data=data) == 0  # a channel of it says so too
    assert "guild 9: to be erased from" in capsys.readouterr().out
    assert eva("audit", "8/1", data=data) == 0
    assert "to be erased" not in capsys.readouterr().out
    # the operator may erase it at once all the same
    assert eva("forget", "--guild", "9", "--yes", data=data) == 0
    assert markers_in_files(data, nine) == set()


async def test_the_bot_removed_from_a_server_erases_it_after_the_grace_and_not_if_back(
    fake: FakeDiscord, tmp_path: Path  # noqa: F811
) -> None:
    [guild] = fake.guilds.values()
    alice = next(u for u in fake.users.values() if u.username == "alice")
    data = tmp_path / "data"
    stream = StreamId(guild.id, guild.general.id)
    # a long grace: leaving records the erasure, coming back cancels it
    async with eva_running(fake, data, live=LiveSettings(left_server_grace_days=30)) as bot:
        fake.post_message(guild.id, guild.general.id, alice, "zzkeptzz across the leave")
        await until(lambda: bot.store.meta(stream) is not None)
        fake.remove_bot(guild)
        left = await until(lambda: erasure_of(bot.store, guild.id))
        assert left.reason == "left" and left.pending
        assert left.due_ms - left.asked_ms == 30 * DAY_MS
        fake.readd_guild(guild)
        back = await until(lambda: (r := erasure_of(bot.store, guild.id)) and r.cancelled_ms)
        assert back
    assert markers_in_files(data, ["zzkeptzz"]) == {"zzkeptzz"}
    # no grace: gone once she is removed, and proven
    async with eva_running(fake, data, live=LiveSettings(left_server_grace_days=0)) as bot:
        fake.remove_bot(guild)
        done = await until(
            lambda: (r := erasure_of(bot.store, guild.id)) and r.reason == "left" and r.done_ms,
            within=15,
        )
        assert done
        assert bot.store.meta(stream) is None
    assert markers_in_files(data, ["zzkeptzz"]) == set()
    store = store_of(data)
    record = erasure_of(store, guild.id)
    assert record is not None and record.found == 0 and record.messages == 1
    assert guild.general.id in msgspec.to_builtins(record)["channels"]
    await trio.lowlevel.checkpoint()
