"""docker/: the compose file and the Dockerfile agree with what the code reads.

Nothing here builds or runs a container: the files are parsed (PyYAML, a small Dockerfile
reader) and checked against `reranker.config.ENVIRONMENT`, the Flask app's routes, the CLI's
parser and the repository's files.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import fnmatch
import importlib
import io
import json
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml  # type: ignore[import-untyped]
from conftest import load_script

from reranker.cli import build_parser
from reranker.config import ENVIRONMENT, Settings
from reranker.service import create_app

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
SECURE_FILE = DOCKER / "compose.security.yaml"
SECURITY_DIR = DOCKER / "opensearch-security"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKER_README = DOCKER / "README.md"
DOCKERIGNORE = REPO / ".dockerignore"

APP_SERVICES = ("reranker", "indexer")  # the services that run this package
REQUIRED_APP_ENV = ("OPENSEARCH_URL", "RERANKER_DATA_DIR")
# Variables the docs may name that the package does not read: the OpenSearch image's own
# and the cluster test suite's.
FOREIGN_ENV = {"OPENSEARCH_INITIAL_ADMIN_PASSWORD", "OPENSEARCH_JAVA_OPTS", "OPENSEARCH_TEST_URL", "OPENSEARCH_HOME", "OPENSEARCH_ADMIN_USERNAME"}


# ---------------------------------------------------------------------------------------------
# compose.yaml helpers


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), f"{COMPOSE_FILE}: no services mapping"
    return data


def service(name: str) -> dict[str, Any]:
    services = load_compose()["services"]
    assert name in services, f"compose has no service {name!r} (has {sorted(services)})"
    return services[name]


def env_of(svc: dict[str, Any]) -> dict[str, str]:
    """A service's `environment`, either syntax, as strings (`KEY` alone -> '')."""
    raw = svc.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.partition("=") for item in raw)
        return {key: value for key, _, value in pairs}
    result = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        result[str(key)] = "" if value is None else str(value)
    return result


def published_ports(svc: dict[str, Any]) -> list[tuple[str | None, int | None, int]]:
    """(host_ip, host_port, container_port) for each entry of a service's `ports`."""
    result: list[tuple[str | None, int | None, int]] = []
    for entry in svc.get("ports") or []:
        if isinstance(entry, dict):
            published = entry.get("published")
            result.append((entry.get("host_ip"), int(published) if published else None, int(entry["target"])))
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) == 3:
            result.append((parts[0], int(parts[1]), int(parts[2])))
        elif len(parts) == 2:
            result.append((None, int(parts[0]), int(parts[1])))
        else:
            result.append((None, None, int(parts[0])))
    return result


def container_port(name: str) -> int:
    ports = {target for _, _, target in published_ports(service(name))}
    assert len(ports) == 1, f"service {name!r} should publish exactly one container port, has {sorted(ports)}"
    return ports.pop()


def healthcheck_command(svc: dict[str, Any]) -> str:
    test = (svc.get("healthcheck") or {}).get("test")
    assert test, "no healthcheck.test"
    if isinstance(test, str):
        return test
    assert test[0] in ("CMD", "CMD-SHELL"), f"healthcheck.test must start with CMD or CMD-SHELL, got {test[0]!r}"
    return " ".join(test[1:])


def urls_in(text: str) -> list[str]:
    return re.findall(r"https?://[^\s'\"]+", text)


def volume_mounts(svc: dict[str, Any]) -> dict[str, str]:
    """container path -> source (named volume or host path)."""
    mounts: dict[str, str] = {}
    for entry in svc.get("volumes") or []:
        if isinstance(entry, dict):
            mounts[entry["target"]] = entry.get("source", "")
        else:
            source, _, rest = str(entry).partition(":")
            mounts[rest.split(":")[0]] = source
    return mounts


def depends_on(svc: dict[str, Any]) -> dict[str, str]:
    raw = svc.get("depends_on") or {}
    if isinstance(raw, list):
        return {name: "service_started" for name in raw}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in raw.items()}


def job_commands(svc: dict[str, Any]) -> list[list[str]]:
    """The argv of each command a service runs (a `sh -c` script is split on && ; and newlines)."""

    def as_list(value: Any) -> list[str]:
        if value is None:
            return []
        return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]

    argv = as_list(svc.get("entrypoint")) + as_list(svc.get("command"))
    assert argv, "service has neither entrypoint nor command"
    if PurePosixPath(argv[0]).name in ("sh", "bash", "dash"):
        flags = [a for a in argv[1:] if a.startswith("-")]
        assert any("c" in f for f in flags), f"a shell without -c: {argv}"
        script = argv[1 + len(flags)]
        pieces = re.split(r"&&|;|\n", script)
        return [shlex.split(piece) for piece in pieces if piece.strip()]
    return [argv]


def parse_cli(argv: list[str]) -> Any:
    """`reranker ...` parsed by the real parser; a failure says what argparse said."""
    assert argv and argv[0] == "reranker", f"expected a `reranker` command, got {argv}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"`{shlex.join(argv)}` does not parse with reranker.cli.build_parser():\n{err.getvalue()}")


# ---------------------------------------------------------------------------------------------
# Dockerfile helpers


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, rest = full.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def instruction_args(keyword: str) -> list[str]:
    return [rest for kw, rest in dockerfile_instructions() if kw == keyword]


def exec_or_shell(rest: str) -> list[str]:
    """The argv of an exec-form (JSON) or shell-form instruction."""
    rest = rest.strip()
    if rest.startswith("["):
        return [str(item) for item in json.loads(rest)]
    return shlex.split(rest)


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in instruction_args("ENV"):
        tokens = shlex.split(rest)
        if tokens and "=" not in tokens[0]:  # legacy `ENV KEY value with spaces`
            env[tokens[0]] = " ".join(tokens[1:])
            continue
        for token in tokens:
            key, _, value = token.partition("=")
            env[key] = value
    return env


def dockerfile_workdir() -> PurePosixPath:
    workdirs = instruction_args("WORKDIR")
    return PurePosixPath(workdirs[-1]) if workdirs else PurePosixPath("/")


def dockerfile_copies() -> dict[PurePosixPath, Path]:
    """container path -> repository path, for each COPY/ADD from the build context (= repo root)."""
    copies: dict[PurePosixPath, Path] = {}
    workdir = PurePosixPath("/")
    for keyword, rest in dockerfile_instructions():
        if keyword == "WORKDIR":
            workdir = workdir / rest
        if keyword not in ("COPY", "ADD"):
            continue
        tokens = [t for t in exec_or_shell(rest) if not t.startswith("--")]
        assert not any(t.startswith("--from") for t in shlex.split(rest)), "multi-stage COPY --from is not mapped"
        *sources, destination = tokens
        dest = workdir / destination
        for source in sources:
            repo_path = REPO / source.rstrip("/")
            if repo_path.is_dir():  # a directory's contents land in the destination
                copies[dest] = repo_path
            elif destination.endswith("/") or len(sources) > 1:
                copies[dest / repo_path.name] = repo_path
            else:
                copies[dest] = repo_path
    return copies


def repo_path_of(container_path: str) -> Path:
    """Where a path inside the image comes from in the repository (longest COPY prefix)."""
    path = PurePosixPath(container_path)
    if not path.is_absolute():
        path = dockerfile_workdir() / path
    copies = dockerfile_copies()
    for destination in sorted(copies, key=lambda p: len(p.parts), reverse=True):
        if path == destination or destination in path.parents:
            return copies[destination] / path.relative_to(destination)
    pytest.fail(f"{container_path} is not inside anything the Dockerfile copies ({sorted(map(str, copies))})")


def gunicorn_argv() -> list[str]:
    entry = instruction_args("ENTRYPOINT")
    cmd = instruction_args("CMD")
    argv = (exec_or_shell(entry[-1]) if entry else []) + (exec_or_shell(cmd[-1]) if cmd else [])
    assert argv and PurePosixPath(argv[0]).name == "gunicorn", f"the image should start gunicorn, starts {argv}"
    return argv


def gunicorn_option(argv: list[str], *names: str) -> str | None:
    for index, token in enumerate(argv):
        for name in names:
            if token == name:
                return argv[index + 1]
            if token.startswith(name + "=") and name.startswith("--"):
                return token.split("=", 1)[1]
    return None


def gunicorn_target(argv: list[str]) -> str:
    targets = [t for t in argv[1:] if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*(\(.*\))?", t)]
    assert len(targets) == 1, f"expected one module:callable target in {argv}, found {targets}"
    return targets[0]


def gunicorn_bind() -> tuple[str, int]:
    """Where the image's gunicorn listens: its --bind, else the image's RERANKER_BIND
    (gunicorn.conf.py reads it)."""
    bind = gunicorn_option(gunicorn_argv(), "--bind", "-b") or dockerfile_env().get("RERANKER_BIND")
    assert bind, f"gunicorn has no --bind and the image no RERANKER_BIND: {gunicorn_argv()}"
    host, _, port = bind.rpartition(":")
    return host, int(port)


def image_gunicorn_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]) -> Any:
    """gunicorn's settings as the image's entry point makes them, under the image's ENV and
    `env` over it (what `docker run -e` or compose's `environment:` add): gunicorn's own
    loading of its command line and config file, the repository's in place of /app's."""
    from gunicorn.app.wsgiapp import WSGIApplication

    argv = gunicorn_argv()
    config = gunicorn_option(argv, "--config", "-c")
    for name in list(os.environ):
        if name.startswith(("RERANKER_", "OPENSEARCH_", "GUNICORN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # reused, not made in /tmp
    for name, value in {**dockerfile_env(), **env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", [str(repo_path_of(word)) if word == config else word for word in argv])
    return WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]").cfg


def exposed_ports() -> set[int]:
    return {int(token.split("/")[0]) for rest in instruction_args("EXPOSE") for token in rest.split()}


# ---------------------------------------------------------------------------------------------
# .dockerignore helper


def dockerignored(path: str) -> bool:
    """Docker's rule, approximately: the last pattern matching the path or a parent wins."""
    candidates = [path]
    parts = PurePosixPath(path).parts
    candidates += ["/".join(parts[:i]) for i in range(1, len(parts))]
    excluded = False
    for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            excluded = not negate
    return excluded


# ---------------------------------------------------------------------------------------------
# compose: services


def test_compose_has_the_three_services() -> None:
    services = load_compose()["services"]
    missing = {"opensearch", "reranker", "indexer"} - set(services)
    assert not missing, f"compose lacks services {sorted(missing)} (has {sorted(services)})"


def test_opensearch_is_a_pinned_2x_single_node() -> None:
    svc = service("opensearch")
    image = svc.get("image", "")
    assert re.fullmatch(r"opensearchproject/opensearch:2\.\d+\.\d+", image), (
        f"want opensearchproject/opensearch:2.MINOR.PATCH, got {image!r}"
    )
    env = env_of(svc)
    assert env.get("discovery.type") == "single-node", f"discovery.type is {env.get('discovery.type')!r}"
    heap = re.findall(r"-Xm[sx](\d+)([mg])", env.get("OPENSEARCH_JAVA_OPTS", ""))
    assert len(heap) == 2, f"OPENSEARCH_JAVA_OPTS should set -Xms and -Xmx, is {env.get('OPENSEARCH_JAVA_OPTS')!r}"
    megabytes = {int(n) * (1024 if unit == "g" else 1) for n, unit in heap}
    assert len(megabytes) == 1 and 512 <= megabytes.pop() <= 1024, f"heap -Xms = -Xmx within 512m..1g, got {heap}"


def test_opensearch_settings_reach_the_node() -> None:
    """The image's entry point passes an environment variable on as `-Ekey=value` only when its
    name is lower-case dotted words (opensearch-build's opensearch-docker-entrypoint.sh:
    `^[a-z0-9_]+\\.[a-z0-9_]+`); any other dotted name is dropped without a word. And a locked
    heap needs the memlock limit lifted, as OpenSearch's compose example does."""
    svc = service("opensearch")
    env = env_of(svc)
    dropped = sorted(key for key in env if "." in key and not re.match(r"^[a-z0-9_]+\.[a-z0-9_]+", key))
    assert not dropped, f"the entry point ignores {dropped}"
    ulimits = svc.get("ulimits", {})
    if env.get("bootstrap.memory_lock") == "true":
        assert ulimits.get("memlock") == {"soft": -1, "hard": -1}, f"memory_lock without an unlimited memlock: {ulimits}"
    nofile = ulimits.get("nofile", {})
    assert min(nofile.get("soft", 0), nofile.get("hard", 0)) >= 65536, f"OpenSearch wants nofile >= 65536, got {nofile}"


def test_opensearch_is_published_on_loopback_only() -> None:
    ports = published_ports(service("opensearch"))
    assert ports, "opensearch publishes no port (the cluster tests need localhost:9200)"
    for host_ip, host_port, target in ports:
        assert host_ip == "127.0.0.1", f"opensearch port {host_port}:{target} is published on {host_ip or 'all interfaces'}"
    assert (9200, 9200) in {(h, t) for _, h, t in ports}, f"want 127.0.0.1:9200:9200 (docker/README.md uses it), got {ports}"


def test_opensearch_healthcheck_waits_for_yellow_on_its_own_port() -> None:
    command = healthcheck_command(service("opensearch"))
    urls = urls_in(command)
    assert len(urls) == 1 and command.lstrip().startswith("curl"), f"want one curl request, got {command!r}"
    url = urlsplit(urls[0])
    assert url.path == "/_cluster/health" and "wait_for_status=yellow" in url.query, f"health check asks {urls[0]}"
    port = container_port("opensearch")
    assert url.port == port, f"health check port {url.port} != container port {port}"


def test_security_choice_is_explicit_and_the_secure_setup_documented() -> None:
    env = env_of(service("opensearch"))
    security_off = env.get("DISABLE_SECURITY_PLUGIN") == "true"
    if security_off:
        assert env.get("DISABLE_INSTALL_DEMO_CONFIG") == "true", "security off needs DISABLE_INSTALL_DEMO_CONFIG=true"
    else:
        assert env.get("OPENSEARCH_INITIAL_ADMIN_PASSWORD"), "security on needs OPENSEARCH_INITIAL_ADMIN_PASSWORD"
    readme = DOCKER_README.read_text(encoding="utf-8")
    needed = [
        "OPENSEARCH_INITIAL_ADMIN_PASSWORD",
        "OPENSEARCH_USERNAME",
        "OPENSEARCH_PASSWORD",
        "OPENSEARCH_CA_CERTS",
        "OPENSEARCH_VERIFY_CERTS",
        "https://",
    ]
    missing = [word for word in needed if word not in readme]
    assert not missing, f"docker/README.md does not explain running with security on: missing {missing}"


def test_docs_name_only_real_variables() -> None:
    """A typo in an env name in the README or compose comments would be silently ignored."""
    text = "".join(path.read_text(encoding="utf-8") for path in (DOCKER_README, COMPOSE_FILE, SECURE_FILE))
    named = set(re.findall(r"\b(?:OPENSEARCH|RERANKER)_[A-Z_]+\b", text))
    unknown = sorted(named - set(ENVIRONMENT) - FOREIGN_ENV)
    assert not unknown, f"docker docs name variables nothing reads: {unknown}"


# ---------------------------------------------------------------------------------------------
# compose: the reranker and the indexer


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_environment_is_what_the_code_reads(name: str) -> None:
    env = env_of(service(name))
    unknown = sorted(set(env) - set(ENVIRONMENT))
    assert not unknown, f"{name}: environment sets {unknown}, which reranker.config.ENVIRONMENT does not list"
    missing = [key for key in REQUIRED_APP_ENV if not env.get(key)]
    assert not missing, f"{name}: environment lacks {missing}"
    Settings.from_env(env)  # the values are valid too (raises ConfigError otherwise)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_opensearch_url_names_the_opensearch_service_and_port(name: str) -> None:
    url = urlsplit(env_of(service(name))["OPENSEARCH_URL"])
    services = load_compose()["services"]
    assert url.hostname == "opensearch" and "opensearch" in services, f"{name}: OPENSEARCH_URL host is {url.hostname!r}"
    port = container_port("opensearch")
    assert url.port == port, f"{name}: OPENSEARCH_URL port {url.port} != opensearch container port {port}"
    security_off = env_of(service("opensearch")).get("DISABLE_SECURITY_PLUGIN") == "true"
    expected = "http" if security_off else "https"
    assert url.scheme == expected, f"{name}: OPENSEARCH_URL scheme {url.scheme!r}, the cluster speaks {expected}"


def test_indexer_and_reranker_share_the_data_volume() -> None:
    compose = load_compose()
    sources = set()
    for name in APP_SERVICES:
        svc = service(name)
        data_dir = env_of(svc)["RERANKER_DATA_DIR"]
        mounts = volume_mounts(svc)
        assert data_dir in mounts, f"{name}: RERANKER_DATA_DIR={data_dir} is not a mounted volume ({mounts})"
        sources.add(mounts[data_dir])
        prepared = dockerfile_env().get("RERANKER_DATA_DIR")
        assert data_dir == prepared, f"{name}: RERANKER_DATA_DIR={data_dir}, the image prepares {prepared}"
        cache = env_of(svc).get("RERANKER_CACHE_DIR") or dockerfile_env().get("RERANKER_CACHE_DIR") or ""
        assert cache.startswith(data_dir.rstrip("/") + "/"), f"{name}: RERANKER_CACHE_DIR={cache!r} is not on the data volume"
    assert len(sources) == 1, f"the converted vectors should be shared: data volumes {sources}"
    assert sources.pop() in (compose.get("volumes") or {}), "the data volume should be a declared named volume"


def test_startup_order() -> None:
    assert depends_on(service("indexer")).get("opensearch") == "service_healthy"
    reranker = depends_on(service("reranker"))
    assert reranker.get("opensearch") == "service_healthy", f"reranker depends_on {reranker}"
    assert reranker.get("indexer") == "service_completed_successfully", f"reranker depends_on {reranker}"
    assert str(service("indexer").get("restart", "no")) == "no", "the indexer is a one-shot job"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_build_this_dockerfile(name: str) -> None:
    build = service(name).get("build")
    assert isinstance(build, dict), f"{name}: want build: {{context, dockerfile}}, got {build!r}"
    context = (COMPOSE_FILE.parent / build.get("context", ".")).resolve()
    assert context == REPO, f"{name}: build context {context} is not the repository root"
    dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
    assert dockerfile == DOCKERFILE, f"{name}: builds {dockerfile}, not {DOCKERFILE}"


def test_reranker_port_matches_expose_and_gunicorn_bind() -> None:
    ports = published_ports(service("reranker"))
    targets = {target for _, _, target in ports}
    host, bind_port = gunicorn_bind()
    assert host == "0.0.0.0", f"gunicorn binds {host}: unreachable from outside the container"
    assert targets == {bind_port}, f"reranker publishes container ports {sorted(targets)}, gunicorn binds {bind_port}"
    assert exposed_ports() == {bind_port}, f"Dockerfile EXPOSE {sorted(exposed_ports())}, gunicorn binds {bind_port}"


def test_reranker_healthcheck_requests_a_route_of_the_app() -> None:
    urls = urls_in(healthcheck_command(service("reranker")))
    assert len(urls) == 1, f"want one URL in the reranker health check, got {urls}"
    url = urlsplit(urls[0])
    assert url.port == gunicorn_bind()[1], f"health check port {url.port} != gunicorn port {gunicorn_bind()[1]}"
    assert_route(url.path, env_of(service("reranker")))


def test_image_healthcheck_requests_a_route_of_the_app() -> None:
    healthchecks = instruction_args("HEALTHCHECK")
    assert healthchecks, "the Dockerfile has no HEALTHCHECK"
    urls = urls_in(healthchecks[-1])
    assert len(urls) == 1, f"want one URL in the image HEALTHCHECK, got {urls}"
    assert "curl" not in healthchecks[-1] and "wget" not in healthchecks[-1], "python:*-slim has neither curl nor wget"
    assert urlsplit(urls[0]).port == gunicorn_bind()[1]
    assert_route(urlsplit(urls[0]).path, env_of(service("reranker")))


def assert_route(path: str, env: dict[str, str]) -> None:
    app = create_app(Settings.from_env(env))  # builds no engine, touches no store
    adapter = app.url_map.bind("localhost")
    try:
        adapter.match(path, method="GET")
    except Exception as exc:  # NotFound, MethodNotAllowed
        rules = sorted(rule.rule for rule in app.url_map.iter_rules())
        pytest.fail(f"GET {path} is not a route of create_app() ({type(exc).__name__}); routes: {rules}")


def test_indexer_installs_templates_then_indexes_the_sample_corpus() -> None:
    commands = job_commands(service("indexer"))
    parsed = [parse_cli(argv) for argv in commands]
    names = [args.command for args in parsed]
    assert "templates" in names and "index" in names, f"the indexer runs {names}, want templates then index"
    assert names.index("templates") < names.index("index"), f"templates must be installed before indexing: {names}"
    templates = commands[names.index("templates")]
    assert templates[1:] == ["templates", "install"], f"want `reranker templates install`, got {shlex.join(templates)}"
    corpus = parsed[names.index("index")].corpus
    in_repo = repo_path_of(str(corpus))
    assert in_repo.is_file(), f"the indexer indexes {corpus}, which would come from {in_repo}: no such file"
    sample = REPO / "reranker" / "sample" / "corpus.jsonl"
    assert in_repo == sample, f"the indexer should index the sample corpus, not {in_repo}"


# ---------------------------------------------------------------------------------------------
# Dockerfile


def test_base_image_is_a_pinned_slim_python_matching_pyproject() -> None:
    bases = instruction_args("FROM")
    assert bases, "the Dockerfile has no FROM"
    image = bases[-1].split()[0]
    match = re.fullmatch(r"python:(3)\.(\d+)\.(\d+)-slim-bookworm(@sha256:[0-9a-f]{64})?", image)
    assert match, f"want python:3.MINOR.PATCH-slim-bookworm, got {image!r}"
    requires = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    floor = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires)
    assert floor, f"requires-python {requires!r}: expected >=X.Y"
    minimum = (int(floor[1]), int(floor[2]))
    assert (int(match[1]), int(match[2])) >= minimum, f"base {image} is older than requires-python {requires}"


def test_image_runs_as_a_non_root_user_that_it_creates() -> None:
    users = instruction_args("USER")
    assert users, "the Dockerfile has no USER: the service would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER is {users[-1]}"
    created = " ".join(instruction_args("RUN"))
    pattern = rf"(useradd|adduser)\b[^&;]*(--uid {user}\b|\b{user}\s*($|&|;))"
    assert re.search(pattern, created), f"USER {user} is not created by useradd/adduser in a RUN"


def test_dockerfile_env_names_are_known() -> None:
    env = dockerfile_env()
    ours = {key for key in env if key.startswith(("RERANKER_", "OPENSEARCH_"))}
    assert not ours - set(ENVIRONMENT), f"Dockerfile ENV sets unknown {sorted(ours - set(ENVIRONMENT))}"
    assert env.get("RERANKER_BLAS_THREADS") == "1", "one BLAS thread per gunicorn worker"
    assert env.get("RERANKER_DATA_DIR"), "the image should set RERANKER_DATA_DIR"


def test_gunicorn_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = gunicorn_argv()
    cfg = image_gunicorn_config(monkeypatch, tmp_path, {})
    assert cfg.workers >= 2, f"workers {cfg.workers}"
    assert 10 <= cfg.timeout <= 120, f"timeout {cfg.timeout}"
    assert cfg.graceful_timeout <= cfg.timeout, f"graceful timeout {cfg.graceful_timeout} (timeout {cfg.timeout})"
    assert cfg.bind == [":".join(map(str, gunicorn_bind()))]
    assert "--preload" not in argv and not cfg.preload_app, "engines must be built after the fork (reranker/service.py)"
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert any(re.match(r"gunicorn\b", dep) for dep in dependencies), "gunicorn is not a dependency: the image would lack it"


def test_the_image_takes_its_server_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The entry point passed --bind, --workers and --timeout, which win over gunicorn.conf.py:
    `docker run -e RERANKER_WORKERS=4` (or compose's environment) ran 2 workers all the same,
    while `reranker config` in the container said 4."""
    asked = {"RERANKER_BIND": "0.0.0.0:8001", "RERANKER_WORKERS": "3", "RERANKER_THREADS": "5", "RERANKER_TIMEOUT": "45"}
    cfg = image_gunicorn_config(monkeypatch, tmp_path, asked)
    assert (cfg.bind, cfg.workers, cfg.threads, cfg.timeout) == (["0.0.0.0:8001"], 3, 5, 45)
    shown = Settings.from_env({**dockerfile_env(), **asked}).effective()
    assert all(shown[name] == value for name, value in asked.items()), "what `reranker config` shows is what runs"


def test_gunicorn_reads_the_packaged_config_file() -> None:
    config = gunicorn_option(gunicorn_argv(), "--config", "-c")
    assert config, "the image should run with reranker/service/gunicorn.conf.py"
    assert repo_path_of(config) == REPO / "reranker" / "service" / "gunicorn.conf.py"
    assert repo_path_of(config).is_file()


def test_gunicorn_target_is_importable_and_builds_a_wsgi_app(monkeypatch: pytest.MonkeyPatch) -> None:
    target = gunicorn_target(gunicorn_argv())
    module_name, _, expression = target.partition(":")
    module = importlib.import_module(module_name)
    tree = ast.parse(expression, mode="eval").body
    call = tree if isinstance(tree, ast.Call) else None
    name_node = call.func if call else tree
    assert isinstance(name_node, ast.Name), f"gunicorn target {target!r}: want NAME or NAME(literal args)"
    factory = getattr(module, name_node.id, None)
    assert callable(factory), f"{module_name} has no callable {name_node.id!r}"
    if call is None:
        return
    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {str(k.arg): ast.literal_eval(k.value) for k in call.keywords}
    monkeypatch.delenv("RERANKER_CONFIG", raising=False)
    for key, value in env_of(service("reranker")).items():
        monkeypatch.setenv(key, value)
    app = factory(*args, **kwargs)
    assert callable(app), f"{target} returned {app!r}, not a WSGI callable"


def build_inputs() -> set[str]:
    """Top-level repository paths `pip install .` needs: readme, packages, data files."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    needed = {"pyproject.toml"}
    readme = pyproject["project"].get("readme")
    if isinstance(readme, str):
        needed.add(readme)
    for pattern in pyproject.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("include", []):
        needed |= {p.name for p in REPO.glob(pattern.split(".")[0]) if (p / "__init__.py").is_file()}
    for globs in pyproject.get("tool", {}).get("setuptools", {}).get("data-files", {}).values():
        needed |= {PurePosixPath(g).parts[0] for g in globs}
    return needed


def test_image_gets_what_pip_install_needs_before_installing() -> None:
    instructions = dockerfile_instructions()
    pip_install_dot = re.compile(r"pip install [^&;]*(?<![\w/-])\.(\s|$)")
    install = [i for i, (kw, rest) in enumerate(instructions) if kw == "RUN" and pip_install_dot.search(rest)]
    assert install, "no `pip install .` in the Dockerfile"
    copied_before: set[str] = set()
    for keyword, rest in instructions[: install[-1]]:
        if keyword in ("COPY", "ADD"):
            *sources, _ = [t for t in exec_or_shell(rest) if not t.startswith("--")]
            copied_before |= {PurePosixPath(s.rstrip("/")).parts[0] for s in sources}
    missing = sorted(build_inputs() - copied_before)
    assert not missing, f"`pip install .` runs before the Dockerfile copies {missing} (pyproject.toml needs them)"


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    copied = sorted({str(path.relative_to(REPO)) for path in dockerfile_copies().values()})
    dropped = [path for path in sorted(set(copied) | build_inputs()) if dockerignored(path)]
    assert not dropped, f".dockerignore excludes {dropped}, which the Dockerfile copies"
    assert not dockerignored("reranker/sample/corpus.jsonl"), "the indexer needs the sample corpus in the image"
    leaked = [path for path in (".venv", ".git", ".reranker-data", "tests") if not dockerignored(path)]
    assert not leaked, f".dockerignore lets {leaked} into the build context"



# ---------------------------------------------------------------------------------------------
# compose.security.yaml: the stack with the security plugin on and least-privilege users.
# Docker does not run here: the files are parsed, merged as compose merges them, and checked
# against the code; setup_users.py is run against a recording HTTP server.


def _merged(base: Any, over: Any) -> Any:
    """compose's merge of an override file: mappings key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{key: _merged(base.get(key), value) for key, value in over.items()}}
    return over


PASSWORD = "Strong-Pass-1!"


def secure_stack() -> dict[str, Any]:
    """compose.yaml with compose.security.yaml over it, ${VAR:?...} filled with a password."""
    over = yaml.safe_load(SECURE_FILE.read_text(encoding="utf-8"))
    assert isinstance(over, dict) and isinstance(over.get("services"), dict), f"{SECURE_FILE}: no services mapping"
    text = yaml.safe_dump(_merged(load_compose(), over))
    return dict(yaml.safe_load(re.sub(r"\$\{(\w+):\?[^}]*\}", lambda m: f"{m.group(1)}={PASSWORD}", text)))


def setup_users() -> Any:
    return load_script(SECURITY_DIR / "setup_users.py")


def _variable(value: str) -> str:
    """The variable a filled-in `${VAR:?...}` came from."""
    assert value.endswith(f"={PASSWORD}"), f"{value!r} is not taken from the environment"
    return value.split("=")[0]


def test_the_secure_stack_turns_the_security_plugin_on_with_an_admin_password() -> None:
    services = secure_stack()["services"]
    env = env_of(services["opensearch"])
    assert env["DISABLE_SECURITY_PLUGIN"] == "false" and env["DISABLE_INSTALL_DEMO_CONFIG"] == "false"
    assert _variable(env["OPENSEARCH_INITIAL_ADMIN_PASSWORD"]) == "OPENSEARCH_INITIAL_ADMIN_PASSWORD"
    command = healthcheck_command(services["opensearch"])
    assert urlsplit(urls_in(command)[0]).scheme == "https" and '-u "admin:$$OPENSEARCH_INITIAL_ADMIN_PASSWORD"' in command
    assert yaml.safe_load(SECURE_FILE.read_text(encoding="utf-8")).get("name") in (None, load_compose()["name"])


@pytest.mark.parametrize(("name", "user"), [("reranker", "reranker-service"), ("indexer", "reranker-indexer")])
def test_in_the_secure_stack_the_reranker_connects_as_its_own_user(name: str, user: str) -> None:
    services = secure_stack()["services"]
    env = env_of(services[name])
    assert env["OPENSEARCH_USERNAME"] == user and user in setup_users().USERS, f"{name} connects as {env['OPENSEARCH_USERNAME']!r}"
    assert urlsplit(env["OPENSEARCH_URL"]).scheme == "https"
    jobs = env_of(services["cluster-users"])
    # The password the app sends is the one cluster-users gave that user.
    assert _variable(env["OPENSEARCH_PASSWORD"]) == setup_users().PASSWORD_VARIABLES[user]
    assert _variable(jobs[setup_users().PASSWORD_VARIABLES[user]]) == setup_users().PASSWORD_VARIABLES[user]
    assert jobs["RERANKER_INDEX"] == env["RERANKER_INDEX"], "the roles are made for another alias than the app uses"
    assert depends_on(services[name]).get("cluster-users") == "service_completed_successfully"
    unknown = sorted(set(env) - set(ENVIRONMENT))
    assert not unknown, f"{name}: environment sets {unknown}, which reranker.config.ENVIRONMENT does not list"
    Settings.from_env(env)


def test_cluster_users_runs_the_setup_script_as_a_one_shot_job_after_the_cluster() -> None:
    job = secure_stack()["services"]["cluster-users"]
    assert depends_on(job).get("opensearch") == "service_healthy" and str(job.get("restart")) == "no"
    mounts = volume_mounts(job)
    assert mounts, "cluster-users mounts nothing"
    for target, source in mounts.items():
        assert (DOCKER / source).resolve() == SECURITY_DIR, f"cluster-users mounts {source}, not docker/opensearch-security"
        argv = job_commands(job)[0]
        assert argv[0] == "python" and PurePosixPath(argv[1]).parent == PurePosixPath(target)
        assert (SECURITY_DIR / PurePosixPath(argv[1]).name).is_file(), f"{argv[1]} is not in docker/opensearch-security"
    assert (DOCKER / job["build"]["context"]).resolve() == REPO and job["build"]["dockerfile"] == "docker/Dockerfile"
    env = env_of(job)
    assert urlsplit(env["OPENSEARCH_URL"]).hostname == "opensearch" and urlsplit(env["OPENSEARCH_URL"]).scheme == "https"


def test_the_service_role_reads_only_the_indices_the_proxy_forwards() -> None:
    """The service's role: read (no write, no index administration) on exactly the indices
    the proxy forwards by default (RERANKER_PROXY_INDICES: the alias and its versions), and
    its own experiment indices; the indexer's: its indices only, all of them."""
    from reranker.service.search_requests import allowed_patterns
    from reranker.store.events import MAPPINGS

    alias = "papers"
    roles = setup_users().roles(alias)
    service, indexer = roles["reranker_service"], roles["reranker_indexer"]
    data = [p for p in service["index_permissions"] if f"{alias}-v*" in p["index_patterns"]]
    assert len(data) == 1 and tuple(data[0]["index_patterns"]) == allowed_patterns(Settings.from_env({"RERANKER_INDEX": alias, "HOME": "/nonexistent"}))
    writes = {"crud", "write", "manage", "index", "delete", "indices_all", "unlimited", "data_access", "create_index"}
    assert not writes & set(data[0]["allowed_actions"]) and not any(a.startswith(("indices:data/write", "indices:admin/create")) or a == "*" for a in data[0]["allowed_actions"])
    events = {f"{alias}-{kind}" for kind in MAPPINGS}
    every = {pattern for p in service["index_permissions"] for pattern in p["index_patterns"]}
    assert every == {alias, f"{alias}-v*"} | events, f"the service's role reaches {sorted(every)}"
    assert all(not a.startswith("cluster:admin") and a not in ("cluster_all", "cluster_composite_ops") for a in service["cluster_permissions"])
    # ... and the claim a run holds while it writes (reranker/store/opensearch_claim.py).
    assert {pattern for p in indexer["index_permissions"] for pattern in p["index_patterns"]} == {alias, f"{alias}-v*", f"{alias}.claim"} | events
    with pytest.raises(ValueError):
        setup_users().roles("reranker*")  # an alias that is a pattern would widen every role


def test_setup_users_sends_roles_users_and_mappings_to_the_security_api(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[tuple[str, str, Any, str | None]] = []
    refuse: list[int] = []

    class Security(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_PUT(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.command, self.path, body, self.headers.get("Authorization")))
            status = refuse.pop(0) if refuse else 200
            data = json.dumps({"status": "OK" if status == 200 else "BAD_REQUEST", "message": "x"}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Security)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    module = setup_users()
    env = {
        "OPENSEARCH_URL": f"http://127.0.0.1:{server.server_address[1]}", "OPENSEARCH_INITIAL_ADMIN_PASSWORD": "Admin-Pass-1!",
        "RERANKER_INDEX": "papers", "SERVICE_USER_PASSWORD": "Service-Pass-1!", "INDEXER_USER_PASSWORD": "Indexer-Pass-1!",
    }  # fmt: skip
    try:
        assert module.main(env) == 0
        paths = [path for _, path, _, _ in received]
        api = "/_plugins/_security/api/"
        assert paths == [api + p for p in ("roles/reranker_service", "roles/reranker_indexer", "internalusers/reranker-service",
                                           "internalusers/reranker-indexer", "rolesmapping/reranker_service", "rolesmapping/reranker_indexer")]
        assert {auth for *_, auth in received} == {"Basic " + base64.b64encode(b"admin:Admin-Pass-1!").decode()}
        bodies = {path.removeprefix(api): body for _, path, body, _ in received}
        assert bodies["roles/reranker_service"] == module.roles("papers")["reranker_service"]
        assert bodies["internalusers/reranker-service"]["password"] == "Service-Pass-1!"
        assert bodies["rolesmapping/reranker_indexer"] == {"users": ["reranker-indexer"]}
        refuse.append(400)  # a weak password, say: said at once, no retrying
        assert module.main(env) == 1
        assert module.main({key: value for key, value in env.items() if key != "SERVICE_USER_PASSWORD"}) == 2
    finally:
        server.shutdown()
        server.server_close()
