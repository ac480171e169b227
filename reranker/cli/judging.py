"""`reranker ab judgments EXPERIMENT --out DIR`: an experiment's clicks as a judged data set.

Reads every result list the experiment showed and the clicks on them from the event store,
judges (query, document) pairs with the COEC click model (`reranker.judgments`), and writes
a folder `evaluate` and `compare` read: queries.jsonl, qrels.tsv (graded 0..3),
corpus.jsonl, and judgments.json (the model, the click-through rate of each rank, every
pair's impressions, clicks, expected clicks and COEC).

corpus.jsonl is the corpus file the index was built from, copied (`--corpus FILE`: then
`evaluate` ranks over the same collection the experiment searched), or else the documents
the experiment showed, read from the index (BM25's statistics over that subset differ from
the index's, and only shown documents can be retrieved: the docs say so).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, TextIO

from reranker.cli.common import EXIT_ERROR, check_output, positive_int
from reranker.config import Settings
from reranker.errors import ConfigError, InputError
from reranker.text import counted

if TYPE_CHECKING:
    from reranker.judgments import Impression, Judged
    from reranker.store.events import EventStore


def _thresholds(raw: str) -> tuple[float, ...]:
    from reranker.judgments import check_thresholds

    try:
        return check_thresholds([float(part) for part in raw.split(",") if part.strip()])
    except (ValueError, InputError) as exc:
        raise argparse.ArgumentTypeError(str(exc) if isinstance(exc, InputError) else f"expected numbers separated by commas, e.g. 0.5,1,2; got {raw!r}") from None


def add_parser(ab_action: Any) -> None:
    from reranker.judgments import DEFAULT_MIN_IMPRESSIONS, DEFAULT_THRESHOLDS

    judged = ab_action.add_parser(
        "judgments",
        help="a judged data set (queries.jsonl, graded qrels.tsv) from an experiment's shown queries and clicks (COEC click model)",
    )
    judged.add_argument("id", help="the experiment (running, stopped, or deleted with its events kept)")
    judged.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty folder for the data set")
    judged.add_argument(
        "--min-impressions", type=positive_int, default=DEFAULT_MIN_IMPRESSIONS,
        help=f"judge a (query, document) pair only when it was shown this many times (default {DEFAULT_MIN_IMPRESSIONS})",
    )
    judged.add_argument(
        "--grades", type=_thresholds, default=DEFAULT_THRESHOLDS, metavar="T1,T2,...",
        help="COEC thresholds of grades 1, 2, ... (default " + ",".join(f"{t:g}" for t in DEFAULT_THRESHOLDS) + ": grade 3 at twice the expected clicks)",
    )
    judged.add_argument(
        "--corpus", type=Path, metavar="FILE",
        help="the corpus file the index was built from, copied as corpus.jsonl (default: the shown documents, read from the index)",
    )
    judged.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    judged.add_argument("--no-progress", action="store_true", help="no progress bar")


def _out_folder(path: Path) -> None:
    """ConfigError unless `path` can be a new or empty folder (a judged set is never mixed
    with another); checked before the events are read, created only when writing."""
    check_output("--out", path, folder=True)
    if path.is_dir() and any(path.iterdir()):
        raise ConfigError(f"--out {path}: holds files already; give a new or empty folder")


def _read(store: "EventStore", experiment_id: str, total: int, progress: bool) -> list["Impression"]:
    from tqdm import tqdm

    from reranker.judgments import Impression

    impressions = []
    with tqdm(total=total, desc="shown queries", unit=" lists", disable=not progress, leave=False, file=sys.stderr) as bar:
        for shown, clicked in store.impressions(experiment_id):
            impressions.append(Impression(shown.user_query, shown.shown, clicked, first_rank=shown.offset + 1))
            bar.update(1)
    return impressions


def run(args: argparse.Namespace, settings: Settings, store: "EventStore", out: TextIO) -> int:
    from reranker import experiments as ex
    from reranker.judgments import CLICK_MODEL, judge

    experiment = store.experiment(args.id)
    held = store.recorded(args.id)
    if experiment is None and not held.queries:
        ex.find(store, args.id)  # NotFoundError, naming the experiments there are
    if args.corpus is not None and not args.corpus.is_file():
        raise ConfigError(f"--corpus {args.corpus}: no such file")
    _out_folder(args.out)
    if not held.queries:
        print(f"reranker: error: experiment {args.id!r} has shown no interleaved result list yet: nothing to judge", file=sys.stderr)
        return EXIT_ERROR
    impressions = _read(store, args.id, held.queries, progress=not args.no_progress and sys.stderr.isatty())
    judged = judge(impressions, min_impressions=args.min_impressions, thresholds=args.grades)
    if not judged.judgments:
        print(
            f"reranker: error: no (query, document) pair of experiment {args.id!r} was shown {args.min_impressions} times yet "
            f"(the most any was shown: {judged.most_impressions}): let it run longer, or lower --min-impressions",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the folder: {exc.strerror or exc}", str(args.out)) from None
    corpus_note = _write_corpus(args, settings, judged, impressions)
    _write(args.out, judged, experiment_id=args.id, rankers=list(experiment.rankers) if experiment else None)
    summary = judged.summary()
    if args.json:
        json.dump({"experiment": args.id, "out": str(args.out), **summary, "corpus": corpus_note}, out, indent=2)
        out.write("\n")
        return 0
    grades = "/".join(str(count) for count in judged.grade_counts())
    labels = "/".join(str(value) for value in range(len(judged.thresholds) + 1))
    print(f"experiment {args.id}: {counted(judged.lists, 'result list')} shown, {judged.lists_with_clicks} with clicks; click model {CLICK_MODEL} "
          f"(expected clicks per rank from {'the one list' if judged.lists == 1 else f'all {judged.lists} lists'})", file=out)
    print(f"  judged {judged.judged_queries} of {counted(judged.queries, 'query', plural='queries')} ({judged.queries_with_relevant} with a document graded above 0) "
          f"and {len(judged.judgments)} of {counted(judged.pairs, '(query, document) pair')}, {counted(summary['documents_judged'], 'distinct document')}; "
          f"grades {labels}: {grades}", file=out)
    print(f"  dropped for fewer than {counted(judged.min_impressions, 'impression')}: {counted(judged.dropped_pairs, 'pair')}, "
          f"{counted(judged.dropped_queries, 'query', plural='queries')} left with no judged pair", file=out)
    if judged.unwritable_pairs:
        print(f"  left out {counted(judged.unwritable_pairs, 'pair')} whose document id holds a control character "
              "(a tab or a line break would split the rows of qrels.tsv)", file=out)
    print(f"  corpus.jsonl: {corpus_note}", file=out)
    print(f"  wrote {args.out}/queries.jsonl, qrels.tsv, corpus.jsonl, judgments.json", file=out)
    if experiment is not None:
        print(f"  evaluate its rankers: reranker evaluate {args.out} --rankers {','.join(experiment.rankers)}", file=out)
    return 0


def _write(folder: Path, judged: "Judged", *, experiment_id: str, rankers: list[str] | None) -> None:
    try:
        with (folder / "queries.jsonl").open("w", encoding="utf-8") as handle:
            for query_id, text in sorted(judged.query_texts.items()):
                handle.write(json.dumps({"id": query_id, "text": text}, ensure_ascii=False) + "\n")
        with (folder / "qrels.tsv").open("w", encoding="utf-8") as handle:
            for judgment in judged.judgments:
                handle.write(f"{judgment.query_id}\t{judgment.doc_id}\t{judgment.grade}\n")
        report = {
            "experiment": experiment_id,
            "rankers": rankers,
            **judged.summary(),
            "judgments": [j.to_json() for j in judged.judgments],
        }
        (folder / "judgments.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the data set: {exc.strerror or exc}", str(folder)) from None


def _write_corpus(args: argparse.Namespace, settings: Settings, judged: "Judged", impressions: Iterable["Impression"]) -> str:
    """Write DIR/corpus.jsonl; returns one line saying what it holds."""
    target = args.out / "corpus.jsonl"
    judged_ids = {j.doc_id for j in judged.judgments}
    if args.corpus is not None:
        from reranker.indexing import Skipped, read_corpus

        ids = {item.id for _, item, _ in read_corpus(args.corpus) if not isinstance(item, Skipped)}
        try:
            shutil.copyfile(args.corpus, target)
        except OSError as exc:
            raise InputError(f"cannot copy the corpus: {exc.strerror or exc}", str(args.corpus)) from None
        missing = judged_ids - ids
        note = f"a copy of {args.corpus} ({counted(len(ids), 'document')})"
        if missing:
            note += f"; {counted(len(missing), 'judged document')} {'is' if len(missing) == 1 else 'are'} not in it: is it the file the index was built from?"
        return note
    from reranker.store import open_store

    shown_ids = sorted({doc_id for impression in impressions for doc_id in impression.shown})
    documents = open_store(settings, create=False)  # reads the shown documents: makes no index
    try:
        found = documents.documents(shown_ids)
    finally:
        documents.close()
    try:
        with target.open("w", encoding="utf-8") as handle:
            for doc_id in shown_ids:
                if doc_id in found:
                    doc = found[doc_id]
                    handle.write(json.dumps({**doc.fields, "id": doc.id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", str(target)) from None
    gone = len(shown_ids) - len(found)
    return (
        f"the {counted(len(found), 'document')} the experiment showed, read from the index (evaluate ranks over these only; "
        "give --corpus FILE to rank over the whole collection)" + (f"; {counted(gone, 'shown document')} {'is' if gone == 1 else 'are'} no longer in the index" if gone else "")
    )
