"""Every failure the service reports, and the one table that maps them to HTTP.

Errors go out in OpenSearch's shape, so a client of the proxy parses ours like the
cluster's own:

    {"error": {"root_cause": [{"type": T, "reason": R}], "type": T, "reason": R}, "status": N}

`ApiError` is raised by request parsing (bad JSON, wrong types, limits); a
`RerankerError` from the layers below is translated through `STATUS`. Anything else is
a bug: it is logged with its traceback and answered as a JSON 500, never as HTML.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from reranker.errors import (
    ConfigError,
    ConflictError,
    DocumentNotFoundError,
    DuplicateEventError,
    IndexMismatchError,
    IndexNotFoundError,
    InputError,
    NotFoundError,
    QuotaExceededError,
    RankerUnavailableError,
    RerankerError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    UnknownFieldError,
    UnknownRankerError,
    VectorsError,
)
from reranker.service.paths import sent_path

log = logging.getLogger(__name__)

# Seconds a client should wait before retrying when the cluster is down.
RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    """A request the service refuses: `status`, an OpenSearch-style `type`, a `reason`."""

    def __init__(self, status: int, type_: str, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.type = type_
        self.reason = reason
        self.headers = headers or {}


def bad_request(reason: str) -> ApiError:
    return ApiError(400, "illegal_argument_exception", reason)


# Most specific class first: the first match wins.
STATUS: list[tuple[type[RerankerError], int, str]] = [
    (UnknownRankerError, 400, "illegal_argument_exception"),
    # The ranker exists but this index lacks what it needs (no Doc2Vec model trained).
    (RankerUnavailableError, 409, "ranker_unavailable_exception"),
    (InputError, 400, "illegal_argument_exception"),
    (DuplicateEventError, 409, "duplicate_event_exception"),
    # A filter on a field no document of the index has: the index's state, not a malformed request.
    (UnknownFieldError, 409, "unknown_field_exception"),
    (ConflictError, 409, "conflict_exception"),
    (DocumentNotFoundError, 404, "document_missing_exception"),
    (NotFoundError, 404, "resource_not_found_exception"),
    (ConfigError, 400, "illegal_argument_exception"),
    (IndexNotFoundError, 404, "index_not_found_exception"),
    # The index was built with other vectors: nothing this service can serve until
    # someone reindexes or reconfigures, so "unavailable", not the client's fault.
    (IndexMismatchError, 503, "index_mismatch_exception"),
    (QuotaExceededError, 429, "too_many_requests_exception"),
    (StoreFullError, 507, "insufficient_storage_exception"),
    (StoreUnavailableError, 503, "store_unavailable_exception"),
    (StoreError, 502, "store_exception"),
    (VectorsError, 503, "vectors_unavailable_exception"),
]


def api_error(exc: RerankerError) -> ApiError:
    """The HTTP form of a package error (see STATUS)."""
    for cls, status, type_ in STATUS:
        if isinstance(exc, cls):
            headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}
            return ApiError(status, type_, str(exc), headers)
    return ApiError(500, "reranker_exception", str(exc))


def error_body(status: int, type_: str, reason: str) -> dict[str, Any]:
    """The JSON of an error, in OpenSearch's shape: what the app answers, and what the
    worker answers for a request it refuses before the app sees it (worker.py)."""
    cause = {"type": type_, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def error_response(error: ApiError) -> Response:
    body = error_body(error.status, error.type, error.reason)
    response = Response(json.dumps(body), status=error.status, mimetype="application/json")
    for name, value in error.headers.items():
        response.headers[name] = value
    return response


# Werkzeug's own refusals (unknown route, wrong method, body too large) as JSON.
_HTTP_TYPES = {
    404: "resource_not_found_exception",
    400: "illegal_argument_exception",  # a document id that is not UTF-8 (paths.AnyDocIdConverter)
    405: "method_not_allowed_exception",
    413: "content_too_long_exception",
}


def install(app: Flask) -> None:
    """Register the handlers that turn every failure into a JSON error."""

    @app.errorhandler(ApiError)
    def _api(error: ApiError) -> Response:
        return error_response(error)

    @app.errorhandler(RerankerError)
    def _package(error: RerankerError) -> Response:
        return error_response(api_error(error))

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException) -> Response:
        status = error.code or 500
        reason = error.description or error.name
        if status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            reason = f"request body larger than {limit} bytes (RERANKER_MAX_BODY_BYTES)"
        type_ = _HTTP_TYPES.get(status, "http_exception")
        headers = {}
        if status == 405 and error.valid_methods:  # type: ignore[attr-defined]
            # The path's own methods, as OPTIONS lists them: for a method the proxy's catch-all
            # does not take either (TRACE, PROPFIND), werkzeug's list adds its PUT, DELETE, ...
            own = app.make_default_options_response().allow
            headers["Allow"] = ", ".join(sorted(own) if own - {"OPTIONS"} else error.valid_methods)  # type: ignore[attr-defined]
            # werkzeug's words name neither the method nor the ones the route has.
            reason = f"{request.method} is not a method of {sent_path()}; it takes {headers['Allow']}"
        return error_response(ApiError(status, type_, reason, headers))

    @app.errorhandler(Exception)
    def _bug(error: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(ApiError(500, "internal_server_error", f"internal error ({type(error).__name__}); see the service log"))


def describe(exc: BaseException) -> str:
    """A short reason for a degraded response: the message of a package error, else the class."""
    if isinstance(exc, RerankerError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
