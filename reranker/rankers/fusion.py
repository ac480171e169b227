"""Fusion of any ranker with BM25.

BM25 scores are unbounded and query-dependent; topic scores lie in a narrow band of
[0, 1]; WMD scores are negative distances. Mixing them needs a common scale:

  minmax  weight * minmax(ranker) + (1 - weight) * minmax(bm25), over the window
  zscore  weight * z(ranker) + (1 - weight) * z(bm25), z = (s - mean) / std over the window
  rrf     reciprocal rank fusion (Cormack et al. 2009): 1/(60 + rank_ranker) + 1/(60 + rank_bm25);
          ranks only, so no scale at all (the weight does not apply)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np

from reranker.rankers import CandidateSet, Ranker, Scores, rank_candidates
from reranker.types import Query

Method = Literal["minmax", "zscore", "rrf"]
METHODS: tuple[Method, ...] = ("minmax", "zscore", "rrf")
RRF_K = 60  # the constant of Cormack et al.; it damps the weight of the very first ranks
# A spread this small (relative to the scores) is float noise, not a difference: scaling
# it up to [0, 1] would turn identical documents that differ in the last bit into the best
# and the worst of the window.
NOISE = 1e-7


def min_max(scores: Scores) -> Scores:
    """Scale to [0, 1] over the window; a constant window (up to float noise) maps to zeros."""
    if scores.size == 0:
        return scores
    low, high = float(scores.min()), float(scores.max())
    if high - low <= NOISE * max(1.0, abs(low), abs(high)):
        return np.zeros_like(scores)
    return (scores - low) / (high - low)


def z_score(scores: Scores) -> Scores:
    """(s - mean) / std over the window; a constant window (up to float noise) maps to zeros."""
    if scores.size == 0:
        return scores
    spread = float(scores.std())
    if spread <= NOISE * max(1.0, float(np.abs(scores).max())):
        return np.zeros_like(scores)
    return (scores - scores.mean()) / spread


def fusion_name(base: str, method: Method) -> str:
    """The registry name: `hidden_topics+bm25` (min-max), `wmd+bm25:rrf`, ..."""
    return f"{base}+bm25" if method == "minmax" else f"{base}+bm25:{method}"


class Fusion:
    """`base` fused with the window's BM25 scores by `method`."""

    def __init__(self, base: Ranker, method: Method = "minmax", weight: float = 0.5) -> None:
        if method not in METHODS:
            raise ValueError(f"fusion method must be one of {', '.join(METHODS)}, got {method!r}")
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"fusion weight must lie in [0, 1], got {weight}")
        self.base = base
        self.method: Method = method
        self.weight = weight
        self.name = fusion_name(base.name, method)
        self.variant = base.variant
        self.needs = base.needs

    def score(self, query: Query, window: CandidateSet) -> Scores:
        return self.components(query, window)[0]

    def components(self, query: Query, window: CandidateSet) -> tuple[Scores, Scores]:
        """(fused scores, the base ranker's own scores): responses show both."""
        # Any candidate can reach the fused top, and the scaling reads the whole window's
        # spread: the base ranker must score every candidate exactly (WMD may not prune).
        whole = replace(window, exact_top=None, notes=window.notes, unscored=window.unscored)
        own = np.asarray(self.base.score(query, whole), dtype=np.float64)
        return self.fuse(own, window), own

    def fuse(self, own: Scores, window: CandidateSet) -> Scores:
        bm25 = window.bm25_scores
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        if self.method == "rrf":  # (unscored candidates already rank last by their own score)
            ranks = np.empty(len(window), dtype=np.float64)
            ranks[rank_candidates(own, window)] = np.arange(1, len(window) + 1)
            bm25_ranks = np.fromiter((c.bm25_rank for c in window.candidates), dtype=np.float64, count=len(window))
            return 1.0 / (RRF_K + ranks) + 1.0 / (RRF_K + bm25_ranks)
        scale = min_max if self.method == "minmax" else z_score
        # Candidates the base ranker could not score are scaled apart: they get its lowest
        # scaled score, and the others' spread is not squeezed by their placeholder score.
        scored = np.ones(len(window), dtype=bool)
        scored[sorted(window.unscored)] = False
        scaled = np.zeros(len(window), dtype=np.float64)
        if scored.any():
            scaled[scored] = scale(own[scored])
            scaled[~scored] = scaled[scored].min()
        return self.weight * scaled + (1.0 - self.weight) * scale(bm25)
