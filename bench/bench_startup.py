#!/usr/bin/env python3
"""How long `reranker search` takes end to end on the sample index, start-up included.

    python bench/bench_startup.py            # about 20 s

Indexes the bundled sample corpus into a fresh data directory (once), runs
`reranker search QUERY` as a new process RUNS times and prints the median and worst wall
time, next to `python -c pass` (the interpreter alone) run the same way in the same run, and
the slowest imports of one search (`python -X importtime`). Target: median under 0.5 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine, require, table

REPO = Path(__file__).resolve().parent.parent
QUERY = "A maximum entropy named entity recognizer that uses global features from the whole document."
RUNS = 9
TARGET_SECONDS = 0.5


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    require(done.returncode == 0, f"{argv[:4]} failed: {done.stderr[-500:]}")
    return seconds


def main() -> int:
    with tempfile.TemporaryDirectory() as directory:
        env = {**os.environ, "RERANKER_DATA_DIR": directory}
        cli = [sys.executable, "-m", "reranker.cli"]
        timed([*cli, "index", str(REPO / "reranker" / "sample" / "corpus.jsonl"), "--no-progress"], env)
        timed([*cli, "search", QUERY], env)  # the first load converts and copies the vectors
        search = [timed([*cli, "search", QUERY, "--size", "5"], env) for _ in range(RUNS)]
        bare = [timed([sys.executable, "-c", "pass"], env) for _ in range(RUNS)]
        imports = subprocess.run([sys.executable, "-X", "importtime", *cli[1:], "search", QUERY], env=env, capture_output=True, text=True).stderr
    print(machine(["numpy"], os.environ.get("OPENBLAS_NUM_THREADS", "unset")))
    median = statistics.median(search)
    print(table(["", "median s", "worst s"], [
        [f"reranker search (sample index, {RUNS} runs)", f"{median:.3f}", f"{max(search):.3f}"],
        ["python -c pass", f"{statistics.median(bare):.3f}", f"{max(bare):.3f}"],
    ]))  # fmt: skip
    rows = []
    for line in imports.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print("\nslowest imports (cumulative microseconds):")
    for micros, name in sorted(rows, reverse=True)[:8]:
        print(f"  {micros:>9,}  {name}")
    passed = median < TARGET_SECONDS
    print(f"\n{'PASS' if passed else 'FAIL'}  median search {median:.3f} s, target < {TARGET_SECONDS} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
