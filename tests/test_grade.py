"""The grade command: a stage's completions + the eval split + the bundle zip -> per-row results.

Grading runs the one grading path (harness.emulator.grader_job) that `emulate grader` runs too.
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import golds, run_with_read_only
from harness.cli import main
from harness.common.errors import InputError, OutputError, PackError
from harness.common.results import read_results
from harness.report.compare import build_report, load_stages


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def grade(data: Path, stage: str, *extra: str) -> int:
    return main(["grade", "--data", str(data), "--stage", stage, *extra])


# -- scoring, through the command ------------------------------------------------------------------
# Row 0 of the sample's eval split asks "How many teams are there?" (gold SELECT count(*) FROM Team).
OUTCOMES = [
    ("SELECT count(*) FROM Team", "match", 1.0, "the gold itself"),
    ("```sql\nselect COUNT(team_id) from Team;\n```", "match", 1.0, "other wording, same rows"),
    ("SELECT count(*) FROM Player", "mismatch", 0.0, "different rows"),
    ("DROP TABLE Team", "forbidden", 0.0, "a write"),
    ("I do not know.", "no_query", 0.0, "no query"),
    ("SELECT nope FROM Team", "prediction_error", 0.0, "unknown column"),
]


@pytest.mark.parametrize("completion, outcome, score", [pytest.param(*c[:3], id=c[3]) for c in OUTCOMES])
def test_each_outcome_is_recorded_with_the_database_scored_on(data, completion, outcome, score):
    rows = golds(data / "data" / "eval.jsonl")
    write_lines(data / "completions" / "probe.jsonl", [json.dumps(completion)] + [json.dumps(g) for g in rows[1:]])
    assert grade(data, "probe") == 0
    first = read_results(data / "results" / "probe.jsonl")[0]
    assert (first.outcome, first.score, first.db_id) == (outcome, score, "school_sports")
    assert first.completion == completion and first.gold == rows[0] and first.question == "How many teams are there?"


def test_the_extracted_sql_is_recorded(data):
    rows = golds(data / "data" / "eval.jsonl")
    answer = "Here it is:\n```sql\nSELECT count(*) FROM Team;\n```\nDone."
    write_lines(data / "completions" / "s.jsonl", [json.dumps(answer)] + [json.dumps(g) for g in rows[1:]])
    assert grade(data, "s") == 0
    assert read_results(data / "results" / "s.jsonl")[0].sql == "SELECT count(*) FROM Team"


def test_the_stage_names_the_completions_and_the_results(data, capsys):
    rows = golds(data / "data" / "eval.jsonl")
    write_lines(data / "completions" / "sft.jsonl",
                [json.dumps({"row_id": f"eval-{i:05d}", "completion": g if i % 2 else "SELECT 1"})
                 for i, g in enumerate(rows)])
    assert grade(data, "sft") == 0
    results = read_results(data / "results" / "sft.jsonl")
    assert [r.row_id for r in results] == [f"eval-{i:05d}" for i in range(len(rows))]
    assert [r.score for r in results] == [float(i % 2) for i in range(len(rows))]
    assert f"execution accuracy 0.500 ({len(rows) // 2}/{len(rows)} scored rows)" in capsys.readouterr().out


def test_a_trainer_export_with_output_fields_is_graded_by_position(data, tmp_path):
    rows = golds(data / "data" / "eval.jsonl")
    export = write_lines(tmp_path / "export.jsonl", [json.dumps({"input": "...", "output": rows[0]})]
                         + [json.dumps({"input": "...", "output": "SELECT 1"})] * (len(rows) - 1))
    assert grade(data, "export", "--completions", str(export), "--output", str(tmp_path / "r.jsonl")) == 0
    outcomes = [r.outcome for r in read_results(tmp_path / "r.jsonl")]
    assert outcomes[0] == "match" and set(outcomes[1:]) <= {"mismatch", "match"}


def test_an_eval_split_that_is_not_the_bundle_s_is_refused(data, capsys):
    # another split's rows (or a hand-edited one) would be labelled with the index's databases
    lines = (data / "data" / "eval.jsonl").read_text().splitlines()
    edited = json.loads(lines[2])
    edited["messages"][-1]["content"] = "SELECT name FROM Player"
    write_lines(data / "data" / "eval.jsonl", [lines[0], lines[1], json.dumps(edited), *lines[3:]])
    write_lines(data / "completions" / "x.jsonl", [json.dumps("SELECT 1")] * len(lines))
    assert grade(data, "x") == InputError.exit_code
    err = capsys.readouterr().err
    assert "does not match the bundle's index" in err and "eval-00002" in err
    assert not (data / "results" / "x.jsonl").exists()


@pytest.mark.parametrize("lines, message", [
    pytest.param([json.dumps({"row_id": "eval-00000", "completion": "SELECT 1"})], "no completion for 19 of the split's 20 rows",
                 id="rows without a completion"),
    pytest.param([json.dumps({"row_id": f"eval-{i:05d}", "completions": ["SELECT 1", "SELECT 2"][:1 + (i == 4)]})
                  for i in range(20)],
                 "row eval-00000 has 1 completions and row eval-00004 2", id="rows with different numbers of samples"),
    pytest.param([json.dumps("SELECT 1")] * 3, "3 positional completions for 20 rows", id="too few positional lines"),
    pytest.param([json.dumps({"row_id": "eval-00099", "completion": "SELECT 1"})], "not in the split",
                 id="a row the split does not have"),
    pytest.param([json.dumps({"row_id": f"eval-{i if i != 7 else 3:05d}", "completion": "SELECT 1"}) for i in range(20)],
                 "row eval-00003 has 2 completions and 1 row(s) none (first eval-00007): a row_id written twice?",
                 id="a row_id written twice"),
])
def test_completions_that_do_not_fit_the_split_are_refused(data, capsys, lines, message):
    write_lines(data / "completions" / "bad.jsonl", lines)
    assert grade(data, "bad") == InputError.exit_code
    assert message in capsys.readouterr().err
    assert not (data / "results" / "bad.jsonl").exists()


@pytest.mark.parametrize("missing, message", [
    pytest.param("data/eval.jsonl", "make sample-bundle", id="nothing prepared"),
    pytest.param("spider-scoring.zip", "make pack", id="no zip"),
    pytest.param("completions/sft.jsonl", "--completions FILE", id="no completions"),
])
def test_a_missing_input_says_which_command_makes_it(data, capsys, missing, message):
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    (data / missing).unlink()
    assert grade(data, "sft") == InputError.exit_code
    err = capsys.readouterr().err
    assert missing.split("/")[-1] in err and message in err


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
    pytest.param("verify.py", None, InputError.exit_code, "no readable data/index.json", id="a zip without data"),
])
def test_unsafe_or_incomplete_zips_are_refused(data, tmp_path, name, mode, code, message, capsys):
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    bad = _zip_with(tmp_path / "bad.zip", name, mode=mode)
    assert grade(data, "sft", "--zip", str(bad)) == code
    assert message in capsys.readouterr().err
    assert not (data / "results" / "sft.jsonl").exists()


def test_a_file_that_is_not_a_zip_is_a_clear_error(data, tmp_path, capsys):
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    assert grade(data, "sft", "--zip", str(write_lines(tmp_path / "not.zip", ["hello"]))) == PackError.exit_code
    assert "as a zip" in capsys.readouterr().err


def test_a_zip_is_graded_by_its_own_code(data, tmp_path):
    # a grader edited to score everything 0 shows the zip's own modules ran, not this checkout's
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(data / "spider-scoring.zip") as source, zipfile.ZipFile(edited, "w") as out:
        for info in source.infolist():
            body = source.read(info)
            if info.filename == "grader.py":
                body += b"\n\ndef compute_score(*args, **kwargs):\n    return 0.0\n"
            out.writestr(info, body)
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    assert grade(data, "sft", "--zip", str(edited)) == 0
    assert {r.score for r in read_results(data / "results" / "sft.jsonl")} == {0.0}


def test_prepared_sample_gold_completions_all_match(data):
    rows = golds(data / "data" / "eval.jsonl")
    write_lines(data / "completions" / "gold.jsonl", [json.dumps(g) for g in rows])
    assert grade(data, "gold") == 0
    results = read_results(data / "results" / "gold.jsonl")
    assert len(results) == len(rows) > 0
    assert {r.outcome for r in results} == {"match"}


@pytest.mark.real_data
def test_real_eval_split_gold_completions_all_match_and_report(prepared_spider, tmp_path):
    from harness.prepare import pack
    data = tmp_path / "prepared"
    (data / "data").mkdir(parents=True)
    shutil.copyfile(prepared_spider / "data" / "eval.jsonl", data / "data" / "eval.jsonl")
    pack.pack(prepared_spider / "bundle", data / "spider-scoring.zip")
    rows = golds(data / "data" / "eval.jsonl")
    write_lines(data / "completions" / "gold.jsonl", [json.dumps(g) for g in rows])
    # a second "stage" answering every even row with one value no Spider gold returns
    write_lines(data / "completions" / "half.jsonl", [json.dumps(g if i % 2 else "SELECT 'zz-no-such-value-zz'")
                                                      for i, g in enumerate(rows)])
    for stage in ("gold", "half"):
        assert grade(data, stage) == 0
    gold_results = read_results(data / "results" / "gold.jsonl")
    assert len(gold_results) == len(rows) == 300
    assert {r.outcome for r in gold_results} == {"match"}
    result = build_report(load_stages([(s, str(data / "results" / f"{s}.jsonl")) for s in ("gold", "half")]))
    [comp] = result.comparisons
    assert (comp.paired.gained, comp.paired.lost, comp.paired.both_right) == (0, 150, 150)
    assert [s.accuracy.correct for s in result.stages] == [300, 150]
    assert {name for name, _ in result.by_level.groups} == {"easy", "medium", "hard", "extra"}


# -- what a newcomer met on a fresh clone: typed errors with the table's exit codes, no traceback ---

def test_completions_that_are_not_utf8_name_the_line_and_what_to_do(data, capsys):
    rows = golds(data / "data" / "eval.jsonl")
    path = data / "completions" / "latin1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(json.dumps(g).encode() + b"\n" for g in rows[:2]) + '"café"\n'.encode("latin-1"))
    assert grade(data, "latin1") == InputError.exit_code
    err = capsys.readouterr().err
    assert f"{path}:3: the completions file is not UTF-8 text (byte 0xe9" in err and "save it as UTF-8" in err
    assert "Traceback" not in err and not (data / "results" / "latin1.jsonl").exists()


def _damage_zip(source: Path, target: Path, how: str) -> str:
    """A copy of ``source`` damaged after packing; the name of the entry damaged."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        info = archive.getinfo("reward.py" if how == "bad CRC" else "data/index.json")
    if how == "bad CRC":  # the stored CRC-32, in the local header and the central directory alike
        crc = info.CRC.to_bytes(4, "little")
        data[:] = data.replace(crc, bytes(b ^ 0xFF for b in crc))
    else:  # a byte of the compressed stream flipped
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        data[start + info.compress_size // 2] ^= 0x55
    target.write_bytes(bytes(data))
    return info.filename


@pytest.mark.parametrize("how", ["bad CRC", "a flipped byte in a deflate stream"])
def test_a_zip_damaged_after_packing_is_refused_before_any_work(data, tmp_path, capsys, how):
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    entry = _damage_zip(data / "spider-scoring.zip", tmp_path / "damaged.zip", how)
    assert grade(data, "sft", "--zip", str(tmp_path / "damaged.zip")) == PackError.exit_code
    err = capsys.readouterr().err
    assert f"entry {entry!r} is damaged" in err and "make pack" in err and "Traceback" not in err
    assert not (data / "results" / "sft.jsonl").exists()


def test_a_read_only_results_folder_fails_before_any_work(data, tmp_path):
    # The completions are broken too (line 2 is not JSON): the output is checked before they are even
    # read, so before any row is graded. Before, grading ran to the end, then a traceback, exit 1.
    rows = golds(data / "data" / "eval.jsonl")
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(rows[0]), "{not json", *map(json.dumps, rows[2:])])
    done = run_with_read_only(data / "results", [sys.executable, "-m", "harness", "grade", "--data", str(data),
                                                 "--stage", "sft"])
    assert done.returncode == OutputError.exit_code, done.stderr
    assert f"cannot write the sft results (sft.jsonl) into {data / 'results'}" in done.stderr
    assert ("Read-only file system (EROFS)" in done.stderr or "Permission denied (EACCES)" in done.stderr)
    assert "Traceback" not in done.stderr


def test_an_output_path_through_a_file_fails_before_any_work(data, tmp_path, capsys):
    write_lines(data / "completions" / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    (tmp_path / "taken").write_text("a file")
    assert grade(data, "sft", "--output", str(tmp_path / "taken" / "sft.jsonl")) == OutputError.exit_code
    assert f"{tmp_path / 'taken'} is a file, not a folder" in capsys.readouterr().err


def test_completions_given_as_a_folder_say_so_and_name_the_files_in_it(data, capsys):
    folder = data / "answers"
    write_lines(folder / "sft.jsonl", [json.dumps(g) for g in golds(data / "data" / "eval.jsonl")])
    assert grade(data, "sft", "--completions", str(folder)) == InputError.exit_code
    err = capsys.readouterr().err
    assert f"the sft completions {folder} is a folder, not a file: give the file itself, e.g. {folder / 'sft.jsonl'}" in err
    assert "prepare it first" not in err


def test_completions_given_that_do_not_exist_say_to_check_the_path(data, capsys):
    assert grade(data, "sft", "--completions", str(data / "nope.jsonl")) == InputError.exit_code
    err = capsys.readouterr().err
    assert "does not exist: check the path given to --completions" in err and "prepare it first" not in err
