"""What a neighbour database must keep of the original: schema, keys, and what its data implies.

Read once per original database (``read_schema``): every table with its CREATE statement, columns
(declared type, NOT NULL, primary-key position), foreign keys, the rows themselves, and, per
column, what the data implies even where the schema is silent: whether its values are unique
(names, titles, codes stay unique), whether it ever holds NULL (a column without NULL stays
without), and its values by storage class. Indexes, views and triggers are kept as statements.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "s.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript(
...     "CREATE TABLE p(id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE c(pid INT REFERENCES p(id), v INT);"
...     "INSERT INTO p VALUES (1, 'a'), (2, 'b'); INSERT INTO c VALUES (1, 5), (1, 5), (2, NULL);")
>>> s = read_schema(path)
>>> [t.name for t in s.in_key_order()], s.table("c").column("pid").references
(['p', 'c'], ('p', 'id'))
>>> s.table("p").column("name").unique, s.table("c").column("v").unique, s.table("c").column("v").has_null
(True, False, True)
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path


def affinity(declared: str) -> str:
    """SQLite's column affinity for a declared type (the rules of section 3.1 of its datatype page)."""
    t = declared.upper()
    if "INT" in t:
        return "integer"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if not t or "BLOB" in t:
        return "blob"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "numeric"


@dataclasses.dataclass
class Column:
    name: str
    declared: str
    not_null: bool
    pk: int  # position in the primary key, 0 when not part of it
    references: tuple[str, str] | None = None  # (parent table, parent column)
    values: list = dataclasses.field(default_factory=list)  # every value in the original, in row order
    unique: bool = False
    has_null: bool = False

    @property
    def kind(self) -> str:
        """``number`` or ``text`` (or ``blob``): what the original holds, else what the type says."""
        seen = [v for v in self.values if v is not None]
        if seen:
            numbers = sum(1 for v in seen if isinstance(v, (int, float)) and not isinstance(v, bool))
            texts = sum(1 for v in seen if isinstance(v, str))
            return "number" if numbers >= texts and numbers else "text" if texts else "blob"
        return "number" if affinity(self.declared) in ("integer", "real", "numeric") else "text"


@dataclasses.dataclass
class Table:
    name: str
    sql: str
    columns: list[Column]
    rows: list[tuple]
    without_rowid: bool = False

    def column(self, name: str) -> Column:
        lowered = name.lower()
        return next(c for c in self.columns if c.name.lower() == lowered)

    def has_column(self, name: str) -> bool:
        return any(c.name.lower() == name.lower() for c in self.columns)

    @property
    def key(self) -> list[Column]:
        return sorted((c for c in self.columns if c.pk), key=lambda c: c.pk)

    @property
    def integer_rowid_key(self) -> bool:
        """A single INTEGER PRIMARY KEY column: an alias of the rowid, unique whole numbers."""
        key = self.key
        return len(key) == 1 and key[0].declared.strip().upper() == "INTEGER" and not self.without_rowid


@dataclasses.dataclass
class Schema:
    path: Path
    tables: list[Table]
    extras: list[str]  # CREATE INDEX / VIEW / TRIGGER statements, in the original's order

    def table(self, name: str) -> Table:
        lowered = name.lower()
        return next(t for t in self.tables if t.name.lower() == lowered)

    def has_table(self, name: str) -> bool:
        return any(t.name.lower() == name.lower() for t in self.tables)

    def in_key_order(self) -> list[Table]:
        """Tables with every table a foreign key points to before the tables that point to it.

        A cycle (Spider has a few) is broken where it closes: that reference is then filled from
        the rows of the parent already generated, or from its own values when none are.
        """
        order: list[Table] = []
        state: dict[str, int] = {}

        def visit(table: Table) -> None:
            mark = state.get(table.name.lower(), 0)
            if mark:
                return
            state[table.name.lower()] = 1
            for col in table.columns:
                if col.references and self.has_table(col.references[0]):
                    parent = self.table(col.references[0])
                    if parent is not table and state.get(parent.name.lower(), 0) == 0:
                        visit(parent)
            state[table.name.lower()] = 2
            order.append(table)

        for table in self.tables:
            visit(table)
        return order


def quote(name: str) -> str:
    """``name`` as an SQL identifier in double quotes."""
    return '"' + name.replace('"', '""') + '"'


def read_schema(path: str | Path) -> Schema:
    """The schema, rows and column facts of the SQLite file at ``path`` (opened read-only)."""
    uri = "file:" + str(Path(path).resolve()) + "?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        entries = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                               "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid").fetchall()
        tables, extras = [], []
        for kind, name, sql in entries:
            if kind != "table":
                extras.append(sql)
                continue
            tables.append(_read_table(conn, name, sql))
    finally:
        conn.close()
    schema = Schema(Path(path), tables, extras)
    for table in tables:  # drop references to tables or columns that do not exist (Spider has some)
        for col in table.columns:
            if col.references and not (schema.has_table(col.references[0]) and
                                       schema.table(col.references[0]).has_column(col.references[1])):
                col.references = None
    return schema


def _read_table(conn: sqlite3.Connection, name: str, sql: str) -> Table:
    info = conn.execute(f"PRAGMA table_info({quote(name)})").fetchall()
    columns = [Column(r[1], r[2] or "", bool(r[3]), int(r[5])) for r in info]
    for fk in conn.execute(f"PRAGMA foreign_key_list({quote(name)})").fetchall():
        parent, child_col, parent_col = fk[2], fk[3], fk[4]
        match = [c for c in columns if c.name.lower() == str(child_col).lower()]
        if match and match[0].references is None:
            match[0].references = (parent, parent_col or child_col)
    rows = conn.execute(f"SELECT * FROM {quote(name)}").fetchall()
    table = Table(name, sql, columns, rows, "WITHOUT ROWID" in sql.upper())
    for i, col in enumerate(columns):
        col.values = [row[i] for row in rows]
        present = [v for v in col.values if v is not None]
        col.has_null = len(present) < len(col.values)
        col.unique = bool(present) and len(set(present)) == len(present) and (len(present) > 1 or col.pk > 0)
        if len(table.key) == 1 and col.pk:
            col.unique = True
    return table
