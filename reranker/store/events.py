"""Where online experiments live: experiments, the interleaved queries shown, click events.

Events follow OpenSearch's User Behavior Insights (UBI) schema (query_id, client_id,
action_name, timestamp, event_attributes.object.object_id, event_attributes.position);
the queries record what each interleaved result list held and which ranker put each
hit there, so clicks can be credited later.

Two implementations behind one protocol, chosen like the document store:
- `EmbeddedEventStore`: one SQLite file `<data_dir>/experiments.sqlite3`, WAL with
  `synchronous=FULL`, so an acknowledged event survives a crash or restart.
- `OpenSearchEventStore`: three indices beside the alias, `ALIAS-experiments`,
  `ALIAS-ubi_queries` and `ALIAS-ubi_events` (strict mappings). OpenSearch acknowledges a
  write after its translog is fsynced (the default `index.translog.durability: request`).

Idempotency: an event's id is the client's `event_id` or a hash of its content, and it is
written with "create if absent" (SQLite primary key; OpenSearch `op_type=create`), so a
retried event is stored once and the retry is told it was a duplicate.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from reranker.config import Settings
from reranker.errors import (
    ConflictError,
    DuplicateEventError,
    IndexNotFoundError,
    NotFoundError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
)
from reranker.interleaving import Interleaving  # pure, importing only sequential: below the store
from reranker.sequential import DEFAULT_MIN_UNITS

log = logging.getLogger(__name__)

# UBI action names that count as a click when experiments are credited.
CLICK_ACTIONS = frozenset({"click", "click_through"})
# Ids per read when a report fetches the clicked queries.
_PAGE = 1000


@dataclass(frozen=True)
class Experiment:
    """An online comparison of two rankers by interleaving.

    traffic: the share of eligible searches (those naming no ranker) that are
    interleaved, 0 < traffic <= 1. min_units: randomisation units (`randomisation_unit`)
    with a preference needed before the report names a winner, and the size the
    always-valid test is tuned for.
    """

    id: str
    rankers: tuple[str, str]
    method: str
    traffic: float
    status: str  # "running" | "stopped"
    created: str  # ISO 8601, UTC
    min_units: int = DEFAULT_MIN_UNITS

    def to_json(self) -> dict[str, Any]:
        # min_queries is min_units's old name, written too: clients of the API read it,
        # and a version before the rename, rolled back to, reads stored experiments by it.
        return {**asdict(self), "rankers": list(self.rankers), "min_queries": self.min_units}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Experiment":
        return cls(
            id=str(raw["id"]),
            rankers=(str(raw["rankers"][0]), str(raw["rankers"][1])),
            method=str(raw["method"]),
            traffic=float(raw["traffic"]),
            status=str(raw["status"]),
            created=str(raw["created"]),
            # Stored before the rename, an experiment has only min_queries.
            min_units=int(raw.get("min_units", raw.get("min_queries", DEFAULT_MIN_UNITS))),
        )


def randomisation_unit(client_id: str | None, text: str) -> str:
    """The searches interleaved with the same coins: one client's searches of one query
    text, or without a client id every search of the text. The coins must be fixed
    within a unit so that the pages of one query are pages of one interleaving; the
    report counts each unit as one trial, since its searches are not independent."""
    return f"client\x00{client_id}\x00{text}" if client_id is not None else f"query\x00{text}"


@dataclass(frozen=True)
class ShownQuery:
    """One interleaved result list as it was shown (the UBI query record)."""

    query_id: str
    experiment_id: str
    client_id: str | None
    user_query: str
    timestamp: str
    interleaving: Interleaving
    offset: int = 0  # hits before this page (shown ids are interleaving.ids[offset:])

    @property
    def shown(self) -> tuple[str, ...]:
        return self.interleaving.ids[self.offset :]

    @property
    def unit(self) -> str:
        """The searches that share this list's coins (`randomisation_unit`)."""
        return randomisation_unit(self.client_id, self.user_query)

    def to_json(self) -> dict[str, Any]:
        inter = self.interleaving
        return {
            "query_id": self.query_id,
            "experiment_id": self.experiment_id,
            "client_id": self.client_id,
            "user_query": self.user_query,
            "timestamp": self.timestamp,
            "query_response_hit_ids": list(self.shown),
            "interleaving": {
                "method": inter.method,
                "ids": list(inter.ids),
                "teams": list(inter.teams),
                "a": list(inter.a),
                "b": list(inter.b),
                "offset": self.offset,
            },
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "ShownQuery":
        inter = raw["interleaving"]
        return cls(
            query_id=str(raw["query_id"]),
            experiment_id=str(raw["experiment_id"]),
            client_id=raw.get("client_id"),
            user_query=str(raw.get("user_query") or ""),
            timestamp=str(raw["timestamp"]),
            interleaving=Interleaving(
                method=str(inter["method"]),
                ids=tuple(inter["ids"]),
                teams=tuple(inter["teams"]),
                a=tuple(inter["a"]),
                b=tuple(inter["b"]),
            ),
            offset=int(inter.get("offset", 0)),
        )


@dataclass(frozen=True)
class Event:
    """One UBI event about a shown query. `body` is the event as the client sent it."""

    event_id: str
    query_id: str
    experiment_id: str
    client_id: str | None
    action_name: str
    object_id: str | None
    position: int | None
    timestamp: str
    body: dict[str, Any] = field(default_factory=dict)
    # Who sent it: a pseudonymous key of the client's network address (the per-client quota).
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EventCounts:
    """What the quotas on events read: events stored for one query, for one client in one
    experiment, and in all."""

    query: int
    client: int
    total: int


@dataclass(frozen=True)
class ExperimentData:
    """What a report needs: how many queries were shown, how many click events came in,
    and each clicked query with the set of doc ids clicked on it, and when it was shown."""

    queries: int
    click_events: int
    clicked: list[tuple[Interleaving, frozenset[str]]]
    shown_at: list[str] = field(default_factory=list)  # ISO 8601 timestamps, in the order of `clicked`
    units: list[str] = field(default_factory=list)  # each clicked query's randomisation unit, in that order


@dataclass(frozen=True)
class Recorded:
    """What the store holds under an experiment id besides the experiment itself: the
    interleaved queries it showed and the events (clicks) about them."""

    queries: int
    events: int


class ExperimentExistsError(ConflictError):
    """An experiment with this id exists already."""


class EventStore(Protocol):
    def create_experiment(self, experiment: Experiment) -> None:
        """Store a new experiment; ExperimentExistsError when the id is taken,
        ConflictError when it is running and another one is."""
        ...

    def save_experiment(self, experiment: Experiment) -> None:
        """Replace a stored experiment (a changed traffic share or status);
        ConflictError when it is running and another one is."""
        ...

    def experiments(self) -> list[Experiment]:
        """Every experiment, oldest first."""
        ...

    def experiment(self, experiment_id: str) -> Experiment | None: ...

    def record_query(self, query: ShownQuery, *, if_running: bool = False) -> bool:
        """Store `query` (True). `if_running`: only while its experiment is stored as running,
        else nothing is written (False): a worker's copy of the running experiment may be
        RUNNING_TTL_SECONDS old, and a list recorded after the stop would count in a stopped
        experiment, or outlive a deleted one as records that seem kept on purpose."""
        ...

    def shown_query(self, query_id: str) -> ShownQuery | None: ...

    def take_back_query(self, query_id: str) -> None:
        """Remove the list recorded as `query_id`, which was never shown after all (the
        proxy's request for its page failed): an impression no one saw would count in the
        report's searches and as an unclicked impression in the judgments. Nothing when
        it is not stored."""
        ...

    def record_event(self, event: Event, *, if_experiment: bool = False) -> None:
        """Store `event`; DuplicateEventError when its id was stored before, StoreFullError
        when the store has no room left. `if_experiment`: NotFoundError, and nothing stored,
        when its experiment is no longer stored (SQLite checks in the write; OpenSearch
        just after it, and takes the event back)."""
        ...

    def count_events(self, query_id: str, experiment_id: str, source: str | None) -> EventCounts:
        """Events stored for `query_id`, for `source` in `experiment_id`, and in all: read
        for every event sent, so each is quick (no count of the whole store)."""
        ...

    def has_event(self, event_id: str) -> bool:
        """Is an event with this id stored (a retry of it would be a duplicate)?"""
        ...

    def experiment_data(self, experiment_id: str) -> ExperimentData: ...

    def impressions(self, experiment_id: str) -> Iterator[tuple[ShownQuery, frozenset[str]]]:
        """Every result list shown under `experiment_id` (clicked or not), with the ids of
        the shown hits clicked on it (click actions only), in query id order."""
        ...

    def recorded(self, experiment_id: str) -> Recorded:
        """The shown queries and events stored under `experiment_id` (its experiment may be gone)."""
        ...

    def delete_experiment(self, experiment_id: str, events: bool) -> Recorded:
        """Remove the experiment, if stored, and with `events` its shown queries and events
        too; returns what it held of them (removed, or kept). ConflictError when it is
        running, checked in the delete itself (a resume an instant before is seen)."""
        ...

    def close(self) -> None: ...


def open_event_store(settings: Settings, *, create: bool = True) -> EventStore:
    """The event store `settings` select: OpenSearch when a URL is set, else SQLite.
    `create=False` (a command that only reads) makes none: where there is none yet (no
    SQLite file, no experiments index), the store is an empty read-only view
    (`EmbeddedEventStore(None)`), which answers as a new store would; a SQLite file that
    exists is opened read-only (no write lock, no schema statements)."""
    if settings.opensearch_store is not None:
        from reranker.store.opensearch import OpenSearchStore

        events = OpenSearchEventStore(OpenSearchStore(settings.opensearch_store))
        try:
            if create or events.holds_experiments():
                return events
        except BaseException:
            events.close()  # the cluster could not say: its client is not left open
            raise
        events.close()
        return EmbeddedEventStore(None)
    path = settings.data_dir / "experiments.sqlite3"
    if create:
        return EmbeddedEventStore(path)
    return EmbeddedEventStore(path, read_only=True) if path.exists() else EmbeddedEventStore(None)


def _clicked_ids(rows: Iterable[Any]) -> dict[str, frozenset[str]]:
    """query id -> the object ids clicked on it, from (query_id, object_id) rows."""
    clicked: dict[str, set[str]] = {}
    for query_id, object_id in rows:
        if object_id is not None:
            clicked.setdefault(query_id, set()).add(object_id)
    return {query_id: frozenset(ids) for query_id, ids in clicked.items()}


def _experiment_gone(event: Event) -> NotFoundError:
    """Why an event is not recorded: its experiment was deleted since the caller read it."""
    return NotFoundError(f"experiment {event.experiment_id!r} of query {event.query_id!r} was deleted: it records no more events")


def _running_refusal(experiment_id: str) -> ConflictError:
    """Why a running experiment is not deleted: every worker would go on interleaving
    searches for it until it read the experiments again."""
    return ConflictError(
        f"experiment {experiment_id!r} is running: stop it first (`reranker ab set {experiment_id} --status stopped`, "
        'or PATCH /experiments/ID {"status": "stopped"}), then delete it'
    )


def _another_running(experiments: Sequence[Experiment], experiment: Experiment) -> None:
    """ConflictError when `experiment` would run beside another running one."""
    if experiment.status != "running":
        return
    for other in experiments:
        if other.status == "running" and other.id != experiment.id:
            raise ConflictError(f"experiment {other.id!r} is running; stop it first (one experiment runs at a time)")


# --- SQLite --------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (id TEXT PRIMARY KEY, created TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS queries (
    query_id TEXT PRIMARY KEY, experiment_id TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS queries_by_experiment ON queries (experiment_id);
CREATE TABLE IF NOT EXISTS events (
    event_id TEXT PRIMARY KEY, query_id TEXT NOT NULL, experiment_id TEXT NOT NULL,
    action_name TEXT NOT NULL, object_id TEXT, body TEXT NOT NULL, source TEXT
);
CREATE INDEX IF NOT EXISTS events_by_experiment ON events (experiment_id);
CREATE INDEX IF NOT EXISTS events_by_query ON events (query_id);
"""
# Added after the first version: a store made before gets the column, then its index.
_SOURCE_COLUMN = "ALTER TABLE events ADD COLUMN source TEXT"
_SOURCE_INDEX = "CREATE INDEX IF NOT EXISTS events_by_source ON events (experiment_id, source)"
# The events the store holds, kept by triggers in the transaction of every insert and delete
# (whichever process, or version, writes): the quota on all events reads one row, exact,
# where COUNT(*) reads the whole table, and the largest rowid over-counts once events are
# deleted with their experiment. A store made before gets it counted once, when opened.
_EVENT_COUNT = (
    "CREATE TABLE IF NOT EXISTS event_count (only INTEGER PRIMARY KEY CHECK (only = 1), events INTEGER NOT NULL)",
    "INSERT INTO event_count (only, events) SELECT 1, (SELECT COUNT(*) FROM events) WHERE NOT EXISTS (SELECT 1 FROM event_count)",
    "CREATE TRIGGER IF NOT EXISTS event_counted AFTER INSERT ON events BEGIN UPDATE event_count SET events = events + 1; END",
    "CREATE TRIGGER IF NOT EXISTS event_uncounted AFTER DELETE ON events BEGIN UPDATE event_count SET events = events - 1; END",
)


def _write_ahead_log(db: sqlite3.Connection, wait_seconds: float = 30.0) -> None:
    """Put `db` in WAL mode, waiting for the lock as every other statement does (the
    connection's timeout): a new file's switch needs it exclusively, and SQLite answers
    "database is locked" at once, without waiting, to one that asks while another switches
    (the workers of a service opening a new store together)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class EmbeddedEventStore:
    """An `EventStore` in one SQLite file; one connection per thread.

    path None: nothing on disk, an empty database in memory (one connection, shared by
    every thread) with the same schema, so every read answers as a new store would (no
    experiments, no events), and read-only (`query_only`), so a write is a `StoreError`
    instead of being lost: what a command that only reads opens where there is no store.

    read_only: a command that only reads, on a store that exists: opened `mode=ro`, with
    no schema statements and no write lock, so it answers beside a writer that holds the
    lock, and on a file the user may only read. A store an older version made (no
    `source` column, no event count) is read as it is: no read needs them."""

    def __init__(self, path: Path | None, *, read_only: bool = False) -> None:
        self.path: Path | str = path if path is not None else "(none yet: an empty read-only view)"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._empty: sqlite3.Connection | None = None
        self._read_only = read_only and path is not None
        if path is not None and path.is_dir():
            # SQLite says only "disk I/O error" or "unable to open database file".
            raise StoreError(f"cannot open the experiment store {path}: it is a folder (the store is a file of that name; move the folder away)")
        if self._read_only:
            self._check_tables()
            return
        try:
            if path is None:
                self._empty = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                self._connections.append(self._empty)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            # Connected here: a file SQLite cannot open is "cannot open the experiment store".
            self._db.execute("SELECT 1")
            # In one write transaction: the workers of a service open the store at once, and
            # each read-then-write of the schema (is the column there? add it) must see the
            # others' writes, or two add it and one fails ("duplicate column name"). The
            # event count is counted and then kept counted, with no insert between.
            with self._exclusive():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._run(statement)
                columns = {row[1] for row in self._run("PRAGMA table_info(events)")}
                if "source" not in columns:
                    self._run(_SOURCE_COLUMN)
                self._run(_SOURCE_INDEX)
                for statement in _EVENT_COUNT:
                    self._run(statement)
            if self._empty is not None:
                self._run("PRAGMA query_only=ON")
        except StoreError:
            raise  # it names the store already (and a full disk is a StoreFullError)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the experiment store {self.path}: {exc}") from None

    def _check_tables(self) -> None:
        """A read-only open's check that the file is an experiment store (it makes nothing)."""
        try:
            tables = {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error as exc:
            if exc.sqlite_errorname == "SQLITE_READONLY_DIRECTORY":
                raise StoreError(
                    f"cannot read the experiment store {self.path}: SQLite reads it through {self.path}-shm, which it cannot "
                    "make in a folder you may not write (it is there while a service has the store open)"
                ) from None
            raise StoreError(f"cannot open the experiment store {self.path}: {exc}") from None
        missing = [name for name in ("experiments", "queries", "events") if name not in tables]
        if missing:
            raise StoreError(
                f"cannot read the experiment store {self.path}: it has no table {', '.join(missing)} "
                "(a command that writes to it, such as `reranker ab create`, makes them)"
            )

    @property
    def _db(self) -> sqlite3.Connection:
        if self._empty is not None:
            return self._empty
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None and self._read_only:
            # mode=ro: SQLite takes no write lock and writes nothing to the file (in WAL mode
            # a reader never waits for a writer); a write is "attempt to write a readonly database".
            uri = f"{Path(self.path).resolve().as_uri()}?mode=ro"
            db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        if db is None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            _write_ahead_log(db)
            # FULL: a commit is on disk before the client hears "created".
            db.execute("PRAGMA synchronous=FULL")
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    def _run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            if "full" in str(exc).lower():  # SQLITE_FULL: the disk (or its quota) is full
                raise StoreFullError(
                    f"experiment store {self.path}: the disk is full ({exc}); events are refused until space is freed"
                ) from None
            raise StoreError(f"experiment store {self.path}: {exc}") from None

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One writer at a time across threads and processes (BEGIN IMMEDIATE takes
        SQLite's write lock first), so "is another experiment running?" and the write
        that depends on the answer cannot interleave with another such pair."""
        self._run("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._run("COMMIT")

    def create_experiment(self, experiment: Experiment) -> None:
        with self._exclusive():
            _another_running(self.experiments(), experiment)
            try:
                self._run("INSERT INTO experiments (id, created, body) VALUES (?, ?, ?)", (experiment.id, experiment.created, json.dumps(experiment.to_json())))
            except sqlite3.IntegrityError:
                raise ExperimentExistsError(f"experiment {experiment.id!r} exists already") from None

    def save_experiment(self, experiment: Experiment) -> None:
        with self._exclusive():
            _another_running(self.experiments(), experiment)
            self._run("UPDATE experiments SET body = ? WHERE id = ?", (json.dumps(experiment.to_json()), experiment.id))

    def experiments(self) -> list[Experiment]:
        rows = self._run("SELECT body FROM experiments ORDER BY created, id").fetchall()
        return [Experiment.from_json(json.loads(body)) for (body,) in rows]

    def experiment(self, experiment_id: str) -> Experiment | None:
        row = self._run("SELECT body FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
        return None if row is None else Experiment.from_json(json.loads(row[0]))

    def record_query(self, query: ShownQuery, *, if_running: bool = False) -> bool:
        row = (query.query_id, query.experiment_id, json.dumps(query.to_json()))
        if not if_running:
            self._run("INSERT OR REPLACE INTO queries (query_id, experiment_id, body) VALUES (?, ?, ?)", row)
            return True
        # One statement: a stop or delete committed by another worker is seen, never raced.
        written = self._run(
            "INSERT OR REPLACE INTO queries (query_id, experiment_id, body) SELECT ?, ?, ? WHERE EXISTS "
            "(SELECT 1 FROM experiments WHERE id = ? AND json_extract(body, '$.status') = 'running')",
            (*row, query.experiment_id),
        )
        return written.rowcount == 1

    def shown_query(self, query_id: str) -> ShownQuery | None:
        row = self._run("SELECT body FROM queries WHERE query_id = ?", (query_id,)).fetchone()
        return None if row is None else ShownQuery.from_json(json.loads(row[0]))

    def take_back_query(self, query_id: str) -> None:
        self._run("DELETE FROM queries WHERE query_id = ?", (query_id,))

    def record_event(self, event: Event, *, if_experiment: bool = False) -> None:
        row = (event.event_id, event.query_id, event.experiment_id, event.action_name, event.object_id, json.dumps(event.to_json()), event.source)
        insert = "INSERT INTO events (event_id, query_id, experiment_id, action_name, object_id, body, source)"
        try:
            if if_experiment:
                # In the INSERT itself: a delete committed since the caller checked (another
                # worker's) must not leave the event behind it.
                written = self._run(f"{insert} SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM experiments WHERE id = ?)", (*row, event.experiment_id))
            else:
                written = self._run(f"{insert} VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        except sqlite3.IntegrityError:
            raise DuplicateEventError(f"event {event.event_id!r} was recorded before") from None
        if written.rowcount != 1:
            raise _experiment_gone(event)

    def count_events(self, query_id: str, experiment_id: str, source: str | None) -> EventCounts:
        (for_query,) = self._run("SELECT COUNT(*) FROM events WHERE query_id = ?", (query_id,)).fetchone()
        (for_client,) = self._run(
            "SELECT COUNT(*) FROM events WHERE experiment_id = ? AND source IS ?", (experiment_id, source)
        ).fetchone()
        (total,) = self._run("SELECT events FROM event_count").fetchone()
        return EventCounts(int(for_query), int(for_client), int(total))

    def has_event(self, event_id: str) -> bool:
        return self._run("SELECT 1 FROM events WHERE event_id = ?", (event_id,)).fetchone() is not None

    def experiment_data(self, experiment_id: str) -> ExperimentData:
        (queries,) = self._run("SELECT COUNT(*) FROM queries WHERE experiment_id = ?", (experiment_id,)).fetchone()
        actions = ",".join("?" * len(CLICK_ACTIONS))
        rows = self._run(
            f"SELECT query_id, object_id FROM events WHERE experiment_id = ? AND action_name IN ({actions})",
            (experiment_id, *sorted(CLICK_ACTIONS)),
        ).fetchall()
        clicked: dict[str, set[str]] = {}
        for query_id, object_id in rows:
            clicked.setdefault(query_id, set()).add(object_id)
        ids = sorted(clicked)
        shown: list[tuple[Interleaving, frozenset[str]]] = []
        shown_at: list[str] = []
        units: list[str] = []
        for start in range(0, len(ids), _PAGE):
            batch = ids[start : start + _PAGE]
            marks = ",".join("?" * len(batch))
            for (body,) in self._run(f"SELECT body FROM queries WHERE query_id IN ({marks}) ORDER BY query_id", batch):
                query = ShownQuery.from_json(json.loads(body))
                shown.append((query.interleaving, frozenset(clicked[query.query_id])))
                shown_at.append(query.timestamp)
                units.append(query.unit)
        return ExperimentData(queries=int(queries), click_events=len(rows), clicked=shown, shown_at=shown_at, units=units)

    def impressions(self, experiment_id: str) -> Iterator[tuple[ShownQuery, frozenset[str]]]:
        clicked = _clicked_ids(
            self._run(
                f"SELECT query_id, object_id FROM events WHERE experiment_id = ? AND action_name IN ({','.join('?' * len(CLICK_ACTIONS))})",
                (experiment_id, *sorted(CLICK_ACTIONS)),
            )
        )
        # fetchmany: an experiment's lists are read a page at a time, never all at once
        cursor = self._run("SELECT body FROM queries WHERE experiment_id = ? ORDER BY query_id", (experiment_id,))
        while rows := cursor.fetchmany(_PAGE):
            for (body,) in rows:
                query = ShownQuery.from_json(json.loads(body))
                yield query, clicked.get(query.query_id, frozenset())

    def recorded(self, experiment_id: str) -> Recorded:
        (queries,) = self._run("SELECT COUNT(*) FROM queries WHERE experiment_id = ?", (experiment_id,)).fetchone()
        (events,) = self._run("SELECT COUNT(*) FROM events WHERE experiment_id = ?", (experiment_id,)).fetchone()
        return Recorded(int(queries), int(events))

    def delete_experiment(self, experiment_id: str, events: bool) -> Recorded:
        with self._exclusive():  # the experiment and its records go together, or not at all
            row = self._run("SELECT body FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
            if row is not None and Experiment.from_json(json.loads(row[0])).status == "running":
                raise _running_refusal(experiment_id)
            held = self.recorded(experiment_id)
            self._run("DELETE FROM experiments WHERE id = ?", (experiment_id,))
            if events:
                self._run("DELETE FROM events WHERE experiment_id = ?", (experiment_id,))
                self._run("DELETE FROM queries WHERE experiment_id = ?", (experiment_id,))
        return held

    def close(self) -> None:
        with self._lock:
            for db in self._connections:
                db.close()
            self._connections.clear()
        self._local = threading.local()


# --- OpenSearch ----------------------------------------------------------------------------

_KEYWORD = {"type": "keyword"}
_STORED = {"type": "object", "enabled": False}
MAPPINGS: dict[str, dict[str, Any]] = {
    "experiments": {
        "dynamic": "strict",
        "properties": {
            "id": _KEYWORD, "rankers": _KEYWORD, "method": _KEYWORD, "traffic": {"type": "float"},
            "status": _KEYWORD, "created": {"type": "date"},
            # min_queries: min_units's old name (stored experiments have it; still written)
            "min_units": {"type": "integer"}, "min_queries": {"type": "integer"},
        },
    },
    "ubi_queries": {
        "dynamic": "strict",
        "properties": {
            "query_id": _KEYWORD, "experiment_id": _KEYWORD, "client_id": _KEYWORD,
            "user_query": {"type": "text"}, "timestamp": {"type": "date"},
            "query_response_hit_ids": _KEYWORD, "interleaving": _STORED,
        },
    },
    "ubi_events": {
        "dynamic": "strict",
        "properties": {
            "event_id": _KEYWORD, "query_id": _KEYWORD, "experiment_id": _KEYWORD, "client_id": _KEYWORD,
            "action_name": _KEYWORD, "object_id": _KEYWORD, "position": {"type": "integer"},
            "timestamp": {"type": "date"}, "body": _STORED, "source": _KEYWORD,
        },
    },
}
# A search of a missing index: what a read answers for it (no index is made to read it).
_NO_HITS: dict[str, Any] = {"hits": {"hits": []}}


class OpenSearchEventStore:
    """An `EventStore` in three indices beside the document alias."""

    def __init__(self, store: Any) -> None:
        self._store = store  # an OpenSearchStore: its client and its error translation
        self.names = {kind: f"{store.alias}-{kind}" for kind in MAPPINGS}
        self._ready: set[str] = set()

    def holds_experiments(self) -> bool:
        """Whether the experiments index exists (checked without making it)."""
        name = self.names["experiments"]
        return bool(self._store._call(f"checking index {name}", self._store.client.indices.exists, index=name))

    def _index(self, kind: str) -> str:
        """The index for `kind`, created (with its strict mapping) on first use by a
        write. Reads name `self.names[kind]` and go through `_read`, which makes none."""
        name = self.names[kind]
        if name not in self._ready:
            from opensearchpy.exceptions import RequestError

            client = self._store.client

            def create() -> None:
                try:
                    client.indices.create(index=name, body={"settings": {"number_of_shards": 1}, "mappings": MAPPINGS[kind]})
                except RequestError as exc:
                    if exc.error != "resource_already_exists_exception":  # else another worker won the race
                        raise

            if not self._store._call(f"checking index {name}", client.indices.exists, index=name):
                self._store._call(f"creating index {name}", create)
            else:
                # An index made by an earlier version lacks the fields added since (its
                # mapping is strict): adding fields to a mapping is allowed, and idempotent.
                # A cluster that blocks writes (a full disk) blocks this too: reads go on,
                # and the next call tries again.
                try:
                    self._store._call(
                        f"updating the mapping of {name}", client.indices.put_mapping, index=name, body={"properties": MAPPINGS[kind]["properties"]}
                    )
                except (StoreFullError, StoreUnavailableError) as exc:
                    log.warning("%s", exc)
                    return name
            self._ready.add(name)
        return name

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        """One client call on an event index (`index=` in kwargs). The indices are created
        once per process; if the cluster has lost one since (restored, wiped, deleted by
        hand), it is created again and the call retried once, instead of every later
        call failing until a restart."""
        index = kwargs.get("index")
        try:
            return self._store._call(what, fn, **kwargs)
        except IndexNotFoundError:
            if index not in self._ready:
                raise
            self._ready.discard(index)
            kind = next(kind for kind, name in self.names.items() if name == index)
            self._index(kind)
            return self._store._call(what, fn, **kwargs)

    def _read(self, what: str, fn: Any, empty: Any, **kwargs: Any) -> Any:
        """One read of an event index (`index=` in kwargs): a missing index answers `empty`,
        so that a read (`ab report`, `ab judgments`, a report over HTTP) makes no index
        and changes no mapping. One this process made before and the cluster has lost
        since is made again, with its mapping, by the next write into it: a write alone
        would have the cluster make it with a mapping of its own guessing."""
        from opensearchpy.exceptions import NotFoundError

        missing = object()

        def read(**kwargs: Any) -> Any:
            try:
                return fn(**kwargs)
            except NotFoundError as exc:
                if exc.error == "index_not_found_exception":  # else a missing document: `not_found` says
                    return missing
                raise

        found = self._store._call(what, read, **kwargs)
        if found is missing:
            self._ready.discard(kwargs["index"])
            return empty
        return found

    def _create(self, what: str, index: str, doc_id: str, body: dict[str, Any], **kwargs: Any) -> bool:
        """Write a document unless its id exists (op_type=create); False when it did."""
        from opensearchpy.exceptions import ConflictError

        def create(index: str) -> bool:
            try:
                self._store.client.index(index=index, id=doc_id, body=body, op_type="create", **kwargs)
            except ConflictError:
                return False
            return True

        created: bool = self._call(what, create, index=index)
        return created

    # One experiment runs at a time (the SQLite store takes a lock): checked before the write,
    # for the usual refusal, and again after it, for two started in the same instant. Each
    # write is searchable when it returns (refresh), so of two such starts the later check
    # sees the other's; a start that finds another running takes itself back. Both may then
    # be refused, never both kept.

    def create_experiment(self, experiment: Experiment) -> None:
        _another_running(self.experiments(), experiment)
        index = self._index("experiments")
        if not self._create("storing an experiment", index, experiment.id, experiment.to_json(), refresh="true"):
            raise ExperimentExistsError(f"experiment {experiment.id!r} exists already")
        if experiment.status == "running":
            self._alone_or_undone(experiment, lambda: self._call(
                "taking back an experiment", self._store.client.delete, index=index, id=experiment.id, refresh="true", not_found=None,
            ))

    def save_experiment(self, experiment: Experiment) -> None:
        _another_running(self.experiments(), experiment)
        index = self._index("experiments")
        before = self.experiment(experiment.id) if experiment.status == "running" else None
        self._call("storing an experiment", self._store.client.index, index=index, id=experiment.id, body=experiment.to_json(), refresh="true")
        if before is not None and before.status != "running":  # started by this save
            self._alone_or_undone(experiment, lambda: self._call(
                "taking back an experiment", self._store.client.index, index=index, id=experiment.id, body=before.to_json(), refresh="true",
            ))

    def _alone_or_undone(self, experiment: Experiment, undo: Callable[[], Any]) -> None:
        """ConflictError, after `undo`, when another experiment runs beside `experiment`."""
        other = next((e for e in self.experiments() if e.status == "running" and e.id != experiment.id), None)
        if other is not None:
            undo()
            raise ConflictError(
                f"experiment {other.id!r} was started in the same instant as {experiment.id!r}, which was not started "
                "(one experiment runs at a time): see which runs now, and try again"
            )

    def experiments(self) -> list[Experiment]:
        index = self.names["experiments"]
        # Every page: one search answers 1,000 at most, and the running one may be past them.
        items = [Experiment.from_json(source) for source in self._all(index, {"match_all": {}}, "id", source=True)]
        return sorted(items, key=lambda e: (e.created, e.id))

    def experiment(self, experiment_id: str) -> Experiment | None:
        index = self.names["experiments"]
        found = self._read("reading an experiment", self._store.client.get, None, index=index, id=experiment_id, not_found=None)
        return None if not found or not found.get("found") else Experiment.from_json(found["_source"])

    def record_query(self, query: ShownQuery, *, if_running: bool = False) -> bool:
        # Written, then checked (a get by id is real-time), and taken back if the experiment
        # no longer runs: a stop or delete stored before the check is seen, and one after
        # it finds the list written before it (`delete_experiment` refreshes first), so no
        # instant between the two lets a list through. The SQLite store checks in the write.
        index = self._index("ubi_queries")
        self._call("recording a query", self._store.client.index, index=index, id=query.query_id, body=query.to_json())
        if not if_running:
            return True
        experiment = self.experiment(query.experiment_id)
        if experiment is not None and experiment.status == "running":
            return True
        self._call("taking back a query", self._store.client.delete, index=index, id=query.query_id, not_found=None)
        return False

    def shown_query(self, query_id: str) -> ShownQuery | None:
        index = self.names["ubi_queries"]
        # A get by id is real-time: a query is found at once, before any refresh.
        found = self._read("reading a query", self._store.client.get, None, index=index, id=query_id, not_found=None)
        return None if not found or not found.get("found") else ShownQuery.from_json(found["_source"])

    def take_back_query(self, query_id: str) -> None:
        index = self._index("ubi_queries")
        self._call("taking back a query", self._store.client.delete, index=index, id=query_id, not_found=None)

    def record_event(self, event: Event, *, if_experiment: bool = False) -> None:
        index = self._index("ubi_events")
        if not self._create("recording an event", index, event.event_id, event.to_json()):
            raise DuplicateEventError(f"event {event.event_id!r} was recorded before")
        # Written, then checked, as `record_query`: an experiment deleted since the caller's
        # check takes its late event back with it.
        if if_experiment and self.experiment(event.experiment_id) is None:
            self._call("taking back an event", self._store.client.delete, index=index, id=event.event_id, not_found=None)
            raise _experiment_gone(event)

    def count_events(self, query_id: str, experiment_id: str, source: str | None) -> EventCounts:
        """Counted by search (exact), so as of the last refresh (1 s by default): a burst within
        that second can pass a quota by what it sends in that second."""
        index = self.names["ubi_events"]
        client = self._store.client
        by_query = {"query": {"term": {"query_id": query_id}}}
        for_query = self._read("counting events", client.count, {"count": 0}, index=index, body=by_query)
        by_client: dict[str, Any] = {"bool": {"filter": [{"term": {"experiment_id": experiment_id}}]}}
        if source is None:
            by_client["bool"]["must_not"] = [{"exists": {"field": "source"}}]
        else:
            by_client["bool"]["filter"].append({"term": {"source": source}})
        for_client = self._read("counting events", client.count, {"count": 0}, index=index, body={"query": by_client})
        total = self._read("counting events", client.count, {"count": 0}, index=index)
        return EventCounts(int(for_query["count"]), int(for_client["count"]), int(total["count"]))

    def has_event(self, event_id: str) -> bool:
        index = self.names["ubi_events"]
        # A get by id is real-time: an event is found at once, before any refresh.
        found = self._read("reading an event", self._store.client.get, None, index=index, id=event_id, _source=False, not_found=None)
        return bool(found and found.get("found"))

    def _all(self, index: str, query: dict[str, Any], key: str, source: Sequence[str] | bool = ("query_id", "object_id")) -> Iterator[dict[str, Any]]:
        """`source` (by default query_id and object_id) of every matching document: pages
        sorted by the unique keyword `key`, walked with search_after (no scroll context to leak);
        none from a missing index."""
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {"size": _PAGE, "query": query, "sort": [{key: "asc"}], "_source": source if isinstance(source, bool) else list(source)}
            if after is not None:
                body["search_after"] = after
            found = self._read("reading experiment data", self._store.client.search, _NO_HITS, index=index, body=body)
            hits = found["hits"]["hits"]
            yield from (hit["_source"] for hit in hits)
            if len(hits) < _PAGE:
                return
            after = hits[-1]["sort"]

    def experiment_data(self, experiment_id: str) -> ExperimentData:
        client = self._store.client
        queries_index, events_index = self.names["ubi_queries"], self.names["ubi_events"]
        # Reports are rare; make every acknowledged write visible to search first.
        for index in (queries_index, events_index):
            self._read("refreshing experiment data", client.indices.refresh, None, index=index)
        term = {"term": {"experiment_id": experiment_id}}
        counted = self._read("counting queries", client.count, {"count": 0}, index=queries_index, body={"query": term})
        clicks = {"bool": {"filter": [term, {"terms": {"action_name": sorted(CLICK_ACTIONS)}}]}}
        rows = list(self._all(events_index, clicks, "event_id"))
        clicked: dict[str, set[str]] = {}
        for row in rows:
            clicked.setdefault(row["query_id"], set()).add(row["object_id"])
        ids = sorted(clicked)
        shown: list[tuple[Interleaving, frozenset[str]]] = []
        shown_at: list[str] = []
        units: list[str] = []
        for start in range(0, len(ids), _PAGE):
            batch = ids[start : start + _PAGE]
            docs = self._read("reading queries", client.mget, {"docs": []}, index=queries_index, body={"ids": batch})["docs"]
            for doc in docs:
                if doc.get("found"):
                    query = ShownQuery.from_json(doc["_source"])
                    shown.append((query.interleaving, frozenset(clicked[query.query_id])))
                    shown_at.append(query.timestamp)
                    units.append(query.unit)
        return ExperimentData(queries=int(counted["count"]), click_events=len(rows), clicked=shown, shown_at=shown_at, units=units)

    def impressions(self, experiment_id: str) -> Iterator[tuple[ShownQuery, frozenset[str]]]:
        client = self._store.client
        queries_index, events_index = self.names["ubi_queries"], self.names["ubi_events"]
        for index in (queries_index, events_index):
            self._read("refreshing experiment data", client.indices.refresh, None, index=index)
        term = {"term": {"experiment_id": experiment_id}}
        clicks = {"bool": {"filter": [term, {"terms": {"action_name": sorted(CLICK_ACTIONS)}}]}}
        clicked = _clicked_ids((row["query_id"], row.get("object_id")) for row in self._all(events_index, clicks, "event_id"))
        for source in self._all(queries_index, term, "query_id", source=True):
            query = ShownQuery.from_json(source)
            yield query, clicked.get(query.query_id, frozenset())

    def recorded(self, experiment_id: str) -> Recorded:
        client = self._store.client
        term = {"query": {"term": {"experiment_id": experiment_id}}}
        counts = []
        for kind in ("ubi_queries", "ubi_events"):
            index = self.names[kind]
            # Writes are acknowledged before they are searchable: count every one of them.
            self._read("refreshing experiment data", client.indices.refresh, None, index=index)
            counts.append(int(self._read("counting experiment data", client.count, {"count": 0}, index=index, body=term)["count"]))
        return Recorded(*counts)

    def delete_experiment(self, experiment_id: str, events: bool) -> Recorded:
        """The experiment first, then its records (by query, after a refresh): a failure
        between the two leaves records without an experiment, which a second delete removes."""
        client = self._store.client
        held = self.recorded(experiment_id)
        index = self._index("experiments")
        for _ in range(3):  # each turn, the experiment was changed between its read and the delete
            found = self._call("reading an experiment", client.get, index=index, id=experiment_id, not_found=None)
            if not found or not found.get("found"):
                break
            if Experiment.from_json(found["_source"]).status == "running":
                raise _running_refusal(experiment_id)
            # Only the version read: a resume stored since makes it a 409, read again.
            deleted = self._call(
                "deleting an experiment", client.delete, index=index, id=experiment_id, refresh="true",
                if_seq_no=found["_seq_no"], if_primary_term=found["_primary_term"], not_found=None, conflict=None,
            )
            if deleted is not None:
                break
        else:
            raise ConflictError(f"experiment {experiment_id!r} changed three times while it was being deleted; try again")
        if events:
            term = {"query": {"term": {"experiment_id": experiment_id}}}
            for kind in ("ubi_events", "ubi_queries"):
                # A delete by query sees what the last refresh made searchable: a list or an
                # event written since (by a worker that found the experiment before this
                # delete) would be left behind it.
                self._call("refreshing experiment data", client.indices.refresh, index=self._index(kind))
                self._call(
                    "deleting experiment data", client.delete_by_query, index=self._index(kind), body=term, refresh="true", conflicts="proceed"
                )
        return held

    def close(self) -> None:
        self._store.close()

