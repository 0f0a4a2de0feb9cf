"""The near-miss families that edit the gold's conditions: comparisons, connectives, literals, LIKE, NULL tests.

Each family is a generator ``family(tree, ctx)`` of ``(note, edited tree)``, one edit each
(harness/audit/nearmiss/families.py collects, checks and names them). They read only the gold's tree; the
ones that need the database's values are in harness/audit/nearmiss/values.py.

>>> import sqlglot
>>> from harness.audit.nearmiss.context import Context, render
>>> tree = sqlglot.parse_one("SELECT name FROM emp WHERE salary < 50000 AND dept = 'IT'", read="sqlite")
>>> [(note, render(t)) for note, t in boundary(tree, Context(None))]
[('salary < 50000 -> salary <= 50000', "SELECT name FROM emp WHERE salary <= 50000 AND dept = 'IT'")]
>>> [render(t) for _, t in conjunct_dropped(tree, Context(None))]
["SELECT name FROM emp WHERE dept = 'IT'", 'SELECT name FROM emp WHERE salary < 50000']
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from sqlglot import exp

from harness.audit.nearmiss.context import (
    COMPARISONS,
    Context,
    clause,
    edit_at,
    filtering,
    is_number,
    is_text,
    join_key,
    owning_select,
    positions,
    put,
    render,
    set_arg,
    text_of,
)

Edit = tuple[str, exp.Expr]

_BOUNDARY: dict[type[exp.Expr], type[exp.Expr]] = {exp.LT: exp.LTE, exp.LTE: exp.LT, exp.GT: exp.GTE, exp.GTE: exp.GT}
_REVERSED: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}
_RANGE: dict[type[exp.Expr], tuple[type[exp.Expr], ...]] = {exp.EQ: (exp.LTE, exp.GTE), exp.NEQ: (exp.LT, exp.GT)}


def note(before: exp.Expr, after: exp.Expr | None) -> str:
    """``before -> after`` (each cut to 60 characters), ``after`` "(dropped)" when None."""
    def cut(node: exp.Expr | None) -> str:
        text = "(dropped)" if node is None else render(node)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"{cut(before)} -> {cut(after)}"


def _swap_op(tree: exp.Expr, position: int, node: exp.Expr, kind: type[exp.Expr]) -> Edit:
    new = kind(this=node.this.copy(), expression=node.expression.copy())
    return note(node, new), edit_at(tree, position, lambda _n: new.copy())


def _value_comparisons(tree: exp.Expr, where: str) -> Iterator[tuple[int, exp.Expr]]:
    """Comparisons of a WHERE (``where="where"``, sub-queries' too) or a HAVING that are not join keys."""
    for i, node in positions(tree, *COMPARISONS):
        if clause(node) == where and not join_key(node):
            yield i, node


def boundary(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    for i, node in _value_comparisons(tree, "where"):
        if type(node) in _BOUNDARY:
            yield _swap_op(tree, i, node, _BOUNDARY[type(node)])


def having_boundary(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    for i, node in _value_comparisons(tree, "having"):
        if type(node) in _BOUNDARY:
            yield _swap_op(tree, i, node, _BOUNDARY[type(node)])
        elif type(node) in _RANGE:
            for kind in _RANGE[type(node)]:
                yield _swap_op(tree, i, node, kind)


def equality_to_range(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    for i, node in _value_comparisons(tree, "where"):
        if type(node) in _RANGE:
            for kind in _RANGE[type(node)]:
                yield _swap_op(tree, i, node, kind)


def comparison_reversed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    for where in ("where", "having"):
        for i, node in _value_comparisons(tree, where):
            yield _swap_op(tree, i, node, _REVERSED[type(node)])


_ATOMS = (*COMPARISONS, exp.Like, exp.Between)


def condition_negated(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One comparison, LIKE or BETWEEN of a WHERE or HAVING wrapped in NOT (IN, EXISTS and IS have their own)."""
    for i, node in positions(tree, *_ATOMS):
        if filtering(node) and not join_key(node) and not isinstance(node.parent, exp.Not):
            new = exp.Not(this=exp.Paren(this=node.copy()))
            yield note(node, new), put(tree, i, new)


def _connectives(tree: exp.Expr, kind: type[exp.Connector]) -> Iterator[tuple[int, exp.Expr]]:
    """Connectors of ``kind`` in a WHERE, HAVING or ON that are not part of a longer chain of the same kind."""
    for i, node in positions(tree, kind):
        if not isinstance(node.parent, kind) and clause(node) in ("where", "having", "on"):
            yield i, node


def _where_conjuncts(tree: exp.Expr, nested: bool) -> Iterator[tuple[int, list[exp.Expr]]]:
    """(position of the WHERE's condition, its AND-conjuncts) of the outer SELECTs (``nested``: the inner ones)."""
    for i, node in positions(tree, exp.Where):
        select = owning_select(node)
        inner = select is not None and any(isinstance(a, (exp.Subquery, exp.Exists, exp.In))
                                           for a in _ancestors(select))
        if inner == nested:
            yield i, list(node.this.flatten()) if isinstance(node.this, exp.And) else [node.this]


def _ancestors(node: exp.Expr) -> Iterator[exp.Expr]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _drop_conjuncts(tree: exp.Expr, nested: bool) -> Iterator[Edit]:
    for where_position, conjuncts in _where_conjuncts(tree, nested):
        if len(conjuncts) < 2:
            continue
        for k, gone in enumerate(conjuncts):
            rest = [c.copy() for j, c in enumerate(conjuncts) if j != k]
            new = exp.and_(*rest, copy=False)
            yield note(gone, None), edit_at(tree, where_position, functools.partial(set_arg, key="this", value=new))


def conjunct_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _drop_conjuncts(tree, nested=False)


def nested_condition_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One AND-condition of a nested query's WHERE dropped, or its whole WHERE when it has one condition."""
    yield from _drop_conjuncts(tree, nested=True)
    for i, conjuncts in _where_conjuncts(tree, nested=True):
        if len(conjuncts) == 1:
            yield note(conjuncts[0], None), edit_at(tree, i, lambda _n: None)


def where_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """The whole WHERE of an outer SELECT (a side of a set operation is one) dropped."""
    for i, conjuncts in _where_conjuncts(tree, nested=False):
        yield note(exp.and_(*conjuncts), None), edit_at(tree, i, lambda _n: None)


def disjunct_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    for i, node in _connectives(tree, exp.Or):
        branches = list(node.flatten())
        for k, gone in enumerate(branches):
            rest = [b.copy() for j, b in enumerate(branches) if j != k]
            new = exp.or_(*rest, copy=False)
            yield note(gone, None), put(tree, i, new)


def and_or_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """Every AND of one chain made OR, or every OR made AND (the conditions wrapped as needed)."""
    for kind, other in ((exp.And, exp.or_), (exp.Or, exp.and_)):
        for i, node in _connectives(tree, kind):
            if clause(node) == "on":
                continue
            new = other(*[b.copy() for b in node.flatten()], copy=False)
            if isinstance(node.parent, (exp.Where, exp.Having, exp.Paren)):
                replacement: exp.Expr = new
            else:
                replacement = exp.Paren(this=new)
            yield note(node, replacement), put(tree, i, replacement)


def number_shifted(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A number of a WHERE or HAVING condition one more and one less."""
    for i, node in positions(tree, exp.Literal):
        if not is_number(node) or not filtering(node):
            continue
        text = str(node.this)
        try:
            value: float = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                continue
        for delta in (-1, 1):
            shifted = value + delta
            new = (exp.Literal.number(shifted) if shifted >= 0
                   else exp.Neg(this=exp.Literal.number(-shifted)))
            if isinstance(node.parent, exp.Neg):
                continue  # a negative literal: its sign is its parent's; left alone
            yield note(node, new), put(tree, i, new)


def literal_quoted(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A number of a condition written as text (``2000`` -> ``'2000'``), or a text of digits as a number."""
    for i, node in positions(tree, exp.Literal, exp.Column):
        if not filtering(node):
            continue
        if is_number(node):
            new: exp.Expr = exp.Literal.string(str(node.this))
        elif is_text(node) and _numeric(text_of(node)):
            new = exp.Literal.number(text_of(node).strip())
        else:
            continue
        yield note(node, new), put(tree, i, new)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text and text != "" and text.lower() not in ("nan", "inf", "-inf", "infinity")


def text_case_changed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A text of a condition lower-cased, and upper-cased, where that changes it (not a LIKE pattern: SQLite's
    LIKE ignores the case of ASCII letters)."""
    for i, node in positions(tree, exp.Literal, exp.Column):
        if not is_text(node) or not filtering(node) or isinstance(node.parent, exp.Like):
            continue
        text = text_of(node)
        for changed in dict.fromkeys((text.lower(), text.upper())):
            if changed != text:
                new = exp.Literal.string(changed)
                yield note(node, new), put(tree, i, new)


def between_strict(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x BETWEEN a AND b`` read strictly at one end or both: ``x > a AND x < b`` and the like."""
    for i, node in positions(tree, exp.Between):
        if not filtering(node):
            continue
        low_kinds = (exp.GT, exp.GTE)
        high_kinds = (exp.LT, exp.LTE)
        for low in low_kinds:
            for high in high_kinds:
                if low is exp.GTE and high is exp.LTE:
                    continue  # that is the BETWEEN itself
                new = exp.Paren(this=exp.and_(
                    low(this=node.this.copy(), expression=node.args["low"].copy()),
                    high(this=node.this.copy(), expression=node.args["high"].copy()), copy=False))
                yield note(node, new), put(tree, i, new)


def like_pattern(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A LIKE pattern anchored or loosened: ``'%x%'`` -> ``'x%'`` and ``'%x'``; ``'x%'`` -> ``'%x%'``; ..."""
    for i, node in positions(tree, exp.Like):
        if not is_text(node.expression):
            continue
        pattern = text_of(node.expression)
        core = pattern.strip("%")
        if not core:
            continue
        for changed in dict.fromkeys((f"{core}%", f"%{core}", f"%{core}%", core)):
            if changed != pattern:
                new = exp.Like(this=node.this.copy(), expression=exp.Literal.string(changed))
                yield note(node, new), put(tree, i, new)


def like_equals_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x LIKE '%v%'`` -> ``x = 'v'``, and ``x = 'v'`` -> ``x LIKE 'v'`` (case-insensitive in SQLite)."""
    for i, node in positions(tree, exp.Like, exp.EQ):
        if not is_text(node.expression) or not filtering(node):
            continue
        text = text_of(node.expression)
        if isinstance(node, exp.Like):
            new: exp.Expr = exp.EQ(this=node.this.copy(), expression=exp.Literal.string(text.strip("%")))
        else:
            new = exp.Like(this=node.this.copy(), expression=exp.Literal.string(text))
        yield note(node, new), put(tree, i, new)


def _negation_toggled(tree: exp.Expr, kind: type[exp.Expr]) -> Iterator[Edit]:
    for i, node in positions(tree, kind):
        if isinstance(node.parent, exp.Not):
            continue  # the NOT is handled below, at its own position
        new = exp.Not(this=node.copy())
        yield note(node, new), put(tree, i, new)
    for i, node in positions(tree, exp.Not):
        if isinstance(node.this, kind):
            inner = node.this
            yield note(node, inner), put(tree, i, inner)


def in_negated(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _negation_toggled(tree, exp.In)


def exists_negated(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _negation_toggled(tree, exp.Exists)


def null_test_negated(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _negation_toggled(tree, exp.Is)
