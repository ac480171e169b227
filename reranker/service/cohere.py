"""Cohere-compatible rerank API: POST /v1/rerank and /v2/rerank.

This is how clusters call the service as an external reranker with no custom code:
OpenSearch's `rerank` search response processor through an ml-commons HTTP connector
(`connector.pre_process.cohere.rerank` / `connector.post_process.cohere.rerank`), and
Elasticsearch through a `custom` inference endpoint. The README has the setup JSON.

What their parsers demand (ml-commons CohereRerankPostProcessFunction, read through
Jayway JsonPath / json-smart; Elasticsearch's text_similarity_reranker):
- exactly one result per input document: both scatter `scores[index]` into an array and
  fail on a count mismatch, so `top_n` is ignored unless the caller sets `apply_top_n`;
- `index` a bare JSON integer (cast to Integer);
- `relevance_score` a float literal (json-smart makes `1` an Integer, and a literal
  longer than 18 characters a BigDecimal; both fail the cast to Double). Scores are
  written with at most 9 significant digits, always with a `.` or an exponent;
- empty-string documents (OpenSearch sends "" for a hit without the field).

`model` picks a ranker by its name; the clusters' tutorials send a Cohere model name
(`rerank-english-v3.0`, `rerank-v3.5`), so any other name means the default ranker, and
`meta.warnings` (a list of strings in Cohere's own answers, which neither cluster reads)
says so. The results keep Cohere's shape exactly; the ranker that ran is also in the
`X-Reranker-Ranker` header.

Documents arrive as text: the topics the ranker reads are computed on the fly and cached
(`Engine.text_topics`); a document given as {"id": ...} uses the stored topics instead.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

from flask import Blueprint, Response

from reranker.rankers import RANKERS
from reranker.service.bodies import json_object, require_bearer
from reranker.service.errors import bad_request
from reranker.service.operations import Reply, guards, operation
from reranker.service.reranking import answer_first_stage, request_documents, runtime
from reranker.service.schema import CohereAnswer, CohereRequest, read

blueprint = Blueprint("cohere", __name__)

_RERANK = operation(
    "Cohere-compatible rerank (for OpenSearch ml-commons connectors and Elasticsearch inference endpoints)",
    security="bearer",
    body=CohereRequest,
    answers={200: Reply("one result per document, best first", CohereAnswer)},
    errors=(400, 401, 404, 409, 413, 502, 503),
)


def score_literal(value: float) -> str:
    """A JSON float literal with at most 9 significant digits: 1.0, 0.123456789, 1.5e-07.

    Raises ValueError for NaN or infinity (rankers never return them; this is the last guard).
    """
    if not math.isfinite(value):
        raise ValueError(f"relevance score {value!r} is not finite")
    # repr() of the rounded float is its shortest round-trip form: never more digits
    # than the rounding kept, and always a '.' or an exponent ('1.0', '1e-10').
    text = repr(float(f"{value:.9g}"))
    if len(text) > 18:  # repr writes up to 16 integer digits in full: -3844248610000000.0
        text = f"{float(text):.8e}"
    return "0.0" if text == "-0.0" else text


def ranker_for_model(model: str | None, default: str) -> tuple[str, str | None]:
    """(the ranker a request's `model` picks, a notice for meta.warnings when it is not one).

    A ranker's name picks that ranker; no model, the default; any other name (a Cohere
    model's, from a cluster's tutorial) the default, with a notice that says so."""
    if model is None:
        return default, None
    if model in RANKERS:
        return model, None
    return default, (
        f"model {model!r} is not a ranker of this service: ranked with the default ranker {default!r} "
        "(GET /rankers lists the rankers a model may name)"
    )


@guards("bearer")
def _require_key() -> None:
    require_bearer(runtime().limits.api_keys, unset="this service accepts no API keys yet: set RERANKER_API_KEYS or RERANKER_API_KEYS_FILE")


@blueprint.post("/v1/rerank")
@_RERANK
def rerank_v1() -> Response:
    return _rerank("1")


@blueprint.post("/v2/rerank")
@_RERANK
def rerank_v2() -> Response:
    return _rerank("2")


def _rerank(version: str) -> Response:
    rt = runtime()
    asked = read(CohereRequest, json_object(), limits=rt.limits)
    documents = request_documents(asked.documents)
    top_n = len(documents) if asked.top_n is None else asked.top_n
    apply_top_n, return_documents = asked.apply_top_n, asked.return_documents
    ranker_name, notice = ranker_for_model(asked.model, rt.limits.default_ranker)
    ranker = rt.ranker(ranker_name)
    if return_documents and any(doc.text is None for doc in documents):
        raise bad_request("[return_documents] needs every document as text")
    # Every document gets a score, but only the shown ones must be in exact order.
    outcome, _ = rt.rerank_documents(asked.query, ranker, documents, exact_top=top_n if apply_top_n else None)
    n = len(documents)
    if outcome.scores is None:
        # Degraded: the caller's order is the only evidence left, scaled to [0, 1] over the
        # request as the fusion's parts are (min-max: first 1, last 0), so the units do not
        # change with the status: one document scores 0, as it does when reranked.
        scores = [(n - 1 - position) / (n - 1) if n > 1 else 0.0 for position in range(n)]
    else:
        scores = [float(outcome.scores[position]) for position in range(n)]
    order = outcome.order
    if apply_top_n:
        order = order[:top_n]
    results = []
    for position in order:
        item = f'{{"index": {position}, "relevance_score": {score_literal(scores[position])}'
        if return_documents:
            item += f', "document": {{"text": {json.dumps(documents[position].text)}}}'
        results.append(item + "}")
    meta: dict[str, Any] = {"api_version": {"version": version}, "billed_units": {"search_units": 1}}
    warnings = [notice] if notice else []
    if outcome.reason:
        warnings.append(f"{outcome.status}: {outcome.reason}")
    if warnings:
        meta["warnings"] = warnings
    body = (
        f'{{"id": {json.dumps(str(uuid.uuid4()))}, "results": [{", ".join(results)}], '
        f'"meta": {json.dumps(meta)}, "status": {json.dumps(outcome.status)}}}'
    )
    response = Response(body, mimetype="application/json")
    response.headers["X-Reranker-Status"] = outcome.status
    response.headers["X-Reranker-Ranker"] = ranker.name
    # Where the first-stage evidence came from (the clusters send none), as /rerank says it.
    response.headers["X-Reranker-First-Stage"] = answer_first_stage(outcome)
    return response
