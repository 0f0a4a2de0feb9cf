"""The test cluster's own start-up (tests/ray_helpers.py): a node whose ``ray start`` exits before it
joins is started again, a bounded number of times, and its first log is kept.

No Ray here: ``ray start`` is replaced by a shell that exits (a node that timed out on its way in)
or sleeps (a node that joined), and the live-node count by the sleeping ones.
"""

from __future__ import annotations

import subprocess

import pytest

import ray_helpers
from ray_helpers import NodeExited, RayCluster


class ScriptedCluster(RayCluster):
    """Each node's n-th start runs ``plans[ip][n]``: 'exit' (gone at once) or 'join' (stays up)."""

    def __init__(self, temp, plans):
        super().__init__(temp, workers=len(plans) - 1)
        self.plans, self.starts = plans, {ip: 0 for ip in plans}

    def _start(self, ip, args, base):
        plan = self.plans[ip][self.starts[ip]]
        self.starts[ip] += 1
        (self.temp / f"node-{ip}.log").write_text(f"start {self.starts[ip]} of {ip}: {plan}\n")
        script = "exit 1" if plan == "exit" else "exec sleep 600"
        self.nodes[ip] = subprocess.Popen(["sh", "-c", script], start_new_session=True)
        if plan == "exit":
            self.nodes[ip].wait()

    def alive(self):
        return sum(1 for proc in self.nodes.values() if proc.poll() is None)


def test_a_node_that_exits_on_its_way_in_is_started_again(tmp_path):
    cluster = ScriptedCluster(tmp_path, {"127.0.0.2": ["join"], "127.0.0.3": ["exit", "exit", "join"]})
    try:
        cluster.start()
        assert cluster.starts == {"127.0.0.2": 1, "127.0.0.3": 3}
        assert cluster.alive() == 2
        assert (tmp_path / "node-127.0.0.3.try1.log").read_text() == "start 1 of 127.0.0.3: exit\n"
    finally:
        assert cluster.stop() == {}


def test_a_node_that_never_joins_fails_with_its_log_after_the_tries(tmp_path):
    cluster = ScriptedCluster(tmp_path, {"127.0.0.2": ["join"], "127.0.0.3": ["exit"] * ray_helpers.START_TRIES})
    try:
        with pytest.raises(NodeExited, match=r"127\.0\.0\.3 exited \(1\)[\s\S]*start 3 of 127\.0\.0\.3: exit"):
            cluster.start()
        assert cluster.starts["127.0.0.3"] == ray_helpers.START_TRIES
    finally:
        assert cluster.stop() == {}
