"""`grade --ray` ends when a worker node dies and no spare CPU is left (the issue's cluster shape).

A head with one CPU on 127.0.0.2 and one worker node of 2 CPUs on 127.0.0.3 (tests/ray_helpers.py):
three workers, one on the head, two on the worker node. Rows whose completion is ``TRAP hold-on
127.0.0.3 MARKER`` hang on the worker node (and score as usual anywhere else); once a worker there
holds one, every process of that node is killed at once. The lost node's shards can only go to
the head's one worker: the command must end with the local backend's results, and no unpacked
copy of the run may be left under the temporary folder. Before the pool gave shards only to
started workers, the replacements waited forever for a CPU with shards assigned, and so did the
command.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, require_modules
from ray_helpers import RAY_CLUSTER_GROUP, RayCluster, trapdoor_zip

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group(RAY_CLUSTER_GROUP)]
WORKER_NODE = "127.0.0.3"


@pytest.fixture
def cluster(tmp_path):
    require_modules("ray")
    nodes = RayCluster(tmp_path, workers=1, cpus=2, port=6490, head_cpus=1)
    try:
        yield nodes.start()
    finally:
        left = nodes.stop()
        assert left == {}, f"processes left after stopping the nodes (killed now): {left}"


def command(cluster, prepared, zip_path, completions, output, *extra) -> list[str]:
    return [sys.executable, "-m", "harness", "emulate", "grader", "--function", "trapdoor", "--data", str(prepared),
            "--zip", str(zip_path), "--completions", str(completions), "--output", str(output), *extra]


def test_a_worker_node_killed_with_no_spare_cpu_left_still_ends_with_every_row(cluster, prepared_sample, sample_zip,
                                                                                tmp_path):
    zip_path = trapdoor_zip(sample_zip, tmp_path / "trapdoor.zip")
    marker = tmp_path / "held"
    lines = [json.loads(line) for line in (FIXTURES / "sample" / "completions-eval.jsonl").read_text().splitlines()]
    for i in range(6):  # the first three shards: whichever workers run on the worker node hold one
        text = f"TRAP hold-on {WORKER_NODE} {marker}"
        lines[i] = {"row_id": lines[i]["row_id"], "completion": text} if isinstance(lines[i], dict) else text
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    log = (tmp_path / "grade.log").open("w")
    driver = subprocess.Popen(command(cluster, prepared_sample, zip_path, completions, tmp_path / "ray.jsonl", "--ray",
                                      cluster.address, "--ray-workers", "3", "--ray-shard-rows", "2"),
                              env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert driver.poll() is None, (tmp_path / "grade.log").read_text()
            assert time.monotonic() < deadline, "no worker on the worker node took a held row"
            time.sleep(0.2)
        killed = cluster.kill_node(WORKER_NODE)
        assert int(marker.read_text()) in killed  # the worker holding the row was among the node's processes
        code = driver.wait(timeout=600)  # a guard against a hang, far above Ray's health-check time
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
    said = (tmp_path / "grade.log").read_text()
    assert code == 0, said
    assert "retried" in said, said
    local = subprocess.run(command(cluster, prepared_sample, zip_path, completions, tmp_path / "local.jsonl",
                                   "--in-process"), capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    left = list(Path(tempfile.gettempdir()).glob(f"ray-grade-{driver.pid}-*"))
    assert left == [], f"unpacked copies left behind: {left}"
