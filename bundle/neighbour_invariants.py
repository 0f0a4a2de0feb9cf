"""What a neighbour database keeps of its original: the invariants the original's data implies.

Mined once from the original (``mine``), stored in the bundle's index, and proved on every
neighbour built (``neighbour_proof``), at ``prepare``, in verification and in the grader's search:

* links: each declared foreign key that the original's data mostly holds (at least half of its
  child values have their parent), and each undeclared inclusion the data shows (every value of a
  column is a value of another table's key column; for numbers, the names must be related too).
  A neighbour holds every link entirely: no child value without its parent;
* total links: where every parent value is referenced in the original (every country has a
  city), every parent value is referenced on the neighbour;
* per column: unique stays unique; no NULL where the original has none; only the storage classes
  the original holds (no text in a column of numbers); a text format where the original has one
  (every value has a digit and at most ``FORMAT_MAX_SHAPES`` shapes: dates, codes, numbers as text
  keep their shape); no value repeated more than the original repeats one (``repeat_cap``), and in
  a column of nearly distinct values (names, titles) no value more often than the original holds it;
* a table with rows keeps rows.

All facts are read with SQL, so a neighbour is judged exactly as its original was (collations,
affinities). Standard library only.

>>> shape("2014-05-01"), shape("Kyle B.")
('9999-99-99', 'Aaaa A.')
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
import urllib.parse

FORMAT_MAX_SHAPES = 4
NEAR_UNIQUE = 0.8  # share of distinct values above which a column's values are names, not categories
DECLARED_HELD = 0.5  # share of a declared key's child values that must have their parent in the original
MINE_MAX_DISTINCT = 20_000  # columns with more distinct values are not searched for undeclared inclusions


def quote(name: str) -> str:
    """``name`` as an SQL identifier in double quotes."""
    return '"' + name.replace('"', '""') + '"'


def shape(text: str) -> str:
    """A text's format: letters as ``A``/``a`` by case, digits as ``9``, everything else kept."""
    return "".join("9" if ch.isdigit() else ("A" if ch.isupper() else "a") if ch.isalpha() else ch for ch in text)


def affinity(declared: str) -> str:
    """SQLite's column affinity for a declared type (section 3.1 of its datatype page)."""
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


@dataclasses.dataclass(frozen=True)
class ColumnFacts:
    name: str
    declared: str
    kinds: tuple[str, ...]  # storage classes of its values (typeof), NULL aside, sorted
    nulls: bool  # the original holds NULL here
    unique: bool  # every value distinct (with more than one value, or a one-column primary key)
    max_repeat: int  # most rows sharing one value
    near_unique: bool  # at least NEAR_UNIQUE of its values distinct: names, titles
    counts: tuple[tuple[object, int], ...] = ()  # near-unique columns: values held twice or more, with counts
    shapes: tuple[str, ...] = ()  # its text format; empty: free text


@dataclasses.dataclass(frozen=True)
class TableFacts:
    name: str
    rows: int
    columns: tuple[ColumnFacts, ...]
    key: tuple[str, ...] = ()  # the declared primary key's columns

    def column(self, name: str) -> ColumnFacts:
        return next(c for c in self.columns if c.name.lower() == name.lower())


@dataclasses.dataclass(frozen=True)
class Link:
    """Every non-NULL value (tuple) of the child columns is one of the parent columns' (a key, kept entire)."""

    child: str
    child_columns: tuple[str, ...]
    parent: str
    parent_columns: tuple[str, ...]
    declared: bool
    total: bool = False  # every parent value is referenced by a child row in the original

    def describe(self) -> str:
        return f"{self.child}({', '.join(self.child_columns)}) -> {self.parent}({', '.join(self.parent_columns)})"


@dataclasses.dataclass(frozen=True)
class Profile:
    tables: tuple[TableFacts, ...]
    links: tuple[Link, ...]
    dropped: tuple[str, ...] = ()  # declared keys the original's data does not hold, not kept

    def table(self, name: str) -> TableFacts:
        return next(t for t in self.tables if t.name.lower() == name.lower())

    def links_of(self, table: str) -> list[Link]:
        """The links whose child is ``table``."""
        return [k for k in self.links if k.child.lower() == table.lower()]

    def counts(self) -> dict[str, int]:
        """How many invariants of each kind (docs/neighbours.md's table)."""
        cols = [c for t in self.tables for c in t.columns]
        return {"declared links": sum(k.declared for k in self.links),
                "undeclared inclusions": sum(not k.declared for k in self.links),
                "total links": sum(k.total for k in self.links), "unique columns": sum(c.unique for c in cols),
                "columns without NULL": sum(not c.nulls for c in cols), "formats": sum(bool(c.shapes) for c in cols),
                "name columns": sum(c.near_unique and not c.unique for c in cols),
                "declared keys not held": len(self.dropped)}


def repeat_cap(col: ColumnFacts, rows_then: int, rows_now: int) -> int:
    """Most rows one value may fill in a table grown from ``rows_then`` to ``rows_now`` rows."""
    if col.unique:
        return 1
    scaled = math.ceil(col.max_repeat * rows_now / rows_then) if rows_then else rows_now
    return max(col.max_repeat, scaled)


# ---- reading facts with SQL (the same statements mine the original and check a neighbour) -----------

def _scalar(conn: sqlite3.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0] or 0)


def _column_counts(conn: sqlite3.Connection, table: str, col: str) -> tuple[int, int, int, int]:
    """(rows, non-NULL values, distinct values, most rows sharing one value)."""
    t, c = quote(table), quote(col)
    rows, present, distinct = conn.execute(f"SELECT count(*), count({c}), count(DISTINCT {c}) FROM {t}").fetchone()
    most = _scalar(conn, f"SELECT max(n) FROM (SELECT count(*) AS n FROM {t} WHERE {c} IS NOT NULL GROUP BY {c})")
    return rows, present, distinct, most


def _kinds(conn: sqlite3.Connection, table: str, col: str) -> tuple[str, ...]:
    c = quote(col)
    return tuple(sorted(r[0] for r in conn.execute(f"SELECT DISTINCT typeof({c}) FROM {quote(table)} "
                                                   f"WHERE {c} IS NOT NULL")))


def _shapes(conn: sqlite3.Connection, table: str, col: str, limit: int) -> set[str] | None:
    """The shapes of a column's text values; None once more than ``limit`` or a value without a digit."""
    c = quote(col)
    found: set[str] = set()
    for (value,) in conn.execute(f"SELECT DISTINCT {c} FROM {quote(table)} WHERE typeof({c}) = 'text'"):
        if not any(ch.isdigit() for ch in value):
            return None
        found.add(shape(value))
        if len(found) > limit:
            return None
    return found


def _repeated(conn: sqlite3.Connection, table: str, col: str) -> list[tuple[object, int]]:
    c = quote(col)
    return [(v, int(n)) for v, n in conn.execute(
        f"SELECT {c}, count(*) FROM {quote(table)} WHERE {c} IS NOT NULL GROUP BY {c} HAVING count(*) > 1 "
        f"ORDER BY count(*) DESC, {c}")]


def _tuple(columns: tuple[str, ...]) -> str:
    names = ", ".join(quote(c) for c in columns)
    return names if len(columns) == 1 else f"({names})"


def _present(columns: tuple[str, ...]) -> str:
    return " AND ".join(f"{quote(c)} IS NOT NULL" for c in columns)


def orphans_where(link: Link) -> str:
    """The condition of the child rows whose link values have no parent."""
    return (f"{_present(link.child_columns)} AND {_tuple(link.child_columns)} NOT IN (SELECT "
            f"{', '.join(quote(c) for c in link.parent_columns)} FROM {quote(link.parent)} "
            f"WHERE {_present(link.parent_columns)})")


def unreferenced_where(link: Link) -> str:
    """The condition of the parent rows no child row references."""
    return (f"{_present(link.parent_columns)} AND {_tuple(link.parent_columns)} NOT IN (SELECT "
            f"{', '.join(quote(c) for c in link.child_columns)} FROM {quote(link.child)} "
            f"WHERE {_present(link.child_columns)})")


def orphans_sql(link: Link) -> str:
    return f"SELECT count(*) FROM {quote(link.child)} WHERE {orphans_where(link)}"


def unreferenced_sql(link: Link) -> str:
    return f"SELECT count(*) FROM {quote(link.parent)} WHERE {unreferenced_where(link)}"


def open_read_only(path: str) -> sqlite3.Connection:
    """A plain read-only connection for the scorer's own reads (never a model's query)."""
    conn = sqlite3.connect("file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    return conn


def table_names(conn: sqlite3.Connection) -> list[str]:
    """The tables, in the order they were created."""
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                       "name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid")]


# ---- mining the original --------------------------------------------------------------------------

def mine(conn: sqlite3.Connection) -> Profile:
    """Every invariant the database behind ``conn`` shows (the module docstring's list)."""
    facts = tuple(_table_facts(conn, name) for name in table_names(conn))
    declared, dropped = _declared(conn, facts)
    links = declared + _inclusions(conn, facts, declared)
    rows = {t.name: t.rows for t in facts}
    links = [dataclasses.replace(k, total=rows[k.parent] > 0 and _scalar(conn, unreferenced_sql(k)) == 0)
             for k in links]
    return Profile(tuple(_without_child_formats(t, links) for t in facts), tuple(links), tuple(dropped))


def _without_child_formats(table: TableFacts, links: list[Link]) -> TableFacts:
    """A link column takes its parent's values: the parent's format governs, not its own."""
    linked = {c.lower() for k in links if k.child == table.name for c in k.child_columns}
    return dataclasses.replace(table, columns=tuple(dataclasses.replace(c, shapes=()) if c.name.lower() in linked
                                                    else c for c in table.columns))


def _table_facts(conn: sqlite3.Connection, name: str) -> TableFacts:
    info = conn.execute(f"PRAGMA table_info({quote(name)})").fetchall()
    one_key = sum(1 for r in info if r[5]) == 1
    columns, rows = [], _scalar(conn, f"SELECT count(*) FROM {quote(name)}")
    for r in info:
        col = r[1]
        rows, present, distinct, most = _column_counts(conn, name, col)
        unique = (one_key and r[5] > 0) or (present > 1 and distinct == present)
        near = not unique and present > 0 and distinct >= NEAR_UNIQUE * present
        counts = tuple((v, n) for v, n in _repeated(conn, name, col) if isinstance(v, (int, float, str))) if near else ()
        found = _shapes(conn, name, col, FORMAT_MAX_SHAPES)
        columns.append(ColumnFacts(col, r[2] or "", _kinds(conn, name, col), present < rows, unique, most, near,
                                   counts, tuple(sorted(found or ()))))
    key = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
    return TableFacts(name, rows, tuple(columns), key)


def _declared(conn: sqlite3.Connection, facts: tuple[TableFacts, ...]) -> tuple[list[Link], list[str]]:
    """Declared foreign keys, each kept when the original's data mostly holds it."""
    by_name = {t.name.lower(): t for t in facts}
    links: list[Link] = []
    dropped: list[str] = []
    for table in facts:
        groups: dict[int, list[tuple]] = {}
        for fk in conn.execute(f"PRAGMA foreign_key_list({quote(table.name)})"):
            groups.setdefault(fk[0], []).append(fk)
        for _key, parts in sorted(groups.items()):
            parts.sort(key=lambda f: f[1])
            parent = by_name.get(str(parts[0][2]).lower())
            if parent is None:
                continue  # Spider names a few tables that do not exist
            wanted = [f[4] for f in parts]
            if any(c is None for c in wanted):
                wanted = list(parent.key)
            names = {c.name.lower(): c.name for c in parent.columns}
            mine_ = {c.name.lower(): c.name for c in table.columns}
            if len(wanted) != len(parts) or any(str(c).lower() not in names for c in wanted) or \
                    any(str(f[3]).lower() not in mine_ for f in parts):
                continue
            link = Link(table.name, tuple(mine_[str(f[3]).lower()] for f in parts), parent.name,
                        tuple(names[str(c).lower()] for c in wanted), True)
            if any(k.child == link.child and k.child_columns == link.child_columns and k.parent == link.parent
                   for k in links):
                continue
            present = _scalar(conn, f"SELECT count(*) FROM {quote(table.name)} WHERE {_present(link.child_columns)}")
            orphans = _scalar(conn, orphans_sql(link))
            if present and orphans > (1 - DECLARED_HELD) * present:
                dropped.append(f"{link.describe()}: {orphans} of {present} rows without their parent")
                continue
            links.append(link)
    return links, dropped


def _related_names(child: str, parent_table: str, parent_column: str) -> bool:
    """Whether a number column's name says it holds another table's key (``PetID`` for Pets.PetID)."""
    def norm(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())
    c, col, table = norm(child), norm(parent_column), norm(parent_table)
    stem = table[:-1] if table.endswith("s") and len(table) > 3 else table
    return (c == col and col not in ("id", "code", "name", "rank")) or c.endswith(stem + col)


def _numeric_texts(values: set) -> bool:
    """Whether every value is a number written as text ('2', '2014'): such columns need related names."""
    try:
        return all(isinstance(v, str) and (float(v) or True) for v in values)
    except ValueError:
        return False


def _inclusions(conn: sqlite3.Connection, facts: tuple[TableFacts, ...], declared: list[Link]) -> list[Link]:
    """Undeclared inclusions: each column whose values all belong to another table's key column."""
    linked = {(k.child.lower(), c.lower()) for k in declared for c in k.child_columns}
    keys = [(t, c) for t in facts if t.rows >= 2 for c in t.columns if c.unique and not c.nulls and c.kinds]
    values: dict[tuple[str, str], set] = {}

    def distinct(table: TableFacts, col: ColumnFacts) -> set:
        key = (table.name, col.name)
        if key not in values:
            values[key] = {v for (v,) in conn.execute(f"SELECT DISTINCT {quote(col.name)} FROM {quote(table.name)} "
                                                      f"WHERE {quote(col.name)} IS NOT NULL LIMIT {MINE_MAX_DISTINCT + 1}")}
        return values[key]

    found: list[Link] = []
    for table in facts:
        for col in table.columns:
            if (table.name.lower(), col.name.lower()) in linked or not col.kinds or "blob" in col.kinds:
                continue
            text = col.kinds == ("text",) and not _numeric_texts(distinct(table, col))
            best = None
            for parent, key in keys:
                if parent is table or (key.kinds == ("text",)) != (col.kinds == ("text",)):
                    continue
                related = _related_names(col.name, parent.name, key.name)
                if not text and not related:
                    continue
                if any(k.child == parent.name and k.parent == table.name for k in declared + found):
                    continue  # the reverse is a link already: no cycle of inclusions
                mine_values = distinct(table, col)
                if len(mine_values) < 2 or len(mine_values) > MINE_MAX_DISTINCT or not mine_values <= distinct(parent, key):
                    continue
                rank = (not related, parent.rows, parent.name, key.name)
                if best is None or rank < best[0]:
                    best = (rank, Link(table.name, (col.name,), parent.name, (key.name,), False))
            if best is not None:
                found.append(best[1])
    return found


# ---- the bundle's index holds a profile as JSON --------------------------------------------------------

def to_json(profile: Profile) -> dict:
    def column(c: ColumnFacts) -> dict:
        return {"name": c.name, "declared": c.declared, "kinds": list(c.kinds), "nulls": c.nulls, "unique": c.unique,
                "max_repeat": c.max_repeat, "near_unique": c.near_unique, "counts": [list(p) for p in c.counts],
                "shapes": list(c.shapes)}
    return {"tables": [{"name": t.name, "rows": t.rows, "key": list(t.key), "columns": [column(c) for c in t.columns]}
                       for t in profile.tables],
            "links": [{"child": k.child, "child_columns": list(k.child_columns), "parent": k.parent,
                       "parent_columns": list(k.parent_columns), "declared": k.declared, "total": k.total}
                      for k in profile.links],
            "dropped": list(profile.dropped)}


def from_json(data: dict) -> Profile:
    tables = tuple(TableFacts(t["name"], int(t["rows"]), tuple(
        ColumnFacts(c["name"], c["declared"], tuple(c["kinds"]), bool(c["nulls"]), bool(c["unique"]),
                    int(c["max_repeat"]), bool(c["near_unique"]), tuple((v, int(n)) for v, n in c["counts"]),
                    tuple(c["shapes"])) for c in t["columns"]), tuple(t["key"])) for t in data["tables"])
    links = tuple(Link(k["child"], tuple(k["child_columns"]), k["parent"], tuple(k["parent_columns"]),
                       bool(k["declared"]), bool(k["total"])) for k in data["links"])
    return Profile(tables, links, tuple(data.get("dropped", ())))
