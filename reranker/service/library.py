"""The digital library's API: one stored paper, its hidden topics, and papers like it.

    GET /documents/<id>                 title, opening text and top topics (with their words)
    GET /documents/<id>/similar?size=N  the N papers most like it: a search with the paper as
                                        the query (`Engine.similar`), by the default ranker
                                        or `ranker=NAME`

An unknown id is a 404 (document_missing_exception); a bad `size`, or a query parameter
not declared here, a 400 (`operations.check_query`). An id may hold
slashes (a DOI); `/documents/_search` and `/documents/_msearch` stay the search proxy's,
for an OpenSearch index named "documents".
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.routing import PathConverter

from reranker.rankers import ranker_names
from reranker.service.api import runtime
from reranker.service.operations import Reply, operation
from reranker.service.schema import DocumentAnswer, SimilarAnswer
from reranker.text import SNIPPET_WORDS, opening

blueprint = Blueprint("library", __name__)


class DocIdConverter(PathConverter):
    """A document id: any path (ids may contain "/"), except the proxy's `_search` and
    `_msearch`, so that /<index>/_search still reaches an index named "documents"."""

    regex = r"(?!_m?search(?:/|$))[^/].*?"


DOC_ID = {"doc_id": {"type": "string", "minLength": 1, "pattern": "^(?!_m?search(/|$))", "description": "a stored document's id"}}


@blueprint.record_once
def _register_converter(state: BlueprintSetupState) -> None:
    state.app.url_map.converters["doc_id"] = DocIdConverter


# The opening of a paper shown with its topics, in words.
EXCERPT_WORDS = 300
MAX_SIMILAR = 100


@blueprint.get("/documents/<doc_id:doc_id>")
@operation(
    "a stored paper: title, opening text and its hidden topics with their words",
    path=DOC_ID,
    answers={200: Reply("the paper", DocumentAnswer)},
    errors=(404, 502, 503),
)
def document(doc_id: str) -> Any:
    """A stored paper: title, the opening of its text, and its hidden topics."""
    engine = runtime().engine()
    engine.check_index()
    found, topics = engine.document_topics(doc_id)
    excerpt, truncated = opening(found.text, EXCERPT_WORDS)
    return jsonify(
        id=found.id,
        title=found.title,
        excerpt=excerpt,
        truncated=truncated,
        topics=[{"topic": t.rank, "importance": t.importance, "words": list(t.words)} for t in topics],
    )


@blueprint.get("/documents/<doc_id:doc_id>/similar")
@operation(
    "papers like this one: BM25 on its most distinctive words, reranked with the whole paper as the query",
    path=DOC_ID,
    query={
        "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIMILAR, "default": 10},
        "ranker": {"type": "string", "enum": ranker_names(), "description": "a ranker's name (default: the default ranker)"},
    },
    answers={200: Reply("the most similar papers first", SimilarAnswer)},
    errors=(400, 404, 409, 502, 503),
)
def similar(doc_id: str) -> Any:
    """Papers like this one: BM25 on its distinctive words, reranked with the paper as the query."""
    size = int(request.args.get("size", 10))  # checked against its declaration (operations.check_query)
    rt = runtime()
    ranker = request.args.get("ranker", rt.limits.default_ranker)  # "ranker=" names no ranker: a 400
    engine = rt.engine()
    window = min(rt.settings.window, rt.limits.max_window)
    hits = engine.similar(doc_id, ranker, size=size, window=max(window, size))
    texts = engine.store.documents([h.doc_id for h in hits])
    answer = []
    for hit in hits:
        stored = texts.get(hit.doc_id)
        snippet = opening(stored.text, SNIPPET_WORDS)[0] if stored is not None else ""
        answer.append({"id": hit.doc_id, "rank": hit.rank, "title": hit.title, "score": hit.score, "bm25_rank": hit.bm25_rank, "snippet": snippet})
    return jsonify(id=doc_id, hits=answer)

