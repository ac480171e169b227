"""The `reranker` command: demo, index, search, evaluate, compare, train, rankers, serve, ab.

`main(argv) -> int` runs in-process (the tests call it directly). Errors the user can
fix print one line, `reranker: error: ...`, and exit non-zero; nothing else catches.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import re
import sys
import textwrap
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TextIO, TypeVar

from reranker.config import DEFAULT_VECTORS, WORD2VEC_DIM, WORD2VEC_EPOCHS, Settings
from reranker.errors import ConfigError, IndexMismatchError, IndexOutdatedError, InputError, RerankerError, UnknownRankerError
from reranker.rankers import ranker_names
from reranker.types import Filter

if TYPE_CHECKING:
    from reranker.datasets import Dataset
    from reranker.embeddings import WordVectors
    from reranker.pipeline import Engine
    from reranker.rankers import Ranker
    from reranker.store.events import EventStore

log = logging.getLogger("reranker")

EXIT_ERROR = 1
EXIT_USAGE = 2


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _fraction(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def _persistence(raw: str) -> float:
    value = _fraction(raw)
    if value in (0.0, 1.0):
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reranker",
        description="Rerank BM25 candidates for summary-style queries by hidden topics.",
    )
    parser.add_argument("--config", type=Path, help="TOML settings file (env RERANKER_CONFIG; see `reranker config`)")
    parser.add_argument("--data-dir", type=Path, help="where the embedded store lives (env RERANKER_DATA_DIR)")
    parser.add_argument("--opensearch-url", help="use the OpenSearch store at this URL (env OPENSEARCH_URL)")
    parser.add_argument(
        "--vectors",
        help="word vectors: glove-6b-50d (default), or [word2vec:|word2vec-bin:|glove:|fasttext:|kv:]PATH "
        "(env RERANKER_VECTORS)",
    )
    parser.add_argument("--stopwords", type=Path, help="stop-word file, one word per line (env RERANKER_STOPWORDS)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="index the bundled sample corpus and answer its sample queries")
    demo.add_argument("--queries", type=_positive_int, default=3, help="how many sample queries to show (default 3)")
    demo.add_argument("--size", type=_positive_int, default=5, help="hits shown per ranker (default 5)")

    index = commands.add_parser("index", help="index a JSONL corpus ({id, title, text} per line)")
    index.add_argument("corpus", type=Path)
    index.add_argument("--k", type=_positive_int, help="topics per document (default 15, env RERANKER_K)")
    index.add_argument(
        "--rebuild", action="store_true",
        help="build a new index (needed to change vectors or K); in OpenSearch the alias moves to it when done",
    )
    index.add_argument("--workers", type=_positive_int, help="topic-extraction processes (env RERANKER_INDEX_WORKERS)")
    index.add_argument(
        "--train-vectors", action="store_true",
        help="train CBOW word2vec on CORPUS first (the paper's domain vectors) and build the index with them; "
        "later commands use them without --vectors",
    )
    index.add_argument("--no-progress", action="store_true", help="no progress bar")

    search = commands.add_parser("search", help="BM25 top-N for a summary, reranked")
    search.add_argument("query", help="the summary text, or - to read it from standard input")
    _add_ranking_options(search)
    search.add_argument("--ranker", help="ranker name (see `reranker rankers`; default RERANKER_DEFAULT_RANKER)")
    search.add_argument("--size", type=_positive_int, default=10, help="hits to show (default 10)")
    search.add_argument("--explain", action="store_true", help="per-topic contributions and words")
    search.add_argument(
        "--filter", action="append", default=[], type=_filter, metavar="FIELD=VALUE",
        help="only candidates whose FIELD equals VALUE (also FIELD>=N, >, <=, <); repeatable",
    )
    search.add_argument("--json", action="store_true", help="print JSON")

    evaluate = commands.add_parser("evaluate", help="IR metrics of rankers on a judged dataset folder")
    evaluate.add_argument("dataset", type=Path, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv")
    evaluate.add_argument("--queries-file", default="queries.jsonl", help="query file inside the folder")
    evaluate.add_argument(
        "--rankers",
        default="bm25,hidden_topics,hidden_topics_code,hidden_topics+bm25",
        help="comma-separated ranker names",
    )
    evaluate.add_argument("--k", type=_positive_int, help="topics per document (default 15)")
    _add_ranking_options(evaluate)
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--per-query", action="store_true", help="include per-query metrics in the JSON")
    evaluate.add_argument("--rebuild", action="store_true", help="re-index the dataset's cached index")
    evaluate.add_argument(
        "--run-dir", type=Path, metavar="DIR",
        help="also write each ranker's TREC run file into DIR (DATASET.RANKER.run), for trec_eval or ir_measures",
    )
    evaluate.add_argument(
        "--train-vectors", action="store_true",
        help="use CBOW word2vec trained on the dataset's own corpus (trained once, then reused) instead of --vectors",
    )
    evaluate.add_argument(
        "--plot", type=Path, metavar="PATH.png",
        help="also write the ranking figure: per ranker, the share of queries at each value of P@1, P@3, P@6 (PNG)",
    )
    evaluate.add_argument("--markdown", type=Path, metavar="PATH", help="also write the table and its caption to a Markdown file")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bars")

    compare = commands.add_parser(
        "compare",
        help="rankers side by side against a baseline on a judged dataset: metrics, tests, rank overlap",
    )
    compare.add_argument("--dataset", type=Path, required=True, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv")
    compare.add_argument("--rankers", required=True, help="comma-separated ranker names (two or more)")
    compare.add_argument("--baseline", help="the ranker the others are tested against; one of --rankers (default: the first)")
    compare.add_argument(
        "--judgments", type=Path, metavar="FILE",
        help="an OpenSearch _rank_eval request body (requests[].id, ratings[]._id/rating) instead of qrels.tsv",
    )
    compare.add_argument("--queries-file", default="queries.jsonl", help="query file inside the folder")
    compare.add_argument("--k", type=_positive_int, help="topics per document (default 15)")
    _add_ranking_options(compare)
    compare.add_argument(
        "--rbo-p", type=_persistence, default=0.9, help="persistence p of rank-biased overlap, in (0, 1) (default 0.9)"
    )
    compare.add_argument("--markdown", type=Path, metavar="FILE", help="also write the Markdown tables to FILE")
    compare.add_argument("--json", action="store_true", help="print one JSON object (per-query rows included) instead of Markdown")
    compare.add_argument("--json-file", type=Path, metavar="FILE", help="also write the JSON object to FILE")
    compare.add_argument(
        "--plots", type=Path, metavar="DIR",
        help="also write DIR/compare-<dataset>-ndcg10-deltas.png (per-query nDCG@10 of each ranker minus the "
        "baseline) and DIR/compare-<dataset>-precision-bins.png",
    )
    compare.add_argument("--rebuild", action="store_true", help="re-index the dataset's cached index")
    compare.add_argument(
        "--run-dir", type=Path, metavar="DIR",
        help="also write each ranker's TREC run file into DIR (DATASET.RANKER.run), for trec_eval or ir_measures",
    )
    compare.add_argument(
        "--train-vectors", action="store_true",
        help="use CBOW word2vec trained on the dataset's own corpus (trained once, then reused) instead of --vectors",
    )
    compare.add_argument("--no-progress", action="store_true", help="no progress bars")

    train = commands.add_parser(
        "train",
        help="train domain word vectors (word2vec), or a Doc2Vec model of the indexed corpus (doc2vec)",
    )
    train.add_argument("model", choices=["word2vec", "doc2vec"])
    train.add_argument("corpus", type=Path, help="JSONL corpus ({id, title, text} per line); for doc2vec, the indexed one")
    train.add_argument("--out", type=Path, help="word2vec: output file (gensim format; use it with --vectors); required")
    train.add_argument("--mode", choices=["dbow", "dm"], default="dbow", help="doc2vec: PV-DBOW (default) or PV-DM")
    train.add_argument("--dim", type=_positive_int, help=f"vector size (default: word2vec {WORD2VEC_DIM}, doc2vec 100)")
    train.add_argument("--window", type=_positive_int, help="context words each side (default 5)")
    train.add_argument("--min-count", type=_positive_int, help="ignore rarer words (default 2)")
    train.add_argument("--epochs", type=_positive_int, help=f"training passes (default: word2vec {WORD2VEC_EPOCHS}, doc2vec 20)")
    train.add_argument("--seed", type=int, default=1, help="doc2vec: seeds training and query inference (default 1)")
    train.add_argument(
        "--infer-epochs", type=_positive_int, default=20,
        help="doc2vec: passes when inferring a query's vector (default 20; ~0.1 ms each for 100 words)",
    )
    train.add_argument(
        "--workers", type=_positive_int, default=1,
        help="training threads (default 1: reproducible vectors; more is faster but not reproducible)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    commands.add_parser("rankers", help="list the registered rankers")
    dev = commands.add_parser(
        "dev-cluster",
        help="run the bundled in-memory OpenSearch-compatible test server (osmem-server, from the test extra) "
        "to try the OpenSearch store without Docker; its data lives in memory only",
    )
    dev.add_argument("--bind", default="127.0.0.1:9200", help="HOST:PORT (default 127.0.0.1:9200)")
    commands.add_parser("config", help="print the effective settings (secrets hidden)")

    templates = commands.add_parser("templates", help="OpenSearch index templates (index_templates/)")
    templates_action = templates.add_subparsers(dest="action", required=True, metavar="ACTION")
    templates_action.add_parser("install", help="install the component and index templates on the cluster")
    templates_action.add_parser("show", help="print the templates as they would be installed")

    serve = commands.add_parser("serve", help="run the HTTP service (gunicorn) over the same store")
    serve.add_argument("--bind", help="HOST:PORT to listen on (default 127.0.0.1:8000, env RERANKER_BIND)")
    serve.add_argument("--workers", dest="server_workers", type=_positive_int, help="worker processes (default: CPU count, env RERANKER_WORKERS)")
    serve.add_argument("--threads", type=_positive_int, help="threads per worker (default 4, env RERANKER_THREADS)")
    serve.add_argument("--timeout", type=_positive_int, help="seconds before a stuck worker is restarted (default 30, env RERANKER_TIMEOUT)")

    indices = commands.add_parser("indices", help="the OpenSearch index versions behind the alias")
    indices_action = indices.add_subparsers(dest="action", required=True, metavar="ACTION")
    indices_action.add_parser("list", help="versions, document counts, what they were built with")
    use = indices_action.add_parser("use", help="point the alias at another finished version (rollback)")
    use.add_argument("name")
    delete = indices_action.add_parser("delete", help="delete a version the alias does not point at")
    delete.add_argument("name")

    ab = commands.add_parser("ab", help="online experiments: interleave two rankers on live traffic, report the winner")
    ab_action = ab.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = ab_action.add_parser("create", help="start an experiment (one runs at a time)")
    create.add_argument("id", help="a name: a-z, 0-9, _ and -")
    create.add_argument("--rankers", required=True, help="the two rankers to compare, A,B (see `reranker rankers`)")
    create.add_argument("--method", choices=("team_draft", "balanced"), default="team_draft", help="interleaving method (default team_draft)")
    create.add_argument("--traffic", type=float, default=0.1, help="share of searches naming no ranker that are interleaved, 0 < x <= 1 (default 0.1)")
    create.add_argument("--min-queries", type=_positive_int, default=20, help="queries with a preference needed before a winner is named (default 20)")
    ab_action.add_parser("list", help="every experiment")
    report = ab_action.add_parser("report", help="clicks, wins per ranker, winner and sign-test p-value")
    report.add_argument("id")
    report.add_argument("--json", action="store_true", help="print one JSON object (the same as GET /experiments/ID)")
    change = ab_action.add_parser("set", help="change an experiment's traffic share or status")
    change.add_argument("id")
    change.add_argument("--traffic", type=float, help="new share of traffic, 0 < x <= 1")
    change.add_argument("--status", choices=("running", "stopped"), help="stop it, or run it again")
    return parser


_FILTER = re.compile(r"^\s*([A-Za-z0-9_.@-]+)\s*(>=|<=|>|<|=)\s*(.*?)\s*$", re.S)
_FILTER_OPS = {"=": "eq", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}


def _filter(raw: str) -> Filter:
    """"year>=2010" -> Filter("year", "gte", 2010); values are JSON when they parse."""
    match = _FILTER.match(raw)
    if not match or match.group(3) == "":
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE or FIELD>=VALUE (also >, <=, <), got {raw!r}")
    name, op, value = match.groups()
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    if not isinstance(parsed, (str, int, float, bool)):
        parsed = value
    if op != "=" and (isinstance(parsed, bool) or not isinstance(parsed, (int, float, str))):
        raise argparse.ArgumentTypeError(f"a range filter needs a number or a date, got {value!r}")
    return Filter(name, _FILTER_OPS[op], parsed)


def _add_ranking_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=_positive_int, help="BM25 candidates to rerank (default 100)")
    parser.add_argument("--fusion-weight", type=_fraction, help="weight of the ranker in the min-max and z-score fusions with BM25, e.g. wmd+bm25:zscore (default 0.5)")


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # gensim is chatty; opensearch-py logs every failed request with a traceback,
        # which the one-line error below already says better.
        logging.getLogger("gensim").setLevel(logging.WARNING)
        logging.getLogger("opensearch").setLevel(logging.CRITICAL)
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        settings = _settings(args)
        handler = _COMMANDS[args.command]
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=settings.blas_threads, user_api="blas"):
            return handler(args, settings, out)
    except BrokenPipeError:  # `reranker evaluate --json | head`: the reader has what it wanted
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(getattr(args, "exit_code", 0))  # the command's own verdict, decided before printing
    except RerankerError as exc:
        print(f"reranker: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, (ConfigError, IndexOutdatedError)) else EXIT_ERROR
    except KeyboardInterrupt:
        print("reranker: interrupted (already indexed batches are kept)", file=sys.stderr)
        return 130


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env(config_file=args.config)
    overrides: dict[str, Any] = {}
    for option, name in [
        ("data_dir", "data_dir"),
        ("opensearch_url", "opensearch_url"),
        ("vectors", "vectors"),
        ("stopwords", "stopwords_file"),
        ("k", "k"),
        ("window", "window"),
        ("fusion_weight", "fusion_weight"),
        ("workers", "index_workers"),
    ]:
        value = getattr(args, option, None)
        if value is not None:
            overrides[name] = value
    service: dict[str, Any] = {}
    for option, name in [("bind", "bind"), ("server_workers", "workers"), ("threads", "threads"), ("timeout", "timeout")]:
        value = getattr(args, option, None)
        if value is not None:
            service[name] = value
    if service:
        overrides["service"] = dataclasses.replace(settings.service, **service)
    settings = dataclasses.replace(settings, **overrides)
    settings.validate()
    return settings


# --- shared construction ------------------------------------------------------------


def _engine(settings: Settings, store_name: str | Callable[["WordVectors"], str] | None = None) -> "Engine":
    from reranker.pipeline import build_engine

    return build_engine(settings, store_name)


def _index(engine: "Engine", corpus: Path, settings: Settings, *, rebuild: bool, progress: bool) -> Any:
    from reranker.indexing import index_corpus

    return index_corpus(
        corpus,
        engine.store,
        engine.vectors,
        settings.k,
        stopwords=engine.stopwords,
        rebuild=rebuild,
        show_progress=progress and sys.stderr.isatty(),
        workers=settings.index_workers,
        data_dir=engine.data_dir,  # documents added to an index with a Doc2Vec model get vectors
    )


def _with_trained_vectors(
    settings: Settings, corpus: Path, *, rebuild: bool, progress: bool, out: TextIO, store_name: str | None = None
) -> Settings:
    """`settings` using word2vec trained on `corpus` (reused when trained before).

    With an index that holds documents built with other vectors, refuses before training
    (which takes minutes) unless `rebuild`: new vectors mean a new index.
    """
    from reranker.embeddings import Word2VecParams, trained_vectors
    from reranker.indexing import train_corpus_vectors, trained_vectors_path
    from reranker.store import open_store
    from reranker.text import load_stopwords

    if settings.vectors:
        raise ConfigError("--train-vectors trains the index's own word vectors: drop --vectors (and RERANKER_VECTORS)")
    if not corpus.is_file():
        raise InputError("no such corpus file", str(corpus))
    stopwords = load_stopwords(settings.stopwords_file)
    params = Word2VecParams()
    if not rebuild:
        store = open_store(settings, store_name)
        try:
            built, documents = store.index_info(), store.count()
        finally:
            store.close()
        done = trained_vectors(trained_vectors_path(corpus, settings.data_dir, params, stopwords))
        if built is not None and documents > 0 and (done is None or done.checksum != built.embedding.checksum):
            raise IndexMismatchError(
                f"the index holds {documents} documents built with word vectors {built.embedding.name!r}; "
                f"vectors trained on {corpus} are new ones: add --rebuild to build the index with them"
            )
    started = time.perf_counter()
    trained = train_corpus_vectors(
        corpus, settings.data_dir, stopwords, params, show_progress=progress and sys.stderr.isatty()
    )
    if trained.reused:
        print(f"word vectors: trained on {corpus} before, reused from {trained.path}", file=out)
    else:
        print(
            f"word vectors: trained CBOW word2vec (d={params.dim}, {params.epochs} epochs) on {trained.documents} "
            f"documents of {corpus} in {time.perf_counter() - started:.1f} s; saved {trained.path}",
            file=out,
        )
    return dataclasses.replace(settings, vectors=trained.info.source)


def _report(report: Any, out: TextIO, *, every_skip: bool = False) -> None:
    print(
        f"indexed {report.indexed}, unchanged {report.unchanged}, skipped {len(report.skipped)} "
        f"in {report.seconds:.1f} s; the index holds {report.total_documents} documents",
        file=out,
    )
    published = report.published
    if published is not None and getattr(published, "swapped", False):
        kept = f"; kept {', '.join(published.previous)} (reranker indices delete NAME)" if published.previous else ""
        print(f"alias now points at {published.current}{kept}", file=out)
    shown = report.skipped if every_skip else report.skipped[:20]
    for item in shown:
        doc = f" ({item.doc_id})" if item.doc_id else ""
        print(f"  skipped {item.location}{doc}: {item.reason}", file=out)
    if len(report.skipped) > len(shown):
        print(f"  ... and {len(report.skipped) - len(shown)} more (run with -v to list them all)", file=out)


# --- commands -----------------------------------------------------------------------


def cmd_index(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    if args.train_vectors:
        settings = _with_trained_vectors(settings, args.corpus, rebuild=args.rebuild, progress=not args.no_progress, out=out)
    engine = _engine(settings)
    try:
        report = _index(engine, args.corpus, settings, rebuild=args.rebuild, progress=not args.no_progress)
    finally:
        engine.store.close()
    # Non-zero when a line did not make it in, so scripts notice; the rest is indexed.
    # Decided before printing, so `reranker index bad.jsonl | head -2` still exits 1.
    args.exit_code = EXIT_ERROR if report.skipped else 0
    _report(report, out, every_skip=args.verbose)
    return int(args.exit_code)


def _read_query(raw: str) -> str:
    text = sys.stdin.read() if raw == "-" else raw
    if not text.strip():
        raise InputError("the query is empty")
    return text


def cmd_search(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    query = _read_query(args.query)
    engine = _engine(settings)
    try:
        if engine.store.count() == 0:
            raise InputError("the index is empty: run `reranker index CORPUS.jsonl` first")
        result = engine.search(
            query,
            args.ranker or settings.service.default_ranker,
            window=settings.window,
            size=args.size,
            explain=args.explain,
            filters=args.filter,
        )
    finally:
        engine.store.close()
    if args.json:
        json.dump(_result_json(result, explain=args.explain), out, indent=2)
        out.write("\n")
    else:
        _print_result(result, out, explain=args.explain)
    return 0


def _result_json(result: Any, *, explain: bool) -> dict[str, Any]:
    """The shape of POST /search's answer (one hit shape everywhere: RankedDoc.to_json)."""
    body: dict[str, Any] = {"status": result.status}
    if result.notes:
        body["reason"] = " ".join(result.notes)
    return {
        **body,
        "query": result.query,
        "ranker": result.ranker,
        "window": result.window,
        "hits": [hit.to_json(explain=explain) for hit in result.hits],
        "query_words": list(result.query_words),
        "oov_words": list(result.oov_words),
        "timings_ms": result.timings_ms,
    }


def _print_result(result: Any, out: TextIO, *, explain: bool) -> None:
    note = ""
    if result.status == "partial":
        note = f"  [partial: {' '.join(result.notes)}]"
    elif result.status != "ok":
        note = f"  [{result.status}: BM25 order kept]"
    print(
        f"{result.ranker}: {len(result.hits)} of the BM25 top {result.window}, "
        f"{len(result.query_words)} query words in vocabulary, {len(result.oov_words)} not{note}",
        file=out,
    )
    for hit in result.hits:
        move = hit.bm25_rank - hit.rank
        arrow = f"+{move}" if move > 0 else (str(move) if move < 0 else "=")
        # A fusion orders by the fused score; show its base ranker's own score too.
        own = f" ({hit.ranker_score:.4f})" if hit.ranker_score != hit.score else ""
        print(
            f"{hit.rank:>3}. {hit.doc_id:<24} score {hit.score:.4f}{own}  bm25 {hit.bm25_score:7.2f} "
            f"(rank {hit.bm25_rank}, {arrow})  {hit.title[:50]}",
            file=out,
        )
        if explain:
            for line in _explanation_lines(hit, topics=3):
                print("       " + line, file=out)


def _explanation_lines(hit: Any, topics: int) -> list[str]:
    lines = []
    for topic in hit.explanation[:topics]:
        relevance = f"(relevance {topic.relevance:.3f} - background {topic.background:.3f})" if topic.background else f"relevance {topic.relevance:.3f}"
        lines.append(
            f"topic {topic.rank}: importance {topic.importance:.3f} x {relevance} "
            f"-> {topic.contribution:.4f}; words: {', '.join(topic.topic_words)}; "
            f"query words: {', '.join(topic.query_words)}"
        )
    return lines


def cmd_evaluate(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.datasets import load_dataset
    from reranker.evaluation import evaluate
    from reranker.rankers import get_ranker
    from reranker.reports import evaluation_table, plot_precision_bins

    names = _ranker_list(args.rankers)
    rankers = [get_ranker(name) for name in names]  # fail on a typo before minutes of indexing
    for path in (args.plot, args.markdown):
        if path is not None:
            _writable(path)  # and on an unwritable output path
    if args.run_dir is not None:
        _writable_folder(args.run_dir)
    dataset = load_dataset(args.dataset, args.queries_file)
    result = _offline_run(
        args, settings, dataset, rankers,
        lambda engine, tick, config: evaluate(
            engine, dataset, names, window=settings.window, on_query=tick, config=config, run_dir=args.run_dir
        ),
    )
    written = []
    if args.markdown is not None:
        _write(args.markdown, lambda path: path.write_text(evaluation_table(result) + "\n", encoding="utf-8"))
        written.append(f"table: {args.markdown}")
    if args.plot is not None:
        _write(args.plot, lambda path: plot_precision_bins(result, path))
        written.append(f"figure: {args.plot}")
    if args.json:
        json.dump(result.to_json(per_query=args.per_query), out, indent=2)
        out.write("\n")
    else:
        print(evaluation_table(result), file=out)
        for line in written:
            print(line, file=out)
    return 0


def cmd_compare(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.comparison import check_rankers, compare
    from reranker.datasets import load_dataset
    from reranker.rankers import get_ranker
    from reranker.reports import comparison_plots, comparison_table

    names = _ranker_list(args.rankers)
    baseline = args.baseline.strip() if args.baseline is not None else names[0]
    try:
        rankers = [get_ranker(name) for name in names]
    except UnknownRankerError as exc:
        raise ConfigError(str(exc)) from None  # a typo on the command line: a usage error, exit 2
    names = check_rankers(names, baseline)
    for path in (args.markdown, args.json_file):
        if path is not None:
            _writable(path)
    if args.plots is not None:
        _writable_folder(args.plots)
    if args.run_dir is not None:
        _writable_folder(args.run_dir)
    dataset = load_dataset(args.dataset, args.queries_file, args.judgments)
    comparison = _offline_run(
        args, settings, dataset, rankers,
        lambda engine, tick, config: compare(
            engine, dataset, names, baseline, window=settings.window, rbo_p=args.rbo_p, on_query=tick, config=config,
            run_dir=args.run_dir,
        ),
    )
    table, body = comparison_table(comparison), comparison.to_json()
    written = []
    if args.markdown is not None:
        _write(args.markdown, lambda path: path.write_text(table + "\n", encoding="utf-8"))
        written.append(f"table: {args.markdown}")
    if args.json_file is not None:
        _write(args.json_file, lambda path: path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8"))
        written.append(f"json: {args.json_file}")
    if args.plots is not None:
        figures: list[Path] = []
        _write(args.plots, lambda folder: figures.extend(comparison_plots(comparison, folder)))
        written += [f"figure: {path}" for path in figures]
    if args.json:
        json.dump(body, out, indent=2)
        out.write("\n")
    else:
        print(table, file=out)
        for line in written:
            print(line, file=out)
    return 0


def _ranker_list(raw: str) -> list[str]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if not names:
        raise ConfigError("--rankers needs at least one ranker name")
    return names


_Result = TypeVar("_Result")


def _offline_run(
    args: argparse.Namespace,
    settings: Settings,
    dataset: "Dataset",
    rankers: Sequence["Ranker"],
    work: Callable[["Engine", Callable[[], object], dict[str, Any]], _Result],
) -> _Result:
    """What `evaluate` and `compare` share: index the dataset's corpus into its cached
    evaluation index (and train its Doc2Vec model if a ranker needs one), then return
    work(engine, tick, config): tick once per query, config states what the run used."""
    from tqdm import tqdm

    if args.train_vectors:
        # The evaluation index is per vectors, so new vectors never meet an index built
        # with others (hence "rebuild": nothing to refuse). Stdout may be the JSON report.
        settings = _with_trained_vectors(settings, dataset.corpus_path, rebuild=True, progress=not args.no_progress, out=sys.stderr)
    engine = _engine(settings, lambda vectors: _evaluation_store_name(settings, dataset.name, vectors))
    # Offline, the comparison must be exact: WMD computes every distance, whatever the
    # service's time budget (RERANKER_WMD_BUDGET_MS) says.
    engine.ranker_options = dataclasses.replace(engine.ranker_options, wmd_budget_ms=math.inf)
    show = not args.no_progress and sys.stderr.isatty()
    try:
        report = _index(engine, dataset.corpus_path, settings, rebuild=args.rebuild, progress=show)
        if report.skipped:
            log.warning("%d corpus documents were skipped while indexing", len(report.skipped))
        if any("doc_vectors" in ranker.needs for ranker in rankers):
            _ensure_doc2vec(engine, dataset.corpus_path, settings, progress=show)
        config = {
            "vectors": engine.vectors.info.name,
            "dim": engine.vectors.dim,
            "k": settings.k,
            "queries_file": args.queries_file,
            "fusion_weight": settings.fusion_weight,
            "wmd_budget_ms": settings.wmd_budget_ms,
            "documents": report.total_documents,
        }
        with tqdm(total=len(dataset.queries), desc="queries", disable=not show, leave=False) as bar:
            return work(engine, lambda: bar.update(1), config)
    finally:
        engine.store.close()


def _writable_folder(path: Path) -> None:
    """Raise InputError now, not after the run, if figures cannot go into folder `path`."""
    if path.exists() and not path.is_dir():
        raise InputError("is a file; expected a folder", str(path))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the folder: {exc.strerror or exc}", str(path)) from None


def _writable(path: Path) -> None:
    """Raise InputError now, not after the evaluation, if `path` cannot be written."""
    if path.is_dir():
        raise InputError("is a folder; expected a file name", str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create its folder: {exc.strerror or exc}", str(path)) from None


def _write(path: Path, write: Callable[[Path], object]) -> None:
    try:
        write(path)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", str(path)) from None


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
    """One cached index per (dataset, vectors, K, stop list): re-runs skip indexing."""
    import hashlib

    key = hashlib.sha256(
        f"{vectors.info.checksum}|{settings.k}|{settings.stopwords_file}".encode()
    ).hexdigest()[:12]
    return f"eval/{dataset}-k{settings.k}-{key}"


def cmd_train(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from tqdm import tqdm

    from reranker.embeddings import Word2VecParams, train_word2vec
    from reranker.indexing import corpus_sentences
    from reranker.text import load_stopwords

    if args.model == "doc2vec":
        return _train_doc2vec(args, settings, out)
    if args.out is None:
        raise ConfigError("reranker train word2vec needs --out FILE (where to save the vectors)")
    sentences, documents, skipped = corpus_sentences(args.corpus, load_stopwords(settings.stopwords_file))
    params = Word2VecParams(**_given(args, "dim", "window", "min_count", "epochs"))
    show = not args.no_progress and sys.stderr.isatty()
    with tqdm(total=params.epochs, unit="epoch", desc="training word2vec", disable=not show, leave=False) as bar:
        info = train_word2vec(sentences, args.out, params, workers=args.workers, on_epoch=lambda _: bar.update(1))
    print(
        f"trained CBOW word2vec (d={info.dim}, {params.epochs} epochs) on {documents} documents "
        f"({len(sentences)} lines with words) of {args.corpus}"
        f"{f'; skipped {skipped} corpus lines' if skipped else ''}; saved {args.out}\n"
        f"use it with: reranker --vectors {args.out} ... (or train and index in one step: reranker index CORPUS --train-vectors)",
        file=out,
    )
    return 0


def _given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among `names` the user gave (the others keep their model's default)."""
    return {name: value for name in names if (value := getattr(args, name)) is not None}


def _train_doc2vec(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """`reranker train doc2vec CORPUS`: train on the indexed corpus, store the vectors in
    the current index and record the model there (see reranker.doc2vec)."""
    from tqdm import tqdm

    from reranker.doc2vec import Doc2VecParams, model_path, train_for_store
    from reranker.indexing import Skipped, read_corpus
    from reranker.store import open_store
    from reranker.text import load_stopwords

    params = Doc2VecParams(
        mode=args.mode, seed=args.seed, infer_epochs=args.infer_epochs, workers=args.workers, **_given(args, "dim", "epochs", "min_count", "window"),
    )
    params.validate()
    if not args.corpus.is_file():
        raise InputError("no such corpus file", str(args.corpus))
    skipped: list[Skipped] = []
    documents = []
    for _, item, _ in read_corpus(args.corpus):
        if isinstance(item, Skipped):
            skipped.append(item)
        else:
            documents.append(item)
    store = open_store(settings)
    show = not args.no_progress and sys.stderr.isatty()
    try:
        with tqdm(total=params.epochs, unit="epoch", desc="training doc2vec", disable=not show, leave=False) as bar:
            _, report = train_for_store(
                store, documents, params, settings.data_dir, load_stopwords(settings.stopwords_file), progress=bar
            )
    finally:
        store.close()
    info = report.info
    print(
        f"trained PV-{info.mode.upper()} Doc2Vec (dim={info.dim}, {info.epochs} epochs) on {report.documents} "
        f"documents of {args.corpus}{f' ({len(skipped)} lines skipped)' if skipped else ''} in {report.seconds:.1f} s; "
        f"model {info.checksum[:12]} saved as {model_path(settings.data_dir, info.checksum)}",
        file=out,
    )
    print(
        f"stored the vectors of {report.stored} documents; {report.without_vector} indexed documents have none "
        "(the doc2vec ranker ranks them last)",
        file=out,
    )
    for label, ids in [("not in the index", report.not_in_index), ("no word known to the model", report.no_known_words)]:
        if ids:
            more = f" ... and {len(ids) - 20} more" if len(ids) > 20 else ""
            print(f"  {len(ids)} corpus documents {label}: {', '.join(ids[:20])}{more}", file=out)
    for failure in report.failures[:20]:
        print(f"  not stored {failure.doc_id}: {failure.reason}", file=out)
    print('use it with: reranker search "..." --ranker doc2vec', file=out)
    return EXIT_ERROR if report.failures else 0


def cmd_dev_cluster(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Run osmem-server in the foreground until Ctrl-C: the OpenSearch walkthrough without Docker."""
    try:
        from osmem_server import OsmemError, OsmemServer
    except ImportError:
        raise ConfigError('the test server is not installed: pip install -e ".[test]" (or pip install osmem-server)') from None
    _check_port_free(args.bind)
    try:
        server = OsmemServer.start(addr=args.bind, japanese=False)
    except OsmemError as exc:
        raise InputError(str(exc)) from None
    print(
        f"an in-memory OpenSearch-compatible server (osmem-server {server.version}) listens on {server.url}\n"
        f"  reranker --opensearch-url {server.url} index corpus.jsonl\n"
        f"  OPENSEARCH_URL={server.url} reranker serve\n"
        "Everything it holds is lost when it stops (Ctrl-C). It is a test server: no kNN, its BM25 is not Lucene's.",
        file=out, flush=True,
    )
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def cmd_rankers(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    for name in ranker_names():
        print(name, file=out)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.datasets import Dataset, load_qrels, load_queries
    from reranker.evaluation import evaluate
    from reranker.reports import evaluation_table

    sample = Path(str(resources.files("reranker").joinpath("sample")))
    engine = _engine(settings, "demo")
    try:
        report = _index(engine, sample / "corpus.jsonl", settings, rebuild=False, progress=True)
        print(
            f"Sample corpus: {report.total_documents} CL-SciSumm papers (CC BY 4.0), "
            f"word vectors {engine.vectors.info.name} (d={engine.vectors.dim}), K={settings.k} topics each "
            f"({report.indexed} indexed now, {report.unchanged} already there).\n",
            file=out,
        )
        queries = load_queries(sample / "queries.jsonl")
        qrels = load_qrels(sample / "qrels.tsv")
        default = settings.service.default_ranker
        for query_id, text in queries[: args.queries]:
            _demo_query(engine, query_id, text, qrels.get(query_id, {}), args.size, default, out)
        dataset = Dataset("sample", sample / "corpus.jsonl", tuple(queries), qrels)
        rankers = list(dict.fromkeys(["bm25", "hidden_topics", "hidden_topics_corrected", default]))
        result = evaluate(engine, dataset, rankers, window=settings.window)
    finally:
        engine.store.close()
    print(f"All {result.queries} sample queries, BM25 top {result.window} reranked:", file=out)
    print(evaluation_table(result), file=out)
    print(
        f"\nThe default ranker, {default} (weight {settings.fusion_weight}), reorders the BM25 window by "
        "hidden topics after removing the direction all word vectors share (hidden_topics_corrected), "
        "fused with BM25. The paper's formula (hidden_topics) on the same vectors is mostly that "
        "shared direction; five sample queries are too few to tell rankers apart (README, 'Measured results').",
        file=out,
    )
    print(
        "Next: `reranker evaluate DATASET_DIR` on a judged collection, or "
        "`reranker index CORPUS.jsonl` then `reranker search \"...\" --explain`.",
        file=out,
    )
    return 0


def _demo_query(
    engine: "Engine", query_id: str, text: str, relevant: dict[str, int], size: int, ranker: str, out: TextIO
) -> None:
    bm25 = engine.search(text, "bm25", size=size)
    topics = engine.search(text, ranker, size=size, explain=True)
    preview = textwrap.shorten(text, 150, placeholder=" ...")
    print(f"Query {query_id}: {preview}", file=out)
    print(f"  {'BM25 order':<34}  {ranker + ' order':<34}(* = cites the summarised paper)", file=out)
    for left, right in zip(bm25.hits, topics.hits):
        mark_l = "*" if left.doc_id in relevant else " "
        mark_r = "*" if right.doc_id in relevant else " "
        move = right.bm25_rank - right.rank
        arrow = f"up {move}" if move > 0 else (f"down {-move}" if move < 0 else "")
        print(
            f"  {left.rank}. {mark_l}{left.doc_id:<12} bm25 {left.bm25_score:6.2f}    "
            f"{right.rank}. {mark_r}{right.doc_id:<12} score {right.score:.4f} {arrow}",
            file=out,
        )
    if topics.hits:
        top = topics.hits[0]
        print(f"  Why {top.doc_id} is first: its topic score {top.ranker_score:.4f} is the sum of these topic contributions:", file=out)
        for line in _explanation_lines(top, topics=3):
            print("    " + line, file=out)
    print("", file=out)


def cmd_config(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.config import ENVIRONMENT

    cluster = settings.opensearch_store
    source = args.config or (Path(os.environ["RERANKER_CONFIG"]) if os.environ.get("RERANKER_CONFIG") else None)
    print(f"store: {'OpenSearch at ' + cluster.display_hosts if cluster else 'embedded, in ' + str(settings.data_dir / 'index')}", file=out)
    print(f"config file: {source or '(none)'}; the environment overrides it\n", file=out)
    width = max(len(name) for name in ENVIRONMENT)
    for name, value in settings.effective().items():
        print(f"  {name:<{width}}  {value}", file=out)
    print("\nWhat each one means:", file=out)
    for name, meaning in ENVIRONMENT.items():
        print(f"  {name:<{width}}  {meaning}", file=out)
    return 0


def _check_port_free(bind: str) -> None:
    """InputError when nothing can listen on `bind` (gunicorn would retry for 5 s and
    print a dozen lines before giving up)."""
    import socket

    host, _, port = bind.rpartition(":")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            probe.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        raise InputError(f"cannot listen on {bind}: {exc.strerror or exc} (is another server running there? choose another with --bind)") from None


def cmd_serve(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.embeddings import load_vectors
    from reranker.errors import StoreUnavailableError
    from reranker.pipeline import vectors_spec
    from reranker.rankers import get_ranker
    from reranker.service.server import serve
    from reranker.store import open_store

    get_ranker(settings.service.default_ranker)  # a typo in RERANKER_DEFAULT_RANKER fails here
    _check_port_free(settings.service.bind)

    # Once, in the master: a first run converts the vectors here, and a bad vectors
    # setting fails now instead of in every worker. Workers then only memory-map them.
    store = open_store(settings)
    try:
        spec = vectors_spec(settings, store)
    except StoreUnavailableError as exc:
        # The workers read the index's vectors when the cluster answers; /readyz says until then.
        log.warning("cannot read which vectors the index was built with yet: %s", exc)
        spec = settings.vectors or DEFAULT_VECTORS
    finally:
        store.close()
    vectors = load_vectors(spec, settings.data_dir / "vectors")
    cluster = settings.opensearch_store
    where = f"OpenSearch at {cluster.display_hosts} (alias {cluster.alias})" if cluster else f"the embedded store in {settings.data_dir / 'index'}"
    service = settings.service
    print(
        f"serving {where} with {vectors.info.name} on http://{service.bind} "
        f"({service.workers} workers x {service.threads} threads); API: http://{service.bind}/openapi.json",
        file=out,
        flush=True,
    )
    serve(settings)
    return 0


def _cluster_store(settings: Settings) -> Any:
    from reranker.store.opensearch import OpenSearchStore

    cluster = settings.opensearch_store
    if cluster is None:
        raise ConfigError("this command needs OpenSearch: set OPENSEARCH_URL or --opensearch-url")
    return OpenSearchStore(cluster)


def cmd_templates(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.store.templates import load_templates

    if args.action == "show":
        templates = load_templates()
        alias = settings.opensearch.alias
        name, body = templates.index_template_for(alias)
        shown = {"component_templates": templates.components, "index_template": {name: body}}
        json.dump(shown, out, indent=2)
        out.write("\n")
        return 0
    store = _cluster_store(settings)
    try:
        names = store.install_templates()
    finally:
        store.close()
    print(f"installed {', '.join(names)} on {store.config.display_hosts} (indices {store.alias}-v*)", file=out)
    return 0


def cmd_indices(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    store = _cluster_store(settings)
    try:
        if args.action == "use":
            result = store.use(args.name)
            print(f"alias {store.alias} now points at {result.current}", file=out)
        elif args.action == "delete":
            store.delete_index(args.name)
            print(f"deleted {args.name}", file=out)
        else:
            versions = store.versions()
            if not versions:
                print(f"no indices for alias {store.alias} on {store.config.display_hosts}", file=out)
            for v in versions:
                built = f"{v.info.embedding.name} d={v.info.embedding.dim} K={v.info.k} {v.topic_dtype}" if v.info else "not built by reranker"
                mark = "*" if v.aliased else " "
                print(f"{mark} {v.name:<28} {v.state:<9} {v.documents:>9} docs  {built}", file=out)
    finally:
        store.close()
    return 0


def cmd_ab(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Experiments straight from the event store (no HTTP, so no admin key: whoever can
    run this on the server can already read the store)."""
    from reranker.store.events import open_event_store

    store = open_event_store(settings)
    try:
        return _ab(args, store, out)
    except (InputError, UnknownRankerError) as exc:  # a bad name or value given on the command line
        raise ConfigError(str(exc)) from None
    finally:
        store.close()


def _ab(args: argparse.Namespace, store: "EventStore", out: TextIO) -> int:
    from reranker import experiments as ex

    if args.action == "create":
        rankers = [name.strip() for name in args.rankers.split(",") if name.strip()]
        experiment = ex.create(store, ex.new_experiment(args.id, rankers, method=args.method, traffic=args.traffic, min_queries=args.min_queries))
        print(f"experiment {experiment.id} running: {' vs '.join(experiment.rankers)}, {experiment.method}, {experiment.traffic:.0%} of searches", file=out)
    elif args.action == "set":
        if args.traffic is None and args.status is None:
            raise ConfigError("nothing to change: give --traffic and/or --status")
        experiment = ex.update(store, args.id, traffic=args.traffic, status=args.status)
        print(f"experiment {experiment.id} {experiment.status}, {experiment.traffic:.0%} of searches (running services see it within {ex.RUNNING_TTL_SECONDS:g} s)", file=out)
    elif args.action == "report":
        experiment = ex.find(store, args.id)
        found = ex.report(store, experiment)
        if args.json:
            print(json.dumps({"experiment": experiment.to_json(), "report": found.to_json()}, indent=2), file=out)
        else:
            o = found.outcome
            a, b = experiment.rankers
            print(f"experiment {experiment.id} ({experiment.status}): {a} vs {b}, {experiment.method}, {experiment.traffic:.0%} of searches", file=out)
            print(f"  queries {o.queries}, with clicks {o.queries_with_clicks}, clicks {found.click_events} (on {o.clicks} distinct hits)", file=out)
            print(f"  wins: {a} {o.wins_a}, {b} {o.wins_b}, ties {o.ties}", file=out)
            print(f"  {o.message}", file=out)
    else:
        listed = store.experiments()
        if not listed:
            print("no experiments yet: reranker ab create ID --rankers A,B", file=out)
        width = max((len(e.id) for e in listed), default=0)
        for e in listed:
            print(f"{e.id:<{width}}  {e.status:<8} {e.rankers[0]} vs {e.rankers[1]}  {e.method:<10} traffic {e.traffic:.0%}  since {e.created}", file=out)
    return 0


_COMMANDS = {
    "ab": cmd_ab,
    "demo": cmd_demo,
    "index": cmd_index,
    "search": cmd_search,
    "evaluate": cmd_evaluate,
    "compare": cmd_compare,
    "train": cmd_train,
    "rankers": cmd_rankers,
    "dev-cluster": cmd_dev_cluster,
    "config": cmd_config,
    "templates": cmd_templates,
    "indices": cmd_indices,
    "serve": cmd_serve,
}


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
