"""Offline evaluation: judged queries -> BM25 window -> each ranker -> IR metrics.

Every ranker reorders the same BM25 window of each query of a judged `Dataset`
(reranker.datasets), so the comparison isolates the reranking. `run_rankers` does the
ranking once and keeps every ranked list (what `reranker compare` measures overlap on);
the metrics and tests below only read those lists.

`evaluate` returns one `EvaluationResult`: means, the per-query table, and paired tests
of every ranker against BM25 and against hidden_topics (randomisation test as the
headline, t-test beside it). `precision_bins` counts what the ranking figure of Gong et
al. (2018) shows; reranker.reports renders tables and figures.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import numpy.typing as npt

from reranker.config import DEFAULT_WINDOW
from reranker.datasets import Dataset
from reranker.errors import InputError
from reranker.pipeline import Engine
from reranker.text import listed

log = logging.getLogger(__name__)

NDCG_CUTOFF = 10
PRECISION_CUTOFFS = (1, 3, 5, 6, 10)  # computed for every query
TABLE_PRECISION_CUTOFFS = (1, 3, 5, 10)  # shown in the table
FIGURE_CUTOFFS = (1, 3, 6)  # the ranking figure's k, as in Gong et al. (2018)
RANDOMIZATION_ROUNDS = 10_000
RANDOMIZATION_SEED = 7
SIGNIFICANCE_LEVEL = 0.05


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


@functools.lru_cache(maxsize=8)
def _every_sign_pattern(size: int) -> npt.NDArray[np.float64]:
    """(2^size, size) every pattern of signs, read-only: bit j of row i set flips pair j
    (row 0 flips nothing, the last row flips everything)."""
    flipped = (np.arange(1 << size)[:, None] >> np.arange(size)) & 1
    signs = np.asarray(1.0 - 2.0 * flipped, dtype=np.float64)
    signs.flags.writeable = False
    return signs


def randomization_is_exact(pairs: int, rounds: int = RANDOMIZATION_ROUNDS) -> bool:
    """Whether `paired_randomization_p` over `pairs` pairs enumerates every sign pattern
    (an exact p) rather than sampling `rounds` of them (an estimate).

    Exact when 2^pairs <= rounds (13 pairs or fewer at 10,000 rounds): enumerating then
    costs no more than sampling did, and sampling would only estimate, with Monte-Carlo
    error, a p that is a multiple of 1/2^pairs (and could print one no pattern gives, as
    0.065 for 2/2^5 = 0.0625). Beyond it the patterns double with every pair (2^40 for 40
    queries) and sampling is the only way."""
    return (1 << pairs) <= rounds


def randomization_draws(pairs: int, rounds: int = RANDOMIZATION_ROUNDS, seed: int = RANDOMIZATION_SEED) -> str:
    """How `paired_randomization_p` tested `pairs` pairs, for people: 'exact: all 2^5 = 32
    sign patterns' or '10,000 sign flips, seed 7'."""
    if randomization_is_exact(pairs, rounds):
        return f"exact: all 2^{pairs} = {2**pairs:,} sign patterns"
    return f"{rounds:,} sign flips, seed {seed}"


def randomization_test_name(pairs: int, rounds: int = RANDOMIZATION_ROUNDS, seed: int = RANDOMIZATION_SEED) -> str:
    """How `paired_randomization_p` tested `pairs` pairs, for a report's JSON:
    'paired randomisation (two-sided, 10000 sign flips, seed 7)' or, when exact,
    'paired randomisation (two-sided, exact: all 32 sign patterns of 5 pairs)'."""
    if randomization_is_exact(pairs, rounds):
        return f"paired randomisation (two-sided, exact: all {2**pairs} sign patterns of {pairs} pairs)"
    return f"paired randomisation (two-sided, {rounds} sign flips, seed {seed})"


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

    a, b: (n,) per-query values of two rankers, same query order. With 2^n <= `rounds`
    (`randomization_is_exact`) every sign pattern is tried and p is exact: the share of
    the 2^n patterns whose |mean difference| reaches the observed one. The observed pattern
    and its negation are among them, so p >= 2 / 2^n. Beyond, `rounds` patterns are drawn
    (deterministic for a fixed `seed`) and p = (extreme + 1) / (rounds + 1), an estimate
    that is never below 1 / (rounds + 1).

    Pairs with no difference stay in n, in both ways, as the callers' "over n queries"
    says: their sign changes no mean, so each pattern of the other pairs is counted 2^z
    times for z such pairs and the exact p is the one over the other pairs alone (its
    floor is then 2 / 2^(n - z), above 2 / 2^n).

    Why not scipy.stats.permutation_test (permutation_type="samples", the same sign
    flips): it gives the same p-values within Monte-Carlo error (fixed inputs of 40 and 76
    queries, 20 seeds each: means 0.1201 vs 0.1195, 0.0247 vs 0.0243, standard errors
    0.0008 and 0.0005), but draws its flips anew on every call: 23-48 ms a call against
    0.1-0.2 ms here, where one cached (rounds, n) matrix of signs serves every ranker and
    metric of an evaluation (hundreds of calls), so they are all tested on the same flips.
    """
    diffs = _paired_differences(a, b)
    if diffs.size == 0 or not diffs.any():
        return 1.0
    observed = abs(diffs.mean())
    # A pattern ties the observed mean when it differs only by rounding (the same
    # differences summed in another order), so it counts as reaching it.
    tolerance = 1e-12
    if randomization_is_exact(diffs.size, rounds):
        means = np.abs(_every_sign_pattern(diffs.size) @ diffs) / diffs.size
        return float(np.count_nonzero(means >= observed - tolerance) / (1 << diffs.size))
    signs = _sign_flips(rounds, diffs.size, seed)
    extreme = np.count_nonzero(np.abs(signs @ diffs) / diffs.size >= observed - tolerance)
    return float((extreme + 1) / (rounds + 1))


def paired_t_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test on a - b (n - 1 degrees of freedom).

    1.0 when fewer than two pairs or no difference at all; 0.0 when every pair differs
    by the same non-zero amount (t is infinite).
    """
    from scipy.stats import ttest_rel  # the service never needs scipy.stats (slow to import)

    diffs = _paired_differences(a, b)
    if diffs.size < 2 or not diffs.any():
        return 1.0
    if diffs.std(ddof=1) == 0.0:  # scipy answers nan (and warns) here
        return 0.0
    with warnings.catch_warnings():
        # Differences equal but for rounding warn of "catastrophic cancellation": t is huge
        # and p about 0 either way, and the warning would reach a `reranker evaluate` user.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_rel(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)).pvalue)


def holm_adjusted(p_values: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Holm's step-down adjustment of ranker -> metric -> p-value, the same shape back
    (S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J.
    Statistics 6(2), 1979).

    The family is, for each metric separately, the rankers in `p_values`: every ranker
    tested against one baseline. Per metric because the headline is one metric
    (nDCG@10), and a reader who looks at it alone should not pay for the other eight.
    With that metric's m p-values sorted ascending, p(1) <= ... <= p(m):

        adjusted p(i) = max over j <= i of min(1, (m - j + 1) p(j))

    An adjusted p below alpha rejects with a family-wise error rate of at most alpha
    (the chance of any false "better/worse than the baseline" among the m), and it is
    never above Bonferroni's min(1, m p). Equal p-values get equal adjusted ones, in
    whatever order they sort. With m = 1 nothing changes.
    """
    adjusted: dict[str, dict[str, float]] = {ranker: {} for ranker in p_values}
    metrics = dict.fromkeys(metric for by_metric in p_values.values() for metric in by_metric)
    for metric in metrics:
        family = [ranker for ranker, by_metric in p_values.items() if metric in by_metric]
        raw = np.array([p_values[ranker][metric] for ranker in family], dtype=np.float64)
        order = np.argsort(raw, kind="stable")
        m = raw.size
        stepped = np.minimum(1.0, (m - np.arange(m)) * raw[order])  # (m - j + 1) p(j), j from 1
        for ranker, p in zip((family[i] for i in order), np.maximum.accumulate(stepped)):
            adjusted[ranker][metric] = float(p)
    return adjusted


# ranker -> query id -> the reranked window's doc ids, best first
Rankings = dict[str, dict[str, tuple[str, ...]]]
# ranker -> query id -> metric -> value
PerQuery = dict[str, dict[str, dict[str, float]]]


# baseline -> ranker -> metric -> p-value
PValues = dict[str, dict[str, dict[str, float]]]


def _significance(
    per_query: PerQuery,
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


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation run, whatever the options.

    rankers: the evaluated rankers, in the order asked (BM25 appended if not asked).
    results: ranker -> metric -> mean over queries (every metric of `metric_names`).
    per_query: ranker -> query id -> metric -> value.
    baselines: the rankers every other one is tested against: BM25, and hidden_topics
        when it was evaluated.
    p_values: baseline -> ranker -> metric -> two-sided paired randomisation test p-value
        (the headline test: `paired_randomization_p`, exact over 13 queries or fewer,
        else RANDOMIZATION_ROUNDS sign flips, seed RANDOMIZATION_SEED).
    t_test_p_values: the same shape, two-sided paired t-test.
    approximate: ranker -> queries it answered approximately (a time budget ran out).
    config: what the run was built with (vectors, K, ...), as the caller states it.
    holm_p_values (derived, not stored): `p_values` adjusted by `holm_adjusted`, one
        family per baseline and metric.
    """

    dataset: str
    queries: int
    window: int
    rankers: tuple[str, ...]
    results: dict[str, dict[str, float]]
    per_query: PerQuery
    baselines: tuple[str, ...]
    p_values: PValues
    t_test_p_values: PValues
    approximate: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def holm_p_values(self) -> PValues:
        """baseline -> ranker -> metric -> Holm-adjusted p: derived from `p_values`, so a
        result saved before it existed reads back with it."""
        return {baseline: holm_adjusted(by_ranker) for baseline, by_ranker in self.p_values.items()}

    def wins_ties_losses(self, baseline: str = "bm25", metric: str = f"ndcg@{NDCG_CUTOFF}") -> dict[str, tuple[int, int, int]]:
        """ranker -> queries where its `metric` is above, equal to, below `baseline`'s."""
        return wins_ties_losses(self.per_query, baseline, metric)

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "dataset": self.dataset,
            "queries": self.queries,
            "window": self.window,
            "rankers": list(self.rankers),
            "results": self.results,
            "baselines": list(self.baselines),
            "significance_test": randomization_test_name(self.queries),
            "p_values": self.p_values,
            "holm_p_values": self.holm_p_values,
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
        except KeyError as exc:
            raise InputError(f"not an evaluation result (no {exc} field)") from None
        except (TypeError, ValueError) as exc:
            raise InputError(f"not an evaluation result ({exc})") from None


@dataclass(frozen=True)
class RankerRun:
    """Every ranker's ranking of every judged query's BM25 window.

    window: the BM25 candidates reranked per query. rankings: as `Rankings`, rankers in
    the order asked, queries in the dataset's order. approximate: ranker -> queries it
    answered approximately (a time budget ran out).
    """

    window: int
    rankings: Rankings
    approximate: dict[str, int]


def run_rankers(
    engine: Engine,
    dataset: Dataset,
    ranker_names: Sequence[str],
    *,
    window: int = DEFAULT_WINDOW,
    on_query: Callable[[], object] | None = None,
) -> RankerRun:
    """Rerank every judged query's BM25 window with each ranker (duplicate names run once).

    Raises UnknownRankerError before any work if a name is not registered.
    """
    rankers = {name: engine.ranker(name) for name in dict.fromkeys(ranker_names)}
    engine.check_index()
    rankings: Rankings = {name: {} for name in rankers}
    approximate = {name: 0 for name in rankers}
    for query_id, text in dataset.queries:
        query = engine.query(text)
        candidates = engine.window(query, window)
        for name, ranker in rankers.items():
            # What one ranker fetched (word ids, Doc2Vec vectors) serves the next ones too.
            candidates = engine.complete(candidates, ranker)
            ranking = engine.rerank(query, candidates, ranker)
            rankings[name][query_id] = tuple(candidates.candidates[i].doc_id for i in ranking.order)
            approximate[name] += bool(ranking.notes)
        if on_query is not None:
            on_query()
    return RankerRun(window=window, rankings=rankings, approximate=approximate)


def write_trec_runs(rankings: Rankings, folder: Path, dataset: str) -> list[Path]:
    """One TREC run file per ranker, `<folder>/<dataset>.<ranker>.run`, for trec_eval,
    ir_measures and the like: `query_id Q0 doc_id rank score tag` per line. The score is
    the rank turned around (window size down to 1): these tools order by score, and the
    rankers' own scores are on incomparable scales. Raises InputError naming the file
    when one cannot be written (a full disk, say: the CLI checks the folder beforehand)."""
    written = []
    path = folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, by_query in rankings.items():
            tag = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)  # one token, also where ":" is not allowed
            path = folder / f"{dataset}.{tag}.run"
            with path.open("w", encoding="utf-8") as handle:
                for query_id, ranked in by_query.items():
                    for rank, doc_id in enumerate(ranked, start=1):
                        handle.write(f"{query_id} Q0 {doc_id} {rank} {len(ranked) - rank + 1} {tag}\n")
            written.append(path)
    except OSError as exc:
        raise InputError(f"cannot write the run file: {exc.strerror or exc}", str(path)) from None
    return written


def score_rankings(rankings: Rankings, qrels: Mapping[str, dict[str, int]], window: int) -> PerQuery:
    """ranker -> query id -> `ranking_metrics` of its ranked list against `qrels`."""
    return {
        name: {query_id: ranking_metrics(ranked, qrels[query_id], window) for query_id, ranked in by_query.items()}
        for name, by_query in rankings.items()
    }


def evaluate(
    engine: Engine,
    dataset: Dataset,
    ranker_names: Sequence[str],
    *,
    window: int = DEFAULT_WINDOW,
    baselines: Sequence[str] = ("bm25", "hidden_topics"),
    on_query: Callable[[], object] | None = None,
    config: dict[str, Any] | None = None,
    run_dir: Path | None = None,
) -> EvaluationResult:
    """Rerank every judged query's BM25 window with each ranker and score the rankings.

    baselines: every ranker is tested against each of these that was evaluated; the
    first is evaluated even if not asked for. run_dir: also write each ranker's TREC run
    file there (`write_trec_runs`). Raises UnknownRankerError before any work if a name
    is not registered.
    """
    run = run_rankers(engine, dataset, [*ranker_names, baselines[0]], window=window, on_query=on_query)
    if run_dir is not None:
        write_trec_runs(run.rankings, run_dir, dataset.name)
    per_query = score_rankings(run.rankings, dataset.qrels, window)
    return summarise(dataset.name, window, per_query, baselines, approximate=run.approximate, config=config)


def evaluate_similar(
    engine: Engine,
    dataset: Dataset,
    ranker_names: Sequence[str],
    *,
    window: int = DEFAULT_WINDOW,
    on_query: Callable[[], object] | None = None,
    config: dict[str, Any] | None = None,
    run_dir: Path | None = None,
) -> EvaluationResult:
    """"Papers like this one" judged by co-citation (reranker.datasets.load_cocitation_dataset):
    for every judged paper, `Engine.similar` (the service's and the CLI's code path)
    with each ranker over the same first-stage window, scored against the paper's
    co-citing partners and tested against `bm25` (that window's own order), which is
    always evaluated.

    Raises UnknownRankerError before any work if a name is not registered.
    """
    names = list(dict.fromkeys([*ranker_names, "bm25"]))
    for name in names:
        engine.check_ranker(engine.ranker(name))
    # A paper the qrels name but the corpus lacks (or whose line was skipped) cannot be the
    # query: `similar` reads the stored paper. Left out, and said, rather than ending the run.
    papers = [paper for paper, _ in dataset.queries]
    stored = engine.store.content_hashes(papers)
    absent = [paper for paper in papers if paper not in stored]
    if absent:
        log.warning(
            "%d of the %d papers with a co-citing partner %s not in the index, so %s no query: %s",
            len(absent), len(papers), "is" if len(absent) == 1 else "are", "it is" if len(absent) == 1 else "they are",
            listed(absent, 5),
        )
    if len(absent) == len(papers):
        raise InputError(f"no paper with a co-citing partner is in the index (the first: {papers[0]!r})", str(dataset.judgments_path or dataset.judgments))
    rankings: Rankings = {name: {} for name in names}
    for paper in (paper for paper in papers if paper in stored):
        for name in names:
            found = engine.similar(paper, name, size=window, window=window)
            rankings[name][paper] = tuple(hit.doc_id for hit in found.hits)
        if on_query is not None:
            on_query()
    if run_dir is not None:
        write_trec_runs(rankings, run_dir, dataset.name)
    per_query = score_rankings(rankings, dataset.qrels, window)
    return summarise(dataset.name, window, per_query, ("bm25", "hidden_topics"), config=config)


def summarise(
    dataset: str,
    window: int,
    per_query: PerQuery,
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


def wins_ties_losses(
    per_query: PerQuery, baseline: str, metric: str = f"ndcg@{NDCG_CUTOFF}"
) -> dict[str, tuple[int, int, int]]:
    """ranker -> queries where its `metric` is above, equal to (within 1e-12), below
    `baseline`'s; every ranker of `per_query` but the baseline."""
    reference = per_query[baseline]
    counts: dict[str, tuple[int, int, int]] = {}
    for ranker, rows in per_query.items():
        if ranker == baseline:
            continue
        diffs = np.array([row[metric] - reference[q][metric] for q, row in rows.items()])
        tied = np.isclose(diffs, 0.0, rtol=0.0, atol=1e-12)
        counts[ranker] = (int(np.sum(~tied & (diffs > 0))), int(tied.sum()), int(np.sum(~tied & (diffs < 0))))
    return counts


# --- regressions: this run against a saved earlier one ------------------------------------


@dataclass(frozen=True)
class Drift:
    """One ranker's metric in this run against a saved run, on the queries both scored.

    saved, current: means over those queries; p_value: two-sided paired randomisation
    test; dropped: current < saved with p < the level asked for.
    """

    ranker: str
    queries: int
    saved: float
    current: float
    p_value: float
    dropped: bool

    def to_json(self) -> dict[str, Any]:
        return {"ranker": self.ranker, "queries": self.queries, "saved": self.saved, "current": self.current,
                "p_value": self.p_value, "dropped": self.dropped}


def against_saved_run(
    current: EvaluationResult, saved: EvaluationResult, metric: str = f"ndcg@{NDCG_CUTOFF}", alpha: float = SIGNIFICANCE_LEVEL
) -> tuple[Drift, ...]:
    """Every ranker of `current` that `saved` (an earlier `evaluate --json --per-query`)
    also scored, compared query by query on the queries both scored.

    Raises InputError when the saved run has no per-query metrics, no ranker in common,
    no query in common, or not `metric`.
    """
    if not saved.per_query:
        raise InputError("the saved run has no per-query metrics: save it with `reranker evaluate ... --json --per-query`")
    common = [name for name in current.rankers if name in saved.per_query]
    if not common:
        raise InputError(f"the saved run scored none of these rankers (it has {', '.join(saved.per_query)})")
    drifts = []
    for name in common:
        before, now = saved.per_query[name], current.per_query[name]
        queries = [query_id for query_id in now if query_id in before]
        if not queries:
            raise InputError(f"the saved run has no query of this data set for {name} (another data set?)")
        if any(metric not in before[query_id] for query_id in queries):
            raise InputError(f"the saved run has no per-query {metric} for {name}")
        old = [before[query_id][metric] for query_id in queries]
        new = [now[query_id][metric] for query_id in queries]
        p_value = paired_randomization_p(new, old)
        mean_old, mean_new = float(np.mean(old)), float(np.mean(new))
        drifts.append(Drift(name, len(queries), mean_old, mean_new, p_value, mean_new < mean_old and p_value < alpha))
    return tuple(drifts)


# --- the ranking figure: share of queries per precision@k value -------------------------


# k -> ranker -> shares of queries whose P@k is 0/k, 1/k, ..., k/k (k + 1 values, sum 1)
PrecisionBins = dict[int, dict[str, tuple[float, ...]]]


class PerQueryResult(Protocol):
    """What `precision_bins` reads: an EvaluationResult, or reranker.comparison's Comparison."""

    @property
    def rankers(self) -> tuple[str, ...]: ...

    @property
    def per_query(self) -> PerQuery: ...


def precision_bins(result: PerQueryResult, ks: Sequence[int] = FIGURE_CUTOFFS) -> PrecisionBins:
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
