"""The emulated trainer's verdicts job: every verdict of the hostile suite, a reward pass and a
grader pass, in a form two runs can be compared by (docs/emulator.md, "Verdicts on a slow CPU").

A verdict is a pure function of (completion, row, bundle): the same on a fast machine and in a
container limited to a quarter of a CPU. This job records, in order:

* ``hostile``: each hostile case on the bundle's first database, through the bundle's ``verify``
  (outcome, score and the work counted);
* ``reward``: one call per completion of each rl row's group (the file's completions, or the
  synthetic ones), with verl's keywords, one at a time (the score, or the unscored outcome);
* ``grader``: one call per eval row with the given completions (outcome, score, the database
  that decided);
* ``explore``: with a bundle that has the multi-turn episode (``scoring.episode``), each hostile case
  through its exploration tool, one episode a case (what the model is shown, the work counted).

Nothing timed is in the lists; ``seconds`` beside them is reported only, and so is ``cpu``: per
part, the thread CPU seconds of its costliest call and that call's name, which the harness sets
beside the watchdog's guard (the margin, docs/bundle.md "Seconds that only guard"), and
``cpu_limit``, the CPU share the job's cgroup allows (None: none it can read), which proves that
the limit asked of Docker applies. Standard library only: this runs inside the trainer container too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness.common.bundle_loader import LoadedBundle
from harness.common.rows import SplitRow
from harness.emulator import grader_job, hostile
from harness.emulator.calls import call_score, shape_for


class Costliest:
    """The call that took the most CPU time of this thread (reported beside the guard, never compared)."""

    def __init__(self) -> None:
        self.seconds, self.name, self.wall = 0.0, "", 0.0  # the costliest call's CPU, name and wall seconds
        self._started = (0.0, 0.0)

    def start(self) -> None:
        self._started = (time.thread_time(), time.monotonic())

    def stop(self, name: str) -> None:
        took = time.thread_time() - self._started[0]
        if took > self.seconds:
            self.seconds, self.name, self.wall = took, name, time.monotonic() - self._started[1]

    def as_list(self) -> list:
        return [round(self.seconds, 3), self.name, round(self.wall, 3)]


def hostile_verdicts(loaded: LoadedBundle, scratch: Path, costliest: Costliest | None = None) -> list[list]:
    verify_mod = loaded.module("verify")
    files = loaded.database_files()
    first = next((r for r in loaded.index().get("rows", []) if r.get("db_id") in files), None)
    if first is None:
        return []
    database = files[first["db_id"]]
    costliest = costliest or Costliest()
    out = []
    for case in hostile.load_cases(hostile.first_table(database), str(scratch)):
        costliest.start()
        verdict = verify_mod.verify(case.text, first["gold"], str(database), is_sql=case.is_sql)
        costliest.stop(case.id)
        out.append([case.id, verdict.outcome, verdict.score, verdict.steps])
    return out


def explore_verdicts(loaded: LoadedBundle, scratch: Path, costliest: Costliest | None = None) -> list[list]:
    """Each hostile case as an exploration query of its own episode: the text shown and the units counted."""
    episodes = loaded.module("scoring.episode")
    files = loaded.database_files()
    first = next((r for r in loaded.index().get("rows", []) if r.get("db_id") in files), None)
    if first is None:
        return []
    costliest = costliest or Costliest()
    out = []
    for case in hostile.load_cases(hostile.first_table(files[first["db_id"]]), str(scratch)):
        costliest.start()
        episode = episodes.Episode({"ground_truth": first["gold"], "db_id": first["db_id"]}, root=str(loaded.root))
        shown = episode.explore(case.text)
        costliest.stop(case.id)
        out.append([case.id, shown, episode.steps])
    return out


def reward_verdicts(loaded: LoadedBundle, rows: list[SplitRow], groups: list[list[str]],
                    costliest: Costliest | None = None) -> list[list]:
    fn = loaded.function("reward")
    bounds = shape_for(loaded).bounds
    costliest = costliest or Costliest()
    out = []
    for row, group in zip(rows, groups):
        for k, completion in enumerate(group):
            costliest.start()
            call = call_score(fn, bounds=bounds, data_source="spider", solution_str=completion, ground_truth=row.gold,
                              extra_info={"row_id": row.id})
            costliest.stop(f"{row.id} completion {k}")
            out.append([row.id, k, call.score, call.outcome])
    return out


def grader_verdicts(loaded: LoadedBundle, rows: list[SplitRow], completions: list[str],
                    costliest: Costliest | None = None) -> list[list]:
    grader_job.check_inputs(loaded.index(), rows, completions)
    costliest = costliest or Costliest()
    out = []
    for row, completion in zip(rows, completions):
        costliest.start()
        (result,) = grader_job.grade_rows(loaded, [row], [completion])
        costliest.stop(row.id)
        out.append([result.row_id, result.outcome, result.score, result.decided_on])
    return out


def cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs this process's cgroup may use (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); None
    when unlimited or unreadable.

    >>> import tempfile; folder = Path(tempfile.mkdtemp()); _ = (folder / "cpu.max").write_text("25000 100000")
    >>> cpu_limit(folder)
    0.25
    """
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def all_verdicts(loaded: LoadedBundle, scratch: Path, rl: tuple[list[SplitRow], list[list[str]]],
                 eval_rows: tuple[list[SplitRow], list[str]] | None,
                 say: Callable[[str], None] = lambda line: None) -> dict:
    """The lists, the seconds each took and each part's costliest call in CPU seconds (reported,
    never compared), and the CPU share the cgroup allows."""
    out: dict = {"seconds": {}, "cpu": {}, "cpu_limit": cpu_limit()}
    costliest = {"hostile": Costliest(), "reward": Costliest(), "grader": Costliest(), "explore": Costliest()}
    parts: list[tuple[str, Callable[[], list]]] = [
        ("hostile", lambda: hostile_verdicts(loaded, scratch, costliest["hostile"])),
        ("reward", lambda: reward_verdicts(loaded, *rl, costliest=costliest["reward"]))]
    if eval_rows is not None:
        parts.append(("grader", lambda: grader_verdicts(loaded, *eval_rows, costliest=costliest["grader"])))
    if (loaded.root / "scoring" / "episode.py").is_file():
        parts.append(("explore", lambda: explore_verdicts(loaded, scratch, costliest["explore"])))
    for name, make in parts:
        started = time.monotonic()
        out[name] = make()
        out["seconds"][name] = time.monotonic() - started
        out["cpu"][name] = costliest[name].as_list()
        say(f"{name}: {len(out[name])} verdicts in {out['seconds'][name]:.1f} s; costliest call "
            f"{costliest[name].seconds:.2f} s of CPU ({costliest[name].name})")
    return out
