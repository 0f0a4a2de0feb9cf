"""What a neighbour database keeps of its original: the invariants the original's data implies.

Mined once from the original (``neighbours.mining.mine``), stored in the bundle's index, and proved
on every neighbour built (``neighbours.proof``), at ``prepare``, in verification and in the grader's
search:

* links: each declared foreign key (even where the original's data breaks it: flight_2's codes
  with a leading space), and each undeclared inclusion the data shows (every value of a column is
  a value of another table's key column; for numbers, the names must be related too). A
  neighbour holds every link entirely: no child value without its parent;
* total links: where every parent value is referenced in the original (every country has a
  city), every parent value is referenced on the neighbour;
* per column: unique stays unique; no NULL where the original has none; only the storage classes
  the original holds (no text in a column of numbers); a text format where the original has one
  (every value has a digit and at most ``FORMAT_MAX_SHAPES`` shapes: dates, codes, numbers as text
  keep their shape); in a column of nearly distinct values (names, titles), no value repeated more
  often than the original repeats one; where one column determines another in the original on
  several repeated values (a region its continent, a car's make its model, even where the model
  is a link), it still does; a value one original row holds in two text columns is held in both or
  neither (a type whose code and description are both 'CV'); a text that starts with its row's
  other text in the original (a lens 'Canon EF 50mm' of the brand 'Canon') still does;
* link rows: where no two rows of a table share the values of all its link columns (two or more:
  a course listed once on a transcript), no two share them on the neighbour;
* a table with rows keeps rows, none of them wider than the original's widest or ROOMY_ROW
  bytes (so that a neighbour's record fits the scorer's record cap wherever the original's do).

All facts are read with SQL, so a neighbour is judged exactly as its original was (collations,
affinities). Standard library only.

>>> shape("2014-05-01"), shape("Kyle B.")
('9999-99-99', 'Aaaa A.')
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import urllib.parse

FORMAT_MAX_SHAPES = 4
NEAR_UNIQUE = 0.8  # share of distinct values above which a column's values are names, not categories
MINE_MAX_DISTINCT = 20_000  # columns with more distinct values are not searched for undeclared inclusions
DEPENDENCY_SUPPORT = 3  # repeated values of a column needed before "it determines another" counts
DEPENDENCY_MIN_ROWS = 10
ROOMY_ROW = 320  # bytes a neighbour's row may always take (the scorer caps a record at max_cell_bytes, 512)


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
    near_unique: bool  # at least NEAR_UNIQUE of its values distinct: names, titles (no value above max_repeat)
    shapes: tuple[str, ...] = ()  # its text format; empty: free text


@dataclasses.dataclass(frozen=True)
class TableFacts:
    name: str
    rows: int
    columns: tuple[ColumnFacts, ...]
    key: tuple[str, ...] = ()  # the declared primary key's columns
    depends: tuple[tuple[str, str], ...] = ()  # (a, b): a determines b (region -> continent), with support
    paired: tuple[tuple[str, str, tuple], ...] = ()  # (a, b, values): a row holding one of them in a or b holds
    # it in both (a type whose code and description are both 'CV')
    widest: int = 0  # the longest row's bytes (``width``): no row is longer (``room``)
    extends: tuple[tuple[str, str], ...] = ()  # (a, b): every b starts with its row's a (a lens 'Canon EF' of 'Canon')
    distinct_links: tuple[str, ...] = ()  # its link columns, whose values together no two rows share (a course
    # listed once on a transcript)

    @property
    def room(self) -> int:
        """The widest row a neighbour may hold: the original's, or ROOMY_ROW bytes where that is more
        (well under the scorer's record cap, so that a row of the neighbour reads where the original's do)."""
        return max(self.widest, ROOMY_ROW)

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
    dropped: tuple[str, ...] = ()  # declared keys naming a table or column that does not exist

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
                "dependencies": sum(len(t.depends) for t in self.tables),
                "paired values": sum(len(t.paired) for t in self.tables),
                "extended values": sum(len(t.extends) for t in self.tables),
                "link rows never repeated": sum(bool(t.distinct_links) for t in self.tables),
                "declared keys naming nothing": len(self.dropped)}


# ---- relaxations: one invariant a neighbour may break, for the golds whose question it hides ---------

TOTAL_LINK, NO_NULL = "total link", "column without NULL"  # the kinds ``Profile.counts`` names, singular
RELAXABLE = (TOTAL_LINK, NO_NULL)


@dataclasses.dataclass(frozen=True)
class Relaxed:
    """An invariant one neighbour does not keep, and the golds judged there because of it.

    A kept invariant can hide a question: where every room is booked in the original, every
    neighbour books every room, and "the rooms without a reservation" has the same answer (none)
    everywhere, so ``SELECT 0`` is paid. ``kind`` is ``TOTAL_LINK`` (``subject``: ``Link.describe()``;
    its parent rows need no longer all be referenced) or ``NO_NULL`` (``subject``: ``table.column``;
    it may hold NULL). The index records it per neighbour (``relaxed``); the proof accepts exactly it.
    """

    kind: str
    subject: str
    golds: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"kind": self.kind, "subject": self.subject, "golds": list(self.golds)}

    @staticmethod
    def from_json(data: dict) -> Relaxed:
        return Relaxed(str(data["kind"]), str(data["subject"]), tuple(str(g) for g in data.get("golds", ())))


def relax(profile: Profile, relaxed: tuple[Relaxed, ...] | list[Relaxed]) -> Profile:
    """``profile`` without the invariants ``relaxed`` names; ValueError names one that is none of its
    invariants (a kind not relaxable, a link not total, a column that holds NULL already).

    >>> col = ColumnFacts("rain", "REAL", ("real",), False, False, 1, False)
    >>> p = Profile((TableFacts("reading", 4, (col,)),), ())
    >>> relax(p, [Relaxed(NO_NULL, "reading.rain")]).table("reading").column("rain").nulls
    True
    """
    links, tables = list(profile.links), {t.name: t for t in profile.tables}
    for item in relaxed:
        if item.kind == TOTAL_LINK:
            at = next((i for i, k in enumerate(links) if k.total and k.describe() == item.subject), None)
            if at is None:
                raise ValueError(f"it relaxes {item.kind} {item.subject}, which is not one of the original's total links")
            links[at] = dataclasses.replace(links[at], total=False)
        elif item.kind == NO_NULL:
            table, _, column = item.subject.partition(".")
            facts = tables.get(table)
            col = next((c for c in facts.columns if c.name == column), None) if facts is not None else None
            if facts is None or col is None or col.nulls or not facts.rows:
                raise ValueError(f"it relaxes {item.kind} {item.subject}, which is not a column without NULL "
                                 "of the original")
            tables[table] = dataclasses.replace(facts, columns=tuple(
                dataclasses.replace(c, nulls=True) if c is col else c for c in facts.columns))
        else:
            raise ValueError(f"it relaxes {item.kind!r}, which is no relaxable invariant ({', '.join(RELAXABLE)})")
    return dataclasses.replace(profile, tables=tuple(tables[t.name] for t in profile.tables), links=tuple(links))


# ---- reading facts with SQL (the same statements mine the original and check a neighbour) -----------

def _scalar(conn: sqlite3.Connection, sql: str, params: list | tuple = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0] or 0)


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


def orphan_values_sql(link: Link) -> str:
    """How many distinct link values child rows hold that no parent holds (a copy of an orphan adds
    none; a parent renamed under its children adds one)."""
    return (f"SELECT count(*) FROM (SELECT DISTINCT {', '.join(quote(c) for c in link.child_columns)} "
            f"FROM {quote(link.child)} WHERE {orphans_where(link)})")


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


# ---- the bundle's index holds a profile as JSON --------------------------------------------------------

def to_json(profile: Profile) -> dict:
    def column(c: ColumnFacts) -> dict:
        return {"name": c.name, "declared": c.declared, "kinds": list(c.kinds), "nulls": c.nulls, "unique": c.unique,
                "max_repeat": c.max_repeat, "near_unique": c.near_unique, "shapes": list(c.shapes)}
    return {"tables": [{"name": t.name, "rows": t.rows, "key": list(t.key), "columns": [column(c) for c in t.columns],
                        "depends": [list(d) for d in t.depends], "paired": [[a, b, list(v)] for a, b, v in t.paired],
                        "widest": t.widest, "extends": [list(e) for e in t.extends],
                        "distinct_links": list(t.distinct_links)}
                       for t in profile.tables],
            "links": [{"child": k.child, "child_columns": list(k.child_columns), "parent": k.parent,
                       "parent_columns": list(k.parent_columns), "declared": k.declared, "total": k.total}
                      for k in profile.links],
            "dropped": list(profile.dropped)}


def from_json(data: dict) -> Profile:
    tables = tuple(TableFacts(t["name"], int(t["rows"]), tuple(
        ColumnFacts(c["name"], c["declared"], tuple(c["kinds"]), bool(c["nulls"]), bool(c["unique"]),
                    int(c["max_repeat"]), bool(c["near_unique"]), tuple(c["shapes"])) for c in t["columns"]),
        tuple(t["key"]), tuple((a, b) for a, b in t.get("depends", ())),
        tuple((a, b, tuple(v)) for a, b, v in t.get("paired", ())), int(t.get("widest", 0)),
        tuple((a, b) for a, b in t.get("extends", ())), tuple(t.get("distinct_links", ()))) for t in data["tables"])
    links = tuple(Link(k["child"], tuple(k["child_columns"]), k["parent"], tuple(k["parent_columns"]),
                       bool(k["declared"]), bool(k["total"])) for k in data["links"])
    return Profile(tables, links, tuple(data.get("dropped", ())))
