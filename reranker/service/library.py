"""The digital library's API: one stored paper, its hidden topics, and papers like it.

    GET /documents/<id>                 title, opening text and top topics (with their words)
    GET /documents/<id>/similar?size=N  the N papers most like it: a search with the paper as
                                        the query (`Engine.similar`), by the default ranker
                                        or `ranker=NAME`
    GET /documents/_doc/<id>[/similar]  the same, for any id (OpenSearch's GET /<index>/_doc/<id>)

An unknown id is a 404 (document_missing_exception); a bad `size`, or a query parameter
not declared here, a 400 (`operations.check_query`). How a path names an id (slashes,
`%2F`, an id ending in `/similar`) is `paths.py`'s rule: the routes get the id decoded.
`/documents/_search`, `/documents/_msearch` and `/documents/_count` stay the search proxy's,
for an OpenSearch index named "documents", so the plain form cannot name a document whose
id is one of them (or starts with one and a literal `/`, or with `_doc/`): the `_doc` form
names every id.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask.blueprints import BlueprintSetupState

from reranker.pipeline import similar_answer
from reranker.rankers import ranker_names
from reranker.service.operations import Reply, operation
from reranker.service.paths import PLAIN_ID_PATTERN, AnyDocIdConverter, DocIdConverter
from reranker.service.reranking import runtime
from reranker.service.schema import DocumentAnswer, SimilarAnswer
from reranker.text import opening

blueprint = Blueprint("library", __name__)


DOC_ID = {
    "doc_id": {
        "type": "string", "minLength": 1, "pattern": PLAIN_ID_PATTERN,
        "description": "a stored document's id, percent-encoded (a / in it may be sent as it is, but as %2F where the id ends in /similar or starts with _search/, _msearch/, _count/ or _doc/); the ids _search, _msearch and _count are named by /documents/_doc/{doc_id}",
    }
}  # fmt: skip
ANY_DOC_ID = {"doc_id": {"type": "string", "minLength": 1, "description": "a stored document's id, whatever it is, percent-encoded (a / in it may be sent as it is, but as %2F where the id ends in /similar)"}}


@blueprint.record_once
def _register_converter(state: BlueprintSetupState) -> None:
    state.app.url_map.converters["doc_id"] = DocIdConverter
    state.app.url_map.converters["any_doc_id"] = AnyDocIdConverter


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
    return _document(doc_id)


@blueprint.get("/documents/_doc/<any_doc_id:doc_id>")
@operation(
    "a stored paper by any id (_search, _msearch and _count included), as OpenSearch's GET /<index>/_doc/<id> names one",
    path=ANY_DOC_ID,
    answers={200: Reply("the paper", DocumentAnswer)},
    errors=(404, 502, 503),
)
def document_by_id(doc_id: str) -> Any:
    """The paper of any id: the form for ids the plain one leaves to the proxy."""
    return _document(doc_id)


def _document(doc_id: str) -> Any:
    engine = runtime().engine()
    engine.check_index()
    found, topics, topic_set = engine.document_topics(doc_id)
    excerpt, truncated = opening(found.text, EXCERPT_WORDS)
    return jsonify(
        id=found.id,
        title=found.title,
        excerpt=excerpt,
        truncated=truncated,
        topics=[{"topic": t.rank, "importance": t.importance, "words": list(t.words)} for t in topics],
        topic_set=topic_set,
    )


SIMILAR_QUERY = {
    "size": {"type": "integer", "minimum": 1, "maximum": MAX_SIMILAR, "default": 10},
    "ranker": {"type": "string", "enum": ranker_names(), "description": "a ranker's name (default: the default ranker)"},
}


@blueprint.get("/documents/<doc_id:doc_id>/similar")
@operation(
    "papers like this one: BM25 on its most distinctive words, reranked with the whole paper as the query",
    path=DOC_ID,
    query=SIMILAR_QUERY,
    answers={200: Reply("the most similar papers first", SimilarAnswer)},
    errors=(400, 404, 409, 502, 503),
)
def similar(doc_id: str) -> Any:
    """Papers like this one: BM25 on its distinctive words, reranked with the paper as the query."""
    return _similar(doc_id)


@blueprint.get("/documents/_doc/<any_doc_id:doc_id>/similar")
@operation(
    "papers like the paper of any id (_search, _msearch and _count included)",
    path=ANY_DOC_ID,
    query=SIMILAR_QUERY,
    answers={200: Reply("the most similar papers first", SimilarAnswer)},
    errors=(400, 404, 409, 502, 503),
)
def similar_by_id(doc_id: str) -> Any:
    """Papers like the paper of any id: the form for ids the plain one leaves to the proxy."""
    return _similar(doc_id)


def _similar(doc_id: str) -> Any:
    size = int(request.args.get("size", 10))  # checked against its declaration (operations.check_query)
    rt = runtime()
    ranker = request.args.get("ranker", rt.limits.default_ranker)  # "ranker=" names no ranker: a 400
    engine = rt.engine()
    found = engine.similar(doc_id, ranker, size=size, window=rt.settings.window)
    return jsonify(similar_answer(engine, doc_id, found.hits, ranker))
