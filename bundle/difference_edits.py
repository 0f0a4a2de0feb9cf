"""The edits the search aimed at the difference tries: one cell, one row added, one row removed.

Each edit changes the original in one place chosen by where an answer differs from its gold
(``difference_reading.Difference``), so that whatever the two disagree on shows in the rows:

* for a column the two use differently (a *lane*), its cells get values around the literals
  either compares it with: the literal itself, one either side of a number, the text inside a
  longer one (``'King'`` in ``'King omega'``: a substring is no equality), the texts a LIKE
  pattern's parts show up in; then the column's own values (its most common one, which merges
  two groups, and a value none holds, which splits one), and NULL where the original holds NULL.
  The rows changed are those holding a literal (moved out of a condition), those meeting the
  gold's other comparisons on that table (moved into it), and the first;
* for the tables the two read: a row copied with fresh keys (a second row where one was
  expected, a duplicate for a DISTINCT, a tie for a LIMIT), a row removed with the rows that need
  it, and a parent left without its children;
* the columns both use alike come after, in the same way.

Lanes take turns, so that a cap on the edits reaches every one. Whether an edit keeps the
original's invariants is not decided here: the search proves each one (``neighbour_proof``)
before it judges anything on it. Reading the original's values is counted work (the caller's
``Counter``). Everything is ordered by SQL (``ORDER BY rowid``) and by value, never by a set's
iteration: the same inputs give the same edits in every process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import NamedTuple

try:
    from . import neighbour_invariants as inv
    from . import neighbour_values as nv
    from .difference_reading import Difference, Lane
except ImportError:  # run as a standalone file
    import neighbour_invariants as inv  # type: ignore[no-redef]
    import neighbour_values as nv  # type: ignore[no-redef]
    from difference_reading import Difference, Lane  # type: ignore[no-redef]

ROWS_PER_VALUE = 2  # rows given one value, one at a time
VALUES_PER_LANE = 12  # values a lane offers at most
CASCADE_DEPTH = 3  # links followed when a removed row's dependants go with it
FILLER = nv.FILLERS[1]


class Edit(NamedTuple):
    """One change of the original: what it is, its statements and the tables it changes."""

    what: str
    statements: tuple[tuple[str, tuple], ...]
    tables: tuple[str, ...]


class Column(NamedTuple):
    table: inv.TableFacts
    facts: inv.ColumnFacts


def _q(name: str) -> str:
    return inv.quote(name)


def edits(conn: sqlite3.Connection, profile: inv.Profile, diff: Difference, gold_comparisons: dict,
          most: int) -> list[Edit]:
    """At most ``most`` edits for ``diff`` on the database behind ``conn`` (read only here), in the
    order they are tried (module docstring). ``gold_comparisons``: ``comparisons_by_column`` of the gold."""
    lanes: list[Iterator[Edit]] = []
    for lane in diff.lanes:
        found = _column(profile, lane)
        if found is not None:
            lanes.append(_lane(conn, profile, found, lane, gold_comparisons))
    rows = _rows(conn, profile, diff)
    lanes.insert(0 if diff.shape_differs or not lanes else min(1, len(lanes)), rows)
    later = [_lane(conn, profile, found, lane, gold_comparisons) for lane in diff.shared
             for found in [_column(profile, lane)] if found is not None]
    out: list[Edit] = []
    seen: set[tuple] = set()
    for group in (lanes, later):
        for edit in _turns(group):
            if edit.statements not in seen:
                seen.add(edit.statements)
                out.append(edit)
                if len(out) >= most:
                    return out
    return out


def _turns(iterators: list[Iterator[Edit]]) -> Iterator[Edit]:
    """One edit from each in turn, until all are spent."""
    live = list(iterators)
    while live:
        still = []
        for it in live:
            edit = next(it, None)
            if edit is not None:
                yield edit
                still.append(it)
        live = still


def _column(profile: inv.Profile, lane: Lane) -> Column | None:
    for table in profile.tables:
        if table.name.lower() == lane.table:
            for col in table.columns:
                if col.name.lower() == lane.column:
                    return Column(table, col)
    return None


def _linked(profile: inv.Profile, table: str) -> set[str]:
    return {c.lower() for k in profile.links_of(table) for c in k.child_columns}


# ---- a column's cells -------------------------------------------------------------------------------

def _lane(conn: sqlite3.Connection, profile: inv.Profile, col: Column, lane: Lane,
          gold_comparisons: dict) -> Iterator[Edit]:
    table, facts = col.table.name, col.facts
    if not col.table.rows:
        return
    t, c = _q(table), _q(facts.name)
    values = _values(conn, col, lane, facts.name.lower() in _linked(profile, table))
    telling = _telling(conn, col, gold_comparisons)
    for value, note in values:
        rows = _holding(conn, t, c, lane.literals) + telling + _first(conn, t, 3)
        used = 0
        for rowid in dict.fromkeys(rows):
            if used >= ROWS_PER_VALUE:
                break
            if _holds(conn, t, c, rowid, value):
                continue
            used += 1
            yield Edit(f"{table}.{facts.name} of row {rowid} set to {note}",
                       ((f"UPDATE {t} SET {c} = ? WHERE rowid = ?", (value, rowid)),), (table,))
        added = _copy(conn, profile, col.table, rows[:1], {facts.name: value})
        if added is not None:
            yield added._replace(what=f"{added.what} holding {note} in {facts.name}")


def _values(conn: sqlite3.Connection, col: Column, lane: Lane, linked: bool) -> list[tuple[object, str]]:
    """(value, how it reads) for a column's cells: around its literals, then its own (module docstring).
    A link's cell names a parent: it only takes values the column holds already (a row moved to
    another parent)."""
    facts = col.facts
    out: list[tuple[object, str]] = []
    for literal in () if linked else lane.literals:
        if isinstance(literal, str) and ("%" in literal or "_" in literal):
            out += [(text, repr(text)) for text in nv.like_texts(literal)]
            continue
        value = nv.stored(literal, facts.declared)
        out.append((value, repr(value)))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            step = 1 if isinstance(value, int) else 0.5
            out += [(value - step, repr(value - step)), (value + step, repr(value + step))]
        elif isinstance(value, str):
            out += [(f"{value} {FILLER}", repr(f"{value} {FILLER}")), (f"{nv.FILLERS[0]} {value}",
                                                                        repr(f"{nv.FILLERS[0]} {value}"))]
            if facts.shapes:
                out += [(v, repr(v)) for v in nv.in_format(value, facts.shapes, _texts(conn, col))]
    t, c = _q(col.table.name), _q(facts.name)
    for order, note in (("DESC", "its most common value"), ("ASC", "its least common value")):
        found = conn.execute(f"SELECT {c} FROM {t} WHERE {c} IS NOT NULL GROUP BY {c} "
                             f"ORDER BY count(*) {order}, {c} LIMIT 1").fetchone()
        if found is not None:
            out.append((found[0], note))  # two groups merged: the rows of one join the other
    fresh = None if linked else _fresh(conn, col, None)
    if fresh is not None:
        out.append((fresh, "a value none holds"))
    if facts.nulls:
        out.append((None, "NULL"))
    kept, seen = [], set()
    for value, note in out:
        key = (type(value).__name__, repr(value))
        if key not in seen and nv.fits(facts, value) and len(str(value)) <= 200:
            seen.add(key)
            kept.append((value, note))
    return kept[:VALUES_PER_LANE]


def _texts(conn: sqlite3.Connection, col: Column) -> list[str]:
    c = _q(col.facts.name)
    return [r[0] for r in conn.execute(f"SELECT DISTINCT {c} FROM {_q(col.table.name)} "
                                       f"WHERE typeof({c}) = 'text' ORDER BY {c} LIMIT 5")]


def _holding(conn: sqlite3.Connection, t: str, c: str, literals: tuple) -> list[int]:
    """Rows whose cell holds one of ``literals`` (exactly)."""
    plain = [v for v in literals if not (isinstance(v, str) and ("%" in v or "_" in v))]
    out: list[int] = []
    for value in plain[:4]:
        out += [r[0] for r in conn.execute(f"SELECT rowid FROM {t} WHERE {c} = ? ORDER BY rowid LIMIT 2", (value,))]
    return out


def _telling(conn: sqlite3.Connection, col: Column, comparisons: dict) -> list[int]:
    """Rows that meet the most of the gold's comparisons on the table's other columns (the gold keeps them)."""
    names = {c.name.lower(): c.name for c in col.table.columns}
    terms = []
    for name, found in sorted(comparisons.items()):
        if name in names and name != col.facts.name.lower():
            for op, value in found:
                sign = "<>" if op in ("!=", "<>") else "=" if op == "==" else op
                terms.append((f"({_q(names[name])} {sign} ?)", value))
    if not terms:
        return []
    score = " + ".join(t for t, _v in terms[:6])
    sql = f"SELECT rowid FROM {_q(col.table.name)} ORDER BY ({score}) DESC, rowid LIMIT 2"
    return [r[0] for r in conn.execute(sql, tuple(v for _t, v in terms[:6]))]


def _first(conn: sqlite3.Connection, t: str, count: int = 1) -> list[int]:
    return [r[0] for r in conn.execute(f"SELECT rowid FROM {t} ORDER BY rowid LIMIT ?", (count,))]


def _holds(conn: sqlite3.Connection, t: str, c: str, rowid: int, value: object) -> bool:
    found = conn.execute(f"SELECT {c} IS ? FROM {t} WHERE rowid = ?", (value, rowid)).fetchone()
    return bool(found and found[0])


def _fresh(conn: sqlite3.Connection, col: Column, base: object) -> object:
    """A value the column does not hold, of its kind and format: one past its largest number, or a
    text with a suffix (a formatted text with its last digits counted up)."""
    t, c, facts = _q(col.table.name), _q(col.facts.name), col.facts
    if "integer" in facts.kinds or "real" in facts.kinds:
        top = conn.execute(f"SELECT max({c}) FROM {t} WHERE typeof({c}) IN ('integer', 'real')").fetchone()[0]
        step = 1 if "integer" in facts.kinds else 1.0
        return (top if isinstance(top, (int, float)) else 0) + step
    if "text" not in facts.kinds:
        return None
    if base is None:
        row = conn.execute(f"SELECT {c} FROM {t} WHERE typeof({c}) = 'text' ORDER BY rowid LIMIT 1").fetchone()
        base = row[0] if row else "x"
    text = str(base)
    if facts.shapes:
        digits = [i for i, ch in enumerate(text) if ch.isdigit()]
        if not digits:
            return None
        for bump in range(1, 40):
            candidate = _counted_up(text, digits, bump)
            if candidate is not None and not conn.execute(f"SELECT 1 FROM {t} WHERE {c} = ? LIMIT 1",
                                                          (candidate,)).fetchone():
                return candidate
        return None
    return f"{text} {FILLER}"


def _counted_up(text: str, digits: list[int], bump: int) -> str | None:
    """``text`` with the number in its last digits raised by ``bump``, as many digits as before."""
    end = digits[-1] + 1
    start = end
    while start > 0 and text[start - 1].isdigit():
        start -= 1
    number = str(int(text[start:end]) + bump)
    if len(number) > end - start:
        return None
    return text[:start] + number.rjust(end - start, "0") + text[end:]


# ---- rows added and removed -------------------------------------------------------------------------

def _rows(conn: sqlite3.Connection, profile: inv.Profile, diff: Difference) -> Iterator[Edit]:
    """Rows copied and removed in the tables the two read, parents left without children, in turns."""
    per_table = []
    literal_of = {(lane.table, lane.column): lane.literals for lane in diff.lanes + diff.shared}
    for name in diff.tables:
        table = next((t for t in profile.tables if t.name.lower() == name), None)
        if table is None or not table.rows:
            continue
        rows = []
        for col in table.columns:
            rows += _holding(conn, _q(table.name), _q(col.name), literal_of.get((name, col.name.lower()), ()))
        rows = list(dict.fromkeys(rows + _first(conn, _q(table.name))))[:2]
        per_table.append(_table_rows(conn, profile, table, rows))
    yield from _turns(per_table)


def _table_rows(conn: sqlite3.Connection, profile: inv.Profile, table: inv.TableFacts,
                rows: list[int]) -> Iterator[Edit]:
    for rowid in rows:
        copied = _copy(conn, profile, table, [rowid], {})
        if copied is not None:
            yield copied
        yield _remove(profile, table, rowid)
    for link in profile.links:
        if link.parent.lower() != table.name.lower():
            continue
        parent = _parent_with_children(conn, link)
        if parent is not None:
            yield Edit(f"the {link.child} rows of {link.parent} row {parent} removed",
                       _cascade(profile, link.parent, f"rowid = {int(parent)}", 0, children_only=True),
                       (link.child, link.parent))


def _parent_with_children(conn: sqlite3.Connection, link: inv.Link) -> int | None:
    pairs = " AND ".join(f"c.{_q(a)} = p.{_q(b)}" for a, b in zip(link.child_columns, link.parent_columns))
    found = conn.execute(f"SELECT p.rowid FROM {_q(link.parent)} AS p WHERE EXISTS (SELECT 1 FROM {_q(link.child)} "
                         f"AS c WHERE {pairs}) ORDER BY p.rowid LIMIT 1").fetchone()
    return None if found is None else int(found[0])


def _remove(profile: inv.Profile, table: inv.TableFacts, rowid: int) -> Edit:
    statements = _cascade(profile, table.name, f"rowid = {int(rowid)}", 0)
    touched = tuple(dict.fromkeys(t for t in [table.name] + [k.child for k in profile.links]
                                  if any(t.lower() in sql.lower() for sql, _p in statements)))
    return Edit(f"{table.name} row {rowid} removed with the rows that need it", statements, touched)


def _cascade(profile: inv.Profile, table: str, where: str, depth: int,
             children_only: bool = False) -> tuple[tuple[str, tuple], ...]:
    """Statements removing ``table``'s rows meeting ``where`` and, first, the rows linked to them."""
    out: list[tuple[str, tuple]] = []
    if depth < CASCADE_DEPTH:
        for link in profile.links:
            if link.parent.lower() == table.lower() and link.child.lower() != table.lower():
                cols = ", ".join(_q(c) for c in link.child_columns)
                keys = ", ".join(_q(c) for c in link.parent_columns)
                inner = f"({cols}) IN (SELECT {keys} FROM {_q(table)} WHERE {where})"
                out += _cascade(profile, link.child, inner, depth + 1)
    if not children_only:
        out.append((f"DELETE FROM {_q(table)} WHERE {where}", ()))
    return tuple(out)


def _copy(conn: sqlite3.Connection, profile: inv.Profile, table: inv.TableFacts, rows: list[int],
          values: dict) -> Edit | None:
    """A copy of the first of ``rows`` with fresh keys (and ``values``: column -> value set in it),
    with what it needs to keep the links: a new parent where the link is one-to-one (or its link
    values never repeat together), a child where every parent has one."""
    if not rows:
        return None
    made = _copied(conn, profile, table, rows[0], {k.lower(): v for k, v in values.items()}, 0)
    if made is None:
        return None
    statements, _fresh_values = made
    return Edit(f"{table.name} row {rows[0]} copied with fresh keys", statements,
                tuple(dict.fromkeys(_touched(profile, statements))))


def _touched(profile: inv.Profile, statements: tuple[tuple[str, tuple], ...]) -> list[str]:
    """The tables ``statements`` write (read from their ``INSERT INTO``/``DELETE FROM``/``UPDATE``)."""
    out = []
    for sql, _params in statements:
        for t in profile.tables:
            quoted = _q(t.name)
            if sql.startswith((f"INSERT INTO {quoted} ", f"DELETE FROM {quoted} ", f"UPDATE {quoted} ")):
                out.append(t.name)
    return out


def _copied(conn: sqlite3.Connection, profile: inv.Profile, table: inv.TableFacts, rowid: int, values: dict,
            depth: int) -> tuple[tuple[tuple[str, tuple], ...], dict] | None:
    """(statements, the copy's value of each column set anew) for a copy of ``rowid``, or None."""
    if depth > CASCADE_DEPTH:
        return None
    before: list[tuple[str, tuple]] = []
    after: list[tuple[str, tuple]] = []
    chosen = dict(values)
    linked = _linked(profile, table.name)
    for link in _needing_new_parent(profile, table, chosen):
        parent = next((t for t in profile.tables if t.name.lower() == link.parent.lower()), None)
        found = _parent_row(conn, link, rowid)
        made = None if parent is None or found is None else _copied(conn, profile, parent, found, {}, depth + 1)
        if made is None:
            return None
        before += made[0]
        for child_col, parent_col in zip(link.child_columns, link.parent_columns):
            if parent_col.lower() not in made[1]:
                return None
            chosen[child_col.lower()] = made[1][parent_col.lower()]
    key = {c.lower() for c in table.key}
    exprs, params = [], []
    for col in table.columns:
        name = col.name.lower()
        if name not in chosen and (name in key or col.unique or col.near_unique) and name not in linked:
            base = conn.execute(f"SELECT {_q(col.name)} FROM {_q(table.name)} WHERE rowid = ?", (rowid,)).fetchone()
            fresh = _fresh(conn, Column(table, col), base[0] if base else None)
            if fresh is None:
                return None
            chosen[name] = fresh
        if name in chosen:
            exprs.append("?")
            params.append(chosen[name])
        else:
            exprs.append(_q(col.name))
    cols = ", ".join(_q(c.name) for c in table.columns)
    insert = (f"INSERT INTO {_q(table.name)} ({cols}) SELECT {', '.join(exprs)} FROM {_q(table.name)} WHERE rowid = ?",
              tuple(params) + (rowid,))
    for link in profile.links:  # where every parent is referenced, the new one gets a child too
        if link.total and link.parent.lower() == table.name.lower() and link.child.lower() != table.name.lower() \
                and all(c.lower() in chosen for c in link.parent_columns):
            child_table = next((t for t in profile.tables if t.name.lower() == link.child.lower()), None)
            child = _child_row(conn, link, rowid)
            re_pointed = {c.lower(): chosen[p.lower()] for c, p in zip(link.child_columns, link.parent_columns)}
            made = None if child_table is None or child is None else \
                _copied(conn, profile, child_table, child, re_pointed, depth + 1)
            if made is None:
                return None
            after += made[0]
    return tuple(before) + (insert,) + tuple(after), chosen


def _needing_new_parent(profile: inv.Profile, table: inv.TableFacts, chosen: dict) -> list[inv.Link]:
    """The links of ``table`` a copy cannot share with its row: a unique link column (one-to-one),
    or the first link of a table whose link values never repeat together."""
    out = []
    for link in profile.links_of(table.name):
        if any(c.lower() in chosen for c in link.child_columns):
            continue
        cols = [table.column(c) for c in link.child_columns if any(x.name.lower() == c.lower() for x in table.columns)]
        if len(link.child_columns) == 1 and cols and cols[0].unique:
            out.append(link)
    together = {c.lower() for c in table.distinct_links}
    if together and not any(set(c.lower() for c in k.child_columns) & together for k in out) \
            and not together & set(chosen):
        first = next((k for k in profile.links_of(table.name)
                      if {c.lower() for c in k.child_columns} & together), None)
        if first is not None:
            out.append(first)
    return out


def _parent_row(conn: sqlite3.Connection, link: inv.Link, rowid: int) -> int | None:
    pairs = " AND ".join(f"p.{_q(b)} = c.{_q(a)}" for a, b in zip(link.child_columns, link.parent_columns))
    found = conn.execute(f"SELECT p.rowid FROM {_q(link.parent)} AS p, {_q(link.child)} AS c WHERE c.rowid = ? "
                         f"AND {pairs} ORDER BY p.rowid LIMIT 1", (rowid,)).fetchone()
    return None if found is None else int(found[0])


def _child_row(conn: sqlite3.Connection, link: inv.Link, rowid: int) -> int | None:
    pairs = " AND ".join(f"c.{_q(a)} = p.{_q(b)}" for a, b in zip(link.child_columns, link.parent_columns))
    found = conn.execute(f"SELECT c.rowid FROM {_q(link.child)} AS c, {_q(link.parent)} AS p WHERE p.rowid = ? "
                         f"AND {pairs} ORDER BY c.rowid LIMIT 1", (rowid,)).fetchone()
    return None if found is None else int(found[0])
