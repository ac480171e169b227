#!/usr/bin/env python3
"""How long `reranker search` takes end to end on the sample index, start-up included.

    python bench/bench_startup.py            # about 20 s

Indexes the bundled sample corpus into a fresh data directory (once), runs
`reranker search QUERY` as a new process RUNS times and prints the median and worst wall
time, next to `python -c pass` (the interpreter alone) run the same way in the same run, and
the slowest imports of one search (`python -X importtime`). Target: median under 0.5 s.

Then, in this process, what opening the bundled vectors costs now that converted vectors are
cached per machine by the source's content: the sha256 of the source files (what every start
would pay to find its cache entry without remembering it), the remembered digest (what a start
pays), opening the converted entry, and one conversion into an empty cache, each as a ratio
to the sha256.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

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
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    with tempfile.TemporaryDirectory() as directory:
        # A cache of the run's own: the index command below converts the vectors into it.
        env = {**os.environ, "RERANKER_DATA_DIR": directory, "RERANKER_CACHE_DIR": f"{directory}/cache"}
        cli = [sys.executable, "-m", "reranker.cli"]
        timed([*cli, "index", str(REPO / "reranker" / "sample" / "corpus.jsonl"), "--no-progress"], env)
        timed([*cli, "search", QUERY], env)
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
    print()
    print(opening_vectors())
    passed = median < TARGET_SECONDS
    print(f"\n{'PASS' if passed else 'FAIL'}  median search {median:.3f} s, target < {TARGET_SECONDS} s")
    return 0 if passed else 1


def opening_vectors() -> str:
    """The per-start cost of finding the bundled vectors' cache entry, and of a conversion."""
    from reranker.embeddings import _builtin_glove_files, _file_checksum, load_vectors, source_digest

    files = _builtin_glove_files()
    with tempfile.TemporaryDirectory() as directory:
        cache = Path(directory)
        started = time.perf_counter()
        converted = load_vectors("glove-6b-50d", cache)
        conversion = time.perf_counter() - started

        def median(work: Callable[[], object]) -> float:
            times = []
            for _ in range(RUNS):
                started = time.perf_counter()
                work()
                times.append(time.perf_counter() - started)
            return statistics.median(times)

        hashing = median(lambda: [_file_checksum(file) for file in files])
        remembered = median(lambda: [source_digest(file, cache) for file in files])
        opening = median(lambda: load_vectors("glove-6b-50d", cache))
        require(load_vectors("glove-6b-50d", cache).info == converted.info, "a reopened entry is other vectors")
    size = sum(file.stat().st_size for file in files)
    rows = [
        [f"sha256 of the source files ({size / 1e6:.0f} MB; baseline)", f"{hashing * 1e3:.1f}", "1.00x"],
        ["the remembered sha256 (size, times, inode unchanged)", f"{remembered * 1e3:.2f}", f"{remembered / hashing:.3f}x"],
        ["opening the converted entry (load_vectors, whole)", f"{opening * 1e3:.1f}", f"{opening / hashing:.2f}x"],
        ["converting into an empty cache (once per machine)", f"{conversion * 1e3:.0f}", f"{conversion / hashing:.1f}x"],
    ]
    return f"opening the bundled vectors in this process (median of {RUNS}; the conversion once):\n" + table(
        ["", "ms", "vs sha256"], rows
    )


if __name__ == "__main__":
    sys.exit(main())
