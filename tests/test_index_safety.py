"""`reranker index` never hides a document: real `reranker index` processes, run beside
readers (as `reranker serve` runs beside it), killed with SIGKILL at chosen points, and
run out of disk space.

Every corpus here has one word in every document ("harbour"), so one BM25 search for it
lists every document the store lets readers find, and a word of its own in each
document, so each can be looked for alone. A second version of the corpus changes every
document's text.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import run, settings_env, write_jsonl

from reranker.store.embedded import EmbeddedStore

REPO = Path(__file__).resolve().parent.parent
COMMON = "harbour"
_TOPIC_WORDS = (
    "ships sailors ocean wind sails storm captain vessel crew voyage bread flour oven baker dough "
    "chess king pawn bishop knight rook river mountain forest valley music piano violin concert "
    "garden flowers seeds soil rain farmer wheat harvest market price trade coins bank money"
).split()


def own_word(number: int) -> str:
    """A word only document `number` holds: letters only (the tokenizer drops digits)."""
    letters = ""
    while True:
        number, digit = divmod(number, 26)
        letters += "abcdefghijklmnopqrstuvwxyz"[digit]
        if not number:
            return "zq" + letters


def corpus(count: int, version: int, start: int = 0) -> list[dict[str, str]]:
    """Documents d<start>..d<start+count-1>, version 1 or 2 (other words, other text)."""
    records = []
    for number in range(start, start + count):
        rng = random.Random(number * 10 + version)
        words = rng.sample(_TOPIC_WORDS, 12)
        records.append({
            "id": f"d{number}",
            "title": f"version {version}",
            "text": f"{COMMON} {own_word(number)} {' '.join(words)} v{'ab'[version - 1]}{own_word(number)}",
        })
    return records


@dataclass
class Tally:
    """What readers saw: searches run, documents a search should have found and did not,
    ids listed twice, documents /documents could not give, and texts of neither version."""

    searches: int = 0
    misses: int = 0
    duplicates: int = 0
    lookups: int = 0
    missing_documents: int = 0
    wrong_versions: int = 0
    mixed: int = 0  # rounds whose /documents showed both versions (a replacement was under way)
    whole: Counter[str] = field(default_factory=Counter)  # rounds that showed one version only, by version
    problems: list[str] = field(default_factory=list)

    def note(self, problem: str) -> None:
        if len(self.problems) < 10:
            self.problems.append(problem)


def check_once(store: EmbeddedStore, texts: dict[str, set[str]], tally: Tally, rng: random.Random) -> None:
    """One round of a reader: every document by one search, by its id, by its own word."""
    ids = [hit.doc_id for hit in store.bm25(COMMON, len(texts) + 50)]
    tally.searches += 1
    found = set(ids)
    if len(found) != len(texts):
        tally.misses += len(set(texts) - found)
        tally.note(f"search missed {sorted(set(texts) - found)[:5]} ({len(set(texts) - found)} in all)")
    tally.duplicates += len(ids) - len(found)
    documents = store.documents(list(texts))
    tally.lookups += 1
    tally.missing_documents += len(texts) - len(documents)
    versions = set()
    for doc_id, document in documents.items():
        if document.text not in texts[doc_id]:
            tally.wrong_versions += 1
        versions.add(document.title)
    tally.mixed += len(versions) > 1
    if len(versions) == 1:
        tally.whole[versions.pop()] += 1
    for doc_id in rng.sample(sorted(texts), 5):
        number = int(doc_id[1:])
        hits = store.bm25(own_word(number), 3)
        tally.searches += 1
        if [hit.doc_id for hit in hits[:1]] != [doc_id]:
            tally.misses += 1
            tally.note(f"search for {own_word(number)} found {[hit.doc_id for hit in hits]}, not {doc_id}")
    missing_topics = store.topics(rng.sample(sorted(texts), 50)).missing
    if missing_topics:
        tally.missing_documents += len(missing_topics)
        tally.note(f"no topics for {missing_topics[:5]}")


_INDEXER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from reranker.store import embedded
embedded._COMMIT_DOCS = {commit_docs}
{kill}
from reranker.cli import main
sys.exit(main({argv!r}))
"""

# Kills the process (SIGKILL: no clean-up of any kind) at the n-th call of a function.
_KILL = """
import functools, importlib
owner = importlib.import_module({module!r})
for part in {owner!r}.split("."):
    owner = getattr(owner, part)
original = getattr(owner, {name!r})
calls = [0]
@functools.wraps(original)
def killing(*args, **kwargs):
    calls[0] += 1
    if {when!r} == "before" and calls[0] == {n}:
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(*args, **kwargs)
    if {when!r} == "after" and calls[0] == {n}:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
setattr(owner, {name!r}, killing)
"""


def indexer(data_dir: Path, argv: list[str], commit_docs: int = 2_000, kill: str = "") -> subprocess.Popen[str]:
    """A real `reranker index` process (`argv` after `index`), its text index committing
    every `commit_docs` documents."""
    script = _INDEXER.format(
        tests=str(Path(__file__).parent), commit_docs=commit_docs, kill=kill,
        argv=["--data-dir", str(data_dir), "index", *argv, "--no-progress"],
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("rebuild", [False, True], ids=["re-index", "rebuild"])
def test_searches_during_a_reindex_find_every_document_once(data_dir: Path, tmp_path: Path, rebuild: bool) -> None:
    """Issue 24, point 1: 3,000 documents replaced by new versions, by a real `reranker
    index` process, while three reader threads search. Re-indexing, the text index
    commits every 200 documents, so the run passes through some fifteen commits, each a
    moment where a reader could lose a document; a rebuild is swapped in whole."""
    count = 3_000
    old, new = corpus(count, 1), corpus(count, 2)
    code, out = run(data_dir, "index", str(write_jsonl(tmp_path / "v1.jsonl", old)), "--no-progress")
    assert code == 0, out
    texts = {doc["id"]: {old_doc["text"], doc["text"]} for doc, old_doc in zip(new, old)}
    options = ["--rebuild"] if rebuild else []
    writer = indexer(data_dir, [str(write_jsonl(tmp_path / "v2.jsonl", new)), *options], commit_docs=200)
    store = EmbeddedStore(data_dir / "index")
    tallies = [Tally() for _ in range(3)]

    def read(tally: Tally, seed: int) -> None:
        rng = random.Random(seed)
        while writer.poll() is None:
            check_once(store, texts, tally, rng)

    try:
        threads = [threading.Thread(target=read, args=(tally, seed)) for seed, tally in enumerate(tallies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _, errors = writer.communicate()
        assert writer.returncode == 0, errors
        total = Tally()
        for tally in tallies:
            for name in ("searches", "misses", "duplicates", "lookups", "missing_documents", "wrong_versions", "mixed"):
                setattr(total, name, getattr(total, name) + getattr(tally, name))
            total.whole.update(tally.whole)
            total.problems += tally.problems
        print(f"concurrent {'rebuild' if rebuild else 're-index'} of {count} documents: {total}")
        assert total.searches >= 100
        assert (total.misses, total.duplicates, total.missing_documents, total.wrong_versions) == (0, 0, 0, 0), total.problems
        if rebuild:  # the old index, whole, until the swap
            assert total.mixed == 0 and total.whole["version 1"] >= 10, total
        else:  # the readers ran through the replacement, not only before or after it
            assert total.mixed >= 3, total
        check_once(store, {doc["id"]: {doc["text"]} for doc in new}, final := Tally(), random.Random(0))
        assert (final.misses, final.missing_documents, final.wrong_versions, final.mixed) == (0, 0, 0, 0), final.problems
        assert store.count() == count
    finally:
        if writer.poll() is None:
            writer.kill()
        store.close()


# --- SIGKILL at chosen points -------------------------------------------------------------


def kill_at(function: str, when: str, n: int) -> str:
    """Code that SIGKILLs the process before or after the n-th call of `function`
    ("module:Owner.name")."""
    module, path = function.split(":")
    owner, _, name = path.rpartition(".")
    return _KILL.format(module=module, owner=owner, name=name, when=when, n=n)


def visible_texts(store: EmbeddedStore, universe: list[str]) -> tuple[list[str], dict[str, str], tuple[str, ...]]:
    """(ids one search for the common word lists, id -> text of what /documents gives,
    ids without topics), over every id of `universe`."""
    ids = [hit.doc_id for hit in store.bm25(COMMON, len(universe) + 50)]
    documents = store.documents(universe)
    return ids, {doc_id: document.text for doc_id, document in documents.items()}, store.topics(sorted(documents)).missing


# Corpus files by name: (first document, how many, version).
CORPORA = {
    "half": (0, 300, 1),
    "v1": (0, 600, 1),
    "v2": (0, 600, 2),
    # A rebuild drops d0-d99, replaces d100-d599 and adds d600-d649.
    "shifted": (100, 550, 2),
}
UPSERT = "reranker.store.embedded:EmbeddedStore.upsert"
MOVE = "reranker.store.embedded:EmbeddedStore._move_watermark"

# (the corpus indexed before, the killed run's corpus and options, where it dies)
KILLS = {
    "adding, after 2 batches": ("half", ["v1"], (UPSERT, "after", 2)),
    "adding, text index committed, watermark not moved": ("half", ["v1"], (MOVE, "before", 1)),
    "replacing, after 1 batch": ("v1", ["v2"], (UPSERT, "after", 1)),
    "replacing, after 6 batches (one commit made)": ("v1", ["v2"], (UPSERT, "after", 6)),
    "replacing, text index committed, watermark not moved": ("v1", ["v2"], (MOVE, "before", 2)),
    "replacing, all written, before the last commit": ("v1", ["v2"], ("reranker.store.embedded:EmbeddedStore.publish", "before", 1)),
    "rebuilding, after 3 batches": ("v1", ["shifted", "--rebuild"], (UPSERT, "after", 3)),
    "rebuilding, all written, before the swap": ("v1", ["shifted", "--rebuild"], ("reranker.store.embedded:EmbeddedStore._swap_in", "before", 1)),
    "rebuilding, swapped, old text entries not purged": ("v1", ["shifted", "--rebuild"], ("reranker.store.embedded:EmbeddedStore._purge_text", "before", 1)),
}


def texts_of(name: str) -> dict[str, str]:
    start, count, version = CORPORA[name]
    return {doc["id"]: doc["text"] for doc in corpus(count, version, start)}


@pytest.fixture(scope="module")
def indexed_before(tmp_path_factory: pytest.TempPathFactory, glove: object) -> dict[str, Path]:
    """The corpus files by name, and data dirs with "half" and "v1" indexed, as the
    killed runs find them."""
    root = tmp_path_factory.mktemp("kills")
    paths = {name: write_jsonl(root / f"{name}.jsonl", corpus(count, version, start)) for name, (start, count, version) in CORPORA.items()}
    for name in ("half", "v1"):
        data_dir = root / f"indexed-{name}"
        data_dir.mkdir()
        code, out = run(data_dir, "index", str(paths[name]), "--no-progress")
        assert code == 0, out
        paths[f"indexed-{name}"] = data_dir
    return paths


@pytest.mark.parametrize("point", list(KILLS))
def test_a_killed_index_run_hides_nothing_and_the_next_run_completes_it(
    indexed_before: dict[str, Path], tmp_path: Path, point: str
) -> None:
    """Issue 24, point 2: `reranker index` killed with SIGKILL at `point` (the test
    wraps the named function in the indexer process; nothing else is changed)."""
    before, (target, *options), (function, when, n) = KILLS[point]
    data_dir = tmp_path / "data"
    shutil.copytree(indexed_before[f"indexed-{before}"], data_dir, symlinks=True)
    argv = [str(indexed_before[target]), *options]
    killed = indexer(data_dir, argv, commit_docs=200, kill=kill_at(function, when, n))
    _, errors = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, errors

    old, new = texts_of(before), texts_of(target)
    universe = sorted(old.keys() | new.keys())
    store = EmbeddedStore(data_dir / "index")
    try:
        ids, texts, without_topics = visible_texts(store, universe)
        # Every document indexed before is found, once, by search and by id, in its old
        # or its new version; a new document is found only whole (text, topics, search).
        # A rebuild shows all of the old index until its swap, and all of the new after.
        assert len(ids) == len(set(ids)) and set(ids) == set(texts) and without_topics == ()
        if "rebuilding" in point:
            assert texts == (new if "swapped" in point else old)
        else:
            assert set(old) <= set(ids), f"lost {sorted(set(old) - set(ids))[:10]}"
            assert all(text in {old.get(doc_id), new.get(doc_id)} for doc_id, text in texts.items())
        assert store.count() == len(ids)
        for doc_id in sorted(ids)[:: len(ids) // 20]:
            assert [hit.doc_id for hit in store.bm25(own_word(int(doc_id[1:])), 1)] == [doc_id]
    finally:
        store.close()

    code, out = run(data_dir, "index", *argv, "--no-progress")
    assert code == 0, out
    if "before the swap" in point:
        assert f"unchanged {len(new)}" in out  # resumed: nothing written twice
    store = EmbeddedStore(data_dir / "index")
    try:
        ids, texts, without_topics = visible_texts(store, universe)
        # A run without --rebuild keeps what it does not replace.
        expected = new if options else {**old, **new}
        assert sorted(ids) == sorted(expected) and texts == expected and without_topics == ()
        assert store.count() == len(expected) and store._text.num_docs() == len(expected)
    finally:
        store.close()
    rows = sqlite3.connect(data_dir / "index" / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0]
    assert rows == len(expected)  # no superseded version or unfinished rebuild left behind


@pytest.mark.parametrize("resumed_with", ["the same corpus", "a smaller corpus"])
def test_a_resumed_rebuild_publishes_exactly_the_corpus_it_read(
    indexed_before: dict[str, Path], tmp_path: Path, resumed_with: str
) -> None:
    """`reranker index v2 --rebuild` killed after 5 batches (d0-d319 written beside the
    index readers see), then `reranker index --rebuild` again: with v2, it skips those and
    writes the rest; with d300-d599 only (d0-d299 removed from the corpus on purpose), the
    published index holds those 300, not the 600 the two runs wrote (as before)."""
    data_dir = tmp_path / "data"
    shutil.copytree(indexed_before["indexed-v1"], data_dir, symlinks=True)
    rebuild = [str(indexed_before["v2"]), "--rebuild"]
    killed = indexer(data_dir, rebuild, kill=kill_at(UPSERT, "after", 5))
    _, errors = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, errors

    smaller = resumed_with == "a smaller corpus"
    new = corpus(300, 2, start=300) if smaller else corpus(600, 2)
    code, out = run(data_dir, "index", str(write_jsonl(tmp_path / "resumed.jsonl", new)), "--rebuild", "--no-progress")
    assert code == 0, out
    expected = {doc["id"]: doc["text"] for doc in new}
    store = EmbeddedStore(data_dir / "index")
    try:
        ids, texts, without_topics = visible_texts(store, [f"d{number}" for number in range(600)])
        assert sorted(ids) == sorted(expected) and texts == expected and without_topics == ()
        assert store.count() == len(expected) and store._text.num_docs() == len(expected)
    finally:
        store.close()
    rows = sqlite3.connect(data_dir / "index" / "store.sqlite3").execute("SELECT count(*) FROM docs").fetchone()[0]
    assert rows == len(expected)
    # What the killed run wrote is not extracted again; what the corpus no longer holds goes.
    if smaller:
        assert "indexed 280, unchanged 20, skipped 0" in out and "dropped 300 documents of the interrupted rebuild" in out, out
    else:
        assert "indexed 280, unchanged 320, skipped 0" in out and "dropped" not in out, out


# --- a full disk --------------------------------------------------------------------------


def mount_works(directory: Path) -> bool:
    """Whether this user may mount a tmpfs in a user namespace of its own (`unshare -rm`)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m none {directory}"], capture_output=True)
    return probe.returncode == 0


_FULL_DISK = """
set -u
data={tmp}/data
mkdir $data
index() {{ {python} -m reranker.cli --data-dir $data index "$@" --no-progress; }}
check() {{ {python} {check} $data/index {universe}; }}
index {v1} > {out}/first.out 2> {out}/first.err || exit 98
# The file system that fills: a tmpfs over the whole store, or over its text index only
# (SQLite then has room, tantivy none); what is there moves onto it.
mv {full} {tmp}/moved && mkdir {full}
mount -t tmpfs -o size=64m none {full} || exit 99
cp -a {tmp}/moved/. {full}/
# Leave {room} bytes of it free.
{python} -c "import os; s = os.statvfs('{full}'); open('{full}/filler', 'wb').write(b'x' * max(0, s.f_bavail * s.f_frsize - {room}))"
index {v2} > {out}/full.out 2> {out}/full.err
echo $? > {out}/full.rc
# What the failed run left, read with room again: a process that opens the store needs
# room for SQLite's shared-memory file (readers open already, like `reranker serve`, have it).
rm {full}/filler
check > {out}/full.json
index {v2} > {out}/after.out 2> {out}/after.err
echo $? > {out}/after.rc
check > {out}/after.json
"""

_CHECK = """
import json, sys
from pathlib import Path
from reranker.store.embedded import EmbeddedStore
store = EmbeddedStore(Path(sys.argv[1]))
universe = [f"d{number}" for number in range(int(sys.argv[2]))]
ids = [hit.doc_id for hit in store.bm25("harbour", len(universe) + 50)]
texts = {doc_id: document.text for doc_id, document in store.documents(universe).items()}
print(json.dumps({"ids": ids, "texts": texts, "count": store.count(), "without_topics": list(store.topics(sorted(texts)).missing)}))
"""


@pytest.mark.parametrize(("full", "room"), [("store", 0), ("store", 1_000_000), ("text index", 0), ("text index", 100_000)])
def test_a_full_disk_is_a_one_line_error_and_loses_nothing(
    tmp_path: Path, glove: object, full: str, room: int
) -> None:
    """Issue 24, point 3: `reranker index` on a file system that fills up: a real tmpfs,
    mounted in a user namespace over the store (or over its text index only), filled to
    `room` bytes free. With none, SQLite cannot even open the store; with 1 MB, a SQLite
    write fails part way through; over the text index, a tantivy write fails. One line
    on stderr, exit 1; every document indexed before is found; with room again, the
    same command completes."""
    if not mount_works(tmp_path):
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
    out = tmp_path / "out"
    out.mkdir()
    check = tmp_path / "check.py"
    check.write_text(_CHECK)
    old, new = corpus(300, 1), corpus(3_000, 2)
    script = _FULL_DISK.format(
        tmp=tmp_path, python=sys.executable, check=check, universe=len(new), out=out, room=room,
        full=tmp_path / "data" / "index" / ("text" if full == "text index" else ""),
        v1=write_jsonl(tmp_path / "v1.jsonl", old), v2=write_jsonl(tmp_path / "v2.jsonl", new),
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout, done.stderr, *(f.read_text() for f in sorted(out.glob("*.err"))))

    errors = (out / "full.err").read_text()
    assert (out / "full.rc").read_text().strip() == "1"
    assert errors.startswith("reranker: error: ") and errors.count("\n") == 1, errors
    assert "the disk is full" in errors and "Traceback" not in errors
    assert ("text index" in errors) == (full == "text index"), errors
    seen = json.loads((out / "full.json").read_text())
    assert set(seen["ids"]) >= {doc["id"] for doc in old} and len(seen["ids"]) == len(set(seen["ids"]))
    assert set(seen["texts"]) == set(seen["ids"]) and seen["count"] == len(seen["ids"]) and seen["without_topics"] == []
    versions = {doc["id"]: {doc["text"]} for doc in new}
    for doc in old:
        versions[doc["id"]].add(doc["text"])
    assert all(text in versions[doc_id] for doc_id, text in seen["texts"].items())

    assert (out / "after.rc").read_text().strip() == "0", (out / "after.err").read_text()
    after = json.loads((out / "after.json").read_text())
    assert sorted(after["ids"]) == sorted(versions) and after["texts"] == {doc["id"]: doc["text"] for doc in new}
    assert after["count"] == len(new)


# --- a topic worker killed ------------------------------------------------------------------


# `reranker index ARGV` with topic-extraction workers whatever the corpus's size: the
# process lowers the size from which `--workers` starts them (PARALLEL_MIN_BYTES, 24 MB), so
# the tests below kill workers of a 6 MB corpus. With 24 MB, the runs they make (the one
# they kill and the one that completes the index) were most of this file's time; what they
# test is the same at any size once workers start, and 1,600 documents are 25 batches.
# A run that hangs writes where each of its threads waits to its stderr, which the test
# then shows, and exits, before the test's own 300 s run out: that is how the hang of a
# worker killed while it sent its results was found (see the test after the next).
_PARALLEL_INDEXER = """
import faulthandler
import sys
faulthandler.dump_traceback_later(200, exit=True)
from reranker import indexing
indexing.PARALLEL_MIN_BYTES = 1
from reranker.cli import main
sys.exit(main())
"""


def parallel_indexer(argv: list[str]) -> list[str]:
    """The command line of a `reranker index ARGV` process that starts its workers whatever
    the corpus's size."""
    return [sys.executable, "-c", _PARALLEL_INDEXER, "index", *argv]


def worker_corpus(directory: Path) -> tuple[list[dict[str, str]], Path]:
    """1,600 documents of about 4 KB (600 words each), and their corpus file."""
    records = [
        {"id": f"d{n}", "text": f"{own_word(n)} " + " ".join(random.Random(n).choices(_TOPIC_WORDS, k=600))}
        for n in range(1_600)
    ]
    return records, write_jsonl(directory / "big.jsonl", records)


def the_next_run_completes(data_dir: Path, path: Path, records: list[dict[str, str]]) -> None:
    """`reranker index` of the worker corpus again exits 0 with every document indexed."""
    code, again = run(data_dir, "index", str(path), "--no-progress")
    assert code == 0, again
    store = EmbeddedStore(data_dir / "index")
    try:
        assert store.count() == len(records)
        assert [hit.doc_id for hit in store.bm25(own_word(1_234), 1)] == ["d1234"]
    finally:
        store.close()


@pytest.mark.parametrize("when", ["at work", "starting"])
def test_a_killed_topic_worker_is_a_one_line_error_and_the_next_run_completes(data_dir: Path, tmp_path: Path, when: str) -> None:
    """A topic-extraction worker process killed (as the kernel's out-of-memory killer would)
    stops `reranker index` with one line, not a traceback and not a hang; what it wrote
    stays, and the next run completes the index. Killed as it starts, the pool may not
    have counted it yet and the run may complete: then it must have indexed everything.
    (Killed as it started, the other worker once hung the run for good: see
    `TopicExtractor._worker_ended`.)"""
    records, path = worker_corpus(tmp_path)
    command = parallel_indexer([str(path), "--workers", "2", "--no-progress"])
    env = {**os.environ, **settings_env(data_dir), "PYTHONPATH": str(REPO)}
    indexer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # A worker at work: half a second of CPU spent (a worker killed while it starts up
        # may be before the pool counts it).
        worker = None
        while worker is None and indexer.poll() is None:
            least = 50 if when == "at work" else 0
            busy = [pid for pid in _children(indexer.pid) if b"spawn_main" in _cmdline(pid) and _cpu_ticks(pid) >= least]
            worker = busy[0] if busy else None
        assert worker is not None, "the indexer ended before a worker was at work"
        os.kill(worker, signal.SIGKILL)
        out, errors = indexer.communicate(timeout=300)
    finally:
        if indexer.poll() is None:
            indexer.kill()
    assert "Traceback" not in errors, errors
    if when == "at work" or indexer.returncode != 0:
        assert indexer.returncode == 1, (out, errors)
        assert len(errors.strip().splitlines()) == 1, errors
        assert "worker process ended abruptly" in errors and "run the same command again" in errors
    the_next_run_completes(data_dir, path, records)


# The system call number of write(2), which /proc/PID/syscall shows first while a process
# is in it, on the machines this runs on.
_WRITE_CALL = {"x86_64": "1", "aarch64": "64"}.get(os.uname().machine)


def test_a_topic_worker_killed_while_it_sends_its_results_is_a_one_line_error_not_a_hang(data_dir: Path, tmp_path: Path) -> None:
    """A worker killed in the middle of writing a batch's results leaves half a message in
    the pipe the pool reads results from. CPython's pool then waited for the rest for good,
    never seeing the worker gone, and `reranker index` hung (CI, 2026-11-28: the test above,
    one run in about 30). To kill a worker there every time, the indexer is stopped while
    its workers compute: done, they block writing results nobody reads (a batch's results
    are larger than a pipe holds), and one blocked in write(2) is killed before the indexer
    goes on."""
    if _WRITE_CALL is None or not Path(f"/proc/{os.getpid()}/syscall").exists():
        pytest.skip("needs /proc/PID/syscall on x86_64 or aarch64 to see a worker in write(2)")
    records, path = worker_corpus(tmp_path)
    command = parallel_indexer([str(path), "--workers", "2", "--no-progress"])
    env = {**os.environ, **settings_env(data_dir), "PYTHONPATH": str(REPO)}
    indexer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stopped = False
    try:
        workers: list[int] = []
        while len(workers) < 2 and indexer.poll() is None:
            workers = [pid for pid in _children(indexer.pid) if b"spawn_main" in _cmdline(pid) and _cpu_ticks(pid) >= 50]
        assert len(workers) == 2, "the indexer ended before both workers were at work"
        try:
            _system_call(workers[0])
        except PermissionError:
            pytest.skip("cannot read another process's /proc/PID/syscall here (ptrace restrictions)")
        os.kill(indexer.pid, signal.SIGSTOP)
        stopped = True
        writing = None
        for _ in range(600):
            writing = next((pid for pid in workers if _system_call(pid) == _WRITE_CALL), None)
            if writing is not None:
                break
            threading.Event().wait(0.1)
        assert writing is not None, "no worker blocked writing its results within a minute"
        os.kill(writing, signal.SIGKILL)
        os.kill(indexer.pid, signal.SIGCONT)
        stopped = False
        # Longer than the indexer's own 200 s, after which a run that hangs shows where.
        out, errors = indexer.communicate(timeout=240)
    finally:
        if stopped:
            os.kill(indexer.pid, signal.SIGCONT)
        if indexer.poll() is None:
            indexer.kill()
            indexer.wait()
    assert indexer.returncode == 1, (out, errors)
    assert "Traceback" not in errors and len(errors.strip().splitlines()) == 1, errors
    assert "worker process ended abruptly" in errors and "run the same command again" in errors
    the_next_run_completes(data_dir, path, records)


# A pool whose thread waits on half a message, as a worker killed while it sent a batch's
# results leaves it (the length a message begins with, then part of it, written into the
# pool's own results pipe), and one of its workers gone; then `close`, as a run that stops
# for another reason (a duplicate id, a full disk) reaches it. Prints "closed" if it returns.
_CLOSE_AFTER_A_HALF_SENT_RESULT = """
import faulthandler, os, struct
faulthandler.dump_traceback_later(100, exit=True)
from reranker.config import DEFAULT_VECTORS, Settings
from reranker.embeddings import load_vectors
from reranker.indexing import TopicExtractor
from reranker.types import Document

vectors = load_vectors(DEFAULT_VECTORS, Settings.from_env().vectors_cache)
extractor = TopicExtractor(vectors, 15, None, workers=2)
extractor.submit([Document(str(i), "", "ships sail across the ocean " * 20) for i in range(8)])()
pool = extractor._pool
os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1_000_000) + b"x" * 100)
worker = next(iter(pool._processes.values()))
worker.kill()
worker.join()
extractor.close()
print("closed")
"""


def test_a_run_stopped_for_another_reason_after_a_worker_died_half_sending_still_exits(tmp_path: Path) -> None:
    """The watch that turns a worker gone into one line (the test above) runs while the
    run waits for results; a run that stops for another reason shuts the pool down from
    `close`, which waited for the pool's thread, stuck on the half message, for good."""
    env = {**os.environ, **settings_env(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _CLOSE_AFTER_A_HALF_SENT_RESULT], capture_output=True, text=True, env=env, timeout=180)
    assert (done.returncode, done.stdout) == (0, "closed\n"), done.stderr[-3000:]


# The same pool, its thread on half a message, but the worker killed only once `close`
# has begun (a second failure while the run shuts down): it watched the workers before the
# shutdown only, then waited for the pool's thread for good.
_KILLED_WHILE_CLOSING = _CLOSE_AFTER_A_HALF_SENT_RESULT.replace(
    """worker.kill()
worker.join()
extractor.close()
""",
    """import threading
closing = threading.Thread(target=extractor.close)
closing.start()
closing.join(1.5)
worker.kill()
closing.join()
""",
)


def test_a_worker_killed_while_the_pool_shuts_down_does_not_hang_the_run(tmp_path: Path) -> None:
    assert _KILLED_WHILE_CLOSING != _CLOSE_AFTER_A_HALF_SENT_RESULT
    env = {**os.environ, **settings_env(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _KILLED_WHILE_CLOSING], capture_output=True, text=True, env=env, timeout=180)
    assert (done.returncode, done.stdout) == (0, "closed\n"), done.stderr[-3000:]


def _system_call(pid: int) -> str:
    """The number of the system call process `pid`'s main thread is in ("running" when in
    none, "" once it is gone). PermissionError where another process's is not to be read."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split(" ", 1)[0].strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def test_ctrl_c_while_topic_workers_start_is_one_line_and_leaves_no_process(data_dir: Path, tmp_path: Path) -> None:
    """Ctrl-C reaches every process of the terminal's group. A worker interrupted while it
    started printed a traceback of its imports under the one-line message; told to ignore
    it instead, one the pool started as the interrupt came was never told to stop and
    waited for batches for good. Now: one line, exit 130, no process left, and the next
    run completes the index."""
    records, path = worker_corpus(tmp_path)
    command = parallel_indexer([str(path), "--workers", "2", "--no-progress"])
    env = {**os.environ, **settings_env(data_dir), "PYTHONPATH": str(REPO)}
    # A session of its own, as a terminal's foreground job; SIGINT as the terminal sends it
    # (a shell starts background jobs with it ignored, and children would inherit that).
    indexer = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # A worker importing its modules: a fifth of a second of CPU spent (Python installs
        # its KeyboardInterrupt handler before that; imports take about a second).
        starting = False
        while not starting and indexer.poll() is None:
            starting = any(b"spawn_main" in _cmdline(pid) and _cpu_ticks(pid) >= 20 for pid in _children(indexer.pid))
        assert starting, "the indexer ended before it started a worker"
        os.killpg(indexer.pid, signal.SIGINT)
        out, errors = indexer.communicate(timeout=120)
        left = _session(indexer.pid)
        for _ in range(300):  # a worker still starting sees its parent gone when it is up
            if not left:
                break
            threading.Event().wait(0.1)
            left = _session(indexer.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(indexer.pid, signal.SIGKILL)
    assert indexer.returncode == 130, (out, errors)
    assert errors == "reranker: interrupted (already indexed batches are kept)\n"
    assert left == [], [_cmdline(pid) for pid in left]
    the_next_run_completes(data_dir, path, records)


def _session(sid: int) -> list[int]:
    """The live processes of session `sid` (zombies are gone in all but name)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _cpu_ticks(pid: int) -> int:
    """User + system CPU time of a process, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_script_without_a_main_guard_gets_an_error_that_names_the_guard_not_a_hang(tmp_path: Path) -> None:
    # Each spawned worker imports the caller's script again, which starts a pool of its
    # own and fails; the pool breaks. That once hung for good (a worker left blocked on a
    # pipe); the error then only guessed "killed, or out of memory?".
    script = tmp_path / "index_mine.py"
    script.write_text(
        "from pathlib import Path\n"
        "from reranker.config import DEFAULT_VECTORS, Settings\n"
        "from reranker.embeddings import load_vectors\n"
        "from reranker.indexing import TopicExtractor\n"
        "from reranker.types import Document\n"
        "vectors = load_vectors(DEFAULT_VECTORS, Settings.from_env().vectors_cache)\n"
        "with TopicExtractor(vectors, 15, None, workers=2) as extractor:\n"
        "    documents = [Document(str(i), '', 'ships sail across the ocean ' * 20) for i in range(8)]\n"
        "    print(len(extractor.submit(documents)()))\n"
    )
    env = {**os.environ, **settings_env(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr[-2000:])
    # The traceback's last line, not stderr's: the spawned workers' resource tracker may warn
    # about their semaphores after it (it did at load 8).
    raised = [line for line in done.stderr.splitlines() if line.startswith("reranker.errors.")]
    assert len(raised) == 1, done.stderr[-2000:]
    assert raised[0].startswith("reranker.errors.WorkerError: a topic-extraction worker process ended abruptly"), raised
    assert 'without an `if __name__ == "__main__":` guard' in raised[0], raised
