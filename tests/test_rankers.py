"""One contract over every registered ranker, plus the pipeline around them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_CORPUS, write_jsonl
from reranker.errors import UnknownRankerError
from reranker.indexing import index_corpus
from reranker.pipeline import Engine
from reranker.rankers import RANKERS, CandidateSet, get_ranker, rank_candidates
from reranker.types import Candidate, TopicBatch

QUERY = "A captain and his crew sail a ship across the stormy ocean to the king, with bread."


@pytest.fixture
def indexed(tmp_path: Path, engine: Engine) -> Engine:
    index_corpus(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS), engine.store, engine.vectors, 5, show_progress=False)
    return engine


def empty_window(d: int = 50) -> CandidateSet:
    return CandidateSet((), TopicBatch((), np.zeros((0, 0, d), np.float32), np.zeros((0, 0), np.float32)))


@pytest.mark.parametrize("name", sorted(RANKERS))
def test_ranker_contract(name: str, indexed: Engine) -> None:
    ranker = get_ranker(name)
    assert ranker.name == name
    query = indexed.query("The baker bakes bread with yeast and flour in a hot oven, fit for a king, by the sea.")
    window = indexed.window(query, 10)
    assert len(window) == 3
    scores = ranker.score(query, window)
    assert scores.shape == (3,) and np.isfinite(scores).all()
    # Deterministic: the same input gives the same scores and order.
    np.testing.assert_array_equal(scores, ranker.score(query, window))
    order, _ = indexed.rerank(query, window, ranker)
    assert sorted(order) == [0, 1, 2]
    assert window.candidates[order[0]].doc_id == "cooking"
    # Empty window.
    assert ranker.score(query, empty_window()).shape == (0,)
    assert indexed.rerank(query, empty_window(), ranker)[0] == []
    # A query without in-vocabulary words keeps the BM25 order and finite scores.
    oov_query = indexed.query("qqzzxv wwqqzz")
    assert oov_query.words == ()
    oov_window = indexed.window(indexed.query("ships ocean bread"), 10)
    order, scores = indexed.rerank(oov_query, oov_window, ranker)
    assert order == list(range(len(oov_window))) or ranker.variant is None
    assert np.isfinite(scores).all()


def test_ties_keep_the_bm25_order() -> None:
    candidates = tuple(Candidate(f"d{i}", 10.0 - i, i + 1) for i in range(4))
    window = CandidateSet(candidates, TopicBatch((), np.zeros((4, 0, 2), np.float32), np.zeros((4, 0), np.float32)))
    assert rank_candidates(np.array([0.5, 0.7, 0.5, 0.7]), window) == [1, 3, 0, 2]
    with pytest.raises(ValueError, match="non-finite"):
        rank_candidates(np.array([0.5, np.nan, 0.5, 0.7]), window)
    with pytest.raises(ValueError, match="3 scores"):
        rank_candidates(np.zeros(3), window)


def test_an_unknown_ranker_lists_the_valid_names() -> None:
    with pytest.raises(UnknownRankerError) as caught:
        get_ranker("bm42")
    message = str(caught.value)
    assert "'bm42'" in message and all(name in message for name in RANKERS)


def test_search_reranks_and_explains(indexed: Engine) -> None:
    result = indexed.search(QUERY, "hidden_topics", window=10, size=2, explain=True)
    assert result.status == "ok" and result.ranker == "hidden_topics"
    assert [hit.rank for hit in result.hits] == [1, 2]
    top = result.hits[0]
    assert top.doc_id == "ships"
    assert sum(t.contribution for t in top.explanation) == pytest.approx(top.score, abs=1e-9)
    assert [t.rank for t in top.explanation] == list(range(1, len(top.explanation) + 1))
    assert all(len(t.topic_words) == 5 and t.query_words for t in top.explanation)
    document_words = set(indexed.query(TINY_CORPUS[0]["title"] + " " + TINY_CORPUS[0]["text"]).words)
    query_words = set(result.query_words)
    for topic in top.explanation:
        assert set(topic.topic_words) <= document_words
        assert set(topic.query_words) <= query_words


def test_code_variant_explanations_also_sum_to_the_score(indexed: Engine) -> None:
    result = indexed.search(QUERY, "hidden_topics_code", window=10, size=3, explain=True)
    for hit in result.hits:
        assert sum(t.contribution for t in hit.explanation) == pytest.approx(hit.score, abs=1e-9)


def test_an_out_of_vocabulary_query_keeps_bm25_order_and_says_so(indexed: Engine) -> None:
    result = indexed.search("qqzzxv wwqqzz", "hidden_topics")
    assert result.status == "query_out_of_vocabulary" and result.hits == ()
    assert result.oov_words == ("qqzzxv", "wwqqzz")


def test_fusion_keeps_both_signals(indexed: Engine) -> None:
    query = indexed.query(QUERY)
    window = indexed.window(query, 10)
    fused = get_ranker("hidden_topics+bm25").score(query, window)
    assert ((fused >= 0) & (fused <= 1)).all()
