"""`grade --ray`: the one grading path on Ray workers gives the local backend's results, in row order.

The pure parts (shard plan, progress line, options, the loopback environment) run everywhere; the
rest starts a private local Ray instance (``--ray auto``) per run and needs the [integration] (or
[ray]) group. Worker deaths are made deterministic with tests/ray_helpers.py's trap-door module.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest

from conftest import FIXTURES, require_modules
from harness.cli import main
from harness.commands.options import ray_line
from harness.common.completions import read_completions
from harness.common.errors import InputError
from harness.common.rows import read_split
from harness.raygrade.backend import RayOptions, grade_split_ray
from harness.raygrade.env import is_loopback, loopback_env, ray_environment
from harness.raygrade.pool import Progress, plan_shards
from harness.raygrade.worker import run_folder, sweep_run_folders
from ray_helpers import trapdoor_zip


@pytest.mark.parametrize("total, workers, shard_rows, sizes", [
    (20, 2, None, [3, 3, 3, 3, 3, 3, 2]),
    (20, 2, 7, [7, 7, 6]),
    (1, 8, None, [1]),
    (1000, 2, None, [64] * 15 + [40]),
], ids=["rows over four shards a worker", "a given shard size", "fewer rows than workers", "capped at 64 rows"])
def test_shards_cover_the_rows_in_order(total, workers, shard_rows, sizes):
    shards = plan_shards(total, workers, shard_rows)
    assert [b - a for a, b in shards] == sizes
    assert [a for a, _ in shards] == [0] + [b for _, b in shards[:-1]] and shards[-1][1] == total


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_rewritten_on_a_terminal_and_silent_elsewhere():
    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        p = Progress(5, 2, 2, stream)
        p.update(rows=3)
        p.update(retried=1)
        p.update(rows=2)
        p.close()
    assert pipe.getvalue() == ""
    lines = tty.getvalue().split("\r")
    assert lines[-1].startswith("ray: 5/5 rows graded, 2/2 shards, 2 workers, 1 retried") and tty.getvalue().endswith("\n")


@pytest.mark.parametrize("flags, message", [
    (["--ray-workers", "2"], "go with --ray"),
    (["--ray", "auto", "--ray-workers", "0"], "--ray-workers is 0"),
    (["--ray", "auto", "--ray-shard-rows", "-1"], "--ray-shard-rows is -1"),
    (["--ray", "auto", "--ray-stall-timeout", "0"], "--ray-stall-timeout is 0"),
    (["--ray-stall-timeout", "30"], "go with --ray"),
], ids=["a Ray flag without --ray", "no workers", "a negative shard", "no stall timeout", "a stall timeout without --ray"])
def test_bad_ray_flags_are_refused_before_anything_starts(prepared_sample, sample_zip, flags, message, capsys):
    code = main(["grade", "--data", str(prepared_sample), "--zip", str(sample_zip), "--stage", "x",
                 "--completions", str(FIXTURES / "sample" / "completions-eval.jsonl"), *flags])
    assert code == InputError.exit_code and message in capsys.readouterr().err


def test_the_loopback_environment_is_set_for_the_session_and_restored(monkeypatch):
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")
    with ray_environment(None) as env:
        assert os.environ["https_proxy"] == env["https_proxy"] == "http://127.0.0.1:9"
        assert os.environ["RAY_AUTH_MODE"] == "token" and len(os.environ["RAY_AUTH_TOKEN"]) == 64
    assert "https_proxy" not in os.environ and os.environ["RAY_USAGE_STATS_ENABLED"] == "1"
    with ray_environment("10.1.2.3:6379") as env:  # a real cluster: no proxies, no token of ours
        assert set(env) == {"RAY_USAGE_STATS_ENABLED", "RAY_USAGE_STATS_REPORT_URL"}
    assert loopback_env("x")["RAY_AUTH_TOKEN"] == "x" and is_loopback("ray://127.0.0.1:10001")


def test_a_cluster_address_where_nothing_listens_fails_at_once_saying_what_to_start(prepared_sample, sample_zip, capsys):
    code = main(["grade", "--data", str(prepared_sample), "--zip", str(sample_zip), "--stage", "x",
                 "--completions", str(FIXTURES / "sample" / "completions-eval.jsonl"), "--ray", "127.0.0.9:9"])
    err = capsys.readouterr().err
    assert code == 8 and "nothing answers at 127.0.0.9:9" in err and "ray start --head --port=9" in err


def test_the_run_line_says_what_ray_did():
    line = ray_line({"address": "auto", "workers": 2, "processes": 3, "nodes": ["127.0.0.1"], "shards": 7,
                     "retried": 1, "given_up": 0, "start_s": 3.0, "grade_s": 0.5})
    assert line == "ray (auto): 2 workers in 3 processes on 1 node(s), 7 shards, 1 retried; start 3.0 s, grading 0.5 s"


# -- on a local Ray instance ------------------------------------------------------------------------

def eval_inputs(prepared: Path, completions: Path) -> tuple[list, list[str]]:
    rows = read_split(prepared / "data" / "eval.jsonl", "eval")
    return rows, read_completions(completions).one_per_row([r.id for r in rows])


def local_results(zip_path: Path, rows, completions, function="grader"):
    from harness.common.bundle_loader import load_bundle
    from harness.emulator.grader_job import grade_split
    with load_bundle(zip_path) as loaded:
        return grade_split(loaded, rows, completions, function=function)


@pytest.fixture
def ray_installed():
    require_modules("ray")


@pytest.mark.integration
def test_grade_with_ray_auto_writes_the_local_backends_results(ray_installed, prepared_sample, sample_zip, tmp_path, capsys):
    completions = FIXTURES / "sample" / "completions-eval-base.jsonl"
    common = ["grade", "--data", str(prepared_sample), "--zip", str(sample_zip), "--stage", "base",
              "--completions", str(completions)]
    assert main([*common, "--output", str(tmp_path / "local.jsonl")]) == 0
    assert main([*common, "--output", str(tmp_path / "ray.jsonl"), "--ray", "auto", "--ray-workers", "2",
                 "--ray-shard-rows", "3"]) == 0
    out = capsys.readouterr().out
    # shards go to whichever worker has started: one fast worker may grade all 7 before the other starts
    assert re.search(r"ray \(auto\): 2 workers in [12] processes on 1 node\(s\), 7 shards; start", out), out
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


@pytest.mark.integration
def test_a_killed_worker_is_retried_elsewhere_and_typed_faults_stay_unscored(ray_installed, prepared_sample, sample_zip,
                                                                               tmp_path):
    zip_path = trapdoor_zip(sample_zip, tmp_path / "trapdoor.zip")
    rows, completions = eval_inputs(prepared_sample, FIXTURES / "sample" / "completions-eval.jsonl")
    marker = tmp_path / "died-once"
    completions[2], completions[5], completions[7] = f"TRAP die-once {marker}", "TRAP gold-error", "TRAP crash"
    results, figures = grade_split_ray(zip_path, rows, completions, function="trapdoor",
                                       options=RayOptions(workers=2, shard_rows=3))
    assert marker.exists() and figures["retried"] == 1 and figures["given_up"] == 0
    # the dead process finished no shard (row 2 was in its first); the others each unpacked the zip once, on their
    # first shard (how many took part depends on start-up times: the survivor may have done everything)
    assert figures["processes"] == figures["unpacks"] and figures["processes"] in (1, 2)
    assert results == local_results(zip_path, rows, completions, "trapdoor")  # marker there: no death locally
    assert [r.row_id for r in results] == [r.id for r in rows]
    assert (results[5].score, results[5].outcome) == (None, "gold_error")
    assert (results[7].score, results[7].outcome) == (None, "crash")
    assert not run_folder(figures["run"]).exists()  # the killed worker's unpacked copy is gone too


@pytest.mark.integration
def test_a_shard_whose_workers_keep_dying_comes_back_unscored_not_zero(ray_installed, prepared_sample, sample_zip, tmp_path):
    zip_path = trapdoor_zip(sample_zip, tmp_path / "trapdoor.zip")
    rows, completions = eval_inputs(prepared_sample, FIXTURES / "sample" / "completions-eval.jsonl")
    expected = local_results(zip_path, rows, completions, "trapdoor")
    completions[4] = "TRAP die-always"
    results, figures = grade_split_ray(zip_path, rows, completions, function="trapdoor",
                                       options=RayOptions(workers=2, shard_rows=1, max_attempts=2))
    assert figures["given_up"] == 1 and figures["retried"] == 1
    lost = results[4]
    assert (lost.row_id, lost.score, lost.outcome) == (rows[4].id, None, "infrastructure_error")
    assert "died 2 times" in lost.detail and "not wrong" in lost.detail
    assert results[:4] + results[5:] == expected[:4] + expected[5:]


@pytest.mark.integration
def test_a_bad_function_is_refused_by_the_driver_before_ray_starts(ray_installed, prepared_sample, sample_zip):
    rows, completions = eval_inputs(prepared_sample, FIXTURES / "sample" / "completions-eval.jsonl")
    with pytest.raises(InputError, match="no module 'nothere'"):
        grade_split_ray(sample_zip, rows, completions, function="nothere", options=RayOptions(workers=1))



@pytest.mark.integration
@pytest.mark.real_data
@pytest.mark.slow
def test_the_ray_benchmark_prints_its_figures_on_real_dev_pairs(ray_installed, spider_dir, tmp_path, capsys):
    assert main(["bench-ray", "--spider", str(spider_dir), "--pairs", "60", "--json", str(tmp_path / "f.json")]) == 0
    out = capsys.readouterr().out
    assert "60 dev rows" in out and "local backend:" in out and "Ray's fixed cost here" in out
    assert "ray, 1 worker(s):" in out and "ray, 2 worker(s):" in out
    figures = json.loads((tmp_path / "f.json").read_text())
    assert figures["ray_2"]["processes"] == 2 and figures["ray_1"]["processes"] == 1


def test_run_folders_of_drivers_that_no_longer_run_are_swept(tmp_path):
    import subprocess
    import sys
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = tmp_path / f"ray-grade-{gone.stdout.strip()}-abcd", tmp_path / f"ray-grade-{os.getpid()}-abcd"
    for folder in (dead, alive):
        (folder / "123-x").mkdir(parents=True)
        (folder / "123-x").chmod(0o555)  # the loader leaves unpacked copies read-only
    assert sweep_run_folders(str(tmp_path)) == [dead.name]
    assert not dead.exists() and alive.exists()
