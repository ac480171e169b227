"""One search client against the proxy, in a process of its own (tests/test_proxy.py runs it):

    python tests/search_clients.py CLIENT URL OPAQUE_ID

CLIENT: `opensearchpy` (opensearch-py), `elasticsearch` (elasticsearch-py 8, from the test
extra) or `elasticsearch9` (elasticsearch-py 9, which needs an elastic-transport 9 that 8
refuses, so the test installs it apart and puts it first on PYTHONPATH). Each client does
what an application does on connect and per search: `info()`, a search (reranked by the
paper's ranker), a count, the last two tagged with OPAQUE_ID as X-Opaque-Id by the
client's own option. Prints one JSON object of what the client received.
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
        found = os_client.search(index="papers", body={"query": QUERY, "size": 3, "ext": EXT}, opaque_id=opaque_id)
        counted = os_client.count(index="papers", body={"query": QUERY}, opaque_id=opaque_id)
    else:
        es = module.Elasticsearch(url)
        info = es.info().body
        tagged = es.options(opaque_id=opaque_id)
        found = tagged.search(index="papers", query=QUERY, size=3, ext=EXT).body
        counted = tagged.count(index="papers", query=QUERY).body
    return {"version": module.__versionstr__, "info": info, "search": found, "count": counted["count"]}


if __name__ == "__main__":
    print(json.dumps(run(*sys.argv[1:5])))
