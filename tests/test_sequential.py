"""The always-valid sign test (reranker.sequential) against its definitions.

The likelihood ratio against numeric integration over theta; the p-value against
min(1, 1 / max Lambda) computed with the standard library's lgamma; the confidence
sequence's ends against the ratio they are defined by; and simulated streams of equal
rankers (seeded) read after every unit: the always-valid verdict crosses alpha rarely, the
fixed-horizon test read the same way often. And the counting of the closed-unit rule that
bench/bench_peeking.py simulates (part 5): a unit counted once, when it closes.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from conftest import load_script
from scipy.integrate import quad
from scipy.stats import beta as beta_distribution
from scipy.stats import binom

from reranker.interleaving import sign_test
from reranker.sequential import (
    MIN_MIXING,
    always_valid_p_values,
    confidence_sequence,
    log_likelihood_ratio,
    mixing_parameter,
    optimal_mixture_ratio,
    sequential_test,
)


def _integrated_ratio(wins_a: int, wins_b: int, mixing: float, theta0: float) -> float:
    """Lambda_n by quadrature: the Beta(a, a)-weighted likelihood over the null's."""
    def density(theta: float) -> float:
        return float(theta**wins_a * (1 - theta) ** wins_b * beta_distribution.pdf(theta, mixing, mixing))

    marginal, _ = quad(density, 0.0, 1.0, epsabs=0.0, epsrel=1e-11, limit=200)
    return marginal / (theta0**wins_a * (1 - theta0) ** wins_b)


@pytest.mark.parametrize("mixing", [0.5, 0.72, 3.0, 20.0])
@pytest.mark.parametrize("theta0", [0.5, 0.3, 0.85])
def test_the_likelihood_ratio_is_the_integral_over_theta(mixing: float, theta0: float) -> None:
    for wins_a, wins_b in [(0, 0), (1, 0), (0, 3), (4, 4), (9, 1), (7, 12), (25, 5)]:
        computed = float(log_likelihood_ratio(wins_a, wins_b, mixing, theta0))
        assert computed == pytest.approx(math.log(_integrated_ratio(wins_a, wins_b, mixing, theta0)), abs=1e-8)


def test_the_likelihood_ratio_is_vectorised_and_stays_finite() -> None:
    wins = np.array([0, 10, 10_000, 1_000_000])
    ratios = log_likelihood_ratio(wins, wins[::-1], 2.0)
    assert ratios.shape == (4,) and np.all(np.isfinite(ratios))
    assert ratios[0] == ratios[3] > 1e5  # a million to none: overwhelming, and symmetric
    for bad in ((-1, 2, 1.0, 0.5), (1, 2, 0.0, 0.5), (1, 2, 1.0, 1.0), (1, 2, 1.0, 0.0)):
        with pytest.raises(ValueError):
            log_likelihood_ratio(*bad)


def _reference_p_values(wins_a: list[int], wins_b: list[int], mixing: float) -> list[float]:
    """min(1, 1 / max over k <= n of Lambda_k(1/2)) with math.lgamma, one step at a time."""
    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    best, out = -math.inf, []
    for s, f in zip(wins_a, wins_b):
        best = max(best, log_beta(mixing + s, mixing + f) - log_beta(mixing, mixing) + (s + f) * math.log(2))
        out.append(min(1.0, math.exp(-best)))
    return out


def test_the_p_value_is_the_running_minimum_of_one_over_lambda() -> None:
    rng = np.random.default_rng(7)
    for theta in (0.5, 0.6, 0.75):
        steps = rng.random(300) < theta
        wins_a = np.cumsum(steps)
        wins_b = np.arange(1, 301) - wins_a
        mixing = mixing_parameter(20)
        p_values = always_valid_p_values(wins_a, wins_b, mixing)
        assert np.all(np.diff(p_values) <= 0), "p never rises as units arrive"
        assert p_values == pytest.approx(_reference_p_values(wins_a.tolist(), wins_b.tolist(), mixing), rel=1e-9, abs=1e-300)
        assert np.all((0 < p_values) & (p_values <= 1))
    assert always_valid_p_values([1, 1], [0, 1], 0.72) == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError):
        always_valid_p_values([1, 2], [0], 1.0)


def test_one_unit_or_a_tie_is_p_exactly_1() -> None:
    # Lambda_1 = B(a + 1, a) / B(a, a) * 2 = 1 for every a: the mixture gives either first vote
    # 1/2, as H0 does. Computed it came out 1 + 1e-16 for about half of these a (min_units 1 to
    # 10 among them), and the report's JSON said p_value 0.9999999999999999, for one unit and
    # for every tie after it (the running maximum kept it).
    mixings = sorted({*(mixing_parameter(units) for units in range(1, 5001)), *np.linspace(MIN_MIXING, 2000.0, 4001)})
    for mixing in mixings:
        assert always_valid_p_values([1], [0], mixing)[0] == 1.0, mixing
        assert list(always_valid_p_values([0, 1, 2, 2], [1, 1, 1, 2], mixing)) == [1.0, 1.0, 1.0, 1.0], mixing
    # What is not 1 stays as it was: the tolerance is rounding, not a floor.
    assert always_valid_p_values(list(range(1, 31)), [0] * 30, 0.5)[-1] < 1e-6


def test_the_mixture_is_matched_to_the_planned_size() -> None:
    ratio = optimal_mixture_ratio(0.05)
    assert ratio == pytest.approx(2 * math.log(20) + math.log1p(ratio), abs=1e-10) and 8.1 < ratio < 8.3
    # The Beta(a, a) variance 1 / (4 (2a + 1)) equals the normal mixture's r / (4 n).
    for planned in (100, 1000, 10_000):
        mixing = mixing_parameter(planned)
        assert 1 / (4 * (2 * mixing + 1)) == pytest.approx(ratio / (4 * planned))
    assert mixing_parameter(1) == mixing_parameter(16) == MIN_MIXING
    assert mixing_parameter(20) < mixing_parameter(200) < mixing_parameter(2000)
    # Tuned to a size, the test needs fewer wins to reject there than a mixture tuned far away.
    def lead_needed(planned: int, n: int) -> int:
        mixing = mixing_parameter(planned)
        return next(k for k in range(n // 2, n + 1) if log_likelihood_ratio(k, n - k, mixing)[()] >= math.log(20))

    assert lead_needed(1000, 1000) < lead_needed(20, 1000)
    assert lead_needed(20, 40) < lead_needed(1000, 40)
    for bad in ((0, 0.05), (10, 0.0), (10, 1.0)):
        with pytest.raises(ValueError):
            mixing_parameter(*bad)


def test_the_confidence_sequence_is_the_set_where_the_ratio_stays_below_one_over_alpha() -> None:
    wins_a = np.array([0, 1, 2, 2, 3, 8, 15, 15, 16, 30])
    wins_b = np.array([0, 0, 0, 1, 1, 2, 5, 9, 9, 10])
    mixing, alpha = mixing_parameter(20), 0.05
    low, high = confidence_sequence(wins_a, wins_b, mixing, alpha)
    assert (low[0], high[0]) == (0.0, 1.0)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) <= 0), "a running intersection"
    # Where a step's own interval is the narrowest so far, its ends are where Lambda = 1/alpha.
    own_low, own_high = zip(*(confidence_sequence([s], [f], mixing, alpha) for s, f in zip(wins_a, wins_b)))
    for step, (s, f) in enumerate(zip(wins_a, wins_b)):
        if s > 0 and low[step] == own_low[step][0]:
            assert float(log_likelihood_ratio(s, f, mixing, low[step])) == pytest.approx(math.log(1 / alpha), abs=1e-6)
        if f > 0 and high[step] == own_high[step][0]:
            assert float(log_likelihood_ratio(s, f, mixing, high[step])) == pytest.approx(math.log(1 / alpha), abs=1e-6)
    # It leaves out 1/2 exactly when the always-valid p-value reaches alpha.
    p_values = always_valid_p_values(wins_a, wins_b, mixing)
    assert list((low > 0.5) | (high < 0.5)) == list(p_values <= alpha)
    assert p_values[-1] < alpha < p_values[-2]
    # One win: every theta0 with 1 / (2 theta0) < 20 (Lambda_1 = B(a+1, a) / B(a, a) / theta0 = 1 / (2 theta0)).
    one_low, one_high = confidence_sequence([1], [0], mixing, alpha)
    assert (one_low[0], one_high[0]) == (pytest.approx(0.025, abs=1e-12), 1.0)


def test_one_reading_of_a_history_gives_the_p_values_band_and_first_crossing() -> None:
    # The report and the timeline both read an experiment's history through sequential_test:
    # its parts are the functions above with the mixture of the planned size.
    wins_a = [0, 1, 2, 2, 3, 8, 15, 15, 16, 30]
    wins_b = [0, 0, 0, 1, 1, 2, 5, 9, 9, 10]
    read = sequential_test(list(zip(wins_a, wins_b)), planned_units=7, alpha=0.05)
    assert read.mixing == mixing_parameter(7, 0.05)
    assert list(read.p_values) == list(always_valid_p_values(wins_a, wins_b, read.mixing))
    low, high = read.band()
    expected_low, expected_high = confidence_sequence(wins_a, wins_b, read.mixing, 0.05)
    assert (list(low), list(high)) == (list(expected_low), list(expected_high))
    assert read.p_values[8] >= 0.05 > read.p_values[9] and read.first_significant == 9
    assert sequential_test(list(zip(wins_a, wins_b)), planned_units=7, alpha=0.01).first_significant is None
    empty = sequential_test([], planned_units=7)
    assert (empty.p_values.shape, empty.first_significant) == ((0,), None)
    with pytest.raises(ValueError, match="planned_units must be at least 1"):
        sequential_test([(1, 0)], planned_units=0)


def _equal_rankers(runs: int, units: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(runs, units) counts of wins for A and B after each unit, each unit a fair coin."""
    wins_a = np.cumsum(np.random.default_rng(seed).integers(0, 2, size=(runs, units)), axis=1)
    return wins_a, np.arange(1, units + 1) - wins_a


def test_equal_rankers_read_after_every_unit_rarely_cross_alpha() -> None:
    runs, units, alpha, start = 400, 500, 0.05, 20
    wins_a, wins_b = _equal_rankers(runs, units, seed=11)
    mixing = mixing_parameter(start)
    crossed = np.array([(always_valid_p_values(a, b, mixing)[start - 1 :] < alpha).any() for a, b in zip(wins_a, wins_b)])
    # Ville: at most alpha; 400 runs put 3 standard errors at 3.3 points.
    assert crossed.mean() <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)
    # The fixed-horizon test on the same streams, read after every unit, crosses far more
    # often. For a fair coin sign_test is 2 P(X <= min(S, F)), capped at 1: vectorised here.
    fixed_p = np.minimum(1.0, 2 * binom.cdf(np.minimum(wins_a, wins_b), wins_a + wins_b, 0.5))
    assert [fixed_p[0, n] for n in (19, 99, 499)] == [pytest.approx(sign_test(int(wins_a[0, n]), int(wins_b[0, n])), rel=1e-9) for n in (19, 99, 499)]
    assert (fixed_p[:, start - 1 :] < alpha).any(axis=1).mean() > 3 * alpha


def test_the_confidence_sequence_holds_the_true_share_throughout() -> None:
    runs, units, alpha = 300, 400, 0.05
    rng = np.random.default_rng(3)
    wins_a = np.cumsum(rng.random((runs, units)) < 0.6, axis=1)
    wins_b = np.arange(1, units + 1) - wins_a
    mixing = mixing_parameter(20)
    missed = 0
    for a, b in zip(wins_a, wins_b):
        low, high = confidence_sequence(a, b, mixing, alpha)
        missed += bool(((low > 0.6) | (high < 0.6)).any())
    assert missed / runs <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


# The closed-unit rule, simulated by bench/bench_peeking.py (part 5) to measure it before the
# product adopts it or not; its figures are only as good as its counting, checked here.
BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def peeking(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports benchlib by its name, as when run
    return load_script(BENCH / "bench_peeking.py")


def test_a_closed_unit_counts_once_by_its_final_sign_and_an_open_one_not_at_all(peeking: ModuleType) -> None:
    """By hand, in sixteenths of the experiment with an idle time of 4 (exact in binary, so the
    boundary case is exact too): unit 0 votes A, then B twice, and is counted once, for B,
    when it closes (the product counted it for A first, then revised it); unit 1 closes on the
    very moment of a search and is counted at it; unit 2 is a tie, counted in all but for
    neither; unit 0's search after its visit is ignored; unit 4 is still open at the reading
    before the last, and the last reading (the experiment's end) counts it."""
    units = np.array([0, 0, 0, 1, 2, 2, 3, 0, 4, 4])
    moments = np.array([0, 1, 2, 3, 4, 5, 7, 10, 12, 13]) / 16
    credits = np.array([1, -1, -1, 1, 1, -1, 1, 1, -1, -1])
    closed_a, closed_b, closed, counted = peeking.closed_counts(units, moments, credits, 4 / 16)
    assert closed_a.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 2, 2]
    assert closed_b.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 2]
    assert closed.tolist() == [0, 0, 0, 0, 0, 0, 2, 3, 4, 5]
    assert counted.tolist() == [True] * 7 + [False, True, True]
    wins_a, *_ = peeking.unit_counts(units, credits)
    assert wins_a[0] == 1 and closed_a[0] == 0, "the product counts unit 0 for A at once; the closed rule waits"
    reference = peeking.closed_reference(units, moments, credits, 4 / 16)
    assert reference.tolist() == np.c_[closed_a, closed_b, closed].tolist()


@pytest.mark.parametrize("sessions", [False, True])
def test_closed_counts_are_never_revised_and_match_the_loop_a_service_would_run(peeking: ModuleType, sessions: bool) -> None:
    """On simulated traffic (heavy-tailed searches per unit, fair-coin credits), with idle
    times from shorter than a session's step to a tenth of the experiment: the vectorised
    counts equal the search-by-search loop, never fall (a closed vote is final), and at the
    end every unit is counted once."""
    rng = np.random.default_rng(7)
    for idle in (1e-4, 1e-3, 1e-2, 1e-1):
        units, moments = peeking.search_times(rng, peeking.searches_per_unit(rng, 200), sessions)
        credits = rng.choice(np.array([-1, 1]), size=units.size)
        closed_a, closed_b, closed, counted = peeking.closed_counts(units, moments, credits, idle)
        assert np.array_equal(np.c_[closed_a, closed_b, closed], peeking.closed_reference(units, moments, credits, idle))
        for counts in (closed_a, closed_b, closed):
            assert np.all(np.diff(counts) >= 0)
        assert np.all(closed_a + closed_b <= closed)
        assert closed[-1] == 200
        assert counted[np.unique(units, return_index=True)[1]].all(), "a unit's first search is always counted"


def test_the_closed_unit_part_runs_and_refuses_a_bad_idle_time() -> None:
    """`--parts 5` on a small run prints the three rules side by side; a non-positive idle
    time is one line of usage error, exit 2, no traceback."""
    script = [sys.executable, str(BENCH / "bench_peeking.py"), "--parts", "5", "--flip-units", "100", "--flip-runs", "5"]
    done = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "5. The closed-unit rule" in done.stdout and "1. Equal rankers" not in done.stdout
    for row in ("1 per unit", "k^-2, spread", "k^-2, sessions", "10 per unit, sessions"):
        assert row in done.stdout
    refused = subprocess.run([*script, "--idle-minutes", "0"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith("--idle-minutes must be positive")
    assert "Traceback" not in refused.stderr
