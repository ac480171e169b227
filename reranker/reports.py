"""Tables and figures of offline results: Markdown for reranker.evaluation's
`EvaluationResult` and reranker.comparison's `Comparison`, and PNG figures.

Nothing here computes a metric or a test; it only lays out what the results hold.
matplotlib is imported inside the plotting functions (Agg, no pyplot state), so
importing this module stays cheap; the service never imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, cast

import numpy as np

from reranker.comparison import Comparison
from reranker.errors import ConfigError
from reranker.evaluation import (
    FIGURE_CUTOFFS,
    NDCG_CUTOFF,
    SIGNIFICANCE_LEVEL,
    EvaluationResult,
    PerQuery,
    precision_bins,
    randomization_draws,
    table_metric_names,
)

_SIGNIFICANCE_MARKS = ("†", "‡", "§", "¶")
PLOT_EXTRA = "plot"


def require_plotting(option: str) -> None:
    """ConfigError, naming the extra to install, when matplotlib is not installed (it is
    the `plot` extra, not a dependency of the product): checked before any work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"{option} draws with matplotlib, which is not installed: "
            f'pip install "hidden-topic-reranker[{PLOT_EXTRA}]" (in a clone: pip install -e ".[{PLOT_EXTRA}]")'
        ) from None
HEADLINE_METRIC = f"ndcg@{NDCG_CUTOFF}"
DPI = 130


class OfflineResult(Protocol):
    """What the figures and `describe` read: an EvaluationResult or a Comparison."""

    @property
    def dataset(self) -> str: ...

    @property
    def queries(self) -> int: ...

    @property
    def window(self) -> int: ...

    @property
    def rankers(self) -> tuple[str, ...]: ...

    @property
    def per_query(self) -> PerQuery: ...

    @property
    def config(self) -> dict[str, Any]: ...


def metric_label(metric: str) -> str:
    """'ndcg@10' -> 'nDCG@10', 'recall@100' -> 'R@100', 'p@5' -> 'P@5', 'map' -> 'MAP'."""
    if metric.startswith("ndcg@"):
        return "nDCG@" + metric[5:]
    if metric.startswith("recall@"):
        return "R@" + metric[7:]
    return metric.upper()


def describe(result: OfflineResult) -> str:
    """'cisi, 76 queries, BM25 top 100 reranked, vectors glove-6b-50d (d=50), K=15'."""
    config = result.config
    queries_file = config.get("queries_file")
    parts = [
        result.dataset + (f" ({queries_file})" if queries_file and queries_file != "queries.jsonl" else ""),
        f"{result.queries} queries",
        f"BM25 top {result.window} reranked",
    ]
    if "vectors" in config:
        parts.append(f"vectors {config['vectors']}" + (f" (d={config['dim']})" if "dim" in config else ""))
    if "k" in config:
        parts.append(f"K={config['k']}")
    return ", ".join(parts)


def _test_note(queries: int) -> str:
    return f"two-sided paired randomisation test over queries, {randomization_draws(queries)}"


def _power_note(queries: int, ties: Mapping[str, int] | None = None, baseline: str = "") -> list[str]:
    """A warning when no difference over `queries` queries can reach SIGNIFICANCE_LEVEL:
    the sign flips of n differences give the observed mean's magnitude at least 2 of 2^n
    times (its own signs and their negation), so the exact p is never below 2 / 2^n.
    Without it a table with no mark reads as "no difference" when the test had no chance.

    A query where a ranker ties `baseline` (`ties`: ranker -> such queries, on the marked
    metric) moves no mean when flipped, so that ranker's floor is 2 / 2^(n - ties): one
    tied on all but 5 queries cannot be marked either, and a note names it."""
    if queries < 1:
        return []
    if 2.0 / 2**queries >= SIGNIFICANCE_LEVEL:
        return [
            f"With {queries} queries no ranker can be marked: the randomisation test's smallest "
            f"two-sided p over {queries} queries is 2/2^{queries} = {2.0 / 2**queries:.3g}."
        ]
    notes = []
    for ranker, tied in (ties or {}).items():
        differing = queries - tied
        if 2.0 / 2**differing < SIGNIFICANCE_LEVEL:
            continue
        floor = f"2/2^{differing} = {2.0 / 2**differing:.3g}" if differing else "1"
        notes.append(
            f"{ranker} cannot be marked: it ties {baseline} on {tied} of {queries} queries, which no sign flip "
            f"moves, so its smallest two-sided p is {floor}."
        )
    return notes


def _approximate_note(approximate: dict[str, int]) -> list[str]:
    counts = ", ".join(f"{name} {n}" for name, n in approximate.items() if n)
    return [f"Answered approximately (time budget ran out): {counts} queries."] if counts else []


def _row(cells: Sequence[str]) -> str:
    # A "|" inside a cell (a query id, a ranker name) would split the column.
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _rule(columns: int) -> str:
    return "|---|" + "---:|" * (columns - 1)


# --- `reranker evaluate` ------------------------------------------------------------------


def _holm_baselines(result: EvaluationResult) -> list[str]:
    """The baselines with more than one ranker tested against them: the only ones where
    Holm's adjusted p differs from the raw p, so the only ones given a column."""
    return [baseline for baseline in result.baselines if len(result.p_values.get(baseline, {})) > 1]


def _holm_label(baseline: str) -> str:
    return f"{metric_label(HEADLINE_METRIC)} p (Holm) vs {baseline}"


def evaluation_caption(result: EvaluationResult) -> str:
    """One line saying what the evaluation table shows and what its marks mean."""
    marks = "; ".join(
        f"{mark} p < {SIGNIFICANCE_LEVEL:g} against {baseline}"
        for mark, baseline in zip(_SIGNIFICANCE_MARKS, result.baselines)
    )
    parts = [f"{describe(result)}; means over queries."]
    if result.baselines:
        parts.append(
            f"{marks} ({_test_note(result.queries)}; paired t-test p-values in the JSON; the p of each ranker "
            "alone, not corrected for multiple comparisons)."
        )
        parts.append(_evaluation_holm_note(result))
        parts.append(
            f"W/T/L: queries where nDCG@{NDCG_CUTOFF} is above / equal to / below {result.baselines[0]}'s."
        )
        first = result.baselines[0]
        tied = {ranker: counts[1] for ranker, counts in result.wins_ties_losses(first).items()}
        parts.extend(_power_note(result.queries, tied, first))
    return " ".join([*parts, *_approximate_note(result.approximate)])


def _evaluation_holm_note(result: EvaluationResult) -> str:
    columns = _holm_baselines(result)
    alone = [baseline for baseline in result.baselines if baseline not in columns]
    notes = []
    if columns:
        tested = ", ".join(f"{len(result.p_values[baseline])} against {baseline}" for baseline in columns)
        notes.append(
            f"{metric_label(HEADLINE_METRIC)} p (Holm): the randomisation p adjusted by Holm's step-down method "
            f"over the rankers tested against that baseline ({tested}), one family per metric (below {SIGNIFICANCE_LEVEL:g}, "
            f"the chance of any false difference among them is at most {SIGNIFICANCE_LEVEL:g}; every metric's in "
            "the JSON)."
        )
    if alone:
        notes.append(
            f"One ranker is tested against {' and against '.join(alone)}, so Holm's correction for multiple "
            f"comparisons changes nothing there: its p is in the column{'s' if len(alone) > 1 else ''} "
            f"{' and '.join(f'{metric_label(HEADLINE_METRIC)} p vs {baseline}' for baseline in alone)}."
        )
    return " ".join(notes)


def evaluation_table(result: EvaluationResult) -> str:
    """The caption, a blank line, and the means as a Markdown table: rankers as rows,
    metrics as columns, each value marked where it differs significantly from a baseline,
    then the headline metric's p against each baseline: Holm-adjusted where it tests more
    than one ranker, the raw p where it tests one (the same figure; else the text would
    give no p at all, only marks), and W/T/L against the first baseline."""
    names = table_metric_names(result.window)
    holm_baselines = _holm_baselines(result)
    holm = result.holm_p_values
    tested = [baseline for baseline in result.baselines if result.p_values.get(baseline)]
    columns = [
        "ranker", *(metric_label(m) for m in names),
        *(_holm_label(b) if b in holm_baselines else f"{metric_label(HEADLINE_METRIC)} p vs {b}" for b in tested),
    ]
    wtl = result.wins_ties_losses(result.baselines[0]) if result.baselines else None
    if result.baselines:
        columns.append(f"W/T/L vs {result.baselines[0]}")
    lines = [evaluation_caption(result), "", _row(columns), _rule(len(columns))]
    for ranker in result.rankers:
        cells = [ranker, *(f"{result.results[ranker][m]:.3f}{_marks(result, ranker, m)}" for m in names)]
        for baseline in tested:
            found = (holm if baseline in holm_baselines else result.p_values)[baseline].get(ranker)
            cells.append(format_p(found[HEADLINE_METRIC]) if found is not None else "–")
        if wtl is not None:
            cells.append("/".join(str(n) for n in wtl[ranker]) if ranker in wtl else "–")
        lines.append(_row(cells))
    return "\n".join(lines)


def _marks(result: EvaluationResult, ranker: str, metric: str) -> str:
    return "".join(
        mark
        for mark, baseline in zip(_SIGNIFICANCE_MARKS, result.baselines)
        if result.p_values.get(baseline, {}).get(ranker, {}).get(metric, 1.0) < SIGNIFICANCE_LEVEL
    )


# --- `reranker compare` -------------------------------------------------------------------


def format_p(p: float) -> str:
    """'< 0.001' below a thousandth, else three decimals."""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_phrase(p: float) -> str:
    """'p < 0.001' or 'p = 0.168'."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _holm_note(tested: int, baseline: str) -> str:
    """What the Holm-adjusted p is, or why there is none: with one ranker tested it equals the raw p."""
    if tested < 2:
        return f"one ranker is tested against {baseline}, so Holm's correction for multiple comparisons changes nothing"
    return (
        f"p (Holm): the randomisation p adjusted by Holm's step-down method over the {tested} rankers tested "
        f"against {baseline}, one family per metric (below {SIGNIFICANCE_LEVEL:g}, the chance of any false difference "
        f"among them is at most {SIGNIFICANCE_LEVEL:g})"
    )


def comparison_caption(comparison: Comparison) -> str:
    """What the comparison table shows, its marks, tests and overlap measures."""
    base = comparison.baseline
    tested = len(comparison.rankers) - 1
    parts = [
        f"{describe(comparison)}; judgments: {comparison.judgments}; baseline {base}; means over queries.",
        f"† p < {SIGNIFICANCE_LEVEL:g} against {base} ({_test_note(comparison.queries)}; the p of each ranker alone, not "
        f"corrected for multiple comparisons). Δ nDCG@{NDCG_CUTOFF}: mean of the ranker's minus {base}'s "
        "per query; p: the randomisation test and the paired t-test on it; "
        f"{_holm_note(tested, base)}; W/T/L: queries where the ranker's "
        f"nDCG@{NDCG_CUTOFF} is above / equal to / below {base}'s.",
        f"Overlap with {base}'s ranking, mean over queries: Jaccard of the top {comparison.jaccard_depth} "
        f"and rank-biased overlap over the whole window (RBO_ext, p = {comparison.rbo_p:g}; Webber, "
        "Moffat & Zobel 2010).",
        *_power_note(comparison.queries, {ranker: by_metric[HEADLINE_METRIC][1] for ranker, by_metric in comparison.wins_ties_losses.items()}, base),
    ]
    return " ".join([*parts, *_approximate_note(comparison.approximate)])


def comparison_table(comparison: Comparison) -> str:
    """The caption, the means table (one row per ranker, the baseline first among
    equals), and the overlap of every pair of rankers, as Markdown."""
    base, metric = comparison.baseline, HEADLINE_METRIC
    names = table_metric_names(comparison.window)
    depth = comparison.jaccard_depth
    # With one ranker tested, Holm's p is the raw p: the caption says so instead of a copied column.
    holm = comparison.holm_p_values if len(comparison.rankers) > 2 else None
    columns = [
        "ranker", *(metric_label(m) for m in names), f"Δ nDCG@{NDCG_CUTOFF}", "p (randomisation)",
        *(["p (Holm)"] if holm is not None else []), "p (t-test)", "W/T/L", f"Jaccard@{depth}", "RBO",
    ]
    lines = [comparison_caption(comparison), "", _row(columns), _rule(len(columns))]
    for ranker in comparison.rankers:
        means = comparison.results[ranker]
        if ranker == base:
            versus = ["–", "–", *(["–"] if holm is not None else []), "–", "–", "1.000", "1.000"]
            label = f"{ranker} (baseline)"
            marks = {m: "" for m in names}
        else:
            p_values = comparison.p_values[ranker]
            pair = comparison.overlap_of(base, ranker)
            versus = [
                f"{means[metric] - comparison.results[base][metric]:+.3f}",
                format_p(p_values[metric]),
                *([format_p(holm[ranker][metric])] if holm is not None else []),
                format_p(comparison.t_test_p_values[ranker][metric]),
                "/".join(str(n) for n in comparison.wins_ties_losses[ranker][metric]),
                f"{pair.mean_jaccard:.3f}",
                f"{pair.mean_rbo:.3f}",
            ]
            label = ranker
            marks = {m: "†" if p_values[m] < SIGNIFICANCE_LEVEL else "" for m in names}
        lines.append(_row([label, *(f"{means[m]:.3f}{marks[m]}" for m in names), *versus]))
    lines += [
        "",
        f"Rank overlap of every pair of rankers (mean over queries; RBO_ext with p = {comparison.rbo_p:g}):",
        "",
        _row(["rankers", f"Jaccard@{depth}", "RBO"]),
        _rule(3),
    ]
    for pair in comparison.overlap:
        lines.append(_row([" vs ".join(pair.rankers), f"{pair.mean_jaccard:.3f}", f"{pair.mean_rbo:.3f}"]))
    return "\n".join(lines + ["", *per_query_table(comparison)])


def per_query_table(comparison: Comparison) -> list[str]:
    """One row per query: each ranker's nDCG@10, and each other ranker's difference from
    the baseline and overlap with it (the Markdown form of the JSON's per-query rows)."""
    base, metric = comparison.baseline, HEADLINE_METRIC
    others = [r for r in comparison.rankers if r != base]
    depth = comparison.jaccard_depth
    columns = [
        "query", *(f"{r} {metric_label(metric)}" for r in comparison.rankers),
        *(label for r in others for label in (f"Δ {r}", f"Jaccard@{depth} {r}", f"RBO {r}")),
    ]
    lines = [f"Per query ({metric_label(metric)}; Δ, Jaccard and RBO against {base}):", "", _row(columns), _rule(len(columns))]
    for query in comparison.per_query[base]:
        cells = [query, *(f"{comparison.per_query[r][query][metric]:.3f}" for r in comparison.rankers)]
        for ranker in others:
            pair = comparison.overlap_of(base, ranker)
            delta = comparison.per_query[ranker][query][metric] - comparison.per_query[base][query][metric]
            cells += [f"{delta:+.3f}", f"{pair.jaccard[query]:.3f}", f"{pair.rbo[query]:.3f}"]
        lines.append(_row(cells))
    return lines


# --- figures --------------------------------------------------------------------------------


def plot_precision_bins(
    results: OfflineResult | Sequence[OfflineResult],
    path: Path,
    ks: Sequence[int] = FIGURE_CUTOFFS,
) -> Path:
    """Write the ranking figure as a PNG: one row per result, one grouped bar chart per k
    (x: the value of P@k, bars: rankers, y: share of queries), after Gong et al. (2018).

    Several results (other vectors, other data sets) stack as rows with their own titles.
    Raises InputError as `precision_bins`; OSError if `path` cannot be written.
    """
    # Imported here, and without pyplot's global state: the service never loads matplotlib.
    from matplotlib.figure import Figure

    runs = list(results) if isinstance(results, (list, tuple)) else [cast(OfflineResult, results)]
    if not runs:
        raise ValueError("no evaluation result to plot")
    rankers = list(dict.fromkeys(name for run in runs for name in run.rankers))
    colours = {name: f"C{i % 10}" for i, name in enumerate(rankers)}
    figure = Figure(figsize=(4.0 * len(ks) + 0.5, 3.3 * len(runs) + 0.9), layout="constrained")
    figure.suptitle("Share of queries by precision@k (one bar per ranker)", fontweight="bold")
    rows = figure.subfigures(len(runs), 1, squeeze=False)[:, 0]
    for row, run in zip(rows, runs):
        row.suptitle(describe(run), fontsize="medium")
        bins = precision_bins(run, ks)
        axes = row.subplots(1, len(ks), sharey=True, squeeze=False)[0]
        for ax, k in zip(axes, ks):
            _bar_group(ax, bins[k], k, colours)
        axes[0].set_ylabel("share of queries")
    handles = [_legend_patch(colours[name]) for name in rankers]
    figure.legend(handles, rankers, loc="outside lower center", ncols=min(len(rankers), 5), frameon=False)
    figure.savefig(path, format="png", dpi=DPI)
    return path


def _bar_group(ax: Any, shares: dict[str, tuple[float, ...]], k: int, colours: dict[str, str]) -> None:
    values = np.arange(k + 1)
    width = 0.8 / len(shares)
    for i, (ranker, share) in enumerate(shares.items()):
        ax.bar(values + (i - (len(shares) - 1) / 2) * width, share, width, color=colours[ranker], label=ranker)
    ax.set_xticks(values, ["0", "1"] if k == 1 else [f"{j}/{k}" for j in values])
    ax.set_xlabel(f"P@{k}")
    ax.set_title(f"k = {k}")
    ax.set_ylim(0.0, 1.05)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _legend_patch(colour: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=colour)


def plot_deltas(comparison: Comparison, path: Path, metric: str = HEADLINE_METRIC) -> Path:
    """Write per-query differences as a PNG: one panel per ranker other than the
    baseline, one bar per query (the ranker's `metric` minus the baseline's), sorted
    from the largest gain to the largest loss; green above zero, red below.

    Raises KeyError for a metric the comparison lacks; OSError if `path` cannot be written.
    """
    from matplotlib.figure import Figure

    base = comparison.baseline
    others = [name for name in comparison.rankers if name != base]
    reference = comparison.per_query[base]
    query_ids = list(reference)
    label = metric_label(metric)
    figure = Figure(figsize=(max(6.0, min(14.0, 0.12 * len(query_ids) + 3.0)), 2.6 * len(others) + 1.0), layout="constrained")
    figure.suptitle(f"Per-query {label}: each ranker minus {base}\n{describe(comparison)}", fontsize="medium")
    # One y scale for every panel, so the rankers' gains and losses compare at a glance.
    axes = figure.subplots(len(others), 1, sharey=True, squeeze=False)[:, 0]
    for ax, ranker in zip(axes, others):
        rows = comparison.per_query[ranker]
        deltas = np.array([rows[q][metric] - reference[q][metric] for q in query_ids])
        order = np.argsort(-deltas, kind="stable")
        sorted_deltas = deltas[order]
        colours = np.where(sorted_deltas > 1e-12, "C2", np.where(sorted_deltas < -1e-12, "C3", "0.6"))
        ax.bar(np.arange(len(query_ids)), sorted_deltas, width=0.85, color=colours)
        ax.axhline(0.0, color="0.3", linewidth=0.8)
        wins, ties, losses = comparison.wins_ties_losses[ranker][metric]
        ax.set_title(
            f"{ranker}: mean Δ {deltas.mean():+.3f}, W/T/L {wins}/{ties}/{losses}, "
            f"{p_phrase(comparison.p_values[ranker][metric])} (randomisation)",
            fontsize="medium",
        )
        ax.set_ylabel(f"Δ {label}")
        ax.set_xlim(-0.6, len(query_ids) - 0.4)
        if len(query_ids) <= 40:
            ax.set_xticks(np.arange(len(query_ids)), [query_ids[i] for i in order], rotation=90, fontsize="small")
        else:
            ax.set_xticks([])
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[-1].set_xlabel("queries, sorted by Δ")
    figure.savefig(path, format="png", dpi=DPI)
    return path


def comparison_plots(comparison: Comparison, directory: Path) -> list[Path]:
    """Write both comparison figures into `directory` (created if needed):
    `compare-<dataset>-ndcg10-deltas.png` (`plot_deltas`) and `compare-<dataset>-precision-bins.png`
    (`plot_precision_bins`). Returns their paths. Raises OSError if they cannot be written."""
    directory.mkdir(parents=True, exist_ok=True)
    deltas = plot_deltas(comparison, directory / f"compare-{comparison.dataset}-ndcg{NDCG_CUTOFF}-deltas.png")
    bins = plot_precision_bins(comparison, directory / f"compare-{comparison.dataset}-precision-bins.png")
    return [deltas, bins]
