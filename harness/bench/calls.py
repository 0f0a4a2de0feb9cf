"""`bench`, reward calls: calls a second, and a call's time against bare sqlite3 running the same query.

The per-call time as a ratio to bare sqlite3 running the predicted query in the same process (gold
cached): against an already open connection (warm, with Python's statement cache, and preparing
the statement each time as the scorer must for a deterministic step count) and against connect +
execute + close (cold, what most evaluators do). Target: median warm ratio <= 1.3. Where the time
goes: the median of each stage of a call (reading the arguments and the row, extraction, the
guarded query, comparison).
"""

from __future__ import annotations

import importlib
import sqlite3
import statistics
import sys
from pathlib import Path

from harness.bench.budget import best_of


def run(root: Path, rows: list[dict], repeat: int) -> dict:
    """The figures of reward calls on ``rows`` of the bundle staged at ``root``, best of ``repeat`` timings each."""
    sys.path.insert(0, str(root.parent))
    package = root.name
    reward = importlib.import_module(f"{package}.reward")
    entry = importlib.import_module(f"{package}.scoring.entry")
    index = importlib.import_module(f"{package}.scoring.index")
    extract = importlib.import_module(f"{package}.sql.extract")
    guard = importlib.import_module(f"{package}.sql.guard")
    compare = importlib.import_module(f"{package}.sql.compare")
    limits, data = entry.current_limits(), index.load(str(root))
    db_dir = root / "data" / "databases"
    warm: dict[str, sqlite3.Connection] = {}
    prepared: dict[str, sqlite3.Connection] = {}
    series: dict[str, list[float]] = {k: [] for k in ("ours", "warm", "prepared", "cold", "args", "extract",
                                                      "query", "compare")}
    for row in rows:
        db = db_dir / f"{row['db_id']}.sqlite"
        uri = f"file:{db}?mode=ro&immutable=1"
        conn = warm.setdefault(row["db_id"], sqlite3.connect(uri, uri=True))
        fresh = prepared.setdefault(row["db_id"], sqlite3.connect(uri, uri=True, cached_statements=0))
        sql, extra = row["query"], {"db_id": row["db_id"]}
        kwargs = {"solution_str": sql, "ground_truth": sql, "extra_info": extra}
        reward.compute_score(**kwargs)  # gold cached, connection open

        def cold() -> None:
            c = sqlite3.connect(uri, uri=True)
            c.execute(sql).fetchall()
            c.close()

        resolved = data.resolve(sql, row["db_id"])
        gold = data.gold_result(resolved, limits)
        raw = guard.run_query(resolved.path, sql, limits, budget_steps=limits.budget_floor_steps,
                              wall_s=limits.wall_guard_s)
        series["ours"].append(best_of(lambda: reward.compute_score(**kwargs), repeat))
        series["warm"].append(best_of(lambda: conn.execute(sql).fetchall(), repeat))
        series["prepared"].append(best_of(lambda: fresh.execute(sql).fetchall(), repeat))
        series["cold"].append(best_of(cold, repeat))
        series["args"].append(best_of(lambda: data.gold_result(data.resolve(entry.read_call(kwargs).gold, row["db_id"]),
                                                             limits), repeat))
        series["extract"].append(best_of(lambda: extract.extract(sql), repeat))
        series["query"].append(best_of(lambda: guard.run_query(resolved.path, sql, limits,
                                                             budget_steps=limits.budget_floor_steps,
                                                             wall_s=limits.wall_guard_s), repeat))
        series["compare"].append(best_of(lambda: compare.compare(gold.shape, compare.normalize_rows(raw.rows),
                                                               len(raw.columns)), repeat))
    ours = series["ours"]
    ratio = {k: [o / b for o, b in zip(ours, series[k])] for k in ("warm", "prepared", "cold")}
    stages = {k: statistics.median(series[k]) * 1e6 for k in ("args", "extract", "query", "compare")}
    return {
        "pairs": len(rows),
        "calls_per_second": len(rows) / sum(ours),
        "median_call_ms": statistics.median(ours) * 1000,
        "median_ratio_warm": statistics.median(ratio["warm"]),
        "p90_ratio_warm": sorted(ratio["warm"])[int(0.9 * len(ratio["warm"]))],
        "median_ratio_prepared": statistics.median(ratio["prepared"]),
        "median_ratio_cold": statistics.median(ratio["cold"]),
        "median_overhead_us": statistics.median(o - b for o, b in zip(ours, series["warm"])) * 1e6,
        "median_stage_us": stages,
        "median_rest_us": statistics.median(ours) * 1e6 - sum(stages.values()),
    }



def print_figures(c: dict) -> None:
    print(f"reward calls        {c['pairs']} dev pairs, {c['calls_per_second']:.0f} calls/s, median {c['median_call_ms']:.3f} ms")
    print(f"  vs bare sqlite3   median ratio {c['median_ratio_cold']:.2f} to connect+execute+fetch+close")
    print(f"  vs open conn.     median ratio {c['median_ratio_warm']:.2f} (target 1.3), p90 {c['p90_ratio_warm']:.2f}: "
          f"a fixed {c['median_overhead_us']:.0f} us per call on queries of a few us; median ratio "
          f"{c['median_ratio_prepared']:.2f} to an open connection preparing each statement (as a step count needs)")
    st = c["median_stage_us"]
    print(f"  where it goes     median us: arguments+row {st['args']:.1f}, extraction {st['extract']:.1f}, guarded query "
          f"{st['query']:.1f}, comparison {st['compare']:.1f}, the rest (verdict, telemetry) {c['median_rest_us']:.1f}")
