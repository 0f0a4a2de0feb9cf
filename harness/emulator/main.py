"""The emulated trainer's jobs, callable in-process and as the container's entry point.

    python3 -m harness.emulator.main verify --zip Z --data D
    python3 -m harness.emulator.main reward --zip Z --rl F [--completions C] [--prompts-per-step 8 ...]
    python3 -m harness.emulator.main grader --zip Z --eval F --completions C

Progress goes to stderr as it happens; the job's result is one JSON document on stdout (anything
the bundle prints is sent to stderr, so it cannot corrupt that document). An expected failure
(harness.common.errors) is the document ``{"error": ..., "error_type": ...}`` with its exit code.

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
from pathlib import Path
from typing import Callable

from harness.emulator import checks as emulate_checks

from harness.emulator import modes as emulate_modes
from harness.common.completions import read_completions
from harness.common.bundle_loader import load_bundle
from harness.common.errors import HarnessError

Say = Callable[[str], None]


def _environment() -> dict:
    return {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "platform": platform.platform()}


def job_verify(zip_path: Path, split_files: dict[str, Path], *, watch: list[Path] | None = None,
               workers: int = 8, max_mutated_golds: int | None = None, say: Say = lambda line: None) -> dict:
    """Every pre-push check on the zip; ``watch``: the writable places to list (default: the run folder)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="verify-") as run_dir:
        with load_bundle(zip_path, run_dir) as loaded:
            say(f"loaded {zip_path} (sha256 {loaded.sha256[:16]}...) as package {loaded.package}")
            checks = emulate_checks.run_checks(loaded, split_files, workdir=Path(run_dir),
                                               watch=watch or [Path(run_dir)], workers=workers,
                                               max_mutated_golds=max_mutated_golds, say=say)
            sha = loaded.sha256
    return {"sha256": sha, "checks": [dataclasses.asdict(c) for c in checks],
            "passed": all(c.passed for c in checks), "seconds": time.monotonic() - started, **_environment()}


def job_reward(zip_path: Path, rl_path: Path, completions_path: Path | None, *, prompts_per_step: int = 8,
               group_size: int = 8, steps: int | None = None, workers: int = 8, function: str = "reward",
               say: Say = lambda line: None) -> dict:
    """GRPO-shaped reward steps over the rl split (emulate_modes.reward_steps)."""
    rows = emulate_modes.read_split(rl_path, "rl")
    given = read_completions(completions_path).for_rows([r.id for r in rows]) if completions_path else None
    groups = emulate_modes.groups_for(rows, given, group_size)
    with tempfile.TemporaryDirectory(prefix="reward-") as run_dir, load_bundle(zip_path, run_dir) as loaded:
        say(f"reward mode: {len(rows)} rl rows, {prompts_per_step} prompts x {group_size} completions a step, "
            f"{workers} workers, {'completions from ' + str(completions_path) if completions_path else 'synthetic completions'}")
        stats = emulate_modes.reward_steps(loaded, rows, groups, function=function, prompts_per_step=prompts_per_step,
                                           steps=steps, workers=workers, say=say)
    summary = emulate_modes.reward_summary(stats)
    return {"steps": [dataclasses.asdict(s) for s in stats], "summary": summary, **_environment()}


def job_grader(zip_path: Path, eval_path: Path, completions_path: Path, *, function: str = "grader",
               say: Say = lambda line: None) -> dict:
    """One grader call per eval row (emulate_modes.grade_records), with the evaluation summary."""
    rows = emulate_modes.read_split(eval_path, "eval")
    given = read_completions(completions_path).for_rows([r.id for r in rows])
    firsts = [group[0] for group in given]  # a row given several answers: the first, as one evaluation
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grader-") as run_dir, load_bundle(zip_path, run_dir) as loaded:
        records = emulate_modes.grade_records(loaded, rows, firsts, function=function, say=say)
    summary = emulate_modes.grader_summary(records)
    summary["seconds"] = time.monotonic() - started
    return {"records": records, "summary": summary, **_environment()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m harness.emulator.main", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="job", required=True)
    verify = sub.add_parser("verify")
    verify.add_argument("--zip", type=Path, required=True)
    verify.add_argument("--data", type=Path, required=True, help="folder of train/rl/eval.jsonl")
    verify.add_argument("--watch", type=Path, action="append", help="writable place to list (repeatable)")
    verify.add_argument("--workers", type=int, default=8)
    verify.add_argument("--max-mutated-golds", type=int)
    reward = sub.add_parser("reward")
    reward.add_argument("--zip", type=Path, required=True)
    reward.add_argument("--rl", type=Path, required=True)
    reward.add_argument("--completions", type=Path)
    reward.add_argument("--prompts-per-step", type=int, default=8)
    reward.add_argument("--group-size", type=int, default=8)
    reward.add_argument("--steps", type=int)
    reward.add_argument("--workers", type=int, default=8)
    reward.add_argument("--function", default="reward")
    grader = sub.add_parser("grader")
    grader.add_argument("--zip", type=Path, required=True)
    grader.add_argument("--eval", type=Path, required=True)
    grader.add_argument("--completions", type=Path, required=True)
    grader.add_argument("--function", default="grader")
    return parser


def run_job(args: argparse.Namespace, say: Say) -> dict:
    if args.job == "verify":
        splits = {s: args.data / f"{s}.jsonl" for s in emulate_checks.SPLITS}
        return job_verify(args.zip, splits, watch=args.watch, workers=args.workers,
                          max_mutated_golds=args.max_mutated_golds, say=say)
    if args.job == "reward":
        return job_reward(args.zip, args.rl, args.completions, prompts_per_step=args.prompts_per_step,
                          group_size=args.group_size, steps=args.steps, workers=args.workers,
                          function=args.function, say=say)
    return job_grader(args.zip, args.eval, args.completions, function=args.function, say=say)


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
            result, code = {"error": str(exc), "error_type": type(exc).__name__}, exc.exit_code
    out.write(json.dumps(result) + "\n")
    out.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
