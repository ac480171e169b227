"""The HTTP service: a Flask app factory that gunicorn serves.

    errors.py     every failure -> one JSON error shape, through one table
    access.py     request ids (X-Request-Id, sent to the cluster as X-Opaque-Id), the access log
    bodies.py     request bodies: their bytes (size limit), strict JSON, API keys
    schema.py     the wire format: every request body and answer as a typed model
    operations.py each route's @operation, and /openapi.json generated from them
    reranking.py  the per-process Runtime: Engine, deadlines (fail open), topic cache,
                  experiments' interleaved windows
    api.py        native API: /search, /rerank, /rankers, probes, /metrics, /openapi.json
    cohere.py     Cohere-compatible /v1/rerank and /v2/rerank (for OpenSearch / Elasticsearch)
    library.py    the digital library: /documents/<id> (topics) and /documents/<id>/similar
    paths.py      a document's id in the path as sent (%2F is part of it), for the routes above
    web.py        the web page at /ui (static HTML/JS/CSS in static/)
    experiments.py  online experiments: POST /events (UBI), /experiments and their reports
    proxy.py      the OpenSearch-compatible search proxy (/<index>/_search, /_msearch)
    search_requests.py  how the proxy reads and rewrites OpenSearch search bodies
    query_dsl.py  the proxy's allow-list: the search body shapes and URL parameters it forwards
    metrics.py    Prometheus metrics, multiprocess under gunicorn
    server.py     `reranker serve`: gunicorn run in-process with gunicorn.conf.py
    worker.py     gunicorn's gthread worker, reading each request whole before a thread takes it
    gunicorn.conf.py  production server settings (`reranker serve` uses it too)

Each worker process builds its own `Runtime` (so its own Engine and OpenSearch client)
when gunicorn loads the app after forking; word vectors are memory-mapped read-only, so
the workers share their pages through the OS.
"""

from __future__ import annotations

import time

from flask import Flask, g, request
from flask.wrappers import Response

from reranker.config import Settings
from reranker.store import end_time_limit, start_time_limit

# Routes that answer from this process alone: they never wait on the cluster or a ranker,
# so they need no time limit and no search slot, and they answer while searches are stuck.
LOCAL_ENDPOINTS = frozenset({"api.root", "api.healthz", "api.metrics", "api.openapi", "web.page", "web.static"})
# GET / is local only without a cluster: with one, it answers with the cluster's own GET /.
CLUSTER_ENDPOINTS = frozenset({"api.root"})
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
# /readyz asks the cluster, but a probe must get its answer within a second or two.
READINESS_SECONDS = 1.5


def create_app(settings: Settings | None = None) -> Flask:
    """The WSGI app; `settings` default to the environment (and RERANKER_CONFIG)."""
    # Imported here, not at the top: prometheus_client picks its multiprocess mode when
    # first imported, and the gunicorn master (which imports this package to serve it)
    # sets PROMETHEUS_MULTIPROC_DIR only when it reads gunicorn.conf.py.
    from reranker.service import access, api, cohere, errors, experiments, library, operations, proxy, web
    from reranker.service.metrics import Metrics, endpoint_label
    from reranker.service.paths import DocumentPaths
    from reranker.service.reranking import Runtime
    from reranker.threads import limit_native_threads

    settings = settings or Settings.from_env()
    # Here, not in the CLI or gunicorn.conf.py: every way the service starts (`reranker
    # serve`, the Docker image, gunicorn with any config) builds its app with this, in
    # each worker.
    limit_native_threads(settings.blas_threads)
    # No /static of Flask's own (the page's files are under /ui/static): it would take
    # GET /static/_search from the proxy, whose index names it may not shadow.
    app = Flask("reranker", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.service.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    metrics = Metrics()
    app.extensions["reranker"] = Runtime(settings, metrics)
    errors.install(app)
    access.install(app)  # first: its hooks see every request, the refused ones too
    operations.install(app)
    app.register_blueprint(api.blueprint)
    app.register_blueprint(cohere.blueprint)
    app.register_blueprint(experiments.blueprint)
    app.register_blueprint(library.blueprint)
    app.register_blueprint(web.blueprint)
    app.register_blueprint(proxy.blueprint)  # last: its routes include catch-alls

    def options_response() -> Response:
        """OPTIONS lists the methods the path really has: Flask would add the proxy's
        catch-all's (PUT, DELETE, PATCH, ...), which only ever answer 403 or 405. Its
        empty body is typed text/plain, as OpenSearch types its own OPTIONS answer (Flask's
        default would claim an HTML page)."""
        found = app.response_class(mimetype="text/plain")
        found.allow.update({*proxy.native_routes().bind_to_environ(request.environ).allowed_methods(), "OPTIONS"})
        return found

    app.make_default_options_response = options_response  # type: ignore[method-assign]
    # Routes read a document's id from the path as sent, not as the server decoded it.
    app.wsgi_app = DocumentPaths(app.wsgi_app)  # type: ignore[method-assign]

    runtime = app.extensions["reranker"]
    limits = settings.service
    local_endpoints = LOCAL_ENDPOINTS - CLUSTER_ENDPOINTS if settings.opensearch_url else LOCAL_ENDPOINTS

    @app.before_request
    def _start_clock() -> None:
        g.started = time.perf_counter()
        endpoint = request.endpoint or ""
        if endpoint in local_endpoints:
            return
        if endpoint == "api.readyz":
            seconds = READINESS_SECONDS
        else:
            # One thread of each worker is kept for the routes above: a request that
            # finds every other one busy is turned away at once, not queued behind them.
            if not runtime.slots.acquire(blocking=False):
                raise errors.ApiError(
                    429, "rejected_execution_exception",
                    f"this worker is busy: all {runtime.slot_count} of its request threads are taken "
                    "(one more is kept for health checks); retry shortly",
                    headers={"Retry-After": "1"},
                )
            g.slot = True
            seconds = (limits.deadline_ms + limits.cluster_budget_ms) / 1000
        g.time_limit = start_time_limit(seconds)

    @app.teardown_request
    def _release(_: BaseException | None) -> None:
        token = g.pop("time_limit", None)
        if token is not None:
            end_time_limit(token)
        if g.pop("slot", False):
            runtime.slots.release()

    @app.after_request
    def _count(response: Response) -> Response:
        rule = endpoint_label()
        # Methods are a label: a made-up one must not make a new series per request.
        method = request.method if request.method in HTTP_METHODS else "other"
        metrics.requests.labels(rule, method, str(response.status_code)).inc()
        if "started" in g:
            metrics.latency.labels(rule).observe(time.perf_counter() - g.started)
        return response

    @app.after_request
    def _nosniff(response: Response) -> Response:
        if response.mimetype == "application/json":
            response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    return app
