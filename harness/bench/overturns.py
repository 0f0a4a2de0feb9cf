"""`bench-overturns`: per dev database, the matches of published predictions that the neighbours and the search overturn.

(Its flags: harness/commands/bench_overturns.py.)

Each file given holds one system's predictions for Spider's dev set, one a line in dev order
(line N is dev row N-1), optionally followed by a tab and the row's db_id (as TestSuiteEval's
``predictions/dev_*.txt`` write it; the db_id is then checked against the row; a tab followed by
anything but a dev db_id is part of the SQL). The command
stages a bundle over every dev row whose database is present, with the neighbours ``prepare``
builds now (as ``harness.bench.labels.run`` does), scores every (row, prediction) as the grader does (the
neighbours, then the counterexample search) and prints per database: the matches on the original,
and how many of them a neighbour overturns and how many the search overturns, as a Markdown table
(docs/neighbours.md, "Cost and figures", holds one such table).

    python3 -m harness bench-overturns --spider DIR dail.txt c3.txt graphix.txt

A run over six systems' 972 rows each takes about ten minutes on a 2-core machine: most of it is
the search paying its whole budget for each right answer whose text differs from its gold's.
"""

from __future__ import annotations

import collections
import json
import shutil
import tempfile
import time
from pathlib import Path

from bundle.scoring import entry as scoring_entry
from harness.bench import neighbours as bench_neighbours
from harness.common.errors import InputError

COLUMNS = ("rows", "original", "neighbour", "search")


def read_predictions(path: Path, rows: list[dict]) -> list[str]:
    """The predictions of ``path``, one per dev row; InputError naming the file and line otherwise."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read predictions {path}: {exc}; give a text file, one prediction a line") from None
    if len(lines) < len(rows):
        raise InputError(f"predictions {path}: {len(lines)} lines for Spider's {len(rows)} dev rows; give one "
                         "prediction a line for every dev row, in dev order")
    databases = {r["db_id"] for r in rows}
    out = []
    for number, (line, row) in enumerate(zip(lines, rows), start=1):
        sql, tab, tail = line.rpartition("\t")  # a tab inside the SQL (C3's multi-line queries) stays
        if not tab or tail.strip() not in databases:
            out.append(line)
            continue
        if tail.strip() != row["db_id"]:
            raise InputError(f"predictions {path}, line {number}: db_id {tail.strip()!r}, but dev row {number - 1} "
                             f"is on {row['db_id']!r}; the file must follow dev.json's order")
        out.append(sql)
    return out


def tally(root: Path, rows: list[dict], systems: dict[str, list[str]]) -> tuple[dict, list[dict]]:
    """db_id -> counts (COLUMNS), and every overturn, scoring each system's prediction of each row
    (the dev row's index in ``rows``' ``dev_index``) with the staged bundle at ``root`` as the grader does."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    overturns = []
    for system, predictions in systems.items():
        for row in rows:
            call = scoring_entry.read_call({"solution_str": predictions[row["dev_index"]], "ground_truth": row["query"],
                                            "extra_info": {"db_id": row["db_id"]}})
            verdict = scoring_entry.score_call(call, root=str(root), caller="grader")
            c = counts[row["db_id"]]
            c["rows"] += 1
            if verdict.original_score != 1.0:
                continue
            c["original"] += 1
            if verdict.score != 1.0:
                by = "search" if verdict.decided_on.startswith("search") else "neighbour"
                c[by] += 1
                overturns.append({"system": system, "dev_index": row["dev_index"], "db_id": row["db_id"], "by": by,
                                  "decided_on": verdict.decided_on, "gold": row["query"],
                                  "prediction": predictions[row["dev_index"]]})
    return {db: {k: c[k] for k in COLUMNS} for db, c in sorted(counts.items())}, overturns


def markdown(counts: dict[str, dict]) -> str:
    """The per-database table (docs/neighbours.md).

    >>> print(markdown({"pets_1": {"rows": 84, "original": 70, "neighbour": 3, "search": 1}}))
    | database | matches on the original | overturned by a neighbour | by the search |
    |---|---|---|---|
    | pets_1 | 70 | 3 | 1 |
    | all | 70 | 3 | 1 |
    """
    lines = ["| database | matches on the original | overturned by a neighbour | by the search |", "|---|---|---|---|"]
    total: collections.Counter = collections.Counter()
    for db_id, c in counts.items():
        lines.append(f"| {db_id} | {c['original']:,} | {c['neighbour']} | {c['search']} |")
        total.update(c)
    lines.append(f"| all | {total['original']:,} | {total['neighbour']} | {total['search']} |")
    return "\n".join(lines)


def run(spider: Path, prediction_files: list[Path]) -> dict:
    """The counts and overturns of each system's dev predictions (one file a system), with a bundle over
    every dev row whose database is present, staged with its neighbours now."""
    dev = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    systems = {Path(p).stem: read_predictions(Path(p), dev) for p in prediction_files}
    present = [dict(r, dev_index=i) for i, r in enumerate(dev)
               if (spider / "database" / r["db_id"] / f"{r['db_id']}.sqlite").is_file()]
    work = Path(tempfile.mkdtemp(prefix="spider-bench-overturns-"))
    try:
        started = time.monotonic()
        plain = work / "plain"
        plain.mkdir()
        bench_neighbours.stage_dev_bundle(spider, plain)
        staged = bench_neighbours.with_neighbours(plain, work / "staged", work / "work")
        counts, overturns = tally(staged, present, systems)
        seconds = time.monotonic() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"systems": list(systems), "counts": counts, "overturns": overturns, "seconds": seconds}


def print_figures(f: dict) -> None:
    counts, systems = f["counts"], f["systems"]
    total: collections.Counter = collections.Counter()
    for c in counts.values():
        total.update(c)
    print(f"overturns of {len(systems)} systems' dev predictions ({', '.join(systems)}), {total['rows']:,} rows on "
          f"{len(counts)} databases, {total['original']:,} matches on the original: {total['neighbour']} overturned by "
          f"a neighbour, {total['search']} by the search ({(total['neighbour'] + total['search']) / max(total['original'], 1):.1%}); "
          f"{f['seconds']:.0f} s")
    print(markdown(counts))
