"""The default ranker's two additions to the paper's topics: a document's best passage judged
by BM25 beside its whole text ("MaxP"), and corrected topics shaped by the words that read as
words. Real SQLite and tantivy, real GloVe vectors."""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import write_jsonl

from reranker import indexing
from reranker.embeddings import WordVectors
from reranker.errors import StoreError
from reranker.extraction import Correction, corrected_topics, document_topics, estimate_centering
from reranker.indexing import index_corpus
from reranker.pipeline import Engine
from reranker.store.bm25 import (
    BM25_B,
    BM25_K1,
    PASSAGE_STRIDE,
    PASSAGE_TERMS,
    StoredWords,
    best_passage_bm25,
    mean_passage_length,
    passage_query,
    passage_spans,
)
from reranker.store.embedded import EmbeddedStore
from reranker.store.text_index import TextIndex, WordPositions, passage_words, stable_hashes, stem_words, term_hashes
from reranker.text import numbered
from reranker.types import Document


def _starts(length: int) -> list[int]:
    """Where the reference's passages start (each runs PASSAGE_TERMS words, or to the end)."""
    starts = [0]
    while starts[-1] + PASSAGE_TERMS < length:
        starts.append(starts[-1] + PASSAGE_STRIDE)
    return starts


def _reference(
    words: list[str],
    stem: dict[str, str],
    exact: dict[str, int],
    stemmed: dict[str, int],
    doc_freqs: dict[str, dict[str, int]],
    documents: int,
    average: float,
) -> float:
    """The best passage's BM25 by the definition, one passage at a time, over both fields:
    a word counts as itself in the exact field and as its stem in the stemmed field."""
    best = 0.0
    for start in _starts(len(words)):
        passage = words[start : start + PASSAGE_TERMS]
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(passage) / average)
        score = 0.0
        for field, query, held in (("exact", exact, passage), ("stemmed", stemmed, [stem[w] for w in passage])):
            for term, count in query.items():
                f = held.count(term)
                df = doc_freqs[field].get(term, 0)
                idf = math.log(1 + (documents - df + 0.5) / (df + 0.5))
                score += count * idf * f * (BM25_K1 + 1) / (f + norm)
        best = max(best, score)
    return best


def _passages_by_both_ways(
    words: list[str], stem: dict[str, str], exact: dict[str, int], lengths: list[int], seed: int, unheld: tuple[str, ...] = ()
) -> None:
    """`best_passage_bm25` against `_reference` over texts of these lengths drawn from
    `words`; `unheld`: indexed words (in the vocabulary) that no text holds."""
    rng = np.random.default_rng(seed)
    stemmed: dict[str, int] = {}
    for word, count in exact.items():
        stemmed[stem[word]] = stemmed.get(stem[word], 0) + count
    doc_freqs = {field: {term: int(rng.integers(1, 50)) for term in query} for field, query in (("exact", exact), ("stemmed", stemmed))}
    texts = [list(rng.choice(words, size=n)) for n in lengths]
    indexed = [*words, *unheld]
    vocabulary = (stable_hashes(indexed), stable_hashes([stem[w] for w in indexed]))
    query = passage_query(exact, stemmed, doc_freqs, 100, vocabulary)
    # As the store keeps them (uint16 positions, uint32 past 65,535 words).
    kept = [WordPositions.of(stable_hashes(text)).to_bytes() for text in texts]
    found = best_passage_bm25(StoredWords(kept), query, 131.5)
    expected = [_reference(text, stem, exact, stemmed, doc_freqs, 100, 131.5) for text in texts]
    assert found.tolist() == pytest.approx(expected, rel=1e-5)  # computed in float32
    # A document the store does not find (no bytes) scores 0 and moves no other score.
    assert best_passage_bm25(StoredWords([*kept, b""]), query, 131.5).tolist() == pytest.approx([*expected, 0.0], rel=1e-5)
    # An empty text scores 0; every text of a passage or more holds some query word.
    assert found[0] == 0.0 and all(score > 0 for score, n in zip(found, lengths) if n >= PASSAGE_TERMS)


def test_best_passage_bm25_is_the_best_window_by_the_definition() -> None:
    # 40 words of 25 stems: a query word's other forms count in the stemmed field only.
    words = [f"word{i}" for i in range(40)]
    stem = {word: f"stem{i % 25}" for i, word in enumerate(words)}
    exact = {"word0": 1, "word1": 2, "word5": 1, "word39": 1, "unseen": 1}
    stem["unseen"] = "stem0"  # a query word no text holds still names its stem's forms
    # Lengths around the passage edges: empty, shorter than one, exactly one, one and a bit,
    # several with a ragged end.
    _passages_by_both_ways(words, stem, exact, [0, 7, 150, 151, 225, 600, 1013], seed=3)


def test_a_stem_whose_only_form_the_texts_hold_is_the_query_word_counts_in_both_fields() -> None:
    # `_present_terms` counts such a stemmed term in its exact term's column, with both
    # weights: word20 is its stem's one form, word21's other form no text holds, and word0
    # shares its stem with word25, which the texts hold.
    words = [f"word{i}" for i in range(40)]
    stem = {word: f"stem{i % 25}" for i, word in enumerate(words)} | {"word21s": "stem21"}
    exact = {"word20": 2, "word21": 1, "word0": 1, "word3": 1}
    _passages_by_both_ways(words, stem, exact, [0, 40, 150, 151, 600], seed=5, unheld=("word21s",))


def test_passage_spans_are_the_windows_best_passage_bm25_scores() -> None:
    """What the OpenSearch store writes as a document's passages is what the reference
    above (checked against `best_passage_bm25`) cuts."""
    for length in range(1, 1000):
        assert passage_spans(length) == [(start, min(start + PASSAGE_TERMS, length)) for start in _starts(length)]
    assert passage_spans(0) == []  # no words, no passage (it would score 0)
    # Their mean length, which a passage's BM25 takes as its average length.
    for lengths in ([0], [7], [150], [151, 0, 40], list(range(0, 3000, 37))):
        spans = [end - start for length in lengths for start, end in passage_spans(length)]
        assert mean_passage_length(np.array(lengths)) == pytest.approx(sum(spans) / len(spans) if spans else 0.0, rel=1e-12)


def test_a_text_past_65535_words_keeps_its_positions_in_32_bits() -> None:
    words = [f"word{i}" for i in range(30)]
    stem = {word: f"stem{i % 20}" for i, word in enumerate(words)}
    _passages_by_both_ways(words, stem, {"word2": 1, "word7": 1}, [0, 70_000, 300], seed=11)
    kept = WordPositions.of(stable_hashes(words * 2200))
    assert kept.positions.dtype == np.uint32 and kept.positions.max() == 65_999


def test_word_positions_list_each_words_places_in_text_order() -> None:
    text = stable_hashes(["b", "a", "c", "a", "b", "a"])
    kept = WordPositions.of(text)
    assert kept.positions.dtype == kept.counts.dtype == np.uint16
    by_word = dict(zip(kept.words.tolist(), np.split(kept.positions, np.cumsum(kept.counts)[:-1])))
    assert sorted(by_word) == kept.words.tolist()
    assert {word: places.tolist() for word, places in by_word.items()} == {
        int(text[1]): [1, 3, 5], int(text[0]): [0, 4], int(text[2]): [2]
    }


@pytest.mark.parametrize("words", [[], ["ships"], "the ships sail ship sailing ships of the ship sails".split()])
def test_a_sent_texts_terms_are_what_the_index_keeps_of_the_same_words(words: list[str]) -> None:
    """`text_terms` counts each field's terms and lays out the words for the passages as
    the write path stores a document's (`passage_words` of every word and its stem)."""
    terms = TextIndex.text_terms(*numbered(words))
    assert terms.length == len(words)
    stems = stem_words(words) if words else []
    for field, counted in (("exact", Counter(words)), ("stemmed", Counter(stems))):
        asked = sorted(counted)
        found = terms.frequencies(field, term_hashes(asked))
        assert dict(zip(asked, found.tolist())) == counted
        assert terms.fields[field][1].sum() == len(words) and terms.fields[field][0].size == len(counted)
    stored = passage_words(words, stems)
    assert (terms.passages.positions, terms.passages.words.tolist(), terms.passages.stems.tolist()) == (
        stored.positions, stored.words.tolist(), stored.stems.tolist()
    )



def test_a_query_word_counts_in_the_fields_that_hold_its_terms() -> None:
    vocabulary = (stable_hashes(["ships", "ship", "sails"]), stable_hashes(["ship", "ship", "sail"]))
    frequencies = {"exact": {"ships": 3}, "stemmed": {"ship": 5}}
    query = passage_query({"ships": 1}, {"ship": 1}, frequencies, 10, vocabulary)
    # "ships" counts in both fields, "ship" (its other form) in the stemmed one, "sails" in none.
    held = dict(zip(query.words.tolist(), query.slots.tolist()))
    assert held == {int(stable_hashes(["ships"])[0]): [0, 1], int(stable_hashes(["ship"])[0]): [-1, 1]}
    # Only some terms counted (the first stage's share of its common terms): the same words
    # and slots, the others weigh 0.
    common = query.counting({"stemmed": {"ship"}})
    assert common.words.tolist() == query.words.tolist() and common.slots.tolist() == query.slots.tolist()
    assert common.weights.tolist() == [0.0, query.weights[1]]
    # Without stems (a field the analyser left empty), the words count in the exact field only.
    alone = passage_query({"ships": 1}, {}, frequencies, 10, vocabulary)
    assert alone.slots.tolist() == [[0, -1]] and alone.weights.size == 1

def test_words_whose_low_bits_agree_take_the_other_path_to_the_same_answer() -> None:
    low: dict[int, str] = {}
    for i in range(100_000):
        word = f"twin{i}"
        key = int(stable_hashes([word])[0]) & 0xFFFF
        if key in low:
            twins = [low[key], word]
            break
        low[key] = word
    words = twins + [f"word{i}" for i in range(30)]
    stem = {word: f"stem{i % 20}" for i, word in enumerate(words)}
    _passages_by_both_ways(words, stem, {twins[0]: 1, twins[1]: 1, "word3": 2}, [0, 151, 600], seed=5)


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


def test_with_nothing_indexed_sent_texts_are_judged_by_their_own_statistics(engine: Engine, tmp_path: Path) -> None:
    """A service with nothing indexed (a reranker behind a cluster's rerank call, as one
    calls Cohere's) scores the sent texts' best passages with the texts' own statistics:
    exactly what the store gives them once they are its whole index."""
    rng = np.random.default_rng(7)
    vocabulary = ["translation", "translations", "alignment", "aligned", "decoder", "decoding", "phrase", "phrases",
                  "ocean", "ships", "harbour", "grammar", "parser", "parsing", "corpus", "corpora", "model", "models"]
    filler = [f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(400)]
    # Each with a word the vectors know, or indexing would skip it.
    texts = ["ocean " + " ".join(rng.choice(vocabulary + filler, size=size)) for size in (12, 90, 150, 151, 420, 1_000, 2_300)]
    query = "phrase translation models with alignment, parsing and a decoder"
    ids = [f"t{number}" for number in range(len(texts))]
    sent = engine.store.passage_bm25(query, [""] * len(texts), texts)
    assert sent is not None and max(sent) > 0
    # A text without a content word is not counted (indexing would skip it) and scores 0.
    assert engine.store.passage_bm25(query, [""] * (len(texts) + 2), [*texts, "", "the and of"]) == [*sent, 0.0, 0.0]
    assert engine.store.passage_bm25(query, ["", ""], ["", "of the"]) == [0.0, 0.0]
    # A stored id among them, with nothing indexed: nothing to judge it by.
    assert engine.store.passage_bm25(query, ["t0", ""], [None, texts[1]]) is None
    corpus = [{"id": doc_id, "text": text} for doc_id, text in zip(ids, texts)]
    index_corpus(write_jsonl(tmp_path / "corpus.jsonl", corpus), engine.store, engine.vectors, 3, show_progress=False)
    assert engine.store.passage_bm25(query, ids, [None] * len(ids)) == pytest.approx(sent, rel=1e-6)


def test_a_document_of_more_passages_than_opensearchs_nested_limit_keeps_its_last_one(engine: Engine, tmp_path: Path) -> None:
    """The embedded store cuts passages from word positions when it scores (32-bit past
    65,535 words): no count of passages per document to outgrow, unlike OpenSearch's
    nested documents (10,000 by default)."""
    filler = [f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(300)]
    words = [filler[i % 300] for i in range(PASSAGE_STRIDE * 10_000)] + filler[:148] + ["whale", "harpoon"]
    assert len(passage_spans(len(words))) == 10_001
    last = words[-PASSAGE_TERMS:]  # the passage that holds the query's words
    corpus = [{"id": "tome", "text": " ".join(words)}, {"id": "last", "text": " ".join(last)}]
    index_corpus(write_jsonl(tmp_path / "corpus.jsonl", corpus), engine.store, engine.vectors, 3, show_progress=False)
    tome, alone = engine.store.passage_bm25("whale harpoon", ["tome", "last"], [None, None]) or [0.0, 0.0]
    assert tome > 0 and tome == pytest.approx(alone, rel=1e-9)  # the same passage, the same statistics


def test_a_words_other_forms_count_through_its_stem_as_the_first_stage_counts_them(engine: Engine, tmp_path: Path) -> None:
    # The query says "translation"; the paper says "translations" and "translating": the
    # stemmed field matches them (the first stage does), the exact field does not.
    inflected = "translations translating aligned aligning decoders phrases " * 5
    exact = "translation align decoder phrase " * 5
    filler = " ".join(f"filler{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(200))
    corpus = [
        {"id": "inflected", "text": f"{filler} {inflected} {filler}"},
        {"id": "exact", "text": f"{filler} {exact} {filler}"},
        {"id": "none", "text": f"{filler} ocean ships {filler}"},
    ]
    index_corpus(write_jsonl(tmp_path / "corpus.jsonl", corpus), engine.store, engine.vectors, 3, show_progress=False)
    query = "translation align decoder phrase"
    stored = engine.store.passage_bm25(query, ["inflected", "exact", "none"], [None, None, None])
    assert stored is not None and stored[0] > 0 and stored[2] == 0
    # The same words in both fields score higher than forms matching the stems alone.
    assert stored[1] > stored[0]
    sent = engine.store.passage_bm25(query, ["", "", ""], [c["text"] for c in corpus])
    assert sent == pytest.approx(stored, rel=1e-9)


def test_an_abstract_shorter_than_a_passage_scores_as_the_first_stage_scores_it(engine: Engine, tmp_path: Path) -> None:
    # Over abstracts, the passages' average length is the abstracts': each one's single
    # passage is the abstract, and its BM25 is the document's (without the text index's
    # length quantisation: `text_bm25`, the formula the first stage uses).
    texts = [
        "information retrieval systems index documents by their terms",
        "retrieval of scientific papers by citation indexing and term weighting schemes in libraries",
        "a library catalogue of books",
        "automatic indexing of documents for information retrieval with controlled vocabularies and thesauri",
    ]
    corpus = [{"id": f"d{i}", "text": text} for i, text in enumerate(texts)]
    index_corpus(write_jsonl(tmp_path / "corpus.jsonl", corpus), engine.store, engine.vectors, 3, show_progress=False)
    query = "indexing documents for retrieval"
    passages = engine.store.passage_bm25(query, [c["id"] for c in corpus], [None] * len(corpus))
    whole = engine.store.text_bm25(query, texts)
    assert passages is not None and whole is not None and max(whole) > 0
    assert passages == pytest.approx(whole, rel=1e-5)


def test_a_rolled_back_batch_leaves_its_words_to_the_next_write(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer remembers which words' stems the store holds; a batch that fails must not
    # be remembered as written, or its words' other forms would never count again.
    corpus = [{"id": "a", "text": "translations translating decoders " * 10}, {"id": "b", "text": "ocean ships " * 10}]
    path = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    real = EmbeddedStore._earlier_versions

    def failing(self: EmbeddedStore, doc_id: str, *args: object) -> tuple[int | None, int | None]:
        if doc_id == "b":
            raise sqlite3.OperationalError("disk I/O error")
        return real(self, doc_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(EmbeddedStore, "_earlier_versions", failing)
    with pytest.raises(StoreError):
        index_corpus(path, engine.store, engine.vectors, 3, show_progress=False)
    monkeypatch.setattr(EmbeddedStore, "_earlier_versions", real)
    assert index_corpus(path, engine.store, engine.vectors, 3, show_progress=False).indexed == 2
    query = "translation decoder"
    stored = engine.store.passage_bm25(query, ["a"], [None])
    assert stored is not None and stored[0] > 0
    assert engine.store.passage_bm25(query, [""], [corpus[0]["text"]]) == pytest.approx(stored, rel=1e-9)


def test_a_store_without_passages_of_words_falls_back_until_reindexed(
    engine: Engine, tmp_path: Path, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = [{"id": f"d{i}", "text": f"translation models align {w} phrases " * 40} for i, w in enumerate(["big", "small", "tired"])]
    path = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    index_corpus(path, engine.store, glove, 3, show_progress=False)
    store = engine.store
    assert isinstance(store, EmbeddedStore)
    scored = store.passage_bm25("translation phrases", ["d0", "d1"], [None, None])
    # As a store written before derivation 4 reads: no positions (its words in text order
    # are in a column no longer read).
    with sqlite3.connect(store.directory / "store.sqlite3") as db:
        db.execute("DELETE FROM passages")
    assert store.passage_bm25("translation phrases", ["d0", "d1"], [None, None]) is None
    # The default then ranks as the fusion without passages, and says nothing is wrong.
    found = engine.search("translation phrases", "hidden_topics_corrected+bm25:maxp", size=3)
    assert [hit.doc_id for hit in found.hits] == [
        hit.doc_id for hit in engine.search("translation phrases", "hidden_topics_corrected+bm25", size=3).hits
    ]
    # The next `reranker index` of a new derivation keeps them again, one row per document.
    monkeypatch.setattr(indexing, "DERIVATION", indexing.DERIVATION + 1)
    assert index_corpus(path, store, glove, 3, show_progress=False).replaced == 3
    assert store.passage_bm25("translation phrases", ["d0", "d1"], [None, None]) == pytest.approx(scored, rel=1e-9)
    with sqlite3.connect(store.directory / "store.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM passages WHERE rowid NOT IN (SELECT rowid FROM docs)").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM docs WHERE rowid NOT IN (SELECT rowid FROM passages)").fetchone() == (0,)


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
    paper_clean, _, _ = document_topics(Document("a", "", text), glove, 5)
    paper_noisy, _, _ = document_topics(Document("a", "", noisy), glove, 5)
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


def test_document_frequencies_follow_a_writer_in_another_store_object(tmp_path: Path, glove: WordVectors) -> None:
    # The reader remembers frequencies it read (a corpus's queries share words) until its
    # text index changes: a service must see what `reranker index` adds, as it did before.
    writer, reader = EmbeddedStore(tmp_path / "store"), None
    try:
        first = [{"id": f"a{i}", "text": "ocean ships sail the sea"} for i in range(2)]
        index_corpus(write_jsonl(tmp_path / "first.jsonl", first), writer, glove, 2, show_progress=False)
        reader = EmbeddedStore(tmp_path / "store")
        assert reader.doc_freqs(["ocean", "bread"]) == (2, {"ocean": 2, "bread": 0})
        more = [{"id": f"b{i}", "text": "ocean bread and a baker"} for i in range(3)]
        index_corpus(write_jsonl(tmp_path / "more.jsonl", more), writer, glove, 2, show_progress=False)
        assert reader.doc_freqs(["ocean", "bread"]) == (5, {"ocean": 5, "bread": 3})
        assert writer.doc_freqs(["ocean", "bread"]) == (5, {"ocean": 5, "bread": 3})
    finally:
        writer.close()
        if reader is not None:
            reader.close()
