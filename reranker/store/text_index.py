"""The embedded store's first stage: Lucene's BM25 over a tantivy index on disk.

tantivy (a maintained Rust engine modelled on Lucene) scores every (field, term) clause
with Lucene's BM25, k1 = 1.2 and b = 0.75:

    idf(t)      = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))
    score(t, D) = boost x idf(t) x (k1 + 1) tf / (tf + k1 (1 - b + b |D| / avgdl))

N counts the index's documents, n_t those holding t, |D| the field's length in D (kept
in one byte per document, as Lucene's norms are: exact up to about 40 tokens, within a
few percent above) and avgdl the field's mean length. Lucene since 8.0 drops the constant
(k1 + 1); the order is the same. A query's clauses are summed (a should-query, like
OpenSearch's `multi_match` of type `most_fields`), and a word that occurs c times in the
query is one clause with boost c, as c repeated clauses would be in Lucene. The embedded
store searches a query without the clauses of terms most documents hold (`common_terms`)
and adds their share to each hit from its stored words (`EmbeddedStore.bm25`).

What is indexed: the document's title and text, as the package's tokenizer reads them
(`reranker.text.tokenize`: the same content words the topics are built from), in one
field twice: `stemmed` (Snowball English, `stem_words`) and `exact` (the words as they
are), scored with equal weight. Measured on both shared data sets (bench/README.md): the
stemmed field alone helps CISI and hurts CL-SciSumm, the exact one the reverse, the pair
beats either on both; a title counted once beats a title boosted (it adds its words to the
same field, so its matches saturate with the body's, as in BM25F).

This module is the only importer of tantivy. Each entry carries the SQLite row id of its
document (`rowid`, a fast field), so a hit is mapped back to the store with one read of
a column. A new version of a document keeps its row id (`embedded.py`), and its entry
replaces the old one under it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import AbstractSet, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import tantivy

from reranker.errors import StoreError, StoreFullError
from reranker.store import LruCache, ReadWords, RunClaim, claimed_message, content_key
from reranker.text import numbered, tokenize
from reranker.types import PassageWords

# The fields every query searches, with their boosts (see the module docstring).
SEARCH_FIELDS: tuple[tuple[str, float], ...] = (("stemmed", 1.0), ("exact", 1.0))
# Memory for the writer's in-RAM segment before it is flushed to disk (tantivy needs at
# least 15 MB a thread); one thread, since topic extraction has the other cores.
WRITER_HEAP_BYTES = 128_000_000
# The same while `compact` writes the whole index as one segment: tantivy takes the memory
# as the segment grows and writes out a segment each time it is full. 50,000 long papers
# fit in one (the process peaked at 372 MB RSS, against 267 MB for the same at 128 MB,
# which made 3 segments: bench/README.md).
COMPACT_HEAP_BYTES = 1_000_000_000
# The fields' tokenizers, by the names the index's schema records.
_STEMMED, _EXACT = "reranker_stemmed", "reranker_exact"
# Words the stemmer has seen, and their stems (`stem_words`); emptied when it grows past
# this many (a few tens of MB), which a corpus's vocabulary rarely does.
_STEM_CACHE_WORDS = 1_000_000
_stems: dict[str, str] = {}
# Free space below which a failed write is taken for a full disk (the cause tantivy and
# SQLite do not always name): a segment or a few SQLite pages.
NEARLY_FULL = 1_000_000
_stems_lock = threading.Lock()
_DOC_FREQ_CACHE_TERMS = 200_000


def _analyzers() -> dict[str, tantivy.TextAnalyzer]:
    # Words arrive already tokenized and lower-cased, and stemmed for the stemmed field
    # (`stem_words`, in the write path's workers): both fields split on white space only.
    # The stemmed field's tokenizer keeps its name, so an index built when it stemmed
    # (with this same stemmer) holds the same terms and stays readable and writable.
    whitespace = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
    return {_EXACT: whitespace, _STEMMED: whitespace}


@lru_cache(maxsize=1)
def _whitespace() -> tantivy.TextAnalyzer:
    return _analyzers()[_EXACT]


@lru_cache(maxsize=1)
def _stemmer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).filter(tantivy.Filter.stemmer("english")).build()
    )


def analysed_terms(words: Sequence[str]) -> dict[str, list[str]]:
    """What each searched field holds for these content words (as `reranker.text.tokenize`
    gives them): field -> terms, in `SEARCH_FIELDS`' order. The exact field splits on white
    space only; the stemmed field stems each word (tantivy's Snowball English stemmer)."""
    text = " ".join(words)
    return {field: (_stemmer() if field == "stemmed" else _whitespace()).analyze(text) for field, _ in SEARCH_FIELDS}


def stem_words(words: Sequence[str]) -> list[str]:
    """The stemmed field's term for each of `words` (non-empty, without white space, as
    `reranker.text.tokenize` gives them), in order: tantivy's Snowball English stemmer.

    Each distinct word is stemmed once per process and remembered: a long document
    repeats its words, and a corpus's vocabulary is small. The write path calls this in
    its topic workers, beside the tokenizing: about 0.15 ms for a 2,700-word document,
    where stemming in the text index's writer thread (which shares the cores with the
    workers) cost about 0.43 ms. Raises ValueError for a word that is empty or holds
    white space.
    """
    try:
        return list(map(_stems.__getitem__, words))
    except KeyError:
        pass
    # Only a miss writes to the cache, under the lock: no other thread can empty it
    # between this update and the lookups that follow.
    with _stems_lock:
        if len(_stems) > _STEM_CACHE_WORDS:
            _stems.clear()
        new = list(set(words).difference(_stems))
        stems = _stemmer().analyze(" ".join(new))
        # The stemmer maps one token to one, so a count that differs means a word that
        # is not one token: stems would be paired with the wrong words. (A blank word
        # gives none, and could make up for a word of two.)
        if len(stems) != len(new) or not all(word.strip() for word in new):
            raise ValueError("stem_words takes single words: non-empty, without white space")
        _stems.update(zip(new, stems))
        return list(map(_stems.__getitem__, words))


def stable_hashes(terms: Sequence[str]) -> npt.NDArray[np.int32]:
    """A 32-bit hash of each term that is the same in every process (the first 4 bytes of
    its BLAKE2b digest): what the store keeps a document's words, and their stems, by for
    its passages.

    Each distinct term is hashed once per process and remembered (a corpus's vocabulary is
    small). A query's 100 terms meet a word of another term's hash about once in 40 million
    positions: in one window of long papers in a hundred."""
    with _hashes_lock:
        if len(_hashes) > _STEM_CACHE_WORDS:
            _hashes.clear()
        for term in set(terms).difference(_hashes):
            _hashes[term] = int.from_bytes(hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=4).digest(), "little", signed=True)
        # map() with the dict's own lookup: a third of the time of a generator, per word
        # of every document indexed.
        return np.array(list(map(_hashes.__getitem__, terms)), dtype=np.int32).reshape(len(terms))


def passage_words(words: Sequence[str], stems: Sequence[str]) -> PassageWords:
    """What the store keeps of a text's content words (in order) and their stems (one
    each) for its best passages; made where the words are (a topic worker), as hashing
    every word is most of what writing a long document costs the store."""
    distinct, numbers = numbered(words)
    stem_of = dict(zip(words, stems))
    return _passage_words(distinct, [stem_of[word] for word in distinct], np.asarray(numbers, dtype=np.intp))


def _passage_words(distinct: Sequence[str], stems: Sequence[str], sequence: npt.NDArray[np.intp]) -> PassageWords:
    """`PassageWords` of a text given as its distinct words (in the order they first
    occur), the stem of each, and the text as each word's number among them: the write
    path's (`passage_words`) and a sent text's (`TextIndex.text_terms`), laid out alike."""
    hashes = stable_hashes(distinct)
    return PassageWords(WordPositions.of(hashes[sequence]).to_bytes(), hashes, stable_hashes(stems))


_hashes: dict[str, int] = {}
_hashes_lock = threading.Lock()


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("rowid", indexed=True, fast=True)
    builder.add_text_field("id", tokenizer_name="raw", index_option="basic")
    # Frequencies without positions: BM25 needs no phrase matching.
    builder.add_text_field("stemmed", tokenizer_name=_STEMMED, index_option="freq")
    builder.add_text_field("exact", tokenizer_name=_EXACT, index_option="freq")
    return builder.build()


@dataclass(frozen=True)
class TextTerms:
    """One text's terms per searched field, as sorted term hashes and their counts: a
    tenth of the memory of a dict of words, so a service can keep many texts' terms.
    Hashes are Python's own (salted per process): a TextTerms never leaves its process."""

    length: int
    fields: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]]
    passages: PassageWords  # its words for its passages, as the store keeps a document's (`passage_words`)

    @property
    def nbytes(self) -> int:
        kept = len(self.passages.positions) + self.passages.words.nbytes + self.passages.stems.nbytes
        return sum(hashes.nbytes + counts.nbytes for hashes, counts in self.fields.values()) + kept + 64

    def frequencies(self, field: str, terms: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        """How often each term occurs in the field, for terms given by `term_hashes`:
        (q,) -> (q,), 0 for a term the text lacks."""
        hashes, counts = self.fields[field]
        if not hashes.size:
            return np.zeros(terms.shape, dtype=np.int32)
        positions = np.minimum(np.searchsorted(hashes, terms), hashes.size - 1)
        found: npt.NDArray[np.int32] = np.where(hashes[positions] == terms, counts[positions], 0).astype(np.int32)
        return found


# Memory for sent texts' terms (`SentTexts`): about 30 KB for a paper of 5,000 words, so
# some 1,000 papers.
TEXT_TERMS_CACHE_BYTES = 32 * 2**20


class SentTexts:
    """Sent texts' terms (`TextIndex.text_terms` of their content words), remembered by
    content: callers send the same texts again and again, and tokenizing a long one costs
    a few milliseconds."""

    def __init__(self, stopwords: frozenset[str] | None) -> None:
        self._stopwords = stopwords
        self._kept: LruCache[str, TextTerms] = LruCache(TEXT_TERMS_CACHE_BYTES, lambda terms: terms.nbytes)

    def __call__(self, text: str, read: ReadWords | None = None) -> TextTerms:
        """`text`'s terms; on a miss its content words are `read(text)` (a caller that
        reads the text for its topics too shares one reading), by default `tokenize`."""
        key = content_key(text)
        found = self._kept.get(key)
        if found is None:
            found = TextIndex.text_terms(*(read(text) if read is not None else numbered(tokenize(text, self._stopwords))))
            self._kept.put(key, found)
        return found


@dataclass(frozen=True)
class WordPositions:
    """A text's words for its passages, by word rather than in text order, so that a query
    reads the positions of the words it holds only (in a window of 100 long papers, 28% of
    the words are distinct within their paper, and 61,000 of 290,000 positions are read):
    words: (n,) its distinct words as `stable_hashes`, ascending; counts: (n,) how often
    each occurs; positions: (L,) where each occurs (0-based, ascending), grouped by word in
    the order of `words`. Counts and positions are uint16 for a text under 65,536 words
    (half the bytes of the words themselves), else uint32.
    """

    words: npt.NDArray[np.int32]
    counts: npt.NDArray[np.unsignedinteger[Any]]
    positions: npt.NDArray[np.unsignedinteger[Any]]

    @classmethod
    def of(cls, sequence: npt.NDArray[np.int32]) -> "WordPositions":
        """From a text's words in text order, as `stable_hashes`: (L,) int32."""
        kind = np.uint16 if sequence.size < 1 << 16 else np.uint32
        order = np.argsort(sequence, kind="stable")  # stable: each word's positions ascend
        words, counts = np.unique(sequence[order], return_counts=True)
        return cls(words.astype(np.int32), counts.astype(kind), order.astype(kind))

    def to_bytes(self) -> bytes:
        """[n, bytes per position] as int32, words, counts, positions (native byte order,
        as the store's other blobs): what `best_passage_bm25` reads."""
        header = np.array([self.words.size, self.positions.itemsize], dtype=np.int32)
        return header.tobytes() + self.words.tobytes() + self.counts.tobytes() + self.positions.tobytes()


def _explained_values(node: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """(description, value) of every step of a tantivy explanation (`Explanation.to_json`)."""
    yield str(node.get("description", "")), float(node.get("value", 0.0))
    for child in node.get("details", ()):
        yield from _explained_values(child)


def term_hashes(terms: Sequence[str]) -> npt.NDArray[np.int64]:
    """The hashes `TextTerms` keeps terms by, (q,)."""
    return np.fromiter((hash(term) for term in terms), dtype=np.int64, count=len(terms))


class TextIndex:
    """A tantivy index in `directory`: documents as (rowid, id, words).

    Readers in any number of threads and processes; one writer at a time (tantivy's lock
    file; a second one gets a StoreError saying so). A writer's changes become visible
    to readers at `commit`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._analyzers = _analyzers()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._schema = _schema()
            self._index = tantivy.Index(self._schema, path=str(directory), reuse=True)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise full_disk(f"cannot open the text index in {directory}", exc.strerror or "") from None
            raise StoreError(f"cannot open the text index in {directory}: {exc}") from None
        except ValueError as exc:
            if "os error 28" in str(exc):
                raise full_disk(f"cannot open the text index in {directory}", "no space left on device") from None
            raise StoreError(f"cannot open the text index in {directory}: {exc}") from None
        for name, analyzer in self._analyzers.items():
            self._index.register_tokenizer(name, analyzer)
        self._writer: tantivy.IndexWriter | None = None
        self._lock = threading.Lock()
        # Document frequencies read since the searcher last changed (`reload`, `commit`):
        # a corpus's queries share their words, and each read is a call into tantivy
        # (1.1 ms for the 134 terms of a summary's two fields).
        self._doc_freqs: dict[tuple[str, str], int] = {}
        # (N, avgdl) as the searcher's BM25 takes them (`scoring_statistics`), read again
        # with the document frequencies.
        self._scoring: tuple[int, float] | None = None
        self._analysed = threading.local()

    # --- reading ---------------------------------------------------------------------

    def reload(self) -> None:
        """See what the last commit (of any process) wrote."""
        self._index.reload()
        self._doc_freqs = {}
        self._scoring = None

    def num_docs(self) -> int:
        return int(self._index.searcher().num_docs)

    def search(
        self,
        words: Sequence[str],
        size: int,
        rowids: Sequence[int] | None = None,
        leave_out: Mapping[str, AbstractSet[str]] | None = None,
    ) -> list[tuple[int, float]]:
        """The `size` best (rowid, score) for the content words `words`, best first.

        `rowids`: only these documents may match (None: any). `leave_out`: field -> terms
        whose clauses the query leaves out (`common_terms`). Raises StoreError when tantivy
        fails.
        """
        query = self._query(words, leave_out or {})
        if query is None or size < 1:
            return []
        if rowids is not None:
            if not rowids:
                return []
            # A filter adds nothing to the score: a constant-score clause of 0.
            allowed = tantivy.Query.const_score_query(
                tantivy.Query.term_set_query(self._schema, "rowid", list(rowids)), 0.0
            )
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, allowed)])
        try:
            searcher = self._index.searcher()
            hits = searcher.search(query, size, count=False).hits
            found = searcher.fast_field_values("rowid", [address for _, address in hits])
        except ValueError as exc:
            raise StoreError(f"BM25 search failed: {exc}") from None
        return [(int(rowid), float(score)) for (score, _), rowid in zip(hits, found) if rowid is not None]

    def analysed(self, words: Sequence[str]) -> dict[str, list[str]]:
        """What each searched field holds for these content words: field -> terms.
        The last answer is kept per thread: a search asks for the same query's terms three
        or four times (its common terms, its clauses, their share, its passages), so the
        answer is shared: callers read it and do not change it."""
        key = tuple(words)
        last: tuple[tuple[str, ...], dict[str, list[str]]] | None = getattr(self._analysed, "last", None)
        if last is not None and last[0] == key:
            return last[1]
        found = analysed_terms(words)
        self._analysed.last = (key, found)
        return found

    @staticmethod
    def text_terms(distinct: Sequence[str], numbers: Sequence[int]) -> "TextTerms":
        """A text's content words as each searched field would hold them, compactly, from
        the words `numbered`: each distinct word (in the order they first occur) and the
        text as each word's number among them.

        Each distinct word is hashed and stemmed once: a paper of 4,000 words has about
        1,100 distinct ones, and per-word work in Python was most of what a new text's
        terms cost."""
        sequence = np.asarray(numbers, dtype=np.intp)
        counts = np.bincount(sequence, minlength=len(distinct)).astype(np.int32)
        stems = stem_words(distinct)
        stem_hashes, stem_of_word = np.unique(term_hashes(stems), return_inverse=True)
        stemmed = (stem_hashes, np.bincount(stem_of_word, weights=counts, minlength=stem_hashes.size).astype(np.int32))
        exact = term_hashes(distinct)
        order = np.argsort(exact)
        passages = _passage_words(distinct, stems, sequence)
        return TextTerms(len(sequence), {"exact": (exact[order], counts[order]), "stemmed": stemmed}, passages)

    def doc_freqs(self, field: str, terms: Iterable[str]) -> dict[str, int]:
        """How many documents hold each of `terms` in `field`. Raises StoreError."""
        known = self._doc_freqs
        found = {term: known.get((field, term), -1) for term in set(terms)}
        unread = [term for term, count in found.items() if count < 0]
        if unread:
            try:
                searcher = self._index.searcher()
                for term in unread:
                    found[term] = int(searcher.doc_freq(field, term))
            except ValueError as exc:
                raise StoreError(f"cannot read term statistics: {exc}") from None
            if len(known) > _DOC_FREQ_CACHE_TERMS:
                known.clear()
            known.update(((field, term), found[term]) for term in unread)
        return found

    def common_terms(self, words: Sequence[str]) -> dict[str, set[str]]:
        """field -> the terms of these content words that more than half the index's
        documents hold in that field: under Robertson and Sparck Jones's idf,
        ln((N - n + 0.5) / (n + 0.5)), evidence of nothing (at most 0), and most of the
        postings a long query's search visits (bench/README.md). N and n are the scoring's
        own (`scoring_statistics`). Fields with none are left out; an index that holds none
        of the words has none."""
        statistics = self.scoring_statistics(words)
        if statistics is None:
            return {}
        documents, _ = statistics
        found: dict[str, set[str]] = {}
        for field, terms in self.analysed(words).items():
            frequencies = self.doc_freqs(field, terms)
            common = {term for term, count in frequencies.items() if 2 * count > documents}
            if common:
                found[field] = common
        return found

    def scoring_statistics(self, words: Sequence[str]) -> tuple[int, float] | None:
        """(N, avgdl): the documents and their mean field length as this searcher's BM25
        takes them. Both count the entries of replaced and deleted documents until a merge
        drops them, as the document frequencies do, so they can differ from the live count
        (`num_docs`) and from the store's own lengths. tantivy-py gives neither: they are
        read once per searcher from tantivy's explanation of one hit for the rarest term
        of these words that the index holds. Both fields hold one term per word, so they
        have the same mean length. None when the index holds no term of them, or tantivy's
        explanation does not name them."""
        if self._scoring is not None:
            return self._scoring
        candidates = []
        for field, terms in self.analysed(words).items():
            frequencies = self.doc_freqs(field, terms)
            candidates += [(count, field, term) for term, count in frequencies.items() if count > 0]
        if not candidates:
            return None
        _, field, term = min(candidates)
        query = tantivy.Query.term_query(self._schema, field, term, index_option="freq")
        try:
            searcher = self._index.searcher()
            hits = searcher.search(query, 1, count=False).hits
            if not hits:
                return None
            explained = json.loads(query.explain(searcher, hits[0][1]).to_json())
        except ValueError as exc:
            raise StoreError(f"cannot read term statistics: {exc}") from None
        values = dict(_explained_values(explained))
        documents, average = values.get("N, total number of docs"), values.get("avgdl, average length of field")
        if documents is None or average is None:
            return None  # another tantivy's wording: the store searches every clause, as before
        self._scoring = (int(documents), float(average))
        return self._scoring

    def _query(self, words: Sequence[str], leave_out: Mapping[str, AbstractSet[str]]) -> tantivy.Query | None:
        """One should-clause per (field, distinct analysed word), boosted by its count,
        but for the terms `leave_out` names in that field."""
        clauses = []
        # Not `stem_words`: a service would remember every word of every query.
        for field, terms in self.analysed(words).items():
            boost = dict(SEARCH_FIELDS)[field]
            left_out = leave_out.get(field, frozenset())
            for term, count in Counter(terms).items():
                if term in left_out:
                    continue
                clause = tantivy.Query.term_query(self._schema, field, term, index_option="freq")
                clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(clause, boost * count)))
        return tantivy.Query.boolean_query(clauses) if clauses else None

    # --- writing ---------------------------------------------------------------------

    def segments(self) -> int:
        """How many segments a search reads (each one searched on its own: fewer is faster)."""
        return int(self._index.searcher().num_segments)

    @property
    def _holder_file(self) -> Path:
        """Who holds the writer (`RunClaim`), for the message that refuses another: beside
        the index, not in it (tantivy manages the files of its directory)."""
        return self.directory.parent / "writer.json"

    @property
    def holds_writer(self) -> bool:
        """Has this object the writer (and tantivy's lock)?"""
        return self._writer is not None

    def open_writer(self, heap_bytes: int = WRITER_HEAP_BYTES, by: str = "reranker index") -> tantivy.IndexWriter:
        """This index's writer, taking tantivy's lock on first use (StoreError naming the
        holder if taken); `heap_bytes` is the memory of a writer this call opens, `by` the
        command it writes for."""
        with self._lock:
            if self._writer is None:
                try:
                    self._writer = self._index.writer(heap_bytes, 1)
                except ValueError as exc:
                    if "lock" in str(exc).lower():
                        raise StoreError(claimed_message(
                            f"the index in {self.directory.parent}", self._holder(),
                            "try again when it has ended (a run that was killed holds nothing: tantivy's lock goes with its process)",
                        )) from None
                    raise self._write_error(exc) from None
                # Lost with the process if it is killed: the next writer writes its own.
                with contextlib.suppress(OSError):
                    self._holder_file.write_text(json.dumps(RunClaim.mine(by).to_json()))
            return self._writer

    def _holder(self) -> RunClaim | None:
        try:
            return RunClaim.from_json(json.loads(self._holder_file.read_text()))
        except (OSError, ValueError):
            return None  # not written yet, or never: the message says "another process"

    def replace(self, entries: Iterable[tuple[int, str, str, str]], dropping: Iterable[int] = ()) -> None:
        """Add (rowid, id, content words, their stems) entries, each replacing the entry
        under its row id, after dropping the entries under the row ids `dropping`. The
        words and the stems (`stem_words` of the words) are joined by spaces. Nothing is
        visible until `commit`. Raises StoreError (StoreFullError on a full disk: the
        writer writes segments to disk as its memory fills).
        """
        writer = self.open_writer()
        try:
            for rowid in dropping:
                writer.delete_documents_by_query(tantivy.Query.term_query(self._schema, "rowid", rowid))
            for rowid, doc_id, words, stems in entries:
                writer.delete_documents_by_query(tantivy.Query.term_query(self._schema, "rowid", rowid))
                document = tantivy.Document()
                document.add_unsigned("rowid", rowid)
                document.add_text("id", doc_id)
                document.add_text("stemmed", stems)
                document.add_text("exact", words)
                writer.add_document(document)
        except ValueError as exc:
            raise self._write_error(exc) from None

    def delete_rows(self, *, above: int | None = None, upto: int | None = None) -> None:
        """Drop the entries whose row id is above `above`, or at most `upto` (give one
        of them; visible at `commit`)."""
        if (above is None) == (upto is None):
            raise ValueError("delete_rows takes one of `above` and `upto`")
        unsigned = tantivy.FieldType.Unsigned
        if above is not None:
            query = tantivy.Query.range_query(self._schema, "rowid", unsigned, above, None, include_lower=False)
        else:
            query = tantivy.Query.range_query(self._schema, "rowid", unsigned, None, upto)
        try:
            self.open_writer().delete_documents_by_query(query)
        except ValueError as exc:
            raise self._write_error(exc) from None

    def delete_all(self) -> None:
        """Drop every document (visible at `commit`)."""
        try:
            self.open_writer().delete_all_documents()
        except ValueError as exc:
            raise self._write_error(exc) from None

    def commit(self) -> None:
        """Persist and publish what was written since the last commit. Raises StoreError
        (StoreFullError on a full disk)."""
        if self._writer is None:
            return
        try:
            self._writer.commit()
        except ValueError as exc:
            raise self._write_error(exc) from None
        self._index.reload()
        self._doc_freqs = {}
        self._scoring = None

    def rollback(self) -> None:
        """Forget what was written since the last commit."""
        if self._writer is not None:
            try:
                self._writer.rollback()
            except ValueError as exc:
                raise self._write_error(exc) from None

    def _write_error(self, exc: ValueError) -> StoreError:
        """The StoreError for a failed write; StoreFullError when the disk is full. Once
        a write of tantivy's worker thread has failed, later calls say only that the
        writer was killed: the free space tells why."""
        message = str(exc)
        if any(sign in message for sign in ("os error 28", "os error 122", "StorageFull", "QuotaExceeded")):
            return full_disk(f"cannot write to the text index in {self.directory}", "no space left on device")
        if "writer was killed" in message and free_bytes(self.directory) < NEARLY_FULL:
            return full_disk(f"cannot write to the text index in {self.directory}", f"{free_bytes(self.directory):,} bytes free")
        return StoreError(f"cannot write to the text index: {message}")

    def close_writer(self) -> None:
        """Commit, let pending segment merges finish, and release the writer's lock (also
        when the commit fails: the uncommitted entries are then lost)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is None:
            return
        holder = self._holder()
        if holder is not None and holder.pid == os.getpid():
            with contextlib.suppress(OSError):
                self._holder_file.unlink()
        try:
            writer.commit()
            writer.wait_merging_threads()
        except ValueError as exc:
            raise self._write_error(exc) from None
        finally:
            del writer  # tantivy releases the lock when the writer is dropped
        self._index.reload()


def full_disk(failed: str, detail: str) -> StoreFullError:
    """What a write to either half of the embedded store says when the disk is full."""
    return StoreFullError(f"{failed}: the disk is full ({detail}); what was indexed before is kept: free some space and run again")


def free_bytes(directory: Path) -> int:
    """Free space where `directory` is (NEARLY_FULL when that cannot be read)."""
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return NEARLY_FULL
