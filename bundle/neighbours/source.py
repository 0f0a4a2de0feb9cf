"""What a neighbour database is drawn from: the original's statements and rows, a seeded draw, a focus.

* ``read_original``: the original's CREATE statements and an evenly spaced sample of each table's
  rows (the templates and value pools of ``neighbours.fuzz``);
* ``Draw``: seeded choices built on ``random.random`` alone, whose sequence Python keeps the same
  across versions and machines (``choice``, ``shuffle``... may change, so they are not used);
* ``Focus``: what a database is drawn to exercise (the queries' literals, grouped and sorted
  columns, sizes and shares); the invariants hold whatever it says.

The same seed gives the same choices on every machine and Python version (pinned here):

>>> d = Draw("spider-scoring")
>>> [d.below(1000) for _ in range(4)], "".join(d.shuffled("abcdef"))
([172, 45, 406, 736], 'cfedba')
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from collections.abc import Mapping, Sequence

from . import invariants as inv

SAMPLE_ROWS = 1_000  # original rows read per table (evenly spaced) as templates and value pools


class Draw:
    """Seeded choices built on ``random.random`` alone (its sequence is the same on every Python)."""

    def __init__(self, seed: str) -> None:
        self._random = random.Random(seed).random

    def below(self, n: int) -> int:
        return min(int(self._random() * n), n - 1)

    def choice(self, items: Sequence):
        return items[self.below(len(items))]

    def chance(self, p: float) -> bool:
        return self._random() < p

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self._random()

    def shuffled(self, items: Sequence) -> list:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


@dataclasses.dataclass(frozen=True)
class OriginalTable:
    name: str
    sql: str
    rows: tuple[tuple, ...]  # at most SAMPLE_ROWS, evenly spaced


@dataclasses.dataclass(frozen=True)
class Original:
    """The original's statements and a sample of its rows: what a neighbour is drawn from."""

    tables: tuple[OriginalTable, ...]
    indexes: tuple[str, ...]
    later: tuple[str, ...]  # views and triggers, created after the rows
    # what neighbour_plan derives from the sample alone (a column's value pool), kept for every plan drawn
    # from this original: filled on first use, never part of what the original is
    derived: dict = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)


def read_original(conn: sqlite3.Connection, sample: int = SAMPLE_ROWS) -> Original:
    tables: list[OriginalTable] = []
    indexes: list[str] = []
    later: list[str] = []
    entries = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND "
                           "name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid").fetchall()
    for kind, name, sql in entries:
        if kind == "table":
            count = int(conn.execute(f"SELECT count(*) FROM {inv.quote(name)}").fetchone()[0])
            step = max(1, -(-count // sample))
            rows = [r for i, r in enumerate(conn.execute(f"SELECT * FROM {inv.quote(name)}")) if i % step == 0]
            tables.append(OriginalTable(name, sql, tuple(rows[:sample])))
        else:
            (indexes if kind == "index" else later).append(sql)
    return Original(tuple(tables), tuple(indexes), tuple(later))


@dataclasses.dataclass(frozen=True)
class Focus:
    """What a database is drawn to exercise; the invariants hold whatever it says.

    ``literals``: column name (lower case; "" when unknown) -> values queries compare it with.
    ``patterns``: column name -> LIKE patterns whose parts are put into texts beside the original's
    (a gold's, never a prediction's: 'applied math' would separate a fair ``LIKE '%math%'`` from the
    gold's ``= 'math'``); a pattern itself is never a value.
    ``grouped``: columns a gold needs repeated (their uniqueness is dropped, docs/neighbours.md).
    ``sort_columns``: columns queries order by: no NULL added; ``distinct_sort`` draws them distinct.
    ``distinct``: columns drawn distinct (a gold's ``min``/``max``: no tie for a bare column to break).
    ``ranges``: column name -> the bounds of a gold's ``BETWEEN``: held only where the original holds
    them ("between 3000 and 4000" reads inclusive or strict, and only a weight of exactly 3000 tells
    the two fair readings apart; the values next to a bound are drawn as for any literal).
    ``twins``: a second entity for each literal naming one, where the original repeats such names
    (one of the targeted candidates: a query taking a name for an identity then shows).
    """

    literals: Mapping[str, Sequence] = dataclasses.field(default_factory=dict)
    patterns: Mapping[str, Sequence] = dataclasses.field(default_factory=dict)
    grouped: frozenset[str] = frozenset()
    sort_columns: frozenset[str] = frozenset()
    distinct: frozenset[str] = frozenset()
    ranges: Mapping[str, Sequence] = dataclasses.field(default_factory=dict)
    twins: bool = False
    distinct_sort: bool = False
    max_rows: int = 60
    scale: tuple[float, float] = (0.34, 1.5)
    redraw: float = 0.5
    link_redraw: float = 0.05  # a row's parent is redrawn this often, where the rows are no entities (a like, a visit)
    regroup: float = 0.2  # an entity's parent is redrawn this often where a gold groups by it and the original repeats none
    adopt: float = 0.5  # where they are, a parent without one takes one from a parent with two or more
    null_share: float = 0.15
    special_share: float = 0.3
