"""The HTTP service (Flask app factory; gunicorn serves it).

This version has the probes the container needs; the search, rerank and proxy routes
arrive with the service issue. Each worker process builds its own `Engine` on first use:
word vectors are memory-mapped read-only (the OS shares their pages between workers) and
the OpenSearch client is created after gunicorn forks, never before.
"""

from __future__ import annotations

import threading
from typing import Any

from flask import Flask, jsonify

from reranker.config import Settings
from reranker.errors import RerankerError


class _EngineHolder:
    """One Engine per process, built on first use (after the fork)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._engine: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    from reranker.pipeline import build_engine

                    self._engine = build_engine(self.settings)
        return self._engine


def create_app(settings: Settings | None = None) -> Flask:
    """The WSGI app; `settings` default to the environment (and RERANKER_CONFIG)."""
    settings = settings or Settings.from_env()
    app = Flask("reranker")
    holder = _EngineHolder(settings)
    app.extensions["reranker"] = holder

    @app.get("/healthz")
    def healthz() -> Any:
        """Liveness: the process answers. Says nothing about the store."""
        return jsonify(status="ok")

    @app.get("/readyz")
    def readyz() -> Any:
        """Readiness: word vectors loaded, store reachable and built with those vectors."""
        try:
            engine = holder.get()
            engine.check_index()
            documents = engine.store.count()
        except RerankerError as exc:
            return jsonify(status="unavailable", error={"type": type(exc).__name__, "reason": str(exc)}), 503
        return jsonify(status="ready", documents=documents, vectors=engine.vectors.info.name)

    return app
