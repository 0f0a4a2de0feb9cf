"""The invariants a neighbour keeps, by kind, and a profile with one kind given up.

A near miss that no database keeping every invariant of the original's data tells from its gold
is either equivalent to it there or *blocked*: only a database that gives up one invariant shows
it wrong (every room booked in inn_1 keeps ``SELECT 0`` right for "rooms without a reservation").
The near-miss oracle (harness.audit.nearmiss.oracle) names that invariant's kind: it draws databases from
a profile with one kind given up (``loosen``), and names the kinds a database breaks
(``broken_kinds``). The kinds are those of bundle.neighbours.proof (docs/neighbours.md, "What a
neighbour keeps").

>>> from bundle.neighbours.invariants import ColumnFacts, Profile, TableFacts
>>> profile = Profile((TableFacts("t", 3, (ColumnFacts("a", "INT", ("integer",), False, True, 1, True),)),), ())
>>> loosen(profile, "unique").tables[0].columns[0].unique, loosen(profile, "not null").tables[0].columns[0].nulls
(False, True)
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable

from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours.invariants import ColumnFacts, Link, Profile, TableFacts

ALL_CLASSES = ("blob", "integer", "real", "text")


def _columns(change: Callable[[ColumnFacts], ColumnFacts]) -> Callable[[Profile], Profile]:
    def apply(profile: Profile) -> Profile:
        return dataclasses.replace(profile, tables=tuple(
            dataclasses.replace(t, columns=tuple(change(c) for c in t.columns)) for t in profile.tables))
    return apply


def _tables(change: Callable[[TableFacts], TableFacts]) -> Callable[[Profile], Profile]:
    def apply(profile: Profile) -> Profile:
        return dataclasses.replace(profile, tables=tuple(change(t) for t in profile.tables))
    return apply


def _links(change: Callable[[tuple[Link, ...]], tuple[Link, ...]]) -> Callable[[Profile], Profile]:
    def apply(profile: Profile) -> Profile:
        return dataclasses.replace(profile, links=change(profile.links))
    return apply


# kind -> the profile without that kind of invariant, in the order a blocked near miss is named by.
LOOSEN: dict[str, Callable[[Profile], Profile]] = {
    "every parent referenced": _links(lambda links: tuple(dataclasses.replace(k, total=False) for k in links)),
    "unique": _columns(lambda c: dataclasses.replace(c, unique=False)),
    "names' repeats": _columns(lambda c: dataclasses.replace(c, near_unique=False)),
    "not null": _columns(lambda c: dataclasses.replace(c, nulls=True)),
    "link": _links(lambda links: ()),
    "dependency": _tables(lambda t: dataclasses.replace(t, depends=())),
    "paired values": _tables(lambda t: dataclasses.replace(t, paired=())),
    "extended values": _tables(lambda t: dataclasses.replace(t, extends=())),
    "link rows": _tables(lambda t: dataclasses.replace(t, distinct_links=())),
    "format": _columns(lambda c: dataclasses.replace(c, shapes=())),
    "storage class": _columns(lambda c: dataclasses.replace(c, kinds=ALL_CLASSES if c.kinds else c.kinds)),
    "row width": _tables(lambda t: dataclasses.replace(t, widest=10 ** 9)),
    "rows": _tables(lambda t: dataclasses.replace(t, rows=0)),
}
KINDS = tuple(LOOSEN)


def loosen(profile: Profile, *kinds: str) -> Profile:
    """``profile`` without the invariants of ``kinds``."""
    for kind in kinds:
        profile = LOOSEN[kind](profile)
    return profile


def held(profile: Profile) -> tuple[str, ...]:
    """The kinds ``profile`` holds an invariant of (a kind it has none of cannot block anything)."""
    return tuple(kind for kind in KINDS if loosen(profile, kind) != profile)


# What bundle.neighbours.proof.violations says of each kind (a line ends so, or holds this).
SAYS = {
    "every parent referenced": "parent rows no row references",
    "unique": "repeated values, the original's are unique",
    "names' repeats": "the original repeats none more than",
    "not null": "NULLs, the original has none",
    "link": "values no parent holds",
    "dependency": "no longer determines",
    "paired values": "share in the original is in one of them only",
    "extended values": "does not start with their",
    "link rows": "rows repeat another's",
    "format": ": text shaped ",
    "storage class": ", the original only ",
    "row width": "bytes, wider than",
    "rows": ": no rows, the original has",
}
OTHER = "other"  # a line of the proof none of SAYS matches (a kind added to the proof since)


def kind_of(line: str) -> str:
    """The kind of invariant a line of ``neighbours.proof.violations`` is about."""
    return next((kind for kind, says in SAYS.items() if says in line), OTHER)


def broken_kinds(profile: Profile, conn: sqlite3.Connection, allowed: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The kinds of invariant of ``profile`` the database behind ``conn`` breaks (none: it keeps them all),
    in the order of KINDS (OTHER last)."""
    found = {kind_of(line) for line in neighbour_proof.violations(profile, conn, allowed)}
    return tuple(kind for kind in (*KINDS, OTHER) if kind in found)
