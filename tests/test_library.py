"""The digital library's API (/documents/<id>, /documents/<id>/similar) and the page's files,
through Flask's test client over a real embedded store holding the bundled sample corpus."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import SAMPLE, TINY_CORPUS, run, settings_env, write_jsonl
from flask.testing import FlaskClient

from reranker.config import Settings
from reranker.pipeline import similar_query
from reranker.service import create_app
from reranker.service.schema import SimilarAnswer
from reranker.service.web import CONTENT_SECURITY_POLICY
from reranker.types import Document

PAPER = "P01-1027"
QUERY = "statistical machine translation with word alignment models and phrase tables"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Iterator[FlaskClient]:
    data_dir = tmp_path_factory.mktemp("library") / "data"
    data_dir.mkdir()
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    app = create_app(Settings.from_env(settings_env(data_dir)))
    yield app.test_client()
    app.extensions["reranker"].close()


def _error(answer: Any, status: int, type_: str) -> str:
    assert answer.status_code == status, answer.get_data(as_text=True)
    body = answer.get_json()
    assert body["status"] == status and body["error"]["type"] == type_
    return str(body["error"]["reason"])


def _sample() -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines())}


def test_a_document_shows_its_opening_and_its_topics(client: FlaskClient) -> None:
    body = client.get(f"/documents/{PAPER}").get_json()
    words = _sample()[PAPER]["text"].split()
    assert body["id"] == PAPER and body["title"] == ""
    assert body["excerpt"] == " ".join(words[:300]) and body["truncated"] is True
    topics = body["topics"]
    assert [t["topic"] for t in topics] == list(range(1, len(topics) + 1)) and len(topics) > 3
    importances = [t["importance"] for t in topics]
    assert importances == sorted(importances, reverse=True) and sum(importances) == pytest.approx(1.0, abs=1e-5)
    assert all(len(t["words"]) == 5 and all(isinstance(w, str) and w for w in t["words"]) for t in topics)
    # The corrected topics, as the default ranker reads them (tests/test_correction.py: an index without them).
    assert body["topic_set"] == "corrected"


def test_a_documents_topic_words_are_those_of_its_search_explanation(client: FlaskClient) -> None:
    # The default ranker's topics (the corrected ones), as /documents shows them.
    hit = client.post("/search", json={"query": QUERY, "size": 1, "explain": True}).get_json()["hits"][0]
    topics = client.get(f"/documents/{hit['id']}").get_json()["topics"]
    explained = hit["explanation"]["topics"]  # the strongest ones, by contribution
    assert explained and [topics[e["topic"] - 1]["words"] for e in explained] == [e["topic_words"] for e in explained]
    assert [topics[e["topic"] - 1]["importance"] for e in explained] == pytest.approx([e["importance"] for e in explained])


def test_papers_like_this_one_are_a_search_with_the_paper_as_the_query(client: FlaskClient) -> None:
    body = client.get(f"/documents/{PAPER}/similar?size=5").get_json()
    hits = body["hits"]
    assert body["id"] == PAPER and [h["rank"] for h in hits] == [1, 2, 3, 4, 5]
    assert PAPER not in {h["id"] for h in hits}
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    texts = _sample()
    assert all(h["snippet"] == " ".join(texts[h["id"]]["text"].split()[:30]) for h in hits)
    assert all(h["snippet_truncated"] is (len(texts[h["id"]]["text"].split()) > 30) for h in hits)
    # The route is Engine.similar with the default ranker (what the CLI and the evaluation run).
    rt = client.application.extensions["reranker"]
    expected = rt.engine().similar(PAPER, rt.limits.default_ranker, size=5).hits
    assert [h["id"] for h in hits] == [e.doc_id for e in expected]
    assert scores == pytest.approx([e.score for e in expected])
    everything = client.get(f"/documents/{PAPER}/similar?size=100").get_json()["hits"]
    assert sorted(h["bm25_rank"] for h in everything) == list(range(1, len(everything) + 1))
    assert [h["bm25_rank"] for h in everything] != sorted(h["bm25_rank"] for h in everything)
    assert len(client.get(f"/documents/{PAPER}/similar").get_json()["hits"]) == 10
    # Any ranker by name; BM25 keeps the first stage's order.
    bm25 = client.get(f"/documents/{PAPER}/similar?size=100&ranker=bm25").get_json()["hits"]
    assert [h["bm25_rank"] for h in bm25] == list(range(1, len(bm25) + 1))
    reason = _error(client.get(f"/documents/{PAPER}/similar?ranker=nope"), 400, "illegal_argument_exception")
    assert "nope" in reason


def test_similar_papers_past_the_window_have_null_scores_as_the_schema_says(client: FlaskClient) -> None:
    """A `size` beyond RERANKER_WINDOW: the hits past the window follow in BM25 order with
    `score` and `ranker_score` null, which /openapi.json's SimilarHit did not allow."""
    data_dir = Path(client.application.extensions["reranker"].settings.data_dir)
    app = create_app(Settings.from_env(settings_env(data_dir, RERANKER_WINDOW="3")))
    try:
        body = app.test_client().get(f"/documents/{PAPER}/similar?size=5").get_json()
    finally:
        app.extensions["reranker"].close()
    hits = body["hits"]
    assert [h["score"] is None for h in hits] == [False, False, False, True, True]
    assert [h["ranker_score"] is None for h in hits] == [False, False, False, True, True]
    assert [h["bm25_rank"] for h in hits[3:]] == [4, 5]
    SimilarAnswer.model_validate(body, strict=True)


def test_search_hits_carry_their_opening_words_when_asked(client: FlaskClient) -> None:
    """The page lists documents without a title by their opening words: /search gives each
    hit the first 30 words of its text with `snippets`, and nothing more without it."""
    texts = _sample()
    plain = client.post("/search", json={"query": QUERY, "size": 4}).get_json()["hits"]
    assert all("snippet" not in hit for hit in plain)
    hits = client.post("/search", json={"query": QUERY, "size": 4, "snippets": True}).get_json()["hits"]
    assert [h["id"] for h in hits] == [h["id"] for h in plain]
    assert all(h["snippet"] == " ".join(texts[h["id"]]["text"].split()[:30]) for h in hits)
    assert any(len(texts[h["id"]]["text"].split()) > 30 for h in hits)
    assert all(h["snippet_truncated"] is (len(texts[h["id"]]["text"].split()) > 30) for h in hits)
    assert all("snippet_truncated" not in hit for hit in plain)
    reason = _error(client.post("/search", json={"query": QUERY, "snippets": "yes"}), 400, "illegal_argument_exception")
    assert "[snippets]" in reason


def test_the_first_stage_query_is_the_papers_words_of_the_largest_tf_idf() -> None:
    document = Document("d", "", "parsing parsing parsing grammar grammar model model model model the lexicon")
    # 100 documents: "model" is in 90 of them, "lexicon" in 1, "grammar" in 10, "parsing" in 30.
    freqs = {"model": 90, "lexicon": 1, "grammar": 10, "parsing": 30}
    stats = lambda words: (100, {w: freqs[w] for w in words})  # noqa: E731
    idf = {w: math.log(1 + (100 - df + 0.5) / (df + 0.5)) for w, df in freqs.items()}
    tf_idf = {w: count * idf[w] for w, count in {"parsing": 3, "grammar": 2, "model": 4, "lexicon": 1}.items()}
    assert similar_query(document, None, frozenset(), terms=2, doc_freqs=stats) == " ".join(sorted(tf_idf, key=lambda w: -tf_idf[w])[:2])
    assert similar_query(document, None, frozenset(), terms=2, doc_freqs=stats) == "grammar lexicon"  # "model" is everywhere
    # Without document frequencies: the most frequent words, less the corpus's most common.
    assert similar_query(document, None, frozenset({"model"}), terms=2) == "parsing grammar"
    assert similar_query(document, None, frozenset(), terms=10) == "model parsing grammar lexicon"
    assert similar_query(document, None, frozenset(), terms=10, doc_freqs=lambda words: None) == "model parsing grammar lexicon"


def test_an_unknown_document_is_a_404(client: FlaskClient) -> None:
    for path, doc_id in [("/documents/nope", "nope"), ("/documents/nope/similar", "nope"), ("/documents/%3Cscript%3E", "<script>"),
                         ("/documents/10.1145%2F3397271", "10.1145/3397271"), ("/documents/a/b/similar", "a/b")]:
        reason = _error(client.get(path), 404, "document_missing_exception")
        assert reason == f"no stored document with id {doc_id!r}"


def test_ids_the_plain_form_leaves_to_the_proxy_are_named_by_the_doc_form(data_dir: Path) -> None:
    """A document may be called `_search`, `_msearch` or `_count` (the corpus, both stores
    and OpenSearch's `_id` allow it), but /documents/_search is the proxy's search of an
    index named "documents": GET /documents/_doc/<id> names every id, as OpenSearch's own
    GET /<index>/_doc/<id> does."""
    ids = ["_search", "_msearch", "_count", "_doc/x"]
    corpus = [{**record, "id": doc_id} for record, doc_id in zip(TINY_CORPUS * 2, ids)]
    assert run(data_dir, "index", str(write_jsonl(data_dir / "corpus.jsonl", corpus)), "--no-progress")[0] == 0
    app = create_app(Settings.from_env(settings_env(data_dir)))
    client = app.test_client()
    try:
        for record in corpus:
            paper = client.get(f"/documents/_doc/{record['id']}")
            assert paper.status_code == 200 and paper.get_json()["id"] == record["id"] and paper.get_json()["title"] == record["title"]
            similar = client.get(f"/documents/_doc/{record['id']}/similar")
            assert similar.status_code == 200 and similar.get_json()["id"] == record["id"]
            assert record["id"] not in {h["id"] for h in similar.get_json()["hits"]}
        # "_search" and "_doc/x" hold the same text: each is the other's most similar paper.
        assert client.get("/documents/_doc/_search/similar").get_json()["hits"][0]["id"] == "_doc/x"
        assert client.get("/documents/_doc/_doc/x/similar").get_json()["hits"][0]["id"] == "_search"
        assert client.get("/documents/_doc/_search/similar?size=2&bogus=1").status_code == 400  # the same checks as the plain form
        assert _error(client.get("/documents/_doc/nope"), 404, "document_missing_exception") == "no stored document with id 'nope'"
        # The plain form of these ids is the proxy's (GET /documents/_count was the document
        # route's until the proxy had it too); its refusal (here, with no cluster to proxy
        # to, a 404 as for every proxy route) says how to name the document.
        for endpoint in ("_search", "_msearch", "_count"):
            reason = _error(client.get(f"/documents/{endpoint}"), 404, "resource_not_found_exception")
            assert reason.endswith(f"for the stored document whose id is {endpoint!r}: GET /documents/_doc/{endpoint}"), reason
        assert "GET /documents/_doc/" not in _error(client.get("/papers/_count"), 404, "resource_not_found_exception")
        # Other ids keep their plain form.
        assert client.get("/documents/_doc").get_json()["error"]["reason"] == "no stored document with id '_doc'"
    finally:
        app.extensions["reranker"].close()


@pytest.mark.parametrize("size", ["0", "101", "-1", "1.5", "ten", "", "²"])
def test_a_bad_size_is_a_400(client: FlaskClient, size: str) -> None:
    reason = _error(client.get(f"/documents/{PAPER}/similar?size={size}"), 400, "illegal_argument_exception")
    assert "[size] must be an integer from 1 to 100" in reason


@pytest.mark.parametrize("query", ["window=0", "bogus=1", "size=5&Size=5", "ranker=bm25&window=20"])
def test_an_unknown_query_parameter_is_a_400_naming_it_and_the_known_ones(client: FlaskClient, query: str) -> None:
    reason = _error(client.get(f"/documents/{PAPER}/similar?{query}"), 400, "illegal_argument_exception")
    name = query.rsplit("&", 1)[-1].split("=")[0]
    assert reason == f"unknown query parameter [{name}]; known parameters: size, ranker"


@pytest.mark.parametrize("method, path", [("POST", "/search?size=5"), ("POST", "/rerank?pretty"), ("GET", "/healthz?verbose=1"), ("GET", f"/documents/{PAPER}?fields=title")])
def test_a_route_without_query_parameters_refuses_one_rather_than_ignore_it(client: FlaskClient, method: str, path: str) -> None:
    # POST /search?size=5 would otherwise answer 10 hits, as if the size had been heard.
    body = {"query": "translation"} if method == "POST" else None
    reason = _error(client.open(path, method=method, json=body), 400, "illegal_argument_exception")
    name = path.split("?")[1].split("=")[0]
    assert reason == f"unknown query parameter [{name}]; this route takes no query parameters"


def test_a_query_parameter_given_twice_is_a_400(client: FlaskClient) -> None:
    reason = _error(client.get(f"/documents/{PAPER}/similar?size=3&size=4"), 400, "illegal_argument_exception")
    assert reason == "query parameter [size] is given 2 times; give it once"
    assert len(client.get(f"/documents/{PAPER}/similar?size=3&ranker=bm25").get_json()["hits"]) == 3


def test_the_page_and_its_files_are_served_with_a_strict_policy(client: FlaskClient) -> None:
    page = client.get("/ui")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY and "script-src 'self'" in CONTENT_SECURITY_POLICY
    html = page.get_data(as_text=True)
    assert '<script src="/ui/static/app.js"' in html and "<script>" not in html  # no inline script
    for name, mimetype in (("app.js", "text/javascript"), ("app.css", "text/css")):
        answer = client.get(f"/ui/static/{name}")
        assert answer.status_code == 200 and answer.mimetype == mimetype and answer.headers["X-Content-Type-Options"] == "nosniff"
    assert client.get("/ui/static/missing.js").status_code == 404
    # Typed with a slash, the address is the page too (it was a 404 naming /openapi.json).
    slashed = client.get("/ui/")
    assert slashed.status_code == 200 and slashed.get_data(as_text=True) == html
    assert slashed.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_the_page_never_parses_data_as_html() -> None:
    """Text from the API goes into the page through textContent only."""
    script = resources.files("reranker").joinpath("service/static/app.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink
