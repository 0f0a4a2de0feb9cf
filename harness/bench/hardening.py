"""`bench`, hardening: a runaway query stopped by its budget, the comparison's worst case, the hostile suite's memory.

1. a runaway query: the steps at which the budget stopped it, the time that took, and CPU used
   after it returned; the same query under func_timeout on bare sqlite3 (the prior-art way);
2. comparison worst case, a 9 x 9 result of 0/1 values with columns permuted, against the official
   evaluator's brute force over column permutations (stopped after a few seconds);
3. memory high-water mark of a process running the whole hostile suite (target < 512 MB).
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from func_timeout import FunctionTimedOut, func_timeout

from bundle.contract.limits import DEFAULT_LIMITS
from bundle.sql.compare import bag_shape, compare, normalize_rows
from bundle.verify import verify
from harness.common.errors import InputError

ROOT = Path(__file__).resolve().parents[2]

RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
SORT_AFTER = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) "
              "SELECT i FROM n ORDER BY (i * 7919) % 1000003")


def runaway(db: Path) -> dict:
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


def compare_9x9(brute_seconds: float) -> dict:
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


def hostile_memory(db: Path, gold: str) -> dict:
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



def print_figures(r: dict, k: dict, m: dict) -> None:
    """The runaway queries ``r``, the 9 x 9 comparison ``k`` and the hostile suite's memory ``m``."""
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
