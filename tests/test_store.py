"""The embedded store: real SQLite FTS5 on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reranker.errors import IndexMismatchError, StoreError
from reranker.store import IndexInfo
from reranker.store.embedded import EmbeddedStore
from reranker.types import DocTopics, Document, EmbeddingInfo, StoredDocument

EMBEDDING = EmbeddingInfo(name="test", dim=4, checksum="c" * 64)


def stored(doc_id: str, text: str, k: int = 2, seed: int = 0, title: str = "") -> StoredDocument:
    rng = np.random.default_rng(seed)
    topics = np.linalg.qr(rng.standard_normal((4, k)))[0].T.astype(np.float32)
    importances = np.full(k, 1.0 / k, dtype=np.float32)
    return StoredDocument(Document(doc_id, title, text, {"year": 2018}), DocTopics(topics, importances), f"h-{doc_id}-{text}", 5, 0)


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
    assert ready.bm25('quotes " and * stars OR NEAR(', 10) == []  # FTS5 syntax is escaped


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


def test_the_store_persists_on_disk(tmp_path: Path) -> None:
    first = EmbeddedStore(tmp_path / "s")
    first.initialise(IndexInfo(EMBEDDING, k=2))
    first.upsert([stored("a", "persistent ships")])
    first.close()
    second = EmbeddedStore(tmp_path / "s")
    assert second.count() == 1 and second.index_info() == IndexInfo(EMBEDDING, k=2)
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
    assert ready.count() == 0 and ready.bm25("ships", 5) == []
    assert ready.index_info() == IndexInfo(other, k=3)


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
