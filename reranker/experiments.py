"""Online experiments: which searches are interleaved, what an event means, who is winning.

An experiment compares two registered rankers on live traffic. A share of the searches
that name no ranker (`traffic`) is answered with the interleaving of both rankers' orders
of the same BM25 window (`reranker.interleaving`); the list shown and which ranker put
each hit there are recorded under a query id (`store.events.ShownQuery`). Clients send
User Behavior Insights events for that query id; the report credits each clicked query
to a ranker and runs a sign test over the units with a preference (a unit is one
client's query text, or a query text searched without a client id: its searches share
one interleaving's coins, so they are one trial, see `store.events.randomisation_unit`),
in its always-valid form (`reranker.sequential`): the report and its timeline may be
read at any time, and the experiment stopped at the first "significant".

One experiment runs at a time, so a search never has to choose between two. Whether a
search takes part is a hash of (experiment id, client id) against the share, so one
client sees the same arm for the whole experiment; without a client id, a hash of the
query text.

Used by the service (routes and search) and by `reranker ab` (the same store, no HTTP).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Protocol, Sequence

from reranker.config import Settings
from reranker.errors import ConflictError, InputError, NotFoundError, StoreError
from reranker.interleaving import DEFAULT_TRAFFIC, METHODS, TEAM_A, Interleaving, Outcome, UnitVotes, credit, outcome, sign_test
from reranker.rankers import RANKERS, get_ranker
from reranker.sequential import ALPHA, DEFAULT_MIN_UNITS, mixing_parameter, sequential_test
from reranker.store.events import (
    Event,
    EventStore,
    Experiment,
    ExperimentData,
    Recorded,
    open_event_store,
)
from reranker.text import counted, listed

log = logging.getLogger(__name__)

ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
ID_RULE = "1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"  # ID_PATTERN in words
MAX_MIN_UNITS = 1_000_000
CONFIDENCE = 1 - ALPHA  # the timeline's band: the dual of the verdict's test
STATUSES = ("running", "stopped")
# How long a worker trusts its copy of the running experiment (changes made through
# another worker or the CLI are seen within this time).
RUNNING_TTL_SECONDS = 5.0
# How many experiments a "no experiment" error names.
FOUND_SHOWN = 10
# The largest event stored (UBI's limits on each field are in service/schema.py).
MAX_EVENT_BYTES = 16_384
# ISO 8601 as OpenSearch's `strict_date_optional_time` reads it (so both stores accept
# the same events): a date, optionally a time, optionally a zone. Only real dates (no
# 0000-00-00, no 31 June; 29 February of leap years): the pattern is published in the
# OpenAPI schema, and a client that matches it must not then be refused.
_MONTH_DAY = r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"  # 0001-9999 (no look-ahead in Rust's regex)
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
# A zone offset within ±18:00, the most a cluster's dates hold (Java's ZoneOffset): +19:00 is
# refused here with a 400, not by the cluster when the event is stored (a 502).
_TIME = r"T(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,9})?)?(?:Z|[+-](?:(?:0[0-9]|1[0-7]):?[0-5][0-9]|18:?00))?"
TIMESTAMP_PATTERN = re.compile(rf"{_DATE}(?:{_TIME})?")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


# --- experiments ---------------------------------------------------------------------------


def new_experiment(
    experiment_id: str,
    rankers: tuple[str, str] | list[str],
    *,
    method: str = "team_draft",
    traffic: float = DEFAULT_TRAFFIC,
    min_units: int = DEFAULT_MIN_UNITS,
) -> Experiment:
    """A validated, running experiment. InputError / UnknownRankerError (400) otherwise."""
    if not isinstance(experiment_id, str) or not ID_PATTERN.fullmatch(experiment_id):
        raise InputError(f"[id] must be {ID_RULE}, got {experiment_id!r}")
    if len(rankers) != 2 or rankers[0] == rankers[1]:
        raise InputError(f"[rankers] must name two different rankers, got {list(rankers)}")
    for name in rankers:
        get_ranker(name)  # UnknownRankerError lists the valid names
    experiment = Experiment(
        id=experiment_id, rankers=(rankers[0], rankers[1]), method=method, traffic=traffic,
        status="running", created=utc_now(), min_units=min_units,
    )
    return _checked(experiment)


def _checked(experiment: Experiment) -> Experiment:
    if experiment.method not in METHODS:
        raise InputError(f"[method] must be one of {', '.join(METHODS)}, got {experiment.method!r}")
    if not 0.0 < experiment.traffic <= 1.0:
        raise InputError(f"[traffic] is the share of searches interleaved: 0 < traffic <= 1, got {experiment.traffic!r}")
    if experiment.status not in STATUSES:
        raise InputError(f"[status] must be one of {', '.join(STATUSES)}, got {experiment.status!r}")
    if not 1 <= experiment.min_units <= MAX_MIN_UNITS:
        raise InputError(f"[min_units] must be between 1 and {MAX_MIN_UNITS}, got {experiment.min_units}")
    return experiment


def removed_rankers(experiment: Experiment) -> list[str]:
    """The experiment's rankers that are no longer registered (after an upgrade)."""
    return [name for name in experiment.rankers if name not in RANKERS]


def _startable(experiment: Experiment) -> None:
    """ConflictError when `experiment` names a ranker that is no longer registered (the
    store refuses a second running experiment itself, atomically)."""
    gone = removed_rankers(experiment)
    if gone:
        raise ConflictError(
            f"experiment {experiment.id!r} compares ranker {gone[0]!r}, which is no longer registered; "
            "it cannot run (its report stays readable): create a new experiment"
        )


def create(store: EventStore, experiment: Experiment) -> Experiment:
    """Store a new experiment. ConflictError when its id still holds the queries and events
    of a deleted one (kept on purpose): they would be counted in the new one's report."""
    if experiment.status == "running":
        _startable(experiment)
    # Records under an id that still names an experiment are that experiment's own: the store
    # refuses the id as taken. Only records without one were kept from a deleted experiment.
    held = store.recorded(experiment.id) if store.experiment(experiment.id) is None else None
    if held is not None and (held.queries or held.events):
        raise ConflictError(
            f"experiment id {experiment.id!r} still holds {_records(held)} of an experiment deleted with its events kept, "
            f"which the new one's report would count: delete them (`reranker ab delete {experiment.id} --delete-events`, "
            f"or DELETE /experiments/{experiment.id}?events=delete) or choose another id"
        )
    store.create_experiment(experiment)
    return experiment


@dataclass(frozen=True)
class Deleted:
    """What `delete` did: the experiment removed (None: only records were left of it), and
    its shown queries and events, removed or kept as asked."""

    experiment_id: str
    experiment: Experiment | None
    recorded: Recorded
    events_deleted: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "deleted": self.experiment_id,
            "experiment": self.experiment.to_json() if self.experiment is not None else None,
            "events": "deleted" if self.events_deleted else "kept",
            "queries": self.recorded.queries,
            "event_count": self.recorded.events,
        }

    def message(self) -> str:
        what = f"experiment {self.experiment_id}" if self.experiment is not None else f"what was left of experiment {self.experiment_id}"
        if self.events_deleted:
            return f"deleted {what} and its {_records(self.recorded)}"
        return f"deleted {what}; its {_records(self.recorded)} are kept (delete them with --delete-events)"


def _records(held: Recorded) -> str:
    return f"{counted(held.queries, 'shown query', plural='shown queries')} and {counted(held.events, 'event')}"


def delete(store: EventStore, experiment_id: str, *, events: bool) -> Deleted:
    """Remove a stopped experiment, and with `events` its shown queries and events (kept,
    they stay in the store for analysis, and the id stays taken until they are deleted).

    NotFoundError when nothing is stored under the id (or only kept records, and `events`
    is False); ConflictError when the experiment is running (searches would go on being
    interleaved for it in every worker until they re-read it).
    """
    experiment = store.experiment(experiment_id)  # a running one: the store's delete refuses it
    if experiment is None:
        held = store.recorded(experiment_id)
        if not held.queries and not held.events:
            find(store, experiment_id)  # NotFoundError, listing the experiments there are
        if not events:
            raise NotFoundError(f"no experiment {experiment_id!r}; its {_records(held)} are kept: delete them with --delete-events (events=delete)")
    held = store.delete_experiment(experiment_id, events)
    return Deleted(experiment_id, experiment, held, events)


def find(store: EventStore, experiment_id: str) -> Experiment:
    experiment = store.experiment(experiment_id)
    if experiment is None:
        # The newest first, and not thousands of them: `reranker ab list` (GET /experiments) has all.
        newest = [repr(e.id) for e in reversed(store.experiments())]
        raise NotFoundError(f"no experiment {experiment_id!r} (experiments, newest first: {listed(newest, FOUND_SHOWN) or 'none yet'})")
    return experiment


def update(
    store: EventStore,
    experiment_id: str,
    *,
    traffic: float | None = None,
    status: str | None = None,
    check_rankers: Callable[[Sequence[str]], None] | None = None,
) -> Experiment:
    """Change the traffic share and/or status. Starting again checks like creating.

    check_rankers: called with the experiment's rankers when `status` is "running", after
    the check that none was removed (whose refusal says more), to refuse one that cannot
    run on the index (the caller's engine knows: RankerUnavailableError).
    """
    experiment = find(store, experiment_id)
    changed = _checked(replace(
        experiment,
        traffic=experiment.traffic if traffic is None else traffic,
        status=experiment.status if status is None else status,
    ))
    if changed.status == "running":
        _startable(changed)
    if status == "running" and check_rankers is not None:
        check_rankers(changed.rankers)
    store.save_experiment(changed)
    return changed


def assignment_key(client_id: str | None, text: str) -> str:
    """What a search is assigned to an experiment's share by: its client, or without one
    its query text (so the pages of one query stay together either way). Not the unit the
    report counts, which is narrower (`store.events.randomisation_unit`: a client's text)."""
    return f"client\x00{client_id}" if client_id is not None else f"query\x00{text}"


def in_share(experiment: Experiment, unit: str) -> bool:
    """Does a search of this key (`assignment_key`) take part? Stable per (experiment, unit)."""
    digest = hashlib.sha256(f"{experiment.id}\x00{unit}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < experiment.traffic


class Experiments:
    """A worker's view of the experiments: the event store (opened on first use, after
    the fork) and the running experiment, re-read every RUNNING_TTL_SECONDS."""

    def __init__(self, settings: Settings, store: EventStore | None = None) -> None:
        self._settings = settings
        self._store = store
        self._lock = threading.Lock()
        self._running: tuple[float, Experiment | None] = (-1e9, None)

    def store(self) -> EventStore:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    self._store = open_event_store(self._settings)
        return self._store

    def running(self) -> Experiment | None:
        read_at, experiment = self._running
        if time.monotonic() - read_at > RUNNING_TTL_SECONDS:
            experiment = next((e for e in self.store().experiments() if e.status == "running"), None)
            self._running = (time.monotonic(), experiment)
        return experiment

    def changed(self) -> None:
        """Forget the cached running experiment (this worker just changed one)."""
        self._running = (-1e9, None)

    def pick(self, unit: str) -> Experiment | None:
        """The experiment this search takes part in, if any. An experiment store that
        cannot be read leaves searches out of experiments; it never fails them."""
        try:
            experiment = self.running()
        except StoreError as exc:
            log.warning("experiments unavailable, searching without them for %g s: %s", RUNNING_TTL_SECONDS, exc)
            self._running = (time.monotonic(), None)
            return None
        if experiment is None or removed_rankers(experiment) or not in_share(experiment, unit):
            return None
        return experiment

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


# --- events --------------------------------------------------------------------------------


class EventFields(Protocol):
    """A UBI event's fields, read and checked for shape (the service's `schema.UbiEvent`)."""

    @property
    def action_name(self) -> str: ...

    @property
    def query_id(self) -> str: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def event_id(self) -> str | None: ...

    @property
    def timestamp(self) -> str | None: ...

    @property
    def object_id(self) -> str | None: ...  # event_attributes.object.object_id

    @property
    def position(self) -> int | None: ...  # event_attributes.position.ordinal, from 1


def read_event(raw: Mapping[str, Any], fields: EventFields, store: EventStore) -> Event:
    """A UBI event checked against the query it is about.

    raw: the event as sent (stored as it is); fields: what it says, already checked for
    shape. InputError (400) for an event too large to store or one that contradicts its
    query (a doc that was not shown, a wrong position, another client); NotFoundError
    (404) for a query id that was never interleaved, or whose experiment was deleted (a
    stopped one still takes events: a list shown before the stop may be clicked after).
    """
    size = len(json.dumps(raw, ensure_ascii=False).encode("utf-8"))
    if size > MAX_EVENT_BYTES:
        raise InputError(f"the event has {size} bytes of JSON; the limit is {MAX_EVENT_BYTES}")
    query_id, client_id, object_id, position = fields.query_id, fields.client_id, fields.object_id, fields.position
    shown = store.shown_query(query_id)
    if shown is None:
        raise NotFoundError(
            f"no interleaved query with id {query_id!r}: events are recorded for the query_id of a "
            "search answered by a running experiment"
        )
    if store.experiment(shown.experiment_id) is None:
        # Deleted with its events kept: they stay for analysis, but no report counts a new
        # one, and a 201 naming the experiment would tell the client it took part.
        raise NotFoundError(
            f"experiment {shown.experiment_id!r} of query {query_id!r} was deleted (its events were kept): it records no more events"
        )
    if shown.client_id is not None and client_id is None:
        raise InputError(f"[client_id] is required: the search of query {query_id!r} sent one")
    if shown.client_id is not None and client_id != shown.client_id:
        raise InputError(f"[client_id] {client_id!r} is not the client that ran query {query_id!r}")
    if object_id is not None:
        hits = shown.shown
        if object_id not in hits:
            raise InputError(f"[event_attributes.object.object_id] {object_id!r} was not among the hits of query {query_id!r}")
        rank = shown.offset + hits.index(object_id) + 1
        if position is not None and position != rank:
            raise InputError(
                f"[event_attributes.position.ordinal] {position} does not match: {object_id!r} was shown at rank {rank} (ranks start at 1)"
            )
    # A retried event gets the same key, so it is stored once. The key is the client's
    # event_id within its query and client (two clients' "1" are two events), else a
    # hash of the whole event (send event_id or a timestamp to record two identical actions).
    source = json.dumps([query_id, client_id, fields.event_id] if fields.event_id is not None else raw, sort_keys=True, ensure_ascii=False)
    key = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return Event(
        event_id=key, query_id=query_id, experiment_id=shown.experiment_id, client_id=client_id,
        action_name=fields.action_name, object_id=object_id, position=position, timestamp=fields.timestamp or utc_now(), body=dict(raw),
    )


# --- the report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """Who is winning an experiment, from the clicks so far."""

    experiment: Experiment
    outcome: Outcome
    click_events: int  # every click event; outcome.clicks counts each clicked hit once per query

    @property
    def winner(self) -> str | None:
        if self.outcome.winner is None:
            return None
        a, b = self.experiment.rankers
        return a if self.outcome.winner == TEAM_A else b

    def to_json(self) -> dict[str, Any]:
        a, b = self.experiment.rankers
        o = self.outcome
        return {
            "queries": o.queries,
            "queries_with_clicks": o.queries_with_clicks,
            "clicks": self.click_events,
            "clicked_hits": o.clicks,
            "units_with_clicks": o.units_with_clicks,
            "wins": {a: o.wins_a, b: o.wins_b},
            "ties": o.ties,
            "winner": self.winner,
            "p_value": o.p_value,
            "fixed_horizon_p_value": o.fixed_horizon_p_value,
            "mixing": o.mixing,
            "verdict": o.verdict,
            "min_units": self.experiment.min_units,
            "min_queries": self.experiment.min_units,  # its old name, for clients that read it
            "message": o.message,
            "removed_rankers": removed_rankers(self.experiment),
        }


def report(store: EventStore, experiment: Experiment) -> Report:
    data = store.experiment_data(experiment.id)
    clicked = _in_shown_order(data)
    found = outcome(
        ((shown, ids) for _, _, shown, ids in clicked), min_units=experiment.min_units,
        alpha=ALPHA, labels=experiment.rankers, units=[unit for _, unit, _, _ in clicked],
    )
    # outcome() saw only the clicked queries; the store counted every query shown.
    return Report(experiment, replace(found, queries=data.queries), data.click_events)


def _in_shown_order(data: ExperimentData) -> list[tuple[_dt.datetime, str, Interleaving, frozenset[str]]]:
    """The clicked queries by when they were shown (the store's order among equal times):
    the order the always-valid p-value reads them in, the same for the report and timeline."""
    return sorted(
        ((_shown_time(at), unit, shown, ids) for at, unit, (shown, ids) in zip(data.shown_at, data.units, data.clicked)),
        key=lambda row: row[0],
    )


# --- the report over time ------------------------------------------------------------------

INTERVALS = {"hour": _dt.timedelta(hours=1), "day": _dt.timedelta(days=1)}
# "auto": hours while the clicked queries span at most this long, else days (a week by
# the hour is 168 points, about what a plot a phone's width can show apart).
HOURLY_SPAN = _dt.timedelta(days=7)


@dataclass(frozen=True)
class Tally:
    """Credit counted over some clicked queries, as `interleaving.outcome` counts it: the
    queries, and the units they fall in with each unit's summed credit's sign."""

    queries_with_clicks: int = 0
    units_with_clicks: int = 0
    wins_a: int = 0
    wins_b: int = 0
    ties: int = 0

    def to_json(self, rankers: tuple[str, str]) -> dict[str, Any]:
        return {
            "queries_with_clicks": self.queries_with_clicks,
            "units_with_clicks": self.units_with_clicks,
            "wins": {rankers[0]: self.wins_a, rankers[1]: self.wins_b},
            "ties": self.ties,
        }


def _tally(votes: UnitVotes) -> Tally:
    return Tally(votes.results, votes.units, votes.wins_a, votes.wins_b, votes.ties)


@dataclass(frozen=True)
class Period:
    """One interval of an experiment: its clicked queries, and everything up to its end.

    p_value, low, high: the always-valid p-value and confidence sequence (of the share of
    the units with a preference that preferred the first ranker) at the period's end.
    """

    start: _dt.datetime  # UTC, the interval's first instant
    end: _dt.datetime
    within: Tally
    so_far: Tally
    p_value: float | None = None
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class Timeline:
    """An experiment's report over time: per interval (by when each query was shown), the
    wins so far, the share of the queries with a preference that preferred the first
    ranker, its always-valid confidence sequence and p-value, and the fixed-horizon sign
    test: the report's own statistics, so the last period's are the report's."""

    experiment: Experiment
    interval: str
    periods: tuple[Period, ...]
    confidence: float = CONFIDENCE

    def to_json(self) -> dict[str, Any]:
        rankers = self.experiment.rankers
        periods = []
        for period in self.periods:
            so_far = period.so_far
            decided = so_far.wins_a + so_far.wins_b
            periods.append({
                "start": period.start.isoformat(),
                "end": period.end.isoformat(),
                **period.within.to_json(rankers),
                "cumulative": {
                    **so_far.to_json(rankers),
                    "share": so_far.wins_a / decided if decided else None,
                    "low": period.low,
                    "high": period.high,
                    "p_value": period.p_value,
                    "fixed_horizon_p_value": sign_test(so_far.wins_a, so_far.wins_b) if decided else None,
                },
            })
        return {
            "interval": self.interval,
            "share_of": rankers[0],
            "confidence": self.confidence,
            "mixing": mixing_parameter(self.experiment.min_units, ALPHA),
            "min_units": self.experiment.min_units,
            "min_queries": self.experiment.min_units,  # its old name, for clients that read it
            "periods": periods,
        }


def _shown_time(timestamp: str) -> _dt.datetime:
    moment = _dt.datetime.fromisoformat(timestamp)
    return moment.replace(tzinfo=_dt.timezone.utc) if moment.tzinfo is None else moment.astimezone(_dt.timezone.utc)


def _period_start(moment: _dt.datetime, interval: str) -> _dt.datetime:
    if interval == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)


def timeline(store: EventStore, experiment: Experiment, interval: str = "auto") -> Timeline:
    """The report of `experiment` per hour or day ("auto": by `HOURLY_SPAN`), in UTC.

    Only intervals with a clicked query are listed. InputError (400) for another interval.
    """
    if interval != "auto" and interval not in INTERVALS:
        raise InputError(f"[interval] must be one of auto, {', '.join(INTERVALS)}, got {interval!r}")
    clicked = _in_shown_order(store.experiment_data(experiment.id))
    if interval == "auto":
        span = clicked[-1][0] - clicked[0][0] if clicked else _dt.timedelta(0)
        interval = "hour" if span <= HOURLY_SPAN else "day"
    periods: list[Period] = []
    ends: list[int] = []  # per period, the index in `history` of its last query
    history: list[tuple[int, int]] = []  # (wins_a, wins_b) so far after each clicked query
    so_far, within = UnitVotes(), UnitVotes()
    for at, unit, shown, ids in clicked:
        if not ids.intersection(shown.ids):
            continue  # no shown hit clicked (a click event without an object): as outcome()
        preference = credit(shown, ids)
        start = _period_start(at, interval)
        if not periods or periods[-1].start != start:
            within = UnitVotes()
            periods.append(Period(start, start + INTERVALS[interval], Tally(), _tally(so_far)))
            ends.append(-1)
        so_far.add(unit, preference)
        within.add(unit, preference)
        tally = _tally(so_far)
        history.append((tally.wins_a, tally.wins_b))
        periods[-1] = replace(periods[-1], within=_tally(within), so_far=tally)
        ends[-1] = len(history) - 1
    return Timeline(experiment, interval, _with_sequential(periods, ends, history, experiment.min_units))


def _with_sequential(periods: list[Period], ends: list[int], history: list[tuple[int, int]], min_units: int) -> tuple[Period, ...]:
    """`periods` with the always-valid p-value and confidence sequence at each one's end,
    computed over every clicked query in order (the running minimum and intersection see
    every step, not only the ends of periods)."""
    if not history:
        return tuple(periods)
    test = sequential_test(history, min_units, ALPHA)  # as interleaving.outcome reads it
    p_values = test.p_values
    low, high = test.band()
    return tuple(
        replace(
            period,
            p_value=float(p_values[end]) if period.so_far.wins_a + period.so_far.wins_b else None,
            low=float(low[end]), high=float(high[end]),
        )
        for period, end in zip(periods, ends)
    )
