"""`bench-overturns`: per dev database, the matches of published predictions that the neighbours and
the search overturn (harness.bench.overturns measures them).

    python3 -m harness bench-overturns --spider DIR dail.txt c3.txt graphix.txt
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness.bench import overturns
from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("predictions", nargs="+", metavar="FILE",
                        help="a system's dev predictions, one a line in dev order (line N is dev row N-1), "
                             "optionally followed by a tab and the db_id")
    parser.add_argument("--spider", default=os.environ.get("SPIDER_DATA"), metavar="DIR",
                        help="Spider folder with dev.json and database/ (default: $SPIDER_DATA)")
    parser.add_argument("--json", dest="json_out", help="also write the counts, and every overturn, to this JSON file")


def run(args: argparse.Namespace) -> int:
    if not args.spider or not (Path(args.spider) / "dev.json").is_file():
        raise InputError("give --spider DIR (or SPIDER_DATA=DIR): a Spider folder with dev.json and database/")
    figures = overturns.run(Path(args.spider), [Path(p) for p in args.predictions])
    overturns.print_figures(figures)
    if args.json_out:
        atomic_write_bytes(args.json_out, json.dumps({k: figures[k] for k in ("systems", "counts", "overturns")},
                                                     indent=1).encode())
    return 0
