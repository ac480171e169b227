"""The common-direction correction's cost, as ratios measured in one run.

    python bench/bench_correction.py            # about 30 s; exits 1 if a target fails

Synthetic word vectors with a shared direction (seed 2018), float32, one BLAS thread.
1. Scoring: `corrected_score` (with centring the query, as the ranker does) against the
   paper's `score`, N = 100 candidates of K = 15 topics, m = 20 query words, d = 300.
   Target: within 1.2x.
2. Extraction: the corrected topics of a 2,000-word document (800 distinct words with Zipf
   counts, d = 300): centring, `extract_topics` and the backgrounds over 1,000 words
   (`extraction.Correction.topics`), against `extract_topics` of the same words as indexing did
   before. Target: within 1.5x. Also printed: what indexing one document costs now (both
   sets of topics from one Gram matrix, `extract_topic_pair`, and the backgrounds) against
   before.
Medians over repeats after a warm-up, the garbage collector paused.
"""

from __future__ import annotations

import argparse
import os

from benchlib import product_threads

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import gc  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
from benchlib import machine, require, table  # noqa: E402

from reranker.extraction import Correction  # noqa: E402
from reranker.topics import (  # noqa: E402
    center,
    corpus_centering,
    corrected_score,
    extract_topic_pair,
    extract_topics,
    score,
    topic_background,
    unit_rows,
)

D, K, N, M = 300, 15, 100, 20
WORDS, DISTINCT, BACKGROUND = 2_000, 800, 1_000


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()
    gc.disable()
    try:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return float(np.median(times)) * 1e3


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    rng = np.random.default_rng(2018)
    common = rng.standard_normal(D)
    vocabulary = (rng.standard_normal((5_000, D)) + 2.0 * common).astype(np.float32)
    frequencies = 1.0 / np.arange(1, 5_001)
    mu, direction = corpus_centering(vocabulary, frequencies)
    units = unit_rows(center(vocabulary[:BACKGROUND], mu, direction))
    weights = (frequencies[:BACKGROUND] / frequencies[:BACKGROUND].sum()).astype(np.float32)
    correction = Correction(mu, direction, np.ascontiguousarray(units.T), weights)

    # Scoring: N candidates' topics, paper and corrected, and one query.
    topics = np.stack([extract_topics(vocabulary[rng.choice(5_000, 300, replace=False)], K)[0] for _ in range(N)])
    importances = np.full((N, K), 1.0 / K, dtype=np.float32)
    backgrounds = np.stack([topic_background(t, units, weights) for t in topics])
    query = vocabulary[rng.choice(5_000, M)]
    paper_ms = median_ms(lambda: score(query, topics, importances), 300)
    corrected_ms = median_ms(lambda: corrected_score(center(query, mu, direction), topics, importances, backgrounds), 300)

    # Extraction: one document's distinct words with Zipf counts.
    rows = vocabulary[rng.choice(5_000, DISTINCT, replace=False)]
    counts = rng.zipf(1.5, DISTINCT).astype(np.float32)
    counts *= WORDS / counts.sum()
    before_ms = median_ms(lambda: extract_topics(rows, K, counts=counts), 60)
    corrected_extraction_ms = median_ms(lambda: correction.topics(rows, counts, K), 60)
    def both() -> object:  # what indexing does per document now
        paper, centred = extract_topic_pair(rows, K, counts, mu, direction)
        return paper, correction.with_backgrounds(*centred)

    now_ms = median_ms(both, 60)
    require(corrected_extraction_ms > 0 and paper_ms > 0, "timings")

    print(machine(["numpy", "scipy"], os.environ["OPENBLAS_NUM_THREADS"]))
    print(table(
        ["what", "before (paper)", "corrected", "ratio"],
        [
            [f"scoring N={N}, m={M}, d={D}, p50", f"{paper_ms:.3f} ms", f"{corrected_ms:.3f} ms", f"{corrected_ms / paper_ms:.2f}x"],
            [f"extraction, {WORDS:,} words ({DISTINCT} distinct), d={D}", f"{before_ms:.2f} ms", f"{corrected_extraction_ms:.2f} ms", f"{corrected_extraction_ms / before_ms:.2f}x"],
            ["indexing one document: paper topics (before) / both (now)", f"{before_ms:.2f} ms", f"{now_ms:.2f} ms", f"{now_ms / before_ms:.2f}x"],
        ],
    ))
    targets = [
        (f"corrected scoring within 1.2x of the paper's: {corrected_ms / paper_ms:.2f}x", corrected_ms / paper_ms <= 1.2),
        (f"corrected extraction within 1.5x of the paper's: {corrected_extraction_ms / before_ms:.2f}x", corrected_extraction_ms / before_ms <= 1.5),
    ]
    for line, passed in targets:
        print(f"{'PASS' if passed else 'FAIL'}  {line}")
    return 0 if all(passed for _, passed in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
