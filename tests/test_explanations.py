"""Explanations are true: what they show adds up to the score they explain, for every
ranker that scores by topics, and the CLI, /search and the page show the same topics in
the same order (issue 22).

Real engines over the bundled sample corpus and the bundled GloVe vectors, real windows of
BM25 candidates; a Doc2Vec model is trained (small) so that its fusions run too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from conftest import SAMPLE, run, settings_env
from pydantic import ValidationError

from reranker.config import DEFAULT_RANKER, Settings
from reranker.pipeline import EXPLAIN_TOPICS, Engine, build_engine, explained_ranker, strongest_topics
from reranker.rankers import RankerOptions, get_ranker, ranker_names
from reranker.service import create_app
from reranker.service.schema import SearchAnswer
from reranker.types import RankedDoc

QUERIES = [json.loads(line)["text"] for line in (SAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
WINDOW = 20  # of the 25 sample papers
WEIGHT = 0.3
# Every registered ranker whose scores topics explain: the three topic formulas, alone and
# in every fusion (min-max, z-score, RRF; with BM25, Doc2Vec and WMD).
TOPIC_RANKERS = [name for name in ranker_names() if explained_ranker(get_ranker(name)) is not None]


def _settings(data_dir: Path) -> Settings:
    return Settings.from_env({**settings_env(data_dir), "RERANKER_FUSION_WEIGHT": str(WEIGHT)})


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    data_dir = tmp_path_factory.mktemp("explanations") / "data"
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    assert run(data_dir, "train", "doc2vec", str(SAMPLE / "corpus.jsonl"), "--dim", "32", "--epochs", "10", "--no-progress")[0] == 0
    return data_dir


@pytest.fixture(scope="module")
def engine(indexed: Path) -> Iterator[Engine]:
    built = build_engine(_settings(indexed))
    yield built
    built.store.close()


def _shown_plus_rest(hit: RankedDoc) -> float:
    assert hit.explanation is not None
    return sum(topic.contribution for topic in hit.explanation.topics) + hit.explanation.rest_contribution


def test_every_topic_ranker_is_covered() -> None:
    names = set(TOPIC_RANKERS)
    for base in ("hidden_topics", "hidden_topics_code", "hidden_topics_corrected"):
        assert {base, f"{base}+bm25", f"{base}+bm25:zscore", f"{base}+bm25:rrf"} <= names
    assert "hidden_topics_corrected+doc2vec+wmd+bm25" in names and "doc2vec+bm25" not in names and "bm25" not in names


@pytest.mark.parametrize("name", TOPIC_RANKERS)
def test_what_an_explanation_shows_adds_up_to_the_score(engine: Engine, name: str) -> None:
    """For every hit of a real window: the parts add up to the hit's score (the fused one
    for a fusion), and the topics shown plus the rest to the topic ranker's own score."""
    topic_ranker = explained_ranker(engine.ranker(name))
    assert topic_ranker is not None
    # WMD costs about a second a window: one query for its fusions (which may be partial: WMD
    # orders some candidates by a bound when its budget runs out; the parts still add up).
    for query in QUERIES[: 1 if "wmd" in name else 2]:
        result = engine.search(query, name, window=WINDOW, size=WINDOW, explain=True)
        assert result.status in ("ok", "partial") and len(result.hits) == WINDOW
        for hit in result.hits:
            explanation = hit.explanation
            assert explanation is not None and explanation.topic_ranker == topic_ranker.name
            assert explanation.score == hit.score
            assert sum(value for _, value in explanation.parts) == pytest.approx(hit.score, rel=1e-12, abs=1e-15)
            # The topic ranker speaks for the fusion: its own score is the hit's ranker_score.
            assert explanation.topic_score == hit.ranker_score
            assert _shown_plus_rest(hit) == pytest.approx(hit.ranker_score, rel=1e-9, abs=1e-12)
            shown = [topic.contribution for topic in explanation.topics]
            assert shown == sorted(shown, reverse=True) and len(shown) == EXPLAIN_TOPICS
            assert explanation.rest_topics == 15 - EXPLAIN_TOPICS  # K = 15, every sample paper has them all
            assert len({topic.rank for topic in explanation.topics}) == len(shown)
            assert all(len(topic.topic_words) == 5 and topic.query_words for topic in explanation.topics)
            if "+" not in name:
                assert explanation.parts == (("topics", hit.score),)
            # The set it names is the one its topics come from: topic N's importance is the
            # stored importance of topic N of that set (the two sets' topic 1 differ).
            assert explanation.topic_set == ("corrected" if topic_ranker.variant == "corrected" else "paper")
            stored = engine.store.topics([hit.doc_id], corrected=explanation.topic_set == "corrected").importances[0]
            assert [topic.importance for topic in explanation.topics] == pytest.approx([float(stored[topic.rank - 1]) for topic in explanation.topics], rel=1e-6)


@pytest.mark.parametrize("name", ["hidden_topics_corrected+bm25", "hidden_topics_corrected+doc2vec+bm25", "hidden_topics_corrected+doc2vec+wmd+bm25"])
def test_a_fusions_parts_are_its_rankers_shares(engine: Engine, name: str) -> None:
    """Min-max fusion: BM25's part is (1 - w) x minmax(bm25), so 1 - w for BM25's top hit and
    0 for its last; each ranker's part lies in [0, w / n]."""
    result = engine.search(QUERIES[0], name, window=WINDOW, size=WINDOW, explain=True)
    bases = name.split("+")[:-1]
    for hit in result.hits:
        assert hit.explanation is not None
        parts = dict(hit.explanation.parts)
        assert list(parts) == ["topics", *bases[1:], "bm25"]
        assert all(0.0 <= parts[label] <= WEIGHT / len(bases) + 1e-12 for label in parts if label != "bm25")
        if hit.bm25_rank == 1:
            assert parts["bm25"] == pytest.approx(1 - WEIGHT)
        if hit.bm25_rank == WINDOW:
            assert parts["bm25"] == pytest.approx(0.0, abs=1e-12)
    assert max(dict(h.explanation.parts)["topics"] for h in result.hits if h.explanation) == pytest.approx(WEIGHT / len(bases))


def test_a_ranker_without_topics_has_no_explanation(engine: Engine) -> None:
    for name in ("bm25", "wmd+bm25"):
        result = engine.search(QUERIES[0], name, window=WINDOW, size=3, explain=True)
        assert all(hit.explanation is None for hit in result.hits)
        assert all("explanation" not in hit.to_json(explain=True) for hit in result.hits)


def test_the_cli_and_search_explain_a_hit_with_the_same_topics_in_the_same_order(indexed: Path) -> None:
    app = create_app(_settings(indexed))
    client = app.test_client()
    try:
        for name in (DEFAULT_RANKER, "hidden_topics_corrected+bm25", "hidden_topics", "hidden_topics_code+bm25:rrf"):
            code, out = run(indexed, "search", QUERIES[1], "--json", "--ranker", name, "--size", "5", "--explain")
            assert code == 0
            printed = json.loads(out)["hits"]
            served = client.post("/search", json={"query": QUERIES[1], "ranker": name, "size": 5, "explain": True}).get_json()["hits"]
            assert [h["id"] for h in printed] == [h["id"] for h in served]
            for cli_hit, api_hit in zip(printed, served):
                assert [t["topic"] for t in cli_hit["explanation"]["topics"]] == [t["topic"] for t in api_hit["explanation"]["topics"]]
                assert cli_hit["explanation"] == api_hit["explanation"]  # one computation, one JSON shape
                explanation = api_hit["explanation"]
                assert set(explanation) == {"score", "parts", "topic_ranker", "topic_set", "topic_score", "topics", "rest"}
                assert explanation["score"] == api_hit["score"] and explanation["topic_score"] == api_hit["ranker_score"]
                assert sum(explanation["parts"].values()) == pytest.approx(api_hit["score"], rel=1e-12)
                total = sum(t["contribution"] for t in explanation["topics"]) + explanation["rest"]["contribution"]
                assert total == pytest.approx(api_hit["ranker_score"], rel=1e-9, abs=1e-12)
    finally:
        app.extensions["reranker"].close()


def test_the_text_output_is_the_explanation_line_by_line(indexed: Path) -> None:
    """`search --explain` prints the parts, the topic score, the shown topics in the
    explanation's order and one line for the rest."""
    code, out = run(indexed, "search", QUERIES[0], "--ranker", "hidden_topics_corrected+bm25", "--size", "1", "--explain")
    assert code == 0
    lines = [line.strip() for line in out.splitlines()[2:]]
    served = json.loads(run(indexed, "search", QUERIES[0], "--json", "--ranker", "hidden_topics_corrected+bm25", "--size", "1", "--explain")[1])
    explanation = served["hits"][0]["explanation"]
    assert lines[0].startswith(f"score {explanation['score']:.4f} = topics {explanation['parts']['topics']:.4f} + bm25 {explanation['parts']['bm25']:.4f}")
    assert lines[1].startswith(f"hidden_topics_corrected score {explanation['topic_score']:.5f} = the sum of its 15 corrected topics' contributions")
    assert [line.split(":")[0] for line in lines[2 : 2 + EXPLAIN_TOPICS]] == [f"topic {t['topic']}" for t in explanation["topics"]]
    assert lines[2 + EXPLAIN_TOPICS] == f"the other 10 topics together -> {explanation['rest']['contribution']:+.5f}"
    assert len(lines) == 3 + EXPLAIN_TOPICS


def test_ranker_options_do_not_change_which_topics_are_explained(engine: Engine) -> None:
    """The weight changes the parts, not the topic ranker's explanation."""
    light = engine.search(QUERIES[2], "hidden_topics_corrected+bm25", window=WINDOW, size=WINDOW, explain=True)
    heavy_engine = Engine(store=engine.store, vectors=engine.vectors, ranker_options=RankerOptions(fusion_weight=0.9))
    heavy = heavy_engine.search(QUERIES[2], "hidden_topics_corrected+bm25", window=WINDOW, size=WINDOW, explain=True)
    by_id = {hit.doc_id: hit for hit in heavy.hits}
    for hit in light.hits:
        other = by_id[hit.doc_id]
        assert hit.explanation is not None and other.explanation is not None
        assert hit.explanation.topics == other.explanation.topics and hit.explanation.topic_score == other.explanation.topic_score
        assert dict(other.explanation.parts)["topics"] == pytest.approx(dict(hit.explanation.parts)["topics"] * 0.9 / WEIGHT)


def test_topics_are_shown_largest_contribution_first_ties_by_importance() -> None:
    assert strongest_topics(np.array([0.1, -0.2, 0.3, 0.1, 0.0])) == [2, 0, 3, 4, 1]
    assert strongest_topics(np.zeros(0)) == []


def test_the_published_schema_describes_the_explanations_served(indexed: Path) -> None:
    """/openapi.json is generated from schema.py's models: they publish the explanation's
    shape, and an answer with explanations validates against them (the former shape, a
    list of every topic, does not)."""
    app = create_app(_settings(indexed))
    try:
        client = app.test_client()
        document: dict[str, Any] = client.get("/openapi.json").get_json()
        published = document["components"]["schemas"]["Explanation"]
        assert set(published["properties"]) == {"score", "parts", "topic_ranker", "topic_set", "topic_score", "topics", "rest"}
        assert set(published["required"]) == set(published["properties"])
        assert document["components"]["schemas"]["Hit"]["properties"]["explanation"]["$ref"] == "#/components/schemas/Explanation"
        answer = client.post("/search", json={"query": QUERIES[0], "size": 3, "explain": True}).get_json()
        assert all("explanation" in hit for hit in answer["hits"])
        SearchAnswer.model_validate(answer, strict=True)
        answer["hits"][0]["explanation"] = answer["hits"][0]["explanation"]["topics"]
        with pytest.raises(ValidationError):
            SearchAnswer.model_validate(answer)
    finally:
        app.extensions["reranker"].close()
