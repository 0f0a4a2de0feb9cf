"""A thin database's row whose gold returns no rows anywhere: an empty answer is never paid there.

On a thin database (no table holding more than a few rows: ``neighbours.thin``) a gold that
returns nothing on the original and on every neighbour it is judged on cannot tell a right answer
from ``SELECT NULL WHERE 0``: any query returning nothing matches it everywhere. Such a match is
no evidence, so it is not paid: the verdict becomes a mismatch that says why (``unpaid``), and
``prepare`` names these rows in its summary. A database that is not thin is never touched (its
verdicts are the same as without this module), nor a row whose gold returns rows somewhere.

Thinness is read from the database file itself (the rows of each table, once per database and
process), only for a match whose gold is empty on every database it was judged on.
"""

from __future__ import annotations

import dataclasses
import threading

from ..neighbours import invariants as neighbour_invariants
from ..neighbours import thin as neighbour_thin
from ..sql import verdict as verify_mod

_thin: dict[str, bool] = {}  # database SHA-256 -> thin (a few hundred databases at most per bundle)
_lock = threading.Lock()

WHY = ("its gold returns no rows on thin database {db_id} and on each of its {n} neighbour databases, so an "
       "answer returning nothing is no evidence there: never paid (docs/neighbours.md, \"Thin databases\")")


def thin_database(path: str, sha256: str) -> bool:
    """Whether the database at ``path`` (of that SHA-256) is thin, read once per process."""
    with _lock:
        found = _thin.get(sha256)
    if found is None:
        conn = neighbour_invariants.open_read_only(path)
        try:
            counts = [int(conn.execute(f"SELECT count(*) FROM {neighbour_invariants.quote(t)}").fetchone()[0])
                      for t in neighbour_invariants.table_names(conn)]
        finally:
            conn.close()
        found = neighbour_thin.is_thin(counts)
        with _lock:
            _thin[sha256] = found
    return found


def empty_everywhere(verdict: verify_mod.Verdict, neighbours: tuple[verify_mod.Neighbour, ...]) -> bool:
    """Whether ``verdict``'s gold returned no rows on the original and on every neighbour given."""
    return verdict.gold_rows == 0 and all(not n.gold.shape.rows for n in neighbours)


def unpaid(verdict: verify_mod.Verdict, db_id: str, path: str, sha256: str,
           neighbours: tuple[verify_mod.Neighbour, ...]) -> verify_mod.Verdict:
    """``verdict``, or, for a match of an empty-everywhere gold on a thin database, a mismatch saying why."""
    if verdict.outcome != verify_mod.MATCH or not empty_everywhere(verdict, neighbours) \
            or not thin_database(path, sha256):
        return verdict
    return dataclasses.replace(verdict, outcome=verify_mod.MISMATCH, score=0.0,
                               detail=WHY.format(db_id=db_id, n=len(neighbours)),
                               decided_on=f"thin database {db_id}")
