"""Online experiments over HTTP: UBI click events in, experiment reports out.

    POST  /events              one User Behavior Insights event about an interleaved query
    GET   /experiments         every experiment
    POST  /experiments         start one (admin key)
    GET   /experiments/<id>    the experiment and its report: clicks, wins, winner, p-value
    GET   /experiments/<id>/timeline?interval=auto|hour|day
                               the report over time: wins so far per hour or day, with the
                               first ranker's share of them, its confidence interval, p-value
    PATCH /experiments/<id>    change its traffic share or stop / restart it (admin key)
    DELETE /experiments/<id>?events=keep|delete   delete a stopped one (admin key)

Reading is open (the dashboard reads it); every change needs RERANKER_ADMIN_API_KEY as a
bearer token. The rules themselves (what a valid event is, when an experiment may run,
how a winner is named) live in `reranker.experiments`, shared with `reranker ab`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from flask import Blueprint, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.routing import BaseConverter

from reranker import experiments as ex
from reranker.config import ServiceSettings
from reranker.errors import DuplicateEventError, InputError, NotFoundError, QuotaExceededError, StoreFullError
from reranker.service.bodies import client_source, json_object, require_bearer
from reranker.service.errors import ApiError, bad_request
from reranker.service.operations import Reply, guards, operation
from reranker.service.reranking import runtime
from reranker.service.schema import (
    EventRecorded,
    ExperimentAnswer,
    ExperimentChange,
    ExperimentDeleted,
    ExperimentReport,
    Experiments,
    ExperimentTimeline,
    NewExperiment,
    UbiEvent,
    read,
)
from reranker.store.events import Event, EventStore
from reranker.text import counted

blueprint = Blueprint("experiments", __name__)


class ExperimentIdConverter(BaseConverter):
    """One path segment, except the proxy's `_search`, `_msearch` and `_count`, so that
    /experiments/_search still reaches an OpenSearch index named "experiments" (no
    experiment id starts with "_": `experiments.ID_PATTERN`)."""

    regex = r"(?!(?:_m?search|_count)$)[^/]+"


EXPERIMENT_ID = {"experiment_id": {"type": "string", "minLength": 1, "pattern": "^(?!(?:_m?search|_count)$)[^/]+$"}}


@blueprint.record_once
def _register_converter(state: BlueprintSetupState) -> None:
    state.app.url_map.converters["experiment_id"] = ExperimentIdConverter


@guards("admin")
def _require_admin() -> None:
    key = runtime().limits.admin_api_key
    require_bearer(
        [key] if key else [],
        unset="experiment changes are disabled: set RERANKER_ADMIN_API_KEY to allow them (or use `reranker ab` on the server)",
        unset_status=403,
    )


def _runnable(rankers: Sequence[str]) -> None:
    """409 ranker_unavailable_exception when a ranker cannot run on this index (doc2vec
    without a trained model): an experiment with it would silently collect nothing."""
    engine = runtime().engine()
    for name in rankers:
        engine.check_ranker(engine.ranker(name))


@blueprint.post("/events")
@operation(
    "record a UBI event (a click) about an interleaved search",
    body=UbiEvent,
    answers={201: Reply("recorded", EventRecorded)},
    errors=(400, 404, 409, 413, 429, 502, 503, 507),
)
def events() -> Any:
    """Record one UBI event: 201 created, 409 when it was recorded before (a retry)."""
    rt = runtime()
    body = json_object()
    store = rt.experiments.store()
    try:
        event = replace(ex.read_event(body, read(UbiEvent, body), store), source=client_source(rt.limits.trusted_proxies))
        check_event_quota(store, event, rt.limits)
        store.record_event(event, if_experiment=True)
    except DuplicateEventError:
        rt.metrics.events.labels("duplicate").inc()
        raise
    except (InputError, NotFoundError, ApiError, QuotaExceededError, StoreFullError):
        rt.metrics.events.labels("rejected").inc()
        raise
    rt.metrics.events.labels("created").inc()
    response = jsonify(result="created", event_id=event.event_id, query_id=event.query_id, experiment=event.experiment_id)
    response.status_code = 201
    return response


def check_event_quota(store: EventStore, event: Event, limits: ServiceSettings) -> None:
    """QuotaExceededError (429) once a query holds RERANKER_EVENTS_PER_QUERY events, its
    client (by network address) RERANKER_EVENTS_PER_CLIENT in this experiment, or the store
    RERANKER_MAX_EVENTS in all: events need no key (a page sends them), so these bound what
    anyone can make the service write, and what one client can take of the whole."""
    counts = store.count_events(event.query_id, event.experiment_id, event.source)
    refusal = None
    if counts.query >= limits.events_per_query:
        refusal = f"query {event.query_id!r} has {counted(counts.query, 'event')} recorded, the most one query may hold (RERANKER_EVENTS_PER_QUERY)"
    elif counts.client >= limits.events_per_client:
        refusal = (
            f"this client (its network address) has sent {counted(counts.client, 'event')} to experiment {event.experiment_id!r}, "
            "the most one client may (RERANKER_EVENTS_PER_CLIENT); behind a reverse proxy, set RERANKER_TRUSTED_PROXIES "
            "so that clients are told apart by the address it forwards"
        )
    elif counts.total >= limits.max_events:
        refusal = (
            f"the event store holds {counted(counts.total, 'event')}, the most it may (RERANKER_MAX_EVENTS): an operator must archive "
            "or end experiments before more are recorded"
        )
    if refusal is not None:
        # A retry of a stored event (its 201 lost on the way) is the 409 the client stops at,
        # not a 429 that sends it back later, for ever.
        if store.has_event(event.event_id):
            raise DuplicateEventError(f"event {event.event_id!r} was recorded before")
        raise QuotaExceededError(refusal)


@blueprint.get("/experiments")
@operation("every experiment", answers={200: Reply("experiments, oldest first", Experiments)}, errors=(502, 503))
def experiments() -> Any:
    return jsonify(experiments=[e.to_json() for e in runtime().experiments.store().experiments()])


@blueprint.post("/experiments")
@operation(
    "start an experiment (admin key)",
    security="admin",
    body=NewExperiment,
    answers={201: Reply("started", ExperimentAnswer)},
    errors=(400, 401, 403, 409, 413, 502, 503),
)
def create() -> Any:
    rt = runtime()
    asked = read(NewExperiment, json_object())
    experiment = ex.new_experiment(asked.id, asked.rankers, method=asked.method, traffic=asked.traffic, min_units=asked.units_to_decide)
    _runnable(experiment.rankers)
    ex.create(rt.experiments.store(), experiment)
    rt.experiments.changed()
    response = jsonify(experiment=experiment.to_json())
    response.status_code = 201
    return response


@blueprint.get("/experiments/<experiment_id:experiment_id>")
@operation(
    "an experiment and its report: clicks, wins per ranker, winner, always-valid p-value",
    path=EXPERIMENT_ID,
    answers={200: Reply("the report so far", ExperimentReport)},
    errors=(404, 502, 503),
)
def show(experiment_id: str) -> Any:
    store = runtime().experiments.store()
    experiment = ex.find(store, experiment_id)
    return jsonify(experiment=experiment.to_json(), report=ex.report(store, experiment).to_json())


@blueprint.get("/experiments/<experiment_id:experiment_id>/timeline")
@operation(
    "an experiment's report over time: per hour or day, the wins so far, the first ranker's share of them with its confidence interval, p-value",
    path=EXPERIMENT_ID,
    query={"interval": {"type": "string", "enum": ["auto", *ex.INTERVALS], "default": "auto",
                        "description": "auto: by the hour while the clicked queries span at most 7 days, else by the day"}},
    answers={200: Reply("the periods with clicked queries, oldest first", ExperimentTimeline)},
    errors=(400, 404, 502, 503),
)
def timeline(experiment_id: str) -> Any:
    store = runtime().experiments.store()
    experiment = ex.find(store, experiment_id)
    found = ex.timeline(store, experiment, request.args.get("interval", "auto"))
    return jsonify(experiment=experiment.to_json(), **found.to_json())


@blueprint.patch("/experiments/<experiment_id:experiment_id>")
@operation(
    "change an experiment's traffic share or status (admin key)",
    security="admin",
    path=EXPERIMENT_ID,
    body=ExperimentChange,
    answers={200: Reply("changed", ExperimentAnswer)},
    errors=(400, 401, 403, 404, 409, 413, 502, 503),
)
def change(experiment_id: str) -> Any:
    rt = runtime()
    asked = read(ExperimentChange, json_object())
    try:
        experiment = ex.update(rt.experiments.store(), experiment_id, traffic=asked.traffic, status=asked.status, check_rankers=_runnable)
    finally:
        rt.experiments.changed()
    return jsonify(experiment=experiment.to_json())


@blueprint.delete("/experiments/<experiment_id:experiment_id>")
@operation(
    "delete a stopped experiment, its shown queries and events kept or deleted as `events` says (admin key)",
    security="admin",
    path=EXPERIMENT_ID,
    query={"events": {"type": "string", "enum": ["keep", "delete"], "description": "keep the experiment's shown queries and events in the store, or delete them"}},
    required_query=("events",),
    answers={200: Reply("deleted", ExperimentDeleted)},
    errors=(400, 401, 403, 404, 409, 502, 503),
)
def delete(experiment_id: str) -> Any:
    rt = runtime()
    choice = request.args.get("events")
    if choice not in ("keep", "delete"):
        # A missing parameter is the usual mistake: say so, not "got None" (Python's word).
        got = "it is missing" if choice is None else f"got {choice!r}"
        raise bad_request(
            "[events] must be keep or delete (?events=keep or ?events=delete): say whether the experiment's shown "
            f"queries and click events stay in the store (for analysis) or go with it; {got}"
        )
    try:
        deleted = ex.delete(rt.experiments.store(), experiment_id, events=choice == "delete")
    finally:
        rt.experiments.changed()
    return jsonify(deleted.to_json())
