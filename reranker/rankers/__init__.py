"""One small interface for every ranker, and a plain-dict registry of them.

A ranker only scores: given a query and the candidate window (BM25 hits plus what the
ranker `needs` of each document), it returns one score per candidate, higher is better.
Ordering is shared (`rank_candidates`), so every ranker breaks ties the same way: by
BM25 rank. `Engine.complete` fetches what a ranker needs, so callers build a window
from BM25 hits (and texts a caller sent) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Callable, Literal, Protocol, Sequence

import numpy as np
import numpy.typing as npt

from reranker.config import DEFAULT_FUSION_WEIGHT, DEFAULT_WMD_BUDGET_MS
from reranker.errors import UnknownRankerError
from reranker.ranker_names import BASES, fusion_name, fusions
from reranker.text import WordsRead
from reranker.topics import Variant
from reranker.types import Candidate, Centering, DocVectorBatch, Query, TopicBatch

if TYPE_CHECKING:
    from reranker.doc2vec import Doc2VecModel
    from reranker.embeddings import WordVectors
    from reranker.ranker_names import Method

Scores = npt.NDArray[np.float64]
WordIds = npt.NDArray[np.int32]

# What a ranker may need of each candidate beyond its BM25 hit:
#   "topics"            the document's hidden topics and importances (the paper's)
#   "word_ids"          the document's in-vocabulary tokens (same tokenizer and stop list as
#                       the topics), as row numbers into the word vectors, in text order
#   "doc_vectors"       the document's stored Doc2Vec vector
#   "corrected_topics"  the document's corrected topics and backgrounds, and the index's
#                       centering (the common-direction correction)
#   "first_stage"       the candidates' first-stage scores (BM25 and the fusions read them);
#                       for candidates sent without any, `Engine.first_stage` supplies them
#   "passages"          BM25 of each candidate's best passage (`Store.passage_bm25`), where
#                       the store keeps passages: the `:maxp` fusions read it
Need = Literal["topics", "word_ids", "doc_vectors", "corrected_topics", "first_stage", "passages"]
# Where a window's first-stage scores came from: the first stage itself (BM25 hits, or
# scores a caller sent), nowhere yet (a caller sent texts in its order, without scores),
# BM25 of the texts with the index's statistics, or their order (-ln rank) where the
# service has no index to take statistics from.
FirstStage = Literal["scores", "missing", "index_bm25", "order"]
# The topic formula a ranker's explanations follow: the paper's, the authors' code's, or
# the corrected one (centred vectors, less each topic's background).
Formula = Variant | Literal["corrected"]


@dataclass(frozen=True)
class CandidateSet:
    """The window a ranker reorders: N BM25 candidates, and what the ranker needs of them
    (None until `Engine.complete` fills it): only what it needs is fetched or computed.

    exact_top: how many leading positions the caller shows, so must be ordered exactly;
    None means all. A ranker with a costly exact score (WMD) may order the rest by a
    bound.
    notes: a ranker appends a sentence here when it answered approximately (a time
    budget ran out); the service reports them as the response's reason.
    unscored: positions the ranker had nothing to score with (a document without words,
    without a Doc2Vec vector); it gives them its lowest score, and fusions leave them out
    of their scaling (one such outlier would squeeze the others together).
    notes and unscored are a scratch pad of one `Engine.rerank` call, which gives every
    call fresh ones. They stay mutable in a frozen value on purpose: `Ranker.score` returns
    Scores alone (one small interface), so this is where a ranker, and a fusion's base
    rankers, report what they found; returning it instead would change every ranker.
    words_read: the engine's scratch pad for one request's window (the copies `replace`
    makes share it): each sent text's words (`WordsRead`), by content key, read once for
    its topics and its terms (`Engine.read_words`), and dropped with the window.
    """

    candidates: tuple[Candidate, ...]
    topics: TopicBatch | None = None  # the paper's topics
    word_ids: tuple[WordIds | None, ...] | None = None  # None per document whose text is unavailable
    doc_vectors: DocVectorBatch | None = None
    corrected: TopicBatch | None = None  # with backgrounds
    centering: Centering | None = None
    texts: tuple[str | None, ...] | None = None  # texts a caller sent with the candidates
    first_stage: FirstStage = "scores"  # where the candidates' bm25_score came from
    query_text: str | None = None  # the query the window was retrieved for (passages are scored for it)
    passage_scores: Scores | None = None  # (N,) BM25 of each candidate's best passage, where the store has them
    exact_top: int | None = None
    notes: list[str] = field(default_factory=list, compare=False)
    unscored: set[int] = field(default_factory=set, compare=False)
    words_read: dict[str, WordsRead] = field(default_factory=dict, compare=False, repr=False)

    @property
    def bm25_scores(self) -> Scores:
        return np.fromiter((c.bm25_score for c in self.candidates), dtype=np.float64, count=len(self))

    def __len__(self) -> int:
        return len(self.candidates)


class Ranker(Protocol):
    """Scores a candidate window for a query.

    name: the registry name. variant: the topic formula its explanations use, or None
    for rankers that do not use topics. needs: what `Engine.complete` must fetch into
    the window before `score` (empty for rankers that use only BM25 scores).
    """

    name: str
    variant: Formula | None
    needs: frozenset[Need]

    def score(self, query: Query, window: CandidateSet) -> Scores:
        """(N,) finite scores, higher is better; deterministic for the same input."""
        ...


@dataclass(frozen=True)
class RankerOptions:
    """Settings and shared resources a ranker factory may read.

    vectors: the engine's word vectors (WMD measures distances between them).
    doc2vec: loads the Doc2Vec model trained for the index (raises RankerUnavailableError
    when none was); called on first use, so listing rankers never loads a model.
    """

    fusion_weight: float = DEFAULT_FUSION_WEIGHT
    wmd_budget_ms: float = DEFAULT_WMD_BUDGET_MS
    vectors: "WordVectors | None" = None
    doc2vec: "Callable[[], Doc2VecModel] | None" = None


RankerFactory = Callable[[RankerOptions], Ranker]


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


def _registry() -> dict[str, RankerFactory]:
    """A factory for each of RANKER_NAMES (reranker/ranker_names.py), in its order."""
    from reranker.rankers.bm25 import Bm25Ranker
    from reranker.rankers.doc2vec import Doc2VecRanker
    from reranker.rankers.fusion import Fusion
    from reranker.rankers.hidden_topics import CorrectedTopicsRanker, HiddenTopicsRanker
    from reranker.rankers.wmd import WmdRanker

    bases: dict[str, RankerFactory] = {
        "hidden_topics": lambda options: HiddenTopicsRanker("paper"),
        "hidden_topics_code": lambda options: HiddenTopicsRanker("code"),
        "hidden_topics_corrected": lambda options: CorrectedTopicsRanker(),
        "wmd": WmdRanker,
        "doc2vec": Doc2VecRanker,
    }

    def fused(factories: Sequence[RankerFactory], method: "Method") -> RankerFactory:
        return lambda options: Fusion([factory(options) for factory in factories], method, options.fusion_weight)

    registry: dict[str, RankerFactory] = {"bm25": lambda options: Bm25Ranker(), **{name: bases[name] for name in BASES}}
    for combo, method in fusions():
        registry[fusion_name(combo, method)] = fused([bases[name] for name in combo], method)
    return registry


RANKERS: dict[str, RankerFactory] = _registry()


def ranker_names() -> list[str]:
    return list(RANKERS)


def unweighted_reason(ranker: str, option: str = "fusion_weight") -> str:
    """Why a fusion weight (`option`, as the caller spelt it) is refused for `ranker`, one
    not in `weighted_ranker_names`: heard and ignored, it would answer as if it had been
    applied. The service's 400 and the CLI's usage error say this."""
    return (
        f"weighs a min-max, z-score or maxp fusion with BM25; ranker {ranker!r} has no weight "
        f"(reciprocal rank fusion uses ranks only): leave {option} out, or name such a fusion"
    )


@cache
def weighted_ranker_names() -> tuple[str, ...]:
    """The rankers a fusion weight applies to: the min-max, z-score and maxp fusions with
    BM25 (not `:rrf`, which reads ranks only, nor a ranker alone)."""
    from reranker.rankers.fusion import Fusion

    built = {name: get_ranker(name) for name in RANKERS}  # cheap: models load on first use
    return tuple(name for name, ranker in built.items() if isinstance(ranker, Fusion) and ranker.method != "rrf")
