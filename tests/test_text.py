import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reranker.errors import ConfigError
from reranker.text import (
    WordsRead,
    content_words,
    counted,
    default_stopwords,
    is_readable,
    load_stopwords,
    numbered,
    opening,
    plain_text,
    readable_words,
    tokenize,
)


def test_preprocessing_follows_the_paper() -> None:
    text = "The Hidden-Topic model of 2018 maps a summary onto 3D vectors, I think: x y Z, DOCUMENTS!"
    assert tokenize(text) == ["hidden", "topic", "model", "maps", "summary", "vectors", "think", "documents"]


def test_prepositions_and_contractions_are_dropped() -> None:
    assert tokenize("Between the lines, towards a theory; don't stop without it") == ["lines", "theory", "stop"]


def test_soft_hyphens_inside_words_are_removed() -> None:
    assert tokenize("multi\u00adlingual coreference") == ["multilingual", "coreference"]


def test_a_word_broken_at_a_soft_hyphen_across_lines_is_whole_again() -> None:
    # As CL-SciSumm's PDF text holds 5,380 words: "fea" and "tures" were two content words.
    assert tokenize("new fea\u00ad tures of lan\u00ad\nguage") == ["new", "features", "language"]


def test_character_references_are_read_as_the_characters_they_name() -> None:
    # As CL-SciSumm's XML-extracted text holds them, escaped twice at times: they read as
    # the words "amp", "quot", "apos".
    text = "the &amp;quot;best&amp;quot; parse &lt;s&gt; John&apos;s &#233;t&#xE9; R&D &copy &bogus;"
    assert plain_text(text) == "the \"best\" parse <s> John's été R&D &copy &bogus;"
    assert tokenize(text) == ["best", "parse", "john", "été", "copy", "bogus"]
    assert plain_text("&amp;amp;lt;") == "<" and plain_text("no references") == "no references"
    assert opening("the &amp;quot;best&amp;quot; multi\u00ad lingual parse", 4) == ("the \"best\" multi\u00ad lingual", True)


def test_a_named_reference_is_read_only_when_its_whole_name_is_known() -> None:
    # html.unescape alone reads the longest known name at the start ("&copy", "&amp", "&not"
    # are HTML's without ";"): "&copyright;" was "©right;", the word "right".
    assert plain_text("&copyright; &ampersand; &notit; &copy;") == "&copyright; &ampersand; &notit; ©"
    assert tokenize("&copyright; &ampersand;") == ["copyright", "ampersand"]


def test_references_to_no_character_and_soft_hyphens_alone() -> None:
    # html.unescape's rules: NUL, a surrogate and a code point past U+10FFFF are U+FFFD, no letter.
    assert plain_text("word&#0;play &#xD800; &#1114112;") == "word\ufffdplay \ufffd \ufffd"
    assert tokenize("word&#0;play &#xD800;x") == ["word", "play"]
    assert plain_text("\u00ad\u00ad \n\u00ad") == "" and content_words("\u00ad \u00ad") == ([], [])


def test_the_one_pass_reads_the_text_once_as_tokenize_does() -> None:
    # Where lowering lengthens the text ("İ"), the pass takes tokenize's words of the text it
    # made plain: made plain again, a fourth escape or a reference broken by a soft hyphen read
    # as other words ("amp", "lt").
    for text in ("İstanbul &amp;amp;amp;amp;lt;", "İx &am\u00adp; word"):
        assert content_words(text)[0] == tokenize(text)


def test_the_one_pass_lowers_a_final_sigma_as_tokenize_does() -> None:
    # str.lower reads past a word's end for "Σ": the word "aΣ" alone ends in "ς", and in
    # "aΣ'a" or "ΑΣ.Β" (an apostrophe or a full stop between letters) in "σ".
    for text in ("aΣ'a", "ΟΔΟΣ.Β", "ΟΔΟΣ Β"):
        assert content_words(text)[0] == tokenize(text)


def test_the_stop_list_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "stop.txt"
    path.write_text("# my list\nsummary\n\nVectors\n", encoding="utf-8")
    stop = load_stopwords(path)
    assert stop == frozenset({"summary", "vectors"})
    assert tokenize("the summary of vectors", stop) == ["the", "of"]
    assert load_stopwords(None) is default_stopwords()


def test_an_unreadable_stop_list_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="stop-word file"):
        load_stopwords(tmp_path / "missing.txt")


@given(st.text(alphabet=st.sampled_from(list("ab cZé5٣²½五Ⅻ_-'x\u00ad\n&;#mplt")), max_size=60))
def test_the_digit_rule_is_the_regular_expressions(text: str) -> None:
    """A token is dropped when it holds a decimal digit (\\d), whatever shortcut tests it."""
    expected = [
        w for w in re.findall(r"[^\W_]+", plain_text(text).lower())
        if len(w) > 1 and w not in default_stopwords() and not re.search(r"\d", w)
    ]
    assert tokenize(text) == expected


# Letters whose lower case is longer ("İ") or another letter ("Σ", "ǅ", "Ⅻ"), ligatures,
# two-letter words in either case, Roman numerals, digits, soft hyphens, pieces of character
# references.
_MIXED = list("aAbBiIvVxXcCmMdDlL İΣσǅﬁẞⅫ5٣²_-' .\u00ad\n&;#") + ["et", "al", "MT", "ii", "XIV", "mix", "amp;", "am", "p;", "#x130;", "shy;"]


@given(st.lists(st.sampled_from(_MIXED), max_size=40).map("".join))
def test_one_pass_gives_what_tokenize_and_readable_words_give(text: str) -> None:
    # The write path takes both from one pass (content_words); they must be tokenize's words
    # and the readable ones: the text's words as written, each lowered, that are content
    # words and read as words (written out here, as readable_words is that pass's second half).
    for stop in (default_stopwords(), frozenset({"mt"})):
        readable = [
            token.lower() for token in re.findall(r"[^\W_]+", plain_text(text))
            if len(token.lower()) > 1 and token.lower() not in stop and not re.search(r"\d", token) and is_readable(token, token.lower())
        ]
        assert content_words(text, stop) == (tokenize(text, stop), readable)
        assert readable_words(text, stop) == readable
        # Kept compactly for a request that reads a text twice, the same two lists.
        kept = WordsRead.of(text, stop)
        assert (kept.tokens(), kept.readable_words()) == (tokenize(text, stop), readable)
        assert len(kept.words) == len(set(kept.words))
        distinct, numbers = kept.numbered_tokens()
        assert (list(distinct), numbers) == numbered(tokenize(text, stop))


def test_a_text_kept_compactly_keeps_each_word_once() -> None:
    # "ΟΔΟΣ.Β": the readable word ("οδος", the word lowered alone) is not among the content
    # words ("οδοσ", the whole text lowered, where a letter follows past the full stop), and
    # both are kept.
    for text, words in (("Ships sail; ships SAIL far. MT mt", ("ships", "sail", "far", "mt")), ("ΟΔΟΣ.Β", ("οδοσ", "οδος"))):
        kept = WordsRead.of(text)
        assert (kept.tokens(), kept.readable_words()) == content_words(text)
        assert kept.words == words
        # The store's terms take the content words alone (not "οδος").
        distinct, numbers = kept.numbered_tokens()
        assert (list(distinct), numbers) == numbered(tokenize(text))


def test_counted_says_one_in_the_singular() -> None:
    """Messages counted "1 shown queries and 1 events" (experiment deletes and conflicts)."""
    assert counted(1, "event") == "1 event" and counted(0, "event") == "0 events" and counted(2, "event") == "2 events"
    assert counted(1, "shown query", plural="shown queries") == "1 shown query"
    assert counted(3, "shown query", plural="shown queries") == "3 shown queries"
    assert counted(50_000, "document", grouped=True) == "50,000 documents"


def test_a_reference_to_a_control_character_still_parts_words() -> None:
    # html.unescape reads "&#1;" as nothing, which joined the words on either side.
    assert tokenize("word&#1;play and game&#x1F;plan") == ["word", "play", "game", "plan"]
