"""Score fusion of a ranker with BM25.

BM25 scores are unbounded and query-dependent, topic scores lie in a narrow band of
[0, 1]: both are min-max normalised over the window before they are mixed.
"""

from __future__ import annotations

import numpy as np

from reranker.rankers import CandidateSet, Ranker, Scores
from reranker.types import Query


def min_max(scores: Scores) -> Scores:
    """Scale to [0, 1] over the window; a constant window maps to all zeros."""
    if scores.size == 0:
        return scores
    low, high = float(scores.min()), float(scores.max())
    if high - low <= 0.0:
        return np.zeros_like(scores)
    return (scores - low) / (high - low)


class LinearFusion:
    """weight * minmax(ranker) + (1 - weight) * minmax(bm25)."""

    def __init__(self, ranker: Ranker, weight: float = 0.5) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"fusion weight must lie in [0, 1], got {weight}")
        self.ranker = ranker
        self.weight = weight
        self.name = f"{ranker.name}+bm25"
        self.variant = ranker.variant

    def score(self, query: Query, window: CandidateSet) -> Scores:
        mixed = self.weight * min_max(self.ranker.score(query, window))
        return mixed + (1.0 - self.weight) * min_max(window.bm25_scores)
