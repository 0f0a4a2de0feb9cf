"""`emulate`: run the emulated trainer's reward or grader job on a bundle zip, in Docker or in-process.

    python3 -m harness emulate reward [--data out] [--zip ZIP] [--completions C] [--prompts-per-step 8] [--group-size 8]
    python3 -m harness emulate grader [--data out] [--zip ZIP] (--completions C | --gold-completions) [--stage emulated]
    python3 -m harness emulate verdicts [--data out] [--zip ZIP] [--completions C | --gold-completions] [--cpus 0.25]

Reward mode prints one line per GRPO step (reward mean, share zero / full, outcome counts) and the
throughput; grader mode runs the one grading path (harness.emulator.grader_job, the same as
`grade`), prints the evaluation summary and writes per-row results to ``DATA/results/STAGE.jsonl``.
Both run in the locked-down trainer container unless ``--in-process``; both exit 1 when a call
crashed or returned no score. ``emulate grader --ray ADDRESS`` runs the grader job on Ray workers
instead (harness.raygrade.backend; on the host, each worker loading the zip as the trainer does).

Verdicts mode runs the hostile suite, a reward pass over rl and (with ``--completions``) a grader
pass over eval twice in the trainer container, once with its usual CPUs and once limited to
``--cpus`` (a quarter of a CPU by default), and exits 1 unless every verdict is the same: work is
counted, never timed, so a slow or throttled CPU changes nothing but the time taken.

``--gold-completions`` answers every eval row with its own gold instead of a completions file: a
check of the grader path on any bundle (each verdict must be 1.0; grader mode exits 1 otherwise),
what `make test-grader` and `make check-cpu` run when ``GRADER_COMPLETIONS`` is not given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bundle.contract.limits import DEFAULT_LIMITS
from harness.commands import options
from harness.common import bundle_zip
from harness.common.errors import CHECKS_FAILED, InputError
from harness.common.files import atomic_write_bytes, check_writable_file
from harness.common.layout import GIVEN_COMPLETIONS, Prepared, require
from harness.common.results import RowResult, write_results
from harness.common.rows import read_split
from harness.containers import trainer
from harness.emulator import main as emulator_main
from harness.raygrade import backend

EMULATED_STAGE = "emulated"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", choices=("reward", "grader", "verdicts"),
                        help="reward: GRPO steps over rl.jsonl; grader: eval.jsonl; verdicts: every verdict at full "
                             "and at reduced CPU, compared")
    options.add_data(parser)
    options.add_zip(parser)
    parser.add_argument("--completions", type=Path, metavar="FILE",
                        help="completions file (docs: completions files); reward mode without it uses synthetic "
                             "ones (the gold, the gold fenced, a wrong query, prose)")
    parser.add_argument("--gold-completions", action="store_true",
                        help="grader and verdicts: answer every eval row with its own gold, each verdict 1.0 "
                             "(a check of the grader path on any bundle; grader mode exits 1 on any other score)")
    parser.add_argument("--function", help="MODULE[:FUNCTION] the trainer calls (default: reward / grader)")
    parser.add_argument("--prompts-per-step", type=int, default=8, metavar="N", help="rl rows a step (default: 8)")
    parser.add_argument("--group-size", type=int, default=8, metavar="N", help="completions per row (default: 8)")
    parser.add_argument("--steps", type=int, metavar="N", help="steps to run (default: one pass over rl.jsonl)")
    options.add_threads(parser, "concurrent reward calls")
    options.add_grade_workers(parser, "grader: ", "the job (in the container: its CPU limit)")
    parser.add_argument("--stage", default=EMULATED_STAGE,
                        help=f"grader: the stage the results are for (default: {EMULATED_STAGE})")
    options.add_output(parser, "grader: the per-row results file (default: DATA/results/STAGE.jsonl)")
    parser.add_argument("--cpus", type=float, default=0.25, metavar="N",
                        help="verdicts: the CPU limit of the second run (docker run --cpus; default: 0.25)")
    parser.add_argument("--in-process", action="store_true", help="run here, without Docker")
    options.add_ray(parser)
    options.add_base_image(parser)
    options.add_container_timeout(parser)


def _job(args: argparse.Namespace, zip_path: Path, data: Path, completions: Path | None) -> list[str]:
    """The emulator's argument list (paths as the job sees them)."""
    job = [args.mode, "--zip", str(zip_path), "--data", str(data)]
    if args.mode == "reward":
        job += ["--prompts-per-step", str(args.prompts_per_step), "--group-size", str(args.group_size),
                "--threads", str(args.threads)] + (["--steps", str(args.steps)] if args.steps is not None else [])
    job += ["--completions", str(completions)] if completions else []
    job += ["--workers", str(args.workers)] if args.mode == "grader" and args.workers is not None else []
    return job + (["--function", args.function] if args.function else [])


def run_verdicts(args: argparse.Namespace, prepared: Prepared, zip_path: Path) -> int:
    """The verdicts job at the container's usual CPUs and at ``--cpus``; 1 unless they are the same."""
    if args.in_process or options.ray_options_of(args) is not None:
        raise InputError("verdicts mode compares two container runs: drop --in-process / --ray")
    if not 0 < args.cpus:
        raise InputError(f"--cpus {args.cpus:g}: give a positive share of a CPU, e.g. 0.25")
    inputs = {"bundle.zip": zip_path, "prepared/data/rl.jsonl": require(prepared.split("rl"), "the rl split")}
    job = ["verdicts", "--zip", f"{trainer.MOUNT}/in/bundle.zip", "--data", f"{trainer.MOUNT}/in/prepared"]
    if args.completions is not None:
        inputs["prepared/data/eval.jsonl"] = require(prepared.split("eval"), "the eval split")
        inputs["completions.jsonl"] = args.completions
        job += ["--completions", f"{trainer.MOUNT}/in/completions.jsonl"]
    unpacked = bundle_zip.summarize(zip_path).unpacked_bytes
    runs = {}
    for cpus in (None, args.cpus):
        label = "usual CPUs" if cpus is None else f"{cpus:g} CPU"
        print(f"verdicts job, {label}:", flush=True)
        runs[label], _ran = trainer.emulator_job(job, inputs, unpacked_bytes=unpacked, timeout_s=args.timeout,
                                                 base_image=options.base_image_of(args), cpus=cpus)
    (full_label, full), (slow_label, slow) = runs.items()
    differing = []
    for part in ("hostile", "reward", "grader", "explore"):
        pairs = list(zip(full.get(part, []), slow.get(part, [])))
        differing += [(part, a, b) for a, b in pairs if a != b]
        if len(full.get(part, [])) != len(slow.get(part, [])):
            differing.append((part, f"{len(full.get(part, []))} verdicts", f"{len(slow.get(part, []))} verdicts"))
        took = f"{full['seconds'].get(part, 0):.1f} s vs {slow['seconds'].get(part, 0):.1f} s" if part in full else "not run"
        print(f"  {part:8} {len(full.get(part, []))} verdicts; {full_label} vs {slow_label}: {took}")
    for part, a, b in differing[:10]:
        print(f"  DIFFERENT {part}: {a} / {b}")
    print("verdicts: " + (f"{len(differing)} differ" if differing else "identical at both CPU limits"))
    applied = _print_guard_margins(runs, args.cpus)
    return CHECKS_FAILED if differing or not applied else 0


def _print_guard_margins(runs: dict[str, dict], cpus: float) -> bool:
    """Each part's costliest call beside the watchdog's guards, at both limits (docs/bundle.md, "Seconds
    that only guard"), and whether the limited run's cgroup allowed ``cpus``: False when it did not."""
    limits = DEFAULT_LIMITS
    cpu_guard, wall_guard = limits.cpu_guard(limits.budget_floor_steps), limits.wall_guard_s
    for label, run in runs.items():
        for part, found in run.get("cpu", {}).items():
            seconds, name, wall = (list(found) + [0.0])[:3]
            print(f"  {label:10} {part:8} costliest call {seconds:.2f} s of CPU, {wall:.2f} s wall ({name}): "
                  f"CPU guard {cpu_guard:g} s ({cpu_guard / max(seconds, 1e-3):.0f}x), wall guard {wall_guard:g} s "
                  f"({wall_guard / max(wall, 1e-3):.0f}x)")
    seen = list(runs.values())[-1].get("cpu_limit")
    if seen is None:  # cgroup files not readable in this engine's containers: nothing to prove or disprove
        print(f"CPU limit: the limited run could not read its cgroup's quota; {cpus:g} CPU asked, not confirmed")
        return True
    applied = abs(seen - cpus) < 1e-6
    print(f"CPU limit: the limited run's cgroup allowed {seen:g} CPU"
          + (" (as asked)" if applied else f", not the {cpus:g} asked: the limit did not apply"))
    return applied


@contextlib.contextmanager
def gold_completions(prepared: Prepared) -> Iterator[Path]:
    """A completions file answering each eval row with its own gold, for the length of the block."""
    rows = read_split(require(prepared.split("eval"), "the eval split"), "eval")
    lines = "".join(json.dumps({"row_id": r.id, "completion": r.gold}) + "\n" for r in rows)
    with tempfile.TemporaryDirectory(prefix="spider-gold-completions-") as folder:
        path = Path(folder) / "gold-completions.jsonl"
        atomic_write_bytes(path, lines.encode("utf-8"))
        yield path


def run(args: argparse.Namespace) -> int:
    if args.gold_completions:
        if args.completions is not None:
            raise InputError("--completions and --gold-completions are two answers to the eval rows: give one")
        if args.mode == "reward":
            raise InputError("--gold-completions is for the grader and verdicts modes; reward mode without "
                             "--completions already answers with the gold (among its synthetic completions)")
        with gold_completions(Prepared(args.data)) as path:
            code = run_mode(argparse.Namespace(**{**vars(args), "completions": path}))
        return code
    return run_mode(args)


def run_mode(args: argparse.Namespace) -> int:
    prepared = Prepared(args.data)
    if args.mode == "verdicts":
        return run_verdicts(args, prepared, require(options.zip_of(args), "the bundle zip"))
    split = "rl" if args.mode == "reward" else "eval"
    if args.mode == "grader" and args.completions is None:
        raise InputError("grader mode needs --completions FILE (one completion per eval row; in Make, "
                         "GRADER_COMPLETIONS=FILE), or --gold-completions to answer each row with its own gold")
    require(prepared.split(split), f"the {split} split")
    zip_path = require(options.zip_of(args), "the bundle zip")
    if args.completions is not None:
        require(args.completions, "the completions file", GIVEN_COMPLETIONS)
    summary = bundle_zip.summarize(zip_path)
    target = None if args.mode == "reward" else check_writable_file(args.output or prepared.results(args.stage),
                                                                     f"the {args.stage} results")
    ray = options.ray_options_of(args)
    if options.grade_workers_of(args) is not None and args.mode != "grader":
        raise InputError("--workers is for the grader job (emulate grader); the reward job has --threads")
    if ray is not None and args.mode == "reward":
        raise InputError("--ray is for the grader job (emulate grader); the reward job runs in one process")
    if ray is not None:
        document = backend.job_grader(zip_path, prepared, args.completions, function=args.function or "grader",
                                      options=ray, say=lambda line: print(line, flush=True), progress_stream=sys.stderr)
        where = options.ray_line(document["ray"])
    elif args.in_process:
        parsed = emulator_main.build_parser().parse_args(_job(args, zip_path, prepared.root, args.completions))
        document = emulator_main.run_job(parsed, lambda line: print(line, flush=True))
        where = "in-process"
    else:
        inputs = {"bundle.zip": zip_path, f"prepared/data/{split}.jsonl": prepared.split(split)}
        if args.completions is not None:
            inputs["completions.jsonl"] = args.completions
        inside = f"{trainer.MOUNT}/in"
        job = _job(args, Path(f"{inside}/bundle.zip"), Path(f"{inside}/prepared"),
                   Path(f"{inside}/completions.jsonl") if args.completions else None)
        document, ran = trainer.emulator_job(job, inputs, unpacked_bytes=summary.unpacked_bytes,
                                             timeout_s=args.timeout, base_image=options.base_image_of(args))
        where = f"in the trainer container ({ran.seconds:.1f} s with start and stop)"
    env = f"python {document['python']}, sqlite {document['sqlite']}"
    if args.mode == "reward":
        s = document["summary"]
        rate = "-" if s["calls_per_s"] is None else f"{s['calls_per_s']:.0f}"
        mean = "-" if s["mean"] is None else f"{s['mean']:.4f}"
        print(f"reward: {s['steps']} steps, {s['calls']} calls in {s['seconds']:.2f} s ({rate} calls/s), mean {mean}, "
              f"unscored {s['unscored']}, crashes {s['crashes']}, reward shape {document.get('reward_shape', 'binary')}; "
              f"{where}, {env}")
        return CHECKS_FAILED if s["crashes"] else 0
    assert target is not None
    results = [RowResult(**r) for r in document["results"]]
    write_results(target, results)
    print(f"per-row results: {target}; {where}, {env}")  # the summary line was printed as it ran
    if args.gold_completions:
        return golds_checked(results)
    return CHECKS_FAILED if document["summary"]["faults"] else 0


def golds_checked(results: list[RowResult]) -> int:
    """Every row answered with its own gold must score 1.0: 1 (and the rows) when one does not."""
    wrong = [r for r in results if r.score != 1.0]
    print(f"golds as completions: {len(results) - len(wrong)} of {len(results)} rows score 1.0")
    for r in wrong[:10]:
        print(f"  {r.row_id} ({r.db_id}): {r.score} {r.outcome}: {r.detail[:200]}")
    return CHECKS_FAILED if wrong else 0
