"""Reward shapes: what the GRPO reward pays for each outcome of a verdict. The grader is always binary.

A bundle is built with one shape (``prepare --reward-shape NAME``, or a custom table with
``--reward-values FILE``) and records it in ``data/index.json`` under ``reward_shape``; an index
without that key is ``binary``, the reward as it always was (1.0 for a match, 0.0 otherwise).
A shape changes what the reward *pays*, never the verdict: the outcome, the grader's score and
every check are the same under every shape. Its values come from the verdict's outcome alone, plus,
for ``sql-r1``, a bonus on a match that depends on the completion's length (``sql_r1_length``):
a verdict stays a pure function of (completion, row, bundle).

The presets, each from its project's own reward code (docs/reward-shapes.md gives the commits and
why each outcome this bundle has and its source lacks gets the value it gets):

======================  =====  ========  =========  =====  =========  ===========  ========
preset                  match  mismatch  no_query   error  forbidden  over budget  over cap
======================  =====  ========  =========  =====  =========  ===========  ========
binary                  1      0         0          0      0          0            0
skyrl-sql               1      0         -1         0      0          0            0
arctic-text2sql-r1      1      0.1       0          0      0          0            0
sql-r1                  6+len  0         -1         -1     -1         -1           -1
======================  =====  ========  =========  =====  =========  ===========  ========

``sql-r1`` is the sum of its source's parts: format (+1 when a query is read, -1 when none is),
execution (+2 when it runs to a result, -2 when it does not), result (+3 for the gold's rows, -3
for others) and, on a match only, length (0 to 1.5, ``sql_r1_length``).

>>> shape = preset("arctic-text2sql-r1")
>>> shape.value("mismatch", "SELECT 1", "SELECT 1"), shape.value("match", "SELECT 1", "SELECT 1"), shape.bounds
(0.1, 1.0, (0.0, 1.0))
>>> preset("sql-r1").value("match", "SELECT a FROM t", "SELECT a FROM t")  # 6 + 1 + 15/2048*0.5
7.003662109375
>>> try:
...     custom("mine", {"match": 1, "mismatch": 0.2})
... except ShapeError as exc:
...     print(exc)  # doctest: +ELLIPSIS
custom shape 'mine': no value for no_query, prediction_error, ..., prediction_over_cap: give every scored outcome a number
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

MATCH, MISMATCH, NO_QUERY = "match", "mismatch", "no_query"
NOT_RUN = ("prediction_error", "forbidden", "prediction_over_budget", "prediction_over_cap")
# Every outcome a verdict scores (verify.OUTCOMES without the unscored ones: tests hold them equal).
SCORED = (MATCH, MISMATCH, NO_QUERY) + NOT_RUN
DEFAULT = "binary"
SQL_R1_LENGTH = "sql-r1-length"  # the one bonus a shape may name
LIMIT_LENGTH = 2048  # SQL-R1's LIMIT_LENGTH: characters of think and answer the length part counts up to
BONUS_MAX = {SQL_R1_LENGTH: 1.5}  # the SQL share of the answer (at most 1) and half the length share


class ShapeError(ValueError):
    """A shape that cannot be used: an unknown name, a missing or non-numeric value, a wrong table."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """A reward shape: a value per scored outcome, and the name of the bonus a match adds (or None)."""

    name: str
    values: Mapping[str, float]
    bonus: str | None = None
    parts: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)  # what the values add up

    @property
    def binary(self) -> bool:
        """Pays exactly what the verdict scores (1.0 for a match, 0.0 otherwise), with no bonus."""
        return self.bonus is None and all(self.values[o] == (1.0 if o == MATCH else 0.0) for o in SCORED)

    @property
    def bounds(self) -> tuple[float, float]:
        """The least and the most this shape can pay."""
        top = self.values[MATCH] + BONUS_MAX.get(self.bonus or "", 0.0)
        return min(self.values.values()), max(max(self.values.values()), top)

    def value(self, outcome: str, completion: str, sql: str | None) -> float:
        """What the reward pays for a verdict with ``outcome`` on ``completion`` (whose query was ``sql``)."""
        paid = self.values[outcome]
        if self.bonus is not None and outcome == MATCH:
            paid += sql_r1_length(completion, sql or "")
        return paid

    def entry(self) -> dict:
        """The index's ``reward_shape`` (what ``from_index`` reads back)."""
        out: dict = {"name": self.name, "values": dict(self.values), "bounds": list(self.bounds)}
        if self.bonus is not None:
            out["bonus"] = self.bonus
        if self.parts:
            out["parts"] = {name: dict(table) for name, table in self.parts.items()}
        return out


def _summed(parts: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {o: float(sum(table.get(o, 0.0) for table in parts.values())) for o in SCORED}


_SQL_R1_PARTS = {
    "format": {o: (-1.0 if o == NO_QUERY else 1.0) for o in SCORED},
    "execution": {**dict.fromkeys(SCORED, -2.0), NO_QUERY: 0.0, MISMATCH: 2.0, MATCH: 2.0},
    "result": {**dict.fromkeys(SCORED, 0.0), MISMATCH: -3.0, MATCH: 3.0},
}
PRESETS: dict[str, Shape] = {shape.name: shape for shape in (
    Shape("binary", {o: (1.0 if o == MATCH else 0.0) for o in SCORED}),
    Shape("skyrl-sql", {**{o: 0.0 for o in SCORED}, MATCH: 1.0, NO_QUERY: -1.0}),
    Shape("arctic-text2sql-r1", {**{o: 0.0 for o in SCORED}, MATCH: 1.0, MISMATCH: 0.1}),
    Shape("sql-r1", _summed(_SQL_R1_PARTS), SQL_R1_LENGTH, _SQL_R1_PARTS),
)}


def preset(name: str) -> Shape:
    """The preset called ``name``; ShapeError naming the presets otherwise."""
    found = PRESETS.get(name)
    if found is None:
        raise ShapeError(f"unknown reward shape {name!r}: choose one of {', '.join(PRESETS)}, or give a custom "
                         "table of values per outcome")
    return found


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ShapeError(f"{where}: {value!r} is not a finite number")
    return float(value)


def custom(name: str, values: Mapping[str, object], bonus: str | None = None) -> Shape:
    """A shape from a table of values per scored outcome, checked: every scored outcome has a finite
    number, no other key is given (an unscored outcome is never paid), and a match pays more than
    any other outcome (a shape that pays a wrong answer as much as a right one teaches nothing)."""
    if not isinstance(name, str) or not name.strip():
        raise ShapeError("a custom shape needs a name (a non-empty text)")
    if not isinstance(values, Mapping):
        raise ShapeError(f"custom shape {name!r}: the values must be a table of outcome -> number")
    missing = [o for o in SCORED if o not in values]
    if missing:
        raise ShapeError(f"custom shape {name!r}: no value for {', '.join(missing)}: give every scored outcome a number")
    extra = sorted(str(k) for k in values if k not in SCORED)
    if extra:
        raise ShapeError(f"custom shape {name!r}: {', '.join(extra)} cannot be paid (the scored outcomes are "
                         f"{', '.join(SCORED)}; gold and infrastructure faults are never a score)")
    table = {o: _number(values[o], f"custom shape {name!r}, {o}") for o in SCORED}
    if any(table[o] >= table[MATCH] for o in SCORED if o != MATCH):
        raise ShapeError(f"custom shape {name!r}: match pays {table[MATCH]:g}, no more than another outcome: "
                         "a right answer must pay more than every wrong one")
    if bonus is not None and bonus not in BONUS_MAX:
        raise ShapeError(f"custom shape {name!r}: unknown bonus {bonus!r} (known: {', '.join(BONUS_MAX)})")
    return Shape(name, table, bonus)


def from_index(entry: object) -> Shape | None:
    """The shape an index records (None when it records none, or the binary one: the reward pays the
    verdict's score as it is). ShapeError when the entry cannot be read."""
    if entry is None:
        return None
    if not isinstance(entry, Mapping):
        raise ShapeError(f"reward_shape is {type(entry).__name__}, not a table")
    shape = custom(str(entry.get("name", "")), entry.get("values"), entry.get("bonus"))  # type: ignore[arg-type]
    return None if shape.binary else shape


_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def sql_r1_length(completion: str, sql: str) -> float:
    """SQL-R1's length part of a match (0 to 1.5): the share of the answer that is the query (its
    whitespace collapsed), plus half the share of ``LIMIT_LENGTH`` the think and answer texts fill
    (0.5 beyond it). Think: the last ``<think>`` block. Answer: the last ``<answer>`` block, else the
    completion without its think blocks (the bundle reads a query without SQL-R1's tags).

    >>> sql_r1_length("<think>count them</think><answer>```sql\\nSELECT count(*) FROM t\\n```</answer>",
    ...               "SELECT count(*) FROM t")
    0.6771647135416666
    """
    thinks = _THINK.findall(completion)
    answers = _ANSWER.findall(completion)
    think = thinks[-1].strip() if thinks else ""
    answer = answers[-1].strip() if answers else _THINK.sub("", completion).strip()
    if not answer:
        return 0.0
    share = min(1.0, len(" ".join(sql.split())) / len(answer))
    length = len(think) + len(answer)
    return share + (length / LIMIT_LENGTH * 0.5 if length <= LIMIT_LENGTH else 0.5)
