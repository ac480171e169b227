"""The rankers' names, without the rankers: known where numpy must not load yet.

gunicorn's master checks RERANKER_DEFAULT_RANKER before it forks, and its workers size
their BLAS threads when they start (reranker/threads.py): numpy loaded in the master would
come to them with its pools already made. The registry (reranker/rankers) builds a ranker
for each name here, and only these.
"""

from __future__ import annotations

import itertools
from typing import Literal, Sequence

Method = Literal["minmax", "zscore", "rrf", "maxp"]
METHODS: tuple[Method, ...] = ("minmax", "zscore", "rrf", "maxp")
# The rankers that score alone, BM25 aside.
BASES = ("hidden_topics", "hidden_topics_code", "hidden_topics_corrected", "wmd", "doc2vec")
# The rankers that join N-way fusions: one of each kind of evidence (topics, a document
# embedding, word-level transport), so a fusion adds a view rather than a near copy.
N_WAY_BASES = ("hidden_topics_corrected", "doc2vec", "wmd")


def fusion_name(bases: str | Sequence[str], method: Method) -> str:
    """The registry name: `hidden_topics+bm25` (min-max), `wmd+bm25:rrf`,
    `hidden_topics_corrected+doc2vec+bm25`, ..."""
    joined = bases if isinstance(bases, str) else "+".join(bases)
    return f"{joined}+bm25" if method == "minmax" else f"{joined}+bm25:{method}"


def fusions() -> list[tuple[tuple[str, ...], Method]]:
    """The registered fusions with BM25, as (bases, method): every base ranker's two-way
    fusion, and the N-way fusions of N_WAY_BASES."""
    combinations = [(name,) for name in BASES] + [
        combo for size in (2, 3) for combo in itertools.combinations(N_WAY_BASES, size)
    ]
    return [(combo, method) for combo in combinations for method in METHODS]


RANKER_NAMES: tuple[str, ...] = ("bm25", *BASES, *(fusion_name(combo, method) for combo, method in fusions()))
