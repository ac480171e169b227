"""Benchmark: what the default's best passage (`hidden_topics_corrected+bm25:maxp`) costs over
the fusion without it (`hidden_topics_corrected+bm25`), per query and per stored document.

For each data set, the corpus is indexed into a throw-away data dir by the real pipeline;
then for each query, BM25 top 100 once, and the two rankers' complete + rerank (what a
/search pays after its first stage), alternating which runs first, 3 rounds. Printed:
p50 and p90 ms per query of each, their ratio, and the store's bytes of kept stems against
its whole SQLite file.

Data: ../shared/data's CL-SciSumm (567 papers of about 5,300 words: the long case) and CISI
(1,460 abstracts), else the bundled sample. GloVe 6B 50-d, K = 15, one BLAS thread, as the
service runs.

Run:  python bench/bench_passages.py      (about 1 minute)
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")

import sqlite3
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
ROUNDS = 3
RANKERS = ("hidden_topics_corrected+bm25", "hidden_topics_corrected+bm25:maxp")


def measure(folder: Path) -> None:
    from reranker.config import Settings
    from reranker.datasets import load_dataset
    from reranker.indexing import index_corpus
    from reranker.pipeline import build_engine

    dataset = load_dataset(folder)
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ["RERANKER_DATA_DIR"] = data_dir
        settings = Settings.from_env()
        engine = build_engine(settings)
        index_corpus(folder / "corpus.jsonl", engine.store, engine.vectors, settings.k, stopwords=engine.stopwords, show_progress=False)
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
            kept, documents = connection.execute("SELECT SUM(LENGTH(passage_terms)), COUNT(*) FROM docs").fetchone()
        whole = database.stat().st_size
    base = float(np.median(timings[RANKERS[0]]))
    print(f"\n{folder.name}: {len(dataset.queries)} queries x {ROUNDS} rounds, windows of 100 documents")
    print(f"{'ranker (complete + rerank)':<38} {'p50 ms':>8} {'p90 ms':>8} {'x first':>8}")
    for name, values in timings.items():
        p50, p90 = 1000 * float(np.median(values)), 1000 * float(np.percentile(values, 90))
        print(f"{name:<38} {p50:8.2f} {p90:8.2f} {p50 / 1000 / base:7.2f}x")
    print(
        f"stems kept for passages: {kept / documents / 1024:.1f} KB per document, "
        f"{kept / whole:.0%} of the store's SQLite file ({whole / 2**20:.1f} MB)"
    )


def main() -> int:
    folders = [SHARED / name for name in ("clscisumm2018-train", "cisi") if (SHARED / name).is_dir()]
    for folder in folders or [ROOT / "reranker" / "sample"]:
        measure(folder)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
