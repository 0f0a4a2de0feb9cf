"""Run one untrusted SELECT on a read-only SQLite database, within limits.

Layers, none of which relies on reading the SQL text (README, "Hardening"):

* the file is opened ``mode=ro&immutable=1``: SQLite cannot write, lock or create side files;
* an allow-list authorizer: only SELECT, reads, recursive CTEs and known pure functions; every
  write, ATTACH (and so VACUUM INTO), PRAGMA, transaction and ``load_extension`` is refused;
* SQLite limits: no attached databases, strings and blobs capped, no sorter threads (Python 3.11+;
  older sqlite3 modules cannot set them, and the heap ceiling is then the only bound on values);
* ``temp_store=MEMORY`` (a runaway sort never spills to disk) and a process-wide heap ceiling;
* a progress handler that interrupts the query at its deadline (the CPU is freed at once);
* ``fetchmany`` with a row cap and a byte budget, so a huge result is refused before it is held;
* Python's sqlite3 refuses a second statement in the same text.

Connections are cached per thread (one per database file), so the cost of opening and of reading
the schema is paid once per thread; a cached connection has no state a query could change.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sqlite3
import threading
import time
import urllib.parse

try:
    from .scoring_limits import Limits
except ImportError:  # run as a standalone file
    from scoring_limits import Limits  # type: ignore[no-redef]

# Failure kinds: the caller maps them to outcomes.
ERROR, FORBIDDEN, TIMEOUT, OVER_CAP, INFRASTRUCTURE = "error", "forbidden", "timeout", "over_cap", "infrastructure"


class QueryFailed(Exception):
    """The query did not produce a complete result; ``kind`` says why."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class RawResult:
    columns: tuple[str, ...]
    rows: list[tuple]
    seconds: float


_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                              getattr(sqlite3, "SQLITE_RECURSIVE", 33)})

# Core SQLite functions (scalar, aggregate, window, date, math, JSON). Anything else is refused.
# printf/format are left out: a huge precision ('%.*c') loops for seconds inside one VM step,
# where no deadline can reach it, whatever the length limit. Spider's golds never use them.
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
    9: TIMEOUT,  # SQLITE_INTERRUPT
    7: OVER_CAP,  # SQLITE_NOMEM
    18: OVER_CAP,  # SQLITE_TOOBIG
    23: FORBIDDEN,  # SQLITE_AUTH
    8: FORBIDDEN,  # SQLITE_READONLY
    3: INFRASTRUCTURE, 10: INFRASTRUCTURE, 11: INFRASTRUCTURE, 13: INFRASTRUCTURE,
    14: INFRASTRUCTURE, 26: INFRASTRUCTURE,  # PERM IOERR CORRUPT FULL CANTOPEN NOTADB
}
_MESSAGE_KIND = (
    ("interrupted", TIMEOUT), ("not authorized", FORBIDDEN), ("too big", OVER_CAP),
    ("out of memory", OVER_CAP), ("one statement at a time", FORBIDDEN), ("readonly", FORBIDDEN),
    ("not a database", INFRASTRUCTURE), ("malformed", INFRASTRUCTURE), ("disk i/o", INFRASTRUCTURE),
    ("unable to open", INFRASTRUCTURE),
)


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


def database_uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def open_guarded(path: str, limits: Limits) -> sqlite3.Connection:
    """A read-only connection with every guard installed. Raises QueryFailed(INFRASTRUCTURE)."""
    if not os.path.isfile(path):
        raise QueryFailed(INFRASTRUCTURE, f"database file not found: {path}")
    try:
        conn = sqlite3.connect(database_uri(path), uri=True, isolation_level=None,
                               cached_statements=64)
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
        self.by_path: collections.OrderedDict[tuple, sqlite3.Connection] = collections.OrderedDict()


_local = _ThreadConnections()
_MAX_CACHED_PER_THREAD = 8


def _connection(path: str, limits: Limits) -> sqlite3.Connection:
    key = (path, limits.max_cell_bytes, limits.cache_pages_kib, limits.max_sql_chars)
    if _local.pid != os.getpid():  # a forked child must not use its parent's connections
        _local.pid, _local.by_path = os.getpid(), collections.OrderedDict()
    cache = _local.by_path
    conn = cache.get(key)
    if conn is not None:
        cache.move_to_end(key)
        return conn
    conn = open_guarded(path, limits)
    cache[key] = conn
    while len(cache) > _MAX_CACHED_PER_THREAD:
        cache.popitem(last=False)[1].close()
    return conn


def forget_connections() -> None:
    """Close this thread's cached connections (tests use it before comparing files)."""
    while _local.by_path:
        _local.by_path.popitem()[1].close()


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


def _fetch(cursor: sqlite3.Cursor, limits: Limits) -> list[tuple]:
    rows: list[tuple] = []
    budget = limits.max_result_bytes
    while True:
        chunk = cursor.fetchmany(256)
        if not chunk:
            return rows
        rows.extend(chunk)
        if len(rows) > limits.max_rows:
            raise QueryFailed(OVER_CAP, f"more than {limits.max_rows} rows")
        for row in chunk:
            budget -= 8 * len(row)
            for value in row:
                if value.__class__ is str or value.__class__ is bytes:
                    budget -= len(value)
        if budget < 0:
            raise QueryFailed(OVER_CAP, f"result larger than {limits.max_result_bytes} bytes")


def _execute_once(conn: sqlite3.Connection, sql: str, deadline: float, limits: Limits) -> tuple:
    clock = time.monotonic

    def past_deadline() -> int:
        return clock() >= deadline

    conn.set_progress_handler(past_deadline, int(limits.progress_steps))
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


def run_query(path: str, sql: str, timeout_s: float, limits: Limits) -> RawResult:
    """Execute ``sql`` on the database at ``path``; the full result or QueryFailed."""
    if len(sql) > limits.max_sql_chars:
        raise QueryFailed(OVER_CAP, f"query longer than {limits.max_sql_chars} characters")
    started = time.monotonic()
    deadline = started + timeout_s
    conn = _connection(path, limits)
    for attempt in (1, 2):
        try:
            columns, rows = _execute_once(conn, sql, deadline, limits)
            return RawResult(columns, rows, time.monotonic() - started)
        except QueryFailed:
            raise
        except (sqlite3.Error, sqlite3.Warning, MemoryError, ValueError, OverflowError) as exc:
            kind = classify(exc)
            if kind == TIMEOUT and time.monotonic() < deadline:
                kind = ERROR  # interrupted by something other than our deadline
            if "decode" in str(exc).lower() and conn.text_factory is str:
                conn.text_factory = _lenient_text  # text that is not UTF-8: read it byte-exact
                continue
            if kind == OVER_CAP and attempt == 1 and isinstance(exc, MemoryError):
                continue  # the heap ceiling is process-wide: another query may have filled it; retry once
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if kind == TIMEOUT:
                detail = f"stopped at the {timeout_s:g} s deadline"
            raise QueryFailed(kind, detail[:300]) from None
    raise QueryFailed(OVER_CAP, "out of memory twice")  # pragma: no cover - loop always returns
