"""eva reshard: every guild moves to its owner's directory, verified, erased where it was."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import sealed_directory
from fleet import digests, generate, markers_out_of_place, marks, placement, posts

from eva.cli.main import main
from eva.core.keys import StreamId
from eva.core.shards import misplaced, moves, shard_of
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.reshard import JOURNAL
from eva.store.writer_lock import take_writer_lock

GUILDS = 300


def eva(*argv: str, dirs: list[Path]) -> int:
    """Run `eva ARGV` in this process and close every directory after."""
    try:
        return main(list(argv))
    finally:
        for directory in dirs:
            if (directory / "data.mdb").exists():
                open_backend(directory).close()


def test_a_guild_belongs_to_one_shard_and_moves_only_when_its_shard_changes() -> None:
    assert shard_of(5 << 22, 3) == 2 and shard_of((5 << 22) | 12345, 3) == 2
    holders = {5 << 22: [2], 6 << 22: [0, 1], 7 << 22: [0], 8 << 22: [4]}
    assert [(m.guild_id >> 22, m.source, m.target) for m in moves(holders, 3)] == [
        (7, 0, 1), (6, 1, 0), (8, 4, 2),
    ]
    assert [(m.guild_id >> 22, m.held_in, m.duplicated) for m in misplaced(holders, 3)] == [
        (6, (0, 1), True), (7, (0,), False), (8, (4,), False),
    ]
    with pytest.raises(ValueError, match="at least 1"):
        shard_of(1, 0)


def test_hundreds_of_guilds_go_from_two_shards_to_three_and_back_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = [tmp_path / "shard-0", tmp_path / "shard-1"]
    three = [*two, tmp_path / "shard-2"]
    fleet = generate(two, GUILDS)
    before = digests(two)
    assert len(before) > GUILDS

    started = time.perf_counter()
    assert eva("reshard", "--shard-count", "3", *map(str, three), "--json", dirs=three) == 0
    to_three = time.perf_counter() - started
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["guilds"] == GUILDS
    assert report["moved"] == sum(shard_of(g, 3) != shard_of(g, 2) for g in fleet.guilds)
    assert report["moved"] + report["in_place"] == GUILDS
    assert all(c["ok"] and c["texts_checked"] > 0 for c in report["compacted"])
    assert digests(three) == before
    assert placement(three) == {g: {fleet.owner(g, three)} for g in fleet.guilds}
    assert markers_out_of_place(fleet, three) == {}
    assert not any((d / JOURNAL).exists() for d in three)
    assert eva("status", *map(str, three), "--shard-count", "3", dirs=three) == 0
    assert "every guild sits in the shard that owns it for 3" in capsys.readouterr().out

    started = time.perf_counter()
    back = ["reshard", "--shard-count", "2", *map(str, two), "--from", str(three[2])]
    assert eva(*back, dirs=three) == 0
    to_two = time.perf_counter() - started
    out = capsys.readouterr().out
    assert f"reshard to 2 shard(s): {GUILDS} guild(s)" in out
    assert f"holding no guild now: {three[2]}" in out
    assert digests(three) == before
    assert placement(three) == {g: {fleet.owner(g, two)} for g in fleet.guilds}
    assert markers_out_of_place(fleet, two, old=[three[2]]) == {}
    assert to_three < 20 and to_two < 20, (to_three, to_two)

    # a second run finds nothing to do
    assert eva("reshard", "--shard-count", "2", *map(str, two), dirs=two) == 0
    assert f"{GUILDS} in place, 0 moved" in capsys.readouterr().out


def test_it_refuses_while_a_bot_holds_a_directory_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = [tmp_path / "a", tmp_path / "b"]
    three = [*two, tmp_path / "c"]
    generate(two, 20)
    before = digests(two)
    held = take_writer_lock(two[1])  # as `eva run` holds it
    try:
        assert eva("reshard", "--shard-count", "3", *map(str, three), dirs=two) == 1
    finally:
        os.close(held)
    err = capsys.readouterr().err
    assert "another eva process is writing to" in err and str(two[1]) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert digests(two) == before
    assert not three[2].exists()
    assert not any((d / JOURNAL).exists() for d in two)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--shard-count", "3", "A", "B"], "--shard-count 3 needs 3 data directories"),
        (["--shard-count", "0", "A"], "--shard-count must be at least 1"),
        (["--shard-count", "2", "A", "A"], "a data directory is given twice"),
        (["--shard-count", "2", "A", "B", "--from", "NOWHERE"], "no Eva data directory at"),
    ],
)
def test_bad_arguments_are_one_line_and_nothing_is_made(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    named = [str(tmp_path / a) if a.isupper() else a for a in argv]
    assert main(["reshard", *named]) == 1
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_a_dry_run_says_what_would_move_and_moves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = [tmp_path / "a", tmp_path / "b"]
    three = [*two, tmp_path / "c"]
    fleet = generate(two, 30)
    before = digests(two)
    assert eva("reshard", "--shard-count", "3", *map(str, three), "--dry-run", dirs=two) == 0
    out = capsys.readouterr().out
    would = sum(shard_of(g, 3) != shard_of(g, 2) for g in fleet.guilds)
    assert f"{would} would move" in out and out.count(": would move") == would
    assert not three[2].exists()
    assert digests(two) == before


def test_a_channel_held_differently_in_both_places_stays_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    guild = 3 << 22  # owned by shard 1 of 2
    stream = StreamId(guild, 77)
    other = StreamId(guild, 78)
    for directory, count in ((dirs[0], 5), (dirs[1], 4)):
        store = EventStore(open_backend(directory))
        store.append(stream, posts(stream, count))
    EventStore(open_backend(dirs[0])).append(other, posts(other, 3))
    for directory in dirs:
        open_backend(directory).close()
        sealed_directory(directory)
    before = digests([dirs[0]])
    assert eva("reshard", "--shard-count", "2", *map(str, dirs), dirs=dirs) == 1
    out = capsys.readouterr().out
    assert f"guild {guild}: 2 channel(s)" in out and "NOT MOVED (conflict)" in out
    assert "1 NOT moved" in out
    assert digests([dirs[0]]) == before  # both channels stay in the source, whole
    held = (dirs[0] / "data.mdb").read_bytes()
    assert any(mark in held for mark in marks(guild))


def test_a_moved_guild_takes_its_switches_keep_outs_and_erasure_records_along(
    tmp_path: Path,
) -> None:
    from eva.core.opt_out import EVERY_GUILD
    from eva.store.guild_erasure import ask_erasure, erasure_records
    from eva.store.opt_outs import read_opt_outs, set_opt_out
    from eva.store.switches import read_switches, set_switch

    two = [tmp_path / "a", tmp_path / "b"]
    three = [*two, tmp_path / "c"]
    fleet = generate(two, 30)
    movers = [g for g in fleet.guilds if shard_of(g, 3) != shard_of(g, 2)]
    stayer = next(g for g in fleet.guilds if shard_of(g, 3) == shard_of(g, 2))
    now = int(time.time() * 1000)
    for guild in (movers[0], stayer):
        home = fleet.owner(guild, two)
        store = EventStore(open_backend(home))
        set_switch(store, fleet.streams[guild][0], False, "moderator", now)
        set_opt_out(store, guild, 7, True, "self", now)
        set_opt_out(store, EVERY_GUILD, 8, True, "operator", now)
        ask_erasure(store, guild, "left", now, now + 10**12)
        open_backend(home).close()
    assert eva("reshard", "--shard-count", "3", *map(str, three), dirs=three) == 0

    def records(directory: Path) -> tuple[set[int], set[int], set[int]]:
        store = EventStore(open_backend(directory))
        try:
            return (
                {s.guild_id for s in read_switches(store)},
                {g for g, _ in read_opt_outs(store)},
                {r.guild_id for r in erasure_records(store)},
            )
        finally:
            open_backend(directory).close()

    moved_to, moved_from = fleet.owner(movers[0], three), fleet.owner(movers[0], two)
    assert records(moved_to) == ({movers[0]}, {movers[0], EVERY_GUILD}, {movers[0]})
    switches, kept_out, erasures = records(moved_from)
    assert movers[0] not in switches | erasures and movers[0] not in kept_out
    assert EVERY_GUILD in kept_out  # a keep-out for every server stays everywhere
    stays = fleet.owner(stayer, three)
    assert records(stays)[0] >= {stayer}
