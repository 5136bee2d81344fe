# A channel's memory turned off or on: `eva channel`, import, and the bot's intake.
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import trio
from test_bot import eva_running, fake, mention, store_of, texts, until, world  # noqa: F401
from test_forget import markers_in_files
from test_forget_cli import GUILD_9, QUIET, built, eva, markers_of  # noqa: F401

from eva.core.dce import parse_export
from eva.core.keys import StreamId
from eva.core.settings import LiveSettings
from eva.demo.friends import friends_export
from eva.store.switches import set_switch
from eva.testing.fake_discord import FakeDiscord

EVERYONE = (101, 202, 303, 404)


@pytest.fixture
def data(built: Path, tmp_path: Path) -> Path:  # noqa: F811
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    return copy


def test_a_channel_turned_off_and_erased_from_the_command_line(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = [m for p in EVERYONE for m in markers_of(p, (QUIET,))]
    nine = [m for p in EVERYONE for m in markers_of(p, GUILD_9)]
    capsys.readouterr()
    assert eva("channel", "off", "8/1", data=data) == 0
    assert "Eva's memory of 8/1 is off" in capsys.readouterr().out
    assert markers_in_files(data, quiet) == set(quiet)  # off keeps what was kept
    assert eva("channel", data=data) == 0
    assert "8/1 off (not kept; by the operator)" in capsys.readouterr().out
    assert eva("status", data=data) == 0
    assert "Eva's memory is off in 1 channel(s): 8/1" in capsys.readouterr().out
    assert eva("channel", "off", "8/1", "--erase", data=data) == 0
    assert "channel 8/1: erased on" in capsys.readouterr().out
    assert markers_in_files(data, quiet) == set()
    assert markers_in_files(data, nine) == set(nine)
    assert eva("channel", "on", "8/1", "--erase", data=data) == 1
    assert "--erase goes with off" in capsys.readouterr().err


def test_an_export_of_a_channel_turned_off_is_not_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "friends.json"
    raw = friends_export(300)
    export.write_bytes(raw)
    stream = parse_export(raw).stream
    data = tmp_path / "data"
    assert eva("import", str(export), "--quiet", data=data) == 0
    assert eva("channel", "off", str(stream), data=data) == 0
    capsys.readouterr()
    assert eva("import", str(export), data=data) == 1
    err = capsys.readouterr().err
    assert f"Eva's memory of {stream} (#" in err and "is off: nothing was imported" in err
    # listen = "chosen": a channel never turned on is not kept either
    chosen = tmp_path / "eva.toml"
    chosen.write_text('[live]\nlisten = "chosen"\n')
    fresh = tmp_path / "fresh"
    assert eva("import", str(export), "--settings", str(chosen), data=fresh) == 1
    assert 'listen = "chosen" and it was never turned on' in capsys.readouterr().err
    assert eva("channel", "on", str(stream), data=fresh) == 0
    assert eva("import", str(export), "--quiet", "--settings", str(chosen), data=fresh) == 0


async def test_the_bot_keeps_nothing_of_a_channel_turned_off_and_answers_nothing_there(
    fake: FakeDiscord, tmp_path: Path  # noqa: F811
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general = StreamId(guild.id, guild.general.id)
    other = StreamId(guild.id, guild.channels[1].id)
    data = tmp_path / "data"
    store = store_of(data)
    set_switch(store, general, False, "moderator", int(time.time() * 1000))
    async with eva_running(fake, data) as bot:
        fake.post_message(guild.id, general.channel_id, alice, "zzoffzz not to be kept")
        fake.post_message(guild.id, general.channel_id, bob, f"{mention(eva_user)} zzoffzz?",
                          mentions=[eva_user])
        fake.post_message(guild.id, other.channel_id, alice, "zzonzz kept here")
        await until(lambda: texts(bot.store, other) == ["zzonzz kept here"])
        await trio.sleep(0.5)
        assert bot.store.meta(general) is None
        assert fake.bot_messages(general.channel_id) == []
    assert markers_in_files(data, ["zzoffzz", "zzonzz"]) == {"zzonzz"}
    # listen = "chosen": only a channel turned on is kept
    set_switch(store_of(data), other, True, "moderator", int(time.time() * 1000))
    third = StreamId(guild.id, guild.thread.id)
    async with eva_running(fake, data, live=LiveSettings(listen="chosen")) as bot:
        fake.post_message(guild.id, third.channel_id, alice, "zzthreadzz never chosen")
        fake.post_message(guild.id, other.channel_id, alice, "zzchosenzz kept")
        await until(lambda: "zzchosenzz kept" in texts(bot.store, other))
        await trio.sleep(0.5)
        assert texts(bot.store, third) == []  # described before, in the first run, never kept
    assert markers_in_files(data, ["zzthreadzz"]) == set()
