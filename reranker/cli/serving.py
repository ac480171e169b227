"""Commands that run servers: serve (the HTTP service) and dev-cluster (the bundled test cluster)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any, TextIO

from reranker.cli.common import check_port_free, conversion_progress, log, positive_int
from reranker.config import DEFAULT_VECTORS, Settings, put_config_file_in_environ
from reranker.errors import ConfigError, InputError
from reranker.text import counted

if TYPE_CHECKING:
    from reranker.store import Store


def add_parsers(commands: Any) -> None:
    """The command-line parsers of serve, dev-cluster."""
    serve = commands.add_parser("serve", help="run the HTTP service (gunicorn) over the same store")
    serve.add_argument("--bind", help="HOST:PORT to listen on (default 127.0.0.1:8000, env RERANKER_BIND)")
    serve.add_argument("--workers", dest="server_workers", type=positive_int, help="worker processes (default: CPU count, env RERANKER_WORKERS)")
    serve.add_argument("--threads", type=positive_int, help="threads per worker (default 8, env RERANKER_THREADS)")
    serve.add_argument("--timeout", type=positive_int, help="seconds before a stuck worker is restarted (default 30, env RERANKER_TIMEOUT)")

    dev = commands.add_parser(
        "dev-cluster",
        help="run the bundled in-memory OpenSearch-compatible test server (osmem-server, the dev-cluster extra) "
        "to try the OpenSearch store without Docker; its data lives in memory only",
    )
    dev.add_argument("--bind", default="127.0.0.1:9200", help="HOST:PORT (default 127.0.0.1:9200)")


def cmd_serve(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.service.access import LOG_DATE_FORMAT, LOG_FORMAT

    # Its lines as gunicorn's own, which follow them (timestamp, pid, level), and so are
    # those of the workers it forks (reranker/service/access.py).
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
    check_port_free(settings.service.bind)
    # _serve puts settings in the environment for gunicorn: they are put back when it
    # returns or fails, or a later command in the same process (main() called again, as
    # the tests do) would read this serve's config file and options.
    environ = dict(os.environ)
    try:
        return _serve(args, settings, out)
    finally:
        for name in set(os.environ) - set(environ):
            del os.environ[name]
        os.environ.update(environ)


def _serve(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """serve's work once the settings are checked (cmd_serve restores the environment after)."""
    from reranker.embeddings import load_vectors
    from reranker.errors import StoreUnavailableError
    from reranker.pipeline import vectors_spec
    from reranker.service.server import serve
    from reranker.store import open_store

    # gunicorn's config file and its workers read settings from the environment alone
    # (service/gunicorn.conf.py, service/worker.py): the config file's values go there,
    # under the environment's as in Settings, or a RERANKER_READ_TIMEOUT of the file would
    # be shown by `reranker config` and ignored by the workers; and the options go over
    # both, or RERANKER_WORKERS=0 under --workers 1 would fail them with a traceback.
    # reread=False: on SIGHUP the workers keep the values this serve read, as its settings do.
    put_config_file_in_environ(args.config, reread=False)
    service = settings.service
    os.environ.update(
        RERANKER_BIND=service.bind, RERANKER_WORKERS=str(service.workers),
        RERANKER_THREADS=str(service.threads), RERANKER_TIMEOUT=str(service.timeout),
    )

    # Once, in the master: a first run converts the vectors here (the rerank routes need
    # them even before anything is indexed), and a bad vectors setting fails now instead
    # of in every worker. Workers then only memory-map them.
    store = open_store(settings)
    try:
        spec = vectors_spec(settings, store)
    except StoreUnavailableError as exc:
        # The workers read the index's vectors when the cluster answers; /readyz says until then.
        log.warning("cannot read which vectors the index was built with yet: %s", exc)
        spec = settings.vectors or DEFAULT_VECTORS
    else:
        nothing = _nothing_indexed(store, settings)
        if nothing:
            log.warning(
                "%s; /rerank and the Cohere routes rerank sent texts meanwhile, by their order, topics and best passages "
                "(the word statistics are the vectors' own and the sent texts', not a corpus's)", nothing,
            )  # fmt: skip
    finally:
        store.close()
    vectors = load_vectors(spec, settings.vectors_cache, conversion_progress)
    cluster = settings.opensearch_store
    where = f"OpenSearch at {cluster.display_hosts} (alias {cluster.alias})" if cluster else f"the embedded store in {settings.data_dir / 'index'}"
    service = settings.service
    print(
        f"serving {where} with {vectors.info.name} on http://{service.bind} "
        f"({counted(service.workers, 'worker')} x {counted(service.threads, 'thread')}); API: http://{service.bind}/openapi.json",
        file=out,
        flush=True,
    )
    serve(settings)
    return 0

def _nothing_indexed(store: "Store", settings: Settings) -> str | None:
    """What the search routes answer while nothing is indexed, as this store answers it;
    None once something is (or while the cluster's state is unknown: /readyz says it)."""
    from reranker.errors import IndexNotFoundError, StoreUnavailableError

    try:
        if store.count() > 0:
            return None
    except IndexNotFoundError:
        # The OpenSearch store before its first `reranker index`: no alias to search.
        cluster = settings.opensearch_store
        alias = f" {cluster.alias!r}" if cluster else ""
        return (
            f"there is no index{alias} yet: /search answers 404 (index_not_found_exception) and /readyz 503 until "
            "`reranker index CORPUS.jsonl` makes it (or RERANKER_INDEX names one that exists)"
        )
    except StoreUnavailableError:
        return None
    return "the index is empty: /search finds nothing (200, no hits) and /readyz answers 200 with documents: 0 until `reranker index CORPUS.jsonl`"


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "of unknown version"


def cmd_dev_cluster(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Run osmem-server in the foreground until Ctrl-C: the OpenSearch walkthrough without Docker."""
    try:
        from osmem_server import OsmemError, OsmemServer
    except ImportError:
        raise ConfigError(
            'dev-cluster runs osmem-server, which is not installed: pip install "hidden-topic-reranker[dev-cluster]" '
            '(in a clone: pip install -e ".[dev-cluster]")'
        ) from None
    check_port_free(args.bind)
    try:
        server = OsmemServer.start(addr=args.bind, japanese=False)
    except OsmemError as exc:
        raise InputError(str(exc)) from None
    print(
        # server.version is the OpenSearch API it answers as; the package has its own.
        f"an in-memory OpenSearch-compatible server (osmem-server {_package_version('osmem-server')}, "
        f"OpenSearch API {server.version}) listens on {server.url}\n"
        f"  reranker --opensearch-url {server.url} index corpus.jsonl\n"
        f"  OPENSEARCH_URL={server.url} reranker serve\n"
        "Everything it holds is lost when it stops (Ctrl-C). It is a test server: no kNN, its BM25 is not Lucene's.",
        file=out, flush=True,
    )
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close(grace=2.0)  # then killed: it holds nothing worth waiting for
    return 0


COMMANDS = {"serve": cmd_serve, "dev-cluster": cmd_dev_cluster}
