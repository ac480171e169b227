"""Settings: defaults, the TOML config file, the environment over it, and clear errors."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest

from reranker.config import ENVIRONMENT, SERVICE_ONLY, ServiceSettings, Settings, parse_search_fields, redact_url
from reranker.errors import ConfigError


def test_defaults_select_the_embedded_store() -> None:
    settings = Settings.from_env({"HOME": "/home/u"})
    assert settings.opensearch_store is None
    assert settings.data_dir == Path("/home/u/.local/share/reranker")
    assert (settings.k, settings.window, settings.opensearch.alias, settings.opensearch.verify_certs) == (15, 100, "reranker", True)


def test_the_environment_overrides_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "reranker.toml"
    config.write_text(
        'OPENSEARCH_URL = ["https://a.example:9200", "https://b.example:9200"]\n'
        'OPENSEARCH_USERNAME = "reader"\nOPENSEARCH_PASSWORD = "from-file"\n'
        'OPENSEARCH_VERIFY_CERTS = false\nRERANKER_K = 20\nRERANKER_INDEX = "papers"\n'
        'RERANKER_SEARCH_FIELDS = "title^3,body"\n'
    )
    settings = Settings.from_env({"RERANKER_CONFIG": str(config), "RERANKER_K": "12", "HOME": "/h"})
    cluster = settings.opensearch_store
    assert cluster is not None
    assert cluster.hosts == ("https://a.example:9200", "https://b.example:9200")
    assert (cluster.username, cluster.password, cluster.verify_certs, cluster.alias) == ("reader", "from-file", False, "papers")
    assert cluster.search_fields == (("title", 3.0), ("body", 1.0))
    assert settings.k == 12  # the environment wins over the file
    assert "from-file" not in repr(settings) and "from-file" not in repr(cluster)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OPENSEARCH_URL": "localhost:9200"}, "OPENSEARCH_URL must be http(s)://HOST[:PORT]"),
        # urllib's ValueErrors were tracebacks: a port that is no number or out of range, an
        # unclosed IPv6 bracket (in any of the comma-separated URLs).
        ({"OPENSEARCH_URL": "http://h:92OO"}, "OPENSEARCH_URL must be http(s)://HOST[:PORT] (Port could not be cast"),
        ({"OPENSEARCH_URL": "http://h:99999"}, "OPENSEARCH_URL must be http(s)://HOST[:PORT] (Port out of range"),
        ({"OPENSEARCH_URL": "http://h:9200,http://[::1"}, "OPENSEARCH_URL must be http(s)://HOST[:PORT] (Invalid IPv6 URL), got 'http://[::1'"),
        ({"OPENSEARCH_URL": "http://h:9200", "OPENSEARCH_USERNAME": "u"}, "go together"),
        ({"OPENSEARCH_URL": "http://h:9200", "OPENSEARCH_API_KEY": "k", "OPENSEARCH_USERNAME": "u", "OPENSEARCH_PASSWORD": "p"}, "either"),
        ({"OPENSEARCH_URL": "http://h:9200", "RERANKER_INDEX": "Papers"}, "RERANKER_INDEX must be a lower-case index name"),
        ({"OPENSEARCH_URL": "http://h:9200", "RERANKER_TOPIC_DTYPE": "float64"}, "RERANKER_TOPIC_DTYPE must be one of float32, float16"),
        ({"OPENSEARCH_VERIFY_CERTS": "maybe"}, "OPENSEARCH_VERIFY_CERTS must be true or false"),
        ({"OPENSEARCH_TIMEOUT": "0"}, "OPENSEARCH_TIMEOUT must be >= 0.001, got 0"),
        # A bounded number reads as a bounded integer does: it said "must be >= 0.0, got '-5'".
        ({"RERANKER_WMD_BUDGET_MS": "-5"}, "RERANKER_WMD_BUDGET_MS must be >= 0, got -5"),
        ({"RERANKER_WMD_BUDGET_MS": "nan"}, "RERANKER_WMD_BUDGET_MS must be >= 0, got nan"),
        ({"RERANKER_SEARCH_FIELDS": "title^x"}, "bad boost"),
        ({"RERANKER_BULK_BYTES": "100"}, "RERANKER_BULK_BYTES must be >= 10000"),
        # A C int in the BLAS libraries: it overflowed with a traceback.
        ({"RERANKER_BLAS_THREADS": "9" * 20}, f"RERANKER_BLAS_THREADS must be <= 1024, got {'9' * 20}"),
        ({"RERANKER_BIND": "nonsense"}, "(RERANKER_BIND, --bind) must be HOST:PORT, got 'nonsense'"),
        ({"RERANKER_BIND": "127.0.0.1:0"}, "(RERANKER_BIND, --bind) needs a port from 1 to 65535, got '127.0.0.1:0'"),
        ({"RERANKER_BIND": "127.0.0.1:70000"}, "(RERANKER_BIND, --bind) needs a port from 1 to 65535, got '127.0.0.1:70000'"),
    ],
)
def test_bad_settings_say_which_and_why(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        Settings.from_env({"HOME": "/h", **env})


# A bad value of each of the service's own settings that can have one.
BAD_SERVICE_SETTINGS = {
    "RERANKER_BIND": ("nonsense", "must be HOST:PORT"),
    "RERANKER_WORKERS": ("0", "RERANKER_WORKERS must be >= 1"),
    "RERANKER_THREADS": ("many", "RERANKER_THREADS must be an integer"),
    "RERANKER_TIMEOUT": ("0", "RERANKER_TIMEOUT must be >= 1"),
    "RERANKER_DEADLINE_MS": ("0", "RERANKER_DEADLINE_MS must be >= 1"),
    "RERANKER_READ_TIMEOUT": ("0", "RERANKER_READ_TIMEOUT must be >= 1"),
    "RERANKER_CLUSTER_BUDGET_MS": ("-1", "RERANKER_CLUSTER_BUDGET_MS must be >= 0"),
    "RERANKER_MAX_BODY_BYTES": ("10", "RERANKER_MAX_BODY_BYTES must be >= 1024"),
    "RERANKER_MAX_DOCUMENTS": ("0", "RERANKER_MAX_DOCUMENTS must be >= 1"),
    "RERANKER_MAX_TEXT_CHARS": ("0", "RERANKER_MAX_TEXT_CHARS must be >= 1"),
    "RERANKER_MAX_SEARCHES": ("0", "RERANKER_MAX_SEARCHES must be >= 1"),
    "RERANKER_MAX_PENDING": ("0", "RERANKER_MAX_PENDING must be >= 1"),
    "RERANKER_EVENTS_PER_QUERY": ("0", "RERANKER_EVENTS_PER_QUERY must be >= 1"),
    "RERANKER_EVENTS_PER_CLIENT": ("0", "RERANKER_EVENTS_PER_CLIENT must be >= 1"),
    "RERANKER_TRUSTED_PROXIES": ("proxy.example", "RERANKER_TRUSTED_PROXIES: 'proxy.example' is not an IP address"),
    "RERANKER_MAX_EVENTS": ("0", "RERANKER_MAX_EVENTS must be >= 1"),
    "RERANKER_PROXY_ALLOW": ("script-score", "RERANKER_PROXY_ALLOW names 'script-score'"),
    "RERANKER_MAX_TOTAL_WINDOW": ("0", "RERANKER_MAX_TOTAL_WINDOW must be >= 1"),
    "RERANKER_PRELOAD_WMD": ("maybe", "RERANKER_PRELOAD_WMD must be true or false"),
    "RERANKER_API_KEYS_FILE": ("/nonexistent/keys", "cannot read RERANKER_API_KEYS_FILE /nonexistent/keys"),
}


@pytest.mark.parametrize("name", sorted(BAD_SERVICE_SETTINGS))
def test_a_bad_service_setting_fails_only_where_the_service_is_configured(name: str, tmp_path: Path) -> None:
    """RERANKER_BIND=nonsense stopped `reranker search` and `reranker index`, which never
    bind: the commands other than serve and config read settings without the service's own."""
    value, message = BAD_SERVICE_SETTINGS[name]
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.from_env({"HOME": "/h", name: value})
    assert Settings.from_env({"HOME": "/h", name: value}, serving=False).service == ServiceSettings()
    # From the config file as from the environment.
    config = tmp_path / "reranker.toml"
    config.write_text(f'{name} = "{value}"\n')
    assert Settings.from_env({"HOME": "/h"}, config_file=config, serving=False).service == ServiceSettings()
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.from_env({"HOME": "/h"}, config_file=config)


def test_the_service_settings_every_command_reads_are_still_checked_everywhere() -> None:
    # What a search is bounded by and ranks with, from the command line too.
    assert set(BAD_SERVICE_SETTINGS) <= SERVICE_ONLY
    assert SERVICE_ONLY <= set(ENVIRONMENT)
    for env, message in [
        ({"RERANKER_MAX_WINDOW": "0"}, "RERANKER_MAX_WINDOW must be >= 1"),
        ({"RERANKER_MAX_WINDOW": "50"}, "RERANKER_WINDOW \\(--window\\) must be <= 50"),
        ({"RERANKER_TOPIC_CACHE_MB": "lots"}, "RERANKER_TOPIC_CACHE_MB must be an integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            Settings.from_env({"HOME": "/h", **env}, serving=False)
    shared = Settings.from_env({"HOME": "/h", "RERANKER_DEFAULT_RANKER": "bm25", "RERANKER_MAX_WINDOW": "500"}, serving=False)
    assert (shared.service.default_ranker, shared.service.max_window) == ("bm25", 500)


def test_an_unknown_default_ranker_is_a_bad_setting_named_as_such() -> None:
    """RERANKER_DEFAULT_RANKER=foo was refused only where the default was used, as "unknown
    ranker 'foo'" without the setting's name, and under gunicorn as a traceback per worker."""
    for serving in (True, False):
        with pytest.raises(ConfigError) as refused:
            Settings.from_env({"HOME": "/h", "RERANKER_DEFAULT_RANKER": "hidden_topics_corected+bm25"}, serving=serving)
        message = str(refused.value)
        assert message.startswith(
            "RERANKER_DEFAULT_RANKER names no ranker: 'hidden_topics_corected+bm25' (did you mean 'hidden_topics_corrected+bm25'?); "
            "valid rankers: bm25, doc2vec, "
        ), message
        assert "\n" not in message


def test_the_ranker_names_are_known_without_numpy() -> None:
    """gunicorn's master checks RERANKER_DEFAULT_RANKER with these names before its workers
    size their BLAS threads (reranker/threads.py): they must be the registry's, and reading
    the settings must not load numpy."""
    import subprocess
    import sys

    from reranker.ranker_names import RANKER_NAMES
    from reranker.rankers import RANKERS

    assert list(RANKER_NAMES) == list(RANKERS)
    probe = "import sys, reranker.config; reranker.config.Settings.from_env(); print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


class ReadNames(dict[str, str]):
    """An environment that records the names read from it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(name)
        return super().get(name, default)

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return super().__getitem__(name)


def service_setting_variables(tmp_path: Path) -> dict[str, str]:
    """Each variable ServiceSettings.from_env reads -> the field it sets: read with one
    variable set at a time, to the first of a few values its parser takes."""
    every = ReadNames()
    ServiceSettings.from_env(every)
    keys = tmp_path / "keys"
    keys.write_text("a-key\n")
    default = ServiceSettings()
    variables: dict[str, str] = {}
    for name in sorted(every.read):
        for value in ("7", "4096", "false", "10.0.0.0/8", str(keys)):
            try:
                read = ServiceSettings.from_env({name: value})
            except ConfigError:
                continue
            changed = [f.name for f in dataclasses.fields(read) if getattr(read, f.name) != getattr(default, f.name)]
            if changed:
                assert len(changed) == 1, (name, changed)
                variables[name] = changed[0]
                break
        else:
            raise AssertionError(f"no value of {name} changes a service setting")
    return variables


def service_fields_read_outside_serve() -> set[str]:
    """The fields of `settings.service` the code of commands other than `serve` reads
    (`... .service.FIELD` outside reranker/service/ and reranker/cli/serving.py)."""
    package = Path(__file__).resolve().parent.parent / "reranker"
    read: set[str] = set()
    for source in package.rglob("*.py"):
        if "service" in source.relative_to(package).parts or source == package / "cli" / "serving.py":
            continue
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "service":
                read.add(node.attr)
    return read & {f.name for f in dataclasses.fields(ServiceSettings)}  # not validate()


def test_service_only_is_every_service_setting_no_other_command_reads(tmp_path: Path) -> None:
    """Derived, not listed: a service setting added later, or read by another command
    later, changes what SERVICE_ONLY must hold, and this says which."""
    variables = service_setting_variables(tmp_path)
    assert set(variables.values()) == {f.name for f in dataclasses.fields(ServiceSettings)}
    outside = service_fields_read_outside_serve()
    assert outside  # the scan finds what it looks for (search reads max_window, say)
    assert SERVICE_ONLY == {name for name, field in variables.items() if field not in outside}


def test_a_bad_config_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("OPENSEARCH_URL = \n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        Settings.from_env({"HOME": "/h"}, config_file=bad)
    bad.write_text('OPENSEARCH_URLS = "http://h:9200"\n')
    with pytest.raises(ConfigError, match="unknown key 'OPENSEARCH_URLS'"):
        Settings.from_env({"HOME": "/h"}, config_file=bad)
    # It said "known: see `reranker config`", which refuses the same file the same way.
    bad.write_text("RERANKER_WINDW = 50\n")
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"HOME": "/h"}, config_file=bad)
    assert str(refused.value) == (
        f"config file {bad}: unknown key 'RERANKER_WINDW' (did you mean RERANKER_WINDOW?; "
        "the keys are the variables `reranker config` lists when run without this file)"
    )
    with pytest.raises(ConfigError, match="cannot read config file"):
        Settings.from_env({"HOME": "/h"}, config_file=tmp_path / "missing.toml")
    # tomllib lets a UnicodeDecodeError through: it was a traceback (a Latin-1 file, a binary).
    bad.write_bytes(b'RERANKER_STOPWORDS = "/caf\xe9.txt"\n')
    with pytest.raises(ConfigError, match=f"config file {bad} is not valid TOML: not UTF-8 text"):
        Settings.from_env({"HOME": "/h"}, config_file=bad)


def test_urls_lose_their_credentials_in_messages() -> None:
    assert redact_url("https://user:pw@host:9200/x") == "https://***@host:9200/x"
    assert redact_url("http://host:9200") == "http://host:9200"
    # A malformed URL too (the message about it shows it): these raised a ValueError.
    assert redact_url("http://u:secret@h:0x1/") == "http://***@h:0x1/"
    assert redact_url("http://u:secret@[::1") == "http://***@[::1"
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"HOME": "/h", "OPENSEARCH_URL": "http://u:secret@h:99999"})
    assert "secret" not in str(refused.value) and "got 'http://***@h:99999'" in str(refused.value)
    assert parse_search_fields(" title^2 , body ") == (("title", 2.0), ("body", 1.0))


def test_every_variable_the_code_reads_is_documented() -> None:
    import re

    source = "".join(p.read_text() for p in (Path(__file__).parent.parent / "reranker").rglob("*.py"))
    read = set(re.findall(r'env(?:\.get)?\(\s*"([A-Z_]+)"|env\["([A-Z_]+)"\]|"((?:RERANKER|OPENSEARCH)_[A-Z_]+)"', source))
    names = {name for group in read for name in group if name.startswith(("RERANKER_", "OPENSEARCH_"))}
    assert names - {"OPENSEARCH_TEST_URL"} <= set(ENVIRONMENT)


def test_a_default_the_variables_list_states_is_the_codes() -> None:
    """`reranker config` shows ENVIRONMENT's meanings beside the values in force: a
    "(default N)" there must be the value the code falls back to."""
    import re

    effective = Settings.from_env({"HOME": "/nonexistent"}).effective()
    stated = {name: found[1] for name, meaning in ENVIRONMENT.items() if (found := re.search(r"\(default ([\w.:+-]+)[;)]", meaning))}
    assert len(stated) >= 25, stated
    for name, default in stated.items():
        assert default == effective[name], f"ENVIRONMENT says {name} defaults to {default}; the code's default is {effective[name]}"


def test_service_settings_made_in_code_default_as_the_environment_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library caller's ServiceSettings() starts the service the environment's defaults
    would: the same workers (the CPU count: 7 here, not this machine's) and everything else."""
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert ServiceSettings().workers == 7
    assert ServiceSettings() == Settings.from_env({}).service


def test_the_config_file_put_in_the_environment_is_read_again_unless_serve_put_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gunicorn runs its config file again on SIGHUP: what an earlier call put is the file's
    of then, and the edited file replaces it (kept, it won over the file as if the operator
    had set it); the environment's own values, and those `reranker serve` put (its settings
    are read once), stay."""
    from reranker.config import put_config_file_in_environ

    config = tmp_path / "reranker.toml"
    for name in ("RERANKER_CONFIG", "RERANKER_MAX_DOCUMENTS", "RERANKER_READ_TIMEOUT", "RERANKER_MAX_PENDING"):
        monkeypatch.setenv(name, "")  # recorded, so that monkeypatch puts the environment back
        monkeypatch.delenv(name)
    monkeypatch.setenv("RERANKER_MAX_PENDING", "9")
    config.write_text("RERANKER_MAX_DOCUMENTS = 2\nRERANKER_READ_TIMEOUT = 3\nRERANKER_MAX_PENDING = 4\n")
    put_config_file_in_environ(config)
    assert [os.environ.get(n) for n in ("RERANKER_MAX_DOCUMENTS", "RERANKER_READ_TIMEOUT", "RERANKER_MAX_PENDING")] == ["2", "3", "9"]
    config.write_text("RERANKER_MAX_DOCUMENTS = 5\nRERANKER_MAX_PENDING = 4\n")
    put_config_file_in_environ()  # gunicorn.conf.py's call, RERANKER_CONFIG naming the file
    assert [os.environ.get(n) for n in ("RERANKER_MAX_DOCUMENTS", "RERANKER_READ_TIMEOUT", "RERANKER_MAX_PENDING")] == ["5", None, "9"]
    monkeypatch.delenv("RERANKER_MAX_DOCUMENTS")
    put_config_file_in_environ(config, reread=False)  # serve's: read once
    config.write_text("RERANKER_MAX_DOCUMENTS = 7\n")
    put_config_file_in_environ()
    assert os.environ.get("RERANKER_MAX_DOCUMENTS") == "5"
