"""Word vectors from every supported format, converted once and memory-mapped."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

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


def test_gensims_view_of_one_file_is_loaded_once_per_process(tmp_path: Path) -> None:
    """Each engine over the same vectors (a service rebuilding its engine, a suite's many
    apps) loaded gensim's view of them, and WMD their norms, again: about 0.4 s each. One
    file is one view, with its norms; a file replaced at the same path is read anew."""
    source = tmp_path / "native.kv"
    small_vectors().save(str(source))
    first = load_vectors(str(source), tmp_path / "cache")
    second = load_vectors(str(source), tmp_path / "cache")
    assert first is not second and first.keyed_vectors is second.keyed_vectors
    first.keyed_vectors.fill_norms()
    assert second.keyed_vectors.norms is not None  # load_wmd's work, done once
    replaced = small_vectors()
    replaced.vectors[:] *= 2.0
    time.sleep(0.01)  # a later modification time, on a coarse clock too
    replaced.save(str(source))
    again = load_vectors(str(source), tmp_path / "cache")
    assert again.keyed_vectors is not first.keyed_vectors
    np.testing.assert_allclose(again.keyed_vectors["matrix"], 2.0 * first.keyed_vectors["matrix"])


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


class Recorder:
    """A progress bar that remembers what a conversion showed."""

    def __init__(self, what: str) -> None:
        self.what, self.done, self.stages, self.closed = what, 0, [], False

    def update(self, n: int) -> None:
        assert n > 0
        self.done += n

    def set_description(self, desc: str) -> None:
        self.stages.append(desc)

    def close(self) -> None:
        self.closed = True


def converting(bars: list[Recorder]) -> Callable[[str], Recorder]:
    def start(what: str) -> Recorder:
        bars.append(Recorder(what))
        return bars[-1]

    return start


def entries(cache: Path) -> list[Path]:
    return sorted(path for path in cache.iterdir() if path.is_dir() and not path.name.startswith(".") and path.name != "sources")


def test_conversion_happens_once_per_content_and_is_memory_mapped(tmp_path: Path) -> None:
    """One cache entry per content: the same bytes at another path (another virtual
    environment's copy of a package) reuse it untouched; other bytes get their own."""
    cache = tmp_path / "cache"
    source = tmp_path / "vecs.txt"
    small_vectors().save_word2vec_format(str(source), binary=False)
    bars: list[Recorder] = []
    first = load_vectors(str(source), cache, converting(bars))
    assert isinstance(first._vectors, np.memmap)
    [entry] = entries(cache)
    assert first.path is not None and first.path.parent == entry
    assert len(bars) == 1 and str(entry) in bars[0].what and "once" in bars[0].what
    assert bars[0].done == 100 and bars[0].closed and bars[0].stages[0] == "reading vecs.txt"
    native = entry / "vectors.kv"
    stamp = (native.stat().st_ino, native.stat().st_mtime_ns)

    elsewhere = tmp_path / "other-venv" / "vecs.txt"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(source.read_bytes())
    second = load_vectors(str(elsewhere), cache, converting(bars))
    assert len(bars) == 1, "the same content at another path was converted again"
    assert entries(cache) == [entry] and (native.stat().st_ino, native.stat().st_mtime_ns) == stamp
    assert second.info.checksum == first.info.checksum and second.info.source == f"word2vec:{elsewhere.resolve()}"

    changed = small_vectors()
    changed.vectors[0] += 1
    changed.save_word2vec_format(str(source), binary=False)  # other bytes at the same path
    third = load_vectors(str(source), cache, converting(bars))
    assert len(bars) == 2 and len(entries(cache)) == 2
    assert third.info.checksum != first.info.checksum
    np.testing.assert_allclose(third.lookup(["topic"]).vectors[0], [1.0, 1.1, 1.2, 1.3], atol=1e-6)


@pytest.mark.parametrize("damage", ["truncate", "remove", "unfinished"])
def test_a_damaged_cache_entry_is_converted_again(tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    source = tmp_path / "vecs.txt"
    small_vectors().save_word2vec_format(str(source), binary=False)
    load_vectors(str(source), cache)
    [entry] = entries(cache)
    whole = {part.name: part.read_bytes() for part in entry.iterdir()}
    if damage == "truncate":
        with (entry / "vectors.kv-fast.npy").open("r+b") as handle:
            handle.truncate(100)
    elif damage == "remove":
        (entry / "vectors.kv.vectors.npy").unlink(missing_ok=True)
        (entry / "vectors.kv").unlink()
    else:  # left by a version that wrote in place, killed before its record
        (entry / "entry.json").unlink()
    (cache / f".{entry.name}.partial-99999").mkdir()  # a killed conversion's leftovers
    bars: list[Recorder] = []
    again = load_vectors(str(source), cache, converting(bars))
    assert len(bars) == 1, "the damaged entry was used as it was"
    assert entries(cache) == [entry] and not list(cache.glob(".*partial*")) and not list(cache.glob(".*stale*"))
    assert {part.name for part in entry.iterdir()} == set(whole)
    assert (entry / "vectors.kv-fast.npy").read_bytes() == whole["vectors.kv-fast.npy"]
    np.testing.assert_allclose(again.lookup(["matrix"]).vectors[0], [1.6, 1.7, 1.8, 1.9], atol=1e-6)
    assert load_vectors(str(source), cache, converting(bars)) and len(bars) == 1


def test_processes_converting_at_once_make_one_entry(tmp_path: Path) -> None:
    """Two processes that find no entry at once: one converts, the other waits and opens
    its result; neither reads a half-written one. The test holds the conversion lock
    until both wait on it (Linux's /proc/locks shows waiters)."""
    locks = Path("/proc/locks")
    if not locks.exists():
        pytest.skip("needs /proc/locks to see both processes wait")
    source = tmp_path / "vecs.txt"
    small_vectors().save_word2vec_format(str(source), binary=False)
    load_vectors(str(source), tmp_path / "scratch")
    [name] = [entry.name for entry in entries(tmp_path / "scratch")]  # the entry's name, for its lock
    cache = tmp_path / "cache"
    cache.mkdir()
    script = (
        "import sys; from pathlib import Path; from reranker.embeddings import load_vectors; "
        "v = load_vectors(sys.argv[1], Path(sys.argv[2]), lambda what: print(what, file=sys.stderr)); "
        "print(v.info.checksum, float(v.lookup(['matrix']).vectors[0][0]))"
    )  # (the factory returns no bar: the conversion then reports nothing more)
    with (cache / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        runs = [
            subprocess.Popen([sys.executable, "-c", script, str(source), str(cache)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        inode = f":{os.fstat(lock.fileno()).st_ino} "
        deadline = time.monotonic() + 60
        while sum(" -> " in line and inode in line for line in locks.read_text().splitlines()) < 2:
            assert time.monotonic() < deadline and all(run.poll() is None for run in runs), "the processes never waited together"
            time.sleep(0.05)
        fcntl.flock(lock, fcntl.LOCK_UN)
    answers = [run.communicate(timeout=120) for run in runs]
    assert all(run.returncode == 0 for run in runs), answers
    assert answers[0][0] == answers[1][0] and answers[0][0].split()[1] == "1.600000023841858"
    assert sum("converting word vectors" in err for _, err in answers) == 1
    assert len(entries(cache)) == 1


def test_the_source_is_hashed_once_per_file_version(tmp_path: Path) -> None:
    """The content key's sha256 is remembered for the file's size, times and inode: a
    later load reads the record, not the file; a rewritten file is hashed again."""
    from reranker.embeddings import source_digest

    source = tmp_path / "vecs.txt"
    small_vectors().save_word2vec_format(str(source), binary=False)
    digest = source_digest(source, tmp_path / "cache")
    assert digest == hashlib.sha256(source.read_bytes()).hexdigest()
    [record] = (tmp_path / "cache" / "sources").iterdir()
    remembered = json.loads(record.read_text())
    record.write_text(json.dumps({**remembered, "sha256": "f" * 64}))  # proves the record is what is read
    assert source_digest(source, tmp_path / "cache") == "f" * 64
    source.write_text(source.read_text() + "\n")
    assert source_digest(source, tmp_path / "cache") == hashlib.sha256(source.read_bytes()).hexdigest()


def test_missing_or_broken_files_raise_vectors_error(tmp_path: Path) -> None:
    with pytest.raises(VectorsError, match="not found"):
        load_vectors(str(tmp_path / "nope.txt"), tmp_path / "cache")
    broken = tmp_path / "broken.txt"
    broken.write_text("2 4\nword 1 2\n", encoding="utf-8")
    with pytest.raises(VectorsError, match="cannot read"):
        load_vectors(str(broken), tmp_path / "cache")
    # kv: is read by unpickling: a file that is no pickle, or a pickle of classes that do
    # not exist here, is the user's wrong file, not a crash.
    text = tmp_path / "text.kv"
    text.write_text('{"id": 1, "text": "a"}\n', encoding="utf-8")
    foreign = tmp_path / "foreign.kv"
    foreign.write_bytes(b"cnowhere_module\nThing\n.")
    for path in (text, foreign):
        with pytest.raises(VectorsError, match="cannot load word vectors .*KeyedVectors"):
            load_vectors(f"kv:{path}", tmp_path / "cache")
    # Files gensim reads without complaint, or fails on with errors of its own.
    for spec, content, message in [
        ("glove", "hidden\ntopics\n", "no vectors in it"),  # words without numbers: vectors of size 0
        ("glove", "\n\n", "no vectors in it"),
        ("glove", "hidden 0.1 nan\ntopics 0.2 0.3\n", "NaN or infinite"),
        ("fasttext", "not a model\n", "cannot read fasttext word vectors"),
    ]:
        source = tmp_path / f"{spec}-{len(content)}.txt"
        source.write_text(content, encoding="utf-8")
        with pytest.raises(VectorsError, match=message):
            load_vectors(f"{spec}:{source}", tmp_path / "cache")
    # Nothing half-converted is left to be opened as an entry next time.
    assert sorted(entry.name for entry in (tmp_path / "cache").iterdir() if entry.is_dir()) == ["sources"]


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


def test_word_ids_of_a_text_read_compactly_are_those_of_its_words(glove: WordVectors) -> None:
    """A sent text's word ids come from its distinct words, each looked up once, and the
    numbers of its words among them (`WordsRead`): the same ids, in the same order, as
    looking up every word, with unknown words skipped and readable-only words left out."""
    from reranker.text import WordsRead

    texts = [
        "", "the of and", "ΟΔΟΣ.Β", "qqzzxv ships qqzzxv SHIPS sail; ships far",
        Path(__file__).read_text(encoding="utf-8")[:20_000],
    ]
    for text in texts:
        read = WordsRead.of(text)
        compact = glove.word_ids(read.words, read.content)
        assert compact.dtype == np.int32
        np.testing.assert_array_equal(compact, glove.word_ids(read.tokens()))


def test_the_fast_copy_reads_the_same_vectors_without_gensim(tmp_path: Path, glove: WordVectors) -> None:
    """Vectors open through numpy-only files beside the native one (a search then needs no
    gensim import); every lookup agrees with gensim's own, and a file replaced since is
    never read through a stale copy."""
    import random

    from reranker.embeddings import SortedVocabulary

    assert glove.path is not None
    glove = load_vectors("glove-6b-50d", glove.path.parent.parent)  # fresh: other tests load gensim's view of the session's
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
