"""Several completions a row: `grade` grades every sample, `report`'s pass@k and majority@k, each
figure computed by hand (harness/report/sampling.py), and the leaderboards' columns in the results."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import golds
from harness.cli import main
from harness.common.errors import InputError
from harness.common.results import RowResult, read_results, samples_path
from harness.report import sampling

WRONG, OTHER_WRONG, FAILS = "SELECT 'x'", "SELECT 'y'", "SELECT nope FROM nowhere"


def write_samples(data: Path, stage: str, groups: list[list[str]]) -> None:
    path = data / "completions" / f"{stage}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"row_id": f"eval-{i:05d}", "completions": g}) + "\n"
                            for i, g in enumerate(groups)))


def test_n_samples_a_row_are_all_graded_and_give_pass_and_majority_at_k(data, capsys):
    rows = golds(data / "data" / "eval.jsonl")
    assert len(rows) % 2 == 0
    # Even rows: wrong, right, right, wrong (c = 2); odd rows: fails, right, wrong, wrong again (c = 1).
    write_samples(data, "sampled", [[WRONG, g, g, OTHER_WRONG] if i % 2 == 0 else [FAILS, g, WRONG, WRONG]
                                    for i, g in enumerate(rows)])
    assert main(["grade", "--data", str(data), "--stage", "sampled", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    first = read_results(data / "results" / "sampled.jsonl")
    every = read_results(samples_path(data / "results" / "sampled.jsonl"))
    assert [r.row_id for r in first] == [f"eval-{i:05d}" for i in range(len(rows))] and {r.sample for r in first} == {0}
    assert len(every) == 4 * len(rows) and [r.sample for r in every[:8]] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [r.score for r in every[:8]] == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert every[4].answer is None and every[5].answer == every[1].answer is not None  # the failing one has no rows
    f = sampling.figures(every)
    # By hand: pass@1 = (2/4 + 1/4) / 2; pass@2 = ((1 - C(2,2)/C(4,2)) + (1 - C(3,2)/C(4,2))) / 2 = (5/6 + 1/2) / 2;
    # majority@1: the first sample (wrong; or failed: no vote) = 0; majority@2: even rows a tie of
    # wrong and right, the wrong first = 0, odd rows right alone = 1; majority@4: even right (2 votes),
    # odd wrong (2 votes) = 1/2.
    assert f.n == 4 and f.rows == len(rows) and f.left_out == 0 and f.first == 0.0
    assert dict(f.pass_at) == pytest.approx({1: 0.375, 2: (5 / 6 + 1 / 2) / 2, 4: 1.0})
    assert dict(f.majority_at) == pytest.approx({1: 0.0, 2: 0.5, 4: 0.5})
    assert "4 completions a row" in out and "pass@2 0.667" in out and "majority@4 0.500" in out
    # Graded again with one completion a row, the samples of the earlier grading are not left beside it.
    (data / "completions" / "sampled.jsonl").write_text("".join(json.dumps(g) + "\n" for g in rows))
    assert main(["grade", "--data", str(data), "--stage", "sampled", "--workers", "1"]) == 0
    assert not samples_path(data / "results" / "sampled.jsonl").exists()


def test_rows_with_different_numbers_of_samples_are_refused(data, capsys):
    rows = golds(data / "data" / "eval.jsonl")
    write_samples(data, "uneven", [[g, g] if i != 3 else [g] for i, g in enumerate(rows)])
    assert main(["grade", "--data", str(data), "--stage", "uneven"]) == InputError.exit_code
    assert "row eval-00000 has 2 completions and row eval-00003 1; give every eval row the same number" in \
        capsys.readouterr().err
    assert not (data / "results" / "uneven.jsonl").exists()


def _sample(row: str, sample: int, score: float | None, answer: str | None) -> RowResult:
    return RowResult(row, "db", "q", "g", "c", "s", score, "match" if score else "mismatch", "", answer=answer,
                     sample=sample)


def test_a_row_with_an_unscored_sample_is_left_out_and_ties_go_to_the_first():
    samples = [_sample("a", 0, 0.0, "k1"), _sample("a", 1, 1.0, "k2"), _sample("a", 2, 1.0, "k2"),
               _sample("b", 0, 1.0, "k3"), _sample("b", 1, None, None), _sample("b", 2, 0.0, "k4")]
    f = sampling.figures(samples)
    assert (f.rows, f.left_out, f.n) == (1, 1, 3)
    assert dict(f.majority_at) == {1: 0.0, 2: 0.0, 3: 1.0}  # at 2: k1 and k2 tie, k1 came first
    assert dict(f.pass_at)[1] == pytest.approx(2 / 3)
    assert "1 rows with an unscored sample left out" in sampling.summary_line(f)


def test_the_leaderboards_columns_are_in_the_results_and_their_line(data, capsys):
    rows = golds(data / "data" / "eval.jsonl")
    (data / "completions").mkdir(exist_ok=True)
    (data / "completions" / "gold.jsonl").write_text("".join(json.dumps(g) + "\n" for g in rows))
    assert main(["grade", "--data", str(data), "--stage", "gold", "--workers", "1"]) == 0
    results = read_results(data / "results" / "gold.jsonl")
    assert {(r.official_score, r.bird_score) for r in results} == {(1.0, 1.0)}
    assert "Spider's official rule 1.000, BIRD's rule 1.000 on the original database" in capsys.readouterr().out


def _row(i: int, score: float, official: float | None, bird: float | None, why_o: str | None = None,
         why_b: str | None = None, sample: int = 0, answer: str | None = "k") -> RowResult:
    return RowResult(f"eval-{i:05d}", "pets", f"q{i}", "SELECT 1", "c", f"SELECT {i}", score,
                     "match" if score else "mismatch", "", score, "original", official, bird, why_o, why_b, answer, sample)


def test_the_report_shows_each_rule_and_the_rows_apart_and_the_sampled_stage(tmp_path, capsys):
    from harness.common.results import write_results
    base = [_row(0, 1.0, 1.0, 1.0), _row(1, 0.0, 1.0, 1.0, "DISTINCT", "duplicates"), _row(2, 1.0, 1.0, 0.0, None,
            "column order"), _row(3, 0.0, 0.0, 0.0)]
    old = [dataclasses.replace(r, official_score=None, bird_score=None, official_differs=None, bird_differs=None)
           for r in base]
    write_results(tmp_path / "base.jsonl", base)
    write_results(tmp_path / "old.jsonl", old)
    write_results(tmp_path / "sampled.jsonl", base)
    write_results(samples_path(tmp_path / "sampled.jsonl"),
                  [dataclasses.replace(r, sample=k, score=r.score if k == 0 else 1.0 - (r.score or 0.0),
                                       answer=f"a{k}") for r in base for k in range(2)])
    assert main(["report", f"base={tmp_path / 'base.jsonl'}", f"old={tmp_path / 'old.jsonl'}",
                 f"sampled={tmp_path / 'sampled.jsonl'}", "--markdown", str(tmp_path / "r.md")]) == 0
    md = (tmp_path / "r.md").read_text()
    assert "## Scores comparable with the leaderboards" in md
    assert "| base | 0.500 (2/4) | 0.750 (3/4) | DISTINCT 1 | 0.500 (2/4) | column order 1, duplicates 1 |" in md
    assert "Graded before these columns existed (grade them again to have them): old." in md
    assert "| eval-00001 | pets | Spider's official | 0 | 1 | DISTINCT | SELECT 1 |" in md
    # Two samples a row, the second always the other verdict: pass@1 = 1/2, pass@2 = 1; majority@2 is a
    # tie between two answers, the first sample's wins: the first sample's accuracy, 1/2.
    assert "## Several completions a row: pass@k and majority@k" in md
    assert "| sampled | 2 | 4 | 0.500 | @1 0.500, @2 1.000 | @1 0.500, @2 0.500 |" in md
    # A samples file whose first samples are not the stage's results: refused, naming it.
    write_results(samples_path(tmp_path / "sampled.jsonl"), [dataclasses.replace(base[0], score=0.0)])
    assert main(["report", f"base={tmp_path / 'base.jsonl'}", f"sampled={tmp_path / 'sampled.jsonl'}"]) == InputError.exit_code
    assert "does not hold the rows of" in capsys.readouterr().err
