"""Settings: the only module that reads the environment.

Precedence, lowest first: built-in defaults, environment variables, command-line options
(the CLI applies those with `dataclasses.replace`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from reranker.errors import ConfigError

DEFAULT_VECTORS = "glove-6b-50d"
DEFAULT_K = 15
DEFAULT_WINDOW = 100


def _default_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "reranker"


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class Settings:
    """Everything the package can be configured with.

    data_dir: where the embedded store, converted vectors and evaluation indexes live.
    opensearch_url: when set, the OpenSearch store replaces the embedded one.
    vectors: "glove-6b-50d" (bundled) or a path, optionally prefixed with its format
        ("word2vec:", "word2vec-bin:", "glove:", "fasttext:", "kv:").
    k: topics per document at index time (a document may get fewer).
    window: how many BM25 candidates a query reranks.
    stopwords_file: one word per line, replacing the built-in stop list.
    fusion_weight: weight of the topic score in the `hidden_topics+bm25` fusion ranker.
    blas_threads: BLAS threads per process (1: indexing is ~10x faster on a 2-core host
        than with OpenBLAS's default, measured; scoring is one small product anyway).
    """

    data_dir: Path
    opensearch_url: str | None = None
    vectors: str = DEFAULT_VECTORS
    k: int = DEFAULT_K
    window: int = DEFAULT_WINDOW
    stopwords_file: Path | None = None
    fusion_weight: float = 0.5
    blas_threads: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        stopwords = env.get("RERANKER_STOPWORDS")
        settings = cls(
            data_dir=Path(env.get("RERANKER_DATA_DIR") or _default_data_dir(env)).expanduser(),
            opensearch_url=env.get("OPENSEARCH_URL") or None,
            vectors=env.get("RERANKER_VECTORS") or DEFAULT_VECTORS,
            k=_int(env, "RERANKER_K", DEFAULT_K),
            window=_int(env, "RERANKER_WINDOW", DEFAULT_WINDOW),
            stopwords_file=Path(stopwords).expanduser() if stopwords else None,
            fusion_weight=_float(env, "RERANKER_FUSION_WEIGHT", 0.5),
            blas_threads=_int(env, "RERANKER_BLAS_THREADS", 1),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.window < 1:
            raise ConfigError(f"window must be >= 1, got {self.window}")
        if not 0.0 <= self.fusion_weight <= 1.0:
            raise ConfigError(f"fusion weight must lie in [0, 1], got {self.fusion_weight}")
