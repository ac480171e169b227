#!/usr/bin/env python3
"""What the README's quickstart costs: the light install against the test extra.

    python bench/bench_install.py            # about 3 minutes on a warm pip cache; downloads once otherwise
    python bench/bench_install.py --runs 2   # each variant twice, alternating

For each variant, in a new virtual environment in a temporary folder: `pip install -e REPO`
(the README's first command: what running the product needs) or `pip install -e "REPO[test]"`
(what the tests need), then `reranker demo` with an empty data dir and an empty vectors cache,
as on a new machine (so the demo converts the bundled vectors, as a first run does). Prints
each variant's install and demo time and the environment's size on disk (`du`), and the light
install's figures as ratios to the test extra's measured in the same run.

pip's own cache is used as it is: a first `pip download` of every wheel both variants need
fills it before anything is timed, so neither variant pays for the network and their times
compare installs, not downloads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine, require, table

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"light: pip install -e .": "", "test: pip install -e .[test]": "[test]"}


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a new shell would have: none of this checkout's PYTHONPATH or venv."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    return {**env, **extra}


def run(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    require(done.returncode == 0, f"{' '.join(argv[:4])} failed:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    return seconds


def megabytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def measure(extra: str, python: str) -> dict[str, float]:
    """One fresh environment: install, then the demo on an empty data dir and cache."""
    with tempfile.TemporaryDirectory(prefix="bench-install-") as folder:
        root = Path(folder)
        venv = root / "venv"
        env = clean_env(RERANKER_DATA_DIR=str(root / "data"), RERANKER_CACHE_DIR=str(root / "cache"))
        started = time.perf_counter()
        run([python, "-m", "venv", str(venv)], env, root)
        run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "-q", "-e", f"{REPO}{extra}"], env, root)
        installed = time.perf_counter() - started
        demo = run([str(venv / "bin" / "reranker"), "demo"], env, REPO)
        return {"install": installed, "demo": demo, "MB": float(megabytes(venv))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="fresh environments per variant, alternating (default 1)")
    parser.add_argument("--python", default="python3", help="the interpreter the environments are made from (default python3)")
    args = parser.parse_args()
    print(machine([], "the product's own (RERANKER_BLAS_THREADS, default 1)"))

    with tempfile.TemporaryDirectory(prefix="bench-install-wheels-") as wheels:
        # Fills pip's cache with every wheel the test extra needs (a superset of the light
        # install's), so that no timed install downloads.
        run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d", wheels, f"{REPO}[test]"], clean_env(), REPO)

    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for _ in range(args.runs):
        for name, extra in VARIANTS.items():
            results[name].append(measure(extra, args.python))

    rows = []
    for name, runs in results.items():
        cells = {key: [run_[key] for run_ in runs] for key in ("install", "demo", "MB")}
        rows.append([name, *(_span(cells[key], "{:.0f}") for key in ("install", "demo")), _span([i + d for i, d in zip(cells["install"], cells["demo"])], "{:.0f}"), _span(cells["MB"], "{:.0f}")])
    print(table(["variant", "install s", "demo s", "install + demo s", "venv MB"], rows))

    light, full = (results[name] for name in VARIANTS)
    ratio = lambda key: statistics.median(l[key] for l in light) / statistics.median(f[key] for f in full)  # noqa: E731
    print(
        f"light / test extra (medians of the same run): install {ratio('install'):.2f}x, demo {ratio('demo'):.2f}x, "
        f"size {ratio('MB'):.2f}x; load avg at the end {os.getloadavg()[0]:.2f}"
    )
    return 0


def _span(values: list[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if round(low) == round(high) else f"{fmt.format(low)}-{fmt.format(high)}"


if __name__ == "__main__":
    sys.exit(main())
