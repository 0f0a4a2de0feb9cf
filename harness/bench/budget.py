"""The step budget's figures for `bench`: calibration on every real gold, and what counting costs.

1. calibration: every distinct gold of Spider's train and dev whose database is present, run as
   the bundle runs a gold (``bundle.verify.gold_result``): its VM steps, the budget a prediction
   of it gets, and the largest ratio of a gold's steps to its budget (below 1: no gold can fail
   its own budget; the limits table's defaults are chosen from these figures);
2. counting overhead: the same guarded query with the step meter reporting every
   ``progress_steps`` steps against a meter that never reports, on the dev pairs and on the
   heaviest golds (where the meter is called most). Target: under 5%.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bundle.contract.limits import DEFAULT_LIMITS, Limits
from bundle.sql import guard as sql_guard
from bundle.verify import gold_result


def spider_golds(spider: Path, names: tuple[str, ...] = ("train_spider.json", "dev.json")) -> list[tuple[str, str, Path]]:
    """(db_id, gold, database file) for every distinct gold of the files ``names`` (default train
    and dev) whose database is present, in the order they first appear."""
    seen: dict[tuple[str, str], Path] = {}
    for name in names:
        path = spider / name
        if not path.is_file():
            continue
        for row in json.loads(path.read_text(encoding="utf-8")):
            db = spider / "database" / row["db_id"] / f"{row['db_id']}.sqlite"
            if db.is_file():
                seen.setdefault((row["db_id"], row["query"]), db)
    return [(db_id, gold, db) for (db_id, gold), db in seen.items()]


def calibrate(golds: list[tuple[str, str, Path]], limits: Limits = DEFAULT_LIMITS) -> tuple[dict, list]:
    """Steps of every gold that runs, summed up: the largest steps-to-budget ratio and its gold.

    Also returns (steps, db_id, gold, database) per gold that ran.
    """
    steps: list[tuple[int, str, str, Path]] = []
    failed = 0
    started = time.monotonic()
    for db_id, gold, db in golds:
        try:
            steps.append((gold_result(gold, str(db), limits).steps, db_id, gold, db))
        except sql_guard.QueryFailed:
            failed += 1  # Spider's own broken golds (3 on train): prepare leaves them out
    sql_guard.forget_connections()
    counts = sorted(s[0] for s in steps)
    worst = max(steps, key=lambda s: s[0] / limits.budget_steps(s[0]))
    return {
        "golds": len(golds), "ran": len(steps), "failed": failed, "seconds": time.monotonic() - started,
        "median_steps": statistics.median(counts), "p99_steps": counts[int(0.99 * len(counts)) - 1],
        "p999_steps": counts[int(0.999 * len(counts)) - 1], "max_steps": counts[-1],
        "max_ratio": worst[0] / limits.budget_steps(worst[0]), "max_ratio_db": worst[1],
        "max_ratio_gold": worst[2][:100], "budget_of_max": limits.budget_steps(counts[-1]),
    }, steps


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The least wall time of ``repeat`` calls of ``fn``: the figure least disturbed by other work."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def counting_overhead(pairs: list[tuple[str, Path]], repeat: int, limits: Limits = DEFAULT_LIMITS) -> dict:
    """Total best time of the guarded queries with the step meter against one that never reports."""
    silent = limits.replace(progress_steps=2**31 - 1)  # no query here reaches it: the handler is never called

    def total(lim: Limits) -> float:
        return sum(best_of(lambda: sql_guard.run_query(str(db), sql, lim, budget_steps=limits.gold_max_steps,
                                                     wall_s=limits.wall_guard_s), repeat) for sql, db in pairs)

    total(limits)  # warm: connections open, pages cached
    counted, uncounted = total(limits), total(silent)
    sql_guard.forget_connections()
    return {"pairs": len(pairs), "counted_s": counted, "uncounted_s": uncounted,
            "overhead": counted / uncounted - 1.0}


def run(calibrated: tuple[dict, list], dev_pairs: list[tuple[str, Path]], repeat: int) -> dict:
    """The figures above, from ``calibrate``'s result (the cost model's figures use it too)."""
    calibration, steps = calibrated
    heaviest = [(gold, db) for _steps, _db_id, gold, db in sorted(steps, key=lambda s: -s[0])[:20]]
    return {"calibration": calibration,
            "overhead_dev": counting_overhead(dev_pairs, repeat),
            "overhead_heaviest": counting_overhead(heaviest, max(1, repeat // 2))}


def print_figures(f: dict) -> None:
    c, d, h = f["calibration"], f["overhead_dev"], f["overhead_heaviest"]
    print(f"step budget          {c['ran']} of {c['golds']} distinct train+dev golds ran ({c['failed']} of Spider's "
          f"own broken golds did not), {c['seconds']:.1f} s")
    print(f"  gold steps         median {c['median_steps']:,.0f}, p99 {c['p99_steps']:,}, p99.9 {c['p999_steps']:,}, "
          f"max {c['max_steps']:,} (its budget {c['budget_of_max']:,})")
    print(f"  largest steps/budget ratio {c['max_ratio']:.3f} ({c['max_ratio_db']}: {c['max_ratio_gold']}...): "
          "below 1, no gold fails its own budget")
    for name, o in (("dev pairs", d), ("20 heaviest golds", h)):
        print(f"  counting overhead  {name}: {o['overhead'] * 100:+.1f}% ({o['counted_s'] * 1000:.1f} ms counted vs "
              f"{o['uncounted_s'] * 1000:.1f} ms not, best of repeats; target < 5%)")
