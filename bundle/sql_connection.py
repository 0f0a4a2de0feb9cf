"""A guarded read-only SQLite connection, and the ones each thread keeps open (sql_guard runs queries).

What a connection is opened with (docs/bundle.md, "Hardening"): ``mode=ro&immutable=1``, an
allow-list authorizer (SELECT, reads, recursive CTEs and the core pure functions only), SQLite
limits (no attached database, capped strings, blobs and LIKE patterns, no sorter threads),
``temp_store=MEMORY``, no memory map, ``query_only``, and the process-wide heap ceiling. A query
that ran out of that shared heap beside others runs again alone (``TURNS``).

Connections are kept per thread, least recently used closed first, within a count and a page-cache
weight; a forked child never uses its parent's.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import threading
import urllib.parse

try:
    from .scoring_limits import Limits
except ImportError:  # run as a standalone file
    from scoring_limits import Limits  # type: ignore[no-redef]


class ConnectionFailed(Exception):
    """The database could not be opened with its guards (missing, unreadable, not a database)."""


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


_CACHED_STATEMENTS = 16  # per connection: a GRPO group often repeats a query; run_query keeps counts exact


def database_uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def open_guarded(path: str, limits: Limits) -> sqlite3.Connection:
    """A read-only connection with every guard installed. Raises ConnectionFailed."""
    if not os.path.isfile(path):
        raise ConnectionFailed(f"database file not found: {path}")
    try:
        conn = sqlite3.connect(database_uri(path), uri=True, isolation_level=None,
                               cached_statements=_CACHED_STATEMENTS)
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute(f"PRAGMA cache_size=-{int(limits.cache_pages_kib)}")
        conn.execute("PRAGMA mmap_size=0")
        conn.execute("PRAGMA query_only=1")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the schema now
        _apply_heap_limit(conn, limits.heap_limit_bytes)
    except sqlite3.Error as exc:
        raise ConnectionFailed(f"cannot open {path}: {exc}") from None
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


def connection(path: str, limits: Limits) -> sqlite3.Connection:
    """This thread's open connection to ``path`` with ``limits``' guards (opened when needed)."""
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
    TURNS.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
