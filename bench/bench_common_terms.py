"""Benchmark: the first stage searched without the terms most documents hold, scored whole.

A summary is a long query: 62-219 term clauses over the two BM25 fields, and the commonest of
its terms hold most of the postings tantivy visits (its search does not prune:
docs/performance.md). Under Robertson and Sparck Jones's idf, ln((N - n + 0.5) / (n + 0.5)), a
term held by more than half the documents carries no evidence (its idf is at most 0); Lucene's
idf, ln(1 + (N - n + 0.5) / (n + 0.5)), which the first stage uses, keeps it below ln 2.

`EmbeddedStore.bm25` (since 2026-11-28) can search without the clauses of those terms
(`TextIndex.common_terms`) for the best 100, then add those clauses' share of each hit's
score from its stored words (`bm25_of_stored`, with the index's rounded lengths), so every hit
scores as the whole query scores it; only which documents enter the window can differ: one that
the whole query ranks in its window only thanks to the common terms' share. It does so only when
the common clauses hold more postings than a search's fixed cost and the window's words
(`_short_search_pays`): over a large index. This prints what the short search changes and what it saves, against tantivy's
search of every clause:

1. On both shared data sets (each indexed into a throw-away data dir by the real pipeline; too
   small for the store to search short, so made to): nDCG@10 of the top 100 of both (paired
   randomisation test, wins/ties/losses), how much of the top 100 they share, for how many
   queries the top 10 is the same, and the largest relative difference between the two scores
   of a document both hold.
2. With --store DIR (a data dir kept by `bench_passages.py --documents N --store DIR`, or any
   data dir with an index): over its documents, the 40 CL-SciSumm summaries' top 100 the same
   way, and the time of each (the store's first stage with every clause searched, searched
   short, and as the store chooses), in a seeded random order per query, 3 rounds, with the share of
   clauses and postings the short search visits, and for how many summaries the store's rule
   chose the faster of the two.

   Given several stores of different sizes, the cost per window word and per posting fitted
   over all their summaries at windows of 100 and 300 (the words the short search reads vary
   with the window; the whole and the short search also timed for 300, in the same way),
   and the same fit with a fixed cost per search, which `SHORT_SEARCH_FIXED_COST` and
   `STORED_WORD_COST` stand for, and for how many first stages each rule picks the faster.

Run:  python bench/bench_common_terms.py                   (about 30 s)
      python bench/bench_common_terms.py --store DIR       (and the speed at DIR's size)
      python bench/bench_common_terms.py --store D1 --store D2 ...   (and the fitted costs)
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import contextlib
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any, Iterator

from benchlib import require, table, throwaway_index

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
WINDOW = 100
ROUNDS = 3
# Windows the costs are fitted over (`fitted_costs`): the words the short search reads vary with them.
FIT_WINDOWS = (WINDOW, 3 * WINDOW)


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
            with forced_short():
                row = compare(engine.store, whole_query(whole.store), list(dataset.queries), dataset.qrels)
        finally:
            whole.store.close()
    return [f"{folder.name} ({len(dataset.qrels)})", *row]


def speed(store: Path) -> list[tuple[float, float, float]]:
    """Times the first stage over the index in `store` and prints the tables; returns, per
    summary and per window of FIT_WINDOWS, (the common clauses' postings, the window's words
    as the store estimates them, the short search's time less the whole query's, in ms)."""
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
    kept_clauses, kept_postings, chosen, costs = [], [], [], []
    for text in queries:
        terms = tokenize(text)[:MAX_QUERY_TERMS]
        common = short._text.common_terms(terms)
        statistics_ = short._text.scoring_statistics(terms)
        costs.append((
            sum(sum(short._text.doc_freqs(field, found).values()) for field, found in common.items()),
            statistics_[1] if statistics_ else 0.0,
        ))
        clauses = postings = kept = visited = 0
        for field, analysed in short._text.analysed(terms).items():
            for term, frequency in short._text.doc_freqs(field, analysed).items():
                clauses, postings = clauses + 1, postings + frequency
                if term not in common.get(field, ()):
                    kept, visited = kept + 1, visited + frequency
        kept_clauses.append(kept / clauses)
        kept_postings.append(visited / max(postings, 1))
        chosen.append(bool(common) and short._short_search_pays(terms, common, WINDOW))
    with forced_short():
        row = compare(short, whole, [(str(number), text) for number, text in enumerate(queries)], None)
    names = ("every clause", "searched short, scored whole", "as the store chooses")
    times: dict[str, list[list[float]]] = {name: [[] for _ in queries] for name in names}

    def timed(name: str, text: str, hits: int = WINDOW) -> float:
        with forced_short() if name == names[1] else contextlib.nullcontext():
            started = time.perf_counter()
            (whole if name == names[0] else short).bm25(text, hits)
            return (time.perf_counter() - started) * 1000

    for text in queries[:5]:  # warm: the first reads of each term's postings and each row
        for name in names:
            timed(name, text)
    order = random.Random(7)  # each query's arms in a new order each round
    for _ in range(ROUNDS):
        for number, text in enumerate(queries):
            for name in order.sample(names, len(names)):
                times[name][number].append(timed(name, text))
    per_query = {name: [statistics.median(each) for each in times[name]] for name in names}
    # The fit's other windows: the short search's cost grows with the words it reads, the
    # whole query's does not.
    fit = [(postings, WINDOW * length, short_ms - whole_ms)
           for (postings, length), whole_ms, short_ms in zip(costs, per_query[names[0]], per_query[names[1]])]
    for hits in FIT_WINDOWS[1:]:
        pairs: list[list[list[float]]] = [[[], []] for _ in queries]
        for _ in range(ROUNDS):
            for number, text in enumerate(queries):
                for arm in order.sample(range(2), 2):
                    pairs[number][arm].append(timed(names[arm], text, hits))
        fit += [(postings, hits * length, statistics.median(short_ms) - statistics.median(whole_ms))
                for (postings, length), (whole_ms, short_ms) in zip(costs, pairs)]
    faster = [min(a, b) for a, b in zip(per_query[names[0]], per_query[names[1]])]
    right = sum((b < a) == pick for a, b, pick in zip(per_query[names[0]], per_query[names[1]], chosen))
    p50 = {name: statistics.median(sum(times[name], [])) for name in names}
    print(f"\nOver {documents:,} documents ({store}), the {len(queries)} summaries' top {WINDOW}:")
    print(table(["", "top 100 shared", "the same top 10", "largest score difference"], [["searched short, scored whole", *row[4:]]]))
    print(f"The store's first stage (`EmbeddedStore.bm25`), {ROUNDS} rounds, the three in a random order per query:")
    print(table(
        ["first stage", "p50", "x every clause", "clauses searched (median)", "postings (median)"],
        [["every clause", f"{p50[names[0]]:.1f} ms", "1.00x", "1.00", "1.00"],
         ["searched short, scored whole", f"{p50[names[1]]:.1f} ms", f"{p50[names[1]] / p50[names[0]]:.2f}x",
          f"{statistics.median(kept_clauses):.2f}", f"{statistics.median(kept_postings):.2f}"],
         [f"as the store chooses (short for {sum(chosen)} of {len(queries)})", f"{p50[names[2]]:.1f} ms",
          f"{p50[names[2]] / p50[names[0]]:.2f}x", "-", "-"],
         ["the faster of the first two, per query", f"{statistics.median(faster):.1f} ms",
          f"{statistics.median(faster) / statistics.median(per_query[names[0]]):.2f}x", "-", "-"]],
    ))
    print(f"The store's rule (`_short_search_pays`) chose the faster of the first two for {right} of {len(queries)} summaries.")
    short.close()
    whole.close()
    return fit


def fitted_costs(measured: list[tuple[float, float, float]]) -> None:
    """Least squares of (short - whole) = c_word x words - c_posting x postings over every
    summary, window and store; and with a fixed cost per search as well, what the store's
    rule stands for (`SHORT_SEARCH_FIXED_COST`: fixed / c_posting; `STORED_WORD_COST`: c_word
    / c_posting). Without it (the rule before), the fixed cost folds into the ratio at the
    stores' window sizes and mean lengths, and is missed over short documents."""
    import numpy as np

    from reranker.store import embedded

    postings, words, saved = (np.array(column, dtype=np.float64) for column in zip(*measured))
    (c_word, c_posting), *_ = np.linalg.lstsq(np.column_stack([words, -postings]), saved, rcond=None)
    (fixed, c_word_f, c_posting_f), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(words), words, -postings]), saved, rcond=None)
    print(f"\nOver {len(saved)} first stages ({', '.join(map(str, FIT_WINDOWS))} hits): the short search's cost, fitted: "
          f"{c_word * 1e6:.1f} ns a word of the window (hits x mean length) against {c_posting * 1e6:.1f} ns a posting "
          f"the whole query visits more: {c_word / c_posting:.2f} postings a word.")
    print(f"With a fixed cost per search: {fixed:.2f} ms + {c_word_f * 1e6:.1f} ns a word, against {c_posting_f * 1e6:.1f} ns a posting: "
          f"{fixed / c_posting_f:,.0f} postings + {c_word_f / c_posting_f:.2f} a word (`SHORT_SEARCH_FIXED_COST`: "
          f"{embedded.SHORT_SEARCH_FIXED_COST:,}, `STORED_WORD_COST`: {embedded.STORED_WORD_COST:g}).")
    print("Searched short when the common clauses hold more postings than F + r x words; the faster of the two for:")
    rules = {(0.0, 1.0), (0.0, 3.0), (0.0, round(float(c_word / c_posting), 2)),
             (round(float(fixed / c_posting_f), -4), round(float(c_word_f / c_posting_f), 2)),
             (float(embedded.SHORT_SEARCH_FIXED_COST), embedded.STORED_WORD_COST)}
    for fixed_postings, ratio in sorted(rules):
        picked = postings > fixed_postings + ratio * words
        mark = "  (the store's)" if (fixed_postings, ratio) == (embedded.SHORT_SEARCH_FIXED_COST, embedded.STORED_WORD_COST) else ""
        print(f"  F = {fixed_postings:>9,.0f}, r = {ratio:<5g} {int(((saved < 0) == picked).sum())} of {len(saved)}{mark}")


@contextlib.contextmanager
def forced_short() -> Iterator[None]:
    """The store searches short whenever a query holds common terms, whatever the index's size."""
    from reranker.store import embedded

    kept = embedded.SHORT_SEARCH_FIXED_COST, embedded.STORED_WORD_COST
    embedded.SHORT_SEARCH_FIXED_COST, embedded.STORED_WORD_COST = 0, 0.0
    try:
        yield
    finally:
        embedded.SHORT_SEARCH_FIXED_COST, embedded.STORED_WORD_COST = kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--store", type=Path, action="append", default=[],
        help="also compare and time the two over this data dir (a kept bench_passages.py one); several: "
        "fit what the short search costs against what it saves over all of them",
    )
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
    measured = [row for store in args.store for row in speed(store)]
    if len(args.store) > 1:
        fitted_costs(measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
