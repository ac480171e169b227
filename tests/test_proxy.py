"""The OpenSearch-compatible search proxy against a real HTTP OpenSearch API (osmem-server).

One in-memory cluster clone holds the tiny `papers` corpus for the whole module; the
tests read it through the proxy and compare with what the cluster itself answers.
Tests that need other settings build their own app (cheap: the engine is lazy).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import numpy as np
import pytest
from conftest import REPO, TINY_CORPUS, ClusterProxy, settings_env, write_jsonl
from flask import Flask
from flask.testing import FlaskClient

import reranker.rankers
from reranker.config import OpenSearchSettings, Settings
from reranker.embeddings import WordVectors
from reranker.indexing import index_corpus
from reranker.service import create_app
from reranker.service.search_requests import query_text
from reranker.store.opensearch import INTERNAL_FIELDS, OpenSearchStore

CORPUS = [
    dict(TINY_CORPUS[0], year=1998, venue="Maritime Review"),
    dict(TINY_CORPUS[1], year=2005, venue="Food Letters"),
    dict(TINY_CORPUS[2], year=2012, venue="Games Quarterly"),
    {"id": "harbour", "title": "A harbour town", "year": 2005, "venue": "Maritime Review",
     "text": "Fishing boats leave the harbour at dawn; the fishermen sail out to sea and return with their catch before the storm."},
    {"id": "ocean-bakery", "title": "The Ocean bakery", "year": 2012, "venue": "Food Letters",
     "text": "The Ocean bakery on Ocean street sells bread, cakes and pastries baked in its ovens every morning."},
    {"id": "ocean-chess", "title": "Ocean chess club", "year": 2020, "venue": "Games Quarterly",
     "text": "The Ocean chess club meets on Tuesdays; players study openings, endgames and the sicilian defence."},
]
# What the store's own BM25 sends (RERANKER_SEARCH_FIELDS), so Engine.search is comparable.
FIELDS = ["title", "abstract", "body"]
# A query whose hidden-topic order differs from its BM25 order on CORPUS.
SEA = "ocean sea storm boats"
# The paper's ranker, named: these tests are about how the proxy reranks, not the default.
TOPICS = {"rerank": {"ranker": "hidden_topics"}}


def summary(text: str, **extra: Any) -> dict[str, Any]:
    return {"query": {"multi_match": {"query": text, "fields": FIELDS, "type": "most_fields"}}, **extra}


def ids(answer: Any) -> list[str]:
    return [hit["_id"] for hit in answer["hits"]["hits"]]


@pytest.fixture(scope="module")
def papers(osmem_server: Any, glove: WordVectors, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(cluster URL, data dir): CORPUS indexed behind the alias `papers`, shared read-only."""
    clone = osmem_server.clone()
    directory = tmp_path_factory.mktemp("proxy")
    store = OpenSearchStore(OpenSearchSettings(hosts=(clone.url,), alias="papers"))
    index_corpus(write_jsonl(directory / "papers.jsonl", CORPUS), store, glove, 5, show_progress=False)
    store.close()
    data_dir = directory / "data"
    data_dir.mkdir()
    yield clone.url, data_dir
    clone.close()


def make_app(papers: tuple[str, Path], **env: str) -> Flask:
    url, data_dir = papers
    base = settings_env(data_dir, HOME=str(data_dir.parent), OPENSEARCH_URL=url, RERANKER_INDEX="papers")
    return create_app(Settings.from_env({**base, **env}))


@pytest.fixture(scope="module")
def app(papers: tuple[str, Path]) -> Flask:
    return make_app(papers)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(scope="module")
def direct(papers: tuple[str, Path]) -> Iterator[OpenSearchStore]:
    """The cluster without the proxy, to compare answers with."""
    store = OpenSearchStore(OpenSearchSettings(hosts=(papers[0],), alias="papers"))
    yield store
    store.close()


def without_timing(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key not in ("took", "ext", "_scroll_id")}


# The service's own fields in every document's _source (index_templates/reranker-mappings).
INTERNAL = {"hidden_topics", "corrected_topics", "indexed", "doc2vec", "passages"}


def internal_in(answer: Any) -> list[str]:
    """Where `answer` holds one of the service's own fields: in a hit's `_source` (as an
    object) or `fields` (as `name.sub` paths), at any depth (inner hits, top_hits)."""
    found = []
    if isinstance(answer, dict):
        for part in ("_source", "fields"):
            if "_id" in answer and isinstance(answer.get(part), dict):
                found += [f"{answer['_id']}.{part}.{key}" for key in answer[part] if key.split(".")[0] in INTERNAL]
        for key, value in answer.items():
            if key not in ("_source", "fields"):
                found += internal_in(value)
    elif isinstance(answer, list):
        for value in answer:
            found += internal_in(value)
    return found


def without_internal(answer: Any) -> Any:
    """A copy of a cluster answer as the proxy must pass it on: without the service's own fields."""
    if isinstance(answer, list):
        return [without_internal(value) for value in answer]
    if not isinstance(answer, dict):
        return answer
    copy = {key: without_internal(value) for key, value in answer.items()}
    for part in ("_source", "fields"):
        if "_id" in copy and isinstance(answer.get(part), dict):
            copy[part] = {key: value for key, value in answer[part].items() if key.split(".")[0] not in INTERNAL}
    return copy


# --- reranking ---------------------------------------------------------------------------


def test_the_default_ranker_fuses_the_clusters_best_passages_three_ways(papers: tuple[str, Path], glove: WordVectors) -> None:
    """On an index version built with RERANKER_PASSAGES, the proxy's fused scores are
    /search's, whose explanations hold a passages part."""
    url, data_dir = papers
    store = OpenSearchStore(OpenSearchSettings(hosts=(url,), alias="passages", passages=True))
    index_corpus(write_jsonl(data_dir.parent / "passages.jsonl", CORPUS), store, glove, 5, show_progress=False)
    store.close()
    client = make_app(papers, RERANKER_INDEX="passages").test_client()
    proxied = client.post("/passages/_search", json=summary(SEA, size=10)).get_json()
    rerank = proxied["ext"]["rerank"]
    assert rerank["ranker"].endswith(":maxp") and rerank["status"] == "ok"
    searched = client.post("/search", json={"query": SEA, "window": 100, "size": 10, "explain": True}).get_json()
    assert searched["ranker"] == rerank["ranker"]
    parts = [hit["explanation"]["parts"] for hit in searched["hits"]]
    assert all(set(part) == {"topics", "bm25", "passages"} for part in parts)
    assert max(part["passages"] for part in parts) > 0
    fused = {hit["id"]: hit["score"] for hit in searched["hits"]}
    assert {s["_id"]: s["score"] for s in rerank["scores"]} == pytest.approx(fused)
    assert ids(proxied) == [hit["id"] for hit in searched["hits"]]


def test_without_passages_the_default_ranker_fuses_two_ways(client: FlaskClient) -> None:
    """An index version built without RERANKER_PASSAGES (the default) has none: the fusion
    is two-way, as the embedded store's for a store without passages."""
    searched = client.post("/search", json={"query": SEA, "window": 100, "size": 10, "explain": True}).get_json()
    assert searched["ranker"].endswith(":maxp")
    assert all(set(hit["explanation"]["parts"]) == {"topics", "bm25"} for hit in searched["hits"])


def test_the_window_is_reranked_as_the_engine_does_and_hits_keep_bm25_scores(app: Flask, client: FlaskClient) -> None:
    answer = client.post("/papers/_search", json=summary(SEA, ext=TOPICS)).get_json()
    expected = app.extensions["reranker"].engine().search(SEA, "hidden_topics", window=100, size=10)
    assert ids(answer) == [hit.doc_id for hit in expected.hits]
    bm25 = client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "bm25"}})).get_json()
    assert ids(answer) != ids(bm25)  # the query was chosen so that reranking moves something
    assert sorted(ids(answer)) == sorted(ids(bm25))
    scores = {hit["_id"]: hit["_score"] for hit in bm25["hits"]["hits"]}
    assert {hit["_id"]: hit["_score"] for hit in answer["hits"]["hits"]} == scores
    assert [hit["_score"] for hit in answer["hits"]["hits"]] == pytest.approx([hit.bm25_score for hit in expected.hits])
    assert answer["hits"]["max_score"] == max(scores.values())
    rerank = answer["ext"]["rerank"]
    assert {k: rerank[k] for k in ("ranker", "status", "window", "candidates")} == {"ranker": "hidden_topics", "status": "ok", "window": 100, "candidates": len(bm25["hits"]["hits"])}
    assert rerank["took_ms"] >= 0 and "reason" not in rerank
    # Each page hit's reranker score, in page order, beside the BM25 _score it keeps.
    assert [s["_id"] for s in rerank["scores"]] == ids(answer)
    assert [s["score"] for s in rerank["scores"]] == pytest.approx([hit.score for hit in expected.hits])
    assert all(s["ranker_score"] == s["score"] for s in rerank["scores"])
    # The page's hits carry their _source as the cluster returns it, but the service's own fields.
    assert {hit["_source"]["title"] for hit in answer["hits"]["hits"]} == {r["title"] for r in CORPUS if r["id"] in scores}
    assert all(hit["_source"]["venue"] and not INTERNAL.intersection(hit["_source"]) for hit in answer["hits"]["hits"])


def test_pages_are_sliced_from_the_reranked_window(client: FlaskClient) -> None:
    full = ids(client.post("/papers/_search", json=summary(SEA, ext=TOPICS)).get_json())
    page = client.post("/papers/_search", json=summary(SEA, ext=TOPICS, **{"from": 1, "size": 2})).get_json()
    assert ids(page) == full[1:3]
    assert page["hits"]["total"]["value"] == len(full)
    assert page["ext"]["rerank"]["window"] == 100
    by_url = client.post("/papers/_search?from=1&size=2", json=summary(SEA, ext=TOPICS, size=10)).get_json()
    assert ids(by_url) == full[1:3]  # URL parameters override the body's
    # A window of one reorders nothing: the BM25 winner stays first.
    bm25 = ids(client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "bm25"}})).get_json())
    small = client.post("/papers/_search", json=summary(SEA, size=1, ext={"rerank": {"window": 1, "ranker": "hidden_topics"}})).get_json()
    assert ids(small) == bm25[:1] != full[:1]
    assert small["ext"]["rerank"]["window"] == small["ext"]["rerank"]["candidates"] == 1
    beyond = client.post("/papers/_search", json=summary(SEA, **{"from": 10})).get_json()
    assert ids(beyond) == [] and beyond["ext"]["rerank"]["status"] == "ok"
    nothing = client.post("/papers/_search", json=summary("xylophone")).get_json()
    assert ids(nothing) == [] and nothing["ext"]["rerank"]["candidates"] == 0


def test_pages_past_the_window_keep_bm25_order_so_every_page_is_a_slice_of_one_list(client: FlaskClient) -> None:
    """Only the top `window` hits are reranked, as Elasticsearch's rescore leaves hits past its
    window_size: a window grown to each page's end reordered the pages before it, so paging
    showed one hit twice and another never."""
    bm25 = ids(client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "bm25"}})).get_json())
    assert len(bm25) == 4
    window = {"rerank": {"window": 3, "ranker": "hidden_topics"}}
    top = client.post("/papers/_search", json=summary(SEA, size=3, ext=window)).get_json()
    assert sorted(ids(top)) == sorted(bm25[:3]) and ids(top) != bm25[:3]  # the window is reordered
    pages = [client.post("/papers/_search", json=summary(SEA, ext=window, **{"from": start, "size": 2})).get_json() for start in (0, 2)]
    assert [doc_id for page in pages for doc_id in ids(page)] == ids(top) + bm25[3:], (pages, bm25)
    straddling = pages[1]["ext"]["rerank"]  # hits 2 and 3: the window's last, and the first past it
    assert straddling["status"] == "ok" and straddling["window"] == straddling["candidates"] == 3
    assert [s["score"] is None for s in straddling["scores"]] == [False, True]
    past = client.post("/papers/_search", json=summary(SEA, ext=window, **{"from": 3, "size": 1})).get_json()
    assert ids(past) == bm25[3:]
    assert past["ext"]["rerank"]["status"] == "not_reranked" and "past the reranked window of 3 hits" in past["ext"]["rerank"]["reason"]
    assert past["ext"]["rerank"]["window"] == 3  # the window it is past, as /search says it (it said 0)


def test_explain_explains_the_clients_query_not_the_proxys_page_filter(client: FlaskClient, direct: OpenSearchStore) -> None:
    """`"explain": true` showed the proxy's own page filter (the page's ids, `_id:(...)`)
    in every hit's `_explanation`: each is now the cluster's explanation of the query sent."""
    for explain in ({"explain": True}, {}):
        url = "/papers/_search" + ("" if explain else "?explain=true")
        page = client.post(url, json=summary(SEA, ext=TOPICS, size=3, **explain)).get_json()
        status, own = direct.forward("POST", "/papers/_search", {}, summary(SEA, explain=True, size=10))
        assert status == 200 and len(page["hits"]["hits"]) == 3
        theirs = {hit["_id"]: hit["_explanation"] for hit in own["hits"]["hits"]}
        for hit in page["hits"]["hits"]:
            assert hit["_explanation"] == theirs[hit["_id"]] and "_id:" not in json.dumps(hit["_explanation"])
        assert ids(page) != [hit["_id"] for hit in own["hits"]["hits"]][:3]  # reranked all the same


def test_paging_numbers_in_strings_are_read_as_the_cluster_reads_them(client: FlaskClient, direct: OpenSearchStore) -> None:
    """OpenSearch takes `"from": "1", "size": "2"` (a form's values, sent as they are) as the
    numbers; the proxy refused them with 400."""
    body = summary(SEA, ext=TOPICS, **{"from": "1", "size": "2"})
    page = client.post("/papers/_search", json=body)
    assert page.status_code == 200, page.get_json()
    assert ids(page.get_json()) == ids(client.post("/papers/_search", json=summary(SEA, ext=TOPICS)).get_json())[1:3]
    status, own = direct.forward("POST", "/papers/_search", {}, {**summary(SEA, **{"from": "1", "size": "2"})})
    assert status == 200 and len(own["hits"]["hits"]) == 2  # the cluster's own reading
    lines = "".join(json.dumps(line) + "\n" for line in ({}, body))
    (found,) = client.post("/papers/_msearch", data=lines, content_type="application/x-ndjson").get_json()["responses"]
    assert ids(found) == ids(page.get_json())
    for wrong in ("two", "1.5", ""):
        assert client.post("/papers/_search", json=summary(SEA, size=wrong)).status_code == 400


def test_aggregations_highlight_and_source_filtering_pass_through(client: FlaskClient, direct: OpenSearchStore) -> None:
    body = summary("ocean bread", aggs={"years": {"terms": {"field": "year"}}}, highlight={"fields": {"body": {}}}, _source=["title"], track_total_hits=True)
    answer = client.post("/papers/_search", json=body).get_json()
    status, own = direct.forward("POST", "/papers/_search", {}, body)
    assert status == 200 and answer["ext"]["rerank"]["status"] == "ok"
    assert answer["aggregations"] == own["aggregations"] and answer["hits"]["total"] == own["hits"]["total"]
    theirs = {hit["_id"]: hit for hit in own["hits"]["hits"]}
    assert sorted(ids(answer)) == sorted(theirs)
    for hit in answer["hits"]["hits"]:
        assert hit == theirs[hit["_id"]]  # highlight, _source, _index, _score: all the cluster's


def test_a_page_without_highlights_comes_from_one_mget_with_the_same_hits(client: FlaskClient) -> None:
    for source in (["title"], {"excludes": ["hidden_topics", "body"]}, False):
        by_mget = client.post("/papers/_search", json=summary(SEA, _source=source)).get_json()
        # `version: false` changes nothing in a hit, but needs the query: the re-run path.
        by_query = client.post("/papers/_search", json=summary(SEA, _source=source, version=False)).get_json()
        assert ids(by_mget) and by_mget["hits"] == by_query["hits"]
        assert all(("_source" in hit) == (source is not False) for hit in by_mget["hits"]["hits"])
    assert "body" not in by_query["hits"]["hits"][0].get("_source", {})


# --- the service's own fields stay inside (issue 25) ---------------------------------------


def test_the_services_own_fields_never_leave_the_proxy(client: FlaskClient, direct: OpenSearchStore) -> None:
    """Every path a document takes out of the proxy: a reranked page (by `_mget`, and by
    re-running the query for highlights), a search forwarded as it is, `fields`, a top_hits
    aggregation, a wildcard `_source` (which names nothing), and `_msearch`."""
    status, own = direct.forward("POST", "/papers/_search", {}, summary(SEA, fields=["*"]))
    assert status == 200 and {"hidden_topics", "corrected_topics", "indexed"} <= {
        name.split(".")[0] for hit in own["hits"]["hits"] for name in [*hit["_source"], *hit["fields"]]
    }, "the cluster itself returns them: what the proxy must take out"
    bodies = {
        "reranked, page by _mget": summary(SEA),
        "reranked, page by the query": summary(SEA, highlight={"fields": {"body": {}}}),
        "forwarded as it is": summary(SEA, sort=[{"year": "asc"}]),
        "fields": summary(SEA, fields=["*"]),
        "top_hits": {"query": {"match_all": {}}, "size": 0, "aggs": {"top": {"top_hits": {"size": 3}}}},
        "a wildcard names nothing": summary(SEA, _source=["*"]),
    }
    for what, body in bodies.items():
        answer = client.post("/papers/_search", json=body).get_json()
        documents = answer["hits"]["hits"] or answer["aggregations"]["top"]["hits"]["hits"]
        assert documents and all(hit["_source"]["title"] for hit in documents), what
        assert internal_in(answer) == [], what
    lines = "".join(json.dumps(line) + "\n" for line in [{}, summary(SEA, size=2), {}, summary(SEA, sort=["_doc"], size=2)])
    answer = client.post("/papers/_msearch", data=lines, content_type="application/x-ndjson").get_json()
    assert [len(ids(response)) for response in answer["responses"]] == [2, 2] and internal_in(answer) == []


@pytest.mark.parametrize(
    ("url", "body", "kept"),
    [
        ("/papers/_search", summary(SEA, _source=["title", "hidden_topics"]), {"hidden_topics"}),
        ("/papers/_search", summary(SEA, _source="corrected_topics"), {"corrected_topics"}),
        ("/papers/_search", summary(SEA, _source={"includes": ["title", "hidden_topics.k"], "excludes": ["indexed"]}), {"hidden_topics"}),
        ("/papers/_search?_source_includes=title,indexed", summary(SEA), {"indexed"}),
        ("/papers/_search", summary(SEA, fields=["title", "indexed.n_tokens"], _source=["title"]), {"indexed"}),
        ("/papers/_search", summary(SEA, sort=[{"year": "asc"}], _source=["indexed", "title"]), {"indexed"}),
    ],
)
def test_the_services_own_fields_come_back_when_a_search_names_them(client: FlaskClient, url: str, body: dict[str, Any], kept: set[str]) -> None:
    answer = client.post(url, json=body).get_json()
    hits = answer["hits"]["hits"]
    assert hits and all(hit["_source"] for hit in hits)
    assert {found.split(".")[2] for found in internal_in(answer)} == kept
    if "hidden_topics.k" in json.dumps(body):
        assert all(set(hit["_source"]["hidden_topics"]) == {"k"} for hit in hits)  # just the path named


def test_a_page_of_stored_documents_is_fetched_without_the_services_own_fields(recorded: tuple[FlaskClient, ClusterProxy]) -> None:
    """The cluster is asked not to send them (about 9 KB a document), not only the client spared."""
    client, recorder = recorded
    assert client.post("/papers/_search", json=summary(SEA)).status_code == 200
    mgets = [json.loads(sent) for _, path, sent in recorder.requests if path.startswith("/_mget")]
    assert mgets and all(doc["_source"] == {"excludes": list(INTERNAL_FIELDS)} for doc in mgets[-1]["docs"])


def test_the_services_own_fields_are_the_ones_the_index_template_adds() -> None:
    """What the proxy strips is what `reranker index` writes beside a document's own fields
    (the templates', and the passages a version created with RERANKER_PASSAGES adds)."""
    from reranker.store.opensearch import PASSAGES_MAPPINGS

    mappings = json.loads((REPO / "index_templates" / "reranker-mappings.component.json").read_text())
    properties = set(mappings["template"]["mappings"]["properties"]) | set(PASSAGES_MAPPINGS["properties"])
    assert set(INTERNAL_FIELDS) == INTERNAL == properties - {"title", "abstract", "body"}


# --- _count ------------------------------------------------------------------------------


def test_a_count_is_forwarded_for_the_allowed_indices(recorded: tuple[FlaskClient, ClusterProxy], direct: OpenSearchStore) -> None:
    client, recorder = recorded
    query = {"query": {"match": {"body": "ocean"}}}
    status, own = direct.forward("POST", "/papers/_count", {}, query)
    assert status == 200 and 0 < own["count"] < len(CORPUS)
    answer = client.post("/papers/_count", json=query)
    assert answer.status_code == 200 and answer.get_json()["count"] == own["count"]
    assert client.get("/papers/_count").get_json()["count"] == len(CORPUS)
    assert client.get("/_count").get_json()["count"] == len(CORPUS), "no index: the alias"
    assert client.get("/papers-v*/_count?q=body:ocean").get_json()["count"] == own["count"]
    # Refused as a search would be, before anything reaches the cluster.
    recorder.requests.clear()
    assert "RERANKER_PROXY_INDICES" in client.post("/secret/_count", json=query).get_json()["error"]["reason"]
    refused = client.post("/papers/_count", json={"query": {"script": {"script": "true"}}})
    assert refused.status_code == 403 and "RERANKER_PROXY_ALLOW=script" in refused.get_json()["error"]["reason"]
    lookup = client.post("/papers/_count", json={"query": {"terms": {"tag": {"index": "secret", "id": "2", "path": "tag"}}}})
    assert lookup.status_code == 403
    wrong = client.post("/papers/_count", json={**query, "size": 3})
    assert wrong.status_code == 403 and wrong.get_json()["error"]["reason"].startswith("[size] is not a part of a count the proxy forwards")
    assert client.put("/papers/_count", json=query).status_code == 405
    assert not any("_count" in path or "secret" in path for _, path, _ in recorder.requests)


# --- document reads: get, exists, get_source, mget -----------------------------------------


def _sent(recorder: ClusterProxy, api: str) -> list[tuple[str, str, bytes]]:
    """The requests the cluster received whose path holds `api` (`/_doc/`, `/_source/`, `/_mget`)."""
    return [(method, path, body) for method, path, body in recorder.requests if api in path]


def _excluded(path: str) -> list[str]:
    """The `_source_excludes` a cluster request's URL carried."""
    query = dict(part.split("=", 1) for part in path.partition("?")[2].split("&") if "=" in part)
    return urllib.parse.unquote(query.get("_source_excludes", "")).split(",")


def test_a_document_is_read_without_the_services_own_fields(recorded: tuple[FlaskClient, ClusterProxy], direct: OpenSearchStore) -> None:
    """GET /INDEX/_doc/ID and /INDEX/_source/ID of an allowed index are the cluster's answers,
    but for the service's own fields, which the cluster is asked to leave out."""
    client, recorder = recorded
    status, own = direct.forward("GET", "/papers/_doc/ships")
    assert status == 200 and INTERNAL_FIELDS[0] in own["_source"], "the cluster itself returns them"
    recorder.requests.clear()
    answer = client.get("/papers/_doc/ships")
    assert answer.status_code == 200 and answer.get_json() == without_internal(own)
    assert answer.get_json()["found"] and answer.get_json()["_source"]["title"] == "Sailing ships"
    (_, path, _), = _sent(recorder, "/_doc/")
    assert _excluded(path) == list(INTERNAL_FIELDS), "left out by the cluster, not only stripped here"
    source = client.get("/papers/_source/ships")
    assert source.status_code == 200 and source.get_json() == without_internal(own)["_source"]
    # A version of the alias is allowed as in searches.
    assert client.get("/papers-v000001/_doc/ships").get_json()["_source"] == without_internal(own)["_source"]
    # An id with a slash or a space reaches the cluster as one path segment.
    missing = client.get("/papers/_doc/" + quote("no/such id", safe=""))
    assert missing.status_code == 404 and missing.get_json()["_id"] == "no/such id"
    # OPTIONS lists the read's methods; a write to the same path (PUT, POST, DELETE) is a
    # 405 that lists them too, as for a search route, and never reaches the cluster.
    recorder.requests.clear()
    for path in ("/papers/_doc/ships", "/papers/_source/ships"):
        assert set(client.options(path).headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}, path
        for method in ("PUT", "POST", "DELETE"):
            write = client.open(path, method=method, json={"title": "x"})
            assert write.status_code == 405 and set(write.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}, (method, path)
    assert recorder.requests == [] and direct.documents(["ships"])["ships"].title == "Sailing ships"


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("/papers/_doc/ships?_source_includes=title,hidden_topics", {"hidden_topics"}),
        ("/papers/_doc/ships?_source=corrected_topics,title", {"corrected_topics"}),
        ("/papers/_doc/ships?_source_includes=title,hidden*", set()),  # a wildcard names nothing
        ("/papers/_doc/ships?_source_excludes=body", set()),
        ("/papers/_doc/ships?stored_fields=title&_source=true", set()),
        ("/papers/_source/ships?_source_includes=indexed,title", {"indexed"}),
    ],
)
def test_a_read_that_names_the_services_own_fields_gets_them(recorded: tuple[FlaskClient, ClusterProxy], url: str, kept: set[str]) -> None:
    client, recorder = recorded
    recorder.requests.clear()
    answer = client.get(url)
    assert answer.status_code == 200, answer.get_json()
    found = answer.get_json()
    source = found if "/_source/" in url else found["_source"]
    assert INTERNAL.intersection(source) == kept and source.get("title") == "Sailing ships"
    (_, path, _), = _sent(recorder, "/_source/" if "/_source/" in url else "/_doc/")
    if "stored_fields" not in url:
        # The caller's own excludes kept, the fields it did not name added to them.
        assert _excluded(path) == (["body"] if "_source_excludes" in url else []) + [f for f in INTERNAL_FIELDS if f not in kept]
    if "_source_excludes=body" in url:
        assert "body" not in source


def test_a_missing_document_is_the_clusters_404_and_exists_reads_it(recorded: tuple[FlaskClient, ClusterProxy], direct: OpenSearchStore) -> None:
    client, recorder = recorded
    status, own = direct.forward("GET", "/papers/_doc/nowhere")
    answer = client.get("/papers/_doc/nowhere")
    assert answer.status_code == status == 404 and answer.get_json() == own and own["found"] is False
    assert client.get("/papers/_source/nowhere").status_code == 404
    recorder.requests.clear()
    for path, status in (("/papers/_doc/ships", 200), ("/papers/_doc/nowhere", 404), ("/papers/_source/ships", 200), ("/papers/_source/nowhere", 404)):
        head = client.head(path)
        assert head.status_code == status and head.data == b"", path
    assert [method for method, _, _ in recorder.requests] == ["HEAD"] * 4, "exists() asks the cluster with a HEAD, no document sent"


def test_mget_reads_documents_of_the_allowed_indices_without_the_services_own_fields(recorded: tuple[FlaskClient, ClusterProxy], direct: OpenSearchStore) -> None:
    client, recorder = recorded
    docs = {"docs": [{"_index": "papers", "_id": "ships"}, {"_index": "papers-v000001", "_id": "harbour"}, {"_index": "papers", "_id": "nowhere"}]}
    status, own = direct.forward("POST", "/_mget", {}, docs)
    assert status == 200 and INTERNAL_FIELDS[0] in own["docs"][0]["_source"]
    recorder.requests.clear()
    answer = client.post("/_mget", json=docs)
    assert answer.status_code == 200 and answer.get_json() == without_internal(own)
    assert [doc["found"] for doc in answer.get_json()["docs"]] == [True, True, False]
    (_, path, _), = _sent(recorder, "/_mget")
    assert _excluded(path) == list(INTERNAL_FIELDS)
    # `ids` with the index in the path, by GET too; the path's index is the default of the docs.
    by_ids = client.get("/papers/_mget", json={"ids": ["ships", "harbour"]}).get_json()
    assert [doc["_id"] for doc in by_ids["docs"]] == ["ships", "harbour"] and internal_in(by_ids) == []
    mixed = client.post("/papers/_mget", json={"docs": [{"_id": "ships", "_source": ["title", "hidden_topics"]}, {"_index": "papers-v000001", "_id": "chess"}]}).get_json()
    assert [doc["found"] for doc in mixed["docs"]] == [True, True]
    assert set(mixed["docs"][0]["_source"]) == {"title", "hidden_topics"}, "named: kept"
    assert INTERNAL.isdisjoint(mixed["docs"][1]["_source"]) and mixed["docs"][1]["_source"]["title"], "named for the first document only"
    # The URL's filter names fields for every document; the cluster leaves out the rest.
    recorder.requests.clear()
    named = client.post("/papers/_mget?_source_includes=title,indexed", json={"ids": ["ships"], "docs": [{"_id": "chess", "_source": True}]}).get_json()
    assert {doc["_id"]: INTERNAL.intersection(doc["_source"]) for doc in named["docs"]} == {"ships": {"indexed"}, "chess": {"indexed"}}
    (_, path, _), = _sent(recorder, "/_mget")
    assert _excluded(path) == [field for field in INTERNAL_FIELDS if field != "indexed"]
    # A document's own filter names fields for it alone, wherever the cluster puts it in its
    # answer (osmem-server answers `docs` before `ids`).
    own = client.post("/papers/_mget", json={"ids": ["ships"], "docs": [{"_id": "chess", "_source": ["title", "hidden_topics"]}]}).get_json()
    assert {doc["_id"]: INTERNAL.intersection(doc["_source"]) for doc in own["docs"]} == {"ships": set(), "chess": {"hidden_topics"}}


@pytest.mark.parametrize(
    ("url", "body", "status", "reason"),
    [
        ("/_mget", {}, 400, "[body] names no document: a multi-get body lists them in docs"),
        ("/papers/_mget", {"docs": [], "ids": ["ships"]}, 400, "[docs] must be a non-empty list"),
        ("/papers/_mget", {"docs": [{"_id": "ships"}], "ids": []}, 400, "[ids] must be a non-empty list"),
        ("/papers/_mget", {"docs": [{"_id": 7}]}, 400, "[docs[0]._id] must be a document id"),
        ("/papers/_mget", {"docs": [{"_id": "ships", "routing": None}]}, 400, "[docs[0].routing] must be a routing value"),
        ("/papers/_mget", {"docs": [{"_id": "ships", "version_type": "force"}]}, 400, "[docs[0].version_type] must be internal, external or external_gte"),
        ("/_mget", {"docs": {"_index": "papers", "_id": "ships"}}, 400, "[docs] must be a non-empty list"),
        ("/_mget", {"docs": ["ships"]}, 400, "[docs[0]] must be an object"),
        ("/_mget", {"docs": [{"_index": "papers"}]}, 400, "[docs[0]._id] must be a document id"),
        ("/_mget", {"docs": [{"_index": ["papers"], "_id": "ships"}]}, 400, "[docs[0]._index] must be an index name"),
        ("/_mget", {"docs": [{"_id": "ships"}]}, 400, "[docs[0]] names no _index, and /_mget has no index"),
        ("/_mget", {"ids": ["ships"]}, 400, "[ids] names documents of the index in the path; /_mget has none"),
        ("/papers/_mget", {"ids": "ships"}, 400, "[ids] must be a non-empty list of document ids"),
        ("/papers/_mget", {"docs": [{"_id": "ships", "_source": {"fields": ["title"]}}]}, 400, "[docs[0]._source.fields] is not a key of a _source filter"),
        ("/papers/_mget", {"docs": [{"_id": "ships"}], "query": {"match_all": {}}}, 403, "[query] is not a multi-get body key the proxy knows"),
        ("/papers/_mget", {"docs": [{"_id": "ships", "fields": ["title"]}]}, 403, "[docs[0].fields] is not a key of a multi-get document the proxy knows"),
        ("/papers/_mget", {"docs": [{"_id": "ships", "index": "papers"}]}, 403, "RERANKER_PROXY_ALLOW=index"),
    ],
)
def test_an_mget_body_of_another_shape_is_refused_before_the_cluster(
    recorded: tuple[FlaskClient, ClusterProxy], url: str, body: dict[str, Any], status: int, reason: str
) -> None:
    client, recorder = recorded
    recorder.requests.clear()
    answer = client.post(url, json=body)
    assert answer.status_code == status and reason in answer.get_json()["error"]["reason"], answer.get_json()
    assert answer.get_json()["error"]["type"] == ("parsing_exception" if status == 400 else "security_exception")
    assert _sent(recorder, "_mget") == []


def test_an_mget_reads_at_most_as_many_documents_as_a_search_returns(recorded: tuple[FlaskClient, ClusterProxy]) -> None:
    """Nothing in the cluster bounds a multi-get, and the worker holds its whole answer: past
    10,000 documents (index.max_result_window's default, the most a search returns) a 413."""
    client, recorder = recorded
    recorder.requests.clear()
    answer = client.post("/papers/_mget", json={"ids": ["ships"] * 5_000, "docs": [{"_id": "chess"}] * 5_001})
    assert answer.status_code == 413 and answer.get_json()["error"]["type"] == "content_too_long_exception", answer.get_json()
    assert "at most 10,000 documents" in answer.get_json()["error"]["reason"] and "got 10,001" in answer.get_json()["error"]["reason"]
    assert _sent(recorder, "_mget") == []
    answer = client.post("/papers/_mget", json={"ids": ["ships"] * 10_000})
    assert answer.status_code == 200 and len(answer.get_json()["docs"]) == 10_000


def test_an_operator_can_forward_an_mget_key_the_proxy_does_not_know(papers: tuple[str, Path]) -> None:
    """The refusal names the setting; with it, the key is forwarded unread (and judged by the cluster)."""
    body = {"docs": [{"_index": "papers", "_id": "ships", "_routing": "x"}]}
    refused = make_app(papers).test_client().post("/_mget", json=body)
    assert refused.status_code == 403 and "RERANKER_PROXY_ALLOW=_routing" in refused.get_json()["error"]["reason"]
    allowed = make_app(papers, RERANKER_PROXY_ALLOW="_routing").test_client().post("/_mget", json=body)
    assert allowed.status_code != 403 and "security_exception" not in allowed.get_data(as_text=True)


def test_an_index_named_documents_is_read_through_mget(papers: tuple[str, Path], direct: OpenSearchStore) -> None:
    """/documents/_doc/ID is the service's stored paper (docs/http-api.md), whatever the
    proxy allows: the cluster's index `documents` is read through /_mget."""
    assert direct.forward("PUT", "/documents/_doc/ships", {"refresh": "true"}, {"title": "not the paper"})[0] in (200, 201)
    try:
        app = make_app(papers, RERANKER_PROXY_INDICES="papers*,documents")
        adapter = app.url_map.bind("localhost")
        assert adapter.match("/papers/_doc/ships", "GET") == ("proxy.get_document", {"index": "papers", "doc_id": "ships"})
        assert adapter.match("/papers/_source/ships", "HEAD")[0] == "proxy.get_source"
        assert adapter.match("/documents/_doc/ships", "GET")[0] == "library.document_by_id"
        client = app.test_client()
        assert client.get("/documents/_doc/ships").get_json()["title"] == "Sailing ships"  # the stored paper
        assert client.get("/documents/_source/ships").get_json()["error"]["reason"] == "no stored document with id '_source/ships'"
        found = client.post("/_mget", json={"docs": [{"_index": "documents", "_id": "ships"}]}).get_json()
        assert found["docs"][0]["_source"] == {"title": "not the paper"}
    finally:
        direct.forward("DELETE", "/documents")


# The reads of `secret` the proxy must refuse, each beside its honest twin (the same read of
# the allowed index), which must answer: the refusal is the index policy's, not of reads.
# (what, method, path, body, the honest path, its body)
SECRET_READS: list[tuple[str, str, str, Any, str, Any]] = [
    ("get", "GET", "/secret/_doc/2", None, "/papers/_doc/ships", None),
    ("exists", "HEAD", "/secret/_doc/2", None, "/papers/_doc/ships", None),
    ("get_source", "GET", "/secret/_source/2", None, "/papers/_source/ships", None),
    ("exists_source", "HEAD", "/secret/_source/2", None, "/papers/_source/ships", None),
    ("get, secret beside an allowed index", "GET", "/papers,secret/_doc/2", None, "/papers/_doc/ships", None),
    ("get, cross-cluster name the pattern matches", "GET", "/papers-vx:secret/_doc/2", None, "/papers-v000001/_doc/ships", None),
    ("get_source, cross-cluster", "GET", "/papers:secret/_source/2", None, "/papers/_source/ships", None),
    ("mget, docs _index", "POST", "/_mget", {"docs": [{"_index": "secret", "_id": "2"}]}, "/_mget", {"docs": [{"_index": "papers", "_id": "ships"}]}),
    ("mget, secret after an allowed document", "POST", "/papers/_mget", {"docs": [{"_id": "ships"}, {"_index": "secret", "_id": "2"}]}, "/papers/_mget", {"docs": [{"_id": "ships"}, {"_index": "papers", "_id": "harbour"}]}),
    ("mget, docs _index cross-cluster", "POST", "/_mget", {"docs": [{"_index": "papers-v1:secret", "_id": "2"}]}, "/_mget", {"docs": [{"_index": "papers-v000001", "_id": "ships"}]}),
    ("mget, docs _index a pattern", "POST", "/_mget", {"docs": [{"_index": "sec*", "_id": "2"}]}, "/_mget", {"docs": [{"_index": "papers", "_id": "ships"}]}),
    ("mget, ids with the default index secret", "POST", "/secret/_mget", {"ids": ["2"]}, "/papers/_mget", {"ids": ["ships"]}),
    ("mget, docs with the default index secret", "GET", "/secret/_mget", {"docs": [{"_id": "2"}]}, "/papers/_mget", {"docs": [{"_id": "ships"}]}),
    ("mget, the path secret, the docs allowed", "POST", "/secret/_mget", {"docs": [{"_index": "papers", "_id": "ships"}]}, "/_mget", {"docs": [{"_index": "papers", "_id": "ships"}]}),
    ("mget, an `index` key beside the _id", "POST", "/papers/_mget", {"docs": [{"_id": "2", "index": "secret"}]}, "/papers/_mget", {"docs": [{"_id": "ships"}]}),
    ("mget in the `source` parameter", "GET", "/papers/_mget?source_content_type=application/json&source=" + quote(json.dumps({"docs": [{"_index": "secret", "_id": "2"}]})), None, "/papers/_mget", {"ids": ["ships"]}),
    ("get with refresh", "GET", "/papers/_doc/ships?refresh=true", None, "/papers/_doc/ships?realtime=true", None),
    ("mget with refresh", "POST", "/papers/_mget?refresh=true", {"ids": ["ships"]}, "/papers/_mget?realtime=false", {"ids": ["ships"]}),
    ("get with the cluster's stack traces", "GET", "/secret/_doc/2?error_trace=true", None, "/papers/_doc/ships?pretty", None),
    ("indices.exists", "HEAD", "/secret", None, "/papers", None),
    ("indices.exists, secret beside an allowed index", "HEAD", "/papers,secret", None, "/papers", None),
    ("indices.exists, a pattern", "HEAD", "/sec*", None, "/papers-v*", None),
    ("indices.exists, cross-cluster", "HEAD", "/papers-vx:secret", None, "/papers-v000001", None),
]


@pytest.mark.parametrize(("what", "method", "path", "body", "honest", "honest_body"), SECRET_READS, ids=[case[0] for case in SECRET_READS])
def test_reads_of_an_index_that_is_not_allowed_reach_nothing(
    recorded: tuple[FlaskClient, ClusterProxy], what: str, method: str, path: str, body: Any, honest: str, honest_body: Any
) -> None:
    client, recorder = recorded
    recorder.requests.clear()
    answer = client.open(path, method=method, json=body)
    assert answer.status_code == 403, (what, answer.status_code, answer.get_data(as_text=True)[:300])
    assert b"canary" not in answer.get_data()
    if method != "HEAD":
        assert answer.get_json()["error"]["type"] == "security_exception"
    for sent_method, sent_path, sent in recorder.requests:
        assert b"secret" not in sent and "secret" not in sent_path, (what, sent_method, sent_path)
        assert not any(api in sent_path for api in ("_mget", "_doc", "_source")), (what, sent_method, sent_path)
    twin = client.open(honest, method=method, json=honest_body)
    assert twin.status_code == 200, (what, twin.get_data(as_text=True)[:300])
    if method != "HEAD":
        assert b"Sailing ships" in twin.get_data() and internal_in(twin.get_json()) == []


# --- request ids and X-Opaque-Id ---------------------------------------------------------


def _opaque_ids(recorder: ClusterProxy) -> set[str | None]:
    """The X-Opaque-Id of each request the cluster received (None: none sent)."""
    return {next((value for name, value in headers.items() if name.lower() == "x-opaque-id"), None) for _, _, headers in recorder.request_headers}


def test_every_cluster_call_of_a_request_carries_its_id(recorded: tuple[FlaskClient, ClusterProxy]) -> None:
    client, recorder = recorded
    recorder.request_headers.clear()
    answer = client.post("/papers/_search", json=summary(SEA, highlight={"fields": {"body": {}}}))
    made = answer.headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made) and "X-Opaque-Id" not in answer.headers
    assert len(recorder.request_headers) >= 2 and _opaque_ids(recorder) == {made}, "the window and the page, tagged alike"
    # The caller's request id (a gateway's) is kept and passed on.
    recorder.request_headers.clear()
    answer = client.post("/papers/_count", json={}, headers={"X-Request-Id": "gw-7f3a:1"})
    assert answer.headers["X-Request-Id"] == "gw-7f3a:1" and _opaque_ids(recorder) == {"gw-7f3a:1"}
    # A caller's own X-Opaque-Id wins, and comes back as the clusters echo it.
    recorder.request_headers.clear()
    answer = client.post("/papers/_search", json=summary(SEA), headers={"X-Opaque-Id": "search-page 3", "X-Request-Id": "gw-8"})
    assert answer.headers["X-Opaque-Id"] == "search-page 3" and answer.headers["X-Request-Id"] == "gw-8"
    assert _opaque_ids(recorder) == {"search-page 3"}
    # The native API's cluster calls too.
    recorder.request_headers.clear()
    answer = client.post("/search", json={"query": SEA, "size": 2})
    assert answer.status_code == 200 and _opaque_ids(recorder) == {answer.headers["X-Request-Id"]}
    # An id that could forge a log line or bloat it is replaced, not refused.
    for unsafe in ("two words", "x" * 129, "-starts-with-a-dash", "quote\"d"):
        answer = client.get("/papers/_count", headers={"X-Request-Id": unsafe})
        assert answer.status_code == 200 and re.fullmatch(r"[0-9a-f]{32}", answer.headers["X-Request-Id"]), unsafe


def test_query_text_comes_from_match_and_multi_match_clauses() -> None:
    assert query_text({"match": {"body": "ships at sea"}}) == "ships at sea"
    assert query_text({"match": {"body": {"query": "ships", "operator": "and"}}}) == "ships"
    assert query_text({"multi_match": {"query": "bread", "fields": ["title"]}}) == "bread"
    nested = {"bool": {"must": {"bool": {"should": [{"match": {"title": "chess"}}, {"match": {"body": "chess"}}]}},
                       "should": [{"multi_match": {"query": "openings"}}], "filter": [{"match": {"venue": "ignored"}}]}}
    assert query_text(nested) == "chess openings"
    assert query_text({"term": {"year": 2005}}) is None
    assert query_text({"match": {"year": 2005}}) is None
    assert query_text({"match_all": {}}) is None


def test_ext_rerank_query_text_reranks_a_search_without_text(client: FlaskClient) -> None:
    body = {"query": {"match_all": {}}, "ext": {"rerank": {"query_text": "a grandmaster plays chess openings with the knight"}}}
    answer = client.post("/papers/_search", json=body).get_json()
    assert answer["ext"]["rerank"]["status"] == "ok"  # and the cluster never saw ext.rerank
    assert ids(answer)[0] == "chess" and len(ids(answer)) == len(CORPUS)
    plain = client.post("/papers/_search", json={"query": {"match_all": {}}}).get_json()
    assert ids(plain)[0] != "chess"


def test_a_failing_ranker_keeps_the_bm25_order_and_says_so(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        name, variant, needs = "broken", None, frozenset()

        def score(self, query: Any, window: Any) -> np.ndarray:
            raise RuntimeError("boom")

    monkeypatch.setitem(reranker.rankers.RANKERS, "broken", lambda options: Broken())
    answer = client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "broken"}})).get_json()
    bm25 = client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "bm25"}})).get_json()
    rerank = answer["ext"]["rerank"]
    assert (rerank["status"], rerank["ranker"]) == ("degraded", "broken") and "boom" in rerank["reason"]
    assert ids(answer) == ids(bm25)
    assert [h["_score"] for h in answer["hits"]["hits"]] == [h["_score"] for h in bm25["hits"]["hits"]]


# --- what is passed through unchanged ---------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body", "reason"),
    [
        ("/papers/_search", {"query": {"match_all": {}}}, "no match or multi_match"),
        ("/papers/_search", {"query": {"term": {"year": 2005}}}, "no match or multi_match"),
        ("/papers/_search", summary("ocean", sort=[{"year": "desc"}]), "sorted by something other than _score"),
        ("/papers/_search?sort=year:asc", summary("ocean"), "sorted by something other than _score"),
        ("/papers/_search", summary("ocean", sort=[{"_score": "asc"}]), "sorted by something other than _score"),
        ("/papers/_search", summary("ocean", sort=[{"_score": "desc"}, "year"], search_after=[1.0, 2000]), "search_after"),
        ("/papers/_search", summary("ocean", size=0), "size is 0"),
        ("/papers/_search", summary("ocean", rescore={"window_size": 5, "query": {"rescore_query": {"match": {"title": "chess"}}}}), "rescore"),
        ("/papers/_search", summary("ocean", collapse={"field": "year"}), "collapsing"),
        ("/papers/_search?q=ocean", {}, "q= URL query"),
        ("/papers/_search", summary("ocean", size=990, **{"from": 20}), "RERANKER_MAX_WINDOW"),
    ],
)
def test_searches_that_cannot_be_reranked_are_forwarded_as_they_are(
    client: FlaskClient, direct: OpenSearchStore, url: str, body: dict[str, Any], reason: str
) -> None:
    answer = client.post(url, json=body)
    path, _, query = url.partition("?")
    params = dict(part.split("=") for part in query.split("&")) if query else {}
    status, own = direct.forward("POST", path, params, body)
    assert answer.status_code == status == 200
    assert without_timing(answer.get_json()) == without_timing(without_internal(own))
    rerank = answer.get_json()["ext"]["rerank"]
    assert rerank["status"] == "not_reranked" and reason in rerank["reason"]


def test_a_scroll_is_refused_unless_an_operator_allows_it(client: FlaskClient, papers: tuple[str, Path]) -> None:
    """A scroll id is not bound to the index it was opened on: refused by default, and
    with RERANKER_PROXY_ALLOW=scroll its keep-alive is capped."""
    for answer in (client.post("/papers/_search?scroll=1m", json=summary("ocean", size=1)),
                   client.post("/_search/scroll", json={"scroll": "1m", "scroll_id": "forged"})):
        assert answer.status_code == 403 and "RERANKER_PROXY_ALLOW=scroll" in answer.get_json()["error"]["reason"]
    allowing = make_app(papers, RERANKER_PROXY_ALLOW="scroll").test_client()
    for keep_alive in ("1d", "11m", "forever"):
        answer = allowing.post(f"/papers/_search?scroll={keep_alive}", json=summary("ocean", size=1))
        assert answer.status_code == 400 and "[scroll]" in answer.get_json()["error"]["reason"], keep_alive


def test_an_allowed_scroll_is_forwarded_and_continues(papers: tuple[str, Path]) -> None:
    client = make_app(papers, RERANKER_PROXY_ALLOW="scroll").test_client()
    first = client.post("/papers/_search?scroll=1m", json=summary("ocean", size=1)).get_json()
    assert first["ext"]["rerank"]["status"] == "not_reranked" and len(ids(first)) == 1
    more = client.post("/_search/scroll", json={"scroll": "1m", "scroll_id": first["_scroll_id"]})
    assert more.status_code == 200 and len(ids(more.get_json())) == 1 and ids(more.get_json()) != ids(first)


def test_an_index_without_hidden_topics_is_forwarded_as_it_is(papers: tuple[str, Path], direct: OpenSearchStore) -> None:
    direct.forward("PUT", "/plain/_doc/1", {"refresh": "true"}, {"body": "ocean sea storm boats"})
    client = make_app(papers, RERANKER_PROXY_INDICES="papers*,plain").test_client()
    answer = client.post("/plain/_search", json={"query": {"match": {"body": "ocean"}}}).get_json()
    assert ids(answer) == ["1"]
    assert answer["ext"]["rerank"]["status"] == "not_reranked" and "[plain] has no hidden topics" in answer["ext"]["rerank"]["reason"]
    mixed = client.post("/papers,plain/_search", json={"query": {"match": {"body": "ocean"}}}).get_json()
    assert "1" in ids(mixed) and mixed["ext"]["rerank"]["status"] == "not_reranked"


def test_rankers_reading_documents_rerank_only_the_index_behind_the_alias(papers: tuple[str, Path], direct: OpenSearchStore) -> None:
    """WMD's words and Doc2Vec's vectors are read through the alias: a search of another
    version is forwarded, said why, rather than scored with the alias's documents."""
    # WMD without a time budget: on a loaded machine the default 1 s could run out and
    # answer "partial", which is not what this test is about.
    client = make_app(papers, RERANKER_WMD_BUDGET_MS="600000", RERANKER_DEADLINE_MS="600000").test_client()
    mapping = direct.forward("GET", "/papers-v000001/_mapping")[1]["papers-v000001"]["mappings"]
    first = client.post("/papers/_search", json=summary(SEA)).get_json()["hits"]["hits"][0]
    assert direct.forward("PUT", "/papers-v000002", {}, {"mappings": mapping})[0] == 200
    try:
        direct.forward("PUT", f"/papers-v000002/_doc/{first['_id']}", {"refresh": "true"}, first["_source"])
        wmd = client.post("/papers-v000002/_search", json=summary(SEA, ext={"rerank": {"ranker": "wmd"}})).get_json()
        assert wmd["ext"]["rerank"]["status"] == "not_reranked"
        assert "reads documents through the alias [papers], and index [papers-v000002] is not behind it" in wmd["ext"]["rerank"]["reason"]
        topics = client.post("/papers-v000002/_search", json=summary(SEA, ext=TOPICS)).get_json()
        assert topics["ext"]["rerank"]["status"] == "ok"  # the paper's topics come with the hits themselves
        # The corrected topics (the default ranker's) are read through the alias, like WMD's words.
        default = client.post("/papers-v000002/_search", json=summary(SEA)).get_json()
        assert default["ext"]["rerank"]["status"] == "not_reranked" and "through the alias" in default["ext"]["rerank"]["reason"]
        behind = client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "wmd"}})).get_json()
        assert behind["ext"]["rerank"]["status"] == "ok" and len(behind["ext"]["rerank"]["scores"]) == len(ids(behind))
    finally:
        direct.forward("DELETE", "/papers-v000002")


def test_the_clusters_errors_come_back_unchanged(client: FlaskClient, direct: OpenSearchStore) -> None:
    for url, body in [
        ("/papers-v000009/_search", summary("ocean")),  # allowed pattern, no such index
        ("/papers/_search", {"query": {"match": {}}}),  # a clause the proxy knows, malformed: forwarded
    ]:
        answer = client.post(url, json=body)
        status, own = direct.forward("POST", url, {}, body)
        assert answer.status_code == status and status in (400, 404)
        assert answer.get_json() == own


GATEWAY_PAGE = """<!DOCTYPE html>
<html><head><title>502 Bad Gateway</title></head>
<body><h1>502 Bad Gateway</h1><p>The upstream server is not answering.</p></body></html>"""


@pytest.mark.parametrize("body", [
    # The window request replaces `_source` (by the topics' field): the query after it moves.
    {"_source": ["title"], "query": {"match": {"title": {"query": SEA, "bogus": 1}}}},
    # The page request (the query inside a bool with the page's ids) carries the highlight.
    {"query": {"match": {"title": SEA}}, "_source": ["title"], "highlight": {"fields": {"title": {"bogus": 1}}}},
], ids=["window", "page"])
def test_a_refused_search_gets_the_clusters_error_for_its_own_body(client: FlaskClient, direct: OpenSearchStore, body: dict[str, Any]) -> None:
    """The cluster's 400 to the proxy's rewrite of a search gave `line`/`col` (and the
    positions its reasons quote) in the rewrite, not in the client's body: the client's own
    search is sent once more, and its error is the one the cluster gives that search. Sent
    compact, as opensearch-py (the proxy's client and `direct`) sends it; the positions of
    a body sent otherwise (indented, say) never matched, the proxy parses and re-serialises it."""
    answer = client.post("/papers/_search", data=json.dumps(body, separators=(",", ":")), content_type="application/json")
    status, error = direct.forward("POST", "/papers/_search", {}, body)
    assert status == 400 and re.search(r'"col"|\[1:\d+\]', json.dumps(error)), error  # osmem-server gives positions
    assert (answer.status_code, answer.get_json()) == (status, error)


def test_a_window_the_index_refuses_leaves_the_search_as_it_is(papers: tuple[str, Path], client: FlaskClient, direct: OpenSearchStore) -> None:
    """The rewrite alone refused (a window above the index's max_result_window): the
    client's own search is answered, not reranked, with the cluster's refusal as the reason."""
    settings = direct.client.indices.get_settings(index="papers")
    (name,) = settings
    # The module's index is shared: put back what it had (null: the cluster's default).
    before = settings[name]["settings"]["index"].get("max_result_window")
    direct.client.indices.put_settings(index=name, body={"index": {"max_result_window": 3}})
    try:
        answer = client.post("/papers/_search", json=summary(SEA, size=2))
        status, found = direct.forward("POST", "/papers/_search", {}, summary(SEA, size=2))
    finally:
        direct.client.indices.put_settings(index=name, body={"index": {"max_result_window": before}})
        assert direct.client.indices.get_settings(index=name)[name]["settings"]["index"].get("max_result_window") == before
    assert answer.status_code == 200 == status, answer.get_json()
    block = answer.get_json()["ext"]["rerank"]
    assert block["status"] == "not_reranked" and "Result window is too large" in block["reason"], block
    assert ids(answer.get_json()) == ids(found)


def test_a_gateways_page_instead_of_the_clusters_answer_is_said_in_one_line(papers: tuple[str, Path]) -> None:
    """A load balancer in front of the cluster answers a search with its own HTML page: the
    proxy's error said "HTTP 502 from the cluster: None", hiding what came back."""
    gateway = ClusterProxy(papers[0], pages={"/_search": (502, GATEWAY_PAGE)})
    app = make_app((gateway.url, papers[1]))
    try:
        answer = app.test_client().post("/papers/_search", json=summary(SEA))
    finally:
        app.extensions["reranker"].close()
        gateway.close()
    assert answer.status_code == 502
    reason = answer.get_json()["error"]["reason"]
    assert reason.startswith("HTTP 502 from the cluster: not OpenSearch's JSON: '502 Bad Gateway") and "None" not in reason
    assert "502 Bad Gateway The upstream server is not answering." in reason and "\n" not in reason and "<" not in reason


def test_searches_are_reranked_as_soon_as_the_index_exists(osmem_server: Any, glove: WordVectors, tmp_path: Path) -> None:
    """An application that searched before `reranker index` created the index (a first
    deployment) got the cluster's 404; once the index existed, its searches came back
    `not_reranked` ("the cluster could not resolve the index") for 30 s more, the lookup
    that failed being cached as a layout."""
    clone = osmem_server.clone()
    try:
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        app = make_app((clone.url, data_dir), RERANKER_INDEX="late")
        client = app.test_client()
        before = client.post("/late/_search", json=summary(SEA, size=3))
        assert before.status_code == 404 and before.get_json()["error"]["type"] == "index_not_found_exception"
        store = OpenSearchStore(OpenSearchSettings(hosts=(clone.url,), alias="late"))
        index_corpus(write_jsonl(tmp_path / "late.jsonl", CORPUS), store, glove, 5, show_progress=False)
        store.close()
        after = client.post("/late/_search", json=summary(SEA, size=3)).get_json()
        assert after["ext"]["rerank"]["status"] == "ok", after["ext"]
        assert ids(after)
    finally:
        clone.close()


def test_searches_of_the_alias_are_reranked_at_once_after_a_rebuild_moves_it(osmem_server: Any, glove: WordVectors, tmp_path: Path) -> None:
    """The proxy remembered which version the alias named for 30 s: after `reranker index
    --rebuild` moved it, every search of the alias came back `not_reranked`, "index
    [late-v000001] is not behind it", though the search had read the new version."""
    clone = osmem_server.clone()
    try:
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        corpus = write_jsonl(tmp_path / "moved.jsonl", CORPUS)
        store = OpenSearchStore(OpenSearchSettings(hosts=(clone.url,), alias="moved"))
        index_corpus(corpus, store, glove, 5, show_progress=False)
        store.close()
        client = make_app((clone.url, data_dir), RERANKER_INDEX="moved").test_client()
        before = client.post("/moved/_search", json=summary(SEA, size=3)).get_json()
        assert before["ext"]["rerank"]["status"] == "ok" and {hit["_index"] for hit in before["hits"]["hits"]} == {"moved-v000001"}
        store = OpenSearchStore(OpenSearchSettings(hosts=(clone.url,), alias="moved"))
        index_corpus(corpus, store, glove, 5, show_progress=False, rebuild=True)
        store.close()
        after = client.post("/moved/_search", json=summary(SEA, size=3)).get_json()
        assert {hit["_index"] for hit in after["hits"]["hits"]} == {"moved-v000002"}
        assert after["ext"]["rerank"]["status"] == "ok", after["ext"]
        assert ids(after) == ids(before)
    finally:
        clone.close()
    # Read again at most once a second: a client searching an old version on purpose
    # must not have every search read the mappings and the alias's metadata again.
    store = OpenSearchStore(OpenSearchSettings(hosts=("http://127.0.0.1:1",), alias="moved"))
    assert store.forget_metadata() and not store.forget_metadata()


def test_a_search_without_an_index_goes_to_the_alias(client: FlaskClient) -> None:
    answer = client.get("/_search", json=summary(SEA)).get_json()
    assert ids(answer) == ids(client.post("/papers/_search", json=summary(SEA)).get_json())
    assert answer["ext"]["rerank"]["status"] == "ok"
    assert {hit["_index"] for hit in answer["hits"]["hits"]} == {"papers-v000001"}


# --- _msearch ----------------------------------------------------------------------------


def test_msearch_reranks_each_search_and_keeps_the_errors(client: FlaskClient) -> None:
    lines = [
        {"index": "papers"}, summary(SEA, size=3),
        {"index": "papers-v000009"}, summary("ocean"),
        {}, {"query": {"match_all": {}}, "size": 2},
        {"index": ["papers-v000001"]}, summary("ocean bread", ext={"rerank": {"ranker": "bm25"}}),
    ]
    answer = client.post("/_msearch", data="".join(json.dumps(line) + "\n" for line in lines), content_type="application/x-ndjson")
    assert answer.status_code == 200
    reranked, missing, plain, bm25 = answer.get_json()["responses"]
    assert ids(reranked) == ids(client.post("/papers/_search", json=summary(SEA, size=3)).get_json())
    assert reranked["ext"]["rerank"]["status"] == "ok" and reranked["status"] == 200
    assert missing["status"] == 404 and missing["error"]["type"] == "index_not_found_exception" and "ext" not in missing
    assert plain["ext"]["rerank"]["status"] == "not_reranked" and len(ids(plain)) == 2
    assert bm25["ext"]["rerank"]["ranker"] == "bm25"
    assert ids(bm25) == ids(client.post("/papers/_search", json=summary("ocean bread", ext={"rerank": {"ranker": "bm25"}})).get_json())


@pytest.mark.parametrize("content_type", ["application/vnd.elasticsearch+x-ndjson; compatible-with=8", "application/vnd.elasticsearch+x-ndjson; compatible-with=9"])
def test_msearch_takes_the_elasticsearch_clients_ndjson_type(client: FlaskClient, content_type: str) -> None:
    """elasticsearch-py 8 and 9 send an _msearch body as `application/vnd.elasticsearch+x-ndjson`
    (their compatibility type, as their searches go as `...+json`): it was a 415."""
    data = "".join(json.dumps(line) + "\n" for line in ({"index": "papers"}, summary(SEA, size=3)))
    answer = client.post("/_msearch", data=data, content_type=content_type)
    assert answer.status_code == 200, answer.get_json()
    (found,) = answer.get_json()["responses"]
    assert found["ext"]["rerank"]["status"] == "ok" and ids(found) == ids(client.post("/papers/_search", json=summary(SEA, size=3)).get_json())
    refused = client.post("/_msearch", data=data, content_type="application/vnd.elasticsearch+x-www-form-urlencoded")
    assert refused.status_code == 415


def test_msearch_pages_of_stored_documents_come_from_one_mget(recorded: tuple[FlaskClient, ClusterProxy], client: FlaskClient) -> None:
    """Pages that are plain stored documents come from one `_mget` for every search (a
    lookup by id), the others (with highlight) from a second _msearch: both give what each
    search gives through _search."""
    proxied, recorder = recorded
    lines = [
        {"index": "papers"}, summary(SEA, size=3, _source=["title"]),
        {"index": "papers", "routing": "x"}, summary("ocean bread", size=2),
        {"index": "papers"}, summary(SEA, size=2, highlight={"fields": {"body": {}}}),
    ]
    recorder.requests.clear()
    answer = proxied.post("/_msearch", data="".join(json.dumps(line) + "\n" for line in lines), content_type="application/x-ndjson")
    assert answer.status_code == 200
    sent = [(path.split("?")[0], body) for _, path, body in recorder.requests if path.split("?")[0] in ("/_msearch", "/_mget")]
    assert [path for path, _ in sent] == ["/_msearch", "/_mget", "/_msearch"]  # (and the indices' mappings, once)
    docs = json.loads(sent[1][1])["docs"]
    assert len(docs) == 5 and [doc.get("routing") for doc in docs] == [None, None, None, "x", "x"]
    assert all(doc["_source"] == ["title"] for doc in docs[:3]) and all(doc["_source"] == {"excludes": list(INTERNAL_FIELDS)} for doc in docs[3:])
    for response, (header, body) in zip(answer.get_json()["responses"], zip(lines[::2], lines[1::2])):
        alone = client.post("/papers/_search" + ("?routing=x" if "routing" in header else ""), json=body).get_json()
        assert response["hits"]["hits"] == alone["hits"]["hits"] and response["ext"]["rerank"]["status"] == "ok"


def compact_ndjson(*lines: dict[str, Any]) -> str:
    """NDJSON as opensearch-py sends it (and the proxy forwards it): each line compact."""
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)


@pytest.mark.parametrize("body", [
    # As in test_a_refused_search_gets_the_clusters_error_for_its_own_body: the window
    # request moves the query (its `_source` replaced), the page request the highlight.
    {"_source": ["title"], "query": {"match": {"title": {"query": SEA, "bogus": 1}}}},
    {"query": {"match": {"title": SEA}}, "_source": ["title"], "highlight": {"fields": {"title": {"bogus": 1}}}},
], ids=["window", "page"])
def test_a_refused_msearch_gets_the_clusters_error_for_its_own_searches(client: FlaskClient, direct: OpenSearchStore, body: dict[str, Any]) -> None:
    """A body the cluster cannot parse refuses a whole _msearch (the cluster parses every
    search before it runs one), with `line`/`col` and quoted positions in that body: in the
    proxy's rewrite of it, before the proxy sent the refused searches again as the client
    sent them. The answer is now the one the cluster gives the client's _msearch."""
    data = compact_ndjson({"index": "papers"}, summary(SEA, size=2), {"index": "papers"}, body)
    answer = client.post("/_msearch", data=data, content_type="application/x-ndjson")
    status, error = direct.forward("POST", "/_msearch", {}, data)
    assert status == 400 and re.search(r'"col"|\[1:\d+\]', json.dumps(error)), error  # osmem-server gives positions
    assert (answer.status_code, answer.get_json()) == (status, error)


def test_msearch_searches_whose_rewrite_is_refused_get_the_clusters_answer_to_their_own(
    papers: tuple[str, Path], recorded: tuple[FlaskClient, ClusterProxy], direct: OpenSearchStore,
) -> None:
    """An _msearch item refused with a 400 as the proxy rewrote it (a window above the
    index's max_result_window; a query the shards refuse) is the cluster's item for the
    search as the client sent it: all of them sent again in one more _msearch, the others
    reranked as ever; one the cluster takes comes back not reranked, the refusal its reason."""
    proxied, recorder = recorded
    lines = [
        {"index": "papers"}, summary(SEA, size=2, ext={"rerank": {"window": 3}}),  # within the index's window: reranked
        {"index": "papers"}, summary(SEA, size=2),  # the service's window is above it: refused
        {"index": "papers"}, {"query": {"bool": {"must": [summary(SEA)["query"], {"regexp": {"title": "[a"}}]}}, "size": 2},  # a shard error
        {"index": "papers-v000009"}, summary("ocean"),  # a 404: as it came, not sent again
    ]
    settings = direct.client.indices.get_settings(index="papers")
    (name,) = settings
    # The module's index is shared: put back what it had (null: the cluster's default).
    before = settings[name]["settings"]["index"].get("max_result_window")
    direct.client.indices.put_settings(index=name, body={"index": {"max_result_window": 3}})
    try:
        recorder.requests.clear()
        answer = proxied.post("/_msearch", data=compact_ndjson(*lines), content_type="application/x-ndjson")
        status, found = direct.forward("POST", "/_msearch", {}, compact_ndjson(*(line if "ext" not in line else summary(SEA, size=2) for line in lines)))
    finally:
        direct.client.indices.put_settings(index=name, body={"index": {"max_result_window": before}})
        assert direct.client.indices.get_settings(index=name)[name]["settings"]["index"].get("max_result_window") == before
    assert answer.status_code == 200 == status, answer.get_json()
    reranked, refused, failed, missing = answer.get_json()["responses"]
    _, alone, error, absent = found["responses"]
    assert reranked["ext"]["rerank"]["status"] == "ok", reranked
    block = refused["ext"]["rerank"]
    assert block["status"] == "not_reranked" and "Result window is too large" in block["reason"], block
    assert refused["hits"]["hits"] == without_internal(alone["hits"]["hits"])
    assert error["status"] == 400 and failed == error and missing == absent
    sent = [(path.split("?")[0], body) for _, path, body in recorder.requests if path.split("?")[0] in ("/_msearch", "/_mget")]
    assert [path for path, _ in sent] == ["/_msearch", "/_mget", "/_msearch"]
    assert sent[2][1].decode() == compact_ndjson(*lines[2:6])


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "empty"),
        (b'{"index": "papers"}\n', "_msearch body has 1 line; expected a header line and a body line per search (the last header has no body)"),
        (b'{}\n{}\n{}\n', "_msearch body has 3 lines; expected"),
        (b'{"index": "papers"}\n{"query": \n', "line 2 is not valid JSON"),
        (b'{"index": "papers"}\n[1, 2]\n', "line 2 must be a JSON object"),
        (b'{"index": "papers"}\n{"query": "\xff"}\n', "not UTF-8"),
        (b'{"index": 7}\n{}\n', "[index] must be a string"),
        (b'{}\n{"size": "ten"}\n', "search 1: [size] must be an integer"),
        (b'{}\n{}\n{"index": "other"}\n{}\n', "does not forward to index [other]"),
    ],
)
def test_msearch_bodies_that_are_not_ndjson_searches_are_refused(client: FlaskClient, data: bytes, expected: str) -> None:
    answer = client.post("/_msearch", data=data, content_type="application/x-ndjson")
    assert answer.status_code in (400, 403) and expected in answer.get_json()["error"]["reason"]


def test_a_declared_charset_is_forwarded_as_the_cluster_reads_it_and_bytes_not_utf8_never_are(recorded: tuple[FlaskClient, ClusterProxy]) -> None:
    """The proxy parses a body as UTF-8 and forwards it so: what OpenSearch itself reads, whatever
    charset the Content-Type names. UTF-8 bytes labelled ISO-8859-1 are served as the cluster
    would serve them; bytes that are not UTF-8 are a 400 naming the label, and go nowhere."""
    client, recorder = recorded
    search = '{"query": {"match": {"text": "règles"}}}'
    for url, data, media in (
        ("/papers/_search", search, "application/json"),
        ("/papers/_count", search, "application/json"),
        ("/_mget", '{"docs": [{"_index": "papers", "_id": "règles"}]}', "application/json"),
        ("/papers/_msearch", "{}\n" + search + "\n", "application/x-ndjson"),
    ):
        recorder.requests.clear()
        answer = client.post(url, data=data.encode("latin-1"), content_type=f"{media}; charset=ISO-8859-1")
        assert answer.status_code == 400, (url, answer.get_data(as_text=True))
        assert "declared as charset=ISO-8859-1, is not UTF-8" in answer.get_json()["error"]["reason"], url
        # (The proxy may read the alias and mappings; the body goes nowhere.)
        assert [path for _, path, _ in recorder.requests if path.split("?")[0].endswith(("_search", "_count", "_mget", "_msearch"))] == []
        assert client.post(url, data=data.encode(), content_type=f"{media}; charset=ISO-8859-1").status_code == 200, url


# --- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/papers/_close", None),
        ("POST", "/papers/_doc", {"title": "x"}),
        ("POST", "/_bulk", '{"delete": {"_index": "papers", "_id": "ships"}}\n'),
        ("POST", "/papers/_update/ships", {"doc": {"title": "x"}}),
        ("POST", "/papers/_delete_by_query", {"query": {"match_all": {}}}),
        ("GET", "/_cluster/settings", None),
        ("PUT", "/_cluster/settings", {"persistent": {}}),
        ("PUT", "/papers/_create/ships", {"title": "x"}),
        ("GET", "/papers/_termvectors/ships", None),
        ("POST", "/_aliases", {"actions": [{"remove": {"index": "papers-v000001", "alias": "papers"}}]}),
    ],
)
def test_writes_and_administration_are_refused_and_never_reach_the_cluster(
    client: FlaskClient, direct: OpenSearchStore, method: str, path: str, body: Any
) -> None:
    data = body if isinstance(body, str) or body is None else json.dumps(body)
    answer = client.open(path, method=method, data=data, content_type="application/json")
    assert answer.status_code == 403
    error = answer.get_json()["error"]
    assert error["type"] == "security_exception" and f"{method} {path} is refused" in error["reason"]
    assert direct.count() == len(CORPUS)
    assert direct.documents(["ships"])["ships"].title == "Sailing ships"


def test_a_search_route_asked_with_another_method_is_a_405_and_never_forwarded(client: FlaskClient, direct: OpenSearchStore) -> None:
    for method, path in (("PUT", "/papers/_search"), ("DELETE", "/papers/_search"), ("PUT", "/_msearch"), ("DELETE", "/_search/scroll")):
        answer = client.open(path, method=method, data=json.dumps(summary("ocean")), content_type="application/json")
        assert answer.status_code == 405 and set(answer.headers["Allow"].split(", ")) - {"HEAD", "OPTIONS"} == {"GET", "POST"}, path
    # OPTIONS answers here, as OpenSearch does: an empty 200 typed text/plain (not text/html).
    for path in ("/papers/_search", "/_msearch"):
        answer = client.options(path)
        assert answer.status_code == 200 and answer.data == b"" and answer.headers["Content-Type"] == "text/plain; charset=utf-8", path
        assert set(answer.headers["Allow"].split(", ")) - {"HEAD", "OPTIONS"} == {"GET", "POST"}, path
    assert direct.count() == len(CORPUS)


def test_the_native_routes_win_over_the_catch_all(app: Flask, client: FlaskClient) -> None:
    adapter = app.url_map.bind("localhost")
    for method, path in [("GET", "/"), ("POST", "/search"), ("POST", "/rerank"), ("GET", "/rankers"), ("GET", "/healthz"),
                         ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/openapi.json"), ("POST", "/v1/rerank"), ("POST", "/v2/rerank")]:
        endpoint, _ = adapter.match(path, method)
        assert not endpoint.startswith("proxy."), (method, path)
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert "hidden_topics" in json.dumps(client.get("/rankers").get_json())
    wrong = client.get("/search")  # a native route with another method: 405, not the proxy's 403
    assert wrong.status_code == 405 and "POST" in wrong.headers["Allow"]
    assert client.post("/healthz").status_code == 405
    # An index named like a path Flask would serve itself (its default /static) is the proxy's,
    # whatever the method: GET /static/_search was a bare 404.
    for method in ("GET", "POST"):
        answer = client.open("/static/_search", method=method, json={})
        assert answer.status_code == 403 and "does not forward to index [static]" in answer.get_json()["error"]["reason"], method


def test_the_library_and_the_page_win_over_the_catch_all(app: Flask, client: FlaskClient) -> None:
    """Routes with converters (/documents/<doc_id>) and the page's files are not proxied."""
    adapter = app.url_map.bind("localhost")
    for path, expected in [("/documents/ships", "library.document"), ("/documents/ships/similar", "library.similar"),
                           ("/ui", "web.page"), ("/ui/static/app.js", "web.static")]:
        assert adapter.match(path, "GET")[0] == expected, path
    # An index named "documents" is still searched through the proxy.
    for method in ("GET", "POST"):
        assert adapter.match("/documents/_search", method)[0] == "proxy.search"
        assert adapter.match("/documents/_msearch", method)[0] == "proxy.msearch"
        assert adapter.match("/documents/_count", method)[0] == "proxy.count", method  # GET was the document route's
    # ... and a document of any id, those ones too, is named by the _doc form.
    assert adapter.match("/documents/_doc/_count", "GET") == ("library.document_by_id", {"doc_id": "_count"})
    assert adapter.match("/documents/_doc/_search/similar", "GET") == ("library.similar_by_id", {"doc_id": "_search"})
    # The routes see an id as paths.DocumentPaths hands it over: one percent-encoded segment.
    assert adapter.match("/documents/_doc/10.1145%2F3397271", "GET") == ("library.document_by_id", {"doc_id": "10.1145/3397271"})
    assert adapter.match("/documents/10.1145%2F3397271/similar", "GET") == ("library.similar", {"doc_id": "10.1145/3397271"})
    paper = client.get("/documents/ships")  # served from the OpenSearch store
    assert paper.status_code == 200 and paper.get_json()["title"] == "Sailing ships"
    similar = client.get("/documents/ships/similar?size=2").get_json()["hits"]
    assert len(similar) == 2 and "ships" not in {h["id"] for h in similar}
    assert client.get("/documents/nowhere").get_json()["error"]["type"] == "document_missing_exception"
    assert client.get("/ui").mimetype == "text/html"


def test_the_experiment_routes_win_over_the_catch_all(app: Flask) -> None:
    adapter = app.url_map.bind("localhost")
    assert adapter.match("/events", "POST")[0] == "experiments.events"
    assert adapter.match("/experiments", "GET")[0] == "experiments.experiments"
    assert adapter.match("/experiments", "POST")[0] == "experiments.create"
    assert adapter.match("/experiments/exp-1", "GET") == ("experiments.show", {"experiment_id": "exp-1"})
    assert adapter.match("/experiments/exp-1", "PATCH") == ("experiments.change", {"experiment_id": "exp-1"})
    # An index named "experiments" is still searched through the proxy.
    assert adapter.match("/experiments/_search", "GET")[0] == "proxy.search"
    assert adapter.match("/experiments/_msearch", "POST")[0] == "proxy.msearch"
    assert adapter.match("/experiments/_count", "GET")[0] == "proxy.count"  # was experiments.show


def test_only_the_allowed_indices_are_searched(client: FlaskClient, papers: tuple[str, Path]) -> None:
    for path in ("/other/_search", "/papers,other/_search", "/_all/_search", "/*/_search", "/other/_msearch"):
        answer = client.post(path, json=summary("ocean"))
        assert answer.status_code == 403, path
        assert "allowed index patterns: papers, papers-v* (RERANKER_PROXY_INDICES)" in answer.get_json()["error"]["reason"]
    assert client.post("/papers,papers-v000001/_search", json=summary("ocean")).status_code == 200
    custom = make_app(papers, RERANKER_PROXY_INDICES="pap*").test_client()
    assert custom.post("/papers/_search", json=summary("ocean")).status_code == 200
    assert custom.post("/_search", json=summary("ocean")).status_code == 200
    assert make_app(papers, RERANKER_PROXY_INDICES="other").test_client().post("/_search", json=summary("ocean")).status_code == 403


# Every place a search body can name another index to read from (OpenSearch query DSL).
READS_ANOTHER_INDEX = [
    {"query": {"terms": {"_id": {"index": "secret", "id": "2", "path": "tag"}}}},  # terms lookup
    {"query": {"more_like_this": {"fields": ["text"], "like": [{"_index": "secret", "_id": "3"}], "min_term_freq": 1}}},
    {"query": {"more_like_this": {"fields": ["text"], "like": "ships", "unlike": [{"_index": "secret", "_id": "3"}]}}},
    {"query": {"more_like_this": {"fields": ["text"], "like": {"_index": "secret", "doc": {"text": "ships"}}}}},
    {"query": {"geo_shape": {"where": {"indexed_shape": {"index": "secret", "id": "2", "path": "shape"}}}}},
    {"query": {"shape": {"where": {"indexed_shape": {"index": "secret", "id": "2", "path": "shape"}}}}},
    {"query": {"percolate": {"field": "query", "index": "secret", "id": "2"}}},
    {"query": {"pinned": {"docs": [{"_index": "secret", "_id": "2"}], "organic": {"match_all": {}}}}},
    {"query": {"bool": {"should": [{"match": {"text": "ships"}}, {"terms": {"tag": {"index": "secret", "id": "2", "path": "tag"}}}]}}},
    {"query": {"match": {"text": "ships"}}, "aggs": {"a": {"filter": {"terms": {"_id": {"index": "sec*", "id": "2", "path": "tag"}}}}}},
    {"query": {"more_like_this": {"fields": ["text"], "like": [{"_index": ["papers", "secret"], "_id": "3"}]}}},
]


@pytest.fixture
def recorded(papers: tuple[str, Path]) -> Iterator[tuple[FlaskClient, ClusterProxy]]:
    """A client of a proxy app whose cluster requests pass through a recording proxy,
    with a canary index `secret` in the cluster that no search may read."""
    url, _ = papers
    urllib.request.urlopen(urllib.request.Request(f"{url}/secret/_doc/2?refresh=true", data=json.dumps({"tag": "canary", "text": "ships"}).encode(), method="PUT", headers={"Content-Type": "application/json"})).close()
    recorder = ClusterProxy(url)
    try:
        yield make_app((recorder.url, papers[1])).test_client(), recorder
    finally:
        recorder.close()
        urllib.request.urlopen(urllib.request.Request(f"{url}/secret", method="DELETE")).close()


@pytest.mark.parametrize("body", READS_ANOTHER_INDEX)
def test_a_search_cannot_read_an_index_that_is_not_allowed(recorded: tuple[FlaskClient, ClusterProxy], body: dict[str, Any]) -> None:
    client, recorder = recorded
    for path, data in [("/papers/_search", json.dumps(body)), ("/papers/_msearch", "{}\n" + json.dumps(body) + "\n")]:
        answer = client.post(path, data=data, content_type="application/json")
        assert answer.status_code == 403, (path, answer.get_json())
        error = answer.get_json()["error"]
        assert error["type"] == "security_exception" and "reads another index" in error["reason"] and "RERANKER_PROXY_INDICES" in error["reason"]
    # Refused before any search was sent (the service may have read the alias's metadata).
    reads = [(method, path) for method, path, sent in recorder.requests
             if b"secret" in sent or "secret" in path or any(api in path for api in ("_search", "_msearch", "_mget"))]
    assert reads == []


def test_url_parameters_the_client_library_would_keep_reach_the_cluster(recorded: tuple[FlaskClient, ClusterProxy]) -> None:
    """opensearch-py takes `timeout`, `request_timeout` and `ignore` from its params for
    itself; the proxy forwards them to the cluster as the client sent them."""
    client, recorder = recorded
    answer = client.post("/papers/_search?timeout=1s", json=summary("ocean"))
    assert answer.status_code == 200
    client.post("/papers/_search?ignore=404&request_timeout=5", json=summary("ocean"))  # the cluster's answer, whatever it is
    sent = [path for _, path, _ in recorder.requests if "_search" in path]
    assert any("timeout=1s" in path for path in sent) and any("ignore=404" in path and "request_timeout=5" in path for path in sent)


def test_searches_naming_allowed_indices_or_fields_called_index_still_pass(
    recorded: tuple[FlaskClient, ClusterProxy], papers: tuple[str, Path]
) -> None:
    client, recorder = recorded
    allowed = {"query": {"more_like_this": {"fields": ["text"], "like": [{"_index": "papers", "_id": "ships"}], "min_term_freq": 1, "min_doc_freq": 1}}}
    assert client.post("/papers/_search", json=allowed).status_code == 403  # reads documents: guarded
    operator = make_app((recorder.url, papers[1]), RERANKER_PROXY_ALLOW="more_like_this").test_client()
    assert operator.post("/papers/_search", json=allowed).status_code == 200
    a_field_called_index = {"query": {"bool": {"should": [{"match": {"index": "ships"}}, {"term": {"index": {"value": "x"}}}]}}}
    assert client.post("/papers/_search", json=a_field_called_index).status_code == 200
    assert recorder.requests  # these did reach the cluster
    assert client.post("/papers/_search", json={"query": {"ids": {"values": ["ships"]}}, "x": {"_index": 3}}).status_code in (400, 403)


@pytest.mark.parametrize(
    ("url", "data", "expected"),
    [
        ("/papers/_search", b'{"query": ', "not valid JSON"),
        ("/papers/_search", b'{"query": "\xff"}', "not UTF-8"),
        ("/papers/_search", b"[1]", "must be a JSON object"),
        ("/papers/_search", b'{"size": "ten"}', "[size] must be an integer"),
        ("/papers/_search", b'{"from": -1}', "[from] must be >= 0"),
        ("/papers/_search", b'{"size": 1.5}', "[size] must be an integer"),
        ("/papers/_search?size=ten", b"{}", "[size] URL parameter must be an integer"),
        ("/papers/_search?format=yaml", b"{}", "JSON only"),
        ("/papers/_search", b'{"ext": {"rerank": "hidden_topics"}}', "[ext.rerank] must be an object"),
        ("/papers/_search", b'{"ext": {"rerank": {"rankers": "bm25"}}}', "unknown field [ext.rerank.rankers]"),
        ("/papers/_search", b'{"ext": {"rerank": {"window": 5000}}}', "RERANKER_MAX_WINDOW"),
        ("/papers/_search", b'{"ext": {"rerank": {"query_text": " "}}}', "must not be empty"),
        ("/papers/_search", b'{"ext": {"rerank": {"ranker": "magic"}}}', "valid rankers: bm25, doc2vec"),
        # Numbers that overflow, and digits that are not ASCII (they gave 500s).
        ("/papers/_search", b'{"size": 1e400}', "out of range"),
        ("/papers/_search", b'{"from": -1e400}', "out of range"),
        ("/papers/_search", b'{"ext": {"rerank": {"window": 1e400}}}', "out of range"),
        ("/papers/_msearch", b'{}\n{"size": 1e400}\n', "out of range"),
        ("/papers/_msearch", b'{"size": 1e400}\n{}\n', "out of range"),
        ("/papers/_search?size=%C2%B9", b"{}", "[size] URL parameter must be an integer"),
        ("/papers/_search?from=%E2%91%A0", b"{}", "[from] URL parameter must be an integer"),
        ("/papers/_search?size=99999999999999999999999", b"{}", "[size] URL parameter must be an integer"),
        ("/papers/_search", b'{"query": {"match": {"text": "\\ud800"}}}', "lone surrogate"),
        # A repeated key, as the cluster refuses it (json_parse_exception), not one of the two forwarded.
        ("/papers/_search", b'{"query": {"match": {"text": "ships", "text": "boats"}}}', "Duplicate field 'text' at [query.match.text]"),
        ("/papers/_search", b'{"size": 3, "ext": {"rerank": {"window": 20, "window": 50}}}', "Duplicate field 'window' at [ext.rerank.window]"),
        ("/papers/_msearch", b'{}\n{"query": {"match_all": {}}, "size": 1, "size": 2}\n', "_msearch line 2: Duplicate field 'size' at [size]"),
        ("/papers/_msearch", b'{"index": "papers", "index": "other"}\n{}\n', "_msearch line 1: Duplicate field 'index' at [index]"),
    ],
)
def test_malformed_searches_are_400(client: FlaskClient, url: str, data: bytes, expected: str) -> None:
    answer = client.post(url, data=data, content_type="application/json")
    assert answer.status_code == 400 and expected in answer.get_json()["error"]["reason"]


def test_without_a_cluster_the_proxy_routes_say_what_is_missing(tmp_path: Path, data_dir: Path) -> None:
    client = create_app(Settings.from_env(settings_env(data_dir, HOME=str(tmp_path)))).test_client()
    # An index outside RERANKER_PROXY_INDICES too: the cluster is what is missing, not a pattern.
    for path in ("/_search", "/reranker/_search", "/_msearch", "/_search/scroll", "/papers/_search", "/papers/_count", "/papers/_msearch"):
        answer = client.post(path, json={})
        assert answer.status_code == 404 and "OPENSEARCH_URL" in answer.get_json()["error"]["reason"], path
        assert answer.get_json()["error"]["type"] == "resource_not_found_exception"
    # /documents/_search may name the document "_search": the answer says how to ask for it.
    answer = client.get("/documents/_search")
    assert answer.status_code == 404 and "/documents/_doc/" in answer.get_json()["error"]["reason"]
    assert client.head("/papers").status_code == 404  # indices.exists: no cluster to ask
    # Any other route is simply not there (README: "unknown routes are 404").
    for method, path in (("DELETE", "/reranker/_settings"), ("GET", "/nowhere/x"), ("POST", "/a/b/c")):
        answer = client.open(path, method=method)
        assert answer.status_code == 404 and answer.get_json()["error"]["type"] == "resource_not_found_exception", path
    # The service's own routes asked with a method they do not have: 405, and Allow lists
    # what they do have (paths with parameters and paths with one rule per method too).
    for method, path, allowed in (("PUT", "/search", {"POST"}), ("DELETE", "/documents/ships", {"GET"}),
                                  ("PUT", "/experiments", {"GET", "POST"}), ("PUT", "/experiments/e1", {"GET", "PATCH", "DELETE"}),
                                  ("POST", "/healthz", {"GET"}), ("HEAD", "/search", {"POST"})):
        answer = client.open(path, method=method)
        assert answer.status_code == 405, (method, path)
        assert set(answer.headers["Allow"].split(", ")) - {"HEAD", "OPTIONS"} == allowed, (path, answer.headers["Allow"])
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_a_cluster_that_is_down_is_a_503_with_retry_after(papers: tuple[str, Path]) -> None:
    client = make_app(papers, OPENSEARCH_URL="http://127.0.0.1:9", OPENSEARCH_RETRIES="0").test_client()
    for path, body in [("/papers/_search", summary("ocean")), ("/papers/_search", {}), ("/_msearch", "{}\n{}\n"), ("/papers/_mget", {"ids": ["ships"]})]:
        answer = client.post(path, data=body if isinstance(body, str) else json.dumps(body), content_type="application/json")
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
        assert answer.get_json()["error"]["type"] == "store_unavailable_exception"
    # A document read too (its HEAD, a client's exists(), has the status and header alone).
    for method in ("GET", "HEAD"):
        for path in ("/papers/_doc/ships", "/papers/_source/ships"):
            answer = client.open(path, method=method)
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "5", (method, path)
    # The cluster's GET / is no search: the error names the request it was.
    answer = client.get("/")
    assert answer.status_code == 503 and "cannot reach OpenSearch at http://127.0.0.1:9 (GET /): " in answer.get_json()["error"]["reason"]


def test_the_proxy_takes_a_fusion_weight_per_request(client: FlaskClient) -> None:
    def order(rerank: dict[str, Any]) -> list[str]:
        answer = client.post("/papers/_search", json=summary(SEA, ext={"rerank": rerank}))
        assert answer.status_code == 200, answer.get_json()
        return ids(answer.get_json())

    bm25, topics = order({"ranker": "bm25"}), order({"ranker": "hidden_topics"})
    assert bm25 != topics
    assert order({"ranker": "hidden_topics+bm25", "fusion_weight": 0}) == bm25
    assert order({"ranker": "hidden_topics+bm25", "fusion_weight": 1}) == topics
    refused = client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "hidden_topics+bm25", "fusion_weight": 2}}))
    assert refused.status_code == 400 and "[ext.rerank.fusion_weight] must be <= 1.0, got 2" in refused.get_json()["error"]["reason"]
    refused = client.post("/papers/_search", json=summary(SEA, ext={"rerank": {"ranker": "bm25", "fusion_weight": 0.5}}))
    assert refused.status_code == 400 and "[ext.rerank.fusion_weight] weighs a min-max, z-score or maxp fusion with BM25; ranker 'bm25' has no weight" in refused.get_json()["error"]["reason"]


@pytest.fixture(scope="module")
def served(papers: tuple[str, Path]) -> Iterator[tuple[str, ClusterProxy, dict[str, Any]]]:
    """(the proxy's URL, over real HTTP; the recording proxy in front of the cluster; the
    cluster's own GET /). The recorder adds the product headers the clusters send
    (osmem-server sends X-Elastic-Product itself, but the recorder passes bodies only) and
    a deprecation Warning."""
    import threading

    from werkzeug.serving import make_server

    url, data_dir = papers
    cluster = json.loads(urllib.request.urlopen(url + "/").read())
    recorder = ClusterProxy(url, headers={"X-Elastic-Product": "Elasticsearch", "Warning": '299 Elasticsearch "a deprecation"'})
    server = make_server("127.0.0.1", 0, make_app((recorder.url, data_dir)), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", recorder, cluster
    finally:
        server.shutdown()
        recorder.close()


@pytest.mark.filterwarnings("ignore:a deprecation")  # the fake cluster's Warning header, as the service's client reads it
def test_the_clusters_product_headers_reach_the_client(served: tuple[str, ClusterProxy, dict[str, Any]]) -> None:
    """Elasticsearch clients from 7.14 refuse a server without X-Elastic-Product; Warning
    carries the cluster's deprecations. `GET /` is the cluster's own answer."""
    proxy, _, cluster = served
    with urllib.request.urlopen(proxy + "/") as answer:
        assert answer.headers["X-Elastic-Product"] == "Elasticsearch" and answer.headers["X-Reranker"].startswith("reranker ")
        assert json.loads(answer.read())["version"] == cluster["version"]
    request = urllib.request.Request(proxy + "/papers/_search", data=json.dumps(summary(SEA)).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        assert answer.headers["X-Elastic-Product"] == "Elasticsearch" and "a deprecation" in answer.headers["Warning"]


@pytest.mark.filterwarnings("ignore:a deprecation")
def test_an_application_checks_its_index_through_the_proxy_at_start_up(served: tuple[str, ClusterProxy, dict[str, Any]]) -> None:
    """opensearch-py's `indices.exists` (HEAD /INDEX), which applications call before they
    search (creating the index when it says False), and `ping` (HEAD /): the cluster's
    answers for the allowed indices; any other is a 403 (AuthorizationException, as for
    every index the proxy does not forward) and is never asked of the cluster."""
    from opensearchpy import AuthorizationException, OpenSearch

    proxy, recorder, _ = served
    client = OpenSearch(hosts=[proxy])
    recorder.requests.clear()
    try:
        assert client.ping() is True
        assert client.indices.exists(index="papers") is True  # the alias
        assert client.indices.exists(index="papers-v000001") is True
        assert client.indices.exists(index="papers-v999999") is False  # allowed, and the cluster's 404
        with pytest.raises(AuthorizationException):
            client.indices.exists(index="secret")
        with pytest.raises(AuthorizationException):
            client.indices.exists(index="_all")
    finally:
        client.close()
    sent = [(method, path) for method, path, _ in recorder.requests]
    assert ("HEAD", "/papers") in sent and ("HEAD", "/papers-v999999") in sent
    assert not any("secret" in path or "_all" in path for _, path in sent), sent


def single_segment_routes(app: Flask) -> dict[str, set[str]]:
    """The service's own routes of one path segment (/healthz, /search, ...), each with its
    methods (of one rule or of several: GET and POST /experiments)."""
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if not rule.arguments and rule.rule.count("/") == 1 and rule.rule != "/" and not rule.endpoint.startswith("proxy."):
            routes.setdefault(rule.rule[1:], set()).update(set(rule.methods or ()) - {"HEAD", "OPTIONS"})
    return routes


def test_head_of_a_name_the_services_routes_take_keeps_their_meaning(app: Flask, client: FlaskClient, direct: OpenSearchStore) -> None:
    """HEAD /NAME is indices.exists through the proxy, but where one of the service's own
    routes is /NAME: a GET route's HEAD is that route's (HEAD /healthz, a probe), a POST
    route's a 405 as ever (HEAD /search). docs/proxy.md names them, as names whose index is
    not checked through the proxy."""
    routes = single_segment_routes(app)
    assert {"healthz", "search", "rerank", "events", "experiments"} <= set(routes)
    adapter = app.url_map.bind("localhost")
    for name, methods in routes.items():
        if "GET" in methods:
            assert not adapter.match(f"/{name}", "HEAD")[0].startswith("proxy."), name
        else:
            answer = client.head(f"/{name}")
            assert answer.status_code == 405 and set(answer.headers["Allow"].split(", ")) - {"OPTIONS"} == methods, name
    assert client.head("/healthz").status_code == 200
    listed = re.search(r"^- The names the service's own routes take: (.*)$", (REPO / "docs" / "proxy.md").read_text(), re.MULTILINE)
    assert listed is not None and set(re.findall(r"`([^`]+)`", listed.group(1))) == set(routes)
    # Any other method of an index's path, a write or a read of its settings and mappings
    # (indices.get), is a 405 that says HEAD is its one method here, as a write to a
    # document read's path is; OPTIONS says so too.
    for method in ("PUT", "DELETE", "GET", "POST"):
        answer = client.open("/papers", method=method, json={"title": "x"} if method in ("PUT", "POST") else None)
        assert answer.status_code == 405 and set(answer.headers["Allow"].split(", ")) == {"HEAD", "OPTIONS"}, method
    assert direct.count() == len(CORPUS)  # nothing written, nothing deleted
    answer = client.options("/papers")
    assert answer.status_code == 200 and set(answer.headers["Allow"].split(", ")) == {"HEAD", "OPTIONS"}


@pytest.fixture(scope="session")
def elasticsearch9(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """elasticsearch-py 9 (its `elasticsearch9` package), installed apart from the test
    extra's elasticsearch-py 8: 9 needs elastic-transport 9, which 8 refuses, so the two
    cannot share an environment. Needs the package index, as installing the project does."""
    target = tmp_path_factory.mktemp("elasticsearch9")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-conflicts",
         "--target", str(target), "elasticsearch9>=9,<10"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"could not install elasticsearch-py 9 for this test: {done.stderr[-2000:]}"
    return target


@pytest.mark.filterwarnings("ignore:a deprecation")
@pytest.mark.parametrize(
    ("client", "major", "compress"),
    [("opensearchpy", None, "plain"), ("opensearchpy", None, "gzip"), ("elasticsearch", "8", "plain"), ("elasticsearch9", "9", "plain")],
)
def test_search_clients_search_and_count_through_the_proxy(
    served: tuple[str, ClusterProxy, dict[str, Any]], direct: OpenSearchStore, request: pytest.FixtureRequest, client: str, major: str | None, compress: str
) -> None:
    """opensearch-py and elasticsearch-py 8 and 9 pointed at the proxy, each in its own
    process (tests/search_clients.py): `info()` is the cluster's, the search and a multi-search are reranked and
    its documents come without the service's own fields, the count is the cluster's, and
    the X-Opaque-Id the client sets reaches the cluster with every call made for it.
    opensearch-py also with `http_compress=True`, which sends its bodies as gzip."""
    proxy, recorder, cluster = served
    env = dict(os.environ)
    if client == "elasticsearch9":
        env["PYTHONPATH"] = str(request.getfixturevalue("elasticsearch9"))
    recorder.request_headers.clear()
    opaque = f"app-{client}"
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "search_clients.py"), client, proxy, opaque, compress], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    if major is not None:
        assert seen["version"].split(".")[0] == major
    assert seen["info"]["version"]["number"] == cluster["version"]["number"] and seen["info"]["cluster_name"] == cluster["cluster_name"]
    found = seen["search"]
    assert found["ext"]["rerank"]["status"] == "ok" and found["ext"]["rerank"]["ranker"] == "hidden_topics"
    assert len(ids(found)) == 3 and all(hit["_source"]["title"] for hit in found["hits"]["hits"]) and internal_in(found) == []
    status, own = direct.forward("POST", "/papers/_count", {}, {"query": summary(SEA)["query"]})
    assert status == 200 and seen["count"] == own["count"] > 0
    # A detail page's reads: the document without the service's own fields (with the one it
    # names), exists() True and False, a missing document the cluster's 404.
    reads = seen["reads"]
    assert reads["get"]["found"] and reads["get"]["_source"]["title"] == "Sailing ships" and internal_in(reads["get"]) == []
    assert INTERNAL.intersection(reads["get_named"]["_source"]) == {"hidden_topics"}
    assert (reads["exists"], reads["exists_missing"]) == (True, False)
    assert reads["get_source"]["title"] == "Sailing ships" and INTERNAL.isdisjoint(reads["get_source"])
    assert [doc["found"] for doc in reads["mget"]["docs"]] == [True, False] and internal_in(reads["mget"]) == []
    assert [doc["_id"] for doc in reads["mget_ids"]["docs"]] == ["ships", "harbour"] and internal_in(reads["mget_ids"]) == []
    missing = reads["get_missing"]
    assert missing["status"] == 404 and missing["info"]["found"] is False
    # What an application checks at start-up: ping, and indices.exists of its index.
    assert seen["start_up"] == {"ping": True, "index_exists": True, "missing_index_exists": False}
    # A multi-search (elasticsearch-py sends it as application/vnd.elasticsearch+x-ndjson).
    (searched,) = seen["msearch"]["responses"]
    assert searched["ext"]["rerank"]["status"] == "ok" and ids(searched) == ids(found) and internal_in(searched) == []
    tagged = [headers for _, path, headers in recorder.request_headers if any(api in path for api in ("_search", "_mget", "_count", "_doc/", "_source/"))]
    assert len(tagged) >= 3 + 8 + 1 and all(headers.get("X-Opaque-Id") == opaque for headers in tagged)


# --- escapes found by an attack on the proxy (issue 23) ----------------------------------


@pytest.mark.parametrize(
    ("path", "data", "status", "reason"),
    [
        # OpenSearch's multi-search parser reads `indices` as well as `index`.
        ("/_msearch", '{"indices": "secret"}\n{"query": {"match_all": {}}}\n', 403, "header key [indices] is not one the proxy forwards"),
        ("/papers/_msearch", '{"index": "papers", "size": 3}\n{}\n', 403, "header key [size]"),
        # A cross-cluster name that the pattern `papers*` would match.
        ("/papers:secret/_search", json.dumps({"query": {"match_all": {}}}), 403, "cross-cluster names [papers:secret]"),
        ("/_msearch", '{"index": "papers:secret"}\n{}\n', 403, "cross-cluster names"),
    ],
)
def test_msearch_headers_and_cross_cluster_names_are_allow_listed(
    recorded: tuple[FlaskClient, ClusterProxy], path: str, data: str, status: int, reason: str
) -> None:
    client, recorder = recorded
    answer = client.post(path, data=data, content_type="application/json")
    assert answer.status_code == status, answer.get_json()
    assert reason in answer.get_json()["error"]["reason"]
    assert b"canary" not in answer.get_data()
    # Refused before any search was sent.
    assert [(m, p) for m, p, sent in recorder.requests if b"secret" in sent or "secret" in p or "_search" in p or "_msearch" in p] == []


def test_an_msearch_has_bounded_work(papers: tuple[str, Path]) -> None:
    """At most RERANKER_MAX_SEARCHES searches, and RERANKER_MAX_TOTAL_WINDOW candidates to
    rerank across them: a 413 that names the setting, before any search is sent."""
    client = make_app(papers, RERANKER_MAX_SEARCHES="3", RERANKER_MAX_TOTAL_WINDOW="150").test_client()
    line = json.dumps(summary("ocean"))
    four = "".join("{}\n" + line + "\n" for _ in range(4))
    answer = client.post("/papers/_msearch", data=four, content_type="application/x-ndjson")
    assert answer.status_code == 413 and "RERANKER_MAX_SEARCHES" in answer.get_json()["error"]["reason"]
    wide = json.dumps({**summary("ocean"), "ext": {"rerank": {"window": 100}}})
    answer = client.post("/papers/_msearch", data="{}\n" + wide + "\n{}\n" + wide + "\n", content_type="application/x-ndjson")
    assert answer.status_code == 413 and "200 candidates" in answer.get_json()["error"]["reason"]
    assert "RERANKER_MAX_TOTAL_WINDOW" in answer.get_json()["error"]["reason"]
    answer = client.post("/papers/_msearch", data="{}\n" + wide + "\n", content_type="application/x-ndjson")
    assert answer.status_code == 200 and len(answer.get_json()["responses"]) == 1


REFUSED_BODIES = [
    ({"query": {"wrapper": {"query": "eyJtYXRjaF9hbGwiOnt9fQ=="}}}, "query.wrapper] is refused"),
    ({"query": {"bool": {"must": [{"terms": {"_id": {"index": "secret", "path": "ids", "query": {"match_all": {}}}}}]}}}, "terms lookup"),
    ({"query": {"script": {"script": "true"}}}, "runs a script"),
    ({"query": {"function_score": {"query": {"match_all": {}}, "functions": [{"script_score": {"script": "1"}}]}}}, "runs a script"),
    ({"query": {"bogus": {}}}, "[query.bogus] is not a query clause the proxy knows"),
    ({"query": {"match_all": {}}, "aggs": {"x": {"scripted_metric": {}}}}, "[aggs.x.scripted_metric] is not an aggregation"),
    ({"query": {"match_all": {}}, "aggs": {"x": {"terms": {"script": "doc['a']"}}}}, "runs a script"),
    ({"query": {"match_all": {}}, "sort": [{"_script": {"type": "number", "script": "1"}}]}, "runs a script"),
    ({"query": {"match_all": {}}, "suggest": {"s": {"text": "x", "phrase": {"field": "body", "collate": {"query": {"source": {}}}}}}}, "collate"),
    ({"query": {"match_all": {}}, "script_fields": {"a": {"script": "1"}}}, "runs scripts"),
    ({"query": {"match_all": {}}, "pit": {"id": "x"}}, "[pit] is not a search body key"),
    ({"query": {"match_all": {}}, "ext": {"search_pipeline": {}}}, "[ext.search_pipeline]"),
]


@pytest.mark.parametrize(("body", "reason"), REFUSED_BODIES)
def test_only_the_search_subset_the_proxy_knows_is_forwarded(recorded: tuple[FlaskClient, ClusterProxy], body: dict[str, Any], reason: str) -> None:
    client, recorder = recorded
    for path, data in [("/papers/_search", json.dumps(body)), ("/papers/_msearch", "{}\n" + json.dumps(body) + "\n")]:
        answer = client.post(path, data=data, content_type="application/json")
        # A refusal by policy, as for every request the proxy does not forward.
        assert answer.status_code == 403 and answer.get_json()["error"]["type"] == "security_exception", (path, answer.get_json())
        assert reason in answer.get_json()["error"]["reason"], answer.get_json()
    assert [p for _, p, _ in recorder.requests if "_search" in p or "_msearch" in p or "_mget" in p] == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"query": {"match_all": {}, "term": {"a": 1}}}, "[query] must be an object with exactly one query clause"),
        ({"query": {"bool": []}}, "[query.bool] must be an object"),
        ({"query": {"function_score": {"functions": {}}}}, "[query.function_score.functions] must be a list"),
        ({"aggs": []}, "[aggs] must be an object of named aggregations"),
        # A _source in no form OpenSearch reads: the cluster failed the search, {"a": 1} as a 500.
        ({"_source": {"a": 1}}, "[_source.a] is not a key of a _source filter; it takes includes and excludes"),
        ({"_source": {"includes": 1}}, "[_source.includes] must be a field pattern or a list of them"),
        ({"_source": {"excludes": ["title", {}]}}, "[_source.excludes] must be a field pattern or a list of them"),
        ({"_source": 1}, "[_source] must be true or false, a field pattern, a list of them, or an object of includes and excludes"),
        ({"_source": ["title", 2]}, "[_source] must be true or false"),
        ({"_source": None}, "[_source] must be true or false"),
        ({"aggs": {"t": {"top_hits": {"_source": {"a": 1}}}}}, "[aggs.t.top_hits._source.a] is not a key of a _source filter"),
        # Inner hits' too: they were left to the cluster.
        (
            {"query": {"nested": {"path": "p", "query": {"match_all": {}}, "inner_hits": {"_source": {"a": 1}}}}},
            "[query.nested.inner_hits._source.a] is not a key of a _source filter",
        ),
        ({"query": {"has_child": {"type": "c", "query": {"match_all": {}}, "inner_hits": {"_source": 1}}}}, "[query.has_child.inner_hits._source] must be true or false"),
        ({"collapse": {"field": "year", "inner_hits": [{"name": "a"}, {"name": "b", "_source": {"includes": 2}}]}}, "[collapse.inner_hits[1]._source.includes] must be a field pattern"),
    ],
)
def test_a_search_part_of_the_wrong_shape_is_a_400(recorded: tuple[FlaskClient, ClusterProxy], body: dict[str, Any], reason: str) -> None:
    client, recorder = recorded
    answer = client.post("/papers/_search", json=body)
    assert answer.status_code == 400 and answer.get_json()["error"]["type"] == "parsing_exception", answer.get_json()
    assert reason in answer.get_json()["error"]["reason"]
    assert [p for _, p, _ in recorder.requests if "_search" in p] == []


def test_a_filter_value_longer_than_any_exact_value_is_a_400_before_the_cluster(recorded: tuple[FlaskClient, ClusterProxy]) -> None:
    """`body` has no exact sub-field: an `eq` filter on it goes to the cluster as a phrase
    query, whose cost grows with the value (40 kB made osmem-server time out). Past the
    longest exact value the index keeps (title.raw's 8191 characters), a 400, as on the
    embedded store; up to it, the cluster answers."""
    client, recorder = recorded
    at_limit = ("ocean " * 1366)[:8191]
    started = time.monotonic()
    answer = client.post("/search", json={"query": SEA, "filters": [{"field": "body", "value": at_limit}]})
    assert answer.status_code == 200 and answer.get_json()["hits"] == [], answer.get_json()
    assert time.monotonic() - started < 10
    recorder.requests.clear()
    answer = client.post("/search", json={"query": SEA, "filters": [{"field": "body", "value": at_limit + "s"}]})
    assert answer.status_code == 400 and answer.get_json()["error"]["type"] == "illegal_argument_exception"
    assert answer.get_json()["error"]["reason"] == "[filters[0].value] must be at most 8191 characters, got 8192"
    assert [p for _, p, _ in recorder.requests if "_search" in p] == []


@pytest.mark.parametrize(
    "source", [False, True, "title", ["title", "ye*"], {"includes": "title"}, {"includes": ["title"], "excludes": ["year"]}, {"excludes": "year"}],
)
def test_each_form_of_a_source_filter_opensearch_reads_is_forwarded(client: FlaskClient, source: Any) -> None:
    answer = client.post("/papers/_search", json={"query": {"match_all": {}}, "_source": source, "aggs": {"t": {"top_hits": {"_source": source}}}})
    assert answer.status_code == 200, answer.get_json()


def test_what_a_search_application_sends_still_passes(client: FlaskClient) -> None:
    body = {
        "query": {"bool": {
            "must": [{"multi_match": {"query": "ocean ships", "fields": ["body", "title^2"]}}],
            "filter": [{"range": {"year": {"gte": 1990}}}, {"terms": {"tag": ["a", "b"]}}],
            "should": [{"function_score": {"query": {"match": {"body": "sea"}}, "functions": [{"weight": 2, "filter": {"exists": {"field": "body"}}}]}}],
            "must_not": [{"dis_max": {"queries": [{"term": {"tag": "z"}}, {"prefix": {"tag": "q"}}]}}],
        }},
        "aggs": {"tags": {"terms": {"field": "tag"}, "aggs": {"years": {"avg": {"field": "year"}}}}, "f": {"filter": {"match_all": {}}}},
        "highlight": {"fields": {"body": {}}}, "sort": ["_score"], "_source": ["title"], "size": 3, "from": 0,
        "track_total_hits": True, "ext": {"rerank": {"window": 20}},
    }
    answer = client.post("/papers/_search", json=body)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["ext"]["rerank"]["status"] == "ok"


def test_the_allow_list_reads_every_place_a_query_can_hide() -> None:
    """Unit test of the walker: nested, has_child, boosting, constant_score, filters
    aggregations, highlight and rescore queries are read, and what they hide is found."""
    from reranker.service.errors import ApiError
    from reranker.service.query_dsl import check_search_body

    hidden = {"wrapper": {"query": "e30="}}
    places = [
        {"query": {"nested": {"path": "a", "query": hidden}}},
        {"query": {"has_child": {"type": "c", "query": hidden}}},
        {"query": {"boosting": {"positive": {"match_all": {}}, "negative": hidden, "negative_boost": 0.5}}},
        {"query": {"constant_score": {"filter": hidden}}},
        {"aggs": {"f": {"filters": {"filters": {"a": hidden}}}}},
        {"aggs": {"t": {"terms": {"field": "x"}, "aggs": {"f": {"filter": hidden}}}}},
        {"highlight": {"highlight_query": hidden, "fields": {"body": {}}}},
        {"highlight": {"fields": {"body": {"highlight_query": hidden}}}},
        {"rescore": {"window_size": 10, "query": {"rescore_query": hidden}}},
        {"post_filter": hidden},
    ]
    for body in places:
        with pytest.raises(ApiError, match="wrapper"):
            check_search_body(body)
        check_search_body(json.loads(json.dumps(body).replace('"wrapper": {"query": "e30="}', '"match_all": {}')))
    check_search_body({"query": {"wrapper": {"query": "e30="}}}, allowed=["wrapper"])  # an operator's choice


def test_an_operator_can_forward_a_clause_the_proxy_does_not_know(papers: tuple[str, Path], direct: OpenSearchStore) -> None:
    body = {"query": {"bogus": {}}}
    refused = make_app(papers).test_client().post("/papers/_search", json=body)
    assert refused.status_code == 403 and "RERANKER_PROXY_ALLOW=bogus" in refused.get_json()["error"]["reason"]
    forwarded = make_app(papers, RERANKER_PROXY_ALLOW="bogus").test_client().post("/papers/_search", json=body)
    status, own = direct.forward("POST", "/papers/_search", {}, body)
    assert forwarded.status_code == status == 400 and forwarded.get_json() == own  # the cluster's own answer
    with pytest.raises(Exception, match="RERANKER_PROXY_ALLOW"):
        make_app(papers, RERANKER_PROXY_ALLOW="bad name")


# --- issue 23's attack cases, each through the recording proxy ---------------------------------
#
# Every case the attack on the proxy used (and the near variants), sent as an attacker would,
# to the service over osmem-server behind the recording proxy, with the canary index `secret`
# in the cluster. Each must be refused (its status), answer no canary, and leave the cluster
# untouched: no request that names `secret` (in its path, body or a base64 query) and no
# search, scroll, get or count of any kind reached it. The body-shape cases beyond these
# are REFUSED_BODIES and READS_ANOTHER_INDEX above; slow and odd clients are in
# tests/test_reliability.py, the event quotas in tests/test_experiments.py.


def _b64(query: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(query).encode()).decode()


def _msearch(*pairs: tuple[dict[str, Any], dict[str, Any]]) -> str:
    return "".join(json.dumps(header) + "\n" + json.dumps(body) + "\n" for header, body in pairs)


MATCH_ALL = {"query": {"match_all": {}}}
TERMS_LOOKUP = {"terms": {"_id": {"index": "secret", "id": "2", "path": "tag"}}}
LIKE_SECRET = {"more_like_this": {"fields": ["text"], "like": [{"_index": "secret", "_id": "2"}], "min_term_freq": 1, "min_doc_freq": 1}}
WIDE = {**summary("ocean"), "ext": {"rerank": {"window": 1000}}}

# (what, method, path, body, content type, settings, statuses the refusal may have)
ATTACKS: list[tuple[str, str, str, str, str, dict[str, str], set[int]]] = [
    ("_msearch header `indices` (OpenSearch's parser reads it too)", "POST", "/_msearch", _msearch(({"indices": "secret"}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("_msearch header `indices` as a list", "POST", "/papers/_msearch", _msearch(({"indices": ["papers", "secret"]}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("_msearch header `index` naming secret", "POST", "/_msearch", _msearch(({"index": "secret"}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("_msearch header with secret after an allowed index", "POST", "/_msearch", _msearch(({"index": ["papers", "secret"]}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("_msearch: a good search, then a bad one", "POST", "/_msearch", _msearch(({}, summary("ocean")), ({"index": "secret"}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("wrapper hiding a terms lookup on secret", "POST", "/papers/_search", json.dumps({"query": {"wrapper": {"query": _b64(TERMS_LOOKUP)}}}), "application/json", {}, {403}),
    ("wrapper hiding more_like_this on secret", "POST", "/papers/_search", json.dumps({"query": {"wrapper": {"query": _b64(LIKE_SECRET)}}}), "application/json", {}, {403}),
    ("wrapper inside bool.filter, in _msearch", "POST", "/papers/_msearch", _msearch(({}, {"query": {"bool": {"filter": [{"wrapper": {"query": _b64(TERMS_LOOKUP)}}]}}})), "application/x-ndjson", {}, {403}),
    ("terms lookup by query (OpenSearch 3.2+)", "POST", "/papers/_search", json.dumps({"query": {"terms": {"_id": {"index": "secret", "path": "ids", "query": {"match_all": {}}}}}}), "application/json", {}, {403}),
    ("terms lookup in an aggregation's filter", "POST", "/papers/_search", json.dumps({**MATCH_ALL, "aggs": {"a": {"filter": TERMS_LOOKUP}}}), "application/json", {}, {403}),
    ("a forged scroll id", "POST", "/_search/scroll", json.dumps({"scroll": "1m", "scroll_id": "FGluY2x1ZGVfY29udGV4dF91dWlkDXF1ZXJ5QW5kRmV0Y2gBFmZha2U="}), "application/json", {}, {403}),
    ("a forged scroll id in the URL", "GET", "/_search/scroll?scroll_id=DXF1ZXJ5QW5kRmV0Y2gBAAAAAAAAAAEW&scroll=1m", "", "application/json", {}, {403}),
    ("a scroll opened for a day", "POST", "/papers/_search?scroll=1d", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("a day's scroll, scroll allowed: keep-alive capped", "POST", "/papers/_search?scroll=1d", json.dumps(MATCH_ALL), "application/json", {"RERANKER_PROXY_ALLOW": "scroll"}, {400}),
    ("a day's scroll continued, scroll allowed", "POST", "/_search/scroll", json.dumps({"scroll": "1d", "scroll_id": "x"}), "application/json", {"RERANKER_PROXY_ALLOW": "scroll"}, {400}),
    ("a cross-cluster name the pattern matches", "POST", "/papers-vx:secret/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("a cross-cluster pattern", "POST", "/papers-v*:secret/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("a cross-cluster name in an _msearch header", "POST", "/_msearch", _msearch(({"index": "papers-v1:secret"}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("secret beside an allowed index in the path", "POST", "/papers,secret/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("secret, URL-encoded comma", "POST", "/papers%2Csecret/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("every index", "POST", "/_all/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("every index by pattern", "POST", "/*/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("a path that climbs out of the index", "POST", "/papers/../secret/_search", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("a suggester's collate template", "POST", "/papers/_search", json.dumps({**MATCH_ALL, "suggest": {"s": {"text": "ship", "phrase": {"field": "text", "collate": {"query": {"source": {"match_all": {}}}}}}}}), "application/json", {}, {403}),
    ("a search template", "POST", "/papers/_search/template", json.dumps({"source": {"query": {"match_all": {}}}}), "application/json", {}, {403}),
    ("a point in time", "POST", "/papers/_search", json.dumps({**MATCH_ALL, "pit": {"id": "x"}}), "application/json", {}, {403}),
    ("a script in runtime_mappings", "POST", "/papers/_search", json.dumps({**MATCH_ALL, "runtime_mappings": {"f": {"type": "keyword", "script": "emit('x')"}}}), "application/json", {}, {403}),
    ("a search pipeline named in the URL (the Cohere one calls the service with its key)", "POST", "/papers/_search?search_pipeline=hidden-topics", json.dumps(summary("ocean")), "application/json", {}, {403}),
    ("the index's default search pipeline skipped", "POST", "/papers/_search?search_pipeline=_none", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("a search pipeline for an _msearch", "POST", "/papers/_msearch?search_pipeline=_none", _msearch(({}, MATCH_ALL)), "application/x-ndjson", {}, {403}),
    ("a search pipeline for a count", "POST", "/papers/_count?search_pipeline=_none", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("the default pipeline's workings", "POST", "/papers/_search?verbose_pipeline=true", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    # OpenSearch reads `source` as the body of a request that has none (the proxy sends a
    # bodiless count and scroll so): a query the proxy never read.
    ("a terms lookup on secret in a count's `source` parameter", "GET", "/papers/_count?source_content_type=application/json&source=" + quote(json.dumps({"query": TERMS_LOOKUP})), "", "application/json", {}, {403}),
    ("a wrapper in a search's `source` parameter", "GET", "/papers/_search?source_content_type=application/json&source=" + quote(json.dumps({"query": {"wrapper": {"query": _b64(TERMS_LOOKUP)}}})), "", "application/json", {}, {403}),
    ("an _msearch in the `source` parameter", "GET", "/papers/_msearch?source_content_type=application/x-ndjson&source=" + quote(_msearch(({"index": "secret"}, MATCH_ALL))), "", "application/json", {}, {403}),
    ("a day's scroll in the `source` parameter, scroll allowed", "GET", "/_search/scroll?source=" + quote(json.dumps({"scroll": "1d", "scroll_id": "x"})), "", "application/json", {"RERANKER_PROXY_ALLOW": "scroll"}, {403}),
    ("the cluster's stack traces", "POST", "/papers/_search?error_trace=true&q=title:((", "", "application/json", {}, {403}),
    # indices_boost reads no document, but the cluster's 404 for a name no index has tells which exist.
    ("indices_boost naming secret", "POST", "/papers/_search", json.dumps({**MATCH_ALL, "indices_boost": [{"secret": 2.0}]}), "application/json", {}, {403}),
    ("indices_boost naming secret, object form", "POST", "/papers/_search", json.dumps({**MATCH_ALL, "indices_boost": {"papers": 1.0, "secret": 2.0}}), "application/json", {}, {403}),
    ("indices_boost naming secret, in _msearch", "POST", "/papers/_msearch", _msearch(({}, {**MATCH_ALL, "indices_boost": [{"secret": 2.0}]})), "application/x-ndjson", {}, {403}),
    ("a get of a secret document", "GET", "/secret/_doc/2", "", "application/json", {}, {403}),
    ("an _mget of a secret document", "POST", "/_mget", json.dumps({"docs": [{"_index": "secret", "_id": "2"}]}), "application/json", {}, {403}),
    ("a count of secret", "POST", "/secret/_count", json.dumps(MATCH_ALL), "application/json", {}, {403}),
    ("400 searches of window 1,000 (the 14.6 s _msearch)", "POST", "/papers/_msearch", _msearch(*[({}, WIDE)] * 400), "application/x-ndjson", {}, {413}),
    ("51 searches", "POST", "/papers/_msearch", _msearch(*[({}, summary("ocean"))] * 51), "application/x-ndjson", {}, {413}),
    ("2,001 candidates to rerank across 3 searches", "POST", "/papers/_msearch", _msearch(*[({}, {**summary("ocean"), "ext": {"rerank": {"window": 667}}})] * 3), "application/x-ndjson", {}, {413}),
]


@pytest.fixture(scope="module")
def attacked(papers: tuple[str, Path]) -> Iterator[tuple[Any, ClusterProxy]]:
    """(an app for given settings, the recording proxy its cluster requests pass through),
    with the canary index `secret` in the cluster."""
    url, _ = papers
    urllib.request.urlopen(urllib.request.Request(f"{url}/secret/_doc/2?refresh=true", data=json.dumps({"tag": "canary", "text": "ships"}).encode(), method="PUT", headers={"Content-Type": "application/json"})).close()
    recorder = ClusterProxy(url)
    apps: dict[tuple[tuple[str, str], ...], Flask] = {}

    def app_for(env: dict[str, str]) -> Flask:
        key = tuple(sorted(env.items()))
        if key not in apps:
            apps[key] = make_app((recorder.url, papers[1]), **env)
        return apps[key]

    try:
        yield app_for, recorder
    finally:
        recorder.close()
        urllib.request.urlopen(urllib.request.Request(f"{url}/secret", method="DELETE")).close()


@pytest.mark.parametrize(("what", "method", "path", "data", "kind", "env", "statuses"), ATTACKS, ids=[case[0] for case in ATTACKS])
def test_the_attacks_on_the_proxy_reach_nothing(
    attacked: tuple[Any, ClusterProxy], what: str, method: str, path: str, data: str, kind: str, env: dict[str, str], statuses: set[int]
) -> None:
    app_for, recorder = attacked
    client = app_for(env).test_client()
    recorder.requests.clear()
    answer = client.open(path, method=method, data=data or None, content_type=kind)
    assert answer.status_code in statuses, (what, answer.status_code, answer.get_data(as_text=True)[:300])
    assert answer.is_json and b"canary" not in answer.get_data()
    # (What may reach the cluster: reads of the allowed indices' mappings and alias.)
    for sent_method, sent_path, sent in recorder.requests:
        assert b"secret" not in sent and "secret" not in sent_path, (what, sent_method, sent_path)
        assert not any(api in sent_path for api in ("_search", "_msearch", "_mget", "_count", "_doc")), (what, sent_method, sent_path)
    # The same app still answers an honest search: the refusal was the proxy's, not a broken cluster.
    assert client.post("/papers/_search", json=summary("ocean")).status_code == 200


def test_a_search_pipeline_reaches_the_cluster_only_when_the_operator_allows_it(attacked: tuple[Any, ClusterProxy]) -> None:
    """The refusal of `search_pipeline` is the proxy's policy, and RERANKER_PROXY_ALLOW lifts
    it: the parameter then reaches the cluster (osmem-server answers, as OpenSearch does,
    that the pipeline does not exist), and a search without one is unaffected either way."""
    app_for, recorder = attacked
    refused = app_for({}).test_client().post("/papers/_search?search_pipeline=nowhere", json=summary("ocean"))
    assert refused.status_code == 403 and "RERANKER_PROXY_ALLOW=search_pipeline" in refused.get_json()["error"]["reason"]
    client = app_for({"RERANKER_PROXY_ALLOW": "search_pipeline"}).test_client()
    recorder.requests.clear()
    forwarded = client.post("/papers/_search?search_pipeline=nowhere", json=summary("ocean"))
    assert forwarded.status_code == 400 and "nowhere" in forwarded.get_data(as_text=True)
    assert any("search_pipeline=nowhere" in path for _, path, _ in recorder.requests)
    assert client.post("/papers/_search", json=summary("ocean")).status_code == 200


def test_a_clients_credentials_never_reach_the_cluster(attacked: tuple[Any, ClusterProxy]) -> None:
    """The proxy calls the cluster with the service's own credentials (none here), never the
    client's: an `Authorization` or cookie sent to the proxy would otherwise act on the
    cluster with whatever rights it carries."""
    app_for, recorder = attacked
    recorder.requests.clear()
    recorder.authorization.clear()
    recorder.request_headers.clear()
    sent = {"Authorization": "Basic YWRtaW46YWRtaW4=", "Cookie": "security_authentication=stolen", "X-Forwarded-For": "10.0.0.1"}
    assert app_for({}).test_client().post("/papers/_search", json=summary("ocean"), headers=sent).status_code == 200
    assert any("_search" in path for _, path, _ in recorder.requests)
    assert recorder.authorization and set(recorder.authorization) == {None}
    forwarded = {name.lower() for _, _, headers in recorder.request_headers for name in headers}
    assert not forwarded & {"cookie", "x-forwarded-for"}, forwarded


def test_indices_boost_may_name_the_allowed_indices(client: FlaskClient, direct: OpenSearchStore) -> None:
    """A boost of an allowed index is forwarded (the cluster's answer passes), so the
    refusal of other names is the allow-list's, not of indices_boost as such."""
    body = {**summary("ocean"), "indices_boost": [{"papers": 2.0}], "ext": {"rerank": {"ranker": "bm25"}}}
    answer = client.post("/papers/_search", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    status, own = direct.forward("POST", "/papers/_search", {}, {key: value for key, value in body.items() if key != "ext"})
    assert status == 200 and ids(answer.get_json()) == ids(own)
