"""What only a real OpenSearch cluster can settle: Lucene's BM25 scores, refresh semantics,
the cluster's own validation of the templates, its 413 on an over-large bulk request, and
(with the security plugin, as the admin) that the service's user reads its indices and no
other.

Runs against the cluster at OPENSEARCH_TEST_URL, e.g. the compose cluster:

    docker compose -f docker/compose.yaml up -d --wait opensearch
    OPENSEARCH_TEST_URL=http://localhost:9200 python -m pytest tests/test_cluster.py

Without it, against osmem-server (the suite's in-memory cluster), where each test of what
osmem-server does otherwise than OpenSearch is skipped with the reason (`lucene_only`): the
rest (the templates as the cluster applies them, incremental writes) still run on every
checkout, so this suite cannot go stale unseen between runs on a real cluster.

Each test works under its own alias (`rrtest-<random>`) and deletes its indices after.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from conftest import TINY_CORPUS, load_script, searches_during_reindex, settings_env, write_jsonl

from reranker.config import OpenSearchSettings, parse_search_fields
from reranker.embeddings import WordVectors
from reranker.indexing import index_corpus
from reranker.store import IndexInfo
from reranker.store.opensearch import PASSAGES_MAPPINGS, OpenSearchStore
from reranker.store.templates import load_templates
from reranker.types import DocTopics, Document, EmbeddingInfo, StoredDocument

URL = os.environ.get("OPENSEARCH_TEST_URL", "")

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def cluster_url(request: pytest.FixtureRequest) -> str:
    """OPENSEARCH_TEST_URL, else a clone of osmem-server's empty cluster."""
    return URL or str(request.getfixturevalue("osmem_clone").url)


def lucene_only(store: OpenSearchStore, what: str) -> None:
    """Skip the test on osmem-server (found by what the cluster says it is, so that
    OPENSEARCH_TEST_URL naming `reranker dev-cluster` skips too), which does `what` otherwise."""
    if store.client.info()["version"].get("build_hash") == "osmem":
        pytest.skip(f"osmem-server {what}: set OPENSEARCH_TEST_URL to a real OpenSearch cluster (docs/opensearch.md)")


@pytest.fixture
def cluster_store(cluster_url: str) -> Iterator[OpenSearchStore]:
    alias = f"rrtest-{uuid.uuid4().hex[:8]}"
    config = OpenSearchSettings(
        hosts=tuple(cluster_url.split(",")),
        username=os.environ.get("OPENSEARCH_USERNAME") or None,
        password=os.environ.get("OPENSEARCH_PASSWORD") or None,
        verify_certs=os.environ.get("OPENSEARCH_VERIFY_CERTS", "true").lower() != "false",
        alias=alias,
        search_fields=parse_search_fields("body"),
        passages=True,  # what only a real cluster can settle: Lucene's statistics with nested passages
    )
    store = OpenSearchStore(config)
    yield store
    store.client.indices.delete(index=f"{alias}-v*", ignore_unavailable=True)
    store.client.indices.delete(index=f"{alias}.claim", ignore_unavailable=True)  # where runs claim the alias
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
    # The templates' mappings, and what a version with passages adds to them (the default).
    assert cluster_store.config.passages
    expected = {**load_templates().mappings["properties"], **PASSAGES_MAPPINGS["properties"]}
    assert body["mappings"]["properties"] == expected
    assert body["mappings"]["_source"] == PASSAGES_MAPPINGS["_source"]
    analyzed = cluster_store.client.indices.analyze(index=name, body={"field": "body", "text": "The running ships"})
    assert [t["token"] for t in analyzed["tokens"]] == ["run", "ship"]


def test_bm25_scores_are_lucenes(cluster_store: OpenSearchStore) -> None:
    """score = idf * f / (f + k1 (1 - b + b dl/avgdl)), idf = ln(1 + (N - n + 0.5) / (n + 0.5)).

    The documents carry their passages as nested Lucene documents: N and avgdl of `body`
    count the top-level documents only (osmem-server counts the nested ones too). Each
    body here is one passage, so its best passage scores as the body does."""
    lucene_only(cluster_store, "counts nested documents in BM25's statistics")
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
    passages = cluster_store.passage_bm25("ocean", ["a", "b", "c"], [None] * 3)
    assert passages == pytest.approx([expected("a"), expected("b"), 0.0], rel=1e-5)


def test_a_rebuild_is_invisible_until_published(cluster_store: OpenSearchStore) -> None:
    lucene_only(cluster_store, "shows every write at once (no refresh_interval)")
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


def test_compact_force_merges_the_aliases_index_into_one_segment_per_shard(cluster_store: OpenSearchStore) -> None:
    """Three refreshes write three segments (osmem-server keeps one whatever happens). Every
    body scores apart from the others (its count of `ship`, its length), so that no tie
    depends on the order of documents in the segments."""
    lucene_only(cluster_store, "keeps one segment whatever happens")
    cluster_store.initialise(IndexInfo(EMBEDDING, 2))
    index = f"{cluster_store.alias}-v000001"
    for batch in range(3):
        assert cluster_store.upsert([stored(f"d{batch}-{i}", "ocean " + "ship " * (i + 1) + "sea " * batch) for i in range(3)]) == []
        cluster_store.client.indices.refresh(index=index)
    cluster_store.publish()
    before = [(h.doc_id, h.bm25_score) for h in cluster_store.bm25("ocean ship", 20)]
    shards = int(cluster_store.client.indices.get_settings(index=index)[index]["settings"]["index"]["number_of_shards"])
    segments = cluster_store.segments()  # the most of any one shard
    result = cluster_store.compact()
    assert result.documents == 9 and result.segments_before > shards and result.segments_after == shards
    if shards == 1:  # the template's
        assert segments == result.segments_before
    assert cluster_store.segments() == 1
    after = [(h.doc_id, h.bm25_score) for h in cluster_store.bm25("ocean ship", 20)]
    assert [doc_id for doc_id, _ in after] == [doc_id for doc_id, _ in before]
    assert [score for _, score in after] == pytest.approx([score for _, score in before], rel=1e-6)


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
    lucene_only(cluster_store, "shows every write at once: tests/test_opensearch.py runs this there")
    watch = searches_during_reindex(cluster_store.config, glove, tmp_path, documents=2000)
    assert watch.replaced == 2000 and watch.checks >= 200
    assert watch.misses == (), f"{len(watch.misses)} of {watch.checks} searches missed a document: {watch.misses[:5]}"


def test_an_experiment_deleted_takes_the_lists_written_just_before_it(cluster_store: OpenSearchStore) -> None:
    """A delete by query sees what the last refresh made searchable: a list recorded an
    instant before the delete (not yet refreshed) stayed behind it, an orphan. The store
    refreshes before it deletes."""
    lucene_only(cluster_store, "shows every write at once (no refresh_interval)")
    from reranker.interleaving import interleave
    from reranker.store.events import Experiment, OpenSearchEventStore, Recorded, ShownQuery

    events = OpenSearchEventStore(cluster_store)
    try:
        events.create_experiment(Experiment("exp", ("hidden_topics", "bm25"), "team_draft", 1.0, "stopped", "2026-11-27T09:00:00+00:00"))
        cluster_store.client.indices.put_settings(index=events._index("ubi_queries"), body={"index": {"refresh_interval": "-1"}})
        shown = interleave("team_draft", ["a", "b"], ["b", "a"], 2, seed=0)
        assert events.record_query(ShownQuery("just-before", "exp", "c1", "ships", "2026-11-27T10:00:00Z", shown)) is True
        events.delete_experiment("exp", events=True)
        assert events.shown_query("just-before") is None
        assert events.recorded("exp") == Recorded(queries=0, events=0)
    finally:
        cluster_store.client.indices.delete(index=f"{cluster_store.alias}-experiments,{cluster_store.alias}-ubi_*", ignore_unavailable=True)


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
    lucene_only(cluster_store, "has no artificial documents in _mtermvectors")
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


# --- least privilege: the service's cluster user reads only its own indices ------------------


def _setup_users() -> Any:
    """docker/opensearch-security/setup_users.py, what the secure compose stack runs."""
    return load_script(Path(__file__).resolve().parent.parent / "docker" / "opensearch-security" / "setup_users.py")


def _security(store: OpenSearchStore, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return store.forward(method, f"/_plugins/_security/api/{path}", None, body)


@pytest.fixture
def restricted(cluster_store: OpenSearchStore) -> Iterator[tuple[OpenSearchStore, str, str]]:
    """(the admin's store over a tiny index, the restricted user's password, a secret index):
    the roles and users of docker/opensearch-security/ for this test's alias, created with
    the fixture's (admin) credentials and deleted after; the secret index holds a canary."""
    status, _ = _security(cluster_store, "GET", "account")
    if status != 200:
        pytest.skip(f"the cluster answers GET _plugins/_security/api/account with {status}: no security plugin, or not the admin")
    setup = _setup_users()
    alias = cluster_store.alias
    # Strong enough for the plugin's password rules (upper, lower, digit, symbol, length).
    passwords = {user: f"Rr-{uuid.uuid4().hex[:12]}-x9!Q" for user in setup.USERS}
    admin = (cluster_store.config.username, cluster_store.config.password)
    context = ssl._create_unverified_context() if not cluster_store.config.verify_certs else None
    assert set(setup.USERS.values()) == set(setup.roles(alias))
    secret = f"rrsecret-{uuid.uuid4().hex[:8]}"
    try:
        setup.apply(cluster_store.config.hosts[0], admin, alias, passwords, context)
        cluster_store.install_templates()
        cluster_store.initialise(IndexInfo(EMBEDDING, 2))
        assert cluster_store.upsert([stored("ships", "ocean ship sails"), stored("bread", "bread oven")]) == []
        cluster_store.publish()
        cluster_store.client.index(index=secret, id="canary", body={"body": "ocean ship canary"}, refresh="true")
        yield cluster_store, passwords["reranker-service"], secret
    finally:
        for user, role in setup.USERS.items():
            _security(cluster_store, "DELETE", f"rolesmapping/{role}")
            _security(cluster_store, "DELETE", f"roles/{role}")
            _security(cluster_store, "DELETE", f"internalusers/{user}")
        cluster_store.client.indices.delete(index=f"{secret},{alias}-experiments,{alias}-ubi_queries,{alias}-ubi_events", ignore_unavailable=True)


def test_the_service_user_reads_its_indices_and_no_other(restricted: tuple[OpenSearchStore, str, str], tmp_path: Path) -> None:
    """Defence in depth: as reranker-service (the role the secure compose stack gives the
    service), the store and the service work on their own indices, and the cluster itself
    refuses a search of another one: directly, and through a proxy told to forward any
    index (RERANKER_PROXY_INDICES=*, standing in for a proxy bug)."""
    from opensearchpy.exceptions import AuthorizationException

    from reranker.config import Settings
    from reranker.service import create_app

    admin_store, password, secret = restricted
    alias = admin_store.alias
    service_config = replace(admin_store.config, username="reranker-service", password=password)
    reader = OpenSearchStore(service_config)
    try:
        assert [hit.doc_id for hit in reader.bm25("ocean ship", 10)] == ["ships"]
        assert reader.index_info() is not None
        with pytest.raises(AuthorizationException):
            reader.client.search(index=secret, body={"query": {"match_all": {}}})
    finally:
        reader.close()

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = {
        **settings_env(data_dir), "OPENSEARCH_URL": ",".join(admin_store.config.hosts), "RERANKER_INDEX": alias,
        "OPENSEARCH_USERNAME": "reranker-service", "OPENSEARCH_PASSWORD": password,
        "OPENSEARCH_VERIFY_CERTS": "true" if admin_store.config.verify_certs else "false",
        "RERANKER_PROXY_INDICES": "*", "RERANKER_ADMIN_API_KEY": "admin-key",
    }  # fmt: skip
    app = create_app(Settings.from_env(env))
    client = app.test_client()
    try:
        assert client.get("/readyz").status_code == 200
        answer = client.post(f"/{alias}/_search", json={"query": {"match": {"body": "ocean ship"}}, "size": 1})
        assert answer.status_code == 200 and answer.get_json()["hits"]["hits"][0]["_id"] == "ships"
        for path, data, kind in [
            (f"/{secret}/_search", json.dumps({"query": {"match_all": {}}}), "application/json"),
            ("/_search", json.dumps({"query": {"match_all": {}}}), "application/json"),  # the alias only
            ("/_msearch", json.dumps({"index": secret}) + "\n" + json.dumps({"query": {"match_all": {}}}) + "\n", "application/x-ndjson"),
        ]:
            refused = client.post(path, data=data, content_type=kind)
            assert b"canary" not in refused.get_data(), (path, refused.get_json())
        assert client.post(f"/{secret}/_search", json={"query": {"match_all": {}}}).status_code == 403
        # The service's own writes, the experiments and their events, are within its role.
        started = client.post("/experiments", json={"id": "lp", "rankers": ["hidden_topics", "bm25"], "traffic": 1.0},
                              headers={"Authorization": "Bearer admin-key"})
        assert started.status_code == 201, started.get_json()
    finally:
        app.extensions["reranker"].close()
