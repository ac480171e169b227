"""Each route's operation (what it does, its body, its answers) and the OpenAPI document
built from them, served at /openapi.json.

A view declares its operation where it is defined, with the typed models of `schema.py`:

    @blueprint.post("/search")
    @operation("a summary query -> BM25 top-N -> rerank -> one page", body=SearchRequest,
               answers={200: Reply("the page", SearchAnswer)}, errors=(400, 404, 409, 413, 502, 503))
    def search(): ...

`openapi_document(app)` walks the app's routes and writes one OpenAPI 3.1 operation per
route and method, with the models' JSON Schemas (pydantic's, as FastAPI publishes them)
under components/schemas. A route without an operation fails the document, so nothing is
served undocumented; schemathesis then fuzzes the app against the document (tests/test_fuzz.py).
`install(app)` holds requests to the declared security and query parameters, as the models
hold bodies to their fields: a route's declared scheme is enforced by the check registered for
it (`guards`) before anything else of the request is looked at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar

from flask import Flask, request
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from reranker import __version__
from reranker.config import ServiceSettings
from reranker.service.errors import bad_request
from reranker.service.schema import LIMIT_KEY, Error

Schema = dict[str, Any]
View = TypeVar("View", bound=Callable[..., Any])
Guard = TypeVar("Guard", bound=Callable[[], None])


@dataclass(frozen=True)
class Reply:
    """One documented answer: a JSON object of `model`'s shape (any object when None), or
    for other media types a body of text."""

    description: str
    model: type[BaseModel] | None = None
    media: tuple[str, ...] = ("application/json",)


@dataclass(frozen=True)
class Operation:
    summary: str
    answers: Mapping[int | str, Reply]
    errors: tuple[int, ...] = ()
    body: type[BaseModel] | None = None
    body_required: bool = True
    ndjson: bool = False  # the body is NDJSON text (the proxy's _msearch), not `body`
    security: str | None = None  # a scheme of SECURITY_SCHEMES
    # Path parameters by the route's argument name, query parameters by theirs.
    path: Mapping[str, Schema] = field(default_factory=dict)
    query: Mapping[str, Schema] = field(default_factory=dict)
    required_query: tuple[str, ...] = ()  # the query parameters a request must give
    # The proxy's routes pass their URL parameters on to the cluster, which judges them;
    # every other route takes only those it declares (none, when `query` is empty).
    forwards_query: bool = False


SECURITY_SCHEMES: Schema = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "a key from RERANKER_API_KEYS"},
    "admin": {"type": "http", "scheme": "bearer", "description": "RERANKER_ADMIN_API_KEY"},
}

# What each error status means on this service's routes.
ERROR_REASONS = {
    400: "malformed JSON or a key given twice, wrong types, unknown field, query parameter or ranker, empty query",
    401: "missing or wrong API key",
    403: "not a read-only search endpoint, an index the proxy may not forward to, or a part of a search the proxy does not forward (RERANKER_PROXY_ALLOW); experiment changes with no RERANKER_ADMIN_API_KEY set",
    404: "no such index, document, experiment or interleaved query (or the query's experiment was deleted)",
    405: "method not allowed",
    409: "the ranker cannot run on this index yet (no Doc2Vec model); a filter on a field no document of the index has (the reason lists the filterable ones); an event recorded before; an experiment id taken, another running, or a ranker removed",
    413: "body, document count or text longer than the configured limits; an _msearch over its bounds",
    415: "a body not declared as JSON (Content-Type: application/json; NDJSON too for _msearch) or compressed other than by gzip (Content-Encoding)",
    429: "an event past its quota (RERANKER_EVENTS_PER_QUERY, RERANKER_EVENTS_PER_CLIENT, RERANKER_MAX_EVENTS)",
    502: "the store failed",
    503: "the store (OpenSearch) is unavailable; see Retry-After",
    507: "the event store's disk is full (SQLite's, or the cluster's flood-stage block); events resume once there is room",
}

_ATTRIBUTE = "__operation__"
# The check that enforces each scheme of SECURITY_SCHEMES, registered by the module whose
# routes declare it (`guards`).
_GUARDS: dict[str, Callable[[], None]] = {}
# Views that are not ours to decorate (a blueprint's static files), by endpoint.
_BY_ENDPOINT: dict[str, Operation | None] = {}


def operation(summary: str, **details: Any) -> Callable[[View], View]:
    """Declare a view's operation (the fields of `Operation`)."""
    described = Operation(summary, **details)

    def declare(view: View) -> View:
        setattr(view, _ATTRIBUTE, described)
        return view

    return declare


def guards(scheme: str) -> Callable[[Guard], Guard]:
    """Register a check (raising ApiError 401 or 403) as what enforces `scheme` on every
    operation declaring it."""
    if scheme not in SECURITY_SCHEMES:
        raise ValueError(f"unknown security scheme {scheme!r}; known: {', '.join(SECURITY_SCHEMES)}")

    def register(check: Guard) -> Guard:
        _GUARDS[scheme] = check
        return check

    return register


def undocumented(view: View) -> View:
    """A catch-all that only refuses (the proxy's answer to routes it does not forward)."""
    setattr(view, _ATTRIBUTE, None)
    return view


def describe_endpoint(endpoint: str, described: Operation) -> None:
    _BY_ENDPOINT[endpoint] = described


def install(app: Flask) -> None:
    """Hold each request to its route's declared operation: its security scheme first (a
    caller without the key learns nothing of the route's parameters from a 400), then its
    query parameters, so that the published `query` schemas are also what the service
    accepts (as a body's fields are)."""

    @app.before_request
    def _check_request() -> None:
        endpoint = request.endpoint
        if endpoint is None:  # no route: werkzeug's 404 or 405 follows
            return
        described = _BY_ENDPOINT[endpoint] if endpoint in _BY_ENDPOINT else getattr(app.view_functions[endpoint], _ATTRIBUTE, None)
        if described is None:
            return
        if described.security is not None:
            _GUARDS[described.security]()
        if not described.forwards_query:
            check_query(described.query, request.args.lists())


def check_query(declared: Mapping[str, Schema], given: Iterable[tuple[str, list[str]]]) -> None:
    """Raise ApiError 400 for a query parameter `declared` does not name, one given twice,
    or an integer one that is not a whole number within its schema's minimum and maximum.

    A parameter a route does not take is refused rather than ignored: `POST /search?size=5`
    would otherwise answer 10 hits as if it had been heard. Enumerated strings are left to
    their views, whose refusals say more (UnknownRankerError lists the rankers).
    """
    for name, values in given:
        schema = declared.get(name)
        if schema is None:
            known = f"known parameters: {', '.join(declared)}" if declared else "this route takes no query parameters"
            raise bad_request(f"unknown query parameter [{name}]; {known}")
        if len(values) > 1:
            raise bad_request(f"query parameter [{name}] is given {len(values)} times; give it once")
        if schema.get("type") == "integer":
            _check_integer(name, values[0], schema)


def _check_integer(name: str, raw: str, schema: Schema) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        allowed = f" from {low} to {high}"
    else:
        allowed = f" of at least {low}" if low is not None else f" of at most {high}" if high is not None else ""
    # Digits only (and a minus sign): int() would also take " 5", "+5" and "5_0".
    number = int(raw) if re.fullmatch(r"-?[0-9]{1,20}", raw) else None
    if number is None or (low is not None and number < low) or (high is not None and number > high):
        raise bad_request(f"[{name}] must be an integer{allowed}, got {raw!r}")


def openapi_document(app: Flask) -> Schema:
    """The OpenAPI 3.1 document of every route of `app` (built once per app).

    Raises RuntimeError for a route that declares no operation.
    """
    document: Schema | None = app.extensions.get("reranker.openapi")
    if document is None:
        document = _build(app)
        app.extensions["reranker.openapi"] = document
    return document


def _build(app: Flask) -> Schema:
    found: list[tuple[str, str, Operation, set[str]]] = []
    for rule in app.url_map.iter_rules():
        view = app.view_functions[rule.endpoint]
        if rule.endpoint in _BY_ENDPOINT:
            described = _BY_ENDPOINT[rule.endpoint]
        elif hasattr(view, _ATTRIBUTE):
            described = getattr(view, _ATTRIBUTE)
        else:
            raise RuntimeError(f"route {rule.rule} ({rule.endpoint}) declares no operation: add @operation(...) to its view")
        if described is None:
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)  # /<doc_id:doc_id> -> /{doc_id}
        methods = (rule.methods or set()) - {"OPTIONS"}
        if "GET" in methods:
            methods -= {"HEAD"}  # Flask's own HEAD of a GET route: the GET's operation says it
        for method in sorted(methods):
            found.append((path, method.lower(), described, set(rule.arguments)))

    # Every model once, by name: request bodies as validated, answers as sent.
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(Error, "serialization"): None}
    for _, _, described, _ in found:
        if described.body is not None:
            wanted[(described.body, "validation")] = None
        for reply in described.answers.values():
            if reply.model is not None:
                wanted[(reply.model, "serialization")] = None
    refs, definitions = models_json_schema(list(wanted), ref_template="#/components/schemas/{model}")

    paths: Schema = {}
    for path, method, described, arguments in found:
        paths.setdefault(path, {})[method] = _operation_object(described, arguments, refs, bodiless=method == "head")
    runtime = app.extensions.get("reranker")  # None: an app of the tests' own, with no settings
    publish_limits(definitions, runtime.limits if runtime is not None else None)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "reranker",
            "version": __version__,
            "description": "Hidden-topic reranking for OpenSearch: a native API, an OpenSearch-compatible search proxy, and a Cohere-compatible rerank API.",
        },
        "components": {"schemas": definitions.get("$defs", {}), "securitySchemes": SECURITY_SCHEMES},
        "paths": paths,
    }


def _operation_object(described: Operation, arguments: set[str], refs: Mapping[Any, Schema], bodiless: bool = False) -> Schema:
    """bodiless: the answers have no body (HEAD), only their status and headers."""
    missing = arguments - set(described.path)
    if missing:
        raise RuntimeError(f"operation {described.summary!r} does not describe its path parameter(s) {sorted(missing)}")
    parameters = [{"name": name, "in": "path", "required": True, "schema": schema} for name, schema in described.path.items() if name in arguments]
    parameters += [
        {"name": name, "in": "query", "required": name in described.required_query, "schema": schema} for name, schema in described.query.items()
    ]
    result: Schema = {"summary": described.summary}
    if parameters:
        result["parameters"] = parameters
    if described.security:
        result["security"] = [{described.security: []}]
    if described.ndjson:
        # Lines of JSON, which JSON Schema cannot describe: a header line and a body line
        # per search (sent as application/json by some clients, as the service accepts).
        ndjson = {"schema": {"type": "string", "contentMediaType": "application/x-ndjson", "description": NDJSON}}
        result["requestBody"] = {"required": described.body_required, "content": {"application/x-ndjson": ndjson}}
    elif described.body is not None:
        content: Schema = {"application/json": {"schema": refs[(described.body, "validation")]}}
        result["requestBody"] = {"required": described.body_required, "content": content}
    answers: Schema = {str(status): _reply(reply, refs) for status, reply in described.answers.items()}
    error = refs[(Error, "serialization")]
    # Every route that reads a body refuses one not declared as JSON (bodies.require_json_type).
    statuses = (*described.errors, 415) if described.body is not None and 415 not in described.errors else described.errors
    for status in statuses:
        answers[str(status)] = {"description": ERROR_REASONS[status], "content": {"application/json": {"schema": error}}}
    if bodiless:
        answers = {status: {"description": answer["description"]} for status, answer in answers.items()}
    # Order: statuses by number, then "default".
    result["responses"] = dict(sorted(answers.items(), key=lambda item: (not item[0].isdigit(), item[0])))
    return result


NDJSON = (
    "NDJSON: per search, a header line (an object with `index` and the per-search options "
    "OpenSearch documents for _msearch) and a body line (a search body, see OpenSearchSearch)"
)


def publish_limits(schema: Any, limits: ServiceSettings | None) -> None:
    """Replace each field's `LIMIT_KEY` mark (a setting's name) by the bound it sets in
    this service: maxLength of a string, maximum of an integer, maxItems of an array
    (None: no settings; the marks are only removed)."""
    if isinstance(schema, list):
        for item in schema:
            publish_limits(item, limits)
        return
    if not isinstance(schema, dict):
        return
    setting = schema.pop(LIMIT_KEY, None)
    if setting is not None and limits is not None:
        keyword = {"string": "maxLength", "integer": "maximum", "array": "maxItems"}[schema["type"]]
        value = int(getattr(limits, setting))
        schema[keyword] = min(value, schema.get(keyword, value))
    for child in schema.values():
        publish_limits(child, limits)


def _reply(reply: Reply, refs: Mapping[Any, Schema]) -> Schema:
    if reply.media != ("application/json",):
        return {"description": reply.description, "content": {media: {"schema": {"type": "string"}} for media in reply.media}}
    schema = refs[(reply.model, "serialization")] if reply.model is not None else {"type": "object"}
    return {"description": reply.description, "content": {"application/json": {"schema": schema}}}
