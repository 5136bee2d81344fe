"""eva reshard killed at any point: run again, it finishes with nothing lost or doubled.

`reshard_child.py` is `eva reshard` with small batches and copy transactions, killed
with SIGKILL at one step (during a copy transaction, once the journal names guilds,
once they are removed, during the compacting copy, once the compacted file is in place,
once the journal is dropped) or at a random moment. After a kill every channel is still
stored whole somewhere, equal to the original (a copy not yet removed from its source is
the same channel twice, never a different one); after the rerun every channel is in its
owner's directory only, equal to the original, and no directory's files hold a byte of a
guild it does not own. SIGKILL tests a process crash, not a power cut.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet import Fleet, digests, generate, markers_out_of_place, placement
from killing import child_env
from reshard_child import NOT_REACHED, STEPS

from eva.cli.main import main
from eva.core.keys import StreamId
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream
from eva.store.reshard import JOURNAL

CHILD = Path(__file__).with_name("reshard_child.py")
GUILDS = 60
SEED = 20260301
KILLS_IN_TIME = 5
LAST_CALL = {  # the highest call of each step a 2 -> 3 reshard of the fleet surely makes
    "copy": 6,
    "journal": 3,
    "remove": 3,
    "compact_copy": 20,
    "compact_swap": 2,
    "journal_dropped": 2,
}

State = dict[StreamId, tuple[str, int, str]]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Fleet, State]:
    base = tmp_path_factory.mktemp("reshard-crash")
    two = [base / "shard-0", base / "shard-1"]
    fleet = generate(two, GUILDS, seed=SEED, built_every=10)
    return base, fleet, digests(two)


def fresh(pristine: tuple[Path, Fleet, State], tmp_path: Path) -> list[Path]:
    base = pristine[0]
    for name in ("shard-0", "shard-1"):
        shutil.copytree(base / name, tmp_path / name)
    return [tmp_path / f"shard-{n}" for n in range(3)]


def run_child(step: str, nth: int, argv: list[str]) -> int:
    done = subprocess.run(
        [sys.executable, str(CHILD), step, str(nth), *argv],
        capture_output=True,
        env=child_env(),
        timeout=60,
    )
    assert done.returncode in (-signal.SIGKILL, NOT_REACHED), done.stderr.decode()[-2000:]
    return done.returncode


def nothing_lost(dirs: list[Path], before: State) -> None:
    """Every channel stored whole somewhere and equal to the original; a channel stored
    twice (copied, not yet removed) is the same channel in both places."""
    seen: dict[StreamId, int] = {}
    for directory in dirs:
        if not (directory / "data.mdb").exists():
            continue
        backend = open_backend(directory)
        try:
            store = EventStore(backend)
            for meta in store.streams():
                stream = StreamId(meta.guild_id, meta.channel_id)
                result = replay_stream(store, stream)
                assert result.ok, result
                assert result.log is not None
                found = (result.rebuilt_digest, result.events, result.log.head)
                assert found == before[stream], f"{stream} in {directory} differs"
                seen[stream] = seen.get(stream, 0) + 1
        finally:
            backend.close()
    assert set(seen) == set(before), set(before) - set(seen)
    assert max(seen.values()) <= 2


def finished(dirs: list[Path], fleet: Fleet, before: State, shards: list[Path]) -> None:
    """Run the reshard to the end in this process and check the end state."""
    old = [d for d in dirs if d not in shards]
    argv = ["reshard", "--shard-count", str(len(shards)), *map(str, shards), "--quiet"]
    if old:
        argv += ["--from", *map(str, old)]
    try:
        assert main(argv) == 0
    finally:
        for directory in dirs:
            if (directory / "data.mdb").exists():
                open_backend(directory).close()
    assert digests(dirs) == before
    assert placement(dirs) == {g: {fleet.owner(g, shards)} for g in fleet.guilds}
    assert markers_out_of_place(fleet, shards, old) == {}
    assert not any((d / JOURNAL).exists() for d in dirs)


@pytest.mark.parametrize("step", STEPS)
def test_a_reshard_killed_at_a_step_and_run_again_ends_whole(
    step: str,
    pristine: tuple[Path, Fleet, State],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, fleet, before = pristine
    dirs = fresh(pristine, tmp_path)
    argv = ["--shard-count", "3", *map(str, dirs)]
    rng = random.Random(f"{SEED}-{step}")
    # killed the first time it reaches the step; then the rerun is killed at a later
    # time it reaches it, if it still does (else it finished)
    assert run_child(step, 1, argv) == -signal.SIGKILL
    nothing_lost(dirs, before)
    run_child(step, rng.randint(1, LAST_CALL[step]), argv)
    nothing_lost(dirs, before)
    finished(dirs, fleet, before, dirs)
    assert "already" not in capsys.readouterr().err


def test_a_reshard_killed_at_random_moments_there_and_back_ends_whole(
    pristine: tuple[Path, Fleet, State], tmp_path: Path
) -> None:
    _, fleet, before = pristine
    dirs = fresh(pristine, tmp_path)
    rng = random.Random(SEED)
    two, three = dirs[:2], dirs
    there = ["--shard-count", "3", *map(str, three)]
    back = ["--shard-count", "2", *map(str, two), "--from", str(dirs[2])]
    kills = 0
    for argv, shards in ((there, three), (back, two)):
        for _ in range(KILLS_IN_TIME):
            kills += kill_at_random(argv, rng)
            nothing_lost(dirs, before)
        finished(dirs, fleet, before, shards)
    print(f"{kills} of {2 * KILLS_IN_TIME} runs killed before they finished")
    assert kills >= KILLS_IN_TIME  # most runs were cut short, not finished


def kill_at_random(argv: list[str], rng: random.Random) -> bool:
    """Start the child, kill it a random while after it starts the command; whether it was
    still running then."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "time", "0", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        assert child.stdout.readline() == b"ack\n", child.stderr.read()
        time.sleep(rng.uniform(0.0, 0.5))
        running = child.poll() is None
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert child.returncode in (-signal.SIGKILL, 0), child.returncode
    return running
