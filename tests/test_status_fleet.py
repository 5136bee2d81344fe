"""eva status over several shards' data directories: per shard figures, guilds out of place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import keyed
from fleet import generate, posts

from eva.cli.main import main
from eva.core.keys import StreamId
from eva.core.shards import shard_of
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.reshard import JOURNAL


def eva(*argv: str, dirs: list[Path]) -> int:
    try:
        return main(list(argv))
    finally:
        for directory in dirs:
            if (directory / "data.mdb").exists():
                open_backend(directory).close()


@pytest.fixture
def two(tmp_path: Path) -> list[Path]:
    # named so that sorting by name alone would put shard-10 before shard-2
    dirs = [tmp_path / "fleet" / "shard-2", tmp_path / "fleet" / "shard-10"]
    generate(dirs, 40, built_every=10)
    return dirs


def test_each_shard_is_counted_and_a_folder_of_shards_stands_for_them(
    two: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("status", str(two[0].parent), "--shard-count", "2", "--json", dirs=two) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["dir"] for s in report["shards"]] == [str(d) for d in two]
    for shard, directory in zip(report["shards"], two, strict=True):
        store = keyed(EventStore(open_backend(directory)))
        metas = store.streams()
        assert shard["channels"] == len(metas) > 0
        assert shard["guilds"] == len({m.guild_id for m in metas})
        assert shard["messages"] == sum(m.messages for m in metas)
        assert shard["disk_bytes"] >= (directory / "data.mdb").stat().st_size
        assert shard["forgets_pending"] == 0 and not shard["reshard_compaction_owed"]
        open_backend(directory).close()
    assert report["totals"]["guilds"] == 40
    assert report["placement"] == {"shard_count": 2, "ok": True, "misplaced": []}

    assert eva("status", *map(str, two), dirs=two) == 0
    out = capsys.readouterr().out
    assert "total  2 shard(s)" in out and "no guild is held in more than one directory" in out


def test_guilds_out_of_place_for_a_shard_count_are_named(
    two: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("status", *map(str, two), "--shard-count", "3", "--json", dirs=two) == 1
    report = json.loads(capsys.readouterr().out)
    wrong = report["placement"]["misplaced"]
    holders = {}
    for number, directory in enumerate(two):
        for meta in keyed(EventStore(open_backend(directory))).streams():
            holders[meta.guild_id] = number
        open_backend(directory).close()
    expected = sorted(g for g, at in holders.items() if shard_of(g, 3) != at)
    assert [m["guild_id"] for m in wrong] == expected and expected
    for m in wrong:
        owner = shard_of(m["guild_id"], 3)
        assert m["owner_shard"] == owner
        assert m["owner_dir"] == (str(two[owner]) if owner < 2 else None)

    assert eva("status", *map(str, two), "--shard-count", "3", dirs=two) == 1
    out = capsys.readouterr().out
    assert f"{len(expected)} guild(s) out of place; `eva reshard --shard-count 3" in out
    assert f"guild {expected[0]} is held in " in out


def test_a_guild_held_in_two_shards_and_an_unfinished_reshard_are_shown(
    two: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    guild = 6 << 22  # shard 0 of 2
    for directory, channel in ((two[0], 1), (two[1], 2)):
        keyed(EventStore(open_backend(directory))).append(
            StreamId(guild, channel), posts(StreamId(guild, channel), 3)
        )
        open_backend(directory).close()
    (two[1] / JOURNAL).write_text('{"removed_guilds": []}')
    assert eva("status", *map(str, two), dirs=two) == 1
    out = capsys.readouterr().out
    assert f"guild {guild} is held in {two[0]} (shard 0), {two[1]} (shard 1)" in out
    assert "(reshard compaction owed)" in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["NOWHERE"], "no Eva data directory at"),
        (["EMPTY"], "nor in any folder in it"),
        (["FLEET", "--shard-count", "1"], "--shard-count 1 has shards 0 .. 0, but 2 data"),
        (["FLEET", "--shard-count", "0"], "--shard-count must be at least 1"),
    ],
)
def test_bad_directories_and_counts_are_one_line(
    argv: list[str], said: str, two: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base = two[0].parent.parent
    (base / "EMPTY").mkdir()
    named = [
        str(two[0].parent) if a == "FLEET" else str(base / a) if a.isupper() else a for a in argv
    ]
    assert eva("status", *named, dirs=two) == 1
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
