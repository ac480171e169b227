"""The wire format: every request body the service reads, and every answer it documents.

Each body is one typed model (pydantic v2). The routes validate with `read(Model, body)`,
and /openapi.json is generated from the same models (`operations.py`), so what the service
accepts and what it publishes cannot drift apart. The answer models are documentation:
the routes build their answers elsewhere (`RankedDoc.to_json`, ...), and the schema fuzz
test checks every answer against them.

Rules every request model follows:
- strict types: "10" is not a number, 1 is not true, and a number is not a string; an
  integer may be written 10.0 (JSON Schema's `integer` is a mathematical integer, and the
  published schema says `integer`), but 10.5 is not one;
- unknown fields are refused, naming the known ones (Cohere's documents excepted);
- null stands for an absent field (so a client that sends `"size": null` gets the default),
  and the published schema says so: every optional field also takes null;
- limits that come from settings (RERANKER_MAX_TEXT_CHARS, RERANKER_MAX_WINDOW,
  RERANKER_MAX_DOCUMENTS) are checked against the `ServiceSettings` passed as validation
  context; a text or a document list beyond them is a 413, like an over-long body. The
  schema marks them (`LIMIT_KEY`), and /openapi.json publishes the running service's values
  (`publish_limits`), so a client (or schemathesis) reads the bounds it will be held to.

`read` turns pydantic's errors into the service's one error shape: a 400 (or 413) whose
reason names the field as a path (`[documents[3].text] must be a string, got a number`).
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from reranker.config import ServiceSettings
from reranker.experiments import ID_PATTERN, ID_RULE, MAX_MIN_UNITS, TIMESTAMP_PATTERN
from reranker.interleaving import DEFAULT_TRAFFIC
from reranker.pipeline import EXPLAIN_TOPICS
from reranker.rankers import ranker_names, unweighted_reason, weighted_ranker_names
from reranker.sequential import DEFAULT_MIN_UNITS
from reranker.service.bodies import json_type
from reranker.service.errors import ApiError
from reranker.store.events import CLICK_ACTIONS
from reranker.types import LONG_RANGE, MAX_FILTER_VALUE_CHARS, MAX_FILTERS, TopicSet

Model = TypeVar("Model", bound=BaseModel)


# A field's limit that comes from a setting: the name of a `ServiceSettings` attribute.
LIMIT_KEY = "x-reranker-limit"


def _published(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """What a Body's JSON Schema says beyond pydantic's: optional fields take null (null is
    absent), and the model's `schema_rules`: what its validators check across fields."""
    required = set(schema.get("required", ()))
    for name, prop in list(schema.get("properties", {}).items()):
        if name not in required and not _takes_null(prop):
            kept = {key: prop.pop(key) for key in ("title", "description", "default") if key in prop}
            schema["properties"][name] = {"anyOf": [prop, {"type": "null"}], **kept}
    schema.update(getattr(cls, "schema_rules", {}))


def _one_of_present(*names: str) -> dict[str, Any]:
    """JSON Schema for "at least one of these fields, not null"."""
    return {"anyOf": [{"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in names]}


def _takes_null(prop: dict[str, Any]) -> bool:
    return prop.get("type") == "null" or any(option.get("type") == "null" for option in prop.get("anyOf", ()))


class Body(BaseModel):
    """A request body (or an object inside one): strict, closed, null = absent."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, json_schema_extra=_published)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # Only a field's null: an unknown field is refused whatever its value.
        if isinstance(data, dict):
            known = {info.alias or name for name, info in cls.model_fields.items()}
            return {name: value for name, value in data.items() if value is not None or name not in known}
        return data


# --- field types --------------------------------------------------------------------------


def _limits(info: ValidationInfo) -> ServiceSettings | None:
    return info.context if isinstance(info.context, ServiceSettings) else None


def _within_text_limit(value: str, info: ValidationInfo) -> str:
    limits = _limits(info)
    if limits is not None and len(value) > limits.max_text_chars:
        raise PydanticCustomError(
            "content_too_long", "has {n} characters; the limit is {limit} (RERANKER_MAX_TEXT_CHARS)",
            {"n": len(value), "limit": limits.max_text_chars},
        )
    return value


def _within_window(value: int, info: ValidationInfo) -> int:
    limits = _limits(info)
    if limits is not None and value > limits.max_window:
        # A number of hundreds of digits (1e300, read as an integer) is said as the filters' is.
        given = str(value) if value < 10**15 else f"an integer of {len(str(value))} digits"
        raise PydanticCustomError("over_limit", "must be <= {limit} (RERANKER_MAX_WINDOW), got {n}", {"n": given, "limit": limits.max_window})
    return value


def _ranker_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = ranker_names()


def _integral(value: Any) -> Any:
    """10.0 as 10 (an integer in JSON Schema's sense); anything else as sent."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _limit(setting: str) -> Any:
    return Field(json_schema_extra={LIMIT_KEY: setting})


# After an int's constraints (so that they stay JSON Schema's minimum / maximum): 10.0 is 10.
INTEGRAL = BeforeValidator(_integral)
# Not empty and not only spaces (JSON Schema's `pattern` matches anywhere in the string).
NonBlank = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]
# A summary or a document's text, up to RERANKER_MAX_TEXT_CHARS (413 beyond).
QueryText = Annotated[NonBlank, AfterValidator(_within_text_limit), _limit("max_text_chars")]
Text = Annotated[str, AfterValidator(_within_text_limit), _limit("max_text_chars")]
RankerName = Annotated[str, Field(json_schema_extra=_ranker_enum, description="a registered ranker (GET /rankers); default RERANKER_DEFAULT_RANKER")]
def _weighs_the_ranker(weight: float, info: ValidationInfo) -> float:
    # Heard and ignored, a weight would be answered as if it had been applied. (An unknown
    # ranker is refused by name later; the default ranker, by the Runtime.)
    named = info.data.get("ranker")
    if named in ranker_names() and named not in weighted_ranker_names():
        raise PydanticCustomError("invalid", unweighted_reason(named))  # ranker names hold no braces
    return weight


# After `ranker` in each model that has both (the check reads it).
FusionWeight = Annotated[
    float, Field(ge=0, le=1, description="weight of the ranker in a min-max, z-score or maxp fusion with BM25 (default RERANKER_FUSION_WEIGHT); refused for a ranker without a weight"),
    AfterValidator(_weighs_the_ranker),
]
# _weighs_the_ranker: a fusion weight only with no ranker named, or a weighted one.
_WEIGHT_NEEDS_A_WEIGHTED_RANKER = {
    "anyOf": [{"properties": {"fusion_weight": {"type": "null"}}}, {"properties": {"ranker": {"enum": [*weighted_ranker_names(), None]}}}]
}
# At most RERANKER_MAX_WINDOW: a window, a page's size or its start.
WindowSize = Annotated[
    int, Field(ge=1, description="BM25 candidates to rerank (default RERANKER_WINDOW)"), INTEGRAL,
    AfterValidator(_within_window), _limit("max_window"),
]
# UBI's own limit (event.schema.json 1.0.0) for ids and names.
ShortId = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"\S")]
ClientId = Annotated[ShortId, Field(description="who searches (a browser, an app): keeps one client in one arm of a running experiment")]


# --- POST /search, /rerank, the proxy's ext.rerank ------------------------------------------


def _no_boolean_order(clause: FilterClause) -> FilterClause:
    if isinstance(clause.value, bool) and clause.op != "eq":
        raise PydanticCustomError("invalid", "a boolean value can only be compared with op eq")
    return clause


class FilterClause(Body):
    """One condition on a stored document's metadata field."""

    field: NonBlank
    op: Literal["eq", "gt", "gte", "lt", "lte"] = "eq"
    # An integer beyond 64 bits is compared as a number (a double), as the stores hold it.
    # A string up to the longest exact value the index keeps (types.MAX_FILTER_VALUE_CHARS).
    value: Annotated[str, StringConstraints(max_length=MAX_FILTER_VALUE_CHARS)] | Annotated[int, Field(ge=LONG_RANGE[0], le=LONG_RANGE[1])] | float | bool

    # _no_boolean_order: a boolean value only with op eq (or no op).
    schema_rules: ClassVar[dict[str, Any]] = {
        "anyOf": [{"properties": {"value": {"not": {"type": "boolean"}}}}, {"properties": {"op": {"enum": ["eq", None]}}}]
    }


class SearchRequest(Body):
    """POST /search: a summary query -> BM25 window -> rerank -> one page."""

    schema_rules: ClassVar[dict[str, Any]] = _WEIGHT_NEEDS_A_WEIGHTED_RANKER

    query: QueryText = Field(description="the summary: an abstract, a few sentences")
    ranker: RankerName | None = None
    fusion_weight: FusionWeight | None = None
    window: WindowSize | None = None
    # Hits [from, from + size) of the BM25 top RERANKER_MAX_WINDOW at most (the top `window`
    # of them reranked): a page that reaches past it holds the hits that are in it (none
    # beyond), as a search past the last hit does.
    size: Annotated[int, Field(ge=0), INTEGRAL, AfterValidator(_within_window), _limit("max_window")] = 10
    offset: Annotated[int, Field(ge=0, alias="from"), INTEGRAL, AfterValidator(_within_window), _limit("max_window")] = 0
    explain: bool = False
    snippets: bool = Field(False, description="give each hit a `snippet`: the first 30 words of its text")
    client_id: ClientId | None = None
    # Bounded: each filter is one more condition for the store to nest (SQLite refuses a
    # query nested 1,000 deep, a failed search: a 502), and one more pass over each document.
    filters: Annotated[list[Annotated[FilterClause, AfterValidator(_no_boolean_order)]], Field(max_length=MAX_FILTERS)] = []


def _text_as_candidate(item: Any) -> Any:
    if isinstance(item, str):
        return {"text": item}
    if not isinstance(item, dict):
        raise PydanticCustomError("invalid", 'must be a string or an object with "text" and/or "id"')
    return item


def _id_as_text(value: Any) -> Any:
    """Numeric ids are common in other stores: an integer (`5`, or `5.0` as any integer
    may be written) is looked up as its decimal string."""
    value = _integral(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise PydanticCustomError("invalid", "must be a string or an integer, got {kind}", {"kind": json_type(value)})
    return value


# An empty id names no document: a 400, as an empty text is, not a 404.
DocumentId = Annotated[str, BeforeValidator(_id_as_text, json_schema_input_type=str | int), Field(min_length=1)]


class Candidate(Body):
    """A document to rerank: a stored one by id, or a text (or both)."""

    id: DocumentId | None = Field(None, description="a stored document: its stored topics are used")
    text: Text | None = Field(None, description="topics are computed from it (and cached)")
    score: float | None = Field(None, description="the caller's first-stage score (fusion rankers use it)")

    schema_rules: ClassVar[dict[str, Any]] = _one_of_present("text", "id")

    @model_validator(mode="after")
    def _text_or_id(self) -> Candidate:
        if self.id is None and self.text is None:
            raise PydanticCustomError("invalid", 'needs a "text" or an "id"')
        return self


class CohereCandidate(Candidate):
    """Cohere's routes accept (and ignore) fields beyond these, as Cohere v1 does."""

    model_config = ConfigDict(extra="ignore")


def _not_too_many(items: Any, info: ValidationInfo) -> Any:
    limits = _limits(info)
    if limits is not None and isinstance(items, list) and len(items) > limits.max_documents:
        raise PydanticCustomError(
            "content_too_long", "has {n} documents; the limit is {limit} (RERANKER_MAX_DOCUMENTS)",
            {"n": len(items), "limit": limits.max_documents},
        )
    return items


# First-stage scores come with every document or with none (a mix is a 400): in JSON
# Schema, every item is an object with a numeric score, or none is.
_SCORED = {"type": "object", "required": ["score"], "properties": {"score": {"type": "number"}}}
_ALL_OR_NONE_SCORED = {
    LIMIT_KEY: "max_documents",
    "anyOf": [{"items": {"not": _SCORED}}, {"items": _SCORED}],
}
Documents = Annotated[
    list[Annotated[Candidate, BeforeValidator(_text_as_candidate, json_schema_input_type=Text | Candidate)]],
    BeforeValidator(_not_too_many), Field(json_schema_extra=_ALL_OR_NONE_SCORED),
]
CohereDocuments = Annotated[
    list[Annotated[CohereCandidate, BeforeValidator(_text_as_candidate, json_schema_input_type=Text | CohereCandidate)]],
    BeforeValidator(_not_too_many), Field(json_schema_extra=_ALL_OR_NONE_SCORED),
]


class RerankRequest(Body):
    """POST /rerank: reorder the caller's candidates."""

    schema_rules: ClassVar[dict[str, Any]] = _WEIGHT_NEEDS_A_WEIGHTED_RANKER

    query: QueryText
    ranker: RankerName | None = None
    fusion_weight: FusionWeight | None = None
    documents: Documents
    size: Annotated[int, Field(ge=0, description="results to return (default: all)"), INTEGRAL] | None = None


# The clusters' tutorials send a Cohere model name; any name that is not a ranker means the
# default ranker, and the answer's meta.warnings says so.
CohereModel = Annotated[str, Field(
    max_length=200,
    description="a registered ranker (GET /rankers), or any other model name (such as Cohere's rerank-english-v3.0), "
    "which means the default ranker, RERANKER_DEFAULT_RANKER (meta.warnings says so)",
    examples=["hidden_topics_corrected+bm25:maxp", "rerank-english-v3.0"],
)]


class CohereRequest(Body):
    """POST /v1/rerank and /v2/rerank, as Cohere's API and its OpenSearch / Elasticsearch callers send it."""

    query: QueryText
    documents: CohereDocuments
    top_n: Annotated[int, Field(ge=1, description="ignored unless apply_top_n: every document gets a result"), INTEGRAL] | None = None
    apply_top_n: bool = False
    model: CohereModel | None = None
    return_documents: bool = False
    # The route's rule: documents are given back only as they were sent, as texts.
    schema_rules: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"properties": {"return_documents": {"enum": [False, None]}}},
            {"properties": {"documents": {"items": {"anyOf": [
                {"type": "string"}, {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
            ]}}}},
        ]
    }
    # Cohere's own tuning of its models: accepted and ignored.
    max_chunks_per_doc: Any = Field(None, description="accepted and ignored")
    max_tokens_per_doc: Any = Field(None, description="accepted and ignored")
    priority: Any = Field(None, description="accepted and ignored")
    rank_fields: Any = Field(None, description="accepted and ignored")


class RerankExt(Body):
    """The proxy's `ext.rerank` block of an OpenSearch search body."""

    schema_rules: ClassVar[dict[str, Any]] = _WEIGHT_NEEDS_A_WEIGHTED_RANKER

    query_text: QueryText | None = Field(None, description="the summary to rerank by (default: the query's match / multi_match text)")
    ranker: RankerName | None = None
    window: WindowSize | None = None
    client_id: ClientId | None = None
    fusion_weight: FusionWeight | None = None


class _SearchExt(BaseModel):
    rerank: RerankExt | None = None


class OpenSearchSearch(BaseModel):
    """An OpenSearch search body, forwarded to the cluster; `ext.rerank` steers the reranking."""

    model_config = ConfigDict(title="OpenSearchSearch")

    ext: _SearchExt | None = None


class OpenSearchCount(BaseModel):
    """An OpenSearch count body, `{"query": ...}` (the same clauses a search may use), forwarded to the cluster."""

    model_config = ConfigDict(title="OpenSearchCount")


# An OpenSearch multi-get body as the proxy forwards it (query_dsl.MGET_KEYS, MGET_DOC_KEYS):
# written as JSON Schema, since the proxy reads it as it is (`query_dsl.check_mget_body`),
# not through a model. `_index` is required in a `docs` item of /_mget, which has no index in
# its path to default to, and so takes no `ids` either.
_PATTERNS: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_MGET_SOURCE: dict[str, Any] = {
    "description": "a _source filter, as in a search: true or false, a field pattern, a list of them, or includes and excludes",
    "anyOf": [
        {"type": "boolean"}, *_PATTERNS["anyOf"],
        {"type": "object", "properties": {key: _PATTERNS for key in ("includes", "excludes", "include", "exclude")}, "additionalProperties": False},
    ],
}
_MGET_DOC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "_index": {"type": "string", "minLength": 1, "description": "the index to read from; default: the path's"},
        "_id": {"type": "string", "minLength": 1},
        "routing": {"type": "string", "minLength": 1},
        "_source": _MGET_SOURCE,
        "stored_fields": _PATTERNS,
        "version": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        "version_type": {"enum": ["internal", "external", "external_gte"]},
    },
    "required": ["_id"],
    "additionalProperties": False,
}


def _mget_schema(in_path: bool) -> Any:
    def publish(schema: dict[str, Any]) -> None:
        doc = _MGET_DOC if in_path else {**_MGET_DOC, "required": ["_index", "_id"]}
        properties: dict[str, Any] = {"docs": {"type": "array", "items": doc, "minItems": 1}}
        if in_path:
            properties["ids"] = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
        schema.update({"type": "object", "properties": properties, "additionalProperties": False})
        schema.update({"anyOf": [{"required": ["docs"]}, {"required": ["ids"]}]} if in_path else {"required": ["docs"]})

    return publish


class OpenSearchMget(BaseModel):
    """An OpenSearch multi-get body for /INDEX/_mget: `{"docs": [{"_id", "_index"?, "_source"?, "routing"?, ...}]}` and/or `{"ids": [...]}` (of the path's index), forwarded to the cluster."""

    model_config = ConfigDict(title="OpenSearchMget", json_schema_extra=_mget_schema(in_path=True))


class OpenSearchMgetAll(BaseModel):
    """An OpenSearch multi-get body for /_mget: `{"docs": [{"_index", "_id", "_source"?, "routing"?, ...}]}`, each document naming its index, forwarded to the cluster."""

    model_config = ConfigDict(title="OpenSearchMgetAll", json_schema_extra=_mget_schema(in_path=False))


class ScrollRequest(Body):
    """The next page of a scroll (forwarded only when RERANKER_PROXY_ALLOW names `scroll`)."""

    scroll_id: NonBlank
    scroll: NonBlank | None = Field(None, description="keep-alive, such as 1m (at most 10m)")


# --- experiments and events -----------------------------------------------------------------


_MIN_UNITS = (
    "units (one client's query text, or a text searched without a client id) with a preference needed before "
    "a winner is named, and the size the always-valid test is tuned for"
)
_OLD_NAME = "deprecated: the old name of min_units, still read (send one of the two)"
# OpenAPI 3.1's mark for a property kept only for older clients.
_DEPRECATED: JsonDict = {"deprecated": True}
UnitCount = Annotated[int, Field(ge=1, le=MAX_MIN_UNITS), INTEGRAL]


class NewExperiment(Body):
    """POST /experiments: interleave two rankers on a share of the searches."""

    id: Annotated[str, StringConstraints(pattern=f"^{ID_PATTERN.pattern}$")]
    rankers: Annotated[list[RankerName], Field(min_length=2, max_length=2, description="two different registered rankers", json_schema_extra={"uniqueItems": True})]
    method: Literal["team_draft", "balanced"] = "team_draft"
    traffic: Annotated[float, Field(gt=0, le=1, description="the share of searches interleaved")] = DEFAULT_TRAFFIC
    min_units: Annotated[UnitCount, Field(description=_MIN_UNITS)] = DEFAULT_MIN_UNITS
    min_queries: Annotated[UnitCount | None, Field(description=_OLD_NAME, json_schema_extra=_DEPRECATED)] = None

    # Not both: an old client sends min_queries alone, a new one min_units alone, and a
    # rule that two numbers must be equal is one JSON Schema cannot publish.
    schema_rules: ClassVar[dict[str, Any]] = {
        "not": {"required": ["min_units", "min_queries"], "properties": {name: {"not": {"type": "null"}} for name in ("min_units", "min_queries")}},
    }

    @model_validator(mode="after")
    def _one_name(self) -> NewExperiment:
        if self.min_queries is not None and "min_units" in self.model_fields_set:
            differ = f"which differ: {self.min_units} and {self.min_queries}" if self.min_units != self.min_queries else "the same number twice"
            raise PydanticCustomError(
                "invalid", "[min_queries] is the old name of [min_units]: send only min_units (got both, {differ})", {"differ": differ}
            )
        return self

    @property
    def units_to_decide(self) -> int:
        """min_units, or its old name min_queries when an older client sent that."""
        return self.min_units if self.min_queries is None else self.min_queries


class ExperimentChange(Body):
    """PATCH /experiments/<id>: its traffic share and/or its status."""

    traffic: Annotated[float, Field(gt=0, le=1)] | None = None
    status: Literal["running", "stopped"] | None = None

    schema_rules: ClassVar[dict[str, Any]] = _one_of_present("traffic", "status")

    @model_validator(mode="after")
    def _something(self) -> ExperimentChange:
        if self.traffic is None and self.status is None:
            raise PydanticCustomError("invalid", 'nothing to change: send "traffic" and/or "status" ("running" or "stopped")')
        return self


Ordinal = Annotated[int, Field(ge=1), INTEGRAL]


class _OrdinalIndex(BaseModel):
    model_config = ConfigDict(strict=True)

    index: Ordinal


def _ordinal_index(value: Any) -> Any:
    # UBI 1.0 also writes the ordinal as {"index": n}; an object without it stays an
    # object, and is refused as one.
    return _integral(value["index"]) if isinstance(value, dict) and "index" in value else _integral(value)


def _iso_timestamp(value: str) -> str:
    # The pattern is published (so a client knows which dates are real), and checked here
    # with a message a person can read instead of the pattern's.
    try:
        if TIMESTAMP_PATTERN.fullmatch(value) is None:
            raise ValueError(value)
        _dt.datetime.fromisoformat(value)
    except ValueError:
        raise PydanticCustomError("invalid", f"must be an ISO 8601 date-time like 2026-11-21T10:15:00Z, got {_shown(value)}") from None
    return value


class EventObject(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    # No length bound but the body's: any stored id may be clicked (the embedded store
    # bounds none, OpenSearch at 512 bytes), and one not among the search's hits is refused.
    object_id: DocumentId | None = Field(None, description="the hit's id")


class EventPosition(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    ordinal: Annotated[int, Field(ge=1), BeforeValidator(_ordinal_index, json_schema_input_type=Ordinal | _OrdinalIndex)] | None = Field(
        None, description="the hit's rank, from 1"
    )


class EventAttributes(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    object: EventObject | None = None
    position: EventPosition | None = None


class UbiEvent(Body):
    """A User Behavior Insights event (schema 1.0) about the query_id of an interleaved search."""

    action_name: ShortId = Field(description="click and click_through count towards the experiment")
    query_id: ShortId
    client_id: ShortId | None = Field(None, description="required when the search sent one")
    timestamp: Annotated[str, Field(json_schema_extra={"pattern": f"^{TIMESTAMP_PATTERN.pattern}$"}), AfterValidator(_iso_timestamp)] | None = Field(
        None, description="ISO 8601 (OpenSearch's strict_date_optional_time)"
    )
    event_id: Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"\S")] | None = Field(
        None, description="makes retries idempotent; default: a hash of the event"
    )
    application: ShortId | None = None
    session_id: ShortId | None = None
    user_id: ShortId | None = None
    message_type: ShortId | None = None
    message: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"\S")] | None = None
    event_attributes: EventAttributes | None = None

    @property
    def object_id(self) -> str | None:
        target = self.event_attributes.object if self.event_attributes else None
        return target.object_id if target else None

    @property
    def position(self) -> int | None:
        position = self.event_attributes.position if self.event_attributes else None
        return position.ordinal if position else None

    @model_validator(mode="after")
    def _clicks_name_their_hit(self) -> UbiEvent:
        if self.action_name in CLICK_ACTIONS and self.object_id is None:
            raise PydanticCustomError(
                "invalid", f"a {self.action_name!r} event needs [event_attributes.object.object_id], the id of the hit clicked"
            )
        return self


# --- answers (documentation: the fuzz test checks every answer against them) ----------------

Status = Literal["ok", "degraded", "query_out_of_vocabulary", "partial", "tied"]
# A /search page past the reranked window: its hits keep their BM25 order, nothing scored.
SearchStatus = Literal["ok", "degraded", "query_out_of_vocabulary", "partial", "tied", "not_reranked"]


class Answer(BaseModel):
    """An answer object: open (more fields may come), documented fields as typed."""


class ErrorCause(Answer):
    type: str
    reason: str


class ErrorDetail(ErrorCause):
    root_cause: list[ErrorCause]


class Error(Answer):
    """OpenSearch's error shape."""

    error: ErrorDetail
    status: int


class TopicExplanation(Answer):
    topic: int = Field(description="the topic's rank by importance in its document (1 = the most important)")
    importance: float
    relevance: float
    contribution: float = Field(description="the topic's share of topic_score: importance x (relevance - background); for hidden_topics_code, scaled so that they add up")
    background: float = Field(description="the corrected formula's background relevance of the topic (0 for the paper's and the code's)")
    topic_words: list[str]
    query_words: list[str]


class RestOfTopics(Answer):
    topics: int = Field(description="how many topics the explanation does not show")
    contribution: float = Field(description="the sum of their contributions")


class Explanation(Answer):
    """Why a hit scored what it did: parts add up to score, and the topics' contributions
    plus rest add up to topic_score (up to float rounding)."""

    score: float = Field(description="the hit's score (a fusion's fused score): the sum of parts")
    parts: dict[str, float] = Field(
        description='what each ranker adds to score: "topics" (the topic ranker; for a fusion its weighted, '
        'scaled score), "bm25" (in a fusion), and any other fused ranker by its name'
    )
    topic_ranker: str = Field(description="the ranker the topics explain (a fusion's topic ranker)")
    topic_set: TopicSet = Field(
        description="which of each document's topics topic_ranker reads: the corrected ones (hidden_topics_corrected) "
        "or the paper's (the others); a topic's number counts within its set, as /documents/<id>'s topic_set says"
    )
    topic_score: float = Field(description="that ranker's own score: the contributions of topics plus rest.contribution")
    topics: list[TopicExplanation] = Field(description=f"the topics that add most, largest contribution first (at most {EXPLAIN_TOPICS})")
    rest: RestOfTopics


class Hit(Answer):
    """The one shape of a hit: POST /search, the proxy's ext.rerank and `reranker search --json`."""

    id: str
    rank: int
    score: float | None = Field(description="the score the order follows (a fusion's fused score); null when degraded")
    ranker_score: float | None | SkipJsonSchema[None] = Field(None, description="the ranker's own score (for a fusion, its first ranker's; else the same as score)")
    bm25_score: float
    bm25_rank: int
    title: str | SkipJsonSchema[None] = None
    snippet: str | SkipJsonSchema[None] = Field(None, description="with snippets: true, the first 30 words of its text")
    snippet_truncated: bool | SkipJsonSchema[None] = Field(None, description="with snippets: true, whether the text goes on after the snippet")
    explanation: Explanation | SkipJsonSchema[None] = Field(None, description="with explain: true, for a ranker that scores by topics (absent otherwise, and when degraded)")


class ExperimentArm(Answer):
    id: str
    method: str
    rankers: list[str]


class SearchAnswer(Answer):
    status: SearchStatus
    reason: str | SkipJsonSchema[None] = None
    query: str
    ranker: str = Field(description='the ranker, or "interleaved" when a running experiment answered')
    query_id: str | SkipJsonSchema[None] = Field(None, description="set when a running experiment answered: send it back with click events (POST /events)")
    experiment: ExperimentArm | SkipJsonSchema[None] = None
    window: int
    candidates: int | SkipJsonSchema[None] = None
    hits: list[Hit]
    query_words: list[str]
    oov_words: list[str]
    timings_ms: dict[str, float]


class RerankResult(Answer):
    index: int = Field(description="position in the request's documents")
    rank: int
    score: float | None
    ranker_score: float | None
    id: str | SkipJsonSchema[None] = None


class RerankAnswer(Answer):
    status: Status
    reason: str | SkipJsonSchema[None] = None
    ranker: str
    first_stage: Literal["scores", "index_bm25", "order"] = Field(
        description="the first stage the answer stands on: the documents' own `score`; BM25 of their texts with "
        "the index's statistics (for a ranker that fuses a first stage); or their order (-ln rank): where there is "
        "no index, for a ranker that reads no first stage, for no documents, and in a degraded answer, which keeps "
        "the order sent",
    )
    results: list[RerankResult]
    query_words: list[str] | SkipJsonSchema[None] = None
    oov_words: list[str] | SkipJsonSchema[None] = None
    timings_ms: dict[str, float] | SkipJsonSchema[None] = None


class CohereDocument(Answer):
    text: str | SkipJsonSchema[None] = None


class CohereResult(Answer):
    index: int
    relevance_score: float
    document: CohereDocument | SkipJsonSchema[None] = None


class CohereAnswer(Answer):
    id: str
    results: list[CohereResult]
    meta: dict[str, Any]
    status: Status


class DocumentTopic(Answer):
    topic: int
    importance: float
    words: list[str]


class DocumentAnswer(Answer):
    id: str
    title: str
    excerpt: str = Field(description="the first 300 words of the text")
    truncated: bool = Field(description="whether the text goes on after the excerpt")
    topics: list[DocumentTopic] = Field(description="hidden topics, most important first")
    topic_set: TopicSet = Field(
        description='which topics `topics` lists: "corrected" (of the word vectors with the corpus\'s common direction '
        'removed, as hidden_topics_corrected and its fusions, the shipped default among them, read them) where the index '
        'has them, else "paper" '
        "(the paper's, as hidden_topics and hidden_topics_code read them); a topic's number names another topic in each"
    )


class SimilarHit(Answer):
    """A hit of /search (`Hit`, without explanations) plus its snippet; `reranker similar --json` prints the same."""

    id: str
    rank: int
    title: str
    score: float | None = Field(description="the ranker's score with the paper as the query (for a fusion, the fused score); null for a hit past the reranked window")
    ranker_score: float | None = Field(description="the ranker's own score (for a fusion, its first ranker's; else the same as score); null for a hit past the reranked window")
    bm25_score: float = Field(description="BM25 of the paper's most distinctive words")
    bm25_rank: int = Field(description="rank by BM25 on the paper's most distinctive words, the paper itself left out")
    snippet: str = Field(description="the first 30 words of the text")
    snippet_truncated: bool = Field(description="whether the text goes on after the snippet")


class SimilarAnswer(Answer):
    id: str
    ranker: str = Field(description="the ranker that ordered the hits (the default ranker when the request named none)")
    hits: list[SimilarHit]


class Experiment(Answer):
    id: str
    rankers: list[str]
    method: Literal["team_draft", "balanced"]
    traffic: float
    status: Literal["running", "stopped"]
    created: str
    min_units: int = Field(description=_MIN_UNITS)
    min_queries: int = Field(description="deprecated: the old name of min_units, the same number", json_schema_extra=_DEPRECATED)


class Experiments(Answer):
    experiments: list[Experiment]


class ExperimentAnswer(Answer):
    experiment: Experiment


class ExperimentDeleted(Answer):
    deleted: str = Field(description="the experiment id")
    experiment: Experiment | None = Field(description="the experiment removed (null: only its queries and events were left)")
    events: Literal["kept", "deleted"] = Field(description="what became of its shown queries and events")
    queries: int = Field(description="its shown queries, deleted or kept")
    event_count: int = Field(description="its events, deleted or kept")


class ExperimentReport(Answer):
    experiment: Experiment
    report: dict[str, Any] = Field(description="clicks, wins per ranker, winner, the sign test's always-valid p-value (the verdict's: safe to read at any time) and its fixed-horizon p-value (for one look at a planned size)")


class TimelineTally(Answer):
    queries_with_clicks: int
    units_with_clicks: int = Field(description="the units (one client's query text, or a text searched without a client id) those queries fall in: each is one trial")
    wins: dict[str, int] = Field(description="units whose clicks preferred each ranker (the sign of their queries' summed credit)")
    ties: int


class TimelineTotals(TimelineTally):
    share: float | None = Field(description="the share of the units with a preference so far that preferred `share_of`; null before the first")
    low: float = Field(
        description="the share's always-valid confidence sequence (mSPRT, Beta mixture): its lower end, safe to watch; "
        "above `high` when the sequence is empty (no share fits every moment so far: chance at most 1 - confidence, if the preference never changed)"
    )
    high: float
    p_value: float | None = Field(description="the report's always-valid sign-test p-value so far (the verdict's); null before the first preference")
    fixed_horizon_p_value: float | None = Field(description="the exact sign test over the units so far, valid for one look at a size fixed in advance; null before the first preference")


class TimelinePeriod(TimelineTally):
    start: str = Field(description="ISO 8601, UTC: the hour or day this period covers (by when each query was shown)")
    end: str
    cumulative: TimelineTotals = Field(description="everything up to this period's end")


class ExperimentTimeline(Answer):
    experiment: Experiment
    interval: Literal["hour", "day"]
    share_of: str = Field(description="the ranker whose share of the preferences `share` is (the experiment's first)")
    confidence: float
    mixing: float = Field(description="a of the Beta(a, a) mixture of the always-valid test, matched to min_units")
    min_units: int = Field(description=_MIN_UNITS)
    min_queries: int = Field(description="deprecated: the old name of min_units, the same number", json_schema_extra=_DEPRECATED)
    periods: list[TimelinePeriod] = Field(description="the periods with a clicked query, oldest first")


class EventRecorded(Answer):
    result: str
    event_id: str


class RankerInfo(Answer):
    name: str
    uses_topics: bool
    available: bool = Field(description="false when a search with it would be refused with a 409 ranker_unavailable_exception (doc2vec with no trained model)")
    reason: str | None = Field(description="why it is unavailable, and what to do; null when available")


class Rankers(Answer):
    rankers: list[RankerInfo]
    default: str


class Live(Answer):
    status: str


class Ready(Answer):
    status: str
    documents: int
    vectors: str


class NotReady(Answer):
    status: str
    error: ErrorCause


# --- reading a body ---------------------------------------------------------------------------


def read(model: type[Model], body: Any, *, where: str = "", limits: ServiceSettings | None = None) -> Model:
    """`body` validated as `model`; ApiError 400 (413 for a text or list beyond its limit)
    naming the first field at fault. where: the path of `body` in the request ("ext.rerank")."""
    try:
        return model.model_validate(body, context=limits)
    except ValidationError as exc:
        errors = _misspelt_first(exc.errors(include_url=False))
        alternatives = _union_errors(model, errors)
        if alternatives:
            raise _union_error(alternatives, where) from None
        raise _api_error(model, errors[0], where) from None


def _misspelt_first(errors: list[Any]) -> list[Any]:
    """The errors with an unknown field first when a field of the same object is missing: a
    misspelt name (`qeury`) is both, and only the unknown field's refusal names what was sent
    and lists the right name."""
    missing = {tuple(error["loc"])[:-1] for error in errors if error["type"] == "missing"}
    unknown = [error for error in errors if error["type"] == "extra_forbidden" and tuple(error["loc"])[:-1] in missing]
    return unknown + [error for error in errors if error not in unknown] if unknown and errors[0]["type"] == "missing" else errors


def _union_errors(model: type[BaseModel], errors: list[Any]) -> list[Any]:
    """The errors of each type a union field allows (a filter's `value`), when the first
    error is one: pydantic tags each with the type it tried (`filters[0].value.str`),
    which is no field of the request."""
    loc = tuple(errors[0]["loc"])
    if errors[0]["type"] in ("missing", "extra_forbidden") or len(loc) < 2 or not isinstance(loc[-1], str):
        return []
    if loc[-1] in _field_names(model, loc[:-1]):
        return []
    alternatives = [error for error in errors if tuple(error["loc"])[:-1] == loc[:-1] and error.get("input") is errors[0].get("input")]
    return alternatives if len(alternatives) > 1 else []


def _union_error(alternatives: list[Any], where: str) -> ApiError:
    """The ApiError (400) of a union field's value: its type is none the field takes (which are
    listed), or (of a type it takes) out of range."""
    first = alternatives[0]
    loc, value = tuple(first["loc"])[:-1], first.get("input")
    kinds = [error["type"] for error in alternatives]
    if isinstance(value, int) and not isinstance(value, bool) and "float_type" in kinds:
        reason = _reason("float_type", {}, value, "")  # an integer a double cannot hold
    elif any(kind not in _EXPECTED for kind in kinds):  # of a type it takes, but out of bounds
        error = next(error for error in alternatives if error["type"] not in _EXPECTED)
        reason = _reason(error["type"], error.get("ctx") or {}, value, error["msg"])
    else:
        said = {"int_type": "a number", "float_type": "a number", "bool_type": "a boolean"}
        names = list(dict.fromkeys(said.get(kind, _EXPECTED[kind]) for kind in kinds))
        reason = f"must be {', '.join(names[:-1])} or {names[-1]}, got {json_type(value)}" if len(names) > 1 else f"must be {names[0]}, got {json_type(value)}"
    return ApiError(400, "illegal_argument_exception", f"[{_path(where, loc)}] {reason}")


def _api_error(model: type[BaseModel], error: Any, where: str) -> ApiError:
    loc = tuple(error["loc"])
    path = _path(where, loc)
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    field = f"[{path}] " if path else ""
    if kind == "content_too_long":
        return ApiError(413, "content_too_long_exception", f"{field}{error['msg']}")
    if kind == "extra_forbidden":
        known = ", ".join(_field_names(model, loc[:-1]))
        return ApiError(400, "illegal_argument_exception", f"unknown field [{path}]; known fields: {known}")
    return ApiError(400, "illegal_argument_exception", field + _reason(kind, ctx, value, error["msg"]))


# Patterns a user types against (an experiment's name, in the web page's form too) refused in
# the words `reranker ab create` uses, not as a regular expression.
_PATTERN_RULES = {f"^{ID_PATTERN.pattern}$": ID_RULE}

_EXPECTED = {
    "string_type": "a string", "int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
    "list_type": "an array", "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
}


def _reason(kind: str, ctx: dict[str, Any], value: Any, message: str) -> str:
    """The service's words for one pydantic error (its own message as the last resort)."""
    if kind == "missing":
        return "is required"
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        # An integer read exactly (bodies.parse_json) that no double can hold.
        return f"must be a number within a double's range (about ±1.8e308), got an integer of {len(str(abs(value)))} digits"
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}, got {json_type(value)}"
    if kind == "string_too_short" or (kind == "string_pattern_mismatch" and ctx.get("pattern") == r"\S"):
        return "must not be empty"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in _PATTERN_RULES:
        return f"must be {_PATTERN_RULES[ctx['pattern']]}, got {_shown(value)}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}, got {_shown(value)}"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters, got {len(value)}"
    if kind == "too_short" and isinstance(value, str) and ctx.get("min_length") == 1:  # a string's length, checked after a BeforeValidator
        return "must not be empty"
    if kind in ("too_short", "too_long"):
        bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        unit = "characters" if isinstance(value, str) else "items"  # a string checked after a BeforeValidator
        return f"must have {'at least' if kind == 'too_short' else 'at most'} {bound} {unit}, got {ctx.get('actual_length')}"
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        sign, key = bounds[kind]
        return f"must be {sign} {ctx[key]}, got {_shown(value)}"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}, got {_shown(value)}"
    return message


def _path(where: str, loc: tuple[Any, ...]) -> str:
    """("documents", 3, "id") -> "documents[3].id", after `where` when given."""
    path = where
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The fields of the model found at `loc` inside `model` (by their names on the wire)."""
    found: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or found is None:
            continue
        fields = {info.alias or name: info for name, info in found.model_fields.items()}
        found = _inner_model(fields[part].annotation) if part in fields else None
    if found is None:
        return []
    return sorted(info.alias or name for name, info in found.model_fields.items())


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        inner = _inner_model(arg)
        if inner is not None:
            return inner
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

