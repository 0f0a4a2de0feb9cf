"""The near-miss families that edit the gold's structure: aggregates, DISTINCT, ORDER BY, LIMIT, GROUP BY, set operations.

Generators ``family(tree, ctx)`` of ``(note, edited tree)`` as in harness/audit/nearmiss/edits.py.

>>> import sqlglot
>>> from harness.audit.nearmiss.context import AGGREGATES, Context, render
>>> tree = sqlglot.parse_one("SELECT name FROM singer ORDER BY age DESC LIMIT 1", read="sqlite")
>>> [render(t) for _, t in limit_changed(tree, Context(None))]
['SELECT name FROM singer ORDER BY age DESC LIMIT 2', 'SELECT name FROM singer ORDER BY age DESC LIMIT 1 OFFSET 1']
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from sqlglot import exp

from harness.audit.nearmiss.context import (
    AGGREGATES,
    Context,
    clause,
    edit_at,
    is_text,
    owning_select,
    positions,
    put,
    set_arg,
    sources,
)
from harness.audit.nearmiss.edits import Edit, note

_SET_OPERATIONS: tuple[tuple[type[exp.SetOperation], bool], ...] = (
    (exp.Union, True), (exp.Union, False), (exp.Intersect, True), (exp.Except, True))
_AGGREGATE_SWAPS: dict[type[exp.Expr], tuple[type[exp.Expr], ...]] = {
    exp.Sum: (exp.Avg, exp.Count), exp.Avg: (exp.Sum, exp.Count)}


def _own_columns(select: exp.Select) -> list[exp.Column]:
    """The columns a SELECT names itself (not its sub-queries'), first occurrence of each text, in walk order."""
    seen: dict[str, exp.Column] = {}
    for node in select.walk(prune=lambda n: n is not select and isinstance(n, exp.Query)):
        if (isinstance(node, exp.Column) and owning_select(node) is select and clause(node) != "other"
                and not is_text(node)):
            seen.setdefault(node.sql(dialect="sqlite").lower(), node)
    return list(seen.values())


MAX_COUNTED = 8  # columns tried in one count(*)


def _count_columns(select: exp.Expr | None, ctx: Context) -> list[exp.Expr]:
    """The columns a ``count(*)`` of ``select`` may be made to count: those the SELECT names (at most 3),
    then, with a database, every column of the tables it reads (qualified where it reads several), up to
    MAX_COUNTED: ``count(DISTINCT Year)`` is a near miss of ``count(*)`` though the gold never names Year."""
    if not isinstance(select, exp.Select):
        return []
    out: dict[str, exp.Expr] = {c.sql(dialect="sqlite").lower(): c for c in _own_columns(select)[:3]}
    read = sources(select)
    for qualifier, table in read:
        for name in ctx.schema.table_columns(table):
            column = exp.column(name, table=qualifier if len(read) > 1 or qualifier != table else None)
            out.setdefault(column.sql(dialect="sqlite").lower(), column)
    return list(out.values())[:MAX_COUNTED]


def count_star(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``count(*)`` -> ``count(c)`` (the columns of :func:`_count_columns`); ``count(c)`` -> ``count(*)``."""
    for i, node in positions(tree, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star):
            for column in _count_columns(owning_select(node), ctx):
                new = exp.Count(this=column.copy())
                yield note(node, new), put(tree, i, new)
        elif isinstance(arg, exp.Column):
            new = exp.Count(this=exp.Star())
            yield note(node, new), put(tree, i, new)


def count_distinct(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``count(*)`` -> ``count(DISTINCT c)`` (c as for count_star), ``count(DISTINCT c)`` -> ``count(*)``."""
    for i, node in positions(tree, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star):
            for column in _count_columns(owning_select(node), ctx):
                new = exp.Count(this=exp.Distinct(expressions=[column.copy()]))
                yield note(node, new), put(tree, i, new)
        elif isinstance(arg, exp.Distinct):
            new = exp.Count(this=exp.Star())
            yield note(node, new), put(tree, i, new)


def aggregate_distinct(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """DISTINCT added inside ``count(c)``, ``sum`` or ``avg``, or dropped from one (max and min: no change)."""
    for i, node in positions(tree, exp.Count, exp.Sum, exp.Avg):
        arg = node.this
        if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
            new = type(node)(this=arg.expressions[0].copy())
        elif arg is not None and not isinstance(arg, (exp.Star, exp.Distinct)):
            new = type(node)(this=exp.Distinct(expressions=[arg.copy()]))
        else:
            continue
        yield note(node, new), put(tree, i, new)


def select_distinct(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``SELECT DISTINCT`` made ``SELECT``, or ``SELECT`` made ``SELECT DISTINCT``, in one SELECT.

    Not added where it changes nothing: in an EXISTS, or to a SELECT of aggregates alone (one row)."""
    for i, node in positions(tree, exp.Select):
        if node.args.get("distinct"):
            yield "SELECT DISTINCT -> SELECT", edit_at(tree, i, lambda n: set_arg(n, "distinct", None))
        elif not isinstance(node.parent, exp.Exists) and not (isinstance(node, exp.Select) and _one_row(node)):
            yield "SELECT -> SELECT DISTINCT", edit_at(tree, i, lambda n: set_arg(n, "distinct", exp.Distinct()))


def _one_row(select: exp.Select) -> bool:
    """A SELECT of aggregates without GROUP BY: it gives one row."""
    return not select.args.get("group") and all(
        isinstance(e.unalias(), AGGREGATES) for e in select.expressions)


def extreme_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    for i, node in positions(tree, exp.Max, exp.Min):
        new = (exp.Min if isinstance(node, exp.Max) else exp.Max)(this=node.this.copy())
        yield note(node, new), put(tree, i, new)


def aggregate_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``sum`` -> ``avg`` or ``count``, ``avg`` -> ``sum`` or ``count`` (its DISTINCT kept)."""
    for i, node in positions(tree, exp.Sum, exp.Avg):
        for kind in _AGGREGATE_SWAPS[type(node)]:
            new = kind(this=node.this.copy())
            yield note(node, new), put(tree, i, new)


def order_flipped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One ORDER BY key in the other direction."""
    for i, node in positions(tree, exp.Ordered):
        new = node.copy()
        desc = not node.args.get("desc")
        new.set("desc", desc)
        new.set("nulls_first", not desc)  # SQLite's own order of NULLs (first ascending): no NULLS clause written
        yield note(node, new), put(tree, i, new)


def order_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One ORDER BY dropped (its LIMIT kept)."""
    for i, node in positions(tree, exp.Order):
        yield note(node, None), edit_at(tree, i, lambda _n: None)


def limit_added(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``LIMIT 1`` added to the outermost query when it has no LIMIT."""
    if isinstance(tree, exp.Query) and not tree.args.get("limit"):
        yield "-> LIMIT 1", edit_at(tree, 0, _limit_one)


def _limit_one(query: exp.Expr) -> exp.Expr:
    return query.limit(1, copy=False) if isinstance(query, exp.Query) else query


def limit_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One LIMIT dropped, with its OFFSET."""
    for i, node in positions(tree, exp.Limit):
        yield note(node, None), edit_at(tree, i, lambda n: _drop_limit(n))


def _drop_limit(limit: exp.Expr) -> exp.Expr:
    parent = limit.parent
    if parent is not None and parent.args.get("offset"):
        parent.set("offset", None)
    return None  # type: ignore[return-value]


def limit_changed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``LIMIT n`` -> ``n+1`` and ``n-1`` (at least 1), and ``OFFSET 1`` added where it has none."""
    for i, node in positions(tree, exp.Limit):
        value = node.expression
        if not (isinstance(value, exp.Literal) and str(value.this).isdigit()):
            continue
        n = int(str(value.this))
        for m in (n - 1, n + 1):
            if m >= 1:
                new = exp.Limit(expression=exp.Literal.number(m))
                yield note(node, new), put(tree, i, new)
        parent = node.parent
        if parent is not None and not parent.args.get("offset"):
            offset = exp.Offset(expression=exp.Literal.number(1))
            yield f"{note(node, node)} OFFSET 1", edit_at(tree, i, functools.partial(_add_offset, offset=offset))


def _add_offset(limit: exp.Expr, offset: exp.Expr) -> exp.Expr:
    parent = limit.parent
    if parent is not None:
        parent.set("offset", offset.copy())
    return limit


def group_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One GROUP BY dropped, with its HAVING."""
    for i, node in positions(tree, exp.Group):
        yield note(node, None), edit_at(tree, i, lambda n: _drop_group(n))


def _drop_group(group: exp.Expr) -> exp.Expr:
    parent = group.parent
    if parent is not None and parent.args.get("having"):
        parent.set("having", None)
    return None  # type: ignore[return-value]


def having_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One HAVING dropped (its GROUP BY kept)."""
    for i, node in positions(tree, exp.Having):
        yield note(node, None), edit_at(tree, i, lambda _n: None)


def left_join(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One inner JOIN made a LEFT JOIN."""
    for i, node in positions(tree, exp.Join):
        if not node.args.get("side") and (node.args.get("kind") or "INNER").upper() == "INNER":
            new = node.copy()
            new.set("kind", None)
            new.set("side", "LEFT")
            yield f"JOIN {node.this.sql(dialect='sqlite')} -> LEFT JOIN", put(tree, i, new)


def set_operation_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One UNION, UNION ALL, INTERSECT or EXCEPT made each of the others; an EXCEPT's sides swapped."""
    for i, node in positions(tree, exp.Union, exp.Intersect, exp.Except):
        current = (type(node), bool(node.args.get("distinct", True)))
        for kind, distinct in _SET_OPERATIONS:
            if (kind, distinct) == current:
                continue
            new = kind(this=node.this.copy(), expression=node.expression.copy(), distinct=distinct)
            label = kind.key.upper() + ("" if distinct else " ALL")
            yield f"{type(node).key.upper()} -> {label}", put(tree, i, new)
        if isinstance(node, exp.Except):
            new = exp.Except(this=node.expression.copy(), expression=node.this.copy(), distinct=True)
            yield "EXCEPT sides swapped", put(tree, i, new)


def set_side_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One set operation replaced by its left side, or by its right side."""
    for i, node in positions(tree, exp.Union, exp.Intersect, exp.Except):
        for side, kept in (("right", node.this), ("left", node.expression)):
            yield f"{type(node).key.upper()} {side} side dropped", put(tree, i, kept)


def operands_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``a - b`` -> ``b - a`` and ``a / b`` -> ``b / a``."""
    for i, node in positions(tree, exp.Sub, exp.Div):
        new = type(node)(this=node.expression.copy(), expression=node.this.copy())
        yield note(node, new), put(tree, i, new)


def operator_changed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``+`` <-> ``-`` and ``*`` <-> ``/`` in one arithmetic expression."""
    swaps: dict[type[exp.Expr], type[exp.Expr]] = {exp.Add: exp.Sub, exp.Sub: exp.Add, exp.Mul: exp.Div, exp.Div: exp.Mul}
    for i, node in positions(tree, exp.Add, exp.Sub, exp.Mul, exp.Div):
        new = swaps[type(node)](this=node.this.copy(), expression=node.expression.copy())
        yield note(node, new), put(tree, i, new)
