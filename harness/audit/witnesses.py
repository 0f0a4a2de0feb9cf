"""Witness databases: the original's schema with other rows, on which a paid answer may show it is wrong.

A paid answer counts as wrong only where a witness gives it other rows than the gold under the
bundle's own comparison, and a witness counts only when it keeps every invariant of the
original's data (harness.audit.invariants). The witnesses of one original, built on first use:

* ``emptied``: the schema with no row (keeps every invariant, vacuously): a gold whose result
  depends on the data returns something else there, so an answer that reads no table is wrong;
* ``fuzzed k``: a database drawn by the neighbour generator (bundle.neighbours.fuzz) with the
  audit's own seeds, from the original's values and the golds' literals;
* ``doubled T``: the original with every row of table ``T`` copied once, with fresh values in its
  declared keys and in every column the invariants keep unique: duplicates where the data allows
  them, twice the rows for a LIMIT to cut, twice every count;
* ``varied T (lower)``, ``varied T (higher)``: the same copies with every other column but the
  foreign keys moved too (numbers below the column's least value, or above its greatest; texts with
  a suffix): rows a WHERE must cut, where the original has none.

Some witnesses break an invariant (a fuzzed draw, or ``doubled T (keys only)``, which makes only the
declared keys fresh): they never make an answer count, but the audit names the invariant one of
them would have to break to tell a set-aside answer from its gold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from bundle.neighbours import invariants as neighbour_invariants
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.source import Draw, read_original
from bundle.neighbours.values import grouped_columns
from harness.audit import invariants as inv
from harness.prepare.neighbours.distil import focus_for

FUZZED = 8  # fuzzed witnesses per database
SEED = "spider-scoring-audit"


@dataclasses.dataclass(frozen=True)
class Witness:
    """A built witness database; ``broken``: the invariants it does not keep (empty: a fair witness)."""

    name: str
    path: Path
    broken: tuple[inv.Invariant, ...] = ()


def _numbers(values: list) -> list:
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


class _Fresh:
    """Values none of a column's has: numbers past its extreme (above, or below when ``lower``), one
    more each time, and texts with a suffix none has."""

    def __init__(self, values: list, lower: bool = False) -> None:
        self.used = set(values)
        self.step = -1 if lower else 1
        numbers = _numbers(values)
        self.edge = (min if lower else max)(numbers, default=0)

    def like(self, value: object) -> object:
        """A value like ``value`` (same storage class) not used yet; NULL stays NULL."""
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self.edge += self.step
            return type(value)(self.edge)
        text = value.hex() if isinstance(value, bytes) else str(value)
        n = 2
        while f"{text}~{n}" in self.used:
            n += 1
        self.used.add(f"{text}~{n}")
        return f"{text}~{n}"


class _Shifted:
    """Another value for a column that may repeat: one number past its extreme, or the text with ``~2``."""

    def __init__(self, values: list, lower: bool) -> None:
        numbers = _numbers(values)
        self.number = (min(numbers, default=0) - 1) if lower else (max(numbers, default=0) + 1)

    def like(self, value: object) -> object:
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return type(value)(self.number)
        return (value.hex() if isinstance(value, bytes) else str(value)) + "~2"


def _copy_schema(original: Path, dest: Path) -> None:
    """A new database at ``dest`` with ``original``'s schema (tables, then indexes, views, triggers) and no row."""
    source = sqlite3.connect("file:" + str(original.resolve()) + "?mode=ro", uri=True)
    try:
        entries = source.execute("SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE "
                                 "'sqlite\\_%' ESCAPE '\\' ORDER BY type != 'table', rowid").fetchall()
    finally:
        source.close()
    conn = sqlite3.connect(dest, isolation_level=None)
    try:
        for _kind, sql in entries:
            conn.execute(sql)
    finally:
        conn.close()


def doubled(original: Path, dest: Path, table: str, fresh_columns: set[str], shifted_columns: frozenset[str] = frozenset(),
             lower: bool = False) -> None:
    """``original`` with every row of ``table`` copied once: ``fresh_columns`` given values none has,
    ``shifted_columns`` other values (numbers below the column's least when ``lower``, else above its most)."""
    shutil.copyfile(original, dest)
    conn = sqlite3.connect(dest, isolation_level=None)
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # the invariants are checked afterwards, as for every witness
        conn.execute("PRAGMA journal_mode=OFF")  # a scratch copy: no journal, no sync
        conn.execute("PRAGMA synchronous=OFF")
        names = [r[1] for r in conn.execute(f"PRAGMA table_info({inv.quote(table)})")]
        rows = conn.execute(f"SELECT * FROM {inv.quote(table)}").fetchall()
        values = {i: [row[i] for row in rows] for i in range(len(names))}
        change: dict[int, _Fresh | _Shifted] = {i: _Shifted(values[i], lower) for i, name in enumerate(names)
                                                if name.lower() in shifted_columns}
        change.update({i: _Fresh(values[i], lower) for i, name in enumerate(names) if name.lower() in fresh_columns})
        copies = [tuple(change[i].like(v) if i in change else v for i, v in enumerate(row)) for row in rows]
        marks = ", ".join("?" * len(names))
        conn.execute("BEGIN")
        conn.executemany(f"INSERT OR IGNORE INTO {inv.quote(table)} VALUES ({marks})", copies)
        conn.execute("COMMIT")
    finally:
        conn.close()


def declared_keys(path: Path, table: str) -> set[str]:
    """Lower-case names of the columns in ``table``'s primary key or in a UNIQUE constraint."""
    conn = sqlite3.connect("file:" + str(path.resolve()) + "?mode=ro", uri=True)
    try:
        keys = {r[1].lower() for r in conn.execute(f"PRAGMA table_info({inv.quote(table)})") if r[5]}
        for index in conn.execute(f"PRAGMA index_list({inv.quote(table)})").fetchall():
            if index[2]:  # unique
                keys |= {r[2].lower() for r in conn.execute(f"PRAGMA index_info({inv.quote(index[1])})") if r[2]}
        return keys
    finally:
        conn.close()


class WitnessSet:
    """The witnesses of one original database, built on first use under ``work`` (one thread at a time)."""

    def __init__(self, db_id: str, original: Path, golds: list[str], work: Path, fuzzed: int = FUZZED,
                 alone: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> None:
        self.db_id, self.original, self.golds, self.work = db_id, original, sorted(set(golds)), work
        self.fuzzed, self.alone = fuzzed, alone
        columns = _column_names(original)
        links = _link_columns(original)
        self.repeatable = set().union(*(grouped_columns(g, columns, links) for g in self.golds)) if self.golds else set()
        self.invariants = inv.mine(original, self.repeatable)
        self.tables = _table_names(original)
        self._built: dict[str, Witness | None] = {}
        self.not_built: dict[str, str] = {}  # witness -> why it could not be built (reported, never hidden)
        self._fuzzer: Fuzzer | None = None

    def _make(self, name: str, build: Callable[[Path], None]) -> Witness | None:
        """The witness ``name``, built once by ``build(path)``; None when it cannot be built."""
        if name not in self._built:
            path = self.work / f"{self.db_id}-{len(self._built):03d}.sqlite"
            self.work.mkdir(parents=True, exist_ok=True)
            try:
                with self.alone():  # SQLite's heap ceiling is the process's: no scoring query beside the build
                    build(path)
                    broken = tuple(inv.broken(self.invariants, path))
            except (sqlite3.Error, OSError, ValueError, KeyError, StopIteration, MemoryError) as exc:
                self._built[name] = None
                self.not_built[name] = f"{type(exc).__name__}: {exc or 'over the SQLite heap ceiling'}"
                return None
            self._built[name] = Witness(name, path, broken)
        return self._built[name]

    def _fuzz(self, k: int, path: Path) -> None:
        """Fuzzed witness ``k``: the neighbour generator as prepare sets it up, with the audit's seed."""
        if self._fuzzer is None:
            conn = neighbour_invariants.open_read_only(str(self.original))
            try:
                profile, source = neighbour_mining.mine(conn), read_original(conn)
            finally:
                conn.close()
            self._fuzzer = Fuzzer(source, profile, focus_for(self.golds, profile))
        self._fuzzer.build(str(path), Draw(f"{SEED}:{self.db_id}:{k}"))

    def _fresh_columns(self, table: str, keys_only: bool) -> set[str]:
        keys = declared_keys(self.original, table)
        if keys_only:
            return keys
        return keys | {i.column.lower() for i in self.invariants if i.kind == inv.UNIQUE and i.table == table}

    def _known(self, tables: list[str]) -> list[str]:
        known = {t.lower(): t for t in self.tables}
        return list(dict.fromkeys(known[t.lower()] for t in tables if t.lower() in known))

    def _doubled_builders(self, tables: list[str]) -> list[tuple[str, Callable[[Path], None]]]:
        out: list[tuple[str, Callable[[Path], None]]] = []
        for table in self._known(tables):
            out.append((f"doubled {table}", functools.partial(self._double, table, False, None)))
            for lower in (True, False):
                name = f"varied {table} ({'lower' if lower else 'higher'})"
                out.append((name, functools.partial(self._double, table, False, lower)))
        return out

    def _double(self, table: str, keys_only: bool, lower: bool | None, path: Path) -> None:
        """``doubled`` (``lower`` None: copies differ only where they must) or ``varied`` (every other
        column but the foreign keys shifted past its extreme)."""
        fresh = self._fresh_columns(table, keys_only)
        shifted = frozenset() if lower is None else frozenset(plain_columns(self.original, table) - fresh)
        doubled(self.original, path, table, fresh, shifted, bool(lower))

    def _built_in_order(self, builders: list[tuple[str, Callable[[Path], None]]]) -> Iterator[Witness]:
        for name, build in builders:
            found = self._make(name, build)
            if found is not None:
                yield found

    def witnesses(self, tables: list[str]) -> Iterator[Witness]:
        """Every witness in the order tried: emptied, fuzzed 1..k, then ``doubled T`` for each of ``tables``."""
        builders: list[tuple[str, Callable[[Path], None]]] = [("emptied", functools.partial(_copy_schema, self.original))]
        builders += [(f"fuzzed {k + 1}", functools.partial(self._fuzz, k)) for k in range(self.fuzzed)]
        return self._built_in_order(builders + self._doubled_builders(tables))

    def keys_only(self, tables: list[str]) -> Iterator[Witness]:
        """``doubled T (keys only)`` for each of ``tables``: duplicates wherever the declared schema allows."""
        return self._built_in_order([(f"doubled {table} (keys only)", functools.partial(self._double, table, True, None))
                                     for table in self._known(tables)])

    def built(self) -> list[Witness]:
        return [w for w in self._built.values() if w is not None]


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect("file:" + str(path.resolve()) + "?mode=ro", uri=True)


def _table_names(path: Path) -> list[str]:
    conn = _connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                           "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid")]
    finally:
        conn.close()


def _column_names(path: Path) -> set[str]:
    conn = _connect(path)
    try:
        return {r[1].lower() for t in _table_names(path) for r in conn.execute(f"PRAGMA table_info({inv.quote(t)})")}
    finally:
        conn.close()


def plain_columns(path: Path, table: str) -> set[str]:
    """Lower-case names of ``table``'s columns that are no foreign key."""
    conn = _connect(path)
    try:
        links = {str(r[3]).lower() for r in conn.execute(f"PRAGMA foreign_key_list({inv.quote(table)})")}
        return {r[1].lower() for r in conn.execute(f"PRAGMA table_info({inv.quote(table)})")} - links
    finally:
        conn.close()


def _link_columns(path: Path) -> set[str]:
    conn = _connect(path)
    try:
        return {str(r[3]).lower() for t in _table_names(path) for r in conn.execute(f"PRAGMA foreign_key_list({inv.quote(t)})")}
    finally:
        conn.close()
