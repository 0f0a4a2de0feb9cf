"""`emulate`: run the emulated trainer's reward or grader job on a bundle zip, in Docker or in-process.

    python3 -m harness emulate reward [--data out] [--zip ZIP] [--completions C] [--prompts-per-step 8] [--group-size 8]
    python3 -m harness emulate grader [--data out] [--zip ZIP] --completions C [--stage emulated] [--output FILE]

Reward mode prints one line per GRPO step (reward mean, share zero / full, outcome counts) and the
throughput; grader mode runs the one grading path (harness.emulator.grader_job, the same as
`grade`), prints the evaluation summary and writes per-row results to ``DATA/results/STAGE.jsonl``.
Both run in the locked-down trainer container unless ``--in-process``; both exit 1 when a call
crashed or returned no score. ``emulate grader --ray ADDRESS`` runs the grader job on Ray workers
instead (harness.raygrade.backend; on the host, each worker loading the zip as the trainer does).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands import options
from harness.common import bundle_zip
from harness.common.errors import CHECKS_FAILED, InputError
from harness.common.files import check_writable_file
from harness.common.layout import GIVEN_COMPLETIONS, Prepared, require
from harness.common.results import RowResult, write_results
from harness.containers import trainer
from harness.emulator import main as emulator_main
from harness.raygrade import backend

EMULATED_STAGE = "emulated"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", choices=("reward", "grader"), help="reward: GRPO steps over rl.jsonl; grader: eval.jsonl")
    options.add_data(parser)
    options.add_zip(parser)
    parser.add_argument("--completions", type=Path, metavar="FILE",
                        help="completions file (docs: completions files); reward mode without it uses synthetic "
                             "ones (the gold, the gold fenced, a wrong query, prose)")
    parser.add_argument("--function", help="MODULE[:FUNCTION] the trainer calls (default: reward / grader)")
    parser.add_argument("--prompts-per-step", type=int, default=8, metavar="N", help="rl rows a step (default: 8)")
    parser.add_argument("--group-size", type=int, default=8, metavar="N", help="completions per row (default: 8)")
    parser.add_argument("--steps", type=int, metavar="N", help="steps to run (default: one pass over rl.jsonl)")
    options.add_threads(parser, "concurrent reward calls")
    parser.add_argument("--stage", default=EMULATED_STAGE,
                        help=f"grader: the stage the results are for (default: {EMULATED_STAGE})")
    options.add_output(parser, "grader: the per-row results file (default: DATA/results/STAGE.jsonl)")
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
    return job + (["--function", args.function] if args.function else [])


def run(args: argparse.Namespace) -> int:
    prepared = Prepared(args.data)
    split = "rl" if args.mode == "reward" else "eval"
    if args.mode == "grader" and args.completions is None:
        raise InputError("grader mode needs --completions FILE (one completion per eval row), "
                         "e.g. fixtures/sample/completions-eval.jsonl for the sample")
    require(prepared.split(split), f"the {split} split")
    zip_path = require(options.zip_of(args), "the bundle zip")
    if args.completions is not None:
        require(args.completions, "the completions file", GIVEN_COMPLETIONS)
    summary = bundle_zip.summarize(zip_path)
    target = None if args.mode == "reward" else check_writable_file(args.output or prepared.results(args.stage),
                                                                     f"the {args.stage} results")
    ray = options.ray_options_of(args)
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
              f"unscored {s['unscored']}, crashes {s['crashes']}; {where}, {env}")
        return CHECKS_FAILED if s["crashes"] else 0
    assert target is not None
    write_results(target, [RowResult(**r) for r in document["results"]])
    print(f"per-row results: {target}; {where}, {env}")  # the summary line was printed as it ran
    return CHECKS_FAILED if document["summary"]["faults"] else 0
