"""gunicorn settings for production; `reranker serve` loads this file too.

    gunicorn -c reranker/service/gunicorn.conf.py 'reranker.service:create_app()'

Values come from the same settings as everything else (see `reranker config`):
RERANKER_BIND, RERANKER_WORKERS, RERANKER_THREADS, RERANKER_TIMEOUT, from the environment
over the config file RERANKER_CONFIG names. The file's values are put in this process's
environment first, so the workers read theirs (RERANKER_READ_TIMEOUT, ...) from it too.

Why these choices:
- gthread workers: a request spends most of its time waiting on OpenSearch, so a few
  threads per process keep the CPUs busy; the scoring itself is numpy, which releases
  the GIL. One process per core (default) for the CPU-bound part. Our subclass
  (reranker/service/worker.py) reads each request whole in the worker's main thread
  first, so a client that trickles its request holds a socket, not a thread, and gets
  408 after RERANKER_READ_TIMEOUT seconds.
- No preload: each worker builds its app after the fork, so OpenSearch clients and
  SQLite connections are never shared with the master. The word vectors are
  memory-mapped read-only, so every worker maps the same pages of the page cache.
- Prometheus in multiprocess mode: a scrape lands on one worker but must count all of
  them, so values go to files in PROMETHEUS_MULTIPROC_DIR (a fresh directory unless set).
"""

import logging
import os
import shutil
import sys
import tempfile

from reranker.config import (
    ServiceSettings,
    Settings,
    naming_its_source,
    pinned_config_file,
    put_config_file_in_environ,
    remember_good_settings,
    restore_good_settings,
)
from reranker.errors import ConfigError


def _checked_service_settings() -> ServiceSettings:
    """The service's settings, once every setting the workers will read has passed its checks.

    At start, a bad value stops gunicorn with one line naming the setting and where it came
    from, as `reranker serve` does (it was a traceback from this file, or one per worker as
    each failed to boot). On SIGHUP gunicorn runs this file again: a bad value then leaves
    the service up, with one error line and the last good settings back in the environment,
    so that the new workers run as the old ones did (gunicorn itself exited on it).
    """
    try:
        put_config_file_in_environ(pinned_config_file())
        if "reranker.service.server" in sys.modules:
            # Under `reranker serve`, whose workers run with the settings serve checked.
            service = ServiceSettings.from_env(os.environ)
            service.validate()
        else:
            # gunicorn started by hand or by the image: each worker's create_app() reads them all.
            service = Settings.from_env(os.environ).service
    except ConfigError as exc:
        line = f"reranker: error: {naming_its_source(exc)}"
        if not restore_good_settings():
            print(line, file=sys.stderr)
            sys.exit(2)
        logging.getLogger("gunicorn.error").error("%s; the service keeps the settings it ran with (SIGHUP again once fixed)", line)
        return ServiceSettings.from_env(os.environ)
    remember_good_settings()
    return service


_service = _checked_service_settings()

bind = [_service.bind]
workers = _service.workers
threads = _service.threads
# gthread, reading each request whole before a thread sees it (slow clients cost no thread).
worker_class = "reranker.service.worker.BufferingThreadWorker"
timeout = _service.timeout
graceful_timeout = 20
keepalive = 5
preload_app = False
accesslog = None
errorlog = "-"
loglevel = "info"
# Bounds on the request line and headers (the body is bounded by RERANKER_MAX_BODY_BYTES).
limit_request_line = 8190
limit_request_fields = 100
# gunicorn >= 24 opens a control socket under $HOME; the container's user has no home,
# and nothing here uses it. (Older gunicorns ignore unknown names in this file.)
control_socket_disable = True

METRICS_PREFIX = "reranker-metrics-"
EMPTIED_BY = "_RERANKER_METRICS_EMPTIED_BY"  # "<master pid> <directory>"; private, not a setting


def _metrics_dir() -> str | None:
    """Prepare PROMETHEUS_MULTIPROC_DIR; the directory this master created, if it did.

    A directory the operator set is reused: the files a previous run left there (its
    workers' counters) are removed first, as prometheus_client asks, or they would be
    added to this run's. Otherwise a fresh one is made, with this master's pid in it, and
    directories of masters that died without cleaning up (SIGKILL) are removed.

    gunicorn runs this file again on SIGHUP, in the same master: the files are then this
    run's workers' values and stay (emptied, every counter went back to 0 on a reload).
    """
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given and _master_of(given) == os.getpid():
        return given  # made by this master
    if given and os.environ.get(EMPTIED_BY) == f"{os.getpid()} {given}":
        return None  # the operator's, emptied by this master when it started
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.remove(os.path.join(given, name))
        # In the environment, not in a file of the directory: a master of another run
        # (another container's, also pid 1) must empty it again.
        os.environ[EMPTIED_BY] = f"{os.getpid()} {given}"
        return None
    base = tempfile.gettempdir()
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if name.startswith(METRICS_PREFIX) and os.path.isdir(path) and not _alive(_master_of(path)):
            shutil.rmtree(path, ignore_errors=True)
    created = tempfile.mkdtemp(prefix=METRICS_PREFIX)
    with open(os.path.join(created, "master.pid"), "w", encoding="ascii") as handle:
        handle.write(str(os.getpid()))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = created
    return created


def _master_of(path: str) -> int | None:
    try:
        with open(os.path.join(path, "master.pid"), encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False  # no pid: made by a version that wrote none, or never finished
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


_created_metrics_dir = _metrics_dir()


def post_fork(server, worker):  # type: ignore[no-untyped-def]
    """In each worker: large blocks get mappings of their own, returned when freed
    (reranker/service/worker.py, "memory a request freed")."""
    from reranker.service.worker import keep_large_blocks_apart

    keep_large_blocks_apart()


def pre_request(worker, req):  # type: ignore[no-untyped-def]
    from reranker.service.worker import heap_bytes

    worker.log.debug("%s %s", req.method, req.path)  # gunicorn's own pre_request
    req.heap_before = heap_bytes()


def post_request(worker, req, environ, resp):  # type: ignore[no-untyped-def]
    """The heap a request grew given back to the system (worker.py, "memory a request freed")."""
    from reranker.service.worker import return_freed_memory

    before = getattr(req, "heap_before", None)
    if before is not None:
        return_freed_memory(before)


def post_worker_init(worker):  # type: ignore[no-untyped-def]
    """Load the vectors, WMD's machinery and open the store now, so the first request does
    not wait; then one log line with what this worker runs with (its native threads as the
    libraries report them, not as configured: what `RERANKER_BLAS_THREADS` really did)."""
    from reranker.threads import native_thread_counts

    runtime = getattr(worker.wsgi, "extensions", {}).get("reranker")
    if runtime is not None:
        done = runtime.warm()
        threads = ", ".join(f"{kind} {count}" for kind, count in sorted(native_thread_counts().items()))
        worker.log.info("reranker worker %s: %s; native threads: %s (RERANKER_BLAS_THREADS=%s)",
                        worker.pid, done, threads, runtime.settings.blas_threads)  # fmt: skip


def child_exit(server, worker):  # type: ignore[no-untyped-def]
    """Drop a dead worker's live gauges from the multiprocess metrics."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server):  # type: ignore[no-untyped-def]
    if _created_metrics_dir:
        shutil.rmtree(_created_metrics_dir, ignore_errors=True)
