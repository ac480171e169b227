"""Reading request bodies: strict JSON, typed fields, limits, and errors that say what was wrong.

Every route reads its body through `json_object()` and its fields through `Fields`, so
"malformed JSON", "not UTF-8", "wrong type" and "out of range" read the same everywhere
and are always a 400, never a 500.
"""

from __future__ import annotations

import hmac
import json
import math
from typing import Any, Collection, Iterable

from flask import current_app, g, request
from werkzeug.exceptions import RequestEntityTooLarge

from reranker.service.errors import ApiError, bad_request
from reranker.types import FILTER_OPS, Filter


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """`raw` as JSON. Raises ApiError 400 (parse_exception) for bytes that are not UTF-8 JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "parse_exception", f"{what} is not UTF-8 (invalid byte at offset {exc.start})") from None
    if not text.strip():
        raise ApiError(400, "parse_exception", f"{what} is empty; expected JSON")
    try:
        value = json.loads(text, parse_constant=_no_constants, parse_float=_finite_float, parse_int=_long)
    except json.JSONDecodeError as exc:
        raise ApiError(400, "parse_exception", f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # NaN / Infinity, numbers out of range, integers of over 4,300 digits
        raise ApiError(400, "parse_exception", f"{what}: {exc}") from None
    except RecursionError:
        raise ApiError(400, "parse_exception", f"{what} is nested too deeply") from None
    # "\ud800" is valid JSON but not Unicode: such a string cannot be stored, logged or
    # forwarded as UTF-8. Only a body with escapes can hold one, so only those are checked.
    if "\\u" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "parse_exception", f"{what} has a string with a lone surrogate escape (such as \\ud800): not valid Unicode") from None
    return value


def _long(literal: str) -> int:
    """A JSON integer that fits a 64-bit long (OpenSearch's widest integer); a larger one
    would overflow where it becomes a float or reaches the cluster."""
    value = int(literal)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"the integer {literal[:40]}{'...' if len(literal) > 40 else ''} is out of range (more than 64 bits)")
    return value


def _finite_float(literal: str) -> float:
    """A JSON number that fits a double; 1e400 would become infinity."""
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"the number {literal[:40]} is out of range")
    return value


def body_bytes() -> bytes:
    """The request body (read once per request), whether sent with a Content-Length or
    chunked. Raises ApiError 413 when it is longer than RERANKER_MAX_BODY_BYTES (werkzeug
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
    g.body = raw
    return raw


def json_object(*, required: bool = True) -> dict[str, Any]:
    """The request body as a JSON object ({} when empty and not required); an over-large
    body is a 413 before any parsing (`body_bytes`)."""
    raw = body_bytes()
    if not raw.strip() and not required:
        return {}
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise bad_request(f"request body must be a JSON object, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
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


class Fields:
    """Typed access to one JSON object's fields; `finish()` refuses names nobody read."""

    def __init__(self, body: dict[str, Any], where: str = "") -> None:
        self.body = body
        self.where = where  # prefix for messages, e.g. "documents[3]."
        self._read: set[str] = set()

    def _get(self, name: str) -> Any:
        self._read.add(name)
        return self.body.get(name)

    def _fail(self, name: str, expected: str, value: Any) -> ApiError:
        return bad_request(f"[{self.where}{name}] must be {expected}, got {_json_type(value)}")

    def text(self, name: str, *, required: bool = False, max_chars: int | None = None, default: str | None = None) -> str | None:
        value = self._get(name)
        if value is None:
            if required:
                raise bad_request(f"[{self.where}{name}] is required")
            return default
        if not isinstance(value, str):
            raise self._fail(name, "a string", value)
        if required and not value.strip():
            raise bad_request(f"[{self.where}{name}] must not be empty")
        if max_chars is not None and len(value) > max_chars:
            raise ApiError(413, "content_too_long_exception", f"[{self.where}{name}] has {len(value)} characters; the limit is {max_chars} (RERANKER_MAX_TEXT_CHARS)")
        return value

    def integer(self, name: str, default: int, *, minimum: int = 0, maximum: int | None = None, limit_setting: str = "") -> int:
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise self._fail(name, "an integer", value)
        number = int(value)
        if number < minimum:
            raise bad_request(f"[{self.where}{name}] must be >= {minimum}, got {number}")
        if maximum is not None and number > maximum:
            hint = f" ({limit_setting})" if limit_setting else ""
            raise bad_request(f"[{self.where}{name}] must be <= {maximum}{hint}, got {number}")
        return number

    def number(self, name: str) -> float | None:
        value = self._get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(name, "a number", value)
        return float(value)

    def fraction(self, name: str) -> float | None:
        """A number in [0, 1] (a fusion weight), or None when absent."""
        value = self.number(name)
        if value is not None and not 0.0 <= value <= 1.0:
            raise bad_request(f"[{self.where}{name}] must lie in [0, 1], got {value}")
        return value

    def client_id(self, name: str = "client_id") -> str | None:
        """Who searches (UBI's client_id): 1-100 characters, or None."""
        value = self.text(name)
        if value is None:
            return None
        if not 0 < len(value) <= 100 or not value.strip():
            raise bad_request(f"[{self.where}{name}] must be 1 to 100 characters, got {len(value)}")
        return value  # (valid Unicode: parse_json refuses lone surrogate escapes)

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(name, "true or false", value)
        return value

    def array(self, name: str, *, required: bool = False) -> list[Any] | None:
        value = self._get(name)
        if value is None:
            if required:
                raise bad_request(f"[{self.where}{name}] is required")
            return None
        if not isinstance(value, list):
            raise self._fail(name, "an array", value)
        return value

    def ignore(self, names: Iterable[str]) -> None:
        """Accept these fields without reading them (compatibility with other APIs)."""
        self._read.update(names)

    def finish(self) -> None:
        unknown = sorted(set(self.body) - self._read)
        if unknown:
            known = ", ".join(sorted(self._read))
            raise bad_request(f"unknown field [{self.where}{unknown[0]}]; known fields: {known}")


def filters(value: list[Any] | None) -> list[Filter]:
    """`[{"field": "year", "op": "gte", "value": 2010}, ...]` -> Filters (op defaults to eq)."""
    found: list[Filter] = []
    for position, item in enumerate(value or []):
        if not isinstance(item, dict):
            raise bad_request(f"[filters[{position}]] must be an object like {{\"field\": \"year\", \"op\": \"gte\", \"value\": 2010}}")
        fields = Fields(item, f"filters[{position}].")
        name = fields.text("field", required=True)
        op = fields.text("op", default="eq")
        raw = fields._get("value")
        fields.finish()
        if op not in FILTER_OPS:
            raise bad_request(f"[filters[{position}].op] must be one of {', '.join(FILTER_OPS)}, got {op!r}")
        if isinstance(raw, bool) and op != "eq":
            raise bad_request(f"[filters[{position}].value] a boolean can only be compared with eq")
        if not isinstance(raw, (str, int, float, bool)):
            raise bad_request(f"[filters[{position}].value] must be a string, number or boolean")
        assert name is not None and op is not None
        found.append(Filter(field=name, op=op, value=raw))
    return found


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
