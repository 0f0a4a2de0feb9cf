"""Proof that a neighbour database keeps its original's invariants (``neighbour_invariants``).

``violations`` lists every invariant one database breaks; ``prove_bundle`` every one a bundle's
neighbour databases break, with the gold sort keys (no NULL where the original's gold sorts by
none). ``prepare`` refuses to write a bundle that fails it, verification runs it on the zip, and
the grader's search uses no database that fails it. Standard library only.
"""

from __future__ import annotations

import os
import sqlite3

try:
    from . import neighbour_invariants as inv
except ImportError:  # run as a standalone file
    import neighbour_invariants as inv  # type: ignore[no-redef]



def violations(profile: inv.Profile, conn: sqlite3.Connection, repeats_allowed: frozenset[str] = frozenset()) -> list[str]:
    """Every invariant of ``profile`` the database behind ``conn`` breaks, one line each (empty: none).

    ``repeats_allowed``: column names (lower case) a gold needs repeated: their uniqueness and repeat
    caps are not required (docs/neighbours.md, "What a neighbour keeps").
    """
    out: list[str] = []
    linked = {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns}
    for table in profile.tables:
        now = inv._scalar(conn, f"SELECT count(*) FROM {inv.quote(table.name)}")
        if table.rows and not now:
            out.append(f"{table.name}: no rows, the original has {table.rows}")
        for col in table.columns:
            free = col.name.lower() in repeats_allowed
            out += _column_violations(conn, table, col, free, (table.name.lower(), col.name.lower()) in linked)
    for link in profile.links:
        orphans = inv._scalar(conn, inv.orphans_sql(link))
        if orphans:
            out.append(f"{link.describe()}: {orphans} rows without their parent")
        if link.total:
            unreferenced = inv._scalar(conn, inv.unreferenced_sql(link))
            if unreferenced:
                out.append(f"{link.describe()}: {unreferenced} parent rows no row references (the original references all)")
    return out


def _column_violations(conn: sqlite3.Connection, table: inv.TableFacts, col: inv.ColumnFacts, free: bool,
                       linked: bool) -> list[str]:
    where = f"{table.name}.{col.name}"
    rows, present, distinct, _most = inv._column_counts(conn, table.name, col.name)
    out = []
    if not col.nulls and present < rows:
        out.append(f"{where}: {rows - present} NULLs, the original has none")
    kinds = set(inv._kinds(conn, table.name, col.name))
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
    if col.unique and distinct < present:
        out.append(f"{where}: {present - distinct} repeated values, the original's are unique")
    if col.near_unique and not linked:
        held = dict(col.counts)
        for value, n in inv._repeated(conn, table.name, col.name):
            if n > held.get(value, 1):
                out.append(f"{where}: {value!r} in {n} rows, the original has it in {held.get(value, 1)}")
                break
    return out


def prove_bundle(index: dict, data_dir: str) -> list[str]:
    """Every invariant the neighbour databases of a bundle break (its index and ``data/`` folder)."""
    out: list[str] = []
    for db_id, entry in sorted(index.get("databases", {}).items()):
        files = [os.path.join(data_dir, item["file"]) for item in entry.get("neighbours") or []]
        if files:
            out += prove_database(db_id, (index.get("invariants") or {}).get(db_id), files,
                                  (index.get("neighbour_results") or {}).get(db_id) or {},
                                  (index.get("gold_results") or {}).get(db_id) or {})
    return out


def prove_database(db_id: str, invariants: dict | None, files: list[str], results: dict, originals: dict) -> list[str]:
    """Every invariant the neighbour ``files`` of one database break; the index's JSON forms.

    ``invariants``: ``{"profile": ..., "repeats_allowed": [...]}``; ``results``: gold -> its result
    on each neighbour (None where not judged); ``originals``: gold -> its result on the original.
    """
    if invariants is None:
        return [f"{db_id}: neighbour databases without their invariants in the index: rebuild the bundle"]
    profile, allowed = inv.from_json(invariants["profile"]), frozenset(invariants.get("repeats_allowed", ()))
    out: list[str] = []
    for k, path in enumerate(files):
        conn = inv.open_read_only(path)
        try:
            out += [f"{db_id} neighbour {k + 1}: {v}" for v in violations(profile, conn, allowed)]
        finally:
            conn.close()
    for gold, per in sorted(results.items()):
        if (originals.get(gold) or {}).get("null_keys") is not False:
            continue  # the original's gold sorts by a NULL key too, or sorts by none
        out += [f"{db_id} neighbour {k + 1}: gold {gold[:70]!r} sorts by a NULL key, the original's by none"
                for k, result in enumerate(per) if result is not None and result.get("null_keys")]
    return out
