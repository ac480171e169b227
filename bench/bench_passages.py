"""Benchmark: what the default's best passage (`hidden_topics_corrected+bm25:maxp`) costs over
the fusion without it (`hidden_topics_corrected+bm25`), per query and per stored document.

For each data set, the corpus is indexed into a throw-away data dir by the real pipeline;
then for each query, BM25 top 100 once, and the two rankers' complete + rerank (what a
/search pays after its first stage), alternating which runs first, 3 rounds. Printed:
p50 and p90 ms per query of each, their ratio, and the bytes the store keeps for passages
(each document's `WordPositions`) against its whole SQLite file.

Data: ../shared/data's CL-SciSumm (567 papers of about 5,300 words: the long case) and CISI
(1,460 abstracts), else the bundled sample. GloVe 6B 50-d, K = 15, one BLAS thread, as the
service runs.

With --documents N (the search-path budget: docs/performance.md, under 20 ms p50 at 50,000
documents): CL-SciSumm's papers repeated under new ids to N documents (as
bench_first_stage.py builds them), indexed with 2 topic workers, then the whole search path
(`Engine.search`: BM25 top 100, what the ranker needs, rerank, top 10) for `hidden_topics`
(the path bench_first_stage.py times), the previous default and the default, alternating
per query, 3 rounds over the 40 summaries: p50 and p95 and the ratios to the previous default
and to `hidden_topics` (the budget's path), and the bytes kept for passages per document;
timed in the same rounds, the store's BM25 top 100 alone (the first stage's share of the
path) and tantivy's search alone for a top 100 and a top 10 (their ratio says whether the
search prunes: it does not, see bench/README.md). The same index is also timed with the first
stage searching every clause of the query (as before it left out the terms most documents
hold: `EmbeddedStore.bm25`), in the same rounds, and the ratio printed.
With --compact as well: a copy of the index compacted into one segment (`reranker compact`),
timed alternating with the index as it was indexed, and the ratio of the two.

Run:  python bench/bench_passages.py                     (about 1 minute)
      python bench/bench_passages.py --documents 50000   (about 15 minutes, most of it indexing)
      python bench/bench_passages.py --documents 50000 --store DIR   (kept in DIR: the next
                                                         run of the same code times again at once)
      python bench/bench_passages.py --documents 50000 --store DIR --compact   (+ 3-5 minutes)
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import shutil
import sqlite3
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import throwaway_index

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
ROUNDS = 3
RANKERS = ("hidden_topics_corrected+bm25", "hidden_topics_corrected+bm25:maxp")


def measure(folder: Path) -> None:
    from reranker.datasets import load_dataset

    dataset = load_dataset(folder)
    with throwaway_index(folder / "corpus.jsonl") as engine:
        rankers = [engine.ranker(name) for name in RANKERS]
        timings: dict[str, list[float]] = {name: [] for name in RANKERS}
        for round_ in range(ROUNDS):
            for number, (_, text) in enumerate(dataset.queries):
                query = engine.query(text)
                window = replace(engine.window(query, 100), exact_top=10)
                order = rankers if (number + round_) % 2 == 0 else rankers[::-1]
                for ranker in order:
                    started = time.perf_counter()
                    engine.rerank(query, engine.complete(window, ranker), ranker)
                    timings[ranker.name].append(time.perf_counter() - started)
        store_dir = engine.store.directory  # type: ignore[attr-defined]  # the embedded store's
        engine.store.close()
        database = store_dir / "store.sqlite3"
        with sqlite3.connect(database) as connection:
            kept, documents = connection.execute("SELECT (SELECT SUM(LENGTH(positions)) FROM passages), COUNT(*) FROM docs").fetchone()
        whole = database.stat().st_size
    base = float(np.median(timings[RANKERS[0]]))
    print(f"\n{folder.name}: {len(dataset.queries)} queries x {ROUNDS} rounds, windows of 100 documents")
    print(f"{'ranker (complete + rerank)':<38} {'p50 ms':>8} {'p90 ms':>8} {'x first':>8}")
    for name, values in timings.items():
        p50, p90 = 1000 * float(np.median(values)), 1000 * float(np.percentile(values, 90))
        print(f"{name:<38} {p50:8.2f} {p90:8.2f} {p50 / 1000 / base:7.2f}x")
    print(
        f"words' positions kept for passages: {kept / documents / 1024:.1f} KB per document, "
        f"{kept / whole:.0%} of the store's SQLite file ({whole / 2**20:.1f} MB)"
    )


def search_path(documents: int, store: Path | None, compact: bool) -> None:
    from bench_first_stage import write_corpus

    from reranker.config import Settings
    from reranker.datasets import load_dataset
    from reranker.indexing import index_corpus
    from reranker.pipeline import build_engine
    from reranker.store.text_index import TextIndex

    folder = SHARED / "clscisumm2018-train"
    queries = [text for _, text in load_dataset(folder).queries]
    rankers = ("hidden_topics", *RANKERS)
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = store or Path(scratch)
        os.environ["RERANKER_DATA_DIR"] = str(data_dir)
        corpus = data_dir / f"corpus-{documents}.jsonl"
        settings = Settings.from_env()
        engine = build_engine(settings)
        if not corpus.exists():
            write_corpus(corpus, documents)
        # Indexing skips documents already stored as they are: a kept --store is timed again
        # without indexing again (12 minutes at 50,000), and re-derived if the code changed.
        started = time.perf_counter()
        report = index_corpus(corpus, engine.store, engine.vectors, settings.k, stopwords=engine.stopwords, show_progress=False, workers=2)
        print(f"\n{documents:,} documents (CL-SciSumm papers repeated): {report.indexed:,} indexed, {report.unchanged:,} unchanged, in {time.perf_counter() - started:.0f} s")
        print(f"the text index as indexed: {TextIndex(data_dir / 'index' / 'text').segments()} segments")
        engines = {"as indexed": engine}
        # The same index searched with every clause of the query, never without the
        # commonest terms (`EmbeddedStore.bm25` leaves them out over a large index): timed
        # alternating.
        whole = build_engine(settings)
        whole.store._text.common_terms = lambda words: {}  # type: ignore[attr-defined]  # the embedded store's
        engines[WHOLE] = whole
        if compact:
            # A copy, compacted: the two are timed alternating, and a kept --store stays as indexed.
            copy = Path(scratch) / "compacted"
            shutil.copytree(data_dir / "index", copy / "index")
            engines["compacted"] = build_engine(replace(settings, data_dir=copy))
            started = time.perf_counter()
            result = engines["compacted"].store.compact()
            print(
                f"`reranker compact` of a copy: {result.segments_before} segments -> {result.segments_after} "
                f"in {time.perf_counter() - started:.0f} s"
            )
        timings = _time_search_path(engines, queries, rankers)
        # What a search pays once per thread after the index changes (the lengths BM25
        # averages, summed again: the embedded store's own cache, cleared by hand here) and
        # what each /readyz pays (the document count).
        embedded: Any = engine.store
        summed, counted = [], []
        for _ in range(5):
            embedded._local.__dict__.pop("lengths", None)
            started = time.perf_counter()
            embedded._statistics()
            summed.append(time.perf_counter() - started)
            started = time.perf_counter()
            embedded.count()
            counted.append(time.perf_counter() - started)
        store_dir = engine.store.directory  # type: ignore[attr-defined]  # the embedded store's
        for each in engines.values():
            each.store.close()
        print(
            f"after the index changes: its lengths summed again in {1000 * float(np.median(summed)):.1f} ms "
            f"(once per thread), the document count in {1000 * float(np.median(counted)):.1f} ms (each /readyz)"
        )
        print(_kept_bytes(store_dir / "store.sqlite3"))
    for label in engines:
        base, budget = (float(np.median(timings[label, name])) for name in (RANKERS[0], "hidden_topics"))
        print(f"{'search path, ' + label + ' (top 10 of 100)':<44} {'p50 ms':>8} {'p95 ms':>8} {'x previous':>10} {'x hidden_topics':>15}")
        for name in (*rankers, *FIRST_STAGE):
            values = timings[label, name]
            p50, p95 = 1000 * float(np.median(values)), 1000 * float(np.percentile(values, 95))
            print(f"{name:<44} {p50:8.2f} {p95:8.2f} {p50 / 1000 / base:9.2f}x {p50 / 1000 / budget:14.2f}x")
        # tantivy skips postings that cannot enter the top k (block-max WAND) only under its
        # plain top-score collector; tantivy-py's `Searcher.search` always collects through a
        # MultiCollector (even with count=False), which visits every matching document.
        top100, top10 = (float(np.median(timings[label, name])) for name in FIRST_STAGE[1:])
        print(f"{'tantivy top 10 / top 100, p50':<44} {top10 / top100:8.2f}x  (about 1: both visit every match)")
    print(f"{'as indexed / ' + WHOLE + ', p50':<44}")
    for name in (*rankers, FIRST_STAGE[0]):
        print(f"{name:<44} {float(np.median(timings['as indexed', name])) / float(np.median(timings[WHOLE, name])):8.2f}x")
    if compact:
        print(f"{'compacted / as indexed, p50':<44}")
        for name in (*rankers, *FIRST_STAGE):
            print(f"{name:<44} {float(np.median(timings['compacted', name])) / float(np.median(timings['as indexed', name])):8.2f}x")


WHOLE = "every clause searched"
# The first stage alone, timed beside the whole paths: its share of the budget; and tantivy's
# search alone for a top 100 and a top 10, which would cost less if the search skipped
# postings that cannot enter the top.
FIRST_STAGE = ("BM25 top 100 alone (the store's)", "tantivy's search alone, top 100", "tantivy's search alone, top 10")


def _time_search_path(engines: dict[str, Any], queries: list[str], rankers: tuple[str, ...]) -> dict[tuple[str, str], list[float]]:
    """`Engine.search` (top 10 of 100) per engine and ranker, and the first stage alone
    (FIRST_STAGE), ROUNDS x the queries, the order of engines and of what
    is timed alternating from query to query."""
    from reranker.text import tokenize

    runs: dict[str, Any] = {name: (lambda engine, query, name=name: engine.search(query, name, window=100, size=10)) for name in rankers}
    runs[FIRST_STAGE[0]] = lambda engine, query: engine.store.bm25(query, 100)
    runs[FIRST_STAGE[1]] = lambda engine, query: engine.store._text.search(tokenize(query, engine.stopwords), 100)
    runs[FIRST_STAGE[2]] = lambda engine, query: engine.store._text.search(tokenize(query, engine.stopwords), 10)
    names = list(runs)
    for engine in engines.values():
        for name in names:
            runs[name](engine, queries[0])  # warm: first reads
    timings: dict[tuple[str, str], list[float]] = {(label, name): [] for label in engines for name in names}
    labels = list(engines)
    for round_ in range(ROUNDS):
        for number, query in enumerate(queries):
            flip = (number + round_) % 2 == 1
            for label in labels[::-1] if flip else labels:
                for name in names[::-1] if flip else names:
                    started = time.perf_counter()
                    runs[name](engines[label], query)
                    timings[label, name].append(time.perf_counter() - started)
    return timings


def _kept_bytes(database: Path) -> str:
    """What the store keeps for passages per document, beside its whole SQLite file."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        kept, documents = connection.execute("SELECT (SELECT SUM(LENGTH(positions)) FROM passages), COUNT(*) FROM docs").fetchone()
    whole = database.stat().st_size
    return f"passages: {(kept or 0) / documents / 1024:.1f} KB per document; the SQLite file {whole / documents / 1024:.1f} KB per document ({whole / 2**30:.2f} GB)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, help="time the whole search path over this many documents instead")
    parser.add_argument("--store", type=Path, help="with --documents: keep the data dir (corpus and index) here and reuse it on later runs")
    parser.add_argument(
        "--compact", action="store_true",
        help="with --documents: also time a compacted copy of the index (`reranker compact`), alternating with it as indexed",
    )
    args = parser.parse_args()
    if args.documents:
        search_path(args.documents, args.store, args.compact)
        return 0
    folders = [SHARED / name for name in ("clscisumm2018-train", "cisi") if (SHARED / name).is_dir()]
    for folder in folders or [ROOT / "reranker" / "sample"]:
        measure(folder)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    raise SystemExit(main())
