"""Shared fixtures: real word vectors (the bundled GloVe), real stores on disk, tiny data."""

from __future__ import annotations

import fcntl
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import pytest
from hypothesis import settings

from reranker.cli import main
from reranker.config import DEFAULT_RANKER, Settings
from reranker.embeddings import WordVectors, load_vectors
from reranker.pipeline import Engine
from reranker.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from reranker.config import OpenSearchSettings
    from reranker.store.opensearch import OpenSearchStore

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLE = Path(str(resources.files("reranker").joinpath("sample")))

# Property tests explore the same examples on every run: a red CI is reproducible.
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.load_profile("repeatable")


def write_jsonl(path: Path, records: Iterable[Any]) -> Path:
    """Write records (dicts, or raw strings written as they are) one per line."""
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record if isinstance(record, str) else json.dumps(record))
            handle.write("\n")
    return path


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's RERANKER_CACHE_DIR, for every command and server the tests start: the
    vectors are converted once per session, and never into the user's own ~/.cache."""
    directory = tmp_path_factory.mktemp("cache")
    before = os.environ.get("RERANKER_CACHE_DIR")
    os.environ["RERANKER_CACHE_DIR"] = str(directory)
    yield directory
    if before is None:
        del os.environ["RERANKER_CACHE_DIR"]
    else:
        os.environ["RERANKER_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def vectors_cache(cache_dir: Path) -> Path:
    return Settings(data_dir=cache_dir, cache_dir=cache_dir).vectors_cache


@pytest.fixture(scope="session")
def glove(vectors_cache: Path) -> WordVectors:
    """The bundled GloVe 6B 50-d vectors, converted once per test session."""
    return load_vectors("glove-6b-50d", vectors_cache)


def settings_env(data_dir: Path, **more: str) -> dict[str, str]:
    """The environment of a service or command over `data_dir`: HOME there too (nothing
    reaches the real home), the session's converted vectors."""
    return {"HOME": str(data_dir), "RERANKER_DATA_DIR": str(data_dir), "RERANKER_CACHE_DIR": os.environ["RERANKER_CACHE_DIR"], **more}


class ClusterProxy:
    """A real HTTP proxy in front of the cluster that records every request it is sent
    and misbehaves on chosen _bulk requests.

    plan: one entry per _bulk request, in order: "429" (whole request rejected),
    "items429" (200, every item rejected with 429), "drop" (connection closed without an
    answer), "413" (request too large unless under `max_bytes`), or "ok" (forwarded).
    delay: seconds to wait before forwarding a request whose path contains the key (a
    slow cluster). pages: (status, HTML) to answer instead of the cluster for a request
    whose path contains the key (a gateway's error page, not OpenSearch's JSON). requests: (method, path, body) of every request that reached the proxy;
    request_headers: (method, path, headers) of each.
    """

    def __init__(
        self, target: str, plan: list[str] | None = None, max_bytes: int = 0,
        delay: dict[str, float] | None = None, headers: dict[str, str] | None = None,
        pages: dict[str, tuple[int, str]] | None = None,
    ) -> None:
        self.target, self.plan, self.max_bytes = target.rstrip("/"), list(plan or []), max_bytes
        self.delay = dict(delay or {})
        self.pages = dict(pages or {})
        self.headers = dict(headers or {})  # added to every answer (a cluster's product headers)
        self.bulk_sizes: list[int] = []
        self.authorization: list[str | None] = []
        self.requests: list[tuple[str, str, bytes]] = []
        self.request_headers: list[tuple[str, str, dict[str, str]]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                proxy.authorization.append(self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.requests.append((self.command, self.path, body or b""))
                proxy.request_headers.append((self.command, self.path, dict(self.headers.items())))
                for part, seconds in proxy.delay.items():
                    if part in self.path:
                        time.sleep(seconds)
                for part, (status, page) in proxy.pages.items():
                    if part in self.path:
                        return self._reply(status, page.encode(), raw=True, content_type="text/html")
                if "_bulk" in self.path:
                    proxy.bulk_sizes.append(length)
                    step = proxy.plan.pop(0) if proxy.plan else "ok"
                    if step == "413" and length > proxy.max_bytes:
                        return self._reply(413, {"error": {"type": "content_too_long", "reason": "too large"}, "status": 413})
                    if step == "429":
                        return self._reply(429, {"error": {"type": "rejected_execution_exception", "reason": "queue full"}, "status": 429})
                    if step == "items429":
                        lines = iter(json.loads(line) for line in (body or b"").splitlines() if line.strip())
                        items = []
                        for action in lines:
                            (op, meta), = action.items()
                            if op != "delete":  # a delete has no source line
                                next(lines)
                            items.append({op: {"_id": meta["_id"], "status": 429, "error": {"type": "rejected_execution_exception", "reason": "busy"}}})
                        return self._reply(200, {"took": 1, "errors": True, "items": items})
                    if step == "drop":
                        self.close_connection = True
                        self.connection.close()
                        return
                request = urllib.request.Request(proxy.target + self.path, data=body, method=self.command)
                for name in ("Content-Type",):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request) as answer:
                        self._reply(answer.status, answer.read(), raw=True)
                except urllib.error.HTTPError as error:
                    self._reply(error.code, error.read(), raw=True)
                except OSError:
                    # The cluster is gone (its test ended, or the test stopped it): the client's
                    # connection closes unanswered, as before, without socketserver's traceback
                    # in the suite's output.
                    self.close_connection = True

            def _reply(self, status: int, payload: Any, raw: bool = False, content_type: str = "application/json") -> None:
                data = payload if raw else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in proxy.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # `close` waits for the serving loop's next poll: every half second by default, a
        # quarter of a second lost on average at each of the suite's many recorders.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stalled_request(port: int) -> tuple[bytes, float]:
    """A POST whose body stops after its first byte, to a service on `port`: (the first bytes
    of its answer, seconds waited for them). RERANKER_READ_TIMEOUT's 408 ends the wait."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{")
        started = time.monotonic()
        answer = client.recv(100)
        return answer, time.monotonic() - started


def metric(client: Any, sample: str) -> float:
    """One sample's value in a scrape of a test client's /metrics; 0 when it is not there yet."""
    for line in client.get("/metrics").get_data(as_text=True).splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def http_json(url: str, body: Any = None, timeout: float = 30) -> tuple[int, float, Any]:
    """(status, seconds, parsed JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    return status, time.monotonic() - started, parsed


class Service:
    """`reranker serve` in a child process, until `stop`. Its output goes to a file, not a
    pipe: the access log writes a line per request, and a pipe nobody reads until the end
    fills up and blocks the server."""

    def __init__(self, data_dir: Path, env: dict[str, str], workers: int = 1, threads: int = 4, probe: str = "/readyz") -> None:
        """Started once `probe` answers 200 (/healthz: up, whether or not it is ready)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = {**os.environ, "RERANKER_DATA_DIR": str(data_dir), "HOME": str(data_dir), **env}
        full.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self._output = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "reranker.cli", "serve", "--bind", f"127.0.0.1:{self.port}",
             "--workers", str(workers), "--threads", str(threads)],
            env=full, stdout=self._output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                if http_json(self.url + probe, timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("the service did not become ready")
            time.sleep(0.2)

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self._output.seek(0)
        return self._output.read().decode("utf-8", "replace")


class InterruptAfter:
    """A progress bar that stops an indexing run at its `lines`-th line, as Ctrl-C would."""

    def __init__(self, lines: int) -> None:
        self.lines, self.seen = lines, 0

    def update(self, n: int) -> None:
        self.seen += 1
        if self.seen == self.lines:
            raise KeyboardInterrupt


@pytest.fixture
def data_dir(tmp_path: Path, glove: object) -> Path:
    """A fresh data dir (the session's GloVe vectors are converted already)."""
    directory = tmp_path / "data"
    directory.mkdir()
    return directory


def run(data_dir: Path, *argv: str) -> tuple[int, str]:
    """`reranker --data-dir DATA_DIR ARGV...` in-process: (exit code, standard output)."""
    out = io.StringIO()
    code = main(["--data-dir", str(data_dir), *argv], stdout=out)
    return code, out.getvalue()


def sample_indexed(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A new data dir holding the bundled sample corpus's index (for module fixtures)."""
    data_dir = tmp_path_factory.mktemp(name) / "data"
    data_dir.mkdir()
    code, out = run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    assert code == 0, out
    return data_dir


@dataclass(frozen=True)
class SharedEvaluation:
    """`reranker evaluate DATASET --json --rankers bm25,DEFAULT` of a shared data set, and the
    data dir that holds the evaluation index it built. Tests only read that index."""

    data_dir: Path
    report: dict[str, Any]

    @property
    def store_name(self) -> str:
        """The evaluation index's name, for `build_engine` (there is one: one set of vectors)."""
        (index,) = (self.data_dir / "eval").iterdir()
        return f"eval/{index.name}"


@pytest.fixture(scope="session")
def shared_evaluation(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Callable[[str], SharedEvaluation]:
    """The evaluation of a shared data set (../shared/data/DATASET), run once per test run:
    indexing CL-SciSumm's 18 MB of papers is most of what its tests cost, and both the
    quality bars (tests/test_cli.py) and the topic words (tests/test_topic_words.py) read
    the same index. xdist's workers share the parent of their base temp dirs: the first to
    ask evaluates under a file lock, the others wait for it and read what it wrote. Skips
    when ../shared/data is not beside the repo."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    root = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.getbasetemp()

    def evaluated(dataset: str) -> SharedEvaluation:
        if not (SHARED_DATA / dataset).is_dir():
            pytest.skip("../shared/data is not beside the repo")
        folder = root / f"shared-evaluation-{dataset}"
        folder.mkdir(exist_ok=True)
        report = folder / "evaluate.json"
        with (folder / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not report.exists():
                data_dir = folder / "data"
                shutil.rmtree(data_dir, ignore_errors=True)  # what a worker that failed here left
                data_dir.mkdir()
                rankers = f"bm25,{DEFAULT_RANKER}"
                code, out = run(data_dir, "evaluate", str(SHARED_DATA / dataset), "--json", "--rankers", rankers, "--no-progress")
                assert code == 0, out
                report.write_text(out, encoding="utf-8")  # last: once it is there, the index is whole
        return SharedEvaluation(folder / "data", json.loads(report.read_text(encoding="utf-8")))

    return evaluated


@pytest.fixture
def store(tmp_path: Path) -> Iterable[EmbeddedStore]:
    opened = EmbeddedStore(tmp_path / "store")
    yield opened
    opened.close()


@pytest.fixture
def engine(store: EmbeddedStore, glove: WordVectors) -> Engine:
    return Engine(store=store, vectors=glove)


TINY_CORPUS = [
    {
        "id": "ships",
        "title": "Sailing ships",
        "text": "The ocean voyage of sailing ships: sailors, harbours, wind, sails and storms at sea. "
        "The captain steers the vessel across the ocean while the crew hoists the sails.",
    },
    {
        "id": "cooking",
        "title": "Baking bread",
        "text": "Bread is baked from flour, water, yeast and salt. The dough rises in a warm kitchen "
        "before the baker puts the loaf in a hot oven; butter and cheese go well with it.",
    },
    {
        "id": "chess",
        "title": "Chess openings",
        "text": "Chess players study openings: the king's pawn, the queen's gambit and the sicilian "
        "defence. A grandmaster plans moves with the bishop, knight and rook to checkmate the king.",
    },
]


@dataclass(frozen=True)
class ReindexWatch:
    """What readers saw while `searches_during_reindex` replaced every document."""

    documents: int
    replaced: int  # as the indexing run reported
    checks: int  # documents looked for while the run went on
    misses: tuple[str, ...]  # ids a check did not find
    seconds: float


def distinct_word(number: int) -> str:
    """A made-up word per document ("qyb", "qyc", ...): consonants only, so no analyser
    stems or splits it, and no other document contains it."""
    letters, word = "bcdfghjklmnpqrstvwxz", ""
    for _ in range(4):
        word += letters[number % 20]
        number //= 20
    return "qy" + word


def searches_during_reindex(
    config: "OpenSearchSettings", vectors: WordVectors, directory: Path, documents: int, readers: int = 2
) -> ReindexWatch:
    """Index `documents` documents, then index a changed version of each in place (no
    rebuild) while `readers` threads, each with its own store, look for random documents:
    one is found when a BM25 search for its distinctive word returns it and its text and
    topics come back by id. Every document is looked for once more afterwards."""
    import random

    from reranker.indexing import index_corpus
    from reranker.store.opensearch import OpenSearchStore

    common = "ship sea sail harbour wind storm captain crew ocean voyage bread oven flour yeast kitchen chess king rook bishop knight".split()

    def corpus(name: str, edition: str) -> Path:
        chooser = random.Random(name)
        return write_jsonl(directory / name, (
            {"id": f"d{n}", "title": f"paper {distinct_word(n)}", "text": f"{distinct_word(n)} {' '.join(chooser.sample(common, 8))} {edition}"}
            for n in range(documents)
        ))

    first, second = corpus("first.jsonl", "first edition"), corpus("second.jsonl", "second revised edition")
    assert index_corpus(first, OpenSearchStore(config), vectors, 3, show_progress=False).indexed == documents
    done = threading.Event()
    checks: list[int] = []
    misses: list[str] = []

    def found(store: "OpenSearchStore", number: int) -> bool:
        doc_id = f"d{number}"
        hits = [hit.doc_id for hit in store.bm25(distinct_word(number), 5)]
        return doc_id in hits and doc_id in store.documents([doc_id]) and not store.topics([doc_id]).missing

    def read(seed: int) -> None:
        store, chooser = OpenSearchStore(config), random.Random(seed)
        while not done.is_set():
            number = chooser.randrange(documents)
            if not found(store, number):
                misses.append(f"d{number}")
            checks.append(number)
        store.close()

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(readers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    try:
        report = index_corpus(second, OpenSearchStore(config), vectors, 3, show_progress=False)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    seconds = time.perf_counter() - started
    # Afterwards, one search per document still, and its text and topics by id in one
    # request each for all of them (the same facts as `found`, without 4,000 more requests).
    after = OpenSearchStore(config)
    every = [f"d{number}" for number in range(documents)]
    stored, without_topics = after.documents(every), set(after.topics(every).missing)
    misses += [
        doc_id for number, doc_id in enumerate(every)
        if doc_id not in [hit.doc_id for hit in after.bm25(distinct_word(number), 5)] or doc_id not in stored or doc_id in without_topics
    ]
    assert after.documents(["d0"])["d0"].text.endswith("second revised edition")
    after.close()
    return ReindexWatch(documents, report.replaced, len(checks), tuple(misses), seconds)


def load_script(path: Path) -> ModuleType:
    """A script outside the package (a bench, docker's setup_users.py) as a module, to test
    its functions without running its main."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses look their module up in sys.modules to read
    # string annotations (`from __future__ import annotations`).
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
