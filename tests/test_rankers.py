"""One contract over every registered ranker, plus the pipeline around them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_CORPUS, write_jsonl

from reranker.config import DEFAULT_RANKER, Settings
from reranker.doc2vec import Doc2VecParams, train_for_store
from reranker.embeddings import WordVectors
from reranker.errors import UnknownRankerError
from reranker.indexing import index_corpus
from reranker.pipeline import Engine, uses_word_vectors
from reranker.rankers import RANKERS, CandidateSet, RankerOptions, get_ranker, rank_candidates
from reranker.rankers.fusion import Fusion, min_max, z_score
from reranker.store.embedded import EmbeddedStore
from reranker.types import Candidate, Document, TopicBatch

QUERY = "A captain and his crew sail a ship across the stormy ocean to the king, with bread."


@pytest.fixture
def indexed(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> Engine:
    """The tiny corpus indexed, with a Doc2Vec model trained on it: every ranker can run."""
    engine = Engine(store=store, vectors=glove, data_dir=tmp_path / "data")
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    index_corpus(corpus, engine.store, engine.vectors, 5, show_progress=False)
    documents = [Document(r["id"], r["title"], r["text"]) for r in TINY_CORPUS]
    train_for_store(store, documents, Doc2VecParams(dim=16, epochs=40, min_count=1), tmp_path / "data", None)
    return engine


def empty_window(d: int = 50) -> CandidateSet:
    return CandidateSet((), TopicBatch((), np.zeros((0, 0, d), np.float32), np.zeros((0, 0), np.float32)))


@pytest.mark.parametrize("name", sorted(RANKERS))
def test_ranker_contract(name: str, indexed: Engine) -> None:
    """Every registered ranker: shape, finiteness, determinism, ordering, ties, empty
    window, all-OOV query."""
    ranker = indexed.ranker(name)
    assert ranker.name == name
    query = indexed.query("The baker bakes bread with yeast and flour in a hot oven, fit for a king, by the sea.")
    window = indexed.complete(indexed.window(query, 10), ranker)
    assert len(window) == 3
    # Only what the ranker reads is fetched: each topic set is read from the store when
    # the ranker needs it, never otherwise (the default ranker decodes one set, not two).
    assert (window.topics is not None) == ("topics" in ranker.needs)
    assert (window.corrected is not None) == ("corrected_topics" in ranker.needs)
    scores = ranker.score(query, window)
    assert scores.shape == (3,) and scores.dtype == np.float64 and np.isfinite(scores).all()
    # Deterministic: the same input gives the same scores and order, also from a fresh ranker.
    np.testing.assert_array_equal(scores, ranker.score(query, window))
    np.testing.assert_array_equal(scores, indexed.ranker(name).score(query, window))
    ranking = indexed.rerank(query, window, ranker)
    assert sorted(ranking.order) == [0, 1, 2]
    np.testing.assert_array_equal(ranking.scores, scores)
    # The order follows the scores, ties broken by BM25 rank.
    ordered = [(-scores[i], window.candidates[i].bm25_rank) for i in ranking.order]
    assert ordered == sorted(ordered)
    # Every ranker but the baseline puts the cooking document first for a cooking query.
    # (Not Doc2Vec: a model trained on three short texts is noise; tests/test_doc2vec.py
    # checks it finds papers of the sample corpus by their own text.)
    if name != "bm25" and not name.startswith("doc2vec"):
        assert window.candidates[ranking.order[0]].doc_id == "cooking"
    # An empty window.
    assert ranker.score(query, indexed.complete(empty_window(), ranker)).shape == (0,)
    assert indexed.rerank(query, empty_window(), ranker).order == []
    # A query without any in-vocabulary word: finite scores, and rankers built on word
    # vectors keep the BM25 order.
    oov_query = indexed.query("qqzzxv wwqqzz")
    assert oov_query.words == ()
    oov_window = indexed.window(indexed.query("ships ocean bread"), 10)
    oov = indexed.rerank(oov_query, oov_window, ranker)
    assert np.isfinite(oov.scores).all() and sorted(oov.order) == list(range(len(oov_window)))
    if uses_word_vectors(ranker) or name == "bm25":
        assert oov.order == list(range(len(oov_window)))


def test_ties_in_every_ranker_fall_back_to_bm25_rank(tmp_path: Path, indexed: Engine) -> None:
    """Identical documents get identical scores from every ranker, so BM25 rank decides."""
    twins = [{"id": f"twin{i}", "title": "", "text": TINY_CORPUS[1]["text"]} for i in range(3)]
    index_corpus(write_jsonl(tmp_path / "twins.jsonl", twins), indexed.store, indexed.vectors, 5, show_progress=False, data_dir=indexed.data_dir)
    query = indexed.query("bread baked in an oven")
    # Equal BM25 scores too; BM25 ranks 3, 1, 2: every ranker must answer 2nd, 3rd, 1st.
    candidates = tuple(Candidate(f"twin{i}", 1.0, i + 1) for i in (2, 0, 1))
    for name in sorted(RANKERS):
        ranker = indexed.ranker(name)
        window = CandidateSet(candidates, indexed.store.topics([c.doc_id for c in candidates]))
        ranking = indexed.rerank(query, window, ranker)
        if ranker.variant is not None:
            # Topic scores come from one float32 BLAS product over the whole window, and
            # BLAS blocks rows differently, so identical documents can differ in the last
            # bit (~1e-9) and that bit, not BM25, orders them. Known; see the notes.
            np.testing.assert_allclose(ranking.ranker_scores, ranking.ranker_scores[0], rtol=1e-7)
            if not name.endswith(":rrf"):  # (rank fusion follows that bit too)
                np.testing.assert_allclose(ranking.scores, ranking.scores[0], rtol=1e-7)  # scaling does not amplify it
            continue
        assert ranking.order == [1, 2, 0], name


def test_ties_keep_the_bm25_order() -> None:
    candidates = tuple(Candidate(f"d{i}", 10.0 - i, i + 1) for i in range(4))
    window = CandidateSet(candidates, TopicBatch((), np.zeros((4, 0, 2), np.float32), np.zeros((4, 0), np.float32)))
    assert rank_candidates(np.array([0.5, 0.7, 0.5, 0.7]), window) == [1, 3, 0, 2]
    with pytest.raises(ValueError, match="non-finite"):
        rank_candidates(np.array([0.5, np.nan, 0.5, 0.7]), window)
    with pytest.raises(ValueError, match="3 scores"):
        rank_candidates(np.zeros(3), window)


def test_rankers_built_without_options_weigh_fusions_as_the_settings_do(tmp_path: Path) -> None:
    # An Engine built by hand (benchmarks, tests) and `get_ranker(name)` take RankerOptions'
    # defaults: a fusion must then weigh the ranker as the product does, not by its own number.
    settings = Settings.from_env({"HOME": str(tmp_path)})
    fusion = get_ranker(DEFAULT_RANKER)
    assert isinstance(fusion, Fusion) and fusion.weight == settings.fusion_weight
    assert Fusion(get_ranker("hidden_topics")).weight == settings.fusion_weight
    assert RankerOptions().wmd_budget_ms == settings.wmd_budget_ms


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
    explanation = top.explanation
    assert explanation is not None and explanation.parts == (("topics", top.score),)
    assert sum(t.contribution for t in explanation.topics) + explanation.rest_contribution == pytest.approx(top.score, abs=1e-9)
    contributions = [t.contribution for t in explanation.topics]
    assert contributions == sorted(contributions, reverse=True)  # largest first
    assert all(len(t.topic_words) == 5 and t.query_words for t in explanation.topics)
    document_words = set(indexed.query(TINY_CORPUS[0]["title"] + " " + TINY_CORPUS[0]["text"]).words)
    query_words = set(result.query_words)
    for topic in explanation.topics:
        assert set(topic.topic_words) <= document_words
        assert set(topic.query_words) <= query_words


def test_code_variant_explanations_also_sum_to_the_score(indexed: Engine) -> None:
    result = indexed.search(QUERY, "hidden_topics_code", window=10, size=3, explain=True)
    for hit in result.hits:
        assert hit.explanation is not None
        assert sum(t.contribution for t in hit.explanation.topics) + hit.explanation.rest_contribution == pytest.approx(hit.score, abs=1e-9)


def test_a_query_of_unknown_words_names_them(indexed: Engine) -> None:
    result = indexed.search("qqzzxv wwqqzz", "hidden_topics")
    # BM25 finds nothing for them either; the status says why the topics could not help,
    # as /search says it (`ranking_status`), and the words are named.
    assert (result.status, result.hits, result.candidates) == ("query_out_of_vocabulary", (), 0)
    assert result.reason is not None and "word vector" in result.reason
    assert result.oov_words == ("qqzzxv", "wwqqzz") and result.query_words == ()
    # A word the first stage finds and no vector has (the first stage orders, and why):
    # tests/test_cli_service_parity.py, on a sample paper's run-together words.


def _window(bm25: list[float]) -> CandidateSet:
    candidates = tuple(Candidate(f"d{i}", score, i + 1) for i, score in enumerate(bm25))
    return CandidateSet(candidates, TopicBatch((), np.zeros((len(bm25), 0, 2), np.float32), np.zeros((len(bm25), 0), np.float32)))


class _Fixed:
    """A ranker with given scores (to check fusion arithmetic by hand)."""

    name, variant, needs = "fixed", None, frozenset()

    def __init__(self, scores: list[float]) -> None:
        self.scores = np.array(scores)

    def score(self, query: object, window: CandidateSet) -> np.ndarray:
        return self.scores


def test_min_max_and_z_score_fusion_by_hand() -> None:
    window = _window([10.0, 6.0, 2.0])  # BM25: min-max 1, .5, 0; z = (x - 6) / 3.266
    own = [0.2, 0.6, 0.4]  # min-max 0, 1, .5
    fused, base = Fusion(_Fixed(own), "minmax", weight=0.25).components(None, window)  # type: ignore[arg-type]
    np.testing.assert_allclose(base, own)
    np.testing.assert_allclose(fused, 0.25 * np.array([0, 1, 0.5]) + 0.75 * np.array([1, 0.5, 0]))
    z = Fusion(_Fixed(own), "zscore", weight=0.5).score(None, window)  # type: ignore[arg-type]
    np.testing.assert_allclose(z, 0.5 * z_score(np.array(own)) + 0.5 * z_score(np.array([10.0, 6.0, 2.0])))
    assert z_score(np.array([1.0, 2.0, 3.0])).std() == pytest.approx(1.0)
    # Constant inputs scale to zeros, not NaN.
    assert not min_max(np.full(3, 7.0)).any() and not z_score(np.full(3, 7.0)).any()
    # Scores as large as a double holds (a caller's first-stage scores) scale as small ones
    # do; their spread would overflow to infinity (NaN scores were a 500 on /v1/rerank).
    huge = np.array([1.7976931348623157e308, -1.7976931348623157e308, 0.0])
    np.testing.assert_allclose(min_max(huge), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(z_score(huge), z_score(np.array([1.0, -1.0, 0.0])))


def test_reciprocal_rank_fusion_by_hand() -> None:
    window = _window([10.0, 6.0, 2.0])
    rrf = Fusion(_Fixed([0.1, 0.9, 0.5]), "rrf").score(None, window)  # type: ignore[arg-type]
    # own ranks 3, 1, 2; BM25 ranks 1, 2, 3
    np.testing.assert_allclose(rrf, [1 / 63 + 1 / 61, 1 / 61 + 1 / 62, 1 / 62 + 1 / 63])
    # BM25's rank is that of the window's first-stage scores: texts sent in one order and
    # scored by BM25 in another (`Engine.first_stage`) were ranked by the order sent.
    scored = CandidateSet(tuple(Candidate(f"d{i}", score, i + 1) for i, score in enumerate([2.0, 10.0, 6.0])), window.topics)
    rrf = Fusion(_Fixed([0.1, 0.9, 0.5]), "rrf").score(None, scored)  # type: ignore[arg-type]
    np.testing.assert_allclose(rrf, [1 / 63 + 1 / 63, 1 / 61 + 1 / 61, 1 / 62 + 1 / 62])
    with pytest.raises(ValueError, match="fusion method"):
        Fusion(_Fixed([]), "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weight"):
        Fusion(_Fixed([]), "minmax", weight=1.5)


def test_fusion_asks_its_base_ranker_for_exact_scores_everywhere() -> None:
    """A pruning ranker (WMD) must not order the tail by a bound under a fusion: any
    candidate can reach the fused top, and min-max reads the whole window's spread."""
    seen: list[int | None] = []

    class Recording(_Fixed):
        def score(self, query: object, window: CandidateSet) -> np.ndarray:
            seen.append(window.exact_top)
            window.notes.append("base note")
            return self.scores

    window = replace(_window([3.0, 2.0, 1.0]), exact_top=1)
    for method in ("minmax", "zscore", "rrf"):
        Fusion(Recording([0.1, 0.2, 0.3]), method).score(None, window)  # type: ignore[arg-type]
    assert seen == [None, None, None]
    assert window.notes == ["base note"] * 3  # the base's notes reach the caller


def test_candidates_a_ranker_cannot_score_do_not_flatten_the_fusion() -> None:
    """A document without words (WMD) or a Doc2Vec vector gets the ranker's lowest
    placeholder score; scaled with the rest it would squeeze them to the same value."""

    class Partial(_Fixed):
        def score(self, query: object, window: CandidateSet) -> np.ndarray:
            window.unscored.add(4)
            return self.scores

    window = _window([12.0, 11.0, 10.0, 9.0, 8.0])
    own = [-1.06, -1.00, -1.03, -1.05, -2.06]  # the last one is a placeholder
    for method in ("minmax", "zscore"):
        fusion = Fusion(Partial(own), method, weight=0.8)  # type: ignore[arg-type]
        fused = fusion.score(None, replace(window, unscored=set()))  # type: ignore[arg-type]
        alone = Fusion(_Fixed(own[:4]), method, weight=0.8).score(None, _window([12.0, 11.0, 10.0, 9.0]))  # type: ignore[arg-type]
        assert rank_candidates(fused, window)[:4] == rank_candidates(alone, _window([12.0, 11.0, 10.0, 9.0])) == [1, 2, 0, 3]
        assert rank_candidates(fused, window)[4] == 4


def test_n_way_fusion_shares_the_weight_and_keeps_each_rankers_gaps() -> None:
    """Two rankers and BM25: each ranker gets weight / 2, BM25 1 - weight, RRF sums all
    three reciprocal ranks; a candidate one ranker cannot score is left out of that
    ranker's scaling only."""
    window = _window([10.0, 6.0, 2.0])  # BM25 min-max 1, .5, 0; ranks 1, 2, 3
    first, second = [0.2, 0.6, 0.4], [5.0, 1.0, 3.0]  # min-max 0, 1, .5 and 1, 0, .5
    fused, own = Fusion([_Fixed(first), _Fixed(second)], "minmax", weight=0.4).components(None, window)  # type: ignore[list-item]
    np.testing.assert_allclose(own, first)  # the first ranker speaks for the fusion
    np.testing.assert_allclose(fused, 0.2 * np.array([0, 1, 0.5]) + 0.2 * np.array([1, 0, 0.5]) + 0.6 * np.array([1, 0.5, 0]))
    rrf = Fusion([_Fixed(first), _Fixed(second)], "rrf").score(None, window)  # type: ignore[list-item]
    # first's ranks 3, 1, 2; second's 1, 3, 2
    np.testing.assert_allclose(rrf, [1 / 63 + 1 / 61 + 1 / 61, 1 / 61 + 1 / 63 + 1 / 62, 1 / 62 + 1 / 62 + 1 / 63])

    class Partial(_Fixed):
        def score(self, query: object, window: CandidateSet) -> np.ndarray:
            window.unscored.add(2)
            return self.scores

    window = _window([10.0, 6.0, 2.0, 1.0])
    gappy, full = [0.2, 0.6, -9.0, 0.4], [4.0, 3.0, 2.0, 1.0]  # gappy scaled 0, 1, 0, .5
    fused = Fusion([Partial(gappy), _Fixed(full)], "minmax", weight=1.0).score(None, window)  # type: ignore[list-item]
    np.testing.assert_allclose(fused, 0.5 * np.array([0, 1, 0, 0.5]) + 0.5 * np.array([1, 2 / 3, 1 / 3, 0]))
    assert window.unscored == {2}  # reported to the caller all the same
    assert Fusion([_Fixed(first), _Fixed(second)]).name == "fixed+fixed+bm25"  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one"):
        Fusion([])


def test_n_way_fusions_are_registered_in_the_same_grammar(indexed: Engine) -> None:
    for name in ("hidden_topics_corrected+doc2vec+bm25", "hidden_topics_corrected+doc2vec+wmd+bm25:rrf", "doc2vec+wmd+bm25:zscore"):
        ranker = indexed.ranker(name)
        assert ranker.name == name and isinstance(ranker, Fusion) and len(ranker.bases) == name.count("+")
    three = indexed.ranker("hidden_topics_corrected+doc2vec+wmd+bm25")
    assert three.variant == "corrected" and three.needs == {"corrected_topics", "doc_vectors", "word_ids", "first_stage"}


def test_every_base_ranker_has_every_fusion() -> None:
    for base in ("hidden_topics", "hidden_topics_code", "wmd", "doc2vec"):
        for name in (f"{base}+bm25", f"{base}+bm25:zscore", f"{base}+bm25:rrf"):
            assert name in RANKERS


def test_search_keeps_the_bm25_and_the_ranker_score(indexed: Engine) -> None:
    result = indexed.search(QUERY, "hidden_topics+bm25:zscore", window=10, size=3)
    plain = {hit.doc_id: hit.score for hit in indexed.search(QUERY, "hidden_topics", window=10, size=3).hits}
    for hit in result.hits:
        assert hit.ranker_score == pytest.approx(plain[hit.doc_id])
        assert hit.score != hit.ranker_score and hit.bm25_score > 0
