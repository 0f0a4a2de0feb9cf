"""`emulate`: run the emulated trainer's reward or grader job on a bundle zip, in Docker or in-process.

    python3 -m harness emulate reward [--zip Z] [--out out] [--completions C] [--prompts-per-step 8] [--group-size 8]
    python3 -m harness emulate grader [--zip Z] [--out out] --completions C [--results FILE]

Reward mode prints one line per GRPO step (reward mean, share zero / full, outcome counts) and the
throughput; grader mode prints the evaluation summary and writes per-row results (harness.common.results)
for the report. Both run in the locked-down trainer container unless ``--in-process``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.common import bundle_zip
from harness.submit.names import BUNDLE_ZIP

MOUNT_IN = "/opt/spider/in"  # docker_run.MOUNT + "/in", without importing docker_run here


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", choices=("reward", "grader"), help="reward: GRPO steps over rl.jsonl; grader: eval.jsonl")
    parser.add_argument("--zip", type=Path, default=BUNDLE_ZIP, help=f"the bundle zip (default: {BUNDLE_ZIP})")
    parser.add_argument("--out", type=Path, default=Path("out"), help="prepare's output folder (default: out)")
    parser.add_argument("--data", type=Path, help="folder of rl.jsonl / eval.jsonl (default: OUT/data)")
    parser.add_argument("--completions", type=Path,
                        help="completions file (harness.common.completions formats); reward mode without it uses "
                             "synthetic ones (the gold, the gold fenced, a wrong query, prose)")
    parser.add_argument("--function", help="MODULE[:FUNCTION] the trainer calls (default: reward / grader)")
    parser.add_argument("--prompts-per-step", type=int, default=8, help="rl rows a step (default: 8)")
    parser.add_argument("--group-size", type=int, default=8, help="completions per row (default: 8)")
    parser.add_argument("--steps", type=int, help="steps to run (default: one pass over rl.jsonl)")
    parser.add_argument("--workers", type=int, default=8, help="concurrent reward calls (default: 8)")
    parser.add_argument("--results", type=Path, help="grader: per-row results file (default: OUT/results/emulated-grader.jsonl)")
    parser.add_argument("--in-process", action="store_true", help="run here, without Docker")
    parser.add_argument("--base-image", help="base of the trainer image (default: $BASE_IMAGE or the offline base)")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="S", help="container time limit (default: 3600)")


def _job(args: argparse.Namespace, split_file: Path, inside: bool) -> list[str]:
    """emulate_main's argument list; ``inside``: paths as mounted in the container."""
    zip_path = f"{MOUNT_IN}/bundle.zip" if inside else str(args.zip)
    split = f"{MOUNT_IN}/{split_file.name}" if inside else str(split_file)
    completions = None if args.completions is None else (
        f"{MOUNT_IN}/completions.jsonl" if inside else str(args.completions))
    if args.mode == "reward":
        job = ["reward", "--zip", zip_path, "--rl", split, "--prompts-per-step", str(args.prompts_per_step),
               "--group-size", str(args.group_size), "--workers", str(args.workers)]
        job += ["--steps", str(args.steps)] if args.steps is not None else []
    else:
        job = ["grader", "--zip", zip_path, "--eval", split]
    job += ["--completions", completions] if completions else []
    return job + (["--function", args.function] if args.function else [])


def run(args: argparse.Namespace) -> int:
    from harness.common.errors import InputError
    data = args.data or args.out / "data"
    split_file = data / ("rl.jsonl" if args.mode == "reward" else "eval.jsonl")
    if args.mode == "grader" and args.completions is None:
        raise InputError("grader mode needs --completions FILE (one completion per eval row), "
                         "e.g. fixtures/sample/completions-eval.jsonl for the sample")
    if not split_file.is_file():
        raise InputError(f"{split_file} does not exist: write the splits with `make bundle` (or `make demo`)")
    summary = bundle_zip.summarize(args.zip)
    if args.in_process:
        from harness.emulator import main as emulate_main
        document = emulate_main.run_job(emulate_main.build_parser().parse_args(_job(args, split_file, False)),
                                        lambda line: print(line, flush=True))
        where = "in-process"
    else:
        from harness.containers import trainer as docker_run
        inputs = {"bundle.zip": args.zip, split_file.name: split_file}
        if args.completions is not None:
            inputs["completions.jsonl"] = args.completions
        document, ran = docker_run.emulator_job(_job(args, split_file, True), inputs,
                                                unpacked_bytes=summary.unpacked_bytes, timeout_s=args.timeout,
                                                base_image=args.base_image or docker_run.DEFAULT_BASE_IMAGE)
        where = f"in the trainer container ({ran.seconds:.1f} s with start and stop)"
    env = f"python {document['python']}, sqlite {document['sqlite']}"
    if args.mode == "reward":
        s = document["summary"]
        rate = "-" if s["calls_per_s"] is None else f"{s['calls_per_s']:.0f}"
        mean = "-" if s["mean"] is None else f"{s['mean']:.4f}"
        print(f"reward: {s['steps']} steps, {s['calls']} calls in {s['seconds']:.2f} s ({rate} calls/s), mean {mean}, "
              f"unscored {s['unscored']}, crashes {s['crashes']}; {where}, {env}")
        return 1 if s["crashes"] else 0
    return _write_grader(args, document, where, env)


def _write_grader(args: argparse.Namespace, document: dict, where: str, env: str) -> int:
    from harness.common.results import RowResult, write_results
    target = args.results or args.out / "results" / "emulated-grader.jsonl"
    write_results(target, [RowResult(**record) for record in document["records"]])
    print(f"per-row results: {target}; {where}, {env}")  # the summary line was printed as it ran
    crashes = sum(1 for r in document["records"] if r["outcome"] in ("crash", "bad_return"))
    return 1 if crashes else 0
