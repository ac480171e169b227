"""The embedded store's read path against another checkout's, in one process on the same
files: what versioned writes (issue 24) cost a search.

    git worktree add /tmp/reranker-base COMMIT      # the code to compare with
    python bench/bench_store_reads.py --baseline /tmp/reranker-base
    python bench/bench_store_reads.py --baseline /tmp/reranker-base --docs 20000 --json out.json

Needs ../shared/data/cisi: its 1,460 abstracts, repeated under new ids up to --docs
(default 10,000), and its 76 queries. This checkout builds a store through
`EmbeddedStore.upsert`, with random topics (K = 15, d = 50: no read looks at their
values), in two states: "fresh" (each document written once) and "re-indexed" (then each
written again with one word more, as `reranker index` does with a changed corpus). Then
the baseline's store (its `reranker/store/embedded.py` and `text_index.py`, loaded as
modules of their own) and this one's open the same files (a store of schema 4 reads as
one of 3), and take turns query by query, the one going first alternating: the store
calls of one `POST /search`, BM25 top 100 (`bm25`), the topics of those 100 (`topics`)
and the texts of the first 10 (`documents`). Taking turns puts both under the same load
of a shared machine. The tables give medians over queries and rounds in milliseconds,
and the median of the per-query ratios this / baseline. Exits 1 (no figures) if the two
score differently. Last, the write path: each checkout writes the documents twice (the
second time every one replaced) into a store of its own, in the order baseline, this,
this, baseline; seconds per pass, the upserts and the commit that makes them visible,
with no topic extraction (which in `reranker index` costs several times more).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import machine, product_threads, require, table

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CISI = REPO.parent / "shared" / "data" / "cisi"
K, DIM, WINDOW, SHOWN = 15, 50, 100, 10
STEPS = ("bm25", "topics", "documents", "all three")


def load_corpus(size: int) -> list[dict[str, str]]:
    papers = [json.loads(line) for line in (CISI / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    return [
        {"id": f"{paper['id']}~{n // len(papers)}", "title": paper["title"], "text": paper["text"]}
        for n in range(size)
        for paper in [papers[n % len(papers)]]
    ]


def build(store_class: Any, directory: Path, size: int, reindex: bool) -> list[float]:
    """Write the corpus (twice, the second time changed, when `reindex`) into a store;
    the seconds of each pass (its upserts and the commit that makes them visible)."""
    from reranker.store import IndexInfo
    from reranker.types import DocTopics, Document, EmbeddingInfo, StoredDocument

    rng = np.random.default_rng(2018)
    store = store_class(directory)
    store.initialise(IndexInfo(EmbeddingInfo("random", DIM, "r" * 64), K))
    records = load_corpus(size)
    seconds = []
    for suffix in [""] + ([" revised"] if reindex else []):
        batches = []
        for start in range(0, len(records), 64):
            batch = []
            for record in records[start : start + 64]:
                text = record["text"] + suffix
                topics = rng.standard_normal((K, DIM)).astype(np.float32)
                importances = np.full(K, 1.0 / K, dtype=np.float32)
                digest = hashlib.sha256(text.encode()).hexdigest()
                batch.append(StoredDocument(Document(record["id"], record["title"], text), DocTopics(topics, importances), digest, 100, 0))
            batches.append(batch)
        started = time.perf_counter()
        for batch in batches:
            store.upsert(batch)
        store.count()  # commits what was written: readers see it
        seconds.append(time.perf_counter() - started)
    store.publish()
    store.close()
    return seconds


def baseline_store_class(checkout: Path) -> Any:
    """The baseline's EmbeddedStore: its `embedded.py` and `text_index.py`, loaded as
    modules of their own (the rest of the package is this checkout's)."""
    import reranker.store.text_index

    loaded: dict[str, Any] = {}
    for name in ("text_index", "embedded"):
        path = checkout / "reranker" / "store" / f"{name}.py"
        require(path.is_file(), f"{checkout} is not a checkout of this project")
        spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up by name
        # The baseline's embedded.py imports its text index by the package's name.
        sys.modules["reranker.store.text_index"] = loaded.get("text_index", reranker.store.text_index)
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules["reranker.store.text_index"] = reranker.store.text_index
        loaded[name] = module
    return loaded["embedded"].EmbeddedStore


def one_search(store: Any, query: str) -> tuple[dict[str, float], list[float]]:
    """Seconds of each step of one search, and the BM25 scores (copies of a paper tie,
    and which of them make the top 100 depends on the text index's segments: the scores
    are what must agree)."""
    started = time.perf_counter()
    hits = store.bm25(query, WINDOW)
    found = time.perf_counter()
    batch = store.topics([hit.doc_id for hit in hits])
    read = time.perf_counter()
    texts = store.documents([hit.doc_id for hit in hits[:SHOWN]])
    done = time.perf_counter()
    require(not batch.missing and len(texts) == min(SHOWN, len(hits)), "a hit without topics or text")
    steps = {"bm25": found - started, "topics": read - found, "documents": done - read, "all three": done - started}
    return steps, [round(hit.bm25_score, 4) for hit in hits]


def compare(stores: dict[str, Any], queries: list[str], rounds: int) -> dict[str, dict[str, Any]]:
    for store in stores.values():  # warm: first reads of the files
        for query in queries:
            one_search(store, query)
    times: dict[str, dict[str, list[float]]] = {name: {step: [] for step in STEPS} for name in stores}
    turn = 0
    for _ in range(rounds):
        for query in queries:
            order = ["baseline", "this"] if turn % 2 == 0 else ["this", "baseline"]
            turn += 1
            scores = []
            for name in order:
                steps, found = one_search(stores[name], query)
                scores.append(found)
                for step, seconds in steps.items():
                    times[name][step].append(seconds)
            require(scores[0] == scores[1], f"the two checkouts score {query[:40]!r}... differently")
    return {
        step: {
            "baseline_ms": float(np.median(times["baseline"][step])) * 1e3,
            "this_ms": float(np.median(times["this"][step])) * 1e3,
            "ratio": float(np.median(np.asarray(times["this"][step]) / np.asarray(times["baseline"][step]))),
        }
        for step in STEPS
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the code to compare with")
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5, help="passes over the queries (default 5)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    require((CISI / "corpus.jsonl").is_file(), f"no CISI data in {CISI}")
    from reranker.store.embedded import EmbeddedStore

    baseline = baseline_store_class(args.baseline.resolve())
    queries = [json.loads(line)["text"] for line in (CISI / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    results: dict[str, Any] = {"machine": machine(["tantivy", "numpy"], os.environ["OPENBLAS_NUM_THREADS"]), "docs": args.docs, "baseline": str(args.baseline), "states": {}}
    print(f"{args.docs:,} CISI abstracts, {len(queries)} queries x {args.rounds} rounds; this checkout against {args.baseline}")
    with tempfile.TemporaryDirectory() as scratch:
        for state in ("fresh", "re-indexed"):
            directory = Path(scratch) / state
            print(f"{state}: building the store ...", file=sys.stderr, flush=True)
            build(EmbeddedStore, directory, args.docs, reindex=state == "re-indexed")
            stores = {"baseline": baseline(directory), "this": EmbeddedStore(directory)}
            try:
                figures = compare(stores, queries, args.rounds)
            finally:
                for store in stores.values():
                    store.close()
            results["states"][state] = figures
            rows = [[step, f"{f['baseline_ms']:.3f}", f"{f['this_ms']:.3f}", f"{f['ratio']:.3f}"] for step, f in figures.items()]
            print(f"\n{state} store: median ms per query")
            print(table(["step", "baseline", "this", "this / baseline"], rows))
        # The write path too: the same two passes with each checkout, taking turns.
        passes: dict[str, list[list[float]]] = {"baseline": [], "this": []}
        for turn, name in enumerate(("baseline", "this", "this", "baseline")):
            print(f"writes: {name} ...", file=sys.stderr, flush=True)
            store_class = baseline if name == "baseline" else EmbeddedStore
            passes[name].append(build(store_class, Path(scratch) / f"writes-{turn}", args.docs, reindex=True))
    writes = {
        label: {name: float(np.mean([seconds[index] for seconds in passes[name]])) for name in passes}
        for index, label in enumerate(("first pass", "second pass (every document replaced)"))
    }
    results["writes_seconds"] = writes
    print(f"\nwriting {args.docs:,} documents (random topics: no extraction), seconds, mean of 2 runs each")
    print(table(
        ["pass", "baseline", "this", "this / baseline"],
        [[label, f"{w['baseline']:.2f}", f"{w['this']:.2f}", f"{w['this'] / w['baseline']:.2f}"] for label, w in writes.items()],
    ))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
