"""Judgments from clicks (`reranker ab judgments`): the COEC click model, the event stores'
impressions, and an end-to-end check against a known truth.

End to end: simulated users whose relevance is the sample corpus's qrels, and who examine
a result less the lower it is shown, search the real app (an experiment interleaving BM25
with the paper's formula over the real embedded store) and click; the judged data set the
command writes must rank the two rankers as the qrels do when `reranker evaluate` reads it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import SAMPLE, run, sample_indexed, settings_env
from flask.testing import FlaskClient

from reranker.config import OpenSearchSettings, Settings
from reranker.datasets import load_qrels, load_queries
from reranker.interleaving import interleave
from reranker.judgments import Impression, ctr_by_rank, grade, judge, query_id
from reranker.service import create_app
from reranker.store.events import EmbeddedEventStore, Event, EventStore, Experiment, OpenSearchEventStore, ShownQuery

ADMIN = "test-admin-key"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
QUERIES = load_queries(SAMPLE / "queries.jsonl")
TRUTH = load_qrels(SAMPLE / "qrels.tsv")
RANKERS = ("bm25", "hidden_topics")
# A query searched too rarely for any of its pairs to reach the default 10 impressions.
RARE_QUERY = "statistical machine translation with word alignment"


# --- the click model ------------------------------------------------------------------------


def test_coec_corrects_for_position() -> None:
    # "top" is always shown first and clicked 5 times in 10: the rate of rank 1 itself.
    # "low" is shown third and clicked 3 times in 10, where the rank's other hits were
    # clicked once in 10: fewer raw clicks than "top", but three times the expected.
    lists = [Impression("q", ("top", "mid", "low"), frozenset({"top"} if i < 5 else set()) | ({"low"} if i < 3 else set())) for i in range(10)]
    lists += [Impression("p", ("x", "y", "z"), frozenset({"x"} if i < 5 else set()) | ({"z"} if i == 0 else set())) for i in range(10)]
    ctr = ctr_by_rank(lists)
    assert ctr == {1: 0.5, 2: 0.0, 3: 0.2}
    judged = {(j.text, j.doc_id): j for j in judge(lists, min_impressions=10).judgments}
    assert judged["q", "top"].coec == pytest.approx(1.0) and judged["q", "top"].grade == 2
    assert judged["q", "low"].coec == pytest.approx(1.5) and judged["q", "low"].grade == 2
    assert judged["p", "z"].coec == pytest.approx(0.5) and judged["p", "z"].grade == 1
    # Nothing at rank 2 was ever clicked: no evidence, COEC 0 and grade 0.
    assert judged["q", "mid"].coec == 0.0 and judged["q", "mid"].grade == 0
    assert judged["q", "low"].expected_clicks == pytest.approx(2.0) and judged["q", "low"].impressions == 10


def test_a_later_page_is_counted_at_its_own_ranks() -> None:
    lists = [Impression("q", ("a",), frozenset({"a"})), Impression("q", ("b",), frozenset(), first_rank=11)]
    assert ctr_by_rank(lists) == {1: 1.0, 11: 0.0}


def test_pairs_with_too_few_impressions_are_dropped_and_counted() -> None:
    lists = [Impression("often", ("a", "b"), frozenset({"a"})) for _ in range(5)]
    lists += [Impression("rare", ("a", "c"), frozenset({"c"})) for _ in range(4)]
    judged = judge(lists, min_impressions=5)
    assert {(j.text, j.doc_id) for j in judged.judgments} == {("often", "a"), ("often", "b")}
    assert (judged.pairs, judged.dropped_pairs, judged.queries, judged.dropped_queries) == (4, 2, 2, 1)
    assert judged.most_impressions == 5 and judged.query_texts == {query_id("often"): "often"}
    assert judged.summary()["pairs_dropped"] == 2 and judged.summary()["queries_dropped"] == 1
    assert judged.summary()["documents_judged"] == 2


def test_a_doc_id_with_a_control_character_is_left_out_and_counted() -> None:
    # Ids this product reads are refused with one (`datasets.record_id`); a cluster someone
    # else indexed may still return one, and qrels.tsv's row would split at its tab.
    lists = [Impression("q", ("a\tb", "c", "line\nbreak"), frozenset({"a\tb", "c"})) for _ in range(5)]
    judged = judge(lists, min_impressions=5)
    assert [j.doc_id for j in judged.judgments] == ["c"]
    assert (judged.pairs, judged.dropped_pairs, judged.unwritable_pairs) == (3, 0, 2)
    assert judged.summary()["pairs_with_unwritable_ids"] == 2


def test_grades_follow_the_thresholds() -> None:
    assert [grade(value, (0.5, 1.0, 2.0)) for value in (0.0, 0.49, 0.5, 0.99, 1.0, 1.99, 2.0, 7.0)] == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(Exception, match="increasing"):
        judge([], thresholds=(1.0, 0.5))


# --- both event stores list every shown list with its clicks --------------------------------


@pytest.fixture(params=["embedded", "opensearch"])
def event_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "embedded":
        store: EventStore = EmbeddedEventStore(tmp_path / "experiments.sqlite3")
        yield store
        store.close()
        return
    from reranker.store.opensearch import OpenSearchStore

    cluster = request.getfixturevalue("osmem_server").clone()
    store = OpenSearchEventStore(OpenSearchStore(OpenSearchSettings(hosts=(cluster.url,), alias="papers")))
    yield store
    store.close()
    cluster.close()


def test_the_stores_list_every_shown_query_with_its_clicks(event_store: EventStore) -> None:
    event_store.create_experiment(Experiment("exp", RANKERS, "team_draft", 1.0, "running", "2026-11-26T00:00:00Z"))
    for number in range(3):
        shown = interleave("team_draft", ["a", "b", "c"], ["c", "b", "a"], 3, seed=number)
        event_store.record_query(ShownQuery(f"q{number}", "exp", None, "text", "2026-11-26T00:00:00Z", shown))
    other = interleave("team_draft", ["a"], ["a"], 1, seed=0)
    event_store.record_query(ShownQuery("elsewhere", "other", None, "text", "2026-11-26T00:00:00Z", other))

    def event(event_id: str, query: str, action: str, object_id: str | None, experiment: str = "exp") -> Event:
        return Event(event_id, query, experiment, None, action, object_id, None, "2026-11-26T00:00:01Z")

    event_store.record_event(event("e1", "q0", "click", "b"))
    event_store.record_event(event("e2", "q0", "click", "c"))
    event_store.record_event(event("e3", "q0", "click", "c"))  # twice: counted once
    event_store.record_event(event("e4", "q2", "hover", "a"))  # not a click
    event_store.record_event(event("e5", "elsewhere", "click", "a", experiment="other"))
    listed = list(event_store.impressions("exp"))
    assert [(shown.query_id, clicked) for shown, clicked in listed] == [
        ("q0", frozenset({"b", "c"})), ("q1", frozenset()), ("q2", frozenset()),
    ]
    assert set(listed[0][0].shown) == {"a", "b", "c"}


# --- end to end: simulated users with a known truth -------------------------------------------


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    return sample_indexed(tmp_path_factory, "judgments")


@pytest.fixture(scope="module")
def client(indexed: Path) -> Iterator[FlaskClient]:
    app = create_app(Settings.from_env({**settings_env(indexed), "RERANKER_ADMIN_API_KEY": ADMIN}))
    yield app.test_client()
    app.extensions["reranker"].close()


def _search_and_click(client: FlaskClient, text: str, client_id: str, relevant: dict[str, int], rng: random.Random) -> None:
    """One user: a page of 10 interleaved hits, each examined with probability 1/rank and,
    once examined, clicked with probability 0.7 when relevant in the truth, else 0.05."""
    body = client.post("/search", json={"query": text, "size": 10, "client_id": client_id}).get_json()
    assert body["experiment"]["id"] == "truth", body
    for hit in body["hits"]:
        if rng.random() < 1.0 / hit["rank"] and rng.random() < (0.7 if hit["id"] in relevant else 0.05):
            event = {
                "action_name": "click", "query_id": body["query_id"], "client_id": client_id,
                "event_attributes": {"object": {"object_id": hit["id"], "object_id_field": "_id"}, "position": {"ordinal": hit["rank"]}},
            }
            assert client.post("/events", json=event).status_code == 201


@pytest.fixture(scope="module")
def simulated(client: FlaskClient, indexed: Path) -> str:
    """The experiment "truth" after 40 users per sample query and 3 of RARE_QUERY."""
    answer = client.post("/experiments", json={"id": "truth", "rankers": list(RANKERS), "traffic": 1.0}, headers=AUTH)
    assert answer.status_code == 201, answer.get_data(as_text=True)
    rng = random.Random(26)
    for number in range(40):
        for qid, text in QUERIES:
            # Each user a client of their own: team-draft's coin flips differ between them.
            _search_and_click(client, text, f"user-{number}-{qid}", TRUTH[qid], rng)
    for number in range(3):
        _search_and_click(client, RARE_QUERY, f"rare-{number}", {}, rng)
    assert client.patch("/experiments/truth", json={"status": "stopped"}, headers=AUTH).status_code == 200
    return "truth"


def _ndcg(data_dir: Path, dataset: Path) -> dict[str, float]:
    code, out = run(data_dir, "evaluate", str(dataset), "--rankers", ",".join(RANKERS), "--json", "--no-progress")
    assert code == 0, out
    results: dict[str, Any] = json.loads(out)["results"]
    return {name: float(results[name]["ndcg@10"]) for name in RANKERS}


def test_judgments_from_clicks_rank_the_rankers_as_the_truth_does(simulated: str, indexed: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "judged"
    code, out = run(indexed, "ab", "judgments", simulated, "--out", str(out_dir), "--corpus", str(SAMPLE / "corpus.jsonl"))
    assert code == 0, out
    report = json.loads((out_dir / "judgments.json").read_text())
    assert report["click_model"] == "coec" and report["rankers"] == list(RANKERS)
    assert report["lists_shown"] == 40 * len(QUERIES) + 3
    # Every sample query judged; the rare one dropped, and the report says so.
    assert report["queries_judged"] == len(QUERIES) and report["queries_dropped"] == 1
    assert f"judged {len(QUERIES)} of {len(QUERIES) + 1} queries" in out and "1 query left with no judged pair" in out
    assert query_id(RARE_QUERY) not in (out_dir / "queries.jsonl").read_text()
    # Position corrected: the click-through rate falls with the rank. Compared over bands of
    # ranks: below rank 4 a rank has a handful of clicks in 203 lists, and the order of two
    # single ranks there is the coins' (rank 10 above rank 5 in some runs).
    ctr = report["ctr_by_rank"]
    top, middle, bottom = (sum(ctr[str(r)] for r in ranks) / len(ranks) for ranks in ((1,), (2, 3, 4), range(5, 11)))
    assert top > middle > bottom, ctr
    # The grades carry the truth: most pairs graded above 0 are relevant (19 of 26 in this
    # run; low ranks' few expected clicks make COEC noisy), few graded 0 are (0 of 27).
    text_to_truth = {query_id(text): TRUTH[qid] for qid, text in QUERIES}
    rows = [line.split("\t") for line in (out_dir / "qrels.tsv").read_text().splitlines()]
    relevant = [d in text_to_truth[q] for q, d, g in rows if int(g) > 0]
    not_relevant = [d in text_to_truth[q] for q, d, g in rows if int(g) == 0]
    assert len(relevant) >= 10 and sum(relevant) / len(relevant) >= 0.5, rows
    assert len(not_relevant) >= 10 and sum(not_relevant) / len(not_relevant) <= 0.2, rows

    truth = _ndcg(indexed, SAMPLE)
    assert truth["bm25"] > truth["hidden_topics"] + 0.1, truth  # the premise: a clear order
    by_clicks = _ndcg(indexed, out_dir)  # 0.736 against 0.386 in this run (0.780 and 0.338 by the truth)
    assert by_clicks["bm25"] > by_clicks["hidden_topics"], (by_clicks, truth)


def test_the_shown_documents_are_the_corpus_without_corpus(simulated: str, indexed: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "judged"
    code, out = run(indexed, "ab", "judgments", simulated, "--out", str(out_dir), "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert "read from the index" in summary["corpus"]
    corpus = [json.loads(line) for line in (out_dir / "corpus.jsonl").read_text().splitlines()]
    judged = {line.split("\t")[1] for line in (out_dir / "qrels.tsv").read_text().splitlines()}
    assert judged <= {doc["id"] for doc in corpus} and all(doc["text"] for doc in corpus)


def test_bad_requests_are_one_line_errors(simulated: str, indexed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code, _ = run(indexed, "ab", "judgments", simulated, "--out", str(tmp_path / "a"), "--min-impressions", "1000")
    err = capsys.readouterr().err
    assert code == 1 and "shown 1000 times yet (the most any was shown: " in err and "lower --min-impressions" in err
    assert not (tmp_path / "a").exists(), "nothing is written when nothing could be judged"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    code, _ = run(indexed, "ab", "judgments", simulated, "--out", str(tmp_path / "full"))
    assert code == 2 and "holds files already" in capsys.readouterr().err
    # Refused before the events are read, as every output that cannot be written.
    (tmp_path / "a-file").write_text("")
    code, _ = run(indexed, "ab", "judgments", simulated, "--out", str(tmp_path / "a-file" / "judged"))
    assert code == 2
    assert capsys.readouterr().err == f"reranker: error: --out {tmp_path / 'a-file' / 'judged'}: {tmp_path / 'a-file'} is not a folder\n"
    code, _ = run(indexed, "ab", "judgments", simulated, "--out", "/proc/judged")
    assert (code, capsys.readouterr().err) == (2, "reranker: error: --out /proc/judged: cannot write there: No such file or directory\n")
    code, _ = run(indexed, "ab", "judgments", "nope", "--out", str(tmp_path / "b"))
    assert code == 1 and "no experiment 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        run(indexed, "ab", "judgments", simulated, "--out", str(tmp_path / "c"), "--grades", "2,1")
    assert exited.value.code == 2 and "increasing" in capsys.readouterr().err
