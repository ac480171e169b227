"""The embedded store: documents and topics in SQLite, BM25 from a tantivy index beside it.

`<directory>/store.sqlite3` holds each document's text, metadata, topics (little-endian
float32 blobs) and Doc2Vec vector, so reranking N candidates is one `SELECT ... WHERE
rowid IN (...)` and N `frombuffer`s. `<directory>/text/` is the first stage
(`text_index.py`: Lucene's BM25 in tantivy).

The two are kept in agreement by one number in SQLite, the text index's watermark: the
text index holds exactly the rows with `rowid <= watermark`, and readers see only those.
A batch is written to SQLite first (one transaction; row ids only grow), then to the text
index, whose commit is followed by moving the watermark. A crash in between leaves rows
above the watermark that no reader sees and that the next `initialise` (every
`reranker index` run) adds to the text index before anything else; a hit on a row the
store has replaced since is dropped, since that row id no longer exists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from reranker.errors import IndexMismatchError, InputError, StoreError
from reranker.store import MAX_QUERY_TERMS, Doc2VecInfo, IndexInfo, LruCache, best_passage_bm25, bm25_of_texts
from reranker.store.text_index import TextIndex, TextTerms, stable_hashes, stem_words, term_hashes
from reranker.text import tokenize
from reranker.types import (
    Candidate,
    Centering,
    Document,
    DocVectorBatch,
    EmbeddingInfo,
    Filter,
    StoredDocument,
    TopicBatch,
    WriteFailure,
)

log = logging.getLogger(__name__)

# 3: BM25 from tantivy (1 and 2 used SQLite FTS5; 2 added Doc2Vec vectors).
SCHEMA_VERSION = "3"
_FLOAT32 = np.dtype("<f4")
# The text index commits after this many documents or seconds (and when the run ends):
# a commit per 64-document batch cost 20 % of the text index's throughput.
_COMMIT_DOCS = 2_000
_COMMIT_SECONDS = 10.0
_REBUILD_COMMAND = "reranker index --rebuild CORPUS"

# AUTOINCREMENT: a row id is never reused, so a text-index hit on a replaced version
# can never be taken for the new one.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
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
    doc_vector_model TEXT,
    corrected_k INTEGER,
    corrected_topics BLOB,
    corrected_importances BLOB,
    backgrounds BLOB,
    passage_terms BLOB
);
"""


# Memory for texts' terms kept for `text_bm25`: about 30 KB for a paper of 5,000 words,
# so some 1,000 papers.
TEXT_TERMS_CACHE_BYTES = 32 * 2**20


class EmbeddedStore:
    """A `Store` in `<directory>`: `store.sqlite3` and the text index `text/`.

    Safe to share between threads: each thread gets its own SQLite connection (a
    connection may not cross threads), and WAL mode lets readers run beside a writer.
    Several processes may read one store while one process (`reranker index`) writes.
    """

    def __init__(self, directory: Path, stopwords: frozenset[str] | None = None) -> None:
        self.directory = directory
        self._stopwords = stopwords
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # A store written before schema 3 kept BM25 in SQLite (FTS5) and reused row ids.
            tables = dict(self._db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
            self._legacy = "docs_fts" in tables or ("docs" in tables and "AUTOINCREMENT" not in tables["docs"])
            if not self._legacy:
                self._db.executescript(_SCHEMA)
                columns = {row[1] for row in self._db.execute("PRAGMA table_info(docs)")}
                if "passage_terms" not in columns:  # a store written before passages: they stay NULL
                    self._db.execute("ALTER TABLE docs ADD COLUMN passage_terms BLOB")
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the embedded store in {directory}: {exc}") from None
        self._text = TextIndex(directory / "text")
        # The text index's stemmed field takes stems: the write path's workers make them.
        self.word_stemmer: Callable[[Sequence[str]], list[str]] | None = stem_words
        # Writes this object made that the text index has not committed yet.
        self._pending_rowid = 0
        self._pending_docs = 0
        self._last_commit = time.monotonic()
        # Texts' terms for `text_bm25`, by content (see `_terms_of`).
        self._text_terms: LruCache[bytes, TextTerms] = LruCache(TEXT_TERMS_CACHE_BYTES, lambda terms: terms.nbytes)

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

    def _state(self) -> tuple[IndexInfo | None, int]:
        """(what the index was built with, the text index's watermark).

        Every query asks for it, so it is cached per connection, and read again only
        when another connection (another thread, or `reranker index` / `reranker train
        doc2vec` in another process) has committed since: SQLite's data_version says so.
        This connection's own writes clear the cache (`_forget_info`).
        """
        if self._legacy:
            raise IndexMismatchError(
                f"the index in {self.directory} was built by an older version (BM25 in SQLite "
                f"FTS5); rebuild it: {_REBUILD_COMMAND}"
            )
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        cached: tuple[int, IndexInfo | None, int] | None = getattr(self._local, "info", None)
        if cached is not None and cached[0] == version:
            return cached[1], cached[2]
        meta = self._meta()
        info = None
        if "embedding" in meta:
            embedding = EmbeddingInfo(**json.loads(meta["embedding"]))
            doc2vec = Doc2VecInfo.from_json(json.loads(meta["doc2vec"])) if "doc2vec" in meta else None
            centering = Centering.from_json(json.loads(meta["centering"])) if "centering" in meta else None
            info = IndexInfo(embedding=embedding, k=int(meta["k"]), doc2vec=doc2vec, centering=centering)
        watermark = int(meta.get("text_rowid", "0"))
        # The watermark moves only after a text-index commit: see that commit too.
        self._text.reload()
        self._local.info = (version, info, watermark)
        return info, watermark

    def index_info(self) -> IndexInfo | None:
        return self._state()[0]

    def _visible(self) -> int:
        """The watermark readers go by: rows above it are not in the text index yet."""
        self._commit_pending()
        return self._state()[1]

    def _forget_info(self) -> None:
        self._local.info = None

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        self._forget_info()
        if self._legacy and rebuild:
            self._drop_legacy_tables()
        # Taking the text index's writer first makes this process the only writer.
        if rebuild:
            self._text.delete_all()
        else:
            self._text.open_writer()
        try:
            with self._transaction():
                if rebuild:
                    self._db.execute("DELETE FROM docs")
                    self._db.execute("DELETE FROM meta")
                    self._forget_info()
                current = self.index_info()
                if current is not None and self._stored_count() > 0:
                    current.check(info.embedding, info.k)
                else:
                    values = {
                        "schema_version": SCHEMA_VERSION,
                        "embedding": json.dumps(info.embedding.__dict__),
                        "k": str(info.k),
                    }
                    self._db.executemany(
                        "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items()
                    )
                    # A new (empty) index has no Doc2Vec model yet, and the centering given.
                    self._db.execute("DELETE FROM meta WHERE key IN ('doc2vec', 'centering')")
                    if info.centering is not None:
                        self._db.execute(
                            "INSERT INTO meta(key, value) VALUES ('centering', ?)", (json.dumps(info.centering.to_json()),)
                        )
        except BaseException:
            self._text.rollback()
            raise
        finally:
            self._forget_info()
        self._repair_text_index()

    def _drop_legacy_tables(self) -> None:
        try:
            with self._transaction():
                for table in ("docs_fts", "docs", "meta"):
                    self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot rebuild the embedded store in {self.directory}: {exc}") from None
        self._legacy = False

    def _repair_text_index(self) -> None:
        """Bring the text index in line with SQLite after an interrupted write.

        Rows above the watermark (written to SQLite, not yet to the text index) are added;
        if the counts still differ (a rebuild interrupted between the two), the text
        index is rebuilt from SQLite.
        """
        watermark = int(self._meta().get("text_rowid", "0"))
        pending = self._db.execute("SELECT count(*) FROM docs WHERE rowid > ?", (watermark,)).fetchone()[0]
        if pending:
            log.warning("adding %d documents of an interrupted run to the text index", pending)
            self._add_to_text_index(watermark)
        self._text.commit()
        stored = self._stored_count()
        if self._text.num_docs() != stored:
            log.warning(
                "the text index holds %d documents and the store %d; rebuilding the text index",
                self._text.num_docs(), stored,
            )
            self._text.delete_all()
            self._add_to_text_index(0)

    def _add_to_text_index(self, above: int) -> None:
        rows = self._db.execute("SELECT rowid, id, title, body FROM docs WHERE rowid > ? ORDER BY rowid", (above,))
        for rowid, doc_id, title, body in rows:
            self._text.replace([(rowid, doc_id, *self._words(Document(doc_id, title, body)))])
            self._pending_rowid = max(self._pending_rowid, rowid)
            self._pending_docs += 1
        self._commit_text()

    def _words(self, document: Document) -> tuple[str, str]:
        """The content words the text index holds for `document` and their stems, each
        joined by spaces."""
        words = tokenize(document.full_text, self._stopwords)
        return " ".join(words), " ".join(stem_words(words))

    # --- the write path -------------------------------------------------------------

    def upsert(self, documents: Sequence[StoredDocument]) -> list[WriteFailure]:
        info = self.index_info()
        if info is None:
            raise StoreError("the store is not initialised: call initialise() first")
        self._text.open_writer()
        rows: list[tuple[int, str, str, str]] = []
        with self._transaction():
            for stored in documents:
                if stored.doc_topics.topics.shape[1:] != (info.embedding.dim,):
                    raise IndexMismatchError(
                        f"document {stored.document.id!r} has topics of shape "
                        f"{stored.doc_topics.topics.shape}, the index holds d={info.embedding.dim}"
                    )
                self._db.execute("DELETE FROM docs WHERE id = ?", (stored.document.id,))
                words, stems = stored.content_words, stored.stemmed_words
                if words is None:
                    words, stems = self._words(stored.document)
                elif stems is None:
                    stems = " ".join(stem_words(words.split()))
                rowid = self._insert(stored, stable_hashes(stems.split()).tobytes())
                rows.append((rowid, stored.document.id, words, stems))
        self._text.replace(rows)
        self._pending_rowid = max([self._pending_rowid, *(rowid for rowid, _, _, _ in rows)])
        self._pending_docs += len(rows)
        if self._pending_docs >= _COMMIT_DOCS or time.monotonic() - self._last_commit >= _COMMIT_SECONDS:
            self._commit_text()
        return []

    def _commit_pending(self) -> None:
        """Readers of this object see its own writes (others see them at the next commit)."""
        if self._pending_docs:
            self._commit_text()

    def _commit_text(self) -> None:
        """Commit the text index, then move the watermark over what it now holds."""
        self._text.commit()
        if self._pending_rowid:
            try:
                with self._transaction():
                    self._db.execute(
                        "INSERT OR REPLACE INTO meta(key, value) VALUES ('text_rowid', ?)",
                        (str(self._pending_rowid),),
                    )
            finally:
                self._forget_info()
        self._pending_docs = 0
        self._last_commit = time.monotonic()

    def publish(self) -> None:
        """Commit what this run wrote and release the text index's writer."""
        self._commit_pending()
        self._text.close_writer()

    def _insert(self, stored: StoredDocument, passages: bytes) -> int:
        doc, topics, corrected = stored.document, stored.doc_topics, stored.corrected
        cursor = self._db.execute(
            "INSERT INTO docs(id, title, body, fields, content_hash, n_tokens, n_oov, k, topics, importances, "
            "corrected_k, corrected_topics, corrected_importances, backgrounds, passage_terms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                doc.id,
                doc.title,
                doc.text,
                json.dumps(doc.fields, ensure_ascii=False),
                stored.content_hash,
                stored.n_tokens,
                stored.n_oov,
                topics.k,
                _blob(topics.topics),
                _blob(topics.importances),
                None if corrected is None else int(corrected.importances.shape[0]),
                None if corrected is None else _blob(corrected.topics),
                None if corrected is None else _blob(corrected.importances),
                None if corrected is None else _blob(corrected.backgrounds),
                passages,
            ),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

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
        """Documents readers can find (those the text index holds)."""
        watermark = self._visible()
        return int(self._db.execute("SELECT count(*) FROM docs WHERE rowid <= ?", (watermark,)).fetchone()[0])

    def _stored_count(self) -> int:
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

    def passage_bm25(self, query: str, doc_ids: Sequence[str], texts: Sequence[str | None]) -> list[float] | None:
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        documents, _ = self._length_statistics()
        if not documents or not terms:
            return None
        unread = [doc_id for doc_id, text in zip(doc_ids, texts) if text is None]
        stored: dict[str, bytes | None] = {}
        watermark = self._visible()
        try:
            for start in range(0, len(unread), 500):
                chunk = unread[start : start + 500]
                marks = ",".join("?" * len(chunk))
                stored.update(self._db.execute(
                    f"SELECT id, passage_terms FROM docs WHERE rowid <= ? AND id IN ({marks})", (watermark, *chunk)
                ).fetchall())
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read passages: {exc}") from None
        if any(stored.get(doc_id, b"") is None for doc_id in unread):
            return None  # indexed before passages were kept: `reranker index --rebuild`
        sequences = [
            self._terms_of(text).passages if text is not None else np.frombuffer(stored.get(doc_id) or b"", dtype=np.int32)
            for doc_id, text in zip(doc_ids, texts)
        ]
        # The stemmed field's BM25 (the exact field's too added 0.002 nDCG@10 on CL-SciSumm
        # and doubled the cost).
        found = Counter(self._text.analysed(terms)["stemmed"])
        distinct = list(found)
        freqs = self._text.doc_freqs("stemmed", distinct)
        scores = best_passage_bm25(sequences, stable_hashes(distinct), [found[t] for t in distinct], [freqs[t] for t in distinct], documents)
        return [float(score) for score in scores]

    def doc_freqs(self, words: Sequence[str]) -> tuple[int, dict[str, int]] | None:
        documents, _ = self._length_statistics()
        return (documents, self._text.doc_freqs("exact", words)) if documents else None

    def text_bm25(self, query: str, texts: Sequence[str]) -> list[float] | None:
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        documents, average = self._length_statistics()
        if not documents or not terms:
            return None
        asked = self._text.analysed(terms)
        sent = [self._terms_of(text) for text in texts]
        lengths = np.fromiter((terms.length for terms in sent), dtype=np.float64, count=len(sent))
        # The text index searches each field and adds the scores: so do these.
        scores = np.zeros(len(texts), dtype=np.float64)
        for field, terms in asked.items():
            counts = Counter(terms)
            distinct = list(counts)
            doc_freqs = self._text.doc_freqs(field, distinct)
            hashes = term_hashes(distinct)
            frequencies = np.stack([found.frequencies(field, hashes) for found in sent]) if sent else np.zeros((0, len(distinct)))
            scores += bm25_of_texts(
                [counts[t] for t in distinct], [doc_freqs[t] for t in distinct], documents, average, frequencies, lengths
            )
        return [float(score) for score in scores]

    def _length_statistics(self) -> tuple[int, float]:
        """(documents, their mean length in terms) of what readers see, read again only
        when that changes (a sum over every row costs milliseconds at 50,000 documents)."""
        watermark = self._visible()
        cached = getattr(self._local, "lengths", None)
        if cached is not None and cached[0] == watermark:
            return cached[1], cached[2]
        try:
            count, total = self._db.execute(
                "SELECT COUNT(*), TOTAL(n_tokens + n_oov) FROM docs WHERE rowid <= ?", (watermark,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read term statistics: {exc}") from None
        average = float(total) / count if count else 0.0
        self._local.lengths = (watermark, int(count), average)
        return int(count), average

    def _terms_of(self, text: str) -> TextTerms:
        """A text's terms, remembered by content: callers send the same texts again and
        again, and tokenizing a long one costs a few milliseconds."""
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        found = self._text_terms.get(key)
        if found is None:
            found = TextIndex.text_terms(tokenize(text, self._stopwords))
            self._text_terms.put(key, found)
        return found

    def bm25(self, query: str, size: int, filters: Sequence[Filter] = ()) -> list[Candidate]:
        # Repeated query words stay repeated: the text index weighs a word by its count
        # in the query. Only the first MAX_QUERY_TERMS count, as in the OpenSearch store.
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        if not terms or size < 1:
            return []
        self._check_filter_fields(filters)
        watermark = self._visible()
        allowed: list[int] | None = None
        if filters:
            where, params = _filter_sql(filters)
            try:
                allowed = [row[0] for row in self._db.execute(
                    f"SELECT rowid FROM docs WHERE rowid <= ?{where}", (watermark, *params)
                )]
            except sqlite3.Error as exc:
                raise StoreError(f"BM25 search failed: {exc}") from None
        # A hit on a row replaced since the text index's last commit has no row any
        # more: ask for more until `size` live hits are found or the index runs out.
        wanted = size
        while True:
            hits = self._text.search(terms, wanted, allowed)
            rows = self._rows([rowid for rowid, _ in hits], watermark)
            live = [(score, rows[rowid]) for rowid, score in hits if rowid in rows]
            if len(live) >= size or len(hits) < wanted:
                break
            wanted *= 2
        live.sort(key=lambda hit: (-hit[0], hit[1][0]))
        return [
            Candidate(doc_id=doc_id, bm25_score=score, bm25_rank=position, title=title)
            for position, (score, (doc_id, title)) in enumerate(live[:size], start=1)
        ]

    def _rows(self, rowids: Sequence[int], watermark: int) -> dict[int, tuple[str, str]]:
        """rowid -> (id, title) of those `rowids` readers may see."""
        found: dict[int, tuple[str, str]] = {}
        for start in range(0, len(rowids), 500):
            chunk = rowids[start : start + 500]
            rows = self._db.execute(
                f"SELECT rowid, id, title FROM docs WHERE rowid IN ({_marks(chunk)}) AND rowid <= ?",
                (*chunk, watermark),
            )
            found.update((rowid, (doc_id, title)) for rowid, doc_id, title in rows)
        return found

    def topics(self, doc_ids: Sequence[str], corrected: bool = False) -> TopicBatch:
        info = self.index_info()
        dim = info.embedding.dim if info else 0
        watermark = self._visible()
        columns = "corrected_k, corrected_topics, corrected_importances, backgrounds" if corrected else "k, topics, importances, NULL"
        stored: dict[str, tuple[int, bytes, bytes, bytes | None]] = {}
        for chunk in _chunks(doc_ids):
            rows = self._db.execute(
                f"SELECT id, {columns} FROM docs WHERE id IN ({_marks(chunk)}) AND rowid <= ? "
                f"AND {'corrected_k' if corrected else 'k'} IS NOT NULL",
                (*chunk, watermark),
            )
            stored.update((row[0], row[1:]) for row in rows)
        k_max = max((k for k, _, _, _ in stored.values()), default=0)
        topics = np.zeros((len(doc_ids), k_max, dim), dtype=np.float32)
        importances = np.zeros((len(doc_ids), k_max), dtype=np.float32)
        backgrounds = np.zeros((len(doc_ids), k_max), dtype=np.float32) if corrected else None
        for row, doc_id in enumerate(doc_ids):
            if doc_id not in stored:
                continue
            k, topic_bytes, importance_bytes, background_bytes = stored[doc_id]
            topics[row, :k] = np.frombuffer(topic_bytes, dtype=_FLOAT32).reshape(k, dim)
            importances[row, :k] = np.frombuffer(importance_bytes, dtype=_FLOAT32)
            if backgrounds is not None and background_bytes is not None:
                backgrounds[row, :k] = np.frombuffer(background_bytes, dtype=_FLOAT32)
        missing = tuple(doc_id for doc_id in doc_ids if doc_id not in stored)
        return TopicBatch(tuple(doc_ids), topics, importances, missing, backgrounds)

    def doc_vectors(self, doc_ids: Sequence[str]) -> DocVectorBatch:
        info = self.index_info()
        model = info.doc2vec if info is not None else None
        dim = model.dim if model is not None else 0
        vectors = np.zeros((len(doc_ids), dim), dtype=np.float32)
        if model is None:
            return DocVectorBatch(tuple(doc_ids), vectors, missing=tuple(doc_ids))
        watermark = self._visible()
        stored: dict[str, bytes] = {}
        for chunk in _chunks(doc_ids):
            # Vectors of an earlier model (documents missing from the last training
            # corpus) are not comparable with this model's: they count as missing.
            rows = self._db.execute(
                f"SELECT id, doc_vector FROM docs WHERE id IN ({_marks(chunk)}) "
                "AND doc_vector_model = ? AND length(doc_vector) = ? AND rowid <= ?",
                (*chunk, model.checksum, dim * _FLOAT32.itemsize, watermark),
            )
            stored.update(rows.fetchall())
        for row, doc_id in enumerate(doc_ids):
            blob = stored.get(doc_id)
            if blob is not None:
                vectors[row] = np.frombuffer(blob, dtype=_FLOAT32)
        missing = tuple(doc_id for doc_id in doc_ids if doc_id not in stored)
        return DocVectorBatch(tuple(doc_ids), vectors, missing=missing, model=model.checksum)

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        watermark = self._visible()
        found: dict[str, Document] = {}
        for chunk in _chunks(doc_ids):
            rows = self._db.execute(
                f"SELECT id, title, body, fields FROM docs WHERE id IN ({_marks(chunk)}) AND rowid <= ?",
                (*chunk, watermark),
            )
            for doc_id, title, body, fields in rows:
                found[doc_id] = Document(doc_id, title, body, json.loads(fields))
        return found

    def close(self) -> None:
        self.publish()
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


def _blob(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=_FLOAT32).tobytes()


def _chunks(items: Sequence[str], size: int = 500) -> list[list[str]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def _marks(chunk: Sequence[object]) -> str:
    return ",".join("?" * len(chunk))
