"""What an online experiment costs, and what its report says for simulated users.

The app (`create_app`, in-process through Flask's test client, so HTTP is not measured)
runs over the embedded store holding CL-SciSumm 2018's 567 papers (../shared/data; the
bundled 25-paper sample without it) and the bundled GloVe vectors. The 40 human
summaries are the queries: window 100, size 10.

    single       POST /search naming hidden_topics (no experiment)
    bm25         POST /search naming bm25
    interleaved  POST /search naming no ranker, with an experiment at 100% traffic:
                 both rankers over the same window, team-draft merge, and the query
                 recorded in the experiment store (SQLite, synchronous=FULL)
    event        POST /events, one click on an interleaved query
    report       GET /experiments/<id> once the simulation below has recorded its events

Interleaving should cost about one extra scoring pass plus one durable write, never a
second BM25 retrieval; the figure to watch is interleaved / single, measured in the same
rounds in shuffled order. Every response is checked first (status ok, 10 hits, a query id
for interleaved ones, 201 for events).

Then simulated users who judge by one ranker's top 3 (position-biased: a hit at rank r is
examined with probability 0.9^(r-1); clicked with 0.8 when liked, 0.05 otherwise) search
the 40 summaries as distinct clients, and the report's verdict is printed for both
methods, with each ranker as the preferred one: its always-valid p-value (the verdict's)
beside the fixed-horizon sign test's; then `reranker ab report` of the last experiment. These are simulated users, not real ones.

Run:  python bench/bench_experiments.py            (about 2 minutes on 2 cores)
      python bench/bench_experiments.py --rounds 2 (quicker)
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import json
import random
import statistics
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from benchlib import machine, require, table

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "clscisumm2018-train"
ADMIN = "bench-admin-key"


def _queries(folder: Path) -> list[str]:
    return [json.loads(line)["text"] for line in (folder / "queries.jsonl").read_text().splitlines() if line.strip()]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the 40 queries per kind (default 3)")
    parser.add_argument("--users", type=int, default=400, help="simulated searches per experiment (default 400)")
    args = parser.parse_args()

    from reranker.cli import main as cli
    from reranker.config import Settings
    from reranker.service import create_app

    folder = SHARED if (SHARED / "corpus.jsonl").is_file() else Path(str(resources.files("reranker").joinpath("sample")))
    queries = _queries(folder)
    work = Path(tempfile.mkdtemp(prefix="bench-experiments-"))
    env = {"HOME": str(work), "RERANKER_DATA_DIR": str(work / "data"), "RERANKER_ADMIN_API_KEY": ADMIN}
    os.environ.update(env)
    started = time.perf_counter()
    require(cli(["index", str(folder / "corpus.jsonl"), "--no-progress"]) == 0, "indexing failed")
    print(f"indexed {folder.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    app = create_app(Settings.from_env(env))
    client = app.test_client()
    auth = {"Authorization": f"Bearer {ADMIN}"}

    def search(text: str, **extra: Any) -> tuple[float, dict[str, Any]]:
        begin = time.perf_counter()
        answer = client.post("/search", json={"query": text, "size": 10, "window": 100, **extra})
        elapsed = 1000 * (time.perf_counter() - begin)
        require(answer.status_code == 200, f"/search answered {answer.status_code}")
        body = answer.get_json()
        require(body["status"] == "ok" and len(body["hits"]) == 10, f"/search: {body['status']}, {len(body['hits'])} hits")
        return elapsed, body

    # Warm up every path once (vectors paged in, SQLite files created).
    for text in queries[:3]:
        search(text, ranker="hidden_topics")
        search(text, ranker="bm25")
    require(client.post("/experiments", json={"id": "cost", "rankers": ["hidden_topics", "bm25"], "traffic": 1.0}, headers=auth).status_code == 201, "experiment not created")

    times: dict[str, list[float]] = {"single": [], "bm25": [], "interleaved": [], "event": []}
    rng = random.Random(5)
    for round_ in range(args.rounds):
        kinds = ["single", "bm25", "interleaved"]
        for number, text in enumerate(queries):
            rng.shuffle(kinds)
            for kind in kinds:
                if kind == "single":
                    elapsed, _ = search(text, ranker="hidden_topics")
                elif kind == "bm25":
                    elapsed, _ = search(text, ranker="bm25")
                else:
                    client_id = f"cost-{round_}-{number}"
                    elapsed, body = search(text, client_id=client_id)
                    require(body["ranker"] == "interleaved" and "query_id" in body, "not interleaved")
                    hit = body["hits"][rng.randrange(10)]
                    event = {
                        "action_name": "click", "query_id": body["query_id"], "client_id": client_id,
                        "event_attributes": {"object": {"object_id": hit["id"]}, "position": {"ordinal": hit["rank"]}},
                    }
                    begin = time.perf_counter()
                    answer = client.post("/events", json=event)
                    times["event"].append(1000 * (time.perf_counter() - begin))
                    require(answer.status_code == 201, f"/events answered {answer.status_code}")
                times[kind].append(elapsed)
    begin = time.perf_counter()
    answer = client.get("/experiments/cost")
    report_ms = 1000 * (time.perf_counter() - begin)
    require(answer.status_code == 200 and answer.get_json()["report"]["clicks"] == len(times["event"]), "report does not count every click")
    require(client.patch("/experiments/cost", json={"status": "stopped"}, headers=auth).status_code == 200, "could not stop")

    rows = []
    single_p50 = statistics.median(times["single"])
    for kind, values in times.items():
        p50 = statistics.median(values)
        ratio = f"{p50 / single_p50:.2f}x" if kind != "event" else ""
        rows.append([kind, str(len(values)), f"{p50:.2f}", f"{_percentile(values, 0.99):.2f}", ratio])
    rows.append(["report", "1", f"{report_ms:.2f}", "", f"({len(times['event'])} queries, {len(times['event'])} clicks)"])

    # --- simulated users ---------------------------------------------------------------
    verdicts = []
    for method in ("team_draft", "balanced"):
        for liked_by in ("hidden_topics", "bm25"):
            experiment_id = f"sim-{method}-{liked_by}"
            body = {"id": experiment_id, "rankers": ["hidden_topics", "bm25"], "method": method, "traffic": 1.0}
            require(client.post("/experiments", json=body, headers=auth).status_code == 201, "experiment not created")
            clicks = random.Random(f"{method}-{liked_by}")
            for number in range(args.users):
                text = queries[number % len(queries)]
                liked = {h["id"] for h in search(text, ranker=liked_by)[1]["hits"][:3]}
                client_id = f"{experiment_id}-user-{number}"
                _, shown = search(text, client_id=client_id)
                for hit in shown["hits"]:
                    if clicks.random() < 0.9 ** (hit["rank"] - 1) and clicks.random() < (0.8 if hit["id"] in liked else 0.05):
                        event = {
                            "action_name": "click", "query_id": shown["query_id"], "client_id": client_id,
                            "event_attributes": {"object": {"object_id": hit["id"]}, "position": {"ordinal": hit["rank"]}},
                        }
                        require(client.post("/events", json=event).status_code == 201, "event refused")
            report = client.get(f"/experiments/{experiment_id}").get_json()["report"]
            require(client.patch(f"/experiments/{experiment_id}", json={"status": "stopped"}, headers=auth).status_code == 200, "could not stop")
            wins = report["wins"]
            verdicts.append([
                method, liked_by, str(report["queries"]), str(report["queries_with_clicks"]),
                f"{wins['hidden_topics']} / {wins['bm25']} / {report['ties']}",
                "-" if report["p_value"] is None else f"{report['p_value']:.2g}",
                "-" if report["fixed_horizon_p_value"] is None else f"{report['fixed_horizon_p_value']:.2g}",
                str(report["winner"]),
                "PASS" if report["winner"] == liked_by else "FAIL",
            ])

    print(json.dumps(machine(["numpy", "flask"], os.environ.get("OPENBLAS_NUM_THREADS", "?"), corpus=folder.name, queries=len(queries)), indent=2))
    print()
    print(f"Latency in-process (ms), window 100, size 10, {args.rounds} rounds x {len(queries)} queries, shuffled per query:")
    print(table(["kind", "n", "p50", "p99", "vs single"], rows))
    print()
    print(f"Simulated users ({args.users} searches per experiment; users like one ranker's top 3):")
    print(table(["method", "users like", "queries", "clicked", "wins ht / bm25 / ties", "p (always valid)", "p (fixed horizon)", "winner", ""], verdicts))
    # What a team reads: the command line's report of the last experiment (the store is this run's).
    from reranker.cli import main as cli

    print()
    print(f"$ reranker ab report {experiment_id}")
    sys.stdout.flush()
    cli(["ab", "report", experiment_id])
    return 0 if all(row[-1] == "PASS" for row in verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
