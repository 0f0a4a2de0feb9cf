"""`grade --ray`: the one grading path, sharded over Ray workers, with the local backend's results.

``--ray auto`` starts a private Ray instance on this machine for the run (and stops it after);
``--ray HOST:PORT`` joins a running cluster (``ray start --head`` on one machine, ``ray start
--address HOST:PORT`` on the others; docs/grading.md). Either way:

* the driver loads the zip once itself, to refuse what the local backend refuses (a zip the trainer
  would not accept, an eval split that is not the bundle's) before any worker starts;
* the zip's bytes go into the object store once (``ray.put``); each worker process fetches them,
  unpacks and imports the bundle once (harness.raygrade.worker) and grades shards of rows;
* results come back in row order, identical to the local backend's; a bundle error leaves its row
  unscored as it does locally, and a dead worker's shard is graded again by a new one
  (harness.raygrade.pool).

Workers need the harness: with ``auto`` they run this interpreter and inherit its path; a cluster
gets the ``harness`` package shipped with the job (``runtime_env`` ``py_modules``), so its nodes
need only the same Python and Ray (``pip install ray==2.60.0``).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import harness
from harness.common.bundle_loader import load_bundle
from harness.common.errors import HarnessError, InputError
from harness.common.interrupts import interrupt_on_signals
from harness.common.layout import Prepared
from harness.common.rows import SplitRow
from harness.emulator.grader_job import check_inputs
from harness.emulator.main import eval_inputs, grader_document
from harness.raygrade.env import ray_environment
from harness.raygrade.pool import Progress, plan_shards, run_pool
from harness.raygrade.worker import ShardGrader, remove_run_folder, sweep_run_folders

RAY_HINT = "install it: pip install -e '.[ray]' (or `make setup-integration`)"


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """Where and how wide: ``address`` is ``auto`` (a local instance) or a cluster's ``HOST:PORT``."""

    address: str = "auto"
    workers: int | None = None  # default: the CPUs the instance or cluster has
    shard_rows: int | None = None  # default: harness.raygrade.pool.plan_shards
    max_attempts: int = 3
    stall_timeout_s: float = 120.0  # no live worker this long: stop with an error (harness.raygrade.pool)
    all_started: bool = False  # no shard before every worker has started (bench-ray: N workers measured as N)

    def check(self) -> RayOptions:
        for name in ("workers", "shard_rows", "max_attempts"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--ray-{name.replace('_', '-')} is {value}: give a whole number of at least 1")
        if not self.stall_timeout_s > 0:
            raise InputError(f"--ray-stall-timeout is {self.stall_timeout_s:g}: give a number of seconds above 0")
        if not self.address or " " in self.address:
            raise InputError(f"--ray {self.address!r} is neither `auto` nor a cluster address HOST:PORT")
        return self


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(f"`--ray` needs Ray, which is not installed here: {RAY_HINT}") from None
    return ray


def connect(ray: Any, options: RayOptions, imported_before: bool) -> None:
    """ray.init for the options (inside ray_environment, which set the variables Ray reads)."""
    if imported_before:  # Ray read its settings when first imported: let it read the variables again
        # Imported by name: with Ray installed its private module has no type information, without it
        # there is nothing to check, and a type: ignore would be wrong in one of the two.
        importlib.import_module("ray._raylet").Config.initialize("")
    source = str(Path(harness.__file__).resolve().parent)
    if options.address == "auto":
        path = os.pathsep.join(p for p in (str(Path(source).parent), os.environ.get("PYTHONPATH")) if p)
        ray.init(address="local", num_cpus=options.workers or os.cpu_count() or 1, include_dashboard=False,
                 log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1", runtime_env={"env_vars": {"PYTHONPATH": path}})
        return
    try:
        ray.init(address=options.address, log_to_driver=False, configure_logging=False, runtime_env={"py_modules": [source]})
    except ConnectionError as exc:
        raise HarnessError(f"cannot join the Ray cluster at {options.address} ({exc}): start it with "
                           "`ray start --head` there, or use --ray auto") from None


def reachable(address: str, timeout_s: float = 5.0) -> None:
    """HarnessError unless something accepts a TCP connection at a ``HOST:PORT`` cluster address
    (Ray itself would retry for minutes); ``ray://`` client addresses are left to Ray."""
    if "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray {address!r} is neither `auto` nor a cluster address HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise HarnessError(f"nothing answers at {address} ({exc}): start the cluster's head there "
                           f"(`ray start --head --port={port}`), or grade on a local instance with --ray auto") from None


def grade_split_ray(zip_path: Path, rows: list[SplitRow], completions: list[str], *, function: str = "grader",
                    options: RayOptions = RayOptions(), progress_stream: TextIO | None = None) -> tuple[list, dict]:
    """(RowResults in row order, the run's Ray figures); raises what the local backend raises."""
    options.check()
    with tempfile.TemporaryDirectory(prefix="grader-") as run_dir, load_bundle(zip_path, run_dir) as loaded:
        index = loaded.index()
        check_inputs(index, rows, completions)
        loaded.function(function)  # a missing module or function is an InputError here, not in every worker
        sha256 = loaded.sha256
    db_of = {str(r.get("id")): str(r.get("db_id", "")) for r in index.get("rows", [])}
    zip_bytes = Path(zip_path).read_bytes()
    if options.address != "auto":
        reachable(options.address)
    figures: dict = {"address": options.address}
    imported_before = "ray" in sys.modules
    run = f"{os.getpid()}-{secrets.token_hex(4)}"
    sweep_run_folders()  # what a driver killed outright (SIGKILL) left on this machine
    try:
        with ray_environment(None if options.address == "auto" else options.address):
            ray = import_ray()
            started = time.monotonic()
            connect(ray, options, imported_before)
            with interrupt_on_signals():  # after ray.init, whose own SIGTERM handler it replaces
                try:
                    figures["start_s"] = time.monotonic() - started
                    figures.update(_grade(ray, options, zip_bytes, sha256, function, run, rows, completions, db_of,
                                          progress_stream))
                finally:
                    stopping = time.monotonic()
                    ray.shutdown()
                    figures["shutdown_s"] = time.monotonic() - stopping
    finally:
        remove_run_folder(run)  # whatever happened: the workers' unpacked copies on this machine
    return figures.pop("results"), figures


def _grade(ray: Any, options: RayOptions, zip_bytes: bytes, sha256: str, function: str, run: str,
           rows: list[SplitRow], completions: list[str], db_of: dict[str, str], progress_stream: TextIO | None) -> dict:
    """The pool's run on a connected Ray: the results and the figures."""
    workers = options.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    holder = [ray.put(zip_bytes)]
    actor = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0, scheduling_strategy="SPREAD")(ShardGrader)
    shards = plan_shards(len(rows), workers, options.shard_rows)
    progress = Progress(len(rows), len(shards), workers, progress_stream)
    began = time.monotonic()
    try:
        results, stats = run_pool(ray, lambda: actor.remote(holder, sha256, function, run), workers, rows, completions,
                                  shards, db_of, max_attempts=options.max_attempts,
                                  stall_timeout_s=options.stall_timeout_s, all_started=options.all_started,
                                  progress=progress)
    finally:
        progress.close()
    addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    return dict(stats.as_dict(addresses), results=results, run=run, workers=workers, grade_s=time.monotonic() - began)


def job_grader(zip_path: Path, data: Prepared, completions_path: Path, *, function: str = "grader",
               options: RayOptions = RayOptions(), say=lambda line: None, progress_stream: TextIO | None = None) -> dict:
    """harness.emulator.main.job_grader's document, graded on Ray; its figures under ``"ray"``."""
    rows, completions = eval_inputs(data, completions_path)
    started = time.monotonic()
    results, figures = grade_split_ray(zip_path, rows, completions, function=function, options=options,
                                       progress_stream=progress_stream)
    document = grader_document(results, started, ray=figures)
    say(document["summary"]["line"])
    return document
