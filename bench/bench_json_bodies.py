"""What refusing duplicate keys costs a request body's parsing: this checkout's `parse_json`
(the service's one JSON reader, whose `object_pairs_hook` checks every object's keys)
against another commit's (default: c949aed, the last without the check), in the same run.

    python bench/bench_json_bodies.py                  # bodies of about 10 MB, against c949aed
    python bench/bench_json_bodies.py --baseline COMMIT --mb 2 --rounds 5

The baseline is `reranker/service/bodies.py` as `git show BASELINE:...` gives it, loaded as
a module of its own.
Two bodies of about --mb megabytes, both as a client could send them: "many objects", a
/rerank body of short texts as {"id", "text", "score"} objects (the worst case for the
hook: one call per object, about 60 bytes each); and "few objects", the same bytes in a
few long texts. The two readers take turns, round by round (the first one alternating), so
that both meet the same load of a shared machine; the table gives the median seconds and
the ratio hook / baseline. Exits 1 (no figures) if the two readings differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
import types
from pathlib import Path
from typing import Any, Callable

from benchlib import machine, product_threads, require, table

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS); nothing here uses BLAS

from reranker.service.bodies import parse_json

REPO = Path(__file__).resolve().parents[1]
BEFORE = "c949aed"  # the last commit whose parse_json kept a repeated key's last value


def _bodies(megabytes: float) -> dict[str, bytes]:
    size = int(megabytes * 1_000_000)
    text = "statistical machine translation with word alignment"
    document = {"id": "P00-0000", "text": text, "score": 1.5}
    per = len(json.dumps(document)) + 2
    many = {"query": text, "documents": [{**document, "id": f"P{i:07d}"} for i in range(size // per)]}
    long_text = (text + " ") * (size // 10 // (len(text) + 1))
    few = {"query": text, "documents": [{"text": long_text, "score": float(i)} for i in range(10)]}
    return {"many objects": json.dumps(many).encode(), "few objects": json.dumps(few).encode()}


def _baseline(commit: str) -> Callable[[bytes], Any]:
    """`parse_json` of `commit`'s bodies.py."""
    source = subprocess.run(
        ["git", "show", f"{commit}:reranker/service/bodies.py"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("baseline_bodies")
    exec(compile(source, f"{commit}:reranker/service/bodies.py", "exec"), module.__dict__)
    return module.parse_json  # type: ignore[no-any-return]


def _seconds(read: Callable[[bytes], Any], raw: bytes) -> float:
    started = time.perf_counter()
    read(raw)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10.0, help="body size in megabytes (default 10)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per reader (default 7)")
    parser.add_argument("--baseline", default=BEFORE, help=f"the commit to compare with (default {BEFORE}, the last without the check)")
    args = parser.parse_args()
    baseline = _baseline(args.baseline)
    rows = []
    for name, raw in _bodies(args.mb).items():
        require(parse_json(raw) == baseline(raw), f"{name}: the two readers disagree")
        timed: dict[str, list[float]] = {"baseline": [], "hook": []}
        for round_ in range(args.rounds):
            order = (("baseline", baseline), ("hook", parse_json))
            for label, read in order if round_ % 2 == 0 else order[::-1]:
                timed[label].append(_seconds(read, raw))
        base, hook = statistics.median(timed["baseline"]), statistics.median(timed["hook"])
        rows.append([name, f"{len(raw) / 1e6:.1f}", f"{base:.3f}", f"{hook:.3f}", f"{hook / base:.2f}x"])
    print(table(["body", "MB", f"{args.baseline} s", "this s", "ratio"], rows))
    print(json.dumps(machine([], "n/a"), indent=None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
