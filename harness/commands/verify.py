"""`verify`: pre-push verification of a bundle zip, by the emulated trainer in a locked-down container.

    python3 -m harness verify [--zip dist/spider-scoring.zip] [--out out] [--data OUT/data] [--in-process]

First the zip itself (what the trainer refuses: unsafe paths, symlinks, no Python, over the size
caps; harness.prepare.pack), then, inside the container, the checks of harness.emulator.checks on the
splits. Prints one line per check and the first failures of each, then a verdict; exits non-zero
(VerificationFailed) when anything failed. ``--in-process`` runs the same checks in this Python,
without Docker (fast, for development; the container is the real check: a read-only filesystem,
no network, the standard library only).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.common import bundle_zip
from harness.common.files import atomic_write_bytes
from harness.emulator.checks import SPLITS
from harness.common.errors import DockerUnavailable, PackError, VerificationFailed
from harness.submit.names import BUNDLE_ZIP

# Named in the report so a reader knows what "in the container" meant.
LOCKDOWN = "no network, read-only root, zip and splits mounted read-only, /tmp tmpfs, user nobody, no capabilities"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zip", type=Path, default=BUNDLE_ZIP, help=f"the bundle zip (default: {BUNDLE_ZIP})")
    parser.add_argument("--out", type=Path, default=Path("out"), help="prepare's output folder (default: out)")
    parser.add_argument("--data", type=Path, help="folder of train/rl/eval.jsonl (default: OUT/data)")
    parser.add_argument("--in-process", action="store_true", help="run the checks here, without Docker")
    parser.add_argument("--base-image", help="base of the trainer image (default: $BASE_IMAGE or the offline base)")
    parser.add_argument("--workers", type=int, default=8, help="concurrent scoring calls (default: 8)")
    parser.add_argument("--max-mutated-golds", type=int, metavar="N",
                        help="mutate only the first N distinct golds (default: all)")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                        help="stop the container after S seconds (default: 3600)")
    parser.add_argument("--report", type=Path, metavar="FILE", help="also write the report as JSON to FILE")


def verify(args: argparse.Namespace) -> tuple[dict, bundle_zip.ZipSummary | None, str]:
    """The report document (emulate_main.job_verify's), the zip's summary and where it ran."""
    data = args.data or args.out / "data"
    try:
        summary = bundle_zip.summarize(args.zip)
    except PackError as exc:
        failed = {"name": "zip accepted", "passed": False, "summary": "the trainer would refuse this zip",
                  "failures": [str(exc)], "seconds": 0.0}
        return {"checks": [failed], "passed": False, "seconds": 0.0}, None, "host"
    splits = {s: data / f"{s}.jsonl" for s in SPLITS}
    if args.in_process:
        from harness.emulator.main import job_verify
        report = job_verify(args.zip, splits, workers=args.workers, max_mutated_golds=args.max_mutated_golds,
                            say=lambda line: print(line, flush=True))
        where = "in-process (no container)"
    else:
        report, where = _in_container(args, summary, splits)
    accepted = {"name": "zip accepted", "passed": True, "seconds": 0.0, "failures": [],
                "summary": f"{summary.entries} entries ({summary.modules} modules, {summary.databases} databases), "
                           f"{summary.archive_bytes:,} bytes zipped, {summary.unpacked_bytes:,} unpacked, within the caps"}
    report["checks"].insert(0, accepted)
    return report, summary, where


def _in_container(args: argparse.Namespace, summary: bundle_zip.ZipSummary, splits: dict[str, Path]) -> tuple[dict, str]:
    from harness.containers import trainer as docker_run
    inputs = {"bundle.zip": args.zip}
    inputs.update({f"data/{s}.jsonl": p for s, p in splits.items() if p.is_file()})
    job = ["verify", "--zip", f"{docker_run.MOUNT}/in/bundle.zip", "--data", f"{docker_run.MOUNT}/in/data",
           "--watch", "/tmp", "--workers", str(args.workers)]
    if args.max_mutated_golds is not None:
        job += ["--max-mutated-golds", str(args.max_mutated_golds)]
    try:
        report, run = docker_run.emulator_job(job, inputs, unpacked_bytes=summary.unpacked_bytes,
                                              base_image=args.base_image or docker_run.DEFAULT_BASE_IMAGE,
                                              timeout_s=args.timeout)
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
    print(f"==> verifying {args.zip} against {args.data or args.out / 'data'}", flush=True)
    report, summary, where = verify(args)
    print("\n".join(render(report, summary, where)))
    if args.report is not None:
        atomic_write_bytes(args.report, (json.dumps(report, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    if failed:
        raise VerificationFailed(f"{', '.join(failed)} failed ({time.monotonic() - started:.1f} s): fix them before "
                                 "pushing the bundle (a pre-push hook can be skipped with `git push --no-verify`)")
    return 0
