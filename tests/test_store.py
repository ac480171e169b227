"""The embedded store: real SQLite and a real tantivy index on disk.

The crash and multi-process tests run real processes that write the store and die (or
keep writing) while this one reads it.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import math
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import pytest

import reranker.store
from reranker.errors import IndexMismatchError, InputError, StoreError
from reranker.store import MAX_QUERY_TERMS, CompactResult, IndexInfo, LruCache, content_key, embedded, filter_for_field
from reranker.store.embedded import _FIRST_STAGE_WINDOW, EmbeddedStore
from reranker.store.text_index import TextIndex, stem_words
from reranker.text import default_stopwords, stop_list_info, tokenize
from reranker.types import Candidate, DocTopics, Document, EmbeddingInfo, Filter, StoredDocument

EMBEDDING = EmbeddingInfo(name="test", dim=4, checksum="c" * 64)
BUNDLED = stop_list_info(None)  # what a store without a stop list of its own records


def stored(doc_id: str, text: str, k: int = 2, seed: int = 0, title: str = "", year: int = 2018) -> StoredDocument:
    rng = np.random.default_rng(seed)
    topics = np.linalg.qr(rng.standard_normal((4, k)))[0].T.astype(np.float32)
    importances = np.full(k, 1.0 / k, dtype=np.float32)
    document = Document(doc_id, title, text, {"year": year})
    # As many content words as an index run reads (`reranker compact` checks it).
    return StoredDocument(document, DocTopics(topics, importances), f"h-{doc_id}-{text}", len(tokenize(document.full_text)), 0)


@pytest.fixture
def ready(store: EmbeddedStore) -> EmbeddedStore:
    store.initialise(IndexInfo(EMBEDDING, k=2))
    return store


def test_bm25_ranks_matching_documents(ready: EmbeddedStore) -> None:
    ready.upsert(
        [
            stored("a", "hidden topics of long documents and their summaries"),
            stored("b", "baking bread with flour and yeast"),
            stored("c", "topics topics topics summaries", title="Hidden topics"),
        ]
    )
    hits = ready.bm25("hidden topics for a summary", 10)
    assert [h.doc_id for h in hits][:2] == ["c", "a"]  # stemming: summary ~ summaries
    assert "b" not in [h.doc_id for h in hits]
    assert [h.bm25_rank for h in hits] == list(range(1, len(hits) + 1))
    assert hits[0].bm25_score >= hits[1].bm25_score > 0
    assert ready.bm25("the of and", 10) == []  # only stop words: nothing to match
    assert ready.bm25('quotes " and * stars OR NEAR( title:x', 10) == []  # no query syntax


def test_repeated_query_words_weigh_more(ready: EmbeddedStore) -> None:
    ready.upsert([stored("ships", "ships and ships; bread"), stored("bread", "bread and bread; ships")])
    ready.upsert([stored(f"chess{i}", "chess openings and endgames") for i in range(5)])  # IDF > 0
    assert ready.bm25("ships ships ships bread", 2)[0].doc_id == "ships"
    assert ready.bm25("bread bread bread ships", 2)[0].doc_id == "bread"


def test_the_same_id_replaces_never_duplicates(ready: EmbeddedStore) -> None:
    ready.upsert([stored("a", "first version about ships")])
    ready.upsert([stored("a", "second version about bread", seed=1)])
    assert ready.count() == 1
    assert ready.bm25("ships", 10) == []
    assert [h.doc_id for h in ready.bm25("bread", 10)] == ["a"]
    assert ready.documents(["a"])["a"].text == "second version about bread"


def test_topics_round_trip_exactly_and_missing_ids_score_nothing(ready: EmbeddedStore) -> None:
    doc = stored("a", "text", k=2, seed=5)
    short = stored("b", "text", k=1, seed=6)
    ready.upsert([doc, short])
    batch = ready.topics(["b", "missing", "a"])
    assert batch.doc_ids == ("b", "missing", "a")
    assert batch.topics.shape == (3, 2, 4) and batch.importances.shape == (3, 2)
    np.testing.assert_array_equal(batch.topics[2], doc.doc_topics.topics)
    np.testing.assert_array_equal(batch.topics[0, :1], short.doc_topics.topics)
    assert not batch.topics[0, 1].any() and not batch.topics[1].any()
    assert batch.importances[1].sum() == 0


def test_counts_and_lengths_are_read_through_indexes_that_a_writer_adds_to_an_older_store(tmp_path: Path) -> None:
    """The mean length BM25 takes is summed through an index of the lengths, not the rows
    (which would walk every text); a store made before that index is read through its
    rows, alike, until a writer opens it and adds the index."""
    import sqlite3

    def plan(store: EmbeddedStore, query: str) -> str:
        return " ".join(str(row) for row in store._db.execute(f"EXPLAIN QUERY PLAN {query}").fetchall())

    directory = tmp_path / "store"
    store = EmbeddedStore(directory)
    store.initialise(IndexInfo(EMBEDDING, k=2))
    store.upsert([stored(f"d{i}", " ".join(["word"] * (40 + 200 * i)), seed=i) for i in range(4)])
    store.publish()
    expected = (store.count(), store._statistics())
    assert expected[0] == 4 and expected[1][0] == 4
    store.close()
    with sqlite3.connect(directory / "store.sqlite3") as db:  # as a store of the previous version
        db.execute("DROP INDEX docs_lengths")
    older = EmbeddedStore(directory)
    assert (older.count(), older._statistics()) == expected
    older.close()
    writer = EmbeddedStore(directory)
    writer.initialise(IndexInfo(EMBEDDING, k=2))
    writer.publish()
    assert "COVERING INDEX docs_lengths" in plan(writer, "SELECT n_tokens + n_oov FROM docs INDEXED BY docs_lengths WHERE rowid <= 9")
    writer._local.__dict__.pop("lengths", None)  # forget the remembered sums: read them again
    assert (writer.count(), writer._statistics()) == expected
    writer.close()


def test_the_store_persists_on_disk(tmp_path: Path) -> None:
    first = EmbeddedStore(tmp_path / "s")
    first.initialise(IndexInfo(EMBEDDING, k=2))
    first.upsert([stored("a", "persistent ships")])
    first.close()
    second = EmbeddedStore(tmp_path / "s")
    assert second.count() == 1 and second.index_info() == IndexInfo(EMBEDDING, k=2, stopwords=BUNDLED)
    assert second.content_hashes(["a", "b"]) == {"a": "h-a-persistent ships"}
    assert second.documents(["a"])["a"].fields == {"year": 2018}
    second.close()


def test_other_vectors_or_k_need_a_rebuild(ready: EmbeddedStore) -> None:
    ready.upsert([stored("a", "ships")])
    other = EmbeddingInfo(name="other", dim=4, checksum="d" * 64)
    with pytest.raises(IndexMismatchError, match="rebuild"):
        ready.initialise(IndexInfo(other, k=2))
    with pytest.raises(IndexMismatchError, match="K=2"):
        ready.initialise(IndexInfo(EMBEDDING, k=3))
    ready.initialise(IndexInfo(other, k=3), rebuild=True)
    assert ready.index_info() == IndexInfo(other, k=3, stopwords=BUNDLED)  # what the rebuild writes
    # Readers see the old index until the rebuild is published.
    assert ready.count() == 1 and [hit.doc_id for hit in ready.bm25("ships", 5)] == ["a"]
    ready.upsert([stored("b", "boats", k=3)])
    assert ready.count() == 1 and ready.topics(["a"]).topics.shape == (1, 2, 4)
    ready.publish()
    assert ready.count() == 1 and ready.bm25("ships", 5) == [] and [hit.doc_id for hit in ready.bm25("boats", 5)] == ["b"]
    assert ready.topics(["a", "b"]).missing == ("a",) and ready.topics(["b"]).topics.shape == (1, 3, 4)


# "ships" a stop word: every text that holds it reads as other content words.
NO_SHIPS = default_stopwords() | {"ships"}


def test_another_stop_list_needs_a_rebuild_and_writes_nothing(tmp_path: Path) -> None:
    """The index records its stop list; an index run or compaction with another one is
    refused in one line before anything is written, and a rebuild records the new one."""
    directory = tmp_path / "store"
    built = EmbeddedStore(directory, NO_SHIPS, stopwords_file=Path("/lists/no-ships.txt"))
    built.initialise(IndexInfo(EMBEDDING, k=2))
    built.upsert([stored("a", "ships and boats"), stored("b", "boats at sea")])
    built.publish()
    assert built.index_info() == IndexInfo(EMBEDDING, k=2, stopwords=stop_list_info(NO_SHIPS))
    built.close()
    store = EmbeddedStore(directory)
    try:
        before = (store.count(), store._text.num_docs(), store._meta(), visible(store, "boats sea"))
        expected = (
            r"^the index was built with the stop list in /lists/no-ships.txt \(sha256 [0-9a-f]{12}\), not the bundled stop list "
            r"\(sha256 [0-9a-f]{12}\): use the same \(--stopwords, RERANKER_STOPWORDS\) or rebuild the index "
            r"\(reranker index --rebuild\)$"
        )
        with pytest.raises(IndexMismatchError, match=expected):
            store.initialise(IndexInfo(EMBEDDING, k=2))
        with pytest.raises(IndexMismatchError, match=expected):
            store.compact()
        with pytest.raises(IndexMismatchError, match=expected):  # as a query's check of the vectors
            store.index_info().check(EMBEDDING, stopwords=store.stop_list)  # type: ignore[union-attr]
        assert (store.count(), store._text.num_docs(), store._meta(), visible(store, "boats sea")) == before
        store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
        store.upsert([stored("a", "ships and boats")])
        store.publish()
        assert store.index_info() == IndexInfo(EMBEDDING, k=2, stopwords=BUNDLED)
        assert visible(store, "ships") == {"a"}  # read with the new list
        store.initialise(IndexInfo(EMBEDDING, k=2))  # the same list from now on
        assert store.compact().documents == 1
    finally:
        store.close()


def test_an_index_that_recorded_no_stop_list_is_taken_with_any(tmp_path: Path) -> None:
    """An index built before indexes recorded their stop list is used as before: compact
    then counts each row's words (the list here leaves those of these texts alone)."""
    directory = tmp_path / "store"
    built = EmbeddedStore(directory)
    built.initialise(IndexInfo(EMBEDDING, k=2))
    built.upsert([stored("a", "boats at sea"), stored("b", "sails and boats")])
    built.publish()
    built.close()
    with sqlite3.connect(directory / "store.sqlite3") as db:
        db.execute("DELETE FROM meta WHERE key = 'stopwords'")
    store = EmbeddedStore(directory, NO_SHIPS)
    try:
        assert store.index_info() == IndexInfo(EMBEDDING, k=2)
        store.index_info().check(EMBEDDING, stopwords=store.stop_list)  # type: ignore[union-attr]
        store.initialise(IndexInfo(EMBEDDING, k=2))
        store.upsert([stored("c", "boats again")])
        store.publish()
        assert store.compact().documents == 3 and visible(store, "boats") == {"a", "b", "c"}
        assert store.index_info() == IndexInfo(EMBEDDING, k=2)  # still unknown: not recorded as this one
    finally:
        store.close()


def test_writes_need_an_initialised_index_of_the_right_dimension(store: EmbeddedStore) -> None:
    with pytest.raises(StoreError, match="not initialised"):
        store.upsert([stored("a", "x")])
    store.initialise(IndexInfo(EmbeddingInfo("wide", 8, "e" * 64), k=2))
    with pytest.raises(IndexMismatchError, match="d=8"):
        store.upsert([stored("a", "x")])
    assert store.count() == 0  # the failed batch left nothing behind


def test_an_unopenable_location_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open"):
        EmbeddedStore(blocker / "store")


# --- Lucene's BM25, by hand ------------------------------------------------------------

K1, B = 1.2, 0.75


def lucene_bm25(tf: int, doc_len: int, avg_len: float, n_docs: int, doc_freq: int, boost: float = 1.0) -> float:
    """One (field, term) clause: idf = ln(1 + (N - n + 0.5) / (n + 0.5)), tantivy's (k1 + 1) kept."""
    idf = math.log(1 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))
    return boost * idf * (K1 + 1) * tf / (tf + K1 * (1 - B + B * doc_len / avg_len))


def test_bm25_is_lucenes_formula_summed_over_the_stemmed_and_exact_fields(ready: EmbeddedStore) -> None:
    ready.upsert([stored("a", "ship ship cargo"), stored("b", "ships harbour"), stored("c", "bread flour yeast water")])
    # Both fields hold 3, 2 and 4 words: avgdl = 3. Stemmed, "ship" is in a and b; exact, only in a.
    scores = {hit.doc_id: hit.bm25_score for hit in ready.bm25("ship", 10)}
    assert scores == pytest.approx(
        {
            "a": lucene_bm25(2, 3, 3.0, 3, 2) + lucene_bm25(2, 3, 3.0, 3, 1),
            "b": lucene_bm25(1, 2, 3.0, 3, 2),
        },
        rel=1e-5,
    )
    # "ships": the stemmed field matches a and b, the exact one only b.
    scores = {hit.doc_id: hit.bm25_score for hit in ready.bm25("ships", 10)}
    assert scores == pytest.approx(
        {"a": lucene_bm25(2, 3, 3.0, 3, 2), "b": lucene_bm25(1, 2, 3.0, 3, 2) + lucene_bm25(1, 2, 3.0, 3, 1)},
        rel=1e-5,
    )
    # A word twice in the query counts twice; words add up.
    twice = {hit.doc_id: hit.bm25_score for hit in ready.bm25("ship ship bread", 10)}
    assert twice["a"] == pytest.approx(2 * scores_of(ready, "ship")["a"], rel=1e-5)
    assert twice["c"] == pytest.approx(2 * lucene_bm25(1, 4, 3.0, 3, 1), rel=1e-5)


def scores_of(store: EmbeddedStore, query: str) -> dict[str, float]:
    return {hit.doc_id: hit.bm25_score for hit in store.bm25(query, 10)}


# Words most of `_many_documents`' documents hold, in two forms each (the stemmed field counts both).
_COMMON = ("ocean", "oceans", "vessel", "vessels", "harbour", "sailing")
_MEDIUM = ("sailor", "sailors", "crew", "captain", "wind", "winds")
_RARE = ("cargo", "cargoes", "bread", "flour", "yeast", "storm", "storms", "anchor", "compass", "lantern", "rope", "ropes")


def _many_documents(count: int = 160, seed: int = 3) -> list[StoredDocument]:
    """Documents of 3 to 900 words (most field lengths above 40, which the index rounds):
    each holds most of `_COMMON`, some of `_MEDIUM` and a few of `_RARE`, among filler words."""
    rng = np.random.default_rng(seed)
    filler = [f"{a}{b}{c}" for a in ("ba", "ko", "ri", "mu", "te") for b in ("lo", "ne", "sa", "vi") for c in ("rk", "nd", "mp")]
    documents = []
    for number in range(count):
        length = int(rng.integers(3, 900))
        words = list(rng.choice(filler, size=length))
        words += [word for word in _COMMON if rng.random() < 0.8] * int(rng.integers(1, 4))
        words += [word for word in _MEDIUM if rng.random() < 0.3]
        words += list(rng.choice(_RARE, size=int(rng.integers(0, 4))))
        rng.shuffle(words)
        documents.append(stored(f"d{number:03d}", " ".join(words), year=2015 + number % 4))
    return documents


def _whole_query(store: EmbeddedStore, query: str, size: int) -> dict[str, float]:
    """doc id -> score of the text index's best `size` for every clause of `query`."""
    with sqlite3.connect(store.directory / "store.sqlite3") as db:
        ids = dict(db.execute("SELECT rowid, id FROM docs"))
    return {ids[rowid]: score for rowid, score in store._text.search(tokenize(query), size)}


@pytest.fixture
def short_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first stage searches short whenever a query holds common terms: these corpora are
    far too small for it to pay (`EmbeddedStore._short_search_pays`)."""
    monkeypatch.setattr(embedded, "SHORT_SEARCH_FIXED_COST", 0)
    monkeypatch.setattr(embedded, "STORED_WORD_COST", 0.0)


def _searches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The `leave_out` of every text-index search from now on (None: the whole query)."""
    searched: list[object] = []
    real = TextIndex.search

    def recording(self: TextIndex, words: list[str], size: int, rowids: object = None, leave_out: object = None) -> list[tuple[int, float]]:
        searched.append(leave_out)
        return real(self, words, size, rowids, leave_out)  # type: ignore[arg-type]

    monkeypatch.setattr(TextIndex, "search", recording)
    return searched


def _assert_scored_whole(store: EmbeddedStore, query: str, hits: list[Candidate], searched: list[object], top: bool = True) -> None:
    """One search, without common terms' clauses; each hit scored as the whole query scores
    it (its common terms' share added from the stored words with the index's own N,
    document frequencies, mean length and rounded lengths); with `top`, the whole query's
    best, in its order."""
    assert len(searched) == 1 and searched[0]
    whole = _whole_query(store, query, 1000)
    assert {hit.doc_id: hit.bm25_score for hit in hits} == pytest.approx({hit.doc_id: whole[hit.doc_id] for hit in hits}, rel=1e-5)
    if top:
        assert [hit.doc_id for hit in hits] == sorted(whole, key=lambda doc_id: (-whole[doc_id], doc_id))[: len(hits)]


def test_the_first_stage_searched_without_common_terms_scores_its_hits_as_the_whole_query(
    ready: EmbeddedStore, monkeypatch: pytest.MonkeyPatch, short_search: None
) -> None:
    ready.upsert(_many_documents(240))
    searched = _searches(monkeypatch)
    queries = (
        "ocean vessels sailors crew wind cargo storm",
        "sailing harbour captain winds sailor bread",
        # A common word twice, and in two forms: its clauses' boosts and both fields' counts.
        "ocean ocean oceans vessel crew captain wind rope",
    )
    for query in queries:
        searched.clear()
        hits = ready.bm25(query, 10)
        assert ready._text.common_terms(tokenize(query))  # the query holds terms most documents hold
        _assert_scored_whole(ready, query, hits, searched)
    # More than a window: every hit still scores whole.
    searched.clear()
    _assert_scored_whole(ready, queries[0], ready.bm25(queries[0], 130), searched, top=False)
    # A filter that leaves three quarters of the documents: searched short among them.
    years = {doc.document.id: doc.document.fields["year"] for doc in _many_documents(240)}
    searched.clear()
    allowed = ready.bm25(queries[0], 10, [Filter("year", "gte", 2016)])
    assert len(allowed) == 10 and all(years[hit.doc_id] >= 2016 for hit in allowed)
    _assert_scored_whole(ready, queries[0], allowed, searched, top=False)
    # One that leaves fewer than a window: the whole query, among them.
    searched.clear()
    few = ready.bm25(queries[0], 10, [Filter("year", "eq", 2016)])
    assert searched == [None] and len(few) == 10 and all(years[hit.doc_id] == 2016 for hit in few)


def test_replaced_documents_keep_the_first_stage_scored_as_the_whole_query(ready: EmbeddedStore, monkeypatch: pytest.MonkeyPatch, short_search: None) -> None:
    # A new version of a document deletes its old entry from the text index, which still
    # counts it in N, in the document frequencies and in the mean length until a merge
    # drops it: the share added back must count it as the index does.
    ready.upsert(_many_documents())
    renewed = [replace(doc, document=replace(doc.document, id=f"d{number:03d}"), content_hash=f"new-{number}")
               for number, doc in enumerate(_many_documents(seed=11)[:24])]
    ready.upsert(renewed)
    query = "ocean vessels sailors crew wind cargo storm"
    ready.bm25(query, 10)
    assert ready._text.scoring_statistics(tokenize(query))[0] > ready._text.num_docs() == 160  # type: ignore[index]
    searched = _searches(monkeypatch)
    hits = ready.bm25(query, 100)
    _assert_scored_whole(ready, query, hits[:10], searched)
    # The best passages take the first stage's words, not its query's weights: those count
    # the replaced documents, and a passage's BM25 counts the documents readers see.
    ids = [hit.doc_id for hit in hits]
    from_window = ready.passage_bm25(query, ids, [None] * len(ids))
    assert _FIRST_STAGE_WINDOW.get() == []
    assert from_window == pytest.approx(ready.passage_bm25(query, ids, [None] * len(ids)), rel=1e-6)


def test_the_first_stage_searches_short_only_where_the_common_clauses_hold_more_postings_than_it_costs(
    ready: EmbeddedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "ocean vessels sailors crew wind cargo storm"
    searched = _searches(monkeypatch)
    # Documents of 450 words on average: the window's 100 hold some 45,000 words, the common
    # clauses (160 documents) under 2,000 postings: the whole query.
    ready.upsert(_many_documents())
    hits = {hit.doc_id: hit.bm25_score for hit in ready.bm25(query, 10)}
    assert ready._text.common_terms(tokenize(query)) and searched == [None]
    assert hits == _whole_query(ready, query, 10)
    # Documents of 7 words, all holding the common ones: their clauses hold 4 x 2 x 400 =
    # 3,200 postings against the window's 700 words (at 1.75 postings a word, 1,225), but
    # fewer than a search's fixed cost: the whole query.
    tiny = EmbeddedStore(tmp_path / "tiny")
    tiny.initialise(IndexInfo(EMBEDDING, k=2))
    rng = np.random.default_rng(8)
    tiny.upsert([
        stored(f"t{number:03d}", " ".join(["ocean", "vessels", "wind", "crew", *rng.choice(_RARE, size=3)]))
        for number in range(400)
    ])
    searched.clear()
    tiny.bm25(query, 10)
    assert set(tiny._text.common_terms(tokenize(query))["exact"]) == {"ocean", "vessels", "wind", "crew"}
    assert searched == [None] and _FIRST_STAGE_WINDOW.get() == []
    # At a fixed cost of 1,000 postings (1,000 + 1,225 < 3,200): searched short, scored whole.
    monkeypatch.setattr(embedded, "SHORT_SEARCH_FIXED_COST", 1_000)
    searched.clear()
    _assert_scored_whole(tiny, query, tiny.bm25(query, 10), searched)
    assert _FIRST_STAGE_WINDOW.get()  # the words it read, for the best passage
    # A window of 1,000 holds 7,000 words (1,000 + 12,250 postings' worth): the whole query
    # again, and no window left from the search before.
    searched.clear()
    tiny.bm25(query, 1000)
    assert searched == [None] and _FIRST_STAGE_WINDOW.get() == []
    tiny.close()


def test_a_query_of_common_terms_only_is_searched_whole(ready: EmbeddedStore, short_search: None) -> None:
    ready.upsert(_many_documents())
    query = "ocean vessels harbour"
    hits = ready.bm25(query, 10)
    assert set(ready._text.common_terms(tokenize(query))["exact"]) == {"ocean", "vessels", "harbour"}
    whole = _whole_query(ready, query, 1000)
    assert [(hit.doc_id, pytest.approx(hit.bm25_score, rel=1e-6)) for hit in hits] == [
        (doc_id, whole[doc_id]) for doc_id in sorted(whole, key=lambda doc_id: (-whole[doc_id], doc_id))[:10]
    ]


def test_the_best_passages_read_the_words_the_first_stage_read_only_while_they_are_current(ready: EmbeddedStore, short_search: None) -> None:
    ready.upsert(_many_documents())
    query = "ocean vessels sailors crew wind cargo storm"
    ids = [hit.doc_id for hit in ready.bm25(query, 100)]
    kept = ready.passage_bm25(query, ids, [None] * len(ids))
    assert _FIRST_STAGE_WINDOW.get() == []  # taken: read from SQLite below, as if the first stage had not run
    assert kept == ready.passage_bm25(query, ids, [None] * len(ids)) and kept is not None and max(kept) > 0
    # A new version of a document the window holds: its passages are the new words'.
    ready.bm25(query, 100)
    ready.upsert([stored(ids[0], "cargo storm cargo storm crew")])
    assert ready.passage_bm25(query, ids[:1], [None]) == ready.passage_bm25(query, [""], ["cargo storm cargo storm crew"]) != kept[:1]
    # Read from the first stage's window, not from SQLite again: rows deleted behind the
    # store's back on its own connection (which leaves its view as it was) are not missed,
    # once; the next call reads SQLite.
    ids = [hit.doc_id for hit in ready.bm25(query, 100)]
    expected = ready.passage_bm25(query, ids, [None] * len(ids))
    ready.bm25(query, 100)
    with ready._snapshot():
        ready._db.execute("DELETE FROM passages")
    assert ready.passage_bm25(query, ids, [None] * len(ids)) == expected
    assert ready.passage_bm25(query, ids, [None] * len(ids)) is None


def test_the_best_passages_of_part_of_the_window_in_another_order_are_the_same(ready: EmbeddedStore, short_search: None) -> None:
    ready.upsert(_many_documents())
    query = "ocean vessels sailors crew wind cargo storm"
    ids = [hit.doc_id for hit in ready.bm25(query, 100)]
    assert _FIRST_STAGE_WINDOW.get()
    asked = ids[::-3]
    from_window = ready.passage_bm25(query, asked, [None] * len(asked))
    assert _FIRST_STAGE_WINDOW.get() == []
    read = ready.passage_bm25(query, asked, [None] * len(asked))  # from SQLite, these texts alone
    assert from_window == pytest.approx(read, rel=1e-6) and from_window is not None and max(from_window) > 0


def test_the_best_passages_take_the_first_stages_words_in_the_thread_the_service_ranks_in(ready: EmbeddedStore, tmp_path: Path, short_search: None) -> None:
    # The service searches in the request's thread and ranks in a pool thread, in a copy of
    # the request's context (`RerankingService.rerank`): the window reaches it there, once,
    # and is gone from both contexts after.
    ready.upsert(_many_documents())
    query = "ocean vessels sailors crew wind cargo storm"
    ids = [hit.doc_id for hit in ready.bm25(query, 100)]
    expected = ready.passage_bm25(query, ids, [None] * len(ids))
    other = EmbeddedStore(tmp_path / "other")
    other.initialise(IndexInfo(EMBEDDING, k=2))
    other.upsert([replace(doc, document=replace(doc.document, id=f"other-{doc.document.id}")) for doc in _many_documents(20, seed=5)])
    other.bm25(query, 10)  # its writes committed: its reads below write nothing
    with ThreadPoolExecutor(1) as pool:
        ready.bm25(query, 100)
        with ready._snapshot():
            ready._db.execute("DELETE FROM passages")  # behind the store's back: only the window has the words
        # Another store's best passages leave this store's window where it is (it holds
        # none of these documents).
        assert pool.submit(contextvars.copy_context().run, other.passage_bm25, query, ids, [None] * len(ids)).result() == [0.0] * len(ids)
        ranked = pool.submit(contextvars.copy_context().run, ready.passage_bm25, query, ids, [None] * len(ids)).result()
        assert ranked == expected
        assert _FIRST_STAGE_WINDOW.get() == []
        assert pool.submit(contextvars.copy_context().run, ready.passage_bm25, query, ids, [None] * len(ids)).result() is None
    other.close()


def test_the_first_stage_searches_the_whole_query_when_the_rest_finds_too_few(
    ready: EmbeddedStore, monkeypatch: pytest.MonkeyPatch, short_search: None
) -> None:
    ready.upsert(_many_documents())
    # "lantern" alone: fewer documents than a window hold it, and a window of the whole
    # query holds documents that only the common terms bring.
    query = "ocean vessels lantern"
    ready.bm25(query, 1)  # the text index committed, so its statistics are read below
    searched = _searches(monkeypatch)
    hits = ready.bm25(query, 100)
    assert len(searched) == 2 and searched[0] and searched[1] is None  # short first, then whole
    whole = _whole_query(ready, query, 100)
    assert [hit.doc_id for hit in hits] == sorted(whole, key=lambda doc_id: (-whole[doc_id], doc_id))
    assert len(hits) == 100
    # So does a store whose documents' words were not kept (indexed before derivation 4).
    query = "ocean vessels sailors crew wind cargo storm"
    with sqlite3.connect(ready.directory / "store.sqlite3") as db:
        db.execute("DELETE FROM passages")
    searched.clear()
    after = ready.bm25(query, 100)
    assert len(searched) == 2 and searched[0] and searched[1] is None
    whole = _whole_query(ready, query, 100)
    assert [hit.doc_id for hit in after] == sorted(whole, key=lambda doc_id: (-whole[doc_id], doc_id))


def test_stems_the_write_path_makes_index_what_the_store_would(tmp_path: Path) -> None:
    texts = {"a": "Connected connections connecting", "b": "generously generous generation", "c": "running runs ran"}
    own, given = EmbeddedStore(tmp_path / "own"), EmbeddedStore(tmp_path / "given")
    for store in (own, given):
        store.initialise(IndexInfo(EMBEDDING, k=2))
    own.upsert([stored(doc_id, text) for doc_id, text in texts.items()])
    assert given.word_stemmer is not None
    with_stems = []
    for doc_id, text in texts.items():
        words = tokenize(text)
        with_stems.append(replace(stored(doc_id, text), content_words=" ".join(words), stemmed_words=" ".join(given.word_stemmer(words))))
    given.upsert(with_stems)
    for query in ("connection", "connected", "generous", "run running", "generation ran"):
        assert scores_of(given, query) == scores_of(own, query) != {}
    own.close()
    given.close()


def test_stem_words_is_the_stemmer_filter_word_by_word() -> None:
    import tantivy

    analyzer = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).filter(tantivy.Filter.stemmer("english")).build()
    words = tokenize("Generously generous connections naïve cafés running runs ran summaries summary")
    assert stem_words(words) == [analyzer.analyze(word)[0] for word in words]
    assert stem_words(words + words[:2]) == stem_words(words) + stem_words(words[:2])  # remembered alike
    assert stem_words([]) == []
    for bad in (["two words"], [""], ["two words", " "]):
        with pytest.raises(ValueError):
            stem_words(bad)


def test_the_title_is_searched_with_the_text(ready: EmbeddedStore) -> None:
    ready.upsert([stored("a", "bread flour", title="Sailing ships"), stored("b", "bread yeast")])
    assert [hit.doc_id for hit in ready.bm25("sailing", 10)] == ["a"]


def test_a_long_query_reads_only_its_first_content_words(ready: EmbeddedStore) -> None:
    ready.upsert([stored("a", "ships and sails"), stored("b", "bread and flour")])
    head = ["ships"] * MAX_QUERY_TERMS
    huge = " ".join(head + ["bread"] * 200_000)  # about 1.2 MB
    started = time.perf_counter()
    hits = ready.bm25(huge, 10)
    assert time.perf_counter() - started < 5
    assert [hit.doc_id for hit in hits] == ["a"]  # "bread" lies past the limit
    assert hits[0].bm25_score == pytest.approx(ready.bm25(" ".join(head), 10)[0].bm25_score)


def test_filters_restrict_the_candidates_before_the_top_n(ready: EmbeddedStore) -> None:
    docs = [stored(f"d{i}", "ships " * (10 - i) + "sea") for i in range(10)]
    docs = [StoredDocument(Document(d.document.id, "", d.document.text, {"year": 2000 + i}), d.doc_topics, d.content_hash, 5, 0) for i, d in enumerate(docs)]
    ready.upsert(docs)
    assert [hit.doc_id for hit in ready.bm25("ships", 2)] == ["d0", "d1"]
    assert [hit.doc_id for hit in ready.bm25("ships", 2, [Filter("year", "gte", 2007)])] == ["d7", "d8"]
    assert ready.bm25("ships", 2, [Filter("year", "gt", 2100)]) == []


@pytest.mark.parametrize(
    ("kind", "value", "read"),
    [
        ("number", " 2010 ", 2010), ("number", "-3", -3), ("number", "2010.5", 2010.5), ("number", "1e3", 1000.0),
        ("number", 7, 7), ("text", 2010, "2010"), ("text", 1.5, "1.5"), ("text", True, "true"), ("text", "x", "x"),
        ("boolean", "true", True), ("boolean", "false", False), ("boolean", False, False),
        (None, "2010", "2010"), (None, 2010, 2010),  # values of several kinds: as given
    ],
)  # fmt: skip
def test_a_filter_value_is_read_as_the_field_holds_it(kind: str | None, value: str | int | float | bool, read: object) -> None:
    found = filter_for_field(Filter("f", "eq", value), kind).value
    assert found == read and type(found) is type(read)


@pytest.mark.parametrize(
    ("kind", "op", "value"),
    [("number", "gte", "abc"), ("number", "eq", "nan"), ("number", "lt", "1e999"), ("number", "eq", "0x10"), ("number", "eq", True),
     ("boolean", "eq", 1), ("boolean", "eq", "yes"), ("boolean", "gte", True)],
)  # fmt: skip
def test_a_filter_value_the_field_cannot_hold_says_so(kind: str, op: str, value: str | int | bool) -> None:
    with pytest.raises(InputError, match=r"^cannot filter 'f' \("):
        filter_for_field(Filter("f", op, value), kind)


def test_an_embedded_filter_reads_array_items_and_skips_nulls(ready: EmbeddedStore) -> None:
    """An array matches by any item (OpenSearch's rule); nulls and empty arrays hold no
    value, so they neither match nor make a field of numbers one of several kinds."""
    values = {"a": [3, 9], "b": 5, "c": None, "d": [], "e": [None, 12]}
    ready.upsert([
        StoredDocument(Document(doc_id, "", "ships sea", {"n": value}), stored(doc_id, "ships").doc_topics, f"h{doc_id}", 5, 0)
        for doc_id, value in values.items()
    ])  # fmt: skip
    found = lambda op, value: sorted(hit.doc_id for hit in ready.bm25("ships", 10, [Filter("n", op, value)]))  # noqa: E731
    assert found("gte", "9") == ["a", "e"] and found("eq", 3) == ["a"] and found("lt", "6") == ["a", "b"]
    with pytest.raises(InputError, match="the field holds numbers"):
        found("eq", "many")


def test_a_filter_finds_any_field_name(ready: EmbeddedStore) -> None:
    """A field name with a quote, a dot or a letter beyond ASCII (which the store's JSON
    holds \\u-escaped): a JSON path could not name them (schemathesis found a 500)."""
    from reranker.errors import UnknownFieldError
    from reranker.types import Filter

    names = ['année', 'say "hi"', "a.b", "x\\y"]
    ready.upsert([
        StoredDocument(Document(f"d{i}", "", "ships sea", {name: i}), stored(f"d{i}", "ships").doc_topics, f"h{i}", 5, 0)
        for i, name in enumerate(names)
    ])  # fmt: skip
    for i, name in enumerate(names):
        assert [hit.doc_id for hit in ready.bm25("ships", 10, [Filter(name, "eq", i)])] == [f"d{i}"], name
    with pytest.raises(UnknownFieldError, match="cannot filter on 'colour'; filterable fields: a.b, année"):
        ready.bm25("ships", 10, [Filter("colour", "eq", 1)])
    # Whatever the query: one of stop words only (no terms to search) too.
    with pytest.raises(UnknownFieldError, match="cannot filter on 'colour'"):
        ready.bm25("the of a", 10, [Filter("colour", "eq", 1)])


# --- older stores ----------------------------------------------------------------------


_SCHEMA_1 = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE docs (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
        body TEXT NOT NULL, fields TEXT NOT NULL, content_hash TEXT NOT NULL, n_tokens INTEGER NOT NULL,
        n_oov INTEGER NOT NULL, k INTEGER NOT NULL, topics BLOB NOT NULL, importances BLOB NOT NULL);
    INSERT INTO docs(id, title, body, fields, content_hash, n_tokens, n_oov, k, topics, importances)
        VALUES ('a', '', 'ships', '{}', 'h', 1, 0, 0, x'', x'');
"""
# Schema 2 added Doc2Vec vectors; both kept BM25 in an FTS5 table beside `docs`.
_SCHEMA_2 = _SCHEMA_1.replace("importances BLOB NOT NULL)", "importances BLOB NOT NULL, doc_vector BLOB, doc_vector_model TEXT)") + """
    CREATE VIRTUAL TABLE docs_fts USING fts5(title, body, content='docs', content_rowid='rowid');
    INSERT INTO meta VALUES ('schema_version', '2');
"""


@pytest.mark.parametrize("schema", [_SCHEMA_1, _SCHEMA_2], ids=["schema 1", "schema 2"])
def test_a_store_from_the_fts5_version_asks_for_a_rebuild_and_the_rebuild_works(tmp_path: Path, schema: str) -> None:
    directory = tmp_path / "old"
    directory.mkdir()
    db = sqlite3.connect(directory / "store.sqlite3")
    db.executescript(schema)
    db.close()
    old = EmbeddedStore(directory)
    try:
        for read in (old.index_info, old.count, lambda: old.bm25("ships", 10), lambda: old.doc_vectors(["a"])):
            with pytest.raises(IndexMismatchError, match=r"older version .*; rebuild it: reranker index --rebuild CORPUS$"):
                read()
        with pytest.raises(IndexMismatchError, match="rebuild"):
            old.initialise(IndexInfo(EMBEDDING, k=2))
        old.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
        old.upsert([stored("a", "ships")])
        old.publish()
        assert [hit.doc_id for hit in old.bm25("ships", 10)] == ["a"]
    finally:
        old.close()


# Schema 3 (BM25 in tantivy): one row per document, its id unique; the text index's
# entries hold the row id.
_SCHEMA_3 = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE docs (rowid INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
        body TEXT NOT NULL, fields TEXT NOT NULL, content_hash TEXT NOT NULL, n_tokens INTEGER NOT NULL,
        n_oov INTEGER NOT NULL, k INTEGER NOT NULL, topics BLOB NOT NULL, importances BLOB NOT NULL, doc_vector BLOB,
        doc_vector_model TEXT, corrected_k INTEGER, corrected_topics BLOB, corrected_importances BLOB, backgrounds BLOB);
"""


def test_a_store_of_schema_3_is_read_as_it_is_and_upgraded_by_the_next_index_run(tmp_path: Path) -> None:
    directory = tmp_path / "old"
    directory.mkdir()
    db = sqlite3.connect(directory / "store.sqlite3")
    db.executescript(_SCHEMA_3)
    # "b" was replaced once under schema 3 (row 2 deleted, row 3 written), and the
    # document of row 4 deleted: the next row id is 5.
    for rowid, item in [(1, stored("a", "ships old")), (3, stored("b", "ships old"))]:
        topics = item.doc_topics
        db.execute(
            "INSERT INTO docs(rowid, id, title, body, fields, content_hash, n_tokens, n_oov, k, topics, importances) "
            "VALUES (?, ?, '', ?, '{}', ?, 5, 0, 2, ?, ?)",
            (rowid, item.document.id, item.document.text, item.content_hash, topics.topics.tobytes(), topics.importances.tobytes()),
        )
    db.execute("UPDATE sqlite_sequence SET seq = 4 WHERE name = 'docs'")
    meta = {"schema_version": "3", "embedding": json.dumps(EMBEDDING.__dict__), "k": "2", "text_rowid": "3"}
    db.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
    db.commit()
    db.close()
    text = TextIndex(directory / "text")
    text.replace([(1, "a", "ships old", "ship old"), (3, "b", "ships old", "ship old")])
    text.close_writer()

    reader = EmbeddedStore(directory)
    writer = EmbeddedStore(directory)
    try:
        assert visible(reader, "ships") == {"a", "b"} and reader.topics(["a", "b"]).missing == ()
        writer.initialise(IndexInfo(EMBEDDING, k=2))  # the upgrade, while `reader` is open
        assert visible(reader, "ships") == {"a", "b"} and reader.count() == 2
        writer.upsert([stored("b", "ships new", seed=1)])
        assert reader.documents(["b"])["b"].text == "ships old"  # not committed yet
        writer.publish()
        assert visible(reader, "ships") == {"a", "b"} and visible(reader, "new") == {"b"} and visible(reader, "old") == {"a"}
        assert reader.documents(["b"])["b"].text == "ships new" and reader.count() == 2
        upgraded = sqlite3.connect(directory / "store.sqlite3")
        # b's new version was written as row 5 (row 4 is not given again) and took over
        # b's row id, 3, when it became visible.
        assert upgraded.execute("SELECT rowid, id, body FROM docs ORDER BY rowid").fetchall() == [(1, "a", "ships old"), (3, "b", "ships new")]
        assert upgraded.execute("SELECT seq FROM sqlite_sequence WHERE name = 'docs'").fetchone() == (5,)
        assert upgraded.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    finally:
        writer.close()
        reader.close()


# --- crashes and concurrent processes ---------------------------------------------------

_WRITER = """
import os, sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from test_store import EMBEDDING, stored
from reranker.store import IndexInfo
from reranker.store import embedded
from reranker.store.embedded import EmbeddedStore
{setup}
store = EmbeddedStore(embedded.Path({directory!r}))
store.initialise(IndexInfo(EMBEDDING, k=2))
{body}
"""


def run_writer(directory: Path, body: str, setup: str = "", wait: bool = True) -> subprocess.Popen[bytes]:
    script = _WRITER.format(tests=str(Path(__file__).parent), directory=str(directory), setup=setup, body=textwrap.dedent(body))
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if wait:
        process.wait(timeout=60)
    return process


def visible(store: EmbeddedStore, query: str) -> set[str]:
    return {hit.doc_id for hit in store.bm25(query, 100)}


CRASH_POINTS = ["after the topics, before the text index", "after the text index, before the watermark"]


def killed_mid_run(directory: Path, crash_at: str) -> None:
    """A run writes "kept" and "replaced"; the next one, adding "new" and replacing
    "replaced", dies at `crash_at`: os._exit skips every clean-up, as a kill would."""
    run_writer(directory, """
        store.upsert([stored("kept", "ships at sea"), stored("replaced", "old ships text")])
        store.publish()
    """)
    if crash_at.startswith("after the topics"):
        crash = "embedded.TextIndex.replace = lambda self, *args, **kwargs: os._exit(3)"
    else:
        crash = "embedded.EmbeddedStore._move_watermark = lambda self, top: os._exit(3)"
    died = run_writer(directory, crash + """
store.upsert([stored("new", "new ships arrive", seed=1), stored("replaced", "fresh bread text", seed=2)])
store.publish()
    """)
    assert died.returncode == 3, died.stderr.read() if died.stderr else ""


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_crash_between_the_two_writes_leaves_them_agreeing(tmp_path: Path, crash_at: str) -> None:
    directory = tmp_path / "store"
    killed_mid_run(directory, crash_at)

    reader = EmbeddedStore(directory)
    try:
        # Readers see the last complete state: the replaced document's old version, and
        # not the new document; BM25, topics and texts agree.
        found = visible(reader, "ships") | visible(reader, "bread") | visible(reader, "text")
        assert found == {"kept", "replaced"}
        assert reader.count() == 2
        assert reader.topics(["kept", "new", "replaced"]).missing == ("new",)
        documents = reader.documents(["kept", "new", "replaced"])
        assert set(documents) == {"kept", "replaced"} and documents["replaced"].text == "old ships text"
        if crash_at.startswith("after the text index"):
            # The text index committed the new words: they find the old version until
            # the next run makes the new one visible.
            assert visible(reader, "bread") == {"replaced"} and visible(reader, "old") == set()
        else:
            assert visible(reader, "bread") == set() and visible(reader, "old") == {"replaced"}
        in_2018 = [Filter("year", "eq", 2018)]
        assert {hit.doc_id for hit in reader.bm25("ships text bread", 10, in_2018)} == {"kept", "replaced"}
        # The next indexing run finishes the interrupted one, without duplicates.
        reader.initialise(IndexInfo(EMBEDDING, k=2))
        assert visible(reader, "ships") == {"kept", "new"}
        assert visible(reader, "bread") == {"replaced"} and visible(reader, "old") == set()
        assert reader.count() == 3 and reader._text.num_docs() == 3
        assert reader.topics(["kept", "new", "replaced"]).missing == ()
        assert reader.documents(["replaced"])["replaced"].text == "fresh bread text"
        # A filter names documents by row id: a replaced document's new version passes.
        assert {hit.doc_id for hit in reader.bm25("ships bread", 10, in_2018)} == {"kept", "new", "replaced"}
        assert reader.bm25("bread", 10, [Filter("year", "eq", 1999)]) == []
        assert sqlite3.connect(directory / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0] == 3
    finally:
        reader.close()


@pytest.mark.parametrize("crash_at", ["while writing", "after the text index's commit", "after the swap"])
def test_a_rebuild_killed_at_any_step_leaves_one_whole_index(tmp_path: Path, crash_at: str) -> None:
    """A rebuild is written beside the index readers see and swapped in whole: killed
    before the swap, the old index is intact and the next --rebuild resumes (or a run
    without --rebuild drops it); killed after, the new one is."""
    directory = tmp_path / "store"
    run_writer(directory, """
        store.upsert([stored("a", "ships old"), stored("b", "ships old")])
        store.publish()
    """)
    crash = {
        "while writing": "embedded.EmbeddedStore.publish = lambda self: os._exit(3)",
        "after the text index's commit": "embedded.EmbeddedStore._swap_in = lambda self, build: os._exit(3)",
        "after the swap": "embedded.EmbeddedStore._purge_text = lambda self, floor: os._exit(3)",
    }[crash_at]
    died = run_writer(directory, crash + """
store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
store.upsert([stored("a", "ships new", seed=1), stored("c", "ships new", seed=2)])
store.publish()
    """)
    assert died.returncode == 3, died.stderr.read() if died.stderr else ""

    def check(directory: Path, ids: set[str], text: str) -> EmbeddedStore:
        store = EmbeddedStore(directory)
        assert visible(store, "ships") == ids and store.count() == len(ids)
        assert store.topics(sorted(ids)).missing == () and store.documents(["a"])["a"].text == text
        return store

    if crash_at == "after the swap":
        check(directory, {"a", "c"}, "ships new").close()
    else:
        check(directory, {"a", "b"}, "ships old").close()
        dropped = tmp_path / "dropped"
        shutil.copytree(directory, dropped)
        store = check(dropped, {"a", "b"}, "ships old")
        store.initialise(IndexInfo(EMBEDDING, k=2))  # no --rebuild: the rebuild is dropped
        store.close()
        store = check(dropped, {"a", "b"}, "ships old")
        assert store._text.num_docs() == 2
        assert sqlite3.connect(dropped / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0] == 2
        store.close()
        # --rebuild resumes: what the killed run wrote is there, and it is swapped in.
        store = EmbeddedStore(directory)
        store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
        assert store.content_hashes(["a", "b", "c"]).keys() == {"a", "c"}
        store.publish()
        store.close()
    store = check(directory, {"a", "c"}, "ships new")
    try:
        store.initialise(IndexInfo(EMBEDDING, k=2))
        assert store._text.num_docs() == 2 and visible(store, "ships") == {"a", "c"}
        assert sqlite3.connect(directory / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0] == 2
    finally:
        store.close()


def test_a_reader_that_began_before_a_rebuild_was_swapped_in_still_finds_the_old_index(tmp_path: Path) -> None:
    """The swap drops the old rows at once, their text-index entries a moment later: a
    read that began before the swap must still find them in the text index, however
    late it searches. A writer process rebuilds and publishes while this process holds a
    read open (three seconds, longer than a purge takes), then searches in it."""
    directory = tmp_path / "store"
    run_writer(directory, """
        store.upsert([stored("a", "ships old"), stored("b", "ships old")])
        store.publish()
    """)
    reader, watcher = EmbeddedStore(directory), EmbeddedStore(directory)
    try:
        with reader._snapshot():
            assert visible(reader, "ships") == {"a", "b"}
            writer = run_writer(directory, """
                store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
                store.upsert([stored("c", "ships new", seed=1)])
                store.publish()
            """, wait=False)
            deadline = time.monotonic() + 30
            while watcher.documents(["c"]) == {} and time.monotonic() < deadline:  # the swap
                time.sleep(0.05)
            assert watcher.documents(["c"]) != {}, writer.stderr.read() if writer.stderr else ""
            time.sleep(3)
            reader._text.reload()  # as another thread's read would
            assert visible(reader, "ships") == {"a", "b"}
        writer.wait(timeout=60)
        assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""
        assert visible(reader, "ships") == {"c"} and reader._text.num_docs() == 1
    finally:
        reader.close()
        watcher.close()


def test_readers_in_another_process_see_a_growing_index_that_always_agrees(tmp_path: Path) -> None:
    """`reranker index` appending (a writer process) while this process searches."""
    directory = tmp_path / "store"
    writer = run_writer(directory, """
        for batch in range(40):
            store.upsert([stored(f"d{batch}-{i}", "ships and sails " * (i + 1)) for i in range(5)])
            time.sleep(0.02)
        store.publish()
    """, setup="embedded._COMMIT_DOCS = 10", wait=False)
    reader = EmbeddedStore(directory)
    try:
        seen: list[int] = []
        while True:
            finished = writer.poll() is not None
            ids = [hit.doc_id for hit in reader.bm25("ships", 1000)]
            assert len(ids) == len(set(ids))
            assert reader.topics(ids).missing == ()
            seen.append(len(ids))
            if finished:
                break
        assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""
        assert seen == sorted(seen) and seen[-1] == 200 and len(set(seen)) > 2
    finally:
        reader.close()


def second_write(store: EmbeddedStore, write: str, tmp_path: Path) -> None:
    if write == "initialise":
        store.initialise(IndexInfo(EMBEDDING, k=2))
    elif write == "compact":
        store.compact()
    else:  # refused before it trains: a refusal after minutes of training would lose them
        from reranker.doc2vec import Doc2VecParams, train_for_store

        def never_read() -> Iterator[Document]:
            raise AssertionError("trained while another process writes")
            yield

        train_for_store(store, never_read(), Doc2VecParams(dim=8, epochs=1, min_count=1), tmp_path / "doc2vec")


@pytest.mark.parametrize("write", ["initialise", "compact", "train doc2vec"])
def test_a_second_writer_is_refused_while_one_is_writing(tmp_path: Path, write: str) -> None:
    directory = tmp_path / "store"
    blocker = run_writer(directory, """
        store.upsert([stored("a", "ships")])
        store._commit_pending()
        print("writing", flush=True)
        time.sleep(60)
    """, wait=False)
    try:
        assert blocker.stdout is not None and blocker.stdout.readline() == b"writing\n"
        second = EmbeddedStore(directory)
        try:
            # One line naming the holder, as the OpenSearch store's claim says it (test_opensearch.py).
            with pytest.raises(StoreError, match=(
                rf"^the index in {re.escape(str(directory))} is being written by `reranker index` on {re.escape(socket.gethostname())} "
                rf"\(pid {blocker.pid}, started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\); try again when it has ended \(a run that was killed "
                r"holds nothing: tantivy's lock goes with its process\)$"
            )):
                second_write(second, write, tmp_path)
            assert visible(second, "ships") == {"a"}
        finally:
            second.close()
    finally:
        blocker.kill()
        blocker.wait()


# --- compacting the text index ------------------------------------------------------------

COMPACT_QUERIES = ("ships and sails", "bread yeast ships", "sea")
PASSAGES = ["ships and sails at sea", "baking bread with yeast", "sails of old ships", "the sea and the bread of sailors", "ships"]


def written_in_runs(directory: Path, runs: list[list[StoredDocument]]) -> None:
    """One `reranker index` run per list: each run's commit writes a segment of its own."""
    for documents in runs:
        store = EmbeddedStore(directory)
        store.initialise(IndexInfo(EMBEDDING, k=2))
        store.upsert(documents)
        store.publish()
        store.close()


def answers(store: EmbeddedStore) -> dict[str, list[tuple[str, float]]]:
    return {query: [(hit.doc_id, hit.bm25_score) for hit in store.bm25(query, 100)] for query in COMPACT_QUERIES}


def test_compact_writes_one_segment_and_every_answer_stays(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    written_in_runs(directory, [[stored(f"r{run}-{i}", text) for i, text in enumerate(PASSAGES)] for run in range(3)])
    reader = EmbeddedStore(directory)  # a service's store, open across the compaction
    try:
        before = answers(reader)
        assert TextIndex(directory / "text").segments() == 3 and len(before["ships and sails"]) == 9
        writer = EmbeddedStore(directory)
        assert writer.compact() == CompactResult(documents=15, segments_before=3, segments_after=1)
        writer.close()
        assert answers(reader) == before and reader.count() == 15
        assert reader._text.segments() == 1  # it searches the new index, not the old one's files
        assert reader.topics(["r0-0", "r2-4"]).missing == ()
    finally:
        reader.close()


def test_readers_in_another_process_find_every_document_once_across_compactions(tmp_path: Path) -> None:
    """A writer process compacts again and again (each commit replaces every segment and
    deletes the old segments' files) while this process searches in a store open
    throughout and in stores opened meanwhile, as a service's new workers would."""
    directory = tmp_path / "store"
    written_in_runs(directory, [[stored(f"r{run}-{i}", (text + " ") * 20) for i, text in enumerate(PASSAGES)] for run in range(40)])
    writer = run_writer(directory, f"""
        store.close()
        for _ in range(10):
            compacting = EmbeddedStore(embedded.Path({str(directory)!r}))
            compacting.compact()
            compacting.close()
    """, wait=False)
    kept = EmbeddedStore(directory)
    searches = 0
    try:
        while True:
            finished = writer.poll() is not None
            fresh = EmbeddedStore(directory)
            try:
                for reader in (kept, fresh):
                    ids = [hit.doc_id for hit in reader.bm25("ships sea bread", 1000)]
                    assert len(ids) == len(set(ids)) == reader.count() == 200
                    assert reader.topics(ids).missing == ()
                    searches += 1
            finally:
                fresh.close()
            if finished:
                break
        assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""
        assert searches > 2 and kept._text.segments() == 1
    finally:
        kept.close()


def test_compact_leaves_out_replaced_versions_as_a_fresh_index_would(tmp_path: Path) -> None:
    # A replaced version is deleted in its segment but still counted in BM25's statistics
    # until its segment is written again, as in Lucene: compacting writes it out.
    first = [stored(f"d{i}", text) for i, text in enumerate(PASSAGES)]
    later = [stored("d0", "bread and bread and yeast"), stored("d5", "sea sails")]
    written_in_runs(tmp_path / "compacted", [first, later])
    written_in_runs(tmp_path / "fresh", [[*later[:1], *first[1:], later[1]]])
    compacted, fresh = EmbeddedStore(tmp_path / "compacted"), EmbeddedStore(tmp_path / "fresh")
    try:
        assert compacted.compact().documents == 6
        expected = answers(fresh)
        for query, found in answers(compacted).items():
            assert [doc_id for doc_id, _ in found] == [doc_id for doc_id, _ in expected[query]]
            assert [score for _, score in found] == pytest.approx([score for _, score in expected[query]], rel=1e-6)
    finally:
        compacted.close()
        fresh.close()


def test_an_interrupted_compact_leaves_the_index_as_it_was(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    written_in_runs(directory, [[stored(f"r{run}-{i}", text) for i, text in enumerate(PASSAGES)] for run in range(2)])
    store = EmbeddedStore(directory)
    before = answers(store)
    written = 0

    def interrupt(count: int) -> None:
        nonlocal written
        written += count
        if written == 4:
            raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            store.compact(progress=interrupt)
        assert answers(store) == before and TextIndex(directory / "text").segments() == 2
        assert store.compact().segments_after == 1  # the writer was released
        assert answers(store) == before
    finally:
        store.close()


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_compact_after_a_killed_index_run_completes_it_first(tmp_path: Path, crash_at: str) -> None:
    """Rows above the watermark (a run killed mid-way) are made visible, as the next index
    run would, before the index is written anew: each document once, in its new version,
    in a reader that was open throughout."""
    directory = tmp_path / "store"
    killed_mid_run(directory, crash_at)
    reader, writer = EmbeddedStore(directory), EmbeddedStore(directory)
    try:
        assert writer.compact() == CompactResult(documents=3, segments_before=2, segments_after=1)
        writer.close()
        assert visible(reader, "ships") == {"kept", "new"} and visible(reader, "bread") == {"replaced"}
        assert visible(reader, "old") == set() and reader.count() == 3 and reader._text.num_docs() == 3
        assert reader.documents(["replaced"])["replaced"].text == "fresh bread text"
        assert sqlite3.connect(directory / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0] == 3
    finally:
        reader.close()


def test_an_interrupted_run_is_not_completed_with_another_stop_list(tmp_path: Path) -> None:
    """The next run completes a killed one by reading its rows again (`_recover`): with
    another stop list it is refused before that, and the store is left as it was; a
    rebuild with the new list drops the rows no reader saw and replaces the index."""
    directory = tmp_path / "store"
    killed_mid_run(directory, CRASH_POINTS[0])
    store = EmbeddedStore(directory, NO_SHIPS)
    try:
        def state() -> tuple[object, ...]:
            rows = sqlite3.connect(directory / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0]
            return rows, store._meta(), store._text.num_docs(), visible(store, "sea text bread arrive")

        before = state()
        assert before[0] == 4 and before[3] == {"kept", "replaced"}
        for attempt in (lambda: store.initialise(IndexInfo(EMBEDDING, k=2)), store.compact):
            with pytest.raises(IndexMismatchError, match=r"built with the bundled stop list .* not a stop list of"):
                attempt()
            assert state() == before
        store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
        assert visible(store, "sea text") == {"kept", "replaced"}  # readers see the old index until the swap
        store.upsert([stored("kept", "ships at sea"), stored("fresh", "fresh bread text")])
        store.publish()
        assert visible(store, "ships") == set() and visible(store, "sea bread") == {"kept", "fresh"}
        assert store.count() == 2 and store.index_info().stopwords == stop_list_info(NO_SHIPS)  # type: ignore[union-attr]
    finally:
        store.close()


def test_compact_beside_an_interrupted_rebuild_keeps_both(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    written_in_runs(directory, [[stored("a", "ships old"), stored("b", "sails old")]])
    rebuild = EmbeddedStore(directory)
    rebuild.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
    rebuild.upsert([stored("x", "ships new"), stored("y", "sails new")])
    rebuild.close()  # interrupted: its rows stay for the next --rebuild
    store = EmbeddedStore(directory)
    try:
        assert store.compact().documents == 2
        assert visible(store, "ships sails") == {"a", "b"}
        store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)  # resumed, then finished
        store.upsert([stored("z", "ships and sails new")])
        store.publish()
        assert visible(store, "ships sails") == {"x", "y", "z"} and store.count() == 3
    finally:
        store.close()


_COMPACT_ON_A_FULL_DISK = """
set -u
text={data}/index/text
# The text index on a file system of its own, filled to 1 MB free: less than its new copy.
mv $text {tmp}/moved && mkdir $text
mount -t tmpfs -o size=64m none $text || exit 99
cp -a {tmp}/moved/. $text/
{python} -c "import os; s = os.statvfs('$text'); open('$text/filler', 'wb').write(b'x' * (s.f_bavail * s.f_frsize - 1_000_000))"
{python} -m reranker --data-dir {data} compact --no-progress > {tmp}/full.out 2> {tmp}/full.err
echo $? > {tmp}/full.rc
{python} -c "{check}" > {tmp}/full.json
rm $text/filler
{python} -m reranker --data-dir {data} compact --no-progress > {tmp}/after.out 2> {tmp}/after.err
echo $? > {tmp}/after.rc
{python} -c "{check}" > {tmp}/after.json
"""


def test_compact_on_a_full_disk_is_a_one_line_error_and_the_index_stays(tmp_path: Path) -> None:
    """The new copy is written beside the old one, which stays until the commit: with less
    room than it needs, one line, exit 1, every document still found once; with room
    again, the same command compacts."""
    if shutil.which("unshare") is None or subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m none {tmp_path}"], capture_output=True
    ).returncode != 0:
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
    # Words no other text holds: an index of 10 MB from 1,000 documents.
    words = ["".join(word) for word in np.random.default_rng(7).choice(np.array(list("abcdefghijklmnopqrstuvwxyz")), (400_000, 8))]
    texts = ["ships " + " ".join(words[n * 400:(n + 1) * 400]) for n in range(1_000)]
    written_in_runs(tmp_path / "data" / "index", [[stored(f"r{run}-{i}", texts[run * 250 + i]) for i in range(250)] for run in range(4)])
    check = (
        "import json; from pathlib import Path; from reranker.store.embedded import EmbeddedStore; "
        f"s = EmbeddedStore(Path({str(tmp_path / 'data' / 'index')!r})); ids = [h.doc_id for h in s.bm25('ships', 2000)]; "
        "print(json.dumps({'ids': len(ids), 'distinct': len(set(ids)), 'count': s.count(), 'segments': s._text.segments()}))"
    )
    script = _COMPACT_ON_A_FULL_DISK.format(data=tmp_path / "data", tmp=tmp_path, python=sys.executable, check=check)
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert done.returncode == 0, (done.stdout, done.stderr)
    errors = (tmp_path / "full.err").read_text()
    assert (tmp_path / "full.rc").read_text().strip() == "1", errors
    assert errors.startswith("reranker: error: cannot write to the text index") and errors.count("\n") == 1, errors
    assert "the disk is full" in errors
    assert json.loads((tmp_path / "full.json").read_text()) == {"ids": 1000, "distinct": 1000, "count": 1000, "segments": 4}
    assert (tmp_path / "after.rc").read_text().strip() == "0", (tmp_path / "after.err").read_text()
    assert (tmp_path / "after.out").read_text().endswith("4 segments before, 1 now\n")
    assert json.loads((tmp_path / "after.json").read_text()) == {"ids": 1000, "distinct": 1000, "count": 1000, "segments": 1}


def test_compact_needs_an_index(tmp_path: Path) -> None:
    # And the writer's lock: test_a_second_writer_is_refused_while_one_is_writing.
    empty = EmbeddedStore(tmp_path / "empty")
    with pytest.raises(StoreError, match=r"nothing to compact: no index in .* yet \(run `reranker index CORPUS` first\)"):
        empty.compact()
    empty.close()


def test_bm25_of_texts_is_lucenes_formula() -> None:
    """One term by hand: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf part (k1 + 1) f /
    (f + k1 (1 - b + b |d| / avgdl)); a repeated query term counts twice; absent terms 0."""
    from reranker.store.bm25 import bm25_of_texts

    idf = math.log(1 + (10 - 2 + 0.5) / (2 + 0.5))
    tf = 2.2 * 3 / (3 + 1.2 * (1 - 0.75 + 0.75 * 50 / 100))
    scores = bm25_of_texts([2, 1], [2, 10], 10, 100.0, [[3, 0], [0, 0]], [50, 80])
    assert scores.tolist() == pytest.approx([2 * idf * tf, 0.0])


def test_the_byte_bounded_cache_evicts_the_least_recently_used_by_size() -> None:
    cache: LruCache[str, np.ndarray] = LruCache(1000, lambda value: value.nbytes)
    for key in "abc":
        cache.put(key, np.zeros(40, np.float64))  # 320 bytes each
    assert (len(cache), cache.bytes) == (3, 960)
    assert cache.get("a") is not None  # now the most recently used: "b" is next out
    cache.put("d", np.zeros(40, np.float64))
    assert cache.get("b") is None and all(cache.get(key) is not None for key in "acd")
    assert cache.bytes == 960
    kept = cache.get("a")
    cache.put("a", np.ones(40, np.float64))  # the same key again keeps the first value
    assert cache.get("a") is kept
    cache.put("huge", np.zeros(200, np.float64))  # 1,600 bytes: more than the whole cache, not kept
    assert cache.get("huge") is None and len(cache) == 3
    cache.put("big", np.zeros(100, np.float64))  # 800 bytes: all three older entries make room for it
    assert cache.get("big") is not None and (len(cache), cache.bytes) == (1, 800)


def test_a_texts_content_key_is_its_sha256_taken_once_per_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caches of sent texts (topics, word ids, terms) key a text by its SHA-256, which
    a request reads several times: it is computed once per text object. The same content in
    another object (the next request's) gets the same key."""
    taken: list[bytes] = []

    def sha256(data: bytes) -> "hashlib._Hash":
        taken.append(data)
        return hashlib.sha256(data)

    monkeypatch.setattr(reranker.store, "_content_keys", reranker.store._content_key_cache())
    monkeypatch.setattr(reranker.store, "hashlib", SimpleNamespace(sha256=sha256))
    text = "Hidden topics of a long paper, \u00e9t\u00e9 \ud800 " * 3  # a lone surrogate too: the routes refuse one, the library not
    expected = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    assert [content_key(text), content_key(text), content_key(text)] == [expected] * 3
    assert len(taken) == 1
    again = "".join(reversed(list(reversed(text))))  # the same content, another object
    assert again is not text and content_key(again) == expected
    other = text + "!"
    assert content_key(other) == hashlib.sha256(other.encode("utf-8", "surrogatepass")).hexdigest()
    assert content_key(other) == content_key(other) and len(taken) == 3


def test_a_texts_content_key_is_never_another_texts() -> None:
    """The keys are kept by the text object's id, which CPython gives a new object as soon as
    the old one is freed: the entry keeps its text alive, so no live text can have its id."""
    for number in range(50):
        text = f"a short text, number {number:03d} " * 4
        content_key(text)
        del text
        other = f"another text, number {number:03d} " * 4  # as long: likely where the first one lay
        assert content_key(other) == hashlib.sha256(other.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_rebuild_with_another_stop_list_after_a_killed_run_leaves_entries_and_rows_agreeing(tmp_path: Path, crash_at: str) -> None:
    """A run killed after its text-index commit leaves entries of rows no reader saw (the
    new document's, and the replaced one's new words under the visible row id). A rebuild
    with another list drops those rows: whether it is published or dropped in turn by a
    run with the index's own list, the text index must hold what the rows say."""
    directory = tmp_path / "store"
    killed_mid_run(directory, crash_at)
    rebuild = EmbeddedStore(directory, NO_SHIPS)
    rebuild.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
    rebuild.upsert([stored("kept", "ships at sea")])
    rebuild.close()  # interrupted: a plain run with the index's list drops it
    store = EmbeddedStore(directory)
    try:
        store.initialise(IndexInfo(EMBEDDING, k=2))
        store.publish()
        assert store.documents(["replaced"])["replaced"].text in ("old ships text", "fresh bread text")
        text = store.documents(["replaced"])["replaced"].text
        assert visible(store, "old" if text.startswith("old") else "bread") == {"replaced"}
        assert visible(store, "bread" if text.startswith("old") else "old") == set()
        assert store._text.num_docs() == store.count()
    finally:
        store.close()
    published = EmbeddedStore(directory, NO_SHIPS)
    try:
        killed_mid_run(tmp_path / "again", crash_at)
        published.close()
        published = EmbeddedStore(tmp_path / "again", NO_SHIPS)
        published.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
        published.upsert([stored("kept", "ships at sea")])
        published.publish()
        assert published.count() == 1 and published._text.num_docs() == 1
        assert visible(published, "arrive bread text old") == set()
    finally:
        published.close()
