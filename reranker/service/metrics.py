"""Prometheus metrics: requests and latency per route, rerank latency per ranker, fallbacks.

Under gunicorn each worker is its own process, so a scrape answered by one worker must
still count the others: `gunicorn.conf.py` points PROMETHEUS_MULTIPROC_DIR at a fresh
directory before any worker starts, prometheus_client then keeps the values in files
there, and `/metrics` adds them up. Without that variable (tests, `flask run`) the values
live in this process, in a registry of the app's own.

Labels are bounded: a route's rule (`/<index>/_search`, never the concrete path; the same
`endpoint` in every metric, so that they join), a registered ranker name, a fallback reason
(timeout, ranker_error, topics_unavailable, partial), an experiment id (created by an
admin, one running at a time).
"""

from __future__ import annotations

import os

from flask import has_request_context, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

# Seconds: the service answers in milliseconds to about a second.
_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def endpoint_label() -> str:
    """The `endpoint` label of this request: its route's rule, `unmatched` when none matched."""
    rule = request.url_rule if has_request_context() else None
    return rule.rule if rule is not None else "unmatched"


class Metrics:
    """The service's metrics, registered in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "reranker_requests", "HTTP requests answered", ["endpoint", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "reranker_request_duration_seconds", "Time to answer a request", ["endpoint"],
            buckets=_BUCKETS, registry=self.registry,
        )
        self.rerank_latency = Histogram(
            "reranker_rerank_duration_seconds", "Time a ranker took to score a window", ["endpoint", "ranker"],
            buckets=_BUCKETS, registry=self.registry,
        )
        self.degraded = Counter(
            "reranker_degraded_responses", "Responses that fell back to the first-stage order",
            ["endpoint", "ranker", "reason"], registry=self.registry,
        )
        self.topic_cache = Counter(
            "reranker_topic_cache_lookups", "Topics of request texts: found in the cache or computed",
            ["result"], registry=self.registry,
        )
        self.experiment_searches = Counter(
            "reranker_experiment_searches", "Searches an experiment picked: interleaved, left out (a ranker degraded), or interleaved then taken back (its page was not shown)",
            ["experiment", "result"], registry=self.registry,
        )
        self.events = Counter(
            "reranker_events", "UBI events received: created, duplicate or rejected", ["result"], registry=self.registry,
        )

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) for a scrape: all workers' values when multiprocess."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
