"""Relevance of every way into the service, replayed the way the clusters call it.

For each judged data set (../shared/data/clscisumm2018-train and ../shared/data/cisi, or
the dataset folders named on the command line, ours or BEIR's layout), the corpus is indexed into a fresh embedded store (bundled GloVe 6B 50-d, K = 15), and
the service's Flask app is built over it (its real routes, called through Flask's test
client: no sockets, the same code a request runs). Then each query's BM25 window (the
store's own top 100, or the top 10: OpenSearch's rerank processor reranks only the page
it returns) is sent through each route, as OpenSearch's rerank processor and
Elasticsearch's text_similarity_reranker send it: the hits' texts, in the cluster's
order, best first, with no scores. Each route answers with the default ranker.

Rows (nDCG@10 of the route's order; p: paired randomisation test against the BM25 order
of the same window, 10,000 sign flips; W/T/L against it):
  bm25                      the window in its BM25 order (the baseline)
  /search                   the native search: BM25 window + rerank, the store's scores
  /rerank, scores sent      texts with their BM25 scores (what a caller with scores gets)
  /rerank, texts only       texts, no scores: BM25 of the texts with the index's statistics
  /rerank, ids only         stored ids, no scores: the same, on the stored texts
  /v1/rerank, /v2/rerank    the Cohere routes, texts only, as the clusters call them
  order only                texts, no scores, the order and the topics alone (an ablation:
                            a store that cannot score texts, and a window without the query's
                            text, so no best passage): -ln(rank), with the index's centering
  no index, /v1/rerank      the Cohere route of a service with nothing indexed (a reranker
                            in front of a cluster whose documents it never saw): the order
                            as first stage, the vectors' own centering (prior_centering),
                            each text's best passage with the sent texts' own statistics
  no index, /rerank, scores sent   the same service sent the texts with their BM25 scores
  proxy                     POST /reranker/_search {"query": {"match": {"body": QUERY}}}
                            through the service's OpenSearch-compatible proxy, with
                            osmem-server (the in-memory OpenSearch-compatible server) as the
                            cluster: its own BM25 window, reranked; its baseline is the same
                            search sent to the cluster directly (osmem's BM25 is not Lucene's,
                            so that row has its own BM25 figure)
  cluster's store, /v1/rerank   the Cohere route of a service over that cluster (the
                            OpenSearch store), sent the cluster's window as texts, best
                            first, no scores; p against that window's order. osmem-server
                            cannot score artificial documents, so the order is the first
                            stage; each text's best passage takes the texts' own statistics

Run:  python bench/evaluate_routes.py [--json FILE]    (about 2 minutes on 2 cores)
      python bench/evaluate_routes.py path/to/dataset ...  (your own judged data sets)
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import io
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
KEY = "bench-key"


class _NoStatistics:
    """A store that cannot score texts it does not hold (no index, or a cluster that cannot
    score artificial documents)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def text_bm25(self, query: str, texts: Sequence[str], read: Any = None) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _routes(client: Any, empty_client: Any, engine: Any, ranker_name: str) -> dict[str, Callable[[str, list[Any]], list[int]]]:
    """route name -> function(query, window candidates) -> the route's order (positions).
    `empty_client`: the app of a service with nothing indexed."""
    from reranker.rankers import CandidateSet

    bearer = {"Authorization": f"Bearer {KEY}"}

    def post(path: str, body: dict[str, Any], headers: dict[str, str] | None = None, first_stage: str | None = None, on: Any = None) -> Any:
        """The route's answer (of `on`, else the indexed service); raises unless it
        reranked (ok or tied) with the first stage expected, so that a degraded answer is
        never scored as the route's quality."""
        answer = (on or client).post(path, json=body, headers=headers or {})
        if answer.status_code != 200:
            raise RuntimeError(f"{path} answered {answer.status_code}: {answer.get_data(as_text=True)[:300]}")
        found = answer.get_json()
        status = answer.headers.get("X-Reranker-Status") or found.get("status")
        source = answer.headers.get("X-Reranker-First-Stage") or found.get("first_stage")
        if status not in ("ok", "tied") or (first_stage is not None and source != first_stage):
            raise RuntimeError(f"{path} answered status {status!r}, first stage {source!r}: {found.get('reason') or found.get('meta')}")
        return found

    def texts(candidates: list[Any]) -> list[str]:
        found = engine.store.documents([c.doc_id for c in candidates])
        return [found[c.doc_id].full_text for c in candidates]

    def search(query: str, candidates: list[Any]) -> list[int]:
        found = post("/search", {"query": query, "window": len(candidates), "size": len(candidates)})
        position = {c.doc_id: i for i, c in enumerate(candidates)}
        return [position[hit["id"]] for hit in found["hits"]]

    def rerank(kind: str, indexed: bool = True) -> Callable[[str, list[Any]], list[int]]:
        def call(query: str, candidates: list[Any]) -> list[int]:
            if kind == "ids":
                documents: list[Any] = [{"id": c.doc_id} for c in candidates]
            else:
                documents = [{"text": t} for t in texts(candidates)]
            if kind == "scores":
                documents = [{**d, "score": c.bm25_score} for d, c in zip(documents, candidates)]
            expected = "scores" if kind == "scores" else "index_bm25" if indexed else "order"
            found = post("/rerank", {"query": query, "documents": documents}, first_stage=expected, on=None if indexed else empty_client)
            return [r["index"] for r in found["results"]]
        return call

    def cohere(version: str, indexed: bool = True) -> Callable[[str, list[Any]], list[int]]:
        def call(query: str, candidates: list[Any]) -> list[int]:
            body = {"query": query, "documents": texts(candidates)}
            if indexed:
                found = post(f"/{version}/rerank", body, bearer, first_stage="index_bm25")
            else:
                found = post(f"/{version}/rerank", body, bearer, first_stage="order", on=empty_client)
            return [r["index"] for r in found["results"]]
        return call

    no_statistics = replace(engine, store=_NoStatistics(engine.store))
    ranker = engine.ranker(ranker_name)

    def order_only(query: str, candidates: list[Any]) -> list[int]:
        window = CandidateSet(
            tuple(replace(c, bm25_score=0.0, bm25_rank=i + 1) for i, c in enumerate(candidates)),
            texts=tuple(texts(candidates)),
            first_stage="missing",
        )
        parsed = no_statistics.query(query)
        given = no_statistics.first_stage(parsed, window, ranker)
        if given.first_stage != "order":
            raise RuntimeError(f"expected the order as first stage, got {given.first_stage!r}")
        return no_statistics.rerank(parsed, given, ranker).order

    return {
        "/search": search,
        "/rerank, scores sent": rerank("scores"),
        "/rerank, texts only": rerank("texts"),
        "/rerank, ids only": rerank("ids"),
        "/v1/rerank": cohere("v1"),
        "/v2/rerank": cohere("v2"),
        "order only": order_only,
        "no index, /v1/rerank": cohere("v1", indexed=False),
        "no index, /rerank, scores sent": rerank("scores", indexed=False),
    }


def evaluate_dataset(folder: Path, sizes: Sequence[int]) -> dict[str, Any]:
    from reranker.config import DEFAULT_RANKER, Settings
    from reranker.datasets import load_dataset
    from reranker.evaluation import ranking_metrics
    from reranker.indexing import index_corpus
    from reranker.pipeline import build_engine
    from reranker.service import create_app

    dataset = load_dataset(folder)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["RERANKER_DATA_DIR"] = scratch
        os.environ["RERANKER_API_KEYS"] = KEY
        # This replay measures relevance, not speed (bench_service.py does): a window of 100
        # long papers sent as texts costs their topics and passages on the first call, and on
        # a loaded machine that can pass the service's 2 s deadline and answer degraded.
        os.environ.setdefault("RERANKER_DEADLINE_MS", "60000")
        settings = Settings.from_env()
        engine = build_engine(settings)
        started = time.perf_counter()
        index_corpus(dataset.corpus_path, engine.store, engine.vectors, settings.k, stopwords=engine.stopwords)
        print(f"{dataset.name}: indexed in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        app = create_app(settings)
        empty = Path(scratch) / "nothing-indexed"
        empty.mkdir()
        empty_app = create_app(Settings.from_env({**os.environ, "RERANKER_DATA_DIR": str(empty)}))
        routes = _routes(app.test_client(), empty_app.test_client(), engine, DEFAULT_RANKER)
        for size in sizes:
            per_route: dict[str, list[float]] = {"bm25": []}
            spent: dict[str, float] = {}
            for query_id, text in dataset.queries:
                candidates = engine.store.bm25(text, size)
                ids = [c.doc_id for c in candidates]
                judged = dataset.qrels[query_id]
                per_route["bm25"].append(ranking_metrics(ids, judged, size)["ndcg@10"])
                for route, call in routes.items():
                    begun = time.perf_counter()
                    order = call(text, candidates)
                    spent[route] = spent.get(route, 0.0) + time.perf_counter() - begun
                    if sorted(order) != list(range(len(candidates))):
                        raise RuntimeError(f"{route} did not return every candidate once")
                    per_route.setdefault(route, []).append(ranking_metrics([ids[i] for i in order], judged, size)["ndcg@10"])
            base = per_route["bm25"]
            results[str(size)] = {
                route: _row(values, None if route == "bm25" else base, None if route == "bm25" else spent[route] / len(dataset.queries))
                for route, values in per_route.items()
            }
    return {"queries": len(dataset.queries), "windows": results}


def _row(values: Sequence[float], base: Sequence[float] | None, seconds_per_query: float | None) -> dict[str, Any]:
    """A route's figures: mean nDCG@10 of its per-query `values`, and against the per-query
    `base` (the same windows' BM25 order; None: the baseline's own row) the paired test's p
    and wins/ties/losses; ms per query."""
    from reranker.evaluation import paired_randomization_p

    scores = np.array(values)
    against = scores if base is None else np.array(base)
    return {
        "ndcg@10": float(scores.mean()),
        "p_vs_bm25": None if base is None else paired_randomization_p(scores, against),
        "wins_ties_losses": [int((scores > against).sum()), int((scores == against).sum()), int((scores < against).sum())],
        "ms_per_query": None if seconds_per_query is None else 1000 * seconds_per_query,
    }


def evaluate_proxy(folder: Path, sizes: Sequence[int]) -> dict[str, Any]:
    """The proxy over osmem-server: nDCG@10 of the cluster's own BM25 order and of the
    proxy's (the default ranker over a window of `size` hits), per window size; and of the
    Cohere route of a service over that cluster, sent the cluster's window of `size` as
    texts (its baseline: that window's order)."""
    from osmem_server import OsmemServer

    from reranker.cli import main as cli
    from reranker.config import Settings
    from reranker.datasets import load_dataset, parse_record
    from reranker.evaluation import ranking_metrics
    from reranker.service import create_app

    dataset = load_dataset(folder)
    results: dict[str, Any] = {}
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    timeout = os.environ.get("OPENSEARCH_TIMEOUT")
    try:
        with tempfile.TemporaryDirectory() as scratch:
            os.environ["RERANKER_DATA_DIR"] = scratch
            os.environ["OPENSEARCH_URL"] = server.url
            os.environ["RERANKER_API_KEYS"] = KEY
            os.environ.setdefault("RERANKER_DEADLINE_MS", "60000")  # relevance, not speed (as above)
            # The in-memory server answers a bulk request of long papers in seconds, but in
            # over the client's default 10 s on a busy machine (at load 5 indexing CISI did).
            os.environ.setdefault("OPENSEARCH_TIMEOUT", "120")
            started = time.perf_counter()
            if cli(["index", str(dataset.corpus_path), "--no-progress"], stdout=io.StringIO()) != 0:
                raise RuntimeError(f"indexing {dataset.name} into osmem-server failed")
            print(f"{dataset.name}: indexed into osmem-server in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            app = create_app(Settings.from_env())
            client = app.test_client()
            texts = {}
            for number, line in enumerate(dataset.corpus_path.read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():
                    document = parse_record(line, f"{dataset.corpus_path}:{number}")
                    texts[document.id] = document.full_text
            for size in sizes:
                direct, proxied, spent = [], [], 0.0
                window_bm25, sent_alone, sent_spent = [], [], 0.0
                for query_id, text in dataset.queries:
                    body = {"query": {"match": {"body": text}}, "size": 10, "_source": False}
                    hits = server.request("POST", "/reranker/_search", body)["hits"]["hits"]
                    judged = dataset.qrels[query_id]
                    direct.append(ranking_metrics([h["_id"] for h in hits], judged, 10)["ndcg@10"])
                    begun = time.perf_counter()
                    answer = client.post("/reranker/_search", json={**body, "ext": {"rerank": {"window": size}}})
                    spent += time.perf_counter() - begun
                    if answer.status_code != 200:
                        raise RuntimeError(f"the proxy answered {answer.status_code}: {answer.get_data(as_text=True)[:300]}")
                    reranked = answer.get_json()
                    if reranked.get("ext", {}).get("rerank", {}).get("status") not in ("ok", "tied"):
                        raise RuntimeError(f"the proxy did not rerank: {reranked.get('ext')}")
                    proxied.append(ranking_metrics([h["_id"] for h in reranked["hits"]["hits"]], judged, 10)["ndcg@10"])
                    # The cluster's rerank call to a service over the same cluster: the window's
                    # texts, best first, no scores.
                    window = [h["_id"] for h in server.request("POST", "/reranker/_search", {**body, "size": size})["hits"]["hits"]]
                    window_bm25.append(ranking_metrics(window, judged, 10)["ndcg@10"])
                    begun = time.perf_counter()
                    answer = client.post(
                        "/v1/rerank", json={"query": text, "documents": [texts[doc_id] for doc_id in window]},
                        headers={"Authorization": f"Bearer {KEY}"},
                    )
                    sent_spent += time.perf_counter() - begun
                    if answer.status_code != 200 or answer.headers.get("X-Reranker-Status") not in ("ok", "tied") or (
                        answer.headers.get("X-Reranker-First-Stage") != "order"
                    ):
                        raise RuntimeError(
                            f"/v1/rerank over the cluster answered {answer.status_code}, status {answer.headers.get('X-Reranker-Status')!r}, "
                            f"first stage {answer.headers.get('X-Reranker-First-Stage')!r}: {answer.get_data(as_text=True)[:300]}"
                        )
                    order = [window[result["index"]] for result in answer.get_json()["results"]]
                    sent_alone.append(ranking_metrics(order, judged, 10)["ndcg@10"])
                results[str(size)] = {
                    "cluster bm25": _row(direct, None, None),
                    "proxy": _row(proxied, direct, spent / len(dataset.queries)),
                    "cluster's store, /v1/rerank": _row(sent_alone, window_bm25, sent_spent / len(dataset.queries)),
                }
            app.extensions["reranker"].close()
    finally:
        os.environ.pop("OPENSEARCH_URL", None)
        if timeout is None:
            os.environ.pop("OPENSEARCH_TIMEOUT", None)
        server.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "datasets", nargs="*", type=Path, metavar="DATASET",
        help="judged dataset folders (default: ../shared/data's clscisumm2018-train and cisi)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    folders = args.datasets or [DATA / name for name in DATASETS]
    missing = [folder for folder in folders if not folder.is_dir()]
    if missing:
        print(f"no dataset folder {missing[0]}" + ("" if args.datasets else " (../shared/data beside the repository)"), file=sys.stderr)
        return 2
    from reranker.config import DEFAULT_RANKER
    from reranker.errors import InputError

    names = [folder.resolve().name for folder in folders]
    if len(set(names)) < len(names):
        print("two dataset folders have the same name: the table could not tell them apart", file=sys.stderr)
        return 2
    try:
        found = {name: evaluate_dataset(folder, (100, 10)) for name, folder in zip(names, folders)}
        for name, folder in zip(names, folders):  # the proxy's rows, against the cluster's own BM25 order
            for size, rows in evaluate_proxy(folder, (100, 10)).items():
                found[name]["windows"][size].update(rows)
    except InputError as exc:
        print(f"evaluate_routes: {exc}", file=sys.stderr)
        return 2
    print(f"Default ranker `{DEFAULT_RANKER}`; nDCG@10 (p vs the BM25 order of the same window; W/T/L; ms per query)\n")
    for size in ("100", "10"):
        print(f"Window of {size} hits:\n")
        print("| route | " + " | ".join(f"{name} ({found[name]['queries']})" for name in names) + " |")
        print("|---|" + "---:|" * len(names))
        for route in found[names[0]]["windows"][size]:
            cells = []
            for name in names:
                row = found[name]["windows"][size][route]
                if row["p_vs_bm25"] is None:
                    cells.append(f"{row['ndcg@10']:.3f}")
                else:
                    p = row["p_vs_bm25"]
                    shown = "< 0.001" if p < 0.001 else f"{p:.3f}"
                    w, t, l = row["wins_ties_losses"]
                    cells.append(f"{row['ndcg@10']:.3f} (p {shown}; {w}/{t}/{l}; {row['ms_per_query']:.0f} ms)")
            print(f"| {route} | " + " | ".join(cells) + " |")
        print()
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
