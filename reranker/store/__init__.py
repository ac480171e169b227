"""The seam in front of storage.

Everything above this package talks to a `Store`. The embedded store (BM25 from a tantivy
index, topic matrices as float32 blobs in SQLite) is the default; the OpenSearch store (BM25 from
the cluster, topic matrices as base64 `binary` fields) is selected by
`Settings.opensearch_url`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import re
import socket
import sys
import threading
import time
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from dataclasses import asdict, dataclass, fields
from typing import AbstractSet, Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

import cachetools
import numpy as np

from reranker.config import Settings
from reranker.errors import IndexMismatchError, InputError
from reranker.text import load_stopwords
from reranker.types import (
    LONG_RANGE,
    Candidate,
    Centering,
    Document,
    DocVectorBatch,
    EmbeddingInfo,
    Filter,
    StopListInfo,
    StoredDocument,
    TopicBatch,
    WriteFailure,
)

# The first stage reads at most this many content words of a query (stop words and
# numbers are not counted), on every store: a summary has about 90, an abstract rarely
# 300, and a longer query would otherwise cost time in proportion to its length.
MAX_QUERY_TERMS = 300

# When the store calls of the current request must have ended (time.monotonic()), or None.
_DEADLINE: ContextVar[float | None] = ContextVar("reranker_store_deadline", default=None)


def start_time_limit(seconds: float) -> Token[float | None]:
    """Store calls made from here on (in this thread, or in a thread that runs a copy of
    this context) must end within `seconds` from now: a cluster call gets only the time
    left and fails with StoreUnavailableError when none is. The embedded store needs no
    limit: its first stage is bounded by MAX_QUERY_TERMS. A request's hooks start and end
    it: pass the token to `end_time_limit`."""
    return _DEADLINE.set(time.monotonic() + seconds)


def end_time_limit(token: Token[float | None]) -> None:
    _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left under the current time limit (`start_time_limit`), or None when there is none."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


# What the current request's cluster calls send as X-Opaque-Id (the service's request id,
# or the caller's own X-Opaque-Id), or None outside a request.
_OPAQUE_ID: ContextVar[str | None] = ContextVar("reranker_store_opaque_id", default=None)


def start_opaque_id(value: str) -> Token[str | None]:
    """Tag the cluster calls made from here on (in this context, and in threads that run a
    copy of it) with `value` as X-Opaque-Id; pass the token to `end_opaque_id`."""
    return _OPAQUE_ID.set(value)


def end_opaque_id(token: Token[str | None]) -> None:
    _OPAQUE_ID.reset(token)


def opaque_id() -> str | None:
    return _OPAQUE_ID.get()


@dataclass(frozen=True)
class PublishResult:
    """What `Store.publish()` did where readers go through an alias (the OpenSearch store):
    the alias now points at `current`; `swapped` when this call moved it, from `previous`."""

    current: str
    previous: tuple[str, ...]
    swapped: bool


@dataclass(frozen=True)
class RunClaim:
    """Who holds a store's exclusive claim to write (a `reranker index` run, a compaction,
    an alias move): both stores refuse a second writer with `claimed_message`, naming it.
    The embedded store's claim is tantivy's writer lock (it goes with its process, and this
    record, beside it, only names the holder); the OpenSearch store's is a document (see
    reranker/store/opensearch_claim.py)."""

    command: str  # "reranker index --rebuild", "reranker compact", ...
    host: str
    pid: int
    started: str  # ISO 8601, UTC, to the second
    # The PID namespace `pid` is a number of (Linux: "pid:[4026531836]"; None where none is
    # read): containers sharing the host's name (`--network host`, a pod's `hostNetwork`)
    # each number their processes from 1, so a host name and a pid alone name no process.
    pid_namespace: str | None = None

    @classmethod
    def mine(cls, command: str) -> "RunClaim":
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return cls(command, socket.gethostname(), os.getpid(), started, _pid_namespace())

    @classmethod
    def from_json(cls, value: Any) -> "RunClaim | None":
        """None for a record this version cannot read (half written, say)."""
        try:
            namespace = value.get("pid_namespace")
            return cls(
                str(value["command"]), str(value["host"]), int(value["pid"]), str(value["started"]),
                namespace if isinstance(namespace, str) else None,
            )
        except (AttributeError, KeyError, TypeError, ValueError):
            return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def is_local(self) -> bool:
        """Is `pid` a process number this process can look up: the holder ran on this host,
        in this PID namespace? (A record without one, an older version's, is not.)"""
        return self.host == socket.gethostname() and self.pid_namespace == _pid_namespace()

    def on_this_host_and_gone(self) -> bool:
        """Is the holder a process of this host that no longer runs (killed, say)?"""
        if not self.is_local():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process: running
            return False
        return False


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:  # no /proc (macOS), or not readable
        return None


def claimed_message(what: str, holder: RunClaim | None, then: str) -> str:
    """The one line that refuses a second writer: what is claimed, by whom, since when,
    and `then`, what to do."""
    if holder is None:
        return f"{what} is being written by another process; {then}"
    started = holder.started.replace("T", " ").replace("+00:00", " UTC")
    return f"{what} is being written by `{holder.command}` on {holder.host} (pid {holder.pid}, started {started}); {then}"


@dataclass(frozen=True)
class CompactResult:
    """What `Store.compact()` did: the first stage's index over `documents` documents, in
    `segments_before` segments before and `segments_after` after."""

    documents: int
    segments_before: int
    segments_after: int


@dataclass(frozen=True)
class Doc2VecInfo:
    """Which Doc2Vec model produced an index's document vectors (`reranker train doc2vec`).

    checksum: sha256 of the saved model (its file name under `<data_dir>/doc2vec/`).
    mode: "dbow" (PV-DBOW) or "dm" (PV-DM). infer_epochs and seed fix how a query
    vector is inferred, so every process infers the same vector for the same query.
    """

    checksum: str
    dim: int
    mode: str
    epochs: int
    min_count: int
    window: int
    seed: int
    infer_epochs: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> "Doc2VecInfo | None":
        """The record as an index's metadata holds it; None when absent or unreadable."""
        if not isinstance(raw, Mapping):
            return None
        try:
            values = {f.name: raw[f.name] for f in fields(cls)}
            return cls(
                checksum=str(values["checksum"]),
                mode=str(values["mode"]),
                **{name: int(value) for name, value in values.items() if name not in ("checksum", "mode")},
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class IndexInfo:
    """What an index was built with. Changing any of the vectors, K or the stop list means
    rebuilding it.

    doc2vec: the Doc2Vec model whose vectors the documents carry (None until one is
    trained; a rebuild drops it). Not part of `check`: the Doc2Vec ranker compares it
    when it scores.
    """

    embedding: EmbeddingInfo
    k: int
    doc2vec: Doc2VecInfo | None = None
    # The common-direction correction of the corrected ranker (None: an index built before
    # it, which the corrected ranker refuses). Fixed when the index is first built; more
    # documents indexed later are corrected the same way.
    centering: Centering | None = None
    # The stop list its words were read with: BM25's entries, the topics, a query's words
    # (None: an index built before indexes recorded it, which every stop list may use).
    stopwords: StopListInfo | None = None

    def check(self, embedding: EmbeddingInfo, k: int | None = None, stopwords: StopListInfo | None = None) -> None:
        """Raise IndexMismatchError unless `embedding` (and `k` and `stopwords`, if given)
        match."""
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
        if stopwords is not None:
            check_stop_list(self.stopwords, stopwords)


def check_stop_list(built: StopListInfo | None, used: StopListInfo) -> None:
    """Raise IndexMismatchError unless an index whose words were read with `built` (None:
    not recorded, taken with any) may be read with `used`."""
    if built is not None and built != used:
        raise IndexMismatchError(
            f"the index was built with {built.source or 'another stop list'} (sha256 {built.checksum[:12]}), "
            f"not {used.source or 'this stop list'} (sha256 {used.checksum[:12]}): use the same "
            "(--stopwords, RERANKER_STOPWORDS) or rebuild the index (reranker index --rebuild)"
        )


K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A thread-safe LRU map bounded in bytes (`size_of` tells an entry's size).

    cachetools' LRUCache with `getsizeof` does the bookkeeping; this adds the lock (it
    is not thread-safe, and a worker's request threads share these caches) and two rules
    of ours: a value larger than the whole cache is not kept (cachetools raises), and
    putting a key already there keeps the first value (both are the same content).
    """

    def __init__(self, max_bytes: int, size_of: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._entries: cachetools.LRUCache[K, V] = cachetools.LRUCache(maxsize=max_bytes, getsizeof=size_of)
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """What the entries held now add up to, by `size_of`."""
        return int(self._entries.currsize)

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._entries.get(key)  # a hit becomes the most recently used

    def put(self, key: K, value: V) -> None:
        if self._size_of(value) > self.max_bytes:
            return
        with self._lock:
            if key not in self._entries:
                self._entries[key] = value  # evicts the least recently used past max_bytes

    def __len__(self) -> int:
        return len(self._entries)


# The content keys of the texts read lately, by the text object itself (its id, which no
# other object can take while the entry keeps the text alive: 8 MB of them, about two windows
# of 100 long papers). A request reads a sent text's key several times (for its topics, its
# word ids, its one reading of its words and its terms for the best passage): SHA-256 over a
# window of 100 long papers costs about 5 ms, and a cache by content would compare the texts
# themselves, 3.5 MB, at each read.
CONTENT_KEY_BYTES = 8 * 2**20


def _content_key_cache() -> LruCache[int, tuple[str, str]]:
    return LruCache(CONTENT_KEY_BYTES, lambda found: sys.getsizeof(found[0]) + 100)


_content_keys = _content_key_cache()


def content_key(text: str) -> str:
    """The SHA-256 (hex) of a text: what the caches of sent texts' topics, word ids and
    terms keep them by, so that the same text sent again is read once. Computed once per
    text object while it is among those read lately."""
    found = _content_keys.get(id(text))
    if found is None:
        found = (text, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())
        _content_keys.put(id(text), found)
    return found[1]


# How a caller gives a store a sent text's content words (`reranker.text.tokenize` with the
# store's stop list) where it reads them anyway, `numbered` (each distinct word once, and
# the text as numbers into them): the engine reads a new text once, for its corrected
# topics and its terms both (`Engine.read_words`). A store reads a text itself without one.
ReadWords = Callable[[str], tuple[Sequence[str], Sequence[int]]]


_INTEGER = re.compile(r"-?[0-9]+")


# How much of a filter's value an error message repeats: a value may be 8,191 characters.
_SHOWN_VALUE_CHARS = 60


def value_shown(value: object) -> str:
    """A filter's value as error messages repeat it: its repr, a long one cut short."""
    shown = repr(value)
    if len(shown) > _SHOWN_VALUE_CHARS:
        shown = f"{shown[:_SHOWN_VALUE_CHARS]}... ({len(str(value)):,} characters)"
    return shown


def filter_shown(item: Filter) -> str:
    """`'year' (gte 'abc')`: a filter as error messages name it."""
    return f"{item.field!r} ({item.op} {value_shown(item.value)})"


def filter_for_field(item: Filter, kind: str | None) -> Filter:
    """`item` with its value read as the field's values are, as OpenSearch reads a term or
    range value by the field's mapping: "2010" for a field of numbers is 2010, 2010 for a
    field of text is "2010". `kind`: "number", "text" or "boolean"; None (values of
    several kinds, or a kind this does not know) leaves the value as it is.

    Raises InputError for a value the field's values cannot be compared with ("abc" for
    a field of numbers): without it the filter would silently match nothing (or, in
    SQLite's order, where every number sorts before every text, everything)."""
    value = item.value
    shown = filter_shown(item)
    if isinstance(value, float) and not math.isfinite(value):
        # POST /search cannot send one (JSON has no NaN); a library caller can: it would
        # match nothing on one store and fail the other's range check.
        raise InputError(f"cannot filter {shown}: NaN and infinities compare with no value")
    if isinstance(value, int) and not isinstance(value, bool) and not LONG_RANGE[0] <= value <= LONG_RANGE[1]:
        # Beyond 64 bits a double, as POST /search reads such a JSON integer (SQLite cannot
        # bind it: an OverflowError).
        try:
            value = float(value)
        except OverflowError:
            raise InputError(f"cannot filter {shown}: the number is beyond a double") from None
        item = Filter(item.field, item.op, value)
    if kind == "number":
        if isinstance(value, bool):
            raise InputError(f"cannot filter {shown}: the field holds numbers, not true or false")
        if isinstance(value, str):
            text = value.strip()
            # Beyond 64 bits a double, as a JSON integer beyond them is read (and Python's
            # int() refuses a text of over 4,300 digits with a ValueError: a 500).
            if _INTEGER.fullmatch(text) and len(text) <= 20 and LONG_RANGE[0] <= int(text) <= LONG_RANGE[1]:
                return Filter(item.field, item.op, int(text))
            try:
                number = float(text)
            except ValueError:
                number = float("nan")
            if number != number or number in (float("inf"), float("-inf")):
                raise InputError(f"cannot filter {shown}: the field holds numbers and {value_shown(value)} is not one")
            return Filter(item.field, item.op, number)
    elif kind == "text" and not isinstance(value, str):
        # JSON's spelling, as OpenSearch turns a number into a keyword term: true, 2010, 1.5.
        return Filter(item.field, item.op, json.dumps(value))
    elif kind == "boolean":
        if item.op != "eq":
            raise InputError(f"cannot filter {shown}: the field holds true or false, which only = compares")
        if value in ("true", "false"):
            return Filter(item.field, item.op, value == "true")
        if not isinstance(value, bool):
            raise InputError(f"cannot filter {shown}: the field holds true or false")
    return item


class Store(Protocol):
    """Where documents, their BM25 index and their topics live."""

    @property
    def word_stemmer(self) -> Callable[[Sequence[str]], list[str]] | None:
        """How this store's BM25 index stems content words, when it wants the write path
        to do it (in the topic workers, which have the words already) and to pass the
        stems in `StoredDocument.stemmed_words`: a module-level function (workers get it
        pickled) giving one stem per word. None: the store needs no stems."""
        ...

    @property
    def stop_list(self) -> StopListInfo:
        """The stop list this store reads texts and queries with, which `initialise`
        records for an index (`info.stopwords` is not read) and checks against the index's."""
        ...

    def index_info(self) -> IndexInfo | None:
        """What the index was built with, or None for an empty, new index."""
        ...

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        """Prepare the index for `info` (and this store's `stop_list`); with `rebuild`,
        start a new index for it (or resume an unfinished one built with the same vectors,
        K and stop list) that replaces the current one at `publish()`: until then readers
        see the current one.

        Raises IndexMismatchError when the index holds documents built otherwise, before
        anything is written.
        """
        ...

    def upsert(self, documents: Sequence[StoredDocument]) -> list[WriteFailure]:
        """Write documents; an id already present is replaced, never duplicated.

        Returns the documents that were refused, with the reason; the others are written.
        """
        ...

    def drop_absent(self, corpus_ids: AbstractSet[str]) -> int:
        """In a rebuild, before `publish()`: delete from the new index every document whose
        id is not in `corpus_ids` (the ids of every document the run read from its corpus,
        those it skipped or the store refused included), and say how many went.

        A rebuild must publish the corpus it was given, as one never interrupted would. One
        that resumes an interrupted rebuild finds that run's documents already written, and
        its corpus may have held documents this one no longer has (removed on purpose):
        kept, they would be published with it. An index the run began itself holds only
        what it wrote, and nothing goes. Readers see none of this: the new index is not
        theirs until `publish()`. Raises StoreError outside a rebuild: a run that writes
        into the index readers see adds and replaces, and never deletes.
        """
        ...

    def publish(self) -> PublishResult | None:
        """Make what this run wrote visible to readers: a rebuilt index replaces the
        current one here (the OpenSearch store swaps its alias, the embedded store swaps
        in one SQLite transaction); other writes are visible as they are written (the
        embedded store's at each text-index commit). The OpenSearch store says which index
        its alias points at (`PublishResult`); the embedded store, which has none, None."""
        ...

    def compact(self, progress: Callable[[int], None] | None = None) -> CompactResult:
        """Merge the first stage's index into one segment, for faster BM25 over an index
        that is no longer written (OpenSearch's force merge): each segment is searched on
        its own. Readers see the index as it was until the merged one is there.
        `progress(n)` reports n more documents written, where the store writes them.
        Raises StoreError when another process writes, or there is nothing indexed."""
        ...

    def segments(self) -> int:
        """How many segments a search of the first stage's index reads (on OpenSearch, the
        most of any primary shard's), each searched on its own: one is fastest."""
        ...

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The content hash of the newest stored version of each of `doc_ids` present in
        the index this run writes (in a rebuild, the new one): for resuming."""
        ...

    def count(self) -> int: ...

    def bm25(self, query: str, size: int, filters: Sequence[Filter] = ()) -> list[Candidate]:
        """The `size` best BM25 matches for the free-text `query` that pass `filters`,
        best first."""
        ...

    def passage_bm25(
        self, query: str, doc_ids: Sequence[str], texts: Sequence[str | None], read: ReadWords | None = None
    ) -> list[float] | None:
        """BM25 of each candidate's best passage for `query` (`best_passage_bm25`): a
        candidate is a stored document (`doc_ids`) or, where `texts` holds one, that text
        (its words `read(text)` when the store has not kept them: `ReadWords`).
        Texts with no stored id among them where the store has no statistics for them (the
        embedded store with nothing indexed; the OpenSearch store always, as its cluster
        keeps no passages for texts it never indexed) are scored with their own
        (`bm25.window_passage_bm25`). None when the store cannot say: no statistics, no
        passages stored for a document (an index built before them), or an OpenSearch index
        version that keeps none."""
        ...

    def doc_freqs(self, words: Sequence[str]) -> tuple[int, dict[str, int]] | None:
        """How many documents the index holds, and how many of them hold each of `words`
        (content words as `tokenize` gives them, unstemmed). None when the store cannot
        tell (no documents, or a store without the statistics)."""
        ...

    def text_bm25(self, query: str, texts: Sequence[str], read: ReadWords | None = None) -> list[float] | None:
        """BM25 of each of `texts` (which need not be stored) for `query`, with this
        index's analysis and statistics (`bm25_of_texts`): about the score each would get
        from `bm25` if it were indexed (a text's words `read(text)` where the store reads
        them: `ReadWords`). None when there is nothing to score them by: the
        index holds no documents (no statistics), the store cannot read its statistics, or
        the query has no content word.
        """
        ...

    def topics(self, doc_ids: Sequence[str], corrected: bool = False) -> TopicBatch:
        """The topics of `doc_ids`, in that order, padded into one batch.

        Ids that are not stored get zero topics (they score 0). `corrected`: the topics
        of the centred word vectors with their backgrounds (`IndexInfo.centering`);
        documents stored without them count as missing.
        """
        ...

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        """The stored text of those `doc_ids` that exist."""
        ...

    def writing(self, command: str) -> AbstractContextManager[None]:
        """Make this process the store's one writer for the `with` block (`command` names it
        to a writer it refuses), as `initialise` does for an index run until `publish`:
        StoreError naming the holder when another process writes. Nothing happens when
        this object is the writer already."""
        ...

    def store_doc_vectors(self, info: Doc2VecInfo, vectors: Mapping[str, np.ndarray]) -> list[WriteFailure]:
        """Write each stored document's Doc2Vec vector ((dim,) float32), then record `info`
        as the index's model.

        Returns the ids that were not written ("not in the index", a wrong shape, or the
        cluster's reason); the others are written.
        """
        ...

    def doc_vectors(self, doc_ids: Sequence[str]) -> DocVectorBatch:
        """The Doc2Vec vectors of `doc_ids`, in that order, from the index's current model.

        Ids not stored, stored without a vector, or with a vector of another model get
        a zero row and are listed in `missing`; `model` is the index's model checksum
        ("" and zero columns when none was trained).
        """
        ...

    def close(self) -> None: ...


def open_store(settings: Settings, name: str | None = None, *, create: bool = True) -> Store:
    """The store `settings` select: OpenSearch when a URL is set, else the embedded one.

    `name` picks a separate index beside the default one (the demo's, an evaluation's):
    `<data_dir>/<name>` for the embedded store, alias `<RERANKER_INDEX>-<name>` in OpenSearch.
    `create=False` is for a command that only reads: without an embedded store there, it
    raises IndexNotFoundError instead of making an empty one (opening an OpenSearch store
    creates nothing either way; its reads raise IndexNotFoundError without an alias).
    """
    stopwords = load_stopwords(settings.stopwords_file)
    cluster = settings.opensearch_store
    if cluster is not None:
        from dataclasses import replace

        from reranker.store.opensearch import OpenSearchStore

        if name is not None:
            suffix = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.")
            cluster = replace(cluster, alias=f"{cluster.alias}-{suffix}")
        return OpenSearchStore(cluster, stopwords, stopwords_file=settings.stopwords_file)
    from reranker.store.embedded import EmbeddedStore

    return EmbeddedStore(settings.data_dir / (name or "index"), stopwords, stopwords_file=settings.stopwords_file, create=create)
