"""The seam in front of storage.

Everything above this package talks to a `Store`. The embedded store (SQLite FTS5 for
BM25, topic matrices as float32 blobs) is the default; an OpenSearch store with the same
interface is selected by `Settings.opensearch_url`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from reranker.config import Settings
from reranker.errors import ConfigError, IndexMismatchError
from reranker.text import load_stopwords
from reranker.types import Candidate, Document, EmbeddingInfo, StoredDocument, TopicBatch


@dataclass(frozen=True)
class IndexInfo:
    """What an index was built with. Changing either means rebuilding it."""

    embedding: EmbeddingInfo
    k: int

    def check(self, embedding: EmbeddingInfo, k: int | None = None) -> None:
        """Raise IndexMismatchError unless `embedding` (and `k`, if given) match."""
        built, used = self.embedding, embedding
        if (built.name, built.dim, built.checksum) != (used.name, used.dim, used.checksum):
            raise IndexMismatchError(
                f"the index was built with word vectors {built.name!r} (d={built.dim}, "
                f"sha256 {built.checksum[:12]}) but {used.name!r} (d={used.dim}, "
                f"sha256 {used.checksum[:12]}) are loaded; use the same vectors or rebuild "
                "the index (reranker index --rebuild)"
            )
        if k is not None and k != self.k:
            raise IndexMismatchError(
                f"the index was built with K={self.k} topics per document, not K={k}; "
                "rebuild it (reranker index --rebuild) to change K"
            )


class Store(Protocol):
    """Where documents, their BM25 index and their topics live."""

    def index_info(self) -> IndexInfo | None:
        """What the index was built with, or None for an empty, new index."""
        ...

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        """Prepare the index for `info`; with `rebuild`, drop what it held first.

        Raises IndexMismatchError when the index holds documents built otherwise.
        """
        ...

    def upsert(self, documents: Sequence[StoredDocument]) -> None:
        """Write documents; an id already present is replaced, never duplicated."""
        ...

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The stored content hash of each of `doc_ids` that is present (for resuming)."""
        ...

    def count(self) -> int: ...

    def bm25(self, query: str, size: int) -> list[Candidate]:
        """The `size` best BM25 matches for the free-text `query`, best first."""
        ...

    def topics(self, doc_ids: Sequence[str]) -> TopicBatch:
        """The topics of `doc_ids`, in that order, padded into one batch.

        Ids that are not stored get zero topics (they score 0).
        """
        ...

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        """The stored text of those `doc_ids` that exist."""
        ...

    def close(self) -> None: ...


def open_store(settings: Settings, path: Path | None = None) -> Store:
    """The store `settings` select: OpenSearch when a URL is set, else the embedded one.

    `path` overrides the embedded store's location (evaluation keeps one per data set).
    """
    if settings.opensearch_url:
        raise ConfigError(
            "the OpenSearch store is not available in this version yet; "
            "unset OPENSEARCH_URL / --opensearch-url to use the embedded store"
        )
    from reranker.store.embedded import EmbeddedStore

    return EmbeddedStore(path or settings.data_dir / "index", load_stopwords(settings.stopwords_file))
