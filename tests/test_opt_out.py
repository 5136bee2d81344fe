# "Don't remember me": an opted-out person's messages reach no file, by any way in.
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio
from test_bot import eva_running, fake, mention, store_of, texts, until, world  # noqa: F401
from test_forget import markers_in_files
from test_forget_cli import eva

from eva.core.dce import parse_export
from eva.core.keys import StreamId
from eva.demo.friends import friends_export
from eva.store.opt_outs import set_opt_out
from eva.testing.fake_discord import FakeDiscord


async def test_the_bot_keeps_nothing_of_a_person_kept_out_but_answers_them(
    fake: FakeDiscord, tmp_path: Path  # noqa: F811
) -> None:
    guild, alice, bob, eva_user = world(fake)
    general = StreamId(guild.id, guild.general.id)
    data = tmp_path / "data"
    async with eva_running(fake, data) as bot:
        fake.post_message(guild.id, general.channel_id, bob, "zzbobzz the ferry is at noon")
        await until(lambda: texts(bot.store, general) == ["zzbobzz the ferry is at noon"])
        asked = fake.slash_command(guild.id, general.channel_id, alice, "dont-remember-me")
        await until(lambda: fake.interaction_responses(int(asked["id"])))
        fake.post_message(guild.id, general.channel_id, alice, "zzalicezz my new number")
        fake.post_message(guild.id, general.channel_id, alice,
                          f"{mention(eva_user)} zzaskzz when is the ferry?", mentions=[eva_user])
        fake.post_message(guild.id, general.channel_id, bob, "zzbob2zz kept")
        await until(lambda: "zzbob2zz kept" in texts(bot.store, general))
        # she answers the question she was asked, from what she keeps, and keeps none of it
        [answer] = await until(lambda: [  # her reply, not her answers to the commands
            m for m in fake.bot_messages(general.channel_id) if not m.get("interaction_metadata")
        ])
        assert "zzbobzz" in answer["content"]
        await trio.sleep(0.3)
        assert not any("zzalicezz" in t or "zzaskzz" in t for t in texts(bot.store, general))
        back = fake.slash_command(guild.id, general.channel_id, alice, "remember-me")
        await until(lambda: fake.interaction_responses(int(back["id"])))
        fake.post_message(guild.id, general.channel_id, alice, "zzagainzz kept again")
        await until(lambda: "zzagainzz kept again" in texts(bot.store, general))
    # nor is Eva's reply to the question, which quotes it
    assert markers_in_files(data, ["zzalicezz", "zzaskzz", "zzbob2zz", "zzagainzz"]) == {
        "zzbob2zz", "zzagainzz"
    }


def test_an_import_skips_a_person_kept_out_and_their_export_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = friends_export(300)
    export = parse_export(raw)
    counts: dict[int, int] = {}
    for message in export.messages:
        counts[int(message.author.id)] = counts.get(int(message.author.id), 0) + 1
    person = max(counts, key=lambda p: counts[p])
    file = tmp_path / "friends.json"
    file.write_bytes(raw)
    data = tmp_path / "data"
    capsys.readouterr()
    assert eva("opt-out", "--user", str(person), data=data) == 0
    assert "nothing they write in every server is kept from now on" in capsys.readouterr().out
    assert eva("import", str(file), "--json", data=data) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["skipped_forgotten"] == counts[person]
    store = store_of(data)
    stream = export.stream
    meta = store.meta(stream)
    assert meta is not None and meta.messages == len(export.messages) - counts[person]
    assert all(
        m.posted.author_id != person
        for index in range(meta.messages) if (m := store.message(stream, index)) is not None
    )
    assert eva("export", "--user", str(person), "--json", data=data) == 0
    assert json.loads(capsys.readouterr().out)["kept_out_of"] == [0]
    assert eva("opt-out", data=data) == 0
    assert "every server: 1 people kept out" in capsys.readouterr().out
    assert eva("status", "--json", data=data) == 0
    assert json.loads(capsys.readouterr().out)["people_kept_out"] == 1
    assert eva("opt-in", "--user", str(person), data=data) == 0
    assert "is kept again" in capsys.readouterr().out
    store = store_of(data)
    assert not set_opt_out(store, 0, person, False, "operator", int(time.time() * 1000))
