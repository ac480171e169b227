"""The threads of the native math libraries: the one place the product sizes them.

`Settings.blas_threads` (RERANKER_BLAS_THREADS, default 1) applies to every BLAS and
OpenMP pool in the process, whichever way it started: the CLI (`main`), and the service's
app factory, which `reranker serve`, the Docker image and a plain `gunicorn` all go
through in each worker.

A library reads its thread count once, when it is loaded, and a process loads several at
different times: numpy's OpenBLAS at the first numpy import, scipy's own OpenBLAS and an
OpenMP runtime when gensim or scipy.linalg are first imported (the topic extraction and
WMD). So both halves are needed: threadpoolctl for the pools already loaded, and the
libraries' environment variables for those loaded later (limiting only the loaded ones
left scipy's OpenBLAS at one thread per core: measured with `threadpool_info()` after
importing gensim).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

# What OpenBLAS, an OpenMP runtime and MKL read when they load.
VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_native_threads(threads: int) -> None:
    """Every native thread pool of this process, loaded or not yet, at `threads` threads."""
    from threadpoolctl import threadpool_limits

    for name in VARIABLES:
        os.environ[name] = str(threads)
    threadpool_limits(limits=threads)


@contextmanager
def native_threads(threads: int) -> Iterator[None]:
    """`limit_native_threads` for a block, then the environment and the loaded pools as
    they were (`reranker.cli.main` runs in-process in the tests, many times)."""
    from threadpoolctl import threadpool_limits

    saved = {name: os.environ.get(name) for name in VARIABLES}
    limits = threadpool_limits(limits=threads)
    for name in VARIABLES:
        os.environ[name] = str(threads)
    try:
        yield
    finally:
        limits.restore_original_limits()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def native_thread_counts() -> dict[str, int]:
    """The threads of each kind of pool loaded now ("blas", "openmp"): the largest over
    that kind's libraries, so one library left at its default shows."""
    from threadpoolctl import threadpool_info

    counts: dict[str, int] = {}
    for pool in threadpool_info():
        kind = str(pool["user_api"])
        counts[kind] = max(counts.get(kind, 0), int(pool["num_threads"]))
    return counts
