"""The embedded store's first stage at 1k, 10k and 50k long documents: tantivy against the
SQLite FTS5 store it replaced, in one run on the same corpus and queries.

    python bench/bench_first_stage.py           # 1k, 10k and 50k documents (about 12 minutes)
    python bench/bench_first_stage.py --quick   # 1k and 10k (about 3 minutes)
    python bench/bench_first_stage.py --json out.json

Needs ../shared/data/clscisumm2018-train: its 567 papers (about 4,600 words each) are
repeated under new ids up to each size, and its 40 summaries are the queries. For each
size both stores are built by the real indexing pipeline (`index_corpus`, GloVe 50-d, K =
15, 2 topic workers) in a child process of their own, so that its peak RSS is its own. At
the largest size each store is built twice, in the order tantivy, FTS5, FTS5, tantivy, and
its throughput is the mean of its two builds: the machine's speed drifts by up to 10-15%
over minutes, which one build of each, one after the other, reads as a difference between
the stores; the mirrored order cancels a steady drift. Then, in this process: BM25 top 100 for each summary on both stores (wall time per query;
3 rounds, 1 for FTS5 from 10k on, where one round takes minutes), and the whole search
path on the new store (BM25 top 100, topic fetch and the `hidden_topics` rerank, through
`Engine.search`). Exits 1 if a target fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from benchlib import machine, product_threads, require, table

# The product's BLAS threads (RERANKER_BLAS_THREADS, one by default), before numpy loads:
# without them the search path ran 40 ms at 50k papers against the product's 11 ms.
product_threads()

import numpy as np

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "clscisumm2018-train"
K = 15
WINDOW = 100
WORKERS = 2


def write_corpus(path: Path, size: int) -> None:
    """`size` documents: the shared papers in turn, copy c of paper P with id "P~c"."""
    papers = [json.loads(line) for line in (SHARED / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    with path.open("w", encoding="utf-8") as handle:
        for n in range(size):
            paper = papers[n % len(papers)]
            handle.write(json.dumps({"id": f"{paper['id']}~{n // len(papers)}", "title": paper["title"], "text": paper["text"]}) + "\n")


def disk_mb(directory: Path) -> float:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) / 1e6


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries that over
    from the parent through fork and exec, so a child would report this script's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resident_mb() -> dict[str, float]:
    """This process's resident set now, by kind: anonymous memory (its own) and file pages
    (index files it has mapped, SQLite's memory map and tantivy's: the page cache, which
    the kernel takes back under memory pressure)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {kind: int(fields[key].split()[0]) / 1024 for kind, key in (("anon", "RssAnon"), ("file", "RssFile")) if key in fields}


def build(kind: str, corpus: Path, directory: Path, vectors_dir: Path) -> dict[str, float]:
    """In a child process: index `corpus` into a `kind` store; seconds, peak RSS, disk."""
    from reranker.embeddings import load_vectors
    from reranker.indexing import index_corpus

    vectors = load_vectors("glove-6b-50d", vectors_dir)
    if kind == "tantivy":
        from reranker.store.embedded import EmbeddedStore

        store: Any = EmbeddedStore(directory)
    else:
        from fts5_store import Fts5Store

        store = Fts5Store(directory)
    started = time.perf_counter()
    report = index_corpus(corpus, store, vectors, K, show_progress=False, workers=WORKERS)
    seconds = time.perf_counter() - started
    resident = resident_mb()  # before close() unmaps the store's files
    store.close()
    require(not report.skipped and report.total_documents == report.indexed, f"{kind}: {report}")
    return {
        "documents": report.indexed,
        "seconds": seconds,
        "docs_per_s": report.indexed / seconds,
        "peak_rss_mb": peak_rss_mb(),
        "end_anon_rss_mb": resident.get("anon", float("nan")),
        "end_file_rss_mb": resident.get("file", float("nan")),
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "disk_mb": disk_mb(directory),
    }


def build_in_child(kind: str, corpus: Path, directory: Path, vectors_dir: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(corpus), str(directory), str(vectors_dir)],
        check=True, capture_output=True, text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def latencies(run: Any, queries: Sequence[str], rounds: int) -> np.ndarray:
    run(queries[0])  # warm: first reads of the index files
    times = []
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            run(query)
            times.append(time.perf_counter() - started)
    return np.asarray(times) * 1e3


def mean_of_builds(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One store's two builds: mean throughput, the larger peak RSS, each build's docs/s."""
    return {
        **first,
        "docs_per_s": (first["docs_per_s"] + second["docs_per_s"]) / 2,
        "builds_docs_per_s": [first["docs_per_s"], second["docs_per_s"]],
        "peak_rss_mb": max(first["peak_rss_mb"], second["peak_rss_mb"]),
        "end_anon_rss_mb": max(first["end_anon_rss_mb"], second["end_anon_rss_mb"]),
        "end_file_rss_mb": max(first["end_file_rss_mb"], second["end_file_rss_mb"]),
        "worker_peak_rss_mb": max(first["worker_peak_rss_mb"], second["worker_peak_rss_mb"]),
    }


def measure(size: int, directory: Path, vectors_dir: Path, queries: list[str], mirrored: bool) -> dict[str, Any]:
    from fts5_store import Fts5Store

    from reranker.embeddings import load_vectors
    from reranker.pipeline import Engine
    from reranker.store.embedded import EmbeddedStore

    corpus = directory / f"corpus-{size}.jsonl"
    write_corpus(corpus, size)
    print(f"{size:,} documents: building ...", file=sys.stderr, flush=True)
    new = build_in_child("tantivy", corpus, directory / f"tantivy-{size}", vectors_dir)
    old = build_in_child("fts5", corpus, directory / f"fts5-{size}", vectors_dir)
    if mirrored:
        old = mean_of_builds(old, build_in_child("fts5", corpus, directory / "again", vectors_dir))
        shutil.rmtree(directory / "again")
        new = mean_of_builds(new, build_in_child("tantivy", corpus, directory / "again", vectors_dir))
        shutil.rmtree(directory / "again")
    print(f"{size:,} documents: querying ...", file=sys.stderr, flush=True)
    store = EmbeddedStore(directory / f"tantivy-{size}")
    fts5 = Fts5Store(directory / f"fts5-{size}")
    require(store.count() == size and fts5.count() == size, "both stores hold every document")
    require(len(store.bm25(queries[0], WINDOW)) == WINDOW, "a summary finds a full window")
    bm25_new = latencies(lambda q: store.bm25(q, WINDOW), queries, 3)
    bm25_old = latencies(lambda q: fts5.bm25(q, WINDOW), queries, 3 if size < 10_000 else 1)
    engine = Engine(store=store, vectors=load_vectors("glove-6b-50d", vectors_dir))
    path = latencies(lambda q: engine.search(q, "hidden_topics", window=WINDOW, size=10), queries, 3)
    store.close()
    fts5.close()
    for leftover in (corpus,):
        leftover.unlink()

    def pct(values: np.ndarray) -> dict[str, float]:
        return {"p50_ms": float(np.percentile(values, 50)), "p95_ms": float(np.percentile(values, 95))}

    return {"documents": size, "build": {"tantivy": new, "fts5": old},
            "bm25": {"tantivy": pct(bm25_new), "fts5": pct(bm25_old)}, "search_path": pct(path)}


def report(results: list[dict[str, Any]]) -> tuple[str, list[tuple[str, bool]]]:
    rows = []
    for r in results:
        new, old = r["bm25"]["tantivy"], r["bm25"]["fts5"]
        bn, bo = r["build"]["tantivy"], r["build"]["fts5"]
        rows.append([
            f"{r['documents']:,}",
            f"{old['p50_ms']:,.1f} / {old['p95_ms']:,.1f}",
            f"{new['p50_ms']:.1f} / {new['p95_ms']:.1f}",
            f"{old['p50_ms'] / new['p50_ms']:,.0f}x",
            f"{r['search_path']['p50_ms']:.1f} / {r['search_path']['p95_ms']:.1f}",
            f"{bo['docs_per_s']:.0f} / {bn['docs_per_s']:.0f}",
            f"{bo['peak_rss_mb']:,.0f} / {bn['peak_rss_mb']:,.0f}",
            f"{bo['disk_mb']:,.0f} / {bn['disk_mb']:,.0f}",
        ])
    text = table(
        ["documents", "FTS5 BM25 p50/p95 ms", "tantivy BM25 p50/p95 ms", "speed-up (p50)",
         "search path p50/p95 ms", "indexing docs/s FTS5 / tantivy", "peak RSS MB FTS5 / tantivy", "disk MB FTS5 / tantivy"],
        rows,
    )
    largest = results[-1]
    new, old = largest["bm25"]["tantivy"], largest["bm25"]["fts5"]
    bn, bo = largest["build"]["tantivy"], largest["build"]["fts5"]
    n = f"{largest['documents']:,}"
    targets = [
        (f"BM25 p50 <= 15 ms at {n}: {new['p50_ms']:.1f} ms", new["p50_ms"] <= 15),
        (f"BM25 p95 <= 40 ms at {n}: {new['p95_ms']:.1f} ms", new["p95_ms"] <= 40),
        (f"BM25 >= 100x FTS5 (p50) at {n}: {old['p50_ms'] / new['p50_ms']:,.0f}x", old["p50_ms"] / new["p50_ms"] >= 100),
        (f"search path p50 <= 30 ms at {n}: {largest['search_path']['p50_ms']:.1f} ms", largest["search_path"]["p50_ms"] <= 30),
        (f"indexing peak RSS <= 2 GB at {n}: {bn['peak_rss_mb']:,.0f} MB (at the end {bn['end_anon_rss_mb']:,.0f} MB anonymous, "
         f"{bn['end_file_rss_mb']:,.0f} MB file pages mapped from the index; workers {bn['worker_peak_rss_mb']:,.0f} MB each at most)",
         bn["peak_rss_mb"] <= 2048),
        (f"indexing throughput >= FTS5's at {n}: {bn['docs_per_s']:.0f} vs {bo['docs_per_s']:.0f} docs/s{build_order(bn, bo)}", bn["docs_per_s"] >= bo["docs_per_s"]),
    ]
    return text, targets


def build_order(new: dict[str, Any], old: dict[str, Any]) -> str:
    """The builds' docs/s in the order they ran, when each store was built twice."""
    if "builds_docs_per_s" not in new:
        return ""
    (new1, new2), (old1, old2) = new["builds_docs_per_s"], old["builds_docs_per_s"]
    return f" (means; in build order tantivy {new1:.0f}, FTS5 {old1:.0f}, FTS5 {old2:.0f}, tantivy {new2:.0f})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k documents only")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="comma-separated corpus sizes")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "CORPUS", "DIR", "VECTORS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, corpus, directory, vectors_dir = args.child
        print(json.dumps(build(kind, Path(corpus), Path(directory), Path(vectors_dir))))
        return 0
    from reranker.config import Settings

    require((SHARED / "corpus.jsonl").is_file(), f"this benchmark needs {SHARED}")
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 50_000])
    queries = [json.loads(line)["text"] for line in (SHARED / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-first-stage-") as tmp:
        directory = Path(tmp)
        vectors_dir = Settings.from_env().vectors_cache  # the user's cache: converted once
        results = [measure(size, directory, vectors_dir, queries, size == max(sizes)) for size in sizes]
    text, targets = report(results)
    print(json.dumps(machine(["numpy", "tantivy"], os.environ["OPENBLAS_NUM_THREADS"]), indent=None))
    print(f"{len(queries)} CL-SciSumm summaries, BM25 top {WINDOW}; {time.perf_counter() - started:.0f} s in all\n")
    print(text + "\n")
    for line, passed in targets:
        print(f"{'PASS' if passed else 'FAIL'}  {line}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(["numpy", "tantivy"], os.environ["OPENBLAS_NUM_THREADS"]), "results": results}, indent=2))
    return 0 if all(passed for _, passed in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
