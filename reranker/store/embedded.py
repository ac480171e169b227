"""The embedded store: documents and topics in SQLite, BM25 from a tantivy index beside it.

`<directory>/store.sqlite3` holds each document's text, metadata, topics (little-endian
float32 blobs) and Doc2Vec vector, so reranking N candidates is one `SELECT ... WHERE
id IN (...)` and N `frombuffer`s. `<directory>/text/` is the first stage
(`text_index.py`: Lucene's BM25 in tantivy), one entry per document under the row id the
document has in SQLite.

**What readers see.** One number in SQLite, the watermark (`meta.text_rowid`): the text
index holds every row up to it, and readers see only those rows, never more than one per
document. Each read runs in one SQLite read transaction (a snapshot) that reloads the
text index when the snapshot is new, so the text index holds at least what the snapshot
shows; BM25, topics, texts and `count` agree on which documents exist and which version
each one is.

**Writing.** A batch is one transaction in SQLite, its rows above the watermark (row ids
only grow); a replaced document's visible row stays. The text index replaces the
document's entry, still under the visible row's id, and commits every `_COMMIT_DOCS`
documents or `_COMMIT_SECONDS`; then one transaction moves the watermark over the new
rows, deletes the rows they replace and gives each new version its predecessor's row id.
So a document keeps its row id from version to version, and a search that runs while it
is replaced finds it once: under the old version before that transaction (whether the
text index's commit is already seen or not), under the new one after it. (Between the
two, a search matches the new words and shows the old version.)

**Rebuilding** (`initialise(rebuild=True)`) builds beside the index that readers see:
the new rows sit above the watermark, which stays put, with the new index's settings in
`meta.build`, and their text-index entries under their own row ids. `publish()` commits
those entries, then swaps in one transaction (the old rows deleted, the watermark moved
over the new ones, the settings replaced), and last, once no read that began before
the swap is still running, drops the old rows' text-index entries (`meta.text_purge`
until it has). The disk holds both indexes until then.

**Crashes.** Each step is one SQLite transaction or one text-index commit, and the next
`initialise` (every `reranker index` run) completes what a killed run left: the purge;
rows above the watermark, added to the text index and made visible; a rebuild, resumed
by the next `--rebuild` with the same vectors, K and stop list (what it wrote is kept and
skipped, but for documents that run's corpus no longer holds: `drop_absent`) and dropped by a
run without `--rebuild`. Until then readers see the index as it
was. Completing reads rows again with the run's stop list: a run with another list than
the index's (`meta.stopwords`) is refused first, or with `--rebuild` leaves them (and any
entries they committed) to the index it replaces: the rebuild's floor is above them, and a
run with the index's list that drops the rebuild completes them (`_recover`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import re
import sqlite3
import threading
import time
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import numpy.typing as npt

from reranker.errors import IndexMismatchError, IndexNotFoundError, InputError, StoreError, UnknownFieldError
from reranker.store import (
    MAX_QUERY_TERMS,
    CompactResult,
    Doc2VecInfo,
    IndexInfo,
    ReadWords,
    check_stop_list,
    filter_for_field,
    filter_shown,
)
from reranker.store.bm25 import (
    PASSAGE_STRIDE,
    PASSAGE_TERMS,
    PassageQuery,
    StoredWords,
    best_passage_bm25,
    bm25_of_stored,
    bm25_of_texts,
    passage_query,
    window_passage_bm25,
)
from reranker.store.text_index import (
    COMPACT_HEAP_BYTES,
    NEARLY_FULL,
    SentTexts,
    TextIndex,
    free_bytes,
    full_disk,
    passage_words,
    stable_hashes,
    stem_words,
    term_hashes,
)
from reranker.text import stop_list_info, tokenize
from reranker.types import (
    Candidate,
    Centering,
    Document,
    DocVectorBatch,
    EmbeddingInfo,
    Filter,
    PassageWords,
    StopListInfo,
    StoredDocument,
    TopicBatch,
    WriteFailure,
)

log = logging.getLogger(__name__)

# 3: BM25 from tantivy (1 and 2 used SQLite FTS5; 2 added Doc2Vec vectors). 4: an id may
# have two rows while a new version waits to be seen; `initialise` upgrades a store of 3.
SCHEMA_VERSION = "4"
_FLOAT32 = np.dtype("<f4")
# The text index commits after this many documents or seconds (and when the run ends):
# a commit per 64-document batch cost 20 % of the text index's throughput.
_COMMIT_DOCS = 2_000
_COMMIT_SECONDS = 10.0
_REBUILD_COMMAND = "reranker index --rebuild CORPUS"
_MMAP_BYTES = 2_147_418_112  # SQLITE_MAX_MMAP_SIZE's default: larger values are cut to it
_NO_ROW = 2**63 - 1
# How long a rebuild's swap waits for reads that began before it (see `_purge_text`).
_OLDER_READS_SECONDS = 60

_DOC_COLUMNS = (
    "id, title, body, fields, content_hash, n_tokens, n_oov, k, topics, importances, doc_vector, "
    "doc_vector_model, corrected_k, corrected_topics, corrected_importances, backgrounds"
)
# AUTOINCREMENT: a row id is never given to another document.
_DOCS = """
CREATE TABLE {name} (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
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
    backgrounds BLOB
)
"""
_DOCS_INDEXES = "CREATE INDEX IF NOT EXISTS docs_id ON docs(id);"
# The lengths BM25 averages (`_statistics`) without reading the rows: n_tokens and n_oov
# come after the text in a row, so summing them from the table walks every text's overflow
# pages, 2 GB and 0.5-3 s at 50,000 papers, against 14 ms through this index. A writer adds
# it to a store made before it (`initialise`).
_LENGTHS_INDEX = "CREATE INDEX IF NOT EXISTS docs_lengths ON docs(n_tokens, n_oov)"
_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
# Each document's words for its best passages (`WordPositions.to_bytes`), under its row's
# rowid, in a table of their own: a window's 100 read in 0.5 ms, against 0.8 ms as the
# last column of `docs`, whose rows' other columns (30 KB of text) SQLite walks past
# (50,000 papers, pages in memory). The trigger keeps them to the rows every delete of
# `docs` leaves (dropping `docs` drops it: `_upgrade_schema` makes it again);
# `_move_watermark` moves them with their rows.
_PASSAGES_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS docs_passages AFTER DELETE ON docs BEGIN DELETE FROM passages WHERE rowid = OLD.rowid; END"
)
_PASSAGES = f"CREATE TABLE IF NOT EXISTS passages (rowid INTEGER PRIMARY KEY, positions BLOB NOT NULL);{_PASSAGES_TRIGGER};"
# The stem of every word a document's passages hold (hashed as `stable_hashes`): a query's
# stems name the words that count for them in the stemmed field. It only grows: a word no
# document holds any more costs a row and changes no score.
_VOCABULARY = (
    "CREATE TABLE IF NOT EXISTS passage_vocabulary (word INTEGER PRIMARY KEY, stem INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS passage_vocabulary_stem ON passage_vocabulary(stem);"
    + _PASSAGES
)
_T = TypeVar("_T")
# The fewest hits the first stage fetches when it searches without a query's commonest
# terms (`EmbeddedStore.bm25`): a window's worth, whatever a caller asks for, so that a short
# page is taken from a window's worth scored whole.
SHORT_SEARCH_HITS = 100
# What the short search costs beyond the whole one, in postings tantivy visits (which it
# saves): a fixed cost per search (reading the window's stored words from SQLite, the
# query's stems and terms over them: about 1-3 ms) and a cost per word of the window's
# estimate (hits x the index's mean length) for reading and scoring its stored words. Fitted
# by least squares over 400 first stages at 567 to 50,000 long papers and 50,000 pieces of
# 250 words, at windows of 100 and 300 (`bench/bench_common_terms.py --store DIR ...`); the
# two trade off in the fits (four runs: 245,000-573,000 postings and 1.0-2.0 a word), and
# these are the runs' means. The first stage searches short only where the common clauses
# hold more postings than both: from about 20,000 long papers. Without the fixed cost, a
# corpus of short documents whose queries hold several common terms would be searched short
# at a loss (over the 250-word pieces, short took 1.33-1.36x).
SHORT_SEARCH_FIXED_COST = 350_000
STORED_WORD_COST = 1.75


@dataclass(frozen=True)
class _View:
    """What a reader goes by, as of one snapshot."""

    version: int  # SQLite's data_version of the snapshot it was read in
    info: IndexInfo | None
    watermark: int


@dataclass(frozen=True, eq=False)
class _Window:
    """The window a store's first stage has just scored from its stored words
    (`_common_shares`), for the best passage that follows (`passage_bm25`)."""

    store: EmbeddedStore
    texts: dict[str, bytes]  # doc id -> its stored words
    position: dict[str, int]  # doc id -> its place in `words`
    words: StoredWords
    stems: list[int]  # the query's stems, hashed, and the stored (word, stem) pairs of them:
    pairs: list[tuple[int, int]]
    asked: dict[str, Counter[str]]  # the query's terms per field with their counts, the
    documents: int  # text index's N its idf took (the live count unless replaced entries linger),
    query: PassageQuery  # and the query of both, every term counted


# The window just scored, handed to the best passage of the same search through the context:
# the service ranks in a pool thread, in a copy of the request's context (a thread-local
# would not reach it). In a box that the taker empties, so that neither context keeps a
# window's words past the search that uses them.
_FIRST_STAGE_WINDOW: ContextVar[list[_Window]] = ContextVar("first_stage_window")


def _recorded_stop_list(meta: dict[str, str]) -> StopListInfo | None:
    """The stop list the `meta` table records for the index (None: built before indexes
    recorded it)."""
    return StopListInfo.from_json(json.loads(meta["stopwords"])) if "stopwords" in meta else None


@dataclass(frozen=True)
class _Build:
    """A rebuild under way: its rows are those above `floor`, the watermark when it began."""

    floor: int
    info: IndexInfo

    def to_json(self) -> str:
        centering = self.info.centering.to_json() if self.info.centering is not None else None
        stopwords = self.info.stopwords.to_json() if self.info.stopwords is not None else None
        return json.dumps(
            {"floor": self.floor, "embedding": self.info.embedding.__dict__, "k": self.info.k, "centering": centering, "stopwords": stopwords}
        )

    @classmethod
    def from_json(cls, text: str) -> "_Build":
        raw = json.loads(text)
        return cls(
            int(raw["floor"]),
            IndexInfo(
                EmbeddingInfo(**raw["embedding"]), int(raw["k"]), centering=Centering.from_json(raw["centering"]),
                stopwords=StopListInfo.from_json(raw.get("stopwords")),
            ),
        )


class EmbeddedStore:
    """A `Store` in `<directory>`: `store.sqlite3` and the text index `text/`.

    Safe to share between threads: each thread gets its own SQLite connection (a
    connection may not cross threads), and WAL mode lets readers run beside a writer.
    Several processes may read one store while one process (`reranker index`) writes.
    """

    def __init__(
        self, directory: Path, stopwords: frozenset[str] | None = None, *, stopwords_file: Path | None = None, create: bool = True
    ) -> None:
        """`stopwords` (None: the built-in list), read from `stopwords_file` (for messages).
        `create`: make the store where there is none; else (a command that only reads)
        raise IndexNotFoundError, leaving the directory as it was."""
        if not create and not (directory / "store.sqlite3").is_file():
            raise IndexNotFoundError(f"no index in {directory} yet: run `reranker index CORPUS.jsonl` first")
        self.directory = directory
        self._stopwords = stopwords
        self.stop_list = stop_list_info(stopwords, stopwords_file)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # A store written before schema 3 kept BM25 in SQLite (FTS5) and reused row ids.
            tables = dict(self._db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
            self._legacy = "docs_fts" in tables or ("docs" in tables and "AUTOINCREMENT" not in tables["docs"])
            if "docs" not in tables:
                self._db.executescript(_META + _DOCS.format(name="IF NOT EXISTS docs") + ";" + _DOCS_INDEXES + _LENGTHS_INDEX + ";" + _VOCABULARY)
            elif not self._legacy:
                # A store written before words' positions (derivation 4) has none: its
                # documents get them when the next `reranker index` re-derives them, and
                # their new rows leave the columns no longer read (`passage_words`,
                # `passage_terms`) NULL.
                self._db.executescript(_VOCABULARY)
        except (OSError, sqlite3.Error) as exc:
            raise _store_error(f"cannot open the embedded store in {directory}", exc, directory) from None
        self._text = TextIndex(directory / "text")
        # The text index's stemmed field takes stems: the write path's workers make them.
        self.word_stemmer: Callable[[Sequence[str]], list[str]] | None = stem_words
        # The rebuild this object is writing (None: it writes into the index readers see).
        self._build: _Build | None = None
        # Whether it resumed an interrupted rebuild (`drop_absent` has rows to look at).
        self._build_resumed = False
        # Writes this object made that the text index has not committed yet.
        self._pending_rowid = 0
        self._pending_docs = 0
        self._last_commit = time.monotonic()
        # The words this writer knows `passage_vocabulary` holds (`_vocabulary_written`).
        self._known_words: set[int] | None = None
        # Sent texts' terms, by content (`text_bm25`, `passage_bm25`).
        self._sent_texts = SentTexts(stopwords)

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.directory / "store.sqlite3", isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                # Reads through a memory map: a window's words for its best passages (2 MB
                # for 100 long papers) took 4.6 ms through SQLite's reads and page cache,
                # 2.0 ms mapped (bench/bench_passages.py). SQLite's largest map; pages the
                # reads touch show in the worker's RSS as shared file pages (the page cache).
                db.execute(f"PRAGMA mmap_size={_MMAP_BYTES}")
            except sqlite3.Error as exc:
                raise _store_error(f"cannot open the embedded store in {self.directory}", exc, self.directory) from None
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    # --- what readers see -------------------------------------------------------------

    def _meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    @contextmanager
    def _snapshot(self) -> Iterator[_View]:
        """A read transaction: every query inside it reads the same state of the store.

        The watermark and the rows change together (a rebuild's swap deletes every old
        row as it moves the watermark over the new ones): a reader that read the
        watermark in one state and the rows in a later one would find neither.
        """
        db = self._db
        if db.in_transaction:  # a read inside a read (or inside this thread's write)
            yield self._view()
            return
        db.execute("BEGIN")
        try:
            yield self._view()
        finally:
            if db.in_transaction:
                db.execute("COMMIT")

    def _view(self) -> _View:
        """What the current snapshot shows readers (call inside `_snapshot`).

        Cached per connection and read again only when another connection (another thread,
        or `reranker index` / `reranker train doc2vec` in another process) has committed
        since: SQLite's data_version says so. This connection's own writes clear the cache
        (`_forget_view`).
        """
        if self._legacy:
            raise IndexMismatchError(
                f"the index in {self.directory} was built by an older version (BM25 in SQLite "
                f"FTS5); rebuild it: {_REBUILD_COMMAND}"
            )
        # The first read of a transaction: it fixes the snapshot, and says which it is.
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        cached: _View | None = getattr(self._local, "view", None)
        if cached is not None and cached.version == version:
            return cached
        meta = self._meta()
        info = None
        if "embedding" in meta:
            embedding = EmbeddingInfo(**json.loads(meta["embedding"]))
            doc2vec = Doc2VecInfo.from_json(json.loads(meta["doc2vec"])) if "doc2vec" in meta else None
            centering = Centering.from_json(json.loads(meta["centering"])) if "centering" in meta else None
            info = IndexInfo(
                embedding=embedding, k=int(meta["k"]), doc2vec=doc2vec, centering=centering, stopwords=_recorded_stop_list(meta)
            )
        view = _View(version, info, int(meta.get("text_rowid", "0")))
        # The watermark moves only after a text-index commit: see that commit too, so that
        # the text index holds every document the snapshot shows.
        self._text.reload()
        self._local.view = view
        return view

    def _forget_view(self) -> None:
        self._local.view = None
        _FIRST_STAGE_WINDOW.set([])  # a window read before this write is not this search's

    def index_info(self) -> IndexInfo | None:
        """What the index readers see was built with; while this object rebuilds, what
        the rebuild is built with."""
        if self._build is not None:
            return self._build.info
        with self._snapshot() as view:
            return view.info

    def count(self) -> int:
        """Documents readers can find."""
        self._commit_pending()
        with self._snapshot() as view:
            # Through the ids' index, which holds each row id: SQLite would range over the
            # table's own pages (27 ms warm, 3 s cold at 50,000 papers, against 11 ms).
            return int(self._indexed("SELECT count(*) FROM docs {} WHERE rowid <= ?", "docs_id", (view.watermark,))[0])

    # --- starting a run ---------------------------------------------------------------

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        # What this object wrote so far is no interrupted run: commit it (a rebuild it
        # began stays unpublished, for this run to resume or drop).
        self._commit_pending()
        if self._build is not None:
            self._rollback_text()
            self._build = None
        self._forget_view()
        if self._legacy:
            if not rebuild:
                self.index_info()  # raises IndexMismatchError, saying to rebuild
            self._drop_legacy_tables()
        # Taking the text index's writer first makes this process the only writer.
        self._text.open_writer(by="reranker index --rebuild" if rebuild else "reranker index")
        try:
            # Before `_recover`, which reads rows again with this store's stop list.
            same_words = self._check_stop_list(rebuild)
            self._upgrade_schema()
            self._db.execute(_LENGTHS_INDEX)
            self._recover(reread=same_words)
            build = self._unfinished_build()
            if rebuild:
                self._build = self._resume_or_start_build(build, info)
                self._build_resumed = self._build is build
            else:
                self._use_index(info, build)
        except BaseException:
            self._rollback_text()
            raise
        finally:
            self._forget_view()

    def _check_stop_list(self, rebuild: bool) -> bool:
        """Whether the index readers see was read with this store's stop list (or recorded
        none, or holds no row). Without `rebuild`, IndexMismatchError when not: its rows,
        those of an interrupted run too, must not be read again with another list."""
        meta = self._meta()
        recorded = _recorded_stop_list(meta)
        if recorded is None or recorded == self.stop_list:
            return True
        build = self._unfinished_build()
        ceiling = build.floor if build is not None else _NO_ROW
        if self._db.execute("SELECT 1 FROM docs WHERE rowid <= ? LIMIT 1", (ceiling,)).fetchone() is None:
            return True
        if not rebuild:
            check_stop_list(recorded, self.stop_list)
        return False

    def _use_index(self, info: IndexInfo, build: _Build | None) -> None:
        """Write into the index readers see: check it was built like `info`, or record
        `info` for a new (empty) one; drop an interrupted rebuild."""
        with self._transaction():
            watermark = self._watermark()
            meta = self._meta()
            documents = self._db.execute("SELECT count(*) FROM docs WHERE rowid <= ?", (watermark,)).fetchone()[0]
            if "embedding" in meta and documents:
                built = IndexInfo(EmbeddingInfo(**json.loads(meta["embedding"])), int(meta["k"]), stopwords=_recorded_stop_list(meta))
                built.check(info.embedding, info.k, self.stop_list)
            if build is not None:
                log.warning(
                    "dropping an interrupted rebuild (%d documents written); the index is as it was before it",
                    self._db.execute("SELECT count(*) FROM docs WHERE rowid > ?", (build.floor,)).fetchone()[0],
                )
                self._db.execute("DELETE FROM docs WHERE rowid > ?", (build.floor,))
                self._db.execute("DELETE FROM meta WHERE key = 'build'")
            if "embedding" not in meta or not documents:
                # A new (empty) index has no Doc2Vec model yet, and the centering given.
                self._set_info(IndexInfo(info.embedding, info.k, centering=info.centering, stopwords=self.stop_list))

    def _set_info(self, info: IndexInfo) -> None:
        values = {"schema_version": SCHEMA_VERSION, "embedding": json.dumps(info.embedding.__dict__), "k": str(info.k)}
        self._db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items())
        self._db.execute("DELETE FROM meta WHERE key IN ('doc2vec', 'centering', 'stopwords')")
        if info.centering is not None:
            self._db.execute("INSERT INTO meta(key, value) VALUES ('centering', ?)", (json.dumps(info.centering.to_json()),))
        if info.stopwords is not None:
            self._db.execute("INSERT INTO meta(key, value) VALUES ('stopwords', ?)", (json.dumps(info.stopwords.to_json()),))

    def _watermark(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'text_rowid'").fetchone()
        return int(row[0]) if row else 0

    def _unfinished_build(self) -> _Build | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'build'").fetchone()
        return _Build.from_json(row[0]) if row else None

    def _resume_or_start_build(self, build: _Build | None, info: IndexInfo) -> _Build:
        """The rebuild this run writes: an interrupted one built with the same vectors, K
        and stop list (its centering too: it is fixed when a build begins), or a new one."""
        if build is not None:
            written = self._db.execute("SELECT count(*) FROM docs WHERE rowid > ?", (build.floor,)).fetchone()[0]
            try:
                build.info.check(info.embedding, info.k, self.stop_list)
            except IndexMismatchError:
                log.warning(
                    "dropping an interrupted rebuild (%d documents written) built with other vectors, K or stop list", written
                )
                with self._transaction():
                    self._db.execute("DELETE FROM docs WHERE rowid > ?", (build.floor,))
                    self._db.execute("DELETE FROM meta WHERE key = 'build'")
            else:
                log.warning("resuming an interrupted rebuild (%d documents written)", written)
                # `_recover` dropped its text-index entries: they are made again (not
                # committed: readers never see a rebuild's entries before its rows).
                self._add_to_text_index(above=build.floor)
                return build
        with self._transaction():
            # Above the rows an interrupted run left (`_recover` left them for a rebuild
            # with another stop list): they belong to the index this one replaces.
            floor = max(self._watermark(), self._db.execute("SELECT coalesce(max(rowid), 0) FROM docs").fetchone()[0])
            build = _Build(floor, IndexInfo(info.embedding, info.k, centering=info.centering, stopwords=self.stop_list))
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('build', ?)", (build.to_json(),))
        return build

    def _upgrade_schema(self) -> None:
        """Give a store of schema 3 (its ids unique) the table of schema 4, in one
        transaction: the rows, their row ids and the row-id sequence are kept."""
        if not any(unique and origin == "u" for _, _, unique, origin, _ in self._db.execute("PRAGMA index_list(docs)")):
            return
        log.warning("upgrading the embedded store in %s to schema %s (once)", self.directory, SCHEMA_VERSION)
        with self._transaction():
            sequence = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'docs'").fetchone()
            self._db.execute(_DOCS.format(name="docs_upgraded"))
            self._db.execute(f"INSERT INTO docs_upgraded (rowid, {_DOC_COLUMNS}) SELECT rowid, {_DOC_COLUMNS} FROM docs")
            self._db.execute("DROP TABLE docs")
            self._db.execute("ALTER TABLE docs_upgraded RENAME TO docs")
            self._db.execute(_DOCS_INDEXES)
            self._db.execute(_LENGTHS_INDEX)
            self._db.execute(_PASSAGES_TRIGGER)  # it went with the old table
            if sequence is not None:  # row ids deleted at the top stay used
                self._db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'docs'", (sequence[0],))
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))

    def _drop_legacy_tables(self) -> None:
        try:
            with self._transaction():
                for table in ("docs_fts", "docs", "meta"):
                    self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._db.executescript(_META + _DOCS.format(name="docs") + ";" + _DOCS_INDEXES + _LENGTHS_INDEX + ";" + _VOCABULARY)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot rebuild the embedded store in {self.directory}: {exc}") from None
        self._legacy = False

    def _recover(self, reread: bool = True) -> None:
        """Complete what an interrupted run left (see the module docstring), then check
        that the text index holds as many documents as readers see.

        `reread`: False when the index readers see was read with another stop list (a
        rebuild with a new one replaces it): its rows are not read again with this one,
        so an interrupted run's rows, which no reader saw, and the text index are left
        as they are, for the rebuild's swap to drop (its floor is above them)."""
        purge = self._db.execute("SELECT value FROM meta WHERE key = 'text_purge'").fetchone()
        if purge is not None:
            self._purge_text(int(purge[0]))
        build = self._unfinished_build()
        watermark = self._watermark()
        if build is not None:
            # Entries of an interrupted rebuild that had begun to publish: its rows are
            # all above its floor. Made again if it resumes.
            self._text.delete_rows(above=build.floor)
            self._text.commit()
        if not reread:
            # An interrupted run's rows stay as they are (its entries too, which may be
            # committed): a rebuild begins above them, and they go at its swap.
            return
        # An interrupted run's rows, below a rebuild's floor when a rebuild with another
        # stop list began after it (`_resume_or_start_build`).
        ceiling = build.floor if build is not None else _NO_ROW
        pending = self._db.execute("SELECT count(*) FROM docs WHERE rowid > ? AND rowid <= ?", (watermark, ceiling)).fetchone()[0]
        if pending:
            log.warning("adding %d documents of an interrupted run to the text index", pending)
            self._add_to_text_index(above=watermark, upto=ceiling, replacing=watermark)
            self._commit_text()
            watermark = self._watermark()
        visible = self._db.execute("SELECT count(*) FROM docs WHERE rowid <= ?", (watermark,)).fetchone()[0]
        if self._text.num_docs() != visible:
            log.warning(
                "the text index holds %d documents and the store %d; rebuilding the text index",
                self._text.num_docs(), visible,
            )
            # One commit: readers see the old entries until the new ones are all there.
            self._text.delete_all()
            self._add_to_text_index(above=0, upto=watermark)
            self._text.commit()

    def compact(self, progress: Callable[[int], None] | None = None) -> CompactResult:
        """Write the text index anew in one commit, as one segment while its entries fit
        the writer's memory (`COMPACT_HEAP_BYTES`). tantivy's merges leave several (5 at
        50,000 long papers, where one made the default's search path 0.87x as long:
        bench/README.md), and tantivy-py has no call to merge them: the entries are made
        again from the rows, as `_recover` makes them (2 minutes at 50,000 papers, 3-4 on a busy machine)."""
        self._commit_pending()
        if self._build is not None:
            raise StoreError("this store's rebuild is not published yet: compact after it")
        if self.index_info() is None:
            raise StoreError(f"nothing to compact: no index in {self.directory} yet (run `reranker index CORPUS` first)")
        # A writer this object opened has the ordinary memory: open one with more.
        self._text.close_writer()
        self._text.open_writer(COMPACT_HEAP_BYTES, by="reranker compact")
        try:
            # Up front, before `_recover` or the rewrite reads a row with this store's list.
            self._check_stop_list(rebuild=False)
            # An index that recorded no stop list is checked row by row (`as_written`).
            unrecorded = "stopwords" not in self._meta()
            self._upgrade_schema()
            self._recover()
            before = self._text.segments()
            self._text.delete_all()
            documents = self._add_to_text_index(above=0, upto=self._watermark(), progress=progress, as_written=unrecorded)
            self._text.commit()
            # Readers reload the text index when SQLite's state changes (`_view`): change it.
            with self._transaction():
                self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('text_compacted', ?)", (str(time.time()),))
        except BaseException:
            self._rollback_text()
            raise
        finally:
            self._pending_rowid = self._pending_docs = 0  # rows readers already saw
            self._text.close_writer()
            self._forget_view()
        return CompactResult(documents, before, self._text.segments())

    def segments(self) -> int:
        self._commit_pending()
        return self._text.segments()

    def _add_to_text_index(
        self, above: int, upto: int = _NO_ROW, replacing: int = -1, progress: Callable[[int], None] | None = None,
        as_written: bool = False,
    ) -> int:
        """Make the text-index entries of the rows in (above, upto] (not committed): a
        row replacing one at or below `replacing` (the watermark, for rows a run wrote
        and did not make visible) under the row id it will take, the others under
        their own. Returns how many; `progress(1)` after each.

        `as_written`: raise StoreError at a row whose content words, read with this
        object's stop words, are not as many as its run read (n_tokens + n_oov), for an
        index built before indexes recorded their stop list (`_check_stop_list` checks
        the others): a word that one list has and the other not changes the count of
        every text that holds it, and the entries would not be the ones the run wrote."""
        rows = self._db.execute(
            "SELECT new.rowid, (SELECT old.rowid FROM docs AS old WHERE old.id = new.id AND old.rowid <= ?), "
            "new.id, new.title, new.body, new.n_tokens + new.n_oov "
            "FROM docs AS new WHERE new.rowid > ? AND new.rowid <= ? ORDER BY new.rowid",
            (replacing, above, upto),
        )
        made = 0
        for rowid, replaced, doc_id, title, body, read in rows:
            words, stems = self._words(Document(doc_id, title, body))
            if as_written and (words.count(" ") + 1 if words else 0) != read:
                raise StoreError(
                    f"document {doc_id!r} reads as other content words than the index holds for it: the index was "
                    "written with other stop words (--stopwords, RERANKER_STOPWORDS): run again with the same ones "
                    f"(or rebuild the index with these: {_REBUILD_COMMAND}); the index is as it was"
                )
            self._text.replace([(replaced or rowid, doc_id, words, stems)])
            self._pending_rowid = max(self._pending_rowid, rowid)
            self._pending_docs += 1
            made += 1
            if progress is not None:
                progress(1)
        return made

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
        floor = self._build.floor if self._build is not None else None
        entries: list[tuple[int, str, str, str]] = []
        dropped: list[int] = []
        top = 0
        vocabulary: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]] = []  # (words, stems) per document
        with self._transaction():
            watermark = self._watermark()
            for stored in documents:
                if stored.doc_topics.topics.shape[1:] != (info.embedding.dim,):
                    raise IndexMismatchError(
                        f"document {stored.document.id!r} has topics of shape "
                        f"{stored.doc_topics.topics.shape}, the index holds d={info.embedding.dim}"
                    )
                replaced, unseen = self._earlier_versions(stored.document.id, watermark, floor)
                words, stems, passages = stored.content_words, stored.stemmed_words, stored.passage_words
                if words is None:
                    words, stems = self._words(stored.document)
                elif stems is None:
                    stems = " ".join(stem_words(words.split()))
                if passages is None:
                    passages = passage_words(words.split(), stems.split())
                rowid = self._insert(stored, passages.positions)
                vocabulary.append((passages.words, passages.stems))
                # The entry goes under the row id this version will have when readers see
                # it: the visible version's, or a new document's own. An unseen earlier
                # version of a new document had its entry under its own row id: it goes.
                entries.append((replaced or rowid, stored.document.id, words, stems))
                if unseen is not None and replaced is None:
                    dropped.append(unseen)
                top = max(top, rowid)
            known = self._vocabulary_written()
            new = []
            if vocabulary:
                batch_words, first = np.unique(np.concatenate([words for words, _ in vocabulary]), return_index=True)
                batch_stems = np.concatenate([stems for _, stems in vocabulary])[first]
                new = [(word, stem) for word, stem in zip(batch_words.tolist(), batch_stems.tolist()) if word not in known]
            self._db.executemany("INSERT OR IGNORE INTO passage_vocabulary(word, stem) VALUES (?, ?)", new)
        # Remembered once committed: a batch rolled back leaves its words to the next.
        known.update(word for word, _ in new)
        self._text.replace(entries, dropping=dropped)
        self._pending_rowid = max(self._pending_rowid, top)
        self._pending_docs += len(entries)
        # A rebuild's entries are committed by publish(), with the swap.
        due = self._pending_docs >= _COMMIT_DOCS or time.monotonic() - self._last_commit >= _COMMIT_SECONDS
        if self._build is None and due:
            self._commit_text()
        return []

    def _vocabulary_written(self) -> set[int]:
        """The words `passage_vocabulary` holds, read at this writer's first batch: a
        corpus repeats its words, so most of a batch's are known and need no write."""
        if self._known_words is None:
            self._known_words = {row[0] for row in self._db.execute("SELECT word FROM passage_vocabulary")}
        return self._known_words

    def _earlier_versions(self, doc_id: str, watermark: int, floor: int | None) -> tuple[int | None, int | None]:
        """(the row id of the version of `doc_id` readers see, or None; that of a version
        written since and not yet seen, or None), after deleting the unseen one: the
        version being written takes its place.

        In a rebuild (`floor`) only the rebuild's own versions count: the old index's
        rows and entries are left alone until the swap.
        """
        versions = [row[0] for row in self._db.execute(
            "SELECT rowid FROM docs WHERE id = ? AND rowid > ? ORDER BY rowid", (doc_id, -1 if floor is None else floor)
        )]
        unseen = [rowid for rowid in versions if rowid > watermark]
        if unseen:
            self._db.execute(f"DELETE FROM docs WHERE rowid IN ({_marks(unseen)})", unseen)
        seen = [rowid for rowid in versions if rowid <= watermark]
        return (seen[0] if seen else None), (unseen[0] if unseen else None)

    def _commit_pending(self) -> None:
        """Readers of this object see its own writes (others see them at the next commit)."""
        if self._pending_docs and self._build is None:
            self._commit_text()

    def _commit_text(self) -> None:
        """Commit the text index, then move the watermark over what it now holds."""
        self._text.commit()
        if self._pending_rowid:
            self._move_watermark(self._pending_rowid)
        self._pending_docs = 0
        self._last_commit = time.monotonic()

    def _move_watermark(self, top: int) -> None:
        """One transaction: readers see the rows up to `top`; each new version of a
        document they saw replaces the old one, under its row id."""
        try:
            with self._transaction():
                old = self._watermark()
                if top > old:
                    moves = self._db.execute(
                        "SELECT old.rowid, new.rowid FROM docs AS new JOIN docs AS old ON old.id = new.id AND old.rowid <= ? "
                        "WHERE new.rowid > ? AND new.rowid <= ?",
                        (old, old, top),
                    ).fetchall()
                    self._db.executemany("DELETE FROM docs WHERE rowid = ?", [(replaced,) for replaced, _ in moves])
                    self._db.executemany("UPDATE docs SET rowid = ? WHERE rowid = ?", moves)
                    self._db.executemany("UPDATE passages SET rowid = ? WHERE rowid = ?", moves)
                    self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('text_rowid', ?)", (str(top),))
        finally:
            self._forget_view()

    def drop_absent(self, corpus_ids: AbstractSet[str]) -> int:
        """Delete the rebuild's rows (and their text-index entries, uncommitted until the
        swap) whose id is not in `corpus_ids`; how many. Only a resumed rebuild has any:
        those an interrupted run wrote from a corpus that had documents this run's has not
        (see `Store.drop_absent`). The rows sit above the rebuild's floor, where readers
        never look, and a run killed after this transaction resumes without them."""
        if self._build is None:
            raise StoreError("only a rebuild drops documents (reranker index --rebuild): writing in place never deletes")
        if not self._build_resumed:
            return 0  # every row above the floor is this run's
        absent = [
            rowid for rowid, doc_id in self._db.execute("SELECT rowid, id FROM docs WHERE rowid > ?", (self._build.floor,))
            if doc_id not in corpus_ids
        ]
        if not absent:
            return 0
        log.info("dropping %d documents of the interrupted rebuild that the corpus no longer holds", len(absent))
        with self._transaction():
            for start in range(0, len(absent), 500):
                chunk = absent[start : start + 500]
                self._db.execute(f"DELETE FROM docs WHERE rowid IN ({_marks(chunk)})", chunk)  # their passages with them (the trigger)
        # A rebuild's entries are under their rows' own row ids (`upsert`, `_resume_or_start_build`).
        self._text.replace([], dropping=absent)
        return len(absent)

    def publish(self) -> None:
        """Make what this run wrote visible (a rebuild: swap it in) and release the text
        index's writer. Raises StoreError for a rebuild that wrote no document (the index
        is left as it was)."""
        if self._build is not None:
            self._finish_build(self._build)
        self._commit_pending()
        self._text.close_writer()

    def _rollback_text(self) -> None:
        """Forget the text index's uncommitted entries (a writer that failed has none to
        forget, and says so: that is no news)."""
        with contextlib.suppress(StoreError):
            self._text.rollback()

    def _finish_build(self, build: _Build) -> None:
        if self._db.execute("SELECT 1 FROM docs WHERE rowid > ? LIMIT 1", (build.floor,)).fetchone() is None:
            self._rollback_text()
            with self._transaction():
                self._db.execute("DELETE FROM meta WHERE key = 'build'")
            self._build = None
            raise StoreError("the rebuild wrote no documents; the index was left as it was")
        # These entries' row ids are above the floor: readers see no row of theirs until the swap.
        self._text.commit()
        self._swap_in(build)
        self._build = None
        self._pending_docs = 0
        self._purge_text(build.floor)

    def _swap_in(self, build: _Build) -> None:
        """One transaction: the rebuild's rows become what readers see, the old rows go."""
        try:
            with self._transaction():
                top = self._db.execute("SELECT max(rowid) FROM docs").fetchone()[0]
                self._db.execute("DELETE FROM docs WHERE rowid <= ?", (build.floor,))
                self._set_info(build.info)
                self._db.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                    [("text_rowid", str(top)), ("text_purge", str(build.floor))],
                )
                self._db.execute("DELETE FROM meta WHERE key = 'build'")
        finally:
            self._forget_view()

    def _purge_text(self, floor: int) -> None:
        """Drop the text-index entries of the rows a rebuild replaced (up to `floor`),
        once no read that began before the swap is still running: such a read still
        sees those rows, and looks for them in the text index."""
        self._wait_for_older_reads()
        self._text.delete_rows(upto=floor)
        self._text.commit()
        with self._transaction():
            self._db.execute("DELETE FROM meta WHERE key = 'text_purge'")

    def _wait_for_older_reads(self) -> None:
        """Return when every reader, in any process, reads the state this connection
        committed last (or after `_OLDER_READS_SECONDS`: a read lasts milliseconds).

        SQLite's FULL checkpoint waits for exactly that: it copies the log into the
        database only up to what every open read still needs, and calls the busy handler
        (the connection's timeout, 5 s) until no read needs less than the latest state.
        """
        deadline = time.monotonic() + _OLDER_READS_SECONDS
        while True:
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
            if not busy:
                return
            if time.monotonic() > deadline:
                log.warning("a read of the index has lasted over %d s; dropping the old text entries anyway", _OLDER_READS_SECONDS)
                return

    def _insert(self, stored: StoredDocument, passages: bytes) -> int:
        doc, topics, corrected = stored.document, stored.doc_topics, stored.corrected
        cursor = self._db.execute(
            "INSERT INTO docs(id, title, body, fields, content_hash, n_tokens, n_oov, k, topics, importances, "
            "corrected_k, corrected_topics, corrected_importances, backgrounds) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            ),
        )
        assert cursor.lastrowid is not None
        self._db.execute("INSERT INTO passages(rowid, positions) VALUES (?, ?)", (cursor.lastrowid, passages))
        return cursor.lastrowid

    @contextmanager
    def writing(self, command: str) -> Iterator[None]:
        """This process as the store's one writer for the block, as `reranker index` is for
        its run: tantivy's writer lock, taken here unless this object holds it already."""
        held = self._text.holds_writer
        if not held:
            self._text.open_writer(by=command)
        try:
            yield
        finally:
            if not held:
                self._text.close_writer()

    def store_doc_vectors(self, info: Doc2VecInfo, vectors: Mapping[str, np.ndarray]) -> list[WriteFailure]:
        """Vectors go to each document's newest version outside an unfinished rebuild:
        the one just written by `reranker index`, the one readers see otherwise."""
        if self.index_info() is None:
            raise StoreError("the store is not initialised: index a corpus first")
        failures: list[WriteFailure] = []
        try:
            with self._transaction():
                build = self._unfinished_build()
                bound = build.floor if build is not None else _NO_ROW
                for doc_id, vector in vectors.items():
                    if vector.shape != (info.dim,):
                        failures.append(WriteFailure(doc_id, f"vector of shape {vector.shape}, the model has dim={info.dim}"))
                        continue
                    blob = np.ascontiguousarray(vector, dtype=_FLOAT32).tobytes()
                    cursor = self._db.execute(
                        "UPDATE docs SET doc_vector = ?, doc_vector_model = ? "
                        "WHERE rowid = (SELECT max(rowid) FROM docs WHERE id = ? AND rowid <= ?)",
                        (blob, info.checksum, doc_id, bound),
                    )
                    if cursor.rowcount == 0:
                        failures.append(WriteFailure(doc_id, "not in the index"))
                self._db.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('doc2vec', ?)",
                    (json.dumps(info.to_json()),),
                )
        finally:
            self._forget_view()
        return failures

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The newest version's hash (of this object's rebuild, while it rebuilds)."""
        floor = self._build.floor if self._build is not None else -1
        found: dict[str, str] = {}
        for chunk in _chunks(doc_ids):
            rows = self._db.execute(
                f"SELECT id, content_hash FROM docs WHERE id IN ({_marks(chunk)}) AND rowid > ? ORDER BY rowid", (*chunk, floor)
            )
            found.update(rows.fetchall())
        return found

    # --- the read path --------------------------------------------------------------

    def _fields_filters(self, filters: Sequence[Filter], watermark: int) -> tuple[list[Filter], set[str], set[str]]:
        """`filters` with each value read as its field's values are (`filter_for_field`),
        which of their fields hold arrays somewhere, and which hold numbers written as text
        beside numbers (both for `_filter_sql`).

        UnknownFieldError, naming the filterable fields, when no document has a filtered
        field: without it a typo would quietly filter out everything. What a field holds
        is read over every document (about 26 ms over 50,000), once per state of the index; the
        field list only on that error path.
        """
        known = getattr(self._local, "fields", None)
        if known is None or known[0] != watermark:
            known = self._local.fields = (watermark, {})
        held: dict[str, tuple[str | None, bool, bool]] = known[1]
        read, arrays, numeric_texts = [], set(), set()
        for item in filters:
            if item.field == "title":
                read.append(filter_for_field(item, "text"))
                continue
            found = held.get(item.field) or self._field_values(item.field, watermark)
            if found is not None:
                held[item.field] = found  # not a field no document has: a client's typos would pile up
            else:
                rows = self._db.execute(
                    "SELECT DISTINCT json_each.key FROM docs, json_each(docs.fields) WHERE docs.rowid <= ?", (watermark,)
                )
                names = sorted({"title", *(row[0] for row in rows)})
                raise UnknownFieldError(f"cannot filter on {item.field!r}; filterable fields: {', '.join(names)}")
            kind, in_arrays, as_text = found
            if kind == _MIXED and item.op != "eq":
                # SQLite orders every number before every text: `year >= 2000` would take
                # "1990" (and leave out no text at all).
                raise InputError(
                    f"cannot filter {filter_shown(item)}: the field holds numbers and texts that are not numbers, "
                    "which no range orders together; filter with = or make the field's values one kind"
                )
            read.append(filter_for_field(item, None if kind == _MIXED else kind))
            if in_arrays:
                arrays.add(item.field)
            if as_text:
                numeric_texts.add(item.field)
        return read, arrays, numeric_texts

    def _field_values(self, field: str, watermark: int) -> tuple[str | None, bool, bool] | None:
        """What `field` holds: the kind of its values ("number", "text" or "boolean";
        _MIXED for numbers beside texts that are not numbers, None for other mixes, nulls
        aside), an array's items one by one; whether any value is an array; and whether
        numbers are also written as text ("2005" beside 2010: then the field holds numbers,
        as OpenSearch coerces "2005" into the number field its first number mapped). None
        when no document has the field."""
        # By key, not by a JSON path: a path cannot name every key (see _filter_sql).
        scan = "SELECT DISTINCT {} FROM docs, {} WHERE docs.rowid <= ? AND field.key = ?"
        try:
            types = {row[0] for row in self._db.execute(scan.format("field.type", "json_each(docs.fields) AS field"), (watermark, field))}
            in_arrays = "array" in types
            if in_arrays:
                types |= {row[0] for row in self._db.execute(scan.format(_ITEM.format("type"), _VALUES), (watermark, field))}
        except sqlite3.Error as exc:
            raise self._unreadable_field(field, watermark, exc) from None
        if not types:
            return None
        kinds = {_KINDS.get(type_) for type_ in types if type_ not in ("null", "array")}
        if kinds == {"number", "text"}:
            texts = scan.format(_ITEM.format("value"), _VALUES) + f" AND {_ITEM.format('type')} = 'text'"
            try:
                values = [row[0] for row in self._db.execute(texts, (watermark, field))]
            except sqlite3.Error as exc:
                raise self._unreadable_field(field, watermark, exc) from None
            if all(_NUMERIC_TEXT.fullmatch(value.strip()) for value in values):
                return "number", in_arrays, True
            return _MIXED, in_arrays, False
        return (kinds.pop() if len(kinds) == 1 else None), in_arrays, False

    def _unreadable_field(self, field: str, watermark: int, exc: sqlite3.Error) -> StoreError:
        """The error of reading `field`. SQLite's "malformed JSON" is a document's metadata
        holding NaN or Infinity, which corpus lines can no longer give (datasets._not_json)
        but an older index kept: it names the first such document and how to replace it."""
        try:
            found = self._db.execute("SELECT id FROM docs WHERE rowid <= ? AND NOT json_valid(fields) LIMIT 1", (watermark,)).fetchone()
        except sqlite3.Error:
            found = None
        if found is None:
            return StoreError(f"cannot read the field {field!r}: {exc}")
        return StoreError(
            f"cannot read the field {field!r}: the metadata of document {found[0]!r} is not valid JSON (NaN or Infinity, "
            "which an index made before they were refused kept): write null or a number in its corpus line and index the corpus again"
        )

    def passage_bm25(
        self, query: str, doc_ids: Sequence[str], texts: Sequence[str | None], read: ReadWords | None = None
    ) -> list[float] | None:
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        documents, _, passage_length = self._statistics()
        if not terms:
            return None
        asked = {field: Counter(found) for field, found in self._text.analysed(terms).items()}
        if not documents:
            # Texts only: scored with their own statistics (`window_passage_bm25`).
            given = [text for text in texts if text is not None]
            if not given or len(given) < len(texts):
                return None
            return window_passage_bm25(asked, [self._sent_texts(text, read) for text in given])
        stems = stable_hashes(list(asked["stemmed"])).tolist()
        unread = [doc_id for doc_id, text in zip(doc_ids, texts) if text is None]
        stored: dict[str, bytes | None] = {}
        pairs: list[tuple[int, int]] = []
        self._commit_pending()
        # The window this search's first stage has just scored (`_common_shares`), taken
        # once: its passages are those of the words the first stage read, the snapshot its
        # scores come from (a write through this store since then drops it: `_forget_view`).
        box = _FIRST_STAGE_WINDOW.get(None)
        kept = box.pop() if box and box[-1].store is self else None
        if kept is not None and doc_ids and len(unread) == len(doc_ids) and kept.stems == stems:
            if all(doc_id in kept.texts for doc_id in doc_ids):
                # Its words laid out, where the query's words are in them, and the query's
                # words and weights (the stems decide the vocabulary's pairs; a query with
                # other words finds them again, other statistics weigh them again).
                if kept.asked == asked and kept.documents == documents:
                    terms_sought = kept.query
                else:
                    terms_sought = self._passage_query(asked, documents, kept.pairs)
                scores = best_passage_bm25(kept.words, terms_sought, passage_length)
                return [float(scores[kept.position[doc_id]]) for doc_id in doc_ids]
        if kept is not None:
            stored.update((doc_id, kept.texts[doc_id]) for doc_id in unread if doc_id in kept.texts)
        with self._snapshot() as view:
            to_read = [doc_id for doc_id in unread if doc_id not in stored]
            try:
                for chunk in _chunks(to_read):
                    stored.update(self._db.execute(
                        "SELECT docs.id, passages.positions FROM docs LEFT JOIN passages ON passages.rowid = docs.rowid "
                        f"WHERE docs.rowid <= ? AND docs.id IN ({_marks(chunk)})",
                        (view.watermark, *chunk),
                    ).fetchall())
                if unread:
                    pairs = self._vocabulary_pairs(stems)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read passages: {exc}") from None
        if any(stored.get(doc_id, b"") is None for doc_id in unread):
            return None  # indexed before words' positions were kept: the next `reranker index` adds them
        # Each sent text's terms looked up once (by its hash: some 25 us for a long paper).
        passages = [self._sent_texts(text, read).passages if text is not None else None for text in texts]
        sent = [found for found in passages if found is not None]
        words = StoredWords([
            found.positions if found is not None else stored.get(doc_id) or b""
            for doc_id, found in zip(doc_ids, passages)
        ])
        scores = best_passage_bm25(words, self._passage_query(asked, documents, pairs, sent), passage_length)
        return [float(score) for score in scores]

    def _passage_query(
        self,
        asked: Mapping[str, Mapping[str, int]],
        documents: int,
        pairs: Sequence[tuple[int, int]],
        sent: Sequence[PassageWords] = (),
    ) -> PassageQuery:
        """`passage_query` for the query terms `asked` (field -> term -> count) with the
        index's document frequencies among `documents`; `pairs`: the stored (word, stem) of
        the query's stems, `sent`: the sent texts' own words and stems."""
        vocabulary = (
            np.concatenate([np.array([word for word, _ in pairs], dtype=np.int32), *(passages.words for passages in sent)]),
            np.concatenate([np.array([stem for _, stem in pairs], dtype=np.int32), *(passages.stems for passages in sent)]),
        )
        doc_freqs = {field: self._text.doc_freqs(field, counts) for field, counts in asked.items()}
        return passage_query(asked["exact"], asked["stemmed"], doc_freqs, documents, vocabulary)

    def _vocabulary_pairs(self, stems: Sequence[int]) -> list[tuple[int, int]]:
        """(word, stem) of every indexed word whose stem is one of these (hashed)."""
        if not stems:
            return []
        pairs: list[tuple[int, int]] = self._db.execute(
            f"SELECT word, stem FROM passage_vocabulary WHERE stem IN ({_marks(stems)})", list(stems)
        ).fetchall()
        return pairs

    def doc_freqs(self, words: Sequence[str]) -> tuple[int, dict[str, int]] | None:
        documents, _ = self._length_statistics()
        return (documents, self._text.doc_freqs("exact", words)) if documents else None

    def text_bm25(self, query: str, texts: Sequence[str], read: ReadWords | None = None) -> list[float] | None:
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        documents, average = self._length_statistics()
        if not documents or not terms:
            return None
        asked = self._text.analysed(terms)
        sent = [self._sent_texts(text, read) for text in texts]
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
        """(documents, their mean length in terms) of what readers see."""
        documents, average, _ = self._statistics()
        return documents, average

    def _statistics(self) -> tuple[int, float, float]:
        """(documents, their mean length in terms, their passages' mean length) of what
        readers see, read again only when that changes (a sum over every row's lengths,
        through `_LENGTHS_INDEX`: 14 ms at 50,000 papers). A text of L terms has P = 1
        passage if L <= T (PASSAGE_TERMS), else ceil((L - T) / S) + 1 (S: PASSAGE_STRIDE),
        all T long but the last, which ends the text: L + S (P - 1) terms in all."""
        self._commit_pending()
        with self._snapshot() as view:
            cached = getattr(self._local, "lengths", None)
            if cached is not None and cached[0] == view.watermark:
                return cached[1], cached[2], cached[3]
            sums = (
                "SELECT COUNT(*), TOTAL(length), TOTAL(passages), TOTAL(length + ? * (passages - 1)) FROM ("
                "  SELECT n_tokens + n_oov AS length,"
                "    CASE WHEN n_tokens + n_oov <= ? THEN 1 ELSE (n_tokens + n_oov - ? + ? - 1) / ? + 1 END AS passages"
                "  FROM docs {} WHERE rowid <= ?)"
            )
            values = (PASSAGE_STRIDE, PASSAGE_TERMS, PASSAGE_TERMS, PASSAGE_STRIDE, PASSAGE_STRIDE, view.watermark)
            try:
                count, total, passages, passage_terms = self._indexed(sums, "docs_lengths", values)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read term statistics: {exc}") from None
        average = float(total) / count if count else 0.0
        passage_average = float(passage_terms) / passages if passages else 0.0
        self._local.lengths = (view.watermark, int(count), average, passage_average)
        return int(count), average, passage_average

    def _indexed(self, query: str, index: str, values: tuple[object, ...]) -> tuple[Any, ...]:
        """The one row of `query` read through `index` (its "{}" says where), which SQLite's
        planner would not choose; through the table in a store no writer has opened since
        the index came (`_LENGTHS_INDEX`)."""
        try:
            row = self._db.execute(query.format(f"INDEXED BY {index}"), values).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such index" not in str(exc):
                raise
            row = self._db.execute(query.format(""), values).fetchone()
        return tuple(row)

    def bm25(self, query: str, size: int, filters: Sequence[Filter] = ()) -> list[Candidate]:
        # Repeated query words stay repeated: the text index weighs a word by its count
        # in the query. Only the first MAX_QUERY_TERMS count, as in the OpenSearch store.
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        if (not terms or size < 1) and not filters:
            return []
        self._commit_pending()
        with self._snapshot() as view:
            # Checked first: a query of stop words only must not make a filter typo a success.
            filters, arrays, numeric_texts = self._fields_filters(filters, view.watermark)
            if not terms or size < 1:
                return []
            allowed: list[int] | None = None
            if filters:
                where, params = _filter_sql(filters, arrays, numeric_texts)
                try:
                    allowed = [row[0] for row in self._db.execute(
                        f"SELECT rowid FROM docs WHERE rowid <= ?{where}", (view.watermark, *params)
                    )]
                except sqlite3.Error as exc:
                    raise StoreError(f"BM25 search failed: {exc}") from None
            # Searched without its commonest terms, a long query visits a third of the
            # postings (bench/README.md); their share of each hit's score is added back from
            # its stored words, so every hit scores as the whole query scores it. The hits
            # are the best by the other terms, so a document the whole query ranks in the
            # window only through its common terms' share can be missed (a tenth of a window
            # of 100 over 50,000 papers, and 3 of 40 summaries' top 10: docs/cli.md, "Common
            # terms"). Only where that saves time: over a large index, and not among fewer
            # allowed documents than the window (the short search would find too few).
            _FIRST_STAGE_WINDOW.set([])  # none from an earlier search
            common = self._text.common_terms(terms)
            window = max(size, SHORT_SEARCH_HITS)
            live: list[tuple[float, int, tuple[str, str]]] | None = None
            if common and (allowed is None or len(allowed) >= window) and self._short_search_pays(terms, common, window):
                live, complete = self._live_hits(terms, window, allowed, view.watermark, common)
                shares = self._common_shares(terms, common, [(rowid, row[0]) for _, rowid, row in live], view) if complete else None
                if shares is None:
                    live = None  # too few hits, or a store without words' positions: search whole
                else:
                    live = [(score + share, rowid, row) for (score, rowid, row), share in zip(live, shares)]
            if live is None:
                live, _ = self._live_hits(terms, size, allowed, view.watermark)
        live.sort(key=lambda hit: (-hit[0], hit[2][0]))
        return [
            Candidate(doc_id=doc_id, bm25_score=score, bm25_rank=position, title=title)
            for position, (score, _, (doc_id, title)) in enumerate(live[:size], start=1)
        ]

    def _short_search_pays(self, terms: Sequence[str], common: Mapping[str, AbstractSet[str]], hits: int) -> bool:
        """Whether leaving the `common` clauses out saves more than adding their share back
        costs. tantivy visits every posting of every clause; the share reads, lays out and
        scores every stored word of the `hits` documents, whatever the index's size. So over
        a small index (CL-SciSumm's 567 papers: 1.7x the whole query's time for a ranker
        without a best passage), or one of short documents with few common terms, the whole
        query is searched."""
        statistics = self._text.scoring_statistics(terms)
        if statistics is None:
            return False
        _, average = statistics
        postings = sum(sum(self._text.doc_freqs(field, found).values()) for field, found in common.items())
        return postings > SHORT_SEARCH_FIXED_COST + STORED_WORD_COST * hits * average

    def _live_hits(
        self,
        terms: Sequence[str],
        size: int,
        allowed: list[int] | None,
        watermark: int,
        leave_out: Mapping[str, AbstractSet[str]] | None = None,
    ) -> tuple[list[tuple[float, int, tuple[str, str]]], bool]:
        """The text index's best `size` (score, rowid, (id, title)) that readers see, and
        whether there were as many. An entry of a document readers do not see yet (new,
        or a rebuild's) has no row here: ask for more until `size` are found or the index
        runs out."""
        wanted = size
        while True:
            hits = self._text.search(terms, wanted, allowed, leave_out)
            rows = self._rows([rowid for rowid, _ in hits], watermark)
            live = [(score, rowid, rows[rowid]) for rowid, score in hits if rowid in rows]
            if len(live) >= size or len(hits) < wanted:
                return live, len(live) >= size
            wanted *= 2

    def _common_shares(
        self, terms: Sequence[str], common: Mapping[str, AbstractSet[str]], hits: Sequence[tuple[int, str]], view: _View
    ) -> list[float] | None:
        """What the clauses of the `common` terms add to the BM25 of each of these
        (rowid, id) documents, scored from their stored words as the text index scores them
        (its N, document frequencies and mean length, which count replaced documents until
        a merge, and its rounded lengths); None when one has no stored words (a store indexed
        before they were kept). The words, laid out, go to `passage_bm25`, which the default
        ranker asks for next in the same search (`_FIRST_STAGE_WINDOW`): the whole query's
        words are found in them here, for both."""
        statistics = self._text.scoring_statistics(terms)
        if statistics is None:
            return None
        documents, average = statistics
        rowids = [rowid for rowid, _ in hits]
        asked = {field: Counter(found) for field, found in self._text.analysed(terms).items()}
        stems = stable_hashes(list(asked["stemmed"])).tolist()
        stored: dict[int, bytes] = {}
        try:
            for chunk in _chunks(rowids):
                stored.update(self._db.execute(
                    f"SELECT rowid, positions FROM passages WHERE rowid IN ({_marks(chunk)}) AND rowid <= ?", (*chunk, view.watermark)
                ).fetchall())
            pairs = self._vocabulary_pairs(stems)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read passages: {exc}") from None
        if len(stored) < len(rowids):
            return None
        words = StoredWords([stored[rowid] for rowid in rowids])
        query = self._passage_query(asked, documents, pairs)
        _FIRST_STAGE_WINDOW.set([_Window(
            self, {doc_id: stored[rowid] for rowid, doc_id in hits}, {doc_id: i for i, (_, doc_id) in enumerate(hits)},
            words, stems, pairs, asked, documents, query,
        )])
        return [float(share) for share in bm25_of_stored(words, query.counting(common), average)]

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
        self._commit_pending()
        columns = "corrected_k, corrected_topics, corrected_importances, backgrounds" if corrected else "k, topics, importances, NULL"
        stored: dict[str, tuple[int, bytes | None, bytes | None, bytes | None]] = {}
        with self._snapshot() as view:
            dim = view.info.embedding.dim if view.info else 0
            for chunk in _chunks(doc_ids):
                rows = self._db.execute(
                    f"SELECT id, {columns} FROM docs WHERE id IN ({_marks(chunk)}) AND rowid <= ? "
                    f"AND {'corrected_k' if corrected else 'k'} IS NOT NULL",
                    (*chunk, view.watermark),
                )
                stored.update((row[0], row[1:]) for row in rows)
        k_max = max((k for k, _, _, _ in stored.values()), default=0)
        found = [stored.get(doc_id, (0, None, None, None)) for doc_id in doc_ids]
        topics = _stacked([topic_bytes for _, topic_bytes, _, _ in found], k_max * dim).reshape(len(doc_ids), k_max, dim)
        importances = _stacked([importance_bytes for _, _, importance_bytes, _ in found], k_max)
        backgrounds = _stacked([background_bytes for _, _, _, background_bytes in found], k_max) if corrected else None
        missing = tuple(doc_id for doc_id in doc_ids if doc_id not in stored)
        return TopicBatch(tuple(doc_ids), topics, importances, missing, backgrounds)

    def doc_vectors(self, doc_ids: Sequence[str]) -> DocVectorBatch:
        self._commit_pending()
        stored: dict[str, bytes] = {}
        with self._snapshot() as view:
            model = view.info.doc2vec if view.info is not None else None
            dim = model.dim if model is not None else 0
            if model is None:
                return DocVectorBatch(tuple(doc_ids), np.zeros((len(doc_ids), 0), dtype=np.float32), missing=tuple(doc_ids))
            for chunk in _chunks(doc_ids):
                # Vectors of an earlier model (documents missing from the last training
                # corpus) are not comparable with this model's: they count as missing.
                rows = self._db.execute(
                    f"SELECT id, doc_vector FROM docs WHERE id IN ({_marks(chunk)}) "
                    "AND doc_vector_model = ? AND length(doc_vector) = ? AND rowid <= ?",
                    (*chunk, model.checksum, dim * _FLOAT32.itemsize, view.watermark),
                )
                stored.update(rows.fetchall())
        vectors = np.zeros((len(doc_ids), dim), dtype=np.float32)
        for row, doc_id in enumerate(doc_ids):
            blob = stored.get(doc_id)
            if blob is not None:
                vectors[row] = np.frombuffer(blob, dtype=_FLOAT32)
        missing = tuple(doc_id for doc_id in doc_ids if doc_id not in stored)
        return DocVectorBatch(tuple(doc_ids), vectors, missing=missing, model=model.checksum)

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        self._commit_pending()
        found: dict[str, Document] = {}
        with self._snapshot() as view:
            for chunk in _chunks(doc_ids):
                rows = self._db.execute(
                    f"SELECT id, title, body, fields FROM docs WHERE id IN ({_marks(chunk)}) AND rowid <= ?",
                    (*chunk, view.watermark),
                )
                for doc_id, title, body, fields in rows:
                    found[doc_id] = Document(doc_id, title, body, json.loads(fields))
        return found

    def close(self) -> None:
        """Commit what this run wrote and release the writer. A rebuild is not swapped in
        (only `publish` does that): its rows stay for the next `--rebuild` to resume."""
        try:
            if self._build is not None:
                self._rollback_text()
                self._build = None
            else:
                self._commit_pending()
        finally:
            self._text.close_writer()
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
            raise _store_error(f"cannot write to the embedded store in {self.directory}", exc, self.directory) from None
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _store_error(f"cannot write to the embedded store in {self.directory}", exc, self.directory) from None
            raise


def _store_error(failed: str, exc: BaseException, directory: Path) -> StoreError:
    """StoreFullError when SQLite (or the file system) says the disk is full, or when an
    I/O error comes with almost no free space left (SQLite says "disk I/O error" when it
    cannot create its shared-memory file, which a full disk refuses)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return full_disk(failed, exc.strerror or "")
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_FULL:
            return full_disk(failed, str(exc))
        if code == sqlite3.SQLITE_IOERR and free_bytes(directory) < NEARLY_FULL:
            return full_disk(failed, f"{exc}, {free_bytes(directory):,} bytes free")
    if isinstance(exc, PermissionError) or (isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY):
        # Searching writes too: SQLite's write-ahead log keeps its shared-memory file beside the database.
        return StoreError(
            f"{failed}: {exc}; the embedded store needs write access to its folder, also to search: "
            "make it writable, or choose another data dir (--data-dir, RERANKER_DATA_DIR)"
        )
    return StoreError(f"{failed}: {exc}")


_SQL_OPS = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}

# The values of the fields of a document (`docs`): a field's value, or each item of an array
# one by one (OpenSearch matches a filter on an array field when one of its values does).
# The CASE keeps json_each from ever reading a text value as JSON; it gives a field that is
# not an array (or an empty one) one row, read through `_ITEM`.
_VALUES = (
    "json_each(docs.fields) AS field, json_each(CASE WHEN field.type = 'array' AND json_array_length(field.value) > 0 "
    "THEN field.value ELSE '[null]' END) AS item"
)
_ITEM = "(CASE field.type WHEN 'array' THEN item.{0} ELSE field.{0} END)"
_KINDS = {"integer": "number", "real": "number", "text": "text", "true": "boolean", "false": "boolean"}
# A field of numbers beside texts that are not numbers ("n/a"): compared only with =.
_MIXED = "mixed"
# A number written as text, as SQLite's CAST(... AS NUMERIC) reads it whole ("2005", "-1.5e3").
_NUMERIC_TEXT = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _filter_sql(filters: Sequence[Filter], arrays: set[str], numeric_texts: AbstractSet[str]) -> tuple[str, list[object]]:
    """" AND ..." conditions on the title or a metadata field (from the JSON `fields`);
    `arrays`: the fields that hold an array in some document, read item by item (a
    slower way, about 2x over 50,000 documents, so only for them); `numeric_texts`: the
    fields of numbers some of which are written as text, compared as numbers."""
    where, params = "", list[object]()
    for item in filters:
        op = _SQL_OPS[item.op]
        number = "CAST({} AS NUMERIC)" if item.field in numeric_texts else "{}"
        if item.field == "title":
            where += f" AND docs.title {op} ?"
        elif item.field in arrays:
            where += f" AND EXISTS (SELECT 1 FROM {_VALUES} WHERE field.key = ? AND {number.format(_ITEM.format('value'))} {op} ?)"
        else:
            # By key, not by a JSON path: a path cannot name every key (one with a quote,
            # or one stored \u-escaped, as every non-ASCII key is).
            where += f" AND {number.format('(SELECT value FROM json_each(docs.fields) WHERE key = ?)')} {op} ?"
        params += [item.value] if item.field == "title" else [item.field, item.value]
    return where, params


def _blob(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=_FLOAT32).tobytes()


def _stacked(blobs: Sequence[bytes | None], width: int) -> npt.NDArray[np.float32]:
    """(len(blobs), width) float32: each blob's float32 values (None: none), zero-padded
    on the right. One join for a window: a frombuffer and a copy per row and array cost
    0.7 ms per window of 100 (50,000 papers; the rows' read 1.2 ms)."""
    padding = bytes(width * _FLOAT32.itemsize)
    joined = bytearray(b"".join((blob or b"") + padding[len(blob or b"") :] for blob in blobs))
    return np.frombuffer(joined, dtype=_FLOAT32).reshape(len(blobs), width)


def _chunks(items: Sequence[_T], size: int = 500) -> list[list[_T]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def _marks(chunk: Sequence[object]) -> str:
    return ",".join("?" * len(chunk))
