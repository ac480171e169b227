"""The proxy's default ranker with and without the cluster's best passages, over osmem-server.

osmem-server (the in-memory OpenSearch-compatible server the tests and
bench/evaluate_routes.py use) counts the nested passage documents in the BM25 statistics
of `body` (its document count and mean length); Lucene counts, per field, the documents
that hold it, so a real cluster's `body` scores do not change with passages. With passages
in the same index, osmem's own BM25 window falls (CL-SciSumm 0.673 -> 0.363, CISI 0.338 ->
0.299 nDCG@10), and evaluate_routes.py's proxy rows then measure that, not the fusion.

This replay keeps osmem's first stage as it was: each data set is indexed twice into one
osmem-server, under the alias `reranker` as by default (no passages: the window, and the
two-way fusion) and under `withpassages` with RERANKER_PASSAGES=true; the three-way row
takes its best-passage scores from the second index (same ids). Rows, for a
100-hit window and a 10-hit page, nDCG@10 (p: paired randomisation test against the
cluster's BM25 order; W/T/L; mean ms per proxied search through Flask's test client):

  cluster bm25      POST /reranker/_search {"query": {"match": {"body": QUERY}}} sent to osmem
  proxy two-way     the same through the proxy (passage_bm25 is None: an index without passages)
  proxy three-way   the same, the best passages scored by osmem from `withpassages`

Run:  python bench/proxy_passages.py [DATASET ...]    (about 5 minutes; needs ../shared/data)
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import io
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
ROWS = ("cluster bm25", "proxy two-way", "proxy three-way")


def replay(name: str) -> None:
    from osmem_server import OsmemServer

    from reranker.cli import main as cli
    from reranker.config import Settings
    from reranker.datasets import load_dataset
    from reranker.evaluation import paired_randomization_p, ranking_metrics
    from reranker.service import create_app
    from reranker.store.opensearch import OpenSearchStore

    dataset = load_dataset(DATA / name)
    corpus = str(DATA / name / "corpus.jsonl")
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    try:
        with tempfile.TemporaryDirectory() as folder:
            # osmem-server takes more than the default 10 s for a bulk of long papers with passages.
            os.environ.update(RERANKER_DATA_DIR=folder, OPENSEARCH_URL=server.url, OPENSEARCH_TIMEOUT="120", RERANKER_DEADLINE_MS="60000")
            for alias, passages in (("reranker", "false"), ("withpassages", "true")):
                os.environ.update(RERANKER_INDEX=alias, RERANKER_PASSAGES=passages)
                if cli(["index", corpus, "--no-progress"], stdout=io.StringIO()) != 0:
                    raise RuntimeError(f"indexing {name} into osmem-server ({alias}) failed")
            os.environ.update(RERANKER_INDEX="reranker", RERANKER_PASSAGES="false")
            app = create_app(Settings.from_env())
            client = app.test_client()
            store = app.extensions["reranker"].engine().store
            with_passages = OpenSearchStore(replace(store.config, alias="withpassages"))
            for size in (100, 10):
                scores: dict[str, list[float]] = {row: [] for row in ROWS}
                spent = dict.fromkeys(ROWS, 0.0)
                for query_id, text in dataset.queries:
                    body = {"query": {"match": {"body": text}}, "size": 10, "_source": False}
                    hits = server.request("POST", "/reranker/_search", body)["hits"]["hits"]
                    judged = dataset.qrels[query_id]
                    scores["cluster bm25"].append(ranking_metrics([h["_id"] for h in hits], judged, 10)["ndcg@10"])
                    for row in ROWS[1:]:
                        if row == "proxy three-way":
                            store.passage_bm25 = with_passages.passage_bm25
                        begun = time.perf_counter()
                        answer = client.post("/reranker/_search", json={**body, "ext": {"rerank": {"window": size}}}).get_json()
                        spent[row] += time.perf_counter() - begun
                        store.__dict__.pop("passage_bm25", None)
                        if answer["ext"]["rerank"]["status"] not in ("ok", "tied"):
                            raise RuntimeError(f"the proxy did not rerank: {answer['ext']}")
                        scores[row].append(ranking_metrics([h["_id"] for h in answer["hits"]["hits"]], judged, 10)["ndcg@10"])
                base, two_way = np.array(scores["cluster bm25"]), np.array(scores["proxy two-way"])
                for row in ROWS:
                    values = np.array(scores[row])
                    line = f"{name}, {size} hits: {row} {values.mean():.3f}"
                    if row != "cluster bm25":
                        wtl = f"{int((values > base).sum())}/{int((values == base).sum())}/{int((values < base).sum())}"
                        line += f" (p {paired_randomization_p(values, base):.3f}; {wtl}; {1000 * spent[row] / len(values):.0f} ms)"
                    if row == "proxy three-way":
                        line += f"; against two-way p {paired_randomization_p(values, two_way):.3f}"
                    print(line, flush=True)
            with_passages.close()
            app.extensions["reranker"].close()
    finally:
        os.environ.pop("OPENSEARCH_URL", None)
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("datasets", nargs="*", metavar="DATASET", help=f"folders of ../shared/data (default: {' '.join(DATASETS)})")
    names = parser.parse_args(argv).datasets or list(DATASETS)
    missing = [name for name in names if not (DATA / name).is_dir()]
    if missing:
        print(f"needs ../shared/data/{missing[0]} beside the repository", file=sys.stderr)
        return 2
    for name in names:
        replay(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
