"""The grade command: eval split + completions + bundle (folder or zip) -> per-row results."""

from __future__ import annotations

import json
import shutil
import stat
import zipfile
from pathlib import Path

import pytest

from harness.prepare import bundle_data

from harness.commands import grade
from harness.cli import main
from harness.common.errors import InputError, PackError
from harness.report.compare import build_report, load_stages
from harness.common.results import read_results


def eval_line(question: str, gold: str, system: str = "Answer with one SQLite query.", **extra) -> str:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question},
                {"role": "assistant", "content": gold}]
    return json.dumps({"messages": messages, **extra})


def schema_prompt(fixture_dbs, db_id: str) -> str:
    """A system prompt with the database's schema lines, as prepare writes them."""
    return "Answer with one SQLite query.\n" + "\n".join(bundle_data.schema_lines(fixture_dbs[db_id]))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def zip_folder(folder: Path, dest: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(dest, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(folder).as_posix())
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return dest


# -- reading the eval split ------------------------------------------------------------------------
def test_read_eval_numbers_rows_and_splits_messages(tmp_path):
    path = write_lines(tmp_path / "eval.jsonl", [eval_line("How many teams?", "SELECT count(*) FROM Team", "S"),
                                                 "", eval_line("Names?", "SELECT name FROM Team", row_id="eval-00042")])
    rows = grade.read_eval(path)
    assert [r.row_id for r in rows] == ["eval-00000", "eval-00042"]
    assert (rows[0].question, rows[0].gold, rows[0].prompt) == ("How many teams?", "SELECT count(*) FROM Team",
                                                                "S\nHow many teams?")


@pytest.mark.parametrize("line, message", [
    pytest.param("{not json", "not JSON", id="a line that is not JSON"),
    pytest.param('{"prompt": "x"}', "messages", id="no messages"),
    pytest.param('["a list"]', "messages", id="not an object"),
    pytest.param(json.dumps({"messages": [{"role": "user", "content": "q"}]}), "assistant's gold",
                 id="last message not the assistant"),
    pytest.param(json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": " "}]}),
                 "assistant's gold", id="blank gold"),
    pytest.param(json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "SELECT 1"}]}),
                 "no user message", id="no question"),
])
def test_read_eval_names_the_bad_line(tmp_path, line, message):
    path = write_lines(tmp_path / "eval.jsonl", [eval_line("q", "SELECT 1"), line])
    with pytest.raises(InputError, match=rf"eval.jsonl:2: .*{message}"):
        grade.read_eval(path)


def test_read_eval_refuses_duplicate_ids_and_empty_files(tmp_path):
    dup = write_lines(tmp_path / "dup.jsonl", [eval_line("q", "SELECT 1", row_id="eval-00001")] * 2)
    with pytest.raises(InputError, match="eval-00001.*more than once"):
        grade.read_eval(dup)
    with pytest.raises(InputError, match="empty"):
        grade.read_eval(write_lines(tmp_path / "empty.jsonl", []))


# -- scoring ---------------------------------------------------------------------------------------
OUTCOMES = [
    ("SELECT count(*) FROM Team", "SELECT count(*) FROM Team", "match", 1.0, "the gold itself"),
    ("SELECT count(*) FROM Team", "```sql\nselect COUNT(team_id) from Team;\n```", "match", 1.0,
     "other wording, same rows"),
    ("SELECT count(*) FROM Team", "SELECT count(*) FROM Player", "mismatch", 0.0, "different rows"),
    ("SELECT count(*) FROM Team", "DROP TABLE Team", "forbidden", 0.0, "a write"),
    ("SELECT count(*) FROM Team", "I do not know.", "no_query", 0.0, "no query"),
    ("SELECT count(*) FROM Team", "SELECT nope FROM Team", "prediction_error", 0.0, "unknown column"),
]


@pytest.mark.parametrize("gold, completion, outcome, score", [pytest.param(*c[:4], id=c[4]) for c in OUTCOMES])
def test_grade_rows_scores_with_the_bundle(sample_bundle, gold, completion, outcome, score):
    row = grade.EvalRow("eval-00000", "How many teams?", gold, "prompt")
    [result] = grade.grade_rows([row], [completion], sample_bundle)
    assert (result.outcome, result.score, result.db_id) == (outcome, score, "school_sports")
    assert result.completion == completion and result.gold == gold and result.question == "How many teams?"


def test_extracted_sql_is_recorded(sample_bundle):
    row = grade.EvalRow("eval-00000", "q", "SELECT count(*) FROM Team", "p")
    [result] = grade.grade_rows([row], ["Here it is:\n```sql\nSELECT count(*) FROM Team;\n```\nDone."], sample_bundle)
    assert result.sql == "SELECT count(*) FROM Team"


def test_a_stale_gold_is_unscored_never_zero(sample_bundle):
    row = grade.EvalRow("eval-00000", "q", "SELECT name FROM Nowhere", "p")
    [result] = grade.grade_rows([row], ["SELECT name FROM Nowhere"], sample_bundle)
    assert result.score is None and not result.scored
    assert result.outcome == "infrastructure_error"
    assert result.detail.startswith("StaleBundleError:")


def test_a_shared_gold_is_resolved_by_the_schema_in_the_prompt(sample_bundle, fixture_dbs):
    gold = "SELECT count(*) FROM Customers"  # stored under bakery and music_shop
    bare = grade.EvalRow("eval-00000", "q", gold, "no schema here")
    with_schema = grade.EvalRow("eval-00001", "q", gold, schema_prompt(fixture_dbs, "bakery"))
    unscored, scored = grade.grade_rows([bare, with_schema], [gold, gold], sample_bundle)
    assert (unscored.score, unscored.outcome) == (None, "infrastructure_error")
    assert "RowResolutionError" in unscored.detail
    assert (scored.score, scored.db_id) == (1.0, "bakery")


def test_grade_rows_needs_a_bundle_with_data(tmp_path):
    row = grade.EvalRow("eval-00000", "q", "SELECT 1", "p")
    with pytest.raises(InputError, match="index.json"):
        grade.grade_rows([row], ["SELECT 1"], tmp_path)
    with pytest.raises(InputError, match="1 completions for 2 eval rows"):
        grade.grade_rows([row, row], ["SELECT 1"], tmp_path)


# -- the command -----------------------------------------------------------------------------------
@pytest.fixture
def eval_files(tmp_path, fixture_dbs):
    """Four eval rows on the sample databases and completions for them (two right, two wrong)."""
    system = schema_prompt(fixture_dbs, "school_sports")
    rows = [("How many teams?", "SELECT count(*) FROM Team"),
            ("Top scorer?", "SELECT name FROM Player ORDER BY points DESC LIMIT 1"),
            ("Basketball teams?", "SELECT name FROM Team WHERE sport = 'basketball'"),
            ("Old teams?", "SELECT name FROM Team WHERE founded < 1950")]
    eval_path = write_lines(tmp_path / "eval.jsonl", [eval_line(q, g, system) for q, g in rows])
    answers = [rows[0][1], "SELECT name FROM Player", rows[2][1], "SELECT 1"]
    completions = write_lines(tmp_path / "completions.jsonl",
                              [json.dumps({"row_id": f"eval-{i:05d}", "completion": a}) for i, a in enumerate(answers)])
    return eval_path, completions


def test_grade_command_folder_and_zip_give_the_same_results(sample_bundle, eval_files, tmp_path, capsys):
    eval_path, completions = eval_files
    out_dir = main(["grade", "--bundle", str(sample_bundle), "--eval", str(eval_path),
                    "--completions", str(completions), "--out", str(tmp_path / "from-dir.jsonl")])
    bundle_zip = zip_folder(sample_bundle, tmp_path / "bundle.zip")
    out_zip = main(["grade", "--bundle", str(bundle_zip), "--eval", str(eval_path),
                    "--completions", str(completions), "--out", str(tmp_path / "from-zip.jsonl")])
    assert (out_dir, out_zip) == (0, 0)
    assert (tmp_path / "from-dir.jsonl").read_bytes() == (tmp_path / "from-zip.jsonl").read_bytes()
    results = read_results(tmp_path / "from-dir.jsonl")
    assert [r.row_id for r in results] == [f"eval-{i:05d}" for i in range(4)]
    assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0]
    assert "execution accuracy 0.500 (2/4 scored rows)" in capsys.readouterr().out


def test_a_trainer_export_with_output_fields_is_graded_by_position(sample_bundle, eval_files, tmp_path):
    eval_path, _ = eval_files
    export = write_lines(tmp_path / "export.jsonl", [json.dumps({"input": "...", "output": "SELECT count(*) FROM Team"})]
                         + [json.dumps({"input": "...", "output": "SELECT 1"})] * 3)
    assert main(["grade", "--bundle", str(sample_bundle), "--eval", str(eval_path),
                 "--completions", str(export), "--out", str(tmp_path / "r.jsonl")]) == 0
    assert [r.outcome for r in read_results(tmp_path / "r.jsonl")] == ["match", "mismatch", "mismatch", "mismatch"]


@pytest.mark.parametrize("lines, message", [
    pytest.param([json.dumps({"row_id": "eval-00000", "completion": "SELECT 1"})], "no completion for 3 row",
                 id="rows without a completion"),
    pytest.param([json.dumps({"row_id": f"eval-{i:05d}", "completions": ["SELECT 1", "SELECT 2"]}) for i in range(4)],
                 "2 completions", id="a group of completions for one row"),
    pytest.param([json.dumps("SELECT 1")] * 3, "3 positional completions for 4 rows", id="too few positional lines"),
    pytest.param([json.dumps({"row_id": "eval-00009", "completion": "SELECT 1"})], "not in the split",
                 id="a row the split does not have"),
])
def test_completions_that_do_not_fit_the_split_are_refused(sample_bundle, eval_files, tmp_path, capsys, lines, message):
    eval_path, _ = eval_files
    bad = write_lines(tmp_path / "bad.jsonl", lines)
    code = main(["grade", "--bundle", str(sample_bundle), "--eval", str(eval_path),
                 "--completions", str(bad), "--out", str(tmp_path / "r.jsonl")])
    assert code == InputError.exit_code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


def _zip_with(path: Path, name: str, data: bytes = b"x", mode: int | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        archive.writestr(info, data)
    return path


@pytest.mark.parametrize("name, mode, code, message", [
    pytest.param("../evil.py", None, PackError.exit_code, "parent-folder", id="a parent-directory entry"),
    pytest.param("/etc/evil", None, PackError.exit_code, "absolute path", id="an absolute entry"),
    pytest.param("data\\..\\evil", None, PackError.exit_code, "backslash", id="a backslash entry"),
    pytest.param("link.py", stat.S_IFLNK | 0o777, PackError.exit_code, "symlink", id="a symlink entry"),
    pytest.param("verify.py", None, InputError.exit_code, "no data/index.json", id="a zip without the bundle's data"),
])
def test_unsafe_or_incomplete_zips_are_refused(tmp_path, eval_files, name, mode, code, message, capsys):
    eval_path, completions = eval_files
    bad = _zip_with(tmp_path / "bad.zip", name, mode=mode)
    assert main(["grade", "--bundle", str(bad), "--eval", str(eval_path), "--completions", str(completions),
                 "--out", str(tmp_path / "r.jsonl")]) == code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("make, code, message", [
    pytest.param(lambda t: t / "nope.zip", InputError.exit_code, "does not exist", id="a missing bundle"),
    pytest.param(lambda t: write_lines(t / "not.zip", ["hello"]), PackError.exit_code, "as a zip", id="not a zip"),
])
def test_missing_bundle_and_non_zip_are_clear_errors(tmp_path, eval_files, capsys, make, code, message):
    eval_path, completions = eval_files
    assert main(["grade", "--bundle", str(make(tmp_path)), "--eval", str(eval_path), "--completions",
                 str(completions), "--out", str(tmp_path / "r.jsonl")]) == code
    assert message in capsys.readouterr().err


def test_a_zip_is_graded_by_its_own_code(sample_bundle, eval_files, tmp_path):
    # a grader edited to score everything 0 shows the zip's own modules ran, not this checkout's
    folder = tmp_path / "edited"
    shutil.copytree(sample_bundle, folder, ignore=shutil.ignore_patterns("__pycache__"))
    grader = folder / "grader.py"
    grader.write_text(grader.read_text() + "\n\ndef compute_score(*args, **kwargs):\n    return 0.0\n")
    eval_path, completions = eval_files
    assert main(["grade", "--bundle", str(zip_folder(folder, tmp_path / "edited.zip")), "--eval", str(eval_path),
                 "--completions", str(completions), "--out", str(tmp_path / "r.jsonl")]) == 0
    assert [r.score for r in read_results(tmp_path / "r.jsonl")] == [0.0] * 4


def test_a_folder_whose_code_differs_from_the_checkout_is_reported(sample_bundle, eval_files, tmp_path, capsys):
    eval_path, completions = eval_files
    folder = tmp_path / "copy"
    shutil.copytree(sample_bundle / "data", folder / "data")
    for module in grade.BUNDLE_SOURCE.glob("*.py"):  # this checkout's modules as they are now
        shutil.copy2(module, folder / module.name)
    args = ["grade", "--bundle", str(folder), "--eval", str(eval_path), "--completions", str(completions)]
    assert main(args + ["--out", str(tmp_path / "r1.jsonl")]) == 0
    assert "warning" not in capsys.readouterr().err  # identical modules: no warning
    (folder / "verify.py").write_text((folder / "verify.py").read_text() + "\n# edited\n")
    assert grade.differing_modules(folder) == ["verify.py"]
    assert main(args + ["--out", str(tmp_path / "r2.jsonl")]) == 0
    assert "verify.py in" in capsys.readouterr().err


def test_a_zip_needs_rows_numbered_by_line(sample_bundle, tmp_path):
    eval_path = write_lines(tmp_path / "eval.jsonl", [eval_line("q", "SELECT count(*) FROM Team", row_id="eval-00007")])
    with pytest.raises(InputError, match="numbered by line"):
        grade.grade_zip(zip_folder(sample_bundle, tmp_path / "b.zip"), eval_path, grade.read_eval(eval_path),
                        ["SELECT 1"])


def test_prepared_sample_gold_completions_all_match(prepared_sample, tmp_path):
    eval_path = prepared_sample / "data" / "eval.jsonl"
    golds = [json.loads(line)["messages"][-1]["content"] for line in eval_path.read_text().splitlines() if line]
    completions = write_lines(tmp_path / "gold.jsonl", [json.dumps(g) for g in golds])
    assert main(["grade", "--bundle", str(prepared_sample / "bundle"), "--eval", str(eval_path),
                 "--completions", str(completions), "--out", str(tmp_path / "r.jsonl")]) == 0
    results = read_results(tmp_path / "r.jsonl")
    assert len(results) == len(golds) > 0
    assert {r.outcome for r in results} == {"match"}


@pytest.mark.real_data
def test_real_eval_split_gold_completions_all_match_and_report(prepared_spider, tmp_path):
    eval_path = prepared_spider / "data" / "eval.jsonl"
    golds = [json.loads(line)["messages"][-1]["content"] for line in eval_path.read_text().splitlines() if line]
    right = write_lines(tmp_path / "gold.jsonl", [json.dumps(g) for g in golds])
    # a second "stage" answering every even row with one value no Spider gold returns
    half = write_lines(tmp_path / "half.jsonl", [json.dumps(g if i % 2 else "SELECT 'zz-no-such-value-zz'")
                                                 for i, g in enumerate(golds)])
    for name, path in (("gold", right), ("half", half)):
        assert main(["grade", "--bundle", str(prepared_spider / "bundle"), "--eval", str(eval_path),
                     "--completions", str(path), "--out", str(tmp_path / f"{name}.jsonl")]) == 0
    gold_results = read_results(tmp_path / "gold.jsonl")
    assert len(gold_results) == len(golds) == 300
    assert {r.outcome for r in gold_results} == {"match"}
    result = build_report(load_stages([("gold", str(tmp_path / "gold.jsonl")), ("half", str(tmp_path / "half.jsonl"))]))
    [comp] = result.comparisons
    assert (comp.paired.gained, comp.paired.lost, comp.paired.both_right) == (0, 150, 150)
    assert [s.accuracy.correct for s in result.stages] == [300, 150]
    assert {name for name, _ in result.by_level.groups} == {"easy", "medium", "hard", "extra"}
