"""`spider-harness` (or `python -m harness`): one command line for every harness job.

Each command lives in its own module of harness/commands/, which defines ``add_arguments(parser)``
and ``run(args) -> int``; modules are imported only when their command runs. Exit codes: the one
table in harness.common.errors (EXIT_CODES).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from harness.common.errors import BROKEN_PIPE, INTERRUPTED, UNEXPECTED, HarnessError
from harness.common.interrupts import interrupt_on_signals, signal_of

# command name -> (module, one-line help). Keep sorted by the order a user meets them.
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("harness.commands.prepare", "questions (Spider's files or datasets-server API; any file in Spider's or BIRD's shape) "
                "to train/rl/eval JSONL and the staged bundle data"),
    "pack": ("harness.commands.pack", "zip the staged bundle reproducibly from an explicit file list; print SHA-256 and sizes"),
    "audit": ("harness.commands.audit", "which rows a degenerate answer (empty, constant, one edit of the gold) is paid on, "
              "by the bundle as the trainer calls it"),
    "verify": ("harness.commands.verify", "pre-push verification of a bundle zip by the emulated trainer in a locked-down container"),
    "emulate": ("harness.commands.emulate", "run the emulated trainer's reward (GRPO steps) or grader job on a bundle zip"),
    "image": ("harness.commands.images", "build (once per input change) the trainer container image"),
    "hooks": ("harness.commands.hooks", "install the git pre-push hook that runs `make verify`"),
    "pipeline": ("harness.commands.pipeline", "write and validate DATA/pipeline.json (base -> SFT -> GRPO, each scored)"),
    "submit": ("harness.commands.submit", "verify, register data and bundle, start pipeline.json on the trainer, wait"),
    "grade": ("harness.commands.grade", "score a stage's completions on the eval split with the bundle zip; write per-row results"),
    "export": ("harness.commands.export", "write a split as TRL's or verl's dataset rows (JSONL), with db_id hints from the bundle"),
    "report": ("harness.commands.report", "compare stages: accuracy, gained/lost, McNemar p, the edits behind changed rows, reward curves"),
    "bench": ("harness.commands.bench", "print the scorer's benchmark figures on real Spider dev pairs"),
    "bench-overturns": ("harness.commands.bench_overturns", "per dev database, the matches of published predictions "
                        "that the neighbours and the grader's search overturn"),
    "bench-ray": ("harness.commands.bench_ray", "grading throughput on real Spider dev pairs: the local backend, Ray with 1 and 2 workers"),
    "serve": ("harness.commands.serve", "serve the bundle's grader over HTTP (http: graders) in its container on 127.0.0.1, "
              "or behind its TLS proxy for remote trainers (--public)"),
    "service-image": ("harness.commands.images", "build (once per input change) the grader service's container image"),
    "proxy-image": ("harness.commands.images", "build (once per input change) the grader service's proxy image (nginx, Debian's packages)"),
    "loadtest": ("harness.commands.loadtest", "load-test the grader service over loopback: throughput, p50/p99, answers, worker memory"),
}


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """Every command is listed; only the chosen one's module is imported (startup stays fast)."""
    parser = argparse.ArgumentParser(prog="spider-harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(cmd)
            cmd.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(chosen if chosen in COMMANDS else None).parse_args(argv)
    try:
        with interrupt_on_signals():  # SIGTERM and SIGHUP stop a command as Ctrl-C does: its cleanup runs
            return int(args._module.run(args) or 0)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        name = signal_of(exc)
        print(f"stopped: {name} (what it was writing is not kept; run the command again)" if name else "interrupted",
              file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except Exception as exc:  # a bug: show where, but never exit 1, which means "checks failed"
        traceback.print_exc()
        print(f"error: unexpected {type(exc).__name__} in `{args.command}`: an error no check "
              f"expected, so a bug of the harness: please report it with the traceback above", file=sys.stderr)
        return UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
