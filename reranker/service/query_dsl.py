"""The subset of OpenSearch's search body the proxy forwards: an allow-list, not a deny-list.

A search body is walked once before anything reaches the cluster. Every key of the body,
every query clause (at any depth: in `bool`, `nested`, `function_score`, aggregations'
filters, highlight and rescore queries, `post_filter`) and every aggregation type must be
one the proxy knows: the full-text, term, range, compound and nested clauses a search
application sends, aggregations, highlight, sort, paging and `_source` filtering. Anything
else is refused with a 403 (a refusal by policy, as for every request the proxy does not
forward; a part of the wrong shape is a 400) that names it by its path and says how to allow it, so a clause
the proxy does not understand (a new one, a plugin's, or one that hides another query) never
passes unread. Refused whatever the allow-list, unless an operator names them in
RERANKER_PROXY_ALLOW: clauses that run a script, carry an opaque query (`wrapper`, search
templates), read documents (`more_like_this`, `percolate`, `pinned`, a terms lookup), and
suggesters' `collate` templates.

Which indices a body reads is checked apart (`search_requests.check_body_indices`): this
module decides which shapes may be forwarded at all.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from reranker.config import PROXY_GUARDS
from reranker.service.errors import ApiError

# Top-level keys of a search body. `ext` may hold only `rerank` (the proxy's own block).
BODY_KEYS = frozenset({
    "query", "size", "from", "sort", "_source", "highlight", "aggs", "aggregations", "track_total_hits",
    "track_scores", "search_after", "timeout", "min_score", "post_filter", "fields", "docvalue_fields",
    "stored_fields", "ext", "version", "seq_no_primary_term", "explain", "terminate_after", "collapse",
    "rescore", "suggest", "profile", "indices_boost",
})

# Query clauses whose parameters hold no other query: field -> value or field -> options.
LEAF_CLAUSES = frozenset({
    "match", "match_phrase", "match_phrase_prefix", "match_bool_prefix", "multi_match", "combined_fields",
    "query_string", "simple_query_string", "term", "terms", "range", "exists", "prefix", "wildcard", "regexp",
    "fuzzy", "ids", "match_all", "match_none", "intervals", "rank_feature", "distance_feature",
    "geo_distance", "geo_bounding_box", "geo_polygon", "span_term",
})
# Compound clauses: the parameters that hold queries (one query, or a list of them).
COMPOUND_CLAUSES: dict[str, tuple[str, ...]] = {
    "bool": ("must", "should", "filter", "must_not"),
    "boosting": ("positive", "negative"),
    "constant_score": ("filter",),
    "dis_max": ("queries",),
    "nested": ("query",),
    "has_child": ("query",),
    "has_parent": ("query",),
    "function_score": ("query",),  # and each function's `filter`, below
}
# Refused unless RERANKER_PROXY_ALLOW names them, with why.
GUARDED: dict[str, str] = {
    "script": "it runs a script",
    "script_score": "it runs a script",
    "wrapper": "it carries an opaque (base64) query the proxy cannot read",
    "template": "it carries a search template the proxy cannot read",
    "more_like_this": "it can read other documents (`like` / `unlike`)",
    "percolate": "it can read a stored document",
    "pinned": "it names stored documents",
    "terms_lookup": "a terms lookup reads another document",
    "collate": "a suggester's collate template runs a query the proxy cannot read",
    "script_fields": "it runs scripts",
    "runtime_mappings": "it defines fields by scripts",
}

# URL parameters the proxy passes on only when RERANKER_PROXY_ALLOW names their guard. A
# search pipeline is the operator's: a named one may call out with credentials the client
# lacks (the Cohere-compatible rerank processor calls this service with its API key), and
# `_none` skips the index's default pipeline, which may be what filters the documents
# clients may see; `verbose_pipeline` shows each processor's work.
GUARDED_PARAMS: dict[str, str] = {"search_pipeline": "search_pipeline", "verbose_pipeline": "search_pipeline"}

assert set(GUARDED) | {"scroll", *GUARDED_PARAMS.values()} == set(PROXY_GUARDS), "config.PROXY_GUARDS lists what RERANKER_PROXY_ALLOW may name"

# Aggregation types. Bucket aggregations may hold sub-aggregations; `filter` and `filters`
# hold queries. Pipeline aggregations that run a script (bucket_script, bucket_selector,
# moving_fn, scripted_metric) are not here.
AGGREGATIONS = frozenset({
    "terms", "significant_terms", "rare_terms", "multi_terms", "histogram", "date_histogram", "auto_date_histogram",
    "variable_width_histogram", "range", "date_range", "ip_range", "filter", "filters", "missing", "nested",
    "reverse_nested", "global", "sampler", "diversified_sampler", "composite", "adjacency_matrix",
    "geohash_grid", "geotile_grid", "geo_distance", "avg", "sum", "min", "max", "stats", "extended_stats",
    "value_count", "cardinality", "percentiles", "percentile_ranks", "top_hits", "weighted_avg", "geo_bounds",
    "geo_centroid", "median_absolute_deviation", "matrix_stats", "avg_bucket", "sum_bucket", "min_bucket",
    "max_bucket", "stats_bucket", "extended_stats_bucket", "percentiles_bucket", "derivative",
    "cumulative_sum", "serial_diff", "bucket_sort",
})
SUGGESTERS = frozenset({"term", "phrase", "completion"})


# With RERANKER_PROXY_ALLOW=scroll, the longest keep-alive a scroll may ask for: a cluster
# keeps at most 500 scroll contexts open in all by default, and each holds resources.
MAX_SCROLL_SECONDS = 600
_TIME = re.compile(r"(\d+)(d|h|m|s|ms|micros|nanos)")
_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "micros": 1e-6, "nanos": 1e-9}


def check_scroll(keep_alive: str | None, allowed: Iterable[str] = ()) -> None:
    """ApiError 403 for a scroll (`keep_alive`: its `scroll` parameter; None: no scroll)
    unless RERANKER_PROXY_ALLOW names `scroll` (a refusal by policy, like every request the
    proxy does not forward), and then 400 for a keep-alive longer than MAX_SCROLL_SECONDS.
    A scroll id is not bound to the index it was opened on: a client that forges or
    guesses one would continue another client's scroll."""
    if keep_alive is None:
        return
    if "scroll" not in set(allowed):
        raise ApiError(
            403, "security_exception",
            "[scroll] is refused: the proxy cannot tell which index a scroll id reads; page with search_after "
            "instead, or an operator can allow it with RERANKER_PROXY_ALLOW=scroll",
        )
    if not keep_alive:
        return
    found = _TIME.fullmatch(keep_alive.strip())
    if found is None:
        raise ApiError(400, "illegal_argument_exception", f"[scroll] must be a time such as 1m, got {keep_alive!r}")
    if int(found.group(1)) * _SECONDS[found.group(2)] > MAX_SCROLL_SECONDS:
        raise ApiError(400, "illegal_argument_exception", f"[scroll] keeps a scroll open at most {MAX_SCROLL_SECONDS // 60}m, got {keep_alive}")


# URL parameters the proxy never passes on, with why. OpenSearch (and Elasticsearch) read
# `source` as the body of a request sent without one, so a count with `?source={...}` would
# reach the cluster with a query the proxy never read (a terms lookup on any index, a
# script); `error_trace` adds the cluster's Java stack traces to its errors.
REFUSED_PARAMS = {
    "source": "the proxy reads a search only from the request body; send it there",
    "source_content_type": "the proxy reads a search only from the request body; send it there",
    "error_trace": "the cluster's stack traces are not passed on",
}


# A document read (get, `_source`, `_mget`) refuses these too: `refresh` makes the cluster
# refresh the shards the read goes to before reading, an operator's action (it costs the
# cluster new segments, at every client's will); without it a get is realtime anyway.
READ_REFUSED_PARAMS = {
    **REFUSED_PARAMS,
    "refresh": "a read through the proxy does not make the cluster refresh its shards (an operator's action); "
    "a get is realtime without it",
}


def check_params(params: Iterable[str], allowed: Iterable[str] = (), refused: Mapping[str, str] = REFUSED_PARAMS) -> None:
    """ApiError 403 for a URL parameter of `refused` (REFUSED_PARAMS, or READ_REFUSED_PARAMS
    for a document read), and for one of GUARDED_PARAMS unless RERANKER_PROXY_ALLOW names its
    guard (the others go to the cluster, which refuses those it does not know)."""
    allowed = set(allowed)
    for name in params:
        if name in refused:
            raise ApiError(403, "security_exception", f"[{name}] is refused: {refused[name]}")
        guard = GUARDED_PARAMS.get(name)
        if guard is not None and guard not in allowed:
            raise ApiError(
                403, "security_exception",
                f"[{name}] is refused: search pipelines are the operator's (a pipeline can call out with its own "
                f"credentials, and _none skips the index's default one); an operator can allow it with RERANKER_PROXY_ALLOW={guard}",
            )


def check_search_body(body: dict[str, Any], allowed: Iterable[str] = ()) -> None:
    """ApiError 403 unless every part of `body` is in the forwarded subset (400 for a part
    of the wrong shape).

    allowed: the GUARDED names an operator allows (RERANKER_PROXY_ALLOW)."""
    walker = _Walker(frozenset(allowed))
    walker.body(body)


# What a multi-get body may hold, and each item of its `docs`: what OpenSearch's multi-get
# documents (docs.opensearch.org, "Multi-get documents": `docs` items with `_index`, `_id`,
# `routing`, a `_source` filter and `stored_fields`; `ids` with the index in the path), and
# the version check its parser reads beside them. Anything else is refused, not forwarded.
MGET_KEYS = frozenset({"docs", "ids"})
MGET_DOC_KEYS = frozenset({"_index", "_id", "routing", "_source", "stored_fields", "version", "version_type"})


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _is_patterns(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(item, str) for item in value))


def _is_version(value: Any) -> bool:
    """An integer of at least 1 (a JSON number such as 3.0 is one, as JSON Schema reads it)."""
    whole = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    return whole and 1 <= value < 2**63


# What each value of a multi-get document must be (the JSON Schema of schema.OpenSearchMget):
# a part of another type is a 400 here rather than the cluster's (a number as `_id`, which it
# would read as a string, is refused too: the published schema says string).
MGET_DOC_VALUES: dict[str, tuple[Any, str]] = {
    "_id": (_is_name, "a document id (a non-empty string)"),
    "_index": (_is_name, "an index name"),
    "routing": (_is_name, "a routing value (a non-empty string)"),
    "stored_fields": (_is_patterns, "a field pattern or a list of them"),
    "version": (_is_version, "a version number (an integer of at least 1)"),
    "version_type": (lambda value: value in ("internal", "external", "external_gte"), "internal, external or external_gte"),
}


def check_mget_body(body: dict[str, Any], allowed: Iterable[str] = ()) -> None:
    """ApiError 403 unless every key of a multi-get body and of its `docs` items is one the
    proxy knows (or RERANKER_PROXY_ALLOW names it), 400 for a part of the wrong shape.

    Which index each document is read from is checked apart (`search_requests.check_mget`)."""
    _Walker(frozenset(allowed)).mget(body)


class _Walker:
    def __init__(self, allowed: frozenset[str]) -> None:
        self.allowed = allowed

    def refuse(self, path: str, what: str) -> ApiError:
        name = path.rsplit(".", 1)[-1]
        return ApiError(
            403, "security_exception",
            f"[{path}] {what}: the reranker proxy forwards only the subset of OpenSearch's API listed in docs/proxy.md; "
            f"an operator can forward [{name}] unread with RERANKER_PROXY_ALLOW={name}",
        )

    def malformed(self, path: str, what: str) -> ApiError:
        return ApiError(400, "parsing_exception", f"[{path}] {what}")

    def guard(self, name: str, path: str) -> None:
        if name not in self.allowed:
            raise ApiError(
                403, "security_exception",
                f"[{path}] is refused: {GUARDED[name]}; an operator can allow it with RERANKER_PROXY_ALLOW={name}",
            )

    def body(self, body: dict[str, Any]) -> None:
        for key in body:
            if key in GUARDED:
                self.guard(key, key)
            elif key not in BODY_KEYS and key not in self.allowed:
                raise self.refuse(key, "is not a search body key the proxy knows")
        for key in ("query", "post_filter"):
            if key in body:
                self.query(body[key], key)
        for key in ("aggs", "aggregations"):
            if key in body:
                self.aggregations(body[key], key)
        if "highlight" in body:
            self.highlight(body["highlight"], "highlight")
        if "rescore" in body:
            for i, rescore in enumerate(body["rescore"] if isinstance(body["rescore"], list) else [body["rescore"]]):
                query = rescore.get("query") if isinstance(rescore, dict) else None
                if isinstance(query, dict) and "rescore_query" in query:
                    self.query(query["rescore_query"], f"rescore[{i}].query.rescore_query")
        if "suggest" in body:
            self.suggest(body["suggest"], "suggest")
        if "sort" in body:
            self.scripts(body["sort"], "sort")
        if "ext" in body and isinstance(body["ext"], dict):
            for key in body["ext"]:
                if key != "rerank" and key not in self.allowed:
                    raise self.refuse(f"ext.{key}", "is not an extension the proxy knows (only ext.rerank)")
        if "_source" in body:
            self.source(body["_source"], "_source")
        if isinstance(body.get("collapse"), dict) and "inner_hits" in body["collapse"]:
            self.inner_hits(body["collapse"]["inner_hits"], "collapse.inner_hits")
        for key in ("collapse", "fields", "docvalue_fields", "indices_boost"):
            if key in body:
                self.scripts(body[key], key)

    def mget(self, body: dict[str, Any]) -> None:
        """A multi-get body, of the shape schema.OpenSearchMget publishes."""
        for key in body:
            if key not in MGET_KEYS and key not in self.allowed:
                raise self.refuse(key, "is not a multi-get body key the proxy knows (docs, ids)")
        if "docs" not in body and "ids" not in body:
            raise self.malformed("body", "names no document: a multi-get body lists them in docs (or ids, with the index in the path)")
        ids, docs = body.get("ids", []), body.get("docs", [])
        if not (isinstance(ids, list) and ids and all(_is_name(item) for item in ids)) and "ids" in body:
            raise self.malformed("ids", "must be a non-empty list of document ids")
        if not (isinstance(docs, list) and docs) and "docs" in body:
            raise self.malformed("docs", "must be a non-empty list of documents")
        for i, doc in enumerate(docs):
            where = f"docs[{i}]"
            if not isinstance(doc, dict):
                raise self.malformed(where, 'must be an object such as {"_index": "...", "_id": "..."}')
            for key in doc:
                if key not in MGET_DOC_KEYS and key not in self.allowed:
                    raise self.refuse(f"{where}.{key}", f"is not a key of a multi-get document the proxy knows ({', '.join(sorted(MGET_DOC_KEYS))})")
            for key, (fits, what) in MGET_DOC_VALUES.items():
                if (key in doc or key == "_id") and not fits(doc.get(key)):
                    raise self.malformed(f"{where}.{key}", f"must be {what}")
            if "_source" in doc:
                self.source(doc["_source"], f"{where}._source")

    def query(self, query: Any, path: str) -> None:
        if isinstance(query, list):
            for i, item in enumerate(query):
                self.query(item, f"{path}[{i}]")
            return
        if not isinstance(query, dict) or len(query) != 1:
            raise self.malformed(path, "must be an object with exactly one query clause")
        (name, params), = query.items()
        where = f"{path}.{name}"
        if name in GUARDED:
            self.guard(name, where)
            return
        if name == "terms" and isinstance(params, dict):
            if any(isinstance(value, dict) for key, value in params.items() if key not in ("boost", "_name", "value_type")):
                self.guard("terms_lookup", where)
        if name in LEAF_CLAUSES:
            self.scripts(params, where)
            return
        if name in self.allowed and name not in COMPOUND_CLAUSES:
            return  # an operator's choice: forwarded unread
        if name in COMPOUND_CLAUSES:
            if not isinstance(params, dict):
                raise self.malformed(where, "must be an object")
            for key, value in params.items():
                if key in COMPOUND_CLAUSES[name]:
                    self.query(value, f"{where}.{key}")
                elif key == "inner_hits" and name in ("nested", "has_child", "has_parent"):
                    self.inner_hits(value, f"{where}.inner_hits")
                elif name == "function_score" and key == "functions":
                    self.functions(value, f"{where}.functions")
                elif isinstance(value, (dict, list)):
                    self.scripts(value, f"{where}.{key}")
            return
        raise self.refuse(where, "is not a query clause the proxy knows")

    def functions(self, functions: Any, path: str) -> None:
        if not isinstance(functions, list):
            raise self.malformed(path, "must be a list")
        for i, function in enumerate(functions):
            if not isinstance(function, dict):
                raise self.malformed(f"{path}[{i}]", "must be an object")
            for key, value in function.items():
                if key in GUARDED:
                    self.guard(key, f"{path}[{i}].{key}")
                elif key == "filter":
                    self.query(value, f"{path}[{i}].filter")
                elif key in ("weight", "field_value_factor", "gauss", "linear", "exp", "random_score"):
                    self.scripts(value, f"{path}[{i}].{key}")
                elif key in self.allowed:
                    continue
                else:
                    raise self.refuse(f"{path}[{i}].{key}", "is not a score function the proxy knows")

    def aggregations(self, aggregations: Any, path: str) -> None:
        if not isinstance(aggregations, dict):
            raise self.malformed(path, "must be an object of named aggregations")
        for name, definition in aggregations.items():
            where = f"{path}.{name}"
            if not isinstance(definition, dict):
                raise self.malformed(where, "must be an object")
            for key, value in definition.items():
                if key in ("aggs", "aggregations"):
                    self.aggregations(value, f"{where}.{key}")
                elif key == "meta":
                    continue
                elif key in self.allowed and key not in AGGREGATIONS:
                    continue
                elif key in AGGREGATIONS:
                    if key == "filter":
                        self.query(value, f"{where}.filter")
                    elif key == "filters" and isinstance(value, dict):
                        named = value.get("filters")
                        items = named.items() if isinstance(named, dict) else enumerate(named or [])
                        for label, query in items:
                            self.query(query, f"{where}.filters.filters.{label}")
                    elif key == "top_hits" and isinstance(value, dict):
                        if "_source" in value:
                            self.source(value["_source"], f"{where}.top_hits._source")
                        if "script_fields" in value:
                            self.guard("script_fields", f"{where}.top_hits.script_fields")
                        else:
                            self.scripts(value, f"{where}.top_hits")
                    else:
                        self.scripts(value, f"{where}.{key}")
                else:
                    raise self.refuse(f"{where}.{key}", "is not an aggregation the proxy knows")

    def highlight(self, highlight: Any, path: str) -> None:
        if isinstance(highlight, dict):
            if "highlight_query" in highlight:
                self.query(highlight["highlight_query"], f"{path}.highlight_query")
            fields = highlight.get("fields")
            items = fields.items() if isinstance(fields, dict) else (
                (k, v) for item in (fields or []) if isinstance(item, dict) for k, v in item.items()
            )
            for field, options in items:
                if isinstance(options, dict) and "highlight_query" in options:
                    self.query(options["highlight_query"], f"{path}.fields.{field}.highlight_query")

    def suggest(self, suggest: Any, path: str) -> None:
        if not isinstance(suggest, dict):
            raise self.malformed(path, "must be an object")
        for name, definition in suggest.items():
            if name == "text" or not isinstance(definition, dict):
                continue
            for key, value in definition.items():
                if key in SUGGESTERS:
                    if isinstance(value, dict) and "collate" in value:
                        self.guard("collate", f"{path}.{name}.{key}.collate")
                    self.scripts(value, f"{path}.{name}.{key}")
                elif key not in ("text", "prefix", "regex") and key not in self.allowed:
                    raise self.refuse(f"{path}.{name}.{key}", "is not a suggester the proxy knows")

    def inner_hits(self, inner_hits: Any, path: str) -> None:
        """An `inner_hits` block (a list of them under `collapse`): its `_source` filter is
        checked as the body's is (the cluster failed the search on a malformed one), and
        its options walked for scripts."""
        for i, block in enumerate(inner_hits if isinstance(inner_hits, list) else [inner_hits]):
            where = f"{path}[{i}]" if isinstance(inner_hits, list) else path
            if isinstance(block, dict) and "_source" in block:
                self.source(block["_source"], f"{where}._source")
            self.scripts(block, where)

    def source(self, source: Any, path: str) -> None:
        """A `_source` filter in a form OpenSearch reads (FetchSourceContext): true or false,
        a pattern, a list of patterns, or an object of `includes` and `excludes` (or their
        old names `include`, `exclude`), each a pattern or a list of them. Another form
        (`{"a": 1}`, a number) fails the search on the cluster, some as a 500."""
        if isinstance(source, (bool, str)) or (isinstance(source, list) and all(isinstance(item, str) for item in source)):
            return
        if isinstance(source, dict):
            for key, value in source.items():
                if key not in ("includes", "excludes", "include", "exclude"):
                    raise self.malformed(f"{path}.{key}", "is not a key of a _source filter; it takes includes and excludes")
                if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(item, str) for item in value))):
                    raise self.malformed(f"{path}.{key}", "must be a field pattern or a list of them")
            return
        raise self.malformed(path, "must be true or false, a field pattern, a list of them, or an object of includes and excludes")

    def scripts(self, value: Any, path: str) -> None:
        """A script anywhere under `value` (an option named `script`, or a `_script` sort) is
        guarded. (Keys of a clause's parameters are mostly field names, so nothing else is
        read into them; a field named `script` is refused too.)"""
        stack = [(value, path)]
        while stack:
            item, where = stack.pop()
            if isinstance(item, dict):
                for key, child in item.items():
                    if key in ("script", "_script"):
                        self.guard("script", f"{where}.{key}")
                    stack.append((child, f"{where}.{key}"))
            elif isinstance(item, list):
                stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
