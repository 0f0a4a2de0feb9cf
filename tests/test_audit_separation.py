"""Build-time separation (harness/prepare/neighbours/separate.py): prepare closes the audit's holes
with neighbours that tell a paid degenerate answer from its gold, deterministically, without
turning down a fair answer, and each added neighbour judges every gold that may be judged there.

The search aimed at the difference (bundle/search/difference.py) rejects the sample's holes at scoring
time, so the builds here turn it off (``SPIDER_SCORING_DIFFERENCE=off``) to leave the audit holes to close."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import run_prepare
from harness.common.bundle_loader import load_bundle
from harness.emulator.calls import call_score
from harness.prepare import pack
from harness.prepare.neighbours import distil, separate

JAZZ = "SELECT name FROM Artist WHERE genre = 'jazz'"  # an rl gold of the sample: one artist, Mira Sol
MIRA = "SELECT 'Mira Sol'"  # its value written out: paid where every neighbour keeps Mira Sol the jazz artist


def _summary(out: Path) -> dict:
    return json.loads((out / "prepare-summary.json").read_text(encoding="utf-8"))


NO_DIFFERENCE = {"SPIDER_SCORING_DIFFERENCE": "off"}


def _paid(out: Path, tmp_path: Path, gold: str, sql: str) -> float | None:
    zip_path = tmp_path / f"{out.name}.zip"
    pack.pack(out / "bundle", zip_path)
    work = tmp_path / f"{out.name}-unpacked"
    work.mkdir(exist_ok=True)
    with load_bundle(zip_path, work) as loaded:
        return call_score(loaded.function("reward"), solution_str=sql, ground_truth=gold,
                          extra_info={"db_id": "music_shop"}).score


def _hackable(summary: dict) -> set[tuple[str, str]]:
    return {(e["gold"], p["sql"]) for e in summary["audit"]["hackable"] for p in e["paid"]}


@pytest.fixture(scope="module")
def no_difference():
    with pytest.MonkeyPatch.context() as patch:
        for name, value in NO_DIFFERENCE.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def left_open(tmp_path_factory, no_difference) -> Path:
    out = tmp_path_factory.mktemp("separation") / "open"
    run_prepare(out, "--sample", "--no-separation")
    return out


@pytest.fixture(scope="module")
def separated(tmp_path_factory, no_difference) -> Path:
    out = tmp_path_factory.mktemp("separation") / "closed"
    run_prepare(out, "--sample")
    return out


def test_a_hole_the_audit_finds_is_closed_at_build_time(separated, left_open, tmp_path):
    before, after = _summary(left_open), _summary(separated)
    assert (JAZZ, MIRA) in _hackable(before) and (JAZZ, MIRA) not in _hackable(after)
    assert _paid(left_open, tmp_path, JAZZ, MIRA) == 1.0 and _paid(separated, tmp_path, JAZZ, MIRA) == 0.0
    assert _paid(separated, tmp_path, JAZZ, JAZZ) == 1.0
    done = after["audit"]["separation"]
    assert done["before"]["rl"]["hackable"] == before["audit"]["splits"]["rl"]["hackable"]
    assert after["audit"]["splits"]["rl"]["hackable"] < before["audit"]["splits"]["rl"]["hackable"]
    assert done["closed"] >= 1 and sum(done["added"].values()) >= 1
    assert after["audit"]["rewrites"]["rejected"] == []


def test_an_added_neighbour_judges_the_golds_whose_holes_it_closes_and_others(separated):
    done = _summary(separated)["audit"]["separation"]
    index = json.loads((separated / "bundle" / "data" / "index.json").read_text(encoding="utf-8"))
    others = 0
    for db_id, count in done["added"].items():
        total = len(index["databases"][db_id]["neighbours"])
        closers = {(o["gold"], o["neighbour"]) for o in done["outcomes"] if o["db_id"] == db_id and o["neighbour"]}
        for k in range(total - count, total):
            judged = {gold for gold, per in index["neighbour_results"][db_id].items() if per[k] is not None}
            assert judged >= {gold for gold, n in closers if n == k + 1}
            others += len(judged - {gold for gold, _n in closers})
    assert others >= 1  # a neighbour added for one gold's hole judges other golds too


def test_the_same_inputs_build_the_same_neighbours(separated, tmp_path, no_difference):
    again = tmp_path / "again"
    run_prepare(again, "--sample")

    def digests(out: Path) -> dict[str, str]:
        folder = out / "bundle" / "data"
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted([folder / "index.json", *(folder / "neighbours").iterdir()])}

    assert sum(_summary(again)["audit"]["separation"]["added"].values()) >= 1
    assert digests(again) == digests(separated)


@pytest.fixture(scope="module")
def music_shop(fixture_dbs, tmp_path_factory) -> tuple[Path, distil.Distilled]:
    path = fixture_dbs["music_shop"]
    return path, distil.distil("music_shop", path, [JAZZ], tmp_path_factory.mktemp("music_distil"))


@pytest.mark.parametrize("fair, closed", [
    pytest.param((), True, id="with no rewrite to keep, a neighbour where another artist plays jazz closes it"),
    pytest.param(("SELECT name FROM Artist WHERE genre = 'jazz' ORDER BY name",), True,
                 id="a rewrite that stays right everywhere does not stop it"),
    pytest.param((MIRA,), False, id="a neighbour that would turn down a fair answer is never added"),
])
def test_a_neighbour_is_added_only_where_every_fair_answer_still_matches(music_shop, tmp_path, fair, closed):
    original, found = music_shop
    hole = separate.Hole("music_shop", JAZZ, MIRA, "value")
    built, outcomes = separate.close({"music_shop": found}, {"music_shop": original}, [hole],
                                     {("music_shop", JAZZ): fair}, tmp_path)
    assert (outcomes[0].neighbour is not None) == closed, outcomes[0].how
    assert len(built["music_shop"].files) == len(found.files) + closed
    if closed:
        assert outcomes[0].neighbour == len(built["music_shop"].files)
        assert built["music_shop"].results[JAZZ][-1] is not None


def test_a_database_without_neighbours_leaves_its_holes_open_and_says_why(tmp_path):
    hole = separate.Hole("nowhere", "SELECT 1", "SELECT 2")
    built, outcomes = separate.close({}, {}, [hole], {}, tmp_path)
    assert built == {} and outcomes[0].neighbour is None and "no neighbours" in outcomes[0].how


class _Closing:
    """A database whose added neighbours every one close the hole (``fits``), and one distilled neighbour."""

    def __init__(self, added: list) -> None:
        self.found = type("Found", (), {"files": [Path("distilled-1.sqlite")]})()
        self.added = added
        self.tried: list[Path] = []

    def fits(self, path: Path, hole: separate.Hole, prove: bool) -> object:
        self.tried.append(path)
        return f"{hole.gold} on {path}"


def test_a_hole_is_closed_first_where_its_gold_is_judged_already():
    """Closing it on a neighbour the gold is judged on costs the reward no new check."""
    other, judged = separate._Added(Path("a.sqlite"), {"SELECT other": "r"}), separate._Added(Path("b.sqlite"), {JAZZ: "r"})
    database = _Closing([other, judged])
    outcome = separate._close_one(database, separate.Hole("music_shop", JAZZ, MIRA), separate.Settings())
    assert (outcome.neighbour, outcome.how, database.tried) == (3, "added before", [Path("b.sqlite")])
    assert JAZZ not in other.results and judged.results[JAZZ] == "r"  # the gold's stored result stays
    outcome = separate._close_one(database, separate.Hole("music_shop", "SELECT new", MIRA), separate.Settings())
    assert (outcome.neighbour, other.results["SELECT new"]) == (2, "SELECT new on a.sqlite")  # none has it: the first


def _numbers(path: Path, values: list[int]) -> Path:
    import sqlite3
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    conn.close()
    return path


def test_every_gold_is_judged_on_every_added_neighbour_where_it_may_be(tmp_path):
    """A neighbour added for one gold's hole judges the database's other golds too, where each runs, what it
    presupposes holds and its fair rewrites match there; a gold that has no rows there is not judged on it."""
    from bundle.verify import gold_result
    from harness.prepare.neighbours.separate import _Database
    gold, other = "SELECT count(*) FROM t WHERE x > 1", "SELECT x FROM t WHERE x > 100"
    original = _numbers(tmp_path / "original.sqlite", [1, 2, 300])
    files = [_numbers(tmp_path / f"{name}.sqlite", rows) for name, rows in
             [("distilled", [1, 2, 3, 400]), ("added", [1, 200]), ("no-rows", [1, 5])]]
    limits = distil.build_limits()
    result = {(g, path): gold_result(g, str(path), limits) for g in (gold, other) for path in [original, *files]}
    from bundle.neighbours import mining as neighbour_mining
    from bundle.neighbours.invariants import open_read_only
    conn = open_read_only(str(original))
    profile = neighbour_mining.mine(conn)
    conn.close()
    found = distil.Distilled("numbers", files[:1], {gold: [result[(gold, files[0])]], other: [result[(other, files[0])]]},
                             {gold: result[(gold, original)], other: result[(other, original)]}, profile, frozenset(),
                             0, 0, 0, 0, 0, 0, 0)
    database = _Database(found, original, {other: ("SELECT x FROM t WHERE x >= 101",)}, tmp_path / "work")
    database.added = [separate._Added(files[1], {gold: result[(gold, files[1])]}),
                      separate._Added(files[2], {gold: result[(gold, files[2])]})]
    settled = separate._every_check(database)
    assert settled.files == files
    assert [r is not None for r in settled.results[gold]] == [True, True, True]
    assert [r is not None for r in settled.results[other]] == [True, True, False]  # no x over 100 on the last
    assert settled.results[other][1] == result[(other, files[1])]


# -- the same neighbours on CPython 3.9 (a Debian bullseye container) ----------------------------------

PY39_IMAGE = "spider-scoring-base:bullseye"
CLOSE_SCRIPT = r"""
import hashlib, json, shutil, sqlite3, sys, tempfile
from pathlib import Path
sys.path.insert(0, "/pkgs")
from harness.prepare.neighbours import distil, separate
assert sys.version_info[:2] == (3, 9), sys.version
work = Path(tempfile.mkdtemp())
original = work / "music_shop.sqlite"
shutil.copyfile("/pkgs/music_shop.sqlite", original)
found = distil.distil("music_shop", original, [sys.argv[1]], work / "distil")
built, outcomes = separate.close({"music_shop": found}, {"music_shop": original},
                                 [separate.Hole("music_shop", sys.argv[1], sys.argv[2])], {}, work / "close")
rows = lambda p: hashlib.sha256("\n".join(sqlite3.connect(str(p)).iterdump()).encode()).hexdigest()
print(json.dumps({"how": outcomes[0].how, "files": [rows(f) for f in built["music_shop"].files]}))
"""


def _closed_here(original: Path, work: Path) -> dict:
    import sqlite3
    found = distil.distil("music_shop", original, [JAZZ], work / "distil")
    built, outcomes = separate.close({"music_shop": found}, {"music_shop": original},
                                     [separate.Hole("music_shop", JAZZ, MIRA)], {}, work / "close")
    def rows(path: Path) -> str:
        conn = sqlite3.connect(str(path))
        try:
            return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
        finally:
            conn.close()
    return {"how": outcomes[0].how, "files": [rows(f) for f in built["music_shop"].files]}


@pytest.mark.docker
def test_the_separating_neighbour_holds_the_same_rows_on_python_39(docker_engine, fixture_dbs, tmp_path):
    """The file's bytes carry the SQLite version that wrote it; its rows are the same on 3.9 and here."""
    import shutil

    import docker
    client = docker.from_env()
    try:
        client.images.get(PY39_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"image {PY39_IMAGE} missing: build it with `make docker-base` (debootstrap, offline)")
    root = Path(__file__).resolve().parents[1]
    pkgs = tmp_path / "pkgs"
    for name in ("bundle", "harness"):
        shutil.copytree(root / name, pkgs / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(fixture_dbs["music_shop"], pkgs / "music_shop.sqlite")
    for path in [pkgs, *pkgs.rglob("*")]:  # the container runs as nobody
        path.chmod(0o755 if path.is_dir() else 0o644)
    output = client.containers.run(
        PY39_IMAGE, ["python3", "-c", CLOSE_SCRIPT, JAZZ, MIRA], remove=True, network_disabled=True,
        user="65534:65534", cap_drop=["ALL"], security_opt=["no-new-privileges"],
        environment={"PYTHONDONTWRITEBYTECODE": "1"}, volumes={str(pkgs): {"bind": "/pkgs", "mode": "ro"}},
        mem_limit="512m")
    there = json.loads(output.decode().strip().splitlines()[-1])
    here = _closed_here(pkgs / "music_shop.sqlite", tmp_path / "here")
    assert there == here and here["files"] and "open" not in here["how"]
