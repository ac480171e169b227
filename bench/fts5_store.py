"""The embedded store's first stage before tantivy, kept as the benchmark's baseline only.

SQLite FTS5 (`porter unicode61`, `bm25()` with title weight 2) over the same documents,
with as much of the old store as `reranker.indexing.index_documents` needs to build it
(topics are stored as before, so indexing costs what it used to) and its BM25 query: the
OR of every content word of the query.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Sequence

import numpy as np

from reranker.store import IndexInfo
from reranker.text import stop_list_info, tokenize
from reranker.types import Candidate, EmbeddingInfo, StoredDocument, WriteFailure

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL, body TEXT NOT NULL,
    content_hash TEXT NOT NULL, topics BLOB NOT NULL, importances BLOB NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
    title, body, content='docs', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2'
);
"""


class Fts5Store:
    """Single-threaded; enough of the `Store` protocol to index a corpus and run BM25."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._db = sqlite3.connect(directory / "store.sqlite3", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        # FTS5 stems the text itself, in SQLite (as the old store did).
        self.word_stemmer = None
        self.stop_list = stop_list_info(None)  # what indexing checks its list against

    def index_info(self) -> IndexInfo | None:
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        return IndexInfo(EmbeddingInfo(**json.loads(meta["embedding"])), int(meta["k"])) if meta else None

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        values = {"embedding": json.dumps(info.embedding.__dict__), "k": str(info.k)}
        self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        marks = ",".join("?" * len(doc_ids))
        return dict(self._db.execute(f"SELECT id, content_hash FROM docs WHERE id IN ({marks})", list(doc_ids)).fetchall())

    def upsert(self, documents: Sequence[StoredDocument]) -> list[WriteFailure]:
        self._db.execute("BEGIN IMMEDIATE")
        for stored in documents:
            doc, topics = stored.document, stored.doc_topics
            cursor = self._db.execute(
                "INSERT INTO docs(id, title, body, content_hash, topics, importances) VALUES (?, ?, ?, ?, ?, ?)",
                (doc.id, doc.title, doc.text, stored.content_hash,
                 np.ascontiguousarray(topics.topics, "<f4").tobytes(), np.ascontiguousarray(topics.importances, "<f4").tobytes()),
            )
            self._db.execute("INSERT INTO docs_fts(rowid, title, body) VALUES (?, ?, ?)", (cursor.lastrowid, doc.title, doc.text))
        self._db.execute("COMMIT")
        return []

    def publish(self) -> None:
        """Nothing to do: a committed batch is already visible."""

    def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def bm25(self, query: str, size: int) -> list[Candidate]:
        terms = tokenize(query)
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        rows = self._db.execute(
            "SELECT docs.id, docs.title, bm25(docs_fts, 2.0, 1.0) AS rank FROM docs_fts "
            "JOIN docs ON docs.rowid = docs_fts.rowid WHERE docs_fts MATCH ? ORDER BY rank, docs.id LIMIT ?",
            (match, size),
        ).fetchall()
        return [Candidate(doc_id, -rank, position, title) for position, (doc_id, title, rank) in enumerate(rows, start=1)]

    def close(self) -> None:
        self._db.close()
