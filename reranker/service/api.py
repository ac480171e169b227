"""The native JSON API: /search, /rerank, /rankers, the probes, /metrics, /openapi.json."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from reranker import __version__
from reranker.errors import RerankerError
from reranker.pipeline import listed_rankers
from reranker.service.bodies import json_object
from reranker.service.errors import api_error
from reranker.service.operations import Reply, openapi_document, operation
from reranker.service.proxy import cluster_info
from reranker.service.reranking import answer_first_stage, request_documents, runtime, status_fields
from reranker.service.schema import (
    Error,
    Live,
    NotReady,
    Rankers,
    Ready,
    RerankAnswer,
    RerankRequest,
    SearchAnswer,
    SearchRequest,
    read,
)
from reranker.types import Filter

blueprint = Blueprint("api", __name__)


@blueprint.get("/")
@operation(
    "what this service is: its name and version, or with a cluster (OPENSEARCH_URL) the cluster's own answer to GET /",
    answers={200: Reply("name and version"), 503: Reply("the cluster cannot be reached", Error)},
)
def root() -> Any:
    """What this is and where its API is described; with a cluster, the cluster's own
    answer, as a search client pointed at the proxy expects (the reranker's own info then
    comes as the X-Reranker header)."""
    if runtime().settings.opensearch_url:
        # The proxy's: one documented GET / whose answer with a cluster is the cluster's own.
        response = cluster_info()
        response.headers["X-Reranker"] = f"reranker {__version__}; API: /openapi.json"
        return response
    return jsonify(name="reranker", version=__version__, tagline="hidden-topic reranking for OpenSearch", openapi="/openapi.json")


@blueprint.get("/healthz")
@operation("liveness", answers={200: Reply("the process answers", Live)})
def healthz() -> Any:
    """Liveness: the process answers. Says nothing about the store."""
    return jsonify(status="ok")


@blueprint.get("/readyz")
@operation(
    "readiness: vectors loaded, store reachable and built with these vectors",
    answers={200: Reply("ready", Ready), 503: Reply("not ready, and why", NotReady)},
)
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
@operation("registered rankers", answers={200: Reply("names", Rankers)})
def rankers() -> Any:
    """The registered rankers, whether each can run on this index (and why not), and the
    one used when a request names none (`reranker rankers` lists the same)."""
    return jsonify(rankers=listed_rankers(runtime().engine), default=runtime().limits.default_ranker)


@blueprint.get("/metrics")
@operation("Prometheus metrics", answers={200: Reply("text exposition format", media=("text/plain",))})
def metrics() -> Response:
    body, content_type = runtime().metrics.exposition()
    return Response(body, content_type=content_type)


@blueprint.get("/openapi.json")
@operation("this document", answers={200: Reply("OpenAPI 3.1")})
def openapi() -> Any:
    return jsonify(openapi_document(current_app))


@blueprint.post("/search")
@operation(
    "a summary query -> BM25 top-N -> rerank -> one page",
    body=SearchRequest,
    answers={200: Reply("the page, reranked (or in BM25 order when degraded)", SearchAnswer)},
    errors=(400, 404, 409, 413, 502, 503),
)
def search() -> Any:
    """A summary query -> BM25 top-N -> rerank -> one page of hits."""
    rt = runtime()
    asked = read(SearchRequest, json_object(), limits=rt.limits)
    # None: the default, or a running experiment (a request that sets a weight opts out of it).
    ranker = rt.ranker(asked.ranker, asked.fusion_weight) if asked.ranker is not None or asked.fusion_weight is not None else None
    window = asked.window or rt.settings.window
    filters = [Filter(field=clause.field, op=clause.op, value=clause.value) for clause in asked.filters]
    return jsonify(rt.search(
        asked.query, ranker, window=window, size=asked.size, offset=asked.offset,
        filters=filters, explain=asked.explain, client_id=asked.client_id, snippets=asked.snippets,
    ))


@blueprint.post("/rerank")
@operation(
    "reorder the caller's candidates (stored ids and/or texts)",
    body=RerankRequest,
    answers={200: Reply("the candidates in the new order", RerankAnswer)},
    errors=(400, 404, 409, 413, 502, 503),
)
def rerank() -> Any:
    """Reorder the caller's candidates (stored ids and/or texts) for a query."""
    rt = runtime()
    asked = read(RerankRequest, json_object(), limits=rt.limits)
    ranker = rt.ranker(asked.ranker, asked.fusion_weight)
    documents = request_documents(asked.documents)
    size = len(documents) if asked.size is None else asked.size
    outcome, query = rt.rerank_documents(asked.query, ranker, documents, exact_top=size)
    results = []
    for rank, position in enumerate(outcome.order[:size], start=1):
        result: dict[str, Any] = {"index": position, "rank": rank, **outcome.hit_scores(position)}
        if documents[position].id is not None:
            result["id"] = documents[position].id
        results.append(result)
    return jsonify(
        **status_fields(outcome),
        ranker=ranker.name,
        first_stage=answer_first_stage(outcome),
        results=results,
        query_words=list(query.words),
        oov_words=list(dict.fromkeys(query.oov)),
        timings_ms={"rerank": round(outcome.rerank_ms, 3)},
    )
