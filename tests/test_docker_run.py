"""The trainer container: the lockdown as a pure function, and (with an engine) what it really enforces."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.common import bundle_loader as emulate
from harness.common.errors import InputError
from harness.common.layout import Prepared
from harness.common.rows import read_split
from harness.containers import trainer as docker_run
from harness.emulator import main as emulator_main
from harness.emulator import reward_job
from harness.prepare import pack

ROOT = Path(__file__).resolve().parent.parent


# --- pure: no Docker needed -----------------------------------------------------------------------

@pytest.fixture
def config(tmp_path) -> dict:
    return docker_run.run_config("img:1", ["python3", "-V"], tmp_path, name="run-1",
                                 limits=docker_run.RunLimits(mem_bytes=1 << 30, pids=64, cpus=1.5, tmpfs_bytes=1 << 26))


@pytest.mark.parametrize("key, expected", [
    ("network_mode", "none"),
    ("read_only", True),
    ("cap_drop", ["ALL"]),
    ("security_opt", ["no-new-privileges"]),
    ("user", "65534:65534"),
    ("ipc_mode", "none"),
    ("mem_limit", 1 << 30),
    ("memswap_limit", 1 << 30),
    ("pids_limit", 64),
    ("nano_cpus", 1_500_000_000),
    ("working_dir", "/"),
    ("labels", {docker_run.LABEL: "run-1"}),
], ids=lambda v: v if isinstance(v, str) else None)
def test_run_config_locks_the_container_down(config, key, expected):
    assert config[key] == expected


def test_inputs_are_mounted_read_only_and_tmp_is_a_small_noexec_tmpfs(config, tmp_path):
    assert config["volumes"] == {str(tmp_path.resolve()): {"bind": "/opt/spider", "mode": "ro"}}
    options = config["tmpfs"]["/tmp"].split(",")
    assert f"size={1 << 26}" in options and {"noexec", "nosuid", "nodev"} <= set(options)
    assert config["environment"]["PYTHONPATH"] == "/opt/spider"
    assert config["command"] == ["python3", "-V"] and config["image"] == "img:1"


def test_tmpfs_grows_with_the_bundle_but_never_shrinks():
    base = docker_run.RunLimits(tmpfs_bytes=256 * docker_run.MiB)
    assert base.for_bundle(10 * docker_run.MiB).tmpfs_bytes == 256 * docker_run.MiB
    assert base.for_bundle(500 * docker_run.MiB).tmpfs_bytes == 564 * docker_run.MiB


def test_image_tag_is_a_hash_of_its_inputs():
    tag = docker_run.image_tag(b"FROM a", "sha256:1")
    assert tag.startswith("spider-scoring-trainer:") and len(tag.split(":")[1]) == 16
    assert tag == docker_run.image_tag(b"FROM a", "sha256:1")
    assert tag != docker_run.image_tag(b"FROM b", "sha256:1")
    assert tag != docker_run.image_tag(b"FROM a", "sha256:2")


def test_dockerfile_defaults_to_a_public_python_and_runs_as_nobody():
    text = docker_run.DOCKERFILE.read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in text and "FROM ${BASE_IMAGE}" in text
    assert "USER 65534:65534" in text
    assert "COPY" not in text and "ADD " not in text  # inputs are mounted, the image stays code-free


def test_staged_inputs_are_world_readable_copies(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "z.zip").write_bytes(b"zip")
    (private / "z.zip").chmod(0o600)
    stage = tmp_path / "stage"
    stage.mkdir()
    docker_run.stage_inputs(stage, {"in/bundle.zip": private / "z.zip"})
    assert (stage / "in" / "bundle.zip").read_bytes() == b"zip"
    assert (stage / "harness" / "emulator" / "main.py").is_file() and (stage / "fixtures/hostile/cases.json").is_file()
    files = [p for p in stage.rglob("*") if p.is_file()]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in files)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o755 for p in [stage, *stage.rglob("*")] if p.is_dir())
    with pytest.raises(InputError, match="nowhere.zip"):
        docker_run.stage_inputs(stage, {"in/x": tmp_path / "nowhere.zip"})


class _FakeContainers:
    """A client whose create fails: the container (created or not) must still be removed by name."""

    def __init__(self):
        self.removed = []

    def create(self, **config):
        raise RuntimeError("engine hiccup")

    def get(self, name):
        containers = self

        class Handle:
            def remove(self, force):
                containers.removed.append((name, force))
        return Handle()


def test_cleanup_runs_on_failure_and_signal_handlers_are_restored(config):
    client = type("Client", (), {"containers": _FakeContainers()})()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="hiccup"):
        docker_run.run_container(client, config)
    assert client.containers.removed == [("run-1", True)]
    assert signal.getsignal(signal.SIGTERM) is before


# --- with a Docker engine -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client(docker_engine):
    engine = docker_run.connect()
    docker_run.ensure_image(engine, say=lambda line: None)  # base image missing: DockerUnavailable says why
    return engine


def _gone(client, name: str) -> bool:
    return not client.containers.list(all=True, filters={"name": name})


LOCKDOWN_PROBE = r"""
import json, os, socket, sys
def status(key):
    return next(l.split()[1] for l in open("/proc/self/status") if l.startswith(key + ":"))
def writes(path):
    try:
        with open(path, "w") as f: f.write("x")
        os.unlink(path); return True
    except OSError: return False
def net():
    s = socket.socket(); s.settimeout(2)
    try: s.connect(("1.1.1.1", 53)); return "connected"
    except OSError as e: return type(e).__name__
def third_party():
    try: import docker; return True
    except ImportError: return False
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "cap_eff": status("CapEff"), "no_new_privs": status("NoNewPrivs"),
  "interfaces": sorted(os.listdir("/sys/class/net")), "root_writable": writes("/probe"),
  "mount_writable": writes("/opt/spider/probe"), "tmp_writable": writes("/tmp/probe"), "shm": os.path.exists("/dev/shm"),
  "tmp_bytes": os.statvfs("/tmp").f_blocks * os.statvfs("/tmp").f_frsize, "net": net(), "third_party": third_party(),
  "mem": open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read().strip() if os.path.exists("/sys/fs/cgroup/memory") else None,
  "pids": open("/sys/fs/cgroup/pids/pids.max").read().strip() if os.path.exists("/sys/fs/cgroup/pids") else None,
  "python": sys.version_info[:2]}))
"""


@pytest.mark.docker
def test_the_container_is_locked_down_and_removed(client):
    limits = docker_run.RunLimits(mem_bytes=512 * docker_run.MiB, pids=32, tmpfs_bytes=32 * docker_run.MiB)
    result = docker_run.run_job(["python3", "-c", LOCKDOWN_PROBE], {}, limits=limits, timeout_s=120, say=lambda s: None)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert (seen["uid"], seen["gid"]) == (65534, 65534)
    assert int(seen["cap_eff"], 16) == 0 and seen["no_new_privs"] == "1"
    assert seen["interfaces"] == ["lo"] and seen["net"] != "connected"
    assert not seen["root_writable"] and not seen["mount_writable"] and seen["tmp_writable"]
    assert not seen["shm"] and seen["tmp_bytes"] == 32 * docker_run.MiB
    assert not seen["third_party"] and seen["python"] >= [3, 9]
    if seen["mem"] is not None:  # cgroup v1 layout; the limits are the ones asked for
        assert int(seen["mem"]) == 512 * docker_run.MiB and seen["pids"] == "32"
    assert _gone(client, result.name)


@pytest.mark.docker
def test_a_container_over_its_time_limit_is_killed_and_removed(client):
    started = time.monotonic()
    result = docker_run.run_job(["python3", "-c", "import time; time.sleep(120)"], {}, timeout_s=2, say=lambda s: None)
    assert result.timed_out and result.exit_code != 0
    assert time.monotonic() - started < 60
    assert _gone(client, result.name)


INTERRUPTED_CHILD = """
import signal, sys, threading
from harness.containers import trainer as docker_run

def interrupt_from_another_thread():
    # A process-directed signal may land on any thread; this sends it to a thread other than main.
    if sys.stdin.readline().strip() == "from-another-thread":
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

threading.Thread(target=interrupt_from_another_thread, daemon=True).start()
docker_run.run_job(["python3", "-c", "import socket, sys, time; print('started', socket.gethostname(), file=sys.stderr, flush=True); time.sleep(120)"],
                   {}, timeout_s=300, on_stderr=lambda t: print(t, end="", flush=True), say=lambda s: None)
"""


@pytest.mark.docker
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "ctrl-c-on-another-thread"])
def test_an_interrupted_run_removes_its_container(client, how):
    child = subprocess.Popen([sys.executable, "-c", INTERRUPTED_CHILD], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.startswith("started"), child.stderr.read()
        container_id = line.split()[1]
        assert client.containers.list(all=True, filters={"id": container_id})  # it is running now
        if how == "ctrl-c-on-another-thread":
            child.stdin.write("from-another-thread\n")
            child.stdin.flush()
        else:
            child.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)
        child.wait(timeout=600)  # a guard: stopping and removing takes seconds, longer on a loaded machine
    finally:
        child.kill()
    assert child.returncode != 0
    assert not client.containers.list(all=True, filters={"id": container_id})


@pytest.mark.docker
def test_the_image_is_built_once_per_input(client):
    base = client.images.get(docker_run.DEFAULT_BASE_IMAGE)
    tag = docker_run.ensure_image(client, say=lambda s: pytest.fail(f"rebuilt: {s}"))
    assert tag == docker_run.image_tag(docker_run.DOCKERFILE.read_bytes(), base.id)
    assert client.images.get(tag).attrs["Config"]["User"] == "65534:65534"


@pytest.mark.docker
def test_reward_mode_in_the_container_matches_in_process(client, prepared_sample, tmp_path):
    summary, _ = pack.pack(prepared_sample / "bundle", tmp_path / "bundle.zip")
    rl = prepared_sample / "data" / "rl.jsonl"
    job = ["reward", "--zip", "/opt/spider/in/bundle.zip", "--data", "/opt/spider/in/prepared", "--steps", "20"]
    inside, run = docker_run.emulator_job(job, {"bundle.zip": tmp_path / "bundle.zip", "prepared/data/rl.jsonl": rl},
                                          unpacked_bytes=summary.unpacked_bytes, say=lambda s: None)
    with emulate.load_bundle(tmp_path / "bundle.zip", tmp_path) as loaded:
        rows = read_split(rl, "rl")
        here = reward_job.reward_summary(reward_job.reward_steps(
            loaded, rows, reward_job.groups_for(rows, None, 8), steps=20))
    assert inside["summary"]["calls"] == here["calls"] == 20 * 64
    assert inside["summary"]["mean"] == here["mean"] == 0.5
    assert inside["summary"]["outcomes"] == here["outcomes"]
    assert inside["python"] != "" and _gone(client, run.name)
    print(f"\nreward throughput: container {inside['summary']['calls_per_s']:.0f} calls/s, "
          f"in-process {here['calls_per_s']:.0f} calls/s")


@pytest.mark.docker
def test_an_input_error_inside_the_container_comes_back_as_one(client, prepared_sample, tmp_path):
    summary, _ = pack.pack(prepared_sample / "bundle", tmp_path / "bundle.zip")
    (tmp_path / "c.jsonl").write_text('{"row_id": "eval-00999", "completion": "SELECT 1"}\n')
    job = ["grader", "--zip", "/opt/spider/in/bundle.zip", "--data", "/opt/spider/in/prepared",
           "--completions", "/opt/spider/in/completions.jsonl"]
    inputs = {"bundle.zip": tmp_path / "bundle.zip", "prepared/data/eval.jsonl": prepared_sample / "data" / "eval.jsonl",
              "completions.jsonl": tmp_path / "c.jsonl"}
    with pytest.raises(InputError, match="eval-00999") as caught:
        docker_run.emulator_job(job, inputs, unpacked_bytes=summary.unpacked_bytes, say=lambda s: None)
    assert str(tmp_path / "c.jsonl") in str(caught.value) and "/opt/spider" not in str(caught.value)


@pytest.mark.docker
def test_the_grader_job_in_the_container_uses_its_cores_with_the_results_of_one_process(client, prepared_sample,
                                                                                         tmp_path):
    summary, _ = pack.pack(prepared_sample / "bundle", tmp_path / "bundle.zip")
    completions = ROOT / "fixtures" / "sample" / "completions-eval.jsonl"
    job = ["grader", "--zip", "/opt/spider/in/bundle.zip", "--data", "/opt/spider/in/prepared",
           "--completions", "/opt/spider/in/completions.jsonl"]
    inputs = {"bundle.zip": tmp_path / "bundle.zip", "prepared/data/eval.jsonl": prepared_sample / "data" / "eval.jsonl",
              "completions.jsonl": completions}
    inside, run = docker_run.emulator_job(job, inputs, unpacked_bytes=summary.unpacked_bytes, say=lambda s: None)
    assert inside["workers"] == 2  # the container's CPU limit, not the host's cores
    here = emulator_main.job_grader(tmp_path / "bundle.zip", Prepared(prepared_sample), completions, workers=1)
    assert here["workers"] == 1 and inside["results"] == here["results"]
    assert _gone(client, run.name)
