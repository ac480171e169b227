"""BM25 outside the index, as the first stage scores: of texts sent to the service
(`bm25_of_texts`) and of a long document's best passage (`best_passage_bm25`, MaxP), each
with the index's statistics, so that a score means what the first stage's would.

Pure numpy: the stores read the words and statistics, these functions score them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from reranker.store.text_index import SEARCH_FIELDS, TextTerms, stable_hashes, term_hashes

# Lucene's and tantivy's BM25 constants.
BM25_K1 = 1.2
BM25_B = 0.75


def bm25_of_texts(
    query_counts: npt.ArrayLike,
    doc_freqs: npt.ArrayLike,
    documents: int,
    average_length: float,
    frequencies: npt.ArrayLike,
    lengths: npt.ArrayLike,
) -> npt.NDArray[np.float64]:
    """BM25 of n texts for a query of q distinct terms, with an index's statistics:

        sum_t c_t idf(t) (k1 + 1) f / (f + k1 (1 - b + b |text| / avgdl)),
        idf(t) = ln(1 + (N - df_t + 0.5) / (df_t + 0.5)),

    tantivy's formula (Lucene's since version 8 leaves out the constant factor k1 + 1),
    so a text scores about what it would if it were indexed (both quantise lengths).

    query_counts, doc_freqs: (q,) each term's count in the query (c_t) and how many of
    the index's `documents` (N) hold it; average_length: their mean length in terms.
    frequencies: (n, q) each term's count in each text (f); lengths: (n,) each text's
    length in terms. Returns (n,) float64.
    """
    counts = np.asarray(query_counts, dtype=np.float64)
    df = np.clip(np.asarray(doc_freqs, dtype=np.float64), 0, documents)
    idf = np.log1p((documents - df + 0.5) / (df + 0.5))
    length = np.asarray(lengths, dtype=np.float64)
    f = np.asarray(frequencies, dtype=np.float64).reshape(length.size, counts.size)
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / max(average_length, 1e-9))
    scores: npt.NDArray[np.float64] = (f * (BM25_K1 + 1.0) / (f + norm[:, None])) @ (counts * idf)
    return scores


def _field_norms() -> npt.NDArray[np.int64]:
    """The 256 lengths a document's field length is rounded down to in the index: one byte
    per document, as Lucene's `SmallFloat.intToByte4` packs it and tantivy keeps it
    (`FIELD_NORMS_TABLE`): exact below 40, then 4 significant bits. Byte b < 24 is b; else
    24 + (the 3 bits of b - 24 after a leading 1) shifted by ((b - 24) >> 3) - 1."""
    free = 24
    codes = np.arange(256 - free)
    bits, shift = codes & 7, (codes >> 3) - 1
    decoded = np.where(shift < 0, bits, (bits | 8) << np.maximum(shift, 0))
    return np.concatenate([np.arange(free), free + decoded]).astype(np.int64)


FIELD_NORMS = _field_norms()


def indexed_length(lengths: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Field lengths as the index keeps them (`FIELD_NORMS`, rounded down), so that a score
    computed here for an indexed document equals the first stage's."""
    rounded: npt.NDArray[np.int64] = FIELD_NORMS[np.searchsorted(FIELD_NORMS, np.asarray(lengths, dtype=np.int64), side="right") - 1]
    return rounded


def bm25_of_stored(texts: StoredWords, query: PassageQuery, average_length: float) -> npt.NDArray[np.float64]:
    """BM25 of whole indexed documents, from their stored words, for the query terms of
    `query` over both fields: what the first stage's clauses for those terms add to each
    document's score, with the index's rounded lengths (`indexed_length`) and its documents'
    `average_length`. (n,) float64.

    Over a large index the first stage searches a long query without its commonest terms
    (`TextIndex.common_terms`) and adds their share from here (a `PassageQuery` counting
    only those terms): tantivy visits every posting of a clause, and these clauses hold most of
    them (`EmbeddedStore._short_search_pays` says when that saves time)."""
    if not len(texts) or not query.words.size:
        return np.zeros(len(texts), dtype=np.float64)
    found, which = texts.occurrences(query.words)
    text_of = texts.text_of(found)
    # A word counts once in each field whose term it is; -1 (none) goes to a last column.
    columns = query.weights.size + 1
    slots = query.slots[which] % columns
    cells = np.concatenate([text_of * columns + slots[:, field] for field in range(slots.shape[1])])
    frequency = np.bincount(cells, weights=np.tile(texts.counts[found], slots.shape[1]), minlength=len(texts) * columns)
    frequency = frequency.reshape(len(texts), columns)[:, :-1]
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * indexed_length(texts.lengths) / max(average_length, 1e-9))
    scores: npt.NDArray[np.float64] = (frequency / (frequency + norm[:, None])) @ query.weights
    return scores


# Passages a long document is judged by besides its whole text ("MaxP": Callan 1994; Dai and
# Callan 2019): windows of this many terms, starting every PASSAGE_STRIDE terms.
PASSAGE_TERMS = 150
PASSAGE_STRIDE = 75


def passage_spans(length: int) -> list[tuple[int, int]]:
    """(start, end) word offsets of the passages of a text of `length` words, as
    `best_passage_bm25` cuts them: one passage when length <= PASSAGE_TERMS (none when the
    text has no words), else ceil((length - PASSAGE_TERMS) / PASSAGE_STRIDE) + 1 windows
    starting every PASSAGE_STRIDE words, the last one ending at the text's end."""
    if length <= PASSAGE_TERMS:
        return [(0, length)] if length else []
    count = -(-(length - PASSAGE_TERMS) // PASSAGE_STRIDE) + 1
    return [(i * PASSAGE_STRIDE, min(i * PASSAGE_STRIDE + PASSAGE_TERMS, length)) for i in range(count)]


def mean_passage_length(lengths: npt.NDArray[np.int64]) -> float:
    """The mean length of the passages of texts of these `lengths`, as `passage_spans` cuts
    them (0 when none has a word): a text of L > PASSAGE_TERMS words has P =
    ceil((L - PASSAGE_TERMS) / PASSAGE_STRIDE) + 1 passages holding L + (P - 1) x
    (PASSAGE_TERMS - PASSAGE_STRIDE) words in all, its overlaps counted twice. The count
    `EmbeddedStore._statistics` takes in SQL over the index (where no text is empty), for
    texts sent with nothing indexed."""
    lengths = np.asarray(lengths, dtype=np.int64)
    long = lengths > PASSAGE_TERMS
    passages = np.where(long, -(-(lengths - PASSAGE_TERMS) // PASSAGE_STRIDE) + 1, (lengths > 0).astype(np.int64))
    words = np.where(long, lengths + (passages - 1) * (PASSAGE_TERMS - PASSAGE_STRIDE), lengths)
    count = int(passages.sum())
    return float(words.sum()) / count if count else 0.0


_FILTER_SIZE = 1 << 16


@dataclass(frozen=True)
class PassageQuery:
    """What a query counts in a passage, over both of the first stage's fields: a word of
    the text counts as its exact term and, through its stem, as a stemmed term.

    words: (m,) the distinct words it looks for, as `stable_hashes` of a text's words;
    slots: (m, 2) the query term each word counts as in the exact and the stemmed field
    (an index into `weights`; -1: none); weights: (s,) each query term's count x idf x
    (k1 + 1) x its field's boost, with its field's document frequency; terms: (s,) the
    (field, term) each weight is for.
    """

    words: npt.NDArray[np.int32]
    slots: npt.NDArray[np.intp]
    weights: npt.NDArray[np.float64]
    terms: tuple[tuple[str, str], ...]

    def counting(self, only: Mapping[str, AbstractSet[str]]) -> PassageQuery:
        """The same query with only these terms (field -> terms) counted, the rest weighing
        0: the first stage's share of its common terms. The words looked for stay the whole
        query's, so that the share and the best passage find them once
        (`StoredWords.occurrences`) and the best passage reuses this query's words and slots."""
        counted = np.array([term in only.get(field, ()) for field, term in self.terms], dtype=np.float64)
        return replace(self, weights=self.weights * counted)


def passage_query(
    exact: Mapping[str, int],
    stemmed: Mapping[str, int],
    doc_freqs: Mapping[str, Mapping[str, int]],
    documents: int,
    vocabulary: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]],
) -> PassageQuery:
    """A `PassageQuery` for a query's terms per field with their counts (`exact`: its
    words; `stemmed`: their stems), `doc_freqs` per field and term among the index's
    `documents`. vocabulary: (words, stems), hashed pairs giving the stem of each word a
    text may hold; pairs whose stem the query lacks are ignored, so more do no harm.
    """
    exact_terms, stem_terms = list(exact), list(stemmed)
    counts = np.array([exact[t] for t in exact_terms] + [stemmed[t] for t in stem_terms], dtype=np.float64)
    df = np.array(
        [doc_freqs["exact"].get(t, 0) for t in exact_terms] + [doc_freqs["stemmed"].get(t, 0) for t in stem_terms],
        dtype=np.float64,
    )
    df = np.clip(df, 0, documents)
    boost = dict(SEARCH_FIELDS)
    boosts = np.array([boost["exact"]] * len(exact_terms) + [boost["stemmed"]] * len(stem_terms))
    weights = boosts * counts * np.log1p((documents - df + 0.5) / (df + 0.5)) * (BM25_K1 + 1.0)
    # Which vocabulary words have one of the query's stems, by sorted search: a loop over
    # the pairs took 0.15 ms per summary (460 pairs).
    exact_words, stem_hashes = stable_hashes(exact_terms), stable_hashes(stem_terms)
    words, stems = vocabulary
    nearest = np.zeros(words.size, dtype=np.intp)
    if stem_hashes.size:
        by_stem = np.argsort(stem_hashes)
        nearest = by_stem[np.minimum(np.searchsorted(stem_hashes[by_stem], stems), stem_hashes.size - 1)]
    held = stem_hashes[nearest] == stems if stem_hashes.size else np.zeros(words.size, dtype=bool)
    distinct = np.unique(np.concatenate([exact_words, words[held]]))
    slots = np.full((distinct.size, 2), -1, dtype=np.intp)
    slots[np.searchsorted(distinct, exact_words), 0] = np.arange(len(exact_terms))
    slots[np.searchsorted(distinct, words[held]), 1] = len(exact_terms) + nearest[held]
    terms = tuple(("exact", t) for t in exact_terms) + tuple(("stemmed", t) for t in stem_terms)
    return PassageQuery(distinct.astype(np.int32), slots, weights, terms)


def window_passage_bm25(asked: Mapping[str, Mapping[str, int]], texts: Sequence[TextTerms]) -> list[float]:
    """`best_passage_bm25` of texts no index holds, for the query terms `asked` (field ->
    term -> count), with the texts' own statistics: how many there are, how many hold each
    term in each field, their passages' mean length (what a store whose whole index they
    were would give them). A caller that sends texts and nothing else (a cluster's rerank
    call to a service with nothing indexed) has no better estimate of its collection. A
    text without a content word is not counted (indexing would skip it) and scores 0."""
    counted = sum(1 for found in texts if found.length)
    if not counted:
        return [0.0] * len(texts)
    doc_freqs: dict[str, dict[str, int]] = {}
    for field, counts in asked.items():
        distinct = list(counts)
        hashes = term_hashes(distinct)
        held = np.count_nonzero(np.stack([found.frequencies(field, hashes) for found in texts]), axis=0)
        doc_freqs[field] = dict(zip(distinct, held.tolist()))
    words = np.concatenate([found.passages.words for found in texts])
    stems = np.concatenate([found.passages.stems for found in texts])
    # Only the texts' words whose stem the query holds: passage_query's sorted search over
    # all of them (88,000 for 100 long papers, one text's vocabulary after another) took
    # 5.0 ms a summary, against 1.4 ms with `_occurrences`' filter first (the same query).
    # Sorted, as they were: of two words with one hash, the last keeps its slot.
    sought = np.sort(_occurrences(stems, stable_hashes(list(asked["stemmed"])))[0])
    query = passage_query(asked["exact"], asked["stemmed"], doc_freqs, counted, (words[sought], stems[sought]))
    passages = StoredWords([found.passages.positions for found in texts])
    average = mean_passage_length(np.array([found.length for found in texts], dtype=np.int64))
    return [float(score) for score in best_passage_bm25(passages, query, average)]


def best_passage_bm25(texts: StoredWords, query: PassageQuery, average_length: float) -> npt.NDArray[np.float64]:
    """BM25 of each text's best passage: (n,) float64.

    Passages are windows of PASSAGE_TERMS words starting every PASSAGE_STRIDE (a text
    shorter than one is one passage; the last starts where its window reaches the end),
    each scored with `bm25_of_texts`' formula over both fields as the first stage scores a
    document (a passage is as long in either field), the documents' idf and the index's
    passages' `average_length`, as BM25 takes the average length of what it scores (about
    PASSAGE_TERMS over long papers; over abstracts shorter than one passage, their mean
    length, so that each one's single passage scores as the abstract does in the first
    stage); a text scores its best passage's score (an empty one, 0). Scores are computed
    in float32 (relative error about 1e-6): half the memory traffic, 5.6 ms against 8.8 ms
    for a window of 100 long papers when their words were read in text order.
    """
    if not len(texts) or not query.words.size or not texts.lengths.sum():
        return np.zeros(len(texts), dtype=np.float64)
    lengths = texts.lengths
    # Counted per block of PASSAGE_STRIDE words: with PASSAGE_TERMS twice the stride,
    # passage j of a text is its blocks j and j + 1, so each word is counted once (not
    # once per passage holding it) and a passage's counts are two rows added. Each text's
    # blocks are rows of one table, followed by a row of zeros (the block after its last;
    # an empty text has one empty block), and one more row ends the table.
    blocks = -(-lengths // PASSAGE_STRIDE)
    rows = np.maximum(blocks, 1) + 1
    first_row = np.cumsum(rows) - rows
    table, weights = _block_counts(texts, query, first_row, int(rows.sum()) + 1)
    # Row r's passage is blocks r and r + 1: a text's passages are its first rows; the
    # rest (its last block alone, its row of zeros with the next text's first block) are
    # scored too, as slices cost less than picking the passages out, and left out below.
    frequency = table[:-1] + table[1:]
    of_row = np.repeat(np.arange(len(texts)), rows)
    starts = (np.arange(frequency.shape[0]) - first_row[of_row]) * PASSAGE_STRIDE
    sizes = np.clip(lengths[of_row] - starts, 0, PASSAGE_TERMS)
    norm = (BM25_K1 * (1.0 - BM25_B + BM25_B * sizes / max(average_length, 1e-9))).astype(np.float32)
    frequency /= frequency + norm[:, None]
    scores = frequency @ weights.astype(np.float32)
    # A text shorter than one passage is one passage (an empty one too: it scores 0); the
    # last passage starts where its window reaches the end.
    passages = np.where(lengths <= PASSAGE_TERMS, 1, blocks - 1)
    best: npt.NDArray[np.float64] = np.maximum.reduceat(
        scores.astype(np.float64), np.stack([first_row, first_row + passages], axis=1).ravel()
    )[::2]
    return best


def _block_counts(
    texts: StoredWords, query: PassageQuery, first_row: npt.NDArray[np.int64], table_rows: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    """How often each query term occurs in each block of PASSAGE_STRIDE words of the texts
    (text i's block b: row first_row[i] + b): (table_rows, c) float32, with the c terms'
    weights (`_present_terms`)."""
    # The whole window at once: a loop over its documents cost 80 us each in numpy's
    # per-call overhead, 8 ms for 100 abstracts.
    found, which = texts.occurrences(query.words)
    slots, weights = _present_terms(query, which)
    columns = weights.size
    # The found words' positions: the `counts` of each text's words, laid end to end,
    # say where each word's positions start in the texts' positions laid end to end.
    found_counts = texts.counts[found].astype(np.intp)
    positions = texts.positions[_ranges(texts.position_ends[found] - found_counts, found_counts)]
    block_cells = np.repeat(first_row[texts.text_of(found)] * columns, found_counts) + (positions // PASSAGE_STRIDE).astype(np.intp) * columns
    # A found word counts once in each field whose term it is (a last column takes the
    # fields where it is none, and the stemmed terms counted in an exact term's column:
    # cheaper counted than left out).
    cells = np.concatenate([block_cells + np.repeat(slots[which, field], found_counts) for field in range(slots.shape[1])])
    # Added into float32 in place (`ufunc.at`, fast for this since numpy 1.25): bincount's
    # int64 counts, then converted, cost twice the memory traffic (0.9x the whole function).
    table = np.zeros(table_rows * columns, dtype=np.float32)
    np.add.at(table, cells, np.float32(1.0))
    return table.reshape(table_rows, columns), weights


class StoredWords:
    """Texts' words as the store keeps them (`WordPositions.to_bytes`; b"": no words),
    laid end to end once for all that a window's scores read from them: the first stage's
    share of its common terms (`bm25_of_stored`), then the best passage (`best_passage_bm25`),
    which find the query's words in them once (`occurrences`).

    words, counts, positions: every text's, one after the other; distinct, lengths: (n,) how
    many distinct words and how many words each text has.
    """

    def __init__(self, texts: Sequence[bytes]) -> None:
        self.words, self.counts, self.positions, self.distinct, self.lengths = _laid_end_to_end(texts)
        self._word_ends = np.cumsum(self.distinct)
        self._found: tuple[bytes, tuple[npt.NDArray[np.intp], npt.NDArray[np.int32]]] | None = None

    def __len__(self) -> int:
        return int(self.distinct.size)

    def occurrences(self, wanted: npt.NDArray[np.int32]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int32]]:
        """Where `words` holds one of the distinct `wanted` words: (indices, which word);
        the last answer is kept (callers read it and do not change it)."""
        key = wanted.tobytes()
        found = self._found
        if found is None or found[0] != key:
            found = self._found = (key, _occurrences(self.words, wanted))
        return found[1]

    def text_of(self, indices: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """Which text each of these indices into `words` belongs to."""
        found: npt.NDArray[np.intp] = np.searchsorted(self._word_ends, indices, side="right")
        return found

    @property
    def position_ends(self) -> npt.NDArray[np.int64]:
        """Where each word's positions end in `positions` (they start `counts` before)."""
        ends: npt.NDArray[np.int64] = np.cumsum(self.counts, dtype=np.int64)
        return ends


def _laid_end_to_end(
    texts: Sequence[bytes],
) -> tuple[
    npt.NDArray[np.int32], npt.NDArray[np.unsignedinteger[Any]], npt.NDArray[np.unsignedinteger[Any]], npt.NDArray[np.int64], npt.NDArray[np.int64]
]:
    """Texts kept as `WordPositions.to_bytes` laid end to end: (words, counts, positions)
    of all, and (n,) how many distinct words and how many words each text has. One join
    per array: three arrays made per text cost 7 us each, 0.7 ms per window of 100."""
    headers = [struct.unpack_from("=ii", text) if text else (0, 2) for text in texts]
    distinct = np.array([words for words, _ in headers], dtype=np.int64)
    views = [memoryview(text) for text in texts]
    words = np.frombuffer(b"".join(view[8 : 8 + 4 * n] for view, (n, _) in zip(views, headers)), dtype=np.int32)
    if all(size == 2 for _, size in headers):
        counts: npt.NDArray[np.unsignedinteger[Any]] = np.frombuffer(
            b"".join(view[8 + 4 * n : 8 + 6 * n] for view, (n, _) in zip(views, headers)), dtype=np.uint16
        )
        positions: npt.NDArray[np.unsignedinteger[Any]] = np.frombuffer(
            b"".join(view[8 + 6 * n :] for view, (n, _) in zip(views, headers)), dtype=np.uint16
        )
    else:  # a text of 65,536 words or more keeps 4 bytes a position: all are read as 4
        kinds = [np.dtype(np.uint16 if size == 2 else np.uint32) for _, size in headers]
        counts = np.concatenate(
            [np.frombuffer(view[8 + 4 * n : 8 + (4 + size) * n], dtype=kind) for view, (n, size), kind in zip(views, headers, kinds)]
        ).astype(np.uint32)
        positions = np.concatenate(
            [np.frombuffer(view[8 + (4 + size) * n :], dtype=kind) for view, (n, size), kind in zip(views, headers, kinds)]
        ).astype(np.uint32)
    lengths = np.array([(len(view) - 8 - (4 + size) * n) // size if view.nbytes else 0 for view, (n, size) in zip(views, headers)], dtype=np.int64)
    return words, counts, positions, distinct, lengths


def _present_terms(query: PassageQuery, which: npt.NDArray[np.int32]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """The query's terms some found word counts as, and a last one of weight 0 for a field
    where a word counts as none: (slots (m, 2) as in `PassageQuery` renumbered, weights).
    A window of long papers holds about 85% of a summary's terms: the table is as much smaller.

    A stemmed term whose only form found in the texts is an exact query term is counted in
    that term's column: the two columns would be equal in every block, and one weighing
    both scores the same, w_e s(f) + w_s s(f) = (w_e + w_s) s(f) (a summary's window of
    long papers: 81 columns instead of 104)."""
    terms = query.weights.size
    none = terms
    seen = np.bincount(which, minlength=query.words.size) > 0
    slots = query.slots % (terms + 1)  # -1 (none) marks the extra last entry
    forms = np.bincount(slots[seen, 1], minlength=terms + 1)
    folded = seen & (slots[:, 0] != none) & (slots[:, 1] != none) & (forms[slots[:, 1]] == 1)
    weights = query.weights.copy()
    weights[slots[folded, 0]] += query.weights[slots[folded, 1]]  # an exact term is one word's: no repeats
    slots[folded, 1] = none
    present = np.zeros(terms + 1, dtype=bool)
    present[slots[seen].ravel()] = True
    present[none] = False
    kept = np.flatnonzero(present)
    renumbered = np.full(terms + 1, kept.size, dtype=np.intp)
    renumbered[kept] = np.arange(kept.size)
    return renumbered[slots], np.append(weights[kept], 0.0)


def _ranges(starts: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """starts[0], ..., starts[0] + sizes[0] - 1, starts[1], ...: the indices of the ranges
    laid end to end, without a loop."""
    ends = np.cumsum(sizes)
    steps: npt.NDArray[np.int64] = np.repeat(starts - (ends - sizes), sizes) + np.arange(int(ends[-1]) if ends.size else 0)
    return steps


def _occurrences(tokens: npt.NDArray[np.int32], wanted: npt.NDArray[np.int32]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int32]]:
    """Where `tokens` holds one of the distinct `wanted` words: (positions, which word).

    A table indexed by a word's low 16 bits names the one wanted word a position can be,
    and one comparison settles it. Wanted words whose low bits agree (a query of 266 words
    and their forms: 4 times in 10) share a table entry: only the positions with such
    low bits that the entry's word does not match are looked up again, by binary search.
    """
    keys = wanted & np.int32(_FILTER_SIZE - 1)
    column = np.full(_FILTER_SIZE, -1, dtype=np.int32)
    column[keys] = np.arange(wanted.size, dtype=np.int32)
    # The low 16 bits as a view where they are the first of each 4 bytes: 1.0 ms against
    # 1.4 ms for masking a window of 100 long papers' 290,000 words.
    low_bits = tokens.view(np.uint16)[::2] if np.little_endian else tokens & np.int32(_FILTER_SIZE - 1)
    candidate = np.take(column, low_bits)
    near = np.flatnonzero(candidate >= 0)
    which = candidate[near]
    match = wanted[which] == tokens[near]
    distinct, repeats = np.unique(keys, return_counts=True)
    if (repeats == 1).all():
        return near[match], which[match]
    shared = np.zeros(_FILTER_SIZE, dtype=bool)
    shared[distinct[repeats > 1]] = True
    missed = near[~match]
    again = missed[shared[low_bits[missed]]]
    order = np.argsort(wanted)
    ordered = wanted[order]
    slots = np.minimum(np.searchsorted(ordered, tokens[again]), ordered.size - 1)
    hit = ordered[slots] == tokens[again]
    return np.concatenate([near[match], again[hit]]), np.concatenate([which[match], order[slots[hit]].astype(np.int32)])
