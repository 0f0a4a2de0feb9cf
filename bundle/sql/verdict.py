"""verify(): a completion, a gold query and a database in, a Verdict out. The public building block.

Outcomes (README, "Outcomes"), a closed set:

======================  =====  ==============================================================
outcome                 score  meaning
======================  =====  ==============================================================
match                   1.0    same rows as the gold under the comparison rules
mismatch                0.0    the query ran; its rows differ (detail says how)
no_query                0.0    no SQL query found in the completion
prediction_error        0.0    SQLite rejected or failed the query (syntax, unknown table...)
forbidden               0.0    not a single read-only statement: write, ATTACH, PRAGMA, two...
prediction_over_budget  0.0    more SQLite VM steps than its budget (derived from the gold's)
prediction_over_cap     0.0    too many rows, too large a value or result, memory, comparison
gold_error              none   the gold failed: the row cannot be scored (infrastructure)
infrastructure_error    none   database missing or corrupt, stale row: fix the bundle
infrastructure_timeout  none   the wall-clock guard fired within the budget: machine too slow
======================  =====  ==============================================================

Every outcome is a function of the completion, the gold, the database, the limits and the SQLite
version, except ``infrastructure_timeout``, which is never a score.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript("CREATE TABLE t(a); INSERT INTO t VALUES (1), (2);")
>>> verify("```sql\\nSELECT a FROM t ORDER BY a DESC\\n```", "SELECT a FROM t", path).outcome
'match'
>>> verify("DROP TABLE t", "SELECT a FROM t", path).outcome
'forbidden'
>>> verify("SELECT a FROM t; DROP TABLE t", "SELECT a FROM t", path).outcome
'forbidden'
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from ..contract.limits import DEFAULT_LIMITS, Limits
from . import compare as sql_compare
from . import extract as sql_extract
from . import gold_results
from . import guard as sql_guard

MATCH = "match"
MISMATCH = "mismatch"
NO_QUERY = "no_query"
PREDICTION_ERROR = "prediction_error"
FORBIDDEN = "forbidden"
PREDICTION_OVER_BUDGET = "prediction_over_budget"
PREDICTION_OVER_CAP = "prediction_over_cap"
GOLD_ERROR = "gold_error"
INFRASTRUCTURE_ERROR = "infrastructure_error"
INFRASTRUCTURE_TIMEOUT = "infrastructure_timeout"

OUTCOMES = (MATCH, MISMATCH, NO_QUERY, PREDICTION_ERROR, FORBIDDEN, PREDICTION_OVER_BUDGET,
            PREDICTION_OVER_CAP, GOLD_ERROR, INFRASTRUCTURE_ERROR, INFRASTRUCTURE_TIMEOUT)
UNSCORED = frozenset({GOLD_ERROR, INFRASTRUCTURE_ERROR, INFRASTRUCTURE_TIMEOUT})
_PREDICTION_KIND = {
    sql_guard.ERROR: PREDICTION_ERROR,
    sql_guard.FORBIDDEN: FORBIDDEN,
    sql_guard.OVER_BUDGET: PREDICTION_OVER_BUDGET,
    sql_guard.OVER_CAP: PREDICTION_OVER_CAP,
    sql_guard.WALL_GUARD: INFRASTRUCTURE_TIMEOUT,
    sql_guard.INFRASTRUCTURE: INFRASTRUCTURE_ERROR,
}
_GOLD_KIND = {sql_guard.WALL_GUARD: INFRASTRUCTURE_TIMEOUT, sql_guard.INFRASTRUCTURE: INFRASTRUCTURE_ERROR}

SQLITE_VERSION = sqlite3.sqlite_version
DISPUTED_MARK = " (disputed gold: "  # after decided_on's database on a row whose gold is disputed: "<where> (disputed gold: <id>)"
DISPUTED_PREFIX = "original" + DISPUTED_MARK  # such a row decided on the original database


class Disputed(NamedTuple):
    """A disputed gold (docs/disputed-golds.md): wrong or narrower than its question. The row is
    judged like any other, against the gold and against each of its ``accepted`` answers (an answer
    matching one of them everywhere is paid); the verdict names the entry."""

    id: str
    reason: str
    accepted: tuple[str, ...] = ()


def disputed_id(decided_on: str) -> str | None:
    """The disputed gold's id that ``decided_on`` names, or None.

    >>> disputed_id("original (disputed gold: pets_1-youngest-dog)"), disputed_id("test suite")
    ('pets_1-youngest-dog', None)
    >>> disputed_id("neighbour 2 of pets_1 (disputed gold: pets_1-youngest-dog)")
    'pets_1-youngest-dog'
    """
    at = decided_on.rfind(DISPUTED_MARK)
    if at < 0 or not decided_on.endswith(")"):
        return None
    return decided_on[at + len(DISPUTED_MARK):-1]


def decided_place(decided_on: str) -> str:
    """``decided_on`` without a disputed gold's mark: the database that decided (or ``test suite``).

    >>> decided_place("edit 3 of inn_1 (a row copied) (disputed gold: inn_1-x)"), decided_place("test suite")
    ('edit 3 of inn_1 (a row copied)', 'test suite')
    """
    return decided_on[:decided_on.rfind(DISPUTED_MARK)] if disputed_id(decided_on) is not None else decided_on


def decided_on_original(decided_on: str) -> bool:
    """Whether ``decided_on`` names the original database (for a disputed gold too)."""
    return decided_place(decided_on) == "original"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What happened to one completion. ``score`` is None exactly when the row is unscored.

    ``outcome``, ``score``, ``detail``, ``sql`` and the step counts are the verdict proper (the same
    in every run); the ``*_s`` fields are wall-clock telemetry.
    """

    outcome: str
    score: float | None
    detail: str
    sql: str | None = None
    gold_rows: int | None = None  # None when the gold did not run
    gold_ordered: bool | None = None
    gold_cached: bool = False
    gold_steps: int | None = None
    budget_steps: int | None = None
    steps: int | None = None  # VM steps the predicted query took on the original (or had taken when stopped)
    original_score: float | None = None  # the verdict of the original database alone
    decided_on: str = "original"  # "original", the neighbour or search database whose result differed,
    # "test suite" (every one agreed); " (disputed gold: <id>)" follows on a disputed gold's row
    disputed: str | None = None  # the id of the disputed gold the row was judged by (docs/disputed-golds.md)
    accepted: str | None = None  # the disputed gold's accepted answer it matched (None: the gold itself, or none)
    neighbours_checked: int = 0
    searched: int = 0  # databases the counterexample search generated and judged
    call_steps: int | None = None  # the whole call's counted work: the original, the neighbours and the search
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


_VERDICT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Verdict)}
_new_verdict = object.__new__


def _finish(started: float, outcome: str, score: float | None, detail: str, sql: str | None = None,
            **fields: object) -> Verdict:
    """The Verdict, built on the per-call path without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field: 2.6 of the call's ~30 µs); ``fields`` are Verdict's own names."""
    verdict = _new_verdict(Verdict)
    values = verdict.__dict__
    values.update(_VERDICT_DEFAULTS)
    values.update(fields)
    values["outcome"], values["score"], values["detail"], values["sql"] = outcome, score, detail, sql
    values["total_s"] = time.monotonic() - started
    with _counts_lock:
        _counts[outcome] += 1
    return verdict


_file_cache = gold_results.GoldCache()


def _file_identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def gold_result(gold: str, database: str, limits: Limits = DEFAULT_LIMITS) -> gold_results.GoldResult:
    """Run a gold query on a database: its result shape and VM steps. Raises sql_guard.QueryFailed."""
    def run(sql: str) -> tuple:
        raw = sql_guard.run_query(database, sql, limits, budget_steps=limits.gold_max_steps,
                                  wall_s=limits.gold_wall_guard_s, fresh=True)
        return raw.columns, raw.rows, raw.steps
    return gold_results.compute(gold, run, limits.float_digits)


def gold_shape(gold: str, database: str, limits: Limits = DEFAULT_LIMITS) -> sql_compare.ResultShape:
    """The ResultShape of ``gold_result``."""
    return gold_result(gold, database, limits).shape


@dataclasses.dataclass(frozen=True)
class Neighbour:
    """A neighbour database of the one scored on, and its gold's result there."""

    name: str
    path: str
    gold: gold_results.GoldResult


class Judged(NamedTuple):
    """One database's verdict on a query: what ``judge`` returns (a named tuple: on the hot path)."""

    outcome: str
    score: float | None
    detail: str
    steps: int
    prediction_s: float
    compare_s: float


def judge(database: str, sql: str, gold: gold_results.GoldResult, limits: Limits, *, neighbour: bool = False,
          max_steps: int | None = None, budget_steps: int | None = None, sandbox: object = None,
          fresh: bool = False) -> Judged:
    """Run ``sql`` on one database and compare its rows with the gold's result there.

    ``neighbour``: a neighbour or search database, where the original accepted the answer: the
    gold's rows with the whole tie its LIMIT cuts, or each once, also match (``sql.compare.compare_result``).
    ``max_steps``: fewer steps than the gold's budget (the search's remaining budget); stopped
    there, the outcome is ``prediction_over_budget``. ``budget_steps``: the gold's budget here,
    when the caller has it already (``limits.budget_steps(gold.steps)``). ``sandbox``: run on that
    edited in-memory copy of ``database`` (``sql.sandbox``) instead of the file. ``fresh``: the
    statement prepared anew, so that ``steps`` is exact (a search's budget adds them up).
    """
    budget = limits.budget_steps(gold.steps) if budget_steps is None else budget_steps
    if max_steps is not None:
        budget = min(budget, max_steps)
    t0 = time.monotonic()
    try:
        # Limits.cpu_guard(budget), written out: the per-call path enters scoring_limits once a database.
        cpu_s = limits.cpu_guard_s * max(1.0, budget / limits.budget_floor_steps)
        raw = sql_guard.run_query(database, sql, limits, budget_steps=budget, wall_s=limits.wall_guard_s, cpu_s=cpu_s,
                                  sandbox=sandbox, fresh=fresh)  # type: ignore[arg-type]
    except sql_guard.QueryFailed as failed:
        outcome = _PREDICTION_KIND[failed.kind]
        return Judged(outcome, None if outcome in UNSCORED else 0.0, failed.detail, failed.steps,
                      time.monotonic() - t0, 0.0)
    t1 = time.monotonic()
    try:
        result = sql_compare.compare_result(gold.shape, raw.rows, len(raw.columns), limits.float_digits,
                                            limits.compare_max_cells, t0 + limits.wall_guard_s,
                                            other_readings=neighbour, with_ties=gold.with_ties)
    except (sql_compare.CompareBudgetExceeded, sql_compare.CompareWallGuard) as exc:
        timed_out = isinstance(exc, sql_compare.CompareWallGuard)
        return Judged(INFRASTRUCTURE_TIMEOUT if timed_out else PREDICTION_OVER_CAP, None if timed_out else 0.0,
                      str(exc), raw.steps, t1 - t0, time.monotonic() - t1)
    outcome = MATCH if result.match else MISMATCH
    return Judged(outcome, 1.0 if result.match else 0.0, result.detail, raw.steps, t1 - t0, time.monotonic() - t1)


class Searched(NamedTuple):
    """What a counterexample search found (``search.counterexample``): ``decided_on`` None when nothing."""

    decided_on: str | None
    outcome: str
    score: float | None
    detail: str
    databases: int  # databases generated and judged
    steps: int  # VM steps its gold and prediction runs took


def verify(completion: str | None, gold: str, database: str, *, limits: Limits = DEFAULT_LIMITS,
           is_sql: bool = False, known_gold: gold_results.GoldResult | None = None,
           cache: gold_results.GoldCache | None = None, database_key: str | None = None,
           neighbours: tuple[Neighbour, ...] | list[Neighbour] = (),
           search: Callable[[str, gold_results.GoldResult], Searched] | None = None,
           disputed: Disputed | None = None) -> Verdict:
    """Score one completion against a gold query on the SQLite file ``database``.

    ``is_sql``: the completion is already a query (no extraction). ``known_gold``: the gold's result,
    when known; otherwise it is computed once per (``database_key``, gold, digits) in ``cache``
    (default: a process-wide cache keyed by the file's path, size and modification time). Never
    raises for anything a model can write; gold and infrastructure failures come back unscored.

    ``neighbours``: when given (and ``limits.semantics`` is ``neighbours``), a completion that
    matches on ``database`` must match on each of them too, checked in order and stopping at the
    first that differs; the verdict then names that database (``decided_on``; ``test suite`` when
    every one agreed) and keeps the original database's own score (``original_score``). On a
    neighbour, the gold's rows with the whole tie its LIMIT cuts, or each once, match too (``judge``).

    ``search``: when given, a completion that matched everywhere so far is passed to it with the
    gold's result on ``database`` (the counterexample search, ``search.counterexample``); a database it
    finds decides the verdict.

    ``disputed``: the gold is disputed (wrong or narrower than its question): the verdict says so
    (``decided_on`` ends ``(disputed gold: <id>)``, the detail's opening, ``disputed``); its
    accepted answers are judged by the caller (``scoring.entry``), each with ``verify``.
    """
    started = time.monotonic()
    gold_s, cached = 0.0, True
    if known_gold is None:
        try:
            key = (database_key or _file_identity(database), gold, limits.float_digits)
        except OSError as exc:
            return _finish(started, INFRASTRUCTURE_ERROR, None, f"database unavailable: {exc}")
        t0 = time.monotonic()
        try:
            known_gold, cached = (cache or _file_cache).get(key, lambda: gold_result(gold, database, limits))
        except sql_guard.QueryFailed as failed:
            return _finish(started, _GOLD_KIND.get(failed.kind, GOLD_ERROR), None, f"gold query: {failed.detail}")
        gold_s = 0.0 if cached else time.monotonic() - t0
    shape = known_gold.shape
    budget = limits.budget_steps(known_gold.steps)
    base: dict[str, object] = dict(gold_rows=len(shape.rows), gold_ordered=shape.ordered, gold_cached=cached,
                                   gold_s=gold_s, gold_steps=known_gold.steps, budget_steps=budget)
    if disputed is not None:  # every verdict of the row names its disputed gold
        base.update(decided_on=f"original{DISPUTED_MARK}{disputed.id})", disputed=disputed.id)
    no_query = "no SQL query found in the completion"
    if is_sql:
        sql, second = (completion.strip() if isinstance(completion, str) else None), None
    else:
        found = sql_extract.extract(completion, limits.max_completion_chars)
        sql, second = found.sql, found.second
        if found.too_long:
            no_query = (f"the completion is longer than max_completion_chars ({limits.max_completion_chars:,} "
                        "characters): it is not read")
    if not sql:
        return _finish(started, NO_QUERY, 0.0, no_query, None, original_score=0.0, **base)
    try:
        if second is not None and sql_guard.is_statement(database, second, limits):
            return _finish(started, FORBIDDEN, 0.0, "several statements: another one follows the query",
                           sql, steps=0, original_score=0.0, **base)
    except sql_guard.QueryFailed as failed:
        return _finish(started, _GOLD_KIND.get(failed.kind, INFRASTRUCTURE_ERROR), None, failed.detail, sql, **base)
    outcome, score, detail, steps, prediction_s, compare_s = judge(database, sql, known_gold, limits,
                                                                   budget_steps=budget)
    original_score, decided_on, checked, searched, call_steps = score, "original", 0, 0, steps
    if outcome == MATCH and limits.semantics == "neighbours" and (neighbours or search is not None):
        beyond = _beyond_original(sql, neighbours, search, known_gold, limits)
        checked, searched, call_steps = beyond.checked, beyond.searched, (steps or 0) + beyond.steps
        prediction_s, compare_s = prediction_s + beyond.prediction_s, compare_s + beyond.compare_s
        decided_on = beyond.decided_on
        if beyond.outcome is not None:
            outcome, score, detail = beyond.outcome, beyond.score, beyond.detail
    if disputed is not None:
        decided_on = f"{decided_on}{DISPUTED_MARK}{disputed.id})"
        detail = f"its gold is disputed ({disputed.id}: {disputed.reason}): {detail}"
        base.pop("decided_on")
    return _finish(started, outcome, score, detail, sql, steps=steps, prediction_s=prediction_s, compare_s=compare_s,
                   original_score=original_score, decided_on=decided_on, neighbours_checked=checked,
                   searched=searched, call_steps=call_steps, **base)


class _Beyond(NamedTuple):
    outcome: str | None  # None: every database agreed with the original's match
    score: float | None
    detail: str
    decided_on: str
    checked: int
    searched: int
    prediction_s: float
    compare_s: float
    steps: int  # counted on the neighbours and by the search


def _beyond_original(sql: str, neighbours: tuple[Neighbour, ...] | list[Neighbour],
                     search: Callable[[str, gold_results.GoldResult], Searched] | None, original: gold_results.GoldResult,
                     limits: Limits) -> _Beyond:
    """A match on the original, judged on the neighbours in order, then by the search (verify's docstring)."""
    prediction_s = compare_s = 0.0
    shared = limits.neighbour_budget_steps  # all neighbour runs of one prediction, together
    for checked, neighbour in enumerate(neighbours, 1):
        there = judge(neighbour.path, sql, neighbour.gold, limits, neighbour=True, max_steps=max(shared, 0))
        shared -= there.steps or 0
        prediction_s, compare_s = prediction_s + there.prediction_s, compare_s + there.compare_s
        if there.outcome != MATCH:
            return _Beyond(there.outcome, there.score, f"on {neighbour.name}: {there.detail}", neighbour.name,
                           checked, 0, prediction_s, compare_s, limits.neighbour_budget_steps - shared)
    used = limits.neighbour_budget_steps - shared
    found = search(sql, original) if search is not None else None
    if found is not None and found.decided_on is not None:
        return _Beyond(found.outcome, found.score, found.detail, found.decided_on, len(neighbours), found.databases,
                       prediction_s, compare_s, used + found.steps)
    searched, used = (found.databases, used + found.steps) if found is not None else (0, used)
    return _Beyond(None, None, "", "test suite" if neighbours or searched else "original", len(neighbours), searched,
                   prediction_s, compare_s, used)
