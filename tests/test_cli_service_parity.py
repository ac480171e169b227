"""The command line and the HTTP service answer the same question the same way.

`reranker search --json` prints the JSON of POST /search and `reranker similar --json` that
of GET /documents/<id>/similar (docs/cli.md). The two go through different code (the CLI
through `Engine.search`, the service through `Runtime` and its deadline), so each case
here asks both, on one index of the bundled sample corpus, and compares every field but
the timings. An error must be an error on both sides, saying the same thing.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import SAMPLE, TINY_CORPUS, run, settings_env, write_jsonl
from flask.testing import FlaskClient

from reranker.config import Settings
from reranker.rankers import get_ranker, ranker_names
from reranker.service import create_app

QUERY = "a maximum entropy named entity recognizer using global features"
# Words no GloVe vector has, and no document either: BM25 finds nothing for them.
UNKNOWN = "qwxzv blorptangle"
# A word one sample paper holds (a PDF's run-together words) and GloVe has no vector for:
# BM25 finds that paper, and no ranker built on word vectors can score it.
RUN_TOGETHER = "givensentence"
# Generous limits, so that neither side answers approximately because the machine is busy:
# the service's deadline and WMD's budget are tested elsewhere (test_reliability, test_wmd).
PATIENT = {"RERANKER_DEADLINE_MS": "120000", "RERANKER_WMD_BUDGET_MS": "120000"}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Iterator[tuple[Path, FlaskClient]]:
    """A data dir with the sample corpus, each paper given a `year` (from its ACL id) to
    filter on, plus two identical texts (group "copies") on which every ranker ties; and
    the real Flask app over it."""
    data_dir = tmp_path_factory.mktemp("parity") / "data"
    data_dir.mkdir()
    papers = [json.loads(line) for line in (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    for paper in papers:
        year = re.match(r"[A-Z](\d\d)-", paper["id"])
        paper["year"] = 2000 + int(year[1]) if year else 1999
    copy = "statistical machine translation with word alignment and a beam search decoder " * 3
    papers += [{"id": f"copy-{n}", "text": copy, "group": "copies", "year": 1990} for n in range(2)]
    corpus = write_jsonl(tmp_path_factory.mktemp("parity-corpus") / "corpus.jsonl", papers)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in PATIENT.items():
            patch.setenv(name, value)  # for the in-process CLI, which reads os.environ
        code, out = run(data_dir, "index", str(corpus), "--no-progress")
        assert code == 0, out
        # A small Doc2Vec model, so that its rankers are compared on answers, not refusals
        # (its query vectors are the same in every process: reranker/doc2vec.py).
        code, out = run(data_dir, "train", "doc2vec", str(corpus), "--dim", "16", "--epochs", "5", "--no-progress")
        assert code == 0, out
        app = create_app(Settings.from_env(settings_env(data_dir, **PATIENT)))
        try:
            yield data_dir, app.test_client()
        finally:
            app.extensions["reranker"].close()


def _cli(data_dir: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, the one-line error on stderr) of an in-process `reranker` run."""
    capsys.readouterr()
    code, out = run(data_dir, *argv)
    return code, out, capsys.readouterr().err


def _substance(message: str) -> str:
    """An error's words without its frame: the CLI's "reranker: error: --option: " prefix,
    the service's "[field] " one, and the option's spelling (--fusion-weight, fusion_weight)."""
    message = message.strip().removeprefix("reranker: error: ")
    message = re.sub(r"^(\[[\w.]+\]|--[\w-]+:) ", "", message)
    return message.replace("--fusion-weight", "fusion_weight")


def _without_timings(body: dict[str, Any]) -> dict[str, Any]:
    assert set(body["timings_ms"]) == {"retrieve", "rerank"}  # both say how long, in the same terms
    return {key: value for key, value in body.items() if key != "timings_ms"}


# (case id, CLI options after the query, the same question as a /search body, the query)
SEARCHES: list[tuple[str, list[str], dict[str, Any], str]] = [
    *[
        (f"{name}{'-explain' if explain else ''}", ["--ranker", name, *(["--explain"] if explain else [])],
         {"ranker": name, "explain": explain}, QUERY)
        for name in ranker_names()
        for explain in (False, True)
    ],
    ("default-ranker", [], {}, QUERY),
    ("only-unknown-words", ["--explain"], {"explain": True}, UNKNOWN),
    ("only-unknown-words-bm25", ["--ranker", "bm25"], {"ranker": "bm25"}, UNKNOWN),
    ("out-of-vocabulary-but-found", ["--explain"], {"explain": True}, RUN_TOGETHER),
    ("out-of-vocabulary-but-found-wmd", ["--ranker", "wmd"], {"ranker": "wmd"}, RUN_TOGETHER),
    ("out-of-vocabulary-but-found-bm25", ["--ranker", "bm25"], {"ranker": "bm25"}, RUN_TOGETHER),
    ("some-unknown-words", ["--explain"], {"explain": True}, f"{QUERY} {UNKNOWN} {RUN_TOGETHER}"),
    ("window-smaller-than-size", ["--window", "3", "--size", "5"], {"window": 3, "size": 5}, QUERY),
    ("window-smaller-than-size-explain", ["--window", "2", "--size", "4", "--explain", "--ranker", "hidden_topics"],
     {"window": 2, "size": 4, "explain": True, "ranker": "hidden_topics"}, QUERY),
    ("size-1", ["--size", "1", "--explain"], {"size": 1, "explain": True}, QUERY),
    # Beyond the window's limit: refused, not cut to it with fewer hits than asked.
    ("size-over-the-limit", ["--size", "1001"], {"size": 1001}, QUERY),
    ("small-window", ["--window", "7"], {"window": 7}, QUERY),
    ("filter-range", ["--filter", "year>=2005", "--explain"],
     {"filters": [{"field": "year", "op": "gte", "value": 2005}], "explain": True}, QUERY),
    ("filter-two", ["--filter", "year>2001", "--filter", "year<=2008", "--ranker", "wmd+bm25"],
     {"filters": [{"field": "year", "op": "gt", "value": 2001}, {"field": "year", "op": "lte", "value": 2008}], "ranker": "wmd+bm25"}, QUERY),
    ("filter-equal", ["--filter", "year=2003"], {"filters": [{"field": "year", "value": 2003}]}, QUERY),
    ("filter-matching-nothing", ["--filter", "year>2100"], {"filters": [{"field": "year", "op": "gt", "value": 2100}]}, QUERY),
    ("filter-unknown-field", ["--filter", "venue=ACL"], {"filters": [{"field": "venue", "value": "ACL"}]}, QUERY),
    ("filter-not-a-number", ["--filter", "year>=abc"], {"filters": [{"field": "year", "op": "gte", "value": "abc"}]}, QUERY),
    ("fusion-weight", ["--ranker", "hidden_topics_corrected+bm25", "--fusion-weight", "0.8", "--explain"],
     {"ranker": "hidden_topics_corrected+bm25", "fusion_weight": 0.8, "explain": True}, QUERY),
    ("fusion-weight-maxp", ["--ranker", "wmd+bm25:maxp", "--fusion-weight", "0"], {"ranker": "wmd+bm25:maxp", "fusion_weight": 0}, QUERY),
    ("fusion-weight-default-ranker", ["--fusion-weight", "1", "--explain"], {"fusion_weight": 1, "explain": True}, QUERY),
    ("fusion-weight-for-a-ranker-without-one", ["--ranker", "bm25", "--fusion-weight", "0.5"], {"ranker": "bm25", "fusion_weight": 0.5}, QUERY),
    ("fusion-weight-for-rrf", ["--ranker", "hidden_topics+bm25:rrf", "--fusion-weight", "0.5"],
     {"ranker": "hidden_topics+bm25:rrf", "fusion_weight": 0.5}, QUERY),
    ("tied", ["--filter", "group=copies", "--explain"], {"filters": [{"field": "group", "value": "copies"}], "explain": True}, "statistical machine translation"),
    ("tied-bm25", ["--filter", "group=copies", "--ranker", "bm25"], {"filters": [{"field": "group", "value": "copies"}], "ranker": "bm25"}, "statistical machine translation"),
]


@pytest.mark.parametrize(("options", "request_body", "query"), [case[1:] for case in SEARCHES], ids=[case[0] for case in SEARCHES])
def test_search_json_is_the_answer_of_post_search(
    both: tuple[Path, FlaskClient], capsys: pytest.CaptureFixture[str], options: list[str], request_body: dict[str, Any], query: str
) -> None:
    """Field by field. The CLI has no `from`, `snippets` or `client_id`, on purpose: it prints
    one page from the top for a person, and never takes part in an online experiment (those
    interleave only searches that name no ranker, of the service's traffic)."""
    data_dir, client = both
    code, out, err = _cli(data_dir, capsys, "search", query, "--json", *options)
    answer = client.post("/search", json={"query": query, **request_body})
    served = answer.get_json()
    if answer.status_code != 200:
        assert 400 <= answer.status_code < 500, served
        assert code != 0 and out == "", out
        assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
        assert _substance(err) == _substance(served["error"]["reason"])
        return
    assert code == 0, err
    printed = json.loads(out)
    assert _without_timings(printed) == _without_timings(served)
    # The matrix reaches what it means to: every status the sample can give, explanations.
    if "explain" in options and get_ranker(printed["ranker"]).variant is not None and printed["status"] != "query_out_of_vocabulary":
        assert printed["hits"] and all("explanation" in hit for hit in printed["hits"])


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_query_read_from_stdin_is_the_text_without_its_final_line_break(
    both: tuple[Path, FlaskClient], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """`reranker search - --json < abstract.txt` echoed the file's final newline in "query"
    (and searched with it); POST /search with the abstract's text echoes it as sent. A line
    break inside the text, or a blank line before the last one, is the text's own."""
    data_dir, client = both
    for text in (QUERY, f"{QUERY}\nsecond line{ending}"):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(f"{text}{ending}".encode()), encoding="utf-8"))
        code, out, err = _cli(data_dir, capsys, "search", "-", "--json", "--size", "3")
        assert code == 0, err
        printed = json.loads(out)
        assert printed["query"] == text
        served = client.post("/search", json={"query": text, "size": 3}).get_json()
        assert _without_timings(printed) == _without_timings(served)


@pytest.mark.parametrize("ranker", ["wmd", "wmd+bm25"])
def test_a_partial_wmd_answer_is_the_same_on_both_sides(
    both: tuple[Path, FlaskClient], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, ranker: str
) -> None:
    """`partial`: WMD's budget of 0 ms runs out before its first exact distance, so both
    sides order every candidate by its lower bound (deterministic), and say so alike."""
    data_dir, _ = both
    out_of_time = {**PATIENT, "RERANKER_WMD_BUDGET_MS": "0"}
    for name, value in out_of_time.items():
        monkeypatch.setenv(name, value)
    code, out, err = _cli(data_dir, capsys, "search", QUERY, "--json", "--ranker", ranker, "--explain")
    app = create_app(Settings.from_env(settings_env(data_dir, **out_of_time)))
    try:
        served = app.test_client().post("/search", json={"query": QUERY, "ranker": ranker, "explain": True}).get_json()
    finally:
        app.extensions["reranker"].close()
    assert code == 0, err
    printed = json.loads(out)
    assert printed["status"] == "partial" and "The WMD time budget of 0 ms ran out: 0 of" in printed["reason"]
    assert _without_timings(printed) == _without_timings(served)


def test_the_matrix_reaches_every_status_the_sample_can_give(both: tuple[Path, FlaskClient]) -> None:
    """A guard on the cases above: they would compare little if every answer were "ok"."""
    _, client = both
    seen: dict[str, list[Any]] = {}
    for _, _, body, query in SEARCHES:
        answer = client.post("/search", json={"query": query, **body})
        if answer.status_code == 200:
            served = answer.get_json()
            seen.setdefault(served["status"], []).append(served)
    # "partial" needs WMD out of time (the test above); "degraded" is the service's deadline,
    # which the CLI has not: it waits for its ranker.
    assert set(seen) == {"ok", "query_out_of_vocabulary", "tied"}
    assert any(served["hits"] for served in seen["query_out_of_vocabulary"]) and seen["tied"][0]["reason"]


# (case id, CLI options, the /similar query string, the document)
SIMILAR: list[tuple[str, list[str], str, str]] = [
    ("default", [], "", "P01-1027"),
    ("bm25-size-3", ["--ranker", "bm25", "--size", "3"], "?ranker=bm25&size=3", "P01-1027"),
    ("hidden_topics-size-1", ["--ranker", "hidden_topics", "--size", "1"], "?ranker=hidden_topics&size=1", "W03-0423"),
    ("wmd", ["--ranker", "wmd", "--size", "5"], "?ranker=wmd&size=5", "C00-2123"),
    ("rrf-all", ["--ranker", "hidden_topics_corrected+bm25:rrf", "--size", "30"], "?ranker=hidden_topics_corrected%2Bbm25:rrf&size=30", "W06-0119"),
    ("a-copy", ["--ranker", "hidden_topics_corrected"], "?ranker=hidden_topics_corrected", "copy-0"),
    ("unknown-id", [], "", "nope"),
    ("unknown-ranker", ["--ranker", "bm26"], "?ranker=bm26", "P01-1027"),
    ("doc2vec", ["--ranker", "doc2vec", "--size", "5"], "?ranker=doc2vec&size=5", "P01-1027"),
    ("doc2vec-fused", ["--ranker", "doc2vec+bm25"], "?ranker=doc2vec%2Bbm25", "W03-0423"),
]


@pytest.mark.parametrize(("options", "query_string", "doc_id"), [case[1:] for case in SIMILAR], ids=[case[0] for case in SIMILAR])
def test_similar_json_is_the_answer_of_get_similar(
    both: tuple[Path, FlaskClient], capsys: pytest.CaptureFixture[str], options: list[str], query_string: str, doc_id: str
) -> None:
    data_dir, client = both
    code, out, err = _cli(data_dir, capsys, "similar", doc_id, "--json", *options)
    answer = client.get(f"/documents/{doc_id}/similar{query_string}")
    served = answer.get_json()
    if answer.status_code != 200:
        assert 400 <= answer.status_code < 500, served
        assert code != 0 and out == "", out
        assert len(err.strip().splitlines()) == 1, err
        reason = served["error"]["reason"]
        if "unknown-ranker" in query_string or "bm26" in query_string:
            # The service checks a query parameter against its declared values (the
            # ranker names, in /openapi.json); both name the wrong one and list the right ones.
            assert "bm26" in err and "bm26" in reason and "hidden_topics" in err and "hidden_topics" in reason
        else:
            assert _substance(err) == _substance(reason)
        return
    assert code == 0, err
    printed = json.loads(out)
    assert printed == served
    assert printed["hits"] and doc_id not in {hit["id"] for hit in printed["hits"]}
    assert all(hit["snippet"] for hit in printed["hits"])


def test_similar_takes_a_window_and_a_weight_on_the_command_line_only(
    both: tuple[Path, FlaskClient], capsys: pytest.CaptureFixture[str]
) -> None:
    """An intended difference: `reranker similar` takes --window and --fusion-weight (they
    override RERANKER_WINDOW and RERANKER_FUSION_WEIGHT for one run, as for every command
    that ranks), while the service's /similar reads them from its settings only, and refuses
    a query parameter it does not declare."""
    data_dir, client = both
    code, out, err = _cli(data_dir, capsys, "similar", "P01-1027", "--json", "--ranker", "bm25", "--window", "4", "--size", "2")
    assert code == 0, err
    assert [hit["bm25_rank"] for hit in json.loads(out)["hits"]] == [1, 2]
    assert client.get("/documents/P01-1027/similar?ranker=bm25&window=4").status_code == 400
    assert client.get("/documents/P01-1027/similar?fusion_weight=0.5").status_code == 400


def test_a_ranker_without_its_model_is_refused_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str], glove: object) -> None:
    """Before `reranker train doc2vec`, both sides refuse the Doc2Vec rankers with the same words."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    assert run(data_dir, "index", str(write_jsonl(tmp_path / "tiny.jsonl", TINY_CORPUS)), "--no-progress")[0] == 0
    app = create_app(Settings.from_env(settings_env(data_dir)))
    try:
        for ranker in ("doc2vec", "doc2vec+bm25"):
            code, out, err = _cli(data_dir, capsys, "search", "sailing ships", "--json", "--ranker", ranker)
            answer = app.test_client().post("/search", json={"query": "sailing ships", "ranker": ranker})
            assert 400 <= answer.status_code < 500 and code != 0 and out == ""
            assert "no Doc2Vec model was trained" in err
            assert _substance(err) == _substance(answer.get_json()["error"]["reason"])
    finally:
        app.extensions["reranker"].close()
