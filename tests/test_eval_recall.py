# scripts/eval_recall.py: hit rate against the bytes shown, BM25 given the same bytes.
from __future__ import annotations

from script_module import load_script


def test_the_curve_gives_bm25_no_more_bytes_than_eva_used_at_each_budget() -> None:
    evaluation = load_script("eval_recall")
    figures = evaluation.main(["--chat", "demo", "--curve", "2000,6000"])
    curve = figures["by_bytes"]
    assert set(curve) == {"2000", "6000"}
    for budget in ("2000", "6000"):
        assert curve[budget]["eva_bytes_mean"] <= int(budget)
        assert 0 < curve[budget]["bm25_bytes_mean"] <= curve[budget]["eva_bytes_mean"]
        for name in ("eva", "bm25"):
            assert 0.0 <= curve[budget][name]["all"] <= 1.0
            assert set(curve[budget][name]) >= {"tuning", "held-out", "fresh", "fact", "time"}
    # more bytes shown never finds less, for Eva, on the same questions
    assert curve["6000"]["eva"]["all"] >= curve["2000"]["eva"]["all"]
