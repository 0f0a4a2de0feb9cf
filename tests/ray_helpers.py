"""For the Ray tests: a bundle zip with a trap-door scoring module, and a Ray cluster on loopback.

``trapdoor_zip`` adds ``trapdoor.py`` to a bundle zip: its ``compute_score`` scores as the grader
does, except for completions naming a trap, which it springs in the process that runs it:

* ``TRAP die-once MARKER``: the first time (MARKER absent) the process exits at once (a crash);
* ``TRAP die-always``: the process exits every time;
* ``TRAP kill-node-once MARKER``: the first time, SIGKILL to the process's raylet (its node dies);
* ``TRAP hold-on IP MARKER``: on the Ray node at IP, write the process's pid to MARKER and hang
  (the test kills that node while it grades); anywhere else, wait until MARKER exists (at most
  300 s: so a quicker worker elsewhere cannot grade every row first), then score as usual;
* ``TRAP gold-error``: the bundle's typed GoldQueryError (the row is unscored);
* ``TRAP crash``: a plain RuntimeError (a crash of the bundle: outcome ``crash``).

``RayCluster`` starts a head and worker nodes with ``ray start --block`` on 127.0.0.2, .3, .4...
one after another with fixed ports (nodes racing for ports fail), each in its own session, and stops
them by SIGTERM to the recorded pids, then SIGKILL to anything left in their sessions, never
``ray stop`` (which stops every Ray process on the machine). The Ray test modules share one xdist
group (``RAY_CLUSTER_GROUP``: one cluster at a time, so none takes another's ports); the ports are
also offset per xdist worker. A node whose ``ray start`` has exited before it joined is started
again, at most ``START_TRIES`` times in all (Ray gives a node a fixed 30 s to find itself in the
GCS, which a loaded machine can miss), then fails the wait with its log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from harness.raygrade.env import loopback_env

TRAPDOOR = '''"""Test-only scoring module: the grader's score, or a trap the completion names (tests/ray_helpers.py)."""
import os
import signal
import time

from . import grader
from .contract.errors import GoldQueryError


def _spring(text):
    words = str(text or "").split()
    if len(words) < 2 or words[0] != "TRAP":
        return
    trap, marker = words[1], (words[2] if len(words) > 2 else "")
    if trap == "hold-on":
        _hold_on(words[2], words[3])
        return
    if trap in ("die-once", "kill-node-once"):
        if os.path.exists(marker):
            return
        open(marker, "w").close()
    if trap in ("die-once", "die-always"):
        os._exit(3)
    if trap == "kill-node-once":
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(3)
    if trap == "gold-error":
        raise GoldQueryError("trap: the gold failed")
    if trap == "crash":
        raise RuntimeError("trap: a bug")


def _hold_on(ip, marker):
    try:
        import ray
        here = ray.util.get_node_ip_address() if ray.is_initialized() else ""
    except ImportError:
        here = ""
    if here == ip:
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        time.sleep(3600)
    deadline = time.monotonic() + 300
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.1)


def compute_score(**kwargs):
    _spring(kwargs.get("output"))
    return grader.compute_score(**kwargs)


def grade(**kwargs):
    return grader.grade(**kwargs)
'''


def trapdoor_zip(source: Path, target: Path) -> Path:
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info.filename))
        dst.writestr("trapdoor.py", TRAPDOOR)
    return target


def ports(base: int) -> list[str]:
    return [f"--node-manager-port={base}", f"--object-manager-port={base + 1}", f"--metrics-export-port={base + 2}",
            f"--dashboard-agent-grpc-port={base + 3}", f"--dashboard-agent-listen-port={base + 4}",
            f"--runtime-env-agent-port={base + 5}", f"--min-worker-port={base + 10}", f"--max-worker-port={base + 60}"]


RAY_CLUSTER_GROUP = "ray-cluster"  # pytest.mark.xdist_group for every module that starts a RayCluster
START_TRIES = 3  # a node that exits before it joins is started again, up to this many times in all


class NodeExited(RuntimeError):
    """A node's ``ray start`` exited before the cluster reached the count waited for."""

    def __init__(self, ip: str, message: str) -> None:
        super().__init__(message)
        self.ip = ip


def worker_offset() -> int:
    """Ports apart per xdist worker (gw0, gw1...): two clusters never ask for the same port."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return 1000 * (int(name[2:]) if name[2:].isdigit() else 0)


class RayCluster:
    """A head of ``head_cpus`` CPUs (default none: work goes to the workers) and ``workers`` nodes of
    ``cpus`` CPUs on loopback."""

    def __init__(self, temp: Path, workers: int = 2, cpus: int = 2, port: int = 6390, head_cpus: int = 0) -> None:
        port += worker_offset()
        self.temp, self.workers, self.cpus, self.port, self.head_cpus = temp, workers, cpus, port, head_cpus
        self.ray_temp = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # Ray's sockets: paths under 108 bytes
        self.address = f"127.0.0.2:{port}"
        self.env = dict(os.environ, **loopback_env())
        self.nodes: dict[str, subprocess.Popen] = {}  # node ip -> its `ray start --block`
        self.ray = str(Path(sys.executable).with_name("ray"))

    def _start(self, ip: str, args: list[str], base: int) -> None:
        log = open(self.temp / f"node-{ip}.log", "w")
        self.nodes[ip] = subprocess.Popen([self.ray, "start", "--block", f"--node-ip-address={ip}",
                                           "--disable-usage-stats", *args, *ports(base)],
                                          env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> int:
        probe = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
                 "print(sum(1 for n in ray.nodes() if n['Alive']))")
        try:
            done = subprocess.run([sys.executable, "-c", probe, self.address], env=self.env, capture_output=True,
                                  text=True, timeout=120)
        except subprocess.TimeoutExpired:  # a loaded machine: ask again, within wait_for's guard
            return 0
        lines = done.stdout.split()
        return int(lines[-1]) if done.returncode == 0 and lines else 0

    # A guard, not a measure: nodes start in about 10 s on a quiet 2-core machine, several times
    # that at load 8; the guard is far above both, so only a cluster that cannot start reaches it.
    def wait_for(self, count: int, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive() != count:
            for ip, proc in self.nodes.items():
                if proc.poll() is not None:
                    tail = (self.temp / f"node-{ip}.log").read_text(errors="replace")[-3000:]
                    raise NodeExited(ip, f"Ray node {ip} exited ({proc.returncode}) before {count} nodes were alive:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} Ray nodes not alive after {timeout_s} s; logs in {self.temp}")
            time.sleep(0.5)

    def _join(self, ip: str, args: list[str], base: int, count: int) -> None:
        """Start the node at ``ip`` and wait for ``count`` live nodes; a node that exited on the way is
        cleared (what is left of its session killed, its log kept) and started again."""
        for attempt in range(1, START_TRIES + 1):
            self._start(ip, args, base)
            try:
                self.wait_for(count)
                return
            except NodeExited as exited:
                if exited.ip != ip or attempt == START_TRIES:
                    raise
                self.kill_node(ip)
                self.nodes[ip].wait(timeout=60)
                os.replace(self.temp / f"node-{ip}.log", self.temp / f"node-{ip}.try{attempt}.log")

    def start(self) -> RayCluster:
        self._join("127.0.0.2", ["--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}", "--include-dashboard=false",
                                 f"--temp-dir={self.ray_temp}"], self.port + 10, 1)
        for i in range(self.workers):
            self._join(f"127.0.0.{3 + i}", [f"--address={self.address}", f"--num-cpus={self.cpus}"],
                       self.port + 110 + 100 * i, 2 + i)
        return self

    def kill_node(self, ip: str) -> dict[int, str]:
        """SIGKILL every process of the node at ``ip`` (its session) at once; what was killed."""
        doomed = self.sessions({self.nodes[ip].pid})
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return doomed

    def sessions(self, ids: set[int] | None = None) -> dict[int, str]:
        """pid -> command line of every live process in the nodes' sessions (or in the sessions ``ids``)."""
        ids = ids if ids is not None else {p.pid for p in self.nodes.values()}
        out = subprocess.run(["ps", "-eo", "pid=,sid=,args="], capture_output=True, text=True).stdout
        found = {}
        for line in out.splitlines():
            pid, sid, args = line.split(None, 2) + [""] * (3 - len(line.split(None, 2)))
            if int(sid) in ids and "ps -eo" not in args:
                found[int(pid)] = args
        return found

    def stop(self) -> dict[int, str]:
        """SIGTERM each node (workers first), wait, SIGKILL what is left in their sessions; what was left."""
        for ip in sorted(self.nodes, reverse=True):
            if self.nodes[ip].poll() is None:
                self.nodes[ip].send_signal(signal.SIGTERM)
        for proc in self.nodes.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        deadline = time.monotonic() + 20
        while self.sessions() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = self.sessions()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.ray_temp, ignore_errors=True)
        return left

    def describe(self) -> str:
        return json.dumps({ip: p.poll() for ip, p in self.nodes.items()})
