"""Benchmark: what scoring sent texts with the index's BM25 adds to a Cohere-route rerank.

The Cohere routes (and /rerank without scores) get the hits' texts and no first-stage
scores; `Store.text_bm25` scores the texts with the embedded index's statistics before the
default fusion runs. This measures its cost per query against the rerank it precedes, in the
same process and run:

  rerank       the default ranker on the window's stored topics (Engine.complete + rerank:
               the rerank a /search pays)
  text_bm25    BM25 of the window's texts with the index's statistics, texts' terms cached
               (the same texts come back request after request)
  text_bm25, new texts   the same with an empty terms cache (every text tokenized)
  no index               the whole rerank of the texts (order as first stage, Engine.complete +
                         rerank) by a service with nothing indexed (`Engine._centering`: the
                         vectors' centering, the texts' own background; each text's best
                         passage with the texts' own statistics), texts seen before
  no index, new texts    the same with empty text caches (every text tokenized, its topics made)

and, after the timings, the memory a first sight takes: tracemalloc's peak above where the
call started, for "no index, new texts" over the first 5 windows (timed apart: tracing slows
Python down several times).

Data: CL-SciSumm's 567 papers (about 5,300 words) and its 40 summaries, BM25 top 100 (from
../shared/data; else the bundled sample's 25 papers and 5 queries). GloVe 6B 50-d, K = 15.

Run:  python bench/bench_text_bm25.py      (about 2 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "clscisumm2018-train"


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    from reranker.config import DEFAULT_RANKER, Settings
    from reranker.datasets import load_dataset
    from reranker.indexing import index_corpus
    from reranker.pipeline import build_engine, text_topic_cache
    from reranker.rankers import CandidateSet
    from reranker.store import LruCache
    from reranker.store.embedded import EmbeddedStore
    from reranker.types import Candidate

    folder = SHARED if SHARED.is_dir() else ROOT / "reranker" / "sample"
    dataset = load_dataset(folder)
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ["RERANKER_DATA_DIR"] = data_dir
        settings = Settings.from_env()
        engine = build_engine(settings)
        index_corpus(folder / "corpus.jsonl", engine.store, engine.vectors, settings.k, stopwords=engine.stopwords)
        ranker = engine.ranker(DEFAULT_RANKER)
        store_dir = engine.store.directory  # type: ignore[attr-defined]  # the embedded store's
        timings: dict[str, list[float]] = {"rerank": [], "text_bm25": [], "text_bm25, new texts": [], "no index": [], "no index, new texts": []}
        peaks: list[float] = []  # bytes above the start of a first sight, "no index, new texts"
        empty_dir = tempfile.TemporaryDirectory()
        unindexed = replace(engine, store=EmbeddedStore(Path(empty_dir.name), engine.stopwords), text_topics=text_topic_cache(2**26))
        unindexed.check_ranker(ranker)  # the vectors' own centering, made at a worker's start
        for number, (_, text) in enumerate([*dataset.queries, *dataset.queries[:5]]):
            traced = number >= len(dataset.queries)  # the memory pass, after the timed one
            query = engine.query(text)
            window = engine.window(query, 100)
            found = engine.store.documents([c.doc_id for c in window.candidates])
            texts = [found[c.doc_id].full_text for c in window.candidates]
            # A store opened afresh on the same index has an empty cache: every text is new.
            cold = EmbeddedStore(store_dir, engine.stopwords)
            cold.text_bm25(text, texts[:1])  # its connection and statistics, not timed
            for name in () if traced else ("text_bm25, new texts", "text_bm25"):
                # Each call gets texts of its own, as each request's body gives new strings (a
                # str remembers its hash, which a text seen again as the same object reuses).
                copies = json.loads(json.dumps(texts))
                started = time.perf_counter()
                cold.text_bm25(text, copies)
                timings[name].append(time.perf_counter() - started)
            cold.close()
            if not traced:
                started = time.perf_counter()
                engine.rerank(query, engine.complete(replace(window, exact_top=10), ranker), ranker)
                timings["rerank"].append(time.perf_counter() - started)
            # Every cache empty: the topics', the word ids' and the store's texts' terms (its
            # best passages read them), as in a worker that has not seen these texts.
            fresh = replace(
                unindexed,
                store=EmbeddedStore(Path(empty_dir.name), engine.stopwords),
                text_topics=text_topic_cache(2**26),
                word_id_cache=LruCache(2**26, lambda ids: ids.nbytes + 64),
            )
            for name, scoring in (("no index, new texts", fresh), ("no index", fresh)):
                # The Cohere route's window: the texts in the cluster's order, no scores;
                # texts of its own for each call, as above.
                sent = CandidateSet(
                    tuple(Candidate(str(i), 0.0, i + 1) for i in range(len(texts))),
                    texts=tuple(json.loads(json.dumps(texts))),
                    first_stage="order",
                    exact_top=10,
                    query_text=text,
                )
                if traced and name == "no index, new texts":
                    tracemalloc.start()
                    before = tracemalloc.get_traced_memory()[0]
                    scoring.rerank(query, scoring.complete(sent, ranker), ranker)
                    peaks.append(tracemalloc.get_traced_memory()[1] - before)
                    tracemalloc.stop()
                elif not traced:
                    started = time.perf_counter()
                    scoring.rerank(query, scoring.complete(sent, ranker), ranker)
                    timings[name].append(time.perf_counter() - started)
            fresh.store.close()
        engine.store.close()
        unindexed.store.close()
        empty_dir.cleanup()
    base = float(np.median(timings["rerank"]))
    print(f"{folder.name}: {len(dataset.queries)} queries, windows of 100 documents, default ranker {DEFAULT_RANKER}")
    print(f"{'per query':<24} {'p50 ms':>8} {'p90 ms':>8} {'x rerank':>9}")
    for name, values in timings.items():
        p50, p90 = 1000 * float(np.median(values)), 1000 * float(np.percentile(values, 90))
        print(f"{name:<24} {p50:8.2f} {p90:8.2f} {p50 / 1000 / base:8.2f}x")
    shown = ", ".join(f"{peak / 2**20:.1f}" for peak in peaks)
    print(f"memory of a first sight (no index, new texts; tracemalloc's peak above its start, {len(peaks)} windows): {shown} MB")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
