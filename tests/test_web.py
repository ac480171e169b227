"""The web page in a real headless Chromium (Debian's `chromium`, driven by Playwright).

One real server per module: the app (`create_app`) under werkzeug on a free port, over a
real embedded store holding the sample corpus plus a document whose id, title and text
carry HTML (`<script>`, `<b>`, `<i>`). One browser per module, a fresh context per test.

Without /usr/bin/chromium (or RERANKER_CHROMIUM) or the playwright package these tests
skip, unless RERANKER_BROWSER_TESTS=required (CI), when they fail. Playwright never
downloads a browser here: it launches the system one by path.

Screenshots go to $RERANKER_TEST_ARTIFACTS (default: test-artifacts/ at the repo root).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest
from conftest import REPO, SAMPLE, run, settings_env, write_jsonl
from werkzeug.serving import make_server

from reranker.config import DEFAULT_RANKER, Settings
from reranker.service import create_app

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = os.environ.get("RERANKER_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("RERANKER_BROWSER_TESTS", "") == "required"
# Headless, and quiet: no connections to Google's update, sync or QUIC endpoints.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("RERANKER_TEST_ARTIFACTS") or REPO / "test-artifacts")
ADMIN_KEY = "web-test-admin-key"

SCRIPT = "<script>window.__pwned = 1</script>"
BOLD = "<b>bold</b>"
HOSTILE_ID = "xss-<i>1</i>"
HOSTILE_TITLE = f"{SCRIPT} Statistical machine translation {BOLD}"
HOSTILE_TEXT = (
    f"Statistical machine translation with word alignment models. {SCRIPT} The {BOLD} claim: "
    "a beam search over phrase tables and a lexicon model improve translation quality; "
    "dynamic programming finds the word reordering of the target language sentence."
)
# A summary query (from the sample's queries) that both rankers answer with the hostile document.
QUERY = json.loads((SAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])["text"]
TYPED_QUERY = "statistical machine translation with word alignment and beam search"


def _skip_or_fail_without_a_browser() -> None:
    reason = None
    if not Path(CHROMIUM).exists():
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set RERANKER_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "the playwright package is not installed (pip install -e '.[test]')"
    if reason is None:
        return
    if REQUIRED:
        pytest.fail(f"browser tests are required (RERANKER_BROWSER_TESTS=required) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator["Browser"]:
    _skip_or_fail_without_a_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def served(browser: "Browser", tmp_path_factory: pytest.TempPathFactory, glove: object) -> Iterator[str]:
    """The base URL of the real app, served over HTTP by a werkzeug thread."""
    data_dir = tmp_path_factory.mktemp("web") / "data"
    data_dir.mkdir()
    records: list[Any] = (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    records.append({"id": HOSTILE_ID, "title": HOSTILE_TITLE, "text": HOSTILE_TEXT})
    corpus = write_jsonl(data_dir.parent / "corpus.jsonl", records)
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    app = create_app(Settings.from_env({**settings_env(data_dir), "RERANKER_ADMIN_API_KEY": ADMIN_KEY}))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="web-test-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)
    app.extensions["reranker"].close()


@pytest.fixture
def page(browser: "Browser", served: str) -> Iterator["Page"]:
    """A fresh tab (own storage) on the page; fails the test on any script error or CSP refusal."""
    context = browser.new_context(base_url=served, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    tab.on("console", lambda message: problems.append(f"console: {message.text}") if "Content Security Policy" in message.text else None)
    yield tab
    context.close()
    assert problems == []


def _screenshot(page: "Page", name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


def _api(base: str, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _compare(page: "Page", query: str) -> None:
    page.goto("/ui#/compare")
    page.get_by_label("Query (an abstract or a few sentences)").fill(query)
    page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
    _wait_for_columns(page)


def _wait_for_columns(page: "Page") -> None:
    from playwright.sync_api import expect

    for side in ("left", "right"):
        expect(page.locator(f"#column-{side} .hits > li.hit")).to_have_count(10)


# --- the tests ---------------------------------------------------------------------------


def test_typing_a_query_fills_both_columns_with_marked_and_explained_hits(page: "Page") -> None:
    from playwright.sync_api import expect

    page.goto("/ui")
    query_box = page.get_by_label("Query (an abstract or a few sentences)")
    expect(page.get_by_label("Left ranker")).to_have_value("bm25")
    expect(page.get_by_label("Right ranker")).to_have_value(DEFAULT_RANKER)  # the service's default
    query_box.focus()
    page.keyboard.type(TYPED_QUERY)
    page.keyboard.press("Control+Enter")
    _wait_for_columns(page)
    expect(page.locator("#column-left h2")).to_have_text("bm25")
    expect(page.locator("#column-right h2")).to_have_text(DEFAULT_RANKER)
    left = page.locator("#column-left .hit")
    right = page.locator("#column-right .hit")
    # BM25's column is in BM25 order; the topic column moved some hits, and says how.
    assert left.locator(".hit-meta").all_inner_texts()[0].endswith("BM25 rank 1")
    markers = right.locator(".move")
    expect(markers).to_have_count(10)
    labels = [markers.nth(i).get_attribute("aria-label") or "" for i in range(10)]
    assert any("higher than in bm25" in label or "lower than in bm25" in label for label in labels), labels
    assert all(markers.nth(i).get_attribute("title") == labels[i] for i in range(10))
    assert {t[0] for t in markers.all_inner_texts()} <= {"▲", "▼", "=", "n"}
    # bm25 has no topics to explain; the topic ranker's first hit opens to its topics.
    expect(left.first.locator("details")).to_have_count(0)
    explanation = right.first.locator("details.explanation")
    explanation.locator("summary").click()
    expect(explanation.locator(".topic").first).to_be_visible()
    words = explanation.locator(".topic").first.locator(".words").first.inner_text()
    assert words.startswith("Topic words: ") and len(words.split(",")) == 5
    assert "Aligned query words: " in explanation.locator(".topic").first.inner_text()
    assert "weight" in explanation.locator(".topic-head").first.inner_text()


def test_a_hits_explanation_shows_the_apis_topics_in_its_order_and_the_rest(page: "Page", served: str) -> None:
    """The page shows what /search explains, as it comes: the same topics in the same order
    (the API chose them), the parts of the fused score, and one line for the rest."""
    from playwright.sync_api import expect

    _compare(page, QUERY)
    status, body = _api(served, "POST", "/search", {"query": QUERY, "ranker": DEFAULT_RANKER, "size": 10, "explain": True})
    assert status == 200
    for position in (0, 3):
        explanation = body["hits"][position]["explanation"]
        hit = page.locator("#column-right .hit").nth(position)
        expect(hit).to_have_attribute("data-id", body["hits"][position]["id"])
        hit.locator("summary").click()
        shown = hit.locator(".topic-head strong").all_inner_texts()
        assert shown == [f"Topic {t['topic']}" for t in explanation["topics"]]
        total = len(explanation["topics"]) + explanation["rest"]["topics"]
        expect(hit.locator("summary")).to_have_text(f"Why: {len(explanation['topics'])} of {total} topics")
        parts = explanation["parts"]
        expect(hit.locator(".score-parts")).to_contain_text(
            f"Score {explanation['score']:.4f} = topics {parts['topics']:.4f} + bm25 {parts['bm25']:.4f}"
        )
        expect(hit.locator(".topic-score")).to_contain_text(f"score {explanation['topic_score']:.5f} = the sum of its {total} topics")
        rest = f"{explanation['rest']['contribution']:+.5f}"
        expect(hit.locator(".topic-rest")).to_have_text(f"The other {explanation['rest']['topics']} topics add {rest} together.")


def test_the_compare_view_screenshot(page: "Page") -> None:
    _compare(page, QUERY)
    page.locator("#column-right .hit").first.locator("summary").click()
    path = _screenshot(page, "compare.png")
    assert path.stat().st_size > 10_000


def test_document_text_is_shown_as_text_never_run_or_rendered(page: "Page") -> None:
    from playwright.sync_api import expect

    _compare(page, TYPED_QUERY)
    hostile = page.locator("#column-right .hit-title", has_text=SCRIPT)
    expect(hostile).to_have_count(1)
    assert hostile.inner_text() == HOSTILE_TITLE
    expect(page.locator("#column-left .hit-title", has_text=SCRIPT)).to_have_count(1)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("main b, main i, main script").count() == 0
    hostile.click()  # its paper page: title, id and text, all as text
    expect(page.locator("#paper-title")).to_have_text(HOSTILE_TITLE)
    expect(page.locator("#view-paper .paper-id")).to_have_text(f"id {HOSTILE_ID}")
    expect(page.locator("#paper-excerpt")).to_contain_text(f"models. {SCRIPT} The {BOLD} claim")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("main b, main i, main script").count() == 0
    assert page.evaluate("document.scripts.length") == 1  # app.js, nothing else


def test_a_paper_shows_its_topics_and_papers_like_it(page: "Page") -> None:
    from playwright.sync_api import expect

    page.goto("/ui#/paper/P01-1027")
    expect(page.locator("#paper-title")).to_have_text("P01-1027")
    expect(page.locator("#paper-excerpt")).to_contain_text("Typically, the lexicon models used in statistical machine translation")
    topics = page.locator("#paper-topics .topic")
    expect(topics).to_have_count(8)
    assert "importance" in topics.first.inner_text() and len(topics.first.locator(".words").inner_text().split(", ")) == 5
    similar = page.locator("#paper-similar .hit")
    expect(similar).to_have_count(10)
    assert "P01-1027" not in similar.locator(".hit-title").all_inner_texts()
    assert similar.first.locator(".hit-meta").inner_text().startswith("similarity ")
    # Following a similar paper opens it, and Back returns.
    second = similar.first.locator(".hit-title").inner_text()
    similar.first.locator(".hit-title").click()
    expect(page.locator("#paper-title")).to_have_text(second)
    page.go_back()
    expect(page.locator("#paper-title")).to_have_text("P01-1027")
    _screenshot(page, "paper.png")
    page.goto("/ui#/paper/no-such-paper")
    expect(page.locator("#status")).to_contain_text("no stored document with id 'no-such-paper'")


def test_the_keyboard_reaches_the_query_box_and_the_search_button(page: "Page") -> None:
    from playwright.sync_api import expect

    page.goto("/ui#/compare")
    expect(page.get_by_label("Left ranker")).to_have_value("bm25")
    for label in ("Query (an abstract or a few sentences)", "Left ranker", "Right ranker"):
        expect(page.get_by_label(label)).to_be_visible()
    focused = []
    for _ in range(12):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id || document.activeElement.textContent"))
        if focused[-1] == "compare-query":
            break
    assert focused[-1] == "compare-query", focused
    page.keyboard.type("word alignment for machine translation")
    for expected in ("compare-left", "compare-right", "compare-submit"):
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == expected
    page.keyboard.press("Enter")
    _wait_for_columns(page)
    # The views are links in a navigation landmark; the live search box has a label too.
    page.get_by_role("navigation").get_by_role("link", name="Live search").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_label("Search papers")).to_be_visible()
    expect(page.get_by_role("link", name="Live search")).to_have_attribute("aria-current", "page")


def test_live_search_records_a_click_that_the_dashboard_counts(page: "Page", served: str) -> None:
    from playwright.sync_api import expect

    status, body = _api(served, "POST", "/experiments", {"id": "web-ab", "rankers": ["bm25", "hidden_topics"], "traffic": 1.0}, key=ADMIN_KEY)
    assert status == 201, body
    try:
        page.goto("/ui#/search")
        page.get_by_label("Search papers").fill(TYPED_QUERY)
        page.get_by_label("Search papers").press("Enter")
        notice = page.locator("#search-experiment")
        expect(notice).to_contain_text("experiment “web-ab”")
        expect(notice).to_contain_text("Clicks recorded on this search: 0")
        hits = page.locator("#search-hits .hit")
        expect(hits).to_have_count(10)
        client_id = page.evaluate("localStorage.getItem('reranker.client_id')")
        assert client_id and len(client_id) >= 32
        second = hits.nth(1).locator(".hit-title")
        title = second.inner_text()
        second.click()
        expect(page.locator("#event-status")).to_contain_text(f"Click recorded: {title} at position 2.")
        expect(page.locator("#view-paper")).to_be_visible()
        expect(page.locator("#paper-title")).to_have_text(title)
        page.go_back()
        expect(notice).to_contain_text("Clicks recorded on this search: 1")

        page.get_by_role("link", name="Experiments").click()
        card = page.locator('[data-experiment="web-ab"]')
        expect(card.locator('[data-field="clicks"]')).to_have_text("1")
        expect(card.locator('[data-field="queries"]')).to_have_text("1 (1 with clicks)")
        expect(card.locator('[data-field="traffic"]')).to_have_text("100%")
        expect(card.locator('[data-field="verdict"]')).not_to_be_empty()

        # Changes need the admin key: a wrong one is refused with the API's reason.
        page.get_by_label("Admin API key (kept in this tab only)").fill("wrong-key")
        card.get_by_label("Traffic share (above 0, at most 1)").fill("0.5")
        card.get_by_role("button", name="Update traffic").click()
        expect(card.locator(".form-result")).to_contain_text("Refused:")
        expect(card.locator(".form-result")).to_contain_text("HTTP 401")
        page.get_by_label("Admin API key (kept in this tab only)").fill(ADMIN_KEY)
        card.get_by_role("button", name="Update traffic").click()
        card = page.locator('[data-experiment="web-ab"]')  # rebuilt
        expect(card.locator('[data-field="traffic"]')).to_have_text("50%")
        expect(card.locator(".form-result")).to_have_text("Saved: traffic share 50%.")
        assert page.evaluate("document.activeElement.closest('[data-experiment]').dataset.experiment") == "web-ab"
        assert page.evaluate("sessionStorage.getItem('reranker.admin_key')") == ADMIN_KEY
        assert page.evaluate("localStorage.getItem('reranker.admin_key')") is None
        _screenshot(page, "dashboard.png")
    finally:
        _api(served, "PATCH", "/experiments/web-ab", {"status": "stopped"}, key=ADMIN_KEY)
