"""What a database's data implies, and whether another database with its schema keeps it.

The audit calls a degenerate answer *wrong* only when it can show a database on which the answer
and the gold return different rows, and that database must be one a reader would accept as the
same kind of data: the original's schema with every invariant the original's data shows
(docs/audit.md, "When a paid answer counts"). The invariants, mined from the original:

* ``unique``: a column whose values are all distinct (at least two, or a one-column primary key)
  stays so, except a column a gold needs repeated (it groups by it with a HAVING);
* ``not null``: a column without NULL (in a table with rows) stays without;
* ``foreign key``: a declared foreign key that every row of the original satisfies stays satisfied;
* ``referenced``: where every row of a parent table is referenced through a declared foreign key,
  every row stays referenced.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "s.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript(
...     "CREATE TABLE p(id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE c(pid INT REFERENCES p(id), v INT);"
...     "INSERT INTO p VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'); INSERT INTO c VALUES (1, 5), (2, 5), (3, 5), (4, 5);")
>>> facts = mine(path)
>>> [str(i) for i in facts]
['unique p.id', 'not null p.id', 'unique p.name', 'not null p.name', 'unique c.pid', 'not null c.pid', \
'not null c.v', 'foreign key c.pid -> p.id', 'referenced p.id <- c.pid']
>>> with sqlite3.connect(path) as c: _ = c.execute("INSERT INTO p VALUES (5, 'a')")
>>> [str(i) for i in broken(facts, path)]
['unique p.name', 'referenced p.id <- c.pid']
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from bundle.neighbours import thin as neighbour_thin

UNIQUE, NOT_NULL, FOREIGN_KEY, REFERENCED = "unique", "not null", "foreign key", "referenced"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclasses.dataclass(frozen=True)
class Invariant:
    """One fact of the original's data; ``parent``/``parent_column`` for the two foreign-key kinds."""

    kind: str
    table: str
    column: str
    parent: str = ""
    parent_column: str = ""

    def __str__(self) -> str:
        if self.kind == FOREIGN_KEY:
            return f"{self.kind} {self.table}.{self.column} -> {self.parent}.{self.parent_column}"
        if self.kind == REFERENCED:
            return f"{self.kind} {self.parent}.{self.parent_column} <- {self.table}.{self.column}"
        return f"{self.kind} {self.table}.{self.column}"

    def violations_sql(self) -> str:
        """A query counting the rows that break this invariant (0 when it holds)."""
        t, c = quote(self.table), quote(self.column)
        if self.kind == UNIQUE:
            return f"SELECT count({c}) - count(DISTINCT {c}) FROM {t}"
        if self.kind == NOT_NULL:
            return f"SELECT count(*) - count({c}) FROM {t}"
        p, pc = quote(self.parent), quote(self.parent_column)
        if self.kind == FOREIGN_KEY:
            return f"SELECT count(*) FROM {t} WHERE {c} IS NOT NULL AND {c} NOT IN (SELECT {pc} FROM {p} WHERE {pc} IS NOT NULL)"
        return f"SELECT count(*) FROM {p} WHERE {pc} NOT IN (SELECT {c} FROM {t} WHERE {c} IS NOT NULL)"


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect("file:" + str(Path(path).resolve()) + "?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    return conn


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                       "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid")]


def _holds(conn: sqlite3.Connection, invariant: Invariant) -> bool:
    try:
        return conn.execute(invariant.violations_sql()).fetchone()[0] == 0
    except sqlite3.Error:  # a foreign key naming a table or column that does not exist (Spider has some)
        return False


def _column_facts(conn: sqlite3.Connection, table: str, keep_repeatable: frozenset[str],
                  thin: bool = False) -> list[Invariant]:
    info = conn.execute(f"PRAGMA table_info({quote(table)})").fetchall()
    key = [r[1] for r in info if r[5]]
    rows = conn.execute(f"SELECT count(*) FROM {quote(table)}").fetchone()[0]
    declared = neighbour_thin.declared_unique(conn, table) if thin else set()
    out = []
    for r in info:
        name = r[1]
        present, distinct = conn.execute(f"SELECT count({quote(name)}), count(DISTINCT {quote(name)}) "
                                         f"FROM {quote(table)}").fetchone()
        # of a thin database, only a column the schema declares unique (two distinct values are chance)
        chance = present == distinct and (present > 1 or key == [name]) and not thin
        if (chance or name.lower() in declared) and present == distinct and name.lower() not in keep_repeatable:
            out.append(Invariant(UNIQUE, table, name))
        if rows and present == rows:
            out.append(Invariant(NOT_NULL, table, name))
    return out


def _key_facts(conn: sqlite3.Connection, table: str, thin: bool = False) -> list[Invariant]:
    out = []
    for fk in conn.execute(f"PRAGMA foreign_key_list({quote(table)})").fetchall():
        parent, column, parent_column = fk[2], fk[3], fk[4] or fk[3]
        for kind in (FOREIGN_KEY,) if thin else (FOREIGN_KEY, REFERENCED):  # thin: both parents referenced by chance
            invariant = Invariant(kind, table, column, parent, parent_column)
            if _holds(conn, invariant) and (kind == FOREIGN_KEY or _has_rows(conn, parent)):
                out.append(invariant)
    return out


def _has_rows(conn: sqlite3.Connection, table: str) -> bool:
    try:
        return conn.execute(f"SELECT 1 FROM {quote(table)} LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False


def mine(path: str | Path, repeatable: Iterable[str] = ()) -> tuple[Invariant, ...]:
    """The invariants of the database at ``path``; ``repeatable``: column names (any case) left
    out of ``unique`` because a gold needs them repeated. Of a thin database (``bundle.neighbours.thin``),
    only a column the schema declares unique is, and no parent need stay referenced: two rows show
    both by chance, and the neighbours keep neither."""
    keep_repeatable = frozenset(name.lower() for name in repeatable)
    conn = _connect(path)
    try:
        tables = _tables(conn)
        thin = neighbour_thin.is_thin(conn.execute(f"SELECT count(*) FROM {quote(t)}").fetchone()[0] for t in tables)
        facts = [f for t in tables for f in _column_facts(conn, t, keep_repeatable, thin)]
        return tuple(facts + [f for t in tables for f in _key_facts(conn, t, thin)])
    finally:
        conn.close()


def broken(invariants: Iterable[Invariant], path: str | Path) -> list[Invariant]:
    """The invariants the database at ``path`` does not keep."""
    conn = _connect(path)
    try:
        return [i for i in invariants if not _holds(conn, i)]
    finally:
        conn.close()
