"""Benchmark of the HTTP service under concurrent load, next to the cluster it fronts.

`reranker serve` (gunicorn, 2 workers x 17 threads) runs over an index of generated
2,000-word documents in osmem-server, the in-memory OpenSearch-compatible test server.
16 client threads in this process, each with its own keep-alive connection, send a fixed
number of requests per client, all of one kind at a time:

    direct    POST osmem/<alias>/_search: a BM25 multi_match like the store's, size 10
    search    POST /search, window 100, size 10 (BM25 top-100, fetch topics, rerank)
    proxy     POST /<alias>/_search with the direct body (window 100 by default)
    cached    POST /v1/rerank, 50 documents of 2,000 words, the same 50 every time
    uncached  POST /v1/rerank, 50 documents never sent before in every request

Queries are summary-style, 100-150 words of one indexed document, the same sequence for
every kind in a round. Each kind reports requests per second, p50 and p99 latency, and
the CPU that the client, the service's workers and the server used per request. To show
where the time goes, the same kinds also run with one client (no queueing), and so do
the cluster requests behind /search (BM25 top-100, `_mget` of its topics) and behind the
proxy (the window with topics, then the page), sent straight to osmem. All of these run
in rounds, in a shuffled order each round, so that the machine's noise hits them alike.

Every response is checked before any figure is printed: HTTP 200, the expected number
of hits or results, reranking status "ok" (nothing degraded), the proxy's page equal to
/search's for the same query, and for /v1/rerank the service's topic-cache counters (no
topic computed in the cached kind, 50 per request in the uncached one). The issue's
targets get PASS/FAIL; the exit code is 1 if one fails. If the proxy route answers 403,
404 or 405 (not there yet), it is skipped with a note, and its 2x target is applied to
/search instead.

Run:  python bench/bench_service.py            (about 2 minutes on 2 cores)
      python bench/bench_service.py --quick    (smoke run with a 200-document index, about 20 s)
      python bench/bench_service.py --docs 1000 --rounds 5 --json out.json
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # One BLAS thread, set before numpy loads; the service and the indexer inherit it.
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import http.client
import importlib.metadata
import json
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from bench_opensearch import (
    DOC_WORDS,
    VOCABULARY,
    PausedGC,
    TargetResult,
    cpu_seconds,
    frequent_words,
    summary_queries,
    write_corpus,
)
from benchlib import machine, require, table

from reranker.config import DEFAULT_SEARCH_FIELDS, parse_search_fields
from reranker.service.schema import RerankExt
from reranker.service.search_requests import (
    Search,
    page_request,
    window_request,
)

ALIAS = "bench"
API_KEY = "bench-key"
CLIENTS = 16
SERVICE_WORKERS = 2
# Enough threads that no client is turned away: each worker answers 429 at once when all
# but one of its threads are busy (one is kept for /healthz), and gunicorn may hand most of
# the keep-alive connections to one worker. This measures throughput, not load shedding.
SERVICE_THREADS = CLIENTS + 1
WINDOW = 100
PAGE = 10
# The topic set the default ranker (hidden_topics_corrected+bm25) reads, and the service fetches.
TOPICS = "corrected_topics"
RERANK_DOCUMENTS = 50
# High enough that no request falls back to BM25 order: a degraded answer is refused.
DEADLINE_MS = 30_000
# The indexing run's OPENSEARCH_TIMEOUT, its own (the service keeps the environment's, the
# product's default 10 s unless set): a bulk request of these 2,000-word documents took osmem
# more than 10 s on a busy 2-core machine, and its documents were skipped, so the bench refused
# to report.
INDEX_TIMEOUT_S = 120
# The store's own BM25 fields (RERANKER_SEARCH_FIELDS' default), so all kinds search alike.
FIELDS = [f"{name}^{boost:g}" for name, boost in parse_search_fields(DEFAULT_SEARCH_FIELDS)]
# The targets.
MAX_PROXY_RATIO = 2.0
MAX_CACHED_P50_MS = 60.0
MAX_UNCACHED_P50_MS = 1_000.0
SERVICE_KINDS = ("direct", "search", "proxy", "cached", "uncached")


@dataclass(frozen=True)
class Sizes:
    docs: int  # indexed
    queries: int  # distinct summary queries
    rounds: int
    search_requests: int  # per client and round: direct, search, proxy
    cached_requests: int  # per client and round
    uncached_requests: int  # per client and round
    serial_requests: int  # one client, per round: every kind but uncached
    serial_uncached: int  # one client, per round


DEFAULT_SIZES = Sizes(
    docs=1_000, queries=200, rounds=5, search_requests=20, cached_requests=10,
    uncached_requests=4, serial_requests=15, serial_uncached=4,
)  # fmt: skip
QUICK_SIZES = Sizes(
    docs=200, queries=48, rounds=1, search_requests=6, cached_requests=4,
    uncached_requests=2, serial_requests=5, serial_uncached=2,
)  # fmt: skip


@dataclass(frozen=True)
class Kind:
    """One kind of request: where it goes, its bodies, and what a right answer looks like.

    bodies(round, clients, count): `count` request bodies for each of `clients` clients in
    one round (the same query sequence for every kind). check(answer): what is wrong with
    a parsed 200 answer, or None.
    """

    name: str
    label: str
    port: int
    path: str
    headers: dict[str, str]
    bodies: Bodies
    check: Callable[[Any], str | None]
    per_client: int
    clients: int = CLIENTS


@dataclass(frozen=True)
class Phase:
    """One kind's load in one round: `clients` clients, a fixed number of requests each."""

    kind: str
    clients: int
    round: int
    latencies_s: list[float]
    wall_s: float  # first request sent -> last answer read
    client_cpu_s: float  # this process, all threads
    service_cpu_s: list[float]  # per gunicorn worker
    cluster_cpu_s: float  # osmem-server
    machine_cpu_s: float  # every process on the machine, ours and others'


@dataclass(frozen=True)
class KindResult:
    kind: str
    label: str
    clients: int
    requests: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    round_p50_ms: list[float]
    client_cpu_share: float  # cores the client used while this kind ran
    client_cpu_ms: float  # per request
    service_cpu_ms: float  # per request
    busiest_worker_share: float | None  # of the service's CPU, the busier worker's part
    cluster_cpu_ms: float  # per request
    others_cores: float  # CPU used by processes not in this benchmark while it ran, in cores


# --- data ---------------------------------------------------------------------------------


class Documents:
    """Fresh 2,000-word documents, drawn like the indexed corpus (1 / rank over frequent
    GloVe words), never the same text twice (the chance is nil at 2,000 words)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.vocabulary = np.asarray(frequent_words(VOCABULARY), dtype=object)
        frequencies = 1.0 / np.arange(1, len(self.vocabulary) + 1)
        self.probabilities = frequencies / frequencies.sum()

    def texts(self, count: int) -> list[str]:
        rows = self.rng.choice(len(self.vocabulary), size=(count, DOC_WORDS), p=self.probabilities)
        return [" ".join(self.vocabulary[row]) for row in rows]


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode("utf-8")


def cluster_body(query: str) -> dict[str, Any]:
    """The direct and proxy body: a BM25 multi_match as the store sends it, titles only."""
    return {
        "query": {"multi_match": {"query": query, "fields": FIELDS, "type": "most_fields"}},
        "size": PAGE,
        "_source": ["title"],
    }


def bm25_body(query: str) -> dict[str, Any]:
    """What `OpenSearchStore.bm25(query, 100)` sends (built inline there, so copied here)."""
    match = {"multi_match": {"query": query, "fields": FIELDS, "type": "most_fields"}}
    return {"size": WINDOW, "_source": ["title"], "track_total_hits": False,
            "query": {"bool": {"must": [match], "filter": []}}}  # fmt: skip


def proxied(query: str) -> Search:
    """The cluster body as the proxy reads it."""
    return Search(ALIAS, cluster_body(query), {}, 0, PAGE, RerankExt())


def window_body(query: str) -> dict[str, Any]:
    """The proxy's request (1) for the cluster body: the top 100 with their topics."""
    params, body = window_request(proxied(query), WINDOW, (TOPICS,))
    require(not params, f"window request parameters {params}")
    return body


def page_body(query: str, ids: list[str]) -> dict[str, Any]:
    """The proxy's request (2) for the cluster body: the query filtered to the page's ids."""
    params, body = page_request(proxied(query), ids, len(ids))
    require(not params, f"page request parameters {params}")
    return body


Bodies = Callable[[int, int, int], list[list[bytes]]]


def per_query(queries: Sequence[str], make: Callable[[str], dict[str, Any]]) -> Bodies:
    """Request bodies made from each client's queries (see `query_plan`)."""

    def bodies(round_: int, clients: int, count: int) -> list[list[bytes]]:
        plan = query_plan(queries, round_, clients, count)
        return [[encode(make(query)) for query in client] for client in plan]

    return bodies


def query_plan(queries: Sequence[str], round_: int, clients: int, per_client: int) -> list[list[str]]:
    """Each client's queries for one round: the same for every kind of request."""
    start = round_ * clients * per_client
    return [
        [queries[(start + client * per_client + i) % len(queries)] for i in range(per_client)]
        for client in range(clients)
    ]


# --- the answers ----------------------------------------------------------------------------


def check_hits(expected: int) -> Callable[[Any], str | None]:
    def check(answer: Any) -> str | None:
        hits = answer.get("hits", {}).get("hits", [])
        return None if len(hits) == expected else f"{len(hits)} hits, expected {expected}"

    return check


def check_window(answer: Any) -> str | None:
    hits = answer.get("hits", {}).get("hits", [])
    if not all(TOPICS in (hit.get("_source") or {}) for hit in hits):
        return f"a window hit without {TOPICS}"
    return check_hits(WINDOW)(answer)


def check_mget(expected: int, field: str) -> Callable[[Any], str | None]:
    def check(answer: Any) -> str | None:
        docs = answer.get("docs", [])
        found = sum(1 for doc in docs if doc.get("found") and field in doc.get("_source", {}))
        return None if found == expected else f"{found} of {len(docs)} documents found with {field}"

    return check


def check_search(answer: Any) -> str | None:
    if answer.get("status") != "ok":
        return f"status {answer.get('status')!r}: {answer.get('reason')}"
    if answer.get("candidates") != WINDOW or len(answer.get("hits", [])) != PAGE:
        return f"{answer.get('candidates')} candidates, {len(answer.get('hits', []))} hits"
    return None


def check_proxy(answer: Any) -> str | None:
    block = answer.get("ext", {}).get("rerank", {})
    if block.get("status") != "ok":
        return f"ext.rerank.status {block.get('status')!r}: {block.get('reason')}"
    if block.get("candidates") != WINDOW:
        return f"{block.get('candidates')} candidates reranked, expected {WINDOW}"
    return check_hits(PAGE)(answer)


def check_rerank(answer: Any) -> str | None:
    if answer.get("status") != "ok":
        return f"status {answer.get('status')!r}: {answer.get('meta', {}).get('warnings')}"
    indices = sorted(result["index"] for result in answer.get("results", []))
    if indices != list(range(RERANK_DOCUMENTS)):
        return f"{len(indices)} results, expected one per document ({RERANK_DOCUMENTS})"
    return None


# --- the load --------------------------------------------------------------------------------


def _client(
    port: int,
    path: str,
    headers: dict[str, str],
    bodies: Sequence[bytes],
    start: threading.Barrier,
    out: list[tuple[float, float, int, bytes]],
) -> None:
    """One client: its own keep-alive connection, its requests one after another."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.connect()
    start.wait()
    try:
        for body in bodies:
            sent = time.perf_counter()
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            out.append((sent, time.perf_counter(), response.status, payload))
    finally:
        connection.close()


def run_phase(kind: Kind, round_: int, service_pids: Sequence[int], cluster_pid: int) -> Phase:
    """All clients at once, then every answer checked (after the clock stopped)."""
    per_client = kind.bodies(round_, kind.clients, kind.per_client)
    results: list[list[tuple[float, float, int, bytes]]] = [[] for _ in per_client]
    start = threading.Barrier(len(per_client))
    threads = [
        threading.Thread(
            target=_client,
            args=(kind.port, kind.path, {"Content-Type": "application/json", **kind.headers}, bodies, start, out),
        )
        for bodies, out in zip(per_client, results)
    ]
    with PausedGC():
        client, service, cluster, machine = (
            time.process_time(), _cpu(service_pids), cpu_seconds(cluster_pid), machine_busy_seconds()
        )
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        machine = machine_busy_seconds() - machine
        client, cluster = time.process_time() - client, cpu_seconds(cluster_pid) - cluster
        service = [after - before for after, before in zip(_cpu(service_pids), service)]
    flat = [item for out in results for item in out]
    require(len(flat) == sum(len(bodies) for bodies in per_client), f"{kind.name}: a client stopped early")
    for _sent, _done, status, payload in flat:
        require(status == 200, f"{kind.name}: HTTP {status}: {payload[:300]!r}")
        problem = kind.check(json.loads(payload))
        require(problem is None, f"{kind.name}: {problem}")
    return Phase(
        kind=kind.name,
        clients=kind.clients,
        round=round_,
        latencies_s=[done - sent for sent, done, _, _ in flat],
        wall_s=max(done for _, done, _, _ in flat) - min(sent for sent, _, _, _ in flat),
        client_cpu_s=client,
        service_cpu_s=service,
        cluster_cpu_s=cluster,
        machine_cpu_s=machine,
    )


def _cpu(pids: Sequence[int]) -> list[float]:
    return [cpu_seconds(pid) for pid in pids]


def machine_busy_seconds() -> float:
    """CPU seconds all cores have been busy since boot, anyone's (Linux /proc/stat; nan elsewhere)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# --- the processes ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def http_call(
    url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """(status, body) of one request; an HTTP error status is returned, not raised."""
    data = None if body is None else encode(body)
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def index_corpus(corpus: Path, env: dict[str, str], documents: int) -> float:
    """`reranker index CORPUS` into the alias, with a request timeout of its own
    (INDEX_TIMEOUT_S); returns its wall seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "reranker.cli", "index", str(corpus), "--no-progress"],
        check=False,
        env={**env, "OPENSEARCH_TIMEOUT": str(INDEX_TIMEOUT_S)},
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    require(done.returncode == 0, f"reranker index failed (exit {done.returncode}): {done.stderr[-2000:]}{done.stdout[-1000:]}")
    require(
        f"the index holds {documents} documents" in done.stdout,
        f"reranker index: {done.stdout.strip()}",
    )
    return seconds


class Service:
    """`reranker serve` as a subprocess: started, waited for, stopped by its own pid."""

    def __init__(self, env: dict[str, str], log_path: Path, workers: int = SERVICE_WORKERS, threads: int = SERVICE_THREADS) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.workers = workers
        command = [
            sys.executable, "-m", "reranker.cli", "serve", "--bind", f"127.0.0.1:{self.port}",
            "--workers", str(workers), "--threads", str(threads),
        ]  # fmt: skip
        self._log = log_path.open("w", encoding="utf-8")
        self.process = subprocess.Popen(command, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if http_call(self.base + "/readyz")[0] == 200 and len(self.worker_pids()) == self.workers:
                    return
            except OSError:
                pass
            require(self.process.poll() is None, f"reranker serve exited: {self.log_tail()}")
            require(time.monotonic() < deadline, f"reranker serve not ready: {self.log_tail()}")
            time.sleep(0.2)

    def worker_pids(self) -> list[int]:
        """The gunicorn workers: the children of the master (Linux /proc)."""
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def topic_cache(self) -> dict[str, float]:
        """The workers' topic-cache lookups so far, {"hit": n, "computed": n}, from /metrics."""
        status, raw = http_call(self.base + "/metrics")
        require(status == 200, f"/metrics answered {status}")
        found = re.findall(r'^reranker_topic_cache_lookups_total\{result="(\w+)"\} (\S+)$', raw.decode(), re.MULTILINE)
        counts = {"hit": 0.0, "computed": 0.0}
        for result, value in found:
            counts[result] += float(value)
        return counts

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


# --- the kinds of request ------------------------------------------------------------------


def make_kinds(
    service: Service, cluster_port: int, queries: Sequence[str], documents: Documents, sizes: Sizes
) -> dict[str, Kind]:
    """The five kinds with 16 clients, by name."""
    cached_texts = documents.texts(RERANK_DOCUMENTS)
    search_body = lambda q: {"query": q, "window": WINDOW, "size": PAGE}
    cached_body = lambda q: {"query": q, "documents": cached_texts}
    fresh_body = lambda q: {"query": q, "documents": documents.texts(RERANK_DOCUMENTS)}
    bearer = {"Authorization": f"Bearer {API_KEY}"}
    kinds = [
        Kind("direct", f"direct: osmem POST /{ALIAS}/_search, BM25, size {PAGE}", cluster_port,
             f"/{ALIAS}/_search", {}, per_query(queries, cluster_body), check_hits(PAGE), sizes.search_requests),
        Kind("search", f"service POST /search, window {WINDOW}, size {PAGE}", service.port,
             "/search", {}, per_query(queries, search_body), check_search, sizes.search_requests),
        Kind("proxy", f"service proxy POST /{ALIAS}/_search, window {WINDOW}", service.port,
             f"/{ALIAS}/_search", {}, per_query(queries, cluster_body), check_proxy, sizes.search_requests),
        Kind("cached", f"POST /v1/rerank, {RERANK_DOCUMENTS} docs, cached topics", service.port,
             "/v1/rerank", bearer, per_query(queries, cached_body), check_rerank, sizes.cached_requests),
        Kind("uncached", f"POST /v1/rerank, {RERANK_DOCUMENTS} fresh docs", service.port,
             "/v1/rerank", bearer, per_query(queries, fresh_body), check_rerank, sizes.uncached_requests),
    ]  # fmt: skip
    return {kind.name: kind for kind in kinds}


def cluster_kinds(cluster_port: int, queries: Sequence[str], sizes: Sizes) -> list[Kind]:
    """One client straight to osmem, with the requests the service makes behind /search
    (BM25 top-100, then _mget of its topics) and behind the proxy (the window, then the page)."""
    top: dict[str, list[str]] = {}

    def top_ids(query: str) -> list[str]:
        """The BM25 top-100 of `query` (one untimed request, remembered)."""
        if query not in top:
            status, raw = http_call(f"http://127.0.0.1:{cluster_port}/{ALIAS}/_search", bm25_body(query))
            require(status == 200, f"BM25 top-{WINDOW}: HTTP {status}")
            top[query] = [hit["_id"] for hit in json.loads(raw)["hits"]["hits"]]
        return top[query]

    search, count = f"/{ALIAS}/_search", sizes.serial_requests
    mget = lambda q: {"ids": top_ids(q)}
    page = lambda q: page_body(q, top_ids(q)[:PAGE])
    page_ids = lambda q: {"ids": top_ids(q)[:PAGE]}
    return [
        Kind("bm25", f"/search 1: BM25 top-{WINDOW}, titles (store.bm25)", cluster_port, search, {},
             per_query(queries, bm25_body), check_hits(WINDOW), count, 1),
        Kind("mget", f"/search 2: _mget of {WINDOW} topics (store.topics)", cluster_port,
             f"/{ALIAS}/_mget?_source_includes={TOPICS}", {}, per_query(queries, mget),
             check_mget(WINDOW, TOPICS), count, 1),
        Kind("window", f"proxy 1: the window, top-{WINDOW} with {TOPICS}", cluster_port, search, {},
             per_query(queries, window_body), check_window, count, 1),
        Kind("page", f"proxy 2 with highlights: the query on {PAGE} ids", cluster_port, search, {},
             per_query(queries, page), check_hits(PAGE), count, 1),
        Kind("page-mget", f"proxy 2: the page as _mget of {PAGE} ids", cluster_port,
             f"/{ALIAS}/_mget?_source_includes=title", {}, per_query(queries, page_ids),
             check_mget(PAGE, "title"), count, 1),
    ]  # fmt: skip


def proxy_note(service: Service, query: str) -> str | None:
    """Why the proxy route cannot be measured (None: it answers a reranked search)."""
    status, raw = http_call(f"{service.base}/{ALIAS}/_search", cluster_body(query))
    if status in (403, 404, 405):
        return f"the proxy route answered HTTP {status} ({raw[:200].decode(errors='replace')})"
    require(status == 200, f"proxy: HTTP {status}: {raw[:300]!r}")
    problem = check_proxy(json.loads(raw))
    require(problem is None, f"proxy: {problem}")
    return None


def check_same_order(service: Service, queries: Sequence[str]) -> None:
    """The proxy and /search rerank the same BM25 window: they must give the same page."""
    for query in queries:
        _, raw = http_call(service.base + "/search", {"query": query, "window": WINDOW, "size": PAGE})
        native = [hit["id"] for hit in json.loads(raw)["hits"]]
        _, raw = http_call(f"{service.base}/{ALIAS}/_search", cluster_body(query))
        proxied = [hit["_id"] for hit in json.loads(raw)["hits"]["hits"]]
        require(native == proxied, f"/search and the proxy disagree: {native} vs {proxied}")


# --- rounds ----------------------------------------------------------------------------------


def cache_delta(service: Service, before: dict[str, float]) -> dict[str, float]:
    after = service.topic_cache()
    return {key: after[key] - before[key] for key in after}


def warm_up(kinds: Sequence[Kind], service: Service, cluster_pid: int) -> None:
    """Every kind twice per client, untimed; then the cached kind until both workers hold
    its documents (a phase with 16 clients that computes no topic)."""
    pids = service.worker_pids()
    for kind in kinds:
        run_phase(replace(kind, per_client=2), 0, pids, cluster_pid)
    cached = next(kind for kind in kinds if kind.name == "cached" and kind.clients == CLIENTS)
    for _ in range(5):
        before = service.topic_cache()
        run_phase(replace(cached, per_client=2), 0, pids, cluster_pid)
        if cache_delta(service, before)["computed"] == 0:
            return
    raise AssertionError("the cached documents' topics keep being computed; refusing to report figures")


def run_rounds(
    kinds: Sequence[Kind], service: Service, cluster_pid: int, rounds: int, rng: np.random.Generator
) -> list[Phase]:
    """Each round runs every kind once, in a shuffled order; after each, the workers'
    topic-cache counters must say what the kind promises."""
    pids = service.worker_pids()
    phases = []
    for round_ in range(1, rounds + 1):
        for number in rng.permutation(len(kinds)):
            kind = kinds[number]
            before = service.topic_cache()
            phase = run_phase(kind, round_, pids, cluster_pid)
            delta = cache_delta(service, before)
            topics = len(phase.latencies_s) * RERANK_DOCUMENTS
            expected = {"cached": {"hit": topics, "computed": 0}, "uncached": {"hit": 0, "computed": topics}}
            wanted = expected.get(kind.name, {"hit": 0, "computed": 0})
            require(delta == wanted, f"{kind.name}: topic cache {delta}, expected {wanted}")
            phases.append(phase)
    require(service.worker_pids() == pids, "a gunicorn worker restarted during the run")
    return phases


def summarise(kind: Kind, phases: Sequence[Phase]) -> KindResult:
    mine = [p for p in phases if p.kind == kind.name and p.clients == kind.clients]
    latencies = np.asarray([s for p in mine for s in p.latencies_s])
    requests = len(latencies)
    wall = sum(p.wall_s for p in mine)
    per_worker = np.asarray([p.service_cpu_s for p in mine]).sum(axis=0)
    return KindResult(
        kind=kind.name,
        label=kind.label,
        clients=kind.clients,
        requests=requests,
        requests_per_s=requests / wall,
        p50_ms=float(np.percentile(latencies, 50)) * 1e3,
        p99_ms=float(np.percentile(latencies, 99)) * 1e3,
        round_p50_ms=[float(np.percentile(p.latencies_s, 50)) * 1e3 for p in mine],
        client_cpu_share=sum(p.client_cpu_s for p in mine) / wall,
        client_cpu_ms=sum(p.client_cpu_s for p in mine) / requests * 1e3,
        service_cpu_ms=float(per_worker.sum()) / requests * 1e3,
        busiest_worker_share=float(per_worker.max() / per_worker.sum()) if per_worker.sum() > 0 else None,
        cluster_cpu_ms=sum(p.cluster_cpu_s for p in mine) / requests * 1e3,
        others_cores=sum(
            p.machine_cpu_s - p.client_cpu_s - sum(p.service_cpu_s) - p.cluster_cpu_s for p in mine
        ) / wall,
    )


# --- targets and report --------------------------------------------------------------------


def evaluate_targets(loaded: dict[str, KindResult]) -> list[TargetResult]:
    """The issue's three targets, on the 16-client figures."""
    direct = loaded["direct"].p50_ms
    if "proxy" in loaded:
        ratio = TargetResult("proxy POST /<index>/_search p50 / direct _search p50",
                             loaded["proxy"].p50_ms / direct, "x", MAX_PROXY_RATIO, False, True)
    else:
        ratio = TargetResult("POST /search p50 / direct _search p50 (proxy not available: its target applied to /search)",
                             loaded["search"].p50_ms / direct, "x", MAX_PROXY_RATIO, False, True)
    return [
        ratio,
        TargetResult(f"/v1/rerank {RERANK_DOCUMENTS} docs, cached topics, p50",
                     loaded["cached"].p50_ms, "ms", MAX_CACHED_P50_MS, True, True),
        TargetResult(f"/v1/rerank {RERANK_DOCUMENTS} docs, uncached, p50",
                     loaded["uncached"].p50_ms, "ms", MAX_UNCACHED_P50_MS, True, True),
    ]  # fmt: skip


def _results_table(results: Sequence[KindResult], direct: float, *, loaded: bool) -> str:
    """One row per kind; `direct`: the p50 the "vs direct" column divides by. Without
    `loaded`, the columns about sharing the machine are left out."""
    headers = ["kind", "requests", "req/s", "p50 ms", "p99 ms", "p50 vs direct", "p50 by round",
               "service ms/req", "osmem ms/req"]  # fmt: skip
    rows = [
        [
            r.label,
            f"{r.requests:,}",
            f"{r.requests_per_s:,.1f}",
            f"{r.p50_ms:.1f}",
            f"{r.p99_ms:.1f}",
            f"{r.p50_ms / direct:.2f}x",
            " / ".join(f"{p:.1f}" for p in r.round_p50_ms),
            f"{r.service_cpu_ms:.1f}",
            f"{r.cluster_cpu_ms:.1f}",
        ]
        for r in results
    ]
    if loaded:
        headers += ["client ms/req", "client CPU", "busier worker", "others' cores"]
        for row, r in zip(rows, results):
            row += [
                f"{r.client_cpu_ms:.2f}",
                f"{100 * r.client_cpu_share:.0f}%",
                "-" if r.busiest_worker_share is None else f"{100 * r.busiest_worker_share:.0f}%",
                f"{r.others_cores:.2f}",
            ]
    return table(headers, rows)


def format_report(
    meta: dict[str, object],
    results: Sequence[KindResult],
    targets: Sequence[TargetResult],
    notes: Sequence[str],
) -> str:
    header = " | ".join(f"{key}: {value}" for key, value in meta.items())
    loaded = [r for r in results if r.clients == CLIENTS]
    serial = {r.kind: r for r in results if r.clients == 1}
    target_lines = [
        f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured:,.3g} {t.unit} "
        f"(target {'<' if t.strict else '<='} {t.bound:g} {t.unit})"
        for t in targets
    ]
    return "\n".join(
        [
            header,
            "",
            f"1. {CLIENTS} concurrent clients (threads, one keep-alive connection each) against"
            + f" {SERVICE_WORKERS} gunicorn workers x {SERVICE_THREADS} threads.",
            "   CPU per request: service = the gunicorn workers, osmem = the server, client = this process",
            "   (client CPU: its share of one core); busier worker = that worker's share of the service's",
            "   CPU; others' cores = CPU used by processes outside this benchmark meanwhile (shared machine).",
            _results_table(loaded, next(r.p50_ms for r in loaded if r.kind == "direct"), loaded=True),
            *notes,
            "",
            "2. One client at a time: latency without queueing (information, not a target).",
            _results_table(
                [r for r in serial.values() if r.kind in SERVICE_KINDS], serial["direct"].p50_ms, loaded=False
            ),
            "",
            "3. One client straight to osmem with the requests behind /search and the proxy",
            "   (bodies as OpenSearchStore.bm25 / .topics and service/search_requests.py build them).",
            _results_table(
                [r for r in serial.values() if r.kind not in SERVICE_KINDS], serial["direct"].p50_ms, loaded=False
            ),
            *breakdown(serial),
            "",
            "4. Targets (on the 16-client figures):",
            *target_lines,
        ]
    )


def breakdown(serial: dict[str, KindResult]) -> list[str]:
    """How much of a one-client request is the cluster's, by p50."""
    lines = []
    direct = serial["direct"].p50_ms
    for kind, parts in (("search", ("bm25", "mget")), ("proxy", ("window", "page-mget"))):
        if kind in serial:
            cluster = sum(serial[part].p50_ms for part in parts)
            lines.append(
                f"   {kind}: cluster requests {' + '.join(parts)} = {cluster:.1f} ms ({cluster / direct:.2f}x direct); "
                f"the whole request {serial[kind].p50_ms:.1f} ms, so the service adds {serial[kind].p50_ms - cluster:.1f} ms"
            )
    highlighted = serial["window"].p50_ms + serial["page"].p50_ms
    lines.append(
        f"   a proxied search asking for highlights re-runs its query on the page's ids instead: "
        f"window + page = {highlighted:.1f} ms ({highlighted / direct:.2f}x direct)"
    )
    return lines


def _metadata(sizes: Sizes, quick: bool, seed: int, server_version: str) -> dict[str, object]:
    return {
        **machine(
            ("numpy", "flask", "gunicorn", "opensearch-py"),
            os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
            **{"osmem-server": f"{importlib.metadata.version('osmem-server')} (reports {server_version})"},
        ),
        "mode": "quick" if quick else "default",
        "docs": sizes.docs,
        "queries": sizes.queries,
        "rounds": sizes.rounds,
        "requests per client and round (search / cached / uncached)":
            f"{sizes.search_requests} / {sizes.cached_requests} / {sizes.uncached_requests}",
        "seed": seed,
    }  # fmt: skip


def service_env(cluster_url: str, data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "OPENSEARCH_URL": cluster_url,
        "RERANKER_INDEX": ALIAS,
        "RERANKER_DATA_DIR": str(data_dir),
        "RERANKER_API_KEYS": API_KEY,
        "RERANKER_DEADLINE_MS": str(DEADLINE_MS),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # gunicorn.conf.py makes a fresh one
    return env


def measure(
    args: argparse.Namespace, sizes: Sizes, directory: Path, cluster_url: str, cluster_pid: int
) -> tuple[list[KindResult], list[Phase], list[str], float]:
    rng = np.random.default_rng(args.seed)
    corpus = directory / "corpus.jsonl"
    texts = write_corpus(corpus, rng, sizes.docs)
    queries = summary_queries(rng, texts, sizes.queries)
    env = service_env(cluster_url, directory)
    index_seconds = index_corpus(corpus, env, sizes.docs)
    service = Service(env, directory / "service.log")
    try:
        service.wait_ready()
        port = urlsplit(cluster_url).port or 80
        kinds = make_kinds(service, port, queries, Documents(rng), sizes)
        notes = []
        skipped = proxy_note(service, queries[0])
        if skipped is None:
            check_same_order(service, queries[:5])
        else:
            del kinds["proxy"]
            notes.append(f"   proxy skipped: {skipped}")
        every = [*kinds.values(), *serial_kinds(kinds.values(), sizes), *cluster_kinds(port, queries, sizes)]
        warm_up(every, service, cluster_pid)
        phases = run_rounds(every, service, cluster_pid, sizes.rounds, rng)
    except AssertionError:
        print(service.log_tail(), file=sys.stderr)
        raise
    finally:
        service.stop()
    return [summarise(kind, phases) for kind in every], phases, notes, index_seconds


def serial_kinds(kinds: Iterable[Kind], sizes: Sizes) -> list[Kind]:
    """The same kinds with one client."""
    return [
        replace(kind, clients=1, per_client=sizes.serial_uncached if kind.name == "uncached" else sizes.serial_requests)
        for kind in kinds
    ]


def run(args: argparse.Namespace, sizes: Sizes, directory: Path) -> tuple[dict[str, Any], list[TargetResult], str]:
    from osmem_server import OsmemServer

    server = OsmemServer.start(japanese=False)
    try:
        meta = _metadata(sizes, args.quick, args.seed, server.version)
        started = time.perf_counter()
        results, phases, notes, index_seconds = measure(args, sizes, directory, server.url, server.pid)
        meta["indexing (reranker index)"] = f"{sizes.docs / index_seconds:.0f} docs/s"
        meta["wall s"] = round(time.perf_counter() - started, 1)
    finally:
        server.close()
    targets = evaluate_targets({r.kind: r for r in results if r.clients == CLIENTS})
    payload = {
        "meta": meta,
        "results": [asdict(r) for r in results],
        "phases": [asdict(p) for p in phases],
        "notes": notes,
        "targets": [asdict(t) | {"passed": t.passed} for t in targets],
    }
    return payload, targets, format_report(meta, results, targets, notes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run with small sizes, about 20 s")
    parser.add_argument("--docs", type=int, help=f"2,000-word documents to index (default {DEFAULT_SIZES.docs})")
    parser.add_argument("--rounds", type=int, help=f"rounds over all kinds (default {DEFAULT_SIZES.rounds})")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--seed", type=int, default=2018, help="random seed (default 2018)")
    args = parser.parse_args(argv)
    base = QUICK_SIZES if args.quick else DEFAULT_SIZES
    sizes = replace(base, docs=args.docs or base.docs, rounds=args.rounds or base.rounds)
    require(sizes.docs >= WINDOW, f"--docs must be at least {WINDOW} (the BM25 window)")
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        payload, targets, report = run(args, sizes, Path(tmp))
    print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0 if all(t.passed for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
