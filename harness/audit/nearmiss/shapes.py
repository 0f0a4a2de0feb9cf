"""The near-miss families that say the gold another way that is almost the same: superlatives, set operations, lists.

Generators ``family(tree, ctx)`` of ``(note, edited tree)`` as in harness/audit/nearmiss/edits.py. Each
rewrite here is one a writer takes for the gold and is not: ``ORDER BY x DESC LIMIT 1`` and
``WHERE x = (SELECT max(x) ...)`` differ on ties (and on NULL), ``INTERSECT`` and ``AND`` differ
where the two conditions hold on different rows, ``UNION`` and ``OR`` differ on duplicates.

>>> import sqlglot
>>> from harness.audit.nearmiss.context import Context, render
>>> tree = sqlglot.parse_one("SELECT name FROM singer WHERE age > 20 ORDER BY age DESC LIMIT 1", read="sqlite")
>>> [render(t) for _, t in argmax_as_subquery(tree, Context(None))]
['SELECT name FROM singer WHERE age > 20 AND age = (SELECT MAX(age) FROM singer WHERE age > 20)']
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from sqlglot import exp

from harness.audit.nearmiss.context import Context, clause, edit_at, positions, put, render
from harness.audit.nearmiss.edits import Edit, note


def _limit_one(select: exp.Expr) -> bool:
    limit = select.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    return isinstance(value, exp.Literal) and str(value.this) == "1" and not select.args.get("offset")


def argmax_as_subquery(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``ORDER BY x DESC LIMIT 1`` made ``WHERE x = (SELECT max(x) FROM <the same FROM and WHERE>)`` (ASC: min)."""
    for i, node in positions(tree, exp.Select):
        order = node.args.get("order")
        if (not isinstance(order, exp.Order) or len(order.expressions) != 1 or not _limit_one(node)
                or node.args.get("group") or node.args.get("having")):
            continue
        key = order.expressions[0]
        if not isinstance(key.this, exp.Column):
            continue
        extreme = exp.Max if key.args.get("desc") else exp.Min
        yield (f"ORDER BY {render(key)} LIMIT 1 -> {render(key.this)} = (SELECT {extreme.key.upper()}(...))",
               edit_at(tree, i, functools.partial(_argmax, extreme=extreme)))


def _argmax(select: exp.Expr, extreme: type[exp.Expr]) -> exp.Expr:
    key = select.args["order"].expressions[0].this
    inner = exp.Select(expressions=[extreme(this=key.copy())])
    inner.set("from_", select.args["from_"].copy())
    inner.set("joins", [j.copy() for j in select.args.get("joins") or []])
    where = select.args.get("where")
    if where is not None:
        inner.set("where", where.copy())
    condition = exp.EQ(this=key.copy(), expression=exp.Subquery(this=inner))
    select.set("order", None)
    select.set("limit", None)
    select.set("where", exp.Where(this=exp.and_(where.this.copy(), condition, copy=False) if where else condition))
    return select


def extreme_as_order_limit(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``WHERE x = (SELECT max(x) FROM ...)`` made ``ORDER BY x DESC LIMIT 1`` (min: ASC), the condition dropped."""
    for i, node in positions(tree, exp.Select):
        where = node.args.get("where")
        if (where is None or node.args.get("order") or node.args.get("limit") or node.args.get("group")
                or node.args.get("distinct")):
            continue
        conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
        for k, condition in enumerate(conjuncts):
            extreme = _extreme_of(condition)
            if extreme is None:
                continue
            yield (f"{note(condition, None)}; ORDER BY ... LIMIT 1",
                   edit_at(tree, i, functools.partial(_order_limit, k=k, extreme=extreme)))


def _extreme_of(condition: exp.Expr) -> exp.Expr | None:
    """The Max or Min of ``x = (SELECT max(y) FROM ...)``, or None for any other condition."""
    if not (isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column)
            and isinstance(condition.expression, exp.Subquery)):
        return None
    inner = condition.expression.this
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1 or inner.args.get("group"):
        return None
    found = inner.expressions[0]
    return found if isinstance(found, (exp.Max, exp.Min)) else None


def _order_limit(select: exp.Expr, k: int, extreme: exp.Expr) -> exp.Expr:
    where = select.args["where"]
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    key = conjuncts[k].this.copy()
    rest = [c.copy() for j, c in enumerate(conjuncts) if j != k]
    select.set("where", exp.Where(this=exp.and_(*rest, copy=False)) if rest else None)
    desc = isinstance(extreme, exp.Max)
    select.set("order", exp.Order(expressions=[exp.Ordered(this=key, desc=desc, nulls_first=not desc)]))
    select.set("limit", exp.Limit(expression=exp.Literal.number(1)))
    return select


def _same_source(left: exp.Expr, right: exp.Expr) -> bool:
    """Two SELECTs of the same list from the same tables, each with a WHERE and nothing after it."""
    if not (isinstance(left, exp.Select) and isinstance(right, exp.Select)):
        return False
    for side in (left, right):
        if side.args.get("where") is None or any(side.args.get(a) for a in ("group", "having", "order", "limit")):
            return False

    def source(side: exp.Select) -> str:
        parts = [side.args.get("from_")] + list(side.args.get("joins") or [])
        return " ".join(render(p) for p in parts if p is not None)

    return ([render(e) for e in left.expressions] == [render(e) for e in right.expressions]
            and source(left) == source(right) and bool(left.args.get("distinct")) == bool(right.args.get("distinct")))


def set_operation_as_condition(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """Two sides of one source joined in one WHERE: UNION as OR, INTERSECT as AND, EXCEPT as AND NOT."""
    for i, node in positions(tree, exp.Union, exp.Intersect, exp.Except):
        left, right = node.this, node.expression
        if not _same_source(left, right):
            continue
        first, second = left.args["where"].this, right.args["where"].this
        if isinstance(node, exp.Union):
            condition: exp.Expr = exp.or_(first.copy(), second.copy())
        elif isinstance(node, exp.Intersect):
            condition = exp.and_(first.copy(), second.copy())
        else:
            condition = exp.and_(first.copy(), exp.Not(this=exp.Paren(this=second.copy())))
        merged = left.copy()
        merged.set("where", exp.Where(this=condition))
        yield f"{type(node).key.upper()} -> one WHERE", put(tree, i, merged)


def in_list_shrunk(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One value dropped from ``x IN (a, b, ...)``."""
    for i, node in positions(tree, exp.In):
        values = node.expressions
        if len(values) < 2 or clause(node) not in ("where", "having"):
            continue
        for k in range(len(values)):
            new = exp.In(this=node.this.copy(), expressions=[v.copy() for j, v in enumerate(values) if j != k])
            yield note(node, new), put(tree, i, new)
