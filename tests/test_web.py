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

import itertools
import json
import math
import os
import re
import threading
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest
from conftest import REPO, SAMPLE, run, settings_env, write_jsonl
from werkzeug.serving import make_server

from reranker.config import DEFAULT_RANKER, Settings
from reranker.interleaving import DEFAULT_TRAFFIC
from reranker.sequential import DEFAULT_MIN_UNITS
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
PHONE = (390, 844)
NARROW = (360, 780)

SCRIPT = "<script>window.__pwned = 1</script>"
BOLD = "<b>bold</b>"
# Unlike a <script>, which innerHTML never runs, an image's handler would run if the page
# parsed the title as HTML (and the CSP, which refuses inline handlers, did not stop it).
IMAGE = '<img src=x onerror="window.__pwned = 2">'
HOSTILE_ID = "xss-<i>1</i>"
HOSTILE_TITLE = f"{SCRIPT} Statistical machine translation {BOLD} {IMAGE}"
HOSTILE_TEXT = (
    f"Statistical machine translation with word alignment models. {SCRIPT} The {BOLD} claim: "
    "a beam search over phrase tables and a lexicon model improve translation quality; "
    "dynamic programming finds the word reordering of the target language sentence."
)
# An untitled document shorter than a snippet (30 words): its snippet is its whole text, and no
# "…" may follow it. Every other document of the served corpus is longer. Its id is one long
# word, wider than a phone's screen unless the page breaks it.
SHORT_ID = "UntitledShortAbstractOnPartOfSpeechTaggingForAncientGreek2026"
SHORT_TEXT = "Part-of-speech tagging for a language with little annotated text: a hidden Markov model trained on a small corpus of Ancient Greek."
SHORT_QUERY = "part-of-speech tagging of Ancient Greek with a hidden Markov model"
# A summary query (from the sample's queries) that both rankers answer with the hostile document.
QUERY = json.loads((SAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])["text"]
TYPED_QUERY = "statistical machine translation with word alignment and beam search"
PAPER_TEXTS = {r["id"]: r["text"] for r in map(json.loads, (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines())}
# Every served document's text, by id.
TEXTS = {**PAPER_TEXTS, HOSTILE_ID: HOSTILE_TEXT, SHORT_ID: SHORT_TEXT}


def _opening_title(text: str) -> str:
    """How the page names a document without a title: its first 8 words, and an ellipsis
    when the text goes on."""
    words = text.split()
    return " ".join(words[:8]) + (" …" if len(words) > 8 else "")


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
def data_dir(browser: "Browser", tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    """The served app's data: the sample corpus (no titles), the hostile document (titled) and
    a short untitled one."""
    data_dir = tmp_path_factory.mktemp("web") / "data"
    data_dir.mkdir()
    records: list[Any] = (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    records.append({"id": HOSTILE_ID, "title": HOSTILE_TITLE, "text": HOSTILE_TEXT})
    records.append({"id": SHORT_ID, "text": SHORT_TEXT})
    corpus = write_jsonl(data_dir.parent / "corpus.jsonl", records)
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    return data_dir


@pytest.fixture(scope="module")
def served(data_dir: Path) -> Iterator[str]:
    """The base URL of the real app, served over HTTP by a werkzeug thread."""
    # A WMD budget of 0 ms: every wmd answer is "partial", a real status for the page to show.
    # A request deadline of 30 s, not 2: at load 8, with the suite's other process beside it,
    # the first WMD rerank (its model read) took 2 s and came back "degraded" (no test of the
    # page is about the deadline; tests/test_reliability.py tests it).
    app = create_app(Settings.from_env({
        **settings_env(data_dir), "RERANKER_ADMIN_API_KEY": ADMIN_KEY, "RERANKER_WMD_BUDGET_MS": "0", "RERANKER_DEADLINE_MS": "30000",
    }))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="web-test-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    # The first search of a fresh app reads the word vectors (seconds on a busy machine):
    # made here, so that the page's waits time the page whichever test runs first.
    assert _api(url, "POST", "/search", {"query": QUERY})[0] == 200
    yield url
    server.shutdown()
    thread.join(timeout=10)
    app.extensions["reranker"].close()


def _tab(browser: "Browser", served: str, width: int, height: int) -> Iterator["Page"]:
    """A fresh tab (own storage) on the page; fails the test on any script error or CSP refusal."""
    context = browser.new_context(base_url=served, viewport={"width": width, "height": height})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    tab.on("console", lambda message: problems.append(f"console: {message.text}") if "Content Security Policy" in message.text else None)
    yield tab
    context.close()
    assert problems == []


@pytest.fixture
def page(browser: "Browser", served: str) -> Iterator["Page"]:
    yield from _tab(browser, served, 1280, 900)


@pytest.fixture
def phone(browser: "Browser", served: str) -> Iterator["Page"]:
    """The page on a phone's screen: 390 x 844 CSS pixels."""
    yield from _tab(browser, served, *PHONE)


@pytest.fixture
def narrow(browser: "Browser", served: str) -> Iterator["Page"]:
    """The page on a narrow phone's screen: 360 x 780 CSS pixels."""
    yield from _tab(browser, served, *NARROW)


def _refused_then_done(page: "Page", card: Any, button: Any) -> None:
    """Press `button` with a wrong admin key (the card shows the API's 401), then with the right one."""
    from playwright.sync_api import expect

    key = page.get_by_label("Admin API key (kept in this tab only)")
    key.fill("wrong-key")
    button.click()
    expect(card.locator(".form-result")).to_contain_text("Refused:")
    expect(card.locator(".form-result")).to_contain_text("HTTP 401")
    key.fill(ADMIN_KEY)
    button.click()


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


def test_the_first_screen_takes_an_abstract_and_lists_papers(page: "Page") -> None:
    """/ui opens on the search a librarian needs: paste an abstract, press Enter, get papers.
    Every view keeps its own link (#/compare, #/experiments, #/paper/<id>)."""
    from playwright.sync_api import expect

    page.goto("/ui")
    expect(page.locator("#view-search")).to_be_visible()
    expect(page.locator("#view-compare")).to_be_hidden()
    assert page.title() == "Search papers · reranker"
    expect(page.get_by_role("navigation").get_by_role("link").first).to_have_text("Search papers")
    expect(page.get_by_role("link", name="Search papers")).to_have_attribute("aria-current", "page")
    box = page.get_by_label("Abstract or a few words")
    expect(box).to_have_js_property("tagName", "TEXTAREA")  # an abstract is longer than a line
    page.screenshot(path=str(ARTIFACTS / "first-screen.png"))  # the window as it opens
    box.fill(QUERY)  # a whole abstract
    box.press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    assert box.input_value() == QUERY  # Enter searched; it added no line break
    _screenshot(page, "first-screen-results.png")
    box.press("Shift+Enter")
    assert box.input_value() == QUERY + "\n"
    # A paper opened from the first screen goes back to it, by its link or the browser's Back
    # (to the bare /ui, which showed the paper still).
    page.locator("#search-hits .hit-title").first.click()
    expect(page.locator("#paper-back")).to_have_attribute("href", "#/search")
    page.go_back()
    expect(page.locator("#view-search")).to_be_visible()
    expect(page.locator("#view-paper")).to_be_hidden()
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    assert page.title() == "Search papers · reranker"
    page.locator("#search-hits .hit-title").first.click()
    expect(page.locator("#view-paper")).to_be_visible()
    # Deep links keep their views.
    for route, view in (("compare", "compare"), ("experiments", "experiments"), ("paper/P01-1027", "paper")):
        page.goto(f"/ui#/{route}")
        expect(page.locator(f"#view-{view}")).to_be_visible()
    page.goto("/ui#/no-such-view")
    expect(page.locator("#view-search")).to_be_visible()


def test_typing_a_query_fills_both_columns_with_marked_and_explained_hits(page: "Page") -> None:
    from playwright.sync_api import expect

    page.goto("/ui#/compare")
    query_box = page.get_by_label("Query (an abstract or a few sentences)")
    expect(page.get_by_label("Left ranker")).to_have_value("bm25")
    expect(page.get_by_label("Right ranker")).to_have_value(DEFAULT_RANKER)  # the service's default
    # This index has no Doc2Vec model: doc2vec is offered disabled, saying why; the default says so.
    for select in ("#compare-left", "#compare-right", "#create-ranker-a", "#create-ranker-b"):
        doc2vec = page.locator(f"{select} option[value='doc2vec']")
        expect(doc2vec).to_be_disabled()
        assert "reranker train doc2vec" in (doc2vec.get_attribute("title") or "")
        expect(page.locator(f"{select} option[value='{DEFAULT_RANKER}']")).to_have_text(f"{DEFAULT_RANKER} (default)")
        expect(page.locator(f"{select} option[value='bm25']")).to_be_enabled()
    query_box.focus()
    page.keyboard.type(TYPED_QUERY)
    page.keyboard.press("Control+Enter")
    _wait_for_columns(page)
    expect(page.locator("#column-left h2")).to_have_text("bm25")
    expect(page.locator("#column-right h2")).to_have_text(DEFAULT_RANKER)
    left = page.locator("#column-left .hit")
    right = page.locator("#column-right .hit")
    # BM25's column is in BM25 order, and says so (it reranks nothing); the topic column moved some hits, and says how.
    expect(page.locator("#column-left .column-meta")).to_have_text(re.compile(r"^\d+ BM25 candidates in BM25 order · bm25 does not score by topics"))
    expect(page.locator("#column-right .column-meta")).to_have_text(re.compile(r"^\d+ BM25 candidates reranked in [\d.]+ ms$"))
    assert left.locator(".hit-meta").all_inner_texts()[0].split(" · ")[1] == "BM25 rank 1"
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
    # A topic's share sigma_k^2/sum sigma^2 has one name everywhere: "importance" (the paper
    # page, `search --explain`), never "weight".
    head = explanation.locator(".topic-head").first.inner_text()
    assert re.search(r"importance \d\.\d{3} · relevance ", head) and "weight" not in head, head


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
        assert shown == [f"Corrected topic {t['topic']}" for t in explanation["topics"]]  # the default's
        # Each topic's words as the API gives them (the fragment check over the shared
        # corpora, tests/test_topic_words.py, reads the API's words, not the page's).
        words = [topic.locator(".words").first.inner_text() for topic in hit.locator(".topic").all()]
        assert words == ["Topic words: " + ", ".join(t["topic_words"]) for t in explanation["topics"]]
        total = len(explanation["topics"]) + explanation["rest"]["topics"]
        expect(hit.locator("summary")).to_have_text(f"Why: {len(explanation['topics'])} of {total} topics")
        parts = explanation["parts"]
        expect(hit.locator(".score-parts")).to_contain_text(
            f"Score {explanation['score']:.4f} = topics {parts['topics']:.4f} + bm25 {parts['bm25']:.4f}"
        )
        expect(hit.locator(".topic-score")).to_contain_text(f"score {explanation['topic_score']:.5f} = the sum of its {total} topics")
        rest = f"{explanation['rest']['contribution']:+.5f}"
        expect(hit.locator(".topic-rest")).to_have_text(f"The other {explanation['rest']['topics']} topics add {rest} together.")


def _wait_until_held(page: "Page", held: list[Any], count: int) -> None:
    """Wait until a route handler holds `count` requests. Playwright runs a test's route
    handlers only while the test waits on the page, so a status the page draws as it sends
    a request is no proof that the request is held yet (CI once found none held there)."""
    for _ in range(200):
        if len(held) >= count:
            break
        page.wait_for_timeout(50)
    assert len(held) == count, f"{len(held)} requests held, not {count}"


def test_a_search_sent_before_the_rankers_are_listed_waits_for_them(page: "Page") -> None:
    """The dropdowns are filled from GET /rankers, which a fresh service can take seconds to
    answer: Ctrl+Enter before then sent `"ranker": ""` and both columns failed with "unknown
    ranker ''". Now the search waits for the list (held back here until it is sent)."""
    from playwright.sync_api import expect

    held: list[Any] = []
    page.route("**/rankers", lambda route: held.append(route))
    page.goto("/ui#/compare")
    page.get_by_label("Query (an abstract or a few sentences)").fill(QUERY)
    page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
    expect(page.locator("#status")).to_have_text("Loading the rankers…")
    _wait_until_held(page, held, 1)
    held[0].continue_()
    _wait_for_columns(page)
    expect(page.locator("#column-left h2")).to_have_text("bm25")
    expect(page.locator("#column-right h2")).to_have_text(DEFAULT_RANKER)
    expect(page.locator("#status")).to_have_text("Showing 10 hits from bm25 and 10 from " + DEFAULT_RANKER + ".")


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
    assert page.locator("main b, main i, main script, main img").count() == 0
    hostile.click()  # its paper page: title, id and text, all as text
    expect(page.locator("#paper-title")).to_have_text(HOSTILE_TITLE)
    expect(page.locator("#view-paper .paper-id")).to_have_text(f"id {HOSTILE_ID}")
    expect(page.locator("#paper-excerpt")).to_contain_text(f"models. {SCRIPT} The {BOLD} claim")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("main b, main i, main script, main img").count() == 0
    assert page.evaluate("[...document.scripts].map((s) => s.getAttribute('src'))") == ["/ui/static/plots.js", "/ui/static/app.js"]


def test_a_paper_shows_its_topics_and_papers_like_it(page: "Page", served: str) -> None:
    from playwright.sync_api import expect

    page.goto("/ui#/paper/P01-1027")
    expect(page.locator("#paper-title")).to_have_text(_opening_title(PAPER_TEXTS["P01-1027"]))  # it has no title
    expect(page.locator("#view-paper .paper-id")).to_have_text("id P01-1027")
    expect(page.locator("#paper-excerpt")).to_contain_text("Typically, the lexicon models used in statistical machine translation")
    topics = page.locator("#paper-topics .topic")
    expect(topics).to_have_count(8)
    assert "importance" in topics.first.inner_text() and len(topics.first.locator(".words").inner_text().split(", ")) == 5
    status, paper = _api(served, "GET", "/documents/P01-1027")
    assert status == 200
    assert topics.locator(".words").all_inner_texts() == [", ".join(t["words"]) for t in paper["topics"][:8]]
    # Importance as the API gives it and a hit's explanation shows it: a decimal, not "16.2%".
    heads = topics.locator(".topic-head").all_inner_texts()
    assert [head.split(" importance ")[1] for head in heads] == [f"{t['importance']:.3f}" for t in paper["topics"][:8]], heads
    similar = page.locator("#paper-similar .hit")
    expect(similar).to_have_count(10)
    assert "P01-1027" not in similar.evaluate_all("items => items.map((item) => item.dataset.id)")
    status, like = _api(served, "GET", "/documents/P01-1027/similar?size=10")
    assert status == 200
    assert similar.first.locator(".hit-meta").inner_text().startswith(f"score {like['hits'][0]['score']:.4f} · BM25 rank ")
    # What the hint says is what /similar does: MoreLikeThis's words, then the default ranker.
    expect(page.locator("#paper-similar-hint")).to_contain_text("100 words of the largest tf-idf")
    expect(page.locator("#paper-similar-ranker")).to_have_text(f"Ordered by {DEFAULT_RANKER}, the service's default ranker.")
    assert like["ranker"] == DEFAULT_RANKER
    # Following a similar paper opens it, and Back returns.
    second = similar.first.locator(".hit-title").inner_text()
    similar.first.locator(".hit-title").click()
    expect(page.locator("#paper-title")).to_have_text(second)
    page.go_back()
    expect(page.locator("#view-paper .paper-id")).to_have_text("id P01-1027")
    _screenshot(page, "paper.png")
    page.goto("/ui#/paper/no-such-paper")
    expect(page.locator("#status")).to_contain_text("no stored document with id 'no-such-paper'")


def test_a_topic_is_named_with_its_set_on_the_paper_page_and_in_compare(page: "Page", served: str) -> None:
    """Topic 1 of the corrected topics (the paper page's, the default ranker's) and topic 1 of
    the paper's (hidden_topics') are different topics: both were shown as "Topic 1"."""
    from playwright.sync_api import expect

    status, paper = _api(served, "GET", "/documents/P01-1027")
    assert status == 200 and paper["topic_set"] == "corrected"
    page.goto("/ui#/paper/P01-1027")
    expect(page.locator("#paper-topics .topic")).to_have_count(8)
    assert page.locator("#paper-topics .topic-head strong").all_inner_texts() == [f"Corrected topic {t['topic']}" for t in paper["topics"][:8]]
    expect(page.locator("#paper-topics-set")).to_contain_text("Its corrected topics")
    expect(page.locator("#paper-topics-set")).to_contain_text("hidden_topics and hidden_topics_code read its uncorrected ones")

    page.goto("/ui#/compare")
    page.get_by_label("Left ranker").select_option("hidden_topics")
    _compare(page, QUERY)
    expect(page.locator("#column-left h2")).to_have_text("hidden_topics")
    for side, label in (("left", "Uncorrected topic "), ("right", "Corrected topic ")):
        hit = page.locator(f"#column-{side} .hit").first
        hit.locator("summary").click()
        shown = hit.locator(".topic-head strong").all_inner_texts()
        assert shown and all(re.fullmatch(re.escape(label) + r"\d+", name) for name in shown), (side, shown)
    page.goto("/ui#/paper/no-such-paper")
    expect(page.locator("#paper-topics-set")).to_be_empty()  # the last paper's note goes with its topics


def test_a_failed_search_does_not_leave_the_last_querys_papers_under_it(page: "Page") -> None:
    """The service stopped mid-use: the next search fails, and its list says so instead of
    keeping the papers of the query before, which read as this query's answer."""
    from playwright.sync_api import expect

    page.goto("/ui")
    box = page.get_by_label("Abstract or a few words")
    box.fill(TYPED_QUERY)
    box.press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    page.route("**/search", lambda route: route.abort("connectionrefused"))  # as a stopped service refuses
    box.fill(SHORT_QUERY)
    box.press("Enter")
    expect(page.locator("#status")).to_have_text(re.compile(r"^Search failed: cannot reach the service"))
    expect(page.locator("#search-hits .hit")).to_have_count(0)
    expect(page.locator("#search-hits .problem")).to_have_text(re.compile(r"^Search failed: cannot reach the service"))
    _screenshot(page, "search-failed.png")


def test_a_blank_query_does_not_leave_the_last_querys_papers_under_it(page: "Page") -> None:
    """A query of spaces says "Type a query first." and empties the list, as a failed search
    does; an answer to the search before it, arriving after, is not shown under it. Compare's
    columns too."""
    from playwright.sync_api import expect

    page.goto("/ui")
    box = page.get_by_label("Abstract or a few words")
    box.fill(TYPED_QUERY)
    box.press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    box.fill("   \n  ")
    box.press("Enter")
    expect(page.locator("#status")).to_have_text("Type a query first.")
    expect(page.locator("#search-hits > li")).to_have_count(0)
    expect(page.locator("#search-meta")).to_be_empty()
    # An empty box too (the browser's own "fill out this field" left the papers under it).
    box.fill(TYPED_QUERY)
    box.press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    box.fill("")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#status")).to_have_text("Type a query first.")
    expect(page.locator("#search-hits > li")).to_have_count(0)
    held: list[Any] = []
    page.route("**/search", lambda route: held.append(route))
    box.fill(SHORT_QUERY)
    box.press("Enter")
    expect(page.locator("#status")).to_have_text("Searching…")
    box.fill(" ")
    box.press("Enter")
    expect(page.locator("#status")).to_have_text("Type a query first.")
    _wait_until_held(page, held, 1)
    held[0].continue_()
    page.wait_for_timeout(1000)  # the held answer arrives, and is dropped
    expect(page.locator("#search-hits > li")).to_have_count(0)
    expect(page.locator("#status")).to_have_text("Type a query first.")
    page.unroute("**/search")

    for blank in ("  ", ""):
        _compare(page, TYPED_QUERY)
        page.get_by_label("Query (an abstract or a few sentences)").fill(blank)
        page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
        expect(page.locator("#status")).to_have_text("Type or paste a query first.")
        for side in ("left", "right"):
            expect(page.locator(f"#column-{side} .hits > li")).to_have_count(0)
            expect(page.locator(f"#column-{side} .column-meta")).to_be_empty()


def test_a_title_of_spaces_or_invisible_characters_is_no_title(page: "Page") -> None:
    """Such a hit was a link 0 px high, with nothing to click: it is named by its opening
    words, as a hit without a title is."""
    from playwright.sync_api import expect

    page.goto("/ui")
    box = page.get_by_label("Abstract or a few words")
    box.fill(TYPED_QUERY)
    box.press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    named = page.locator("#search-hits .hit-title").all_inner_texts()

    blanked: list[int] = []

    def blank_titles(route: Any) -> None:
        blanked.append(1)
        answer = route.fetch()
        body = answer.json()
        untitled = [hit for hit in body["hits"] if not hit["title"]]
        assert len(untitled) >= 5
        for hit, title in zip(untitled, itertools.cycle(["   ", "\u200b", " \u00ad\ufeff "])):
            hit["title"] = title
        route.fulfill(response=answer, json=body)

    page.route("**/search", blank_titles)
    box.fill(TYPED_QUERY + " ")
    box.press("Enter")  # "Searching…" at once, the list drawn again once the answer is in
    expect(page.locator("#status")).to_have_text("10 results.")
    assert blanked == [1]
    assert page.locator("#search-hits .hit-title").all_inner_texts() == named
    assert all(rect["height"] > 0 for rect in page.locator("#search-hits .hit-title").evaluate_all("links => links.map(l => l.getBoundingClientRect().toJSON())"))
    page.unroute("**/search")


def test_an_empty_index_says_so_instead_of_no_match(browser: "Browser", tmp_path: Path, glove: object) -> None:
    """A service over a fresh data dir, nothing indexed: every query finds nothing, and the
    lists say that the index is empty, not that no document matches the query."""
    from playwright.sync_api import expect

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    app = create_app(Settings.from_env(settings_env(data_dir)))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="web-test-empty-server", daemon=True)
    thread.start()
    try:
        tabs = _tab(browser, f"http://127.0.0.1:{server.server_port}", 1280, 900)
        page = next(tabs)
        empty = re.compile(r"^The index holds no papers yet: nothing can match until a corpus is indexed \(reranker index CORPUS.jsonl\)\.$")
        page.goto("/ui")
        page.get_by_label("Abstract or a few words").fill(QUERY)
        page.get_by_label("Abstract or a few words").press("Enter")
        expect(page.locator("#search-hits .empty")).to_have_text(empty)
        page.goto("/ui#/compare")
        page.get_by_label("Query (an abstract or a few sentences)").fill(QUERY)
        page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
        for side in ("left", "right"):
            expect(page.locator(f"#column-{side} .hits .empty")).to_have_text(empty)
        _screenshot(page, "empty-index.png")
        next(tabs, None)  # closes the tab, checking it met no script error
    finally:
        server.shutdown()
        thread.join(timeout=10)
        app.extensions["reranker"].close()


def test_a_paper_link_that_names_no_paper_says_so_and_shows_none(page: "Page") -> None:
    """#/paper/ with no id, or with one that is not percent-encoded, shows no paper: neither
    the one opened before (its opening, topics and papers like it stayed under "Paper not
    available") nor the service's words about its routes."""
    from playwright.sync_api import expect

    for link, reason in (
        ("#/paper/", "Not a paper link: #/paper/ names no paper (it needs a paper's id after the slash)."),
        ("#/paper/50%", 'Not a paper link: 50% (percent-encode the id, a "%" as %25)'),
    ):
        page.goto("/ui#/paper/P01-1027")
        expect(page.locator("#paper-similar .hit")).to_have_count(10)
        page.goto(f"/ui{link}")
        expect(page.locator("#status")).to_have_text(reason)
        expect(page.locator("#paper-title")).to_have_text("Paper not available")
        expect(page.locator("#paper-excerpt")).to_be_empty()
        expect(page.locator("#view-paper .paper-id")).to_be_empty()
        expect(page.locator("#paper-topics .topic")).to_have_count(0)
        expect(page.locator("#paper-similar .hit")).to_have_count(0)


def test_a_slow_answer_to_an_earlier_search_does_not_replace_the_later_ones(page: "Page") -> None:
    """A librarian pastes a long abstract, then, before it is answered, searches a few words:
    the list shows the few words' papers, and the abstract's answer, arriving last, is dropped
    (it was shown under the new query's text)."""
    from playwright.sync_api import expect

    held: list[Any] = []
    page.route("**/search", lambda route: held.append(route) if not held else route.continue_())
    page.goto("/ui")
    box = page.get_by_label("Abstract or a few words")
    box.fill(QUERY)
    box.press("Enter")
    page.wait_for_function("document.getElementById('status').textContent === 'Searching…'")
    _wait_until_held(page, held, 1)
    box.fill(SHORT_QUERY)
    box.press("Enter")
    expect(page.locator("#search-hits .hit").first).to_have_attribute("data-id", SHORT_ID)
    with page.expect_response("**/search") as answered:
        held[0].continue_()
    assert answered.value.ok
    page.wait_for_timeout(300)  # the late answer's turn to be drawn, were it drawn
    expect(page.locator("#search-hits .hit").first).to_have_attribute("data-id", SHORT_ID)
    expect(page.locator("#status")).to_have_text("10 results.")


def test_a_compare_sent_while_another_runs_is_the_one_shown(page: "Page") -> None:
    """Compare, a new query sent before the last one is answered: it was ignored (the button
    did nothing) and the columns then showed the old query's hits under the new text."""
    from playwright.sync_api import expect

    held: list[Any] = []
    page.route("**/search", lambda route: held.append(route) if len(held) < 2 else route.continue_())
    page.goto("/ui#/compare")
    box = page.get_by_label("Query (an abstract or a few sentences)")
    expect(page.get_by_label("Left ranker")).to_have_value("bm25")
    box.fill(QUERY)
    box.press("Control+Enter")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Searching with')")
    _wait_until_held(page, held, 2)  # one search per column
    box.fill(SHORT_QUERY)
    box.press("Control+Enter")
    for side in ("left", "right"):
        expect(page.locator(f"#column-{side} .hit").first).to_have_attribute("data-id", SHORT_ID)
    for route in held:
        route.continue_()
    page.wait_for_timeout(500)  # the late answers' turn to be drawn, were they drawn
    for side in ("left", "right"):
        expect(page.locator(f"#column-{side} .hit").first).to_have_attribute("data-id", SHORT_ID)
    expect(page.locator("#compare-columns")).not_to_have_attribute("aria-busy", "true")


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
    page.get_by_role("navigation").get_by_role("link", name="Search papers").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_label("Abstract or a few words")).to_be_visible()
    expect(page.get_by_role("link", name="Search papers")).to_have_attribute("aria-current", "page")


def test_live_search_records_a_click_that_the_dashboard_counts(page: "Page", served: str) -> None:
    from playwright.sync_api import expect

    status, body = _api(served, "POST", "/experiments", {"id": "web-ab", "rankers": ["bm25", "hidden_topics"], "traffic": 1.0}, key=ADMIN_KEY)
    assert status == 201, body
    try:
        page.goto("/ui#/search")
        page.get_by_label("Abstract or a few words").fill(TYPED_QUERY)
        page.get_by_label("Abstract or a few words").press("Enter")
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
        expect(page.locator("#event-status")).to_be_empty()  # the click's message stayed with its view
        expect(card.locator('[data-field="queries"]')).to_have_text("1 (1 with clicks)")
        expect(card.locator('[data-field="units"]')).to_have_text("1")
        expect(card.locator('[data-field="traffic"]')).to_have_text("100%")
        expect(card.locator('[data-field="verdict"]')).not_to_be_empty()

        # Changes need the admin key: a wrong one is refused with the API's reason.
        card.get_by_label("Traffic share (above 0, at most 1)").fill("0.5")
        _refused_then_done(page, card, card.get_by_role("button", name="Update traffic"))
        card = page.locator('[data-experiment="web-ab"]')  # rebuilt
        expect(card.locator('[data-field="traffic"]')).to_have_text("50%")
        expect(card.locator(".form-result")).to_have_text("Saved: traffic share 50%.")
        assert page.evaluate("document.activeElement.closest('[data-experiment]').dataset.experiment") == "web-ab"
        assert page.evaluate("sessionStorage.getItem('reranker.admin_key')") == ADMIN_KEY
        assert page.evaluate("localStorage.getItem('reranker.admin_key')") is None
        _screenshot(page, "dashboard.png")
    finally:
        _api(served, "PATCH", "/experiments/web-ab", {"status": "stopped"}, key=ADMIN_KEY)


OUT_OF_VOCABULARY = "crfs zzqx"  # no word of it has a vector; BM25 still finds "crfs"


def test_an_out_of_vocabulary_query_says_so(page: "Page", served: str) -> None:
    """The search view shows an answer's status and reason as Compare does, not just a count."""
    from playwright.sync_api import expect

    status, body = _api(served, "POST", "/search", {"query": OUT_OF_VOCABULARY, "size": 10})
    assert status == 200 and body["status"] == "query_out_of_vocabulary" and body["hits"], body
    page.goto("/ui#/search")
    page.get_by_label("Abstract or a few words").fill(OUT_OF_VOCABULARY)
    page.get_by_label("Abstract or a few words").press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(len(body["hits"]))
    expect(page.locator("#search-meta")).to_have_text(f"Status: query_out_of_vocabulary — {body['reason']}")
    expect(page.locator("#status")).to_have_text(f"{len(body['hits'])} results (status query_out_of_vocabulary: see above the list).")
    page.get_by_label("Abstract or a few words").fill(TYPED_QUERY)  # an ordinary answer clears it
    page.get_by_label("Abstract or a few words").press("Enter")
    expect(page.locator("#status")).to_have_text("10 results.")
    expect(page.locator("#search-meta")).to_be_empty()

    # Compare: the Why of a hit says the topics add nothing, and lists none of them.
    status, explained = _api(served, "POST", "/search", {"query": OUT_OF_VOCABULARY, "ranker": DEFAULT_RANKER, "size": 10, "explain": True})
    assert status == 200 and explained["status"] == "query_out_of_vocabulary"
    explanation = explained["hits"][0]["explanation"]
    # The API lists none either (`rest` holds them all), as the CLI says it.
    assert explanation["parts"]["topics"] == 0 and explanation["topics"] == [] and explanation["rest"]["topics"] > 0
    page.goto("/ui#/compare")
    page.get_by_label("Query (an abstract or a few sentences)").fill(OUT_OF_VOCABULARY)
    page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
    right = page.locator("#column-right")
    expect(right.locator(".hit")).to_have_count(len(explained["hits"]))
    expect(right.locator(".column-meta")).to_contain_text("Status: query_out_of_vocabulary")
    hit = right.locator(".hit").first
    expect(hit.locator("summary")).to_have_text("Why: no query word has a word vector")
    hit.locator("summary").click()
    expect(hit.locator(".score-parts")).to_contain_text(f"Score {explanation['score']:.4f} = topics 0.0000 + bm25 ")
    expect(hit.locator(".topic-score")).to_contain_text("No word of the query has a word vector, so the hidden topics add nothing")
    expect(hit.locator(".topic, .topic-rest")).to_have_count(0)
    expect(page.locator("#status")).to_contain_text("Showing ")
    # A status and a note in one column: one line of facts, each after a " · ".
    page.get_by_label("Left ranker").select_option("wmd")
    page.get_by_label("Query (an abstract or a few sentences)").fill(TYPED_QUERY)
    page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
    _wait_for_columns(page)
    expect(page.locator("#column-left .column-meta")).to_have_text(
        re.compile(r"^\d+ BM25 candidates reranked in [\d.]+ ms · Status: partial — [^·]+ · wmd does not score by topics: no explanations\.$")
    )
    expect(page.locator("#column-left .column-meta .problem")).to_have_css("display", "inline")
    page.get_by_role("navigation").get_by_role("link", name="Search papers").click()
    expect(page.locator("#status")).to_be_empty()  # Compare's message is not the search's


def test_a_query_with_no_word_of_the_vectors_that_matches_nothing_says_one_thing(page: "Page", served: str) -> None:
    """Stop words only, punctuation only, or words with no vector that no paper holds: nothing
    matches, and the page says that alone; the status's note that "the rest of the fusion
    orders the hits" sat above "No document matches this query.", about hits there were not."""
    from playwright.sync_api import expect

    no_words = "No document matches this query: it has no words to search (stop words, numbers and single letters are left out)."
    for query, said in (("the of and", no_words), ("?! ... ;", no_words), ("zzqx qqzv", "No document matches this query.")):
        status, body = _api(served, "POST", "/search", {"query": query, "size": 10})
        assert status == 200 and body["status"] == "query_out_of_vocabulary" and body["hits"] == [], body
        page.goto("/ui#/search")
        page.get_by_label("Abstract or a few words").fill(query)
        page.get_by_label("Abstract or a few words").press("Enter")
        expect(page.locator("#status")).to_have_text("0 results.")
        expect(page.locator("#search-hits > li")).to_have_text([said])
        expect(page.locator("#search-meta")).to_be_empty()
        _compare_nothing(page, query)
        for side in ("left", "right"):
            expect(page.locator(f"#column-{side} .hits > li")).to_have_text([said])
            expect(page.locator(f"#column-{side} .column-meta")).to_have_text(re.compile(r"^0 BM25 candidates [^·]+$"))


def _compare_nothing(page: "Page", query: str) -> None:
    from playwright.sync_api import expect

    page.goto("/ui#/compare")
    page.get_by_label("Query (an abstract or a few sentences)").fill(query)
    page.get_by_label("Query (an abstract or a few sentences)").press("Control+Enter")
    expect(page.locator("#status")).to_have_text(re.compile(r"^Showing 0 hits from "))


# --- titles, plots, experiments from the page, a phone's screen ------------------------------


def _names(page: "Page", hits: str) -> list[tuple[str, str, str]]:
    """(id, the name shown, the meta line) of each hit in the list `hits`."""
    items = page.locator(hits)
    return [
        (items.nth(i).get_attribute("data-id") or "", items.nth(i).locator(".hit-title").inner_text(), items.nth(i).locator(".hit-meta").inner_text())
        for i in range(items.count())
    ]


def _snippets_shown(page: "Page", hits: str) -> None:
    """Every hit of the list `hits` shows its opening words (the API's snippet) under its name."""
    items = page.locator(hits)
    for i in range(items.count()):
        doc_id = items.nth(i).get_attribute("data-id") or ""
        opening = " ".join(TEXTS[doc_id].split()[:8])
        assert items.nth(i).locator(".snippet").inner_text().startswith(opening), doc_id


def _snippets_marked_where_cut(page: "Page", hits: str) -> list[str]:
    """Each hit of the list `hits` shows its first 30 words, then "…" if and only if its text
    goes on; returns the ids listed."""
    items = page.locator(hits)
    ids = []
    for i in range(items.count()):
        doc_id = items.nth(i).get_attribute("data-id") or ""
        words = TEXTS[doc_id].split()
        expected = " ".join(words[:30]) + (" …" if len(words) > 30 else "")
        assert items.nth(i).locator(".snippet").inner_text() == expected, doc_id
        ids.append(doc_id)
    return ids


def test_documents_without_a_title_are_named_by_their_opening_words(page: "Page", served: str) -> None:
    from playwright.sync_api import expect

    _compare(page, TYPED_QUERY)
    live_ids = []
    for hits in ("#column-left .hit", "#column-right .hit"):
        _snippets_shown(page, hits)
        named = _names(page, hits)
        assert HOSTILE_ID in {doc_id for doc_id, _, _ in named}
        for doc_id, name, meta in named:
            assert name == (HOSTILE_TITLE if doc_id == HOSTILE_ID else _opening_title(TEXTS[doc_id]))
            assert meta.endswith(f" · {doc_id}")  # the id stays in sight
    page.goto("/ui#/search")  # no experiment runs: the plain list
    page.get_by_label("Abstract or a few words").fill(TYPED_QUERY)
    page.get_by_label("Abstract or a few words").press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(10)
    _snippets_shown(page, "#search-hits .hit")
    # Each hit's BM25 rank, titled or not, then its id (the id took the rank's place).
    status, body = _api(served, "POST", "/search", {"query": TYPED_QUERY, "size": 10})
    assert status == 200
    bm25_ranks = {hit["id"]: hit["bm25_rank"] for hit in body["hits"]}
    for doc_id, name, meta in _names(page, "#search-hits .hit"):
        live_ids.append(doc_id)
        assert name == (HOSTILE_TITLE if doc_id == HOSTILE_ID else _opening_title(TEXTS[doc_id]))
        assert meta == f"BM25 rank {bm25_ranks[doc_id]} · {doc_id}"
    untitled = next(doc_id for doc_id in live_ids if doc_id != HOSTILE_ID)
    page.locator(f'#search-hits .hit[data-id="{untitled}"] .hit-title').click()
    expect(page.locator("#paper-title")).to_have_text(_opening_title(TEXTS[untitled]))
    assert page.title() == f"{_opening_title(TEXTS[untitled])} · reranker"
    expect(page.locator("#paper-similar .hit")).to_have_count(10)
    for doc_id, name, meta in _names(page, "#paper-similar .hit"):
        assert name == (HOSTILE_TITLE if doc_id == HOSTILE_ID else _opening_title(TEXTS[doc_id]))
        assert meta.startswith("score ") and meta.endswith(f" · {doc_id}")


def test_a_snippet_ends_with_an_ellipsis_only_where_the_text_was_cut(page: "Page", served: str) -> None:
    """A short abstract is shown whole, without "…"; a long one's first 30 words end with it.
    The API says which (`snippet_truncated`): the page does not guess from a word count."""
    from playwright.sync_api import expect

    status, body = _api(served, "POST", "/search", {"query": SHORT_QUERY, "size": 10, "snippets": True})
    assert status == 200 and SHORT_ID in [hit["id"] for hit in body["hits"]], body
    assert {hit["id"]: hit["snippet_truncated"] for hit in body["hits"]} == {hit["id"]: len(TEXTS[hit["id"]].split()) > 30 for hit in body["hits"]}
    page.goto("/ui#/search")
    page.get_by_label("Abstract or a few words").fill(SHORT_QUERY)
    page.get_by_label("Abstract or a few words").press("Enter")
    expect(page.locator("#search-hits .hit")).to_have_count(len(body["hits"]))
    listed = _snippets_marked_where_cut(page, "#search-hits .hit")
    assert SHORT_ID in listed and len(listed) > 1  # both kinds: the short text and longer ones
    expect(page.locator(f'#search-hits .hit[data-id="{SHORT_ID}"] .snippet')).to_have_text(SHORT_TEXT)
    _compare(page, SHORT_QUERY)
    for hits in ("#column-left .hit", "#column-right .hit"):
        assert SHORT_ID in _snippets_marked_where_cut(page, hits)
    # Papers like one: the same mark from GET /documents/<id>/similar.
    page.goto("/ui#/paper/P01-1027")
    expect(page.locator("#paper-similar .hit")).to_have_count(10)
    _snippets_marked_where_cut(page, "#paper-similar .hit")


def _evaluation_reports(tmp_path: Path) -> tuple[Path, Path]:
    """What `reranker compare --json-file` writes and `reranker evaluate --json --per-query`
    prints, run on the sample (5 judged queries)."""
    compared = tmp_path / "compare-sample.json"
    code, _ = run(tmp_path / "data", "compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics,hidden_topics+bm25",
                  "--json-file", str(compared), "--json", "--no-progress")
    assert code == 0
    code, printed = run(tmp_path / "data", "evaluate", str(SAMPLE), "--rankers", "bm25,hidden_topics", "--json", "--per-query", "--no-progress")
    assert code == 0
    evaluated = tmp_path / "evaluate-sample.json"
    evaluated.write_text(printed, encoding="utf-8")
    return compared, evaluated


def _bars(page: "Page") -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind in ("win", "tie", "loss"):
        found[kind] = page.locator(f"#report-plot rect.plot-{kind}").evaluate_all("bars => bars.map((bar) => bar.dataset.query)")
    return found


def test_the_compare_view_plots_an_evaluations_per_query_wins_and_losses(page: "Page", tmp_path: Path) -> None:
    from playwright.sync_api import expect

    compared, evaluated = _evaluation_reports(tmp_path)
    body = json.loads(compared.read_text(encoding="utf-8"))
    page.goto("/ui#/compare")
    page.get_by_label("Evaluation report (JSON)").set_input_files(compared)
    summary = page.locator("#report-summary")
    expect(summary).to_contain_text("hidden_topics against bm25 on sample, ndcg@10:")
    expect(page.get_by_label("Against", exact=True)).to_have_value("bm25")
    for ranker in ("hidden_topics", "hidden_topics+bm25"):
        for metric in ("ndcg@10", "p@5"):
            page.get_by_label("Ranker", exact=True).select_option(ranker)
            page.get_by_label("Metric", exact=True).select_option(metric)
            wins, ties, losses = body["wins_ties_losses"][ranker][metric]
            expect(summary).to_contain_text(f"{ranker} against bm25 on sample, {metric}: {wins} wins, {ties} ties, {losses} losses over 5 queries")
            # The report's own p-value (JavaScript's toPrecision(2) rounds halves up, Python's format does not).
            shown_p = re.search(r"; p (< 0\.0001|= [0-9.]+) by paired randomisation \(two-sided, ", summary.inner_text())
            assert shown_p, summary.inner_text()
            p_value = body["p_values"][ranker][metric]
            assert p_value < 1e-4 if shown_p[1] == "< 0.0001" else float(shown_p[1][2:]) == pytest.approx(p_value, abs=0.006, rel=0.05)
            bars = _bars(page)
            assert [len(bars[kind]) for kind in ("win", "tie", "loss")] == [wins, ties, losses]
            # One bar per query, from the largest gain to the largest loss.
            deltas = {q: body["per_query"][ranker][q][metric] - body["per_query"]["bm25"][q][metric] for q in body["per_query"]["bm25"]}
            shown = page.locator("#report-plot rect.plot-bar").evaluate_all("bars => bars.map((bar) => bar.dataset.query)")
            assert sorted(shown) == sorted(deltas) and [deltas[q] for q in shown] == sorted(deltas.values(), reverse=True)
    assert page.locator("#report-plot svg").get_attribute("aria-label") == summary.inner_text()
    _screenshot(page, "compare-wins-losses.png")

    # `reranker evaluate`'s report has every ranker as a baseline.
    page.get_by_label("Evaluation report (JSON)").set_input_files(evaluated)
    page.get_by_label("Against", exact=True).select_option("hidden_topics")
    expect(page.get_by_label("Ranker", exact=True)).to_have_value("bm25")
    wins, ties, losses = json.loads(evaluated.read_text(encoding="utf-8"))["wins_ties_losses"]["hidden_topics"]["bm25"]
    expect(summary).to_contain_text(f"bm25 against hidden_topics on sample, ndcg@10: {wins} wins, {ties} ties, {losses} losses")

    # Anything else is refused with a reason, and nothing is plotted.
    for name, content, reason in (
        ("notes.json", "not json at all", "it is not JSON"),
        ("report.json", json.dumps({"dataset": "x", "results": {}}), "it has no figures of any ranker"),
    ):
        wrong = tmp_path / name
        wrong.write_text(content, encoding="utf-8")
        page.get_by_label("Evaluation report (JSON)").set_input_files(wrong)
        expect(summary).to_contain_text(f"Cannot open {name}: {reason}")
        expect(page.locator("#report-plot svg")).to_have_count(0)
        expect(page.locator("#report-controls")).to_be_hidden()
        expect(page.locator("#report-figures")).to_be_hidden()


def _figures(page: "Page") -> dict[str, list[str]]:
    """The figures table: metric -> [left, right, p] as shown."""
    rows = page.locator("#report-figures tbody tr").evaluate_all(
        "rows => rows.map((row) => [row.dataset.metric, ...[...row.querySelectorAll('td')].map((cell) => cell.textContent)])"
    )
    return {row[0]: row[1:] for row in rows}


def test_the_compare_view_shows_a_judged_data_sets_figures_for_its_two_rankers(page: "Page", served: str, data_dir: Path, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    # A judged data set from an experiment's clicks, and `reranker evaluate`'s report on it.
    status, _ = _api(served, "POST", "/experiments", {"id": "web-judged", "rankers": ["bm25", "hidden_topics"], "traffic": 1.0}, key=ADMIN_KEY)
    assert status == 201
    try:
        assert _clicked_searches(served, searches=25, seed=4)
    finally:
        _api(served, "PATCH", "/experiments/web-judged", {"status": "stopped"}, key=ADMIN_KEY)
    judged = tmp_path / "clicks-web"
    code, out = run(data_dir, "ab", "judgments", "web-judged", "--out", str(judged), "--min-impressions", "3")
    assert code == 0, out
    code, printed = run(data_dir, "evaluate", str(judged), "--rankers", "bm25,hidden_topics", "--json", "--no-progress")
    assert code == 0, printed
    report = tmp_path / "evaluate-clicks.json"
    report.write_text(printed, encoding="utf-8")
    body = json.loads(printed)

    page.goto("/ui#/compare")
    page.get_by_label("Left ranker").select_option("bm25")
    page.get_by_label("Right ranker").select_option("hidden_topics")
    page.get_by_label("Evaluation report (JSON)").set_input_files(report)
    figures = page.locator("#report-figures")
    expect(figures.locator("caption")).to_have_text(
        f"clicks-web, {body['queries']} judged queries (judgments: qrels.tsv): bm25 and hidden_topics"
    )
    # Without per-query figures the report is shown, not plotted, and the page says why.
    expect(page.locator("#report-summary")).to_contain_text("evaluate-clicks.json has no per-query figures to plot")
    expect(page.locator("#report-controls")).to_be_hidden()
    shown = _figures(page)
    assert list(shown) == list(body["results"]["bm25"])
    for metric, (left, right, p_shown) in shown.items():
        assert left == f"{body['results']['bm25'][metric]:.3f}" and right == f"{body['results']['hidden_topics'][metric]:.3f}"
        p_value = body["p_values"]["bm25"]["hidden_topics"][metric]
        assert p_shown == "< 0.0001" if p_value < 1e-4 else float(p_shown) == pytest.approx(p_value, abs=1e-4)
    better = "bm25" if body["results"]["bm25"]["ndcg@10"] > body["results"]["hidden_topics"]["ndcg@10"] else "hidden_topics"
    column = 1 if better == "bm25" else 2
    expect(figures.locator(f'tr[data-metric="ndcg@10"] td:nth-of-type({column})')).to_have_class("better")
    _screenshot(page, "compare-judged-figures.png")

    # The columns follow the rankers compared; a ranker the report lacks is named.
    page.get_by_label("Left ranker").select_option("hidden_topics")
    page.get_by_label("Right ranker").select_option("bm25")
    expect(figures.locator("thead th")).to_have_text(["Metric", "hidden_topics", "bm25", "p"])
    page.get_by_label("Right ranker").select_option(DEFAULT_RANKER)
    expect(figures).to_contain_text(f"The report on clicks-web has no figures of {DEFAULT_RANKER}; it has bm25, hidden_topics.")
    expect(figures.locator("table")).to_have_count(0)

    # `reranker compare` tests against its one baseline: no p-value between two others.
    compared, _ = _evaluation_reports(tmp_path)
    page.get_by_label("Evaluation report (JSON)").set_input_files(compared)
    page.get_by_label("Left ranker").select_option("hidden_topics")
    page.get_by_label("Right ranker").select_option("hidden_topics+bm25")
    expect(figures).to_contain_text("This report tests each ranker against bm25 only: no p-value between hidden_topics and hidden_topics+bm25.")
    expect(figures.locator('tr[data-metric="ndcg@10"] td').nth(2)).to_have_text("—")
    page.get_by_label("Left ranker").select_option("bm25")
    p_value = json.loads(compared.read_text(encoding="utf-8"))["p_values"]["hidden_topics+bm25"]["ndcg@10"]
    expect(figures.locator('tr[data-metric="ndcg@10"] td').nth(2)).to_have_text("< 0.0001" if p_value < 1e-4 else f"{p_value:.4f}")


def _shown_p(p_value: float | None) -> str:
    """A p-value as the experiment card writes it."""
    return "—" if p_value is None else "< 0.0001" if p_value < 1e-4 else f"{p_value:.4f}"


def _percent(share: float) -> str:
    """A share as the page writes it (JavaScript's Math.round rounds halves up)."""
    return f"{math.floor(share * 100 + 0.5)}%"


def _clicked_searches(served: str, searches: int, seed: int) -> list[str]:
    """Searches by users who click what hidden_topics ranks in its top 3 (position-biased,
    noisy), answered by the running experiment; returns the query ids with clicks."""
    import random

    rng = random.Random(seed)
    queries = [json.loads(line)["text"] for line in (SAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    clicked = []
    for number in range(searches):
        text = queries[number % len(queries)]
        liked = {hit["id"] for hit in _api(served, "POST", "/search", {"query": text, "size": 3, "ranker": "hidden_topics"})[1]["hits"]}
        status, body = _api(served, "POST", "/search", {"query": text, "size": 8, "client_id": f"user-{number}"})
        assert status == 200 and "query_id" in body
        for hit in body["hits"]:
            if rng.random() < 0.9 ** (hit["rank"] - 1) and rng.random() < (0.8 if hit["id"] in liked else 0.05):
                event = {"action_name": "click", "query_id": body["query_id"], "client_id": f"user-{number}",
                         "event_attributes": {"object": {"object_id": hit["id"]}, "position": {"ordinal": hit["rank"]}}}
                assert _api(served, "POST", "/events", event)[0] == 201
                clicked.append(body["query_id"])
    return list(dict.fromkeys(clicked))  # in the order searched: query ids are random, their sort order would be too


def _spread_over_days(data_dir: Path, query_ids: list[str], days: int) -> None:
    """Say the queries were shown over `days` days, a few hours apart (the experiment store
    the server reads, written as the server writes it)."""
    from dataclasses import replace

    from reranker.store.events import EmbeddedEventStore

    store = EmbeddedEventStore(data_dir / "experiments.sqlite3")
    for number, query_id in enumerate(query_ids):
        shown = store.shown_query(query_id)
        assert shown is not None
        day, hour = divmod(number * days * 24 // len(query_ids), 24)
        store.record_query(replace(shown, timestamp=f"2026-11-{20 + day:02d}T{hour:02d}:20:00.000+00:00"))
    store.close()


def test_an_admin_starts_watches_and_stops_an_experiment_from_the_page(page: "Page", served: str, data_dir: Path) -> None:
    from playwright.sync_api import expect

    page.goto("/ui#/experiments")
    name = page.get_by_label('Name (a-z, 0-9, "_" and "-")')
    result = page.locator("#create-result")
    expect(page.get_by_label("First ranker")).to_have_value(DEFAULT_RANKER)  # the rankers are listed
    name.fill("web-plot")
    page.get_by_label("First ranker").select_option("hidden_topics")
    page.get_by_label("Second ranker").select_option("bm25")
    # The page is static HTML, so its defaults are written there: they must be the service's.
    expect(page.get_by_label("Traffic share", exact=True)).to_have_value(f"{DEFAULT_TRAFFIC:g}")
    for share in ("0.001", "0.155"):  # any share the API takes (the browser refused them itself)
        page.get_by_label("Traffic share", exact=True).fill(share)
        assert page.get_by_label("Traffic share", exact=True).evaluate("input => input.checkValidity()")
    page.get_by_label("Traffic share", exact=True).fill("1")
    expect(page.get_by_label("Units to decide")).to_have_value(str(DEFAULT_MIN_UNITS))
    page.get_by_label("Units to decide").fill("5")
    start = page.get_by_role("button", name="Start experiment")
    start.click()
    expect(result).to_have_text("Enter the admin API key first.")
    try:
        # A wrong key gets the route's own refusal, word for word.
        status, refusal = _api(served, "POST", "/experiments", {"id": "web-plot", "rankers": ["hidden_topics", "bm25"]}, key="wrong-key")
        assert status == 401
        page.get_by_label("Admin API key (kept in this tab only)").fill("wrong-key")
        start.click()
        expect(result).to_have_text(f"Refused: {refusal['error']['reason']} (HTTP 401, {refusal['error']['type']})")
        page.get_by_label("Admin API key (kept in this tab only)").fill(ADMIN_KEY)
        start.click()
        card = page.locator('[data-experiment="web-plot"]')
        expect(card.locator(".form-result")).to_have_text("Started.")
        expect(card.locator(".badge")).to_have_text("running")
        status, stored = _api(served, "GET", "/experiments/web-plot")
        assert stored["experiment"] | {"created": None} == {
            "id": "web-plot", "rankers": ["hidden_topics", "bm25"], "method": "team_draft", "traffic": 1.0,
            "status": "running", "created": None, "min_units": 5, "min_queries": 5,  # the old name, for older clients
        }
        assert ADMIN_KEY not in page.url and page.evaluate("sessionStorage.getItem('reranker.admin_key')") == ADMIN_KEY
        expect(card.locator("figcaption")).to_contain_text("No clicked query yet")
        expect(card.locator('dd[data-field="min_units"]')).to_have_text("5 with a preference before a winner is named")
        expect(card.locator('dd[data-field="min_units"]').locator("xpath=preceding-sibling::dt[1]")).to_have_text("Units to decide")
        expect(card.locator('dd[data-field="queries"]').locator("xpath=preceding-sibling::dt[1]")).to_have_text("Searches interleaved")

        # Users search and click for three days; the card plots the preference as it came.
        _spread_over_days(data_dir, _clicked_searches(served, searches=30, seed=5), days=3)
        page.get_by_role("button", name="Refresh").click()
        timeline = _api(served, "GET", "/experiments/web-plot/timeline")[1]
        points = [p for p in timeline["periods"] if p["cumulative"]["share"] is not None]
        assert timeline["interval"] == "hour" and len(points) >= 5
        plot = card.locator("svg.plot-svg")
        expect(plot.locator("circle.plot-dot")).to_have_count(len(points))
        expect(plot.locator("polygon.plot-band")).to_have_count(1)
        expect(plot.locator("polyline.plot-line")).to_have_count(1)
        last = points[-1]["cumulative"]
        decided = last["wins"]["hidden_topics"] + last["wins"]["bm25"]
        label = plot.get_attribute("aria-label") or ""
        assert label.startswith(f"hidden_topics's share of the units with a preference: {_percent(last['share'])} "
                                f"(95% always-valid interval {_percent(last['low'])} to {_percent(last['high'])}) after {decided} such units")
        # Each point's tooltip is its period's statistics; the band is the confidence sequence's, point by point.
        first = points[0]["cumulative"]
        assert plot.locator("circle.plot-dot title").first.text_content() == (
            f"by {points[0]['end'][5:10]} {points[0]['end'][11:16]} UTC: hidden_topics preferred on {first['wins']['hidden_topics']} of "
            f"{first['wins']['hidden_topics'] + first['wins']['bm25']} ({_percent(first['share'])}, "
            f"always-valid interval {_percent(first['low'])}-{_percent(first['high'])}), p = {first['p_value']:.4f}"
        )
        band = [float(v) for point in (plot.locator("polygon.plot-band").get_attribute("points") or "").split() for v in point.split(",")[1:]]
        dots = [float(plot.locator("circle.plot-dot").nth(i).get_attribute("cy") or "nan") for i in range(len(points))]
        # The band covers the points whose interval is not empty (a prefix: once empty, it stays so).
        drawn = sum(p["cumulative"]["low"] <= p["cumulative"]["high"] for p in points)
        assert drawn >= 1 and len(band) == 2 * drawn
        uppers, lowers = band[:drawn], band[drawn:][::-1]
        # The band is the running intersection: it only narrows (SVG's y grows downwards).
        assert all(a <= b + 1e-6 for a, b in zip(uppers, uppers[1:])) and all(a >= b - 1e-6 for a, b in zip(lowers, lowers[1:]))
        # A share lies in its own period's interval, but the intersection of every interval so
        # far may have left it: where the API puts the share inside the band, the dot is inside.
        inside = [p["cumulative"]["low"] <= p["cumulative"]["share"] <= p["cumulative"]["high"] for p in points[:drawn]]
        assert all(upper <= dot <= lower for upper, dot, lower, ok in zip(uppers, dots, lowers, inside) if ok)
        expect(card.locator("figcaption")).to_contain_text("only after 5 units with a preference")
        expect(card.locator("figcaption")).to_contain_text("always-valid confidence band (a confidence sequence")
        # The card shows both p-values, each under the name of the look it is valid for.
        report = _api(served, "GET", "/experiments/web-plot")[1]["report"]
        assert report["p_value"] == last["p_value"] and report["fixed_horizon_p_value"] == last["fixed_horizon_p_value"]
        for name, label in (("p_value", "p-value (always valid)"), ("fixed_horizon_p_value", "p-value (one look at a planned size)")):
            expect(card.locator(f'dd[data-field="{name}"]')).to_have_text(_shown_p(report[name]))
            expect(card.locator(f'dd[data-field="{name}"]').locator("xpath=preceding-sibling::dt[1]")).to_have_text(label)
        _screenshot(page, "experiments.png")
        card.screenshot(path=str(ARTIFACTS / "experiment-card.png"))  # docs/img/web-experiment.png

        # Stopping needs the key too.
        _refused_then_done(page, card, card.get_by_role("button", name="Stop experiment"))
        expect(card.locator(".badge")).to_have_text("stopped")
        expect(card.locator(".form-result")).to_have_text("Saved: status stopped.")
        assert _api(served, "GET", "/experiments/web-plot")[1]["experiment"]["status"] == "stopped"
    finally:
        _api(served, "PATCH", "/experiments/web-plot", {"status": "stopped"}, key=ADMIN_KEY)


def test_an_admin_deletes_a_stopped_experiment_with_its_events_after_confirming(page: "Page", served: str, data_dir: Path) -> None:
    """Delete on a stopped experiment's card asks first, saying its events go with it;
    cancelled, nothing changes; confirmed, the card is gone and so are its queries and events."""
    from playwright.sync_api import expect

    from reranker.store.events import EmbeddedEventStore

    status, _ = _api(served, "POST", "/experiments", {"id": "web-delete", "rankers": ["hidden_topics", "bm25"], "traffic": 1.0}, key=ADMIN_KEY)
    assert status == 201
    try:
        _clicked_searches(served, searches=4, seed=3)
        page.goto("/ui#/experiments")
        card = page.locator('[data-experiment="web-delete"]')
        expect(card.locator(".badge")).to_have_text("running")
        # Running, it cannot be deleted (a 409): no button that can only be refused.
        expect(card.get_by_role("button", name="Delete experiment")).to_have_count(0)
    finally:
        _api(served, "PATCH", "/experiments/web-delete", {"status": "stopped"}, key=ADMIN_KEY)
    page.get_by_role("button", name="Refresh").click()
    expect(card.locator(".badge")).to_have_text("stopped")
    delete = card.get_by_role("button", name="Delete experiment")
    delete.click()
    expect(card.locator(".form-result")).to_have_text("Enter the admin API key first.")  # asked before anything else
    page.get_by_label("Admin API key (kept in this tab only)").fill(ADMIN_KEY)

    questions: list[str] = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
    delete.click()
    expect(card.locator(".form-result")).to_have_text("Not deleted.")
    assert questions == ["Delete experiment “web-delete”? Its shown queries and click events are deleted with it, and its report cannot be made again."]
    assert _api(served, "GET", "/experiments/web-delete")[0] == 200

    # A wrong key gets the route's refusal, after the question as with the right one.
    page.on("dialog", lambda dialog: dialog.accept())
    _refused_then_done(page, card, delete)
    expect(card).to_have_count(0)
    status_line = page.locator("#status")
    expect(status_line).to_have_text(re.compile(r"Deleted “web-delete” with its 4 shown queries and \d+ events?\."))
    expect(page.locator("#experiments-title")).to_be_focused()
    assert _api(served, "GET", "/experiments/web-delete")[0] == 404
    store = EmbeddedEventStore(data_dir / "experiments.sqlite3")
    try:
        held = store.recorded("web-delete")
    finally:
        store.close()
    assert (held.queries, held.events) == (0, 0)


def _fits(page: "Page", view: str) -> None:
    """Nothing is wider than the screen: no sideways scrolling, and every control visible
    on the page lies within its width."""
    width = PHONE[0]
    assert page.evaluate("document.documentElement.scrollWidth") <= width, view
    assert page.evaluate("document.body.scrollWidth") <= width, view
    outside = page.evaluate(
        """(width) => [...document.querySelectorAll('input, select, textarea, button, a, svg, summary')]
            .filter((control) => control.getClientRects().length > 0 && control.id !== 'skip-link')
            .map((control) => [control.id || control.textContent.slice(0, 30) || control.tagName, control.getBoundingClientRect()])
            .filter(([, box]) => box.left < 0 || box.right > width)
            .map(([name, box]) => `${name}: ${box.left}..${box.right}`)""",
        width,
    )
    assert outside == [], (view, outside)
    counted = page.evaluate("document.querySelectorAll('select').length")
    assert counted > 0 or view not in ("compare", "experiments")


def test_every_view_fits_a_390_px_screen(phone: "Page", served: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    phone.goto("/ui#/compare")
    expect(phone.get_by_label("Right ranker")).to_have_value(DEFAULT_RANKER)  # the longest name the page starts with
    _fits(phone, "compare")
    _compare(phone, QUERY)
    phone.locator("#column-right .hit").first.locator("summary").click()
    phone.get_by_label("Evaluation report (JSON)").set_input_files(_evaluation_reports(tmp_path)[0])
    expect(phone.locator("#report-plot svg")).to_have_count(1)
    # The longest ranker name in every dropdown: the select stays within the screen.
    longest = max(phone.locator("#compare-left option:not([disabled])").all_inner_texts(), key=len)
    phone.get_by_label("Left ranker").select_option(longest)
    _fits(phone, "compare")
    _screenshot(phone, "phone-compare.png")

    phone.get_by_role("link", name="Search papers").click()
    phone.get_by_label("Abstract or a few words").fill(TYPED_QUERY)
    phone.get_by_label("Abstract or a few words").press("Enter")
    expect(phone.locator("#search-hits .hit")).to_have_count(10)
    _fits(phone, "search")
    phone.screenshot(path=str(ARTIFACTS / "phone-search.png"))
    phone.locator("#search-hits .hit-title").first.click()
    expect(phone.locator("#paper-similar .hit")).to_have_count(10)
    _fits(phone, "paper")

    status, _ = _api(served, "POST", "/experiments", {"id": "web-phone", "rankers": [DEFAULT_RANKER, "bm25"], "traffic": 1.0}, key=ADMIN_KEY)
    assert status == 201
    try:
        assert _clicked_searches(served, searches=6, seed=1), "a click, so there is a plot"
        phone.get_by_role("link", name="Experiments").click()
        card = phone.locator('[data-experiment="web-phone"]')
        expect(card.locator("svg.plot-svg")).to_have_count(1)
        phone.get_by_label("First ranker").select_option(longest)
        _fits(phone, "experiments")
        _screenshot(phone, "phone-experiments.png")
    finally:
        _api(served, "PATCH", "/experiments/web-phone", {"status": "stopped"}, key=ADMIN_KEY)


# What names a paper, a ranker or an experiment on the page.
NAMES = ".hit-title, .hit-meta, .snippet, .column h2, .column-meta, #paper-title, .paper-id, .experiment h2, .facts dd, .notice, .event-status"


def _names_wrap(page: "Page", view: str) -> None:
    """At a narrow width no name runs past its box or off the screen: long words (ids) break."""
    width = page.viewport_size["width"] if page.viewport_size else NARROW[0]
    assert page.evaluate("document.documentElement.scrollWidth") <= width, view
    overflowing = page.evaluate(
        """([selector, width]) => [...document.querySelectorAll(selector)]
            .filter((name) => name.getClientRects().length > 0)
            .filter((name) => name.scrollWidth > name.clientWidth + 1 || name.getBoundingClientRect().right > width)
            .map((name) => `${name.className || name.id}: ${name.textContent.slice(0, 40)} (${name.scrollWidth} > ${name.clientWidth})`)""",
        [NAMES, width],
    )
    assert overflowing == [], (view, overflowing)


def test_names_wrap_on_a_narrow_phone(narrow: "Page", served: str) -> None:
    """At 360 px, a ranker's name over its column, a hit's title and id (one 62-letter word
    here), a paper's id and an experiment's name wrap inside their boxes in every view."""
    from playwright.sync_api import expect

    _compare(narrow, SHORT_QUERY)
    expect(narrow.locator(f'#column-right .hit[data-id="{SHORT_ID}"] .hit-meta')).to_contain_text(SHORT_ID)
    _names_wrap(narrow, "compare")
    _screenshot(narrow, "narrow-compare.png")
    narrow.locator(f'#column-right .hit[data-id="{SHORT_ID}"]').screenshot(path=str(ARTIFACTS / "narrow-compare-hit.png"))
    narrow.get_by_role("link", name="Search papers").click()
    narrow.get_by_label("Abstract or a few words").fill(SHORT_QUERY)
    narrow.get_by_label("Abstract or a few words").press("Enter")
    expect(narrow.locator(f'#search-hits .hit[data-id="{SHORT_ID}"] .hit-meta')).to_have_text(re.compile(rf"^BM25 rank \d+ · {SHORT_ID}$"))
    _names_wrap(narrow, "search")
    _screenshot(narrow, "narrow-search.png")
    narrow.locator(f'#search-hits .hit[data-id="{SHORT_ID}"] .hit-title').click()
    expect(narrow.locator("#view-paper .paper-id")).to_have_text(f"id {SHORT_ID}")
    expect(narrow.locator("#paper-similar .hit")).to_have_count(10)
    _names_wrap(narrow, "paper")
    _screenshot(narrow, "narrow-paper.png")
    name = "webnarrowexperimentnamedinonelongwordwithoutahyphen"
    assert _api(served, "POST", "/experiments", {"id": name, "rankers": [DEFAULT_RANKER, "bm25"], "traffic": 1.0}, key=ADMIN_KEY)[0] == 201
    _api(served, "PATCH", f"/experiments/{name}", {"status": "stopped"}, key=ADMIN_KEY)
    narrow.get_by_role("link", name="Experiments").click()
    expect(narrow.locator(f'[data-experiment="{name}"] h2')).to_contain_text(name)
    _names_wrap(narrow, "experiments")
    narrow.locator(f'[data-experiment="{name}"]').screenshot(path=str(ARTIFACTS / "narrow-experiment.png"))


def _preferences_that_turn(data_dir: Path, experiment_id: str, turns: list[tuple[str, int, str]]) -> None:
    """A stopped experiment (hidden_topics vs bm25, min_units 5) in the store the server
    reads, with one clicked search per unit, each by a client of its own: per (day, units,
    preferred ranker) in `turns`, that many units on that day whose click preferred it."""
    from reranker.interleaving import TEAM_A, TEAM_B, Interleaving
    from reranker.store.events import EmbeddedEventStore, Event, Experiment, ShownQuery

    store = EmbeddedEventStore(data_dir / "experiments.sqlite3")
    store.create_experiment(Experiment(experiment_id, ("hidden_topics", "bm25"), "team_draft", 1.0, "stopped", "2026-11-01T00:00:00+00:00", 5))
    number = 0
    for day, units, preferred in turns:
        for _ in range(units):
            number += 1
            shown = Interleaving("team_draft", ("P1", "P2"), (TEAM_A, TEAM_B), ("P1", "P2"), ("P2", "P1"))
            query_id, client_id = f"{experiment_id}-q{number}", f"{experiment_id}-c{number}"
            store.record_query(ShownQuery(query_id, experiment_id, client_id, "a query", f"{day}T10:{number % 60:02d}:00+00:00", shown))
            clicked, rank = ("P1", 1) if preferred == "hidden_topics" else ("P2", 2)
            store.record_event(Event(f"{query_id}-e", query_id, experiment_id, client_id, "click", clicked, rank, f"{day}T11:00:00Z"))
    store.close()


def test_an_empty_confidence_sequence_is_said_and_not_drawn(page: "Page", served: str, data_dir: Path) -> None:
    """The always-valid interval is the running intersection of every interval so far: when
    the preference turns (hidden_topics first, then bm25 on far more units), no share fits
    every moment and the API's `low` passes its `high`. The card says so in words, draws no
    band for those points, and never prints an interval that runs backwards."""
    from playwright.sync_api import expect

    from reranker.store.events import EmbeddedEventStore

    _preferences_that_turn(data_dir, "web-turned", [("2026-11-20", 10, "hidden_topics"), ("2026-11-21", 25, "bm25"), ("2026-11-22", 15, "bm25")])
    try:
        timeline = _api(served, "GET", "/experiments/web-turned/timeline")[1]  # as the page reads it: by the hour
        ends = [(p["cumulative"]["low"], p["cumulative"]["high"]) for p in timeline["periods"]]
        assert len(ends) == 3 and ends[0][0] < ends[0][1] and ends[-1][0] > ends[-1][1], "the last interval is empty"
        page.goto("/ui#/experiments")
        card = page.locator('[data-experiment="web-turned"]')
        plot = card.locator("svg.plot-svg")
        expect(plot).to_have_count(1)
        label = plot.get_attribute("aria-label") or ""
        assert "95% always-valid interval is empty" in label and " to " not in label
        tips = [plot.locator("circle.plot-dot title").nth(i).text_content() or "" for i in range(3)]
        assert f"always-valid interval {_percent(ends[0][0])}-{_percent(ends[0][1])}" in tips[0]
        assert "always-valid interval empty" in tips[-1]
        for tip in tips:  # no interval whose lower end is above its upper
            found = re.search(r"interval (\d+)%-(\d+)%", tip)
            assert found is None or int(found[1]) <= int(found[2])
        # The band is drawn over the points where the interval is not empty, and only there.
        band = plot.locator("polygon.plot-band")
        shown = [p for p in timeline["periods"] if p["cumulative"]["low"] <= p["cumulative"]["high"]]
        if len(shown) >= 2:
            expect(band).to_have_count(1)
            assert len((band.get_attribute("points") or "").split()) == 2 * len(shown)
        else:
            expect(band).to_have_count(0)
        note = card.locator(".plot-empty")
        emptied = next(p for p in timeline["periods"] if p["cumulative"]["low"] > p["cumulative"]["high"])
        expect(note).to_have_count(1)
        expect(note).to_contain_text(f"By {emptied['end'][5:10]} {emptied['end'][11:16]} UTC the 95% always-valid interval was empty, and it stays so")
        expect(note).to_contain_text("no single share of preferences fits every moment of the experiment so far")
        expect(note).to_contain_text("chance at most 5%")
        _screenshot(page, "experiment-empty-interval.png")
    finally:
        store = EmbeddedEventStore(data_dir / "experiments.sqlite3")
        store.delete_experiment("web-turned", events=True)
        store.close()



def test_one_period_of_preferences_is_drawn_as_a_point_with_its_interval(page: "Page", served: str, data_dir: Path) -> None:
    """With a single period (every unit within one hour) there is no band to draw through
    time: the card draws the point with its always-valid interval as an error bar, and says
    in words that the band needs two or more periods."""
    from playwright.sync_api import expect

    from reranker.store.events import EmbeddedEventStore

    _preferences_that_turn(data_dir, "web-single", [("2026-11-20", 12, "hidden_topics"), ("2026-11-20", 3, "bm25")])
    try:
        timeline = _api(served, "GET", "/experiments/web-single/timeline")[1]
        assert timeline["interval"] == "hour" and len(timeline["periods"]) == 1, timeline
        only = timeline["periods"][0]["cumulative"]
        assert only["low"] < only["share"] < only["high"]
        page.goto("/ui#/experiments")
        card = page.locator('[data-experiment="web-single"]')
        plot = card.locator("svg.plot-svg")
        expect(plot).to_have_count(1)
        # No band (there is no second period to stretch it to); the point and its interval as an error bar.
        expect(plot.locator("polygon.plot-band")).to_have_count(0)
        expect(plot.locator("circle.plot-dot")).to_have_count(1)
        bar = plot.locator("g.plot-interval")
        expect(bar).to_have_count(1)
        expect(bar.locator("title")).to_have_text(f"95% always-valid interval {_percent(only['low'])}-{_percent(only['high'])}")
        spine = bar.locator("line").first
        ends = sorted(float(spine.get_attribute(end) or "nan") for end in ("y1", "y2"))
        dot = float(plot.locator("circle.plot-dot").get_attribute("cy") or "nan")
        assert ends[0] < dot < ends[1] and ends[1] - ends[0] > 20, (ends, dot)  # a bar around the point, not a sliver
        # ... and the card says so in words.
        expect(card.locator(".plot-single")).to_have_text(
            f"One hour of preferences so far: the bar is its 95% always-valid interval, {_percent(only['low'])} to "
            f"{_percent(only['high'])}. The band, the interval through time, needs two or more hours."
        )
        card.screenshot(path=str(ARTIFACTS / "experiment-one-period.png"))
    finally:
        store = EmbeddedEventStore(data_dir / "experiments.sqlite3")
        store.delete_experiment("web-single", events=True)
        store.close()


def test_an_experiment_s_small_traffic_share_is_shown_as_it_is(page: "Page", served: str) -> None:
    """A share of 0.04% once read "0%" on its card (rounded to a tenth of a percent), as if
    the experiment took no searches; the page writes 3 significant digits, as `reranker ab` does."""
    from playwright.sync_api import expect

    status, _ = _api(served, "POST", "/experiments", {"id": "web-small", "rankers": ["hidden_topics", "bm25"], "traffic": 0.0004}, key=ADMIN_KEY)
    assert status == 201
    try:
        page.goto("/ui#/experiments")
        expect(page.locator('[data-experiment="web-small"] dd[data-field="traffic"]')).to_have_text("0.04%")
    finally:
        _api(served, "PATCH", "/experiments/web-small", {"status": "stopped"}, key=ADMIN_KEY)
        _api(served, "DELETE", "/experiments/web-small?events=delete", key=ADMIN_KEY)


def test_an_experiment_whose_ranker_was_removed_says_so_and_offers_no_resume(page: "Page", served: str, data_dir: Path) -> None:
    """After an upgrade that dropped a ranker, its stopped experiment's card offered "Resume",
    which could only be refused (409), and said nothing of the ranker."""
    from playwright.sync_api import expect

    from reranker import experiments as ex
    from reranker.store.events import EmbeddedEventStore, Experiment

    store = EmbeddedEventStore(data_dir / "experiments.sqlite3")
    store.create_experiment(Experiment("web-old", ("hidden_topics", "retired_ranker"), "team_draft", 1.0, "stopped", ex.utc_now()))
    store.close()
    try:
        page.goto("/ui#/experiments")
        card = page.locator('[data-experiment="web-old"]')
        expect(card.locator('dd[data-field="removed_rankers"]')).to_contain_text("retired_ranker: not in this version of the service")
        expect(card.get_by_role("button", name="Update traffic")).to_be_visible()
        expect(card.get_by_role("button", name="Resume experiment")).to_have_count(0)
    finally:
        _api(served, "DELETE", "/experiments/web-old?events=delete", key=ADMIN_KEY)


def test_a_start_the_browser_refuses_clears_the_last_start_s_result(page: "Page", served: str) -> None:
    """A start the browser's own checks stop (2.5 units: the field's step is 1) is never sent;
    the result line kept the last start's words, which then read as this one's."""
    from playwright.sync_api import expect

    page.goto("/ui#/experiments")
    expect(page.get_by_label("First ranker")).to_have_value(DEFAULT_RANKER)
    page.get_by_label('Name (a-z, 0-9, "_" and "-")').fill("web-invalid")
    start = page.get_by_role("button", name="Start experiment")
    start.click()
    result = page.locator("#create-result")
    expect(result).to_have_text("Enter the admin API key first.")
    page.get_by_label("Units to decide").fill("2.5")
    start.click()
    expect(result).to_have_text("")
    assert page.locator("#create-min-units").evaluate("input => input.validity.stepMismatch")
