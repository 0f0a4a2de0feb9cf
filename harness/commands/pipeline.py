"""`pipeline`: write and validate DATA/pipeline.json, the trainer's plan (base -> SFT -> GRPO, each scored).

    python3 -m harness pipeline [--data out] [--output out/pipeline.json] [--rl-max-steps 80 ...]
    python3 -m harness pipeline --check FILE

Every stage parameter is a flag (harness.submit.pipeline.PipelineParams); ``--check`` validates a
descriptor edited by hand instead of writing one.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from harness.commands import options
from harness.common.files import atomic_write_bytes
from harness.common.layout import Prepared
from harness.submit.names import DEFAULT_NAMES, Names
from harness.submit.pipeline import PipelineParams, build_pipeline, dumps, load, validate

_PARAM_FIELDS = [f for f in dataclasses.fields(PipelineParams) if f.name != "names"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options: output folder, checks, names, and one --flag per PipelineParams field."""
    options.add_data(parser)
    options.add_output(parser, "the descriptor to write (default: DATA/pipeline.json)")
    parser.add_argument("--check", type=Path, metavar="FILE",
                        help="validate this existing descriptor instead of generating one")
    parser.add_argument("--skip-data-checks", action="store_true",
                        help="do not read the splits (no passes / length checks)")
    parser.add_argument("--lenient-lengths", action="store_true",
                        help="report rows over maxSeqLength as warnings instead of failing")
    add_name_arguments(parser)
    group = parser.add_argument_group("stage parameters (defaults: the reference example)")
    for field in _PARAM_FIELDS:
        group.add_argument("--" + field.name.replace("_", "-"), type=type(field.default),
                           default=field.default, metavar=type(field.default).__name__.upper(),
                           help=f"default: {field.default}")


def add_name_arguments(parser: argparse.ArgumentParser) -> None:
    """--base-model, --bundle, --workload, --*-dataset: shared by `pipeline` and `submit`."""
    group = parser.add_argument_group("trainer-facing names (defaults: harness/submit/names.py)")
    group.add_argument("--base-model", default=DEFAULT_NAMES.base_model, metavar="REPO",
                       help="the base model's repository id (default: %(default)s)")
    group.add_argument("--bundle", default=DEFAULT_NAMES.bundle, metavar="NAME",
                       help="the bundle's registered name (default: %(default)s)")
    group.add_argument("--workload", default=DEFAULT_NAMES.workload, metavar="NAME",
                       help="the workload owning the runs (default: %(default)s)")
    for split, dataset in DEFAULT_NAMES.datasets.items():
        group.add_argument(f"--{split}-dataset", default=dataset, metavar="NAME",
                           help=f"the {split} split's registered dataset (default: %(default)s)")


def names_from_args(args: argparse.Namespace) -> Names:
    return Names(base_model=args.base_model, bundle=args.bundle, workload=args.workload,
                 datasets={s: getattr(args, f"{s}_dataset") for s in DEFAULT_NAMES.datasets})


def run(args: argparse.Namespace) -> int:
    names = names_from_args(args)
    data = None if args.skip_data_checks else Prepared(args.data)
    if args.check is not None:
        doc, target = load(args.check), None
    else:
        params = PipelineParams(names=names, **{f.name: getattr(args, f.name) for f in _PARAM_FIELDS})
        doc, target = build_pipeline(params), args.output or Prepared(args.data).pipeline
    for note in validate(doc, names, data, lenient_lengths=args.lenient_lengths):
        print(note)
    if target is not None:
        atomic_write_bytes(target, dumps(doc))
        print(f"wrote {target} ({len(doc['stages'])} stages: "
              f"{' -> '.join(s['name'] for s in doc['stages'])})")
    else:
        print(f"{args.check}: valid ({len(doc['stages'])} stages)")
    return 0
