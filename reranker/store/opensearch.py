"""The OpenSearch store: BM25 from the cluster, topic matrices beside the text.

Layout (see index_templates/ and the README's "Against a real OpenSearch"):

- Documents live in versioned indices `ALIAS-v000001`, `ALIAS-v000002`, ... and are read
  through the alias. `initialise(rebuild=True)` starts a new version; `publish()` swaps
  the alias to it in one `_aliases` call, and the previous version is kept until
  `delete_index` is asked for. An unfinished build (interrupted) is resumed, not restarted,
  and so is one finished but stopped before the swap (state `publishing`).
- A run (and `compact`, `use`, `delete_index`) claims the alias for its duration, so that
  two never write behind it at once (reranker/store/opensearch_claim.py).
- Each index's mapping `_meta.reranker` records the word vectors (name, d, sha256), K, the
  stop list (sha256, file) and the topic dtype; a query with other vectors or another stop
  list is refused (IndexMismatchError).
- A document's topics and Doc2Vec vector are base64 `binary` fields beside its text
  (reranker/store/opensearch_encoding.py); `_meta.reranker.doc2vec` records the index's
  current Doc2Vec model.
- With RERANKER_PASSAGES, a version created from then on keeps each document's best
  passages (150 content words every 75, as the embedded store cuts them) as `nested`
  documents of the field `passages`, indexed but left out of `_source`; one nested query
  scores a window's best passages (`passage_bm25`). Other versions keep none (see `upsert`).
  Such a version takes every passage of a long document (`NESTED_OBJECTS_LIMIT`).

The client (reranker/store/opensearch_client.py) is created on first use and again after
a fork, so a gunicorn worker never shares a connection pool with its parent. Credentials
never reach a log or a message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import AbstractSet, Any, Callable, Iterable, Iterator, Mapping, Sequence
from urllib.parse import quote, urlencode

import numpy as np

from reranker.config import OpenSearchSettings
from reranker.errors import (
    ConfigError,
    ForeignIndexError,
    IndexMismatchError,
    IndexNotFoundError,
    InputError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    UnknownFieldError,
)
from reranker.store import (
    MAX_QUERY_TERMS,
    CompactResult,
    Doc2VecInfo,
    IndexInfo,
    PublishResult,
    ReadWords,
    filter_for_field,
    filter_shown,
)
from reranker.store.bm25 import PASSAGE_TERMS, bm25_of_texts, window_passage_bm25
from reranker.store.opensearch_claim import AliasClaim
from reranker.store.opensearch_client import bulk_item_reason, error_reason, foreign_answer, make_client, unreachable
from reranker.store.opensearch_encoding import (
    DTYPES,
    decode_backgrounds,
    decode_doc_vectors,
    decode_topics,
    document_passages,
    document_source,
    encode_matrix,
    field_mapping,
)
from reranker.store.templates import Templates, load_templates
from reranker.store.text_index import SentTexts, analysed_terms
from reranker.text import stop_list_info, tokenize
from reranker.types import (
    LONG_RANGE,
    Candidate,
    Centering,
    Document,
    DocVectorBatch,
    EmbeddingInfo,
    Filter,
    StopListInfo,
    StoredDocument,
    TopicBatch,
    WriteFailure,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# OpenSearch's limit on `_id`, in UTF-8 bytes. It checks every id of a bulk request before
# any is written, and one id past it fails the whole request: the store refuses that
# document alone, as the cluster refuses a field it cannot map.
MAX_ID_BYTES = 512
# Top-level source fields the store itself writes; a corpus field may not reuse them.
RESERVED_FIELDS = frozenset({"title", "body", "hidden_topics", "corrected_topics", "indexed", "doc2vec", "passages"})
# Source fields that are the store's own, never a document's text or metadata (`passages`
# is kept out of `_source` by the mapping; it is listed so that nothing filters on it or
# shows it, should an index keep it there).
INTERNAL_FIELDS = ("hidden_topics", "corrected_topics", "indexed", "doc2vec", "passages")
# The mapping of a document's corrected topics (as in index_templates/), put into an empty
# index created before it was in the templates when it is first indexed into.
CORRECTED_MAPPING: dict[str, Any] = {
    "properties": {
        "matrix": {"type": "binary"},
        "k": {"type": "integer", "index": False},
        "d": {"type": "integer", "index": False},
        "importances": {"type": "float", "index": False},
        "backgrounds": {"type": "float", "index": False},
    }
}
# The mapping of a document's Doc2Vec vector (as in index_templates/), put into indices
# created before it was in the templates when vectors are first written.
DOC2VEC_MAPPING: dict[str, Any] = {
    "properties": {"vector": {"type": "binary"}, "model": {"type": "keyword", "index": False}}
}
# What a version created with RERANKER_PASSAGES adds to the templates' mappings: each
# document's best passages (150 content words every 75) as nested documents, indexed with
# body's analyzer and left out of `_source` (the body holds their words).
PASSAGES_MAPPINGS: dict[str, Any] = {
    "_source": {"excludes": ["passages"]},
    "properties": {"passages": {"type": "nested", "properties": {"text": {"type": "text", "analyzer": "english"}}}},
}
# `index.mapping.nested_objects.limit` of a version created with passages. The cluster's
# default, 10,000 nested documents per document, refuses a document of more than about
# 750,000 content words (a passage every 75), which was then lost from the index. Rather
# than keep only some of its passages (which would change its best passage, and so its
# score), the limit is raised past any document a bulk request can carry: each passage's
# text alone is at least 150 content words of 2 characters or more, spaces between, and a
# request holds at most `http.max_content_length` bytes (100mb unless the cluster's nodes
# raise it). The limit guards the cluster against documents that explode into nested
# ones; here the store decides how many there are, and the request size still bounds them.
HTTP_MAX_CONTENT_LENGTH = 100 * 1024 * 1024
MIN_PASSAGE_BYTES = 3 * PASSAGE_TERMS - 1
NESTED_OBJECTS_LIMIT = HTTP_MAX_CONTENT_LENGTH // MIN_PASSAGE_BYTES + 1
# Documents whose texts `store_doc_vectors` reads at a time to send their passages again.
DOC2VEC_TEXT_CHUNK = 500
# Lucene's default limit on clauses in one boolean query is 1,024; a multi_match query
# has one clause per query token per field.
MAX_QUERY_CLAUSES = 1000
# Seconds a reader trusts its copy of the alias's metadata (vectors, K, mapping).
METADATA_TTL = 30.0
# Statuses worth another try after a pause: overload, gateway trouble, no connection.
RETRYABLE = frozenset({429, 502, 503, 504, "N/A"})
_RAISE = object()
# How long `compact` waits for the cluster's force merge (which carries on if it stops waiting).
_FORCE_MERGE_SECONDS = 3600.0
# Search parameters that change which indices an expression stands for.
_RESOLVE_OPTIONS = frozenset({"ignore_unavailable", "allow_no_indices", "expand_wildcards"})


@dataclass(frozen=True)
class IndexVersion:
    """One versioned index behind (or formerly behind) the alias."""

    name: str
    documents: int
    aliased: bool
    # "building" | "publishing" (whole; its run stopped before or just after the alias swap)
    # | "ready" (published) | "unknown" (not made by this package)
    state: str
    info: IndexInfo | None
    topic_dtype: str | None


@dataclass(frozen=True)
class TopicLayout:
    """How one concrete index holds topics: what it was built with (None: not built by
    this package, so no topics) and the dtype of its matrices."""

    info: IndexInfo | None
    dtype: str


# What a cluster's disk-full block says: OpenSearch's flood-stage block (index.blocks.
# read_only_allow_delete, `TOO_MANY_REQUESTS/12/disk usage exceeded flood-stage watermark,
# index has read-only-allow-delete block`; 403 `FORBIDDEN/12/index read-only / allow delete
# (api)` before Elasticsearch 7.4), and the cluster-wide `cluster.blocks.read_only_allow_delete`.
_DISK_FULL = re.compile(r"flood-stage watermark|read-only-allow-delete|read-only / allow delete")


def blocked(what: str, reason: str) -> StoreError:
    """The error for a write the cluster refused with a block (`cluster_block_exception`).

    A disk-full block is a StoreFullError (507): the cluster lifts it by itself once the
    node's disk use falls below the high watermark, and nothing here remembers it, so the
    next write after that succeeds. Any other block (an operator's `index.blocks.write`,
    `cluster.blocks.read_only`, `cluster.blocks.create_index`) is a StoreUnavailableError
    (503, with Retry-After): it lasts until someone lifts it.
    """
    if _DISK_FULL.search(reason):
        return StoreFullError(
            f"OpenSearch refused {what}: a node's disk is full past its flood-stage watermark ({reason}); "
            "writes are refused until disk use falls below the high watermark, and then resume by themselves"
        )
    return StoreUnavailableError(f"OpenSearch refused {what}: the index or cluster is blocked ({reason}); writes resume when the block is lifted")


# --- the store ---------------------------------------------------------------------------


def _not_a_cluster(exc: Exception) -> str:
    """The hint for an answer that is not OpenSearch's (OPENSEARCH_URL at a web server, say)."""
    return "; is OPENSEARCH_URL an OpenSearch cluster?" if foreign_answer(exc) is not None else ""


class OpenSearchStore:
    """A `Store` over an OpenSearch (or compatible) cluster."""

    def __init__(
        self,
        config: OpenSearchSettings,
        stopwords: frozenset[str] | None = None,
        *,
        stopwords_file: Path | None = None,
        templates: Templates | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        config.validate()
        self.config = config
        self.alias = config.alias
        self._cannot_score_texts = False  # the cluster refused artificial documents (see text_bm25)
        self._passages_failed = False  # a passage search failed and was logged (see passage_bm25)
        # The cluster's analyzers read the text itself.
        self.word_stemmer: Callable[[Sequence[str]], list[str]] | None = None
        self._stopwords = stopwords
        self.stop_list = stop_list_info(stopwords, stopwords_file)
        self._sent_texts = SentTexts(stopwords)  # their terms for their best passages, by content
        self._templates = templates
        self._sleep = sleep
        self._client: Any = None
        self._client_pid: int | None = None
        self._info: IndexInfo | None = None
        self._info_read_at = 0.0
        self._forgot_at = float("-inf")  # when forget_metadata last did
        self._dtype = config.topic_dtype  # the index's, once index_info() has read it
        self._target: str | None = None  # the index this process writes to
        self._target_fresh = False  # the target is a new version awaiting publish()
        self._target_resumed = False  # ... begun by an interrupted run (see drop_absent)
        self._properties: dict[str, dict[str, Any]] = {}  # mapping of the target/alias index
        self._properties_of: str | None = None
        self._claim: AliasClaim | None = None  # this process's claim on the alias, while this object writes
        # index expression -> (read at, its concrete indices' layouts), for the search proxy
        self._layouts: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, dict[str, TopicLayout] | None]] = {}

    # --- the client ----------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The opensearch-py client of this process (created lazily, again after fork)."""
        if self._client is None or self._client_pid != os.getpid():
            self._client = make_client(self.config)
            self._client_pid = os.getpid()
        return self._client

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, not_found: Any = _RAISE, conflict: Any = _RAISE, **kwargs: Any) -> Any:
        """Run one client call; cluster failures become StoreErrors that say what to do.

        `not_found`, when given, is returned for a 404 instead of raising; `conflict` for a
        409 (a `_create` of a document that exists, a conditional write that lost).
        """
        from opensearchpy import exceptions as ose

        try:
            try:
                return fn(*args, **kwargs)
            except ose.ConflictError:
                if conflict is _RAISE:
                    raise
                return conflict
            except ose.TransportError as exc:
                # A block is no fault of the credentials (an old cluster's is a 403) nor an
                # overload to retry (a new one's is a 429): it says what to do.
                if exc.error == "cluster_block_exception":
                    raise blocked(what, error_reason(exc)) from None
                raise
        except (ose.ConnectionError, ose.ConnectionTimeout) as exc:
            raise StoreUnavailableError(unreachable(self.config, what, exc)) from None
        except ose.AuthenticationException:
            raise StoreError(
                f"OpenSearch at {self.config.display_hosts} refused the credentials ({what}): "
                "check OPENSEARCH_USERNAME/OPENSEARCH_PASSWORD or OPENSEARCH_API_KEY"
            ) from None
        except ose.AuthorizationException as exc:
            raise StoreError(f"OpenSearch denied {what}: {error_reason(exc)} (the user lacks a permission)") from None
        except ose.NotFoundError as exc:
            # OpenSearch says "not found" in JSON to every request read here (a HEAD's 404
            # has no body, but opensearch-py's `exists` calls answer False for it): a page or
            # an empty answer (a web server's) means OPENSEARCH_URL is not a cluster at all.
            if not_found is not _RAISE and exc.info is not None:
                return not_found
            error = exc.info.get("error") if isinstance(exc.info, dict) else None
            if exc.error == "index_not_found_exception" and self._target is not None and isinstance(error, dict) and error.get("index") == self._target:
                raise self._target_lost() from None
            if exc.error == "index_not_found_exception":
                raise IndexNotFoundError(
                    f"OpenSearch at {self.config.display_hosts} has no index or alias {self.alias!r}: "
                    f"{self._unpublished() or 'run `reranker index CORPUS.jsonl` first (or set RERANKER_INDEX)'}"
                ) from None
            raise StoreError(f"OpenSearch {what} failed: HTTP 404 {error_reason(exc)}{_not_a_cluster(exc)}") from None
        except ose.TransportError as exc:
            raise StoreError(f"OpenSearch {what} failed: HTTP {exc.status_code} {error_reason(exc)}{_not_a_cluster(exc)}") from None
        except ose.SerializationError as exc:
            # A success that is not JSON: a sign-in page or a gateway's page, answered 200.
            raise StoreError(
                f"OpenSearch {what} failed: the answer of {self.config.display_hosts} was not JSON ({exc}); "
                "is OPENSEARCH_URL an OpenSearch cluster, not a gateway's or a sign-in page?"
            ) from None

    def _unpublished(self) -> str | None:
        """What to do about versions of the alias that no run published (a first `reranker
        index` interrupted before its end leaves one, listed as building), or None. Asked
        only on the way to an error, and any failure of its own leaves the error as it was."""
        from opensearchpy import exceptions as ose

        try:
            found = self.client.indices.get(index=f"{self.alias}-v*", allow_no_indices=True, expand_wildcards="open")
        except ose.TransportError:  # a hint, not the error being reported
            return None
        names = sorted(name for name in found if self._is_version(name))
        if not names:
            return None
        return (
            f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} never published (an interrupted `reranker index`?): "
            "run the same `reranker index` again to complete it (`reranker indices list` shows its state)"
        )

    def _target_lost(self) -> StoreError:
        """The error for a run whose index was deleted under it (`reranker indices delete`
        of a version listed as building, say): a bulk request after that creates it again
        from the templates, without what it was built with."""
        kept = f"; the alias {self.alias!r} was left as it was" if self._target_fresh else ""
        return StoreError(
            f"index {self._target}, which this run was {'building' if self._target_fresh else 'writing into'}, "
            f"was deleted meanwhile (`reranker indices delete`?){kept}; run `reranker index` again"
        )

    # --- templates and versions ----------------------------------------------------------

    @property
    def templates(self) -> Templates:
        if self._templates is None:
            self._templates = load_templates()
        return self._templates

    def install_templates(self) -> list[str]:
        """PUT the component and index templates (for this alias); returns their names."""
        names = []
        for name, body in self.templates.components.items():
            self._call(f"installing component template {name}", self.client.cluster.put_component_template, name=name, body=body)
            names.append(name)
        name, body = self.templates.index_template_for(self.alias)
        self._call(f"installing index template {name}", self.client.indices.put_index_template, name=name, body=body)
        names.append(name)
        return names

    def _ensure_templates(self) -> None:
        """Install the templates when missing or older than this package's."""
        name, body = self.templates.index_template_for(self.alias)
        found = self._call("reading index templates", self.client.indices.get_index_template, name=name, not_found={})
        templates = found.get("index_templates") or [{}]
        installed = templates[0].get("index_template", {}).get("version", 0)
        if installed < body.get("version", 0):
            log.info("installing index templates for %s (version %s)", self.alias, body.get("version"))
            self.install_templates()

    def _alias_indices(self) -> list[str]:
        """The indices the alias points at (none when there is no alias yet)."""
        return sorted(self._call("reading the alias", self.client.indices.get_alias, name=self.alias, not_found={}))

    def _index_named_as_alias(self) -> str | None:
        """RERANKER_INDEX naming an index rather than an alias (a version, or an index made
        by other means): read as the alias's index would be, so that one this package did not
        build is refused as such (`index_info`) instead of read as holding no topics."""
        exists = self._call(f"looking for index {self.alias!r}", self.client.indices.exists, index=self.alias)
        return self.alias if exists else None

    def alias_index(self) -> str | None:
        """The index the alias points at, or None when there is no alias yet."""
        names = self._alias_indices()
        if not names:
            return None
        if len(names) != 1:
            raise StoreError(
                f"alias {self.alias!r} points at {len(names)} indices ({', '.join(names)}); "
                f"point it at one: reranker indices use NAME"
            )
        return names[0]

    def _is_version(self, name: str) -> bool:
        """Is `name` one of this alias's versions (ALIAS-v000001, ...)? `ALIAS-v*` also
        matches the versions of an alias named like them (`papers-v2-v000001`)."""
        return re.fullmatch(re.escape(self.alias) + r"-v\d+", name) is not None

    def versions(self) -> list[IndexVersion]:
        """The versioned indices of this alias, oldest first."""
        aliased = self.alias_index()
        found = self._call("listing indices", self.client.indices.get, index=f"{self.alias}-v*", not_found={})
        versions = []
        for name in sorted(found):
            if not self._is_version(name):
                continue
            meta = found[name].get("mappings", {}).get("_meta", {}).get("reranker", {})
            count = self._call("counting documents", self.client.count, index=name)["count"]
            versions.append(
                IndexVersion(
                    name=name,
                    documents=int(count),
                    aliased=name == aliased,
                    state=meta.get("state", "unknown"),
                    info=_info_from_meta(meta),
                    topic_dtype=meta.get("topic_dtype"),
                )
            )
        return versions

    def _meta(self, index: str) -> dict[str, Any]:
        found = self._call("reading the index mapping", self.client.indices.get_mapping, index=index)
        mappings = _only_index(found).get("mappings", {})
        return dict(mappings.get("_meta", {}).get("reranker", {}))

    def _put_meta(self, index: str, meta: dict[str, Any]) -> None:
        # PUT _mapping replaces _meta as a whole: always write all of it.
        self._call("updating the index metadata", self.client.indices.put_mapping, index=index, body={"_meta": {"reranker": meta}})

    def _new_meta(self, info: IndexInfo, state: str) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "embedding": {
                "name": info.embedding.name, "dim": info.embedding.dim, "checksum": info.embedding.checksum,
                # Where the vectors were loaded from, on the host that built the index.
                "source": info.embedding.source,
            },
            "k": info.k,
            "topic_dtype": self.config.topic_dtype,
            **({"centering": info.centering.to_json()} if info.centering is not None else {}),
            # The stop list this store reads texts with (`Store.stop_list`), not `info`'s.
            "stopwords": self.stop_list.to_json(),
            "state": state,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }

    # --- the Store protocol: metadata ----------------------------------------------------

    def index_info(self) -> IndexInfo | None:
        # Cached, but re-read now and then: another process may move the alias to a version
        # built with other vectors, and a long-running service must notice.
        if self._info is not None and time.monotonic() - self._info_read_at > METADATA_TTL:
            self._info = None
            self._properties_of = None
        if self._info is None:
            self._info_read_at = time.monotonic()
            behind = self._target or self.alias_index()
            index = behind or self._index_named_as_alias()
            if index is None:
                return None
            meta = self._meta(index)
            self._info = _info_from_meta(meta)
            if self._info is None:
                if self._target is not None:
                    raise self._target_lost()  # and created again by a bulk request, from the templates alone
                if behind is None:
                    raise ForeignIndexError(
                        f"index {index!r} was not built by this package (its mapping has no _meta.reranker); "
                        "point RERANKER_INDEX at a reranker alias or index"
                    )
                raise ForeignIndexError(
                    f"index {index!r} behind alias {self.alias!r} was not built by this package (its mapping has no "
                    f"_meta.reranker); `reranker index CORPUS.jsonl --rebuild` builds a version behind the alias "
                    f"(and keeps {index!r}), or point RERANKER_INDEX at a reranker alias or index"
                )
            dtype = meta.get("topic_dtype", "float32")
            if dtype not in DTYPES:
                raise StoreError(f"index {index!r} stores topics as {dtype!r}, which this version cannot read")
            self._dtype = dtype
        return self._info

    @property
    def topic_dtype(self) -> str:
        self.index_info()
        return self._dtype

    def initialise(self, info: IndexInfo, *, rebuild: bool = False) -> None:
        """Choose the index this run writes to.

        Without `rebuild`, that is the alias's index (created as the first version when
        there is none); documents become visible as they are written. With `rebuild`, a
        new version (or an unfinished one built with the same vectors, K and stop list)
        that readers see only after `publish()`.
        """
        self._info = None
        # Before anything is read: what this run decides from it stays true while it writes.
        claimed = self._claim_alias("reranker index --rebuild" if rebuild else "reranker index")
        try:
            self._choose_target(info, rebuild)
        except BaseException:
            if claimed:  # a run refused here writes nothing: it holds nothing either
                self._release_alias()
            raise

    def _choose_target(self, info: IndexInfo, rebuild: bool) -> None:
        current = self.alias_index()
        if current is None and self._index_named_as_alias() is not None:
            # Versions are created as ALIAS-v000001, ... and published under the alias's name,
            # which an index holds already: the run would fail at its end, or on the
            # templates (a version's own name is matched by its alias's template).
            raise ConfigError(
                f"RERANKER_INDEX names the index {self.alias!r}, not an alias: `reranker index` writes behind an "
                "alias; set RERANKER_INDEX to the alias (or to a new name)"
            )
        self._ensure_templates()
        if current is not None and not rebuild:
            meta = self._meta(current)
            if meta.get("state") == "publishing":  # published by a run stopped just after its swap
                meta = {**meta, "state": "ready"}
                self._put_meta(current, meta)
            built = _info_from_meta(meta)
            if built is None:
                raise ForeignIndexError(
                    f"index {current!r} behind alias {self.alias!r} was not built by this package (its mapping has no "
                    f"_meta.reranker); add --rebuild to build a version behind the alias (and keep {current!r})"
                )
            if self._call("counting documents", self.client.count, index=current)["count"] > 0:
                built.check(info.embedding, info.k, self.stop_list)
                if meta.get("topic_dtype", "float32") != self.config.topic_dtype:
                    raise IndexMismatchError(
                        f"index {current!r} stores topics as {meta.get('topic_dtype')}, not "
                        f"{self.config.topic_dtype}; rebuild it (reranker index --rebuild) to change"
                    )
            else:
                if info.centering is not None and "corrected_topics" not in self._mapping_properties(current):
                    self._call(
                        "adding field 'corrected_topics' to the mapping", self.client.indices.put_mapping,
                        index=current, body={"properties": {"corrected_topics": CORRECTED_MAPPING}},
                    )
                    self._properties_of = None
                self._put_meta(current, {**self._new_meta(info, "ready"), "created": meta.get("created")})
            self._target, self._target_fresh, self._target_resumed = current, False, False
            self._allow_every_passage(current)
            return
        versions = self._finish_publishing(self.versions())
        resumable = self._resumable_version(versions, info, exclude=current)
        if resumable is not None and resumable.state == "publishing":
            log.warning(
                "%s was built whole (%d documents) by a run stopped before it swapped the alias: checking it against "
                "the corpus, then publishing it", resumable.name, resumable.documents,
            )
            self._target = resumable.name
            self._allow_every_passage(resumable.name)
        elif resumable is not None:
            log.warning("resuming the unfinished build of %s (%d documents so far)", resumable.name, resumable.documents)
            self._target = resumable.name
            self._allow_every_passage(resumable.name)
        else:
            self._target = self._create_version(versions, info)
        self._target_fresh, self._target_resumed = True, resumable is not None

    # --- the claim (reranker/store/opensearch_claim.py) -----------------------------------

    def _claim_alias(self, command: str) -> bool:
        """Claim the alias for this object's writes unless it holds the claim already
        (then False). StoreError naming the holder when another process holds it."""
        if self._claim is not None:
            return False
        claim = AliasClaim(self, command)
        claim.take()
        self._claim = claim
        return True

    @contextlib.contextmanager
    def writing(self, command: str) -> Iterator[None]:
        """This process as the alias's one writer for the block, as `reranker index` is for
        its run: the alias's claim, taken here unless this object holds it already."""
        claimed = self._claim_alias(command)
        try:
            yield
        finally:
            if claimed:
                self._release_alias()

    def _release_alias(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.drop()

    def _still_claimed(self, ask: bool = False) -> None:
        """StoreError when another run took this one's claim over (it stalled); `ask`: ask
        the cluster now, not only what the last refresh found (before an irreversible step)."""
        if self._claim is not None:
            self._claim.check(ask)

    def _allow_every_passage(self, index: str) -> None:
        """Give a version with passages created before `NESTED_OBJECTS_LIMIT` (a dynamic
        setting) that limit before writing to it, so that its long documents are indexed
        whole too. A cluster that refuses (the user may lack the right to change settings)
        leaves the version as it is, said in the log: only documents of more than 750,000
        content words are then refused, each with the cluster's reason."""
        if "passages" not in self._mapping_properties(index):
            return
        body = {"index": {"mapping": {"nested_objects": {"limit": NESTED_OBJECTS_LIMIT}}}}
        try:
            found = self._call("reading the index settings", self.client.indices.get_settings, index=index)
            limit = found.get(index, {}).get("settings", {}).get("index", {}).get("mapping", {}).get("nested_objects", {}).get("limit")
            if limit is None or int(limit) < NESTED_OBJECTS_LIMIT:
                self._call("raising the nested-object limit", self.client.indices.put_settings, index=index, body=body)
        except StoreUnavailableError:
            raise  # the cluster is out of reach: the run cannot write either
        except StoreError as exc:
            log.warning("%s keeps the cluster's limit of nested documents; a document of more than 750,000 content words will be refused (%s)", index, exc)

    def _finish_publishing(self, versions: list[IndexVersion]) -> list[IndexVersion]:
        """Mark `ready` the version behind the alias that a run left `publishing` (stopped
        after its alias swap, before its last write): it was published. Any other version
        left `publishing` never was, and a rebuild resumes it (`_resumable_version`), so
        this is done before the alias leaves it (`use`) too."""
        for n, version in enumerate(versions):
            if version.aliased and version.state == "publishing":
                self._put_meta(version.name, {**self._meta(version.name), "state": "ready"})
                versions[n] = dataclasses.replace(version, state="ready")
        return versions

    def _resumable_version(self, versions: Sequence[IndexVersion], info: IndexInfo, exclude: str | None) -> IndexVersion | None:
        """The newest version a rebuild with `info` goes on with: one an interrupted run left
        `building`, or `publishing` (finished, stopped before the alias swap)."""
        for version in reversed(versions):
            if (
                version.name != exclude
                and version.state in ("building", "publishing")
                and version.info is not None
                and (version.info.embedding, version.info.k) == (info.embedding, info.k)
                and version.info.stopwords in (None, self.stop_list)
                and version.topic_dtype == self.config.topic_dtype
            ):
                return version
        return None

    def _create_version(self, versions: Sequence[IndexVersion], info: IndexInfo) -> str:
        numbers = [int(v.name.rsplit("-v", 1)[1]) for v in versions]
        name = f"{self.alias}-v{max(numbers, default=0) + 1:06d}"
        mappings: dict[str, Any] = {"_meta": {"reranker": self._new_meta(info, "building")}}
        # No refreshes while a new version fills up; publish() refreshes once.
        settings: dict[str, Any] = {"refresh_interval": "-1"}
        if self.config.passages:
            # Merged with the templates' mappings. `_source` cannot change once an index
            # exists, which is why passages are a property of a version, chosen here.
            mappings.update(PASSAGES_MAPPINGS)
            settings["mapping"] = {"nested_objects": {"limit": NESTED_OBJECTS_LIMIT}}
        body = {"mappings": mappings, "settings": {"index": settings}}
        self._call(f"creating index {name}", self.client.indices.create, index=name, body=body)
        log.info("created index %s", name)
        return name

    def drop_absent(self, corpus_ids: AbstractSet[str]) -> int:
        """Delete from the version this run builds every document whose id is not in
        `corpus_ids` (bulk deletes by id, on that version: the alias is not touched); how
        many. Only a resumed version has any: documents an interrupted run wrote from a
        corpus that had some this run's has not (see `Store.drop_absent`). Every id of the
        version is listed (a scroll, ids only), so a version this run created is not.
        Raises StoreError when some cannot be deleted: publishing them would show readers
        documents the corpus no longer holds."""
        target = self._require_target()
        self._still_claimed()
        if not self._target_fresh:
            raise StoreError("only a rebuild drops documents (reranker index --rebuild): writing in place never deletes")
        if not self._target_resumed:
            return 0
        # Refreshes are off while a version is built: a search sees what the last one saw.
        self._call("refreshing", self.client.indices.refresh, index=target)
        absent = self._call(f"listing the documents of {target}", self._ids_absent, target, corpus_ids)
        if not absent:
            return 0
        log.info("dropping %d documents of the interrupted rebuild that the corpus no longer holds", len(absent))
        actions = {doc_id: {"_op_type": "delete", "_index": target, "_id": doc_id} for doc_id in absent}
        failures = self._bulk(actions)
        if failures:
            # A delete refused as "not found" found the document gone already: no failure.
            left = {doc["_id"] for doc in self._mget(target, [f.doc_id for f in failures], includes=["indexed.content_hash"]) if doc.get("found")}
            failures = [failure for failure in failures if failure.doc_id in left]
        if failures:
            raise StoreError(
                f"cannot drop {len(failures)} of the {len(absent)} documents of {target} that the corpus no longer holds "
                f"({failures[0].doc_id}: {failures[0].reason}); the alias {self.alias!r} was left as it was: run the same "
                "command again"
            )
        return len(absent)

    def _ids_absent(self, index: str, corpus_ids: AbstractSet[str]) -> list[str]:
        """The ids of `index`'s documents that are not in `corpus_ids`."""
        from opensearchpy.helpers import ScanError, scan

        hits = scan(self.client, index=index, query={"query": {"match_all": {}}, "_source": False}, size=5000, scroll="5m")
        try:
            return [hit["_id"] for hit in hits if hit["_id"] not in corpus_ids]
        except ScanError as exc:
            raise StoreError(f"OpenSearch listing the documents of {index} failed: {exc}") from None

    def publish(self) -> PublishResult | None:
        """Make what this run wrote visible: swap the alias to a new version atomically."""
        if self._target is None:
            return None
        target = self._target
        self._still_claimed(ask=True)
        try:
            return self._publish(target)
        finally:
            # The run has written all it writes; `index --compact` claims the alias again.
            self._release_alias()

    def _publish(self, target: str) -> PublishResult:
        self._call("refreshing", self.client.indices.refresh, index=target)
        if _info_from_meta(self._meta(target)) is None:
            raise self._target_lost()  # and created again by a bulk request, from the templates alone
        if not self._target_fresh:
            behind = self._alias_indices()
            if behind != [target]:
                # Another run's --rebuild (or `indices use`) moved the alias while this one
                # wrote into the index it pointed at: those writes are not what readers see.
                moved = f"was moved to {', '.join(behind)}" if behind else "was removed"
                raise StoreError(
                    f"alias {self.alias!r} {moved} while this run wrote into {target} (another run's --rebuild, or "
                    "`reranker indices use`): the documents it wrote are not behind the alias; run `reranker index` "
                    "again to write them behind the alias"
                )
            return PublishResult(current=target, previous=(), swapped=False)
        documents = self._call("counting documents", self.client.count, index=target)["count"]
        if documents == 0:
            raise StoreError(f"the new index {target} holds no documents; the alias {self.alias!r} was left as it was")
        previous = tuple(name for name in self._alias_indices() if name != target)
        self._call(
            "updating index settings", self.client.indices.put_settings, index=target,
            body={"index": {"refresh_interval": None}},
        )
        # Three writes, each a state a run stopped after it leaves for the next one to read:
        # `publishing` (whole, not yet behind the alias: the next --rebuild checks it against
        # its corpus and publishes it), the swap, then `ready` (published; `indices use` takes
        # it back). Marked `ready` before the swap, a version a run was stopped between the
        # two looked like one rolled back from, and the next --rebuild began a new one.
        meta = self._meta(target)
        self._put_meta(target, {**meta, "state": "publishing"})
        self._swap_alias(target, previous)
        self._put_meta(target, {**meta, "state": "ready"})
        self._target_fresh = False
        self._info = None
        return PublishResult(current=target, previous=previous, swapped=True)

    def _swap_alias(self, target: str, previous: Sequence[str]) -> None:
        actions: list[dict[str, Any]] = [{"remove": {"index": name, "alias": self.alias}} for name in previous]
        actions.append({"add": {"index": target, "alias": self.alias}})
        self._call("swapping the alias", self.client.indices.update_aliases, body={"actions": actions})

    def use(self, name: str) -> PublishResult:
        """Point the alias at an existing, finished version (a rollback or a roll-forward).
        Refused while a run holds the alias: it would swap it again, or write into what
        readers no longer see."""
        with self.writing("reranker indices use"):
            version = next((v for v in self._finish_publishing(self.versions()) if v.name == name), None)
            if version is None:
                raise InputError(f"no index {name!r} among the versions of alias {self.alias!r}")
            if version.state not in ("ready", "publishing"):
                raise InputError(f"index {name!r} is {version.state}, not ready; finish it with `reranker index --rebuild`")
            previous = tuple(n for n in self._alias_indices() if n != name)
            self._swap_alias(name, previous)
            if version.state == "publishing":  # whole, and now published by hand
                self._put_meta(name, {**self._meta(name), "state": "ready"})
            self._info = None
            return PublishResult(current=name, previous=previous, swapped=bool(previous))

    def delete_index(self, name: str) -> None:
        """Delete a version the alias does not point at. Refused while a run holds the
        alias: it may be the version the run builds."""
        with self.writing("reranker indices delete"):
            versions = {v.name: v for v in self.versions()}
            if name not in versions:
                raise InputError(f"no index {name!r} among the versions of alias {self.alias!r}")
            if versions[name].aliased:
                raise InputError(f"index {name!r} is behind alias {self.alias!r}; point the alias elsewhere first")
            self._call(f"deleting index {name}", self.client.indices.delete, index=name)

    # --- the Store protocol: writes ------------------------------------------------------

    def _require_target(self) -> str:
        if self._target is None:
            raise StoreError("the store is not initialised: call initialise() first")
        return self._target

    def upsert(self, documents: Sequence[StoredDocument]) -> list[WriteFailure]:
        """Bulk-index `documents` by id; returns those the cluster (or this store) refused.

        Retries, with exponential back-off, documents refused with 429 or lost to 502-504
        and connection errors; halves the request size on 413. Raises StoreUnavailableError
        when a whole batch still cannot reach the cluster (nothing is lost: rerun to resume).
        """
        target = self._require_target()
        self._still_claimed()
        info = self.index_info()
        assert info is not None
        failures: list[WriteFailure] = []
        actions: dict[str, dict[str, Any]] = {}
        passages = "passages" in self._mapping_properties(target)
        for stored in documents:
            doc = stored.document
            reserved = sorted(RESERVED_FIELDS & doc.fields.keys())
            id_bytes = len(doc.id.encode("utf-8", "surrogatepass"))
            if id_bytes > MAX_ID_BYTES:
                failures.append(WriteFailure(doc.id, f"an id of {id_bytes} bytes; OpenSearch takes ids of at most {MAX_ID_BYTES} (UTF-8)"))
            elif reserved:
                failures.append(WriteFailure(doc.id, f"field name(s) {', '.join(reserved)} are reserved by the reranker"))
            elif stored.doc_topics.topics.shape[1:] != (info.embedding.dim,):
                failures.append(WriteFailure(doc.id, f"topics of shape {stored.doc_topics.topics.shape}, the index holds d={info.embedding.dim}"))
            else:
                actions[doc.id] = {
                    "_op_type": "index",
                    "_index": target,
                    "_id": doc.id,
                    "_source": document_source(stored, self.topic_dtype, passages=passages, stopwords=self._stopwords),
                }
        failures.extend(self._map_new_fields(target, actions))
        failures.extend(self._bulk(actions))
        return failures

    def _map_new_fields(self, target: str, actions: dict[str, dict[str, Any]]) -> list[WriteFailure]:
        """Add corpus fields not in the mapping yet; drop documents whose field the cluster refused.

        (Every JSON value `document_source` keeps has a `field_mapping`.)
        """
        properties = self._mapping_properties(target)
        new: dict[str, dict[str, Any]] = {}
        for action in actions.values():
            for name, value in action["_source"].items():
                if name not in properties and name not in new:
                    mapping = field_mapping(value)
                    if mapping is not None:
                        new[name] = mapping
        refused: dict[str, str] = {}
        for name, mapping in new.items():
            try:
                self._call(f"adding field {name!r} to the mapping", self.client.indices.put_mapping, index=target, body={"properties": {name: mapping}})
                properties[name] = mapping
                log.info("mapped new corpus field %r as %s", name, mapping["type"])
            except StoreUnavailableError:
                raise
            except StoreError as exc:
                refused[name] = str(exc)
        failures = []
        for doc_id in list(actions):
            bad = [name for name in actions[doc_id]["_source"] if name in refused]
            if bad:
                del actions[doc_id]
                failures.append(WriteFailure(doc_id, refused[bad[0]]))
        return failures

    def _bulk(self, actions: dict[str, dict[str, Any]]) -> list[WriteFailure]:
        from opensearchpy.helpers import streaming_bulk

        pending = list(actions)
        failures: list[WriteFailure] = []
        chunk_bytes = self.config.bulk_bytes
        attempt = 0
        while pending:
            retry: list[str] = []
            too_large: list[str] = []
            last_reason = ""
            for ok, item in streaming_bulk(
                self.client,
                (actions[doc_id] for doc_id in pending),
                chunk_size=1000,
                max_chunk_bytes=chunk_bytes,
                raise_on_error=False,
                raise_on_exception=False,
                max_retries=0,
            ):
                if ok:
                    continue
                result = next(iter(item.values()))
                doc_id, status = str(result.get("_id")), result.get("status")
                reason = bulk_item_reason(result)
                if status == 413:
                    too_large.append(doc_id)
                elif status == "TIMEOUT":
                    # Not tried again: the cluster may still be writing it, and a document that
                    # took too long (a long one, with thousands of passages) would take as long.
                    failures.append(WriteFailure(doc_id, (
                        f"the cluster did not answer within {self.config.timeout:g} s (OPENSEARCH_TIMEOUT): "
                        "a long document or a busy cluster needs more; raise it and run again"
                    )))
                elif status in RETRYABLE:
                    retry.append(doc_id)
                    last_reason = reason
                else:
                    failures.append(WriteFailure(doc_id, reason))
            # Halve while a refused document may still have shared its request with others;
            # once the limit is below its own size it was sent alone, and is too large.
            if too_large and chunk_bytes > min(len(json.dumps(actions[i]["_source"])) for i in too_large):
                chunk_bytes = max(1, chunk_bytes // 2)
                log.warning("the cluster refused a %d-byte bulk request as too large; retrying at %d bytes", chunk_bytes * 2, chunk_bytes)
                pending = too_large + retry
                continue
            failures.extend(WriteFailure(doc_id, "document larger than the cluster accepts (HTTP 413)") for doc_id in too_large)
            if not retry:
                break
            attempt += 1
            if attempt > self.config.retries:
                if len(retry) == len(pending) and last_reason.startswith("cannot reach"):
                    raise StoreUnavailableError(
                        f"cannot reach OpenSearch at {self.config.display_hosts} while indexing "
                        f"(after {self.config.retries} retries); what was written is kept, rerun to resume"
                    )
                failures.extend(WriteFailure(doc_id, f"{last_reason} (after {self.config.retries} retries)") for doc_id in retry)
                break
            delay = min(30.0, 0.5 * 2 ** (attempt - 1))
            log.warning("%d documents not written (%s); retry %d in %.1f s", len(retry), last_reason, attempt, delay)
            self._sleep(delay)
            pending = retry
        return failures

    def compact(self, progress: Callable[[int], None] | None = None) -> CompactResult:
        """The cluster's force merge of the alias's index into one segment per shard
        (segments counted on the primary shards); the cluster writes, so `progress` is
        not called."""
        # None without an index; refuses one this package did not build.
        if self.index_info() is None:
            raise IndexNotFoundError(
                f"OpenSearch at {self.config.display_hosts} has no index or alias {self.alias!r}: "
                "run `reranker index CORPUS.jsonl` first"
            )
        # Claimed as a run claims it (the embedded store's compaction takes its writer lock):
        # a run beside it would write into segments being merged, or swap the alias to another.
        with self.writing("reranker compact"):
            index = self.alias_index() or self.alias  # RERANKER_INDEX may name the index itself
            before = self._primary_segments(index)
            self._call(f"merging the segments of {index}", self._force_merge, index)
            return CompactResult(self.count(), before, self._primary_segments(index))

    def _force_merge(self, index: str) -> None:
        from opensearchpy import exceptions as ose

        try:
            self.client.indices.forcemerge(index=index, max_num_segments=1, request_timeout=_FORCE_MERGE_SECONDS)
        except ose.ConnectionTimeout:
            # The cluster answers when the merge is done, and goes on merging when nobody
            # waits: a wait that ends first is no unreachable cluster (`_call` would say so).
            raise StoreError(
                f"OpenSearch is still merging the segments of {index} after {_FORCE_MERGE_SECONDS:g} s; it finishes "
                f"on its own (GET _cat/segments/{index} shows how far it is)"
            ) from None

    def segments(self) -> int:
        if self.index_info() is None:
            return 0
        per_shard = Counter(shard for shard, _ in self._primary_segment_ids(self.alias_index() or self.alias))
        return max(per_shard.values(), default=0)

    def _primary_segments(self, index: str) -> int:
        return len(self._primary_segment_ids(index))

    def _primary_segment_ids(self, index: str) -> set[tuple[Any, Any]]:
        rows = self._call(f"listing the segments of {index}", self.client.cat.segments, index=index, format="json")
        return {(row.get("shard"), row.get("segment")) for row in rows if row.get("prirep") in ("p", "primary")}

    def store_doc_vectors(self, info: Doc2VecInfo, vectors: Mapping[str, np.ndarray]) -> list[WriteFailure]:
        """Partial updates of `doc2vec` (bulk `update`, retried like `upsert`), then the
        model recorded in `_meta.reranker.doc2vec`. Writes to the index this process
        initialised, else the alias's."""
        index = self._target or self.alias_index()
        if index is None:
            raise IndexNotFoundError(
                f"OpenSearch at {self.config.display_hosts} has no index or alias {self.alias!r}: "
                "run `reranker index CORPUS.jsonl` first"
            )
        properties = self._mapping_properties(index)
        if "doc2vec" not in properties:
            # Indices are `dynamic: strict`: map the field before writing it.
            self._call("adding field 'doc2vec' to the mapping", self.client.indices.put_mapping, index=index, body={"properties": {"doc2vec": DOC2VEC_MAPPING}})
            self._properties_of = None
        # A partial update rewrites the document from its `_source`, which holds no
        # passages: they are sent again, from its stored text, or the update drops them.
        # Then the texts are read and sent a chunk at a time (a whole corpus's would not
        # fit in memory: `reranker train doc2vec` stores every document's vector at once).
        passages = "passages" in properties
        failures: list[WriteFailure] = []
        ids = list(vectors)
        chunk = DOC2VEC_TEXT_CHUNK if passages else max(1, len(ids))
        for first in range(0, len(ids), chunk):
            some = ids[first : first + chunk]
            texts = self._read_documents(index, some) if passages else {}
            actions: dict[str, dict[str, Any]] = {}
            for doc_id in some:
                vector = vectors[doc_id]
                if vector.shape != (info.dim,):
                    failures.append(WriteFailure(doc_id, f"vector of shape {vector.shape}, the model has dim={info.dim}"))
                    continue
                update: dict[str, Any] = {"doc2vec": {"vector": encode_matrix(vector), "model": info.checksum}}
                if doc_id in texts:
                    update["passages"] = document_passages(texts[doc_id], self._stopwords)
                actions[doc_id] = {"_op_type": "update", "_index": index, "_id": doc_id, "_source": {"doc": update}}
            for failure in self._bulk(actions):
                missing = failure.reason.startswith("document_missing_exception")
                failures.append(WriteFailure(failure.doc_id, "not in the index") if missing else failure)
        meta = self._meta(index)
        if meta.get("doc2vec") != info.to_json():
            self._put_meta(index, {**meta, "doc2vec": info.to_json()})
        self._info = None
        return failures

    def content_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        if not doc_ids:
            return {}
        index = self._target or self.alias
        found = self._mget(index, doc_ids, includes=["indexed.content_hash"])
        return {
            doc["_id"]: doc["_source"]["indexed"]["content_hash"]
            for doc in found
            if doc.get("found") and "indexed" in doc.get("_source", {})
        }

    def count(self) -> int:
        index = self._target or self.alias
        return int(self._call("counting documents", self.client.count, index=index)["count"])

    # --- the Store protocol: reads -------------------------------------------------------

    def _mapping_properties(self, index: str) -> dict[str, dict[str, Any]]:
        if self._properties_of != index:
            found = self._call("reading the index mapping", self.client.indices.get_mapping, index=index)
            self._properties = dict(_only_index(found).get("mappings", {}).get("properties", {}))
            self._properties_of = index
        return self._properties

    def passage_bm25(
        self, query: str, doc_ids: Sequence[str], texts: Sequence[str | None], read: ReadWords | None = None
    ) -> list[float] | None:
        # One nested query over the window's ids: each hit's score is its best passage's
        # BM25 (score_mode max), as the cluster scores `body`; an id without a passage
        # holding a query word is not a hit and scores 0. Sent texts have no passages in
        # the cluster: texts only (a cluster's rerank call) are scored here with their own
        # statistics and this service's analysis (`window_passage_bm25`), as the embedded
        # store scores them with nothing indexed; a mix of texts and ids, or an index
        # version created without RERANKER_PASSAGES, gives None, and the fusions weigh the
        # first stage's BM25 alone.
        if texts and all(text is not None for text in texts):
            words = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
            if not words:
                return None
            asked = {field: Counter(terms) for field, terms in analysed_terms(words).items()}
            return window_passage_bm25(asked, [self._sent_texts(text, read) for text in texts if text is not None])
        if any(text is not None for text in texts) or not doc_ids:
            return None
        tokens = tokenize(query, self._stopwords)
        if not tokens:
            return None
        text = query if len(tokens) <= MAX_QUERY_TERMS else " ".join(tokens[:MAX_QUERY_TERMS])
        ids = list(dict.fromkeys(doc_ids))
        body = {
            "size": len(ids),
            "_source": False,
            "track_total_hits": False,
            "query": {
                "bool": {
                    "filter": [{"ids": {"values": ids}}],
                    "must": [{"nested": {"path": "passages", "score_mode": "max", "query": {"match": {"passages.text": text}}}}],
                }
            },
        }
        try:
            self.index_info()  # re-reads the alias's mapping once it is older than METADATA_TTL
            index = self._target or self.alias
            if "passages" not in self._mapping_properties(index):
                return None
            found = self._call("best-passage search", self.client.search, index=index, body=body)
            scores = {str(hit["_id"]): float(hit["_score"]) for hit in found["hits"]["hits"]}
        except (StoreError, KeyError, TypeError, ValueError) as exc:
            # A search is still answered, with the first stage's BM25 for the passages'
            # share; a cluster that keeps failing is said once, not once per search.
            (log.debug if self._passages_failed else log.warning)("no best passages from the cluster (%s); the fusion weighs BM25 alone", exc)
            self._passages_failed = True
            return None
        return [scores.get(doc_id, 0.0) for doc_id in doc_ids]

    def doc_freqs(self, words: Sequence[str]) -> tuple[int, dict[str, int]] | None:
        # The cluster's terms are its analyser's (stemmed), not these words; "papers like
        # this one" then chooses its words without them (see `similar_query`).
        return None

    def text_bm25(self, query: str, texts: Sequence[str], read: ReadWords | None = None) -> list[float] | None:
        # The cluster analyses the query and the texts as artificial documents of its main
        # text field and reports each term's document frequency and the field's statistics
        # (`_mtermvectors`), in one request: BM25 as the cluster would score the texts if
        # they were indexed in that field. A cluster that cannot (the in-memory test server
        # has no artificial documents) or fails leaves the caller to use the texts' order.
        # (`read` goes unused: the cluster reads the texts with its own analyser.)
        terms = tokenize(query, self._stopwords)[:MAX_QUERY_TERMS]
        if not texts:
            return []
        if not terms or self._cannot_score_texts:
            return None
        field = self._text_field()
        spec = {"fields": [field], "term_statistics": True, "field_statistics": True, "positions": False, "offsets": False, "payloads": False}
        docs = [{"doc": {field: text}, **spec} for text in [" ".join(terms), *texts]]
        try:
            found = self._call("scoring texts", self.client.mtermvectors, index=self.alias, body={"docs": docs})
            vectors = [doc["term_vectors"][field] if doc.get("term_vectors") else {} for doc in found["docs"]]
            asked, statistics = vectors[0].get("terms", {}), vectors[0].get("field_statistics", {})
        except (StoreError, KeyError, TypeError, IndexError, AttributeError) as exc:
            log.warning("the cluster cannot score sent texts (%s); they keep their order as first-stage evidence", exc)
            return None
        documents, total = int(statistics.get("doc_count", 0)), float(statistics.get("sum_ttf", 0))
        if len(vectors) != len(docs) or not documents or total <= 0:
            refused = next((doc.get("error") for doc in found["docs"] if doc.get("error")), None)
            if isinstance(refused, dict):
                # The cluster refuses artificial documents (the in-memory test server does):
                # it will for every request, so it is not asked again, and says so once.
                self._cannot_score_texts = True
                log.warning(
                    "the cluster gave no term statistics for sent texts (%s: %s); they keep their order as first-stage evidence",
                    refused.get("type"), refused.get("reason"),
                )
            return None
        terms = list(asked)
        frequencies = [[int(v.get("terms", {}).get(t, {}).get("term_freq", 0)) for t in terms] for v in vectors[1:]]
        lengths = [sum(int(info.get("term_freq", 0)) for info in v.get("terms", {}).values()) for v in vectors[1:]]
        scores = bm25_of_texts(
            [int(asked[t].get("term_freq", 1)) for t in terms],
            [int(asked[t].get("doc_freq", 0)) for t in terms],
            documents,
            total / documents,
            np.asarray(frequencies, dtype=np.float64).reshape(len(texts), len(terms)),
            lengths,
        )
        return [float(score) for score in scores]

    def _text_field(self) -> str:
        """The searched field that holds a document's text ("body", unless the search
        fields say otherwise): the one a cluster's rerank processor sends."""
        names = [name for name, _ in self.config.search_fields]
        return "body" if "body" in names else names[-1]

    def bm25(self, query: str, size: int, filters: Sequence[Filter] = ()) -> list[Candidate]:
        if size < 1 or not query.strip():
            return []
        fields = self.config.search_fields
        text = query
        tokens = tokenize(query, self._stopwords)
        cap = max(1, min(MAX_QUERY_TERMS, MAX_QUERY_CLAUSES // len(fields)))
        if len(tokens) > cap:
            # Keeps a very long summary under the cluster's clause limit, deterministically.
            log.info("query has %d terms; sending its first %d", len(tokens), cap)
            text = " ".join(tokens[:cap])
        body: dict[str, Any] = {
            "size": size,
            "_source": ["title"],
            "track_total_hits": False,
            "query": {
                "bool": {
                    "must": [
                        {
                            "multi_match": {
                                "query": text,
                                "fields": [f"{name}^{boost:g}" for name, boost in fields],
                                "type": "most_fields",
                            }
                        }
                    ],
                    "filter": [self._filter_clause(f) for f in filters],
                }
            },
        }
        found = self._call("BM25 search", self.client.search, index=self.alias, body=body)
        return [
            Candidate(
                doc_id=hit["_id"],
                bm25_score=float(hit["_score"]),
                bm25_rank=position,
                title=(hit.get("_source") or {}).get("title", ""),
            )
            for position, hit in enumerate(found["hits"]["hits"], start=1)
        ]

    def _filter_clause(self, item: Filter) -> dict[str, Any]:
        properties = self._mapping_properties(self.alias)
        mapping = _lookup_field(properties, item.field)
        if mapping is None or mapping.get("index") is False or mapping.get("type") in ("binary", "object", None):
            filterable = sorted(_filterable(properties))
            raise UnknownFieldError(f"cannot filter on {item.field!r}; filterable fields: {', '.join(filterable)}")
        # Read as the cluster would read it, but refused here with a 400 that says why, not
        # by the cluster as a failed search (a 502).
        item = filter_for_field(item, _FIELD_KINDS.get(mapping["type"]))
        bounds = _INTEGER_RANGES.get(mapping["type"])
        # A float as the cluster reads it: its JSON text, exactly (-2.0**63 is sent as
        # -9.223372036854776e+18, below the least long).
        sent = Decimal(repr(item.value)) if isinstance(item.value, float) else item.value
        if bounds and not isinstance(sent, (bool, str)) and not bounds[0] <= sent <= bounds[1]:
            # The cluster parses the value as the field's type and fails the whole search.
            raise InputError(
                f"cannot filter {filter_shown(item)}: the field holds integers of "
                f"type {mapping['type']}, from {bounds[0]} to {bounds[1]}"
            )
        field = item.field
        if mapping["type"] == "text":
            if "raw" not in mapping.get("fields", {}):
                if item.op == "eq":
                    return {"match_phrase": {field: item.value}}
                raise InputError(f"cannot filter {filter_shown(item)}: it is text without an exact sub-field; only = compares it")
            # The exact value, as the embedded store compares it: a range over the analysed
            # field would compare each word of the value ("2014-12-31" holds "31" > "2015").
            kept = mapping["fields"]["raw"].get("ignore_above")
            # The cluster counts a value's length in UTF-16 units (Java's), an emoji as two.
            if item.op == "eq" and isinstance(kept, int) and isinstance(item.value, str) and len(item.value.encode("utf-16-le")) // 2 > kept:
                # It keeps no longer value, so it would find nothing where the embedded store
                # finds the document: an index mapped when `.raw` kept 256, or astral characters.
                raise InputError(
                    f"cannot filter {filter_shown(item)}: this index keeps exact values of "
                    f"{item.field!r} up to {kept} characters only; index the corpus again into a new index to filter on longer ones"
                )
            field = f"{field}.raw"
        if item.op == "eq":
            return {"term": {field: item.value}}
        return {"range": {field: {item.op: item.value}}}

    def _mget(self, index: str, doc_ids: Sequence[str], *, includes: list[str] | None = None, excludes: list[str] | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if includes:
            params["_source_includes"] = includes
        if excludes:
            params["_source_excludes"] = excludes
        found = self._call("fetching documents", self.client.mget, index=index, body={"ids": list(doc_ids)}, **params)
        return list(found["docs"])

    def topics(self, doc_ids: Sequence[str], corrected: bool = False) -> TopicBatch:
        info = self.index_info()
        dim = info.embedding.dim if info else 0
        if not doc_ids or info is None:
            empty = np.zeros((len(doc_ids), 0, dim), dtype=np.float32)
            zeros = np.zeros((len(doc_ids), 0), dtype=np.float32)
            return TopicBatch(tuple(doc_ids), empty, zeros, backgrounds=zeros if corrected else None)
        field = "corrected_topics" if corrected else "hidden_topics"
        docs = self._mget(self._target or self.alias, doc_ids, includes=[field])
        sources = [(doc.get("_source") or {}).get(field) if doc.get("found") else None for doc in docs]
        topics, importances = decode_topics(sources, dim, self.topic_dtype)
        missing = tuple(doc_id for doc_id, source in zip(doc_ids, sources) if not source)
        backgrounds = decode_backgrounds(sources, importances) if corrected else None
        return TopicBatch(tuple(doc_ids), topics, importances, missing, backgrounds)

    def doc_vectors(self, doc_ids: Sequence[str]) -> DocVectorBatch:
        info = self.index_info()
        model = info.doc2vec if info is not None else None
        if not doc_ids:
            dim = model.dim if model is not None else 0
            return DocVectorBatch((), np.zeros((0, dim), dtype=np.float32), model=model.checksum if model else "")
        docs = self._mget(self._target or self.alias, doc_ids, includes=["doc2vec"])
        sources = [(doc.get("_source") or {}).get("doc2vec") if doc.get("found") else None for doc in docs]
        if any(source and source.get("model") != (model.checksum if model else None) for source in sources) and (
            time.monotonic() - self._info_read_at > 1.0
        ):
            # Vectors of another model than the cached record: a model trained since
            # (by another process) is in use at once, not after METADATA_TTL.
            self._info = None
            info = self.index_info()
            model = info.doc2vec if info is not None else None
        if model is None:
            empty = np.zeros((len(doc_ids), 0), dtype=np.float32)
            return DocVectorBatch(tuple(doc_ids), empty, missing=tuple(doc_ids))
        vectors, present = decode_doc_vectors(sources, model.dim, model.checksum)
        missing = tuple(doc_id for doc_id, found in zip(doc_ids, present) if not found)
        return DocVectorBatch(tuple(doc_ids), vectors, missing=missing, model=model.checksum)

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        if not doc_ids:
            return {}
        return self._read_documents(self._target or self.alias, doc_ids)

    def _read_documents(self, index: str, doc_ids: Sequence[str]) -> dict[str, Document]:
        docs = self._mget(index, doc_ids, excludes=list(INTERNAL_FIELDS))
        found: dict[str, Document] = {}
        for doc in docs:
            if not doc.get("found"):
                continue
            source = dict(doc.get("_source") or {})
            title, body = source.pop("title", ""), source.pop("body", "")
            found[doc["_id"]] = Document(doc["_id"], title or "", body or "", source)
        return found

    # --- the search proxy -----------------------------------------------------------------

    def forward(self, method: str, path: str, params: Mapping[str, str] | None = None, body: Any = None) -> tuple[int, Any]:
        """Send one request to the cluster as it is: (HTTP status, the parsed JSON answer).

        `path` must be URL-quoted already; `body` is a JSON value, or a str sent as it is
        (NDJSON). The cluster's own error answers (400 parsing_exception, 404
        index_not_found_exception, ...) are returned, not raised, so a caller can pass
        them on unchanged. Raises StoreUnavailableError when the cluster cannot be
        reached, StoreError when it refuses this service's credentials (HTTP 401: not
        the caller's to fix).
        """
        from opensearchpy import exceptions as ose

        # The parameters go into the URL here: given to opensearch-py, it would take
        # `timeout`, `request_timeout` and `ignore` for itself instead of sending them.
        url = f"{path}?{urlencode(params)}" if params else path
        what = f"{method} {path}"  # names the request in an error; its parameters are left out
        try:
            return 200, self.client.transport.perform_request(method, url, body=body)
        except (ose.ConnectionError, ose.ConnectionTimeout) as exc:
            raise StoreUnavailableError(unreachable(self.config, what, exc)) from None
        except ose.AuthenticationException:
            raise StoreError(
                f"OpenSearch at {self.config.display_hosts} refused the credentials ({what}): "
                "check OPENSEARCH_USERNAME/OPENSEARCH_PASSWORD or OPENSEARCH_API_KEY"
            ) from None
        except ose.TransportError as exc:
            status = exc.status_code if isinstance(exc.status_code, int) else 502
            if isinstance(exc.info, dict):
                return status, exc.info
            # Not OpenSearch's JSON (a gateway's HTML page, say): the same shape as ours.
            cause = {"type": "store_exception", "reason": f"HTTP {status} from the cluster: {error_reason(exc)}"}
            return status, {"error": {"root_cause": [cause], **cause}, "status": status}

    def forget_metadata(self) -> bool:
        """Read the alias's metadata and every index expression's layouts afresh at their
        next use, not up to METADATA_TTL later: for a reader that has seen the alias move.

        At most once a second (False when not now): a client that searches an older version
        on purpose would otherwise have each of its searches read everything again.
        """
        now = time.monotonic()
        if now - self._forgot_at < 1.0:
            return False
        self._forgot_at = now
        self._info = None
        self._properties_of = None
        self._layouts.clear()
        return True

    def topic_layouts(self, expression: str, params: Mapping[str, str] | None = None) -> dict[str, TopicLayout] | None:
        """The concrete indices an index expression (name, alias, pattern, comma list)
        stands for, each with how it holds topics; None when the cluster cannot resolve
        it (no such index, say: the search itself then reports that).

        `params`: the search's index options (ignore_unavailable, allow_no_indices,
        expand_wildcards), so the expression resolves as the search will. One mapping
        request, cached for METADATA_TTL seconds per expression when it found indices: an
        expression that resolves to none is asked again, so that searches are reranked as
        soon as `reranker index` creates the index, not up to METADATA_TTL later.
        """
        options = tuple(sorted((k, v) for k, v in (params or {}).items() if k in _RESOLVE_OPTIONS))
        key = (expression, options)
        cached = self._layouts.get(key)
        if cached is not None and time.monotonic() - cached[0] <= METADATA_TTL:
            return cached[1]
        status, found = self.forward("GET", f"/{quote(expression, safe=',*')}/_mapping", dict(options))
        layouts: dict[str, TopicLayout] | None = None
        if status == 200 and isinstance(found, dict):
            layouts = {}
            for name, body in found.items():
                meta = (body.get("mappings") or {}).get("_meta", {}).get("reranker", {}) if isinstance(body, dict) else {}
                layouts[name] = TopicLayout(_info_from_meta(meta), str(meta.get("topic_dtype", "float32")))
        if not layouts:
            return layouts
        if len(self._layouts) >= 256:  # a bound against clients inventing expressions
            self._layouts.clear()
        self._layouts[key] = (time.monotonic(), layouts)
        return layouts

    @staticmethod
    def topics_from_hits(hits: Sequence[dict[str, Any]], dim: int, dtypes: Mapping[str, str], corrected: bool = False) -> TopicBatch:
        """The topics in search hits' `_source.hidden_topics` (or with `corrected`,
        `_source.corrected_topics` and their backgrounds) -> one (N, k_max, d) batch.

        `dtypes` maps each hit's `_index` to its matrices' dtype (float32 when unknown).
        A hit without readable topics gets zero rows (see `decode_topics`), so it scores 0.
        """
        field = "corrected_topics" if corrected else "hidden_topics"
        sources = [((hit.get("_source") or {}).get(field)) for hit in hits]
        dtype_of = [dtypes.get(str(hit.get("_index")), "float32") for hit in hits]
        if dtype_of and all(d == dtype_of[0] for d in dtype_of):
            topics, importances = decode_topics(sources, dim, dtype_of[0])
        else:
            # Indices stored with different dtypes: decode each group, pad to one k_max.
            groups = {d: [row for row, dt in enumerate(dtype_of) if dt == d] for d in set(dtype_of)}
            decoded = {d: decode_topics([sources[row] for row in rows], dim, d) for d, rows in groups.items()}
            k_max = max((t.shape[1] for t, _ in decoded.values()), default=0)
            topics = np.zeros((len(hits), k_max, dim), dtype=np.float32)
            importances = np.zeros((len(hits), k_max), dtype=np.float32)
            for d, rows in groups.items():
                part, weights = decoded[d]
                topics[rows, : part.shape[1]] = part
                importances[rows, : weights.shape[1]] = weights
        doc_ids = tuple(str(hit.get("_id")) for hit in hits)
        missing = tuple(doc_id for doc_id, source in zip(doc_ids, sources) if not source)
        backgrounds = decode_backgrounds(sources, importances) if corrected else None
        return TopicBatch(doc_ids, topics, importances, missing, backgrounds)

    def close(self) -> None:
        if self._client_pid == os.getpid():
            self._release_alias()  # a run that ends before publish(): interrupted, or failed
        if self._client is not None and self._client_pid == os.getpid():
            self._client.close()
        self._client = None


# --- helpers ---------------------------------------------------------------------------


def _only_index(response: dict[str, Any]) -> dict[str, Any]:
    """The body of the single index in a per-index response (an alias resolves to one)."""
    for body in response.values():
        return dict(body)
    return {}


def _info_from_meta(meta: dict[str, Any]) -> IndexInfo | None:
    embedding = meta.get("embedding")
    if not isinstance(embedding, dict) or "k" not in meta:
        return None
    try:
        return IndexInfo(
            embedding=EmbeddingInfo(
                name=str(embedding["name"]), dim=int(embedding["dim"]), checksum=str(embedding["checksum"]),
                source=str(embedding["source"]) if embedding.get("source") else None,
            ),
            k=int(meta["k"]),
            doc2vec=Doc2VecInfo.from_json(meta.get("doc2vec")),
            centering=Centering.from_json(meta.get("centering")),
            stopwords=StopListInfo.from_json(meta.get("stopwords")),
        )
    except (KeyError, TypeError, ValueError):
        return None


# How `filter_for_field` reads a value for a field of each mapping type.
_FIELD_KINDS = {
    **dict.fromkeys(("long", "integer", "short", "byte", "double", "float", "half_float", "scaled_float", "unsigned_long"), "number"),
    **dict.fromkeys(("text", "keyword", "match_only_text", "wildcard", "constant_keyword"), "text"),
    "boolean": "boolean",
}


# The values a field of each integer type holds: the cluster refuses a filter beyond them.
_INTEGER_RANGES = {
    "byte": (-(2**7), 2**7 - 1), "short": (-(2**15), 2**15 - 1), "integer": (-(2**31), 2**31 - 1),
    "long": LONG_RANGE, "unsigned_long": (0, 2**64 - 1),
}


def _lookup_field(properties: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = {"properties": properties}
    for part in path.split("."):
        if node is None:
            return None
        node = node.get("properties", {}).get(part)
    return node


def _filterable(properties: dict[str, Any], prefix: str = "") -> Iterable[str]:
    for name, mapping in properties.items():
        if name in INTERNAL_FIELDS:
            continue
        if "properties" in mapping:
            yield from _filterable(mapping["properties"], f"{prefix}{name}.")
        elif mapping.get("index", True) and mapping.get("type") not in ("binary", "object"):
            yield prefix + name

