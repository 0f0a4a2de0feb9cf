"""Near misses of the golds (harness/audit/nearmiss/measure.py, oracle.py): which the bundle pays, which a fair
database could reject (the oracle and its witness), the figures per family and group, the gate, and
prepare's separation closing what the oracle finds, byte-reproducibly.

The near misses come from a small generator written here (``FAMILIES``): the tests are about the
measurement and the fix, not about harness.audit.nearmiss.families. The search aimed at the difference
(bundle/search/difference.py) rejects these near misses at scoring time, so the module turns it off
(``SPIDER_SCORING_DIFFERENCE=off``): what is measured here is the neighbours and their separation."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import sqlite3
import tempfile
from pathlib import Path

import pytest

from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours import proof as neighbour_proof
from harness.audit import entry
from harness.audit.nearmiss import families, loosened, oracle
from harness.audit.nearmiss import measure as nearmiss
from harness.audit.nearmiss import report as nearmiss_report
from harness.cli import main
from harness.commands.verify import near_miss_check
from harness.common.bundle_loader import load_bundle
from harness.common.errors import CHECKS_FAILED
from harness.emulator.calls import call_score
from harness.prepare import disputed, job, pack, splits
from harness.prepare.neighbours import edits

HILLTOP = ("SELECT T2.day FROM Station AS T1 JOIN Reading AS T2 ON T1.station_id = T2.station_id "
           "WHERE T1.name = 'Hilltop' AND T2.rain_mm > 3")  # an rl gold of the sample (weather)
AT_THE_BOUNDARY = HILLTOP.replace("> 3", ">= 3")  # no reading of Hilltop's is exactly 3 mm, on any neighbour


@dataclasses.dataclass(frozen=True)
class NearMiss:
    family: str
    sql: str
    note: str = ""


def _boundary(gold: str) -> list[str]:
    swap = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
    return [gold[:m.start()] + swap[m.group(1)] + gold[m.end():]
            for m in re.finditer(r"(?<![<>!=])(<=|>=|<|>)(?!=)", gold)]


def _literal(gold: str) -> list[str]:
    return [gold[:m.start()] + str(int(m.group(1)) + d) + gold[m.end():]
            for m in re.finditer(r"(?<![\w.'])(\d+)(?![\w.'])", gold) for d in (-1, 1)]


def _distinct(gold: str) -> list[str]:
    if re.match(r"(?i)\s*SELECT\s+DISTINCT\b", gold):
        return [re.sub(r"(?i)^\s*SELECT\s+DISTINCT\b", "SELECT", gold)]
    return [re.sub(r"(?i)^\s*SELECT\b", "SELECT DISTINCT", gold)]


def _limit(gold: str) -> list[str]:
    return [] if re.search(r"(?i)\blimit\b", gold) else [gold.rstrip("; ") + " LIMIT 1"]


MAKERS = {"boundary": _boundary, "literal": _literal, "distinct": _distinct, "limit": _limit}


def _near_misses(gold: str, database: Path | None = None, *, families=None) -> list[NearMiss]:
    return [NearMiss(name, sql) for name in (families or tuple(MAKERS)) for sql in MAKERS[name](gold)]


FAMILIES = nearmiss.Families(_near_misses, ("boundary", "literal"), ("distinct", "limit"),
                             {"boundary": "a comparison at its boundary", "literal": "a number one either side",
                              "distinct": "DISTINCT added or removed", "limit": "LIMIT 1 added"})


def _prepare(out: Path, fixture_dbs: dict[str, Path], *, separation: bool, which: str | None = "all") -> dict:
    rules = splits.Rules(splits.Catalog(fixture_dbs, job.DEFAULT_MAX_SCHEMA), splits.GoldChecker(),
                         disputed=disputed.load(disputed.DEFAULT_PATH))

    def review(staged: Path, purpose: str, work: Path) -> job.Review:
        return entry.review(staged, drop_hackable=False, purpose=purpose, work=work, near_miss_families=which,
                            families=FAMILIES, threads=2)

    plan = job.NeighbourPlan(separation=job.separate.Settings() if separation else None)
    summary = job.prepare(job.sample_source(), rules, job.SAMPLE_SIZES, out, neighbours=plan, review=review)
    pack.pack(out / "bundle", out / "spider-scoring.zip")
    return summary


@pytest.fixture(scope="module", autouse=True)
def no_difference():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPIDER_SCORING_DIFFERENCE", "off")
        yield


@pytest.fixture(scope="module")
def left_open(fixture_dbs, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("near_misses_open")
    return out, _prepare(out, fixture_dbs, separation=False)


@pytest.fixture(scope="module")
def separated(fixture_dbs, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("near_misses_separated")
    return out, _prepare(out, fixture_dbs, separation=True)


def _reward(zip_path: Path, tmp_path: Path, gold: str, sql: str) -> float | None:
    with load_bundle(zip_path, tempfile.mkdtemp(dir=tmp_path)) as loaded:
        return call_score(loaded.function("reward"), solution_str=sql, ground_truth=gold,
                          extra_info={"db_id": "weather"}).score


def _kinds(summary: dict, sql: str) -> set[str]:
    near = summary["audit"]["near_misses"]
    return {"missed" for e in near["missed"] if e["sql"] == sql} | {"blocked" for e in near["blocked"] if e["sql"] == sql}


# -- the measurement ------------------------------------------------------------------------------

def test_a_boundary_near_miss_is_paid_before_the_separation_and_rejected_after(left_open, separated, tmp_path):
    (before_out, before), (after_out, after) = left_open, separated
    assert _reward(before_out / "spider-scoring.zip", tmp_path, HILLTOP, AT_THE_BOUNDARY) == 1.0
    assert _kinds(before, AT_THE_BOUNDARY) == {"missed"}
    witness = next(e["witness"] for e in before["audit"]["near_misses"]["missed"] if e["sql"] == AT_THE_BOUNDARY)
    assert witness.startswith("boundary: Reading.rain_mm") and "set to 3.0" in witness
    assert _reward(after_out / "spider-scoring.zip", tmp_path, HILLTOP, AT_THE_BOUNDARY) == 0.0
    assert _reward(after_out / "spider-scoring.zip", tmp_path, HILLTOP, HILLTOP) == 1.0
    assert _kinds(after, AT_THE_BOUNDARY) == set()
    closed = [o for o in after["audit"]["separation"]["outcomes"] if o["sql"] == AT_THE_BOUNDARY]
    assert closed and closed[0]["neighbour"] is not None and closed[0]["policy"] == "near miss: boundary"
    rl_before = after["audit"]["separation"]["near_misses_before"]["rl"]
    assert rl_before["missed"] > after["audit"]["near_misses"]["splits"]["rl"]["groups"]["all"]["missed"]
    assert after["audit"]["rewrites"]["rejected"] == []


def test_every_kind_is_met_and_the_figures_add_up(left_open):
    near = left_open[1]["audit"]["near_misses"]
    assert near["format"] == nearmiss.FORMAT and near["oracle"]["purpose"] == "measure"
    met = set()
    for name, split in near["splits"].items():
        every = split["groups"]["all"]
        assert every["near_misses"] == sum(every[kind] for kind in nearmiss.KINDS)
        assert every["kill_rate"] == nearmiss.kill_rate(every)
        for family, counts in split["families"].items():
            assert counts["near_misses"] == sum(counts[kind] for kind in nearmiss.KINDS), family
        met |= {kind for kind in nearmiss.KINDS if every[kind]}
        assert split["rows_with_missed"] == len({e["id"] for e in near["missed"] if e["split"] == name})
    assert met >= {"original", "killed", "missed", "blocked", "equivalent"}
    assert all(e["blocked_by"] and set(e["blocked_by"]) <= set(loosened.KINDS) for e in near["blocked"])


def test_tuning_and_held_out_families_are_counted_apart(left_open):
    near = left_open[1]["audit"]["near_misses"]
    for split in near["splits"].values():
        for group, names in (("tuning", FAMILIES.tuning), ("held_out", FAMILIES.held_out)):
            for kind in ("near_misses", *nearmiss.KINDS):
                assert split["groups"][group][kind] == sum(split["families"].get(f, {}).get(kind, 0) for f in names)
        for kind in nearmiss.KINDS:
            assert split["groups"]["all"][kind] == split["groups"]["tuning"][kind] + split["groups"]["held_out"][kind]
    assert {near["families"][f]["group"] for f in FAMILIES.tuning} == {"tuning"}
    assert {near["families"][f]["group"] for f in FAMILIES.held_out} == {"held_out"}
    lines = nearmiss_report.render(near)
    assert any(line.startswith("tuning families") for line in lines)
    assert any(line.startswith("held-out families") for line in lines)


def test_the_separation_closes_only_the_families_it_is_told_to(fixture_dbs, tmp_path):
    summary = _prepare(tmp_path / "tuning", fixture_dbs, separation=True, which="tuning")
    done = summary["audit"]["separation"]["outcomes"]
    assert {o["policy"] for o in done if o["policy"].startswith("near miss")} <= {"near miss: boundary",
                                                                                  "near miss: literal"}
    assert set(summary["audit"]["near_misses"]["splits"]["rl"]["families"]) >= {"distinct", "boundary"}  # measured: all


def test_the_gate_fails_verify_when_set_above_the_measured_rate(left_open):
    near = left_open[1]["audit"]["near_misses"]
    rates = [s["groups"]["all"]["kill_rate"] for s in near["splits"].values() if s["groups"]["all"]["kill_rate"]]
    least = min(rates)
    assert near_miss_check(near, least)["passed"]
    failed = near_miss_check(near, least + 0.01)
    assert not failed["passed"] and "under the least kill rate" in failed["summary"] and failed["failures"]
    assert nearmiss_report.below(near, least + 0.01) and not nearmiss_report.below(near, least)


def test_audit_fails_under_the_least_kill_rate_and_passes_at_the_rate_it_measures(left_open, tmp_path, capsys):
    """On the command line, with the project's own families: the bundle left open pays near misses a
    fair database shows wrong, and `audit` holds it to --min-kill-rate."""
    zip_path, out = left_open[0] / "spider-scoring.zip", tmp_path / "audit.json"
    assert main(["audit", "--zip", str(zip_path), "--max-hackable", "100%", "--json", str(out)]) == CHECKS_FAILED
    assert "under the least kill rate of 90.0%" in capsys.readouterr().err
    near = json.loads(out.read_text(encoding="utf-8"))["near_misses"]
    every = [s["groups"]["all"] for s in near["splits"].values() if s["groups"]["all"]["kill_rate"] is not None]
    least = math.floor(min(c["killed"] / (c["killed"] + c["missed"]) for c in every) * 1e6) / 1e6  # not above it
    assert set(near["families"]) >= set(families.ALL) and near["missed"]
    assert main(["audit", "--zip", str(zip_path), "--max-hackable", "100%", "--min-kill-rate", str(least)]) == 0


def test_rows_whose_gold_is_disputed_are_left_out_and_counted():
    class Index:
        def index(self) -> dict:
            return {"rows": [{"id": "rl-00000", "split": "rl", "db_id": "a", "gold": "SELECT 1"},
                             {"id": "rl-00001", "split": "rl", "db_id": "a", "gold": "SELECT 2", "disputed": "d-1"},
                             {"id": "eval-00000", "split": "eval", "db_id": "b", "gold": "SELECT 3"}]}

    rows, left_out = nearmiss.rows_of(Index(), ("rl", "eval"))  # type: ignore[arg-type]
    assert [r.id for r in rows] == ["rl-00000", "eval-00000"] and left_out == {"rl": 1, "eval": 0}


def test_the_same_inputs_give_the_same_zip(separated, fixture_dbs, tmp_path):
    again = tmp_path / "again"
    _prepare(again, fixture_dbs, separation=True)
    digest = [hashlib.sha256((out / "spider-scoring.zip").read_bytes()).hexdigest() for out in (separated[0], again)]
    assert digest[0] == digest[1]
    assert any(o["how"].startswith("the oracle's witness") for o in separated[1]["audit"]["separation"]["outcomes"])


# -- the oracle -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def weather(fixture_dbs) -> Path:
    return fixture_dbs["weather"]


def test_the_oracles_witness_keeps_every_invariant_and_tells_the_near_miss_apart(weather, tmp_path):
    found = oracle.Oracle("weather", weather, [HILLTOP], tmp_path).judge(HILLTOP, [AT_THE_BOUNDARY])[AT_THE_BOUNDARY]
    assert found.kind == oracle.MISSED and found.path is not None
    conn = neighbour_invariants.open_read_only(str(weather))
    profile = neighbour_mining.mine(conn)
    conn.close()
    here = neighbour_invariants.open_read_only(str(found.path))
    try:
        assert neighbour_proof.violations(profile, here) == []
        assert here.execute(HILLTOP).fetchall() != here.execute(AT_THE_BOUNDARY).fetchall()
    finally:
        here.close()


def test_measurement_and_build_draw_other_databases_each_the_same_every_time(weather, tmp_path):
    def pool(settings: oracle.Settings, work: Path) -> list[bytes]:
        made = oracle.Oracle("weather", weather, [HILLTOP], work, settings)._shared_pool()
        return [t.path.read_bytes() for t in made if t is not None]

    measured, built = pool(oracle.MEASURE, tmp_path / "a"), pool(oracle.BUILD, tmp_path / "b")
    assert measured and built and measured != built
    assert pool(oracle.MEASURE, tmp_path / "c") == measured


def test_a_near_miss_only_a_broken_invariant_shows_wrong_is_blocked_and_named(tmp_path):
    path = tmp_path / "club.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE member(id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INT NOT NULL);"
                           "INSERT INTO member VALUES (1, 'Ann', 30), (2, 'Bob', 41), (3, 'Cy', 52), (4, 'Dee', 63);")
    conn.close()
    gold = "SELECT count(*) FROM member WHERE age > 40"
    distinct, next_age = "SELECT count(DISTINCT name) FROM member WHERE age > 40", "SELECT count(*) FROM member WHERE age >= 41"
    found = oracle.Oracle("club", path, [gold], tmp_path / "work").judge(gold, [distinct, next_age])
    # names are unique: only a database repeating one tells the distinct names from the members; an
    # integer age between 40 and 41 no database can hold
    assert found[distinct].kind == oracle.BLOCKED and "unique" in found[distinct].blocked_by
    assert found[next_age].kind == oracle.EQUIVALENT


BREAKS = [
    ("UPDATE child SET name = 'a' WHERE id = 2", "unique"),
    ("UPDATE child SET age = NULL WHERE id = 1", "not null"),
    ("UPDATE child SET pid = 9 WHERE id = 1", "link"),
    ("INSERT INTO parent VALUES (3, 'z')", "every parent referenced"),
    ("DELETE FROM child", "rows"),
]


@pytest.mark.parametrize("change, kind", [pytest.param(c, k, id=k) for c, k in BREAKS])
def test_the_kinds_a_database_breaks_are_named(tmp_path, change, kind):
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE parent(pid INTEGER PRIMARY KEY, label TEXT NOT NULL);"
                           "CREATE TABLE child(id INTEGER PRIMARY KEY, pid INT REFERENCES parent(pid), name TEXT, age INT);"
                           "INSERT INTO parent VALUES (1, 'x'), (2, 'y');"
                           # four children: a table above three rows, so not a thin database (whose
                           # invariants are only the declared ones: bundle/neighbours/thin.py)
                           "INSERT INTO child VALUES (1, 1, 'a', 30), (2, 1, 'b', 31), (3, 2, 'c', 32), (4, 2, 'd', 33);")
    conn.close()
    read = neighbour_invariants.open_read_only(str(path))
    profile = neighbour_mining.mine(read)
    read.close()
    with sqlite3.connect(path) as conn:
        conn.execute(change)
    conn.close()
    read = neighbour_invariants.open_read_only(str(path))
    try:
        found = loosened.broken_kinds(profile, read)
        assert kind in found and loosened.OTHER not in found, found
        assert all(loosened.kind_of(line) != loosened.OTHER for line in neighbour_proof.violations(profile, read))
    finally:
        read.close()


@pytest.mark.parametrize("gold, wanted", [
    pytest.param("SELECT x FROM t WHERE v < 50", {50, 49, 51}, id="a comparison's literal, then one either side"),
    pytest.param("SELECT x FROM t WHERE v BETWEEN 3 AND 9", {2, 4, 8, 10},
                 id="a BETWEEN bound itself is never set (both readings are fair), the values next to it are"),
])
def test_boundary_edits_take_the_literal_and_leave_between_bounds_alone(tmp_path, gold, wanted):
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE t(x INT, v INT); INSERT INTO t VALUES (1, 10), (2, 70);")
    conn = sqlite3.connect(path)
    try:
        from bundle.neighbours import values as nv
        literals, bounds = nv.literals_by_column(gold, {"x", "v"}), nv.between_bounds(gold, {"x", "v"})
        made = list(edits.boundary(conn, [("t", "v", "INT")], literals, bounds))
    finally:
        conn.close()
    assert {edit[0][1][0] for _what, edit in made} == wanted


def test_the_counts_document_names_each_missed_near_miss_with_its_row_and_witness(left_open):
    near = left_open[1]["audit"]["near_misses"]
    assert near["missed"]
    for entry_ in near["missed"]:
        assert entry_["witness"] and entry_["family"] in MAKERS and entry_["split"] in ("rl", "eval")
    assert json.loads(json.dumps(near)) == near


def test_the_oracles_give_the_same_figures_in_one_process_and_in_several(left_open, tmp_path):
    """One oracle a database, each in a process of its own: the same verdicts and witnesses as all of
    them in this process (each draws from its own database's seeds)."""
    def measured(processes: int) -> dict:
        with load_bundle(left_open[0] / "spider-scoring.zip", tempfile.mkdtemp(dir=tmp_path)) as loaded:
            doc = nearmiss.measure(loaded, families=FAMILIES, threads=2, processes=processes).doc
        return {k: v for k, v in doc.items() if k != "seconds"}
    alone, shared = measured(1), measured(2)
    assert alone["work"]["paid"] > 0 and alone["work"]["oracle_databases"] > 0
    assert sum(s["groups"]["all"]["killed"] for s in alone["splits"].values()) > 0
    assert shared == alone


def test_the_near_misses_made_one_database_a_process_are_those_made_on_threads(prepared_sample, monkeypatch):
    index = json.loads((prepared_sample / "bundle" / "data" / "index.json").read_text())
    data = prepared_sample / "bundle" / "data"
    files = {db_id: data / entry["file"] for db_id, entry in index["databases"].items()}
    golds = sorted({(r["db_id"], r["gold"]) for r in index["rows"] if r["split"] in ("rl", "eval")})
    made = nearmiss.default_families()
    threads = nearmiss.generate(made, files, golds, made.chosen("all"), 4, processes=1)
    monkeypatch.setattr(nearmiss, "GOLDS_A_PROCESS", 1)  # the sample's few golds, made in processes all the same
    spawned = nearmiss.generate(made, files, golds, made.chosen("all"), 4, processes=2)
    assert sum(len(v) for v in threads[0].values()) > 100 and spawned == threads


def test_boundary_edits_start_on_the_rows_the_other_conditions_keep_and_reach_every_column(tmp_path):
    """``year = 1956 AND total > 400``: a total of 400 shows only on a row of 1956, so those rows come
    first; and each column gets its turn before the oracle's cap (a query's year is no reason to spend
    every edit on year)."""
    path = tmp_path / "e.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE e(year INT, total INT, fte INT);"
                           + "".join(f"INSERT INTO e VALUES ({1950 + k % 9}, {k * 37 % 500}, 300);" for k in range(40)))
    gold = "SELECT * FROM e WHERE year = 1956 AND total > 400"
    conn = sqlite3.connect(path)
    try:
        from bundle.neighbours import values as nv
        literals = nv.literals_by_column(gold, {"year", "total", "fte"})
        conditions = nv.comparisons_by_column(gold, {"year", "total", "fte"})
        assert conditions == {"year": [("=", 1956)], "total": [(">", 400)]}
        assert nv.comparisons_by_column("SELECT 1 FROM e WHERE e.fte <> 3 AND \"year\" >= 'x' AND total = \"y\"",
                                {"year", "total", "fte"}) == {"fte": [("<>", 3)], "year": [(">=", "x")], "total": [("=", "y")]}
        made = list(itertools.islice(edits.boundary(conn, [("e", "year", "INT"), ("e", "total", "INT")], literals, {},
                                                    conditions), 6))
        years = dict(conn.execute("SELECT rowid, year FROM e"))
    finally:
        conn.close()
    columns = [what.split(" of row")[0] for what, _edit in made]
    assert columns == ["e.year", "e.total"] * 3
    totals = [edit[0][1][1] for what, edit in made if what.startswith("e.total")]
    assert totals and all(years[rowid] == 1956 for rowid in totals)
