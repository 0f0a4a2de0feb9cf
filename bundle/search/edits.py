"""The edits the search aimed at the difference tries: one cell, one row added, one row removed.

Each edit changes the original in one place chosen by where an answer differs from its gold
(``sql.reading.Difference``), so that whatever the two disagree on shows in the rows:

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
original's invariants is not decided here: the search proves each one (``neighbours.proof``)
before it judges anything on it. Reading the original's values is counted work (the caller's
``Counter``). Everything is ordered by SQL (``ORDER BY rowid``) and by value, never by a set's
iteration: the same inputs give the same edits in every process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import NamedTuple

from ..neighbours import invariants as inv
from ..neighbours import values as nv
from ..sql import text as sql_text
from ..sql.reading import Difference, Lane, provenance

ROWS_PER_VALUE = 2  # rows given one value, one at a time
VALUES_PER_LANE = 12  # values a lane offers at most
CASCADE_DEPTH = 3  # links followed when a removed row's dependants go with it
READ_AVOIDED = 64  # rows the gold reads that the search for a row it does not read passes over, at most
CHILDREN = 3  # rows of each linked table a twin copied with its children takes along
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


def edits(conn: sqlite3.Connection, profile: inv.Profile, diff: Difference, gold: str, most: int) -> list[Edit]:
    """At most ``most`` edits for ``diff`` on the database behind ``conn`` (read only here), in the
    order they are tried (module docstring); ``gold``: the gold's text (the rows it reads come first)."""
    names = {c.name.lower() for t in profile.tables for c in t.columns}
    comparisons = nv.comparisons_by_column(gold, names)
    sources = _sources(conn, gold, profile)
    # A gold with OR keeps rows for other reasons than one column's: new rows copy, in turns, a row
    # it reads and one it does not (``_set``).
    either = any(t.kind == "word" and t.text.upper() == "OR" for t in sql_text.code_tokens(gold))
    lanes: list[Iterator[Edit]] = []
    for lane in diff.lanes:
        found = _column(profile, lane)
        if found is not None:
            lanes.append(_lane(conn, profile, found, lane, comparisons, sources, either))
    rows = _rows(conn, profile, diff, sources)
    lanes.insert(0 if diff.shape_differs or not lanes else min(1, len(lanes)), rows)
    # Where the two differ in columns but compare no literal differently (they join or group
    # otherwise), a column both compare with a literal takes its turns with the lanes: the rows that
    # condition keeps are what shows the difference. Otherwise, and for the other shared columns, after.
    early = bool(diff.lanes) and not any(lane.literals for lane in diff.lanes)
    for lane in diff.shared:
        found = _column(profile, lane)
        if found is not None and lane.literals and early:
            lanes.append(_lane(conn, profile, found, lane, comparisons, sources, either))
    later = [_lane(conn, profile, found, lane, comparisons, sources, either) for lane in diff.shared
             for found in [_column(profile, lane)] if found is not None and not (lane.literals and early)]
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


def _sources(conn: sqlite3.Connection, gold: str, profile: inv.Profile) -> dict[str, list[int]]:
    """The rows (rowids) of each table the gold's answer comes from (``sql.reading.provenance``)."""
    schema = {t.name.lower(): tuple(c.name.lower() for c in t.columns) for t in profile.tables}
    out: dict[str, list[int]] = {}
    for table, sql in provenance(gold, schema):
        try:
            found = [int(r[0]) for r in conn.execute(sql) if isinstance(r[0], int)]
        except (sqlite3.Error, ValueError, OverflowError):
            continue  # a text the reading cut wrongly: no rows from it
        bucket = out.setdefault(table, [])
        bucket += [r for r in found if r not in bucket]
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
          gold_comparisons: dict, sources: dict[str, list[int]], either: bool = False) -> Iterator[Edit]:
    """A column's edits: its cells set to values around the literals (``_set``) in turns with two
    rows swapping their values, every row holding a literal moved at once, and a key renumbered
    with the rows that name it (``_moves``)."""
    if not col.table.rows:
        return
    telling = sources.get(col.table.name.lower(), [])[:2] + _telling(conn, col, gold_comparisons)
    # An entity others link to and named by a literal keeps its name (a maker called volvo stays
    # the maker of the volvo models): another entity may be renamed, or a new one added.
    entity = _entity(profile, col.table.name)
    named = entity and "text" in col.facts.kinds and (col.facts.unique or col.facts.near_unique)
    # An entity's parents are facts (a car keeps its model, and its make's name still starts with the
    # model's): only a row no other names (a like, an evaluation) moves to another parent.
    moved = entity and col.facts.name.lower() in _linked(profile, col.table.name)
    read = sources.get(col.table.name.lower(), [])[:READ_AVOIDED] if either else None
    yield from _turns([_set(conn, profile, col, lane, telling, named, moved, read),
                       _moves(conn, profile, col, lane, telling, named)])


def _entity(profile: inv.Profile, table: str) -> bool:
    """Whether rows of another table name rows of ``table`` (a link points to it)."""
    return any(k.parent.lower() == table.lower() and k.child.lower() != table.lower() for k in profile.links)


def _set(conn: sqlite3.Connection, profile: inv.Profile, col: Column, lane: Lane, telling: list[int],
         named: bool, fixed: bool = False, read: list[int] | None = None) -> Iterator[Edit]:
    """Cells set to the lane's values, one row at a time, then a new row holding each value (where
    ``named``, the column names an entity: a row holding one of the lane's literals keeps it; where
    ``fixed``, no row's cell changes: only the new rows)."""
    table, facts = col.table.name, col.facts
    t, c = _q(table), _q(facts.name)
    linked = facts.name.lower() in _linked(profile, table)
    # A link's cell names a parent: a row moves only to a parent that is there; a new row may name
    # a new parent, which the copy adds (``_CopyPlan``).
    kept = {(type(v).__name__, repr(v)) for v, _n in _values(conn, col, lane, True)} if linked else None
    holders = _holding(conn, t, c, lane.literals)
    # New rows copy, in turns, a row the gold reads and one it does not (where the gold's other
    # conditions already keep every row it reads, only a row they leave out shows this column).
    unread = [] if read is None else _first(conn, t, 1, avoid=read + telling)
    for k, (value, note) in enumerate(_values(conn, col, lane, False)):
        # an entity named by a literal keeps its name; another entity may take a name beside it
        rows = [r for r in telling + _first(conn, t, 3) if r not in holders] if named else \
            telling + holders + _first(conn, t, 3)
        moves = kept is None or (type(value).__name__, repr(value)) in kept
        used = 0
        for rowid in dict.fromkeys(rows):
            if used >= ROWS_PER_VALUE or fixed or not moves:
                break
            if _holds(conn, t, c, rowid, value):
                continue
            used += 1
            yield Edit(f"{table}.{facts.name} of row {rowid} set to {note}",
                       ((f"UPDATE {t} SET {c} = ? WHERE rowid = ?", (value, rowid)),), (table,))
        copied_from = [rows[0]] + [r for r in unread if r not in rows[:1]] if rows else []
        added = _copy(conn, profile, col.table, copied_from[k % len(copied_from):][:1], {facts.name: value},
                      children=True)
        if added is not None:
            yield added._replace(what=f"{added.what} holding {note} in {facts.name}")


def _moves(conn: sqlite3.Connection, profile: inv.Profile, col: Column, lane: Lane,
           telling: list[int], named: bool) -> Iterator[Edit]:
    """Edits that move values between rows: two rows swap (only in a table no other names), every
    row holding a literal removed with the rows that need it (none is left where the gold looks:
    the value's meaning stays), a row's key renumbered and its children following (an id is no name)."""
    table, facts = col.table.name, col.facts
    t, c = _q(table), _q(facts.name)
    holders = _holding(conn, t, c, lane.literals)
    firsts = [r for r in dict.fromkeys(holders + telling + _first(conn, t, 3))]
    for a in [] if _entity(profile, table) else firsts[:2]:
        other = conn.execute(f"SELECT rowid FROM {t} WHERE {c} IS NOT (SELECT {c} FROM {t} WHERE rowid = ?) "
                             f"AND rowid <> ? ORDER BY rowid LIMIT 1", (a, a)).fetchone()
        if other is not None:
            b = int(other[0])
            va, vb = (_cell(conn, t, c, r) for r in (a, b))
            if va is not _UNREADABLE and vb is not _UNREADABLE:
                yield Edit(f"{table}.{facts.name} of rows {a} and {b} swapped",
                           ((f"UPDATE {t} SET {c} = CASE rowid WHEN ? THEN ? ELSE ? END WHERE rowid IN (?, ?)",
                             (a, vb, va, a, b)),), (table,))
    for literal in [v for v in lane.literals if not (isinstance(v, str) and ("%" in v or "_" in v))][:2]:
        value = _as_stored(conn, col, nv.stored(literal, facts.declared))
        if holders and _readable(value):
            statements = _cascade(profile, table, f"{c} = ?", 0)
            yield Edit(f"every {table} row holding {value!r} in {facts.name} removed with the rows that need it",
                       tuple((sql, (value,) * sql.count("?")) for sql, _p in statements),
                       tuple(dict.fromkeys(_touched(profile, statements))))
    yield from _renumbered(conn, profile, col, firsts[:1])


_UNREADABLE = object()


def _cell(conn: sqlite3.Connection, t: str, c: str, rowid: int) -> object:
    """A cell's value as a statement can be given it again (a text that is not UTF-8 cannot)."""
    found = conn.execute(f"SELECT {c} FROM {t} WHERE rowid = ?", (rowid,)).fetchone()
    value = found[0] if found else None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _UNREADABLE
    return value


def _renumbered(conn: sqlite3.Connection, profile: inv.Profile, col: Column, rows: list[int]) -> Iterator[Edit]:
    """A row's one-column key given a value none holds, the rows that name it following."""
    table, facts = col.table.name, col.facts
    if [k.lower() for k in col.table.key] != [facts.name.lower()] or not rows:
        return
    fresh = _fresh(conn, col, None)
    old = _cell(conn, _q(table), _q(facts.name), rows[0])
    if fresh is None or old is None or old is _UNREADABLE:
        return
    statements: list[tuple[str, tuple]] = [(f"UPDATE {_q(table)} SET {_q(facts.name)} = ? WHERE rowid = ?",
                                            (fresh, rows[0]))]
    touched = [table]
    for link in profile.links:
        if link.parent.lower() == table.lower() and [p.lower() for p in link.parent_columns] == [facts.name.lower()]:
            child = _q(link.child_columns[0])
            statements.append((f"UPDATE {_q(link.child)} SET {child} = ? WHERE {child} = ?", (fresh, old)))
            touched.append(link.child)
    yield Edit(f"{table}.{facts.name} of row {rows[0]} renumbered to {fresh!r}, the rows naming it following",
               tuple(statements), tuple(dict.fromkeys(touched)))


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
        value = _as_stored(conn, col, nv.stored(literal, facts.declared))
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
    fresh = None if linked else _fresh(conn, col, None, far=True)
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


def _as_stored(conn: sqlite3.Connection, col: Column, value: object) -> object:
    """A text literal as the original writes it, where it holds it in another case ('Korea' for
    'korea'): a value in a case the data never shows would judge the question's spelling, not the answer."""
    if not isinstance(value, str):
        return value
    c = _q(col.facts.name)
    found = conn.execute(f"SELECT {c} FROM {_q(col.table.name)} WHERE typeof({c}) = 'text' AND lower({c}) = lower(?) "
                         f"ORDER BY {c} = ? DESC, rowid LIMIT 1", (value, value)).fetchone()
    return found[0] if found and _readable(found[0]) else value


def _readable(value: object) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


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


def _first(conn: sqlite3.Connection, t: str, count: int = 1, avoid: list[int] | None = None) -> list[int]:
    """The first ``count`` rows of ``t`` (none of ``avoid``)."""
    if avoid:
        marks = ", ".join("?" * len(avoid))
        return [r[0] for r in conn.execute(f"SELECT rowid FROM {t} WHERE rowid NOT IN ({marks}) ORDER BY rowid LIMIT ?",
                                           (*avoid, count))]
    return [r[0] for r in conn.execute(f"SELECT rowid FROM {t} ORDER BY rowid LIMIT ?", (count,))]


def _holds(conn: sqlite3.Connection, t: str, c: str, rowid: int, value: object) -> bool:
    found = conn.execute(f"SELECT {c} IS ? FROM {t} WHERE rowid = ?", (value, rowid)).fetchone()
    return bool(found and found[0])


def _fresh(conn: sqlite3.Connection, col: Column, base: object, far: bool = False) -> object:
    """A value the column does not hold, of its kind and format: one past its largest number (``far``:
    as far past it again, enough to outweigh the other rows of a sum), or a text with a suffix (a
    formatted text with its last digits counted up)."""
    t, c, facts = _q(col.table.name), _q(col.facts.name), col.facts
    if "integer" in facts.kinds or "real" in facts.kinds:
        found = conn.execute(f"SELECT max({c}), sum(abs({c})) FROM {t} WHERE typeof({c}) IN ('integer', 'real')").fetchone()
        top = found[0] if isinstance(found[0], (int, float)) else 0
        step = 1 if "integer" in facts.kinds else 1.0
        if far:
            total = found[1] if isinstance(found[1], (int, float)) else 0
            return top + (int(total) if "integer" in facts.kinds else float(total)) + step
        return top + step
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

def _rows(conn: sqlite3.Connection, profile: inv.Profile, diff: Difference,
          sources: dict[str, list[int]]) -> Iterator[Edit]:
    """Rows copied (with fresh keys, and as a twin keeping its names) and removed in the tables the
    two read, the gold's own rows first; parents left without children; the tables in turns."""
    per_table = []
    literal_of = {(lane.table, lane.column): lane.literals for lane in diff.lanes + diff.shared}
    for name in diff.tables:
        table = next((t for t in profile.tables if t.name.lower() == name), None)
        if table is None or not table.rows:
            continue
        rows = list(sources.get(name, []))
        for col in table.columns:
            rows += _holding(conn, _q(table.name), _q(col.name), literal_of.get((name, col.name.lower()), ()))
        rows = list(dict.fromkeys(rows + _first(conn, _q(table.name))))[:3]
        keep = frozenset(lane.column for lane in diff.lanes + diff.shared if lane.table == name)
        per_table.append(_table_rows(conn, profile, table, rows, keep))
    yield from _turns(per_table)


def _table_rows(conn: sqlite3.Connection, profile: inv.Profile, table: inv.TableFacts,
                rows: list[int], keep: frozenset) -> Iterator[Edit]:
    for rowid in rows:
        for twin, children in ((False, False), (True, False), (True, True)):
            copied = _copy(conn, profile, table, [rowid], {}, twin, children, keep)
            if copied is not None and not (children and copied.statements[-1][0].startswith(
                    f"INSERT INTO {_q(table.name)} ")):  # with no row elsewhere, the same as the twin
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
          values: dict, twin: bool = False, children: bool = False, keep: frozenset = frozenset()) -> Edit | None:
    """A copy of the first of ``rows`` with fresh keys (and ``values``: column -> value set in it),
    with what it needs to keep the links: a new parent where the link is one-to-one (or its link
    values never repeat together), a child where every parent has one. A ``twin`` keeps the values
    of ``keep`` (the columns the two queries differ on) where they need not be unique: a name
    repeats, which a DISTINCT or a count of distinct values tells from the row it copies; with
    ``children``, its rows in the tables that name it are copied too (a second student with pets)."""
    if not rows:
        return None
    plan = _CopyPlan(conn, profile, twin, keep)
    made = plan.copy(table, rows[0], {k.lower(): v for k, v in values.items()}, 0, children)
    if made is None:
        return None
    statements, _fresh_values = made
    kind = "a twin with fresh keys" if twin else "copied with fresh keys"
    kind += " and its rows in other tables" if children else ""
    return Edit(f"{table.name} row {rows[0]} {kind}", statements, tuple(dict.fromkeys(_touched(profile, statements))))


def _touched(profile: inv.Profile, statements: tuple[tuple[str, tuple], ...]) -> list[str]:
    """The tables ``statements`` write (read from their ``INSERT INTO``/``DELETE FROM``/``UPDATE``)."""
    out = []
    for sql, _params in statements:
        for t in profile.tables:
            quoted = _q(t.name)
            if sql.startswith((f"INSERT INTO {quoted} ", f"DELETE FROM {quoted} ", f"UPDATE {quoted} ")):
                out.append(t.name)
    return out


_UNSET = object()  # a column a new row copies from its source (not among the values it sets)


class _CopyPlan:
    """The rows one copy edit inserts, planned table by table: the fresh values given so far (no two
    new rows get the same), whether it is a twin and what a twin keeps."""

    def __init__(self, conn: sqlite3.Connection, profile: inv.Profile, twin: bool, keep: frozenset) -> None:
        self.conn, self.profile, self.twin, self.keep = conn, profile, twin, keep
        self.taken: dict[tuple[str, str], list] = {}
        self.made: dict[str, list[dict]] = {}  # table -> the values set anew in each row it adds

    def _table(self, name: str) -> inv.TableFacts | None:
        return next((t for t in self.profile.tables if t.name.lower() == name.lower()), None)

    def copy(self, table: inv.TableFacts, rowid: int, values: dict, depth: int, children: bool = False,
             satisfied: inv.Link | None = None) -> tuple[tuple[tuple[str, tuple], ...], dict] | None:
        """(statements, the copy's value of each column set anew) for a copy of ``rowid``, or None.
        ``satisfied``: the link the caller's own new row will reference this copy through (it needs
        no other child there)."""
        if depth > CASCADE_DEPTH:
            return None
        before: list[tuple[str, tuple]] = []
        chosen = dict(values)
        for link in _needing_new_parent(self.profile, table, chosen):
            parent, found = self._table(link.parent), _parent_row(self.conn, link, rowid)
            made = None if parent is None or found is None else self.copy(parent, found, {}, depth + 1, satisfied=link)
            if made is None:
                return None
            before += made[0]
            for child_col, parent_col in zip(link.child_columns, link.parent_columns):
                if parent_col.lower() not in made[1]:
                    return None
                chosen[child_col.lower()] = made[1][parent_col.lower()]
        for link in self.profile.links_of(table.name):  # a value naming no parent: the parent is added
            if link == satisfied or not all(c.lower() in chosen for c in link.child_columns) or \
                    self._named(link, [chosen[c.lower()] for c in link.child_columns]):
                continue
            parent, found = self._table(link.parent), _parent_row(self.conn, link, rowid)
            values = {p.lower(): chosen[c.lower()] for c, p in zip(link.child_columns, link.parent_columns)}
            made = None if parent is None or found is None else self.copy(parent, found, values, depth + 1,
                                                                           satisfied=link)
            if made is None:
                return None
            before += made[0]
        insert = self._insert(table, rowid, chosen)
        if insert is None:
            return None
        self.made.setdefault(table.name.lower(), []).append(chosen)
        after: list[tuple[str, tuple]] = []
        for link in self.profile.links:  # where every parent is referenced, the new one gets a child too
            if link.parent.lower() != table.name.lower() or link.child.lower() == table.name.lower() \
                    or not all(c.lower() in chosen for c in link.parent_columns) or link == satisfied:
                continue
            wanted = CHILDREN if children and depth == 0 else 1 if link.total else 0
            child_table = self._table(link.child)
            re_pointed = {c.lower(): chosen[p.lower()] for c, p in zip(link.child_columns, link.parent_columns)}
            for child in _child_rows(self.conn, link, rowid, wanted):
                made = None if child_table is None else self.copy(child_table, child, re_pointed, depth + 1)
                if made is None:
                    return None
                after += made[0]
        return tuple(before) + (insert,) + tuple(after), chosen

    def _named(self, link: inv.Link, values: list) -> bool:
        """Whether the link's parent holds a row with ``values`` (or another row of this edit adds one)."""
        if any(v is None for v in values):
            return True  # NULL names no parent, and needs none
        made = [tuple(row.get(p.lower(), _UNSET) for p in link.parent_columns)
                for row in self.made.get(link.parent.lower(), [])]
        if tuple(values) in made:
            return True
        where = " AND ".join(f"{_q(p)} = ?" for p in link.parent_columns)
        return self.conn.execute(f"SELECT 1 FROM {_q(link.parent)} WHERE {where} LIMIT 1", tuple(values)).fetchone() \
            is not None

    def _insert(self, table: inv.TableFacts, rowid: int, chosen: dict) -> tuple[str, tuple] | None:
        """The INSERT of the copy, its keys (and the columns that must stay unique) fresh; ``chosen``
        gets the values it sets."""
        linked = _linked(self.profile, table.name)
        key = [c.lower() for c in table.key]
        # A key of several columns is new once one of them is: the others keep their values.
        key_new = len(key) > 1 and any(k in chosen for k in key)
        exprs, params = [], []
        for col in table.columns:
            name = col.name.lower()
            last_of_key = len(key) > 1 and not key_new and name == next((k for k in reversed(key) if k not in linked), "")
            kept_name = self.twin and name in self.keep
            must = (name in key and len(key) == 1) or col.unique or last_of_key or (col.near_unique and not kept_name)
            if name not in chosen and must and name not in linked:
                fresh = self._fresh(table, col, rowid)
                if fresh is None:
                    return None
                chosen[name] = fresh
                key_new = key_new or name in key
            if name in chosen:
                exprs.append("?")
                params.append(chosen[name])
            else:
                exprs.append(_q(col.name))
        cols = ", ".join(_q(c.name) for c in table.columns)
        return (f"INSERT INTO {_q(table.name)} ({cols}) SELECT {', '.join(exprs)} FROM {_q(table.name)} WHERE rowid = ?",
                tuple(params) + (rowid,))

    def _fresh(self, table: inv.TableFacts, col: inv.ColumnFacts, rowid: int) -> object:
        """A value of ``col`` none of its rows holds and no other new row of this edit took."""
        taken = self.taken.setdefault((table.name.lower(), col.name.lower()), [])
        base = self.conn.execute(f"SELECT {_q(col.name)} FROM {_q(table.name)} WHERE rowid = ?", (rowid,)).fetchone()
        fresh = _fresh(self.conn, Column(table, col), base[0] if base else None)
        while fresh is not None and fresh in taken:
            fresh = f"{fresh} {FILLER}" if isinstance(fresh, str) else fresh + 1 if isinstance(fresh, (int, float)) else None
        if fresh is not None:
            taken.append(fresh)
        return fresh


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


def _child_rows(conn: sqlite3.Connection, link: inv.Link, rowid: int, count: int) -> list[int]:
    if count <= 0:
        return []
    pairs = " AND ".join(f"c.{_q(a)} = p.{_q(b)}" for a, b in zip(link.child_columns, link.parent_columns))
    return [int(r[0]) for r in conn.execute(f"SELECT c.rowid FROM {_q(link.child)} AS c, {_q(link.parent)} AS p "
                                            f"WHERE p.rowid = ? AND {pairs} ORDER BY c.rowid LIMIT ?", (rowid, count))]
