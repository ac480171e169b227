"""Topic-extraction workers: indexing throughput with 1 and 2 processes, no server involved.

    python bench/bench_index_workers.py [--docs 3000] [--words 2000]

Generates 2,000-word documents (words drawn 1/rank from GloVe's frequent words), indexes
them into a fresh embedded store with `workers=1` and `workers=2`, alternating, and prints
documents per second and the ratio. Worker start-up (spawning, importing numpy/gensim,
opening the memory-mapped vectors) is included: it is what a user waits for.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchlib import product_threads

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import numpy as np

from reranker.config import Settings
from reranker.embeddings import load_vectors
from reranker.indexing import index_documents, read_corpus
from reranker.store.embedded import EmbeddedStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--words", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    glove = load_vectors("glove-6b-50d", Settings.from_env().vectors_cache)  # the user's cache: converted once
    words = [w for w in glove.keyed_vectors.index_to_key[100:30100] if w.isalpha()]
    weights = 1 / np.arange(1, len(words) + 1)
    rng = np.random.default_rng(2018)
    corpus = work / "corpus.jsonl"
    with corpus.open("w") as handle:
        for i in range(args.docs):
            text = " ".join(rng.choice(words, args.words, p=weights / weights.sum()))
            handle.write(json.dumps({"id": str(i), "text": text}) + "\n")
    size_mb = corpus.stat().st_size / 1e6
    print(f"{args.docs} documents of {args.words} words ({size_mb:.1f} MB), GloVe 50-d, K = 15, embedded store")
    rates: dict[int, list[float]] = {1: [], 2: []}
    for round_ in range(args.rounds):
        for workers in (1, 2):
            store = EmbeddedStore(work / f"store-{round_}-{workers}")
            started = time.perf_counter()
            report = index_documents(read_corpus(corpus), store, glove, 15, workers=workers)
            seconds = time.perf_counter() - started
            store.close()
            rates[workers].append(report.indexed / seconds)
            print(f"  workers={workers}: {report.indexed} docs in {seconds:.2f} s = {report.indexed / seconds:.0f} docs/s")
    one, two = np.median(rates[1]), np.median(rates[2])
    print(f"median: 1 worker {one:.0f} docs/s, 2 workers {two:.0f} docs/s, ratio {two / one:.2f}x")


if __name__ == "__main__":  # worker processes are spawned: they re-import this module
    main()
