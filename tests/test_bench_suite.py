"""`bench` as it runs (harness.bench.suite): one family after another, each family's figures printed
as soon as it is measured, `--only` choosing families; and the grader family's scorers side by side
on the sample (the official evaluator stood in for by a small module of the same interface)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.bench import grader, prepare_time, published, suite
from harness.bench.evaluator import Evaluator
from harness.cli import main
from harness.common.errors import HarnessError, InputError

ROOT = Path(__file__).resolve().parent.parent

# Two fake families in a child process writing into a pipe: the second waits (a guard of 60 s) for
# the parent to have read the first one's figure line, so it passes only if that line was flushed
# out before the second family started.
CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from harness.bench import suite
    flag = Path(sys.argv[1])

    def wait_for_the_reader(context):
        deadline = time.monotonic() + 60
        while not flag.exists():
            if time.monotonic() > deadline:
                raise SystemExit("the first family's figure never reached the reader")
            time.sleep(0.02)
        return {"seen": True}

    families = [suite.Family("one", "the first", lambda c: {"x": 41},
                             lambda f, _: print(f"one's figure {f['x'] + 1}")),
                suite.Family("two", "the second", wait_for_the_reader, lambda f, _: print(f"two's figure {f['seen']}"))]
    suite.run(suite.Context(Path("."), Path(".")), families)
""")


def test_each_family_s_figures_reach_a_pipe_before_the_next_family_starts(tmp_path):
    flag = tmp_path / "seen"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe buffers, as under make | tee
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(flag)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    lines = []
    for line in child.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("one's figure"):
            flag.touch()
    assert child.wait(timeout=120) == 0, child.stderr.read() if child.stderr else ""
    assert lines[0] == "[1/2] one: the first ..." and lines[1] == "one's figure 42"
    assert lines[2].startswith("  (one: ") and lines[3] == "[2/2] two: the second ..."
    assert lines[4] == "two's figure True"


def test_the_families_run_by_default_leave_out_prepare_and_only_chooses():
    names = [f.name for f in suite.chosen(None)]
    assert names[:2] == ["calls", "grader"] and "labels" in names and "prepare" not in names
    assert [f.name for f in suite.chosen(["prepare"])] == ["prepare"]
    assert [f.name for f in suite.chosen(["labels", "calls"])] == ["calls", "labels"]  # in the suite's order
    with pytest.raises(InputError, match="--only nope: no such family.*calls, grader"):
        suite.chosen(["nope"])


def test_an_unknown_family_is_refused_before_anything_runs(tmp_path, capsys):
    (tmp_path / "dev.json").write_text("[]")
    assert main(["bench", "--spider", str(tmp_path), "--only", "calls,nope"]) == InputError.exit_code
    assert "--only nope: no such family" in capsys.readouterr().err


# --- the grader family, on the sample -------------------------------------------------------------

FAKE_EVALUATOR = '''
import os, sqlite3
from parse import same_bag

CALLS = []

def eval_exec_match(db, p_str, g_str, plug_value, keep_distinct, progress_bar_for_each_datapoint):
    """Every database of db's folder, as the real one does; bags of rows compared."""
    CALLS.append((db, plug_value, keep_distinct))
    folder = os.path.dirname(db)
    for name in sorted(os.listdir(folder)):
        conn = sqlite3.connect(os.path.join(folder, name))
        try:
            gold = conn.execute(g_str).fetchall()
            try:
                pred = conn.execute(p_str).fetchall()
            except sqlite3.Error:
                return 0
        finally:
            conn.close()
        if not same_bag(gold, pred):
            return 0
    return 1
'''
FAKE_PARSE = "def same_bag(a, b):\n    return sorted(map(repr, a)) == sorted(map(repr, b))\n"


@pytest.fixture
def fake_evaluator(tmp_path, monkeypatch):
    folder = tmp_path / "test-suite-sql-eval"
    folder.mkdir()
    (folder / "exec_eval.py").write_text(FAKE_EVALUATOR)
    (folder / "parse.py").write_text(FAKE_PARSE)
    for name in ("exec_eval", "parse"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield Evaluator(folder)
    for name in ("exec_eval", "parse"):
        sys.modules.pop(name, None)


def sample_rows(root: Path) -> list[dict]:
    index = json.loads((root / "data" / "index.json").read_text())
    return [{"db_id": r["db_id"], "query": r["gold"]} for r in index["rows"]]


def test_the_grader_family_times_three_scorers_on_the_same_pairs(neighbour_bundle, fixture_dbs, fake_evaluator,
                                                                 capsys):
    rows = sample_rows(neighbour_bundle)
    f = grader.run(neighbour_bundle, rows, fixture_dbs.__getitem__, limit=12, evaluator=fake_evaluator)
    n = f["pairs"]
    assert f["golds"] == n["right"] == n["right_again"] == 12 and n["wrong"] + f["without_wrong"] == 12 and n["wrong"] > 0
    for name in grader.SCORERS:
        assert f[name]["right"]["accepted"] == n["right"]  # right answers: accepted by all three
        assert f[name]["right_again"]["accepted"] == n["right_again"]
        assert f[name]["wrong"]["accepted"] == 0  # wrong ones: by none
        assert f[name]["all"]["pairs_per_s"] > 0 and f[name]["all"]["pairs"] == sum(n.values())
    calls = fake_evaluator.module.CALLS
    assert len(calls) == sum(n.values())  # once a pair, outside the grader's set-up
    assert {(plug, keep) for _db, plug, keep in calls} == {(False, False)}  # evaluation.py's defaults
    grader.print_figures(f)
    out = capsys.readouterr().out
    assert "grader / evaluator, pairs a second of CPU time: right" in out and "not measured" not in out


def test_without_the_evaluator_its_line_says_how_to_give_it(neighbour_bundle, fixture_dbs, capsys):
    f = grader.run(neighbour_bundle, sample_rows(neighbour_bundle), fixture_dbs.__getitem__, limit=3, evaluator=None)
    assert "evaluator" not in f and f["grader_no_search"]["right"]["accepted"] == 3
    grader.print_figures(f)
    assert "evaluator         not measured: give --evaluator DIR" in capsys.readouterr().out


def test_an_evaluator_folder_without_its_modules_is_refused(tmp_path):
    with pytest.raises(InputError, match="no exec_eval.py and parse.py there.*taoyds/test-suite-sql-eval"):
        Evaluator(tmp_path)


def test_right_answers_differ_in_text_and_wrong_ones_in_rows(fixture_dbs):
    rows = [{"db_id": "school_sports", "query": "SELECT count(*) FROM Player WHERE points > 59"}] * 2
    pairs, without = grader.pairs_of(rows, fixture_dbs.__getitem__, 5)
    right, wrong, again = pairs
    assert (right.kind, wrong.kind, again.kind, without) == ("right", "wrong", "right_again", 0)
    assert right.answer != right.gold != again.answer != right.answer and again.answer.startswith(again.gold)
    assert wrong.answer == "SELECT count(*) FROM Player WHERE points > 60"



# --- the prepare family ---------------------------------------------------------------------------

def test_prepare_is_timed_with_the_command_make_bundle_runs(tmp_path):
    argv = prepare_time.command(Path("/spider"), (200, 100, 50), tmp_path / "out", tmp_path / "cache")
    assert argv[1:4] == ["-m", "harness", "prepare"]
    flags = dict(zip(argv[4::2], argv[5::2]))
    assert flags == {"--databases": "/spider/database", "--questions": "/spider", "--rows": "200", "--rl-rows": "100",
                     "--eval-rows": "50", "--output": str(tmp_path / "out"),
                     "--build-cache": str(tmp_path / "cache")}  # its own: cold is cold, whatever ran before
    makefile = (ROOT / "Makefile").read_text()
    assert "--databases $(SPIDER_DATABASES)" in makefile and "--rows $(ROWS)" in makefile
    assert prepare_time.SIZES == {"first try": (200, 100, 50), "default splits": (2000, 600, 300)}


def test_a_timed_run_counts_its_child_s_cpu_and_a_failing_one_says_so():
    busy = prepare_time.timed([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"])
    assert busy["cpu_s"] > 0 and busy["wall_s"] > 0
    with pytest.raises(HarnessError, match="prepare failed \\(exit 3\\).*no such folder"):
        prepare_time.timed([sys.executable, "-c", "import sys; sys.stderr.write('no such folder'); sys.exit(3)"])


# --- the published family, on the sample ------------------------------------------------------------

def test_the_published_family_grades_each_system_s_answers_beside_the_evaluator_on_one_core_and_on_every_core(
        neighbour_bundle, fixture_dbs, fake_evaluator, tmp_path, capsys):
    """Two systems' 'dev predictions' on a Spider-shaped folder of the sample: one right (the gold in
    another text), one wrong (a constant); right and wrong told by the evaluator, and the grader's
    verdicts the same on two processes as on one."""
    rows = sample_rows(neighbour_bundle)[:6]
    spider = tmp_path / "spider"
    for db_id in {r["db_id"] for r in rows}:
        (spider / "database" / db_id).mkdir(parents=True)
        (spider / "database" / db_id / f"{db_id}.sqlite").symlink_to(fixture_dbs[db_id])
    (spider / "dev.json").write_text(json.dumps(rows))
    (tmp_path / "good.sql").write_text("".join(r["query"] + " -- same\n" for r in rows))
    (tmp_path / "bad.sql").write_text("SELECT 'no'\n" * len(rows))
    f = published.run(neighbour_bundle, spider, rows, [tmp_path / "good.sql", tmp_path / "bad.sql"], fake_evaluator,
                      fixture_dbs.__getitem__, cores=2)
    assert f["systems"] == ["good", "bad"] and f["pairs"] == 12 and f["rows"] == 6
    assert f["right"] == 6 and f["accepted"] == 6 and f["unscored"] == 0
    assert f["grader"]["right"]["pairs"] == f["evaluator"]["right"]["pairs"] == 6
    assert f["grader"]["wrong"]["pairs"] == 6 and f["evaluator"]["all"]["pairs_per_s"] > 0
    assert len(fake_evaluator.module.CALLS) == 12  # once a pair
    assert f["every_core"]["processes"] == 2 and f["every_core"]["same_verdicts"]
    first, second, second_every = f["every_core"], f["second_one_core"], f["second_every_core"]
    assert first["kept"] > 0 and first["read"] == 0  # the right answers' searches built and kept their databases
    assert second["processes"] == 1 and second["same_verdicts"] and second_every["same_verdicts"]
    assert second["read"] == first["kept"] and second["kept"] == 0 == second_every["kept"]
    assert second["right"]["pairs"] == 6 == second["wrong"]["pairs"]
    pre, pre_one = f["prebuilt"], f["prebuilt_one_core"]
    assert pre["golds"] == 6 and pre["databases"] == 24 * 6  # every gold's own set, as prepare draws it
    assert pre_one["read"] > 0 and pre_one["same_verdicts"] and f["prebuilt_every_core"]["same_verdicts"]
    assert pre_one["kept"] == 0  # the right answers add nothing to their golds: nothing left to build
    published.print_figures(f)
    out = capsys.readouterr().out
    assert "grader on every core / evaluator on one" in out and "verdicts the same as on one core" in out
    assert "a second stage: grader / evaluator, one core" in out
    assert "a first stage after prepare's draw: grader / evaluator, one core" in out


def test_the_published_family_without_predictions_or_rows_says_what_to_give(tmp_path, capsys):
    published.print_figures(published.run(Path("."), Path("."), [], [], None, Path))
    assert "not measured: no predictions given: --published FILE" in capsys.readouterr().out
    (tmp_path / "dev.json").write_text("[]")
    (tmp_path / "one.sql").write_text("")
    published.print_figures(published.run(Path("."), tmp_path, [], [tmp_path / "one.sql"], None, Path))
    assert "not measured: no dev rows staged to answer: give --pairs N" in capsys.readouterr().out
