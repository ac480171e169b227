"""The read path: summary query -> BM25 window -> topics -> ranker -> page (+ explanations).

`Engine` holds the long-lived pieces (store, word vectors, stop list) and is what the CLI,
the evaluation and the HTTP service share.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from reranker.config import DEFAULT_K, DEFAULT_VECTORS
from reranker.embeddings import ProgressFactory, WordVectors
from reranker.errors import (
    DocumentNotFoundError,
    ForeignIndexError,
    IndexMismatchError,
    IndexNotFoundError,
    IndexOutdatedError,
    InputError,
    RankerUnavailableError,
    RerankerError,
    StoreUnavailableError,
    VectorsError,
)
from reranker.extraction import (
    Correction,
    corrected_topics_of_words,
    document_topics,
    prior_centering,
    window_background,
)
from reranker.rankers import (
    CandidateSet,
    FirstStage,
    Formula,
    Ranker,
    RankerOptions,
    Scores,
    WordIds,
    get_ranker,
    rank_candidates,
    ranker_names,
)
from reranker.rankers.fusion import Fusion, FusionPart, fused_total
from reranker.store import LruCache, ReadWords, Store, content_key
from reranker.text import SNIPPET_WORDS, WordsRead, numbered, opening, readable_words, stop_list_info, tokenize
from reranker.topics import (
    best_aligned,
    center,
    corrected_contributions,
    stack_topics,
    topic_contributions,
    topic_relevance,
    word_shares,
)
from reranker.types import (
    Centering,
    CorrectedTopics,
    DocTopics,
    Document,
    DocumentTopic,
    DocVectorBatch,
    Explanation,
    Filter,
    FloatArray,
    Query,
    RankedDoc,
    SearchResult,
    SimilarResult,
    TopicBatch,
    TopicExplanation,
    TopicSet,
)

if TYPE_CHECKING:
    from reranker.config import Settings
    from reranker.doc2vec import Doc2VecModel

EXPLAIN_WORDS = 5
# Topics an explanation shows, largest contribution first: the CLI, /search and the page
# show these (the others are summed into one "rest"). See `Engine.explain`.
EXPLAIN_TOPICS = 5
# "Papers like this one" look for candidates with this many of the paper's words (those of the
# largest tf-idf, see `similar_query`); measured in docs/rankers-and-evaluation.md ("Papers
# like this one").
SIMILAR_QUERY_TERMS = 100


def build_engine(
    settings: "Settings",
    store_name: str | Callable[[WordVectors], str] | None = None,
    *,
    require_documents: bool = False,
    create: bool = True,
    progress: ProgressFactory | None = None,
) -> "Engine":
    """Vectors, store and stop list as `settings` say.

    `store_name` (see `open_store`) may depend on the vectors: evaluation keeps one index
    per data set and vectors. Otherwise, with no vectors in `settings`, the engine uses
    the ones the index was built with (see `vectors_spec`). `require_documents`: an empty
    index is an InputError, raised before the vectors are loaded (a first load converts
    them). `create=False` (a command that only reads; `require_documents` implies it): where
    there is no index, IndexNotFoundError, and nothing is made (see `open_store`).
    `progress`: shown while vectors are converted (see `load_vectors`).
    """
    from reranker.embeddings import load_vectors
    from reranker.store import open_store
    from reranker.text import load_stopwords

    provisional = False
    if callable(store_name):
        vectors = load_vectors(settings.vectors or DEFAULT_VECTORS, settings.vectors_cache, progress)
        store = open_store(settings, store_name(vectors))
    else:
        store = open_store(settings, store_name, create=create and not require_documents)
        try:
            if require_documents and store.count() == 0:
                raise InputError("the index is empty: run `reranker index CORPUS.jsonl` first")
            try:
                spec = vectors_spec(settings, store)
            except StoreUnavailableError:
                # Which vectors the index has is unknown until the cluster answers; texts
                # sent with a request can still be reranked meanwhile.
                spec, provisional = DEFAULT_VECTORS, True
            vectors = load_vectors(spec, settings.vectors_cache, progress)
        except BaseException:
            store.close()
            raise
    return Engine(
        store=store,
        vectors=vectors,
        stopwords=load_stopwords(settings.stopwords_file),
        ranker_options=RankerOptions(fusion_weight=settings.fusion_weight, wmd_budget_ms=settings.wmd_budget_ms),
        data_dir=settings.data_dir,
        provisional=provisional,
        text_topics=text_topic_cache(settings.service.topic_cache_mb * 2**20),
        k=settings.k,
    )


def vectors_spec(settings: "Settings", store: Store) -> str:
    """The word vectors to load for `store`: the ones `settings` name; else the ones the
    index records it was built with (an index remembers its vectors); else, for a new
    index or one built before indexes recorded where their vectors live, the bundled GloVe.

    Raises VectorsError when the recorded vectors are no longer where they were.
    """
    from reranker.embeddings import parse_spec

    if settings.vectors:
        return settings.vectors
    try:
        info = store.index_info()
    except (IndexMismatchError, ForeignIndexError):  # an older layout, or not built here: no source
        return DEFAULT_VECTORS  # (using it says what to do; `index --rebuild` replaces it)
    if info is None or not info.embedding.source:
        return DEFAULT_VECTORS
    source = info.embedding.source
    _, path = parse_spec(source)
    if path is not None and not path.exists():
        raise VectorsError(
            f"the index was built with word vectors {info.embedding.name!r} from {path}, which is not there now; "
            "copy them back, pass --vectors (RERANKER_VECTORS) with the same vectors, or rebuild the index"
        )
    return source


@dataclass(frozen=True)
class Ranking:
    """A ranker's verdict on a window.

    order: candidate positions in the new order.
    scores: (N,) what the order follows (for a fusion, the fused score).
    ranker_scores: (N,) the ranker's own scores (a fusion's base ranker; else = scores).
    notes: why the ranker answered approximately, if it did (see CandidateSet.notes).
    parts: the terms `scores` adds up (`fused_total`): a fusion's rankers' and BM25's
    shares; for a ranker alone, one part whose share is its scores. Explanations read them.
    """

    order: list[int]
    scores: Scores
    ranker_scores: Scores
    notes: tuple[str, ...] = ()
    parts: tuple[FusionPart, ...] = ()


@dataclass
class Engine:
    """Search and rerank over one store with one set of word vectors."""

    store: Store
    vectors: WordVectors
    stopwords: frozenset[str] | None = None
    ranker_options: RankerOptions = field(default_factory=RankerOptions)
    data_dir: Path | None = None  # where trained Doc2Vec models live
    # The vectors are a stand-in: the store could not say which ones the index was built
    # with (a cluster that does not answer). A long-lived holder builds the engine again.
    provisional: bool = False
    # Documents' word ids for WMD, by content: tokenizing a 2,000-word text costs more
    # than scoring it against the bounds, and the same documents come back query after query.
    word_id_cache: LruCache[str, WordIds] = field(
        default_factory=lambda: LruCache(64 * 2**20, lambda ids: ids.nbytes + 64)  # ~8,000 documents of 2,000 words
    )
    # Topics of texts callers send (/rerank, the Cohere routes), the paper's and the
    # corrected ones, by content: the same texts come back request after request.
    # `build_engine` sizes it (RERANKER_TOPIC_CACHE_MB).
    text_topics: LruCache[str, CorrectedTopics] = field(default_factory=lambda: text_topic_cache(64 * 2**20))
    # Told "hit" or "computed" for each text whose topics a window needs (the service counts them).
    on_text_topics: Callable[[str], None] | None = None
    # K for texts while the store holds no index yet (else the index's own K).
    k: int = DEFAULT_K
    # The index's centering made ready for extraction, by its digest (one per index).
    _corrections: dict[str, Correction] = field(default_factory=dict, repr=False)
    # The centering texts get while there is no index (`_centering`), made on first use.
    _prior_centering: Centering | None = field(default=None, repr=False)
    # The checksum of `stopwords` (`_same_stop_list`), taken on first use.
    _stop_list: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Rankers get this engine's vectors, and the Doc2Vec model of its index on first use.
        self.ranker_options = replace(self.ranker_options, vectors=self.vectors, doc2vec=self._doc2vec_model)

    def _doc2vec_model(self) -> "Doc2VecModel":
        from reranker.doc2vec import load_for_index

        if self.data_dir is None:
            raise RankerUnavailableError("this engine has no data directory to load a Doc2Vec model from")
        return load_for_index(self.store.index_info(), self.data_dir)

    def check_ranker(self, ranker: Ranker) -> None:
        """RankerUnavailableError when `ranker` cannot run on this index (a Doc2Vec ranker
        before `reranker train doc2vec`, the corrected ranker on an index built before
        it), found before any query is sent to it."""
        if "doc_vectors" in ranker.needs:
            self._doc2vec_model()
        if "corrected_topics" in ranker.needs:
            self._centering()

    def _centering(self, window: CandidateSet | None = None) -> Centering:
        """The index's centering. With no index yet, the texts sent with `window` are scored
        too: with the vectors' own common direction (`prior_centering`) and the texts' own
        background (`window_background`, of their cached word ids). Raises
        IndexOutdatedError for an index built before the correction."""
        info = self.store.index_info()
        if info is None:
            if self._prior_centering is None:
                self._prior_centering = prior_centering(self.vectors, self.stopwords)
            if self._prior_centering is None:  # vectors without one content word
                raise IndexNotFoundError(
                    "the corrected ranker reads the word statistics of an index, and there is none yet: "
                    "run `reranker index CORPUS.jsonl` first (or name a ranker such as hidden_topics)"
                )
            if window is None or window.texts is None:
                return self._prior_centering
            sent = [self._text_word_ids(text) for text in window.texts if text is not None]
            return window_background(sent, self.vectors, self._prior_centering)
        if info.centering is None:
            raise IndexOutdatedError(
                "the corrected ranker needs an index built with the common-direction correction; "
                "this one was built before it: rebuild the index (reranker index --rebuild CORPUS)"
            )
        return info.centering

    def ranker(self, name: str, fusion_weight: float | None = None) -> Ranker:
        """The ranker registered as `name`, with this engine's vectors and models; a fusion
        with `fusion_weight` when given (else the engine's)."""
        options = self.ranker_options if fusion_weight is None else replace(self.ranker_options, fusion_weight=fusion_weight)
        return get_ranker(name, options)

    def load_wmd(self) -> None:
        """Load WMD's machinery for these vectors now (`rankers.wmd.load_wmd`), so that no
        WMD call spends its time budget on it. VectorsError as `load_wmd`."""
        from reranker.rankers.wmd import load_wmd

        load_wmd(self.vectors)

    def check_index(self) -> None:
        """Raise IndexMismatchError if the store was built with other word vectors or
        another stop list than the store reads queries with."""
        info = self.store.index_info()
        if info is not None:
            info.check(self.vectors.info, stopwords=self.store.stop_list)

    def query(self, text: str) -> Query:
        tokens = tokenize(text, self.stopwords)
        lookup = self.vectors.lookup(tokens)
        return Query(text=text, words=lookup.words, vectors=lookup.vectors, oov=lookup.oov, tokens=tuple(tokens))

    def window(self, query: Query, size: int, filters: Sequence[Filter] = ()) -> CandidateSet:
        """The BM25 top-`size` for the query (passing `filters`); `complete` adds what a
        ranker needs of them."""
        return CandidateSet(candidates=tuple(self.store.bm25(query.text, size, filters)), query_text=query.text)

    def complete(self, window: CandidateSet, ranker: Ranker, check: Callable[[], None] | None = None) -> CandidateSet:
        """`window` with what `ranker` needs and it lacks: topics (the paper's or the
        corrected ones), word ids, Doc2Vec vectors. Nothing else is fetched or computed.

        Candidates with a text in `window.texts` use it; the others are read from the store.
        check: called before computing each text's topics (a deadline's check, which raises).
        """
        if "topics" in ranker.needs and window.topics is None:
            window = replace(window, topics=self._window_topics(window, None, check))
        if "word_ids" in ranker.needs and window.word_ids is None:
            window = replace(window, word_ids=self._word_ids(window))
        if "doc_vectors" in ranker.needs and window.doc_vectors is None:
            window = replace(window, doc_vectors=self._doc_vectors(window))
        if "corrected_topics" in ranker.needs and window.centering is None:
            window = replace(window, centering=self._centering())
        if "corrected_topics" in ranker.needs and window.corrected is None:
            window = replace(window, corrected=self._window_topics(window, window.centering, check))
        if "passages" in ranker.needs and window.passage_scores is None and window.query_text is not None and len(window):
            ids = [c.doc_id for c in window.candidates]
            found = self.store.passage_bm25(window.query_text, ids, list(window.texts or (None,) * len(ids)), self.read_words(window, ranker))
            if found is not None:
                window = replace(window, passage_scores=np.asarray(found, dtype=np.float64))
        return window

    def first_stage(self, query: Query, window: CandidateSet, ranker: Ranker | None = None) -> CandidateSet:
        """`window` with first-stage scores for candidates a caller sent without any
        (`first_stage == "missing"`), in the order the caller sent them, best first, as
        OpenSearch's rerank processor and Elasticsearch's text_similarity_reranker do.
        `ranker`: the one the window is for, whose topics may share the texts' reading
        (`read_words`).

        The scores are BM25 of their texts (a stored candidate's stored text) with the
        index's statistics (`Store.text_bm25`): about the scores the first stage gave them.
        Where the store has no statistics (no index, or a store that cannot score a text),
        or no text holds a query word, the order itself: -ln(rank). Fusions then weigh the
        first stage as they do on `/search`; without it, a fusion of a window of equal
        scores is its ranker alone.
        Windows with scores are returned as they are.
        """
        if window.first_stage != "missing" or len(window) == 0:
            return window
        texts = list(window.texts or (None,) * len(window))
        unread = [c.doc_id for c, text in zip(window.candidates, texts) if text is None]
        stored = self.store.documents(unread) if unread else {}
        found = [text if text is not None else _text_of(stored.get(c.doc_id)) for c, text in zip(window.candidates, texts)]
        scores = self.store.text_bm25(query.text, found, self.read_words(window, ranker))
        kind: FirstStage = "index_bm25"
        # No text holding a query word says nothing about them: the order still does.
        if scores is None or (len(scores) > 1 and float(np.ptp(scores)) == 0.0):
            scores, kind = [-math.log(c.bm25_rank) for c in window.candidates], "order"
        candidates = tuple(replace(c, bm25_score=float(score)) for c, score in zip(window.candidates, scores))
        return replace(window, candidates=candidates, first_stage=kind)

    def _window_topics(self, window: CandidateSet, centering: Centering | None, check: Callable[[], None] | None) -> TopicBatch:
        """The window's topics: the paper's, or with `centering` the corrected ones with
        their backgrounds. Stored documents' come from the store; a text the caller sent
        gets them here as `reranker index` would (see `_text_topics`)."""
        corrected = centering is not None
        ids = tuple(c.doc_id for c in window.candidates)
        texts = window.texts or (None,) * len(ids)
        stored_ids = [doc_id for doc_id, text in zip(ids, texts) if text is None]
        if len(stored_ids) == len(ids):
            return self.store.topics(ids, corrected=corrected)
        stored = self.store.topics(stored_ids, corrected=corrected) if stored_ids else None
        rows = {} if stored is None else {doc_id: row for row, doc_id in enumerate(stored.doc_ids) if doc_id not in stored.missing}
        # What a text's topics depend on besides its words, the same for the whole window.
        info = self.store.index_info()
        k = info.k if info is not None else self.k
        variant = "paper" if centering is None else hashlib.sha256(np.asarray(centering.mu, dtype=np.float32).tobytes()).hexdigest()[:16]
        # With no index the background is the window's own (`_centering(window)`), counted
        # from the texts' word ids, which reading a new text for its topics keeps too: a
        # text's cached topics are the same, their backgrounds measured again on each window.
        window_local = info is None and centering is not None
        correction = None if centering is None else self._correction(centering, variant, keep=True)
        found: list[CorrectedTopics] = []
        for doc_id, text in zip(ids, texts):
            if text is not None:
                if check is not None:
                    check()
                found.append(self._text_topics(text, correction, k, variant, window, keep_word_ids=window_local))
            elif stored is not None and doc_id in rows:
                row = rows[doc_id]
                kept = int(np.count_nonzero(stored.importances[row]))
                backgrounds = stored.backgrounds[row, :kept] if stored.backgrounds is not None else np.zeros(kept, np.float32)
                found.append(CorrectedTopics(stored.topics[row, :kept], stored.importances[row, :kept], backgrounds))
            else:
                found.append(CorrectedTopics(np.zeros((0, self.vectors.dim), np.float32), np.zeros(0, np.float32), np.zeros(0, np.float32)))
        if window_local:
            background = self._correction(self._centering(window), variant, keep=False)
            found = [
                background.with_backgrounds(f.topics, f.importances) if text is not None else f for f, text in zip(found, texts)
            ]
        topics, importances = stack_topics([DocTopics(f.topics, f.importances) for f in found], self.vectors.dim)
        missing = tuple(doc_id for doc_id, f in zip(ids, found) if f.importances.shape[0] == 0)
        if not corrected:
            return TopicBatch(ids, topics, importances, missing)
        backgrounds = np.zeros_like(importances)
        for row, f in enumerate(found):
            backgrounds[row, : f.backgrounds.shape[0]] = f.backgrounds
        return TopicBatch(ids, topics, importances, missing, backgrounds)

    def _correction(self, centering: Centering, variant: str, *, keep: bool) -> Correction:
        """`centering` made ready for extraction: the index's, or the vectors' own, kept
        (`keep`; by `variant`, the digest of its mu); one with a window's own background
        (no index) made for that window, as it changes with every window."""
        if not keep:
            return Correction.of(centering, self.vectors)
        correction = self._corrections.get(variant)
        if correction is None:
            correction = self._corrections[variant] = Correction.of(centering, self.vectors)
        return correction

    def _text_topics(
        self, text: str, correction: Correction | None, k: int, variant: str, window: CandidateSet, *, keep_word_ids: bool = False
    ) -> CorrectedTopics:
        """A text's `k` topics as `reranker index` would store them (with `correction`,
        the corrected ones), cached by content, vectors, K and `variant` ("paper", or a
        digest of the centering's mu). The paper's come with zero backgrounds.
        The corrected ones take the text's one reading for `window` (`_words_read`).
        keep_word_ids: a text read for its corrected topics also leaves its word ids in
        `word_id_cache` (for the window's background with no index), from the same pass."""
        text_key = _text_key(text)
        key = f"{text_key}|{self.vectors.info.checksum}|{k}|{variant}"
        found = self.text_topics.get(key)
        if self.on_text_topics is not None:
            self.on_text_topics("computed" if found is None else "hit")
        if found is not None:
            return found
        if correction is None:
            paper, _, _ = document_topics(Document("", "", text), self.vectors, k, self.stopwords)
            found = CorrectedTopics(paper.topics, paper.importances, np.zeros(paper.k, np.float32))
        else:
            words = self._words_read(window, text)
            if keep_word_ids and self.word_id_cache.get(text_key) is None:
                self.word_id_cache.put(text_key, self.vectors.word_ids(words.words, words.content))
            found = corrected_topics_of_words(words.readable_words(), self.vectors, k, correction)
        self.text_topics.put(key, found)
        return found

    def read_words(self, window: CandidateSet, ranker: Ranker | None) -> ReadWords | None:
        """How the store reads a text for `window`'s terms (BM25, passages) when `ranker`
        reads the texts' readable words for its corrected topics: a text sent with the
        window from the one reading the window keeps (`_words_read`), which the topics
        share; a stored document's text (whose topics are stored) by `tokenize` alone.
        None (the store reads each text itself, by `tokenize` alone, cheaper than the whole
        reading) for any other ranker, or where the store's stop list is not this engine's."""
        if ranker is None or "corrected_topics" not in ranker.needs or not window.texts or not self._same_stop_list():
            return None
        sent = {id(text) for text in window.texts if text is not None}
        return lambda text: self._words_read(window, text).numbered_tokens() if id(text) in sent else numbered(tokenize(text, self.stopwords))

    def _same_stop_list(self) -> bool:
        """Whether the store reads texts with this engine's stop list (`build_engine` gives
        both the settings' one; an engine put together by hand may not)."""
        if self._stop_list is None:
            self._stop_list = stop_list_info(self.stopwords).checksum
        return self.store.stop_list.checksum == self._stop_list

    def _words_read(self, window: CandidateSet, text: str) -> WordsRead:
        """A sent text's words, read once per window: a new long paper's topics and its
        terms read the same words, and reading them was about a quarter of a first sight
        when each read them (`python bench/bench_revisions.py --cohere --new-texts`). Kept
        in `window.words_read` for the request only, compactly (`WordsRead`: about 10 MB
        for 100 long papers, against 27 MB as lists of words)."""
        key = _text_key(text)
        found = window.words_read.get(key)
        if found is None:
            found = window.words_read[key] = WordsRead.of(text, self.stopwords)
        return found

    def _doc_vectors(self, window: CandidateSet) -> DocVectorBatch:
        """Stored vectors; a text the caller sent is inferred with the index's model
        (as `reranker index` does for documents added after training)."""
        texts = window.texts
        ids = tuple(c.doc_id for c in window.candidates)
        if texts is None or all(text is None for text in texts):
            return self.store.doc_vectors(ids)
        model = self._doc2vec_model()
        stored_ids = [c.doc_id for c, text in zip(window.candidates, texts) if text is None]
        stored = self.store.doc_vectors(stored_ids) if stored_ids else None
        if stored is not None and stored.model != model.info.checksum:
            # The index was retrained since the model was loaded: say so, as the ranker does.
            return DocVectorBatch(ids, np.zeros((len(window), model.dim), np.float32), ids, model=stored.model)
        rows = {doc_id: row for row, doc_id in enumerate(stored.doc_ids)} if stored is not None else {}
        vectors = np.zeros((len(window), model.dim), dtype=np.float32)
        missing: list[str] = []
        for position, (doc_id, text) in enumerate(zip(ids, texts)):
            if text is not None:
                vectors[position] = model.infer(tokenize(text, self.stopwords))
            elif stored is not None and doc_id not in stored.missing:
                vectors[position] = stored.vectors[rows[doc_id]]
            else:
                missing.append(doc_id)
        return DocVectorBatch(ids, vectors, tuple(missing), model=model.info.checksum)

    def _word_ids(self, window: CandidateSet) -> tuple[WordIds | None, ...]:
        texts: list[str | None] = list(window.texts) if window.texts is not None else [None] * len(window)
        keys: list[str | None] = [None if text is None else _text_key(text) for text in texts]
        stored_ids = [c.doc_id for c, text in zip(window.candidates, texts) if text is None]
        if stored_ids:
            # Stored documents are cached by their content hash, so a cached one is not read again.
            hashes = self.store.content_hashes(stored_ids)
            for position, candidate in enumerate(window.candidates):
                if texts[position] is None and candidate.doc_id in hashes:
                    keys[position] = "stored:" + hashes[candidate.doc_id]
        found: list[WordIds | None] = [None if key is None else self.word_id_cache.get(key) for key in keys]
        unread = [c.doc_id for i, c in enumerate(window.candidates) if found[i] is None and texts[i] is None and keys[i] is not None]
        documents = self.store.documents(unread) if unread else {}
        for position, candidate in enumerate(window.candidates):
            key = keys[position]
            if found[position] is not None or key is None:
                continue
            text = texts[position]
            if text is None:
                document = documents.get(candidate.doc_id)
                if document is None:
                    continue
                text = document.full_text
            found[position] = self._text_word_ids(text, key)
        return tuple(found)

    def _text_word_ids(self, text: str, key: str | None = None) -> WordIds:
        """A text's word ids, kept in `word_id_cache` by `key` (by default the text's
        content hash, as `_word_ids` keys a sent text)."""
        key = key or _text_key(text)
        ids = self.word_id_cache.get(key)
        if ids is None:
            ids = self.vectors.word_ids(tokenize(text, self.stopwords))
            self.word_id_cache.put(key, ids)
        return ids

    def rerank(self, query: Query, window: CandidateSet, ranker: Ranker) -> Ranking:
        """The ranker's order of the window's candidates, and its scores.

        A query without any in-vocabulary word gives the rankers built on word vectors
        nothing to compare: they add 0 to every candidate, so a fusion is ordered by its
        other parts (the first stage's, and Doc2Vec's) and a ranker alone keeps the
        first-stage order, every score 0 (ties go by BM25 rank). Either way the scores
        follow the order, as the clusters that sort by them need.
        """
        if len(window) == 0:
            empty = np.zeros(0, dtype=np.float64)
            return Ranking([], empty, empty)
        window = replace(self.complete(window, ranker), notes=[], unscored=set())  # this call's scratch pad
        silent = len(query.words) == 0 and uses_word_vectors(ranker)
        if isinstance(ranker, Fusion):
            parts = ranker.parts(query, window)
            if silent:
                says_nothing = {base.name for base in ranker.bases if uses_word_vectors(base)}
                parts = tuple(replace(part, share=np.zeros(len(window))) if part.name in says_nothing else part for part in parts)
            scores, own = fused_total(parts, len(window)), parts[0].own
        else:
            scores = own = ranker.score(query, window)
            if silent:
                scores = np.zeros(len(window))
            parts = (FusionPart(ranker.name, own, scores),)
        return Ranking(rank_candidates(scores, window), scores, own, tuple(window.notes), parts)

    def search(
        self,
        text: str,
        ranker_name: str = "hidden_topics",
        *,
        window: int = 100,
        size: int = 10,
        explain: bool = False,
        filters: Sequence[Filter] = (),
    ) -> SearchResult:
        """BM25 top-`window` (passing `filters`), reranked by `ranker_name`; the first `size`
        hits. When `size` is larger than `window`, the hits past the window follow it in
        their BM25 order, unscored (`rescored`), as POST /search pages."""
        ranker = self.ranker(ranker_name)
        self.check_index()
        if "word_ids" in ranker.needs:  # WMD, alone or fused: loaded before its budget starts
            self.load_wmd()
        started = time.perf_counter()
        query = self.query(text)
        found = self.store.bm25(query.text, max(window, size), filters)
        # Completed before reranking, so that `explain` reads what the ranker scored.
        candidates = self.complete(CandidateSet(tuple(found[:window]), query_text=query.text, exact_top=size), ranker)
        retrieved = time.perf_counter()
        ranking = self.rerank(query, candidates, ranker)
        order = ranking.order[:size]
        reranked = time.perf_counter()
        explanations = self.explain(query, candidates, order, ranker, ranking.parts) if explain else {}
        hits = tuple(
            RankedDoc(
                doc_id=found[position].doc_id,
                rank=rank,
                score=float(ranking.scores[position]) if position < len(candidates) else None,
                ranker_score=float(ranking.ranker_scores[position]) if position < len(candidates) else None,
                bm25_score=found[position].bm25_score,
                bm25_rank=found[position].bm25_rank,
                title=found[position].title,
                explanation=explanations.get(position),
            )
            for rank, position in enumerate(rescored(order, len(found))[:size], start=1)
        )
        status, reason = ranking_status(query, ranker, ranking)
        return SearchResult(
            query=text,
            ranker=ranker.name,
            hits=hits,
            window=window,
            candidates=len(candidates),
            query_words=query.words,
            oov_words=tuple(dict.fromkeys(query.oov)),
            status=status,
            reason=reason,
            timings_ms={
                "retrieve": 1000 * (retrieved - started),
                "rerank": 1000 * (reranked - retrieved),
            },
        )

    def explain(
        self, query: Query, window: CandidateSet, positions: Sequence[int], ranker: Ranker, parts: Sequence[FusionPart]
    ) -> dict[int, Explanation]:
        """Why the candidates at `positions` got their scores from `ranker`: the parts of the
        score (`parts`, the ranking's), and the topic ranker's per-topic contributions
        (`topic_contributions` / `corrected_contributions`, the formulas it scores with),
        the EXPLAIN_TOPICS largest shown with their topic words and aligned query words,
        the others summed into one rest. Empty for a ranker that does not score by topics.
        """
        topic_ranker = explained_ranker(ranker)
        if topic_ranker is None or topic_ranker.variant is None or not parts:
            return {}
        chosen = list(positions)
        contributions, relevance, backgrounds, batch, centering = self._contributions(query, window, topic_ranker.variant)
        own = next((part.own for part in parts if part.name == topic_ranker.name), parts[0].own)
        texts = self.store.documents([batch.doc_ids[p] for p in chosen])
        query_lookup = self.vectors.lookup(list(dict.fromkeys(query.words)))
        query_words = query_lookup.vectors
        if centering is not None and len(query_words):
            query_words = center(query_words, centering.mu, centering.direction)
        result: dict[int, Explanation] = {}
        for position in chosen:
            k = int(np.count_nonzero(batch.importances[position]))
            order = strongest_topics(contributions[position, :k])
            # No query word has a vector: no topic added anything to the score (`rerank`), and
            # none is shown; the rest line keeps the topic ranker's own sum, as always.
            shown, others = (order[:EXPLAIN_TOPICS], order[EXPLAIN_TOPICS:]) if query.words else ([], order)
            topics = batch.topics[position, shown]
            topic_words = self._topic_words(texts.get(batch.doc_ids[position]), topics, EXPLAIN_WORDS, centering)
            query_best = best_aligned(query_words, topics, EXPLAIN_WORDS)
            shares = tuple(("topics" if part.name == topic_ranker.name else part.name, float(part.share[position])) for part in parts)
            result[position] = Explanation(
                score=sum(value for _, value in shares),  # the parts' order: the fused score's float
                parts=shares,
                topic_ranker=topic_ranker.name,
                topic_set="corrected" if topic_ranker.variant == "corrected" else "paper",
                topic_score=float(own[position]),
                topics=tuple(
                    TopicExplanation(
                        rank=int(t) + 1,
                        importance=float(batch.importances[position, t]),
                        relevance=float(relevance[position, t]),
                        contribution=float(contributions[position, t]),
                        topic_words=topic_words[row],
                        query_words=tuple(query_lookup.words[i] for i in query_best[row]),
                        background=float(backgrounds[position, t]),
                    )
                    for row, t in enumerate(shown)
                ),
                rest_topics=len(others),
                rest_contribution=float(contributions[position, others].sum()),
            )
        return result

    def _contributions(
        self, query: Query, window: CandidateSet, variant: Formula
    ) -> tuple[Scores, FloatArray, FloatArray, TopicBatch, Centering | None]:
        """(contributions (N, k), relevance (N, k), backgrounds (N, k), the topics, the
        centering) of the whole window under `variant`, exactly as the ranker scored it:
        over the whole window (a sub-batch can round differently in BLAS), with the topic
        core's own contribution functions, so that they add up to the ranker's scores.

        For the corrected formula the topics are the corrected ones, the query's words are
        centred, and a topic's contribution is i_k (relevance - background).
        """
        if variant == "corrected":
            window = self.complete(window, get_ranker("hidden_topics_corrected"))
            batch, centering = window.corrected, window.centering
            assert batch is not None and batch.backgrounds is not None and centering is not None  # complete() filled them
            vectors = center(query.vectors, centering.mu, centering.direction) if len(query.vectors) else query.vectors
            relevance = topic_relevance(vectors, batch.topics, "paper")
            contributions = corrected_contributions(vectors, batch.topics, batch.importances, batch.backgrounds)
            return contributions, relevance, batch.backgrounds, batch, centering
        paper = self.complete(window, get_ranker("hidden_topics")).topics
        assert paper is not None  # complete() filled it
        relevance = topic_relevance(query.vectors, paper.topics, variant)
        contributions = topic_contributions(query.vectors, paper.topics, paper.importances, variant)
        return contributions, relevance, np.zeros_like(relevance), paper, None

    def _topic_words(
        self, document: Document | None, topics: FloatArray, count: int, centering: Centering | None = None
    ) -> list[tuple[str, ...]]:
        """For each of `topics` (k, d), the `count` words of `document` with the largest
        share of it (`word_shares`: the words that made it), of those a reader can read
        (`readable_words`: every content word shapes the topics, but a variable such as
        "ti" or a PDF fragment such as "co" explains nothing); none for a document that is
        not stored. With `centering`, of the centred word vectors (the corrected topics'
        space)."""
        words: tuple[str, ...] = ()
        vectors = np.zeros((0, self.vectors.dim), dtype=np.float32)
        counts = np.zeros(0, dtype=np.float32)
        if document is not None:
            distinct, counts, _ = self.vectors.lookup_counts(readable_words(document.full_text, self.stopwords))
            words, vectors = distinct.words, distinct.vectors
            if centering is not None and len(vectors):
                vectors = center(vectors, centering.mu, centering.direction)
        return [tuple(words[i] for i in best) for best in word_shares(vectors, counts, topics, count)]

    def document(self, doc_id: str) -> Document:
        """The stored document `doc_id`. Raises DocumentNotFoundError."""
        found = self.store.documents([doc_id]).get(doc_id)
        if found is None:
            raise DocumentNotFoundError(f"no stored document with id {doc_id!r}")
        return found

    def document_topics(
        self, doc_id: str, words: int = EXPLAIN_WORDS
    ) -> tuple[Document, tuple[DocumentTopic, ...], TopicSet]:
        """A stored document, its hidden topics, most important first, each read through
        its `words` words with the largest share of it (`_topic_words`), and which topics
        they are.

        The topics are the ones the default ranker reads: the corrected ones where the
        index has them (the paper's first topic is the common direction of all word
        vectors, and reads as "example, particular, given" on every paper), else the
        paper's (as `hidden_topics` reads them): "corrected" or "paper" says which, since a
        topic's rank names another topic in each. Raises DocumentNotFoundError.
        """
        document = self.document(doc_id)
        info = self.store.index_info()
        centering = info.centering if info is not None else None
        batch = self.store.topics([doc_id], corrected=centering is not None)
        if centering is not None and doc_id in batch.missing:  # stored before the correction
            batch, centering = self.store.topics([doc_id]), None
        k = int(np.count_nonzero(batch.importances[0]))
        topic_words = self._topic_words(document, batch.topics[0, :k], words, centering)
        topics = tuple(
            DocumentTopic(rank=t + 1, importance=float(batch.importances[0, t]), words=topic_words[t]) for t in range(k)
        )
        return document, topics, "paper" if centering is None else "corrected"

    def similar(self, doc_id: str, ranker_name: str, *, size: int = 10, window: int = 100) -> SimilarResult:
        """The stored documents most like `doc_id` ("papers like this one"): a search whose
        query is the paper itself, the paper left out of its hits.

        First stage: BM25 with `similar_query` (the paper's words of the largest tf-idf) as
        the query, its top `window` other documents
        (`bm25_rank` counts from 1 without the document itself). Then `ranker_name`
        reorders them with the paper's whole text as the query (for the hidden-topic
        rankers: how well all of the paper's words align with each candidate's topics);
        the first `size`, those past the window in their BM25 order, unscored (`rescored`),
        with how many candidates the window held (as `search` counts them). Raises
        DocumentNotFoundError, UnknownRankerError, and what `check_ranker` raises.
        """
        ranker = self.ranker(ranker_name)
        document = self.document(doc_id)
        self.check_index()
        self.check_ranker(ranker)
        info = self.store.index_info()
        common = info.centering.background_words if info is not None and info.centering is not None else ()
        first_stage = similar_query(document, self.stopwords, frozenset(common), doc_freqs=self.store.doc_freqs)
        depth = max(window, size)
        found = [
            replace(c, bm25_rank=rank)
            for rank, c in enumerate((c for c in self.store.bm25(first_stage, depth + 1) if c.doc_id != doc_id), start=1)
        ][:depth]
        candidates = CandidateSet(candidates=tuple(found[:window]), exact_top=size)
        ranking = self.rerank(self.query(document.full_text), candidates, ranker)
        hits = tuple(
            RankedDoc(
                doc_id=found[position].doc_id,
                rank=rank,
                score=float(ranking.scores[position]) if position < len(candidates) else None,
                ranker_score=float(ranking.ranker_scores[position]) if position < len(candidates) else None,
                bm25_score=found[position].bm25_score,
                bm25_rank=found[position].bm25_rank,
                title=found[position].title,
            )
            for rank, position in enumerate(rescored(ranking.order[:size], len(found))[:size], start=1)
        )
        return SimilarResult(hits=hits, window=window, candidates=len(candidates))


def explained_ranker(ranker: Ranker) -> Ranker | None:
    """The ranker whose topics explain `ranker`'s scores: itself, or a fusion's first base
    that scores by topics (the one `Fusion.variant` names); None when none does."""
    if isinstance(ranker, Fusion):
        return next((base for base in ranker.bases if base.variant is not None), None)
    return ranker if ranker.variant is not None else None


def listed_rankers(engine: Callable[[], Engine]) -> list[dict[str, Any]]:
    """Every registered ranker as GET /rankers and `reranker rankers` list it: its `name`,
    whether it `uses_topics` (scores by hidden topics, so an explanation has topics to
    show), and whether it is `available` on this index, with the `reason` (the words of
    the 409 a search with it would get) when it is not: doc2vec before `reranker train
    doc2vec`. Any other failure (the store down, `engine` not built) is not the ranker's,
    so it is listed as available and a search with it says what is wrong."""
    try:
        built: Engine | None = engine()
    except RerankerError:
        built = None
    listed = []
    for name in ranker_names():
        ranker = get_ranker(name)
        reason = None
        try:
            if built is not None:
                built.check_ranker(ranker)
        except RankerUnavailableError as exc:
            reason = str(exc)
        except RerankerError:
            pass
        listed.append({"name": name, "uses_topics": ranker.variant is not None, "available": reason is None, "reason": reason})
    return listed


def strongest_topics(contributions: Scores) -> list[int]:
    """Topic indices by contribution, largest first; equal ones in order of importance.

    The one order every explanation shows (the CLI, /search, the page): which topics
    made the hit rank where it did."""
    return [int(t) for t in np.lexsort((np.arange(contributions.shape[0]), -contributions))]


def similar_query(
    document: Document,
    stopwords: frozenset[str] | None,
    common: frozenset[str],
    terms: int = SIMILAR_QUERY_TERMS,
    doc_freqs: Callable[[Sequence[str]], tuple[int, dict[str, int]] | None] | None = None,
) -> str:
    """The first-stage query for documents like `document`: its `terms` content words of
    the largest tf-idf, each once, as Lucene's MoreLikeThis chooses them (tf the word's
    count in the document, idf BM25's ln(1 + (N - df + 0.5) / (df + 0.5)) from
    `doc_freqs`, a store's `Store.doc_freqs`).

    Where the store has no document frequencies: its most frequent content words, leaving
    out `common` words (the corpus's most frequent ones, which the index records with its
    centering) unless that leaves none. Ties: first occurrence first.
    """
    counts = Counter(tokenize(document.full_text, stopwords))
    statistics = doc_freqs(list(counts)) if doc_freqs is not None and counts else None
    if statistics is not None:
        n, found = statistics
        weight = {word: count * math.log(1.0 + (n - found.get(word, 0) + 0.5) / (found.get(word, 0) + 0.5)) for word, count in counts.items()}
        return " ".join(sorted(counts, key=lambda word: -weight[word])[:terms])
    chosen = [word for word, _ in counts.most_common() if word not in common][:terms]
    # A small corpus's most frequent words are all its words: then they are all there is.
    return " ".join(chosen or [word for word, _ in counts.most_common(terms)])


def first_stage_depth(window: int, size: int, max_window: int, offset: int = 0) -> int:
    """How many BM25 hits a search of hits [offset, offset + size) reads: the reranked
    `window`, or the page's end when it reaches past it, at most `max_window`
    (RERANKER_MAX_WINDOW); only the top `window` of them are reranked (`rescored`). POST
    /search reads this many; `Engine.search` and `Engine.similar`, which show the first
    page only, read max(window, size), the same number where both are within the limit
    (as `reranker search --size` and /similar's `size` are checked to be)."""
    return min(max(window, offset + size), max_window)


def rescored(order: Sequence[int], hits: int) -> list[int]:
    """One list of a first stage's `hits` positions: the reranked window's `order`, then
    the hits past the window (positions len(order) onwards) in their first-stage order, as
    Elasticsearch's rescore leaves hits past its `window_size`. Every page is a slice of
    it: a window widened to each page's end reordered the pages before it, so that paging
    showed one hit twice and another never."""
    return [*order, *range(len(order), hits)]


def past_window_reason(window: int, setting: str) -> str:
    """Why a page that starts past the reranked window is in BM25 order (/search's and the
    proxy's `not_reranked` reason); `setting`: what sets the window on that route."""
    return f"the page starts past the reranked window of {window} hits ({setting}), and hits past it keep their BM25 order"


def ranking_status(query: Query, ranker: Ranker, ranking: Ranking) -> tuple[str, str | None]:
    """(status, reason) of a ranking that finished, as every answer says it (`reranker
    search`, /search, /rerank, the proxy, the Cohere routes; the schema's `Status`):
    "query_out_of_vocabulary" when no query word has a vector for a ranker that needs one
    (`Engine.rerank` then orders by the other evidence), "partial" when the
    ranker ordered some candidates by a bound (its notes), "tied" when every candidate got
    the same score, else "ok" (reason None)."""
    if len(query.words) == 0 and uses_word_vectors(ranker):
        # A query of stop words, numbers and single letters only ("the of and", "2018 a") has
        # no word without a vector either: saying none has a vector sent its user looking for
        # a vocabulary problem.
        lacks = (
            "no query word has a word vector" if query.oov
            else "the query has no words to search (stop words, numbers and single letters are left out)"
        )
        if not ranking.order:
            # Nothing to order: no word to search, or words no document holds.
            return "query_out_of_vocabulary", lacks if not query.oov else f"{lacks}, and no document matches it"
        if isinstance(ranker, Fusion):
            return "query_out_of_vocabulary", f"{lacks}; its word-vector parts add 0 and the rest of the fusion orders the hits"
        return "query_out_of_vocabulary", f"{lacks}; first-stage order kept"
    if ranking.notes:
        return "partial", " ".join(ranking.notes)
    tie = tie_reason(ranking.scores, ranker.name)
    if tie is not None:
        return "tied", tie
    return "ok", None


def similar_answer(engine: Engine, doc_id: str, hits: Sequence[RankedDoc], ranker_name: str) -> dict[str, Any]:
    """The JSON of GET /documents/<id>/similar and of `reranker similar --json` (its schema:
    /openapi.json, SimilarAnswer): each hit as a search's (`RankedDoc.to_json`) with the
    opening of its text, by which a paper without a title is shown, and whether the text
    goes on after it (`snippet_truncated`, as /search's snippets say it)."""
    texts = engine.store.documents([hit.doc_id for hit in hits])
    answer = []
    for hit in hits:
        stored = texts.get(hit.doc_id)
        snippet, truncated = opening(stored.text, SNIPPET_WORDS) if stored is not None else ("", False)
        answer.append({**hit.to_json(), "snippet": snippet, "snippet_truncated": truncated})
    return {"id": doc_id, "ranker": ranker_name, "hits": answer}


def tie_reason(scores: Scores, ranker_name: str) -> str | None:
    """Why the order says nothing, when `ranker_name` gave every one of several candidates
    the same score (identical texts, say): they keep the order they came in. None otherwise."""
    if len(scores) > 1 and float(np.ptp(scores)) == 0.0:
        return f"every candidate got the same score from {ranker_name!r}; they keep the order they came in"
    return None


def uses_word_vectors(ranker: Ranker) -> bool:
    """Whether the ranker compares query words by their word vectors (topics, WMD): a
    query none of whose words has a vector gives it nothing to compare (`Engine.rerank`)."""
    return ranker.variant is not None or "word_ids" in ranker.needs


def text_topic_cache(max_bytes: int) -> LruCache[str, CorrectedTopics]:
    return LruCache(max_bytes, lambda found: found.topics.nbytes + found.importances.nbytes + found.backgrounds.nbytes + 64)


def _text_of(document: Document | None) -> str:
    """A stored document's text, or nothing for one that is not stored (it scores 0)."""
    return document.full_text if document is not None else ""


def _text_key(text: str) -> str:
    return "text:" + content_key(text)
