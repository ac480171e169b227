"""Reading requests: the body's bytes (with their size limit), strict JSON, API keys, and
who the client is (its network address, for quotas).

Every route reads its body through `json_object()` (the proxy's _msearch through
`body_bytes()`, `require_json_type()` and `parse_json()`), so "too large", "malformed JSON",
"not UTF-8" and "a number beyond a double" read the same everywhere and are never a 500.
What the JSON must hold is the business of the typed models in `schema.py`.
"""

from __future__ import annotations

import codecs
import hashlib
import hmac
import ipaddress
import json
import math
import zlib
from typing import Any, Collection, Sequence

from flask import current_app, g, has_request_context, request
from werkzeug.exceptions import RequestEntityTooLarge

from reranker.config import IPNetwork
from reranker.service.errors import ApiError, bad_request


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _DuplicateKey(ValueError):
    """A key given twice in one JSON object (raised while parsing, answered as a 400)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would keep the last of a repeated key without a word; OpenSearch and
    # Elasticsearch refuse it (Jackson's strict duplicate detection), so the two readings of
    # {"query": "a", "query": "b"} cannot differ between the proxy and the cluster.
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _DuplicateKey()
    return found


class _Pairs(list[tuple[str, Any]]):
    """An object as its key/value pairs, in order, repeats kept (to find a repeated key)."""


def _duplicate_key(text: str) -> tuple[str, str]:
    """(key, path) of a repeated key of `text` (valid JSON): an object's own repeats before
    those of the objects inside it, earlier objects first; a path as `ext.rerank.window` or
    `documents[2].id`. Run only once a repeat was found, so it costs the valid bodies nothing."""
    tree = json.loads(text, object_pairs_hook=_Pairs, parse_float=float)
    stack: list[tuple[Any, str]] = [(tree, "")]
    while stack:  # depth first, without recursion: the body may be nested deeply
        value, path = stack.pop()
        children: list[tuple[Any, str]] = []
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            for key, child in value:
                child_path = f"{path}.{key}" if path else key
                if key in seen:
                    return key, child_path
                seen.add(key)
                children.append((child, child_path))
        elif isinstance(value, list):
            children = [(child, f"{path}[{i}]") for i, child in enumerate(value)]
        stack.extend(reversed(children))
    return "?", "?"  # not reached: the caller found a repeat


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """`raw` as JSON. Raises ApiError 400 (parse_exception) for bytes that are not UTF-8 JSON,
    and (json_parse_exception, as OpenSearch answers it) for an object with a key twice."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        charset = _declared_charset()
        hint = "; JSON is read as UTF-8 (RFC 8259), as OpenSearch reads it, whatever the charset: send it in UTF-8" if charset else ""
        raise ApiError(400, "parse_exception", f"{what}{charset} is not UTF-8 (invalid byte at offset {exc.start}){hint}") from None
    if not text.strip():
        raise ApiError(400, "parse_exception", f"{what} is empty; expected JSON")
    try:
        value = json.loads(text, parse_constant=_no_constants, parse_float=_finite_float, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ApiError(400, "parse_exception", f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except _DuplicateKey:
        key, path = _duplicate_key(text)
        raise ApiError(
            400, "json_parse_exception", f"{what}: Duplicate field '{key}' at [{path}]; a key may appear once in an object"
        ) from None
    # NaN / Infinity, numbers beyond a double, integers of over 4,300 digits. Integers of
    # any other size are read exactly: each field the service reads has its bounds (and the
    # proxy passes the rest to the cluster as sent, for it to judge).
    except ValueError as exc:
        raise ApiError(400, "parse_exception", f"{what}: {exc}") from None
    except RecursionError:
        raise ApiError(400, "parse_exception", f"{what} is nested too deeply") from None
    # "\ud800" is valid JSON but not Unicode: such a string cannot be stored, logged or
    # forwarded as UTF-8. Only a body with escapes can hold one, so only those are checked.
    if "\\u" in text and _holds_lone_surrogate(value):
        raise ApiError(400, "parse_exception", f"{what} has a string with a lone surrogate escape (such as \\ud800): not valid Unicode")
    return value


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether a string of the parsed JSON `value`, key or value, holds a surrogate that
    is not half of a pair (the JSON decoder joins escaped pairs into one character): its
    strings' UTF-8 is then undefined. Each string is encoded once: a client that escapes
    every accented letter sends such a body for 100 papers, 3.5 MB, where writing the
    whole value out again as JSON to find out took 46 ms."""
    unread = [value]
    while unread:
        item = unread.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            unread.extend(item)
            unread.extend(item.values())
        elif isinstance(item, list):
            unread.extend(item)
    return False


def _finite_float(literal: str) -> float:
    """A JSON number that fits a double; 1e400 would become infinity."""
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"the number {literal[:40]} is out of range")
    return value


def body_bytes() -> bytes:
    """The request body (read once per request), whether sent with a Content-Length or
    chunked, decompressed when sent as gzip (`_gunzipped`). Raises ApiError 413 when it is
    longer than RERANKER_MAX_BODY_BYTES, sent or decompressed (werkzeug
    would cut a chunked body at the limit without a word, and the JSON parser would then
    report a truncated string), and 400 when its chunked encoding is malformed.
    """
    if "body" in g:
        return g.body  # type: ignore[no-any-return]
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    length = request.content_length
    if limit is not None and length is not None and length > limit:
        raise RequestEntityTooLarge()  # worded by the app's error handler, as werkzeug's own
    # A server that ends the stream itself (gunicorn: Content-Length or chunked) is read
    # directly, so that more than the limit can be seen; otherwise werkzeug's stream,
    # which stops at Content-Length.
    stream = request.environ["wsgi.input"] if request.environ.get("wsgi.input_terminated") else request.stream
    try:
        raw = stream.read() if limit is None else stream.read(limit + 1)
    except OSError as exc:  # the client went away or stopped sending
        raise ApiError(400, "parse_exception", f"the request body could not be read: {exc}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("gunicorn.http"):  # InvalidChunkSize, ChunkMissingTerminator, NoMoreData
            raise ApiError(400, "parse_exception", f"malformed request body: {exc}") from None
        raise
    if limit is not None and len(raw) > limit:
        raise RequestEntityTooLarge()  # worded by the app's error handler, as werkzeug's own
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if raw and encoding not in ("", "identity"):
        raw = _gunzipped(raw, encoding, limit)
    g.body = raw
    return raw


def _gunzipped(raw: bytes, encoding: str, limit: int | None) -> bytes:
    """A body sent with `Content-Encoding: gzip` (opensearch-py's and elasticsearch-py's
    `http_compress=True` send them so, and OpenSearch reads them), decompressed: at most
    `limit` bytes of it (RERANKER_MAX_BODY_BYTES), so a small bomb is a 413, not memory.
    Raises ApiError 415 for another coding, 400 for bytes that are not one whole gzip stream."""
    if encoding not in ("gzip", "x-gzip"):
        raise ApiError(
            415, "media_type_header_exception", f"Content-Encoding {encoding!r} is not supported: send the body uncompressed or as gzip"
        )
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # 16+: the gzip header and trailer
    try:
        body = inflater.decompress(raw, 0 if limit is None else limit + 1)
    except zlib.error as exc:
        raise ApiError(400, "parse_exception", f"the request body is not valid gzip (Content-Encoding: gzip): {exc}") from None
    if limit is not None and len(body) > limit:
        raise RequestEntityTooLarge()
    if not inflater.eof or inflater.unused_data:
        raise ApiError(400, "parse_exception", "the request body is not one whole gzip stream (Content-Encoding: gzip): it is cut short or has bytes after its end")
    return body


def require_json_type(*accepted: str) -> None:
    """ApiError 415 unless the request declares its body as JSON (`application/json`, or a
    `+json` type such as Elasticsearch clients' `application/vnd.elasticsearch+json`), or
    one of `accepted` (also in its vendor form: for `application/x-ndjson`, the
    `application/vnd.elasticsearch+x-ndjson` elasticsearch-py 8 and 9 send an `_msearch` as).
    A browser sends `text/plain` and form bodies cross-site without asking first (no CORS
    preflight): parsing those as JSON would let any page post to the service."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json") or mimetype in accepted:
        return
    if mimetype.startswith("application/vnd.") and any(mimetype.endswith("+" + a.partition("/")[2]) for a in accepted):
        return
    shown = mimetype or "none"
    raise ApiError(
        415, "media_type_header_exception",
        f"the body must be sent as Content-Type: application/json{''.join(f' or {a}' for a in accepted)}, got {shown}",
    )


def _declared_charset() -> str:
    """", declared as charset=X," when the request's Content-Type names a charset other
    than UTF-8 (or ASCII, a part of it), else "": what a "not UTF-8" refusal adds.

    The body is read as UTF-8 whatever the label says, as OpenSearch reads it (its
    Content-Type parser accepts a charset and ignores it; RFC 8259 defines none for JSON),
    so a client that labels UTF-8 bytes ISO-8859-1 is served here as by the cluster, and the
    proxy forwards what the cluster would read. Only bytes that are not UTF-8 are refused,
    and then the label is the likely reason."""
    if not has_request_context():
        return ""
    declared = request.mimetype_params.get("charset")
    if declared is None:
        return ""
    try:
        if codecs.lookup(declared).name in ("utf-8", "ascii"):
            return ""
    except LookupError:
        pass
    return f", declared as charset={declared},"


def json_object(*, required: bool = True) -> dict[str, Any]:
    """The request body as a JSON object ({} when empty and not required); an over-large
    body is a 413 before any parsing (`body_bytes`), a body not declared as JSON a 415
    (`require_json_type`)."""
    raw = body_bytes()
    if not raw.strip() and not required:
        return {}
    require_json_type()
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise bad_request(f"request body must be a JSON object, got {json_type(value)}")
    return value


def json_type(value: Any) -> str:
    """How an error names what it got: "a string", "an array", "null", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def require_bearer(keys: Collection[str], *, unset: str, unset_status: int = 401) -> None:
    """Refuse the request unless it carries `Authorization: Bearer <one of keys>`.

    unset: the reason when no key is configured at all (answered with `unset_status`).
    Keys are compared in constant time, so timing says nothing about a key.
    """
    challenge = {"WWW-Authenticate": 'Bearer realm="reranker"'}
    if not keys:
        raise ApiError(unset_status, "security_exception", unset, challenge)
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "security_exception", "missing API key: send 'Authorization: Bearer <key>'", challenge)
    if not any(hmac.compare_digest(token.encode(), key.encode()) for key in keys):
        raise ApiError(401, "security_exception", "invalid API key", challenge)


# --- who the client is ---------------------------------------------------------------------


def client_address(peer: str | None, forwarded_for: Sequence[str], trusted: Sequence[IPNetwork]) -> str:
    """The network address a request came from, as a quota key.

    peer: the TCP peer (REMOTE_ADDR). forwarded_for: the X-Forwarded-For headers' entries,
    in order. Each reverse proxy appends the address it was sent from, so the list is read
    from the right, starting at the peer, and only while the address read is one of
    `trusted` (RERANKER_TRUSTED_PROXIES): the first address that is not a trusted proxy's is
    the client. Entries left of it were written by the client and are never read. Without
    trusted proxies the peer is the client, whatever the header says.

    An IPv6 client counts as its /64 network (what one subscriber is usually given: a
    single address would be a quota anyone can step around); an IPv4-mapped address as
    its IPv4 address. Something unreadable where a trusted proxy wrote the client's
    address counts as that proxy.
    """
    hops = [peer or "", *reversed([entry.strip() for header in forwarded_for for entry in header.split(",")])]
    current = _address(hops[0])
    for hop in hops[1:]:
        if current is None or not any(current in network for network in trusted):
            break
        following = _address(hop)
        if following is None:
            break
        current = following
    if current is None:
        return peer or "unknown"
    if isinstance(current, ipaddress.IPv6Address):
        if current.ipv4_mapped is not None:
            return str(current.ipv4_mapped)
        return str(ipaddress.ip_network(f"{current}/64", strict=False))
    return str(current)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]").split("%")[0])
    except ValueError:
        return None


def client_source(trusted: Sequence[IPNetwork]) -> str:
    """This request's client address, pseudonymised: what an event stores to count it
    against its client's quota (a hash, so that no address is kept as it is; an IPv4
    address can still be found again by trying all of them: pseudonymous, not anonymous)."""
    address = client_address(request.remote_addr, request.headers.getlist("X-Forwarded-For"), trusted)
    return hashlib.sha256(address.encode("utf-8")).hexdigest()[:16]
