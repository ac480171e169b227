"""What the commands share: argument types, building the engine, indexing a file, reports and output paths."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, TextIO

from reranker.config import DEFAULT_FUSION_WEIGHT, DEFAULT_K, DEFAULT_WINDOW, Settings
from reranker.errors import ConfigError, IndexMismatchError, InputError
from reranker.text import counted
from reranker.types import MAX_FILTER_VALUE_CHARS, Filter

if TYPE_CHECKING:
    from reranker.embeddings import Progress, WordVectors
    from reranker.indexing import DuplicatePolicy, IndexReport
    from reranker.pipeline import Engine
    from reranker.store.opensearch import OpenSearchStore



log = logging.getLogger("reranker")

EXIT_ERROR = 1

EXIT_USAGE = 2

# `evaluate --baseline-run`: a ranker got significantly worse (distinct from errors, for CI).
EXIT_REGRESSION = 3

# Skipped corpus lines `index` and `train doc2vec` name (all of them with -v).
SHOWN_SKIPPED_LINES = 20

class CommandParser(argparse.ArgumentParser):
    """argparse, refusing a command line in one line on stderr (exit 2) that names the
    (sub)command whose line it is, e.g. `reranker search: error: unrecognized argument
    --explian (did you mean --explain?; see reranker search --help)`; `--help` is argparse's.

    Each parser refuses what it does not know itself (there is no "known args" leniency):
    argparse hands a subcommand's leftovers up to `reranker`, whose usage and name then
    stood for a mistake in `search`'s options. And an unknown option is refused before
    anything else is read: argparse goes on without it, so in `index --wokers 2 c.jsonl`
    the `2` was taken as the corpus, and in `search --explian` the query was said to be
    missing."""

    # A command's parser: the options `reranker` itself takes, which go before the command.
    outer_options: frozenset[str] = frozenset()

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads, one behaviour
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        unknown = self._unknown_option(given)
        if unknown is not None:
            name = unknown.split("=", 1)[0]
            if name in self.outer_options:  # `reranker search x --data-dir D`
                self.refuse(f"{name} is an option of reranker itself: give it before the command")
            options = [option for action in self._actions for option in action.option_strings]
            self.refuse(f"unrecognized argument {name}", _closest(name, options))
        parsed, extras = super().parse_known_args(given, namespace)
        if extras:  # values no argument takes: `search one two`
            self.refuse(f"unrecognized argument{'s' if len(extras) > 1 else ''} {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.refuse(message)

    def refuse(self, problem: str, suggestion: str | None = None) -> NoReturn:
        hint = f"did you mean {suggestion}?; " if suggestion else ""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {problem} ({hint}see {self.prog} --help)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's "invalid choice: 'serach' (choose from 'demo', 'search', ... 17 names)".
        if action.nargs == argparse.PARSER and value not in (action.choices or {}):
            near = _closest(value, list(action.choices or {}))
            self.refuse(f"unknown command {value!r}", repr(near) if near else None)
        super()._check_value(action, value)

    def _unknown_option(self, given: list[str]) -> str | None:
        """The first of `given` that reads as an option this parser does not have (as argparse
        tells options from values: a negative number, a lone `-` or a string with a space is
        a value; a prefix of one option is that option), up to `--` or the command's place.

        None when help is asked for (argparse prints it), and for a word right after an
        option that takes a value (`--weights -0.1,0.3`: argparse's "expected one argument"
        names the option, which is what is wrong)."""
        if any(word in ("-h", "--help") for word in given[: given.index("--") if "--" in given else None]):
            return None
        by_option = {option: action for action in self._actions for option in action.option_strings}
        options = list(by_option)
        has_commands = any(action.nargs == argparse.PARSER for action in self._actions)
        takes_value = False
        for word in given:
            after_option, takes_value = takes_value, False
            if word == "--":
                return None
            if len(word) < 2 or word[0] not in self.prefix_chars or _NEGATIVE_NUMBER.match(word):
                if has_commands and not after_option:
                    return None  # the command's place: a mistake in it is the command's to say
                continue
            if after_option:
                continue
            name = word.split("=", 1)[0]
            known = [option for option in options if option == name or option.startswith(name)] or (
                [word[:2]] if word[:2] in options else []
            )
            if known:
                # Its value is the next word unless given with it (`--size=3`, `-k5`).
                attached = "=" in word or (not word.startswith("--") and len(word) > 2)
                takes_value = not attached and by_option[known[0]].nargs != 0
                continue
            if " " not in word:
                return word
        return None


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # as argparse reads them


def _closest(given: str, names: list[str]) -> str | None:
    near = difflib.get_close_matches(given, names, n=1, cutoff=0.6)
    return near[0] if near else None


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value

def _number(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {raw!r}") from None

def fraction(raw: str) -> float:
    value = _number(raw)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value

def traffic_share(raw: str) -> float:
    """`ab --traffic`: refused here, named as the option, not by the store's check in the
    words of the HTTP body ("[traffic] is the share ...")."""
    value = _number(raw)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {value}")
    return value

def persistence(raw: str) -> float:
    # One message for every value out of range: fraction's "[0, 1]" for 1.5 named 1 as allowed.
    value = _number(raw)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value}")
    return value

_FILTER = re.compile(r"^\s*([A-Za-z0-9_.@-]+)\s*(>=|<=|>|<|=)\s*(.*?)\s*$", re.S)

_FILTER_OPS = {"=": "eq", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}

def parse_filter(raw: str) -> Filter:
    """"year>=2010" -> Filter("year", "gte", 2010); values are JSON when they parse."""
    match = _FILTER.match(raw)
    if match and match.group(3) == "":
        # Refused, not read as the empty string: `title=$TITLE` with the variable unset
        # would otherwise filter on it in silence.
        if match.group(2) != "=":
            raise argparse.ArgumentTypeError(f"{raw!r} has no value: a range filter needs a number or a date")
        raise argparse.ArgumentTypeError(f"{raw!r} has no value (to match the empty string: --filter '{match.group(1)}=\"\"')")
    if not match:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE or FIELD>=VALUE (also >, <=, <), got {raw!r}")
    name, op, value = match.groups()
    try:
        # NaN and Infinity stay text, as POST /search reads them (JSON has neither).
        parsed = json.loads(value, parse_constant=lambda constant: constant)
    except ValueError:
        parsed = value
    if not isinstance(parsed, (str, int, float, bool)):
        parsed = value
    if op != "=" and (isinstance(parsed, bool) or not isinstance(parsed, (int, float, str))):
        raise argparse.ArgumentTypeError(f"a range filter needs a number or a date, got {value!r}")
    if isinstance(parsed, str) and len(parsed) > MAX_FILTER_VALUE_CHARS:  # as POST /search refuses it
        raise argparse.ArgumentTypeError(f"must be at most {MAX_FILTER_VALUE_CHARS} characters, got {len(parsed)}")
    return Filter(name, _FILTER_OPS[op], parsed)

def add_dataset_files(parser: argparse.ArgumentParser, *, queries: bool = True) -> None:
    """Which files of a dataset folder hold its queries and its judgments."""
    if queries:
        parser.add_argument("--queries-file", default="queries.jsonl", help="query file inside the folder, or an absolute path")
    parser.add_argument(
        "--qrels-file", metavar="PATH",
        help="judgments inside the folder, or an absolute path (default: qrels.tsv, else BEIR's qrels/test.tsv; e.g. qrels/dev.tsv)",
    )


def add_k_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--k", type=positive_int, help=f"topics per document (default {DEFAULT_K}, env RERANKER_K)")


def add_ranking_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window", type=positive_int, help=f"BM25 candidates to rerank (default {DEFAULT_WINDOW}, env RERANKER_WINDOW)"
    )
    parser.add_argument(
        "--fusion-weight",
        type=fraction,
        help=f"weight of the ranker in the min-max, z-score and maxp fusions with BM25, e.g. wmd+bm25:zscore or the default ranker (default RERANKER_FUSION_WEIGHT, {DEFAULT_FUSION_WEIGHT:g})",
    )

def open_engine(
    settings: Settings,
    store_name: str | Callable[["WordVectors"], str] | None = None,
    *,
    require_documents: bool = False,
    create: bool = True,
    show_bar: bool = True,
) -> "Engine":
    """The engine a command works with; `require_documents`: an empty index is an error,
    before any vectors are converted; `create=False` (implied by it): no index is an error,
    and nothing is made. A conversion says so (see `conversion_progress`)."""
    from reranker.pipeline import build_engine

    return build_engine(
        settings, store_name, require_documents=require_documents, create=create,
        progress=lambda what: conversion_progress(what, show_bar=show_bar),
    )

def conversion_progress(what: str, *, show_bar: bool = True) -> "Progress":
    """What a command shows while word vectors are converted (once per machine): one line
    on stderr always, and a bar while stderr is a terminal."""
    from tqdm import tqdm

    print(f"reranker: {what}", file=sys.stderr, flush=True)
    bar: Progress = tqdm(
        total=100, unit="%", disable=not (show_bar and sys.stderr.isatty()), leave=False,
        bar_format="{desc}{percentage:3.0f}%|{bar}| {elapsed}",
    )
    return bar

def index_file(
    engine: "Engine", corpus: Path, settings: Settings, *, rebuild: bool, progress: bool, on_duplicate: "DuplicatePolicy" = "last"
) -> "IndexReport":
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
        on_duplicate=on_duplicate,
    )

def with_trained_vectors(
    settings: Settings, corpus: Path, *, rebuild: bool, progress: bool, out: TextIO, store_name: str | None = None
) -> Settings:
    """`settings` using word2vec trained on `corpus` (reused when trained before).

    With an index that holds documents built with other vectors, refuses before training
    (which takes minutes) unless `rebuild`: new vectors mean a new index.
    """
    from reranker.embeddings import Word2VecParams, trained_vectors
    from reranker.indexing import check_corpus, train_corpus_vectors, trained_vectors_path
    from reranker.store import open_store
    from reranker.text import load_stopwords

    if settings.vectors:
        raise ConfigError("--train-vectors trains the index's own word vectors: drop --vectors (and RERANKER_VECTORS)")
    check_corpus(corpus)
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
                f"the index holds {counted(documents, 'document')} built with word vectors {built.embedding.name!r}; "
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
            f"word vectors: trained CBOW word2vec (d={params.dim}, {params.epochs} epochs) on "
            f"{counted(trained.documents, 'document')} of {corpus} in {time.perf_counter() - started:.1f} s; saved {trained.path}",
            file=out,
        )
    return dataclasses.replace(settings, vectors=trained.info.source)

def skipped_lines(skipped: Any, shown: int, *, every_skip: bool, label: str = "") -> list[str]:
    """The skipped corpus lines as `index` and `evaluate` report them, `file:line: reason`
    each (`Skipped.__str__`), in file order: the first `shown` (every one with
    `every_skip`), then how many more."""
    listed = skipped if every_skip else skipped[:shown]
    lines = [f"  {label}{item}" for item in listed]
    if len(skipped) > len(listed):
        lines.append(f"  ... and {len(skipped) - len(listed)} more (run with -v to list them all)")
    return lines

def print_report(report: Any, out: TextIO, *, every_skip: bool = False) -> None:
    # A resumed rebuild's documents that its corpus no longer holds (`Store.drop_absent`).
    dropped = f"; dropped {counted(report.dropped, 'document')} of the interrupted rebuild that the corpus no longer holds"
    print(
        f"indexed {report.indexed}, unchanged {report.unchanged}, skipped {len(report.skipped)} "
        f"in {report.seconds:.1f} s; the index holds {counted(report.total_documents, 'document')}"
        f"{f' ({report.replaced} replaced an earlier version)' if report.replaced else ''}"
        f"{dropped if report.dropped else ''}",
        file=out,
    )
    pairs = report.duplicates if every_skip else report.duplicates[:20]
    for earlier, later in pairs:
        print(f"  duplicate id: {later} replaced {earlier} (the later line wins; --on-duplicate error refuses)", file=out)
    if len(report.duplicates) > len(pairs):
        print(f"  ... and {counted(len(report.duplicates) - len(pairs), 'more duplicate id')} (run with -v to list them all)", file=out)
    published = report.published
    if published is not None and published.swapped:
        kept = f"; kept {', '.join(published.previous)} (reranker indices delete NAME)" if published.previous else ""
        print(f"alias now points at {published.current}{kept}", file=out)
    for line in skipped_lines(report.skipped, SHOWN_SKIPPED_LINES, every_skip=every_skip, label="skipped "):
        print(line, file=out)

def ranker_list(raw: str) -> list[str]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    if not names:
        raise ConfigError("--rankers needs at least one ranker name")
    return names

def check_output(option: str, path: Path | None, *, folder: bool = False) -> None:
    """ConfigError (exit 2) now, before minutes of indexing or training, when `option`'s
    output `path` (a file, or with `folder` a folder, new or not) could not be written at
    the end: a folder where a file is wanted (or a file where a folder is), a parent path
    that runs through a file, a place the user may not write in. Missing parent folders
    are fine: `write_output` makes them when the run has succeeded. Nothing the user sees
    is created or changed now: an existing file is opened for append (not truncated), a
    new entry is tried as a scratch file in the nearest folder that exists, removed at
    once. None: the option was not given."""
    if path is None:
        return
    where = f"{option} {path}"
    if folder and path.exists() and not path.is_dir():
        raise ConfigError(f"{where}: is a file; expected a folder")
    if not folder and path.is_dir():
        raise ConfigError(f"{where}: is a folder; expected a file")
    nearest = path.parent
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not path.exists() and not nearest.is_dir():
        raise ConfigError(f"{where}: {nearest} is not a folder")
    if path.exists() and not path.is_dir() and not path.is_file():
        # A device or a FIFO (/dev/stdout): opening a FIFO would wait for its reader.
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{where}: cannot write: Permission denied")
        return
    try:
        if path.is_file():
            with path.open("a", encoding="utf-8"):
                pass
        else:
            # The permission bits are not the whole answer (root may "write" /proc, a mount may be
            # read-only): only creating an entry tells, in the folder the output will go into.
            with tempfile.NamedTemporaryFile(dir=path if path.is_dir() else nearest, prefix=".reranker-check-"):
                pass
    except OSError as exc:
        raise ConfigError(f"{where}: cannot write there: {exc.strerror or exc}") from None

def write_output(path: Path, write: Callable[[Path], object]) -> None:
    """`write(path)`, its missing parent folders made first; OSError becomes InputError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", str(path)) from None

def given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among `names` the user gave (the others keep their model's default)."""
    return {name: value for name in names if (value := getattr(args, name)) is not None}

def check_port_free(bind: str) -> None:
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

def cluster_store(settings: Settings) -> "OpenSearchStore":
    from reranker.store.opensearch import OpenSearchStore

    cluster = settings.opensearch_store
    if cluster is None:
        raise ConfigError("this command needs OpenSearch: set OPENSEARCH_URL or --opensearch-url")
    return OpenSearchStore(cluster)
