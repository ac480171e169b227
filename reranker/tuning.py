"""A fusion's weight and normalisation learned from judgments, and what the choice is worth.

`reranker tune` answers two questions a team with its own judged queries asks of a fused
ranker (`hidden_topics_corrected+bm25:maxp`, ...): which setting should we serve, and how
much better than the fixed default is it on queries it was *not* chosen on?

1. `grid_scores`: every judged query's BM25 window is retrieved and completed once, each
   base ranker scores it once, and every setting of the grid (normalisation x weight) is
   fused from those scores by the product's own `Fusion` and ranked by `Engine.rerank`,
   so a setting's nDCG@10 is the one `search` and `serve` would get with it.
2. `cross_validate`: the queries are split into k folds at random (seeded); for each
   fold the setting with the best mean nDCG@10 on the other folds is chosen and scored
   on the held-out fold. Every query is held out exactly once, so the tuned figure is an
   honest estimate of the choice made on unseen queries, paired query by query with the
   default's and BM25's for the randomisation test. The setting chosen on all queries
   is what `--write-config` stores; its own mean is in-sample, hence optimistic.

Ties in the choice go to the default setting, then to the grid's order: a setting must
do better on the training folds to replace the default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import numpy.typing as npt

from reranker.datasets import Dataset
from reranker.errors import ConfigError
from reranker.evaluation import (
    NDCG_CUTOFF,
    paired_randomization_p,
    randomization_draws,
    randomization_test_name,
    ranking_metrics,
)
from reranker.pipeline import Engine
from reranker.ranker_names import METHODS, Method, fusion_name
from reranker.rankers import CandidateSet, Ranker, Scores
from reranker.rankers.fusion import Fusion
from reranker.types import Query

METRIC = f"ndcg@{NDCG_CUTOFF}"
# Two settings whose training means differ by less than this are tied (float noise).
_TIE = 1e-12


@dataclass(frozen=True)
class Setting:
    """One point of the grid: a normalisation and the ranker's weight (None for RRF,
    which fuses ranks and has no weight)."""

    method: Method
    weight: float | None

    def label(self) -> str:
        return self.method if self.weight is None else f"{self.method} w={self.weight:g}"

    def ranker_name(self, bases: Sequence[str]) -> str:
        return fusion_name(bases, self.method)

    def to_json(self) -> dict[str, Any]:
        return {"normalisation": self.method, "weight": self.weight}


def fusion_to_tune(ranker: Ranker) -> Fusion:
    """`ranker` as a fusion with BM25; ConfigError (a usage error) for any other ranker."""
    if not isinstance(ranker, Fusion):
        raise ConfigError(
            f"tune searches the weight and normalisation of a ranker fused with BM25, and {ranker.name} is not one: "
            "name a fusion such as hidden_topics_corrected+bm25:maxp (`reranker rankers` lists them)"
        )
    return ranker


def grid(methods: Sequence[str], weights: Sequence[float], default: Setting) -> tuple[Setting, ...]:
    """Every (normalisation, weight) to try, the default first; RRF once, without a weight.
    Raises ConfigError for an unknown normalisation or an empty grid."""
    unknown = [method for method in methods if method not in METHODS]
    if unknown:
        raise ConfigError(f"unknown normalisation {unknown[0]!r}: choose from {', '.join(METHODS)}")
    if not methods or not weights:
        raise ConfigError("tune needs at least one normalisation and one weight")
    settings = [default]
    for method in dict.fromkeys(methods):
        typed: Method = method  # type: ignore[assignment]  # checked against METHODS above
        for weight in ([None] if method == "rrf" else sorted(set(weights))):
            setting = Setting(typed, weight)
            if setting not in settings:
                settings.append(setting)
    return tuple(settings)


class _Replayed:
    """A base ranker whose scores of one window were computed once: every setting of the
    grid fuses the same numbers without scoring the window again."""

    def __init__(self, base: Ranker, scores: Scores, unscored: frozenset[int]) -> None:
        self.name, self.variant, self.needs = base.name, base.variant, base.needs
        self._scores, self._unscored = scores, unscored

    def score(self, query: Query, window: CandidateSet) -> Scores:
        window.unscored.update(self._unscored)  # as the base ranker reported them
        return self._scores


@dataclass(frozen=True)
class GridScores:
    """nDCG@10 of every setting and of BM25 on every judged query.

    ndcg: (settings, queries); bm25: (queries,); passages: whether the store gave the
    windows passage scores (without them `maxp` is `minmax`).
    """

    query_ids: tuple[str, ...]
    settings: tuple[Setting, ...]
    ndcg: npt.NDArray[np.float64]
    bm25: npt.NDArray[np.float64]
    passages: bool


def grid_scores(
    engine: Engine,
    dataset: Dataset,
    fusion: Fusion,
    settings: Sequence[Setting],
    *,
    window: int,
    on_query: Callable[[], object] | None = None,
) -> GridScores:
    """Rank every judged query's BM25 window with each setting (see the module's doc)."""
    # The engine's own: its rankers read the index's models (Doc2Vec's), which `fusion`,
    # named before the index was opened, does not have (doc2vec fusions said "no model").
    fusion = fusion_to_tune(engine.ranker(fusion.name, fusion.weight))
    engine.check_index()
    for base in fusion.bases:
        engine.check_ranker(base)
    bm25 = engine.ranker("bm25")
    # One completion serves every normalisation: `maxp`'s needs (passages) include the others'.
    widest = Fusion(fusion.bases, "maxp", fusion.weight)
    ndcg = np.zeros((len(settings), len(dataset.queries)), dtype=np.float64)
    bm25_ndcg = np.zeros(len(dataset.queries), dtype=np.float64)
    passages = False
    for column, (query_id, text) in enumerate(dataset.queries):
        query = engine.query(text)
        candidates = engine.complete(engine.window(query, window), widest)
        passages = passages or candidates.passage_scores is not None
        replayed = []
        for base in fusion.bases:
            whole = replace(candidates, exact_top=None, notes=[], unscored=set())
            scores = np.asarray(base.score(query, whole), dtype=np.float64)
            replayed.append(_Replayed(base, scores, frozenset(whole.unscored)))
        judged = dataset.qrels[query_id]

        def ndcg_of(ranker: Ranker) -> float:
            order = engine.rerank(query, candidates, ranker).order
            ranked = [candidates.candidates[i].doc_id for i in order]
            return ranking_metrics(ranked, judged, window)[METRIC]

        for row, setting in enumerate(settings):
            weight = fusion.weight if setting.weight is None else setting.weight
            ndcg[row, column] = ndcg_of(Fusion(replayed, setting.method, weight))
        bm25_ndcg[column] = ndcg_of(bm25)
        if on_query is not None:
            on_query()
    return GridScores(tuple(q for q, _ in dataset.queries), tuple(settings), ndcg, bm25_ndcg, passages)


def fold_of(queries: int, folds: int, seed: int) -> npt.NDArray[np.int64]:
    """(queries,) the fold (0 .. folds - 1) each query is held out in: a seeded random
    permutation cut into `folds` parts whose sizes differ by at most one."""
    order = np.random.default_rng(seed).permutation(queries)
    assigned = np.empty(queries, dtype=np.int64)
    for fold, members in enumerate(np.array_split(order, folds)):
        assigned[members] = fold
    return assigned


def best_setting(ndcg: npt.NDArray[np.float64], columns: npt.NDArray[np.bool_]) -> int:
    """The row of `ndcg` (settings, queries) with the best mean over `columns`; ties go
    to the first row (the default, see `grid`)."""
    means = ndcg[:, columns].mean(axis=1)
    return int(np.flatnonzero(means >= means.max() - _TIE)[0])


@dataclass(frozen=True)
class TuneResult:
    """What `reranker tune` reports.

    default: the setting in force (the ranker as named, at the fusion weight in force).
    fold_choices: the setting chosen on each fold's training queries.
    tuned, default_scores, bm25: (queries,) held-out nDCG@10 per query, in `query_ids` order.
    p_tuned_default, p_tuned_bm25, p_default_bm25: two-sided paired randomisation tests.
    chosen: the setting chosen on all queries (what --write-config stores), and
    chosen_mean / default_mean: their in-sample means over all queries.
    grid_means: each setting's mean over all queries, in grid order (in-sample).
    """

    dataset: str
    ranker: str
    bases: tuple[str, ...]
    window: int
    folds: int
    seed: int
    query_ids: tuple[str, ...]
    folds_of_queries: tuple[int, ...]
    default: Setting
    fold_choices: tuple[Setting, ...]
    tuned: tuple[float, ...]
    default_scores: tuple[float, ...]
    bm25: tuple[float, ...]
    p_tuned_default: float
    p_tuned_bm25: float
    p_default_bm25: float
    chosen: Setting
    chosen_mean: float
    default_mean: float
    grid_means: tuple[tuple[Setting, float], ...]
    passages: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "ranker": self.ranker,
            "metric": METRIC,
            "window": self.window,
            "queries": len(self.query_ids),
            "folds": self.folds,
            "seed": self.seed,
            "default": self.default.to_json(),
            "cross_validated": {
                "tuned": float(np.mean(self.tuned)),
                "default": float(np.mean(self.default_scores)),
                "bm25": float(np.mean(self.bm25)),
                "p_tuned_vs_default": self.p_tuned_default,
                "p_tuned_vs_bm25": self.p_tuned_bm25,
                "p_default_vs_bm25": self.p_default_bm25,
                "significance_test": randomization_test_name(len(self.query_ids)),
                # As the text says: each p is its comparison's own (evaluate's JSON gives
                # Holm-adjusted ones beside its raw p as "holm_p_values"; tune has none).
                "p_values_adjusted": False,
            },
            "fold_choices": [setting.to_json() for setting in self.fold_choices],
            "chosen": {
                **self.chosen.to_json(),
                "ranker": self.chosen.ranker_name(self.bases),
                "in_sample": self.chosen_mean,
                "default_in_sample": self.default_mean,
            },
            "grid": [{**setting.to_json(), "in_sample": mean} for setting, mean in self.grid_means],
            "passages": self.passages,
            "per_query": {
                query_id: {"fold": fold, "tuned": tuned, "default": default, "bm25": bm25}
                for query_id, fold, tuned, default, bm25 in zip(
                    self.query_ids, self.folds_of_queries, self.tuned, self.default_scores, self.bm25
                )
            },
        }


def cross_validate(scores: GridScores, *, dataset: str, ranker: str, bases: Sequence[str], window: int, folds: int, seed: int) -> TuneResult:
    """k-fold cross-validation by query over `scores` (the default setting is row 0).
    Raises ConfigError when there are fewer queries than folds, or fewer than 2 folds."""
    count = len(scores.query_ids)
    if folds < 2 or folds > count:
        raise ConfigError(f"cross-validation needs 2 to {count} folds for {count} judged queries, got {folds}")
    assigned = fold_of(count, folds, seed)
    tuned = np.zeros(count, dtype=np.float64)
    choices = []
    for fold in range(folds):
        in_fold = assigned == fold
        chosen = best_setting(scores.ndcg, ~in_fold)
        choices.append(scores.settings[chosen])
        tuned[in_fold] = scores.ndcg[chosen, in_fold]
    held_out = [float(x) for x in tuned]
    default = [float(x) for x in scores.ndcg[0]]
    bm25 = [float(x) for x in scores.bm25]
    everywhere = best_setting(scores.ndcg, np.ones(count, dtype=bool))
    means = scores.ndcg.mean(axis=1)
    return TuneResult(
        dataset=dataset,
        ranker=ranker,
        bases=tuple(bases),
        window=window,
        folds=folds,
        seed=seed,
        query_ids=scores.query_ids,
        folds_of_queries=tuple(int(f) for f in assigned),
        default=scores.settings[0],
        fold_choices=tuple(choices),
        tuned=tuple(held_out),
        default_scores=tuple(default),
        bm25=tuple(bm25),
        p_tuned_default=paired_randomization_p(held_out, default),
        p_tuned_bm25=paired_randomization_p(held_out, bm25),
        p_default_bm25=paired_randomization_p(default, bm25),
        chosen=scores.settings[everywhere],
        chosen_mean=float(means[everywhere]),
        default_mean=float(means[0]),
        grid_means=tuple((setting, float(mean)) for setting, mean in zip(scores.settings, means)),
        passages=scores.passages,
    )


def tune_report(result: TuneResult) -> str:
    """The text `reranker tune` prints."""

    def p(value: float) -> str:
        return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"

    tuned, default, bm25 = (float(np.mean(x)) for x in (result.tuned, result.default_scores, result.bm25))
    chosen_name = result.chosen.ranker_name(result.bases)
    default_label = f"default ({result.default.label()})"
    width = len(default_label)
    lines = [
        f"{result.dataset}: {result.ranker}, {len(result.query_ids)} queries, BM25 top {result.window}, "
        f"{result.folds}-fold cross-validation by query (seed {result.seed}), {len(result.grid_means)} settings",
        "",
        "held-out nDCG@10 (each query scored by the setting chosen without it):",
        f"  {'tuned':<{width}}  {tuned:.3f}",
        f"  {default_label:<{width}}  {default:.3f}   tuned vs default: {tuned - default:+.3f}, {p(result.p_tuned_default)}",
        f"  {'bm25':<{width}}  {bm25:.3f}   tuned vs bm25: {tuned - bm25:+.3f}, {p(result.p_tuned_bm25)}; "
        f"default vs bm25: {default - bm25:+.3f}, {p(result.p_default_bm25)}",
        # Holm's correction (compare, evaluate) is over several rankers tested against one
        # baseline; these are three different questions (tuned vs default is the one that
        # decides --write-config), left unadjusted as the reports leave their p against the
        # default, and a reader used to evaluate's "p (Holm)" must not take them for adjusted.
        f"  p: two-sided paired randomisation test over the {len(result.query_ids)} queries "
        f"({randomization_draws(len(result.query_ids))}); each comparison's own p, not adjusted for multiple comparisons",
        "  chosen per fold: " + ", ".join(setting.label() for setting in result.fold_choices),
        "",
        f"chosen on all queries: {chosen_name} at weight {result.chosen.weight:g}" if result.chosen.weight is not None
        else f"chosen on all queries: {chosen_name} (ranks; no weight)",
        f"  in-sample nDCG@10 {result.chosen_mean:.3f} (the default's {result.default_mean:.3f}; in-sample figures are optimistic, "
        "the held-out ones above are what to expect)",
    ]
    if not result.passages and any(setting.method == "maxp" for setting, _ in result.grid_means):
        lines.append("  note: the store keeps no passages, so maxp is min-max here")
    return "\n".join(lines)
