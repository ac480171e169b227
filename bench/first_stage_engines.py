"""Would a pruning BM25 engine answer the embedded first stage's queries faster than tantivy?

    # 1. analyse, in the product's venv (its tokenizer, stop list and stemmer)
    python bench/first_stage_engines.py prep CORPUS.jsonl ../shared/data/clscisumm2018-train/queries.jsonl \\
        --documents 50000 --work DIR                  # -> DIR/docs.tok, stems.json, queries.json
    python bench/first_stage_engines.py mix --work DIR --documents 50000     # -> DIR/docs-mix.tok
    # 2. build and time, in a venv of their own (below)
    VENV/bin/python bench/first_stage_engines.py build tantivy --work DIR --documents 50000  # -> DIR/repeated/tantivy
    VENV/bin/python bench/first_stage_engines.py build pisa --work DIR --documents 50000
    VENV/bin/python bench/first_stage_engines.py build xapian --work DIR --documents 20000   # 24 ms a document
    VENV/bin/python bench/first_stage_engines.py time --work DIR --papers 567
    #    the same with --mix for the corpus of distinct documents (DIR/mix/ENGINE)

CORPUS is CL-SciSumm 2018's 567 training papers repeated, as `bench_first_stage.py` and
`bench_passages.py --documents N --store DIR` write it (DIR/corpus-N.jsonl; document i is
paper i mod 567). The queries are CL-SciSumm's 40 summaries.

Environments. `prep` runs in the product's venv: each document's content words are
`reranker.text.tokenize` of its title and text (`Document.full_text`, the bundled stop
list), each word's stem `reranker.store.text_index.stem_words`, a query's words its first
`MAX_QUERY_TERMS`, as `EmbeddedStore.bm25` takes them. `mix`, `build` and `time` need only
the files `prep` wrote; `build` and `time` run in a separate venv, NOT the product's:

    python3.11 -m venv VENV && VENV/bin/pip install numpy tantivy==0.27.0 xapian-bindings-binary pyterrier-pisa

(tantivy at the product's version, pyproject.toml). pyterrier-pisa brings about 45
packages (pandas, python-terrier, pyjnius; no JVM is needed to build or search), and Xapian
is GPL v2+ (its wheel carries no licence metadata): it is only ever a measurement here.
PISA is Apache-2.0, but its index is write-once (no add or delete by row id, no row-id
filter, no document-frequency call, k1 and b fixed per build).

What is compared. tantivy holds the product's schema (`TextIndex`: a `stemmed` and an
`exact` field, frequencies without positions, one segment as after `reranker compact`) and
is queried as `TextIndex.search` does: one should-clause per (field, distinct term), boosted
by the term's count in the query, a searcher per call, hits mapped to row ids through the
fast field. Xapian and PISA hold one field whose terms are the exact words and the stems
under a prefix: every word has one stem, so a document's two fields are equally long and one
field of both has the same length / average length, and each prefixed term the same
document frequency, as two: the same BM25 sum. Each query term is weighted by its count.
Xapian: BM25Weight(k1 1.2, k2 0, k3 1, b 0.75, min_normlen 0.5). PISA (pyterrier-pisa's
`_pisathon`, unquantised scores, k1 1.2, b 0.75): MaxScore (block_max_maxscore), block-max
WAND and exhaustive (ranked_or). `time` runs every engine on each query in turn (in the same order each time), top 100 then
top 10, after a warm-up pass; a timing covers building the query, the search and mapping
hits to row ids. The overlap is the mean |A & B| / k against tantivy's list; with --papers,
also of the papers the row ids stand for (counted as multisets), since the repeated corpus
ties each paper's copies and which copies enter a list is a matter of tie-breaking.

Results, 2026-11-27 (2 shared cores, load about 1; on the repeated corpus the overlap by
paper, by raw row id in brackets):

| corpus | engine | p50 / p90 ms top-100 | p50 top-10 | x tantivy @100 / @10 | overlap top-100 / top-10 |
|---|---|---|---|---|---|
| repeated, 50k | tantivy | 17.9 / 28.2 | 17.1 | 1 / 1 | 1 / 1 |
| | PISA MaxScore | 26.4 / 56.2 | 16.7 | 1.48 / 0.98 | 0.84 / 0.85 (ids 0.78 / 0.66) |
| | PISA block-max WAND | 297 / 1041 | 156 | 16.6 / 9.1 | 0.84 / 0.84 |
| | PISA exhaustive (ranked_or) | 67.2 / 114 | 67.1 | 3.8 / 3.9 | 0.84 / 0.85 |
| mix, 50k | tantivy | 18.8 / 32.3 | 20.1 | 1 / 1 | 1 / 1 |
| | PISA MaxScore | 20.7 / 45.7 | 13.4 | 1.10 / 0.67 | 0.77 / 0.64 |
| | PISA block-max WAND | 297 / 1162 | 165 | 15.8 / 8.2 | 0.77 / 0.64 |
| | PISA exhaustive (ranked_or) | 77.1 / 127 | 75.9 | 4.1 / 3.8 | 0.77 / 0.64 |
| repeated, 20k | tantivy | 9.5 / 13.9 | 8.6 | 1 / 1 | 1 / 1 |
| | Xapian | 134 / 208 | 139 | 14.1 / 16.3 | 0.90 / 0.90 |
| | PISA MaxScore | 14.4 / 26.0 | 8.4 | 1.52 / 0.98 | 0.84 / 0.85 |
| mix, 20k | tantivy | 9.6 / 15.9 | 9.4 | 1 / 1 | 1 / 1 |
| | Xapian | 148 / 247 | 146 | 15.5 / 15.5 | 0.91 / 0.81 |
| | PISA MaxScore | 12.4 / 26.1 | 7.2 | 1.30 / 0.76 | 0.82 / 0.68 |

tantivy is the fastest at a top 100; PISA's MaxScore takes 1.1-1.5x as long (it wins only
at a top 10), Xapian 14-16x. Xapian's time is its matcher's, not the query's form: scaled
weights, plain terms, within-query frequencies and an unordered result all took 191-213 ms
at p50 (top 100, the repeated 20k, on a busier machine). Index sizes: tantivy 107 MB at
50k; PISA's searched files 112 MB (1.8 GB more of its build's own files left beside them);
Xapian 187 MB compacted at 20k. Builds: tantivy 345 s, 0.32 GB peak at 50k; PISA 617 s,
8.3 GB peak at 50k; Xapian 619 s at 20k (about 24 ms of CPU a document).

Caveats. The repeated corpus ties every paper's copies, which hands a pruning engine its
top-100 threshold (the next paper's score) almost at once: `mix` writes N distinct
documents instead, each a random half of one paper's words plus a random half of
another's (seeded), so scores spread as over distinct papers. The scores differ a little
between engines, so lists differ at near-ties: Xapian and PISA take Robertson's idf,
log((N - n + 0.5) / (n + 0.5)), where tantivy (as Lucene) adds 1 inside the log; PISA also
floors a term's idf at a small epsilon (a term in more than half the documents); and
neither quantises document lengths as tantivy does (Lucene's one-byte norms).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import resource
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from benchlib import machine, require, table

ENGINES = ("tantivy", "xapian", "pisa")
# engine -> (its module, the pip install that provides it)
MODULES = {"tantivy": ("tantivy", "tantivy==0.27.0"), "xapian": ("xapian", "xapian-bindings-binary"),
           "pisa": ("pyterrier_pisa", "pyterrier-pisa")}
PAPERS = 567  # CL-SciSumm 2018's training papers: the repeated corpus's period
KS = (100, 10)
# Stems share the one field under a prefix. Words are lower-case; PISA's tokenizer lower-cases
# everything (so "s" + "table" would meet the word "stable"): there, a letter run that
# `build` checks no word of the corpus extends into prefix + stem.
STEM_PREFIX = {"xapian": "S", "pisa": "zzs"}
XAPIAN_MAX_TERM_BYTES = 240  # Xapian refuses terms over 245 bytes
PISA_ALGORITHMS = ("block_max_maxscore", "block_max_wand", "ranked_or")
PISA_BUILD_FILES = ("fwd", "inv.docs", "inv.freqs")  # read only while building


class BenchError(Exception):
    """Bad input or a missing package: one line, no traceback."""


def need(module: str, install: str) -> ModuleType:
    """Import `module` now, or say which pip install provides it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BenchError(f"this step needs {module}: pip install {install} (see the docstring for which venv)") from None


def log(message: str, started: float) -> None:
    print(f"{time.time() - started:7.1f} s  {message}", flush=True)


# --- prep: analysis with the product's own code (its venv) --------------------------


def analyse(lines: list[str]) -> list[str]:
    """Each corpus line's content words, space-joined (a worker's batch)."""
    from reranker.text import tokenize

    words = []
    for line in lines:
        item = json.loads(line)
        title, text = item.get("title") or "", item.get("text") or ""
        words.append(" ".join(tokenize(f"{title}\n{text}" if title else text)))  # Document.full_text
    return words


def batches(path: Path, documents: int, size: int = 200) -> Iterator[list[str]]:
    batch: list[str] = []
    with path.open(encoding="utf-8") as lines:
        for i, line in enumerate(lines):
            if i >= documents:
                break
            batch.append(line)
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def prep(corpus: Path, queries: Path, documents: int, work: Path, workers: int) -> None:
    from multiprocessing import Pool

    from benchlib import product_threads

    try:
        product_threads()
        from reranker.store import MAX_QUERY_TERMS
        from reranker.store.text_index import stem_words
        from reranker.text import tokenize
    except ImportError:
        raise BenchError("prep runs in the product's venv (it needs reranker: pip install -e . there)") from None
    for path in (corpus, queries):
        if not path.is_file():
            raise BenchError(f"no such file: {path}")
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    vocabulary: set[str] = set()
    done = 0
    with Pool(workers) as pool, (work / "docs.tok").open("w", encoding="utf-8") as out:
        for words in pool.imap(analyse, batches(corpus, documents)):
            for line in words:
                out.write(line + "\n")
                vocabulary.update(line.split())
            done += len(words)
            if done % 5000 == 0:
                log(f"{done} documents", started)
    analysed = []
    for line in queries.open(encoding="utf-8"):
        if line.strip():
            item = json.loads(line)
            words = tokenize(item["text"])[:MAX_QUERY_TERMS]
            analysed.append({"id": item["id"], "words": words})
            vocabulary.update(words)
    (work / "queries.json").write_text(json.dumps(analysed))
    distinct = sorted(vocabulary)
    stems: dict[str, str] = {}
    for i in range(0, len(distinct), 10_000):
        part = distinct[i : i + 10_000]
        stems.update(zip(part, stem_words(part)))
    (work / "stems.json").write_text(json.dumps(stems))
    log(f"done: {done} documents, {len(distinct)} distinct words, {len(analysed)} queries", started)


# --- mix: a corpus of distinct documents ---------------------------------------------


def mix(work: Path, documents: int, papers: int, seed: int) -> None:
    """Document i: a random half of paper a's words plus a random half of paper b's (a != b)."""
    source = tokens(work, mixed=False)
    texts: list[list[str]] = []
    with source.open(encoding="utf-8") as lines:
        for line in lines:
            if len(texts) == papers:
                break
            texts.append(line.split())
    if len(texts) < max(papers, 2):
        raise BenchError(f"{source} holds {len(texts)} documents; mix draws from the first {papers} (--papers)")
    rng = random.Random(seed)
    with (work / "docs-mix.tok").open("w", encoding="utf-8") as out:
        for _ in range(documents):
            a, b = rng.sample(range(len(texts)), 2)
            words = rng.sample(texts[a], len(texts[a]) // 2) + rng.sample(texts[b], len(texts[b]) // 2)
            out.write(" ".join(words) + "\n")
    print(f"wrote {documents} documents from {papers} papers (seed {seed}) to {work / 'docs-mix.tok'}")


# --- build ----------------------------------------------------------------------------


def tokens(work: Path, mixed: bool) -> Path:
    path = work / ("docs-mix.tok" if mixed else "docs.tok")
    if not path.is_file():
        raise BenchError(f"no {path}: run `{'mix' if mixed else 'prep'}` first")
    return path


def load_stems(work: Path) -> dict[str, str]:
    path = work / "stems.json"
    if not path.is_file():
        raise BenchError(f"no {path}: run `prep` first")
    stems: dict[str, str] = json.loads(path.read_text())
    return stems


def corpus_documents(work: Path, mixed: bool, documents: int) -> Iterator[tuple[int, list[str], list[str]]]:
    """(row id from 1, words, their stems) for the first `documents` documents; the files
    are checked now, before anything is built."""
    path, stems = tokens(work, mixed), load_stems(work)
    with path.open(encoding="utf-8") as lines:
        held = sum(1 for _ in lines)
    if held < documents:
        raise BenchError(f"{path} holds {held} documents, fewer than --documents {documents}")

    def rows() -> Iterator[tuple[int, list[str], list[str]]]:
        with path.open(encoding="utf-8") as lines:
            for rowid, line in enumerate(lines, 1):
                if rowid > documents:
                    break
                words = line.split()
                yield rowid, words, [stems[word] for word in words]

    return rows()


def tantivy_index(tantivy: Any, path: Path, reuse: bool) -> tuple[Any, Any]:
    """An index with the product's schema and analysers (`reranker.store.text_index`: the
    words arrive analysed), and its schema."""
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("rowid", indexed=True, fast=True)
    builder.add_text_field("id", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("stemmed", tokenizer_name="reranker_stemmed", index_option="freq")
    builder.add_text_field("exact", tokenizer_name="reranker_exact", index_option="freq")
    schema = builder.build()
    index = tantivy.Index(schema, path=str(path), reuse=reuse)
    whitespace = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
    for name in ("reranker_stemmed", "reranker_exact"):
        index.register_tokenizer(name, whitespace)
    return index, schema


def build_tantivy(docs: Iterator[tuple[int, list[str], list[str]]], out: Path) -> str:
    tantivy = need(*MODULES["tantivy"])
    out.mkdir(parents=True)
    index, _ = tantivy_index(tantivy, out, reuse=False)
    writer = index.writer(1_000_000_000, 1)  # as `reranker compact`: COMPACT_HEAP_BYTES, one thread, one segment
    started = time.time()
    for rowid, words, stems in docs:
        document = tantivy.Document()
        document.add_unsigned("rowid", rowid)
        document.add_text("id", str(rowid))
        document.add_text("stemmed", " ".join(stems))
        document.add_text("exact", " ".join(words))
        writer.add_document(document)
        if rowid % 5000 == 0:
            log(f"{rowid} documents", started)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    return f"{searcher.num_docs} documents, {searcher.num_segments} segment(s)"


def build_xapian(docs: Iterator[tuple[int, list[str], list[str]]], out: Path) -> str:
    os.environ.setdefault("XAPIAN_FLUSH_THRESHOLD", "10000")  # documents between flushes (default 10,000)
    xapian = need(*MODULES["xapian"])
    raw = out.with_name(out.name + ".raw")
    shutil.rmtree(raw, ignore_errors=True)
    db = xapian.WritableDatabase(str(raw), xapian.DB_CREATE_OR_OVERWRITE)
    started = time.time()
    skipped = 0
    for rowid, words, stems in docs:
        document = xapian.Document()
        for prefix, terms in (("", words), (STEM_PREFIX["xapian"], stems)):
            for term, count in Counter(terms).items():
                if len((prefix + term).encode()) <= XAPIAN_MAX_TERM_BYTES:
                    document.add_term(prefix + term, count)
                else:
                    skipped += 1
        db.replace_document(rowid, document)  # Xapian's document id is the row id
        if rowid % 5000 == 0:
            log(f"{rowid} documents", started)
    db.commit()
    db.close()
    log(f"indexed ({skipped} over-long terms left out); compacting", started)
    xapian.Database(str(raw)).compact(str(out))
    shutil.rmtree(raw)
    return f"{xapian.Database(str(out)).get_doccount()} documents, {skipped} over-long terms left out"


def build_pisa(docs: Iterator[tuple[int, list[str], list[str]]], out: Path) -> str:
    pyterrier_pisa = need(*MODULES["pisa"])
    started = time.time()
    # PISA's own tokenizer over the space-joined terms (already lower-case runs of letters
    # and digits): no stemmer and no stop list, so the terms stay as given.
    index = pyterrier_pisa.PisaIndex(str(out), stemmer="none", stops="none", threads=1)
    prefix = STEM_PREFIX["pisa"]

    def texts() -> Iterator[dict[str, str]]:
        for rowid, words, stems in docs:
            if rowid % 5000 == 0:
                log(f"{rowid} documents", started)
            yield {"docno": str(rowid), "text": " ".join(words) + " " + " ".join(prefix + stem for stem in stems)}

    index.index(texts())
    pisa_context(pyterrier_pisa, out)  # the scored, compressed index, which a first search would write
    return f"{index.num_docs()} documents"


def pisa_context(pyterrier_pisa: Any, path: Path) -> tuple[Any, Any]:
    """PISA's retrieval context over its BM25 index (k1 1.2, b 0.75, unquantised), written
    from the build's forward and inverted files if it is not there yet; and the index."""
    index = pyterrier_pisa.PisaIndex(str(path), stemmer="none", stops="none", threads=1)
    context = pyterrier_pisa._pisathon.RetrievalContext()
    pyterrier_pisa._pisathon.prepare_index(context, str(index.path), index.index_encoding.value, "bm25", "", quantize=0,
                                           stop_fname="", bm25_k1=1.2, bm25_b=0.75)
    return context, index


def megabytes(path: Path, names: Sequence[str] | None = None) -> float:
    files = [f for f in path.rglob("*") if f.is_file() and (names is None or f.name in names)]
    return sum(f.stat().st_size for f in files) / 1e6


def build(engine: str, work: Path, mixed: bool, documents: int) -> None:
    out = work / ("mix" if mixed else "repeated") / engine
    need(*MODULES[engine])  # before anything is removed
    docs = corpus_documents(work, mixed, documents)
    if engine in STEM_PREFIX:
        stems = load_stems(work)
        prefix, forms = STEM_PREFIX[engine], set(stems.values())
        clashes = sorted(word for word in stems if word.startswith(prefix) and word[len(prefix) :] in forms)
        if clashes:
            raise BenchError(f"words that read as a prefixed stem in {engine}'s one field: {', '.join(clashes[:5])}")
    shutil.rmtree(out, ignore_errors=True)
    (out.parent / f"{engine}.json").unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    info = {"tantivy": build_tantivy, "xapian": build_xapian, "pisa": build_pisa}[engine](docs, out)
    seconds = time.time() - started
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1e6
    size = megabytes(out)
    record = {"engine": engine, "documents": documents, "corpus": out.parent.name, "seconds": round(seconds, 1),
              "peak_rss_gb": round(peak, 2), "megabytes": round(size, 1)}
    if engine == "pisa":
        record["build_only_megabytes"] = round(megabytes(out, PISA_BUILD_FILES), 1)
    (out.parent / f"{engine}.json").write_text(json.dumps(record, indent=2))
    log(f"{engine}: {info}; {size:.0f} MB on disk, peak RSS {peak:.2f} GB -> {out}", started)


# --- time -----------------------------------------------------------------------------


Query = tuple[str, Counter[str], Counter[str]]  # id, exact words' counts, stems' counts


class Engine(Protocol):
    name: str
    info: str

    def search(self, exact: Counter[str], stemmed: Counter[str], k: int) -> list[int]: ...


class Tantivy:
    name = "tantivy"

    def __init__(self, path: Path) -> None:
        self.tantivy = need(*MODULES["tantivy"])
        self.index, self.schema = tantivy_index(self.tantivy, path, reuse=True)
        searcher = self.index.searcher()
        self.info = f"{searcher.num_docs} documents, {searcher.num_segments} segment(s)"

    def search(self, exact: Counter[str], stemmed: Counter[str], k: int) -> list[int]:
        t = self.tantivy
        clauses = []
        for field, terms in (("stemmed", stemmed), ("exact", exact)):
            for term, count in terms.items():
                clause = t.Query.term_query(self.schema, field, term, index_option="freq")
                clauses.append((t.Occur.Should, t.Query.boost_query(clause, float(count))))
        searcher = self.index.searcher()  # as TextIndex.search: one per call
        hits = searcher.search(t.Query.boolean_query(clauses), k, count=False).hits
        return [int(rowid) for rowid in searcher.fast_field_values("rowid", [address for _, address in hits])]


class Xapian:
    name = "xapian"

    def __init__(self, path: Path) -> None:
        self.xapian = need(*MODULES["xapian"])
        self.db = self.xapian.Database(str(path))
        # Lucene's BM25 as near as Xapian's allows: k1 1.2, k2 0 (no extra length term),
        # k3 1 (each query term has wqf 1; its count scales its weight), b 0.75,
        # min_normlen 0.5 (Xapian's default).
        self.weight = self.xapian.BM25Weight(1.2, 0, 1, 0.75, 0.5)
        self.info = f"{self.db.get_doccount()} documents"

    def search(self, exact: Counter[str], stemmed: Counter[str], k: int) -> list[int]:
        x = self.xapian
        clauses = []
        for prefix, terms in ((STEM_PREFIX["xapian"], stemmed), ("", exact)):
            for term, count in terms.items():
                clause = x.Query(prefix + term)
                clauses.append(clause if count == 1 else x.Query(x.Query.OP_SCALE_WEIGHT, clause, float(count)))
        enquire = x.Enquire(self.db)
        enquire.set_weighting_scheme(self.weight)
        enquire.set_query(x.Query(x.Query.OP_OR, clauses))
        return [match.docid for match in enquire.get_mset(0, k)]


class Pisa:
    def __init__(self, path: Path, algorithm: str) -> None:
        self.numpy = need("numpy", "numpy")
        pyterrier_pisa = need(*MODULES["pisa"])
        # pyterrier-pisa's own retrieval goes through pandas frames; its extension module,
        # called directly, costs what PISA's search does.
        self.pisa = pyterrier_pisa._pisathon
        self.name = f"pisa-{algorithm}"
        self.algorithm = algorithm
        self.context, index = pisa_context(pyterrier_pisa, path)
        self.info = f"{index.num_docs()} documents"

    def search(self, exact: Counter[str], stemmed: Counter[str], k: int) -> list[int]:
        np = self.numpy
        terms = {term: float(count) for term, count in exact.items()}
        terms.update({STEM_PREFIX["pisa"] + term: float(count) for term, count in stemmed.items()})
        docnos = np.empty(k, dtype=object)
        found = self.pisa.retrieve(
            self.context, self.algorithm, [(0, terms)], k=k, threads=1, query_weighted=1, pretokenised=True,
            result_qidxs=np.empty(k, dtype=np.int32), result_docnos=docnos, result_ranks=np.empty(k, dtype=np.int32),
            result_scores=np.empty(k, dtype=np.float32),
        )
        return [int(docno) for docno in docnos[:found]]


def load_queries(work: Path) -> list[Query]:
    path = work / "queries.json"
    if not path.is_file():
        raise BenchError(f"no {path}: run `prep` first")
    stems = load_stems(work)
    return [(q["id"], Counter(q["words"]), Counter(stems[word] for word in q["words"])) for q in json.loads(path.read_text())]


def open_engines(folder: Path, wanted: Sequence[str]) -> list[Engine]:
    built = {engine: json.loads((folder / f"{engine}.json").read_text())
             for engine in wanted if (folder / f"{engine}.json").is_file() and (folder / engine).is_dir()}
    if "tantivy" not in built:
        raise BenchError(f"no tantivy index in {folder} (the baseline): run `build tantivy` first")
    sizes = {record["documents"] for record in built.values()}
    if len(sizes) > 1:
        raise BenchError(f"the indexes in {folder} hold different numbers of documents: {json.dumps(built)}")
    for record in built.values():
        extra = f", {record['build_only_megabytes']:.0f} MB of it its build's own files" if "build_only_megabytes" in record else ""
        print(f"{record['engine']} index: built in {record['seconds']:.0f} s, peak RSS {record['peak_rss_gb']:.2f} GB, "
              f"{record['megabytes']:.0f} MB{extra}")
    engines: list[Engine] = [Tantivy(folder / "tantivy")]
    if "xapian" in built:
        engines.append(Xapian(folder / "xapian"))
    if "pisa" in built:
        engines += [Pisa(folder / "pisa", algorithm) for algorithm in PISA_ALGORITHMS]
    return engines


def overlap(found: list[int], baseline: list[int], k: int, papers: int = 0) -> float:
    """|found & baseline| / k, of row ids, or with `papers` of the papers they repeat (as multisets)."""
    if not papers:
        return len(set(found) & set(baseline)) / k
    ours, theirs = Counter((r - 1) % papers for r in found), Counter((r - 1) % papers for r in baseline)
    return sum(min(count, theirs[paper]) for paper, count in ours.items()) / k


def time_engines(work: Path, mixed: bool, rounds: int, papers: int, wanted: Sequence[str]) -> None:
    folder = work / ("mix" if mixed else "repeated")
    queries = load_queries(work)
    engines = open_engines(folder, wanted)
    packages = [name for name, engine in (("tantivy", "tantivy"), ("xapian-bindings-binary", "xapian"), ("pyterrier-pisa", "pisa"))
                if any(e.name.startswith(engine) for e in engines)]
    print(json.dumps(machine(packages, os.environ.get("OPENBLAS_NUM_THREADS", "?"), corpus=folder.name, rounds=rounds)))
    for engine in engines:
        print(f"{engine.name}: {engine.info}")
    clauses = [len(exact) + len(stemmed) for _, exact, stemmed in queries]
    print(f"{len(queries)} queries, {min(clauses)}-{max(clauses)} term clauses (median {statistics.median(clauses)})")
    times: dict[tuple[str, int], list[float]] = {(e.name, k): [] for e in engines for k in KS}
    found: dict[tuple[str, int, int], list[int]] = {}
    for round_ in range(rounds + 1):  # round 0 warms up, untimed, and keeps each list
        for i, (_, exact, stemmed) in enumerate(queries):
            for k in KS:
                for engine in engines:
                    started = time.perf_counter()
                    hits = engine.search(exact, stemmed, k)
                    took = (time.perf_counter() - started) * 1000
                    if round_:
                        times[(engine.name, k)].append(took)
                    else:
                        require(len(hits) <= k, f"{engine.name} returned {len(hits)} hits for a top {k}")
                        found[(engine.name, k, i)] = hits

    def p90(values: list[float]) -> float:
        return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]

    def mean_overlap(name: str, k: int, by_papers: int = 0) -> float:
        return statistics.mean(overlap(found[(name, k, i)], found[("tantivy", k, i)], k, by_papers) for i in range(len(queries)))

    base = {k: statistics.median(times[("tantivy", k)]) for k in KS}
    headers = ["engine", "p50@100", "p90@100", "p50@10", "p90@10", "x tantivy@100", "x tantivy@10", "overlap@100", "overlap@10"]
    if papers:
        headers += ["papers@100", "papers@10"]
    rows = []
    for engine in engines:
        p50 = {k: statistics.median(times[(engine.name, k)]) for k in KS}
        row = [engine.name, f"{p50[100]:.2f}", f"{p90(times[(engine.name, 100)]):.2f}", f"{p50[10]:.2f}",
               f"{p90(times[(engine.name, 10)]):.2f}", f"{p50[100] / base[100]:.2f}", f"{p50[10] / base[10]:.2f}",
               *(f"{mean_overlap(engine.name, k):.3f}" for k in KS)]
        if papers:
            row += [f"{mean_overlap(engine.name, k, papers):.3f}" for k in KS]
        rows.append(row)
    print(f"\nms per query, {rounds} round(s) of {len(queries)} queries; overlap with tantivy's list, by row id"
          + (f" and by paper (row id mod {papers})" if papers else ""))
    print(table(headers, rows))
    (folder / "times.json").write_text(json.dumps({f"{name}@{k}": values for (name, k), values in times.items()}))
    print(f"\nevery timing: {folder / 'times.json'}")


# --- command line ---------------------------------------------------------------------


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    step = commands.add_parser("prep", help="analyse corpus and queries with the product's code (its venv)")
    step.add_argument("corpus", type=Path, help="JSON lines of {id, title, text}")
    step.add_argument("queries", type=Path, help="JSON lines of {id, text}")
    step.add_argument("--documents", type=positive, required=True, help="the corpus's first N documents")
    step.add_argument("--work", type=Path, required=True, help="folder for every step's files")
    step.add_argument("--workers", type=positive, default=2, help="analysing processes (default 2)")
    step = commands.add_parser("mix", help="a corpus of distinct documents from the first papers")
    step.add_argument("--work", type=Path, required=True)
    step.add_argument("--documents", type=positive, required=True)
    step.add_argument("--papers", type=positive, default=PAPERS, help=f"draw from the first N documents (default {PAPERS})")
    step.add_argument("--seed", type=int, default=45)
    step = commands.add_parser("build", help="index the analysed documents into one engine (a separate venv)")
    step.add_argument("engine", choices=ENGINES)
    step.add_argument("--work", type=Path, required=True)
    step.add_argument("--mix", action="store_true", help="mix's corpus (WORK/mix/ENGINE) rather than the repeated one (WORK/repeated/ENGINE)")
    step.add_argument("--documents", type=positive, required=True)
    step = commands.add_parser("time", help="time every built engine against tantivy (a separate venv)")
    step.add_argument("--work", type=Path, required=True)
    step.add_argument("--mix", action="store_true")
    step.add_argument("--rounds", type=positive, default=3, help="timed rounds after the warm-up (default 3)")
    step.add_argument("--papers", type=positive, help="also the overlap of papers, row id mod N (the repeated corpus: 567)")
    step.add_argument("--engines", default=",".join(ENGINES), help="which built engines to time (default all; tantivy always)")
    args = parser.parse_args(argv)
    try:
        if args.command == "prep":
            prep(args.corpus, args.queries, args.documents, args.work, args.workers)
        elif args.command == "mix":
            mix(args.work, args.documents, args.papers, args.seed)
        elif args.command == "build":
            build(args.engine, args.work, args.mix, args.documents)
        else:
            wanted = [name.strip() for name in args.engines.split(",") if name.strip()]
            unknown = sorted(set(wanted) - set(ENGINES))
            if unknown:
                raise BenchError(f"unknown engine(s) {', '.join(unknown)}: choose from {', '.join(ENGINES)}")
            time_engines(args.work, args.mix, args.rounds, args.papers or 0, ["tantivy", *wanted])
    except BenchError as exc:
        print(f"first_stage_engines: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
