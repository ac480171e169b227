"""A document's id in a request path, whatever characters it holds.

The rule (docs/http-api.md): in the path as the client sent it, under `/documents/` or
`/documents/_doc/`, a literal `/` separates and a last segment `similar` asks for papers
like the document; every other character, and every percent-encoded one (`%2F` too), is
part of the id. So `/documents/_doc/notes%2Fsimilar` is the paper of id `notes/similar`,
`/documents/_doc/notes%2Fsimilar/similar` the papers like it, and a DOI may be sent with
its slash as it is (`/documents/10.1145/3397271`) or as `%2F`.

A WSGI server decodes the path before the app sees it (PATH_INFO), which would make
`notes%2Fsimilar` and `notes/similar` one path. `DocumentPaths` reads the path as sent
(environ RAW_URI, set by gunicorn, werkzeug's server and its test client; REQUEST_URI by
mod_wsgi and uWSGI), splits it by that rule and hands Flask the id as one percent-encoded
segment, which the `doc_id` converters decode: the routes never see a decoded slash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable
from urllib.parse import quote, unquote, unquote_to_bytes, urlsplit

from flask import request
from werkzeug.exceptions import BadRequest
from werkzeug.routing import BaseConverter

PREFIX = "/documents/"
# /documents/_search, _msearch and _count are the proxy's (an OpenSearch index named
# "documents"): the plain form leaves ids starting with them as a segment to the _doc form.
PROXY_NAMES = frozenset({b"_search", b"_msearch", b"_count"})
SIMILAR = b"similar"
# The path as sent, decoded (for error reasons) and not (`raw_path`, for the access log
# and hints): PATH_INFO holds the canonical form once `DocumentPaths` has rewritten it.
SENT_PATH = "reranker.sent_path"
RAW_PATH = "reranker.raw_path"

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class DocumentPath:
    """What a path under /documents/ names: an id (bytes: the client chose the encoding),
    in the plain or the `_doc` form, the paper itself or papers like it."""

    doc_id: bytes
    by_doc: bool
    similar: bool

    def canonical(self) -> str:
        """The PATH_INFO the routes see: the id as one percent-encoded segment."""
        return f"{PREFIX}{'_doc/' if self.by_doc else ''}{quote(self.doc_id, safe='')}{'/similar' if self.similar else ''}"


def parse(raw_path: str) -> DocumentPath | None:
    """The document `raw_path` (percent-encoded, as sent) names; None when it names none:
    outside /documents/, the proxy's /documents/_search (..., with anything after it), or
    an empty id."""
    if not raw_path.startswith(PREFIX):
        return None
    segments = [unquote_to_bytes(segment) for segment in raw_path[len(PREFIX) :].split("/")]
    by_doc = len(segments) > 1 and segments[0] == b"_doc"
    if by_doc:
        segments = segments[1:]
    elif segments[0] in PROXY_NAMES:
        return None
    similar = len(segments) > 1 and segments[-1] == SIMILAR
    doc_id = b"/".join(segments[:-1] if similar else segments)
    return DocumentPath(doc_id, by_doc, similar) if doc_id else None


def document_url(doc_id: str, *, similar: bool = False) -> str:
    """The path that names `doc_id` whatever it holds (the `_doc` form, every reserved
    character percent-encoded), for hints and anything that prints a document's URL."""
    return f"{PREFIX}_doc/{quote(doc_id, safe='')}{'/similar' if similar else ''}"


def raw_path(environ: dict[str, Any]) -> str:
    """The request's path as sent, percent-encoding kept, as a WSGI (latin-1) string
    (the one `DocumentPaths` read, once it has run).

    Trusted only when it decodes to SCRIPT_NAME + PATH_INFO (a front proxy may have
    rewritten one but not the other); otherwise, and where the server sets neither
    RAW_URI nor REQUEST_URI, PATH_INFO re-encoded: `%2F` then reads as `/`, as it did."""
    if RAW_PATH in environ:
        return str(environ[RAW_PATH])
    script, path_info = environ.get("SCRIPT_NAME", ""), environ.get("PATH_INFO", "")
    target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
    # origin-form "/a/b?q" (urlsplit would read "//a/b" as a host); absolute-form "http://h/a/b?q"
    sent = target.partition("?")[0].partition("#")[0] if target.startswith("/") else urlsplit(target).path
    skip = script.count("/")  # SCRIPT_NAME "/app" is the sent path's first segment
    parts = sent.split("/")
    rest = "/" + "/".join(parts[1 + skip :]) if skip else sent
    try:
        decoded = (script + path_info).encode("latin-1")
        # gunicorn decodes bytes as they are; werkzeug's server as UTF-8, "replace"ing the rest.
        if decoded in (unquote_to_bytes(sent.encode("latin-1")), unquote(sent, errors="replace").encode("utf-8")):
            return rest
        return quote(path_info.encode("latin-1"), safe="/")
    except UnicodeEncodeError:  # not a WSGI string: nothing to trust
        return quote(path_info.encode("utf-8"), safe="/")


class DocumentPaths:
    """WSGI middleware: a request for a document has PATH_INFO rewritten to its canonical
    form (`DocumentPath.canonical`), which the `doc_id` converters read back."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path_info = environ.get("PATH_INFO", "")
        environ[SENT_PATH] = path_info.encode("latin-1", "replace").decode("utf-8", "replace")
        environ[RAW_PATH] = raw = raw_path(environ)
        named = parse(raw)
        if named is not None:
            environ["PATH_INFO"] = named.canonical()
        return self.app(environ, start_response)


def sent_path() -> str:
    """The current request's path as the client sent it, decoded (request.path is the
    canonical form for a document's)."""
    return str(request.environ.get(SENT_PATH, request.path))


def doc_id_hint() -> str:
    """For a path under /documents/ that names no document the routes serve (`parse`
    left it, or the proxy's /documents/_search), how to name the document meant: "" when
    there is none to name. Appended to the proxy's refusals."""
    raw = raw_path(request.environ)
    if not raw.startswith(PREFIX):
        return ""
    rest = raw[len(PREFIX) :]
    meant = parse(PREFIX + "_doc/" + rest.removeprefix("_doc/"))
    if meant is None:
        return "; a document is named by GET /documents/_doc/<id> with its id percent-encoded (an empty id names none)"
    try:
        doc_id = meant.doc_id.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    what = "papers like the stored document" if meant.similar else "the stored document"
    return f"; for {what} whose id is {doc_id!r}: GET {document_url(doc_id, similar=meant.similar)}"


class AnyDocIdConverter(BaseConverter):
    """A document id as `DocumentPaths` hands it over: one percent-encoded segment."""

    regex = r"[^/]+"
    part_isolating = True

    def to_python(self, value: str) -> str:
        try:
            return unquote_to_bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"the document id in the path is not UTF-8 once percent-decoded: {value!r}") from None

    def to_url(self, value: str) -> str:
        return quote(value, safe="")


# What the plain form /documents/<id> leaves to other routes: the proxy's endpoints (so that
# /<index>/_search, _msearch and _count still reach an index named "documents") and the
# `_doc/` form. It reads the path the routes see, where a document's id is one
# percent-encoded segment (`DocumentPath.canonical`).
NOT_PLAIN = r"(?!(?:_m?search|_count)(?:/|$)|_doc/)"


# The same rule over the id itself, which a client percent-encodes into the path (`%2F` for
# its slashes), published as /documents/{doc_id}'s pattern: every id but the proxy's three
# names (`parse` reads `_search`, `%5Fsearch` too, as the proxy's). An id starting with
# "_search/" or "_doc/" is the plain form's once its slash is encoded, so NOT_PLAIN's other
# cases never apply to it. `(?![\s\S])`, not `$`: Python's `$` also matches before a final
# newline, and `_search` + newline is an id like any other.
PLAIN_ID_PATTERN = r"^(?!(?:_m?search|_count)(?![\s\S]))"


class DocIdConverter(AnyDocIdConverter):
    """A document id named plainly: any id but `NOT_PLAIN`'s (which `parse` leaves
    undecided, so they reach the proxy or its catch-all decoded)."""

    regex = NOT_PLAIN + r"[^/]+"
