"""The write path: corpus lines -> documents -> word vectors -> topics -> store.

Indexing is resumable and idempotent: documents are written in batches (each batch one
transaction in the embedded store, one or more bulk requests in OpenSearch), and a
document whose id is already stored with the same content is not recomputed, so a run
that was killed (at any point: the stores keep what readers see whole) is completed by
running it again; a rebuild is built beside the index readers see and resumed the same
way, and publishes only the documents of the corpus its last run read (`Store.drop_absent`).
Topic extraction (`reranker.extraction`, which the read path shares) can run in worker
processes, one batch ahead of the writes. Bad lines, and documents the store refuses, are
reported with their file and line number and skipped; nothing already indexed is touched
by them.

When the index has a Doc2Vec model (`reranker train doc2vec`), each document written is
given a vector inferred by that model from the same tokens, so documents added after
training are not left without one. A rebuild starts an index without a model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_for_futures
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Literal, Protocol, Sequence

from reranker.datasets import parse_record
from reranker.embeddings import Word2VecParams, WordVectors, open_native, train_word2vec, trained_vectors
from reranker.errors import ConfigError, ForeignIndexError, IndexMismatchError, InputError, RankerUnavailableError, WorkerError
from reranker.extraction import Correction, estimate_centering, topics_of_tokens
from reranker.store import IndexInfo, PublishResult, Store
from reranker.store.text_index import passage_words
from reranker.text import content_words, stop_list_info, tokenize, tokenized_lines
from reranker.types import (
    Centering,
    CorrectedTopics,
    DocTopics,
    Document,
    EmbeddingInfo,
    PassageWords,
    StoredDocument,
)

if TYPE_CHECKING:  # gensim: only an index with a Doc2Vec model loads it (not every run, nor the topic workers)
    from reranker.doc2vec import Doc2VecModel

log = logging.getLogger(__name__)

# A batch is read, checked against the stored content hashes, extracted and written
# together (one transaction in the embedded store); it closes at whichever limit comes first.
BATCH_SIZE = 64
BATCH_BYTES = 4_000_000
# Below this corpus size, starting worker processes (~0.9 s) costs more than it saves:
# with 2 workers on 2 cores, 13 MB of 2,000-word documents indexed at 0.87x, 38 MB at 1.4x
# (bench/bench_index_workers.py).
PARALLEL_MIN_BYTES = 24_000_000


class ProgressLike(Protocol):
    """What `index_documents` needs of a progress bar (tqdm fits)."""

    def update(self, n: int) -> object: ...


@dataclass(frozen=True)
class Skipped:
    """A corpus line that was not indexed, and why."""

    location: str  # "file:line"
    doc_id: str | None
    reason: str

    def __str__(self) -> str:
        """`file:line: reason`, the reason led by the document's id where the line gave one,
        in the reader's own words for a line it refuses (`c.jsonl:3: id 'x': missing 'text'`)."""
        return f"{self.location}: {f'id {self.doc_id!r}: ' if self.doc_id is not None else ''}{self.reason}"

    def line(self) -> float:
        """The line number, for the report's file order (a line the store refused is
        reported after the batch that held it); unknown ("?") last."""
        number = self.location.rpartition(":")[2]
        return int(number) if number.isdigit() else math.inf


# What a line does whose id an earlier line of the same run used (see `index_documents`).
DuplicatePolicy = Literal["last", "error"]


@dataclass(frozen=True)
class IndexReport:
    """What one `index_corpus` run did."""

    indexed: int  # written (new or changed)
    unchanged: int  # already stored with the same content (a resumed or repeated run)
    skipped: tuple[Skipped, ...]
    total_documents: int  # in the store afterwards
    seconds: float
    replaced: int = 0  # of `indexed`, those that replaced a stored version (other content, or derived by an older DERIVATION)
    # Lines whose id a later line of the same run used again: (the earlier line, the later).
    duplicates: tuple[tuple[str, str], ...] = ()
    published: PublishResult | None = None  # what Store.publish() reported (an alias swap, for OpenSearch)
    # Documents written into an index with a Doc2Vec model that got no vector (the model
    # could not be loaded, or knows none of their words).
    without_doc_vector: int = 0
    # A rebuild's: documents of the interrupted rebuild it resumed whose ids its corpus no
    # longer holds, dropped before it was published (`Store.drop_absent`).
    dropped: int = 0


def check_corpus(path: Path) -> None:
    """InputError unless `path` is a corpus file with something in it."""
    if path.is_dir():
        raise InputError("is a directory, not a corpus file (JSONL: one {id, title, text} object per line)", str(path))
    if path.exists() and not path.is_file():
        # A pipe (`<(zcat corpus.jsonl.gz)`) or a device: indexing reads the file more than once.
        raise InputError("not a regular file (a pipe or a device?): save the corpus to a file and index that", str(path))
    if str(path) == "-" and not path.exists():
        # Meant as standard input, which is a pipe too.
        raise InputError("standard input cannot be indexed (indexing reads the corpus more than once): save the corpus to a file and index that", "-")
    if not path.is_file():
        raise InputError("no such corpus file", str(path))
    if path.stat().st_size == 0:
        raise InputError("the corpus file is empty: no document to index", str(path))


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
            if number == 1:
                line = line.removeprefix("\ufeff")  # a byte-order mark, as Windows tools write
            if not line.strip():
                yield location, Skipped(location, None, "empty line"), len(raw)
                continue
            try:
                yield location, parse_record(line, location), len(raw)
            except InputError as exc:
                reason = str(exc).removeprefix(f"{location}: ")
                yield location, Skipped(location, None, reason), len(raw)


# What the indexer derives from a document (its topics, corrected topics, passages). A new
# value makes every stored document's fingerprint differ, so the next `reranker index` of
# the same corpus recomputes them all instead of skipping them as unchanged.
# 2: the corrected topics of readable words only; the stems kept for best passages.
# 3: the words kept for best passages (both BM25 fields), with the stem of each.
# 4: those words kept by word, each with its positions (`WordPositions`).
# 5: words read from the text after its character references are decoded and its line-end
#    soft hyphens joined (`reranker.text.plain_text`).
DERIVATION = 5


def content_hash(document: Document) -> str:
    """A stable fingerprint of everything indexed about a document, and of how."""
    payload = json.dumps([DERIVATION, document.title, document.text, document.fields], sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# A new index's centering (`estimate_centering`) is estimated from an even sample of about
# this much of the corpus file (all of it when smaller): every line of a small corpus, every
# n-th of a large one, so that a corpus sorted by subject is still sampled across subjects.
CENTERING_SAMPLE_BYTES = 32_000_000


def sample_corpus(path: Path, budget: int = CENTERING_SAMPLE_BYTES) -> Iterator[Document]:
    """An even sample of about `budget` bytes of the corpus's documents (bad lines skipped).

    Only the sampled lines are decoded and parsed: this pass runs before indexing starts.
    """
    stride = max(1, math.ceil(path.stat().st_size / budget))
    with path.open("rb") as handle:
        for number, raw in enumerate(handle):
            if number % stride:
                continue
            try:
                yield parse_record(raw.decode("utf-8"), f"{path}:{number + 1}")
            except (UnicodeDecodeError, InputError):
                continue  # the indexing pass reports it


# What extraction gives the writer for one document: its topics, in-vocabulary and
# out-of-vocabulary token counts, its content words joined by spaces (for the store's
# text index, so that the text is tokenized once, in the worker), its corrected topics,
# and the words' stems joined by spaces when the store asks for them (`Store.word_stemmer`),
# with the words as it keeps them for best passages (`passage_words`).
Extraction = tuple[DocTopics, int, int, str, CorrectedTopics | None, str | None, PassageWords | None]
# A store's `word_stemmer`.
Stemmer = Callable[[Sequence[str]], list[str]]


# How often a wait for a batch's results looks whether a topic worker has ended.
WORKER_WATCH_SECONDS = 0.5


class TopicExtractor:
    """Topics for batches of documents, in this process or in a pool of workers.

    With `workers` > 1, batches go to spawned processes that reopen the same memory-mapped
    vectors (no copy); `submit` returns at once, so the caller writes the previous batch
    while this one is computed.
    """

    def __init__(
        self,
        vectors: WordVectors,
        k: int,
        stopwords: frozenset[str] | None,
        workers: int = 1,
        centering: Centering | None = None,
        stemmer: Stemmer | None = None,
    ) -> None:
        self.vectors, self.k, self.stopwords, self.stemmer = vectors, k, stopwords, stemmer
        self.correction = Correction.of(centering, vectors) if centering is not None else None
        self.workers = workers if vectors.path is not None else 1
        self._pool: ProcessPoolExecutor | None = None
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,  # type: ignore[arg-type]  # typeshed wants no-arg
                initargs=(vectors.path, vectors.info, k, stopwords, self.correction, stemmer),  # type: ignore[arg-type]
            )

    def submit(self, documents: list[Document]) -> Callable[[], list[Extraction]]:
        """Start on `documents`; the returned function waits for their results, in order."""
        if self._pool is None or len(documents) < 2:
            done = _topics_of(documents, self.vectors, self.k, self.stopwords, self.correction, self.stemmer)
            return lambda: done
        size = -(-len(documents) // (self.workers * 2))
        try:
            # The pool starts its workers here. They inherit SIGINT blocked: Ctrl-C, which the
            # terminal sends to every process of the group, is the parent's to handle (it stops
            # the pool and says what is kept); a worker interrupted while it started printed a
            # traceback of its imports, or of a half-sent start-up message. Blocked, not
            # ignored: an interrupt meanwhile reaches this process when the mask is restored.
            with _interrupts_deferred():
                _start_workers(self._pool)
                futures = [self._pool.submit(_worker_topics, documents[i : i + size]) for i in range(0, len(documents), size)]
        except BrokenProcessPool:
            raise self._worker_ended() from None

        def waited() -> list[Extraction]:
            try:
                self._wait_watching_workers(futures)
                return [result for future in futures for result in future.result()]
            except BrokenProcessPool:
                raise self._worker_ended() from None

        return waited

    def _wait_watching_workers(self, futures: list[Future[list[Extraction]]]) -> None:
        """Return once every future is done; raise BrokenProcessPool if a worker ends first.

        CPython 3.11's pool notices a worker gone only while no result is arriving: a
        worker killed in the middle of writing a batch's results leaves half a message,
        whose rest the pool's thread then waits for, for good. Its futures never end, and
        `reranker index` hung (one run in about 30 of the killed-worker test). A worker
        ends only when it fails, so one gone while work is outstanding breaks the pool,
        whoever sees it first.
        """
        pending = set(futures)
        while pending:
            _, pending = wait_for_futures(pending, timeout=WORKER_WATCH_SECONDS)
            if pending and self._a_worker_ended():
                raise BrokenProcessPool("a topic-extraction worker ended with batches outstanding")

    def _workers(self) -> list[multiprocessing.process.BaseProcess]:
        # A private attribute (the pool's own processes, none of anyone else's): no public
        # call reaches them. Copied: the pool's thread changes the dict as workers end.
        return list(dict(getattr(self._pool, "_processes", None) or {}).values())

    def _a_worker_ended(self) -> bool:
        """Whether one of the pool's workers has ended (its sentinel is ready)."""
        return bool(multiprocessing.connection.wait([worker.sentinel for worker in self._workers()], timeout=0))

    def _worker_ended(self) -> WorkerError:
        """The error for a pool a worker left abruptly, once its other workers are gone."""
        _end_broken_pool(self._workers(), self._results_writer())
        # What is written stays written (each batch lands whole or not at all): a second
        # run skips it and goes on.
        # A script of the caller's own that starts indexing at import, without a __main__
        # guard, gets here too: each spawned worker imports it again and fails at once
        # (CPython prints why above this error).
        return WorkerError(
            "a topic-extraction worker process ended abruptly (killed, or out of memory? or, from a script of your "
            "own, one that starts indexing without an `if __name__ == \"__main__\":` guard); the documents written "
            "before it are kept: run the same command again to go on (--workers 1 uses no workers)"
        )

    def _results_writer(self) -> Connection | None:
        """This process's writing end of the pool's results pipe (private, as `_workers`)."""
        return getattr(getattr(self._pool, "_result_queue", None), "_writer", None)

    def close(self) -> None:
        """Stop the pool, once its workers finished what they were sending.

        Waited for here rather than by `shutdown(wait=True)`, which joins the pool's thread
        without a watch: when a worker is killed while it sends results, whether before
        this call (a run that stops for a duplicate id or a full disk after losing one) or
        during it, that thread waits for the rest of a message for good. A worker ends with
        0 when the pool tells it to stop; any other exit is one lost.
        """
        if self._pool is None:
            return
        # Read first: shutdown(wait=False) drops the pool's references to them.
        thread = getattr(self._pool, "_executor_manager_thread", None)
        workers, writer = self._workers(), self._results_writer()
        self._pool.shutdown(wait=False, cancel_futures=True)
        while thread is not None and thread.is_alive():
            thread.join(WORKER_WATCH_SECONDS)
            if any(worker.exitcode not in (None, 0) for worker in workers):
                _end_broken_pool(workers, writer)

    def __enter__(self) -> "TopicExtractor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _end_broken_pool(workers: list[multiprocessing.process.BaseProcess], writer: Connection | None) -> None:
    """Let a pool a worker left abruptly shut down: its other workers killed, and this
    process's writing end of its results pipe closed.

    CPython 3.11's pool, once broken, SIGTERMs its workers and waits for its threads, but a
    worker it missed stays blocked sending a batch's results that nobody reads, and holds
    the pipe the pool's feeder thread is blocked writing the next batch to: `reranker
    index` then hung on exit, for good (seen with a worker killed while batches of long
    papers were queued). Killing what is left ends both writes. (A pool past 3.11 does no
    harm to kill twice.)

    The pool's thread may also be waiting for the rest of a message a killed worker was
    writing (see TopicExtractor._wait_watching_workers). With the workers gone, this process
    holds the last writing end of that pipe: closed, the wait ends at the end of the pipe,
    which breaks the pool, so that it shuts down and this process can exit.
    """
    for worker in workers:
        if worker.is_alive():
            worker.kill()
    if writer is not None:
        writer.close()


def _start_workers(pool: ProcessPoolExecutor) -> None:
    """Every worker of `pool` started before its first task. CPython 3.11's pool starts
    them one per `submit`, while the thread that watches the first already runs: when that
    worker dies at once, the thread shuts the pool down iterating the dict of workers that
    the next `submit` adds to, and prints a traceback ("dictionary changed size during
    iteration") above our one-line error (1 run in 11 of the killed-worker test, under load).
    Private names, read with care: a pool without them starts its workers as it likes."""
    launch = getattr(pool, "_launch_processes", None)
    if launch is not None and getattr(pool, "_executor_manager_thread", True) is None:
        launch()


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C held back while inside, then raised: SIGINT blocked in this thread and in the
    processes it starts, and (in the main thread) Python's handler only noting it, since
    another thread may receive it. A parent interrupted between starting a worker and
    sending it its start-up message made the worker fail with a traceback."""
    noted: list[int] = []
    handler = None
    # Only Python's own handler: one that ignores Ctrl-C (a background job) keeps ignoring it.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        handler = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
    if noted:
        raise KeyboardInterrupt


_WORKER: tuple[WordVectors, int, frozenset[str] | None, Correction | None, Stemmer | None] | None = None


def _init_worker(
    path: Path,
    info: EmbeddingInfo,
    k: int,
    stopwords: frozenset[str] | None,
    correction: Correction | None,
    stemmer: Stemmer | None,
) -> None:
    global _WORKER
    from threadpoolctl import threadpool_limits

    # Ctrl-C is the parent's (see TopicExtractor.submit): ignored here, which also drops one
    # that arrived while this process started with SIGINT blocked.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # So a worker must not outlive its parent: one the parent started just as it was
    # interrupted (or killed) is never told to stop, and would wait for batches forever.
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with_parent, args=(parent.sentinel,), daemon=True).start()
    threadpool_limits(limits=1, user_api="blas")
    _WORKER = (open_native(path, info), k, stopwords, correction, stemmer)


def _exit_with_parent(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def _worker_topics(documents: list[Document]) -> list[Extraction]:
    assert _WORKER is not None, "worker not initialised"
    return _topics_of(documents, *_WORKER)


def _topics_of(
    documents: list[Document],
    vectors: WordVectors,
    k: int,
    stopwords: frozenset[str] | None,
    correction: Correction | None,
    stemmer: Stemmer | None,
) -> list[Extraction]:
    extracted: list[Extraction] = []
    for doc in documents:
        if correction is not None:
            tokens, readable_list = content_words(doc.full_text, stopwords)
            readable: Counter[str] | None = Counter(readable_list)
        else:
            tokens, readable = tokenize(doc.full_text, stopwords), None
        topics, n_tokens, oov, corrected = topics_of_tokens(tokens, vectors, k, correction, readable)
        stems, passages = None, None
        if stemmer is not None:
            stemmed = stemmer(tokens)
            stems, passages = " ".join(stemmed), passage_words(tokens, stemmed)
        extracted.append((topics, n_tokens, oov, " ".join(tokens), corrected, stems, passages))
    return extracted


def index_documents(
    records: Iterable[tuple[str, Document | Skipped, int]],
    store: Store,
    vectors: WordVectors,
    k: int,
    *,
    stopwords: frozenset[str] | None = None,
    rebuild: bool = False,
    progress: ProgressLike | None = None,
    workers: int = 1,
    data_dir: Path | None = None,
    centering: Centering | None = None,
    on_duplicate: DuplicatePolicy = "last",
) -> IndexReport:
    """Index `records` (as `read_corpus` yields them) into `store`, then publish.

    on_duplicate: what a line whose id an earlier line of the run used does: "last" (it
    wins; the pair is reported) or "error" (InputError naming both lines: the run stops
    there, and what it wrote before stays).

    Raises IndexMismatchError when the store holds documents built with other vectors or
    another K and `rebuild` is False. Documents the store refuses are reported in
    `skipped` with its reason; everything else is written. `data_dir`: where the index's
    Doc2Vec model is (`<data_dir>/doc2vec/`), if it has one.

    `centering`: the correction a new (or rebuilt) index records; without it, one is
    estimated from `records` themselves. An index that holds documents keeps its own, and
    so does an interrupted rebuild that this run resumes.
    """
    started = time.perf_counter()
    given = stop_list_info(stopwords)
    if given != store.stop_list:
        # The store records its own list and checks the next runs against it: the words
        # written here must be read with that one.
        raise ConfigError(f"indexing with {given.source}, into a store opened with {store.stop_list.source}: use one list for both")
    if centering is None and needs_centering(store, rebuild):
        records = list(records)
        centering = estimate_centering((item for _, item, _ in records if isinstance(item, Document)), vectors, stopwords)
    store.initialise(IndexInfo(embedding=vectors.info, k=k, centering=centering), rebuild=rebuild)
    info = store.index_info()
    centering = info.centering if info is not None else None
    doc2vec, no_doc2vec_reason = _doc2vec_model(store, data_dir)
    skipped: list[Skipped] = []
    indexed = unchanged = replaced = without_doc_vector = 0
    first_seen: dict[str, str] = {}  # id -> the line it was last read on
    duplicates: list[tuple[str, str]] = []

    def prepare(batch: list[tuple[str, Document]]) -> tuple[list[tuple[str, Document, str]], Callable[[], list[Extraction]]]:
        """Drop unchanged documents, start topic extraction for the rest."""
        nonlocal unchanged, replaced
        stored_hashes = store.content_hashes([doc.id for _, doc in batch])
        # A later line with the same id replaces an earlier one, as in the store.
        latest = {doc.id: (location, doc) for location, doc in batch}
        todo: list[tuple[str, Document, str]] = []
        for location, doc in latest.values():
            digest = content_hash(doc)
            if stored_hashes.get(doc.id) == digest:
                unchanged += 1
            else:
                replaced += doc.id in stored_hashes
                todo.append((location, doc, digest))
        return todo, extractor.submit([doc for _, doc, _ in todo])

    def write(todo: list[tuple[str, Document, str]], results: list[Extraction]) -> None:
        nonlocal indexed, without_doc_vector
        ready: list[StoredDocument] = []
        locations: dict[str, str] = {}
        for (location, doc, digest), (doc_topics, n_tokens, n_oov, words, corrected, stems, passages) in zip(todo, results):
            if doc_topics.k == 0:
                reason = "no in-vocabulary words" + (f" ({n_oov} out-of-vocabulary)" if n_oov else "")
                skipped.append(Skipped(location, doc.id, reason))
                continue
            ready.append(StoredDocument(doc, doc_topics, digest, n_tokens, n_oov, words, corrected, stems, passages))
            locations[doc.id] = location
        failures = store.upsert(ready) if ready else []
        for failure in failures:
            skipped.append(Skipped(locations.get(failure.doc_id, "?"), failure.doc_id, failure.reason))
        indexed += len(ready) - len(failures)
        if no_doc2vec_reason is not None:
            refused = {failure.doc_id for failure in failures}
            written = [stored.document for stored in ready if stored.document.id not in refused]
            without_doc_vector += len(written) - _write_doc_vectors(store, doc2vec, written, stopwords)

    batch: list[tuple[str, Document]] = []
    in_flight: tuple[list[tuple[str, Document, str]], Callable[[], list[Extraction]]] | None = None
    with TopicExtractor(vectors, k, stopwords, workers, centering, store.word_stemmer) as extractor:

        def flush() -> None:
            # Extraction of this batch runs while the previous one is written.
            nonlocal in_flight
            submitted = prepare(batch) if batch else None
            batch.clear()
            if in_flight is not None:
                todo, results = in_flight
                write(todo, results())
            in_flight = submitted

        batch_bytes = 0
        try:
            for location, item, size in records:
                if isinstance(item, Skipped):
                    skipped.append(item)
                else:
                    earlier = first_seen.get(item.id)
                    if earlier is not None:
                        if on_duplicate == "error":
                            raise InputError(f"document {item.id!r} was already read on line {earlier.rsplit(':', 1)[-1]} (--on-duplicate error)", location)
                        duplicates.append((earlier, location))
                    first_seen[item.id] = location
                    batch.append((location, item))
                    batch_bytes += size
                    if len(batch) >= BATCH_SIZE or batch_bytes >= BATCH_BYTES:
                        flush()
                        batch_bytes = 0
                if progress is not None:
                    progress.update(size)
        except KeyboardInterrupt:
            # Keep the batch whose topics are already computed; the rest resumes next run.
            if in_flight is not None:
                write(in_flight[0], in_flight[1]())
            raise
        # Twice: a flush writes the batch in flight and starts the next, so the first
        # starts the last batch and the second writes it.
        flush()
        flush()
    # A rebuild publishes the corpus it read, whatever an interrupted rebuild it resumed
    # wrote before: "read" is every id a line gave, written or not (a document the store
    # refused, or whose words are all unknown, is still one of the corpus, and an older
    # version of it stays). A line that is no document names no id.
    dropped = store.drop_absent(first_seen.keys() | {item.doc_id for item in skipped if item.doc_id}) if rebuild else 0
    published = store.publish()
    # In file order: a line the reader refuses is listed as it is read, one without an
    # in-vocabulary word or refused by the store once its batch is written, later.
    skipped.sort(key=Skipped.line)
    # Skipped lines are the report's to tell (the CLI prints each one once), not the log's.
    for item in skipped:
        log.debug("skipped %s", item)
    if without_doc_vector:
        log.warning(
            "%d documents were indexed without a Doc2Vec vector (%s); the doc2vec ranker ranks "
            "them last until `reranker train doc2vec CORPUS` runs again",
            without_doc_vector, no_doc2vec_reason or "no word known to the model",
        )
    return IndexReport(
        indexed=indexed,
        unchanged=unchanged,
        replaced=replaced,
        duplicates=tuple(duplicates),
        skipped=tuple(skipped),
        total_documents=store.count(),
        seconds=time.perf_counter() - started,
        published=published,
        without_doc_vector=without_doc_vector,
        dropped=dropped,
    )


def needs_centering(store: Store, rebuild: bool) -> bool:
    """Whether indexing into `store` sets the index's centering (a new or rebuilt index)."""
    if rebuild:
        return True
    try:
        return store.index_info() is None or store.count() == 0
    except (IndexMismatchError, ForeignIndexError):
        return False  # an index of an older version, or not built here: `initialise` says what to do


def _doc2vec_model(store: Store, data_dir: Path | None) -> tuple[Doc2VecModel | None, str | None]:
    """(the index's Doc2Vec model or None, why documents get no vector: "" when they
    will, None when the index has no model)."""
    info = store.index_info()
    if info is None or info.doc2vec is None:
        return None, None
    if data_dir is None:
        return None, "no data directory to load the index's Doc2Vec model from"
    from reranker.doc2vec import load_for_index

    try:
        return load_for_index(info, data_dir), ""
    except RankerUnavailableError as exc:
        return None, str(exc)


def _write_doc_vectors(
    store: Store, model: Doc2VecModel | None, documents: list[Document], stopwords: frozenset[str] | None
) -> int:
    """Infer and store the Doc2Vec vectors of freshly written documents; how many were stored."""
    if model is None or not documents:
        return 0
    from reranker.doc2vec import infer_vectors

    vectors = infer_vectors(model, documents, stopwords)
    failures = store.store_doc_vectors(model.info, vectors) if vectors else []
    for failure in failures:
        log.warning("no Doc2Vec vector stored for %s: %s", failure.doc_id, failure.reason)
    return len(vectors) - len(failures)


def index_corpus(
    path: Path,
    store: Store,
    vectors: WordVectors,
    k: int,
    *,
    stopwords: frozenset[str] | None = None,
    rebuild: bool = False,
    show_progress: bool = True,
    workers: int = 1,
    data_dir: Path | None = None,
    on_duplicate: DuplicatePolicy = "last",
) -> IndexReport:
    """Index a JSONL corpus file, with a progress bar over its bytes on stderr.

    `workers` topic-extraction processes are used for corpora of PARALLEL_MIN_BYTES and up.
    Raises InputError for a path that is not a corpus file, or an empty one; lines that are
    not documents are reported in `skipped`, not raised.
    """
    from tqdm import tqdm

    check_corpus(path)
    with tqdm(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"indexing {path.name}",
        disable=not show_progress,
        leave=False,
    ) as bar:
        centering = estimate_centering(sample_corpus(path), vectors, stopwords) if needs_centering(store, rebuild) else None
        return index_documents(
            read_corpus(path),
            store,
            vectors,
            k,
            stopwords=stopwords,
            rebuild=rebuild,
            progress=bar,
            workers=workers if path.stat().st_size >= PARALLEL_MIN_BYTES else 1,
            data_dir=data_dir,
            centering=centering,
            on_duplicate=on_duplicate,
        )



def corpus_sentences(corpus: Path, stopwords: frozenset[str]) -> tuple[list[list[str]], int, list[Skipped]]:
    """(sentences, documents read, lines skipped) of a corpus, for word2vec: one sentence
    per line of a document, so word windows stay inside a paragraph, tokenized as the
    topics are."""
    sentences: list[list[str]] = []
    documents = 0
    skipped: list[Skipped] = []
    for _, item, _ in read_corpus(corpus):
        if isinstance(item, Skipped):
            skipped.append(item)
            continue
        documents += 1
        sentences.extend(tokenized_lines(item.full_text, stopwords))
    return sentences, documents, skipped


@dataclass(frozen=True)
class TrainedVectors:
    """Word vectors trained on a corpus: what they are, where, and from how much text."""

    info: EmbeddingInfo
    path: Path
    documents: int  # 0 when an earlier run's vectors were reused
    sentences: int
    reused: bool


def trained_vectors_path(corpus: Path, data_dir: Path, params: Word2VecParams, stopwords: frozenset[str]) -> Path:
    """Where `train_corpus_vectors` keeps the vectors of this corpus and settings: the
    name is a digest of the corpus file's bytes, the parameters, the stop list and
    DERIVATION (which counts changes to how words are read from a text, `plain_text`'s
    among them), so the same command reuses them and any change trains anew."""
    digest = hashlib.sha256()
    try:
        with corpus.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise InputError(f"cannot read corpus: {exc.strerror}", str(corpus)) from None
    digest.update(json.dumps([params.__dict__, sorted(stopwords), DERIVATION]).encode())
    return data_dir / "word2vec" / f"{corpus.stem}-{digest.hexdigest()[:16]}.kv"


def train_corpus_vectors(
    corpus: Path,
    data_dir: Path,
    stopwords: frozenset[str],
    params: Word2VecParams = Word2VecParams(),
    *,
    workers: int = 1,
    show_progress: bool = False,
) -> TrainedVectors:
    """CBOW word2vec trained on `corpus` (the paper's domain vectors), saved under
    `<data_dir>/word2vec/`; an earlier run's vectors of the same corpus and
    settings are reused. Raises InputError for an unreadable corpus, VectorsError when it has no words.
    """
    from tqdm import tqdm

    path = trained_vectors_path(corpus, data_dir, params, stopwords)
    done = trained_vectors(path)
    if done is not None:
        return TrainedVectors(done, path, 0, 0, reused=True)
    sentences, documents, _ = corpus_sentences(corpus, stopwords)
    with tqdm(total=params.epochs, unit="epoch", desc="training word2vec", disable=not show_progress, leave=False) as bar:
        info = train_word2vec(sentences, path, params, workers=workers, on_epoch=lambda _: bar.update(1))
    return TrainedVectors(info, path, documents, len(sentences), reused=False)
