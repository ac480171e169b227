"""How often an experiment's report names a winner between two equal rankers, by how often it is read.

The report's verdict is the exact sign test at p < 0.05 over the units with a preference
(`reranker.interleaving.sign_test`), valid for one look at a number of units fixed in advance.
A team that reads the report (or the web page's timeline) as the experiment runs, and stops
at the first "significant", looks many times. This simulates experiments between equal
rankers (each unit with a preference prefers either with probability 1/2) up to `--units`
units, and counts the share in which the verdict is "significant" at some look:

    once        read once, at the last unit (the test's own 5%)
    every 100   read after every 100 units
    every unit  read after every unit from `min_queries` (20) on

Each unit is one trial; no app, no clicks: the question is only what repeated reading does to
the test. Critical counts come from the product's own `sign_test`, once per n.

Run:  python bench/bench_peeking.py                   (a few seconds)
      python bench/bench_peeking.py --units 5000 --runs 2000
"""

from __future__ import annotations

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse

import numpy as np

from reranker.experiments import DEFAULT_MIN_QUERIES
from reranker.interleaving import sign_test

ALPHA = 0.05


def critical_leads(units: int) -> np.ndarray:
    """(units + 1,) the smallest leading ranker's win count with sign_test < ALPHA at each n
    (units + 1 where none is, and below `DEFAULT_MIN_QUERIES`, where no winner is named)."""
    critical = np.full(units + 1, units + 1)
    lead = 0
    for n in range(DEFAULT_MIN_QUERIES, units + 1):
        # From one below the last n's lead (the critical lead moves by at most one per unit),
        # so the search costs a few sign tests per n instead of n / 2.
        lead = max(lead - 1, (n + 1) // 2)
        while lead <= n and sign_test(lead, n - lead) >= ALPHA:
            lead += 1
        critical[n] = lead  # n + 1 (never) while no lead is significant
    return critical


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=1000, help="units with a preference at the end (default 1000)")
    parser.add_argument("--runs", type=int, default=4000, help="simulated experiments (default 4000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.units < DEFAULT_MIN_QUERIES or args.runs < 1:
        parser.error(f"--units must be at least {DEFAULT_MIN_QUERIES} and --runs at least 1")

    critical = critical_leads(args.units)
    wins = np.cumsum(np.random.default_rng(args.seed).integers(0, 2, size=(args.runs, args.units)), axis=1)
    n = np.arange(1, args.units + 1)
    significant = np.maximum(wins, n - wins) >= critical[1:]  # (runs, units): the verdict at each n

    once = significant[:, -1].mean()
    looks = {
        "once": significant[:, -1],
        "every 100": significant[:, np.arange(99, args.units, 100)].any(axis=1),
        "every unit": significant[:, DEFAULT_MIN_QUERIES - 1 :].any(axis=1),
    }
    print(f"Equal rankers, {args.units} units with a preference, {args.runs} simulated experiments (seed {args.seed}):")
    print(f"{'read':<11} {'named a winner':>15} {'vs once':>8}")
    for name, named in looks.items():
        rate = named.mean()
        print(f"{name:<11} {rate:>15.3f} {rate / once if once else float('nan'):>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
