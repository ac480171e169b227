"""Judged data sets: a corpus, its queries, and which documents are relevant to each.

A dataset folder holds `corpus.jsonl` ({"id", "title", "text"} per line),
`queries.jsonl` ({"id", "text"}) and `qrels.tsv` (query_id, doc_id, relevance; a
header line is skipped), the layout of the data sets under ../shared/data. A folder in
BEIR's layout (Thakur et al., NeurIPS 2021 Datasets and Benchmarks), the one public IR
data sets are most often shipped in, reads as it is: its records name their ids `_id`,
and its judgments are `qrels/test.tsv` (another split: `qrels_file="qrels/dev.tsv"`).

The judgments may instead come from the body of an OpenSearch (or Elasticsearch)
`_rank_eval` request, the rated-documents JSON search teams already keep:

    {"requests": [{"id": "q1", "request": {"query": {"match": {"text": "..."}}},
                   "ratings": [{"_index": "papers", "_id": "d1", "rating": 1}, ...]}, ...],
     "metric": {...}}

Every loader raises InputError naming the file (and line or request) and the reason.
"""

from __future__ import annotations

import json
import logging
import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reranker.errors import InputError
from reranker.text import listed
from reranker.types import Document

log = logging.getLogger(__name__)

QRELS_FILE = "qrels.tsv"
# Where a BEIR folder keeps the judgments of its test split, read when there is no qrels.tsv.
BEIR_QRELS_FILE = "qrels/test.tsv"
# What a header line calls the relevance column (BEIR: score); any other word is an error.
_RELEVANCE_HEADINGS = frozenset({"relevance", "score", "rel", "rating", "label", "grade", "judgment"})
# The full-text queries whose text `query_text` reads out of a `_rank_eval` request.
_TEXT_QUERIES = ("match", "match_phrase", "match_bool_prefix", "multi_match", "query_string", "simple_query_string")


@dataclass(frozen=True)
class Dataset:
    """Judged queries over a corpus. qrels: query id -> {doc id: relevance > 0}.

    judgments: where the qrels came from, as reports name it (`qrels.tsv`, the `_rank_eval`
    file's path as given, `co-citation (qrels.tsv)`); judgments_path: that file, for messages
    (None: the corpus's folder's `judgments`).
    """

    name: str
    corpus_path: Path
    queries: tuple[tuple[str, str], ...]
    qrels: dict[str, dict[str, int]]
    judgments: str = QRELS_FILE
    judgments_path: Path | None = None


def load_queries(path: Path) -> list[tuple[str, str]]:
    """(id, text) pairs from a JSONL file. Raises InputError naming file and line, also for
    an id given twice: results are kept per query id, so one of the two would go unmeasured."""
    queries: list[tuple[str, str]] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(_read_lines(path), start=1):
        if line.strip():
            query = parse_record(line, f"{path}:{number}", titled=False)
            if query.id in first_line:
                raise InputError(
                    f"id {query.id!r} is given again (first on line {first_line[query.id]}): each query needs an id of its own",
                    f"{path}:{number}",
                )
            first_line[query.id] = number
            queries.append((query.id, query.text))
    return queries


def parse_record(line: str, location: str, *, titled: bool = True) -> Document:
    """One JSONL line of a corpus (`titled`) or a query file -> its record. The one reader
    of both, so the same mistake reads the same in `index` and `evaluate`.

    Required: "id" (string or integer; BEIR's "_id" is read too) and "text" (a string, not
    blank; a document's "title" may stand in for it). Optional, `titled` only: "title" (a
    string; null is none). Other keys are kept as `fields` (a document's metadata).
    Raises InputError naming `location` ("file:line").
    """
    try:
        record = json.loads(
            line, parse_constant=lambda name: _not_json(name, location), parse_float=lambda literal: _finite(literal, location)
        )
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at column {exc.colno})", location) from None
    if not isinstance(record, dict):
        raise InputError("expected a JSON object with an 'id' and a 'text'", location)
    record_key = record_id(record, location)
    text, title = record.get("text"), (record.get("title") if titled else None)
    if not isinstance(text, str):
        raise InputError(f"id {record_key!r}: missing 'text' (a string)", location)
    if title is not None and not isinstance(title, str):
        raise InputError(f"id {record_key!r}: 'title' must be a string", location)
    if not (text.strip() or (title or "").strip()):
        raise InputError(f"id {record_key!r}: empty text", location)
    # `_id` is no field: OpenSearch refuses it inside a document's source.
    fields = {key: value for key, value in record.items() if key not in ("id", "_id", "title", "text")}
    return Document(id=record_key, title=title or "", text=text, fields=fields)


def _not_json(name: str, location: str) -> Any:
    """Python's reader takes NaN and Infinity, which JSON has no word for: kept in a
    document's metadata, they made every later filter fail on "malformed JSON" (SQLite's
    reader refuses them) without naming the document, and a cluster refuses them too."""
    raise InputError(f"not valid JSON ({name} is not a JSON value: write null or a number)", location)


def _finite(literal: str, location: str) -> float:
    """A number beyond a double (1e999) is read as infinity, stored as Infinity: the same
    malformed metadata as _not_json's, from a line of valid JSON."""
    value = float(literal)
    if not math.isfinite(value):
        raise InputError(f"the number {literal[:40]} is out of range: write null or a number a double holds", location)
    return value


def record_id(record: dict[str, Any], location: str) -> str:
    """A corpus or query record's id: its "id", or BEIR's "_id". Raises InputError naming
    `location` when there is none, it is not a non-blank string or an integer, it holds a
    control character, or the record gives both and they differ (which one the judgments
    mean could not be told)."""
    given = [record[key] for key in ("id", "_id") if key in record]
    if len(given) == 2 and str(given[0]) != str(given[1]):
        raise InputError(f"'id' {given[0]!r} and '_id' {given[1]!r} differ: give one", location)
    value = given[0] if given else None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise InputError("missing or invalid 'id' (a non-blank string or an integer; BEIR's '_id' is read too)", location)
    key = str(value)
    control = control_character(key)
    if control is not None:
        raise InputError(f"id {key!r} holds a control character (U+{ord(control):04X}): ids are written into tab-separated files and one-line tables", location)
    return key


def control_character(text: str) -> str | None:
    """The first control character (a tab, a line break, ...) in `text`, or None.

    Ids are written into tab-separated judgments, TREC run files and one-line tables, where
    a tab or a line break would shift or split a row: an id holding one is refused where a
    corpus or queries are read (`record_id`), and left out where judgments are made from
    what a cluster indexed by others returned (`judgments.judge`), not mangled there."""
    return next((char for char in text if unicodedata.category(char) == "Cc"), None)


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {doc id: relevance}; rows with relevance <= 0 are dropped. A first line
    that names its columns (BEIR's `query-id corpus-id score`) is skipped. A pair given
    twice with two relevances is an error (the same row twice is not)."""
    qrels: dict[str, dict[str, int]] = {}
    graded: dict[tuple[str, str], tuple[int, int]] = {}  # (query, doc) -> (relevance, line), every row
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) == 4:  # TREC layout: query, iteration, doc, relevance
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            # TREC's own qrels files separate their columns with spaces; ids may hold spaces,
            # so they are not split there, and the message says how to convert such a file.
            spaced = len(parts) == 1 and len(line.split()) in (3, 4)
            raise InputError(
                f"expected 3 tab-separated columns (query_id, doc_id, relevance) or the TREC layout's 4 "
                f"(query_id, iteration, doc_id, relevance), got {len(parts)}"
                + (
                    ": the columns are separated by spaces, as in TREC's own qrels files; separate them by tabs "
                    "(ids may hold spaces), e.g. tr ' ' '\\t' < FILE.qrels > qrels.tsv"
                    if spaced
                    else ""
                ),
                f"{path}:{number}",
            )
        query_id, doc_id, raw = parts
        try:
            relevance = int(raw)
        except ValueError:
            if number == 1 and raw.strip().lower() in _RELEVANCE_HEADINGS:
                continue
            raise InputError(f"relevance must be an integer, got {raw!r}", f"{path}:{number}") from None
        earlier = graded.setdefault((query_id, doc_id), (relevance, number))
        if earlier[0] != relevance:  # which grade holds is no reader's guess to make
            raise InputError(
                f"query {query_id!r}, document {doc_id!r}: relevance {relevance}, but {earlier[0]} on line {earlier[1]}",
                f"{path}:{number}",
            )
        if relevance > 0:
            qrels.setdefault(query_id, {})[doc_id] = relevance
    return qrels


def _read_lines(path: Path) -> list[str]:
    return _read_text(path).splitlines()


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: a byte-order mark (as Windows tools write) is no part of the first
        # query id, which then matched no judgment, or of the first JSON line.
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except IsADirectoryError:
        raise InputError("is a folder; expected a file", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", str(path)) from None


# --- OpenSearch `_rank_eval` rated documents ---------------------------------------------


@dataclass(frozen=True)
class RatedRequest:
    """One entry of a `_rank_eval` body's `requests`.

    text: the query text found in `request.query` (None when there is none, e.g. a
    search-template request). relevant: doc id -> rating, ratings <= 0 left out.
    """

    id: str
    text: str | None
    relevant: dict[str, int]


def load_rank_eval(path: Path) -> list[RatedRequest]:
    """The requests of a `_rank_eval` body: {"requests": [{"id", "request"?,
    "ratings": [{"_index", "_id", "rating"}, ...]}, ...], "metric"?: ...}.

    Ratings are integers (as OpenSearch's rated documents are); `_index` is not
    checked, since the comparison runs over one corpus. Raises InputError naming the
    file and the request for invalid JSON, a missing or duplicate id, a rating that
    is not an integer, or a document rated twice in one request.
    """
    try:
        body = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", str(path)) from None
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests:
        raise InputError(
            "expected a _rank_eval body: an object with a non-empty 'requests' list", str(path)
        )
    parsed: list[RatedRequest] = []
    seen: set[str] = set()
    for position, request in enumerate(requests):
        try:
            rated = _rated_request(request, f"requests[{position}]")
        except _Malformed as exc:
            raise InputError(str(exc), str(path)) from None
        if rated.id in seen:
            raise InputError(f"requests[{position}]: request id {rated.id!r} appears twice", str(path))
        seen.add(rated.id)
        parsed.append(rated)
    return parsed


class _Malformed(Exception):
    """A request the parser rejects; `load_rank_eval` adds the file name."""


def _rated_request(request: Any, where: str) -> RatedRequest:
    if not isinstance(request, dict):
        raise _Malformed(f"{where}: expected an object with 'id' and 'ratings'")
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)) or str(request_id) == "":
        raise _Malformed(f"{where}: no 'id'")
    where = f"{where} (id {str(request_id)!r})"
    ratings = request.get("ratings")
    if not isinstance(ratings, list):
        raise _Malformed(f"{where}: 'ratings' must be a list of {{'_index', '_id', 'rating'}}")
    relevant: dict[str, int] = {}
    rated: set[str] = set()
    for number, rating in enumerate(ratings):
        doc_id, value = _rating(rating, f"{where}: ratings[{number}]")
        if doc_id in rated:
            raise _Malformed(f"{where}: document {doc_id!r} is rated twice")
        rated.add(doc_id)
        if value > 0:
            relevant[doc_id] = value
    search = request.get("request")
    text = query_text(search.get("query")) if isinstance(search, dict) else None
    return RatedRequest(str(request_id), text, relevant)


def _rating(rating: Any, where: str) -> tuple[str, int]:
    if not isinstance(rating, dict):
        raise _Malformed(f"{where}: expected an object with '_id' and 'rating'")
    doc_id = rating.get("_id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or str(doc_id) == "":
        raise _Malformed(f"{where}: no '_id'")
    value = rating.get("rating")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(doc_id), value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(doc_id), int(value)
    raise _Malformed(f"{where}: 'rating' must be an integer, got {json.dumps(value)}")


def query_text(query: Any) -> str | None:
    """The text of a full-text query: `match` / `match_phrase` ({"field": "text"} or
    {"field": {"query": "text"}}), `multi_match`, `query_string`, `simple_query_string`;
    inside a `bool`, the texts of its `must` and `should` clauses joined. None if none."""
    if not isinstance(query, dict):
        return None
    for kind in _TEXT_QUERIES:
        clause = query.get(kind)
        if not isinstance(clause, dict):
            continue
        if "query" in clause and kind in ("multi_match", "query_string", "simple_query_string"):
            text = clause["query"]
        else:
            # {"field": "text"} or {"field": {"query": "text", ...}}; one field per clause
            value = next((v for k, v in clause.items() if not k.startswith("_") and k != "boost"), None)
            text = value.get("query") if isinstance(value, dict) else value
        if isinstance(text, str) and text.strip():
            return text
    boolean = query.get("bool")
    if isinstance(boolean, dict):
        texts = []
        for occur in ("must", "should"):
            clauses = boolean.get(occur)
            for clause in clauses if isinstance(clauses, list) else [clauses]:
                text = query_text(clause)
                if text:
                    texts.append(text)
        if texts:
            return " ".join(texts)
    return None


# --- a dataset folder -----------------------------------------------------------------


def load_dataset(
    directory: Path, queries_file: str = "queries.jsonl", judgments: Path | None = None, qrels_file: str | None = None
) -> Dataset:
    """Read a dataset folder; only queries with at least one relevant document are kept.

    qrels_file: the judgments inside the folder (default: `judgments_file`'s choice).

    judgments: a `_rank_eval` body to use instead of the folder's qrels.tsv. Its
    requests are the queries; each one's text comes from the folder's query file (by
    request id) when that file holds it, else from the request's query (`query_text`).
    """
    if not directory.is_dir():
        raise InputError("not a dataset folder (expected corpus.jsonl, queries.jsonl, qrels.tsv)", str(directory))
    corpus = directory / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError("no such file", str(corpus))
    name = directory.resolve().name
    if judgments is not None:
        return _rank_eval_dataset(name, corpus, directory / queries_file, judgments)
    queries = load_queries(_in_the_folder(directory, queries_file, "query file"))
    if not queries:  # else the error below would blame the judgments
        raise InputError('no queries: expected one {"id", "text"} object per line', str(directory / queries_file))
    qrels_file = judgments_file(directory, qrels_file)
    qrels = load_qrels(directory / qrels_file)
    judged = tuple((qid, text) for qid, text in queries if qrels.get(qid))
    if not judged:
        raise InputError(f"no query has a relevant document in {qrels_file}", str(directory))
    _warn_unmatched(queries, qrels, directory / queries_file, directory / qrels_file)
    return Dataset(name=name, corpus_path=corpus, queries=judged, qrels=qrels, judgments=qrels_file, judgments_path=directory / qrels_file)


def judgments_file(directory: Path, qrels_file: str | None = None) -> str:
    """The folder's judgments, relative to it: `qrels_file` when given, else qrels.tsv, else
    BEIR's qrels/test.tsv. Raises InputError naming what was looked for."""
    if qrels_file is not None:
        if not _in_the_folder(directory, qrels_file, "judgments file").is_file():
            raise InputError("is a folder; expected a file", str(directory / qrels_file))
        return qrels_file
    for candidate in (QRELS_FILE, BEIR_QRELS_FILE):
        if (directory / candidate).is_file():
            return candidate
    raise InputError(f"no judgments: expected {QRELS_FILE} (or BEIR's {BEIR_QRELS_FILE}) in the folder", str(directory))


def _in_the_folder(directory: Path, name: str, what: str) -> Path:
    """`directory / name`, which must exist. A relative name is the folder's, not the
    current directory's: when it is missing, the error says so, and names the file of the
    current directory the user may have meant by its absolute path (which is taken as it is)."""
    path = directory / name
    if path.exists():
        return path
    if Path(name).is_absolute():
        raise InputError("no such file", str(path))
    hint = f"the {what} is looked for inside the data set's folder"
    if Path(name).is_file():
        hint += f"; to read {name} from the current directory, give its absolute path: {Path(name).resolve()}"
    raise InputError(f"no such file ({hint})", str(path))


def _warn_unmatched(queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], queries_path: Path, qrels_path: Path) -> None:
    """Say which queries the evaluation leaves out, and which judged query ids no query has
    (ids spelled differently in the two files look like this), rather than only count fewer."""
    unjudged = [qid for qid, _ in queries if not qrels.get(qid)]
    if unjudged:
        log.warning(
            "%d of the %d queries in %s %s no relevant document in %s and %s not evaluated: %s",
            len(unjudged), len(queries), queries_path, "has" if len(unjudged) == 1 else "have", qrels_path,
            "is" if len(unjudged) == 1 else "are", listed(unjudged, 5),
        )
    asked = {qid for qid, _ in queries}
    textless = [qid for qid in qrels if qid not in asked]
    if textless:
        log.warning(
            "%d query %s judged in %s %s not in %s (not evaluated): %s", len(textless), "id" if len(textless) == 1 else "ids",
            qrels_path, "is" if len(textless) == 1 else "are", queries_path, listed(textless, 5),
        )


def _rank_eval_dataset(name: str, corpus: Path, queries_path: Path, judgments: Path) -> Dataset:
    requests = load_rank_eval(judgments)
    texts = dict(load_queries(queries_path)) if queries_path.is_file() else {}
    queries: list[tuple[str, str]] = []
    qrels: dict[str, dict[str, int]] = {}
    for position, request in enumerate(requests):
        if not request.relevant:
            continue  # as with qrels.tsv: a query without a relevant document is not judged
        text = texts.get(request.id) or request.text
        if text is None:
            raise InputError(
                f"requests[{position}] (id {request.id!r}): no query text: {queries_path.name} has no query "
                "with this id and the request has no match, multi_match or query_string query",
                str(judgments),
            )
        queries.append((request.id, text))
        qrels[request.id] = request.relevant
    if not queries:
        raise InputError("no request rates a document above 0", str(judgments))
    return Dataset(name=name, corpus_path=corpus, queries=tuple(queries), qrels=qrels, judgments=str(judgments), judgments_path=judgments)


# --- "papers like this one": co-citation judgments ------------------------------------------


def cocitation_judgments(qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Paper id -> {paper id: 1} for every paper that cites the same reference paper as
    another: the judgments of the document-to-document task ("papers like this one").

    qrels: judgments of citation data, query id `<RP>` or `<RP>_<annotator>` (the part
    before the first "_" names the reference paper RP), relevant documents the papers
    that cite RP (as CL-SciSumm's). Two papers are alike when both cite one RP; a paper
    is never its own partner, and papers without a partner are left out. An RP judged
    relevant to its own query (CL-SciSumm's `--with-reference` conversion) is a citer
    of nothing: it is left out of its own group.

    Raises InputError unless the query ids name papers: a data set whose query ids are
    query numbers (CISI's: query "2" is not document "2", which answers other queries)
    has no co-citation structure. The check: an RP that is itself a judged document
    must be judged for its own query, and every RP must look like a document id
    (letters, digits and other characters in the same places as some judged document's).
    """
    citers: dict[str, set[str]] = {}
    for query_id, relevant in qrels.items():
        reference = query_id.split("_", 1)[0]
        citers.setdefault(reference, set()).update(doc_id for doc_id in relevant if doc_id != reference)
    judged = {doc_id for relevant in qrels.values() for doc_id in relevant}
    shapes = {_id_shape(doc_id) for doc_id in judged}
    for query_id in qrels:
        reference = query_id.split("_", 1)[0]
        if reference in judged and reference not in qrels[query_id] or _id_shape(reference) not in shapes:
            raise InputError(
                f"query {query_id!r} does not name a cited paper, so the qrels give no co-citation judgments: "
                "they need query ids <RP> or <RP>_<annotator> whose relevant documents are the papers citing RP"
                + (f" (document {reference!r} is judged for other queries, not for its own)" if reference in judged else "")
            )
    partners: dict[str, dict[str, int]] = {}
    for group in citers.values():
        for paper in group:
            for other in group - {paper}:
                partners.setdefault(paper, {})[other] = 1
    return partners


def _id_shape(doc_id: str) -> str:
    """An id's shape: letters as "A", digits as "9", anything else as itself ("C00-2123" -> "A99-9999")."""
    return "".join("9" if c.isdigit() else "A" if c.isalpha() else c for c in doc_id)


def load_cocitation_dataset(directory: Path, qrels_file: str | None = None) -> Dataset:
    """A dataset folder's document-to-document task: every paper with a co-citing partner
    is a query (its id is both the query id and the query's text: the query is the stored
    paper itself), judged by `cocitation_judgments` of the folder's qrels.tsv.

    Raises InputError as `load_dataset` and `cocitation_judgments`, or when no paper has a partner.
    """
    if not directory.is_dir():
        raise InputError("not a dataset folder (expected corpus.jsonl and qrels.tsv)", str(directory))
    corpus = directory / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError("no such file", str(corpus))
    qrels_file = judgments_file(directory, qrels_file)
    qrels_path = directory / qrels_file
    qrels = load_qrels(qrels_path)  # its errors name the file and line already
    try:
        judgments = cocitation_judgments(qrels)
    except InputError as exc:
        raise InputError(str(exc), str(qrels_path)) from None
    if not judgments:
        raise InputError("no two papers cite the same reference paper", str(qrels_path))
    papers = tuple((paper, paper) for paper in sorted(judgments))
    return Dataset(
        name=directory.resolve().name, corpus_path=corpus, queries=papers, qrels=judgments,
        judgments=f"co-citation ({qrels_file})", judgments_path=qrels_path,
    )
