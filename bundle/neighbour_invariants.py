"""What a neighbour database keeps of its original: the invariants the original's data implies.

Mined once from the original (``mine``), stored in the bundle's index, and proved on every
neighbour built (``neighbour_proof``), at ``prepare``, in verification and in the grader's search:

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
  several repeated values (a region its continent), it still does; a value one original row holds
  in two text columns is held in both or neither (a type whose code and description are both 'CV');
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
                "declared keys naming nothing": len(self.dropped)}


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
    return Profile(tuple(_as_linked(t, links) for t in facts), tuple(links), tuple(dropped))


def _as_linked(table: TableFacts, links: list[Link]) -> TableFacts:
    """A link column takes its parent's values: the parent's format governs, and nothing else in the
    row determines it."""
    linked = {c.lower() for k in links if k.child == table.name for c in k.child_columns}
    return dataclasses.replace(table, columns=tuple(dataclasses.replace(c, shapes=()) if c.name.lower() in linked
                                                    else c for c in table.columns),
                               depends=tuple(d for d in table.depends if d[1].lower() not in linked),
                               paired=tuple(d for d in table.paired if not {d[0].lower(), d[1].lower()} & linked))


def _table_facts(conn: sqlite3.Connection, name: str) -> TableFacts:
    info = conn.execute(f"PRAGMA table_info({quote(name)})").fetchall()
    one_key = sum(1 for r in info if r[5]) == 1
    columns, rows = [], _scalar(conn, f"SELECT count(*) FROM {quote(name)}")
    for r in info:
        col = r[1]
        rows, present, distinct, most = _column_counts(conn, name, col)
        unique = (one_key and r[5] > 0) or (present > 1 and distinct == present)
        near = not unique and present > 0 and distinct >= NEAR_UNIQUE * present
        found = _shapes(conn, name, col, FORMAT_MAX_SHAPES)
        columns.append(ColumnFacts(col, r[2] or "", _kinds(conn, name, col), present < rows, unique, most, near,
                                   tuple(sorted(found or ()))))
    key = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
    return TableFacts(name, rows, tuple(columns), key, _dependencies(conn, name, columns), _paired(conn, name, columns),
                      widest(conn, name, [c.name for c in columns]))


def width_sql(columns: list[str]) -> str:
    """A row's width: the bytes its values take written out (a text's UTF-8, a number's digits)."""
    return " + ".join(f"coalesce(length(CAST({quote(c)} AS BLOB)), 0)" for c in columns) or "0"


def widest(conn: sqlite3.Connection, table: str, columns: list[str]) -> int:
    return _scalar(conn, f"SELECT max({width_sql(columns)}) FROM {quote(table)}")


def _written(value: object) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, float):
        text = format(value, ".15g")  # SQLite writes a real with 15 digits, an integral one with '.0'
        return len(text) + (2 if text.lstrip("-").isdigit() else 0)
    return len(str(value).encode("utf-8", "surrogateescape"))


def width(row: tuple | list) -> int:
    """``width_sql`` of a row in Python (values not yet stored are written as they will be)."""
    return sum(_written(v) for v in row if v is not None)


def _paired(conn: sqlite3.Connection, table: str, columns: list[ColumnFacts]) -> tuple[tuple[str, str, tuple], ...]:
    """Pairs of text columns with the values that, wherever the original holds them in either, it
    holds in both (a type's code and description, 'CV')."""
    texts = [c.name for c in columns if c.kinds == ("text",)]
    out = []
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            qa, qb, t = quote(a), quote(b), quote(table)
            values = tuple(sorted(v for (v,) in conn.execute(
                f"SELECT DISTINCT {qa} FROM {t} WHERE {qa} = {qb} EXCEPT SELECT {qa} FROM {t} WHERE {qa} IS NOT {qb} "
                f"EXCEPT SELECT {qb} FROM {t} WHERE {qa} IS NOT {qb}")))
            if values:
                out.append((a, b, values))
    return tuple(out)


def split_pairs(conn: sqlite3.Connection, table: str, pair: tuple[str, str, tuple]) -> int:
    """Rows holding one of the pair's values in one column and not in the other."""
    a, b, values = pair
    marks = ", ".join("?" * len(values))
    return _scalar(conn, f"SELECT count(*) FROM {quote(table)} WHERE ({quote(a)} IN ({marks}) OR {quote(b)} IN "
                         f"({marks})) AND {quote(a)} IS NOT {quote(b)}", list(values) * 2)


def determined(conn: sqlite3.Connection, table: str, a: str, b: str) -> int:
    """Values of ``a`` found with more than one value of ``b`` (NULL counting as a value)."""
    ta, tb = quote(a), quote(b)
    return _scalar(conn, f"SELECT count(*) FROM (SELECT 1 FROM {quote(table)} WHERE {ta} IS NOT NULL GROUP BY {ta} "
                         f"HAVING count(DISTINCT {tb}) + (count(*) > count({tb})) > 1)")


def _dependencies(conn: sqlite3.Connection, table: str, columns: list[ColumnFacts]) -> tuple[tuple[str, str], ...]:
    """Pairs (a, b) of non-unique columns where a determines b, seen on at least DEPENDENCY_SUPPORT
    repeated values of a (region -> continent); each b keeps its best-supported determinant."""
    found: dict[str, tuple[int, str]] = {}
    support: dict[str, int] = {}
    if _scalar(conn, f"SELECT count(*) FROM {quote(table)}") < DEPENDENCY_MIN_ROWS:
        return ()  # too few rows to tell a dependency from chance
    for a in columns:
        if a.unique or a.max_repeat < 2 or "blob" in a.kinds:
            continue
        support[a.name] = _scalar(conn, f"SELECT count(*) FROM (SELECT 1 FROM {quote(table)} WHERE {quote(a.name)} "
                                        f"IS NOT NULL GROUP BY {quote(a.name)} HAVING count(*) > 1)")
    for a_name, n in support.items():
        if n < DEPENDENCY_SUPPORT:
            continue
        for b in columns:
            if b.name == a_name or b.unique or b.max_repeat < 2 or "blob" in b.kinds:
                continue
            if determined(conn, table, a_name, b.name) == 0 and (b.name not in found or n > found[b.name][0]):
                found[b.name] = (n, a_name)
    return tuple((a, b) for b, (_n, a) in sorted(found.items()))


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
                dropped.append(f"{table.name} -> {parts[0][2]}: names a table that does not exist")
                continue
            wanted = [f[4] for f in parts]
            if any(c is None for c in wanted):
                wanted = list(parent.key)
            names = {c.name.lower(): c.name for c in parent.columns}
            mine_ = {c.name.lower(): c.name for c in table.columns}
            if len(wanted) != len(parts) or any(str(c).lower() not in names for c in wanted) or \
                    any(str(f[3]).lower() not in mine_ for f in parts):
                dropped.append(f"{table.name}({', '.join(str(f[3]) for f in parts)}) -> {parent.name}: "
                               "names a column that does not exist")
                continue
            link = Link(table.name, tuple(mine_[str(f[3]).lower()] for f in parts), parent.name,
                        tuple(names[str(c).lower()] for c in wanted), True)
            if any(k.child == link.child and k.child_columns == link.child_columns and k.parent == link.parent
                   for k in links):
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
                "max_repeat": c.max_repeat, "near_unique": c.near_unique, "shapes": list(c.shapes)}
    return {"tables": [{"name": t.name, "rows": t.rows, "key": list(t.key), "columns": [column(c) for c in t.columns],
                        "depends": [list(d) for d in t.depends], "paired": [[a, b, list(v)] for a, b, v in t.paired],
                        "widest": t.widest}
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
        tuple((a, b, tuple(v)) for a, b, v in t.get("paired", ())), int(t.get("widest", 0))) for t in data["tables"])
    links = tuple(Link(k["child"], tuple(k["child_columns"]), k["parent"], tuple(k["parent_columns"]),
                       bool(k["declared"]), bool(k["total"])) for k in data["links"])
    return Profile(tables, links, tuple(data.get("dropped", ())))
