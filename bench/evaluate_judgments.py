"""Do judgments derived from clicks rank rankers as the data set's own judgments do?

Simulated users whose relevance is a data set's qrels (CL-SciSumm 2018's 40 summaries over
its 567 papers, ../shared/data; the bundled 25-paper sample without it) search the real app
(`create_app`, in-process) while an experiment interleaves the default ranker with BM25
(team draft, 100% of searches, window 100, 10 hits). Each user is a client of their own, so
team draft's coin flips differ between them. A hit at rank r is examined with probability
1/r (a strong position bias), and an examined hit is clicked with probability 0.7 when the
qrels call it relevant, 0.05 otherwise.

Then `reranker ab judgments` turns the experiment into a judged data set (COEC, default
thresholds and minimum impressions; the corpus file copied), and `reranker evaluate` scores
BM25, the default ranker and the paper's formula (`hidden_topics`, which the experiment
never showed) on it and on the data set's own qrels. The figures to read: does the order of
the rankers by the derived judgments match their order by the qrels, and what do the
derived judgments say about significance. These are simulated users: the figures say the
click model recovers a truth it was given, not what real users prefer.

Run:  python bench/evaluate_judgments.py              (a few minutes on 2 cores)
      python bench/evaluate_judgments.py --users 20   (users per query; default 40)
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
import random
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from benchlib import machine, require, table

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "clscisumm2018-train"
ADMIN = "bench-admin-key"


def _cli(*argv: str) -> str:
    from reranker.cli import main as cli

    out = io.StringIO()
    code = cli(list(argv), stdout=out)
    require(code == 0, f"reranker {' '.join(argv)} exited {code}")
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=40, help="simulated searches per query (default 40)")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args()

    from reranker.config import DEFAULT_RANKER, Settings
    from reranker.datasets import load_qrels, load_queries
    from reranker.service import create_app

    folder = SHARED if (SHARED / "corpus.jsonl").is_file() else Path(str(resources.files("reranker").joinpath("sample")))
    queries = load_queries(folder / "queries.jsonl")
    truth = load_qrels(folder / "qrels.tsv")
    queries = [(qid, text) for qid, text in queries if truth.get(qid)]
    work = Path(tempfile.mkdtemp(prefix="bench-judgments-"))
    env = {"HOME": str(work), "RERANKER_DATA_DIR": str(work / "data"), "RERANKER_ADMIN_API_KEY": ADMIN}
    os.environ.update(env)
    started = time.perf_counter()
    _cli("index", str(folder / "corpus.jsonl"), "--no-progress")
    print(f"indexed {folder.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    app = create_app(Settings.from_env(env))
    client = app.test_client()
    auth = {"Authorization": f"Bearer {ADMIN}"}
    rankers = [DEFAULT_RANKER, "bm25"]
    require(client.post("/experiments", json={"id": "clicks", "rankers": rankers, "traffic": 1.0}, headers=auth).status_code == 201, "experiment not created")

    rng = random.Random(args.seed)
    clicks = 0
    started = time.perf_counter()
    for user in range(args.users):
        for qid, text in queries:
            client_id = f"user-{user}-{qid}"
            answer = client.post("/search", json={"query": text, "size": 10, "window": 100, "client_id": client_id})
            body: dict[str, Any] = answer.get_json()
            require(answer.status_code == 200 and body["ranker"] == "interleaved", f"/search: {answer.status_code} {body.get('ranker')}")
            for hit in body["hits"]:
                if rng.random() < 1.0 / hit["rank"] and rng.random() < (0.7 if hit["id"] in truth[qid] else 0.05):
                    event = {
                        "action_name": "click", "query_id": body["query_id"], "client_id": client_id,
                        "event_attributes": {"object": {"object_id": hit["id"]}, "position": {"ordinal": hit["rank"]}},
                    }
                    require(client.post("/events", json=event).status_code == 201, "event refused")
                    clicks += 1
    print(f"{args.users * len(queries)} searches, {clicks} clicks in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    require(client.patch("/experiments/clicks", json={"status": "stopped"}, headers=auth).status_code == 200, "could not stop")
    app.extensions["reranker"].close()

    judged = work / f"{folder.name}-clicks"
    summary = json.loads(_cli("ab", "judgments", "clicks", "--out", str(judged), "--corpus", str(folder / "corpus.jsonl"), "--json", "--no-progress"))
    evaluated = ",".join([*rankers, "hidden_topics"])
    by_truth = json.loads(_cli("evaluate", str(folder), "--rankers", evaluated, "--json", "--no-progress"))
    by_clicks = json.loads(_cli("evaluate", str(judged), "--rankers", evaluated, "--json", "--no-progress"))

    rows = []
    for name in evaluated.split(","):
        row = [name]
        for report in (by_truth, by_clicks):
            value = report["results"][name]["ndcg@10"]
            p_value = report["p_values"]["bm25"][name]["ndcg@10"] if name != "bm25" else None
            row += [f"{value:.3f}", "" if p_value is None else f"{p_value:.3g}"]
        rows.append(row)
    order_truth = sorted(evaluated.split(","), key=lambda n: -by_truth["results"][n]["ndcg@10"])
    order_clicks = sorted(evaluated.split(","), key=lambda n: -by_clicks["results"][n]["ndcg@10"])

    print(json.dumps(machine(["numpy", "flask"], os.environ.get("OPENBLAS_NUM_THREADS", "?"), corpus=folder.name, queries=len(queries)), indent=2))
    print()
    print(f"Simulated users: {args.users} per query, {args.users * len(queries)} searches, {clicks} clicks; examination 1/rank, "
          "click 0.7 if relevant else 0.05")
    keys = ("lists_shown", "queries_judged", "queries_with_a_relevant_document", "queries_dropped", "pairs_shown", "pairs_judged",
            "pairs_dropped", "grades")
    print("Judgments: " + ", ".join(f"{key} {summary[key]}" for key in keys))
    print()
    print(f"nDCG@10 by the qrels ({by_truth['queries']} queries) and by the judgments from clicks ({by_clicks['queries']} queries); "
          "p: paired randomisation test against BM25")
    print(table(["ranker", "qrels", "p", "clicks", "p"], rows))
    print()
    print(f"order by the qrels:  {' > '.join(order_truth)}")
    print(f"order by the clicks: {' > '.join(order_clicks)}  ({'the same' if order_truth == order_clicks else 'DIFFERENT'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
