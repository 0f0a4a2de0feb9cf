"""`submit` against a fake `akka-optimize` first on PATH: the sequence, idempotency, every failure.

The fake (tests/fake_akka_optimize.py) is a real executable: the harness finds it on PATH and runs
it as a subprocess, exactly as it would run the real CLI. The pre-push verification is a stub
command (--verify-cmd) that logs itself into the same call log, so its place in the order shows.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from harness import cli
from harness.common.errors import SubmitError, VerificationFailed
from harness.submit import names, pipeline
from harness.submit import steps as submit
from harness.submit.process import Result, verification

FAKE = Path(__file__).with_name("fake_akka_optimize.py")
BASE = "Qwen/Qwen2.5-0.5B-Instruct"


def chat(question: str, answer: str = "SELECT count(*) FROM singer") -> str:
    return json.dumps({"messages": [{"role": "system", "content": "Write one SQLite query."},
                                    {"role": "user", "content": question},
                                    {"role": "assistant", "content": answer}]})


@pytest.fixture
def fake_cli(tmp_path, monkeypatch) -> Path:
    """A temp bin dir holding an `akka-optimize` wrapper, first on PATH; returns the fake's home."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "akka-optimize"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    wrapper.chmod(0o755)
    home = tmp_path / "fake-akka"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_AKKA_DIR", str(home))
    for var in ("FAKE_AKKA_LOGGED_OUT", "FAKE_AKKA_PIPELINE_OUTCOME", "FAKE_AKKA_FAIL",
                "FAKE_AKKA_HANG", "TRAINER_URL"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def work(tmp_path) -> dict[str, Path]:
    """out/ with the three splits and a valid pipeline.json, dist/spider-scoring.zip, a verify stub."""
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    for split, count in (("train", 12), ("rl", 40), ("eval", 6)):
        rows = [chat(f"How many singers are there? ({split} {i})") for i in range(count)]
        (out / "data" / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    (out / "pipeline.json").write_bytes(pipeline.dumps(pipeline.build_pipeline(pipeline.PipelineParams())))
    zip_path = tmp_path / "dist" / "spider-scoring.zip"
    zip_path.parent.mkdir()
    with zipfile.ZipFile(zip_path, "w") as archive:
        archive.writestr("reward.py", "def compute_score(**kw):\n    return 0.0\n")
    stub = tmp_path / "verify_stub.py"
    stub.write_text("import json, os, sys\n"
                    "with open(os.path.join(os.environ['FAKE_AKKA_DIR'], 'calls.jsonl'), 'a') as f:\n"
                    "    f.write(json.dumps({'argv': ['VERIFY'], 'env': {}}) + '\\n')\n"
                    "print('verification report: 3 checks')\n"
                    "sys.exit(0 if sys.argv[1] == 'pass' else 1)\n")
    return {"out": out, "zip": zip_path, "stub": stub}


def run_submit(work: dict[str, Path], *extra: str, verify: str = "pass") -> int:
    os.makedirs(os.environ["FAKE_AKKA_DIR"], exist_ok=True)
    verify_cmd = f"{sys.executable} {work['stub']} {verify}"
    return cli.main(["submit", "--data", str(work["out"]), "--zip", str(work["zip"]),
                     "--verify-cmd", verify_cmd, *extra])


def calls(home: Path) -> list[list[str]]:
    log = home / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line)["argv"] for line in log.read_text().splitlines()]


def fake_state(home: Path) -> dict:
    return json.loads((home / "state.json").read_text())


def expected_sequence(work: dict[str, Path], pipeline_id: str, *, create: bool = True,
                      start: bool = True) -> list[list[str]]:
    out = work["out"]
    seq = [["VERIFY"], ["training", "base-models", "select", BASE, "--wait"]]
    seq += [["datasets", "create", "-f", str(out / "data" / f"{s}.jsonl"), "--name", f"spider-{s}"]
            for s in ("train", "rl", "eval")]
    seq += [["training", "bundles", "push", str(work["zip"]), "--name", "spider-scoring"],
            ["training", "workloads", "get", "spider-sql"]]
    seq += [["training", "workloads", "create", "spider-sql"]] if create else []
    seq += [["training", "workloads", "set-evaluation", "spider-sql", "--dataset", "spider-eval",
             "--grader", "bundle:spider-scoring#grader"]]
    seq += [["training", "pipelines", "start", "-f", str(out / "pipeline.json"), "-o", "json",
             "--jq", ".pipelineId", "--force"]] if start else []
    seq += [["training", "pipelines", "wait", pipeline_id, "--exit-status"],
            ["training", "pipelines", "get", pipeline_id]]
    return seq


def test_submit_runs_the_documented_sequence_in_order(fake_cli, work, capsys):
    assert run_submit(work) == 0
    state = fake_state(fake_cli)
    assert len(state["pipelines"]) == 1
    pipeline_id = next(iter(state["pipelines"]))
    assert calls(fake_cli) == expected_sequence(work, pipeline_id)
    assert set(state["datasets"]) == {"spider-train", "spider-rl", "spider-eval"}
    assert state["workloads"]["spider-sql"]["evaluation"] == {
        "dataset": "spider-eval", "grader": "bundle:spider-scoring#grader"}
    recorded = json.loads((work["out"] / "submission.json").read_text())
    assert recorded["pipelineId"] == pipeline_id
    printed = capsys.readouterr().out
    import hashlib
    assert hashlib.sha256(work["zip"].read_bytes()).hexdigest() in printed  # the bundle's hash
    assert f"pipeline {pipeline_id} completed" in printed


def test_running_twice_is_safe_and_follows_the_same_pipeline(fake_cli, work, capsys):
    assert run_submit(work) == 0
    first = calls(fake_cli)
    pipeline_id = next(iter(fake_state(fake_cli)["pipelines"]))
    assert run_submit(work) == 0
    second = calls(fake_cli)[len(first):]
    # registrations and set-evaluation again; no second create, no second pipeline
    assert second == expected_sequence(work, pipeline_id, create=False, start=False)
    assert len(fake_state(fake_cli)["pipelines"]) == 1
    assert "already started from these exact inputs" in capsys.readouterr().out


@pytest.mark.parametrize("change", ["--new-pipeline", "changed eval split"])
def test_a_new_pipeline_starts_when_asked_or_when_inputs_change(fake_cli, work, change):
    assert run_submit(work) == 0
    extra = ()
    if change == "--new-pipeline":
        extra = ("--new-pipeline",)
    else:
        with open(work["out"] / "data" / "eval.jsonl", "a") as handle:
            handle.write(chat("How many concerts are there?") + "\n")
    assert run_submit(work, *extra) == 0
    starts = [c for c in calls(fake_cli) if c[:3] == ["training", "pipelines", "start"]]
    assert len(starts) == 2
    assert len(fake_state(fake_cli)["pipelines"]) == 2


def test_failed_verification_stops_before_any_cli_call(fake_cli, work, capsys):
    assert run_submit(work, verify="fail") == VerificationFailed.exit_code == 1
    assert calls(fake_cli) == [["VERIFY"]]
    assert "pre-push verification failed" in capsys.readouterr().err


def test_missing_cli_is_reported_before_verification(fake_cli, work, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(work["out"]))  # a folder without akka-optimize
    assert run_submit(work) == SubmitError.exit_code
    err = capsys.readouterr().err
    assert "`akka-optimize` was not found on PATH" in err and "DRY_RUN=1" in err
    assert calls(fake_cli) == []


def test_not_logged_in_is_named_as_such(fake_cli, work, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_AKKA_LOGGED_OUT", "1")
    assert run_submit(work) == SubmitError.exit_code
    err = capsys.readouterr().err
    assert "not logged in to the trainer" in err and "auth login" in err
    assert calls(fake_cli) == [["VERIFY"], ["training", "base-models", "select", BASE, "--wait"]]


def test_a_failed_step_names_the_step_its_output_and_what_to_do(fake_cli, work, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_AKKA_FAIL", "datasets create")
    assert run_submit(work) == SubmitError.exit_code
    err = capsys.readouterr().err
    assert "step 'register dataset spider-train' failed (exit 1)" in err
    assert "500 Internal Server Error" in err  # what the CLI printed
    assert "What to do:" in err and "train.jsonl" in err
    assert not any(c[:3] == ["training", "bundles", "push"] for c in calls(fake_cli))


@pytest.mark.parametrize("outcome", ["FAILED", "CANCELLED"])
def test_a_failed_pipeline_fails_the_submission_and_shows_its_stages(fake_cli, work, capsys,
                                                                    monkeypatch, outcome):
    monkeypatch.setenv("FAKE_AKKA_PIPELINE_OUTCOME", outcome)
    assert run_submit(work) == SubmitError.exit_code
    captured = capsys.readouterr()
    assert "step 'wait for pipeline" in captured.err and f"ended {outcome}" in captured.err
    assert "pipelines resume" in captured.err
    assert f"rl           {outcome}" in captured.out  # `pipelines get` shown for diagnosis
    assert calls(fake_cli)[-1][:3] == ["training", "pipelines", "get"]


def test_dry_run_prints_the_commands_and_runs_nothing(fake_cli, work, capsys):
    assert run_submit(work, "--dry-run") == 0
    out = capsys.readouterr().out
    assert calls(fake_cli) == []
    assert "akka-optimize training workloads get spider-sql || akka-optimize training workloads create spider-sql" in out
    assert "akka-optimize training pipelines wait PIPELINE_ID --exit-status" in out
    assert str(work["stub"]) in out  # the verification it would run first
    assert not (work["out"] / "submission.json").exists()


def test_dry_run_still_reports_a_missing_input(fake_cli, work, capsys):
    work["zip"].unlink()
    assert run_submit(work, "--dry-run") == 3
    captured = capsys.readouterr()
    assert "datasets create" in captured.out
    assert f"{work['zip']}: pack it: `make pack`" in captured.err


def test_trainer_url_passes_through_untouched(fake_cli, work, capsys, monkeypatch):
    monkeypatch.setenv("TRAINER_URL", "http://127.0.0.1:9/trainer")
    assert run_submit(work) == 0
    log = [json.loads(line) for line in (fake_cli / "calls.jsonl").read_text().splitlines()]
    cli_calls = [entry for entry in log if entry["argv"] != ["VERIFY"]]
    assert {entry["env"]["TRAINER_URL"] for entry in cli_calls} == {"http://127.0.0.1:9/trainer"}
    assert {entry["env"]["AKKA_DISABLE_PROMPTS"] for entry in cli_calls} == {"true"}
    assert not any("127.0.0.1" in arg for entry in cli_calls for arg in entry["argv"])
    assert "trainer: TRAINER_URL=http://127.0.0.1:9/trainer" in capsys.readouterr().out


def test_pipeline_naming_another_bundle_is_refused_before_anything_runs(fake_cli, work, capsys):
    other = pipeline.PipelineParams(names=names.Names(bundle="someone-elses-bundle"))
    (work["out"] / "pipeline.json").write_bytes(pipeline.dumps(pipeline.build_pipeline(other)))
    assert run_submit(work) == 3
    assert "someone-elses-bundle" in capsys.readouterr().err
    assert calls(fake_cli) == []


def test_a_hanging_step_is_stopped_at_its_time_limit(fake_cli, work, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_AKKA_HANG", "training base-models select")
    assert run_submit(work, "--step-timeout", "1") == SubmitError.exit_code
    assert "did not finish within 1 s" in capsys.readouterr().err


def test_the_default_verification_verifies_what_is_pushed(work):
    argv = verification(False, None, work["zip"], work["out"])
    assert argv == [sys.executable, "-m", "harness", "verify", "--data", str(work["out"]), "--zip", str(work["zip"])]
    assert verification(True, None, work["zip"], work["out"]) is None
    assert verification(False, "make -s verify", work["zip"], work["out"]) == ["make", "-s", "verify"]


def test_the_zip_defaults_to_the_prepared_folder_s(fake_cli, work, capsys):
    # no --zip: DATA/spider-scoring.zip, which this folder lacks: said, with the command making it
    os.makedirs(os.environ["FAKE_AKKA_DIR"], exist_ok=True)
    assert cli.main(["submit", "--data", str(work["out"]), "--dry-run"]) == 3
    assert f"{work['out'] / 'spider-scoring.zip'}: pack it" in capsys.readouterr().err


@pytest.mark.parametrize("output, auth", [
    ("Error: not logged in. Run 'akka-optimize auth login'", True),
    ("error: 401 Unauthorized", True),
    ("Error: token has expired", True),
    ("Error: workload spider-sql not found", False),
    ("dataset hash 4010ab22 rejected: row 3 is not a chat row", False),
], ids=["not logged in", "http 401", "expired token", "not found", "hash containing 401"])
def test_auth_failures_are_told_apart_from_other_failures(output, auth):
    session = submit.Session("akka-optimize", runner=lambda *a: Result(1, "", output), say=lambda s: None)
    step = submit.Step("some step", ("x",), "the step's own hint")
    message = str(session.failure(step, Result(1, "", output)))
    assert ("not logged in to the trainer" in message) is auth
    assert ("the step's own hint" in message) is (not auth)


def test_fake_cli_behaves_like_the_documented_one(fake_cli, tmp_path):
    """The fake must itself fail where the real CLI fails, or the tests above prove nothing."""
    import subprocess
    run = lambda *a: subprocess.run(["akka-optimize", *a], capture_output=True, text=True)  # noqa: E731
    assert run("training", "workloads", "create", "w").returncode == 0
    assert run("training", "workloads", "create", "w").returncode != 0
    assert run("training", "workloads", "get", "missing").returncode != 0
    assert run("training", "pipelines", "wait", "nope").returncode != 0
    assert run("training", "bundles", "push", "x.zip", "--name", "b", "--url", "u").returncode == 2
    assert "unknown command" in run("registry", "bundles", "register").stderr


def test_a_wait_past_its_limit_is_stopped_and_a_rerun_follows_the_same_pipeline(fake_cli, work, capsys,
                                                                               monkeypatch):
    monkeypatch.setenv("FAKE_AKKA_HANG", "training pipelines wait")
    assert run_submit(work, "--wait-timeout", "1") == SubmitError.exit_code
    assert "did not finish within 1 s" in capsys.readouterr().err
    monkeypatch.delenv("FAKE_AKKA_HANG")
    assert run_submit(work) == 0
    assert len(fake_state(fake_cli)["pipelines"]) == 1  # the re-run waited on the recorded one
