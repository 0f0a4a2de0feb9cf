"""What the near-miss families (harness/audit/nearmiss/families.py) share: the gold's tree, the database, and a check.

A family reads the gold's sqlglot tree and yields edited copies; it never edits the tree it is given.
:func:`edit_at` copies the tree and edits the node at one position of its walk (the walk of a copy
visits the same nodes in the same order), so each near miss carries exactly one edit. The database,
when there is one, is opened read-only: its schema tells which table a column belongs to (for the
families that swap a column for another of its table), and its values give the families that need
them a subquery's value or a literal's neighbours in its column. :meth:`Context.runs` is the check
every near miss passes before it is returned: it prepares and runs on the database within a bound of
SQLite VM steps (counted work, never time).

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT name FROM singer WHERE age > 40", read="sqlite")
>>> position = next(i for i, n in enumerate(tree.walk()) if isinstance(n, exp.GT))
>>> render(edit_at(tree, position, lambda n: exp.GTE(this=n.this.copy(), expression=n.expression.copy())))
'SELECT name FROM singer WHERE age >= 40'
>>> render(tree)
'SELECT name FROM singer WHERE age > 40'
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError

MAX_STEPS = 5_000_000  # SQLite VM steps a near miss may take on the original before it is dropped
_STEP_CHUNK = 1_000  # the progress handler's period, in VM steps
COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
AGGREGATES = (exp.Count, exp.Max, exp.Min, exp.Sum, exp.Avg)


_MADE: dict[tuple, tuple] = {}  # (set, gold, families, database file) -> its near misses, this process
_MADE_MAX = 8_192  # golds x sets kept; past it the memo starts again
_MADE_LOCK = threading.Lock()


def remembered(kind: str, gold: str, database: pathlib.Path | str | None, families: Sequence[str],
               make: Callable[[], list]) -> list:
    """``make()`` (the near misses of ``gold`` in one set's ``families`` on ``database``), made once a
    process for the same set, gold, families and database file (its path, size and modification time):
    each set asks the ones before it for their near misses of a gold, to stay apart from them, and the
    audit asks every set, so without it the first set's were made four times a gold. A pure function
    of those, so the same list either way (a new list each call: callers may keep it).

    >>> calls = []
    >>> made = lambda: calls.append(1) or ["a near miss"]
    >>> remembered("doc", "SELECT 1", None, ("f",), made) == remembered("doc", "SELECT 1", None, ("f",), made)
    True
    >>> len(calls)
    1
    """
    try:
        where = None if database is None else (os.path.realpath(database), os.stat(database).st_size,
                                               os.stat(database).st_mtime_ns)
    except OSError:
        return make()  # no such file: the sets' own checks say so
    key = (kind, gold, tuple(families), where)
    with _MADE_LOCK:
        found = _MADE.get(key)
    if found is None:
        found = tuple(make())
        with _MADE_LOCK:
            if len(_MADE) >= _MADE_MAX:
                _MADE.clear()
            _MADE[key] = found
    return list(found)


def render(tree: exp.Expr) -> str:
    """The tree written back as SQLite."""
    return tree.sql(dialect="sqlite")


def edit_at(tree: exp.Expr, position: int,
            make: Callable[[exp.Expr], exp.Expr | None]) -> exp.Expr:
    """A copy of ``tree`` whose node at ``position`` (in ``tree.walk()`` order) is replaced by ``make(node)``.

    ``make`` gets the copy's node; it returns the node itself (edited in place), a new node (built from
    copies of the node's parts, never the node itself), or None to remove the node."""
    copy = tree.copy()
    node = list(copy.walk())[position]
    new = make(node)
    if new is node:
        return copy
    if position == 0:
        if new is None:
            raise ValueError("the root of a query cannot be removed")
        return new
    if new is None:
        node.pop()
    else:
        node.replace(new)
    return copy


def put(tree: exp.Expr, position: int, new: exp.Expr) -> exp.Expr:
    """A copy of ``tree`` with a copy of ``new`` in place of its node at ``position``."""
    return edit_at(tree, position, lambda _n: new.copy())


def set_arg(node: exp.Expr, key: str, value: object) -> exp.Expr:
    """``node`` with its argument ``key`` set to ``value`` (an edit in place, for :func:`edit_at`)."""
    node.set(key, value)
    return node


def positions(tree: exp.Expr, *kinds: type[exp.Expr]) -> Iterator[tuple[int, exp.Expr]]:
    """(position, node) of every node of one of ``kinds``, in walk order."""
    for i, node in enumerate(tree.walk()):
        if isinstance(node, kinds):
            yield i, node


def clause(node: exp.Expr) -> str:
    """The clause ``node`` sits in within its own SELECT: where, having, on, select, group, order, limit or other."""
    child, parent = node, node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        if isinstance(parent, exp.Where):
            return "where"
        if isinstance(parent, exp.Having):
            return "having"
        if isinstance(parent, exp.Join) and child.arg_key == "on":
            return "on"
        if isinstance(parent, exp.Group):
            return "group"
        if isinstance(parent, exp.Order):
            return "order"
        if isinstance(parent, (exp.Limit, exp.Offset)):
            return "limit"
        if isinstance(parent, (exp.Subquery, exp.Exists)) and isinstance(child, exp.Query):
            return "other"
        child, parent = parent, parent.parent
    if parent is not None and child.arg_key == "expressions":
        return "select"
    return "other"


def filtering(node: exp.Expr) -> bool:
    """Whether ``node`` is in a WHERE or HAVING (the conditions the value families edit)."""
    return clause(node) in ("where", "having")


def is_text(node: exp.Expr) -> bool:
    """A string literal, or a double-quoted name used as one (``name = "Bob"``, as Spider's golds write)."""
    if isinstance(node, exp.Literal):
        return node.is_string
    return (isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier)
            and node.this.quoted and isinstance(node.parent, (*COMPARISONS, exp.Like, exp.In, exp.Between)))


def text_of(node: exp.Expr) -> str:
    return node.name if isinstance(node, exp.Column) else str(node.this)


def is_number(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string


def join_key(node: exp.Expr) -> bool:
    """A comparison of two columns (a join written in a WHERE, or any ON): the value families leave it alone."""
    return (isinstance(node, COMPARISONS) and isinstance(node.this, exp.Column)
            and isinstance(node.expression, exp.Column) and not is_text(node.expression))


def literal(value: object) -> exp.Expr:
    """A Python value from SQLite as a sqlglot literal SQLite reads back as the same value."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Literal.number(int(value))
    if isinstance(value, int):
        return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))
    if isinstance(value, float):
        if math.isnan(value):
            return exp.Null()
        if math.isinf(value):
            text = "9e999"
        else:
            text = repr(abs(value))
        number = exp.Literal.number(text)
        return number if value >= 0 and not text.startswith("-") else exp.Neg(this=number)
    if isinstance(value, bytes):
        return exp.Literal.string(value.decode("utf-8", "replace"))
    return exp.Literal.string(str(value))


def owning_select(node: exp.Expr) -> exp.Select | None:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        parent = parent.parent
    return parent


def sources(select: exp.Expr) -> list[tuple[str, str]]:
    """(the name that qualifies its columns, as written: its alias or its name; the table's name) of each table
    a SELECT's own FROM and JOINs read, in order."""
    out = []
    for source in [select.args.get("from_")] + list(select.args.get("joins") or []):
        table = source.this if source is not None else None
        if isinstance(table, exp.Table) and table.name:
            out.append((table.alias or table.name, table.name))
    return out


def scope_tables(select: exp.Expr) -> dict[str, str]:
    """{alias or table name, lower-cased: table name} of the tables a SELECT's own FROM and JOINs read."""
    out: dict[str, str] = {}
    sources = [select.args.get("from_")] + list(select.args.get("joins") or [])
    for source in sources:
        table = source.this if source is not None else None
        if isinstance(table, exp.Table) and table.name:
            out.setdefault(table.name.lower(), table.name)
            if table.alias:
                out[table.alias.lower()] = table.name
    return out


@dataclasses.dataclass(frozen=True)
class Schema:
    """The database's tables: their columns in declared order, and their declared foreign keys."""

    columns: dict[str, tuple[str, ...]]  # lower-cased table name -> column names
    names: dict[str, str]  # lower-cased table name -> the name as declared
    foreign_keys: tuple[tuple[str, str, str, str], ...]  # (table, column, parent table, parent column)
    types: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # table -> column -> declared type

    def affinity(self, table: str, column: str) -> str:
        """The column's SQLite type affinity (INTEGER, TEXT, BLOB, REAL or NUMERIC), by SQLite's rules on its type."""
        declared = self.types.get(table.lower(), {}).get(column.lower(), "").upper()
        if "INT" in declared:
            return "INTEGER"
        if any(word in declared for word in ("CHAR", "CLOB", "TEXT")):
            return "TEXT"
        if "BLOB" in declared or not declared:
            return "BLOB"
        if any(word in declared for word in ("REAL", "FLOA", "DOUB")):
            return "REAL"
        return "NUMERIC"

    def table_columns(self, table: str) -> tuple[str, ...]:
        return self.columns.get(table.lower(), ())

    def has(self, table: str, column: str) -> bool:
        return column.lower() in (c.lower() for c in self.table_columns(table))


def read_schema(conn: sqlite3.Connection) -> Schema:
    columns, names, types, keys = {}, {}, {}, []
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        info = conn.execute(f"PRAGMA table_info({quoted})").fetchall()
        columns[table.lower()] = tuple(r[1] for r in info)
        types[table.lower()] = {r[1].lower(): r[2] or "" for r in info}
        names[table.lower()] = table
        for row in conn.execute(f"PRAGMA foreign_key_list({quoted})"):
            if row[4] is not None:
                keys.append((table, row[3], row[2], row[4]))
    return Schema(columns, names, tuple(sorted(keys)), types)


class Context:
    """The database a gold is edited against (read-only), or none: then only the families that need no data apply."""

    def __init__(self, database: pathlib.Path | None) -> None:
        self.conn: sqlite3.Connection | None = None
        self.schema = Schema({}, {}, ())
        if database is not None:
            if not pathlib.Path(database).is_file():
                raise FileNotFoundError(f"near misses: no database at {database} (pass the .sqlite file)")
            self.conn = sqlite3.connect(f"file:{pathlib.Path(database).resolve()}?mode=ro", uri=True)
            self.conn.text_factory = lambda b: b.decode("utf-8", "replace")
            self.schema = read_schema(self.conn)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def table_of(self, column: exp.Column) -> str | None:
        """The table (as declared) a column of the gold reads, or None when it cannot be told."""
        select = owning_select(column)
        if select is None:
            return None
        scope = scope_tables(select)
        if column.table:
            return scope.get(column.table.lower())
        tables = sorted(set(scope.values()))
        if self.conn is None:
            return tables[0] if len(tables) == 1 else None
        found = [t for t in tables if self.schema.has(t, column.name)]
        return found[0] if len(found) == 1 else None

    @contextlib.contextmanager
    def _bounded(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """``conn``, interrupted once a statement has taken MAX_STEPS VM steps."""
        steps = [0]

        def progress() -> int:
            steps[0] += 1
            return 1 if steps[0] * _STEP_CHUNK > MAX_STEPS else 0

        conn.set_progress_handler(progress, _STEP_CHUNK)
        try:
            yield conn
        finally:
            conn.set_progress_handler(None, 0)

    def rows(self, sql: str, params: tuple = (), limit: int = 101) -> list[tuple] | None:
        """At most ``limit`` rows of ``sql`` on the database; None without one, or when it fails or runs over."""
        if self.conn is None:
            return None
        with self._bounded(self.conn) as conn:
            try:
                return conn.execute(sql, params).fetchmany(limit)
            except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError):
                return None

    def runs(self, sql: str) -> bool:
        """Whether ``sql`` prepares and runs to its end on the database within MAX_STEPS (True without one)."""
        if self.conn is None:
            return True
        with self._bounded(self.conn) as conn:
            try:
                cursor = conn.execute(sql)
                while cursor.fetchmany(1000):
                    pass
            except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError):
                return False
        return True


def generate(tree: exp.Expr) -> str | None:
    """``render(tree)``, or None when sqlglot cannot write the edited tree."""
    try:
        return render(tree)
    except (SqlglotError, ValueError, TypeError, AttributeError):
        return None
