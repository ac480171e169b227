"""Request ids and the access log: one line per request, the id on every answer and cluster call.

Each request gets an id: the caller's `X-Request-Id` when it is a safe token (what a load
balancer or gateway in front sets, so one id follows the request through every hop), else
a new one. The id is returned as `X-Request-Id` on every answer, errors included, and
sent to the cluster as `X-Opaque-Id` with every call made for the request, so the
cluster's slow logs and task list name the request that caused them; a caller that sends
its own `X-Opaque-Id` (as Elasticsearch and OpenSearch clients do) keeps it, and gets it
back, as the clusters echo it.

The access log is the logger `reranker.access`, one INFO line per request after its
answer is made:

    method=POST path=/papers/_search status=200 duration_ms=12.4 request_id=4f0c... remote=127.0.0.1

Under gunicorn it writes through gunicorn's access log when one is configured
(`--access-logfile`), else its error log (standard error, with gunicorn's timestamp and
worker pid), at gunicorn's log level: `--log-level warning` turns it off. Elsewhere (tests,
`flask run`) it propagates to the root logger like any other.

The package's other loggers (`reranker.store.opensearch`, ...) write through gunicorn's
error log too, each line as gunicorn's own with the logger's name before the message,
`[2026-11-27 07:10:00 +0000] [1234] [WARNING] reranker.store.opensearch: ...`, at the level
the root logger has (`reranker serve`: WARNING, INFO with -v) and never below gunicorn's
`--log-level`. `reranker serve` gives its
own lines before gunicorn starts the same form (`LOG_FORMAT`).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from urllib.parse import quote

from flask import Flask, g, request
from flask.wrappers import Response

from reranker.service import HTTP_METHODS
from reranker.service.paths import raw_path
from reranker.store import end_opaque_id, start_opaque_id

log = logging.getLogger("reranker.access")

# A gunicorn error-log line (gunicorn.glogging's default format and date), with the
# logger's name: for the lines `reranker serve` writes before gunicorn's start.
LOG_FORMAT = "%(asctime)s [%(process)d] [%(levelname)s] %(name)s: %(message)s"
LOG_DATE_FORMAT = "[%Y-%m-%d %H:%M:%S %z]"

# What an incoming X-Request-Id may be: the ids gateways make (UUIDs, hex, ULIDs, AWS's
# `Root=1-...`) fit; anything longer or with spaces, quotes or control characters could
# forge log lines or bloat them, and is replaced by an id of our own.
REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:;=+/@-]{0,127}")
# A caller's own X-Opaque-Id is passed to the cluster as it is, within these bounds
# (printable ASCII, as HTTP header values should be).
OPAQUE_ID = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,255}")


def request_id() -> str:
    """The current request's id (one is made if the hooks have not run)."""
    if "request_id" not in g:
        g.request_id = _incoming_id()
    return str(g.request_id)


def _incoming_id() -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _client_opaque_id() -> str | None:
    given = request.headers.get("X-Opaque-Id")
    return given if given is not None and OPAQUE_ID.fullmatch(given) else None


def route_to_gunicorn() -> None:
    """Write access lines where gunicorn writes its own, and the package's other log lines
    to its error log, when this process runs under it (gunicorn sets up its loggers
    before it loads the app)."""
    for name in ("gunicorn.access", "gunicorn.error"):
        source = logging.getLogger(name)
        if source.handlers:
            log.handlers = list(source.handlers)
            log.setLevel(logging.getLogger("gunicorn.error").level)
            log.propagate = False
            break
    gunicorn_errors = logging.getLogger("gunicorn.error")
    package = logging.getLogger("reranker")
    if gunicorn_errors.handlers and not package.handlers:
        # Not below gunicorn's --log-level (`critical` silences the package's warnings too).
        package.handlers = [_Named(handler, gunicorn_errors.level) for handler in gunicorn_errors.handlers]
        package.propagate = False  # a root handler (`reranker serve`'s) would print it again


class _Named(logging.Handler):
    """A record handed to one of gunicorn's error-log handlers, which formats it as its own
    lines (timestamp, pid, level) and writes it where they go (a file it reopens on USR1,
    syslog), its message led by the logger's name, as the root logger's lines say it."""

    def __init__(self, target: logging.Handler, level: int) -> None:
        super().__init__(level)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = f"{record.name}: {record.getMessage()}"
        except Exception:
            # A log call with the wrong arguments must not raise where it is made (often
            # an except block that fails open), as no handler of logging's own lets it.
            self.handleError(record)
            return
        self.target.handle(logging.makeLogRecord({**record.__dict__, "msg": message, "args": None}))


def install(app: Flask) -> None:
    """Register the hooks; call before any other `before_request` hook (so a request those
    refuse has its id too) and before any other `after_request` hook (so this one runs
    last, and logs the answer as it leaves)."""
    route_to_gunicorn()

    @app.before_request
    def _identify() -> None:
        g.access_started = time.perf_counter()
        g.request_id = _incoming_id()
        g.opaque_id = _client_opaque_id()
        g.opaque_token = start_opaque_id(g.opaque_id or g.request_id)

    @app.after_request
    def _log(response: Response) -> Response:
        identifier = request_id()
        response.headers["X-Request-Id"] = identifier
        if g.get("opaque_id"):
            response.headers["X-Opaque-Id"] = g.opaque_id
        started = g.get("access_started")
        duration = 1000 * (time.perf_counter() - started) if started is not None else 0.0
        log.info(
            "method=%s path=%s status=%d duration_ms=%.1f request_id=%s remote=%s",
            request.method, _quoted_path(), response.status_code, duration, identifier, request.remote_addr or "-",
        )
        return response

    @app.teardown_request
    def _forget(_: BaseException | None) -> None:
        token = g.pop("opaque_token", None)
        if token is not None:
            end_opaque_id(token)


def _quoted_path(path: str | None = None) -> str:
    """The path percent-encoded (no spaces, quotes or line breaks in a log line), without
    the query string (which may hold a user's search text). A request's own path is
    logged as sent, its %-escapes kept: notes%2Fsimilar is not notes/similar."""
    if path is None:
        return quote(raw_path(request.environ), safe="/:@!$&'()*+,;=-._~%")[:2048]
    return quote(path, safe="/:@!$&'()*+,;=-._~")[:2048]


# --- answers made before Flask sees the request ---------------------------------------------
#
# The worker (worker.py) answers some requests from their raw bytes: framing it refuses
# (400, 414, 431), a request not sent whole in time (408), a worker already reading too
# many (503). Those answers carry an id and get an access line like any other, so that a
# client's 408 can be found in the log by the id it was given.

# A whole X-Request-Id header line among the bytes received (a line cut off is not used).
_RAW_ID = re.compile(rb"\r\nX-Request-Id:[ \t]*([^\r\n]*?)[ \t]*\r\n", re.IGNORECASE)
_RAW_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) (\S+) HTTP/")


def raw_request_id(received: bytes | bytearray) -> str:
    """The id of a request answered from its raw bytes: the caller's X-Request-Id when its
    header line arrived whole and is a safe token (as `_incoming_id`), else a new one."""
    end = received.find(b"\r\n\r\n")
    found = _RAW_ID.search(received[: end + 2] if end >= 0 else received)
    given = found.group(1).decode("latin-1") if found else ""
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def raw_method(received: bytes | bytearray) -> str:
    """The method of a request answered from its raw bytes, as the metrics' `method` label
    has it: one of HTTP's usual seven, else "other" (none arrived, or a made-up one)."""
    line = _RAW_REQUEST_LINE.match(received[:4096])
    method = line.group(1).decode() if line else ""
    return method if method in HTTP_METHODS else "other"


def log_raw_answer(received: bytes | bytearray, status: int, identifier: str, duration_ms: float, remote: str) -> None:
    """The access line of an answer made from a request's raw bytes (method and path when
    its request line arrived, else "-")."""
    line = _RAW_REQUEST_LINE.match(received[:4096])
    method, path = (line.group(1).decode(), _quoted_path(line.group(2).decode("latin-1").split("?", 1)[0])) if line else ("-", "-")
    log.info(
        "method=%s path=%s status=%d duration_ms=%.1f request_id=%s remote=%s",
        method, path, status, duration_ms, identifier, remote,
    )
