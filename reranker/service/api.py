"""The native JSON API: /search, /rerank, /rankers, the probes, /metrics, /openapi.json."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from reranker import __version__
from reranker.errors import RerankerError
from reranker.rankers import ranker_names
from reranker.service.errors import ApiError, api_error, bad_request
from reranker.service.inputs import Fields, filters, json_object
from reranker.service.openapi import openapi_document
from reranker.service.reranking import RequestDocument, Runtime, status_fields

blueprint = Blueprint("api", __name__)


def runtime() -> Runtime:
    found: Runtime = current_app.extensions["reranker"]
    return found


@blueprint.get("/")
def root() -> Any:
    """What this is and where its API is described; with a cluster, the cluster's own
    answer, as a search client pointed at the proxy expects (the reranker's own info then
    comes as the X-Reranker header)."""
    if runtime().settings.opensearch_url:
        from reranker.service.proxy import cluster_info

        response = cluster_info()
        response.headers["X-Reranker"] = f"reranker {__version__}; API: /openapi.json"
        return response
    return jsonify(name="reranker", version=__version__, tagline="hidden-topic reranking for OpenSearch", openapi="/openapi.json")


@blueprint.get("/healthz")
def healthz() -> Any:
    """Liveness: the process answers. Says nothing about the store."""
    return jsonify(status="ok")


@blueprint.get("/readyz")
def readyz() -> Any:
    """Readiness: word vectors loaded, store reachable and built with those vectors."""
    try:
        engine = runtime().engine()
        engine.check_index()
        documents = engine.store.count()
    except RerankerError as exc:
        error = api_error(exc)
        response = jsonify(status="unavailable", error={"type": error.type, "reason": error.reason})
        response.status_code = 503
        response.headers["Retry-After"] = error.headers.get("Retry-After", "5")
        return response
    return jsonify(status="ready", documents=documents, vectors=engine.vectors.info.name)


@blueprint.get("/rankers")
def rankers() -> Any:
    """The registered rankers, and the one used when a request names none."""
    found = []
    for name in ranker_names():
        ranker = runtime().ranker(name)
        found.append({"name": name, "uses_topics": ranker.variant is not None})
    return jsonify(rankers=found, default=runtime().limits.default_ranker)


@blueprint.get("/metrics")
def metrics() -> Response:
    body, content_type = runtime().metrics.exposition()
    return Response(body, content_type=content_type)


@blueprint.get("/openapi.json")
def openapi() -> Any:
    return jsonify(openapi_document())


@blueprint.post("/search")
def search() -> Any:
    """A summary query -> BM25 top-N -> rerank -> one page of hits."""
    rt = runtime()
    limits = rt.limits
    fields = Fields(json_object())
    text = fields.text("query", required=True, max_chars=limits.max_text_chars)
    named = fields.text("ranker")
    weight = fields.fraction("fusion_weight")
    # None: the default, or a running experiment (a request that sets a weight opts out of it).
    ranker = rt.ranker(named, weight) if named or weight is not None else None
    size = fields.integer("size", 10, maximum=limits.max_window, limit_setting="RERANKER_MAX_WINDOW")
    offset = fields.integer("from", 0, maximum=limits.max_window, limit_setting="RERANKER_MAX_WINDOW")
    window = fields.integer("window", rt.settings.window, minimum=1, maximum=limits.max_window, limit_setting="RERANKER_MAX_WINDOW")
    wanted = filters(fields.array("filters"))
    explain = fields.boolean("explain", False)
    client_id = fields.client_id()
    fields.finish()
    if offset + size > limits.max_window:
        raise bad_request(f"[from] + [size] must be <= {limits.max_window} (RERANKER_MAX_WINDOW), got {offset + size}")
    assert text is not None
    return jsonify(rt.search(text, ranker, window=max(window, offset + size), size=size, offset=offset, filters=wanted, explain=explain, client_id=client_id))


@blueprint.post("/rerank")
def rerank() -> Any:
    """Reorder the caller's candidates (stored ids and/or texts) for a query."""
    rt = runtime()
    fields = Fields(json_object())
    text = fields.text("query", required=True, max_chars=rt.limits.max_text_chars)
    ranker = rt.ranker(fields.text("ranker"), fields.fraction("fusion_weight"))
    documents = request_documents(fields.array("documents", required=True) or [], rt.limits.max_documents, rt.limits.max_text_chars)
    size = fields.integer("size", len(documents), maximum=rt.limits.max_documents)
    fields.finish()
    assert text is not None
    outcome, query = rt.rerank_documents(text, ranker, documents, "rerank", exact_top=size)
    results = []
    for rank, position in enumerate(outcome.order[:size], start=1):
        result: dict[str, Any] = {"index": position, "rank": rank, **outcome.hit_scores(position)}
        if documents[position].id is not None:
            result["id"] = documents[position].id
        results.append(result)
    return jsonify(
        **status_fields(outcome),
        ranker=ranker.name,
        results=results,
        query_words=list(query.words),
        oov_words=list(dict.fromkeys(query.oov)),
        timings_ms={"rerank": round(outcome.rerank_ms, 3)},
    )


def request_documents(items: list[Any], max_documents: int, max_chars: int, *, extra_fields: bool = False) -> list[RequestDocument]:
    """Candidates as sent: "text", {"text": ...}, {"id": ...} or {"id", "text", "score"}.

    extra_fields: accept (and ignore) other fields in document objects, as Cohere v1 does.
    Raises ApiError: 413 for too many documents or too long a text, 400 for anything malformed.
    """
    if len(items) > max_documents:
        raise ApiError(413, "content_too_long_exception", f"[documents] has {len(items)} documents; the limit is {max_documents} (RERANKER_MAX_DOCUMENTS)")
    documents = []
    for position, item in enumerate(items):
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict):
            raise bad_request(f"[documents[{position}]] must be a string or an object with \"text\" and/or \"id\"")
        fields = Fields(item, f"documents[{position}].")
        doc_id = fields._get("id")
        if doc_id is not None and (isinstance(doc_id, bool) or not isinstance(doc_id, (str, int))):
            raise bad_request(f"[documents[{position}].id] must be a string")
        text = fields.text("text", max_chars=max_chars)
        score = fields._get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            raise bad_request(f"[documents[{position}].score] must be a number")
        if not extra_fields:
            fields.finish()
        if doc_id is None and text is None:
            raise bad_request(f"[documents[{position}]] needs a \"text\" or an \"id\"")
        documents.append(RequestDocument(None if doc_id is None else str(doc_id), text, float(score or 0.0)))
    return documents

