"""The packed bundle through verl 0.9.1's own reward plumbing: its scores are the bundle's verdicts.

tests/verl_runner.py unpacks nothing itself: it is given the unpacked zip, composes verl's own
config tree with ``reward.custom_reward_function.path=<unpacked>/reward.py`` (verl's documented
way) and lets verl load it, with nothing on ``sys.path`` and no environment change. A batch of the
sample's rl rows (`harness export --format verl`) with mixed responses goes through the legacy and
the current ``NaiveRewardManager``, the ``batch`` manager (plural keyword lists), the ``prime``
manager (a process pool: ``compute_score`` pickled), ``rate_limited`` (which turns an error into
0.0), and through ``RewardLoopManager``'s Ray actors with the ``naive`` and the ``remote`` manager
(``compute_score`` sent to its own actor by cloudpickle) and with ``outcome_fields`` set through
verl's ``reward_kwargs``.

The managers twice: with the binary bundle, and with the bundle prepared with the ``sql-r1`` reward
shape (-1 for no query or a query that does not run, 0 for a wrong one, 6 plus a length part for a
match: far outside [0, 1]); the Ray loop once, with the shaped bundle (its values are not the
verdicts, so a worker that dropped the shape shows). Every manager's scores are what the bundle's
reward pays, called directly (``paid``); the grader's verdicts (``bundle``) stay 1.0 and 0.0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import require_modules

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RUNNER = Path(__file__).with_name("verl_runner.py")


_RUNS: dict[str, dict] = {}


def _run(shape: str, zip_path: Path, rows: Path, work: Path, modes: list[str]) -> dict:
    """One verl_runner process on the bundle of ``shape``, kept for the module's other tests."""
    if shape not in _RUNS:
        folder = work / "unpacked"
        with zipfile.ZipFile(zip_path) as z:
            z.extractall(folder)
        out = work / "report.json"
        # The timeout guards a hang only: the setup takes 120 s quiet and several times that at load 30;
        # an hour is far beyond any load CI meets (a hard limit here made the file fail at load 11-30).
        done = subprocess.run([sys.executable, str(RUNNER), str(folder), str(rows), str(out), *modes],
                              capture_output=True, text=True, timeout=3600, cwd=work)
        assert done.returncode == 0, done.stderr[-4000:]
        _RUNS[shape] = json.loads(out.read_text())
    assert _RUNS[shape]["reward_shape"] == shape
    return _RUNS[shape]


@pytest.fixture(scope="module", params=["binary", "sql-r1"])
def verl_report(request, sample_zip, shaped_sample, exported_rl, tmp_path_factory) -> dict:
    """verl's managers on the binary bundle and on a shaped one (the shaped run also goes through Ray)."""
    require_modules("torch", "verl", "ray", "hydra", "tokenizers")
    if request.param == "binary":
        return _run("binary", sample_zip, exported_rl["verl"], tmp_path_factory.mktemp("verl"), [])
    return _run(request.param, shaped_sample(request.param)[1], exported_rl["verl"], tmp_path_factory.mktemp("verl"),
                ["rayloop"])


@pytest.fixture(scope="module")
def ray_report(shaped_sample, exported_rl, tmp_path_factory) -> dict:
    """verl's reward loop on Ray, with the shaped bundle: its values differ from the verdicts, so a
    worker that scored with the wrong function, or dropped the shape, shows."""
    require_modules("torch", "verl", "ray", "hydra", "tokenizers")
    return _run("sql-r1", shaped_sample("sql-r1")[1], exported_rl["verl"], tmp_path_factory.mktemp("verl"), ["rayloop"])


def paid(report: dict) -> object:
    """What the bundle's reward pays for each response (verl's reward tensors are float32: approx)."""
    return pytest.approx(report["paid"], rel=1e-6)


def test_verl_loads_reward_and_grader_by_file_path_with_no_generic_module_names(verl_report):
    assert verl_report["verl"] == "0.9.1"
    assert verl_report["loaded"] == verl_report["direct"]  # the gold, then SELECT 1, through verl and directly
    assert verl_report["loaded"]["grader"] == [1.0, 0.0]
    assert verl_report["generic_modules"] == []


def test_the_bundles_verdicts_are_mixed_and_the_reward_pays_its_shape(verl_report):
    assert set(verl_report["bundle"]) == {0.0, 1.0} and len(verl_report["bundle"]) == 17
    if verl_report["reward_shape"] == "binary":
        assert verl_report["paid"] == verl_report["bundle"]
    else:  # sql-r1: a match over 6, a wrong answer that runs 0, no query or a failing query -1
        for outcome, value in zip(verl_report["outcomes"], verl_report["paid"]):
            assert (6.0 < value <= 7.5) if outcome == "match" else value == (0.0 if outcome == "mismatch" else -1.0)
        assert {0.0, -1.0} <= set(verl_report["paid"])


@pytest.mark.parametrize("manager", ["legacy", "current", "batch", "prime"],
                         ids=["legacy naive", "current naive", "batch: plural keyword lists", "prime: a process pool"])
def test_verls_reward_managers_score_as_the_bundle(verl_report, manager):
    assert verl_report["managers"][manager] == paid(verl_report)


@pytest.mark.parametrize("manager", ["naive", "remote", "outcome_fields"],
                         ids=["naive", "remote: compute_score cloudpickled into its own actor", "outcome fields"])
def test_verls_reward_loop_ray_workers_score_as_the_bundle(ray_report, manager):
    ray_loop = ray_report["rayloop"][manager]
    # RewardLoopWorker actors, each loading reward.py by path: two share the batch in one run
    assert ray_loop["workers"] == [True] * (2 if manager == "outcome_fields" else 1)
    assert ray_loop["scores"] == paid(ray_report)
    assert ray_loop["scores"] != ray_report["bundle"]  # the shape's values, not the verdicts


def test_the_default_score_is_a_number_and_outcome_fields_reach_reward_extra_info(ray_report):
    assert ray_report["rayloop"]["naive"]["extra"] == {"acc": paid(ray_report)}  # verl's own for a float
    extra = ray_report["rayloop"]["outcome_fields"]["extra"]
    assert extra["outcome"] == ray_report["outcomes"] and extra["score"] == paid(ray_report)
    assert extra["acc"] == ray_report["bundle"]  # the verdict, whatever the shape pays
    expected = {"score", "acc", "outcome", "explanation", "decided_on", "decided_on_neighbour", "reward_shape"}
    assert set(extra) == expected


def test_rate_limited_turns_the_bundle_s_error_into_zero_but_the_error_and_warning_show(verl_report):
    # Documented in docs/integrations.md: this manager swallows exceptions; use naive, remote or batch.
    found = verl_report["rate_limited"]
    assert found["scores"] == pytest.approx(verl_report["paid"] + [0.0], rel=1e-6)  # the stale row: verl's 0.0
    assert len(found["errors"]) == 1 and "not stored in this bundle" in found["errors"][0]
    assert found["warnings"] == [w for w in found["warnings"] if w.startswith("RuntimeWarning: ")]
    assert len(found["warnings"]) == 1 and "unscored (infrastructure_error, stale_bundle)" in found["warnings"][0]
