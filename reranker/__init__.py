"""Hidden-topic reranking for summary-style queries over long documents.

The data flows one way: text -> embeddings -> topics -> store -> rankers -> pipeline ->
evaluation / cli. See README.md for the map.
"""

__version__ = "0.1.0"
