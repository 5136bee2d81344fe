# The offline summarizer's lines, measured by scripts/eval_summaries.py on the demo chat:
# whole clauses rather than cut starts, and more of the planted story kept.
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "eval_summaries.py"


def test_the_demo_row_keeps_whole_clauses_and_a_third_of_the_story(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("eval_summaries", SCRIPT)
    assert spec is not None and spec.loader is not None
    evaluation = importlib.util.module_from_spec(spec)
    sys.modules["eval_summaries"] = evaluation
    spec.loader.exec_module(evaluation)
    store, stream = evaluation.build(evaluation.friends_export(2000), "demo", tmp_path)
    result = evaluation.measure(store, stream, evaluation.scene_facts())
    assert result["facts_under_the_row"] > 40
    assert result["cut_marks_per_line"] <= 1.0  # the truncating summarizer made about 10
    assert result["survived_share"] >= 0.3  # it kept about one fact in ten
