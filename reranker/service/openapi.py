"""The OpenAPI 3.1 document of every route, served at /openapi.json.

Written by hand next to the routes it describes; tests check that every Flask route is
in it, and schemathesis fuzzes the app against it (no 5xx, every response matches).
"""

from __future__ import annotations

from typing import Any

from reranker import __version__
from reranker.rankers import ranker_names

Schema = dict[str, Any]

_ERROR: Schema = {
    "type": "object",
    "description": "OpenSearch's error shape.",
    "required": ["error", "status"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "reason"],
            "properties": {
                "type": {"type": "string"},
                "reason": {"type": "string"},
                "root_cause": {"type": "array", "items": {"type": "object"}},
            },
        },
        "status": {"type": "integer"},
    },
}

_STATUS = {"type": "string", "enum": ["ok", "degraded", "query_out_of_vocabulary", "partial", "tied"]}
_WORDS = {"type": "array", "items": {"type": "string"}}
_NULLABLE_NUMBER = {"type": ["number", "null"]}


def _ranker() -> Schema:
    return {"type": "string", "enum": ranker_names(), "description": "a registered ranker (GET /rankers); default hidden_topics"}


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Schema]:
    reasons = {
        400: "malformed JSON, wrong types, unknown field or ranker, empty query",
        401: "missing or wrong API key",
        404: "no such index, document, experiment or interleaved query",
        405: "method not allowed",
        403: "not a read-only search endpoint, or an index the proxy may not forward to; experiment changes with no RERANKER_ADMIN_API_KEY set",
        409: "the ranker cannot run on this index yet (no Doc2Vec model); an event recorded before; an experiment id taken, another running, or a ranker removed",
        413: "body, document count or text longer than the configured limits",
        502: "the store failed",
        503: "the store (OpenSearch) is unavailable; see Retry-After",
    }
    return {str(s): _json({"$ref": "#/components/schemas/Error"}, reasons[s]) for s in statuses}


def _body(schema: Schema) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


# A string the routes accept: not empty and not only spaces.
_NON_BLANK: Schema = {"type": "string", "minLength": 1, "pattern": "\\S"}


def _document(extra_fields: bool) -> Schema:
    """A candidate document; Cohere's routes accept (and ignore) fields beyond these."""
    return {"oneOf": [
        {"type": "string", "description": "the document's text"},
        {
            "type": "object",
            "additionalProperties": extra_fields,
            "properties": {
                "id": {"type": "string", "description": "a stored document: its stored topics are used"},
                "text": {"type": "string", "description": "topics are computed from it (and cached)"},
                "score": {"type": "number", "description": "the caller's first-stage score (fusion rankers use it)"},
            },
            "anyOf": [{"required": ["text"]}, {"required": ["id"]}],
        },
    ]}


_SEARCH_REQUEST: Schema = {
    "type": "object",
    "required": ["query"],
    "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "minLength": 1, "description": "the summary: an abstract, a few sentences"},
        "ranker": None,  # filled in by openapi_document()
        "fusion_weight": {"type": "number", "minimum": 0, "maximum": 1, "description": "weight of the ranker in a min-max or z-score fusion with BM25 (default RERANKER_FUSION_WEIGHT)"},
        "window": {"type": "integer", "minimum": 1, "description": "BM25 candidates to rerank (default RERANKER_WINDOW)"},
        "size": {"type": "integer", "minimum": 0, "default": 10},
        "from": {"type": "integer", "minimum": 0, "default": 0},
        "explain": {"type": "boolean", "default": False},
        "client_id": {**_NON_BLANK, "maxLength": 100, "description": "who searches (a browser, an app): keeps one client in one arm of a running experiment"},
        "filters": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "value"],
                "additionalProperties": False,
                "properties": {
                    "field": {"type": "string"},
                    "op": {"type": "string", "enum": ["eq", "gt", "gte", "lt", "lte"], "default": "eq"},
                    "value": {"type": ["string", "number", "boolean"]},
                },
            },
        },
    },
}

# The one shape of a hit: POST /search, the proxy's ext.rerank (score and ranker_score per
# _id) and `reranker search --json` (RankedDoc.to_json) all follow it.
_HIT: Schema = {
    "type": "object",
    "required": ["id", "rank", "score", "bm25_score", "bm25_rank"],
    "properties": {
        "id": {"type": "string"},
        "rank": {"type": "integer"},
        "score": {**_NULLABLE_NUMBER, "description": "the score the order follows (a fusion's fused score); null when degraded"},
        "ranker_score": {**_NULLABLE_NUMBER, "description": "the ranker's own score (for a fusion, its first ranker's; else the same as score)"},
        "bm25_score": {"type": "number"},
        "bm25_rank": {"type": "integer"},
        "title": {"type": "string"},
        "explanation": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "topic": {"type": "integer"},
                    "importance": {"type": "number"},
                    "relevance": {"type": "number"},
                    "contribution": {"type": "number", "description": "importance x (relevance - background); they add up to the topic score"},
                    "background": {"type": "number", "description": "the corrected formula's background relevance of the topic (0 for the paper's and the code's)"},
                    "topic_words": _WORDS,
                    "query_words": _WORDS,
                },
            },
        },
    },
}

_SEARCH_RESPONSE: Schema = {
    "type": "object",
    "required": ["status", "query", "ranker", "window", "hits", "query_words", "oov_words", "timings_ms"],
    "properties": {
        "status": _STATUS,
        "reason": {"type": "string"},
        "query": {"type": "string"},
        "ranker": {"type": "string", "description": "the ranker, or \"interleaved\" when a running experiment answered"},
        "query_id": {"type": "string", "description": "set when a running experiment answered: send it back with click events (POST /events)"},
        "experiment": {"type": "object", "properties": {"id": {"type": "string"}, "method": {"type": "string"}, "rankers": _WORDS}},
        "window": {"type": "integer"},
        "candidates": {"type": "integer"},
        "hits": {"type": "array", "items": _HIT},
        "query_words": _WORDS,
        "oov_words": _WORDS,
        "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}

_RERANK_REQUEST: Schema = {
    "type": "object",
    "required": ["query", "documents"],
    "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "ranker": None,
        "fusion_weight": {"type": "number", "minimum": 0, "maximum": 1, "description": "weight of the ranker in a min-max or z-score fusion with BM25 (default RERANKER_FUSION_WEIGHT)"},
        "documents": {"type": "array", "items": _document(extra_fields=False)},
        "size": {"type": "integer", "minimum": 0, "description": "results to return (default: all)"},
    },
}

_RERANK_RESPONSE: Schema = {
    "type": "object",
    "required": ["status", "ranker", "results"],
    "properties": {
        "status": _STATUS,
        "reason": {"type": "string"},
        "ranker": {"type": "string"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "rank", "score", "ranker_score"],
                "properties": {
                    "index": {"type": "integer", "description": "position in the request's documents"},
                    "rank": {"type": "integer"},
                    "score": _NULLABLE_NUMBER,
                    "ranker_score": _NULLABLE_NUMBER,
                    "id": {"type": "string"},
                },
            },
        },
        "query_words": _WORDS,
        "oov_words": _WORDS,
        "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}

_COHERE_REQUEST: Schema = {
    "type": "object",
    "required": ["query", "documents"],
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "documents": {"type": "array", "items": _document(extra_fields=True)},
        "top_n": {"type": "integer", "minimum": 1, "description": "ignored unless apply_top_n: every document gets a result"},
        "apply_top_n": {"type": "boolean", "default": False},
        "model": None,
        "return_documents": {"type": "boolean", "default": False},
    },
}

_COHERE_RESPONSE: Schema = {
    "type": "object",
    "required": ["id", "results", "meta", "status"],
    "properties": {
        "id": {"type": "string"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "relevance_score"],
                "properties": {
                    "index": {"type": "integer"},
                    "relevance_score": {"type": "number"},
                    "document": {"type": "object", "properties": {"text": {"type": "string"}}},
                },
            },
        },
        "meta": {"type": "object"},
        "status": _STATUS,
    },
}

_UBI_EVENT: Schema = {
    "type": "object",
    "description": "A User Behavior Insights event (schema 1.0) about the query_id of an interleaved search.",
    "required": ["action_name", "query_id"],
    "additionalProperties": False,
    "properties": {
        "action_name": {**_NON_BLANK, "maxLength": 100, "description": "click and click_through count towards the experiment"},
        "query_id": {**_NON_BLANK, "maxLength": 100},
        "client_id": {**_NON_BLANK, "maxLength": 100, "description": "required when the search sent one"},
        "timestamp": {**_NON_BLANK, "format": "date-time"},
        "event_id": {**_NON_BLANK, "maxLength": 256, "description": "makes retries idempotent; default: a hash of the event"},
        "application": {**_NON_BLANK, "maxLength": 100},
        "session_id": {**_NON_BLANK, "maxLength": 100},
        "user_id": {**_NON_BLANK, "maxLength": 100},
        "message_type": {**_NON_BLANK, "maxLength": 100},
        "message": {**_NON_BLANK, "maxLength": 1024},
        "event_attributes": {
            "type": "object",
            "properties": {
                "object": {"type": "object", "properties": {"object_id": {"type": ["string", "integer"]}}},
                "position": {"type": "object", "properties": {"ordinal": {"type": ["integer", "object"], "description": "the hit's rank, from 1"}}},
            },
        },
    },
}

_EXPERIMENT: Schema = {
    "type": "object",
    "required": ["id", "rankers", "method", "traffic", "status", "created", "min_queries"],
    "properties": {
        "id": {"type": "string"},
        "rankers": _WORDS,
        "method": {"type": "string", "enum": ["team_draft", "balanced"]},
        "traffic": {"type": "number"},
        "status": {"type": "string", "enum": ["running", "stopped"]},
        "created": {"type": "string"},
        "min_queries": {"type": "integer"},
    },
}

_EXPERIMENT_PATH = [{"name": "experiment_id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1, "pattern": "^(?!_m?search$)[^/]+$"}}]

_OPENSEARCH_SEARCH: Schema = {
    "type": "object",
    "description": "An OpenSearch search body; `ext.rerank` (query_text, ranker, fusion_weight, window) steers the reranking.",
}


# `_search` and `_msearch` in these places are the search proxy's (an index named
# "documents" or "experiments"), so they are not ids here.
_DOC_ID_PARAMETER: Schema = {
    "name": "doc_id", "in": "path", "required": True, "description": "a stored document's id",
    "schema": {"type": "string", "minLength": 1, "pattern": "^(?!_m?search(/|$))"},
}

_DOCUMENT_RESPONSE: Schema = {
    "type": "object",
    "required": ["id", "title", "excerpt", "truncated", "topics"],
    "properties": {
        "id": {"type": "string"},
        "title": {"type": "string"},
        "excerpt": {"type": "string", "description": "the first 300 words of the text"},
        "truncated": {"type": "boolean", "description": "whether the text goes on after the excerpt"},
        "topics": {
            "type": "array",
            "description": "hidden topics, most important first",
            "items": {
                "type": "object",
                "required": ["topic", "importance", "words"],
                "properties": {"topic": {"type": "integer"}, "importance": {"type": "number"}, "words": _WORDS},
            },
        },
    },
}

_SIMILAR_RESPONSE: Schema = {
    "type": "object",
    "required": ["id", "hits"],
    "properties": {
        "id": {"type": "string"},
        "hits": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "rank", "title", "score", "bm25_rank", "snippet"],
                "properties": {
                    "id": {"type": "string"},
                    "rank": {"type": "integer"},
                    "title": {"type": "string"},
                    "score": {"type": "number", "description": "topic similarity to the paper, in [0, 1]"},
                    "bm25_rank": {"type": "integer", "description": "rank by BM25 on the paper's title and opening, the paper itself left out"},
                    "snippet": {"type": "string", "description": "the first 30 words of the text"},
                },
            },
        },
    },
}


def _static(content_types: list[str], description: str) -> Schema:
    return {"description": description, "content": {t: {"schema": {"type": "string"}} for t in content_types}}


def _proxy_operation(summary: str, with_index: bool) -> Schema:
    parameters = [{"name": "index", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1, "pattern": "^[a-z0-9][a-z0-9_.*,-]*$"}}] if with_index else []
    return {
        "summary": summary,
        "parameters": parameters,
        "requestBody": {"required": False, "content": {"application/json": {"schema": _OPENSEARCH_SEARCH}, "application/x-ndjson": {"schema": {"type": "string"}}}},
        "responses": {
            "200": _json({"type": "object", "description": "OpenSearch's response, reranked; `ext.rerank` says how"}, "the cluster's answer"),
            **_errors(400, 403, 404, 413, 502, 503),
            "default": _json({"type": "object"}, "an error the cluster returned, passed through unchanged"),
        },
    }


def openapi_document() -> Schema:
    ranker = _ranker()
    search_request = {**_SEARCH_REQUEST, "properties": {**_SEARCH_REQUEST["properties"], "ranker": ranker}}
    rerank_request = {**_RERANK_REQUEST, "properties": {**_RERANK_REQUEST["properties"], "ranker": ranker}}
    cohere_request = {**_COHERE_REQUEST, "properties": {**_COHERE_REQUEST["properties"], "model": {**ranker, "description": "the ranker to use (default hidden_topics)"}}}
    cohere = {
        "summary": "Cohere-compatible rerank (for OpenSearch ml-commons connectors and Elasticsearch inference endpoints)",
        "security": [{"bearer": []}],
        "requestBody": _body(cohere_request),
        "responses": {"200": _json(_COHERE_RESPONSE, "one result per document, best first"), **_errors(400, 401, 404, 409, 413, 502, 503)},
    }
    search_proxy = {"get": _proxy_operation("search, reranked", True), "post": _proxy_operation("search, reranked", True)}
    msearch_proxy = {"get": _proxy_operation("multi-search, each reranked", True), "post": _proxy_operation("multi-search, each reranked", True)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "reranker",
            "version": __version__,
            "description": "Hidden-topic reranking for OpenSearch: a native API, an OpenSearch-compatible search proxy, and a Cohere-compatible rerank API.",
        },
        "components": {
            "schemas": {"Error": _ERROR},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "a key from RERANKER_API_KEYS"},
                "admin": {"type": "http", "scheme": "bearer", "description": "RERANKER_ADMIN_API_KEY"},
            },
        },
        "paths": {
            "/": {"get": {"summary": "what this service is: its name and version, or with a cluster (OPENSEARCH_URL) the cluster's own answer to GET /",
                          "responses": {"200": _json({"type": "object"}, "name and version"), "503": _json(_ERROR, "the cluster cannot be reached")}}},
            "/healthz": {"get": {"summary": "liveness", "responses": {"200": _json({"type": "object", "required": ["status"]}, "the process answers")}}},
            "/readyz": {
                "get": {
                    "summary": "readiness: vectors loaded, store reachable and built with these vectors",
                    "responses": {
                        "200": _json({"type": "object", "required": ["status", "documents", "vectors"]}, "ready"),
                        "503": _json({"type": "object", "required": ["status", "error"]}, "not ready, and why"),
                    },
                }
            },
            "/rankers": {"get": {"summary": "registered rankers", "responses": {"200": _json({"type": "object", "required": ["rankers", "default"]}, "names")}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text exposition format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/openapi.json": {"get": {"summary": "this document", "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")}}},
            "/search": {
                "post": {
                    "summary": "a summary query -> BM25 top-N -> rerank -> one page",
                    "requestBody": _body(search_request),
                    "responses": {"200": _json(_SEARCH_RESPONSE, "the page, reranked (or in BM25 order when degraded)"), **_errors(400, 404, 409, 413, 502, 503)},
                }
            },
            "/rerank": {
                "post": {
                    "summary": "reorder the caller's candidates (stored ids and/or texts)",
                    "requestBody": _body(rerank_request),
                    "responses": {"200": _json(_RERANK_RESPONSE, "the candidates in the new order"), **_errors(400, 404, 409, 413, 502, 503)},
                }
            },
            "/documents/{doc_id}": {
                "get": {
                    "summary": "a stored paper: title, opening text and its hidden topics with their words",
                    "parameters": [_DOC_ID_PARAMETER],
                    "responses": {"200": _json(_DOCUMENT_RESPONSE, "the paper"), **_errors(404, 502, 503)},
                }
            },
            "/documents/{doc_id}/similar": {
                "get": {
                    "summary": "papers like this one: BM25 on its title and opening words, ordered by hidden-topic similarity",
                    "parameters": [
                        _DOC_ID_PARAMETER,
                        {"name": "size", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}},
                    ],
                    "responses": {"200": _json(_SIMILAR_RESPONSE, "the most similar papers first"), **_errors(400, 404, 502, 503)},
                }
            },
            "/ui": {"get": {"summary": "the web page: compare rankers, browse papers, live search, experiments", "responses": {"200": _static(["text/html"], "the page")}}},
            "/ui/static/{filename}": {
                "get": {
                    "summary": "the page's script and style sheet",
                    "parameters": [{"name": "filename", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}],
                    "responses": {"200": _static(["text/javascript", "text/css", "text/html"], "the file"), **_errors(404)},
                }
            },
            "/events": {
                "post": {
                    "summary": "record a UBI event (a click) about an interleaved search",
                    "requestBody": _body(_UBI_EVENT),
                    "responses": {"201": _json({"type": "object", "required": ["result", "event_id"]}, "recorded"), **_errors(400, 404, 409, 413, 502, 503)},
                }
            },
            "/experiments": {
                "get": {"summary": "every experiment", "responses": {"200": _json({"type": "object", "required": ["experiments"], "properties": {"experiments": {"type": "array", "items": _EXPERIMENT}}}, "experiments, oldest first"), **_errors(502, 503)}},
                "post": {
                    "summary": "start an experiment (admin key)",
                    "security": [{"admin": []}],
                    "requestBody": _body({
                        "type": "object", "required": ["id", "rankers"], "additionalProperties": False,
                        "properties": {
                            "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"},
                            "rankers": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
                            "method": {"type": "string", "enum": ["team_draft", "balanced"], "default": "team_draft"},
                            "traffic": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.1},
                            "min_queries": {"type": "integer", "minimum": 1, "default": 20},
                        },
                    }),
                    "responses": {"201": _json({"type": "object", "required": ["experiment"]}, "started"), **_errors(400, 401, 403, 409, 413, 502, 503)},
                },
            },
            "/experiments/{experiment_id}": {
                "get": {
                    "summary": "an experiment and its report: clicks, wins per ranker, winner, sign-test p-value",
                    "parameters": _EXPERIMENT_PATH,
                    "responses": {"200": _json({"type": "object", "required": ["experiment", "report"]}, "the report so far"), **_errors(404, 502, 503)},
                },
                "patch": {
                    "summary": "change an experiment's traffic share or status (admin key)",
                    "security": [{"admin": []}],
                    "parameters": _EXPERIMENT_PATH,
                    "requestBody": _body({
                        "type": "object", "additionalProperties": False,
                        "properties": {"traffic": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "status": {"type": "string", "enum": ["running", "stopped"]}},
                    }),
                    "responses": {"200": _json({"type": "object", "required": ["experiment"]}, "changed"), **_errors(400, 401, 403, 404, 409, 413, 502, 503)},
                },
            },
            "/v1/rerank": {"post": cohere},
            "/v2/rerank": {"post": cohere},
            "/_search": {"get": _proxy_operation("search, reranked", False), "post": _proxy_operation("search, reranked", False)},
            "/_msearch": {"get": _proxy_operation("multi-search, each reranked", False), "post": _proxy_operation("multi-search, each reranked", False)},
            "/_search/scroll": {"get": _proxy_operation("the next page of a scroll, forwarded as it is", False), "post": _proxy_operation("the next page of a scroll, forwarded as it is", False)},
            "/{index}/_search": search_proxy,
            "/{index}/_msearch": msearch_proxy,
        },
    }
