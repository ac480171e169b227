"""What one worker process holds, and reranking that fails open.

`Runtime` is built once per app (so once per gunicorn worker, after the fork): the
`Engine` (word vectors memory-mapped read-only, so the OS shares their pages between
workers; the OpenSearch client is created lazily in this process), a small thread pool
that lets a request stop waiting for a ranker at its deadline, and the cache of topics
computed from request texts.

Failing open: every rerank runs against a deadline (RERANKER_DEADLINE_MS). A ranker that
raises, or is still running when the deadline passes, or candidates whose topics cannot
be fetched, give the first-stage order with status "degraded" and the reason, never an
error. Only a first stage that cannot run (the cluster is down) is an error (503).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from flask import current_app

from reranker.errors import (
    RankerUnavailableError,
    RerankerError,
    StoreError,
    StoreUnavailableError,
)
from reranker.experiments import Experiments, assignment_key, utc_now
from reranker.interleaving import TEAM_A, interleave
from reranker.pipeline import Ranking, explained_ranker, first_stage_depth, past_window_reason, ranking_status, rescored
from reranker.rankers import CandidateSet, FirstStage, Ranker, Scores, get_ranker, unweighted_reason, weighted_ranker_names
from reranker.rankers.fusion import FusionPart
from reranker.service.errors import ApiError, bad_request, describe
from reranker.service.metrics import endpoint_label
from reranker.service.schema import Candidate as SentCandidate
from reranker.store.events import Experiment, ShownQuery, randomisation_unit
from reranker.text import SNIPPET_WORDS, opening, rounded
from reranker.types import Candidate, Explanation, Filter, Query, TopicBatch

if TYPE_CHECKING:
    from reranker.config import Settings
    from reranker.pipeline import Engine
    from reranker.service.metrics import Metrics

log = logging.getLogger(__name__)


class DeadlineExceeded(Exception):
    """Raised inside a rerank job that notices its request has given up on it."""


class Deadline:
    """A point in time a request must answer by (monotonic clock), and the stage before
    the rerank that spent part of it (`spent_on`), so that a late answer can say which
    stage used the time: a stalled cluster's first stage, or the ranker."""

    def __init__(self, milliseconds: float) -> None:
        self.milliseconds = milliseconds
        self.started = time.monotonic()
        self.at = self.started + milliseconds / 1000.0
        self.before: tuple[str, float] | None = None  # (stage, its milliseconds)

    def spent_on(self, stage: str) -> None:
        """`stage` ran from the deadline's start until now (the rerank comes next)."""
        self.before = (stage, 1000 * (time.monotonic() - self.started))

    def late(self, what: str) -> str:
        """Why the rerank did not finish: `what` ("ranker 'wmd'") and the deadline, or the
        stage before it when that stage took most of the time."""
        deadline = f"the {self.milliseconds:g} ms deadline"
        if self.before is None:
            return f"{what} did not finish within {deadline}"
        stage, spent = self.before
        left = self.milliseconds - spent
        if left <= 0:
            return f"{stage} took {rounded(spent)} ms, past {deadline}: no time was left for {what}"
        if spent >= left:
            return f"{stage} took {rounded(spent)} ms of {deadline}: {what} did not finish in the {rounded(left)} ms left"
        return f"{what} did not finish within {deadline}; {stage} took {rounded(spent)} ms of it"

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def check(self) -> None:
        if time.monotonic() >= self.at:
            raise DeadlineExceeded()


@dataclass(frozen=True)
class RequestDocument:
    """A candidate a caller sends: a stored id, a text, or both (the id wins if stored).

    first_stage_score: the caller's own score (e.g. BM25), used by fusion rankers; None if
    absent (then `Engine.first_stage` supplies one).
    """

    id: str | None
    text: str | None
    first_stage_score: float | None = None


def request_documents(candidates: Sequence[SentCandidate]) -> list[RequestDocument]:
    """The candidates of a rerank request (/rerank, Cohere's) as the runtime takes them."""
    return [RequestDocument(candidate.id, candidate.text, candidate.score) for candidate in candidates]


@dataclass(frozen=True)
class Reranked:
    """The outcome of one rerank.

    order: positions of the candidates in the new order (the first-stage order when
        degraded).
    scores: (N,) what the order follows (a fusion's fused score), or None when degraded.
    ranker_scores: (N,) the ranker's own scores (a fusion's base ranker), or None.
    parts: the terms `scores` adds up (see `Ranking.parts`); empty when degraded.
    status: "ok" | "degraded" | "query_out_of_vocabulary" (word vectors add 0, by design)
        | "partial" (the ranker ran out of its time budget and ordered some candidates
        by a bound; see reason) | "tied" (every candidate got the same score)
        | "not_reranked" (a /search page past the window: nothing was scored).
    reason: why, when status is not "ok".
    first_stage: where the first-stage scores the ranker read came from (`FirstStage`).
    """

    order: list[int]
    scores: Scores | None
    status: str
    reason: str | None
    rerank_ms: float
    ranker_scores: Scores | None = None
    parts: tuple[FusionPart, ...] = ()
    first_stage: FirstStage = "scores"

    def hit_scores(self, position: int) -> dict[str, float | None]:
        """{"score", "ranker_score"} of one candidate, for a response body: None when
        degraded, and for a hit past the reranked window (it keeps its BM25 place)."""
        if self.scores is None or self.ranker_scores is None or position >= len(self.scores):
            return {"score": None, "ranker_score": None}
        return {"score": float(self.scores[position]), "ranker_score": float(self.ranker_scores[position])}


@dataclass(frozen=True)
class Interleaved:
    """A window answered by an experiment: both rankers' outcomes and the list shown.

    positions: window positions of the hits, best first, from `offset` on (the page).
    teams: per hit, the experiment ranker that put it there (TEAM_A / TEAM_B).
    """

    query_id: str
    experiment: Experiment
    positions: list[int]
    teams: list[str]
    a: Reranked
    b: Reranked

    def outcome_of(self, team: str) -> Reranked:
        return self.a if team == TEAM_A else self.b

    @property
    def rerank_ms(self) -> float:
        return self.a.rerank_ms + self.b.rerank_ms

    def fields(self) -> dict[str, Any]:
        """What a response (/search's body, the proxy's ext.rerank) says about it: ranker
        "interleaved"; status "ok" when both rankers were, else the first problem (never
        "degraded": a degraded ranker sends the search out of the experiment); the query
        id that click events name; the experiment."""
        status = next((status_fields(o) for o in (self.a, self.b) if o.status != "ok"), {"status": "ok"})
        e = self.experiment
        return {
            "ranker": "interleaved",
            **status,
            "query_id": self.query_id,
            "experiment": {"id": e.id, "method": e.method, "rankers": list(e.rankers)},
        }


class Runtime:
    """The per-process state behind every route."""

    def __init__(self, settings: "Settings", metrics: "Metrics") -> None:
        self.settings = settings
        self.limits = settings.service
        self.metrics = metrics
        get_ranker(self.limits.default_ranker)  # RERANKER_DEFAULT_RANKER must name a ranker: fail at start, not per request
        self._engine: "Engine | None" = None
        self._lock = threading.Lock()
        # Rerank jobs run here so that a request can stop waiting at its deadline; a job
        # that overruns finishes in the background (jobs check the deadline and stop early).
        self._pool = ThreadPoolExecutor(max_workers=max(2, settings.service.threads), thread_name_prefix="rerank")
        # Requests that may wait on the cluster or a ranker, at once: one thread fewer
        # than the server has, so /healthz always finds one (see create_app).
        self.slot_count = max(1, settings.service.threads - 1)
        self.slots = threading.BoundedSemaphore(self.slot_count)
        self.experiments = Experiments(settings)

    # --- long-lived pieces ---------------------------------------------------------------

    def engine(self) -> "Engine":
        """The Engine of this process, built on first use (after gunicorn's fork).

        One built while the cluster did not say which vectors its index has serves this
        request only; the next request asks again.
        """
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    from reranker.pipeline import build_engine

                    engine = build_engine(self.settings)
                    engine.on_text_topics = self._count_text_topics
                    if engine.provisional:
                        return engine
                    try:
                        # Once per worker, here rather than in a WMD request, whose time
                        # budget the loading would take whole (about a second).
                        if self.limits.preload_wmd:
                            engine.load_wmd()
                    except RerankerError as exc:  # WMD requests say so; the rest is served
                        log.warning("the wmd ranker cannot run: %s", exc)
                    try:
                        # What the default ranker reads of the index, made now: with no index
                        # yet, the vectors' own centering (half a second) for sent texts.
                        engine.check_ranker(engine.ranker(self.limits.default_ranker))
                    except RerankerError as exc:  # its requests say so
                        log.warning("the default ranker cannot run yet: %s", exc)
                    self._engine = engine
        return self._engine

    def _count_text_topics(self, result: str) -> None:
        self.metrics.topic_cache.labels(result).inc()

    def warm(self) -> str:
        """Build the Engine now (a worker booting), WMD's machinery included, so the first
        request does not wait; what it did, in words, for the worker's start-up log line.

        A failure is logged, not raised: the worker still serves /healthz, and /readyz
        reports the problem until it is fixed.
        """
        started = time.perf_counter()
        try:
            engine = self.engine()
        except RerankerError as exc:
            log.warning("not ready yet: %s", exc)
            return f"not ready yet ({type(exc).__name__})"
        if engine.provisional:
            return "not ready yet (the cluster has not said which vectors its index has)"
        loaded = "engine and WMD" if self.limits.preload_wmd else "engine (not WMD: RERANKER_PRELOAD_WMD=false)"
        return f"{loaded} loaded in {time.perf_counter() - started:.2f} s ({engine.vectors.info.name})"

    def ranker(self, name: str | None, fusion_weight: float | None = None, where: str = "") -> Ranker:
        """The ranker a request names (or the default), with the request's fusion weight
        (or RERANKER_FUSION_WEIGHT). UnknownRankerError lists the valid names; ApiError 400
        for a fusion weight given for a ranker that has none (`where`: the path of the
        request's block that holds them, such as "ext.rerank")."""
        name = self.limits.default_ranker if name is None else name  # "" names no ranker: a 400
        get_ranker(name)  # a typo is the caller's error (400) even while the engine cannot be built
        if fusion_weight is not None and name not in weighted_ranker_names():
            # Heard and ignored, it would answer as if the weight had been applied.
            raise bad_request(f"[{where + '.' if where else ''}fusion_weight] {unweighted_reason(name)}")
        return self.engine().ranker(name, fusion_weight)

    # --- reranking ---------------------------------------------------------------------

    def rerank(
        self,
        query: Query,
        window: CandidateSet,
        ranker: Ranker,
        deadline: Deadline,
        size: int,
    ) -> tuple[Reranked, CandidateSet | None]:
        """Score `window` (of `size` candidates) with `ranker` before `deadline`; the
        first-stage order otherwise.

        What the ranker needs of the candidates (their topics, computed for texts) is
        fetched inside the deadline, in the pool. Returns (outcome, the completed set).
        """
        engine = self.engine()
        started = time.perf_counter()
        built: list[CandidateSet] = []

        def job() -> Ranking:
            # Completed here, once: the explanations read the same fetched topics.
            given = engine.first_stage(query, window, ranker) if "first_stage" in ranker.needs else window
            candidates = engine.complete(given, ranker, deadline.check)
            built.append(candidates)
            deadline.check()
            return engine.rerank(query, candidates, ranker)

        # The job runs in a copy of this request's context: its store calls keep the
        # request's time limit.
        future = self._pool.submit(contextvars.copy_context().run, job)
        try:
            ranking = future.result(timeout=deadline.remaining())
        except RankerUnavailableError:
            raise  # the ranker cannot run on this index at all (no model): the caller's 409
        except FutureTimeout:
            future.cancel()
            return self._degraded(ranker, "timeout", deadline.late(f"ranker {ranker.name!r}"), started, size), None
        except DeadlineExceeded:
            return self._degraded(ranker, "timeout", deadline.late("computing topics"), started, size), None
        except StoreError as exc:  # the candidates' topics (or vectors) could not be fetched
            return self.degraded_topics(ranker, exc, size), None
        except Exception as exc:  # a failing ranker must not fail the search: fail open
            log.warning("ranker %s failed; answering in first-stage order", ranker.name, exc_info=True)
            return self._degraded(ranker, "ranker_error", f"ranker {ranker.name!r} failed: {describe(exc)}", started, size), None
        elapsed = 1000 * (time.perf_counter() - started)
        self.metrics.rerank_latency.labels(endpoint_label(), ranker.name).observe(elapsed / 1000)
        candidates = built[0]
        order, scores, own, parts = ranking.order, ranking.scores, ranking.ranker_scores, ranking.parts
        status, reason = ranking_status(query, ranker, ranking)
        if status == "partial":
            self.metrics.degraded.labels(endpoint_label(), ranker.name, "partial").inc()
        return Reranked(order, scores, status, reason, elapsed, own, parts, candidates.first_stage), candidates

    def _degraded(self, ranker: Ranker, kind: str, reason: str, started: float, size: int) -> Reranked:
        """The first-stage order of `size` candidates, counted as a fallback of `kind`."""
        self.metrics.degraded.labels(endpoint_label(), ranker.name, kind).inc()
        return Reranked(list(range(size)), None, "degraded", reason, 1000 * (time.perf_counter() - started))

    def degraded_topics(self, ranker: Ranker, exc: StoreError, size: int) -> Reranked:
        """The outcome when the topics of `size` candidates could not be fetched."""
        return self._degraded(ranker, "topics_unavailable", f"topics unavailable: {exc}", time.perf_counter(), size)

    def interleave(
        self,
        query: Query,
        window: CandidateSet,
        experiment: Experiment,
        deadline: Deadline,
        *,
        offset: int,
        size: int,
        client_id: str | None,
        text: str,
    ) -> tuple[Interleaved | None, CandidateSet | None]:
        """Both of `experiment`'s rankers over the same `window`, interleaved from rank 1
        to `offset + size`, and recorded under a new query id.

        Returns (None, ...) when this search cannot take part after all: a ranker degraded
        or cannot run on this index, or the query could not be recorded (so its clicks
        could never be credited). The caller then answers as without an experiment.
        """
        engine = self.engine()
        outcomes: list[Reranked] = []
        built: CandidateSet | None = None
        for name in experiment.rankers:
            try:
                outcome, candidates = self.rerank(query, window, engine.ranker(name), deadline, len(window.candidates))
            except RerankerError as exc:  # e.g. doc2vec with no model on this index: the user did not ask for it
                log.warning("experiment %s left out a search: %s", experiment.id, exc)
                outcome, candidates = None, None
            if outcome is None or outcome.status == "degraded":
                self.metrics.experiment_searches.labels(experiment.id, "left_out").inc()
                return None, built
            outcomes.append(outcome)
            if built is None:
                built = candidates
        a, b = outcomes
        ids = [c.doc_id for c in window.candidates]
        query_id = str(uuid.uuid4())
        # The pages of one query (by one client) are pages of one interleaving; one client's
        # other queries get coins of their own (the report counts each unit as one trial).
        seed = f"{experiment.id}\x00{randomisation_unit(client_id, text)}"
        shown = interleave(experiment.method, [ids[p] for p in a.order], [ids[p] for p in b.order], offset + size, seed)
        if len(shown.ids) <= offset:  # a page past the end shows nothing to click
            return None, built
        try:
            recorded = self.experiments.store().record_query(ShownQuery(query_id, experiment.id, client_id, text, utc_now(), shown, offset), if_running=True)
        except StoreError as exc:
            log.warning("experiment %s: the query could not be recorded, answered without the experiment: %s", experiment.id, exc)
            self.metrics.experiment_searches.labels(experiment.id, "left_out").inc()
            return None, built
        if not recorded:  # stopped or deleted through another worker or the CLI since this one read it
            self.experiments.changed()
            return None, built
        self.metrics.experiment_searches.labels(experiment.id, "interleaved").inc()
        where = {doc_id: position for position, doc_id in enumerate(ids)}
        positions = [where[doc_id] for doc_id in shown.ids[offset:]]
        return Interleaved(query_id, experiment, positions, list(shown.teams[offset:]), a, b), built

    # --- the native routes' two jobs ----------------------------------------------------

    def search(
        self,
        text: str,
        ranker: Ranker | None,
        *,
        window: int,
        size: int,
        offset: int,
        filters: Sequence[Filter],
        explain: bool,
        client_id: str | None = None,
        snippets: bool = False,
    ) -> dict[str, Any]:
        """BM25 top-`window`, reranked before the deadline; hits [offset, offset + size) of
        it, then of the BM25 hits past it in their order (`rescored`: every page a slice of
        one list, as Elasticsearch's rescore pages); a page past the window is not reranked.

        ranker: None when the request named none: the default ranker, or the running
        experiment's interleaving when this search falls in its traffic share (pages within
        the window only: past it, neither ranker chose the order).
        """
        engine = self.engine()
        deadline = Deadline(self.limits.deadline_ms)
        engine.check_index()
        within = offset + size <= window
        experiment = self.experiments.pick(assignment_key(client_id, text)) if ranker is None and within else None
        chosen = ranker or self.ranker(None)
        query = engine.query(text)
        started = time.perf_counter()
        # cluster down: 503
        candidates = tuple(engine.store.bm25(text, first_stage_depth(window, size, self.limits.max_window, offset), filters))
        retrieved = time.perf_counter()
        deadline.spent_on("the first stage (BM25)")
        reranked = candidates[:window]
        outcome: Reranked
        interleaved: Interleaved | None = None
        completed: CandidateSet | None = None  # the window with what the rankers read of it
        window_set = CandidateSet(reranked, exact_top=min(offset + size, len(reranked)), query_text=text)
        if experiment is not None:
            interleaved, completed = self.interleave(
                query, window_set, experiment, deadline, offset=offset, size=size, client_id=client_id, text=text
            )
        if interleaved is None and offset >= window:  # the page lies past the window: BM25's order, nothing to score
            reason = past_window_reason(window, "RERANKER_WINDOW, or window")
            outcome = Reranked(order=[], scores=None, status="not_reranked", reason=reason, rerank_ms=0.0)
        elif interleaved is None:
            outcome, completed = self.rerank(query, window_set, chosen, deadline, len(reranked))
        # (window position, the outcome that scored it, the ranker that placed it) per hit
        page: list[tuple[int, Reranked, Ranker]]
        if interleaved is not None:
            a, b = (engine.ranker(name) for name in interleaved.experiment.rankers)
            page = [
                (position, interleaved.outcome_of(team), a if team == TEAM_A else b)
                for position, team in zip(interleaved.positions, interleaved.teams)
            ]
        else:
            page = [(position, outcome, chosen) for position in rescored(outcome.order, len(candidates))[offset : offset + size]]
        explanations = self._explanations(query, completed, page) if explain else {}
        openings = self._snippets([candidates[position].doc_id for position, _, _ in page]) if snippets else {}
        hits = []
        for rank, (position, scored, _) in enumerate(page, start=offset + 1):
            candidate = candidates[position]
            hit: dict[str, Any] = {
                "id": candidate.doc_id,
                "rank": rank,
                **scored.hit_scores(position),
                "bm25_score": candidate.bm25_score,
                "bm25_rank": candidate.bm25_rank,
                "title": candidate.title,
            }
            if position in explanations:
                hit["explanation"] = explanations[position].to_json()
            if candidate.doc_id in openings:
                hit["snippet"], hit["snippet_truncated"] = openings[candidate.doc_id]
            hits.append(hit)
        if interleaved is not None:
            head: dict[str, Any] = {**interleaved.fields(), "query": text}
            rerank_ms = interleaved.rerank_ms
        else:
            head = {**status_fields(outcome), "query": text, "ranker": chosen.name}
            rerank_ms = outcome.rerank_ms
        return {
            **head,
            "window": window,
            "candidates": len(reranked),
            "hits": hits,
            "query_words": list(query.words),
            "oov_words": list(dict.fromkeys(query.oov)),
            "timings_ms": {"retrieve": round(1000 * (retrieved - started), 3), "rerank": round(rerank_ms, 3)},
        }

    def _snippets(self, doc_ids: list[str]) -> dict[str, tuple[str, bool]]:
        """The first SNIPPET_WORDS words of each hit's text (a page lists documents without
        a title by them) and whether the text goes on (so a page marks a cut, and only a cut);
        none when the store cannot be read: the hits matter more."""
        try:
            stored = self.engine().store.documents(doc_ids)
        except StoreError as exc:
            log.warning("snippets unavailable: %s", exc)
            return {}
        return {doc_id: opening(doc.text, SNIPPET_WORDS) for doc_id, doc in stored.items()}

    def _explanations(
        self, query: Query, completed: CandidateSet | None, page: list[tuple[int, Reranked, Ranker]]
    ) -> dict[int, Explanation]:
        """Explanations of the page's hits (`Engine.explain`) over the `completed` window,
        each by the ranker that placed it and the parts of its score; none for a degraded
        outcome (no scores) or a ranker that does not score by topics."""
        if completed is None:
            return {}
        wanted: dict[str, tuple[Ranker, Reranked, list[int]]] = {}
        for position, scored, ranker in page:
            # Hits past the window (positions the completed window lacks) were not scored.
            if scored.parts and explained_ranker(ranker) is not None and position < len(completed):
                wanted.setdefault(ranker.name, (ranker, scored, []))[2].append(position)
        found: dict[int, Explanation] = {}
        for ranker, scored, positions in wanted.values():
            try:
                found.update(self.engine().explain(query, completed, positions, ranker, scored.parts))
            except StoreError as exc:
                log.warning("explanations unavailable: %s", exc)
        return found

    def rerank_documents(
        self, text: str, ranker: Ranker, documents: Sequence[RequestDocument], exact_top: int | None = None
    ) -> tuple[Reranked, Query]:
        """Rerank caller-supplied candidates (stored ids and/or texts) before the deadline;
        the first `exact_top` positions (None: all) must be in the ranker's exact order.

        Raises ApiError 404 when an id is neither stored nor accompanied by a text.
        """
        scored = sum(doc.first_stage_score is not None for doc in documents)
        if 0 < scored < len(documents):
            raise bad_request(
                f"[documents] {scored} of {len(documents)} documents have a score: send a first-stage score "
                "with every document, or with none (then the service scores them itself)"
            )
        engine = self.engine()
        deadline = Deadline(self.limits.deadline_ms)
        query = engine.query(text)
        ids = [doc.id for doc in documents if doc.id is not None]
        stored: TopicBatch | None = None
        # Stored ids are looked up in the topic set the ranker reads (the paper's unless it
        # reads only the corrected ones), which says which exist; with no text beside them,
        # that batch is the window's, fetched once.
        corrected = "corrected_topics" in ranker.needs and "topics" not in ranker.needs
        if ids:
            engine.check_index()
            try:
                stored = engine.store.topics(ids, corrected=corrected)
            except StoreUnavailableError as exc:
                return self.degraded_topics(ranker, exc, len(documents)), query
            deadline.spent_on("reading the stored topics")
            # Each missing id once, in the order sent (a window may name one twice).
            unresolved = list(dict.fromkeys(doc.id for doc in documents if doc.id in stored.missing and doc.text is None))
            if unresolved:
                shown = ", ".join(repr(i) for i in unresolved[:10])
                more = f" and {len(unresolved) - 10} more" if len(unresolved) > 10 else ""
                raise ApiError(404, "document_missing_exception", f"no stored document with id {shown}{more}; send its text instead")
        window = replace(self._candidate_set(documents, stored, corrected), exact_top=exact_top, query_text=text)
        outcome, _ = self.rerank(query, window, ranker, deadline, len(documents))
        return outcome, query

    @staticmethod
    def _candidate_set(documents: Sequence[RequestDocument], stored: TopicBatch | None, corrected: bool) -> CandidateSet:
        """The caller's candidates: a stored document by its id, else by its text.

        stored: the topics of the ids sent (corrected or not), used as the window's when
        every candidate is a stored one.
        """
        found = set() if stored is None else set(stored.doc_ids) - set(stored.missing)
        doc_ids = tuple(doc.id if doc.id is not None else str(i) for i, doc in enumerate(documents))
        candidates = tuple(
            Candidate(doc_id=doc_ids[i], bm25_score=doc.first_stage_score or 0.0, bm25_rank=i + 1)
            for i, doc in enumerate(documents)
        )
        # Scores for all or for none: a fusion cannot scale some scores against none.
        first_stage: FirstStage = "scores" if documents and documents[0].first_stage_score is not None else "missing"
        # The Engine computes (and caches) what the ranker needs of a text; rankers reading
        # document text (WMD) use it too.
        texts = tuple(None if doc.id is not None and doc.id in found else doc.text for doc in documents)
        if any(text is not None for text in texts) or stored is None or stored.doc_ids != doc_ids:
            return CandidateSet(candidates, texts=texts, first_stage=first_stage)
        if corrected:
            return CandidateSet(candidates, corrected=stored, texts=texts, first_stage=first_stage)
        return CandidateSet(candidates, stored, texts=texts, first_stage=first_stage)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.experiments.close()
        if self._engine is not None:
            self._engine.store.close()


def runtime() -> Runtime:
    """The Runtime of the app serving this request (create_app puts it in app.extensions)."""
    found: Runtime = current_app.extensions["reranker"]
    return found


def answer_first_stage(outcome: Reranked) -> str:
    """The first stage a rerank answer stands on (/rerank's `first_stage`, the Cohere
    routes' X-Reranker-First-Stage): the documents' own `scores`, BM25 of
    their texts with the index's statistics (`index_bm25`, computed only for a ranker that
    reads a first stage), or their `order`: a degraded answer keeps the order sent, and
    documents sent without scores to a ranker that reads none (or no documents) have only
    their order as a first stage (their bm25_rank is their position)."""
    if outcome.status == "degraded" or outcome.first_stage == "missing":
        return "order"
    return outcome.first_stage


def status_fields(outcome: Reranked) -> dict[str, Any]:
    """{"status": ..., "reason": ...} for a response body (reason only when not ok)."""
    return {"status": outcome.status, **({"reason": outcome.reason} if outcome.reason else {})}
