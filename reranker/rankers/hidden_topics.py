"""Hidden-topic relevance of each candidate to the summary: the paper's formula (Gong et
al. 2018, Eq. 11), the authors' code's, and the corrected one (`reranker.topics`,
"the common-direction correction")."""

from __future__ import annotations

import numpy as np

from reranker.errors import RankerUnavailableError
from reranker.rankers import CandidateSet, Formula, Need, Scores
from reranker.topics import Variant, center, corrected_score, score
from reranker.types import Query


class HiddenTopicsRanker:
    """Scores candidates by r(W, S) with the paper's formula or the authors' code's."""

    def __init__(self, variant: Variant = "paper") -> None:
        self.variant: Formula | None = variant
        self.needs: frozenset[Need] = frozenset({"topics"})
        self.name = "hidden_topics" if variant == "paper" else "hidden_topics_code"
        self._variant: Variant = variant

    def score(self, query: Query, window: CandidateSet) -> Scores:
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        batch = window.topics
        if batch is None:
            raise RankerUnavailableError(f"{self.name} needs the topics in the window (Engine.complete)")
        return np.asarray(score(query.vectors, batch.topics, batch.importances, self._variant))


class CorrectedTopicsRanker:
    """Scores candidates by r'(W, S) = sum_k i_k (r(h_k, S) - b_k) on centred word vectors.

    The topics, importances and backgrounds are those the index computed with its
    centering; the query's word vectors are centred the same way here.
    """

    name = "hidden_topics_corrected"

    def __init__(self) -> None:
        self.variant: Formula | None = "corrected"
        self.needs: frozenset[Need] = frozenset({"corrected_topics"})

    def score(self, query: Query, window: CandidateSet) -> Scores:
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        batch, centering = window.corrected, window.centering
        if batch is None or batch.backgrounds is None or centering is None:
            raise RankerUnavailableError(f"{self.name} needs the corrected topics in the window (Engine.complete)")
        words = center(query.vectors, centering.mu, centering.direction) if len(query.vectors) else query.vectors
        return corrected_score(words, batch.topics, batch.importances, batch.backgrounds)
