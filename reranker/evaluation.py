"""Offline evaluation: judged queries -> BM25 window -> each ranker -> IR metrics.

A dataset folder holds `corpus.jsonl` ({"id", "title", "text"} per line),
`queries.jsonl` ({"id", "text"}) and `qrels.tsv` (query_id, doc_id, relevance; no
header), the layout of the data sets under ../shared/data. Every ranker reorders the
same BM25 window of each query, so the comparison isolates the reranking.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from reranker.errors import InputError
from reranker.pipeline import Engine
from reranker.rankers import get_ranker

log = logging.getLogger(__name__)

PRECISION_CUTOFFS = (1, 3, 5, 10)
NDCG_CUTOFF = 10


@dataclass(frozen=True)
class Dataset:
    """Judged queries over a corpus. qrels: query id -> {doc id: relevance > 0}."""

    name: str
    corpus_path: Path
    queries: tuple[tuple[str, str], ...]
    qrels: dict[str, dict[str, int]]


def load_queries(path: Path) -> list[tuple[str, str]]:
    """(id, text) pairs from a JSONL file. Raises InputError naming file and line."""
    queries: list[tuple[str, str]] = []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        location = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg} at column {exc.colno})", location) from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), (str, int)):
            raise InputError("expected a JSON object with an 'id'", location)
        text = record.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"query {record['id']!r} has no 'text'", location)
        queries.append((str(record["id"]), text))
    return queries


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {doc id: relevance}; rows with relevance <= 0 are dropped."""
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) == 4:  # TREC layout: query, iteration, doc, relevance
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            raise InputError(
                f"expected 3 tab-separated columns (query_id, doc_id, relevance), got {len(parts)}",
                f"{path}:{number}",
            )
        query_id, doc_id, raw = parts
        try:
            relevance = int(raw)
        except ValueError:
            raise InputError(f"relevance must be an integer, got {raw!r}", f"{path}:{number}") from None
        if relevance > 0:
            qrels.setdefault(query_id, {})[doc_id] = relevance
    return qrels


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", str(path)) from None


def load_dataset(directory: Path, queries_file: str = "queries.jsonl") -> Dataset:
    """Read a dataset folder; only queries with at least one relevant document are kept."""
    if not directory.is_dir():
        raise InputError("not a dataset folder (expected corpus.jsonl, queries.jsonl, qrels.tsv)", str(directory))
    corpus = directory / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError("no such file", str(corpus))
    queries = load_queries(directory / queries_file)
    qrels = load_qrels(directory / "qrels.tsv")
    judged = tuple((qid, text) for qid, text in queries if qrels.get(qid))
    if not judged:
        raise InputError("no query has a relevant document in qrels.tsv", str(directory))
    return Dataset(name=directory.resolve().name, corpus_path=corpus, queries=judged, qrels=qrels)


# --- metrics: one ranked list of doc ids against one query's judgments --------------


def metric_names(window: int) -> list[str]:
    return [f"ndcg@{NDCG_CUTOFF}", *(f"p@{k}" for k in PRECISION_CUTOFFS), "map", "mrr", f"recall@{window}"]


def ranking_metrics(ranked: Sequence[str], relevant: dict[str, int], window: int) -> dict[str, float]:
    """nDCG@10 (gain 2^rel - 1), P@k, average precision, reciprocal rank, recall@window.

    `ranked` is the reranked window (documents past it count as not retrieved);
    `relevant` holds every relevant document of the query (non-empty).
    """
    hits = np.array([relevant.get(doc_id, 0) for doc_id in ranked[:window]], dtype=np.float64)
    binary = hits > 0
    discounts = 1.0 / np.log2(np.arange(2, NDCG_CUTOFF + 2))
    gains = (2.0 ** hits[:NDCG_CUTOFF] - 1.0) @ discounts[: min(NDCG_CUTOFF, hits.size)]
    ideal_rels = np.sort(np.array(list(relevant.values()), dtype=np.float64))[::-1][:NDCG_CUTOFF]
    ideal = (2.0**ideal_rels - 1.0) @ discounts[: ideal_rels.size]
    result = {f"ndcg@{NDCG_CUTOFF}": float(gains / ideal) if ideal > 0 else 0.0}
    for k in PRECISION_CUTOFFS:
        result[f"p@{k}"] = float(binary[:k].sum() / k)
    positions = np.flatnonzero(binary) + 1
    precision_at_hits = np.arange(1, positions.size + 1) / positions
    result["map"] = float(precision_at_hits.sum() / len(relevant))
    result["mrr"] = float(1.0 / positions[0]) if positions.size else 0.0
    result[f"recall@{window}"] = float(binary.sum() / len(relevant))
    return result


def paired_randomization_p(a: Sequence[float], b: Sequence[float], rounds: int = 10_000, seed: int = 7) -> float:
    """Two-sided p-value of the mean paired difference under random sign flips."""
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if diffs.size == 0 or not diffs.any():
        return 1.0
    observed = abs(diffs.mean())
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(rounds, diffs.size))
    extreme = np.count_nonzero(np.abs(signs @ diffs) / diffs.size >= observed - 1e-12)
    return float((extreme + 1) / (rounds + 1))


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation run, whatever the options.

    results: ranker -> metric -> mean over queries.
    per_query: ranker -> query id -> metric -> value.
    p_values: ranker -> metric -> paired randomisation p-value against `baseline`.
    """

    dataset: str
    queries: int
    window: int
    rankers: tuple[str, ...]
    results: dict[str, dict[str, float]]
    per_query: dict[str, dict[str, dict[str, float]]]
    baseline: str
    p_values: dict[str, dict[str, float]]
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "dataset": self.dataset,
            "queries": self.queries,
            "window": self.window,
            "results": self.results,
            "baseline": self.baseline,
            "p_values": self.p_values,
            "config": self.config,
        }
        if per_query:
            body["per_query"] = self.per_query
        return body

    def table(self) -> str:
        """The means as a Markdown table, with p-values against the baseline for nDCG@10."""
        names = metric_names(self.window)
        header = "| ranker | " + " | ".join(names) + f" | p (nDCG@10 vs {self.baseline}) |"
        lines = [header, "|" + "---|" * (len(names) + 2)]
        for ranker in self.rankers:
            cells = " | ".join(f"{self.results[ranker][m]:.3f}" for m in names)
            p = self.p_values.get(ranker, {}).get(f"ndcg@{NDCG_CUTOFF}")
            lines.append(f"| {ranker} | {cells} | {'-' if p is None else f'{p:.3f}'} |")
        return "\n".join(lines)


def evaluate(
    engine: Engine,
    dataset: Dataset,
    ranker_names: Sequence[str],
    *,
    window: int = 100,
    baseline: str = "bm25",
    on_query: Callable[[], object] | None = None,
    config: dict[str, Any] | None = None,
) -> EvaluationResult:
    """Rerank every judged query's BM25 window with each ranker and score the rankings.

    Raises UnknownRankerError before any work if a name is not registered.
    """
    names = list(dict.fromkeys([*ranker_names]))
    rankers = [get_ranker(name, engine.ranker_options) for name in names]
    if baseline not in names:
        names.append(baseline)
        rankers.append(get_ranker(baseline, engine.ranker_options))
    engine.check_index()
    per_query: dict[str, dict[str, dict[str, float]]] = {name: {} for name in names}
    for query_id, text in dataset.queries:
        query = engine.query(text)
        candidates = engine.window(query, window)
        for name, ranker in zip(names, rankers):
            order, _ = engine.rerank(query, candidates, ranker)
            ranked = [candidates.candidates[i].doc_id for i in order]
            per_query[name][query_id] = ranking_metrics(ranked, dataset.qrels[query_id], window)
        if on_query is not None:
            on_query()
    metrics = metric_names(window)
    means = {
        name: {m: float(np.mean([row[m] for row in per_query[name].values()])) for m in metrics}
        for name in names
    }
    p_values = {
        name: {
            m: paired_randomization_p(
                [per_query[name][q][m] for q, _ in dataset.queries],
                [per_query[baseline][q][m] for q, _ in dataset.queries],
            )
            for m in (f"ndcg@{NDCG_CUTOFF}", "map")
        }
        for name in names
        if name != baseline
    }
    return EvaluationResult(
        dataset=dataset.name,
        queries=len(dataset.queries),
        window=window,
        rankers=tuple(names),
        results=means,
        per_query=per_query,
        baseline=baseline,
        p_values=p_values,
        config=config or {},
    )
