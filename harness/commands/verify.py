"""`verify`: pre-push verification of a bundle zip, by the emulated trainer in a locked-down container.

    python3 -m harness verify [--data out] [--zip DATA/spider-scoring.zip] [--in-process] [--json FILE]

First the zip itself (what the trainer refuses: unsafe paths, symlinks, no Python, over the size
caps; harness.common.bundle_zip), then, inside the container, the checks of harness.emulator.checks
on the prepared folder's splits, then the audit of degenerate answers (harness.audit, on this host:
its edits need sqlparse; it scores through the zip loaded as the trainer loads it) against
``--max-hackable``. Prints one line per check and the first failures of each, then a verdict;
exits 1 (VerificationFailed) when anything failed. ``--in-process`` runs the same checks
in this Python, without Docker (fast, for development; the container is the real check: a
read-only filesystem, no network, the standard library only).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.audit import entry, shapes
from harness.audit import report as audit_report
from harness.audit.nearmiss import report as nearmiss_report
from harness.commands import audit as audit_command
from harness.commands import options
from harness.common import bundle_zip
from harness.common.errors import DockerUnavailable, PackError, VerificationFailed
from harness.common.files import atomic_write_bytes, check_writable_file
from harness.common.layout import Prepared, require, require_prepared
from harness.containers import trainer
from harness.emulator.check_result import MAX_SHOWN
from harness.emulator.main import job_verify

AUDIT_CHECK = "degenerate answers"
NEAR_MISS_CHECK = "near misses"
# Named in the report so a reader knows what "in the container" meant.
LOCKDOWN = "no network, read-only root, zip and splits mounted read-only, /tmp tmpfs, user nobody, no capabilities"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_data(parser)
    options.add_zip(parser)
    parser.add_argument("--in-process", action="store_true", help="run the checks here, without Docker")
    options.add_base_image(parser)
    options.add_threads(parser, "concurrent scoring calls")
    parser.add_argument("--max-mutated-golds", type=int, metavar="N",
                        help="mutate only the first N distinct golds (default: all)")
    options.add_container_timeout(parser)
    audit_command.add_max_hackable(parser)
    audit_command.add_near_misses(parser)
    options.add_json(parser, "the report (the audit's document under \"audit\")")


def verify(args: argparse.Namespace) -> tuple[dict, bundle_zip.ZipSummary | None, str]:
    """The report document (emulator.main.job_verify's), the zip's summary and where it ran."""
    prepared = require_prepared(Prepared(args.data))
    zip_path = require(options.zip_of(args), "the bundle zip")
    try:
        summary = bundle_zip.summarize(zip_path)
    except PackError as exc:
        failed = {"name": "zip accepted", "passed": False, "summary": "the trainer would refuse this zip",
                  "failures": [str(exc)], "seconds": 0.0}
        return {"checks": [failed], "passed": False, "seconds": 0.0}, None, "host"
    if args.in_process:
        report = job_verify(zip_path, prepared, threads=args.threads, max_mutated_golds=args.max_mutated_golds,
                            say=lambda line: print(line, flush=True))
        where = "in-process (no container)"
    else:
        report, where = _in_container(args, zip_path, summary, prepared)
    accepted = {"name": "zip accepted", "passed": True, "seconds": 0.0, "failures": [],
                "summary": f"{summary.entries} entries ({summary.modules} modules, {summary.databases} databases, "
                           f"{summary.neighbours} neighbours), "
                           f"{summary.archive_bytes:,} bytes zipped, {summary.unpacked_bytes:,} unpacked, within the caps"}
    report["checks"].insert(0, accepted)
    try:
        report["audit"] = doc = entry.audit_zip(zip_path, threads=args.threads,
                                                near_misses=audit_command.near_misses_of(args))
        report["checks"].append(audit_check(doc, args.max_hackable))
        if "near_misses" in doc:
            report["checks"].append(near_miss_check(doc["near_misses"], args.min_kill_rate))
    except Exception as exc:  # noqa: BLE001 - a check that cannot run has failed; the report still comes
        report["checks"].append({"name": AUDIT_CHECK, "passed": False, "summary": "the check could not run",
                                 "failures": [f"{type(exc).__name__}: {exc}"], "seconds": 0.0})
    return report, summary, where


def audit_check(doc: dict, threshold: float) -> dict:
    """The audit as one check: failed when a split's hackable share is over ``threshold``."""
    over = audit_report.problems(doc, threshold)
    shares = ", ".join(f"{name} {s['hackable']} of {s['rows']}" for name, s in doc["splits"].items())
    fair = doc["rewrites"]["splits"].values()
    shares += (f"; equivalent rewrites rejected: {sum(s['rejected'] for s in fair)} of {sum(s['scored'] for s in fair)}"
               if any(s["scored"] for s in fair) else "")
    firsts = [f"{e['id']} ({e['db_id']}): {e['paid'][0]['policy']} {e['paid'][0]['sql'][:80]!r} paid, "
              f"shown wrong on {e['paid'][0]['witness']}" for e in doc["hackable"]]
    return {"name": AUDIT_CHECK, "passed": not over, "seconds": doc["seconds"],
            "summary": f"hackable rows: {shares}, within {threshold:.0%} a split"
            if not over else "; ".join(over), "failures": (over + firsts)[:MAX_SHOWN] if over else []}


def near_miss_check(doc: dict, least: float) -> dict:
    """The near misses as one check: failed when a split's kill rate is under ``least``."""
    if "not_run" in doc:
        return {"name": NEAR_MISS_CHECK, "passed": True, "seconds": 0.0, "failures": [],
                "summary": f"not measured: {doc['not_run']}"}
    under = nearmiss_report.below(doc, least)
    rates = ", ".join(f"{name} {nearmiss_report.rate(s['groups']['all'])} ({s['groups']['all']['missed']} missed)"
                      for name, s in doc["splits"].items())
    firsts = [f"{e['id']} ({e['db_id']}): {e['family']} {e['sql'][:80]!r} paid, shown wrong on {e['witness']}"
              for e in doc["missed"]]
    return {"name": NEAR_MISS_CHECK, "passed": not under, "seconds": doc.get("seconds", 0.0),
            "summary": f"kill rate {rates}, at least {least:.0%} a split (goal {nearmiss_report.GOAL:.0%})"
            if not under else "; ".join(under), "failures": (under + firsts)[:MAX_SHOWN] if under else []}


def _in_container(args: argparse.Namespace, zip_path: Path, summary: bundle_zip.ZipSummary,
                  prepared: Prepared) -> tuple[dict, str]:
    inputs = {"bundle.zip": zip_path, **{f"prepared/data/{s}.jsonl": p for s, p in prepared.splits().items()}}
    job = ["verify", "--zip", f"{trainer.MOUNT}/in/bundle.zip", "--data", f"{trainer.MOUNT}/in/prepared",
           "--watch", "/tmp", "--threads", str(args.threads)]
    if args.max_mutated_golds is not None:
        job += ["--max-mutated-golds", str(args.max_mutated_golds)]
    try:
        report, run = trainer.emulator_job(job, inputs, unpacked_bytes=summary.unpacked_bytes,
                                           base_image=options.base_image_of(args), timeout_s=args.timeout)
    except DockerUnavailable as exc:
        raise DockerUnavailable(f"{exc}\n(without Docker, `--in-process` runs the same checks here, "
                                "minus the container's read-only filesystem, user and network lockdown)") from None
    return report, f"container ({LOCKDOWN}; {run.seconds:.1f} s)"


def render(report: dict, summary: bundle_zip.ZipSummary | None, where: str) -> list[str]:
    """The failures' details and the verdict (the check lines were printed as they ran)."""
    lines = []
    if summary is not None:
        lines.append(f"zip {summary.path}  sha256 {summary.sha256}")
    env = f" python {report['python']}, sqlite {report['sqlite']}" if "python" in report else ""
    lines.append(f"ran {where};{env}")
    checks = report["checks"]
    if "audit" in report:
        lines += audit_report.render(report["audit"]) + shapes.render(report["audit"])
        if "near_misses" in report["audit"]:
            lines += nearmiss_report.render(report["audit"]["near_misses"])
    for check in checks:
        mark = "PASS" if check["passed"] else "FAIL"
        lines.append(f"  {mark}  {check['name']:<24} {check['summary']}")
        for failure in check["failures"]:
            lines.append(f"          - {failure}")
    failed = [c for c in checks if not c["passed"]]
    verdict = "PASSED" if not failed else f"FAILED: {len(failed)} of {len(checks)} checks"
    lines.append(f"verification {verdict} ({report.get('seconds', 0.0):.1f} s of checks)")
    return lines


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    print(f"==> verifying {options.zip_of(args)} against {Prepared(args.data).root / 'data'}", flush=True)
    if args.json is not None:
        check_writable_file(args.json, "the report")
    report, summary, where = verify(args)
    print("\n".join(render(report, summary, where)))
    if args.json is not None:
        atomic_write_bytes(args.json, (json.dumps(report, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    if failed:
        raise VerificationFailed(f"{', '.join(failed)} failed ({time.monotonic() - started:.1f} s): fix them before "
                                 "pushing the bundle (a pre-push hook can be skipped with `git push --no-verify`)")
    return 0
