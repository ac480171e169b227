"""Doc2Vec: training on the bundled sample, reproducible inference, vectors stored with
the documents in both stores (SQLite on disk, osmem-server over HTTP), the ranker, the CLI.

Models are small (dim 32, a few epochs) and trained once per module: the file runs in
seconds.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from conftest import SAMPLE, run, write_jsonl

from reranker import doc2vec as doc2vec_module
from reranker.config import OpenSearchSettings
from reranker.doc2vec import (
    Doc2VecModel,
    Doc2VecParams,
    load_for_index,
    model_path,
    train,
    train_for_store,
)
from reranker.embeddings import WordVectors
from reranker.errors import (
    ConfigError,
    IndexMismatchError,
    IndexNotFoundError,
    RankerUnavailableError,
)
from reranker.indexing import Skipped, index_documents, read_corpus
from reranker.rankers import CandidateSet, RankerOptions, get_ranker
from reranker.rankers.doc2vec import MISSING_SCORE, Doc2VecRanker, cosine_scores
from reranker.store import Doc2VecInfo, IndexInfo
from reranker.store.embedded import EmbeddedStore
from reranker.store.opensearch import OpenSearchStore
from reranker.store.templates import load_templates
from reranker.text import stop_list_info, tokenize
from reranker.types import (
    Candidate,
    DocTopics,
    Document,
    DocVectorBatch,
    EmbeddingInfo,
    Query,
    StoredDocument,
    TopicBatch,
)

PARAMS = Doc2VecParams(dim=32, epochs=5, infer_epochs=10)
EMBEDDING = EmbeddingInfo(name="test", dim=4, checksum="c" * 64)
BUNDLED = stop_list_info(None)  # the stop list a store without one of its own records
QUERY = "statistical machine translation with word alignment models trained on parallel corpora"


def sample_documents() -> list[Document]:
    return [item for _, item, _ in read_corpus(SAMPLE / "corpus.jsonl") if not isinstance(item, Skipped)]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Doc2VecModel]]:
    """(data dir, {"dbow": model, "dm": model}) trained on the 25 sample papers."""
    data_dir = tmp_path_factory.mktemp("doc2vec-data")
    documents = sample_documents()
    return data_dir, {mode: train(documents, replace(PARAMS, mode=mode), data_dir) for mode in ("dbow", "dm")}


@pytest.fixture
def dbow(models: tuple[Path, dict[str, Doc2VecModel]]) -> Doc2VecModel:
    return models[1]["dbow"]


def stored(doc_id: str, text: str) -> StoredDocument:
    topics = np.eye(4, dtype=np.float32)[:2]
    return StoredDocument(Document(doc_id, "", text), DocTopics(topics, np.full(2, 0.5, dtype=np.float32)), f"h-{doc_id}-{text}", 3, 0)


def info_of(checksum: str = "a" * 64, dim: int = 3) -> Doc2VecInfo:
    return replace(PARAMS, dim=dim).info(checksum)


# --- training and inference ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["dbow", "dm"])
def test_pv_dbow_and_pv_dm_train_and_find_each_paper_from_its_own_text(
    mode: str, models: tuple[Path, dict[str, Doc2VecModel]]
) -> None:
    data_dir, trained = models
    model = trained[mode]
    assert (model.info.mode, model.info.dim, model.info.epochs, model.info.infer_epochs) == (mode, 32, 5, 10)
    # Saved under its checksum, every array in a memory-mappable sidecar.
    assert model.path == model_path(data_dir, model.info.checksum) and model.path.is_file()
    assert {p.name.removeprefix(model.path.name) for p in model.path.parent.glob(model.path.name + "*")} >= {"", ".dv.vectors.npy", ".wv.vectors.npy"}
    documents = sample_documents()
    trained_vectors = np.stack([model.document_vector(doc.id) for doc in documents])
    assert trained_vectors.shape == (25, 32) and trained_vectors.dtype == np.float32
    found = sum(
        int(np.argmax(cosine_scores(model.infer(tokenize(doc.full_text)[:300]), trained_vectors)) == row)
        for row, doc in enumerate(documents)
    )
    assert found >= 13  # most papers' own text points back at them (dbow 21, dm 23 of 25)


def test_training_is_reproducible(models: tuple[Path, dict[str, Doc2VecModel]], tmp_path: Path) -> None:
    again = train(sample_documents(), PARAMS, tmp_path)
    first = models[1]["dbow"]
    assert np.array_equal(again.document_vector("P01-1027"), first.document_vector("P01-1027"))
    assert np.array_equal(again.infer(tokenize(QUERY)), first.infer(tokenize(QUERY)))


def test_inference_is_deterministic_across_calls_and_threads(dbow: Doc2VecModel) -> None:
    tokens = tokenize(QUERY)
    first = dbow.infer(tokens)
    assert first.shape == (32,) and first.dtype == np.float32 and first.any()
    assert np.array_equal(dbow.infer(tokens), first)
    # Other texts inferred at the same time do not disturb it (no shared RNG state).
    texts = [tokens if i % 2 == 0 else tokenize(f"parsing grammar trees {i}") for i in range(64)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(dbow.infer, texts))
    assert all(np.array_equal(result, first) for result in results[::2])
    # Words the model does not know change nothing.
    assert np.array_equal(dbow.infer([*tokens, "zzyzx", "qwertyuiop"]), first)


def test_inference_is_the_same_in_another_process_with_another_hash_seed(
    models: tuple[Path, dict[str, Doc2VecModel]]
) -> None:
    """gensim's own infer_vector seeds its start from hash(), which PYTHONHASHSEED changes."""
    data_dir, trained = models
    model = trained["dm"]
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from reranker.doc2vec import load_for_index\n"
        "from reranker.store import Doc2VecInfo, IndexInfo\n"
        "from reranker.types import EmbeddingInfo\n"
        "from reranker.text import tokenize\n"
        "info = IndexInfo(EmbeddingInfo('x', 4, 'c'), 2, Doc2VecInfo(**json.loads(sys.argv[1])))\n"
        "print(load_for_index(info, Path(sys.argv[2])).infer(tokenize(sys.argv[3])).tobytes().hex())\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(model.info.to_json()), str(data_dir), QUERY],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    )
    assert result.stdout.strip() == model.infer(tokenize(QUERY)).tobytes().hex()


def test_a_query_without_a_known_word_infers_zeros(dbow: Doc2VecModel) -> None:
    assert not dbow.infer(["zzyzx", "qwertyuiop"]).any()
    assert not dbow.infer([]).any()


def test_bad_params_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mode"):
        train(sample_documents(), replace(PARAMS, mode="cbow"), tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="epochs"):
        Doc2VecParams(epochs=0).validate()


# --- loading for an index ---------------------------------------------------------------


def test_loading_needs_a_trained_model(models: tuple[Path, dict[str, Doc2VecModel]], tmp_path: Path) -> None:
    data_dir, trained = models
    with pytest.raises(RankerUnavailableError, match=r"no Doc2Vec model was trained for this index; run `reranker train doc2vec CORPUS`"):
        load_for_index(None, data_dir)
    with pytest.raises(RankerUnavailableError, match="no Doc2Vec model was trained"):
        load_for_index(IndexInfo(EMBEDDING, 2), data_dir)
    recorded = IndexInfo(EMBEDDING, 2, trained["dbow"].info)
    with pytest.raises(RankerUnavailableError, match="not in"):
        load_for_index(recorded, tmp_path)  # another data dir: the file is missing


def test_a_model_is_loaded_once_per_process_and_memory_mapped(models: tuple[Path, dict[str, Doc2VecModel]]) -> None:
    data_dir, trained = models
    info = IndexInfo(EMBEDDING, 2, trained["dm"].info)
    doc2vec_module._LOADED.clear()
    loaded = load_for_index(info, data_dir)
    assert load_for_index(info, data_dir) is loaded
    assert isinstance(loaded._model.wv.vectors, np.memmap) and not loaded._model.wv.vectors.flags.writeable
    # Inference never writes to the model: it runs on the read-only mapping.
    assert np.array_equal(loaded.infer(tokenize(QUERY)), trained["dm"].infer(tokenize(QUERY)))


# --- the embedded store -----------------------------------------------------------------


@pytest.fixture
def ready(store: EmbeddedStore) -> EmbeddedStore:
    store.initialise(IndexInfo(EMBEDDING, k=2))
    store.upsert([stored("a", "ships at sea"), stored("b", "bread and yeast"), stored("c", "chess openings")])
    return store


def test_vectors_round_trip_through_the_embedded_store(ready: EmbeddedStore, tmp_path: Path) -> None:
    info = info_of()
    vectors = {"a": np.array([1, 2, 3], np.float32), "c": np.array([-1, 0.5, 0.25], np.float32), "nope": np.ones(3, np.float32)}
    failures = ready.store_doc_vectors(info, vectors)
    assert [(f.doc_id, f.reason) for f in failures] == [("nope", "not in the index")]
    index_info = ready.index_info()
    assert index_info is not None and index_info.doc2vec == info and index_info.embedding == EMBEDDING
    batch = ready.doc_vectors(["c", "missing", "b", "a"])
    assert batch.doc_ids == ("c", "missing", "b", "a") and batch.model == info.checksum
    assert batch.vectors.dtype == np.float32 and batch.vectors.shape == (4, 3)
    assert np.array_equal(batch.vectors[[0, 3]], np.stack([vectors["c"], vectors["a"]]))
    assert not batch.vectors[[1, 2]].any() and batch.missing == ("missing", "b")
    # Another store object on the same file (another process, say) sees the same.
    reopened = EmbeddedStore(ready.directory)
    try:
        assert reopened.index_info() == index_info
        assert np.array_equal(reopened.doc_vectors(["a"]).vectors[0], vectors["a"])
    finally:
        reopened.close()


def test_a_reader_notices_a_model_trained_by_another_connection(ready: EmbeddedStore) -> None:
    assert ready.index_info() is not None and ready.index_info().doc2vec is None  # type: ignore[union-attr]
    writer = EmbeddedStore(ready.directory)
    try:
        writer.store_doc_vectors(info_of(), {"a": np.ones(3, np.float32)})
    finally:
        writer.close()
    assert ready.index_info().doc2vec == info_of()  # type: ignore[union-attr]


def test_vectors_of_an_earlier_model_count_as_missing(ready: EmbeddedStore) -> None:
    ready.store_doc_vectors(info_of("1" * 64), {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    ready.store_doc_vectors(info_of("2" * 64), {"a": np.full(3, 2, np.float32)})
    batch = ready.doc_vectors(["a", "b"])
    assert batch.model == "2" * 64 and batch.missing == ("b",)
    assert np.array_equal(batch.vectors, [[2, 2, 2], [0, 0, 0]])


def test_a_changed_document_loses_its_vector_and_a_rebuild_the_model(ready: EmbeddedStore) -> None:
    ready.store_doc_vectors(info_of(), {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    ready.upsert([stored("a", "ships at sea, rewritten")])
    assert ready.doc_vectors(["a", "b"]).missing == ("a",)
    ready.initialise(IndexInfo(EMBEDDING, k=2))  # an incremental run keeps the model
    assert ready.index_info().doc2vec == info_of()  # type: ignore[union-attr]
    ready.initialise(IndexInfo(EMBEDDING, k=2), rebuild=True)
    assert ready.index_info() == IndexInfo(EMBEDDING, k=2, stopwords=BUNDLED)
    ready.upsert([stored("a", "ships at sea, rebuilt")])
    assert ready.doc_vectors(["b"]).model == info_of().checksum  # readers: the old index, until the swap
    ready.publish()
    batch = ready.doc_vectors(["a"])
    assert batch.missing == ("a",) and batch.model == "" and batch.vectors.shape == (1, 0)


# --- the OpenSearch store (osmem-server) ---------------------------------------------------


@pytest.fixture
def os_store(osmem_clone: Any) -> Iterator[OpenSearchStore]:
    cluster = OpenSearchSettings(hosts=(osmem_clone.url,), alias="papers", timeout=10.0, retries=2)
    store = OpenSearchStore(cluster, sleep=lambda seconds: None)
    yield store
    store.close()


def fill(store: OpenSearchStore, *, rebuild: bool = False) -> None:
    store.initialise(IndexInfo(EMBEDDING, k=2), rebuild=rebuild)
    assert store.upsert([stored("a", "ships at sea"), stored("b", "bread and yeast"), stored("c", "chess openings")]) == []
    store.publish()


def test_vectors_round_trip_through_opensearch(os_store: OpenSearchStore) -> None:
    fill(os_store)
    reader = OpenSearchStore(os_store.config)  # another process's view, through the alias
    assert reader.index_info() == IndexInfo(EMBEDDING, 2, stopwords=BUNDLED)  # cached for METADATA_TTL
    info = info_of()
    vectors = {"a": np.array([1, 2, 3], np.float32), "c": np.array([-1, 0.5, 0.25], np.float32), "nope": np.ones(3, np.float32)}
    failures = os_store.store_doc_vectors(info, vectors)
    assert [(f.doc_id, f.reason) for f in failures] == [("nope", "not in the index")]
    try:
        time.sleep(1.1)
        # Vectors of a model newer than the cached record make the reader look again.
        batch = reader.doc_vectors(["c", "missing", "b", "a"])
        assert reader.index_info() == IndexInfo(EMBEDDING, 2, info, stopwords=BUNDLED)
        assert batch.model == info.checksum and batch.missing == ("missing", "b")
        assert np.array_equal(batch.vectors, [vectors["c"], [0, 0, 0], [0, 0, 0], vectors["a"]])
        assert reader.documents(["a"])["a"].fields == {}  # the vector is not document metadata
    finally:
        reader.close()
    (_, body), = os_store.client.indices.get_mapping(index="papers").items()
    assert body["mappings"]["_meta"]["reranker"]["doc2vec"] == info.to_json()
    assert body["mappings"]["_meta"]["reranker"]["k"] == 2  # the rest of _meta is kept
    source = os_store.client.get(index="papers", id="a")["_source"]
    assert np.frombuffer(base64.b64decode(source["doc2vec"]["vector"]), "<f4").tolist() == [1, 2, 3]
    assert source["doc2vec"]["model"] == info.checksum and "hidden_topics" in source


def test_the_mapping_holds_doc2vec_and_older_indices_get_it(osmem_clone: Any) -> None:
    assert load_templates().mappings["properties"]["doc2vec"] == {
        "properties": {"vector": {"type": "binary"}, "model": {"type": "keyword", "index": False}}
    }
    # An index made from templates without the field (installed by an earlier version).
    templates = load_templates()
    older = json.loads(json.dumps(templates.components))
    del older["reranker-mappings"]["template"]["mappings"]["properties"]["doc2vec"]
    store = OpenSearchStore(
        OpenSearchSettings(hosts=(osmem_clone.url,), alias="old"), templates=replace(templates, components=older)
    )
    try:
        fill(store)
        assert "doc2vec" not in store.client.indices.get_mapping(index="old")["old-v000001"]["mappings"]["properties"]
        assert store.store_doc_vectors(info_of(), {"b": np.ones(3, np.float32)}) == []
        assert store.doc_vectors(["b"]).missing == ()
    finally:
        store.close()


def test_a_rebuilt_opensearch_index_has_no_model(os_store: OpenSearchStore) -> None:
    fill(os_store)
    os_store.store_doc_vectors(info_of(), {"a": np.ones(3, np.float32)})
    fill(os_store)  # an incremental run keeps it
    assert os_store.index_info().doc2vec == info_of()  # type: ignore[union-attr]
    fill(os_store, rebuild=True)
    assert os_store.index_info() == IndexInfo(EMBEDDING, 2, stopwords=BUNDLED)
    assert os_store.doc_vectors(["a"]).missing == ("a",)


# --- the write path ---------------------------------------------------------------------------


def test_documents_indexed_after_training_get_inferred_vectors(
    store: EmbeddedStore, glove: WordVectors, models: tuple[Path, dict[str, Doc2VecModel]], caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = models[0]
    documents = sample_documents()
    records = [(f"corpus:{i}", doc, 1) for i, doc in enumerate(documents)]
    index_documents(records[:20], store, glove, 3)
    model, report = train_for_store(store, documents[:20], PARAMS, data_dir)
    assert (report.stored, report.without_vector, report.not_in_index) == (20, 0, ())
    later = index_documents(records[20:23], store, glove, 3, data_dir=data_dir)
    assert later.without_doc_vector == 0
    batch = store.doc_vectors([doc.id for doc in documents[18:23]])
    assert batch.missing == () and batch.model == model.info.checksum
    for row, doc in enumerate(documents[20:23], start=2):  # the same tokens as training
        assert np.array_equal(batch.vectors[row], model.infer(tokenize(doc.full_text)))
    # Without the model's folder the documents are indexed, and the gap is reported.
    with caplog.at_level(logging.WARNING, logger="reranker.indexing"):
        blind = index_documents(records[23:], store, glove, 3)
    assert blind.indexed == 2 and blind.without_doc_vector == 2
    assert "2 documents were indexed without a Doc2Vec vector" in caplog.text
    assert store.doc_vectors([documents[24].id]).missing == (documents[24].id,)
    # A rebuild starts without a model.
    index_documents(records[:3], store, glove, 3, rebuild=True, data_dir=data_dir)
    assert store.index_info().doc2vec is None  # type: ignore[union-attr]


def test_training_for_an_empty_store_says_to_index_first(store: EmbeddedStore, tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="reranker index"):
        train_for_store(store, sample_documents(), PARAMS, tmp_path)


# --- the ranker --------------------------------------------------------------------------------


def window_of(doc_ids: list[str], vectors: np.ndarray, missing: tuple[str, ...] = (), model: str = "") -> CandidateSet:
    candidates = tuple(Candidate(doc_id, 10.0 - i, i + 1) for i, doc_id in enumerate(doc_ids))
    topics = TopicBatch(tuple(doc_ids), np.zeros((len(doc_ids), 0, 4), np.float32), np.zeros((len(doc_ids), 0), np.float32))
    return CandidateSet(candidates, topics, doc_vectors=DocVectorBatch(tuple(doc_ids), vectors, missing, model))


def query_of(text: str) -> Query:
    return Query(text, (), np.zeros((0, 4), np.float32), (), tuple(tokenize(text)))


def test_the_ranker_scores_the_cosine_of_the_inferred_query_vector(dbow: Doc2VecModel) -> None:
    ranker = get_ranker("doc2vec", RankerOptions(doc2vec=lambda: dbow))
    assert isinstance(ranker, Doc2VecRanker) and ranker.needs == frozenset({"doc_vectors"}) and ranker.variant is None
    ids = ["P01-1027", "C02-1050", "W03-1728", "gone"]
    vectors = np.stack([dbow.document_vector(i) for i in ids[:3]] + [np.zeros(32, np.float32)])
    scores = ranker.score(query_of(QUERY), window_of(ids, vectors, ("gone",), dbow.info.checksum))
    query_vector = dbow.infer(tokenize(QUERY)).astype(np.float64)
    for row in range(3):
        document = vectors[row].astype(np.float64)
        expected = document @ query_vector / (np.linalg.norm(document) * np.linalg.norm(query_vector))
        assert scores[row] == pytest.approx(expected, abs=1e-6)
    assert scores[3] == MISSING_SCORE and scores.dtype == np.float64 and np.isfinite(scores).all()
    # The same query gives the same scores.
    assert np.array_equal(ranker.score(query_of(QUERY), window_of(ids, vectors, ("gone",), dbow.info.checksum)), scores)


def test_the_ranker_edge_cases(dbow: Doc2VecModel) -> None:
    ranker = Doc2VecRanker(RankerOptions(doc2vec=lambda: dbow))
    empty = window_of([], np.zeros((0, 32), np.float32), model=dbow.info.checksum)
    assert ranker.score(query_of(QUERY), empty).shape == (0,)
    window = window_of(["a", "b"], np.ones((2, 32), np.float32), model=dbow.info.checksum)
    assert ranker.score(query_of("zzyzx qwertyuiop"), window).tolist() == [0.0, 0.0]  # BM25 order kept
    with pytest.raises(IndexMismatchError, match="another|is loaded"):
        ranker.score(query_of(QUERY), window_of(["a"], np.ones((1, 32), np.float32), model="f" * 64))
    with pytest.raises(ValueError, match="complete the window"):
        ranker.score(query_of(QUERY), replace(window, doc_vectors=None))
    with pytest.raises(RankerUnavailableError, match="reranker train doc2vec"):
        Doc2VecRanker(RankerOptions()).score(query_of(QUERY), window)


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_trains_doc2vec_on_the_indexed_corpus(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = SAMPLE / "corpus.jsonl"
    code, _ = run(data_dir, "train", "doc2vec", str(corpus), "--no-progress")
    assert code == 1 and "run `reranker index CORPUS.jsonl` first" in capsys.readouterr().err
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    code, _ = run(data_dir, "search", QUERY, "--ranker", "doc2vec")
    assert code == 1 and "no Doc2Vec model was trained for this index" in capsys.readouterr().err
    extra = {"id": "not-indexed", "title": "Extra", "text": "machine translation of parallel corpora"}
    training = write_jsonl(tmp_path / "training.jsonl", [*corpus.read_text().splitlines(), extra])
    code, out = run(
        data_dir, "train", "doc2vec", str(training), "--mode", "dm", "--dim", "16", "--epochs", "3",
        "--min-count", "2", "--window", "4", "--seed", "7", "--no-progress",
    )
    assert code == 0, capsys.readouterr().err
    assert "trained PV-DM Doc2Vec (dim=16, 3 epochs) on 26 documents" in out
    assert "stored the vectors of 25 documents; 0 indexed documents have none" in out
    assert "1 corpus document not in the index: not-indexed" in out
    store = EmbeddedStore(data_dir / "index")
    try:
        info = store.index_info()
        assert info is not None and info.doc2vec is not None
        assert (info.doc2vec.mode, info.doc2vec.dim, info.doc2vec.seed, info.doc2vec.window) == ("dm", 16, 7, 4)
        assert model_path(data_dir, info.doc2vec.checksum).is_file()
    finally:
        store.close()
    code, out = run(data_dir, "search", QUERY, "--ranker", "doc2vec", "--json")
    assert code == 0, capsys.readouterr().err
    hits = json.loads(out)["hits"]
    assert hits and all(-1.0 <= hit["score"] <= 1.0 for hit in hits)
    assert json.loads(run(data_dir, "search", QUERY, "--ranker", "doc2vec", "--json")[1])["hits"] == hits


def test_cli_refuses_a_corpus_the_index_holds_none_of_and_keeps_the_model(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another data set's corpus stored no vector, yet became the index's model (exit 0):
    the vectors trained before counted as missing, and `doc2vec` ranked every document last."""
    corpus = SAMPLE / "corpus.jsonl"
    assert run(data_dir, "index", str(corpus), "--no-progress")[0] == 0
    assert run(data_dir, "train", "doc2vec", str(corpus), "--dim", "8", "--epochs", "2", "--no-progress")[0] == 0
    before = json.loads(run(data_dir, "search", QUERY, "--ranker", "doc2vec", "--json")[1])["hits"]
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": f"o{i}", "text": "machine translation of parallel corpora"} for i in range(3)])
    capsys.readouterr()
    code, out = run(data_dir, "train", "doc2vec", str(other), "--dim", "8", "--epochs", "2", "--no-progress")
    assert (code, out) == (1, "")
    assert capsys.readouterr().err == (
        f"reranker: error: {other}: none of its 3 documents is in the index (25 documents): "
        "train Doc2Vec on the corpus that was indexed; the index's model is unchanged\n"
    )
    assert json.loads(run(data_dir, "search", QUERY, "--ranker", "doc2vec", "--json")[1])["hits"] == before


def test_cli_names_the_lines_it_skipped_as_index_does(data_dir: Path, tmp_path: Path) -> None:
    """`train doc2vec` said "(23 lines skipped)" and not which: it names them as `index`
    does, `file:line: id 'x': reason` in file order, the first 20 and how many more (all
    of them with -v)."""
    lines = SAMPLE.joinpath("corpus.jsonl").read_text(encoding="utf-8").splitlines()
    bad = ["{broken", json.dumps({"id": "x", "title": "no text"}), *(json.dumps({"id": f"e{i}", "text": ""}) for i in range(21))]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [*lines[:12], *bad, *lines[12:]])
    code, indexed = run(data_dir, "index", str(corpus), "--no-progress")
    assert code == 1 and "skipped 23" in indexed
    named = [line for line in indexed.splitlines() if line.startswith("  skipped ") or line.startswith("  ... and ")]
    assert named[0] == f"  skipped {corpus}:13: not valid JSON (Expecting property name enclosed in double quotes at column 2)"
    assert len(named) == 21 and named[-1] == "  ... and 3 more (run with -v to list them all)"
    for verbose, shown in [([], named), (["-v"], None)]:
        code, out = run(data_dir, *verbose, "train", "doc2vec", str(corpus), "--dim", "8", "--epochs", "1", "--no-progress")
        assert code == 0 and "on 25 documents of " in out and "(23 lines skipped)" in out, out
        said = [line for line in out.splitlines() if line.startswith("  skipped ") or line.startswith("  ... and ")]
        if shown is not None:
            assert said == shown, "the lines `index` names, in its words"
        else:
            assert said[:20] == named[:20] and len(said) == 23 and said[-1] == f"  skipped {corpus}:35: id 'e20': empty text"


def test_cli_word2vec_still_needs_out(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(data_dir, "train", "word2vec", str(SAMPLE / "corpus.jsonl"))
    assert code == 2 and "--out" in capsys.readouterr().err
    # Each model's options are its own: refused for the other, not ignored.
    code, _ = run(data_dir, "train", "doc2vec", str(SAMPLE / "corpus.jsonl"), "--out", "model.bin")
    assert code == 2 and capsys.readouterr().err == (
        "reranker: error: --out is word2vec's (the vectors file); a Doc2Vec model is kept beside the index it was trained for, in DATA_DIR/doc2vec\n"
    )
    code, _ = run(data_dir, "train", "word2vec", str(SAMPLE / "corpus.jsonl"), "--out", "w.kv", "--mode", "dm", "--seed", "3")
    assert code == 2 and capsys.readouterr().err == "reranker: error: --mode dm, --seed 3: doc2vec's options, not word2vec's\n"


def test_train_word2vec_names_the_lines_it_skipped(data_dir: Path, tmp_path: Path) -> None:
    """As `index` and `train doc2vec` do: it gave their count alone."""
    lines = SAMPLE.joinpath("corpus.jsonl").read_text(encoding="utf-8").splitlines()
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [*lines[:3], "{broken", json.dumps({"id": "x", "title": "no text"})])
    code, out = run(data_dir, "train", "word2vec", str(corpus), "--out", str(tmp_path / "w.kv"), "--dim", "8", "--epochs", "1", "--no-progress")
    assert code == 0 and "; skipped 2 corpus lines; saved " in out, out
    said = [line for line in out.splitlines() if line.startswith("  skipped ")]
    assert said == [
        f"  skipped {corpus}:4: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"  skipped {corpus}:5: id 'x': missing 'text' (a string)",
    ]
