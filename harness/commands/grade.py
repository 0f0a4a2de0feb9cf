"""`grade`: score a file of model completions on the eval split with the bundle zip, on this machine.

    python3 -m harness grade --stage sft [--data out] [--zip ZIP] [--completions FILE] [--output FILE] [--workers N]
                             [--search-cache DIR|off] [--ray auto|HOST:PORT [--ray-workers N] [--ray-shard-rows N]]

Reads ``DATA/data/eval.jsonl`` and the stage's completions (default ``DATA/completions/STAGE.jsonl``;
harness.common.completions says which line shapes are read, one completion per row, or the same
number n for every row: n samples, ``{"row_id": ..., "completions": [...]}``), loads the zip
as the trainer does and runs the one grading path (harness.emulator.grader_job, the same as
`emulate grader`): its ``grader`` once per row with the envelope. Writes per-row results
(harness.common.results) to ``DATA/results/STAGE.jsonl``; with n samples a row, each row's first
there and all n in ``STAGE.samples.jsonl`` (`report` gives pass@k and majority@k from it:
harness.report.sampling). Each row carries, beside the bundle's verdict, the verdicts of Spider's
official execution match and of BIRD's rule (``bundle/sql/leaderboard.py``). An eval split that is
not the one the bundle was built with is refused; a row the bundle cannot score is kept with score
null and its error, never a 0. The rows are graded on every core this process may use (``--workers
N``; ``--workers 1``: in this process), each worker process loading the bundle once
(harness.emulator.grader_pool), with the same results in the same order as one process. With
``--ray`` the same path runs sharded over Ray workers (harness.raygrade.backend), with the same
results in the same order.

The counterexample search's databases are kept in ``DATA/cache/search/<the bundle index's SHA-256,
16 digits>`` (``--search-cache DIR`` for another base; ``off``: nothing kept), by the bundle's own
key (bundle/search/disk.py): ``prepare`` drew the eval golds' sets there, and a later stage or
checkpoint reads what an earlier one added, with the same verdicts. Ray workers keep nothing
unless their nodes' environment names a folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands import options
from harness.common import bundle_zip, search_cache
from harness.common.files import check_writable_file, sha256_file
from harness.common.layout import GIVEN_COMPLETIONS, Prepared, require
from harness.common.results import RowResult, samples_path, write_results, write_results_meta
from harness.emulator.main import job_grader
from harness.raygrade import backend
from harness.report import sampling


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", required=True, help="the stage graded (e.g. base, sft, rl): names the files")
    options.add_data(parser)
    options.add_zip(parser)
    parser.add_argument("--completions", type=Path, metavar="FILE",
                        help="one model completion per eval row, or n each (sampled generation: every row's first "
                             "is graded into the results, all n beside them; default: DATA/completions/STAGE.jsonl)")
    options.add_output(parser, "the per-row results file to write (default: DATA/results/STAGE.jsonl)")
    options.add_grade_workers(parser)
    parser.add_argument("--search-cache", metavar="DIR|off",
                        help="where the counterexample search's databases are read and kept, a subfolder per bundle "
                             "(default: DATA/cache/search, where prepare drew the eval golds' sets; off: nothing "
                             "read or kept); the verdicts are the same either way")
    options.add_ray(parser)


def run(args: argparse.Namespace) -> int:
    prepared = Prepared(args.data)
    require(prepared.split("eval"), "the eval split")
    zip_path = require(options.zip_of(args), "the bundle zip")
    completions = require(args.completions or prepared.completions(args.stage), f"the {args.stage} completions",
                          GIVEN_COMPLETIONS if args.completions else None)
    # Everything that can be refused is refused before the work: a damaged zip, an unwritable output.
    bundle_zip.summarize(zip_path)
    target = check_writable_file(args.output or prepared.results(args.stage), f"the {args.stage} results")
    ray = options.ray_options_of(args)
    workers = options.grade_workers_of(args)
    index = search_cache.zip_index_sha256(zip_path)
    folder = None if args.search_cache == search_cache.OFF or index is None else \
        search_cache.folder_for(Path(args.search_cache or prepared.search_cache()), index)
    before = search_cache.size(folder)[0] if folder is not None else 0
    if ray is None:
        with search_cache.keeping(folder):
            document = job_grader(zip_path, prepared, completions, workers=workers, samples=True)
    else:
        document = backend.job_grader(zip_path, prepared, completions, options=ray, progress_stream=sys.stderr)
        print(options.ray_line(document["ray"]))
    graded = [RowResult(**r) for r in document["results"]]
    n = document.get("samples", 1)
    results = [r for r in graded if r.sample == 0]
    samples_file = samples_path(target)
    if n > 1:
        write_results(samples_file, graded)
        print(f"{n} completions a row: each row's first graded into {target}, all {len(graded)} into {samples_file}")
    elif samples_file.exists():
        samples_file.unlink()  # the samples of an earlier grading of this stage would stand beside other results
    write_results(target, results)
    write_results_meta(target, sha256_file(zip_path), sha256_file(prepared.split("eval")), len(results))
    summary = document["summary"]
    on = f" on {document['workers']} worker processes" if document.get("workers", 1) > 1 else ""
    print(f"graded {summary['rows']} rows{on} into {target}: "
          + ", ".join(f"{n} {o}" for o, n in sorted(summary["outcomes"].items())))
    scored = [r for r in results if r.scored]
    if scored:
        correct = sum(1 for r in scored if r.score == 1)
        print(f"execution accuracy {correct / len(scored):.3f} ({correct}/{len(scored)} scored rows)"
              + sampling.comparable_line(scored))
    if n > 1:
        print(sampling.summary_line(sampling.figures(graded)))
    if ray is None and folder is not None:
        kept, size = search_cache.size(folder)
        print(f"search databases kept for the next stage: {kept:,} attempts ({size / 2**20:,.1f} MiB; "
              f"{kept - before:,} added by this one) in {folder}")
    if summary["unscored"]:
        print(f"warning: {summary['unscored']} row(s) unscored (gold or infrastructure errors, see their detail); "
              "fix the bundle or the split and grade again", file=sys.stderr)
    return 0
