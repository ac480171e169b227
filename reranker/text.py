"""Text preprocessing as in Gong et al. (2018), section 4.1.

Lower-case, split into word tokens, then drop stop words and prepositions, tokens that
contain a digit, and single characters. Pure functions: str -> list[str].
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
