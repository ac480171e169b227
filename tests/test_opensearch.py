"""The OpenSearch store against a real HTTP OpenSearch API (osmem-server), through opensearch-py.

Every test gets its own clone of an empty in-memory cluster (the `osmem_clone` fixture of
osmem-server's pytest plugin). Documents are few and short: the server keeps everything
in memory.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from conftest import REPO, TINY_CORPUS, ClusterProxy, InterruptAfter, run, searches_during_reindex, settings_env, write_jsonl

from reranker.config import OpenSearchSettings, Settings
from reranker.embeddings import WordVectors
from reranker.errors import (
    IndexMismatchError,
    IndexNotFoundError,
    InputError,
    StoreError,
    StoreUnavailableError,
    UnknownFieldError,
)
from reranker.extraction import document_topics
from reranker.indexing import (
    index_corpus,
    index_documents,
    read_corpus,
)
from reranker.pipeline import Engine
from reranker.service import create_app
from reranker.store import Doc2VecInfo, IndexInfo, opensearch, opensearch_claim
from reranker.store.embedded import EmbeddedStore
from reranker.store.opensearch import OpenSearchStore
from reranker.store.opensearch_encoding import (
    decode_topics,
    document_source,
    encode_matrix,
    passages_of,
)
from reranker.store.templates import load_templates
from reranker.text import default_stopwords, stop_list_info, tokenize
from reranker.types import Document, EmbeddingInfo, Filter, StoredDocument

PAPERS = [
    dict(TINY_CORPUS[0], year=1998, venue="Maritime Review", tags=[], editor=None),
    dict(TINY_CORPUS[1], year=2005, venue="Food Letters"),
    dict(TINY_CORPUS[2], year=2012, venue="Games Quarterly"),
]


@pytest.fixture
def cluster(osmem_clone: Any) -> OpenSearchSettings:
    return OpenSearchSettings(hosts=(osmem_clone.url,), alias="papers", timeout=10.0, retries=2)


@pytest.fixture
def os_store(cluster: OpenSearchSettings) -> Iterator[OpenSearchStore]:
    store = OpenSearchStore(cluster, sleep=lambda seconds: None)
    yield store
    store.close()


@pytest.fixture
def passages_store(cluster: OpenSearchSettings) -> Iterator[OpenSearchStore]:
    """The store with RERANKER_PASSAGES: the index versions it creates keep best passages."""
    # A long document's 10,001 passages can take the in-memory cluster over the default 10 s
    # on a busy machine (two tests below write one).
    store = OpenSearchStore(replace(cluster, passages=True, timeout=120.0), sleep=lambda seconds: None)
    yield store
    store.close()


def index_papers(tmp_path: Path, store: OpenSearchStore, glove: WordVectors, records: list[Any] = PAPERS, **kwargs: Any) -> Any:
    return index_corpus(write_jsonl(tmp_path / "papers.jsonl", records), store, glove, 5, show_progress=False, **kwargs)


def raw(store: OpenSearchStore, method: str, path: str) -> Any:
    return store.client.transport.perform_request(method, path)


# --- templates ---------------------------------------------------------------------------


def test_templates_install_exactly_what_index_templates_holds(os_store: OpenSearchStore) -> None:
    files = {path.name: json.loads(path.read_text()) for path in (REPO / "index_templates").glob("*.json")}
    assert set(files) == {"reranker-settings.component.json", "reranker-mappings.component.json", "reranker.index-template.json"}
    assert os_store.install_templates() == ["reranker-mappings", "reranker-settings", "reranker-papers"]
    for name in ("reranker-settings", "reranker-mappings"):
        installed = os_store.client.cluster.get_component_template(name=name)["component_templates"][0]
        assert installed["component_template"]["template"] == files[f"{name}.component.json"]["template"]
    index_template = os_store.client.indices.get_index_template(name="reranker-papers")["index_templates"][0]["index_template"]
    template = files["reranker.index-template.json"]
    expected = dict(template, index_patterns=["papers-v*"], priority=template["priority"] + len("papers"))
    assert {k: index_template[k] for k in ("index_patterns", "composed_of", "priority", "version")} == {
        k: expected[k] for k in ("index_patterns", "composed_of", "priority", "version")
    }


def test_an_alias_named_like_another_aliass_versions_gets_templates_of_its_own(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alias `papers-v2` beside `papers`: the templates' patterns `papers-v*` and
    `papers-v2-v*` both match `papers-v2-v000001`, and the cluster refused the second
    template (the same priority): `reranker index` failed with the cluster's words. The
    longer alias's template is the more specific one, and wins."""
    corpus = str(write_jsonl(tmp_path / "c.jsonl", PAPERS))
    for alias in ("papers", "papers-v2"):
        monkeypatch.setenv("RERANKER_INDEX", alias)
        code, out = run(data_dir, "--opensearch-url", osmem_clone.url, "index", corpus, "--no-progress")
        assert code == 0 and f"alias now points at {alias}-v000001" in out, out + capsys.readouterr().err
        code, out = run(data_dir, "--opensearch-url", osmem_clone.url, "indices", "list")
        assert code == 0 and out.split() [:3] == ["*", f"{alias}-v000001", "ready"], out
        code, out = run(data_dir, "--opensearch-url", osmem_clone.url, "search", "a grandmaster and his knight", "--json")
        assert code == 0 and json.loads(out)["hits"][0]["id"] == "chess"


def test_the_mapping_is_strict_english_and_stores_topics_compactly() -> None:
    mappings = load_templates().mappings
    properties = mappings["properties"]
    assert mappings["dynamic"] == "strict"
    for field in ("abstract", "body"):
        assert properties[field] == {"type": "text", "analyzer": "english"}
    # A title filter matches the whole title exactly through `raw`, as the embedded store does.
    assert properties["title"] == {"type": "text", "analyzer": "english", "fields": {"raw": {"type": "keyword", "ignore_above": 8191}}}
    topics = properties["hidden_topics"]["properties"]
    assert topics["matrix"] == {"type": "binary"}
    assert topics["k"] == topics["d"] == {"type": "integer", "index": False}
    assert topics["importances"]["index"] is False


def test_what_the_code_writes_fits_the_mapping(glove: WordVectors) -> None:
    doc = Document("p1", "Sailing ships", TINY_CORPUS[0]["text"], {"abstract": "Ships at sea."})
    doc_topics, n_tokens, n_oov = document_topics(doc, glove, 5)
    source = document_source(StoredDocument(doc, doc_topics, "h", n_tokens, n_oov))
    properties = load_templates().mappings["properties"]
    assert set(source) <= set(properties)
    assert set(source["hidden_topics"]) == set(properties["hidden_topics"]["properties"])
    assert set(source["indexed"]) == set(properties["indexed"]["properties"])
    matrix = np.frombuffer(base64.b64decode(source["hidden_topics"]["matrix"]), dtype="<f4")
    k, d = source["hidden_topics"]["k"], source["hidden_topics"]["d"]
    assert (k, d) == (5, 50) and matrix.shape == (k * d,)
    assert np.array_equal(matrix.reshape(k, d), doc_topics.topics)  # row-major, little-endian, exact
    assert len(source["hidden_topics"]["importances"]) == k


def test_a_new_version_gets_the_template_mapping_and_records_what_it_was_built_with(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    index_papers(tmp_path, os_store, glove)
    mapping = os_store.client.indices.get_mapping(index="papers")
    (name, body), = mapping.items()
    assert name == "papers-v000001"
    template = load_templates().mappings
    assert body["mappings"]["dynamic"] == "strict"
    for field, spec in template["properties"].items():
        assert body["mappings"]["properties"][field] == spec
    # Corpus fields beyond the template are mapped when first seen.
    assert body["mappings"]["properties"]["year"] == {"type": "long"}
    assert body["mappings"]["properties"]["venue"]["fields"]["raw"]["type"] == "keyword"
    meta = body["mappings"]["_meta"]["reranker"]
    assert meta["embedding"] == {"name": glove.info.name, "dim": 50, "checksum": glove.info.checksum, "source": "glove-6b-50d"}
    assert (meta["k"], meta["topic_dtype"], meta["state"]) == (5, "float32", "ready")
    built = os_store.index_info()  # read back: where the vectors come from, so later commands need no --vectors
    assert built is not None and built.embedding == glove.info and built.embedding.source == "glove-6b-50d"


# --- bulk indexing, reading back -----------------------------------------------------------


def test_indexed_topics_come_back_exactly_through_mget(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    report = index_papers(tmp_path, os_store, glove)
    assert (report.indexed, report.skipped, report.total_documents) == (3, (), 3)
    batch = os_store.topics(["chess", "missing", "ships"])
    for row, doc_id in [(0, "chess"), (2, "ships")]:
        record = next(r for r in PAPERS if r["id"] == doc_id)
        expected, _, _ = document_topics(Document(doc_id, record["title"], record["text"]), glove, 5)
        assert np.array_equal(batch.topics[row, : expected.k], expected.topics)
        assert np.array_equal(batch.importances[row, : expected.k], expected.importances)
    assert not batch.topics[1].any() and not batch.importances[1].any()  # unknown id: zero topics
    docs = os_store.documents(["ships", "missing"])
    assert list(docs) == ["ships"] and docs["ships"].fields == {"year": 1998, "venue": "Maritime Review"}


def test_ids_like_the_apis_endpoints_are_ordinary_ids(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    """OpenSearch's `_id` is any string of at most 512 bytes: `_search` or `_doc/x` is an
    id like any other, sent in bulk bodies and `_mget` docs, never in a URL."""
    records = [{**record, "id": doc_id} for record, doc_id in zip(PAPERS, ["_search", "_count", "_doc/x"])]
    assert index_papers(tmp_path, os_store, glove, records).indexed == 3
    assert list(os_store.documents(["_search", "_count", "_doc/x"])) == ["_search", "_count", "_doc/x"]
    assert os_store.topics(["_doc/x"]).topics.any()
    assert [hit.doc_id for hit in os_store.bm25("sailing ships across the ocean", 1)] == ["_search"]


def test_bm25_candidates_with_boosts_and_filters(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    index_papers(tmp_path, os_store, glove)
    hits = os_store.bm25("sailors on a ship at sea in a storm", 10)
    assert hits[0].doc_id == "ships" and hits[0].title == "Sailing ships" and hits[0].bm25_rank == 1
    assert {h.doc_id for h in os_store.bm25("bread ships chess", 10, [Filter("year", "gte", 2005)])} == {"cooking", "chess"}
    assert [h.doc_id for h in os_store.bm25("bread ships chess", 10, [Filter("venue", "eq", "Food Letters")])] == ["cooking"]
    assert os_store.bm25("bread ships chess", 10, [Filter("venue", "eq", "food letters")]) == []  # exact match
    both = [Filter("year", "lt", 2010), Filter("year", "gt", 1998)]
    assert [h.doc_id for h in os_store.bm25("bread ships chess", 10, both)] == ["cooking"]
    with pytest.raises(UnknownFieldError, match="cannot filter on 'colour'; filterable fields: .*venue.*year"):
        os_store.bm25("bread", 10, [Filter("colour", "eq", "red")])
    # docs/http-api.md: the template maps `abstract` in every index; no record here has one.
    with pytest.raises(UnknownFieldError, match="filterable fields: abstract, body, title, venue, year$"):
        os_store.bm25("bread", 10, [Filter("text", "eq", "red")])
    assert os_store.bm25("bread ships chess", 10, [Filter("abstract", "eq", "bread")]) == []


FILTERED = [
    dict(TINY_CORPUS[0], year=1998, date="2014-12-31", code="2010", tags=["sea", "wind"], open=True),
    dict(TINY_CORPUS[1], year=2005, date="2016-01-01", code="0042", tags=["bread"], open=False),
    dict(TINY_CORPUS[2], year=2012, date="2015-06-30", code="x1", tags=[], open=True),
]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        # A value is read as the field's values are, as OpenSearch reads it by the mapping.
        ([Filter("year", "gte", "2005")], {"cooking", "chess"}),
        ([Filter("year", "lt", "2005.5")], {"ships", "cooking"}),
        ([Filter("code", "eq", 2010)], {"ships"}),
        ([Filter("open", "eq", "false")], {"cooking"}),
        # Text compares whole: "2014-12-31" holds the word "31", which is above "2015".
        ([Filter("date", "gte", "2015-01-01")], {"cooking", "chess"}),
        ([Filter("date", "lt", "2015-01-01"), Filter("year", "gt", 1990)], {"ships"}),
        # The whole title, exactly (it was a phrase match on the cluster: "ships" found it).
        ([Filter("title", "eq", "Sailing ships")], {"ships"}),
        ([Filter("title", "eq", "ships")], set()),
        ([Filter("title", "gte", "S")], {"ships"}),
        # An array field matches when one of its values does.
        ([Filter("tags", "eq", "wind")], {"ships"}),
        ([Filter("tags", "gte", "bread")], {"ships", "cooking"}),
    ],
)
def test_filters_read_values_by_the_field_and_both_stores_agree(
    tmp_path: Path, os_store: OpenSearchStore, store: Any, glove: WordVectors, filters: list[Filter], expected: set[str]
) -> None:
    query = "ocean bread chess sailing cooking game"
    for each in (os_store, store):
        index_corpus(write_jsonl(tmp_path / "filtered.jsonl", FILTERED), each, glove, 5, show_progress=False)
        assert {hit.doc_id for hit in each.bm25(query, 10, filters)} == expected, type(each).__name__


def test_numbers_written_as_text_beside_numbers_filter_as_numbers_on_both_stores(
    tmp_path: Path, os_store: OpenSearchStore, store: Any, glove: WordVectors
) -> None:
    """A corpus whose `year` is 1998 in one record and "1990" in another: the cluster maps the
    field by its first number and coerces the texts into it; the embedded store compared as
    given, and SQLite orders every text after every number, so `year >= 2000` found "1990"."""
    years: list[Any] = [1998, "2005", "1990", 2010, [1985, "2015"]]
    records = [dict(TINY_CORPUS[n % 3], id=f"p{n}", year=year) for n, year in enumerate(years)]
    for each in (os_store, store):
        index_corpus(write_jsonl(tmp_path / "years.jsonl", records), each, glove, 5, show_progress=False)
        found = lambda op, value: sorted(hit.doc_id for hit in each.bm25("ocean bread chess", 10, [Filter("year", op, value)]))  # noqa: E731,B023
        assert found("gte", 2000) == ["p1", "p3", "p4"], type(each).__name__
        assert found("lt", "2000") == ["p0", "p2", "p4"], type(each).__name__
        assert found("eq", 2005) == ["p1"] and found("eq", "2015") == ["p4"], type(each).__name__


def test_a_range_on_numbers_beside_texts_that_are_not_is_refused_on_the_embedded_store(tmp_path: Path, store: Any, glove: WordVectors) -> None:
    """"n/a" beside numbers: no order puts it among them (the cluster refuses the record when
    it maps the field as a number), so a range is refused with the reason; = still compares."""
    records = [dict(TINY_CORPUS[0], id="p0", year=1998), dict(TINY_CORPUS[1], id="p1", year="n/a"), dict(TINY_CORPUS[2], id="p2", year=2010)]
    index_corpus(write_jsonl(tmp_path / "years.jsonl", records), store, glove, 5, show_progress=False)
    with pytest.raises(InputError, match=r"^cannot filter 'year' \(gte 2000\): the field holds numbers and texts that are not numbers, which no range"):
        store.bm25("ocean bread chess", 10, [Filter("year", "gte", 2000)])
    assert [hit.doc_id for hit in store.bm25("ocean bread chess", 10, [Filter("year", "eq", 2010)])] == ["p2"]
    assert [hit.doc_id for hit in store.bm25("ocean bread chess", 10, [Filter("year", "eq", "n/a")])] == ["p1"]


def test_a_long_title_is_matched_exactly_on_both_stores(tmp_path: Path, os_store: OpenSearchStore, store: Any, glove: WordVectors) -> None:
    """A keyword sub-field leaves out values longer than its `ignore_above`: at 256 (the
    usual bound) a 300-character title was found by the embedded store and not the cluster."""
    title = ("A very long title about sailing ships, " * 8)[:300]
    records = [dict(TINY_CORPUS[0], title=title), dict(TINY_CORPUS[1])]
    for each in (os_store, store):
        index_corpus(write_jsonl(tmp_path / "long-title.jsonl", records), each, glove, 5, show_progress=False)
        found = {hit.doc_id for hit in each.bm25("sailing ships bread", 10, [Filter("title", "eq", title)])}
        assert found == {TINY_CORPUS[0]["id"]}, type(each).__name__


def test_a_long_corpus_field_value_is_matched_exactly_on_both_stores(tmp_path: Path, os_store: OpenSearchStore, store: Any, glove: WordVectors) -> None:
    """A corpus field the store maps when first seen got `.raw` with the usual 256: a
    300-character `venue` was found by the embedded store and not the cluster."""
    venue = ("Proceedings of a very long workshop on sailing ships, " * 8)[:300]
    records = [dict(TINY_CORPUS[0], venue=venue), dict(TINY_CORPUS[1], venue="short")]
    for each in (os_store, store):
        index_corpus(write_jsonl(tmp_path / "long-venue.jsonl", records), each, glove, 5, show_progress=False)
        found = {hit.doc_id for hit in each.bm25("sailing ships bread", 10, [Filter("venue", "eq", venue)])}
        assert found == {TINY_CORPUS[0]["id"]}, type(each).__name__


def test_a_value_longer_than_the_index_keeps_exactly_is_refused_not_an_empty_answer(
    tmp_path: Path, cluster: OpenSearchSettings, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """The cluster keeps no exact value longer than `.raw`'s `ignore_above`, counted in
    UTF-16 units as Java counts: an = filter on one would find nothing, silently."""
    records = [dict(TINY_CORPUS[0], venue="short"), dict(TINY_CORPUS[1], venue="short")]
    index_corpus(write_jsonl(tmp_path / "venue.jsonl", records), os_store, glove, 5, show_progress=False)
    emoji = "\N{OCTOPUS}" * 4200  # one character, two UTF-16 units, each
    assert len(emoji) <= 8191 < len(emoji.encode("utf-16-le")) // 2
    with pytest.raises(InputError, match=r"^cannot filter 'title' \(eq .*\): this index keeps exact values of 'title' up to 8191 characters only; "):
        os_store.bm25("sailing ships", 10, [Filter("title", "eq", emoji)])
    # An index whose corpus field was mapped when `.raw` kept 256 characters.
    os_store.client.indices.put_mapping(
        index=os_store.alias, body={"properties": {"venue": {"type": "text", "analyzer": "english", "fields": {"raw": {"type": "keyword", "ignore_above": 256}}}}}
    )
    older = OpenSearchStore(cluster, sleep=lambda seconds: None)  # reads the mapping afresh
    try:
        with pytest.raises(InputError, match=r"up to 256 characters only; index the corpus again"):
            older.bm25("sailing ships", 10, [Filter("venue", "eq", "x" * 257)])
        assert older.bm25("sailing ships", 10, [Filter("venue", "eq", "x" * 256)]) == []
    finally:
        older.close()


def test_a_number_beyond_the_fields_integer_type_is_refused_not_a_failed_search(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """`year` is mapped as a long: the cluster failed the whole search for a value it cannot
    parse as one (a 502 from /search); now a 400 that says why. -2.0**63 is sent as
    -9.223372036854776e+18, below the least long."""
    index_corpus(write_jsonl(tmp_path / "filtered.jsonl", FILTERED), os_store, glove, 5, show_progress=False)
    for value in (2**63, -(2**63) - 1, 1e20, 1e308, float(-(2**63))):
        with pytest.raises(InputError, match=r"^cannot filter 'year' \(lt .*\): the field holds integers of type long, from "):
            os_store.bm25("ocean bread", 10, [Filter("year", "lt", value)])
    # Its bounds are a long's, and a search to them runs.
    assert os_store.bm25("ocean bread", 10, [Filter("year", "gt", 2**63 - 1)]) == []
    assert os_store.bm25("ocean bread", 10, [Filter("year", "lt", -(2**63))]) == []
    assert os_store.bm25("ocean bread", 10, [Filter("year", "lt", 9.2e18)]) == os_store.bm25("ocean bread", 10)


def test_a_search_the_shards_refuse_says_why_not_only_that_all_shards_failed(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """A window above the index's max_result_window: /search answered 502 "OpenSearch BM25
    search failed: HTTP 400 search_phase_execution_exception: all shards failed", the
    cluster's reason left out of its answer; the first root cause says what to change."""
    index_papers(tmp_path, os_store, glove)
    os_store.client.indices.put_settings(index="papers", body={"index": {"max_result_window": 2}})
    with pytest.raises(StoreError, match=r"all shards failed \(illegal_argument_exception: Result window is too large, from \+ size must be less than or equal to: \[2\] but was \[10\]"):
        os_store.bm25("ocean bread", 10)


def test_a_failure_with_no_root_cause_says_the_last_cause_it_was_caused_by() -> None:
    """A search failed after the shards answered (the reduce phase's too many buckets) has
    an empty root_cause and an empty reason: the error read "search_phase_execution_exception:",
    and a 502 of the service said no more.
    The body is what a cluster answered (elastic/rally-tracks#355)."""
    from opensearchpy.exceptions import TransportError

    from reranker.store.opensearch_client import error_reason

    limit = "Trying to create too many buckets. Must be less than or equal to: [300000] but this number of buckets was exceeded."
    body = {
        "error": {
            "root_cause": [], "type": "search_phase_execution_exception", "reason": "", "phase": "fetch", "grouped": True,
            "failed_shards": [], "caused_by": {"type": "too_many_buckets_exception", "reason": limit, "max_buckets": 300000},
        },
        "status": 503,
    }
    failed = TransportError(503, "search_phase_execution_exception", body)
    assert error_reason(failed) == f"search_phase_execution_exception (too_many_buckets_exception: {limit})"
    body["error"]["caused_by"] = {"type": "a", "reason": "outer", "caused_by": {"type": "b", "reason": "inner"}}
    assert error_reason(failed) == "search_phase_execution_exception (b: inner)"
    # Root causes of other shapes: strings are not read, and the top reason is then all there is.
    body["error"] = {"root_cause": ["text"], "type": "t", "reason": "r"}
    assert error_reason(failed) == "t: r"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (Filter("year", "gte", "abc"), "'year' (gte 'abc'): the field holds numbers and 'abc' is not one"),
        (Filter("year", "eq", True), "the field holds numbers, not true or false"),
        (Filter("open", "gte", True), "the field holds true or false, which only = compares"),
        (Filter("open", "eq", 1), "the field holds true or false"),
    ],
)
def test_a_filter_value_the_field_cannot_hold_is_refused(
    tmp_path: Path, os_store: OpenSearchStore, store: Any, glove: WordVectors, bad: Filter, reason: str
) -> None:
    """Before, `year>=abc` found nothing with exit 0 (and over the embedded store a text
    value for a field of numbers sorted above every number)."""
    for each in (os_store, store):
        index_corpus(write_jsonl(tmp_path / "filtered.jsonl", FILTERED), each, glove, 5, show_progress=False)
        with pytest.raises(InputError, match=re.escape(reason)):
            each.bm25("ocean bread", 10, [bad])


def test_title_boost_changes_the_candidate_order(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    records = [
        {"id": "t", "title": "ocean", "text": "a story about bread and flour and bakers"},
        {"id": "b", "title": "bakery", "text": "the ocean and the ocean and bread"},
    ]
    orders = {}
    for boost in (1.0, 20.0):
        cluster = OpenSearchSettings(hosts=(osmem_clone.url,), alias=f"boost{int(boost)}", search_fields=(("title", boost), ("body", 1.0)))
        store = OpenSearchStore(cluster)
        index_corpus(write_jsonl(tmp_path / "b.jsonl", records), store, glove, 3, show_progress=False)
        orders[boost] = [h.doc_id for h in store.bm25("ocean", 10)]
    assert orders[1.0] == ["b", "t"] and orders[20.0] == ["t", "b"]


def test_bulk_reports_each_refused_document_and_writes_the_rest(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, caplog: pytest.LogCaptureFixture
) -> None:
    records: list[Any] = [
        *PAPERS,
        dict(TINY_CORPUS[0], id="bad-year", year="nineteen ninety"),  # year is mapped as a number
        dict(TINY_CORPUS[1], id="reserved", hidden_topics="mine"),
        {"id": "oov", "text": "zzqxv qqwzzk"},
        "{not json",
        {"title": "no id", "text": "ships"},
    ]
    report = index_papers(tmp_path, os_store, glove, records)
    reasons = {item.doc_id or item.location.rsplit(":", 1)[1]: item.reason for item in report.skipped}
    assert report.indexed == 3 and report.total_documents == 3
    assert "mapper_parsing_exception" in reasons["bad-year"] and "year" in reasons["bad-year"]
    assert reasons["reserved"] == "field name(s) hidden_topics are reserved by the reranker"
    assert reasons["oov"].startswith("no in-vocabulary words")
    assert reasons["7"].startswith("not valid JSON") and "'id'" in reasons["8"]
    assert all(item.location.startswith(str(tmp_path)) for item in report.skipped)


def test_an_id_past_opensearchs_limit_is_refused_alone(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    """One id over 512 UTF-8 bytes failed the whole bulk request (the cluster validates
    every id first): the documents beside it were lost too."""
    long_id = "é" * 257  # 514 bytes, 257 characters
    records = [dict(TINY_CORPUS[0]), dict(TINY_CORPUS[1], id=long_id), dict(TINY_CORPUS[2]), dict(TINY_CORPUS[1], id="é" * 256)]
    report = index_papers(tmp_path, os_store, glove, records)
    assert report.indexed == 3 and [item.doc_id for item in report.skipped] == [long_id]
    assert report.skipped[0].reason == "an id of 514 bytes; OpenSearch takes ids of at most 512 (UTF-8)"
    assert set(os_store.documents(["ships", "chess", "é" * 256])) == {"ships", "chess", "é" * 256}


def test_reindexing_is_idempotent_and_changed_documents_are_replaced(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    index_papers(tmp_path, os_store, glove)
    again = index_papers(tmp_path, os_store, glove)
    assert (again.indexed, again.unchanged, again.total_documents) == (0, 3, 3)
    changed = [dict(PAPERS[0], text="Fresh bread from the oven."), *PAPERS[1:]]
    report = index_papers(tmp_path, os_store, glove, changed)
    assert (report.indexed, report.unchanged, report.total_documents) == (1, 2, 3)
    assert os_store.documents(["ships"])["ships"].text == "Fresh bread from the oven."


def test_an_in_place_reindex_keeps_every_document_searchable(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    """Re-indexing changed documents without --rebuild writes each new version over the
    old one by id (a bulk `index`, never delete then insert): searches running meanwhile
    find every document, in its old or its new version."""
    cluster = OpenSearchSettings(hosts=(osmem_clone.url,), alias="papers")
    # 2,000 documents and 4 readers: 1,000 and 2 gave 146 checks in CI's 2 s re-index, too
    # few for zero misses to say much (a delete-then-insert bug showed 2-4 misses in 400).
    watch = searches_during_reindex(cluster, glove, tmp_path, documents=2000, readers=4)
    assert watch.replaced == 2000
    assert watch.checks >= 200, f"only {watch.checks} searches ran during the {watch.seconds:.1f} s re-index"
    assert watch.misses == (), f"{len(watch.misses)} of {watch.checks} searches missed a document: {watch.misses[:5]}"


def test_float16_topics_halve_the_bytes_and_stay_close(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    half = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="half", topic_dtype="float16"))
    full = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="full"))
    for store in (half, full):
        index_papers(tmp_path, store, glove)
    a, b = half.topics(["ships", "chess"]), full.topics(["ships", "chess"])
    assert np.abs(a.topics - b.topics).max() < 1e-3
    sizes = [len(s.client.get(index=s.alias, id="ships")["_source"]["hidden_topics"]["matrix"]) for s in (half, full)]
    assert sizes[0] * 2 == pytest.approx(sizes[1], abs=4)
    with pytest.raises(IndexMismatchError, match="float16, not float32"):
        index_papers(tmp_path, OpenSearchStore(replace(half.config, topic_dtype="float32")), glove)


# --- aliases: blue/green ------------------------------------------------------------------


def test_rebuild_fills_a_new_version_and_swaps_the_alias_atomically(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    index_papers(tmp_path, os_store, glove)
    reader = OpenSearchStore(os_store.config)
    writer = OpenSearchStore(os_store.config)
    writer.initialise(IndexInfo(glove.info, 5), rebuild=True)
    assert writer.upsert([stored_for(glove, Document("ships", "Harbours", "Bread and cheese"))]) == []
    # Readers still see the published version while the new one fills up.
    assert reader.documents(["ships"])["ships"].title == "Sailing ships" and reader.count() == 3
    result = writer.publish()
    assert result is not None and (result.current, result.previous, result.swapped) == ("papers-v000002", ("papers-v000001",), True)
    assert reader.documents(["ships"])["ships"].title == "Harbours" and reader.count() == 1
    assert raw(os_store, "GET", "/_alias/papers") == {"papers-v000002": {"aliases": {"papers": {}}}}
    versions = {v.name: v for v in os_store.versions()}
    assert versions["papers-v000001"].state == "ready" and versions["papers-v000001"].documents == 3  # kept
    os_store.use("papers-v000001")  # rollback
    assert reader.count() == 3
    with pytest.raises(InputError, match="behind alias"):
        os_store.delete_index("papers-v000001")
    os_store.delete_index("papers-v000002")
    assert [v.name for v in os_store.versions()] == ["papers-v000001"]


def test_an_in_place_run_whose_alias_moved_meanwhile_says_where_its_documents_went(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """`reranker index` without --rebuild writes into the index the alias pointed at when it
    started. A `--rebuild` (or `indices use`) that moved the alias meanwhile left the run's
    documents outside the alias, and the run reported them indexed."""
    index_papers(tmp_path, os_store, glove)
    changed = write_jsonl(tmp_path / "changed.jsonl", [dict(p, text=p["text"] + " revised") for p in PAPERS])
    old = write_jsonl(tmp_path / "old.jsonl", PAPERS)

    def read_while_another_run_rebuilds() -> Iterator[Any]:
        for n, record in enumerate(read_corpus(changed)):
            if n == 1:
                index_corpus(old, OpenSearchStore(os_store.config), glove, 5, rebuild=True, show_progress=False)
            yield record

    with pytest.raises(StoreError, match=(
        "alias 'papers' was moved to papers-v000002 while this run wrote into papers-v000001 .*"
        "run `reranker index` again to write them behind the alias"
    )):
        index_documents(read_while_another_run_rebuilds(), OpenSearchStore(os_store.config), glove, 5)
    assert os_store.alias_index() == "papers-v000002"  # left as the other run made it


@pytest.mark.parametrize("when", ["before its last bulk request", "while it reads"])
def test_a_rebuild_whose_version_is_deleted_meanwhile_leaves_the_alias_alone(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """`reranker indices delete` of the version a --rebuild is writing (listed as
    `building`, like one left by an interrupted run). Before a bulk request, the cluster
    created the index again from the templates, without `_meta.reranker`, and the run
    marked it ready and moved the alias to it: every reader was then refused an index "not
    built by this package". Before a read of stored hashes, the run said "has no index or
    alias 'papers': run `reranker index` first"."""
    index_papers(tmp_path, os_store, glove)
    info = os_store.index_info()
    assert info is not None
    monkeypatch.setattr("reranker.indexing.BATCH_SIZE", 1)

    def read_while_the_version_is_deleted() -> Iterator[Any]:
        for n, record in enumerate(read_corpus(write_jsonl(tmp_path / "new.jsonl", PAPERS))):
            if n == 1 and when == "while it reads":
                os_store.delete_index("papers-v000002")
            yield record
        if when == "before its last bulk request":  # the last batch's hashes are read, its topics on the way
            os_store.delete_index("papers-v000002")

    with pytest.raises(StoreError, match=(
        "index papers-v000002, which this run was building, was deleted meanwhile.*; "
        "the alias 'papers' was left as it was; run `reranker index` again"
    )):
        index_documents(read_while_the_version_is_deleted(), OpenSearchStore(os_store.config), glove, 5, rebuild=True, centering=info.centering)
    assert os_store.alias_index() == "papers-v000001" and os_store.index_info() is not None


def interrupted_rebuild(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The three papers published as papers-v000001, then a rebuild of d0-d11 (batches of
    4) interrupted after it wrote d0-d7 into papers-v000002; its corpus."""
    index_papers(tmp_path, os_store, glove)
    corpus = write_jsonl(tmp_path / "big.jsonl", [dict(PAPERS[i % 3], id=f"d{i}") for i in range(12)])
    monkeypatch.setattr("reranker.indexing.BATCH_SIZE", 4)
    with pytest.raises(KeyboardInterrupt):
        index_documents(read_corpus(corpus), OpenSearchStore(os_store.config), glove, 5, rebuild=True, progress=InterruptAfter(10))
    return corpus


def test_an_interrupted_rebuild_leaves_the_alias_alone_and_resumes(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resumed with the same corpus, the rebuild skips what it wrote and drops nothing; a
    run into the version behind the alias afterwards never deletes."""
    corpus = interrupted_rebuild(tmp_path, os_store, glove, monkeypatch)
    states = {v.name: (v.state, v.documents, v.aliased) for v in os_store.versions()}
    assert states == {"papers-v000001": ("ready", 3, True), "papers-v000002": ("building", 8, False)}
    resumed = index_corpus(corpus, OpenSearchStore(os_store.config), glove, 5, rebuild=True, show_progress=False)
    assert (resumed.unchanged, resumed.indexed, resumed.dropped, resumed.total_documents) == (8, 4, 0, 12)
    assert [(v.name, v.aliased) for v in os_store.versions()] == [("papers-v000001", False), ("papers-v000002", True)]
    # Into the version behind the alias: d0-d11 stay whatever the corpus holds.
    store = OpenSearchStore(os_store.config)
    in_place = index_corpus(write_jsonl(tmp_path / "few.jsonl", [dict(PAPERS[0], id="d0"), dict(PAPERS[0], id="new")]), store, glove, 5, show_progress=False)
    assert (in_place.unchanged, in_place.indexed, in_place.dropped, in_place.total_documents) == (1, 1, 0, 13)
    with pytest.raises(StoreError, match="only a rebuild drops documents"):
        store.drop_absent(set())


def test_a_resumed_rebuild_publishes_only_the_corpus_it_read(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupted rebuild wrote d0-d7 into papers-v000002; the run that resumes it
    reads d6-d11 and d2, which the cluster refuses now (a reserved field): d2 is still of
    the corpus, and its earlier version stays. d0, d1, d3-d5, removed from the corpus on
    purpose, were published too before; now they are deleted from the new version only."""
    interrupted_rebuild(tmp_path, os_store, glove, monkeypatch)
    smaller = [dict(PAPERS[i % 3], id=f"d{i}") for i in range(6, 12)] + [dict(PAPERS[2], id="d2", hidden_topics="mine")]
    resumed = index_corpus(write_jsonl(tmp_path / "smaller.jsonl", smaller), OpenSearchStore(os_store.config), glove, 5, rebuild=True, show_progress=False)
    expected = {"d2", *(f"d{i}" for i in range(6, 12))}
    reader = OpenSearchStore(os_store.config)
    assert reader.documents([f"d{i}" for i in range(12)]).keys() == expected
    assert {hit.doc_id for hit in reader.bm25("ships chess bread", 50)} == expected
    assert [(v.name, v.documents, v.aliased) for v in os_store.versions()] == [("papers-v000001", 3, False), ("papers-v000002", 7, True)]
    assert [item.doc_id for item in resumed.skipped] == ["d2"]
    assert (resumed.unchanged, resumed.indexed, resumed.dropped, resumed.total_documents) == (2, 4, 5, 7)


def test_a_resumed_rebuild_whose_deletes_are_refused_leaves_the_alias_alone(
    tmp_path: Path, os_store: OpenSearchStore, osmem_clone: Any, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild resumed with d4-d7, which the interrupted run wrote already: its one bulk
    request deletes d0-d3, and the cluster refuses each delete every time. Published, the
    version would show readers documents removed from the corpus: the run ends with one
    line, the alias stays, and the same command run again completes it."""
    interrupted_rebuild(tmp_path, os_store, glove, monkeypatch)
    smaller = write_jsonl(tmp_path / "smaller.jsonl", [dict(PAPERS[i % 3], id=f"d{i}") for i in range(4, 8)])
    proxy = ClusterProxy(osmem_clone.url, ["items429"] * 3)
    try:
        flaky = OpenSearchStore(replace(os_store.config, hosts=(proxy.url,)), sleep=lambda seconds: None)
        with pytest.raises(StoreError, match=r"^cannot drop 4 of the 4 documents of papers-v000002 that the corpus no longer holds \(d\d: rejected_execution_exception: busy \(after 2 retries\)\); the alias 'papers' was left as it was: run the same command again$"):
            index_corpus(smaller, flaky, glove, 5, rebuild=True, show_progress=False)
    finally:
        proxy.close()
    assert [(v.name, v.state, v.aliased) for v in os_store.versions()] == [("papers-v000001", "ready", True), ("papers-v000002", "building", False)]
    again = index_corpus(smaller, OpenSearchStore(os_store.config), glove, 5, rebuild=True, show_progress=False)
    assert (again.unchanged, again.indexed, again.dropped, again.total_documents) == (4, 0, 4, 4)


def test_a_rebuild_stopped_between_its_last_two_writes_is_published_by_the_next_one(
    tmp_path: Path, os_store: OpenSearchStore, osmem_clone: Any, glove: WordVectors, caplog: pytest.LogCaptureFixture
) -> None:
    """The run wrote papers-v000002 whole and marked it, then its alias swap failed (as it
    would if the process were killed there). The version was marked `ready`, as one rolled
    back from is: the next --rebuild of the same corpus began papers-v000003 and wrote every
    document again. Now it checks papers-v000002 against the corpus and publishes it."""
    index_papers(tmp_path, os_store, glove)
    corpus = write_jsonl(tmp_path / "new.jsonl", [dict(p, id=f"n{i}") for i, p in enumerate(PAPERS)])
    proxy = ClusterProxy(osmem_clone.url, pages={"/_aliases": (503, "<html><title>503 Service Unavailable</title></html>")})
    try:
        flaky = OpenSearchStore(replace(os_store.config, hosts=(proxy.url,)), sleep=lambda seconds: None)
        with pytest.raises(StoreError, match="swapping the alias"):
            index_corpus(corpus, flaky, glove, 5, rebuild=True, show_progress=False)
    finally:
        proxy.close()
    assert [(v.name, v.state, v.aliased) for v in os_store.versions()] == [
        ("papers-v000001", "ready", True), ("papers-v000002", "publishing", False),
    ]
    with caplog.at_level(logging.WARNING, logger="reranker.store.opensearch"):
        again = index_corpus(corpus, OpenSearchStore(os_store.config), glove, 5, rebuild=True, show_progress=False)
    assert [r.getMessage() for r in caplog.records if r.name == "reranker.store.opensearch"] == [
        "papers-v000002 was built whole (3 documents) by a run stopped before it swapped the alias: "
        "checking it against the corpus, then publishing it"
    ]
    assert (again.unchanged, again.indexed, again.dropped, again.total_documents) == (3, 0, 0, 3)
    assert again.published is not None and (again.published.current, again.published.previous) == ("papers-v000002", ("papers-v000001",))
    assert [(v.name, v.state, v.aliased) for v in os_store.versions()] == [
        ("papers-v000001", "ready", False), ("papers-v000002", "ready", True),
    ]


def test_a_version_left_publishing_behind_the_alias_is_marked_ready_by_the_next_run(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """A run stopped after its alias swap, before its last write: the version is published,
    and the next run of either kind marks it so (a rebuild then starts a new version)."""
    index_papers(tmp_path, os_store, glove)
    meta = raw(os_store, "GET", "/papers-v000001/_mapping")["papers-v000001"]["mappings"]["_meta"]
    os_store.client.indices.put_mapping(index="papers-v000001", body={"_meta": {"reranker": {**meta["reranker"], "state": "publishing"}}})
    again = index_papers(tmp_path, OpenSearchStore(os_store.config), glove, rebuild=True)
    assert again.published is not None and again.published.current == "papers-v000002"
    assert [(v.name, v.state, v.aliased) for v in os_store.versions()] == [
        ("papers-v000001", "ready", False), ("papers-v000002", "ready", True),
    ]


def mark_publishing(store: OpenSearchStore, index: str) -> None:
    """What a run stopped after its alias swap, before its last write, leaves."""
    meta = raw(store, "GET", f"/{index}/_mapping")[index]["mappings"]["_meta"]["reranker"]
    store.client.indices.put_mapping(index=index, body={"_meta": {"reranker": {**meta, "state": "publishing"}}})


def test_a_published_version_left_publishing_is_marked_ready_by_a_run_in_place_and_by_a_rollback(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """Only a rebuild marked it: after a run in place it stayed `publishing` behind the alias,
    and once `indices use` moved the alias back, the next --rebuild took the version rolled
    back from for one never published ("built whole ... by a run stopped before it swapped
    the alias") and published it again, instead of building a new one."""
    index_papers(tmp_path, os_store, glove)
    mark_publishing(os_store, "papers-v000001")
    index_papers(tmp_path, OpenSearchStore(os_store.config), glove)
    assert [(v.name, v.state, v.aliased) for v in os_store.versions()] == [("papers-v000001", "ready", True)]
    index_papers(tmp_path, OpenSearchStore(os_store.config), glove, rebuild=True)
    mark_publishing(os_store, "papers-v000002")
    OpenSearchStore(os_store.config).use("papers-v000001")
    assert [(v.name, v.state, v.aliased) for v in os_store.versions()] == [
        ("papers-v000001", "ready", True), ("papers-v000002", "ready", False),
    ]
    again = index_papers(tmp_path, OpenSearchStore(os_store.config), glove, rebuild=True)
    assert again.published is not None and again.published.current == "papers-v000003"


def test_indices_list_keeps_its_columns_for_a_publishing_version(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `publishing` is ten characters: the state column was nine wide.
    index_papers(tmp_path, os_store, glove)
    index_papers(tmp_path, OpenSearchStore(os_store.config), glove, rebuild=True)
    mark_publishing(os_store, "papers-v000001")
    monkeypatch.setenv("RERANKER_INDEX", "papers")
    code, out = run(data_dir, "--opensearch-url", os_store.config.hosts[0], "indices", "list")
    lines = out.splitlines()
    assert code == 0 and [line[2:].split()[1:3] for line in lines] == [["publishing", "3"], ["ready", "3"]], out
    assert len({line.index(" docs ") for line in lines}) == 1, out


# --- one writer per alias (reranker/store/opensearch_claim.py) -----------------------------


CLAIMED = (
    r"alias 'papers' is being written by `reranker index --rebuild` on {host} \(pid {pid}, started "
    r"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\); try again when it has ended \(its claim, refreshed \d+ s ago, is taken "
    r"over by the next run once it goes 120 s without a refresh: its run was stopped, or lost the cluster\)"
)


def test_a_second_run_is_refused_while_a_run_holds_the_alias_and_takes_over_once_it_is_killed(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Two `reranker index --rebuild` runs with different corpora: the last to publish won,
    silently, and two runs resuming one version wrote into it together. Now a real run,
    held in its first bulk request by a proxy, claims the alias: another run, `compact`,
    `indices use` and `indices delete` are each refused with one line naming it, while
    `indices list` and searches of `reranker*` see no trace of the claim. Killed (SIGKILL: it
    cannot release it), its claim is taken over at once by a run on the same host."""
    url = osmem_clone.url
    first = str(write_jsonl(tmp_path / "first.jsonl", PAPERS))
    second = str(write_jsonl(tmp_path / "second.jsonl", [dict(p, id=f"n{i}") for i, p in enumerate(PAPERS)]))
    assert run(data_dir, "--opensearch-url", url, "index", first, "--no-progress")[0] == 0
    proxy = ClusterProxy(url, delay={"_bulk": 60.0})
    command = [sys.executable, "-m", "reranker", "--data-dir", str(data_dir), "--opensearch-url", proxy.url, "index", first, "--rebuild", "--no-progress"]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 60
        while not any("_bulk" in path for _, path, _ in proxy.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any("_bulk" in path for _, path, _ in proxy.requests), holder.communicate(timeout=10)
        claimed = CLAIMED.replace("'papers'", "'reranker'").format(host=re.escape(socket.gethostname()), pid=holder.pid)
        for argv in (["index", second, "--rebuild", "--no-progress"], ["index", second, "--no-progress"], ["compact"],
                     ["indices", "use", "reranker-v000001"], ["indices", "delete", "reranker-v000002"]):
            capsys.readouterr()
            code, out = run(data_dir, "--opensearch-url", url, *argv)
            err = capsys.readouterr().err
            assert code == 1 and re.fullmatch(f"reranker: error: {claimed}\n", err), (argv, out, err)
        code, out = run(data_dir, "--opensearch-url", url, "indices", "list")
        assert code == 0 and [line[2:].split()[:2] for line in out.splitlines()] == [
            ["reranker-v000001", "ready"], ["reranker-v000002", "building"],
        ], out
        client = OpenSearchStore(OpenSearchSettings(hosts=(url,), alias="reranker")).client
        assert client.search(index="reranker*", body={"query": {"match_all": {}}})["hits"]["total"]["value"] == 3
        assert client.get(index="reranker.claim", id="reranker")["_source"]["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
        proxy.close()
    with caplog.at_level(logging.WARNING, logger="reranker.store.opensearch_claim"):
        code, out = run(data_dir, "--opensearch-url", url, "index", second, "--rebuild", "--no-progress")
    assert code == 0 and "alias now points at reranker-v000002" in out, (out, capsys.readouterr().err)
    said = [r.getMessage() for r in caplog.records if r.name == "reranker.store.opensearch_claim"]
    assert len(said) == 1 and re.fullmatch(
        rf"alias 'reranker' is being written by `reranker index --rebuild` on {re.escape(socket.gethostname())} \(pid {holder.pid}, "
        r"started [^)]*\); its claim is stale \(its process no longer runs\): this run takes it over", said[0],
    ), said
    assert client.get(index="reranker.claim", id="reranker", ignore=404)["found"] is False  # released at its end


def claim_of_another_host(store: OpenSearchStore, seconds_ago: float) -> None:
    """The claim a run on another host holds (one it refreshed `seconds_ago`)."""
    store.client.indices.create(index="papers.claim", body={"settings": {"index": {"hidden": True}}}, ignore=400)
    source = {"command": "reranker index", "host": "elsewhere", "pid": 7, "started": "2026-11-27T09:00:00+00:00", "refreshed": time.time() - seconds_ago}
    store.client.index(index="papers.claim", id="papers", body=source)


def test_a_claim_of_another_host_is_refused_while_fresh_and_taken_over_once_stale(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, caplog: pytest.LogCaptureFixture
) -> None:
    claim_of_another_host(os_store, seconds_ago=100)
    with pytest.raises(StoreError, match=(
        r"^alias 'papers' is being written by `reranker index` on elsewhere \(pid 7, started 2026-11-27 09:00:00 UTC\); "
        r"try again when it has ended \(its claim, refreshed 100 s ago, is taken over"
    )):
        index_papers(tmp_path, OpenSearchStore(os_store.config), glove)
    claim_of_another_host(os_store, seconds_ago=130)
    with caplog.at_level(logging.WARNING, logger="reranker.store.opensearch_claim"):
        report = index_papers(tmp_path, OpenSearchStore(os_store.config), glove)
    assert report.indexed == 3 and os_store.count() == 3
    assert [r.getMessage() for r in caplog.records if r.name == "reranker.store.opensearch_claim"] == [
        "alias 'papers' is being written by `reranker index` on elsewhere (pid 7, started 2026-11-27 09:00:00 UTC); "
        "its claim is stale (not refreshed for 130 s): this run takes it over"
    ]


def test_training_doc2vec_claims_the_alias_from_before_it_trains_to_the_end_of_its_writes(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """Vectors stored beside a rebuild would miss its new version, and a refusal after
    minutes of training would lose them: `reranker train doc2vec` is refused at once while
    another run holds the alias, and holds it itself while it writes."""
    from reranker.doc2vec import Doc2VecParams, train_for_store

    index_papers(tmp_path, os_store, glove)
    documents = [Document(p["id"], p["title"], p["text"]) for p in PAPERS]
    params = Doc2VecParams(dim=8, epochs=2, min_count=1)
    claim_of_another_host(os_store, seconds_ago=0)

    def never_read() -> Iterator[Document]:
        raise AssertionError("trained while another run holds the alias")
        yield

    with pytest.raises(StoreError, match=r"^alias 'papers' is being written by `reranker index` on elsewhere \(pid 7, "):
        train_for_store(OpenSearchStore(os_store.config), never_read(), params, tmp_path / "doc2vec")
    os_store.client.delete(index="papers.claim", id="papers")
    trainer = OpenSearchStore(os_store.config)
    held = []
    writes = trainer.store_doc_vectors

    def store_doc_vectors(*args: Any) -> Any:
        held.append(os_store.client.get(index="papers.claim", id="papers")["_source"]["command"])
        return writes(*args)

    trainer.store_doc_vectors = store_doc_vectors  # type: ignore[method-assign]
    _, report = train_for_store(trainer, documents, params, tmp_path / "doc2vec")
    assert report.stored == 3 and held == ["reranker train doc2vec"]
    assert os_store.client.get(index="papers.claim", id="papers", ignore=404)["found"] is False  # released at its end


@pytest.mark.parametrize("holder", ["this process's pid", "a finished process's pid"])
def test_a_claim_from_another_pid_namespace_under_this_hosts_name_is_refused_while_fresh(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, holder: str
) -> None:
    """Containers given the host's name (`docker run --network host`, a pod's hostNetwork)
    number their processes apart: a live run in one, as pid 1 say, was taken for this
    process itself (its claim taken on without a word) or, its pid unknown here, for a
    killed run (taken over), and two runs wrote behind the alias together."""
    if holder == "this process's pid":
        pid = os.getpid()
    else:
        finished = subprocess.Popen(["true"])
        finished.wait()
        pid = finished.pid
    os_store.client.indices.create(index="papers.claim", body={"settings": {"index": {"hidden": True}}}, ignore=400)
    source = {
        "command": "reranker index", "host": socket.gethostname(), "pid": pid, "started": "2026-11-27T09:00:00+00:00",
        "pid_namespace": "pid:[4026530000]", "refreshed": time.time(),
    }
    os_store.client.index(index="papers.claim", id="papers", body=source)
    with pytest.raises(StoreError, match=rf"^alias 'papers' is being written by `reranker index` on {re.escape(socket.gethostname())} \(pid {pid}, "):
        index_papers(tmp_path, OpenSearchStore(os_store.config), glove)
    assert os_store.client.get(index="papers.claim", id="papers")["_source"] == source


def test_a_claim_is_refreshed_while_its_run_goes_and_released_when_it_closes(
    os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opensearch_claim, "CLAIM_REFRESH_SECONDS", 0.05)
    store = OpenSearchStore(os_store.config)
    store.initialise(IndexInfo(glove.info, 5), rebuild=True)
    first = os_store.client.get(index="papers.claim", id="papers")
    assert first["_source"]["command"] == "reranker index --rebuild" and first["_source"]["pid"] == os.getpid()
    deadline = time.monotonic() + 10
    while os_store.client.get(index="papers.claim", id="papers")["_seq_no"] < first["_seq_no"] + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    again = os_store.client.get(index="papers.claim", id="papers")
    assert again["_seq_no"] >= first["_seq_no"] + 2 and again["_source"]["refreshed"] > first["_source"]["refreshed"]
    store.close()  # an interrupted run: the CLI closes its store
    assert os_store.client.get(index="papers.claim", id="papers", ignore=404)["found"] is False


def test_a_run_whose_claim_cannot_be_refreshed_for_any_reason_stops_once_it_is_stale(
    osmem_clone: Any, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer opensearch-py cannot read (a gateway's page with a 200) is no StoreError:
    it ended the refreshing thread, and the run went on writing, unwarned, under a claim
    that went stale and that another run took over."""
    monkeypatch.setattr(opensearch_claim, "CLAIM_REFRESH_SECONDS", 0.05)
    monkeypatch.setattr(opensearch_claim, "CLAIM_STALE_SECONDS", 0.3)
    proxy = ClusterProxy(osmem_clone.url)
    try:
        store = OpenSearchStore(replace(os_store.config, hosts=(proxy.url,)))
        store.initialise(IndexInfo(glove.info, 5), rebuild=True)
        proxy.pages["if_seq_no"] = (200, "<html><title>Welcome</title></html>")  # the refreshes' conditional writes
        deadline = time.monotonic() + 10
        while store._claim is not None and store._claim.lost is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(StoreError, match=r"^this run could not refresh its claim on alias 'papers' for 0.3 s \("):
            store.upsert([stored_for(glove, Document("ships", "Harbours", "Bread and cheese"))])
        store.close()
    finally:
        proxy.close()


def test_a_run_whose_claim_was_taken_over_stops_before_it_publishes(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    """A run that stalled past the claim's 120 s (or lost the cluster) and whose claim a run
    on another host took over: it must not swap the alias under that run."""
    index_papers(tmp_path, os_store, glove)
    stalled = OpenSearchStore(os_store.config)
    stalled.initialise(IndexInfo(glove.info, 5), rebuild=True)
    assert stalled.upsert([stored_for(glove, Document("ships", "Harbours", "Bread and cheese"))]) == []
    claim_of_another_host(os_store, seconds_ago=0)
    with pytest.raises(StoreError, match=(
        r"^this run's claim on alias 'papers' was taken over by `reranker index` on elsewhere \(pid 7\) \(it went 120 s "
        r"without a refresh: the run stalled, or lost the cluster\); it stopped before writing more"
    )):
        stalled.publish()
    assert os_store.alias_index() == "papers-v000001"
    assert os_store.client.get(index="papers.claim", id="papers")["_source"]["host"] == "elsewhere"  # not released


def test_a_run_whose_claim_was_taken_over_and_released_meanwhile_stops_before_it_publishes(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """The run stalled past 120 s; another took its claim over, ended and released it. Its
    next refresh found no claim and created one again, and it published over the other."""
    index_papers(tmp_path, os_store, glove)
    stalled = OpenSearchStore(os_store.config)
    stalled.initialise(IndexInfo(glove.info, 5), rebuild=True)
    assert stalled.upsert([stored_for(glove, Document("ships", "Harbours", "Bread and cheese"))]) == []
    claim_of_another_host(os_store, seconds_ago=0)
    os_store.client.delete(index="papers.claim", id="papers")  # its run has ended
    with pytest.raises(StoreError, match=(
        r"^this run's claim on alias 'papers' was taken over, and released \(or deleted\) since \(it went 120 s without a refresh"
    )):
        stalled.publish()
    assert os_store.alias_index() == "papers-v000001"
    assert os_store.client.get(index="papers.claim", id="papers", ignore=404)["found"] is False


def test_other_vectors_or_k_are_refused_until_a_rebuild(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    index_papers(tmp_path, os_store, glove)
    with pytest.raises(IndexMismatchError, match="K=5 topics per document, not K=7"):
        index_corpus(write_jsonl(tmp_path / "p.jsonl", PAPERS), OpenSearchStore(os_store.config), glove, 7, show_progress=False)
    # Refused before it wrote, the run holds no claim (its store was never closed).
    assert os_store.client.get(index="papers.claim", id="papers", ignore=404)["found"] is False

    class OtherVectors:
        info = EmbeddingInfo("my-word2vec", 50, "0" * 64)

    engine = Engine(store=OpenSearchStore(os_store.config), vectors=OtherVectors())  # type: ignore[arg-type]
    with pytest.raises(IndexMismatchError, match="built with word vectors 'glove-6b-50d'"):
        engine.search("ships at sea")
    rebuilt = index_corpus(write_jsonl(tmp_path / "p.jsonl", PAPERS), OpenSearchStore(os_store.config), glove, 7, rebuild=True, show_progress=False)
    info = OpenSearchStore(os_store.config).index_info()
    assert rebuilt.indexed == 3 and info is not None and (info.embedding, info.k) == (glove.info, 7)
    assert info.centering is not None and len(info.centering.mu) == glove.dim  # a rebuild estimates it anew


def test_another_stop_list_is_refused_until_a_rebuild(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    """`_meta.reranker.stopwords` records the list the index was read with: an index run or
    a search with another is refused, as with other vectors, and a rebuild records it."""
    index_papers(tmp_path, os_store, glove)  # the bundled list
    other = default_stopwords() | {"ships"}
    refused = r"^the index was built with the bundled stop list \(sha256 [0-9a-f]{12}\), not a stop list of \d+ words "
    with pytest.raises(IndexMismatchError, match=refused):
        index_papers(tmp_path, OpenSearchStore(os_store.config, other), glove, stopwords=other)
    assert OpenSearchStore(os_store.config).count() == 3
    with pytest.raises(IndexMismatchError, match=refused):
        Engine(store=OpenSearchStore(os_store.config, other), vectors=glove, stopwords=other).search("ships at sea")
    index_papers(tmp_path, OpenSearchStore(os_store.config, other), glove, stopwords=other, rebuild=True)
    info = OpenSearchStore(os_store.config).index_info()
    assert info is not None and info.stopwords == stop_list_info(other)
    assert Engine(store=OpenSearchStore(os_store.config, other), vectors=glove, stopwords=other).search("ships at sea").hits
    with pytest.raises(IndexMismatchError, match="built with a stop list of"):
        Engine(store=OpenSearchStore(os_store.config), vectors=glove).search("ships at sea")


def test_search_end_to_end_through_the_engine(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    index_papers(tmp_path, os_store, glove)
    engine = Engine(store=OpenSearchStore(os_store.config), vectors=glove)
    result = engine.search("a grandmaster moves the knight and the rook", "hidden_topics", explain=True)
    explanation = result.hits[0].explanation
    assert result.hits[0].doc_id == "chess" and explanation is not None and explanation.topics
    assert sum(t.contribution for t in explanation.topics) + explanation.rest_contribution == pytest.approx(result.hits[0].score, abs=1e-5)
    filtered = engine.search("bread ships chess", "hidden_topics", filters=[Filter("year", "lte", 2005)])
    assert {h.doc_id for h in filtered.hits} == {"ships", "cooking"}


# --- failures: unreachable, missing, retries -------------------------------------------


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_cluster_is_a_clear_error_without_credentials(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    store = OpenSearchStore(OpenSearchSettings(hosts=(f"http://127.0.0.1:{closed_port()}",), username="reader", password="s3cret-pw", retries=0))
    with pytest.raises(StoreUnavailableError, match=r"cannot reach OpenSearch at http://127.0.0.1:\d+ .*Connection refused"):
        store.bm25("ships", 10)
    assert "s3cret-pw" not in caplog.text
    assert "s3cret-pw" not in repr(store.config)


def test_a_cluster_that_answers_too_late_is_said_so_not_unreachable(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    """A read that timed out said "cannot reach OpenSearch at ... (fetching documents):
    ReadTimeoutError" (an index run that stopped on it, a 503 of the service): the cluster
    was reached, and which setting bounds the wait went unsaid."""
    index_papers(tmp_path, OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="slow")), glove)
    proxy = ClusterProxy(osmem_clone.url, delay={"_search": 1.5, "_mget": 1.5})
    try:
        store = OpenSearchStore(OpenSearchSettings(hosts=(proxy.url,), alias="slow", timeout=0.5, retries=0))
        for ask in (lambda: store.bm25("ships", 10), lambda: store.documents(["chess"]), lambda: store.forward("GET", "/slow/_search")):
            with pytest.raises(StoreUnavailableError) as late:
                ask()
            assert f"OpenSearch at {proxy.url} did not answer within 0.5 s (OPENSEARCH_TIMEOUT)" in str(late.value), late.value
            assert "cannot reach" not in str(late.value)
    finally:
        proxy.close()


def test_the_time_left_of_a_deadline_is_said_as_a_person_writes_it(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    """A search whose request had a time limit said "did not answer within 0.79933 s (what
    was left of the request's deadline)": the digits of a measurement, not a duration."""
    from reranker.store import end_time_limit, start_time_limit
    from reranker.text import rounded

    assert [rounded(value) for value in (4.99933, 0.4567, 0.0123, 9.96, 12.6, 1913.4, 2.0)] == ["5", "0.46", "0.012", "10", "13", "1913", "2"]
    index_papers(tmp_path, OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="late")), glove)
    proxy = ClusterProxy(osmem_clone.url, delay={"_search": 3.0})
    try:
        store = OpenSearchStore(OpenSearchSettings(hosts=(proxy.url,), alias="late", timeout=10, retries=0))
        store.count()  # the alias resolved before the clock starts
        limit = start_time_limit(0.8)
        try:
            with pytest.raises(StoreUnavailableError) as late:
                store.bm25("ships", 10)
        finally:
            end_time_limit(limit)
    finally:
        proxy.close()
    said = re.search(r"did not answer within (\S+) s \(what was left of the request's RERANKER_DEADLINE_MS \+ RERANKER_CLUSTER_BUDGET_MS\)", str(late.value))
    assert said is not None and re.fullmatch(r"0\.\d\d?|0\.8", said[1]), late.value


def test_a_search_late_from_a_stalled_first_stage_says_the_first_stage_took_the_time(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, glove: WordVectors
) -> None:
    """A cluster slow to answer the BM25 search used the whole deadline, and the answer said
    "ranker 'hidden_topics_corrected+bm25:maxp' did not finish within the 500 ms deadline"."""
    index_papers(tmp_path, OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="stalled")), glove)
    proxy = ClusterProxy(osmem_clone.url, delay={"_search": 1.0})
    # A cluster budget that outlasts the delay however long the first request loads the engine:
    # the search gets its BM25 hits, late.
    env = settings_env(data_dir, OPENSEARCH_URL=proxy.url, RERANKER_INDEX="stalled", RERANKER_DEADLINE_MS="500", RERANKER_CLUSTER_BUDGET_MS="30000")
    app = create_app(Settings.from_env(env))
    try:
        body = app.test_client().post("/search", json={"query": "a grandmaster and his knight"}).get_json()
    finally:
        app.extensions["reranker"].close()
        proxy.close()
    assert body["status"] == "degraded" and body["hits"], body
    said = re.fullmatch(r"the first stage \(BM25\) took (\d+) ms, past the 500 ms deadline: no time was left for ranker '(.+)'", body["reason"])
    assert said is not None and int(said[1]) >= 1000 and said[2] == body["ranker"], body["reason"]


def test_a_request_with_no_time_left_says_so_not_unreachable(os_store: OpenSearchStore) -> None:
    """A service request whose deadline and cluster budget were spent sends nothing more to
    the cluster; its 503 said "cannot reach OpenSearch at ...", as if the cluster were down."""
    from reranker.store import end_time_limit, start_time_limit

    limit = start_time_limit(-1.0)
    try:
        with pytest.raises(StoreUnavailableError) as spent:
            os_store.bm25("ships", 10)
    finally:
        end_time_limit(limit)
    assert str(spent.value) == f"no time was left to ask OpenSearch at {os_store.config.display_hosts} within this request's budget (BM25 search)"


def test_an_interrupted_first_run_is_named_where_the_alias_is_missing(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first `reranker index` interrupted before its end leaves a version no alias points
    at; a search said only "run `reranker index` first", as if nothing had been written."""
    corpus = write_jsonl(tmp_path / "big.jsonl", [dict(PAPERS[i % 3], id=f"d{i}") for i in range(12)])
    monkeypatch.setattr("reranker.indexing.BATCH_SIZE", 4)
    with pytest.raises(KeyboardInterrupt):
        index_documents(read_corpus(corpus), OpenSearchStore(os_store.config), glove, 5, progress=InterruptAfter(6))
    with pytest.raises(IndexNotFoundError) as missing:
        OpenSearchStore(os_store.config).bm25("ships", 10)
    assert str(missing.value).endswith(
        "has no index or alias 'papers': papers-v000001 was never published (an interrupted `reranker index`?): run the "
        "same `reranker index` again to complete it (`reranker indices list` shows its state)"
    ), missing.value


def test_a_missing_alias_says_to_index_first(os_store: OpenSearchStore) -> None:
    with pytest.raises(IndexNotFoundError, match="has no index or alias 'papers': run `reranker index"):
        os_store.bm25("ships", 10)
    assert os_store.index_info() is None


def test_credentials_are_sent_but_never_logged(osmem_clone: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    proxy = ClusterProxy(osmem_clone.url, [])
    try:
        base = OpenSearchSettings(hosts=(proxy.url,), alias="auth")
        OpenSearchStore(replace(base, username="u", password="pw-basic-123")).install_templates()
        OpenSearchStore(replace(base, api_key="key-456")).install_templates()
    finally:
        proxy.close()
    sent = set(proxy.authorization)
    assert sent == {"Basic " + base64.b64encode(b"u:pw-basic-123").decode(), "ApiKey key-456"}
    assert "pw-basic-123" not in caplog.text and "key-456" not in caplog.text


def test_the_client_is_created_lazily_and_again_after_a_fork(os_store: OpenSearchStore, monkeypatch: pytest.MonkeyPatch) -> None:
    assert os_store._client is None
    first = os_store.client
    assert os_store.client is first
    monkeypatch.setattr("reranker.store.opensearch.os.getpid", lambda: -1)
    assert os_store.client is not first


@pytest.mark.parametrize("plan", [["429", "429"], ["items429"], ["drop", "drop", "drop", "drop", "drop"]])
def test_bulk_retries_with_back_off_on_429_and_connection_errors(
    plan: list[str], osmem_clone: Any, tmp_path: Path, glove: WordVectors
) -> None:
    proxy = ClusterProxy(osmem_clone.url, plan)
    sleeps: list[float] = []
    try:
        store = OpenSearchStore(OpenSearchSettings(hosts=(proxy.url,), alias="flaky", retries=3), sleep=sleeps.append)
        report = index_papers(tmp_path, store, glove)
    finally:
        proxy.close()
    assert (report.indexed, report.skipped, report.total_documents) == (3, (), 3)
    assert sleeps and sleeps == sorted(sleeps) and len(sleeps) <= 3  # exponential back-off, bounded


def test_bulk_gives_up_on_a_dead_cluster_with_a_clear_error(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    proxy = ClusterProxy(osmem_clone.url, ["drop"] * 100)
    try:
        store = OpenSearchStore(OpenSearchSettings(hosts=(proxy.url,), alias="dead", retries=1), sleep=lambda s: None)
        with pytest.raises(StoreUnavailableError, match="what was written is kept, rerun to resume"):
            index_papers(tmp_path, store, glove)
    finally:
        proxy.close()


def test_a_bulk_request_the_cluster_answers_too_late_says_which_setting_to_raise(
    osmem_clone: Any, tmp_path: Path, glove: WordVectors
) -> None:
    """A timed-out bulk request was reported as "HTTP TIMEOUT: ConnectionTimeout caused by -
    ReadTimeoutError(HTTPConnectionPool(...): Read timed out. (read timeout=10.0))"."""
    index_papers(tmp_path, OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="slow")), glove)
    changed = [{**PAPERS[0], "text": PAPERS[0]["text"] + " again"}, *PAPERS[1:]]
    proxy = ClusterProxy(osmem_clone.url, delay={"/_bulk": 1.5})
    try:
        store = OpenSearchStore(OpenSearchSettings(hosts=(proxy.url,), alias="slow", timeout=0.5), sleep=lambda s: None)
        report = index_papers(tmp_path, store, glove, changed)
    finally:
        proxy.close()
    assert (report.indexed, report.unchanged) == (0, 2)
    assert {skipped.reason for skipped in report.skipped} == {
        "the cluster did not answer within 0.5 s (OPENSEARCH_TIMEOUT): a long document or a busy cluster needs more; "
        "raise it and run again"
    }
    assert sum(1 for method, path, _ in proxy.requests if "/_bulk" in path) == 1  # not sent again


def test_a_413_halves_the_bulk_request(osmem_clone: Any, tmp_path: Path, glove: WordVectors) -> None:
    # One document (topics, corrected topics) is about 4 KB: the three go as one request first.
    proxy = ClusterProxy(osmem_clone.url, ["413"] * 10, max_bytes=6_000)
    try:
        store = OpenSearchStore(OpenSearchSettings(hosts=(proxy.url,), alias="big", bulk_bytes=40_000), sleep=lambda s: None)
        report = index_papers(tmp_path, store, glove)
    finally:
        proxy.close()
    assert (report.indexed, report.skipped) == (3, ())
    assert proxy.bulk_sizes[0] > 6_000 and max(proxy.bulk_sizes[-3:]) <= 6_000


# --- decoding -----------------------------------------------------------------------------


def test_decode_pads_mixed_k_and_ignores_missing_or_corrupt_matrices() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32)

    def source(matrix: np.ndarray, dtype: str = "float32") -> dict[str, Any]:
        return {"matrix": encode_matrix(matrix, dtype), "k": matrix.shape[0], "d": 4, "importances": [0.5] * matrix.shape[0]}

    corrupt = dict(source(a), k=2)
    topics, importances = decode_topics([source(a), None, source(b), corrupt, {"matrix": "!!"}], dim=4)
    assert topics.shape == (5, 3, 4) and importances.shape == (5, 3)
    assert np.array_equal(topics[0], a) and np.array_equal(topics[2, :1], b) and not topics[2, 1:].any()
    assert not topics[1].any() and not topics[3].any() and not topics[4].any()
    assert importances[0].tolist() == [0.5] * 3 and importances[2].tolist() == [0.5, 0, 0]
    half, _ = decode_topics([source(a, "float16")], dim=4, dtype="float16")
    assert half.dtype == np.float32 and np.abs(half[0] - a).max() < 2e-3
    empty, _ = decode_topics([], dim=4)
    assert empty.shape == (0, 0, 4)


def test_indexing_with_worker_processes_gives_the_same_topics(tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors) -> None:
    records = [dict(PAPERS[i % 3], id=f"d{i}") for i in range(6)]
    corpus = write_jsonl(tmp_path / "w.jsonl", records)
    parallel = index_documents(read_corpus(corpus), os_store, glove, 5, workers=2)
    assert parallel.indexed == 6
    for doc_id, record in [("d0", records[0]), ("d4", records[4])]:
        expected, _, _ = document_topics(Document(doc_id, record["title"], record["text"]), glove, 5)
        assert np.array_equal(os_store.topics([doc_id]).topics[0, : expected.k], expected.topics)


def stored_for(glove: WordVectors, doc: Document) -> StoredDocument:
    topics, n_tokens, n_oov = document_topics(doc, glove, 5)
    return StoredDocument(doc, topics, "h", n_tokens, n_oov)


# --- the command line ---------------------------------------------------------------------


def test_the_cli_indexes_searches_and_rebuilds_in_opensearch(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--opensearch-url", osmem_clone.url]
    code, out = run(data_dir, *url, "templates", "install")
    assert code == 0 and "installed reranker-mappings, reranker-settings, reranker" in out
    corpus = write_jsonl(tmp_path / "c.jsonl", [*PAPERS, {"id": "bad", "text": "ships", "year": "soon"}])
    code, out = run(data_dir, *url, "index", str(corpus), "--no-progress")
    assert code == 1  # one document refused: reported, the rest indexed
    assert "indexed 3" in out and f"skipped {corpus}:4: id 'bad': mapper_parsing_exception" in out
    assert "alias now points at reranker-v000001" in out
    code, out = run(data_dir, *url, "search", "a grandmaster and his knight", "--filter", "year>=2000", "--json")
    hits = json.loads(out)["hits"]
    assert code == 0 and [h["id"] for h in hits][0] == "chess" and "ships" not in {h["id"] for h in hits}
    # A value the field cannot hold: one line and exit 1 (as for an unknown field), not no hits and 0.
    assert run(data_dir, *url, "search", "a grandmaster", "--filter", "year>=abc")[0] == 1
    assert capsys.readouterr().err == "reranker: error: cannot filter 'year' (gte 'abc'): the field holds numbers and 'abc' is not one\n"
    code, out = run(data_dir, *url, "index", str(corpus), "--no-progress", "--rebuild")
    assert "alias now points at reranker-v000002; kept reranker-v000001" in out
    code, out = run(data_dir, *url, "indices", "list")
    assert code == 0 and "  reranker-v000001             ready" in out and "* reranker-v000002" in out
    assert run(data_dir, *url, "indices", "delete", "reranker-v000002")[0] == 1
    assert "is behind alias 'reranker'" in capsys.readouterr().err
    assert run(data_dir, *url, "indices", "use", "reranker-v000001")[0] == 0
    assert run(data_dir, *url, "indices", "delete", "reranker-v000002")[0] == 0


def test_reranker_index_naming_an_index_reads_it_as_the_alias_would(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RERANKER_INDEX may name an index instead of an alias: a version reranks as the alias
    does; an index made by other means is refused in one line on every way in (it was read
    as holding topics of no dimension: a traceback, a 500 for its documents)."""
    url = ["--opensearch-url", osmem_clone.url]
    assert run(data_dir, *url, "index", str(write_jsonl(tmp_path / "c.jsonl", PAPERS)), "--no-progress")[0] == 0
    client = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,))).client
    client.index(index="plain", id="chess", body={"title": "Chess", "body": "a grandmaster and his knight"}, refresh=True)
    question = ("search", "a grandmaster and his knight", "--json")
    monkeypatch.setenv("RERANKER_INDEX", "reranker-v000001")
    code, out = run(data_dir, *url, *question)
    assert code == 0 and json.loads(out)["status"] == "ok" and json.loads(out)["hits"][0]["id"] == "chess"
    refused = "index 'plain' was not built by this package (its mapping has no _meta.reranker)"
    monkeypatch.setenv("RERANKER_INDEX", "plain")
    for command in (question, ("search", "a grandmaster", "--ranker", "bm25"), ("similar", "chess"), ("compact",)):
        capsys.readouterr()
        assert run(data_dir, *url, *command)[0] == 1
        err = capsys.readouterr().err
        assert err.startswith(f"reranker: error: {refused}") and len(err.splitlines()) == 1, err
    app = create_app(Settings.from_env(settings_env(data_dir, OPENSEARCH_URL=osmem_clone.url, RERANKER_INDEX="plain")))
    try:
        client_app = app.test_client()
        for answer in (client_app.post("/search", json={"query": "a grandmaster"}), client_app.get("/documents/chess")):
            assert 400 <= answer.status_code < 600 and answer.status_code != 500, answer.get_json()
            assert refused in answer.get_json()["error"]["reason"]
    finally:
        app.extensions["reranker"].close()


def test_an_index_built_by_others_behind_the_alias_is_rebuilt_behind_it_and_kept(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal of an index this package did not build said "or rebuild it", and
    `reranker index --rebuild` was refused with the same words. RERANKER_INDEX naming an
    index (not an alias) let a run create `NAME-v000001` and then fail: an alias cannot
    take an index's name (for a version's name, installing the templates failed first)."""
    url = ["--opensearch-url", osmem_clone.url]
    corpus = str(write_jsonl(tmp_path / "c.jsonl", PAPERS))
    client = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,))).client
    client.indices.create(index="theirs", body={"aliases": {"reranker": {}}, "mappings": {"properties": {"title": {"type": "keyword"}}}})
    client.index(index="theirs", id="x", body={"title": "theirs"}, refresh=True)
    assert run(data_dir, *url, "index", corpus, "--no-progress")[0] == 1
    err = capsys.readouterr().err
    assert "index 'theirs' behind alias 'reranker' was not built by this package" in err and "--rebuild" in err, err
    code, out = run(data_dir, *url, "index", corpus, "--no-progress", "--rebuild")
    assert code == 0 and "alias now points at reranker-v000001" in out, out + capsys.readouterr().err
    code, out = run(data_dir, *url, "search", "a grandmaster and his knight", "--json")
    assert code == 0 and json.loads(out)["hits"][0]["id"] == "chess"
    assert client.count(index="theirs")["count"] == 1  # theirs is kept, outside the alias
    for named in ("theirs", "reranker-v000001"):
        monkeypatch.setenv("RERANKER_INDEX", named)
        capsys.readouterr()
        for rebuild in ((), ("--rebuild",)):
            assert run(data_dir, *url, "index", corpus, "--no-progress", *rebuild)[0] == 2
            err = capsys.readouterr().err
            assert f"RERANKER_INDEX names the index {named!r}, not an alias" in err and len(err.splitlines()) == 1, err
    assert sorted(client.indices.get(index="*")) == ["reranker-v000001", "theirs"]  # no theirs-v000001, ...


def test_compact_is_the_clusters_force_merge(osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--opensearch-url", osmem_clone.url]
    assert run(data_dir, *url, "compact")[0] == 1
    assert "has no index or alias 'reranker': run `reranker index CORPUS.jsonl` first" in capsys.readouterr().err
    assert run(data_dir, *url, "index", str(write_jsonl(tmp_path / "c.jsonl", PAPERS)), "--no-progress")[0] == 0
    code, out = run(data_dir, *url, "compact")
    assert code == 0 and re.fullmatch(r"compacted the BM25 index of 3 documents in \d+ s: \d+ segments? before, 1 now\n", out), out
    code, out = run(data_dir, *url, "search", "a grandmaster and his knight", "--json")
    assert code == 0 and json.loads(out)["hits"][0]["id"] == "chess"


def test_index_compact_on_the_cluster_force_merges_what_the_run_wrote(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """osmem-server keeps an index in one segment, so only the one-segment case can be
    seen here: no suggestion at any size. tests/test_cluster.py sees a real cluster's."""
    from reranker.cli import indexing

    url = ["--opensearch-url", osmem_clone.url]
    monkeypatch.setattr(indexing, "COMPACT_HINT_DOCUMENTS", 1)
    for paper in PAPERS:
        code, out = run(data_dir, *url, "index", str(write_jsonl(tmp_path / "c.jsonl", [paper])), "--no-progress")
        assert code == 0 and "segment" not in out, out
    store = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,)))
    try:
        assert store.segments() == store._primary_segments(store.alias_index() or "") == 1
        changed = write_jsonl(tmp_path / "c.jsonl", [*PAPERS[:2], dict(PAPERS[2], text=PAPERS[2]["text"] + " again")])
        code, out = run(data_dir, *url, "index", str(changed), "--compact", "--no-progress")
        assert code == 0 and re.search(r"\ncompacted the BM25 index of 3 documents in \d+ s: 1 segment before, 1 now\n$", out), out
        assert store.segments() == 1
        code, out = run(data_dir, *url, "index", str(changed), "--compact", "--no-progress")
        assert code == 0 and out.endswith("\nthe BM25 index is one segment already, and this run wrote nothing: nothing to compact\n"), out
    finally:
        store.close()
    # A user without the right to list segments: the run still ends well, without the hint.
    denied = ClusterProxy(osmem_clone.url, pages={"/_cat/segments": (403, "<html><body>403 Forbidden</body></html>")})
    try:
        code, out = run(data_dir, "--opensearch-url", denied.url, "index", str(write_jsonl(tmp_path / "d.jsonl", [dict(PAPERS[0], text="a changed text")])), "--no-progress")
        assert any("_cat/segments" in path for _, path, _ in denied.requests)
    finally:
        denied.close()
    assert code == 0 and out.startswith("indexed 1, ") and "segment" not in out, out


def test_compact_interrupted_says_the_cluster_finishes_the_merge(osmem_clone: Any, data_dir: Path, tmp_path: Path) -> None:
    """Ctrl-C while the cluster merges: the force merge goes on in the cluster once it has
    the request (closing the connection does not cancel it), so "the index is as it was",
    which the embedded store's compaction can say, is not true here. A real process,
    interrupted as a terminal would, while a proxy holds the force merge."""
    assert run(data_dir, "--opensearch-url", osmem_clone.url, "index", str(write_jsonl(tmp_path / "c.jsonl", PAPERS)), "--no-progress")[0] == 0
    proxy = ClusterProxy(osmem_clone.url, delay={"_forcemerge": 30.0})
    command = [sys.executable, "-m", "reranker", "--data-dir", str(data_dir), "--opensearch-url", proxy.url, "compact"]
    compact = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not any("_forcemerge" in path for _, path, _ in proxy.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any("_forcemerge" in path for _, path, _ in proxy.requests), compact.communicate(timeout=10)
        compact.send_signal(signal.SIGINT)
        out, errors = compact.communicate(timeout=60)
    finally:
        compact.kill()
        proxy.close()
    assert compact.returncode == 130, (out, errors)
    assert errors == "reranker: interrupted (the cluster finishes the force merge it began)\n"


def test_compact_that_outlasts_its_wait_says_the_cluster_goes_on_merging(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster answers a force merge when it is done; a wait that ends first is no
    unreachable cluster (it has the request, and merges on)."""
    assert run(data_dir, "--opensearch-url", osmem_clone.url, "index", str(write_jsonl(tmp_path / "c.jsonl", PAPERS)), "--no-progress")[0] == 0
    monkeypatch.setattr(opensearch, "_FORCE_MERGE_SECONDS", 0.5)
    proxy = ClusterProxy(osmem_clone.url, delay={"_forcemerge": 3.0})
    try:
        capsys.readouterr()
        assert run(data_dir, "--opensearch-url", proxy.url, "compact")[0] == 1
    finally:
        proxy.close()
    errors = capsys.readouterr().err
    assert errors.count("\n") == 1 and "cannot reach" not in errors, errors
    assert errors.startswith("reranker: error: OpenSearch is still merging the segments of reranker-v000001 after 0.5 s"), errors


def test_an_id_with_a_tab_from_a_cluster_indexed_by_others_keeps_each_hit_on_one_line(
    osmem_clone: Any, data_dir: Path, tmp_path: Path
) -> None:
    # `reranker index` refuses such ids; someone else's writes to the cluster need not.
    url = ["--opensearch-url", osmem_clone.url]
    assert run(data_dir, *url, "index", str(write_jsonl(tmp_path / "c.jsonl", PAPERS)), "--no-progress")[0] == 0
    client = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,))).client
    copied = client.get(index="reranker", id="chess")["_source"]
    client.index(index="reranker", id="chess\tpart 2", body=copied, refresh=True)
    code, out = run(data_dir, *url, "search", "a grandmaster and his knight")
    assert code == 0 and "chess\\tpart 2" in out and "chess\tpart 2" not in out, out
    code, out = run(data_dir, *url, "similar", "chess")
    assert code == 0 and "chess\\tpart 2" in out and "chess\tpart 2" not in out, out
    code, out = run(data_dir, *url, "search", "a grandmaster and his knight", "--json")
    assert "chess\tpart 2" in {hit["id"] for hit in json.loads(out)["hits"]}


def test_a_beir_corpus_indexes_as_it_is_shipped(osmem_clone: Any, data_dir: Path, tmp_path: Path) -> None:
    """BEIR names a document's id `_id` (which OpenSearch refuses inside a source) and gives
    each one a `metadata` object."""
    url = ["--opensearch-url", osmem_clone.url]
    papers = [{"_id": p["id"], **{k: v for k, v in p.items() if k != "id"}, "metadata": {"url": "https://example.org"}} for p in PAPERS]
    code, out = run(data_dir, *url, "index", str(write_jsonl(tmp_path / "beir.jsonl", papers)), "--no-progress")
    assert code == 0 and f"indexed {len(PAPERS)}" in out
    code, out = run(data_dir, *url, "search", "a grandmaster and his knight", "--json")
    assert code == 0 and json.loads(out)["hits"][0]["id"] == "chess"


def test_the_cli_says_what_is_wrong_with_the_cluster(
    osmem_clone: Any, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://reader:s3cret@127.0.0.1:{closed_port()}"
    assert run(data_dir, "--opensearch-url", dead, "search", "ships")[0] == 1
    err = capsys.readouterr().err
    assert err.startswith("reranker: error: cannot reach OpenSearch at http://***@127.0.0.1:") and "s3cret" not in err
    assert run(data_dir, "--opensearch-url", osmem_clone.url, "search", "ships")[0] == 1
    assert "has no index or alias 'reranker': run `reranker index CORPUS.jsonl` first" in capsys.readouterr().err
    assert run(data_dir, "--opensearch-url", "ftp://nowhere", "search", "ships")[0] == 2
    assert "OPENSEARCH_URL must be http(s)://HOST[:PORT]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run(data_dir, "--opensearch-url", osmem_clone.url, "search", "ships", "--filter", "year")
    assert "expected FIELD=VALUE" in capsys.readouterr().err


def test_tls_settings_that_cannot_work_say_which_setting_to_check(
    osmem_clone: Any, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS failures said only "SSLError" (or "No such file or directory", for a CA bundle
    that is not there), after every retry: not which setting is wrong."""
    https = osmem_clone.url.replace("http://", "https://")  # the cluster speaks plain HTTP
    assert run(data_dir, "--opensearch-url", https, "search", "ships")[0] == 1
    err = capsys.readouterr().err
    assert "[SSL: WRONG_VERSION_NUMBER] wrong version number" in err and "OPENSEARCH_CA_CERTS" in err, err
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    monkeypatch.setenv("OPENSEARCH_CA_CERTS", str(junk))
    assert run(data_dir, "--opensearch-url", https, "search", "ships")[0] == 1
    err = capsys.readouterr().err
    assert "[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found" in err and "OPENSEARCH_CA_CERTS" in err, err
    for missing in (tmp_path / "missing.pem", tmp_path):
        monkeypatch.setenv("OPENSEARCH_CA_CERTS", str(missing))
        assert run(data_dir, "--opensearch-url", https, "search", "ships")[0] == 2
        # One line of the command's (another thread of this test process may write its own).
        err = capsys.readouterr().err
        said = [line for line in err.splitlines() if line.startswith("reranker:")]
        assert said == [f"reranker: error: OPENSEARCH_CA_CERTS must be a CA bundle file (PEM), got {str(missing)!r} (from the environment)"], err


def test_a_reader_notices_when_the_alias_moves_to_other_vectors(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_papers(tmp_path, os_store, glove)
    clock = [1000.0]
    monkeypatch.setattr("reranker.store.opensearch.time.monotonic", lambda: clock[0])
    reader = Engine(store=OpenSearchStore(os_store.config), vectors=glove)
    reader.search("ships")
    writer = OpenSearchStore(os_store.config)
    writer.initialise(IndexInfo(EmbeddingInfo("other", 50, "1" * 64), 5), rebuild=True)
    writer.upsert([stored_for(glove, Document("x", "", "ships at sea"))])
    writer.publish()
    clock[0] += 29
    assert reader.search("ships").hits  # still trusting its copy
    clock[0] += 2
    with pytest.raises(IndexMismatchError, match="built with word vectors 'other'"):
        reader.search("ships")


def test_sent_texts_keep_their_order_where_the_cluster_cannot_score_them(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors, caplog: pytest.LogCaptureFixture
) -> None:
    """osmem-server has no artificial documents in `_mtermvectors`: the store says it
    cannot score texts (once), and the engine falls back to their order."""
    from reranker.pipeline import Engine
    from reranker.rankers import CandidateSet
    from reranker.types import Candidate

    index_papers(tmp_path, os_store, glove)
    texts = ["statistical machine translation with a beam search", "bread is baked from flour"]
    with caplog.at_level("WARNING"):
        assert os_store.text_bm25("machine translation", texts) is None
        assert os_store.text_bm25("machine translation", texts) is None
    assert sum("no term statistics for sent texts" in r.getMessage() for r in caplog.records) == 1
    engine = Engine(store=os_store, vectors=glove)
    window = CandidateSet(tuple(Candidate(str(i), 0.0, i + 1) for i in range(2)), texts=tuple(texts), first_stage="missing")
    assert engine.first_stage(engine.query("machine translation"), window).first_stage == "order"


# --- best passages ---------------------------------------------------------------------------

# 30 common words: filler for long documents that holds no query word.
FILLER = (
    "garden river mountain forest valley village castle market bridge church library school teacher student painter "
    "music window table chair summer winter morning evening letter journey friend kitchen island harvest meadow"
).split()
WHALES = "whale harpoon"


def filler(n: int, start: int = 0) -> str:
    return " ".join(FILLER[(start + i) % len(FILLER)] for i in range(n))


# Three 400-word documents: "near" holds both query words side by side (in one passage),
# "spread" the same two words 399 words apart (never in one passage: 150 words every 75),
# "none" neither. Their whole texts match the query equally well (same counts, same length).
LONG = [
    {"id": "near", "title": "", "text": f"{filler(199)} {WHALES} {filler(199, 199)}"},
    {"id": "spread", "title": "", "text": f"whale {filler(398)} harpoon"},
    {"id": "none", "title": "", "text": filler(400, 7)},
]


def test_passages_are_cut_as_the_embedded_store_cuts_them(glove: WordVectors) -> None:
    words = [f"w{i}" for i in range(400)]
    doc = Document("long", "", " ".join(words))
    source = document_source(StoredDocument(doc, document_topics(doc, glove, 5)[0], "h", 0, 400, " ".join(words)), passages=True)
    # 150 words every 75, the last ending at the text's end: ceil((400 - 150) / 75) + 1 = 5.
    assert source["passages"] == [{"text": " ".join(words[a:b])} for a, b in [(0, 150), (75, 225), (150, 300), (225, 375), (300, 400)]]
    short = document_source(StoredDocument(doc, document_topics(doc, glove, 5)[0], "h", 0, 3, "one two three"), passages=True)
    assert short["passages"] == [{"text": "one two three"}]
    assert "passages" not in document_source(StoredDocument(doc, document_topics(doc, glove, 5)[0], "h", 0, 3))


def test_written_documents_carry_passages_the_source_leaves_out(tmp_path: Path, passages_store: OpenSearchStore, glove: WordVectors) -> None:
    report = index_papers(tmp_path, passages_store, glove, LONG)
    assert report.indexed == 3 and not report.skipped
    stored = raw(passages_store, "GET", "/papers/_doc/near")
    assert stored["found"] and "passages" not in stored["_source"] and stored["_source"]["body"] == LONG[0]["text"]
    assert "passages" not in passages_store.documents(["near"])["near"].fields
    # ... and yet they are indexed: a nested query finds the document by a passage's words.
    nested = {"query": {"nested": {"path": "passages", "query": {"match": {"passages.text": "harpoon"}}}}}
    found = passages_store.client.search(index="papers", body=nested)["hits"]["hits"]
    assert {hit["_id"] for hit in found} == {"near", "spread"}


def test_passage_bm25_scores_each_documents_best_passage(tmp_path: Path, passages_store: OpenSearchStore, glove: WordVectors) -> None:
    index_papers(tmp_path, passages_store, glove, LONG)
    first_stage = {hit.doc_id: hit.bm25_score for hit in passages_store.bm25(WHALES, 10)}
    assert first_stage["near"] == pytest.approx(first_stage["spread"], rel=1e-3)  # the whole texts match alike
    scores = passages_store.passage_bm25(WHALES, ["spread", "none", "near", "missing"], [None] * 4)
    assert scores is not None
    spread, none, near, missing = scores
    assert near > spread > 0 and none == missing == 0.0
    # Sent texts have no passages in the cluster: beside stored ids, the fusion weighs BM25 alone.
    assert passages_store.passage_bm25(WHALES, ["near", "sent"], [None, "a whale and a harpoon"]) is None


def test_texts_sent_alone_are_judged_by_their_own_statistics_as_the_embedded_store_judges_them(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """A cluster's rerank call sends texts only: their best passages are scored with the
    texts' own statistics and this service's analysis, the same scores as the embedded
    store with nothing indexed gives, whether the cluster has an index or not."""
    texts = [paper["text"] for paper in LONG] + ["a whale and a harpoon", "whales harpooned whaling", "", "of the and"]
    # Inflected and repeated words: each field's terms and counts as the embedded index's.
    query = "whales harpooned whaling whale whale harpoon"
    embedded = EmbeddedStore(tmp_path / "empty")
    try:
        expected = embedded.passage_bm25(query, [""] * len(texts), texts)
    finally:
        embedded.close()
    assert expected is not None and expected[-2:] == [0.0, 0.0] and max(expected) > 0
    assert os_store.passage_bm25(query, [""] * len(texts), texts) == pytest.approx(expected, rel=1e-9)
    index_papers(tmp_path, os_store, glove, LONG)
    assert os_store.passage_bm25(query, [""] * len(texts), texts) == pytest.approx(expected, rel=1e-9)


def test_doc2vec_vectors_written_later_keep_the_passages(
    tmp_path: Path, passages_store: OpenSearchStore, glove: WordVectors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial update rewrites a document from its `_source`, which holds no passages."""
    index_papers(tmp_path, passages_store, glove, LONG)
    monkeypatch.setattr(opensearch, "DOC2VEC_TEXT_CHUNK", 1)  # each document's text read and sent alone
    info = Doc2VecInfo(checksum="c" * 64, dim=4, mode="dbow", epochs=1, min_count=1, window=5, seed=1, infer_epochs=1)
    assert passages_store.store_doc_vectors(info, {"near": np.ones(4, np.float32), "spread": np.ones(4, np.float32)}) == []
    passages_store.client.indices.refresh(index="papers")
    assert passages_store.doc_vectors(["near"]).missing == ()
    # (The scores themselves move: the replaced nested documents still count in the
    # statistics until their segments merge, as in Lucene.)
    near, spread = passages_store.passage_bm25(WHALES, ["near", "spread"], [None, None]) or [0.0, 0.0]
    assert near > spread > 0


def test_a_version_created_without_passages_keeps_none_until_a_rebuild_with_them(
    tmp_path: Path, os_store: OpenSearchStore, passages_store: OpenSearchStore, glove: WordVectors
) -> None:
    # The default: no passages mapped, none written, none scored.
    assert index_papers(tmp_path, os_store, glove, LONG[:2]).indexed == 2
    assert "passages" not in os_store.client.indices.get_mapping(index="papers")["papers-v000001"]["mappings"]["properties"]
    assert os_store.passage_bm25(WHALES, ["near", "spread"], [None, None]) is None
    # Turned on later, it does not change that version (its `_source` cannot be changed to
    # leave passages out), and writes into it still succeed (it is `dynamic: strict`).
    report = index_corpus(write_jsonl(tmp_path / "more.jsonl", LONG[2:]), passages_store, glove, 5, show_progress=False)
    assert report.indexed == 1 and not report.skipped
    assert "passages" not in passages_store.client.indices.get_mapping(index="papers")["papers-v000001"]["mappings"]["properties"]
    assert passages_store.passage_bm25(WHALES, ["near", "spread"], [None, None]) is None
    result = Engine(store=passages_store, vectors=glove).search(WHALES, "hidden_topics_corrected+bm25:maxp", explain=True)
    explanation = result.hits[0].explanation
    assert explanation is not None and [name for name, _ in explanation.parts] == ["topics", "bm25"]
    # A rebuild with it creates a version that keeps them.
    assert index_papers(tmp_path, passages_store, glove, LONG, rebuild=True).indexed == 3
    assert passages_store.passage_bm25(WHALES, ["near", "spread"], [None, None]) is not None


def test_search_fuses_the_best_passages_three_ways(tmp_path: Path, passages_store: OpenSearchStore, glove: WordVectors) -> None:
    index_papers(tmp_path, passages_store, glove, LONG)
    result = Engine(store=OpenSearchStore(passages_store.config), vectors=glove).search(WHALES, "hidden_topics_corrected+bm25:maxp", explain=True)
    assert [hit.doc_id for hit in result.hits] == ["near", "spread"]  # BM25 alone ties them
    explanation = result.hits[0].explanation
    assert explanation is not None and [name for name, _ in explanation.parts] == ["topics", "bm25", "passages"]
    second = result.hits[1].explanation
    assert second is not None and dict(explanation.parts)["passages"] > dict(second.parts)["passages"] == 0.0  # min-max over the two


def test_a_document_past_the_clusters_default_nested_limit_keeps_all_its_passages(
    tmp_path: Path, passages_store: OpenSearchStore, glove: WordVectors
) -> None:
    """10,000 nested documents per document is the cluster's default (osmem-server holds
    to it as OpenSearch does); a version created with passages raises it, so a document of
    more than 750,000 content words is indexed whole rather than refused."""
    words = 75 * 10_000 + 150  # 10,001 passages
    text = f"{filler(words - 2)} {WHALES}"  # the query's words in its last passage only
    assert len(passages_of(tokenize(text))) == 10_001  # as the store cuts them
    report = index_papers(tmp_path, passages_store, glove, [{"id": "tome", "title": "", "text": text}, *LONG[:1]])
    assert report.indexed == 2 and not report.skipped, report
    settings = passages_store.client.indices.get_settings(index="papers")["papers-v000001"]["settings"]["index"]
    assert int(settings["mapping"]["nested_objects"]["limit"]) == opensearch.NESTED_OBJECTS_LIMIT > 10_000
    tome, near = passages_store.passage_bm25(WHALES, ["tome", "near"], [None, None]) or [0.0, 0.0]
    assert tome > 0 and near > 0  # its last passage is indexed and scored like any other


def test_a_version_with_passages_made_before_the_limit_gets_it_when_written_to(
    tmp_path: Path, passages_store: OpenSearchStore, glove: WordVectors
) -> None:
    """A version created with passages before the store set the limit keeps the cluster's
    10,000 until the store next writes to it: then it gets the limit, and a long document
    written in place is indexed whole."""
    index_papers(tmp_path, passages_store, glove, LONG[:1])
    passages_store.client.indices.put_settings(index="papers-v000001", body={"index": {"mapping": {"nested_objects": {"limit": 10_000}}}})
    text = f"{filler(75 * 10_000 + 148)} {WHALES}"  # 10,001 passages
    report = index_papers(tmp_path, passages_store, glove, [*LONG[:1], {"id": "tome", "title": "", "text": text}])
    assert report.indexed == 1 and not report.skipped, report
    settings = passages_store.client.indices.get_settings(index="papers")["papers-v000001"]["settings"]["index"]
    assert int(settings["mapping"]["nested_objects"]["limit"]) == opensearch.NESTED_OBJECTS_LIMIT


def test_a_failing_passage_search_leaves_the_fusion_two_way_and_is_said_once(
    osmem_clone: Any, tmp_path: Path, glove: WordVectors, caplog: pytest.LogCaptureFixture
) -> None:
    store = OpenSearchStore(OpenSearchSettings(hosts=(osmem_clone.url,), alias="papers", passages=True))
    index_papers(tmp_path, store, glove, LONG)
    slow = ClusterProxy(osmem_clone.url, delay={"_search": 1.0})  # every search outlasts the timeout
    try:
        reader = OpenSearchStore(OpenSearchSettings(hosts=(slow.url,), alias="papers", timeout=0.2, retries=0))
        with caplog.at_level(logging.WARNING, logger="reranker.store.opensearch"):
            assert reader.passage_bm25(WHALES, ["near"], [None]) is None
            assert reader.passage_bm25(WHALES, ["near"], [None]) is None
        said = [r.getMessage() for r in caplog.records if r.name == "reranker.store.opensearch"]
        assert len(said) == 1 and "no best passages from the cluster" in said[0] and "did not answer within 0.2 s" in said[0]
        reader.close()
    finally:
        slow.close()
        store.close()


def test_a_filter_of_nan_or_infinity_is_an_input_error_not_a_crash(
    tmp_path: Path, os_store: OpenSearchStore, glove: WordVectors
) -> None:
    """A library caller's float('nan') reached the integer-bounds check, whose Decimal
    comparison raised decimal.InvalidOperation (a traceback)."""
    index_corpus(write_jsonl(tmp_path / "filtered.jsonl", FILTERED), os_store, glove, 5, show_progress=False)
    for value in (float("nan"), float("inf")):
        with pytest.raises(InputError):
            os_store.bm25("ocean bread", 10, [Filter("year", "gte", value)])
