"""Reading a run's reward log: TRL's trainer_state.json, verl's file and console loggers, plain CSV and
JSONL; malformed logs stopped with an error naming the file and the line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from harness.common.errors import InputError
from harness.report.reward_log import RewardLogError, assign_reward_logs, read_reward_log

ROOT = Path(__file__).resolve().parent.parent

# TRL GRPOTrainer's log_history: a train step's metrics, a step whose completions were all unscored
# (TRL logs None), an evaluation, and the run's closing summary
TRL_STATE = {"global_step": 30, "log_history": [
    {"epoch": 0.1, "step": 10, "loss": 0.01, "reward": 0.25, "reward_std": 0.4, "rewards/spider/mean": 0.25},
    {"epoch": 0.2, "step": 20, "loss": 0.02, "reward": None, "rewards/spider/mean": None},
    {"epoch": 0.2, "step": 20, "eval_loss": 0.3, "eval_reward": 0.31},
    {"epoch": 0.3, "step": 30, "loss": 0.01, "reward": 0.35, "reward_std": 0.4, "rewards/spider/mean": 0.36},
    {"epoch": 0.3, "step": 30, "train_runtime": 120.5, "train_loss": 0.013},
]}
# verl's FileLogger writes {"step": N, "data": {...}} per call; validation calls carry other keys
VERL_FILE = "\n".join(json.dumps(line) for line in [
    {"step": 1, "data": {"critic/score/mean": 0.10, "critic/rewards/mean": 0.09, "actor/pg_loss": -0.01}},
    {"step": 1, "data": {"val-core/spider/reward/mean@1": 0.2}},
    {"step": 2, "data": {"critic/score/mean": 0.15, "critic/rewards/mean": 0.14}},
    {"step": 3, "data": {"critic/score/mean": 0.12, "critic/rewards/mean": 0.11}},
]) + "\n"
# verl's console logger: "step:N - key:value - ..." among the trainer's other output, numpy scalars by repr
VERL_CONSOLE = """Started a local Ray instance.
(TaskRunner pid=4242) step:1 - timing/gen:21.470 - critic/score/mean:0.004 - critic/rewards/mean:0.003 - critic/lr(1e-4):0.100
(TaskRunner pid=4242) validation generation end
(TaskRunner pid=4242) step:2 - timing/gen:23.020 - critic/score/mean:np.float64(0.031) - critic/rewards/mean:0.030
step:3 - critic/score/mean:0.052 - critic/rewards/mean:0.050
"""

FORMATS = [
    ("TRL trainer_state.json, its null step and summary skipped", "trainer_state.json", json.dumps(TRL_STATE, indent=2), None,
     ("TRL trainer_state.json", "reward", (10.0, 30.0), (0.25, 0.35), 3)),
    ("TRL with one reward function's mean", "trainer_state.json", json.dumps(TRL_STATE), "rewards/spider/mean",
     ("TRL trainer_state.json", "rewards/spider/mean", (10.0, 30.0), (0.25, 0.36), 3)),
    ("TRL's state under another name, told by its content", "state.txt", json.dumps(TRL_STATE), None,
     ("TRL trainer_state.json", "reward", (10.0, 30.0), (0.25, 0.35), 3)),
    ("verl's file logger reads critic/score/mean", "run.jsonl", VERL_FILE, None,
     ("verl file logger", "critic/score/mean", (1.0, 2.0, 3.0), (0.10, 0.15, 0.12), 1)),
    ("verl's file logger with another key", "run.jsonl", VERL_FILE, "critic/rewards/mean",
     ("verl file logger", "critic/rewards/mean", (1.0, 2.0, 3.0), (0.09, 0.14, 0.11), 1)),
    ("verl's console output among other lines", "verl_demo.log", VERL_CONSOLE, None,
     ("verl console", "critic/score/mean", (1.0, 2.0, 3.0), (0.004, 0.031, 0.052), 0)),
    ("a plain CSV with other columns and an empty cell", "rewards.csv", "step,loss,reward\n3,0.1,0.5\n1,0.2,0.25\n2,0.2,\n", None,
     ("CSV", "reward", (1.0, 3.0), (0.25, 0.5), 1)),
    ("a plain JSONL with blank lines and a NaN", "rewards.jsonl", '{"step": 1, "reward": 0.2}\n\n{"step": 2, "reward": NaN}\n'
     '{"step": 3, "reward": 0.4}\n', None, ("JSONL", "reward", (1.0, 3.0), (0.2, 0.4), 1)),
    ("a plain JSONL with no .jsonl name", "rewards.txt", '{"step": 1, "reward": 0.2}\n{"step": 2, "reward": 0.3}\n', None,
     ("JSONL", "reward", (1.0, 2.0), (0.2, 0.3), 0)),
    ("a CSV with a byte-order mark", "excel.csv", "\ufeffstep,reward\n1,0.5\n", None, ("CSV", "reward", (1.0,), (0.5,), 0)),
]


@pytest.mark.parametrize(("name", "content", "key", "expected"), [f[1:] for f in FORMATS], ids=[f[0] for f in FORMATS])
def test_each_log_format_is_read(tmp_path, name, content, key, expected):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    curve = read_reward_log(path, key)
    assert (curve.source, curve.key, curve.steps, curve.rewards, curve.skipped) == expected
    assert curve.path == str(path)


def test_verl_file_logger_falls_back_to_the_rewards_after_the_kl_penalty(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"step": 5, "data": {"critic/rewards/mean": 0.5}}) + "\n")
    assert read_reward_log(path).key == "critic/rewards/mean"


MALFORMED = [
    ("a JSONL line that is not JSON", "run.jsonl", '{"step": 1, "reward": 0.2}\n{"step": 2, "reward": 0.3}\n{"step": 3, rew\n',
     r"run\.jsonl line 3: not valid JSON"),
    ("a JSONL line that is no object", "run.jsonl", '{"step": 1, "reward": 0.2}\n[2, 0.3]\n', r"run\.jsonl line 2: .* not a JSON object"),
    ("a reward that is not a number", "run.jsonl", '{"step": 1, "reward": 0.2}\n{"step": 2, "reward": "high"}\n',
     r"run\.jsonl line 2: the reward is 'high', not a number"),
    ("a reward of true", "run.jsonl", '{"step": 1, "reward": true}\n', r"run\.jsonl line 1: the reward is True, not a number"),
    ("an infinite reward", "run.jsonl", '{"step": 1, "reward": Infinity}\n', r"run\.jsonl line 1: .*not a finite number"),
    ("an entry without its step", "run.jsonl", '{"step": 1, "reward": 0.2}\n{"reward": 0.3}\n', r"run\.jsonl line 2: no step number"),
    ("a CSV cell that is not a number", "run.csv", "step,reward\n1,0.2\n2,0.3\n3,abc\n", r"run\.csv line 4: the reward is 'abc'"),
    ("a CSV row longer than its header", "run.csv", "step,reward\n1,0.2,9\n", r"run\.csv line 2: more cells than the header's 2"),
    ("a CSV without a reward column", "run.csv", "step,loss\n1,0.2\n", r"run\.csv line 1: .*header naming step and reward"),
    ("a truncated trainer_state.json", "trainer_state.json", json.dumps(TRL_STATE, indent=2)[:200],
     r"trainer_state\.json line \d+: not valid JSON"),
    ("a .json file that is not TRL's", "metrics.json", '{"reward": [0.1, 0.2]}', r"metrics\.json: .*log_history list"),
    ("a TRL entry with a bad reward", "trainer_state.json",
     json.dumps({"log_history": [{"step": 10, "reward": 0.1}, {"step": 20, "reward": "0.2x"}]}),
     r"trainer_state\.json log_history entry 1 \(step 20\): the reward is '0\.2x'"),
    ("a verl line without its data", "run.jsonl", '{"step": 1, "data": {"critic/score/mean": 0.1}}\n{"step": 2}\n',
     r"run\.jsonl line 2: no \"data\" object"),
    ("a verl console value that is not a number", "out.log", "step:1 - critic/score/mean:0.1\nnoise\nstep:2 - critic/score/mean:oops\n",
     r"out\.log line 3: the reward is 'oops'"),
    ("a log without the metric", "run.jsonl", '{"step": 1, "loss": 0.2, "rewards/a/mean": 0.1}\n',
     r"run\.jsonl \(JSONL\) has no reward: name the metric with --reward-key \(reward-like metrics in the log: rewards/a/mean\)"),
    ("a log whose metric is always null", "run.jsonl", '{"step": 1, "reward": null}\n', r"run\.jsonl \(JSONL\) holds no value of 'reward'"),
    ("an empty log", "run.jsonl", "\n\n", r"run\.jsonl is empty"),
]


@pytest.mark.parametrize(("name", "content", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_malformed_log_names_the_file_and_the_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RewardLogError, match=message) as caught:
        read_reward_log(path)
    assert isinstance(caught.value, InputError)  # exit code 3, as every bad input


def test_a_log_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "run.csv"
    path.write_bytes(b"step,reward\n1,0.2\xff\n")
    with pytest.raises(RewardLogError, match=r"run\.csv line 2: byte 17 is not UTF-8"):
        read_reward_log(path)


def test_a_missing_log_says_what_to_give(tmp_path):
    with pytest.raises(RewardLogError, match="does not exist: give the run's trainer_state.json"):
        read_reward_log(tmp_path / "nowhere.json")


ASSIGNMENTS = [
    ("a labelled log", ["rl=a.jsonl"], ["sft", "rl"], "sft", [("rl", "a.jsonl")]),
    ("several, comma-separated and repeated", ["rl=a.jsonl,grpo=b.csv", "x=c.log"], ["sft", "rl", "grpo", "x"], "sft",
     [("rl", "a.jsonl"), ("grpo", "b.csv"), ("x", "c.log")]),
    ("a bare file belongs to the one stage besides the baseline", ["run.csv"], ["base", "tuned"], "base", [("tuned", "run.csv")]),
]


@pytest.mark.parametrize(("values", "labels", "baseline", "expected"), [a[1:] for a in ASSIGNMENTS], ids=[a[0] for a in ASSIGNMENTS])
def test_reward_logs_are_assigned_to_stages(values, labels, baseline, expected):
    assert assign_reward_logs(values, labels, baseline) == expected


def test_a_bare_log_with_several_candidate_stages_asks_for_the_stage():
    with pytest.raises(InputError, match="say which stage's run logged it, as STAGE=FILE .*sft, rl"):
        assign_reward_logs(["run.csv"], ["base", "sft", "rl"], "base")


def test_a_log_for_a_stage_not_compared_is_refused_before_it_is_read():
    with pytest.raises(InputError, match=r"--reward-log grpo=missing\.json: 'grpo' is not one of the stages \(sft, rl\)"):
        assign_reward_logs(["grpo=missing.json"], ["sft", "rl"], "sft")


def test_a_path_holding_an_equals_sign_is_a_bare_path(tmp_path):
    path = tmp_path / "lr=1e-6.jsonl"
    path.write_text('{"step": 1, "reward": 0.1}\n')
    assert assign_reward_logs([str(path)], ["sft", "rl"], "sft") == [("rl", str(path))]


def test_the_sample_reward_log_is_what_its_generator_writes():
    spec = importlib.util.spec_from_file_location("sample_reward_log", ROOT / "fixtures" / "sample" / "reward_log.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = (ROOT / "fixtures" / "sample" / "reward-log.jsonl").read_text(encoding="utf-8")
    assert written == "\n".join(module.lines()) + "\n"
    curve = read_reward_log(ROOT / "fixtures" / "sample" / "reward-log.jsonl")
    assert curve.steps == tuple(float(s) for s in range(1, 61)) and curve.skipped == 0
