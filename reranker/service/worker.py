"""gunicorn's gthread worker, made safe against slow clients.

gthread hands a connection to a thread as soon as its first bytes arrive, and the thread
then reads the rest of the request with blocking reads that have no time limit: a client
that trickles its headers or body (a byte now and then) holds a thread for as long as it
likes, and a handful of such clients take every thread of a worker, /healthz's too.

This worker reads each request whole in its main thread first, without blocking: a
connection's bytes are collected as they come, and only a complete request (headers, and
the body its Content-Length or chunked framing announces) is given to a thread, which
then parses it from memory. A request that is not complete within RERANKER_READ_TIMEOUT
seconds of its first byte being awaited gets 408 and is closed. Slow clients then cost a
socket and a buffer each, never a thread.

What it relies on of gunicorn (27.x, pinned < 28 in pyproject.toml): `enqueue_req` is how
every connection reaches the thread pool, `murder_pending` runs once per loop of the main
thread, and a parser reads through an unreader that takes bytes back (`unread`).

Why a subclass and not gunicorn's public hooks: every hook (pre_request, post_request,
post_fork, ...) runs once a request is parsed or around the process, never while a
connection's bytes are still arriving, and gunicorn 27 has no setting that bounds that
read (its `timeout` restarts a silent worker; `keepalive` applies between requests). So
only the memory half moved to hooks (gunicorn.conf.py: post_fork fixes malloc's
thresholds, pre_request and post_request give a request's freed heap back); the reading
half cannot. Measured (2026-11-26, one worker of 4 threads, 8 clients sending a request
a byte every 0.3 s, load average 3.7): GET /healthz timed out at 4 s five times out of
five with gunicorn's own gthread worker and the same hooks, and answered in 1-2 ms with
this one.
"""

from __future__ import annotations

import json
import os
import selectors
import time
import weakref
from functools import cache, partial
from typing import Any

from gunicorn.http import errors as http_errors
from gunicorn.workers.gthread import ThreadWorker

from reranker.config import ServiceSettings
from reranker.service.access import log_raw_answer, raw_method, raw_request_id
from reranker.service.errors import error_body

# The endpoint label of the answers the worker makes before any route sees the request.
UNROUTED = "unrouted"

# Request line and headers beyond the body: gunicorn refuses more than 8190 bytes of
# request line and 100 header fields (gunicorn.conf.py); this is a generous ceiling.
HEAD_BYTES = 128 * 1024


class BufferingThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread, with every request read whole in the main thread before a thread sees it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        service = ServiceSettings.from_env(os.environ)
        self.read_timeout = float(service.read_timeout)
        # Past this, buffering stops and the request goes to a thread as it is: the app
        # reads at most RERANKER_MAX_BODY_BYTES + 1 bytes, all buffered, and answers 413.
        self.max_buffer = service.max_body_bytes + HEAD_BYTES
        self.max_body = service.max_body_bytes
        self.reading: dict[Any, float] = {}  # connection -> when its request must be complete
        # socket -> (the head of the request handed to a thread, when): what a refusal of
        # gunicorn's parser reads its request id and access-log line from (handle_error).
        self.handed: weakref.WeakKeyDictionary[Any, tuple[bytes, float]] = weakref.WeakKeyDictionary()
        self.max_reading = service.max_pending

    def enqueue_req(self, conn: Any) -> None:
        if getattr(conn, "buffered", False) or self.cfg.is_ssl or self._has_read_ahead(conn):
            # A complete request (or TLS, whose bytes only the thread can decrypt, or
            # bytes a previous request already read ahead): to a thread.
            if not getattr(conn, "buffered", False):
                self.handed.pop(conn.sock, None)  # the head kept is an earlier request's
            conn.buffered = False
            super().enqueue_req(conn)
            return
        if len(self.reading) >= self.max_reading:
            # Each connection still sending its request holds a buffer (up to the body
            # limit): past this many, new ones are turned away at once rather than let a
            # few thousand trickling clients take the worker's memory.
            conn.sock.setblocking(False)
            conn.pending_bytes = bytearray()
            self._answer(conn, 503, "Service Unavailable", "too_many_requests_exception",
                         f"this worker is already reading {len(self.reading)} requests (RERANKER_MAX_PENDING); try again",
                         registered=False)  # fmt: skip
            return
        conn.sock.setblocking(False)
        conn.pending_bytes = bytearray()
        conn.progress = RequestProgress()
        conn.sent_continue = False
        self.reading[conn] = time.monotonic() + self.read_timeout
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))

    @staticmethod
    def _has_read_ahead(conn: Any) -> bool:
        parser = getattr(conn, "parser", None)
        return parser is not None and bool(parser.unreader.buf.getvalue())

    def _on_readable(self, conn: Any, _: Any) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away before sending a whole request
            self._drop(conn)
            return
        conn.pending_bytes += data
        try:
            state = conn.progress.feed(conn.pending_bytes)
        except Framing as refused:
            self._refuse(conn, refused.status, refused.reason)
            return
        if (conn.progress.length or 0) > self.max_body:
            # A body its head says is too large: refused now, as the app would refuse it,
            # not invited with a 100 Continue or awaited until the read timeout's 408.
            self._answer(conn, 413, "Content Too Large", "content_too_long_exception",
                         f"request body larger than {self.max_body} bytes (RERANKER_MAX_BODY_BYTES)")  # fmt: skip
            return
        if state == "continue" and not conn.sent_continue:
            # The client waits for this before sending its body (curl does, for bodies
            # over 1 kB). gunicorn may send it again later; clients accept several.
            conn.sent_continue = True
            try:
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                pass
        if state == "complete" or len(conn.pending_bytes) > self.max_buffer:
            self._hand_over(conn)

    def _hand_over(self, conn: Any) -> None:
        self.poller.unregister(conn.sock)
        del self.reading[conn]
        conn.sock.setblocking(True)
        conn.init()  # the parser (plain HTTP here: TLS never comes this way)
        conn.parser.unreader.unread(bytes(conn.pending_bytes))
        head_end = conn.pending_bytes.find(b"\r\n\r\n")
        self.handed[conn.sock] = (bytes(conn.pending_bytes[: head_end + 4 if head_end >= 0 else HEAD_BYTES]), time.monotonic())
        conn.pending_bytes = bytearray()
        conn.data_ready = True  # gthread's own wait for a first byte is over
        conn.buffered = True
        self.enqueue_req(conn)

    def _drop(self, conn: Any) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        self.reading.pop(conn, None)
        self.nr_conns -= 1
        conn.close()

    def _refuse(self, conn: Any, status: int, reason: str) -> None:
        """Answer a request whose framing is wrong at once, in JSON, and close: gunicorn's
        own answer would be an HTML page, or a 408 once the read timeout ran out."""
        kinds = {400: ("Bad Request", "parse_exception"), 414: ("URI Too Long", "too_long_frame_exception"),
                 431: ("Request Header Fields Too Large", "too_long_frame_exception")}  # fmt: skip
        phrase, kind = kinds.get(status, ("Bad Request", "parse_exception"))
        self._answer(conn, status, phrase, kind, reason)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """A request gunicorn's parser refuses (framing `RequestProgress` lets through: raw
        non-ASCII or a space in the path, a lowercase method, a header name with a space, a
        NUL in a header, obsolete line folding, an `Expect` other than 100-continue, a header
        line over its limit) answered in JSON with a request id and an access-log line, as
        every other refusal: gunicorn's own answer is an HTML page without either. Other
        failures stay gunicorn's."""
        refusal = parser_refusal(exc, self.cfg.limit_request_field_size)
        if refusal is None:
            super().handle_error(req, client, addr, exc)
            return
        status, phrase, kind, reason = refusal
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        received, handed_at = self.handed.pop(client, (b"", time.monotonic()))
        identifier = raw_request_id(received)
        remote = str(addr[0]) if isinstance(addr, tuple) and addr else "-"
        log_raw_answer(received, status, identifier, 1000 * (time.monotonic() - handed_at), remote)
        self._count(received, status)
        try:
            client.sendall(_json_answer(status, phrase, kind, reason, identifier))
        except OSError:
            pass

    def _answer(self, conn: Any, status: int, phrase: str, kind: str, reason: str, *, registered: bool = True) -> None:
        """A JSON error answer, sent best effort (the socket is non-blocking), then close
        (`registered`: the connection is in the poller and `reading`, as `_drop` expects).
        It carries a request id and is logged, as the app's answers are (access.py)."""
        received = conn.pending_bytes
        identifier = raw_request_id(received)
        answer = _json_answer(status, phrase, kind, reason, identifier)
        # Reading began read_timeout before its deadline; a connection turned away at once took none.
        deadline = self.reading.get(conn)
        waited = 1000 * (time.monotonic() - (deadline - self.read_timeout)) if deadline is not None else 0.0
        client = getattr(conn, "client", None)
        remote = str(client[0]) if isinstance(client, tuple) and client else "-"
        log_raw_answer(received, status, identifier, waited, remote)
        self._count(received, status)
        try:
            conn.sock.send(answer)
        except OSError:
            pass
        if registered:
            self._drop(conn)
        else:
            self.nr_conns -= 1
            conn.close()

    def _count(self, received: bytes | bytearray, status: int) -> None:
        """An answer made before any route, in /metrics as the app's are (its 408s, 413s and
        503s were in the access log only, so an error rate read from /metrics left them out)."""
        # The app gunicorn loaded: this package's has a runtime; another app (a test's, or
        # one an operator runs with this worker class) has no metrics of ours to count in.
        runtime = getattr(getattr(self, "wsgi", None), "extensions", {}).get("reranker")
        if runtime is not None:
            runtime.metrics.requests.labels(UNROUTED, raw_method(received), str(status)).inc()

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c, deadline in self.reading.items() if deadline <= now]:
            if conn.pending_bytes:  # a request begun but not finished in time
                reason = f"the request was not sent whole within {self.read_timeout:g} s (RERANKER_READ_TIMEOUT)"
                self._answer(conn, 408, "Request Timeout", "request_timeout_exception", reason)
                continue
            self._drop(conn)


def _json_answer(status: int, phrase: str, kind: str, reason: str, identifier: str) -> bytes:
    """A whole HTTP answer carrying a JSON error, after which the connection closes."""
    body = json.dumps(error_body(status, kind, reason)).encode()
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (status, phrase.encode(), identifier.encode(), len(body), body)
    )


# gunicorn's statuses for what its parser refuses (Worker.handle_error); anything else it refuses is a 400.
_PARSER_STATUSES: list[tuple[type[Exception], int, str, str]] = [
    (http_errors.LimitRequestLine, 414, "URI Too Long", "too_long_frame_exception"),
    (http_errors.LimitRequestHeaders, 431, "Request Header Fields Too Large", "too_long_frame_exception"),
    (http_errors.ExpectationFailed, 417, "Expectation Failed", "expectation_failed_exception"),
    (http_errors.UnsupportedTransferCoding, 501, "Not Implemented", "parse_exception"),
    (http_errors.ForbiddenProxyRequest, 403, "Forbidden", "security_exception"),
]
_REQUEST_LINE = "a request line is METHOD (upper case), a path with its spaces and non-ASCII characters percent-encoded, and HTTP/1.1 or HTTP/1.0"


def parser_refusal(exc: BaseException, field_bytes: int) -> tuple[int, str, str, str] | None:
    """(status, phrase, error type, reason) of a request gunicorn's parser refused, or
    None for any other failure (a server fault, or a response header the app made).
    field_bytes: gunicorn's limit on one header field (limit_request_field_size)."""
    if not isinstance(exc, http_errors.ParseException) or isinstance(
        exc, (http_errors.ConfigurationProblem, http_errors.InvalidResponseHeader, http_errors.InvalidResponseHeaderName)
    ):
        return None
    reason = f"the request could not be read: {exc}"
    if isinstance(exc, (http_errors.InvalidRequestLine, http_errors.InvalidRequestMethod, http_errors.InvalidHTTPVersion)):
        reason += f" ({_REQUEST_LINE})"
    elif isinstance(exc, http_errors.LimitRequestHeaders) and "size" in str(exc):  # too many fields never get here (RequestProgress)
        reason = f"the request has a header field longer than {field_bytes} bytes"
    for cls, status, phrase, kind in _PARSER_STATUSES:
        if isinstance(exc, cls):
            return status, phrase, kind, reason
    return 400, "Bad Request", "parse_exception", reason


# --- memory a request freed -------------------------------------------------------------------
#
# A proxied _msearch at its limits parses tens of MB of cluster answers (2,000 hits with
# their topics) in buffers of several MB each. glibc's malloc serves the first such buffer
# with mmap and returns it on free, but then raises its mmap threshold to that size, so the
# next ones come from its heaps (one per thread), where what they free stays with the
# process: a worker stayed 1.5x above its baseline memory after two such requests, for good
# (bench/bench_bounds.py). Two remedies: the thresholds fixed at glibc's defaults (fixing
# them turns the raising off: a block over 128 KB is always its own mapping, given back when
# freed, and a heap's free top over 128 KB is given back too), and after a request that
# still grew the process by RETURN_AFTER_BYTES, malloc_trim (free pages inside the heaps).
# gunicorn.conf.py's post_fork, pre_request and post_request hooks call these.

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
GIVE_BACK_BYTES = 128 * 1024
RETURN_AFTER_BYTES = 16 << 20
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@cache
def _glibc() -> Any:
    """glibc, or None under another C library (musl, macOS: nothing to tune then). Found
    on first use, not at import: `find_library` runs ldconfig."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def keep_large_blocks_apart() -> bool:
    """Fix malloc's mmap and trim thresholds at 128 KB (see above); whether it could."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, GIVE_BACK_BYTES)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, GIVE_BACK_BYTES))


def heap_bytes() -> int | None:
    """The process's own resident memory (resident pages but those of mapped files, such
    as the word vectors'), or None where /proc cannot say."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def return_freed_memory(before: int) -> bool:
    """Give the heaps' free pages back to the system (glibc's malloc_trim, every arena) if
    the process grew by RETURN_AFTER_BYTES since `before` (a `heap_bytes()` reading);
    whether it did."""
    now = heap_bytes()
    libc = _glibc()
    if libc is None or now is None or now - before < RETURN_AFTER_BYTES:
        return False
    libc.malloc_trim(0)
    return True


# What gunicorn.conf.py lets through: a request line this long at most, and this many header
# fields. Past them gunicorn answers with an HTML page; this worker answers JSON first.
REQUEST_LINE_BYTES = 8190
REQUEST_FIELDS = 100


class Framing(Exception):
    """A request whose framing is wrong: (status, reason) for an immediate JSON answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class RequestProgress:
    """How much of an HTTP/1.x request has arrived, read incrementally.

    `feed(data)` takes everything received so far (the same buffer, grown) and says
    "partial", "continue" (headers in, `Expect: 100-continue`, no body yet) or "complete".
    Each call reads only what is new since the last one: a body sent a byte at a time costs
    linear time, not quadratic. Raises Framing for what no parser should be handed: a bare-LF
    head, conflicting Content-Length headers, a Transfer-Encoding other than `chunked`, a
    request line or header fields beyond gunicorn's limits.
    """

    def __init__(self) -> None:
        self.body_start: int | None = None
        self.head_scanned = 0  # the head's end is not before this offset
        self.expect_continue = False
        self.length: int | None = None  # Content-Length, when the body is framed by it
        self.chunked = False
        self.scanned = 0  # for chunked bodies: where the next chunk-size line starts, in the body
        self.last_chunk = False

    def feed(self, data: bytes | bytearray) -> str:
        if self.body_start is None:
            head_end = data.find(b"\r\n\r\n", self.head_scanned)
            if head_end < 0:
                self._check_partial_head(data)
                self.head_scanned = max(0, len(data) - 3)
                return "partial"
            self._read_head(bytes(data[:head_end]))
            self.body_start = head_end + 4
        body_length = len(data) - self.body_start
        if self.chunked:
            done = self._chunked_done(data)
        elif self.length is not None:
            done = body_length >= self.length
        else:
            done = True
        if done:
            return "complete"
        return "continue" if self.expect_continue and body_length == 0 else "partial"

    def _check_partial_head(self, data: bytes | bytearray) -> None:
        """Only the bytes new since the last look are searched (from a little before them)."""
        start = max(0, self.head_scanned - 1)
        if self.head_scanned <= REQUEST_LINE_BYTES + 2:
            line_end = data.find(b"\r\n")
            if (line_end < 0 and len(data) > REQUEST_LINE_BYTES) or line_end > REQUEST_LINE_BYTES:
                raise Framing(414, f"the request line is longer than {REQUEST_LINE_BYTES} bytes")
        bare = data.find(b"\n", start)
        while bare >= 0:
            if bare == 0 or data[bare - 1] != 13:  # 13: CR
                raise Framing(400, "the request's lines must end with CRLF")
            bare = data.find(b"\n", bare + 1)

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        if len(lines[0]) > REQUEST_LINE_BYTES:
            raise Framing(414, f"the request line is longer than {REQUEST_LINE_BYTES} bytes")
        if len(lines) - 1 > REQUEST_FIELDS:
            raise Framing(431, f"the request has {len(lines) - 1} header fields; at most {REQUEST_FIELDS}")
        lengths: set[str] = set()
        codings: list[str] = []
        for line in lines[1:]:
            if "\n" in line or "\r" in line:
                raise Framing(400, "the request's lines must end with CRLF")
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "content-length":
                lengths.add(value)
            elif name == "transfer-encoding":
                codings.extend(part.strip().lower() for part in value.split(","))
            elif name == "expect":
                self.expect_continue = value.lower() == "100-continue"
        if codings:
            if codings != ["chunked"]:
                raise Framing(400, f"Transfer-Encoding {', '.join(codings)!r} is not supported: send chunked, or a Content-Length")
            if lengths:
                raise Framing(400, "a request may not have both Transfer-Encoding and Content-Length")
            self.chunked = True
        elif lengths:
            if len(lengths) > 1:
                raise Framing(400, "the request has conflicting Content-Length headers")
            (length,) = lengths
            if not length.isdigit():
                raise Framing(400, f"Content-Length must be a number of bytes, got {length!r}")
            self.length = int(length)

    def _chunked_done(self, data: bytes | bytearray) -> bool:
        assert self.body_start is not None
        if self.last_chunk:
            rest = data[self.body_start + self.scanned:]
            return rest.startswith(b"\r\n") or b"\r\n\r\n" in rest
        while True:
            position = self.body_start + self.scanned
            line_end = data.find(b"\r\n", position)
            if line_end < 0:
                return False
            size_text = bytes(data[position:line_end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise Framing(400, f"malformed request body: a chunk size must be hexadecimal, got {size_text[:20].decode('latin-1')!r}") from None
            if size == 0:  # then trailer lines, if any, and a blank line
                self.last_chunk = True
                self.scanned = line_end + 2 - self.body_start
                return self._chunked_done(data)
            following = line_end + 2 + size + 2
            if following > len(data):
                return False
            self.scanned = following - self.body_start
