"""`export`: write a split in the dataset format of a trainer library (TRL, verl, NeMo Gym or OpenRLHF), as JSONL.

    python3 -m harness export --format trl [--split rl] [--data out] [--output FILE]

Reads ``DATA/data/SPLIT.jsonl`` and, for the ``db_id`` hints, the staged bundle's index
(``DATA/bundle/data/index.json``, when there); writes one dataset row per line to
``DATA/exports/FORMAT/SPLIT.jsonl`` (harness.common.trainer_rows says what each row holds).
Load it with ``datasets.load_dataset("json", data_files=...)`` for TRL; for verl convert it to
parquet (``datasets.Dataset.from_json(path).to_parquet(...)``), the format verl's trainer reads;
for NeMo Gym it is a resources server's task JSONL, graded by ``serve``'s ``/verify``; for OpenRLHF the
prompt dataset its multi-turn agent (the bundle's ``openrlhf_agent.py``) reads.
"""

from __future__ import annotations

import argparse
import json

from harness.commands import options
from harness.common.files import atomic_write_bytes
from harness.common.layout import SPLITS, Prepared, require
from harness.common.rows import read_split
from harness.common.trainer_rows import FORMATS, db_ids_of, trainer_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=FORMATS, help="the trainer library's dataset format")
    parser.add_argument("--split", default="rl", choices=SPLITS, help="the split to export (default: rl)")
    options.add_data(parser)
    options.add_output(parser, "the JSONL file to write (default: DATA/exports/FORMAT/SPLIT.jsonl)")


def run(args: argparse.Namespace) -> int:
    prepared = Prepared(args.data)
    rows = read_split(require(prepared.split(args.split), f"the {args.split} split"), args.split)
    index_path = prepared.staged / "data" / "index.json"
    db_ids = db_ids_of(json.loads(index_path.read_text(encoding="utf-8"))) if index_path.is_file() else {}
    out = trainer_rows(rows, args.format, db_ids)
    target = args.output or prepared.export(args.format, args.split)
    lines = [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in out]
    atomic_write_bytes(target, ("\n".join(lines) + "\n").encode("utf-8"))
    hinted = sum(1 for r in rows if r.id in db_ids)
    print(f"wrote {len(out)} {args.format} rows of the {args.split} split to {target} ({hinted} with a db_id hint)")
    return 0
