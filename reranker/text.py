"""Text preprocessing as in Gong et al. (2018), section 4.1.

Lower-case, split into word tokens, then drop stop words and prepositions, tokens that
contain a digit, and single characters. Pure functions: str -> list[str].

`tokenize` gives the words BM25 indexes and searches. `topic_words` gives the ones that
may shape a document's hidden topics and a query's alignment with them: the same, less
what is not a word in a long text's topics (see `is_topic_word`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from reranker.errors import ConfigError

# A token is a run of letters/digits; apostrophes and hyphens split words, so "don't"
# yields "don" + "t" (both stop words) and "multi-lingual" yields two words.
_TOKEN = re.compile(r"[^\W_]+")
_DIGIT = re.compile(r"\d")
# PDF-extracted text carries soft hyphens inside words ("multi\xadlingual").
_SOFT_HYPHEN = "\u00ad"


def _parse_stopwords(lines: list[str]) -> frozenset[str]:
    return frozenset(
        word.strip().lower() for word in lines if word.strip() and not word.lstrip().startswith("#")
    )


@lru_cache(maxsize=1)
def default_stopwords() -> frozenset[str]:
    """The built-in stop list (reranker/stopwords.txt)."""
    text = resources.files("reranker").joinpath("stopwords.txt").read_text(encoding="utf-8")
    return _parse_stopwords(text.splitlines())


def load_stopwords(path: Path | None) -> frozenset[str]:
    """The stop list in `path` (one word per line, # comments), or the built-in one.

    Raises ConfigError when the file cannot be read.
    """
    if path is None:
        return default_stopwords()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read stop-word file {path}: {exc}") from None
    return _parse_stopwords(lines)


def tokenize(text: str, stopwords: frozenset[str] | None = None) -> list[str]:
    """Content words of `text`, in order, with repeats (one entry per occurrence)."""
    stop = default_stopwords() if stopwords is None else stopwords
    words = _TOKEN.findall(text.replace(_SOFT_HYPHEN, "").lower())
    # isalpha() is a C-speed test that clears nearly every word of the digit check (a
    # letter is never a decimal digit); only the rest pay for the regular expression.
    return [w for w in words if len(w) > 1 and w not in stop and (w.isalpha() or not _DIGIT.search(w))]


# Changes whenever `topic_words` keeps other words: topics built under another rule differ
# (evaluation keys its cached indexes by it).
TOPIC_WORDS_RULE = "2"

# Roman numerals number pages, sections and lists ("ii", "xiv", "lii"); of two letters or
# more, only "mix" is also an English word.
_ROMAN = re.compile(r"(?=[ivxlcdm]{2,}$)m{0,3}(cm|cd|d?c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})")
_ROMAN_LETTERS = "ivxlcdm"
_NUMERAL_WORDS = frozenset({"mix"})


def is_topic_word(token: str, word: str) -> bool:
    """Whether a content word (`word`, as `tokenize` gives it; `token`, as the text
    wrote it) may shape topics: not a two-letter token written in lower case, and not a
    Roman numeral.

    Two-letter content words in lower case are not English words (those are stop words):
    in papers they are variables and indices ("ti", "tj", "ek"), pieces of abbreviations
    ("eg" of "e.g.") and PDF-extraction fragments, and as topic words they read as junk.
    Written in capitals they are acronyms ("NE", "MT", "LM") and stay. The first stage
    is not concerned: BM25 still matches every token `tokenize` keeps.
    """
    if len(word) == 2 and not token.isupper():
        return False
    # strip() is a C-speed test that clears nearly every word of the pattern.
    return bool(word.strip(_ROMAN_LETTERS)) or word in _NUMERAL_WORDS or not _ROMAN.fullmatch(word)


def topic_words(text: str, stopwords: frozenset[str] | None = None) -> list[str]:
    """The content words of `text` that may shape topics (`is_topic_word`), in order,
    with repeats: `tokenize` less the tokens that are not words."""
    return tokenize_both(text, stopwords)[1]


def tokenize_both(text: str, stopwords: frozenset[str] | None = None) -> tuple[list[str], list[str]]:
    """(`tokenize(text)`, `topic_words(text)`) in one pass over the text."""
    stop = default_stopwords() if stopwords is None else stopwords
    words: list[str] = []
    topical: list[str] = []
    for token in _TOKEN.findall(text.replace(_SOFT_HYPHEN, "")):
        word = token.lower()
        if len(word) > 1 and word not in stop and (word.isalpha() or not _DIGIT.search(word)):
            words.append(word)
            if is_topic_word(token, word):
                topical.append(word)
    return words, topical
