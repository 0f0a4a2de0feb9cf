"""The Ray worker's side of `grade --ray`: the zip unpacked and imported once per process, shards graded.

A ``ShardGrader`` is an ordinary class; the driver (harness.raygrade.backend) makes it a Ray actor,
one process each. On its first shard it fetches the zip from the object store (the driver put it
there once), unpacks and imports it as the trainer does (harness.common.bundle_loader) and keeps it
for the process's life; every shard is then the one grading path's calls
(harness.emulator.grader_job.grade_rows) on those rows, so a row gets the same RowResult as on the
local backend.

Each process unpacks into ``<temp>/ray-grade-<run>/<pid>-.../`` (``run`` starts with the driver's
pid). What is left behind is removed whatever happened: a live worker removes its own copy when the
pool closes, and its dead neighbours' on its machine when it starts and closes; the driver removes
its run's folder on its machine after the run (also on Ctrl-C or SIGTERM), and at its start the
folders of drivers that no longer run there (one killed outright, by SIGKILL).

>>> grader = ShardGrader([b"not fetched until the first shard"], "0" * 64, "grader", "run1")
>>> grader.loads, grader.loaded is None
(0, True)
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from harness.common.bundle_loader import LoadedBundle, load_bundle, remove_unpacked
from harness.common.rows import SplitRow
from harness.emulator.grader_job import grade_rows


def run_folder(run: str) -> Path:
    """Where the workers of run ``run`` on this machine unpack the zip."""
    return Path(tempfile.gettempdir()) / f"ray-grade-{run}"


def remove_run_folder(run: str) -> None:
    """Remove a run's unpacked copies on this machine (the loader made them read-only)."""
    remove_unpacked(run_folder(run))


def _running(pid_prefixed: str) -> bool:
    """Whether the process whose pid starts the name (``<pid>-...``) runs on this machine."""
    pid = pid_prefixed.split("-", 1)[0]
    if not pid.isdigit():
        return True  # not one of ours: leave it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it runs
        pass
    return True


def sweep_run_folders(temp: str | None = None) -> list[str]:
    """Remove the run folders of drivers that no longer run on this machine; their names."""
    base = Path(temp or tempfile.gettempdir())
    gone = [p for p in base.glob("ray-grade-*") if p.is_dir() and not _running(p.name[len("ray-grade-"):])]
    for folder in gone:
        _remove_quietly(folder)
    return sorted(p.name for p in gone)


def _remove_quietly(folder: Path) -> None:
    try:
        remove_unpacked(folder)
    except OSError:  # another user's folder, or removed meanwhile: not ours to insist on
        pass


def _remove_dead_copies(base: Path) -> None:
    """Remove the unpacked copies of this run's workers that died on this machine (killed, node lost)."""
    for folder in base.glob("*-*"):
        if folder.is_dir() and not _running(folder.name):
            _remove_quietly(folder)


class ShardGrader:
    """Grades shards of eval rows with one bundle zip, loaded once in this process."""

    def __init__(self, zip_holder: list, sha256: str, function: str, run: str) -> None:
        self._holder = zip_holder  # [ObjectRef]: a ref inside a list is not fetched until asked for
        self.sha256 = sha256
        self.function = function
        self.run = run
        self.loaded: LoadedBundle | None = None
        self.loads = 0
        self._work: str | None = None

    def _bundle(self) -> LoadedBundle:
        if self.loaded is None:
            import ray
            data = self._holder[0] if isinstance(self._holder[0], bytes) else ray.get(self._holder[0])
            base = run_folder(self.run)
            base.mkdir(parents=True, exist_ok=True)
            _remove_dead_copies(base)
            self._work = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base)
            zip_path = Path(self._work) / "bundle.zip"
            zip_path.write_bytes(data)
            self.loaded = load_bundle(zip_path, self._work)
            if self.loaded.sha256 != self.sha256:
                raise RuntimeError(f"the zip fetched from the object store has SHA-256 {self.loaded.sha256}, "
                                   f"not {self.sha256}: the object store returned another object")
            self.loads += 1
        return self.loaded

    def ready(self) -> int:
        """Answers once the actor's process runs (the pool gives shards to live actors only): its pid."""
        return os.getpid()

    def grade(self, shard: int, rows: list[SplitRow], completions: list[str]) -> dict:
        """The shard's RowResults (as dicts), with where it ran."""
        import ray
        fresh = self.loaded is None
        results = grade_rows(self._bundle(), rows, completions, function=self.function)
        return {"shard": shard, "results": [dataclasses.asdict(r) for r in results], "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id(), "unpacked": fresh}

    def close(self) -> int:
        """Remove the unpacked copy (and dead workers' copies on this machine); the process's pid."""
        if self.loaded is not None:
            self.loaded.close()
            self.loaded = None
        if self._work:
            remove_unpacked(Path(self._work))
            _remove_dead_copies(run_folder(self.run))
        return os.getpid()
