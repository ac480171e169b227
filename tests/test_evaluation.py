"""Metrics checked against hand-computed values, and dataset parsing errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import SHARED_DATA, write_jsonl
from reranker.errors import InputError
from reranker.evaluation import load_dataset, load_qrels, load_queries, paired_randomization_p, ranking_metrics


def test_metrics_by_hand() -> None:
    relevant = {"a": 1, "c": 1, "z": 1}  # "z" is never retrieved
    metrics = ranking_metrics(["b", "a", "d", "c", "e"], relevant, window=5)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert metrics["ndcg@10"] == pytest.approx(dcg / ideal)
    assert metrics["p@1"] == 0.0 and metrics["p@3"] == pytest.approx(1 / 3)
    assert metrics["p@5"] == pytest.approx(2 / 5) and metrics["p@10"] == pytest.approx(2 / 10)
    assert metrics["map"] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert metrics["mrr"] == pytest.approx(1 / 2)
    assert metrics["recall@5"] == pytest.approx(2 / 3)


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


def test_malformed_files_name_the_file_and_line(tmp_path: Path) -> None:
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"id": "q1", "text": "fine"}, "{oops"])
    with pytest.raises(InputError, match=r"queries.jsonl:2: not valid JSON"):
        load_queries(queries)
    write_jsonl(queries, [{"id": "q1", "text": ""}])
    with pytest.raises(InputError, match=r"queries.jsonl:1: query 'q1' has no 'text'"):
        load_queries(queries)
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1\td1\t1\nq1 d2 1\n")
    with pytest.raises(InputError, match=r"qrels.tsv:2: expected 3 tab-separated columns"):
        load_qrels(qrels)
    qrels.write_text("q1\td1\tyes\n")
    with pytest.raises(InputError, match=r"qrels.tsv:1: relevance must be an integer"):
        load_qrels(qrels)
    qrels.write_text("q1\t0\td1\t1\nq1\td2\t0\n")  # TREC layout; zero means not relevant
    assert load_qrels(qrels) == {"q1": {"d1": 1}}
    with pytest.raises(InputError, match="not a dataset folder"):
        load_dataset(tmp_path / "nowhere")


@pytest.mark.skipif(not (SHARED_DATA / "cisi").is_dir(), reason="../shared/data is not beside the repo")
def test_the_shared_datasets_parse() -> None:
    cisi = load_dataset(SHARED_DATA / "cisi")
    assert len(cisi.queries) == 76 and sum(len(v) for v in cisi.qrels.values()) == 3114
    scisumm = load_dataset(SHARED_DATA / "clscisumm2018-train", "queries_abstract.jsonl")
    assert len(scisumm.queries) == 40
