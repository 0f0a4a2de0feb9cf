"""The emulated trainer's jobs, callable in-process and as the container's entry point.

    python3 -m harness.emulator.main verify --zip Z --data D [--watch /tmp] [--threads 8]
    python3 -m harness.emulator.main reward --zip Z --data D [--completions C] [--prompts-per-step 8 ...]
    python3 -m harness.emulator.main grader --zip Z --data D --completions C [--workers N]
    python3 -m harness.emulator.main verdicts --zip Z --data D [--completions C]

``--data D`` is a prepared folder (harness.common.layout): the splits under ``D/data/``. Progress
goes to stderr as it happens; the job's result is one JSON document on stdout (anything the bundle
prints is sent to stderr, so it cannot corrupt that document). An expected failure
(harness.common.errors) is the document ``{"error", "error_type", "exit_code"}`` and that exit code.

Standard library only: inside the container nothing else is installed, and ``bundle/`` of this
checkout is deliberately absent (the zip's copy is the one under test).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from harness.common.bundle_loader import load_bundle
from harness.common.completions import read_completions
from harness.common.cores import usable_cores
from harness.common.errors import HarnessError, UnexpectedError
from harness.common.layout import Prepared, require
from harness.common.results import RowResult
from harness.common.rows import SplitRow, read_split
from harness.emulator import checks, grader_job, grader_pool, reward_job, verdicts_job
from harness.emulator.calls import shape_for

Say = Callable[[str], None]


def environment() -> dict:
    """Where a job ran: Python, SQLite and platform (part of every job's document)."""
    return {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "platform": platform.platform()}


def job_verify(zip_path: Path, data: Prepared, *, watch: list[Path] | None = None, threads: int = 8,
               max_mutated_golds: int | None = None, say: Say = lambda line: None) -> dict:
    """Every pre-push check on the zip; ``watch``: the writable places to list (default: the run folder)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verify-") as run_dir:
        with load_bundle(zip_path, run_dir) as loaded:
            say(f"loaded {zip_path} (sha256 {loaded.sha256[:16]}...) as package {loaded.package}")
            done = checks.run_checks(loaded, data.splits(), workdir=Path(run_dir), watch=watch or [Path(run_dir)],
                                     workers=threads, max_mutated_golds=max_mutated_golds, say=say)
            sha = loaded.sha256
    return {"sha256": sha, "checks": [dataclasses.asdict(c) for c in done],
            "passed": all(c.passed for c in done), "seconds": time.monotonic() - started, **environment()}


def job_reward(zip_path: Path, data: Prepared, completions_path: Path | None, *, prompts_per_step: int = 8,
               group_size: int = 8, steps: int | None = None, threads: int = 8, function: str = "reward",
               say: Say = lambda line: None) -> dict:
    """GRPO-shaped reward steps over the rl split (harness.emulator.reward_job)."""
    rows = read_split(require(data.split("rl"), "the rl split"), "rl")
    given = read_completions(completions_path).for_rows([r.id for r in rows]) if completions_path else None
    groups = reward_job.groups_for(rows, given, group_size)
    with tempfile.TemporaryDirectory(prefix="reward-") as run_dir, load_bundle(zip_path, run_dir) as loaded:
        source = f"completions from {completions_path}" if completions_path else "synthetic completions"
        shape = shape_for(loaded, function)
        say(f"reward mode: {len(rows)} rl rows, {prompts_per_step} prompts x {group_size} completions a step, "
            f"{threads} threads, {source}, reward shape {shape.describe()}")
        stats = reward_job.reward_steps(loaded, rows, groups, function=function, prompts_per_step=prompts_per_step,
                                        steps=steps, threads=threads, say=say)
    return {"steps": [dataclasses.asdict(s) for s in stats], "summary": reward_job.reward_summary(stats),
            "reward_shape": shape.name, **environment()}


def eval_inputs(data: Prepared, completions_path: Path) -> tuple[list[SplitRow], list[str]]:
    """The eval split's rows and one completion for each, in row order (what a grader job grades)."""
    rows = read_split(require(data.split("eval"), "the eval split"), "eval")
    return rows, read_completions(completions_path).one_per_row([r.id for r in rows])


def grader_document(results: list[RowResult], started: float, **extra: object) -> dict:
    """A grader job's document: per-row results, the evaluation summary (timed from ``started``), ``extra``."""
    summary = grader_job.grader_summary(results)
    summary["seconds"] = time.monotonic() - started
    return {"results": [dataclasses.asdict(r) for r in results], "summary": summary, **extra, **environment()}


def job_grader(zip_path: Path, data: Prepared, completions_path: Path, *, function: str = "grader",
               say: Say = lambda line: None, workers: int | None = None, samples: bool = False) -> dict:
    """One grader call per eval row (harness.emulator.grader_job), with the evaluation summary; on
    ``workers`` processes (default: every core this process may use, at most one a few rows).
    ``samples``: a file may give every row the same number n of completions (sampled generation):
    each is graded, the results row after row, each row's n in the file's order (``sample`` 0 to
    n - 1), and the document says ``samples``: n."""
    if samples:
        rows = read_split(require(data.split("eval"), "the eval split"), "eval")
        groups = read_completions(completions_path).samples_per_row([r.id for r in rows])
        n = len(groups[0]) if groups else 1
        rows, completions = [r for r in rows for _ in range(n)], [c for group in groups for c in group]
    else:
        rows, completions, n = *eval_inputs(data, completions_path), 1
    workers = grader_pool.default_workers(len(rows), usable_cores()) if workers is None else workers
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grader-") as run_dir, load_bundle(zip_path, run_dir) as loaded:
        results = grader_job.grade_split(loaded, rows, completions, function=function, say=say, workers=workers)
    if n > 1:
        results = [dataclasses.replace(r, sample=i % n) for i, r in enumerate(results)]
    return grader_document(results, started, workers=grader_pool.workers_used(workers, len(rows)), samples=n)


def job_verdicts(zip_path: Path, data: Prepared, completions_path: Path | None, *,
                 say: Say = lambda line: None) -> dict:
    """Every verdict of the hostile suite, a reward pass over rl (synthetic completions) and, with
    ``completions_path``, a grader pass over eval (harness.emulator.verdicts_job)."""
    rows = read_split(require(data.split("rl"), "the rl split"), "rl")
    rl = (rows, reward_job.groups_for(rows, None, len(reward_job.SYNTHETIC)))
    eval_rows = eval_inputs(data, completions_path) if completions_path else None
    with tempfile.TemporaryDirectory(prefix="verdicts-") as run_dir, load_bundle(zip_path, run_dir) as loaded:
        scratch = Path(run_dir) / "scratch"
        scratch.mkdir()
        found = verdicts_job.all_verdicts(loaded, scratch, rl, eval_rows, say=say)
    return {**found, **environment()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m harness.emulator.main", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="job", required=True)
    for name in ("verify", "reward", "grader", "verdicts"):
        job = sub.add_parser(name)
        job.add_argument("--zip", type=Path, required=True)
        job.add_argument("--data", type=Path, required=True, help="the prepared folder (splits under data/)")
        if name != "verify":
            job.add_argument("--completions", type=Path, required=name == "grader")
        if name in ("reward", "grader"):
            job.add_argument("--function", default=name)
        if name in ("verify", "reward"):
            job.add_argument("--threads", type=int, default=8)
        if name == "grader":
            job.add_argument("--workers", type=int, help="grading processes (default: every usable core)")
    sub.choices["verify"].add_argument("--watch", type=Path, action="append", help="writable place to list (repeatable)")
    sub.choices["verify"].add_argument("--max-mutated-golds", type=int)
    reward = sub.choices["reward"]
    reward.add_argument("--prompts-per-step", type=int, default=8)
    reward.add_argument("--group-size", type=int, default=8)
    reward.add_argument("--steps", type=int)
    return parser


def run_job(args: argparse.Namespace, say: Say) -> dict:
    data = Prepared(args.data)
    if args.job == "verify":
        return job_verify(args.zip, data, watch=args.watch, threads=args.threads,
                          max_mutated_golds=args.max_mutated_golds, say=say)
    if args.job == "reward":
        return job_reward(args.zip, data, args.completions, prompts_per_step=args.prompts_per_step,
                          group_size=args.group_size, steps=args.steps, threads=args.threads,
                          function=args.function, say=say)
    if args.job == "verdicts":
        return job_verdicts(args.zip, data, args.completions, say=say)
    return job_grader(args.zip, data, args.completions, function=args.function, say=say, workers=args.workers)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = sys.stdout

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    code = 0
    with contextlib.redirect_stdout(sys.stderr):  # the bundle's prints must not corrupt the document
        try:
            result = run_job(args, say)
        except HarnessError as exc:
            code = exc.exit_code
            result = {"error": str(exc), "error_type": type(exc).__name__, "exit_code": code}
        except Exception as exc:  # a bug: its traceback on stderr, and a document the host raises again
            traceback.print_exc()
            code = UnexpectedError.exit_code
            result = {"error": f"unexpected {type(exc).__name__} in the {args.job} job: {exc} (a bug of the harness: "
                               "please report it with the traceback above)",
                      "error_type": UnexpectedError.__name__, "exit_code": code}
    out.write(json.dumps(result) + "\n")
    out.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
