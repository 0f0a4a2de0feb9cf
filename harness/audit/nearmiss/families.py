"""Near misses of a gold: the gold with one edit, in named families (issue 25, item 1).

A near miss is what a policy close to right writes: the gold with a comparison at its boundary,
a condition dropped, a ``count(DISTINCT ...)`` for a ``count(*)``, a ``LIMIT 1`` added, a subquery
replaced by its value on the original database, ... The reward must tell each one apart from its
gold wherever some database keeping the original's invariants does; this module only makes them
(the measurement is elsewhere).

**How the edits are made: sqlglot.** The gold is read into sqlglot's tree (SQLite dialect), and each
family edits one node of a copy of it (harness/audit/nearmiss/context.py) and writes the copy back as
SQLite. A tree edit cannot cut a string literal or a parenthesis in two, knows which condition
belongs to which sub-query and which clause, and rebuilds connectives with the parentheses they
need (sqlparse's flat tokens, which harness/audit/sqledit.py edits for the audit's catalogue, would
need all of that rebuilt by hand). The price is that a near miss is written in sqlglot's spelling,
not the gold's (``COUNT(*)``, ``<>``, ``NOT x IN (...)``), so every near miss differs from the gold's
text; a near miss equal to the gold *as sqlglot writes it* is an edit that changed nothing and is
dropped. Every near miss must prepare and run on the database when one is given (within a bound of
SQLite VM steps, :data:`harness.audit.nearmiss.context.MAX_STEPS`); those that do not are dropped.

**What is not a family.** Selected columns reordered: the bundle compares rows with the columns'
order free (bundle/sql/compare.py, as the test-suite metric), so a reordering is the same answer.
A selected column dropped or added: the column count differs on every database, a near miss no
reward can miss.

>>> [(m.family, m.sql) for m in near_misses("SELECT name FROM emp WHERE salary < 50000",
...                                          families=["boundary", "limit_added"])]
[('boundary', 'SELECT name FROM emp WHERE salary <= 50000'), ('limit_added', 'SELECT name FROM emp WHERE salary < 50000 LIMIT 1')]
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from collections.abc import Callable, Iterable, Iterator

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from harness.audit.nearmiss import edits as E
from harness.audit.nearmiss import shapes as H
from harness.audit.nearmiss import structure as S
from harness.audit.nearmiss import values as V
from harness.audit.nearmiss.context import Context, generate, remembered

Family = Callable[[exp.Expr, Context], Iterator[tuple[str, exp.Expr]]]

HELD_OUT_SEED = "spider-scoring-near-miss-families:2026-12-02"


@dataclasses.dataclass(frozen=True)
class NearMiss:
    """One near miss: its family (one of :data:`ALL`), its SQL (SQLite) and what changed."""

    family: str
    sql: str
    note: str  # what changed, e.g. "salary < 50000 -> salary <= 50000"


# name: (what it edits, the generator); the order is the order of near_misses' output.
_FAMILIES: dict[str, tuple[str, Family]] = {
    "boundary": ("a WHERE comparison at its boundary: < and <=, > and >=", E.boundary),
    "equality_to_range": ("a WHERE = made <= or >=, a != made < or >", E.equality_to_range),
    "comparison_reversed": ("a WHERE or HAVING comparison reversed: < and >, <= and >=, = and !=",
                            E.comparison_reversed),
    "having_boundary": ("a HAVING comparison at its boundary (= made <= or >=)", E.having_boundary),
    "condition_negated": ("a comparison, LIKE or BETWEEN of a WHERE or HAVING wrapped in NOT", E.condition_negated),
    "conjunct_dropped": ("one AND-condition of an outer WHERE dropped", E.conjunct_dropped),
    "where_dropped": ("the whole WHERE of an outer SELECT dropped", E.where_dropped),
    "nested_condition_dropped": ("one condition of a nested query's WHERE dropped", E.nested_condition_dropped),
    "disjunct_dropped": ("one OR branch dropped", E.disjunct_dropped),
    "and_or_swapped": ("the ANDs of one chain made ORs, or the ORs ANDs", E.and_or_swapped),
    "number_shifted": ("a number of a WHERE or HAVING one more, one less", E.number_shifted),
    "number_neighbour": ("a number of a condition replaced by its column's next value below and above, on the "
                         "database", V.number_neighbour),
    "text_replaced": ("a text of a condition replaced by its column's next value below and above, on the database",
                      V.text_replaced),
    "condition_column_swapped": ("the column of a WHERE condition replaced by another of its table of the same kind "
                                 "(number, text)", V.condition_column_swapped),
    "text_case_changed": ("a text of a condition lower-cased, upper-cased", E.text_case_changed),
    "literal_quoted": ("a number of a condition written as text, a text of digits as a number", E.literal_quoted),
    "between_strict": ("a BETWEEN read strictly at one end or both", E.between_strict),
    "like_pattern": ("a LIKE pattern anchored or loosened: %x% and x%, %x, x", E.like_pattern),
    "like_equals_swapped": ("LIKE '%v%' made = 'v', = 'v' made LIKE 'v'", E.like_equals_swapped),
    "in_negated": ("IN and NOT IN swapped", E.in_negated),
    "exists_negated": ("EXISTS and NOT EXISTS swapped", E.exists_negated),
    "null_test_negated": ("IS NULL and IS NOT NULL swapped", E.null_test_negated),
    "subquery_value": ("a non-correlated subquery replaced by its value on the database: a scalar by a literal, "
                       "IN (subquery) by IN (its values)", V.subquery_value),
    "in_list_shrunk": ("one value dropped from x IN (a, b, ...)", H.in_list_shrunk),
    "count_star": ("count(*) made count(c) for a column of its SELECT, count(c) made count(*)", S.count_star),
    "count_distinct": ("count(*) made count(DISTINCT c), count(DISTINCT c) made count(*)", S.count_distinct),
    "aggregate_distinct": ("DISTINCT added to or dropped from count(c), sum or avg", S.aggregate_distinct),
    "select_distinct": ("SELECT DISTINCT made SELECT, SELECT made SELECT DISTINCT", S.select_distinct),
    "extreme_swapped": ("max and min swapped", S.extreme_swapped),
    "aggregate_swapped": ("sum made avg or count, avg made sum or count", S.aggregate_swapped),
    "order_flipped": ("one ORDER BY key in the other direction", S.order_flipped),
    "order_dropped": ("one ORDER BY dropped, its LIMIT kept", S.order_dropped),
    "order_key_changed": ("an ORDER BY column replaced by another of its table", V.order_key_changed),
    "limit_added": ("LIMIT 1 added to the outermost query", S.limit_added),
    "limit_dropped": ("one LIMIT dropped, with its OFFSET", S.limit_dropped),
    "limit_changed": ("LIMIT n made n+1 or n-1, OFFSET 1 added", S.limit_changed),
    "argmax_as_subquery": ("ORDER BY x DESC LIMIT 1 made WHERE x = (SELECT max(x) ...), ASC with min",
                           H.argmax_as_subquery),
    "extreme_as_order_limit": ("WHERE x = (SELECT max(x) ...) made ORDER BY x DESC LIMIT 1, min with ASC",
                               H.extreme_as_order_limit),
    "group_key_changed": ("a GROUP BY column replaced by another of its table", V.group_key_changed),
    "group_dropped": ("one GROUP BY dropped, with its HAVING", S.group_dropped),
    "having_dropped": ("one HAVING dropped, its GROUP BY kept", S.having_dropped),
    "join_dropped": ("one JOIN dropped, the columns that named it re-pointed along its ON where they can be",
                     V.join_dropped),
    "join_added": ("a table joined along a declared foreign key of a table the SELECT reads", V.join_added),
    "left_join": ("one JOIN made a LEFT JOIN", S.left_join),
    "join_key_swapped": ("a JOIN's ON made another declared foreign key between its two tables", V.join_key_swapped),
    "column_swapped": ("a selected column replaced by another of its table", V.column_swapped),
    "aggregate_column_swapped": ("the column an aggregate reads replaced by another of its table of the same kind "
                                 "(number, text)", V.aggregate_column_swapped),
    "operands_swapped": ("a - b made b - a, a / b made b / a", S.operands_swapped),
    "operator_changed": ("+ and - swapped, * and / swapped", S.operator_changed),
    "set_operation_swapped": ("UNION, UNION ALL, INTERSECT, EXCEPT made each other; an EXCEPT's sides swapped",
                              S.set_operation_swapped),
    "set_side_dropped": ("a set operation replaced by one of its sides", S.set_side_dropped),
    "set_operation_as_condition": ("two sides of one source in one WHERE: UNION as OR, INTERSECT as AND, "
                                   "EXCEPT as AND NOT", H.set_operation_as_condition),
}

ALL: tuple[str, ...] = tuple(_FAMILIES)
DESCRIPTIONS: dict[str, str] = {name: description for name, (description, _f) in _FAMILIES.items()}
# The families that read the database's values or schema: without a database they give nothing.
NEEDS_DATABASE: tuple[str, ...] = ("number_neighbour", "text_replaced", "subquery_value", "order_key_changed",
                                    "group_key_changed", "join_key_swapped", "column_swapped",
                                    "condition_column_swapped", "aggregate_column_swapped", "join_added")


def held_out(name: str) -> bool:
    """Whether family ``name`` is set aside: the first byte of sha256(seed + name) below a third of 256.

    Decided per name, so adding a family never moves another between the parts."""
    return hashlib.sha256((HELD_OUT_SEED + name).encode("utf-8")).digest()[0] < 256 // 3 + 1


HELD_OUT: tuple[str, ...] = tuple(name for name in ALL if held_out(name))
TUNING: tuple[str, ...] = tuple(name for name in ALL if not held_out(name))


def near_misses(gold: str, database: pathlib.Path | None = None, *,
                families: Iterable[str] | None = None) -> list[NearMiss]:
    """Every near miss of ``gold`` (SQLite, Spider style) in ``families`` (default :data:`ALL`).

    In the order of :data:`ALL`, then of the edited node in the gold's tree; each SQL text once, none
    equal to the gold as sqlglot writes it. The families are disjoint by construction (no two made the
    same SQL on a fifth of the dev golds), so a family's near misses are the same whichever others
    are asked for; should two ever meet, the first in :data:`ALL` keeps it. With ``database``
    (read-only), each one prepares and runs there, and the families that read values read them there;
    without one those families give nothing. A gold sqlglot cannot read gives no near miss."""
    wanted = ALL if families is None else tuple(families)
    unknown = [name for name in wanted if name not in _FAMILIES]
    if unknown:
        raise ValueError(f"unknown near-miss families {unknown}: choose among {', '.join(ALL)}")
    return remembered("families", gold, database, wanted, lambda: _made(gold, database, wanted))


def _made(gold: str, database: pathlib.Path | None, wanted: tuple[str, ...]) -> list[NearMiss]:
    """``near_misses``' work, once a process per gold, database and families (``context.remembered``)."""
    try:
        tree = sqlglot.parse_one(gold.strip().rstrip(";"), read="sqlite")
    except (SqlglotError, ValueError):
        return []
    if tree is None:
        return []
    own = generate(tree)
    seen = {gold.strip(), own}
    out: list[NearMiss] = []
    ctx = Context(database)
    try:
        for name in ALL:
            if name not in wanted:
                continue
            for note, edited in _safely(_FAMILIES[name][1], tree, ctx):
                sql = generate(edited)
                if sql is None or sql in seen:
                    continue
                seen.add(sql)
                if ctx.runs(sql):
                    out.append(NearMiss(name, sql, note))
    finally:
        ctx.close()
    return out


def _safely(family: Family, tree: exp.Expr, ctx: Context) -> Iterator[tuple[str, exp.Expr]]:
    """The family's edits; an edit sqlglot refuses to make ends that family's edits for this gold."""
    try:
        yield from family(tree, ctx)
    except SqlglotError:
        return
