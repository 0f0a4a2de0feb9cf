"""`bench`: the scorer's figures on real Spider dev pairs, each against a baseline measured in the same
run (harness.bench.suite measures them; docs/benchmark.md)."""

from __future__ import annotations

import argparse
import json
import os

from harness.bench import suite
from harness.common.files import atomic_write_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spider", default=os.environ.get("SPIDER_DATA"), metavar="DIR",
                        help="Spider folder with dev.json and database/ (default: $SPIDER_DATA)")
    parser.add_argument("--pairs", type=int, default=400, help="dev pairs timed (default 400)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per pair; the minimum counts (default 5)")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true",
                        help="leave out the slowest figures: every gold on its neighbours, and the precision corpus")
    parser.add_argument("--show-separated", type=int, default=30, metavar="N",
                        help="mutated golds separated by the neighbours to print, drawn at random (default 30)")


def run(args: argparse.Namespace) -> int:
    spider = suite.check_spider(args.spider)
    figures = suite.run(spider, pairs=args.pairs, repeat=args.repeat, quick=args.quick, show=args.show_separated)
    suite.print_figures(figures)
    if args.json_out:
        atomic_write_bytes(args.json_out, json.dumps(figures, indent=1).encode())
    return 0
