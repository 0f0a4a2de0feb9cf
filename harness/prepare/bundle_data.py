"""Write the bundle's data folder (databases + index.json) in the layout bundle/scoring/index.py reads.

Deterministic: the same rows and database files give byte-identical output. Files are written to
a temporary name and renamed, so an interrupted build never leaves a half-written index.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from bundle import verify as bundle_verify
from bundle.contract import shapes as reward_shapes
from bundle.contract.limits import DEFAULT_LIMITS, Limits
from bundle.scoring import index as bundle_index
from bundle.sql import functions as sql_functions
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from harness.common.errors import InputError
from harness.common.files import atomic_write_bytes


@dataclasses.dataclass(frozen=True)
class IndexRow:
    id: str
    split: str
    db_id: str
    gold: str
    disputed: str | None = None  # the id of the entry disputing the gold (harness.prepare.disputed)

    def as_json(self) -> dict:
        """The index's row: ``disputed`` only where the gold is disputed (older readers ignore it)."""
        data = dataclasses.asdict(self)
        if data["disputed"] is None:
            del data["disputed"]
        return data


class GoldFailed(Exception):
    """A gold query failed while precomputing results; names the row."""


def schema_lines(sqlite_path: str | os.PathLike) -> list[str]:
    """One ``table(col, col)`` line per table, in the database's own order (sqlite_master order).

    Internal ``sqlite_*`` tables are left out. Raises sqlite3.DatabaseError on a corrupt file.
    """
    uri = "file:" + str(Path(sqlite_path).resolve()) + "?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
            "ORDER BY rowid")]
        lines = []
        for table in tables:
            quoted = '"' + table.replace('"', '""') + '"'
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({quoted})")]
            lines.append(f"{table}({', '.join(cols)})")
    return lines


def largest_values(sqlite_path: str | os.PathLike) -> tuple[tuple[int, str], tuple[int, str]]:
    """(bytes, where) of the longest stored value and of the longest stored row (its values' bytes).

    The scorer caps every value and every record SQLite builds at ``Limits.max_cell_bytes``
    (docs/bundle.md, "Cost model"), so a database must fit under it with room to spare.
    """
    uri = "file:" + str(Path(sqlite_path).resolve()) + "?mode=ro&immutable=1"
    value, row = (0, ""), (0, "")
    with sqlite3.connect(uri, uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            quoted = '"' + table.replace('"', '""') + '"'
            cols = ['"' + r[1].replace('"', '""') + '"' for r in conn.execute(f"PRAGMA table_info({quoted})")]
            if not cols:
                continue
            sizes = [f"coalesce(length(CAST({c} AS BLOB)), 0)" for c in cols]
            found = conn.execute(f"SELECT max(max({', '.join(sizes)}, 0)), max({' + '.join(sizes)}) FROM {quoted}").fetchone()
            if found[0] is not None and found[0] > value[0]:
                value = (found[0], table)
            if found[1] is not None and found[1] > row[0]:
                row = (found[1], table)
    return value, row


def check_value_sizes(db_id: str, sqlite_path: str | os.PathLike, limits: Limits) -> None:
    """Refuse a database whose values or rows would not fit the scorer's value cap (InputError)."""
    (value, value_table), (row, row_table) = largest_values(sqlite_path)
    cap = int(limits.max_cell_bytes)
    if value > cap // 2 or row > cap:
        what = (f"a value of {value:,} bytes in table {value_table}" if value > cap // 2
                else f"a row of {row:,} bytes in table {row_table}")
        raise InputError(f"database {db_id} holds {what}; the scorer caps values at half of max_cell_bytes "
                         f"({cap:,} bytes) and rows at all of it, so that no SQLite step can hide unbounded work "
                         f"(docs/bundle.md, Cost model). Leave {db_id} out, or raise SPIDER_SCORING_MAX_CELL_BYTES "
                         "for prepare and for every process that scores with the bundle")


def build_sqlite(sql_path: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Build a .sqlite file from a SQL script (fixtures keep databases as text)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        conn.executescript(Path(sql_path).read_text(encoding="utf-8"))
        conn.commit()
    finally:
        conn.close()
    os.replace(tmp, dest)
    return dest


def dumps_canonical(data: object) -> bytes:
    return (json.dumps(data, ensure_ascii=True, sort_keys=True, separators=(",", ":")) + "\n").encode("ascii")


def write_bundle_data(dest_root: str | os.PathLike, rows: Iterable[IndexRow],
                      databases: Mapping[str, str | os.PathLike], *, precompute: bool = True,
                      limits: Limits = DEFAULT_LIMITS, disputed: Mapping[str, dict] | None = None,
                      reward_shape: reward_shapes.Shape | None = None) -> dict:
    """Copy the used databases under ``dest_root/data`` and write ``data/index.json``.

    ``databases`` maps each db_id the rows use to its source file. Returns the index written.
    With ``precompute``, every gold's result is stored (GoldFailed names a gold that fails).
    ``disputed``: id -> {"kind", "reason"} of the disputed golds the rows name (``disputed_golds`` in
    the index, written only when some row is disputed).
    ``reward_shape``: what the reward pays (bundle.contract.shapes), recorded as the index's
    ``reward_shape``; a binary one (the default) is not written, so a binary bundle's index is the
    same bytes as before shapes existed.
    """
    rows = list(rows)
    data_dir = Path(dest_root) / "data"
    db_dir = data_dir / "databases"
    used = sorted({r.db_id for r in rows})
    missing = [d for d in used if d not in databases]
    if missing:
        raise ValueError(f"no database file given for {', '.join(missing)}")
    if db_dir.exists():
        for stale in db_dir.iterdir():
            if stale.suffix == ".sqlite" and stale.stem not in used:
                stale.unlink()
    entries = {}
    for db_id in used:
        check_value_sizes(db_id, databases[db_id], limits)
        target = db_dir / f"{db_id}.sqlite"
        data = Path(databases[db_id]).read_bytes()
        if not target.exists() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
        entries[db_id] = {"file": f"databases/{db_id}.sqlite", "sha256": hashlib.sha256(data).hexdigest(),
                          "bytes": len(data), "schema": schema_lines(target)}
    index = {
        "format": bundle_index.INDEX_FORMAT,
        "version": bundle_index.INDEX_VERSION,
        "sqlite_version": sqlite3.sqlite_version,
        "digits": limits.float_digits,
        "cost_model": sql_functions.cost_model(limits),
        "databases": entries,
        "rows": [r.as_json() for r in rows],
    }
    used_disputed = sorted({r.disputed for r in rows if r.disputed})
    if used_disputed:
        missing_reasons = [d for d in used_disputed if d not in (disputed or {})]
        if missing_reasons:
            raise ValueError(f"no reason given for disputed gold(s) {', '.join(missing_reasons)}")
        index["disputed_golds"] = {d: dict((disputed or {})[d]) for d in used_disputed}
    if reward_shape is not None and not reward_shape.binary:
        index["reward_shape"] = reward_shape.entry()
    if precompute:
        results: dict[str, dict] = {}
        for row in rows:
            per_db = results.setdefault(row.db_id, {})
            if row.gold in per_db:
                continue
            try:
                gold = bundle_verify.gold_result(row.gold, str(db_dir / f"{row.db_id}.sqlite"), limits)
            except sql_guard.QueryFailed as failed:
                raise GoldFailed(f"row {row.id} ({row.db_id}): gold query failed: {failed.detail}") from None
            per_db[row.gold] = gold_results.to_json(gold)
        index["gold_results"] = results
    atomic_write_bytes(data_dir / "index.json", dumps_canonical(index))
    sql_guard.forget_connections()
    return index
