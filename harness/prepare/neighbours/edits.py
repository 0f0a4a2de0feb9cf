"""Edits of a small database that may tell a gold from an answer that only looks like it.

Two sources of edits, each a list of SQL statements run on a copy of a base database (the proof,
``bundle.neighbours.proof``, decides afterwards whether the copy keeps every invariant):

* ``targeted`` (the separation's, harness.prepare.neighbours.separate): two rows swap their values
  in a column holding a value of the gold's answer or a literal it compares with (the row the
  question names takes another's name); a cell holding such a value gets the column's next one or
  one none has (a row the WHERE must cut); a row gets the literal a dropped condition would keep; a
  row holding the answer is copied with fresh keys (one more row for a count, a group, a DISTINCT
  or a LIMIT); a row of a table the gold reads is deleted with the rows that need it;
* ``boundary`` (the near-miss oracle's, harness.audit.nearmiss.oracle): one row's cell set to a literal a
  query compares that column with, exactly, then one either side of it: ``salary = 50000`` is what
  tells ``salary < 50000`` from ``salary <= 50000``. A gold's ``BETWEEN`` bound is never set
  where the original does not hold it (both readings of "between" are fair: docs/neighbours.md).

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "w.sqlite")
>>> with sqlite3.connect(path) as c: _ = c.executescript(
...     "CREATE TABLE r(id INTEGER PRIMARY KEY, mm REAL); INSERT INTO r VALUES (1, 0.0), (2, 3.2);")
>>> conn = sqlite3.connect(path)
>>> [what for what, _edit in boundary(conn, [("r", "mm", "REAL")], {"mm": [3]}, {})][:3]
['r.mm of row 1 set to 3.0', 'r.mm of row 2 set to 3.0', 'r.mm of row 1 set to 2.0']
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path

from bundle.contract.limits import Limits
from bundle.neighbours import values as nv
from bundle.neighbours.invariants import Profile, TableFacts, open_read_only, orphans_where, quote
from bundle.sql import guard as sql_guard

SWAPS = 3  # columns whose values a base swaps, per base
CHANGES = 3  # rows whose value is changed, per column the gold compares with a literal or answers from
DELETES = 6  # rows deleted (one at a time) per table the gold reads, per base
EDITS = 40  # targeted edits tried per base at most
BOUNDARY_ROWS = 12  # rows given one boundary value, one at a time, per column
BUILD_STEPS = 5_000_000  # work the gold may take on a base to show its answer (bases are small)

Edit = list[tuple[str, tuple]]  # statements and their parameters


def targeted(base: Path, gold: str, profile: Profile, limits: Limits) -> Iterator[tuple[str, Edit]]:
    """Targeted edits of ``base``, at most EDITS: swaps, then changes, in the columns holding the
    gold's values or compared with its literals, then copies and deletions of rows of the tables it reads."""
    linked = _linked(profile)
    try:
        answer = sql_guard.run_query(str(base), gold, limits, budget_steps=BUILD_STEPS,
                                     wall_s=limits.wall_guard_s).rows[:20]
    except sql_guard.QueryFailed:
        return
    values = [v for row in answer for v in row if v is not None][:40]
    words = {w.lower().strip('"`[]') for w in gold.replace(",", " ").replace("(", " ").replace(")", " ").split()}
    compared = nv.literals_by_column(gold, {c.name.lower() for t in profile.tables for c in t.columns})
    free = [(t, c.name) for t in profile.tables for c in t.columns if (t.name.lower(), c.name.lower()) not in linked]
    read = [t for t in profile.tables if t.name.lower() in words]
    conn = open_read_only(str(base))
    try:
        made = itertools.chain(_swaps(conn, free, compared, values), _changes(conn, free, compared, values),
                               _copies(conn, read, values), _deletes(conn, profile, read))
        yield from itertools.islice(made, EDITS)
    finally:
        conn.close()


def boundary(conn: sqlite3.Connection, columns: list[tuple[str, str, str]], literals: Mapping[str, list],
             bounds: Mapping[str, list], conditions: Mapping[str, list[tuple[str, object]]] | None = None,
             ) -> Iterator[tuple[str, Edit]]:
    """One row's cell set to a boundary value, for each (table, column, declared type) of ``columns``
    whose name ``literals`` compares with: every literal exactly first, then one either side; at most
    BOUNDARY_ROWS rows a value, rows already holding it skipped; the columns take turns, one edit
    each, so that a cap reaches every column. ``bounds``: a gold's BETWEEN bounds (column -> values),
    never set where the original lacks them (the caller drops those it holds). ``conditions``: the
    gold's comparisons (``neighbours.values.comparisons_by_column``); a column's rows that meet the
    most of those on the table's other columns come first, each given every value in turn
    (``year = 1956 AND total > 400``: a total of 400 shows on a row of 1956)."""
    for nearby in (False, True):
        each = [_boundary_of(conn, table, column, declared, literals, bounds, nearby, conditions or {})
                for table, column, declared in columns]
        for turn in itertools.zip_longest(*each):
            yield from (made for made in turn if made is not None)


def _boundary_of(conn: sqlite3.Connection, table: str, column: str, declared: str, literals: Mapping[str, list],
                 bounds: Mapping[str, list], nearby: bool,
                 conditions: Mapping[str, list[tuple[str, object]]]) -> Iterator[tuple[str, Edit]]:
    """``boundary``'s edits of one column: its rows most likely to meet the query's other conditions
    first, each given every value in turn (at most BOUNDARY_ROWS rows a value)."""
    values = [nv.stored(v, declared) for v in _boundary_values(literals.get(column.lower(), []), nearby)
              if v not in bounds.get(column.lower(), [])]
    if not values:
        return
    given = dict.fromkeys(range(len(values)), 0)
    order = _likely_first(conn, table, column, conditions)
    for (rowid,) in _rows(conn, table, "1", [], BOUNDARY_ROWS * len(values), order):
        for k, value in enumerate(values):
            if given[k] < BOUNDARY_ROWS and _rows(conn, table, f"rowid = ? AND {quote(column)} IS NOT ?", [rowid, value], 1):
                given[k] += 1
                yield (f"{table}.{column} of row {rowid} set to {value!r}",
                       [(f"UPDATE {quote(table)} SET {quote(column)} = ? WHERE rowid = ?", (value, rowid))])


def _likely_first(conn: sqlite3.Connection, table: str, column: str,
                  conditions: Mapping[str, list[tuple[str, object]]]) -> tuple[str, list]:
    """An ORDER BY (and its parameters) putting first the rows that meet the most of the query's
    comparisons on the table's other columns, then by rowid."""
    try:
        names = [row[1] for row in conn.execute(f"PRAGMA table_info({quote(table)})")]
    except sqlite3.Error:
        names = []
    parts, params = [], []
    for name in names:
        if name.lower() != column.lower():
            for op, value in conditions.get(name.lower(), []):
                parts.append(f"coalesce({quote(name)} {'<>' if op == '!=' else op} ?, 0)")
                params.append(value)
    return (f"({' + '.join(parts)}) DESC, rowid", params) if parts else ("rowid", [])


def _boundary_values(literals: list, nearby: bool) -> list:
    """The literals themselves, or (``nearby``) the numbers one either side of each."""
    if not nearby:
        return list(literals)
    return [v for lit in literals if isinstance(lit, (int, float)) and not isinstance(lit, bool)
            for v in (lit - 1, lit + 1)]


def apply(path: Path, edit: Edit, *, vacuum: bool = True) -> bool:
    """Apply ``edit`` to the database at ``path`` (and VACUUM it); False when SQLite refuses a statement.
    Not vacuumed, it is a scratch copy: written without a journal or a sync (the bytes are the same)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # the proof checks the links afterwards, as for every neighbour
        if not vacuum:
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        for sql, params in edit:
            conn.execute(sql, params)
        conn.execute("COMMIT")
        if vacuum:
            conn.execute("VACUUM")
        return True
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _linked(profile: Profile) -> set[tuple[str, str]]:
    return {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns} | \
           {(k.parent.lower(), c.lower()) for k in profile.links for c in k.parent_columns}


def free_columns(profile: Profile) -> list[tuple[str, str, str]]:
    """(table, column, declared type) of every column that is no link's, in the profile's order."""
    linked = _linked(profile)
    return [(t.name, c.name, c.declared) for t in profile.tables for c in t.columns
            if (t.name.lower(), c.name.lower()) not in linked]


def _swaps(conn: sqlite3.Connection, free: list, compared: dict[str, list], values: list) -> Iterator[tuple[str, Edit]]:
    """Swaps in the columns holding a value of the gold's answer, or a literal it compares them with
    (the row the question names takes another row's key or name)."""
    found = ((f"swap {t.name}.{c}", _swap(conn, t.name, c, wanted)) for t, c in free
             for wanted in (compared.get(c.lower(), []) + values,) if wanted)
    return itertools.islice(((what, edit) for what, edit in found if edit is not None), SWAPS)


def _changes(conn: sqlite3.Connection, free: list, compared: dict[str, list], values: list) -> Iterator[tuple[str, Edit]]:
    """Cells changed: where a row holds a literal the gold compares a column with, each other column
    holding a value of its answer; then the literal's column itself, and the answer's; then rows that
    do not hold a literal given it (a row a dropped condition would keep)."""
    for t, c in free:
        for lit_col, lits in sorted(compared.items()):
            if lit_col and lit_col != c.lower() and values and any(x.name.lower() == lit_col for x in t.columns):
                yield from _changed(conn, t.name, c, f"{quote(lit_col)} IN ({_marks(lits)}) AND "
                                    f"{quote(c)} IN ({_marks(values)})", [*lits, *values])
    for t, c in free:
        for wanted in (compared.get(c.lower(), []), values):
            if wanted:
                yield from _changed(conn, t.name, c, f"{quote(c)} IN ({_marks(wanted)})", wanted)
    for t, c in free:
        for lit in compared.get(c.lower(), []):
            for (rowid,) in _rows(conn, t.name, f"{quote(c)} IS NOT ?", [lit]):
                yield f"{t.name}.{c} of row {rowid} set to {lit!r}", [(f"UPDATE {quote(t.name)} SET {quote(c)} = ? "
                                                                       "WHERE rowid = ?", (lit, rowid))]


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))


def _rows(conn: sqlite3.Connection, table: str, where: str, params: list, limit: int = CHANGES,
          order: tuple[str, list] = ("rowid", [])) -> list[tuple]:
    try:
        return conn.execute(f"SELECT rowid FROM {quote(table)} WHERE {where} ORDER BY {order[0]} LIMIT {limit}",
                            [*params, *order[1]]).fetchall()
    except sqlite3.Error:
        return []


def _changed(conn: sqlite3.Connection, table: str, column: str, where: str, params: list) -> Iterator[tuple[str, Edit]]:
    """For the first CHANGES rows ``where`` holds: ``column`` set to its first other value, and to one
    none has (a number past the greatest, the text with ``~2``)."""
    t, c = quote(table), quote(column)
    for (rowid,) in _rows(conn, table, where, params):
        other = _rows(conn, table, f"{c} IS NOT (SELECT {c} FROM {t} WHERE rowid = ?) AND {c} IS NOT NULL", [rowid], 1)
        what = f"change {table}.{column} row {rowid}"
        if other:
            yield what, [(f"UPDATE {t} SET {c} = (SELECT {c} FROM {t} WHERE rowid = ?) WHERE rowid = ?", (other[0][0], rowid))]
        yield what + " (new)", [(f"UPDATE {t} SET {c} = {_fresh(t, c)} WHERE rowid = ?", (rowid,))]


def _fresh(t: str, c: str) -> str:
    """A value of column ``c`` of table ``t`` none has: a number past the greatest, a text with ``~2``."""
    return (f"CASE WHEN typeof({c}) IN ('integer', 'real') THEN (SELECT max({c}) FROM {t} WHERE typeof({c}) IN "
            f"('integer', 'real')) + 1 WHEN {c} IS NULL THEN NULL ELSE {c} || '~2' END")


def _copies(conn: sqlite3.Connection, read: list[TableFacts], values: list) -> Iterator[tuple[str, Edit]]:
    """A copy of a row of a table the gold reads, its keys and unique columns fresh: one more row for
    a count, a group, a DISTINCT or a LIMIT to see. The first rows holding a value of the gold's
    answer, then the last rows."""
    for table in read:
        t = quote(table.name)
        fresh = {c.lower() for c in table.key} | {c.name.lower() for c in table.columns if c.unique or c.near_unique}
        exprs = ", ".join(_fresh(t, quote(c.name)) if c.name.lower() in fresh else quote(c.name)
                          for c in table.columns)
        names = ", ".join(quote(c.name) for c in table.columns)
        holding = " OR ".join(f"{quote(c.name)} IN ({_marks(values)})" for c in table.columns) if values else "0"
        rows = _rows(conn, table.name, holding, values * len(table.columns), 2) + \
            conn.execute(f"SELECT rowid FROM {t} ORDER BY rowid DESC LIMIT 2").fetchall()
        for rowid in dict.fromkeys(r[0] for r in rows):
            yield f"copy {table.name} row {rowid}", [(f"INSERT INTO {t} ({names}) SELECT {exprs} FROM {t} WHERE rowid = ?",
                                                      (rowid,))]


def _deletes(conn: sqlite3.Connection, profile: Profile, read: list[TableFacts]) -> Iterator[tuple[str, Edit]]:
    for table in read:
        for (rowid,) in conn.execute(f"SELECT rowid FROM {quote(table.name)} ORDER BY rowid LIMIT {DELETES}").fetchall():
            yield f"delete {table.name} row {rowid}", _delete(profile, table.name, rowid)


def _swap(conn: sqlite3.Connection, table: str, column: str, values: list) -> Edit | None:
    """Swap ``column``'s value in the first row holding one of ``values`` with the first row holding another."""
    t, c = quote(table), quote(column)
    try:
        first = conn.execute(f"SELECT rowid FROM {t} WHERE {c} IN ({_marks(values)}) ORDER BY rowid LIMIT 1",
                             values).fetchone()
        if first is None:
            return None
        other = conn.execute(f"SELECT rowid FROM {t} WHERE {c} IS NOT (SELECT {c} FROM {t} WHERE rowid = ?) "
                             f"AND {c} IS NOT NULL ORDER BY rowid LIMIT 1", (first[0],)).fetchone()
    except sqlite3.Error:
        return None
    if other is None:
        return None
    a, b = first[0], other[0]
    # Through a temporary table, so that the values keep their storage class and bytes, and a
    # unique column is never two rows' at once.
    return [("CREATE TEMP TABLE swapped AS SELECT rowid AS r, " + c + " AS v FROM " + t + " WHERE rowid IN (?, ?)", (a, b)),
            (f"UPDATE {t} SET {c} = x'7e7e7e' WHERE rowid = ?", (a,)),
            (f"UPDATE {t} SET {c} = (SELECT v FROM swapped WHERE r = ?) WHERE rowid = ?", (a, b)),
            (f"UPDATE {t} SET {c} = (SELECT v FROM swapped WHERE r = ?) WHERE rowid = ?", (b, a))]


def _delete(profile: Profile, table: str, rowid: int) -> Edit:
    """Delete one row, then, as many times as there are links, every row left without its parent."""
    edit: Edit = [(f"DELETE FROM {quote(table)} WHERE rowid = ?", (rowid,))]
    for _round in range(len(profile.links)):
        edit += [(f"DELETE FROM {quote(k.child)} WHERE {orphans_where(k)}", ()) for k in profile.links]
    return edit
