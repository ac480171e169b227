#!/usr/bin/env python3
"""Which word2vec epochs and dimension `reranker index --train-vectors` should default to.

For each shared data set and each (dimension, epochs) in the grid, trains CBOW word2vec
on the data set's own corpus with `reranker train word2vec`, then runs `reranker
evaluate` with those vectors: nDCG@10 of the corrected topics alone and of the default
ranker (corrected topics + BM25, weight 0.3), with the paired randomisation p-value
against BM25. Every figure comes from the CLI, so each row can be re-run by hand.

The choice rule is fixed before looking (the held-out data is another summary-to-paper
set): the smallest, fastest configuration whose mean nDCG@10 of the default ranker over
both sets is within 0.005 of the best mean. Whether it beats BM25 on each set is printed
beside it: that decides whether domain vectors may be the product's default vectors (the
bundled GloVe is), not which training settings are best.

Usage:
  python bench/word2vec_defaults.py --data-dir /tmp/w2v-sweep          # full grid, ~1 h
  python bench/word2vec_defaults.py --dims 100 --epochs 5,10 --sets cisi
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# The indexing's many small eigenproblems run ~10x slower with OpenBLAS threads (see
# ../shared/PERFORMANCE.md); set before numpy loads.
from benchlib import machine, product_threads, table

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

from evaluate_matrix import run_cli  # noqa: E402  (after the BLAS settings)

DATASETS_ROOT = Path("/work/shared/data")
DEFAULT_RANKER = "hidden_topics_corrected+bm25"
WEIGHT = 0.3
TOLERANCE = 0.005


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/w2v-sweep"))
    parser.add_argument("--datasets-root", type=Path, default=DATASETS_ROOT)
    parser.add_argument("--sets", default="clscisumm2018-train,cisi")
    parser.add_argument("--dims", default="100,200,300")
    parser.add_argument("--epochs", default="5,10,20")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    sets = args.sets.split(",")
    grid = [(int(d), int(e)) for d in args.dims.split(",") for e in args.epochs.split(",")]
    data_dir = args.data_dir.resolve()
    print(json.dumps(machine(["gensim", "numpy"], os.environ["OPENBLAS_NUM_THREADS"])), flush=True)

    results: dict[str, dict[tuple[int, int], dict[str, float]]] = {name: {} for name in sets}
    for name in sets:
        folder = args.datasets_root / name
        for dim, epochs in grid:
            vectors = data_dir / "w2v" / f"{name}-d{dim}-e{epochs}.kv"
            started = time.perf_counter()
            if not vectors.exists():
                run_cli(["--data-dir", str(data_dir), "train", "word2vec", str(folder / "corpus.jsonl"),
                         "--out", str(vectors), "--dim", str(dim), "--epochs", str(epochs), "--workers", "1",
                         "--no-progress"], subprocess_mode=True)  # fmt: skip
            trained = time.perf_counter() - started
            output, _ = run_cli(["--data-dir", str(data_dir), "--vectors", str(vectors), "evaluate", str(folder),
                                 "--rankers", f"bm25,hidden_topics_corrected,{DEFAULT_RANKER}",
                                 "--fusion-weight", str(WEIGHT), "--json", "--no-progress"], subprocess_mode=True)  # fmt: skip
            report = json.loads(output)
            row = {"train_s": trained}
            for ranker in report["rankers"]:
                row[ranker] = report["results"][ranker]["ndcg@10"]
                row[ranker + " p"] = report["p_values"]["bm25"].get(ranker, {}).get("ndcg@10", float("nan"))
            results[name][(dim, epochs)] = row
            print(f"{name} d={dim} epochs={epochs}: {json.dumps(row)}", flush=True)

    rows = []
    means = {}
    for dim, epochs in grid:
        cells = [f"{dim}", f"{epochs}"]
        fused = []
        for name in sets:
            row = results[name][(dim, epochs)]
            fused.append(row[DEFAULT_RANKER])
            cells += [f"{row['hidden_topics_corrected']:.3f}", f"{row[DEFAULT_RANKER]:.3f} (p={row[DEFAULT_RANKER + ' p']:.3f})",
                      f"{row['bm25']:.3f}", f"{row['train_s']:.0f}"]  # fmt: skip
        means[(dim, epochs)] = sum(fused) / len(fused)
        rows.append([*cells, f"{means[(dim, epochs)]:.3f}"])
    headers = ["dim", "epochs"]
    for name in sets:
        headers += [f"{name} corrected", f"{name} default", f"{name} BM25", f"{name} train s"]
    print()
    print(table([*headers, "mean default"], rows))
    best = max(means.values())
    eligible = [config for config in grid if means[config] >= best - TOLERANCE]
    choice = min(eligible, key=lambda c: c[0] * c[1])
    beats = [name for name in sets if results[name][choice][DEFAULT_RANKER] > results[name][choice]["bm25"]]
    print(f"\nbest mean {best:.3f}; choice (the smallest within {TOLERANCE} of it): d={choice[0]}, {choice[1]} epochs; "
          f"its default ranker beats BM25 on: {', '.join(beats) or 'neither set'}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({name: {f"d{d}-e{e}": row for (d, e), row in rows_.items()} for name, rows_ in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
