"""Word vectors from every supported format, converted once and memory-mapped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gensim.models import FastText, KeyedVectors

from reranker.embeddings import (
    Word2VecParams,
    WordVectors,
    load_vectors,
    parse_spec,
    train_word2vec,
    trained_vectors,
)
from reranker.errors import VectorsError

WORDS = ["topic", "summary", "document", "vector", "matrix"]


def small_vectors() -> KeyedVectors:
    keyed = KeyedVectors(vector_size=4)
    keyed.add_vectors(WORDS, np.arange(20, dtype=np.float32).reshape(5, 4) / 10)
    return keyed


def test_the_bundled_glove_vectors(glove: WordVectors) -> None:
    assert glove.dim == 50 and len(glove) == 400_000
    assert glove.info.name == "glove-6b-50d" and len(glove.info.checksum) == 64
    assert isinstance(glove._vectors, np.memmap)  # read-only, shared between processes
    assert not glove._vectors.flags.writeable


def test_out_of_vocabulary_words_are_skipped_and_counted(glove: WordVectors) -> None:
    lookup = glove.lookup(["summary", "qqzzxv", "topic", "qqzzxv"])
    assert lookup.words == ("summary", "topic")
    assert lookup.oov == ("qqzzxv", "qqzzxv")
    assert lookup.vectors.shape == (2, 50) and lookup.vectors.dtype == np.float32
    distinct, counts, oov = glove.lookup_counts(["topic", "topic", "summary", "qqzzxv"])
    assert dict(zip(distinct.words, counts.tolist())) == {"topic": 2.0, "summary": 1.0}
    assert oov == 1
    assert glove.lookup([]).vectors.shape == (0, 50)


@pytest.mark.parametrize(
    ("filename", "writer", "spec_prefix"),
    [
        ("vecs.txt", lambda kv, p: kv.save_word2vec_format(str(p), binary=False), ""),
        ("vecs.bin", lambda kv, p: kv.save_word2vec_format(str(p), binary=True), ""),
        ("glove.txt", lambda kv, p: kv.save_word2vec_format(str(p), binary=False, write_header=False), ""),
        ("vecs.vec", lambda kv, p: kv.save_word2vec_format(str(p), binary=False), "word2vec:"),
        ("native.kv", lambda kv, p: kv.save(str(p)), ""),
    ],
)
def test_formats_load_to_the_same_vectors(tmp_path: Path, filename, writer, spec_prefix) -> None:
    source = tmp_path / filename
    writer(small_vectors(), source)
    loaded = load_vectors(spec_prefix + str(source), tmp_path / "cache")
    assert loaded.dim == 4 and len(loaded) == 5
    np.testing.assert_allclose(loaded.lookup(["matrix"]).vectors[0], [1.6, 1.7, 1.8, 1.9], atol=1e-6)


def test_glove_text_is_told_apart_from_word2vec_text(tmp_path: Path) -> None:
    path = tmp_path / "g.txt"
    small_vectors().save_word2vec_format(str(path), binary=False, write_header=False)
    assert parse_spec(str(path)) == ("glove", path)
    assert parse_spec("fasttext:" + str(path)) == ("fasttext", path)
    assert parse_spec("glove-6b-50d") == ("glove-6b-50d", None)


def test_fasttext_models_load(tmp_path: Path) -> None:
    from gensim.models.fasttext import save_facebook_model

    sentences = [WORDS * 3, list(reversed(WORDS)) * 3]
    model = FastText(sentences=sentences, vector_size=8, min_count=1, epochs=2, seed=1, workers=1)
    path = tmp_path / "model.bin"
    save_facebook_model(model, str(path))
    loaded = load_vectors("fasttext:" + str(path), tmp_path / "cache")
    assert loaded.dim == 8 and "summary" in loaded


def test_conversion_happens_once_and_is_memory_mapped(tmp_path: Path) -> None:
    source = tmp_path / "vecs.txt"
    small_vectors().save_word2vec_format(str(source), binary=False)
    first = load_vectors(str(source), tmp_path / "cache")
    converted = sorted((tmp_path / "cache").glob("*.kv"))
    assert len(converted) == 1
    stamp = converted[0].stat().st_mtime_ns
    second = load_vectors(str(source), tmp_path / "cache")
    assert converted[0].stat().st_mtime_ns == stamp
    assert first.info == second.info


def test_missing_or_broken_files_raise_vectors_error(tmp_path: Path) -> None:
    with pytest.raises(VectorsError, match="not found"):
        load_vectors(str(tmp_path / "nope.txt"), tmp_path / "cache")
    broken = tmp_path / "broken.txt"
    broken.write_text("2 4\nword 1 2\n", encoding="utf-8")
    with pytest.raises(VectorsError, match="cannot read"):
        load_vectors(str(broken), tmp_path / "cache")


def test_train_word2vec_writes_loadable_vectors(tmp_path: Path) -> None:
    sentences = [["hidden", "topics", "summary", "document"], ["summary", "document", "topics"]] * 20
    epochs: list[int] = []
    info = train_word2vec(sentences, tmp_path / "w2v.kv", Word2VecParams(dim=12, min_count=1, epochs=2), on_epoch=epochs.append)
    assert info.dim == 12 and epochs == [1, 2]
    loaded = load_vectors(str(tmp_path / "w2v.kv"), tmp_path / "cache")
    assert loaded.dim == 12 and "topics" in loaded and loaded.info.checksum == info.checksum
    # The record beside the file says how to open them again, and that they are complete.
    assert trained_vectors(tmp_path / "w2v.kv") == info and info.source == f"kv:{(tmp_path / 'w2v.kv').resolve()}"
    assert loaded.info.source == info.source
    assert trained_vectors(tmp_path / "missing.kv") is None
    # The same training again gives the same identity (gensim's file holds when it was
    # saved, so its bytes differ; the checksum is of the words and vectors).
    again = train_word2vec(sentences, tmp_path / "again.kv", Word2VecParams(dim=12, min_count=1, epochs=2))
    assert again.checksum == info.checksum and (tmp_path / "again.kv").read_bytes() != (tmp_path / "w2v.kv").read_bytes()
    with pytest.raises(VectorsError, match="min-count"):
        train_word2vec([["once"]], tmp_path / "none.kv", Word2VecParams(min_count=5))


def test_the_fast_copy_reads_the_same_vectors_without_gensim(tmp_path: Path, glove: WordVectors) -> None:
    """Vectors open through numpy-only files beside the native one (a search then needs no
    gensim import); every lookup agrees with gensim's own, and a file replaced since is
    never read through a stale copy."""
    import random

    from reranker.embeddings import SortedVocabulary

    assert glove.path is not None
    glove = load_vectors("glove-6b-50d", glove.path.parent)  # fresh: other tests load gensim's view of the session's
    assert isinstance(glove._index, SortedVocabulary) and glove._keyed is None
    keyed = glove.keyed_vectors  # gensim, loaded on first use
    words = random.Random(7).sample(keyed.index_to_key, 3000) + ["naïve", "北京", "qqzzxv", "", "x" * 300]
    np.testing.assert_array_equal(glove.word_ids(words), [keyed.key_to_index[w] for w in words if w in keyed.key_to_index])
    found = glove.lookup(words[:50])
    np.testing.assert_array_equal(found.vectors, keyed.vectors[[keyed.key_to_index[w] for w in found.words]])
    assert "ship" in glove and "qqzzxv" not in glove and len(glove) == len(keyed.key_to_index)
    # A process that looks up many words (an indexing worker) switches to a dict: same rows.
    many = random.Random(8).sample(keyed.index_to_key, 30_000)
    np.testing.assert_array_equal(glove.word_ids(many), [keyed.key_to_index[w] for w in many])
    assert isinstance(glove._index, dict)
    np.testing.assert_array_equal(glove.word_ids(words), [keyed.key_to_index[w] for w in words if w in keyed.key_to_index])

    sentences = [["ship", "sea", "sail"], ["bread", "oven", "flour"]] * 20
    path = tmp_path / "w2v.kv"
    train_word2vec(sentences, path, Word2VecParams(dim=8, min_count=1, epochs=1))
    first = load_vectors(str(path), tmp_path / "cache")
    assert isinstance(first._index, SortedVocabulary) and len(first) == 6
    train_word2vec([["alpha", "beta"]] * 10, path, Word2VecParams(dim=8, min_count=1, epochs=1))  # replaced in place
    again = load_vectors(str(path), tmp_path / "cache")
    assert "alpha" in again and "ship" not in again and len(again) == 2
