"""`bench`: the scorer's figures on real Spider dev pairs, each against a baseline measured in the same
run, each family printed as soon as it is measured (harness.bench.suite runs them; docs/benchmark.md)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness.bench import published, suite
from harness.bench.evaluator import Evaluator
from harness.common.files import atomic_write_bytes, check_writable_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spider", default=os.environ.get("SPIDER_DATA"), metavar="DIR",
                        help="Spider folder with dev.json and database/ (default: $SPIDER_DATA)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run this family of figures only (repeatable, or several joined by commas): "
                             + ", ".join(f.name for f in suite.FAMILIES) + " (prepare runs only when named)")
    parser.add_argument("--evaluator", metavar="DIR",
                        help="a checkout of taoyds/test-suite-sql-eval, outside this repository: the grader family "
                             "times its execution match beside the grader (default: not measured)")
    parser.add_argument("--published", nargs="+", default=[], metavar="FILE",
                        help="published systems' dev predictions, one file a system (one prediction a line in dev "
                             "order): the published family grades them beside the evaluator (default: not measured)")
    parser.add_argument("--pairs", type=int, default=400, help="dev pairs timed (default 400)")
    parser.add_argument("--grader-pairs", type=int, default=150, metavar="N",
                        help="distinct dev golds the grader family answers, right and wrong (default 150)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per pair; the minimum counts (default 5)")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true",
                        help="leave out the slowest figures: every gold on its neighbours, and the precision corpus")
    parser.add_argument("--show-separated", type=int, default=30, metavar="N",
                        help="mutated golds separated by the neighbours to print, drawn at random (default 30)")


def run(args: argparse.Namespace) -> int:
    spider = suite.check_spider(args.spider)
    only = [n.strip() for given in args.only or [] for n in given.split(",") if n.strip()]
    families = suite.chosen(only)  # an unknown name is refused before anything runs
    evaluator = Evaluator(args.evaluator) if args.evaluator else None
    published.check(spider, [Path(p) for p in args.published])  # a bad file is refused before anything runs
    if args.json_out:
        check_writable_file(args.json_out, "the figures")
    figures = suite.run_all(spider, [f.name for f in families] if only else None, pairs=args.pairs,
                            repeat=args.repeat, quick=args.quick, show=args.show_separated,
                            grader_pairs=args.grader_pairs, evaluator=evaluator,
                            published=[Path(p) for p in args.published])
    if args.json_out:
        atomic_write_bytes(args.json_out, json.dumps(figures, indent=1).encode())
    return 0
