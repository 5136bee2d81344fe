# scripts/eval_grounding.py tells a model that reads before it states a detail from one that
# answers from the row, and shows the check round turning the second into the first.
from __future__ import annotations

import argparse
from types import ModuleType

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def evaluation() -> ModuleType:
    return load_script("eval_grounding")


def test_the_two_scripted_models_are_told_apart(
    evaluation: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    def run(model: str) -> dict[str, dict[str, int]]:
        args = argparse.Namespace(questions=6, messages=2500, data=None, channel=None,
                                  model=model, seed=1)
        result = evaluation.run(args)
        assert result["questions"] >= 4
        return result  # type: ignore[no-any-return]

    careful, hasty = run("careful"), run("hasty")
    for counts in (careful["without_check"], careful["with_check"], hasty["with_check"]):
        assert counts["from_summary"] == 0 and counts["made_up"] == 0
        assert counts["read_first"] >= careful["questions"] // 2  # type: ignore[operator]
    before = hasty["without_check"]
    guessed = before["from_summary"] + before["made_up"]
    assert before["read_first"] == 0 and guessed >= hasty["questions"] // 2  # type: ignore[operator]
