"""Benchmark: the first stage without the terms most documents hold (a lead, not adopted).

A summary is a long query: 62-219 term clauses over the two BM25 fields, and the commonest of
its terms hold most of the postings tantivy visits (its search does not prune:
docs/performance.md). Under Robertson and Sparck Jones's idf, ln((N - n + 0.5) / (n + 0.5)), a
term held by more than half the documents carries no evidence (its idf is at most 0); Lucene's
idf, ln(1 + (N - n + 0.5) / (n + 0.5)), which the first stage uses, keeps it below ln 2. The rule
measured here, fixed before the relevance runs: leave out every (field, term) clause whose term
more than half the index's documents hold.

1. Relevance of the BM25 order itself, on both shared data sets (each indexed into a throw-away
   data dir by the real pipeline): nDCG@10 of the top 100 of the product's query and of the
   query without those clauses, paired randomisation test, wins/ties/losses, and how much of the
   top 100 the two share.
2. Speed, with --store DIR (a data dir kept by `bench_passages.py --documents 50000 --store
   DIR`): tantivy's top 100 for the 40 CL-SciSumm summaries, the two queries alternating per
   query, 3 rounds: p50 of each, their ratio, the share of clauses and of postings kept.

The scores change with the query (the left-out terms no longer add their share), so adopting
the rule changes the first stage's results and the fusions that read its scores. Tried in the
product on 2026-11-28, every BM25 of it (the first stage's, the best passage's, sent texts')
leaving the same terms out: BM25 0.736 against 0.721 on CL-SciSumm, but the default fell to
0.767 against 0.785 (p = 0.047 against BM25, where it is < 0.001), below the 0.78 target; CISI
the same to the digit. The common terms' share of a document's and its passage's BM25 is part
of what the fusion reads, so the rule was not adopted (docs/performance.md).

Run:  python bench/bench_common_terms.py                   (about 30 s)
      python bench/bench_common_terms.py --store DIR       (and the speed at DIR's size)
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import sqlite3
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from benchlib import require, table, throwaway_index

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
# The rule: leave out terms held by more than this share of the documents.
MAX_SHARE = 0.5
WINDOW = 100
ROUNDS = 3


def query(text_index: Any, words: Sequence[str], max_share: float | None) -> tuple[Any, int, int, int, int]:
    """The first stage's query for `words` (`TextIndex._query`: one should-clause per field and
    distinct analysed term, boosted by its count), without the clauses of terms more than
    `max_share` of the documents hold (None: every clause). Built here from the text index's
    schema, since the product has no such query: (query or None, clauses kept, clauses,
    postings kept, postings)."""
    import tantivy

    documents = text_index.num_docs()
    clauses, kept_postings, postings, total = [], 0, 0, 0
    for field, terms in text_index.analysed(words).items():
        counts = Counter(terms)
        frequencies = text_index.doc_freqs(field, counts)
        for term, count in counts.items():
            total += 1
            postings += frequencies[term]
            if max_share is not None and frequencies[term] > max_share * documents:
                continue
            kept_postings += frequencies[term]
            clause = tantivy.Query.term_query(text_index._schema, field, term, index_option="freq")
            clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(clause, count)))
    built = tantivy.Query.boolean_query(clauses) if clauses else None
    return built, len(clauses), total, kept_postings, postings


def top(text_index: Any, built: Any, size: int = WINDOW) -> list[int]:
    """The row ids of `built`'s `size` best documents, best first."""
    if built is None:
        return []
    searcher = text_index._index.searcher()
    hits = searcher.search(built, size, count=False).hits
    return [int(rowid) for rowid in searcher.fast_field_values("rowid", [address for _, address in hits])]


def relevance(folder: Path) -> list[str]:
    """One row of the relevance table for the data set in `folder`."""
    from reranker.datasets import load_dataset
    from reranker.evaluation import paired_randomization_p, ranking_metrics
    from reranker.store import MAX_QUERY_TERMS
    from reranker.store.text_index import TextIndex
    from reranker.text import tokenize

    dataset = load_dataset(folder)
    with throwaway_index(folder / "corpus.jsonl") as engine:
        index = Path(engine.store.directory)
        engine.store.close()
        text_index = TextIndex(index / "text")
        with sqlite3.connect(f"file:{index / 'store.sqlite3'}?mode=ro", uri=True) as db:
            doc_ids = dict(db.execute("SELECT rowid, id FROM docs"))
        full: list[float] = []
        cut: list[float] = []
        shared: list[float] = []
        for query_id, text in dataset.queries:
            relevant = dataset.qrels.get(query_id)
            if not relevant:
                continue
            # As `EmbeddedStore.bm25` reads a query (the bundled stop list, the first 300 words).
            words = tokenize(text)[:MAX_QUERY_TERMS]
            everything = [doc_ids[rowid] for rowid in top(text_index, query(text_index, words, None)[0])]
            without = [doc_ids[rowid] for rowid in top(text_index, query(text_index, words, MAX_SHARE)[0])]
            full.append(ranking_metrics(everything, relevant, WINDOW)["ndcg@10"])
            cut.append(ranking_metrics(without, relevant, WINDOW)["ndcg@10"])
            shared.append(len(set(everything) & set(without)) / max(len(everything), 1))
    p = paired_randomization_p(tuple(cut), tuple(full))
    wins = sum(b > a for a, b in zip(full, cut))
    ties = sum(b == a for a, b in zip(full, cut))
    return [
        f"{folder.name} ({len(full)})", f"{statistics.fmean(full):.3f}", f"{statistics.fmean(cut):.3f}",
        f"{p:.3f}", f"{wins}/{ties}/{len(full) - wins - ties}", f"{statistics.fmean(shared):.3f}",
    ]


def speed(store: Path) -> None:
    from reranker.datasets import load_dataset
    from reranker.store import MAX_QUERY_TERMS
    from reranker.store.text_index import TextIndex
    from reranker.text import tokenize

    text_index = TextIndex(store / "index" / "text")
    require(text_index.num_docs() > 0, f"no text index with documents in {store / 'index' / 'text'}: run bench_passages.py --documents N --store {store} first")
    queries = []
    for _, text in load_dataset(SHARED / DATASETS[0]).queries:
        words = tokenize(text)[:MAX_QUERY_TERMS]
        queries.append((query(text_index, words, None), query(text_index, words, MAX_SHARE)))
    times: dict[str, list[float]] = {"every clause": [], "without": []}
    for _ in range(1):  # warm: the first reads of each term's postings
        for (whole, *_), (reduced, *_) in queries:
            top(text_index, whole)
            top(text_index, reduced)
    for round_ in range(ROUNDS):
        for number, ((whole, *_), (reduced, *_)) in enumerate(queries):
            runs = [("every clause", whole), ("without", reduced)]
            for name, built in runs if (number + round_) % 2 == 0 else runs[::-1]:
                started = time.perf_counter()
                top(text_index, built)
                times[name].append((time.perf_counter() - started) * 1000)
    whole_ms, reduced_ms = statistics.median(times["every clause"]), statistics.median(times["without"])
    clauses = statistics.median(kept / total for _, (_, kept, total, _, _) in queries)
    postings = statistics.median(kept / max(total, 1) for _, (_, _, _, kept, total) in queries)
    print(f"\nSpeed over {text_index.num_docs():,} documents ({store}): tantivy's top {WINDOW}, {len(queries)} summaries x {ROUNDS} rounds, alternating")
    print(table(
        ["query", "p50", "x every clause", "clauses kept (median)", "postings kept (median)"],
        [["every clause", f"{whole_ms:.1f} ms", "1.00x", "1.00", "1.00"],
         [f"without terms in > {MAX_SHARE:.0%} of documents", f"{reduced_ms:.1f} ms", f"{reduced_ms / whole_ms:.2f}x", f"{clauses:.2f}", f"{postings:.2f}"]],
    ))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, help="also time the two queries over this kept bench_passages.py data dir")
    args = parser.parse_args()
    folders = [SHARED / name for name in DATASETS if (SHARED / name / "corpus.jsonl").exists()]
    require(bool(folders), f"no shared data sets under {SHARED}")
    rows = [relevance(folder) for folder in folders]
    print(f"BM25 order, nDCG@10 of the top {WINDOW}: every clause against the query without terms in > {MAX_SHARE:.0%} of documents")
    print(table(["data set (queries)", "every clause", "without", "p (paired randomisation)", "W/T/L", "top 100 shared"], rows))
    if args.store is not None:
        speed(args.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
