"""Benchmark: the search path of this working tree against a git revision's, in one process.

What a change costs is a ratio to the code before it, measured in the same process and the
same rounds: this machine's speed moves by a third between runs minutes apart
(docs/performance.md), more than most changes move it. The revision's `reranker` package is
taken from git (`git archive`) into a temporary folder as `reranker_base`, its imports
renamed; both engines open the same index, and each of CL-SciSumm's 40 summaries is searched
by both (`Engine.search`, top 10 of a window of 100), alternating which goes first, for 3
rounds. Printed: p50 and p95 ms of each, the ratio of the p50s and the median of the
per-query ratios, and for how many summaries the two give the same top 10 (a change meant
to keep the rankings must keep every one). With --service, `POST /search` through each
revision's app (Flask's test client; the default ranker, top 10 of the service's window)
instead: the service ranks in a pool thread, which the engine alone does not. With --cohere,
`POST /v1/rerank` through each revision's app with nothing indexed (its own empty data dir),
sent each summary's BM25 window of 100 from the index as texts, top 10 (what a cluster's
rerank call costs a service in front of it): the warm-up round reads every text once, so
the rounds time texts seen before (in new strings each time, as a request's body gives).
With --cohere --new-texts, every call's texts are new to both revisions (each text followed
by as many spaces as calls before it: the same words, another content key), so the rounds
time a first sight (a window of 100 long papers is seconds: --rounds 1 is enough).

The index must be one both revisions read as it is (the same `indexing.DERIVATION`):
bench_passages.py --documents N --store DIR builds one of N documents. --cohere reads only
its windows' texts, from an index of CL-SciSumm's papers each once (`reranker index`).

Run:  python bench/bench_revisions.py --base REV --data-dir DIR [--ranker NAME] [--rounds 3] [--service | --cohere [--new-texts]]
  e.g. python bench/bench_revisions.py --base HEAD~1 --data-dir /tmp/p50k
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import io
import re
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from benchlib import require, table

ROOT = Path(__file__).resolve().parent.parent
SUMMARIES = ROOT.parent / "shared" / "data" / "clscisumm2018-train"
BASE_PACKAGE = "reranker_base"
# What names the package in its own sources: imports, and dotted names in strings
# (importlib, loggers); `files("reranker")` and the like stay, reading the same data files.
_OWN_NAME = re.compile(r"(\bfrom reranker(?=[. ])|\bimport reranker(?=\.)|\"reranker(?=\.))")
_LEFT = re.compile(r"^\s*(from|import) reranker\b", re.MULTILINE)
_API_KEY = "bench-revisions"  # the key --cohere's apps accept


def base_package(revision: str, into: Path) -> None:
    """The revision's `reranker/` as `into/reranker_base`, importing itself by that name."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "reranker"], check=True, capture_output=True
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"cannot read revision {revision!r}: {exc.stderr.decode(errors='replace').strip()}") from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "reranker").rename(into / BASE_PACKAGE)
    for source in (into / BASE_PACKAGE).rglob("*.py"):
        text = _OWN_NAME.sub(lambda found: found.group(0).replace("reranker", BASE_PACKAGE), source.read_text())
        require(not _LEFT.search(text), f"{source} still imports the working tree's package")
        source.write_text(text)


def timed(searches: dict[str, Callable[[str], list[str]]], queries: list[str], rounds: int) -> tuple[dict[str, list[float]], int]:
    """Seconds per search of each revision, alternating per query; and for how many
    queries their top 10 were the same (in the first round)."""
    times: dict[str, list[float]] = {name: [] for name in searches}
    same = 0
    for round_ in range(rounds):
        for number, query in enumerate(queries):
            order = list(searches) if (number + round_) % 2 == 0 else list(reversed(searches))
            tops = {}
            for name in order:
                started = time.perf_counter()
                tops[name] = searches[name](query)
                times[name].append(time.perf_counter() - started)
            same += round_ == 0 and len({tuple(top) for top in tops.values()}) == 1
    return times, same


def engine_search(engine: Any, ranker: str) -> Callable[[str], list[str]]:
    """`Engine.search`'s top 10 of 100 with `ranker`, as ids."""
    return lambda query: [hit.doc_id for hit in engine.search(query, ranker, window=100, size=10).hits]


def service_search(app: Any) -> Callable[[str], list[str]]:
    """`POST /search`'s top 10 through the app, as ids."""
    client = app.test_client()

    def search(query: str) -> list[str]:
        answer = client.post("/search", json={"query": query, "size": 10})
        require(answer.status_code == 200, f"POST /search answered {answer.status_code}: {answer.get_data(as_text=True)[:200]}")
        return [hit["id"] for hit in answer.get_json()["hits"]]

    return search


def cohere_rerank(app: Any, windows: dict[str, list[str]], new_texts: bool = False) -> Callable[[str], list[str]]:
    """`POST /v1/rerank` of the query's window of texts through the app, top 10, as the
    positions of the texts sent (the same texts, in new strings for every call; with
    `new_texts`, texts of other contents too: the n-th call's end in n spaces)."""
    client = app.test_client()
    calls = 0

    def rerank(query: str) -> list[str]:
        nonlocal calls
        texts = [text + " " * calls for text in windows[query]] if new_texts else windows[query]
        calls += 1
        answer = client.post(
            "/v1/rerank", json={"query": query, "documents": texts, "top_n": 10}, headers={"Authorization": f"Bearer {_API_KEY}"}
        )
        require(answer.status_code == 200, f"POST /v1/rerank answered {answer.status_code}: {answer.get_data(as_text=True)[:200]}")
        return [str(result["index"]) for result in answer.get_json()["results"]]

    return rerank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the git revision to compare with (e.g. HEAD~1, a commit)")
    parser.add_argument("--data-dir", type=Path, required=True, help="a data dir with an index both revisions read")
    parser.add_argument("--ranker", default="hidden_topics_corrected+bm25:maxp", help="the ranker to time (default: the default)")
    parser.add_argument("--rounds", type=int, default=3)
    routes = parser.add_mutually_exclusive_group()
    routes.add_argument("--service", action="store_true", help="time POST /search through each revision's app instead")
    routes.add_argument("--cohere", action="store_true", help="time POST /v1/rerank of each window's texts, nothing indexed, instead")
    parser.add_argument("--new-texts", action="store_true", help="with --cohere: texts no call has sent before (a first sight)")
    args = parser.parse_args()
    if args.new_texts and not args.cohere:
        parser.error("--new-texts goes with --cohere")
    if not (args.data_dir / "index").is_dir():
        build = (
            f"RERANKER_DATA_DIR={args.data_dir} reranker index {SUMMARIES}/corpus.jsonl"  # each paper once: windows of distinct texts
            if args.cohere
            else f"bench_passages.py --documents N --store {args.data_dir}"
        )
        raise SystemExit(f"no index in {args.data_dir}: build one with {build}")
    if not SUMMARIES.is_dir():
        raise SystemExit(f"needs CL-SciSumm's summaries in {SUMMARIES}")
    os.environ["RERANKER_DATA_DIR"] = str(args.data_dir)

    from reranker.config import Settings
    from reranker.datasets import load_dataset
    from reranker.pipeline import build_engine

    with tempfile.TemporaryDirectory(prefix="bench-revisions-") as folder:
        base_package(args.base, Path(folder))
        sys.path.insert(0, folder)
        queries = [text for _, text in load_dataset(SUMMARIES).queries]
        if args.cohere:
            from reranker.service import create_app

            engine = build_engine(Settings.from_env())
            windows = {}
            for query in queries:
                window = engine.window(engine.query(query), 100)
                found = engine.store.documents([c.doc_id for c in window.candidates])
                windows[query] = [found[c.doc_id].full_text for c in window.candidates]
            engine.store.close()
            # Each app with nothing indexed, and a deadline no first sight of a window reaches
            # (the warm-up's), so that every text's topics and terms are kept.
            os.environ["RERANKER_DEADLINE_MS"] = "600000"
            os.environ["RERANKER_API_KEYS"] = _API_KEY
            os.environ["RERANKER_DATA_DIR"] = os.path.join(folder, "nothing-indexed")
            working_tree = create_app()
            os.environ["RERANKER_DATA_DIR"] = os.path.join(folder, "nothing-indexed-base")
            base_service = __import__(f"{BASE_PACKAGE}.service", fromlist=["create_app"])
            searches = {
                "working tree": cohere_rerank(working_tree, windows, args.new_texts),
                args.base: cohere_rerank(base_service.create_app(), windows, args.new_texts),
            }
            seen = "new texts" if args.new_texts else "texts seen before"
            what = f"POST /v1/rerank of a window of 100 {seen}, nothing indexed, top 10"
        elif args.service:
            from reranker.service import create_app

            base_service = __import__(f"{BASE_PACKAGE}.service", fromlist=["create_app"])
            searches = {"working tree": service_search(create_app()), args.base: service_search(base_service.create_app())}
            what = "POST /search (the service's default ranker and window), top 10"
        else:
            base_config = __import__(f"{BASE_PACKAGE}.config", fromlist=["Settings"])
            base_pipeline = __import__(f"{BASE_PACKAGE}.pipeline", fromlist=["build_engine"])
            searches = {
                "working tree": engine_search(build_engine(Settings.from_env()), args.ranker),
                args.base: engine_search(base_pipeline.build_engine(base_config.Settings.from_env()), args.ranker),
            }
            what = f"{args.ranker}, top 10 of 100"
        # Warm: caches, memory maps, document frequencies (with --cohere, every text read once;
        # with --new-texts, the words' stems and hashes).
        timed(searches, queries if args.cohere else queries[:5], 1)
        times, same = timed(searches, queries, args.rounds)
    now, before = (np.array(times[name]) * 1000 for name in searches)
    print(f"{what}: {len(queries)} summaries x {args.rounds} rounds, index in {args.data_dir}")
    rows = [[name, f"{np.median(ms):.2f}", f"{np.percentile(ms, 95):.2f}"] for name, ms in (("working tree", now), (args.base, before))]
    print(table(["code", "p50 ms", "p95 ms"], rows))
    print(f"working tree / {args.base}: p50 {np.median(now) / np.median(before):.3f}x, median per query {np.median(now / before):.3f}x")
    print(f"the same top 10: {same} of {len(queries)} summaries")


if __name__ == "__main__":
    main()
