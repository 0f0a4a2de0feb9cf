"""`bench`, the leaderboards' rule beside their code: the bundle's official column against test-suite-sql-eval.

Issue 41's measure: ``grade`` writes, beside the bundle's own verdict, the verdict of Spider's
official execution match computed by the bundle (``bundle/sql/leaderboard.py``). Here that column
is held against the official code itself (``harness.bench.evaluator``, a checkout the user gives)
on the dev predictions of published systems (one file a system, one prediction a line in dev
order, as ``bench-overturns`` reads them), pair for pair, on the first ``--pairs`` dev rows whose
database is present. The pairs where they disagree are listed (the first ``SHOWN``) to be read;
the target is agreement on at least 99.9% of the pairs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql import guard as sql_guard
from bundle.sql import leaderboard
from bundle.sql import verdict as verdict_mod
from harness.bench.evaluator import Evaluator
from harness.bench.overturns import read_predictions

TARGET = 0.999
SHOWN = 12


def run(spider: Path, files: Sequence[Path], evaluator: Evaluator | None, pairs: int,
        say: Callable[[str], None] = lambda line: None) -> dict:
    """Agreement of the bundle's official column with the official code on ``pairs`` dev rows' answers."""
    if not files:
        return {"skipped": "no predictions given: --published FILE... (one system's dev predictions a file)"}
    if evaluator is None:
        return {"skipped": "the official evaluator is not given: --evaluator DIR, a checkout of taoyds/test-suite-sql-eval"}
    dev = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    systems = {Path(f).stem: read_predictions(Path(f), dev) for f in files}
    present = [i for i, r in enumerate(dev) if _database(spider, r["db_id"]).is_file()][:pairs]
    limits = DEFAULT_LIMITS
    agree = total = bundle_right = official_right = unscored = 0
    differ: list[dict] = []
    seconds = {"bundle": 0.0, "official": 0.0}
    for number, index in enumerate(present, start=1):
        row = dev[index]
        database = str(_database(spider, row["db_id"]))
        try:
            steps = verdict_mod.gold_result(row["query"], database, limits).steps
        except sql_guard.QueryFailed:
            unscored += len(systems)
            continue
        for name, answers in systems.items():
            answer = answers[index]
            t0 = time.perf_counter()
            ours = leaderboard.official_verdict(answer, row["query"], database, limits, gold_steps=steps)
            t1 = time.perf_counter()
            theirs = evaluator(Path(database), answer, row["query"])
            seconds["bundle"] += t1 - t0
            seconds["official"] += time.perf_counter() - t1
            total += 1
            bundle_right += ours == 1.0
            official_right += theirs == 1
            if ours == float(theirs):
                agree += 1
            else:
                differ.append({"system": name, "dev_row": index, "db_id": row["db_id"], "bundle": ours,
                               "official": theirs, "answer": answer, "gold": row["query"]})
        if number % 100 == 0:
            say(f"  {number}/{len(present)} dev rows, {total:,} pairs, {total - agree} apart")
    return {"systems": list(systems), "rows": len(present), "pairs": total, "agree": agree,
            "share": agree / total if total else None, "bundle_right": bundle_right, "official_right": official_right,
            "unscored": unscored, "differ": differ, "seconds": seconds, "evaluator_commit": evaluator.commit}


def _database(spider: Path, db_id: str) -> Path:
    return spider / "database" / db_id / f"{db_id}.sqlite"


def print_figures(f: dict) -> None:
    if "skipped" in f:
        print(f"leaderboards' rule: not measured: {f['skipped']}")
        return
    share = f["share"]
    print(f"leaderboards' rule: the bundle's official column beside test-suite-sql-eval ({f['evaluator_commit']}) on "
          f"{len(f['systems'])} systems x {f['rows']} dev rows = {f['pairs']:,} pairs: {f['agree']:,} agree "
          f"({'-' if share is None else f'{share:.4%}'}; target {TARGET:.1%}: "
          f"{'met' if share is not None and share >= TARGET else 'NOT met'}); right by the bundle's column "
          f"{f['bundle_right']:,}, by the official code {f['official_right']:,}"
          + (f"; {f['unscored']} pairs of golds that fail here left out" if f["unscored"] else ""))
    s = f["seconds"]
    if f["pairs"]:
        print(f"  pairs a second: bundle's column {f['pairs'] / max(s['bundle'], 1e-9):,.0f}, "
              f"official code {f['pairs'] / max(s['official'], 1e-9):,.0f}")
    for d in f["differ"][:SHOWN]:
        print(f"  apart: {d['system']} dev row {d['dev_row']} ({d['db_id']}): bundle {d['bundle']}, official "
              f"{d['official']}: {' '.join(d['answer'].split())[:160]}")
    if len(f["differ"]) > SHOWN:
        print(f"  ... and {len(f['differ']) - SHOWN} more")
