"""`bench`: the scorer's figures on real Spider dev pairs, each against a baseline measured in the same run.

Prints (docs/benchmark.md), one family of figures a module of this package:

1. reward calls (``calls``): calls a second, and a call's time against bare sqlite3 on the same query;
2. hardening (``hardening``): a runaway query, the comparison's worst case, the hostile suite's memory;
3. the step budget (``budget``): calibration on every real gold, counting overhead; and the cost
   model (``cost``): CPU per budget unit of hostile and generated queries against the real golds;
4. the neighbour databases (``neighbours``, with ``search``): what they cost and separate, the
   throughput with them, every gold against itself on them, and their precision on equivalent rewrites;
5. the labelled set (``labels``): precision and recall of the neighbours on published predictions
   judged by hand, with 95% intervals;
6. GRPO-shaped batches (``groups``): reward throughput with a group's duplicate completions scored
   once, and without.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import threading
from pathlib import Path

from harness.bench import budget, calls, cost, groups, hardening, labels, neighbours
from harness.common.errors import InputError


def check_spider(spider: str | Path | None) -> Path:
    """The Spider folder, or InputError saying what to give."""
    if not spider:
        raise InputError("give --spider DIR (or SPIDER_DATA=DIR): a Spider folder with dev.json and database/")
    if not (Path(spider) / "dev.json").is_file():
        raise InputError(f"no Spider data at {spider}: pass --spider FOLDER (with dev.json and database/)")
    return Path(spider)


def run(spider: Path, *, pairs: int, repeat: int, quick: bool, show: int) -> dict:
    """Every family's figures on ``pairs`` dev pairs of ``spider``, best of ``repeat`` timings."""
    work = Path(tempfile.mkdtemp(prefix="spider-bench-"))
    try:
        root = work / "bench_bundle"
        root.mkdir()
        rows = neighbours.stage_dev_bundle(spider, root, pairs)
        db = root / "data" / "databases" / f"{rows[0]['db_id']}.sqlite"
        dev_pairs = [(r["query"], root / "data" / "databases" / f"{r['db_id']}.sqlite") for r in rows]
        calibrated = budget.calibrate(budget.spider_golds(spider))
        return {
            "calls": calls.run(root, rows, repeat),
            "groups": groups.run(root, rows[:groups.ROWS], repeat),
            "runaway": hardening.runaway(db),
            "compare_9x9": hardening.compare_9x9(5.0),
            "hostile_memory": hardening.hostile_memory(db, rows[0]["query"]),
            "budget": budget.run(calibrated, dev_pairs, repeat),
            "cost": cost.run(calibrated[1], db, rows[0]["query"], max(1, repeat // 2)),
            "neighbours": neighbours.run(spider, root, rows, repeat, quick=quick, show=show),
            "labels": labels.run(spider, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_figures(f: dict) -> None:
    calls.print_figures(f["calls"])
    hardening.print_figures(f["runaway"], f["compare_9x9"], f["hostile_memory"])
    groups.print_figures(f["groups"])
    budget.print_figures(f["budget"])
    cost.print_figures(f["cost"])
    neighbours.print_figures(f["neighbours"])
    labels.print_figures(f["labels"], f["neighbours"])
    print(f"this process        max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; "
          f"{threading.active_count()} threads")
