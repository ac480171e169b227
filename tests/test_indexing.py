"""The write path on real word vectors and a real store: bad lines, resuming, replacing."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TINY_CORPUS, InterruptAfter, write_jsonl

from reranker import indexing
from reranker.embeddings import Word2VecParams, WordVectors
from reranker.errors import ConfigError, IndexMismatchError, InputError, StoreError
from reranker.extraction import document_topics
from reranker.indexing import corpus_sentences, index_corpus, index_documents, read_corpus, trained_vectors_path
from reranker.store import IndexInfo
from reranker.store.embedded import EmbeddedStore
from reranker.types import Document, StoredDocument


def test_a_corpus_is_indexed_with_topics(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    report = index_corpus(corpus, store, glove, 5, show_progress=False)
    assert (report.indexed, report.unchanged, report.skipped) == (3, 0, ())
    assert report.total_documents == 3
    batch = store.topics(["ships", "chess"])
    assert batch.topics.shape == (2, 5, 50)
    assert batch.importances.sum(axis=1).tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    assert store.bm25("sailors at sea", 3)[0].doc_id == "ships"


def test_bad_lines_are_reported_with_file_line_and_reason(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> None:
    corpus = tmp_path / "bad.jsonl"
    write_jsonl(
        corpus,
        [
            TINY_CORPUS[0],
            "{not json",
            {"title": "no id", "text": "words"},
            {"id": "no-text"},
            {"id": "empty", "text": "   "},
            {"id": "oov", "text": "qqzzxv wwqqzz"},
            "[1, 2]",
            "",
            {"id": 7, "text": "numeric ids become strings: bread and ships"},
        ],
    )
    with corpus.open("ab") as handle:
        handle.write(b'{"id": "latin1", "text": "caf\xe9"}\n')
    report = index_corpus(corpus, store, glove, 5, show_progress=False)
    reasons = {item.location.rsplit(":", 1)[1]: item.reason for item in report.skipped}
    assert reasons["2"].startswith("not valid JSON")
    assert "'id'" in reasons["3"]
    assert "missing 'text'" in reasons["4"]
    assert "empty text" in reasons["5"]
    assert reasons["6"] == "no in-vocabulary words (2 out-of-vocabulary)"
    assert reasons["7"] == "expected a JSON object with an 'id' and a 'text'"
    assert reasons["8"] == "empty line"
    assert reasons["10"] == "not UTF-8 text"
    assert all(item.location.startswith(str(corpus)) for item in report.skipped)
    assert report.indexed == 2 and store.content_hashes(["ships", "7"]).keys() == {"ships", "7"}


def test_indexing_resumes_after_an_interruption_and_is_idempotent(
    tmp_path: Path, store: EmbeddedStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [{"id": f"d{i}", "text": f"{TINY_CORPUS[i % 3]['text']} variant {'abcdefghij'[i % 10]}"} for i in range(150)]
    corpus = write_jsonl(tmp_path / "c.jsonl", records)
    monkeypatch.setattr("reranker.indexing.BATCH_SIZE", 64)

    with pytest.raises(KeyboardInterrupt):
        index_documents(read_corpus(corpus), store, glove, 5, progress=InterruptAfter(100))
    assert store.count() == 64  # the first batch landed whole, the second not at all
    resumed = index_corpus(corpus, store, glove, 5, show_progress=False)
    assert (resumed.unchanged, resumed.indexed, resumed.total_documents) == (64, 86, 150)
    again = index_corpus(corpus, store, glove, 5, show_progress=False)
    assert (again.unchanged, again.indexed, again.total_documents) == (150, 0, 150)


def test_changed_documents_are_replaced(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    index_corpus(corpus, store, glove, 5, show_progress=False)
    changed = [dict(TINY_CORPUS[0], text="A completely new text about bread ovens and bakers.")]
    report = index_corpus(write_jsonl(tmp_path / "d.jsonl", changed), store, glove, 5, show_progress=False)
    assert (report.indexed, report.total_documents) == (1, 3)
    assert store.documents(["ships"])["ships"].text.startswith("A completely new text")


def test_changing_k_requires_a_rebuild(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    index_corpus(corpus, store, glove, 5, show_progress=False)
    with pytest.raises(IndexMismatchError):
        index_corpus(corpus, store, glove, 7, show_progress=False)
    report = index_corpus(corpus, store, glove, 7, rebuild=True, show_progress=False)
    assert report.indexed == 3 and store.index_info().k == 7


def test_indexing_with_another_stop_list_than_the_stores_is_refused(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> None:
    """The store records (and later checks) its own list; words read with another would
    not be the ones it says it holds."""
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_CORPUS)
    with pytest.raises(ConfigError, match=r"^indexing with a stop list of 1 word, into a store opened with the bundled stop list"):
        index_corpus(corpus, store, glove, 5, stopwords=frozenset({"ships"}), show_progress=False)
    assert store.index_info() is None and store.count() == 0


def test_a_missing_corpus_is_an_input_error(tmp_path: Path, store: EmbeddedStore, glove: WordVectors) -> None:
    with pytest.raises(InputError, match="no such corpus file"):
        index_corpus(tmp_path / "missing.jsonl", store, glove, 5, show_progress=False)


def test_worker_processes_stem_for_the_text_index_as_the_store_would(
    tmp_path: Path, store: EmbeddedStore, glove: WordVectors
) -> None:
    # The stems are made in the workers (Store.word_stemmer); a store given no stems makes its own.
    records = [dict(TINY_CORPUS[i % len(TINY_CORPUS)], id=f"d{i}") for i in range(6)]
    report = index_documents(read_corpus(write_jsonl(tmp_path / "w.jsonl", records)), store, glove, 5, workers=2)
    assert report.indexed == 6
    itself = EmbeddedStore(tmp_path / "itself")
    itself.initialise(IndexInfo(glove.info, k=5))
    itself.upsert([stored_without_words(glove, doc) for _, doc, _ in read_corpus(tmp_path / "w.jsonl") if isinstance(doc, Document)])
    for query in ("sailing ships at sea", "sailor harbour storm", "chess openings"):
        assert [(hit.doc_id, hit.bm25_score) for hit in store.bm25(query, 10)] == [
            (hit.doc_id, hit.bm25_score) for hit in itself.bm25(query, 10)
        ]
    itself.close()


def stored_without_words(glove: WordVectors, doc: Document) -> StoredDocument:
    topics, n_tokens, n_oov = document_topics(doc, glove, 5)
    return StoredDocument(doc, topics, "h", n_tokens, n_oov)


def variants(ids: range) -> list[dict[str, str]]:
    """Documents d<i> of TINY_CORPUS's texts, each a little different."""
    return [{"id": f"d{i}", "text": f"{TINY_CORPUS[i % 3]['text']} variant {'abcdefghij'[i % 10]}"} for i in ids]


def interrupted_rebuild(tmp_path: Path, store: EmbeddedStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index of d0-d29, then a rebuild of d0-d149 stopped (as by Ctrl-C) after its first
    batch, d0-d63, was written."""
    index_corpus(write_jsonl(tmp_path / "old.jsonl", variants(range(30))), store, glove, 5, show_progress=False)
    monkeypatch.setattr("reranker.indexing.BATCH_SIZE", 64)
    with pytest.raises(KeyboardInterrupt):
        index_documents(read_corpus(write_jsonl(tmp_path / "all.jsonl", variants(range(150)))), store, glove, 5, rebuild=True, progress=InterruptAfter(100))
    assert store.count() == 30  # readers still see the index the rebuild replaces


def test_a_resumed_rebuild_publishes_only_the_corpus_it_read(
    tmp_path: Path, store: EmbeddedStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupted rebuild wrote d0-d63; the one that resumes it reads d40-d99, d50's
    line cut short (no JSON: no id). It publishes what it read, as a rebuild never
    interrupted would: before, d0-d39, removed from the corpus on purpose, were published
    too (and d50's earlier version)."""
    interrupted_rebuild(tmp_path, store, glove, monkeypatch)
    smaller = variants(range(40, 100))
    lines: list[object] = [record if record["id"] != "d50" else '{"id": "d50", "text": ' for record in smaller]
    report = index_corpus(write_jsonl(tmp_path / "smaller.jsonl", lines), store, glove, 5, rebuild=True, show_progress=False)
    expected = {f"d{i}" for i in range(40, 100)} - {"d50"}
    assert {hit.doc_id for hit in store.bm25("ships chess bread variant", 500)} == expected
    assert store.documents([f"d{i}" for i in range(150)]).keys() == expected
    assert report.total_documents == store.count() == len(expected)
    # d40-d63 were written by the interrupted run (d50 among them) and are not extracted again.
    assert (report.unchanged, report.indexed, len(report.skipped), report.dropped) == (23, 36, 1, 41)
    assert store._text.num_docs() == len(expected)  # no entry left of a dropped row
    # The next run finds the index whole: nothing to add, nothing to drop.
    again = index_corpus(tmp_path / "smaller.jsonl", store, glove, 5, show_progress=False)
    assert (again.unchanged, again.indexed, again.dropped, again.total_documents) == (59, 0, 0, len(expected))


def test_a_resumed_rebuild_of_the_same_corpus_skips_what_was_written_and_drops_nothing(
    tmp_path: Path, store: EmbeddedStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupted_rebuild(tmp_path, store, glove, monkeypatch)
    report = index_corpus(tmp_path / "all.jsonl", store, glove, 5, rebuild=True, show_progress=False)
    assert (report.unchanged, report.indexed, report.dropped, report.total_documents) == (64, 86, 0, 150)


def test_a_run_without_rebuild_never_deletes(
    tmp_path: Path, store: EmbeddedStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into the index readers see, a corpus adds and replaces: d0-d29 stay whatever the
    corpus holds (and the interrupted rebuild is dropped whole, as before)."""
    interrupted_rebuild(tmp_path, store, glove, monkeypatch)
    report = index_corpus(write_jsonl(tmp_path / "few.jsonl", variants(range(25, 35))), store, glove, 5, show_progress=False)
    assert (report.unchanged, report.indexed, report.dropped, report.total_documents) == (5, 5, 0, 35)
    with pytest.raises(StoreError, match="only a rebuild drops documents"):
        store.drop_absent(set())


def test_word2vec_reads_a_word_broken_across_lines_as_one_word(tmp_path: Path) -> None:
    # A sentence a line, of the text as the topics read it: split into lines first, "lan\xad"
    # and "guage" were two words on two lines.
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "spoken lan\u00ad\nguage models\n&amp;amp; ocean"}])
    assert corpus_sentences(corpus, frozenset())[0] == [["spoken", "language", "models"], ["ocean"]]


def test_vectors_trained_before_words_were_read_otherwise_are_not_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Vectors trained on the same corpus before the text cleaning (DERIVATION 5) learnt "amp",
    # "quot" and the pieces of broken words: the next training of that corpus trains anew.
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "text": "fea\u00ad tures &amp;amp;"}])
    params = Word2VecParams()
    now = trained_vectors_path(corpus, tmp_path, params, frozenset())
    assert trained_vectors_path(corpus, tmp_path, params, frozenset()) == now
    monkeypatch.setattr(indexing, "DERIVATION", indexing.DERIVATION - 1)
    assert trained_vectors_path(corpus, tmp_path, params, frozenset()) != now
