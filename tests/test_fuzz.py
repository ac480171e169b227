"""Schemathesis fuzzes every operation in /openapi.json against the real app.

Two apps: one over the embedded store, one over osmem-server (so the search proxy's
routes reach a cluster). The checks are the issue's: no 5xx, every status code and
content type documented, and every response body matching its documented schema.
Examples are derandomized (the repeatable Hypothesis profile), so a failure replays.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import schemathesis
from conftest import SAMPLE, run, settings_env
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from reranker.config import Settings
from reranker.service import create_app

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
HEADERS = {"Authorization": "Bearer fuzz-key"}
FUZZ = settings(max_examples=25, suppress_health_check=list(HealthCheck), deadline=None)


def _data_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    data_dir = factory.mktemp(name) / "data"
    data_dir.mkdir()
    return data_dir


@pytest.fixture(scope="module")
def embedded_app(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Iterator[Any]:
    data_dir = _data_dir(tmp_path_factory, "fuzz-embedded")
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    app = create_app(Settings.from_env({**settings_env(data_dir), "RERANKER_API_KEYS": "fuzz-key"}))
    yield app
    app.extensions["reranker"].close()


@pytest.fixture(scope="module")
def cluster_app(tmp_path_factory: pytest.TempPathFactory, glove: object, osmem_server: Any) -> Iterator[Any]:
    clone = osmem_server.clone()
    data_dir = _data_dir(tmp_path_factory, "fuzz-cluster")
    assert run(data_dir, "--opensearch-url", clone.url, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    env = {**settings_env(data_dir), "RERANKER_API_KEYS": "fuzz-key", "OPENSEARCH_URL": clone.url, "RERANKER_PROXY_INDICES": "*"}
    app = create_app(Settings.from_env(env))
    yield app
    app.extensions["reranker"].close()
    clone.close()


def _fuzz(app: Any) -> list[str]:
    """Run every operation's generated cases through the checks; the operations tried."""
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    tried = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @FUZZ
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            case.call_and_validate(headers=HEADERS, checks=CHECKS)

        check()
        tried.append(f"{operation.method.upper()} {operation.path}")
    return tried


def test_the_embedded_service_honours_its_schema(embedded_app: Any) -> None:
    tried = _fuzz(embedded_app)
    assert {"POST /search", "POST /rerank", "POST /v1/rerank", "POST /{index}/_search"} <= set(tried)


def test_the_cluster_service_honours_its_schema(cluster_app: Any) -> None:
    tried = _fuzz(cluster_app)
    assert {"POST /_msearch", "GET /{index}/_search", "POST /v2/rerank"} <= set(tried)


# A JSON number token (not inside a string: the bodies' strings are re-encoded below).
_NUMBER = re.compile(r'(?<=[:\[,])(\s*)-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?')


@pytest.mark.parametrize("app_name", ["embedded_app", "cluster_app"])
def test_numbers_that_overflow_are_never_a_server_error(app_name: str, request: pytest.FixtureRequest) -> None:
    """Generated bodies cannot hold 1e400 (a Python float cannot), so the schema fuzzing
    above would never send one: take its valid bodies and overflow their numbers."""
    app = request.getfixturevalue(app_name)
    client = app.test_client()
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() not in ("POST", "PATCH", "PUT") or operation.body is None or not len(operation.body):
            continue

        @settings(max_examples=5, suppress_health_check=list(HealthCheck), deadline=None)
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            nonlocal sent
            if not isinstance(case.body, (dict, list)):
                return
            text = json.dumps(case.body, separators=(",", ":"))
            if not _NUMBER.search(text):
                return
            for literal in ("1e400", "-1e400", "1" + "0" * 400):
                raw = _NUMBER.sub(lambda m: m.group(1) + literal, text)
                path = case.formatted_path
                answer = client.open(path, method=case.method, data=raw, content_type="application/json", headers=HEADERS)
                sent += 1
                assert answer.status_code < 500, (case.method, path, raw[:200], answer.get_data(as_text=True)[:300])
                assert answer.is_json, (path, answer.status_code)

        check()
    assert sent > 0
