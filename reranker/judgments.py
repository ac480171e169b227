"""Judgments from clicks: an experiment's shown result lists and UBI clicks -> graded qrels.

The click model is COEC, clicks over expected clicks (Zhang & Jones 2007, "Comparing click
logs and editorial labels for training query rewriting"), the model OpenSearch's Search
Relevance Workbench uses for its implicit judgments. Users click the top of a list more whatever it holds; COEC divides
that out. From every result list shown, the click-through rate of each rank r is

    ctr(r) = (lists with a click at rank r) / (lists that showed a hit at rank r)

and a (query, document) pair shown n times, at ranks r_1..r_n, and clicked c times, has

    expected clicks E = ctr(r_1) + ... + ctr(r_n),    COEC = c / E.

COEC = 1: clicked as often as an average hit at the same ranks; 2: twice as often. The
workbench takes the rank where a pair was seen and the impressions from UBI "impression"
events; here the service recorded every list it showed (`store.events.ShownQuery`), so
each impression is counted at the rank it really had, and no impression events are
needed. Queries are grouped by their text, as the workbench groups by `user_query`.

Why COEC and not a cascade (Craswell et al. 2008) or DBN (Chapelle & Zhang 2009) model: interleaving moves a document by a rank or two
between impressions, the evidence a cascade model needs to tell examination from
attractiveness per document is thin, and a DBN fitted by EM needs far more sessions per
query than an experiment on a team's own traffic collects. COEC has one parameter per
rank, estimated from all queries pooled, so it is stable on small experiments, and its
scale is the workbench's, so teams can compare the two.

Grades (qrels need integers): COEC below the first threshold is 0, at or above the i-th
threshold is i (default thresholds 0.5, 1, 2: grade 3 for twice the expected clicks). A
pair shown fewer than `min_impressions` times is not judged at all: with few impressions
one click more or less moves COEC across every threshold.

Pure functions over impressions: the store is read by the caller (`reranker ab judgments`).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reranker.datasets import control_character
from reranker.errors import InputError

CLICK_MODEL = "coec"
DEFAULT_MIN_IMPRESSIONS = 10
DEFAULT_THRESHOLDS = (0.5, 1.0, 2.0)


@dataclass(frozen=True)
class Impression:
    """One result list as a user saw it: the query text, the ids shown from rank
    `first_rank` on (1 for a first page), and the ids clicked on it."""

    text: str
    shown: tuple[str, ...]
    clicked: frozenset[str]
    first_rank: int = 1


@dataclass(frozen=True)
class Judgment:
    """A judged (query, document) pair: its impressions, clicks, expected clicks, COEC, grade."""

    query_id: str
    text: str
    doc_id: str
    impressions: int
    clicks: int
    expected_clicks: float
    coec: float
    grade: int

    def to_json(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id, "doc_id": self.doc_id, "impressions": self.impressions, "clicks": self.clicks,
            "expected_clicks": round(self.expected_clicks, 4), "coec": round(self.coec, 4), "grade": self.grade,
        }


@dataclass(frozen=True)
class Judged:
    """What `judge` found.

    judgments: the pairs judged, by query text then doc id. ctr_by_rank: rank -> click-through
    rate over every list shown. lists / lists_with_clicks: impressions read. queries: distinct
    query texts shown. pairs: distinct (query, doc) pairs shown. dropped_pairs: pairs shown
    fewer than min_impressions times; dropped_queries: query texts left with no judged pair;
    unwritable_pairs: pairs left out because the doc id holds a control character (an id a
    cluster indexed by others may hold: it would split the rows of qrels.tsv).
    """

    judgments: tuple[Judgment, ...]
    ctr_by_rank: dict[int, float]
    lists: int
    lists_with_clicks: int
    queries: int
    pairs: int
    dropped_pairs: int
    dropped_queries: int
    min_impressions: int
    thresholds: tuple[float, ...]
    most_impressions: int = 0  # of any pair: what --min-impressions could be lowered to
    unwritable_pairs: int = 0
    query_texts: dict[str, str] = field(default_factory=dict)  # judged query id -> text

    @property
    def judged_queries(self) -> int:
        return len(self.query_texts)

    @property
    def queries_with_relevant(self) -> int:
        """Judged queries with a pair graded above 0 (only these are evaluated)."""
        return len({j.query_id for j in self.judgments if j.grade > 0})

    def grade_counts(self) -> list[int]:
        counts = [0] * (len(self.thresholds) + 1)
        for judgment in self.judgments:
            counts[judgment.grade] += 1
        return counts

    def summary(self) -> dict[str, Any]:
        return {
            "click_model": CLICK_MODEL,
            "min_impressions": self.min_impressions,
            "grade_thresholds": list(self.thresholds),
            "lists_shown": self.lists,
            "lists_with_clicks": self.lists_with_clicks,
            "queries_shown": self.queries,
            "queries_judged": self.judged_queries,
            "queries_with_a_relevant_document": self.queries_with_relevant,
            "queries_dropped": self.dropped_queries,
            "pairs_shown": self.pairs,
            "pairs_judged": len(self.judgments),
            "pairs_dropped": self.dropped_pairs,
            "pairs_with_unwritable_ids": self.unwritable_pairs,
            "documents_judged": len({j.doc_id for j in self.judgments}),
            "grades": self.grade_counts(),
            "ctr_by_rank": {str(rank): round(ctr, 4) for rank, ctr in sorted(self.ctr_by_rank.items())},
        }


def query_id(text: str) -> str:
    """A stable id for a query text (the same in every run, so judged sets can be compared)."""
    return "q" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def check_thresholds(thresholds: Sequence[float]) -> tuple[float, ...]:
    """InputError unless the thresholds are positive and strictly increasing."""
    values = tuple(float(value) for value in thresholds)
    if not values or any(not value > 0 for value in values) or any(b <= a for a, b in zip(values, values[1:])):
        raise InputError(f"grade thresholds must be positive and increasing, e.g. 0.5,1,2; got {','.join(map(str, thresholds))}")
    return values


def grade(coec: float, thresholds: Sequence[float]) -> int:
    """0 below thresholds[0]; i at or above thresholds[i - 1]."""
    return bisect.bisect_right(list(thresholds), coec)


def ctr_by_rank(impressions: Sequence[Impression]) -> dict[int, float]:
    """Rank (from 1) -> share of the lists showing a hit at that rank that had it clicked."""
    shown: dict[int, int] = {}
    clicked: dict[int, int] = {}
    for impression in impressions:
        for offset, doc_id in enumerate(impression.shown):
            rank = impression.first_rank + offset
            shown[rank] = shown.get(rank, 0) + 1
            clicked[rank] = clicked.get(rank, 0) + (doc_id in impression.clicked)
    return {rank: clicked[rank] / count for rank, count in shown.items()}


def judge(
    impressions: Iterable[Impression],
    *,
    min_impressions: int = DEFAULT_MIN_IMPRESSIONS,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
) -> Judged:
    """COEC judgments of every (query text, doc) pair shown at least `min_impressions` times.

    A pair whose expected clicks are 0 (nothing at its ranks was ever clicked) gets COEC 0:
    no click is no evidence of relevance. Raises InputError for min_impressions < 1 or bad
    thresholds.
    """
    if min_impressions < 1:
        raise InputError(f"--min-impressions must be at least 1, got {min_impressions}")
    thresholds = check_thresholds(thresholds)
    seen = list(impressions)
    ctr = ctr_by_rank(seen)
    # (text, doc) -> [impressions, clicks, expected clicks]
    tally: dict[tuple[str, str], list[float]] = {}
    for impression in seen:
        for offset, doc_id in enumerate(impression.shown):
            counts = tally.setdefault((impression.text, doc_id), [0, 0, 0.0])
            counts[0] += 1
            counts[1] += doc_id in impression.clicked
            counts[2] += ctr[impression.first_rank + offset]
    judgments: list[Judgment] = []
    texts = {text for text, _ in tally}
    unwritable = {pair for pair in tally if control_character(pair[1]) is not None}
    for (text, doc_id), (shown, clicks, expected) in sorted(tally.items()):
        if shown < min_impressions or (text, doc_id) in unwritable:
            continue
        coec = clicks / expected if expected > 0 else 0.0
        judgments.append(Judgment(query_id(text), text, doc_id, int(shown), int(clicks), expected, coec, grade(coec, thresholds)))
    judged_texts = {j.query_id: j.text for j in judgments}
    return Judged(
        judgments=tuple(judgments),
        ctr_by_rank=ctr,
        lists=len(seen),
        lists_with_clicks=sum(1 for i in seen if i.clicked.intersection(i.shown)),
        queries=len(texts),
        pairs=len(tally),
        dropped_pairs=len(tally) - len(judgments) - len(unwritable),
        dropped_queries=len(texts) - len(judged_texts),
        min_impressions=min_impressions,
        thresholds=thresholds,
        most_impressions=int(max((counts[0] for counts in tally.values()), default=0)),
        query_texts=judged_texts,
        unwritable_pairs=len(unwritable),
    )
