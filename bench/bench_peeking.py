"""How often an experiment's verdict names a winner, by how often it is read: fixed-horizon vs always valid.

The report's verdict is the always-valid sign test (`reranker.sequential`: the mSPRT of
Robbins 1970 with a Beta(a, a) mixture, as Johari et al. use it for A/B tests), which may be
read after every unit. The exact sign test it replaced (`reranker.interleaving.sign_test`,
still reported as `fixed_horizon_p_value`) holds its 5% only for one look at a size fixed in
advance. This simulates experiments (each unit with a preference prefers ranker A with
probability theta; no app, no clicks: the question is only what reading does to each test)
and prints, in one run:

1. Equal rankers (theta = 1/2), up to `--units` units: the share of experiments in which each
   test names a winner at some look (false positives):

       once        read once, at the last unit
       every 100   read after every 100 units
       every unit  read after every unit from `min_units` (20) on

2. Unequal rankers (theta = 0.55 and 0.60): the share of experiments in which a winner (the
   right one) is named by n units, at a few n (power): the fixed-horizon test read once at n,
   against the always-valid test read after every unit up to n, with the product's mixture
   (a matched to `min_units` = 20) and with one matched to n (what planning for n buys).

Critical counts of the fixed-horizon test come from the product's own `sign_test`, once per
n; the always-valid p-values from `sequential.log_likelihood_ratio` over whole runs at once.

Run:  python bench/bench_peeking.py                   (about ten seconds)
      python bench/bench_peeking.py --units 5000 --runs 2000
"""

from __future__ import annotations

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import math

import numpy as np

from reranker.experiments import ALPHA
from reranker.interleaving import sign_test
from reranker.sequential import DEFAULT_MIN_UNITS, log_likelihood_ratio, mixing_parameter

SHARES = (0.55, 0.60)
SIZES = (200, 500, 1000, 2000)


def critical_leads(units: int) -> np.ndarray:
    """(units + 1,) the smallest leading ranker's win count with sign_test < ALPHA at each n
    (units + 1 where none is, and below `DEFAULT_MIN_UNITS`, where no winner is named)."""
    critical = np.full(units + 1, units + 1)
    lead = 0
    for n in range(DEFAULT_MIN_UNITS, units + 1):
        # From one below the last n's lead (the critical lead moves by at most one per unit),
        # so the search costs a few sign tests per n instead of n / 2.
        lead = max(lead - 1, (n + 1) // 2)
        while lead <= n and sign_test(lead, n - lead) >= ALPHA:
            lead += 1
        critical[n] = lead  # n + 1 (never) while no lead is significant
    return critical


def simulate(theta: float, runs: int, units: int, seed: int) -> np.ndarray:
    """(runs, units) wins of ranker A after each unit, each unit preferring A with probability theta."""
    return np.cumsum(np.random.default_rng(seed).random((runs, units)) < theta, axis=1)


def always_valid_verdicts(wins: np.ndarray, mixing: float) -> np.ndarray:
    """(runs, units) whether the always-valid verdict is "significant" at each n: the running
    maximum of Lambda_n(1/2) has reached 1/ALPHA (p < ALPHA), from `DEFAULT_MIN_UNITS` on."""
    n = np.arange(1, wins.shape[1] + 1)
    reached = np.maximum.accumulate(log_likelihood_ratio(wins, n - wins, mixing), axis=1) > math.log(1 / ALPHA)
    reached[:, : DEFAULT_MIN_UNITS - 1] = False
    return reached


def false_positives(args: argparse.Namespace, critical: np.ndarray) -> None:
    wins = simulate(0.5, args.runs, args.units, args.seed)
    n = np.arange(1, args.units + 1)
    fixed = np.maximum(wins, n - wins) >= critical[1 : args.units + 1]  # (runs, units): the fixed-horizon verdict at each n
    valid = always_valid_verdicts(wins, mixing_parameter(DEFAULT_MIN_UNITS, ALPHA))
    hundreds = np.arange(99, args.units, 100)
    once = fixed[:, -1].mean()
    print(f"1. Equal rankers, {args.units} units with a preference, {args.runs} simulated experiments (seed {args.seed}),")
    print(f"   share of experiments in which the verdict named a winner at some look (alpha = {ALPHA}):")
    print(f"   {'test':<14} {'read':<11} {'named a winner':>15} {'vs fixed, once':>15}")
    rows = [
        ("fixed-horizon", "once", fixed[:, -1]),
        ("fixed-horizon", "every 100", fixed[:, hundreds].any(axis=1)),
        ("fixed-horizon", "every unit", fixed.any(axis=1)),
        ("always valid", "once", valid[:, -1]),
        ("always valid", "every 100", valid[:, hundreds].any(axis=1)),
        ("always valid", "every unit", valid.any(axis=1)),
    ]
    for test, read, named in rows:
        rate = named.mean()
        print(f"   {test:<14} {read:<11} {rate:>15.3f} {rate / once if once else float('nan'):>14.2f}x")
    standard_error = math.sqrt(ALPHA * (1 - ALPHA) / args.runs)
    print(f"   (one standard error of a {ALPHA:.0%} rate over {args.runs} experiments: {standard_error:.3f})")


def power(args: argparse.Namespace, critical: np.ndarray) -> None:
    sizes = SIZES
    product_mixing = mixing_parameter(DEFAULT_MIN_UNITS, ALPHA)
    print()
    print(f"2. Unequal rankers: share of {args.power_runs} experiments that named the preferred ranker by n units")
    print(f"   (fixed-horizon: read once at n; always valid: read after every unit up to n, a = {product_mixing:.2f}")
    print(f"   matched to min_units = {DEFAULT_MIN_UNITS} as the product does, or a matched to n)")
    print(f"   {'theta':>5} {'n':>5} {'fixed, once':>12} {'always valid':>13} {'vs fixed':>9} {'a for n':>8} {'vs fixed':>9}")
    for index, theta in enumerate(SHARES):
        wins = simulate(theta, args.power_runs, max(sizes), args.seed + 1 + index)
        n = np.arange(1, max(sizes) + 1)
        valid = always_valid_verdicts(wins, product_mixing)
        leads = 2 * wins - n > 0  # A (the preferred ranker) ahead: a verdict for B is a wrong one
        for size in sizes:
            fixed = ((wins[:, size - 1] >= critical[size]) & leads[:, size - 1]).mean()
            # The first crossing decides (a team stops there); it names whoever led then.
            first = valid[:, :size].argmax(axis=1)
            crossed = valid[:, :size].any(axis=1)
            right = (crossed & leads[np.arange(len(first)), first]).mean()
            tuned = always_valid_verdicts(wins[:, :size], mixing_parameter(size, ALPHA))
            first_tuned = tuned.argmax(axis=1)
            right_tuned = (tuned.any(axis=1) & leads[np.arange(len(first_tuned)), first_tuned]).mean()
            print(f"   {theta:>5.2f} {size:>5} {fixed:>12.3f} {right:>13.3f} {right / fixed:>8.2f}x {right_tuned:>8.3f} {right_tuned / fixed:>8.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=1000, help="units with a preference at the end of part 1 (default 1000)")
    parser.add_argument("--runs", type=int, default=4000, help="simulated experiments between equal rankers (default 4000)")
    parser.add_argument("--power-runs", type=int, default=2000, help="simulated experiments per share in part 2 (default 2000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.units < DEFAULT_MIN_UNITS or args.runs < 1 or args.power_runs < 1:
        parser.error(f"--units must be at least {DEFAULT_MIN_UNITS}, --runs and --power-runs at least 1")
    critical = critical_leads(max(args.units, *SIZES))
    false_positives(args, critical)
    power(args, critical)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
