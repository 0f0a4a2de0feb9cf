"""`pack`: zip the staged bundle of a prepared folder reproducibly; print its SHA-256 and sizes.

    python3 -m harness pack [--data out] [--output out/spider-scoring.zip]

Reads ``DATA/bundle/`` (written by prepare; one that prepare did not finish is refused,
harness.prepare.staging) and writes the zip (harness.prepare.pack says what it
holds and why the same inputs give the same bytes).
"""

from __future__ import annotations

import argparse

from harness.commands import options
from harness.common.errors import PackError
from harness.common.layout import PREPARE_HINT, Prepared
from harness.prepare import pack, staging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_data(parser)
    options.add_output(parser, "the zip to write (default: DATA/spider-scoring.zip)", metavar="ZIP")


def run(args: argparse.Namespace) -> int:
    prepared = Prepared(args.data)
    if not prepared.staged.is_dir():
        raise PackError(f"the staged bundle {prepared.staged} does not exist: {PREPARE_HINT}")
    staging.check_complete(prepared.staged)  # never a half-built one
    summary, left_out = pack.pack(prepared.staged, args.output or prepared.zip)
    for name in left_out:
        print(f"left out (not in the file list): {name}")
    print("\n".join(summary.lines()))
    return 0
