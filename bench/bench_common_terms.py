"""Benchmark: the first stage searched without the terms most documents hold, scored whole.

A summary is a long query: 62-219 term clauses over the two BM25 fields, and the commonest of
its terms hold most of the postings tantivy visits (its search does not prune:
docs/performance.md). Under Robertson and Sparck Jones's idf, ln((N - n + 0.5) / (n + 0.5)), a
term held by more than half the documents carries no evidence (its idf is at most 0); Lucene's
idf, ln(1 + (N - n + 0.5) / (n + 0.5)), which the first stage uses, keeps it below ln 2.

`EmbeddedStore.bm25` (since 2026-11-28) searches without the clauses of those terms
(`TextIndex.common_terms`) for the best 100, then adds those clauses' share of each hit's
score from its stored words (`bm25_of_stored`, with the index's rounded lengths), so every hit
scores as the whole query scores it; only which documents enter the window can differ: one that
the whole query ranks in its window only thanks to the common terms' share. This prints what that changes and
what it saves, against tantivy's search of every clause:

1. On both shared data sets (each indexed into a throw-away data dir by the real pipeline):
   nDCG@10 of the top 100 of both (paired randomisation test, wins/ties/losses), how much of the
   top 100 they share, for how many queries the top 10 is the same, and the largest relative
   difference between the two scores of a document both hold.
2. With --store DIR (a data dir kept by `bench_passages.py --documents 50000 --store DIR`): over
   its documents, the 40 CL-SciSumm summaries' top 100 the same way, and the time of each (the
   store's first stage with every clause searched, and as it is), alternating per query, 3
   rounds, with the share of clauses and postings the short search visits.

Run:  python bench/bench_common_terms.py                   (about 30 s)
      python bench/bench_common_terms.py --store DIR       (and the speed at DIR's size)
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchlib import require, table, throwaway_index

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
WINDOW = 100
ROUNDS = 3


def whole_query(store: Any) -> Any:
    """`store`'s first stage as it was before: every clause searched (no common terms)."""
    store._text.common_terms = lambda words: {}
    return store


def compare(store: Any, whole: Any, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]] | None) -> list[str]:
    """One table row: the two first stages' top WINDOW for each query, compared."""
    from reranker.evaluation import paired_randomization_p, ranking_metrics

    every: list[float] = []
    short: list[float] = []
    shared: list[float] = []
    same_top10, largest = 0, 0.0
    for query_id, text in queries:
        relevant = qrels.get(query_id) if qrels is not None else {}
        if relevant is None:
            continue
        expected = [(hit.doc_id, hit.bm25_score) for hit in whole.bm25(text, WINDOW)]
        found = [(hit.doc_id, hit.bm25_score) for hit in store.bm25(text, WINDOW)]
        scores = dict(expected)
        largest = max([largest, *(abs(score - scores[doc_id]) / scores[doc_id] for doc_id, score in found if doc_id in scores)])
        shared.append(len(scores.keys() & dict(found).keys()) / max(len(expected), 1))
        same_top10 += [doc_id for doc_id, _ in expected[:10]] == [doc_id for doc_id, _ in found[:10]]
        if qrels is not None:
            every.append(ranking_metrics([doc_id for doc_id, _ in expected], relevant, WINDOW)["ndcg@10"])
            short.append(ranking_metrics([doc_id for doc_id, _ in found], relevant, WINDOW)["ndcg@10"])
    counted = f"{same_top10}/{len(shared)}"
    if qrels is None:
        return ["-", "-", "-", "-", f"{statistics.fmean(shared):.3f}", counted, f"{largest:.1e}"]
    p = paired_randomization_p(tuple(short), tuple(every))
    wins = sum(b > a for a, b in zip(every, short))
    ties = sum(b == a for a, b in zip(every, short))
    return [
        f"{statistics.fmean(every):.3f}", f"{statistics.fmean(short):.3f}", f"{p:.3f}",
        f"{wins}/{ties}/{len(every) - wins - ties}", f"{statistics.fmean(shared):.3f}", counted, f"{largest:.1e}",
    ]


def relevance(folder: Path) -> list[str]:
    """One row of the relevance table for the data set in `folder`."""
    from reranker.datasets import load_dataset
    from reranker.pipeline import build_engine

    dataset = load_dataset(folder)
    with throwaway_index(folder / "corpus.jsonl") as engine:
        from reranker.config import Settings

        whole = build_engine(Settings.from_env())
        try:
            row = compare(engine.store, whole_query(whole.store), list(dataset.queries), dataset.qrels)
        finally:
            whole.store.close()
    return [f"{folder.name} ({len(dataset.qrels)})", *row]


def speed(store: Path) -> None:
    from reranker.config import Settings
    from reranker.datasets import load_dataset
    from reranker.pipeline import build_engine
    from reranker.store import MAX_QUERY_TERMS
    from reranker.text import tokenize

    os.environ["RERANKER_DATA_DIR"] = str(store)
    engine, other = build_engine(Settings.from_env()), build_engine(Settings.from_env())
    short, whole = engine.store, whole_query(other.store)
    documents = short._text.num_docs()
    require(documents > 0, f"no text index with documents in {store / 'index' / 'text'}: run bench_passages.py --documents N --store {store} first")
    queries = [text for _, text in load_dataset(SHARED / DATASETS[0]).queries]
    kept_clauses, kept_postings = [], []
    for text in queries:
        common = short._text.common_terms(tokenize(text)[:MAX_QUERY_TERMS])
        clauses = postings = kept = visited = 0
        for field, terms in short._text.analysed(tokenize(text)[:MAX_QUERY_TERMS]).items():
            for term, frequency in short._text.doc_freqs(field, terms).items():
                clauses, postings = clauses + 1, postings + frequency
                if term not in common.get(field, ()):
                    kept, visited = kept + 1, visited + frequency
        kept_clauses.append(kept / clauses)
        kept_postings.append(visited / max(postings, 1))
    row = compare(short, whole, [(str(number), text) for number, text in enumerate(queries)], None)
    times: dict[str, list[float]] = {"every clause": [], "searched short, scored whole": []}
    runs = [("every clause", whole), ("searched short, scored whole", short)]
    for text in queries[:5]:  # warm: the first reads of each term's postings and each row
        for _, each in runs:
            each.bm25(text, WINDOW)
    for round_ in range(ROUNDS):
        for number, text in enumerate(queries):
            for name, each in runs if (number + round_) % 2 == 0 else runs[::-1]:
                started = time.perf_counter()
                each.bm25(text, WINDOW)
                times[name].append((time.perf_counter() - started) * 1000)
    whole_ms, short_ms = (statistics.median(times[name]) for name, _ in runs)
    print(f"\nOver {documents:,} documents ({store}), the {len(queries)} summaries' top {WINDOW}:")
    print(table(["", "top 100 shared", "the same top 10", "largest score difference"], [["searched short, scored whole", *row[4:]]]))
    print(f"The store's first stage (`EmbeddedStore.bm25`), {ROUNDS} rounds, alternating per query:")
    print(table(
        ["first stage", "p50", "x every clause", "clauses searched (median)", "postings (median)"],
        [["every clause", f"{whole_ms:.1f} ms", "1.00x", "1.00", "1.00"],
         ["searched short, scored whole", f"{short_ms:.1f} ms", f"{short_ms / whole_ms:.2f}x",
          f"{statistics.median(kept_clauses):.2f}", f"{statistics.median(kept_postings):.2f}"]],
    ))
    short.close()
    whole.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, help="also compare and time the two over this kept bench_passages.py data dir")
    args = parser.parse_args()
    folders = [SHARED / name for name in DATASETS if (SHARED / name / "corpus.jsonl").exists()]
    require(bool(folders), f"no shared data sets under {SHARED}")
    rows = [relevance(folder) for folder in folders]
    print(f"The first stage's top {WINDOW}: every clause searched, against searched without terms in > 50% of documents and scored whole")
    print(table(
        ["data set (queries)", "nDCG@10, every clause", "short, scored whole", "p (paired randomisation)", "W/T/L",
         "top 100 shared", "the same top 10", "largest score difference"],
        rows,
    ))
    if args.store is not None:
        speed(args.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
