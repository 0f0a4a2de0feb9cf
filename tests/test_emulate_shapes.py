"""The emulated trainer with a shaped reward: reward steps, the pre-push checks and the verdicts job.

The sample is prepared with ``--reward-shape skyrl-sql`` (-1 / 0 / 1) and ``sql-r1`` (-1 to 7.5):
the reward returns values outside [0, 1], which the emulator accepts within the bounds the
bundle's index declares and judges by that table (harness.common.reward_shape), while the grader
stays binary. The synthetic completions of a reward step are the gold, the gold in a fence (both a
match), a query with other rows (a wrong answer that runs) and prose (no query).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from harness.common.bundle_loader import load_bundle
from harness.common.rows import read_split
from harness.emulator import reward_job, verdicts_job
from harness.emulator.calls import shape_for


@pytest.fixture(scope="module")
def shaped(shaped_sample) -> dict[str, tuple[Path, Path]]:
    """{shape: (prepared folder, zip)} for the sample prepared with skyrl-sql and with sql-r1."""
    return {shape: shaped_sample(shape) for shape in ("skyrl-sql", "sql-r1")}


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT)


def test_reward_steps_pay_the_shape_and_count_zero_and_full_by_it(shaped):
    data, zip_path = shaped["skyrl-sql"]
    done = _harness("emulate", "reward", "--in-process", "--zip", str(zip_path), "--data", str(data), "--steps", "2")
    assert done.returncode == 0, done.stderr
    # per group: 1 + 1 (the gold, fenced) + 0 (other rows) - 1 (no query), over 4; "zero" is the shape's least
    assert done.stdout.count("reward mean 0.250  zero 0.250  full 0.500") == 2, done.stdout
    assert "crashes 0, reward shape skyrl-sql;" in done.stdout


def test_the_steps_and_verdicts_of_sql_r1_stay_within_its_bounds(shaped, tmp_path):
    data, zip_path = shaped["sql-r1"]
    rows = read_split(data / "data" / "rl.jsonl", "rl")
    groups = reward_job.groups_for(rows, None, 4)
    with load_bundle(zip_path, tmp_path) as loaded:
        assert shape_for(loaded).bounds == (-1.0, 7.5) and shape_for(loaded, "grader").binary
        stats = reward_job.reward_steps(loaded, rows, groups, prompts_per_step=4, steps=2, threads=2)
        verdicts = verdicts_job.reward_verdicts(loaded, rows[:3], groups[:3])
    assert all(s.crashes == 0 and s.share_full == 0.5 and s.share_zero == 0.25 for s in stats)
    scores = [score for _row, _k, score, _outcome in verdicts]
    assert [s > 6 for s in scores] == [True, True, False, False] * 3  # the gold and the fenced gold: 6 and length
    assert [s for s in scores if s <= 6] == [0.0, -1.0] * 3


@pytest.mark.slow
def test_a_shaped_bundle_passes_every_pre_push_check_in_process(shaped, tmp_path):
    data, zip_path = shaped["sql-r1"]
    report = tmp_path / "r.json"
    done = _harness("verify", "--in-process", "--zip", str(zip_path), "--data", str(data), "--json", str(report))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert all(c["passed"] for c in checks.values())
    assert "reward shape sql-r1: each reward paid the match value 6 (up to +1.5)" in checks["golds score 1.0"]["summary"]
    assert "this bundle pays sql-r1" in done.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_a_shaped_bundle_passes_in_the_trainer_container_and_its_reward_steps_run_there(docker_engine, shaped, tmp_path):
    data, zip_path = shaped["skyrl-sql"]
    verify = _harness("verify", "--zip", str(zip_path), "--data", str(data), "--json", str(tmp_path / "r.json"))
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr
    assert all(c["passed"] for c in json.loads((tmp_path / "r.json").read_text())["checks"])
    steps = _harness("emulate", "reward", "--zip", str(zip_path), "--data", str(data), "--steps", "2")
    assert steps.returncode == 0, steps.stderr
    assert steps.stdout.count("reward mean 0.250  zero 0.250  full 0.500") == 2, steps.stdout + steps.stderr
