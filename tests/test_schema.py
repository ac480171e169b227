"""The wire format: typed request models, the errors they give, and the OpenAPI document
generated from them (service/schema.py, service/operations.py). No HTTP here but a bare
Flask app; tests/test_service.py and tests/test_fuzz.py send the same bodies over the app."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from flask import Flask

from reranker.config import ServiceSettings
from reranker.experiments import STATUSES
from reranker.interleaving import METHODS
from reranker.service.errors import ApiError
from reranker.service.operations import Reply, openapi_document, operation
from reranker.service.schema import (
    CohereRequest,
    ExperimentChange,
    FilterClause,
    NewExperiment,
    RerankExt,
    RerankRequest,
    SearchRequest,
    UbiEvent,
    read,
)
from reranker.types import FILTER_OPS, MAX_FILTER_VALUE_CHARS

LIMITS = ServiceSettings(max_text_chars=50, max_window=100, max_documents=3)


def _refusal(model: Any, body: Any, where: str = "") -> ApiError:
    with pytest.raises(ApiError) as refused:
        read(model, body, where=where, limits=LIMITS)
    return refused.value


@pytest.mark.parametrize(
    "model, body, status, reason",
    [
        (SearchRequest, {}, 400, "[query] is required"),
        (SearchRequest, {"query": 3}, 400, "[query] must be a string, got a number"),
        (SearchRequest, {"query": " \t"}, 400, "[query] must not be empty"),
        (SearchRequest, {"query": "x" * 51}, 413, "[query] has 51 characters; the limit is 50 (RERANKER_MAX_TEXT_CHARS)"),
        (SearchRequest, {"query": "ships", "size": "10"}, 400, "[size] must be an integer, got a string"),
        (SearchRequest, {"query": "ships", "size": 1.5}, 400, "[size] must be an integer, got a number"),
        (SearchRequest, {"query": "ships", "explain": 1}, 400, "[explain] must be true or false, got a number"),
        (SearchRequest, {"query": "ships", "from": -1}, 400, "[from] must be >= 0, got -1"),
        (SearchRequest, {"query": "ships", "window": 101}, 400, "[window] must be <= 100 (RERANKER_MAX_WINDOW), got 101"),
        (SearchRequest, {"query": "ships", "from": 101, "size": 10}, 400, "[from] must be <= 100 (RERANKER_MAX_WINDOW), got 101"),
        (SearchRequest, {"query": "ships", "size": 1e300}, 400, "[size] must be <= 100 (RERANKER_MAX_WINDOW), got an integer of 301 digits"),
        (SearchRequest, {"query": "ships", "size": 10.5}, 400, "[size] must be an integer, got a number"),
        (SearchRequest, {"query": "ships", "fusion_weight": 1.5}, 400, "[fusion_weight] must be <= 1.0, got 1.5"),
        (SearchRequest, {"query": "ships", "ranker": "wmd+bm25:rrf", "fusion_weight": 0.5}, 400, "[fusion_weight] weighs a min-max, z-score or maxp fusion with BM25; ranker 'wmd+bm25:rrf' has no weight (reciprocal rank fusion uses ranks only): leave fusion_weight out, or name such a fusion"),
        # A misspelt required field is also an unknown one: the refusal names what was sent.
        (SearchRequest, {"qeury": "ships"}, 400, "unknown field [qeury]; known fields: client_id, explain, filters, from, fusion_weight, query, ranker, size, snippets, window"),
        (SearchRequest, {"query": "ships", "filters": [{"feild": "year", "value": 1}]}, 400, "unknown field [filters[0].feild]; known fields: field, op, value"),
        (RerankRequest, {"query": "ships", "docs": ["a"]}, 400, "unknown field [docs]; known fields: documents, fusion_weight, query, ranker, size"),
        (UbiEvent, {"action": "click", "query_id": "q"}, 400, "unknown field [action]; known fields: action_name, application, client_id, event_attributes, event_id, message, message_type, query_id, session_id, timestamp, user_id"),
        (SearchRequest, {"query": "ships", "windw": 5}, 400, "unknown field [windw]; known fields: client_id, explain, filters, from, fusion_weight, query, ranker, size, snippets, window"),
        (SearchRequest, {"query": "ships", "filters": {"year": 1}}, 400, "[filters] must be an array, got an object"),
        (SearchRequest, {"query": "ships", "filters": [{"field": "year", "op": "like", "value": 1}]}, 400, "[filters[0].op] must be one of 'eq', 'gt', 'gte', 'lt' or 'lte', got 'like'"),
        (SearchRequest, {"query": "ships", "filters": [{"field": "year"}]}, 400, "[filters[0].value] is required"),
        (SearchRequest, {"query": "ships", "filters": [{"field": "open", "op": "gt", "value": True}]}, 400, "[filters[0]] a boolean value can only be compared with op eq"),
        (SearchRequest, {"query": "ships", "filters": [{"field": "year", "value": 1, "colour": 2}]}, 400, "unknown field [filters[0].colour]; known fields: field, op, value"),
        # A filter's value takes several types: the refusal names the field, not a type pydantic tried.
        (SearchRequest, {"query": "ships", "filters": [{"field": "year", "value": [1]}]}, 400, "[filters[0].value] must be a string, a number or a boolean, got an array"),
        (SearchRequest, {"query": "ships", "filters": [{"field": "year", "value": 10**400}]}, 400, "[filters[0].value] must be a number within a double's range (about ±1.8e308), got an integer of 401 digits"),
        (SearchRequest, {"query": "ships", "fusion_weight": 10**309}, 400, "[fusion_weight] must be a number within a double's range (about ±1.8e308), got an integer of 310 digits"),
        (SearchRequest, {"query": "ships", "client_id": "c" * 101}, 400, "[client_id] must be at most 100 characters, got 101"),
        (RerankRequest, {"query": "ships"}, 400, "[documents] is required"),
        (RerankRequest, {"query": "ships", "documents": ["a"] * 4}, 413, "[documents] has 4 documents; the limit is 3 (RERANKER_MAX_DOCUMENTS)"),
        (RerankRequest, {"query": "ships", "documents": ["a", 3]}, 400, '[documents[1]] must be a string or an object with "text" and/or "id"'),
        (RerankRequest, {"query": "ships", "documents": [{}]}, 400, '[documents[0]] needs a "text" or an "id"'),
        (RerankRequest, {"query": "ships", "documents": [{"id": ["a"]}]}, 400, "[documents[0].id] must be a string or an integer, got an array"),
        (RerankRequest, {"query": "ships", "documents": [{"id": 7.5}]}, 400, "[documents[0].id] must be a string or an integer, got a number"),
        (RerankRequest, {"query": "ships", "documents": [{"id": ""}]}, 400, "[documents[0].id] must not be empty"),
        (RerankRequest, {"query": "ships", "documents": [{"text": "x" * 51}]}, 413, "[documents[0].text] has 51 characters; the limit is 50 (RERANKER_MAX_TEXT_CHARS)"),
        (RerankRequest, {"query": "ships", "documents": [{"text": "a", "score": -(10**400)}]}, 400, "[documents[0].score] must be a number within a double's range (about ±1.8e308), got an integer of 401 digits"),
        (RerankRequest, {"query": "ships", "documents": [{"text": "a", "title": "b"}]}, 400, "unknown field [documents[0].title]; known fields: id, score, text"),
        (CohereRequest, {"query": "ships", "documents": ["a"], "top_n": 0}, 400, "[top_n] must be >= 1, got 0"),
        (NewExperiment, {"id": "Bad Id", "rankers": ["bm25", "wmd"]}, 400, "[id] must be 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit, got 'Bad Id'"),
        (NewExperiment, {"id": "e", "rankers": ["bm25", "wmd"], "traffic": 0}, 400, "[traffic] must be > 0.0, got 0"),
        (ExperimentChange, {}, 400, 'nothing to change: send "traffic" and/or "status" ("running" or "stopped")'),
        (UbiEvent, {"action_name": "click", "query_id": "q"}, 400, "a 'click' event needs [event_attributes.object.object_id], the id of the hit clicked"),
        (UbiEvent, {"action_name": "view", "query_id": "q", "timestamp": "2026-13-45"}, 400, "[timestamp] must be an ISO 8601 date-time like 2026-11-21T10:15:00Z, got '2026-13-45'"),
        (RerankExt, "hidden_topics", 400, "[ext.rerank] must be an object, got a string"),
        (RerankExt, {"rankers": "bm25"}, 400, "unknown field [ext.rerank.rankers]; known fields: client_id, fusion_weight, query_text, ranker, window"),
    ],
)
def test_a_bad_body_is_refused_with_the_field_and_the_reason(model: Any, body: Any, status: int, reason: str) -> None:
    refused = _refusal(model, body, where="ext.rerank" if model is RerankExt else "")
    assert (refused.status, refused.reason) == (status, reason)
    assert refused.type == ("content_too_long_exception" if status == 413 else "illegal_argument_exception")


def test_an_integer_may_be_written_with_a_point_zero() -> None:
    """JSON Schema's `integer` is a mathematical integer: 10.0 is one, 10.5 is not."""
    asked = read(SearchRequest, {"query": "ships", "size": 5.0, "from": 2.0, "window": 20.0}, limits=LIMITS)
    assert (asked.size, asked.offset, asked.window) == (5, 2, 20) and isinstance(asked.size, int)
    assert read(UbiEvent, {"action_name": "click", "query_id": "q", "event_attributes": {"object": {"object_id": "a"}, "position": {"ordinal": 3.0}}}).position == 3
    assert _refusal(CohereRequest, {"query": "q", "documents": [], "top_n": 2.5}).reason == "[top_n] must be an integer, got a number"


def test_the_published_schema_states_what_the_validators_check() -> None:
    """What the service refuses, its schema says: limits from the running settings, null
    for absent fields, and the rules across fields (tests/test_fuzz.py checks it all with
    schemathesis; these are the shapes, read directly)."""
    from reranker.config import Settings
    from reranker.service import create_app

    app = create_app(Settings.from_env({"RERANKER_MAX_TEXT_CHARS": "50", "RERANKER_MAX_WINDOW": "100", "RERANKER_MAX_DOCUMENTS": "3", "HOME": "/nonexistent"}))
    document = app.test_client().get("/openapi.json").get_json()
    schemas = document["components"]["schemas"]
    assert "x-reranker-limit" not in str(document)
    search = schemas["SearchRequest"]["properties"]
    assert search["query"]["maxLength"] == 50 and search["window"]["anyOf"][0]["maximum"] == 100
    assert schemas["RerankRequest"]["properties"]["documents"]["maxItems"] == 3
    # (model, body, valid?, checked by the model itself rather than by its route)
    cases = [
        ("SearchRequest", {"query": "q", "filters": None, "size": None}, True, True),
        ("SearchRequest", {"query": "q", "filters": [{"field": "year", "op": "gt", "value": True}]}, False, True),
        ("RerankRequest", {"query": "q", "documents": [{"id": None, "text": None}]}, False, True),
        ("RerankRequest", {"query": "q", "documents": [{"text": "a", "score": 1}, "b"]}, False, False),
        ("RerankRequest", {"query": "q", "documents": [{"text": "a", "score": 1}, {"id": "b", "score": 2}]}, True, True),
        ("SearchRequest", {"query": "q", "ranker": "bm25", "fusion_weight": 0.5}, False, True),
        ("SearchRequest", {"query": "q", "ranker": "bm25", "fusion_weight": None}, True, True),
        ("RerankRequest", {"query": "q", "ranker": "wmd+bm25", "fusion_weight": 0.5, "documents": []}, True, True),
        ("RerankExt", {"ranker": "wmd+bm25:rrf", "fusion_weight": 0.5}, False, True),
        ("ExperimentChange", {"traffic": None, "status": None}, False, True),
        ("CohereRequest", {"query": "q", "documents": [{"id": "a"}], "return_documents": True}, False, False),
        ("UbiEvent", {"action_name": "view", "query_id": "q", "timestamp": "2026-02-29"}, False, True),
        ("UbiEvent", {"action_name": "view", "query_id": "q", "timestamp": "2028-02-29T10:15:00Z"}, True, True),
    ]
    for model, body, expected, by_model in cases:
        assert _validator(schemas, model).is_valid(body) is expected, (model, body)
        if by_model:
            assert _accepted(model, body) is expected, (model, body)


def _validator(schemas: dict[str, Any], model: str) -> Any:
    """A JSON Schema validator (schemathesis's own, jsonschema-rs) for one published model."""
    import jsonschema_rs

    text = json.dumps({**schemas[model], "$defs": schemas}).replace("#/components/schemas/", "#/$defs/")
    return jsonschema_rs.Draft202012Validator(json.loads(text))


def _accepted(model: str, body: Any) -> bool:
    import reranker.service.schema as wire

    try:
        read(getattr(wire, model), body, limits=LIMITS)
    except ApiError:
        return False
    return True


def test_null_stands_for_an_absent_field() -> None:
    asked = read(SearchRequest, {"query": "ships", "size": None, "ranker": None, "filters": None}, limits=LIMITS)
    assert (asked.size, asked.ranker, asked.filters) == (10, None, [])
    assert _refusal(SearchRequest, {"query": None}).reason == "[query] is required"
    # ... a field's null: an unknown field is refused, null or not.
    assert _refusal(SearchRequest, {"query": "ships", "sise": None}).reason.startswith("unknown field [sise]")
    assert _refusal(RerankExt, {"": None}, where="ext.rerank").reason.startswith("unknown field [ext.rerank.]")


def test_what_a_valid_body_reads_as() -> None:
    asked = read(RerankRequest, {"query": "ships", "documents": ["a text", {"id": 7, "score": 2}, {"id": "d", "text": "t"}]}, limits=LIMITS)
    assert [(c.id, c.text, c.score) for c in asked.documents] == [(None, "a text", None), ("7", None, 2.0), ("d", "t", None)]
    assert read(RerankRequest, {"query": "ships", "documents": [{"id": 8.0}]}).documents[0].id == "8"  # as any integer may be written
    # Cohere's documents may carry other fields (v1 objects); the native route refuses them.
    cohere = read(CohereRequest, {"query": "q", "documents": [{"text": "a", "title": "b"}], "max_chunks_per_doc": 10}, limits=LIMITS)
    assert cohere.documents[0].text == "a"
    event = read(UbiEvent, {"action_name": "click", "query_id": "q", "event_attributes": {"object": {"object_id": 12, "x": 1}, "position": {"ordinal": {"index": 3}}}})
    assert (event.object_id, event.position) == ("12", 3)
    # Without limits (a library caller), only the model's own constraints hold.
    assert read(SearchRequest, {"query": "x" * 51, "window": 10_000}).window == 10_000


def test_word_lists_the_models_spell_out_match_the_packages() -> None:
    assert get_args(FilterClause.model_fields["op"].annotation) == FILTER_OPS
    assert get_args(NewExperiment.model_fields["method"].annotation) == METHODS
    assert get_args(get_args(ExperimentChange.model_fields["status"].annotation)[0]) == STATUSES


def test_the_document_is_generated_from_the_routes_and_their_models() -> None:
    app = Flask("t", static_folder=None)  # as create_app: no route without an operation

    @app.post("/things")
    @operation("make a thing", body=SearchRequest, answers={201: Reply("made")}, errors=(400,))
    def things() -> str:
        return ""

    document = openapi_document(app)
    post = document["paths"]["/things"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SearchRequest"}
    published = document["components"]["schemas"]["SearchRequest"]
    assert published["required"] == ["query"] and published["additionalProperties"] is False
    assert set(published["properties"]) == {"query", "ranker", "fusion_weight", "window", "size", "from", "explain", "snippets", "client_id", "filters"}
    assert post["responses"]["400"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}

    @app.get("/forgotten")
    def forgotten() -> str:
        return ""

    app.extensions.pop("reranker.openapi")
    with pytest.raises(RuntimeError, match=r"route /forgotten \(forgotten\) declares no operation"):
        openapi_document(app)


def test_a_hit_says_its_ranker_score() -> None:
    # ranker_score defaulted to 0.0 while None meant "past the reranked window": a hit built
    # without it claimed a score of 0. Every hit now says which, as its JSON does.
    from reranker.types import RankedDoc

    with pytest.raises(TypeError, match="ranker_score"):
        RankedDoc(doc_id="d", rank=1, score=None, bm25_score=2.0, bm25_rank=1)  # type: ignore[call-arg]
    past = RankedDoc(doc_id="d", rank=1, score=None, ranker_score=None, bm25_score=2.0, bm25_rank=1)
    assert (past.to_json()["score"], past.to_json()["ranker_score"]) == (None, None)


def test_a_filter_value_is_bounded_by_the_longest_exact_value_the_index_keeps() -> None:
    """The bound is not a number of its own: it is title.raw's ignore_above in the index
    template, so that no value the schema takes is longer than one a filter could match."""
    from pathlib import Path

    template = json.loads((Path(__file__).parent.parent / "index_templates" / "reranker-mappings.component.json").read_text())
    assert template["template"]["mappings"]["properties"]["title"]["fields"]["raw"]["ignore_above"] == MAX_FILTER_VALUE_CHARS
    read(SearchRequest, {"query": "x", "filters": [{"field": "body", "value": "a" * MAX_FILTER_VALUE_CHARS}]})
    with pytest.raises(ApiError) as refused:
        read(SearchRequest, {"query": "x", "filters": [{"field": "body", "value": "a" * (MAX_FILTER_VALUE_CHARS + 1)}]})
    assert refused.value.status == 400
