"""Commands that judge rankers: evaluate and compare offline, ab for online experiments."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TextIO, TypeVar

from reranker.cli import judging
from reranker.cli.common import (
    EXIT_REGRESSION,
    add_dataset_files,
    add_k_option,
    add_ranking_options,
    check_output,
    index_file,
    log,
    open_engine,
    persistence,
    positive_int,
    ranker_list,
    skipped_lines,
    traffic_share,
    with_trained_vectors,
    write_output,
)
from reranker.config import DEFAULT_RANKER, Settings
from reranker.errors import ConfigError, IndexNotFoundError, InputError, UnknownRankerError
from reranker.interleaving import DEFAULT_TRAFFIC, METHODS
from reranker.sequential import DEFAULT_MIN_UNITS
from reranker.text import counted, listed

if TYPE_CHECKING:
    from reranker.datasets import Dataset
    from reranker.embeddings import WordVectors
    from reranker.evaluation import Drift, EvaluationResult
    from reranker.pipeline import Engine
    from reranker.rankers import Ranker
    from reranker.store.events import EventStore


def _add_offline_options(parser: argparse.ArgumentParser) -> None:
    """What evaluate and compare share: the cached index, the run files, the vectors."""
    parser.add_argument("--rebuild", action="store_true", help="re-index the dataset's cached index")
    parser.add_argument(
        "--run-dir", type=Path, metavar="DIR",
        help="also write each ranker's TREC run file into DIR (DATASET.RANKER.run), for trec_eval or ir_measures",
    )
    parser.add_argument(
        "--train-vectors", action="store_true",
        help="use CBOW word2vec trained on the dataset's own corpus (trained once, then reused) instead of --vectors",
    )


# What `evaluate` measures unless told (`--rankers`), before the default ranker in force:
# BM25 and the paper's formulas, alone and fused.
EVALUATED = ("bm25", "hidden_topics", "hidden_topics_code", "hidden_topics+bm25")


def add_parsers(commands: Any) -> None:
    """The command-line parsers of evaluate, compare, evaluate-similar, ab."""
    evaluate = commands.add_parser("evaluate", help="IR metrics of rankers on a judged dataset folder")
    evaluate.add_argument("dataset", type=Path, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv (or a BEIR folder)")
    add_dataset_files(evaluate)
    evaluate.add_argument(
        "--rankers",
        help=(
            "comma-separated ranker names (default: BM25, the paper's formulas alone and fused, and the default ranker "
            f"in force, RERANKER_DEFAULT_RANKER: {','.join(EVALUATED)},{DEFAULT_RANKER} unless it is set)"
        ),
    )
    add_k_option(evaluate)
    add_ranking_options(evaluate)
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--per-query", action="store_true", help="include per-query metrics in the JSON")
    _add_offline_options(evaluate)
    evaluate.add_argument(
        "--plot", type=Path, metavar="PATH.png",
        help="also write the ranking figure: per ranker, the share of queries at each value of P@1, P@3, P@6 (PNG)",
    )
    evaluate.add_argument("--markdown", type=Path, metavar="PATH", help="also write the table and its caption to a Markdown file")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bars")
    evaluate.add_argument(
        "--baseline-run", type=Path, metavar="FILE",
        help="a saved earlier run (the output of evaluate --json --per-query): exit 3 when a ranker's metric "
        "dropped significantly against it on the same queries (paired randomisation test)",
    )
    evaluate.add_argument("--regression-metric", default="ndcg@10", help="the metric --baseline-run compares (default ndcg@10)")
    evaluate.add_argument(
        "--regression-p", type=persistence, default=0.05, metavar="P",
        help="a drop with a p-value below P fails --baseline-run (default 0.05)",
    )

    compare = commands.add_parser(
        "compare",
        help="rankers side by side against a baseline on a judged dataset: metrics, tests, rank overlap",
    )
    compare.add_argument(
        "--dataset", type=Path, required=True, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv (or a BEIR folder)"
    )
    compare.add_argument("--rankers", required=True, help="comma-separated ranker names (two or more)")
    compare.add_argument("--baseline", help="the ranker the others are tested against; one of --rankers (default: the first)")
    compare.add_argument(
        "--judgments", type=Path, metavar="FILE",
        help="an OpenSearch _rank_eval request body (requests[].id, ratings[]._id/rating) instead of qrels.tsv",
    )
    add_dataset_files(compare)
    add_k_option(compare)
    add_ranking_options(compare)
    compare.add_argument(
        "--rbo-p", type=persistence, default=0.9, help="persistence p of rank-biased overlap, in (0, 1) (default 0.9)"
    )
    compare.add_argument("--markdown", type=Path, metavar="FILE", help="also write the Markdown tables to FILE")
    compare.add_argument("--json", action="store_true", help="print one JSON object (per-query rows included) instead of Markdown")
    compare.add_argument("--json-file", type=Path, metavar="FILE", help="also write the JSON object to FILE")
    compare.add_argument(
        "--plots", type=Path, metavar="DIR",
        help="also write DIR/compare-<dataset>-ndcg10-deltas.png (per-query nDCG@10 of each ranker minus the "
        "baseline) and DIR/compare-<dataset>-precision-bins.png",
    )
    _add_offline_options(compare)
    compare.add_argument("--no-progress", action="store_true", help="no progress bars")

    similar = commands.add_parser(
        "evaluate-similar",
        help="\"papers like this one\" (reranker similar, GET /documents/<id>/similar) judged by co-citation",
    )
    similar.add_argument(
        "dataset", type=Path,
        help="folder with corpus.jsonl and qrels.tsv of citation data: query ids <RP> or <RP>_<x>, relevant = papers citing RP",
    )
    add_dataset_files(similar, queries=False)
    similar.add_argument(
        "--rankers",
        help=(
            "comma-separated ranker names, each reordering the same first stage (default: the default ranker in force, "
            f"RERANKER_DEFAULT_RANKER, {DEFAULT_RANKER} unless it is set; bm25 is always added)"
        ),
    )
    add_k_option(similar)
    add_ranking_options(similar)
    similar.add_argument("--json", action="store_true", help="print one JSON object")
    similar.add_argument("--per-query", action="store_true", help="include per-paper metrics in the JSON")
    similar.add_argument("--markdown", type=Path, metavar="PATH", help="also write the table and its caption to a Markdown file")
    _add_offline_options(similar)
    similar.add_argument("--no-progress", action="store_true", help="no progress bars")

    ab = commands.add_parser("ab", help="online experiments: interleave two rankers on live traffic, report the winner")
    ab_action = ab.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = ab_action.add_parser("create", help="start an experiment (one runs at a time)")
    # Refused as the command's arguments, not in the HTTP body's words ("[rankers] must ...").
    create.add_argument("id", type=_experiment_id, help="a name: a-z, 0-9, _ and -")
    create.add_argument("--rankers", required=True, type=_ranker_pair, help="the two rankers to compare, A,B (see `reranker rankers`)")
    create.add_argument("--method", choices=METHODS, default=METHODS[0], help=f"interleaving method (default {METHODS[0]})")
    create.add_argument(
        "--traffic", type=traffic_share, default=DEFAULT_TRAFFIC,
        help=f"share of searches naming no ranker that are interleaved, 0 < x <= 1 (default {DEFAULT_TRAFFIC:g})",
    )
    create.add_argument(
        "--min-units", type=positive_int, metavar="N",
        help="units (a client's query text, or a text searched without a client id: one trial each) with a preference "
        f"needed before a winner is named, and the size the always-valid test is tuned for (default {DEFAULT_MIN_UNITS})",
    )
    create.add_argument("--min-queries", type=positive_int, metavar="N", help="deprecated: the old name of --min-units")
    ab_action.add_parser("list", help="every experiment")
    report = ab_action.add_parser("report", help="clicks, wins per ranker, winner and always-valid p-value")
    report.add_argument("id")
    report.add_argument("--json", action="store_true", help="print one JSON object (the same as GET /experiments/ID)")
    change = ab_action.add_parser("set", help="change an experiment's traffic share or status")
    change.add_argument("id")
    change.add_argument("--traffic", type=traffic_share, help="new share of traffic, 0 < x <= 1")
    change.add_argument("--status", choices=("running", "stopped"), help="stop it, or run it again")
    remove = ab_action.add_parser("delete", help="delete a stopped experiment, with its events or keeping them")
    remove.add_argument("id")
    events = remove.add_mutually_exclusive_group(required=True)
    events.add_argument("--delete-events", dest="delete_events", action="store_true", help="delete its shown queries and click events too")
    events.add_argument(
        "--keep-events", dest="delete_events", action="store_false",
        help="keep them in the event store, for analysis (the id stays taken until they are deleted)",
    )
    judging.add_parser(ab_action)


def cmd_evaluate(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.datasets import load_dataset
    from reranker.evaluation import against_saved_run, evaluate
    from reranker.rankers import get_ranker
    from reranker.reports import evaluation_table, plot_precision_bins, require_plotting

    # The default ranker in force, as search and tune take it: after `tune --write-config`,
    # `reranker --config FILE evaluate` measures the ranker the file chose.
    default = settings.service.default_ranker
    names = ranker_list(args.rankers) if args.rankers is not None else list(dict.fromkeys([*EVALUATED, default]))
    rankers = [get_ranker(name) for name in names]  # fail on a typo before minutes of indexing
    if args.plot is not None:
        require_plotting("--plot")
    check_output("--plot", args.plot)  # and on an unwritable output path
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        # The figure is PNG whatever the name: fig.txt would hold PNG bytes.
        raise ConfigError(f"--plot {args.plot}: the figure is a PNG image; expected a name ending in .png")
    check_output("--markdown", args.markdown)
    check_output("--run-dir", args.run_dir, folder=True)
    saved = _saved_run(args, settings) if args.baseline_run is not None else None
    dataset = load_dataset(args.dataset, args.queries_file, qrels_file=args.qrels_file)
    result = offline_run(
        args, settings, dataset, rankers,
        lambda engine, tick, config: evaluate(
            engine, dataset, names, window=settings.window, on_query=tick, config=config, run_dir=args.run_dir
        ),
    )
    drifts = against_saved_run(result, saved, args.regression_metric, args.regression_p) if saved is not None else ()
    verdict = _drift_lines(args, result, saved, drifts) if saved is not None else []
    args.exit_code = EXIT_REGRESSION if any(drift.dropped for drift in drifts) else 0
    written = []
    if args.markdown is not None:
        write_output(args.markdown, lambda path: path.write_text(evaluation_table(result) + "\n", encoding="utf-8"))
        written.append(f"table: {args.markdown}")
    if args.plot is not None:
        write_output(args.plot, lambda path: plot_precision_bins(result, path))
        written.append(f"figure: {args.plot}")
    if args.json:
        body = result.to_json(per_query=args.per_query)
        if saved is not None:
            body["baseline_run"] = {
                "file": str(args.baseline_run), "metric": args.regression_metric, "p": args.regression_p,
                "rankers": [drift.to_json() for drift in drifts],
            }
        json.dump(body, out, indent=2)
        out.write("\n")
        for line in verdict:  # stdout is the JSON: a CI log still shows the verdict
            print(f"reranker: {line}", file=sys.stderr)
    else:
        print(evaluation_table(result), file=out)
        for line in [*written, *verdict]:
            print(line, file=out)
    return int(args.exit_code)

def _saved_run(args: argparse.Namespace, settings: Settings) -> "EvaluationResult":
    """The --baseline-run file, read and checked before any work."""
    from reranker.evaluation import EvaluationResult, metric_names

    if args.regression_metric not in metric_names(settings.window):
        raise ConfigError(f"--regression-metric must be one of {', '.join(metric_names(settings.window))}, got {args.regression_metric!r}")
    try:
        body = json.loads(args.baseline_run.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the saved run: {exc.strerror}", str(args.baseline_run)) from None
    except ValueError as exc:
        raise InputError(f"not JSON ({exc}); save a run with `reranker evaluate ... --json --per-query > FILE`", str(args.baseline_run)) from None
    how = "save a run with `reranker evaluate ... --json --per-query > FILE`"
    try:
        saved = EvaluationResult.from_json(body if isinstance(body, dict) else {})
    except InputError as exc:
        raise InputError(f"{exc}; {how}", str(args.baseline_run)) from None
    if not saved.per_query:
        raise InputError(f"the saved run has no per-query metrics; {how}", str(args.baseline_run))
    return saved

def _drift_lines(args: argparse.Namespace, result: "EvaluationResult", saved: "EvaluationResult", drifts: Sequence["Drift"]) -> list[str]:
    """What --baseline-run found, one line per ranker, the rankers only one run has, then the verdict."""
    lines = [f"against the saved run {args.baseline_run} ({args.regression_metric}, paired randomisation test, fails below p = {args.regression_p:g}):"]
    for drift in drifts:
        state = "DROPPED" if drift.dropped else "ok"
        lines.append(
            f"  {drift.ranker}: {drift.saved:.3f} -> {drift.current:.3f} ({drift.current - drift.saved:+.3f}, "
            f"{'p < 0.001' if drift.p_value < 0.001 else f'p = {drift.p_value:.3f}'}, {drift.queries} queries) {state}"
        )
    missing = [name for name in result.rankers if name not in {drift.ranker for drift in drifts}]
    if missing:
        lines.append(f"  not in the saved run, so not compared: {', '.join(missing)}")
    # A ranker dropped from --rankers would otherwise leave the check without a word.
    saved_only = [name for name in saved.per_query if name not in result.rankers]
    if saved_only:
        lines.append(f"  in the saved run only, so not compared: {', '.join(saved_only)}")
    dropped = [drift.ranker for drift in drifts if drift.dropped]
    lines.append(f"regression: {', '.join(dropped)} (exit {EXIT_REGRESSION})" if dropped else "no significant drop")
    return lines

def cmd_evaluate_similar(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """The document-to-document task: every paper that shares a cited paper with another
    is a query, its co-citing papers the relevant ones (`load_cocitation_dataset`)."""
    from reranker.datasets import load_cocitation_dataset
    from reranker.evaluation import evaluate_similar
    from reranker.rankers import get_ranker
    from reranker.reports import evaluation_table

    names = ranker_list(args.rankers if args.rankers is not None else settings.service.default_ranker)
    rankers = [get_ranker(name) for name in names]  # fail on a typo before minutes of indexing
    check_output("--markdown", args.markdown)
    check_output("--run-dir", args.run_dir, folder=True)
    dataset = load_cocitation_dataset(args.dataset, args.qrels_file)
    result = offline_run(
        args, settings, dataset, rankers,
        lambda engine, tick, config: evaluate_similar(
            engine, dataset, names, window=settings.window, on_query=tick, config=config, run_dir=args.run_dir
        ),
    )
    table = evaluation_table(result)
    if args.markdown is not None:
        write_output(args.markdown, lambda path: path.write_text(table + "\n", encoding="utf-8"))
    if args.json:
        json.dump(result.to_json(per_query=args.per_query), out, indent=2)
        out.write("\n")
    else:
        print(table, file=out)
        if args.markdown is not None:
            print(f"table: {args.markdown}", file=out)
    return 0

def cmd_compare(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.comparison import check_rankers, compare
    from reranker.datasets import load_dataset
    from reranker.rankers import get_ranker
    from reranker.reports import comparison_plots, comparison_table, require_plotting

    names = ranker_list(args.rankers)
    baseline = args.baseline.strip() if args.baseline is not None else names[0]
    try:
        rankers = [get_ranker(name) for name in names]
    except UnknownRankerError as exc:
        raise ConfigError(str(exc)) from None  # a typo on the command line: a usage error, exit 2
    names = check_rankers(names, baseline)
    check_output("--markdown", args.markdown)
    check_output("--json-file", args.json_file)
    if args.plots is not None:
        require_plotting("--plots")
    check_output("--plots", args.plots, folder=True)
    check_output("--run-dir", args.run_dir, folder=True)
    if args.judgments is not None and args.qrels_file is not None:
        raise ConfigError("--judgments and --qrels-file both name the judgments: give one")
    dataset = load_dataset(args.dataset, args.queries_file, args.judgments, args.qrels_file)
    comparison = offline_run(
        args, settings, dataset, rankers,
        lambda engine, tick, config: compare(
            engine, dataset, names, baseline, window=settings.window, rbo_p=args.rbo_p, on_query=tick, config=config,
            run_dir=args.run_dir,
        ),
    )
    table, body = comparison_table(comparison), comparison.to_json()
    written = []
    if args.markdown is not None:
        write_output(args.markdown, lambda path: path.write_text(table + "\n", encoding="utf-8"))
        written.append(f"table: {args.markdown}")
    if args.json_file is not None:
        write_output(args.json_file, lambda path: path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8"))
        written.append(f"json: {args.json_file}")
    if args.plots is not None:
        figures: list[Path] = []
        write_output(args.plots, lambda folder: figures.extend(comparison_plots(comparison, folder)))
        written += [f"figure: {path}" for path in figures]
    if args.json:
        json.dump(body, out, indent=2)
        out.write("\n")
    else:
        print(table, file=out)
        for line in written:
            print(line, file=out)
    return 0

_Result = TypeVar("_Result")
# Skipped corpus lines an evaluation names (all of them with -v); `index` shows 20, but
# here they precede a report the reader came for.
SHOWN_SKIPS = 5

def _skipped_warning(skipped: Sequence[Any], *, every_skip: bool) -> str:
    """Which corpus lines were left out of the evaluation index and why, as `index` says it."""
    head = f"{len(skipped)} corpus line{'' if len(skipped) == 1 else 's'} skipped while indexing (not in the evaluation):"
    return "\n".join([head, *skipped_lines(skipped, SHOWN_SKIPS, every_skip=every_skip)])


def _check_judged_documents(engine: "Engine", dataset: "Dataset") -> None:
    """Judgments of documents the index lacks score as misses for every ranker: name them
    (a warning), or refuse when the index has none of them (every metric would be 0)."""
    judged = sorted({doc_id for query_id, _ in dataset.queries for doc_id in dataset.qrels.get(query_id, {})})
    missing = sorted(set(judged) - set(engine.store.content_hashes(judged)))
    if not missing:
        return
    judgments = str(dataset.judgments_path or dataset.corpus_path.parent / dataset.judgments)
    if len(missing) == len(judged):
        raise InputError(
            f"no relevant document it names ({len(judged)}) is in the corpus, or each one's line was skipped: "
            f"do its document ids (e.g. {missing[0]!r}) match the ids in {dataset.corpus_path}?",
            judgments,
        )
    log.warning(
        "%d of the %d relevant documents in %s %s not in the index (no ranker can find %s): %s",
        len(missing), len(judged), judgments, "is" if len(missing) == 1 else "are", "it" if len(missing) == 1 else "them",
        listed(missing, SHOWN_SKIPS),
    )


def offline_run(
    args: argparse.Namespace,
    settings: Settings,
    dataset: "Dataset",
    rankers: Sequence["Ranker"],
    work: Callable[["Engine", Callable[[], object], dict[str, Any]], _Result],
) -> _Result:
    """What `evaluate`, `compare` and `tune` share: index the dataset's corpus into its cached
    evaluation index (and train its Doc2Vec model if a ranker needs one), then return
    work(engine, tick, config): tick once per query, config states what the run used."""
    from tqdm import tqdm

    if args.train_vectors:
        # The evaluation index is per vectors, so new vectors never meet an index built
        # with others (hence "rebuild": nothing to refuse). Stdout may be the JSON report.
        settings = with_trained_vectors(settings, dataset.corpus_path, rebuild=True, progress=not args.no_progress, out=sys.stderr)
    engine = open_engine(
        settings, lambda vectors: _evaluation_store_name(settings, dataset.name, vectors), show_bar=not args.no_progress
    )
    # Offline, the comparison must be exact: WMD computes every distance, whatever the
    # service's time budget (RERANKER_WMD_BUDGET_MS) says.
    engine.ranker_options = dataclasses.replace(engine.ranker_options, wmd_budget_ms=math.inf)
    show = not args.no_progress and sys.stderr.isatty()
    try:
        report = index_file(engine, dataset.corpus_path, settings, rebuild=args.rebuild, progress=show)
        if report.skipped:
            log.warning("%s", _skipped_warning(report.skipped, every_skip=getattr(args, "verbose", False)))
        _check_judged_documents(engine, dataset)
        if any("doc_vectors" in ranker.needs for ranker in rankers):
            _ensure_doc2vec(engine, dataset.corpus_path, settings, progress=show)
        config = {
            "vectors": engine.vectors.info.name,
            "dim": engine.vectors.dim,
            "k": settings.k,
            "judgments": dataset.judgments,
            "queries_file": getattr(args, "queries_file", None),
            "fusion_weight": settings.fusion_weight,
            "wmd_budget_ms": settings.wmd_budget_ms,
            "documents": report.total_documents,
        }
        with tqdm(total=len(dataset.queries), desc="queries", disable=not show, leave=False) as bar:
            return work(engine, lambda: bar.update(1), config)
    finally:
        engine.store.close()

def _ensure_doc2vec(engine: "Engine", corpus: Path, settings: Settings, *, progress: bool) -> None:
    """Train the evaluation index's Doc2Vec model (default parameters) if it has none, so
    that one `evaluate` command reproduces the doc2vec rankers too; re-runs reuse it."""
    from tqdm import tqdm

    from reranker.doc2vec import Doc2VecParams, train_for_store
    from reranker.indexing import Skipped, read_corpus

    info = engine.store.index_info()
    if info is not None and info.doc2vec is not None:
        return
    params = Doc2VecParams()
    documents = (item for _, item, _ in read_corpus(corpus) if not isinstance(item, Skipped))
    log.info("training a PV-%s Doc2Vec model on %s for the doc2vec rankers", params.mode.upper(), corpus)
    with tqdm(total=params.epochs, desc="Doc2Vec epochs", disable=not progress, leave=False) as bar:
        _, report = train_for_store(engine.store, documents, params, settings.data_dir, engine.stopwords, progress=bar)
    if report.without_vector:
        log.warning("%d indexed documents have no Doc2Vec vector (no word of its vocabulary)", report.without_vector)

def _evaluation_store_name(settings: Settings, dataset: str, vectors: "WordVectors") -> str:
    """One cached index per (dataset, vectors, K, stop list): re-runs skip indexing. The
    stop list by its words' checksum, not its file's name: a file edited between runs
    makes another index, where the old one would refuse it. The bundled list keeps the
    key it had when the file's name was the key (no file: "None"), so those indexes stay."""
    import hashlib

    from reranker.text import default_stopwords, load_stopwords, stop_list_info

    stopwords = load_stopwords(settings.stopwords_file)
    stop_key = "None" if stopwords == default_stopwords() else stop_list_info(stopwords).checksum
    key = hashlib.sha256(f"{vectors.info.checksum}|{settings.k}|{stop_key}".encode()).hexdigest()[:12]
    return f"eval/{dataset}-k{settings.k}-{key}"

def cmd_ab(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Experiments straight from the event store (no HTTP, so no admin key: whoever can
    run this on the server can already read the store)."""
    from reranker.store.events import open_event_store

    # The actions that only read make no store: on a data dir without one, they answer
    # from an empty view ("no experiments yet", "no experiment 'x'") and leave it as it was.
    store = open_event_store(settings, create=args.action not in ("list", "report", "judgments"))
    try:
        return _ab(args, settings, store, out)
    except (InputError, UnknownRankerError) as exc:  # a bad name or value given on the command line
        raise ConfigError(str(exc)) from None
    finally:
        store.close()

def _min_units(args: argparse.Namespace) -> int:
    """--min-units, or its old name --min-queries (with a deprecation warning); both only if they agree."""
    if args.min_queries is None:
        return int(args.min_units or DEFAULT_MIN_UNITS)
    if args.min_units is not None and args.min_units != args.min_queries:
        raise ConfigError(
            f"--min-units {args.min_units} and --min-queries {args.min_queries} differ: --min-queries is the old name of --min-units, give one"
        )
    log.warning("--min-queries is deprecated: use --min-units (the same number; it counts units, not searches)")
    return int(args.min_queries)


def _share(traffic: float) -> str:
    """A traffic share as a percentage to 3 significant digits: whole percents would print
    0.4% as "0%" (as if the experiment took no searches) and 99.9% as "100%"."""
    return f"{traffic * 100:.3g}%"


def _runnable(settings: Settings, rankers: Sequence[str]) -> None:
    """RankerUnavailableError when a ranker cannot run on this index (doc2vec before `reranker
    train doc2vec`), as POST /experiments refuses it: every search would leave the experiment
    out, and it would collect nothing while listed as running.

    Without an index there is nothing to check them on, and none is made (an empty one
    would then say "the index is empty" to every search): the experiment is created, as
    the walkthrough does before anything is indexed, and stderr says the check waits for
    the index (a service starting on this data dir makes its index and checks as it serves)."""
    try:
        engine = open_engine(settings, create=False, show_bar=False)
    except IndexNotFoundError as exc:
        print(f"reranker: {exc}; the rankers are checked once there is one (a search leaves the experiment out while one cannot run)", file=sys.stderr)
        return
    try:
        for name in rankers:
            engine.check_ranker(engine.ranker(name))
    finally:
        engine.store.close()


def _experiment_id(raw: str) -> str:
    from reranker.experiments import ID_PATTERN, ID_RULE

    if not ID_PATTERN.fullmatch(raw):
        raise argparse.ArgumentTypeError(f"must be {ID_RULE}, got {raw!r}")
    return raw


def _ranker_pair(raw: str) -> list[str]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if len(names) != 2 or names[0] == names[1]:
        raise argparse.ArgumentTypeError(f"must name two different rankers, A,B, got {raw!r}")
    return names


def _ab(args: argparse.Namespace, settings: Settings, store: "EventStore", out: TextIO) -> int:
    from reranker import experiments as ex
    from reranker.interleaving import format_p_value

    if args.action == "create":
        asked = ex.new_experiment(args.id, args.rankers, method=args.method, traffic=args.traffic, min_units=_min_units(args))
        _runnable(settings, asked.rankers)
        experiment = ex.create(store, asked)
        print(f"experiment {experiment.id} running: {' vs '.join(experiment.rankers)}, {experiment.method}, {_share(experiment.traffic)} of searches", file=out)
    elif args.action == "set":
        if args.traffic is None and args.status is None:
            raise ConfigError("nothing to change: give --traffic and/or --status")
        experiment = ex.update(
            store, args.id, traffic=args.traffic, status=args.status, check_rankers=lambda rankers: _runnable(settings, rankers)
        )
        print(f"experiment {experiment.id} {experiment.status}, {_share(experiment.traffic)} of searches (running services see it within {ex.RUNNING_TTL_SECONDS:g} s)", file=out)
    elif args.action == "delete":
        print(ex.delete(store, args.id, events=args.delete_events).message(), file=out)
    elif args.action == "judgments":
        return judging.run(args, settings, store, out)
    elif args.action == "report":
        experiment = ex.find(store, args.id)
        found = ex.report(store, experiment)
        if args.json:
            print(json.dumps({"experiment": experiment.to_json(), "report": found.to_json()}, indent=2), file=out)
        else:
            o = found.outcome
            a, b = experiment.rankers
            print(f"experiment {experiment.id} ({experiment.status}): {a} vs {b}, {experiment.method}, {_share(experiment.traffic)} of searches", file=out)
            print(f"  searches interleaved {o.queries}, with clicks {o.queries_with_clicks}, clicks {found.click_events} (on {counted(o.clicks, 'distinct hit')})", file=out)
            print(f"  units with clicks {o.units_with_clicks} (a client's query, or a query without a client id: one trial each)", file=out)
            print(f"  wins: {a} {o.wins_a}, {b} {o.wins_b}, ties {o.ties}", file=out)
            print(f"  {o.message}", file=out)
            if o.fixed_horizon_p_value is not None:
                # For a team that planned its size and looks once, there; the verdict above is the one to watch.
                print(f"  fixed-horizon sign test (one look at a planned size only): {format_p_value(o.fixed_horizon_p_value)}", file=out)
            gone = ex.removed_rankers(experiment)
            if gone:
                print(f"  removed rankers: {', '.join(gone)}: not in this version, so the experiment cannot run again (this report stays)", file=out)
    else:
        listed = store.experiments()
        if not listed:
            print("no experiments yet: reranker ab create ID --rankers A,B", file=out)
        width = max((len(e.id) for e in listed), default=0)
        for e in listed:
            print(f"{e.id:<{width}}  {e.status:<8} {e.rankers[0]} vs {e.rankers[1]}  {e.method:<10} traffic {_share(e.traffic)}  since {e.created}", file=out)
    return 0


COMMANDS = {"evaluate": cmd_evaluate, "evaluate-similar": cmd_evaluate_similar, "compare": cmd_compare, "ab": cmd_ab}
