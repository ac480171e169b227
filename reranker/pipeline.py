"""The read path: summary query -> BM25 window -> topics -> ranker -> page (+ explanations).

`Engine` holds the long-lived pieces (store, word vectors, stop list) and is what the CLI,
the evaluation and the HTTP service share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from reranker.embeddings import WordVectors
from reranker.rankers import (
    CandidateSet,
    Ranker,
    RankerOptions,
    Scores,
    get_ranker,
    rank_candidates,
)
from reranker.store import Store
from reranker.text import tokenize
from reranker.topics import Variant, best_aligned, topic_contributions, topic_relevance
from reranker.types import Filter, Query, RankedDoc, SearchResult, TopicExplanation

if TYPE_CHECKING:
    from reranker.config import Settings

EXPLAIN_WORDS = 5


def build_engine(settings: "Settings", store_name: str | Callable[[WordVectors], str] | None = None) -> "Engine":
    """Vectors, store and stop list as `settings` say.

    `store_name` (see `open_store`) may depend on the vectors: evaluation keeps one index
    per data set and vectors.
    """
    from reranker.embeddings import load_vectors
    from reranker.store import open_store
    from reranker.text import load_stopwords

    vectors = load_vectors(settings.vectors, settings.data_dir / "vectors")
    store = open_store(settings, store_name(vectors) if callable(store_name) else store_name)
    return Engine(
        store=store,
        vectors=vectors,
        stopwords=load_stopwords(settings.stopwords_file),
        ranker_options=RankerOptions(fusion_weight=settings.fusion_weight),
    )


@dataclass
class Engine:
    """Search and rerank over one store with one set of word vectors."""

    store: Store
    vectors: WordVectors
    stopwords: frozenset[str] | None = None
    ranker_options: RankerOptions = field(default_factory=RankerOptions)

    def check_index(self) -> None:
        """Raise IndexMismatchError if the store was built with other word vectors."""
        info = self.store.index_info()
        if info is not None:
            info.check(self.vectors.info)

    def query(self, text: str) -> Query:
        tokens = tokenize(text, self.stopwords)
        lookup = self.vectors.lookup(tokens)
        return Query(text=text, words=lookup.words, vectors=lookup.vectors, oov=lookup.oov)

    def window(self, query: Query, size: int, filters: Sequence[Filter] = ()) -> CandidateSet:
        """The BM25 top-`size` for the query (passing `filters`) and their topics."""
        candidates = tuple(self.store.bm25(query.text, size, filters))
        topics = self.store.topics([c.doc_id for c in candidates])
        return CandidateSet(candidates=candidates, topics=topics)

    def rerank(self, query: Query, window: CandidateSet, ranker: Ranker) -> tuple[list[int], Scores]:
        """(positions of the window's candidates in the ranker's order, their scores).

        A query without any in-vocabulary word keeps the BM25 order: the topic scores
        would all be 0 and say nothing.
        """
        if len(window) == 0:
            return [], np.zeros(0, dtype=np.float64)
        scores = ranker.score(query, window)
        if len(query.words) == 0 and ranker.variant is not None:
            return list(range(len(window))), scores
        return rank_candidates(scores, window), scores

    def search(
        self,
        text: str,
        ranker_name: str = "hidden_topics",
        *,
        window: int = 100,
        size: int = 10,
        explain: bool = False,
        filters: Sequence[Filter] = (),
    ) -> SearchResult:
        """BM25 top-`window` (passing `filters`), reranked by `ranker_name`; the first `size` hits."""
        ranker = get_ranker(ranker_name, self.ranker_options)
        self.check_index()
        started = time.perf_counter()
        query = self.query(text)
        candidates = self.window(query, window, filters)
        retrieved = time.perf_counter()
        order, scores = self.rerank(query, candidates, ranker)
        order = order[:size]
        reranked = time.perf_counter()
        explanations = (
            self.explain(query, candidates, order, ranker.variant)
            if explain and ranker.variant is not None
            else {}
        )
        hits = tuple(
            RankedDoc(
                doc_id=candidates.candidates[position].doc_id,
                rank=rank,
                score=float(scores[position]),
                bm25_score=candidates.candidates[position].bm25_score,
                bm25_rank=candidates.candidates[position].bm25_rank,
                title=candidates.candidates[position].title,
                explanation=explanations.get(position, ()),
            )
            for rank, position in enumerate(order, start=1)
        )
        status = "ok"
        if len(query.words) == 0 and ranker.variant is not None:
            status = "query_out_of_vocabulary"
        return SearchResult(
            query=text,
            ranker=ranker.name,
            hits=hits,
            window=window,
            query_words=query.words,
            oov_words=tuple(dict.fromkeys(query.oov)),
            status=status,
            timings_ms={
                "retrieve": 1000 * (retrieved - started),
                "rerank": 1000 * (reranked - retrieved),
            },
        )

    def explain(
        self, query: Query, window: CandidateSet, positions: Sequence[int], variant: Variant
    ) -> dict[int, tuple[TopicExplanation, ...]]:
        """Per-topic contributions, topic words and aligned query words for `positions`."""
        batch = window.topics
        chosen = list(positions)
        # Computed over the whole window, exactly as the ranker scored it (a sub-batch
        # can round differently in BLAS), so contributions add up to the score.
        relevance = topic_relevance(query.vectors, batch.topics, variant)[chosen]
        contributions = topic_contributions(query.vectors, batch.topics, batch.importances, variant)[chosen]
        topics, importances = batch.topics[chosen], batch.importances[chosen]
        texts = self.store.documents([batch.doc_ids[p] for p in chosen])
        query_distinct = list(dict.fromkeys(query.words))
        query_lookup = self.vectors.lookup(query_distinct)
        result: dict[int, tuple[TopicExplanation, ...]] = {}
        for row, position in enumerate(chosen):
            doc = texts.get(batch.doc_ids[position])
            k = int(np.count_nonzero(importances[row]))
            doc_words: tuple[str, ...] = ()
            doc_vectors = np.zeros((0, self.vectors.dim), dtype=np.float32)
            if doc is not None:
                distinct, _, _ = self.vectors.lookup_counts(tokenize(doc.full_text, self.stopwords))
                doc_words, doc_vectors = distinct.words, distinct.vectors
            doc_best = best_aligned(doc_vectors, topics[row, :k], EXPLAIN_WORDS)
            query_best = best_aligned(query_lookup.vectors, topics[row, :k], EXPLAIN_WORDS)
            result[position] = tuple(
                TopicExplanation(
                    rank=t + 1,
                    importance=float(importances[row, t]),
                    relevance=float(relevance[row, t]),
                    contribution=float(contributions[row, t]),
                    topic_words=tuple(doc_words[i] for i in doc_best[t]),
                    query_words=tuple(query_lookup.words[i] for i in query_best[t]),
                )
                for t in range(k)
            )
        return result
