"""Side-by-side comparison of rankers against a chosen baseline, offline.

`compare` reranks every judged query's BM25 window with each ranker (the same run as
`reranker evaluate`, reranker.evaluation.run_rankers) and returns one `Comparison`
whatever the options: means of every metric, the per-query table, wins/ties/losses and
paired tests (randomisation as the headline, t-test beside it) against the baseline,
and how alike the rankings are, for every pair of rankers: Jaccard@10 and rank-biased
overlap, per query and on average.

The overlap measures are pure functions of two ranked lists of ids.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from reranker.config import DEFAULT_WINDOW
from reranker.datasets import Dataset
from reranker.errors import ConfigError, InputError
from reranker.evaluation import (
    PerQuery,
    RankerRun,
    holm_adjusted,
    metric_names,
    randomization_test_name,
    run_rankers,
    score_rankings,
    summarise,
    wins_ties_losses,
    write_trec_runs,
)
from reranker.pipeline import Engine

JACCARD_DEPTH = 10
RBO_P = 0.9  # persistence: the top 10 ranks carry 1 - 0.9^10 = 65% of the weight


# --- rank overlap of two ranked lists --------------------------------------------------


def jaccard_at(first: Sequence[str], second: Sequence[str], depth: int = JACCARD_DEPTH) -> float:
    """|A ∩ B| / |A ∪ B| of the two lists' top `depth` ids; 1.0 when both are empty.

    Ignores order within the top `depth`; see `rank_biased_overlap` for a measure
    that weighs it.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    top_first, top_second = set(first[:depth]), set(second[:depth])
    union = top_first | top_second
    return len(top_first & top_second) / len(union) if union else 1.0


def rank_biased_overlap(first: Sequence[str], second: Sequence[str], p: float = RBO_P) -> float:
    """Extrapolated rank-biased overlap RBO_ext of two rankings without ties
    (Webber, Moffat & Zobel, "A similarity measure for indefinite rankings", ACM TOIS
    28(4), 2010).

    With X_d = |S[:d] ∩ L[:d]| the overlap at depth d, s and l the lengths of the
    shorter list S and the longer list L (Eq. 32; Eq. 30 when s = l):

        RBO_ext = (1 - p)/p * ( sum_{d=1..l} X_d/d * p^d
                                + sum_{d=s+1..l} X_s * (d - s)/(s * d) * p^d )
                  + ( (X_l - X_s)/l + X_s/s ) * p^l

    where, past depth s, X_d counts the whole of S against L[:d]. The unseen tails are
    assumed to agree as much as the seen prefixes do, so identical lists (and a list
    against a prefix of itself) score 1 and disjoint lists 0. p in (0, 1) is the
    persistence: depth d weighs p^(d-1) (1 - p). Symmetric; in [0, 1].

    Two empty lists are identical (1.0); an empty list against a non-empty one, 0.0.
    Raises ValueError for p outside (0, 1) or a list that repeats an id.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"the persistence p must lie in (0, 1), got {p}")
    for ranking in (first, second):
        if len(set(ranking)) != len(ranking):
            raise ValueError("a ranking repeats an id; RBO compares rankings without ties")
    if list(first) == list(second):
        return 1.0  # exactly: the formula's float sum would round to 1 - 1e-16
    if not first or not second:
        return 0.0
    short, long = (first, second) if len(first) <= len(second) else (second, first)
    s, l = len(short), len(long)
    rank_in_long = {doc_id: rank for rank, doc_id in enumerate(long, start=1)}
    # A shared id counts in X_d from the depth at which both lists have shown it.
    shown_in_both = [max(rank, rank_in_long[doc_id]) for rank, doc_id in enumerate(short, start=1) if doc_id in rank_in_long]
    overlap = np.cumsum(np.bincount(np.asarray(shown_in_both, dtype=np.int64), minlength=l + 1)[1:])  # X_1..X_l
    depths = np.arange(1, l + 1, dtype=np.float64)
    weights = p**depths
    seen = float(overlap @ (weights / depths))
    x_s, x_l = float(overlap[s - 1]), float(overlap[l - 1])
    tail = depths[s:]  # d = s+1 .. l
    uneven = float(x_s * ((tail - s) / (s * tail)) @ weights[s:])
    value = (1.0 - p) / p * (seen + uneven) + ((x_l - x_s) / l + x_s / s) * p**l
    return min(max(value, 0.0), 1.0)  # a float sum may stray past the bounds by 1e-16


@dataclass(frozen=True)
class RankOverlap:
    """How alike two rankers' rankings are: per query (query id -> value) and the mean.

    jaccard: Jaccard of the top JACCARD_DEPTH ids (`jaccard_at`); rbo: RBO_ext over
    the whole reranked window (`rank_biased_overlap`).
    """

    rankers: tuple[str, str]
    jaccard: dict[str, float]
    rbo: dict[str, float]
    mean_jaccard: float
    mean_rbo: float


def rank_overlap(
    rankings: dict[str, dict[str, tuple[str, ...]]],
    first: str,
    second: str,
    *,
    p: float = RBO_P,
    depth: int = JACCARD_DEPTH,
) -> RankOverlap:
    """The overlap of two rankers' rankings (ranker -> query id -> ids, same queries)."""
    queries = list(rankings[first])
    jaccard = {q: jaccard_at(rankings[first][q], rankings[second][q], depth) for q in queries}
    rbo = {q: rank_biased_overlap(rankings[first][q], rankings[second][q], p) for q in queries}
    return RankOverlap(
        rankers=(first, second),
        jaccard=jaccard,
        rbo=rbo,
        mean_jaccard=float(np.mean(list(jaccard.values()))) if queries else math.nan,
        mean_rbo=float(np.mean(list(rbo.values()))) if queries else math.nan,
    )


# --- the comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Rankers side by side on one judged dataset, against one baseline; one shape
    whatever the options.

    judgments: where the relevance judgments came from (`qrels.tsv` or a `_rank_eval`
    file). rankers: in the order asked; the baseline is one of them.
    results: ranker -> metric -> mean over queries (every metric of `metric_names`).
    per_query: ranker -> query id -> metric -> value.
    wins_ties_losses: ranker (not the baseline) -> metric -> (queries above, equal to,
        below the baseline).
    p_values: ranker (not the baseline) -> metric -> two-sided paired randomisation
        test p-value against the baseline (`paired_randomization_p`: exact, at least
        2 / 2^queries, over 13 queries or fewer; else RANDOMIZATION_ROUNDS sign flips,
        seed RANDOMIZATION_SEED, at least 1 / (rounds + 1)).
    t_test_p_values: the same shape, two-sided paired t-test.
    holm_p_values (derived, not stored): `p_values` adjusted by Holm's step-down method
        (`holm_adjusted`), one family per metric: the rankers tested against the baseline.
    overlap: one RankOverlap for every pair of rankers, in the order of `rankers`.
    rbo_p, jaccard_depth: the overlap measures' parameters.
    approximate: ranker -> queries it answered approximately (a time budget ran out).
    config: what the run was built with (vectors, K, ...), as the caller states it.
    """

    dataset: str
    judgments: str
    queries: int
    window: int
    rankers: tuple[str, ...]
    baseline: str
    results: dict[str, dict[str, float]]
    per_query: PerQuery
    wins_ties_losses: dict[str, dict[str, tuple[int, int, int]]]
    p_values: dict[str, dict[str, float]]
    t_test_p_values: dict[str, dict[str, float]]
    overlap: tuple[RankOverlap, ...]
    rbo_p: float = RBO_P
    jaccard_depth: int = JACCARD_DEPTH
    approximate: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def holm_p_values(self) -> dict[str, dict[str, float]]:
        """ranker -> metric -> Holm-adjusted p: derived from `p_values`, so a comparison
        saved before it existed reads back with it."""
        return holm_adjusted(self.p_values)

    def overlap_of(self, first: str, second: str) -> RankOverlap:
        """The overlap of two rankers, in either order. Raises KeyError for a pair not compared."""
        for pair in self.overlap:
            if set(pair.rankers) == {first, second}:
                return pair
        raise KeyError((first, second))

    def to_json(self) -> dict[str, Any]:
        """Everything, per-query rows included; `from_json` reads it back."""
        return {
            "dataset": self.dataset,
            "judgments": self.judgments,
            "queries": self.queries,
            "window": self.window,
            "rankers": list(self.rankers),
            "baseline": self.baseline,
            "metrics": metric_names(self.window),
            "results": self.results,
            "wins_ties_losses": {
                ranker: {metric: list(wtl) for metric, wtl in by_metric.items()}
                for ranker, by_metric in self.wins_ties_losses.items()
            },
            "significance_test": randomization_test_name(self.queries),
            "p_values": self.p_values,
            "holm_p_values": self.holm_p_values,
            "t_test_p_values": self.t_test_p_values,
            "overlap": {
                "jaccard_depth": self.jaccard_depth,
                "rbo_p": self.rbo_p,
                "rbo": "extrapolated RBO_ext (Webber, Moffat & Zobel 2010, eq. 30/32) over the reranked window",
                "pairs": [
                    {
                        "rankers": list(pair.rankers),
                        f"jaccard@{self.jaccard_depth}": pair.mean_jaccard,
                        "rbo": pair.mean_rbo,
                        "per_query": {
                            q: {f"jaccard@{self.jaccard_depth}": pair.jaccard[q], "rbo": pair.rbo[q]}
                            for q in pair.jaccard
                        },
                    }
                    for pair in self.overlap
                ],
            },
            "per_query": self.per_query,
            "approximate": self.approximate,
            "config": self.config,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Comparison:
        """The inverse of `to_json`. Raises InputError if `body` is not one."""
        try:
            overlap = body["overlap"]
            depth = int(overlap["jaccard_depth"])
            pairs = tuple(
                RankOverlap(
                    rankers=(pair["rankers"][0], pair["rankers"][1]),
                    jaccard={q: row[f"jaccard@{depth}"] for q, row in pair["per_query"].items()},
                    rbo={q: row["rbo"] for q, row in pair["per_query"].items()},
                    mean_jaccard=pair[f"jaccard@{depth}"],
                    mean_rbo=pair["rbo"],
                )
                for pair in overlap["pairs"]
            )
            return cls(
                dataset=body["dataset"],
                judgments=body["judgments"],
                queries=int(body["queries"]),
                window=int(body["window"]),
                rankers=tuple(body["rankers"]),
                baseline=body["baseline"],
                results=body["results"],
                per_query=body["per_query"],
                wins_ties_losses={
                    ranker: {metric: (wtl[0], wtl[1], wtl[2]) for metric, wtl in by_metric.items()}
                    for ranker, by_metric in body["wins_ties_losses"].items()
                },
                p_values=body["p_values"],
                t_test_p_values=body["t_test_p_values"],
                overlap=pairs,
                rbo_p=float(overlap["rbo_p"]),
                jaccard_depth=depth,
                approximate=body["approximate"],
                config=body["config"],
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise InputError(f"not a comparison result ({type(exc).__name__}: {exc})") from None


def check_rankers(ranker_names: Sequence[str], baseline: str) -> list[str]:
    """The distinct names in order; ConfigError unless there are two or more and the
    baseline is one of them."""
    names = list(dict.fromkeys(ranker_names))
    if baseline not in names:
        raise ConfigError(f"the baseline {baseline!r} is not one of the rankers compared ({', '.join(names)})")
    if len(names) < 2:
        given = f" (given: {', '.join(ranker_names)}, the same ranker each time)" if len(ranker_names) > 1 else ""
        raise ConfigError(f"a comparison needs at least two different rankers{given}")
    return names


def compare(
    engine: Engine,
    dataset: Dataset,
    ranker_names: Sequence[str],
    baseline: str,
    *,
    window: int = DEFAULT_WINDOW,
    rbo_p: float = RBO_P,
    on_query: Callable[[], object] | None = None,
    config: dict[str, Any] | None = None,
    run_dir: Path | None = None,
) -> Comparison:
    """Rerank every judged query's BM25 window with each ranker and compare them (and
    write their TREC run files into `run_dir`, if given).

    Raises ConfigError (before any work) unless `baseline` is one of two or more
    rankers; UnknownRankerError for a name that is not registered.
    """
    names = check_rankers(ranker_names, baseline)
    if not 0.0 < rbo_p < 1.0:
        raise ConfigError(f"the RBO persistence p must lie in (0, 1), got {rbo_p}")
    run = run_rankers(engine, dataset, names, window=window, on_query=on_query)
    if run_dir is not None:
        write_trec_runs(run.rankings, run_dir, dataset.name)
    return compare_rankings(dataset, run, baseline, rbo_p=rbo_p, config=config)


def compare_rankings(
    dataset: Dataset,
    run: RankerRun,
    baseline: str,
    *,
    rbo_p: float = RBO_P,
    config: dict[str, Any] | None = None,
) -> Comparison:
    """The comparison of rankings already made (the pure half of `compare`).

    Raises ConfigError as `check_rankers`; ValueError if the rankers did not rank the
    same, non-empty set of queries.
    """
    names = check_rankers(list(run.rankings), baseline)
    per_query = score_rankings(run.rankings, dataset.qrels, run.window)
    metrics = metric_names(run.window)
    tests = summarise(dataset.name, run.window, per_query, (baseline,), approximate=run.approximate, config=config)
    by_metric = {metric: wins_ties_losses(per_query, baseline, metric) for metric in metrics}
    others = [name for name in names if name != baseline]
    return Comparison(
        dataset=dataset.name,
        judgments=dataset.judgments,
        queries=tests.queries,
        window=run.window,
        rankers=tuple(names),
        baseline=baseline,
        results=tests.results,
        per_query=per_query,
        wins_ties_losses={name: {metric: by_metric[metric][name] for metric in metrics} for name in others},
        p_values=tests.p_values[baseline],
        t_test_p_values=tests.t_test_p_values[baseline],
        overlap=tuple(
            rank_overlap(run.rankings, first, second, p=rbo_p) for first, second in itertools.combinations(names, 2)
        ),
        rbo_p=rbo_p,
        approximate=tests.approximate,
        config=tests.config,
    )
