"""The web page: search papers by an abstract (its first screen), compare two rankers, browse papers by topic, run experiments.

    GET /ui                        the page (one HTML file; views are hash routes), also as /ui/
    GET /ui/static/<file>          its scripts (app.js, plots.js) and style sheet

The page reads `/search` (with `snippets`, to name untitled documents by their opening
words), `/documents`, `/experiments` and `/experiments/<id>/timeline` (the plot of each
experiment), `/readyz` (whether an empty answer came from an empty index), and changes experiments through the admin routes with a key typed into it.

Plain HTML, CSS and JavaScript shipped in the package (`static/`): no build step, no
CDN. The page talks to the JSON API only, and builds every element from data with
`textContent`, so document text is never parsed as HTML; the Content-Security-Policy
below allows no inline script either, as a second line of defence.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, send_from_directory

from reranker.service.operations import Operation, Reply, describe_endpoint, operation

blueprint = Blueprint("web", __name__, static_folder="static", static_url_path="/ui/static")
describe_endpoint("web.static", Operation(
    "the page's scripts and style sheet",
    path={"filename": {"type": "string", "minLength": 1}},
    answers={200: Reply("the file", media=("text/javascript", "text/css", "text/html"))},
    errors=(404,),
))

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


# `/ui/` too: a user who types the address with a slash gets the page, not a 404 (its files
# and views are named by absolute paths and hashes, so either address serves it whole).
@blueprint.get("/ui", strict_slashes=False)
@operation("the web page: search papers (the first screen), compare rankers, browse papers, experiments", answers={200: Reply("the page", media=("text/html",))})
def page() -> Any:
    """The page itself; its views are #/search (the first screen), #/compare, #/paper/<id>, #/experiments."""
    assert blueprint.static_folder is not None
    return send_from_directory(blueprint.static_folder, "index.html")


@blueprint.after_request
def _security_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response
