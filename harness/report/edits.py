"""What the reward promotes: the structural edits from the baseline's SQL to a stage's, judged against the gold.

For each changed row (gained or lost against the baseline), both queries and the gold are read into
a :class:`~harness.report.sql_shape.Shape` and compared part by part. Each part that differs is one
edit: its kind (``join added``, ``DISTINCT dropped``, ``condition changed``, ...), a short detail
(``+ JOIN concert``) and a judgement against the gold: *closer* when the stage's part is nearer to
the gold's than the baseline's was (the multiset distance, the number of elements in one and not the
other, fell), *further* when it rose, *no closer* when it stayed. A join added closer to the gold is
one the gold needs; a join dropped further from it is one the gold needs. A row whose SQL is missing
or unreadable gets one edit saying so; a row whose parts all agree gets ``no structural edit`` (a
value or an operator outside WHERE and HAVING changed).

The tally counts, per (kind, judgement), the gained rows and the lost rows showing that edit, with
the first example of each: the table the walkthrough reads by hand ("supervised tuning adds joins
the question does not require; the reward reverses that; the losses drop a join the question needs").

>>> [str(e) for e in edits_between("SELECT name FROM singer",
...                                "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid",
...                                "SELECT name FROM singer")]
['join dropped (not needed): - JOIN concert', 'aliases dropped (closer to the gold): - aliases concert, singer']
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from harness.report.sql_shape import Shape, read_shape

Judgement = Literal["closer", "further", "no closer", "gold unread", "not judged"]

# (Shape field, the kind's name, how one element reads in a detail); in the tables' order
PARTS: tuple[tuple[str, str, str], ...] = (
    ("aliases", "aliases", "aliases {}"),
    ("distinct", "DISTINCT", "{}"),
    ("aggregates", "aggregate", "{}"),
    ("grouping", "GROUP BY", "GROUP BY {}"),
    ("conditions", "condition", "{}"),
    ("order", "ORDER BY", "ORDER BY {}"),
    ("limit", "LIMIT", "LIMIT {}"),
    ("nesting", "nesting", "{}"),
    ("set_operations", "set operation", "{}"),
    ("columns", "columns", "{}"),
)
QUERY_WRITTEN, NO_QUERY, UNPARSED, NO_EDIT = "query written", "no query", "unparsed", "no structural edit"
KIND_ORDER = ("join added", "join dropped", "tables added", "tables dropped", "tables changed") + tuple(
    f"{name} {change}" for _, name, _ in PARTS for change in ("added", "dropped", "changed")
) + (QUERY_WRITTEN, NO_QUERY, UNPARSED, NO_EDIT)
JUDGEMENT_ORDER: tuple[Judgement, ...] = ("closer", "further", "no closer", "gold unread", "not judged")


@dataclasses.dataclass(frozen=True)
class Edit:
    """One part of the query that differs between the baseline and the stage."""

    kind: str  # one of KIND_ORDER
    judgement: Judgement
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} ({judgement_label(self.kind, self.judgement)}): {self.detail}"


@dataclasses.dataclass(frozen=True)
class Example:
    row_id: str
    detail: str


@dataclasses.dataclass(frozen=True)
class EditCount:
    """One line of the edit table: how many gained and lost rows show this edit, and an example of each."""

    kind: str
    judgement: Judgement
    gained: int
    lost: int
    gained_example: Example | None
    lost_example: Example | None

    @property
    def label(self) -> str:
        return judgement_label(self.kind, self.judgement)


def judgement_label(kind: str, judgement: Judgement) -> str:
    """How a judgement reads for a kind: joins as needed or not, other parts as closer or further.

    >>> judgement_label("join added", "further"), judgement_label("join dropped", "further")
    ('not needed', 'needed')
    >>> judgement_label("DISTINCT added", "closer")
    'closer to the gold'
    """
    if kind == "join added" and judgement in ("closer", "further"):
        return "needed" if judgement == "closer" else "not needed"
    if kind == "join dropped" and judgement in ("closer", "further"):
        return "not needed" if judgement == "closer" else "needed"
    return {"closer": "closer to the gold", "further": "further from the gold", "no closer": "no closer to the gold",
            "gold unread": "gold unread", "not judged": "not judged"}[judgement]


def edits_between(gold: str, before: str | None, after: str | None) -> tuple[Edit, ...]:
    """The edits from ``before`` (the baseline's SQL) to ``after`` (the stage's), judged against ``gold``."""
    if after is None:
        return (Edit(NO_QUERY, "not judged", "the stage wrote no query"),)
    if before is None:
        return (Edit(QUERY_WRITTEN, "not judged", "the baseline wrote no query"),)
    old, new = read_shape(before), read_shape(after)
    if old is None or new is None:
        which = " and ".join(name for name, shape in (("the baseline's", old), ("the stage's", new)) if shape is None)
        return (Edit(UNPARSED, "not judged", f"{which} SQL is not a query sqlglot reads"),)
    target = read_shape(gold)
    found = list(_table_edits(old, new, target))
    for field, name, form in PARTS:
        edit = _part_edit(name, form, getattr(old, field), getattr(new, field),
                          None if target is None else getattr(target, field))
        if edit is not None:
            found.append(edit)
    return tuple(found) or (Edit(NO_EDIT, "not judged", "same parts; a value or operator elsewhere changed"),)


def _distance(part: Counter[str], gold: Counter[str]) -> int:
    return sum(((part - gold) + (gold - part)).values())


def _judge(before: tuple[int, ...] | None, after: tuple[int, ...] | None) -> Judgement:
    """Closer when the stage's distance to the gold (compared in order) fell, further when it rose."""
    if before is None or after is None:
        return "gold unread"
    return "closer" if after < before else "further" if after > before else "no closer"


def _change(added: Counter[str], removed: Counter[str], form: str) -> tuple[str, str]:
    """The change's name (added, dropped, changed) and its detail."""
    def listed(part: Counter[str]) -> str:
        return ", ".join(sorted(part.elements()))

    if added and removed:
        return "changed", f"{form.format(listed(removed))} -> {form.format(listed(added))}"
    return ("added", f"+ {form.format(listed(added))}") if added else ("dropped", f"- {form.format(listed(removed))}")


def _part_edit(name: str, form: str, old: Counter[str], new: Counter[str], gold: Counter[str] | None) -> Edit | None:
    if old == new:
        return None
    change, detail = _change(new - old, old - new, form)
    judgement = _judge(None if gold is None else (_distance(old, gold),), None if gold is None else (_distance(new, gold),))
    return Edit(f"{name} {change}", judgement, detail)


def _table_edits(old: Shape, new: Shape, gold: Shape | None) -> Iterable[Edit]:
    """A join added or dropped (named by the tables it brings in or leaves), or other tables read.

    With as many joins on each side, a table read once more (in a sub-query) is the nesting's edit,
    not a table's: only a table read on one side alone is.
    """
    if old.joins == new.joins and set(old.tables) == set(new.tables):
        return
    added, removed = new.tables - old.tables, old.tables - new.tables
    before = None if gold is None else (_distance(old.tables, gold.tables), abs(old.joins - gold.joins))
    after = None if gold is None else (_distance(new.tables, gold.tables), abs(new.joins - gold.joins))
    judgement = _judge(before, after)
    if new.joins != old.joins:
        kind = "join added" if new.joins > old.joins else "join dropped"
        named = (added if new.joins > old.joins else removed) or (new.tables if new.joins > old.joins else old.tables)
        sign = "+" if new.joins > old.joins else "-"
        yield Edit(kind, judgement, f"{sign} JOIN {', '.join(sorted(set(named.elements())))}")
    else:
        change, detail = _change(Counter(set(added) - set(old.tables)), Counter(set(removed) - set(new.tables)), "{}")
        yield Edit(f"tables {change}", judgement, detail)


def tally(gained: Iterable[tuple[str, tuple[Edit, ...]]], lost: Iterable[tuple[str, tuple[Edit, ...]]]) -> tuple[EditCount, ...]:
    """The edit table from (row id, edits) of the gained rows and of the lost rows, in KIND_ORDER."""
    counts: dict[tuple[str, Judgement], list[int]] = {}
    examples: dict[tuple[str, Judgement], list[Example | None]] = {}
    for side, rows in enumerate((gained, lost)):
        for row_id, edits in rows:
            for key in dict.fromkeys((e.kind, e.judgement) for e in edits):  # a row counts once per line
                counts.setdefault(key, [0, 0])[side] += 1
                first = examples.setdefault(key, [None, None])
                if first[side] is None:
                    detail = next(e.detail for e in edits if (e.kind, e.judgement) == key)
                    first[side] = Example(row_id, detail)
    keys = sorted(counts, key=lambda k: (KIND_ORDER.index(k[0]), JUDGEMENT_ORDER.index(k[1])))
    return tuple(EditCount(k[0], k[1], counts[k][0], counts[k][1], examples[k][0], examples[k][1]) for k in keys)
