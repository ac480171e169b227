"""Benchmark of the numeric core (reranker/topics.py) against the authors' released code.

Measures, on synthetic random word vectors (numpy default_rng, fixed seed), on one BLAS
thread unless --threads says otherwise:

1. Topic extraction: documents per second of `extract_topics(X, 15)` with one row per
   word occurrence (n = 1,000 / 2,000 / 5,000 words, d = 50 / 300), next to a per-document
   transcription of the authors' released code (a full `numpy.linalg.svd` with
   `full_matrices=True`), and the speed ratio. Also, clearly labelled, the indexing path:
   distinct words with `counts=` for a Zipf-like 2,000-word document over 600 words.
2. Rerank scoring: p50 / p99 latency of one batched `score(Q, topics (N,15,d), imp (N,15))`
   call for N = 100 / 1,000 candidates and m = 20 / 100 query words at d = 300, next to the
   authors' per-pair, per-topic, per-word Python loops, and the ratio. Before reporting, it
   asserts that `score(..., variant="code")` equals the loops' scores to 1e-5, and that the
   extracted topics give the reference's importances and scores.
3. The issue's targets, each with PASS/FAIL.
4. The common-direction correction (bench/bench_correction.py, run from here too): the
   corrected scorer against the paper's (target within 1.2x) and the corrected extraction
   with backgrounds against today's (target within 1.5x), ratios in the same run.

Ratios measured in the same run are the headline: the machine is shared and noisy.

Run:  python bench/bench_core.py            (about a minute)
      python bench/bench_core.py --quick    (smoke run, about 20 s)
      python bench/bench_core.py --json results.json --threads 1 --seed 2018
"""

from __future__ import annotations

import argparse
import os
import sys

_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _threads_from_argv(argv: list[str]) -> int | None:
    """--threads, read before numpy is imported (BLAS reads these variables at load time)."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=None)
    known, _ = early.parse_known_args(argv)
    return None if known.threads is None else max(1, int(known.threads))


if __name__ == "__main__":
    _threads = _threads_from_argv(sys.argv[1:])
    if _threads is None:  # the product's own (RERANKER_BLAS_THREADS, default 1)
        from benchlib import product_threads

        product_threads()
    else:
        for _variable in _BLAS_THREAD_VARIABLES:
            os.environ[_variable] = str(_threads)

# The imports below come after the BLAS thread count is set: BLAS reads it when it loads.
import functools
import gc
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from benchlib import machine, require, table

from reranker.topics import Variant, extract_topics, score

Matrix = npt.NDArray[np.float32]
Vector = npt.NDArray[np.float32]
Seconds = npt.NDArray[np.float64]
Input = TypeVar("Input")

K = 15  # topics per document, as in the issue
SCORE_D = 300
SCORE_TOLERANCE = 1e-5  # batched "code" variant vs the per-pair loops
IMPORTANCE_TOLERANCE = 1e-4  # our importances vs the float32 full SVD's
EXTRACTION_CASES = ((1_000, 50), (1_000, 300), (2_000, 300), (5_000, 50), (5_000, 300))
SCORING_CASES = ((100, 20), (100, 100), (1_000, 20), (1_000, 100))
ZIPF_WORDS, ZIPF_VOCABULARY = 2_000, 600


@dataclass(frozen=True)
class Budget:
    """How long to measure: ours until both minimums are met, the reference a fixed count."""

    warmup: int
    min_repeats: int
    min_seconds: float
    max_repeats: int
    reference_repeats: int
    reference_repeats_slow: int  # for the multi-second 5,000-word full SVDs
    reference_cosines: int  # per timed reference call; sets the candidate subset
    exhaustive_checks: bool  # all candidates, and the 5,000-word documents, are checked


DEFAULT_BUDGET = Budget(
    warmup=5,
    min_repeats=300,
    min_seconds=1.0,
    max_repeats=20_000,
    reference_repeats=5,
    reference_repeats_slow=3,
    reference_cosines=30_000,
    exhaustive_checks=True,
)
QUICK_BUDGET = Budget(
    warmup=2,
    min_repeats=100,
    min_seconds=0.15,
    max_repeats=5_000,
    reference_repeats=2,
    reference_repeats_slow=1,
    reference_cosines=10_000,
    exhaustive_checks=False,
)


@dataclass(frozen=True)
class ExtractionResult:
    label: str
    n: int
    d: int
    ours_ms_p50: float
    ours_docs_per_s: float
    ours_repeats: int
    reference_ms_p50: float
    reference_docs_per_s: float
    reference_repeats: int
    ratio: float  # reference time / our time
    checked: bool
    max_importance_error: float  # ours vs the full SVD's, on the first document
    max_score_error: float  # score(variant="code") with our topics vs with the SVD's


@dataclass(frozen=True)
class ScoringResult:
    variant: str
    n_candidates: int
    m: int
    d: int
    ours_ms_p50: float
    ours_ms_p99: float
    ours_repeats: int
    reference_ms_p50: float  # for all N candidates (scaled from the timed subset)
    reference_timed_candidates: int
    reference_repeats: int
    ratio: float  # reference p50 / our p50
    tidied_reference_ms_p50: float  # the loops with one norm product per cosine
    tidied_ratio: float
    checked_candidates: int
    max_abs_error: float


@dataclass(frozen=True)
class TargetResult:
    name: str
    measured: float
    unit: str
    bound: float
    at_least: bool

    @property
    def passed(self) -> bool:
        return self.measured >= self.bound if self.at_least else self.measured <= self.bound


# --- the authors' released code, transcribed from its description ------------------------


def reference_topics(word_vectors: Matrix, k: int) -> tuple[Matrix, Vector]:
    """One document as the authors' code handles it: a full SVD of the (n, d) word matrix
    (its n x n U is built and discarded), topics = first min(k, n) rows of V^T,
    weights = s[:k]^2 / sum(s[:k]^2). Zero singular values are kept as topics."""
    count = min(k, len(word_vectors))
    _, singular_values, v_transposed = np.linalg.svd(word_vectors, full_matrices=True)
    squared = np.square(singular_values[:count])
    return v_transposed[:count].copy(), squared / np.sum(squared)


Cosine = Callable[[Vector, Vector], float | np.floating[Any]]


def _reference_cosine(first: Vector, second: Vector) -> float | np.floating[Any]:
    """As released: the norm product is evaluated for the zero test, then again for the
    division, and the numpy scalar is returned as is."""
    if np.linalg.norm(first) * np.linalg.norm(second) == 0:
        return 0.0
    cosine: np.floating[Any] = np.dot(first, second) / (
        np.linalg.norm(first) * np.linalg.norm(second)
    )
    return cosine


def _cosine_norms_once(first: Vector, second: Vector) -> float | np.floating[Any]:
    """The same loop body tidied to one norm product: a stricter baseline, reported too."""
    norms = np.linalg.norm(first) * np.linalg.norm(second)
    if norms == 0:
        return 0.0
    cosine: np.floating[Any] = np.dot(first, second) / norms
    return cosine


def reference_scores(
    query_words: Sequence[Vector],
    documents: Sequence[tuple[Matrix, Vector]],
    cosine: Cosine = _reference_cosine,
) -> list[float]:
    """The authors' scoring, pair by pair: for every document, every topic and every query
    word the squared cosine, averaged over the words; per-topic scores dotted with the
    weights; then the square root. One Python-level iteration per (document, topic, word)."""
    scores = []
    for topics, weights in documents:
        per_topic = []
        for topic in topics:
            squared = [np.square(cosine(topic, word)) for word in query_words]
            per_topic.append(np.mean(squared))
        scores.append(float(np.sqrt(np.dot(per_topic, weights))))
    return scores


# --- timing -------------------------------------------------------------------------------


def time_calls(
    call: Callable[[], object],
    *,
    warmup: int,
    min_repeats: int,
    min_seconds: float = 0.0,
    max_repeats: int = 1_000_000,
) -> Seconds:
    """Per-call wall times (time.perf_counter) after `warmup` untimed calls, with the
    garbage collector paused as timeit does."""
    for _ in range(warmup):
        call()
    samples: list[float] = []
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter()
        while len(samples) < max_repeats and (
            len(samples) < min_repeats or time.perf_counter() - started < min_seconds
        ):
            before = time.perf_counter()
            call()
            samples.append(time.perf_counter() - before)
    finally:
        if collecting:
            gc.enable()
    return np.asarray(samples, dtype=np.float64)


def cycling(call: Callable[[Input], object], inputs: Sequence[Input]) -> Callable[[], object]:
    """A call without arguments that passes `inputs` to `call` in turn, so that repeats do
    not all hit the same warm array."""
    pending = itertools.cycle(inputs)
    return lambda: call(next(pending))


def _p(samples: Seconds, percentile: float) -> float:
    return float(np.percentile(samples, percentile))


# --- 1. topic extraction ------------------------------------------------------------------


def _documents(rng: np.random.Generator, n: int, d: int, count: int) -> list[Matrix]:
    return [rng.standard_normal((n, d), dtype=np.float32) for _ in range(count)]


def _check_topics(document: Matrix, query: Matrix) -> tuple[float, float]:
    """Our topics must carry the reference's importances and give its scores (through the
    reference's own scoring loops). Returns (importance error, score error)."""
    topics, importances = extract_topics(document, K)
    expected_topics, expected_importances = reference_topics(document, K)
    require(topics.shape == expected_topics.shape, f"{topics.shape} vs {expected_topics.shape}")
    importance_error = float(np.max(np.abs(importances - expected_importances)))
    require(
        importance_error <= IMPORTANCE_TOLERANCE,
        f"importances differ from the full SVD's by {importance_error:.2e}",
    )
    query_words = list(query)
    ours = reference_scores(query_words, [(topics, importances)])[0]
    expected = reference_scores(query_words, [(expected_topics, expected_importances)])[0]
    score_error = abs(ours - expected)
    require(score_error <= SCORE_TOLERANCE, f"scores with our topics {ours} vs SVD's {expected}")
    return importance_error, score_error


def _extraction_case(
    label: str,
    ours: Callable[[], object],
    reference: Callable[[], object],
    n: int,
    d: int,
    budget: Budget,
    errors: tuple[float, float] | None,
) -> ExtractionResult:
    our_times = time_calls(
        ours,
        warmup=budget.warmup,
        min_repeats=budget.min_repeats,
        min_seconds=budget.min_seconds,
        max_repeats=budget.max_repeats,
    )
    reference_times = time_calls(
        reference,
        warmup=0,  # warmed up once on a small matrix; a 5,000-word warm-up costs seconds
        min_repeats=budget.reference_repeats_slow if _slow(n, d) else budget.reference_repeats,
    )
    our_p50, reference_p50 = _p(our_times, 50), _p(reference_times, 50)
    return ExtractionResult(
        label=label,
        n=n,
        d=d,
        ours_ms_p50=our_p50 * 1e3,
        ours_docs_per_s=1.0 / our_p50,
        ours_repeats=len(our_times),
        reference_ms_p50=reference_p50 * 1e3,
        reference_docs_per_s=1.0 / reference_p50,
        reference_repeats=len(reference_times),
        ratio=reference_p50 / our_p50,
        checked=errors is not None,
        max_importance_error=errors[0] if errors else float("nan"),
        max_score_error=errors[1] if errors else float("nan"),
    )


def _slow(n: int, d: int) -> bool:
    """A full SVD that takes seconds: its n x n U dominates (5,000-word documents)."""
    return n * n * d > 2e9


def bench_extraction(rng: np.random.Generator, budget: Budget) -> list[ExtractionResult]:
    reference_topics(rng.standard_normal((50, 20), dtype=np.float32), K)  # load LAPACK paths
    query = rng.standard_normal((20, 300), dtype=np.float32)
    results = []
    for n, d in EXTRACTION_CASES:
        pool = _documents(rng, n, d, count=3)
        check = budget.exhaustive_checks or not _slow(n, d)
        errors = _check_topics(pool[0], query[:, :d]) if check else None
        results.append(
            _extraction_case(
                "one row per occurrence",
                cycling(functools.partial(extract_topics, k=K), pool),
                cycling(functools.partial(reference_topics, k=K), pool),
                n,
                d,
                budget,
                errors,
            )
        )
    results.append(_zipf_case(rng, query, budget))
    return results


def _zipf_case(rng: np.random.Generator, query: Matrix, budget: Budget) -> ExtractionResult:
    """The indexing path: distinct words with counts=, for a 2,000-occurrence document drawn
    with Zipf-like (1/rank) frequencies from 600 words; the reference gets the occurrences."""
    vocabulary = rng.standard_normal((ZIPF_VOCABULARY, SCORE_D), dtype=np.float32)
    frequencies = 1.0 / np.arange(1, ZIPF_VOCABULARY + 1)
    tokens = rng.choice(ZIPF_VOCABULARY, size=ZIPF_WORDS, p=frequencies / frequencies.sum())
    distinct, counts = np.unique(tokens, return_counts=True)
    occurrences, distinct_vectors = vocabulary[tokens], vocabulary[distinct]

    errors = _check_topics(occurrences, query)
    with_counts = extract_topics(distinct_vectors, K, counts=counts)
    per_occurrence = extract_topics(occurrences, K)
    error = float(np.max(np.abs(with_counts[1] - per_occurrence[1])))
    require(error <= IMPORTANCE_TOLERANCE, f"counts= changes the importances by {error:.2e}")

    return _extraction_case(
        f"counts= ({len(distinct)} distinct of {ZIPF_VOCABULARY}, Zipf)",
        lambda: extract_topics(distinct_vectors, K, counts=counts),
        lambda: reference_topics(occurrences, K),
        ZIPF_WORDS,
        SCORE_D,
        budget,
        errors,
    )


# --- 2. rerank scoring --------------------------------------------------------------------


def _candidate_topics(rng: np.random.Generator, count: int, d: int) -> tuple[Matrix, Matrix]:
    """(count, K, d) orthonormal topics and (count, K) descending importances summing to 1.
    Every tenth candidate is a short document with 10 topics, padded with zero rows and
    zero importances as `stack_topics` pads them."""
    orthonormal, _ = np.linalg.qr(rng.standard_normal((count, d, K)))
    topics = np.ascontiguousarray(orthonormal.transpose(0, 2, 1), dtype=np.float32)
    importances = -np.sort(-rng.exponential(size=(count, K)), axis=1)
    short = np.arange(count) % 10 == 9
    topics[short, 10:] = 0.0
    importances[short, 10:] = 0.0
    importances /= importances.sum(axis=1, keepdims=True)
    return topics, importances.astype(np.float32)


def _unpadded(topics: Matrix, importances: Matrix) -> list[tuple[Matrix, Vector]]:
    """Per-document arrays without padding, as the authors' code keeps them."""
    documents = []
    for doc_topics, doc_importances in zip(topics, importances):
        k = int(np.count_nonzero(doc_importances))
        documents.append((doc_topics[:k].copy(), doc_importances[:k].copy()))
    return documents


def _scoring_case(
    rng: np.random.Generator,
    topics: Matrix,
    importances: Matrix,
    documents: list[tuple[Matrix, Vector]],
    m: int,
    budget: Budget,
) -> list[ScoringResult]:
    n_candidates, _, d = topics.shape
    queries = [rng.standard_normal((m, d), dtype=np.float32) for _ in range(8)]
    query_word_lists = [list(query) for query in queries]

    # The reference's cost is linear in candidates; time it on a prefix holding a multiple
    # of ten candidates (so the same share of 10-topic documents) and scale to N.
    subset = min(n_candidates, max(10, budget.reference_cosines // (K * m) // 10 * 10))
    scale = n_candidates / subset
    checked = n_candidates if budget.exhaustive_checks else subset

    expected = np.asarray(reference_scores(query_word_lists[0], documents[:checked]))
    ours = np.asarray(score(queries[0], topics[:checked], importances[:checked], "code"))
    max_error = float(np.max(np.abs(ours - expected)))
    require(
        max_error <= SCORE_TOLERANCE,
        f"score(variant='code') differs from the loops by {max_error:.2e} (N={n_candidates}, m={m})",
    )

    reference_p50s = []
    for cosine in (_reference_cosine, _cosine_norms_once):
        loops = functools.partial(reference_scores, documents=documents[:subset], cosine=cosine)
        reference_times = time_calls(
            cycling(loops, query_word_lists),
            warmup=1,
            min_repeats=budget.reference_repeats,
        )
        reference_p50s.append(_p(reference_times, 50) * scale)
    reference_p50, tidied_p50 = reference_p50s

    results = []
    variant: Variant
    for variant in ("paper", "code"):  # "paper" is the default, the call the service makes
        batched = functools.partial(score, topics=topics, importances=importances, variant=variant)
        our_times = time_calls(
            cycling(batched, queries),
            warmup=budget.warmup,
            min_repeats=budget.min_repeats,
            min_seconds=budget.min_seconds,
            max_repeats=budget.max_repeats,
        )
        results.append(
            ScoringResult(
                variant=variant,
                n_candidates=n_candidates,
                m=m,
                d=d,
                ours_ms_p50=_p(our_times, 50) * 1e3,
                ours_ms_p99=_p(our_times, 99) * 1e3,
                ours_repeats=len(our_times),
                reference_ms_p50=reference_p50 * 1e3,
                reference_timed_candidates=subset,
                reference_repeats=len(reference_times),
                ratio=reference_p50 / _p(our_times, 50),
                tidied_reference_ms_p50=tidied_p50 * 1e3,
                tidied_ratio=tidied_p50 / _p(our_times, 50),
                checked_candidates=checked,
                max_abs_error=max_error,
            )
        )
    return results


def bench_scoring(rng: np.random.Generator, budget: Budget) -> list[ScoringResult]:
    largest = max(n for n, _ in SCORING_CASES)
    all_topics, all_importances = _candidate_topics(rng, largest, SCORE_D)
    results = []
    for n_candidates, m in SCORING_CASES:
        # Contiguous copies: the service scores one stacked array, not a view of a bigger one.
        topics = all_topics[:n_candidates].copy()
        importances = all_importances[:n_candidates].copy()
        documents = _unpadded(topics, importances)
        results.extend(_scoring_case(rng, topics, importances, documents, m, budget))
    return results


# --- 3. targets and report ----------------------------------------------------------------


def evaluate_targets(
    extraction: Sequence[ExtractionResult], scoring: Sequence[ScoringResult]
) -> list[TargetResult]:
    headline = next(
        r for r in extraction if (r.n, r.d) == (2_000, 300) and r.label.startswith("one row")
    )
    default_call = next(
        r for r in scoring if (r.variant, r.n_candidates, r.m) == ("paper", 100, 20)
    )
    same_formula = next(r for r in scoring if (r.variant, r.n_candidates, r.m) == ("code", 100, 20))
    return [
        TargetResult(
            "extraction 2,000 words x d=300: ours / full SVD", headline.ratio, "x", 40, True
        ),
        TargetResult(
            "extraction 2,000 words x d=300: docs/s, one core",
            headline.ours_docs_per_s,
            "docs/s",
            150,
            True,
        ),
        TargetResult(
            "scoring N=100, m=20, d=300: ours (code) / per-pair loops",
            same_formula.ratio,
            "x",
            300,
            True,
        ),
        TargetResult(
            "scoring N=100, m=20, d=300: p50 latency (default call)",
            default_call.ours_ms_p50,
            "ms",
            1.0,
            False,
        ),
    ]


def format_report(
    meta: dict[str, object],
    extraction: Sequence[ExtractionResult],
    scoring: Sequence[ScoringResult],
    targets: Sequence[TargetResult],
) -> str:
    header = " | ".join(f"{key}: {value}" for key, value in meta.items())
    extraction_table = table(
        [
            "input",
            "n",
            "d",
            "ours ms",
            "ours docs/s",
            "full SVD ms",
            "SVD docs/s",
            "ratio",
            "runs",
            "|imp err|",
            "|score err|",
        ],
        [
            [
                r.label,
                f"{r.n:,}",
                str(r.d),
                f"{r.ours_ms_p50:.2f}",
                f"{r.ours_docs_per_s:,.0f}",
                f"{r.reference_ms_p50:,.1f}",
                f"{r.reference_docs_per_s:,.1f}",
                f"{r.ratio:,.0f}x",
                f"{r.ours_repeats}/{r.reference_repeats}",
                f"{r.max_importance_error:.1e}" if r.checked else "not checked",
                f"{r.max_score_error:.1e}" if r.checked else "not checked",
            ]
            for r in extraction
        ],
        label_column=False,
    )
    scoring_table = table(
        [
            "variant",
            "N",
            "m",
            "d",
            "p50 ms",
            "p99 ms",
            "loops p50 ms",
            "loops timed on",
            "ratio",
            "tidied",
            "runs",
            "max |err|",
        ],
        [
            [
                r.variant,
                f"{r.n_candidates:,}",
                str(r.m),
                str(r.d),
                f"{r.ours_ms_p50:.3f}",
                f"{r.ours_ms_p99:.3f}",
                f"{r.reference_ms_p50:,.0f}",
                f"{r.reference_timed_candidates} of {r.n_candidates}"
                + ("" if r.reference_timed_candidates == r.n_candidates else ", scaled"),
                f"{r.ratio:,.0f}x",
                f"{r.tidied_ratio:,.0f}x",
                f"{r.ours_repeats}/{r.reference_repeats}",
                f"{r.max_abs_error:.1e} ({r.checked_candidates})",
            ]
            for r in scoring
        ],
        label_column=False,
    )
    target_lines = [
        f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured:,.3g} {t.unit} "
        f"(target {'>=' if t.at_least else '<='} {t.bound:g} {t.unit})"
        for t in targets
    ]
    return "\n".join(
        [
            header,
            "",
            (
                f"1. Topic extraction, K={K}: extract_topics(X, {K}) vs the authors' full SVD "
                "(numpy.linalg.svd, full_matrices=True); median per document."
            ),
            (
                "   ratio = SVD time / our time; runs = ours/reference repeats; errors: ours vs "
                "the SVD's importances, and the loops' score of a 20-word query with ours vs "
                "the SVD's topics."
            ),
            extraction_table,
            "",
            (
                f"2. Rerank scoring, K={K}: one batched score(Q, topics (N,{K},d), "
                f"importances (N,{K})) call vs the authors' per-pair/topic/word loops."
            ),
            (
                "   loops p50 is for all N candidates; where timed on a subset it is scaled "
                "linearly. ratio = loops p50 / our p50 for the same variant row;"
            ),
            (
                "   tidied = the same against the loops with the norm product computed once "
                "per cosine (the released code computes it twice)."
            ),
            (
                f"   max |err|: score(variant='code') vs the loops, asserted <= "
                f"{SCORE_TOLERANCE:g} (over the candidates in brackets)."
            ),
            scoring_table,
            "",
            "3. Targets",
            *target_lines,
        ]
    )


def _metadata(threads: str, quick: bool, seed: int) -> dict[str, object]:
    return {**machine(("numpy", "scipy"), threads), "mode": "quick" if quick else "default", "seed": seed}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run, about 20 s")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write figures as JSON")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: the product's, RERANKER_BLAS_THREADS, 1 unless set)")
    parser.add_argument("--seed", type=int, default=2018, help="random seed (default 2018)")
    args = parser.parse_args(argv)

    budget = QUICK_BUDGET if args.quick else DEFAULT_BUDGET
    meta = _metadata(os.environ.get("OPENBLAS_NUM_THREADS", "unset"), args.quick, args.seed)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    extraction = bench_extraction(rng, budget)
    scoring = bench_scoring(rng, budget)
    targets = evaluate_targets(extraction, scoring)
    meta["wall s"] = round(time.perf_counter() - started, 1)

    print(format_report(meta, extraction, scoring, targets))
    if args.json is not None:
        payload = {
            "meta": meta,
            "extraction": [asdict(r) for r in extraction],
            "scoring": [asdict(r) for r in scoring],
            "targets": [asdict(t) | {"passed": t.passed} for t in targets],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    # The common-direction correction's targets (issue 15), as ratios in this same run.
    import bench_correction

    print("\nThe correction (bench/bench_correction.py):")
    corrected = bench_correction.main()
    return 0 if all(t.passed for t in targets) and corrected == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
