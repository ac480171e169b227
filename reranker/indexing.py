"""The write path: corpus lines -> documents -> word vectors -> topics -> store.

Indexing is resumable and idempotent: documents are written in batches, each batch in
one transaction, and a document whose id is already stored with the same content is
not recomputed. Bad lines are reported with their file and line number and skipped;
nothing already indexed is touched by them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Protocol

from reranker.embeddings import WordVectors
from reranker.errors import InputError
from reranker.store import IndexInfo, Store
from reranker.text import tokenize
from reranker.topics import extract_topics
from reranker.types import DocTopics, Document, StoredDocument

log = logging.getLogger(__name__)

BATCH_SIZE = 64


class ProgressLike(Protocol):
    """What `index_documents` needs of a progress bar (tqdm fits)."""

    def update(self, n: int) -> object: ...


@dataclass(frozen=True)
class Skipped:
    """A corpus line that was not indexed, and why."""

    location: str  # "file:line"
    doc_id: str | None
    reason: str


@dataclass(frozen=True)
class IndexReport:
    """What one `index_corpus` run did."""

    indexed: int  # written (new or changed)
    unchanged: int  # already stored with the same content (a resumed or repeated run)
    skipped: tuple[Skipped, ...]
    total_documents: int  # in the store afterwards
    seconds: float


def parse_document(line: str, location: str) -> Document:
    """One JSONL corpus line -> Document. Raises InputError naming `location`.

    Required: "id" (string or integer) and "text" (string). Optional: "title" (string).
    Other keys are kept as metadata fields.
    """
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at column {exc.colno})", location) from None
    if not isinstance(record, dict):
        raise InputError("expected a JSON object", location)
    doc_id = record.get("id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or str(doc_id).strip() == "":
        raise InputError("missing or invalid 'id' (a non-empty string or integer)", location)
    text, title = record.get("text"), record.get("title", "")
    if not isinstance(text, str):
        raise InputError(f"document {doc_id!r}: missing 'text' string", location)
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise InputError(f"document {doc_id!r}: 'title' must be a string", location)
    if not (title.strip() or text.strip()):
        raise InputError(f"document {doc_id!r}: empty text", location)
    fields = {key: value for key, value in record.items() if key not in ("id", "title", "text")}
    return Document(id=str(doc_id), title=title, text=text, fields=fields)


def read_corpus(path: Path) -> Iterator[tuple[str, Document | Skipped, int]]:
    """Yield (location, document or the reason it is skipped, bytes read) per line.

    Raises InputError when the file cannot be opened or is not UTF-8.
    """
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read corpus: {exc.strerror}", str(path)) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            location = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield location, Skipped(location, None, "not UTF-8 text"), len(raw)
                continue
            if not line.strip():
                yield location, Skipped(location, None, "empty line"), len(raw)
                continue
            try:
                yield location, parse_document(line, location), len(raw)
            except InputError as exc:
                reason = str(exc).removeprefix(f"{location}: ")
                yield location, Skipped(location, None, reason), len(raw)


def content_hash(document: Document) -> str:
    """A stable fingerprint of everything indexed about a document."""
    payload = json.dumps([document.title, document.text, document.fields], sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def document_topics(
    document: Document, vectors: WordVectors, k: int, stopwords: frozenset[str] | None = None
) -> tuple[DocTopics, int, int]:
    """Topics of one document -> (topics, in-vocabulary tokens, out-of-vocabulary tokens)."""
    tokens = tokenize(document.full_text, stopwords)
    lookup, counts, oov = vectors.lookup_counts(tokens)
    topics, importances = extract_topics(lookup.vectors, k, counts=counts)
    return DocTopics(topics, importances), len(tokens) - oov, oov


def index_documents(
    records: Iterable[tuple[str, Document | Skipped, int]],
    store: Store,
    vectors: WordVectors,
    k: int,
    *,
    stopwords: frozenset[str] | None = None,
    rebuild: bool = False,
    progress: ProgressLike | None = None,
) -> IndexReport:
    """Index `records` (as `read_corpus` yields them) into `store`.

    Raises IndexMismatchError when the store holds documents built with other vectors or
    another K and `rebuild` is False.
    """
    started = time.perf_counter()
    store.initialise(IndexInfo(embedding=vectors.info, k=k), rebuild=rebuild)
    skipped: list[Skipped] = []
    indexed = unchanged = 0
    batch: list[tuple[str, Document]] = []

    def flush() -> None:
        nonlocal indexed, unchanged
        stored_hashes = store.content_hashes([doc.id for _, doc in batch])
        ready: dict[str, StoredDocument] = {}
        for location, doc in batch:
            digest = content_hash(doc)
            if stored_hashes.get(doc.id) == digest and doc.id not in ready:
                unchanged += 1
                continue
            doc_topics, n_tokens, n_oov = document_topics(doc, vectors, k, stopwords)
            if doc_topics.k == 0:
                reason = "no in-vocabulary words" + (f" ({n_oov} out-of-vocabulary)" if n_oov else "")
                skipped.append(Skipped(location, doc.id, reason))
                continue
            # A later line with the same id replaces an earlier one, as in the store.
            ready[doc.id] = StoredDocument(doc, doc_topics, digest, n_tokens, n_oov)
        store.upsert(list(ready.values()))
        indexed += len(ready)
        batch.clear()

    for location, item, size in records:
        if isinstance(item, Skipped):
            skipped.append(item)
        else:
            batch.append((location, item))
            if len(batch) >= BATCH_SIZE:
                flush()
        if progress is not None:
            progress.update(size)
    if batch:
        flush()
    for item in skipped:
        log.warning("skipped %s%s: %s", item.location, f" ({item.doc_id})" if item.doc_id else "", item.reason)
    return IndexReport(
        indexed=indexed,
        unchanged=unchanged,
        skipped=tuple(skipped),
        total_documents=store.count(),
        seconds=time.perf_counter() - started,
    )


def index_corpus(
    path: Path,
    store: Store,
    vectors: WordVectors,
    k: int,
    *,
    stopwords: frozenset[str] | None = None,
    rebuild: bool = False,
    show_progress: bool = True,
) -> IndexReport:
    """Index a JSONL corpus file, with a progress bar over its bytes on stderr."""
    from tqdm import tqdm

    if not path.is_file():
        raise InputError("no such corpus file", str(path))
    with tqdm(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"indexing {path.name}",
        disable=not show_progress,
        leave=False,
    ) as bar:
        return index_documents(
            read_corpus(path), store, vectors, k, stopwords=stopwords, rebuild=rebuild, progress=bar
        )

