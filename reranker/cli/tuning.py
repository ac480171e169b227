"""The tune command: a fusion's weight and normalisation chosen on judged data (reranker.tuning)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from reranker.cli.common import add_dataset_files, add_k_option, add_ranking_options, check_output, positive_int
from reranker.cli.evaluating import offline_run
from reranker.config import Settings, config_file_path, write_config_values
from reranker.errors import ConfigError

# The grid and the folds `tune` tries unless told otherwise. Here, not in reranker.tuning
# (which takes them as arguments): building the parser must not import the tuning and
# evaluation code, which every command, `search` included, would then pay at start-up.
DEFAULT_WEIGHTS = tuple(round(0.1 * step, 1) for step in range(11))
DEFAULT_FOLDS = 5
DEFAULT_SEED = 7


def _weights(raw: str) -> list[float]:
    try:
        weights = [float(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers in [0, 1], got {raw!r}") from None
    if not weights or any(not 0.0 <= weight <= 1.0 for weight in weights):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers in [0, 1], got {raw!r}")
    return weights


def add_parsers(commands: Any) -> None:
    from reranker.ranker_names import METHODS

    tune = commands.add_parser(
        "tune",
        help="choose a fusion's weight and normalisation on a judged dataset, with k-fold cross-validation by query",
    )
    tune.add_argument("dataset", type=Path, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv (or a BEIR folder)")
    tune.add_argument("--ranker", help="the fused ranker to tune (default: the default ranker in force, RERANKER_DEFAULT_RANKER)")
    tune.add_argument("--folds", type=positive_int, default=DEFAULT_FOLDS, help=f"folds of queries (default {DEFAULT_FOLDS})")
    tune.add_argument(
        "--weights", type=_weights, default=list(DEFAULT_WEIGHTS),
        help="comma-separated weights of the ranker to try (default 0,0.1,...,1)",
    )
    tune.add_argument(
        "--normalisations", default=",".join(METHODS),
        help=f"comma-separated normalisations to try, of {', '.join(METHODS)} (default: all; maxp is min-max with the best passage's BM25)",
    )
    tune.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"seed of the folds' random split (default {DEFAULT_SEED})")
    add_dataset_files(tune)
    add_k_option(tune)
    add_ranking_options(tune)
    tune.add_argument(
        "--write-config", nargs="?", type=Path, const=True, metavar="FILE",
        help="store the setting chosen on all queries (RERANKER_DEFAULT_RANKER, RERANKER_FUSION_WEIGHT) in the TOML "
        "config file FILE (default: the one in force, --config or RERANKER_CONFIG)",
    )
    tune.add_argument("--json", action="store_true", help="print one JSON object (per-query held-out scores included)")
    tune.add_argument("--rebuild", action="store_true", help="re-index the dataset's cached index")
    tune.add_argument(
        "--train-vectors", action="store_true",
        help="use CBOW word2vec trained on the dataset's own corpus (trained once, then reused) instead of --vectors",
    )
    tune.add_argument("--no-progress", action="store_true", help="no progress bars")


def _config_target(args: argparse.Namespace) -> Path | None:
    """Where --write-config writes, checked before any work; None without --write-config."""
    if args.write_config is None:
        return None
    target = config_file_path(args.config) if args.write_config is True else args.write_config
    if target is None:
        raise ConfigError("--write-config without FILE writes the config file in force, and there is none: give --write-config FILE")
    check_output("--write-config", Path(target))
    return Path(target)


def cmd_tune(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from reranker.datasets import load_dataset
    from reranker.rankers import get_ranker
    from reranker.tuning import Setting, cross_validate, fusion_to_tune, grid, grid_scores, tune_report

    name = (args.ranker or settings.service.default_ranker).strip()
    fusion = fusion_to_tune(get_ranker(name))  # a typo or a lone ranker fails before minutes of indexing
    bases = [base.name for base in fusion.bases]
    default = Setting(fusion.method, None if fusion.method == "rrf" else settings.fusion_weight)
    settings_grid = grid([m.strip() for m in args.normalisations.split(",") if m.strip()], args.weights, default)
    target = _config_target(args)
    dataset = load_dataset(args.dataset, args.queries_file, qrels_file=args.qrels_file)
    if not 2 <= args.folds <= len(dataset.queries):
        raise ConfigError(f"--folds must lie between 2 and the {len(dataset.queries)} judged queries, got {args.folds}")
    if not args.no_progress:
        print(
            f"reranker: scoring {len(settings_grid)} settings of {name} on {len(dataset.queries)} queries "
            "(each window is retrieved and scored once)",
            file=sys.stderr, flush=True,
        )
    scores = offline_run(
        args, settings, dataset, [fusion],
        lambda engine, tick, config: grid_scores(engine, dataset, fusion, settings_grid, window=settings.window, on_query=tick),
    )
    result = cross_validate(
        scores, dataset=dataset.name, ranker=name, bases=bases, window=settings.window, folds=args.folds, seed=args.seed
    )
    written = []
    if target is not None:
        values: dict[str, str | float] = {"RERANKER_DEFAULT_RANKER": result.chosen.ranker_name(bases)}
        if result.chosen.weight is not None:
            values["RERANKER_FUSION_WEIGHT"] = float(result.chosen.weight)
        overridden = write_config_values(target, values)
        written.append(f"config: {target} ({', '.join(f'{key} = {value}' for key, value in values.items())}); "
                       f"serve and search read it with --config {target} or RERANKER_CONFIG={target}")
        written += [f"warning: {key} is set in the environment, which overrides the config file" for key in overridden]
    if args.json:
        json.dump(result.to_json(), out, indent=2)
        out.write("\n")
        for line in written:
            print(f"reranker: {line}", file=sys.stderr)
    else:
        print(tune_report(result), file=out)
        for line in written:
            print(line, file=out)
    return 0


COMMANDS = {"tune": cmd_tune}
