"""How the OpenSearch store writes a document's numbers into its source, and reads them back.

A topic matrix is one `binary` field: base64 of the row-major little-endian K x d matrix
(float32, or float16 on request). Decoding 100 of them is one b64decode per document and
one `frombuffer` for all; as JSON float arrays the same costs 12-20x more
(bench/bench_opensearch.py measures both). A Doc2Vec vector is base64 of its
little-endian float32 values, beside the checksum of the model that made it.
"""

from __future__ import annotations

import base64
import logging
from itertools import chain
from typing import Any, Sequence

import numpy as np

from reranker.store.bm25 import passage_spans
from reranker.text import tokenize
from reranker.types import MAX_FILTER_VALUE_CHARS, Document, StoredDocument

log = logging.getLogger(__name__)

# How topic matrices may be stored (RERANKER_TOPIC_DTYPE): little-endian, as written.
DTYPES: dict[str, np.dtype[Any]] = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}


def encode_matrix(matrix: np.ndarray, dtype: str = "float32") -> str:
    """A K x d matrix -> base64 of its row-major little-endian bytes."""
    data = np.ascontiguousarray(matrix, dtype=DTYPES[dtype]).tobytes()
    return base64.b64encode(data).decode("ascii")


def decode_backgrounds(sources: Sequence[dict[str, Any] | None], importances: np.ndarray) -> np.ndarray:
    """The `backgrounds` of corrected-topic objects, padded like `decode_topics`'s importances.

    A document whose topics `decode_topics` refused (zero importances) or whose backgrounds
    do not match its K gets zeros.
    """
    backgrounds = np.zeros_like(importances)
    for row, source in enumerate(sources):
        values = (source or {}).get("backgrounds")
        if isinstance(values, list) and importances[row].any() and len(values) <= importances.shape[1]:
            try:
                backgrounds[row, : len(values)] = np.asarray(values, dtype=np.float32)
            except (TypeError, ValueError):
                continue
    return backgrounds


def decode_topics(
    sources: Sequence[dict[str, Any] | None], dim: int, dtype: str = "float32"
) -> tuple[np.ndarray, np.ndarray]:
    """`hidden_topics` objects (None: not found) -> padded (N, k_max, d) topics, (N, k_max).

    One b64decode per document, then a single frombuffer and one masked assignment for
    the whole batch. A document whose matrix does not match its K and d (or the index's
    d) is logged and gets zero topics, so it scores 0 instead of failing the query.
    """
    item = DTYPES[dtype].itemsize
    ks = np.zeros(len(sources), dtype=np.int64)
    blobs: list[bytes] = []
    weights: list[list[float]] = []
    for row, source in enumerate(sources):
        if not source:
            continue
        try:
            k, d = int(source["k"]), int(source["d"])
            blob = base64.b64decode(source["matrix"], validate=True)
            importances = source["importances"]
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring unreadable topics of document %d in a batch: %s", row, exc)
            continue
        if d != dim or len(blob) != k * d * item or len(importances) != k:
            log.warning("ignoring topics of shape %dx%d (%d bytes) where d=%d was expected", k, d, len(blob), dim)
            continue
        ks[row] = k
        blobs.append(blob)
        weights.append(importances)
    k_max = int(ks.max()) if len(ks) else 0
    topics = np.zeros((len(sources), k_max, dim), dtype=np.float32)
    importances_out = np.zeros((len(sources), k_max), dtype=np.float32)
    if k_max:
        mask = np.arange(k_max)[None, :] < ks[:, None]
        topics[mask] = np.frombuffer(b"".join(blobs), dtype=DTYPES[dtype]).reshape(-1, dim)
        importances_out[mask] = np.fromiter(chain.from_iterable(weights), dtype=np.float32, count=int(ks.sum()))
    return topics, importances_out


def decode_doc_vectors(sources: Sequence[dict[str, Any] | None], dim: int, model: str) -> tuple[np.ndarray, list[bool]]:
    """`doc2vec` objects (None: not found) -> (N, dim) float32 vectors, and which rows
    hold one. A vector of another model, or of the wrong size, counts as absent."""
    vectors = np.zeros((len(sources), dim), dtype=np.float32)
    present = [False] * len(sources)
    for row, source in enumerate(sources):
        if not source or source.get("model") != model:
            continue
        try:
            blob = base64.b64decode(source["vector"], validate=True)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignoring an unreadable Doc2Vec vector in a batch: %s", exc)
            continue
        if len(blob) != dim * 4:
            log.warning("ignoring a Doc2Vec vector of %d bytes where dim=%d was expected", len(blob), dim)
            continue
        vectors[row] = np.frombuffer(blob, dtype="<f4")
        present[row] = True
    return vectors, present


def passages_of(words: Sequence[str]) -> list[dict[str, str]]:
    """The `passages` of a text's content words (in order): the embedded store's best
    passages (`passage_spans`), each one's words joined by spaces, for the cluster to
    analyse and score as it scores `body`."""
    return [{"text": " ".join(words[start:end])} for start, end in passage_spans(len(words))]


def document_passages(document: Document, stopwords: frozenset[str] | None = None) -> list[dict[str, str]]:
    """The `passages` of a document written before (its content words taken again)."""
    return passages_of(tokenize(document.full_text, stopwords))


def document_source(
    stored: StoredDocument, dtype: str = "float32", *, passages: bool = False, stopwords: frozenset[str] | None = None
) -> dict[str, Any]:
    """The `_source` written for one document (what index_templates/ maps).

    passages: add the document's best passages (`passages_of` its content words: the
    write path's `content_words`, else its text tokenized with `stopwords`), for an index
    that maps them; the mapping keeps them out of the stored `_source`.
    """
    doc, topics = stored.document, stored.doc_topics
    source: dict[str, Any] = {"title": doc.title, "body": doc.text}
    for name, value in doc.fields.items():
        # Nothing to map or search in a null or an empty list: leave it out.
        if value is not None and not (isinstance(value, list) and all(v is None for v in value)):
            source[name] = value
    source["hidden_topics"] = {
        "matrix": encode_matrix(topics.topics, dtype),
        "k": topics.k,
        "d": int(topics.topics.shape[1]),
        "importances": [float(x) for x in topics.importances],
    }
    corrected = stored.corrected
    if corrected is not None:
        source["corrected_topics"] = {
            "matrix": encode_matrix(corrected.topics, dtype),
            "k": int(corrected.importances.shape[0]),
            "d": int(corrected.topics.shape[1]),
            "importances": [float(x) for x in corrected.importances],
            "backgrounds": [float(x) for x in corrected.backgrounds],
        }
    source["indexed"] = {
        "content_hash": stored.content_hash,
        "n_tokens": stored.n_tokens,
        "n_oov": stored.n_oov,
    }
    if passages:
        words = stored.content_words
        source["passages"] = passages_of(words.split()) if words is not None else document_passages(doc, stopwords)
    return source


def field_mapping(value: Any) -> dict[str, Any] | None:
    """The mapping of a corpus field first seen with `value` (None: cannot tell yet)."""
    if isinstance(value, list):
        first = next((item for item in value if item is not None), None)
        return None if first is None else field_mapping(first)
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "long"}
    if isinstance(value, float):
        return {"type": "double"}
    if isinstance(value, str):
        # Searchable as English text, filterable exactly through `NAME.raw`, which keeps any
        # value a filter may name (as `title.raw` does): at the usual 256, an = filter on a
        # longer value found the document on the embedded store and nothing on the cluster.
        return {
            "type": "text",
            "analyzer": "english",
            "fields": {"raw": {"type": "keyword", "ignore_above": MAX_FILTER_VALUE_CHARS}},
        }
    if isinstance(value, dict):
        return {"type": "object", "enabled": False}  # kept in _source, not searched
    return None
