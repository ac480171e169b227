"""The default ranker's two additions to the paper's topics: a document's best passage judged
by BM25 beside its whole text ("MaxP"), and corrected topics shaped by the words that read as
words. Real SQLite and tantivy, real GloVe vectors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl

from reranker import indexing
from reranker.embeddings import WordVectors
from reranker.indexing import Correction, corrected_topics, estimate_centering, index_corpus
from reranker.pipeline import Engine
from reranker.store import BM25_B, BM25_K1, PASSAGE_STRIDE, PASSAGE_TERMS, best_passage_bm25
from reranker.store.embedded import EmbeddedStore
from reranker.store.text_index import stable_hashes
from reranker.types import Document


def _reference(sequence: list[int], query: dict[int, int], doc_freqs: dict[int, int], documents: int) -> float:
    """The best passage's BM25 by the definition, one passage at a time."""
    starts = [0]
    while starts[-1] + PASSAGE_TERMS < len(sequence):
        starts.append(starts[-1] + PASSAGE_STRIDE)
    best = 0.0
    for start in starts:
        passage = sequence[start : start + PASSAGE_TERMS]
        score = 0.0
        for term, count in query.items():
            f = passage.count(term)
            idf = math.log(1 + (documents - doc_freqs[term] + 0.5) / (doc_freqs[term] + 0.5))
            norm = BM25_K1 * (1 - BM25_B + BM25_B * len(passage) / PASSAGE_TERMS)
            score += count * idf * f * (BM25_K1 + 1) / (f + norm)
        best = max(best, score)
    return best


def test_best_passage_bm25_is_the_best_window_by_the_definition() -> None:
    rng = np.random.default_rng(3)
    vocabulary = rng.integers(-(2**31), 2**31 - 1, size=40, dtype=np.int64).astype(np.int32)
    query = {int(vocabulary[i]): c for i, c in ((0, 1), (1, 2), (5, 1), (39, 1))}
    doc_freqs = {term: int(rng.integers(1, 50)) for term in query}
    # Lengths around the passage edges: empty, shorter than one, exactly one, one and a bit,
    # several with a ragged end.
    sequences = [rng.choice(vocabulary, size=n).astype(np.int32) for n in (0, 7, 150, 151, 225, 600, 1013)]
    terms = np.array(list(query), dtype=np.int32)
    found = best_passage_bm25(sequences, terms, [query[t] for t in terms], [doc_freqs[t] for t in terms], 100)
    expected = [_reference(s.tolist(), query, doc_freqs, 100) for s in sequences]
    assert found.tolist() == pytest.approx(expected, rel=1e-9)
    assert found[0] == 0.0 and (found[1:] > 0).all()
    # Two query terms whose low 16 bits agree take the other path to the same answer.
    twin = np.int32(int(vocabulary[1]) ^ (1 << 20))
    vocabulary[2] = twin
    sequences = [rng.choice(vocabulary, size=n).astype(np.int32) for n in (151, 600)]
    query[int(twin)] = 1
    doc_freqs[int(twin)] = 7
    terms = np.array(list(query), dtype=np.int32)
    found = best_passage_bm25(sequences, terms, [query[t] for t in terms], [doc_freqs[t] for t in terms], 100)
    assert found.tolist() == pytest.approx([_reference(s.tolist(), query, doc_freqs, 100) for s in sequences], rel=1e-9)


def test_a_document_matching_the_query_in_one_place_has_the_better_passage(engine: Engine, tmp_path: Path) -> None:
    # Same words, same counts, same length: the first stage cannot tell the two apart; the
    # best passage can, as a summary often matches one section of a long paper.
    filler = [f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(600)]
    query_words = ["translation", "alignment", "decoder", "phrase"] * 6
    together = filler[:300] + query_words + filler[300:]
    spread = list(filler)
    for i, word in enumerate(query_words):
        spread.insert(i * 25, word)
    corpus = [{"id": "together", "text": " ".join(together)}, {"id": "spread", "text": " ".join(spread)}]
    corpus += [{"id": f"other{i}", "text": "ocean ships " + " ".join(filler[i * 50 : i * 50 + 200])} for i in range(8)]
    index_corpus(write_jsonl(tmp_path / "corpus.jsonl", corpus), engine.store, engine.vectors, 3, show_progress=False)
    query = "phrase translation with alignment and a decoder"
    whole = {c.doc_id: c.bm25_score for c in engine.store.bm25(query, 10)}
    assert whole["together"] == pytest.approx(whole["spread"], rel=1e-6)
    best = engine.store.passage_bm25(query, ["together", "spread"], [None, None])
    assert best is not None and best[0] > 1.5 * best[1]
    # A text sent to the service (the Cohere routes) is judged as the stored document is.
    sent = engine.store.passage_bm25(query, ["", ""], [" ".join(together), " ".join(spread)])
    assert sent == pytest.approx(best, rel=1e-9)
    # The default fuses it: the document that matches in one place comes first.
    found = engine.search(query, "hidden_topics_corrected+bm25:maxp", size=2)
    assert found.hits[0].doc_id == "together"


def test_corrected_topics_are_shaped_by_readable_words_only(glove: WordVectors) -> None:
    text = (
        "Statistical machine translation learns phrase tables from aligned parallel corpora; "
        "the decoder searches for the translation with the best model score. "
    ) * 3
    # Two-letter lowercase tokens and Roman numerals ("tot" would count: three letters read
    # as a word by the rule, see `is_readable`).
    noisy = text + " ek lii co pr th et al xiv ti tj " * 20
    centering = estimate_centering([Document("a", "", text)], glove)
    assert centering is not None
    correction = Correction.of(centering, glove)
    clean = corrected_topics(Document("a", "", text), glove, 5, correction)
    fragments = corrected_topics(Document("a", "", noisy), glove, 5, correction)
    np.testing.assert_allclose(np.abs(fragments.topics), np.abs(clean.topics), atol=1e-5)
    # The paper's topics keep the paper's preprocessing: every content word shapes them.
    paper_clean, _, _ = indexing.document_topics(Document("a", "", text), glove, 5)
    paper_noisy, _, _ = indexing.document_topics(Document("a", "", noisy), glove, 5)
    assert not np.allclose(np.abs(paper_noisy.topics), np.abs(paper_clean.topics), atol=1e-2)


def test_a_new_derivation_recomputes_every_document_on_the_next_run(
    tmp_path: Path, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = EmbeddedStore(tmp_path / "store")
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"id": f"d{i}", "text": f"ships sail the ocean with a {w} crew"} for i, w in enumerate(["big", "small", "tired"])])
    try:
        assert index_corpus(corpus, store, glove, 2, show_progress=False).indexed == 3
        assert index_corpus(corpus, store, glove, 2, show_progress=False).unchanged == 3
        monkeypatch.setattr(indexing, "DERIVATION", indexing.DERIVATION + 1)
        again = index_corpus(corpus, store, glove, 2, show_progress=False)
        assert again.indexed == 3 and again.unchanged == 0 and again.replaced == 3
    finally:
        store.close()


def test_stable_hashes_do_not_depend_on_the_process() -> None:
    # The store keeps passages as these hashes: another process (the service) must compute
    # the same ones for the query's stems. BLAKE2b's first 4 bytes, little-endian, signed.
    assert stable_hashes(["translat", "align"]).tolist() == [-634063706, 121912307]
