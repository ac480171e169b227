"""The `reranker` command: demo, index, search, evaluate, compare, train, rankers, serve, ab, ...

`main(argv) -> int` runs in-process (the tests call it directly). Errors the user can
fix print one line, `reranker: error: ...`, and exit non-zero (a command line the parser
refuses: `reranker COMMAND: error: ...`, SystemExit(2), see `CommandParser`); beside them only
a closed pipe and Ctrl-C are caught: anything else is a bug, and its traceback is shown.

    common.py      argument types, the engine, indexing a file, reports, output paths
    indexing.py    index, train, templates, indices
    searching.py   demo, search, similar, rankers, config
    evaluating.py  evaluate, evaluate-similar, compare, ab
    judging.py     ab judgments: an experiment's clicks written as a judged data set
    tuning.py      tune
    serving.py     serve, dev-cluster
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path
from typing import Sequence, TextIO

from reranker import __version__
from reranker.cli import evaluating, indexing, searching, serving, tuning
from reranker.cli.common import EXIT_ERROR, EXIT_USAGE, CommandParser
from reranker.config import ENVIRONMENT, Settings, config_file_path, read_config_file
from reranker.errors import ConfigError, IndexOutdatedError, RerankerError, UnknownRankerError

_GROUPS = (searching, indexing, evaluating, tuning, serving)
_COMMANDS = {name: handler for group in _GROUPS for name, handler in group.COMMANDS.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="reranker",
        description="Rerank BM25 candidates for summary-style queries by hidden topics.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--config", type=Path, help="TOML settings file (env RERANKER_CONFIG; see `reranker config`)")
    parser.add_argument("--data-dir", type=Path, help="where the embedded store lives (env RERANKER_DATA_DIR)")
    parser.add_argument("--opensearch-url", help="use the OpenSearch store at this URL (env OPENSEARCH_URL)")
    parser.add_argument(
        "--vectors",
        help="word vectors: glove-6b-50d, or [word2vec:|word2vec-bin:|glove:|fasttext:|kv:]PATH "
        "(default: the index's own, glove-6b-50d for a new one; env RERANKER_VECTORS)",
    )
    parser.add_argument("--stopwords", type=Path, help="stop-word file, one word per line (env RERANKER_STOPWORDS)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in _GROUPS:
        group.add_parsers(commands)
    global_options = frozenset(option for action in parser._actions for option in action.option_strings) - {"-h", "--help"}
    pending = list(commands.choices.values())
    while pending:  # `ab create`, `indices list`: commands of commands too
        command = pending.pop()
        command.outer_options = global_options - {
            option for action in command._actions for option in action.option_strings
        }
        pending.extend(
            sub for action in command._actions if isinstance(action.choices, dict) and action.nargs == argparse.PARSER
            for sub in action.choices.values()
        )
    return parser


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
        from reranker.threads import native_threads

        with native_threads(settings.blas_threads):
            return int(handler(args, settings, out))
    except BrokenPipeError:  # `reranker evaluate --json | head`: the reader has what it wanted
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(getattr(args, "exit_code", 0))  # the command's own verdict, decided before printing
    except RerankerError as exc:
        print(f"reranker: error: {exc}", file=sys.stderr)
        # 2, as argparse's own refusals: a bad option or setting (a ranker name included).
        return EXIT_USAGE if isinstance(exc, (ConfigError, IndexOutdatedError, UnknownRankerError)) else EXIT_ERROR
    except KeyboardInterrupt:
        kept = getattr(args, "after_an_interruption", None) or _AFTER_AN_INTERRUPTION.get(args.command)
        print(f"reranker: interrupted{f' ({kept})' if kept else ''}", file=sys.stderr)
        return 130

# What Ctrl-C leaves, for the commands that write (a command whose store makes the
# difference sets `args.after_an_interruption`).
_AFTER_AN_INTERRUPTION = {
    "index": "already indexed batches are kept",
}


# The commands that read the service's own settings (config.SERVICE_ONLY): any other
# runs whatever they say.
_SERVING_COMMANDS = frozenset({"serve", "config"})


# Each option that stands for a variable, by its argparse dest. The option is given to
# Settings as that variable, so it overrides the environment and the config file before
# either is read: a bad RERANKER_WINDOW is not refused when --window replaces it.
_OPTION_VARIABLES = {
    "data_dir": "RERANKER_DATA_DIR",
    "opensearch_url": "OPENSEARCH_URL",
    "vectors": "RERANKER_VECTORS",
    "stopwords": "RERANKER_STOPWORDS",
    "k": "RERANKER_K",
    "window": "RERANKER_WINDOW",
    "fusion_weight": "RERANKER_FUSION_WEIGHT",
    "workers": "RERANKER_INDEX_WORKERS",
    "bind": "RERANKER_BIND",
    "server_workers": "RERANKER_WORKERS",
    "threads": "RERANKER_THREADS",
    "timeout": "RERANKER_TIMEOUT",
}


def _settings(args: argparse.Namespace) -> Settings:
    env = dict(os.environ)
    from_options: set[str] = set()
    for option, name in _OPTION_VARIABLES.items():
        value = getattr(args, option, None)
        if value is not None:
            env[name] = str(value)
            from_options.add(name)
    try:
        return Settings.from_env(env, config_file=args.config, serving=args.command in _SERVING_COMMANDS)
    except ConfigError as exc:
        # "RERANKER_WINDOW must be an integer, got 'fifty'" sent the user to an environment
        # that does not set it: say where the value came from, as gunicorn's start does.
        named = [name for name in ENVIRONMENT if re.search(rf"\b{name}\b", str(exc))]
        source = config_file_path(args.config, env)
        from_file = [] if source is None else [name for name in read_config_file(source) if not env.get(name)]
        if any(name in from_file for name in named):
            raise ConfigError(f"{exc} (from the config file {source})") from None
        # A value the command line gave (--window over RERANKER_MAX_WINDOW) is said as it stands.
        if named and not from_options & set(named) and any(env.get(name) for name in named):
            raise ConfigError(f"{exc} (from the environment)") from None
        raise
