"""The hostile-query suite (fixtures/hostile/cases.json): load, render and run it against a bundle.

Each case is a completion (through extraction) or raw SQL (``is_sql``) that must score 0.0 with
one of its allowed outcomes, change no database byte and create no file. What decides is the
outcome, and so counted work: SQLite's VM steps and the charges of functions whose work grows with
their input (docs/bundle.md, "Cost model"), the same on any CPU at any load. CPU time of the
scoring thread is measured and reported; it only guards, under ``GUARD_CPU_SECONDS``, far above
what any case costs (a broken build that stopped counting, not a slow machine, would reach it).
The same runner serves the tests, the pre-push verification and the benchmark.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from harness.common.errors import InputError

CASES_PATH = Path(__file__).resolve().parents[2] / "fixtures" / "hostile" / "cases.json"


@dataclasses.dataclass(frozen=True)
class HostileCase:
    id: str
    category: str
    text: str
    is_sql: bool
    outcomes: tuple[str, ...]

    @property
    def quick(self) -> bool:
        """Refused or capped whatever the gold, without running to a step budget: never merely a
        mismatch (a query returning 0 legitimately matches a gold that returns 0)."""
        return not {"prediction_over_budget", "mismatch"} & set(self.outcomes)


# The one seconds bound of the suite, per case: at least 10x the costliest case measured on the
# 2-core development machine (docs/benchmark.md), so that a CPU several times slower passes too.
GUARD_CPU_SECONDS = 60.0


def _repeat(spec: dict) -> str:
    times = int(spec["times"])
    tail_times = int(spec.get("tail_times", times))
    return spec.get("head", "") + spec["unit"] * times + spec.get("middle", "") + spec.get("tail_unit", "") * tail_times


def load_cases(table: str, tmp: str, path: Path = CASES_PATH) -> list[HostileCase]:
    """Cases with ``{table}`` and ``{tmp}`` filled in."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the hostile suite {path}: {exc}") from None
    out = []
    for raw in data["cases"]:
        if "sql" in raw or "sql_repeat" in raw:
            text, is_sql = raw.get("sql") or _repeat(raw["sql_repeat"]), True
        else:
            text, is_sql = raw.get("completion") or _repeat(raw["completion_repeat"]), False
        text = text.replace("{table}", table).replace("{tmp}", tmp)
        out.append(HostileCase(raw["id"], raw["category"], text, is_sql, tuple(raw["outcomes"])))
    return out


def first_table(database: str | Path) -> str:
    uri = "file:" + str(Path(database).resolve()) + "?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True)
    try:
        row = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid LIMIT 1").fetchone()
    finally:
        conn.close()
    if row is None:
        raise InputError(f"{database} has no table to aim the hostile suite at")
    return row[0]


@dataclasses.dataclass(frozen=True)
class HostileResult:
    case: HostileCase
    outcome: str
    score: float | None
    cpu_seconds: float  # CPU time of the thread that scored the case
    seconds: float  # wall time: reported, never decides
    detail: str

    @property
    def within_guard(self) -> bool:
        return self.cpu_seconds <= GUARD_CPU_SECONDS

    @property
    def passed(self) -> bool:
        return self.score == 0.0 and self.outcome in self.case.outcomes and self.within_guard

    def describe(self) -> str:
        guard = "" if self.within_guard else f", over the {GUARD_CPU_SECONDS:g} s CPU guard"
        return (f"{self.case.id}: {self.outcome} score {self.score}, {self.cpu_seconds:.2f} s CPU{guard} "
                f"(allowed: {'/'.join(self.case.outcomes)}) {self.detail[:80]}")


def run_cases(cases: list[HostileCase], score: Callable[[HostileCase], tuple[str, float | None, str]]) -> list[HostileResult]:
    """Run each case through ``score(case) -> (outcome, score, detail)`` in this thread, measuring it."""
    results = []
    for case in cases:
        started, cpu = time.monotonic(), time.thread_time()
        outcome, value, detail = score(case)
        results.append(HostileResult(case, outcome, value, time.thread_time() - cpu,
                                     time.monotonic() - started, detail))
    return results
