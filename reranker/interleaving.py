"""Interleaved comparison of two rankings: build the list shown, credit clicks, test.

Two rankers A and B reorder the same candidates. Instead of showing each ranker to half
the users (A/B testing), every query in an experiment is shown one list that mixes both,
and clicks on it say which ranker the user preferred for that query.

- Team-draft interleaving: Radlinski, Kurup & Joachims (2008), "How does clickthrough
  data reflect retrieval quality?", CIKM, Algorithm 1. Like captains picking teams, the
  ranker with fewer picks so far (a coin when tied) adds its highest-ranked document not
  yet shown. A click is credited to the team that picked the clicked document.
- Balanced interleaving: Joachims (2002), "Optimizing search engines using clickthrough
  data", KDD, and Joachims (2003), "Evaluating retrieval performance using clickthrough
  data", where the combination procedure is spelled out. The two rankings are read in
  alternation, one rank at a time (a coin decides who starts), skipping documents
  already shown; every prefix of the result is the union of the top k_a of A and the
  top k_b of B with |k_a - k_b| <= 1.
  Credit: with l the lowest clicked position and k the smaller of the ranks of the
  document at l in A and in B, the ranker whose top k holds more clicked documents wins.
- Per-query credit (+1, -1 or 0 per query) and the sign test over queries with a
  preference: Chapelle, Joachims, Radlinski & Yue (2012), "Large-scale validation and
  analysis of interleaved search evaluation", ACM TOIS 30(1). Their queries are each
  interleaved with fresh coins; where several share one interleaving's coins, `outcome`
  counts them as one unit (the sign of their summed credit), since they are one trial.
  The verdict reads the always-valid form of that test (`reranker.sequential`), so it may
  be watched as results arrive; the exact test for one planned look is reported beside it.

Pure functions over document ids: no IO, no logging. Randomness comes only from the
`random.Random` passed in, or from a seed (ints as they are, strings through SHA-256, so
a seed means the same thing in every process, unlike Python's salted `hash()`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass

from reranker.sequential import ALPHA, DEFAULT_MIN_UNITS, sequential_test
from reranker.text import counted

TEAM_A, TEAM_B = "A", "B"
METHODS = ("team_draft", "balanced")
# The share of searches naming no ranker that an experiment interleaves unless told (here,
# not in `experiments`, so that the CLI can name it without importing the event store).
DEFAULT_TRAFFIC = 0.1


@dataclass(frozen=True)
class Interleaving:
    """One interleaved result list and how it was made.

    method: "team_draft" or "balanced".
    ids: the list shown, best first, no duplicates.
    teams: per shown position, TEAM_A or TEAM_B. Team-draft: the ranker that picked it
        (this is what clicks are credited to). Balanced: the ranker whose turn placed it,
        for display only; balanced credit reads `a` and `b`.
    a, b: the two rankings as given, cut to the deepest rank either ranker was read to
        (enough for `credit`: the balanced rule may look one rank past the shorter read).

    Sequences are stored as tuples (lists from JSON are converted; a bare string is a
    TypeError). Raises ValueError
    for an unknown method, unequal `ids`/`teams` lengths, a team other than A or B, a
    repeated id, or a shown id missing from its team's ranking (`a` for A, `b` for B).
    """

    method: str
    ids: tuple[str, ...]
    teams: tuple[str, ...]
    a: tuple[str, ...]
    b: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("ids", "teams", "a", "b"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"Interleaving.{name} must be a sequence of ids, not a string")
            object.__setattr__(self, name, tuple(value))
        _check_method(self.method)
        if len(self.ids) != len(self.teams):
            raise ValueError(
                f"Interleaving has {len(self.ids)} ids but {len(self.teams)} team labels"
            )
        unknown = set(self.teams) - {TEAM_A, TEAM_B}
        if unknown:
            raise ValueError(f"unknown team label(s) {sorted(unknown)}; expected 'A' or 'B'")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("Interleaving.ids repeats an id")
        members = {TEAM_A: set(self.a), TEAM_B: set(self.b)}
        for doc_id, team in zip(self.ids, self.teams):
            if doc_id not in members[team]:
                raise ValueError(f"shown id {doc_id!r} is not in ranking {team} as stored")


def seeded_rng(seed: int | str) -> random.Random:
    """A `random.Random` for `seed`: an int as is, a str via SHA-256 (stable across runs)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, str)):
        raise TypeError(f"seed must be an int or a str, not {type(seed).__name__}")
    if isinstance(seed, str):
        digest = hashlib.sha256(seed.encode("utf-8")).digest()
        return random.Random(int.from_bytes(digest, "big"))
    return random.Random(seed)


def interleave(
    method: str, a: Sequence[str], b: Sequence[str], length: int, seed: int | str
) -> Interleaving:
    """Interleave rankings `a` and `b` (best first) into at most `length` ids.

    Deterministic for a given seed. `a` and `b` are normally permutations of the same
    candidates; lists with different members or lengths also work: the output never
    repeats an id and ends when `length` is reached or both rankings are used up.
    Raises ValueError for an unknown method or a negative length.
    """
    builder = _check_method(method)
    return builder(a, b, length, seeded_rng(seed))


def team_draft(a: Sequence[str], b: Sequence[str], length: int, rng: random.Random) -> Interleaving:
    """Team-draft interleaving, Radlinski et al. (2008), Algorithm 1.

    While fewer than `length` ids are shown: the team with fewer picks (a coin from `rng`
    when the sizes are equal) adds its ranker's highest-ranked id not yet shown. When
    one ranking has nothing new left, the other keeps picking (the paper stops there; with
    the same candidates in both rankings the two run out together, so nothing changes).
    """
    a, b = _as_ranking(a, "a"), _as_ranking(b, "b")
    _check_length(length)
    shown: list[str] = []
    teams: list[str] = []
    seen: set[str] = set()
    cursors = {TEAM_A: 0, TEAM_B: 0}
    rankings = {TEAM_A: a, TEAM_B: b}
    picks = {TEAM_A: 0, TEAM_B: 0}
    while len(shown) < length:
        # Advance both cursors past ids already shown: each then points at its ranker's
        # best unshown id, or past the end, and counts the ranks read so far.
        for team in (TEAM_A, TEAM_B):
            ranking = rankings[team]
            while cursors[team] < len(ranking) and ranking[cursors[team]] in seen:
                cursors[team] += 1
        a_left = cursors[TEAM_A] < len(a)
        b_left = cursors[TEAM_B] < len(b)
        if not (a_left or b_left):
            break
        if a_left and b_left:
            a_turn = picks[TEAM_A] < picks[TEAM_B] or (
                picks[TEAM_A] == picks[TEAM_B] and rng.random() < 0.5
            )
            team = TEAM_A if a_turn else TEAM_B
        else:
            team = TEAM_A if a_left else TEAM_B
        doc_id = rankings[team][cursors[team]]
        shown.append(doc_id)
        teams.append(team)
        seen.add(doc_id)
        picks[team] += 1
        cursors[team] += 1
    return _result("team_draft", shown, teams, a, b, cursors[TEAM_A], cursors[TEAM_B])


def balanced(a: Sequence[str], b: Sequence[str], length: int, rng: random.Random) -> Interleaving:
    """Balanced interleaving, Joachims (2002, 2003): the `combine` procedure.

    A coin from `rng` decides whether A or B goes first. Then ranks are read in
    alternation: A's next rank when k_a < k_b, B's when k_b < k_a, the first mover's on
    a tie; an id already shown is skipped (the turn is still used). Stops at `length` ids
    or when both rankings are read to the end; if one ends first the other continues.
    Teams record whose turn placed each id (display only).
    """
    a, b = _as_ranking(a, "a"), _as_ranking(b, "b")
    _check_length(length)
    a_first = rng.random() < 0.5
    shown: list[str] = []
    teams: list[str] = []
    seen: set[str] = set()
    k_a = k_b = 0
    while len(shown) < length and (k_a < len(a) or k_b < len(b)):
        a_turn = k_a < k_b or (k_a == k_b and a_first)
        if k_b >= len(b):
            a_turn = True
        elif k_a >= len(a):
            a_turn = False
        doc_id, team = (a[k_a], TEAM_A) if a_turn else (b[k_b], TEAM_B)
        if a_turn:
            k_a += 1
        else:
            k_b += 1
        if doc_id not in seen:
            shown.append(doc_id)
            teams.append(team)
            seen.add(doc_id)
    return _result("balanced", shown, teams, a, b, k_a, k_b)


def credit(shown: Interleaving, clicked: Collection[str]) -> int:
    """Per-query preference from clicks: +1 A wins, -1 B wins, 0 tie or no clicks.

    `clicked`: ids the user clicked; repeats do not count twice and ids that were not
    shown are ignored. Team-draft: more clicks on A's picks than on B's wins (Radlinski
    et al. 2008). Balanced: Joachims (2002), see the module docstring.
    Raises TypeError if `clicked` is a single string.
    """
    if isinstance(clicked, str):
        raise TypeError("clicked must be a collection of ids, not a string")
    clicked_set = set(clicked)
    positions = [i for i, doc_id in enumerate(shown.ids) if doc_id in clicked_set]
    if not positions:
        return 0
    if shown.method == "team_draft":
        a_hits = sum(1 for i in positions if shown.teams[i] == TEAM_A)
        b_hits = len(positions) - a_hits
    else:
        a_hits, b_hits = _balanced_hits(shown, positions)
    return (a_hits > b_hits) - (a_hits < b_hits)


def _balanced_hits(shown: Interleaving, positions: list[int]) -> tuple[int, int]:
    """Clicked shown ids in A's top k and in B's top k, k from the lowest click (Joachims)."""
    lowest = shown.ids[positions[-1]]
    # Non-empty: Interleaving checks that every shown id is in its team's ranking.
    k = min(r.index(lowest) + 1 for r in (shown.a, shown.b) if lowest in r)
    clicked_ids = {shown.ids[i] for i in positions}
    a_hits = len(clicked_ids.intersection(shown.a[:k]))
    return a_hits, len(clicked_ids.intersection(shown.b[:k]))


@dataclass(frozen=True)
class Outcome:
    """The aggregate of an interleaving experiment (per-query wins, Chapelle et al. 2012).

    queries: queries shown. queries_with_clicks: of those, with a click on a shown id.
    clicks: distinct shown ids clicked, summed over queries. units_with_clicks: the units
    (see `outcome`) those clicked queries fall in, each one trial of the test.
    wins_a / wins_b: units whose summed credit preferred A / B. ties: units with clicks
    but no preference.
    p_value: the always-valid p-value of the sign test (`reranker.sequential`) over the
        counts as the results arrived, None with no wins: safe to read after every result.
    fixed_horizon_p_value: the exact two-sided sign test on the final wins_a vs wins_b
        (ties dropped), None with no wins: valid only for one look at a size fixed in advance.
    mixing: a of the Beta(a, a) mixture behind p_value (`sequential.mixing_parameter` of
        min_units and alpha).
    winner: TEAM_A or TEAM_B when the verdict is "significant", else None.
    verdict: "not_enough_data" (fewer than min_units units with a preference),
        "no_significant_difference" or "significant" (p_value < alpha).
    message: one sentence for people.
    """

    queries: int
    queries_with_clicks: int
    clicks: int
    units_with_clicks: int
    wins_a: int
    wins_b: int
    ties: int
    p_value: float | None
    fixed_horizon_p_value: float | None
    mixing: float
    winner: str | None
    verdict: str
    message: str


class UnitVotes:
    """Credit summed per unit as results arrive (`outcome`'s count): each added result
    moves only its own unit between wins and ties, so counts after every result cost
    nothing more. results: the results added; units: the units they fell in."""

    def __init__(self) -> None:
        self._sums: dict[Hashable, int] = {}
        self.results = self.wins_a = self.wins_b = 0

    def add(self, unit: Hashable, preference: int) -> None:
        before = self._sums.get(unit, 0)
        after = self._sums[unit] = before + preference
        self.results += 1
        self.wins_a += (after > 0) - (before > 0)
        self.wins_b += (after < 0) - (before < 0)

    @property
    def units(self) -> int:
        return len(self._sums)

    @property
    def ties(self) -> int:
        return self.units - self.wins_a - self.wins_b


def outcome(
    results: Iterable[tuple[Interleaving, Collection[str]]],
    min_units: int = DEFAULT_MIN_UNITS,
    alpha: float = ALPHA,
    labels: tuple[str, str] = (TEAM_A, TEAM_B),
    units: Sequence[Hashable] | None = None,
) -> Outcome:
    """Count per-query credit over `results` (the list shown, the ids clicked) and test it.

    `results` come in the order they were shown: the always-valid p-value is the smallest
    over the counts after each clicked result. A unit whose summed credit changes sign is
    moved between wins and ties as it happens, a step Ville's bound does not strictly cover:
    measured (`bench/bench_peeking.py`, parts 3-4; figures in docs/experiments.md), the
    false-positive rate stays within alpha for heavy-tailed searches per unit and passes it
    only when every unit clicks many searches in a row, while counting each unit's first
    vote alone would hold the bound exactly at a third of the power, so the sum decides.
    `units`: per result, the unit it was randomised in (None: each result is its own).
    The sign test assumes independent trials, and results that share the coins of one
    interleaving are not: if everyone who searches one text sees the same list, a
    popular text whose users click the top hit, whoever placed it, repeats one coin's
    verdict on every search. So the results of a unit count as one trial: the sign of
    the sum of their credits (Chapelle et al. 2012 credit per query impression, each
    interleaved with its own coins). `labels` name A and B in the message only.
    Raises ValueError if min_units < 1, alpha is not in (0, 1), or `units` is shorter
    than `results`.
    """
    if min_units < 1:
        raise ValueError(f"min_units must be at least 1, got {min_units}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    queries = queries_with_clicks = clicks = 0
    votes = UnitVotes()
    history: list[tuple[int, int]] = []  # (wins_a, wins_b) after each clicked result
    for index, (shown, clicked) in enumerate(results):
        queries += 1
        if isinstance(clicked, str):
            raise TypeError("clicked must be a collection of ids, not a string")
        shown_clicks = len(set(clicked).intersection(shown.ids))
        if shown_clicks == 0:
            continue
        queries_with_clicks += 1
        clicks += shown_clicks
        if units is not None and index >= len(units):
            raise ValueError(f"units has {len(units)} entries, fewer than the results")
        unit = index if units is None else units[index]
        votes.add(unit, credit(shown, clicked))
        history.append((votes.wins_a, votes.wins_b))
    wins_a, wins_b, ties = votes.wins_a, votes.wins_b, votes.ties
    decided = wins_a + wins_b
    noun, nouns = ("query", "queries") if units is None else ("unit", "units")

    def of(count: int) -> str:
        return counted(count, noun, plural=nouns)

    test = sequential_test(history, min_units, alpha)
    p_value = float(test.p_values[-1]) if decided else None
    crossed = test.first_significant if decided else None
    winner: str | None = None
    if decided < min_units:
        verdict = "not_enough_data"
        message = (
            f"not enough data yet: {decided} of the {of(min_units)} with a "
            "preference needed"
        )
    else:
        assert p_value is not None
        leader, leader_wins = (0, wins_a) if wins_a >= wins_b else (1, wins_b)
        preferred = (
            f"{labels[0]} and {labels[1]} each preferred on {wins_a}"
            if wins_a == wins_b
            else f"{labels[leader]} preferred on {leader_wins}"
        )
        summary = f"{preferred} of {of(decided)} with a preference (always-valid {format_p_value(p_value)})"
        if crossed is not None:
            # The direction is the one the evidence had when it first sufficed: the
            # confidence sequence then left 1/2 on that side, and it holds every moment at
            # once, so that side is wrong with chance at most alpha. The leader now can
            # differ only if the preference changed since (the sequence is then empty or
            # nearly so); naming it would claim what the test did not show.
            then_a, then_b = history[crossed]
            side = 0 if then_a > then_b else 1
            verdict = "significant"
            winner = (TEAM_A, TEAM_B)[side]
            if side == leader and wins_a != wins_b:
                message = summary
            else:
                message = (
                    f"{labels[side]} was preferred significantly, on {max(then_a, then_b)} of the first "
                    f"{of(then_a + then_b)} with a preference; since then the preference has changed "
                    f"({summary}): start a new experiment to measure it as it is now"
                )
        else:
            verdict = "no_significant_difference"
            message = f"no significant difference: {summary}"
    return Outcome(
        queries=queries,
        queries_with_clicks=queries_with_clicks,
        clicks=clicks,
        units_with_clicks=votes.units,
        wins_a=wins_a,
        wins_b=wins_b,
        ties=ties,
        p_value=p_value,
        fixed_horizon_p_value=sign_test(wins_a, wins_b) if decided else None,
        mixing=test.mixing,
        winner=winner,
        verdict=verdict,
        message=message,
    )


def sign_test(wins_a: int, wins_b: int) -> float:
    """Exact two-sided sign test: p = min(1, 2 P(X <= min(wins_a, wins_b))), X ~ Bin(n, 1/2).

    n = wins_a + wins_b (ties already dropped): scipy's `binomtest` (for p = 1/2 its
    two-sided sum is this one; it matched the exact rational sum this replaced to 1.2e-9,
    relative, for every n up to 10^6). p may underflow to 0.0 for overwhelming evidence.
    Returns 1.0 for n = 0. Raises ValueError for negative counts.
    """
    from scipy.stats import binomtest  # here: only a report needs it, and scipy.stats is slow to import

    if wins_a < 0 or wins_b < 0:
        raise ValueError(f"win counts must be non-negative, got {wins_a} and {wins_b}")
    n = wins_a + wins_b
    if n == 0:
        return 1.0
    return min(1.0, float(binomtest(min(wins_a, wins_b), n, 0.5).pvalue))


def format_p_value(p_value: float) -> str:
    """A sign test's p-value as reports print it: p < 0.0001, or p = 0.03 (two digits)."""
    return "p < 0.0001" if p_value < 1e-4 else f"p = {p_value:.2g}"


Builder = Callable[[Sequence[str], Sequence[str], int, random.Random], Interleaving]


def _check_method(method: str) -> Builder:
    builders: dict[str, Builder] = {"team_draft": team_draft, "balanced": balanced}
    try:
        return builders[method]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown interleaving method {method!r}; expected one of {', '.join(METHODS)}"
        ) from None


def _check_length(length: int) -> None:
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"length must be an int, not {type(length).__name__}")
    if length < 0:
        raise ValueError(f"length must be non-negative, got {length}")


def _as_ranking(ranking: Sequence[str], name: str) -> tuple[str, ...]:
    if isinstance(ranking, str):
        raise TypeError(f"ranking {name} must be a sequence of ids, not a string")
    return tuple(ranking)


def _result(
    method: str,
    shown: list[str],
    teams: list[str],
    a: tuple[str, ...],
    b: tuple[str, ...],
    read_a: int,
    read_b: int,
) -> Interleaving:
    depth = max(read_a, read_b)
    return Interleaving(
        method=method, ids=tuple(shown), teams=tuple(teams), a=a[:depth], b=b[:depth]
    )
