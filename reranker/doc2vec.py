"""Doc2Vec (Le & Mikolov 2014, "Distributed Representations of Sentences and Documents"):
the only module that trains or loads paragraph-vector models (through gensim).

`reranker train doc2vec CORPUS` trains a model on the indexed corpus, saves it as
`<data_dir>/doc2vec/<sha256>.model` (plus gensim's `.npy` sidecars for large arrays),
writes each document's trained vector into the store and records the model in the
index's metadata (`IndexInfo.doc2vec`), as the word vectors are recorded. The service
then infers a query vector with the same model and scores candidates by cosine.

Reproducibility. Training uses one worker thread by default: gensim's multi-threaded
training interleaves updates in scheduling order, so only one thread gives the same
vectors on every run (`Doc2VecParams.workers` trades that for speed). gensim's own
`infer_vector` is not reproducible: its starting vector is seeded by Python's `hash()`
of the words, which differs between processes (PYTHONHASHSEED), and its negative
sampling draws from the model's shared RandomState. `Doc2VecModel.infer` runs the same
training steps with a starting vector and a RandomState derived from the model's seed
and the words (crc32), on a shallow copy of the model that carries that RandomState, so
the same tokens give the same vector in every call, thread and process, without a lock
(the copy shares the read-only arrays; gensim releases the GIL while it trains).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Protocol, Sequence

import numpy as np
from gensim.models.callbacks import CallbackAny2Vec
from gensim.models.doc2vec import Doc2Vec, TaggedDocument
from gensim.models.doc2vec_inner import train_document_dbow, train_document_dm

from reranker.errors import (
    NO_DOC2VEC_MODEL,
    ConfigError,
    IndexNotFoundError,
    RankerUnavailableError,
    VectorsError,
)
from reranker.store import Doc2VecInfo, IndexInfo, Store
from reranker.text import tokenize
from reranker.types import Document, FloatArray, WriteFailure

log = logging.getLogger(__name__)

Mode = Literal["dbow", "dm"]
MODES: tuple[Mode, ...] = ("dbow", "dm")
MODEL_DIR = "doc2vec"


class ProgressLike(Protocol):
    """What training needs of a progress bar (tqdm fits): one update per epoch."""

    def update(self, n: int) -> object: ...


@dataclass(frozen=True)
class Doc2VecParams:
    """How to train a model.

    mode: "dbow" (PV-DBOW, gensim dm=0) or "dm" (PV-DM with the mean of the context,
    dm=1). dim: vector size. epochs: training passes. min_count: words rarer than this
    are ignored. window: context words each side (PV-DM; PV-DBOW trains no word vectors).
    seed: seeds training and every inference. infer_epochs: passes when inferring a
    query or a newly indexed document (about 1 ms for a 100-word query at 10).
    workers: training threads; only 1 is reproducible.
    """

    mode: Mode = "dbow"
    dim: int = 100
    epochs: int = 20
    min_count: int = 2
    window: int = 5
    seed: int = 1
    infer_epochs: int = 20
    workers: int = 1

    def validate(self) -> None:
        """Raise ConfigError naming the first bad value."""
        if self.mode not in MODES:
            raise ConfigError(f"unknown Doc2Vec mode {self.mode!r}; use one of {', '.join(MODES)}")
        for name in ("dim", "epochs", "min_count", "window", "infer_epochs", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"Doc2Vec {name} must be >= 1, got {getattr(self, name)}")

    def info(self, checksum: str) -> Doc2VecInfo:
        return Doc2VecInfo(
            checksum=checksum, dim=self.dim, mode=self.mode, epochs=self.epochs,
            min_count=self.min_count, window=self.window, seed=self.seed, infer_epochs=self.infer_epochs,
        )


class Doc2VecModel:
    """A trained, read-only Doc2Vec model plus the identity an index records (`info`)."""

    def __init__(self, model: Doc2Vec, info: Doc2VecInfo, path: Path | None = None) -> None:
        if int(model.vector_size) != info.dim:
            raise VectorsError(f"the Doc2Vec model has dim={model.vector_size}, its record says {info.dim}")
        self._model = model
        self._vocabulary = model.wv.key_to_index
        self.info = info
        self.path = path

    @property
    def dim(self) -> int:
        return self.info.dim

    def known(self, tokens: Sequence[str]) -> list[str]:
        """The tokens the model has a word for, in order (the others do not affect inference)."""
        vocabulary = self._vocabulary
        return [token for token in tokens if token in vocabulary]

    def document_vector(self, doc_id: str) -> FloatArray:
        """The vector training learnt for the document tagged `doc_id` (KeyError if none)."""
        return np.asarray(self._model.dv[doc_id], dtype=np.float32)

    def infer(self, tokens: Sequence[str]) -> FloatArray:
        """(dim,) float32 vector of a token sequence; zeros when no token is known.

        Deterministic: the same tokens give the same vector in every call, thread and
        process (see the module docstring). Costs about `infer_epochs` x 0.1 ms for a
        100-word text.
        """
        words = self.known(tokens)
        if not words:
            return np.zeros(self.dim, dtype=np.float32)
        key = zlib.crc32(" ".join(words).encode("utf-8"))
        rng = np.random.default_rng([self.info.seed, key])
        # The start gensim uses, (uniform - 0.5) / dim, from a seed that does not depend on hash().
        vector = ((rng.random(self.dim, dtype=np.float32) - 0.5) / self.dim).reshape(1, self.dim)
        model = self._model
        seeded = copy.copy(model)  # shares the arrays; only `random` is its own
        seeded.random = np.random.RandomState([self.info.seed, key])
        lockf = np.ones(1, dtype=np.float32)
        work = np.zeros(model.layer1_size, dtype=np.float32)
        neu1 = np.zeros(model.layer1_size, dtype=np.float32)
        epochs = self.info.infer_epochs
        alpha = model.alpha
        alpha_delta = (model.alpha - model.min_alpha) / max(epochs - 1, 1)
        # Model.infer_vector's loop, with learning of words and output weights off.
        for _ in range(epochs):
            if model.dm:
                train_document_dm(
                    seeded, words, [0], alpha, work, neu1, learn_words=False, learn_hidden=False,
                    doctag_vectors=vector, doctags_lockf=lockf,
                )
            else:
                train_document_dbow(
                    seeded, words, [0], alpha, work, learn_words=False, learn_hidden=False,
                    doctag_vectors=vector, doctags_lockf=lockf,
                )
            alpha -= alpha_delta
        inferred: FloatArray = vector[0]
        return inferred


# --- training --------------------------------------------------------------------------


class _EpochProgress(CallbackAny2Vec):  # type: ignore[misc]  # gensim is untyped
    """A gensim callback that logs each epoch and advances a progress bar."""

    def __init__(self, progress: ProgressLike | None) -> None:
        self.progress = progress
        self.epoch = 0

    def on_epoch_end(self, model: object) -> None:
        self.epoch += 1
        log.info("Doc2Vec epoch %d done", self.epoch)
        if self.progress is not None:
            self.progress.update(1)


def tagged_documents(documents: Iterable[Document], stopwords: frozenset[str] | None) -> list[tuple[str, list[str]]]:
    """(id, tokens) per document, tokens as the topics see them; a later document with
    the same id replaces an earlier one (as in the store). Tokens are interned, so the
    corpus costs a pointer per occurrence."""
    by_id: dict[str, list[str]] = {}
    intern = sys.intern
    for doc in documents:
        by_id.pop(doc.id, None)
        by_id[doc.id] = [intern(token) for token in tokenize(doc.full_text, stopwords)]
    return list(by_id.items())


def train(
    documents: Iterable[Document],
    params: Doc2VecParams,
    data_dir: Path,
    stopwords: frozenset[str] | None = None,
    progress: ProgressLike | None = None,
) -> Doc2VecModel:
    """Train a model on `documents` (tag = document id) and save it under
    `<data_dir>/doc2vec/<sha256>.model`.

    Raises ConfigError for bad params, VectorsError when no word occurs `min_count`
    times or the model cannot be saved.
    """
    params.validate()
    return _train_tagged(tagged_documents(documents, stopwords), params, data_dir, progress)


def _train_tagged(
    corpus_items: list[tuple[str, list[str]]], params: Doc2VecParams, data_dir: Path, progress: ProgressLike | None
) -> Doc2VecModel:
    corpus = [TaggedDocument(tokens, [doc_id]) for doc_id, tokens in corpus_items]
    if not any(tokens for _, tokens in corpus_items):
        raise VectorsError("cannot train Doc2Vec: the corpus has no words")
    started = time.perf_counter()
    model = Doc2Vec(
        dm=1 if params.mode == "dm" else 0,
        dm_mean=1,
        vector_size=params.dim,
        window=params.window,
        min_count=params.min_count,
        epochs=params.epochs,
        seed=params.seed,
        workers=params.workers,
    )
    model.build_vocab(corpus)
    if len(model.wv) == 0:
        raise VectorsError(f"cannot train Doc2Vec: no word occurs {params.min_count} times; lower --min-count")
    words = sum(len(tokens) for _, tokens in corpus_items)
    log.info(
        "training PV-%s Doc2Vec (dim=%d, %d epochs) on %d documents, %d words, vocabulary %d",
        params.mode.upper(), params.dim, params.epochs, len(corpus), words, len(model.wv),
    )
    model.train(corpus, total_examples=model.corpus_count, epochs=params.epochs, callbacks=[_EpochProgress(progress)])
    path, checksum = _save(model, data_dir / MODEL_DIR)
    log.info("trained Doc2Vec in %.1f s; saved %s", time.perf_counter() - started, path)
    return Doc2VecModel(model, params.info(checksum), path)


def _save(model: Doc2Vec, directory: Path) -> tuple[Path, str]:
    """Save into a scratch folder, name the files by their checksum, move them in.

    The main file moves last: its presence means the sidecars are complete.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=directory))
    except OSError as exc:
        raise VectorsError(f"cannot save the Doc2Vec model in {directory}: {exc.strerror}") from None
    try:
        # Every array in its own .npy (sep_limit=0), so loading memory-maps them all.
        model.save(str(scratch / "model"), sep_limit=0)
        parts = sorted(scratch.iterdir(), key=lambda p: p.name)
        checksum = _checksum(scratch / "model", [p for p in parts if p.name != "model"])
        target = directory / f"{checksum}.model"
        for part in [p for p in parts if p.name != "model"] + [scratch / "model"]:
            os.replace(part, directory / (target.name + part.name.removeprefix("model")))
    except OSError as exc:
        raise VectorsError(f"cannot save the Doc2Vec model in {directory}: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target, checksum


def _checksum(main: Path, sidecars: Sequence[Path]) -> str:
    """sha256 of the model file and its sidecars (by suffix, so the name does not count)."""
    digest = hashlib.sha256()
    for part in [main, *sidecars]:
        digest.update(part.name.removeprefix(main.name).encode("utf-8") + b"\0")
        with part.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# --- training for an index -------------------------------------------------------------


@dataclass(frozen=True)
class TrainReport:
    """What `train_for_store` did.

    stored: documents whose vector is now in the index. not_in_index: corpus ids the
    index does not hold. no_known_words: corpus documents without a word of the model's
    vocabulary (no vector is stored for them). failures: other refused writes.
    without_vector: index documents that have no vector of this model afterwards
    (the Doc2Vec ranker scores them lowest).
    """

    info: Doc2VecInfo
    documents: int
    stored: int
    not_in_index: tuple[str, ...]
    no_known_words: tuple[str, ...]
    failures: tuple[WriteFailure, ...]
    without_vector: int
    seconds: float


def train_for_store(
    store: Store,
    documents: Iterable[Document],
    params: Doc2VecParams,
    data_dir: Path,
    stopwords: frozenset[str] | None = None,
    progress: ProgressLike | None = None,
) -> tuple[Doc2VecModel, TrainReport]:
    """Train on `documents` (the corpus that was indexed), store each indexed document's
    vector and record the model in the index.

    Raises IndexNotFoundError when nothing is indexed yet; ConfigError / VectorsError as
    `train`.
    """
    params.validate()
    started = time.perf_counter()
    if store.index_info() is None:
        raise IndexNotFoundError("nothing is indexed yet: run `reranker index CORPUS.jsonl` first, then train Doc2Vec on it")
    # The store's one writer from the start: a run refused only after minutes of training
    # would lose them, and vectors stored beside a rebuild would miss its new version.
    with store.writing("reranker train doc2vec"):
        corpus_items = tagged_documents(documents, stopwords)
        model = _train_tagged(corpus_items, params, data_dir, progress)
        vectors: dict[str, np.ndarray] = {}
        no_known_words: list[str] = []
        for doc_id, tokens in corpus_items:
            # A document without a known word keeps its random starting vector: not a vector.
            if model.known(tokens):
                vectors[doc_id] = model.document_vector(doc_id)
            else:
                no_known_words.append(doc_id)
        failures = store.store_doc_vectors(model.info, vectors)
        not_in_index = tuple(f.doc_id for f in failures if f.reason == "not in the index")
        others = tuple(f for f in failures if f.reason != "not in the index")
        stored = len(vectors) - len(failures)
        report = TrainReport(
            info=model.info,
            documents=len(corpus_items),
            stored=stored,
            not_in_index=not_in_index,
            no_known_words=tuple(no_known_words),
            failures=others,
            without_vector=max(0, store.count() - stored),
            seconds=time.perf_counter() - started,
        )
        for failure in others:
            log.warning("no Doc2Vec vector stored for %s: %s", failure.doc_id, failure.reason)
        return model, report


def infer_vectors(model: Doc2VecModel, documents: Iterable[Document], stopwords: frozenset[str] | None) -> dict[str, np.ndarray]:
    """Inferred vectors of documents indexed after training (same tokens as training);
    documents without a known word get none."""
    found: dict[str, np.ndarray] = {}
    for doc in documents:
        tokens = tokenize(doc.full_text, stopwords)
        if model.known(tokens):
            found[doc.id] = model.infer(tokens)
    return found


# --- loading ---------------------------------------------------------------------------

_LOADED: dict[Path, Doc2VecModel] = {}
_LOAD_LOCK = threading.Lock()


def model_path(data_dir: Path, checksum: str) -> Path:
    return data_dir / MODEL_DIR / f"{checksum}.model"


def load_for_index(info: IndexInfo | None, data_dir: Path) -> Doc2VecModel:
    """The Doc2Vec model the index records, memory-mapped read-only, loaded once per process.

    Raises RankerUnavailableError when the index records none, or its file is not in
    `<data_dir>/doc2vec/`; VectorsError when the file cannot be read.
    """
    record = info.doc2vec if info is not None else None
    if record is None:
        raise RankerUnavailableError(NO_DOC2VEC_MODEL)
    path = model_path(data_dir, record.checksum)
    with _LOAD_LOCK:
        loaded = _LOADED.get(path)
        if loaded is not None and loaded.info == record:
            return loaded
        if not path.is_file():
            raise RankerUnavailableError(
                f"{NO_DOC2VEC_MODEL} (the index records model {record.checksum[:12]}, which is not in {path.parent})"
            )
        try:
            model = Doc2Vec.load(str(path), mmap="r")
        except (OSError, ValueError, EOFError, AttributeError) as exc:
            raise VectorsError(f"cannot load the Doc2Vec model {path}: {exc}") from None
        if not isinstance(model, Doc2Vec):
            raise VectorsError(f"{path} holds no Doc2Vec model")
        loaded = Doc2VecModel(model, record, path)
        _LOADED[path] = loaded
        log.info("loaded Doc2Vec model %s (PV-%s, dim=%d)", path.name, record.mode.upper(), record.dim)
        return loaded

