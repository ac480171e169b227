"""Hidden-topic relevance (Gong et al. 2018, Eq. 11) of each candidate to the summary."""

from __future__ import annotations

import numpy as np

from reranker.rankers import CandidateSet, Need, Scores
from reranker.topics import Variant, score
from reranker.types import Query


class HiddenTopicsRanker:
    """Scores candidates by r(W, S) with the paper's formula or the authors' code's."""

    def __init__(self, variant: Variant = "paper") -> None:
        self.variant: Variant | None = variant
        self.needs: frozenset[Need] = frozenset()
        self.name = "hidden_topics" if variant == "paper" else "hidden_topics_code"
        self._variant: Variant = variant

    def score(self, query: Query, window: CandidateSet) -> Scores:
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        batch = window.topics
        return np.asarray(score(query.vectors, batch.topics, batch.importances, self._variant))
