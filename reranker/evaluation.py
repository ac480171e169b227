"""Offline evaluation: judged queries -> BM25 window -> each ranker -> IR metrics.

A dataset folder holds `corpus.jsonl` ({"id", "title", "text"} per line),
`queries.jsonl` ({"id", "text"}) and `qrels.tsv` (query_id, doc_id, relevance; no
header), the layout of the data sets under ../shared/data. Every ranker reorders the
same BM25 window of each query, so the comparison isolates the reranking.

`evaluate` returns one `EvaluationResult`: means, the per-query table, and paired tests
of every ranker against BM25 and against hidden_topics (randomisation test as the
headline, t-test beside it). `EvaluationResult.table()` is the Markdown table with its
caption; `plot_precision_bins` draws the ranking figure of Gong et al. (2018), the share
of queries at each value of P@1, P@3 and P@6 (matplotlib, imported only there).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import numpy.typing as npt

from reranker.errors import InputError
from reranker.pipeline import Engine
from reranker.rankers import Ranker

log = logging.getLogger(__name__)

NDCG_CUTOFF = 10
PRECISION_CUTOFFS = (1, 3, 5, 6, 10)  # computed for every query
TABLE_PRECISION_CUTOFFS = (1, 3, 5, 10)  # shown in the table
FIGURE_CUTOFFS = (1, 3, 6)  # the ranking figure's k, as in Gong et al. (2018)
RANDOMIZATION_ROUNDS = 10_000
RANDOMIZATION_SEED = 7
SIGNIFICANCE_LEVEL = 0.05


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
    """Every metric `ranking_metrics` computes, in order (P@6 feeds the figure only)."""
    return [f"ndcg@{NDCG_CUTOFF}", *(f"p@{k}" for k in PRECISION_CUTOFFS), "map", "mrr", f"recall@{window}"]


def table_metric_names(window: int) -> list[str]:
    """The metrics the table shows: nDCG@10, P@1/3/5/10, MAP, MRR, recall@window."""
    return [f"ndcg@{NDCG_CUTOFF}", *(f"p@{k}" for k in TABLE_PRECISION_CUTOFFS), "map", "mrr", f"recall@{window}"]


def ranking_metrics(ranked: Sequence[str], relevant: dict[str, int], window: int) -> dict[str, float]:
    """nDCG@10 (gain 2^rel - 1), P@k for k in PRECISION_CUTOFFS, average precision,
    reciprocal rank, recall@window; keys as `metric_names(window)`.

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


# --- paired significance tests over queries -------------------------------------------


@functools.lru_cache(maxsize=8)
def _sign_flips(rounds: int, size: int, seed: int) -> npt.NDArray[np.float64]:
    """(rounds, size) random signs, read-only; one draw serves every metric and ranker."""
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(rounds, size))
    signs.flags.writeable = False
    return signs


def _paired_differences(a: Sequence[float], b: Sequence[float]) -> npt.NDArray[np.float64]:
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if diffs.ndim != 1:
        raise ValueError(f"paired samples must be two equal-length lists, got shapes {np.shape(a)}, {np.shape(b)}")
    return diffs


def paired_randomization_p(
    a: Sequence[float], b: Sequence[float], rounds: int = RANDOMIZATION_ROUNDS, seed: int = RANDOMIZATION_SEED
) -> float:
    """Two-sided p-value of the mean paired difference under random sign flips
    (Fisher's randomisation test; Smucker, Allan & Carterette, CIKM 2007).

    a, b: (n,) per-query values of two rankers, same query order. Deterministic for a
    fixed `seed`; the smallest p-value it can give is 1 / (rounds + 1).
    """
    diffs = _paired_differences(a, b)
    if diffs.size == 0 or not diffs.any():
        return 1.0
    observed = abs(diffs.mean())
    signs = _sign_flips(rounds, diffs.size, seed)
    extreme = np.count_nonzero(np.abs(signs @ diffs) / diffs.size >= observed - 1e-12)
    return float((extreme + 1) / (rounds + 1))


def paired_t_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test on a - b (n - 1 degrees of freedom).

    1.0 when fewer than two pairs or no difference at all; 0.0 when every pair differs
    by the same non-zero amount (t is infinite).
    """
    from scipy import stats  # the service never needs scipy.stats (slow to import)

    diffs = _paired_differences(a, b)
    if diffs.size < 2 or not diffs.any():
        return 1.0
    spread = diffs.std(ddof=1)
    if spread == 0.0:
        return 0.0
    t = diffs.mean() / (spread / np.sqrt(diffs.size))
    return float(2.0 * stats.t.sf(abs(t), df=diffs.size - 1))


# baseline -> ranker -> metric -> p-value
PValues = dict[str, dict[str, dict[str, float]]]


def _significance(
    per_query: dict[str, dict[str, dict[str, float]]],
    query_ids: Sequence[str],
    baselines: Sequence[str],
    metrics: Sequence[str],
    test: Callable[[Sequence[float], Sequence[float]], float],
) -> PValues:
    def column(ranker: str, metric: str) -> list[float]:
        return [per_query[ranker][q][metric] for q in query_ids]

    return {
        baseline: {
            ranker: {m: test(column(ranker, m), column(baseline, m)) for m in metrics}
            for ranker in per_query
            if ranker != baseline
        }
        for baseline in baselines
    }


# --- one evaluation run -----------------------------------------------------------------


_SIGNIFICANCE_MARKS = ("†", "‡", "§", "¶")


def _metric_label(metric: str) -> str:
    if metric.startswith("ndcg@"):
        return "nDCG@" + metric[5:]
    if metric.startswith("recall@"):
        return "R@" + metric[7:]
    return metric.upper()


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation run, whatever the options.

    rankers: the evaluated rankers, in the order asked (BM25 appended if not asked).
    results: ranker -> metric -> mean over queries (every metric of `metric_names`).
    per_query: ranker -> query id -> metric -> value.
    baselines: the rankers every other one is tested against: BM25, and hidden_topics
        when it was evaluated.
    p_values: baseline -> ranker -> metric -> two-sided paired randomisation test p-value
        (the headline test: RANDOMIZATION_ROUNDS sign flips, seed RANDOMIZATION_SEED).
    t_test_p_values: the same shape, two-sided paired t-test.
    approximate: ranker -> queries it answered approximately (a time budget ran out).
    config: what the run was built with (vectors, K, ...), as the caller states it.
    """

    dataset: str
    queries: int
    window: int
    rankers: tuple[str, ...]
    results: dict[str, dict[str, float]]
    per_query: dict[str, dict[str, dict[str, float]]]
    baselines: tuple[str, ...]
    p_values: PValues
    t_test_p_values: PValues
    approximate: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def wins_ties_losses(self, baseline: str = "bm25", metric: str = f"ndcg@{NDCG_CUTOFF}") -> dict[str, tuple[int, int, int]]:
        """ranker -> queries where its `metric` is above, equal to, below `baseline`'s."""
        reference = self.per_query[baseline]
        counts: dict[str, tuple[int, int, int]] = {}
        for ranker in self.rankers:
            if ranker == baseline:
                continue
            diffs = np.array([row[metric] - reference[q][metric] for q, row in self.per_query[ranker].items()])
            tied = np.isclose(diffs, 0.0, rtol=0.0, atol=1e-12)
            counts[ranker] = (int(np.sum(~tied & (diffs > 0))), int(tied.sum()), int(np.sum(~tied & (diffs < 0))))
        return counts

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "dataset": self.dataset,
            "queries": self.queries,
            "window": self.window,
            "rankers": list(self.rankers),
            "results": self.results,
            "baselines": list(self.baselines),
            "significance_test": "paired randomisation (two-sided, "
            f"{RANDOMIZATION_ROUNDS} sign flips, seed {RANDOMIZATION_SEED})",
            "p_values": self.p_values,
            "t_test_p_values": self.t_test_p_values,
            "wins_ties_losses": {
                baseline: {name: list(wtl) for name, wtl in self.wins_ties_losses(baseline).items()}
                for baseline in self.baselines
            },
            "approximate": self.approximate,
            "config": self.config,
        }
        if per_query:
            body["per_query"] = self.per_query
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> EvaluationResult:
        """The inverse of `to_json(per_query=True)` (to plot saved runs together)."""
        try:
            return cls(
                dataset=body["dataset"],
                queries=int(body["queries"]),
                window=int(body["window"]),
                rankers=tuple(body["rankers"]),
                results=body["results"],
                per_query=body.get("per_query", {}),
                baselines=tuple(body["baselines"]),
                p_values=body["p_values"],
                t_test_p_values=body["t_test_p_values"],
                approximate=body.get("approximate", {}),
                config=body.get("config", {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"not an evaluation result ({type(exc).__name__}: {exc})") from None

    def describe(self) -> str:
        """'cisi, 76 queries, BM25 top 100 reranked, vectors glove-6b-50d (d=50), K=15'."""
        config = self.config
        queries_file = config.get("queries_file")
        parts = [
            self.dataset + (f" ({queries_file})" if queries_file and queries_file != "queries.jsonl" else ""),
            f"{self.queries} queries",
            f"BM25 top {self.window} reranked",
        ]
        if "vectors" in config:
            parts.append(f"vectors {config['vectors']}" + (f" (d={config['dim']})" if "dim" in config else ""))
        if "k" in config:
            parts.append(f"K={config['k']}")
        return ", ".join(parts)

    def caption(self) -> str:
        """One line saying what the table shows and what its marks mean."""
        marks = "; ".join(
            f"{mark} p < {SIGNIFICANCE_LEVEL:g} against {baseline}"
            for mark, baseline in zip(_SIGNIFICANCE_MARKS, self.baselines)
        )
        approximate = ", ".join(f"{name} {n}" for name, n in self.approximate.items() if n)
        parts = [f"{self.describe()}; means over queries."]
        if self.baselines:
            parts.append(
                f"{marks} (two-sided paired randomisation test over queries, {RANDOMIZATION_ROUNDS:,} "
                f"sign flips, seed {RANDOMIZATION_SEED}; paired t-test p-values in the JSON; not "
                "corrected for multiple comparisons). W/T/L: queries where nDCG@"
                f"{NDCG_CUTOFF} is above / equal to / below {self.baselines[0]}'s."
            )
        if approximate:
            parts.append(f"Answered approximately (time budget ran out): {approximate} queries.")
        return " ".join(parts)

    def table(self) -> str:
        """The caption, a blank line, and the means as a Markdown table: rankers as rows,
        metrics as columns, each value marked where it differs significantly from a baseline."""
        names = table_metric_names(self.window)
        columns = ["ranker", *(_metric_label(m) for m in names)]
        wtl = self.wins_ties_losses(self.baselines[0]) if self.baselines else None
        if self.baselines:
            columns.append(f"W/T/L vs {self.baselines[0]}")
        lines = [self.caption(), "", "| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
        for ranker in self.rankers:
            cells = [ranker, *(f"{self.results[ranker][m]:.3f}{self._marks(ranker, m)}" for m in names)]
            if wtl is not None:
                cells.append("/".join(str(n) for n in wtl[ranker]) if ranker in wtl else "–")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def _marks(self, ranker: str, metric: str) -> str:
        return "".join(
            mark
            for mark, baseline in zip(_SIGNIFICANCE_MARKS, self.baselines)
            if self.p_values.get(baseline, {}).get(ranker, {}).get(metric, 1.0) < SIGNIFICANCE_LEVEL
        )


def evaluate(
    engine: Engine,
    dataset: Dataset,
    ranker_names: Sequence[str],
    *,
    window: int = 100,
    baselines: Sequence[str] = ("bm25", "hidden_topics"),
    on_query: Callable[[], object] | None = None,
    config: dict[str, Any] | None = None,
) -> EvaluationResult:
    """Rerank every judged query's BM25 window with each ranker and score the rankings.

    baselines: every ranker is tested against each of these that was evaluated; the
    first is evaluated even if not asked for. Raises UnknownRankerError before any work
    if a name is not registered.
    """
    names = list(dict.fromkeys([*ranker_names, baselines[0]]))
    rankers = {name: engine.ranker(name) for name in names}
    engine.check_index()
    per_query, approximate = _rank_queries(engine, dataset, rankers, window, on_query)
    return summarise(dataset.name, window, per_query, baselines, approximate=approximate, config=config)


def summarise(
    dataset: str,
    window: int,
    per_query: dict[str, dict[str, dict[str, float]]],
    baselines: Sequence[str] = ("bm25", "hidden_topics"),
    *,
    approximate: dict[str, int] | None = None,
    config: dict[str, Any] | None = None,
) -> EvaluationResult:
    """Means and paired tests of per-query metrics (ranker -> query id -> metric -> value;
    every ranker scored on the same queries, with every metric of `metric_names(window)`).

    Tests each ranker against each of `baselines` present in `per_query`.
    Raises ValueError if the rankers were not scored on the same queries.
    """
    names = list(per_query)
    query_ids = list(next(iter(per_query.values()), {}))
    if not query_ids or any(set(rows) != set(query_ids) for rows in per_query.values()):
        raise ValueError("every ranker must be scored on the same, non-empty set of queries")
    metrics = metric_names(window)
    used = tuple(baseline for baseline in dict.fromkeys(baselines) if baseline in per_query)
    return EvaluationResult(
        dataset=dataset,
        queries=len(query_ids),
        window=window,
        rankers=tuple(names),
        results={
            name: {m: float(np.mean([per_query[name][q][m] for q in query_ids])) for m in metrics}
            for name in names
        },
        per_query=per_query,
        baselines=used,
        p_values=_significance(per_query, query_ids, used, metrics, paired_randomization_p),
        t_test_p_values=_significance(per_query, query_ids, used, metrics, paired_t_p),
        approximate=approximate or {name: 0 for name in names},
        config=config or {},
    )


def _rank_queries(
    engine: Engine,
    dataset: Dataset,
    rankers: dict[str, Ranker],
    window: int,
    on_query: Callable[[], object] | None,
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, int]]:
    """(ranker -> query id -> metrics, ranker -> queries answered approximately)."""
    per_query: dict[str, dict[str, dict[str, float]]] = {name: {} for name in rankers}
    approximate = {name: 0 for name in rankers}
    for query_id, text in dataset.queries:
        query = engine.query(text)
        candidates = engine.window(query, window)
        for name, ranker in rankers.items():
            # What one ranker fetched (word ids, Doc2Vec vectors) serves the next ones too.
            candidates = engine.complete(candidates, ranker)
            ranking = engine.rerank(query, candidates, ranker)
            ranked = [candidates.candidates[i].doc_id for i in ranking.order]
            per_query[name][query_id] = ranking_metrics(ranked, dataset.qrels[query_id], window)
            approximate[name] += bool(ranking.notes)
        if on_query is not None:
            on_query()
    return per_query, approximate


# --- the ranking figure: share of queries per precision@k value -------------------------


# k -> ranker -> shares of queries whose P@k is 0/k, 1/k, ..., k/k (k + 1 values, sum 1)
PrecisionBins = dict[int, dict[str, tuple[float, ...]]]


def precision_bins(result: EvaluationResult, ks: Sequence[int] = FIGURE_CUTOFFS) -> PrecisionBins:
    """For each k, the share of queries whose precision@k is j/k, per ranker and j = 0..k.

    P@k only takes the values j/k, so one bin per value is exact. Raises InputError when
    the result lacks the per-query P@k (k must be in PRECISION_CUTOFFS; saved JSON must
    include per-query metrics).
    """
    bins: PrecisionBins = {}
    for k in ks:
        metric = f"p@{k}"
        bins[k] = {}
        for ranker in result.rankers:
            rows = result.per_query.get(ranker, {})
            if not rows or any(metric not in row for row in rows.values()):
                raise InputError(
                    f"no per-query {metric} for {ranker!r}: P@k is computed for k in "
                    f"{', '.join(map(str, PRECISION_CUTOFFS))}, and a saved result needs its per-query metrics"
                )
            relevant = np.rint(np.array([row[metric] for row in rows.values()]) * k).astype(np.int64)
            counts = np.bincount(relevant, minlength=k + 1)
            bins[k][ranker] = tuple(float(c) for c in counts / relevant.size)
    return bins


def plot_precision_bins(
    results: EvaluationResult | Sequence[EvaluationResult],
    path: Path,
    ks: Sequence[int] = FIGURE_CUTOFFS,
) -> Path:
    """Write the ranking figure as a PNG: one row per result, one grouped bar chart per k
    (x: the value of P@k, bars: rankers, y: share of queries), after Gong et al. (2018).

    Several results (other vectors, other data sets) stack as rows with their own titles.
    Raises InputError as `precision_bins`; OSError if `path` cannot be written.
    """
    # Imported here, and without pyplot's global state: the service never loads matplotlib.
    from matplotlib.figure import Figure

    runs = [results] if isinstance(results, EvaluationResult) else list(results)
    if not runs:
        raise ValueError("no evaluation result to plot")
    rankers = list(dict.fromkeys(name for run in runs for name in run.rankers))
    colours = {name: f"C{i % 10}" for i, name in enumerate(rankers)}
    figure = Figure(figsize=(4.0 * len(ks) + 0.5, 3.3 * len(runs) + 0.9), layout="constrained")
    figure.suptitle("Share of queries by precision@k (one bar per ranker)", fontweight="bold")
    rows = figure.subfigures(len(runs), 1, squeeze=False)[:, 0]
    for row, run in zip(rows, runs):
        row.suptitle(run.describe(), fontsize="medium")
        bins = precision_bins(run, ks)
        axes = row.subplots(1, len(ks), sharey=True, squeeze=False)[0]
        for ax, k in zip(axes, ks):
            _bar_group(ax, bins[k], k, colours)
        axes[0].set_ylabel("share of queries")
    handles = [_legend_patch(colours[name]) for name in rankers]
    figure.legend(handles, rankers, loc="outside lower center", ncols=min(len(rankers), 5), frameon=False)
    figure.savefig(path, format="png", dpi=130)
    return path


def _bar_group(ax: Any, shares: dict[str, tuple[float, ...]], k: int, colours: dict[str, str]) -> None:
    values = np.arange(k + 1)
    width = 0.8 / len(shares)
    for i, (ranker, share) in enumerate(shares.items()):
        ax.bar(values + (i - (len(shares) - 1) / 2) * width, share, width, color=colours[ranker], label=ranker)
    ax.set_xticks(values, ["0", "1"] if k == 1 else [f"{j}/{k}" for j in values])
    ax.set_xlabel(f"P@{k}")
    ax.set_title(f"k = {k}")
    ax.set_ylim(0.0, 1.05)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _legend_patch(colour: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=colour)
