# A small sample of the crash suite (scripts/crash_suite.py) in the default run: one kill
# of each command that is run again after a crash, and of a forget; the suite itself runs
# over 200 kills.
from __future__ import annotations

from pathlib import Path
from types import ModuleType

from script_module import load_script

from eva.core import keys
from eva.core.keys import StreamId
from eva.core.tables import Tables


def load_suite() -> ModuleType:
    return load_script("crash_suite")


def test_a_sample_of_kills_loses_nothing_and_ends_as_a_clean_run(tmp_path: Path) -> None:
    suite = load_suite()
    commands = ["import", "build", "forget", "repair", "serve-local"]
    outcomes = suite.run_suite(5, 2, commands, tmp_path)
    assert {name: o.runs for name, o in outcomes.items()} == {
        "import": 1, "build": 1, "forget": 1, "repair": 1, "serve-local": 1,
    }
    # how many were still running when killed depends on the machine's load; each run is
    # checked the same either way
    assert [p for o in outcomes.values() for p in o.problems] == []


def test_the_suite_finds_a_lost_acknowledgement(tmp_path: Path) -> None:
    """The checks can fail: a directory missing an acknowledged line is reported."""
    suite = load_suite()
    world = suite.make_world(tmp_path)
    broken = tmp_path / "broken"
    suite.run_eva("import", str(world.export), "--data", str(broken), "--quiet")
    with suite.opened(broken) as store:
        meta = store.streams()[0]
        last = keys.event_key(StreamId(meta.guild_id, meta.channel_id), meta.position - 1)

        def drop_last(tables: Tables) -> None:
            tables.delete("events", last)

        store.backend.write(drop_last)
    problems = suite.soundness(broken)
    assert problems and "replay differs" in problems[0]
