"""`bench`: the scorer's figures on real Spider dev pairs, each against a baseline measured in the same run.

Prints (README, "Benchmark"):

1. reward calls per second, and the per-call time as a ratio to bare sqlite3 running the same
   predicted query in the same process (gold cached): against an already open connection (warm,
   with Python's statement cache, and preparing the statement each time as the scorer must for
   a deterministic step count) and against connect + execute + close (cold, what most
   evaluators do). Target: median warm ratio <= 1.3. Where the time goes: the median of each
   stage of a call (reading the arguments and the row, extraction, the guarded query, comparison);
2. a runaway query: the steps at which the budget stopped it, the time that took, and CPU used
   after it returned; the same query under func_timeout on bare sqlite3 (the prior-art way);
3. comparison worst case, a 9 x 9 result of 0/1 values with columns permuted, against the official
   evaluator's brute force over column permutations (stopped after a few seconds);
4. memory high-water mark of a process running the whole hostile suite (target < 512 MB);
5. the step budget (``harness.commands.bench_budget``): calibration on every real gold, counting overhead;
   and the cost model (``harness.commands.bench_cost``): CPU per budget unit of hostile and
   generated queries against the real golds;
6. the neighbour databases (``harness.commands.bench_neighbours``): what they cost and separate, the
   throughput with them, every gold against itself on them, and their precision on equivalent rewrites;
7. the labelled set (``harness.commands.bench_labels``): precision and recall of the neighbours on
   published predictions judged by hand, with 95% intervals;
8. GRPO-shaped batches (``harness.commands.bench_groups``): reward throughput with a group's
   duplicate completions scored once, and without.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from func_timeout import FunctionTimedOut, func_timeout

from bundle.scoring_limits import DEFAULT_LIMITS
from bundle.sql_compare import bag_shape, compare, normalize_rows
from bundle.verify import verify
from harness.commands import bench_budget, bench_cost, bench_groups, bench_labels, bench_neighbours
from harness.commands.bench_budget import best_of
from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spider", default=os.environ.get("SPIDER_DATA"), metavar="DIR",
                        help="Spider folder with dev.json and database/ (default: $SPIDER_DATA)")
    parser.add_argument("--pairs", type=int, default=400, help="dev pairs timed (default 400)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per pair; the minimum counts (default 5)")
    parser.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    parser.add_argument("--quick", action="store_true",
                        help="leave out the slowest figures: every gold on its neighbours, and the precision corpus")
    parser.add_argument("--show-separated", type=int, default=30, metavar="N",
                        help="mutated golds separated by the neighbours to print, drawn at random (default 30)")


def bench_calls(root: Path, rows: list[dict], repeat: int) -> dict:
    sys.path.insert(0, str(root.parent))
    package = root.name
    reward = importlib.import_module(f"{package}.reward")
    entry = importlib.import_module(f"{package}.scoring_entry")
    index = importlib.import_module(f"{package}.bundle_index")
    extract = importlib.import_module(f"{package}.sql_extract")
    guard = importlib.import_module(f"{package}.sql_guard")
    compare = importlib.import_module(f"{package}.sql_compare")
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


RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
SORT_AFTER = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) "
              "SELECT i FROM n ORDER BY (i * 7919) % 1000003")


def bench_runaway(db: Path) -> dict:
    out = {}
    for name, sql in (("recursive", RUNAWAY), ("sort_after_accumulation", SORT_AFTER)):
        started = time.monotonic()
        verdict = verify(sql, "SELECT 1", str(db), limits=DEFAULT_LIMITS, is_sql=True)
        seconds = time.monotonic() - started
        cpu = time.process_time()
        time.sleep(0.5)
        out[name] = {"outcome": verdict.outcome, "steps": verdict.steps, "budget_steps": verdict.budget_steps,
                     "seconds": seconds, "cpu_ms_after_return": (time.process_time() - cpu) * 1000}
    out["func_timeout_bare"] = _func_timeout_baseline(db)
    return out


def _func_timeout_baseline(db: Path) -> dict:
    """Prior art: func_timeout around bare sqlite3. The caller gets control back; the query keeps a core."""
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True, check_same_thread=False)

    def runaway() -> None:
        try:
            conn.execute(RUNAWAY).fetchall()
        except sqlite3.OperationalError:
            pass  # interrupted below, once measured

    started = time.monotonic()
    try:
        func_timeout(0.5, runaway)
    except FunctionTimedOut:
        pass
    returned = time.monotonic() - started
    cpu = time.process_time()
    time.sleep(1.0)
    burned = time.process_time() - cpu
    conn.interrupt()  # stop it now that it has been measured
    return {"ms_after_deadline": (returned - 0.5) * 1000, "cpu_ms_in_next_second": burned * 1000}


def bench_compare(brute_seconds: float) -> dict:
    rng = random.Random(7)
    rows = [tuple(rng.randint(0, 1) for _ in range(9)) for _ in range(9)]
    perm = list(range(9))
    rng.shuffle(perm)
    pred = [tuple(r[perm[k]] for k in range(9)) for r in rows]
    rng.shuffle(pred)
    started = time.perf_counter()
    result = compare(bag_shape(rows), normalize_rows(pred), 9)
    ours = time.perf_counter() - started
    tried, started = 0, time.perf_counter()
    target = sorted(pred)
    for p in itertools.permutations(range(9)):  # the official evaluator's way
        tried += 1
        if sorted(tuple(r[j] for j in p) for r in rows) == target or time.perf_counter() - started > brute_seconds:
            break
    brute = time.perf_counter() - started
    return {"match": result.match, "ours_ms": ours * 1000, "brute_force_permutations_tried": tried,
            "brute_force_seconds": brute, "brute_force_projected_seconds_for_all": brute / tried * 362880}


def bench_hostile_memory(db: Path, gold: str) -> dict:
    code = ("import json, resource, sys, tempfile\n"
            "from harness.emulator import hostile\nfrom bundle.verify import verify\n"
            "db, gold = sys.argv[1], sys.argv[2]\nscratch = tempfile.mkdtemp()\n"
            "cases = hostile.load_cases(hostile.first_table(db), scratch)\n"
            "res = hostile.run_cases(cases, lambda c: (lambda v: (v.outcome, v.score, v.detail))("
            "verify(c.text, gold, db, is_sql=c.is_sql)))\n"
            "print(json.dumps({'cases': len(res), 'passed': sum(r.passed for r in res),"
            " 'max_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(db), gold], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise InputError(f"hostile-suite memory run failed: {done.stderr[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    if not args.spider:
        raise InputError("give --spider DIR (or SPIDER_DATA=DIR): a Spider folder with dev.json and database/")
    spider = Path(args.spider)
    if not (spider / "dev.json").is_file():
        raise InputError(f"no Spider data at {spider}: pass --spider FOLDER (with dev.json and database/)")
    work = Path(tempfile.mkdtemp(prefix="spider-bench-"))
    try:
        root = work / "bench_bundle"
        root.mkdir()
        rows = bench_neighbours.stage_dev_bundle(spider, root, args.pairs)
        db = root / "data" / "databases" / f"{rows[0]['db_id']}.sqlite"
        dev_pairs = [(r["query"], root / "data" / "databases" / f"{r['db_id']}.sqlite") for r in rows]
        calibrated = bench_budget.calibrate(bench_budget.spider_golds(spider))
        figures = {
            "calls": bench_calls(root, rows, args.repeat),
            "groups": bench_groups.run(root, rows[:bench_groups.ROWS], args.repeat),
            "runaway": bench_runaway(db),
            "compare_9x9": bench_compare(5.0),
            "hostile_memory": bench_hostile_memory(db, rows[0]["query"]),
            "budget": bench_budget.run(calibrated, dev_pairs, args.repeat),
            "cost": bench_cost.run(calibrated[1], db, rows[0]["query"], max(1, args.repeat // 2)),
            "neighbours": bench_neighbours.run(spider, root, rows, args.repeat, quick=args.quick,
                                               show=args.show_separated),
            "labels": bench_labels.run(spider, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_figures(figures)
    if args.json_out:
        atomic_write_bytes(args.json_out, json.dumps(figures, indent=1).encode())
    return 0


def print_figures(f: dict) -> None:
    c, r, k, m = f["calls"], f["runaway"], f["compare_9x9"], f["hostile_memory"]
    print(f"reward calls        {c['pairs']} dev pairs, {c['calls_per_second']:.0f} calls/s, median {c['median_call_ms']:.3f} ms")
    print(f"  vs bare sqlite3   median ratio {c['median_ratio_cold']:.2f} to connect+execute+fetch+close")
    print(f"  vs open conn.     median ratio {c['median_ratio_warm']:.2f} (target 1.3), p90 {c['p90_ratio_warm']:.2f}: "
          f"a fixed {c['median_overhead_us']:.0f} us per call on queries of a few us; median ratio "
          f"{c['median_ratio_prepared']:.2f} to an open connection preparing each statement (as a step count needs)")
    st = c["median_stage_us"]
    print(f"  where it goes     median us: arguments+row {st['args']:.1f}, extraction {st['extract']:.1f}, guarded query "
          f"{st['query']:.1f}, comparison {st['compare']:.1f}, the rest (verdict, telemetry) {c['median_rest_us']:.1f}")
    for name in ("recursive", "sort_after_accumulation"):
        x = r[name]
        print(f"runaway {name:<24} {x['outcome']} at {x['steps']:,} of {x['budget_steps']:,} steps, "
              f"after {x['seconds']:.2f} s here; {x['cpu_ms_after_return']:.1f} ms CPU after return (target 0)")
    b = r["func_timeout_bare"]
    print(f"  func_timeout+bare sqlite3: returned {b['ms_after_deadline']:.1f} ms after, but the query burned "
          f"{b['cpu_ms_in_next_second']:.0f} ms CPU in the next second")
    print(f"compare 9x9 0/1     {k['ours_ms']:.2f} ms (target < 50, match={k['match']}); brute force tried "
          f"{k['brute_force_permutations_tried']} permutations in {k['brute_force_seconds']:.1f} s, "
          f"projected {k['brute_force_projected_seconds_for_all']:.0f} s for all 362,880")
    print(f"hostile suite       {m['passed']}/{m['cases']} cases as expected, max RSS {m['max_rss_mb']:.0f} MB (target < 512)")
    bench_groups.print_figures(f["groups"])
    bench_budget.print_figures(f["budget"])
    bench_cost.print_figures(f["cost"])
    bench_neighbours.print_figures(f["neighbours"])
    bench_labels.print_figures(f["labels"], f["neighbours"])
    print(f"this process        max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; "
          f"{threading.active_count()} threads")
