"""`python -m reranker.cli`."""

import sys

from reranker.cli import main

sys.exit(main())
