"""The `reranker` command, run in-process on the bundled sample and real GloVe vectors."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest
from conftest import (
    REPO,
    SAMPLE,
    TINY_CORPUS,
    ClusterProxy,
    Service,
    SharedEvaluation,
    http_json,
    run,
    settings_env,
    stalled_request,
    write_jsonl,
)

from reranker.config import DEFAULT_RANKER, Settings
from reranker.evaluation import metric_names
from reranker.rankers import ranker_names

if TYPE_CHECKING:
    from reranker.embeddings import WordVectors


def test_demo_shows_both_orders_with_explanations(data_dir: Path) -> None:
    code, out = run(data_dir, "demo", "--queries", "2")
    assert code == 0
    assert "25 CL-SciSumm papers" in out and "25 indexed now" in out
    assert out.count("BM25 order") == 2 and out.count("hidden_topics_corrected+bm25:maxp order") == 2
    assert "topic " in out and "- background" in out and "query words:" in out
    # What the demo says is true: the score is its parts, the topic score the sum of the
    # topics shown and the rest (to the printed digits), not of a few topics alone.
    assert "is the sum of these" not in out
    for block in out.split("is first:\n")[1:]:
        lines = block.splitlines()
        parts = re.match(r"\s+score ([0-9.]+) = topics ([0-9.]+) \+ bm25 ([0-9.]+) \+ passages ([0-9.]+) ", lines[0])
        assert parts is not None and float(parts[1]) == pytest.approx(sum(float(parts[i]) for i in (2, 3, 4)), abs=3e-4)
        total = re.match(r"\s+hidden_topics_corrected score (-?[0-9.]+) = the sum of its 15 corrected topics' contributions", lines[1])
        assert total is not None and "the other 10 topics together" in lines[7]
        shown = [float(re.findall(r"-> ([+-][0-9.]+)", line)[0]) for line in lines[2:8]]
        assert sum(shown) == pytest.approx(float(total[1]), abs=4e-5)
    assert "| hidden_topics |" in out and "| bm25 |" in out and "| hidden_topics_corrected+bm25:maxp |" in out
    code, again = run(data_dir, "demo", "--queries", "100")
    assert code == 0 and "0 indexed now, 25 already there" in again
    assert again.count("BM25 order") == 5 and "(--queries 100: the sample has 5, all shown above.)" in again


def test_index_then_search(data_dir: Path) -> None:
    code, out = run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--k", "10", "--no-progress")
    assert code == 0 and "indexed 25, unchanged 0, skipped 0" in out
    query = "A maximum entropy named entity recognizer that uses global features from the whole document."
    code, out = run(data_dir, "search", query, "--size", "4", "--explain")
    assert code == 0
    assert [line for line in out.splitlines() if line != line.rstrip()] == []  # the sample's titles are empty
    assert out.startswith("hidden_topics_corrected+bm25:maxp: 4 of the 25 BM25 candidates (the window of 100 held all that matched)")  # the default ranker
    assert out.count("topics' contributions") == 4 and out.count("other 5 topics together") == 4  # K = 10
    code, out = run(data_dir, "search", query, "--json", "--ranker", "hidden_topics_code", "--window", "20", "--explain")
    body = json.loads(out)
    assert body["ranker"] == "hidden_topics_code" and body["window"] == 20 and body["status"] == "ok"
    assert len(body["hits"]) == 10
    hit = body["hits"][0]
    explanation = hit["explanation"]
    shown = sum(t["contribution"] for t in explanation["topics"])
    assert shown + explanation["rest"]["contribution"] == pytest.approx(hit["score"], abs=1e-9)
    # One JSON shape for a hit: the CLI's --json and POST /search say the same things the same way.
    from reranker.config import Settings
    from reranker.service import create_app

    app = create_app(Settings.from_env(settings_env(data_dir)))
    served = app.test_client().post("/search", json={"query": query, "ranker": "hidden_topics_code", "window": 20, "explain": True}).get_json()
    app.extensions["reranker"].close()
    assert [h["id"] for h in served["hits"]] == [h["id"] for h in body["hits"]]
    assert set(served["hits"][0]) == set(hit) and served["hits"][0]["explanation"] == explanation
    assert set(body) <= set(served) | {"reason"}
    plain = json.loads(run(data_dir, "search", query, "--json")[1])
    assert "explanation" not in plain["hits"][0]  # only when asked for, as over HTTP


def test_the_search_header_counts_the_candidates_as_search_does(data_dir: Path) -> None:
    """On the 25-document sample the header said "3 of the BM25 top 100" where /search
    answers `candidates: 25`: the window, not what it held. It says what it held, and names
    the window when that was larger."""
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    for query, window, said in [
        ("named entity", None, "3 of the 14 BM25 candidates (the window of 100 held all that matched)"),
        ("named entity", "5", "3 of the BM25 top 5"),
        ("named entity", "14", "3 of the BM25 top 14"),
        ("zorblaxian", None, "0 of the 0 BM25 candidates (no document matched)"),
    ]:
        options = ["--size", "3", *(["--window", window] if window else [])]
        body = json.loads(run(data_dir, "search", query, *options, "--json")[1])
        assert body["candidates"] == int(said.split()[3] if "candidates" in said else said.split()[-1])
        header = run(data_dir, "search", query, *options)[1].splitlines()[0]
        assert header.startswith(f"{body['ranker']}: {said}, "), header
    # One word is one word (the header said "1 query words").
    assert ", 1 query word in vocabulary, 0 not" in run(data_dir, "search", "parsing", "--size", "1")[1].splitlines()[0]


def test_a_size_beyond_the_window_shows_the_rest_in_bm25_order(data_dir: Path) -> None:
    """As /search pages: the top --window reranked, the hits past it after them in BM25
    order, unscored, and the header says which is which (the window was widened to the
    size, so that --size and /search's paging reranked different windows)."""
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    code, out = run(data_dir, "search", "named entity", "--window", "3", "--size", "5")
    header, *lines = out.splitlines()
    assert code == 0 and header.startswith("hidden_topics_corrected+bm25:maxp: 3 of the BM25 top 3, then 2 hits past it in BM25 order, "), header
    assert len(lines) == 5 and all("score " in line for line in lines[:3])
    assert [line.split("(rank ")[1].split(",")[0] for line in lines[3:]] == ["4", "5"]
    assert all("not scored: past the reranked window" in line for line in lines[3:])
    body = json.loads(run(data_dir, "search", "named entity", "--window", "3", "--size", "5", "--json")[1])
    assert (body["window"], body["candidates"]) == (3, 3) and [h["score"] for h in body["hits"][3:]] == [None, None]


def test_explain_with_a_ranker_without_topics_says_there_is_nothing_to_explain(data_dir: Path) -> None:
    """--explain with bm25, wmd or a fusion of rankers without topics printed the hits and
    not a word of why nothing explained them; one line says it, in the web page's words."""
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    query = "a maximum entropy named entity recognizer using global features"
    for ranker in ("bm25", "wmd", "wmd+bm25:rrf"):
        code, out = run(data_dir, "search", query, "--explain", "--ranker", ranker, "--size", "3")
        header, said, *hits = out.splitlines()
        assert code == 0 and header.startswith(f"{ranker}: 3 of the ") and len(hits) == 3, out
        assert said.startswith(f"{ranker} does not score by topics: no explanations (the rankers that do: hidden_topics, "), said
        assert "every fusion with one of them" in said and out.count("does not score by topics") == 1
        # Without --explain, or with a ranker that has topics to show, no such line.
        assert "does not score by topics" not in run(data_dir, "search", query, "--ranker", ranker)[1]
    explained = run(data_dir, "search", query, "--explain", "--ranker", "hidden_topics_corrected+wmd+bm25", "--size", "1")[1]
    assert "does not score by topics" not in explained and "topics' contributions" in explained


def test_a_search_whose_candidates_all_tie_says_so_as_the_service_does(data_dir: Path, tmp_path: Path) -> None:
    """Identical texts under different ids: every ranker gives them one score, so the
    order is BM25's. /search said "tied"; the CLI said "ok", passing it off as a ranking."""
    text = "statistical machine translation with word alignment and a beam search decoder " * 3
    corpus = write_jsonl(tmp_path / "same.jsonl", [{"id": f"copy-{n}", "text": text} for n in range(4)])
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    query = "statistical machine translation"
    body = json.loads(run(data_dir, "search", query, "--json")[1])
    from reranker.service import create_app

    app = create_app(Settings.from_env(settings_env(data_dir)))
    served = app.test_client().post("/search", json={"query": query}).get_json()
    app.extensions["reranker"].close()
    assert served["status"] == "tied" and len({h["score"] for h in served["hits"]}) == 1
    assert (body["status"], body["reason"]) == (served["status"], served["reason"])
    assert [h["id"] for h in body["hits"]] == [h["id"] for h in served["hits"]]
    header = run(data_dir, "search", query)[1].splitlines()[0]
    assert header.endswith("[tied: BM25 order kept]"), header


def test_an_out_of_vocabulary_search_says_what_orders_it(data_dir: Path, tmp_path: Path) -> None:
    """The line said "[query_out_of_vocabulary: BM25 order kept]" while the scores beside it
    were the fusion's, topics included, and did not follow the order."""
    corpus = write_jsonl(tmp_path / "odd.jsonl", [
        {"id": "twice", "text": "zorblaxian zorblaxian machines and ships"},
        {"id": "once", "text": "zorblaxian bread and ovens in a long text about bread"},
    ])
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    header, *hits = run(data_dir, "search", "zorblaxian")[1].splitlines()
    assert header.endswith(
        "[query_out_of_vocabulary: no query word has a word vector; its word-vector parts add 0 and the rest of the fusion orders the hits]"
    ), header
    scores = [float(line.split("score ")[1].split()[0]) for line in hits if " score " in line]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True), hits
    # Its explanation says the topics added nothing, as the web page says it, and lists none.
    explained = run(data_dir, "search", "zorblaxian", "--explain")[1]
    assert explained.count("the hidden topics add nothing to this score") == 2, explained
    assert "topic 1:" not in explained and "topics' contributions" not in explained, explained
    # A query of stop words, numbers and single letters has no word lacking a vector: the
    # reason says what it has, and nothing of an order of hits it has none of (it said "the
    # rest of the fusion orders the hits" of 0 candidates).
    lacks = "the query has no words to search (stop words, numbers and single letters are left out)"
    header = run(data_dir, "search", "the of and")[1].splitlines()[0]
    assert header.endswith(f"[query_out_of_vocabulary: {lacks}]"), header
    body = json.loads(run(data_dir, "search", "the 2018 a", "--ranker", "hidden_topics", "--json")[1])
    assert (body["status"], body["reason"], body["hits"]) == ("query_out_of_vocabulary", lacks, [])


def test_compact_merges_the_index_runs_segments_and_every_search_stays(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()
    for half, part in enumerate((lines[:12], lines[12:])):  # two runs: a segment each
        (tmp_path / f"part{half}.jsonl").write_text("\n".join(part) + "\n")
        assert run(data_dir, "index", str(tmp_path / f"part{half}.jsonl"), "--no-progress")[0] == 0
    query = ["search", "statistical machine translation with phrase tables", "--json", "--size", "25"]
    before = json.loads(run(data_dir, *query)[1])["hits"]
    code, out = run(data_dir, "compact", "--no-progress")
    assert code == 0 and re.fullmatch(r"compacted the BM25 index of 25 documents in \d+ s: 2 segments before, 1 now\n", out), out
    after = json.loads(run(data_dir, *query)[1])["hits"]
    assert [(hit["id"], hit["bm25_score"], hit["score"]) for hit in after] == [(hit["id"], hit["bm25_score"], hit["score"]) for hit in before]
    assert len(after) > 10
    assert run(data_dir, "--data-dir", str(tmp_path / "none"), "compact")[0] == 1
    assert "nothing to compact" in capsys.readouterr().err


def test_compact_interrupted_says_so_and_leaves_the_index_as_it_was(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reranker.store.embedded import EmbeddedStore
    from reranker.store.text_index import TextIndex

    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()
    for half, part in enumerate((lines[:12], lines[12:])):
        (tmp_path / f"part{half}.jsonl").write_text("\n".join(part) + "\n")
        assert run(data_dir, "index", str(tmp_path / f"part{half}.jsonl"), "--no-progress")[0] == 0
    query = ["search", "statistical machine translation with phrase tables", "--json", "--size", "25"]
    before = json.loads(run(data_dir, *query)[1])["hits"]
    words = EmbeddedStore._words
    calls = 0

    def ctrl_c_at_the_fifth(self: EmbeddedStore, document: Any) -> tuple[str, str]:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt  # as Ctrl-C would arrive, mid-way through the rows
        return words(self, document)

    monkeypatch.setattr(EmbeddedStore, "_words", ctrl_c_at_the_fifth)
    capsys.readouterr()
    assert run(data_dir, "compact", "--no-progress")[0] == 130
    assert capsys.readouterr().err == "reranker: interrupted (the index is as it was)\n"
    monkeypatch.undo()
    assert TextIndex(data_dir / "index" / "text").segments() == 2
    assert json.loads(run(data_dir, *query)[1])["hits"] == before


def test_index_suggests_compact_from_its_size_and_compacts_with_the_option(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reranker.cli import indexing
    from reranker.store.embedded import EmbeddedStore
    from reranker.store.text_index import TextIndex

    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()
    parts = []
    for half, part in enumerate((lines[:12], lines[12:])):
        parts.append(tmp_path / f"part{half}.jsonl")
        parts[-1].write_text("\n".join(part) + "\n")
    code, out = run(data_dir, "index", str(parts[0]), "--no-progress")
    assert code == 0 and out.count("\n") == 1, out  # one segment, and too few documents to matter
    monkeypatch.setattr(indexing, "COMPACT_HINT_DOCUMENTS", 25)
    code, out = run(data_dir, "index", str(parts[1]), "--no-progress")
    assert code == 0 and out.splitlines()[1].startswith("the BM25 index is in 2 segments, each searched on its own: "), out
    assert "`reranker compact` merges them into one" in out
    monkeypatch.setattr(indexing, "COMPACT_HINT_DOCUMENTS", 26)
    assert run(data_dir, "index", str(parts[1]), "--no-progress")[1].count("\n") == 1  # below the size: no word of it

    words, calls = EmbeddedStore._words, 0

    def ctrl_c_at_the_fifth(self: EmbeddedStore, document: Any) -> tuple[str, str]:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt
        return words(self, document)

    with monkeypatch.context() as patched:
        patched.setattr(EmbeddedStore, "_words", ctrl_c_at_the_fifth)
        capsys.readouterr()
        assert run(data_dir, "index", str(parts[1]), "--compact", "--no-progress")[0] == 130
        assert capsys.readouterr().err == "reranker: interrupted (every document is indexed; the index is as it was)\n"
    assert TextIndex(data_dir / "index" / "text").segments() == 2
    code, out = run(data_dir, "index", str(parts[1]), "--compact", "--no-progress")
    assert code == 0 and out.startswith("indexed 0, unchanged 13, skipped 0 "), out
    assert re.fullmatch(r"compacted the BM25 index of 25 documents in \d+ s: 2 segments before, 1 now", out.splitlines()[1]), out
    assert TextIndex(data_dir / "index" / "text").segments() == 1
    code, out = run(data_dir, "index", str(parts[1]), "--compact", "--no-progress")  # as a nightly job would
    assert code == 0 and out.splitlines()[1] == "the BM25 index is one segment already, and this run wrote nothing: nothing to compact"


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "an index from before stop lists were recorded"])
def test_other_stop_words_are_refused_and_the_index_stays(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], recorded: bool
) -> None:
    """The text index holds the content words an index run read with its stop list; run
    without the index runs' --stopwords, index, search and compact would read with another
    (here one where `translation`, which the runs left out, counts in every length). The
    index records its list: each refuses in one line, naming the option, and leaves the
    index. An index that recorded none is searched and indexed into as before, and compact
    finds the difference row by row; `index --rebuild` with the new list records it."""
    stopwords = tmp_path / "stopwords.txt"
    stopwords.write_text((REPO / "reranker" / "stopwords.txt").read_text() + "\ntranslation\n")
    own = ["--stopwords", str(stopwords)]
    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()
    for half, part in enumerate((lines[:12], lines[12:])):
        (tmp_path / f"part{half}.jsonl").write_text("\n".join(part) + "\n")
        assert run(data_dir, *own, "index", str(tmp_path / f"part{half}.jsonl"), "--no-progress")[0] == 0
    if not recorded:
        with sqlite3.connect(data_dir / "index" / "store.sqlite3") as db:
            db.execute("DELETE FROM meta WHERE key = 'stopwords'")
    query = ["search", "statistical machine translation with phrase tables", "--json", "--size", "25"]
    before = [(hit["id"], hit["bm25_score"]) for hit in json.loads(run(data_dir, *own, *query)[1])["hits"]]
    store_file = data_dir / "index" / "store.sqlite3"
    rows = sqlite3.connect(store_file).execute("SELECT count(*), max(rowid) FROM docs").fetchone()
    capsys.readouterr()
    refusals = [["compact", "--no-progress"]] + ([["index", str(tmp_path / "part0.jsonl"), "--no-progress"], query] if recorded else [])
    for command in refusals:
        assert run(data_dir, *command)[0] == 1, command
        errors = capsys.readouterr().err
        assert errors.startswith("reranker: error: ") and errors.count("\n") == 1, errors
        if recorded:
            assert f"built with the stop list in {stopwords} (sha256 " in errors and "not the bundled stop list" in errors, errors
            assert "(--stopwords, RERANKER_STOPWORDS) or rebuild the index (reranker index --rebuild)" in errors, errors
        else:
            assert "other stop words" in errors and "--stopwords" in errors, errors
        assert [(hit["id"], hit["bm25_score"]) for hit in json.loads(run(data_dir, *own, *query)[1])["hits"]] == before
        assert sqlite3.connect(store_file).execute("SELECT count(*), max(rowid) FROM docs").fetchone() == rows
    code, out = run(data_dir, *own, "compact", "--no-progress")
    assert code == 0 and out.endswith("2 segments before, 1 now\n"), out
    assert [(hit["id"], hit["bm25_score"]) for hit in json.loads(run(data_dir, *own, *query)[1])["hits"]] == before
    if recorded:
        assert run(data_dir, "index", "--rebuild", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
        assert run(data_dir, *query)[0] == 0
        assert run(data_dir, *own, *query)[0] == 1  # the rebuild recorded the bundled list


def test_a_title_with_a_line_break_keeps_its_hit_on_one_line(data_dir: Path, tmp_path: Path) -> None:
    """Titles cut from PDFs hold line breaks and tabs; printed raw they split a hit's line."""
    text = "statistical machine translation with word alignment and a beam search decoder"
    corpus = write_jsonl(tmp_path / "titles.jsonl", [
        {"id": "broken", "title": "Word Alignment\nfor Statistical\tMT", "text": text},
        {"id": "plain", "title": "Beam Search", "text": text + " beam"},
    ])
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    code, out = run(data_dir, "search", "word alignment beam search", "--ranker", "bm25")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3, out  # the header and one line per hit
    assert any(line.endswith("  Word Alignment\\nfor Statistical\\tMT") for line in lines), out
    # --json keeps the title as it is.
    body = json.loads(run(data_dir, "search", "word alignment beam search", "--ranker", "bm25", "--json")[1])
    assert "Word Alignment\nfor Statistical\tMT" in {hit["title"] for hit in body["hits"]}


def test_similar_papers_on_the_command_line_are_the_services(data_dir: Path) -> None:
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    code, out = run(data_dir, "similar", "P01-1027", "--size", "3")
    assert [line for line in out.splitlines() if line != line.rstrip()] == []
    assert code == 0 and out.startswith("hidden_topics_corrected+bm25:maxp: 3 papers like P01-1027")  # the default ranker
    assert run(data_dir, "similar", "P01-1027", "--size", "1")[1].startswith("hidden_topics_corrected+bm25:maxp: 1 paper like P01-1027 ")
    # A size beyond the window does not widen it (the hits past it would keep their BM25
    # order; the sample's 24 other papers all fit in it), and the header says what it held.
    held = " like P01-1027 of the 24 BM25 candidates (the window of 100 held all that matched) for its distinctive words\n"
    assert held in run(data_dir, "similar", "P01-1027", "--size", "120")[1]
    assert run(data_dir, "similar", "P01-1027", "--size", "1001")[0] == 2  # beyond RERANKER_MAX_WINDOW, as `search --size`
    body = json.loads(run(data_dir, "similar", "P01-1027", "--json", "--ranker", "bm25")[1])
    assert body["ranker"] == "bm25" and len(body["hits"]) == 10 and "P01-1027" not in {h["id"] for h in body["hits"]}
    assert [h["bm25_rank"] for h in body["hits"]] == list(range(1, 11))
    from reranker.config import Settings
    from reranker.service import create_app

    app = create_app(Settings.from_env(settings_env(data_dir)))
    served = app.test_client().get("/documents/P01-1027/similar?ranker=bm25").get_json()
    app.extensions["reranker"].close()
    assert [h["id"] for h in served["hits"]] == [h["id"] for h in body["hits"]]
    assert run(data_dir, "similar", "nope")[0] == 1


def test_the_similar_header_counts_the_candidates_as_search_does(data_dir: Path, tmp_path: Path) -> None:
    """On an index smaller than the window the header said "of the BM25 top 100" whatever
    the window held; it counts the candidates as `reranker search`'s header does, and the
    papers past the window apart."""
    ship_log = {"id": "log", "title": "A ship's log", "text": "The sailors' log of the vessel: wind, sails, storms and harbours on the ocean voyage."}
    harbour = {"id": "harbour", "title": "Harbours", "text": "Ships in the harbour: sailors furl the sails after a voyage across the ocean."}
    assert run(data_dir, "index", str(write_jsonl(tmp_path / "tiny.jsonl", [*TINY_CORPUS, ship_log, harbour])), "--no-progress")[0] == 0
    for doc_id, window, said in [
        ("ships", None, "2 papers like ships of the 2 BM25 candidates (the window of 100 held all that matched) for its distinctive words"),
        ("ships", "1", "1 paper like ships of the BM25 top 1 for its distinctive words, then 1 paper past it in BM25 order"),
        ("chess", None, "0 papers like chess of the 0 BM25 candidates (no document matched) for its distinctive words"),
    ]:
        options = ["--window", window] if window else []
        hits = json.loads(run(data_dir, "similar", doc_id, *options, "--json")[1])["hits"]
        assert sum(hit["score"] is not None for hit in hits) == int(said.split()[0]), "the header counts what the window held"
        code, out = run(data_dir, "similar", doc_id, *options)
        assert code == 0 and out.splitlines()[0] == f"{DEFAULT_RANKER}: {said}", out


def test_evaluate_json_has_the_documented_shape(data_dir: Path) -> None:
    code, out = run(data_dir, "evaluate", str(SAMPLE), "--json", "--rankers", "bm25,hidden_topics", "--window", "50")
    assert code == 0
    body = json.loads(out)
    assert body["dataset"] == "sample" and body["queries"] == 5 and body["window"] == 50
    assert set(body["results"]) == {"bm25", "hidden_topics"}
    for metrics in body["results"].values():
        assert list(metrics) == metric_names(50)
        assert all(0.0 <= value <= 1.0 for value in metrics.values())
    assert body["results"]["bm25"]["recall@50"] == 1.0  # every sample paper is in the window
    assert 0.0 < body["p_values"]["bm25"]["hidden_topics"]["ndcg@10"] <= 1.0
    code, table = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25,hidden_topics+bm25:rrf", "--run-dir", str(data_dir / "runs"))
    assert code == 0 and "| bm25 |" in table
    runs = sorted(path.name for path in (data_dir / "runs").iterdir())
    assert runs == ["sample.bm25.run", "sample.hidden_topics+bm25_rrf.run"]
    lines = (data_dir / "runs" / "sample.bm25.run").read_text().splitlines()
    assert len(lines) == 5 * 25 and lines[0].split()[1:4:2] == ["Q0", "1"] and len({line.split()[0] for line in lines}) == 5


def test_evaluation_indexes_are_cached_per_vectors(data_dir: Path, tmp_path: Path) -> None:
    vectors = tmp_path / "w2v.kv"
    train = ["train", "word2vec", str(SAMPLE / "corpus.jsonl"), "--out", str(vectors), "--dim", "8", "--epochs", "1"]
    evaluate = ["--vectors", str(vectors), "evaluate", str(SAMPLE), "--json", "--rankers", "hidden_topics"]
    assert run(data_dir, *train)[0] == 0
    first = json.loads(run(data_dir, *evaluate)[1])
    assert run(data_dir, *train, "--dim", "12")[0] == 0  # retrained: new checksum, new index
    code, out = run(data_dir, *evaluate)
    assert code == 0 and json.loads(out)["config"]["dim"] == 12 and first["config"]["dim"] == 8
    assert len(list((data_dir / "eval").iterdir())) == 2
    code, out = run(data_dir, *evaluate, "--rebuild")
    assert code == 0 and json.loads(out)["results"] == json.loads(run(data_dir, *evaluate)[1])["results"]


def test_train_word2vec_then_use_the_vectors(data_dir: Path, tmp_path: Path) -> None:
    out_path = tmp_path / "sample.kv"
    code, out = run(data_dir, "train", "word2vec", str(SAMPLE / "corpus.jsonl"), "--out", str(out_path), "--dim", "16", "--epochs", "1")
    assert code == 0 and out_path.exists() and "CBOW" in out
    code, out = run(data_dir, "--vectors", str(out_path), "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    assert code == 0 and "indexed 25" in out
    # The index remembers its vectors: no --vectors needed from now on.
    code, out = run(data_dir, "search", "named entity recognition with global features", "--json")
    assert code == 0 and json.loads(out)["hits"]


# Each command that writes a file or folder after minutes of work, with that option.
OUTPUT_OPTIONS = [
    (["evaluate", str(SAMPLE)], "--markdown", "file"),
    (["evaluate", str(SAMPLE)], "--plot", "file"),
    (["evaluate", str(SAMPLE)], "--run-dir", "folder"),
    (["compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics"], "--markdown", "file"),
    (["compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics"], "--json-file", "file"),
    (["compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics"], "--plots", "folder"),
    (["compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics"], "--run-dir", "folder"),
    (["evaluate-similar", str(SAMPLE)], "--markdown", "file"),
    (["evaluate-similar", str(SAMPLE)], "--run-dir", "folder"),
    (["tune", str(SAMPLE), "--ranker", "hidden_topics_corrected+bm25"], "--write-config", "file"),
    # A corpus that does not exist: refusing the output must come before reading it.
    (["train", "word2vec", "no-such-corpus.jsonl"], "--out", "file"),
]


@pytest.mark.parametrize("problem", ["parent is a file", "wrong kind", "unwritable"])
@pytest.mark.parametrize(("command", "option", "kind"), OUTPUT_OPTIONS, ids=[f"{c[0]} {o}" for c, o, _ in OUTPUT_OPTIONS])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], option: str, kind: str, problem: str
) -> None:
    # These were checked only after the evaluation (or let /proc pass), so minutes of
    # indexing ended in an error.
    blocker = tmp_path / "a-file"
    blocker.write_text("kept\n", encoding="utf-8")
    path, expected = {
        "parent is a file": (blocker / "missing" / "out", f"{blocker} is not a folder"),
        "wrong kind": (blocker, "is a file; expected a folder") if kind == "folder" else (tmp_path, "is a folder; expected a file"),
        # Root may write anywhere by the permission bits, yet nothing can be created in /proc.
        "unwritable": (Path("/proc/reranker-out"), "cannot write there: No such file or directory"),
    }[problem]
    code, out = run(data_dir, *command, option, str(path))
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == f"reranker: error: {option} {path}: {expected}\n"
    assert list(data_dir.iterdir()) == []  # nothing indexed, trained or converted
    assert blocker.read_text(encoding="utf-8") == "kept\n"
    assert sorted(item.name for item in tmp_path.iterdir()) == ["a-file", "data"]  # no scratch file left


def test_an_existing_output_file_is_kept_when_another_output_is_refused(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check opens an existing file without truncating it; the run writes it only at the end."""
    table = tmp_path / "table.md"
    table.write_text("an earlier table\n", encoding="utf-8")
    code, _ = run(data_dir, "evaluate", str(SAMPLE), "--markdown", str(table), "--run-dir", str(table))
    assert code == 2 and "--run-dir" in capsys.readouterr().err
    assert table.read_text(encoding="utf-8") == "an earlier table\n"
    code, out = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25", "--markdown", str(table), "--no-progress")
    assert code == 0 and table.read_text(encoding="utf-8").startswith("sample, 5 queries")


def test_an_output_in_missing_folders_is_written_there_once_the_run_succeeds(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing parent folders are no reason to refuse an output: they are made at the end,
    and only when the run succeeded (a refused run leaves none behind)."""
    table = tmp_path / "new" / "deeper" / "table.md"
    code, _ = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25", "--markdown", str(table), "--run-dir", "/proc/runs")
    assert code == 2 and "--run-dir /proc/runs" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    code, _ = run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25", "--markdown", str(table), "--no-progress")
    assert code == 0 and table.read_text(encoding="utf-8").startswith("sample, 5 queries")


def test_index_train_vectors_end_to_end(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`index --train-vectors` trains word2vec on the corpus and indexes with it in one
    command; search, train doc2vec and serve's engine then use those vectors unasked."""
    from reranker.config import Settings
    from reranker.pipeline import build_engine

    corpus = SAMPLE / "corpus.jsonl"
    code, out = run(data_dir, "index", str(corpus), "--train-vectors", "--no-progress")
    assert code == 0 and "word vectors: trained CBOW word2vec (d=" in out and "on 25 documents" in out
    assert "indexed 25, unchanged 0, skipped 0" in out
    trained = list((data_dir / "word2vec").glob("corpus-*.kv"))
    assert len(trained) == 1
    engine = build_engine(Settings(data_dir=data_dir))
    try:
        built = engine.store.index_info()
        assert built is not None and built.embedding.name == trained[0].stem and built.centering is not None
        assert engine.vectors.info.checksum == built.embedding.checksum and engine.vectors.dim == built.embedding.dim
    finally:
        engine.store.close()
    query = "A maximum entropy named entity recognizer that uses global features from the whole document."
    code, out = run(data_dir, "search", query, "--json")
    assert code == 0 and json.loads(out)["ranker"] == "hidden_topics_corrected+bm25:maxp" and json.loads(out)["hits"]
    assert run(data_dir, "train", "doc2vec", str(corpus), "--epochs", "2", "--no-progress")[0] == 0
    assert run(data_dir, "search", query, "--ranker", "doc2vec+bm25")[0] == 0
    # The same command again reuses the vectors and finds every document unchanged.
    code, out = run(data_dir, "index", str(corpus), "--train-vectors", "--no-progress")
    assert code == 0 and "reused from" in out and "indexed 0, unchanged 25" in out
    # Another corpus means other vectors: refused before training, unless --rebuild.
    other = write_jsonl(tmp_path / "other.jsonl", TINY_CORPUS)
    capsys.readouterr()
    assert run(data_dir, "index", str(other), "--train-vectors", "--no-progress")[0] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 25 documents built with word vectors" in err and "add --rebuild" in err
    assert len(list((data_dir / "word2vec").glob("*.kv"))) == 1  # nothing trained
    assert run(data_dir, "--vectors", "glove-6b-50d", "index", str(corpus), "--train-vectors")[0] == 2
    assert "drop --vectors" in capsys.readouterr().err
    # Vectors that moved away: one line saying so, not a traceback.
    trained[0].rename(tmp_path / "moved.kv")
    assert run(data_dir, "search", query)[0] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "which is not there now" in err


def test_evaluate_measures_the_default_ranker_in_force(data_dir: Path, tmp_path: Path) -> None:
    """`evaluate` and `evaluate-similar` without --rankers measured the built-in default
    ranker whatever RERANKER_DEFAULT_RANKER said, while their help says "the default ranker"
    and search and tune take the one in force: after `tune --write-config FILE`, `reranker
    --config FILE evaluate` measured another ranker than the file chose."""
    config = tmp_path / "tuned.toml"
    config.write_text('RERANKER_DEFAULT_RANKER = "hidden_topics_corrected+bm25"\n', encoding="utf-8")
    code, out = run(data_dir, "--config", str(config), "evaluate", str(SAMPLE), "--json", "--no-progress")
    assert code == 0, out
    assert list(json.loads(out)["results"]) == ["bm25", "hidden_topics", "hidden_topics_code", "hidden_topics+bm25", "hidden_topics_corrected+bm25"]
    code, out = run(data_dir, "--config", str(config), "evaluate-similar", str(SAMPLE), "--json", "--no-progress")
    assert code == 0, out
    assert json.loads(out)["rankers"] == ["hidden_topics_corrected+bm25", "bm25"]
    # The default in force being one of the paper's rankers, it is measured once.
    config.write_text('RERANKER_DEFAULT_RANKER = "hidden_topics"\n', encoding="utf-8")
    code, out = run(data_dir, "--config", str(config), "evaluate", str(SAMPLE), "--json", "--no-progress")
    assert code == 0 and list(json.loads(out)["results"]) == ["bm25", "hidden_topics", "hidden_topics_code", "hidden_topics+bm25"]


def test_evaluate_can_train_the_datasets_own_vectors(data_dir: Path) -> None:
    evaluate = ["evaluate", str(SAMPLE), "--json", "--rankers", "bm25,hidden_topics_corrected+bm25", "--train-vectors", "--no-progress"]
    code, out = run(data_dir, *evaluate)
    body = json.loads(out)
    assert code == 0 and body["config"]["vectors"].startswith("corpus-") and body["config"]["dim"] == 100
    assert run(data_dir, *evaluate)[1] == out  # reused vectors, the same cached index, the same figures


def test_index_reports_skipped_lines_and_exits_non_zero(data_dir: Path, tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [TINY_CORPUS[0], "{broken", {"id": "x"}])
    code, out = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 1
    assert "indexed 1, unchanged 0, skipped 2" in out
    assert f"skipped {corpus}:2: not valid JSON" in out
    assert f"skipped {corpus}:3: id 'x': missing 'text' (a string)" in out


def test_skipped_lines_are_listed_in_file_order_as_file_line_reason(data_dir: Path, tmp_path: Path) -> None:
    """A line with no in-vocabulary word is found once its batch's topics are computed,
    after the reader has refused the lines it cannot read: the report listed line 2 before
    line 1, and named the id as `file:1 (7): ...`, which docs/cli.md did not describe (and
    which reads as a second line number). In file order, each `file:line: reason`, the
    reason led by the id as the reader's own reasons are."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "7", "text": "the of and"}, "{broken", TINY_CORPUS[0], {"id": "x"}, {"id": 9, "text": "2018 a"}])
    code, out = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 1 and "indexed 1, unchanged 0, skipped 4" in out
    assert [line for line in out.splitlines() if line.startswith("  skipped ")] == [
        f"  skipped {corpus}:1: id '7': no in-vocabulary words",
        f"  skipped {corpus}:2: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"  skipped {corpus}:4: id 'x': missing 'text' (a string)",
        f"  skipped {corpus}:5: id '9': no in-vocabulary words",
    ]


# Lines with the mistakes a corpus and a query file share, and what each is told.
BAD_LINES = [
    ("{broken", "not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
    ('["x", "some text"]', "expected a JSON object with an 'id' and a 'text'"),
    ('{"text": "no id"}', "missing or invalid 'id' (a non-blank string or an integer; BEIR's '_id' is read too)"),
    ('{"id": " ", "text": "a blank id"}', "missing or invalid 'id' (a non-blank string or an integer; BEIR's '_id' is read too)"),
    ('{"id": "a", "_id": "b", "text": "two ids"}', "'id' 'a' and '_id' 'b' differ: give one"),
    ('{"id": "a\\tb", "text": "a tab in an id"}', "id 'a\\tb' holds a control character (U+0009): ids are written into tab-separated files and one-line tables"),
    ('{"id": "x"}', "id 'x': missing 'text' (a string)"),
    ('{"id": "x", "text": 3}', "id 'x': missing 'text' (a string)"),
    ('{"id": "x", "text": "  "}', "id 'x': empty text"),
    # Python's reader takes NaN and Infinity; JSON (and SQLite's reader of the stored metadata) does not.
    ('{"id": "x", "text": "a number JSON has no word for", "score": NaN}', "not valid JSON (NaN is not a JSON value: write null or a number)"),
    # Valid JSON, but Python reads it as infinity, which was stored as Infinity as NaN was.
    ('{"id": "x", "text": "a number beyond a double", "score": -1e999}', "the number -1e999 is out of range: write null or a number a double holds"),
]


def test_a_corpus_value_that_is_not_json_leaves_filters_working(data_dir: Path, tmp_path: Path) -> None:
    """A line whose metadata held NaN was indexed, and from then on every filtered search
    failed with "cannot read the field 'year': malformed JSON", naming no document."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{**TINY_CORPUS[0], "year": 2010}])
    with corpus.open("a", encoding="utf-8") as lines:
        lines.write('{"id": "inf", "text": "sailing ships at sea", "year": 2011, "weight": -Infinity}\n')
    code, out = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 1 and f"  skipped {corpus}:2: not valid JSON (-Infinity is not a JSON value: write null or a number)\n" in out
    code, out = run(data_dir, "search", "sailing ships at sea", "--filter", "year>=2000")
    assert code == 0 and f"  1. {TINY_CORPUS[0]['id']}" in out


def test_a_stored_value_that_is_not_json_names_its_document_and_the_fix(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index built before such lines were refused holds them: every filtered search said
    "cannot read the field 'year': malformed JSON", naming neither the document nor a way out."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{**TINY_CORPUS[0], "year": 2010}, {**TINY_CORPUS[1], "year": 2011}])
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    with sqlite3.connect(data_dir / "index" / "store.sqlite3") as db:  # as the older version wrote it
        db.execute("""UPDATE docs SET fields = '{"year": 2011, "weight": NaN}' WHERE id = 'cooking'""")
    code, out = run(data_dir, "search", "sailing ships at sea", "--filter", "year>=2000")
    assert (code, out) == (1, "")
    assert capsys.readouterr().err == (
        "reranker: error: cannot read the field 'year': the metadata of document 'cooking' is not valid JSON "
        "(NaN or Infinity, which an index made before they were refused kept): write null or a number in its "
        "corpus line and index the corpus again\n"
    )
    write_jsonl(corpus, [{**TINY_CORPUS[0], "year": 2010}, {**TINY_CORPUS[1], "year": 2011, "weight": None}])
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0  # what the message says to do
    code, out = run(data_dir, "search", "sailing ships at sea", "--filter", "year>=2000")
    assert code == 0 and "  1. ships" in out


@pytest.mark.parametrize(("line", "message"), BAD_LINES, ids=[message[:24] for _, message in BAD_LINES])
def test_a_bad_line_reads_the_same_in_a_corpus_and_in_a_query_file(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    """`index` skips a bad corpus line and `evaluate` refuses a bad query line: both parse
    them with one reader (datasets.parse_record), so the user reads one message for one mistake."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text((SAMPLE / "corpus.jsonl").read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    code, out = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 1 and f"  skipped {corpus}:26: {message}\n" in out
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "corpus.jsonl").write_bytes((SAMPLE / "corpus.jsonl").read_bytes())
    (dataset / "qrels.tsv").write_bytes((SAMPLE / "qrels.tsv").read_bytes())
    queries = dataset / "queries.jsonl"
    queries.write_text((SAMPLE / "queries.jsonl").read_text(encoding="utf-8").rstrip("\n") + "\n" + line + "\n", encoding="utf-8")
    capsys.readouterr()
    code, out = run(data_dir, "evaluate", str(dataset), "--rankers", "bm25", "--no-progress")
    assert (code, out) == (1, "")
    assert capsys.readouterr().err == f"reranker: error: {queries}:6: {message}\n"


def test_evaluate_names_the_corpus_lines_it_skipped(data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dataset = tmp_path / "broken"
    dataset.mkdir()
    for name in ("queries.jsonl", "qrels.tsv"):
        (dataset / name).write_bytes((SAMPLE / name).read_bytes())
    bad = ["{broken", '{"id": "x"}'] + [f'{{"id": "e{i}", "text": ""}}' for i in range(5)]
    corpus = dataset / "corpus.jsonl"
    corpus.write_text((SAMPLE / "corpus.jsonl").read_text(encoding="utf-8") + "\n".join(bad) + "\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        code, out = run(data_dir, "evaluate", str(dataset), "--json", "--rankers", "bm25", "--no-progress")
    assert code == 0 and json.loads(out)["queries"] == 5
    warning = next(r.getMessage() for r in caplog.records if "skipped while indexing" in r.getMessage()).splitlines()
    assert warning[0] == "7 corpus lines skipped while indexing (not in the evaluation):"
    assert warning[1:3] == [f"  {corpus}:26: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
                            f"  {corpus}:27: id 'x': missing 'text' (a string)"]
    assert warning[3:6] == [f"  {corpus}:{28 + i}: id 'e{i}': empty text" for i in range(3)]
    assert warning[6:] == ["  ... and 2 more (run with -v to list them all)"]


def test_errors_are_one_line_and_non_zero(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(data_dir, "search", "ships")[0] == 1
    assert "no index in" in capsys.readouterr().err
    # A misspelt ranker is said first, whatever the index holds (it said "the index is empty").
    for command in (["search", "ships"], ["similar", "P01-1027"]):
        assert run(data_dir, *command, "--ranker", "nope")[0] == 2
        assert "unknown ranker 'nope'" in capsys.readouterr().err
    assert run(data_dir, "index", str(tmp_path / "missing.jsonl"))[0] == 1
    assert capsys.readouterr().err.strip() == f"reranker: error: {tmp_path / 'missing.jsonl'}: no such corpus file"
    run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    # A ranker name is an option: a bad one exits 2, as argparse's refusals and `compare` do.
    assert run(data_dir, "search", "ships", "--ranker", "nope")[0] == 2
    assert "unknown ranker 'nope'; valid rankers: bm25, doc2vec" in capsys.readouterr().err
    assert run(data_dir, "evaluate", str(SAMPLE), "--rankers", "bm25,nope")[0] == 2
    assert "unknown ranker 'nope'" in capsys.readouterr().err
    assert run(data_dir, "search", "   ")[0] == 1
    assert "the query is empty" in capsys.readouterr().err
    dataset = tmp_path / "ds"
    dataset.mkdir()
    write_jsonl(dataset / "corpus.jsonl", TINY_CORPUS)
    write_jsonl(dataset / "queries.jsonl", [{"id": "q", "text": "ships"}])
    (dataset / "qrels.tsv").write_text("q\tships\t1\nq ships\n")
    assert run(data_dir, "evaluate", str(dataset))[0] == 1
    err = capsys.readouterr().err.strip()
    assert err == f"reranker: error: {dataset / 'qrels.tsv'}:2: expected 3 tab-separated columns (query_id, doc_id, relevance) or the TREC layout's 4 (query_id, iteration, doc_id, relevance), got 1"
    assert run(data_dir, "--vectors", str(tmp_path / "none.txt"), "rankers")[0] == 0  # vectors not needed
    assert run(data_dir, "--vectors", str(tmp_path / "none.txt"), "search", "x")[0] == 1
    assert "word vectors not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        run(data_dir, "search", "ships", "--window", "0")
    assert usage.value.code == 2 and "must be >= 1" in capsys.readouterr().err
    # Longer than the longest exact value the index keeps, as POST /search refuses it.
    with pytest.raises(SystemExit) as usage:
        run(data_dir, "search", "ships", "--filter", "title=" + "a" * 8192)
    assert usage.value.code == 2 and "argument --filter: must be at most 8191 characters, got 8192" in capsys.readouterr().err
    # No value: refused (an unset shell variable), saying how to ask for the empty string.
    with pytest.raises(SystemExit) as usage:
        run(data_dir, "search", "ships", "--filter", "title=")
    assert usage.value.code == 2 and """argument --filter: 'title=' has no value (to match the empty string: --filter 'title=""')""" in capsys.readouterr().err
    code, out = run(data_dir, "search", "machine translation", "--filter", 'title=""', "--json")
    unfiltered = run(data_dir, "search", "machine translation", "--json")[1]
    assert code == 0 and json.loads(out)["hits"] == json.loads(unfiltered)["hits"] != []  # no sample paper has a title
    assert json.loads(run(data_dir, "search", "machine translation", "--filter", 'title="x"', "--json")[1])["hits"] == []


def test_commands_that_read_make_no_index_in_an_empty_data_dir(tmp_path: Path, glove: object) -> None:
    """`reranker search` on a fresh data dir made an empty index there, then said the index
    was empty. The commands that read say there is no index and how to make one, and leave
    the data dir as it was."""
    import subprocess
    import sys

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = {**os.environ, **settings_env(data_dir)}
    no_index = f"no index in {data_dir / 'index'} yet: run `reranker index CORPUS.jsonl` first"
    for argv, said in [
        (["search", "ships"], f"reranker: error: {no_index}\n"),
        (["similar", "ships"], f"reranker: error: {no_index}\n"),
        (["compact"], f"reranker: error: nothing to compact: {no_index}\n"),
        (["train", "doc2vec", str(SAMPLE / "corpus.jsonl"), "--no-progress"], f"reranker: error: {no_index}\n"),
        # It checks that the rankers can run on the index (made an empty one to check them
        # on): without one the experiment is made (the walkthrough's order) and the check waits.
        (["ab", "create", "e1", "--rankers", "bm25,hidden_topics"],
         f"reranker: {no_index}; the rankers are checked once there is one (a search leaves the experiment out while one cannot run)\n"),
        (["rankers"], f"reranker: {no_index}; which rankers can run on it is known once there is one\n"),  # last: `done` below
    ]:
        done = subprocess.run([sys.executable, "-m", "reranker", *argv], env=env, capture_output=True, text=True, timeout=120)
        assert done.stderr == said, (argv, done.stderr)
        assert done.returncode == (0 if argv[0] in ("rankers", "ab") else 1), argv
        # `ab` opens its experiment store (experiments.sqlite3) before it reads the index.
        made = [path.name for path in data_dir.iterdir() if not path.name.startswith("experiments.sqlite3")]
        assert made == [], f"reranker {' '.join(argv)} wrote {made}"
    assert DEFAULT_RANKER in done.stdout.split(), "the rankers are listed all the same"


def test_ab_commands_that_read_make_no_experiment_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ab list`, `ab report` and `ab judgments` on a fresh data dir answered right but left
    an empty experiments.sqlite3 behind. They answer the same and leave the data dir as it
    was; a command that writes still makes the store."""
    from reranker.errors import StoreError
    from reranker.store.events import EmbeddedEventStore, Experiment

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    capsys.readouterr()
    assert run(data_dir, "ab", "list") == (0, "no experiments yet: reranker ab create ID --rankers A,B\n")
    for argv in (["report", "x"], ["report", "x", "--json"], ["judgments", "x", "--out", str(tmp_path / "j.jsonl")]):
        assert run(data_dir, "ab", *argv) == (1, ""), argv
        assert capsys.readouterr().err == "reranker: error: no experiment 'x' (experiments, newest first: none yet)\n", argv
    assert list(data_dir.iterdir()) == []
    # The empty view refuses a write rather than losing it.
    view = EmbeddedEventStore(None)
    with pytest.raises(StoreError, match="readonly"):
        view.create_experiment(Experiment("e", ("bm25", DEFAULT_RANKER), "team_draft", 1.0, "stopped", "2026-01-01T00:00:00Z"))
    view.close()
    assert list(data_dir.iterdir()) == []
    assert run(data_dir, "ab", "delete", "x", "--keep-events")[0] == 1  # a writer: the store is made
    assert [path.name for path in data_dir.iterdir()] == ["experiments.sqlite3"]


def test_ab_commands_that_read_take_no_write_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ab list`, `ab report` and `ab judgments` on a store that exists ran its schema
    statements in a write transaction (BEGIN IMMEDIATE) on every open: beside a writer that
    held SQLite's write lock they waited 30 s and failed ("database is locked"), and on a
    file the user may only read they failed at once. They now open it read-only, answering
    at once as SQLite's WAL readers do, and write nothing: a store an older version made
    (no `source` column, no event count) is read as it is."""
    import time

    from reranker.store.events import EmbeddedEventStore, Experiment

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / "experiments.sqlite3"
    experiment = Experiment("e1", ("bm25", DEFAULT_RANKER), "team_draft", 1.0, "stopped", "2026-01-01T00:00:00Z")
    store = EmbeddedEventStore(path)
    store.create_experiment(experiment)
    store.close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process's write under way: the lock is held
    try:
        started = time.monotonic()
        code, listed = run(data_dir, "ab", "list")
        assert code == 0 and "e1" in listed, capsys.readouterr().err
        code, reported = run(data_dir, "ab", "report", "e1", "--json")
        assert code == 0 and json.loads(reported)["report"]["queries"] == 0, capsys.readouterr().err
        assert time.monotonic() - started < 10, "a reader waited for the write lock"
    finally:
        writer.execute("ROLLBACK")
        writer.close()

    # A store as the first version with events made it: read, and left as it was.
    old = tmp_path / "old"
    old.mkdir()
    with sqlite3.connect(old / "experiments.sqlite3") as db:
        db.executescript(
            "CREATE TABLE experiments (id TEXT PRIMARY KEY, created TEXT NOT NULL, body TEXT NOT NULL);"
            "CREATE TABLE queries (query_id TEXT PRIMARY KEY, experiment_id TEXT NOT NULL, body TEXT NOT NULL);"
            "CREATE TABLE events (event_id TEXT PRIMARY KEY, query_id TEXT NOT NULL, experiment_id TEXT NOT NULL,"
            " action_name TEXT NOT NULL, object_id TEXT, body TEXT NOT NULL);"
        )
        db.execute("INSERT INTO experiments VALUES (?, ?, ?)", (experiment.id, experiment.created, json.dumps(experiment.to_json())))
    db.close()
    schema = sqlite3.connect(old / "experiments.sqlite3")
    before = schema.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    code, listed = run(old, "ab", "list")
    assert code == 0 and "e1" in listed, capsys.readouterr().err
    assert run(old, "ab", "report", "e1")[0] == 0, capsys.readouterr().err
    assert schema.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
    schema.close()
    # A file that is not an experiment store is refused in one line, and left as it was.
    with sqlite3.connect(old / "experiments.sqlite3") as db:
        db.execute("DROP TABLE queries")
    db.close()
    capsys.readouterr()
    assert run(old, "ab", "list") == (1, "")
    assert capsys.readouterr().err == (
        f"reranker: error: cannot read the experiment store {old / 'experiments.sqlite3'}: it has no table queries "
        "(a command that writes to it, such as `reranker ab create`, makes them)\n"
    )


def test_an_experiment_store_that_is_a_folder_is_named_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SQLite's own words for a folder in the store's place were "disk I/O error" (a read)
    and "unable to open database file" (a write)."""
    (tmp_path / "experiments.sqlite3").mkdir()
    for command in (("ab", "list"), ("ab", "create", "e1", "--rankers", "bm25,hidden_topics")):
        capsys.readouterr()
        assert run(tmp_path, *command)[0] == 1
        assert capsys.readouterr().err == (
            f"reranker: error: cannot open the experiment store {tmp_path / 'experiments.sqlite3'}: it is a folder "
            "(the store is a file of that name; move the folder away)\n"
        )


def test_ab_commands_that_read_make_no_experiment_index(tmp_path: Path, osmem_clone: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The same on OpenSearch: `ab list` made the experiments index (`ALIAS-experiments`)."""
    import urllib.request

    def indices() -> str:
        with urllib.request.urlopen(f"{osmem_clone.url}/_cat/indices?h=index") as answer:
            return str(answer.read().decode())

    data_dir = tmp_path / "data"
    cluster = ["--opensearch-url", osmem_clone.url]
    assert run(data_dir, *cluster, "ab", "list") == (0, "no experiments yet: reranker ab create ID --rankers A,B\n")
    assert run(data_dir, *cluster, "ab", "report", "x") == (1, "")
    assert "no experiment 'x'" in capsys.readouterr().err
    assert "experiments" not in indices() and not data_dir.exists()
    assert run(data_dir, *cluster, "ab", "delete", "x", "--keep-events")[0] == 1  # nothing to delete: nothing written
    assert "experiments" not in indices()
    assert run(data_dir, *cluster, "ab", "create", "x", "--rankers", f"bm25,{DEFAULT_RANKER}")[0] == 0  # a write makes the index
    assert "reranker-experiments" in indices()


def test_reads_of_the_cluster_event_store_make_no_index(tmp_path: Path, osmem_clone: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`ab report` and `ab judgments` of an experiment no search had taken part in made the
    `ALIAS-ubi_queries` and `ALIAS-ubi_events` indices: every read of the cluster's event
    store made the index it read (and updated its mapping). A read of a missing index now
    answers empty and makes nothing; the first write makes it."""
    import urllib.request

    from reranker.config import OpenSearchSettings
    from reranker.interleaving import interleave
    from reranker.store.events import OpenSearchEventStore, Recorded, ShownQuery
    from reranker.store.opensearch import OpenSearchStore

    def indices() -> list[str]:
        with urllib.request.urlopen(f"{osmem_clone.url}/_cat/indices?h=index") as answer:
            return sorted(str(answer.read().decode()).split())

    data_dir = tmp_path / "data"
    cluster = ["--opensearch-url", osmem_clone.url]
    assert run(data_dir, *cluster, "ab", "create", "e1", "--rankers", f"bm25,{DEFAULT_RANKER}")[0] == 0, capsys.readouterr().err
    assert indices() == ["reranker-experiments"]
    assert run(data_dir, *cluster, "ab", "list")[0] == 0
    code, reported = run(data_dir, *cluster, "ab", "report", "e1", "--json")
    assert code == 0 and json.loads(reported)["report"]["queries"] == 0, capsys.readouterr().err
    capsys.readouterr()
    assert run(data_dir, *cluster, "ab", "judgments", "e1", "--out", str(tmp_path / "j.jsonl")) == (1, "")
    assert "has shown no interleaved result list yet" in capsys.readouterr().err
    assert indices() == ["reranker-experiments"]
    # Every read of the store, as the service makes them too.
    store = OpenSearchEventStore(OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="reranker")))
    try:
        assert store.shown_query("q1") is None and not store.has_event("x")
        assert store.count_events("q1", "e1", None).total == 0 and store.recorded("e1") == Recorded(0, 0)
        assert list(store.impressions("e1")) == [] and store.experiment_data("e1").queries == 0
        assert indices() == ["reranker-experiments"]
        shown = interleave("team_draft", ["a", "b"], ["b", "a"], 2, "seed")
        store.record_query(ShownQuery("q1", "e1", "c1", "text", "2026-01-01T00:00:00Z", shown, 0))
        assert indices() == ["reranker-experiments", "reranker-ubi_queries"]
        assert store.experiment_data("e1").queries == 1
    finally:
        store.close()


def test_a_query_that_is_not_utf8_is_refused_in_one_line(data_dir: Path) -> None:
    """A Latin-1 file piped in (or such bytes in the argument) was searched with escape
    characters for its accents, and `--json` wrote them out as lone surrogates, which no
    strict JSON reader (nor this service's own /search) accepts."""
    import subprocess
    import sys

    run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    env = {**os.environ, "RERANKER_DATA_DIR": str(data_dir)}
    search = [sys.executable, "-m", "reranker", "search"]
    latin1 = "caf\xe9 translation".encode("latin-1")
    for argv, stdin in [([*search, "-", "--json"], latin1), ([*map(os.fsencode, search), latin1, b"--json"], None)]:
        done = subprocess.run(argv, input=stdin, env=env, capture_output=True, timeout=120)
        assert (done.returncode, done.stdout) == (1, b""), done.stdout[:300]
        assert done.stderr == b"reranker: error: the query is not UTF-8 text (byte 0xe9 at offset 3)\n"
    done = subprocess.run([*search, "-", "--json", "--size", "1"], input="café translation".encode(), env=env, capture_output=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["query"] == "café translation"
    # Standard input closed, as cron or a daemon may start it: one line, not a traceback.
    done = subprocess.run(["sh", "-c", '"$@" <&-', "sh", *search, "-"], env=env, capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (1, b"reranker: error: no standard input to read the query from (`-` reads it)\n")


@pytest.mark.parametrize(("status", "page", "said"), [
    (501, "<html>\n<head><title>Error response</title></head>\n<body><h1>Error response</h1>\n<p>Error code: 501</p></body>\n</html>\n",
     "HTTP 501 not OpenSearch's JSON: 'Error response Error response Error code: 501'"),
    (404, "", "HTTP 404 an empty answer"),
])
def test_a_url_that_is_not_an_opensearch_cluster_is_one_line(
    data_dir: Path, capsys: pytest.CaptureFixture[str], status: int, page: str, said: str,
) -> None:
    """OPENSEARCH_URL at a web server (python -m http.server, a gateway): the error was its
    whole HTML page over many lines, or only "NotFoundError" for an empty answer."""
    web_server = ClusterProxy("http://127.0.0.1:9", pages={"/": (status, page)})  # answers every path itself
    try:
        assert run(data_dir, "--opensearch-url", web_server.url, "search", "translation")[0] == 1
    finally:
        web_server.close()
    err = capsys.readouterr().err
    assert err == f"reranker: error: OpenSearch counting documents failed: {said}; is OPENSEARCH_URL an OpenSearch cluster?\n"


def test_a_url_that_answers_a_page_with_200_is_one_line(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sign-in page or a gateway's, answered 200: opensearch-py cannot read it as JSON, and
    every command printed its SerializationError's traceback."""
    web_server = ClusterProxy("http://127.0.0.1:9", pages={"/": (200, "<html><body>Please sign in</body></html>")})
    try:
        said = {}
        for argv in (["search", "translation"], ["indices", "list"], ["index", str(SAMPLE / "corpus.jsonl"), "--no-progress"]):
            assert run(data_dir, "--opensearch-url", web_server.url, *argv)[0] == 1, argv
            said[argv[0]] = capsys.readouterr().err
    finally:
        web_server.close()
    for command, err in said.items():
        assert re.fullmatch(
            rf"reranker: error: OpenSearch [a-z ]+ failed: the answer of {re.escape(web_server.url)} was not JSON \(Unknown mimetype, "
            r"unable to deserialize: text/html[^)]*\); is OPENSEARCH_URL an OpenSearch cluster, not a gateway's or a sign-in page\?\n",
            err,
        ), (command, err)


@pytest.mark.parametrize(
    "page, said",
    [
        (
            "<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>",
            "not OpenSearch's JSON: '404 Not Found Not Found'",
        ),
        ("", "an empty answer"),
    ],
    ids=["page", "empty"],
)
def test_indices_at_a_url_that_is_not_an_opensearch_cluster_is_an_error_not_an_empty_list(
    data_dir: Path, capsys: pytest.CaptureFixture[str], page: str, said: str,
) -> None:
    """A web server's "404 Not Found" page was read as "no such alias": `indices list` said
    "no indices for alias reranker" and exited 0. So was an empty 404: OpenSearch answers
    every request this store reads a 404 of (GETs, a count, a delete) with a JSON body."""
    web_server = ClusterProxy("http://127.0.0.1:9", pages={"/": (404, page)})
    try:
        code, out = run(data_dir, "--opensearch-url", web_server.url, "indices", "list")
    finally:
        web_server.close()
    assert (code, out) == (1, "")
    assert capsys.readouterr().err == (
        f"reranker: error: OpenSearch reading the alias failed: HTTP 404 {said}; is OPENSEARCH_URL an OpenSearch cluster?\n"
    )


def test_evaluate_reads_judgments_other_tools_write_and_says_when_they_miss_the_corpus(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A byte-order mark on qrels.tsv made the first query id "\\ufeffC00-2123": its first
    judgment was dropped without a word and the metrics changed; on queries.jsonl it was a
    "not valid JSON" error. A header line (BEIR's qrels have one) was an error; judgments
    of ids the corpus lacks scored every ranker 0 with exit 0."""
    def dataset(name: str, qrels: bytes, queries: bytes = (SAMPLE / "queries.jsonl").read_bytes()) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "corpus.jsonl").write_bytes((SAMPLE / "corpus.jsonl").read_bytes())
        (folder / "queries.jsonl").write_bytes(queries)
        (folder / "qrels.tsv").write_bytes(qrels)
        return folder

    qrels = (SAMPLE / "qrels.tsv").read_bytes()
    bom = b"\xef\xbb\xbf"
    plain = run(data_dir, "evaluate", str(dataset("plain", qrels)), "--json", "--per-query", "--rankers", "bm25", "--no-progress")
    for name, folder in [
        ("bom", dataset("bom", bom + qrels, bom + (SAMPLE / "queries.jsonl").read_bytes())),
        ("header", dataset("header", b"query-id\tcorpus-id\tscore\r\n" + qrels)),
    ]:
        code, out = run(data_dir, "evaluate", str(folder), "--json", "--per-query", "--rankers", "bm25", "--no-progress")
        assert code == 0, name
        assert json.loads(out)["rankers"] == json.loads(plain[1])["rankers"], name
    assert run(data_dir, "evaluate", str(dataset("late", qrels + b"q\td\tscore\n")), "--rankers", "bm25")[0] == 1
    assert "qrels.tsv:" in capsys.readouterr().err  # a word past the first line is still an error
    first = qrels.split(b"\n", 1)[0].split(b"\t")
    some = dataset("some", b"\t".join([first[0], b"NOT-IN-CORPUS", b"1"]) + b"\n" + qrels)
    with caplog.at_level("WARNING"):
        code, out = run(data_dir, "evaluate", str(some), "--json", "--rankers", "bm25", "--no-progress")
    assert code == 0
    judged = len({line.split(b"\t")[1] for line in qrels.splitlines()}) + 1
    assert f"1 of the {judged} relevant documents in {some / 'qrels.tsv'} is not in the index (no ranker can find it)" in caplog.text
    assert "NOT-IN-CORPUS" in caplog.text
    # Queries without judgments, and judgments of query ids no query has, are named.
    extra = b'{"id": "unjudged", "text": "parsing"}\n'
    partial = dataset("partial", qrels + b"lost\t" + first[1] + b"\t1\n", (SAMPLE / "queries.jsonl").read_bytes() + extra)
    caplog.clear()
    with caplog.at_level("WARNING"):
        code, out = run(data_dir, "evaluate", str(partial), "--json", "--rankers", "bm25", "--no-progress")
    assert code == 0 and json.loads(out)["queries"] == json.loads(plain[1])["queries"]
    queries_path, qrels_path = partial / "queries.jsonl", partial / "qrels.tsv"
    assert f"1 of the 6 queries in {queries_path} has no relevant document in {qrels_path} and is not evaluated: unjudged" in caplog.text
    assert f"1 query id judged in {qrels_path} is not in {queries_path} (not evaluated): lost" in caplog.text
    none = dataset("none", b"".join(line.split(b"\t")[0] + b"\tX" + line.split(b"\t")[1] + b"\t1\n" for line in qrels.splitlines()))
    assert run(data_dir, "evaluate", str(none), "--rankers", "bm25", "--no-progress")[0] == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"reranker: error: {none / 'qrels.tsv'}: no relevant document it names (")
    assert f"match the ids in {none / 'corpus.jsonl'}?" in err and len(err.splitlines()) == 1


def test_a_read_only_data_dir_is_an_error_that_says_what_to_do(data_dir: Path) -> None:
    """SQLite said only "attempt to write a readonly database" (or a bare permission
    error), which does not tell a user that searching needs write access too."""
    import shutil
    import stat
    import subprocess
    import sys

    # As root, permissions bind only without the capability to override them.
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: file permissions do not apply")
        drop = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--bounding-set={drop}", f"--inh-caps={drop}", "--"]
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    paths = [data_dir, *data_dir.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        env = {**os.environ, **settings_env(data_dir), "PYTHONPATH": str(REPO)}
        for argv in (["search", "named entity recognition"], ["--data-dir", str(data_dir / "new"), "index", str(SAMPLE / "corpus.jsonl")]):
            done = subprocess.run([*prefix, sys.executable, "-m", "reranker", *argv], env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 1, done.stderr
            assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("reranker: error: cannot open the embedded store in ")
            assert "needs write access to its folder, also to search: make it writable, or choose another data dir (--data-dir" in done.stderr
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("command", ["search", "similar", "evaluate", "compare", "evaluate-similar", "tune"])
def test_help_states_the_fusion_weight_in_force(data_dir: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The help once said 0.5 while the setting's default was 0.3: a reader who left the flag
    # out believed the other weight was used.
    with pytest.raises(SystemExit) as done:
        run(data_dir, command, "--help")
    assert done.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    weight = Settings.from_env(settings_env(data_dir)).fusion_weight
    assert f"(default RERANKER_FUSION_WEIGHT, {weight:g})" in help_text
    assert weight != 0.5 and "(default 0.5)" not in help_text
    # The default ranker is a maxp fusion, which the weight weighs: a help naming only the
    # min-max and z-score fusions told its reader the flag did nothing to the default.
    assert "min-max, z-score and maxp fusions" in help_text and DEFAULT_RANKER.endswith(":maxp")


def test_a_query_index_mismatch_is_an_error(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    other = tmp_path / "other.kv"
    run(data_dir, "train", "word2vec", str(SAMPLE / "corpus.jsonl"), "--out", str(other), "--dim", "8", "--epochs", "1")
    assert run(data_dir, "--vectors", str(other), "search", "entity recognition")[0] == 1
    assert "the index was built with word vectors 'glove-6b-50d'" in capsys.readouterr().err


def test_a_store_built_by_the_fts5_version_names_the_rebuild_command(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (data_dir / "index").mkdir(parents=True)
    db = sqlite3.connect(data_dir / "index" / "store.sqlite3")
    db.executescript(
        "CREATE TABLE docs (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT, body TEXT);"
        "CREATE VIRTUAL TABLE docs_fts USING fts5(title, body, content='docs', content_rowid='rowid');"
    )
    db.close()
    assert run(data_dir, "search", "entity recognition")[0] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reranker: error: the index in ")
    assert err.strip().endswith("was built by an older version (BM25 in SQLite FTS5); rebuild it: reranker index --rebuild CORPUS")
    assert run(data_dir, "index", "--rebuild", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    code, out = run(data_dir, "search", "entity recognition")
    assert code == 0 and "1." in out


def test_rankers_are_listed_as_get_rankers_lists_them(data_dir: Path, tmp_path: Path) -> None:
    """One ranker a line, its name first (scripts read the first column), then what GET
    /rankers says of it: the default, whether it scores by topics, and, for the
    doc2vec rankers on an index without a Doc2Vec model, that they cannot run and why.
    The command printed bare names: a user learnt of doc2vec's model when a search failed."""
    from reranker.errors import NO_DOC2VEC_MODEL
    from reranker.service import create_app

    assert run(data_dir, "index", str(write_jsonl(tmp_path / "tiny.jsonl", TINY_CORPUS)), "--no-progress")[0] == 0
    code, out = run(data_dir, "rankers")
    lines = out.splitlines()
    assert code == 0 and [line.split()[0] for line in lines] == ranker_names()
    assert {"bm25", "hidden_topics", "wmd", "doc2vec", "wmd+bm25:rrf", "hidden_topics+bm25"} <= set(ranker_names())
    app = create_app(Settings.from_env(settings_env(data_dir)))
    served = app.test_client().get("/rankers").get_json()
    app.extensions["reranker"].close()
    for line, listed in zip(lines, served["rankers"], strict=True):
        notes = line.split(None, 1)[1].split("; ")
        assert listed["name"] == line.split()[0]
        assert ("the default (RERANKER_DEFAULT_RANKER)" in notes) == (listed["name"] == served["default"] == DEFAULT_RANKER)
        assert ("scores by topics" in notes) == listed["uses_topics"] and ("does not score by topics" in notes) != listed["uses_topics"]
        assert line.endswith(f"; unavailable: {listed['reason']}") == (not listed["available"])  # the reason last: it may hold "; "
    by_name = {line.split()[0]: line for line in lines}
    assert by_name["doc2vec"].endswith(f"unavailable: {NO_DOC2VEC_MODEL}") and "unavailable" not in by_name["bm25"]
    assert "unavailable" in by_name["doc2vec+bm25:rrf"] and "unavailable" not in by_name[DEFAULT_RANKER]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dataset", "queries", "documents", "at_least", "default_at_least"),
    [
        # The data set's README: nDCG@10 0.719 for a plain BM25 (the FTS5 store reached 0.709);
        # the default's bar is issue 22's (measured: 0.788, p < 0.001).
        ("clscisumm2018-train", 40, 567, 0.719, 0.78),
        # The FTS5 store's figure; the default must not lose to BM25 (measured: 0.424 against
        # 0.417, not significantly: docs/rankers-and-evaluation.md, "The targets").
        ("cisi", 76, 1460, 0.402, None),
    ],
)
def test_bm25_and_the_default_reach_their_quality_bars_on_the_shared_data(
    shared_evaluation: Callable[[str], SharedEvaluation], dataset: str, queries: int, documents: int, at_least: float, default_at_least: float | None
) -> None:
    # `reranker evaluate DATASET --json --rankers bm25,DEFAULT`, run once for this test and
    # tests/test_topic_words.py, which reads the index it built (see `shared_evaluation`).
    body = shared_evaluation(dataset).report
    assert body["queries"] == queries and body["config"]["documents"] == documents
    bm25, default = (body["results"][name]["ndcg@10"] for name in ("bm25", DEFAULT_RANKER))
    assert bm25 >= at_least
    assert default >= (default_at_least if default_at_least is not None else bm25), (default, bm25)
    if default_at_least is not None:
        assert body["p_values"]["bm25"][DEFAULT_RANKER]["ndcg@10"] < 0.05


def test_config_prints_each_setting_in_force_readably(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENSEARCH_URL", "https://admin:hunter2@search.example:9200")
    monkeypatch.setenv("OPENSEARCH_USERNAME", "admin")
    monkeypatch.setenv("OPENSEARCH_PASSWORD", "hunter2")
    monkeypatch.setenv("RERANKER_THREADS", "6")
    code, out = run(data_dir, "config")
    assert code == 0 and "hunter2" not in out and "hosts=(" not in out and "Settings(" not in out
    in_force = out.split("What each one means")[0]
    lines = {line.split()[0]: line.split(None, 1)[1] for line in in_force.splitlines() if line.startswith("  ")}
    assert lines["OPENSEARCH_URL"].startswith("https://***@search.example:9200")
    assert lines["OPENSEARCH_PASSWORD"].startswith("(set)") and lines["RERANKER_THREADS"].startswith("6")
    assert out.startswith("store: OpenSearch at https://***@search.example:9200")
    meanings = {line.split()[0]: line.split(None, 1)[1] for line in out.split("What each one means")[1].splitlines() if line.startswith("  ")}
    assert "min-max, z-score and maxp fusions" in meanings["RERANKER_FUSION_WEIGHT"], "the default ranker's fusion is weighed too"


def test_a_bad_service_setting_stops_serve_and_config_only(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RERANKER_BIND", "nonsense")
    monkeypatch.setenv("RERANKER_WORKERS", "0")
    code, out = run(data_dir, "index", str(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)), "--no-progress")
    assert code == 0 and "indexed" in out
    code, out = run(data_dir, "search", "sailing ships at sea", "--size", "1")
    assert code == 0 and "ships" in out
    capsys.readouterr()
    for command in ("serve", "config"):
        assert run(data_dir, command)[0] == 2
        assert capsys.readouterr().err == "reranker: error: RERANKER_WORKERS must be >= 1, got 0 (from the environment)\n"
    monkeypatch.delenv("RERANKER_WORKERS")
    for command in ("serve", "config"):
        assert run(data_dir, command)[0] == 2
        assert capsys.readouterr().err == "reranker: error: the service address (RERANKER_BIND, --bind) must be HOST:PORT, got 'nonsense' (from the environment)\n"


def test_an_option_overrides_a_bad_value_of_its_variable_instead_of_being_refused_for_it(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RERANKER_WINDOW=5000 stopped `reranker search x --window 50` with "window must be <=
    1000 ..., got 5000": the environment was checked before the option replaced it."""
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    monkeypatch.setenv("RERANKER_INDEX_WORKERS", "0")
    monkeypatch.setenv("RERANKER_K", "many")
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 2
    code, out = run(data_dir, "index", str(corpus), "--no-progress", "--workers", "1", "--k", "15")
    assert code == 0 and "indexed" in out
    monkeypatch.delenv("RERANKER_INDEX_WORKERS")
    monkeypatch.delenv("RERANKER_K")
    config = tmp_path / "reranker.toml"
    config.write_text("RERANKER_WINDOW = 5000\n")  # from the config file as from the environment
    monkeypatch.setenv("RERANKER_FUSION_WEIGHT", "1.5")
    capsys.readouterr()
    assert run(data_dir, "--config", str(config), "search", "ships")[0] == 2
    assert "got 5000" in capsys.readouterr().err
    code, out = run(data_dir, "--config", str(config), "search", "sailing ships", "--window", "50", "--fusion-weight", "0.5", "--size", "1")
    assert code == 0 and "ships" in out, capsys.readouterr().err


def test_serve_options_override_bad_values_of_their_variables(data_dir: Path, tmp_path: Path) -> None:
    """As the test above, for `serve`, whose gunicorn config file reads the environment
    again: RERANKER_WORKERS=0 under `--workers 1` ended there with a traceback."""
    assert run(data_dir, "index", str(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)), "--no-progress")[0] == 0
    bad = {"RERANKER_BIND": "nonsense", "RERANKER_WORKERS": "0", "RERANKER_THREADS": "0"}
    service = Service(data_dir, bad, workers=1, threads=2)  # which gives --bind, --workers and --threads
    try:
        assert http_json(service.url + "/search", {"query": "sailing ships", "size": 1})[0] == 200
    finally:
        log = service.stop()
    assert "Traceback" not in log


def test_serve_workers_read_the_config_file_as_reranker_config_shows_it(data_dir: Path, tmp_path: Path) -> None:
    """RERANKER_READ_TIMEOUT = 1 in the config file: `reranker config` showed 1, and the
    workers, which read the environment alone, waited the default 10 s for a request."""
    config = tmp_path / "reranker.toml"
    config.write_text("RERANKER_READ_TIMEOUT = 1\n")
    assert any(line.split() == ["RERANKER_READ_TIMEOUT", "1"] for line in run(data_dir, "--config", str(config), "config")[1].splitlines())
    service = Service(data_dir, {"RERANKER_CONFIG": str(config)})
    try:
        answer, waited = stalled_request(service.port)
    finally:
        service.stop()
    assert answer.startswith(b"HTTP/1.1 408") and waited < 5, (answer, waited)


def test_a_bad_value_of_the_config_file_is_said_to_be_the_files(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "reranker.toml"
    config.write_text('RERANKER_WINDOW = "fifty"\nRERANKER_K = 12\n')
    capsys.readouterr()
    assert run(data_dir, "--config", str(config), "search", "ships")[0] == 2
    assert capsys.readouterr().err == f"reranker: error: RERANKER_WINDOW must be an integer, got 'fifty' (from the config file {config})\n"
    monkeypatch.setenv("RERANKER_WINDOW", "many")  # the environment's, which overrides the file's
    assert run(data_dir, "--config", str(config), "search", "ships")[0] == 2
    assert capsys.readouterr().err == "reranker: error: RERANKER_WINDOW must be an integer, got 'many' (from the environment)\n"
    # An option's value is the command line's own: no source added.
    monkeypatch.delenv("RERANKER_WINDOW")
    monkeypatch.setenv("RERANKER_MAX_WINDOW", "50")
    assert run(data_dir, "search", "ships", "--window", "60")[0] == 2
    assert capsys.readouterr().err.endswith("(RERANKER_MAX_WINDOW, the service's limit too), got 60\n")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("RERANKER_FUSION_WEIGHT = 2", "RERANKER_FUSION_WEIGHT (--fusion-weight) must lie in [0, 1], got 2"),
        ("RERANKER_WINDOW = 5000", "RERANKER_WINDOW (--window) must be <= 1000 (RERANKER_MAX_WINDOW, the service's limit too), got 5000"),
        ('RERANKER_SEARCH_FIELDS = "title^x"', "RERANKER_SEARCH_FIELDS: bad boost in search field 'title^x': expected NAME or NAME^NUMBER"),
    ],
)
def test_a_value_refused_after_it_was_read_names_its_variable_and_the_file(
    data_dir: Path, tmp_path: Path, line: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A number out of range, checked once read, said "fusion weight must lie in [0, 1], got
    2.0" (or "window must be <= ...", "bad boost in search field ..."): no variable named, so
    nothing said that the config file had set it."""
    config = tmp_path / "reranker.toml"
    config.write_text(line + "\n")
    capsys.readouterr()
    assert run(data_dir, "--config", str(config), "config")[0] == 2
    assert capsys.readouterr().err == f"reranker: error: {said} (from the config file {config})\n"


def test_an_unknown_default_ranker_is_refused_by_config_and_rankers_as_by_search(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`reranker config` showed RERANKER_DEFAULT_RANKER=foo as in force and `reranker rankers`
    listed no default, both exit 0, while every search (and serve) refused it."""
    monkeypatch.setenv("RERANKER_DEFAULT_RANKER", "hidden_topics_corected+bm25")
    capsys.readouterr()
    for argv in (["search", "ships"], ["config"], ["rankers"]):
        code, out = run(data_dir, *argv)
        err = capsys.readouterr().err
        assert code == 2 and out == "", argv
        said = "reranker: error: RERANKER_DEFAULT_RANKER names no ranker: 'hidden_topics_corected+bm25' (did you mean"
        assert err.startswith(said) and "valid rankers: bm25, " in err and err.count("\n") == 1, argv


def test_config_names_the_config_file_it_read(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # RERANKER_CONFIG with a ~: the line names the file Settings read (its home expanded).
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "reranker.toml").write_text("RERANKER_K = 12\n")
    monkeypatch.setenv("RERANKER_CONFIG", "~/reranker.toml")
    code, out = run(data_dir, "config")
    assert code == 0 and f"config file: {tmp_path / 'reranker.toml'};" in out
    in_force = out.split("What each one means")[0]
    assert any(line.split() == ["RERANKER_K", "12"] for line in in_force.splitlines())


def test_skipped_lines_are_reported_once_and_a_closed_pipe_keeps_exit_1(data_dir: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    corpus = write_jsonl(tmp_path / "c.jsonl", [TINY_CORPUS[0], *["{broken"] * 3000])
    env = {**os.environ, "RERANKER_DATA_DIR": str(data_dir)}
    done = subprocess.run([sys.executable, "-m", "reranker.cli", "-v", "index", str(corpus), "--no-progress"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout.count("not valid JSON") == 3000 and "not valid JSON" not in done.stderr
    piped = subprocess.run(
        f"{sys.executable} -m reranker.cli index {corpus} --no-progress | head -2; exit ${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", env=env, capture_output=True, text=True,
    )
    assert piped.returncode == 1 and len(piped.stdout.splitlines()) == 2 and "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


def test_ctrl_c_while_the_command_starts_is_one_line(data_dir: Path) -> None:
    """A Ctrl-C in the first half second (the CLI's imports) printed a 20-line traceback:
    the console script imported reranker.cli before `main` could catch it. The script is
    run as pip writes it, from pyproject.toml's entry point; whether the signal lands in the
    imports or in `search -` (which waits on stdin), it is the one line and exit 130."""
    import signal
    import subprocess
    import sys
    import tomllib

    module, function = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["reranker"].split(":")
    script = f"import sys; from {module} import {function}; sys.exit({function}())"
    env = {**os.environ, **settings_env(data_dir)}
    for delay in (0.15, 0.4):
        # SIGINT as a foreground command gets it (see the dev-cluster test below).
        child = subprocess.Popen([sys.executable, "-c", script, "search", "-"], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 130 and "Traceback" not in err, (delay, child.returncode, err)
        assert err.strip() == "reranker: interrupted"


def test_dev_cluster_runs_the_opensearch_walkthrough_without_docker(data_dir: Path, tmp_path: Path) -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Ctrl-C as a terminal sends it. A shell starts a background job with SIGINT ignored, and
    # the child would inherit that (Python then installs no KeyboardInterrupt handler): the
    # child gets the disposition a foreground command has, whatever ran these tests.
    server = subprocess.Popen([sys.executable, "-m", "reranker.cli", "dev-cluster", "--bind", f"127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert f"listens on http://127.0.0.1:{port}" in first, first
        from importlib.metadata import version  # the package's, beside the API it answers as

        assert f"(osmem-server {version('osmem-server')}, OpenSearch API " in first, first
        url = f"http://127.0.0.1:{port}"
        code, out = run(data_dir, "--opensearch-url", url, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
        assert code == 0 and "indexed 25" in out
        code, out = run(data_dir, "--opensearch-url", url, "search", "named entity recognition with a maximum entropy model", "--json")
        assert code == 0 and json.loads(out)["hits"]
    finally:
        server.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30  # a loaded machine: the server gets 2 s, then is killed
        while server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert server.returncode == 0


def test_nothing_is_dropped_in_silence(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24, point 3: duplicate ids are reported with their lines (the later wins, or
    --on-duplicate error stops the run); a directory and an empty file are one-line errors;
    a byte-order mark is accepted; the summary says how many documents replaced a version."""
    ships, cooking, chess = TINY_CORPUS
    corpus = write_jsonl(tmp_path / "c.jsonl", [ships, cooking, {**ships, "text": ships["text"] + " Later version."}])
    code, out = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 1 and "indexed 2, unchanged 0, skipped 0" in out
    assert f"duplicate id: {corpus}:3 replaced {corpus}:1" in out
    from reranker.config import Settings
    from reranker.pipeline import build_engine

    engine = build_engine(Settings.from_env(settings_env(data_dir)))
    try:
        assert engine.document("ships").text.endswith("Later version.")  # the later line won
    finally:
        engine.store.close()
    code, out = run(data_dir, "index", str(corpus), "--no-progress", "--on-duplicate", "error")
    assert code == 1 and f"{corpus}:3: document 'ships' was already read on line 1" in capsys.readouterr().err
    # A changed document replaces its stored version, and the summary says so.
    changed = write_jsonl(tmp_path / "d.jsonl", [{**cooking, "text": cooking["text"] + " And rye."}, chess])
    code, out = run(data_dir, "index", str(changed), "--no-progress")
    assert code == 0 and "(1 replaced an earlier version)" in out
    # One-line errors for what is not a corpus; a BOM is accepted.
    assert run(data_dir, "index", str(tmp_path))[0] == 1
    assert capsys.readouterr().err.strip() == f"reranker: error: {tmp_path}: is a directory, not a corpus file (JSONL: one {{id, title, text}} object per line)"
    # A pipe exists: "no such corpus file" sent the user looking for a typo.
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    assert run(data_dir, "index", str(pipe))[0] == 1
    assert capsys.readouterr().err.strip() == f"reranker: error: {pipe}: not a regular file (a pipe or a device?): save the corpus to a file and index that"
    # So is `-`, meant as standard input.
    assert run(data_dir, "index", "-")[0] == 1
    assert capsys.readouterr().err.strip() == "reranker: error: -: standard input cannot be indexed (indexing reads the corpus more than once): save the corpus to a file and index that"
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert run(data_dir, "index", str(empty))[0] == 1
    assert "the corpus file is empty" in capsys.readouterr().err
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(chess).encode() + b"\n")
    code, out = run(data_dir, "index", str(bom), "--no-progress")
    assert code == 0 and "skipped 0" in out


def _tiny_vectors(path: Path, glove: "WordVectors") -> Path:
    """The GloVe vectors of TINY_CORPUS's words, as a word2vec text file (converts in
    a fraction of a second)."""
    from reranker.text import tokenize

    words = sorted({word for doc in TINY_CORPUS for word in tokenize(doc["title"] + " " + doc["text"]) if word in glove})
    found = glove.lookup(words)
    lines = [f"{len(found.words)} {glove.dim}"] + [f"{w} " + " ".join(f"{x:.6f}" for x in v) for w, v in zip(found.words, found.vectors)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_vectors_are_converted_once_for_every_data_dir(
    tmp_path: Path, glove: "WordVectors", monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two data dirs, and a second copy of the vectors file (another virtual environment's
    package), share one converted entry of the user's cache; a search before anything is
    indexed fails at once and converts nothing."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RERANKER_CACHE_DIR", str(cache))
    vectors = _tiny_vectors(tmp_path / "tiny.txt", glove)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", TINY_CORPUS)
    one, two = tmp_path / "one", tmp_path / "two"

    for command in (["search", "ships"], ["similar", "ships"]):
        assert run(one, "--vectors", f"word2vec:{vectors}", *command)[0] == 1
        err = capsys.readouterr().err
        assert err.strip() == f"reranker: error: no index in {one / 'index'} yet: run `reranker index CORPUS.jsonl` first"
    assert not cache.exists(), "a command that fails without an index converted vectors first"

    assert run(one, "--vectors", f"word2vec:{vectors}", "index", str(corpus), "--no-progress")[0] == 0
    err = capsys.readouterr().err
    [entry] = [path for path in (cache / "vectors").iterdir() if path.is_dir() and path.name.startswith("tiny-")]
    assert err.count("converting word vectors tiny.txt") == 1 and str(entry) in err
    native = entry / "vectors.kv"
    stamp = (native.stat().st_ino, native.stat().st_mtime_ns)

    copy = tmp_path / "venv2" / "tiny.txt"
    copy.parent.mkdir()
    copy.write_bytes(vectors.read_bytes())
    assert run(two, "--vectors", f"word2vec:{copy}", "index", str(corpus), "--no-progress")[0] == 0
    assert run(one, "search", "sailing ships on the ocean", "--json")[0] == 0
    assert "converting" not in capsys.readouterr().err
    assert (native.stat().st_ino, native.stat().st_mtime_ns) == stamp
    assert [path.name for path in (cache / "vectors").iterdir() if path.is_dir() and path.name != "sources"] == [entry.name]
    assert not (one / "vectors").exists() and not (two / "vectors").exists()


def test_search_before_index_on_opensearch_converts_nothing(
    tmp_path: Path, osmem_clone: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("RERANKER_CACHE_DIR", str(cache))
    assert run(tmp_path / "data", "--opensearch-url", osmem_clone.url, "search", "ships")[0] == 1
    assert "run `reranker index CORPUS.jsonl` first" in capsys.readouterr().err
    assert not cache.exists()


def test_version_and_python_dash_m(tmp_path: Path) -> None:
    """`reranker --version` prints the one version (pyproject reads reranker.__version__),
    and `python -m reranker` is the same command."""
    import subprocess
    import sys
    import tomllib

    from reranker import __version__

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "reranker.__version__"}
    env = {**os.environ, **settings_env(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "reranker", "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"reranker {__version__}\n")
    done = subprocess.run([sys.executable, "-m", "reranker", "evaluate", str(SAMPLE), "--rankers", "nope"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("reranker: error: ") and "Traceback" not in done.stderr


def test_the_package_ships_its_type_hints() -> None:
    """PEP 561: py.typed beside the code, and in the package data that wheels carry."""
    import fnmatch
    import tomllib

    assert (REPO / "reranker" / "py.typed").is_file()
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["reranker"]
    assert any(fnmatch.fnmatch("py.typed", pattern) for pattern in patterns)


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("matplotlib", ["evaluate", str(SAMPLE), "--rankers", "bm25", "--plot", "fig.png"], "plot"),
        ("matplotlib", ["compare", "--dataset", str(SAMPLE), "--rankers", "bm25,hidden_topics", "--plots", "figures"], "plot"),
        ("osmem_server", ["dev-cluster", "--bind", "127.0.0.1:1"], "dev-cluster"),
    ],
)
def test_an_optional_feature_without_its_extra_names_the_extra(
    module: str, argv: list[str], extra: str, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The light install (`pip install -e .`) lacks the extras; a command that needs one
    says which, in one line, before any work."""
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it raises ImportError
    code, out = run(data_dir, *argv)
    err = capsys.readouterr().err
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("reranker: error: ") and f'pip install "hidden-topic-reranker[{extra}]"' in err
    assert not (tmp_path / "fig.png").exists() and not (tmp_path / "figures").exists()


def test_the_product_depends_on_no_optional_feature() -> None:
    """What `pip install -e .` installs runs the product; plots, the test server, the
    neural anchor and the test tools are extras (the test extra takes the first two)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {re.split(r"[<>=\[ ]", requirement)[0].lower() for requirement in project["dependencies"]}
    assert not names & {"matplotlib", "osmem-server", "torch", "sentence-transformers", "pytest", "mypy", "ruff", "playwright"}
    extras = project["optional-dependencies"]
    assert any(requirement.startswith("matplotlib") for requirement in extras["plot"])
    assert any(requirement.startswith("osmem-server") for requirement in extras["dev-cluster"])
    assert "hidden-topic-reranker[plot,dev-cluster]" in extras["test"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # A typo in a command's options: that command's name, and the option it meant.
        (["search", "x", "--explian"],
         "reranker search: error: unrecognized argument --explian (did you mean --explain?; see reranker search --help)"),
        (["search", "--explian"],  # not "the following arguments are required: query"
         "reranker search: error: unrecognized argument --explian (did you mean --explain?; see reranker search --help)"),
        # The `2` was taken as the corpus, and the corpus called unrecognized.
        (["index", "--wokers", "2", "bad.jsonl"],
         "reranker index: error: unrecognized argument --wokers (did you mean --workers?; see reranker index --help)"),
        (["index", "--wokers=2", "bad.jsonl"],
         "reranker index: error: unrecognized argument --wokers (did you mean --workers?; see reranker index --help)"),
        (["ab", "create", "x", "--rankers", "bm25,wmd", "--wat"],
         "reranker ab create: error: unrecognized argument --wat (see reranker ab create --help)"),
        (["search", "x", "--data-dir", "/tmp"],
         "reranker search: error: --data-dir is an option of reranker itself: give it before the command (see reranker search --help)"),
        (["search", "one", "two"], "reranker search: error: unrecognized argument two (see reranker search --help)"),
        # A bad value: the line argparse wrote under its usage block, alone.
        (["search", "x", "--size", "abc"],
         "reranker search: error: argument --size: expected a whole number, got 'abc' (see reranker search --help)"),
        (["serve", "--workers", "0"], "reranker serve: error: argument --workers: must be >= 1, got 0 (see reranker serve --help)"),
        (["similar", "P01-1027", "--size", "0"],
         "reranker similar: error: argument --size: must be >= 1, got 0 (see reranker similar --help)"),
        # An unknown command, and an unknown option before one.
        (["serach", "x"], "reranker: error: unknown command 'serach' (did you mean 'search'?; see reranker --help)"),
        (["wibble"], "reranker: error: unknown command 'wibble' (see reranker --help)"),
        (["--data-dri", "/tmp", "search", "x"],
         "reranker: error: unrecognized argument --data-dri (did you mean --data-dir?; see reranker --help)"),
        # The unknown command first: its options are its own to read (a review found these).
        (["serach", "--explian", "x"], "reranker: error: unknown command 'serach' (did you mean 'search'?; see reranker --help)"),
        # A value that starts with "-": the option that lacks its value is what is wrong.
        (["tune", "d", "--weights", "-0.1,0.3"], "reranker tune: error: argument --weights: expected one argument (see reranker tune --help)"),
        (["search", "x", "--filter", "-x=1"], "reranker search: error: argument --filter: expected one argument (see reranker search --help)"),
        # reranker's own options after a command of a command.
        (["ab", "create", "x", "--rankers", "bm25,wmd", "--data-dir", "/tmp"],
         "reranker ab create: error: --data-dir is an option of reranker itself: give it before the command (see reranker ab create --help)"),
    ],
)
def test_a_command_line_argparse_refuses_is_one_line_naming_the_command(
    data_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as refused:
        run(data_dir, *argv)
    assert refused.value.code == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", said + "\n")


def test_values_that_look_like_options_are_still_values(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What argparse reads as a value (a lone `-`, a negative number, words with a space, an
    abbreviated option, anything after `--`) is not refused as an unknown option."""
    with pytest.raises(SystemExit):
        run(data_dir, "search", "x", "--fusion-weight", "-0.5")
    assert "must lie in [0, 1], got -0.5" in capsys.readouterr().err
    assert run(data_dir, "search", "-not an option", "--siz", "2")[0] == 1
    assert "no index in" in capsys.readouterr().err
    assert run(data_dir, "search", "--", "--explian")[0] == 1
    assert "no index in" in capsys.readouterr().err


def test_help_is_printed_whatever_else_the_line_holds(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        run(data_dir, "search", "--explian", "--help")
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: reranker search")


def test_filters_the_service_refuses_the_command_line_refuses(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`year>=NaN` reached the stores as float('nan'): 0 hits on the embedded store, a
    traceback from the OpenSearch store's range check (decimal.InvalidOperation); an integer
    beyond 64 bits was an OverflowError from SQLite; and 1,000 filters failed the search
    (SQLite's "Expression tree is too large"), where POST /search takes at most 100."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [dict(TINY_CORPUS[0], year=1998), dict(TINY_CORPUS[1], year=2005)])
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    capsys.readouterr()
    for value in ("NaN", "Infinity", "-Infinity"):
        assert run(data_dir, "search", "ocean", "--ranker", "bm25", "--filter", f"year>={value}")[0] == 1
        assert capsys.readouterr().err == f"reranker: error: cannot filter 'year' (gte '{value}'): the field holds numbers and '{value}' is not one\n"
    code, out = run(data_dir, "search", "ocean bread", "--ranker", "bm25", "--filter", "year<99999999999999999999999", "--json")
    assert code == 0 and [hit["id"] for hit in json.loads(out)["hits"]] == ["ships", "cooking"]  # both: compared as a double, as POST /search does
    many = [option for _ in range(101) for option in ("--filter", "year>=1990")]
    assert run(data_dir, "search", "ocean", *many)[0] == 1
    assert capsys.readouterr().err == "reranker: error: at most 100 --filter options, got 101\n"


def test_counts_are_singular_for_one(data_dir: Path, tmp_path: Path) -> None:
    """`reranker index` said "the index holds 1 documents"."""
    corpus = write_jsonl(tmp_path / "one.jsonl", TINY_CORPUS[:1])
    code, out = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 0 and out.splitlines()[0].endswith("; the index holds 1 document"), out
    again = write_jsonl(tmp_path / "two.jsonl", TINY_CORPUS[:2])
    code, out = run(data_dir, "index", str(again), "--no-progress")
    assert code == 0 and out.splitlines()[0].endswith("; the index holds 2 documents"), out


@pytest.mark.parametrize("level", ["info", "critical"])
def test_package_lines_under_gunicorn_never_raise_and_keep_its_level(level: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A log call with the wrong arguments raised TypeError where it was made (an except
    block that fails open: a 500), and gunicorn's --log-level critical did not silence the
    package's warnings."""
    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    from reranker.service.access import route_to_gunicorn

    package = logging.getLogger("reranker")
    saved = (list(package.handlers), package.propagate)
    config = Config()
    config.set("loglevel", level)
    Logger(config)
    try:
        route_to_gunicorn()
        logging.getLogger("reranker.store.opensearch").warning("bad args %d", "not a number")  # must not raise
        logging.getLogger("reranker.store.opensearch").warning("the cluster is %s", "slow")
    finally:
        package.handlers, package.propagate = saved
        for name in ("gunicorn.error", "gunicorn.access"):
            logging.getLogger(name).handlers = []
    err = capsys.readouterr().err
    assert ("[WARNING] reranker.store.opensearch: the cluster is slow" in err) == (level == "info"), err
    assert "Traceback" not in err or level == "info"  # logging's own report of the bad call, to stderr


def test_serve_on_a_cluster_with_no_index_warns_of_the_answers_it_gives(data_dir: Path, osmem_clone: Any) -> None:
    """It warned "the index is empty: /search finds nothing", as on the embedded store, while
    /search answered 404 and /readyz 503 (tests/test_service.py has the embedded store's)."""
    service = Service(data_dir, {"OPENSEARCH_URL": osmem_clone.url, "RERANKER_INDEX": "papers"}, threads=2, probe="/healthz")
    try:
        searched, _, body = http_json(service.url + "/search", {"query": "machine translation"})
        ready, _, _ = http_json(service.url + "/readyz")
        reranked, _, _ = http_json(service.url + "/rerank", {"query": "bread", "documents": ["bread and yeast", "ships at sea"]})
    finally:
        output = service.stop()
    assert (searched, ready, reranked) == (404, 503, 200), body
    (warning,) = [line for line in output.splitlines() if "[WARNING] reranker: " in line]  # the master's, before gunicorn starts
    assert "the index is empty" not in warning and "finds nothing" not in warning, warning
    assert (
        "reranker: there is no index 'papers' yet: /search answers 404 (index_not_found_exception) and /readyz 503 until "
        "`reranker index CORPUS.jsonl` makes it (or RERANKER_INDEX names one that exists); /rerank and the Cohere routes rerank sent texts "
        "meanwhile, by their order, topics and best passages"
    ) in warning, warning


def test_serve_writes_the_packages_log_lines_as_gunicorn_writes_its_own(data_dir: Path) -> None:
    """`[time] [pid] [LEVEL] logger: message`, in the master before gunicorn starts and in a
    worker: the package's lines said `WARNING reranker...: ...`, with no time and no pid
    among gunicorn's lines, which have both."""
    service = Service(data_dir, {"RERANKER_DEFAULT_RANKER": "doc2vec"}, workers=1, threads=1)
    output = service.stop()
    stamped = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[(\d+)\] \[WARNING\] "
    # The master: an empty index (cli/serving.py).
    master = re.search(stamped + r"reranker: the index is empty: ", output, re.MULTILINE)
    assert master is not None and int(master[1]) == service.process.pid, output
    # A worker: the default ranker has no model yet (service/reranking.py, as it boots).
    worker = re.search(stamped + r"reranker\.service\.reranking: the default ranker cannot run yet: ", output, re.MULTILINE)
    booted = re.search(r"\[INFO\] Booting worker with pid: (\d+)$", output, re.MULTILINE)
    assert worker is not None and booted is not None and worker[1] == booted[1] != master[1], output
    assert output.count("the default ranker cannot run yet") == 1  # not again through the root logger


def test_train_help_gives_the_models_own_defaults() -> None:
    """`reranker train`'s --dim, --epochs, --window and --min-count default to the model's
    parameters (None is passed on); their help writes those defaults out, so it must follow
    Word2VecParams and Doc2VecParams (the parser cannot import gensim to read them)."""
    from reranker.cli import build_parser
    from reranker.doc2vec import Doc2VecParams
    from reranker.embeddings import Word2VecParams

    train = next(a.choices for a in build_parser()._actions if a.choices and "train" in a.choices)["train"]  # type: ignore[index]
    helps = {action.option_strings[-1]: action.help or "" for action in train._actions if action.option_strings}
    w2v, d2v = Word2VecParams(), Doc2VecParams()
    assert f"(default: word2vec {w2v.dim}, doc2vec {d2v.dim})" in helps["--dim"]
    assert f"(default: word2vec {w2v.epochs}, doc2vec {d2v.epochs})" in helps["--epochs"]
    assert w2v.window == d2v.window and f"(default {w2v.window})" in helps["--window"]
    assert w2v.min_count == d2v.min_count and f"(default {w2v.min_count})" in helps["--min-count"]


def _imported_by(code: str) -> set[str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", f"import sys; {code}; print(' '.join(sorted(sys.modules)))"], capture_output=True, text=True, check=True, cwd=REPO)
    return set(done.stdout.split())


def test_building_the_parser_imports_no_command_s_work() -> None:
    """Every command builds the whole parser before it runs, so what the parser imports
    every `reranker` start pays, `search` included (`python bench/bench_startup.py`). It
    imports none of the modules that do a command's work: the tuning and evaluation code
    (which `tune`'s defaults once pulled in, with the search pipeline beneath them: about
    0.1 s of a search's 0.6 s on a busy machine), nor gensim, scipy, the store's back
    ends or the web service."""
    loaded = _imported_by("from reranker.cli import build_parser; build_parser()")
    assert "reranker.cli" in loaded
    heavy = {
        "reranker.tuning", "reranker.evaluation", "reranker.pipeline", "reranker.comparison", "reranker.indexing",
        "reranker.store", "reranker.service", "gensim", "scipy", "tantivy", "opensearchpy", "flask",
    }
    assert heavy.isdisjoint(loaded), sorted(heavy & loaded)


def test_indexing_loads_gensim_only_for_an_index_with_a_doc2vec_model() -> None:
    """`reranker index` and each topic worker it spawns import reranker.indexing; gensim (about
    1 s of CPU and tens of MB per process) is needed only to infer Doc2Vec vectors, which an
    index without a model never does. Importing it there once made indexing the sample
    corpus take twice as long."""
    loaded = _imported_by("import reranker.indexing")
    assert "reranker.indexing" in loaded and "gensim" not in loaded and "scipy" not in loaded
