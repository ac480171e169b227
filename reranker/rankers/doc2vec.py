"""Doc2Vec ranker: cosine between the query's inferred paragraph vector and each
candidate's stored one (Le & Mikolov 2014; Lau & Baldwin 2016 for its use in IR).

The model is the one `reranker train doc2vec` recorded for the index, loaded on first
use (`RankerOptions.doc2vec`); document vectors come with the window
(`CandidateSet.doc_vectors`). The cost is one inference (about 1 ms for a 100-word query
at 10 epochs) and one (N, dim) matrix-vector product.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from reranker.errors import NO_DOC2VEC_MODEL, IndexMismatchError, RankerUnavailableError
from reranker.rankers import CandidateSet, Formula, Need, RankerOptions, Scores
from reranker.types import Query

# A candidate without a vector scores the lowest cosine there is, so it sinks to the
# bottom of the window (below every candidate that has one, ties by BM25 rank).
MISSING_SCORE = -1.0


def cosine_scores(query_vector: npt.NDArray[np.floating], vectors: npt.NDArray[np.floating]) -> Scores:
    """(N,) float64 cosine of the (dim,) `query_vector` with each row of (N, dim) `vectors`,
    clipped to [-1, 1]; 0 for a zero row or a zero query."""
    rows = np.asarray(vectors, dtype=np.float64)
    query = np.asarray(query_vector, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(query)
    dots = rows @ query
    scores = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return np.asarray(np.clip(scores, -1.0, 1.0), dtype=np.float64)


class Doc2VecRanker:
    """Scores candidates by cosine(inferred query vector, stored document vector)."""

    name = "doc2vec"
    variant: Formula | None = None
    needs: frozenset[Need] = frozenset({"doc_vectors"})

    def __init__(self, options: RankerOptions) -> None:
        self.options = options

    def score(self, query: Query, window: CandidateSet) -> Scores:
        """(N,) cosines in [-1, 1]; MISSING_SCORE for candidates without a vector; all
        zeros (BM25 order kept) when no query token is known to the model.

        Raises RankerUnavailableError when no model was trained for the index,
        IndexMismatchError when the window's vectors come from another model than the
        loaded one, ValueError when the window was not completed with document vectors.
        """
        if self.options.doc2vec is None:
            raise RankerUnavailableError(NO_DOC2VEC_MODEL)
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        batch = window.doc_vectors
        if batch is None or len(batch.doc_ids) != len(window):
            raise ValueError("the doc2vec ranker needs the candidates' document vectors; complete the window first")
        model = self.options.doc2vec()
        if batch.model != model.info.checksum:
            raise IndexMismatchError(
                f"the candidates' document vectors come from Doc2Vec model {batch.model[:12] or '(none)'} "
                f"but model {model.info.checksum[:12]} is loaded; retrain (reranker train doc2vec CORPUS) "
                "or restart the service"
            )
        query_vector = model.infer(query.tokens)
        if not query_vector.any():
            return np.zeros(len(window), dtype=np.float64)
        scores = cosine_scores(query_vector, batch.vectors)
        # By position, not id: a missing row is all zeros (a real vector never is), and
        # texts sent without an id have placeholder ids a stored id may equal.
        missing = ~batch.vectors.any(axis=1)
        scores[missing] = MISSING_SCORE
        window.unscored.update(np.flatnonzero(missing).tolist())
        return scores
