"""Always-valid inference for the sign test: a verdict that stays valid however often it is read.

The experiment report's sign test counts units that preferred ranker A (wins_a) or B (wins_b):
Bernoulli(theta) trials, theta the share that prefer A, H0: theta = 1/2. The exact binomial
test holds its error rate for one look at a number of units fixed in advance; read as the
experiment runs, and stopped at the first "significant", it errs far more often
(`bench/bench_peeking.py`). This module is the mixture sequential probability ratio test
(mSPRT) of Robbins (1970), "Statistical methods related to the law of the iterated
logarithm", Ann. Math. Statist. 41(5), as Johari, Koomen, Pekelis and Walsh use it for A/B
tests ("Peeking at A/B tests", KDD 2017; "Always valid inference", Operations Research 2022):

    Lambda_n(theta0) = integral of theta^S (1 - theta)^F  dBeta(a, a)(theta)  /  theta0^S (1 - theta0)^F
                     = B(a + S, a + F) / B(a, a) / (theta0^S (1 - theta0)^F)

with S = wins_a and F = wins_b after n = S + F units: the Beta(a, a) mixture of the
likelihood ratios of every alternative theta against theta0. Under H0 it is a nonnegative
martingale with mean 1, so by Ville's inequality P(Lambda_k >= 1/alpha for some k) <= alpha:

- the always-valid p-value p_n = min(1, min over k <= n of 1 / Lambda_k(1/2)) can be read after
  every unit, and stopping at the first p_n < alpha is wrong at most alpha of the time;
- the confidence sequence, {theta0 : Lambda_k(theta0) < 1/alpha for every k <= n}, holds theta
  at every n at once with probability 1 - alpha, and leaves out 1/2 exactly when p_n <= alpha.

The mixture's a is chosen, as Johari et al. choose the mixing variance, to match the size
the experiment plans for: `mixing_parameter`, of `DEFAULT_MIN_UNITS` unless an experiment
says otherwise. `sequential_test` reads an ordered history of counts once for everyone who
reports on it (an experiment's report and its timeline). Pure functions over counts (numpy
arrays for sequences); no IO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# An experiment's min_units unless it sets one: the units with a preference before a winner
# is named, and so the size the mixture is tuned for. Here, below the experiment code and the
# store that keeps experiments, so that every layer reads the one number.
DEFAULT_MIN_UNITS = 20
# The significance level of an experiment's verdict, and so the confidence (1 - ALPHA) of
# its band: one number for the report, the timeline and every default below.
ALPHA = 0.05
# a below this puts most of the mixture near theta = 0 or 1 (one ranker preferred by every
# unit), an effect no two rankers of one window have; 1/2 is the Jeffreys prior.
MIN_MIXING = 0.5
_BISECTIONS = 60  # halvings of [0, 1]: 2^-60 is below a double's resolution near 1/2
_ROUNDING_ULPS = 64  # generous: three terms of a few ulps each (`_rounding_error`)

Counts = npt.ArrayLike
Floats = npt.NDArray[np.float64]


def optimal_mixture_ratio(alpha: float) -> float:
    """r > 0 with r = 2 ln(1/alpha) + ln(1 + r): where a normal mixture's boundary is narrowest.

    For a normal mixture with prior variance tau^2 over the mean of trials of variance
    sigma^2, Lambda_n >= 1/alpha when mean^2 >= (sigma^2 / n) (1 + r)/r (2 ln(1/alpha) + ln(1 + r)),
    r = n tau^2 / sigma^2; setting the derivative in r to zero gives this fixed point (the same
    tuning as Howard, Ramdas, McAuliffe and Sekhon, "Time-uniform, nonparametric, nonasymptotic
    confidence sequences", Ann. Statist. 2021, Section 3.5). About 8.2 at alpha = 0.05.
    Raises ValueError for alpha outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    twice_log = 2.0 * math.log(1.0 / alpha)
    ratio = twice_log + 1.0
    for _ in range(100):  # a contraction (slope 1 / (1 + r) < 1): converges in a few steps
        ratio, previous = twice_log + math.log1p(ratio), ratio
        if abs(ratio - previous) < 1e-12:
            break
    return ratio


def mixing_parameter(planned_units: int, alpha: float = ALPHA) -> float:
    """a of the Beta(a, a) mixture whose test is most sensitive after `planned_units` units.

    Beta(a, a) has variance 1 / (4 (2a + 1)) around 1/2; the normal mixture over a trial of
    variance 1/4 is narrowest at n units when tau^2 = r / (4 n) (`optimal_mixture_ratio`);
    equating the two gives a = (n / r - 1) / 2, at least MIN_MIXING. The product plans for
    `min_units` units, the first size at which it names a winner: a smaller a (wider
    mixture) finds large preferences sooner, a larger one small preferences at large sizes;
    away from its size the boundary widens only like sqrt(log n) in the share's scale.
    Raises ValueError for planned_units < 1 or alpha outside (0, 1).
    """
    if planned_units < 1:
        raise ValueError(f"planned_units must be at least 1, got {planned_units}")
    return max(MIN_MIXING, (planned_units / optimal_mixture_ratio(alpha) - 1.0) / 2.0)


def log_likelihood_ratio(wins_a: Counts, wins_b: Counts, mixing: float, theta0: float = 0.5) -> Floats:
    """ln Lambda_n(theta0) = ln B(a + S, a + F) - ln B(a, a) - S ln theta0 - F ln(1 - theta0).

    wins_a (S), wins_b (F): counts, any broadcastable shapes; mixing: a > 0; theta0 in (0, 1).
    Computed with `scipy.special.betaln`, so it neither overflows nor underflows for any n.
    Raises ValueError for negative counts, a <= 0 or theta0 outside (0, 1).
    """
    from scipy.special import betaln  # here: only reports need it, and scipy.special is slow to import

    successes, failures = _counts(wins_a, wins_b)
    if not mixing > 0.0:
        raise ValueError(f"the mixing parameter must be positive, got {mixing}")
    if not 0.0 < theta0 < 1.0:
        raise ValueError(f"theta0 must be between 0 and 1, got {theta0}")
    marginal = betaln(mixing + successes, mixing + failures) - betaln(mixing, mixing)
    return np.asarray(marginal - successes * math.log(theta0) - failures * math.log1p(-theta0), dtype=np.float64)


def always_valid_p_values(wins_a: Counts, wins_b: Counts, mixing: float) -> Floats:
    """p_n = min(1, min over k <= n of 1 / Lambda_k(1/2)), for each n of a sequence of counts.

    wins_a, wins_b: (n,) the counts after each unit (or each event that changed them), in
    the order they happened. Returns (n,) p-values, non-increasing. Raises ValueError as
    `log_likelihood_ratio`, or for sequences of different shapes or not 1-d.
    """
    successes, failures = _sequence(wins_a, wins_b)
    log_ratio = log_likelihood_ratio(successes, failures, mixing)
    # A ratio within rounding of 1 is 1, so p is 1, not 0.9999999999999999: one unit's
    # Lambda is exactly 1 (the symmetric mixture gives either vote 1/2, as H0 does) but
    # comes out 1 + 1e-16 for some a, and the running maximum kept it through later ties.
    log_ratio = np.where(log_ratio > _rounding_error(successes, failures, mixing), log_ratio, 0.0)
    return np.asarray(np.minimum(1.0, np.exp(-np.maximum.accumulate(log_ratio))), dtype=np.float64)


def _rounding_error(successes: Floats, failures: Floats, mixing: float) -> Floats:
    """A bound on the rounding error of `log_likelihood_ratio`: a few ulps of the terms it
    sums (each betaln is good to a few ulps of itself), _ROUNDING_ULPS of their magnitudes.
    Below it a log-ratio cannot be told from 0; it moves a p-value by a factor of at most
    1 + 1e-8 even at a million units, and only p-values that round to 1."""
    from scipy.special import betaln

    magnitude = np.abs(betaln(mixing + successes, mixing + failures)) + abs(float(betaln(mixing, mixing)))
    magnitude += (successes + failures) * math.log(2.0)
    return np.asarray(_ROUNDING_ULPS * np.finfo(np.float64).eps * magnitude, dtype=np.float64)


def confidence_sequence(wins_a: Counts, wins_b: Counts, mixing: float, alpha: float = ALPHA) -> tuple[Floats, Floats]:
    """The always-valid (1 - alpha) confidence sequence for theta, A's share, after each step.

    wins_a, wins_b: (n,) counts after each step, in order. Returns (low, high), each (n,):
    the running intersection over k <= n of {theta0 : Lambda_k(theta0) < 1/alpha}, each an
    interval around S/n (ln Lambda_k is convex in theta0 and below 0 at S/n), its ends found
    by bisection and rounded outwards. (0, 1) before the first count. It holds the true
    theta at every n with probability at least 1 - alpha; with at most that chance
    (evidence against every theta at once) the intersection is empty and low > high.
    Raises ValueError as `always_valid_p_values`, or for alpha outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    successes, failures = _sequence(wins_a, wins_b)
    from scipy.special import betaln

    # theta0 is inside when S ln theta0 + F ln(1 - theta0) > ln B(a+S, a+F) - ln B(a, a) - ln(1/alpha).
    bar = betaln(mixing + successes, mixing + failures) - betaln(mixing, mixing) - math.log(1.0 / alpha)
    trials = successes + failures
    centre = np.divide(successes, trials, out=np.full(trials.shape, 0.5), where=trials > 0)

    def inside(theta: Floats) -> npt.NDArray[np.bool_]:
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 * ln 0 at the ends: 0 wins there
            fit = np.where(successes > 0, successes * np.log(theta), 0.0)
            fit = fit + np.where(failures > 0, failures * np.log1p(-theta), 0.0)
        return np.asarray(fit > bar)

    # Lower end: between 0 (outside unless S = 0) and the centre (inside); upper end likewise.
    low_out, low_in = np.zeros(trials.shape), centre.copy()
    high_in, high_out = centre.copy(), np.ones(trials.shape)
    for _ in range(_BISECTIONS):
        middle = (low_out + low_in) / 2.0
        holds = inside(middle)
        low_in, low_out = np.where(holds, middle, low_in), np.where(holds, low_out, middle)
        middle = (high_in + high_out) / 2.0
        holds = inside(middle)
        high_in, high_out = np.where(holds, middle, high_in), np.where(holds, high_out, middle)
    low = np.where(successes == 0, 0.0, low_out)
    high = np.where(failures == 0, 1.0, high_out)
    return np.maximum.accumulate(low), np.minimum.accumulate(high)


@dataclass(frozen=True)
class SequentialTest:
    """The always-valid sign test read after every step of an ordered history of counts.

    wins_a, wins_b: (n,) the counts after each step, as given; mixing: a of the Beta(a, a)
    mixture; alpha: the significance level; p_values: (n,) `always_valid_p_values`. n is 0
    for an empty history. The confidence sequence (`band`) is computed only when asked: its
    bisections pass over the history 120 times where the p-values pass once, and the
    report does not show it.
    """

    wins_a: Floats
    wins_b: Floats
    mixing: float
    alpha: float
    p_values: Floats

    @property
    def first_significant(self) -> int | None:
        """The first step whose p-value fell below alpha, None if none did (p never rises,
        so after it every step's p-value is below alpha too)."""
        below = self.p_values < self.alpha
        return int(np.argmax(below)) if below.any() else None

    def band(self) -> tuple[Floats, Floats]:
        """(low, high), each (n,): the (1 - alpha) `confidence_sequence` with the same mixture."""
        return confidence_sequence(self.wins_a, self.wins_b, self.mixing, self.alpha)


def sequential_test(history: Sequence[tuple[int, int]], planned_units: int, alpha: float = ALPHA) -> SequentialTest:
    """The always-valid test over `history`: (wins_a, wins_b) after each step, in the order
    the steps happened, with the mixture tuned for `planned_units` (`mixing_parameter`).

    Raises ValueError as `mixing_parameter` and `always_valid_p_values`.
    """
    counts = np.array(history, dtype=np.float64).reshape(-1, 2)
    mixing = mixing_parameter(planned_units, alpha)
    wins_a, wins_b = counts[:, 0], counts[:, 1]
    return SequentialTest(wins_a, wins_b, mixing, alpha, always_valid_p_values(wins_a, wins_b, mixing))


def _counts(wins_a: Counts, wins_b: Counts) -> tuple[Floats, Floats]:
    successes = np.asarray(wins_a, dtype=np.float64)
    failures = np.asarray(wins_b, dtype=np.float64)
    if np.any(successes < 0) or np.any(failures < 0):
        raise ValueError("win counts must be non-negative")
    return successes, failures


def _sequence(wins_a: Counts, wins_b: Counts) -> tuple[Floats, Floats]:
    successes, failures = _counts(wins_a, wins_b)
    if successes.ndim != 1 or successes.shape != failures.shape:
        raise ValueError(f"wins_a and wins_b must be sequences of one length, got shapes {successes.shape} and {failures.shape}")
    return successes, failures
