"""One fuzzed neighbour database: the original's schema, new rows drawn from the original's values.

``Fuzzer(schema, literals).write(path, rng)`` creates the database at ``path``:

* the original's CREATE statements, unchanged (every table, column type and constraint), then its
  indexes, views and triggers;
* tables filled parents first (``Schema.in_key_order``); a foreign key only ever holds a value of
  the parent column among the rows generated for the parent (consistent), or NULL where the
  original has NULL there;
* each table gets between a third and one and a half times its original row count, at least 3
  and at most ``max_rows`` (an empty original table gets a few rows);
* a row starts as a copy of a random original row, so that values that belong together in the
  original stay together; then each cell is redrawn with probability ``redraw`` from the column's
  pool (``values.py``: the original's values, the golds' literals and values near them);
* a column whose values are unique in the original stays unique (new values are drawn without
  replacement, then made unique by a suffix or an offset), unless a gold needs it repeated (it
  groups by it with a HAVING on the groups); a column without NULL in the original never gets one; an
  INTEGER PRIMARY KEY gets distinct whole numbers;
* a row the schema refuses (a UNIQUE or CHECK constraint) is dropped: ``INSERT OR IGNORE``.

The file is written to a temporary name, VACUUMed (so its bytes depend only on its content and the
SQLite version) and renamed. Deterministic for a given ``random.Random`` state.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

from harness.prepare.neighbours import values as value_pools
from harness.prepare.neighbours.schema import Column, Schema, Table, quote

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "north", "south", "river", "stone", "green")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _num(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


class Fuzzer:
    """Draws neighbour databases of one original. ``literals``: the golds' literals per column name."""

    def __init__(self, schema: Schema, literals: dict[str, list], *, grouped: set[str] = frozenset(),  # type: ignore[assignment]
                 max_rows: int = 60, redraw: float = 0.5, null_share: float = 0.15, special_share: float = 0.3) -> None:
        self.schema = schema
        self.grouped = grouped
        self.max_rows = max_rows
        self.redraw = redraw
        self.null_share = null_share
        self.special_share = special_share
        self.pools: dict[tuple[str, str], list] = {}
        self.special: dict[tuple[str, str], list] = {}
        untold = literals.get("", [])
        for table in schema.tables:
            for col in table.columns:
                original, special = self._pools(col, literals.get(col.name.lower(), []), untold)
                self.pools[(table.name, col.name)] = original or special or self._filler(col)
                self.special[(table.name, col.name)] = special

    @staticmethod
    def _filler(col: Column) -> list:
        return list(range(1, 11)) if col.kind == "number" else list(WORDS)

    @staticmethod
    def _pools(col: Column, own: list, untold: list) -> tuple[list, list]:
        """(the original's values, the special ones: literals compared with the column and values near them)."""
        kind = col.kind
        original = sorted({v for v in col.values if v is not None}, key=repr)
        texts = [v for v in original if isinstance(v, str)]
        numeric_text = bool(texts) and all(_is_number(v) for v in texts)
        special: list = []
        for value in own + [v for v in untold if isinstance(v, str) == (kind == "text")]:
            if kind == "number" and isinstance(value, (int, float)):
                special += [value] + value_pools.near_numbers([value])
            elif kind == "text" and isinstance(value, str):
                special.append(value)
                if "%" in value or "_" in value:
                    special += value_pools.like_texts(value, texts)
            elif kind == "text" and numeric_text:  # '2014' stored as text, compared with 2014
                special += [str(v) for v in [value] + value_pools.near_numbers([value]) if isinstance(v, int)]
        if kind == "number" and original:
            special += value_pools.near_numbers([min(original, key=_num), max(original, key=_num)])
        seen: set = set()
        special = [v for v in special if not (v in seen or seen.add(v))]  # type: ignore[func-returns-value]
        return original, special

    def _draw(self, key: tuple[str, str], rng: random.Random) -> object:
        special = self.special[key]
        if special and rng.random() < self.special_share:
            return rng.choice(special)
        return rng.choice(self.pools[key])

    # -- rows -------------------------------------------------------------------------------------
    def _size(self, table: Table, rng: random.Random) -> int:
        n = len(table.rows)
        if n == 0:
            return rng.randint(3, 8)
        return max(3, min(self.max_rows, round(n * rng.uniform(0.34, 1.5))))

    def _fresh_unique(self, col: Column, pool: list, used: set, rng: random.Random) -> object:
        for value in rng.sample(pool, min(len(pool), 12)):
            if value not in used:
                return value
        base = rng.choice(pool)
        for k in range(2, 10_000):
            value = base + k * 1000 if isinstance(base, (int, float)) and not isinstance(base, bool) \
                else f"{base} {k}"
            if value not in used:
                return value
        return None  # pragma: no cover - ten thousand collisions

    def _rows(self, table: Table, generated: dict[str, list[tuple]], rng: random.Random) -> list[tuple]:
        count = self._size(table, rng)
        used: dict[str, set] = {c.name: set() for c in table.columns}
        parents = {c.name: self._parent_values(c, generated) for c in table.columns if c.references}
        rows = []
        for _ in range(count):
            template = rng.choice(table.rows) if table.rows else None
            row = []
            for i, col in enumerate(table.columns):
                value = template[i] if template is not None else None
                redraw = template is None or rng.random() < self.redraw
                choices = parents.get(col.name)
                if choices is not None:
                    value = value if value in choices and not redraw else (rng.choice(choices) if choices else None)
                elif redraw:
                    value = self._draw((table.name, col.name), rng)
                if col.has_null and not col.not_null and rng.random() < self.null_share:
                    value = None
                if value is None and (col.not_null or not col.has_null):
                    value = self._draw((table.name, col.name), rng)
                if (self._unique(col) or table.integer_rowid_key and col.pk) and value is not None \
                        and value in used[col.name]:
                    value = self._fresh_unique(col, self.pools[(table.name, col.name)], used[col.name], rng)
                if table.integer_rowid_key and col.pk and not isinstance(value, int):
                    value = self._fresh_unique(col, list(range(1, 10 * count + 1)), used[col.name], rng)
                used[col.name].add(value)
                row.append(value)
            rows.append(tuple(row))
        return rows

    def _unique(self, col: Column) -> bool:
        """Unique in the original, and not a column a gold needs repeated (``values.grouped_columns``)."""
        return col.unique and (col.pk > 0 or col.name.lower() not in self.grouped)

    def _parent_values(self, col: Column, generated: dict[str, list[tuple]]) -> list | None:
        parent_name, parent_col = col.references  # type: ignore[misc]
        parent = self.schema.table(parent_name)
        rows = generated.get(parent.name)
        if rows is None:
            return None  # a cycle: the parent is filled later; use the pool
        index = next(i for i, c in enumerate(parent.columns) if c.name.lower() == parent_col.lower())
        return sorted({r[index] for r in rows if r[index] is not None}, key=repr)

    # -- the file ---------------------------------------------------------------------------------
    def write(self, path: str | Path, rng: random.Random) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("BEGIN")
            for table in self.schema.tables:
                conn.execute(table.sql)
            generated: dict[str, list[tuple]] = {}
            for table in self.schema.in_key_order():
                rows = self._rows(table, generated, rng)
                marks = ", ".join("?" * len(table.columns))
                conn.executemany(f"INSERT OR IGNORE INTO {quote(table.name)} VALUES ({marks})", rows)
                generated[table.name] = conn.execute(f"SELECT * FROM {quote(table.name)}").fetchall()
            for extra in self.schema.extras:
                conn.execute(extra)
            conn.execute("COMMIT")
            conn.execute("VACUUM")
        finally:
            conn.close()
        os.replace(tmp, path)
        return path
