"""`report`: compare per-row results of two or more stages (e.g. base, SFT, GRPO).

    python3 -m harness report base sft rl --baseline sft [--data out] --markdown out/report.md --html out/report.html
    python3 -m harness report base=FILE sft=FILE
    python3 -m harness report base sft rl --baseline sft --reward-log rl=out/trainer_state.json

Each input is a stage (its results in ``DATA/results/STAGE.jsonl``, written by `grade`), a
``label=path`` or a bare path. harness.report.compare checks they cover the same eval rows and
builds the report (with the edit table of each stage against the baseline, and the trend of each
reward log given); harness.report.render prints it and writes Markdown and a self-contained HTML
page with the charts.
"""

from __future__ import annotations

import argparse

from harness.commands import options
from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes
from harness.common.layout import Prepared
from harness.report import compare, render, stats
from harness.report.compare import parse_spec
from harness.report.reward_log import assign_reward_logs, read_reward_log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="*", metavar="STAGE|[LABEL=]PATH",
                        help="stages (their results in DATA/results/STAGE.jsonl) or per-row results files from "
                             "`grade`, in stage order (a file's label defaults to its stem)")
    options.add_data(parser)
    parser.add_argument("--name", action="append", default=[], metavar="LABEL=PATH",
                        help="a labelled results file (repeatable; after the positional ones)")
    parser.add_argument("--baseline", metavar="LABEL", help="the stage others are compared with (default: the first)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict (default 0.05)")
    parser.add_argument("--verdict-test", choices=stats.TESTS, default="chi2",
                        help="p-value the verdict reads: McNemar chi-squared with continuity correction "
                             "(default, as the reference) or the exact binomial test")
    parser.add_argument("--markdown", metavar="PATH", help="also write the report as Markdown")
    parser.add_argument("--html", metavar="PATH", help="also write a self-contained HTML page with the charts")
    parser.add_argument("--show-changed", type=int, default=5, metavar="N",
                        help="changed rows printed per list in the terminal (files get them all; default 5)")
    parser.add_argument("--reward-log", action="append", default=[], metavar="[STAGE=]FILE",
                        help="the training reward log of a stage's run, shown as its trend against its spread beside "
                             "the held-out delta: TRL's trainer_state.json, verl's file (JSONL) or console logger "
                             "output, or a CSV/JSONL of step and reward (repeatable, or comma-separated; a bare FILE "
                             "belongs to the one stage besides the baseline)")
    parser.add_argument("--reward-key", metavar="KEY",
                        help="the metric the reward logs are read for (default: reward for TRL and plain logs, "
                             "critic/score/mean then critic/rewards/mean for verl)")


def run(args: argparse.Namespace) -> int:
    data = Prepared(args.data)
    specs = [parse_spec(t, data) for t in args.results] + [parse_spec(t, data) for t in args.name]
    if args.show_changed < 0:
        raise InputError("--show-changed must be 0 or more")
    stages = compare.load_stages(specs)
    compare.check_generation(stages, data)
    labels = [s.label for s in stages]
    logs = assign_reward_logs(args.reward_log, labels, args.baseline or labels[0])
    curves = [(label, read_reward_log(path, args.reward_key)) for label, path in logs]
    report = compare.build_report(stages, args.baseline, alpha=args.alpha, test=args.verdict_test, reward_logs=curves)
    print(render.terminal(report, show_changed=args.show_changed))
    if args.markdown:
        atomic_write_bytes(args.markdown, render.markdown(report).encode("utf-8"))
        print(f"wrote {args.markdown}")
    if args.html:
        atomic_write_bytes(args.html, render.html_page(report).encode("utf-8"))
        print(f"wrote {args.html}")
    return 0
