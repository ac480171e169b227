"""The schemathesis run finds no contract drift between /openapi.json and the service.

schemathesis's own command line (`st run`, with the repository's schemathesis.toml, as a
developer runs it) against `reranker serve` (gunicorn on a free port), twice: over the
embedded store, and over osmem-server so that the proxy's routes reach a cluster. Every
check schemathesis has: no 5xx; statuses, content types and answers as documented;
schema-valid requests accepted and schema-invalid ones refused (the drift the checks
`positive_data_acceptance` and `negative_data_rejection` look for). Phases: the schema's
examples, coverage (the boundaries of every field and constraint) and fuzzing, with
deterministic generation, so a failure replays with the command the output prints.

The services run with small limits (texts of 2,000 characters, 20 documents, windows of
50): /openapi.json publishes the running settings' values, so the coverage phase's
boundary cases stay small, and one run takes about 15 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import schemathesis
from conftest import REPO, SAMPLE, Service, run, settings_env
from hypothesis import HealthCheck, given, settings

from reranker.config import Settings
from reranker.service import create_app

KEY = "fuzz-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
# The same key for the Cohere routes and the experiment changes, so that both are fuzzed.
KEYS = {"RERANKER_API_KEYS": KEY, "RERANKER_ADMIN_API_KEY": KEY}
SMALL_LIMITS = {"RERANKER_MAX_TEXT_CHARS": "2000", "RERANKER_MAX_DOCUMENTS": "20", "RERANKER_MAX_WINDOW": "50", "RERANKER_WINDOW": "20"}


def _data_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    data_dir = factory.mktemp(name) / "data"
    data_dir.mkdir()
    return data_dir


@pytest.fixture(scope="module")
def embedded_dir(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    data_dir = _data_dir(tmp_path_factory, "fuzz-embedded")
    assert run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    return data_dir


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, glove: object, osmem_server: Any) -> Iterator[tuple[Path, str]]:
    clone = osmem_server.clone()
    data_dir = _data_dir(tmp_path_factory, "fuzz-cluster")
    assert run(data_dir, "--opensearch-url", clone.url, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")[0] == 0
    yield data_dir, clone.url
    clone.close()


def schemathesis_run(service: Service) -> str:
    """`st run` against `service` from the repository root; its output. Fails the test with
    that output when schemathesis finds anything."""
    st = Path(sys.executable).with_name("st")
    command = [
        str(st), "run", f"{service.url}/openapi.json", "--header", f"Authorization: Bearer {KEY}",
        "--checks", "all", "--phases", "examples,coverage,fuzzing", "--generation-deterministic",
        # One worker: with two, CPython 3.11's ast.parse (which hypothesis calls to describe a
        # strategy) can race in the threads ("AST constructor recursion depth mismatch").
        "--max-examples", "10", "--workers", "1", "--suppress-health-check", "all", "--no-color",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-20_000:]
    return output


def _tested(output: str) -> int:
    found = re.search(r"Tested:\s+(\d+)", output)
    assert found, output[-3000:]
    return int(found.group(1))


def test_the_embedded_service_honours_its_schema(embedded_dir: Path) -> None:
    service = Service(embedded_dir, {**KEYS, **SMALL_LIMITS}, workers=1, threads=4)
    try:
        output = schemathesis_run(service)
    finally:
        service.stop()
    # Every operation but the proxy's (404 without a cluster) and _msearch (NDJSON, which
    # schemathesis.toml leaves out) was generated for and called.
    assert _tested(output) >= 20 and " 0 passed" not in output


def test_the_cluster_service_honours_its_schema(cluster: tuple[Path, str]) -> None:
    data_dir, url = cluster
    service = Service(data_dir, {**KEYS, **SMALL_LIMITS, "OPENSEARCH_URL": url, "RERANKER_PROXY_INDICES": "*"}, workers=1, threads=4)
    try:
        output = schemathesis_run(service)
    finally:
        service.stop()
    assert _tested(output) >= 20 and " 0 passed" not in output


@pytest.fixture(scope="module")
def embedded_app(embedded_dir: Path) -> Iterator[Any]:
    app = create_app(Settings.from_env({**settings_env(embedded_dir), **KEYS}))
    yield app
    app.extensions["reranker"].close()


@pytest.fixture(scope="module")
def cluster_app(cluster: tuple[Path, str]) -> Iterator[Any]:
    data_dir, url = cluster
    env = {**settings_env(data_dir), **KEYS, "OPENSEARCH_URL": url, "RERANKER_PROXY_INDICES": "*"}
    app = create_app(Settings.from_env(env))
    yield app
    app.extensions["reranker"].close()


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
