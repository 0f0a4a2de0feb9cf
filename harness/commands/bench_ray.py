"""`bench-ray`: grading throughput on real Spider dev pairs, the local backend against Ray with 1 and 2
workers (harness.bench.on_ray measures it).

    python3 -m harness bench-ray --spider DIR [--pairs 1034] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness.bench import on_ray
from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spider", default=os.environ.get("SPIDER_DATA"), metavar="DIR",
                        help="Spider folder with dev.json and database/ (default: $SPIDER_DATA)")
    parser.add_argument("--pairs", type=int, default=1034, metavar="N", help="dev pairs graded (default: 1034, all)")
    parser.add_argument("--json", dest="json_out", metavar="FILE", help="also write the figures to this JSON file")


def run(args: argparse.Namespace) -> int:
    spider = Path(args.spider) if args.spider else None
    if spider is None or not (spider / "dev.json").is_file():
        raise InputError("bench-ray needs Spider: --spider DIR (or SPIDER_DATA) with dev.json and database/")
    figures = on_ray.run(spider, args.pairs)
    for line in on_ray.lines(figures):
        print(line)
    if args.json_out:
        atomic_write_bytes(args.json_out, json.dumps(figures, indent=1, sort_keys=True).encode())
    return 0
