"""The first-stage order, as a ranker: the baseline every other ranker is compared with."""

from __future__ import annotations

from reranker.rankers import CandidateSet, Formula, Need, Scores
from reranker.types import Query


class Bm25Ranker:
    name = "bm25"
    variant: Formula | None = None
    needs: frozenset[Need] = frozenset({"first_stage"})

    def score(self, query: Query, window: CandidateSet) -> Scores:
        return window.bm25_scores
