"""Small immutable values passed between the layers.

Arrays inside these dataclasses are treated as read-only by convention; nothing in the
package mutates an array it did not allocate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class EmbeddingInfo:
    """Which word vectors produced a set of topics: an index records it, a query checks it.

    source: how to open the same vectors again (the bundled name, or a format-prefixed
    absolute path), so later commands use the index's vectors without being told. Not
    part of identity: the checksum says whether two vectors are the same.
    """

    name: str
    dim: int
    checksum: str
    source: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class StopListInfo:
    """Which stop list an index's words were read with: an index records it, a query, a
    later index run and compaction check it (`reranker.text.stop_list_info`).

    checksum: sha256 of the list's words, sorted, one per line. source: where the list
    came from, for messages ("the stop list in FILE", "the bundled stop list"); not part of
    identity.
    """

    checksum: str
    source: str = field(default="", compare=False)

    def to_json(self) -> dict[str, str]:
        return {"checksum": self.checksum, "source": self.source}

    @classmethod
    def from_json(cls, raw: object) -> "StopListInfo | None":
        """The record as an index's metadata holds it; None when absent or unreadable
        (an index built before indexes recorded their stop list)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("checksum"), str):
            return None
        return cls(raw["checksum"], str(raw.get("source") or ""))


@dataclass(frozen=True)
class Document:
    """A corpus record: `id`, `title`, `text`, plus any other string fields."""

    id: str
    title: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def full_text(self) -> str:
        """Title and body as one text, the input to both BM25 and topic extraction."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class DocTopics:
    """A document's hidden topics.

    topics: (k, d) float32, orthonormal rows, most important first (k may be 0).
    importances: (k,) float32, non-negative, summing to 1 (empty when k == 0).
    """

    topics: FloatArray
    importances: FloatArray

    @property
    def k(self) -> int:
        return int(self.importances.shape[0])


@dataclass(frozen=True)
class Query:
    """A summary query after preprocessing.

    vectors: (m, d) float32, one row per in-vocabulary word occurrence (`words`).
    oov: the query words that have no vector (skipped).
    """

    text: str
    words: tuple[str, ...]
    vectors: FloatArray
    oov: tuple[str, ...]
    # Every token after the stop list, in order, known to the word vectors or not
    # (Doc2Vec has its own vocabulary).
    tokens: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredDocument:
    """What the write path hands to a store for one document."""

    document: Document
    doc_topics: DocTopics
    content_hash: str
    n_tokens: int
    n_oov: int
    # The document's content words (`reranker.text.tokenize` of its full text) joined by
    # spaces, when the write path has them already: a store that indexes words takes
    # them instead of tokenizing the text a second time. None: the store tokenizes.
    content_words: str | None = None
    # The topics of the document's centred word vectors and each one's background
    # relevance (k,), for the corrected ranker; None in an index without a `Centering`.
    corrected: "CorrectedTopics | None" = None
    # The content words' stems, joined by spaces, for a store whose text index asks the
    # write path for them (`Store.word_stemmer`); None: the store stems them itself.
    stemmed_words: str | None = None
    # With the stems: what such a store keeps of the words for best passages
    # (`reranker.store.text_index.passage_words`), made in the topic workers too; None:
    # the store makes it.
    passage_words: "PassageWords | None" = None


@dataclass(frozen=True)
class PassageWords:
    """A document's words as a store keeps them for its best passages: positions, the
    bytes of `WordPositions.to_bytes`; words, stems: (u,) int32, its distinct words and the
    stem of each, as `stable_hashes`."""

    positions: bytes
    words: npt.NDArray[np.int32]
    stems: npt.NDArray[np.int32]


@dataclass(frozen=True)
class CorrectedTopics:
    """A document's topics after the common-direction correction, with backgrounds.

    topics (k, d) and importances (k,) as `DocTopics`, of the centred word vectors;
    backgrounds (k,) float32 in [0, 1]: each topic's relevance to the corpus's own words.
    """

    topics: FloatArray
    importances: FloatArray
    backgrounds: FloatArray


@dataclass(frozen=True)
class Candidate:
    """One BM25 hit: the first-stage result a reranker reorders."""

    doc_id: str
    bm25_score: float
    bm25_rank: int  # 1-based
    title: str = ""


@dataclass(frozen=True)
class WriteFailure:
    """A document a store did not write, and why (the cluster's reason, or ours)."""

    doc_id: str
    reason: str


FILTER_OPS = ("eq", "gt", "gte", "lt", "lte")
# The longest string a filter may compare with: the longest exact value the OpenSearch index
# keeps (title.raw's ignore_above in index_templates/: 8191 characters, the most whose UTF-8
# fits one Lucene term of 32766 bytes). No longer value can equal a stored exact value, and
# on a text field without an exact sub-field (`body`) the value goes to the cluster as a
# phrase query, whose cost grows with it (40 kB made a test cluster time out). Both stores
# refuse it alike, through the request schema.
MAX_FILTER_VALUE_CHARS = 8191
# The most filters one search takes: far more than an application combines, far fewer than
# the stores can nest (about 990 in the embedded store, 1,024 clauses in OpenSearch's).
MAX_FILTERS = 100
# The integers a filter compares as integers (a cluster's `long`, SQLite's INTEGER); beyond
# them a number is a double, as POST /search reads a JSON integer.
LONG_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Filter:
    """A restriction on the BM25 candidates: `field` equals, or lies above/below, `value`.

    Strings compare exactly (a text field is matched on its keyword sub-field).
    """

    field: str
    op: str  # one of FILTER_OPS
    value: str | int | float | bool


@dataclass(frozen=True)
class TopicBatch:
    """Topics of N candidates stacked for one batched scoring call.

    topics: (N, k_max, d) float32, zero rows as padding.
    importances: (N, k_max) float32, zero for padding rows.
    missing: ids the store does not hold (their rows are all zero, like a document
    without topics; a caller that must tell the two apart reads this).
    backgrounds: (N, k_max) float32 for the corrected topics (`CorrectedTopics`), None
    for the paper's.
    """

    doc_ids: tuple[str, ...]
    topics: FloatArray
    importances: FloatArray
    missing: tuple[str, ...] = ()
    backgrounds: FloatArray | None = None


@dataclass(frozen=True)
class Centering:
    """How an index corrects its word vectors for their common direction.

    mu, direction: (d,) the corpus's frequency-weighted mean word vector and the unit main
    direction around it (`reranker.topics.corpus_centering`); every word vector v becomes
    (v - mu) - (direction . (v - mu)) direction.
    background_words, background_weights: the corpus's most frequent words and their
    share of its tokens: the distribution a topic's background relevance is measured on.
    """

    mu: tuple[float, ...]
    direction: tuple[float, ...]
    background_words: tuple[str, ...]
    background_weights: tuple[float, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "mu": list(self.mu),
            "direction": list(self.direction),
            "background_words": list(self.background_words),
            "background_weights": list(self.background_weights),
        }

    @classmethod
    def from_json(cls, raw: object) -> "Centering | None":
        """The record as an index's metadata holds it; None when absent or unreadable."""
        if not isinstance(raw, dict):
            return None
        try:
            return cls(
                mu=tuple(float(x) for x in raw["mu"]),
                direction=tuple(float(x) for x in raw["direction"]),
                background_words=tuple(str(w) for w in raw["background_words"]),
                background_weights=tuple(float(x) for x in raw["background_weights"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class DocVectorBatch:
    """Stored Doc2Vec vectors of N candidates.

    vectors: (N, dim) float32; zero rows for `missing` ids (stored without a vector, or
    not stored at all).
    model: checksum of the Doc2Vec model that produced them.
    """

    doc_ids: tuple[str, ...]
    vectors: FloatArray
    missing: tuple[str, ...] = ()
    model: str = ""


@dataclass(frozen=True)
class TopicExplanation:
    """Why one topic of a document contributed what it did to a score."""

    rank: int  # 1-based, in order of importance
    importance: float
    relevance: float  # r(h_k, S) of the chosen variant
    # The part of the hidden-topic score this topic accounts for: the contributions of a
    # document add up to its score (for a fusion ranker, to the topic part before fusion).
    contribution: float
    topic_words: tuple[str, ...]  # document words best reconstructed by this topic
    query_words: tuple[str, ...]  # query words most aligned with this topic
    # The corrected formula's background b_k: contribution = importance x (relevance - b_k).
    # 0 for the paper's and the code's formulas (contribution = importance x relevance).
    background: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The one JSON shape of a topic in an explanation: the CLI's --json and /search
        print this (its schema: /openapi.json, TopicExplanation)."""
        return {
            "topic": self.rank,
            "importance": self.importance,
            "relevance": self.relevance,
            "contribution": self.contribution,
            "background": self.background,
            "topic_words": list(self.topic_words),
            "query_words": list(self.query_words),
        }


# Which of a document's two topic sets: the corrected topics (hidden_topics_corrected's) or the
# paper's (hidden_topics', hidden_topics_code's). A topic's rank names another topic in each.
TopicSet = Literal["corrected", "paper"]


@dataclass(frozen=True)
class Explanation:
    """Why a hit scored what it did, in two sums that hold exactly (up to float rounding).

    score = the sum of `parts`: (label, value) in the order they were added; "topics" is
    the topic ranker's share (for a fusion, its weighted, scaled score), "bm25" BM25's,
    any other label another fused ranker's. A ranker alone has one part, "topics".
    topic_score = the topic ranker's own score (`topic_ranker`'s, before any fusion) = the
    contributions of `topics` + `rest_contribution`.
    topic_set: which of the document's topics it reads, "corrected" or "paper" (the same
    document's topic 1 is another topic in each: /documents/<id> says which it shows).
    topics: the topics shown, largest contribution first (`pipeline.EXPLAIN_TOPICS` of them
    at most); rest_topics, rest_contribution: how many others there are, and the sum of
    their contributions.
    """

    score: float
    parts: tuple[tuple[str, float], ...]
    topic_ranker: str
    topic_set: TopicSet
    topic_score: float
    topics: tuple[TopicExplanation, ...]
    rest_topics: int
    rest_contribution: float

    def to_json(self) -> dict[str, Any]:
        """The one JSON shape of an explanation: the CLI's --json and /search print this
        (its schema: /openapi.json, Explanation)."""
        return {
            "score": self.score,
            "parts": dict(self.parts),
            "topic_ranker": self.topic_ranker,
            "topic_set": self.topic_set,
            "topic_score": self.topic_score,
            "topics": [topic.to_json() for topic in self.topics],
            "rest": {"topics": self.rest_topics, "contribution": self.rest_contribution},
        }


@dataclass(frozen=True)
class DocumentTopic:
    """One hidden topic of a stored document, read through its words."""

    rank: int  # 1-based, in order of importance
    importance: float
    words: tuple[str, ...]  # the document's words best reconstructed by this topic


@dataclass(frozen=True)
class RankedDoc:
    """One reranked hit. `rank` is 1-based in the new order."""

    doc_id: str
    rank: int
    # What the order follows (for a fusion: the fused score); None past the reranked
    # window, where hits keep their BM25 order (`pipeline.rescored`).
    score: float | None
    # The ranker's own score (a fusion's first ranker's; else = score); None past the window.
    # No default: a hit built without it would claim a score of 0 (or, with None, claim to
    # be past the window), so every hit says which.
    ranker_score: float | None
    bm25_score: float
    bm25_rank: int
    title: str = ""
    # Why, when asked for and the ranker scores by topics (None otherwise).
    explanation: Explanation | None = None

    def to_json(self, *, explain: bool = False) -> dict[str, Any]:
        """The one JSON shape of a hit, for the CLI's --json and /search alike (its schema:
        /openapi.json, Hit); `explanation` only when asked for and there is one."""
        body: dict[str, Any] = {
            "id": self.doc_id,
            "rank": self.rank,
            "score": self.score,
            "ranker_score": self.ranker_score,
            "bm25_score": self.bm25_score,
            "bm25_rank": self.bm25_rank,
            "title": self.title,
        }
        if explain and self.explanation is not None:
            body["explanation"] = self.explanation.to_json()
        return body


@dataclass(frozen=True)
class SearchResult:
    """The answer to one query: the reranked page and what happened on the way."""

    query: str
    ranker: str
    hits: tuple[RankedDoc, ...]
    window: int
    candidates: int  # how many the window held (fewer than `window` when BM25 found fewer)
    query_words: tuple[str, ...]  # in-vocabulary query words used for scoring
    oov_words: tuple[str, ...]  # query words without a vector (skipped)
    # "ok" | "query_out_of_vocabulary" (word vectors add 0: `Engine.rerank`) | "partial" | "tied", and why when
    # not "ok": `pipeline.ranking_status`, as the service says it.
    status: str = "ok"
    reason: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SimilarResult:
    """The papers most like a stored one (`Engine.similar`), and what they were ranked from."""

    hits: tuple[RankedDoc, ...]
    window: int
    candidates: int  # how many the window held (fewer than `window` when BM25 found fewer)
