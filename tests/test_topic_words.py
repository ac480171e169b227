"""The words a topic is shown through: those with the largest share of it
(`reranker.topics.word_shares`) that read as words (`reranker.text.readable_words`).

The slow test at the end is the check over both shared corpora: no document's top-5 words
of its top-5 topics, as `/documents/<id>` shows them, and no topic word of an explained hit
of any judged query (the default ranker's and the paper's), is a fragment or holds a digit
(`_fragments`: pieces of words broken at a soft hyphen and character references' names too).
The page shows what those two answers hold (tests/test_web.py checks the words are the same).
"""

from __future__ import annotations

import json
import re
from typing import Callable

import numpy as np
import pytest
from conftest import SHARED_DATA, SharedEvaluation, settings_env

from reranker.text import is_readable, readable_words, tokenize
from reranker.topics import word_shares


@pytest.mark.parametrize(
    ("token", "kept"),
    [
        ("ti", False), ("tj", False), ("ek", False), ("eg", False), ("al", False), ("co", False),  # not words
        ("NE", True), ("MT", True), ("LM", True),  # acronyms, written in capitals
        ("ii", False), ("II", False), ("xiv", False), ("lii", False), ("XIV", False),  # numerals
        ("mix", True), ("civil", True), ("mild", True), ("dim", True), ("lid", True),  # words of those letters
        ("translation", True), ("Paraphrase", True),
    ],
)
def test_readable_words_are_words(token: str, kept: bool) -> None:
    assert is_readable(token, token.lower()) is kept


def test_readable_words_are_a_subsequence_of_the_content_words() -> None:
    text = "The NE tagger of Section II (Och et al.) uses t_i and tj, e.g. EK; see pages lii-liv. MT and LM translation, 2nd mix."
    words = tokenize(text)
    assert readable_words(text) == ["ne", "tagger", "section", "och", "uses", "ek", "see", "pages", "mt", "lm", "translation", "mix"]
    assert [w for w in words if w in set(readable_words(text))] == readable_words(text)
    assert {"tj", "ii", "lii", "et", "al"} <= set(words)  # they still shape topics, and BM25 matches them


def test_a_topics_words_are_the_ones_that_make_it() -> None:
    """A word seen once whose vector points along the topic has a small share of it; a
    frequent word a little off the topic makes most of it."""
    topic = np.array([[1.0, 0.0]])
    vectors = np.array([[1.0, 0.0], [0.9, 0.436], [0.0, 1.0]], dtype=np.float32)
    counts = np.array([1.0, 40.0, 5.0])
    assert word_shares(vectors, counts, topic, 2).tolist() == [[1, 0]]
    # The shares add up to the topic's eigenvalue (here h = e1: sum_w c_w v_w1^2).
    assert float((counts * (vectors @ topic.T)[:, 0] ** 2).sum()) == pytest.approx(1 + 40 * 0.81, rel=1e-6)
    with pytest.raises(ValueError):
        word_shares(vectors, counts[:2], topic, 2)


_DIGIT = re.compile(r"\d")


def _fragments(words: list[str], text: str) -> list[str]:
    """Shown words that are not words: with a digit, of one letter, a Roman numeral, of
    two letters that the document never writes in capitals, the name of a character
    reference the document holds (`&amp;` read as "amp"), or a piece of a word the document
    breaks at a soft hyphen and never writes whole ("fea\xad tures" read as "fea", "tures")."""
    capitals = {token for token in re.findall(r"[^\W_]+", text) if len(token) == 2 and token.isupper()}  # as tokenize splits
    # Escaped again at times: "&amp;quot;" reads as "amp" and "quot".
    references = {name.lower() for name in re.findall(r"&(?:amp;)*([A-Za-z][A-Za-z0-9]*);", text)} | ({"amp"} if "&amp;" in text else set())
    lowered = text.lower()

    def broken(word: str) -> bool:
        if "\u00ad" not in text:
            return False
        whole = len(re.findall(rf"(?<![^\W_]){word}(?![^\W_])", lowered.replace("\u00ad", " ")))
        pieces = len(re.findall(rf"(?<![^\W_]){word}\u00ad|\u00ad\s*{word}(?![^\W_])", lowered))
        return pieces > 0 and pieces >= whole

    def fragment(word: str) -> bool:
        if _DIGIT.search(word) or len(word) < 2 or word in references or broken(word):
            return True
        if len(word) == 2:
            return word.upper() not in capitals
        return not is_readable(word, word)  # a Roman numeral

    return [word for word in words if fragment(word)]


def test_the_check_finds_fragments() -> None:
    assert _fragments(["ti", "ne", "ek", "xiv", "mt", "a1", "mix", "tagger"], "The NE tagger; MT.") == ["ti", "ek", "xiv", "a1"]
    text = "the &amp;quot;fea\u00ad tures&amp;quot; of lan\u00adguage, multi\u00ad lingual and lingual"
    assert _fragments(["amp", "quot", "fea", "tures", "lan", "guage", "multi", "lingual", "features"], text) == [
        "amp", "quot", "fea", "tures", "lan", "guage", "multi"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["clscisumm2018-train", "cisi"])
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is not beside the repo")
def test_no_shown_topic_word_is_a_fragment(dataset: str, shared_evaluation: Callable[[str], SharedEvaluation]) -> None:
    from reranker.config import DEFAULT_RANKER, Settings
    from reranker.datasets import load_dataset
    from reranker.pipeline import build_engine

    # The index `reranker evaluate` built of the whole corpus, which the quality bars of
    # tests/test_cli.py read too: indexed as `reranker index` indexes (read only here).
    evaluated = shared_evaluation(dataset)
    engine = build_engine(Settings.from_env(settings_env(evaluated.data_dir)), evaluated.store_name)
    try:
        lines = (SHARED_DATA / dataset / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
        ids = [json.loads(line)["id"] for line in lines if line.strip()]
        found: dict[str, list[str]] = {}
        shown = 0
        for doc_id in ids:
            document, topics, _ = engine.document_topics(doc_id, words=5)
            words = [w for topic in topics[:5] for w in topic.words]
            shown += len(words)
            bad = _fragments(words, document.full_text)
            if bad:
                found[doc_id] = bad
        assert shown > 20 * len(ids)
        assert found == {}, f"{sum(map(len, found.values()))} fragments shown in {len(found)} of {len(ids)} documents: {list(found.items())[:5]}"
        # The explanations choose their topics otherwise (the largest contributions, of the
        # corrected topics or of the paper's): the hits of every judged query explained, by
        # the default ranker (what /search and the page show) and by the paper's formula.
        explained: dict[str, list[str]] = {}
        shown = 0
        for _, text in load_dataset(SHARED_DATA / dataset).queries:
            for ranker, size in ((DEFAULT_RANKER, 10), ("hidden_topics", 3)):
                for hit in engine.search(text, ranker, size=size, explain=True).hits:
                    assert hit.explanation is not None
                    words = [w for topic in hit.explanation.topics for w in topic.topic_words]
                    shown += len(words)
                    bad = _fragments(words, engine.document(hit.doc_id).full_text)
                    if bad:
                        explained[f"{ranker} {hit.doc_id}"] = bad
        assert shown > 0
        assert explained == {}, f"fragments in {len(explained)} explained hits: {list(explained.items())[:5]}"
    finally:
        engine.store.close()
