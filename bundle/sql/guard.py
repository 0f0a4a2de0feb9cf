"""Run one untrusted SELECT on a read-only SQLite database, within limits.

Layers, none of which relies on reading the SQL text (docs/bundle.md, "Hardening"):

* the guarded connection (``sql.connection``): opened ``mode=ro&immutable=1``, an allow-list
  authorizer, SQLite's limits, ``temp_store=MEMORY`` and the process-wide heap ceiling;
* a progress handler that counts SQLite's VM steps and stops the query when it is over its step
  budget (deterministic: the same query on the same database always takes the same steps), or
  when the wall-clock guard fires (the machine is far too slow: not the query's verdict);
* ``fetchmany`` with a row cap and a byte budget, so a huge result is refused before it is held;
* Python's sqlite3 refuses a second statement in the same text.

Connections are kept per thread, so the cost of opening and of reading the schema is paid once
per thread; a kept connection has no state a query could change. SQLite counts a reused
statement's steps from where its last run left off; ``run_query`` makes "over the budget" exact all
the same (its docstring says how), so a verdict never depends on history.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import sqlite3
import threading
import time
from typing import NamedTuple

from ..contract.limits import Limits
from . import expansion as sql_expansion
from . import functions as sql_functions
from . import planner as sql_planner
from . import watchdog as sql_watchdog
from .connection import ALLOWED_FUNCTIONS, ConnectionFailed, Guarded, connection, database_uri, forget_connections, forget_path, open_guarded
from .sandbox import Sandbox, SandboxBroken

__all__ = ["ALLOWED_FUNCTIONS", "TURNS", "QueryFailed", "RawResult", "database_uri", "forget_connections", "forget_path",
           "is_statement", "open_guarded", "run_query"]

# Failure kinds: the caller maps them to outcomes.
ERROR, FORBIDDEN, OVER_BUDGET, WALL_GUARD, OVER_CAP, INFRASTRUCTURE = (
    "error", "forbidden", "over_budget", "wall_guard", "over_cap", "infrastructure")


class QueryFailed(Exception):
    """The query did not produce a complete result; ``kind`` says why, ``steps`` how far it got."""

    def __init__(self, kind: str, detail: str, steps: int = 0) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.steps = steps


class RawResult(NamedTuple):
    """A query's complete result (a named tuple: made once per query, on the hot path)."""

    columns: tuple[str, ...]
    rows: list[tuple]
    steps: int  # VM steps counted (units of limits.progress_steps) plus the charges of charged functions
    seconds: float


class HeapTurns:
    """Queries of one process share SQLite's heap ceiling; a query that ran out of memory beside
    others is run again alone, so that "over the memory cap" is about the query, not its company.

    The common path is one uncontended lock; only a query that must run alone waits (and makes
    new queries wait) until every running query has left.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Fresh state (in a forked child: a lock held by a parent's thread would never be released)."""
        self._lock = threading.Lock()
        self._running = 0
        self._alone = False
        self._changed = threading.Condition(self._lock)

    def enter(self) -> None:
        with self._lock:
            while self._alone:
                self._changed.wait()
            self._running += 1

    def leave(self) -> None:
        with self._lock:
            self._running -= 1
            if self._alone and self._running == 0:
                self._changed.notify_all()

    def enter_alone(self) -> None:
        with self._lock:
            while self._alone:
                self._changed.wait()
            self._alone = True
            while self._running:
                self._changed.wait()

    def leave_alone(self) -> None:
        with self._lock:
            self._alone = False
            self._changed.notify_all()


TURNS = HeapTurns()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=TURNS.reset)


_RESULT_CODE_KIND = {
    7: OVER_CAP,  # SQLITE_NOMEM
    18: OVER_CAP,  # SQLITE_TOOBIG
    23: FORBIDDEN,  # SQLITE_AUTH
    8: FORBIDDEN,  # SQLITE_READONLY
    3: INFRASTRUCTURE, 10: INFRASTRUCTURE, 11: INFRASTRUCTURE, 13: INFRASTRUCTURE,
    14: INFRASTRUCTURE, 26: INFRASTRUCTURE,  # PERM IOERR CORRUPT FULL CANTOPEN NOTADB
}
_MESSAGE_KIND = (
    ("not authorized", FORBIDDEN), ("vtable constructor failed", FORBIDDEN), ("unsafe use of", FORBIDDEN),
    ("too big", OVER_CAP),
    ("out of memory", OVER_CAP), ("one statement at a time", FORBIDDEN), ("readonly", FORBIDDEN),
    ("not a database", INFRASTRUCTURE), ("malformed", INFRASTRUCTURE), ("disk i/o", INFRASTRUCTURE),
    ("unable to open", INFRASTRUCTURE),
)
_INTERRUPT = 9  # SQLITE_INTERRUPT: our progress handler stopped the query


def classify(exc: BaseException) -> str:
    """The failure kind of an exception raised by sqlite3 while running a query."""
    if isinstance(exc, MemoryError):
        return OVER_CAP
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _RESULT_CODE_KIND:
        return _RESULT_CODE_KIND[code & 0xFF]
    text = str(exc).lower()
    for needle, kind in _MESSAGE_KIND:
        if needle in text:
            return kind
    return ERROR


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


_CHUNK_CELLS = 65_536  # cells fetched between two charges: what a fetch may convert before it is counted


class _Stopped(Exception):
    """Raised by ``_fetch`` when the cells' charge puts the query over its budget (the meter says so)."""


def _fetch(cursor: sqlite3.Cursor, limits: Limits, meter: _Meter) -> list[tuple]:
    """The rows, within the row cap and the byte budget. Converting a value into a Python object is
    work no VM step counts: every cell is charged ``CELL_STEPS`` to ``meter``, and every character of
    text or byte of a blob one step per ``charge_bytes_per_step``, chunk by chunk."""
    rows: list[tuple] = []
    budget = limits.max_result_bytes
    ncols = len(cursor.description or ()) or 1
    size = max(min(limits.max_rows + 1, _CHUNK_CELLS // ncols), 1)
    per_row, per_step = ncols * sql_functions.CELL_STEPS, int(limits.charge_bytes_per_step)
    while True:
        chunk = cursor.fetchmany(size)
        rows.extend(chunk)
        sized = sum([len(v) for row in chunk for v in row if v.__class__ is str or v.__class__ is bytes])
        if meter.add(len(chunk) * per_row + sized // per_step):
            raise _Stopped()
        if len(rows) > limits.max_rows:
            raise QueryFailed(OVER_CAP, f"more than {limits.max_rows} rows", meter.steps)
        budget -= 8 * ncols * len(chunk) + sized
        if budget < 0:
            raise QueryFailed(OVER_CAP, f"result larger than {limits.max_result_bytes} bytes", meter.steps)
        if len(chunk) < size:
            return rows


class _Meter:
    """The work a query has done, counted in VM steps against its budget.

    It starts at the statement's compile charge; the progress handler adds ``unit`` steps per call
    (one call per ``unit`` VM steps); a charged function adds its charge (``sql.functions``) before
    it runs, and the fetch its cells' after each chunk. Past ``max_steps`` the query is stopped.
    The wall clock is read on every 8th handler call and on every charge: it only guards.
    """

    __slots__ = ("state", "handler", "charge", "exc")

    def __init__(self, max_steps: int, unit: int, deadline: float, start: int = 0) -> None:
        state: list = [start, 0, None, "", max_steps]  # steps counted, handler calls, why stopped, detail, most
        self.state = state
        self.exc: BaseException | None = None
        clock = time.monotonic

        def handler() -> int:
            steps = state[0] = state[0] + unit
            calls = state[1] = state[1] + 1
            if steps > max_steps:
                state[2] = OVER_BUDGET
                return 1
            if not calls & 7 and clock() >= deadline:
                state[2] = WALL_GUARD
                return 1
            return 0

        def charge(steps: int) -> None:
            total = state[0] = state[0] + steps
            if total > max_steps:
                state[2] = OVER_BUDGET
                raise sql_functions.Refused("over budget")
            if clock() >= deadline:
                state[2] = WALL_GUARD
                raise sql_functions.Refused("wall guard")

        self.handler = handler
        self.charge = charge

    def add(self, steps: int) -> bool:
        """Add ``steps``; True when that puts the query over its most (it is then stopped)."""
        state = self.state
        total = state[0] = state[0] + steps
        if total > state[4]:
            state[2] = OVER_BUDGET
            return True
        return False

    def refuse(self, kind: str, detail: str) -> None:
        self.state[2], self.state[3] = kind, detail
        raise sql_functions.Refused(detail)

    def fail(self, exc: BaseException) -> None:
        self.exc = exc
        self.state[2] = classify(exc)
        self.state[3] = f"{type(exc).__name__}: {exc}"
        raise sql_functions.Refused(str(exc))

    @property
    def steps(self) -> int:
        return self.state[0]  # type: ignore[no-any-return]

    @property
    def stopped(self) -> str | None:
        return self.state[2]  # type: ignore[no-any-return]

    @property
    def started(self) -> bool:
        """Whether SQLite has run a reporting unit of steps (else a failure came while preparing, or at once)."""
        return self.state[1] > 0  # type: ignore[no-any-return]


class _GuardFired(Exception):
    """The watchdog stopped the call (``sql.watchdog``): the row is unscored, whatever SQLite said."""

    def __init__(self, watched: sql_watchdog.Watch) -> None:
        super().__init__(watched.fired)
        self.watched = watched


def _execute_once(guarded: Guarded | Sandbox, sql: str, meter: _Meter, limits: Limits, cpu_s: float, wall_s: float) -> tuple:
    """Prepare, run and fetch ``sql`` under ``meter``, the whole call watched by the watchdog."""
    conn = guarded.conn
    guarded.charges.meter = meter
    conn.set_progress_handler(meter.handler, int(limits.progress_steps))
    watched = sql_watchdog.WATCHDOG.start(conn, cpu_s, wall_s)
    try:
        cursor = conn.execute(sql)
        if cursor.description is None:  # ran, but is no query (REINDEX is not authorizer-checked)
            raise QueryFailed(FORBIDDEN, "not a query: the statement returns no result columns")
        rows = _fetch(cursor, limits, meter)
        columns = tuple([d[0] for d in cursor.description])
        cursor.close()
    except BaseException:
        if watched.fired is not None:
            raise _GuardFired(watched) from None
        raise
    finally:
        sql_watchdog.WATCHDOG.stop(watched)
        conn.set_progress_handler(None, 0)
        guarded.charges.meter = sql_functions.UNMETERED
    if watched.fired is not None:  # it finished, but only after the guard: unscored all the same
        raise _GuardFired(watched)
    return columns, rows


def _failure(exc: BaseException, meter: _Meter, budget_steps: int, wall_s: float, max_ops: int) -> QueryFailed:
    steps = meter.steps
    stopped = meter.stopped
    if stopped == OVER_BUDGET:
        return QueryFailed(OVER_BUDGET, f"over its budget of {budget_steps:,} SQLite VM steps", steps)
    if stopped == WALL_GUARD:
        return QueryFailed(WALL_GUARD, f"still within its step budget when the {wall_s:g} s wall-clock "
                                       "guard fired: the machine is far too slow or overloaded", steps)
    if stopped is not None:  # a charged function refused the call or SQLite's own function failed
        return QueryFailed(stopped, meter.state[3][:300], steps)
    collation = sql_functions.refused_collation(str(exc))
    if collation is not None:
        return QueryFailed(FORBIDDEN, f"COLLATE {collation} is refused: its comparisons do work no step counts "
                                      "(docs/bundle.md, cost model); compare lower(x) or rtrim(x) instead", steps)
    kind = classify(exc)
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if kind == OVER_CAP and _out_of_memory(exc) and not meter.started:
        detail = (f"out of memory while preparing: its program is larger than max_program_ops ({max_ops:,} "
                  "operations), or what it expands to (a common table expression referenced more than once "
                  "is copied at each reference) does not fit in the heap")
    return QueryFailed(kind, detail[:300], steps)


_fresh = itertools.count()
_EXPANSION_DETAIL = ("its common table expressions expand to more than max_expansion_tokens ({:,} tokens) while the "
                     "statement is prepared: each reference to one copies its body (docs/bundle.md, cost model)")

_JOIN_DETAIL = ("its joins weigh more than max_join_weight ({:,}: over every FROM clause, the cube of the tables it "
                "joins), more than the query planner may weigh before a step runs (docs/bundle.md, cost model); "
                "join fewer tables in one FROM clause")


@functools.lru_cache(maxsize=4096)
def _join_weight(sql: str, limit: int) -> int:
    """``sql.planner.weight``, read once per text and process (an answer runs on many databases)."""
    return sql_planner.weight(sql, limit)


def run_query(path: str, sql: str, limits: Limits, *, budget_steps: int, wall_s: float,
              cpu_s: float | None = None, fresh: bool = False, sandbox: Sandbox | None = None) -> RawResult:
    """Execute ``sql`` on the database at ``path``; the full result or QueryFailed.

    The query may take ``budget_steps`` VM steps, counted in units of ``limits.progress_steps``;
    ``wall_s`` seconds of wall time and ``cpu_s`` of its thread's CPU time (default ``wall_s``) are
    only guards (``sql.watchdog``), reported as the kind WALL_GUARD, never as over budget.

    Whether a query is over its budget is exact, as if its statement were prepared for this run
    alone. A statement reused from the connection's cache starts its count where its last run
    stopped (a phase below one unit), so it runs with one unit more: stopped there, it is over
    the budget for certain; finished short of the last unit, within it for certain; finished in
    that last unit (rare), it runs again freshly prepared, which decides. ``fresh`` prepares it
    anew from the start (gold queries, whose steps derive budgets). ``steps`` is exact for a fresh
    statement that finished; otherwise it counts the work done to within two units.

    ``sandbox``: run on that in-memory copy of ``path`` (``sql.sandbox``, with the edit it holds)
    instead of the file, under the same guards; a query that changed it is an infrastructure failure.
    """
    if len(sql) > limits.max_sql_chars:
        raise QueryFailed(OVER_CAP, f"query longer than {limits.max_sql_chars} characters")
    if "with" in sql.lower() and sql_expansion.expansion(sql, int(limits.max_expansion_tokens)) > limits.max_expansion_tokens:
        raise QueryFailed(OVER_CAP, _EXPANSION_DETAIL.format(limits.max_expansion_tokens))
    weight = _join_weight(sql, int(limits.max_join_weight))
    if weight > limits.max_join_weight:
        raise QueryFailed(OVER_CAP, _JOIN_DETAIL.format(limits.max_join_weight))
    unit = int(limits.progress_steps)
    # sql_functions.compile_charge, written out: the per-call path enters each module once a database.
    compile_steps = (int(limits.charge_base_steps) + len(sql) // sql_functions.COMPILE_CHARS_PER_STEP
                     + weight * sql_functions.PLAN_STEPS_PER_WEIGHT)
    if compile_steps > budget_steps:
        raise QueryFailed(OVER_BUDGET, f"over its budget of {budget_steps:,} SQLite VM steps before it runs: "
                                       f"preparing {len(sql):,} characters joining tables of weight {weight:,} is charged "
                                       f"{compile_steps:,}", compile_steps)
    guards = (wall_s, wall_s if cpu_s is None else cpu_s)
    if not fresh:
        raw = _run(path, sql, limits, budget_steps + unit, budget_steps, guards, compile_steps, sandbox)
        if raw.steps <= budget_steps:
            return raw
    # A leading comment makes a text the statement cache has never seen: prepared anew, same program.
    return _run(path, f"/* {next(_fresh)} */ {sql}", limits, budget_steps, budget_steps, guards, compile_steps,
                sandbox)


def _open(path: str, limits: Limits):
    """The guarded connection to ``path``; a database that cannot be opened is an infrastructure failure."""
    try:
        return connection(path, limits)
    except ConnectionFailed as exc:
        raise QueryFailed(INFRASTRUCTURE, str(exc)) from None


def _run(path: str, sql: str, limits: Limits, max_steps: int, budget_steps: int, guards: tuple[float, float],
         compile_steps: int, sandbox: Sandbox | None) -> RawResult:
    started = time.monotonic()
    unit = int(limits.progress_steps)
    wall_s, cpu_s = guards
    guarded = _guarded(path, limits, sandbox)
    conn = guarded.conn
    alone = False
    while True:
        meter = _Meter(max_steps, unit, started + wall_s, compile_steps)
        turns, entered_alone = TURNS, alone
        turns.enter_alone() if entered_alone else turns.enter()
        try:
            columns, rows = _execute_once(guarded, sql, meter, limits, cpu_s, wall_s)
            if sandbox is not None:
                _unchanged(sandbox)
            return RawResult(columns, rows, meter.steps, time.monotonic() - started)
        except QueryFailed:
            if sandbox is not None:
                _unchanged(sandbox)
            raise
        except _GuardFired as fired:
            # an interrupt may still be pending on it: the next query gets a fresh one
            sandbox.close() if sandbox is not None else forget_path(path)
            raise QueryFailed(WALL_GUARD, sql_watchdog.describe(fired.watched), meter.steps) from None
        except (sqlite3.Error, sqlite3.Warning, MemoryError, ValueError, OverflowError, _Stopped) as exc:
            if "decode" in str(exc).lower() and conn.text_factory is str:
                conn.text_factory = _lenient_text  # text that is not UTF-8: read it byte-exact
                continue
            failed = _failure(exc, meter, budget_steps, wall_s, int(limits.max_program_ops))
            if failed.kind == OVER_CAP and _out_of_memory(exc):
                if not alone:
                    # The heap is shared: run it again with no other query beside it, on a fresh
                    # connection, after this thread closed every one it keeps (their page caches and
                    # prepared statements), so that the verdict is about this query, not about the
                    # databases judged before it.
                    forget_connections()
                    _give_back_heap()
                    guarded = _guarded(path, limits, sandbox)
                    conn = guarded.conn
                    alone = True
                    continue
                _give_back_heap()
            raise failed from None
        finally:
            turns.leave_alone() if entered_alone else turns.leave()


def _guarded(path: str, limits: Limits, sandbox: Sandbox | None) -> Guarded | Sandbox:
    """What a query runs on: the sandbox (made again, with its edit, where it was closed) or the
    thread's guarded connection to ``path``; either failing is an infrastructure failure."""
    if sandbox is None:
        return _open(path, limits)
    try:
        sandbox.conn  # noqa: B018 - made here, where a failure is the run's
    except SandboxBroken as exc:
        raise QueryFailed(INFRASTRUCTURE, str(exc)) from None
    return sandbox


def _unchanged(sandbox: Sandbox) -> None:
    try:
        sandbox.check_unchanged()
    except SandboxBroken as exc:
        raise QueryFailed(INFRASTRUCTURE, str(exc)) from None


_malloc_trim: list = []


def _give_back_heap() -> None:
    """After a query filled the heap ceiling: hand the freed memory back to the system (glibc's
    ``malloc_trim``), so that the process does not keep a runaway query's peak resident, in
    whichever malloc arena its memory came from. Nothing where the C library has no such call."""
    if not _malloc_trim:
        try:
            _malloc_trim.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):
            _malloc_trim.append(None)
    if _malloc_trim[0] is not None:
        _malloc_trim[0](0)


def _out_of_memory(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, MemoryError) or (isinstance(code, int) and code & 0xFF == 7) or \
        "out of memory" in str(exc).lower()


_SYNTAX = ("syntax error", "incomplete input", "unrecognized token")


def is_statement(path: str, text: str, limits: Limits) -> bool:
    """Whether SQLite's own parser reads ``text`` (one statement's text) as a statement.

    The text is compiled under ``EXPLAIN`` behind the same authorizer and limits, never run: a
    write or a PRAGMA is a statement (refused by the authorizer, which is a statement still), a
    sentence of prose is a syntax error. Used to tell a second statement after a query from
    trailing prose. The watchdog guards the compiling (QueryFailed WALL_GUARD when it fires).
    """
    body = text.strip()
    if not body or len(body) > limits.max_sql_chars:
        return bool(body)
    if sql_expansion.expansion(body, int(limits.max_expansion_tokens)) > limits.max_expansion_tokens:
        return True  # its WITH clauses read as SQLite reads them: a statement, too large to compile
    if _join_weight(body, int(limits.max_join_weight)) > limits.max_join_weight:
        return True  # its FROM clauses read as SQLite reads them: a statement, too costly to plan
    try:
        conn = connection(path, limits).conn
    except ConnectionFailed as exc:
        raise QueryFailed(INFRASTRUCTURE, str(exc)) from None
    explained = body if body[:7].upper() == "EXPLAIN" else "EXPLAIN " + body
    with sql_watchdog.WATCHDOG.watch(conn, limits.cpu_guard(limits.budget_floor_steps), limits.wall_guard_s) as watched:
        try:
            conn.execute(explained).close()
        except (sqlite3.Error, sqlite3.Warning, ValueError, MemoryError) as exc:
            if _out_of_memory(exc):
                _give_back_heap()  # it compiles as far as the heap or the program cap lets it: a statement
            if watched.fired is None:
                message = str(exc).lower()
                return not any(s in message for s in _SYNTAX)
    if watched.fired is not None:
        forget_path(path)
        raise QueryFailed(WALL_GUARD, sql_watchdog.describe(watched))
    return True
