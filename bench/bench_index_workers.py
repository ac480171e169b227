"""Topic-extraction workers: indexing throughput with 1 and 2 processes, no server involved.

    python bench/bench_index_workers.py [--docs 3000] [--words 2000]

Generates 2,000-word documents (words drawn 1/rank from GloVe's frequent words), indexes
them into a fresh embedded store with `workers=1` and `workers=2`, alternating, and prints
documents per second and the ratio. Worker start-up (spawning, importing numpy/gensim,
opening the memory-mapped vectors) is included: it is what a user waits for.

First it times what a worker does to each document's text: its words and the words that read
as words in one pass (`text.content_words`, what the write path calls) against the two passes
it made before (`tokenize`, then `readable_words`), and a worker's whole document
(`indexing._topics_of`: topics, corrected topics, stems, passages' words), on CL-SciSumm's
papers when ../shared is there (else the generated documents), best of 3, same run.
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
from reranker.embeddings import WordVectors, load_vectors
from reranker.extraction import Correction, estimate_centering
from reranker.indexing import _topics_of, index_documents, read_corpus
from reranker.store.embedded import EmbeddedStore
from reranker.store.text_index import stem_words
from reranker.text import content_words, readable_words, tokenize
from reranker.types import Document

PAPERS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "clscisumm2018-train" / "corpus.jsonl"


def tokenizing(corpus: Path, glove: WordVectors) -> None:
    """Per document: one tokenizing pass, two, and a worker's whole document (ms)."""
    source = PAPERS if PAPERS.is_file() else corpus
    documents = [item for _, item, _ in read_corpus(source) if isinstance(item, Document)][:300]
    centering = estimate_centering(documents, glove)
    assert centering is not None
    correction = Correction.of(centering, glove)

    def best(run: object) -> float:
        seconds = []
        for _ in range(3):
            started = time.perf_counter()
            run()  # type: ignore[operator]
            seconds.append(time.perf_counter() - started)
        return 1000 * min(seconds) / len(documents)

    one = best(lambda: [content_words(d.full_text) for d in documents])
    two = best(lambda: [(tokenize(d.full_text), readable_words(d.full_text)) for d in documents])
    whole = best(lambda: _topics_of(documents, glove, 15, None, correction, stem_words))
    print(f"{len(documents)} documents of {source.parent.name if source == PAPERS else 'generated text'}, per document:")
    print(f"  tokenizing, one pass {one:.2f} ms, two passes {two:.2f} ms ({two / one:.2f}x)")
    print(f"  a worker's whole document {whole:.2f} ms; with two passes it would be {whole + two - one:.2f} ms ({(whole + two - one) / whole:.2f}x)")


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
    tokenizing(corpus, glove)
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
