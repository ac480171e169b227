"""`python -m reranker`, and the `reranker` console script's entry point (`run`).

The script calls `run`, not `reranker.cli.main`: importing the CLI takes about half a
second (numpy, scipy, gensim, ...), and a Ctrl-C in that time is raised before `main` can
catch it, as a screenful of import traceback. This module imports nothing until then.
"""

import sys


def run() -> None:
    try:
        from reranker.cli import main

        code = main()
    except KeyboardInterrupt:  # in the import, or before `main` reached its own handler
        print("reranker: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    run()
