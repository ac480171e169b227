"""The service's probes (the rest of the HTTP API arrives with the service issue)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reranker.config import Settings
from reranker.service import create_app

from conftest import TINY_CORPUS, run, write_jsonl


def test_readiness_follows_the_store(osmem_clone: Any, data_dir: Path, tmp_path: Path) -> None:
    settings = Settings.from_env({"HOME": str(tmp_path), "RERANKER_DATA_DIR": str(data_dir), "OPENSEARCH_URL": osmem_clone.url})
    client = create_app(settings).test_client()
    assert client.get("/healthz").get_json() == {"status": "ok"}
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.get_json()["error"]["type"] == "index_not_found_exception"
    run(data_dir, "--opensearch-url", osmem_clone.url, "index", str(write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)), "--no-progress")
    answer = client.get("/readyz")
    assert answer.status_code == 200 and answer.get_json() == {"status": "ready", "documents": 3, "vectors": "glove-6b-50d"}


def test_an_unreachable_cluster_is_not_ready(data_dir: Path, tmp_path: Path) -> None:
    settings = Settings.from_env({"HOME": str(tmp_path), "RERANKER_DATA_DIR": str(data_dir), "OPENSEARCH_URL": "http://127.0.0.1:9", "OPENSEARCH_RETRIES": "0"})
    answer = create_app(settings).test_client().get("/readyz")
    assert answer.status_code == 503 and answer.get_json()["error"]["type"] == "store_unavailable_exception" and answer.headers["Retry-After"] == "5"
    assert create_app(settings).test_client().get("/healthz").status_code == 200
