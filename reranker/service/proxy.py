"""The OpenSearch-compatible search proxy: point a search client at the service, not the cluster.

    GET|POST [/INDEX]/_search     forwarded; the top window reranked; one page answered
    GET|POST [/INDEX]/_msearch    the same for every search in it: one _msearch for the windows,
                                  one _mget and/or one _msearch for the pages (and one
                                  more for the searches refused with a 400: `resend`)
    GET|POST /_search/scroll      forwarded as it is (a scroll is never reranked)
    GET|POST [/INDEX]/_count      forwarded as it is (the same indices and query clauses as _search)
    GET|HEAD /INDEX/_doc/ID       a document read, forwarded (get and exists)
    GET|HEAD /INDEX/_source/ID    its source alone, forwarded (get_source and exists_source)
    GET|POST [/INDEX]/_mget       documents read by id, forwarded (each document's index allowed)
    HEAD /INDEX                   whether the index exists, forwarded (indices.exists); a name
                                  the service's own routes take (/search, /healthz, ...) is theirs,
                                  any other method of /INDEX a 405
    anything else                 403 security_exception, never forwarded

Every document the proxy returns comes without the service's own fields (its topic
matrices, Doc2Vec vector and bookkeeping: `INTERNAL_FIELDS`, about 9 KB a document),
in hits, inner hits and top_hits alike, unless the search names them (`_source`,
`fields`); see `search_requests.strip_internal`. A document read asks the cluster to leave
them out (`search_requests.exclude_internal`) unless it names them.

A search that can be reranked costs two cluster requests. (1) The window: the query
with from 0 and size WINDOW, `_source` cut to `hidden_topics`, and without highlight,
fields, explain, ... (aggregations, suggest, totals stay); its topics are decoded and
reranked. (2) The page: the original request with its query wrapped in an `ids` filter
for the page's hits, so highlight, `_source`, fields etc. are computed for those hits
only; a search that asks for no highlight or computed field gets its page from one `_mget`
of those hits instead (a lookup by id, not a second run of the query). The answer is (1) with its hits replaced by (2)'s in the new order, each keeping
its BM25 `_score`, plus an `ext.rerank` block saying what ran. Over an index version
created with RERANKER_PASSAGES a `:maxp` fusion (the default ranker's) costs one more,
between the two: a nested query over the window's ids for each hit's best-passage BM25
(`OpenSearchStore.passage_bm25`); without passages, or on a failure there, that fusion is
two-way (the hits' BM25 alone).

Online experiments: a `_search` that names no ranker and falls in a running experiment's
traffic share (`ext.rerank.client_id` keeps a client in one arm) gets the interleaving of
the experiment's two rankers over the same window; `ext.rerank.query_id` is the id its
click events name (POST /events). `_msearch` searches are never interleaved.

A search that cannot be reranked (no query text, another sort, search_after, scroll,
size 0, rescore, collapse, an index without hidden topics, ...) is forwarded as it is
and marked `ext.rerank.status = "not_reranked"` with the reason. The cluster's own
errors come back with its status and body (a 400 to a rewritten request: its answer to the
client's own search, `_refused`; in an `_msearch`, to each such search's, all sent again in
one more _msearch, `resend`); a cluster that cannot be reached is a 503.
Without OPENSEARCH_URL there is no cluster to forward to: every proxy route answers
404 resource_not_found_exception.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NoReturn
from urllib.parse import quote

from flask import Blueprint, Response, current_app, request
from flask.blueprints import BlueprintSetupState
from pydantic import BaseModel
from werkzeug.exceptions import MethodNotAllowed
from werkzeug.routing import BaseConverter, Map, Rule

from reranker.errors import IndexMismatchError, StoreError
from reranker.experiments import assignment_key
from reranker.pipeline import past_window_reason, rescored
from reranker.rankers import CandidateSet, Ranker
from reranker.service.bodies import body_bytes, json_object, require_json_type
from reranker.service.errors import ApiError, bad_request
from reranker.service.operations import Reply, View, operation, undocumented
from reranker.service.paths import doc_id_hint
from reranker.service.query_dsl import READ_REFUSED_PARAMS, REFUSED_PARAMS, check_params, check_scroll, check_search_body
from reranker.service.reranking import Deadline, Runtime, runtime, status_fields
from reranker.service.schema import OpenSearchCount, OpenSearchMget, OpenSearchMgetAll, OpenSearchSearch, ScrollRequest, read
from reranker.service.search_requests import (
    Search,
    check_body_indices,
    check_indices,
    check_mget,
    exclude_internal,
    hidden_fields,
    hits_from_mget,
    hits_of,
    mark,
    merge,
    mget_docs,
    mget_request,
    named_fields,
    ndjson,
    page_bounds,
    page_by_mget,
    page_ids,
    page_request,
    query_text,
    read_msearch,
    rerank_options,
    strip_internal,
    strip_mget,
    unrerankable,
    window_request,
)
from reranker.store.events import Experiment
from reranker.store.opensearch import OpenSearchStore, TopicLayout
from reranker.store.opensearch_client import response_headers
from reranker.types import Candidate, EmbeddingInfo, StopListInfo

log = logging.getLogger(__name__)

blueprint = Blueprint("proxy", __name__)

SEARCH_METHODS = ["GET", "POST"]
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
READ_METHODS = ["GET"]  # and HEAD, which Flask adds to every GET route: exists()
PROXIED = (
    "searches: GET|POST [/INDEX]/_search, [/INDEX]/_msearch, [/INDEX]/_count and (where RERANKER_PROXY_ALLOW has scroll) /_search/scroll; "
    "reads: GET|HEAD /INDEX/_doc/ID, /INDEX/_source/ID, GET|POST [/INDEX]/_mget and HEAD /INDEX"
)
INDEX_PATTERN = "^[a-z0-9][a-z0-9_.*,-]*$"
INDEX = {"index": {"type": "string", "minLength": 1, "pattern": INDEX_PATTERN}}
DOC_ID = {"doc_id": {"type": "string", "minLength": 1, "description": "the document's id, percent-encoded"}}
MGET_ANSWER = "the cluster's answer: `docs`, each found or not, without the service's own fields unless a `_source` names them"


def _proxied(
    summary: str, body: type[BaseModel] | None = OpenSearchSearch, ndjson: bool = False, path: dict[str, Any] | None = None,
    answered: str = "the cluster's answer, reranked; `ext.rerank` says how", body_required: bool = False,
) -> Callable[[View], View]:
    """The operation of a proxied route: an OpenSearch body in, the cluster's answer out."""
    return operation(
        summary,
        path=path or INDEX,
        body=body,
        body_required=body_required,
        ndjson=ndjson,
        forwards_query=True,
        answers={
            200: Reply(answered),
            "default": Reply("an error the cluster returned, passed through unchanged"),
        },
        errors=(400, 403, 404, 413, 502, 503),
    )



@dataclass(frozen=True)
class Plan:
    """How one search is served: reranked over its top `window` hits, or forwarded as it is
    (`reason`). `hits`: how many BM25 hits the window request reads, the page's end when it
    reaches past the window; those past it keep their BM25 order after the reranked ones, as
    Elasticsearch's rescore leaves hits past its window, so that every page is a slice of one
    list (a window grown to each page's end reordered the pages before it: a hit shown on
    two pages, another on none)."""

    ranker: Ranker
    text: str = ""
    window: int = 0
    layouts: dict[str, TopicLayout] = field(default_factory=dict)
    reason: str | None = None
    experiment: Experiment | None = None  # interleave this search's window (only _search)
    # The topic sets the rankers read, fetched with the window's hits (request (1)).
    fields: tuple[str, ...] = ()
    hits: int = 0


def cluster(rt: Runtime) -> OpenSearchStore:
    """The OpenSearch store; ApiError 404 when the service runs on the embedded store."""
    store = rt.engine().store if rt.settings.opensearch_url else None
    if not isinstance(store, OpenSearchStore):
        raise _no_cluster()
    return store


def _no_cluster() -> ApiError:
    return ApiError(
        404, "resource_not_found_exception",
        "the OpenSearch search proxy needs a cluster: set OPENSEARCH_URL (this service runs on "
        "the embedded store; use POST /search or /rerank instead)",
    )


def target(rt: Runtime, index: str | None) -> tuple[str, OpenSearchStore]:
    """The index expression a proxied search (the alias when the URL names
    none) and the cluster; ApiError 403 or 404 as `check_indices` and `cluster` refuse.

    /documents/_search is also what someone asking for the stored document of id
    "_search" may have typed: a refusal of the index "documents" says how to ask for it."""
    try:
        if not rt.settings.opensearch_url:
            # Before the index patterns: without a cluster, the allowed patterns
            # (RERANKER_PROXY_INDICES) are not what the caller is missing.
            raise _no_cluster()
        return check_indices(index or rt.settings.opensearch.alias, rt.settings), cluster(rt)
    except ApiError as refused:
        if index != "documents":
            raise
        raise ApiError(refused.status, refused.type, refused.reason + doc_id_hint(), refused.headers) from None


def _path(index: str, endpoint: str) -> str:
    return f"/{quote(index, safe=',*')}/{endpoint}"


def layout_problem(layouts: dict[str, TopicLayout] | None, vectors: EmbeddingInfo, stopwords: StopListInfo) -> str | None:
    """Why the indices cannot be reranked with these word vectors and this stop list (None: they can)."""
    if layouts is None:
        return "the cluster could not resolve the index"
    if not layouts:
        return "no index matches"
    for name, layout in sorted(layouts.items()):
        if layout.info is None:
            return f"index [{name}] has no hidden topics (it was not built by `reranker index`)"
        try:
            layout.info.check(vectors, stopwords=stopwords)
        except IndexMismatchError as exc:
            return f"index [{name}]: {exc}"
    return None


def plan(rt: Runtime, store: OpenSearchStore, search: Search, *, experiments: bool = False) -> Plan:
    """Rerank `search` or forward it: decided from the request, then the index's mapping.

    experiments: let a running experiment interleave the search when it names no ranker
    and falls in the experiment's traffic share.
    """
    ranker = rt.ranker(search.options.ranker, search.options.fusion_weight, "ext.rerank")  # an unknown name is a 400 either way
    reason = unrerankable(search, rt.limits.max_window)
    if reason is not None:
        return Plan(ranker, reason=reason)
    text = search.options.query_text or query_text(search.body.get("query"))
    if text is None:
        return Plan(ranker, reason="no match or multi_match query text to rerank with; set ext.rerank.query_text")
    if len(text) > rt.limits.max_text_chars:
        return Plan(ranker, reason=f"the query text has {len(text)} characters; the limit is {rt.limits.max_text_chars} (RERANKER_MAX_TEXT_CHARS)")
    layouts = store.topic_layouts(search.index, search.params)
    reason = layout_problem(layouts, rt.engine().vectors.info, store.stop_list)
    if reason is None and layouts is not None:
        reason = _behind_alias(store, ranker, layouts)
        # What was read of the indices may be older than an alias swap (`reranker index
        # --rebuild`, `reranker indices use`): searches of the alias went unreranked for up
        # to METADATA_TTL after each, said to be of the old version. Read once more.
        if reason is not None and store.forget_metadata():
            layouts = store.topic_layouts(search.index, search.params)
            reason = layout_problem(layouts, rt.engine().vectors.info, store.stop_list)
            if reason is None and layouts is not None:
                reason = _behind_alias(store, ranker, layouts)
    if reason is not None or layouts is None:
        return Plan(ranker, reason=reason)
    window = min(search.options.window or rt.settings.window, rt.limits.max_window)
    if search.offset >= window:
        # Past the window hits keep the cluster's order: its own answer to the search is
        # the page, without a window request that reads every hit above it with its topics.
        return Plan(ranker, window=window, reason=past_window_reason(window, "RERANKER_WINDOW, or ext.rerank.window"))
    unit = assignment_key(search.options.client_id, text)
    named = search.options.ranker is not None or search.options.fusion_weight is not None
    # An experiment compares the two rankers' orders of the window: a page reaching past it
    # shows BM25's order there, which neither ranker chose.
    within = search.offset + search.size <= window
    experiment = rt.experiments.pick(unit) if experiments and not named and within else None
    if experiment is not None and any(_behind_alias(store, rt.ranker(name), layouts) for name in experiment.rankers):
        experiment = None
    rankers = [ranker, *(rt.ranker(name) for name in (experiment.rankers if experiment is not None else ()))]
    needs = set().union(*(r.needs for r in rankers))
    fields = tuple(field for need, field in TOPIC_FIELDS.items() if need in needs)
    return Plan(ranker, text, window, layouts, experiment=experiment, fields=fields, hits=max(window, search.offset + search.size))


# The source field of each topic set a ranker may need.
TOPIC_FIELDS = {"topics": "hidden_topics", "corrected_topics": "corrected_topics"}


def _behind_alias(store: OpenSearchStore, ranker: Ranker, layouts: dict[str, TopicLayout]) -> str | None:
    """Why `ranker` cannot rerank these indices (None: it can). The paper's topics come
    with each hit; WMD's words, Doc2Vec's vectors, the corrected topics' centering and
    the best passages are read through the alias, not from each hit's index."""
    if not ranker.needs - {"topics", "first_stage"}:
        return None
    serving = store.alias_index()
    elsewhere = sorted(name for name in layouts if name != serving)
    if elsewhere:
        return f"ranker {ranker.name!r} reads documents through the alias [{store.alias}], and index [{elsewhere[0]}] is not behind it"
    return None


# --- the two cluster requests and the answer ---------------------------------------------


def rerank_window(
    rt: Runtime, store: OpenSearchStore, plan_: Plan, hits: list[dict[str, Any]], deadline: Deadline, page: tuple[int, int],
    client_id: str | None = None,
) -> tuple[list[int], dict[str, Any]]:
    """(the page's window positions in the new order, the `ext.rerank` block). Fails open.

    page: (from, size). Hits keep their BM25 `_score`; the block's `scores` give each
    page hit's reranker score (and, for a fusion, its base ranker's own score). With an
    experiment in the plan, the page is the interleaving of its two rankers and the block
    carries the `query_id` that click events must name.
    """
    offset, size = page
    reranked = hits[: plan_.window]  # a page past the window is forwarded (`plan`)
    engine = rt.engine()
    candidates = tuple(
        Candidate(doc_id=str(hit.get("_id")), bm25_score=float(hit.get("_score") or 0.0), bm25_rank=rank)
        for rank, hit in enumerate(reranked, start=1)
    )
    dtypes = {name: layout.dtype for name, layout in plan_.layouts.items()}
    topic_sets = {field: store.topics_from_hits(reranked, engine.vectors.dim, dtypes, corrected=field == "corrected_topics") for field in plan_.fields}
    window = CandidateSet(
        candidates, topic_sets.get("hidden_topics"), corrected=topic_sets.get("corrected_topics"),
        exact_top=min(offset + size, len(reranked)), query_text=plan_.text,
    )
    query = engine.query(plan_.text)
    if plan_.experiment is not None:
        interleaved, _ = rt.interleave(
            query, window, plan_.experiment, deadline, offset=offset, size=size, client_id=client_id, text=plan_.text
        )
        if interleaved is not None:
            return interleaved.positions, {
                **interleaved.fields(),
                "took_ms": round(interleaved.rerank_ms, 3),
                "window": plan_.window,
                "candidates": len(reranked),
                "scores": [
                    {"_id": candidates[p].doc_id, **interleaved.outcome_of(team).hit_scores(p)}
                    for p, team in zip(interleaved.positions, interleaved.teams)
                ],
            }
    outcome, _ = rt.rerank(query, window, plan_.ranker, deadline, len(reranked))
    positions = rescored(outcome.order, len(hits))[offset : offset + size]
    unscored = {"score": None, "ranker_score": None}  # past the window, as a failed ranker's
    block = {
        "ranker": plan_.ranker.name,
        **status_fields(outcome),
        "took_ms": round(outcome.rerank_ms, 3),
        "window": plan_.window,
        "candidates": len(reranked),
        "scores": [{"_id": str(hits[p].get("_id")), **(outcome.hit_scores(p) if p < len(reranked) else unscored)} for p in positions],
    }
    return positions, block


def not_reranked(plan_: Plan) -> dict[str, Any]:
    """`ext.rerank` of a search forwarded as it is: `window` is 0 when nothing could be
    reranked, the search's window when its page starts past it (as /search says it)."""
    return {"ranker": plan_.ranker.name, "status": "not_reranked", "reason": plan_.reason, "took_ms": 0.0, "window": plan_.window}


def _took(started: float) -> int:
    return int(round(1000 * (time.perf_counter() - started)))


# The cluster's response headers a client may check, passed on as they came: Elasticsearch
# clients (7.14 and later) refuse a server without X-Elastic-Product; Warning carries the
# cluster's deprecation notices.
PASSED_HEADERS = ("x-elastic-product", "x-opensearch-product", "warning")


def answer(status: int, body: Any) -> Response:
    """A JSON response (indented when the URL asks for `pretty`), with the cluster's
    product headers of its last answer to this request."""
    indent = 2 if "pretty" in request.args else None
    return _with_cluster_headers(Response(json.dumps(body, indent=indent), status=status, mimetype="application/json"))


def _with_cluster_headers(response: Response) -> Response:
    received = response_headers()
    for name in PASSED_HEADERS:
        if name in received:
            response.headers[name] = received[name]
    return response


def cluster_info() -> Response:
    """GET / through the proxy: the cluster's own answer (name, version, tagline), which
    clients read on connect to know what they talk to."""
    store = cluster(runtime())
    status, found = store.forward("GET", "/", url_params())
    return answer(status, found)


def url_params(refused: Mapping[str, str] = REFUSED_PARAMS) -> dict[str, str]:
    """The URL parameters (first value of each); only JSON answers are offered, and no
    search pipeline but by the operator's leave (`check_params`; a document read passes
    READ_REFUSED_PARAMS, which also refuses `refresh`)."""
    params = request.args.to_dict()
    check_params(params, runtime().limits.proxy_allow, refused)
    if params.get("format", "json") != "json":
        raise bad_request(f"[format] the reranker proxy answers JSON only, got {params['format']!r}")
    return params


# --- routes ------------------------------------------------------------------------------


@blueprint.route("/_search", methods=SEARCH_METHODS)
@blueprint.route("/<index>/_search", methods=SEARCH_METHODS)
@_proxied("search, reranked")
def search(index: str | None = None) -> Response:
    """One search: forwarded, reranked when it can be, one page answered."""
    started = time.perf_counter()
    rt = runtime()
    expression, store = target(rt, index)
    deadline = Deadline(rt.limits.deadline_ms)
    params = url_params()
    raw = json_object(required=False)
    check_body_indices(raw, rt.settings)
    check_search_body(raw, rt.limits.proxy_allow)
    check_scroll(params.get("scroll"), rt.limits.proxy_allow)
    body, options = rerank_options(raw, rt.settings)
    offset, size = page_bounds(body, params)
    wanted = Search(expression, body, params, offset, size, options)
    hidden = hidden_fields(named_fields(body, params))
    how = plan(rt, store, wanted, experiments=True)
    path = _path(expression, "_search")
    if how.reason is not None:
        status, found = store.forward("POST", path, params, body)
        return answer(status, strip_internal(mark(found, not_reranked(how)), hidden))
    status, first = store.forward("POST", path, *window_request(wanted, how.hits, how.fields))
    if status != 200:
        return _refused(store, path, wanted, how, hidden, status, first)
    hits = hits_of(first)
    positions, block = rerank_window(rt, store, how, hits, deadline, (offset, size), options.client_id)
    second: dict[str, Any] = {}
    if positions and page_by_mget(wanted):
        status, found = store.forward("POST", "/_mget", *mget_request(wanted, hits, positions))
        if status != 200:
            _take_back(rt, block)
            return _refused(store, path, wanted, how, hidden, status, found)
        second = hits_from_mget(found)
    elif positions:
        status, second = store.forward("POST", path, *page_request(wanted, page_ids(hits, positions), len(positions) * len(how.layouts)))
        if status != 200:
            _take_back(rt, block)
            return _refused(store, path, wanted, how, hidden, status, second)
    return answer(200, strip_internal({**merge(first, positions, second, block), "took": _took(started)}, hidden))


def _take_back(rt: Runtime, block: dict[str, Any]) -> None:
    """An experiment's list recorded for a page that is not shown (its page request failed:
    the answer is the cluster's error, or the client's own search not reranked) is taken
    back from the experiment store. Fails open, as recording it does: a store that cannot
    take it back leaves it, and the search is answered all the same. Counted as
    `taken_back` once it is out of the store (a Counter cannot go down), so an operator's
    `interleaved - taken_back` is the report's count of searches."""
    query_id = block.get("query_id")
    if query_id is None:
        return
    try:
        rt.experiments.store().take_back_query(str(query_id))
    except StoreError as exc:
        log.warning("experiment query %s was recorded but not shown, and could not be taken back: %s", query_id, exc)
        return
    rt.metrics.experiment_searches.labels(block["experiment"]["id"], "taken_back").inc()


def _refused(store: OpenSearchStore, path: str, wanted: Search, how: Plan, hidden: tuple[str, ...], status: int, refused: Any) -> Response:
    """The answer to a search whose window or page request the cluster refused.

    A 400 is about the body the proxy sent, its rewrite of the client's (the window's size
    and `_source`, the page's `ids` filter), so its `line`/`col` and any part it quotes
    point into that rewrite. The client's own search is then sent once, as a search that
    is not reranked is, and the cluster's answer to it returned: its error is the one the
    client's request gets from the cluster; if it is accepted (the rewrite alone was
    refused: a window above the index's `max_result_window`, say), it is the answer, not
    reranked, with the refusal as the reason (`refusal_block`). Only on errors: a search the
    cluster takes costs nothing more. Other statuses (404, 429, 5xx) are not about the body:
    as they came. `_msearch` does the same for each of its searches (`msearch`)."""
    if status != 400:
        return answer(status, refused)
    status, found = store.forward("POST", path, wanted.params, wanted.body)
    return answer(status, strip_internal(mark(found, refusal_block(how, refused)), hidden))


def refusal_block(how: Plan, refused: Any) -> dict[str, Any]:
    """`ext.rerank` of a search answered as the client sent it because the cluster refused
    the proxy's rewrite of it with `refused` (an error body, or an `_msearch` error item)."""
    error = refused.get("error") if isinstance(refused, dict) else None
    if isinstance(error, dict) and isinstance(error.get("root_cause"), list) and error["root_cause"]:
        error = error["root_cause"][0]  # the cause itself ("Result window is too large ..."), not "all shards failed"
    said = f"{error.get('type')}: {error.get('reason')}" if isinstance(error, dict) else json.dumps(refused)[:300]
    return {**not_reranked(how), "reason": f"the cluster refused the reranking request ({said})", "window": 0}


def is_refusal(response: Any) -> bool:
    """Whether an `_msearch` item (or a whole answer given as one) is a 400: the cluster's
    refusal of the body the proxy sent, which the client's own search may not share."""
    return isinstance(response, dict) and "error" in response and response.get("status") == 400


@blueprint.route("/_msearch", methods=SEARCH_METHODS)
@blueprint.route("/<index>/_msearch", methods=SEARCH_METHODS)
@_proxied("multi-search, each reranked", ndjson=True)
def msearch(index: str | None = None) -> Response:
    """Several searches: all windows in one _msearch, all pages in a second (and/or an
    _mget). A search whose window or page the cluster refused with a 400 gets its answer
    to the search as the client sent it, all of them from one more _msearch (`resend`)."""
    started = time.perf_counter()
    rt = runtime()
    default_index, store = target(rt, index)
    deadline = Deadline(rt.limits.deadline_ms)
    params = url_params()
    raw = body_bytes()
    require_json_type("application/x-ndjson")
    items = read_msearch(raw, default_index, rt.settings)
    plans = [plan(rt, store, wanted) for _, wanted in items]
    total = sum(how.hits for how in plans if how.reason is None)
    if total > rt.limits.max_total_window:
        raise ApiError(
            413, "content_too_long_exception",
            f"_msearch asks to rerank {total} candidates in all (its searches' windows together); at most "
            f"{rt.limits.max_total_window} (RERANKER_MAX_TOTAL_WINDOW): ask for smaller windows (ext.rerank.window) or send fewer searches",
        )
    windows = []
    for (header, wanted), how in zip(items, plans):
        windows += [header, wanted.body if how.reason is not None else window_request(wanted, how.hits, how.fields)[1]]
    status, first = store.forward("POST", "/_msearch", params, ndjson(windows))
    # The searches the cluster refused as the proxy rewrote them (item number -> the 400),
    # sent again as the client sent them (`resend`).
    refused: dict[int, Any] = {}
    if status == 400 and any(how.reason is None for how in plans):
        # The whole request refused (a body it could not parse, its positions in a rewrite):
        # every search goes again, and the cluster's answer to them is the answer.
        refused = dict.fromkeys(range(len(items)), first)
        first = {}
    elif status != 200:
        return answer(status, first)
    responses = list(first.get("responses") or [{} for _ in items])
    pages: dict[int, tuple[list[int], dict[str, Any]]] = {}
    for number, (how, response) in enumerate(zip(plans, responses)):
        if how.reason is None and is_refusal(response):
            refused[number] = response
        elif how.reason is None and "error" not in response and number not in refused:
            wanted = items[number][1]
            pages[number] = rerank_window(rt, store, how, hits_of(response), deadline, (wanted.offset, wanted.size))
    fetched = fetch_pages(store, params, items, plans, responses, pages)
    if isinstance(fetched, Response):
        return fetched
    refused.update((number, second) for number, second in fetched.items() if is_refusal(second))
    for number, response in enumerate(responses):
        if number in refused:
            continue
        if number in pages:
            second = fetched.get(number, {})
            responses[number] = second if "error" in second else merge(response, pages[number][0], second, pages[number][1])
        elif number < len(plans) and plans[number].reason is not None:
            responses[number] = mark(response, not_reranked(plans[number]))
    if refused:
        again = resend(store, params, items, plans, refused)
        if isinstance(again, Response):
            return again
        responses = [again.get(number, response) for number, response in enumerate(responses)]
    for (_, search_), response in zip(items, responses):
        strip_internal(response, hidden_fields(named_fields(search_.body, search_.params)))
    return answer(200, {**first, "took": _took(started), "responses": responses})


def resend(
    store: OpenSearchStore, params: dict[str, str], items: list[tuple[dict[str, Any], Search]], plans: list[Plan], refused: dict[int, Any],
) -> dict[int, Any] | Response:
    """The cluster's answers to the refused searches of an `_msearch` as the client sent them
    (header and body, as a search that is not reranked goes), all in one more _msearch, by
    item number: its error items as they come, the others marked not reranked with the
    refusal as the reason (`_refused` for one search). A refusal of that whole request (a body
    the cluster cannot parse) is the answer to the client's _msearch, as it would have been."""
    numbers = sorted(refused)
    lines = [line for number in numbers for line in (items[number][0], items[number][1].body)]
    status, again = store.forward("POST", "/_msearch", params, ndjson(lines))
    if status != 200:
        return answer(status, again)
    found = list(again.get("responses") or [])
    return {
        number: mark(response, refusal_block(plans[number], refused[number]) if plans[number].reason is None else not_reranked(plans[number]))
        for number, response in zip(numbers, found)
    }


def fetch_pages(
    store: OpenSearchStore, params: dict[str, str], items: list[tuple[dict[str, Any], Search]], plans: list[Plan],
    responses: list[dict[str, Any]], pages: dict[int, tuple[list[int], dict[str, Any]]],
) -> dict[int, dict[str, Any]] | Response:
    """The page responses of the reranked searches, by item number: the pages of plain
    stored documents from one `_mget` (a lookup by id: at the _msearch limits, a second run
    of 50 queries cost the cluster as much as the first, bench/bench_bounds.py), the others
    from one _msearch that runs their queries again on the page's ids. A 400 to either
    request as a whole is each of its searches' error item (`is_refusal`: `msearch` sends them again)."""
    wanted = [number for number, (positions, _) in pages.items() if positions]
    by_id = [number for number in wanted if page_by_mget(items[number][1])]
    by_query = [number for number in wanted if number not in by_id]
    fetched: dict[int, dict[str, Any]] = {}
    if by_id:
        docs = [mget_docs(items[number][1], hits_of(responses[number]), pages[number][0]) for number in by_id]
        status, found = store.forward("POST", "/_mget", {}, {"docs": [doc for group in docs for doc in group]})
        if status == 400:
            fetched.update(dict.fromkeys(by_id, {**found, "status": status}))
        elif status != 200:
            return answer(status, found)
        else:
            every = list(found.get("docs") or [])
            start = 0
            for number, group in zip(by_id, docs):
                fetched[number] = hits_from_mget({"docs": every[start : start + len(group)]})
                start += len(group)
    if by_query:
        lines: list[dict[str, Any]] = []
        for number in by_query:
            header, search_ = items[number]
            ids = page_ids(hits_of(responses[number]), pages[number][0])
            lines += [header, page_request(search_, ids, len(pages[number][0]) * len(plans[number].layouts))[1]]
        status, second = store.forward("POST", "/_msearch", params, ndjson(lines))
        if status == 400:
            fetched.update(dict.fromkeys(by_query, {**second, "status": status}))
        elif status != 200:
            return answer(status, second)
        else:
            fetched.update(zip(by_query, list(second.get("responses") or [])))
    return fetched


@blueprint.route("/_search/scroll", methods=SEARCH_METHODS)
@_proxied("the next page of a scroll, forwarded as it is (403 unless RERANKER_PROXY_ALLOW names scroll)", body=ScrollRequest)
def scroll() -> Response:
    """The next page of a scroll (which the proxy forwarded as it was)."""
    rt = runtime()
    store = cluster(rt)
    params = url_params()
    raw = json_object(required=False)
    check_scroll(params.get("scroll", ""), rt.limits.proxy_allow)
    asked = read(ScrollRequest, raw) if raw else None
    if asked is not None and asked.scroll is not None:
        check_scroll(asked.scroll, rt.limits.proxy_allow)
    status, found = store.forward("POST", "/_search/scroll", params, asked.model_dump(exclude_none=True) if asked else None)
    # The search that opened the scroll is not known here: every page comes without the
    # service's own fields.
    return answer(status, strip_internal(found, hidden_fields(frozenset())))


@blueprint.route("/_count", methods=SEARCH_METHODS)
@blueprint.route("/<index>/_count", methods=SEARCH_METHODS)
@_proxied("count the documents a query matches, forwarded as it is", body=OpenSearchCount)
def count(index: str | None = None) -> Response:
    """A count: the same indices and query clauses as a search may use, nothing reranked."""
    rt = runtime()
    expression, store = target(rt, index)
    params = url_params()
    body = json_object(required=False)
    for key in body:
        if key != "query":  # refused by policy, as an unknown key of a search body is
            raise ApiError(403, "security_exception", f"[{key}] is not a part of a count the proxy forwards: a count body holds only [query]")
    check_body_indices(body, rt.settings)
    check_search_body(body, rt.limits.proxy_allow)
    status, found = store.forward("POST", _path(expression, "_count"), params, body or None)
    return answer(status, found)


@blueprint.route("/<index>/_doc/<path:doc_id>", methods=READ_METHODS)
@_proxied("read one document, forwarded without the service's own fields", body=None, path={**INDEX, **DOC_ID},
          answered="the cluster's answer: the document (`found`), without the service's own fields unless the URL's `_source` names them")
def get_document(index: str, doc_id: str) -> Response:
    """GET (a client's `get`) or HEAD (`exists`) of one document of an allowed index."""
    return read_document(index, "_doc", doc_id)


@blueprint.route("/<index>/_source/<path:doc_id>", methods=READ_METHODS)
@_proxied("read one document's source, forwarded without the service's own fields", body=None, path={**INDEX, **DOC_ID},
          answered="the cluster's answer: the document's `_source` alone, without the service's own fields unless the URL's `_source` names them")
def get_source(index: str, doc_id: str) -> Response:
    """GET (a client's `get_source`) or HEAD (`exists_source`) of one document's source."""
    return read_document(index, "_source", doc_id)


def read_document(index: str, endpoint: str, doc_id: str) -> Response:
    """One document read, as searches are: the index allowed (`target`), the URL parameters
    checked, the service's own fields left out by the cluster and taken out of what comes back.
    The cluster's answer passes with its status: a missing document is its 404 (`found: false`),
    which a client's `exists` reads as False."""
    rt = runtime()
    expression, store = target(rt, index)
    params = url_params(READ_REFUSED_PARAMS)
    hidden = hidden_fields(named_fields(None, params))
    path = f"{_path(expression, endpoint)}/{quote(doc_id, safe='')}"
    if request.method == "HEAD":
        return _forwarded_head(store, path, params)
    status, found = store.forward("GET", path, exclude_internal(params, hidden))
    if endpoint == "_source" and status == 200 and isinstance(found, dict):
        # The answer is the source itself, without the hit around it that strip_internal reads.
        return answer(status, strip_internal({"_id": doc_id, "_source": found}, hidden)["_source"])
    return answer(status, strip_internal(found, hidden))


@blueprint.route("/_mget", methods=SEARCH_METHODS)
@_proxied("read documents by id, each naming its index, forwarded without the service's own fields", body=OpenSearchMgetAll, answered=MGET_ANSWER, body_required=True)
def mget() -> Response:
    """Documents by id (a client's `mget` without an index): every document names its own
    index (no alias is assumed for a read), each one allowed."""
    return read_documents(None)


@blueprint.route("/<index>/_mget", methods=SEARCH_METHODS)
@_proxied("read documents by id, forwarded without the service's own fields", body=OpenSearchMget, answered=MGET_ANSWER, body_required=True)
def mget_index(index: str) -> Response:
    """Documents by id of the path's index (the default of those that name none), each
    document's index allowed."""
    return read_documents(index)


def read_documents(index: str | None) -> Response:
    """An `_mget`, as searches are read: the indices allowed (`check_mget`), the URL
    parameters checked, the service's own fields left out by the cluster and taken out of
    what comes back (`strip_mget`: a document's own `_source` names fields for it alone)."""
    rt = runtime()
    expression, store = target(rt, index) if index is not None else (None, cluster(rt))
    if expression is not None and not re.fullmatch(INDEX_PATTERN, expression):
        # The cluster answers a multi-get of an index that cannot exist with a 200 (an error
        # for each document): a name the published pattern refuses is refused here.
        raise bad_request(f"[index] {expression!r} is not an index name the proxy reads: lowercase letters and digits, then also _ . - , *")
    params = url_params(READ_REFUSED_PARAMS)
    body = json_object(required=False)
    check_mget(body, expression, rt.settings)
    # The URL's filter applies to the documents whose item has no `_source` of its own.
    hidden = hidden_fields(named_fields(None, params))
    path = _path(expression, "_mget") if expression is not None else "/_mget"
    status, found = store.forward("POST", path, exclude_internal(params, hidden, body), body)
    return answer(status, strip_mget(found, body, params))


class IndexNameConverter(BaseConverter):
    """An index named alone in the path (HEAD /INDEX), but no name the service's own
    one-segment routes take (/healthz, /search, /rerank, ...): those keep their meaning,
    HEAD /healthz the probe's and HEAD /search a 405, where this route would make them the
    proxy's. Nor a name starting with `_`, which no index has: /_bulk, /_aliases, /_mapping
    are the cluster's APIs, refused as such (`refuse`), not a 405 of this route. The names
    are read from the app's routes as the rule is added: the proxy's blueprint is registered
    last (`create_app`)."""

    part_isolating = True

    def __init__(self, url_map: Map, *args: Any, **kwargs: Any) -> None:
        super().__init__(url_map, *args, **kwargs)
        taken = sorted({
            rule.rule[1:] for rule in url_map.iter_rules()
            if not rule.arguments and rule.rule.count("/") == 1 and not rule.rule.startswith("/_") and rule.rule != "/"
        })  # fmt: skip
        # `(?![\s\S])`, not `$`, which also matches before a final newline.
        self.regex = f"(?!_)(?!(?:{'|'.join(re.escape(name) for name in taken)})(?![\\s\\S]))[^/]+" if taken else "(?!_)[^/]+"


@blueprint.record_once
def _register_converter(state: BlueprintSetupState) -> None:
    state.app.url_map.converters["index_name"] = IndexNameConverter


@blueprint.route("/<index_name:index>", methods=["HEAD"])
@operation(
    "whether an index or alias exists (a client's `indices.exists`), forwarded for the allowed indices",
    path=INDEX,
    forwards_query=True,
    answers={
        200: Reply("the cluster has it", media=()),
        404: Reply("the cluster has no such index (opensearch-py's `indices.exists` reads False), or there is no cluster", media=()),
    },
    errors=(403, 502, 503),
)
def index_exists(index: str) -> Response:
    """HEAD of an allowed index, as applications check theirs at start-up (an
    AuthorizationException from a 403 there stops them). Only the status comes back, the
    cluster's 200 or 404: a name outside RERANKER_PROXY_INDICES is refused with 403 before
    the cluster is asked, so it never tells which other indices exist. Any other method of
    /INDEX is a 405 (`refuse`): writes to an index, reads of its settings and mappings are
    not forwarded."""
    rt = runtime()
    expression, store = target(rt, index)
    return _forwarded_head(store, f"/{quote(expression, safe=',*')}", url_params())


def _forwarded_head(store: OpenSearchStore, path: str, params: Mapping[str, str]) -> Response:
    """A HEAD forwarded to the cluster, answered with its status alone. opensearch-py
    answers a HEAD with whether the status was 2xx (True / False for a 404), not the
    status; an error of another status comes back as the error's (`forward`), its body
    dropped."""
    status, found = store.forward("HEAD", path, params)
    status = status if not isinstance(found, bool) else 200 if found else 404
    return _with_cluster_headers(Response(b"", status=status, mimetype="application/json"))


@blueprint.route("/<path:path>", methods=ALL_METHODS)
@undocumented
def refuse(path: str) -> NoReturn:
    """Everything that is not a search: writes, deletes, cluster administration, ..."""
    # A route the service has, asked with another method (PUT /search, DELETE
    # /documents/x, PUT /papers/_search, PUT /papers/_doc/1) is a 405 listing the methods it has.
    allowed = native_routes().bind("localhost").allowed_methods(f"/{path}")
    if allowed:
        raise MethodNotAllowed(valid_methods=sorted(allowed))
    # /documents/_search/similar and the like: a document's path that the proxy's names
    # shadow says how to name the document, as a refused /documents/_search does.
    hint = doc_id_hint() if request.method in ("GET", "HEAD") else ""
    if not runtime().settings.opensearch_url:
        raise ApiError(404, "resource_not_found_exception", f"no such route: {request.method} /{path} (the service's routes: GET /openapi.json){hint}")
    raise ApiError(403, "security_exception", f"the reranker proxy forwards only searches and reads ({PROXIED}); {request.method} /{path} is refused{hint}")


def native_routes() -> Map:
    """The app's routes but this catch-all, to ask which methods a path has."""
    routes: Map | None = current_app.extensions.get("reranker.native_routes")
    if routes is None:
        url_map = current_app.url_map
        routes = Map(
            [Rule(rule.rule, methods=rule.methods, endpoint=rule.endpoint) for rule in url_map.iter_rules() if rule.endpoint != "proxy.refuse"],
            # Not merge_slashes: the app's map lets the catch-all take /documents//similar
            # (an empty id) as it was sent; read as /documents/similar it would claim GET.
            converters=url_map.converters, strict_slashes=url_map.strict_slashes, merge_slashes=False,
        )  # fmt: skip
        current_app.extensions["reranker.native_routes"] = routes
    return routes

