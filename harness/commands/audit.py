"""`audit`: which rows a degenerate answer is paid on, by the bundle as the trainer calls it (docs/audit.md).

    python3 -m harness audit [--data out] [--zip ZIP] [--splits rl,eval] [--json FILE] [--max-hackable 0.05]
                             [--near-miss-families all] [--min-kill-rate 90%]

Audits the bundle zip (``--zip``, default ``DATA/spider-scoring.zip``; when that is missing, the
prepared folder's staged ``DATA/bundle/``, packed as ``pack`` packs it) over the rows of the
splits named (from the bundle's index, so a zip alone is enough). Prints the table, then the rows
behind it (every hackable row with the answers paid and the witness showing each wrong; every
set-aside row), then what each reward shape pays every policy (harness.audit.shapes, with a warning
for each policy the bundle's own shape pays above nothing), then the near misses of the golds
(harness.audit.nearmiss.measure: per family, killed of the killable ones, missed, blocked, equivalent), and
exits 1 (VerificationFailed) when the share of hackable rows of a split is over ``--max-hackable``
or its near-miss kill rate under ``--min-kill-rate``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness.audit import entry, report, shapes
from harness.audit import run as audit_run
from harness.audit.nearmiss import measure as nearmiss
from harness.audit.nearmiss import published
from harness.audit.nearmiss import report as nearmiss_report
from harness.commands import options
from harness.common.errors import InputError, VerificationFailed
from harness.common.files import atomic_write_bytes
from harness.common.layout import PREPARE_HINT, Prepared


def share(text: str) -> float:
    """A share given as a fraction (0.05) or a percentage (5%), between 0 and 1."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share: give a fraction (0.05) or a percentage (5%)") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1 (0% and 100%)")
    return value


def splits_of(text: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [s for s in chosen if s not in audit_run.FUNCTION_FOR_SPLIT]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: give split names among {', '.join(audit_run.FUNCTION_FOR_SPLIT)}, "
                                         "separated by commas")
    return chosen


def add_max_hackable(parser: argparse.ArgumentParser) -> None:
    """``--max-hackable SHARE``: shared by `audit` and `verify`, one meaning in both."""
    parser.add_argument("--max-hackable", type=share, default=report.DEFAULT_THRESHOLD, metavar="SHARE",
                        help="fail when a split has more hackable rows than this share, as a fraction or a "
                             f"percentage (default {100 * report.DEFAULT_THRESHOLD:.0f}%%; docs/audit.md)")


def add_near_misses(parser: argparse.ArgumentParser) -> None:
    """``--near-miss-families`` and ``--min-kill-rate``: shared by `audit` and `verify`, one meaning in both."""
    parser.add_argument("--near-miss-families", choices=("all", "tuning", "held_out", "blind", "blind2", "none"),
                        default="all", metavar="WHICH",
                        help="near misses measured: all families (default), tuning, held_out, blind or blind2 (two "
                             "sets written apart from the scorer's tuning, harness/audit/nearmiss/blind.py and blind2.py), or "
                             "none (skips the measurement, the slowest part; docs/audit.md)")
    parser.add_argument("--min-kill-rate", type=share, default=nearmiss_report.DEFAULT_MIN_KILL_RATE, metavar="SHARE",
                        help="fail when a split's near-miss kill rate (killed / (killed + missed)) is under this "
                             f"share (default {100 * nearmiss_report.DEFAULT_MIN_KILL_RATE:.0f}%%; the goal is "
                             f"{100 * nearmiss_report.GOAL:.0f}%%)")


def near_misses_of(args: argparse.Namespace) -> entry.NearMisses:
    predictions = getattr(args, "predictions", None)
    if predictions:
        spider = args.spider or os.environ.get("SPIDER_DATA")
        if not spider:
            raise InputError("--predictions needs Spider's dev.json: give --spider DIR (or set SPIDER_DATA)")
        return entry.NearMisses("all", families=published.families(Path(spider), predictions))
    if args.near_miss_families in ("blind", "blind2"):
        return entry.NearMisses("all", families=nearmiss.blind_families(args.near_miss_families))
    return entry.NearMisses(None if args.near_miss_families == "none" else args.near_miss_families)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_data(parser)
    options.add_zip(parser, "the bundle zip to audit (when missing, the prepared folder's staged bundle, packed)")
    parser.add_argument("--splits", type=splits_of, default=audit_run.DEFAULT_SPLITS, metavar="SPLITS",
                        help=f"splits whose rows are audited, comma-separated (default {','.join(audit_run.DEFAULT_SPLITS)})")
    options.add_threads(parser, "concurrent scoring calls", default=4)
    add_max_hackable(parser)
    add_near_misses(parser)
    parser.add_argument("--predictions", type=Path, nargs="+", metavar="FILE",
                        help="published systems' Spider dev predictions (one query a line, in dev order; a file a "
                             "system), measured as near misses of their rows' golds instead of the families "
                             "(harness/audit/nearmiss/published.py); the bundle's rows must be dev rows")
    parser.add_argument("--spider", type=Path, metavar="DIR",
                        help="the Spider folder whose dev.json orders --predictions (default: $SPIDER_DATA)")
    options.add_json(parser, "the audit (every hackable and set-aside row, the near misses)")


def audit_document(args: argparse.Namespace) -> dict:
    """The audit of ``--zip``, else of the prepared folder's zip, else of its staged bundle."""
    zip_path: Path = options.zip_of(args)
    if zip_path.is_file():
        return entry.audit_zip(zip_path, args.splits, threads=args.threads, near_misses=near_misses_of(args), say=print)
    staged = Prepared(args.data).staged
    if args.zip is None and (staged / "data" / "index.json").is_file():
        return entry.audit_staged(staged, args.splits, threads=args.threads, near_misses=near_misses_of(args),
                                  say=print)
    raise InputError(f"the bundle zip {zip_path} does not exist: pack it (`make pack`), or {PREPARE_HINT}")


def run(args: argparse.Namespace) -> int:
    doc = audit_document(args)
    if not any(split["rows"] for split in doc["splits"].values()):
        raise InputError(f"the bundle holds no row of {', '.join(args.splits)}: nothing to audit; prepare those "
                         "splits (`make bundle`) or name others with --splits")
    near = doc.get("near_misses")
    print("\n".join(report.render(doc) + report.rows(doc) + shapes.render(doc)
                    + (nearmiss_report.render(near) + nearmiss_report.rows(near) if near else [])))
    if args.json is not None:
        atomic_write_bytes(args.json, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    over = report.problems(doc, args.max_hackable)
    under = nearmiss_report.below(near, args.min_kill_rate) if near else []
    if over or under:
        raise VerificationFailed("; ".join(over + under) + ": see docs/audit.md (close the holes: prepare separates "
                                 "them; or leave the hackable rl rows out with prepare --drop-hackable)")
    return 0
