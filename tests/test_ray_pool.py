"""harness.raygrade.pool always ends: losing workers with or without spare CPUs, deterministically.

``Cluster`` stands in for Ray with its placement rule: an actor needs one CPU and waits, unplaced,
until one is free; an actor on a node that dies fails every call with ``ActorDiedError``; a call
on an unplaced actor never answers. It runs on a virtual clock (each empty ``wait`` advances it by
its timeout), so the tests take milliseconds whatever the machine. The real thing (a 2-node cluster
on loopback whose head has one CPU, a worker node killed while it grades) is
tests/test_ray_cluster.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import types

import pytest

from harness.common.errors import HarnessError
from harness.common.results import RowResult
from harness.common.rows import SplitRow
from harness.raygrade.pool import plan_shards, run_pool


class ActorDiedError(Exception):
    pass


@dataclasses.dataclass(eq=False)  # hashed by identity, as Ray's ObjectRefs are distinct objects
class Ref:
    actor: Actor
    method: str
    args: tuple


class Method:
    def __init__(self, actor: Actor, name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args):
        ref = Ref(self.actor, self.name, args)
        self.actor.cluster.refs.append(ref)
        return ref


class Actor:
    ids = itertools.count(1)

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.pid, self.node, self.killed = cluster, next(Actor.ids), None, False
        self.ready, self.grade, self.close = Method(self, "ready"), Method(self, "grade"), Method(self, "close")

    @property
    def dead(self) -> bool:
        return self.killed or (self.node is not None and self.node in self.cluster.dead_nodes)


class Cluster:
    """Nodes with CPUs; ``kill_node_after`` answered grade calls, the node dies."""

    def __init__(self, cpus: dict[str, int], kill_node: str | None = None, kill_node_after: int = 0) -> None:
        self.cpus, self.dead_nodes, self.now = dict(cpus), set(), 0.0
        self.actors: list[Actor] = []
        self.refs: list[Ref] = []
        self.kill_node, self.kill_node_after, self.graded = kill_node, kill_node_after, 0
        self.exceptions = types.SimpleNamespace(ActorDiedError=ActorDiedError)

    def new_actor(self) -> Actor:
        actor = Actor(self)
        self.actors.append(actor)
        self._place()
        return actor

    def _place(self) -> None:
        for actor in self.actors:
            if actor.node is None and not actor.killed:
                free = [n for n, c in self.cpus.items() if n not in self.dead_nodes and c > self._used(n)]
                if free:
                    actor.node = free[0]

    def _used(self, node: str) -> int:
        return sum(1 for a in self.actors if a.node == node and not a.dead)

    def _answerable(self, ref: Ref) -> bool:
        return ref.actor.dead or ref.actor.node is not None

    def wait(self, refs: list, num_returns: int = 1, timeout: float | None = None):
        """The calls that can answer, oldest first (Ray's workers run side by side: the first call made finishes first)."""
        ready = sorted((r for r in refs if self._answerable(r)), key=self.refs.index)[:num_returns]
        if not ready:
            assert timeout is not None, "an unbounded wait on calls that can never answer: the run would hang"
            self.now += timeout
        return ready, [r for r in refs if r not in ready]

    def get(self, ref: Ref):
        if ref.actor.dead:
            raise ActorDiedError(f"actor {ref.actor.pid} died")
        if ref.method != "grade":
            return ref.actor.pid
        self.graded += 1
        if self.graded == self.kill_node_after and self.kill_node:
            self.dead_nodes.add(self.kill_node)
            self._place()
        shard, rows, completions = ref.args
        results = [dataclasses.asdict(RowResult(r.id, "db", r.question, r.gold, c, c, 1.0, "match", "same rows"))
                   for r, c in zip(rows, completions)]
        return {"shard": shard, "results": results, "node": ref.actor.node, "pid": ref.actor.pid, "unpacked": False}

    def kill(self, actor: Actor, no_restart: bool = True) -> None:
        actor.killed = True
        self._place()


def grade(cluster: Cluster, workers: int, rows: int = 12, **kwargs):
    split = [SplitRow(f"r{i}", "eval", ({"role": "user", "content": f"q{i}"},
                                       {"role": "assistant", "content": f"SELECT {i}"})) for i in range(rows)]
    shards = plan_shards(rows, workers, 2)
    return run_pool(cluster, cluster.new_actor, workers, split, [f"SELECT {i}" for i in range(rows)], shards, {},
                    clock=lambda: cluster.now, **kwargs)


def test_a_node_lost_with_no_spare_cpu_leaves_the_rest_to_the_live_worker():
    # The shape: a 1-CPU head and a 2-CPU worker node; the worker node dies while grading.
    cluster = Cluster({"head": 1, "worker": 2}, kill_node="worker", kill_node_after=2)
    results, stats = grade(cluster, workers=3)
    assert [r.row_id for r in results] == [f"r{i}" for i in range(12)] and all(r.score == 1.0 for r in results)
    assert stats.retried >= 1 and {node for node, _pid in stats.processes} >= {"head"}
    assert all(a.killed for a in cluster.actors)  # the replacements that never found a CPU are stopped too


def test_a_node_lost_with_spare_cpus_has_its_shards_graded_on_another():
    cluster = Cluster({"head": 0, "a": 2, "b": 2}, kill_node="a", kill_node_after=1)
    results, stats = grade(cluster, workers=2)
    assert all(r.score == 1.0 for r in results) and stats.given_up == 0
    assert "b" in {node for node, _pid in stats.processes}


def test_when_no_worker_can_live_the_run_stops_with_an_error_after_the_stall_timeout():
    # A head without CPUs and one worker node that dies: nothing can ever grade again.
    cluster = Cluster({"head": 0, "worker": 2}, kill_node="worker", kill_node_after=1)
    with pytest.raises(HarnessError, match=r"no Ray worker was alive for 60 s \(1 of 6 shards graded\)"):
        grade(cluster, workers=2, stall_timeout_s=60)
    assert 60 < cluster.now <= 62  # the virtual time it waited: the stall timeout, give or take a poll


def test_a_cluster_with_no_cpu_at_all_is_an_error_not_a_hang():
    cluster = Cluster({"head": 0})
    with pytest.raises(HarnessError, match="no Ray worker was alive for 30 s"):
        grade(cluster, workers=2, stall_timeout_s=30)


def test_a_benchmark_can_hold_the_shards_until_every_worker_has_started():
    cluster = Cluster({"head": 0, "worker": 2})
    _results, stats = grade(cluster, workers=2, all_started=True)
    assert len(stats.processes) == 2  # both graded, though the first could have done it all
    lonely = Cluster({"head": 0, "worker": 1})  # the second worker never starts: held only until the stall timeout
    results, stats = grade(lonely, workers=2, all_started=True, stall_timeout_s=20)
    assert all(r.score == 1.0 for r in results) and len(stats.processes) == 1 and 20 <= lonely.now <= 22
