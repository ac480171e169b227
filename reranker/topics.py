"""The numeric core: hidden topics of a document and their relevance to a summary.

Gong, Sakakini, Bhat and Xiong, "Document Similarity for Texts of Varying Lengths via
Hidden Topics", ACL 2018. Notation follows the paper: W is the d x n matrix whose columns
are the document's word vectors (here passed transposed, one row per word occurrence),
h_k are its hidden topics, S = {s_j} the summary's word vectors.

Pure numpy/scipy: no IO, no logging, no per-word Python loops. Stable public API:
`extract_topics`, `score`; the other functions serve explanations and the rankers.
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
import numpy.typing as npt

from reranker.types import DocTopics, FloatArray

Variant = Literal["paper", "code"]
VARIANTS: tuple[Variant, ...] = ("paper", "code")

# Eigenvalues below this fraction of the largest, times max(rows, d), are numerical
# noise of a float32 Gram matrix: a document of u distinct words has rank <= u and gets
# at most u topics.
_RANK_TOLERANCE = float(np.finfo(np.float32).eps)


def extract_topics(
    word_vectors: npt.ArrayLike,
    k: int,
    *,
    counts: npt.ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Hidden topics of one document (Eqs. 4-5) and their importances (Eqs. 7-8).

    word_vectors: (n, d), one row per word occurrence. With `counts` (n,), row j stands
        for counts[j] occurrences of the same word (W W^T = sum_j counts[j] s_j s_j^T),
        which gives the same topics as repeating the rows, for less work.
    k: the number of topics wanted; the document gets min(k, rank(W)) of them.

    Returns (topics, importances): topics (k', d) float32 with orthonormal rows, the top
    left singular vectors h_k of W, most important first; importances (k',) float32,
    i_k = ||h_k^T W||^2 / sum_j ||h_j^T W||^2 = sigma_k^2 / sum_j sigma_j^2 (Eq. 8),
    descending. An empty or all-zero document gives k' = 0.

    Never forms an SVD of W: the top-k eigenpairs of the smaller Gram matrix (d x d, or
    n x n for a document shorter than d words) give the same singular vectors.
    Raises ValueError for a non-2-D input, k < 1, or non-finite values.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    vectors = np.asarray(word_vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"word_vectors must be (n, d), got shape {vectors.shape}")
    n, d = vectors.shape
    if n == 0 or d == 0:
        return _no_topics(d)
    if not np.isfinite(vectors).all():
        raise ValueError("word_vectors contain NaN or infinity")
    if counts is not None:
        weights = np.asarray(counts, dtype=np.float32)
        if weights.shape != (n,) or not np.isfinite(weights).all() or (weights < 0).any():
            raise ValueError(f"counts must be ({n},), finite and non-negative")
        vectors = vectors * np.sqrt(weights)[:, None]

    wanted = min(k, n, d)
    if n < d:
        # Short document: eigenpairs of W^T W (n x n); h_k = W u_k / sigma_k.
        gram = vectors @ vectors.T
        eigenvalues, eigenvectors = _top_eigenpairs(gram, wanted)
        topics = eigenvectors.T @ vectors
        norms = np.linalg.norm(topics, axis=1, keepdims=True)
        topics = np.divide(topics, norms, out=np.zeros_like(topics), where=norms > 0)
        return _kept_topics(eigenvalues, topics, max(n, d))
    return _topics_of_gram(vectors.T @ vectors, wanted, max(n, d))


def _topics_of_gram(gram: FloatArray, wanted: int, size: int) -> tuple[FloatArray, FloatArray]:
    """Topics and importances from the d x d Gram matrix W W^T (its top eigenpairs)."""
    eigenvalues, eigenvectors = _top_eigenpairs(gram, wanted)
    return _kept_topics(eigenvalues, np.ascontiguousarray(eigenvectors.T), size)


def _kept_topics(eigenvalues: FloatArray, topics: FloatArray, size: int) -> tuple[FloatArray, FloatArray]:
    d = topics.shape[1]
    largest = float(eigenvalues[0]) if eigenvalues.size else 0.0
    # The noise floor grows with the matrix size, not with the counts: a document of a
    # million occurrences of a few thousand distinct words keeps all its topics.
    keep = int(np.count_nonzero(eigenvalues > largest * size * _RANK_TOLERANCE))
    if largest <= 0.0 or keep == 0:
        return _no_topics(d)
    topics = _fix_signs(topics[:keep])
    sigma_squared = eigenvalues[:keep].astype(np.float64)
    importances = (sigma_squared / sigma_squared.sum()).astype(np.float32)
    return topics.astype(np.float32, copy=False), importances


def _no_topics(d: int) -> tuple[FloatArray, FloatArray]:
    return np.zeros((0, d), dtype=np.float32), np.zeros(0, dtype=np.float32)


def _top_eigenpairs(gram: FloatArray, count: int) -> tuple[FloatArray, FloatArray]:
    """The `count` largest eigenpairs of a symmetric matrix, largest first."""
    size = gram.shape[0]
    import scipy.linalg  # here, not at the top: a search scores with numpy alone, and scipy costs ~0.3 s to import

    eigenvalues, eigenvectors = scipy.linalg.eigh(
        gram, subset_by_index=[size - count, size - 1], check_finite=False
    )
    return eigenvalues[::-1], eigenvectors[:, ::-1]


def _fix_signs(topics: FloatArray) -> FloatArray:
    """Singular vectors are defined up to sign; make each row's largest entry positive
    so the same document always stores the same bytes. Scores do not depend on it."""
    pivots = np.abs(topics).argmax(axis=1)
    signs = np.sign(topics[np.arange(topics.shape[0]), pivots])
    signs[signs == 0] = 1.0
    signed: FloatArray = topics * signs[:, None]
    return signed


def unit_rows(vectors: npt.ArrayLike) -> FloatArray:
    """Rows scaled to unit length; zero rows are dropped (they have no direction).

    (m, d) -> (m', d) float32 with m' <= m.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"expected an (m, d) array, got shape {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1)
    nonzero = norms > 0
    unit: FloatArray = matrix[nonzero] / norms[nonzero, None]
    return unit


def topic_relevance(
    query_vectors: npt.ArrayLike, topics: npt.ArrayLike, variant: Variant = "paper"
) -> FloatArray:
    """r(h_k, S) for every topic of every document, in [0, 1].

    query_vectors: (m, d). topics: (N, k, d) (zero rows allowed as padding).
    Returns (N, k) float32.

    "paper": r(h_k, s_j) = cos(s_j, projection of s_j on h_k) = |h_k . s_j| / ||s_j||
        (Eq. 9, h_k unit), averaged over the summary's words (Eq. 10).
    "code": the authors' released code averages the squared cosine instead.
    A summary with no usable word vector gives 0 everywhere.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    stacked = np.asarray(topics, dtype=np.float32)
    if stacked.ndim != 3:
        raise ValueError(f"topics must be (N, k, d), got shape {stacked.shape}")
    n_docs, k, d = stacked.shape
    words = unit_rows(query_vectors)
    if words.shape[1] != d:
        raise ValueError(f"query vectors have d={words.shape[1]}, topics have d={d}")
    if words.shape[0] == 0 or n_docs * k == 0:
        return np.zeros((n_docs, k), dtype=np.float32)
    # One matrix product for all N*k topics against all m words.
    cosines = stacked.reshape(n_docs * k, d) @ words.T
    np.abs(cosines, out=cosines)
    if variant == "code":
        np.square(cosines, out=cosines)
    relevance = cosines.mean(axis=1).reshape(n_docs, k)
    bounded: FloatArray = np.minimum(relevance, 1.0, out=relevance)  # float32 rounding can reach 1 + 1e-7
    return bounded


def topic_contributions(
    query_vectors: npt.ArrayLike,
    topics: npt.ArrayLike,
    importances: npt.ArrayLike,
    variant: Variant = "paper",
) -> npt.NDArray[np.float64]:
    """Each topic's share of the document score; rows sum to `score` (N, k) float64.

    "paper": i_k r(h_k, S) (Eq. 11 summands).
    "code": the released code returns sqrt(sum_k i_k r_k); its summands c_k are scaled
    by 1 / sqrt(sum c) so that they still add up to the reported score.
    """
    weights = np.asarray(importances, dtype=np.float64)
    parts = topic_relevance(query_vectors, topics, variant).astype(np.float64) * weights
    if variant == "code":
        totals = parts.sum(axis=1, keepdims=True)
        scale = np.divide(1.0, np.sqrt(totals), out=np.zeros_like(totals), where=totals > 0)
        parts *= scale
    return parts


def score(
    query_vectors: npt.ArrayLike,
    topics: npt.ArrayLike,
    importances: npt.ArrayLike,
    variant: Variant = "paper",
) -> float | npt.NDArray[np.float64]:
    """Relevance of documents to a summary: r(W, S) = sum_k i_k r(h_k, S) (Eq. 11).

    query_vectors: (m, d), one row per summary word.
    topics, importances: one document, (k, d) and (k,) -> returns a float; or a batch,
        (N, k, d) and (N, k) padded with zero rows / zero importance -> returns (N,).
    variant: "paper" (Eqs. 9-11) or "code" (the authors' released code:
        sqrt(sum_k i_k mean_j cos^2(h_k, s_j))).
    Scores lie in [0, 1]; a summary without usable vectors or a document without topics
    scores 0.0. Raises ValueError on inconsistent shapes or an unknown variant.
    """
    stacked = np.asarray(topics, dtype=np.float32)
    weights = np.asarray(importances, dtype=np.float32)
    single = stacked.ndim == 2
    if single:
        stacked, weights = stacked[None], weights[None]
    if stacked.ndim != 3 or weights.shape != stacked.shape[:2]:
        raise ValueError(
            f"topics {np.shape(topics)} and importances {np.shape(importances)} do not match"
        )
    relevance = topic_relevance(query_vectors, stacked, variant).astype(np.float64)
    totals = np.einsum("nk,nk->n", relevance, weights.astype(np.float64), optimize=True)
    if variant == "code":
        totals = np.sqrt(np.maximum(totals, 0.0))
    return float(totals[0]) if single else totals


# --- the common-direction correction ---------------------------------------------------
#
# General-purpose word vectors share a common direction; it becomes every document's first
# topic, and a query's words all align with it, so the paper's score mostly measures how
# generic a document is. Two corrections remove it and keep the score a sum over topics:
# centre the vectors on the corpus and take out their main direction (Mu & Viswanath,
# "All-but-the-Top", ICLR 2018, weighted by the corpus's own word frequencies), and
# subtract from each topic's relevance what a "query" drawn from the corpus itself would
# get (its background).


def corpus_centering(vectors: npt.ArrayLike, frequencies: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The corpus's mean word vector and main direction around it.

    vectors: (u, d), one row per distinct in-vocabulary word of the corpus.
    frequencies: (u,) how often each occurs (any positive scale); p(w) = f(w) / sum f.
    Returns (mu, direction), both (d,) float32: mu = sum_w p(w) v_w, and the unit top
    eigenvector of C = sum_w p(w) (v_w - mu)(v_w - mu)^T (its sign made to put the
    largest entry positive). Raises ValueError for mismatched shapes or no positive
    frequency.
    """
    matrix = np.asarray(vectors, dtype=np.float64)
    weights = np.asarray(frequencies, dtype=np.float64)
    if matrix.ndim != 2 or weights.shape != matrix.shape[:1]:
        raise ValueError(f"vectors {matrix.shape} and frequencies {weights.shape} do not match")
    total = float(weights[weights > 0].sum())
    if total <= 0 or not np.isfinite(total):
        raise ValueError("frequencies must hold a positive, finite total")
    p = np.where(weights > 0, weights, 0.0) / total
    mu = p @ matrix
    deviations = matrix - mu
    covariance = (deviations * p[:, None]).T @ deviations
    size = covariance.shape[0]
    import scipy.linalg

    _, top = scipy.linalg.eigh(covariance, subset_by_index=[size - 1, size - 1], check_finite=False)
    direction = _fix_signs(top.T.astype(np.float32))[0]
    return mu.astype(np.float32), direction.astype(np.float32)


def center(vectors: npt.ArrayLike, mu: npt.ArrayLike, direction: npt.ArrayLike) -> FloatArray:
    """v' = (v - mu) - (direction . (v - mu)) direction, for every row.

    vectors: (m, d); mu, direction: (d,) as `corpus_centering` returns them.
    Returns (m, d) float32. Idempotent once centred on (mu', 0) of its own output.
    """
    matrix = np.asarray(vectors, dtype=np.float32) - np.asarray(mu, dtype=np.float32)
    unit = np.asarray(direction, dtype=np.float32)
    return matrix - np.outer(matrix @ unit, unit)


def extract_topic_pair(
    word_vectors: npt.ArrayLike,
    k: int,
    counts: npt.ArrayLike,
    mu: npt.ArrayLike,
    direction: npt.ArrayLike,
    centred_counts: npt.ArrayLike | None = None,
) -> tuple[tuple[FloatArray, FloatArray], tuple[FloatArray, FloatArray]]:
    """`extract_topics` of the word vectors and of the same vectors centred (`center`), at
    the cost of about one.

    word_vectors (u, d) distinct words, counts (u,), mu and direction (d,). centred_counts
    (u,), when given: the words' counts in the centred topics instead (0 for a word that
    may not shape them). Returns ((topics, importances), (corrected topics, importances))
    as `extract_topics` does. For u >= d and the same counts both come from one Gram
    matrix: with P = I - direction direction^T, s = sum_j c_j v_j and C = sum_j c_j, the
    centred one is P (G - s mu^T - mu s^T + C mu mu^T) P.
    """
    vectors = np.asarray(word_vectors, dtype=np.float32)
    weights = np.asarray(counts, dtype=np.float32)
    if centred_counts is not None:
        # Other counts, another Gram matrix: the pair shares nothing but the lookup.
        centred_weights = np.asarray(centred_counts, dtype=np.float32)
        if vectors.ndim != 2 or centred_weights.shape != vectors.shape[:1]:
            raise ValueError(f"centred_counts must be ({vectors.shape[0]},), got shape {centred_weights.shape}")
        shaping = centred_weights > 0
        return (
            extract_topics(vectors, k, counts=weights),
            extract_topics(center(vectors[shaping], mu, direction), k, counts=centred_weights[shaping]),
        )
    if vectors.ndim != 2 or vectors.shape[0] < vectors.shape[1] or weights.shape != vectors.shape[:1] or k < 1:
        centred = center(vectors, mu, direction) if vectors.ndim == 2 and vectors.size else vectors
        return extract_topics(vectors, k, counts=counts), extract_topics(centred, k, counts=counts)
    n, d = vectors.shape
    if not np.isfinite(vectors).all() or not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("word_vectors and counts must be finite, counts non-negative")
    scaled = vectors * np.sqrt(weights)[:, None]
    gram = scaled.T @ scaled  # exactly as extract_topics forms it
    wanted, size = min(k, n, d), max(n, d)
    mean = np.asarray(mu, dtype=np.float64)
    unit = np.asarray(direction, dtype=np.float64)
    weighted_sum = weights.astype(np.float64) @ vectors.astype(np.float64)
    shifted = (
        gram.astype(np.float64)
        - np.outer(weighted_sum, mean)
        - np.outer(mean, weighted_sum)
        + float(weights.astype(np.float64).sum()) * np.outer(mean, mean)
    )
    # P A P for P = I - u u^T, in O(d^2): A - u (A u)^T - (A u) u^T + (u^T A u) u u^T.
    along = shifted @ unit
    centred_gram = (
        shifted - np.outer(unit, along) - np.outer(along, unit) + float(unit @ along) * np.outer(unit, unit)
    ).astype(np.float32)
    return _topics_of_gram(gram, wanted, size), _topics_of_gram(centred_gram, wanted, size)


def topic_background(
    topics: npt.ArrayLike, word_vectors: npt.ArrayLike, frequencies: npt.ArrayLike
) -> FloatArray:
    """b_k = sum_w p(w) |cos(h_k, v'_w)|: the relevance (Eq. 9-10) that a summary drawn
    from the corpus's own word distribution would give each topic.

    topics: (k, d) unit rows (zero rows allowed: they get 0). word_vectors: (u, d) the
    corpus's distinct words, centred like the topics. frequencies: (u,).
    Returns (k,) float32 in [0, 1].
    """
    units = unit_rows(word_vectors)
    matrix = np.asarray(word_vectors, dtype=np.float32)
    weights = np.asarray(frequencies, dtype=np.float64)[np.linalg.norm(matrix, axis=1) > 0]
    stacked = np.asarray(topics, dtype=np.float32)
    if units.shape[0] == 0 or stacked.shape[0] == 0 or weights.sum() <= 0:
        return np.zeros(stacked.shape[0], dtype=np.float32)
    cosines = np.abs(stacked @ units.T).astype(np.float64)
    background = cosines @ (weights / weights.sum())
    clipped: FloatArray = np.clip(background, 0.0, 1.0).astype(np.float32)
    return clipped


def corrected_contributions(
    query_vectors: npt.ArrayLike,
    topics: npt.ArrayLike,
    importances: npt.ArrayLike,
    backgrounds: npt.ArrayLike,
) -> npt.NDArray[np.float64]:
    """Each topic's share of the corrected score: i_k (r(h_k, S) - b_k), (N, k) float64.

    query_vectors: (m, d), centred like the topics. topics: (N, k, d); importances and
    backgrounds: (N, k), zero for padding. Rows sum to `corrected_score`.
    """
    relevance = topic_relevance(query_vectors, topics, "paper").astype(np.float64)
    weights = np.asarray(importances, dtype=np.float64)
    background = np.asarray(backgrounds, dtype=np.float64)
    if weights.shape != relevance.shape or background.shape != relevance.shape:
        raise ValueError(f"importances {weights.shape} and backgrounds {background.shape} must be {relevance.shape}")
    return weights * (relevance - background)


def corrected_score(
    query_vectors: npt.ArrayLike,
    topics: npt.ArrayLike,
    importances: npt.ArrayLike,
    backgrounds: npt.ArrayLike,
) -> npt.NDArray[np.float64]:
    """r'(W, S) = sum_k i_k [ (1/m) sum_j |cos(h_k, s'_j)| - b_k ], (N,) float64.

    The paper's Eq. 11 on centred vectors, less each topic's background: about 0 for a
    summary that is just the corpus's word distribution, positive when the summary's
    words align with a topic more than the corpus's words do. Shapes as
    `corrected_contributions`.
    """
    scores: npt.NDArray[np.float64] = corrected_contributions(query_vectors, topics, importances, backgrounds).sum(axis=1)
    return scores


def stack_topics(documents: Sequence[DocTopics], d: int) -> tuple[FloatArray, FloatArray]:
    """Pad per-document topics into one batch: (N, k_max, d) and (N, k_max) float32."""
    k_max = max((doc.k for doc in documents), default=0)
    topics = np.zeros((len(documents), k_max, d), dtype=np.float32)
    importances = np.zeros((len(documents), k_max), dtype=np.float32)
    for row, doc in enumerate(documents):
        topics[row, : doc.k] = doc.topics
        importances[row, : doc.k] = doc.importances
    return topics, importances


def best_aligned(vectors: npt.ArrayLike, topics: npt.ArrayLike, top_n: int) -> npt.NDArray[np.intp]:
    """For each topic, the indices of the `top_n` rows of `vectors` closest to it.

    vectors: (u, d) word vectors (zero rows never win). topics: (k, d).
    Returns (k, min(top_n, u)) indices, best first.

    Closest = largest |cos(s, h_k)| = smallest reconstruction error ||s - h_k h_k^T s||^2
    of the unit-length word vector: the paper's reading of a topic through its words
    (section 6). Used for both "topic words" (document words) and "aligned query words".
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    alignment = np.abs(np.asarray(topics, dtype=np.float32) @ matrix.T) / safe
    alignment[:, norms == 0] = -1.0
    count = min(top_n, matrix.shape[0])
    if count == 0:
        return np.zeros((alignment.shape[0], 0), dtype=np.intp)
    top = np.argpartition(-alignment, count - 1, axis=1)[:, :count]
    order = np.take_along_axis(-alignment, top, axis=1).argsort(axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


def word_shares(vectors: npt.ArrayLike, counts: npt.ArrayLike, topics: npt.ArrayLike, top_n: int) -> npt.NDArray[np.intp]:
    """For each topic, the indices of the `top_n` words with the largest share of it.

    vectors: (u, d) a document's distinct words, in the space its topics were extracted in
    (centred for the corrected topics); counts: (u,) how often each occurs (the weights of
    its Gram matrix). topics: (k, d) unit rows. Returns (k, min(top_n, u)), largest first.

    A topic's eigenvalue is a sum over the document's words (Eqs. 4-5, 8):
    sigma_k^2 = ||h_k^T W||^2 = sum_w c_w (h_k . v_w)^2, so c_w (h_k . v_w)^2 is how much
    of the topic word w makes. These are the words that made the topic: a word seen once
    whose vector happens to point along it (the largest |cos|, `best_aligned`) is not.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    weights = np.asarray(counts, dtype=np.float64)
    if weights.shape != matrix.shape[:1]:
        raise ValueError(f"vectors {matrix.shape} and counts {weights.shape} do not match")
    shares = np.square((np.asarray(topics, dtype=np.float32) @ matrix.T).astype(np.float64)) * weights
    count = min(top_n, matrix.shape[0])
    if count == 0:
        return np.zeros((shares.shape[0], 0), dtype=np.intp)
    # Stable, so equal shares keep the words' order of first appearance.
    order: npt.NDArray[np.intp] = np.argsort(-shares, axis=1, kind="stable")[:, :count]
    return order
