# A sample of the fuzz suite (scripts/fuzz_suite.py) in the default run: a hundred mutated
# exports, stored events and gateway payloads, each ending in a clean refusal or a right
# result. The suite itself runs thousands of each.
from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    return load_script("fuzz_suite")


def test_mutated_exports_are_refused_in_one_line_or_imported_right(
    suite: ModuleType, tmp_path: Path
) -> None:
    outcomes: Counter[str] = Counter()
    suite.run_exports(100, tmp_path, outcomes)
    assert sum(outcomes.values()) == 100
    assert set(outcomes) <= {"refused in one line", "imported right"}


def test_mutated_stored_events_are_named_by_replay_and_never_fault(
    suite: ModuleType, tmp_path: Path
) -> None:
    outcomes: Counter[str] = Counter()
    suite.run_events(40, tmp_path, outcomes)
    assert outcomes["replay named it"] + outcomes["unchanged, skipped"] == 40


def test_mutated_payloads_are_left_out_or_stored_right(suite: ModuleType, tmp_path: Path) -> None:
    outcomes: Counter[str] = Counter()
    suite.run_payloads(200, tmp_path, outcomes)
    assert sum(outcomes.values()) == 200
    assert outcomes["stored right"] > 0 and outcomes["left out (PayloadError)"] > 0


def test_the_checks_can_fail(
    suite: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import that stored other than the export says is caught, as is a fault."""
    raw = suite.friends_export(5)
    outcomes: Counter[str] = Counter()
    suite.export_case(raw, tmp_path, outcomes)
    assert outcomes == {"imported right": 1}
    read = suite.stored_messages

    def one_lost(data: Path) -> object:
        return {stream: messages[:-1] for stream, messages in read(data).items()}

    monkeypatch.setattr(suite, "stored_messages", one_lost)
    with pytest.raises(suite.Unacceptable, match="imported other than the export holds"):
        suite.export_case(raw, tmp_path, outcomes)
    with pytest.raises(suite.Unacceptable):
        suite.one_clean_line(70, "eva import: unexpected KeyError\n", "import")
    with pytest.raises(suite.Unacceptable):
        suite.one_clean_line(1, "Traceback (most recent call last):\n  x\n", "import")
