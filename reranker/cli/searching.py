"""Commands that search and show: demo, search, similar, rankers, config."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from reranker.cli.common import (
    add_ranking_options,
    index_file,
    open_engine,
    parse_filter,
    positive_int,
)
from reranker.config import Settings
from reranker.errors import ConfigError, IndexNotFoundError, InputError
from reranker.rankers import get_ranker, ranker_names, unweighted_reason, weighted_ranker_names
from reranker.text import counted
from reranker.types import MAX_FILTERS

if TYPE_CHECKING:
    from reranker.pipeline import Engine
    from reranker.types import Explanation, RankedDoc


def add_parsers(commands: Any) -> None:
    """The command-line parsers of demo, search, similar, rankers, config."""
    demo = commands.add_parser("demo", help="index the bundled sample corpus and answer its sample queries")
    demo.add_argument("--queries", type=positive_int, default=3, help="how many sample queries to show (default 3)")
    demo.add_argument("--size", type=positive_int, default=5, help="hits shown per ranker (default 5)")

    search = commands.add_parser("search", help="BM25 top-N for a summary, reranked")
    search.add_argument("query", help="the summary text, or - to read it from standard input")
    add_ranking_options(search)
    search.add_argument("--ranker", help="ranker name (see `reranker rankers`; default RERANKER_DEFAULT_RANKER)")
    search.add_argument("--size", type=positive_int, default=10, help="hits to show (default 10)")
    search.add_argument("--explain", action="store_true", help="per-topic contributions and words")
    search.add_argument(
        "--filter", action="append", default=[], type=parse_filter, metavar="FIELD=VALUE",
        help="only candidates whose FIELD equals VALUE (also FIELD>=N, >, <=, <); repeatable",
    )
    search.add_argument("--json", action="store_true", help="print JSON")

    similar = commands.add_parser("similar", help="papers like a stored one (as GET /documents/<id>/similar)")
    similar.add_argument("doc_id", help="a stored document's id")
    add_ranking_options(similar)
    similar.add_argument("--ranker", help="ranker name (see `reranker rankers`; default RERANKER_DEFAULT_RANKER)")
    similar.add_argument("--size", type=positive_int, default=10, help="papers to show (default 10)")
    similar.add_argument("--json", action="store_true", help="print JSON (the answer of GET /documents/<id>/similar)")

    commands.add_parser("rankers", help="list the registered rankers")
    commands.add_parser("config", help="print the effective settings (secrets hidden)")


def cmd_demo(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.datasets import Dataset, load_qrels, load_queries
    from reranker.evaluation import evaluate
    from reranker.reports import evaluation_table

    sample = Path(str(resources.files("reranker").joinpath("sample")))
    engine = open_engine(settings, "demo")
    try:
        report = index_file(engine, sample / "corpus.jsonl", settings, rebuild=False, progress=True)
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
        if args.queries > len(queries):
            print(f"(--queries {args.queries}: the sample has {len(queries)}, all shown above.)\n", file=out)
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
        "shared direction; five sample queries are too few to tell rankers apart (docs/rankers-and-evaluation.md).",
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
    print(f"  {'BM25 order':<34}  {ranker + ' order':<34}  (* = cites the summarised paper)", file=out)
    for left, right in zip(bm25.hits, topics.hits):
        mark_l = "*" if left.doc_id in relevant else " "
        mark_r = "*" if right.doc_id in relevant else " "
        move = right.bm25_rank - right.rank
        arrow = f"up {move}" if move > 0 else (f"down {-move}" if move < 0 else "")
        print(
            f"  {left.rank}. {mark_l}{_one_line(left.doc_id):<12} bm25 {left.bm25_score:6.2f}    "
            f"{right.rank}. {mark_r}{_one_line(right.doc_id):<12} score {right.score:.4f} {arrow}",
            file=out,
        )
    why = topics.hits[0].explanation if topics.hits else None
    if why is not None:
        print(f"  Why {_one_line(topics.hits[0].doc_id)} is first:", file=out)
        for line in explanation_lines(why, topics.status):
            print("    " + line, file=out)
    print("", file=out)

def _read_query(raw: str) -> str:
    if raw == "-":
        if sys.stdin is None:  # started with standard input closed (`<&-`, some daemons)
            raise InputError("no standard input to read the query from (`-` reads it)")
        # Bytes, decoded here: the text layer's decoding follows the locale (strict in one,
        # escapes in another), and the query is UTF-8 as every file the package reads.
        buffer = getattr(sys.stdin, "buffer", None)
        raw = buffer.read().decode("utf-8", "surrogateescape") if buffer is not None else sys.stdin.read()
        # The line break a file or `echo` ends with is no part of the query: POST /search
        # echoes its query as sent, and the same text there has none. Only that one goes.
        raw = raw.removesuffix("\n").removesuffix("\r")
    try:
        # Python hands argv's undecodable bytes over as lone surrogates: searched, they
        # would match nothing, and --json would write JSON no strict reader accepts.
        text = raw.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the query is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except UnicodeEncodeError:
        raise InputError("the query is not UTF-8 text") from None
    if not text.strip():
        raise InputError("the query is empty")
    return text

def _chosen_ranker(args: argparse.Namespace, settings: Settings) -> str:
    """The ranker `--ranker` names (or the default), refused as the service refuses it: a
    misspelt name, or a --fusion-weight for a ranker without one, is a usage error (exit 2)
    before the index is read."""
    ranker = str(args.ranker or settings.service.default_ranker)
    get_ranker(ranker)
    if args.fusion_weight is not None and ranker not in weighted_ranker_names():
        raise ConfigError(f"--fusion-weight: {unweighted_reason(ranker, '--fusion-weight')}")
    return ranker

def _check_size(args: argparse.Namespace, settings: Settings) -> None:
    """--size within the window's limit, as /search checks `size`: beyond it the window
    would be cut to the limit and fewer hits shown than asked, without a word."""
    if args.size > settings.service.max_window:
        raise ConfigError(f"--size: must be <= {settings.service.max_window} (RERANKER_MAX_WINDOW), got {args.size}")

def cmd_search(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    query = _read_query(args.query)
    ranker = _chosen_ranker(args, settings)
    _check_size(args, settings)
    if len(args.filter) > MAX_FILTERS:  # as POST /search refuses them (the stores nest each one)
        raise InputError(f"at most {MAX_FILTERS} --filter options, got {len(args.filter)}")
    engine = open_engine(settings, require_documents=True)
    try:
        result = engine.search(
            query,
            ranker,
            # As /search: the top window reranked, a --size beyond it in BM25 order after it.
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
    if result.reason is not None:
        body["reason"] = result.reason
    return {
        **body,
        "query": result.query,
        "ranker": result.ranker,
        "window": result.window,
        "candidates": result.candidates,
        "hits": [hit.to_json(explain=explain) for hit in result.hits],
        "query_words": list(result.query_words),
        "oov_words": list(result.oov_words),
        "timings_ms": result.timings_ms,
    }

def _print_result(result: Any, out: TextIO, *, explain: bool) -> None:
    from reranker.pipeline import explained_ranker

    note = ""
    if result.status in ("partial", "query_out_of_vocabulary"):
        note = f"  [{result.status}: {result.reason}]"
    elif result.status != "ok":
        note = f"  [{result.status}: BM25 order kept]"
    past = sum(hit.score is None for hit in result.hits)  # past the window, in BM25 order
    after = f", then {counted(past, 'hit')} past it in BM25 order" if past else ""
    print(
        f"{result.ranker}: {len(result.hits) - past} of {_candidates(result.candidates, result.window)}{after}, "
        f"{counted(len(result.query_words), 'query word')} in vocabulary, {len(result.oov_words)} not{note}",
        file=out,
    )
    if explain and explained_ranker(get_ranker(result.ranker)) is None:
        # Said once, as the web page says it above a column: else --explain prints nothing,
        # and nothing says why.
        print(f"{result.ranker} does not score by topics: no explanations (the rankers that do: {_topic_rankers()})", file=out)
    for hit in result.hits:
        move = hit.bm25_rank - hit.rank
        arrow = f"+{move}" if move > 0 else (str(move) if move < 0 else "=")
        print(
            f"{hit.rank:>3}. {_one_line(hit.doc_id):<24} {_scores(hit)}  bm25 {hit.bm25_score:7.2f} "
            f"(rank {hit.bm25_rank}, {arrow}){_title(hit.title)}",
            file=out,
        )
        if explain and hit.explanation is not None:
            for line in explanation_lines(hit.explanation, result.status):
                print("       " + line, file=out)

def _scores(hit: "RankedDoc") -> str:
    """A hit line's score column: the score, and a fusion's base ranker's own score beside
    the fused one; for a hit past the reranked window, which keeps its BM25 place, none."""
    if hit.score is None:
        return "not scored: past the reranked window"
    own = f" ({hit.ranker_score:.4f})" if hit.ranker_score is not None and hit.ranker_score != hit.score else ""
    return f"score {hit.score:.4f}{own}"


def _candidates(candidates: int, window: int) -> str:
    """What the hits were ranked from, as /search's `candidates` counts it: the BM25 top
    `window`, or, when fewer documents matched, how many did and the window that held them
    all ("the BM25 top 100" on a 25-document index claimed 75 candidates that were not there)."""
    if candidates >= window:
        return f"the BM25 top {window}"
    if candidates == 0:
        return "the 0 BM25 candidates (no document matched)"
    return f"the {counted(candidates, 'BM25 candidate')} (the window of {window} held all that matched)"


def _topic_rankers() -> str:
    """The rankers that score by topics, in a few words: those on their own, and the
    fusions with one of them (`reranker rankers` marks each)."""
    alone = [name for name in ranker_names() if "+" not in name and get_ranker(name).variant is not None]
    return f"{', '.join(alone)} and every fusion with one of them, as `reranker rankers` marks them"


def _title(title: str) -> str:
    """A hit line's last column: the title's start, or nothing (no trailing spaces) without one."""
    return f"  {_one_line(title[:50])}" if title else ""

def _one_line(text: str) -> str:
    """`text` with a line break or tab (a title cut from a PDF; an id in a cluster someone
    else indexed, which this product's readers would have refused) shown escaped, as `repr`
    would, so that each hit stays one line."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)

def explanation_lines(explanation: "Explanation", status: str = "ok") -> list[str]:
    """An explanation as text: the parts of the score (a fusion's), then the topic
    ranker's score as the sum of the topics shown (in the order every explanation shows
    them) and one line for the rest, so that the lines add up to what they explain.

    For a query no word of which has a vector (`status`), the topics add nothing: the topic
    ranker's own score and its topics are not listed, as the web page does not list them."""
    lines = []
    if len(explanation.parts) > 1:
        parts = " + ".join(f"{label} {value:.4f}" for label, value in explanation.parts)
        lines.append(f"score {explanation.score:.4f} = {parts} (topics: {explanation.topic_ranker}'s score, as the fusion scales it)")
    if status == "query_out_of_vocabulary":
        lines.append(
            "no word of the query has a word vector, so the hidden topics add nothing to this score: "
            f"{explanation.topic_ranker}'s own score and its topics are not used, and not listed"
        )
        return lines
    total = len(explanation.topics) + explanation.rest_topics
    shown = f"the {len(explanation.topics)} largest, then the rest" if explanation.rest_topics else "largest first"
    topic_set = "corrected" if explanation.topic_set == "corrected" else "uncorrected"  # as the web page names them
    lines.append(f"{explanation.topic_ranker} score {explanation.topic_score:.5f} = the sum of its {total} {topic_set} topics' contributions, {shown}:")
    for topic in explanation.topics:
        relevance = f"(relevance {topic.relevance:.3f} - background {topic.background:.3f})" if topic.background else f"relevance {topic.relevance:.3f}"
        lines.append(
            f"  topic {topic.rank}: importance {topic.importance:.3f} x {relevance} "
            f"-> {topic.contribution:+.5f}; words: {', '.join(topic.topic_words)}; "
            f"query words: {', '.join(topic.query_words)}"
        )
    if explanation.rest_topics:
        lines.append(f"  the other {explanation.rest_topics} topics together -> {explanation.rest_contribution:+.5f}")
    return lines

def cmd_similar(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """Engine.similar, the code path of GET /documents/<id>/similar and `evaluate-similar`."""
    from reranker.pipeline import similar_answer

    ranker = _chosen_ranker(args, settings)
    _check_size(args, settings)
    engine = open_engine(settings, require_documents=True)
    try:
        found = engine.similar(args.doc_id, ranker, size=args.size, window=settings.window)
        answer = similar_answer(engine, args.doc_id, found.hits, ranker) if args.json else None
    finally:
        engine.store.close()
    if answer is not None:
        json.dump(answer, out, indent=2)
        out.write("\n")
        return 0
    hits = found.hits
    past = sum(hit.score is None for hit in hits)  # past the window, in BM25 order
    after = f", then {counted(past, 'paper')} past it in BM25 order" if past else ""
    print(
        f"{ranker}: {counted(len(hits) - past, 'paper')} like {_one_line(args.doc_id)} "
        f"of {_candidates(found.candidates, found.window)} for its distinctive words{after}",
        file=out,
    )
    for hit in hits:
        print(f"{hit.rank:>3}. {_one_line(hit.doc_id):<24} {_scores(hit)}  (BM25 rank {hit.bm25_rank}){_title(hit.title)}", file=out)
    return 0

def cmd_rankers(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """The list GET /rankers answers (`listed_rankers`), one ranker a line, its name first
    (so a script can read the first column), then what the route says of it: the
    default, whether it scores by topics, and whether it can run on this index."""
    from reranker.pipeline import listed_rankers

    default = settings.service.default_ranker
    engines: list[Engine] = []
    missing: list[IndexNotFoundError] = []

    def engine() -> "Engine":
        try:
            # Listing reads: without an index it makes none (an empty one would claim there is one).
            engines.append(open_engine(settings, create=False, show_bar=False))
        except IndexNotFoundError as exc:
            missing.append(exc)
            raise
        return engines[-1]

    try:
        listed = listed_rankers(engine)
    finally:
        for opened in engines:
            opened.store.close()
    width = max(len(entry["name"]) for entry in listed)
    for entry in listed:
        notes = ["the default (RERANKER_DEFAULT_RANKER)"] if entry["name"] == default else []
        notes.append("scores by topics" if entry["uses_topics"] else "does not score by topics")
        if not entry["available"]:
            notes.append(f"unavailable: {entry['reason']}")
        print(f"{entry['name']:<{width}}  {'; '.join(notes)}", file=out)
    if missing:
        # On stderr: the list stays one ranker a line for scripts.
        print(f"reranker: {missing[0]}; which rankers can run on it is known once there is one", file=sys.stderr)
    return 0

def cmd_config(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.config import ENVIRONMENT, config_file_path

    cluster = settings.opensearch_store
    source = config_file_path(args.config)  # the file Settings.from_env read, as it read it
    print(f"store: {'OpenSearch at ' + cluster.display_hosts if cluster else 'embedded, in ' + str(settings.data_dir / 'index')}", file=out)
    print(f"config file: {source or '(none)'}; the environment overrides it\n", file=out)
    width = max(len(name) for name in ENVIRONMENT)
    for name, value in settings.effective().items():
        print(f"  {name:<{width}}  {value}", file=out)
    print("\nWhat each one means:", file=out)
    for name, meaning in ENVIRONMENT.items():
        print(f"  {name:<{width}}  {meaning}", file=out)
    return 0


COMMANDS = {"demo": cmd_demo, "search": cmd_search, "similar": cmd_similar, "rankers": cmd_rankers, "config": cmd_config}
