"""Run one untrusted SELECT on a read-only SQLite database, within limits.

Layers, none of which relies on reading the SQL text (README, "Hardening"):

* the file is opened ``mode=ro&immutable=1``: SQLite cannot write, lock or create side files;
* an allow-list authorizer: only SELECT, reads, recursive CTEs and known pure functions; every
  write, ATTACH (and so VACUUM INTO), PRAGMA, transaction and ``load_extension`` is refused;
* SQLite limits: no attached databases, strings and blobs capped, no sorter threads (Python 3.11+;
  older sqlite3 modules cannot set them, and the heap ceiling is then the only bound on values);
* ``temp_store=MEMORY`` (a runaway sort never spills to disk) and a process-wide heap ceiling;
* a progress handler that counts SQLite's VM steps and stops the query when it is over its step
  budget (deterministic: the same query on the same database always takes the same steps), or
  when the wall-clock guard fires (the machine is far too slow: not the query's verdict);
* ``fetchmany`` with a row cap and a byte budget, so a huge result is refused before it is held;
* Python's sqlite3 refuses a second statement in the same text.

Connections are cached per thread (one per database file), so the cost of opening and of reading
the schema is paid once per thread; a cached connection has no state a query could change.
Statements are never cached: SQLite counts a reused statement's steps from where its last run
left off, which would make the step count, and so the verdict, depend on history.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import threading
import time
import urllib.parse
from typing import NamedTuple

try:
    from .scoring_limits import Limits
except ImportError:  # run as a standalone file
    from scoring_limits import Limits  # type: ignore[no-redef]

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
    steps: int  # VM steps counted, in units of limits.progress_steps
    seconds: float


_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                              getattr(sqlite3, "SQLITE_RECURSIVE", 33)})

# Core SQLite functions (scalar, aggregate, window, date, math, JSON). Anything else is refused.
# printf/format are left out: a huge precision ('%.*c') loops for seconds inside one VM step,
# where no step count can reach it, whatever the length limit. Spider's golds never use them.
ALLOWED_FUNCTIONS = frozenset("""
abs changes char coalesce concat concat_ws glob hex ifnull iif instr last_insert_rowid length
like likelihood likely lower ltrim max min nullif octet_length quote random randomblob replace
round rtrim sign soundex sqlite_version substr substring total_changes trim typeof unhex unicode
unlikely upper zeroblob avg count group_concat string_agg sum total row_number rank dense_rank
percent_rank cume_dist ntile lag lead first_value last_value nth_value date time datetime julianday
unixepoch strftime timediff current_date current_time current_timestamp acos acosh asin asinh atan
atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10 log2 mod pi pow power radians sin
sinh sqrt tan tanh trunc json json_array json_array_length json_extract json_insert json_object
json_patch json_remove json_replace json_set json_type json_valid json_quote json_group_array
json_group_object json_each json_tree jsonb median
""".split())

# sqlite3 limit categories (numeric values from sqlite3.h; Python names them only from 3.11).
_LIMIT_LENGTH, _LIMIT_SQL_LENGTH, _LIMIT_ATTACHED, _LIMIT_LIKE_PATTERN, _LIMIT_WORKER_THREADS = 0, 1, 7, 8, 11
# A LIKE/GLOB pattern costs up to (text length x pattern length) in one VM step: keep both small.
LIKE_PATTERN_MAX = 1000
_RESULT_CODE_KIND = {
    7: OVER_CAP,  # SQLITE_NOMEM
    18: OVER_CAP,  # SQLITE_TOOBIG
    23: FORBIDDEN,  # SQLITE_AUTH
    8: FORBIDDEN,  # SQLITE_READONLY
    3: INFRASTRUCTURE, 10: INFRASTRUCTURE, 11: INFRASTRUCTURE, 13: INFRASTRUCTURE,
    14: INFRASTRUCTURE, 26: INFRASTRUCTURE,  # PERM IOERR CORRUPT FULL CANTOPEN NOTADB
}
_MESSAGE_KIND = (
    ("not authorized", FORBIDDEN), ("too big", OVER_CAP),
    ("out of memory", OVER_CAP), ("one statement at a time", FORBIDDEN), ("readonly", FORBIDDEN),
    ("not a database", INFRASTRUCTURE), ("malformed", INFRASTRUCTURE), ("disk i/o", INFRASTRUCTURE),
    ("unable to open", INFRASTRUCTURE),
)
_INTERRUPT = 9  # SQLITE_INTERRUPT: our progress handler stopped the query


def _authorize(action: int, arg1: object, arg2: object, _db: object, _trigger: object) -> int:
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() not in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


_heap_lock = threading.Lock()
_heap_set = False


def _apply_heap_limit(conn: sqlite3.Connection, limit: int) -> None:
    # PRAGMA hard_heap_limit only ever lowers a limit already set; it is process-wide.
    global _heap_set
    with _heap_lock:
        if not _heap_set:
            conn.execute(f"PRAGMA hard_heap_limit={int(limit)}")
            _heap_set = True


class _HeapTurns:
    """Queries of one process share SQLite's heap ceiling; a query that ran out of memory beside
    others is run again alone, so that "over the memory cap" is about the query, not its company.

    The common path is one uncontended lock; only a query that must run alone waits (and makes
    new queries wait) until every running query has left.
    """

    def __init__(self) -> None:
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


_turns = _HeapTurns()


def database_uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def open_guarded(path: str, limits: Limits) -> sqlite3.Connection:
    """A read-only connection with every guard installed. Raises QueryFailed(INFRASTRUCTURE)."""
    if not os.path.isfile(path):
        raise QueryFailed(INFRASTRUCTURE, f"database file not found: {path}")
    try:
        conn = sqlite3.connect(database_uri(path), uri=True, isolation_level=None,
                               cached_statements=0)
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute(f"PRAGMA cache_size=-{int(limits.cache_pages_kib)}")
        conn.execute("PRAGMA mmap_size=0")
        conn.execute("PRAGMA query_only=1")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the schema now
        _apply_heap_limit(conn, limits.heap_limit_bytes)
    except sqlite3.Error as exc:
        raise QueryFailed(INFRASTRUCTURE, f"cannot open {path}: {exc}") from None
    if hasattr(conn, "setlimit"):  # Python 3.11+
        conn.setlimit(_LIMIT_ATTACHED, 0)
        conn.setlimit(_LIMIT_LENGTH, int(limits.max_cell_bytes))
        conn.setlimit(_LIMIT_WORKER_THREADS, 0)
        conn.setlimit(_LIMIT_LIKE_PATTERN, LIKE_PATTERN_MAX)
        conn.setlimit(_LIMIT_SQL_LENGTH, max(int(limits.max_sql_chars) * 4, 1000))
    conn.set_authorizer(_authorize)
    return conn


class _ThreadConnections(threading.local):
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.by_path: collections.OrderedDict[tuple, tuple[sqlite3.Connection, int]] = collections.OrderedDict()
        self.bytes = 0  # page cache the open connections may hold, at most


_local = _ThreadConnections()
# Open connections a thread keeps: at most this many, and at most this much page cache between them
# (each holds at most its file's size or cache_pages_kib, whichever is less): a bundle's many small
# neighbour databases all stay open, a few large databases are closed least recently used first.
_MAX_CACHED_PER_THREAD = 256
_MAX_CACHE_BYTES_PER_THREAD = 48 * 1024 * 1024


def _connection(path: str, limits: Limits) -> sqlite3.Connection:
    key = (path, limits.max_cell_bytes, limits.cache_pages_kib, limits.max_sql_chars)
    if _local.pid != os.getpid():  # a forked child must not use its parent's connections
        _local.pid, _local.by_path, _local.bytes = os.getpid(), collections.OrderedDict(), 0
    cache = _local.by_path
    found = cache.get(key)
    if found is not None:
        cache.move_to_end(key)
        return found[0]
    conn = open_guarded(path, limits)
    weight = min(os.path.getsize(path), int(limits.cache_pages_kib) * 1024)
    cache[key] = (conn, weight)
    _local.bytes += weight
    while len(cache) > 1 and (len(cache) > _MAX_CACHED_PER_THREAD or _local.bytes > _MAX_CACHE_BYTES_PER_THREAD):
        old, old_weight = cache.popitem(last=False)[1]
        old.close()
        _local.bytes -= old_weight
    return conn


def forget_connections() -> None:
    """Close this thread's cached connections (tests use it before comparing files)."""
    while _local.by_path:
        _local.by_path.popitem()[1][0].close()
    _local.bytes = 0


def _after_fork() -> None:
    global _turns
    _turns = _HeapTurns()  # a lock held by a thread of the parent would never be released here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


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


_CELL_CAPPED = hasattr(sqlite3.Connection, "setlimit")  # Python 3.11+: SQLITE_LIMIT_LENGTH bounds each cell


def _fetch(cursor: sqlite3.Cursor, limits: Limits) -> list[tuple]:
    rows: list[tuple] = []
    budget = limits.max_result_bytes
    # While even cells of the largest size allowed could not exceed the byte budget, there is
    # nothing to count (most results, fetched in one call); past that, every string and blob is.
    ncols = len(cursor.description or ()) or 1
    uncounted = min(budget // (ncols * (8 + limits.max_cell_bytes)), limits.max_rows + 1) if _CELL_CAPPED else 0
    counted = 0
    size = max(uncounted, 256)
    while True:
        chunk = cursor.fetchmany(size)
        rows.extend(chunk)
        if len(rows) > limits.max_rows:
            raise QueryFailed(OVER_CAP, f"more than {limits.max_rows} rows")
        if len(rows) > uncounted:
            for row in rows[counted:]:
                budget -= 8 * len(row)
                for value in row:
                    if value.__class__ is str or value.__class__ is bytes:
                        budget -= len(value)
            counted = len(rows)
            if budget < 0:
                raise QueryFailed(OVER_CAP, f"result larger than {limits.max_result_bytes} bytes")
        if len(chunk) < size:
            return rows
        size = 256


class _Meter:
    """The progress handler: one call per ``progress_steps`` VM steps, counted against a budget.

    The wall clock is read every 8th call only (every 8,000 steps by default): it only guards.
    """

    __slots__ = ("count", "handler")

    def __init__(self, max_calls: int, deadline: float) -> None:
        count: list = [0, None]  # calls so far, and why the query was stopped
        self.count = count
        clock = time.monotonic

        def handler() -> int:
            calls = count[0] = count[0] + 1
            if calls > max_calls:
                count[1] = OVER_BUDGET
                return 1
            if not calls & 7 and clock() >= deadline:
                count[1] = WALL_GUARD
                return 1
            return 0

        self.handler = handler

    @property
    def calls(self) -> int:
        return self.count[0]  # type: ignore[return-value]

    @property
    def stopped(self) -> str | None:
        return self.count[1]  # type: ignore[return-value]


def _execute_once(conn: sqlite3.Connection, sql: str, meter: _Meter, limits: Limits) -> tuple:
    conn.set_progress_handler(meter.handler, int(limits.progress_steps))
    try:
        cursor = conn.execute(sql)
        if cursor.description is None:  # ran, but is no query (REINDEX is not authorizer-checked)
            raise QueryFailed(FORBIDDEN, "not a query: the statement returns no result columns")
        rows = _fetch(cursor, limits)
        columns = tuple(d[0] for d in cursor.description or ())
        cursor.close()
        return columns, rows
    finally:
        conn.set_progress_handler(None, 0)


def _failure(exc: BaseException, meter: _Meter, unit: int, budget_steps: int, wall_s: float) -> QueryFailed:
    steps = meter.calls * unit
    code = getattr(exc, "sqlite_errorcode", None)
    interrupted = (isinstance(code, int) and code & 0xFF == _INTERRUPT) or "interrupted" in str(exc).lower()
    if interrupted and meter.stopped == OVER_BUDGET:
        return QueryFailed(OVER_BUDGET, f"over its budget of {budget_steps:,} SQLite VM steps", steps)
    if interrupted and meter.stopped == WALL_GUARD:
        return QueryFailed(WALL_GUARD, f"still within its step budget when the {wall_s:g} s wall-clock "
                                       "guard fired: the machine is far too slow or overloaded", steps)
    kind = classify(exc)
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return QueryFailed(kind, detail[:300], steps)


def run_query(path: str, sql: str, limits: Limits, *, budget_steps: int, wall_s: float) -> RawResult:
    """Execute ``sql`` on the database at ``path``; the full result or QueryFailed.

    The query may take ``budget_steps`` VM steps (counted in units of ``limits.progress_steps``);
    ``wall_s`` seconds is only a guard, reported as the kind WALL_GUARD, never as over budget.
    """
    if len(sql) > limits.max_sql_chars:
        raise QueryFailed(OVER_CAP, f"query longer than {limits.max_sql_chars} characters")
    started = time.monotonic()
    unit = int(limits.progress_steps)
    conn = _connection(path, limits)
    alone = False
    while True:
        meter = _Meter(budget_steps // unit, started + wall_s)
        turns, entered_alone = _turns, alone
        turns.enter_alone() if entered_alone else turns.enter()
        try:
            columns, rows = _execute_once(conn, sql, meter, limits)
            return RawResult(columns, rows, meter.calls * unit, time.monotonic() - started)
        except QueryFailed:
            raise
        except (sqlite3.Error, sqlite3.Warning, MemoryError, ValueError, OverflowError) as exc:
            if "decode" in str(exc).lower() and conn.text_factory is str:
                conn.text_factory = _lenient_text  # text that is not UTF-8: read it byte-exact
                continue
            failed = _failure(exc, meter, unit, budget_steps, wall_s)
            if failed.kind == OVER_CAP and not alone and _out_of_memory(exc):
                alone = True  # the heap is shared: run it again with no other query beside it
                continue
            raise failed from None
        finally:
            turns.leave_alone() if entered_alone else turns.leave()


def _out_of_memory(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, MemoryError) or (isinstance(code, int) and code & 0xFF == 7) or \
        "out of memory" in str(exc).lower()


_SYNTAX = ("syntax error", "incomplete input", "unrecognized token")


def is_statement(path: str, text: str, limits: Limits) -> bool:
    """Whether SQLite's own parser reads ``text`` (one statement's text) as a statement.

    The text is compiled under ``EXPLAIN`` behind the same authorizer, never run: a write or a
    PRAGMA is a statement (refused by the authorizer, which is a statement still), a sentence of
    prose is a syntax error. Used to tell a second statement after a query from trailing prose.
    """
    body = text.strip()
    if not body or len(body) > limits.max_sql_chars:
        return bool(body)
    conn = _connection(path, limits)
    explained = body if body[:7].upper() == "EXPLAIN" else "EXPLAIN " + body
    try:
        conn.execute(explained).close()
    except (sqlite3.Error, sqlite3.Warning, ValueError) as exc:
        message = str(exc).lower()
        return not any(s in message for s in _SYNTAX)
    return True
