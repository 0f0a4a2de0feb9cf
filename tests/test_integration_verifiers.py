"""harness/verifiers_env.py under verifiers' own evaluation (``verifiers.v1``'s ``run_eval``), offline.

verifiers 0.4.0 lives in ``.venv-verifiers`` (``make setup-verifiers``: it cannot share the
[integration] group's venv); tests/verifiers_runner.py runs there, a stub model answering each
sample eval row with its sample completion, two rollouts a row. Every rollout's ``spider`` reward
must be what the bundle's reward pays for that completion (``grade --function reward``'s path), and
a row the bundle cannot score must come back as a failed rollout with no reward, never a 0.0.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import _unavailable
from harness.common.bundle_loader import load_bundle
from harness.common.completions import read_completions
from harness.common.rows import read_split
from harness.emulator.grader_job import grade_rows
from test_service import SAMPLE_COMPLETIONS

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
RUNNER = ROOT / "tests" / "verifiers_runner.py"


@pytest.mark.integration
def test_verifiers_evaluation_pays_the_bundle_s_reward_and_fails_an_unscored_row(prepared_sample, sample_zip, tmp_path):
    if not PYTHON.is_file():
        _unavailable("verifiers is not installed: `make setup-verifiers` makes .venv-verifiers")
    data = tmp_path / "prepared"
    shutil.copytree(prepared_sample / "data", data / "data")
    shutil.copytree(prepared_sample / "bundle" / "data", data / "bundle" / "data")  # the index: db_id hints
    rows = read_split(data / "data" / "eval.jsonl", "eval")
    answers = read_completions(SAMPLE_COMPLETIONS).one_per_row([r.id for r in rows])
    with load_bundle(sample_zip, tmp_path) as loaded:
        expected = {r.id: e.score for r, e in zip(rows, grade_rows(loaded, rows, answers, function="reward"))}
    # The first row's gold changed in the split: the bundle holds no such gold (a stale row).
    lines = (data / "data" / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["messages"][-1]["content"] = "SELECT 'a gold this bundle never saw'"
    (data / "data" / "eval.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    (tmp_path / "answers.json").write_text(json.dumps({str(r.prompt[-1]["content"]): a for r, a in zip(rows, answers)}))
    out = tmp_path / "rollouts.jsonl"
    done = subprocess.run([str(PYTHON), str(RUNNER), str(data), str(sample_zip), str(tmp_path / "answers.json"), "2", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rollouts = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["row_id"] for r in rollouts) == sorted([r.id for r in rows] * 2)
    stale = [r for r in rollouts if r["row_id"] == rows[0].id]
    assert all(not r["ok"] and r["reward"] is None for r in stale)  # failed, never paid 0.0
    scored = [r for r in rollouts if r["row_id"] != rows[0].id]
    assert all(r["ok"] for r in scored)
    assert [(r["row_id"], r["reward"]) for r in scored] == [(r["row_id"], expected[r["row_id"]]) for r in scored]
    assert 0 < sum(r["reward"] == 1.0 for r in scored) < len(scored)
