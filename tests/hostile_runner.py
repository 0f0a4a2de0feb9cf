"""Run the hostile suite against a staged bundle, in a process of its own, and report as JSON.

Usage: python hostile_runner.py BUNDLE_ROOT SCRATCH_DIR OUT_JSON [explore]

With ``explore``, each case goes through the multi-turn environment's exploration tool instead
(``scoring.episode``: one episode a case, the case's text as the tool's query); the outcome is read
from what the tool shows, and ``steps`` is what the episode counted.

The bundle is imported as a package, the way the trainer does. The process runs with a private
TMPDIR, HOME and working directory (set by the caller), so any file SQLite or Python might create
lands somewhere watched. Around every case it records: outcome, score, CPU and wall seconds, the SHA-256 of every
database, the files under the watched folders, and any file the process held open during the case
that is not a database (a polling thread reads /proc/self/fd, which also sees unlinked temp files).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness.emulator import hostile  # noqa: E402


def listing(folders: list[Path]) -> list[str]:
    out = []
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            out.extend(os.path.join(dirpath, f) for f in files)
    return sorted(out)


def digests(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


class OpenFileWatcher(threading.Thread):
    """Polls /proc/self/fd and remembers regular files opened that are not the databases."""

    def __init__(self, allowed: set[str]) -> None:
        super().__init__(daemon=True)
        self.allowed = allowed
        self.seen: set[str] = set()
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        target = os.readlink(f"/proc/self/fd/{fd}")
                    except OSError:
                        continue
                    if target.startswith("/") and not target.startswith(("/dev/", "/proc/")) \
                            and target not in self.allowed:
                        self.seen.add(target)
            except OSError:
                pass
            time.sleep(0.002)


def peak_rss_mb() -> float:
    """This process's peak resident size since it started this program (VmHWM), in MB.

    Not ``ru_maxrss``: Linux keeps that across ``exec``, so a process forked from a large parent (an
    xdist worker near 500 MB) reports the parent's size before it ran a single case.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


SHOWN = (("error: no SQL query found", "no_query"), ("error:", "prediction_error"), ("forbidden:", "forbidden"),
         ("over budget:", "prediction_over_budget"), ("over cap:", "prediction_over_cap"))


def explored(episode_module, root: Path, gold: str, text: str) -> tuple[str, float | None, int, str]:
    """One case through the exploration tool: (outcome as shown, no score, units counted, the text shown)."""
    ep = episode_module.Episode({"ground_truth": gold, "db_id": "pets_club"}, root=str(root))
    shown = ep.explore(text)
    outcome = next((name for prefix, name in SHOWN if shown.startswith(prefix)), "mismatch")  # rows shown
    return outcome, None, ep.steps, shown


def main(root: str, scratch: str, out: str, mode: str = "verdict") -> None:
    root_path = Path(root)
    sys.path.insert(0, str(root_path.parent))
    package = root_path.name
    reward = importlib.import_module(f"{package}.reward")
    grader = importlib.import_module(f"{package}.grader")
    verify = importlib.import_module(f"{package}.verify")
    episode_module = importlib.import_module(f"{package}.scoring.episode")
    db = root_path / "data" / "databases" / "pets_club.sqlite"
    gold = "SELECT count(*) FROM Owner"
    databases = sorted((root_path / "data" / "databases").glob("*.sqlite"))
    watched = [root_path, Path(scratch), Path(os.environ["TMPDIR"]), Path.cwd()]
    reward.compute_score(solution_str=gold, ground_truth=gold)  # warm: connections and gold cache
    baseline_fds = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                    if os.path.exists(f"/proc/self/fd/{fd}")}
    allowed = baseline_fds | {str(p) for p in databases} | {out}
    results = []
    for case in hostile.load_cases(hostile.first_table(db), scratch):
        before_files, before_digests = listing(watched), digests(databases)
        watcher = OpenFileWatcher(allowed)
        watcher.start()
        started, cpu = time.monotonic(), time.thread_time()
        steps, shown = None, None
        if mode == "explore":
            outcome, score, steps, shown = explored(episode_module, root_path, gold, case.text)
        elif case.is_sql:
            verdict = verify.verify(case.text, gold, str(db), is_sql=True)
            outcome, score = verdict.outcome, verdict.score
        else:  # the grader's path is compute_score's, with the outcome kept
            graded = grader.grade(output=case.text, expected=gold)
            outcome, score = graded["outcome"], graded["score"]
        seconds, cpu_seconds = time.monotonic() - started, time.thread_time() - cpu
        watcher.running = False
        watcher.join()
        results.append({
            "id": case.id, "outcome": outcome, "score": score, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "allowed_outcomes": list(case.outcomes), "guard_cpu_seconds": hostile.GUARD_CPU_SECONDS,
            "new_files": sorted(set(listing(watched)) - set(before_files)),
            "changed_databases": sorted(k for k, v in digests(databases).items() if before_digests[k] != v),
            "opened_files": sorted(watcher.seen),
            "max_rss_mb": peak_rss_mb(),  # the peak so far
            "steps": steps, "shown_chars": None if shown is None else len(shown),
        })
    report = {"cases": results, "max_rss_mb": peak_rss_mb()}
    Path(out).write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:5])
