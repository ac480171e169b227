"""What the index stores for a text, whoever reads it: its topics of both kinds, and the
centering the corrected ones are made with.

The paper's topics of a text's content words (`document_topics`), the common-direction
correction an index records (`estimate_centering` from its documents; `prior_centering` and
`window_background` for texts scored before any index exists), and the corrected topics of
the words that read as words (`Correction`, `corrected_topics`). Both paths use it: the write
path (`reranker.indexing`) stores what it gives for each document, and the read path
(`reranker.pipeline`) gives a text sent with a query the same topics, so that the two are
scored alike. It sits between the numeric core (`reranker.topics`: the formulas on arrays)
and those two paths, so the read path never loads the write path (its corpus reading,
worker processes and Doc2Vec) to learn what a text's topics are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from reranker.embeddings import WordVectors
from reranker.errors import IndexMismatchError
from reranker.text import readable_words, tokenize
from reranker.topics import center, corpus_centering, extract_topic_pair, extract_topics, unit_rows
from reranker.types import Centering, CorrectedTopics, DocTopics, Document, FloatArray


def document_topics(
    document: Document, vectors: WordVectors, k: int, stopwords: frozenset[str] | None = None
) -> tuple[DocTopics, int, int]:
    """Topics of one document -> (topics, in-vocabulary tokens, out-of-vocabulary tokens)."""
    topics, n_tokens, oov, _ = topics_of_tokens(tokenize(document.full_text, stopwords), vectors, k, None)
    return topics, n_tokens, oov


# --- the common-direction correction -----------------------------------------------

# A topic's background is measured on the corpus's most frequent words: 1,000 hold 66-70%
# of the shared data sets' tokens and gave the same nDCG@10 as the whole vocabulary (within
# 0.01 on both sets, GloVe), for a small part of the indexing cost.
BACKGROUND_WORDS = 1_000


def estimate_centering(
    documents: Iterable[Document], vectors: WordVectors, stopwords: frozenset[str] | None = None
) -> Centering | None:
    """The correction an index built from `documents` uses (None: no in-vocabulary word).

    p(w) is each in-vocabulary word's share of the documents' tokens (after the stop
    list); see `reranker.topics.corpus_centering` and `Centering`.
    """
    counts: Counter[str] = Counter()
    for document in documents:
        counts.update(tokenize(document.full_text, stopwords))
    return _centering_of(counts, vectors)


# Texts scored before any index exists (the rerank routes of a service with nothing indexed,
# in front of a cluster whose documents it never saw) have no corpus to estimate p(w) from.
# The two halves of the correction are then estimated apart, each from what stands for it:
# - the common direction (mu, u) is the vectors' own, whatever the corpus (it was 0.85-0.88
#   cosine to both shared data sets' own mu): p(w) from the vectors' frequency order, as
#   word-vector files list their words most frequent first and Zipf's law puts a word's
#   frequency at about 1 / its rank. The first 50,000 words hold all but the rarest tail.
# - the background is the collection's own word distribution, of which the window's texts
#   are the one sample there is (`window_background`). The vectors' own (news: "said",
#   "year", "percent") made CL-SciSumm's 100-hit windows 0.706 against BM25's 0.721; the
#   window's, 0.730 (docs/rankers-and-evaluation.md, "Every way in").
PRIOR_WORDS = 50_000


def prior_centering(vectors: WordVectors, stopwords: frozenset[str] | None = None) -> Centering | None:
    """The correction for texts when there is no index: `estimate_centering`'s, with p(w)
    proportional to 1 / rank among the vectors' first PRIOR_WORDS words (the content words
    `tokenize` keeps; each keeps its rank in the file's order)."""
    counts = {
        word: 1.0 / rank
        for rank, word in enumerate(vectors.leading_words(PRIOR_WORDS), start=1)
        if tokenize(word, stopwords) == [word]
    }
    return _centering_of(counts, vectors)


def window_background(word_ids: Sequence[npt.NDArray[np.int32]], vectors: WordVectors, centering: Centering) -> Centering:
    """`centering` with the background of some texts' own word distribution (the
    BACKGROUND_WORDS most frequent of their content words with vectors, `word_ids` holding
    each text's, as `WordVectors.word_ids` gives them), as an index built from them would
    have; `centering` itself when they hold no such word."""
    rows = np.concatenate(word_ids) if word_ids else np.zeros(0, np.int32)
    if rows.size == 0:
        return centering
    distinct, counts = np.unique(rows, return_counts=True)
    # The most frequent first; ties in the vectors' own frequency order (their rows).
    top = np.argsort(-counts, kind="stable")[:BACKGROUND_WORDS]
    words, weights = _background_of(vectors.words_of(distinct[top]), counts[top].astype(np.float64))
    return replace(centering, background_words=words, background_weights=weights)


def _centering_of(counts: Mapping[str, float], vectors: WordVectors) -> Centering | None:
    """The centering for words occurring `counts` times (any positive scale); None when no
    word has a vector."""
    found = vectors.lookup(list(counts))
    if not found.words:
        return None
    frequencies = np.array([counts[word] for word in found.words], dtype=np.float64)
    mu, direction = corpus_centering(found.vectors, frequencies)
    words, weights = _background_of(found.words, frequencies)
    return Centering(
        mu=tuple(float(x) for x in mu),
        direction=tuple(float(x) for x in direction),
        background_words=words,
        background_weights=weights,
    )


def _background_of(words: Sequence[str], frequencies: npt.NDArray[np.float64]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The BACKGROUND_WORDS most frequent of `words` and their shares among them."""
    top = np.argsort(-frequencies, kind="stable")[:BACKGROUND_WORDS]
    weights = frequencies[top] / frequencies[top].sum()
    return tuple(words[i] for i in top), tuple(float(x) for x in weights)



@dataclass(frozen=True)
class Correction:
    """A `Centering` made ready for extraction: arrays, and the background words' centred
    unit vectors as the columns of a (d, u) matrix, with their weights (u,)."""

    mu: FloatArray
    direction: FloatArray
    # (d, u), not (u, d): OpenBLAS multiplies a document's topics (k, d) by a contiguous
    # (d, u) matrix 1.7-2.8x faster than by the transpose of a (u, d) one (15 topics, 1,000
    # words: 15 against 42 us at d = 50, 144 against 246 us at d = 300), and that product
    # is most of the backgrounds' cost.
    background_columns: FloatArray
    background_weights: FloatArray

    @classmethod
    def of(cls, centering: Centering, vectors: WordVectors) -> "Correction":
        mu = np.asarray(centering.mu, dtype=np.float32)
        direction = np.asarray(centering.direction, dtype=np.float32)
        if mu.shape != (vectors.dim,) or direction.shape != (vectors.dim,):
            raise IndexMismatchError(
                f"the index's centering has d={mu.shape[0]}, the word vectors d={vectors.dim}; "
                "rebuild the index (reranker index --rebuild)"
            )
        known = vectors.lookup(list(centering.background_words))
        weight_of = dict(zip(centering.background_words, centering.background_weights))
        weights = np.array([weight_of[word] for word in known.words], dtype=np.float32)
        columns = np.ascontiguousarray(unit_rows(center(known.vectors, mu, direction)).T)
        return cls(mu, direction, columns, weights)

    def topics(self, word_vectors: FloatArray, counts: FloatArray, k: int) -> CorrectedTopics:
        """The corrected topics of one document's distinct words (u, d) with their counts."""
        topics, importances = extract_topics(center(word_vectors, self.mu, self.direction), k, counts=counts)
        return self.with_backgrounds(topics, importances)

    def with_backgrounds(self, topics: FloatArray, importances: FloatArray) -> CorrectedTopics:
        # The background words are unit vectors already and their weights sum to 1: this is
        # `topic_background` without redoing either per document.
        backgrounds = np.clip(np.abs(topics @ self.background_columns) @ self.background_weights, 0.0, 1.0)
        return CorrectedTopics(topics, importances, backgrounds.astype(np.float32))


def corrected_topics(
    document: Document, vectors: WordVectors, k: int, correction: Correction, stopwords: frozenset[str] | None = None
) -> CorrectedTopics:
    """The corrected topics of one document (for a text sent to the service): of the words
    that read as words (see `topics_of_tokens`)."""
    return corrected_topics_of_words(readable_words(document.full_text, stopwords), vectors, k, correction)


def corrected_topics_of_words(readable: Sequence[str], vectors: WordVectors, k: int, correction: Correction) -> CorrectedTopics:
    """`corrected_topics` of a text's `readable_words`, already read."""
    lookup, counts, _ = vectors.lookup_counts(readable)
    return correction.topics(lookup.vectors, counts, k)


def topics_of_tokens(
    tokens: list[str], vectors: WordVectors, k: int, correction: Correction | None, readable: Counter[str] | None = None
) -> tuple[DocTopics, int, int, CorrectedTopics | None]:
    """The paper's topics of every content word (`tokens`) and, with `correction`, the
    corrected topics of those that read as words (`readable`: `readable_words` of the
    same text, counted).

    The paper's preprocessing stays the paper's. The default ranker's topics leave out
    variables, "et al.", PDF fragments and page numerals: with them, a paper's strongest
    topic can be "ek, lii, tot" (see docs/rankers-and-evaluation.md, "Towards a stronger
    default", for what this measured)."""
    lookup, counts, oov = vectors.lookup_counts(tokens)
    if correction is None:
        topics, importances = extract_topics(lookup.vectors, k, counts=counts)
        return DocTopics(topics, importances), len(tokens) - oov, oov, None
    assert readable is not None, "the corrected topics need the readable words"
    shaping = np.fromiter((readable[word] for word in lookup.words), dtype=np.float32, count=len(lookup.words))
    (topics, importances), centred = extract_topic_pair(
        lookup.vectors, k, counts, correction.mu, correction.direction, np.minimum(shaping, counts)
    )
    corrected = correction.with_backgrounds(*centred) if centred[0].shape[0] else None
    return DocTopics(topics, importances), len(tokens) - oov, oov, corrected
