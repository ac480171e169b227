"""Word Mover's Distance ranker, with prefetch-and-prune so the shown top is exact.

WMD (Kusner, Sun, Kolkin and Weinberger, "From Word Embeddings To Document Distances",
ICML 2015, Eq. 1) is the cheapest way to move the query's normalised bag of words
(nBOW: each distinct word weighted by count / length) onto the document's, paying the
Euclidean distance between word vectors per unit of weight moved. The exact distance is
gensim's `KeyedVectors.wmdistance` (an optimal-transport solve by POT): unit-normalised
vectors, out-of-vocabulary words dropped before weighting. A candidate scores -WMD.

One solve costs 10-60 ms for a 2,000-word document, so a window of 100 takes seconds.
Cheap lower bounds, computed with the same unit vectors and weights as gensim, let most
solves be skipped:

  WCD   word centroid distance ||X q - X' d||           (Kusner et al., Sec. 4, Eq. 6)
  RWMD  relaxed WMD: drop one of the two flow constraints, so every word moves all
        its weight to its nearest word on the other side; the larger of the two
        one-sided relaxations                           (Kusner et al., Sec. 4, Eq. 7-9)
  dual  the transport problem's dual objective at feasible potentials: for any
        potentials u on the query words, sum_i q_i u_i + sum_j d_j min_i (D_ij - u_i)
        <= WMD (weak duality). u = 0 gives one side of RWMD; u from a few entropic
        (Sinkhorn) iterations (Cuturi, NIPS 2013) comes within ~0.2% of WMD.

All are <= WMD for every pair whatever the potentials, so their maximum is too. The dual
bound matters: between a summary and long documents of one field RWMD sits 3-5% below
WMD, about the spread of WMD across a BM25 window, and alone it prunes only about half
the solves.

Candidates are visited in increasing order of their bound; once k exact distances are
known, the first candidate whose bound exceeds the k-th smallest exact distance ends the
visit. Every candidate not visited then has WMD >= bound > k-th best, strictly, so no
skipped candidate can belong in the top k or tie with it: the top k (with the shared
tie-break by BM25 rank) is exactly what computing every distance would give. Skipped
candidates score -bound, which ranks them below the top k. (Kusner et al. sort by WCD
and compute RWMD on the way; in a window of a few hundred candidates the bounds of all
of them cost less than a few solves, and visiting by the tightest bound needs the fewest.)

A per-request time budget stops exact solves early; candidates left without one score
-bound (the top k may then be approximate) and the window gets a note saying so.
"""

from __future__ import annotations

import heapq
import importlib.util
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from reranker.errors import RankerUnavailableError
from reranker.rankers import CandidateSet, Formula, Need, RankerOptions, Scores, WordIds
from reranker.types import Query

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

    from reranker.embeddings import WordVectors

log = logging.getLogger(__name__)

# Float slack on the bounds: they use another formula for word distances than gensim
# (a Gram matrix with the vectors' own float64 norms, not scipy's cdist), so a bound can
# exceed an equal exact distance by rounding error (~1e-12 measured; the squared lengths
# of float32-normalised vectors are not exactly 1, which is why they are not assumed to
# be). A candidate is skipped only when its bound is past the k-th best by more than this;
# a wider margin would only cost an occasional extra solve.
BOUND_TOLERANCE = 1e-6

# Entropic regularisation and iterations for the dual bound's potentials. Any potentials
# give a valid bound, so these trade only tightness against time: at 0.02 (distances lie
# in [0, 2]) and 50 iterations the bound comes within ~0.002 of WMD, for under 1 ms a
# 2,000-word document; fewer iterations cost more exact solves than they save.
SINKHORN_EPSILON = 0.02
SINKHORN_ITERATIONS = 50


@dataclass(frozen=True)
class WordBag:
    """A text as gensim's WMD sees it.

    ids: (u,) int32 distinct rows into the word vectors, ascending.
    weights: (u,) float64 nBOW weights, count / number of in-vocabulary tokens (sum 1).
    vectors: (u, d) float64 unit-normalised word vectors (gensim's `norm=True`).
    squared_norms: (u,) their squared lengths: 1 only up to float32 rounding (~2e-7).
    """

    ids: WordIds
    weights: npt.NDArray[np.float64]
    vectors: npt.NDArray[np.float64]
    squared_norms: npt.NDArray[np.float64]

    @property
    def centroid(self) -> npt.NDArray[np.float64]:
        """(d,) the weighted mean word vector."""
        return np.asarray(self.weights @ self.vectors)


def word_bag(keyed_vectors: KeyedVectors, word_ids: WordIds) -> WordBag:
    """The nBOW of a token sequence given as rows into `keyed_vectors` (n >= 1 tokens)."""
    ids, counts = np.unique(word_ids, return_counts=True)
    keyed_vectors.fill_norms()  # cached on the vectors; gensim's wmdistance does the same
    # float32 division exactly as gensim's get_vector(norm=True), then widened as cdist does.
    unit = keyed_vectors.vectors[ids] / keyed_vectors.norms[ids, np.newaxis]
    vectors = np.asarray(unit, dtype=np.float64)
    return WordBag(
        ids=ids.astype(np.int32, copy=False),
        weights=counts / float(word_ids.shape[0]),
        vectors=vectors,
        squared_norms=np.einsum("ij,ij->i", vectors, vectors),
    )


def word_distances(query: WordBag, doc: WordBag) -> npt.NDArray[np.float64]:
    """(u_query, u_doc) Euclidean distances between the two bags' distinct words.

    One matrix product, |a|^2 + |b|^2 - 2 a.b with the true float64 lengths (assuming
    them 1 made close word pairs come out ~1e-6 too far, more than the bound tolerance:
    "thursday" / "tuesday" in GloVe); a word both bags share is exactly 0 apart, as in
    gensim's cdist, rather than sqrt of a rounding error.
    """
    distances = query.vectors @ doc.vectors.T
    distances *= -2.0  # in place: this runs once per candidate
    distances += query.squared_norms[:, np.newaxis]
    distances += doc.squared_norms[np.newaxis, :]
    np.maximum(distances, 0.0, out=distances)
    np.sqrt(distances, out=distances)
    _, query_rows, doc_rows = np.intersect1d(query.ids, doc.ids, assume_unique=True, return_indices=True)
    distances[query_rows, doc_rows] = 0.0
    return distances


def word_centroid_distance(query: WordBag, doc: WordBag) -> float:
    """WCD (Kusner et al. 2015, Eq. 6): distance between the weighted mean vectors; <= WMD."""
    return float(np.linalg.norm(query.centroid - doc.centroid))


def relaxed_wmd(query: WordBag, doc: WordBag, distances: npt.NDArray[np.float64] | None = None) -> float:
    """RWMD (Kusner et al. 2015, Eq. 9): max of the two one-sided relaxations; <= WMD.

    Each side moves every word's whole weight to its nearest word on the other side.
    `distances` is `word_distances(query, doc)` when the caller already has it.
    """
    if distances is None:
        distances = word_distances(query, doc)
    query_side = float(query.weights @ distances.min(axis=1))
    doc_side = float(doc.weights @ distances.min(axis=0))
    return max(query_side, doc_side)


def dual_bound(
    query: WordBag,
    doc: WordBag,
    distances: npt.NDArray[np.float64] | None = None,
    *,
    epsilon: float = SINKHORN_EPSILON,
    iterations: int = SINKHORN_ITERATIONS,
) -> float:
    """The transport dual at Sinkhorn potentials: a lower bound on WMD.

    Kantorovich duality: for potentials u (query words) and v (document words) with
    u_i + v_j <= D_ij, sum_i q_i u_i + sum_j d_j v_j <= WMD. u comes from `iterations`
    Sinkhorn steps of the entropic problem (Cuturi 2013) at `epsilon`; v = min_i (D_ij - u_i)
    and then u = min_j (D_ij - v_j) (c-transforms) make the pair feasible and only raise
    the objective. With u = 0 it is the document side of RWMD.
    """
    if distances is None:
        distances = word_distances(query, doc)
    # Shifting the costs by their minimum changes the potentials by a constant only, and
    # keeps exp() above underflow: distances span at most 2, so the kernel is >= e^-100.
    kernel = np.exp((distances.min() - distances) / epsilon)
    query_scaling = np.ones(distances.shape[0])
    doc_scaling = np.ones(distances.shape[1])
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        for _ in range(iterations):
            query_scaling = query.weights / (kernel @ doc_scaling)
            doc_scaling = doc.weights / (kernel.T @ query_scaling)
        query_potential = epsilon * np.log(query_scaling)
    if not np.isfinite(query_potential).all():
        query_potential = np.zeros(distances.shape[0])  # still a valid bound: RWMD's
    doc_potential = (distances - query_potential[:, np.newaxis]).min(axis=0)
    query_potential = (distances - doc_potential[np.newaxis, :]).min(axis=1)
    return float(query.weights @ query_potential + doc.weights @ doc_potential)


def lower_bound(query: WordBag, doc: WordBag) -> float:
    """The tightest of WCD, RWMD and the dual bound: a lower bound on WMD(query, doc)."""
    distances = word_distances(query, doc)
    return max(
        word_centroid_distance(query, doc),
        relaxed_wmd(query, doc, distances),
        dual_bound(query, doc, distances),
    )


def word_movers_distance(keyed_vectors: KeyedVectors, query_words: Sequence[str], doc_words: Sequence[str]) -> float:
    """Exact WMD: gensim's `wmdistance` (needs the POT package). Both sides non-empty.

    gensim answers inf when every word pair is 0 apart (POT stalls on an all-zero cost
    matrix); moving the words then costs nothing, so that is distance 0.
    """
    distance = float(keyed_vectors.wmdistance(query_words, doc_words))
    return distance if math.isfinite(distance) else 0.0


def load_wmd(vectors: WordVectors) -> None:
    """Load what exact distances need, once per process: gensim's view of the vectors
    (importing gensim: most of a second), their norms (about 0.2 s for 400,000 words) and
    POT's solver (which gensim imports on its first distance). Called before any time
    budget starts: in `WmdRanker.score` they took a 1 s budget whole, and not one exact
    distance was computed on the sample corpus.

    Raises VectorsError for vectors not loaded from a file (gensim cannot view them).
    """
    keyed_vectors = vectors.keyed_vectors
    if keyed_vectors.norms is not None:  # loaded already: norms are filled only here or by a distance
        return
    keyed_vectors.fill_norms()
    if importlib.util.find_spec("ot") is not None and len(keyed_vectors) >= 2:
        # One tiny distance: every lazy import on gensim's way to POT happens now.
        word_movers_distance(keyed_vectors, [keyed_vectors.index_to_key[0]], [keyed_vectors.index_to_key[1]])


class WmdRanker:
    """Scores candidates by -WMD to the query; only the top `window.exact_top` need be exact.

    prune=False computes every exact distance whatever `exact_top` says (the baseline the
    pruned ranking must match). `options.wmd_budget_ms` (math.inf for none) limits the
    exact solves of one call (checked before each solve, so a call may overrun by one); the
    bounds (about 1 ms a 2,000-word candidate) are always computed, since they also order
    the solves best-first and score what the budget left.
    """

    name = "wmd"
    variant: Formula | None = None
    needs: frozenset[Need] = frozenset({"word_ids"})

    def __init__(self, options: RankerOptions, *, prune: bool = True) -> None:
        self.options = options
        self.prune = prune

    def score(self, query: Query, window: CandidateSet) -> Scores:
        """(N,) -WMD per candidate, or -(lower bound) where no exact distance was needed
        (or the budget ran out); candidates without words score below all others.

        Raises RankerUnavailableError without word vectors or the POT package, ValueError
        when the window was not completed with word ids.
        """
        started = time.perf_counter()
        vectors = self.options.vectors
        if vectors is None:
            raise RankerUnavailableError("the wmd ranker needs word vectors; none were given to it")
        if importlib.util.find_spec("ot") is None:  # gensim's wmdistance imports it on first use
            raise RankerUnavailableError("the wmd ranker needs the POT package (pip install POT)")
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        if window.word_ids is None:
            raise ValueError("the wmd ranker needs the candidates' word ids; complete the window first")
        # Loaded here when not before (RERANKER_PRELOAD_WMD=false): 1-3 s, which the budget,
        # meant for exact distances, does not count; it took a 1 s budget whole on a busy
        # machine, and not one distance was exact.
        load_wmd(vectors)
        started = time.perf_counter()
        keyed_vectors = vectors.keyed_vectors
        query_ids = vectors.word_ids(query.words)
        if query_ids.size == 0:
            return np.zeros(len(window), dtype=np.float64)

        query_bag = word_bag(keyed_vectors, query_ids)
        with_words = [i for i, ids in enumerate(window.word_ids) if ids is not None and ids.size > 0]
        bounds = np.zeros(len(window), dtype=np.float64)
        for i in with_words:
            bounds[i] = lower_bound(query_bag, word_bag(keyed_vectors, _ids(window.word_ids[i])))

        exact = self._exact_distances(keyed_vectors, query_ids, window, with_words, bounds, started)
        distances = bounds.copy()
        for i, distance in exact.items():
            distances[i] = distance

        scores = -distances
        without_words = np.ones(len(window), dtype=bool)
        without_words[with_words] = False
        # Below every candidate with a distance, in BM25 order among themselves.
        floor = float(distances[with_words].max()) + 1.0 if with_words else 1.0
        scores[without_words] = -floor
        window.unscored.update(np.flatnonzero(without_words).tolist())
        log.debug(
            "wmd: %d exact of %d candidates with words in %.1f ms",
            len(exact),
            len(with_words),
            (time.perf_counter() - started) * 1000.0,
        )
        return scores

    def _exact_distances(
        self,
        keyed_vectors: KeyedVectors,
        query_ids: WordIds,
        window: CandidateSet,
        with_words: list[int],
        bounds: npt.NDArray[np.float64],
        started: float,
    ) -> dict[int, float]:
        """Exact WMD of the candidates that need one: position -> distance.

        Visits by increasing bound (ties by BM25 rank, then position: deterministic) and
        stops when the next bound is past the k-th best exact distance, or at the deadline
        (then notes it in `window.notes`).
        """
        assert window.word_ids is not None
        needed = len(with_words)
        if self.prune and window.exact_top is not None:
            needed = min(max(window.exact_top, 0), needed)
        deadline = started + max(self.options.wmd_budget_ms, 0.0) / 1000.0
        index_to_key = keyed_vectors.index_to_key
        query_words = [index_to_key[i] for i in query_ids.tolist()]
        order = sorted(with_words, key=lambda i: (bounds[i], window.candidates[i].bm25_rank, i))

        exact: dict[int, float] = {}
        best: list[float] = []  # the `needed` smallest exact distances, negated: a max-heap
        for visited, i in enumerate(order):
            if len(best) >= needed and (needed == 0 or bounds[i] > -best[0] + BOUND_TOLERANCE):
                break  # this and every later bound is past the k-th best: none can enter the top k
            if time.perf_counter() >= deadline:
                window.notes.append(
                    f"The WMD time budget of {self.options.wmd_budget_ms:g} ms ran out: "
                    f"{len(exact)} of {len(with_words)} exact distances were computed and the "
                    f"other {len(order) - visited} candidates are ordered by a lower bound."
                )
                break
            doc_words = [index_to_key[j] for j in _ids(window.word_ids[i]).tolist()]
            exact[i] = word_movers_distance(keyed_vectors, query_words, doc_words)
            if len(best) < needed:
                heapq.heappush(best, -exact[i])
            elif needed > 0 and exact[i] < -best[0]:
                heapq.heapreplace(best, -exact[i])
        return exact


def _ids(word_ids: WordIds | None) -> WordIds:
    assert word_ids is not None  # callers pass only candidates with words
    return word_ids
