from pathlib import Path

import pytest

from reranker.errors import ConfigError
from reranker.text import default_stopwords, load_stopwords, tokenize


def test_preprocessing_follows_the_paper() -> None:
    text = "The Hidden-Topic model of 2018 maps a summary onto 3D vectors, I think: x y Z, DOCUMENTS!"
    assert tokenize(text) == ["hidden", "topic", "model", "maps", "summary", "vectors", "think", "documents"]


def test_prepositions_and_contractions_are_dropped() -> None:
    assert tokenize("Between the lines, towards a theory; don't stop without it") == ["lines", "theory", "stop"]


def test_soft_hyphens_inside_words_are_removed() -> None:
    assert tokenize("multi\u00adlingual coreference") == ["multilingual", "coreference"]


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
