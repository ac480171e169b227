"""The embedded store: one SQLite file, BM25 from SQLite's FTS5 extension.

FTS5 is SQLite's maintained full-text engine; its `bm25()` ranks with k1 = 1.2 and
b = 0.75, and the `porter unicode61` tokenizer lower-cases and stems like an English
analyzer. Topic matrices are stored as little-endian float32 blobs next to the text,
so reranking N candidates is one `SELECT ... WHERE id IN (...)` and N `frombuffer`s.
A document's Doc2Vec vector (once `reranker train doc2vec` ran) is one more blob, with
the checksum of the model that produced it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

import numpy as np

from reranker.errors import IndexMismatchError, InputError, StoreError
from reranker.store import Doc2VecInfo, IndexInfo
from reranker.text import tokenize
from reranker.types import (
    Candidate,
    DocVectorBatch,
    Document,
    EmbeddingInfo,
    Filter,
    StoredDocument,
    TopicBatch,
    WriteFailure,
)

SCHEMA_VERSION = "2"  # 2: Doc2Vec vectors (doc_vector, doc_vector_model)
_FLOAT32 = np.dtype("<f4")
# Field weights for bm25(): title, body.
_BM25_WEIGHTS = (2.0, 1.0)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    fields TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    n_tokens INTEGER NOT NULL,
    n_oov INTEGER NOT NULL,
    k INTEGER NOT NULL,
    topics BLOB NOT NULL,
    importances BLOB NOT NULL,
    doc_vector BLOB,
    doc_vector_model TEXT
);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
    title, body, content='docs', content_rowid='rowid',
    tokenize='porter unicode61 remove_diacritics 2'
);
"""
# Columns added after schema 1, for stores created before them: (name, type).
_ADDED_COLUMNS = (("doc_vector", "BLOB"), ("doc_vector_model", "TEXT"))


class EmbeddedStore:
    """A `Store` in `<directory>/store.sqlite3`.

    Safe to share between threads: each thread gets its own SQLite connection (a
    connection may not cross threads), and WAL mode lets readers run beside a writer.
    """

    def __init__(self, directory: Path, stopwords: frozenset[str] | None = None) -> None:
        self.directory = directory
        self._stopwords = stopwords
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the embedded store in {directory}: {exc}") from None
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns a store created by an older version lacks (in place, once)."""
        def missing() -> list[tuple[str, str]]:
            present = {row[1] for row in self._db.execute("PRAGMA table_info(docs)")}
            return [(name, kind) for name, kind in _ADDED_COLUMNS if name not in present]

        if not missing():
            return
        with self._transaction():
            # Checked again under the write lock: another process may have migrated.
            for name, kind in missing():
                self._db.execute(f"ALTER TABLE docs ADD COLUMN {name} {kind}")

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.directory / "store.sqlite3", isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the embedded store in {self.directory}: {exc}") from None
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    # --- index metadata -------------------------------------------------------------

    def _meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def index_info(self) -> IndexInfo | None:
        # Every query asks for it, so it is cached per connection, and read again only
        # when another connection (another thread, or `reranker train doc2vec` in another
        # process) has committed since: SQLite's data_version says so. This connection's
        # own writes clear the cache (`_forget_info`).
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        cached: tuple[int, IndexInfo | None] | None = getattr(self._local, "info", None)
        if cached is not None and cached[0] == version:
            return cached[1]
        meta = self._meta()
        info = None
        if "embedding" in meta:
            embedding = EmbeddingInfo(**json.loads(meta["embedding"]))
            doc2vec = Doc2VecInfo.from_json(json.loads(meta["doc2vec"])) if "doc2vec" in meta else None
            info = IndexInfo(embedding=embedding, k=int(meta["k"]), doc2vec=doc2vec)
        self._local.info = (version, info)
        return info

    def _forget_info(self) -> None:
        self._local.info = None

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        self._forget_info()
        try:
            with self._transaction():
                if rebuild:
                    self._db.execute("DELETE FROM docs")
                    self._db.execute("INSERT INTO docs_fts(docs_fts) VALUES('delete-all')")
                    self._db.execute("DELETE FROM meta")
                    self._forget_info()
                current = self.index_info()
                if current is not None and self.count() > 0:
                    current.check(info.embedding, info.k)
                    return
                values = {
                    "schema_version": SCHEMA_VERSION,
                    "embedding": json.dumps(info.embedding.__dict__),
                    "k": str(info.k),
                }
                self._db.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items()
                )
                # A new (empty) index has no Doc2Vec model yet.
                self._db.execute("DELETE FROM meta WHERE key = 'doc2vec'")
        finally:
            self._forget_info()

    # --- the write path -------------------------------------------------------------

    def upsert(self, documents: Sequence[StoredDocument]) -> list[WriteFailure]:
        info = self.index_info()
        if info is None:
            raise StoreError("the store is not initialised: call initialise() first")
        with self._transaction():
            for stored in documents:
                if stored.doc_topics.topics.shape[1:] != (info.embedding.dim,):
                    raise IndexMismatchError(
                        f"document {stored.document.id!r} has topics of shape "
                        f"{stored.doc_topics.topics.shape}, the index holds d={info.embedding.dim}"
                    )
                self._delete(stored.document.id)
                self._insert(stored)
        return []

    def publish(self) -> None:
        """Nothing to do: a committed batch is already visible."""

    def _delete(self, doc_id: str) -> None:
        row = self._db.execute(
            "SELECT rowid, title, body FROM docs WHERE id = ?", (doc_id,)
        ).fetchone()
        if row is None:
            return
        # An external-content FTS5 table forgets a row only when told its old values.
        self._db.execute(
            "INSERT INTO docs_fts(docs_fts, rowid, title, body) VALUES('delete', ?, ?, ?)", row
        )
        self._db.execute("DELETE FROM docs WHERE rowid = ?", (row[0],))

    def _insert(self, stored: StoredDocument) -> None:
        doc, topics = stored.document, stored.doc_topics
        cursor = self._db.execute(
            "INSERT INTO docs(id, title, body, fields, content_hash, n_tokens, n_oov, k, "
            "topics, importances) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                doc.id,
                doc.title,
                doc.text,
                json.dumps(doc.fields, ensure_ascii=False),
                stored.content_hash,
                stored.n_tokens,
                stored.n_oov,
                topics.k,
                np.ascontiguousarray(topics.topics, dtype=_FLOAT32).tobytes(),
                np.ascontiguousarray(topics.importances, dtype=_FLOAT32).tobytes(),
            ),
        )
        self._db.execute(
            "INSERT INTO docs_fts(rowid, title, body) VALUES (?, ?, ?)",
            (cursor.lastrowid, doc.title, doc.text),
        )

    def store_doc_vectors(self, info: Doc2VecInfo, vectors: Mapping[str, np.ndarray]) -> list[WriteFailure]:
        if self.index_info() is None:
            raise StoreError("the store is not initialised: index a corpus first")
        failures: list[WriteFailure] = []
        try:
            with self._transaction():
                for doc_id, vector in vectors.items():
                    if vector.shape != (info.dim,):
                        failures.append(WriteFailure(doc_id, f"vector of shape {vector.shape}, the model has dim={info.dim}"))
                        continue
                    blob = np.ascontiguousarray(vector, dtype=_FLOAT32).tobytes()
                    cursor = self._db.execute(
                        "UPDATE docs SET doc_vector = ?, doc_vector_model = ? WHERE id = ?",
                        (blob, info.checksum, doc_id),
                    )
                    if cursor.rowcount == 0:
                        failures.append(WriteFailure(doc_id, "not in the index"))
                self._db.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('doc2vec', ?)",
                    (json.dumps(info.to_json()),),
                )
        finally:
            self._forget_info()
        return failures

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for chunk in _chunks(doc_ids):
            rows = self._db.execute(
                f"SELECT id, content_hash FROM docs WHERE id IN ({_marks(chunk)})", chunk
            )
            found.update(rows.fetchall())
        return found

    def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM docs").fetchone()[0])

    # --- the read path --------------------------------------------------------------

    def _check_filter_fields(self, filters: Sequence[Filter]) -> None:
        """InputError naming the filterable fields when no document has a filtered field.

        Without this a typo would quietly filter out everything. The field list is read
        only on that error path (it scans the corpus).
        """
        for item in filters:
            if item.field == "title":
                continue
            path = '$."' + item.field.replace('"', '""') + '"'
            if self._db.execute("SELECT 1 FROM docs WHERE json_type(fields, ?) IS NOT NULL LIMIT 1", (path,)).fetchone() is None:
                rows = self._db.execute("SELECT DISTINCT key FROM docs, json_each(docs.fields)").fetchall()
                known = sorted({"title", *(row[0] for row in rows)})
                raise InputError(f"cannot filter on {item.field!r}; filterable fields: {', '.join(known)}")

    def bm25(self, query: str, size: int, filters: Sequence[Filter] = ()) -> list[Candidate]:
        # Repeated query words stay repeated: FTS5 then weighs them more, like a query
        # term frequency (nDCG@10 0.692 -> 0.709 on CL-SciSumm's summaries, measured).
        terms = tokenize(query, self._stopwords)
        if not terms or size < 1:
            return []
        # Quoted terms: FTS5 treats them as plain tokens whatever characters they hold.
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        self._check_filter_fields(filters)
        where, params = _filter_sql(filters)
        try:
            rows = self._db.execute(
                "SELECT docs.id, docs.title, bm25(docs_fts, ?, ?) AS rank "
                "FROM docs_fts JOIN docs ON docs.rowid = docs_fts.rowid "
                f"WHERE docs_fts MATCH ?{where} ORDER BY rank, docs.id LIMIT ?",
                (*_BM25_WEIGHTS, match, *params, size),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"BM25 search failed: {exc}") from None
        # FTS5's bm25() is negated so that smaller is better.
        return [
            Candidate(doc_id=doc_id, bm25_score=-rank, bm25_rank=position, title=title)
            for position, (doc_id, title, rank) in enumerate(rows, start=1)
        ]

    def topics(self, doc_ids: Sequence[str]) -> TopicBatch:
        info = self.index_info()
        dim = info.embedding.dim if info else 0
        stored: dict[str, tuple[int, bytes, bytes]] = {}
        for chunk in _chunks(doc_ids):
            rows = self._db.execute(
                f"SELECT id, k, topics, importances FROM docs WHERE id IN ({_marks(chunk)})",
                chunk,
            )
            stored.update((row[0], row[1:]) for row in rows)
        k_max = max((k for k, _, _ in stored.values()), default=0)
        topics = np.zeros((len(doc_ids), k_max, dim), dtype=np.float32)
        importances = np.zeros((len(doc_ids), k_max), dtype=np.float32)
        for row, doc_id in enumerate(doc_ids):
            if doc_id not in stored:
                continue
            k, topic_bytes, importance_bytes = stored[doc_id]
            topics[row, :k] = np.frombuffer(topic_bytes, dtype=_FLOAT32).reshape(k, dim)
            importances[row, :k] = np.frombuffer(importance_bytes, dtype=_FLOAT32)
        missing = tuple(doc_id for doc_id in doc_ids if doc_id not in stored)
        return TopicBatch(doc_ids=tuple(doc_ids), topics=topics, importances=importances, missing=missing)

    def doc_vectors(self, doc_ids: Sequence[str]) -> DocVectorBatch:
        info = self.index_info()
        model = info.doc2vec if info is not None else None
        dim = model.dim if model is not None else 0
        vectors = np.zeros((len(doc_ids), dim), dtype=np.float32)
        if model is None:
            return DocVectorBatch(tuple(doc_ids), vectors, missing=tuple(doc_ids))
        stored: dict[str, bytes] = {}
        for chunk in _chunks(doc_ids):
            # Vectors of an earlier model (documents missing from the last training
            # corpus) are not comparable with this model's: they count as missing.
            rows = self._db.execute(
                f"SELECT id, doc_vector FROM docs WHERE id IN ({_marks(chunk)}) "
                "AND doc_vector_model = ? AND length(doc_vector) = ?",
                (*chunk, model.checksum, dim * _FLOAT32.itemsize),
            )
            stored.update(rows.fetchall())
        for row, doc_id in enumerate(doc_ids):
            blob = stored.get(doc_id)
            if blob is not None:
                vectors[row] = np.frombuffer(blob, dtype=_FLOAT32)
        missing = tuple(doc_id for doc_id in doc_ids if doc_id not in stored)
        return DocVectorBatch(tuple(doc_ids), vectors, missing=missing, model=model.checksum)

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        found: dict[str, Document] = {}
        for chunk in _chunks(doc_ids):
            rows = self._db.execute(
                f"SELECT id, title, body, fields FROM docs WHERE id IN ({_marks(chunk)})", chunk
            )
            for doc_id, title, body, fields in rows:
                found[doc_id] = Document(doc_id, title, body, json.loads(fields))
        return found

    def close(self) -> None:
        # check_same_thread=False only so that close() may reach every thread's connection.
        with self._lock:
            for db in self._connections:
                db.close()
            self._connections.clear()
        self._local = threading.local()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK: a batch lands whole or not at all."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to the embedded store: {exc}") from None
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as exc:
            self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot write to the embedded store: {exc}") from None
            raise


_SQL_OPS = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _filter_sql(filters: Sequence[Filter]) -> tuple[str, list[object]]:
    """" AND ..." conditions on the title or a metadata field (from the JSON `fields`)."""
    where, params = "", list[object]()
    for item in filters:
        column = "docs.title" if item.field == "title" else "json_extract(docs.fields, ?)"
        if item.field != "title":
            params.append('$."' + item.field.replace('"', '""') + '"')
        where += f" AND {column} {_SQL_OPS[item.op]} ?"
        params.append(item.value)
    return where, params


def _chunks(items: Sequence[str], size: int = 500) -> list[list[str]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def _marks(chunk: Sequence[str]) -> str:
    return ",".join("?" * len(chunk))
