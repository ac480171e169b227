"""The HTTP service's native API on the embedded store, through Flask's test client.

The app is the real one (`create_app`), over a real SQLite store holding the bundled
sample corpus (plus a year field to filter on, and two documents whose only distinctive
word has no GloVe vector). `test_gunicorn_*` starts `reranker serve` as a subprocess.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from conftest import SAMPLE, TINY_CORPUS, Service, http_json, metric, run, settings_env, write_jsonl
from flask.testing import FlaskClient

import reranker.rankers as rankers
from reranker.config import DEFAULT_RANKER, ServiceSettings, Settings
from reranker.service import create_app
from reranker.service.operations import openapi_document

QUERY = "statistical machine translation with word alignment models and phrase tables"
# Not in GloVe's 400k words, so a query of only these has no vector.
UNKNOWN_WORD = "zorblaxian"


def _corpus(path: Path) -> Path:
    records = []
    for line in (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        digits = record["id"][1:3]
        record["year"] = 2000 + int(digits) if digits.isdigit() else 2010  # ACL ids: P01 -> 2001
        records.append(record)
    records += [
        {"id": "odd-1", "title": "", "text": f"{UNKNOWN_WORD} {UNKNOWN_WORD} machines and ships", "year": 2020},
        {"id": "odd-2", "title": "", "text": f"{UNKNOWN_WORD} bread and ovens", "year": 2021},
    ]
    return write_jsonl(path, records)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    data_dir = tmp_path_factory.mktemp("service") / "data"
    data_dir.mkdir()
    corpus = _corpus(data_dir.parent / "corpus.jsonl")
    code, _ = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 0
    code, _ = run(data_dir, "train", "doc2vec", str(corpus), "--dim", "32", "--epochs", "10", "--no-progress")
    assert code == 0
    return data_dir


def _settings(data_dir: Path, **env: str) -> Settings:
    return Settings.from_env({**settings_env(data_dir), **env})


# Tests that expect a ranking, not a fallback: on a busy 2-core machine a search can miss the
# default 2 s deadline (`degraded`) or WMD its budget (`partial`). The deadline's own tests
# set theirs.
PATIENT = {"RERANKER_DEADLINE_MS": "600000", "RERANKER_WMD_BUDGET_MS": "600000"}


@pytest.fixture(scope="module")
def client(indexed: Path) -> Iterator[FlaskClient]:
    app = create_app(_settings(indexed, **PATIENT))
    yield app.test_client()
    app.extensions["reranker"].close()


def _error(answer: Any, status: int, type_: str) -> str:
    """Assert an OpenSearch-shaped JSON error; return its reason."""
    assert answer.status_code == status, answer.get_data(as_text=True)
    assert answer.mimetype == "application/json"
    body = answer.get_json()
    assert body["status"] == status and body["error"]["type"] == type_
    assert body["error"]["root_cause"] == [{"type": type_, "reason": body["error"]["reason"]}]
    return str(body["error"]["reason"])


# --- /search -----------------------------------------------------------------------------


def test_search_reranks_the_bm25_window_like_the_engine(client: FlaskClient, indexed: Path) -> None:
    answer = client.post("/search", json={"query": QUERY, "size": 5})
    assert answer.status_code == 200
    body = answer.get_json()
    assert body["status"] == "ok" and body["ranker"] == DEFAULT_RANKER and body["window"] == 100
    code, out = run(indexed, "search", QUERY, "--size", "5", "--json")
    assert code == 0
    expected = json.loads(out)
    assert [h["id"] for h in body["hits"]] == [h["id"] for h in expected["hits"]]
    assert [h["rank"] for h in body["hits"]] == [1, 2, 3, 4, 5]
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert [h["bm25_rank"] for h in body["hits"]] != [1, 2, 3, 4, 5], "the topic order should differ from BM25's here"
    assert set(body["timings_ms"]) == {"retrieve", "rerank"}


def test_from_and_size_slice_one_reranked_order(client: FlaskClient) -> None:
    whole = client.post("/search", json={"query": QUERY, "size": 9}).get_json()["hits"]
    page = client.post("/search", json={"query": QUERY, "size": 3, "from": 3}).get_json()["hits"]
    assert [h["id"] for h in page] == [h["id"] for h in whole[3:6]]
    assert [h["rank"] for h in page] == [4, 5, 6]


def test_a_small_window_reranks_fewer_candidates(client: FlaskClient) -> None:
    body = client.post("/search", json={"query": QUERY, "size": 3, "window": 5}).get_json()
    assert body["candidates"] == 5 and max(h["bm25_rank"] for h in body["hits"]) <= 5
    # from + size beyond the window: the page is not cut short, and the window stays.
    body = client.post("/search", json={"query": QUERY, "size": 4, "from": 4, "window": 5}).get_json()
    assert body["window"] == 5 and body["candidates"] == 5 and len(body["hits"]) == 4


def test_pages_past_the_window_keep_their_bm25_order(client: FlaskClient) -> None:
    """Only the top window is reranked; the hits past it follow in BM25 order, as
    Elasticsearch's rescore leaves them, so every page is a slice of one list. (A window
    widened to each page's end reranked more for each deeper page and reordered the pages
    before it: one hit shown twice, another never.)"""
    whole = client.post("/search", json={"query": QUERY, "size": 9, "window": 4}).get_json()
    assert (whole["window"], whole["candidates"], whole["status"]) == (4, 4, "ok")
    hits = whole["hits"]
    assert sorted(h["bm25_rank"] for h in hits[:4]) == [1, 2, 3, 4] and all(h["score"] is not None for h in hits[:4])
    assert [h["bm25_rank"] for h in hits[4:]] == [5, 6, 7, 8, 9]
    assert all(h["score"] is None and h["ranker_score"] is None for h in hits[4:])
    pages = [client.post("/search", json={"query": QUERY, "size": 3, "from": start, "window": 4}).get_json() for start in (0, 3, 6)]
    assert [h["id"] for page in pages for h in page["hits"]] == [h["id"] for h in hits]
    assert [h["rank"] for page in pages for h in page["hits"]] == list(range(1, 10))
    assert pages[1]["status"] == "ok" and pages[1]["candidates"] == 4  # straddles the window
    # A page wholly past the window: nothing to score, and the answer says so.
    assert pages[2]["status"] == "not_reranked" and "past the reranked window of 4 hits" in pages[2]["reason"]
    assert pages[2]["timings_ms"]["rerank"] == 0.0


def test_explanations_add_up_to_the_score(client: FlaskClient) -> None:
    body = client.post("/search", json={"query": QUERY, "size": 2, "explain": True}).get_json()
    for hit in body["hits"]:
        explanation = hit["explanation"]
        topics = explanation["topics"]
        assert topics and all(t["topic_words"] for t in topics)
        # The default fuses the topics with the document's BM25 and its best passage's:
        # its parts add up to the fused score ...
        assert list(explanation["parts"]) == ["topics", "bm25", "passages"] and explanation["score"] == hit["score"]
        assert sum(explanation["parts"].values()) == pytest.approx(hit["score"], rel=1e-12)
        # ... and the topics shown plus the rest to the topic score: the ranker's own.
        shown = sum(t["contribution"] for t in topics)
        assert shown + explanation["rest"]["contribution"] == pytest.approx(hit["ranker_score"], rel=1e-9)
        assert explanation["topic_ranker"] == "hidden_topics_corrected" and explanation["topic_score"] == hit["ranker_score"]


def test_filters_restrict_the_candidates(client: FlaskClient, indexed: Path) -> None:
    years = {r["id"]: r["year"] for r in map(json.loads, (indexed.parent / "corpus.jsonl").read_text().splitlines())}
    body = client.post("/search", json={"query": QUERY, "size": 100, "filters": [{"field": "year", "op": "gte", "value": 2005}]}).get_json()
    everything = client.post("/search", json={"query": QUERY, "size": 100}).get_json()
    assert body["hits"] and all(years[h["id"]] >= 2005 for h in body["hits"])
    assert len(body["hits"]) == sum(years[h["id"]] >= 2005 for h in everything["hits"]) < len(everything["hits"])
    # A field no document has: the index's state (a later corpus may have it), not a malformed request.
    reason = _error(client.post("/search", json={"query": QUERY, "filters": [{"field": "colour", "value": "red"}]}), 409, "unknown_field_exception")
    assert "colour" in reason and "year" in reason
    # Also when the query has no word to search (stop words only): not a 200 with no hits.
    reason = _error(client.post("/search", json={"query": "a the", "filters": [{"field": "colour", "value": "red"}]}), 409, "unknown_field_exception")
    assert "colour" in reason
    # A value the field cannot hold: a malformed request, which says why (it found nothing before).
    reason = _error(client.post("/search", json={"query": QUERY, "filters": [{"field": "year", "op": "gte", "value": "abc"}]}), 400, "illegal_argument_exception")
    assert reason == "cannot filter 'year' (gte 'abc'): the field holds numbers and 'abc' is not one"
    as_text = client.post("/search", json={"query": QUERY, "size": 100, "filters": [{"field": "year", "op": "gte", "value": "2005"}]}).get_json()
    assert as_text["hits"] == body["hits"]
    # As many filters as the schema takes, the store runs; more is a 400 (1,000 was the
    # store's 502: SQLite's "Expression tree is too large").
    many = [{"field": "year", "op": "gte", "value": 2005}]
    assert client.post("/search", json={"query": QUERY, "size": 100, "filters": many * 100}).get_json()["hits"] == body["hits"]
    reason = _error(client.post("/search", json={"query": QUERY, "filters": many * 1000}), 400, "illegal_argument_exception")
    assert reason == "[filters] must have at most 100 items, got 1000"
    # A string longer than the longest exact value the index keeps (title.raw, 8191 characters)
    # can equal no stored value: a 400, as on the OpenSearch store (test_proxy.py), whatever the field.
    reason = _error(client.post("/search", json={"query": QUERY, "filters": [{"field": "year", "value": "1" * 8192}]}), 400, "illegal_argument_exception")
    assert reason == "[filters[0].value] must be at most 8191 characters, got 8192"
    assert client.post("/search", json={"query": QUERY, "filters": [{"field": "title", "value": "t" * 8191}]}).status_code == 200
    # Digits beyond a double, for a field of numbers: not one (Python's int() failed on over
    # 4,300 digits, a 500); beyond 64 bits, a double, as a JSON integer is read.
    reason = _error(client.post("/search", json={"query": QUERY, "filters": [{"field": "year", "op": "gte", "value": "1" * 5000}]}), 400, "illegal_argument_exception")
    shown = "'" + "1" * 59 + "... (5,000 characters)"  # a long value is not repeated whole, twice
    assert reason == f"cannot filter 'year' (gte {shown}): the field holds numbers and {shown} is not one"
    beyond = client.post("/search", json={"query": QUERY, "size": 100, "filters": [{"field": "year", "op": "lte", "value": "9" * 20}]})
    assert beyond.status_code == 200 and beyond.get_json()["hits"] == everything["hits"]


def test_every_ranker_is_listed_and_usable(client: FlaskClient) -> None:
    listed = client.get("/rankers").get_json()
    assert [r["name"] for r in listed["rankers"]] == rankers.ranker_names() and listed["default"] == DEFAULT_RANKER
    assert all(r["available"] and r["reason"] is None for r in listed["rankers"]), listed
    for name in rankers.ranker_names():
        body = client.post("/search", json={"query": QUERY, "ranker": name, "size": 3}).get_json()
        assert body["ranker"] == name and len(body["hits"]) == 3 and body["status"] == "ok", body
        for hit in body["hits"]:
            assert isinstance(hit["score"], float) and isinstance(hit["ranker_score"], float)
            if "+bm25" not in name:
                assert hit["score"] == hit["ranker_score"]
    bm25 = client.post("/search", json={"query": QUERY, "ranker": "bm25", "size": 5}).get_json()
    assert [h["bm25_rank"] for h in bm25["hits"]] == [1, 2, 3, 4, 5]


def test_doc2vec_without_a_trained_model_is_a_409(data_dir: Path, tmp_path: Path) -> None:
    code, _ = run(data_dir, "index", str(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)), "--no-progress")
    assert code == 0
    app = create_app(_settings(data_dir))
    try:
        answer = app.test_client().post("/search", json={"query": "bread and ships", "ranker": "doc2vec"})
        reason = _error(answer, 409, "ranker_unavailable_exception")
        assert "reranker train doc2vec" in reason
        # GET /rankers says so before anyone tries, with the same reason (the page disables it).
        listed = {r["name"]: r for r in app.test_client().get("/rankers").get_json()["rankers"]}
        assert listed["doc2vec"]["available"] is False and listed["doc2vec"]["reason"] == reason
        assert listed["bm25"]["available"] is True and listed["bm25"]["reason"] is None
    finally:
        app.extensions["reranker"].close()


def test_wmd_out_of_time_answers_partially_and_says_so(indexed: Path) -> None:
    app = create_app(_settings(indexed, RERANKER_WMD_BUDGET_MS="0"))
    try:
        body = app.test_client().post("/search", json={"query": QUERY, "ranker": "wmd", "size": 3}).get_json()
        assert body["status"] == "partial" and "exact" in body["reason"]
        assert len(body["hits"]) == 3 and all(isinstance(h["score"], float) for h in body["hits"])
    finally:
        app.extensions["reranker"].close()


def test_an_out_of_vocabulary_query_is_ordered_by_the_first_stage_and_says_so(client: FlaskClient) -> None:
    body = client.post("/search", json={"query": UNKNOWN_WORD}).get_json()
    assert body["status"] == "query_out_of_vocabulary" and "word vector" in body["reason"]
    assert [h["id"] for h in body["hits"]] == ["odd-1", "odd-2"]
    assert [h["bm25_rank"] for h in body["hits"]] == [1, 2]
    assert [h["score"] for h in body["hits"]] == pytest.approx([0.7, 0.0])  # the first stage's share (1 - w); topics add 0
    assert body["oov_words"] == [UNKNOWN_WORD] and body["query_words"] == []
    # Its explanation lists no topic (none added anything), as the CLI and the page say it;
    # the rest line still holds the topic ranker's own sum.
    explained = client.post("/search", json={"query": UNKNOWN_WORD, "explain": True}).get_json()["hits"][0]["explanation"]
    assert explained["topics"] == [] and explained["parts"]["topics"] == 0.0
    assert explained["rest"]["contribution"] == pytest.approx(explained["topic_score"])
    alone = client.post("/search", json={"query": UNKNOWN_WORD, "ranker": "hidden_topics"}).get_json()
    assert [(h["id"], h["score"]) for h in alone["hits"]] == [("odd-1", 0.0), ("odd-2", 0.0)]
    assert alone["reason"].endswith("first-stage order kept")


def test_an_out_of_vocabulary_query_that_finds_nothing_says_so_too(client: FlaskClient) -> None:
    """It answered "ok" when BM25 found no candidate, and query_out_of_vocabulary when it did;
    then its reason said the rest of the fusion orders the hits, of hits there were not."""
    body = client.post("/search", json={"query": "zzqx qqzv"}).get_json()
    assert (body["status"], body["hits"], body["oov_words"]) == ("query_out_of_vocabulary", [], ["zzqx", "qqzv"])
    assert body["reason"] == "no query word has a word vector, and no document matches it", body["reason"]
    body = client.post("/search", json={"query": "the of and", "ranker": "hidden_topics"}).get_json()
    assert (body["status"], body["hits"]) == ("query_out_of_vocabulary", [])
    assert body["reason"] == "the query has no words to search (stop words, numbers and single letters are left out)", body["reason"]


# --- /rerank -----------------------------------------------------------------------------


def test_rerank_by_ids_matches_search(client: FlaskClient) -> None:
    searched = client.post("/search", json={"query": QUERY, "size": 100, "ranker": "hidden_topics+bm25"}).get_json()["hits"]
    window = sorted(searched, key=lambda h: h["bm25_rank"])
    documents = [{"id": h["id"], "score": h["bm25_score"]} for h in window]
    body = client.post("/rerank", json={"query": QUERY, "documents": documents, "ranker": "hidden_topics+bm25"}).get_json()
    assert body["status"] == "ok"
    assert [r["id"] for r in body["results"]] == [h["id"] for h in searched]
    assert [r["score"] for r in body["results"]] == pytest.approx([h["score"] for h in searched])


@pytest.mark.parametrize("ranker", ["wmd", "doc2vec"])
def test_rerank_texts_with_rankers_that_read_documents(client: FlaskClient, indexed: Path, ranker: str) -> None:
    """WMD reads a sent text's words and Doc2Vec infers its vector, instead of looking the
    placeholder position up in the store."""
    records = [json.loads(line) for line in (indexed.parent / "corpus.jsonl").read_text().splitlines()[:4]]
    texts = [r["text"] for r in records] + ["bread, butter and a hot oven"]
    body = client.post("/rerank", json={"query": QUERY, "documents": texts, "ranker": ranker}).get_json()
    assert body["status"] == "ok" and len(body["results"]) == 5
    assert len({r["score"] for r in body["results"]}) == 5  # no text was left without words or a vector
    assert body["results"][-1]["index"] == 4  # the kitchen text is the least like a translation query
    again = client.post("/rerank", json={"query": QUERY, "documents": texts, "ranker": ranker}).get_json()
    assert again["results"] == body["results"]
    if ranker == "wmd":  # the sent texts are scored as if they were stored
        by_id = client.post("/rerank", json={"query": QUERY, "documents": [{"id": r["id"]} for r in records], "ranker": ranker}).get_json()
        assert [r["score"] for r in by_id["results"]] == pytest.approx([r["score"] for r in body["results"][:4]])


def test_rerank_texts_scores_like_stored_topics_and_caches_them(indexed: Path) -> None:
    # Topics of six 2,000-word texts are computed within the request: no deadline, so a
    # loaded machine cannot turn this into a "degraded" answer in another order.
    app = create_app(_settings(indexed, **PATIENT))
    client = app.test_client()
    records = [json.loads(line) for line in (indexed.parent / "corpus.jsonl").read_text().splitlines()[:6]]
    texts = [r["text"] for r in records]  # no titles in the sample: full text == text
    by_id = client.post("/rerank", json={"query": QUERY, "documents": [{"id": r["id"]} for r in records]}).get_json()
    by_text = client.post("/rerank", json={"query": QUERY, "documents": texts}).get_json()
    assert [r["index"] for r in by_text["results"]] == [r["index"] for r in by_id["results"]]
    assert [r["score"] for r in by_text["results"]] == pytest.approx([r["score"] for r in by_id["results"]], rel=1e-5)
    before = metric(client, 'reranker_topic_cache_lookups_total{result="hit"}')
    cached = dict(app.extensions["reranker"].engine().text_topics._entries)
    # The default ranker reads only the corrected topics: the paper's were never computed.
    assert len(cached) == len(texts) and not any(key.endswith("|paper") for key in cached)
    assert metric(client, 'reranker_topic_cache_lookups_total{result="computed"}') == len(texts)
    again = client.post("/rerank", json={"query": QUERY, "documents": texts}).get_json()
    assert again["results"] == by_text["results"]
    assert metric(client, 'reranker_topic_cache_lookups_total{result="hit"}') == before + len(texts)
    after = dict(app.extensions["reranker"].engine().text_topics._entries)
    assert after.keys() == cached.keys() and all(after[key] is cached[key] for key in cached)  # reused, not recomputed


def test_rerank_mixes_ids_and_texts_and_refuses_unknown_ids(client: FlaskClient) -> None:
    body = client.post("/rerank", json={"query": QUERY, "ranker": "hidden_topics", "documents": [{"id": "P01-1027"}, "bread ovens and flour", {"id": "gone", "text": "translation models"}]}).get_json()
    assert sorted(r["index"] for r in body["results"]) == [0, 1, 2]
    assert body["results"][-1]["index"] == 1  # the bread text is least like the query
    reason = _error(client.post("/rerank", json={"query": QUERY, "documents": [{"id": "gone"}, {"id": "P01-1027"}]}), 404, "document_missing_exception")
    assert "'gone'" in reason and "P01-1027" not in reason
    # An id sent twice is named once.
    reason = _error(client.post("/rerank", json={"query": QUERY, "documents": [{"id": "gone"}, {"id": "gone"}, {"id": "lost"}]}), 404, "document_missing_exception")
    assert "with id 'gone', 'lost';" in reason
    # No documents: nothing scored, and the first stage said all the same (docs/http-api.md).
    for ranker in ("hidden_topics+bm25", "hidden_topics"):
        empty = client.post("/rerank", json={"query": QUERY, "ranker": ranker, "documents": []}).get_json()
        assert empty["results"] == [] and empty["first_stage"] == "order"



def test_rerank_with_an_id_and_a_text_scores_the_stored_document_when_the_id_is_stored(client: FlaskClient) -> None:
    """docs/http-api.md: with both, a stored id wins and the text sent is not read."""
    def scores(documents: list[Any]) -> list[float]:
        body = client.post("/rerank", json={"query": QUERY, "ranker": "hidden_topics", "documents": documents}).get_json()
        return [r["ranker_score"] for r in sorted(body["results"], key=lambda r: r["index"])]

    stored = scores([{"id": "P01-1027"}, {"id": "P03-1039"}])
    assert scores([{"id": "P01-1027", "text": "bread ovens and flour"}, {"id": "P03-1039"}]) == pytest.approx(stored)
    sent = scores([{"text": "bread ovens and flour"}, {"id": "P03-1039"}])
    assert scores([{"id": "not-stored", "text": "bread ovens and flour"}, {"id": "P03-1039"}]) == pytest.approx(sent)
    assert sent[0] != pytest.approx(stored[0])

# --- failing open ------------------------------------------------------------------------


class _Broken:
    name, variant, needs = "broken", "paper", frozenset()

    def score(self, query: Any, window: Any) -> Any:
        raise RuntimeError("scoring blew up")


class _Slow:
    name, variant, needs = "slow", "paper", frozenset()

    def score(self, query: Any, window: Any) -> Any:
        time.sleep(3)
        return np.zeros(len(window))


def test_a_failing_or_slow_ranker_degrades_to_bm25_order(indexed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rankers.RANKERS, "broken", lambda options: _Broken())
    monkeypatch.setitem(rankers.RANKERS, "slow", lambda options: _Slow())
    client = create_app(_settings(indexed, RERANKER_DEADLINE_MS="300")).test_client()
    body = client.post("/search", json={"query": QUERY, "ranker": "broken", "size": 5}).get_json()
    assert body["status"] == "degraded" and "scoring blew up" in body["reason"]
    assert [h["bm25_rank"] for h in body["hits"]] == [1, 2, 3, 4, 5] and all(h["score"] is None for h in body["hits"])
    started = time.monotonic()
    body = client.post("/search", json={"query": QUERY, "ranker": "slow", "size": 5}).get_json()
    assert time.monotonic() - started < 2.0, "the deadline must cut the wait short"
    assert body["status"] == "degraded" and body["reason"].startswith("ranker 'slow' did not finish within the 300 ms deadline; the first stage (BM25) took ")
    assert [h["bm25_rank"] for h in body["hits"]] == [1, 2, 3, 4, 5]
    body = client.post("/rerank", json={"query": QUERY, "ranker": "broken", "documents": ["a ship", "a loaf"]}).get_json()
    assert body["status"] == "degraded" and [r["index"] for r in body["results"]] == [0, 1]
    assert body["first_stage"] == "order", "a degraded answer keeps the order sent"
    body = client.post("/rerank", json={"query": QUERY, "ranker": "broken", "documents": [{"text": "a ship", "score": 1.0}, {"text": "a loaf", "score": 2.0}]}).get_json()
    assert body["status"] == "degraded" and [r["index"] for r in body["results"]] == [0, 1] and body["first_stage"] == "order"
    assert metric(client, 'reranker_degraded_responses_total{endpoint="/search",ranker="slow",reason="timeout"}') == 1
    assert metric(client, 'reranker_degraded_responses_total{endpoint="/search",ranker="broken",reason="ranker_error"}') == 1


def test_a_cluster_that_is_down_is_a_503_with_retry_after(indexed: Path) -> None:
    from reranker.pipeline import build_engine

    settings = _settings(indexed, OPENSEARCH_URL="http://127.0.0.1:9", OPENSEARCH_RETRIES="0")
    client = create_app(settings).test_client()
    for path, body in [("/search", {"query": QUERY}), ("/rerank", {"query": QUERY, "documents": [{"id": "x"}]})]:
        answer = client.post(path, json=body)
        assert "cannot reach OpenSearch" in _error(answer, 503, "store_unavailable_exception")
        assert answer.headers["Retry-After"] == "5"
    # Texts need no store: reranking them still works with the cluster down.
    assert client.post("/rerank", json={"query": QUERY, "documents": ["ships at sea"]}).status_code == 200
    # ... with stand-in vectors, since the index cannot say which it was built with; the
    # service builds its engine again on the next request instead of keeping these.
    engine = build_engine(settings)
    assert engine.provisional and engine.vectors.info.name == "glove-6b-50d"
    engine.store.close()
    assert not build_engine(_settings(indexed)).provisional


# --- bad input ---------------------------------------------------------------------------

_BAD = [
    ("/search", b"{", 400, "parse_exception"),
    ("/search", b'{"query": "caf\xe9"}', 400, "parse_exception"),
    ("/search", b"", 400, "parse_exception"),
    ("/search", b'{"query": NaN}', 400, "parse_exception"),
    ("/search", b"[" * 100_000, 400, "parse_exception"),
    ("/search", b'["query"]', 400, "illegal_argument_exception"),
    ("/search", b'{"query": 3}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": ""}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "   "}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "size": "ten"}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "size": true}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "size": 1.5}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "window": 0}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "window": 100000}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "from": 1001, "size": 20}', 400, "illegal_argument_exception"),
    # An empty name is no ranker (not the default: the schema lists the names).
    ("/search", b'{"query": "ships", "ranker": ""}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships", "ranker": "", "documents": ["ships"]}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "ranker": "nope"}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "windw": 5}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "filters": {"year": 2001}}', 400, "illegal_argument_exception"),
    ("/search", b'{"query": "ships", "filters": [{"field": "year", "op": "like", "value": 1}]}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships"}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships", "documents": "text"}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships", "documents": [3]}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships", "documents": [{}]}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships", "documents": [{"id": ["a"]}]}', 400, "illegal_argument_exception"),
    ("/rerank", b'{"query": "ships", "documents": [{"text": "a", "score": "high"}]}', 400, "illegal_argument_exception"),
    # Numbers that overflow a double, anywhere (they became infinity, then a 500).
    *[("/search", b'{"query": "ships", "%s": 1e400}' % name, 400, "parse_exception") for name in (b"size", b"from", b"window")],
    ("/search", b'{"query": "ships", "fusion_weight": -1e400}', 400, "parse_exception"),
    ("/rerank", b'{"query": "ships", "documents": ["a"], "size": 1e400}', 400, "parse_exception"),
    ("/rerank", b'{"query": "ships", "documents": [{"text": "a", "score": 1e999}]}', 400, "parse_exception"),
    ("/search", b'{"query": "ships", "size": 1%s}' % (b"0" * 5000), 400, "parse_exception"),
    # Lone surrogates: valid JSON, not Unicode (the embedded store cannot store or match them).
    ("/search", b'{"query": "ships", "filters": [{"field": "ye\\ud800ar", "value": 1}]}', 400, "parse_exception"),
    ("/search", b'{"query": "ships", "filters": [{"field": "venue", "value": "\\udfff"}]}', 400, "parse_exception"),
    ("/rerank", b'{"query": "ships", "documents": [{"id": "\\ud83d"}]}', 400, "parse_exception"),
    ("/rerank", b'{"query": "ships", "documents": [{"text": "a", "\\udc00": 1}]}', 400, "parse_exception"),  # in a key
    ("/rerank", b'{"query": "ships", "documents": ["\\u00e9t\\u00e9 \\udea2\\ud83d"]}', 400, "parse_exception"),  # a pair reversed
    ("/rerank", b'{"query": "ships", "documents": ["a", {"text": "b"}, "c \\udc00"]}', 400, "parse_exception"),  # not first
]


def test_an_escaped_surrogate_pair_is_one_character_and_accepted(client: FlaskClient) -> None:
    """A client that escapes every character past ASCII sends an emoji as a pair of
    surrogate escapes: JSON reads the pair as one character, valid Unicode."""
    body = b'{"query": "ships \\ud83d\\udea2", "documents": ["ships \\u00e9t\\u00e9 at sea", {"id": "a \\ud83d\\udea2", "text": "a ship"}]}'
    answer = client.post("/rerank", data=body, content_type="application/json")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    results = answer.get_json()["results"]
    assert len(results) == 2 and "a \U0001f6a2" in {result.get("id") for result in results}


@pytest.mark.parametrize("path, body, status, type_", _BAD, ids=[f"{p} {b[:40]!r}" for p, b, _, _ in _BAD])
def test_bad_input_is_a_clear_4xx(client: FlaskClient, path: str, body: bytes, status: int, type_: str) -> None:
    reason = _error(client.post(path, data=body, content_type="application/json"), status, type_)
    assert len(reason) > 10


@pytest.mark.parametrize(
    ("path", "body", "key", "where"),
    [
        ("/search", b'{"query": "translation", "query": "x"}', "query", "query"),
        ("/search", b'{"query": "ships", "filters": [{"field": "year", "value": 1}, {"field": "year", "op": "eq", "op": "gt", "value": 2}]}', "op", "filters[1].op"),
        ("/rerank", b'{"query": "ships", "documents": [{"text": "a"}, {"id": "P01-1027", "text": "b", "id": "c"}]}', "id", "documents[1].id"),
        ("/rerank", b'{"query": "ships", "documents": [{"text": "a", "text": "a"}], "documents": []}', "documents", "documents"),
    ],
)
def test_a_key_given_twice_is_a_400_naming_it_and_its_path(client: FlaskClient, path: str, body: bytes, key: str, where: str) -> None:
    """As OpenSearch and Elasticsearch answer it (Jackson's duplicate detection), not the
    last value silently kept; an outer object's repeat is named before an inner one's."""
    reason = _error(client.post(path, data=body, content_type="application/json"), 400, "json_parse_exception")
    assert reason == f"request body: Duplicate field '{key}' at [{where}]; a key may appear once in an object"


def test_limits_are_413_with_the_setting_named(indexed: Path) -> None:
    client = create_app(_settings(indexed, RERANKER_MAX_BODY_BYTES="2000", RERANKER_MAX_DOCUMENTS="3", RERANKER_MAX_TEXT_CHARS="50")).test_client()
    assert "RERANKER_MAX_BODY_BYTES" in _error(client.post("/search", json={"query": "x" * 3000}), 413, "content_too_long_exception")
    assert "RERANKER_MAX_DOCUMENTS" in _error(client.post("/rerank", json={"query": "ships", "documents": ["a"] * 4}), 413, "content_too_long_exception")
    assert "RERANKER_MAX_TEXT_CHARS" in _error(client.post("/rerank", json={"query": "ships", "documents": ["a" * 51]}), 413, "content_too_long_exception")
    assert "RERANKER_MAX_TEXT_CHARS" in _error(client.post("/search", json={"query": "s" * 51}), 413, "content_too_long_exception")


def test_unknown_routes_and_methods_answer_json(client: FlaskClient) -> None:
    assert _error(client.get("/search"), 405, "method_not_allowed_exception") == "GET is not a method of /search; it takes OPTIONS, POST"
    assert client.get("/search").headers["Allow"] == "OPTIONS, POST"
    assert _error(client.post("/rankers"), 405, "method_not_allowed_exception") == "POST is not a method of /rankers; it takes GET, HEAD, OPTIONS"
    # Also for a method the proxy's catch-all does not take: not its PUT, PATCH, DELETE, ...
    for method in ("TRACE", "PROPFIND"):
        answer = client.open("/search", method=method)
        assert _error(answer, 405, "method_not_allowed_exception") == f"{method} is not a method of /search; it takes OPTIONS, POST"
        assert answer.headers["Allow"] == "OPTIONS, POST"
    assert client.open("/documents/x", method="TRACE").headers["Allow"] == "GET, HEAD, OPTIONS"


def test_a_path_with_an_empty_segment_is_a_404_not_a_405_that_names_its_own_method(client: FlaskClient) -> None:
    """/documents//similar names no document (an empty id): read with its slashes merged, as
    /documents/similar, it answered "GET is not a method of /documents//similar; it takes GET"."""
    for path in ("/documents//similar", "/documents/_doc//similar"):
        reason = _error(client.get(path), 404, "resource_not_found_exception")
        assert reason.startswith(f"no such route: GET {path} ") and reason.endswith("(an empty id names none)"), reason
        for method in ("POST", "OPTIONS"):
            _error(client.open(path, method=method), 404, "resource_not_found_exception")
    # The same for the other routes with a segment: a 405 only where the path is a route.
    for path in ("/experiments//x", "/papers//_search"):
        assert client.open(path, method="PUT").status_code == 404, path
    assert client.put("/experiments/x").status_code == 405


def test_options_lists_the_methods_and_claims_no_html(client: FlaskClient) -> None:
    """An empty 200 typed text/plain, as OpenSearch answers OPTIONS: Flask's default type
    said an HTML page came."""
    for path, allowed in (("/search", {"OPTIONS", "POST"}), ("/documents/x", {"GET", "HEAD", "OPTIONS"})):
        answer = client.options(path)
        assert answer.status_code == 200 and answer.data == b"" and set(answer.headers["Allow"].split(", ")) == allowed, path
        assert answer.headers["Content-Type"] == "text/plain; charset=utf-8", path


# --- probes, metrics, OpenAPI ------------------------------------------------------------


def test_made_up_methods_share_one_metrics_label(client: FlaskClient) -> None:
    for method in ("BREW", "FOO1", "X-Y"):
        assert client.open("/search", method=method).status_code in (404, 405)
    scrape = client.get("/metrics").get_data(as_text=True)
    assert 'method="other"' in scrape and "BREW" not in scrape and "FOO1" not in scrape


def test_metrics_count_requests_and_rerank_latency(client: FlaskClient) -> None:
    before = metric(client, 'reranker_requests_total{endpoint="/search",method="POST",status="200"}')
    client.post("/search", json={"query": QUERY, "ranker": "hidden_topics_code"})
    client.post("/search", json={"query": ""})
    assert metric(client, 'reranker_requests_total{endpoint="/search",method="POST",status="200"}') == before + 1
    assert metric(client, 'reranker_requests_total{endpoint="/search",method="POST",status="400"}') >= 1
    assert metric(client, 'reranker_rerank_duration_seconds_count{endpoint="/search",ranker="hidden_topics_code"}') >= 1
    assert metric(client, 'reranker_request_duration_seconds_count{endpoint="/search"}') >= 2


def test_rerank_routes_count_their_latency_under_their_rule(client: FlaskClient) -> None:
    """Every metric's `endpoint` is the route's rule (the rerank latency said `v1/rerank`
    while the request count said `/v1/rerank`: a dashboard could not join them)."""
    texts = ["Hidden topics of long documents.", "A recipe for bread."]
    sample = f'reranker_rerank_duration_seconds_count{{endpoint="/rerank",ranker="{DEFAULT_RANKER}"}}'
    before = metric(client, sample)
    assert client.post("/rerank", json={"query": QUERY, "documents": texts}).status_code == 200
    assert metric(client, sample) == before + 1
    assert metric(client, 'reranker_requests_total{endpoint="/rerank",method="POST",status="200"}') >= 1


def test_readiness_and_liveness(client: FlaskClient) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").get_json() == {"status": "ready", "documents": 27, "vectors": "glove-6b-50d"}


def test_openapi_describes_every_route(client: FlaskClient) -> None:
    document = client.get("/openapi.json").get_json()
    assert document == openapi_document(client.application)
    described = {(path, method.upper()) for path, item in document["paths"].items() for method in item}
    app = client.application
    catch_alls = {"/<path:path>"}
    served = {
        (re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method)  # /<path:name> -> /{name}
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static" and rule.rule not in catch_alls
        # HEAD only of a route without GET (HEAD /<index>): Flask adds it to every GET route
        for method in (rule.methods or set()) - {"OPTIONS"} - ({"HEAD"} if "GET" in (rule.methods or set()) else set())
    }
    assert served - described == set(), "routes missing from /openapi.json"
    assert described - served == set(), "/openapi.json describes routes that do not exist"


def test_readiness_follows_the_store(osmem_clone: Any, data_dir: Path, tmp_path: Path) -> None:
    settings = Settings.from_env(settings_env(data_dir, HOME=str(tmp_path), OPENSEARCH_URL=osmem_clone.url, **PATIENT))
    client = create_app(settings).test_client()
    assert client.get("/healthz").get_json() == {"status": "ok"}
    answer = client.get("/readyz")
    # A probe has 1.5 s (READINESS_SECONDS); the first one also loads the word vectors, which
    # on a busy machine can leave it no time to ask the cluster (store_unavailable): probe again.
    for _ in range(10):
        if answer.get_json()["error"]["type"] != "store_unavailable_exception":
            break
        answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.get_json()["error"]["type"] == "index_not_found_exception", answer.get_json()
    run(data_dir, "--opensearch-url", osmem_clone.url, "index", str(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)), "--no-progress")
    answer = client.get("/readyz")
    assert answer.status_code == 200 and answer.get_json() == {"status": "ready", "documents": 3, "vectors": "glove-6b-50d"}
    body = client.post("/search", json={"query": "sailors steer the vessel across the ocean", "size": 2}).get_json()
    assert body["status"] == "ok" and body["hits"][0]["id"] == "ships"


def test_an_unreachable_cluster_is_not_ready(data_dir: Path, tmp_path: Path) -> None:
    settings = Settings.from_env(settings_env(data_dir, HOME=str(tmp_path), OPENSEARCH_URL="http://127.0.0.1:9", OPENSEARCH_RETRIES="0"))
    answer = create_app(settings).test_client().get("/readyz")
    assert answer.status_code == 503 and answer.get_json()["error"]["type"] == "store_unavailable_exception" and answer.headers["Retry-After"] == "5"
    assert create_app(settings).test_client().get("/healthz").status_code == 200


# --- gunicorn ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http(url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_reranker_serve_runs_gunicorn_workers_that_share_metrics(indexed: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RERANKER_DATA_DIR": str(indexed), "HOME": str(indexed)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "reranker.cli", "serve", "--bind", f"127.0.0.1:{port}", "--workers", "2", "--threads", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if _http(base + "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)
        for _ in range(12):
            status, raw = _http(base + "/search", {"query": QUERY, "size": 3})
            assert status == 200 and len(json.loads(raw)["hits"]) == 3
        status, raw = _http(base + "/search", {"query": ""})
        assert status == 400 and json.loads(raw)["error"]["type"] == "illegal_argument_exception"
        # 12 searches spread over two workers, counted in one scrape.
        metrics = _http(base + "/metrics")[1].decode()
        assert 'reranker_requests_total{endpoint="/search",method="POST",status="200"} 12.0' in metrics
        tagged = urllib.request.Request(base + "/search", data=b'{"query": "ships"}', headers={"Content-Type": "application/json", "X-Request-Id": "lb-42"})
        with urllib.request.urlopen(tagged) as answer:
            assert answer.status == 200 and answer.headers["X-Request-Id"] == "lb-42"
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
    assert server.returncode == 0, output
    assert "Booting worker" in output and "Shutting down: Master" in output
    # One access line per request, on gunicorn's stream (with its timestamp and pid).
    searches = [line for line in output.splitlines() if "method=POST path=/search " in line]
    assert len(searches) == 14, output[-3000:]
    assert sum(" status=200 " in line for line in searches) == 13 and sum(" status=400 " in line for line in searches) == 1
    assert re.search(r"^\[.+\] \[\d+\] \[INFO\] method=POST path=/search status=200 duration_ms=\d+\.\d request_id=lb-42 remote=127\.0\.0\.1$", output, re.M)


def test_serve_on_an_empty_index_reranks_sent_texts_and_says_how(tmp_path: Path, glove: object) -> None:
    # A service in front of a cluster whose documents it never indexed: the default ranker
    # once answered every rerank degraded (its correction read an index's word statistics).
    empty = tmp_path / "empty"
    empty.mkdir()
    service = Service(empty, {"RERANKER_API_KEYS": "k"})
    try:
        # /search has nothing to find: an answer, not an error (docs/operations.md, 404's row).
        status, _, searched = http_json(service.url + "/search", {"query": "machine translation"})
        assert status == 200 and searched["status"] == "ok" and searched["hits"] == [], searched
        texts = ["a beam search decoder for phrase-based statistical machine translation", "bread is baked from flour"]
        status, _, default = http_json(service.url + "/rerank", {"query": "machine translation", "documents": texts[::-1]})
        assert status == 200 and default["status"] == "ok" and default["first_stage"] == "order", default
        # Two texts: the order (bread first) outweighs the topics in the fusion, but the topics
        # were scored, and favour the translation paper.
        topic_score = {r["index"]: r["ranker_score"] for r in default["results"]}
        assert topic_score[1] > 0 > topic_score[0], default
        status, _, alone = http_json(service.url + "/rerank", {"query": "machine translation", "documents": texts[::-1], "ranker": "hidden_topics"})
        assert status == 200 and alone["status"] == "ok" and [r["index"] for r in alone["results"]] == [1, 0]
        cohere = urllib.request.Request(
            service.url + "/v1/rerank", data=json.dumps({"query": "machine translation", "documents": texts[::-1]}).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
        )  # fmt: skip
        with urllib.request.urlopen(cohere) as answer:
            found = json.loads(answer.read())
            assert answer.headers["X-Reranker-First-Stage"] == "order"
        assert found["status"] == "ok" and len(found["results"]) == 2
    finally:
        output = service.stop()
    assert "(1 worker x 4 threads); API: http://" in output  # conftest.Service's pools, counted in good English
    warning = next(line for line in output.splitlines() if "the index is empty" in line)
    assert "/search finds nothing (200, no hits) and /readyz answers 200 with documents: 0 until `reranker index CORPUS.jsonl`" in warning
    assert "/rerank and the Cohere routes rerank sent texts meanwhile, by their order, topics and best passages" in warning


def test_every_answer_has_a_request_id_and_one_access_line(client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="reranker.access")
    answers = {
        "ok": client.post("/search", json={"query": QUERY, "size": 1}, headers={"X-Request-Id": "5f1d6c1e-0b7e-4c53-9a43-0c2e2b2b9f11"}),
        "bad": client.post("/search", data=b"{", content_type="application/json"),
        "unknown route": client.get("/no/such/route"),
        "wrong method": client.delete("/search"),
        "probe": client.get("/healthz", headers={"X-Request-Id": "has space"}),
    }
    assert [answer.status_code for answer in answers.values()] == [200, 400, 404, 405, 200]
    assert answers["ok"].headers["X-Request-Id"] == "5f1d6c1e-0b7e-4c53-9a43-0c2e2b2b9f11"
    made = [answer.headers["X-Request-Id"] for name, answer in answers.items() if name != "ok"]
    assert all(re.fullmatch(r"[0-9a-f]{32}", made_id) for made_id in made) and len(set(made)) == len(made)
    lines = [record.getMessage() for record in caplog.records if record.name == "reranker.access"]
    assert len(lines) == len(answers)
    expected = [("POST", "/search", 200), ("POST", "/search", 400), ("GET", "/no/such/route", 404), ("DELETE", "/search", 405), ("GET", "/healthz", 200)]
    for line, answer, (method, path, status) in zip(lines, answers.values(), expected):
        assert re.fullmatch(rf"method={method} path={re.escape(path)} status={status} duration_ms=\d+\.\d request_id={answer.headers['X-Request-Id']} remote=127\.0\.0\.1", line), line


def test_bad_service_settings_fail_at_start(indexed: Path) -> None:
    from reranker.errors import ConfigError, UnknownRankerError

    with pytest.raises(ConfigError, match="RERANKER_DEFAULT_RANKER names no ranker: 'nope'; valid rankers"):
        _settings(indexed, RERANKER_DEFAULT_RANKER="nope")
    with pytest.raises(UnknownRankerError, match="valid rankers"):  # settings made in code
        create_app(replace(_settings(indexed), service=ServiceSettings(default_ranker="nope")))
    code, _ = run(indexed, "serve", "--bind", "nowhere")
    assert code == 2
    with pytest.raises(SystemExit) as refused:  # argparse refuses it
        run(indexed, "serve", "--threads", "0")
    assert refused.value.code == 2


def test_a_serve_that_fails_leaves_the_environment_as_it_found_it(indexed: Path, tmp_path: Path) -> None:
    # serve puts its config file's values and its options in the environment for gunicorn:
    # a serve that fails after that (here: vectors that are not there) must take them back,
    # or the next command of the same process reads a config file it was not given.
    config = tmp_path / "serve.toml"
    config.write_text('RERANKER_VECTORS = "/nonexistent/vectors.txt"\nRERANKER_READ_TIMEOUT = 3\n', encoding="utf-8")
    before = dict(os.environ)
    code, _ = run(indexed, "--config", str(config), "serve", "--bind", f"127.0.0.1:{_free_port()}", "--workers", "1")
    assert code == 1
    assert dict(os.environ) == before
    config.unlink()
    assert run(indexed, "config")[0] == 0


def test_serve_on_a_port_in_use_says_so_in_one_line(indexed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        assert run(indexed, "serve", "--bind", f"127.0.0.1:{port}")[0] == 1
        assert time.monotonic() - started < 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err


def test_the_cli_window_has_the_services_limit(indexed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(indexed, "search", "ships", "--window", "100000000")[0] == 2
    assert "RERANKER_MAX_WINDOW" in capsys.readouterr().err
    assert run(indexed, "search", "ships", "--window", "1000")[0] == 0


def test_the_fusion_weight_is_set_per_request(client: FlaskClient) -> None:
    def ids(path: str, body: dict[str, Any]) -> list[str]:
        answer = client.post(path, json=body)
        assert answer.status_code == 200, answer.get_json()
        found = answer.get_json()
        return [hit["id"] for hit in found["hits" if path == "/search" else "results"]]

    search = {"query": QUERY, "size": 8, "window": 20}
    bm25 = ids("/search", {**search, "ranker": "bm25"})
    topics = ids("/search", {**search, "ranker": "hidden_topics"})
    assert bm25 != topics
    # Weight 0: the fusion is BM25's order; weight 1: the base ranker's.
    assert ids("/search", {**search, "ranker": "hidden_topics+bm25", "fusion_weight": 0}) == bm25
    assert ids("/search", {**search, "ranker": "hidden_topics+bm25", "fusion_weight": 1.0}) == topics
    documents = [{"id": doc_id} for doc_id in bm25]
    assert ids("/rerank", {"query": QUERY, "ranker": "hidden_topics+bm25", "fusion_weight": 0, "documents": documents}) == bm25
    for bad in (1.5, -0.1, "0.3", True):
        answer = client.post("/search", json={**search, "ranker": "hidden_topics+bm25", "fusion_weight": bad})
        assert answer.status_code == 400 and "fusion_weight" in answer.get_json()["error"]["reason"]
    # A ranker without a weight refuses one, rather than answer as if it had been applied.
    assert ids("/search", {**search, "fusion_weight": 0.5}) != []  # the default ranker is a weighted fusion
    for unweighted in ("bm25", "hidden_topics", "wmd", "hidden_topics+bm25:rrf"):
        for path, body in (("/search", search), ("/rerank", {"query": QUERY, "documents": documents})):
            answer = client.post(path, json={**body, "ranker": unweighted, "fusion_weight": 0.5})
            reason = _error(answer, 400, "illegal_argument_exception")
            assert f"[fusion_weight] weighs a min-max, z-score or maxp fusion with BM25; ranker '{unweighted}' has no weight" in reason


def test_a_body_not_declared_json_is_a_415(client: FlaskClient) -> None:
    """A browser posts text/plain and form bodies cross-site without a preflight: the JSON
    routes refuse them instead of parsing them as JSON (issue 23, point 5)."""
    body = json.dumps({"query": "machine translation"})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        for path in ("/search", "/rerank", "/events"):
            answer = client.post(path, data=body, content_type=content_type)
            assert answer.status_code == 415, (path, content_type, answer.get_data(as_text=True))
            error = answer.get_json()["error"]
            assert error["type"] == "media_type_header_exception" and "application/json" in error["reason"]
    assert client.post("/search", data=body, content_type="application/json; charset=utf-8").status_code == 200
    assert client.post("/search", data=body, content_type="application/vnd.elasticsearch+json; compatible-with=8").status_code == 200


def test_a_declared_charset_is_read_as_opensearch_reads_it_and_named_when_the_bytes_are_not_utf8(client: FlaskClient) -> None:
    """JSON is UTF-8 (RFC 8259) and OpenSearch reads it so whatever charset the Content-Type
    names. A client that labels UTF-8 bytes ISO-8859-1 is served, as by the cluster; bytes
    that are not UTF-8 are the 400 they were, which now names the declared charset (the
    likely reason) instead of leaving the client to guess."""
    body = {"query": "traduction automatique à base de règles"}
    utf8 = json.dumps(body, ensure_ascii=False).encode()
    for charset in ("utf-8", "UTF-8", '"utf-8"', "utf8", "ISO-8859-1", "utf-16", "klingon"):
        assert client.post("/search", data=utf8, content_type=f"application/json; charset={charset}").status_code == 200, charset
    for path in ("/search", "/rerank", "/events"):
        for charset, encoded in (("ISO-8859-1", "latin-1"), ("utf-16", "utf-16"), ('"windows-1252"', "cp1252")):
            answer = client.post(path, data=json.dumps(body, ensure_ascii=False).encode(encoded), content_type=f"application/json; charset={charset}")
            reason = _error(answer, 400, "parse_exception")
            assert reason.startswith(f"request body, declared as charset={charset.strip(chr(34))}, is not UTF-8 (invalid byte at offset "), (path, reason)
            assert reason.endswith("as OpenSearch reads it, whatever the charset: send it in UTF-8"), (path, reason)
    # No charset, or UTF-8 declared: the plain "not UTF-8".
    for content_type in ("application/json", "application/json; charset=utf-8"):
        reason = _error(client.post("/search", data=json.dumps(body, ensure_ascii=False).encode("latin-1"), content_type=content_type), 400, "parse_exception")
        assert reason.startswith("request body is not UTF-8 (invalid byte at offset ") and "charset" not in reason, reason


def test_a_gzip_body_is_read_and_another_coding_refused(client: FlaskClient) -> None:
    """Content-Encoding: gzip (opensearch-py's and elasticsearch-py's http_compress) is read
    as OpenSearch reads it, within RERANKER_MAX_BODY_BYTES once decompressed; a coding the
    service does not read is a 415 that names it, not a JSON error about the bytes."""
    body = json.dumps({"query": "machine translation", "size": 3}).encode()
    plain = client.post("/search", data=body, content_type="application/json").get_json()
    gzipped = client.post("/search", data=gzip.compress(body), content_type="application/json", headers={"Content-Encoding": "gzip"})
    assert gzipped.status_code == 200 and [h["id"] for h in gzipped.get_json()["hits"]] == [h["id"] for h in plain["hits"]]
    reason = _error(client.post("/search", data=body, content_type="application/json", headers={"Content-Encoding": "br"}), 415, "media_type_header_exception")
    assert "Content-Encoding 'br' is not supported" in reason
    reason = _error(client.post("/search", data=body, content_type="application/json", headers={"Content-Encoding": "gzip"}), 400, "parse_exception")
    assert "not valid gzip" in reason
    reason = _error(client.post("/search", data=gzip.compress(body)[:-6], content_type="application/json", headers={"Content-Encoding": "gzip"}), 400, "parse_exception")
    assert "cut short" in reason
    bomb = gzip.compress(b'{"query": "' + b"a" * 11_000_000 + b'"}')  # 11 MB in about 11 kB
    assert len(bomb) < 100_000
    reason = _error(client.post("/rerank", data=bomb, content_type="application/json", headers={"Content-Encoding": "gzip"}), 413, "content_too_long_exception")
    assert "RERANKER_MAX_BODY_BYTES" in reason


def test_options_tells_the_methods_a_route_really_has(client: FlaskClient) -> None:
    """Not the proxy catch-all's PUT, DELETE, PATCH (issue 23, point 5)."""
    expected = {"/search": {"POST", "OPTIONS"}, "/rerank": {"POST", "OPTIONS"}, "/healthz": {"GET", "HEAD", "OPTIONS"},
                "/experiments/x": {"GET", "HEAD", "PATCH", "DELETE", "OPTIONS"}}  # fmt: skip
    for path, methods in expected.items():
        answer = client.options(path)
        assert answer.status_code == 200 and set(answer.headers["Allow"].split(", ")) == methods, (path, answer.headers.get("Allow"))
