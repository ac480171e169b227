"""One small interface for every ranker, and a plain-dict registry of them.

A ranker only scores: given a query and the candidate window (BM25 hits plus their
topics), it returns one score per candidate, higher is better. Ordering is shared
(`rank_candidates`), so every ranker breaks ties the same way: by BM25 rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import numpy.typing as npt

from reranker.errors import UnknownRankerError
from reranker.topics import Variant
from reranker.types import Candidate, Query, TopicBatch

Scores = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CandidateSet:
    """The window a ranker reorders: N BM25 candidates and their stacked topics."""

    candidates: tuple[Candidate, ...]
    topics: TopicBatch

    @property
    def bm25_scores(self) -> Scores:
        return np.fromiter((c.bm25_score for c in self.candidates), dtype=np.float64, count=len(self))

    def __len__(self) -> int:
        return len(self.candidates)


class Ranker(Protocol):
    """Scores a candidate window for a query.

    name: the registry name. variant: the topic formula its explanations use, or None
    for rankers that do not use topics.
    """

    name: str
    variant: Variant | None

    def score(self, query: Query, window: CandidateSet) -> Scores:
        """(N,) finite scores, higher is better; deterministic for the same input."""
        ...


@dataclass(frozen=True)
class RankerOptions:
    """Settings a ranker factory may read."""

    fusion_weight: float = 0.5


RankerFactory = Callable[[RankerOptions], Ranker]


def _registry() -> dict[str, RankerFactory]:
    from reranker.rankers.bm25 import Bm25Ranker
    from reranker.rankers.fusion import LinearFusion
    from reranker.rankers.hidden_topics import HiddenTopicsRanker

    return {
        "bm25": lambda options: Bm25Ranker(),
        "hidden_topics": lambda options: HiddenTopicsRanker("paper"),
        "hidden_topics_code": lambda options: HiddenTopicsRanker("code"),
        "hidden_topics+bm25": lambda options: LinearFusion(
            HiddenTopicsRanker("paper"), weight=options.fusion_weight
        ),
    }


RANKERS: dict[str, RankerFactory] = _registry()


def ranker_names() -> list[str]:
    return list(RANKERS)


def get_ranker(name: str, options: RankerOptions | None = None) -> Ranker:
    """The ranker registered as `name`. Raises UnknownRankerError listing valid names."""
    try:
        factory = RANKERS[name]
    except KeyError:
        raise UnknownRankerError(name, list(RANKERS)) from None
    return factory(options or RankerOptions())


def rank_candidates(scores: Scores, window: CandidateSet) -> list[int]:
    """Candidate positions in the new order: by score descending, ties by BM25 rank.

    Raises ValueError if the ranker returned the wrong number of scores or a NaN.
    """
    if scores.shape != (len(window),):
        raise ValueError(f"ranker returned {scores.size} scores for {len(window)} candidates")
    if not np.isfinite(scores).all():
        raise ValueError("ranker returned a non-finite score")
    bm25_ranks = np.fromiter((c.bm25_rank for c in window.candidates), dtype=np.int64, count=len(window))
    # lexsort sorts by the last key first.
    return [int(i) for i in np.lexsort((bm25_ranks, -scores))]
