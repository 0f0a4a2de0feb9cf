"""The multi-turn environment under the trainers' own loops (CPU, no download): every final answer's
reward is what the bundle's reward pays for the same text as a one-shot completion.

tests/trl_env_runner.py runs TRL 1.16's ``GRPOTrainer`` with ``environment_factory`` (the bundle's
``environment.trl_environment``, loaded from the unpacked zip by path) for 3 steps of 4 rollouts on a
tiny Qwen2 warmed up on whole episodes; tests/openrlhf_runner.py runs OpenRLHF 0.11's
``MultiTurnAgentExecutor`` over the bundle's ``openrlhf_agent.py`` with a scripted engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _unavailable, require_modules

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
OPENRLHF_DIR = HERE.parent / ".venv-openrlhf"
SKYRL_PYTHON = HERE.parent / ".venv-skyrl" / "bin" / "python"


def test_grpo_with_the_environment_pays_each_answer_what_the_reward_pays(sample_zip, exported_rl, tmp_path):
    require_modules("torch", "transformers", "trl", "datasets", "tokenizers", "jmespath")
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(HERE / "trl_env_runner.py"), str(sample_zip), str(exported_rl["trl"]),
                           str(out)], capture_output=True, text=True, timeout=3600)  # a guard against a hang only
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    rollouts = report["rollouts"]
    assert report["global_step"] == 3 and len(rollouts) == 12
    assert all(r["fault"] is None for r in rollouts)
    assert [r for r in rollouts if r["reward"] != r["paid"] or r["reward"] != r["graded"]] == []
    assert any(r["queries"] for r in rollouts), "no rollout explored: the warm-up did not teach the tool call"
    assert {r["outcome"] for r in rollouts if r["text"]} & {"match", "mismatch"}, "no rollout submitted a query"


def test_openrlhf_s_executor_pays_each_answer_what_the_reward_pays(sample_zip, prepared_sample, tmp_path):
    require_modules("torch", "transformers", "tokenizers")
    if not (OPENRLHF_DIR / ".installed").is_file():
        _unavailable("OpenRLHF's code is not in .venv-openrlhf: `make setup-openrlhf` installs it")
    from harness.cli import main
    rows = tmp_path / "openrlhf.jsonl"
    assert main(["export", "--format", "openrlhf", "--data", str(prepared_sample), "--output", str(rows)]) == 0
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(OPENRLHF_DIR), str(HERE)]))
    done = subprocess.run([sys.executable, str(HERE / "openrlhf_runner.py"), str(sample_zip), str(rows), str(out)],
                          capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert str(OPENRLHF_DIR) in report["openrlhf"]
    episodes = report["episodes"]
    assert len(episodes) == 24 and [e for e in episodes if e["reward"] != e["paid"]] == []
    assert [e["reward"] for e in episodes[:4]] == [1.0, 0.0, 0.0, 0.0]  # the gold, a near miss, a wrong answer, none
    assert [e["turns"] for e in episodes[:4]] == [2, 2, 1, 9]  # 8 queries allowed: the ninth is its (empty) answer
    assert "<|im_start|>user\n<result>\n" in episodes[0]["observation"] and "(queries left: 7 of 8;" in episodes[0]["observation"]


def test_skyrl_gym_s_make_and_step_pay_each_answer_what_the_reward_pays(sample_zip, exported_rl, tmp_path):
    if not SKYRL_PYTHON.is_file():
        _unavailable("skyrl-gym is not installed: `make setup-skyrl` makes .venv-skyrl")
    from bundle import reward
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(exported_rl["trl"].read_text().splitlines(keepends=True)[:4]))
    out = tmp_path / "report.json"
    done = subprocess.run([str(SKYRL_PYTHON), str(HERE / "skyrl_runner.py"), str(sample_zip), str(rows), str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert ".venv-skyrl" in report["skyrl_gym"]
    finals = {"look then gold": lambda g: g, "look then wrong": lambda g: "SELECT 'no such answer'",
              "bare wrong": lambda g: "SELECT 'no such answer'", "looks only": lambda g: ""}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRAINER_BUNDLE_ROOT", str(tmp_path / "unpacked"))
        import zipfile
        with zipfile.ZipFile(sample_zip) as z:
            z.extractall(tmp_path / "unpacked")
        for e in report["episodes"]:
            *looks, last = e["steps"]
            assert last["done"] and all(not s["done"] and s["reward"] == 0.0 for s in looks), e
            paid = reward.compute_score(solution_str=finals[e["kind"]](e["gold"]), ground_truth=e["gold"],
                                        extra_info={"db_id": e["db_id"]})
            assert last["reward"] == paid, e
    kinds = [(e["kind"], len(e["steps"]), e["steps"][-1]["reward"]) for e in report["episodes"][:4]]
    assert kinds == [("look then gold", 2, 1.0), ("look then wrong", 2, 0.0), ("bare wrong", 1, 0.0), ("looks only", 5, 0.0)]
    assert report["episodes"][0]["steps"][0]["observations"][0]["content"].startswith("<result>\n")
