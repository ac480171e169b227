"""Fusion of one or more rankers with BM25.

BM25 scores are unbounded and query-dependent; topic scores lie in a narrow band of
[0, 1]; WMD scores are negative distances. Mixing them needs a common scale. With rankers
r_1 .. r_n (n >= 1) the rankers share the weight equally, so adding a ranker never
changes how much BM25 counts:

  minmax  sum_i (weight / n) * minmax(r_i) + (1 - weight) * minmax(bm25), over the window
  zscore  the same with z = (s - mean) / std over the window
  rrf     reciprocal rank fusion (Cormack et al. 2009): sum_i 1/(60 + rank_i) + 1/(60 + rank_bm25);
          ranks only, so no scale at all (the weight does not apply)
  maxp    min-max, with the first stage judged twice: by the document's BM25 and by its best
          passage's ("MaxP": a summary often matches one part of a long document), which
          share BM25's weight equally: ... + ((1 - weight) / 2) * (minmax(bm25) + minmax(passage
          bm25)). Where the store keeps no passages, it is `minmax`.

We keep this small piece rather than take a library: it must leave out of the scaling
the candidates a ranker could not score (see `fuse`), which no fusion library does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from reranker.config import DEFAULT_FUSION_WEIGHT
from reranker.ranker_names import METHODS, Method, fusion_name
from reranker.rankers import CandidateSet, Need, Ranker, Scores, rank_candidates
from reranker.types import Query

RRF_K = 60  # the constant of Cormack et al.; it damps the weight of the very first ranks
# A spread this small (relative to the scores) is float noise, not a difference: scaling
# it up to [0, 1] would turn identical documents that differ in the last bit into the best
# and the worst of the window.
NOISE = 1e-7


# Scores beyond this magnitude are scaled down first: their spread (or their squares)
# would overflow to infinity and the scaled scores become NaN (a caller's first-stage
# scores of +-1.8e308, as schemathesis sent them).
_HUGE = 2.0**500


def _tamed(scores: Scores) -> Scores:
    """`scores` times an exact power of two that brings the largest magnitude below 1 when
    it is huge (min-max and z-scores do not change with the scale); else as they are."""
    peak = float(np.abs(scores).max())
    if peak <= _HUGE:
        return scores
    scaled: Scores = np.ldexp(scores, -int(np.frexp(peak)[1]))
    return scaled


def min_max(scores: Scores) -> Scores:
    """Scale to [0, 1] over the window; a constant window (up to float noise) maps to zeros."""
    if scores.size == 0:
        return scores
    scores = _tamed(scores)
    low, high = float(scores.min()), float(scores.max())
    if high - low <= NOISE * max(1.0, abs(low), abs(high)):
        return np.zeros_like(scores)
    return (scores - low) / (high - low)


def z_score(scores: Scores) -> Scores:
    """(s - mean) / std over the window; a constant window (up to float noise) maps to zeros."""
    if scores.size == 0:
        return scores
    scores = _tamed(scores)
    spread = float(scores.std())
    if spread <= NOISE * max(1.0, float(np.abs(scores).max())):
        return np.zeros_like(scores)
    scaled: Scores = (scores - scores.mean()) / spread
    return scaled


@dataclass(frozen=True)
class FusionPart:
    """One term of a fused score, for explanations.

    name: the ranker's name, or "bm25" for the first stage.
    own: (N,) the ranker's own scores (BM25's: the first-stage scores).
    share: (N,) what it adds to the fused score: the fused score is the sum of the parts'
    shares, added in the order `Fusion.parts` lists them.
    """

    name: str
    own: Scores
    share: Scores


class Fusion:
    """The rankers `bases` fused with the window's BM25 scores by `method`.

    The first base speaks for the fusion: its formula is the one explanations follow,
    and its scores are the `own` scores responses show beside the fused ones.
    """

    def __init__(self, bases: Ranker | Sequence[Ranker], method: Method = "minmax", weight: float = DEFAULT_FUSION_WEIGHT) -> None:
        if method not in METHODS:
            raise ValueError(f"fusion method must be one of {', '.join(METHODS)}, got {method!r}")
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"fusion weight must lie in [0, 1], got {weight}")
        self.bases: tuple[Ranker, ...] = tuple(bases) if isinstance(bases, Sequence) else (bases,)
        if not self.bases:
            raise ValueError("a fusion needs at least one ranker besides BM25")
        self.method: Method = method
        self.weight = weight
        self.name = fusion_name([base.name for base in self.bases], method)
        self.variant = next((base.variant for base in self.bases if base.variant is not None), None)
        first_stage: frozenset[Need] = frozenset({"first_stage", "passages"} if method == "maxp" else {"first_stage"})
        self.needs = first_stage.union(*(base.needs for base in self.bases))

    def score(self, query: Query, window: CandidateSet) -> Scores:
        return self.components(query, window)[0]

    def components(self, query: Query, window: CandidateSet) -> tuple[Scores, Scores]:
        """(fused scores, the first base ranker's own scores): responses show both."""
        parts = self.parts(query, window)
        return fused_total(parts, len(window)), parts[0].own

    def parts(self, query: Query, window: CandidateSet) -> tuple[FusionPart, ...]:
        """The fused score's terms: each base ranker's, in order, then BM25's (last).
        `fused_total` adds them up to the fused score."""
        found: list[FusionPart] = []
        for base in self.bases:
            # Any candidate can reach the fused top, and the scaling reads the whole
            # window's spread: each ranker must score every candidate exactly (WMD may not
            # prune). Each gets its own list of unscored candidates: one ranker's gaps
            # (a document without a Doc2Vec vector) are not another's.
            whole = replace(window, exact_top=None, notes=window.notes, unscored=set())
            own = np.asarray(base.score(query, whole), dtype=np.float64)
            found.append(FusionPart(base.name, own, self._part(own, whole.unscored, window)))
            window.unscored.update(whole.unscored)
        if self.method == "maxp" and window.passage_scores is not None and len(window):
            half = (1.0 - self.weight) / 2.0
            found.append(FusionPart("bm25", window.bm25_scores, half * min_max(window.bm25_scores)))
            found.append(FusionPart("passages", window.passage_scores, half * min_max(window.passage_scores)))
        else:
            found.append(FusionPart("bm25", window.bm25_scores, self._bm25_part(window)))
        return tuple(found)

    def _part(self, own: Scores, unscored: set[int], window: CandidateSet) -> Scores:
        """One ranker's share of the fused score."""
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        if self.method == "rrf":  # (unscored candidates already rank last by their own score)
            ranks = np.empty(len(window), dtype=np.float64)
            ranks[rank_candidates(own, window)] = np.arange(1, len(window) + 1)
            return 1.0 / (RRF_K + ranks)
        scale = z_score if self.method == "zscore" else min_max
        # Candidates the ranker could not score are scaled apart: they get its lowest
        # scaled score, and the others' spread is not squeezed by their placeholder score.
        scored = np.ones(len(window), dtype=bool)
        scored[sorted(unscored)] = False
        scaled = np.zeros(len(window), dtype=np.float64)
        if scored.any():
            scaled[scored] = scale(own[scored])
            scaled[~scored] = scaled[scored].min()
        return (self.weight / len(self.bases)) * scaled

    def _bm25_part(self, window: CandidateSet) -> Scores:
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        if self.method == "rrf":
            # Ranked by the first-stage scores the window holds, as the other methods read
            # them: for texts sent without scores those are BM25 over the texts (`first_stage`),
            # not the order they came in; ties keep that order (a search's window: the same).
            ranks = np.empty(len(window), dtype=np.float64)
            ranks[rank_candidates(window.bm25_scores, window)] = np.arange(1, len(window) + 1)
            return 1.0 / (RRF_K + ranks)
        scale = z_score if self.method == "zscore" else min_max
        return (1.0 - self.weight) * scale(window.bm25_scores)


def fused_total(parts: Sequence[FusionPart], size: int) -> Scores:
    """(size,) the sum of the parts' shares, added in their order (so an explanation that
    adds the same numbers in the same order gets the same float)."""
    total = np.zeros(size, dtype=np.float64)
    for part in parts:
        total += part.share
    return total
