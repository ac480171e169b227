"""Every stored document id, whatever it holds (`/`, an ending `/similar`, `?`, `#`, `%`,
spaces, unicode, a leading `_`, a trailing `/`, `..`, hundreds of characters), is fetched and
used for "papers like this one" on every way in: real `reranker serve` (gunicorn) over the
embedded store and over osmem-server, werkzeug's own server, and `reranker similar`. The
rule they follow (paths.py, docs/http-api.md): in the path as sent, a literal `/` separates
and a last `similar` segment asks for similar papers; a percent-encoded character (`%2F`
too) is part of the id."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, urlsplit

import pytest
from conftest import TINY_CORPUS, Service, run, settings_env, write_jsonl
from werkzeug.serving import make_server

from reranker.config import Settings
from reranker.service import create_app
from reranker.service.paths import DocumentPath, document_url, parse

LONG_ID = "long-" + "y" * 495  # OpenSearch's _id holds at most 512 bytes
IDS = [
    "notes", "notes/similar", "similar", "10.1145/3397271", "what?now", "hash#tag", "100%", "50%2F50",
    "two words", "café/naïve ü", "_leading", "trailing/", "../up", "a/../b", "_search", "_doc/x", LONG_ID,
]  # fmt: skip
CORPUS = [{**TINY_CORPUS[number % len(TINY_CORPUS)], "id": doc_id, "title": f"title {number}"} for number, doc_id in enumerate(IDS)]
TITLES = {record["id"]: record["title"] for record in CORPUS}


def get(base: str, path: str) -> tuple[int, dict[str, Any]]:
    """GET `path` sent exactly as written (http.client neither quotes nor normalises it)."""
    netloc = urlsplit(base).netloc
    connection = http.client.HTTPConnection(netloc, timeout=60)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        raw = answer.read()
        assert answer.getheader("Content-Type", "").startswith("application/json"), (path, answer.status, raw[:300])
        return answer.status, json.loads(raw)
    finally:
        connection.close()


def check_every_id(base: str) -> None:
    """Each id's paper and papers like it, by the `_doc` form and the plain one."""
    for doc_id in IDS:
        encoded = quote(doc_id, safe="")
        forms = [f"/documents/_doc/{encoded}"] + ([f"/documents/{encoded}"] if doc_id != "_search" else [])
        for path in forms:
            status, paper = get(base, path)
            assert status == 200 and paper["id"] == doc_id and paper["title"] == TITLES[doc_id], (path, paper)
            status, similar = get(base, path + "/similar?size=3")
            assert status == 200 and similar["id"] == doc_id, (path, similar)
            assert len(similar["hits"]) == 3 and doc_id not in {hit["id"] for hit in similar["hits"]}
    # A literal slash separates: the last "similar" segment asks for similar papers, and a
    # DOI's slash may be sent as it is.
    assert get(base, "/documents/_doc/notes/similar")[1]["id"] == "notes"
    assert get(base, "/documents/notes/similar")[1]["id"] == "notes"
    assert "hits" not in get(base, "/documents/notes%2Fsimilar")[1]
    assert get(base, "/documents/10.1145/3397271")[1]["title"] == TITLES["10.1145/3397271"]
    assert get(base, "/documents/_doc/similar")[1]["title"] == TITLES["similar"]
    # A % that encodes nothing is itself; one that encodes what is not UTF-8 is refused.
    assert get(base, "/documents/_doc/100%25")[1]["title"] == TITLES["100%"]
    status, refused = get(base, "/documents/_doc/%FF")
    assert status == 400 and refused["error"]["type"] == "illegal_argument_exception" and "not UTF-8" in refused["error"]["reason"]
    # Unknown ids, a long one too, are 404s naming the id; one beyond the request line's
    # bound is gunicorn's (or werkzeug's) refusal, as JSON.
    for doc_id in ("nope", "nope/similar/", "z" * 3000):
        status, missing = get(base, document_url(doc_id))
        assert status == 404 and missing["error"]["reason"] == f"no stored document with id {doc_id!r}"


def index_corpus(data_dir: Path, *options: str) -> None:
    corpus = write_jsonl(data_dir.parent / "ids.jsonl", CORPUS)
    code, out = run(data_dir, *options, "index", str(corpus), "--no-progress")
    assert code == 0, out


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    data_dir = tmp_path_factory.mktemp("ids") / "data"
    data_dir.mkdir()
    index_corpus(data_dir)
    return data_dir


def test_every_id_through_gunicorn_on_the_embedded_store(embedded: Path) -> None:
    service = Service(embedded, settings_env(embedded))
    try:
        check_every_id(service.url)
        status, refused = get(service.url, "/documents/_doc/" + "z" * 9000)
        assert status == 414 and refused["error"]["type"], refused
        # The proxy's names shadow a plain path; its refusal says how to name the document.
        status, refused = get(service.url, "/documents/_search/similar")
        assert status == 404 and refused["error"]["reason"].endswith(
            "; for papers like the stored document whose id is '_search': GET /documents/_doc/_search/similar"
        ), refused
    finally:
        output = service.stop()
    # The access log shows the path as the client sent it, not the routes' form of it.
    assert "path=/documents/_doc/notes/similar status=200" in output
    assert "path=/documents/_doc/notes%2Fsimilar/similar status=200" in output and "notes%252F" not in output


def test_every_id_through_gunicorn_on_the_opensearch_store(osmem_clone: Any, data_dir: Path) -> None:
    index_corpus(data_dir, "--opensearch-url", osmem_clone.url)
    service = Service(data_dir, settings_env(data_dir, OPENSEARCH_URL=osmem_clone.url))
    try:
        check_every_id(service.url)
        for path, hint in [
            ("/documents/_search/similar", "GET /documents/_doc/_search/similar"),
            ("/documents/_count/x/similar", "GET /documents/_doc/_count%2Fx/similar"),
            ("/documents/_msearch/notes", "GET /documents/_doc/_msearch%2Fnotes"),
            ("/documents/_search", "GET /documents/_doc/_search"),  # as before
        ]:
            status, refused = get(service.url, path)
            assert status == 403 and refused["error"]["reason"].endswith(hint), (path, refused)
        status, refused = get(service.url, "/documents/_doc/")
        assert status == 403 and "GET /documents/_doc/<id> with its id percent-encoded" in refused["error"]["reason"]
        assert "/documents/_doc" not in get(service.url, "/papers/_search/similar")[1]["error"]["reason"]
    finally:
        service.stop()


@pytest.fixture(scope="module")
def werkzeug_served(embedded: Path) -> Iterator[str]:
    """The app over the embedded store, served by werkzeug's own server in a thread."""
    app = create_app(Settings.from_env(settings_env(embedded)))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)
    app.extensions["reranker"].close()


def test_every_id_through_werkzeugs_server(werkzeug_served: str) -> None:
    """werkzeug's server sets RAW_URI and REQUEST_URI as gunicorn sets RAW_URI."""
    check_every_id(werkzeug_served)


def test_the_page_opens_every_paper_it_links_to(werkzeug_served: str) -> None:
    """The paper view of `notes/similar` (which the page asks for as notes%2Fsimilar), then
    each paper like it that the page links to, by its own links."""
    from test_web import CHROMIUM, CHROMIUM_ARGS, _skip_or_fail_without_a_browser

    _skip_or_fail_without_a_browser()
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=werkzeug_served)
            page.set_default_timeout(10_000)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto("/ui#/paper/notes%2Fsimilar")
            expect(page.locator("#paper-title")).to_have_text(TITLES["notes/similar"])
            expect(page.locator("#paper-similar .hit")).to_have_count(10)
            linked = page.locator("#paper-similar .hit").evaluate_all("items => items.map((item) => item.dataset.id)")
            assert "notes/similar" not in linked and len(set(linked) - {"notes", "similar", "_doc/x"}) >= 7
            for number, doc_id in enumerate(linked):
                page.locator("#paper-similar .hit").nth(number).locator(".hit-title").click()
                expect(page.locator("#paper-title")).to_have_text(TITLES[doc_id])
                expect(page.locator("#view-paper .paper-id")).to_have_text(f"id {doc_id}")
                expect(page.locator("#paper-similar .hit")).to_have_count(10)
                page.go_back()
                expect(page.locator("#paper-title")).to_have_text(TITLES["notes/similar"])
            # A link typed by hand with a bare "%" says what is wrong rather than fail.
            page.goto("/ui#/paper/100%")
            expect(page.locator("#status")).to_contain_text("Not a paper link: 100%")
            page.goto("/ui#/paper/100%25")
            expect(page.locator("#paper-title")).to_have_text(TITLES["100%"])
            assert errors == []
        finally:
            browser.close()


def post(base: str, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection(urlsplit(base).netloc, timeout=60)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_a_click_on_every_hit_counts_whatever_its_id(embedded: Path, tmp_path: Path) -> None:
    """Clicks name the hit by its id (the page sends `hit.id`): a 500-character one too."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for item in embedded.iterdir():  # the index, and an experiment store of this test's own
        (data_dir / item.name).symlink_to(item, target_is_directory=item.is_dir())
    app = create_app(Settings.from_env({**settings_env(data_dir), "RERANKER_ADMIN_API_KEY": "key"}))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        status, _ = post(
            base, "/experiments", {"id": "ids", "rankers": ["hidden_topics", "bm25"], "traffic": 1.0}, {"Authorization": "Bearer key"}
        )
        assert status == 201
        status, found = post(base, "/search", {"query": "bread baked from flour and yeast in a hot oven", "size": 10, "client_id": "c1"})
        clicked = {hit["id"] for hit in found["hits"]}
        assert status == 200 and {LONG_ID, "notes/similar", "what?now", "50%2F50"} <= clicked
        for hit in found["hits"]:
            click = {"action_name": "click", "query_id": found["query_id"], "client_id": "c1",
                     "event_attributes": {"object": {"object_id": hit["id"], "object_id_field": "_id"}, "position": {"ordinal": hit["rank"]}}}  # fmt: skip
            status, recorded = post(base, "/events", click)
            assert status == 201 and recorded["experiment"] == "ids", (hit["id"], recorded)
        status, report = get(base, "/experiments/ids")
        assert report["report"]["clicks"] == len(found["hits"])
    finally:
        server.shutdown()
        app.extensions["reranker"].close()


def test_a_server_without_the_raw_path_keeps_the_decoded_one(embedded: Path) -> None:
    """Without RAW_URI or REQUEST_URI, %2F cannot be told from / (as before): a DOI is still
    named, and an id ending in /similar by the _doc form gives its similar papers' answer."""
    app = create_app(Settings.from_env(settings_env(embedded)))
    try:
        client = app.test_client()
        environ = {"RAW_URI": "", "REQUEST_URI": ""}
        assert client.get("/documents/10.1145%2F3397271", environ_overrides=environ).get_json()["id"] == "10.1145/3397271"
        assert client.get("/documents/_doc/100%25", environ_overrides=environ).get_json()["id"] == "100%"
        assert client.get("/documents/_doc/notes%2Fsimilar", environ_overrides=environ).get_json()["hits"]
        # With it (Flask's test client sets both), the id is the one sent.
        assert "hits" not in client.get("/documents/_doc/notes%2Fsimilar").get_json()
    finally:
        app.extensions["reranker"].close()


def test_reranker_similar_takes_every_id(embedded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for doc_id in IDS:
        code, out = run(embedded, "similar", doc_id, "--size", "2", "--json")
        assert code == 0 and json.loads(out)["id"] == doc_id and doc_id not in {hit["id"] for hit in json.loads(out)["hits"]}
    for doc_id in ("", "nope", "z" * 3000):
        capsys.readouterr()
        code, _ = run(embedded, "similar", doc_id)
        error = capsys.readouterr().err
        assert code != 0 and error.count("\n") == 1 and "Traceback" not in error, error
        assert repr(doc_id) in error or "empty" in error, error


@pytest.mark.parametrize("doc_id", IDS + ["", "/", "%", "similar/similar"])
def test_a_document_url_parses_back_to_its_id(doc_id: str) -> None:
    named = parse(document_url(doc_id))
    assert named == (DocumentPath(doc_id.encode(), by_doc=True, similar=False) if doc_id else None)
    assert parse(document_url(doc_id, similar=True)) == (DocumentPath(doc_id.encode(), by_doc=True, similar=True) if doc_id else None)


def test_the_path_rule() -> None:
    assert parse("/documents/a/b/similar") == DocumentPath(b"a/b", by_doc=False, similar=True)
    assert parse("/documents/a%2Fsimilar") == DocumentPath(b"a/similar", by_doc=False, similar=False)
    assert parse("/documents/similar") == DocumentPath(b"similar", by_doc=False, similar=False)
    assert parse("/documents/_doc") == DocumentPath(b"_doc", by_doc=False, similar=False)
    assert parse("/documents/_doc%2Fx") == DocumentPath(b"_doc/x", by_doc=False, similar=False)
    assert parse("/documents/_doc/_doc/similar") == DocumentPath(b"_doc", by_doc=True, similar=True)
    assert parse("/documents/trailing/") == DocumentPath(b"trailing/", by_doc=False, similar=False)
    # The proxy's: /documents/_search is a search of the index "documents".
    for path in (
        "/documents/_search",
        "/documents/_count/x",
        "/documents/_msearch/similar",
        "/documents/",
        "/documents/_doc/",
        "/papers/x",
    ):
        assert parse(path) is None, path


# Ids the plain form /documents/<id> serves once percent-encoded, the awkward ones above and
# ones that start like the proxy's names or the `_doc` form; and the three it leaves to the proxy.
PLAIN_IDS = [doc_id for doc_id in IDS if doc_id != "_search"] + [
    "_search/x", "_msearch/", "_count\n", "_countx", "_Search", " _search", "_doc", "_doc/", "_doc/similar", "%5Fsearch",
]  # fmt: skip
PROXY_NAMES = ["_search", "_msearch", "_count"]


def test_the_published_plain_id_pattern_is_the_rule_the_service_applies(werkzeug_served: str) -> None:
    """/openapi.json's schema of /documents/{doc_id} accepts each id the route serves and
    refuses each it leaves to the proxy (it refused `_doc/x` and `_search/x`, which the
    route serves: schemathesis then never sent them)."""
    import jsonschema_rs

    status, document = get(werkzeug_served, "/openapi.json")
    assert status == 200
    for path in ("/documents/{doc_id}", "/documents/{doc_id}/similar"):
        (parameter,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "doc_id"]
        published = jsonschema_rs.Draft202012Validator(parameter["schema"])
        for doc_id in PLAIN_IDS:
            status, answer = get(werkzeug_served, f"/documents/{quote(doc_id, safe='')}")
            # The document route answered: the paper, or a 404 that names the id it read.
            served = (status == 200 and answer["id"] == doc_id) or (
                status == 404 and answer["error"]["reason"] == f"no stored document with id {doc_id!r}"
            )
            assert served, (doc_id, status, answer)
            assert published.is_valid(doc_id), (path, doc_id)
        for doc_id in PROXY_NAMES:
            status, answer = get(werkzeug_served, f"/documents/{doc_id}")
            assert status != 200 and "no stored document" not in answer["error"]["reason"], (doc_id, answer)
            assert answer["error"]["reason"].endswith(f"GET /documents/_doc/{doc_id}"), answer
            assert not published.is_valid(doc_id), (path, doc_id)
        assert not published.is_valid("")
