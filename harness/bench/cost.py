"""The cost model's figures for `bench`: CPU time per budget unit, hostile and generated queries
against the real Spider golds (docs/bundle.md, "Cost model").

A budget unit is one SQLite VM step, or one step's worth of a charged function's work. What the
budget promises is that a query within it costs at most a small multiple of what real golds cost
per unit, whatever it hides inside one step. Three figures, each the CPU time of this thread
divided by the units counted, best of a few runs:

1. the real golds: every distinct gold of Spider's train and dev that counts at least
   ``MIN_UNITS`` (below that, preparing and fetching dominate): the median and the costliest;
2. the hostile suite (fixtures/hostile/cases.json): every case that counts at least ``MIN_UNITS``;
3. a generated family of "one costly step per row" queries: a recursive CTE whose every row
   applies an operator or function to a value of the largest size the cap allows, for every
   operator and value kind in ``OPERATORS`` and ``VALUES``, run up to ``FAMILY_BUDGET`` units.

Printed: the worst of 2 and 3 as a multiple of the costliest gold (target: at most
``TARGET_MULTIPLE``), and what a query at the largest budget a real gold gets would cost here;
the suite's costliest call in CPU seconds (the worst reward call), and the costliest of the cases
refused before they count much (``MIN_UNITS``): what preparing a statement costs where no step
counts it, bounded by the caps of cost model v3 (docs/bundle.md, "What remains uncounted");
4. a grader call (``grader_calls``): a right answer whose WHERE holds a costly constant subquery,
   judged on the original, its distilled neighbours and the counterexample search, as the grader
   judges it: the call's CPU seconds and its counted units, against what the call may count in all
   (its budget, ``neighbour_budget_steps`` and ``search_steps``; target: at most 20 s);
5. the planner's family (``planner``): joins of one table with itself, natural and tied by ``=``
   on its key columns, from a few tables to past ``max_join_weight``: each call's CPU and units
   whatever its size (within the cap the planner's work is charged by its weight, cost model v4;
   past it the query is refused from the text), and CPU per unit for calls of any size.
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bundle.contract.limits import DEFAULT_LIMITS, Limits
from bundle.search import counterexample as neighbour_search
from bundle.sql import guard as sql_guard
from bundle.verify import verify
from harness.emulator import hostile

MIN_UNITS = 100_000
FAMILY_BUDGET = 3_000_000
TARGET_MULTIPLE = 3.0
TERMS = 20  # operator applications per generated row

# Value kinds at the largest size a value may have (half the cap: the CTE's record holds it and a counter).
VALUES = {
    "letters": "replace(hex(zeroblob({half})), '0', 'a')",
    "digits": "replace(hex(zeroblob({half})), '0', '1')",
    "spaces": "replace(hex(zeroblob({half})), '0', ' ')",
    "exponent": "'1' || replace(hex(zeroblob({half} - 2)), '0', '0') || 'e5'",
    "accents": "replace(hex(zeroblob({quarter})), '0', 'é')",
    "blob": "zeroblob({size})",
}
# Operators and functions applied once per term; {j} makes each term different.
OPERATORS = {
    "add": "s + {j} < 0", "multiply": "s * {j} < 0", "cast integer": "CAST(s AS INTEGER) = {j}",
    "cast real": "CAST(s AS REAL) = {j}", "cast numeric": "CAST(s AS NUMERIC) = {j}",
    "compare": "s < (s || '{j}')", "nocase": "s = (s || '{j}') COLLATE NOCASE",
    "rtrim collation": "s = ('{j}' || s) COLLATE RTRIM", "concatenate": "length(s || '{j}') = 0",
    "in list": "s IN ('{j}', s || 'x')", "max": "max(s, s || '{j}') = ''", "round": "round(s, 2) = {j}",
    "upper": "upper(s) = '{j}'", "length": "length(s) = {j}", "quote": "quote(s) = '{j}'",
    "substr": "substr(s, {j}) = ''", "like": "s LIKE ('%' || substr(s, 1, 200) || '{j}')",
    "glob class": "s GLOB ('*[' || substr(s, 1, 200) || ']{j}')", "instr": "instr(s, substr(s, 1, 100) || '{j}') > 0",
    "replace": "replace(s, substr(s, 1, 100) || 'b', '{j}') = ''", "trim set": "trim(s, 'bcdefgh{j}') = ''",
    "hex": "hex(substr(s, 1, 200)) = '{j}'", "date": "date(s, '+{j} days') IS NULL",
}


def _ns_per_unit(run, repeat: int) -> tuple[float, int, str]:
    """(CPU ns per unit, units, outcome) of ``run() -> (units, outcome)``: the least CPU of ``repeat`` runs."""
    best, units, outcome = float("inf"), 0, ""
    for _ in range(repeat):
        started = time.thread_time()
        units, outcome = run()
        best = min(best, time.thread_time() - started)
    return 1e9 * best / max(units, 1), units, outcome


def _query(db: Path, sql: str, limits: Limits, budget: int):
    def run() -> tuple[int, str]:
        try:
            return sql_guard.run_query(str(db), sql, limits, budget_steps=budget, wall_s=limits.wall_guard_s,
                                       fresh=True).steps, "ran"
        except sql_guard.QueryFailed as failed:
            return failed.steps, failed.kind
    return run


def golds(steps: list[tuple[int, str, str, Path]], repeat: int, limits: Limits = DEFAULT_LIMITS) -> dict:
    """CPU per unit of every gold counting at least MIN_UNITS (``steps`` from budget.calibrate)."""
    measured = []
    for units, db_id, gold, db in steps:
        if units >= MIN_UNITS:
            ns, _units, _outcome = _ns_per_unit(_query(db, gold, limits, limits.gold_max_steps), repeat)
            measured.append((ns, units, db_id, gold))
    measured.sort(reverse=True)
    sql_guard.forget_connections()
    top = measured[0]
    return {"golds": len(measured), "median_ns": statistics.median(m[0] for m in measured), "costliest_ns": top[0],
            "costliest_units": top[1], "costliest_db": top[2], "costliest_gold": top[3][:100]}


def hostile_cases(db: Path, gold: str, repeat: int, limits: Limits = DEFAULT_LIMITS) -> list[dict]:
    """Each hostile case through verify(): its CPU seconds (least of ``repeat``), units and CPU per unit."""
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        for case in hostile.load_cases(hostile.first_table(db), scratch):
            def run(case: hostile.HostileCase = case) -> tuple[int, str]:
                verdict = verify(case.text, gold, str(db), is_sql=case.is_sql, limits=limits)
                return verdict.steps or 0, verdict.outcome
            ns, units, outcome = _ns_per_unit(run, repeat)
            out.append({"id": case.id, "ns_per_unit": ns, "units": units, "outcome": outcome,
                        "cpu_s": ns * max(units, 1) / 1e9})
    sql_guard.forget_connections()
    return sorted(out, key=lambda c: -c["ns_per_unit"])


COSTLY = ("(SELECT count(DISTINCT s || i) FROM (WITH RECURSIVE n(i, s) AS (SELECT 1, replace(hex(zeroblob(240)), '0', "
          "'a') UNION ALL SELECT i + 1, s FROM n LIMIT {rows}) SELECT i, s FROM n)) > 0")  # the suite's costliest kind


def grader_calls(spider: Path, work: Path, db_id: str = "concert_singer", gold: str = "SELECT count(*) FROM singer",
                 sizes: tuple[int, ...] = (20_000, 60_000, 120_000), limits: Limits = DEFAULT_LIMITS) -> dict:
    """A right answer with a costly constant subquery in its WHERE (``COSTLY`` over ``sizes`` rows), as
    the grader judges it: the original, the neighbours distilled from the database's dev golds, and
    the counterexample search. Each call's outcome, CPU seconds, and units counted in all."""
    from harness.bench import search as bench_search
    from harness.prepare.neighbours import distil

    original = spider / "database" / db_id / f"{db_id}.sqlite"
    golds = bench_search.golds_by_db(spider, ("dev.json",)).get(db_id, [])
    built = distil.distil(db_id, original, sorted(set(golds) | {gold}), work / db_id)
    neighbours = bench_search.neighbours_of(built, gold)
    ceiling = limits.budget_floor_steps + limits.neighbour_budget_steps + limits.search_steps
    calls = []
    for rows in sizes:
        prediction = f"{gold} WHERE {COSTLY.format(rows=rows)}"
        neighbour_search.forget()
        started = time.thread_time()
        verdict = verify(prediction, gold, str(original), is_sql=True, limits=limits, neighbours=neighbours,
                         search=bench_search.searcher(built, original, gold, limits))
        calls.append({"rows": rows, "outcome": verdict.outcome, "cpu_s": time.thread_time() - started,
                      "units": verdict.call_steps or 0, "original_units": verdict.steps or 0,
                      "neighbours": verdict.neighbours_checked, "searched": verdict.searched})
    sql_guard.forget_connections()
    return {"db_id": db_id, "neighbours": len(neighbours), "calls": calls, "ceiling_units": ceiling}


PLANNER_TABLES = (4, 6, 8, 10, 11, 16, 64)  # 10: the most one FROM clause may join (max_join_weight 1,000)


def planner_query(kind: str, tables: int, table: str, columns: list[str]) -> str:
    """``tables`` copies of ``table`` in one FROM clause: NATURAL JOINs, or each copy's columns tied by
    ``=`` to the next two copies' (issue 38's self-join)."""
    if kind == "natural":
        return f"SELECT count(*) FROM {table}" + f" NATURAL JOIN {table}" * (tables - 1)
    terms = [f't{i}."{c}" = t{(i + step) % tables}."{c}"' for i in range(tables) for c in columns for step in (1, 2)]
    return ("SELECT count(*) FROM " + ", ".join(f"{table} AS t{i}" for i in range(tables))
            + " WHERE " + " AND ".join(terms))


def planner(db: Path, repeat: int, limits: Limits = DEFAULT_LIMITS) -> list[dict]:
    """Each planner query prepared afresh and run (least CPU of ``repeat``): its outcome, units, CPU."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        # the table whose key has the most columns: the planner weighs an index per key prefix
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        info = {name: conn.execute(f'PRAGMA table_info("{name}")').fetchall() for name in names}
    finally:
        conn.close()
    widest = max(names, key=lambda name: sum(1 for row in info[name] if row[5]))
    columns = [name for _k, name in sorted((row[5], row[1]) for row in info[widest] if row[5])][:3] \
        or [row[1] for row in info[widest]][:3]
    table = f'"{widest}"'
    out = []
    for kind in ("natural", "tied"):
        for tables in PLANNER_TABLES:
            sql = planner_query(kind, tables, table, columns)
            ns, units, outcome = _ns_per_unit(_query(db, sql, limits, FAMILY_BUDGET), repeat)
            out.append({"kind": kind, "tables": tables, "chars": len(sql), "units": units, "outcome": outcome,
                        "cpu_s": ns * max(units, 1) / 1e9, "ns_per_unit": ns})
    sql_guard.forget_connections()
    return out


def family_query(operator: str, value: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """One generated query: every row of a recursive CTE applies ``operator`` TERMS times to ``value``."""
    size = int(limits.max_cell_bytes) - 16
    s = VALUES[value].format(size=size, half=size // 2, quarter=size // 4)
    terms = " + ".join(f"({OPERATORS[operator].format(j=j)})" for j in range(TERMS))
    return (f"WITH RECURSIVE n(i, s) AS (SELECT 1, {s} UNION ALL SELECT i + 1, s FROM n) "
            f"SELECT count(*) FROM n WHERE {terms} < -1")


def family(db: Path, repeat: int, limits: Limits = DEFAULT_LIMITS) -> list[dict]:
    out = []
    for operator in OPERATORS:
        for value in VALUES:
            ns, units, outcome = _ns_per_unit(_query(db, family_query(operator, value, limits), limits, FAMILY_BUDGET),
                                              repeat)
            if units >= MIN_UNITS:
                out.append({"operator": operator, "value": value, "ns_per_unit": ns, "units": units, "outcome": outcome})
    sql_guard.forget_connections()
    return sorted(out, key=lambda c: -c["ns_per_unit"])


def run(steps: list[tuple[int, str, str, Path]], db: Path, gold: str, repeat: int,
        limits: Limits = DEFAULT_LIMITS, spider: Path | None = None) -> dict:
    real = golds(steps, repeat, limits)
    every, generated = hostile_cases(db, gold, repeat, limits), family(db, repeat, limits)
    cases = [c for c in every if c["units"] >= MIN_UNITS]
    worst = max([(c["ns_per_unit"], f"hostile {c['id']}") for c in cases] +
                [(g["ns_per_unit"], f"generated {g['operator']} on {g['value']}") for g in generated])
    largest_budget = limits.budget_steps(max(s[0] for s in steps))
    refused = sorted((c for c in every if c["units"] < MIN_UNITS), key=lambda c: -c["cpu_s"])
    grader = None
    if spider is not None:
        with tempfile.TemporaryDirectory(prefix="spider-bench-grader-") as work:
            grader = grader_calls(spider, Path(work), limits=limits)
    return {"golds": real, "hostile": cases, "family": generated, "worst_ns": worst[0], "worst": worst[1],
            "planner": planner(db, repeat, limits),
            "multiple": worst[0] / real["costliest_ns"], "largest_budget": largest_budget,
            "worst_seconds_at_largest_budget": worst[0] * largest_budget / 1e9,
            "worst_seconds_at_floor": worst[0] * limits.budget_floor_steps / 1e9,
            "costliest_call": max(every, key=lambda c: c["cpu_s"]), "refused": refused[:3],
            "cpu_guard_s": limits.cpu_guard(limits.budget_floor_steps), "grader": grader,
            "call_ceiling_s": worst[0] * (limits.budget_floor_steps + limits.neighbour_budget_steps
                                          + limits.search_steps) / 1e9}


def print_figures(f: dict) -> None:
    g = f["golds"]
    print("cost model           CPU per budget unit (one VM step or one step's worth of a charged function)")
    print(f"  real golds         {g['golds']} golds of >= {MIN_UNITS:,} units: median {g['median_ns']:.1f} ns, "
          f"costliest {g['costliest_ns']:.1f} ns ({g['costliest_db']}, {g['costliest_units']:,} units)")
    top = f["hostile"][:3]
    print(f"  hostile suite      {len(f['hostile'])} cases counted; costliest: "
          + ", ".join(f"{c['id']} {c['ns_per_unit']:.1f} ns" for c in top))
    print(f"  generated family   {len(f['family'])} queries ({len(OPERATORS)} operators x {len(VALUES)} values); costliest: "
          + ", ".join(f"{c['operator']} on {c['value']} {c['ns_per_unit']:.1f} ns" for c in f["family"][:3]))
    print(f"  worst              {f['worst']} {f['worst_ns']:.1f} ns: {f['multiple']:.2f} x the costliest gold "
          f"(target <= {TARGET_MULTIPLE:g}); a query at the floor budget costs at most "
          f"{f['worst_seconds_at_floor']:.1f} s here, at the largest budget a real gold gets "
          f"({f['largest_budget']:,} units) {f['worst_seconds_at_largest_budget']:.1f} s")
    top, guard = f["costliest_call"], f["cpu_guard_s"]
    print(f"  costliest call     hostile {top['id']}: {top['cpu_s']:.2f} s of CPU ({top['outcome']}, {top['units']:,} "
          f"units; target <= 5 s); the watchdog's CPU guard {guard:g} s is {guard / max(top['cpu_s'], 1e-3):.0f}x that")
    print(f"  not counted        refused before {MIN_UNITS:,} units, costliest: "
          + ", ".join(f"{c['id']} {c['cpu_s']:.2f} s ({c['outcome']})" for c in f["refused"]))
    plans = f.get("planner") or []
    if plans:
        allowed = [p for p in plans if p["outcome"] != sql_guard.OVER_CAP]
        refused = [p for p in plans if p["outcome"] == sql_guard.OVER_CAP]
        top = max(allowed, key=lambda p: p["cpu_s"])
        costliest_refusal = f"{1000 * max(p['cpu_s'] for p in refused):.2f} ms" if refused else "-"
        print(f"  planner family     joins of one table with itself ({', '.join(str(n) for n in PLANNER_TABLES)} "
              f"copies, natural and tied): the costliest within max_join_weight {top['kind']} {top['tables']} tables "
              f"{1000 * top['cpu_s']:.1f} ms ({top['units']:,} units, {top['ns_per_unit']:,.0f} ns a unit); "
              f"{len(refused)} refused before they are prepared, the costliest in {costliest_refusal}")
        print("  planner per unit   " + ", ".join(f"{p['kind']} {p['tables']}: {p['ns_per_unit']:,.0f} ns"
                                                 for p in allowed))
    g = f.get("grader")
    if g:
        print(f"  grader call        a right answer with a costly constant subquery, on {g['db_id']} with "
              f"{g['neighbours']} neighbours and the search: "
              + "; ".join(f"{c['rows']:,} rows {c['outcome']} {c['cpu_s']:.2f} s, {c['units']:,} units "
                          f"({c['neighbours']} neighbours, {c['searched']} searched)" for c in g["calls"]))
        print(f"  grader ceiling     a call counts at most {g['ceiling_units']:,} units at the floor budget: "
              f"{f['call_ceiling_s']:.1f} s at the worst CPU per unit (target <= 20 s)")
