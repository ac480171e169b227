"""Which fields the embedded first stage searches: BM25 nDCG@10 on both shared data sets.

    python bench/first_stage_fields.py     # about 20 s

Each variant is a tantivy index (Lucene's BM25, k1 = 1.2, b = 0.75) over the package's
content words (`reranker.text.tokenize`) of every document, queried with the judged
queries' content words (a word repeated in the query counts that many times), top 100.
The product's choice (`reranker/store/text_index.py`) is the row marked "default"; p is
the two-sided paired randomisation test of each variant against it on nDCG@10 (10,000
sign flips). Needs ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

from benchlib import product_threads, require, table

product_threads()  # the product's BLAS threads (RERANKER_BLAS_THREADS), before numpy loads

import numpy as np
import tantivy

from reranker.datasets import load_dataset
from reranker.evaluation import paired_randomization_p, ranking_metrics
from reranker.text import tokenize

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATASETS = ("clscisumm2018-train", "cisi")
WINDOW = 100
ANALYZERS = {
    "exact": lambda: tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build(),
    "stemmed": lambda: tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).filter(tantivy.Filter.stemmer("english")).build(),
}
# name -> fields as (field, analyzer, what it holds: "all" = title and text, "title", "text", boost)
VARIANTS: dict[str, list[tuple[str, str, str, float]]] = {
    "default: stemmed + exact, title in the same field": [("s", "stemmed", "all", 1.0), ("e", "exact", "all", 1.0)],
    "stemmed only": [("s", "stemmed", "all", 1.0)],
    "exact only": [("e", "exact", "all", 1.0)],
    "stemmed + exact, title twice in the field": [("s", "stemmed", "all2", 1.0), ("e", "exact", "all2", 1.0)],
    "stemmed title^1 + text (fields apart, most_fields)": [("t", "stemmed", "title", 1.0), ("b", "stemmed", "text", 1.0)],
    "stemmed title^2 + text (fields apart, most_fields)": [("t", "stemmed", "title", 2.0), ("b", "stemmed", "text", 1.0)],
}


def run_variant(fields: Sequence[tuple[str, str, str, float]], docs: list[tuple[str, str, str]], queries: list[tuple[str, str]]) -> dict[str, list[str]]:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    for name, analyzer, _, _ in fields:
        builder.add_text_field(name, tokenizer_name=analyzer, index_option="freq")
    schema = builder.build()
    analyzers = {name: make() for name, make in ANALYZERS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        index = tantivy.Index(schema, path=tmp)
        for name, analyzer in analyzers.items():
            index.register_tokenizer(name, analyzer)
        writer = index.writer(200_000_000, 1)
        for doc_id, title, text in docs:
            parts = {"title": title, "text": text, "all": f"{title} {text}", "all2": f"{title} {title} {text}"}
            document = tantivy.Document()
            document.add_text("id", doc_id)
            for name, _, holds, _ in fields:
                document.add_text(name, parts[holds])
            writer.add_document(document)
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        searcher = index.searcher()
        rankings = {}
        for query_id, text in queries:
            words = " ".join(tokenize(text))
            clauses = []
            for name, analyzer, _, boost in fields:
                for term, count in Counter(analyzers[analyzer].analyze(words)).items():
                    clause = tantivy.Query.term_query(schema, name, term, index_option="freq")
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(clause, boost * count)))
            hits = searcher.search(tantivy.Query.boolean_query(clauses), WINDOW, count=False).hits
            rankings[query_id] = [searcher.doc(address)["id"][0] for _, address in hits]
        return rankings


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    require(all((SHARED / name / "corpus.jsonl").is_file() for name in DATASETS), f"this needs {SHARED}")
    started = time.perf_counter()
    rows = []
    for name in DATASETS:
        dataset = load_dataset(SHARED / name)
        docs = []
        for line in (SHARED / name / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            docs.append((str(record["id"]), " ".join(tokenize(record.get("title") or "")), " ".join(tokenize(record["text"]))))
        queries = [(qid, text) for qid, text in dataset.queries if qid in dataset.qrels]
        per_variant = {}
        for variant, fields in VARIANTS.items():
            rankings = run_variant(fields, docs, queries)
            per_variant[variant] = [ranking_metrics(rankings[qid], dataset.qrels[qid], WINDOW)["ndcg@10"] for qid, _ in queries]
        default = per_variant[next(iter(VARIANTS))]
        for variant, scores in per_variant.items():
            p = "-" if scores is default else f"{paired_randomization_p(scores, default):.3f}"
            rows.append([name, variant, f"{np.mean(scores):.4f}", p])
    print(f"BM25 top {WINDOW}, nDCG@10; {time.perf_counter() - started:.0f} s\n")
    print(table(["data set", "fields", "nDCG@10", "p vs default"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
