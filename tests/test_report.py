"""The report command: checked inputs, the reference table, hand-made comparisons, breakdowns."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.cli import main
from harness.common.errors import InputError
from harness.common.files import sha256_file
from harness.common.results import RowResult, meta_path, read_results_meta, write_results
from harness.report import compare as report
from harness.report.stats import format_p

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "sample"
BASE_COMPLETIONS, TUNED_COMPLETIONS = SAMPLE / "completions-eval-base.jsonl", SAMPLE / "completions-eval.jsonl"

GOLDS = {  # gold -> its Spider level (worked out in tests/test_difficulty.py)
    "SELECT count(*) FROM singer": "easy",
    "SELECT name, age FROM singer WHERE age > 30": "medium",
    "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)": "hard",
    "SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.id = T2.id "
    "GROUP BY T1.stadium_id ORDER BY count(*) DESC LIMIT 1": "extra",
}


def rows_for(label: str, flags: list[bool | None], dbs: tuple[str, ...] = ("concert_singer", "pets"),
             gold: str | None = None) -> list[RowResult]:
    """One result per flag (True: match, False: mismatch, None: unscored); golds cycle through GOLDS."""
    golds = list(GOLDS)
    out = []
    for i, flag in enumerate(flags):
        score, outcome = {True: (1.0, "match"), False: (0.0, "mismatch"), None: (None, "gold_error")}[flag]
        out.append(RowResult(f"eval-{i:05d}", dbs[i % len(dbs)], f"question {i}", gold or golds[i % len(golds)],
                             f"completion {label} {i}", f"SELECT '{label}' -- {i}", score, outcome, "detail"))
    return out


def write(tmp_path: Path, label: str, flags: list[bool | None], **kw) -> str:
    path = tmp_path / f"results-{label}.jsonl"
    write_results(path, rows_for(label, flags, **kw))
    return str(path)


def reference_flags(gained: int, lost: int, n: int = 300, correct: int = 118) -> list[bool]:
    """The SFT baseline (first ``correct`` rows right) with ``lost`` of them lost and ``gained`` gained."""
    flags = [i < correct for i in range(n)]
    for i in range(lost):
        flags[i] = False
    for i in range(gained):
        flags[correct + i] = True
    return flags


# -- the reference table ---------------------------------------------------------------------------
def test_the_reference_table_is_reproduced(tmp_path):
    specs = [("sft", write(tmp_path, "sft", reference_flags(0, 0)))]
    for label, gained, lost in [("grpo4", 7, 3), ("grpo12", 17, 6), ("grpo24", 26, 8)]:
        specs.append((label, write(tmp_path, label, reference_flags(gained, lost))))
    result = report.build_report(report.load_stages(specs), "sft")
    assert [round(s.accuracy.value, 3) for s in result.stages] == [0.393, 0.407, 0.430, 0.453]
    assert [(c.label, c.paired.gained, c.paired.lost, format_p(c.paired.chi2.p_value), c.paired.verdict)
            for c in result.comparisons] == [("grpo4", 7, 3, "0.34", "inside noise"),
                                             ("grpo12", 17, 6, "0.037", "significant"),
                                             ("grpo24", 26, 8, "0.0036", "significant")]


# -- a hand-made comparison ------------------------------------------------------------------------
def test_hand_made_comparison_with_an_unscored_row(tmp_path):
    base = write(tmp_path, "base", [True, False, True, None, False, False])
    cand = write(tmp_path, "cand", [True, True, False, None, True, False])
    result = report.build_report(report.load_stages([("base", base), ("cand", cand)]), "base")
    b, c = result.stages
    assert (b.accuracy.correct, b.accuracy.n, b.unscored) == (2, 5, 1)
    assert (c.accuracy.correct, c.accuracy.n, c.unscored) == (3, 5, 1)
    [comp] = result.comparisons
    assert (comp.paired.n, comp.paired.gained, comp.paired.lost, comp.paired.both_right, comp.paired.both_wrong) == \
        (5, 2, 1, 1, 1)
    assert [r.row_id for r in comp.gained] == ["eval-00001", "eval-00004"]
    [lost] = comp.lost
    assert (lost.row_id, lost.baseline_sql, lost.candidate_sql, lost.baseline_outcome, lost.candidate_outcome) == \
        ("eval-00002", "SELECT 'base' -- 2", "SELECT 'cand' -- 2", "match", "mismatch")
    assert lost.level == "hard" and lost.question == "question 2"


def test_a_row_unscored_in_one_stage_only_leaves_the_paired_test(tmp_path):
    base = write(tmp_path, "base", [True, True, False])
    cand = write(tmp_path, "cand", [None, True, True])
    result = report.build_report(report.load_stages([("base", base), ("cand", cand)]))
    [comp] = result.comparisons
    assert (comp.paired.n, comp.paired.gained, comp.paired.lost) == (2, 1, 0)
    assert result.stages[1].accuracy.n == 2


def test_rows_pair_by_id_not_by_position(tmp_path):
    base_rows = rows_for("base", [True, False, False, True])
    cand_rows = rows_for("cand", [True, True, False, False])
    random.Random(3).shuffle(cand_rows)
    write_results(tmp_path / "b.jsonl", base_rows)
    write_results(tmp_path / "c.jsonl", cand_rows)
    result = report.build_report(report.load_stages([("b", str(tmp_path / "b.jsonl")), ("c", str(tmp_path / "c.jsonl"))]))
    [comp] = result.comparisons
    assert [r.row_id for r in comp.gained] == ["eval-00001"]
    assert [r.row_id for r in comp.lost] == ["eval-00003"]


def test_breakdowns_by_level_and_database(tmp_path):
    # eight rows: levels cycle easy, medium, hard, extra; databases alternate concert_singer, pets
    base = write(tmp_path, "base", [True, True, False, False, True, False, False, False])
    cand = write(tmp_path, "cand", [True, True, True, False, True, True, True, False])
    result = report.build_report(report.load_stages([("base", base), ("cand", cand)]))
    levels = {name: [(a.correct, a.n) for a in accs] for name, accs in result.by_level.groups}
    assert levels == {"easy": [(2, 2), (2, 2)], "medium": [(1, 2), (2, 2)], "hard": [(0, 2), (2, 2)],
                      "extra": [(0, 2), (0, 2)]}
    dbs = {name: [(a.correct, a.n) for a in accs] for name, accs in result.by_database.groups}
    assert dbs == {"concert_singer": [(2, 4), (4, 4)], "pets": [(1, 4), (2, 4)]}


def test_an_unreadable_gold_is_grouped_as_unclassified(tmp_path):
    base = write(tmp_path, "base", [True, False], gold="WITH x AS (SELECT 1) SELECT * FROM x")
    cand = write(tmp_path, "cand", [True, True], gold="WITH x AS (SELECT 1) SELECT * FROM x")
    result = report.build_report(report.load_stages([("base", base), ("cand", cand)]))
    assert [name for name, _ in result.by_level.groups] == ["unclassified"]


# -- inputs that must not make a table -------------------------------------------------------------
def test_results_on_different_rows_are_refused(tmp_path):
    base = write(tmp_path, "base", [True, False, True])
    cand = write(tmp_path, "cand", [True, False])
    with pytest.raises(InputError, match=r"not results on the same eval rows: 1 row\(s\) of base are missing "
                                         r"from cand \(first eval-00002\)"):
        report.load_stages([("base", base), ("cand", cand)])


def test_a_different_gold_for_the_same_row_is_refused(tmp_path):
    base = write(tmp_path, "base", [True, False])
    rows = rows_for("cand", [True, False])
    rows[1] = RowResult(**{**rows[1].__dict__, "gold": "SELECT 2"})
    write_results(tmp_path / "cand.jsonl", rows)
    with pytest.raises(InputError, match="row eval-00001 has a different gold"):
        report.load_stages([("base", base), ("cand", str(tmp_path / "cand.jsonl"))])


def test_a_different_database_for_the_same_row_is_refused(tmp_path):
    base = write(tmp_path, "base", [True, False])
    cand = write(tmp_path, "cand", [True, False], dbs=("other_db",))
    with pytest.raises(InputError, match="row eval-00000 has a different db_id"):
        report.load_stages([("base", base), ("cand", cand)])


def test_duplicated_ids_are_refused(tmp_path):
    base = write(tmp_path, "base", [True, False])
    line = (tmp_path / "results-base.jsonl").read_text().splitlines()[0]
    (tmp_path / "dup.jsonl").write_text(line + "\n" + line + "\n")
    with pytest.raises(InputError, match="appears twice"):
        report.load_stages([("base", base), ("dup", str(tmp_path / "dup.jsonl"))])


@pytest.mark.parametrize("make, message", [
    pytest.param(lambda t: [("a", write(t, "a", [True]))], "two or more results files", id="a single input"),
    pytest.param(lambda t: [("a", write(t, "a", [True])), ("a", write(t, "b", [True]))], "labelled 'a'",
                 id="two inputs with one label"),
    pytest.param(lambda t: [("a", write(t, "a", [True])), ("e", write(t, "e", []))], "holds no rows",
                 id="an empty file"),
    pytest.param(lambda t: [("a", write(t, "a", [True])), ("m", str(t / "missing.jsonl"))], "grade that stage first",
                 id="a missing file"),
])
def test_bad_input_sets(tmp_path, make, message):
    with pytest.raises(InputError, match=message):
        report.load_stages(make(tmp_path))


def test_bad_report_settings(tmp_path):
    stages = report.load_stages([("a", write(tmp_path, "a", [True, False])), ("b", write(tmp_path, "b", [False, None]))])
    with pytest.raises(InputError, match="baseline 'sft' is not one of the inputs"):
        report.build_report(stages, "sft")
    with pytest.raises(InputError, match="alpha"):
        report.build_report(stages, alpha=1.0)
    rows = rows_for("c", [True, None])
    rows[0] = RowResult(**{**rows[0].__dict__, "score": 0.5})
    write_results(tmp_path / "c.jsonl", rows)
    partial = report.load_stages([("a", write(tmp_path, "a", [True, False])), ("c", str(tmp_path / "c.jsonl"))])
    with pytest.raises(InputError, match="row eval-00000 has score 0.5"):
        report.build_report(partial)
    unscored = report.load_stages([("a", write(tmp_path, "a", [True, False])), ("u", write(tmp_path, "u", [None, None]))])
    with pytest.raises(InputError, match="every row is unscored"):
        report.build_report(unscored)


def test_parse_spec(tmp_path):
    odd = tmp_path / "a=b.jsonl"
    odd.write_text("")
    assert report.parse_spec("sft=out/r.jsonl") == ("sft", "out/r.jsonl")
    assert report.parse_spec("out/results-rl.jsonl") == ("results-rl", "out/results-rl.jsonl")
    assert report.parse_spec(str(odd)) == ("a=b", str(odd))
    with pytest.raises(InputError, match="label=path"):
        report.parse_spec("=out/r.jsonl")


# -- the command -----------------------------------------------------------------------------------
def test_report_command_writes_markdown_and_html(tmp_path, capsys):
    base = write(tmp_path, "base", [True, False, False, True])
    sft = write(tmp_path, "sft", [True, True, False, True])
    rl = write(tmp_path, "rl", [True, True, True, False])
    code = main(["report", f"base={base}", sft, "--name", f"rl={rl}", "--baseline", "results-sft",
                 "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert code == 0
    table = out.split("\n\n")[1].splitlines()
    assert [line.split()[0] for line in table[2:]] == ["base", "results-sft", "rl"]
    assert "baseline" in table[3]
    assert (tmp_path / "r.md").read_text().startswith("# Evaluation report")
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_report_command_errors_exit_with_the_input_code(tmp_path, capsys):
    base = write(tmp_path, "base", [True, False, True])
    cand = write(tmp_path, "cand", [True, False])
    assert main(["report", f"base={base}", f"cand={cand}", "--html", str(tmp_path / "r.html")]) == InputError.exit_code
    assert "not results on the same eval rows" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_report_reads_files_written_by_grade_format(tmp_path):
    # the results format is the grade command's: a line written by hand in that format is accepted
    line = {"row_id": "eval-00000", "db_id": "d", "question": "q", "gold": "SELECT 1", "completion": "c",
            "sql": None, "score": 0.0, "outcome": "no_query", "detail": "no SQL found"}
    for name, score in (("a", 0.0), ("b", 1.0)):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({**line, "score": score}) + "\n")
    result = report.build_report(report.load_stages([("a", str(tmp_path / "a.jsonl")), ("b", str(tmp_path / "b.jsonl"))]))
    assert result.comparisons[0].gained[0].baseline_sql is None


# -- generations never mixed (compare.check_generation) ----------------------------------------------------------

def test_grade_notes_the_bundle_and_the_split_beside_its_results(data):
    assert main(["grade", "--data", str(data), "--stage", "base", "--completions", str(BASE_COMPLETIONS)]) == 0
    meta = read_results_meta(data / "results" / "base.jsonl")
    assert meta == {"zip_sha256": sha256_file(data / "spider-scoring.zip"),
                    "eval_sha256": sha256_file(data / "data" / "eval.jsonl"), "rows": 20}


def test_results_of_an_earlier_split_are_refused_after_a_new_prepare_unless_given_by_path(data, capsys):
    for stage, completions in (("base", BASE_COMPLETIONS), ("tuned", TUNED_COMPLETIONS)):
        assert main(["grade", "--data", str(data), "--stage", stage, "--completions", str(completions)]) == 0
    assert main(["prepare", "--sample", "--eval-rows", "10", "--output", str(data)]) == 0  # results/ is kept
    capsys.readouterr()
    assert main(["report", "base", "tuned", "--data", str(data)]) == InputError.exit_code
    said = capsys.readouterr().err
    assert "the results of base" in said and "20 rows" in said and "(10 rows;" in said and "make grade STAGE=base" in said
    results = data / "results"
    assert main(["report", f"base={results / 'base.jsonl'}", f"tuned={results / 'tuned.jsonl'}"]) == 0


def test_stages_graded_with_two_bundles_are_refused(data, capsys):
    for stage, completions in (("base", BASE_COMPLETIONS), ("tuned", TUNED_COMPLETIONS)):
        assert main(["grade", "--data", str(data), "--stage", stage, "--completions", str(completions)]) == 0
    meta = meta_path(data / "results" / "tuned.jsonl")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "zip_sha256": "f" * 64}))  # graded with another zip
    capsys.readouterr()
    assert main(["report", "base", "tuned", "--data", str(data)]) == InputError.exit_code
    assert "graded with different bundles" in capsys.readouterr().err
