"""One search client against the proxy, in a process of its own (tests/test_proxy.py runs it):

    python tests/search_clients.py CLIENT URL OPAQUE_ID

CLIENT: `opensearchpy` (opensearch-py), `elasticsearch` (elasticsearch-py 8, from the test
extra) or `elasticsearch9` (elasticsearch-py 9, which needs an elastic-transport 9 that 8
refuses, so the test installs it apart and puts it first on PYTHONPATH). Each client does
what an application does on connect and per search: `info()`, `ping()` and
`indices.exists` of its index (and of a missing one), a search (reranked by the
paper's ranker), a count, the same search as an `_msearch`, the last three tagged with OPAQUE_ID as X-Opaque-Id by the
client's own option, then what a detail page does: the document reads `get`, `exists`,
`get_source` and `mget` (tagged too). Prints one JSON object of what the client received.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

QUERY = {"multi_match": {"query": "ocean sea storm boats", "fields": ["title", "abstract", "body"], "type": "most_fields"}}
EXT = {"rerank": {"ranker": "hidden_topics"}}


def run(client: str, url: str, opaque_id: str, compress: str = "plain") -> dict[str, Any]:
    module = importlib.import_module(client)
    if client == "opensearchpy":
        # http_compress: request bodies sent as gzip (Content-Encoding: gzip).
        os_client = module.OpenSearch(hosts=[url], http_compress=compress == "gzip")
        info = os_client.info()
        start_up = {
            "ping": os_client.ping(),
            "index_exists": os_client.indices.exists(index="papers"),
            "missing_index_exists": os_client.indices.exists(index="papers-v999999"),
        }
        found = os_client.search(index="papers", body={"query": QUERY, "size": 3, "ext": EXT}, opaque_id=opaque_id)
        counted = os_client.count(index="papers", body={"query": QUERY}, opaque_id=opaque_id)
        searched = os_client.msearch(body=[{"index": "papers"}, {"query": QUERY, "size": 3, "ext": EXT}], opaque_id=opaque_id)
        reads = {
            "get": os_client.get(index="papers", id="ships", opaque_id=opaque_id),
            "get_named": os_client.get(index="papers", id="ships", params={"_source_includes": "title,hidden_topics"}, opaque_id=opaque_id),
            "exists": os_client.exists(index="papers", id="ships", opaque_id=opaque_id),
            "exists_missing": os_client.exists(index="papers", id="nowhere", opaque_id=opaque_id),
            "get_source": os_client.get_source(index="papers", id="ships", opaque_id=opaque_id),
            "mget": os_client.mget(body={"docs": [{"_index": "papers", "_id": "ships"}, {"_index": "papers", "_id": "nowhere"}]}, opaque_id=opaque_id),
            "mget_ids": os_client.mget(index="papers", body={"ids": ["ships", "harbour"]}, opaque_id=opaque_id),
        }
        try:
            reads["get_missing"] = os_client.get(index="papers", id="nowhere", opaque_id=opaque_id)
        except module.NotFoundError as missing:
            reads["get_missing"] = {"status": missing.status_code, "info": missing.info}
    else:
        es = module.Elasticsearch(url)
        info = es.info().body
        start_up = {
            "ping": es.ping(),
            "index_exists": bool(es.indices.exists(index="papers")),
            "missing_index_exists": bool(es.indices.exists(index="papers-v999999")),
        }
        tagged = es.options(opaque_id=opaque_id)
        found = tagged.search(index="papers", query=QUERY, size=3, ext=EXT).body
        counted = tagged.count(index="papers", query=QUERY).body
        searched = tagged.msearch(searches=[{"index": "papers"}, {"query": QUERY, "size": 3, "ext": EXT}]).body
        reads = {
            "get": tagged.get(index="papers", id="ships").body,
            "get_named": tagged.get(index="papers", id="ships", source_includes=["title", "hidden_topics"]).body,
            "exists": bool(tagged.exists(index="papers", id="ships")),
            "exists_missing": bool(tagged.exists(index="papers", id="nowhere")),
            "get_source": tagged.get_source(index="papers", id="ships").body,
            "mget": tagged.mget(docs=[{"_index": "papers", "_id": "ships"}, {"_index": "papers", "_id": "nowhere"}]).body,
            "mget_ids": tagged.mget(index="papers", ids=["ships", "harbour"]).body,
        }
        try:
            reads["get_missing"] = tagged.get(index="papers", id="nowhere").body
        except module.NotFoundError as missing:
            reads["get_missing"] = {"status": missing.meta.status, "info": missing.body}
    return {"version": module.__versionstr__, "info": info, "start_up": start_up, "search": found, "count": counted["count"], "msearch": searched, "reads": reads}


if __name__ == "__main__":
    print(json.dumps(run(*sys.argv[1:5])))
