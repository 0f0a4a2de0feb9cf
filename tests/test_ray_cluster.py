"""`grade --ray HOST:PORT` on a multi-node Ray cluster on this machine: the local backend's results.

A head (no CPUs) on 127.0.0.2 and two worker nodes of 2 CPUs on 127.0.0.3 and 127.0.0.4, started
by ``ray start`` (tests/ray_helpers.py), joined by the harness's own command in another process
with the ``harness`` package shipped to the workers (runtime_env ``py_modules``). Then one worker
node is killed outright (SIGKILL to its raylet, from inside a shard) while it grades: its shard is
graded again on the other node and no row is lost. The nodes are stopped afterwards, and nothing
of theirs may be left running.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import FIXTURES, require_modules
from ray_helpers import RAY_CLUSTER_GROUP, RayCluster, trapdoor_zip

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group(RAY_CLUSTER_GROUP)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_modules("ray")
    temp = tmp_path_factory.mktemp("ray-cluster", numbered=False)
    nodes = RayCluster(temp, workers=2, cpus=2)
    try:
        yield nodes.start()
    finally:
        left = nodes.stop()
        assert left == {}, f"processes left after stopping the nodes (killed now): {left}"


def grade(cluster, prepared, zip_path, completions, output, *extra, command=("grade", "--stage", "x")):
    args = [sys.executable, "-m", "harness", *command, "--data", str(prepared), "--zip", str(zip_path),
            "--completions", str(completions), "--output", str(output), *extra]
    done = subprocess.run(args, env=cluster.env, capture_output=True, text=True, timeout=300)
    return done, done.stdout + done.stderr


def test_grading_on_two_worker_nodes_gives_the_local_results(cluster, prepared_sample, sample_zip, tmp_path):
    completions = FIXTURES / "sample" / "completions-eval.jsonl"
    local, said = grade(cluster, prepared_sample, sample_zip, completions, tmp_path / "local.jsonl")
    assert local.returncode == 0, said
    done, said = grade(cluster, prepared_sample, sample_zip, completions, tmp_path / "ray.jsonl",
                       "--ray", cluster.address, "--ray-workers", "2", "--ray-shard-rows", "2")
    assert done.returncode == 0, said
    # shards go to whichever worker has started: the first may grade several before the other starts
    assert re.search(rf"ray \({cluster.address}\): 2 workers in [12] processes on [12] node\(s\), 10 shards; start",
                     done.stdout), done.stdout
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def test_a_worker_node_killed_while_grading_loses_no_row(cluster, prepared_sample, sample_zip, tmp_path):
    zip_path = trapdoor_zip(sample_zip, tmp_path / "trapdoor.zip")
    lines = [json.loads(line) for line in (FIXTURES / "sample" / "completions-eval.jsonl").read_text().splitlines()]
    marker = tmp_path / "node-killed"
    lines[3] = {"row_id": lines[3]["row_id"], "completion": f"TRAP kill-node-once {marker}"} \
        if isinstance(lines[3], dict) and "row_id" in lines[3] else f"TRAP kill-node-once {marker}"
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    emulate = ("emulate", "grader", "--function", "trapdoor")  # the emulated grader job, on Ray
    done, said = grade(cluster, prepared_sample, zip_path, completions, tmp_path / "ray.jsonl", "--ray", cluster.address,
                       "--ray-workers", "2", "--ray-shard-rows", "2", command=emulate)
    assert done.returncode == 0, said
    assert marker.exists() and "1 retried" in done.stdout, said
    local, said = grade(cluster, prepared_sample, zip_path, completions, tmp_path / "local.jsonl", "--in-process",
                        command=emulate)  # the marker is there now: nothing is killed
    assert local.returncode == 0, said
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert sum(1 for ip, p in cluster.nodes.items() if p.poll() is None) == 2  # the head and one worker node
