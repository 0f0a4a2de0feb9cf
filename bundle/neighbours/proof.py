"""Proof that a neighbour database keeps its original's invariants (``neighbours.invariants``).

``violations`` lists every invariant one database breaks; ``prove_bundle`` every one a bundle's
neighbour databases break, with what each gold judged there presupposes (``judges``): rows where
it has rows on the original, no row of NULLs where it has none there, and no NULL key it sorts by
where it sorts by none there. A neighbour the index records as relaxing an invariant
(``neighbours.invariants.Relaxed``: a gold's question needs it broken) is proved against every
other, and judges only the golds that relaxation names. ``prepare`` refuses to write a bundle that fails it, verification
runs it on the zip, and the grader's search uses no database that fails it. Standard library only.

>>> one, none = sql_compare.bag_shape([(3,)]), sql_compare.bag_shape([], 1)
>>> judges(gold_results.GoldResult(one, 1), gold_results.GoldResult(none, 1))
'it has no rows, though it has some on the original'
"""

from __future__ import annotations

import os
import sqlite3

from ..sql import compare as sql_compare
from ..sql import gold_results
from . import invariants as inv
from . import mining as neighbour_mining
from . import values as neighbour_values


def violations(profile: inv.Profile, conn: sqlite3.Connection, repeats_allowed: frozenset[str] = frozenset(),
               tables: frozenset[str] | None = None) -> list[str]:
    """Every invariant of ``profile`` the database behind ``conn`` breaks, one line each (empty: none).

    ``repeats_allowed``: column names (lower case) a gold needs repeated: their uniqueness and repeat
    caps are not required (docs/neighbours.md, "What a neighbour keeps"). ``tables``: only the
    invariants of these tables (lower case) and of the links to or from them (the search aimed at
    the difference changes one or two tables of the original at a time).
    """
    out: list[str] = []
    linked = {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns}
    for table in profile.tables:
        if tables is not None and table.name.lower() not in tables:
            continue
        free = [col.name.lower() in repeats_allowed for col in table.columns]
        tied = [(table.name.lower(), col.name.lower()) in linked for col in table.columns]
        now, counted, wide = _counts(conn, table, [not f and (c.unique or (c.near_unique and not t))
                                                   for c, f, t in zip(table.columns, free, tied)])
        if table.rows and not now:
            out.append(f"{table.name}: no rows, the original has {table.rows}")
        for col, counts, f, t in zip(table.columns, counted, free, tied):
            out += _column_violations(conn, table, col, f, t, (now, *counts))
        for a, b in table.depends:
            if b.lower() not in repeats_allowed and neighbour_mining.determined(conn, table.name, a, b):
                out.append(f"{table.name}: {a} no longer determines {b} as in the original")
        if wide > table.room:
            out.append(f"{table.name}: a row of {wide} bytes, wider than {table.room} (the original's widest has "
                       f"{table.widest})")
        for pair in table.paired:
            if neighbour_mining.split_pairs(conn, table.name, pair):
                out.append(f"{table.name}: a value {pair[0]} and {pair[1]} share in the original is in one of them only")
        out += _kept_pairings(conn, table, repeats_allowed)
    for link in profile.links:
        if tables is not None and link.child.lower() not in tables and link.parent.lower() not in tables:
            continue
        orphans = inv._scalar(conn, inv.orphan_values_sql(link))
        if orphans:
            out.append(f"{link.describe()}: {orphans} values no parent holds")
        if link.total:
            unreferenced = inv._scalar(conn, inv.unreferenced_sql(link))
            if unreferenced:
                out.append(f"{link.describe()}: {unreferenced} parent rows no row references (the original references all)")
    return out


def _kept_pairings(conn: sqlite3.Connection, table: inv.TableFacts, repeats_allowed: frozenset[str]) -> list[str]:
    """The texts extending another and the link rows never repeated that the database breaks."""
    out = []
    for a, b in table.extends:
        broken = neighbour_mining.unextended(conn, table.name, a, b)
        if broken:
            out.append(f"{table.name}: {broken} rows whose {b} does not start with their {a}, as every one does "
                       "in the original")
    columns = table.distinct_links
    if columns and not all(c.lower() in repeats_allowed for c in columns):
        repeated = neighbour_mining.repeated_links(conn, table.name, columns)
        if repeated:
            out.append(f"{table.name}: {repeated} rows repeat another's {', '.join(columns)}, which no two rows "
                       "share in the original")
    return out


def _counts(conn: sqlite3.Connection, table: inv.TableFacts,
            distinct: list[bool]) -> tuple[int, list[tuple[int, int | None, frozenset[str]]], int]:
    """The table's rows; per column (in the profile's order) its non-NULL values, its distinct
    values (None where ``distinct`` says no check reads them) and the types of its values; and its
    widest row: what ``inv._column_counts``, ``inv._kinds`` and ``neighbours.mining.widest`` read
    one by one, read in one statement (a generated database is checked for every search attempt)."""
    parts = ["count(*)", f"max({neighbour_mining.width_sql([c.name for c in table.columns])})"]
    for col, wanted in zip(table.columns, distinct):
        c = inv.quote(col.name)
        parts += [f"count({c})", f"count(DISTINCT {c})" if wanted else "NULL",
                  f"group_concat(DISTINCT CASE WHEN {c} IS NOT NULL THEN typeof({c}) END)"]
    found = conn.execute(f"SELECT {', '.join(parts)} FROM {inv.quote(table.name)}").fetchone()
    counted = [(int(found[i] or 0), None if found[i + 1] is None else int(found[i + 1]),
                frozenset(found[i + 2].split(",") if found[i + 2] else ())) for i in range(2, len(found), 3)]
    return int(found[0] or 0), counted, int(found[1] or 0)


def _most(conn: sqlite3.Connection, table: str, col: str, present: int, distinct: int) -> int:
    """The most rows sharing one non-NULL value (``inv._column_counts``'s last figure); 1 or 0 with no repeat."""
    if distinct == present:
        return 1 if present else 0
    return inv._column_counts(conn, table, col)[3]


def _counted(distinct: int | None, where: str) -> int:
    """The distinct values ``_counts`` read for a check that needs them (``violations`` asks for them)."""
    if distinct is None:
        raise ValueError(f"{where}: its distinct values were not counted, yet a check reads them")
    return distinct


def _column_violations(conn: sqlite3.Connection, table: inv.TableFacts, col: inv.ColumnFacts, free: bool,
                       linked: bool, counts: tuple[int, int, int | None, frozenset[str]]) -> list[str]:
    where = f"{table.name}.{col.name}"
    rows, present, distinct, kinds = counts
    out = []
    if not col.nulls and present < rows:
        out.append(f"{where}: {rows - present} NULLs, the original has none")
    if (col.kinds or col.nulls) and not kinds <= set(col.kinds):
        out.append(f"{where}: holds {', '.join(sorted(kinds - set(col.kinds)))}, the original only "
                   f"{', '.join(col.kinds) or 'NULL'}")
    if col.shapes:
        shapes = inv._shapes(conn, table.name, col.name, 10 ** 6) or set()
        strange = sorted(shapes - set(col.shapes))
        if strange:
            out.append(f"{where}: text shaped {strange[0]!r}, the original's are {', '.join(col.shapes)}")
    if free:
        return out
    if col.unique and _counted(distinct, where) < present:
        out.append(f"{where}: {present - _counted(distinct, where)} repeated values, the original's are unique")
    if col.near_unique and not linked:
        most = _most(conn, table.name, col.name, present, _counted(distinct, where))
        if most > col.max_repeat:
            out.append(f"{where}: a value in {most} rows, the original repeats none more than {col.max_repeat} times")
    return out


def _all_null(row: tuple) -> bool:
    return bool(row) and all(v[0] == sql_compare.NULL_TAG for v in row)


def judges(original: gold_results.GoldResult, here: gold_results.GoldResult) -> str | None:
    """Why a gold may not be judged on a database where its result is ``here``, or None.

    A question presupposes what it asks about: "the youngest dog's weight" has an answer. Where the
    gold has rows on the original, a database where it has none (nothing matches its filter), or a
    row of NULLs only there (``max()`` over nothing), or a NULL key it sorts by first, would judge
    the wording of an answer to a question that does not arise, not the answer.
    """
    rows, there = original.shape.rows, here.shape.rows
    if rows and not there:
        return "it has no rows, though it has some on the original"
    if not any(_all_null(r) for r in rows) and any(_all_null(r) for r in there):
        return "it has a row of NULLs, though none on the original"
    if here.null_keys and original.null_keys is False:
        return "it sorts by a NULL key, though by none on the original"
    return None


def repeated_identity(conn: sqlite3.Connection, profile: inv.Profile, gold: str,
                      listed: tuple[tuple[str, str], ...] | None = None) -> str | None:
    """Why a gold may not be judged on the database behind ``conn``: a name it uses as the identity
    of what it lists repeats there. A gold that intersects names (``INTERSECT``/``EXCEPT``/``UNION``
    on them) reads two students called Jordan as one; an answer by ids is as right, so a database
    where a name it intersects repeats at all would judge the gold, not the answer. A gold that
    groups by a name (``GROUP BY`` it) is refused only where the name repeats more often than on the
    original: where the original repeats it already (two perpetrators of one country), grouping by
    it is the data's own reading.
    A column holding another table's key (a link) is no name: its repeats are one entity's rows
    (``GROUP BY evaluation.employee_id`` counts an employee's awards), as in the original.
    ``listed``: ``listed_by(profile, gold)`` where the caller has it already.
    """
    names = {c.name.lower() for t in profile.tables for c in t.columns}
    intersected = neighbour_values.set_identity_columns(gold, names)
    for table, column in listed_by(profile, gold) if listed is None else listed:
        most = inv._column_counts(conn, table, column)[3]
        if column.lower() in intersected and most > 1:
            return f"its {column} repeats a value here, and it intersects by it"
        if most > max(1, profile.table(table).column(column).max_repeat):
            return f"its {column} repeats a value more often here than on the original, and it groups by it"
    return None


def listed_by(profile: inv.Profile, gold: str) -> tuple[tuple[str, str], ...]:
    """The (table, column) pairs ``repeated_identity`` reads for ``gold``: names (near-unique
    columns, no link) it uses as the identity of what it lists. Empty: no database can refuse it so."""
    names = {c.name.lower() for t in profile.tables for c in t.columns}
    wanted = neighbour_values.identity_columns(gold, names)
    linked = {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns}
    return tuple((table.name, col.name) for table in profile.tables for col in table.columns
                 if (table.name.lower(), col.name.lower()) not in linked and col.name.lower() in wanted
                 and col.near_unique)


def prove_bundle(index: dict, data_dir: str) -> list[str]:
    """Every invariant the neighbour databases of a bundle break (its index and ``data/`` folder)."""
    out: list[str] = []
    for db_id, entry in sorted(index.get("databases", {}).items()):
        items = entry.get("neighbours") or []
        if items:
            out += prove_database(db_id, (index.get("invariants") or {}).get(db_id),
                                  [os.path.join(data_dir, item["file"]) for item in items],
                                  (index.get("neighbour_results") or {}).get(db_id) or {},
                                  (index.get("gold_results") or {}).get(db_id) or {},
                                  [item.get("relaxed") or [] for item in items])
    return out


def prove_database(db_id: str, invariants: dict | None, files: list[str], results: dict, originals: dict,
                   relaxed: list[list[dict]] | None = None) -> list[str]:
    """Every invariant the neighbour ``files`` of one database break; the index's JSON forms.

    ``invariants``: ``{"profile": ..., "repeats_allowed": [...]}``; ``results``: gold -> its result
    on each neighbour (None where not judged); ``originals``: gold -> its result on the original;
    ``relaxed``: per neighbour, the invariants it need not keep (``inv.Relaxed`` as JSON; none
    where absent). A neighbour that relaxes one keeps every other, and judges only the golds its
    relaxations name.
    """
    if invariants is None:
        return [f"{db_id}: neighbour databases without their invariants in the index: rebuild the bundle"]
    profile, allowed = inv.from_json(invariants["profile"]), frozenset(invariants.get("repeats_allowed", ()))
    out: list[str] = []
    for k, path in enumerate(files):
        items = [inv.Relaxed.from_json(r) for r in (relaxed[k] if relaxed and k < len(relaxed) else [])]
        here = profile
        try:
            here = inv.relax(profile, items)
        except ValueError as exc:
            out.append(f"{db_id} neighbour {k + 1}: {exc}")
        conn = inv.open_read_only(path)
        try:
            out += [f"{db_id} neighbour {k + 1}: {v}" for v in violations(here, conn, allowed)]
            out += [f"{db_id} neighbour {k + 1} judges gold {gold[:70]!r}, but {why}"
                    for gold, why in _unfit(profile, conn, k, results, originals)]
        finally:
            conn.close()
        if items:
            named = {g for item in items for g in item.golds}
            out += [f"{db_id} neighbour {k + 1} judges gold {gold[:70]!r}, which none of its relaxations names"
                    for gold, per in sorted(results.items()) if k < len(per) and per[k] is not None and gold not in named]
    return out


def _unfit(profile: inv.Profile, conn: sqlite3.Connection, k: int, results: dict,
           originals: dict) -> list[tuple[str, str]]:
    """(gold, why) for the golds judged on neighbour ``k`` that it may not judge."""
    out = []
    for gold, per in sorted(results.items()):
        if k >= len(per) or per[k] is None or gold not in originals:
            continue
        original, here = gold_results.from_json(originals[gold]), gold_results.from_json(per[k])
        why = judges(original, here) if original is not None and here is not None else None
        why = why or repeated_identity(conn, profile, gold)
        if why:
            out.append((gold, why))
    return out
