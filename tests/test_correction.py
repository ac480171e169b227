"""The common-direction correction end to end: what indexing records, in both stores, and
the corrected ranker over them (the numbers themselves are tested in test_topics.py)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from conftest import SAMPLE, TINY_CORPUS, run, settings_env, write_jsonl

from reranker.config import OpenSearchSettings
from reranker.embeddings import SortedVocabulary, WordVectors
from reranker.errors import IndexOutdatedError
from reranker.extraction import BACKGROUND_WORDS, PRIOR_WORDS, estimate_centering, prior_centering
from reranker.indexing import index_corpus, read_corpus, sample_corpus
from reranker.pipeline import Engine
from reranker.rankers import CandidateSet, get_ranker
from reranker.store.embedded import EmbeddedStore
from reranker.store.opensearch import OpenSearchStore
from reranker.text import tokenize
from reranker.topics import center, topic_background
from reranker.types import Candidate, Document

QUERY = "statistical machine translation with word alignment models and phrase tables"


def sample_documents() -> list[Document]:
    return [item for _, item, _ in read_corpus(SAMPLE / "corpus.jsonl") if isinstance(item, Document)]


@pytest.fixture
def sample_engine(store: EmbeddedStore, glove: WordVectors) -> Engine:
    index_corpus(SAMPLE / "corpus.jsonl", store, glove, 15, show_progress=False)
    return Engine(store=store, vectors=glove)


def test_indexing_records_the_corpus_centering_and_corrected_topics(sample_engine: Engine, glove: WordVectors) -> None:
    info = sample_engine.store.index_info()
    assert info is not None and info.centering is not None
    expected = estimate_centering(sample_documents(), glove)
    assert expected is not None
    np.testing.assert_allclose(info.centering.mu, expected.mu, atol=1e-6)
    np.testing.assert_allclose(info.centering.direction, expected.direction, atol=1e-6)
    assert len(info.centering.background_words) == min(BACKGROUND_WORDS, len(expected.background_words))
    assert sum(info.centering.background_weights) == pytest.approx(1.0)
    ids = [doc.id for doc in sample_documents()][:5]
    corrected = sample_engine.store.topics(ids, corrected=True)
    paper = sample_engine.store.topics(ids)
    assert corrected.missing == () and corrected.backgrounds is not None
    assert corrected.topics.shape == paper.topics.shape and not np.allclose(corrected.topics, paper.topics)
    assert ((corrected.backgrounds >= 0) & (corrected.backgrounds <= 1)).all()
    # The paper's topics have the common direction as topic 1; the corrected ones do not.
    mu = np.asarray(info.centering.mu)
    mean_direction = mu / np.linalg.norm(mu)
    assert np.abs(paper.topics[:, 0] @ mean_direction).min() > 0.9
    assert np.abs(corrected.topics[:, 0] @ mean_direction).max() < 0.6
    # Centred word vectors have nothing along the centering's direction, so neither do the
    # topics made of them.
    assert np.abs(corrected.topics @ np.asarray(info.centering.direction)).max() < 1e-3


def test_indexed_backgrounds_are_topic_background_over_the_centering_words(sample_engine: Engine, glove: WordVectors) -> None:
    # Indexing computes the backgrounds from a matrix prepared once (`Correction`); the
    # formula is `topic_background`, which test_topics.py checks against a loop transcription.
    info = sample_engine.store.index_info()
    assert info is not None and info.centering is not None
    centering = info.centering
    known = glove.lookup(list(centering.background_words))
    weight_of = dict(zip(centering.background_words, centering.background_weights))
    words = center(known.vectors, np.asarray(centering.mu), np.asarray(centering.direction))
    frequencies = np.array([weight_of[word] for word in known.words])
    batch = sample_engine.store.topics([doc.id for doc in sample_documents()], corrected=True)
    assert batch.missing == () and batch.backgrounds is not None
    for topics, backgrounds in zip(batch.topics, batch.backgrounds):  # zero rows: padding, background 0
        np.testing.assert_allclose(backgrounds, topic_background(topics, words, frequencies), atol=1e-6)


def test_more_documents_keep_the_index_centering_and_a_rebuild_recomputes_it(tmp_path: Path, sample_engine: Engine, glove: WordVectors) -> None:
    store = sample_engine.store
    before = store.index_info()
    more = write_jsonl(tmp_path / "more.jsonl", TINY_CORPUS)
    index_corpus(more, store, glove, 15, show_progress=False)
    after = store.index_info()
    assert after is not None and before is not None and after.centering == before.centering
    assert store.topics(["ships"], corrected=True).missing == ()
    index_corpus(more, store, glove, 15, rebuild=True, show_progress=False)
    rebuilt = store.index_info()
    assert rebuilt is not None and rebuilt.centering is not None and rebuilt.centering != before.centering
    expected = estimate_centering([Document(r["id"], r["title"], r["text"]) for r in TINY_CORPUS], glove)
    assert expected is not None
    np.testing.assert_allclose(rebuilt.centering.mu, expected.mu, atol=1e-6)


def test_the_corrected_ranker_scores_and_explains_what_it_scores(sample_engine: Engine) -> None:
    result = sample_engine.search(QUERY, "hidden_topics_corrected", window=25, size=5, explain=True)
    assert result.status == "ok" and len(result.hits) == 5
    assert [hit.score for hit in result.hits] == sorted((hit.score for hit in result.hits), reverse=True)
    for hit in result.hits:
        assert hit.explanation is not None
        assert sum(topic.contribution for topic in hit.explanation.topics) + hit.explanation.rest_contribution == pytest.approx(hit.score, abs=1e-6)
        assert all(topic.query_words and topic.topic_words for topic in hit.explanation.topics[:1])
    paper = sample_engine.search(QUERY, "hidden_topics", window=25, size=5)
    assert [h.doc_id for h in paper.hits] != [h.doc_id for h in result.hits]
    fused = sample_engine.search(QUERY, "hidden_topics_corrected+bm25", window=25, size=5)
    assert fused.status == "ok" and len(fused.hits) == 5


def test_an_index_built_before_the_correction_is_refused_with_rebuild(
    data_dir: Path, glove: WordVectors, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    # What an index of the previous version holds: no centering, no corrected topics.
    db = sqlite3.connect(data_dir / "index" / "store.sqlite3")
    db.execute("DELETE FROM meta WHERE key = 'centering'")
    db.execute("UPDATE docs SET corrected_k = NULL, corrected_topics = NULL, corrected_importances = NULL, backgrounds = NULL")
    db.commit()
    db.close()
    capsys.readouterr()
    assert run(data_dir, "search", QUERY, "--ranker", "hidden_topics_corrected")[0] == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith("rebuild the index (reranker index --rebuild CORPUS)")
    assert run(data_dir, "search", QUERY, "--ranker", "hidden_topics")[0] == 0  # the paper's formula still runs
    old_store = EmbeddedStore(data_dir / "index")
    try:
        with pytest.raises(IndexOutdatedError):
            Engine(store=old_store, vectors=glove).check_ranker(get_ranker("hidden_topics_corrected+bm25"))
    finally:
        old_store.close()


def test_the_service_answers_409_for_an_index_without_the_correction(data_dir: Path) -> None:
    from reranker.config import Settings
    from reranker.service import create_app

    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    db = sqlite3.connect(data_dir / "index" / "store.sqlite3")
    db.execute("DELETE FROM meta WHERE key = 'centering'")
    db.commit()
    db.close()
    app = create_app(Settings.from_env(settings_env(data_dir)))
    answer = app.test_client().post("/search", json={"query": QUERY, "ranker": "hidden_topics_corrected"})
    assert answer.status_code == 409
    assert "rebuild the index" in answer.get_json()["error"]["reason"]
    # A paper's page shows the paper's topics then (hidden_topics reads them), and says so.
    paper = app.test_client().get("/documents/P01-1027").get_json()
    assert paper["topic_set"] == "paper" and paper["topics"]


# --- the OpenSearch store (osmem-server) ---------------------------------------------------


@pytest.fixture
def os_store(osmem_clone: Any) -> Iterator[OpenSearchStore]:
    store = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="papers", timeout=10.0, retries=2))
    yield store


def test_the_opensearch_store_round_trips_the_centering_and_corrected_topics(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    index_corpus(corpus, os_store, glove, 5, show_progress=False)
    fresh = OpenSearchStore(os_store.config)
    info = fresh.index_info()
    expected = estimate_centering([Document(r["id"], r["title"], r["text"]) for r in TINY_CORPUS], glove)
    assert info is not None and info.centering is not None and expected is not None
    np.testing.assert_allclose(info.centering.mu, expected.mu, atol=1e-6)
    assert info.centering.background_words == expected.background_words
    batch = fresh.topics(["ships", "chess", "missing"], corrected=True)
    assert batch.missing == ("missing",) and batch.backgrounds is not None
    assert batch.topics.shape[1] > 0 and ((batch.backgrounds[:2] > 0) & (batch.backgrounds[:2] <= 1)).any()
    engine = Engine(store=fresh, vectors=glove)
    result = engine.search("sailing ships on the ocean", "hidden_topics_corrected", window=3, size=3, explain=True)
    assert result.hits[0].doc_id == "ships"
    explanation = result.hits[0].explanation
    assert explanation is not None
    assert sum(t.contribution for t in explanation.topics) + explanation.rest_contribution == pytest.approx(result.hits[0].score, abs=1e-6)
    mapping = fresh.client.indices.get_mapping(index="papers")
    properties = next(iter(mapping.values()))["mappings"]["properties"]
    assert properties["corrected_topics"]["properties"]["backgrounds"] == {"type": "float", "index": False}
    assert json.loads(json.dumps(info.centering.to_json())) == info.centering.to_json()


def test_the_centering_sample_is_spread_over_the_whole_corpus(tmp_path: Path) -> None:
    records = [{"id": f"d{i}", "text": f"words of document {i}"} for i in range(40)]
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    with corpus.open("a", encoding="utf-8") as handle:
        handle.write("not json\n")
    budget = corpus.stat().st_size // 4 + 1  # about a quarter: every 4th line
    sampled = [doc.id for doc in sample_corpus(corpus, budget)]
    assert sampled == [f"d{i}" for i in range(0, 40, 4)]  # the bad last line (number 40) is skipped
    assert [doc.id for doc in sample_corpus(corpus)] == [f"d{i}" for i in range(40)]


def test_the_vectors_lead_with_their_most_frequent_words_in_either_vocabulary_form(glove: WordVectors) -> None:
    leading = glove.leading_words(12)
    # GloVe 6B's own order: its file starts with these, most frequent first.
    assert leading[:6] == ["the", ",", ".", "of", "to", "and"], leading
    index = glove._index
    as_dict = index.as_dict() if isinstance(index, SortedVocabulary) else dict(index)
    twin = WordVectors(glove._vectors, as_dict, glove.info)
    assert twin.leading_words(PRIOR_WORDS) == glove.leading_words(PRIOR_WORDS)
    assert [as_dict[word] for word in glove.leading_words(PRIOR_WORDS)] == list(range(PRIOR_WORDS))
    # And give back the words of any rows, the inverse of word_ids, in both forms.
    words = ["topic", "said", "translation", "the", "zygote"]
    for vectors in (glove, twin):
        assert vectors.words_of(vectors.word_ids(words)) == words


@pytest.mark.parametrize("kind", ["embedded", "opensearch"])
def test_with_no_index_a_window_background_is_its_texts_own_word_distribution(kind: str, request: pytest.FixtureRequest, glove: WordVectors) -> None:
    # Over a cluster with no index too (an id sent without its text has no part in it).
    texts = [document.full_text for document in sample_documents()[:6]]
    store = request.getfixturevalue("store" if kind == "embedded" else "os_store")
    engine = Engine(store=store, vectors=glove)
    candidates = tuple(Candidate(str(i), 0.0, i + 1) for i in range(len(texts)))
    window = CandidateSet(candidates, texts=(*texts[:-1], None), first_stage="order")  # the last one unsent
    centering = engine._centering(window)
    prior = prior_centering(glove)
    assert prior is not None and (centering.mu, centering.direction) == (prior.mu, prior.direction)
    # The sent texts' BACKGROUND_WORDS most frequent content words with a vector, each
    # weighted by its count among them.
    counts: dict[str, int] = {}
    for text in texts[:-1]:
        for word in tokenize(text):
            if word in glove:
                counts[word] = counts.get(word, 0) + 1
    assert len(counts) > BACKGROUND_WORDS, "the cut is exercised"
    cut = sorted(counts.values(), reverse=True)[BACKGROUND_WORDS - 1]
    background = centering.background_words
    assert len(background) == BACKGROUND_WORDS and len(set(background)) == BACKGROUND_WORDS
    assert {w for w, c in counts.items() if c > cut} <= set(background) and all(counts[w] >= cut for w in background)
    total = sum(counts[w] for w in background)
    assert list(centering.background_weights) == pytest.approx([counts[w] / total for w in background])
    assert list(centering.background_weights) == sorted(centering.background_weights, reverse=True)
    # The texts' word ids are kept: a window of the same texts does not tokenize them again.
    kept = len(engine.word_id_cache)
    assert kept == len(texts) - 1 and engine._centering(window) == centering and len(engine.word_id_cache) == kept


def _reads_of(texts: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions that read one of `texts` for its words, as they are called:
    the engine's, the extraction's and the store's (for the texts' terms)."""
    import reranker.extraction
    import reranker.pipeline
    import reranker.store.text_index
    import reranker.text

    reads: list[str] = []
    readers = (
        (reranker.text, "content_words"),  # what `WordsRead.of` reads a text with
        (reranker.pipeline, "tokenize"),
        (reranker.extraction, "readable_words"),
        (reranker.store.text_index, "tokenize"),
    )
    for module, name in readers:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda text, *rest, _f=original, _n=name: (reads.append(_n) if text in texts else None, _f(text, *rest))[1])
    return reads


def test_with_no_index_a_new_text_is_read_once_for_its_topics_its_window_background_and_its_passages(
    store: EmbeddedStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = tuple(document.full_text for document in sample_documents()[:4])
    reads = _reads_of(texts, monkeypatch)
    seen: list[str] = []
    engine = Engine(store=store, vectors=glove, on_text_topics=seen.append)
    ranker = engine.ranker("hidden_topics_corrected+bm25:maxp")
    query = engine.query("statistical machine translation")
    window = CandidateSet(tuple(Candidate(str(i), 0.0, i + 1) for i in range(len(texts))), texts=texts, first_stage="order", query_text=query.text)
    first = engine.rerank(query, engine.complete(window, ranker), ranker)
    # One pass over each text gave its topics, the word ids its window's background is
    # counted from and its terms for the best passage; the service's count says each was
    # computed once.
    assert reads == ["content_words"] * len(texts) and seen == ["computed"] * len(texts)
    assert first.parts[-1].name == "passages" and first.parts[-1].own.max() > 0
    reads.clear(), seen.clear()
    again = engine.rerank(query, engine.complete(window, ranker), ranker)
    assert reads == [] and seen == ["hit"] * len(texts)
    np.testing.assert_array_equal(first.scores, again.scores)
    # The backgrounds are the window's own: as `_centering(window)` gives them.
    background = engine._correction(engine._centering(window), "any", keep=False)
    corrected = engine.complete(window, ranker).corrected
    assert corrected is not None and corrected.backgrounds is not None
    for row in range(len(texts)):
        kept = int(np.count_nonzero(corrected.importances[row]))
        expected = background.with_backgrounds(corrected.topics[row, :kept], corrected.importances[row, :kept]).backgrounds
        np.testing.assert_allclose(corrected.backgrounds[row, :kept], expected, rtol=1e-6)


def test_a_new_text_sent_without_scores_is_read_once_for_its_first_stage_its_topics_and_its_passages(
    sample_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an index, a text sent without a score (a cluster's rerank call) is read for its
    BM25 first, then for its topics and its best passage: from one reading."""
    texts = tuple(document.full_text + " (sent)" for document in sample_documents()[:4])
    reads = _reads_of(texts, monkeypatch)
    ranker = sample_engine.ranker("hidden_topics_corrected+bm25:maxp")
    query = sample_engine.query("statistical machine translation")
    sent = CandidateSet(tuple(Candidate(str(i), 0.0, i + 1) for i in range(len(texts))), texts=texts, first_stage="missing", query_text=query.text)
    window = sample_engine.first_stage(query, sent, ranker)
    ranking = sample_engine.rerank(query, window, ranker)
    assert window.first_stage == "index_bm25" and ranking.parts[-1].name == "passages"
    assert reads == ["content_words"] * len(texts)
    # The next request (a window of its own) finds their terms and topics kept: no reading.
    reads.clear()
    again = sample_engine.rerank(query, sample_engine.first_stage(query, replace(sent, words_read={}), ranker), ranker)
    assert reads == [] and again.order == ranking.order


def test_a_new_text_sent_with_its_score_is_read_once_for_its_topics_and_its_passages(
    sample_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/rerank` with scores over an index: no first stage to read the texts, the topics read
    them first and the best passages (scored with the index's statistics) take that reading."""
    texts = tuple(document.full_text + " (scored)" for document in sample_documents()[:4])
    reads = _reads_of(texts, monkeypatch)
    ranker = sample_engine.ranker("hidden_topics_corrected+bm25:maxp")
    query = sample_engine.query("statistical machine translation")
    sent = CandidateSet(tuple(Candidate(str(i), 4.0 - i, i + 1) for i in range(len(texts))), texts=texts, query_text=query.text)
    ranking = sample_engine.rerank(query, sent, ranker)
    assert ranking.parts[-1].name == "passages" and reads == ["content_words"] * len(texts)


def test_over_opensearch_a_new_text_is_read_once_for_its_topics_and_its_passages(
    os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's rerank call to a service over OpenSearch: the store scores the texts' best
    passages itself (the cluster keeps none for them), from the reading their topics made."""
    texts = tuple(document.full_text + " (cluster)" for document in sample_documents()[:4])
    reads = _reads_of(texts, monkeypatch)
    engine = Engine(store=os_store, vectors=glove)
    ranker = engine.ranker("hidden_topics_corrected+bm25:maxp")
    query = engine.query("statistical machine translation")
    sent = CandidateSet(tuple(Candidate(str(i), 0.0, i + 1) for i in range(len(texts))), texts=texts, first_stage="missing", query_text=query.text)
    ranking = engine.rerank(query, engine.first_stage(query, sent, ranker), ranker)
    assert ranking.parts[-1].name == "passages" and ranking.parts[-1].own.max() > 0
    assert reads == ["content_words"] * len(texts)


def test_the_store_reads_texts_itself_where_the_engines_reading_is_not_its_own(sample_engine: Engine) -> None:
    """Only the corrected topics read what the store's terms need and more: for another
    ranker the store's own `tokenize` is cheaper; and an engine whose stop list is not the
    store's would give it other words."""
    window = CandidateSet((Candidate("0", 0.0, 1),), texts=("ships sail the ocean",), first_stage="missing")
    corrected = sample_engine.ranker("hidden_topics_corrected+bm25:maxp")
    read = sample_engine.read_words(window, corrected)
    assert read is not None
    distinct, numbers = read("ships sail the ocean")
    assert [distinct[i] for i in numbers] == tokenize("ships sail the ocean")
    assert sample_engine.read_words(window, sample_engine.ranker("hidden_topics+bm25")) is None
    assert sample_engine.read_words(window, None) is None
    other = replace(sample_engine, stopwords=frozenset({"ships"}), _stop_list=None)
    assert other.read_words(window, corrected) is None



def test_with_no_index_texts_are_corrected_with_the_vectors_own_centering(store: EmbeddedStore, glove: WordVectors) -> None:
    prior = prior_centering(glove)
    assert prior is not None
    # Content words only, weighted by Zipf's law over the file's order: "said" (GloVe's 20th
    # word, the first after the stop words and punctuation) leads.
    assert prior.background_words[0] == "said" and len(prior.background_words) == BACKGROUND_WORDS
    assert sum(prior.background_weights) == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(prior.background_weights, prior.background_weights[1:]))
    # Close to a real corpus's own (the sample corpus of papers): the common direction of
    # English word vectors is what both remove.
    corpus = estimate_centering(sample_documents(), glove)
    assert corpus is not None
    cosine = np.dot(prior.mu, corpus.mu) / np.linalg.norm(prior.mu) / np.linalg.norm(corpus.mu)
    assert cosine > 0.8, cosine
    # An engine over an empty store scores sent texts with it, and keeps the index's once
    # there is one.
    engine = Engine(store=store, vectors=glove)
    assert store.index_info() is None
    assert engine._centering() == prior
    index_corpus(SAMPLE / "corpus.jsonl", store, glove, 15, show_progress=False)
    info = store.index_info()
    assert info is not None and engine._centering() == info.centering != prior
