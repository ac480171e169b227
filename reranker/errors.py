"""One exception hierarchy for the whole package.

Every failure a user can cause or fix is a `RerankerError`; the CLI (`reranker.cli.main`)
and the HTTP service (`reranker.service.errors.STATUS`) map these classes to exit codes /
status codes in exactly one place each.
Nothing here imports from the rest of the package.
"""


class RerankerError(Exception):
    """Base class: a failure with a message meant for the user."""


class ConfigError(RerankerError):
    """A setting or command-line option is missing, malformed or inconsistent."""


class InputError(RerankerError):
    """Malformed input data: a corpus line, a query file, a qrels row.

    `location` is "file:line" when known, so messages point at the offending line.
    """

    def __init__(self, message: str, location: str | None = None) -> None:
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class VectorsError(RerankerError):
    """Word vectors could not be found, read or trained."""


class StoreError(RerankerError):
    """The document store failed (unreadable file, unreachable cluster, bad schema)."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached (cluster down, refused connection, timeout)."""


class StoreFullError(StoreError):
    """The store has no room left (a full disk): writes are refused until space returns."""


class QuotaExceededError(RerankerError):
    """A caller asked for more than a quota allows (events per query, events in all)."""


class IndexNotFoundError(StoreError):
    """The index or alias the settings name does not exist (nothing indexed yet)."""


class ForeignIndexError(StoreError):
    """The index the settings name was not built by this package (its mapping records
    nothing of it): there is nothing to read topics from, and `index --rebuild` builds a
    version of its own behind the alias."""


class IndexMismatchError(StoreError):
    """The index was built with other word vectors or another K than the caller uses."""


class WorkerError(RerankerError):
    """A worker process ended abruptly (killed, or out of memory) before its work was done."""


class UnknownRankerError(RerankerError):
    """A ranker name that is not registered; the message lists the valid names."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = sorted(known)
        super().__init__(f"unknown ranker {name!r}; valid rankers: {', '.join(self.known)}")


class RankerUnavailableError(RerankerError):
    """A registered ranker that cannot run on this index yet (e.g. no Doc2Vec model
    was trained for it); the message says what to do."""


# Here rather than beside the ranker: both the doc2vec ranker and the model loader
# (reranker/doc2vec.py, below the rankers) raise it, and neither may import the other.
NO_DOC2VEC_MODEL = "no Doc2Vec model was trained for this index; run `reranker train doc2vec CORPUS`"


class IndexOutdatedError(RankerUnavailableError):
    """The index was built by a version before something a ranker needs; rebuilding it
    (`reranker index --rebuild`) adds it."""


class NotFoundError(RerankerError):
    """A named thing (an experiment, an interleaved query) does not exist."""


class DocumentNotFoundError(NotFoundError):
    """No stored document has the id asked for."""


class ConflictError(RerankerError):
    """The request clashes with the current state (an id taken, an experiment running)."""


class UnknownFieldError(ConflictError):
    """A filter on a field the index does not hold (or cannot filter on): the request is
    well formed, and a later index may hold the field; the message lists the ones it has."""


class DuplicateEventError(ConflictError):
    """An event stored before (the same id): a retry, safe to stop retrying."""
