"""OpenSearch search requests as the proxy reads and rewrites them: plain functions on JSON.

Which searches can be reranked (and why not), the query text, the page, and the two
requests a reranked search becomes: (1) the window with only its topics, (2) the page
with everything else (highlight, `_source`, fields). `proxy.py` sends them and reranks.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Mapping, Sequence

from reranker.config import Settings
from reranker.service.bodies import json_type, parse_json
from reranker.service.errors import ApiError, bad_request
from reranker.service.query_dsl import check_mget_body, check_search_body
from reranker.service.schema import RerankExt, read
from reranker.store.opensearch import INTERNAL_FIELDS

log = logging.getLogger(__name__)

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
    options: RerankExt  # what its `ext.rerank` asked for (all None: the service's defaults)


# --- where requests may go -------------------------------------------------------------


def allowed_patterns(settings: Settings) -> tuple[str, ...]:
    """RERANKER_PROXY_INDICES, or the alias and its versions."""
    alias = settings.opensearch.alias
    return settings.service.proxy_indices or (alias, f"{alias}-v*")


def check_indices(expression: str, settings: Settings) -> str:
    """`expression` if every comma-separated part is allowed; ApiError 403 otherwise.

    A cross-cluster name (`cluster:index`) is refused whatever the patterns say: the
    proxy searches its own cluster, and a pattern such as `reranker-v*` would otherwise
    match `reranker-vx:secret` on a remote one."""
    patterns = allowed_patterns(settings)
    for part in expression.split(","):
        if ":" in part:
            raise ApiError(
                403, "security_exception",
                f"the reranker proxy does not forward cross-cluster names [{part}]: it searches its own cluster only",
            )
        if part in ("", ".", "..") or not any(fnmatchcase(part, pattern) for pattern in patterns):
            raise ApiError(
                403, "security_exception",
                f"the reranker proxy does not forward to index [{part}]; allowed index patterns: "
                f"{', '.join(patterns)} (RERANKER_PROXY_INDICES)",
            )
    return expression


def check_body_indices(body: Any, settings: Settings, where: str = "") -> None:
    """ApiError 403 if a search body names an index that is not allowed.

    Several queries read documents of another index than the one searched: a terms lookup
    (`terms: {FIELD: {"index", "id", "path"}}`), `more_like_this` documents in `like` /
    `unlike` (`{"_index", "_id"}`), an indexed shape (`geo_shape` / `shape`:
    `indexed_shape: {"index", "id"}`), `percolate` with a stored document (`"index", "id"`),
    and `pinned` documents (`docs: [{"_index", "_id"}]`). Rather than list queries (new ones
    come with plugins and versions), every object of the body is checked by shape: an
    `_index` string anywhere, and an `index` string beside an `id` (how each of these
    names a stored document). A field that happens to be called `index` is refused only
    beside a field called `id` in the same object, which no query clause has.
    """
    _check_boosted_indices(body, settings, where)
    stack: list[tuple[Any, str]] = [(body, where)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            named = [value["_index"]] if "_index" in value else []
            if "index" in value and "id" in value:
                named.append(value["index"])
            for name in named:
                names = name if isinstance(name, list) else [name]
                for part in names:
                    if not isinstance(part, str):
                        raise bad_request(f"[{path}] names an index that is not a string: {part!r}")
                    try:
                        check_indices(part, settings)
                    except ApiError as exc:
                        raise ApiError(403, exc.type, f"[{path or 'body'}] reads another index: {exc.reason}") from None
            stack.extend((child, f"{path}.{key}" if path else str(key)) for key, child in value.items())
        elif isinstance(value, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(value))


def _check_boosted_indices(body: Any, settings: Settings, where: str) -> None:
    """ApiError 403 if `indices_boost` names an index that is not allowed. It reads no
    documents, but the cluster answers 404 for a name that matches no index: a way to learn
    which indices exist beyond the allowed ones. Both its forms are read, a list of
    one-key objects and (older) one object; any other shape is the cluster's to refuse."""
    boosts = body.get("indices_boost") if isinstance(body, dict) else None
    items = boosts if isinstance(boosts, list) else [boosts] if isinstance(boosts, dict) else []
    path = f"{where}.indices_boost" if where else "indices_boost"
    for item in items:
        for name in item if isinstance(item, dict) else ():
            try:
                check_indices(name, settings)
            except ApiError as exc:
                raise ApiError(403, exc.type, f"[{path}] names another index: {exc.reason}") from None


# The most documents one _mget may read (OpenSearch's default index.max_result_window, the
# most one search returns).
MAX_MGET_DOCUMENTS = 10_000


def check_mget(body: dict[str, Any], index: str | None, settings: Settings) -> None:
    """ApiError 403 or 400 unless a multi-get body reads only allowed indices: its keys those
    the proxy knows (`query_dsl.check_mget_body`), and every document's index, its `_index` or
    else the path's (`index`; None for /_mget, which has no default), allowed as a search's
    is (`check_indices`). A document with no index anywhere is a 400, more than
    MAX_MGET_DOCUMENTS a 413, before the cluster."""
    check_mget_body(body, settings.service.proxy_allow)
    asked = len(body.get("docs", [])) + len(body.get("ids", []))
    if asked > MAX_MGET_DOCUMENTS:
        # The cluster bounds what one search returns (index.max_result_window) and nothing
        # bounds a multi-get: every document comes back in one answer the worker holds whole.
        raise ApiError(
            413, "content_too_long_exception",
            f"an _mget through the reranker proxy reads at most {MAX_MGET_DOCUMENTS:,} documents (as a search "
            f"returns at most index.max_result_window, 10,000 by default), got {asked:,}: split it",
        )
    if "ids" in body and index is None:
        raise ApiError(400, "parsing_exception", "[ids] names documents of the index in the path; /_mget has none: use /INDEX/_mget, or docs with an _index each")
    for i, doc in enumerate(body.get("docs", [])):
        if "_index" not in doc:
            if index is None:
                raise ApiError(400, "parsing_exception", f"[docs[{i}]] names no _index, and /_mget has no index in its path to default to")
            continue
        try:
            check_indices(doc["_index"], settings)
        except ApiError as exc:
            raise ApiError(403, exc.type, f"[docs[{i}]._index] reads another index: {exc.reason}") from None


# --- reading a search -------------------------------------------------------------------


def rerank_options(body: dict[str, Any], settings: Settings) -> tuple[dict[str, Any], RerankExt]:
    """(the body without `ext.rerank`, what that block asked for). ApiError 400 if malformed.

    A null `ext` or `ext.rerank` is an absent one (as null is in every body the service
    reads), and is not forwarded."""
    ext = body.get("ext")
    if ext is None and "ext" in body:
        return {name: value for name, value in body.items() if name != "ext"}, RerankExt()
    if not isinstance(ext, dict) or "rerank" not in ext:
        return body, RerankExt()
    asked = RerankExt() if ext["rerank"] is None else read(RerankExt, ext["rerank"], where="ext.rerank", limits=settings.service)
    rest = {name: value for name, value in ext.items() if name != "rerank"}
    stripped = {name: value for name, value in body.items() if name != "ext"}
    if rest:
        stripped["ext"] = rest
    return stripped, asked


def page_bounds(body: dict[str, Any], params: dict[str, str]) -> tuple[int, int]:
    """(from, size): the URL's when given, else the body's, else (0, 10). ApiError 400 if malformed;
    the body's may be a string of digits, which the cluster reads as the number.

    The body is OpenSearch's, passed on to the cluster; only its paging is read here.
    """
    bounds = {"from": 0, "size": 10}
    for name in bounds:
        value = body.get(name)
        if name in params:
            text = params[name].strip()
            # ASCII digits only: str.isdigit() also takes "¹" and "①", which int() refuses.
            if not re.fullmatch(r"-?[0-9]{1,18}", text):
                raise bad_request(f"[{name}] URL parameter must be an integer, got {params[name]!r}")
            value = int(text)
        if value is None:
            continue
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value.strip()):
            value = int(value)  # OpenSearch reads a number in a string too ("size": "20", as a form sends it)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise bad_request(f"[{name}] must be an integer, got {json_type(value)}")
        if value < 0:
            raise bad_request(f"[{name}] must be >= 0, got {int(value)}")
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


# --- the two cluster requests and the answer ---------------------------------------------


def window_request(search: Search, window: int, fields: Sequence[str] = ("hidden_topics",)) -> tuple[dict[str, str], dict[str, Any]]:
    """(URL parameters, body) of request (1): the top `window` hits with only `fields`
    of their source (the topic sets the rankers read; none: no source at all)."""
    body = {key: value for key, value in search.body.items() if key not in WINDOW_DROPS}
    body.update({"from": 0, "size": window, "_source": {"includes": list(fields)} if fields else False})
    return {key: value for key, value in search.params.items() if key not in WINDOW_PARAM_DROPS}, body


def page_request(search: Search, ids: list[str], size: int) -> tuple[dict[str, str], dict[str, Any]]:
    """(URL parameters, body) of request (2): the original request for the page's hits only."""
    body = {key: value for key, value in search.body.items() if key not in PAGE_DROPS}
    query = search.body.get("query", {"match_all": {}})
    if body.get("explain") is True or search.params.get("explain") == "true":
        # Each hit's `_explanation` is of the client's query: the page's ids in its bool
        # added a clause to every one. As a post_filter they leave it as it is, at the
        # cost of a query over every match (as the window's), only when explain is asked.
        body.update({"query": query, "post_filter": {"ids": {"values": ids}}})
    else:
        body["query"] = {"bool": {"must": [query], "filter": [{"ids": {"values": ids}}]}}
    body.update({"from": 0, "size": size, "track_total_hits": False})
    return {key: value for key, value in search.params.items() if key not in PAGE_PARAM_DROPS}, body


# Body keys whose page hits the query itself shapes (highlights, computed fields, ...):
# with any of them the page is fetched by re-running the query on the page's ids.
QUERY_SHAPED = frozenset({"highlight", "fields", "docvalue_fields", "stored_fields", "script_fields", "explain", "version", "seq_no_primary_term"})
# URL parameters a `_mget` of the page honours as the search would.
MGET_PARAMS = frozenset({"_source", "_source_includes", "_source_excludes", "routing", "preference"})


def page_by_mget(search: Search) -> bool:
    """Whether the page's hits are just stored documents, so one `_mget` can fetch them.

    That costs the cluster a lookup by id instead of a second run of the query (measured
    on osmem: 0.3 ms against 10 ms for a page of 10); highlights, `fields` and inner hits
    need the query, and take the `page_request` path.
    """
    if QUERY_SHAPED & search.body.keys() or QUERY_SHAPED & search.params.keys():
        return False
    return "inner_hits" not in json.dumps(search.body.get("query", {}))


def mget_request(search: Search, hits: list[dict[str, Any]], positions: list[int]) -> tuple[dict[str, str], dict[str, Any]]:
    """(URL parameters, body) of a `_mget` of the page's hits, with the search's `_source`."""
    return {key: value for key, value in search.params.items() if key in MGET_PARAMS}, {"docs": mget_docs(search, hits, positions)}


def mget_docs(search: Search, hits: list[dict[str, Any]], positions: list[int]) -> list[dict[str, Any]]:
    """The `_mget` docs of the page's hits, each with the search's `_source` filter, and its
    routing when the search has one (an _msearch header's: several searches share one _mget)."""
    docs = []
    for position in positions:
        doc: dict[str, Any] = {"_index": hits[position].get("_index"), "_id": hits[position].get("_id")}
        if "_source" in search.body:
            doc["_source"] = search.body["_source"]
        elif not asks_for_source(search):
            doc["_source"] = WITHOUT_INTERNAL
        if "routing" in search.params:
            doc["routing"] = search.params["routing"]
        docs.append(doc)
    return docs


# The `_source` of a page fetched by `_mget` when the search filters nothing itself: the
# document without the service's own fields (about 9 KB a document at d = 50).
WITHOUT_INTERNAL = {"excludes": list(INTERNAL_FIELDS)}


def asks_for_source(search: Search) -> bool:
    """Whether the search filters `_source` itself (in its body or URL)."""
    return "_source" in search.body or any(name in search.params for name in ("_source", "_source_includes", "_source_excludes"))


def hits_from_mget(response: dict[str, Any]) -> dict[str, Any]:
    """A `_mget` answer in the shape of a search answer (found documents as hits)."""
    hits = []
    for doc in response.get("docs") or []:
        if doc.get("found"):
            hit = {"_index": doc.get("_index"), "_id": doc.get("_id"), "_score": None}
            if "_source" in doc:
                hit["_source"] = doc["_source"]
            hits.append(hit)
    return {"hits": {"hits": hits}}


def hits_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    return list((response.get("hits") or {}).get("hits") or [])


def page_ids(hits: list[dict[str, Any]], positions: list[int]) -> list[str]:
    return list(dict.fromkeys(str(hits[p].get("_id")) for p in positions))


def merge(first: dict[str, Any], positions: list[int], second: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    """Response (1) with its hits replaced by (2)'s page hits in reranked order, BM25 scores kept."""
    window_hits = hits_of(first)
    fetched = {(hit.get("_index"), hit.get("_id")): hit for hit in hits_of(second)}
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


# What an `_msearch` header line may hold: the index and the per-search options OpenSearch's
# multi-search documents for a metadata line. Anything else is refused, not forwarded: the
# cluster's parser accepts more than it documents (`indices` names indices too).
MSEARCH_HEADER_KEYS = (
    "index", "allow_no_indices", "allow_partial_search_results", "cancel_after_time_interval", "expand_wildcards",
    "ignore_throttled", "ignore_unavailable", "preference", "request_cache", "routing", "search_type",
)


def read_msearch(raw: bytes, default_index: str, settings: Settings) -> list[tuple[dict[str, Any], Search]]:
    """NDJSON header/body pairs -> (header with its index set, the search). ApiError 400/403."""
    lines = raw.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ApiError(400, "parse_exception", "_msearch body is empty; expected NDJSON: a header line and a body line per search")
    if len(lines) % 2:
        raise ApiError(400, "parse_exception", f"_msearch body has {len(lines)} line{'' if len(lines) == 1 else 's'}; expected a header line and a body line per search (the last header has no body)")
    if len(lines) // 2 > settings.service.max_searches:
        raise ApiError(
            413, "content_too_long_exception",
            f"_msearch holds {len(lines) // 2} searches; at most {settings.service.max_searches} (RERANKER_MAX_SEARCHES): send them in several requests",
        )
    items = []
    for start in range(0, len(lines), 2):
        header, body = (_ndjson_object(lines[start + i], start + i + 1) for i in (0, 1))
        try:
            unknown = sorted(set(header).difference(MSEARCH_HEADER_KEYS))
            if unknown:
                raise ApiError(
                    403, "security_exception",
                    f"header key [{unknown[0]}] is not one the proxy forwards; a header may hold {', '.join(MSEARCH_HEADER_KEYS)}",
                )
            index = header.get("index", default_index)
            if isinstance(index, list) and all(isinstance(name, str) for name in index):
                index = ",".join(index)
            if not isinstance(index, str):
                raise bad_request("[index] must be a string or an array of strings")
            check_indices(index, settings)
            check_body_indices(body, settings)
            check_search_body(body, settings.service.proxy_allow)
            body, options = rerank_options(body, settings)
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
    """The lines as opensearch-py serialises a body (compact, UTF-8 as it is), so that the
    positions of the cluster's errors in a search sent as the client sent it are those of
    the body a client sends through opensearch-py, as for a `_search` (`proxy._refused`)."""
    return "".join(json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n" for line in lines)


# --- the service's own fields -----------------------------------------------------------


def named_fields(body: Any, params: Mapping[str, str]) -> frozenset[str]:
    """The field names a search asks for by name: in any `_source` filter of its body (its
    own, a `top_hits` aggregation's, an `inner_hits`'), in `fields` and `docvalue_fields`,
    and in the URL's `_source`, `_source_includes` and `docvalue_fields` (comma-separated).
    A `_source` given as true/false names nothing; includes of an object filter do, its
    excludes do not."""
    names: set[str] = set()

    def add(value: Any) -> None:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                names.update(part.strip() for part in item.split(","))
            elif isinstance(item, dict) and isinstance(item.get("field"), str):  # {"field": F, "format": ...}
                names.add(item["field"])

    for name in ("_source", "_source_includes", "docvalue_fields"):
        if name in params and params[name] not in ("true", "false"):
            add(params[name])
    stack: list[Any] = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, child in value.items():
                if key == "_source" and isinstance(child, dict):
                    add(child.get("includes"))
                    add(child.get("include"))
                elif key == "_source" and not isinstance(child, bool):
                    add(child)
                elif key in ("fields", "docvalue_fields") and isinstance(child, list):
                    add(child)
                stack.append(child)
        elif isinstance(value, list):
            stack.extend(value)
    return frozenset(names)


def hidden_fields(named: frozenset[str]) -> tuple[str, ...]:
    """The service's own fields to strip from an answer: all but those named (the field,
    or a path inside it such as `hidden_topics.k`; a wildcard pattern names nothing)."""
    def asked(field: str) -> bool:
        return any(name == field or name.startswith(field + ".") for name in named if "*" not in name and "?" not in name)

    return tuple(field for field in INTERNAL_FIELDS if not asked(field))


def exclude_internal(params: Mapping[str, str], hidden: Sequence[str], body: Any = None) -> dict[str, str]:
    """The URL parameters of a document read (get, `_source`, `_mget`) with the `hidden` fields
    added to its `_source_excludes` (the caller's own kept), so that the cluster leaves them out
    and they do not cross the network; `strip_internal` still takes out what comes back anyway
    (an `_mget` document with a `_source` filter of its own, which wins over the URL's).

    Not when the read asks for `stored_fields` (in the URL or a `docs` item): a source filter
    there would make the cluster send the `_source` that it otherwise leaves out."""
    docs = body.get("docs") if isinstance(body, dict) else None
    stored = "stored_fields" in params or any(isinstance(doc, dict) and "stored_fields" in doc for doc in docs or [])
    if not hidden or stored:
        return dict(params)
    own = [name.strip() for name in params.get("_source_excludes", "").split(",") if name.strip()]
    return {**params, "_source_excludes": ",".join(own + [field for field in hidden if field not in own])}


def strip_mget(response: Any, body: dict[str, Any], params: Mapping[str, str]) -> Any:
    """An `_mget` answer without the service's own fields, each document judged by the items
    that asked for it: a `docs` item's `_source` filter names fields for its document alone
    (as it alone overrides the URL's filter), the URL's for every one. Documents are matched
    to items by id, not by place (a cluster need not answer `docs` and `ids` in the body's
    order): a field is kept only if every item of that id named it."""
    everyone = hidden_fields(named_fields(None, params))
    by_id: dict[str, set[str]] = {}
    for item in body.get("docs", []):
        by_id.setdefault(str(item.get("_id")), set()).update(hidden_fields(named_fields(item, params)))
    for doc_id in body.get("ids", []):
        by_id.setdefault(str(doc_id), set()).update(everyone)
    docs = response.get("docs") if isinstance(response, dict) else None
    if not isinstance(docs, list):
        return strip_internal(response, everyone)
    for doc in docs:
        hidden = by_id.get(str(doc.get("_id")) if isinstance(doc, dict) else "", set(everyone))
        strip_internal(doc, tuple(field for field in INTERNAL_FIELDS if field in hidden))
    return response


def strip_internal(response: Any, hidden: Sequence[str]) -> Any:
    """`response` with the `hidden` fields taken out of every hit's `_source` and `fields`
    (search hits, `inner_hits`, `top_hits` aggregations, `_msearch` items), in place.

    The cluster returns them with every document unless told otherwise, and a search
    application would ship them to its users' browsers."""
    if not hidden:
        return response
    prefixes = tuple(f"{field}." for field in hidden)
    stack: list[Any] = [response]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
            continue
        if not isinstance(value, dict):
            continue
        if "_id" in value:
            for part in ("_source", "fields"):
                held = value.get(part)
                if isinstance(held, dict):
                    for key in [key for key in held if key in hidden or key.startswith(prefixes)]:
                        del held[key]
        stack.extend(child for key, child in value.items() if key not in ("_source", "fields"))
    return response
