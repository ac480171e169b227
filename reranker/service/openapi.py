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

_STATUS = {"type": "string", "enum": ["ok", "degraded", "query_out_of_vocabulary", "partial"]}
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
        403: "not a read-only search endpoint, or an index the proxy may not forward to",
        404: "no such index or document",
        405: "method not allowed",
        409: "the ranker cannot run on this index yet (no Doc2Vec model trained for it)",
        413: "body, document count or text longer than the configured limits",
        502: "the store failed",
        503: "the store (OpenSearch) is unavailable; see Retry-After",
    }
    return {str(s): _json({"$ref": "#/components/schemas/Error"}, reasons[s]) for s in statuses}


def _body(schema: Schema) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_DOCUMENT: Schema = {
    "oneOf": [
        {"type": "string", "description": "the document's text"},
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "a stored document: its stored topics are used"},
                "text": {"type": "string", "description": "topics are computed from it (and cached)"},
                "score": {"type": "number", "description": "the caller's first-stage score (fusion rankers use it)"},
            },
            "anyOf": [{"required": ["text"]}, {"required": ["id"]}],
        },
    ]
}

_SEARCH_REQUEST: Schema = {
    "type": "object",
    "required": ["query"],
    "additionalProperties": False,
    "properties": {
        "query": {"type": "string", "minLength": 1, "description": "the summary: an abstract, a few sentences"},
        "ranker": None,  # filled in by openapi_document()
        "window": {"type": "integer", "minimum": 1, "description": "BM25 candidates to rerank (default RERANKER_WINDOW)"},
        "size": {"type": "integer", "minimum": 0, "default": 10},
        "from": {"type": "integer", "minimum": 0, "default": 0},
        "explain": {"type": "boolean", "default": False},
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

_HIT: Schema = {
    "type": "object",
    "required": ["id", "rank", "score", "bm25_score", "bm25_rank"],
    "properties": {
        "id": {"type": "string"},
        "rank": {"type": "integer"},
        "score": {**_NULLABLE_NUMBER, "description": "the score the order follows (a fusion's fused score); null when degraded"},
        "ranker_score": {**_NULLABLE_NUMBER, "description": "the ranker's own score (a fusion's base ranker; else the same as score)"},
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
                    "contribution": {"type": "number"},
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
        "ranker": {"type": "string"},
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
        "documents": {"type": "array", "items": _DOCUMENT},
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
        "documents": {"type": "array", "items": _DOCUMENT},
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

_OPENSEARCH_SEARCH: Schema = {
    "type": "object",
    "description": "An OpenSearch search body; `ext.rerank` (query_text, ranker, window) steers the reranking.",
}


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
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "a key from RERANKER_API_KEYS"}},
        },
        "paths": {
            "/": {"get": {"summary": "what this service is", "responses": {"200": _json({"type": "object"}, "name and version")}}},
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
            "/v1/rerank": {"post": cohere},
            "/v2/rerank": {"post": cohere},
            "/_search": {"get": _proxy_operation("search, reranked", False), "post": _proxy_operation("search, reranked", False)},
            "/_msearch": {"get": _proxy_operation("multi-search, each reranked", False), "post": _proxy_operation("multi-search, each reranked", False)},
            "/_search/scroll": {"get": _proxy_operation("the next page of a scroll, forwarded as it is", False), "post": _proxy_operation("the next page of a scroll, forwarded as it is", False)},
            "/{index}/_search": search_proxy,
            "/{index}/_msearch": msearch_proxy,
        },
    }
