"""Interleaving: list invariants, hand-worked credit, the sign test, and a click simulation.

The simulation is the issue's acceptance test: a ranker known to be better (less noise
around the hidden relevance) must be reported as the significant winner from synthetic
position-biased clicks, on either side of the experiment and with either method, while
rankers that are equally good rarely produce a significant winner.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reranker.interleaving import (
    METHODS,
    TEAM_A,
    TEAM_B,
    Interleaving,
    Outcome,
    balanced,
    credit,
    interleave,
    outcome,
    seeded_rng,
    sign_test,
    team_draft,
)
from reranker.sequential import DEFAULT_MIN_UNITS, always_valid_p_values, mixing_parameter

seeds = st.integers(min_value=0, max_value=2**64) | st.text(max_size=10)


@st.composite
def same_candidates(draw: st.DrawFn) -> tuple[list[str], list[str], int]:
    """Two permutations of one candidate set (the experiment's case) and a length."""
    ids = [f"d{i}" for i in range(draw(st.integers(0, 12)))]
    a = draw(st.permutations(ids))
    b = draw(st.permutations(ids))
    return list(a), list(b), draw(st.integers(0, len(ids) + 2))


@st.composite
def any_rankings(draw: st.DrawFn) -> tuple[list[str], list[str], int]:
    """Two rankings with different members and lengths (robustness)."""
    pool = [f"d{i}" for i in range(15)]
    a = draw(st.lists(st.sampled_from(pool), unique=True, max_size=12))
    b = draw(st.lists(st.sampled_from(pool), unique=True, max_size=12))
    return a, b, draw(st.integers(0, 20))


def first_unshown(ranking: Sequence[str], shown: Sequence[str]) -> str | None:
    return next((doc_id for doc_id in ranking if doc_id not in shown), None)


# --- team-draft -------------------------------------------------------------------------


@given(same_candidates(), seeds)
def test_team_draft_invariants(rankings: tuple[list[str], list[str], int], seed: int | str) -> None:
    a, b, length = rankings
    result = interleave("team_draft", a, b, length, seed)
    assert result.method == "team_draft"
    assert len(result.ids) == len(set(result.ids)) == min(length, len(a))
    assert len(result.teams) == len(result.ids)
    for position, (doc_id, team) in enumerate(zip(result.ids, result.teams)):
        # Each pick is its ranker's best id not yet shown.
        ranking = a if team == TEAM_A else b
        assert doc_id == first_unshown(ranking, result.ids[:position])
        # Team sizes never differ by more than one.
        prefix = result.teams[: position + 1]
        assert abs(prefix.count(TEAM_A) - prefix.count(TEAM_B)) <= 1
    assert interleave("team_draft", a, b, length, seed) == result


@given(any_rankings(), seeds)
def test_team_draft_with_different_members(
    rankings: tuple[list[str], list[str], int], seed: int | str
) -> None:
    a, b, length = rankings
    result = interleave("team_draft", a, b, length, seed)
    assert len(result.ids) == len(set(result.ids)) == min(length, len(set(a) | set(b)))
    for position, (doc_id, team) in enumerate(zip(result.ids, result.teams)):
        ranking = a if team == TEAM_A else b
        assert doc_id == first_unshown(ranking, result.ids[:position])
        # A team picks out of turn only when the other ranker has nothing new left.
        before = result.teams[:position]
        if before.count(team) > before.count(TEAM_B if team == TEAM_A else TEAM_A):
            other = b if team == TEAM_A else a
            assert first_unshown(other, result.ids[:position]) is None
    assert credit(result, result.ids) in (-1, 0, 1)


def test_team_draft_first_pick_is_a_fair_coin() -> None:
    a, b = ["x", "y", "z"], ["z", "y", "x"]
    for make_seed in (lambda i: i, lambda i: f"query-{i}"):
        firsts = [interleave("team_draft", a, b, 3, make_seed(i)).teams[0] for i in range(2000)]
        first_a = firsts.count(TEAM_A)
        assert 900 < first_a < 1100  # about 4.5 standard deviations either side of 1000


def test_team_draft_with_identical_rankings_shows_that_ranking() -> None:
    ranking = [f"d{i}" for i in range(10)]
    for seed in range(50):
        result = interleave("team_draft", ranking, ranking, 7, seed)
        assert result.ids == tuple(ranking[:7])
        # Each consecutive pair of picks is one A and one B.
        assert all(set(result.teams[i : i + 2]) == {TEAM_A, TEAM_B} for i in range(0, 6, 2))


def test_team_draft_identical_rankings_have_no_systematic_preference() -> None:
    ranking = [f"d{i}" for i in range(10)]
    for clicked in (["d0"], ["d2"], ["d1", "d4"], ["d0", "d3", "d5"]):
        credits = [
            credit(interleave("team_draft", ranking, ranking, 10, seed), clicked)
            for seed in range(1000)
        ]
        wins_a, wins_b = credits.count(1), credits.count(-1)
        assert wins_a + wins_b > 300
        assert sign_test(wins_a, wins_b) > 0.001, (clicked, wins_a, wins_b)


# --- balanced ---------------------------------------------------------------------------

HAND_A = ["d1", "d2", "d3", "d4"]
HAND_B = ["d2", "d5", "d1", "d6"]
# Worked by hand from Joachims' combine(): ranks are read A, B, A, B ... (or B, A, ...),
# an id already shown is skipped but uses up its ranker's turn.
#   A first: A1=d1, B1=d2, A2=d2 (skip), B2=d5, A3=d3, B3=d1 (skip), A4=d4, B4=d6
#   B first: B1=d2, A1=d1, B2=d5, A2=d2 (skip), B3=d1 (skip), A3=d3, B4=d6, A4=d4
HAND_A_FIRST = (("d1", "d2", "d5", "d3", "d4", "d6"), ("A", "B", "B", "A", "A", "B"))
HAND_B_FIRST = (("d2", "d1", "d5", "d3", "d6", "d4"), ("B", "A", "B", "A", "B", "A"))


def test_balanced_hand_example_for_both_coins() -> None:
    outcomes_seen = set()
    for seed in range(64):
        result = interleave("balanced", HAND_A, HAND_B, 10, seed)
        expected = HAND_A_FIRST if result.teams[0] == TEAM_A else HAND_B_FIRST
        assert (result.ids, result.teams) == expected
        outcomes_seen.add(result.teams[0])
        # Truncated to length 3 the list is the same prefix.
        short = interleave("balanced", HAND_A, HAND_B, 3, seed)
        assert short.ids == expected[0][:3]
    assert outcomes_seen == {TEAM_A, TEAM_B}


@given(same_candidates(), seeds)
def test_balanced_prefixes_are_balanced_unions(
    rankings: tuple[list[str], list[str], int], seed: int | str
) -> None:
    """Joachims: every top m of the list is top k_a of A plus top k_b of B, |k_a - k_b| <= 1."""
    a, b, length = rankings
    result = interleave("balanced", a, b, length, seed)
    assert len(result.ids) == len(set(result.ids)) == min(length, len(a))
    for m in range(1, len(result.ids) + 1):
        prefix = set(result.ids[:m])
        assert any(
            prefix == set(a[:k_a]) | set(b[:k_b])
            for k_a in range(len(a) + 1)
            for k_b in (k_a - 1, k_a, k_a + 1)
            if 0 <= k_b <= len(b)
        ), (a, b, result.ids[:m])
    assert interleave("balanced", a, b, length, seed) == result


@given(any_rankings(), seeds)
def test_balanced_with_different_members(
    rankings: tuple[list[str], list[str], int], seed: int | str
) -> None:
    a, b, length = rankings
    result = interleave("balanced", a, b, length, seed)
    assert len(result.ids) == len(set(result.ids)) == min(length, len(set(a) | set(b)))
    assert set(result.ids) <= set(a) | set(b)
    assert credit(result, result.ids[-1:]) in (-1, 0, 1)


@given(same_candidates(), seeds, st.data())
def test_balanced_identical_rankings_always_tie(
    rankings: tuple[list[str], list[str], int], seed: int | str, data: st.DataObject
) -> None:
    a, _, length = rankings
    result = interleave("balanced", a, a, length, seed)
    assert result.ids == tuple(a[:length])
    clicked = data.draw(st.lists(st.sampled_from(a), unique=True) if a else st.just([]))
    assert credit(result, clicked) == 0


# --- credit -----------------------------------------------------------------------------


def test_team_draft_credit_by_hand() -> None:
    shown = Interleaving(
        method="team_draft",
        ids=("d1", "d2", "d3", "d4"),
        teams=("A", "B", "B", "A"),
        a=("d1", "d4", "d2", "d3"),
        b=("d2", "d3", "d1", "d4"),
    )
    assert credit(shown, {"d1"}) == 1
    assert credit(shown, ["d2", "d3"]) == -1
    assert credit(shown, ["d1", "d2"]) == 0
    assert credit(shown, ["d1", "d2", "d4"]) == 1
    assert credit(shown, ["d2", "d2", "d2", "d1"]) == 0  # repeats count once
    assert credit(shown, ["d9", "d2"]) == -1  # ids not shown are ignored
    assert credit(shown, ["d9"]) == 0
    assert credit(shown, []) == 0


def test_balanced_credit_by_hand() -> None:
    # The A-first list of the hand example: d1 d2 d5 d3 d4 d6.
    shown = Interleaving("balanced", HAND_A_FIRST[0], HAND_A_FIRST[1], tuple(HAND_A), tuple(HAND_B))
    # Lowest click d5: rank in B is 2, not in A -> k = 2; A's top 2 {d1, d2} has 0 clicks,
    # B's top 2 {d2, d5} has 1.
    assert credit(shown, ["d5"]) == -1
    # Lowest click d3: rank 3 in A -> k = 3; A top 3 {d1,d2,d3}: 2, B top 3 {d2,d5,d1}: 1.
    assert credit(shown, ["d1", "d3"]) == 1
    # Lowest click d2: min(rank 2 in A, rank 1 in B) = 1; A top 1 {d1}: 0, B top 1 {d2}: 1.
    assert credit(shown, ["d2"]) == -1
    # Clicks d1 and d2, lowest d2 -> k = 1: one click in each top 1.
    assert credit(shown, ["d1", "d2"]) == 0
    # Lowest click d6: rank 4 in B -> k = 4; A top 4 holds d1, d4; B top 4 holds d1, d6.
    assert credit(shown, ["d1", "d4", "d6"]) == 0
    assert credit(shown, ["d4", "d6"]) == 0
    assert credit(shown, ["d4"]) == 1
    assert credit(shown, []) == 0


def test_balanced_credit_reads_past_the_shorter_ranking_read() -> None:
    # Length 3, A first: A1=p, B1=r, A2=q -> read 2 ranks of A, 1 of B. A click on q:
    # k = min(2 in A, 2 in B) = 2 and q is in both top 2s, a tie. Cutting b to the one
    # rank read would wrongly hand the query to A.
    for seed in range(64):
        shown = interleave("balanced", ["p", "q", "s"], ["r", "q", "t"], 3, seed)
        if shown.teams[0] == TEAM_A:
            assert shown.ids == ("p", "r", "q")
            assert (shown.a, shown.b) == (("p", "q"), ("r", "q"))
            assert credit(shown, ["q"]) == 0
            break
    else:  # pragma: no cover - 64 fair coins all landing B
        pytest.fail("no seed put A first")


def test_credit_rejects_a_single_string() -> None:
    shown = interleave("team_draft", ["a", "b"], ["b", "a"], 2, 0)
    with pytest.raises(TypeError):
        credit(shown, "a")


# --- seeds, validation ------------------------------------------------------------------


def test_string_seeds_do_not_depend_on_the_process_hash_salt() -> None:
    code = (
        "from reranker.interleaving import interleave;"
        "r = interleave('team_draft', list('abcdefghij'), list('jihgfedcba'), 10, 'q-42');"
        "print(''.join(r.teams))"
    )
    runs = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        completed = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        runs.add(completed.stdout.strip())
    here = interleave("team_draft", list("abcdefghij"), list("jihgfedcba"), 10, "q-42")
    assert runs == {"".join(here.teams)}


def test_seeded_rng_and_direct_calls_agree() -> None:
    for seed in (0, 7, "abc"):
        for method, function in (("team_draft", team_draft), ("balanced", balanced)):
            assert interleave(method, list("abcd"), list("dcba"), 4, seed) == function(
                list("abcd"), list("dcba"), 4, seeded_rng(seed)
            )


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="team_draft, balanced"):
        interleave("probabilistic", ["a"], ["a"], 1, 0)
    with pytest.raises(ValueError, match="non-negative"):
        interleave("team_draft", ["a"], ["a"], -1, 0)
    assert interleave("balanced", ["a"], ["a"], 0, 0).ids == ()
    assert interleave("team_draft", [], [], 5, 0).ids == ()
    with pytest.raises(TypeError):
        interleave("team_draft", "abc", ["a"], 2, 0)
    with pytest.raises(TypeError):
        seeded_rng(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Interleaving("team_draft", ("a",), (), ("a",), ("a",))
    with pytest.raises(ValueError):
        Interleaving("team_draft", ("a",), ("C",), ("a",), ("a",))
    with pytest.raises(ValueError):
        Interleaving("optimized", (), (), (), ())
    with pytest.raises(ValueError, match="repeats"):
        Interleaving("team_draft", ("a", "a"), ("A", "B"), ("a",), ("a",))
    with pytest.raises(ValueError, match="not in ranking B"):
        Interleaving("balanced", ("a", "b"), ("A", "B"), ("a", "b"), ("a",))
    # Lists (say, read back from JSON) become tuples, so equality still holds.
    built = Interleaving("balanced", ["a"], ["A"], ["a"], ["a"])  # type: ignore[arg-type]
    assert built == Interleaving("balanced", ("a",), ("A",), ("a",), ("a",))
    assert set(METHODS) == {"team_draft", "balanced"}


# --- sign test --------------------------------------------------------------------------


def exact_two_sided(wins_a: int, wins_b: int) -> float:
    n, k = wins_a + wins_b, min(wins_a, wins_b)
    return float(min(Fraction(1), Fraction(2 * sum(math.comb(n, i) for i in range(k + 1)), 2**n)))


def test_sign_test_known_values() -> None:
    assert sign_test(9, 1) == 0.021484375  # 2 * (1 + 10) / 1024
    assert sign_test(1, 9) == 0.021484375
    assert sign_test(10, 0) == 2 / 1024
    assert sign_test(5, 5) == 1.0
    assert sign_test(6, 5) == 1.0
    assert sign_test(0, 0) == 1.0
    assert sign_test(1, 0) == 1.0
    assert sign_test(34, 16) == pytest.approx(0.01535, abs=1e-5)
    with pytest.raises(ValueError):
        sign_test(-1, 3)


@given(st.integers(0, 300), st.integers(0, 300))
def test_sign_test_is_symmetric_and_exact(wins_a: int, wins_b: int) -> None:
    p_value = sign_test(wins_a, wins_b)
    assert p_value == sign_test(wins_b, wins_a)
    # scipy's binomtest, against the sum in exact rationals (rounding error only).
    assert p_value == pytest.approx(exact_two_sided(wins_a, wins_b), rel=1e-9)
    assert 0.0 < p_value <= 1.0


def test_sign_test_large_n_agrees_with_the_exact_sum() -> None:
    # Thousands of queries, against exact rationals.
    for wins_a, wins_b in ((1100, 1000), (1050, 1010), (1200, 901), (2000, 100), (1500, 1501)):
        assert sign_test(wins_a, wins_b) == pytest.approx(exact_two_sided(wins_a, wins_b), rel=1e-9)


def test_sign_test_very_large_n() -> None:
    tiny = sign_test(600_000, 400_000)
    assert math.isfinite(tiny) and 0.0 <= tiny < 1e-100
    assert sign_test(400_000, 600_000) == tiny
    # z = 1 (with continuity correction 0.999): normal approximation 2 * Phi(-0.999) = 0.3178.
    near = sign_test(500_500, 499_500)
    assert near == pytest.approx(0.3178, abs=5e-4)
    assert sign_test(499_500, 500_500) == near
    assert sign_test(500_000, 500_000) == 1.0
    assert sign_test(1_000_000, 0) == 0.0  # 2 / 2**1e6 underflows, no exception
    assert sign_test(501_000, 499_000) < sign_test(500_500, 499_500)


# --- outcome ----------------------------------------------------------------------------

DEFAULT_MIXING = mixing_parameter(DEFAULT_MIN_UNITS, 0.05)  # the mixture of the default min_units
HAND_SHOWN = Interleaving(
    "team_draft", ("d1", "d2", "d3", "d4"), ("A", "B", "B", "A"), ("d1", "d4"), ("d2", "d3")
)


def test_outcome_counts_and_not_enough_data() -> None:
    results = [
        (HAND_SHOWN, ["d1"]),  # A
        (HAND_SHOWN, ["d1", "d4", "d1"]),  # A, 2 clicks
        (HAND_SHOWN, ["d2"]),  # B
        (HAND_SHOWN, ["d1", "d2"]),  # tie
        (HAND_SHOWN, []),  # no clicks
        (HAND_SHOWN, ["elsewhere"]),  # a click on an id not shown: no clicks
    ]
    result = outcome(results)
    assert result == Outcome(
        queries=6,
        queries_with_clicks=4,
        clicks=6,
        units_with_clicks=4,
        wins_a=2,
        wins_b=1,
        ties=1,
        # Largest after A, A: Lambda = B(a + 2, a) / B(a, a) * 2^2 = 2 (a + 1) / (2a + 1).
        p_value=pytest.approx((2 * DEFAULT_MIXING + 1) / (2 * (DEFAULT_MIXING + 1)), rel=1e-12),
        fixed_horizon_p_value=1.0,
        mixing=DEFAULT_MIXING,
        winner=None,
        verdict="not_enough_data",
        message="not enough data yet: 3 of the 20 queries with a preference needed",
    )


def test_outcome_without_clicks() -> None:
    result = outcome([(HAND_SHOWN, [])] * 5)
    assert (result.queries, result.queries_with_clicks, result.p_value) == (5, 0, None)
    assert result.verdict == "not_enough_data" and result.winner is None
    assert outcome([]).queries == 0


A_WINS, B_WINS, TIE = (HAND_SHOWN, ["d1"]), (HAND_SHOWN, ["d2"]), (HAND_SHOWN, ["d1", "d2"])


def _mixed(wins_a: int, wins_b: int) -> list[tuple[Interleaving, list[str]]]:
    """wins_a and wins_b results spread evenly through one stream (no run of either)."""
    keys = sorted([(i / wins_a, 0) for i in range(wins_a)] + [(i / wins_b, 1) for i in range(wins_b)])
    return [B_WINS if side else A_WINS for _, side in keys]


def test_outcome_significant_and_not() -> None:
    # 70 to 30, spread through the stream: the fixed-horizon test's p = 0.00008 for one
    # planned look; the always-valid p, safe at every look, is larger (0.003).
    results = _mixed(70, 30) + [TIE] * 7
    result = outcome(results, labels=("bm25", "hidden_topics"))
    assert (result.wins_a, result.wins_b, result.ties) == (70, 30, 7)
    assert result.fixed_horizon_p_value == sign_test(70, 30)
    assert result.p_value is not None and result.fixed_horizon_p_value < result.p_value < 0.05
    assert (result.verdict, result.winner) == ("significant", TEAM_A)
    assert result.message == f"bm25 preferred on 70 of 100 queries with a preference (always-valid p = {result.p_value:.2g})"

    flipped = outcome([(HAND_SHOWN, [ids[0].replace("1", "x").replace("2", "1").replace("x", "2")]) for _, ids in _mixed(70, 30)])
    assert (flipped.wins_a, flipped.wins_b, flipped.verdict, flipped.winner) == (30, 70, "significant", TEAM_B)

    # 34 to 16 over 50 is significant for one planned look (p = 0.015), but not at every look
    # (always-valid p = 0.26): the price of being free to look.
    close = outcome(_mixed(34, 16))
    assert close.fixed_horizon_p_value == pytest.approx(0.01535, abs=1e-5)
    assert (close.verdict, close.winner) == ("no_significant_difference", None)
    assert close.message.startswith("no significant difference: A preferred on 34 of 50")

    even = outcome(_mixed(10, 10))
    assert even.message == (
        "no significant difference: A and B each preferred on 10 of 20 queries with a "
        "preference (always-valid p = 1)"
    )
    # A lopsided but small sample: significant p, still not enough data, so no winner.
    small = outcome([A_WINS] * 10)
    assert small.p_value is not None and small.p_value < 0.05
    assert (small.verdict, small.winner) == ("not_enough_data", None)
    assert outcome([A_WINS] * 10, min_units=10).winner == TEAM_A


def test_outcome_reads_the_results_in_the_order_they_came() -> None:
    # The same final counts: a run of 26 wins for A first is evidence that a later run of
    # 24 for B does not erase (the p-value is the smallest so far); spread evenly, 26 to
    # 24 is nothing. The fixed-horizon test sees only the final counts.
    run_first = outcome([A_WINS] * 26 + [B_WINS] * 24)
    spread = outcome(_mixed(26, 24))
    assert (run_first.wins_a, run_first.wins_b) == (spread.wins_a, spread.wins_b) == (26, 24)
    assert run_first.fixed_horizon_p_value == spread.fixed_horizon_p_value == sign_test(26, 24)
    assert run_first.p_value is not None and run_first.p_value < 0.05 and run_first.verdict == "significant"
    assert spread.p_value == 1.0 and spread.verdict == "no_significant_difference"
    history_a = np.cumsum([1] * 26 + [0] * 24)
    expected = always_valid_p_values(history_a, np.arange(1, 51) - history_a, DEFAULT_MIXING)[-1]
    assert run_first.p_value == pytest.approx(expected, rel=1e-12)


def test_the_winner_is_the_side_the_evidence_was_on_when_it_sufficed() -> None:
    """The always-valid p-value is the smallest so far; its direction is the one the counts
    had when it first fell below alpha. A preference that turns afterwards (15 units for A,
    then 40 for B: the confidence sequence empties) once named B, the leader at the end,
    on evidence that was A's; now A, with a message that says the preference changed."""
    turned = outcome([A_WINS] * 15 + [B_WINS] * 40, labels=("bm25", "hidden_topics"))
    assert (turned.wins_a, turned.wins_b, turned.verdict, turned.winner) == (15, 40, "significant", TEAM_A)
    history_a = np.minimum(np.arange(1, 56), 15)
    p_values = always_valid_p_values(history_a, np.arange(1, 56) - history_a, DEFAULT_MIXING)
    first = int(np.argmax(p_values < 0.05))
    assert first < 15  # it sufficed during A's run
    assert turned.message.startswith(
        f"bm25 was preferred significantly, on {first + 1} of the first {first + 1} queries with a preference; "
        "since then the preference has changed (hidden_topics preferred on 40 of 55"
    )
    assert turned.message.endswith("start a new experiment to measure it as it is now")
    # A preference that holds keeps the plain message.
    assert outcome([A_WINS] * 15 + _mixed(20, 20)).message.startswith("A preferred on 35 of 55 queries")


def test_a_unit_that_changes_its_preference_moves_as_it_happens() -> None:
    # Unit "u" prefers A (+1), then is a tie (0), then prefers B (-1); other units follow.
    # The history counts u for A, for neither, then for B: never twice.
    others = _mixed(12, 12)
    moved = outcome([A_WINS, B_WINS, B_WINS, *others], units=["u", "u", "u"] + [f"v{i}" for i in range(24)])
    assert (moved.units_with_clicks, moved.wins_a, moved.wins_b, moved.ties) == (25, 12, 13, 0)
    later_a = np.cumsum([result is A_WINS for result in others])
    history_a = np.concatenate([[1, 0, 0], later_a])
    history_b = np.concatenate([[0, 0, 1], 1 + np.arange(1, 25) - later_a])
    expected = always_valid_p_values(history_a, history_b, DEFAULT_MIXING)[-1]
    assert moved.p_value == pytest.approx(expected, rel=1e-12)


def test_outcome_counts_a_unit_of_searches_once() -> None:
    # One text searched by everyone, one coin: 30 searches whose users click the top hit
    # are one trial, not 30 (they would make a significant winner of A otherwise).
    flood = [(HAND_SHOWN, ["d1"])] * 30
    assert outcome(flood, min_units=1).verdict == "significant"
    one = outcome(flood, min_units=1, units=["text"] * 30)
    assert (one.queries, one.queries_with_clicks, one.units_with_clicks, one.wins_a, one.wins_b, one.ties) == (30, 30, 1, 1, 0, 0)
    # One trial is no evidence: Lambda_1 = B(a + 1, a) / B(a, a) * 2 = 1.
    assert (one.verdict, one.winner, one.p_value) == ("no_significant_difference", None, pytest.approx(1.0, abs=1e-12))
    assert one.message == "no significant difference: A preferred on 1 of 1 unit with a preference (always-valid p = 1)"
    # A unit's credit is summed: 2 for A and 1 for B prefer A; one each is a tie. Searches
    # without a click on a shown hit are in no unit.
    mixed = outcome(
        [(HAND_SHOWN, ["d1"]), (HAND_SHOWN, ["d2"]), (HAND_SHOWN, ["d1"]), (HAND_SHOWN, ["d1"]), (HAND_SHOWN, ["d2"]), (HAND_SHOWN, [])],
        units=["u", "u", "u", "v", "v", "w"],
    )
    assert (mixed.queries, mixed.queries_with_clicks, mixed.units_with_clicks) == (6, 5, 2)
    assert (mixed.wins_a, mixed.wins_b, mixed.ties) == (1, 0, 1)
    assert mixed.message == f"not enough data yet: 1 of the {DEFAULT_MIN_UNITS} units with a preference needed"
    with pytest.raises(ValueError, match="units has 1 entries"):
        outcome([(HAND_SHOWN, ["d1"])] * 2, units=["u"])


def test_outcome_bad_arguments() -> None:
    with pytest.raises(ValueError):
        outcome([], min_units=0)
    with pytest.raises(ValueError):
        outcome([], alpha=1.5)


# --- the simulation ---------------------------------------------------------------------

GRADE_WEIGHTS = (0.55, 0.25, 0.12, 0.08)
CLICK_GIVEN_GRADE = (0.05, 0.3, 0.6, 0.9)  # probability of a click once examined
SHOWN = 10


class World:
    """Queries with 30 candidates each and hidden graded relevance; simulated users."""

    def __init__(self, seed: int, queries: int = 200, candidates: int = 30) -> None:
        self.numbers = np.random.default_rng(seed)  # the world and the rankers
        self.users = random.Random(seed)  # the clicks
        self.ids = np.array([[f"q{q}-d{i}" for i in range(candidates)] for q in range(queries)])
        self.grades = self.numbers.choice(len(GRADE_WEIGHTS), size=self.ids.shape, p=GRADE_WEIGHTS)
        self.grade_of = [dict(zip(row, grades)) for row, grades in zip(self.ids, self.grades)]

    def rankings(self, noise: float) -> list[list[str]]:
        """Per query, candidates sorted by grade plus Gaussian noise: small noise is good."""
        scores = self.grades + self.numbers.normal(0.0, noise, size=self.grades.shape)
        order = np.argsort(-scores, axis=1, kind="stable")
        return np.take_along_axis(self.ids, order, axis=1).tolist()

    def clicks(self, query: int, shown: Sequence[str]) -> list[str]:
        """Cascade user: scan down, examine rank r with falling probability, click by
        grade, and stop after a click half of the time (satisfied)."""
        clicked = []
        for rank, doc_id in enumerate(shown, start=1):
            if self.users.random() > 0.95 ** (rank - 1):  # gives up scanning
                break
            if self.users.random() < CLICK_GIVEN_GRADE[self.grade_of[query][doc_id]]:
                clicked.append(doc_id)
                if self.users.random() < 0.5:
                    break
        return clicked


def run_experiment(
    method: str, seed: int, noise_a: float, noise_b: float, same: bool = False
) -> Outcome:
    """Ranker A has noise_a, B noise_b (same=True: B shows A's very ranking)."""
    world = World(seed)
    rankings_a = world.rankings(noise_a)
    rankings_b = rankings_a if same else world.rankings(noise_b)
    results = []
    for query, (a, b) in enumerate(zip(rankings_a, rankings_b)):
        shown = interleave(method, a, b, SHOWN, f"{seed}:{query}")
        results.append((shown, world.clicks(query, shown.ids)))
    return outcome(results)


GOOD_NOISE, BAD_NOISE = 0.5, 2.0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_simulation_picks_the_better_ranker_on_either_side(method: str, seed: int) -> None:
    good_as_a = run_experiment(method, seed, GOOD_NOISE, BAD_NOISE)
    assert (good_as_a.verdict, good_as_a.winner) == ("significant", TEAM_A), good_as_a
    assert good_as_a.queries == 200 and good_as_a.p_value is not None and good_as_a.p_value < 1e-3

    good_as_b = run_experiment(method, seed, BAD_NOISE, GOOD_NOISE)
    assert (good_as_b.verdict, good_as_b.winner) == ("significant", TEAM_B), good_as_b


@pytest.mark.parametrize("method", METHODS)
def test_simulation_equally_good_rankers_rarely_win(method: str) -> None:
    """No cherry-picked seed: over 20 worlds, at most 3 false positives at alpha = 0.05
    (about 1 expected; the exact sign test is conservative)."""
    identical = [run_experiment(method, seed, 1.0, 1.0, same=True) for seed in range(20)]
    equally_noisy = [run_experiment(method, seed, 1.0, 1.0) for seed in range(100, 120)]
    for report in identical + equally_noisy:
        assert report.queries_with_clicks > 100  # the users did click
    if method == "balanced":
        # The same ranking twice: every query is a tie, nothing to test.
        assert all(r.wins_a == r.wins_b == 0 and r.p_value is None for r in identical)
        assert all(r.verdict == "not_enough_data" for r in identical)
    else:
        assert sum(r.verdict == "significant" for r in identical) <= 3
    assert sum(r.verdict == "significant" for r in equally_noisy) <= 3
