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

3. Equal rankers, units with several clicked searches each, read after every clicked search
   up to `--flip-units` units: the share of experiments in which the product's verdict named
   a winner, beside the same with one clicked search per unit. A unit's vote is the sign of
   its summed credit, recounted as each search adds to it (`interleaving.UnitVotes`), so a
   unit first counted for A can later be a tie or a vote for B; Ville's inequality is exact
   only for votes that never change. Under H0 each clicked search's credit goes to A or B
   with equal chance, independently of the unit's other searches: the most a unit's vote can
   flip (a user who clicks the same hit of the same list every time never flips it). Clicked
   searches per unit: P(k) proportional to k^-2, k = 1..100 (`searches_per_unit`), in two
   orders: spread (each search at a random moment of the experiment: a unit that comes back
   to its query) and in sessions (a unit's searches back to back from a random moment: paging
   and reloads in one visit); and, as a stress case, ten clicked searches for every unit, in
   sessions. Beside the product's rule, the rate of a rule that counts each unit's first vote
   and never revises it (for which Ville's bound is exact).

4. The power of the two rules when units have several clicked searches (spread, k^-2 as in 3)
   and each search's credit goes to A with probability 0.55: the share of experiments that
   named A by n units.

5. The closed-unit rule, the exact alternative that keeps every search's credit: a unit
   counts only once it is closed (no clicked search for `--idle-minutes`, default 30, of a
   simulated clock on which each experiment runs 14 days; or the experiment's end), by the
   sign of its summed credit, never revised; its searches after that first visit are not
   counted. The rows of part 3 (false winners, with standard errors) and part 4's power in
   both orders, beside the product's rule and the first vote on the same draws; "by n units"
   counts every unit seen, closed or not, so the wait for units to close costs power here
   as it would cost a team. The vectorised counts are checked against a search-by-search
   loop (`closed_reference`) before any figure is printed.

Critical counts of the fixed-horizon test come from the product's own `sign_test`, once per
n; the always-valid p-values from `sequential.log_likelihood_ratio` over whole runs at once.

Run:  python bench/bench_peeking.py                   (about 75 s on 2 cores; it prints its time)
      python bench/bench_peeking.py --parts 5             (part 5 alone: under a minute)
      python bench/bench_peeking.py --units 5000 --runs 2000
"""

from __future__ import annotations

if __name__ == "__main__":
    from benchlib import product_threads

    product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from benchlib import require, table

from reranker.interleaving import UnitVotes, sign_test
from reranker.sequential import ALPHA, DEFAULT_MIN_UNITS, log_likelihood_ratio, mixing_parameter

SHARES = (0.55, 0.60)
SIZES = (200, 500, 1000, 2000)
# Part 3 and 4: the tail of clicked searches per unit, P(k) ~ k^-TAIL for k = 1..MAX_SEARCHES.
# How often one user repeats one query in logs is heavy-tailed, close to a power law; an
# exponent of 2 makes most units one search (61%), some 2-5 (28%) and a few 10 or more (6%).
TAIL = 2.0
MAX_SEARCHES = 100
STRESS_SEARCHES = 10
SEARCH_SHARE = 0.55  # part 4: the chance that one clicked search credits A
FLIP_SIZES = (500, 1000, 2000)
# Part 5's clock: moments 0 to 1 are an experiment of EXPERIMENT_DAYS days, and a unit closes
# after `--idle-minutes` without a clicked search (30: a common web-analytics session timeout).
EXPERIMENT_DAYS = 14
IDLE_MINUTES = 30.0
PARTS = (1, 2, 3, 4, 5)


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


def searches_per_unit(rng: np.random.Generator, units: int) -> np.ndarray:
    """(units,) clicked searches of each unit, P(k) proportional to k^-TAIL for k = 1..MAX_SEARCHES."""
    sizes = np.arange(1, MAX_SEARCHES + 1)
    weights = sizes**-TAIL
    return rng.choice(sizes, size=units, p=weights / weights.sum())


def flip_scenarios(rng: np.random.Generator, units: int) -> list[tuple[str, Callable[[], np.ndarray], bool]]:
    """The rows of parts 3 and 5: (name, a draw of each unit's clicked searches, whether a
    unit's searches come back to back). Draws come from `rng` when called, row by row."""
    return [
        ("1 per unit", lambda: np.ones(units, dtype=np.int64), False),
        (f"k^-{TAIL:g}, spread", lambda: searches_per_unit(rng, units), False),
        (f"k^-{TAIL:g}, sessions", lambda: searches_per_unit(rng, units), True),
        (f"{STRESS_SEARCHES} per unit, sessions", lambda: np.full(units, STRESS_SEARCHES), True),
    ]


def search_order(rng: np.random.Generator, searches: np.ndarray, sessions: bool) -> np.ndarray:
    """(sum(searches),) the unit of each clicked search, in the order they happen (`search_times`)."""
    return search_times(rng, searches, sessions)[0]


def search_times(rng: np.random.Generator, searches: np.ndarray, sessions: bool) -> tuple[np.ndarray, np.ndarray]:
    """(units, moments), each (sum(searches),): each clicked search's unit and moment, in time
    order, the experiment running from moment 0 to about 1.

    Spread: every search at a uniform random moment. Sessions: a unit starts at a uniform
    random moment and its searches follow one another a step apart, a step short against the
    time between two units' starts (1/units), so a session overlaps a few others.
    """
    units = np.repeat(np.arange(searches.size), searches)
    if sessions:
        within = np.arange(units.size) - np.repeat(np.cumsum(searches) - searches, searches)
        moments = rng.random(searches.size)[units] + within * (0.2 / searches.size)
    else:
        moments = rng.random(units.size)
    order = np.argsort(moments, kind="stable")
    return units[order], moments[order]


def unit_counts(units: np.ndarray, credits: np.ndarray) -> tuple[np.ndarray, ...]:
    """Counts after each clicked search, for clicked searches of `units` with `credits` (+1, -1).

    Returns (wins_a, wins_b, first_a, first_b, seen), each (searches,): the units whose summed
    credit is now for A / for B (the product's count, `UnitVotes`), the units whose first
    vote was for A / for B (never revised), and the units seen so far. One pass of numpy:
    each unit's running sum comes from a sort by unit that keeps the order of its searches.
    """
    by_unit = np.argsort(units, kind="stable")
    sorted_units, sorted_credits = units[by_unit], credits[by_unit]
    starts = np.flatnonzero(np.r_[True, sorted_units[1:] != sorted_units[:-1]])
    running = np.cumsum(sorted_credits)
    lengths = np.diff(np.r_[starts, units.size])
    after = running - np.repeat(running[starts] - sorted_credits[starts], lengths)
    before = after - sorted_credits
    first = np.zeros(units.size, dtype=bool)
    first[starts] = True  # credits are +-1, so a unit's first search is its first vote
    steps = np.empty((5, units.size), dtype=np.int64)
    steps[:, by_unit] = [
        (after > 0).astype(np.int64) - (before > 0),
        (after < 0).astype(np.int64) - (before < 0),
        first & (sorted_credits > 0),
        first & (sorted_credits < 0),
        first,
    ]
    return tuple(np.cumsum(steps, axis=1))


def named_winner(wins_a: np.ndarray, wins_b: np.ndarray, mixing: float) -> int | None:
    """The first clicked search after which the product's verdict is "significant" (the
    running maximum of Lambda(1/2) has reached 1/ALPHA and `DEFAULT_MIN_UNITS` units have a
    preference now, as `interleaving.outcome` reads it), None if none is."""
    reached = np.maximum.accumulate(log_likelihood_ratio(wins_a, wins_b, mixing)) > math.log(1 / ALPHA)
    significant = reached & (wins_a + wins_b >= DEFAULT_MIN_UNITS)
    return int(np.argmax(significant)) if significant.any() else None


def check_against_product(rng: np.random.Generator) -> None:
    """The counts of `unit_counts` are `UnitVotes`' after every search, on one experiment."""
    units = search_order(rng, searches_per_unit(rng, 300), sessions=False)
    credits = rng.choice(np.array([-1, 1]), size=units.size)
    votes = UnitVotes()
    product = []
    for unit, preference in zip(units.tolist(), credits.tolist()):
        votes.add(unit, preference)
        product.append((votes.wins_a, votes.wins_b))
    wins_a, wins_b, *_ = unit_counts(units, credits)
    require(np.array_equal(np.c_[wins_a, wins_b], np.array(product)), "unit_counts differs from UnitVotes")


def flips(args: argparse.Namespace) -> None:
    mixing = mixing_parameter(DEFAULT_MIN_UNITS, ALPHA)
    rng = np.random.default_rng(args.seed + 10)
    check_against_product(rng)
    sizes = np.arange(1, MAX_SEARCHES + 1)
    tail = sizes**-TAIL / (sizes**-TAIL).sum()
    print()
    print(f"3. Equal rankers, {args.flip_units} units, read after every clicked search, {args.flip_runs} simulated")
    print(f"   experiments (seed {args.seed + 10}): share in which the verdict named a winner (alpha = {ALPHA}), by how")
    print(f"   many clicked searches each unit has. k^-{TAIL:g} for k = 1..{MAX_SEARCHES}: {tail[0]:.0%} of units 1, "
          f"{tail[1:5].sum():.0%} 2-5, {tail[9:].sum():.0%} 10 or more, mean {tail @ sizes:.1f}.")
    print("   product: the unit's summed credit, recounted as it changes; first vote: never revised.")
    scenarios = flip_scenarios(rng, args.flip_units)
    rows = []
    baseline = None
    for name, draw, sessions in scenarios:
        product = first_vote = flipped = 0
        searches = 0
        for _ in range(args.flip_runs):
            units = search_order(rng, draw(), sessions)
            credits = rng.choice(np.array([-1, 1]), size=units.size)
            wins_a, wins_b, first_a, first_b, _ = unit_counts(units, credits)
            product += named_winner(wins_a, wins_b, mixing) is not None
            first_vote += named_winner(first_a, first_b, mixing) is not None
            # A count that fell: some unit's vote was revised (the product's rule only).
            flipped += bool(np.any(np.diff(wins_a) < 0) or np.any(np.diff(wins_b) < 0))
            searches += units.size
        rate, first_rate = product / args.flip_runs, first_vote / args.flip_runs
        baseline = rate if baseline is None else baseline
        error = math.sqrt(rate * (1 - rate) / args.flip_runs)
        rows.append([
            name, f"{searches / args.flip_runs:.0f}", f"{flipped / args.flip_runs:.2f}", f"{rate:.4f}", f"{error:.4f}",
            f"{(rate - ALPHA) / error:+.1f}" if error else "-", f"{rate / baseline:.2f}x" if baseline else "-", f"{first_rate:.4f}",
        ])
    print(indent(table(["units' searches", "searches", "revised", "product", "s.e.", "(r-0.05)/se", "vs 1 per unit", "first vote"], rows)))
    print("   (searches: clicked searches per experiment; revised: share of experiments in which a unit's")
    print("   vote was taken back; s.e.: the Monte-Carlo standard error of the product's rate)")


def flip_power(args: argparse.Namespace) -> None:
    mixing = mixing_parameter(DEFAULT_MIN_UNITS, ALPHA)
    rng = np.random.default_rng(args.seed + 20)
    horizon = max(FLIP_SIZES)
    product = np.zeros(len(FLIP_SIZES))
    first_vote = np.zeros(len(FLIP_SIZES))
    for _ in range(args.flip_runs):
        units = search_order(rng, searches_per_unit(rng, horizon), sessions=False)
        credits = np.where(rng.random(units.size) < SEARCH_SHARE, 1, -1)
        wins_a, wins_b, first_a, first_b, seen = unit_counts(units, credits)
        for tally, (for_a, for_b) in ((product, (wins_a, wins_b)), (first_vote, (first_a, first_b))):
            crossed = named_winner(for_a, for_b, mixing)
            if crossed is not None and for_a[crossed] > for_b[crossed]:  # named A, the better one
                tally += seen[crossed] <= np.array(FLIP_SIZES)
    print()
    print(f"4. Each clicked search credits A with probability {SEARCH_SHARE} (k^-{TAIL:g} searches per unit, spread):")
    print(f"   share of {args.flip_runs} experiments that named A by n units (seed {args.seed + 20})")
    rows = [
        [f"{size}", f"{old / args.flip_runs:.3f}", f"{new / args.flip_runs:.3f}", f"{new / old if old else float('nan'):.2f}x"]
        for size, old, new in zip(FLIP_SIZES, product, first_vote)
    ]
    print(indent(table(["n", "product", "first vote", "vs product"], rows, label_column=False)))


def closed_counts(units: np.ndarray, moments: np.ndarray, credits: np.ndarray, idle: float) -> tuple[np.ndarray, ...]:
    """Counts under the closed-unit rule, read after each clicked search.

    units, moments, credits: (searches,) each clicked search's unit, moment (in time order)
    and credit (+1, -1); idle: the idle time, in the moments' scale. A unit's visit is its
    searches up to its first gap of `idle` or more; the unit closes `idle` after the visit's
    last search and is then counted once, by the sign of the visit's summed credit, never
    revised. Its searches after the visit are not counted: they share the unit's coins, so
    they are no new trial, and counting them would revise a closed vote. The reading after the
    last search is the experiment's end, where every unit is closed.

    Returns (closed_a, closed_b, closed, counted): the closed units for A, for B and in all
    (ties too) at each reading, each (searches,), and whether each search was counted.
    """
    by_unit = np.argsort(units, kind="stable")
    sorted_units, sorted_moments = units[by_unit], moments[by_unit]
    same = np.r_[False, sorted_units[1:] == sorted_units[:-1]]
    # `>=` against last + idle, as a reading closes a unit (close <= now): a search exactly
    # at the closing moment finds its unit closed, in both.
    late = same & (sorted_moments >= np.r_[-np.inf, sorted_moments[:-1]] + idle)
    starts = np.flatnonzero(~same)
    breaks = np.cumsum(late)  # a unit's searches after its first late one are all past the visit
    in_visit = breaks == np.repeat(breaks[starts], np.diff(np.r_[starts, units.size]))
    sums = np.add.reduceat(np.where(in_visit, credits[by_unit], 0), starts)
    closes = np.maximum.reduceat(np.where(in_visit, sorted_moments, -np.inf), starts) + idle
    counts = []
    for voters in (sums > 0, sums < 0, np.ones(starts.size, dtype=bool)):
        closed = np.searchsorted(np.sort(closes[voters]), moments, side="right")
        closed[-1] = voters.sum()  # the experiment's end closes every unit
        counts.append(closed)
    counted = np.empty(units.size, dtype=bool)
    counted[by_unit] = in_visit
    return (*counts, counted)


def closed_reference(units: np.ndarray, moments: np.ndarray, credits: np.ndarray, idle: float) -> np.ndarray:
    """(searches, 3) `closed_counts`' closed_a, closed_b and closed, search by search, as a
    service would keep them: before each search, close the units idle since `idle`; a
    search of a closed unit is ignored. Slow (each search looks at every open unit)."""
    sums: dict[int, int] = {}
    last: dict[int, float] = {}
    closed_a = closed_b = closed = 0
    rows = []
    for unit, moment, credit in zip(units.tolist(), moments.tolist(), credits.tolist()):
        for other in [other for other, seen in last.items() if seen + idle <= moment]:
            del last[other]
            closed_a, closed_b, closed = closed_a + (sums[other] > 0), closed_b + (sums[other] < 0), closed + 1
        if unit not in sums or unit in last:  # new, or still open
            sums[unit] = sums.get(unit, 0) + credit
            last[unit] = moment
        rows.append([closed_a, closed_b, closed])
    for other in last:  # the end
        rows[-1][0] += sums[other] > 0
        rows[-1][1] += sums[other] < 0
        rows[-1][2] += 1
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def check_closed(rng: np.random.Generator, idle: float) -> None:
    """`closed_counts` is `closed_reference` on one experiment of each order, with `idle` and
    ten times it (so that both visits cut short and visits of many searches occur)."""
    for sessions, wait in ((False, idle), (False, 10 * idle), (True, idle), (True, 10 * idle)):
        units, moments = search_times(rng, searches_per_unit(rng, 300), sessions)
        credits = rng.choice(np.array([-1, 1]), size=units.size)
        closed_a, closed_b, closed, _ = closed_counts(units, moments, credits, wait)
        reference = closed_reference(units, moments, credits, wait)
        require(np.array_equal(np.c_[closed_a, closed_b, closed], reference), "closed_counts differs from closed_reference")


def closed_units(args: argparse.Namespace) -> None:
    mixing = mixing_parameter(DEFAULT_MIN_UNITS, ALPHA)
    rng = np.random.default_rng(args.seed + 30)
    idle = args.idle_minutes / (EXPERIMENT_DAYS * 24 * 60)
    check_closed(rng, idle)
    step = 0.2 / args.flip_units * EXPERIMENT_DAYS * 24 * 60
    print()
    print("5. The closed-unit rule: a unit counts once it is closed, by the sign of its summed credit, never revised.")
    print(f"   A simulated clock: each experiment runs {EXPERIMENT_DAYS} days ({args.flip_units} units, so a session's searches")
    print(f"   come {step:.1f} min apart); a unit closes {args.idle_minutes:g} min after its visit's last search (a visit ends at")
    print(f"   a gap of {args.idle_minutes:g} min; the unit's later searches are not counted) or at the experiment's end.")
    print(f"   Equal rankers, read after every clicked search, {args.flip_runs} experiments per row (seed {args.seed + 30}):")
    print("   share in which the verdict named a winner (alpha = 0.05), the three rules on the same draws.")
    scenarios = flip_scenarios(rng, args.flip_units)
    rows = []
    for name, draw, sessions in scenarios:
        named = np.zeros(3)
        counted = 0.0
        for _ in range(args.flip_runs):
            units, moments = search_times(rng, draw(), sessions)
            credits = rng.choice(np.array([-1, 1]), size=units.size)
            wins_a, wins_b, first_a, first_b, _ = unit_counts(units, credits)
            closed_a, closed_b, _, kept = closed_counts(units, moments, credits, idle)
            for rule, (for_a, for_b) in enumerate(((wins_a, wins_b), (first_a, first_b), (closed_a, closed_b))):
                named[rule] += named_winner(for_a, for_b, mixing) is not None
            counted += kept.mean()
        rates = named / args.flip_runs
        errors = np.sqrt(rates * (1 - rates) / args.flip_runs)
        closed_error = errors[2]
        rows.append([
            name, *(f"{rate:.4f} ± {error:.4f}" for rate, error in zip(rates, errors)),
            f"{(rates[2] - ALPHA) / closed_error:+.1f}" if closed_error else "-", f"{counted / args.flip_runs:.2f}",
        ])
    print(indent(table(["units' searches", "product", "first vote", "closed", "closed (r-0.05)/se", "searches counted"], rows)))
    print("   (± one Monte-Carlo standard error; searches counted: the share of clicked searches in their")
    print("   unit's first visit, the ones the closed rule counts; the product counts all, first vote one per unit)")
    closed_power(args, rng, idle, mixing)


def closed_power(args: argparse.Namespace, rng: np.random.Generator, idle: float, mixing: float) -> None:
    horizon = max(FLIP_SIZES)
    sizes = np.array(FLIP_SIZES)
    rows = []
    for sessions in (False, True):
        named = np.zeros((3, len(FLIP_SIZES)))
        open_at = np.zeros(len(FLIP_SIZES))
        for _ in range(args.flip_runs):
            units, moments = search_times(rng, searches_per_unit(rng, horizon), sessions)
            credits = np.where(rng.random(units.size) < SEARCH_SHARE, 1, -1)
            wins_a, wins_b, first_a, first_b, seen = unit_counts(units, credits)
            closed_a, closed_b, closed, _ = closed_counts(units, moments, credits, idle)
            for rule, (for_a, for_b) in enumerate(((wins_a, wins_b), (first_a, first_b), (closed_a, closed_b))):
                crossed = named_winner(for_a, for_b, mixing)
                if crossed is not None and for_a[crossed] > for_b[crossed]:  # named A, the better one
                    named[rule] += seen[crossed] <= sizes
            # At the search that brought the n-th unit: units seen, not yet closed.
            arrivals = np.searchsorted(seen, sizes)
            open_at += seen[arrivals] - closed[arrivals]
        shares = named / args.flip_runs
        for index, size in enumerate(FLIP_SIZES):
            product, first_vote, closed_share = shares[:, index]
            rows.append([
                "sessions" if sessions else "spread", f"{size}", f"{product:.3f}", f"{first_vote:.3f}", f"{closed_share:.3f}",
                f"{first_vote / product:.2f}x" if product else "-", f"{closed_share / product:.2f}x" if product else "-",
                f"{open_at[index] / args.flip_runs:.1f}",
            ])
    print()
    print(f"   Each clicked search credits A with probability {SEARCH_SHARE} (k^-{TAIL:g} searches per unit): share of")
    print(f"   {args.flip_runs} experiments per order that named A by n units, n counting every unit seen (its first")
    print("   search), closed or not, for all three rules: the same traffic, so the closed rule's wait shows as lost power")
    print(indent(table(
        ["order", "n", "product", "first vote", "closed", "first vs product", "closed vs product", "open at n"], rows,
    )))
    print("   (open at n: units seen but not yet closed when the n-th unit arrives, the mean over experiments)")


def indent(text: str) -> str:
    return "\n".join("   " + line for line in text.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=1000, help="units with a preference at the end of part 1 (default 1000)")
    parser.add_argument("--runs", type=int, default=4000, help="simulated experiments between equal rankers (default 4000)")
    parser.add_argument("--power-runs", type=int, default=2000, help="simulated experiments per share in part 2 (default 2000)")
    parser.add_argument("--flip-units", type=int, default=2000, help="units per experiment in part 3 (default 2000)")
    parser.add_argument("--flip-runs", type=int, default=2000, help="simulated experiments per row of parts 3 and 4 (default 2000)")
    parser.add_argument("--idle-minutes", type=float, default=IDLE_MINUTES,
                        help=f"part 5: a unit closes after this long without a clicked search (default {IDLE_MINUTES:g})")
    parser.add_argument("--parts", type=int, nargs="+", choices=PARTS, default=list(PARTS),
                        help="the parts to run (default all; each has its own seed, so its figures do not depend on the others)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.units < DEFAULT_MIN_UNITS or args.flip_units < DEFAULT_MIN_UNITS:
        parser.error(f"--units and --flip-units must be at least {DEFAULT_MIN_UNITS}")
    if args.runs < 1 or args.power_runs < 1 or args.flip_runs < 1:
        parser.error("--runs, --power-runs and --flip-runs must be at least 1")
    if not args.idle_minutes > 0:
        parser.error("--idle-minutes must be positive")
    started = time.perf_counter()
    if 1 in args.parts or 2 in args.parts:
        critical = critical_leads(max(args.units, *SIZES))
    if 1 in args.parts:
        false_positives(args, critical)
    if 2 in args.parts:
        power(args, critical)
    if 3 in args.parts:
        flips(args)
    if 4 in args.parts:
        flip_power(args)
    if 5 in args.parts:
        closed_units(args)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
