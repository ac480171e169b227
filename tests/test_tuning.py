"""`reranker tune` (a fusion's setting chosen by k-fold cross-validation by query) and
`reranker evaluate --baseline-run` (a significant drop against a saved run fails).

The cross-validation's arithmetic is checked on hand-made score tables; the commands run
for real on a known-item data set built from the bundled sample (a 40-word stretch of
each paper as the query, the paper as its one relevant document): BM25 finds nearly every
paper first, the paper's topic formula alone does not, which gives both a real drop to
catch and a ranker to tune.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE, run

from reranker.config import Settings, write_config_values
from reranker.errors import ConfigError
from reranker.tuning import GridScores, Setting, cross_validate, fold_of, grid, tune_report


@pytest.fixture(scope="module")
def known_items(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("known-items")
    shutil.copy(SAMPLE / "corpus.jsonl", folder / "corpus.jsonl")
    queries, qrels = [], []
    for line in (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        paper = json.loads(line)
        queries.append(json.dumps({"id": f"q-{paper['id']}", "text": " ".join(paper["text"].split()[300:340])}))
        qrels.append(f"q-{paper['id']}\t{paper['id']}\t1")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (folder / "qrels.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def shared_data_dir(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    """One data dir for the module: the known-item set is indexed once, then cached."""
    return tmp_path_factory.mktemp("data")


# --- the cross-validation, on hand-made tables -----------------------------------------


def test_folds_split_the_queries_evenly_and_repeatably() -> None:
    folds = fold_of(23, 5, seed=7)
    assert sorted(np.bincount(folds)) == [4, 4, 5, 5, 5]
    assert (fold_of(23, 5, seed=7) == folds).all()
    assert not (fold_of(23, 5, seed=8) == folds).all()


def _table(rows: list[list[float]]) -> GridScores:
    ndcg = np.array(rows, dtype=np.float64)
    settings = tuple(Setting("minmax", round(0.1 * i, 1)) for i in range(len(rows)))
    ids = tuple(f"q{i}" for i in range(ndcg.shape[1]))
    return GridScores(ids, settings, ndcg, np.full(ndcg.shape[1], 0.2), passages=True)


def _cv(scores: GridScores, folds: int = 4) -> object:
    return cross_validate(scores, dataset="d", ranker="r+bm25", bases=["r"], window=10, folds=folds, seed=3)


def test_each_query_is_scored_by_a_setting_chosen_without_it() -> None:
    # Setting 1 is far better on the queries of fold 0 only; the default (row 0) is a
    # little better everywhere else. Fold 0 cannot see its own queries, so it keeps the
    # default; every other fold sees fold 0 among its training queries and picks setting 1,
    # which then does worse on its held-out queries. On all queries setting 1 wins: the
    # in-sample figure (0.5875) flatters it, the held-out one (0.4625) does not.
    folds = fold_of(20, 4, seed=3)
    row1 = np.where(folds == 0, 1.0, 0.45)
    result = cross_validate(_table([[0.5] * 20, list(row1)]), dataset="d", ranker="r+bm25", bases=["r"], window=10, folds=4, seed=3)
    assert result.fold_choices == (Setting("minmax", 0.0), Setting("minmax", 0.1), Setting("minmax", 0.1), Setting("minmax", 0.1))
    assert result.tuned == tuple(0.5 if fold == 0 else 0.45 for fold in folds)
    assert np.mean(result.tuned) == pytest.approx(0.4625)
    assert result.chosen == Setting("minmax", 0.1) and result.chosen_mean == pytest.approx(0.5875)
    assert result.default_scores == (0.5,) * 20 and result.bm25 == (0.2,) * 20
    assert result.p_tuned_bm25 < 0.001 and 0.0 < result.p_tuned_default <= 1.0


def test_a_setting_better_everywhere_is_chosen_in_every_fold() -> None:
    rows = [[0.5] * 12, [0.6] * 12, [0.55] * 12]
    result = cross_validate(_table(rows), dataset="d", ranker="r+bm25", bases=["r"], window=10, folds=3, seed=1)
    assert set(result.fold_choices) == {Setting("minmax", 0.1)} and result.chosen == Setting("minmax", 0.1)
    assert result.tuned == (0.6,) * 12
    assert result.p_tuned_default == 2 / 2**12  # twelve equal gains: exact over 2^12 sign patterns


def test_the_text_names_its_test_and_says_its_p_values_are_unadjusted() -> None:
    # --json says which test; the text must too, and both that each p is its comparison's own:
    # compare and evaluate print Holm-adjusted p-values beside theirs, tune does not.
    twelve = cross_validate(_table([[0.5] * 12, [0.6] * 12]), dataset="d", ranker="r+bm25", bases=["r"], window=10, folds=3, seed=1)
    assert (
        "  p: two-sided paired randomisation test over the 12 queries (exact: all 2^12 = 4,096 sign patterns); "
        "each comparison's own p, not adjusted for multiple comparisons"
    ) in tune_report(twelve).splitlines()
    assert twelve.to_json()["cross_validated"]["significance_test"] == "paired randomisation (two-sided, exact: all 4096 sign patterns of 12 pairs)"
    assert twelve.to_json()["cross_validated"]["p_values_adjusted"] is False, "--json says it as a field, as the text does"
    twenty = cross_validate(_table([[0.5] * 20, [0.6] * 20]), dataset="d", ranker="r+bm25", bases=["r"], window=10, folds=4, seed=1)
    assert "over the 20 queries (10,000 sign flips, seed 7); each comparison's own p, not adjusted" in tune_report(twenty)
    assert twenty.to_json()["cross_validated"]["significance_test"] == "paired randomisation (two-sided, 10000 sign flips, seed 7)"


def test_ties_keep_the_default() -> None:
    result = cross_validate(_table([[0.5, 0.7] * 5, [0.5, 0.7] * 5]), dataset="d", ranker="r+bm25", bases=["r"], window=10, folds=2, seed=1)
    assert set(result.fold_choices) == {result.default} and result.chosen == result.default
    assert result.p_tuned_default == 1.0


def test_the_grid_puts_the_default_first_and_rrf_once() -> None:
    settings = grid(["minmax", "rrf", "zscore"], [0.5, 0.0, 0.5], Setting("maxp", 0.3))
    assert settings == (
        Setting("maxp", 0.3), Setting("minmax", 0.0), Setting("minmax", 0.5), Setting("rrf", None),
        Setting("zscore", 0.0), Setting("zscore", 0.5),
    )
    with pytest.raises(ConfigError, match="unknown normalisation 'softmax': choose from minmax, zscore, rrf, maxp"):
        grid(["softmax"], [0.5], Setting("maxp", 0.3))


def test_fewer_queries_than_folds_is_refused() -> None:
    with pytest.raises(ConfigError, match="2 to 3 folds for 3 judged queries"):
        _cv(_table([[0.5, 0.5, 0.5]]), folds=4)


# --- reranker tune, for real --------------------------------------------------------------


def test_tune_scores_each_setting_as_evaluate_ranks_it(known_items: Path, shared_data_dir: Path) -> None:
    """The default's and BM25's held-out figures are evaluate's own per-query nDCG@10 for
    the same ranker and weight: tune ranks windows as the product does."""
    code, out = run(shared_data_dir, "tune", str(known_items), "--ranker", "hidden_topics+bm25", "--folds", "5", "--json", "--no-progress")
    assert code == 0
    body = json.loads(out)
    code, out = run(shared_data_dir, "evaluate", str(known_items), "--rankers", "hidden_topics+bm25", "--json", "--per-query", "--no-progress")
    assert code == 0
    evaluated = json.loads(out)["per_query"]
    assert body["queries"] == 25 and body["default"] == {"normalisation": "minmax", "weight": 0.3}
    assert len(body["grid"]) == 1 + 11 + 11 + 1 + 10  # the default, then minmax, zscore, rrf, maxp without its copy of the default
    for query_id, row in body["per_query"].items():
        assert row["default"] == evaluated["hidden_topics+bm25"][query_id]["ndcg@10"]
        assert row["bm25"] == evaluated["bm25"][query_id]["ndcg@10"]
    assert sorted(np.bincount([row["fold"] for row in body["per_query"].values()])) == [5, 5, 5, 5, 5]
    held_out = body["cross_validated"]
    assert held_out["tuned"] == pytest.approx(np.mean([row["tuned"] for row in body["per_query"].values()]))
    assert held_out["default"] == pytest.approx(np.mean([row["default"] for row in body["per_query"].values()]))
    # The paper's formula alone (weight 1) loses most known items: no fold may choose it.
    by_setting = {(g["normalisation"], g["weight"]): g["in_sample"] for g in body["grid"]}
    assert by_setting[("minmax", 1.0)] < by_setting[("minmax", 0.0)] - 0.3
    assert all(choice["weight"] != 1.0 for choice in body["fold_choices"])
    best = max(by_setting.values())
    assert body["chosen"]["in_sample"] == best and by_setting[(body["chosen"]["normalisation"], body["chosen"]["weight"])] == best


def test_tune_tunes_a_fusion_with_doc2vec(known_items: Path, shared_data_dir: Path) -> None:
    """Its fusion was the registry's, without the index's Doc2Vec model: every doc2vec
    fusion stopped with "no Doc2Vec model was trained for this index" (the model tune
    had just trained for its evaluation index)."""
    code, out = run(shared_data_dir, "tune", str(known_items), "--ranker", "doc2vec+bm25", "--folds", "5", "--json", "--no-progress")
    assert code == 0, out
    body = json.loads(out)
    code, out = run(shared_data_dir, "evaluate", str(known_items), "--rankers", "doc2vec+bm25", "--json", "--per-query", "--no-progress")
    assert code == 0
    evaluated = json.loads(out)["per_query"]["doc2vec+bm25"]
    assert {query_id: row["default"] for query_id, row in body["per_query"].items()} == {q: r["ndcg@10"] for q, r in evaluated.items()}


def test_tune_writes_the_choice_where_serve_and_search_read_it(
    known_items: Path, shared_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RERANKER_FUSION_WEIGHT", "RERANKER_DEFAULT_RANKER", "RERANKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "reranker.toml"
    config.write_text('# the team\'s settings\nRERANKER_WINDOW = 50\nRERANKER_FUSION_WEIGHT = 0.9\n', encoding="utf-8")
    code, out = run(
        shared_data_dir, "--config", str(config), "tune", str(known_items), "--ranker", "hidden_topics+bm25",
        "--normalisations", "zscore,rrf", "--weights", "0.1,1", "--write-config", "--no-progress",
    )
    assert code == 0
    # The default (min-max at the file's 0.9: nearly the paper's formula alone) loses half
    # the known items; z-score at 0.1 (BM25's order, nearly) finds them all again.
    assert "default (minmax w=0.9)  0.496" in out
    assert "chosen on all queries: hidden_topics+bm25:zscore at weight 0.1" in out
    assert f"config: {config}" in out
    text = config.read_text(encoding="utf-8")
    assert text.startswith("# the team's settings\nRERANKER_WINDOW = 50\n")  # the rest kept as it was
    settings = Settings.from_env({}, config_file=config)
    assert settings.service.default_ranker == "hidden_topics+bm25:zscore" and settings.fusion_weight == 0.1
    assert settings.window == 50
    code, out = run(shared_data_dir, "--config", str(config), "config")
    assert code == 0 and "hidden_topics+bm25:zscore" in out


def test_writing_a_config_file_creates_it_and_refuses_a_broken_one(tmp_path: Path) -> None:
    created = tmp_path / "new.toml"
    write_config_values(created, {"RERANKER_DEFAULT_RANKER": 'odd"name', "RERANKER_FUSION_WEIGHT": 0.25})
    settings = Settings.from_env({"RERANKER_DEFAULT_RANKER": "bm25"}, config_file=created)  # the environment still wins
    assert settings.fusion_weight == 0.25 and settings.service.default_ranker == "bm25"
    assert 'RERANKER_DEFAULT_RANKER = "odd\\"name"' in created.read_text(encoding="utf-8")
    broken = tmp_path / "broken.toml"
    broken.write_text("RERANKER_K = [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        write_config_values(broken, {"RERANKER_FUSION_WEIGHT": 0.5})
    assert broken.read_text(encoding="utf-8") == "RERANKER_K = [\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ranker", "bm25"], "bm25 is not one: name a fusion such as hidden_topics_corrected+bm25:maxp"),
        (["--ranker", "hidden_topics"], "hidden_topics is not one"),
        (["--folds", "26"], "--folds must lie between 2 and the 25 judged queries, got 26"),
        (["--normalisations", "minmax,softmax"], "unknown normalisation 'softmax'"),
        (["--write-config"], "there is none: give --write-config FILE"),
    ],
)
def test_tune_refuses_with_one_line(
    known_items: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.delenv("RERANKER_CONFIG", raising=False)
    assert run(tmp_path, "tune", str(known_items), *argv)[0] == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "eval").exists()  # refused before indexing


# --- evaluate --baseline-run ----------------------------------------------------------------


def _saved(shared_data_dir: Path, known_items: Path, tmp_path: Path, *argv: str) -> Path:
    code, out = run(shared_data_dir, "evaluate", str(known_items), "--rankers", "hidden_topics+bm25", *argv, "--json", "--per-query", "--no-progress")
    assert code == 0
    saved = tmp_path / "saved-run.json"
    saved.write_text(out, encoding="utf-8")
    return saved


def test_the_same_rankers_pass_against_their_saved_run(known_items: Path, shared_data_dir: Path, tmp_path: Path) -> None:
    saved = _saved(shared_data_dir, known_items, tmp_path, "--fusion-weight", "0.3")
    code, out = run(shared_data_dir, "evaluate", str(known_items), "--rankers", "hidden_topics+bm25", "--baseline-run", str(saved), "--no-progress")
    assert code == 0
    assert "hidden_topics+bm25: 0.985 -> 0.985 (+0.000, p = 1.000, 25 queries) ok" in out
    assert out.rstrip().endswith("no significant drop")
    # A ranker only one of the two runs has is named, whichever run it is.
    one = saved.rename(tmp_path / "one-ranker.json")
    both = _saved(shared_data_dir, known_items, tmp_path, "--fusion-weight", "0.3", "--rankers", "hidden_topics+bm25,hidden_topics")
    code, out = run(shared_data_dir, "evaluate", str(known_items), "--rankers", "hidden_topics+bm25", "--baseline-run", str(both), "--no-progress")
    assert code == 0 and "\n  in the saved run only, so not compared: hidden_topics\nno significant drop" in out
    code, out = run(shared_data_dir, "evaluate", str(known_items), "--rankers", "hidden_topics+bm25,hidden_topics", "--baseline-run", str(one), "--no-progress")
    assert code == 0 and "\n  not in the saved run, so not compared: hidden_topics\nno significant drop" in out


def test_a_significant_drop_fails_with_exit_3(
    known_items: Path, shared_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = _saved(shared_data_dir, known_items, tmp_path, "--fusion-weight", "0.3")
    # A degraded setting of the same ranker: the paper's formula alone (weight 1).
    worse = ["evaluate", str(known_items), "--rankers", "hidden_topics+bm25", "--fusion-weight", "1", "--baseline-run", str(saved), "--no-progress"]
    code, out = run(shared_data_dir, *worse)
    assert code == 3
    dropped = next(line for line in out.splitlines() if line.startswith("  hidden_topics+bm25:"))
    assert dropped.endswith("DROPPED") and "p < 0.001" in dropped
    assert "  bm25: 0.985 -> 0.985" in out and "regression: hidden_topics+bm25 (exit 3)" in out
    code, out = run(shared_data_dir, *worse, "--json")
    assert code == 3
    verdict = {row["ranker"]: row for row in json.loads(out)["baseline_run"]["rankers"]}
    assert verdict["hidden_topics+bm25"]["dropped"] and not verdict["bm25"]["dropped"]
    assert verdict["hidden_topics+bm25"]["current"] < verdict["hidden_topics+bm25"]["saved"] - 0.3
    assert "regression: hidden_topics+bm25 (exit 3)" in capsys.readouterr().err  # stdout is the JSON
    # The level is the user's: at a stricter one than the drop's p-value it passes.
    code, _ = run(shared_data_dir, *worse, "--regression-p", "0.00001")
    assert code == 0


def test_a_saved_run_without_per_query_metrics_is_refused_before_any_work(
    known_items: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "means-only.json"
    saved.write_text(json.dumps({"dataset": "x", "queries": 1, "window": 10, "rankers": ["bm25"], "results": {}, "baselines": [], "p_values": {}, "t_test_p_values": {}}))
    assert run(tmp_path, "evaluate", str(known_items), "--baseline-run", str(saved))[0] == 1
    err = capsys.readouterr().err
    assert f"{saved}: the saved run has no per-query metrics; save a run with `reranker evaluate ... --json --per-query > FILE`" in err
    (tmp_path / "not.json").write_text("{")
    assert run(tmp_path, "evaluate", str(known_items), "--baseline-run", str(tmp_path / "not.json"))[0] == 1
    assert "not JSON" in capsys.readouterr().err
    assert run(tmp_path, "evaluate", str(known_items), "--baseline-run", str(saved), "--regression-metric", "ndcg@5")[0] == 2
    assert "--regression-metric must be one of ndcg@10, p@1" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()
