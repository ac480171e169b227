"""What only a real OpenSearch cluster can settle: Lucene's BM25 scores, refresh semantics,
the cluster's own validation of the templates, and its 413 on an over-large bulk request.

Runs when OPENSEARCH_TEST_URL is set, e.g. against the compose cluster:

    docker compose -f docker/compose.yaml up -d opensearch
    OPENSEARCH_TEST_URL=http://localhost:9200 python -m pytest tests/test_cluster.py

Each test works under its own alias (`rrtest-<random>`) and deletes its indices after.
"""

from __future__ import annotations

import math
import os
import uuid
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from conftest import TINY_CORPUS, searches_during_reindex, write_jsonl

from reranker.config import OpenSearchSettings, parse_search_fields
from reranker.embeddings import WordVectors
from reranker.indexing import index_corpus
from reranker.store import IndexInfo
from reranker.store.opensearch import OpenSearchStore
from reranker.store.templates import load_templates
from reranker.types import DocTopics, Document, EmbeddingInfo, StoredDocument

URL = os.environ.get("OPENSEARCH_TEST_URL", "")

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not URL,
        reason="real-cluster suite: set OPENSEARCH_TEST_URL (e.g. http://localhost:9200 from docker/compose.yaml)",
    ),
]


@pytest.fixture
def cluster_store() -> Iterator[OpenSearchStore]:
    alias = f"rrtest-{uuid.uuid4().hex[:8]}"
    config = OpenSearchSettings(
        hosts=tuple(URL.split(",")),
        username=os.environ.get("OPENSEARCH_USERNAME") or None,
        password=os.environ.get("OPENSEARCH_PASSWORD") or None,
        verify_certs=os.environ.get("OPENSEARCH_VERIFY_CERTS", "true").lower() != "false",
        alias=alias,
        search_fields=parse_search_fields("body"),
    )
    store = OpenSearchStore(config)
    yield store
    store.client.indices.delete(index=f"{alias}-v*", ignore_unavailable=True)
    name, _ = store.templates.index_template_for(alias)
    store.client.indices.delete_index_template(name=name, ignore=[404])
    store.close()


EMBEDDING = EmbeddingInfo("test", 4, "0" * 64)


def stored(doc_id: str, body: str, k: int = 2) -> StoredDocument:
    topics = np.eye(4, dtype=np.float32)[:k]
    return StoredDocument(Document(doc_id, "", body), DocTopics(topics, np.full(k, 1 / k, dtype=np.float32)), doc_id, 1, 0)


def test_the_cluster_accepts_the_templates_and_applies_them(cluster_store: OpenSearchStore) -> None:
    cluster_store.install_templates()
    cluster_store.initialise(IndexInfo(EMBEDDING, 2))
    (name, body), = cluster_store.client.indices.get_mapping(index=f"{cluster_store.alias}-v*").items()
    assert name == f"{cluster_store.alias}-v000001"
    assert body["mappings"]["properties"] == load_templates().mappings["properties"]
    analyzed = cluster_store.client.indices.analyze(index=name, body={"field": "body", "text": "The running ships"})
    assert [t["token"] for t in analyzed["tokens"]] == ["run", "ship"]


def test_bm25_scores_are_lucenes(cluster_store: OpenSearchStore) -> None:
    """score = idf * f / (f + k1 (1 - b + b dl/avgdl)), idf = ln(1 + (N - n + 0.5) / (n + 0.5))."""
    cluster_store.initialise(IndexInfo(EMBEDDING, 2))
    bodies = {"a": "ocean ship", "b": "ocean ocean bread", "c": "bread cheese wine butter"}
    assert cluster_store.upsert([stored(doc_id, body) for doc_id, body in bodies.items()]) == []
    cluster_store.publish()
    k1, b, N, n = 1.2, 0.75, 3, 2
    avgdl = sum(len(body.split()) for body in bodies.values()) / N
    idf = math.log(1 + (N - n + 0.5) / (n + 0.5))

    def expected(doc_id: str) -> float:
        f = bodies[doc_id].split().count("ocean")
        dl = len(bodies[doc_id].split())
        return idf * f / (f + k1 * (1 - b + b * dl / avgdl))

    hits = cluster_store.bm25("ocean", 10)
    assert [h.doc_id for h in hits] == ["b", "a"]
    for hit in hits:
        assert hit.bm25_score == pytest.approx(expected(hit.doc_id), rel=1e-5)


def test_a_rebuild_is_invisible_until_published(cluster_store: OpenSearchStore) -> None:
    cluster_store.initialise(IndexInfo(EMBEDDING, 2))
    cluster_store.upsert([stored("old", "ocean")])
    cluster_store.publish()
    writer = OpenSearchStore(cluster_store.config)
    writer.initialise(IndexInfo(EMBEDDING, 2), rebuild=True)
    writer.upsert([stored("new", "ocean")])
    target = f"{cluster_store.alias}-v000002"
    # refresh_interval is -1 while a version is built: a search of it sees nothing yet...
    assert cluster_store.client.search(index=target, body={"query": {"match_all": {}}})["hits"]["hits"] == []
    assert [h.doc_id for h in cluster_store.bm25("ocean", 10)] == ["old"]
    writer.publish()
    # ...and publish() refreshes it before the alias moves.
    assert [h.doc_id for h in cluster_store.bm25("ocean", 10)] == ["new"]
    settings = cluster_store.client.indices.get_settings(index=target)[target]["settings"]["index"]
    assert "refresh_interval" not in settings  # back to the template's default


def test_incremental_writes_are_searchable_when_indexing_returns(
    cluster_store: OpenSearchStore, glove: WordVectors, tmp_path: Path
) -> None:
    report = index_corpus(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS), cluster_store, glove, 3, show_progress=False)
    assert report.indexed == 3
    more = [{"id": "late", "title": "Ocean liners", "text": "Ocean liners cross the sea."}]
    index_corpus(write_jsonl(tmp_path / "d.jsonl", more), OpenSearchStore(cluster_store.config), glove, 3, show_progress=False)
    assert "late" in {h.doc_id for h in cluster_store.bm25("ocean liners", 10)}


def test_an_in_place_reindex_keeps_every_document_searchable(
    cluster_store: OpenSearchStore, glove: WordVectors, tmp_path: Path
) -> None:
    """As tests/test_opensearch.py checks on osmem-server, with the cluster's own refresh:
    an old version stays searchable until the refresh that shows its replacement."""
    watch = searches_during_reindex(cluster_store.config, glove, tmp_path, documents=2000)
    assert watch.replaced == 2000 and watch.checks >= 200
    assert watch.misses == (), f"{len(watch.misses)} of {watch.checks} searches missed a document: {watch.misses[:5]}"


def max_content_length(store: OpenSearchStore) -> int:
    settings = store.client.cluster.get_settings(include_defaults=True, flat_settings=True)
    raw = next((s["http.max_content_length"] for s in settings.values() if "http.max_content_length" in s), "100mb")
    units = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
    number, unit = raw.rstrip("bkmg"), raw[len(raw.rstrip("bkmg")) :]
    return int(float(number) * units[unit or "b"])


def test_a_document_over_the_clusters_request_limit_is_reported_not_fatal(cluster_store: OpenSearchStore) -> None:
    limit = max_content_length(cluster_store)
    if limit > 32 << 20:
        pytest.skip(f"http.max_content_length is {limit} bytes; the compose cluster sets 10mb to make this testable")
    store = OpenSearchStore(cluster_store.config)
    store.initialise(IndexInfo(EMBEDDING, 2))
    huge = stored("huge", "ocean " * (limit // 6 + 1000))
    failures = store.upsert([stored("small", "ocean ship"), huge])
    assert [(f.doc_id, f.reason) for f in failures] == [("huge", "document larger than the cluster accepts (HTTP 413)")]
    store.publish()
    assert [h.doc_id for h in store.bm25("ocean", 10)] == ["small"]



def test_sent_texts_score_as_the_cluster_scores_them(cluster_store: OpenSearchStore) -> None:
    """BM25 of texts the index does not hold, from the cluster's own analysis and term
    statistics (`_mtermvectors` of artificial documents): the stored documents' texts score
    what the cluster's search gives them."""
    cluster_store.initialise(IndexInfo(EMBEDDING, 2))
    bodies = {"a": "ocean ship sails", "b": "ocean ocean bread", "c": "bread cheese wine butter", "d": "ships at sea"}
    assert cluster_store.upsert([stored(doc_id, body) for doc_id, body in bodies.items()]) == []
    cluster_store.publish()
    hits = cluster_store.bm25("ocean ships", 10)
    scores = cluster_store.text_bm25("ocean ships", [bodies[h.doc_id] for h in hits])
    assert scores is not None
    # The cluster leaves out the constant factor k1 + 1 (Lucene 8+); bm25_of_texts keeps it.
    # (Lucene stores lengths in one byte: exact for these short texts, close for long ones.)
    assert scores == pytest.approx([2.2 * h.bm25_score for h in hits], rel=0.02)
    assert cluster_store.text_bm25("ocean ships", []) == []
