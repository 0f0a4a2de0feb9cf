"""Mining an original's invariants (``neighbours.invariants``): the facts of each column and table, and
the facts between them: links declared and undeclared, parents all referenced, dependencies, paired
values, the widest row. The same SQL reads them on a neighbour (``neighbours.proof``).

>>> width(["Kyle", 10, 2.0, None])
9
"""

from __future__ import annotations

import dataclasses
import sqlite3

from . import thin
from .invariants import (
    DEPENDENCY_MIN_ROWS,
    DEPENDENCY_SUPPORT,
    FORMAT_MAX_SHAPES,
    MINE_MAX_DISTINCT,
    NEAR_UNIQUE,
    ColumnFacts,
    Link,
    Profile,
    TableFacts,
    _column_counts,
    _kinds,
    _scalar,
    _shapes,
    quote,
    table_names,
    unreferenced_sql,
)


def mine(conn: sqlite3.Connection) -> Profile:
    """Every invariant the database behind ``conn`` shows (the module docstring's list); of a thin
    database, only those its schema declares (``neighbours.thin.loosen``)."""
    facts = tuple(_table_facts(conn, name) for name in table_names(conn))
    declared, dropped = _declared(conn, facts)
    links = declared + _inclusions(conn, facts, declared)
    rows = {t.name: t.rows for t in facts}
    links = [dataclasses.replace(k, total=rows[k.parent] > 0 and _scalar(conn, unreferenced_sql(k)) == 0)
             for k in links]
    profile = Profile(tuple(_as_linked(conn, t, links) for t in facts), tuple(links), tuple(dropped))
    return thin.loosen(conn, profile) if thin.thin_profile(profile) else profile  # what two rows show by chance


def _as_linked(conn: sqlite3.Connection, table: TableFacts, links: list[Link]) -> TableFacts:
    """A link column takes its parent's values: the parent's format governs, and no other link column
    determines it; a free column may (a car's make its model: the make stays with its model). Where
    no two rows share all the table's link values, that is kept (``distinct_links``)."""
    linked = {c.lower() for k in links if k.child == table.name for c in k.child_columns}
    return dataclasses.replace(table, columns=tuple(dataclasses.replace(c, shapes=()) if c.name.lower() in linked
                                                    else c for c in table.columns),
                               depends=tuple(d for d in table.depends
                                             if d[1].lower() not in linked or d[0].lower() not in linked),
                               paired=tuple(d for d in table.paired if not {d[0].lower(), d[1].lower()} & linked),
                               extends=tuple(d for d in table.extends if not {d[0].lower(), d[1].lower()} & linked),
                               distinct_links=_distinct_links(conn, table, linked))


def link_columns(table: TableFacts, linked: set[str]) -> tuple[str, ...]:
    """The table's columns in ``linked`` (lower-case names), in the table's order."""
    return tuple(c.name for c in table.columns if c.name.lower() in linked)


def repeated_links(conn: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> int:
    """Rows sharing all of ``columns``' values (none NULL) with an earlier row."""
    present = " AND ".join(f"{quote(c)} IS NOT NULL" for c in columns)
    return _scalar(conn, f"SELECT count(*) - (SELECT count(*) FROM (SELECT DISTINCT {', '.join(quote(c) for c in columns)} "
                         f"FROM {quote(table)} WHERE {present})) FROM {quote(table)} WHERE {present}")


def _distinct_links(conn: sqlite3.Connection, table: TableFacts, linked: set[str]) -> tuple[str, ...]:
    """The table's link columns (two or more), where no two of its rows share all their values (a
    course once on a transcript, a teacher once on a course whatever the grade). As a column unique
    by chance stays unique, so does a combination: a neighbour repeating it would judge readings
    that differ only where the original never shows them (``count(*)`` against ``count(DISTINCT)``)."""
    columns = link_columns(table, linked)
    if len(columns) < 2:
        return ()
    present = " AND ".join(f"{quote(c)} IS NOT NULL" for c in columns)
    if _scalar(conn, f"SELECT count(*) FROM {quote(table.name)} WHERE {present}") < 2:
        return ()
    return columns if repeated_links(conn, table.name, columns) == 0 else ()


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
                      widest(conn, name, [c.name for c in columns]), _extends(conn, name, columns))


def width_sql(columns: list[str]) -> str:
    """A row's width: the bytes its values take written out (a text's UTF-8, a number's digits)."""
    return " + ".join(f"coalesce(length(CAST({quote(c)} AS BLOB)), 0)" for c in columns) or "0"


def widest(conn: sqlite3.Connection, table: str, columns: list[str]) -> int:
    return _scalar(conn, f"SELECT max({width_sql(columns)}) FROM {quote(table)}")


def _written(value: object) -> int:
    if isinstance(value, str) and value.isascii():
        return len(value)  # its UTF-8 bytes, one a character
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
    """Values of ``a`` found with more than one value of ``b`` (NULL counting as a value; texts
    that differ only in case or surrounding spaces as one: car_1 writes a model ' volkswagen' once)."""
    ta, tb = quote(a), quote(b)
    same = f"CASE WHEN typeof({tb}) = 'text' THEN lower(trim({tb})) ELSE {tb} END"
    return _scalar(conn, f"SELECT count(*) FROM (SELECT 1 FROM {quote(table)} WHERE {ta} IS NOT NULL GROUP BY {ta} "
                         f"HAVING count(DISTINCT {same}) + (count(*) > count({tb})) > 1)")


def unextended(conn: sqlite3.Connection, table: str, a: str, b: str) -> int:
    """Rows holding texts in ``a`` and ``b`` where ``b`` does not start with ``a``."""
    ta, tb = quote(a), quote(b)
    return _scalar(conn, f"SELECT count(*) FROM {quote(table)} WHERE typeof({ta}) = 'text' AND typeof({tb}) = 'text' "
                         f"AND substr({tb}, 1, length({ta})) <> {ta}")


def _extends(conn: sqlite3.Connection, table: str, columns: list[ColumnFacts]) -> tuple[tuple[str, str], ...]:
    """Pairs (a, b) of text columns where every b starts with its row's a and is longer on some
    row, over at least two values of a (a lens 'Canon EF 50mm' of the brand 'Canon')."""
    texts = [c.name for c in columns if c.kinds == ("text",)]
    out = []
    for a in texts:
        for b in texts:
            ta, tb, t = quote(a), quote(b), quote(table)
            if a == b or unextended(conn, table, a, b):
                continue
            values, longer = conn.execute(f"SELECT count(DISTINCT {ta}), count(CASE WHEN length({tb}) > length({ta}) "
                                          f"THEN 1 END) FROM {t} WHERE typeof({ta}) = 'text' AND typeof({tb}) = 'text' "
                                          f"AND {ta} <> ''").fetchone()
            if values >= 2 and longer:
                out.append((a, b))
    return tuple(out)


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
    """Whether a number column's name says it holds another table's key (``PetID`` for Pets.PetID,
    ``Airline`` for airlines.uid: a column named for the table it points into)."""
    def norm(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())
    c, col, table = norm(child), norm(parent_column), norm(parent_table)
    stem = table[:-1] if table.endswith("s") and len(table) > 3 else table
    return (c == col and col not in ("id", "code", "name", "rank")) or c.endswith(stem + col) or c in (table, stem)


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
