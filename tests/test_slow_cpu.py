"""Verdicts do not depend on the CPU: the hostile suite, a reward pass, a grader pass and the hostile
suite through the multi-turn environment's exploration tool give the same verdicts (and observations)
in the trainer container with its usual CPUs and limited to a quarter of a CPU (`harness emulate
verdicts`, docker run --cpus 0.25). Counted work decides; seconds only guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

COMPLETIONS = Path(__file__).resolve().parents[1] / "fixtures" / "sample" / "completions-eval.jsonl"


@pytest.mark.docker
@pytest.mark.slow
def test_verdicts_are_the_same_on_a_quarter_of_a_cpu(docker_engine, prepared_sample, sample_zip, capsys):
    completions = COMPLETIONS
    code = main(["emulate", "verdicts", "--data", str(prepared_sample), "--zip", str(sample_zip),
                 "--completions", str(completions), "--cpus", "0.25"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verdicts: identical at both CPU limits" in out
    # Every part ran (nothing silently skipped).
    for part in ("hostile", "reward", "grader", "explore"):
        line = next(line for line in out.splitlines() if line.strip().startswith(part) and "verdicts;" in line)
        assert int(line.split()[1]) > 0, line


def test_verdicts_mode_refuses_in_process(prepared_sample, sample_zip, capsys):
    code = main(["emulate", "verdicts", "--data", str(prepared_sample), "--zip", str(sample_zip), "--in-process"])
    assert code != 0
    assert "compares two container runs" in capsys.readouterr().err
