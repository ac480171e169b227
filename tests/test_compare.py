"""`reranker compare`: rank overlap checked against hand-computed values, the `_rank_eval`
judgments parser, the one result shape, and the command end to end on a tiny corpus."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from pathlib import Path
from typing import Any, Sequence

import pytest
from conftest import SAMPLE, TINY_CORPUS, run, write_jsonl
from hypothesis import given
from hypothesis import strategies as st

from reranker.comparison import (
    Comparison,
    check_rankers,
    compare_rankings,
    jaccard_at,
    rank_biased_overlap,
)
from reranker.datasets import Dataset, load_dataset, load_rank_eval, query_text
from reranker.errors import ConfigError, InputError
from reranker.evaluation import RankerRun, holm_adjusted, metric_names, paired_randomization_p
from reranker.reports import comparison_plots, comparison_table, format_p

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --- rank overlap -------------------------------------------------------------------------


def test_rbo_of_hand_computed_lists() -> None:
    # S = a b c d, T = b a c e: X_1..X_4 = 0, 2, 3, 3, so the agreements X_d/d are 0, 1, 1, 3/4.
    # Eq. 30 with p = 1/2: (1 - p)/p * (0*p + 1*p^2 + 1*p^3 + 3/4*p^4) + 3/4*p^4
    assert rank_biased_overlap(list("abcd"), list("bace"), p=0.5) == pytest.approx(0.46875, abs=1e-15)
    by_hand = (0.1 / 0.9) * (0.9**2 + 0.9**3 + 0.75 * 0.9**4) + 0.75 * 0.9**4
    assert rank_biased_overlap(list("abcd"), list("bace")) == pytest.approx(by_hand, abs=1e-15)  # p = 0.9
    # Uneven lengths (Eq. 32), S = a b (s = 2), L = b c a (l = 3), p = 1/2: X = 0, 1, 2;
    # (0 + 1/2 * 1/4 + 2/3 * 1/8) + X_s (3 - 2)/(2 * 3) * 1/8 + ((2 - 1)/3 + 1/2) * 1/8 = 1/3
    assert rank_biased_overlap(list("ab"), list("bca"), p=0.5) == pytest.approx(1 / 3, abs=1e-15)
    assert rank_biased_overlap(list("bca"), list("ab"), p=0.5) == pytest.approx(1 / 3, abs=1e-15)
    # A list against a prefix of itself: the extrapolation assumes the agreement goes on.
    assert rank_biased_overlap(list("abc"), list("a"), p=0.5) == pytest.approx(1.0, abs=1e-15)


def test_rbo_bounds_are_exact() -> None:
    window = [f"d{i}" for i in range(100)]
    assert rank_biased_overlap(window, list(window)) == 1.0
    assert rank_biased_overlap(window, [f"x{i}" for i in range(100)]) == 0.0
    assert rank_biased_overlap(list("abc"), list("xyzw")) == 0.0
    assert rank_biased_overlap([], []) == 1.0 and rank_biased_overlap([], ["a"]) == 0.0
    # Top-weighted: a swap at the top costs more than the same swap lower down.
    assert rank_biased_overlap(list("abcdef"), list("bacdef")) < rank_biased_overlap(list("abcdef"), list("abcdfe")) < 1.0
    with pytest.raises(ValueError, match="persistence"):
        rank_biased_overlap(list("ab"), list("ab"), p=1.0)
    with pytest.raises(ValueError, match="repeats an id"):
        rank_biased_overlap(list("aab"), list("ab"))


def rbo_by_the_formula(first: Sequence[str], second: Sequence[str], p: float) -> float:
    """Eq. 32 of Webber et al. (2010) term by term, for the property test."""
    short, long = (first, second) if len(first) <= len(second) else (second, first)
    s, l = len(short), len(long)

    def x(d: int) -> int:
        return len(set(short[:d]) & set(long[:d]))

    seen = sum(x(d) / d * p**d for d in range(1, l + 1))
    uneven = sum(x(s) * (d - s) / (s * d) * p**d for d in range(s + 1, l + 1))
    return (1 - p) / p * (seen + uneven) + ((x(l) - x(s)) / l + x(s) / s) * p**l


rankings = st.lists(st.sampled_from("abcdefghijklmnop"), min_size=1, max_size=12, unique=True)


@given(rankings, rankings, st.sampled_from([0.5, 0.8, 0.9, 0.98]))
def test_rbo_follows_the_formula_is_symmetric_and_bounded(first: list[str], second: list[str], p: float) -> None:
    value = rank_biased_overlap(first, second, p)
    assert value == pytest.approx(rbo_by_the_formula(first, second, p), abs=1e-12)
    assert value == rank_biased_overlap(second, first, p)
    assert 0.0 <= value <= 1.0


def test_jaccard_at_ten() -> None:
    first, second = list("abcdefghijkl"), list("abcdexyzwvkl")
    assert jaccard_at(first, second) == pytest.approx(5 / 15)  # k and l lie below rank 10
    assert jaccard_at(first, second, depth=3) == 1.0 and jaccard_at(first, first[::-1]) == pytest.approx(8 / 12)
    assert jaccard_at(list("abc"), list("xyz")) == 0.0 and jaccard_at([], []) == 1.0
    with pytest.raises(ValueError):
        jaccard_at(first, second, depth=0)


# --- judgments in OpenSearch's `_rank_eval` layout --------------------------------------------


def rank_eval_body(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"requests": list(requests), "metric": {"dcg": {"k": 10, "normalize": True}}}


def rated(request_id: str, query: dict[str, Any] | None, **ratings: float) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": request_id,
        "ratings": [{"_index": "papers", "_id": doc, "rating": value} for doc, value in ratings.items()],
    }
    if query is not None:
        entry["request"] = {"query": query}
    return entry


def write_json(path: Path, body: Any) -> Path:
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def test_query_text_of_full_text_queries() -> None:
    assert query_text({"match": {"text": "sailing ships"}}) == "sailing ships"
    assert query_text({"match": {"text": {"query": "bread", "operator": "and"}}}) == "bread"
    assert query_text({"multi_match": {"query": "chess king", "fields": ["title", "text"]}}) == "chess king"
    assert query_text({"query_string": {"query": "oven AND bread"}}) == "oven AND bread"
    bool_query = {"bool": {"must": [{"match": {"title": "ships"}}], "should": {"match_phrase": {"text": "at sea"}}}}
    assert query_text(bool_query) == "ships at sea"
    assert query_text({"term": {"id": "x"}}) is None and query_text(None) is None


def test_rank_eval_requests_are_parsed(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "judgments.json",
        rank_eval_body(
            rated("q1", {"match": {"text": "sailors at sea"}}, ships=1, cooking=0),
            rated("q2", None, cooking=2.0, chess=-1),
        ),
    )
    first, second = load_rank_eval(path)
    assert (first.id, first.text, first.relevant) == ("q1", "sailors at sea", {"ships": 1})
    assert (second.id, second.text, second.relevant) == ("q2", None, {"cooking": 2})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", r"not valid JSON \(Expecting property name enclosed in double quotes at line 1 column 2\)"),
        ({"metric": {}}, "expected a _rank_eval body: an object with a non-empty 'requests' list"),
        ({"requests": []}, "expected a _rank_eval body: an object with a non-empty 'requests' list"),
        ({"requests": ["q1"]}, r"requests\[0\]: expected an object with 'id' and 'ratings'"),
        ({"requests": [{"ratings": []}]}, r"requests\[0\]: no 'id'"),
        (rank_eval_body({"id": "q1"}), r"requests\[0\] \(id 'q1'\): 'ratings' must be a list of \{'_index', '_id', 'rating'\}"),
        (rank_eval_body(rated("q1", None, d1="high")), r"requests\[0\] \(id 'q1'\): ratings\[0\]: 'rating' must be an integer, got \"high\""),
        (rank_eval_body(rated("q1", None, d1=1.5)), r"requests\[0\] \(id 'q1'\): ratings\[0\]: 'rating' must be an integer, got 1.5"),
        (rank_eval_body(rated("q1", None, d1=True)), r"requests\[0\] \(id 'q1'\): ratings\[0\]: 'rating' must be an integer, got true"),
        (rank_eval_body({"id": "q1", "ratings": [{"_index": "x", "rating": 1}]}), r"requests\[0\] \(id 'q1'\): ratings\[0\]: no '_id'"),
        (
            rank_eval_body({"id": "q1", "ratings": [{"_id": "d", "rating": 1}, {"_id": "d", "rating": 0}]}),
            r"requests\[0\] \(id 'q1'\): document 'd' is rated twice",
        ),
        (rank_eval_body(rated("q1", None, d=1), rated("q1", None, e=1)), r"requests\[1\]: request id 'q1' appears twice"),
    ],
)
def test_bad_rank_eval_files_name_the_file_and_the_reason(tmp_path: Path, body: Any, reason: str) -> None:
    path = tmp_path / "judgments.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body), encoding="utf-8")
    with pytest.raises(InputError, match=f"^{re.escape(str(path))}: {reason}$"):
        load_rank_eval(path)


def dataset_folder(root: Path, queries: Sequence[tuple[str, str]], qrels: str) -> Path:
    root.mkdir()
    write_jsonl(root / "corpus.jsonl", TINY_CORPUS)
    write_jsonl(root / "queries.jsonl", [{"id": qid, "text": text} for qid, text in queries])
    (root / "qrels.tsv").write_text(qrels, encoding="utf-8")
    return root


def test_a_dataset_with_rank_eval_judgments(tmp_path: Path) -> None:
    folder = dataset_folder(tmp_path / "tiny", [("q2", "bake bread in an oven")], "")
    path = write_json(
        tmp_path / "judgments.json",
        rank_eval_body(
            rated("q1", {"multi_match": {"query": "sailors at sea", "fields": ["text"]}}, ships=1),
            rated("q2", {"match": {"text": "ignored: queries.jsonl has q2"}}, cooking=1),
            rated("q3", None, chess=0),  # nothing relevant: not a judged query
        ),
    )
    dataset = load_dataset(folder, judgments=path)
    assert dataset.queries == (("q1", "sailors at sea"), ("q2", "bake bread in an oven"))
    assert dataset.qrels == {"q1": {"ships": 1}, "q2": {"cooking": 1}}
    assert dataset.judgments == str(path) and dataset.name == "tiny"
    # No query text anywhere: the error names the request.
    write_json(path, rank_eval_body(rated("q9", {"term": {"id": "x"}}, ships=1)))
    with pytest.raises(InputError, match=r"judgments.json: requests\[0\] \(id 'q9'\): no query text"):
        load_dataset(folder, judgments=path)
    write_json(path, rank_eval_body(rated("q1", None, ships=0)))
    with pytest.raises(InputError, match="no request rates a document above 0"):
        load_dataset(folder, judgments=path)
    with pytest.raises(InputError, match="missing.json: no such file"):
        load_dataset(folder, judgments=tmp_path / "missing.json")


# --- one result shape -------------------------------------------------------------------------


QRELS = {"q1": {"a": 1, "c": 2}, "q2": {"b": 1}, "q3": {"d": 1}}
RUN = RankerRun(
    window=4,
    rankings={
        "bm25": {"q1": ("a", "b", "c", "d"), "q2": ("a", "b", "c", "d"), "q3": ("a", "b", "c", "d")},
        "copy": {"q1": ("a", "b", "c", "d"), "q2": ("a", "b", "c", "d"), "q3": ("a", "b", "c", "d")},
        "other": {"q1": ("c", "a", "d", "b"), "q2": ("b", "a", "c", "d"), "q3": ("d", "c", "b", "a")},
    },
    approximate={"bm25": 0, "copy": 0, "other": 0},
)


def qrels_dataset(tmp_path: Path) -> Dataset:
    return Dataset("hand", tmp_path / "corpus.jsonl", (("q1", "x"), ("q2", "y"), ("q3", "z")), QRELS)


def test_a_comparison_holds_means_tests_and_overlap(tmp_path: Path) -> None:
    comparison = compare_rankings(qrels_dataset(tmp_path), RUN, "bm25", config={"k": 15})
    assert comparison.rankers == ("bm25", "copy", "other") and comparison.baseline == "bm25"
    assert comparison.queries == 3 and comparison.judgments == "qrels.tsv"
    assert set(comparison.results) == {"bm25", "copy", "other"} and list(comparison.results["bm25"]) == metric_names(4)
    assert comparison.results["bm25"]["p@1"] == pytest.approx(1 / 3) and comparison.results["other"]["p@1"] == 1.0
    assert set(comparison.p_values) == set(comparison.wins_ties_losses) == {"copy", "other"}
    assert comparison.wins_ties_losses["copy"]["ndcg@10"] == (0, 3, 0)
    assert comparison.wins_ties_losses["other"]["mrr"] == (2, 1, 0)  # q1 ties: "a" and "c" both relevant first
    assert all(p == 1.0 for p in comparison.p_values["copy"].values())
    assert all(0.0 < p <= 1.0 for p in comparison.t_test_p_values["other"].values())
    assert [pair.rankers for pair in comparison.overlap] == [("bm25", "copy"), ("bm25", "other"), ("copy", "other")]
    same = comparison.overlap_of("copy", "bm25")
    assert same.mean_rbo == 1.0 and same.mean_jaccard == 1.0 and same.rbo == {"q1": 1.0, "q2": 1.0, "q3": 1.0}
    other = comparison.overlap_of("bm25", "other")
    assert other.rbo["q2"] == pytest.approx(rank_biased_overlap(list("abcd"), list("bacd")))
    assert other.mean_rbo == pytest.approx(sum(other.rbo.values()) / 3)
    assert other.jaccard == {"q1": 1.0, "q2": 1.0, "q3": 1.0}  # the same window, reordered
    assert comparison.config == {"k": 15} and comparison.rbo_p == 0.9 and comparison.jaccard_depth == 10


def test_a_ranker_that_ties_too_often_to_be_marked_is_named(tmp_path: Path) -> None:
    # 8 queries allow a mark (2/2^8), but a tied query moves no mean when its sign flips: a
    # ranker tied with the baseline on 4 of them has the floor of 4 queries, 2/2^4, and no
    # caption said so, so its missing mark read as "no difference found".
    from reranker.evaluation import score_rankings, summarise
    from reranker.reports import evaluation_caption

    queries = [f"q{n}" for n in range(8)]
    qrels = {query: {"relevant": 1} for query in queries}
    late, early = ("other", "relevant"), ("relevant", "other")
    run_ = RankerRun(window=2, rankings={
        "bm25": dict.fromkeys(queries, late),
        "better": dict.fromkeys(queries, early),
        "half": {query: early if n % 2 else late for n, query in enumerate(queries)},
        "same": dict.fromkeys(queries, late),
    }, approximate={})
    dataset = Dataset("ties", tmp_path / "corpus.jsonl", tuple((query, query) for query in queries), qrels)
    caption = comparison_table(compare_rankings(dataset, run_, "bm25")).splitlines()[0]
    half = "half cannot be marked: it ties bm25 on 4 of 8 queries, which no sign flip moves, so its smallest two-sided p is 2/2^4 = 0.125."
    same = "same cannot be marked: it ties bm25 on 8 of 8 queries, which no sign flip moves, so its smallest two-sided p is 1."
    assert half in caption and same in caption and "better cannot" not in caption and "no ranker can be marked" not in caption
    assert paired_randomization_p(tuple([1.0, 0.0] * 4), tuple([0.0] * 8)) == 2 / 2**4  # the floor the caption gives
    result = summarise("ties", 2, score_rankings(run_.rankings, qrels, 2), ("bm25",))
    assert half in evaluation_caption(result) and same in evaluation_caption(result)


def test_the_shape_is_the_same_whatever_the_judgments(tmp_path: Path) -> None:
    from_qrels = compare_rankings(qrels_dataset(tmp_path), RUN, "bm25")
    judgments = write_json(
        tmp_path / "judgments.json",
        rank_eval_body(*(rated(q, {"match": {"text": q}}, **docs) for q, docs in QRELS.items())),
    )
    folder = dataset_folder(tmp_path / "hand", [], "")
    from_rank_eval = compare_rankings(load_dataset(folder, judgments=judgments), RUN, "bm25")
    assert from_rank_eval.judgments == str(judgments)
    assert dataclasses.replace(from_rank_eval, judgments="qrels.tsv") == from_qrels
    assert list(from_rank_eval.to_json()) == list(from_qrels.to_json())


def test_too_few_queries_to_mark_anything_are_said_so(tmp_path: Path) -> None:
    # On 5 queries even a ranker better on every one gets p = 2/2^5 (exact): no mark can appear,
    # and a table without one must not read as "no difference found".
    assert paired_randomization_p([1.0] * 5, [0.0] * 5) == 0.0625
    assert paired_randomization_p([1.0] * 6, [0.0] * 6) == 2 / 2**6 < 0.05
    comparison = compare_rankings(qrels_dataset(tmp_path), RUN, "copy")
    caption = comparison_table(comparison).splitlines()[0]
    assert caption.endswith("With 3 queries no ranker can be marked: the randomisation test's smallest two-sided p over 3 queries is 2/2^3 = 0.25.")
    # ... and the p it gives is exact, which the caption and the JSON say.
    assert "(two-sided paired randomisation test over queries, exact: all 2^3 = 8 sign patterns;" in caption
    assert comparison.to_json()["significance_test"] == "paired randomisation (two-sided, exact: all 8 sign patterns of 3 pairs)"


def test_json_round_trip_and_markdown(tmp_path: Path) -> None:
    comparison = compare_rankings(qrels_dataset(tmp_path), RUN, "copy", rbo_p=0.5)
    body = json.loads(json.dumps(comparison.to_json()))
    assert Comparison.from_json(body) == comparison
    assert body["baseline"] == "copy" and body["overlap"]["rbo_p"] == 0.5
    assert set(body["per_query"]["other"]) == {"q1", "q2", "q3"}
    assert body["overlap"]["pairs"][0]["per_query"]["q1"] == {"jaccard@10": 1.0, "rbo": 1.0}
    assert body["holm_p_values"] == holm_adjusted(body["p_values"]) == comparison.holm_p_values
    # A comparison saved before the Holm p-values existed reads back, and gets them.
    saved_before = {key: value for key, value in body.items() if key != "holm_p_values"}
    assert Comparison.from_json(saved_before) == comparison
    assert Comparison.from_json(saved_before).to_json()["holm_p_values"] == body["holm_p_values"]
    with pytest.raises(InputError, match="not a comparison result"):
        Comparison.from_json({"dataset": "x"})
    caption, blank, header, rule, *rows = comparison_table(comparison).splitlines()
    assert caption.startswith("hand, 3 queries, BM25 top 4 reranked; judgments: qrels.tsv; baseline copy")
    assert "p = 0.5" in caption and blank == "" and rule.count("|") == header.count("|")
    assert header.startswith("| ranker | nDCG@10 |") and header.endswith("| W/T/L | Jaccard@10 | RBO |")
    assert rows[0].startswith("| bm25 | 0.") and rows[1].startswith("| copy (baseline) |")
    assert rows[2].split(" | ")[-3] == "3/0/0"  # "other" puts a relevant document first on every query
    # Two rankers tested against copy: the headline's Holm p beside the raw one.
    assert "| Δ nDCG@10 | p (randomisation) | p (Holm) | p (t-test) | W/T/L |" in header
    assert "Holm's step-down method over the 2 rankers tested against copy, one family per metric" in caption
    other = rows[2].split(" | ")
    assert other[-6:-4] == [format_p(comparison.p_values["other"]["ndcg@10"]), format_p(comparison.holm_p_values["other"]["ndcg@10"])]
    assert rows[1].split(" | ")[-7:-4] == ["–", "–", "–"]  # the baseline's row
    pairs_end = rows.index("", rows.index("| bm25 vs copy | 1.000 | 1.000 |"))
    assert rows[pairs_end - 3 : pairs_end] == [
        "| bm25 vs copy | 1.000 | 1.000 |",
        f"| bm25 vs other | 1.000 | {comparison.overlap_of('bm25', 'other').mean_rbo:.3f} |",
        f"| copy vs other | 1.000 | {comparison.overlap_of('copy', 'other').mean_rbo:.3f} |",
    ]
    # The per-query table: one row per query, each ranker's nDCG@10, then Δ/Jaccard/RBO against the baseline.
    assert rows[pairs_end + 1].startswith("Per query (nDCG@10; Δ, Jaccard and RBO against copy)")
    per_query = rows[-3:]
    assert [row.split(" | ")[0] for row in per_query] == ["| q1", "| q2", "| q3"]
    q1 = per_query[0].strip("| ").split(" | ")
    ndcg = {r: comparison.per_query[r]["q1"]["ndcg@10"] for r in ("bm25", "copy", "other")}
    assert q1[1:4] == [f"{ndcg['bm25']:.3f}", f"{ndcg['copy']:.3f}", f"{ndcg['other']:.3f}"]
    assert q1[4:7] == [f"{ndcg['bm25'] - ndcg['copy']:+.3f}", "1.000", f"{comparison.overlap_of('copy', 'bm25').rbo['q1']:.3f}"]


def test_one_ranker_tested_gets_no_holm_column(tmp_path: Path) -> None:
    two = RankerRun(window=4, rankings={name: RUN.rankings[name] for name in ("bm25", "other")}, approximate={"bm25": 0, "other": 0})
    comparison = compare_rankings(qrels_dataset(tmp_path), two, "bm25")
    assert comparison.holm_p_values == comparison.p_values  # m = 1: nothing to correct
    caption, _, header, *_ = comparison_table(comparison).splitlines()
    assert "Holm" not in header and "| p (randomisation) | p (t-test) |" in header
    assert "one ranker is tested against bm25, so Holm's correction for multiple comparisons changes nothing" in caption


def test_the_baseline_must_be_one_of_two_or_more_rankers() -> None:
    assert check_rankers(["a", "b", "a"], "b") == ["a", "b"]
    with pytest.raises(ConfigError, match=r"the baseline 'c' is not one of the rankers compared \(a, b\)"):
        check_rankers(["a", "b"], "c")
    with pytest.raises(ConfigError, match=r"at least two different rankers \(given: a, a, the same ranker each time\)"):
        check_rankers(["a", "a"], "a")


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width > 300 and height > 200


def test_the_figures_are_pngs(tmp_path: Path) -> None:
    comparison = compare_rankings(qrels_dataset(tmp_path), RUN, "bm25")
    deltas, bins = comparison_plots(comparison, tmp_path / "figures")
    assert deltas.name == "compare-hand-ndcg10-deltas.png" and bins.name == "compare-hand-precision-bins.png"
    assert_png(deltas)
    assert_png(bins)


# --- the command --------------------------------------------------------------------------------


TINY_QUERIES = [("q1", "sailors and a captain at sea"), ("q2", "bake bread in an oven"), ("q3", "the king in chess")]
TINY_QRELS = "q1\tships\t1\nq2\tcooking\t1\nq3\tchess\t1\nq3\tships\t0\n"


def test_cli_compare_writes_markdown_json_and_figures(data_dir: Path, tmp_path: Path) -> None:
    folder = dataset_folder(tmp_path / "tiny", TINY_QUERIES, TINY_QRELS)
    markdown, json_file, plots = tmp_path / "out" / "tiny.md", tmp_path / "out" / "tiny.json", tmp_path / "plots"
    (tmp_path / "out").mkdir()  # an output's folder must exist; --plots DIR itself may be new
    rankers = "bm25,hidden_topics,hidden_topics+bm25"
    code, out = run(
        data_dir, "compare", "--dataset", str(folder), "--rankers", rankers, "--baseline", "bm25",
        "--markdown", str(markdown), "--json-file", str(json_file), "--plots", str(plots), "--no-progress",
    )
    assert code == 0
    table = markdown.read_text(encoding="utf-8")
    assert table.startswith("tiny, 3 queries, BM25 top 100 reranked, vectors glove-6b-50d (d=50), K=15; judgments: qrels.tsv")
    assert "| bm25 (baseline) |" in table and "| hidden_topics+bm25 |" in table and "| bm25 vs hidden_topics |" in table
    assert table.strip() in out and f"json: {json_file}" in out
    assert f"figure: {plots / 'compare-tiny-ndcg10-deltas.png'}" in out
    assert_png(plots / "compare-tiny-ndcg10-deltas.png")
    assert_png(plots / "compare-tiny-precision-bins.png")

    body = json.loads(json_file.read_text(encoding="utf-8"))
    assert body["rankers"] == rankers.split(",") and body["baseline"] == "bm25" and body["queries"] == 3
    assert body["results"]["bm25"]["p@1"] == 1.0 and set(body["p_values"]) == {"hidden_topics", "hidden_topics+bm25"}
    assert len(body["wins_ties_losses"]["hidden_topics"]["ndcg@10"]) == 3
    assert sum(body["wins_ties_losses"]["hidden_topics"]["ndcg@10"]) == 3
    assert [pair["rankers"] for pair in body["overlap"]["pairs"]] == [
        ["bm25", "hidden_topics"], ["bm25", "hidden_topics+bm25"], ["hidden_topics", "hidden_topics+bm25"],
    ]
    assert all(0.0 <= pair["rbo"] <= 1.0 and set(pair["per_query"]) == {"q1", "q2", "q3"} for pair in body["overlap"]["pairs"])
    assert set(body["per_query"]["hidden_topics"]["q1"]) == set(metric_names(100))
    assert body["config"]["documents"] == 3 and body["judgments"] == "qrels.tsv"

    # --json prints the same object, figures or not.
    code, printed = run(data_dir, "compare", "--dataset", str(folder), "--rankers", rankers, "--baseline", "bm25", "--json")
    assert code == 0 and json.loads(printed) == body

    # The same judgments as a `_rank_eval` body: the same result but for where they came from.
    judgments = write_json(
        tmp_path / "judgments.json",
        rank_eval_body(*(rated(qid, {"match": {"text": text}}, **{doc: 1}) for (qid, text), doc in zip(TINY_QUERIES, ["ships", "cooking", "chess"]))),
    )
    code, printed = run(
        data_dir, "compare", "--dataset", str(folder), "--rankers", rankers, "--baseline", "bm25",
        "--judgments", str(judgments), "--json",
    )
    assert code == 0
    assert json.loads(printed) == {**body, "judgments": str(judgments), "config": {**body["config"], "judgments": str(judgments)}}


def test_cli_compare_json_holds_the_holm_p_values_of_its_p_values(data_dir: Path) -> None:
    """End to end on the sample: holm_p_values is holm_adjusted of the p_values printed
    beside it, and the Markdown's p (Holm) column shows the nDCG@10 ones."""
    common = ("compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics,hidden_topics_corrected+bm25:maxp", "--no-progress")
    code, out = run(data_dir, *common, "--json")
    assert code == 0
    body = json.loads(out)
    assert body["holm_p_values"] == holm_adjusted(body["p_values"])
    assert set(body["holm_p_values"]) == {"hidden_topics", "hidden_topics_corrected+bm25:maxp"}
    assert all(list(by_metric) == metric_names(100) for by_metric in body["holm_p_values"].values())
    # Not vacuous: of two rankers tested, the smaller nDCG@10 p is doubled.
    raw = {ranker: by_metric["ndcg@10"] for ranker, by_metric in body["p_values"].items()}
    smallest = min(raw, key=raw.__getitem__)
    assert raw[smallest] < 0.5 and body["holm_p_values"][smallest]["ndcg@10"] == pytest.approx(2 * raw[smallest])
    code, table = run(data_dir, *common)
    row = next(line for line in table.splitlines() if line.startswith(f"| {smallest} |")).split(" | ")
    assert row[-6:-4] == [format_p(raw[smallest]), format_p(body["holm_p_values"][smallest]["ndcg@10"])]


def test_cli_compare_refuses_bad_options(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = dataset_folder(tmp_path / "tiny", TINY_QUERIES, TINY_QRELS)
    common = ("compare", "--dataset", str(folder))
    assert run(data_dir, *common, "--rankers", "bm25,nope", "--baseline", "bm25")[0] == 2
    err = capsys.readouterr().err
    assert "unknown ranker 'nope'; valid rankers: " in err and "hidden_topics" in err
    assert run(data_dir, *common, "--rankers", "bm25,hidden_topics", "--baseline", "wmd")[0] == 2
    assert "the baseline 'wmd' is not one of the rankers compared (bm25, hidden_topics)" in capsys.readouterr().err
    assert run(data_dir, *common, "--rankers", "bm25")[0] == 2
    assert "at least two different rankers" in capsys.readouterr().err
    for value in ("1", "1.5", "nan"):  # 1.5 was "must lie in [0, 1]", which 1 does
        with pytest.raises(SystemExit) as usage:
            run(data_dir, *common, "--rankers", "bm25,hidden_topics", "--rbo-p", value)
        assert usage.value.code == 2 and f"must lie strictly between 0 and 1, got {float(value)}" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"requests": [{"id": "q1", "ratings": [{"_id": "ships", "rating": "yes"}]}]}', encoding="utf-8")
    assert run(data_dir, *common, "--rankers", "bm25,hidden_topics", "--judgments", str(broken))[0] == 1
    assert capsys.readouterr().err.strip() == (
        f"reranker: error: {broken}: requests[0] (id 'q1'): ratings[0]: 'rating' must be an integer, got \"yes\""
    )
    (tmp_path / "file").write_text("")
    assert run(data_dir, *common, "--rankers", "bm25,hidden_topics", "--plots", str(tmp_path / "file"))[0] == 2
    assert "is a file; expected a folder" in capsys.readouterr().err
    assert not (data_dir / "eval").exists()  # every refusal came before any indexing


def test_a_judged_document_missing_from_the_corpus_is_named_with_the_file_that_judges_it(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning names the judgments file where it is: a `_rank_eval` file given by a
    relative path is relative to where the command runs, not to the data set's folder."""
    folder = dataset_folder(tmp_path / "tiny", TINY_QUERIES, TINY_QRELS)
    write_json(tmp_path / "judgments.json", rank_eval_body(
        *(rated(qid, {"match": {"text": text}}, **{doc: 1}) for (qid, text), doc in zip(TINY_QUERIES, ["ships", "cooking", "chess"])),
        rated("q9", {"match": {"text": "sails"}}, ships=1, gone=1),
    ))
    monkeypatch.chdir(tmp_path)
    with caplog.at_level("WARNING"):
        code, _ = run(data_dir, "compare", "--dataset", str(folder), "--rankers", "bm25,hidden_topics", "--judgments", "judgments.json", "--json")
    assert code == 0
    assert "1 of the 4 relevant documents in judgments.json is not in the index (no ranker can find it): gone" in caplog.text
