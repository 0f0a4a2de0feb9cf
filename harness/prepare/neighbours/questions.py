"""Which kept invariants a gold's question depends on, and what became of the golds they hid.

A neighbour keeps every invariant of its original's data; a gold that asks about what one of them
rules out gets the same answer on every neighbour (harness.prepare.neighbours.relax). ``questions``
reads them from the gold's text:

* a *total link* (every parent row referenced) for an anti-join of the parent and its child: ``NOT
  IN (SELECT ...)``, ``NOT EXISTS``, ``EXCEPT`` or ``LEFT JOIN ... IS NULL``, where the rows kept
  are read from the parent without the child, their match is looked for in the child, and the
  child's link column is named ("the rooms without a reservation", not "the students of grade 1
  except those Otha Moyer teaches", which reads the child on both sides);
* a *column without NULL* for ``IS NULL`` or ``IS NOT NULL`` on it (not beside a ``LEFT JOIN``:
  there the test asks for a missing row, not a NULL).

>>> from bundle.neighbours.invariants import ColumnFacts, Link, Profile, TableFacts
>>> col = ColumnFacts("id", "INT", ("integer",), False, True, 1, False)
>>> p = Profile((TableFacts("room", 3, (col,)), TableFacts("booking", 9, (col,))),
...             (Link("booking", ("id",), "room", ("id",), True, True),))
>>> [q.describe() for q in questions("SELECT count(*) FROM room WHERE id NOT IN (SELECT id FROM booking)", p)]
['total link booking(id) -> room(id)']
>>> [q.describe() for q in questions("SELECT count(*) FROM room WHERE id IS NULL", p)]
['column without NULL room.id']
"""

from __future__ import annotations

import dataclasses

from bundle.neighbours import invariants as inv
from bundle.sql import text as sql_text

ORDER = (inv.TOTAL_LINK, inv.NO_NULL)  # the order questions are asked and relaxed in


@dataclasses.dataclass(frozen=True)
class Question:
    """A kept invariant a gold's question depends on: ``kind`` and ``subject`` as ``inv.Relaxed`` names them."""

    kind: str
    subject: str

    def describe(self) -> str:
        return f"{self.kind} {self.subject}"

    def key(self) -> tuple[int, str]:
        return ORDER.index(self.kind), self.subject


@dataclasses.dataclass(frozen=True)
class Hidden:
    """A gold whose answer a kept invariant hid on every neighbour, and what became of it."""

    db_id: str
    gold: str
    asks: tuple[Question, ...]  # the kept invariants its question depends on
    relaxed: Question | None  # the one relaxed for it; None: still hidden
    neighbour: int | None  # the relaxed neighbour judging it (1-based among the database's)
    why: str

    def as_json(self) -> dict:
        return {"db_id": self.db_id, "gold": self.gold, "asks": [q.describe() for q in self.asks],
                "relaxed": self.relaxed.describe() if self.relaxed else None, "neighbour": self.neighbour,
                "why": self.why}


def _ident(tok: sql_text.Token) -> str | None:
    if tok.kind == "word":
        return tok.text.lower()
    if tok.kind == "quoted":
        return tok.text[1:-1].lower()
    return None


def _bounds(ups: list[str], at: int) -> tuple[int, int]:
    """The tokens of the query holding token ``at``: from after its opening parenthesis (or the start)
    to its closing one (or the end)."""
    depth, start = 0, 0
    for i in range(at - 1, -1, -1):
        depth += (ups[i] == ")") - (ups[i] == "(")
        if depth < 0:
            start = i + 1
            break
    depth, end = 0, len(ups)
    for i in range(at, len(ups)):
        depth += (ups[i] == "(") - (ups[i] == ")")
        if depth < 0:
            end = i
            break
    return start, end


def _anti_joins(toks: list[sql_text.Token], tested: bool) -> list[tuple[set[str], set[str]]]:
    """For each anti-join of a query, (the names read where rows are kept, the names read where their
    match is looked for): ``NOT IN (SELECT ...)`` and ``NOT EXISTS (...)`` (outside, inside the
    subquery), ``EXCEPT`` (its left side, its right side), ``LEFT JOIN t`` beside an IS NULL (the
    tables before it, ``t``)."""
    ups = [t.upper for t in toks]
    names = [_ident(t) or "" for t in toks]
    out = []
    for i, word in enumerate(ups):
        start, end = _bounds(ups, i)
        if word == "NOT" and (ups[i + 1:i + 4] == ["IN", "(", "SELECT"] or ups[i + 1:i + 3] == ["EXISTS", "("]):
            inner = i + 2
            close = _bounds(ups, inner + 1)[1]
            out.append((set(names[start:i] + names[close:end]), set(names[inner:close])))
        elif word == "EXCEPT":
            out.append((set(names[start:i]), set(names[i + 1:end])))
        elif tested and word == "LEFT" and _left_join(ups[i:i + 3]):
            table = i + (2 if ups[i + 1] == "JOIN" else 3)
            out.append((set(names[start:i]), set(names[table:table + 1])))
    return out


def _left_join(ups: list[str]) -> bool:
    return any(w == "LEFT" and ups[i + 1:i + 2] in (["JOIN"], ["OUTER"]) for i, w in enumerate(ups))


def _null_tested(toks: list[sql_text.Token]) -> list[str]:
    """The columns (lower case) a query tests with IS NULL or IS NOT NULL."""
    ups = [t.upper for t in toks]
    out = []
    for i in range(1, len(toks)):
        if ups[i] == "IS" and (ups[i + 1:i + 2] == ["NULL"] or ups[i + 1:i + 3] == ["NOT", "NULL"]):
            name = _ident(toks[i - 1])
            if name is not None:
                out.append(name)
    return out


def questions(gold: str, profile: inv.Profile) -> tuple[Question, ...]:
    """The kept invariants ``gold``'s question depends on (module docstring), in the order relaxed."""
    toks = sql_text.code_tokens(gold)
    ups = [t.upper for t in toks]
    names = {n for n in (_ident(t) for t in toks) if n is not None}
    tables = [t for t in profile.tables if t.name.lower() in names]
    tested = _null_tested(toks)
    found: set[Question] = set()
    anti = _anti_joins(toks, bool(tested))
    for link in profile.links:
        parent, child = link.parent.lower(), link.child.lower()
        if link.total and any(c.lower() in names for c in link.child_columns) and \
                any(parent in kept and child in looked and (child not in kept or child == parent)
                    for kept, looked in anti):
            found.add(Question(inv.TOTAL_LINK, link.describe()))
    if not _left_join(ups):
        for table in tables:
            for col in table.columns:
                if col.name.lower() in tested and not col.nulls and table.rows:
                    found.add(Question(inv.NO_NULL, f"{table.name}.{col.name}"))
    return tuple(sorted(found, key=Question.key))
