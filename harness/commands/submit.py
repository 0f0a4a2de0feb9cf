"""`submit`: verify the bundle, then register everything and run pipeline.json with `akka-optimize`.

    python3 -m harness submit [--data out] [--zip ZIP] [--dry-run] [--new-pipeline]

The sequence, its idempotency and the troubleshooting table: harness.submit.steps and
docs/submission.md. ``--dry-run`` prints the commands and checks the inputs, running nothing.
"""

from __future__ import annotations

import argparse
import shlex

from harness.commands import options
from harness.commands.pipeline import add_name_arguments, names_from_args
from harness.common.layout import Prepared
from harness.submit import names as N
from harness.submit.process import command_verifier, run_process, verification
from harness.submit.steps import Inputs, Options, dry_run, submit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_data(parser)
    options.add_zip(parser, "the bundle zip to push")
    parser.add_argument("--cli", default=N.CLI, help=f"the CLI program (default: {N.CLI} on PATH)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--new-pipeline", action="store_true",
                        help="start a new pipeline even if one was started from the same inputs")
    parser.add_argument("--verify-cmd", metavar="CMD",
                        help="the pre-push verification command (default: python -m harness verify --data DATA --zip ZIP)")
    parser.add_argument("--skip-verify", action="store_true",
                        help="submit without the pre-push verification (not recommended)")
    parser.add_argument("--verify-timeout", type=float, default=3600.0, metavar="S",
                        help="time limit of the verification (default: 3600)")
    parser.add_argument("--step-timeout", type=float, metavar="S",
                        help="time limit of every CLI step but the wait (default: per step, 5-60 min)")
    parser.add_argument("--wait-timeout", type=float, default=48 * 3600.0, metavar="S",
                        help="time limit of `pipelines wait` (default: 48 h)")
    parser.add_argument("--lenient-lengths", action="store_true",
                        help="rows over maxSeqLength are warnings, not errors")
    add_name_arguments(parser)


def run(args: argparse.Namespace) -> int:
    inputs = Inputs(data=Prepared(args.data), zip_path=options.zip_of(args))
    opts = Options(names=names_from_args(args), inputs=inputs, cli=args.cli,
                   step_timeout_s=args.step_timeout, wait_timeout_s=args.wait_timeout,
                   new_pipeline=args.new_pipeline, lenient_lengths=args.lenient_lengths)
    verify_argv = verification(args.skip_verify, args.verify_cmd, inputs.zip_path, inputs.data.root)
    if args.dry_run:
        dry_run(opts, shlex.join(verify_argv) if verify_argv else "(verification skipped: --skip-verify)")
        return 0
    if verify_argv is None:
        print("warning: --skip-verify: the bundle is pushed without the pre-push verification")
        verifier = None
    else:
        verifier = command_verifier(verify_argv, args.verify_timeout, run_process, print)
    submit(opts, run_process, verifier)
    return 0
