"""Shared fixtures: real word vectors (the bundled GloVe), real stores on disk, tiny data."""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import pytest
from hypothesis import settings

from reranker.cli import main
from reranker.embeddings import WordVectors, load_vectors
from reranker.pipeline import Engine
from reranker.store.embedded import EmbeddedStore

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLE = Path(str(resources.files("reranker").joinpath("sample")))

# Property tests explore the same examples on every run: a red CI is reproducible.
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.load_profile("repeatable")


def write_jsonl(path: Path, records: Iterable[Any]) -> Path:
    """Write records (dicts, or raw strings written as they are) one per line."""
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record if isinstance(record, str) else json.dumps(record))
            handle.write("\n")
    return path


@pytest.fixture(scope="session")
def vectors_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vectors")


@pytest.fixture(scope="session")
def glove(vectors_cache: Path) -> WordVectors:
    """The bundled GloVe 6B 50-d vectors, converted once per test session."""
    return load_vectors("glove-6b-50d", vectors_cache)


class InterruptAfter:
    """A progress bar that stops an indexing run at its `lines`-th line, as Ctrl-C would."""

    def __init__(self, lines: int) -> None:
        self.lines, self.seen = lines, 0

    def update(self, n: int) -> None:
        self.seen += 1
        if self.seen == self.lines:
            raise KeyboardInterrupt


@pytest.fixture
def data_dir(tmp_path: Path, vectors_cache: Path, glove: object) -> Path:
    """A fresh data dir that reuses the session's converted GloVe vectors."""
    directory = tmp_path / "data"
    directory.mkdir()
    (directory / "vectors").symlink_to(vectors_cache, target_is_directory=True)
    return directory


def run(data_dir: Path, *argv: str) -> tuple[int, str]:
    """`reranker --data-dir DATA_DIR ARGV...` in-process: (exit code, standard output)."""
    out = io.StringIO()
    code = main(["--data-dir", str(data_dir), *argv], stdout=out)
    return code, out.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> Iterable[EmbeddedStore]:
    opened = EmbeddedStore(tmp_path / "store")
    yield opened
    opened.close()


@pytest.fixture
def engine(store: EmbeddedStore, glove: WordVectors) -> Engine:
    return Engine(store=store, vectors=glove)


TINY_CORPUS = [
    {
        "id": "ships",
        "title": "Sailing ships",
        "text": "The ocean voyage of sailing ships: sailors, harbours, wind, sails and storms at sea. "
        "The captain steers the vessel across the ocean while the crew hoists the sails.",
    },
    {
        "id": "cooking",
        "title": "Baking bread",
        "text": "Bread is baked from flour, water, yeast and salt. The dough rises in a warm kitchen "
        "before the baker puts the loaf in a hot oven; butter and cheese go well with it.",
    },
    {
        "id": "chess",
        "title": "Chess openings",
        "text": "Chess players study openings: the king's pawn, the queen's gambit and the sicilian "
        "defence. A grandmaster plans moves with the bishop, knight and rook to checkmate the king.",
    },
]
