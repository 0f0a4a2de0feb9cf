"""Thin databases: an original whose tables hold no or few rows, and how its neighbours are filled.

Corpora such as SynSQL-2.5M and DDL-built BIRD databases hold about two rows a table, some none.
There a single database pays ``[] == []`` in full, and the invariants mined from two rows are
mostly chance: two names are distinct, two countries differ, both parents are referenced. A
database is *thin* when no table holds more than ``THIN_MAX_ROWS`` rows (no real Spider database
with rows is: the smallest, loan_1, has a table of 4; Spider's seven databases shipped without
rows are); everything here applies to thin databases alone, so that the neighbours of any other
database are drawn exactly as before (docs/neighbours.md, "Thin databases"):

* ``loosen``: the invariants kept are those the schema declares (primary keys and UNIQUE
  columns, declared foreign keys), the storage classes, text formats and NULL-freedom; what two
  rows show by chance (a column unique or nearly so, an undeclared inclusion, every parent
  referenced, pairs, extensions, link rows never repeated) is not kept;
* ``widened``: a column's values are the original's, plus values of its type near them (numbers
  either side, texts with their digits moved on, made-up words), so that a table of fifteen rows
  can be drawn from a column that held two values, or none;
* ``THIN_SIZES``: how many rows a neighbour's table gets (the golds' literals are drawn into them
  as for any database: ``neighbours.values``).

>>> widened(("int",), "INTEGER", (), [3, 7])[:6]
[1, 2, 3, 4, 5, 6]
>>> widened(("text",), "TEXT", ("9999",), ["2016"])
['2011', '2012', '2013', '2014', '2015', '2016', '2017', '2018', '2019', '2020', '2021']
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections.abc import Iterable

from . import invariants as inv

THIN_MAX_ROWS = 3  # a database none of whose tables holds more rows is thin
THIN_SIZES = (6, 16)  # a thin database's neighbour tables get from 6 to 15 rows (within ``max_rows``)
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima")


def is_thin(row_counts: Iterable[int]) -> bool:
    """Whether tables holding these rows make a thin database.

    >>> is_thin([2, 2, 0]), is_thin([2, 4]), is_thin([])
    (True, False, False)
    """
    counts = list(row_counts)
    return bool(counts) and max(counts) <= THIN_MAX_ROWS


def thin_profile(profile: inv.Profile) -> bool:
    """Whether the original ``profile`` was mined from is thin."""
    return is_thin(t.rows for t in profile.tables)


def declared_unique(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns the schema declares unique on their own: a one-column primary key, a UNIQUE
    constraint or unique index on one column (lower-case names)."""
    info = conn.execute(f"PRAGMA table_info({inv.quote(table)})").fetchall()
    keys = [r[1] for r in info if r[5]]
    found = {keys[0].lower()} if len(keys) == 1 else set()
    for index in conn.execute(f"PRAGMA index_list({inv.quote(table)})").fetchall():
        if index[2]:
            columns = conn.execute(f"PRAGMA index_info({inv.quote(index[1])})").fetchall()
            if len(columns) == 1 and columns[0][2] is not None:
                found.add(str(columns[0][2]).lower())
    return found


def loosen(conn: sqlite3.Connection, profile: inv.Profile) -> inv.Profile:
    """``profile`` of a thin original with only what its schema declares kept (module docstring)."""
    tables = []
    for table in profile.tables:
        unique = declared_unique(conn, table.name)
        columns = tuple(dataclasses.replace(c, unique=c.name.lower() in unique, near_unique=False)
                        for c in table.columns)
        tables.append(dataclasses.replace(table, columns=columns, depends=(), paired=(), extends=(),
                                          distinct_links=()))
    links = tuple(dataclasses.replace(k, total=False) for k in profile.links if k.declared)
    return dataclasses.replace(profile, tables=tuple(tables), links=links)


def _numbers(values: list, integer: bool) -> list:
    base = values or [1, 10]
    out: set = set()
    for v in base:
        for step in (-2, -1, 0, 1, 2, 5, 10):
            out.add(v + step)
        out.add(v * 2)
    out |= set(range(1, 6))
    return sorted(int(v) if integer else float(v) for v in out)


def _moved_digits(text: str) -> list[str]:
    """``text`` with its last run of digits moved either side, its shape kept ('2016' -> '2011' ... '2021')."""
    found = list(re.finditer(r"\d+", text))
    if not found:
        return [text]
    last = found[-1]
    digits = last.group()
    out = []
    for step in range(-5, 6):
        number = int(digits) + step
        moved = str(number).zfill(len(digits))
        if number >= 0 and len(moved) == len(digits):
            out.append(text[:last.start()] + moved + text[last.end():])
    return out


def widened(kinds: tuple[str, ...], declared: str, shapes: tuple[str, ...], values: list) -> list:
    """The values a thin original's column may take: its own and values of its type near them
    (the callers keep those that fit the column: ``neighbours.values.fits``)."""
    if "blob" in kinds:
        return list(values)
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    texts = [v for v in values if isinstance(v, str)]
    affinity = inv.affinity(declared)
    wants_numbers = bool(numbers) or (not kinds and affinity in ("integer", "real", "numeric"))
    out: list = list(values)
    if wants_numbers:
        integer = all(isinstance(v, int) for v in numbers) and affinity != "real"
        out += _numbers(numbers, integer)
    if texts and shapes:
        out += [t for text in texts for t in _moved_digits(text)]
    elif texts or (not kinds and not wants_numbers):
        out += list(WORDS)
    return sorted(set(out), key=lambda v: (type(v).__name__, v))
