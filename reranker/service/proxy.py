"""The OpenSearch-compatible search proxy: point a search client at the service, not the cluster.

    GET|POST [/INDEX]/_search     forwarded; the top window reranked; one page answered
    GET|POST [/INDEX]/_msearch    the same for every search in it, in two _msearch calls
    GET|POST /_search/scroll      forwarded as it is (a scroll is never reranked)
    anything else                 403 security_exception, never forwarded

A search that can be reranked costs two cluster requests. (1) The window: the query
with from 0 and size WINDOW, `_source` cut to `hidden_topics`, and without highlight,
fields, explain, ... (aggregations, suggest, totals stay); its topics are decoded and
reranked. (2) The page: the original request with its query wrapped in an `ids` filter
for the page's hits, so highlight, `_source`, fields etc. are computed for those hits
only. The answer is (1) with its hits replaced by (2)'s in the new order, each keeping
its BM25 `_score`, plus an `ext.rerank` block saying what ran.

A search that cannot be reranked (no query text, another sort, search_after, scroll,
size 0, rescore, collapse, an index without hidden topics, ...) is forwarded as it is
and marked `ext.rerank.status = "not_reranked"` with the reason. The cluster's own
errors come back with its status and body; a cluster that cannot be reached is a 503.
Without OPENSEARCH_URL there is no cluster to forward to: every proxy route answers
404 resource_not_found_exception.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, NoReturn
from urllib.parse import quote

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import MethodNotAllowed

from reranker.config import Settings
from reranker.errors import IndexMismatchError
from reranker.rankers import CandidateSet, Ranker
from reranker.service.api import runtime
from reranker.service.errors import ApiError, bad_request
from reranker.service.inputs import Fields, json_object, parse_json
from reranker.service.reranking import Deadline, Runtime, status_fields
from reranker.store.opensearch import OpenSearchStore, TopicLayout
from reranker.types import Candidate, EmbeddingInfo

log = logging.getLogger(__name__)

blueprint = Blueprint("proxy", __name__)

SEARCH_METHODS = ["GET", "POST"]
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
PROXIED = "GET|POST [/INDEX]/_search, [/INDEX]/_msearch and /_search/scroll"

# Left out of the window request (1): what only the page needs.
WINDOW_DROPS = frozenset({"from", "size", "_source", "highlight", "fields", "docvalue_fields", "stored_fields", "script_fields", "explain", "version", "seq_no_primary_term"})
WINDOW_PARAM_DROPS = frozenset({"from", "size", "_source", "_source_includes", "_source_excludes", "stored_fields", "docvalue_fields", "version", "explain", "seq_no_primary_term"})
# Left out of the page request (2): what (1) already answered, or what could drop a page hit.
PAGE_DROPS = frozenset({"from", "size", "aggs", "aggregations", "suggest", "post_filter", "track_total_hits", "min_score", "terminate_after", "profile"})
PAGE_PARAM_DROPS = frozenset({"from", "size", "track_total_hits", "terminate_after", "suggest_field", "suggest_mode", "suggest_size", "suggest_text"})
# Body keys whose paging or ordering reranking would break, and why.
UNRERANKABLE = {
    "search_after": "search_after paging continues the cluster's order",
    "rescore": "the request has a rescore of its own",
    "collapse": "field collapsing groups the hits",
    "pit": "a point-in-time search pages in the cluster's order",
}
# How deep `bool` clauses are searched for query text.
MAX_QUERY_DEPTH = 32


@dataclass(frozen=True)
class RerankOptions:
    """What a request's `ext.rerank` block asks for (None: the service's default)."""

    query_text: str | None = None
    ranker: str | None = None
    window: int | None = None


@dataclass(frozen=True)
class Search:
    """One search as the client sent it.

    index: the index expression it goes to. body: without `ext.rerank`. params: URL
    parameters (in _msearch: the header's fields but `index`). offset, size: its page.
    """

    index: str
    body: dict[str, Any]
    params: dict[str, str]
    offset: int
    size: int
    options: RerankOptions


@dataclass(frozen=True)
class Plan:
    """How one search is served: reranked over `window` hits, or forwarded as it is (`reason`)."""

    ranker: Ranker
    text: str = ""
    window: int = 0
    layouts: dict[str, TopicLayout] = field(default_factory=dict)
    reason: str | None = None


# --- where requests may go -------------------------------------------------------------


def allowed_patterns(settings: Settings) -> tuple[str, ...]:
    """RERANKER_PROXY_INDICES, or the alias and its versions."""
    alias = settings.opensearch.alias
    return settings.service.proxy_indices or (alias, f"{alias}-v*")


def check_indices(expression: str, settings: Settings) -> str:
    """`expression` if every comma-separated part is allowed; ApiError 403 otherwise."""
    patterns = allowed_patterns(settings)
    for part in expression.split(","):
        if part in ("", ".", "..") or not any(fnmatchcase(part, pattern) for pattern in patterns):
            raise ApiError(
                403, "security_exception",
                f"the reranker proxy does not forward to index [{part}]; allowed index patterns: "
                f"{', '.join(patterns)} (RERANKER_PROXY_INDICES)",
            )
    return expression


def cluster(rt: Runtime) -> OpenSearchStore:
    """The OpenSearch store; ApiError 404 when the service runs on the embedded store."""
    store = rt.engine().store if rt.settings.opensearch_url else None
    if not isinstance(store, OpenSearchStore):
        raise ApiError(
            404, "resource_not_found_exception",
            "the OpenSearch search proxy needs a cluster: set OPENSEARCH_URL (this service runs on "
            "the embedded store; use POST /search or /rerank instead)",
        )
    return store


def _path(index: str, endpoint: str) -> str:
    return f"/{quote(index, safe=',*')}/{endpoint}"


# --- reading a search -------------------------------------------------------------------


def rerank_options(body: dict[str, Any], rt: Runtime) -> tuple[dict[str, Any], RerankOptions]:
    """(the body without `ext.rerank`, what that block asked for). ApiError 400 if malformed."""
    ext = body.get("ext")
    if not isinstance(ext, dict) or "rerank" not in ext:
        return body, RerankOptions()
    spec = ext["rerank"]
    if not isinstance(spec, dict):
        raise bad_request('[ext.rerank] must be an object like {"query_text": "...", "ranker": "hidden_topics", "window": 100}')
    fields = Fields(spec, "ext.rerank.")
    text = fields.text("query_text", max_chars=rt.limits.max_text_chars)
    if text is not None and not text.strip():
        raise bad_request("[ext.rerank.query_text] must not be empty")
    ranker = fields.text("ranker")
    window = fields.integer("window", 0, minimum=1, maximum=rt.limits.max_window, limit_setting="RERANKER_MAX_WINDOW")
    fields.finish()
    rest = {name: value for name, value in ext.items() if name != "rerank"}
    stripped = {name: value for name, value in body.items() if name != "ext"}
    if rest:
        stripped["ext"] = rest
    return stripped, RerankOptions(text, ranker, window or None)


def page_bounds(body: dict[str, Any], params: dict[str, str]) -> tuple[int, int]:
    """(from, size): the URL's when given, else the body's, else (0, 10). ApiError 400 if malformed."""
    fields = Fields(body)
    bounds = {"from": fields.integer("from", 0), "size": fields.integer("size", 10)}
    for name in bounds:
        if name in params:
            value = params[name].strip()
            if not value.lstrip("-").isdigit():
                raise bad_request(f"[{name}] URL parameter must be an integer, got {params[name]!r}")
            if int(value) < 0:
                raise bad_request(f"[{name}] must be >= 0, got {value}")
            bounds[name] = int(value)
    return bounds["from"], bounds["size"]


def query_text(query: Any, depth: int = 0) -> str | None:
    """The text of the `match` / `multi_match` clauses of `query`, also inside bool must/should."""
    texts: list[str] = []
    if not isinstance(query, dict) or depth > MAX_QUERY_DEPTH:
        return None
    for kind, spec in query.items():
        if not isinstance(spec, dict):
            continue
        if kind == "match":
            for value in spec.values():
                found = value.get("query") if isinstance(value, dict) else value
                if isinstance(found, str):
                    texts.append(found)
        elif kind == "multi_match" and isinstance(spec.get("query"), str):
            texts.append(spec["query"])
        elif kind == "bool":
            for occur in ("must", "should"):
                clauses = spec.get(occur)
                for clause in clauses if isinstance(clauses, list) else [clauses]:
                    inner = query_text(clause, depth + 1)
                    if inner:
                        texts.append(inner)
    unique = dict.fromkeys(text.strip() for text in texts if text.strip())
    return " ".join(unique) or None


def _sorted_by_score(sort: Any, param: str | None) -> bool:
    """Whether a sort (body and/or URL `sort=`) is by _score, descending, only."""
    if param is not None and any(part.strip() not in ("_score", "_score:desc") for part in param.split(",")):
        return False
    for item in sort if isinstance(sort, list) else [] if sort is None else [sort]:
        if item == "_score":
            continue
        if isinstance(item, dict) and list(item) == ["_score"]:
            order = item["_score"]
            order = order.get("order", "desc") if isinstance(order, dict) else order
            if isinstance(order, str) and order.lower() == "desc":
                continue
        return False
    return True


def unrerankable(search: Search, max_window: int) -> str | None:
    """Why `search` must be forwarded as it is (None: it can be reranked)."""
    body, params = search.body, search.params
    if "scroll" in params:
        return "a scroll is answered in the cluster's order"
    if search.size == 0:
        return "size is 0: there are no hits to rerank"
    for name, why in (("q", "a q= URL query"), ("filter_path", "filter_path"), ("source", "a source= URL body")):
        if name in params:
            return f"{why} is forwarded as it is; send the query in the body to rerank"
    for key, why in UNRERANKABLE.items():
        if body.get(key) is not None:
            return why
    if not _sorted_by_score(body.get("sort"), params.get("sort")):
        return "the hits are sorted by something other than _score"
    if "_none_" in (body.get("stored_fields"), params.get("stored_fields")):
        return "stored_fields _none_ leaves out the ids that reranking needs"
    if search.offset + search.size > max_window:
        return f"from + size = {search.offset + search.size} lies beyond the largest rerank window, {max_window} (RERANKER_MAX_WINDOW)"
    return None


def layout_problem(layouts: dict[str, TopicLayout] | None, vectors: EmbeddingInfo) -> str | None:
    """Why the indices cannot be reranked with these word vectors (None: they can)."""
    if layouts is None:
        return "the cluster could not resolve the index"
    if not layouts:
        return "no index matches"
    for name, layout in sorted(layouts.items()):
        if layout.info is None:
            return f"index [{name}] has no hidden topics (it was not built by `reranker index`)"
        try:
            layout.info.check(vectors)
        except IndexMismatchError as exc:
            return f"index [{name}]: {exc}"
    return None


def plan(rt: Runtime, store: OpenSearchStore, search: Search) -> Plan:
    """Rerank `search` or forward it: decided from the request, then the index's mapping."""
    ranker = rt.ranker(search.options.ranker)  # an unknown name is a 400 either way
    reason = unrerankable(search, rt.limits.max_window)
    if reason is not None:
        return Plan(ranker, reason=reason)
    text = search.options.query_text or query_text(search.body.get("query"))
    if text is None:
        return Plan(ranker, reason="no match or multi_match query text to rerank with; set ext.rerank.query_text")
    if len(text) > rt.limits.max_text_chars:
        return Plan(ranker, reason=f"the query text has {len(text)} characters; the limit is {rt.limits.max_text_chars} (RERANKER_MAX_TEXT_CHARS)")
    layouts = store.topic_layouts(search.index, search.params)
    reason = layout_problem(layouts, rt.engine().vectors.info)
    if reason is not None or layouts is None:
        return Plan(ranker, reason=reason)
    wanted = search.options.window or rt.settings.window
    window = min(max(search.offset + search.size, wanted), rt.limits.max_window)
    return Plan(ranker, text, window, layouts)


# --- the two cluster requests and the answer ---------------------------------------------


def window_request(search: Search, window: int) -> tuple[dict[str, str], dict[str, Any]]:
    """(URL parameters, body) of request (1): the top `window` hits with their topics only."""
    body = {key: value for key, value in search.body.items() if key not in WINDOW_DROPS}
    body.update({"from": 0, "size": window, "_source": {"includes": ["hidden_topics"]}})
    return {key: value for key, value in search.params.items() if key not in WINDOW_PARAM_DROPS}, body


def page_request(search: Search, ids: list[str], size: int) -> tuple[dict[str, str], dict[str, Any]]:
    """(URL parameters, body) of request (2): the original request for the page's hits only."""
    body = {key: value for key, value in search.body.items() if key not in PAGE_DROPS}
    query = search.body.get("query", {"match_all": {}})
    body["query"] = {"bool": {"must": [query], "filter": [{"ids": {"values": ids}}]}}
    body.update({"from": 0, "size": size, "track_total_hits": False})
    return {key: value for key, value in search.params.items() if key not in PAGE_PARAM_DROPS}, body


def _hits(response: dict[str, Any]) -> list[dict[str, Any]]:
    return list((response.get("hits") or {}).get("hits") or [])


def rerank_window(rt: Runtime, store: OpenSearchStore, plan_: Plan, hits: list[dict[str, Any]], deadline: Deadline) -> tuple[list[int], dict[str, Any]]:
    """(the window's positions in the new order, the `ext.rerank` block). Fails open."""
    engine = rt.engine()
    candidates = tuple(
        Candidate(doc_id=str(hit.get("_id")), bm25_score=float(hit.get("_score") or 0.0), bm25_rank=rank)
        for rank, hit in enumerate(hits, start=1)
    )
    dtypes = {name: layout.dtype for name, layout in plan_.layouts.items()}
    topics = store.topics_from_hits(hits, engine.vectors.dim, dtypes)
    outcome, _ = rt.rerank(engine.query(plan_.text), CandidateSet(candidates, topics), plan_.ranker, deadline, "proxy")
    order = outcome.order if outcome.status != "degraded" else list(range(len(hits)))
    block = {
        "ranker": plan_.ranker.name,
        **status_fields(outcome),
        "took_ms": round(outcome.rerank_ms, 3),
        "window": plan_.window,
        "candidates": len(hits),
    }
    return order, block


def page_ids(hits: list[dict[str, Any]], positions: list[int]) -> list[str]:
    return list(dict.fromkeys(str(hits[p].get("_id")) for p in positions))


def merge(first: dict[str, Any], positions: list[int], second: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    """Response (1) with its hits replaced by (2)'s page hits in reranked order, BM25 scores kept."""
    window_hits = _hits(first)
    fetched = {(hit.get("_index"), hit.get("_id")): hit for hit in _hits(second)}
    page = []
    for position in positions:
        source = window_hits[position]
        hit = fetched.get((source.get("_index"), source.get("_id")))
        if hit is None:  # deleted between the two requests
            log.info("hit %s/%s vanished between the window and the page request", source.get("_index"), source.get("_id"))
            continue
        page.append({**hit, "_score": source.get("_score")})
    merged = dict(first)
    merged["hits"] = {**(first.get("hits") or {}), "hits": page}
    merged["timed_out"] = bool(first.get("timed_out")) or bool(second.get("timed_out"))
    marked: dict[str, Any] = mark(merged, block)
    return marked


def mark(response: Any, block: dict[str, Any]) -> Any:
    """`response` with `ext.rerank` = block (an error response is left as it is)."""
    if not isinstance(response, dict) or "error" in response:
        return response
    ext = response.get("ext")
    return {**response, "ext": {**(ext if isinstance(ext, dict) else {}), "rerank": block}}


def not_reranked(plan_: Plan) -> dict[str, Any]:
    return {"ranker": plan_.ranker.name, "status": "not_reranked", "reason": plan_.reason, "took_ms": 0.0, "window": 0}


def _took(started: float) -> int:
    return int(round(1000 * (time.perf_counter() - started)))


def answer(status: int, body: Any) -> Response:
    """A JSON response (indented when the URL asks for `pretty`)."""
    indent = 2 if "pretty" in request.args else None
    return Response(json.dumps(body, indent=indent), status=status, mimetype="application/json")


def url_params() -> dict[str, str]:
    """The URL parameters (first value of each); only JSON answers are offered."""
    params = request.args.to_dict()
    if params.get("format", "json") != "json":
        raise bad_request(f"[format] the reranker proxy answers JSON only, got {params['format']!r}")
    return params


# --- routes ------------------------------------------------------------------------------


@blueprint.route("/_search", methods=SEARCH_METHODS)
@blueprint.route("/<index>/_search", methods=SEARCH_METHODS)
def search(index: str | None = None) -> Response:
    """One search: forwarded, reranked when it can be, one page answered."""
    started = time.perf_counter()
    rt = runtime()
    expression = check_indices(index or rt.settings.opensearch.alias, rt.settings)
    store = cluster(rt)
    deadline = Deadline(rt.limits.deadline_ms)
    params = url_params()
    body, options = rerank_options(json_object(required=False), rt)
    offset, size = page_bounds(body, params)
    wanted = Search(expression, body, params, offset, size, options)
    how = plan(rt, store, wanted)
    path = _path(expression, "_search")
    if how.reason is not None:
        status, found = store.forward("POST", path, params, body)
        return answer(status, mark(found, not_reranked(how)))
    status, first = store.forward("POST", path, *window_request(wanted, how.window))
    if status != 200:
        return answer(status, first)
    hits = _hits(first)
    order, block = rerank_window(rt, store, how, hits, deadline)
    positions = order[offset : offset + size]
    second: dict[str, Any] = {}
    if positions:
        status, second = store.forward("POST", path, *page_request(wanted, page_ids(hits, positions), len(positions) * len(how.layouts)))
        if status != 200:
            return answer(status, second)
    return answer(200, {**merge(first, positions, second, block), "took": _took(started)})


@blueprint.route("/_msearch", methods=SEARCH_METHODS)
@blueprint.route("/<index>/_msearch", methods=SEARCH_METHODS)
def msearch(index: str | None = None) -> Response:
    """Several searches: all windows in one _msearch, all pages in a second."""
    started = time.perf_counter()
    rt = runtime()
    default_index = check_indices(index or rt.settings.opensearch.alias, rt.settings)
    store = cluster(rt)
    deadline = Deadline(rt.limits.deadline_ms)
    params = url_params()
    items = read_msearch(request.get_data(cache=True), default_index, rt)
    plans = [plan(rt, store, wanted) for _, wanted in items]
    windows = []
    for (header, wanted), how in zip(items, plans):
        windows += [header, wanted.body if how.reason is not None else window_request(wanted, how.window)[1]]
    status, first = store.forward("POST", "/_msearch", params, ndjson(windows))
    if status != 200:
        return answer(status, first)
    responses = list(first.get("responses") or [])
    pages: dict[int, tuple[list[int], dict[str, Any]]] = {}
    for number, how in enumerate(plans):
        if how.reason is None and number < len(responses) and "error" not in responses[number]:
            order, block = rerank_window(rt, store, how, _hits(responses[number]), deadline)
            wanted = items[number][1]
            pages[number] = (order[wanted.offset : wanted.offset + wanted.size], block)
    fetched = fetch_pages(store, params, items, plans, responses, pages)
    if isinstance(fetched, Response):
        return fetched
    for number, response in enumerate(responses):
        if number in pages:
            second = fetched.get(number, {})
            responses[number] = second if "error" in second else merge(response, pages[number][0], second, pages[number][1])
        elif number < len(plans) and plans[number].reason is not None:
            responses[number] = mark(response, not_reranked(plans[number]))
    return answer(200, {**first, "took": _took(started), "responses": responses})


def fetch_pages(
    store: OpenSearchStore, params: dict[str, str], items: list[tuple[dict[str, Any], Search]], plans: list[Plan],
    responses: list[dict[str, Any]], pages: dict[int, tuple[list[int], dict[str, Any]]],
) -> dict[int, dict[str, Any]] | Response:
    """The page responses of the reranked searches, by item number (one _msearch)."""
    wanted = [number for number, (positions, _) in pages.items() if positions]
    if not wanted:
        return {}
    lines: list[dict[str, Any]] = []
    for number in wanted:
        header, search_ = items[number]
        ids = page_ids(_hits(responses[number]), pages[number][0])
        lines += [header, page_request(search_, ids, len(pages[number][0]) * len(plans[number].layouts))[1]]
    status, second = store.forward("POST", "/_msearch", params, ndjson(lines))
    if status != 200:
        return answer(status, second)
    return dict(zip(wanted, list(second.get("responses") or [])))


def read_msearch(raw: bytes, default_index: str, rt: Runtime) -> list[tuple[dict[str, Any], Search]]:
    """NDJSON header/body pairs -> (header with its index set, the search). ApiError 400/403."""
    lines = raw.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ApiError(400, "parse_exception", "_msearch body is empty; expected NDJSON: a header line and a body line per search")
    if len(lines) % 2:
        raise ApiError(400, "parse_exception", f"_msearch body has {len(lines)} lines; expected a header line and a body line per search (the last header has no body)")
    items = []
    for start in range(0, len(lines), 2):
        header, body = (_ndjson_object(lines[start + i], start + i + 1) for i in (0, 1))
        try:
            index = header.get("index", default_index)
            if isinstance(index, list) and all(isinstance(name, str) for name in index):
                index = ",".join(index)
            if not isinstance(index, str):
                raise bad_request("[index] must be a string or an array of strings")
            check_indices(index, rt.settings)
            body, options = rerank_options(body, rt)
            offset, size = page_bounds(body, {})
        except ApiError as exc:
            raise ApiError(exc.status, exc.type, f"_msearch search {start // 2 + 1}: {exc.reason}") from None
        item_params = {name: _param(value) for name, value in header.items() if name != "index"}
        items.append(({**header, "index": index}, Search(index, body, item_params, offset, size, options)))
    return items


def _ndjson_object(line: bytes, number: int) -> dict[str, Any]:
    if not line.strip():
        return {}  # an empty header (or body) line stands for {}
    value = parse_json(line, f"_msearch line {number}")
    if not isinstance(value, dict):
        raise ApiError(400, "parse_exception", f"_msearch line {number} must be a JSON object")
    return value


def _param(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def ndjson(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


@blueprint.route("/_search/scroll", methods=SEARCH_METHODS)
def scroll() -> Response:
    """The next page of a scroll (which the proxy forwarded as it was)."""
    store = cluster(runtime())
    params = url_params()
    body = json_object(required=False)
    status, found = store.forward("POST", "/_search/scroll", params, body or None)
    return answer(status, found)


@blueprint.route("/<path:path>", methods=ALL_METHODS)
def refuse(path: str) -> NoReturn:
    """Everything that is not a search: writes, deletes, cluster administration, ..."""
    for rule in current_app.url_map.iter_rules():
        # A native route asked with another method (GET /search) is a 405, as without the proxy.
        if not rule.endpoint.startswith("proxy.") and not rule.arguments and rule.rule == f"/{path}":
            raise MethodNotAllowed(valid_methods=sorted(rule.methods or ()))
    raise ApiError(403, "security_exception", f"the reranker proxy forwards only searches ({PROXIED}); {request.method} /{path} is refused")


__all__ = ["blueprint", "query_text", "allowed_patterns"]
