"""The README and the manual under docs/ say only what works.

Every command in a ```sh block of README.md and of the manual's pages (docs/*.md, not the
generated reports) is run as written, in order, as a reader's shell would run it: from a
working directory that holds the repository's sample (`reranker/sample/`) and what the examples
call `corpus.jsonl`, `abstract.txt` and `path/to/dataset`, against a fresh data dir per page.
`reranker ...` runs in-process (conftest's `run`), `curl` runs for real against the app that
the block's `reranker serve` stands for, served by werkzeug in a thread. A command that cannot
run here is in SKIP with the reason; any other command must run, exit 0 and print what
EXPECTED says it prints, so a new command in the docs fails here until it runs or is listed.

The links of README.md, every page under docs/ and the READMEs of bench/ and docker/ are checked too: each relative link names a
file or folder that exists, and each #fragment a heading of the page it points at. So are
the names the pages use, where nothing runs them: every RERANKER_* / OPENSEARCH_* variable,
every option given to a `reranker` command or a bench script, every route of GET /openapi.json (in
http-api.md's Routes table, and no route there that the service lacks; the document against
the app's url_map), and proxy.md's allow-list table against the sets the proxy walks. cli.md's
table of every command and option is checked against the parser both ways, and the settings
tables' defaults (in figures or in words) and ranges against the code.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SAMPLE, run

README = REPO / "README.md"
DOCS = REPO / "docs"
# Written by the bench scripts as records of their runs (on ../shared, minutes each): their
# commands are what was run, not instructions, and the scripts rewrite them.
REPORTS = {DOCS / "rankers.md", DOCS / "evaluation.md"}
MANUAL = [README, *sorted(page for page in DOCS.glob("*.md") if page not in REPORTS)]

# Commands that cannot run here, by pattern (matched against the command's words joined by
# spaces), with the reason.
SKIP: dict[str, str] = {
    r"^python3 -m venv \.venv$": "creates the virtual environment: .ci/run runs the quickstart line verbatim on a fresh clone (checked below)",
    r"^\. \.venv/bin/activate$": "activates the virtual environment: part of .ci/run's quickstart line (checked below)",
    r"^pip install -e \.$": "installs the project: part of .ci/run's quickstart line (checked below)",
    r"^pip install -e \.\[test\]$": "installs the test extra: part of .ci/run's test line (checked below)",
    r"^python -m pytest$": "the whole suite, this file included: .ci/run runs it verbatim (checked below)",
    r"^reranker serve\b": "serves until stopped: the same app (create_app with the same settings) is served in a thread instead, and the block's curl commands go to it",
    r"^reranker dev-cluster\b": "serves until stopped: an osmem-server clone (the server dev-cluster runs) stands in, at the block's cluster address",
    r"^docker compose\b": "needs Docker, which these machines do not run (tests/test_docker.py reads the compose file)",
    r"^OPENSEARCH_TEST_URL=": "needs a real OpenSearch cluster (tests/test_cluster.py)",
    r"^st run http://127\.0\.0\.1:8000/openapi\.json\b": "schemathesis against a running service: tests/test_fuzz.py runs the same command against reranker serve",
    r"\.\./shared/data/": "evaluates on a shared data set beside the repository, not in a clone: minutes each (tests/test_cli.py checks BM25's quality there)",
    r"^reranker --vectors w2v\.kv evaluate \.\.\.$": "the evaluation on ../shared above, with corpus-trained vectors; `...` stands for its arguments",
    r"^reranker search \.\.\. --filter year>=2010 --filter venue=ACL$": "the sample corpus has no year or venue field, and a filter on a field no document has is refused whatever the query (tests/test_service.py filters a corpus that has them)",
}

# What each command must print (the first pattern matching the command wins); a curl's JSON
# answer is matched as json.dumps prints it.
EXPECTED: list[tuple[str, str]] = [
    (r"^reranker demo$", r"^  BM25 order +hidden_topics_corrected\+bm25:maxp order"),
    (r"^reranker index\b", r"^indexed \d+, unchanged \d+, skipped 0 in "),
    (r"^reranker compact$", r"^compacted the BM25 index of \d+ documents in \d+ s: \d+ segments? before, 1 now$"),
    (r"^reranker search .*--json\b", r'^  "hits": \[$'),
    (r"^reranker search\b", r"^\S+: \d+ of (the BM25 top 100|the \d+ BM25 candidates? \((the window of 100 held all that matched|no document matched)\)), \d+ query words? in vocabulary"),
    (r"^reranker similar\b", r"^\S+: \d+ papers? like \S+ of the (BM25 top 100|\d+ BM25 candidates? \(the window of 100 held all that matched\)) for its distinctive words"),
    (r"^reranker rankers$", r"^hidden_topics_corrected\+bm25 +scores by topics$"),
    (r"^reranker train doc2vec\b", r"^trained PV-DBOW Doc2Vec .* on 25 documents"),
    (r"^reranker evaluate\b", r"^\| bm25 \| \d\.\d{3} \|"),
    (r"^reranker compare\b", r"^\| bm25 \(baseline\) \| \d\.\d{3} \|"),
    (r"^reranker tune\b", r"^  tuned +\d\.\d{3}$"),
    (r"^reranker templates install$", r"^installed reranker-mappings, reranker-settings, reranker on "),
    (r"^reranker indices list$", r"^\* reranker-v000002 +ready +25 docs"),
    (r"^reranker indices use reranker-v000001$", r"^alias reranker now points at reranker-v000001$"),
    (r"^reranker ab create (\S+)", r"^experiment topics-vs-bm25 running: "),
    (r"^reranker ab report (\S+)$", r"^experiment topics-vs-bm25 \(running\): "),
    (r"^reranker ab set \S+ --status stopped$", r"^experiment topics-vs-bm25 stopped"),
    (r"^reranker ab list$", r"^topics-vs-bm25 +stopped "),
    (r"^reranker ab delete \S+ --delete-events$", r"^deleted experiment topics-vs-bm25 and its \d+ shown quer(y|ies) and \d+ events?$"),
    (r"^curl .*localhost:8000/search\b", r'^\{"status": "ok", .*"hits": \[\{"id": '),
    (r"^curl .*localhost:8000/\w+/_search\b", r'"ext": \{"rerank": \{"ranker": "[^"]+", "status": "ok"'),
    (r"^curl .*localhost:8000/v1/rerank\b", r'"results": \[\{"index": \d+, "relevance_score": '),
]

# The addresses the examples use: the service, and a cluster (dev-cluster's, and one that
# stands for yours), each given a fresh osmem-server clone per block.
SERVICE = "localhost:8000"
CLUSTERS = ("http://127.0.0.1:9200", "https://search.example.org:9200")
SHELL_LANGUAGES = {"bash", "shell", "console", "zsh", "shell-session"}  # write ```sh


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    language: str
    text: str


@dataclass(frozen=True)
class Command:
    where: str  # page:line
    words: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


def fenced_blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = re.match(r"^( *)```(\S*)\s*$", lines[i])
        if opening:
            indent, start, body = len(opening[1]), i, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][indent:])
                i += 1
            found.append(Block(page, start + 1, opening[2], "\n".join(body)))
        i += 1
    return found


def shell_words(text: str) -> list[str]:
    """Words and operators (`&&`, `<`, `|`, `>`...) as sh reads them; comments dropped."""
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def commands(block: Block) -> Iterator[Command]:
    """Each command of a block: lines joined across `\\` and across an open quote."""
    pending: list[str] = []
    first = 0
    for number, line in enumerate(block.text.splitlines(), start=block.line + 1):
        if not pending:
            if not line.strip():
                continue
            first = number
        pending.append(line)
        text = "\n".join(pending)
        if text.endswith("\\"):
            continue
        try:
            words = shell_words(text)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = []
        if words:
            yield Command(f"{block.page.relative_to(REPO)}:{first}", tuple(words))
    assert not pending, f"{block.page.relative_to(REPO)}:{first}: a command that never ends"


def simple_commands(command: Command) -> list[Command]:
    """`a && b` as [a, b]; any other operator is refused (nothing here runs pipes)."""
    parts: list[list[str]] = [[]]
    for word in command.words:
        if word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    return [Command(command.where, tuple(part)) for part in parts]


def skip_reason(command: Command) -> str | None:
    for pattern, reason in SKIP.items():
        if re.search(pattern, command.text):
            return reason
    return None


def expected_output(command: Command) -> str:
    for pattern, output in EXPECTED:
        if re.search(pattern, command.text):
            return output
    raise AssertionError(f"{command.where}: `{command.text}` runs, but EXPECTED does not say what it must print: add it")


def shell_commands(pages: list[Path]) -> list[Command]:
    return [
        simple
        for page in pages
        for block in fenced_blocks(page)
        if block.language == "sh"
        for command in commands(block)
        for simple in simple_commands(command)
    ]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working directory: the repository's sample where the examples look for it, and
    the files the examples name."""
    directory = tmp_path_factory.mktemp("workspace")
    (directory / "reranker").mkdir()
    (directory / "reranker" / "sample").symlink_to(SAMPLE, target_is_directory=True)
    (directory / "corpus.jsonl").write_bytes((SAMPLE / "corpus.jsonl").read_bytes())
    first_query = json.loads((SAMPLE / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])
    (directory / "abstract.txt").write_text(first_query["text"], encoding="utf-8")
    (directory / "path" / "to").mkdir(parents=True)
    (directory / "path" / "to" / "dataset").symlink_to(SAMPLE, target_is_directory=True)
    return directory


class Shell:
    """One page's commands, block by block: `export`s and the served app last for their
    block, the data dir and working directory for the page."""

    def __init__(self, data_dir: Path, request: pytest.FixtureRequest) -> None:
        self.data_dir, self.request = data_dir, request
        self.ran: list[str] = []

    def run_block(self, block: Block) -> None:
        exported: dict[str, str] = {}
        clusters: dict[str, Any] = {}
        served: list[Any] = []  # (server, app) of the block's `reranker serve`
        try:
            for command in commands(block):
                for simple in simple_commands(command):
                    self.run_command(simple, exported, clusters, served)
        finally:
            for server, app in served:
                server.shutdown()
                app.extensions["reranker"].close()
            for clone in clusters.values():
                clone.close()

    def run_command(self, command: Command, exported: dict[str, str], clusters: dict[str, Any], served: list[Any]) -> None:
        words = [self._address(word, clusters) for word in command.words]
        if words[0] == "export":
            exported.update(dict(word.split("=", 1) for word in words[1:]))
            return
        prefix: dict[str, str] = {}  # NAME=value before the command: its environment only
        while len(words) > 1 and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            name, value = words.pop(0).split("=", 1)
            prefix[name] = value
        bare = Command(command.where, command.words[len(prefix):])
        if bare.text.startswith("reranker serve"):
            served.append(self._serve({**exported, **prefix}))
            self.ran.append(command.text)
            return
        if skip_reason(command) is not None or skip_reason(bare) is not None:
            return
        operators = [word for word in words if word in {"|", "||", ";", "&", ">", ">>", "<<", "(", ")"}]
        assert not operators, f"{command.where}: `{command.text}` uses {operators}: the shell would not run it as the docs mean (quote it?)"
        if words[0] == "reranker":
            code, out = self._reranker(words[1:], {**exported, **prefix})
        elif words[0] == "curl":
            code, out = self._curl(words, served)
        else:
            raise AssertionError(f"{command.where}: `{command.text}` is neither runnable here nor in SKIP (with its reason)")
        assert code == 0, f"{command.where}: `{command.text}` exited {code}:\n{out}"
        pattern = expected_output(bare)
        assert re.search(pattern, out, re.MULTILINE), f"{command.where}: `{command.text}` did not print /{pattern}/:\n{out[:3000]}"
        self.ran.append(command.text)

    def _address(self, word: str, clusters: dict[str, Any]) -> str:
        for address in CLUSTERS:
            if address in word:
                if address not in clusters:
                    clusters[address] = self.request.getfixturevalue("osmem_server").clone()
                word = word.replace(address, clusters[address].url)
        return word

    def _reranker(self, argv: list[str], env: dict[str, str]) -> tuple[int, str]:
        stdin = None
        if "<" in argv:
            at = argv.index("<")
            stdin, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
        with pytest.MonkeyPatch.context() as patch, ExitStack() as files:
            for name, value in env.items():
                patch.setenv(name, value)
            if stdin is not None:
                patch.setattr(sys, "stdin", files.enter_context(stdin.open(encoding="utf-8")))
            try:
                return run(self.data_dir, *argv)
            except SystemExit as exit_:  # argparse refusing the command line
                return int(exit_.code or 0), ""

    def _serve(self, env: dict[str, str]) -> tuple[Any, Any]:
        from werkzeug.serving import make_server

        from reranker.config import Settings
        from reranker.service import create_app

        app = create_app(Settings.from_env({**os.environ, **env, "RERANKER_DATA_DIR": str(self.data_dir)}))
        server = make_server("127.0.0.1", 0, app, threaded=True)
        # The block's end waits for the serving loop's next poll (every half second by default).
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return server, app

    def _curl(self, words: list[str], served: list[Any]) -> tuple[int, str]:
        assert served, f"`{' '.join(words)}`: no `reranker serve` before it in its block"
        port = served[-1][0].server_port
        argv = [word.replace(SERVICE, f"127.0.0.1:{port}") for word in words]
        done = subprocess.run([*argv, "--write-out", "\n%{http_code}"], check=False, capture_output=True, text=True, timeout=60)
        body, _, status = done.stdout.rpartition("\n")
        if done.returncode != 0 or status != "200":
            return done.returncode or int(status or 1), f"HTTP {status}\n{body}\n{done.stderr}"
        return 0, json.dumps(json.loads(body))


@pytest.mark.parametrize("page", MANUAL, ids=[str(page.relative_to(REPO)) for page in MANUAL])
def test_every_command_runs_as_written(page: Path, data_dir: Path, workspace: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)
    shell = Shell(data_dir, request)
    for block in fenced_blocks(page):
        if block.language == "sh":
            shell.run_block(block)
    if page == README:  # the front door shows every way in, and all of them run
        assert any(text.startswith("reranker demo") for text in shell.ran)
        assert sum(text.startswith("curl") for text in shell.ran) == 3


def test_the_readmes_experiment_walkthrough_runs_twice(data_dir: Path, workspace: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """It ends by deleting what it made, so a reader can run it again as written."""
    monkeypatch.chdir(workspace)
    block = next(block for block in fenced_blocks(README) if "reranker ab create" in block.text)
    shell = Shell(data_dir, request)
    shell.run_block(block)
    shell.run_block(block)
    assert [text.split()[2] for text in shell.ran if text.startswith("reranker ab")] == ["create", "report", "set", "delete"] * 2


QUICKSTART = [
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && reranker demo",  # the product alone runs the demo
    'pip install -e ".[test]" && python -m pytest',
]
# Lines of .ci/run that only set the script up; every other line is a step the README names.
CI_PLUMBING = [r"^set -euo pipefail$", r"^cd ", r"^if ! command -v chromium\b", r"^fi$", r'^sudo=""', r"^trap "]


def printed_examples(pages: list[Path]) -> list[tuple[Block, list[str], list[str]]]:
    """The ```text blocks that show what a search of the sample corpus prints: the first line
    is the command (`$ reranker search ...` or `$ reranker similar ...`), the rest its output,
    where a line ending in `...` is shortened. (Other shown outputs come from runs that cannot
    be repeated here, such as experiments.md's simulated users.)"""
    found = []
    for page in pages:
        for block in fenced_blocks(page):
            first, *shown = block.text.splitlines()
            if block.language == "text" and first.startswith(("$ reranker search ", "$ reranker similar ")):
                found.append((block, shell_words(first[2:])[1:], shown))
    return found


def test_a_printed_example_is_what_its_command_prints(data_dir: Path) -> None:
    # The example of `search --explain` in cli.md once showed an earlier default ranker's
    # output, numbers and all: nothing ran it.
    examples = printed_examples(MANUAL)
    assert examples, "cli.md shows what `reranker search --explain` prints"
    code, out = run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    assert code == 0, out
    for block, argv, shown in examples:
        code, out = run(data_dir, *argv)
        printed = [line.rstrip() for line in out.splitlines()]
        where = f"{block.page.name}:{block.line}"
        assert code == 0 and len(printed) == len(shown), f"{where}: `reranker {' '.join(argv)}` printed:\n{out}"
        for line, expected in zip(printed, shown):
            if expected.endswith("..."):
                assert line.startswith(expected[:-3]), f"{where}: printed {line!r}, the page shows {expected!r}"
            else:
                assert line == expected.rstrip(), f"{where}: printed {line!r}, the page shows {expected!r}"


def shown_explanation() -> dict[str, Any]:
    """The ```json block of http-api.md that shows an `explanation`: the default ranker's
    top hit for the sample query it names."""
    page = DOCS / "http-api.md"
    found = [block for block in fenced_blocks(page) if block.language == "json" and '"topic_ranker"' in block.text]
    assert len(found) == 1, "http-api.md shows one explanation"
    shown: dict[str, Any] = json.loads(found[0].text)
    return shown


def test_the_shown_explanation_is_what_search_answers(data_dir: Path) -> None:
    # The example once showed the previous default's explanation (parts topics and bm25,
    # no passages) after the default had changed: nothing compared it.
    from reranker.config import Settings
    from reranker.service import create_app

    shown = shown_explanation()
    code, out = run(data_dir, "index", str(SAMPLE / "corpus.jsonl"), "--no-progress")
    assert code == 0, out
    app = create_app(Settings.from_env({**os.environ, "RERANKER_DATA_DIR": str(data_dir)}))
    try:
        query = "a maximum entropy named entity recognizer using global features"
        answer = app.test_client().post("/search", json={"query": query, "size": 1, "explain": True}).get_json()
    finally:
        app.extensions["reranker"].close()
    actual = answer["hits"][0]["explanation"]

    def close(shown_value: float, actual_value: float) -> bool:  # the page rounds some figures
        return abs(shown_value - actual_value) <= 1e-3 * abs(actual_value) + 1e-9

    assert set(shown) == set(actual)
    assert shown["topic_ranker"] == actual["topic_ranker"]
    assert close(shown["score"], actual["score"]) and close(shown["topic_score"], actual["topic_score"])
    assert shown["parts"].keys() == actual["parts"].keys(), f"the page shows parts {list(shown['parts'])}, /search answers {list(actual['parts'])}"
    assert all(close(value, actual["parts"][name]) for name, value in shown["parts"].items())
    assert shown["rest"]["topics"] == actual["rest"]["topics"] and close(shown["rest"]["contribution"], actual["rest"]["contribution"])
    assert shown["topics"], "the page shows some topics"
    for shown_topic, topic in zip(shown["topics"], actual["topics"]):  # the first ones, in order
        assert set(shown_topic) == set(topic)
        for key, value in shown_topic.items():
            assert close(value, topic[key]) if isinstance(value, float) else value == topic[key], f"topic {topic['topic']}: {key}"


# The pages whose tables document the settings, and the heading of each table's section.
SETTINGS_TABLES = {"cli.md": "Global options", "opensearch.md": "Settings", "operations.md": "Service settings"}


def settings_rows() -> dict[str, list[tuple[str, str]]]:
    """Each variable a settings table documents: [(page, its default cell)], one a table
    (OPENSEARCH_URL is a global option and the OpenSearch store's first setting)."""
    return {variable: [(page, default) for page, default, _ in rows] for variable, rows in settings_cells().items()}


def test_every_setting_is_in_a_settings_table_with_the_codes_default() -> None:
    """cli.md, opensearch.md and operations.md list every variable of ENVIRONMENT, with its
    default; operations.md names them all. A default shown as one value (a number, or one
    `word`) is the one `reranker config` prints in an empty environment."""
    from reranker.config import ENVIRONMENT, Settings

    rows = settings_rows()
    assert sorted(set(ENVIRONMENT) - set(rows)) == [], "variables no settings table documents"
    assert sorted(set(rows) - set(ENVIRONMENT)) == [], "variables in a settings table that the code does not read"
    operations = (DOCS / "operations.md").read_text(encoding="utf-8")
    assert [name for name in ENVIRONMENT if f"`{name}`" not in operations] == [], "operations.md's list of settings misses these"
    effective = Settings.from_env({"HOME": "/nonexistent"}).effective()
    checked = 0
    for variable, page, default in ((variable, *row) for variable, found in rows.items() for row in found):
        value = default.replace(",", "") if re.fullmatch(r"[\d,.]+", default) else default
        if re.fullmatch(r"`[^`]+`", value):
            value = value.strip("`")
        elif not re.fullmatch(r"[\d.]+", value):
            continue  # said in words: "CPU count", "unset", "the index's own" ...
        shown_number = re.fullmatch(r"[\d.]+", value) and re.fullmatch(r"[\d.]+", effective[variable])
        same = float(value) == float(effective[variable]) if shown_number else value == effective[variable]
        assert same, f"{page}: {variable}'s default is shown as {default}; the code's is {effective[variable]}"
        checked += 1
    assert checked >= 30, "the tables show most defaults as values"


def settings_cells() -> dict[str, list[tuple[str, str, str]]]:
    """Each variable a settings table documents: [(page, its default cell, its meaning cell)]."""
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for name, heading in SETTINGS_TABLES.items():
        text = (DOCS / name).read_text(encoding="utf-8")
        section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
        assert section, f"{name} has no section {heading!r}"
        table = [line for line in section[1].splitlines() if line.startswith("|")]
        header = [cell.strip() for cell in table[0].strip("|").split("|")]
        for line in table[2:]:
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for variable in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[header.index("environment")]):
                rows.setdefault(variable, []).append((name, cells[header.index("default")], cells[header.index("meaning")]))
    return rows


CPUS = 16  # os.cpu_count() while defaults said in words are checked: more than the 4 RERANKER_INDEX_WORKERS stops at


def said_default_is(shown: str, variable: str, monkeypatch: pytest.MonkeyPatch) -> bool | None:
    """Whether a default as a page or a help text says it (`10`, `CPU count`, `unset`,
    `$XDG_DATA_HOME/reranker`, else `~/.local/share/reranker` ...) is the value `reranker
    config` prints for `variable` in an empty environment; None for a phrase this does not
    read (the caller lists those)."""
    from reranker.config import Settings, config_file_path

    monkeypatch.setattr(os, "cpu_count", lambda: CPUS)
    home = "/home/someone"
    actual = Settings.from_env({"HOME": home}).effective()[variable]
    said = shown.replace("`", "").strip()
    if re.fullmatch(r"\d{1,3}(,\d{3})+", said):
        said = said.replace(",", "")
    if re.fullmatch(r"-?[\d.]+(e-?\d+)?", said):
        return re.fullmatch(r"-?[\d.]+(e-?\d+)?", actual) is not None and float(said) == float(actual)
    if said in ("CPU count", "CPU count, at most 4"):
        return actual == {"CPU count": str(CPUS), "CPU count, at most 4": "4"}[said]
    if said in ("unset", "none"):
        if variable == "RERANKER_CONFIG":  # `reranker config` names the file in force above its table
            return config_file_path(None, {"HOME": home}) is None
        if variable == "RERANKER_API_KEYS_FILE":  # `reranker config` counts its keys in RERANKER_API_KEYS
            actual = Settings.from_env({"HOME": home}).effective()["RERANKER_API_KEYS"]
        return actual.startswith(("(unset", "(none)"))
    xdg = re.fullmatch(r"\$(XDG_[A-Z_]+)/reranker, else ~/(\S+)", said)
    if xdg:  # both halves: with the XDG variable set, and without it
        given = Settings.from_env({"HOME": home, xdg[1]: "/xdg"}).effective()[variable]
        return given == "/xdg/reranker" and actual == f"{home}/{xdg[2]}"
    if said == "RERANKER_INDEX and its versions":
        return actual == "reranker,reranker-v*"
    if re.fullmatch(r"[\w.:@+-]+(,[\w.:@+-]+)*", said):  # one word or value: true, reranker, title,abstract,body ...
        return said == actual
    return None


# Defaults the pages say in words that said_default_is does not read, each with how it is known
# to be true; a new phrase fails until it is checked and listed here.
DEFAULTS_IN_WORDS = {
    ("RERANKER_VECTORS", "the index's own; `glove-6b-50d` for a new index"): "Settings.vectors is None: tests/test_embeddings.py",
    ("RERANKER_VECTORS", "the index's own, glove-6b-50d for a new one"): "the same, in ENVIRONMENT's words",
    ("RERANKER_STOPWORDS", "built-in list"): "Settings.stopwords_file is None: reranker/text.py's list",
    ("OPENSEARCH_CA_CERTS", "`SSL_CERT_FILE`, else certifi's bundle"): "test_the_ca_bundle_without_opensearch_ca_certs_is_certifis",
}


def test_every_default_said_in_words_is_the_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings tables' defaults that are not one value (`CPU count`, `unset`, the XDG
    folders), the "(default ...)" of each ENVIRONMENT entry (what `reranker config` and the
    config file's errors show) and of each command-line option that stands for a setting
    (`--window`: "default 100, env RERANKER_WINDOW") are the code's. The tables said the
    default of OPENSEARCH_CA_CERTS was the system's CAs; it is certifi's bundle."""
    from reranker.cli import build_parser
    from reranker.config import ENVIRONMENT

    said: list[tuple[str, str, str]] = []  # (where, variable, the default as said)
    for variable, rows in settings_cells().items():
        said += [(page, variable, default) for page, default, _ in rows]
    for variable, meaning in ENVIRONMENT.items():
        for found in re.finditer(r"\(default:? ([^;)]+?)(?=;|\)|: )", meaning):
            said.append(("config.ENVIRONMENT", variable, found[1]))
    for path, parser in parsers(build_parser()).items():
        for action in parser._actions:
            for found in re.finditer(r"\(default:? ([^;)]+?)[,;] env ((?:RERANKER|OPENSEARCH)_[A-Z_]+)\)", action.help or ""):
                said.append((f"reranker {' '.join(path)} {action.option_strings[0]}", found[2], found[1]))
            for found in re.finditer(r"\(default ((?:RERANKER|OPENSEARCH)_[A-Z_]+), ([^;)]+)\)", action.help or ""):
                said.append((f"reranker {' '.join(path)} {action.option_strings[0]}", found[1], found[2]))
    wrong, unread = [], []
    for where, variable, default in said:
        same = said_default_is(default, variable, monkeypatch)
        if same is None and (variable, default) not in DEFAULTS_IN_WORDS:
            unread.append(f"{where}: {variable} {default!r}")
        elif same is False:
            wrong.append(f"{where}: {variable}'s default is said to be {default!r}")
    assert wrong == [], "defaults that are not the code's"
    assert unread == [], "defaults said in words nothing checks: check them and list them in DEFAULTS_IN_WORDS"
    assert len(said) >= 100 and sum(where.startswith("reranker ") for where, _, _ in said) >= 20


def test_the_ca_bundle_without_opensearch_ca_certs_is_certifis(monkeypatch: pytest.MonkeyPatch) -> None:
    """What opensearch.md says the cluster's certificate is verified against when
    OPENSEARCH_CA_CERTS is unset (make_client then passes no ca_certs)."""
    import certifi
    from opensearchpy import Urllib3HttpConnection

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert Urllib3HttpConnection.default_ca_certs() == certifi.where()
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/mine.pem")
    assert Urllib3HttpConnection.default_ca_certs() == "/etc/ssl/mine.pem"


def accepted(variable: str, value: str) -> bool:
    from reranker.config import Settings
    from reranker.errors import ConfigError

    # RERANKER_WINDOW must not exceed RERANKER_MAX_WINDOW: each is probed with the other out of the way.
    env = {"HOME": "/nonexistent", "RERANKER_WINDOW": "1", "RERANKER_MAX_WINDOW": str(10**13), variable: value}
    try:
        Settings.from_env(env)
    except ConfigError:
        return False
    return True


def test_every_numeric_settings_range_is_the_codes() -> None:
    """A settings table's "at least N" or "N to M" is the range the code accepts (N accepted,
    just below it refused; the same at M), and a setting whose range is not the counting
    numbers from 1 says its range: RERANKER_BULK_BYTES refused 9,999 and
    RERANKER_MAX_BODY_BYTES 1,023, and OPENSEARCH_RETRIES took 0, where no page said so."""
    from reranker.config import ENVIRONMENT, Settings

    effective = Settings.from_env({"HOME": "/nonexistent"}).effective()
    numeric = [name for name in ENVIRONMENT if re.fullmatch(r"[\d.]+", effective[name])]
    assert len(numeric) >= 25
    cells = settings_cells()
    wrong, unsaid = [], []
    for variable in numeric:
        meanings = " ".join(meaning for _, _, meaning in cells[variable])
        number = r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
        low = re.search(rf"\bat least {number}", meanings)
        span = re.search(rf"(?<![\w.,]){number} to {number}\b", meanings)
        low_said = (low or span)[1].replace(",", "") if (low or span) else None
        high_said = span[2].replace(",", "") if span else None
        if low_said is not None:
            below = str(float(low_said) / 2) if "." in low_said else str(int(low_said) - 1)
            if not (accepted(variable, low_said) and not accepted(variable, below)):
                wrong.append(f"{variable}: said to start at {low_said}")
        elif accepted(variable, "0") or not accepted(variable, "1"):
            unsaid.append(f"{variable}: its smallest value is not 1 (say 'at least N')")
        if high_said is not None:
            above = str(int(high_said) + 1) if "." not in high_said else str(float(high_said) + 0.001)
            if not (accepted(variable, high_said) and not accepted(variable, above)):
                wrong.append(f"{variable}: said to end at {high_said}")
        elif not accepted(variable, str(10**12)):
            unsaid.append(f"{variable}: has a largest value (say 'N to M')")
    assert wrong == [], "ranges the tables give that the code does not take"
    assert unsaid == [], "ranges the tables do not give"


def test_the_layout_names_every_module() -> None:
    """docs/layout.md is where a newcomer looks for a concept: a module it does not name
    (tuning.py and query_dsl.py were missing) is one they will not find."""
    text = (DOCS / "layout.md").read_text(encoding="utf-8")
    package = REPO / "reranker"
    missing = [
        str(path.relative_to(REPO))
        for path in sorted(package.rglob("*.py"))
        if path.stem not in {"__init__", "__main__"} and not re.search(rf"(?<![\w.]){re.escape(path.stem)}(\.py)?(?!\w)", text)
    ]
    missing += [f"{folder.relative_to(REPO)}/" for folder in sorted(package.iterdir()) if folder.is_dir() and not folder.name.startswith("__") and f"{folder.name}/" not in text]
    assert missing == [], "docs/layout.md does not name these"


def imports(path: Path, module: str) -> list[str]:
    """"file:line" of every statement in `path` that imports `module` or a name in it. Every
    import statement counts, one inside a function or under TYPE_CHECKING too: pipeline.py's
    were inside functions, which hid them from a check of what importing it loads."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        if any(name == module or name.startswith(f"{module}.") for name in names):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_only_the_command_line_imports_the_write_path() -> None:
    """The data flows one way (docs/layout.md): the read path gets a text's topics from
    extraction.py, never from indexing.py (corpus reading, worker processes, Doc2Vec)."""
    importers = [
        found
        for path in sorted((REPO / "reranker").rglob("*.py"))
        if not path.is_relative_to(REPO / "reranker" / "cli") and path.stem != "indexing"
        for found in imports(path, "reranker.indexing")
    ]
    assert importers == []


def test_the_write_path_and_the_modules_below_it_import_no_ranker() -> None:
    """Rankers read what the write path stored, never the other way round: doc2vec.py took
    its "no model" message from the doc2vec ranker (now in errors.py, which both import)."""
    package = REPO / "reranker"
    below = [package / f"{name}.py" for name in ("errors", "types", "config", "text", "embeddings", "topics", "extraction", "indexing", "doc2vec")]
    below += sorted((package / "store").glob("*.py"))
    importers = [found for path in below for found in imports(path, "reranker.rankers")]
    assert importers == []


def test_route_modules_do_not_import_each_other() -> None:
    """What two routes share lives in the service's shared modules (reranking.py, bodies.py,
    schema.py ...): cohere.py took request_documents from api.py. The one exception is GET /,
    whose answer with a cluster is the proxy's own (api.py's root)."""
    service = REPO / "reranker" / "service"
    routes = ("api", "cohere", "experiments", "library", "web", "proxy")
    allowed = {"api": {"proxy"}}
    importers = [
        found
        for importer in routes
        for imported in routes
        if imported != importer and imported not in allowed.get(importer, set())
        for found in imports(service / f"{importer}.py", f"reranker.service.{imported}")
    ]
    assert importers == []


def test_the_quickstart_is_what_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    quickstart = [block.text.strip() for block in fenced_blocks(README) if block.language == "sh"][:2]
    assert quickstart == QUICKSTART
    assert [line for line in ci if line in QUICKSTART] == QUICKSTART, ".ci/run no longer runs the README's two commands, in order"


def test_the_readme_names_every_other_step_of_ci() -> None:
    """What CI does besides the two commands (lint, types, the browser, its variables) is
    said under the second one: a step added to .ci/run and not to the README fails here."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    steps = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    for step in steps:
        if not step or step.startswith("#") or step in QUICKSTART or any(re.search(p, step) for p in CI_PLUMBING):
            continue
        if step.startswith("export "):
            name = step.split()[1].split("=")[0]
            assert f"`{name}" in text, f".ci/run sets {name}; the README's paragraph on CI does not say so"
        elif "apt-get" in step:  # the browser's install, when it is missing
            assert "installs Debian's chromium" in text, f".ci/run: `{step}`"
        else:
            assert f"`{step}`" in text, f".ci/run runs `{step}`; the README's paragraph on CI does not say so"


def test_every_skipped_command_is_still_in_the_docs() -> None:
    texts = [command.text for command in shell_commands(MANUAL)]
    for pattern, reason in SKIP.items():
        assert any(re.search(pattern, text) for text in texts), f"SKIP {pattern!r} ({reason}) matches no command any more: remove it"


def test_shell_blocks_say_sh_and_every_block_names_its_language() -> None:
    for page in MANUAL:
        for block in fenced_blocks(page):
            where = f"{page.relative_to(REPO)}:{block.line}"
            assert block.language, f"{where}: a code block without a language (```sh for commands, ```text, ```json ...)"
            assert block.language not in SHELL_LANGUAGES, f"{where}: write ```sh, the blocks this test runs"


def test_the_readme_is_a_front_door_that_links_every_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, "the README is the front door: move the details to a page under docs/"
    linked = {(README.parent / target).resolve() for target, _ in links(README)}
    for page in sorted(DOCS.glob("*.md")):
        assert page.resolve() in linked, f"README.md does not link {page.relative_to(REPO)}"
    assert "LICENSE" in {target for target, _ in links(README)} and (REPO / "LICENSE").is_file()


# --- links -------------------------------------------------------------------------------


def links(page: Path) -> list[tuple[str, str]]:
    """(path, fragment) of every relative link and image in the page, outside code."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        found.append((path, fragment))
    return found


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.MULTILINE):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_").replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


MARKDOWN = [README, *sorted(DOCS.rglob("*.md")), REPO / "bench" / "README.md", REPO / "docker" / "README.md"]


@pytest.mark.parametrize("page", MARKDOWN, ids=[str(page.relative_to(REPO)) for page in MARKDOWN])
def test_every_relative_link_resolves(page: Path) -> None:
    for path, fragment in links(page):
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.relative_to(REPO)}: the link `{path}` names nothing"
        assert REPO in target.parents or target == REPO, f"{page.relative_to(REPO)}: `{path}` leaves the repository"
        if fragment:
            assert target.suffix == ".md", f"{page.relative_to(REPO)}: `{path}#{fragment}` points into a file that is not Markdown"
            assert fragment in anchors(target), f"{page.relative_to(REPO)}: `{path}#{fragment}`: no such heading in {target.relative_to(REPO)}"


# --- names the pages use: settings, command-line options, routes ---------------------------


def test_every_variable_the_pages_name_is_read_somewhere() -> None:
    """A RERANKER_* or OPENSEARCH_* name in any page is a setting of ENVIRONMENT, or one the
    tests, CI or the Docker files read (OPENSEARCH_TEST_URL, RERANKER_BROWSER_TESTS ...): a
    renamed or removed setting must leave the prose too, not only the settings tables."""
    from reranker.config import ENVIRONMENT

    readers = [*sorted((REPO / "tests").glob("*.py")), REPO / ".ci" / "run", *sorted((REPO / "docker").rglob("*.*"))]
    read = " ".join(path.read_text(encoding="utf-8", errors="replace") for path in readers if path.is_file() and path.suffix != ".md")
    named: dict[str, str] = {}
    for page in MARKDOWN:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for name in re.findall(r"\b((?:RERANKER|OPENSEARCH)_[A-Z0-9_]*[A-Z0-9])\b", line):
                named.setdefault(name, f"{page.relative_to(REPO)}:{number}")
    assert set(ENVIRONMENT) <= set(named), "the pages name every setting (the settings tables do)"
    unknown = [f"{where}: {name}" for name, where in sorted(named.items()) if name not in ENVIRONMENT and not re.search(rf"\b{name}\b", read)]
    assert unknown == [], "names no code, test or deployment file reads"


def subcommands(parser: Any) -> dict[str, Any]:
    found = [action.choices for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(found[0]) if found else {}


def option_strings(parser: Any) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_option_the_pages_give_a_command_is_the_commands() -> None:
    """`reranker COMMAND [ACTION] ... --option`, in a code block or in the prose (where nothing
    runs it), names an option that command's parser has, or a global one."""
    from reranker.cli import build_parser

    root = build_parser()
    commands = subcommands(root)
    checked, wrong = 0, []
    for page in MARKDOWN:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            # Up to the end of the command: a closing backtick, a comment, a table cell.
            for found in re.finditer(r"(?<![\w/.-])reranker ([a-z][a-z-]*)((?: [a-z][a-z0-9-]*)?)([^`#|\n]*)", line):
                if found[1] not in commands:
                    continue
                parser, rest = commands[found[1]], found[2] + found[3]
                actions = subcommands(parser)
                if actions and found[2].strip() in actions:
                    parser, rest = actions[found[2].strip()], found[3]
                known = option_strings(parser) | option_strings(root)
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                    checked += 1
                    if option not in known:
                        wrong.append(f"{page.relative_to(REPO)}:{number}: reranker {found[1]}{found[2]} has no {option}")
    assert checked >= 80, "the pages give commands many options: the pattern finds them"
    assert wrong == []


def parsers(parser: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every parser under `parser` by its command words: () for the global options,
    ("ab", "create") for `reranker ab create`."""
    found = {path: parser}
    for name, child in subcommands(parser).items():
        found.update(parsers(child, (*path, name)))
    return found


def commands_table() -> dict[tuple[str, ...], dict[str, str | None]]:
    """cli.md's table of every command: {command words: {option: its default as shown, or None}}."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    section = re.search(r"^## Every command and option\n(.*?)(?=^## )", text, flags=re.MULTILINE | re.DOTALL)
    assert section, "cli.md has a section 'Every command and option'"
    table: dict[tuple[str, ...], dict[str, str | None]] = {}
    for row in section[1].splitlines():
        if not row.startswith("| `reranker"):
            continue
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        # An option's default follows it in brackets, one value without spaces ("`--size` (10)").
        options = {option: shown or None for option, shown in re.findall(r"`(--?[a-z][a-z0-9-]*)`(?: \(([^)\s]+)\))?", cells[1])}
        for command in re.findall(r"`reranker((?: [a-z][a-z0-9-]*)*)[^`]*`", cells[0]):
            words = tuple(command.split())
            assert words not in table, f"cli.md's table lists `reranker {command}` twice"
            table[words] = options
    return table


def shown_default(value: Any) -> str:
    """An argparse default as the table writes it: 0.1, 0.5,1,2, queries.jsonl."""
    if isinstance(value, (list, tuple)):
        return ",".join(shown_default(item) for item in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_command_table_is_the_parsers() -> None:
    """cli.md's table names every command of `reranker --help` (nested ones too: `ab create`,
    `templates show`) and every option of each, and nothing else; an option with a default of
    its own shows it, as the parser has it. Before the table, `templates show`, `--verbose`,
    `--version` and `serve --timeout` were on no page."""
    from reranker.cli import build_parser

    commands = {path: parser for path, parser in parsers(build_parser()).items() if not subcommands(parser) or path == ()}
    table = commands_table()
    assert sorted(set(commands) - set(table)) == [], "commands cli.md's table does not list"
    assert sorted(set(table) - set(commands)) == [], "commands cli.md's table lists that the parser does not have"
    wrong = []
    for path, parser in commands.items():
        name = " ".join(("reranker", *path))
        options = option_strings(parser) - {"-h", "--help"}
        shown = table[path]
        wrong += [f"{name}: {option} is not in the table" for option in sorted(options - set(shown))]
        wrong += [f"{name}: the table's {option} is not the command's" for option in sorted(set(shown) - options)]
        for action in parser._actions:
            if not action.option_strings or set(action.option_strings) & {"-h", "--help"}:
                continue
            option = action.option_strings[-1]
            default = action.default
            has_own = default not in (None, [], argparse.SUPPRESS) and not isinstance(default, bool)
            if has_own and shown.get(option) != shown_default(default):
                wrong.append(f"{name}: {option}'s default is {shown_default(default)}, the table shows {shown.get(option)}")
            if not has_own and shown.get(option) is not None:
                wrong.append(f"{name}: the table shows {option} ({shown[option]}), which defaults to a setting or nothing")
    assert wrong == []


def test_a_help_text_shows_its_options_default() -> None:
    """"(default N)" in an option's help is the parser's default for it (the defaults that
    are settings are checked with the settings: test_every_default_said_in_words_is_the_codes)."""
    from reranker.cli import build_parser

    checked, wrong = 0, []
    for path, parser in parsers(build_parser()).items():
        for action in parser._actions:
            default = action.default
            if default is None or isinstance(default, (bool, list, tuple)) or not action.option_strings:
                continue
            for found in re.finditer(r"\(default ([^\s;,)]+?)(?=[;,)]|: )", action.help or ""):
                checked += 1
                if found[1] != shown_default(default):
                    wrong.append(f"reranker {' '.join(path)} {action.option_strings[-1]}: help says default {found[1]}, the parser's is {shown_default(default)}")
    assert checked >= 15 and wrong == []


def routes_table() -> list[tuple[str, str]]:
    """(method, path) of every route the first column of http-api.md's Routes table names; a
    path written without a method has the one before it in the cell ("`POST /v1/rerank`,
    `/v2/rerank`"), and `GET\\|POST` stands for both."""
    text = (DOCS / "http-api.md").read_text(encoding="utf-8")
    section = re.search(r"^## Routes\n(.*?)(?=^## )", text, flags=re.MULTILINE | re.DOTALL)
    assert section, "http-api.md has a Routes section"
    named = []
    for row in section[1].splitlines():
        if not row.startswith("| `"):
            continue
        methods = ["GET"]
        for token in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            given = re.match(r"^((?:[A-Z]+\\?\|?)+) ", token)
            if given:
                methods = [method for method in re.split(r"\\?\|", given[1]) if method]
                token = token[given.end() :]
            path = token.split("?")[0]
            named += [(method, path) for method in methods]
    return named


def shape(path: str) -> str:
    """A path with every parameter, `{name}` or `<name>`, as `<>`."""
    return re.sub(r"\{[^}]+\}|<[^>]+>", "<>", path)


def test_the_routes_table_names_every_route_of_the_openapi_document(tmp_path: Path) -> None:
    """http-api.md's table against GET /openapi.json, which is generated from the routes: each
    operation is in the table (the proxy's routes also as their index-less form, as the table
    writes them), and each route the table names is an operation."""
    from reranker.config import Settings
    from reranker.service import create_app

    app = create_app(Settings.from_env({**os.environ, "RERANKER_DATA_DIR": str(tmp_path)}))
    try:
        document = app.test_client().get("/openapi.json").get_json()
    finally:
        app.extensions["reranker"].close()
    operations = {(method.upper(), shape(path)) for path, item in document["paths"].items() for method in item if method in {"get", "head", "post", "put", "patch", "delete"}}
    named = {(method, shape(path)) for method, path in routes_table()}
    assert len(operations) >= 30 and len(named) >= 20
    missing = [
        f"{method} {path}"
        for method, path in sorted(operations)
        if (method, path) not in named and (method, path.removeprefix("/<>")) not in named and (method, f"/<>{path}") not in named
    ]
    assert missing == [], "routes of the OpenAPI document that http-api.md's Routes table does not name"
    unknown = [f"{method} {path}" for method, path in sorted(named) if (method, path) not in operations and (method, f"/<>{path}") not in operations]
    assert unknown == [], "routes http-api.md's Routes table names that the service does not have"


def test_every_route_of_the_app_is_in_the_openapi_document(tmp_path: Path) -> None:
    """The routes table is checked against GET /openapi.json; this checks that document
    against the app's url_map, the routes themselves, so a route left out of it (the
    `@undocumented` mark) would not be left out of the table unseen. The one route it leaves
    out is the proxy's catch-all, which answers any other path: 404 without a cluster, 403
    with one (operations.md's statuses, proxy.md's "Refused with 403")."""
    from reranker.config import Settings
    from reranker.service import create_app

    app = create_app(Settings.from_env({**os.environ, "RERANKER_DATA_DIR": str(tmp_path)}))
    try:
        client = app.test_client()
        document = client.get("/openapi.json").get_json()
        other = client.get("/no/such/route")
        rules = list(app.url_map.iter_rules())
    finally:
        app.extensions["reranker"].close()
    operations = {(method.upper(), shape(path)) for path, item in document["paths"].items() for method in item if method in {"get", "head", "post", "put", "patch", "delete"}}
    # HEAD of a route without GET (HEAD /<index>); Flask adds HEAD to every GET route, which the GET's operation describes.
    routes = {
        (method, shape(rule.rule)) for rule in rules if rule.endpoint != "proxy.refuse"
        for method in rule.methods or () if method != "OPTIONS" and not (method == "HEAD" and "GET" in (rule.methods or ()))
    }  # fmt: skip
    assert sorted(routes - operations) == [], "routes the OpenAPI document leaves out"
    assert sorted(operations - routes) == [], "operations of the OpenAPI document that no route serves"
    assert [rule.rule for rule in rules if rule.endpoint == "proxy.refuse"] == ["/<path:path>"]
    assert other.status_code == 404 and other.get_json()["error"]["type"] == "resource_not_found_exception"
    assert "an unknown route" in (DOCS / "operations.md").read_text(encoding="utf-8")
    assert "- **Refused with 403 `security_exception`, never forwarded:** anything that writes, deletes or administers the cluster, and any other endpoint" in (DOCS / "proxy.md").read_text(encoding="utf-8")


def test_the_proxys_allow_list_table_is_the_codes() -> None:
    """proxy.md's table of what the proxy forwards, against the sets query_dsl.py and
    search_requests.py walk: the body keys, query clauses, `_mget` keys and `_msearch` header
    keys it says are forwarded are exactly the code's, every aggregation it names is one the code allows,
    and the names RERANKER_PROXY_ALLOW takes are config.PROXY_GUARDS."""
    from reranker.config import PROXY_GUARDS
    from reranker.service import query_dsl
    from reranker.service.search_requests import MSEARCH_HEADER_KEYS

    text = (DOCS / "proxy.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 4:
            rows[re.sub(r" \(.*", "", cells[0])] = cells

    def forwarded(part: str) -> set[str]:
        assert part in rows, f"proxy.md's table has no row {part!r}"
        return set(re.findall(r"`([^`]+)`", rows[part][1]))

    # `ext` may hold only the proxy's own block, which the table writes as `ext.rerank`.
    assert forwarded("body keys") == (query_dsl.BODY_KEYS - {"ext"}) | {"ext.rerank"}
    # function_score's functions are named beside it (`weight`, `field_value_factor`, ...).
    clauses = query_dsl.LEAF_CLAUSES | set(query_dsl.COMPOUND_CLAUSES)
    assert forwarded("query clauses") - {"weight", "field_value_factor", "random_score"} == clauses
    assert forwarded("`_msearch` headers") == set(MSEARCH_HEADER_KEYS)
    assert forwarded("`_mget` bodies") == query_dsl.MGET_KEYS | query_dsl.MGET_DOC_KEYS
    named_aggregations = forwarded("aggregations")
    assert len(named_aggregations) >= 20
    assert [name for name in sorted(named_aggregations) if name not in query_dsl.AGGREGATIONS and not (name.startswith("*") and any(a.endswith(name[1:]) for a in query_dsl.AGGREGATIONS))] == []
    allow = re.search(r"`RERANKER_PROXY_ALLOW` takes a comma-separated list of the middle column's names \(([^)]*)\)", text)
    assert allow, "proxy.md lists the names RERANKER_PROXY_ALLOW takes"
    assert re.findall(r"`([^`]+)`", allow[1]) == list(PROXY_GUARDS)


BENCH_MODULES = {"benchlib.py", "fts5_store.py"}  # imported by the scripts, never run


def test_every_bench_script_answers_help_at_once() -> None:
    """`python bench/SCRIPT.py --help` prints the script's usage and exits 0 without
    running it, for every script: a newcomer's first question of a benchmark that takes
    minutes (five scripts once ignored it and started their run), and a script whose
    imports broke shows here, not on the day someone runs it."""
    from concurrent.futures import ThreadPoolExecutor

    scripts = sorted(path for path in (REPO / "bench").glob("*.py") if path.name not in BENCH_MODULES)
    assert len(scripts) >= 20

    def helped(script: Path) -> str:
        try:
            done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120, cwd=REPO)
        except subprocess.TimeoutExpired:
            return f"{script.name}: still running after 120 s: it ignored --help"
        if done.returncode != 0 or not done.stdout.startswith("usage: "):
            return f"{script.name}: exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}"
        return ""

    with ThreadPoolExecutor(4) as pool:
        wrong = [problem for problem in pool.map(helped, scripts) if problem]
    assert wrong == []


def test_every_bench_command_the_pages_give_names_a_script_and_its_options() -> None:
    """`python bench/SCRIPT.py --option` in any page (where nothing runs it: the scripts take
    minutes) names a script of bench/ that declares that option."""
    checked, wrong = 0, []
    for page in MARKDOWN:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for found in re.finditer(r"python (?:\.\./)?(bench/[a-z0-9_/]+\.py)([^`#|)\n]*)", line):
                script = REPO / found[1]
                where = f"{page.relative_to(REPO)}:{number}"
                if not script.is_file():
                    wrong.append(f"{where}: no {found[1]}")
                    continue
                source = script.read_text(encoding="utf-8")
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", found[2]):
                    checked += 1
                    if f'"{option}"' not in source:
                        wrong.append(f"{where}: {found[1]} has no {option}")
    assert checked >= 30, "the pages give the bench scripts many options: the pattern finds them"
    assert wrong == []
