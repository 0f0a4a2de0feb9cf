"""The structure of one query, read with sqlglot, as the edit table compares it (harness/report/edits.py).

Why sqlglot and not sqlparse (which ``difficulty.py`` uses for Spider's levels): the edit table needs
a query's *tree*, which table a JOIN brings in, which condition sits in a sub-query, which SELECT a
set operation joins, and sqlglot builds that tree (Select, Join, Subquery, Union, ...) for SQLite,
while sqlparse is non-validating and groups tokens, leaving the clauses to be rebuilt by hand. sqlglot
reads every one of Spider's 8,034 train and dev golds, and on each of the 1,034 dev golds counts
joins, sub-queries, set operations, conditions, aggregates, DISTINCT, GROUP BY, ORDER BY and LIMIT
as Spider's own parse does (tests/test_report_edits.py, real data); it is pure Python with no
dependency of its own, and closely maintained.

A :class:`Shape` holds a query's parts as multisets (``collections.Counter``), written back as SQL
with table qualifiers stripped and identifiers lower-cased, so that ``T1.name`` and ``name`` compare
equal and an alias alone changes only ``aliases``. A double-quoted name used as a value
(``sport = "Basketball"``) is read as the string it is to SQLite in Spider's golds; elsewhere
(``GROUP BY "Name"``) as the name.

>>> shape = read_shape("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id "
...                    "WHERE T2.year > 2014 ORDER BY T1.age DESC LIMIT 1")
>>> sorted(shape.tables), shape.joins, sorted(shape.aliases), list(shape.conditions), list(shape.order)
(['concert', 'singer'], 1, ['concert', 'singer'], ['year > 2014'], ['age DESC'])
>>> read_shape("There are 4 teams.") is None
True
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

QUERY_ROOTS = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery)


@dataclasses.dataclass(frozen=True)
class Shape:
    """The parts of one query the edit table compares (module docstring)."""

    tables: Counter[str]  # tables read in a FROM or JOIN, in any sub-query
    joins: int  # JOINs, a comma in FROM counting as one
    aliases: Counter[str]  # tables given an alias
    distinct: Counter[str]  # DISTINCT, in SELECT or inside an aggregate
    aggregates: Counter[str]  # aggregate functions by name
    grouping: Counter[str]  # GROUP BY keys
    conditions: Counter[str]  # AND/OR-separated conditions of WHERE and HAVING, join keys left out
    order: Counter[str]  # ORDER BY keys with their direction
    limit: Counter[str]  # LIMIT values
    nesting: Counter[str]  # sub-queries
    set_operations: Counter[str]  # UNION, UNION ALL, INTERSECT, EXCEPT
    columns: Counter[str]  # the outermost SELECT's items, aggregates unwrapped, aliases dropped


@functools.lru_cache(maxsize=4096)
def read_shape(sql: str) -> Shape | None:
    """The Shape of ``sql``, or None when it is not one query sqlglot can read as SQLite."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except SqlglotError:
        return None
    if not isinstance(tree, QUERY_ROOTS):
        return None
    return Shape(
        tables=Counter(t.name.lower() for t in tree.find_all(exp.Table) if isinstance(t.parent, (exp.From, exp.Join))),
        joins=sum(1 for _ in tree.find_all(exp.Join)),
        aliases=Counter(t.name.lower() for t in tree.find_all(exp.Table) if t.alias),
        distinct=Counter("DISTINCT" for _ in tree.find_all(exp.Distinct)),
        aggregates=Counter(a.key.upper() for a in tree.find_all(exp.AggFunc)),
        grouping=Counter(canonical(key) for group in tree.find_all(exp.Group) for key in group.expressions),
        conditions=Counter(canonical(c) for clause in tree.find_all(exp.Where, exp.Having)
                           for c in _atoms(clause.this) if not _is_join_key(c)),
        order=Counter(f"{canonical(o.this)} {'DESC' if o.args.get('desc') else 'ASC'}" for o in tree.find_all(exp.Ordered)),
        limit=Counter(canonical(limit.expression) for limit in tree.find_all(exp.Limit) if limit.expression),
        nesting=Counter("sub-query" for _ in tree.find_all(exp.Subquery)),
        set_operations=Counter(_set_operation(s) for s in tree.find_all(exp.Union, exp.Intersect, exp.Except)),
        columns=Counter(canonical(_unwrap(item)) for select in _outer_selects(tree) for item in select.expressions),
    )


def canonical(node: exp.Expression) -> str:
    """``node`` as SQLite text: qualifiers stripped, names lower-cased and unquoted (SQLite's names
    ignore case), a double-quoted name in a value's place read as the string SQLite takes it for.

    >>> canonical(sqlglot.parse_one('T2."Sport" = "Basketball"', read="sqlite"))
    "sport = 'Basketball'"
    >>> canonical(sqlglot.parse_one('"Age" = (SELECT min("Age") FROM "Singer")', read="sqlite"))
    'age = (SELECT MIN(age) FROM singer)'
    """
    def rewrite(part: exp.Expression) -> exp.Expression:
        if isinstance(part, exp.Table) and isinstance(part.this, exp.Identifier):
            bare = part.copy()
            bare.set("this", exp.to_identifier(part.name.lower()))
            return bare
        if not isinstance(part, exp.Column):
            return part
        if not part.table and part.this.args.get("quoted") and _in_value_place(part):
            return exp.Literal.string(part.name)
        return exp.column(part.name.lower())

    return node.copy().transform(rewrite).sql(dialect="sqlite", normalize=True)


def _in_value_place(column: exp.Column) -> bool:
    """The right side of a comparison, an IN list's item, a BETWEEN bound: where Spider's golds write
    ``"France"`` for the string."""
    parent = column.parent
    if isinstance(parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like)):
        return parent.expression is column
    if isinstance(parent, exp.In):
        return column in parent.expressions
    return isinstance(parent, exp.Between) and column is not parent.this


def _atoms(condition: exp.Expression) -> list[exp.Expression]:
    """The conditions AND and OR join, parentheses around them opened."""
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, (exp.And, exp.Or)):
        return _atoms(condition.this) + _atoms(condition.expression)
    return [condition]


def _is_join_key(condition: exp.Expression) -> bool:
    """``T1.id = T2.id`` in a WHERE (comma joins): part of the join, not a condition on rows."""
    left, right = condition.this, condition.args.get("expression")
    return (isinstance(condition, exp.EQ) and isinstance(left, exp.Column) and isinstance(right, exp.Column)
            and bool(left.table) and bool(right.table) and left.table != right.table)


def _set_operation(node: exp.Expression) -> str:
    name = node.key.upper()
    return f"{name} ALL" if isinstance(node, exp.Union) and node.args.get("distinct") is False else name


def _outer_selects(tree: exp.Expression) -> list[exp.Select]:
    """The SELECTs whose rows are the query's: both sides of a set operation, never a sub-query."""
    if isinstance(tree, exp.Subquery):
        return _outer_selects(tree.this)
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        return _outer_selects(tree.this) + _outer_selects(tree.expression)
    return [tree] if isinstance(tree, exp.Select) else []


def _unwrap(item: exp.Expression) -> exp.Expression:
    """A SELECT item without its alias, an aggregate's argument for the aggregate, DISTINCT opened."""
    bare = item.unalias()
    item = bare if isinstance(bare, exp.Expression) else item
    inner = item.this if isinstance(item, exp.AggFunc) else None
    if isinstance(inner, exp.Expression):
        item = inner
    if isinstance(item, exp.Distinct) and item.expressions:
        item = item.expressions[0]
    return item
