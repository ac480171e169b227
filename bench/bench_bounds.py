"""Bounded work per request (issue 23, point 3): a proxied `_msearch` at its limits answers
within the deadline + the cluster budget + a stated parsing allowance, and the worker's
memory returns near its baseline after it.

The real service (`reranker serve`: gunicorn, one worker, so that its memory is the one
measured) runs over osmem-server holding generated 2,000-word documents (bench_service's
corpus). For each setting (the defaults, then a tight deadline and budget that the work must
respect rather than merely be fast enough for), in this order:

    baseline   one proxied _search with window 100, as an application sends it
    50 x 40    an _msearch at RERANKER_MAX_SEARCHES (50), each search ext.rerank.window 40:
               RERANKER_MAX_TOTAL_WINDOW (2,000) candidates to rerank in all
    2 x 1000   an _msearch of two searches at RERANKER_MAX_WINDOW (1,000): 2,000 in all
    over       one search (51 x 40) or candidate (2 x 1000 + 1) more: refused with a 413

Printed per setting: each kind's statuses, p50 and max latency (and the p50 as a ratio to the
baseline's), the largest latency against the bound `deadline + budget + ALLOWANCE_MS`; the
worker's RSS before the limit requests (after warm-up), its peak (VmHWM), and after them and
a settle (20 baseline searches, 2 s), as a ratio to the RSS before. PASS/FAIL for the two
claims; the exit code is 1 if one fails.

Run:  python bench/bench_bounds.py             (about 2 minutes on 2 cores)
      python bench/bench_bounds.py --quick     (1,000 documents, 2 repeats)
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from bench_opensearch import summary_queries, write_corpus
from bench_service import ALIAS, Service, cluster_body, index_corpus
from benchlib import machine, require, table

from reranker.embeddings import DICT_AFTER_LOOKUPS

# What a request may take beyond RERANKER_DEADLINE_MS + RERANKER_CLUSTER_BUDGET_MS: reading
# and checking the body, decoding the cluster's answers, merging, writing the answer.
ALLOWANCE_MS = 500
# "Near its baseline": the worker's RSS after the limit requests and a settle.
MAX_RSS_RATIO = 1.25
SEARCHES, TOTAL_WINDOW, MAX_WINDOW = 50, 2_000, 1_000
SETTINGS = {
    "defaults": {"RERANKER_DEADLINE_MS": "2000", "RERANKER_CLUSTER_BUDGET_MS": "3000"},
    "tight": {"RERANKER_DEADLINE_MS": "300", "RERANKER_CLUSTER_BUDGET_MS": "700"},
}


@dataclass(frozen=True)
class Kind:
    name: str
    searches: int
    window: int


KINDS = [Kind("50 x 40", SEARCHES, TOTAL_WINDOW // SEARCHES), Kind("2 x 1000", 2, MAX_WINDOW)]
OVER = [Kind("51 x 40", SEARCHES + 1, TOTAL_WINDOW // SEARCHES), Kind("3 x 667", 3, 667)]


@dataclass(frozen=True)
class Sample:
    status: int
    seconds: float
    reranked: int  # searches of the answer whose ext.rerank.status is ok
    degraded: int  # ... degraded (fell back to the cluster's order at the deadline)


def msearch_body(queries: Sequence[str], kind: Kind, *, direct: bool = False) -> bytes:
    """The _msearch of `kind` over the first queries; direct: the service's window request
    (1) for it, as the cluster gets it (the top `window` hits with their topics)."""
    lines = []
    for query in queries[: kind.searches]:
        if direct:
            body = {**cluster_body(query), "size": kind.window, "_source": {"includes": ["corrected_topics"]}}
            lines += [json.dumps({"index": ALIAS}), json.dumps(body)]
        else:
            lines += ["{}", json.dumps({**cluster_body(query), "ext": {"rerank": {"window": kind.window}}})]
    return ("\n".join(lines) + "\n").encode("utf-8")


def send(base: str, path: str, data: bytes, content_type: str) -> Sample:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": content_type})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    seconds = time.perf_counter() - started
    found = json.loads(raw)
    responses = found.get("responses", [found]) if status == 200 else []
    blocks = [(r.get("ext") or {}).get("rerank") or {} for r in responses]
    return Sample(status, seconds, sum(b.get("status") == "ok" for b in blocks), sum(b.get("status") == "degraded" for b in blocks))


class OneWorker(Service):
    """`reranker serve` with one worker, whose memory /proc shows."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        super().__init__(env, log_path, workers=1, threads=4)
        self.wait_ready()

    def worker(self) -> int:
        return self.worker_pids()[0]

    def memory_mb(self) -> dict[str, float]:
        """The worker's memory in MB: VmRSS, VmHWM (its peak), and VmRSS's parts RssAnon
        (the process's own heap: what a request's work would leave behind) and RssFile
        (mapped files: the word vectors' pages, shared by the workers and reclaimable)."""
        found = {}
        for line in Path(f"/proc/{self.worker()}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                found[name] = int(value.split()[0]) / 1024
        return found


def measure(service: OneWorker, cluster: str, queries: list[str], repeats: int) -> dict[str, Any]:
    def baseline(number: int) -> Sample:
        return send(service.base, f"/{ALIAS}/_search", json.dumps({**cluster_body(queries[number % len(queries)]), "ext": {"rerank": {"window": 100}}}).encode(), "application/json")

    # Warm-up with ordinary searches, past the word lookups after which a worker builds its
    # vocabulary dict once (DICT_AFTER_LOOKUPS; about 50 MB, for good): the baseline is a
    # worker that has served for a while, and what the limit requests leave is measured
    # against it, not the worker's own one-time growth.
    words, number = 0, 0
    while words < 3 * DICT_AFTER_LOOKUPS:
        require(baseline(number).status == 200, "a baseline search failed")
        words += len(queries[number % len(queries)].split())
        number += 1
    samples: dict[str, list[Sample]] = {"baseline": [baseline(number) for number in range(repeats * 2)]}
    before = service.memory_mb()
    for kind in KINDS:
        samples[kind.name], samples[f"{kind.name}, cluster alone"] = [], []
        for repeat in range(repeats):
            chosen = queries[repeat * SEARCHES % len(queries):] + queries
            samples[kind.name].append(send(service.base, "/_msearch", msearch_body(chosen, kind), "application/x-ndjson"))
            samples[f"{kind.name}, cluster alone"].append(send(cluster, "/_msearch", msearch_body(chosen, kind, direct=True), "application/x-ndjson"))
    peak = service.memory_mb()["VmHWM"]
    for kind in OVER:
        samples[f"over: {kind.name}"] = [send(service.base, "/_msearch", msearch_body(queries, kind), "application/x-ndjson")]
    for number in range(20):
        baseline(number)
    time.sleep(2)
    return {"samples": samples, "before": before, "peak_mb": peak, "after": service.memory_mb()}


def report(name: str, env: dict[str, str], found: dict[str, Any]) -> tuple[list[str], bool]:
    samples: dict[str, list[Sample]] = found["samples"]
    bound_ms = int(env["RERANKER_DEADLINE_MS"]) + int(env["RERANKER_CLUSTER_BUDGET_MS"]) + ALLOWANCE_MS
    base_p50 = statistics.median(s.seconds for s in samples["baseline"]) * 1000
    rows = []
    for kind, got in samples.items():
        p50 = statistics.median(s.seconds for s in got) * 1000
        statuses = ", ".join(f"{status} x{count}" for status, count in sorted({s.status: sum(t.status == s.status for t in got) for s in got}.items()))
        searches = f"{sum(s.reranked for s in got)} ok / {sum(s.degraded for s in got)} degraded"
        rows.append([kind, statuses, searches, f"{p50:.0f}", f"{max(s.seconds for s in got) * 1000:.0f}", f"{p50 / base_p50:.1f}x"])
    worst = max(s.seconds for kind in KINDS for s in samples[kind.name]) * 1000
    over_ok = all(s.status == 413 for kind in OVER for s in samples[f"over: {kind.name}"])
    within = worst <= bound_ms and over_ok and all(s.status in (200, 503) for kind in KINDS for s in samples[kind.name])
    # (A 503 is an answer within the bound: the cluster had no time left in the request's budget.)
    before, after = found["before"], found["after"]
    ratio = after["RssAnon"] / before["RssAnon"]
    near = ratio <= MAX_RSS_RATIO
    lines = [
        f"## {name}: RERANKER_DEADLINE_MS {env['RERANKER_DEADLINE_MS']}, RERANKER_CLUSTER_BUDGET_MS {env['RERANKER_CLUSTER_BUDGET_MS']}",
        "",
        table(["request", "statuses", "searches reranked", "p50 ms", "max ms", "p50 / baseline"], rows),
        "",
        f"- slowest limit _msearch {worst:.0f} ms against the bound {bound_ms} ms (deadline + budget + {ALLOWANCE_MS} ms): "
        f"{worst / bound_ms:.2f} of it; over the limits: 413 at once ({'yes' if over_ok else 'NO'}) -> {'PASS' if within else 'FAIL'}",
        f"- worker heap (RssAnon) {before['RssAnon']:.0f} MB before, {after['RssAnon']:.0f} MB after: {ratio:.2f}x its baseline "
        f"(target <= {MAX_RSS_RATIO}x) -> {'PASS' if near else 'FAIL'}; whole RSS {before['VmRSS']:.0f} MB before, peak "
        f"{found['peak_mb']:.0f} MB, {after['VmRSS']:.0f} MB after (of which mapped files, the word vectors' pages: "
        f"{before['RssFile']:.0f} -> {after['RssFile']:.0f} MB)",
        "",
    ]
    return lines, within and near


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_500, help="indexed documents (at least 1,000: a window of 1,000 must fill)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 documents, 2 repeats")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    docs, repeats = (1_000, 2) if args.quick else (args.docs, args.repeats)
    require(docs >= MAX_WINDOW, f"--docs must be at least {MAX_WINDOW}")
    from osmem_server import OsmemServer

    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-bounds-") as tmp:
        directory = Path(tmp)
        texts = write_corpus(directory / "corpus.jsonl", rng, docs)
        queries = summary_queries(rng, texts, 500)
        cluster = OsmemServer.start(japanese=False)
        try:
            data_dir = directory / "data"
            data_dir.mkdir()
            env = {**os.environ, "OPENSEARCH_URL": cluster.url, "RERANKER_INDEX": ALIAS, "RERANKER_DATA_DIR": str(data_dir)}
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
            index_corpus(directory / "corpus.jsonl", env, docs)
            lines = ["# Bounded work per request", "", f"{docs} documents of 2,000 words in osmem-server; one gunicorn worker (4 threads); "
                     f"{repeats} of each limit _msearch; {machine(['numpy', 'gunicorn'], os.environ.get('OPENBLAS_NUM_THREADS', '?'))}", ""]
            passed = True
            for name, overrides in SETTINGS.items():
                service = OneWorker({**env, **overrides}, directory / f"serve-{name}.log")
                try:
                    found = measure(service, cluster.url, queries, repeats)
                finally:
                    service.stop()
                part, ok = report(name, {**env, **overrides}, found)
                lines += part
                passed &= ok
        finally:
            cluster.close()
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
