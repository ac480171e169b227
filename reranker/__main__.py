"""`python -m reranker`: the `reranker` command, for when its script is not on PATH."""

import sys

from reranker.cli import main

sys.exit(main())
