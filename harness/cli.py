"""`spider-harness` (or `python -m harness`): one command line for every harness job.

Each command lives in its own module, which defines ``add_arguments(parser)`` and
``run(args) -> int``; modules are imported only when their command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import HarnessError

# command name -> (module, one-line help). Keep sorted by the order a user meets them.
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("harness.prepare", "Spider rows (datasets-server API, cached) to train/rl/eval JSONL and the staged bundle data"),
    "pipeline": ("harness.pipeline", "write and validate OUT/pipeline.json (base -> SFT -> GRPO, each scored)"),
    "submit": ("harness.submit", "verify, register data and bundle, start pipeline.json on the trainer, wait"),
    "grade": ("harness.grade", "score a file of completions on the eval split with the bundle; write per-row results"),
    "report": ("harness.report", "compare per-row results of stages: accuracy, gained/lost, McNemar p, changed rows"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spider-harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
