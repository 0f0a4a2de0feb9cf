"""A guarded read-only SQLite connection, and the ones each thread keeps open (sql_guard runs queries).

What a connection is opened with (docs/bundle.md, "Hardening"): ``mode=ro&immutable=1``, an
allow-list authorizer (SELECT, reads, recursive CTEs and the core pure functions only), SQLite
limits (no attached database, capped strings, blobs, LIKE patterns and program size, no sorter
threads), no NOCASE or RTRIM collation,
``temp_store=MEMORY``, no memory map, ``query_only``, and the process-wide heap ceiling (a query
that ran out of that shared heap beside others runs again alone: ``sql.guard.TURNS``).

Connections are kept per thread, least recently used closed first, within a count and a page-cache
weight; a forked child never uses its parent's.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable
from typing import NamedTuple

from ..contract.limits import Limits
from . import functions as sql_functions


class ConnectionFailed(Exception):
    """The database could not be opened with its guards (missing, unreadable, not a database)."""


ALLOWED_FUNCTIONS = sql_functions.CALLABLE
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                              getattr(sqlite3, "SQLITE_RECURSIVE", 33)})
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})


def authorizer(tables: frozenset) -> Callable:
    """Allow SELECT, reads of the database's own tables (never an eponymous virtual table such as
    json_each or dbstat) and the functions of ``sql.functions``; deny everything else."""
    read, function = sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION

    def authorize(action: int, arg1: object, arg2: object, db: object, _trigger: object) -> int:
        if action not in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_DENY
        if action == function and str(arg2).lower() not in ALLOWED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        if action == read and db is not None and str(arg1).lower() not in tables:  # db None: a CTE's own rows
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    return authorize


_heap_lock = threading.Lock()
_heap_set = False


def _apply_heap_limit(conn: sqlite3.Connection, limit: int) -> None:
    # PRAGMA hard_heap_limit only ever lowers a limit already set; it is process-wide.
    global _heap_set
    with _heap_lock:
        if not _heap_set:
            conn.execute(f"PRAGMA hard_heap_limit={int(limit)}")
            _heap_set = True


CACHED_STATEMENTS = 16  # per connection: a GRPO group often repeats a query; run_query keeps counts exact


def database_uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


class Guarded(NamedTuple):
    """A guarded connection and its link to the meter of the query it runs."""

    conn: sqlite3.Connection
    charges: sql_functions.Charges


def open_guarded(path: str, limits: Limits) -> Guarded:
    """A read-only connection with every guard installed. Raises ConnectionFailed."""
    if not os.path.isfile(path):
        raise ConnectionFailed(f"database file not found: {path}")
    try:
        conn = sqlite3.connect(database_uri(path), uri=True, isolation_level=None,
                               cached_statements=CACHED_STATEMENTS)
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute(f"PRAGMA cache_size=-{int(limits.cache_pages_kib)}")
        conn.execute("PRAGMA mmap_size=0")
        conn.execute("PRAGMA query_only=1")
        harden_schema(conn)
        # Reads the schema now, before the length limit (a CREATE statement may be longer than a value).
        tables = readable_tables(conn)
        _apply_heap_limit(conn, limits.heap_limit_bytes)
    except sqlite3.Error as exc:
        raise ConnectionFailed(f"cannot open {path}: {exc}") from None
    return guard(conn, path, limits, tables)


def harden_schema(conn: sqlite3.Connection) -> None:
    """Trust nothing the database file itself holds: ``trusted_schema=OFF`` (a view, trigger, CHECK or
    index may call no function that is not innocuous), and SQLite's DEFENSIVE flag where this Python
    can set it (``Connection.setconfig``, 3.12+): no writable schema, no shadow-table writes. Layers
    beside the authorizer, which refuses such calls in a query already."""
    conn.execute("PRAGMA trusted_schema=OFF")
    setconfig = getattr(conn, "setconfig", None)
    defensive = getattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE", None)
    if setconfig is not None and defensive is not None:
        setconfig(defensive, True)


def readable_tables(conn: sqlite3.Connection) -> frozenset:
    """The names (lower case) a guarded query on ``conn`` may read: its tables and the schema's."""
    return frozenset(str(name).lower() for (name,) in
                     conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")) | _SCHEMA_TABLES


def guard(conn: sqlite3.Connection, path: str, limits: Limits, tables: frozenset) -> Guarded:
    """Install the limits, the charged functions, the collations' removal and the authorizer on an
    open ``conn`` (``path``: its file, or ``:memory:``; ``tables``: the names it may read). Raises
    ConnectionFailed (and closes ``conn``) where this Python cannot set SQLite's limits."""
    length, like_pattern = int(limits.max_cell_bytes), int(limits.max_cell_bytes)
    try:
        sql_functions.set_limit(conn, sql_functions.LIMIT_ATTACHED, 0, path)
        sql_functions.set_limit(conn, sql_functions.LIMIT_LENGTH, length, path)
        sql_functions.set_limit(conn, sql_functions.LIMIT_WORKER_THREADS, 0, path)
        sql_functions.set_limit(conn, sql_functions.LIMIT_LIKE_PATTERN, like_pattern, path)
        sql_functions.set_limit(conn, sql_functions.LIMIT_SQL_LENGTH, max(int(limits.max_sql_chars) * 4, 1000), path)
        sql_functions.set_limit(conn, sql_functions.LIMIT_VDBE_OP, int(limits.max_program_ops), path)
    except sql_functions.LimitUnavailable as exc:
        conn.close()
        raise ConnectionFailed(f"cannot cap value sizes on this Python ({exc}); the scorer needs CPython 3.9 or "
                               "newer with its standard sqlite3 and ctypes modules") from None
    charges = sql_functions.install(conn, int(limits.charge_base_steps), int(limits.charge_bytes_per_step),
                                    length, like_pattern)
    sql_functions.remove_collations(conn)
    conn.set_authorizer(authorizer(tables))
    return Guarded(conn, charges)


class _ThreadShare:
    """The memory one thread's open connections may hold, counted in the process-wide total too;
    given back when the thread ends (its connections are freed with it)."""

    def __init__(self) -> None:
        self.bytes, self.pid = 0, os.getpid()

    def add(self, delta: int) -> None:
        self.bytes += delta
        if self.pid == os.getpid():  # a forked child starts its total from nothing (_after_fork)
            with _cached_lock:
                _cached[0] += delta

    def __del__(self) -> None:
        try:
            self.add(-self.bytes)
        except Exception:  # noqa: BLE001 - at interpreter exit the lock may be gone; nothing to give back to
            pass


class _ThreadConnections(threading.local):
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.by_path: collections.OrderedDict[tuple, tuple[Guarded, int]] = collections.OrderedDict()
        self.share = _ThreadShare()


_local = _ThreadConnections()
# Open connections a thread keeps: at most this many, and at most this much memory between them
# (each holds at most its file's size or cache_pages_kib, whichever is less, in pages, and
# _CONNECTION_BYTES besides): a bundle's many small neighbour databases all stay open, a few large
# databases are closed least recently used first.
_MAX_CACHED_PER_THREAD = 256
_MAX_CACHE_BYTES_PER_THREAD = 48 * 1024 * 1024
# Every thread's open connections (page caches, schemas, statements) count against the one
# process-wide heap ceiling, so all threads together keep at most this much (a quarter of the
# default ceiling): a thread opening one more connection past it closes its own least recently used.
# Many threads (an audit's eight, a trainer's pool) must leave the heap to the query that runs, or
# whether a query is over the memory cap would depend on its company.
_MAX_CACHE_BYTES = 64 * 1024 * 1024
# What an open connection holds besides its page cache: its parsed schema and cached statements,
# about 130 KiB on Spider's databases (SQLite 3.40, measured with sqlite3_memory_used), counted high.
_CONNECTION_BYTES = 192 * 1024
_cached = [0]
_cached_lock = threading.Lock()


def hold(delta: int) -> None:
    """Count ``delta`` bytes more (or fewer) in the memory open connections hold: an in-memory copy
    of a database (``sql.sandbox``) lives in the same heap."""
    with _cached_lock:
        _cached[0] += delta


_forget_hooks: list[Callable[[], None]] = []


def on_forget(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever ``forget_connections`` runs (``sql.sandbox`` frees its copies then)."""
    _forget_hooks.append(hook)


def cached_bytes() -> int:
    """The memory all threads' open connections may hold, at most, as counted here (tests read it)."""
    return _cached[0]


def connection(path: str, limits: Limits) -> Guarded:
    """This thread's open connection to ``path`` with ``limits``' guards (opened when needed)."""
    key = (path, limits.max_cell_bytes, limits.cache_pages_kib, limits.max_sql_chars, limits.charge_base_steps,
           limits.charge_bytes_per_step, limits.max_program_ops)
    if _local.pid != os.getpid():  # a forked child must not use its parent's connections
        _local.pid, _local.by_path, _local.share = os.getpid(), collections.OrderedDict(), _ThreadShare()
    cache = _local.by_path
    found = cache.get(key)
    if found is not None:
        cache.move_to_end(key)
        return found[0]
    weight = min(os.path.getsize(path), int(limits.cache_pages_kib) * 1024) + _CONNECTION_BYTES
    for old in _make_room(cache, _local.share, weight):
        old.conn.close()
    try:
        guarded = open_guarded(path, limits)
    except BaseException:
        _local.share.add(-weight)
        raise
    cache[key] = (guarded, weight)
    return guarded


def _make_room(cache: collections.OrderedDict, share: _ThreadShare, weight: int) -> list[Guarded]:
    """Count ``weight`` for the connection about to open and take this thread's least recently used
    connections out of the count until the bounds hold again (or none is left), in one step under the
    lock: connections are closed before the new one opens, so the process-wide total never counts
    more than the bound plus one connection a thread. Returns the connections to close."""
    evicted = []
    with _cached_lock:
        counted = share.pid == os.getpid()
        share.bytes += weight
        _cached[0] += weight if counted else 0
        while cache and (len(cache) >= _MAX_CACHED_PER_THREAD or share.bytes > _MAX_CACHE_BYTES_PER_THREAD
                         or _cached[0] > _MAX_CACHE_BYTES):
            old, old_weight = cache.popitem(last=False)[1]
            evicted.append(old)
            share.bytes -= old_weight
            _cached[0] -= old_weight if counted else 0
    return evicted


def forget_path(path: str) -> None:
    """Close this thread's cached connections to ``path`` (a search database judged, or a connection
    an interrupt may still be pending on)."""
    cache = _local.by_path
    for key in [k for k in cache if k[0] == path]:
        old, weight = cache.pop(key)
        old.conn.close()
        _local.share.add(-weight)


def forget_connections() -> None:
    """Close this thread's cached connections and in-memory copies (tests use it before comparing files)."""
    for hook in _forget_hooks:
        hook()
    while _local.by_path:
        old, weight = _local.by_path.popitem()[1]
        old.conn.close()
        _local.share.add(-weight)


def _after_fork() -> None:
    _cached[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
