"""The WMD ranker on real GloVe vectors and the bundled sample papers.

Reference distances are gensim's `wmdistance`, called here directly; the ranker's pruned
order must match computing every distance, and its bounds must never exceed WMD.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from conftest import SAMPLE, run

from reranker.embeddings import WordVectors
from reranker.errors import RankerUnavailableError
from reranker.rankers import (
    CandidateSet,
    RankerOptions,
    WordIds,
    get_ranker,
    rank_candidates,
)
from reranker.rankers.wmd import (
    BOUND_TOLERANCE,
    WmdRanker,
    dual_bound,
    lower_bound,
    relaxed_wmd,
    word_bag,
    word_centroid_distance,
    word_distances,
)
from reranker.text import tokenize
from reranker.types import Candidate, Query, TopicBatch


@dataclass(frozen=True)
class Sample:
    """The sample papers as word ids, the five summaries as queries, and gensim's WMD
    between every summary and paper (queries x papers)."""

    doc_ids: tuple[str, ...]
    word_ids: tuple[WordIds, ...]
    queries: tuple[Query, ...]
    wmd: npt.NDArray[np.float64]


def make_query(glove: WordVectors, text: str) -> Query:
    tokens = tokenize(text)
    lookup = glove.lookup(tokens)
    return Query(text=text, words=lookup.words, vectors=lookup.vectors, oov=lookup.oov, tokens=tuple(tokens))


def words_of(glove: WordVectors, word_ids: WordIds) -> list[str]:
    return [glove.keyed_vectors.index_to_key[i] for i in word_ids.tolist()]


@pytest.fixture(scope="module")
def sample(glove: WordVectors) -> Sample:
    with (SAMPLE / "corpus.jsonl").open(encoding="utf-8") as handle:
        papers = [json.loads(line) for line in handle]
    with (SAMPLE / "queries.jsonl").open(encoding="utf-8") as handle:
        queries = tuple(make_query(glove, json.loads(line)["text"]) for line in handle)
    word_ids = tuple(glove.word_ids(tokenize(f"{p.get('title', '')}\n{p['text']}")) for p in papers)
    kv = glove.keyed_vectors
    wmd = np.array([[kv.wmdistance(list(q.words), words_of(glove, ids)) for ids in word_ids] for q in queries])
    return Sample(tuple(p["id"] for p in papers), word_ids, queries, wmd)


def make_window(
    doc_ids: tuple[str, ...], word_ids: tuple[WordIds | None, ...], exact_top: int | None
) -> CandidateSet:
    """A window in the given order as BM25's, without topics (WMD does not read them)."""
    n = len(doc_ids)
    candidates = tuple(Candidate(doc_id, float(n - rank), rank + 1) for rank, doc_id in enumerate(doc_ids))
    topics = TopicBatch(doc_ids, np.zeros((n, 0, 50), np.float32), np.zeros((n, 0), np.float32))
    return CandidateSet(candidates, topics, word_ids=word_ids, exact_top=exact_top)


def sample_window(sample: Sample, exact_top: int | None) -> CandidateSet:
    # A fixed shuffle, so the BM25 tie-break order is not the corpus order.
    order = np.random.default_rng(7).permutation(len(sample.doc_ids))
    return make_window(
        tuple(sample.doc_ids[i] for i in order), tuple(sample.word_ids[i] for i in order), exact_top
    )


def unlimited(glove: WordVectors) -> RankerOptions:
    return RankerOptions(vectors=glove, wmd_budget_ms=math.inf)


def exhaustive_scores(sample: Sample, query_index: int, window: CandidateSet) -> npt.NDArray[np.float64]:
    """-WMD of every candidate in `window`, from the reference distances."""
    positions = [sample.doc_ids.index(c.doc_id) for c in window.candidates]
    return np.asarray(-sample.wmd[query_index, positions])


def test_exhaustive_scores_are_gensims_wmd(glove: WordVectors, sample: Sample) -> None:
    window = sample_window(sample, exact_top=None)
    for q in (0, 1):
        scores = WmdRanker(unlimited(glove), prune=False).score(sample.queries[q], window)
        np.testing.assert_array_equal(scores, exhaustive_scores(sample, q, window))
    # exact_top=None asks for every position, so pruning must not change a thing.
    scores = WmdRanker(unlimited(glove)).score(sample.queries[2], window)
    np.testing.assert_array_equal(scores, exhaustive_scores(sample, 2, window))
    assert window.notes == []


@pytest.mark.parametrize("k", [1, 3, 10])
def test_pruned_top_k_equals_exhaustive(glove: WordVectors, sample: Sample, k: int) -> None:
    skipped = 0
    for q, query in enumerate(sample.queries):
        window = sample_window(sample, exact_top=k)
        exhaustive = exhaustive_scores(sample, q, window)
        pruned = WmdRanker(unlimited(glove)).score(query, window)
        order = rank_candidates(pruned, window)
        assert order[:k] == rank_candidates(exhaustive, window)[:k]
        np.testing.assert_array_equal(pruned[order[:k]], exhaustive[order[:k]])
        # Every candidate without an exact distance scores -bound: strictly below the top k,
        # and not below its true -WMD.
        approximate = pruned != exhaustive
        assert (pruned[approximate] < pruned[order[k - 1]]).all()
        assert (pruned[approximate] >= exhaustive[approximate] - BOUND_TOLERANCE).all()
        skipped += int(approximate.sum())
        assert window.notes == []
    assert skipped > 0  # the bounds did prune something


def test_bounds_never_exceed_wmd(glove: WordVectors, sample: Sample) -> None:
    kv = glove.keyed_vectors
    gaps = []
    for query, distances in zip(sample.queries, sample.wmd):
        query_bag = word_bag(kv, glove.word_ids(query.words))
        for ids, wmd in zip(sample.word_ids, distances):
            doc_bag = word_bag(kv, ids)
            matrix = word_distances(query_bag, doc_bag)
            assert word_centroid_distance(query_bag, doc_bag) <= wmd + 1e-9
            assert relaxed_wmd(query_bag, doc_bag, matrix) <= wmd + 1e-9
            assert dual_bound(query_bag, doc_bag, matrix) <= wmd + 1e-9
            gaps.append(wmd - lower_bound(query_bag, doc_bag))
    # Tight enough to prune: on these pairs the best bound is within 1% of WMD.
    assert max(gaps) < 0.01


def test_bounds_hold_for_near_synonyms(glove: WordVectors) -> None:
    """Close word pairs are where a bound computed as 2 - 2cos (assuming unit lengths that
    float32 only approximates) came out ~1.6e-6 above gensim's distance, more than the
    pruning tolerance ("thursday" / "tuesday")."""
    kv = glove.keyed_vectors
    for word in ("thursday", "king", "protein", "translation", "learning", "paris", "seven"):
        for neighbour, _ in kv.most_similar(word, topn=3):
            exact = kv.wmdistance([word], [neighbour])
            bound = lower_bound(word_bag(kv, glove.word_ids([word])), word_bag(kv, glove.word_ids([neighbour])))
            assert bound <= exact + BOUND_TOLERANCE / 100, (word, neighbour, bound - exact)


def test_a_text_against_itself_is_zero_apart(glove: WordVectors, sample: Sample) -> None:
    bag = word_bag(glove.keyed_vectors, sample.word_ids[0])
    assert 0.0 <= lower_bound(bag, bag) <= BOUND_TOLERANCE
    query = make_query(glove, " ".join(words_of(glove, sample.word_ids[0])))
    window = make_window(sample.doc_ids[:3], sample.word_ids[:3], exact_top=1)
    scores = WmdRanker(unlimited(glove)).score(query, window)
    assert scores[0] == 0.0 and rank_candidates(scores, window)[0] == 0


def test_equal_distances_keep_the_bm25_order_at_the_cut(glove: WordVectors, sample: Sample) -> None:
    # The query's nearest paper twice, the better BM25 rank second: the copies tie exactly,
    # so pruning must compute both to break the tie as computing everything would.
    query = sample.queries[0]
    nearest = int(np.argmin(sample.wmd[0]))
    doc_ids = (sample.doc_ids[nearest] + "-copy", *sample.doc_ids)
    window = make_window(doc_ids, (sample.word_ids[nearest], *sample.word_ids), exact_top=1)
    scores = WmdRanker(unlimited(glove)).score(query, window)
    copy, original = 0, 1 + nearest
    assert scores[copy] == scores[original] == -sample.wmd[0, nearest]
    assert rank_candidates(scores, window)[:2] == [copy, original]


def test_documents_without_words_rank_last(glove: WordVectors, sample: Sample) -> None:
    no_words: list[WordIds | None] = [None, np.zeros(0, np.int32), None]
    word_ids = (no_words[0], *sample.word_ids[:4], no_words[1], *sample.word_ids[4:8], no_words[2])
    doc_ids = tuple(f"d{i}" for i in range(len(word_ids)))
    for exact_top in (None, 2):
        window = make_window(doc_ids, word_ids, exact_top)
        scores = WmdRanker(unlimited(glove)).score(sample.queries[1], window)
        assert np.isfinite(scores).all()
        # Last, and among themselves in BM25 order.
        assert rank_candidates(scores, window)[-3:] == [0, 5, 10]


def test_a_spent_budget_notes_it_and_scores_by_bounds(glove: WordVectors, sample: Sample) -> None:
    query = sample.queries[2]
    window = sample_window(sample, exact_top=3)
    scores = WmdRanker(RankerOptions(vectors=glove, wmd_budget_ms=0.0)).score(query, window)
    assert scores.shape == (len(sample.doc_ids),) and np.isfinite(scores).all()
    assert len(window.notes) == 1
    assert "0 of 25 exact distances" in window.notes[0] and "lower bound" in window.notes[0]
    # Every score is -bound, never below the true -WMD.
    assert (scores >= exhaustive_scores(sample, 2, window) - BOUND_TOLERANCE).all()


def test_scores_are_deterministic(glove: WordVectors, sample: Sample) -> None:
    window = sample_window(sample, exact_top=3)
    first = WmdRanker(unlimited(glove)).score(sample.queries[3], window)
    np.testing.assert_array_equal(first, WmdRanker(unlimited(glove)).score(sample.queries[3], window))
    np.testing.assert_array_equal(first, get_ranker("wmd", unlimited(glove)).score(sample.queries[3], window))


def test_edge_windows(glove: WordVectors, sample: Sample) -> None:
    ranker = WmdRanker(unlimited(glove))
    empty = make_window((), (), exact_top=None)
    assert ranker.score(sample.queries[0], empty).shape == (0,)
    # No query word has a vector: nothing to measure, every candidate scores 0 (BM25 order).
    unknown = make_query(glove, "qqzzxv wwqqzz")
    assert unknown.words == ()
    window = sample_window(sample, exact_top=3)
    np.testing.assert_array_equal(ranker.score(unknown, window), np.zeros(len(window)))
    incomplete = CandidateSet(window.candidates, window.topics, exact_top=3)
    with pytest.raises(ValueError, match="word ids"):
        ranker.score(sample.queries[0], incomplete)
    with pytest.raises(RankerUnavailableError, match="word vectors"):
        WmdRanker(RankerOptions()).score(sample.queries[0], window)


def test_a_cli_search_computes_exact_distances_within_the_default_budget(sample: Sample, tmp_path: Path, glove: WordVectors) -> None:
    """In a new process, as a user runs it: loading gensim, the norms and POT (about a
    second) used to happen inside the 1 s budget, and not one distance was exact."""
    code, _ = run(tmp_path, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    assert code == 0
    query_text = json.loads((SAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])["text"]
    env = {k: v for k, v in os.environ.items() if k != "RERANKER_WMD_BUDGET_MS"}
    done = subprocess.run(
        [sys.executable, "-m", "reranker", "--data-dir", str(tmp_path), "search", query_text, "--ranker", "wmd", "--size", "5", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok" and "reason" not in result, result.get("reason")
    exact = {doc_id: -sample.wmd[0, i] for i, doc_id in enumerate(sample.doc_ids)}
    for hit in result["hits"]:
        assert hit["ranker_score"] == pytest.approx(exact[hit["id"]], abs=1e-9), hit["id"]
    assert [hit["id"] for hit in result["hits"]] == sorted(exact, key=lambda doc_id: -exact[doc_id])[:5]
