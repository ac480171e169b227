"""The opensearch-py client as the OpenSearch store and the search proxy use it: every call
bounded by the request's time limit, no retry of a read that timed out, the last response's
headers kept for the proxy, and error reasons without credentials.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from reranker.config import OpenSearchSettings
from reranker.store import opaque_id, time_left
from reranker.text import rounded

# The headers of the last cluster response this thread received (see `response_headers`).
_LAST_HEADERS = threading.local()
# The reason of the timeout a request gets, unsent, once its service request has no time left.
NO_TIME_LEFT = "no time left for the cluster within this request's budget"


def _budgeted_transport() -> type:
    """opensearch-py's Transport, with every request bounded by the caller's `start_time_limit`."""
    from opensearchpy import Transport
    from opensearchpy.exceptions import ConnectionTimeout

    class BudgetedTransport(Transport):
        """Each request (all its attempts) gets the smaller of OPENSEARCH_TIMEOUT and the
        time left to the request that needs it, so a cluster that hangs costs a request at
        most its deadline plus RERANKER_CLUSTER_BUDGET_MS, never timeout x attempts. Made
        for a service request, it carries that request's X-Opaque-Id (`start_opaque_id`)."""

        def perform_request(self, method: str, url: str, params: Any = None, body: Any = None, timeout: Any = None, ignore: Any = (), headers: Any = None) -> Any:
            tag = opaque_id()
            if tag is not None and not any(name.lower() == "x-opaque-id" for name in headers or {}):
                headers = {**(headers or {}), "X-Opaque-Id": tag}
            left = time_left()
            if left is not None:
                if left <= 0:
                    raise ConnectionTimeout("TIMEOUT", NO_TIME_LEFT, None)
                configured = timeout or self.kwargs.get("timeout")
                timeout = left if configured is None else min(float(configured), left)
            return super().perform_request(method, url, params=params, body=body, timeout=timeout, ignore=ignore, headers=headers)

    return BudgetedTransport


def _header_keeping_connection() -> type:
    """opensearch-py's connection, keeping each response's headers for this thread: the
    Transport hands back only the body, and the proxy passes some headers on."""
    from opensearchpy import Urllib3HttpConnection

    class HeaderKeepingConnection(Urllib3HttpConnection):
        def perform_request(self, *args: Any, **kwargs: Any) -> Any:
            _LAST_HEADERS.value = {}
            status, headers, data = super().perform_request(*args, **kwargs)
            _LAST_HEADERS.value = {name.lower(): value for name, value in headers.items()}
            return status, headers, data

        def get_response_headers(self, response: Any) -> Any:  # the error path's only look at them
            headers = super().get_response_headers(response)
            _LAST_HEADERS.value = dict(headers)
            return headers

    return HeaderKeepingConnection


def response_headers() -> dict[str, str]:
    """The headers of the last response from the cluster in this thread (for an error
    answer too); {} when there was none."""
    return dict(getattr(_LAST_HEADERS, "value", {}) or {})


def make_client(config: OpenSearchSettings) -> Any:
    """An opensearch-py client for `config` (TLS verified unless told otherwise).

    Retries: a connection that fails is retried (up to OPENSEARCH_RETRIES, each within the
    caller's time limit); a read that times out is not, because the cluster may still be
    running the first copy: a slow search retried is the same search run twice.
    """
    from opensearchpy import OpenSearch

    kwargs: dict[str, Any] = {
        "hosts": list(config.hosts),
        "timeout": config.timeout,
        "max_retries": config.retries,
        "retry_on_timeout": False,
        "transport_class": _budgeted_transport(),
        "connection_class": _header_keeping_connection(),
        "verify_certs": config.verify_certs,
        "ssl_show_warn": config.verify_certs,
        "http_compress": False,
    }
    if config.ca_certs is not None:
        kwargs["ca_certs"] = str(config.ca_certs)
    if config.username and config.password:
        kwargs["http_auth"] = (config.username, config.password)
    if config.api_key:
        kwargs["headers"] = {"Authorization": f"ApiKey {config.api_key}"}
    return OpenSearch(**kwargs)


# Enough of a foreign page to recognise it (its title and first message) in a one-line error.
FOREIGN_CHARS = 120


def foreign_answer(exc: Any) -> str | None:
    """What an HTTP error's body said when it is not OpenSearch's JSON (a web server's or a
    gateway's HTML page, or nothing), on one line and short; None for OpenSearch's own errors
    and for failures to connect. opensearch-py keeps such a body, whole, as the error."""
    if getattr(exc, "info", None) is not None or not isinstance(getattr(exc, "status_code", None), int):
        return None
    body = exc.error
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        return None
    # A page's markup says nothing to a reader of one line; its words (title, message) do.
    words = " ".join(re.sub(r"<[^>]*>", " ", body).split())
    if not words:
        return "an empty answer"
    return f"not OpenSearch's JSON: {words[:FOREIGN_CHARS] + ('...' if len(words) > FOREIGN_CHARS else '')!r}"


def error_reason(exc: Any) -> str:
    """A short reason from an opensearch-py exception, without URLs that may carry credentials."""
    foreign = foreign_answer(exc)
    if foreign is not None:
        return foreign
    info = getattr(exc, "info", None)
    if isinstance(info, dict):
        error = info.get("error")
        if isinstance(error, dict):
            reason = str(error.get("type", "error")) + (f": {error['reason']}" if error.get("reason") else "")
            # A search the shards refused says only "all shards failed" at the top: the
            # cause ("Result window is too large ...") is the first root cause.
            causes = error.get("root_cause")
            cause = causes[0] if isinstance(causes, list) and causes and isinstance(causes[0], dict) else None
            # A failure after the shards answered (too many buckets in the reduce phase) has no
            # root cause and an empty reason: the last of the caused_by chain is the cause.
            nested = error.get("caused_by") if cause is None else None
            while isinstance(nested, dict):
                cause, nested = nested, nested.get("caused_by")
            if cause is not None and cause.get("reason") and cause.get("reason") != error.get("reason"):
                reason += f" ({cause.get('type', 'error')}: {cause['reason']})"
            return reason
        if error:
            return str(error)
    if isinstance(info, BaseException):
        text = str(info)
        # OpenSSL's reason ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: ...",
        # "[SSL: WRONG_VERSION_NUMBER] ..." for https:// to a plain-HTTP node), with what to check.
        tls = re.search(r"\[(?:SSL|X509)[^\]]*\][^()'\"]*", text)
        if tls:
            return f"TLS failed: {tls.group(0).strip()} (check the URL's http/https, OPENSEARCH_CA_CERTS and OPENSEARCH_VERIFY_CERTS)"
        # urllib3 reasons end with the useful part: "... Connection refused".
        match = re.search(r"\[Errno -?\d+\] ([^')\]]+)", text)
        if match:
            return match.group(1)
        return type(info).__name__
    error = getattr(exc, "error", None)
    return str(error) if error else type(exc).__name__


def unreachable(config: OpenSearchSettings, what: str, exc: Any) -> str:
    """The message for a request that failed to connect or got no answer in time (an
    opensearch-py ConnectionError or ConnectionTimeout)."""
    if getattr(exc, "error", None) == NO_TIME_LEFT:
        # Never sent: the service request it served had spent its deadline and budget.
        return f"no time was left to ask OpenSearch at {config.display_hosts} within this request's budget ({what})"
    # urllib3's read timeout names the wait: "Read timed out. (read timeout=0.5)".
    waited = re.search(r"read timeout=([0-9.]+)", str(getattr(exc, "info", "")))
    if waited:
        # The cluster took the request: it is slow or hangs, not out of reach.
        seconds = float(waited.group(1))
        bound = "OPENSEARCH_TIMEOUT" if seconds >= config.timeout else "what was left of the request's RERANKER_DEADLINE_MS + RERANKER_CLUSTER_BUDGET_MS"
        # What was left of a deadline is a measurement (4.99933 s): said as a person would; the
        # setting as it was given (12.5, not 12).
        shown = f"{seconds:g}" if seconds >= config.timeout else rounded(seconds)
        return f"OpenSearch at {config.display_hosts} did not answer within {shown} s ({bound}) ({what})"
    return f"cannot reach OpenSearch at {config.display_hosts} ({what}): {error_reason(exc)}"


def bulk_item_reason(result: dict[str, Any]) -> str:
    """The reason a bulk item failed, as the cluster (or the transport) said it."""
    error = result.get("error")
    status = result.get("status")
    if isinstance(error, dict):
        reason = f"{error.get('type', 'error')}: {error.get('reason', '')}"
        caused = error.get("caused_by")
        if isinstance(caused, dict) and caused.get("reason"):
            reason += f" ({caused['reason']})"
        return reason
    if status == "N/A":
        exc = result.get("exception")
        return f"cannot reach the cluster: {error_reason(exc) if exc is not None else error}"
    return f"HTTP {status}: {error}"
