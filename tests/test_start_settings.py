"""Every way the service starts applies the same settings: BLAS threads, and WMD loaded
when a worker starts.

Each way is started for real, over the sample corpus: `reranker serve`; the Docker
image's own command line (its ENTRYPOINT as the Dockerfile writes it, with the
repository in place of /app and a free local port in place of 0.0.0.0:8000, under the
image's ENV: there is no Docker engine here to build the image); and gunicorn started by
hand with the packaged config file and the app factory. Each worker logs one line at
start-up with its native thread pools as threadpoolctl reads them in that worker (what
RERANKER_BLAS_THREADS really did, not what it asked), and a WMD search must then come
back with exact distances (its first one used to spend the whole time budget loading).

The setting asked for is 1 thread; the libraries' own default is one per core, so on a
one-core machine the two cannot be told apart and the tests skip with that reason.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, free_port, http_json, sample_indexed, stalled_request
from test_docker import dockerfile_env, gunicorn_argv, gunicorn_option, repo_path_of

from reranker.rankers import RANKERS
from reranker.threads import VARIABLES

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
CONFIG = REPO / "reranker" / "service" / "gunicorn.conf.py"
WORKER_LINE = re.compile(r"reranker worker (\d+): (.*); native threads: (.*) \(RERANKER_BLAS_THREADS=(\d+)\)")
QUERY = "a maximum entropy named entity recognizer using global features"


def clean_env(data_dir: Path, **more: str) -> dict[str, str]:
    """A shell's environment: none of the thread variables this test process may hold
    (the in-process CLI and apps set them), so only the service's own code sets them."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES and not k.startswith("RERANKER_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    return {**env, "HOME": str(data_dir), "RERANKER_CACHE_DIR": os.environ["RERANKER_CACHE_DIR"], "RERANKER_DATA_DIR": str(data_dir), **more}


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory: pytest.TempPathFactory, glove: object) -> Path:
    return sample_indexed(tmp_path_factory, "start-settings")


@pytest.fixture(scope="module")
def default_is_more_than_one(tmp_path_factory: pytest.TempPathFactory) -> None:
    probe = "import numpy, gensim; from threadpoolctl import threadpool_info; print(max(p['num_threads'] for p in threadpool_info()))"
    env = clean_env(tmp_path_factory.mktemp("probe"))
    threads = int(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout)
    if threads == 1:
        pytest.skip("the libraries default to one thread on this machine: a BLAS setting of 1 cannot be told from no setting")


class Started:
    """A server process, its merged output collected by a thread, until `stop`."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, cwd: Path = REPO) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self.process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def worker_lines(self, workers: int, seconds: float = 90) -> list[re.Match[str]]:
        """The start-up lines of `workers` workers, once each has logged one."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = [m for m in map(WORKER_LINE.search, list(self.lines)) if m]
            if len({m[1] for m in found}) >= workers:
                return found
            assert self.process.poll() is None, "the server exited:\n" + "\n".join(self.lines[-30:])
            time.sleep(0.2)
        raise AssertionError(f"not {workers} worker start-up lines within {seconds} s:\n" + "\n".join(self.lines[-30:]))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self.reader.join(timeout=5)


def start_serve(data_dir: Path) -> Started:
    port = free_port()
    argv = [sys.executable, "-m", "reranker", "serve", "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "2"]
    return Started(argv, clean_env(data_dir, RERANKER_BLAS_THREADS="1"), port)


def start_image_command(data_dir: Path) -> Started:
    """The Dockerfile's ENTRYPOINT verbatim but for the paths inside the image and the port
    (its RERANKER_BIND, as `docker run -e` would set it)."""
    port = free_port()
    argv = gunicorn_argv()
    config = gunicorn_option(argv, "--config", "-c")
    assert config and not gunicorn_option(argv, "--bind", "-b")
    local = [GUNICORN] + [str(repo_path_of(word)) if word == config else word for word in argv[1:]]
    image_env = {
        **dockerfile_env(), "RERANKER_DATA_DIR": str(data_dir), "RERANKER_CACHE_DIR": os.environ["RERANKER_CACHE_DIR"],
        "RERANKER_BIND": f"127.0.0.1:{port}",
    }
    assert image_env.get("RERANKER_BLAS_THREADS") == "1"
    return Started(local, clean_env(data_dir, **{k: v for k, v in image_env.items() if k.startswith("RERANKER_")}), port)


def start_gunicorn(data_dir: Path) -> Started:
    port = free_port()
    argv = [GUNICORN, "-c", str(CONFIG), "--bind", f"127.0.0.1:{port}", "reranker.service:create_app()"]
    return Started(argv, clean_env(data_dir, RERANKER_BLAS_THREADS="1", RERANKER_WORKERS="1", RERANKER_THREADS="2"), port)


WAYS = {"reranker serve": (start_serve, 1), "the Docker image's command": (start_image_command, 2), "gunicorn -c gunicorn.conf.py": (start_gunicorn, 1)}


@pytest.fixture(params=list(WAYS), scope="module")
def started(request: pytest.FixtureRequest, sample_index: Path, default_is_more_than_one: None) -> Iterator[tuple[Started, int]]:
    start, workers = WAYS[request.param]
    server = start(sample_index)
    try:
        yield server, workers
    finally:
        server.stop()


def test_every_worker_runs_with_the_blas_threads_asked_for_and_wmd_loaded(started: tuple[Started, int]) -> None:
    server, workers = started
    for line in server.worker_lines(workers):
        _, done, threads, asked = line.groups()
        assert asked == "1"
        assert done.startswith("engine and WMD loaded in "), line[0]
        assert _maps_pot(int(line[1])), "a worker said it loaded WMD, but POT's solver is not mapped"
        counts = dict(part.rsplit(" ", 1) for part in threads.split(", "))
        assert counts.get("blas") == "1", f"a worker's BLAS runs with {counts}: {line[0]}"
        assert set(counts.values()) == {"1"}, f"a worker's native pools: {counts}"


def test_the_first_wmd_search_of_a_worker_computes_exact_distances(started: tuple[Started, int]) -> None:
    server, workers = started
    server.worker_lines(workers)
    status, _, body = http_json(server.url + "/search", {"query": QUERY, "ranker": "wmd", "size": 5})
    assert status == 200, body
    # "partial" with "The WMD time budget of 1000 ms ran out: 0 of 25 exact distances..."
    # was every worker's first WMD search, while it loaded gensim inside the budget.
    assert body["status"] == "ok", body.get("reason")
    assert len(body["hits"]) == 5


def test_each_request_is_one_line_of_the_log(started: tuple[Started, int]) -> None:
    """The image's entry point passed --access-logfile -, so gunicorn wrote its own line
    (without the request id) after the service's: two lines per request."""
    server, workers = started
    server.worker_lines(workers)
    request_id = f"one-line-{time.monotonic_ns()}"
    request = urllib.request.Request(server.url + "/healthz", headers={"X-Request-Id": request_id, "User-Agent": request_id})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(request_id in line for line in server.lines):
        time.sleep(0.05)
    time.sleep(0.5)  # a second line would follow the first at once
    lines = [line for line in server.lines if "/healthz" in line]
    assert len(lines) == 1 and f"request_id={request_id}" in lines[0], lines


# Scripts under bench/ that measure through the product's own entry points, which size the
# pools themselves, or that are no benchmark.
BENCH_WITHOUT_THE_CALL = {
    "benchlib.py": "defines product_threads",
    "fts5_store.py": "a module (the store the first stage replaced), imported by bench_first_stage.py",
    "bench_install.py": "runs `reranker demo` in new environments: the CLI sizes its own pools",
    "bench_startup.py": "runs `reranker search` as child processes: the CLI sizes its own pools",
    "evaluate_matrix.py": "runs the CLI's main (in-process or as children), which sizes the pools",
    "evaluate_rankers.py": "runs the CLI's main (in-process or as children), which sizes the pools",
}


def test_every_benchmark_runs_with_the_products_blas_threads() -> None:
    """A benchmark that left BLAS at its default measured another configuration than the
    product's (bench_first_stage.py's search path: 40 ms, against the product's 11 ms)."""
    for script in sorted((REPO / "bench").glob("*.py")):
        if script.name in BENCH_WITHOUT_THE_CALL:
            continue
        text = script.read_text(encoding="utf-8")
        call = text.find("product_threads()")
        assert call >= 0, f"bench/{script.name} does not size BLAS as the product does (benchlib.product_threads)"
        numpy = min((at for at in (text.find("\nimport numpy"), text.find("\nfrom reranker")) if at >= 0), default=len(text))
        assert call < numpy, f"bench/{script.name}: product_threads() must run before numpy (or reranker) is imported"
    assert all((REPO / "bench" / name).is_file() for name in BENCH_WITHOUT_THE_CALL), "an exempted script is gone: remove it"


def _maps_pot(pid: int) -> bool:
    """Whether process `pid` has POT's compiled solver mapped (what loading WMD imports)."""
    return any("/ot/" in line and ".so" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads a worker's memory maps from /proc")
def test_a_worker_told_not_to_preload_wmd_loads_it_on_the_first_wmd_search(sample_index: Path) -> None:
    port = free_port()
    argv = [GUNICORN, "-c", str(CONFIG), "--bind", f"127.0.0.1:{port}", "reranker.service:create_app()"]
    # The first wmd search loads WMD inside its deadline (1-2 s, more on a busy machine): a
    # long deadline keeps this test about what is loaded when, not about how fast. The
    # budget for exact distances does not count the loading: a short one (which loading
    # took whole, so that nothing loaded POT) still sees it loaded.
    env = clean_env(
        sample_index, RERANKER_WORKERS="1", RERANKER_THREADS="2", RERANKER_PRELOAD_WMD="false", RERANKER_DEADLINE_MS="60000",
        RERANKER_WMD_BUDGET_MS="50",
    )  # fmt: skip
    server = Started(argv, env, port)
    try:
        (line,) = server.worker_lines(1)
        assert line[2].startswith("engine (not WMD: RERANKER_PRELOAD_WMD=false) loaded in "), line[0]
        pid = int(line[1])
        assert not _maps_pot(pid), "the worker loaded WMD's solver at start though told not to"
        status, _, body = http_json(server.url + "/search", {"query": QUERY, "size": 5})
        assert status == 200 and body["status"] == "ok" and not _maps_pot(pid), "the default ranker needs no WMD"
        status, _, body = http_json(server.url + "/search", {"query": QUERY, "ranker": "wmd", "size": 5})
        # Loaded inside this request's deadline: exact distances, or some ordered by their bound.
        assert status == 200 and body["status"] in ("ok", "partial") and len(body["hits"]) == 5, body
        assert _maps_pot(pid)
    finally:
        server.stop()


def test_gunicorn_started_by_hand_runs_the_config_files_service_settings(data_dir: Path, tmp_path: Path) -> None:
    """RERANKER_CONFIG=FILE gunicorn -c gunicorn.conf.py ...: the file's bind, workers and
    read timeout were ignored (gunicorn.conf.py and the workers read the environment alone),
    while `reranker serve` and `reranker config` took them."""
    port = free_port()
    config = tmp_path / "reranker.toml"
    config.write_text(f'RERANKER_BIND = "127.0.0.1:{port}"\nRERANKER_WORKERS = 1\nRERANKER_THREADS = 1\nRERANKER_READ_TIMEOUT = 1\n')
    server = Started([GUNICORN, "-c", str(CONFIG), "reranker.service:create_app()"], clean_env(data_dir, RERANKER_CONFIG=str(config)), port)
    try:
        server.worker_lines(1)  # on the file's port: the environment would have bound 127.0.0.1:8000
        answer, waited = stalled_request(port)
    finally:
        server.stop()
    assert answer.startswith(b"HTTP/1.1 408") and waited < 5, (answer, waited)  # the default waits 10 s
    assert sum("Booting worker" in line for line in server.lines) == 1, server.lines  # the default: one per core


@pytest.mark.parametrize("source", ["environment", "config file", "default ranker"])
def test_gunicorn_started_by_hand_refuses_a_bad_setting_in_one_line(data_dir: Path, tmp_path: Path, source: str) -> None:
    """The image's way to start (gunicorn -c gunicorn.conf.py): a bad service setting was a
    traceback from the config file, and a bad store or ranker setting (RERANKER_DEFAULT_RANKER
    too) one traceback per worker as each failed to boot; `reranker serve` says it in one line."""
    config = tmp_path / "reranker.toml"
    config.write_text('RERANKER_THREADS = "x"\n')
    if source == "environment":
        env, expected = {"RERANKER_K": "abc"}, "reranker: error: RERANKER_K must be an integer, got 'abc' (from the environment)"
    elif source == "default ranker":
        env = {"RERANKER_DEFAULT_RANKER": "foo"}
        expected = f"reranker: error: RERANKER_DEFAULT_RANKER names no ranker: 'foo'; valid rankers: {', '.join(sorted(RANKERS))} (from the environment)"
    else:
        env, expected = {"RERANKER_CONFIG": str(config)}, f"reranker: error: RERANKER_THREADS must be an integer, got 'x' (from the config file {config})"
    argv = [GUNICORN, "-c", str(CONFIG), "--bind", f"127.0.0.1:{free_port()}", "--workers", "1", "reranker.service:create_app()"]
    done = subprocess.run(argv, env=clean_env(data_dir, **env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and done.stderr == expected + "\n", (done.returncode, done.stdout, done.stderr)


def test_a_bad_config_file_on_sighup_leaves_the_service_up_with_its_settings(data_dir: Path, tmp_path: Path) -> None:
    """gunicorn runs its config file again on SIGHUP: a typo in the edited file raised there,
    and gunicorn's master exited (every worker with it), the service down until restarted."""
    port = free_port()
    config = tmp_path / "reranker.toml"
    good = f'RERANKER_BIND = "127.0.0.1:{port}"\nRERANKER_WORKERS = 1\nRERANKER_THREADS = 2\nRERANKER_MAX_DOCUMENTS = 5\n'
    config.write_text(good)
    server = Started([GUNICORN, "-c", str(CONFIG), "reranker.service:create_app()"], clean_env(data_dir, RERANKER_CONFIG=str(config)), port)
    body = {"query": "bread", "documents": ["bread and yeast", "ships at sea", "flour and water"]}

    def reloaded(edited: str) -> int:
        """The status of `body` once the workers started after SIGHUP answer."""
        before = {m[1] for m in server.worker_lines(1)}
        config.write_text(edited)
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 90
        while not {m[1] for m in server.worker_lines(1)} - before and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the old worker stops gracefully; the new one answers
        return http_json(server.url + "/rerank", body)[0]

    try:
        server.worker_lines(1)
        assert http_json(server.url + "/rerank", body)[0] == 200
        # A bad value, and a good one beside it: neither is taken, the file's last good values stay.
        status = reloaded(good.replace("RERANKER_MAX_DOCUMENTS = 5", 'RERANKER_MAX_DOCUMENTS = "two"\nRERANKER_MAX_TEXT_CHARS = 3'))
        assert status == 200 and server.process.poll() is None, server.lines[-20:]
        errors = [line for line in server.lines if "[ERROR]" in line]
        assert len(errors) == 1 and "RERANKER_MAX_DOCUMENTS must be an integer, got 'two' (from the config file" in errors[0], errors
        assert not any("Traceback" in line for line in server.lines)
        assert reloaded(good.replace("RERANKER_MAX_DOCUMENTS = 5", "RERANKER_MAX_DOCUMENTS = 2")) == 413  # fixed: taken
    finally:
        server.stop()


@pytest.mark.parametrize("directory", ["made by the master", "the operator's"])
def test_sighup_keeps_the_metrics_counted_so_far(data_dir: Path, tmp_path: Path, directory: str) -> None:
    """gunicorn runs its config file again on SIGHUP, which emptied the metrics directory:
    every counter of /metrics went back to 0 on a reload. The directory the master made was
    also left behind at exit; the one an operator set (PROMETHEUS_MULTIPROC_DIR) stays."""
    from prometheus_client.parser import text_string_to_metric_families

    port = free_port()
    argv = [GUNICORN, "-c", str(CONFIG), "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "2", "reranker.service:create_app()"]
    chosen = tmp_path / "metrics"
    more = {"PROMETHEUS_MULTIPROC_DIR": str(chosen)} if directory == "the operator's" else {}
    server = Started(argv, clean_env(data_dir, **more), port)

    def healthz_count() -> float:
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as answer:
            families = text_string_to_metric_families(answer.read().decode())
        return sum(
            sample.value for family in families for sample in family.samples
            if sample.name == "reranker_requests_total" and sample.labels["endpoint"] == "/healthz"
        )  # fmt: skip

    try:
        (first,) = server.worker_lines(1)
        for _ in range(3):
            urllib.request.urlopen(server.url + "/healthz", timeout=10).close()
        assert healthz_count() == 3
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 90
        while not any(m[1] != first[1] for m in server.worker_lines(1)) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the old worker stops gracefully; the new one answers
        urllib.request.urlopen(server.url + "/healthz", timeout=10).close()
        assert healthz_count() == 4
        made = [  # the master's own (it writes its pid there)
            found.parent for found in Path(tempfile.gettempdir()).glob("reranker-metrics-*/master.pid")
            if found.read_text().strip() == str(server.process.pid)
        ]  # fmt: skip
        assert len(made) == (0 if more else 1)
    finally:
        server.stop()
    assert not any(found.exists() for found in made), "the master's metrics directory outlived it"
    if more:
        assert list(chosen.glob("*.db")), "the operator's directory holds the run's counters"


def test_gunicorn_started_by_hand_reads_the_edited_config_file_on_sighup(data_dir: Path, tmp_path: Path) -> None:
    """SIGHUP has gunicorn run its config file again and start new workers: the file's values
    the first run put in the environment were taken for the operator's and won over the
    edited file, so RERANKER_MAX_DOCUMENTS = 2 stayed 2 after the file said 5."""
    port = free_port()
    config = tmp_path / "reranker.toml"
    config.write_text(f'RERANKER_BIND = "127.0.0.1:{port}"\nRERANKER_WORKERS = 1\nRERANKER_THREADS = 2\nRERANKER_MAX_DOCUMENTS = 2\n')
    server = Started([GUNICORN, "-c", str(CONFIG), "reranker.service:create_app()"], clean_env(data_dir, RERANKER_CONFIG=str(config)), port)
    body = {"query": "bread", "documents": ["bread and yeast", "ships at sea", "flour and water"]}
    try:
        (first,) = server.worker_lines(1)
        assert http_json(server.url + "/rerank", body)[0] == 413  # three documents, two allowed
        config.write_text(config.read_text().replace("RERANKER_MAX_DOCUMENTS = 2", "RERANKER_MAX_DOCUMENTS = 5"))
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 90
        while not any(m[1] != first[1] for m in server.worker_lines(1)) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the old worker stops gracefully; the new one answers
        status, _, answer = http_json(server.url + "/rerank", body)
    finally:
        server.stop()
    assert status == 200, answer
