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
"""

from __future__ import annotations

import json
import os
import selectors
import time
from functools import partial
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

from reranker.config import ServiceSettings

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
        self.reading: dict[Any, float] = {}  # connection -> when its request must be complete

    def enqueue_req(self, conn: Any) -> None:
        if getattr(conn, "buffered", False) or self.cfg.is_ssl or self._has_read_ahead(conn):
            # A complete request (or TLS, whose bytes only the thread can decrypt, or
            # bytes a previous request already read ahead): to a thread.
            conn.buffered = False
            super().enqueue_req(conn)
            return
        conn.sock.setblocking(False)
        conn.pending_bytes = bytearray()
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
        state = request_state(conn.pending_bytes)
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

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c, deadline in self.reading.items() if deadline <= now]:
            if conn.pending_bytes:  # a request begun but not finished in time
                body = json.dumps({
                    "error": {"type": "request_timeout_exception", "reason": f"the request was not sent whole within {self.read_timeout:g} s (RERANKER_READ_TIMEOUT)"},
                    "status": 408,
                }).encode()  # fmt: skip
                answer = b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                try:
                    conn.sock.send(answer)  # best effort: the socket is non-blocking
                except OSError:
                    pass
            self._drop(conn)


def request_state(data: bytes | bytearray) -> str:
    """"complete" when `data` holds a whole HTTP/1.x request (or one malformed enough that
    the parser will refuse it anyway), "continue" when its headers are in, ask for
    `Expect: 100-continue` and its body is still to come, else "partial"."""
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return "partial"
    lines = bytes(data[:head_end]).decode("latin-1").lower().split("\r\n")[1:]
    fields: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    body = data[head_end + 4:]
    if "chunked" in fields.get("transfer-encoding", ""):
        done = chunked_complete(body)
    elif "content-length" in fields:
        length = fields["content-length"]
        done = not length.isdigit() or len(body) >= int(length)
    else:
        done = True
    if done:
        return "complete"
    return "continue" if fields.get("expect") == "100-continue" and not body else "partial"


def chunked_complete(body: bytes | bytearray) -> bool:
    """Whether a chunked body has arrived up to its last chunk and the blank line after
    it (or is malformed, which the parser will refuse)."""
    position = 0
    while True:
        line_end = body.find(b"\r\n", position)
        if line_end < 0:
            return False
        size_text = bytes(body[position:line_end]).split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return True
        if size == 0:  # then trailer lines, if any, and a blank line
            rest = body[line_end + 2:]
            return rest.startswith(b"\r\n") or b"\r\n\r\n" in rest
        position = line_end + 2 + size + 2
        if position > len(body):
            return False

