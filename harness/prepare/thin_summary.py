"""prepare's summary of thin databases: their rows whose gold returns no rows anywhere.

A thin database (no table holding more than ``bundle.neighbours.thin.THIN_MAX_ROWS`` rows) gets
neighbours filled with rows (docs/neighbours.md, "Thin databases"); a gold that still returns no
rows on the original and on every neighbour it is judged on cannot tell a right answer from an
empty one, and the bundle never pays such a match (``bundle.scoring.thin_rows``). ``section``
names those rows per database, with the neighbours' table sizes, under
``neighbours.databases.<db_id>.thin`` (only for thin databases: another database's summary has no
such key); ``render`` gives the line ``prepare`` prints.

>>> line, = render({"databases": {"a": {"thin": {"golds": 3, "empty_everywhere": [{"id": "rl-00001"}]}}}})
>>> line.split(";")[0], line.split(": ")[2]
('thin databases: 1 (a)', 'rl-00001 (prepare-summary.json, neighbours.databases.*.thin)')
"""

from __future__ import annotations

from bundle.neighbours import thin as neighbour_thin


def _empty_everywhere(found, gold: str) -> bool:
    original = found.originals.get(gold)
    if original is None or original.shape.rows:
        return False
    return all(r is None or not r.shape.rows for r in found.results.get(gold, ()))


def section(found, rows: list[dict]) -> dict | None:
    """What the summary says of one database's distillation ``found`` (``distil.Distilled``), None
    when the database is not thin; ``rows``: the index's rows (id, split, db_id, gold)."""
    if not neighbour_thin.thin_profile(found.profile):
        return None
    empty = [{"id": r["id"], "split": r["split"], "gold": r["gold"]} for r in rows
             if r["db_id"] == found.db_id and r["split"] != "train" and _empty_everywhere(found, r["gold"])]
    return {"tables": {t.name: t.rows for t in found.profile.tables}, "golds": len(found.originals),
            "golds_empty_on_original": sum(not r.shape.rows for r in found.originals.values()),
            "golds_empty_everywhere": sum(_empty_everywhere(found, g) for g in found.originals),
            "empty_everywhere": empty}


def render(neighbours: dict) -> list[str]:
    """The line naming the thin databases and their empty-everywhere rows (none without a thin database)."""
    thin = {db_id: d["thin"] for db_id, d in (neighbours.get("databases") or {}).items() if d.get("thin")}
    if not thin:
        return []
    empty = [r["id"] for d in thin.values() for r in d["empty_everywhere"]]
    named = ", ".join(empty[:6]) + (", ..." if len(empty) > 6 else "")
    return [f"thin databases: {len(thin)} ({', '.join(sorted(thin))}); {len(empty)} "
            f"{'row' if len(empty) == 1 else 'rows'} whose gold returns no rows on the original and on every "
            f"neighbour, never paid an empty answer{': ' + named if empty else ''} "
            "(prepare-summary.json, neighbours.databases.*.thin)"]
