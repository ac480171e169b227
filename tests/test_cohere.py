"""Conformance of /v1/rerank and /v2/rerank with what OpenSearch and Elasticsearch parse.

OpenSearch's ml-commons reads the response with Jayway JsonPath over json-smart in its
permissive mode, then casts `index` to Integer and `relevance_score` to Double:
json-smart makes a literal without '.'/'e' an Integer and a float literal longer than 18
characters a BigDecimal, and either fails the cast. Both clusters scatter scores by
`index` into an array and fail unless there is exactly one result per document. These
tests check the exact bytes against those rules, with the request bodies the two
clusters actually send.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import SAMPLE, metric, sample_indexed, settings_env
from flask.testing import FlaskClient
from hypothesis import given
from hypothesis import strategies as st

from reranker.config import DEFAULT_RANKER, Settings
from reranker.service import create_app
from reranker.service.cohere import score_literal

KEY = "test-key-1"
HEADERS = {"Authorization": f"Bearer {KEY}"}
QUERY = "statistical machine translation with word alignment models"
_SCORE = re.compile(rb'"relevance_score": ([^,}\]]+)')
_INDEX = re.compile(rb'"index": ([^,}\]]+)')


def _documents(n: int) -> list[str]:
    lines = (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines[:n]]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    return sample_indexed(tmp_path_factory, "cohere")


def _app(data_dir: Path, **env: str) -> Any:
    return create_app(Settings.from_env({**settings_env(data_dir), "RERANKER_API_KEYS": f"{KEY}, other-key", **env}))


@pytest.fixture(scope="module")
def client(indexed: Path) -> Iterator[FlaskClient]:
    app = _app(indexed)
    yield app.test_client()
    app.extensions["reranker"].close()


def json_smart_type(literal: bytes) -> str:
    """The Java type json-smart (MODE_PERMISSIVE) gives a JSON number literal."""
    text = literal.decode()
    if not any(c in text for c in ".eE"):
        return "Integer"
    return "BigDecimal" if len(text) > 18 else "Double"


def _conforms(raw: bytes, n: int) -> list[tuple[int, float]]:
    """Assert OpenSearch's and Elasticsearch's rules on a response body; (index, score) pairs."""
    body = json.loads(raw)
    assert set(body) >= {"results", "id", "meta"}
    scores, indices = _SCORE.findall(raw), _INDEX.findall(raw)
    assert len(scores) == len(indices) == len(body["results"]) == n, "one result per document"
    for literal in scores:
        assert json_smart_type(literal) == "Double", f"relevance_score {literal!r} would not cast to Double"
        digits = literal.split(b"e")[0].replace(b"-", b"").replace(b".", b"").lstrip(b"0")
        assert len(digits) <= 9, f"{literal!r} has more than 9 significant digits"
        assert math.isfinite(float(literal))
    for literal in indices:
        assert json_smart_type(literal) == "Integer"
    pairs = [(int(i), float(s)) for i, s in zip(indices, scores)]
    assert sorted(i for i, _ in pairs) == list(range(n)), "indices must be a permutation of 0..n-1"
    return pairs


# --- the score literal -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, literal",
    [(1.0, "1.0"), (0.0, "0.0"), (-0.0, "0.0"), (1, "1.0"), (0.12345678901234568, "0.123456789"), (2.4876490010363496e-05, "2.487649e-05"), (1e-10, "1e-10"), (0.5, "0.5"), (0.9999999999, "1.0")],
)
def test_score_literals(value: float, literal: str) -> None:
    assert score_literal(value) == literal


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_are_refused(value: float) -> None:
    with pytest.raises(ValueError):
        score_literal(value)


@given(st.floats(min_value=-1e300, max_value=1e300, allow_nan=False))
def test_every_finite_score_becomes_a_short_float_literal(value: float) -> None:
    literal = score_literal(value).encode()
    assert json_smart_type(literal) == "Double"
    assert float(literal) == pytest.approx(value, rel=1e-8, abs=1e-300)


# --- the routes --------------------------------------------------------------------------


def test_opensearch_connector_request_gets_one_result_per_document(client: FlaskClient) -> None:
    documents = _documents(6) + [""]  # OpenSearch sends "" for a hit without the field
    # Exactly what `connector.pre_process.cohere.rerank` + the README's request_body produce.
    raw_request = json.dumps({"documents": documents, "query": QUERY, "model": "hidden_topics", "top_n": len(documents)})
    answer = client.post("/v1/rerank", data=raw_request, headers={**HEADERS, "Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    raw = answer.get_data()
    pairs = _conforms(raw, len(documents))
    assert [s for _, s in pairs] == sorted((s for _, s in pairs), reverse=True), "best first, as Cohere does"
    assert dict(pairs)[6] == 0.0, "an empty document scores 0"
    body = json.loads(raw)
    assert body["meta"]["api_version"] == {"version": "1"} and body["status"] == "ok"


def test_top_n_never_drops_documents_unless_asked(client: FlaskClient) -> None:
    documents = _documents(5)
    answer = client.post("/v2/rerank", json={"query": QUERY, "documents": documents, "top_n": 2, "model": "hidden_topics"}, headers=HEADERS)
    full = _conforms(answer.get_data(), 5)
    cut = client.post("/v2/rerank", json={"query": QUERY, "documents": documents, "top_n": 2, "apply_top_n": True, "model": "hidden_topics"}, headers=HEADERS)
    assert [r["index"] for r in cut.get_json()["results"]] == [i for i, _ in full[:2]]


def test_elasticsearch_custom_service_request(client: FlaskClient) -> None:
    # The README's `request` template: no top_n (text_similarity_reranker sends none).
    documents = _documents(4)
    raw_request = '{"documents": %s, "query": %s, "model": "hidden_topics"}' % (json.dumps(documents), json.dumps(QUERY))
    answer = client.post("/v2/rerank", data=raw_request, headers={**HEADERS, "Content-Type": "application/json"})
    assert answer.status_code == 200
    _conforms(answer.get_data(), 4)
    assert answer.get_json()["meta"]["api_version"] == {"version": "2"}


def test_scores_equal_the_native_rerank_and_stored_ids_give_the_same(client: FlaskClient, indexed: Path) -> None:
    documents = _documents(5)
    native = client.post("/rerank", json={"query": QUERY, "documents": documents}).get_json()["results"]
    cohere = client.post("/v1/rerank", json={"query": QUERY, "documents": documents}, headers=HEADERS).get_json()["results"]
    assert [r["index"] for r in cohere] == [r["index"] for r in native]
    assert [r["relevance_score"] for r in cohere] == pytest.approx([r["score"] for r in native], rel=1e-8)
    ids = [json.loads(line)["id"] for line in (SAMPLE / "corpus.jsonl").read_text().splitlines()[:5]]
    by_id = client.post("/v1/rerank", json={"query": QUERY, "documents": [{"id": i} for i in ids]}, headers=HEADERS).get_json()["results"]
    assert [r["relevance_score"] for r in by_id] == pytest.approx([r["relevance_score"] for r in cohere], rel=1e-5)


def test_v1_objects_keep_extra_fields_and_return_documents(client: FlaskClient) -> None:
    documents = [{"text": text, "source": "acl"} for text in _documents(3)]
    body = client.post("/v1/rerank", json={"query": QUERY, "documents": documents, "return_documents": True, "max_chunks_per_doc": 10}, headers=HEADERS).get_json()
    assert [r["document"]["text"] for r in body["results"]] == [documents[r["index"]]["text"] for r in body["results"]]


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("asked", [{}, {"return_documents": False}, {"return_documents": True}])
@pytest.mark.parametrize("as_objects", [False, True])
def test_results_hold_exactly_the_keys_the_clusters_parse(client: FlaskClient, version: str, asked: dict[str, bool], as_objects: bool) -> None:
    """Elasticsearch's parser rejects any other key inside a result, so each result is
    {index, relevance_score} and, only when asked, document {text}: an extra field sent
    with a document object is not given back. The default ranker, both routes."""
    texts = _documents(3)
    documents: list[Any] = [{"text": t, "source": "acl"} for t in texts] if as_objects else texts
    answer = client.post(f"/{version}/rerank", json={"query": QUERY, "documents": documents, **asked}, headers=HEADERS)
    assert answer.status_code == 200 and answer.headers["X-Reranker-Ranker"] == DEFAULT_RANKER
    _conforms(answer.get_data(), 3)
    for result in answer.get_json()["results"]:
        if asked.get("return_documents"):
            assert set(result) == {"index", "relevance_score", "document"}
            assert result["document"] == {"text": texts[result["index"]]}
        else:
            assert set(result) == {"index", "relevance_score"}


def test_empty_documents_list(client: FlaskClient) -> None:
    answer = client.post("/v1/rerank", json={"query": QUERY, "documents": []}, headers=HEADERS)
    assert answer.status_code == 200 and b'"results": []' in answer.get_data()


_MISSING = "missing API key: send 'Authorization: Bearer <key>'"


@pytest.mark.parametrize(
    "headers, reason",
    [({}, _MISSING), ({"Authorization": "Bearer wrong"}, "invalid API key"), ({"Authorization": f"Basic {KEY}"}, _MISSING), ({"Authorization": "Bearer "}, _MISSING)],
)
def test_a_missing_or_wrong_key_is_401(client: FlaskClient, headers: dict[str, str], reason: str) -> None:
    for path in ("/v1/rerank", "/v2/rerank"):
        answer = client.post(path, json={"query": QUERY, "documents": ["a"]}, headers=headers)
        assert answer.status_code == 401 and answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert answer.get_json()["error"] == {"root_cause": [{"type": "security_exception", "reason": reason}], "type": "security_exception", "reason": reason}


def test_the_key_is_checked_before_the_query_parameters(client: FlaskClient) -> None:
    # A caller without the key learns nothing of what the route takes.
    answer = client.post("/v1/rerank?top_n=3", json={"query": QUERY, "documents": ["a"]})
    assert answer.status_code == 401 and answer.get_json()["error"]["reason"] == _MISSING
    answer = client.post("/v1/rerank?top_n=3", json={"query": QUERY, "documents": ["a"]}, headers=HEADERS)
    assert answer.status_code == 400
    assert answer.get_json()["error"]["reason"] == "unknown query parameter [top_n]; this route takes no query parameters"


def test_keys_come_from_a_file_and_none_configured_refuses_all(indexed: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# rotated 2026-11\nfile-key\n")
    app = create_app(Settings.from_env({**settings_env(indexed), "RERANKER_API_KEYS_FILE": str(keys)}))
    assert app.test_client().post("/v2/rerank", json={"query": QUERY, "documents": ["a"]}, headers={"Authorization": "Bearer file-key"}).status_code == 200
    bare = create_app(Settings.from_env(settings_env(indexed))).test_client()
    answer = bare.post("/v2/rerank", json={"query": QUERY, "documents": ["a"]}, headers={"Authorization": "Bearer anything"})
    assert answer.status_code == 401 and "RERANKER_API_KEYS" in answer.get_json()["error"]["reason"]


@pytest.mark.parametrize(
    "body, status",
    [
        (b'{"query": "x"}', 400),
        (b'{"documents": ["a"]}', 400),
        (b'{"query": "", "documents": ["a"]}', 400),
        (b'{"query": "x", "documents": ["a"], "top_n": 0}', 400),
        (b'{"query": "x", "documents": ["a"], "top_n": "all"}', 400),
        (b'{"query": "x", "documents": ["a"], "top_n": 1e400}', 400),
        (b'{"query": "x", "documents": ["a"], "model": 3}', 400),
        (b'{"query": "x", "documents": [{"title": "no text"}]}', 400),
        (b'{"query": "x", "documents": ["a"], "colour": 1}', 400),
        (b'{"query": "x", "documents": [{"id": "not-stored"}]}', 404),
        (b"\xff", 400),
        (b"{", 400),
    ],
)
def test_bad_requests_are_4xx_json(client: FlaskClient, body: bytes, status: int) -> None:
    answer = client.post("/v2/rerank", data=body, headers={**HEADERS, "Content-Type": "application/json"})
    assert answer.status_code == status and answer.get_json()["error"]["reason"]


@pytest.mark.parametrize("model", ["rerank-english-v3.0", "rerank-v3.5", "rerank-multilingual-v3.0", "hidden-topics"])
def test_a_model_that_is_not_a_ranker_means_the_default_and_says_so(client: FlaskClient, model: str) -> None:
    """The model names the clusters' tutorials send (and any other that is not a ranker)."""
    documents = _documents(4)
    default = client.post("/v2/rerank", json={"query": QUERY, "documents": documents}, headers=HEADERS)
    assert "warnings" not in default.get_json()["meta"] and default.headers["X-Reranker-Ranker"] == DEFAULT_RANKER
    for version in ("v1", "v2"):
        answer = client.post(f"/{version}/rerank", json={"query": QUERY, "documents": documents, "model": model, "return_documents": True}, headers=HEADERS)
        assert answer.status_code == 200
        body = answer.get_json()
        assert _conforms(answer.get_data(), 4) == _conforms(default.get_data(), 4), "the default ranker's order and scores"
        assert all(set(result) == {"index", "relevance_score", "document"} and result["document"] == {"text": documents[result["index"]]} for result in body["results"])
        assert body["meta"]["warnings"] == [
            f"model {model!r} is not a ranker of this service: ranked with the default ranker {DEFAULT_RANKER!r} (GET /rankers lists the rankers a model may name)"
        ]
        assert body["meta"]["api_version"] == {"version": version[1]} and answer.headers["X-Reranker-Ranker"] == DEFAULT_RANKER


def test_a_model_that_names_a_ranker_picks_it(client: FlaskClient) -> None:
    documents = _documents(5)
    default = _conforms(client.post("/v1/rerank", json={"query": QUERY, "documents": documents}, headers=HEADERS).get_data(), 5)
    for model in ("bm25", "hidden_topics"):
        answer = client.post("/v1/rerank", json={"query": QUERY, "documents": documents, "model": model}, headers=HEADERS)
        assert answer.status_code == 200 and answer.headers["X-Reranker-Ranker"] == model and "warnings" not in answer.get_json()["meta"]
        assert all(set(result) == {"index", "relevance_score"} for result in answer.get_json()["results"])
        assert _conforms(answer.get_data(), 5) != default, f"{model} ranks otherwise than the default"


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_the_rerank_latency_is_labelled_with_the_routes_rule(client: FlaskClient, path: str) -> None:
    """As the request counts are (it said `v1/rerank`: a dashboard could not join the two)."""
    latency = f'reranker_rerank_duration_seconds_count{{endpoint="{path}",ranker="{DEFAULT_RANKER}"}}'
    before = metric(client, latency)
    answer = client.post(path, json={"query": QUERY, "documents": _documents(3), "model": "rerank-v3.5"}, headers=HEADERS)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert metric(client, latency) == before + 1
    assert metric(client, f'reranker_requests_total{{endpoint="{path}",method="POST",status="200"}}') >= 1


def test_topics_of_texts_are_cached(client: FlaskClient) -> None:
    documents = [text + " (cache probe)" for text in _documents(4)]

    def count(result: str) -> float:
        return metric(client, f'reranker_topic_cache_lookups_total{{result="{result}"}}')

    computed, hits = count("computed"), count("hit")
    first = client.post("/v1/rerank", json={"query": QUERY, "documents": documents}, headers=HEADERS).get_json()["results"]
    assert count("computed") == computed + 4
    second = client.post("/v1/rerank", json={"query": "a different query about parsing", "documents": documents}, headers=HEADERS).get_json()["results"]
    assert count("computed") == computed + 4 and count("hit") == hits + 4
    assert sorted(r["index"] for r in first) == sorted(r["index"] for r in second) == [0, 1, 2, 3]


def test_a_degraded_answer_still_conforms(indexed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reranker.rankers as rankers

    class Broken:
        name, variant, needs = "broken", "paper", frozenset()

        def score(self, query: Any, window: Any) -> Any:
            raise RuntimeError("no")

    monkeypatch.setitem(rankers.RANKERS, "broken", lambda options: Broken())
    answer = _app(indexed).test_client().post("/v1/rerank", json={"query": QUERY, "documents": _documents(3), "model": "broken"}, headers=HEADERS)
    pairs = _conforms(answer.get_data(), 3)
    assert [i for i, _ in pairs] == [0, 1, 2], "degraded: the caller's order"
    body = answer.get_json()
    assert body["status"] == "degraded" and "ranker 'broken' failed" in body["meta"]["warnings"][0]
    assert answer.headers["X-Reranker-Status"] == "degraded"
    assert answer.headers["X-Reranker-First-Stage"] == "order", "a degraded answer keeps the order sent, and says so"


@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank"])
def test_a_degraded_answer_scores_in_the_units_of_a_ranked_one(route: str, tmp_path: Path, glove: object) -> None:
    """With the cluster down (a port nothing listens on) the topics cannot be read and the
    caller's order is kept; its scores are min-max over the request as a ranked answer's
    are, so one document scores 0 either way (it was 1.0 when degraded)."""
    client = _app(tmp_path, OPENSEARCH_URL="http://127.0.0.1:9", OPENSEARCH_RETRIES="0").test_client()
    for documents, expected in [(1, [0.0]), (2, [1.0, 0.0]), (3, [1.0, 0.5, 0.0])]:
        answer = client.post(route, json={"query": QUERY, "documents": _documents(documents)}, headers=HEADERS)
        assert answer.status_code == 200 and answer.headers["X-Reranker-Status"] == "degraded"
        assert "cannot reach OpenSearch" in answer.get_json()["meta"]["warnings"][0]
        pairs = _conforms(answer.get_data(), documents)
        assert pairs == list(enumerate(expected)), "the caller's order, first 1 and last 0"


def test_a_ranker_that_ties_every_document_says_so(client: FlaskClient) -> None:
    """Identical texts get the same score: the order is the caller's, and the answer must
    not pass it off as a ranking."""
    answer = client.post("/v2/rerank", json={"query": QUERY, "documents": ["a ship"] * 3, "model": "hidden_topics"}, headers=HEADERS)
    body = answer.get_json()
    assert answer.status_code == 200 and [r["index"] for r in body["results"]] == [0, 1, 2]
    assert answer.headers["X-Reranker-Status"] == "tied"
    assert any("same score" in warning for warning in body["meta"]["warnings"])
    ranked = client.post("/v2/rerank", json={"query": QUERY, "documents": ["a ship", "a loaf"], "model": "hidden_topics"}, headers=HEADERS)
    assert ranked.headers["X-Reranker-Status"] == "ok"


# --- first-stage evidence when the clusters send texts only (issue 22, point 0) -----------


def _sample_texts(client_app: Any, query: str, size: int) -> tuple[list[str], list[str], list[float]]:
    """The store's own BM25 top `size` for `query`: ids, texts and scores, best first."""
    engine = client_app.extensions["reranker"].engine()
    hits = engine.store.bm25(query, size)
    found = engine.store.documents([hit.doc_id for hit in hits])
    return [hit.doc_id for hit in hits], [found[hit.doc_id].full_text for hit in hits], [hit.bm25_score for hit in hits]


def test_texts_without_scores_get_bm25_with_the_index_statistics(indexed: Path) -> None:
    """The clusters send texts only. Scored as the index would score them, the `bm25`
    ranker must put a shuffled window back in the store's own BM25 order."""
    app = _app(indexed)
    try:
        ids, texts, scores = _sample_texts(app, QUERY, 12)
        shuffled = list(reversed(range(len(texts))))  # the worst first: the order must not be what decides
        answer = app.test_client().post(
            "/v1/rerank", json={"query": QUERY, "model": "bm25", "documents": [texts[i] for i in shuffled]}, headers=HEADERS
        )
        assert answer.status_code == 200
        assert answer.headers["X-Reranker-First-Stage"] == "index_bm25"
        order = [ids[shuffled[r["index"]]] for r in answer.get_json()["results"]]
        # The store's order, but for hits whose scores are nearer than tantivy's length
        # quantisation tells apart (below): P39_p07 and Pling_p07 differ by 0.7%.
        position = {doc_id: rank for rank, doc_id in enumerate(order)}
        apart = [(a, b) for i, a in enumerate(ids) for b, score in zip(ids[i + 1 :], scores[i + 1 :]) if scores[i] > 1.03 * score]
        assert len(apart) > 40 and all(position[a] < position[b] for a, b in apart), order
        # And the scores are the index's (tantivy quantises lengths: within a few per cent).
        got = {ids[shuffled[r["index"]]]: r["relevance_score"] for r in answer.get_json()["results"]}
        for doc_id, score in zip(ids, scores):
            assert got[doc_id] == pytest.approx(score, rel=0.03)
    finally:
        app.extensions["reranker"].close()


def test_the_default_ranker_reads_the_texts_first_stage(indexed: Path) -> None:
    """Texts only, and the same texts with the scores the first stage gave them: the
    default fusion orders both alike (it reads BM25 of the texts, not equal scores)."""
    app = _app(indexed)
    try:
        client = app.test_client()
        _, texts, scores = _sample_texts(app, QUERY, 15)
        bare = client.post("/rerank", json={"query": QUERY, "documents": [{"text": t} for t in texts]}).get_json()
        given = client.post(
            "/rerank", json={"query": QUERY, "documents": [{"text": t, "score": s} for t, s in zip(texts, scores)]}
        ).get_json()
        assert bare["first_stage"] == "index_bm25" and given["first_stage"] == "scores"
        assert [r["index"] for r in bare["results"]][:5] == [r["index"] for r in given["results"]][:5]
        # A ranker that reads no first stage: the texts' only first stage is their order
        # (scores sent are still the caller's first stage).
        alone = client.post("/rerank", json={"query": QUERY, "ranker": "hidden_topics_corrected", "documents": [{"text": t} for t in texts]}).get_json()
        assert alone["status"] == "ok" and alone["first_stage"] == "order"
        scored = [{"text": t, "score": s} for t, s in zip(texts, scores)]
        alone = client.post("/rerank", json={"query": QUERY, "ranker": "hidden_topics_corrected", "documents": scored}).get_json()
        assert alone["first_stage"] == "scores"
    finally:
        app.extensions["reranker"].close()


def test_a_key_given_twice_is_a_400_on_the_cohere_routes(client: FlaskClient) -> None:
    for route in ("/v1/rerank", "/v2/rerank"):
        body = b'{"model": "bm25", "query": "ships", "documents": ["a", "b"], "top_n": 1, "top_n": 2}'
        answer = client.post(route, data=body, content_type="application/json", headers=HEADERS)
        assert answer.status_code == 400 and answer.get_json()["error"]["type"] == "json_parse_exception"
        assert answer.get_json()["error"]["reason"] == "request body: Duplicate field 'top_n' at [top_n]; a key may appear once in an object"


def test_scores_for_some_documents_only_are_refused(client: FlaskClient) -> None:
    answer = client.post("/rerank", json={"query": QUERY, "documents": [{"text": "a beam search decoder", "score": 3.0}, {"text": "bread and yeast"}]})
    assert answer.status_code == 400
    assert "1 of 2 documents have a score" in answer.get_json()["error"]["reason"]


def test_without_an_index_the_order_is_the_first_stage(tmp_path: Path, glove: Any) -> None:
    """A store with no statistics (no documents yet): the texts' order, -ln(rank)."""
    from reranker.pipeline import Engine
    from reranker.rankers import CandidateSet
    from reranker.store.embedded import EmbeddedStore
    from reranker.types import Candidate

    store = EmbeddedStore(tmp_path / "empty")
    try:
        engine = Engine(store=store, vectors=glove)
        assert store.text_bm25(QUERY, ["statistical machine translation"]) is None
        window = CandidateSet(
            tuple(Candidate(str(i), 0.0, i + 1) for i in range(3)), texts=("a", "b", "c"), first_stage="missing"
        )
        given = engine.first_stage(engine.query(QUERY), window)
        assert given.first_stage == "order"
        assert [c.bm25_score for c in given.candidates] == pytest.approx([0.0, -math.log(2), -math.log(3)])
        # A window that has scores keeps them.
        assert engine.first_stage(engine.query(QUERY), CandidateSet(window.candidates)) == CandidateSet(window.candidates)
    finally:
        store.close()


def test_with_nothing_indexed_a_text_matching_in_one_place_is_lifted_by_its_best_passage(tmp_path: Path, glove: Any) -> None:
    """A service with nothing indexed (a reranker as one calls Cohere's) judges each text by
    its best passage too, with the sent texts' own statistics. Two texts of the same words,
    counts and length: the one holding the query's words together comes first, though the
    cluster sent it second; the order alone (and topics of the same words) would keep it second."""
    filler = " ".join(f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(600)).split()
    query_words = ["translation", "alignment", "decoder", "phrase"] * 6
    together = filler[:300] + query_words + filler[300:]
    spread = list(filler)
    for i, word in enumerate(query_words):
        spread.insert(i * 25, word)
    others = ["ocean ships " + " ".join(filler[i * 50 : i * 50 + 200]) for i in range(6)]
    client = _app(tmp_path / "nothing").test_client()
    answer = client.post(
        "/v1/rerank",
        json={"query": "phrase translation with alignment and a decoder", "documents": [" ".join(spread), " ".join(together), *others]},
        headers=HEADERS,
    )
    assert answer.status_code == 200 and answer.headers["X-Reranker-First-Stage"] == "order"
    assert [result["index"] for result in answer.get_json()["results"]][:2] == [1, 0]


def test_a_query_of_stop_words_is_out_of_vocabulary_not_degraded(client: FlaskClient) -> None:
    """No content word: nothing to score the texts with, nor to align with topics."""
    for model, status in (("bm25", "ok"), (None, "query_out_of_vocabulary")):
        body = {"query": "the of and", "documents": ["a beam search decoder", "bread and yeast"], **({"model": model} if model else {})}
        answer = client.post("/v2/rerank", json=body, headers=HEADERS)
        assert answer.status_code == 200
        assert answer.headers["X-Reranker-Status"] == status, answer.get_data(as_text=True)
        assert answer.headers["X-Reranker-First-Stage"] == "order"  # the order, not a crash
        assert [r["index"] for r in answer.get_json()["results"]] == [0, 1]


@pytest.mark.parametrize("model", [None, "hidden_topics_corrected"])
def test_an_out_of_vocabulary_query_gives_scores_that_follow_the_order(client: FlaskClient, model: str | None) -> None:
    """"crfs" has no word vector. The fused score was still computed with the topics' part
    (relevance 0 less each topic's background, different per text), and the results kept
    the first-stage order: relevance_score went 0.7, 0.98, 0.14, 0.10, so a cluster that
    sorts by it (both do) would have put the second text first."""
    body = {"query": "crfs", "documents": _documents(4), **({"model": model} if model else {})}
    answer = client.post("/v1/rerank", json=body, headers=HEADERS)
    assert answer.status_code == 200 and answer.headers["X-Reranker-Status"] == "query_out_of_vocabulary"
    results = answer.get_json()["results"]
    scores = [result["relevance_score"] for result in results]
    assert scores == sorted(scores, reverse=True), results
    if model is None:  # the default: the first stage's part of the fusion orders them
        assert len(set(scores)) > 1
    else:  # a topic ranker alone says nothing: 0 each, in the order sent
        assert scores == [0.0] * 4 and [result["index"] for result in results] == [0, 1, 2, 3]


def test_texts_without_a_query_word_keep_their_order_as_first_stage(client: FlaskClient) -> None:
    answer = client.post("/rerank", json={"query": "statistical machine translation", "ranker": "bm25", "documents": [{"text": "bread and yeast"}, {"text": "cheese and wine"}]})
    assert answer.get_json()["first_stage"] == "order"
    assert [r["index"] for r in answer.get_json()["results"]] == [0, 1]



def test_an_empty_document_scores_0_from_bm25_but_keeps_its_share_of_the_order(client: FlaskClient) -> None:
    """docs/cohere-rerank.md said an empty-string document scores 0. It does where the
    first stage is BM25 of the texts; where it is the order sent (no text holds a query
    word, no index, or a cluster without _mtermvectors), the empty text keeps the share of
    its place, as the cluster ranked it, and can come first."""
    by_bm25 = client.post("/v1/rerank", json={"query": QUERY, "documents": ["", "statistical translation", "bread"]}, headers=HEADERS)
    assert by_bm25.headers["X-Reranker-First-Stage"] == "index_bm25"
    assert dict(_conforms(by_bm25.get_data(), 3))[0] == 0.0
    by_order = client.post("/v1/rerank", json={"query": QUERY, "documents": ["", "bread and yeast"]}, headers=HEADERS)
    assert by_order.headers["X-Reranker-First-Stage"] == "order"
    pairs = _conforms(by_order.get_data(), 2)
    assert pairs[0][0] == 0 and pairs[0][1] > 0.0, pairs

# --- the cluster configurations in docs/cohere-rerank.md -----------------------------------
# No cluster runs here, so what a reader copies from the page is checked against what the
# clusters do with it (ml-commons' parameter substitution, Elasticsearch's custom-service
# templates, both documented) and against the compose stack it names: a wrong host, port,
# key, field or placeholder in the page fails here instead of on the reader's cluster.

COHERE_PAGE = SAMPLE.parents[1] / "docs" / "cohere-rerank.md"
COMPOSE = SAMPLE.parents[1] / "docker" / "compose.yaml"
MAPPINGS = SAMPLE.parents[1] / "index_templates" / "reranker-mappings.component.json"
_REQUEST_LINE = re.compile(r"^(GET|POST|PUT|DELETE) (\S+)$")


def _page_requests() -> list[tuple[str, str, Any]]:
    """(method, path, parsed body) of every request in the page's ```json blocks."""
    text = COHERE_PAGE.read_text(encoding="utf-8")
    found: list[tuple[str, str, Any]] = []
    for block in re.findall(r"```json\n(.*?)```", text, flags=re.S):
        # A request is its method line and the lines up to the next one.
        starts = [i for i, line in enumerate(block.splitlines()) if _REQUEST_LINE.match(line)]
        lines = block.splitlines()
        for start, end in zip(starts, starts[1:] + [len(lines)]):
            method, path = lines[start].split(" ", 1)
            found.append((method, path, json.loads("\n".join(lines[start + 1 : end]))))
    return found


def _one(requests: list[tuple[str, str, Any]], method: str, pattern: str) -> tuple[str, Any]:
    matches = [(path, body) for m, path, body in requests if m == method and re.fullmatch(pattern, path)]
    assert len(matches) == 1, f"want one {method} {pattern} in {COHERE_PAGE.name}, found {[p for p, _ in matches]}"
    return matches[0]


def _compose_reranker() -> tuple[dict[str, str], int, str]:
    """The compose reranker's environment, its container port and the alias it serves."""
    import yaml

    service = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["reranker"]
    env = {key: str(value) for key, value in service["environment"].items()}
    (port,) = {int(str(mapping).rsplit(":", 1)[1]) for mapping in service["ports"]}
    return env, port, env["RERANKER_INDEX"]


@pytest.fixture(scope="module")
def compose_client(indexed: Path) -> Iterator[FlaskClient]:
    """The app with the compose stack's keys (the page's JSON uses its development key)."""
    app = _app(indexed, RERANKER_API_KEYS=_compose_reranker()[0]["RERANKER_API_KEYS"])
    yield app.test_client()
    app.extensions["reranker"].close()


def _the_stacks_service(url: str) -> str:
    """Assert `url` is the compose reranker's; returns its path."""
    env, port, _ = _compose_reranker()
    parts = re.fullmatch(r"http://([^:/]+):(\d+)(/.*)", url)
    assert parts and parts[1] == "reranker" and int(parts[2]) == port, f"{url} is not the compose service reranker:{port}"
    return parts[3]


def _fill(values: dict[str, str], template: str) -> str:
    """`template` with each ${name} replaced by values[name] (a KeyError: a placeholder the
    cluster would have nothing for)."""
    return re.sub(r"\$\{([\w.]+)\}", lambda m: values[m[1]], template)


def _mapped_fields() -> set[str]:
    return set(json.loads(MAPPINGS.read_text(encoding="utf-8"))["template"]["mappings"]["properties"])


def test_the_pages_opensearch_connector_and_pipeline_work_against_the_stack(compose_client: FlaskClient) -> None:
    requests = _page_requests()
    _, settings = _one(requests, "PUT", "/_cluster/settings")
    _, connector = _one(requests, "POST", "/_plugins/_ml/connectors/_create")
    pipeline_path, pipeline = _one(requests, "PUT", "/_search/pipeline/[^/]+")
    search_path, search = _one(requests, "POST", r"/[^/]+/_search\?search_pipeline=[^&]+")
    (action,) = connector["actions"]
    persistent = settings["persistent"]
    # ml-commons calls a connector only if a trusted regex matches its whole URL (Java's matches()).
    assert any(re.fullmatch(rx, action["url"]) for rx in persistent["plugins.ml_commons.trusted_connector_endpoints_regex"])
    assert persistent["plugins.ml_commons.connector.private_ip_enabled"] is True and persistent["plugins.ml_commons.only_run_on_ml_node"] is False
    assert (action["pre_process_function"], action["post_process_function"]) == ("connector.pre_process.cohere.rerank", "connector.post_process.cohere.rerank")
    env, _, alias = _compose_reranker()
    path = _the_stacks_service(action["url"])
    # The request as ml-commons builds it: ${credential.x} from the credential, the
    # pre-process function's query (escaped inside the template's quotes), documents (a JSON
    # array) and top_n (their number), and the connector's own parameters.
    documents = _documents(5) + [""]
    values = {"parameters.query": json.dumps(QUERY)[1:-1], "parameters.documents": json.dumps(documents), "parameters.top_n": str(len(documents))}
    values |= {f"parameters.{k}": str(v) for k, v in connector["parameters"].items()} | {f"credential.{k}": v for k, v in connector["credential"].items()}
    assert set(connector["credential"].values()) <= {key.strip() for key in env["RERANKER_API_KEYS"].split(",")}
    headers = {name: _fill(values, value) for name, value in action["headers"].items()}
    answer = compose_client.post(path, data=_fill(values, action["request_body"]), headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code == 200, answer.get_data()
    _conforms(answer.get_data(), len(documents))
    assert answer.headers["X-Reranker-Ranker"] == connector["parameters"]["model"] and "warnings" not in answer.get_json()["meta"]
    # The pipeline's fields are the index's, and the search names the pipeline and the alias.
    (processor,) = pipeline["response_processors"]
    assert set(processor["rerank"]["context"]["document_fields"]) <= _mapped_fields()
    assert search_path == f"/{alias}/_search?search_pipeline={pipeline_path.rsplit('/', 1)[1]}"
    assert search["ext"]["rerank"]["query_context"]["query_text"]


def test_the_pages_elasticsearch_endpoint_and_retriever_work_against_the_stack(compose_client: FlaskClient) -> None:
    requests = _page_requests()
    endpoint_path, endpoint = _one(requests, "PUT", "_inference/rerank/[^/]+")
    _, search = _one(requests, "POST", r"/[^/]+/_search")
    assert endpoint["service"] == "custom"
    service = endpoint["service_settings"]
    env, _, _ = _compose_reranker()
    path = _the_stacks_service(service["url"])
    secrets = service["secret_parameters"]
    assert set(secrets.values()) <= {key.strip() for key in env["RERANKER_API_KEYS"].split(",")}
    # The custom service fills ${input} with a JSON array and ${query} with a JSON string, and
    # the secrets by name; text_similarity_reranker sends no top_n, so the template names none.
    placeholders = set(re.findall(r"\$\{(\w+)\}", service["request"]))
    assert placeholders == {"input", "query"}, f"the request template names {sorted(placeholders)}"
    documents = _documents(4)
    values = {"input": json.dumps(documents), "query": json.dumps(QUERY), **secrets}
    headers = {name: _fill(values, value) for name, value in service["headers"].items()}
    answer = compose_client.post(path, data=_fill(values, service["request"]), headers=headers)
    assert answer.status_code == 200, answer.get_data()
    _conforms(answer.get_data(), len(documents))
    model = json.loads(_fill(values, service["request"]))["model"]
    assert answer.headers["X-Reranker-Ranker"] == model and "warnings" not in answer.get_json()["meta"]
    # The response parser's paths name the answer's own keys.
    parser = service["response"]["json_parser"]
    results = answer.get_json()["results"]
    for role, key in (("reranked_index", "index"), ("relevance_score", "relevance_score")):
        assert parser[role] == f"$.results[*].{key}" and all(key in result for result in results)
    retriever = search["retriever"]["text_similarity_reranker"]
    assert retriever["inference_id"] == endpoint_path.rsplit("/", 1)[1] and retriever["field"] in _mapped_fields()
    assert retriever["inference_text"] and isinstance(retriever["rank_window_size"], int)
