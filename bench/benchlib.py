"""What the benchmark scripts share: a refusal to report wrong figures, plain tables, and
a record of the machine a run was made on.

The scripts run as `python bench/NAME.py`, so this folder is on sys.path and they import
this module by its name. It imports nothing heavy (bench_core.py sets BLAS threads before
numpy is first imported).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def require(condition: bool, message: str) -> None:
    """An assertion that `python -O` keeps: no figures are reported for wrong results."""
    if not condition:
        raise AssertionError(f"{message}; refusing to report figures")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, label_column: bool = True) -> str:
    """Right-aligned columns under a rule; with `label_column`, the first is left-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 and label_column else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths))
        )
        for line in (headers, ["-" * width for width in widths], *rows)
    ]
    return "\n".join(lines)


def machine(packages: Sequence[str], blas_threads: str, **versions: object) -> dict[str, object]:
    """When and on what a benchmark ran: date, Python and package versions (plus
    `versions`, e.g. a server's), BLAS threads, CPUs and the load when it started."""
    import datetime
    import importlib.metadata
    import os
    import platform

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        **{name: importlib.metadata.version(name) for name in packages},
        **versions,
        "BLAS threads": blas_threads,
        "cpus": os.cpu_count(),
        "load avg (1 min)": round(os.getloadavg()[0], 2),
    }


def product_threads() -> int:
    """Size every native thread pool as the product does (RERANKER_BLAS_THREADS, default
    1, through `reranker.threads`, as the CLI and each service worker do); call it before
    numpy is imported, so the variables reach every BLAS the run loads. Child processes
    inherit them. Returns the count, for the report."""
    from reranker.config import Settings
    from reranker.threads import limit_native_threads

    threads = Settings.from_env().blas_threads
    limit_native_threads(threads)
    return threads


@contextmanager
def throwaway_index(corpus: Path) -> Iterator[Any]:
    """The engine over `corpus` indexed by the real pipeline into a temporary data dir
    (RERANKER_DATA_DIR names it meanwhile, and is put back after), its store closed and the
    dir removed afterwards; `engine.store.directory` is its index."""
    from reranker.config import Settings
    from reranker.indexing import index_corpus
    from reranker.pipeline import build_engine

    before = os.environ.get("RERANKER_DATA_DIR")
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ["RERANKER_DATA_DIR"] = data_dir
        try:
            settings = Settings.from_env()
            engine = build_engine(settings)
            try:
                index_corpus(corpus, engine.store, engine.vectors, settings.k, stopwords=engine.stopwords, show_progress=False)
                yield engine
            finally:
                engine.store.close()  # closing twice is harmless: a caller may close it first
        finally:
            if before is None:
                os.environ.pop("RERANKER_DATA_DIR", None)
            else:
                os.environ["RERANKER_DATA_DIR"] = before
