"""A private, writable copy of a database in memory: the search aimed at the difference edits it.

The search aimed at the difference (``search.difference``) judges an answer on the original with
one thing changed: a cell, a row added, a row removed. Writing a new file for each would cost
more than the queries; instead each thread keeps, per original, one copy in memory (SQLite's
backup), and an edit is applied inside a savepoint and rolled back after the queries ran.

The copy carries every guard of a read-only connection (``sql.connection.guard``: the allow-list
authorizer, SQLite's limits, the charged functions, no NOCASE or RTRIM) whenever a query of a
model or a gold runs on it. Only this module's own statements write, with the authorizer lifted
and ``query_only`` off for the time of the edit and nothing else. A query that changed the copy
anyway (``total_changes`` moved) would break the guard: it is an infrastructure error, and the copy
is rebuilt. A second copy without guards (``plain``), edited alike, is what the bundle's own
reads use (the edits' values, the proof of the invariants): no model's text ever runs there.

The copies live in SQLite's heap, so their size counts in the memory the process's open
connections may hold (``sql.connection.hold``); each thread keeps at most ``MAX_PER_THREAD`` and
closes them with its cached connections (``sql.connection.forget_connections``), after which they
are made again, with the edit of the moment replayed, the next time they are used.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "s.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript("CREATE TABLE t(a); INSERT INTO t VALUES (1), (2);")
>>> box = Sandbox(path, DEFAULT_LIMITS)
>>> box.apply([("INSERT INTO t VALUES (?)", (3,))])
>>> box.conn.execute("SELECT count(*) FROM t").fetchone()[0]
3
>>> box.undo(); box.conn.execute("SELECT count(*) FROM t").fetchone()[0]
2
>>> box.conn.execute("DELETE FROM t")
Traceback (most recent call last):
...
sqlite3.DatabaseError: not authorized
>>> box.close()
"""

from __future__ import annotations

import collections
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence

from ..contract.limits import DEFAULT_LIMITS, Limits
from . import connection as sql_connection
from . import functions as sql_functions

__all__ = ["DEFAULT_LIMITS", "SandboxBroken", "Sandbox", "sandbox", "Statements"]

Statements = Sequence[tuple[str, tuple]]  # an edit: statements with their parameters
MAX_PER_THREAD = 4  # copies a thread keeps (least recently used closed first)
_OVERHEAD = 256 * 1024  # what a copy holds besides its pages: schema, statements, the savepoint's journal


class SandboxBroken(Exception):
    """The copy cannot be made or was changed by a query: an infrastructure error, never a score."""


class Sandbox:
    """One thread's copy of the database at ``path``, with the guards of ``limits`` (module docstring)."""

    def __init__(self, path: str, limits: Limits) -> None:
        self.path, self.limits = path, limits
        self.pending: tuple = ()  # the edit applied now (replayed where the copy is made again)
        self._on_plain = True  # whether the unguarded twin holds it too
        self._conn: sqlite3.Connection | None = None
        self._plain: sqlite3.Connection | None = None
        self._charges: sql_functions.Charges | None = None
        self._authorize: Callable | None = None
        self.weight = 0
        self.changes = 0

    # -- the connection, made on first use and after a close ------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self._open()
        assert self._conn is not None
        return self._conn

    @property
    def plain(self) -> sqlite3.Connection:
        """The unguarded twin, for the bundle's own reads (never a model's or a gold's query)."""
        if self._conn is None:
            self._open()
        assert self._plain is not None
        return self._plain

    @property
    def charges(self) -> sql_functions.Charges:
        if self._conn is None:
            self._open()
        assert self._charges is not None
        return self._charges

    def _open(self) -> None:
        try:
            source = sqlite3.connect(sql_connection.database_uri(self.path), uri=True)
        except sqlite3.Error as exc:
            raise SandboxBroken(f"cannot open {self.path}: {exc}") from None
        try:
            size = os.path.getsize(self.path)
            sql_connection.hold(2 * (size + _OVERHEAD))
            self.weight = 2 * (size + _OVERHEAD)
            # No statement cache: a statement prepared anew counts its steps from nought (exact units).
            plain = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=True, cached_statements=0)
            source.backup(plain)
            plain.text_factory = _lenient_text
            self._plain = plain
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=True,
                                   cached_statements=sql_connection.CACHED_STATEMENTS)
            source.backup(conn)
            conn.execute("PRAGMA temp_store=MEMORY")
            tables = sql_connection.readable_tables(conn)
            conn.execute("PRAGMA query_only=1")
            sql_connection.harden_schema(conn)
            guarded = sql_connection.guard(conn, ":memory:", self.limits, tables)
        except (sqlite3.Error, OSError, sql_connection.ConnectionFailed) as exc:
            self.close()
            raise SandboxBroken(f"cannot copy {self.path} into memory: {exc}") from None
        finally:
            source.close()
        self._conn, self._charges = guarded.conn, guarded.charges
        self._authorize = sql_connection.authorizer(tables)
        self.changes = self._conn.total_changes
        if self.pending:
            statements, self.pending = self.pending, ()
            self.apply(statements, self._on_plain)

    def close(self) -> None:
        """Free the copy; the next use makes it again (with the edit of the moment)."""
        for conn in (self._conn, self._plain):
            if conn is not None:
                conn.close()
        self._conn = self._plain = None
        self._release()

    def _release(self) -> None:
        if self.weight:
            sql_connection.hold(-self.weight)
            self.weight = 0

    # -- edits -----------------------------------------------------------------------------------
    def apply(self, statements: Statements, plain: bool = True) -> None:
        """Apply an edit inside a savepoint (``undo`` takes it back); to the unguarded twin too
        unless ``plain`` is False (its reads are done: only queries run now). Raises sqlite3.Error
        where a statement fails (a constraint refuses it): the edit is then taken back already."""
        if self.pending:
            raise RuntimeError("an edit is applied already: undo it first")
        conn = self.conn
        targets = (self.plain, conn) if plain else (conn,)
        self._writable(conn)
        try:
            for target in targets:
                if not target.in_transaction:  # the savepoint stays open between edits: undo rolls back to it
                    target.execute("SAVEPOINT difference_edit")
            try:
                for target in targets:
                    for sql, params in statements:
                        target.execute(sql, params)
            except BaseException:
                for target in targets:
                    target.execute("ROLLBACK TO difference_edit")
                raise
        finally:
            self._guarded(conn)
        self.pending, self._on_plain = tuple(statements), plain

    def undo(self) -> None:
        """Take back the edit applied (nothing when none is); the savepoint stays open for the next."""
        if not self.pending:
            return
        self.pending = ()
        if self._conn is None:
            return  # closed meanwhile: the next copy starts from the original
        conn = self._conn
        self._writable(conn)
        try:
            for target in (self._plain if self._on_plain else None, conn):
                if target is not None:
                    target.execute("ROLLBACK TO difference_edit")
        finally:
            self._guarded(conn)

    def check_unchanged(self) -> None:
        """After an untrusted query: raise SandboxBroken (and drop the copy) if it changed anything."""
        if self._conn is not None and self._conn.total_changes != self.changes:
            self.pending = ()
            self.close()
            raise SandboxBroken("a query changed the in-memory copy, which its guards should have refused")

    def _writable(self, conn: sqlite3.Connection) -> None:
        conn.set_authorizer(_allow_all)  # not None: Python before 3.11 cannot lift an authorizer so
        conn.execute("PRAGMA query_only=0")

    def _guarded(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA query_only=1")
        conn.set_authorizer(self._authorize)
        self.changes = conn.total_changes


def _allow_all(*_args: object) -> int:
    """The authorizer while the bundle's own statements edit the copy."""
    return sqlite3.SQLITE_OK


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


class _ThreadBoxes(threading.local):
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.boxes: collections.OrderedDict[tuple, Sandbox] = collections.OrderedDict()


_local = _ThreadBoxes()


def sandbox(path: str, limits: Limits) -> Sandbox:
    """This thread's copy of ``path`` with ``limits``' guards (made on first use)."""
    if _local.pid != os.getpid():  # a forked child never uses its parent's copies
        _local.pid, _local.boxes = os.getpid(), collections.OrderedDict()
    key = (path, limits.max_cell_bytes, limits.max_sql_chars, limits.charge_base_steps,
           limits.charge_bytes_per_step, limits.max_program_ops)
    boxes = _local.boxes
    found = boxes.get(key)
    if found is not None:
        boxes.move_to_end(key)
        return found
    while len(boxes) >= MAX_PER_THREAD:
        boxes.popitem(last=False)[1].close()
    found = boxes[key] = Sandbox(path, limits)
    return found


def close_all() -> None:
    """Free this thread's copies (they are made again on next use)."""
    if _local.pid == os.getpid():
        for box in _local.boxes.values():
            box.close()


sql_connection.on_forget(close_all)
