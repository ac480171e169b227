"""Text preprocessing as in Gong et al. (2018), section 4.1.

Lower-case, split into word tokens, then drop stop words and prepositions, tokens that
contain a digit, and single characters. Pure functions: str -> list[str]. Before any of
it, the text is read as words are written (`plain_text`): its character references
decoded and its words broken at a soft hyphen whole again, as PDF and XML extraction
leave them.

`tokenize` gives the content words: BM25 indexes them and they shape the hidden topics.
`readable_words` gives those of them a reader can read as words: the words a topic is
shown through (see `is_readable`).
"""

from __future__ import annotations

import hashlib
import html
import html.entities
import re
from array import array
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

from reranker.errors import ConfigError
from reranker.types import StopListInfo

# A token is a run of letters/digits; apostrophes and hyphens split words, so "don't"
# yields "don" + "t" (both stop words) and "multi-lingual" yields two words.
_TOKEN = re.compile(r"[^\W_]+")
_DIGIT = re.compile(r"\d")
# A soft hyphen marks where a word may break across lines, and nothing else: PDF-extracted
# text keeps it inside words ("multi\xadlingual") and, where the line did break, before the
# line's end ("lan\xad guage": 5,380 words in 69 of CL-SciSumm's 567 papers). Either way the
# word is whole again without it and the white space after it (see `plain_text`).
_SOFT_BREAK = re.compile("\u00ad\\s*")
# A character reference (`&amp;`, `&#39;`), as text taken out of XML or HTML keeps them, escaped
# again at times (`&amp;quot;`): 21 CL-SciSumm papers hold 1,030, which read as the words
# "amp", "quot", "apos". Only references closed by ";" are read (HTML also reads "&copy"
# or "&not" without one, which plain text holds as words: "R&D", "&nothing").
_REFERENCE = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")


def _decoded(reference: re.Match[str]) -> str:
    found = reference.group()
    if found[1] == "#":
        # html.unescape's rules for code points no character has ("&#0;": U+FFFD); those it
        # drops (control characters, "&#1;") still part words: "word&#1;play" is two.
        return html.unescape(found) or " "
    # Looked up whole: html.unescape reads the longest name it knows at the start, as HTML
    # reads "&copy" without ";", so "&copyright;" would be "©right;", "&ampersand;" "&ersand;".
    return html.entities.html5.get(found[1:], found)


def unescaped(text: str) -> str:
    """`text` with its character references decoded (twice escaped ones too; an unknown
    name is left as it is): the text a reader is shown."""
    if "&" not in text:
        return text
    for _ in range(3):  # escaped at most three times over: each pass decodes one
        decoded = _REFERENCE.sub(_decoded, text)
        if decoded == text:
            break
        text = decoded
    return text


def plain_text(text: str) -> str:
    """`text` as words are read from it: `unescaped`, and its soft hyphens removed with the
    line break after them. Only these characters change: the rest is the text as written.

    A word broken where it had a hard hyphen ("syntax-\\ninspired", extracted as "syntax\\xad
    inspired") is joined too: in CL-SciSumm's 5,380, the joined word is a GloVe word (of its
    first 100,000) and the parts are not for 3,187, the reverse ("finite state", "rule based",
    but also "alter nations", "tag gers") for 444, both or neither for the rest ("coref
    erence", "tok enization": nearly all joins). So, without a dictionary, joined is right far
    more often; left split, most parts were fragments that shaped topics ("fea", "tures").
    """
    text = unescaped(text)
    return _SOFT_BREAK.sub("", text) if "\u00ad" in text else text


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


def stop_list_info(stopwords: frozenset[str] | None, path: Path | None = None) -> StopListInfo:
    """What an index records of the stop list `stopwords` (None: the built-in one), read
    from `path` (None: not from a file): the sha256 of its words, sorted, each followed by
    a newline (UTF-8), so the same words give the same checksum whatever their file's
    order, case, comments or blank lines; and, for messages, where it came from ("the stop
    list in FILE", "the bundled stop list")."""
    words = default_stopwords() if stopwords is None else stopwords
    checksum = hashlib.sha256("".join(f"{word}\n" for word in sorted(words)).encode()).hexdigest()
    if path is not None:
        source = f"the stop list in {path.resolve()}"  # read from elsewhere, a relative name says nothing
    elif words == default_stopwords():
        source = "the bundled stop list"
    else:
        source = f"a stop list of {len(words)} word{'' if len(words) == 1 else 's'}"
    return StopListInfo(checksum, source)


def tokenize(text: str, stopwords: frozenset[str] | None = None) -> list[str]:
    """Content words of `text`, in order, with repeats (one entry per occurrence)."""
    return _content_tokens(plain_text(text), stopwords)


def _content_tokens(plain: str, stopwords: frozenset[str] | None) -> list[str]:
    """`tokenize` of text that is `plain_text` already (which is not always the same text
    twice over: a fourth escape, or a reference broken by a soft hyphen, is read once)."""
    stop = default_stopwords() if stopwords is None else stopwords
    words = _TOKEN.findall(plain.lower())
    # isalpha() is a C-speed test that clears nearly every word of the digit check (a
    # letter is never a decimal digit); only the rest pay for the regular expression.
    return [w for w in words if len(w) > 1 and w not in stop and (w.isalpha() or not _DIGIT.search(w))]


def tokenized_lines(text: str, stopwords: frozenset[str] | None = None) -> list[list[str]]:
    """`tokenize` of each line of `text` that has a content word. The text is made plain
    first, as a whole: a word broken at a soft hyphen before a line's end is one word, and
    the line it ends joins the line it starts (split first, its pieces were two words on
    two lines)."""
    return [tokens for line in plain_text(text).splitlines() if (tokens := _content_tokens(line, stopwords))]


# Roman numerals number pages, sections and lists ("ii", "xiv", "lii"); of two letters or
# more, only "mix" is also an English word. A few acronyms are numerals in form ("CD", "MD",
# "CM") and are not shown either.
_ROMAN = re.compile(r"(?=[ivxlcdm]{2,}$)m{0,3}(cm|cd|d?c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})")
_ROMAN_LETTERS = "ivxlcdm"
_NUMERAL_WORDS = frozenset({"mix"})


def is_readable(token: str, word: str) -> bool:
    """Whether a content word (`word`, as `tokenize` gives it; `token`, as the text wrote
    it) reads as a word: not a two-letter token written in lower case, and not a Roman
    numeral.

    Two-letter content words in lower case are not English words (those are stop words):
    in papers they are "et al.", variables and indices ("ti", "tj", "ek"), pieces of
    abbreviations ("eg", "cf") and PDF-extraction fragments ("co", "pr", "th"). Written
    in capitals they are acronyms ("NE", "MT", "LM") and read as words.
    """
    if len(word) == 2 and not token.isupper():
        return False
    # strip() is a C-speed test that clears nearly every word of the pattern.
    return bool(word.strip(_ROMAN_LETTERS)) or word in _NUMERAL_WORDS or not _ROMAN.fullmatch(word)


def readable_words(text: str, stopwords: frozenset[str] | None = None) -> list[str]:
    """The content words of `text` (`tokenize`) that read as words (`is_readable`), in
    order, with repeats."""
    return content_words(text, stopwords)[1]


def content_words(text: str, stopwords: frozenset[str] | None = None) -> tuple[list[str], list[str]]:
    """(`tokenize(text)`, `readable_words(text)`) from one pass over the text: the write
    path needs both of every document, and the text's tokenizing was half a topic worker's
    time when it was done twice."""
    text = plain_text(text)
    stop = default_stopwords() if stopwords is None else stopwords
    tokens: list[str] = []
    readable: list[str] = []
    # The words of the text as written, lowered one by one (is_readable reads their case).
    for token in _TOKEN.findall(text):
        word = token.lower()
        if len(word) > 1 and word not in stop and (word.isalpha() or not _DIGIT.search(word)):
            tokens.append(word)
            if is_readable(token, word):
                readable.append(word)
    # `tokenize` finds the words of the lowered text: the same ones wherever lowering keeps
    # every character one character, as the two texts then align character for character,
    # and lowers each as it lowers alone. A few letters are longer lowered ("İ" -> "i" + a
    # combining dot, which is no letter), and "Σ" is lowered by what follows it, past the
    # word's end: "ς" ending "aΣ" alone, "σ" in "aΣ'a" (str.lower's one such letter).
    if not text.isascii() and (len(text.lower()) != len(text) or "\u03a3" in text):
        tokens = _content_tokens(text, stopwords)
    return tokens, readable


def numbered(words: Sequence[str]) -> tuple[list[str], array[int]]:
    """`words` as each distinct word once, in the order they first occur, and each of them
    as its number among those: a long paper's 4,000 content words are some 1,100 distinct
    ones, and work per distinct word (hashing, stemming, a vector's row) is the smaller."""
    distinct = list(dict.fromkeys(words))
    number = {word: i for i, word in enumerate(distinct)}
    return distinct, array("I", map(number.__getitem__, words))


@dataclass(frozen=True)
class WordsRead:
    """A text's `content_words` kept compactly, for a request that reads them more than once
    (the service's sent texts: their topics and their terms): each distinct word once, and
    the two lists as numbers into them. A long paper's 4,000 content words are some 1,100
    distinct ones: about a third of the memory of the two lists of words, each occurrence
    a string of its own."""

    words: tuple[str, ...]  # distinct, in the order they first occur
    content: array[int]  # `tokenize(text)`: each word's number in `words`
    readable: array[int]  # `readable_words(text)`, the same way

    @classmethod
    def of(cls, text: str, stopwords: frozenset[str] | None = None) -> "WordsRead":
        tokens, readable = content_words(text, stopwords)
        # Both lists' words: in a few texts (see `content_words`) the readable ones are not
        # all among the content words. The content words come first, so that they are the
        # leading words of `words` (`numbered_tokens`).
        words, both = numbered([*tokens, *readable])
        return cls(tuple(words), both[: len(tokens)], both[len(tokens) :])

    def tokens(self) -> list[str]:
        """`tokenize(text)`."""
        return list(map(self.words.__getitem__, self.content))

    def numbered_tokens(self) -> tuple[Sequence[str], array[int]]:
        """`numbered(tokenize(text))`: the content words are the leading distinct words."""
        return self.words[: max(self.content, default=-1) + 1], self.content

    def readable_words(self) -> list[str]:
        """`readable_words(text)`."""
        return list(map(self.words.__getitem__, self.readable))


# The opening of a document shown in a list of hits, in words (`opening`): a line or two,
# enough to tell documents without a title apart.
SNIPPET_WORDS = 30


def counted(count: int, noun: str, *, plural: str | None = None, grouped: bool = False) -> str:
    """"1 document", "2 documents" (`plural`: "2 shown queries"; `grouped`: "50,000
    documents"): every message that counts, in the CLI, the service and the library."""
    return (f"{count:,}" if grouped else str(count)) + " " + (noun if count == 1 else plural or noun + "s")


def rounded(value: float) -> str:
    """A measured quantity as a person writes it in a message: two significant digits, and
    no fraction from 10 up ("5" for 4.99933, "0.46" for 0.4567, "1913" for 1913.4).
    A setting is shown as it was given instead."""
    if abs(value) >= 10:
        return str(round(value))
    return f"{float(f'{value:.2g}'):g}"


def listed(items: Sequence[str], shown: int) -> str:
    """The first `shown` of `items`, comma-separated, and how many more there are (for a
    message that names what it is about without printing thousands of ids)."""
    return ", ".join(items[:shown]) + (f" ... and {len(items) - shown} more" if len(items) > shown else "")


def opening(text: str, words: int) -> tuple[str, bool]:
    """The first `words` words of `text` (`unescaped`, whitespace collapsed), and whether
    it was cut. Soft hyphens are left to the reader's display, which shows one only where a
    line breaks."""
    parts = unescaped(text).split()
    return " ".join(parts[:words]), len(parts) > words
