#!/usr/bin/env python3
"""Every ranker on both shared data sets with both vector sets -> docs/rankers.md (+ .json).

The matrix:
  query sets  clscisumm2018-train/queries.jsonl (human summaries), cisi/queries.jsonl
  vectors     the bundled GloVe 6B 50d (`--vectors glove-6b-50d`, the default) and CBOW
              word2vec trained by the product on each set's own corpus (`--train-vectors`:
              the product's default dimension and epochs, trained once and cached)
  rankers     the rankers alone, the two-way fusions with BM25 and the N-way fusions of
              RANKERS below; min-max and z-score fusions at weight 0.3; K = 15, window 100

One `reranker evaluate ... --json --per-query` per (query set, vectors), in-process through
`reranker.cli.main` or with --subprocess as a child process (the helpers of
evaluate_matrix.py), so every table can be re-run by hand with the command the report lists.
Beside what evaluate's JSON gives (means, p-values against BM25 and against hidden_topics,
wins/ties/losses), the script tests each fusion against the paper's fusion
(hidden_topics+bm25) and the N-way fusions against the default ranker, with the project's
own paired randomisation test (reranker.evaluation.paired_randomization_p: same rounds and
seed as evaluate) on the per-query values. The findings section is generated from the
numbers, so it stays true when they change.

Multiple comparisons: beside each raw p against BM25 the report gives Holm's adjustment
(reranker.evaluation.holm_adjusted) over one family per query set, vectors and metric: every
ranker tested against BM25 on that set with those vectors (17 with the default rankers),
gathered over the runs of that cell (one run per cell here), as bench/evaluate_matrix.py does.
Per metric, because nDCG@10 is the headline and reading it alone should not pay for the
others; per query set and vectors, because each table is read on its own and its rankers are
the comparisons it makes; per baseline, because tests against another baseline answer another
question. The p-values come from `Run.p` (evaluate's, or where it gives none the same test on
the per-query values), so a saved report read back with --from-json gets the same families.
The arrows stay the raw p; the p against the paper's formula and against the default (N-way
section) are not adjusted.

Usage (from anywhere; paths default relative to the repository root):
  python bench/evaluate_rankers.py --data-dir /tmp/er       # ~20-40 min from scratch
  python bench/evaluate_rankers.py --sets cisi --vectors glove --rankers bm25,hidden_topics \
      --out /tmp/try.md                                      # a quick try
  python bench/evaluate_rankers.py --from-json docs/rankers.json   # the Markdown again, no runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluate_matrix import (
    DEFAULT_DATASETS_ROOT,
    GLOVE,
    QUERY_SETS,
    REPO,
    SIGNIFICANCE,
    CliError,
    QuerySet,
    display_path,
    environment,
    fmt,
    fmt_p,
    limit_blas_threads,
    marked,
    run_cli,
    vectors_info,
)

from reranker.config import DEFAULT_RANKER

DEFAULT_DATA_DIR = REPO / ".reranker-data" / "evaluate-rankers"  # git-ignored (.reranker-data/)
DEFAULT_OUT = REPO / "docs" / "rankers.md"

BM25 = "bm25"
PAPER = "hidden_topics"  # Gong et al. (2018), Eq. 11
PAPER_FUSION = "hidden_topics+bm25"
PREVIOUS_DEFAULT = "hidden_topics_corrected+bm25"  # the default until 2026-11-26
ALONE = (BM25, PAPER, "hidden_topics_code", "hidden_topics_corrected", "wmd", "doc2vec")
TWO_WAY = (
    PAPER_FUSION, "hidden_topics_code+bm25", DEFAULT_RANKER, PREVIOUS_DEFAULT, "wmd+bm25", "doc2vec+bm25",
    "hidden_topics_corrected+bm25:rrf", "hidden_topics_corrected+bm25:zscore",
)  # fmt: skip
N_WAY = (
    "hidden_topics_corrected+doc2vec+bm25", "hidden_topics_corrected+wmd+bm25",
    "hidden_topics_corrected+doc2vec+wmd+bm25", "hidden_topics_corrected+doc2vec+bm25:rrf",
)  # fmt: skip
RANKERS = (*ALONE, *TWO_WAY, *N_WAY)
NDCG = "ndcg@10"
SECOND_METRICS = (("map", "MAP"), ("p@1", "P@1"), ("mrr", "MRR"))
TESTED_METRICS = (NDCG, *(metric for metric, _ in SECOND_METRICS))  # the ones with arrows
VECTORS = {"glove": "GloVe 6B 50d", "word2vec": "corpus word2vec"}
SETS = tuple(qs for qs in QUERY_SETS if qs.queries_file == "queries.jsonl")


def is_fusion(ranker: str) -> bool:
    return "+" in ranker


def paper_baseline(ranker: str) -> str | None:
    """What a ranker is tested against as "the paper's formula": hidden_topics for a ranker
    alone, hidden_topics+bm25 for a fusion; None for those two themselves."""
    baseline = PAPER_FUSION if is_fusion(ranker) else PAPER
    return None if ranker == baseline else baseline


# --- running ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One `reranker evaluate` of every ranker on one query set with one vector set."""

    query_set: QuerySet
    vectors: str  # a key of VECTORS
    argv: tuple[str, ...]
    seconds: float
    result: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.query_set.label} — {VECTORS[self.vectors]}"

    def column(self, ranker: str, metric: str = NDCG) -> list[float]:
        """Per-query values of `ranker`, in BM25's query order (the same for every ranker)."""
        per_query = self.result["per_query"]
        return [per_query[ranker][query][metric] for query in per_query[BM25]]

    def mean(self, ranker: str, metric: str = NDCG) -> float:
        return float(self.result["results"][ranker][metric])

    def p(self, ranker: str, baseline: str, metric: str = NDCG) -> float | None:
        """Paired randomisation p-value of `ranker` against `baseline`: evaluate's when its
        JSON has it, else the same test on the per-query values; None for the baseline itself."""
        if ranker == baseline:
            return None
        given = self.result["p_values"].get(baseline, {}).get(ranker, {}).get(metric)
        if given is not None:
            return float(given)
        from reranker.evaluation import paired_randomization_p

        return paired_randomization_p(self.column(ranker, metric), self.column(baseline, metric))


def evaluate_argv(query_set: QuerySet, vectors: str, args: argparse.Namespace) -> list[str]:
    vector_args = ["--vectors", GLOVE] if vectors == "glove" else []
    return [
        "--data-dir", display_path(args.data_dir),
        *vector_args,
        "evaluate", display_path(args.datasets_root / query_set.dataset),
        "--queries-file", query_set.queries_file,
        "--rankers", ",".join(args.rankers),
        "--k", str(args.k),
        "--window", str(args.window),
        "--fusion-weight", f"{args.fusion_weight:g}",
        "--json", "--per-query", "--no-progress",
        *(["--train-vectors"] if vectors == "word2vec" else []),
    ]  # fmt: skip


def run_all(args: argparse.Namespace) -> list[Run]:
    cells = [(qs, vectors) for qs in args.sets for vectors in args.vectors]
    runs = []
    for number, (query_set, vectors) in enumerate(cells, start=1):
        argv = evaluate_argv(query_set, vectors, args)
        print(f"[{number}/{len(cells)}] {query_set.key} {vectors}: reranker {shlex.join(argv)}", flush=True)
        output, seconds = run_cli(argv, subprocess_mode=args.subprocess)
        run = Run(query_set, vectors, tuple(argv), seconds, json.loads(output))
        best = max(run.result["rankers"], key=run.mean)
        print(f"      {seconds:6.1f} s; nDCG@10 BM25 {run.mean(BM25):.3f}, best {best} {run.mean(best):.3f}", flush=True)
        runs.append(run)
    return runs


def vectors_used(runs: Sequence[Run], data_dir: Path) -> dict[str, dict[str, Any]]:
    """The vectors each run's config names, by "vectors:dataset": name, dimension,
    vocabulary, sha256 (and word2vec's training settings)."""
    used: dict[str, dict[str, Any]] = {}
    for run in runs:
        name = run.result["config"]["vectors"]
        if run.vectors == "glove":
            used[f"glove:{run.query_set.dataset}"] = vectors_info(GLOVE)
            continue
        # --train-vectors keeps them as <data dir>/word2vec/<name>.kv, their record beside.
        path = data_dir / "word2vec" / f"{name}.kv"
        info = vectors_info(display_path(path))
        record = json.loads(path.with_suffix(".kv.json").read_text(encoding="utf-8"))
        used[f"word2vec:{run.query_set.dataset}"] = {**info, "params": record.get("params", {})}
    return used


# --- derived figures --------------------------------------------------------------------


def against_paper(run: Run) -> dict[str, dict[str, Any]]:
    """ranker -> its paper baseline and the nDCG@10 p-value against it."""
    return {
        ranker: {"baseline": baseline, "p_ndcg@10": run.p(ranker, baseline)}
        for ranker in run.result["rankers"]
        if (baseline := paper_baseline(ranker)) is not None and baseline in run.result["rankers"]
    }


def n_way_comparison(run: Run) -> dict[str, Any] | None:
    """The best N-way fusion against the default ranker and against the best two-way fusion."""
    rankers = run.result["rankers"]
    n_way = [r for r in N_WAY if r in rankers]
    two_way = [r for r in TWO_WAY if r in rankers]
    if not n_way or DEFAULT_RANKER not in rankers:
        return None
    best = max(n_way, key=run.mean)
    best_two = max(two_way, key=run.mean)
    return {
        "best_n_way": best,
        "best_two_way": best_two,
        "each": {
            ranker: {"delta_vs_default": run.mean(ranker) - run.mean(DEFAULT_RANKER), "p_vs_default": run.p(ranker, DEFAULT_RANKER)}
            for ranker in n_way
        },
        "best_vs_best_two_way": {"delta": run.mean(best) - run.mean(best_two), "p": run.p(best, best_two)},
    }


def family_p_values(runs: Sequence[Run], query_set: QuerySet, vectors: str) -> dict[str, dict[str, float]]:
    """ranker -> metric -> raw p against BM25 for one cell (query set, vectors): every ranker
    tested there, gathered over the cell's runs, on every metric the report marks."""
    family: dict[str, dict[str, float]] = {}
    for run in runs:
        if (run.query_set, run.vectors) != (query_set, vectors):
            continue
        for ranker in run.result["rankers"]:
            if ranker != BM25:
                family[ranker] = {metric: p for metric in TESTED_METRICS if (p := run.p(ranker, BM25, metric)) is not None}
    return family


def holm_families(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One entry per cell (query set, vectors): its raw p-values against BM25 and their Holm
    adjustment (one family per metric), both ranker -> metric -> p."""
    from reranker.evaluation import holm_adjusted

    families = []
    for query_set, vectors in dict.fromkeys((run.query_set, run.vectors) for run in runs):
        p_values = family_p_values(runs, query_set, vectors)
        families.append({
            "query_set": query_set.key, "vectors": vectors, "baseline": BM25,
            "p_values": p_values, "holm_p_values": holm_adjusted(p_values),
        })  # fmt: skip
    return families


def holm_of(families: Sequence[dict[str, Any]], run: Run) -> dict[str, dict[str, float]]:
    """The Holm-adjusted p-values against BM25 of `run`'s cell, ranker -> metric -> p."""
    for family in families:
        if (family["query_set"], family["vectors"]) == (run.query_set.key, run.vectors):
            adjusted: dict[str, dict[str, float]] = family["holm_p_values"]
            return adjusted
    return {}


def comparisons(runs: Sequence[Run]) -> list[tuple[Run, dict[str, Any]]]:
    """(run, its n_way_comparison) for every run that has N-way fusions and the default."""
    return [(run, comparison) for run in runs if (comparison := n_way_comparison(run)) is not None]


def sanity(runs: Sequence[Run]) -> list[str]:
    """Problems: BM25 that depends on the vectors, a query answered approximately, or a
    p-value this script's test does not reproduce from evaluate's own (so the p-values it
    adds come from the same test)."""
    from reranker.evaluation import paired_randomization_p

    problems = []
    for dataset in dict.fromkeys(run.query_set.dataset for run in runs):
        bm25 = {round(run.mean(BM25), 12) for run in runs if run.query_set.dataset == dataset}
        if len(bm25) > 1:
            problems.append(f"{dataset}: BM25 nDCG@10 differs between vector sets: {sorted(bm25)}")
    for run in runs:
        approximate = {ranker: n for ranker, n in run.result["approximate"].items() if n}
        if approximate:
            problems.append(f"{run.label}: queries answered approximately (a time budget ran out): {approximate}")
        for ranker in run.result["p_values"].get(BM25, {}):
            mine = paired_randomization_p(run.column(ranker), run.column(BM25))
            if abs(mine - run.result["p_values"][BM25][ranker][NDCG]) > 1e-12:
                problems.append(f"{run.label}: {ranker} p against BM25 is {mine} here, evaluate says otherwise")
    return problems


# --- Markdown ---------------------------------------------------------------------------


def p_with_arrow(p: float | None, value: float, baseline: float) -> str:
    """The p-value, with ↑/↓ when the ranker is better/worse than the baseline at p < 0.05."""
    if p is None:
        return "–"
    arrow = "" if p >= SIGNIFICANCE else (" ↑" if value > baseline else " ↓")
    return fmt_p(p) + arrow


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> list[str]:
    """A Markdown table: the first `text_columns` columns left-aligned, the numbers right."""
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * text_columns + "---:|" * (len(headers) - text_columns),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def against_bm25(run: Run, ranker: str, metric: str = NDCG) -> str:
    """The mean, with ↑/↓ when it differs from BM25's at p < 0.05."""
    value, base = run.mean(ranker, metric), run.mean(BM25, metric)
    return fmt(value) if ranker == BM25 else marked(value, base, run.p(ranker, BM25, metric))


def overview(runs: Sequence[Run]) -> list[str]:
    rows = [[f"`{ranker}`", *(against_bm25(run, ranker) for run in runs)] for ranker in runs[0].result["rankers"]]
    return table(["ranker", *(f"{run.query_set.label.split(',')[0]}, {VECTORS[run.vectors]}" for run in runs)], rows)


def detail(run: Run, holm: dict[str, dict[str, float]]) -> list[str]:
    paper = against_paper(run)
    wtl = run.result["wins_ties_losses"][BM25]
    base = run.mean(BM25)
    rows = []
    for ranker in run.result["rankers"]:
        value = run.mean(ranker)
        against = paper.get(ranker)
        paper_cell = "–"
        if against is not None:
            p = against["p_ndcg@10"]
            paper_cell = f"{p_with_arrow(p, value, run.mean(against['baseline']))} vs `{against['baseline']}`"
        rows.append([
            f"`{ranker}`", fmt(value), "–" if ranker == BM25 else f"{value - base:+.3f}",
            p_with_arrow(run.p(ranker, BM25), value, base), fmt_p(holm.get(ranker, {}).get(NDCG)), paper_cell,
            "–" if ranker == BM25 else "/".join(map(str, wtl[ranker])),
        ])  # fmt: skip
    headers = ["ranker", "nDCG@10", "Δ vs BM25", "p vs BM25", "Holm vs BM25", "p vs the paper's formula", "W/T/L vs BM25"]
    return table(headers, rows)


def second_table(run: Run) -> list[str]:
    rows = [
        [f"`{ranker}`", *(against_bm25(run, ranker, metric) for metric, _ in SECOND_METRICS)]
        for ranker in run.result["rankers"]
    ]
    return table(["ranker", *(title for _, title in SECOND_METRICS)], rows)


def n_way_section(runs: Sequence[Run]) -> list[str]:
    rows = []
    for run, comparison in comparisons(runs):
        for ranker, figures in comparison["each"].items():
            best = " (best N-way)" if ranker == comparison["best_n_way"] else ""
            rows.append([
                run.label, f"`{ranker}`{best}", fmt(run.mean(ranker)), fmt(run.mean(DEFAULT_RANKER)),
                f"{figures['delta_vs_default']:+.3f}",
                p_with_arrow(figures["p_vs_default"], run.mean(ranker), run.mean(DEFAULT_RANKER)),
            ])  # fmt: skip
    if not rows:
        return []
    return [
        "## N-way against two-way fusion",
        "",
        (f"Each N-way fusion against the default ranker `{DEFAULT_RANKER}` on nDCG@10 (paired "
         "randomisation test on the per-query values, the same test and seed as evaluate's)."),
        "",
        *table(["set — vectors", "N-way fusion", "nDCG@10", f"`{DEFAULT_RANKER}`", "Δ", "p"], rows, text_columns=2),
    ]


def setup(report: dict[str, Any], runs: Sequence[Run]) -> list[str]:
    env, settings = report["environment"], report["settings"]
    blas = env["blas_threads"]
    lines = [
        "## Setup",
        "",
        f"- Date (UTC): {report['generated']}; wall time {report['wall_seconds']:.0f} s for {len(runs)} `evaluate` runs.",
        (f"- Invocation: `{report['invocation']}` "
         f"({'child processes' if settings['mode'] == 'subprocess' else 'in-process via `reranker.cli.main`'}, cwd = repository root)."),
        f"- Code: commit `{env['git_commit']}`{dirty(env)}; "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ".",
        f"- BLAS threads: {', '.join(f'`{k}={v}`' for k, v in blas.items()) if blas else 'library default'}.",
        (f"- Each run: `reranker evaluate` reranks the BM25 top {settings['window']} of the embedded store for "
         f"every judged query; K = {settings['k']} topics; min-max and z-score fusion weight {settings['fusion_weight']:g} "
         "(the ranker's share; N-way fusions split it equally among their rankers); `:rrf` = reciprocal rank fusion. "
         "evaluate trains the Doc2Vec model itself; WMD is exact offline (no time budget)."),
    ]
    if env["reranker_env"]:
        lines.append(f"- Environment variables in effect: {', '.join(f'`{k}={v}`' for k, v in env['reranker_env'].items())}.")
    headers = ["set — vectors", "vectors (evaluate's config)", "sha256", "d", "vocabulary", "queries", "documents", "run s"]
    return [
        *lines, "", *table(headers, [run_row(run, report["vectors"]) for run in runs], text_columns=3),
        ("sha256: what the index recorded for its vectors. For the bundled GloVe, of the source file. "
         "For trained word2vec in this run (before commit 267a4fa), of the saved files, which "
         "gensim stamps with the time of saving; trained vectors are now identified by their words "
         "and values, so a retrain with the same settings gives the same checksum."),
        "",
    ]  # fmt: skip


def dirty(env: dict[str, Any]) -> str:
    files = env.get("dirty_files") or []
    return f" (uncommitted changes to {', '.join(f'`{f}`' for f in files)})" if files else ""


def dirty_files() -> list[str]:
    """The package's files with uncommitted changes (others may be editing the service)."""
    done = subprocess.run(["git", "status", "--porcelain", "--", "reranker", "pyproject.toml"],
                          cwd=REPO, capture_output=True, text=True, check=False)  # fmt: skip
    return [line[3:] for line in done.stdout.splitlines()]


def run_row(run: Run, vectors: dict[str, dict[str, Any]]) -> list[str]:
    info, config = vectors[f"{run.vectors}:{run.query_set.dataset}"], run.result["config"]
    return [
        run.label, f"`{config['vectors']}`{training(info)}", f"`{info['sha256'][:16]}`", str(config["dim"]),
        f"{info['vocabulary']:,}", str(run.result["queries"]), str(config["documents"]), f"{run.seconds:.0f}",
    ]  # fmt: skip


def training(info: dict[str, Any]) -> str:
    params = info.get("params")
    if not params:
        return " (bundled)"
    return f" (CBOW, {params.get('epochs')} epochs, window {params.get('window')}, min count {params.get('min_count')})"


# --- findings: sentences built from the numbers -------------------------------------------


def short(run: Run) -> str:
    return f"{run.query_set.label.split(',')[0]}/{VECTORS[run.vectors]}"


def versus(run: Run, ranker: str, baseline: str) -> str:
    """"0.712 vs 0.709 (+0.003, p = 0.812)" for `ranker` against `baseline` on nDCG@10."""
    value, base = run.mean(ranker), run.mean(baseline)
    p = run.p(ranker, baseline)
    return f"{value:.3f} vs {base:.3f} ({value - base:+.3f}, p {'<' if p is not None and p < 0.001 else '='} {fmt_p(p).lstrip('<')})"


def significant(run: Run, ranker: str, baseline: str) -> int:
    """+1 / -1 when `ranker` is better / worse than `baseline` at p < 0.05, else 0."""
    p = run.p(ranker, baseline)
    if p is None or p >= SIGNIFICANCE:
        return 0
    return 1 if run.mean(ranker) > run.mean(baseline) else -1


def beats_bm25_everywhere(runs: Sequence[Run]) -> list[str]:
    lines = []
    for vectors in dict.fromkeys(run.vectors for run in runs):
        cell = [run for run in runs if run.vectors == vectors]
        winners = [r for r in cell[0].result["rankers"] if r != BM25 and all(run.mean(r) > run.mean(BM25) for run in cell)]
        winners.sort(key=lambda r: -min(run.mean(r) - run.mean(BM25) for run in cell))
        described = [
            f"`{r}`{' (significant on every set)' if all(significant(run, r, BM25) > 0 for run in cell) else ''}: "
            + "; ".join(f"{run.query_set.label.split(',')[0]} {versus(run, r, BM25)}" for run in cell)
            for r in winners
        ]
        sets = " and ".join(run.query_set.label.split(",")[0] for run in cell)
        lines.append(f"- **{VECTORS[vectors]}, above BM25 on {sets}:**" + (" none." if not winners else ""))
        lines += [f"  - {text}" for text in described]
        everywhere = [r for r in winners if all(significant(run, r, BM25) > 0 for run in cell)]
        lines.append("  - significantly above BM25 on every set: " + (", ".join(f"`{r}`" for r in everywhere) or "none") + ".")
    return lines


def correction_lines(runs: Sequence[Run]) -> list[str]:
    pairs = (("hidden_topics_corrected", PAPER), (DEFAULT_RANKER, PAPER_FUSION))
    lines = []
    for ranker, baseline in pairs:
        cells = [f"{short(run)} {versus(run, ranker, baseline)}" for run in runs
                 if {ranker, baseline} <= set(run.result["rankers"])]  # fmt: skip
        if cells:
            lines.append(f"- **`{ranker}` against `{baseline}`:** " + "; ".join(cells) + ".")
    return lines


def n_way_lines(runs: Sequence[Run]) -> list[str]:
    compared = comparisons(runs)
    if not compared:
        return [f"- This run has no N-way fusion beside `{DEFAULT_RANKER}`."]
    better = sum(significant(run, c["best_n_way"], DEFAULT_RANKER) > 0 for run, c in compared)
    lines = [(f"- The best N-way fusion is significantly better than `{DEFAULT_RANKER}` in {better} "
              f"of {len(compared)} set/vector combinations.")]  # fmt: skip
    for run, comparison in compared:
        best, best_two = comparison["best_n_way"], comparison["best_two_way"]
        verdict = {1: "better", -1: "worse", 0: "no significant difference"}[significant(run, best, DEFAULT_RANKER)]
        text = f"- **{short(run)}:** best N-way `{best}` {versus(run, best, DEFAULT_RANKER)} against `{DEFAULT_RANKER}`: {verdict}"
        if best_two != DEFAULT_RANKER:
            text += f"; the best two-way fusion here is `{best_two}`, against it {versus(run, best, best_two)}"
        lines.append(text + ".")
    return lines


def losing_lines(runs: Sequence[Run]) -> list[str]:
    lines = []
    for run in runs:
        rankers = [r for r in run.result["rankers"] if r != BM25]
        alone = [r for r in rankers if not is_fusion(r)]
        below = [r for r in rankers if significant(run, r, BM25) < 0]
        above = [r for r in rankers if significant(run, r, BM25) > 0]
        holding = [r for r in alone if r not in below]
        parts = [f"{len(alone) - len(holding)} of {len(alone)} rankers alone are significantly below BM25"]
        if holding:
            parts[0] += " (not: " + ", ".join(f"`{r}` {versus(run, r, BM25)}" for r in holding) + ")"
        fused_below = [f"`{r}` {versus(run, r, BM25)}" for r in below if is_fusion(r)]
        parts.append("fusions significantly below BM25: " + (", ".join(fused_below) or "none"))
        parts.append(f"significantly above BM25: {len(above)} of {len(rankers)} rankers")
        if DEFAULT_RANKER in rankers:
            wins, ties, losses = run.result["wins_ties_losses"][BM25][DEFAULT_RANKER]
            parts.append(f"the default ranker {versus(run, DEFAULT_RANKER, BM25)}, "
                         f"worse than BM25 on {losses} of {wins + ties + losses} queries")  # fmt: skip
        lines.append(f"- **{short(run)}:** " + "; ".join(parts) + ".")
    return lines


def holm_lines(runs: Sequence[Run], families: Sequence[dict[str, Any]]) -> list[str]:
    """Per run, the differences from BM25 that the raw p marks and Holm's does not."""
    lines = []
    for run in runs:
        holm = holm_of(families, run)

        def lost(metric: str, rankers: Sequence[str]) -> list[str]:
            return [r for r in rankers if holm[r][metric] >= SIGNIFICANCE]

        marked_ndcg = [r for r in holm if significant(run, r, BM25) != 0]
        gone = lost(NDCG, marked_ndcg)
        text = f"- **{short(run)}:** {len(marked_ndcg) - len(gone)} of {len(marked_ndcg)} differences from BM25 stand"
        if gone:
            text += "; not: " + ", ".join(
                f"`{r}` {run.mean(r):.3f} ({run.mean(r) - run.mean(BM25):+.3f}, p = {fmt_p(run.p(r, BM25))}, "
                f"Holm {fmt_p(holm[r][NDCG])})"
                for r in gone
            )
        counts = []
        for metric, title in SECOND_METRICS:
            marked_here = [r for r in holm if (p := run.p(r, BM25, metric)) is not None and p < SIGNIFICANCE]
            counts.append(f"{title} {len(lost(metric, marked_here))} of {len(marked_here)}")
        lines.append(text + "; arrows that do not stand in the MAP, P@1 and MRR table: " + ", ".join(counts) + ".")
    return lines


def findings(runs: Sequence[Run], families: Sequence[dict[str, Any]]) -> list[str]:
    sizes = sorted({len(family["p_values"]) for family in families})
    return [
        "## What this shows",
        "",
        "Generated from the numbers of this run (nDCG@10; p against the named baseline).",
        "",
        *beats_bm25_everywhere(runs),
        *correction_lines(runs),
        "",
        "**N-way against two-way fusion.**",
        "",
        *n_way_lines(runs),
        "",
        "**Where the method still loses.**",
        "",
        *losing_lines(runs),
        "",
        "**After Holm's correction.**",
        "",
        (f"The sentences above, like the arrows, use each ranker's own p. Adjusted by Holm's method over "
         f"the {' or '.join(map(str, sizes))} rankers tested against BM25 in each table (nDCG@10):"),
        "",
        *holm_lines(runs, families),
        "",
    ]



def trimmed(result: dict[str, Any]) -> dict[str, Any]:
    """evaluate's JSON with the per-query values of the metrics this report tests only
    (every metric's mean stays), which keeps rankers.json to a size fit for the repository."""
    kept = (NDCG, *(metric for metric, _ in SECOND_METRICS))
    per_query = {
        ranker: {query: {m: row[m] for m in kept} for query, row in rows.items()}
        for ranker, rows in result["per_query"].items()
    }
    return {**result, "per_query": per_query}


def markdown(report: dict[str, Any], runs: Sequence[Run]) -> str:
    families = holm_families(runs)
    lines = [
        "# Every ranker on both shared sets, with both vector sets",
        "",
        ("Generated by `bench/evaluate_rankers.py`; do not edit by hand — re-run the script. "
         "Raw numbers (evaluate's JSON; per query: nDCG@10, MAP, P@1, MRR): [`rankers.json`](rankers.json)."),
        "",
        *setup(report, runs),
        (f"Metrics over the reranked window (documents outside the BM25 top {report['settings']['window']} count as not "
         f"retrieved). p: {runs[0].result['significance_test']} over queries, evaluate's or, where it "
         "gives none, the same `reranker.evaluation.paired_randomization_p` on the per-query values; "
         f"each ranker's own p, not corrected for the number of comparisons. ↑/↓: better/worse than the baseline at "
         f"that raw p < {SIGNIFICANCE}. Holm: the p against BM25 adjusted by Holm's step-down method (Holm 1979; "
         "`reranker.evaluation.holm_adjusted`, as `compare` and `evaluate` adjust theirs), one family per query set × "
         f"vectors × metric: the {' or '.join(map(str, sorted({len(f['p_values']) for f in families})))} rankers "
         f"tested against BM25 in that table; below {SIGNIFICANCE}, the chance of any false difference from BM25 "
         f"among them is at most {SIGNIFICANCE}. The tables give nDCG@10's; MAP's, P@1's and MRR's are in the JSON "
         "(`holm_families`, computed from the stored p-values). The p against the paper's formula and against the "
         "default are not adjusted. "
         f"\"The paper's formula\" is `{PAPER}` (Gong et al. 2018, Eq. 11) for a ranker alone and "
         f"`{PAPER_FUSION}` for a fusion. W/T/L: queries whose nDCG@10 is above / equal to / below BM25's."),
        "",
        "## nDCG@10 at a glance",
        "",
        "Arrows: against BM25 (raw p; Holm-adjusted p in the tables per set and vectors).",
        "",
        *overview(runs),
        *findings(runs, families),
        "## nDCG@10 per set and vectors",
        "",
    ]
    for run in runs:
        lines += [f"### {run.label}", "", *detail(run, holm_of(families, run)), f"`reranker {shlex.join(run.argv)}`", ""]
    lines += ["## MAP, P@1 and MRR", "", "Arrows: against BM25 on the same metric (raw p; the Holm-adjusted p are in the JSON).", ""]
    for run in runs:
        lines += [f"### {run.label}", "", *second_table(run)]
    lines += n_way_section(runs)
    problems = report["sanity"]
    lines += [
        "## Sanity checks",
        "",
        "- BM25 is the same with either vector set, every query was answered exactly (no time budget "
        "ran out), and the p-values this script computes reproduce evaluate's for every ranker against "
        "BM25: " + ("yes." if not problems else "**NO**: " + "; ".join(problems)),
        "",
        "## Commands",
        "",
        "With the repository root as the working directory:",
        "",
        "```sh",
        *(["export " + " ".join(f"{k}={v}" for k, v in report["environment"]["blas_threads"].items())]
          if report["environment"]["blas_threads"] else []),
        *(f"reranker {shlex.join(run.argv)}" for run in runs),
        "```",
        "",
    ]  # fmt: skip
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"reranker data dir: cached indexes, trained vectors and Doc2Vec models "
                        f"(default {display_path(DEFAULT_DATA_DIR)})")
    parser.add_argument("--datasets-root", type=Path, default=DEFAULT_DATASETS_ROOT,
                        help=f"folder holding the data set folders (default {DEFAULT_DATASETS_ROOT})")
    parser.add_argument("--sets", default=",".join(qs.dataset for qs in SETS),
                        help="comma-separated data set folders (default: all)")
    parser.add_argument("--vectors", default=",".join(VECTORS), help="glove and/or word2vec (default both)")
    parser.add_argument("--rankers", default=",".join(RANKERS), help="comma-separated (default: the matrix)")
    parser.add_argument("--k", type=int, default=15, help="topics per document (default 15)")
    parser.add_argument("--window", type=int, default=100, help="BM25 window (default 100)")
    parser.add_argument("--fusion-weight", type=float, default=0.3, help="fusion weight (default 0.3)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads (OPENBLAS/OMP/MKL_NUM_THREADS; default 1; 0 leaves them alone)")
    parser.add_argument("--subprocess", action="store_true",
                        help="run each `reranker` command as a child process instead of in-process")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"Markdown report (default {display_path(DEFAULT_OUT)})")
    parser.add_argument("--json-out", type=Path,
                        help="raw JSON (default: --out with .json; with --from-json, written only when given: "
                        "the saved JSON with its holm_families computed again)")
    parser.add_argument("--from-json", type=Path, metavar="RANKERS.json",
                        help="write the Markdown again from a JSON this script wrote (runs nothing)")
    args = parser.parse_args(argv)
    by_name = {qs.dataset: qs for qs in SETS}
    names = [name.strip() for name in args.sets.split(",") if name.strip()]
    if not names or set(names) - set(by_name):
        parser.error(f"--sets takes {', '.join(by_name)}")
    args.sets = [by_name[name] for name in names]
    args.vectors = [v.strip() for v in args.vectors.split(",") if v.strip()]
    if not args.vectors or set(args.vectors) - set(VECTORS):
        parser.error("--vectors takes glove and/or word2vec")
    args.rankers = list(dict.fromkeys([BM25, *(r.strip() for r in args.rankers.split(",") if r.strip())]))
    args.data_dir = args.data_dir.resolve()
    args.datasets_root = args.datasets_root.resolve()
    args.json_given = args.json_out is not None
    args.json_out = (args.json_out or args.out.with_suffix(".json")).resolve()
    args.out = args.out.resolve()
    return args


def runs_from_json(report: dict[str, Any]) -> list[Run]:
    """The runs a report of this script holds, as `run_all` returned them."""
    by_key = {qs.key: qs for qs in SETS}
    return [
        Run(by_key[run["query_set"]], run["vectors"], tuple(shlex.split(run["command"])[1:]), run["seconds"], run["result"])
        for run in report["runs"]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        runs = runs_from_json(saved)
        args.out.write_text(markdown(saved, runs), encoding="utf-8")
        print(f"wrote {display_path(args.out)} from {display_path(args.from_json)}")
        if args.json_given:
            # A report saved before the families existed gets them, placed as a run puts them.
            report = {key: value for key, value in saved.items() if key not in ("holm_families", "runs")}
            report |= {"holm_families": holm_families(runs), "runs": saved["runs"]}
            args.json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
            print(f"wrote {display_path(args.json_out)} with its holm_families")
        return 0
    limit_blas_threads(args.blas_threads)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    env = {**environment(), "dirty_files": dirty_files()}
    print(f"commit {env['git_commit']}{' (package modified)' if env['git_dirty'] else ''}; "
          f"data dir {display_path(args.data_dir)}; report {display_path(args.out)}", flush=True)  # fmt: skip
    runs = run_all(args)
    report: dict[str, Any] = {
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "invocation": shlex.join(["python", display_path(Path(__file__)), *(sys.argv[1:] if argv is None else argv)]),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "environment": env,
        "settings": {"k": args.k, "window": args.window, "fusion_weight": args.fusion_weight, "rankers": args.rankers,
                     "data_dir": display_path(args.data_dir), "mode": "subprocess" if args.subprocess else "in-process"},
        "vectors": vectors_used(runs, args.data_dir),
        "sanity": sanity(runs),
        # Each run's result may hold evaluate's own holm_p_values, over that run's rankers;
        # these are the families the report prints (the same when a cell is one run).
        "holm_families": holm_families(runs),
        "runs": [
            {"query_set": run.query_set.key, "vectors": run.vectors, "command": f"reranker {shlex.join(run.argv)}",
             "seconds": round(run.seconds, 1), "against_paper": against_paper(run),
             "n_way": n_way_comparison(run), "result": trimmed(run.result)}
            for run in runs
        ],
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    args.out.write_text(markdown(report, runs), encoding="utf-8")
    for problem in report["sanity"]:
        print(f"CHECK: {problem}", file=sys.stderr)
    print(f"wrote {display_path(args.out)} and {display_path(args.json_out)} in {report['wall_seconds']:.0f} s")
    return 1 if report["sanity"] else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except CliError as exc:
        print(f"evaluate_rankers: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
