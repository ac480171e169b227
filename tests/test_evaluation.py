"""Metrics checked against hand-computed values, dataset parsing errors, and the evaluation
matrix (bench/evaluate_matrix.py) measuring the product's defaults."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE, SHARED_DATA, TINY_CORPUS, load_script, run, write_jsonl
from hypothesis import given
from hypothesis import strategies as st

from reranker.config import DEFAULT_FUSION_WEIGHT, DEFAULT_RANKER, WORD2VEC_DIM, WORD2VEC_EPOCHS
from reranker.datasets import Dataset, cocitation_judgments, load_cocitation_dataset, load_dataset, load_qrels, load_queries
from reranker.errors import InputError
from reranker.evaluation import (
    EvaluationResult,
    evaluate,
    holm_adjusted,
    metric_names,
    paired_randomization_p,
    paired_t_p,
    precision_bins,
    ranking_metrics,
    summarise,
    table_metric_names,
)
from reranker.indexing import index_corpus
from reranker.pipeline import Engine
from reranker.reports import evaluation_table, format_p, plot_precision_bins

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_metrics_by_hand() -> None:
    relevant = {"a": 1, "c": 1, "z": 1}  # "z" is never retrieved
    metrics = ranking_metrics(["b", "a", "d", "c", "e"], relevant, window=5)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert metrics["ndcg@10"] == pytest.approx(dcg / ideal)
    assert metrics["p@1"] == 0.0 and metrics["p@3"] == pytest.approx(1 / 3)
    assert metrics["p@5"] == pytest.approx(2 / 5) and metrics["p@10"] == pytest.approx(2 / 10)
    assert metrics["p@6"] == pytest.approx(2 / 6)  # the window holds 5: the sixth counts as a miss
    assert metrics["map"] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert metrics["mrr"] == pytest.approx(1 / 2)
    assert metrics["recall@5"] == pytest.approx(2 / 3)
    assert list(metrics) == metric_names(5)
    assert table_metric_names(5) == ["ndcg@10", "p@1", "p@3", "p@5", "p@10", "map", "mrr", "recall@5"]


def test_precision_at_six_counts_the_first_six() -> None:
    ranked = ["a", "x", "b", "y", "c", "d", "e"]
    metrics = ranking_metrics(ranked, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, window=7)
    assert metrics["p@6"] == pytest.approx(4 / 6) and metrics["p@5"] == pytest.approx(3 / 5)
    assert metrics["p@10"] == pytest.approx(5 / 10)


def test_graded_relevance_and_the_window_cut() -> None:
    metrics = ranking_metrics(["x", "a", "b"], {"a": 2, "b": 1}, window=2)
    assert metrics["recall@2"] == 0.5  # "b" lies past the window
    ideal = 3 + 1 / math.log2(3)
    assert metrics["ndcg@10"] == pytest.approx((3 / math.log2(3)) / ideal)
    assert ranking_metrics([], {"a": 1}, window=10)["mrr"] == 0.0


def test_paired_randomization_test() -> None:
    better = [0.9, 0.8, 0.85, 0.95, 0.9, 0.7, 0.88, 0.92, 0.8, 0.9, 0.85, 0.9]
    worse = [x - 0.2 for x in better]
    assert paired_randomization_p(better, worse) < 0.01
    assert paired_randomization_p(better, better) == 1.0
    noisy = [x + (0.01 if i % 2 else -0.01) for i, x in enumerate(better)]
    assert paired_randomization_p(better, noisy) > 0.5
    assert paired_randomization_p(better, worse) == paired_randomization_p(better, worse)  # fixed seed


def test_few_queries_get_the_exact_randomization_p() -> None:
    """With 2^n <= the 10,000 rounds (n <= 13) every sign pattern is tried, so p is a count
    over 2^n, and scipy's permutation_test, which enumerates too when its resamples cover
    every pattern, gives the same. Sampling printed 0.065 where 2/2^5 = 0.0625 is the answer."""
    import numpy as np
    from scipy.stats import permutation_test

    assert paired_randomization_p([1.0] * 5, [0.0] * 5) == 2 / 2**5
    assert paired_randomization_p([0.2, 0.7], [0.7, 0.2]) == 1.0  # opposite differences: every pattern reaches 0
    # Pairs with no difference stay in n and change nothing: flipping a zero moves no mean,
    # so the p over 3 gains and 2 ties is the one over the 3 gains alone.
    assert paired_randomization_p([1.0, 1.0, 1.0, 0.5, 0.5], [0.0, 0.0, 0.0, 0.5, 0.5]) == 2 / 2**3
    rng = np.random.default_rng(44)
    assert paired_randomization_p([0.3], [0.1]) == 1.0  # one pair: its flip gives the same |mean|
    for queries in (2, 3, 5, 9, 13):
        a = rng.random(queries)
        b = a - 0.05 + rng.normal(0.0, 0.1, queries)
        b[: queries // 3] = a[: queries // 3]  # a few ties
        ours = paired_randomization_p(list(a), list(b))
        assert ours * 2**queries == round(ours * 2**queries), (queries, ours)
        theirs = permutation_test((a - b,), lambda d, axis: np.mean(d, axis=axis), permutation_type="samples", vectorized=True,
                                  n_resamples=10_000, alternative="two-sided").pvalue  # fmt: skip
        assert ours == pytest.approx(theirs, rel=1e-12), (queries, ours, theirs)
    # 14 queries have 16,384 patterns, more than the rounds: sampled, (extreme + 1) / 10,001.
    sampled = paired_randomization_p([1.0] * 14, [0.0] * 14)
    assert sampled * 10_001 == pytest.approx(round(sampled * 10_001)) and sampled != 2 / 2**14


def test_the_randomization_test_agrees_with_scipys_permutation_test() -> None:
    """Ours is kept for speed (its docstring); its p-value must be scipy's, up to the
    Monte-Carlo error of two independent 10,000-flip estimates."""
    import numpy as np
    from scipy.stats import permutation_test

    rng = np.random.default_rng(2018)
    for queries, shift in ((40, 0.03), (76, 0.02), (76, 0.0)):
        a = rng.random(queries)
        b = a - shift + rng.normal(0.0, 0.1, queries)
        ours = paired_randomization_p(list(a), list(b))
        theirs = permutation_test((a - b,), lambda d, axis: np.mean(d, axis=axis), permutation_type="samples", vectorized=True,
                                  n_resamples=10_000, alternative="two-sided", random_state=7).pvalue  # fmt: skip
        error = math.sqrt(2 * max(ours * (1 - ours), 1e-4) / 10_000)
        assert abs(ours - theirs) < 5 * error, (queries, shift, ours, theirs)


def test_paired_t_test() -> None:
    better = [0.9, 0.8, 0.85, 0.95, 0.9, 0.7, 0.88, 0.92, 0.8, 0.9, 0.85, 0.9]
    worse = [x - 0.2 + (0.01 if i % 3 else 0.0) for i, x in enumerate(better)]
    assert paired_t_p(better, worse) < 0.001
    # The textbook statistic, t = mean / (sd / sqrt(n)) with n - 1 degrees of freedom.
    noisy_pairs = [x + 0.03 * math.sin(i) for i, x in enumerate(better)]
    diffs = [x - y for x, y in zip(better, noisy_pairs)]
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    from scipy.stats import t as student_t

    assert paired_t_p(better, noisy_pairs) == pytest.approx(2 * student_t.sf(abs(mean / (sd / math.sqrt(len(diffs)))), len(diffs) - 1), rel=1e-9)
    assert paired_t_p(better, better) == 1.0
    assert paired_t_p([1.0, 1.0], [0.0, 0.0]) == 0.0  # every query moved by the same amount
    noisy = [x + (0.01 if i % 2 else -0.01) for i, x in enumerate(better)]
    assert paired_t_p(better, noisy) > 0.5
    with pytest.raises(ValueError):
        paired_t_p([[1.0, 2.0]], [[0.0, 1.0]])


def holm_by_the_formula(p_values: list[float]) -> list[float]:
    """Holm (1979) transcribed loop by loop: sort ascending, then adjusted p(i) =
    max over j <= i of min(1, (m - j + 1) p(j)), returned in the input's order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    for i in range(1, m + 1):
        adjusted[order[i - 1]] = max(min(1.0, (m - j + 1) * p_values[order[j - 1]]) for j in range(1, i + 1))
    return adjusted


def test_holm_by_hand() -> None:
    # Sorted: 0.01, 0.03, 0.04 -> 3 x 0.01 = 0.03; max(0.03, 2 x 0.03) = 0.06; max(0.06, 1 x 0.04) = 0.06.
    adjusted = holm_adjusted({"a": {"ndcg@10": 0.01}, "b": {"ndcg@10": 0.04}, "c": {"ndcg@10": 0.03}})
    assert adjusted == {"a": {"ndcg@10": pytest.approx(0.03)}, "b": {"ndcg@10": pytest.approx(0.06)}, "c": {"ndcg@10": pytest.approx(0.06)}}
    # Each metric is a family of its own: map's order is not ndcg@10's, and (m - j + 1) p is capped at 1.
    both = holm_adjusted({"a": {"ndcg@10": 0.01, "map": 0.6}, "b": {"ndcg@10": 0.5, "map": 0.02}})
    assert both == {"a": {"ndcg@10": pytest.approx(0.02), "map": pytest.approx(0.6)}, "b": {"ndcg@10": pytest.approx(0.5), "map": pytest.approx(0.04)}}
    assert holm_adjusted({"a": {"mrr": 0.6}, "b": {"mrr": 0.7}}) == {"a": {"mrr": 1.0}, "b": {"mrr": 1.0}}
    assert holm_adjusted({"a": {"mrr": 0.02}, "b": {"mrr": 0.02}}) == {"a": {"mrr": 0.04}, "b": {"mrr": 0.04}}  # ties
    assert holm_adjusted({}) == {}


P_VALUES = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(st.lists(P_VALUES, min_size=1, max_size=12))
def test_holm_properties(raw: list[float]) -> None:
    names = [f"r{i}" for i in range(len(raw))]
    adjusted = [holm_adjusted({name: {"ndcg@10": p} for name, p in zip(names, raw)})[name]["ndcg@10"] for name in names]
    assert adjusted == pytest.approx(holm_by_the_formula(raw), abs=1e-15)
    m = len(raw)
    for p, q in zip(raw, adjusted):
        assert p <= q <= min(1.0, m * p) + 1e-15  # never below the raw p, never above Bonferroni's
    for i in range(m):
        for j in range(m):
            if raw[i] <= raw[j]:
                assert adjusted[i] <= adjusted[j]  # the order of the p-values is kept
    if m == 1:
        assert adjusted == raw


def test_the_holm_p_values_are_one_family_per_baseline_and_metric() -> None:
    result = synthetic_result(bm25=0.0, hidden_topics=-0.2, copy=0.0, better=0.2)
    assert result.holm_p_values == {baseline: holm_adjusted(by_ranker) for baseline, by_ranker in result.p_values.items()}
    assert result.holm_p_values["bm25"]["better"]["ndcg@10"] > result.p_values["bm25"]["better"]["ndcg@10"]
    assert result.holm_p_values["bm25"]["copy"] == result.p_values["bm25"]["copy"]  # p = 1 stays 1


def synthetic(values: list[float], shift: float, window: int = 100) -> dict[str, dict[str, float]]:
    """A per-query table in which every metric of query i is values[i] + shift."""
    return {f"q{i}": {m: v + shift for m in metric_names(window)} for i, v in enumerate(values)}


BASE = [0.3, 0.5, 0.4, 0.6, 0.35, 0.55, 0.45, 0.5, 0.4, 0.3, 0.6, 0.5]


def synthetic_result(**shifts: float) -> EvaluationResult:
    return summarise("synthetic", 100, {name: synthetic(BASE, shift) for name, shift in shifts.items()})


def test_p_values_against_both_baselines() -> None:
    result = synthetic_result(bm25=0.0, hidden_topics=-0.2, copy=0.0, better=0.2)
    assert result.baselines == ("bm25", "hidden_topics")
    for p_values in (result.p_values, result.t_test_p_values):
        assert set(p_values) == {"bm25", "hidden_topics"}
        assert set(p_values["bm25"]) == {"hidden_topics", "copy", "better"}
        assert set(p_values["hidden_topics"]) == {"bm25", "copy", "better"}
        for versus in p_values.values():
            for metrics in versus.values():
                assert list(metrics) == metric_names(100)
                assert all(0.0 <= p <= 1.0 for p in metrics.values())
        assert all(p == 1.0 for p in p_values["bm25"]["copy"].values())
        assert p_values["bm25"]["better"]["ndcg@10"] < 0.01
        assert p_values["hidden_topics"]["bm25"]["map"] < 0.01
    assert result.results["better"]["p@6"] == pytest.approx(sum(BASE) / len(BASE) + 0.2)
    assert result.wins_ties_losses("bm25")["better"] == (12, 0, 0)
    assert result.wins_ties_losses("bm25")["copy"] == (0, 12, 0)
    assert result.wins_ties_losses("bm25")["hidden_topics"] == (0, 0, 12)
    # Without hidden_topics there is one baseline.
    alone = synthetic_result(bm25=0.0, better=0.2)
    assert alone.baselines == ("bm25",) and set(alone.p_values) == {"bm25"}
    with pytest.raises(ValueError, match="same, non-empty set of queries"):
        summarise("x", 100, {"bm25": synthetic(BASE, 0.0), "other": synthetic(BASE[:3], 0.0)})


def test_the_table_has_a_row_per_ranker_marks_and_a_caption() -> None:
    result = summarise(
        "synthetic",
        100,
        {name: synthetic(BASE, shift) for name, shift in {"bm25": 0.0, "hidden_topics": -0.2, "copy": 0.0}.items()},
        config={"vectors": "glove-6b-50d", "dim": 50, "k": 15},
    )
    caption, blank, header, rule, *rows = evaluation_table(result).splitlines()
    assert blank == ""
    assert "synthetic, 12 queries, BM25 top 100 reranked, vectors glove-6b-50d (d=50), K=15" in caption
    assert "† p < 0.05 against bm25; ‡ p < 0.05 against hidden_topics" in caption
    assert "paired randomisation test" in caption
    assert "no ranker can be marked" not in caption  # 12 queries can reach p < 0.05
    assert header == (
        "| ranker | nDCG@10 | P@1 | P@3 | P@5 | P@10 | MAP | MRR | R@100 "
        "| nDCG@10 p (Holm) vs bm25 | nDCG@10 p (Holm) vs hidden_topics | W/T/L vs bm25 |"
    )
    assert "Holm's step-down method over the rankers tested against that baseline (2 against bm25, 2 against hidden_topics)" in caption
    assert "not corrected for multiple comparisons" in caption  # what the marks still are
    assert rule.count("|") == header.count("|")
    assert [row.split(" | ")[0] for row in rows] == ["| bm25", "| hidden_topics", "| copy"]
    bm25, hidden, copy = (row.split(" | ") for row in rows)
    assert hidden[1].endswith("†") and not hidden[1].endswith("‡")  # worse than BM25
    assert bm25[1].endswith("‡") and copy[1].endswith("‡") and "†" not in copy[1]
    assert hidden[-1] == "0/0/12 |" and copy[-1] == "0/12/0 |" and bm25[-1] == "– |"
    holm = result.holm_p_values
    assert bm25[-3:-1] == ["–", format_p(holm["hidden_topics"]["bm25"]["ndcg@10"])]
    assert hidden[-3:-1] == [format_p(holm["bm25"]["hidden_topics"]["ndcg@10"]), "–"]
    assert copy[-3:-1] == ["1.000", format_p(holm["hidden_topics"]["copy"]["ndcg@10"])]
    assert "P@6" not in header
    # One ranker tested against the one baseline: its raw p (Holm's would be the same), which
    # the text gave nowhere before (only a mark), and the caption says why it is not Holm's.
    alone = summarise("synthetic", 100, {"bm25": synthetic(BASE, 0.0), "better": synthetic(BASE, 0.2)})
    caption, _, header, _, bm25_row, better_row = evaluation_table(alone).splitlines()
    assert "Holm" not in header and header.endswith("| R@100 | nDCG@10 p vs bm25 | W/T/L vs bm25 |")
    assert better_row.split(" | ")[-2] == format_p(alone.p_values["bm25"]["better"]["ndcg@10"])
    assert bm25_row.split(" | ")[-2] == "–"
    assert (
        "One ranker is tested against bm25, so Holm's correction for multiple comparisons changes nothing there: "
        "its p is in the column nDCG@10 p vs bm25."
    ) in caption


def test_json_round_trip() -> None:
    result = synthetic_result(bm25=0.0, hidden_topics=-0.2)
    body = json.loads(json.dumps(result.to_json(per_query=True)))
    assert body["wins_ties_losses"]["bm25"]["hidden_topics"] == [0, 0, 12]
    assert "randomisation" in body["significance_test"]
    assert EvaluationResult.from_json(body) == result
    assert body["holm_p_values"] == result.holm_p_values
    # A result saved before the Holm p-values existed reads back, and gets them.
    del body["holm_p_values"]
    assert EvaluationResult.from_json(body) == result and EvaluationResult.from_json(body).to_json()["holm_p_values"] == result.holm_p_values
    assert "per_query" not in result.to_json()
    # The reason is the reader's to act on, not Python's name for it ("KeyError: 'queries'").
    with pytest.raises(InputError, match=r"^not an evaluation result \(no 'queries' field\)$"):
        EvaluationResult.from_json({"dataset": "x"})
    with pytest.raises(InputError, match=r"^not an evaluation result \(invalid literal for int\(\) with base 10: 'x'\)$"):
        EvaluationResult.from_json({"dataset": "x", "queries": "x"})


def test_precision_bins_are_exact_shares() -> None:
    # Three queries: P@1 = 1, 0, 1; P@3 = 3/3, 1/3, 2/3.
    relevant = {"q1": {"a": 1, "b": 1, "c": 1}, "q2": {"c": 1}, "q3": {"a": 1, "b": 1}}
    ranked = ["a", "b", "c", "d", "e", "f"]
    other = ["d", "e", "f", "a", "b", "c"]
    per_query = {
        "bm25": {q: ranking_metrics(ranked, rel, 10) for q, rel in relevant.items()},
        "other": {q: ranking_metrics(other, rel, 10) for q, rel in relevant.items()},
    }
    bins = precision_bins(summarise("hand", 10, per_query))
    assert set(bins) == {1, 3, 6}
    assert bins[1]["bm25"] == pytest.approx((1 / 3, 2 / 3))
    assert bins[3]["bm25"] == pytest.approx((0, 1 / 3, 1 / 3, 1 / 3))
    assert bins[3]["other"] == pytest.approx((1.0, 0, 0, 0))
    assert bins[6]["other"] == pytest.approx((0, 1 / 3, 1 / 3, 1 / 3, 0, 0, 0))
    for k, by_ranker in bins.items():
        for shares in by_ranker.values():
            assert len(shares) == k + 1 and sum(shares) == pytest.approx(1.0)
    with pytest.raises(InputError, match="no per-query p@2"):
        precision_bins(summarise("hand", 10, per_query), ks=(2,))


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 10_000


def test_the_figure_is_a_png(tmp_path: Path) -> None:
    glove = synthetic_result(bm25=0.0, hidden_topics=-0.2, better=0.1)
    assert plot_precision_bins(glove, tmp_path / "one.png") == tmp_path / "one.png"
    assert_png(tmp_path / "one.png")
    plot_precision_bins([glove, synthetic_result(bm25=0.0, better=0.2)], tmp_path / "two.png")
    assert_png(tmp_path / "two.png")
    with pytest.raises(InputError, match="no per-query p@1 for 'bm25'"):
        plot_precision_bins(EvaluationResult.from_json(glove.to_json()), tmp_path / "none.png")


def test_evaluate_on_a_tiny_corpus(tmp_path: Path, engine: Engine) -> None:
    index_corpus(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS), engine.store, engine.vectors, 5, show_progress=False)
    dataset = Dataset(
        "tiny",
        tmp_path / "c.jsonl",
        (("q1", "sailors and a captain at sea"), ("q2", "bake bread in an oven"), ("q3", "the king in chess")),
        {"q1": {"ships": 1}, "q2": {"cooking": 1}, "q3": {"chess": 1}},
    )
    calls: list[None] = []
    result = evaluate(
        engine, dataset, ["hidden_topics", "hidden_topics+bm25"], window=10, on_query=lambda: calls.append(None)
    )
    assert len(calls) == 3 and result.queries == 3
    assert result.rankers == ("hidden_topics", "hidden_topics+bm25", "bm25")  # BM25 is always there
    assert result.baselines == ("bm25", "hidden_topics")
    assert set(result.p_values["bm25"]) == {"hidden_topics", "hidden_topics+bm25"}
    assert set(result.p_values["hidden_topics"]) == {"bm25", "hidden_topics+bm25"}
    assert result.approximate == {"hidden_topics": 0, "hidden_topics+bm25": 0, "bm25": 0}
    assert result.results["bm25"]["p@1"] == 1.0 and result.results["bm25"]["recall@10"] == 1.0
    assert list(result.per_query["bm25"]["q1"]) == metric_names(10)


def test_cli_writes_the_figure_and_the_table(data_dir: Path, tmp_path: Path) -> None:
    plot, markdown = tmp_path / "sample.png", tmp_path / "sample.md"
    code, out = run(
        data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25,hidden_topics", "--window", "50",
        "--plot", str(plot), "--markdown", str(markdown), "--no-progress",
    )
    assert code == 0
    assert_png(plot)
    table = markdown.read_text(encoding="utf-8")
    assert table.startswith("sample, 5 queries, BM25 top 50 reranked, vectors glove-6b-50d (d=50), K=15")
    assert "| bm25 |" in table and "| hidden_topics |" in table
    assert table.strip() in out and f"figure: {plot}" in out and f"table: {markdown}" in out
    code, out = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "hidden_topics", "--json", "--plot", str(plot))
    body = json.loads(out)  # the figure is written, standard output stays one JSON object
    assert code == 0 and set(body["p_values"]) == {"bm25", "hidden_topics"}
    assert 0.0 < body["p_values"]["bm25"]["hidden_topics"]["ndcg@10"] <= 1.0


def test_cli_evaluate_json_holds_the_holm_p_values_of_its_p_values(data_dir: Path) -> None:
    """End to end on the sample: the JSON's holm_p_values are holm_adjusted of the p_values
    it prints, per baseline, and the table shows the headline metric's."""
    rankers = "bm25,hidden_topics,hidden_topics_corrected+bm25:maxp"
    code, out = run(data_dir, "evaluate", str(SAMPLE), "--rankers", rankers, "--json", "--no-progress")
    assert code == 0
    body = json.loads(out)
    assert set(body["holm_p_values"]) == set(body["p_values"]) == {"bm25", "hidden_topics"}
    for baseline, by_ranker in body["p_values"].items():
        assert body["holm_p_values"][baseline] == holm_adjusted(by_ranker)
    # Not vacuous: two rankers are tested against bm25, so the smaller nDCG@10 p is doubled.
    smallest = min(by_metric["ndcg@10"] for by_metric in body["p_values"]["bm25"].values())
    assert smallest < 0.5 and min(by_metric["ndcg@10"] for by_metric in body["holm_p_values"]["bm25"].values()) == pytest.approx(2 * smallest)
    code, table = run(data_dir, "evaluate", str(SAMPLE), "--rankers", rankers, "--no-progress")
    header, _, *rows = table.splitlines()[2:]
    assert "| nDCG@10 p (Holm) vs bm25 | nDCG@10 p (Holm) vs hidden_topics | W/T/L vs bm25 |" in header
    hidden = next(row for row in rows if row.startswith("| hidden_topics |")).split(" | ")
    assert hidden[-3] == format_p(body["holm_p_values"]["bm25"]["hidden_topics"]["ndcg@10"])


def test_cli_refuses_an_unwritable_output_before_evaluating(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(data_dir, "evaluate", str(SAMPLE), "--plot", str(tmp_path))[0] == 2
    assert capsys.readouterr().err == f"reranker: error: --plot {tmp_path}: is a folder; expected a file\n"
    assert not (data_dir / "eval").exists()  # nothing was indexed


def test_cli_refuses_a_plot_named_other_than_png_before_evaluating(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plot fig.txt wrote PNG bytes into fig.txt, after the whole evaluation."""
    figure = tmp_path / "fig.txt"
    assert run(data_dir, "evaluate", str(SAMPLE), "--plot", str(figure))[0] == 2
    assert capsys.readouterr().err == f"reranker: error: --plot {figure}: the figure is a PNG image; expected a name ending in .png\n"
    assert not figure.exists() and not (data_dir / "eval").exists()  # nothing was indexed


def test_malformed_files_name_the_file_and_line(tmp_path: Path) -> None:
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"id": "q1", "text": "fine"}, "{oops"])
    with pytest.raises(InputError, match=r"queries.jsonl:2: not valid JSON"):
        load_queries(queries)
    write_jsonl(queries, [{"id": "q1", "text": ""}])
    with pytest.raises(InputError, match=r"queries.jsonl:1: id 'q1': empty text"):
        load_queries(queries)
    # Two queries under one id: results are per id, so one would silently go unmeasured.
    write_jsonl(queries, [{"id": "q1", "text": "ships"}, {"id": "q2", "text": "boats"}, {"id": 1, "text": "x"}, {"id": "q1", "text": "sails"}])
    with pytest.raises(InputError, match=r"queries.jsonl:4: id 'q1' is given again \(first on line 1\): each query needs an id of its own$"):
        load_queries(queries)
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1\td1\t1\nq1 d2\n")
    with pytest.raises(InputError, match=r"qrels.tsv:2: expected 3 tab-separated columns \(query_id, doc_id, relevance\) or the TREC layout's 4 \(query_id, iteration, doc_id, relevance\), got 1$"):
        load_qrels(qrels)
    # TREC's own qrels files separate their columns with spaces: the message says to use tabs.
    for spaced in ("q1 0 d2 1\n", "q1 d2 1\n"):
        qrels.write_text(spaced)
        with pytest.raises(InputError, match=r"qrels.tsv:1: expected .*, got 1: the columns are separated by spaces.* separate them by tabs"):
            load_qrels(qrels)
    qrels.write_text("q1\td1\tyes\n")
    with pytest.raises(InputError, match=r"qrels.tsv:1: relevance must be an integer"):
        load_qrels(qrels)
    qrels.write_text("q1\t0\td1\t1\nq1\td2\t0\n")  # TREC layout; zero means not relevant
    assert load_qrels(qrels) == {"q1": {"d1": 1}}
    # A pair judged twice with two grades: the last one silently won; the same row twice is fine.
    qrels.write_text("q1\td1\t1\nq1\td2\t2\nq1\td1\t1\nq1\td2\t0\n")
    with pytest.raises(InputError, match=r"qrels.tsv:4: query 'q1', document 'd2': relevance 0, but 2 on line 2$"):
        load_qrels(qrels)
    with pytest.raises(InputError, match="not a dataset folder"):
        load_dataset(tmp_path / "nowhere")
    # An empty (or blank) queries file is named, not blamed on the judgments.
    folder = tmp_path / "judged"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", [{"id": "d1", "text": "ships"}])
    (folder / "queries.jsonl").write_text("\n")
    (folder / "qrels.tsv").write_text("q1\td1\t1\n")
    with pytest.raises(InputError, match=r"judged/queries.jsonl: no queries: expected one \{\"id\", \"text\"\} object per line$"):
        load_dataset(folder)


@pytest.mark.skipif(not (SHARED_DATA / "cisi").is_dir(), reason="../shared/data is not beside the repo")
def test_the_shared_datasets_parse() -> None:
    cisi = load_dataset(SHARED_DATA / "cisi")
    assert len(cisi.queries) == 76 and sum(len(v) for v in cisi.qrels.values()) == 3114
    scisumm = load_dataset(SHARED_DATA / "clscisumm2018-train", "queries_abstract.jsonl")
    assert len(scisumm.queries) == 40


def test_cli_trains_doc2vec_for_the_evaluation_index_once(data_dir: Path) -> None:
    code, out = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25,doc2vec", "--no-progress")
    assert code == 0 and "| doc2vec |" in out
    models = sorted((data_dir / "doc2vec").glob("*.model"))
    assert len(models) == 1
    code, again = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25,doc2vec", "--no-progress")
    assert code == 0 and again == out  # the recorded model is reused: same vectors, same table
    assert sorted((data_dir / "doc2vec").glob("*.model")) == models


def test_metrics_agree_with_trec_eval(tmp_path: Path) -> None:
    """Our metrics against ir_measures (pytrec_eval, i.e. trec_eval's own code) on random
    graded rankings, read back from the TREC run file `--run-dir` writes. nDCG uses gain
    2^rel - 1 here, so trec_eval is given those gains."""
    import random

    import ir_measures
    from ir_measures import AP, RR, P, R, nDCG

    from reranker.evaluation import write_trec_runs

    rng = random.Random(11)
    window = 30
    qrels: dict[str, dict[str, int]] = {}
    ranked: dict[str, tuple[str, ...]] = {}
    for q in range(25):
        pool = [f"d{i}" for i in range(60)]
        qrels[f"q{q}"] = {doc: rng.choice([1, 1, 2, 3]) for doc in rng.sample(pool, rng.randint(1, 12))}
        ranked[f"q{q}"] = tuple(rng.sample(pool, window))
    (path,) = write_trec_runs({"rank+er:rrf": ranked}, tmp_path, "toy")
    assert path.name == "toy.rank+er_rrf.run"
    run = list(ir_measures.read_trec_run(str(path)))
    qrel_rows = [ir_measures.Qrel(q, d, r) for q, docs in qrels.items() for d, r in docs.items()]
    gains = {r: 2**r - 1 for r in range(4)}
    measures = {"ndcg@10": nDCG(gains=gains) @ 10, "p@1": P @ 1, "p@5": P @ 5, "map": AP, "mrr": RR, f"recall@{window}": R @ window}
    theirs: dict[tuple[str, str], float] = {}
    for metric in ir_measures.iter_calc(list(measures.values()), qrel_rows, run):
        theirs[(metric.query_id, str(metric.measure))] = metric.value
    for query_id in qrels:
        ours = ranking_metrics(ranked[query_id], qrels[query_id], window)
        for name, measure in measures.items():
            assert ours[name] == pytest.approx(theirs[(query_id, str(measure))], abs=1e-9), (query_id, name)


# --- "papers like this one": co-citation judgments --------------------------------------


def test_cocitation_judgments_pair_the_papers_that_cite_one_reference() -> None:
    qrels = {
        "P00-1001": {"A10-1": 1, "B11-2": 1, "C12-3": 1},
        "P00-1002_ann1": {"C12-3": 1, "D13-4": 1},
        "P00-1002_ann2": {"C12-3": 1, "E14-5": 1},  # another annotator of the same reference paper
        "P00-1003": {"F15-6": 1, "P00-1003": 2},  # its own text judged too; F15-6 cites it alone
    }
    assert cocitation_judgments(qrels) == {
        "A10-1": {"B11-2": 1, "C12-3": 1},
        "B11-2": {"A10-1": 1, "C12-3": 1},
        "C12-3": {"A10-1": 1, "B11-2": 1, "D13-4": 1, "E14-5": 1},
        "D13-4": {"C12-3": 1, "E14-5": 1},
        "E14-5": {"C12-3": 1, "D13-4": 1},
    }


def test_qrels_without_citation_structure_give_no_cocitation_judgments(tmp_path: Path) -> None:
    # CISI-like: query numbers, and document "2" answers query "1" but not query "2".
    with pytest.raises(InputError, match="query '2' does not name a cited paper.*'2' is judged for other queries"):
        cocitation_judgments({"1": {"2": 1, "3": 1}, "2": {"5": 1, "7": 1}})
    # Query ids that look like no document id: not paper ids either.
    with pytest.raises(InputError, match="query 'topic-1' does not name a cited paper"):
        cocitation_judgments({"topic-1": {"A10-1": 1, "B11-2": 1}})
    folder = tmp_path / "cisi-like"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", [{"id": str(n), "text": "words"} for n in range(1, 8)])
    (folder / "qrels.tsv").write_text("1\t2\t1\n1\t3\t1\n2\t5\t1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"qrels\.tsv: query '2' does not name a cited paper"):
        load_cocitation_dataset(folder)
    # A malformed line is named once, as evaluate names it: the file, the line, the reason.
    (folder / "qrels.tsv").write_text("1\t2\t1\n1 3 1\n", encoding="utf-8")
    with pytest.raises(InputError) as malformed:
        load_cocitation_dataset(folder)
    assert str(malformed.value).startswith(f"{folder / 'qrels.tsv'}:2: expected 3 tab-separated columns")


def test_the_sample_has_cocitation_judgments() -> None:
    dataset = load_cocitation_dataset(SAMPLE)
    assert dataset.judgments == "co-citation (qrels.tsv)"
    assert len(dataset.queries) == len(dataset.qrels) == 25 and all(paper == text for paper, text in dataset.queries)
    assert all(paper not in partners and partners for paper, partners in dataset.qrels.items())


def test_cli_evaluates_papers_like_this_one_on_the_sample(data_dir: Path, tmp_path: Path) -> None:
    code, out = run(data_dir, "evaluate-similar", str(SAMPLE), "--json", "--rankers", "hidden_topics_corrected+bm25", "--no-progress")
    assert code == 0
    body = json.loads(out)
    assert body["dataset"] == "sample" and body["queries"] == 25
    assert body["rankers"] == ["hidden_topics_corrected+bm25", "bm25"] and body["baselines"] == ["bm25"]
    assert body["config"]["judgments"] == "co-citation (qrels.tsv)"
    assert 0.0 < body["results"]["hidden_topics_corrected+bm25"]["ndcg@10"] <= 1.0
    assert 0.0 < body["p_values"]["bm25"]["hidden_topics_corrected+bm25"]["ndcg@10"] <= 1.0
    code, table = run(data_dir, "evaluate-similar", str(SAMPLE), "--rankers", "hidden_topics", "--markdown", str(tmp_path / "t.md"))
    assert code == 0 and "| bm25 |" in table and "| hidden_topics |" in table
    assert (tmp_path / "t.md").read_text(encoding="utf-8").strip() in table
    assert run(data_dir, "evaluate-similar", str(SHARED_DATA.parent / "nowhere"))[0] == 1


def test_evaluate_similar_leaves_out_a_cited_paper_the_corpus_lacks(data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A citing paper the qrels name and the corpus lacks co-cites with others, so it is a
    query of its own: `similar` cannot read it, and it is left out with a warning (it ended
    the run with "no stored document with id ...")."""
    folder = tmp_path / "cited"
    shutil.copytree(SAMPLE, folder)
    first = (SAMPLE / "qrels.tsv").read_text(encoding="utf-8").split("\t", 1)[0]
    with (folder / "qrels.tsv").open("a", encoding="utf-8") as qrels:
        qrels.write(f"{first}\tNOT-IN-CORPUS\t1\n")
    with caplog.at_level("WARNING"):
        code, out = run(data_dir, "evaluate-similar", str(folder), "--json", "--rankers", "hidden_topics_corrected+bm25", "--no-progress")
    assert code == 0, out
    assert json.loads(out)["queries"] == 25
    assert "1 of the 26 papers with a co-citing partner is not in the index, so it is no query: NOT-IN-CORPUS" in caplog.text


def _as_beir(folder: Path, source: Path) -> Path:
    """`source` (a dataset folder of ours) in BEIR's layout: `_id` keys, `metadata` objects,
    qrels/test.tsv with its header line, and a dev split of the first two judged queries."""
    folder.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        records = [json.loads(line) for line in (source / name).read_text(encoding="utf-8").splitlines() if line.strip()]
        write_jsonl(folder / name, [{"_id": r.pop("id"), **r, "metadata": {}} for r in records])
    (folder / "qrels").mkdir()
    rows = [line for line in (source / "qrels.tsv").read_text(encoding="utf-8").splitlines() if line.strip()]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8")
    dev = sorted({row.split("\t")[0] for row in rows})[:2]
    (folder / "qrels" / "dev.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(r for r in rows if r.split("\t")[0] in dev) + "\n", encoding="utf-8"
    )
    return folder


def test_a_beir_folder_reads_as_it_is_shipped(tmp_path: Path) -> None:
    beir = _as_beir(tmp_path / "beir", SAMPLE)
    ours, theirs = load_dataset(SAMPLE), load_dataset(beir)
    assert theirs.queries == ours.queries and theirs.qrels == ours.qrels
    assert theirs.judgments == "qrels/test.tsv"
    dev = load_dataset(beir, qrels_file="qrels/dev.tsv")
    assert len(dev.queries) == 2 and dev.judgments == "qrels/dev.tsv"
    with pytest.raises(InputError, match=r"qrels/train.tsv: no such file"):
        load_dataset(beir, qrels_file="qrels/train.tsv")
    (beir / "qrels" / "test.tsv").unlink()
    with pytest.raises(InputError, match=r"no judgments: expected qrels.tsv \(or BEIR's qrels/test.tsv\)"):
        load_dataset(beir)


def test_a_record_names_its_id_once(tmp_path: Path) -> None:
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": 7, "text": "a query"}])
    assert load_queries(queries) == [("7", "a query")]
    write_jsonl(queries, [{"id": "q1", "_id": "q1", "text": "the same id twice"}, {"id": "q2", "_id": "q3", "text": "two ids"}])
    with pytest.raises(InputError, match=r"queries.jsonl:2: 'id' 'q2' and '_id' 'q3' differ: give one"):
        load_queries(queries)
    write_jsonl(queries, [{"_id": "", "text": "no id"}])
    with pytest.raises(InputError, match=r"queries.jsonl:1: missing or invalid 'id'"):
        load_queries(queries)


def test_cli_evaluates_a_beir_folder_as_ours(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    beir = _as_beir(tmp_path / "beir", SAMPLE)
    evaluate = ["evaluate", "--json", "--rankers", "bm25,hidden_topics_corrected+bm25:maxp", "--no-progress"]
    code, out = run(data_dir, *evaluate, str(SAMPLE))
    code_beir, out_beir = run(data_dir, *evaluate, str(beir))
    assert code == code_beir == 0
    ours, theirs = json.loads(out), json.loads(out_beir)
    assert theirs["results"] == ours["results"] and theirs["config"]["judgments"] == "qrels/test.tsv"
    code, out = run(data_dir, *evaluate, str(beir), "--qrels-file", "qrels/dev.tsv")
    assert code == 0 and json.loads(out)["queries"] == 2
    assert run(data_dir, *evaluate, str(beir), "--qrels-file", "qrels/train.tsv")[0] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qrels/train.tsv: no such file" in err


def test_a_query_or_judgments_file_missing_from_the_folder_says_where_it_was_looked_for(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--queries-file myq.jsonl` is the folder's myq.jsonl: with ./myq.jsonl there, the error
    said "SAMPLE/myq.jsonl: no such file", as if the file were missing. It says where it was
    looked for, and the absolute path that reads ./myq.jsonl (which then works)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myq.jsonl").write_text((SAMPLE / "queries.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "myqrels.tsv").write_text((SAMPLE / "qrels.tsv").read_text(encoding="utf-8"), encoding="utf-8")
    for option, name, what in (("--queries-file", "myq.jsonl", "query file"), ("--qrels-file", "myqrels.tsv", "judgments file")):
        assert run(data_dir, "evaluate", str(SAMPLE), option, name, "--no-progress")[0] == 1
        err = capsys.readouterr().err
        assert err == (
            f"reranker: error: {SAMPLE / name}: no such file (the {what} is looked for inside the data set's folder; "
            f"to read {name} from the current directory, give its absolute path: {tmp_path / name})\n"
        )
    dataset = load_dataset(SAMPLE, str(tmp_path / "myq.jsonl"), qrels_file=str(tmp_path / "myqrels.tsv"))
    assert dataset.queries == load_dataset(SAMPLE).queries and dataset.judgments_path == tmp_path / "myqrels.tsv"
    (tmp_path / "myq.jsonl").unlink()  # nowhere: where it was looked for, and no path to give
    with pytest.raises(InputError, match=r"myq.jsonl: no such file \(the query file is looked for inside the data set's folder\)$"):
        load_dataset(SAMPLE, "myq.jsonl")
    # An absolute path that is missing is "no such file", not a folder.
    with pytest.raises(InputError, match=r"myqrels-gone.tsv: no such file$"):
        load_dataset(SAMPLE, qrels_file=str(tmp_path / "myqrels-gone.tsv"))


def test_a_run_file_that_cannot_be_written_is_a_one_line_error(tmp_path: Path) -> None:
    """A failure while writing run files (here: a folder where the file goes; a full disk
    mid-run is the real case) names the file instead of ending in a traceback."""
    from reranker.evaluation import write_trec_runs

    (tmp_path / "toy.bm25.run").mkdir()
    with pytest.raises(InputError) as raised:
        write_trec_runs({"bm25": {"q1": ("d1", "d2")}}, tmp_path, "toy")
    assert str(raised.value).startswith(f"{tmp_path / 'toy.bm25.run'}: cannot write the run file: ")


def matrix_p(p: float) -> str:
    """A p as the matrix's tables print it."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def test_the_matrix_adjusts_p_over_every_ranker_of_a_table_not_per_run() -> None:
    """A main table gathers rankers from several `evaluate` runs (one per fusion weight); its
    Holm family is all of them against BM25, per metric. By hand, nDCG@10's raw p sorted:
    0.005 (w=0.2), 0.01, 0.03 (w=0.5), 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04, then
    the running maximum: 0.02, 0.03, 0.06, 0.06. The first run alone (m = 3) would give
    hidden_topics 0.03, the fusion 0.06, hidden_topics_code 0.04: under-corrected."""
    matrix = load_script(REPO / "bench" / "evaluate_matrix.py")
    qs = matrix.QUERY_SETS[2]

    def result(p_ndcg: dict[str, float]) -> dict[str, object]:
        names = ["bm25", *p_ndcg]
        return {
            "results": {name: {"ndcg@10": 0.5, "map": 0.3} for name in names},
            "p_values": {"bm25": {name: {"ndcg@10": p, "map": 0.5} for name, p in p_ndcg.items()}},
        }

    all_rankers = matrix.Run(qs, "glove", 15, 0.5, matrix.ALL_RANKERS)
    all_rankers.result = result({"hidden_topics": 0.01, "hidden_topics_code": 0.04, "hidden_topics+bm25": 0.03})
    low_weight = matrix.Run(qs, "glove", 15, 0.2, ("hidden_topics+bm25",))
    low_weight.result = result({"hidden_topics+bm25": 0.005})
    other_k = matrix.Run(qs, "glove", 10, 0.5, ("hidden_topics",))  # another table, another family
    other_k.result = result({"hidden_topics": 0.001})
    runs = [all_rankers, low_weight, other_k]

    rows = matrix.table_rows(runs, qs, "glove", 15)
    holm = {label: row["holm_ndcg"] for label, row in rows.items() if label != "bm25"}
    assert holm == pytest.approx({
        "hidden_topics+bm25 (w=0.2)": 0.02, "hidden_topics": 0.03,
        "hidden_topics+bm25 (w=0.5)": 0.06, "hidden_topics_code": 0.06,
    })  # fmt: skip
    # The raw p (behind the arrows) is each ranker's own, unchanged; MAP is its own family
    # (four p of 0.5: min(1, 4 x 0.5) = 1).
    assert rows["hidden_topics_code"]["p_ndcg"] == 0.04 and rows["hidden_topics"]["p_map"] == 0.5
    assert {row["holm_map"] for label, row in rows.items() if label != "bm25"} == {1.0}
    assert rows["bm25"]["holm_ndcg"] is None

    args = matrix.parse_args(["--ks", "10,15", "--vectors", "glove"])
    families = matrix.holm_families(runs, [qs], args)
    assert [(family["k"], sorted(family["p_values"])) for family in families] == [
        (10, ["hidden_topics"]),
        (15, ["hidden_topics", "hidden_topics+bm25 (w=0.2)", "hidden_topics+bm25 (w=0.5)", "hidden_topics_code"]),
    ]
    assert families[0]["holm_p_values"] == {"hidden_topics": {"ndcg@10": 0.001, "map": 0.5}}  # m = 1
    assert {label: by_metric["ndcg@10"] for label, by_metric in families[1]["holm_p_values"].items()} == pytest.approx(holm)


def test_the_rankers_report_adjusts_p_per_set_vectors_and_metric(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/evaluate_rankers.py's Holm family is one query set x vectors x metric: every
    ranker tested against BM25 there. By hand, CISI with GloVe, nDCG@10's raw p sorted: 0.01,
    0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04, running maximum 0.03, 0.06, 0.06. CISI with
    word2vec is its own family: hidden_topics 0.01 and wmd, whose p evaluate did not give and
    the script computes from the per-query values (equal to BM25's: p = 1) -> 0.02 and 1.0.
    Pooled over both vector sets (five tests), both hidden_topics would read 0.05."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))  # it imports evaluate_matrix
    rankers = load_script(REPO / "bench" / "evaluate_rankers.py")
    cisi = next(qs for qs in rankers.SETS if qs.dataset == "cisi")
    metrics = ("ndcg@10", "map", "p@1", "mrr")
    queries = ("q1", "q2", "q3", "q4")

    def run(vectors: str, p_ndcg: dict[str, float | None]) -> object:
        names = ["bm25", *p_ndcg]
        per_query = {name: {q: dict.fromkeys(metrics, 0.25 * i) for i, q in enumerate(queries)} for name in names}
        result = {
            "rankers": names,
            "results": {name: dict.fromkeys(metrics, 0.4 if name == "bm25" else 0.3) for name in names},
            "p_values": {"bm25": {name: {**dict.fromkeys(metrics, 0.5), "ndcg@10": p}
                                 for name, p in p_ndcg.items() if p is not None}},
            "wins_ties_losses": {"bm25": {name: [1, 1, 2] for name in names}},
            "per_query": per_query,
        }  # fmt: skip
        return rankers.Run(cisi, vectors, ("evaluate",), 1.0, result)

    glove = run("glove", {"hidden_topics": 0.01, "wmd": 0.04, "doc2vec+bm25": 0.03})
    word2vec = run("word2vec", {"hidden_topics": 0.01, "wmd": None})
    families = rankers.holm_families([glove, word2vec])

    assert [(f["query_set"], f["vectors"], f["baseline"]) for f in families] == [
        ("cisi/queries.jsonl", "glove", "bm25"), ("cisi/queries.jsonl", "word2vec", "bm25"),
    ]  # fmt: skip
    by_vectors = {f["vectors"]: f for f in families}
    ndcg = {v: {r: by_metric["ndcg@10"] for r, by_metric in f["holm_p_values"].items()} for v, f in by_vectors.items()}
    assert ndcg["glove"] == pytest.approx({"hidden_topics": 0.03, "doc2vec+bm25": 0.06, "wmd": 0.06})
    assert ndcg["word2vec"] == pytest.approx({"hidden_topics": 0.02, "wmd": 1.0})
    # The p evaluate did not give is the script's own test on every metric the report marks.
    assert by_vectors["word2vec"]["p_values"]["wmd"] == dict.fromkeys(metrics, 1.0)
    # Each metric is its own family: MAP's three p of 0.5 -> min(1, 3 x 0.5) = 1.
    assert {by_metric["map"] for by_metric in by_vectors["glove"]["holm_p_values"].values()} == {1.0}

    # The detail table keeps the raw p and its arrow and adds the adjusted p beside it.
    table = "\n".join(rankers.detail(glove, rankers.holm_of(families, glove)))
    assert "| `doc2vec+bm25` | 0.300 | -0.100 | 0.030 ↓ | 0.060 |" in table
    assert "| `bm25` | 0.400 | – | – | – |" in table
    assert "Holm vs BM25" in table.splitlines()[0]


def test_the_evaluation_matrix_measures_the_products_defaults(tmp_path: Path) -> None:
    """bench/evaluate_matrix.py, run as docs/evaluation.md is made (a child process, the real
    CLI, gensim's training) on the sample corpus under a data set name the script knows: the
    word2vec it trains is `reranker train word2vec`'s default (it was once 10 epochs against
    the CLI's 40), and its summary shows the default ranker and the previous default at the
    product's weight, with the figures `evaluate` gave."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root / "cisi")
    out = tmp_path / "matrix.md"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "evaluate_matrix.py"), "--data-dir", str(tmp_path / "data"),
         "--datasets-root", str(root), "--datasets", "cisi", "--ks", "15", "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))

    train = report["vectors"]["word2vec:cisi"]["train_command"].split()
    assert train[train.index("--epochs") + 1] == str(WORD2VEC_EPOCHS)
    assert train[train.index("--dim") + 1] == str(WORD2VEC_DIM)
    assert report["vectors"]["word2vec:cisi"]["dim"] == WORD2VEC_DIM

    summary = out.read_text(encoding="utf-8").split("## Summary: nDCG@10", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in summary.splitlines() if line.startswith("| CISI")]
    header = next(line for line in summary.splitlines() if line.startswith("| query set"))
    assert header.rstrip(" |").endswith(f"previous default w={DEFAULT_FUSION_WEIGHT:g} | **default** w={DEFAULT_FUSION_WEIGHT:g}")
    for vectors, row in zip(("glove", "word2vec"), rows, strict=True):
        (run_,) = [
            r for r in report["runs"]
            if r["vectors"] == vectors and r["k"] == 15 and r["fusion_weight"] == DEFAULT_FUSION_WEIGHT
        ]  # fmt: skip
        assert f"--fusion-weight {DEFAULT_FUSION_WEIGHT:g}" in run_["command"]
        means = run_["result"]["results"]
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for cell, name in zip(cells[-2:], ("hidden_topics_corrected+bm25", DEFAULT_RANKER), strict=True):
            assert cell.split()[0] == f"{means[name]['ndcg@10']:.3f}", (name, row)
            assert name in run_["result"]["p_values"]["bm25"], "no significance test against BM25"

    # Holm over each table's rankers, gathered from its runs, printed beside the raw p.
    (family,) = [f for f in report["holm_families"] if f["vectors"] == "glove"]
    assert len(family["p_values"]) == 7 and family["holm_p_values"] == holm_adjusted(family["p_values"])
    main = out.read_text(encoding="utf-8").split("### CISI — GloVe 6B 50d", 1)[1].split("\n### ", 1)[0]
    assert "| p nDCG@10 | Holm nDCG@10 | p MAP | Holm MAP |" in main
    default_row = next(line for line in main.splitlines() if line.startswith(f"| {DEFAULT_RANKER} "))
    cells = [cell.strip() for cell in default_row.strip("|").split("|")]
    by_metric = family["holm_p_values"][f"{DEFAULT_RANKER} (w={DEFAULT_FUSION_WEIGHT:g})"]
    assert cells[-3] == matrix_p(by_metric["ndcg@10"]) and cells[-1] == matrix_p(by_metric["map"])
