"""The mathematics of the numeric core (Gong et al. 2018, Eqs. 4-11), on random data.

The reference below is a direct, loop-by-loop transcription of the paper's equations in
float64 (a full SVD of W, explicit projections), written independently of the batched
implementation it checks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reranker.topics import (
    best_aligned,
    center,
    corpus_centering,
    corrected_contributions,
    corrected_score,
    extract_topic_pair,
    extract_topics,
    score,
    stack_topics,
    topic_background,
    topic_contributions,
    topic_relevance,
)
from reranker.types import DocTopics


def reference_topics(words: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 4-5 and 7-8: W = words.T (d x n); H* = top-k left singular vectors of W."""
    W = np.asarray(words, dtype=np.float64).T
    U, _, _ = np.linalg.svd(W, full_matrices=True)
    k = min(k, np.linalg.matrix_rank(W))
    H = U[:, :k]
    importance = np.array([np.linalg.norm(H[:, j] @ W) ** 2 for j in range(k)])
    return H.T, importance / importance.sum()


def reference_score(query: np.ndarray, topics: np.ndarray, importances: np.ndarray, variant: str) -> float:
    """Eqs. 9-11 word by word ("paper"), or the authors' released code ("code")."""
    total = 0.0
    for h, weight in zip(topics, importances):
        per_word = []
        for s in np.asarray(query, dtype=np.float64):
            if variant == "paper":
                projection = (h @ s) / (h @ h) * h  # Eq. 9: projection of s on h
                norms = np.linalg.norm(s) * np.linalg.norm(projection)
                per_word.append(0.0 if norms == 0 else (s @ projection) / norms)
            else:
                norms = np.linalg.norm(h) * np.linalg.norm(s)
                per_word.append(0.0 if norms == 0 else ((h @ s) / norms) ** 2)
        total += weight * (np.mean(per_word) if per_word else 0.0)  # Eqs. 10-11
    return float(np.sqrt(total)) if variant == "code" else float(total)


def random_matrix(seed: int, n: int, d: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def document_and_query(shape: tuple[int, int, int, int], m: int):
    """A random document's topics and an m-word query: (rng, topics, importances, query)."""
    seed, n, d, k = shape
    rng = np.random.default_rng(seed)
    topics, importances = extract_topics(rng.standard_normal((n, d)), k)
    return rng, topics, importances, rng.standard_normal((m, d))


shapes = st.tuples(st.integers(0, 2**31), st.integers(1, 60), st.integers(2, 24), st.integers(1, 12))


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_topics_are_orthonormal_and_importances_a_descending_distribution(shape) -> None:
    seed, n, d, k = shape
    topics, importances = extract_topics(random_matrix(seed, n, d), k)
    assert topics.shape == (min(k, n, d), d)
    np.testing.assert_allclose(topics @ topics.T, np.eye(topics.shape[0]), atol=2e-5)
    assert (importances >= 0).all()
    assert importances.sum() == pytest.approx(1.0, abs=1e-6)
    assert (np.diff(importances) <= 1e-7).all()


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_topics_span_the_same_directions_as_the_svd(shape) -> None:
    seed, n, d, k = shape
    words = random_matrix(seed, n, d)
    topics, importances = extract_topics(words, k)
    expected_topics, expected_importances = reference_topics(words, k)
    assert topics.shape == expected_topics.shape
    np.testing.assert_allclose(importances, expected_importances, atol=1e-5)
    # Singular vectors are unique up to sign where singular values are distinct; compare
    # the projectors onto the leading subspaces, which are unique in any case.
    np.testing.assert_allclose(topics.T @ topics, expected_topics.T @ expected_topics, atol=2e-3)


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 30), st.integers(1, 7))
def test_batched_score_equals_the_loop_transcription(shape, m, n_docs) -> None:
    seed, n, d, k = shape
    rng = np.random.default_rng(seed)
    query = rng.standard_normal((m, d))
    docs = [DocTopics(*extract_topics(rng.standard_normal((n + i, d)), k)) for i in range(n_docs)]
    topics, importances = stack_topics(docs, d)
    for variant in ("paper", "code"):
        batched = score(query, topics, importances, variant)
        assert batched.shape == (n_docs,)
        for row, doc in enumerate(docs):
            expected = reference_score(query, doc.topics, doc.importances, variant)
            assert batched[row] == pytest.approx(expected, abs=1e-6)
            assert score(query, doc.topics, doc.importances, variant) == pytest.approx(expected, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 30))
def test_relevance_in_unit_interval_and_score_invariances(shape, m) -> None:
    rng, topics, importances, query = document_and_query(shape, m)
    for variant in ("paper", "code"):
        relevance = topic_relevance(query, topics[None], variant)
        assert ((relevance >= 0) & (relevance <= 1)).all()
        base = score(query, topics, importances, variant)
        assert 0.0 <= base <= 1.0
        shuffled = query[rng.permutation(m)]
        scales = rng.uniform(0.01, 100, size=(m, 1)) * rng.choice([-1, 1], size=(m, 1))
        assert score(shuffled, topics, importances, variant) == pytest.approx(base, abs=1e-6)
        assert score(query * scales, topics, importances, variant) == pytest.approx(base, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(shapes, st.integers(1, 20))
def test_contributions_sum_to_the_score(shape, m) -> None:
    _, topics, importances, query = document_and_query(shape, m)
    for variant in ("paper", "code"):
        parts = topic_contributions(query, topics[None], importances[None], variant)
        assert parts.sum() == pytest.approx(score(query, topics, importances, variant), abs=1e-9)


def test_counts_give_the_same_topics_as_repeated_rows() -> None:
    distinct = random_matrix(3, 12, 8)
    counts = np.array([1, 5, 2, 1, 1, 9, 3, 1, 2, 1, 1, 4], dtype=np.float32)
    repeated = np.repeat(distinct, counts.astype(int), axis=0)
    topics_a, importances_a = extract_topics(repeated, 5)
    topics_b, importances_b = extract_topics(distinct, 5, counts=counts)
    np.testing.assert_allclose(importances_a, importances_b, atol=1e-5)
    np.testing.assert_allclose(topics_a.T @ topics_a, topics_b.T @ topics_b, atol=1e-4)


def test_huge_counts_keep_every_topic() -> None:
    distinct = random_matrix(8, 400, 20)
    counts = np.random.default_rng(8).zipf(1.3, size=400).clip(1, 10**6).astype(np.float32)
    counts[0] = 5e6  # ten million occurrences in all
    topics, importances = extract_topics(distinct, 15, counts=counts)
    assert topics.shape == (15, 20) and np.isfinite(importances).all()
    with pytest.raises(ValueError, match="finite"):
        extract_topics(distinct, 15, counts=np.full(400, np.nan))


def test_edge_cases_have_defined_results() -> None:
    d = 10
    empty_topics, empty_importances = extract_topics(np.zeros((0, d)), 15)
    assert empty_topics.shape == (0, d) and empty_importances.shape == (0,)
    assert extract_topics(np.zeros((4, d)), 15)[0].shape == (0, d)  # all-zero vectors
    one_word = np.tile(random_matrix(1, 1, d), (7, 1))  # one word, seven times: rank 1
    topics, importances = extract_topics(one_word, 15)
    assert topics.shape == (1, d) and importances.tolist() == [1.0]
    three_words = random_matrix(2, 3, d)  # shorter than K
    assert extract_topics(three_words, 15)[0].shape == (3, d)

    query = random_matrix(4, 5, d)
    assert score(query, empty_topics, empty_importances) == 0.0
    no_query = np.zeros((0, d))  # every query word out of vocabulary
    topics, importances = extract_topics(random_matrix(5, 30, d), 4)
    for variant in ("paper", "code"):
        assert score(no_query, topics, importances, variant) == 0.0
        batch = score(no_query, topics[None], importances[None], variant)
        assert batch.tolist() == [0.0]
        assert score(np.zeros((3, d)), topics, importances, variant) == 0.0  # zero vectors
    assert np.isfinite(score(query, np.zeros((2, 0, d)), np.zeros((2, 0)))).all()


def test_padding_does_not_change_scores() -> None:
    rng = np.random.default_rng(9)
    d = 16
    docs = [DocTopics(*extract_topics(rng.standard_normal((n, d)), 15)) for n in (3, 40, 9)]
    topics, importances = stack_topics(docs, d)
    assert topics.shape == (3, 15, d)
    query = rng.standard_normal((6, d))
    batched = score(query, topics, importances)
    singles = [score(query, doc.topics, doc.importances) for doc in docs]
    np.testing.assert_allclose(batched, singles, atol=1e-7)


def test_invalid_input_raises_value_error() -> None:
    with pytest.raises(ValueError, match="k must be"):
        extract_topics(random_matrix(0, 5, 4), 0)
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        extract_topics(np.zeros(5), 3)
    with pytest.raises(ValueError, match="NaN"):
        extract_topics(np.full((3, 4), np.nan), 2)
    topics, importances = extract_topics(random_matrix(0, 10, 4), 3)
    with pytest.raises(ValueError, match="d="):
        score(random_matrix(1, 2, 5), topics, importances)
    with pytest.raises(ValueError, match="do not match"):
        score(random_matrix(1, 2, 4), topics, importances[:2])
    with pytest.raises(ValueError, match="variant"):
        score(random_matrix(1, 2, 4), topics, importances, "other")  # type: ignore[arg-type]


def test_best_aligned_picks_the_words_along_a_topic() -> None:
    topic = np.array([[1.0, 0.0, 0.0]])
    words = np.array([[0.1, 1.0, 0.0], [-3.0, 0.1, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert best_aligned(words, topic, 2).tolist() == [[1, 3]]
    assert best_aligned(words[:0], topic, 2).shape == (1, 0)


# --- topic similarity between documents ("papers like this one") -------------------------


def correction_corpus(seed: int = 3, vocabulary: int = 400, d: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Word vectors with a strong common direction (as real ones have), Zipf frequencies."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal(d)
    vectors = rng.standard_normal((vocabulary, d)) + 3.0 * common
    frequencies = 1.0 / np.arange(1, vocabulary + 1)
    return vectors.astype(np.float32), frequencies


def test_centering_removes_the_weighted_mean_and_the_main_direction() -> None:
    vectors, frequencies = correction_corpus()
    mu, direction = corpus_centering(vectors, frequencies)
    p = frequencies / frequencies.sum()
    np.testing.assert_allclose(mu, p @ vectors.astype(np.float64), atol=1e-5)
    assert np.linalg.norm(direction) == pytest.approx(1.0, abs=1e-6)
    centred = center(vectors, mu, direction)
    # Reference: the weighted covariance's top eigenvector, by numpy's eigh in float64.
    deviations = vectors.astype(np.float64) - mu
    top = np.linalg.eigh((deviations * p[:, None]).T @ deviations)[1][:, -1]
    assert abs(float(top @ direction)) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(centred @ direction, 0.0, atol=1e-4)
    # Centring the centred corpus again changes nothing: its mean is 0 and so is its
    # component along the removed direction.
    np.testing.assert_allclose(p @ centred.astype(np.float64), 0.0, atol=1e-4)
    np.testing.assert_allclose(center(centred, np.zeros_like(mu), direction), centred, atol=1e-6)


def test_background_is_the_mean_relevance_of_the_corpus_words_and_lies_in_0_1() -> None:
    vectors, frequencies = correction_corpus()
    mu, direction = corpus_centering(vectors, frequencies)
    centred = center(vectors, mu, direction)
    topics, _ = extract_topics(centred[:50], 5)
    background = topic_background(topics, centred, frequencies)
    assert background.shape == (5,) and ((background >= 0) & (background <= 1)).all()
    p = frequencies / frequencies.sum()
    for k, h in enumerate(topics.astype(np.float64)):  # loop transcription of the definition
        expected = sum(p[w] * abs(h @ v) / np.linalg.norm(v) for w, v in enumerate(centred.astype(np.float64)))
        assert background[k] == pytest.approx(expected, abs=1e-5)


def test_a_query_drawn_from_the_corpus_scores_about_zero_and_contributions_add_up() -> None:
    vectors, frequencies = correction_corpus(seed=5)
    mu, direction = corpus_centering(vectors, frequencies)
    centred = center(vectors, mu, direction)
    rng = np.random.default_rng(9)
    docs = [extract_topics(centred[rng.choice(400, 60, replace=False)], 6) for _ in range(8)]
    topics, importances = stack_topics([DocTopics(t, i) for t, i in docs], centred.shape[1])
    backgrounds = np.zeros_like(importances)
    for n, (t, _) in enumerate(docs):
        backgrounds[n, : len(t)] = topic_background(t, centred, frequencies)
    # A long "summary" sampled from the corpus's own word distribution.
    query = centred[rng.choice(400, 20_000, p=frequencies / frequencies.sum())]
    scores = corrected_score(query, topics, importances, backgrounds)
    np.testing.assert_allclose(scores, 0.0, atol=0.01)
    parts = corrected_contributions(query, topics, importances, backgrounds)
    np.testing.assert_allclose(parts.sum(axis=1), scores, rtol=1e-12)
    # The paper's score of the same query is far from 0: the correction is what removes it.
    assert (score(query, topics, importances) > 0.05).all()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_corrected_score_equals_a_loop_transcription(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d, m = 8, 5
    topics = np.zeros((3, 4, d), dtype=np.float32)
    importances = np.zeros((3, 4), dtype=np.float32)
    backgrounds = np.zeros((3, 4), dtype=np.float32)
    for n, k in enumerate((4, 2, 3)):
        topics[n, :k] = np.linalg.qr(rng.standard_normal((d, k)))[0].T
        importances[n, :k] = rng.dirichlet(np.ones(k))
        backgrounds[n, :k] = rng.uniform(0, 0.5, k)
    query = rng.standard_normal((m, d)).astype(np.float32)
    expected = [
        sum(
            importances[n, k] * (np.mean([abs(topics[n, k] @ s) / np.linalg.norm(s) for s in query]) - backgrounds[n, k])
            for k in range(4)
        )
        for n in range(3)
    ]
    np.testing.assert_allclose(corrected_score(query, topics, importances, backgrounds), expected, atol=1e-6)


def test_the_topic_pair_equals_extracting_each_on_its_own() -> None:
    vectors, frequencies = correction_corpus(seed=11, vocabulary=300, d=12)
    mu, direction = corpus_centering(vectors, frequencies)
    rng = np.random.default_rng(4)
    rows = vectors[rng.choice(300, 80, replace=False)]
    counts = rng.integers(1, 9, 80).astype(np.float32)
    (topics, importances), (centred, centred_importances) = extract_topic_pair(rows, 6, counts, mu, direction)
    np.testing.assert_array_equal(topics, extract_topics(rows, 6, counts=counts)[0])
    np.testing.assert_array_equal(importances, extract_topics(rows, 6, counts=counts)[1])
    expected, expected_importances = extract_topics(center(rows, mu, direction), 6, counts=counts)
    # The same subspace: scores do not depend on a topic's sign, and the pair's centred
    # Gram matrix is formed in float64, so compare |cos| of matching topics.
    np.testing.assert_allclose(np.abs(np.sum(centred * expected, axis=1)), 1.0, atol=1e-4)
    np.testing.assert_allclose(centred_importances, expected_importances, atol=1e-5)
    short = rows[:5]  # fewer words than dimensions: the two are extracted separately
    (short_topics, _), (short_centred, _) = extract_topic_pair(short, 6, counts[:5], mu, direction)
    np.testing.assert_array_equal(short_topics, extract_topics(short, 6, counts=counts[:5])[0])
    np.testing.assert_allclose(short_centred, extract_topics(center(short, mu, direction), 6, counts=counts[:5])[0], atol=1e-6)
