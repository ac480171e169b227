"""Commands that build and manage indexes: index, train, templates, indices."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from reranker.cli.common import (
    EXIT_ERROR,
    SHOWN_SKIPPED_LINES,
    add_k_option,
    check_output,
    cluster_store,
    given,
    index_file,
    open_engine,
    positive_int,
    print_report,
    skipped_lines,
    with_trained_vectors,
)
from reranker.config import WORD2VEC_DIM, WORD2VEC_EPOCHS, Settings
from reranker.errors import ConfigError, IndexNotFoundError, InputError, RerankerError, StoreError
from reranker.text import counted, listed

if TYPE_CHECKING:
    from reranker.store import Store


log = logging.getLogger(__name__)

# `reranker index` suggests `reranker compact` from this size on, where merging the BM25
# index's segments shortens the search path measurably (bench/README.md, bench_passages.py
# --compact); smaller indexes have segments too (2-3 at CISI's 1,460 abstracts), to no effect.
COMPACT_HINT_DOCUMENTS = 10_000


def add_parsers(commands: Any) -> None:
    """The command-line parsers of index, train, templates, indices."""
    index = commands.add_parser("index", help="index a JSONL corpus ({id, title, text} per line)")
    index.add_argument("corpus", type=Path)
    add_k_option(index)
    index.add_argument(
        "--rebuild", action="store_true",
        help="build a new index (needed to change vectors or K); in OpenSearch the alias moves to it when done",
    )
    index.add_argument("--workers", type=positive_int, help="topic-extraction processes (env RERANKER_INDEX_WORKERS)")
    index.add_argument(
        "--train-vectors", action="store_true",
        help="train CBOW word2vec on CORPUS first (the paper's domain vectors) and build the index with them; "
        "later commands use them without --vectors",
    )
    index.add_argument(
        "--on-duplicate", choices=["last", "error"], default="last",
        help="a line whose id an earlier line of the corpus used: the later line wins and the pair is "
        "reported (last, the default), or the run stops there with exit 1 (error)",
    )
    index.add_argument(
        "--compact", action="store_true",
        help="then merge the BM25 index into one segment (reranker compact), for an index this run finishes writing",
    )
    index.add_argument("--no-progress", action="store_true", help="no progress bar")

    train = commands.add_parser(
        "train",
        help="train domain word vectors (word2vec), or a Doc2Vec model of the indexed corpus (doc2vec)",
    )
    train.add_argument("model", choices=["word2vec", "doc2vec"])
    train.add_argument("corpus", type=Path, help="JSONL corpus ({id, title, text} per line); for doc2vec, the indexed one")
    train.add_argument("--out", type=Path, help="word2vec: output file (gensim format; use it with --vectors); required")
    train.add_argument("--mode", choices=["dbow", "dm"], default="dbow", help="doc2vec: PV-DBOW (default) or PV-DM")
    train.add_argument("--dim", type=positive_int, help=f"vector size (default: word2vec {WORD2VEC_DIM}, doc2vec 100)")
    train.add_argument("--window", type=positive_int, help="context words each side (default 5)")
    train.add_argument("--min-count", type=positive_int, help="ignore rarer words (default 2)")
    train.add_argument("--epochs", type=positive_int, help=f"training passes (default: word2vec {WORD2VEC_EPOCHS}, doc2vec 20)")
    train.add_argument("--seed", type=int, default=1, help="doc2vec: seeds training and query inference (default 1)")
    train.add_argument(
        "--infer-epochs", type=positive_int, default=20,
        help="doc2vec: passes when inferring a query's vector (default 20; ~0.1 ms each for 100 words)",
    )
    train.add_argument(
        "--workers", type=positive_int, default=1,
        help="training threads (default 1: reproducible vectors; more is faster but not reproducible)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    compact = commands.add_parser(
        "compact",
        help="merge the BM25 index into one segment, for faster searches of an index no longer written "
        "(OpenSearch: the cluster's force merge)",
    )
    compact.add_argument("--no-progress", action="store_true", help="no progress bar")

    templates = commands.add_parser("templates", help="OpenSearch index templates (index_templates/)")
    templates_action = templates.add_subparsers(dest="action", required=True, metavar="ACTION")
    templates_action.add_parser("install", help="install the component and index templates on the cluster")
    templates_action.add_parser("show", help="print the templates as they would be installed")

    indices = commands.add_parser("indices", help="the OpenSearch index versions behind the alias")
    indices_action = indices.add_subparsers(dest="action", required=True, metavar="ACTION")
    indices_action.add_parser("list", help="versions, document counts, what they were built with")
    use = indices_action.add_parser("use", help="point the alias at another finished version (rollback)")
    use.add_argument("name")
    delete = indices_action.add_parser("delete", help="delete a version the alias does not point at")
    delete.add_argument("name")


def cmd_index(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    if args.train_vectors:
        settings = with_trained_vectors(settings, args.corpus, rebuild=args.rebuild, progress=not args.no_progress, out=out)
    engine = open_engine(settings, show_bar=not args.no_progress)
    try:
        report = index_file(
            engine, args.corpus, settings, rebuild=args.rebuild, progress=not args.no_progress, on_duplicate=args.on_duplicate
        )
        # Non-zero when a line did not make it in, so scripts notice; the rest is indexed.
        # Decided before printing, so `reranker index bad.jsonl | head -2` still exits 1.
        args.exit_code = EXIT_ERROR if report.skipped or report.duplicates else 0
        print_report(report, out, every_skip=args.verbose)
        if args.compact and report.indexed == 0 and engine.store.segments() == 1:
            # A scheduled `index --compact` over an unchanged corpus: minutes of rewriting
            # (at 50,000 papers) for the index it already has.
            print("the BM25 index is one segment already, and this run wrote nothing: nothing to compact", file=out)
        elif args.compact:
            # From here Ctrl-C interrupts the compaction: the run's documents are all in.
            args.after_an_interruption = f"every document is indexed; {_compaction_interrupted(settings)}"
            _compact(engine.store, args, out)
        elif report.total_documents >= COMPACT_HINT_DOCUMENTS and (segments := _segments_for_a_hint(engine.store)) > 1:
            print(
                f"the BM25 index is in {segments} segments, each searched on its own: once it is no longer "
                "written, `reranker compact` merges them into one, for faster searches (docs/cli.md#compacting)",
                file=out,
            )
    except BaseException:
        # The run's own error is the one to tell: closing after it (a full disk) may fail too.
        with contextlib.suppress(RerankerError):
            engine.store.close()
        raise
    engine.store.close()
    return int(args.exit_code)

def cmd_train(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from tqdm import tqdm

    from reranker.embeddings import Word2VecParams, train_word2vec
    from reranker.indexing import corpus_sentences
    from reranker.text import load_stopwords

    # An option of the other model's is refused, not ignored: `train doc2vec --out F` saved
    # nothing at F, and said so nowhere.
    if args.model == "doc2vec" and args.out is not None:
        raise ConfigError("--out is word2vec's (the vectors file); a Doc2Vec model is kept beside the index it was trained for, in DATA_DIR/doc2vec")
    if args.model == "word2vec":
        # Set to other than their defaults (which doc2vec's help states): the parser cannot
        # tell `--seed 1` from no --seed, nor does it matter.
        from reranker.doc2vec import Doc2VecParams

        defaults = Doc2VecParams()
        doc2vecs = (("--mode", args.mode, defaults.mode), ("--seed", args.seed, defaults.seed), ("--infer-epochs", args.infer_epochs, defaults.infer_epochs))
        changed = [f"{option} {value}" for option, value, default in doc2vecs if value != default]
        if changed:
            raise ConfigError(f"{', '.join(changed)}: doc2vec's option{'s' if len(changed) > 1 else ''}, not word2vec's")
    if args.model == "doc2vec":
        return _train_doc2vec(args, settings, out)
    if args.out is None:
        raise ConfigError("reranker train word2vec needs --out FILE (where to save the vectors)")
    check_output("--out", args.out)  # before minutes of training, not after
    sentences, documents, skipped = corpus_sentences(args.corpus, load_stopwords(settings.stopwords_file))
    params = Word2VecParams(**given(args, "dim", "window", "min_count", "epochs"))
    show = not args.no_progress and sys.stderr.isatty()
    with tqdm(total=params.epochs, unit="epoch", desc="training word2vec", disable=not show, leave=False) as bar:
        try:
            info = train_word2vec(sentences, args.out, params, workers=args.workers, on_epoch=lambda _: bar.update(1))
        except OSError as exc:  # only the saving touches files
            raise InputError(f"cannot write the vectors: {exc.strerror or exc}", str(args.out)) from None
    print(
        f"trained CBOW word2vec (d={info.dim}, {params.epochs} epochs) on {counted(documents, 'document')} "
        f"({counted(len(sentences), 'line')} with words) of {args.corpus}"
        f"{'; skipped ' + counted(len(skipped), 'corpus line') if skipped else ''}; saved {args.out}",
        file=out,
    )
    for line in skipped_lines(skipped, SHOWN_SKIPPED_LINES, every_skip=args.verbose, label="skipped "):
        print(line, file=out)
    print(f"use it with: reranker --vectors {args.out} ... (or train and index in one step: reranker index CORPUS --train-vectors)", file=out)
    return 0

def _train_doc2vec(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """`reranker train doc2vec CORPUS`: train on the indexed corpus, store the vectors in
    the current index and record the model there (see reranker.doc2vec)."""
    from tqdm import tqdm

    from reranker.doc2vec import Doc2VecParams, model_path, train_for_store
    from reranker.indexing import Skipped, check_corpus, read_corpus
    from reranker.store import open_store
    from reranker.text import load_stopwords

    params = Doc2VecParams(
        mode=args.mode, seed=args.seed, infer_epochs=args.infer_epochs, workers=args.workers, **given(args, "dim", "epochs", "min_count", "window"),
    )
    params.validate()
    check_corpus(args.corpus)
    skipped: list[Skipped] = []
    documents = []
    for _, item, _ in read_corpus(args.corpus):
        if isinstance(item, Skipped):
            skipped.append(item)
        else:
            documents.append(item)
    store = open_store(settings, create=False)  # trains on an index: makes none
    show = not args.no_progress and sys.stderr.isatty()
    try:
        _check_corpus_is_indexed(store, args.corpus, [document.id for document in documents])
        with tqdm(total=params.epochs, unit="epoch", desc="training doc2vec", disable=not show, leave=False) as bar:
            _, report = train_for_store(
                store, documents, params, settings.data_dir, load_stopwords(settings.stopwords_file), progress=bar
            )
    finally:
        store.close()
    info = report.info
    print(
        f"trained PV-{info.mode.upper()} Doc2Vec (dim={info.dim}, {info.epochs} epochs) on {counted(report.documents, 'document')} "
        f"of {args.corpus}{' (' + counted(len(skipped), 'line') + ' skipped)' if skipped else ''} in {report.seconds:.1f} s; "
        f"model {info.checksum[:12]} saved as {model_path(settings.data_dir, info.checksum)}",
        file=out,
    )
    # Which lines, as `index` names them: the count alone left the user to find them.
    for line in skipped_lines(skipped, SHOWN_SKIPPED_LINES, every_skip=args.verbose, label="skipped "):
        print(line, file=out)
    print(
        f"stored the vectors of {counted(report.stored, 'document')}; "
        f"{counted(report.without_vector, 'indexed document')} {'has' if report.without_vector == 1 else 'have'} none "
        "(the doc2vec ranker ranks them last)",
        file=out,
    )
    for label, ids in [("not in the index", report.not_in_index), ("with no word known to the model", report.no_known_words)]:
        if ids:
            print(f"  {counted(len(ids), 'corpus document')} {label}: {listed(ids, 20)}", file=out)
    for failure in report.failures[:20]:
        print(f"  not stored {failure.doc_id}: {failure.reason}", file=out)
    print('use it with: reranker search "..." --ranker doc2vec', file=out)
    return EXIT_ERROR if report.failures else 0

def _check_corpus_is_indexed(store: Store, corpus: Path, doc_ids: list[str]) -> None:
    """Refuse a corpus none of whose documents the index holds (another data set's file,
    say): training on it stored no vector, yet recorded its model as the index's, so the
    vectors of the model trained before counted as missing and `doc2vec` ranked every
    document last, all after exit 0. Chunked: one found is enough, and is usually in the first.
    A corpus with no document at all is train's own error."""
    if not doc_ids:
        return
    for start in range(0, len(doc_ids), 1000):
        if store.content_hashes(doc_ids[start : start + 1000]):
            return
    raise InputError(
        f"none of its {counted(len(doc_ids), 'document')} is in the index ({counted(store.count(), 'document')}): "
        "train Doc2Vec on the corpus that was indexed; the index's model is unchanged",
        str(corpus),
    )

def cmd_compact(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """`reranker compact`: the store's first-stage index in one segment (Store.compact)."""
    from reranker.store import open_store

    args.after_an_interruption = _compaction_interrupted(settings)
    try:
        store = open_store(settings, create=False)
    except IndexNotFoundError as exc:
        raise IndexNotFoundError(f"nothing to compact: {exc}") from None
    try:
        _compact(store, args, out)
    finally:
        store.close()
    return 0

def _segments_for_a_hint(store: Store) -> int:
    """The store's segments, or 0 where it cannot tell (a cluster user without the right to
    list them): a suggestion must not fail a run that indexed everything."""
    try:
        return store.segments()
    except StoreError as exc:
        log.info("not suggesting `reranker compact`: %s", exc)
        return 0

def _compaction_interrupted(settings: Settings) -> str:
    """What Ctrl-C during a compaction leaves."""
    # Once the cluster has the request, it merges whether or not anyone waits.
    return "the cluster finishes the force merge it began" if settings.opensearch_store is not None else "the index is as it was"

def _compact(store: Store, args: argparse.Namespace, out: TextIO) -> None:
    from tqdm import tqdm

    started = time.perf_counter()
    show = not args.no_progress and sys.stderr.isatty()
    with tqdm(total=store.count(), unit="doc", desc="compacting", disable=not show, leave=False) as bar:
        result = store.compact(progress=bar.update)
    print(
        f"compacted the BM25 index of {counted(result.documents, 'document', grouped=True)} in {time.perf_counter() - started:.0f} s: "
        f"{counted(result.segments_before, 'segment')} before, {result.segments_after} now",
        file=out,
    )

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
    store = cluster_store(settings)
    try:
        names = store.install_templates()
    finally:
        store.close()
    print(f"installed {', '.join(names)} on {store.config.display_hosts} (indices {store.alias}-v*)", file=out)
    return 0

def cmd_indices(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    store = cluster_store(settings)
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
                print(f"{mark} {v.name:<28} {v.state:<10} {v.documents:>9} docs  {built}", file=out)
    finally:
        store.close()
    return 0


COMMANDS = {"index": cmd_index, "train": cmd_train, "compact": cmd_compact, "templates": cmd_templates, "indices": cmd_indices}
