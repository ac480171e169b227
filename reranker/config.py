"""Settings: the only module that reads the environment or the config file.

Precedence, lowest first: built-in defaults, the TOML config file (`RERANKER_CONFIG` or
`--config`), environment variables, command-line options (the CLI applies those with
`dataclasses.replace`). The config file uses the environment variables' names as keys, so
one table (`ENVIRONMENT`) documents both:

    OPENSEARCH_URL = "https://search.example.org:9200"
    OPENSEARCH_USERNAME = "reranker"
    RERANKER_K = 15
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit, urlunsplit

from reranker.errors import ConfigError
from reranker.ranker_names import RANKER_NAMES

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_VECTORS = "glove-6b-50d"
# Defaults of `reranker train word2vec` and `reranker index --train-vectors`, chosen by
# measurement on both shared data sets (bench/word2vec_defaults.py; bench/README.md): over
# d in {100, 200, 300} and 5-40 epochs, the default ranker's mean nDCG@10 was best with 40
# epochs at every d, and d = 100 was the smallest within 0.005 of the best. Small corpora
# need many passes; the dimension hardly matters.
WORD2VEC_DIM = 100
WORD2VEC_EPOCHS = 40
DEFAULT_K = 15
# More BLAS threads than any machine has cores is a typo, not a setting.
MAX_BLAS_THREADS = 1024
DEFAULT_WINDOW = 100
# No boosts: measured on both shared data sets with Lucene's BM25 and a stemmed field per
# field (the shape of this store's `most_fields` query), a title boost of 2 cost CISI
# 0.028 nDCG@10 against 1 (CL-SciSumm has no titles, and neither set has an abstract
# field to measure a boost on). bench/README.md, "The first stage's fields".
DEFAULT_SEARCH_FIELDS = "title,abstract,body"
# The default ranker: hidden topics with the common-direction correction, fused at weight
# 0.3 with BM25, whose weight is split between the document's and its best passage's.
# Measured with the bundled GloVe vectors on both shared data sets
# (docs/rankers-and-evaluation.md, "A stronger default"): nDCG@10 0.788 vs BM25's 0.727 on
# CL-SciSumm (p < 0.001), 0.424 vs 0.417 on CISI (p = 0.43: level, not above).
DEFAULT_RANKER = "hidden_topics_corrected+bm25:maxp"
DEFAULT_FUSION_WEIGHT = 0.3
# Past this, `wmd` orders the candidates it has not solved exactly by their lower bound.
DEFAULT_WMD_BUDGET_MS = 1000.0
TOPIC_DTYPES = ("float32", "float16")

# Every variable the package reads, with what it means: the README's table, the compose
# file's test and the config-file loader all use this one list.
ENVIRONMENT: dict[str, str] = {
    "RERANKER_CONFIG": "TOML file with any of these names as keys (the environment overrides it)",
    "RERANKER_DATA_DIR": "embedded store, trained models, evaluation indexes",
    "RERANKER_CACHE_DIR": "converted word vectors, shared by every data dir and virtual environment (default $XDG_CACHE_HOME/reranker, else ~/.cache/reranker)",
    "RERANKER_VECTORS": "word vectors: glove-6b-50d or [word2vec:|word2vec-bin:|glove:|fasttext:|kv:]PATH (default: the index's own, glove-6b-50d for a new one)",
    "RERANKER_K": "topics per document at index time (default 15)",
    "RERANKER_WINDOW": "BM25 candidates a query reranks (default 100)",
    "RERANKER_STOPWORDS": "stop-word file, one word per line",
    "RERANKER_FUSION_WEIGHT": f"weight of the ranker's score in the min-max, z-score and maxp fusions with BM25, the default ranker's included (default {DEFAULT_FUSION_WEIGHT})",
    "RERANKER_WMD_BUDGET_MS": f"time the wmd ranker may spend on exact distances per query before it orders the rest by a lower bound (default {DEFAULT_WMD_BUDGET_MS:g})",
    "RERANKER_BLAS_THREADS": "BLAS threads per process (default 1)",
    "RERANKER_INDEX_WORKERS": "topic-extraction processes while indexing (default: CPU count, at most 4)",
    "OPENSEARCH_URL": "OpenSearch node URL(s), comma-separated; selects the OpenSearch store",
    "OPENSEARCH_USERNAME": "basic-auth user",
    "OPENSEARCH_PASSWORD": "basic-auth password",
    "OPENSEARCH_API_KEY": "API key, sent as 'Authorization: ApiKey <key>' (instead of basic auth)",
    "OPENSEARCH_VERIFY_CERTS": "verify TLS certificates (default true)",
    "OPENSEARCH_CA_CERTS": "CA bundle for TLS verification",
    "OPENSEARCH_TIMEOUT": "request timeout in seconds (default 10)",
    "OPENSEARCH_RETRIES": "retries on connection errors, 429 and 502-504, with back-off (default 3)",
    "RERANKER_INDEX": "the read alias; versioned indices are named ALIAS-v000001, ... (default reranker)",
    "RERANKER_SEARCH_FIELDS": f"BM25 fields with boosts (default {DEFAULT_SEARCH_FIELDS})",
    "RERANKER_TOPIC_DTYPE": "topic matrices stored as float32 (default) or float16 (half the bytes)",
    "RERANKER_PASSAGES": "an OpenSearch index version created from now on keeps each document's best passages for the :maxp fusions (default false: about twice the index's terms; the embedded store always keeps them)",
    "RERANKER_BULK_BYTES": "bulk request size in bytes (default 5000000)",
    # The HTTP service (reranker serve, gunicorn.conf.py).
    "RERANKER_BIND": "service address HOST:PORT (default 127.0.0.1:8000; the container sets 0.0.0.0:8000)",
    "RERANKER_WORKERS": "gunicorn worker processes (default: CPU count)",
    "RERANKER_THREADS": "threads per worker (default 8; one is kept for health checks)",
    "RERANKER_TIMEOUT": "seconds before gunicorn restarts a stuck worker (default 30)",
    "RERANKER_DEADLINE_MS": "a request's deadline, counted from its arrival, first stage included; past it the answer keeps BM25 order (default 2000)",
    "RERANKER_READ_TIMEOUT": "seconds a client has to send a whole request before a 408 (default 10)",
    "RERANKER_CLUSTER_BUDGET_MS": "time beyond the deadline a request may still wait on OpenSearch before a 503 (default 3000)",
    "RERANKER_MAX_BODY_BYTES": "largest request body accepted, else 413 (default 10000000)",
    "RERANKER_MAX_DOCUMENTS": "most documents one rerank request may carry (default 1000)",
    "RERANKER_MAX_TEXT_CHARS": "longest query or document text accepted, in characters (default 1000000)",
    "RERANKER_MAX_WINDOW": "largest BM25 window a request may ask for (default 1000)",
    "RERANKER_MAX_SEARCHES": "most searches one proxied _msearch may hold (default 50)",
    "RERANKER_MAX_PENDING": "most connections a worker reads a request from at once (default 256; then 503)",
    "RERANKER_EVENTS_PER_QUERY": "most UBI events stored for one interleaved query (default 100; then 429)",
    "RERANKER_EVENTS_PER_CLIENT": "most UBI events one client (network address; an IPv6 /64) may store per experiment (default 10000; then 429)",
    "RERANKER_TRUSTED_PROXIES": "comma-separated addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For names the client (default: none; the peer address is the client)",
    "RERANKER_MAX_EVENTS": "most UBI events the event store holds in all (default 1000000; then 429)",
    "RERANKER_PROXY_ALLOW": "comma-separated parts of a search body the proxy forwards although it refuses them by default: script, script_score, wrapper, template, more_like_this, percolate, pinned, terms_lookup, collate, script_fields, runtime_mappings, scroll, search_pipeline (the URL's search_pipeline and verbose_pipeline), or a clause it does not know (default: none)",
    "RERANKER_MAX_TOTAL_WINDOW": "most BM25 candidates one proxied _msearch may ask the service to rerank, all its searches' windows together (default 2000)",
    "RERANKER_TOPIC_CACHE_MB": "per-worker cache of topics computed from request texts, in MB (default 64)",
    "RERANKER_PRELOAD_WMD": "load the wmd ranker's machinery when a worker starts (default true; false saves about 110 MB per worker, and the first wmd request loads it inside its deadline)",
    "RERANKER_API_KEYS": "comma-separated bearer keys accepted by /v1/rerank and /v2/rerank",
    "RERANKER_API_KEYS_FILE": "file with one accepted bearer key per line (adds to RERANKER_API_KEYS)",
    "RERANKER_ADMIN_API_KEY": "bearer key that may create, change and delete experiments (POST, PATCH and DELETE /experiments); unset: experiments are read-only over HTTP",
    "RERANKER_PROXY_INDICES": "index patterns the search proxy may forward to, comma-separated (default: RERANKER_INDEX and its versions; * for any)",
    "RERANKER_DEFAULT_RANKER": f"ranker used when a request or `reranker search` names none (default {DEFAULT_RANKER})",
}


def _default_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "share")
    return Path(base) / "reranker"


def _default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "reranker"


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1, maximum: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {value}")
    return value


def _networks(env: Mapping[str, str], name: str) -> tuple[IPNetwork, ...]:
    """Comma-separated addresses or CIDR networks (an address is a network of one)."""
    networks = []
    for part in (env.get(name) or "").split(","):
        if part.strip():
            try:
                networks.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError:
                raise ConfigError(f"{name}: {part.strip()!r} is not an IP address or network (such as 10.0.0.5 or 10.0.0.0/8)") from None
    return tuple(networks)


def _float(env: Mapping[str, str], name: str, default: float, minimum: float | None = None) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if minimum is not None and not value >= minimum:
        # As _int says it: "must be >= 0, got -5", not "must be >= 0.0, got '-5'".
        raise ConfigError(f"{name} must be >= {minimum:g}, got {value:g}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {env.get(name)!r}")


def redact_url(url: str) -> str:
    """`url` without any user:password part, for messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket: still no password in the message about it
        return re.sub(r"//[^/]*@", "//***@", url)
    _, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    # The host as written: a malformed port is what a message about this URL shows.
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def parse_search_fields(raw: str) -> tuple[tuple[str, float], ...]:
    """"title^2,body" -> (("title", 2.0), ("body", 1.0)). Raises ConfigError."""
    fields: list[tuple[str, float]] = []
    for item in raw.split(","):
        name, _, boost = item.strip().partition("^")
        name = name.strip()
        if not name:
            continue
        try:
            weight = float(boost) if boost else 1.0
        except ValueError:
            raise ConfigError(f"RERANKER_SEARCH_FIELDS: bad boost in search field {item.strip()!r}: expected NAME or NAME^NUMBER") from None
        if not weight > 0:
            raise ConfigError(f"RERANKER_SEARCH_FIELDS: search field boost must be > 0, got {item.strip()!r}")
        fields.append((name, weight))
    if not fields:
        raise ConfigError("RERANKER_SEARCH_FIELDS names no field")
    return tuple(fields)


@dataclass(frozen=True)
class OpenSearchSettings:
    """How to reach the cluster and lay out the index. Secrets never appear in repr()."""

    hosts: tuple[str, ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    verify_certs: bool = True
    ca_certs: Path | None = None
    timeout: float = 10.0
    retries: int = 3
    alias: str = "reranker"
    search_fields: tuple[tuple[str, float], ...] = parse_search_fields(DEFAULT_SEARCH_FIELDS)
    topic_dtype: str = "float32"
    bulk_bytes: int = 5_000_000
    # Best passages as nested documents (store/opensearch.py): a property of an index version,
    # chosen when one is created. Off by default: they double the index's terms, and
    # osmem-server, the dev cluster, counts nested documents in body's BM25 statistics.
    passages: bool = False

    @property
    def display_hosts(self) -> str:
        return ", ".join(redact_url(host) for host in self.hosts)

    def validate(self) -> None:
        if not self.hosts:
            raise ConfigError("OPENSEARCH_URL names no host")
        for host in self.hosts:
            try:
                parts = urlsplit(host)
                parts.port  # noqa: B018 - a port that is no number, or out of range, raises only when read
            except ValueError as exc:
                raise ConfigError(f"OPENSEARCH_URL must be http(s)://HOST[:PORT] ({exc}), got {redact_url(host)!r}") from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"OPENSEARCH_URL must be http(s)://HOST[:PORT], got {redact_url(host)!r}")
        if self.ca_certs is not None and not self.ca_certs.is_file():
            # Else every request failed, after its retries, with "No such file or directory".
            raise ConfigError(f"OPENSEARCH_CA_CERTS must be a CA bundle file (PEM), got {str(self.ca_certs)!r}")
        if self.api_key and (self.username or self.password):
            raise ConfigError("set either OPENSEARCH_API_KEY or OPENSEARCH_USERNAME/PASSWORD, not both")
        if bool(self.username) != bool(self.password):
            raise ConfigError("OPENSEARCH_USERNAME and OPENSEARCH_PASSWORD go together")
        if self.topic_dtype not in TOPIC_DTYPES:
            raise ConfigError(f"RERANKER_TOPIC_DTYPE must be one of {', '.join(TOPIC_DTYPES)}, got {self.topic_dtype!r}")
        alias = self.alias
        # OpenSearch's own rules for index names, checked here so the error names the setting.
        if not alias or alias != alias.lower() or alias[0] in "-_+" or any(c in alias for c in ' "*\\<|,>/?#:'):
            raise ConfigError(f"RERANKER_INDEX must be a lower-case index name without spaces or \\/*?\"<>|,#:, got {alias!r}")


# The guarded parts of a search body (and scroll, and the URL's search pipeline) that RERANKER_PROXY_ALLOW may name: see
# reranker/service/query_dsl.py.
PROXY_GUARDS = (
    "script", "script_score", "wrapper", "template", "more_like_this", "percolate", "pinned", "terms_lookup",
    "collate", "script_fields", "runtime_mappings", "scroll", "search_pipeline",
)


# The HTTP service's settings that only `serve` (and `reranker config`, which shows every
# setting) reads: a mistake in one of them must not stop `reranker search` or `index`,
# which never use it. The service's other three (RERANKER_MAX_WINDOW,
# RERANKER_TOPIC_CACHE_MB, RERANKER_DEFAULT_RANKER) bound or choose what a command's
# search does too, so every command reads them.
SERVICE_ONLY = frozenset({
    "RERANKER_BIND", "RERANKER_WORKERS", "RERANKER_THREADS", "RERANKER_TIMEOUT", "RERANKER_DEADLINE_MS",
    "RERANKER_READ_TIMEOUT", "RERANKER_CLUSTER_BUDGET_MS", "RERANKER_MAX_BODY_BYTES", "RERANKER_MAX_DOCUMENTS",
    "RERANKER_MAX_TEXT_CHARS", "RERANKER_MAX_SEARCHES", "RERANKER_MAX_PENDING", "RERANKER_EVENTS_PER_QUERY",
    "RERANKER_EVENTS_PER_CLIENT", "RERANKER_TRUSTED_PROXIES", "RERANKER_MAX_EVENTS", "RERANKER_PROXY_ALLOW",
    "RERANKER_MAX_TOTAL_WINDOW", "RERANKER_PRELOAD_WMD", "RERANKER_API_KEYS", "RERANKER_API_KEYS_FILE",
    "RERANKER_ADMIN_API_KEY", "RERANKER_PROXY_INDICES",
})


@dataclass(frozen=True)
class ServiceSettings:
    """The HTTP service: server, limits and credentials. Keys never appear in repr()."""

    bind: str = "127.0.0.1:8000"
    # As RERANKER_WORKERS defaults: settings made in code start the same service.
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    threads: int = 8
    timeout: int = 30
    deadline_ms: int = 2000
    # Beyond the deadline, how long a request may still wait on the cluster: every cluster
    # call a request makes must end by its start + deadline_ms + cluster_budget_ms.
    cluster_budget_ms: int = 3000
    # A request must arrive whole (headers and body) within this many seconds; see
    # reranker/service/worker.py.
    read_timeout: int = 10
    max_body_bytes: int = 10_000_000
    max_documents: int = 1000
    max_text_chars: int = 1_000_000
    max_window: int = 1000
    # One _msearch is many searches: without these, 400 searches of window 1,000 kept a
    # worker busy for 15 s and took 600 MB.
    max_searches: int = 50
    max_total_window: int = 2000
    # POST /events needs no key (a page sends clicks): these bound what anyone can store.
    # Connections a worker is still reading a request from (slow clients): each holds a
    # buffer, so their number is bounded.
    max_pending: int = 256
    events_per_query: int = 100
    # Per experiment and client address: one address cannot use up RERANKER_MAX_EVENTS.
    events_per_client: int = 10_000
    max_events: int = 1_000_000
    # Reverse proxies whose X-Forwarded-For is believed (service/bodies.py client_address).
    trusted_proxies: tuple[IPNetwork, ...] = ()
    topic_cache_mb: int = 64
    # WMD's machinery (gensim's view of the vectors, POT) costs each worker about 110 MB
    # (docs/performance.md); a service that never serves `wmd` can leave it unloaded.
    preload_wmd: bool = True
    api_keys: frozenset[str] = field(default=frozenset(), repr=False)
    admin_api_key: str | None = field(default=None, repr=False)
    proxy_indices: tuple[str, ...] = ()  # empty: the alias and its versions
    proxy_allow: tuple[str, ...] = ()  # guarded parts of a search body forwarded anyway (service/query_dsl.py)
    default_ranker: str = DEFAULT_RANKER

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "ServiceSettings":
        keys = {key.strip() for key in (env.get("RERANKER_API_KEYS") or "").split(",") if key.strip()}
        keys_file = env.get("RERANKER_API_KEYS_FILE")
        if keys_file:
            try:
                lines = Path(keys_file).expanduser().read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read RERANKER_API_KEYS_FILE {keys_file}: {exc}") from None
            keys |= {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}
        return cls(
            bind=env.get("RERANKER_BIND") or cls.bind,
            workers=_int(env, "RERANKER_WORKERS", os.cpu_count() or 1),
            threads=_int(env, "RERANKER_THREADS", 8),
            timeout=_int(env, "RERANKER_TIMEOUT", 30),
            deadline_ms=_int(env, "RERANKER_DEADLINE_MS", 2000),
            cluster_budget_ms=_int(env, "RERANKER_CLUSTER_BUDGET_MS", 3000, minimum=0),
            read_timeout=_int(env, "RERANKER_READ_TIMEOUT", 10),
            max_body_bytes=_int(env, "RERANKER_MAX_BODY_BYTES", 10_000_000, minimum=1024),
            max_documents=_int(env, "RERANKER_MAX_DOCUMENTS", 1000),
            max_text_chars=_int(env, "RERANKER_MAX_TEXT_CHARS", 1_000_000),
            max_window=_int(env, "RERANKER_MAX_WINDOW", 1000),
            max_searches=_int(env, "RERANKER_MAX_SEARCHES", 50),
            max_pending=_int(env, "RERANKER_MAX_PENDING", 256),
            events_per_query=_int(env, "RERANKER_EVENTS_PER_QUERY", 100),
            events_per_client=_int(env, "RERANKER_EVENTS_PER_CLIENT", 10_000),
            trusted_proxies=_networks(env, "RERANKER_TRUSTED_PROXIES"),
            max_events=_int(env, "RERANKER_MAX_EVENTS", 1_000_000),
            max_total_window=_int(env, "RERANKER_MAX_TOTAL_WINDOW", 2000),
            topic_cache_mb=_int(env, "RERANKER_TOPIC_CACHE_MB", 64, minimum=0),
            preload_wmd=_bool(env, "RERANKER_PRELOAD_WMD", True),
            api_keys=frozenset(keys),
            admin_api_key=(env.get("RERANKER_ADMIN_API_KEY") or "").strip() or None,
            proxy_indices=tuple(p.strip() for p in (env.get("RERANKER_PROXY_INDICES") or "").split(",") if p.strip()),
            proxy_allow=tuple(p.strip() for p in (env.get("RERANKER_PROXY_ALLOW") or "").split(",") if p.strip()),
            default_ranker=env.get("RERANKER_DEFAULT_RANKER") or cls.default_ranker,
        )

    def validate(self) -> None:
        host, _, port = self.bind.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"the service address (RERANKER_BIND, --bind) must be HOST:PORT, got {self.bind!r}")
        if not 0 < int(port) < 65536:
            # HOST:0 has the form HOST:PORT, so "must be HOST:PORT" would not say what is wrong with it.
            raise ConfigError(f"the service address (RERANKER_BIND, --bind) needs a port from 1 to 65535, got {self.bind!r}")
        for name in ("workers", "threads", "timeout", "deadline_ms", "read_timeout", "max_documents", "max_text_chars", "max_window", "max_searches", "max_total_window", "events_per_query", "events_per_client", "max_events", "max_pending"):
            if getattr(self, name) < 1:
                raise ConfigError(f"service setting {name} must be >= 1, got {getattr(self, name)}")
        if self.default_ranker not in RANKER_NAMES:
            # Here, with the names alone: gunicorn's master checks it without loading numpy
            # (reranker/ranker_names.py), and the line names the setting and, through the
            # callers, whether the environment or the config file set it.
            close = difflib.get_close_matches(self.default_ranker, RANKER_NAMES, n=1)
            raise ConfigError(
                f"RERANKER_DEFAULT_RANKER names no ranker: {self.default_ranker!r}"
                f"{f' (did you mean {close[0]!r}?)' if close else ''}; valid rankers: {', '.join(sorted(RANKER_NAMES))}"
            )
        for name in self.proxy_allow:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ConfigError(
                    f"RERANKER_PROXY_ALLOW names {name!r}: give names of search-body parts, such as {', '.join(PROXY_GUARDS[:4])}"
                )


@dataclass(frozen=True)
class Settings:
    """Everything the package can be configured with.

    data_dir: where the embedded store, trained models and evaluation indexes live.
    cache_dir: what can be rebuilt from other files and is the same for every data dir:
        the converted word vectors (`vectors_cache`), keyed by the source's content.
    opensearch_url: when set, the OpenSearch store replaces the embedded one.
    vectors: "glove-6b-50d" (bundled) or a path, optionally prefixed with its format
        ("word2vec:", "word2vec-bin:", "glove:", "fasttext:", "kv:"); None (the default):
        the vectors the index was built with, and glove-6b-50d for a new index.
    k: topics per document at index time (a document may get fewer).
    window: how many BM25 candidates a query reranks.
    stopwords_file: one word per line, replacing the built-in stop list.
    fusion_weight: weight of the ranker's score in the min-max, z-score and maxp fusions with
        BM25 (`hidden_topics+bm25`, `wmd+bm25:zscore`, the default `...+bm25:maxp`).
    wmd_budget_ms: time the `wmd` ranker may spend on exact distances per query.
    blas_threads: BLAS threads per process (1: indexing is ~10x faster on a 2-core host
        than with OpenBLAS's default, measured; scoring is one small product anyway).
    index_workers: processes extracting topics while indexing (1: in-process).
    opensearch: everything else about the cluster; its hosts come from `opensearch_url`.
    service: the HTTP service's server, limits and API keys.
    """

    data_dir: Path
    cache_dir: Path | None = None  # None: the data dir's `cache/` (a Settings built by hand)
    opensearch_url: str | None = None
    vectors: str | None = None
    k: int = DEFAULT_K
    window: int = DEFAULT_WINDOW
    stopwords_file: Path | None = None
    fusion_weight: float = DEFAULT_FUSION_WEIGHT
    wmd_budget_ms: float = DEFAULT_WMD_BUDGET_MS
    blas_threads: int = 1
    index_workers: int = 1
    opensearch: OpenSearchSettings = field(default_factory=lambda: OpenSearchSettings(hosts=()))
    service: ServiceSettings = field(default_factory=ServiceSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, config_file: Path | None = None, serving: bool = True) -> "Settings":
        """Settings from `env` (default: os.environ) over the config file, if any.

        serving=False (the commands other than `serve` and `config`): the settings only the
        HTTP service uses (SERVICE_ONLY) are not read, and `service` holds their defaults,
        so a mistake in one of them fails the commands that use it and no other.
        """
        env = dict(os.environ if env is None else env)
        path = config_file_path(config_file, env)
        if path is not None:
            env = {**read_config_file(path), **{k: v for k, v in env.items() if v != ""}}
        service_env = env if serving else {name: value for name, value in env.items() if name not in SERVICE_ONLY}
        stopwords = env.get("RERANKER_STOPWORDS")
        opensearch_url = env.get("OPENSEARCH_URL") or None
        settings = cls(
            data_dir=Path(env.get("RERANKER_DATA_DIR") or _default_data_dir(env)).expanduser(),
            cache_dir=Path(env.get("RERANKER_CACHE_DIR") or _default_cache_dir(env)).expanduser(),
            opensearch_url=opensearch_url,
            vectors=env.get("RERANKER_VECTORS") or None,
            k=_int(env, "RERANKER_K", DEFAULT_K),
            window=_int(env, "RERANKER_WINDOW", DEFAULT_WINDOW),
            stopwords_file=Path(stopwords).expanduser() if stopwords else None,
            fusion_weight=_float(env, "RERANKER_FUSION_WEIGHT", DEFAULT_FUSION_WEIGHT),
            wmd_budget_ms=_float(env, "RERANKER_WMD_BUDGET_MS", DEFAULT_WMD_BUDGET_MS, minimum=0.0),
            # Bounded: the BLAS libraries take a C int, and a 20-digit count overflowed it with a traceback.
            blas_threads=_int(env, "RERANKER_BLAS_THREADS", 1, maximum=MAX_BLAS_THREADS),
            index_workers=_int(env, "RERANKER_INDEX_WORKERS", min(os.cpu_count() or 1, 4)),
            opensearch=OpenSearchSettings(
                hosts=(),
                username=env.get("OPENSEARCH_USERNAME") or None,
                password=env.get("OPENSEARCH_PASSWORD") or None,
                api_key=env.get("OPENSEARCH_API_KEY") or None,
                verify_certs=_bool(env, "OPENSEARCH_VERIFY_CERTS", True),
                ca_certs=Path(env["OPENSEARCH_CA_CERTS"]).expanduser() if env.get("OPENSEARCH_CA_CERTS") else None,
                timeout=_float(env, "OPENSEARCH_TIMEOUT", 10.0, minimum=0.001),
                retries=_int(env, "OPENSEARCH_RETRIES", 3, minimum=0),
                alias=env.get("RERANKER_INDEX") or "reranker",
                search_fields=parse_search_fields(env.get("RERANKER_SEARCH_FIELDS") or DEFAULT_SEARCH_FIELDS),
                topic_dtype=env.get("RERANKER_TOPIC_DTYPE") or "float32",
                bulk_bytes=_int(env, "RERANKER_BULK_BYTES", 5_000_000, minimum=10_000),
                passages=_bool(env, "RERANKER_PASSAGES", False),
            ),
            service=ServiceSettings.from_env(service_env),
        )
        settings.validate()
        return settings

    @property
    def vectors_cache(self) -> Path:
        """Where converted word vectors live (see reranker/embeddings.py)."""
        return (self.cache_dir or self.data_dir / "cache") / "vectors"

    @property
    def opensearch_store(self) -> OpenSearchSettings | None:
        """The cluster settings with their hosts, when the OpenSearch store is selected."""
        if not self.opensearch_url:
            return None
        hosts = tuple(host.strip() for host in self.opensearch_url.split(",") if host.strip())
        from dataclasses import replace

        return replace(self.opensearch, hosts=hosts)

    def effective(self) -> dict[str, str]:
        """Every variable of ENVIRONMENT with the value in force, as `reranker config`
        prints it: secrets as "(set)", a default as what it resolves to."""
        cluster, service = self.opensearch_store, self.service

        def secret(value: object) -> str:
            return "(set)" if value else "(unset)"

        opensearch = self.opensearch
        values: dict[str, str] = {
            "RERANKER_CONFIG": "(see above)",
            "RERANKER_DATA_DIR": str(self.data_dir),
            "RERANKER_CACHE_DIR": str(self.cache_dir or self.data_dir / "cache"),
            "RERANKER_VECTORS": self.vectors or "the index's own (glove-6b-50d for a new index)",
            "RERANKER_K": str(self.k),
            "RERANKER_WINDOW": str(self.window),
            "RERANKER_STOPWORDS": str(self.stopwords_file) if self.stopwords_file else "the built-in list",
            "RERANKER_FUSION_WEIGHT": f"{self.fusion_weight:g}",
            "RERANKER_WMD_BUDGET_MS": f"{self.wmd_budget_ms:g}",
            "RERANKER_BLAS_THREADS": str(self.blas_threads),
            "RERANKER_INDEX_WORKERS": str(self.index_workers),
            "OPENSEARCH_URL": cluster.display_hosts if cluster else "(unset: the embedded store)",
            "OPENSEARCH_USERNAME": opensearch.username or "(unset)",
            "OPENSEARCH_PASSWORD": secret(opensearch.password),
            "OPENSEARCH_API_KEY": secret(opensearch.api_key),
            "OPENSEARCH_VERIFY_CERTS": str(opensearch.verify_certs).lower(),
            "OPENSEARCH_CA_CERTS": str(opensearch.ca_certs) if opensearch.ca_certs else "(unset)",
            "OPENSEARCH_TIMEOUT": f"{opensearch.timeout:g}",
            "OPENSEARCH_RETRIES": str(opensearch.retries),
            "RERANKER_INDEX": opensearch.alias,
            "RERANKER_SEARCH_FIELDS": ",".join(name if boost == 1 else f"{name}^{boost:g}" for name, boost in opensearch.search_fields),
            "RERANKER_TOPIC_DTYPE": opensearch.topic_dtype,
            "RERANKER_BULK_BYTES": str(opensearch.bulk_bytes),
            "RERANKER_PASSAGES": str(opensearch.passages).lower(),
            "RERANKER_BIND": service.bind,
            "RERANKER_WORKERS": str(service.workers),
            "RERANKER_THREADS": str(service.threads),
            "RERANKER_TIMEOUT": str(service.timeout),
            "RERANKER_DEADLINE_MS": str(service.deadline_ms),
            "RERANKER_READ_TIMEOUT": str(service.read_timeout),
            "RERANKER_CLUSTER_BUDGET_MS": str(service.cluster_budget_ms),
            "RERANKER_MAX_BODY_BYTES": str(service.max_body_bytes),
            "RERANKER_MAX_DOCUMENTS": str(service.max_documents),
            "RERANKER_MAX_TEXT_CHARS": str(service.max_text_chars),
            "RERANKER_MAX_WINDOW": str(service.max_window),
            "RERANKER_MAX_SEARCHES": str(service.max_searches),
            "RERANKER_MAX_PENDING": str(service.max_pending),
            "RERANKER_EVENTS_PER_QUERY": str(service.events_per_query),
            "RERANKER_EVENTS_PER_CLIENT": str(service.events_per_client),
            "RERANKER_TRUSTED_PROXIES": ",".join(str(network) for network in service.trusted_proxies) or "(none)",
            "RERANKER_MAX_EVENTS": str(service.max_events),
            "RERANKER_MAX_TOTAL_WINDOW": str(service.max_total_window),
            "RERANKER_TOPIC_CACHE_MB": str(service.topic_cache_mb),
            "RERANKER_PRELOAD_WMD": str(service.preload_wmd).lower(),
            "RERANKER_API_KEYS": f"{len(service.api_keys)} key(s)" if service.api_keys else "(unset)",
            "RERANKER_API_KEYS_FILE": "(counted in RERANKER_API_KEYS)",
            "RERANKER_ADMIN_API_KEY": secret(service.admin_api_key),
            "RERANKER_PROXY_INDICES": ",".join(service.proxy_indices) or f"{opensearch.alias},{opensearch.alias}-v*",
            "RERANKER_PROXY_ALLOW": ",".join(service.proxy_allow) or "(none)",
            "RERANKER_DEFAULT_RANKER": service.default_ranker,
        }
        return {name: values[name] for name in ENVIRONMENT}

    def validate(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.window < 1:
            raise ConfigError(f"window must be >= 1, got {self.window}")
        if self.window > self.service.max_window:
            raise ConfigError(
                f"RERANKER_WINDOW (--window) must be <= {self.service.max_window} (RERANKER_MAX_WINDOW, the service's limit too), got {self.window}"
            )
        if not 0.0 <= self.fusion_weight <= 1.0:
            # Named as the variable, so that the CLI can say when the config file set it.
            raise ConfigError(f"RERANKER_FUSION_WEIGHT (--fusion-weight) must lie in [0, 1], got {self.fusion_weight:g}")
        if self.index_workers < 1:
            raise ConfigError(f"index workers must be >= 1, got {self.index_workers}")
        self.service.validate()
        cluster = self.opensearch_store
        if cluster is not None:
            cluster.validate()


def read_config_file(path: Path) -> dict[str, str]:
    """The TOML config file as environment-style strings. Raises ConfigError."""
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:  # tomllib decodes the bytes itself and lets this through
        raise ConfigError(f"config file {path} is not valid TOML: not UTF-8 text") from None
    values: dict[str, str] = {}
    for key, value in raw.items():
        if key not in ENVIRONMENT or key == "RERANKER_CONFIG":
            # Not "see `reranker config`" alone: with this file in force, it refuses the same way.
            known = [name for name in ENVIRONMENT if name != "RERANKER_CONFIG"]
            close = difflib.get_close_matches(key, known, n=1)
            raise ConfigError(
                f"config file {path}: unknown key {key!r} ({f'did you mean {close[0]}?; ' if close else ''}"
                "the keys are the variables `reranker config` lists when run without this file)"
            )
        if isinstance(value, bool):
            values[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            values[key] = str(value)
        elif isinstance(value, list) and key == "OPENSEARCH_URL" and all(isinstance(v, str) for v in value):
            values[key] = ",".join(value)
        else:
            raise ConfigError(f"config file {path}: {key} must be a string, number or boolean")
    return values


def config_file_path(given: Path | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file in force: `given` (`--config`), else RERANKER_CONFIG, else None."""
    env = os.environ if env is None else env
    return given or (Path(env["RERANKER_CONFIG"]).expanduser() if env.get("RERANKER_CONFIG") else None)


def put_config_file_in_environ(given: Path | None = None, *, reread: bool = True) -> None:
    """The config file's values into os.environ, under the environment's own (as in
    Settings.from_env); RERANKER_CONFIG then names that file.

    For what reads the environment alone: gunicorn's config file (bind, workers, threads,
    timeout) and its workers (RERANKER_READ_TIMEOUT, RERANKER_MAX_BODY_BYTES,
    RERANKER_MAX_PENDING), whether `reranker serve` or an operator starts gunicorn. Naming
    the file keeps a second call (gunicorn.conf.py under serve --config) to the same one.

    reread=False (serve): the values stay as the environment's own, so a later call (gunicorn
    runs its config file again on SIGHUP) keeps them, as serve's own settings are kept; by
    default a later call replaces them with the file's values of then.
    """
    path = config_file_path(given)
    values = read_config_file(path) if path is not None else {}
    # What an earlier call put is the file's of then, not the environment's own: gunicorn
    # runs its config file again on SIGHUP, and the file's new values must replace them
    # (kept, they would look like the operator's and win over the edited file).
    for name, value in _PUT_FROM_FILE.items():
        if os.environ.get(name) == value:
            del os.environ[name]
    _PUT_FROM_FILE.clear()
    if path is None:
        return
    for name, value in values.items():
        if not os.environ.get(name):
            os.environ[name] = value
            if reread:
                _PUT_FROM_FILE[name] = value
    os.environ["RERANKER_CONFIG"] = str(path)


# The values put_config_file_in_environ put in os.environ (and are still the file's).
_PUT_FROM_FILE: dict[str, str] = {}


def naming_its_source(exc: ConfigError) -> str:
    """`exc`'s message, with where the setting it names came from: the config file (its
    value put in os.environ by put_config_file_in_environ) or the environment."""
    message = str(exc)
    named = [name for name in ENVIRONMENT if re.search(rf"\b{name}\b", message)]
    if not named or message.startswith(("config file", "cannot read config file")):
        return message
    if any(name in _PUT_FROM_FILE for name in named) and os.environ.get("RERANKER_CONFIG"):
        return f"{message} (from the config file {os.environ['RERANKER_CONFIG']})"
    return f"{message} (from the environment)"


# gunicorn.conf.py's last settings that passed its checks in this process: the values of
# ENVIRONMENT it left in os.environ, what of them the config file put there, and that file.
# A SIGHUP whose config file fails the checks puts them back (restore_good_settings).
_LAST_GOOD: tuple[dict[str, str], dict[str, str], Path | None] | None = None


def remember_good_settings() -> None:
    global _LAST_GOOD
    values = {name: os.environ[name] for name in ENVIRONMENT if name in os.environ}
    _LAST_GOOD = (values, dict(_PUT_FROM_FILE), config_file_path() or pinned_config_file())


def restore_good_settings() -> bool:
    """The last good settings back in os.environ, without RERANKER_CONFIG: the workers
    gunicorn starts next read the environment alone, not the file that failed. False when
    none passed yet in this process (gunicorn is starting: it should stop)."""
    if _LAST_GOOD is None:
        return False
    values, put, _ = _LAST_GOOD
    for name in ENVIRONMENT:
        if name in values:
            os.environ[name] = values[name]
        else:
            os.environ.pop(name, None)
    os.environ.pop("RERANKER_CONFIG", None)
    _PUT_FROM_FILE.clear()
    _PUT_FROM_FILE.update(put)
    return True


def pinned_config_file() -> Path | None:
    """The config file of the last good settings while restore_good_settings holds them
    (RERANKER_CONFIG is then unset), so that the next SIGHUP reads it again."""
    if _LAST_GOOD is None or os.environ.get("RERANKER_CONFIG"):
        return None
    return _LAST_GOOD[2]


def write_config_values(path: Path, values: Mapping[str, str | float]) -> list[str]:
    """Set `values` (ENVIRONMENT names) in the TOML config file `path`, creating it if
    need be and keeping its other lines (comments included) as they are; the file is
    replaced whole, so a reader never sees half of it. Returns the names among `values`
    that the environment sets, which therefore still override the file.

    Raises ConfigError for a file that is not a valid config file, or cannot be written.
    """
    lines: list[str] = []
    if path.exists():
        read_config_file(path)  # never edit a file that serve would refuse anyway
        lines = path.read_text(encoding="utf-8").splitlines()
    for key, value in values.items():
        if key not in ENVIRONMENT or key == "RERANKER_CONFIG":
            raise ValueError(f"not a setting: {key}")
        # A config file is flat (read_config_file accepts no tables), so a key's line is
        # found by its name and a new key can go at the end.
        rendered = f"{key} = {value!r}" if isinstance(value, float) else f'{key} = "{_toml_escaped(value)}"'
        pattern = re.compile(rf"^\s*{key}\s*=")
        found = [number for number, line in enumerate(lines) if pattern.match(line)]
        if found:
            lines[found[0]] = rendered
        else:
            lines.append(rendered)
    staged = path.with_name(f".{path.name}.writing")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text("\n".join(lines) + "\n", encoding="utf-8")
        read_config_file(staged)  # what serve and search will read back
        os.replace(staged, path)
    except OSError as exc:
        raise ConfigError(f"cannot write config file {path}: {exc.strerror}") from None
    finally:
        staged.unlink(missing_ok=True)
    return [key for key in values if os.environ.get(key)]


def _toml_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
