"""The emulated trainer in-process: loading a zip like the trainer, reward steps, grader mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.common import bundle_loader as emulate
from harness.common.errors import InputError, PackError
from harness.common.layout import Prepared
from harness.common.results import read_results, write_results
from harness.common.rows import read_split, read_split_lenient
from harness.emulator import grader_job, reward_job
from harness.emulator import main as emulate_main
from harness.emulator.calls import call_score

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_COMPLETIONS = ROOT / "fixtures" / "sample" / "completions-eval.jsonl"


@pytest.fixture
def loaded(sample_zip, tmp_path):
    with emulate.load_bundle(sample_zip, tmp_path) as bundle:
        yield bundle


# --- loading --------------------------------------------------------------------------------------

def test_loads_as_a_read_only_package_with_relative_imports_and_the_root_variable(loaded):
    reward = loaded.module("reward")
    assert reward.__name__ == f"{loaded.package}.reward"
    assert reward.scoring_entry.__name__ == f"{loaded.package}.scoring.entry"  # `from .scoring import` worked
    assert reward.scoring_entry.verify_mod.__name__ == f"{loaded.package}.sql.verdict"  # and `from ..sql import` below it
    assert Path(reward.__file__).parent == loaded.root
    assert os.environ["TRAINER_BUNDLE_ROOT"] == str(loaded.root)
    modes = [stat.S_IMODE(p.stat().st_mode) for p in loaded.root.rglob("*")]
    assert modes and all(mode & 0o222 == 0 for mode in modes)  # nothing writable
    assert not list(loaded.root.rglob("__pycache__"))


def test_close_forgets_the_modules_and_removes_the_copy(sample_zip, tmp_path):
    bundle = emulate.load_bundle(sample_zip, tmp_path)
    bundle.function("reward")
    bundle.close()
    assert not [n for n in sys.modules if n.startswith(bundle.package)]
    assert not bundle.workdir.exists()
    assert os.environ.get("TRAINER_BUNDLE_ROOT") != str(bundle.root)


def test_two_bundles_never_share_modules(sample_zip, tmp_path):
    with emulate.load_bundle(sample_zip, tmp_path) as one, emulate.load_bundle(sample_zip, tmp_path) as two:
        assert one.package != two.package
        assert one.module("verify") is not two.module("verify")


@pytest.mark.parametrize("spec, expected", [
    ("reward", ("reward", "compute_score")),
    ("grader:grade", ("grader", "grade")),
    ("reward:trl_reward", ("reward", "trl_reward")),
])
def test_function_specs(spec, expected):
    assert emulate.parse_function_spec(spec) == expected


@pytest.mark.parametrize("spec, phrase", [
    ("reward:nope", "no function 'nope'"),
    ("missing", "no module 'missing'"),
    ("re-ward", "not MODULE[:FUNCTION]"),
    ("reward:a:b", "not MODULE[:FUNCTION]"),
])
def test_bad_function_specs_say_what_is_wrong(loaded, spec, phrase):
    with pytest.raises(InputError, match=phrase.replace("[", r"\[").replace("]", r"\]")):
        loaded.function(spec)


def _zip_with(tmp_path: Path, source: Path, extra: dict[str, bytes], skip: set[str] = frozenset()) -> Path:
    target = tmp_path / "crafted.zip"
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as out:
        for info in src.infolist():
            if info.filename not in skip:
                out.writestr(info, src.read(info))
        for name, data in extra.items():
            out.writestr(name, data)
    return target


@pytest.mark.parametrize("name", ["../escaped.py", "/tmp/absolute.py", "data/../../escaped.py"])
def test_unsafe_entries_are_refused_before_anything_is_written(sample_zip, tmp_path, name):
    crafted = _zip_with(tmp_path, sample_zip, {name: b"X = 1\n"})
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(PackError, match="refused"):
        emulate.load_bundle(crafted, work)
    assert list(work.iterdir()) == []  # the temporary folder was removed, nothing escaped
    assert not (tmp_path / "escaped.py").exists()


def test_a_bundle_without_init_still_imports_as_a_package(sample_zip, tmp_path):
    crafted = _zip_with(tmp_path, sample_zip, {}, skip={"__init__.py"})
    with emulate.load_bundle(crafted, tmp_path) as bundle:
        assert "__init__.py" not in bundle.entries
        gold = bundle.index()["rows"][0]["gold"]
        assert bundle.function("reward")(solution_str=gold, ground_truth=gold) == 1.0


# --- calls ----------------------------------------------------------------------------------------

class ScoringInfrastructureError(RuntimeError):
    code = "scoring_infrastructure"


class GoldQueryError(ScoringInfrastructureError):
    code = "gold_query"


class LooksTyped(RuntimeError):
    code = 404  # a code, but not one of the bundle's: a crash like any other


def _raise(exc: BaseException):
    def fn(**kwargs):
        raise exc
    return fn


@pytest.mark.parametrize("fn, kind, outcome", [
    (lambda **kw: 1.0, "scored", ""),
    (lambda **kw: {"score": 0.0}, "scored", ""),
    (_raise(GoldQueryError("gold failed")), "unscored", "gold_error"),
    (_raise(ScoringInfrastructureError("db gone")), "unscored", "infrastructure_error"),
    (_raise(TypeError("bug")), "crash", "crash"),
    (_raise(LooksTyped("HTTP")), "crash", "crash"),
    (lambda **kw: 2.0, "bad_return", "bad_return"),
    (lambda **kw: True, "bad_return", "bad_return"),
    (lambda **kw: None, "bad_return", "bad_return"),
], ids=["float", "verl dict", "gold error", "infrastructure", "bug", "another code", "over one", "bool", "none"])
def test_calls_are_classified_by_the_error_code_never_swallowed(fn, kind, outcome):
    call = call_score(fn)
    assert (call.kind, call.outcome or "") == (kind, outcome)
    assert (call.score is None) == (kind != "scored")


# --- reward mode ----------------------------------------------------------------------------------

def test_reward_steps_with_synthetic_completions(loaded, prepared_sample):
    rows = read_split(prepared_sample / "data" / "rl.jsonl", "rl")
    groups = reward_job.groups_for(rows, None, 8)
    stats = reward_job.reward_steps(loaded, rows, groups, prompts_per_step=8, threads=4)
    assert len(stats) == -(-len(rows) // 8)  # one pass over rl.jsonl
    for step in stats:
        # Each group: gold and fenced gold (1.0), a query returning nothing and prose (0.0), twice.
        # rl golds never return nothing (prepare keeps those out), so exactly half score 1.
        assert step.calls == 64 and step.scored == 64
        assert (step.mean, step.share_zero, step.share_full) == (0.5, 0.5, 0.5)
        assert {k: v for k, v in step.outcomes.items() if v} == {"match": 32, "mismatch": 16, "no_query": 16}
    summary = reward_job.reward_summary(stats)
    assert summary["calls"] == 64 * len(stats) and summary["mean"] == 0.5 and summary["crashes"] == 0


def test_reward_steps_with_a_completions_file_wrap_around_the_split(loaded, prepared_sample, tmp_path):
    rows = read_split(prepared_sample / "data" / "rl.jsonl", "rl")
    lines = [json.dumps({"row_id": r.id, "completions": [r.gold, "SELECT 1"]}) for r in rows]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    document = emulate_main.job_reward(loaded.zip_path, Prepared(prepared_sample), tmp_path / "c.jsonl",
                                       prompts_per_step=4, group_size=3, steps=len(rows), threads=2)
    # groups cycle [gold, SELECT 1, gold]: 2 of 3 right; steps run past the end of the split.
    assert document["summary"]["steps"] == len(rows)
    assert document["summary"]["calls"] == len(rows) * 4 * 3
    assert document["summary"]["mean"] == pytest.approx(2 / 3)


def test_reward_results_do_not_depend_on_concurrency(loaded, prepared_sample):
    rows = read_split(prepared_sample / "data" / "rl.jsonl", "rl")
    groups = reward_job.groups_for(rows, None, 8)
    serial = reward_job.reward_steps(loaded, rows, groups, threads=1)
    parallel = reward_job.reward_steps(loaded, rows, groups, threads=8)
    assert [(s.mean, s.outcomes) for s in serial] == [(s.mean, s.outcomes) for s in parallel]


def test_a_row_without_completions_is_an_input_error(prepared_sample):
    rows = read_split(prepared_sample / "data" / "rl.jsonl", "rl")
    with pytest.raises(InputError, match=rows[1].id):
        reward_job.groups_for(rows, [["x"], []] + [["x"]] * (len(rows) - 2), 8)


# --- grader mode ----------------------------------------------------------------------------------

def test_grader_on_the_sample_completions(loaded, prepared_sample, tmp_path):
    rows = read_split(prepared_sample / "data" / "eval.jsonl", "eval")
    completions = [json.loads(line)["completion"] for line in SAMPLE_COMPLETIONS.read_text().splitlines()]
    results = grader_job.grade_split(loaded, rows, completions)
    summary = grader_job.grader_summary(results)
    assert (summary["rows"], summary["scored"], summary["unscored"], summary["faults"]) == (20, 20, 0, 0)
    assert summary["mean"] == pytest.approx(11 / 20)
    assert summary["outcomes"] == {"match": 11, "mismatch": 6, "no_query": 1, "prediction_error": 1, "forbidden": 1}
    by_id = {r.row_id: r for r in results}
    assert by_id["eval-00013"].outcome == "forbidden" and by_id["eval-00013"].sql == "DROP TABLE Product"
    assert by_id["eval-00006"].detail == "same rows, columns reordered"
    assert {r.db_id for r in results} == {"school_sports", "bakery"}
    write_results(tmp_path / "r.jsonl", results)
    assert read_results(tmp_path / "r.jsonl") == results


def test_grader_excludes_and_counts_unscored_rows(sample_zip, prepared_sample, tmp_path):
    # a bundle without one of the eval databases: its rows raise DatabaseUnavailableError, unscored
    with zipfile.ZipFile(sample_zip) as source:
        index = json.loads(source.read("data/index.json"))
    eval_db = next(r["db_id"] for r in index["rows"] if r["split"] == "eval")
    gone = index["databases"][eval_db]["file"]
    damaged = _zip_with(tmp_path, sample_zip, {}, skip={f"data/{gone}"})
    rows = read_split(prepared_sample / "data" / "eval.jsonl", "eval")
    with emulate.load_bundle(damaged, tmp_path) as bundle:
        results = grader_job.grade_split(bundle, rows, [r.gold for r in rows])
    summary = grader_job.grader_summary(results)
    unscored = [r for r in results if not r.scored]
    assert summary["unscored"] == len(unscored) > 0 and summary["scored"] == len(rows) - len(unscored)
    assert summary["mean"] in (1.0, None)
    assert {r.outcome for r in unscored} == {"infrastructure_error"}
    assert all(r.detail.startswith("DatabaseUnavailableError") for r in unscored)


def test_grader_refuses_an_eval_split_that_is_not_the_bundle_s(loaded, prepared_sample, tmp_path):
    lines = (prepared_sample / "data" / "eval.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row["messages"][-1]["content"] = "SELECT name FROM Player WHERE 1 = 1"  # not the bundle's gold
    lines[3] = json.dumps(row)
    (tmp_path / "eval.jsonl").write_text("\n".join(lines) + "\n")
    rows = read_split(tmp_path / "eval.jsonl", "eval")
    with pytest.raises(InputError, match="eval-00003: gold .* differs from the bundle's"):
        grader_job.grade_split(loaded, rows, [r.gold for r in rows])
    good = read_split(prepared_sample / "data" / "eval.jsonl", "eval")
    with pytest.raises(InputError, match="eval-00019: in the bundle's index but not in the split"):
        grader_job.grade_split(loaded, good[:19], [r.gold for r in good[:19]])


@pytest.mark.parametrize("line, phrase", [
    ("not json", "not JSON"),
    ('{"messages": []}', "non-empty 'messages'"),
    ('{"messages": [{"role": "user", "content": "q"}]}', "assistant message"),
    ('{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "  "}]}', "assistant message"),
    ('{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "SELECT 1"}]}', "no user"),
    ('{"messages": [{"role": "robot", "content": "q"}, {"role": "assistant", "content": "SELECT 1"}]}', "role"),
])
def test_malformed_split_lines_are_named_with_file_and_line(tmp_path, line, phrase):
    good = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "SELECT 1"}]}'
    (tmp_path / "rl.jsonl").write_text(f"{good}\n{line}\n{good}\n")
    rows, problems = read_split_lenient(tmp_path / "rl.jsonl", "rl")
    assert [r.id for r in rows] == ["rl-00000", "rl-00002"]  # ids keep their line numbers
    assert len(problems) == 1 and "rl.jsonl:2: " in problems[0] and phrase in problems[0]
    with pytest.raises(InputError, match="rl.jsonl:2"):
        read_split(tmp_path / "rl.jsonl", "rl")


# --- the command, in-process ----------------------------------------------------------------------

def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT)


def test_emulate_command_in_process(sample_zip, prepared_sample, tmp_path):
    reward = _harness("emulate", "reward", "--in-process", "--zip", str(sample_zip), "--data", str(prepared_sample),
                      "--steps", "2")
    assert reward.returncode == 0, reward.stderr
    assert reward.stdout.count("reward mean 0.500") == 2 and "calls/s" in reward.stdout
    grader = _harness("emulate", "grader", "--in-process", "--zip", str(sample_zip), "--data", str(prepared_sample),
                      "--completions", str(SAMPLE_COMPLETIONS), "--output", str(tmp_path / "r.jsonl"))
    assert grader.returncode == 0, grader.stderr
    assert "mean score 0.5500" in grader.stdout
    assert len(read_results(tmp_path / "r.jsonl")) == 20
    missing = _harness("emulate", "grader", "--in-process", "--zip", str(sample_zip), "--data", str(prepared_sample))
    assert missing.returncode == InputError.exit_code and "--completions" in missing.stderr


def test_grader_refuses_completions_for_another_split(sample_zip, prepared_sample, tmp_path):
    (tmp_path / "c.jsonl").write_text('{"row_id": "eval-00999", "completion": "SELECT 1"}\n')
    done = _harness("emulate", "grader", "--in-process", "--zip", str(sample_zip), "--data", str(prepared_sample),
                    "--completions", str(tmp_path / "c.jsonl"), "--output", str(tmp_path / "r.jsonl"))
    assert done.returncode == InputError.exit_code and "eval-00999" in done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_the_emulated_grader_writes_the_stage_s_results_in_the_prepared_folder(sample_zip, prepared_sample, tmp_path):
    data = tmp_path / "prepared"
    (data / "data").mkdir(parents=True)
    (data / "data" / "eval.jsonl").write_bytes((prepared_sample / "data" / "eval.jsonl").read_bytes())
    done = _harness("emulate", "grader", "--in-process", "--zip", str(sample_zip), "--data", str(data),
                    "--completions", str(SAMPLE_COMPLETIONS), "--stage", "tuned")
    assert done.returncode == 0, done.stderr
    assert len(read_results(data / "results" / "tuned.jsonl")) == 20


def test_a_missing_split_names_the_command_that_makes_it(sample_zip, tmp_path):
    done = _harness("emulate", "reward", "--in-process", "--zip", str(sample_zip), "--data", str(tmp_path / "none"))
    assert done.returncode == InputError.exit_code
    assert "make sample-bundle" in done.stderr and "rl.jsonl" in done.stderr
