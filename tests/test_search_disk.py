"""The search's databases kept on disk for later processes (bundle/search/disk.py): a warm folder
gives the verdicts of a cold search, builds nothing, and is read where it lies; a damaged entry is
drawn again; a folder that cannot be written changes nothing; a key names everything that decides
a database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours.source import read_original
from bundle.search import cache
from bundle.search import counterexample as neighbour_search
from bundle.search import disk as search_disk
from bundle.verify import verify
from harness.prepare import pack

ROOT = Path(__file__).resolve().parent.parent
GOLD = "SELECT name FROM Pet WHERE species = 'dog' AND weight > 10"
PREDICTIONS = [
    "SELECT name FROM Pet WHERE weight > 10 AND species = 'dog'",  # right: every database of the gold's set
    "SELECT name FROM Pet WHERE species = 'dog'",  # wrong
    "SELECT name FROM Pet WHERE species = 'dog' AND weight >= 10.5",  # adds a literal: a set of its own
]


def _task(path: Path, fingerprint: str = "fp") -> neighbour_search.Task:
    conn = neighbour_invariants.open_read_only(str(path))
    try:
        return neighbour_search.Task("pets_club", "fixture", GOLD, neighbour_mining.mine(conn), read_original(conn),
                                     fingerprint)
    finally:
        conn.close()


def _store(folder: Path) -> cache.Store:
    folder.mkdir()
    return cache.Store(folder=str(folder))


def _verdicts(task: neighbour_search.Task, path: Path, store: cache.Store) -> list[tuple]:
    out = []
    for prediction in PREDICTIONS:
        v = verify(prediction, task.gold, str(path), is_sql=True, limits=DEFAULT_LIMITS,
                   search=lambda sql, known: neighbour_search.search(task, sql, known, DEFAULT_LIMITS, store))
        out.append((v.outcome, v.score, v.detail, v.decided_on, v.searched))
    return out


@pytest.fixture
def pets(fixture_dbs) -> Path:
    return fixture_dbs["pets_club"]


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """A fresh disk folder named by the environment; its Disk (counts start at 0)."""
    folder = tmp_path / "kept"
    monkeypatch.setenv(search_disk.ENV, str(folder))
    disk = search_disk.from_env()
    assert disk is not None
    disk.hits = disk.saved = 0
    return disk


def _entries(disk: search_disk.Disk) -> list[Path]:
    return sorted(Path(disk.folder).rglob("*.json"))


def test_a_warm_folder_gives_the_cold_verdicts_and_builds_nothing(pets, kept, tmp_path, monkeypatch):
    monkeypatch.delenv(search_disk.ENV)
    plain = _verdicts(_task(pets), pets, _store(tmp_path / "a"))
    monkeypatch.setenv(search_disk.ENV, kept.folder)
    cold_store = _store(tmp_path / "b")
    assert _verdicts(_task(pets), pets, cold_store) == plain
    assert kept.hits == 0 and kept.saved == len(_entries(kept)) > DEFAULT_LIMITS.search_databases
    warm_store = _store(tmp_path / "c")
    assert _verdicts(_task(pets), pets, warm_store) == plain
    assert warm_store.built == 0 and kept.hits == kept.saved
    assert os.listdir(tmp_path / "c") == []  # read where the folder keeps them: nothing copied
    warm_store.forget()
    cold_store.forget()
    assert len(_entries(kept)) == kept.saved  # the stores never remove what the folder keeps
    assert all(Path(str(p)[:-5] + ".sqlite").is_file() for p in _entries(kept)
               if json.loads(p.read_text())["kind"] == "kept")


def test_a_task_without_a_fingerprint_keeps_nothing(pets, kept, tmp_path):
    _verdicts(_task(pets, fingerprint=""), pets, _store(tmp_path / "s"))
    assert kept.saved == 0 and _entries(kept) == []


def test_a_damaged_entry_is_drawn_again_and_mended(pets, kept, tmp_path):
    first = _verdicts(_task(pets), pets, _store(tmp_path / "a"))
    databases = sorted(Path(kept.folder).rglob("*.sqlite"))
    records = _entries(kept)
    body = databases[0].read_bytes()
    databases[0].write_bytes(body[:-1] + bytes([body[-1] ^ 1]))  # one bit: another digest
    records[-1].write_text("{not json")
    os.remove(databases[1])
    saved = kept.saved
    store = _store(tmp_path / "b")
    assert _verdicts(_task(pets), pets, store) == first
    assert store.built >= 2 and kept.saved - saved >= 3  # drawn again, and kept again
    assert databases[0].read_bytes() == body and databases[1].is_file()
    json.loads(records[-1].read_text())


def test_a_folder_that_cannot_be_written_changes_no_verdict(pets, tmp_path, monkeypatch):
    first = _verdicts(_task(pets, fingerprint=""), pets, _store(tmp_path / "a"))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(search_disk.ENV, str(blocker / "kept"))
    disk = search_disk.from_env()
    assert disk is not None
    assert _verdicts(_task(pets), pets, _store(tmp_path / "b")) == first
    assert disk.saved == 0 and disk.hits == 0


def test_the_key_names_the_code_the_database_its_invariants_and_the_set(pets):
    base = search_disk.fingerprint("a" * 64, {"profile": 1})
    assert base == search_disk.fingerprint("a" * 64, {"profile": 1})
    assert base != search_disk.fingerprint("b" * 64, {"profile": 1})
    assert base != search_disk.fingerprint("a" * 64, {"profile": 2})
    names = {search_disk.set_name((base, GOLD, DEFAULT_LIMITS, None)),
             search_disk.set_name((base, GOLD + " ", DEFAULT_LIMITS, None)),
             search_disk.set_name((base, GOLD, DEFAULT_LIMITS.replace(search_databases=7), None)),
             search_disk.set_name((base, GOLD, DEFAULT_LIMITS, (("weight", (10.5,)),), )),
             search_disk.set_name(("other", GOLD, DEFAULT_LIMITS, None))}
    assert len(names) == 5


def test_the_code_digest_changes_with_any_bundle_module(tmp_path):
    """Each bundle module's bytes are in the key: a copy of the bundle with one byte changed in one
    module has another digest (read in a fresh process, the copy's own)."""
    copy = tmp_path / "bundle"
    pack.stage_modules(copy, ROOT / "bundle")
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import bundle.search.disk as d; print(d.code_digest())"

    def digest() -> str:
        return subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                              check=True).stdout.strip()

    before = digest()
    assert len(before) == 64
    with (copy / "sql" / "compare.py").open("a") as handle:  # a module of a subpackage
        handle.write("\n# one more line\n")
    after = digest()
    assert after != before
    with (copy / "reward.py").open("a") as handle:  # an entry file at the root
        handle.write("\n# one more line\n")
    assert digest() != after


def test_a_second_process_grades_from_the_folder_the_first_kept(neighbour_bundle, tmp_path):
    """Through the bundle's entry, as `grade` calls it: two processes, the second reads every
    database the first built, and both give the same verdicts."""
    index = json.loads((neighbour_bundle / "data" / "index.json").read_text())
    rows = [r for r in index["rows"] if r["db_id"] in index.get("invariants", {})][:4]
    assert rows, "the sample bundle has rows on databases with neighbours"
    probe = """
import json, sys
sys.path.insert(0, sys.argv[1])
from bundle.scoring import entry as scoring_entry
from bundle.search import disk as search_disk
rows = json.loads(sys.argv[3])
out = []
for row in rows:
    for answer in (row["gold"] + " -- the same", "SELECT 1"):
        call = scoring_entry.read_call({"solution_str": answer, "ground_truth": row["gold"],
                                        "extra_info": {"db_id": row["db_id"]}})
        v = scoring_entry.score_call(call, scoring_entry.current_limits(), root=sys.argv[2], caller="grader")
        out.append([v.outcome, v.score, v.detail])
disk = search_disk.from_env()
print(json.dumps({"verdicts": out, "hits": disk.hits, "saved": disk.saved}))
"""
    env = dict(os.environ, **{search_disk.ENV: str(tmp_path / "kept")})

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", probe, str(ROOT), str(neighbour_bundle), json.dumps(rows)],
                              env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.splitlines()[-1])

    first, second = run(), run()
    assert first["saved"] > 0 and first["hits"] == 0
    assert second["hits"] == first["saved"] and second["saved"] == 0
    assert second["verdicts"] == first["verdicts"]


def test_the_harness_names_the_folder_by_the_bundle_s_own_variable(tmp_path):
    from harness.common import search_cache
    assert search_cache.ENV == search_disk.ENV
    with search_cache.keeping(tmp_path):
        disk = search_disk.from_env()
        assert disk is not None and disk.folder == str(tmp_path)
    assert search_disk.ENV not in os.environ or os.environ[search_disk.ENV] != str(tmp_path)
