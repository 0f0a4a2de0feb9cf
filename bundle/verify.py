"""verify(): a completion, a gold query and a database in, a Verdict out. The public building block.

Outcomes (README, "Outcomes"), a closed set:

=====================  =====  ===============================================================
outcome                score  meaning
=====================  =====  ===============================================================
match                  1.0    same rows as the gold under the comparison rules
mismatch               0.0    the query ran; its rows differ (detail says how)
no_query               0.0    no SQL query found in the completion
prediction_error       0.0    SQLite rejected or failed the query (syntax, unknown table...)
forbidden              0.0    not a single read-only statement: write, ATTACH, PRAGMA, ...
prediction_timeout     0.0    stopped at the deadline
prediction_over_cap    0.0    too many rows, too large a value or result, memory, comparison
gold_error             none   the gold failed: the row cannot be scored (infrastructure)
infrastructure_error   none   database missing or corrupt, stale row: fix the bundle
=====================  =====  ===============================================================

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript("CREATE TABLE t(a); INSERT INTO t VALUES (1), (2);")
>>> verify("```sql\\nSELECT a FROM t ORDER BY a DESC\\n```", "SELECT a FROM t", path).outcome
'match'
>>> verify("DROP TABLE t", "SELECT a FROM t", path).outcome
'forbidden'
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sqlite3
import threading
import time

try:
    from . import gold_results, sql_compare, sql_extract, sql_guard
    from .scoring_limits import DEFAULT_LIMITS, Limits
except ImportError:  # run as a standalone file
    import gold_results  # type: ignore[no-redef]
    import sql_compare  # type: ignore[no-redef]
    import sql_extract  # type: ignore[no-redef]
    import sql_guard  # type: ignore[no-redef]
    from scoring_limits import DEFAULT_LIMITS, Limits  # type: ignore[no-redef]

MATCH = "match"
MISMATCH = "mismatch"
NO_QUERY = "no_query"
PREDICTION_ERROR = "prediction_error"
FORBIDDEN = "forbidden"
PREDICTION_TIMEOUT = "prediction_timeout"
PREDICTION_OVER_CAP = "prediction_over_cap"
GOLD_ERROR = "gold_error"
INFRASTRUCTURE_ERROR = "infrastructure_error"

OUTCOMES = (MATCH, MISMATCH, NO_QUERY, PREDICTION_ERROR, FORBIDDEN, PREDICTION_TIMEOUT,
            PREDICTION_OVER_CAP, GOLD_ERROR, INFRASTRUCTURE_ERROR)
UNSCORED = frozenset({GOLD_ERROR, INFRASTRUCTURE_ERROR})
_PREDICTION_KIND = {
    sql_guard.ERROR: PREDICTION_ERROR,
    sql_guard.FORBIDDEN: FORBIDDEN,
    sql_guard.TIMEOUT: PREDICTION_TIMEOUT,
    sql_guard.OVER_CAP: PREDICTION_OVER_CAP,
    sql_guard.INFRASTRUCTURE: INFRASTRUCTURE_ERROR,
}

SQLITE_VERSION = sqlite3.sqlite_version


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What happened to one completion. ``score`` is None exactly when the row is unscored."""

    outcome: str
    score: float | None
    detail: str
    sql: str | None = None
    gold_rows: int | None = None  # None when the gold did not run
    gold_ordered: bool | None = None
    gold_cached: bool = False
    prediction_s: float = 0.0
    gold_s: float = 0.0
    compare_s: float = 0.0
    total_s: float = 0.0

    @property
    def gold_empty(self) -> bool:
        """The gold returns no rows: any query returning nothing matches (a policy question)."""
        return self.gold_rows == 0

    def as_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["gold_empty"] = self.gold_empty
        return data


_counts: collections.Counter = collections.Counter()
_counts_lock = threading.Lock()


def outcome_counts() -> dict[str, int]:
    """Outcomes counted in this process since the last reset (telemetry)."""
    with _counts_lock:
        return {name: _counts.get(name, 0) for name in OUTCOMES}


def reset_outcome_counts() -> None:
    with _counts_lock:
        _counts.clear()


def _finish(started: float, outcome: str, score: float | None, detail: str, sql: str | None = None,
            **fields: object) -> Verdict:
    verdict = Verdict(outcome, score, detail, sql, total_s=time.monotonic() - started, **fields)  # type: ignore[arg-type]
    with _counts_lock:
        _counts[outcome] += 1
    return verdict


_file_cache = gold_results.GoldCache()


def _file_identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def gold_shape(gold: str, database: str, limits: Limits = DEFAULT_LIMITS) -> sql_compare.ResultShape:
    """Run a gold query on a database and return its ResultShape. Raises sql_guard.QueryFailed."""
    def run(sql: str):
        raw = sql_guard.run_query(database, sql, limits.gold_timeout_s, limits)
        return raw.columns, raw.rows
    return gold_results.compute_shape(gold, run, limits.float_digits)


def verify(completion: str | None, gold: str, database: str, *, limits: Limits = DEFAULT_LIMITS,
           is_sql: bool = False, shape: sql_compare.ResultShape | None = None,
           cache: gold_results.GoldCache | None = None, database_key: str | None = None) -> Verdict:
    """Score one completion against a gold query on the SQLite file ``database``.

    ``is_sql``: the completion is already a query (no extraction). ``shape``: the gold's result,
    when known; otherwise it is computed once per (``database_key``, gold) in ``cache`` (default:
    a process-wide cache keyed by the file's path, size and modification time). Never raises for
    anything a model can write; gold and infrastructure failures come back as unscored verdicts.
    """
    started = time.monotonic()
    gold_s, cached = 0.0, True
    if shape is None:
        try:
            key = (database_key or _file_identity(database), gold)
        except OSError as exc:
            return _finish(started, INFRASTRUCTURE_ERROR, None, f"database unavailable: {exc}")
        t0 = time.monotonic()
        try:
            shape, cached = (cache or _file_cache).get(key, lambda: gold_shape(gold, database, limits))
        except sql_guard.QueryFailed as failed:
            outcome = INFRASTRUCTURE_ERROR if failed.kind == sql_guard.INFRASTRUCTURE else GOLD_ERROR
            return _finish(started, outcome, None, f"gold query: {failed.detail}")
        gold_s = 0.0 if cached else time.monotonic() - t0
    base = dict(gold_rows=len(shape.rows), gold_ordered=shape.ordered, gold_cached=cached, gold_s=gold_s)
    sql = completion.strip() if is_sql and isinstance(completion, str) else \
        sql_extract.extract_sql(completion, limits.max_completion_chars)
    if not sql:
        return _finish(started, NO_QUERY, 0.0, "no SQL query found in the completion", None, **base)
    t0 = time.monotonic()
    try:
        raw = sql_guard.run_query(database, sql, limits.timeout_s, limits)
    except sql_guard.QueryFailed as failed:
        outcome = _PREDICTION_KIND[failed.kind]
        score = None if outcome in UNSCORED else 0.0
        return _finish(started, outcome, score, failed.detail, sql, prediction_s=time.monotonic() - t0, **base)
    prediction_s = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        result = sql_compare.compare(shape, sql_compare.normalize_rows(raw.rows, limits.float_digits),
                                     len(raw.columns), deadline=t0 + limits.compare_timeout_s,
                                     max_nodes=limits.compare_max_nodes)
    except sql_compare.CompareBudgetExceeded as exc:
        return _finish(started, PREDICTION_OVER_CAP, 0.0, str(exc), sql, prediction_s=prediction_s,
                       compare_s=time.monotonic() - t0, **base)
    outcome = MATCH if result.match else MISMATCH
    return _finish(started, outcome, 1.0 if result.match else 0.0, result.detail, sql,
                   prediction_s=prediction_s, compare_s=time.monotonic() - t0, **base)
