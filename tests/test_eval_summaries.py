# The offline summarizer's lines, measured by scripts/eval_summaries.py on the demo chat:
# whole clauses rather than cut starts, and more of the planted story kept.
from __future__ import annotations

from pathlib import Path

from script_module import load_script


def test_the_demo_row_keeps_whole_clauses_and_a_third_of_the_story(tmp_path: Path) -> None:
    evaluation = load_script("eval_summaries")
    store, stream = evaluation.build(evaluation.friends_export(2000), "demo", tmp_path)
    result = evaluation.measure(store, stream, evaluation.scene_facts())
    assert result["facts_under_the_row"] > 40
    assert result["cut_marks_per_line"] <= 1.0  # the truncating summarizer made about 10
    assert result["survived_share"] >= 0.3  # it kept about one fact in ten
