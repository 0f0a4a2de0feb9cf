"""The packed bundle under TRL's own GRPOTrainer (CPU, no download): its rewards are the bundle's verdicts.

tests/trl_runner.py runs TRL 1.16's ``GRPOTrainer`` for 3 steps (one prompt, 4 sampled completions
a step) on the sample's rl rows as `harness export --format trl` writes them, with
``reward.trl_reward`` loaded from the unpacked zip by file path as the reward function. The model
is a 2-layer Qwen2 built from a config and warmed up on prompt + gold for a few seconds, so that
some sampled completions are right and some wrong. Then again with extra dataset columns named
``output``, ``solution_str``, ``completion``, ``response`` holding the gold: a reward that read one
of them as the completion would pay 1.0 for every wrong completion. The bundle's telemetry
(``log_metric``: each outcome's share; ``log_extra``: each completion's outcome) is in TRL's logs.

The same trainer with the bundle prepared with the ``skyrl-sql`` reward shape (-1 when no query
can be read, 0 for a wrong one, 1 for a match: outside the [0, 1] of the binary reward): TRL's
rewards are what the bundle's reward pays for each completion, called directly, and its logged
mean their mean; the grader's verdicts on the same completions are unchanged.

tests/trl_async_runner.py runs ``AsyncGRPOTrainer``'s reward process: TRL's rollout loop in a child
started with ``spawn``, ``trl_reward`` pickled into it (loaded by file path in the parent, so it
pickles as the bundle's recipe, never by module name), scoring groups of completions there.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_modules

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RUNNER = Path(__file__).with_name("trl_runner.py")
ASYNC_RUNNER = Path(__file__).with_name("trl_async_runner.py")


@pytest.fixture(scope="module")
def trl_report(sample_zip, exported_rl, tmp_path_factory) -> dict:
    require_modules("torch", "transformers", "trl", "datasets", "tokenizers")
    out = tmp_path_factory.mktemp("trl") / "report.json"
    done = subprocess.run([sys.executable, str(RUNNER), str(sample_zip), str(exported_rl["trl"]), str(out)],
                          capture_output=True, text=True, timeout=3600)  # a guard against a hang only
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("variant", ["plain", "extra_columns"])
def test_the_rewards_trl_computed_are_the_bundles_own_verdicts(trl_report, variant):
    steps = trl_report["runs"][variant]["steps"]
    assert len(steps) == 3 and all(len(s["rewards"]) == 4 for s in steps)
    for step in steps:
        assert step["rewards"] == step["bundle"], (step["step"], step["texts"])
        assert step["logged_mean"] == pytest.approx(sum(step["rewards"]) / len(step["rewards"]))
    every = [r for s in steps for r in s["rewards"]]
    # right and wrong completions both occur: equality is not the trivial all-zero (or all-one) case
    assert 0.0 in every and 1.0 in every, every


def test_columns_named_like_completions_change_nothing(trl_report):
    plain, extra = (trl_report["runs"][v] for v in ("plain", "extra_columns"))
    assert {"output", "solution_str", "response"} <= set(extra["arg_types"])  # TRL did pass them to the reward
    # the same seed samples the same completions; the rewards stay theirs, not the gold's
    assert [s["texts"] for s in extra["steps"]] == [s["texts"] for s in plain["steps"]]
    assert [s["rewards"] for s in extra["steps"]] == [s["rewards"] for s in plain["steps"]]


def test_trl_passes_conversational_completions_and_every_column_as_a_list(trl_report):
    types = trl_report["runs"]["plain"]["arg_types"]
    assert types["completions"] == "list" and types["completion_item"] == "list"  # a list of one message dict
    assert types["ground_truth"] == types["row_id"] == types["db_id"] == "list"
    assert trl_report["versions"]["trl"] == "1.16.0"


def test_loading_the_bundle_by_path_puts_no_generic_module_name_in_sys_modules(trl_report):
    assert trl_report["generic_modules"] == []


def test_trl_logs_the_share_of_each_outcome_and_each_completion_s_outcome(trl_report):
    for step in trl_report["runs"]["plain"]["steps"]:
        outcomes = step["bundle_outcomes"]
        assert step["outcomes"] == outcomes  # log_extra: the completions table's spider_outcome column
        for name in ("match", "no_query", "mismatch", "prediction_error", "prediction_over_budget"):
            assert step["metrics"][f"spider/{name}"] == pytest.approx(outcomes.count(name) / len(outcomes)), name
        assert "spider/decided_on_neighbour" in step["metrics"] and "spider/reused" in step["metrics"]


@pytest.fixture(scope="module")
def shaped_trl_report(shaped_sample, exported_rl, tmp_path_factory) -> dict:
    require_modules("torch", "transformers", "trl", "datasets", "tokenizers")
    _data, zip_path = shaped_sample("skyrl-sql")
    out = tmp_path_factory.mktemp("trl-shaped") / "report.json"
    done = subprocess.run([sys.executable, str(RUNNER), str(zip_path), str(exported_rl["trl"]), str(out), "plain"],
                          capture_output=True, text=True, timeout=3600)  # a guard against a hang only
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_under_a_shaped_preset_trl_s_rewards_are_what_the_bundle_s_reward_pays(shaped_trl_report):
    assert shaped_trl_report["reward_shape"] == "skyrl-sql"
    steps = shaped_trl_report["runs"]["plain"]["steps"]
    assert len(steps) == 3 and all(len(s["rewards"]) == 4 for s in steps)
    for step in steps:
        assert step["rewards"] == step["paid"], (step["step"], step["texts"])
        assert step["logged_mean"] == pytest.approx(sum(step["rewards"]) / len(step["rewards"]))
        # the shape's table: a match 1, no query -1, any other outcome 0; the verdict itself stays binary
        expected = [1.0 if o == "match" else -1.0 if o == "no_query" else 0.0 for o in step["bundle_outcomes"]]
        assert step["rewards"] == expected and step["bundle"] == [1.0 if o == "match" else 0.0 for o in step["bundle_outcomes"]]
    every = [r for s in steps for r in s["rewards"]]
    assert {1.0, -1.0} <= set(every), every  # a match and a completion with no query: -1 reached TRL as it is
    assert shaped_trl_report["runs"]["plain"]["steps"][0]["outcomes"] == steps[0]["bundle_outcomes"]


@pytest.fixture(scope="module")
def async_report(sample_zip, exported_rl, tmp_path_factory) -> dict:
    require_modules("torch", "transformers", "trl", "datasets", "tokenizers", "aiohttp")
    out = tmp_path_factory.mktemp("trl-async") / "report.json"
    done = subprocess.run([sys.executable, str(ASYNC_RUNNER), str(sample_zip), str(exported_rl["trl"]), str(out)],
                          capture_output=True, text=True, timeout=3600)  # a guard against a hang only
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_async_grpo_s_reward_process_scores_with_the_pickled_reward_as_the_bundle_does(async_report):
    groups = async_report["groups"]
    assert async_report["exitcode"] == 0 and len(groups) == 4 and async_report["reward_name"] == "trl_reward"
    assert all(g["pid"] != async_report["parent_pid"] for g in groups)  # scored in the spawned child
    for group in groups[:3]:
        assert [m["rewards/trl_reward"] for m in group["metrics"]] == group["bundle"] == [1.0, 0.0, 1.0, 0.0]


def test_in_the_reward_process_a_row_the_bundle_cannot_score_is_left_out_not_zero(async_report):
    stale = async_report["groups"][3]
    assert stale["bundle"] == [None] * 4
    assert all(math.isnan(m["rewards/trl_reward"]) for m in stale["metrics"])  # TRL's "unscorable": NaN
    assert stale["advantages"] == [0.0] * 4  # no push towards or away from anything
