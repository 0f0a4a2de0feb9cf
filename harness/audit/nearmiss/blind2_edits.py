"""The families of harness/audit/nearmiss/blind2.py that rewrite a SELECT's grouping, the sides of a set operation or a
subquery, and what the families share: conditions as lists, the schema's keys and NOT NULLs, which columns a
SELECT's grouping determines. Each family yields ``(note, edited tree)``, one edit each, as nearmiss/edits.py's do."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from sqlglot import exp

from harness.audit.nearmiss.context import AGGREGATES, COMPARISONS, Context, join_key, positions, put, sources
from harness.audit.nearmiss.edits import Edit, note

Key = tuple[str, str]  # (the alias or table name a column is read through, the column), lower-cased
_REJECTING = (*COMPARISONS, exp.Like, exp.In, exp.Between)  # conditions that are never true for a NULL operand


# --- what the families share ------------------------------------------------------------------------------------

def conjuncts(cond: exp.Expr | None) -> list[exp.Expr]:
    """The AND-operands of a condition (not through parentheses); none for None."""
    if cond is None:
        return []
    return conjuncts(cond.this) + conjuncts(cond.expression) if isinstance(cond, exp.And) else [cond]


def joined(conds: list[exp.Expr]) -> exp.Expr | None:
    """The AND of copies of ``conds`` (an OR among them parenthesized), None for none."""
    return exp.and_(*[c.copy() for c in conds]) if conds else None


def where_of(select: exp.Expr) -> exp.Expr | None:
    where = select.args.get("where")
    return where.this if where is not None else None


def set_where(select: exp.Expr, conds: list[exp.Expr]) -> exp.Expr:
    """``select`` (edited in place) with its WHERE made the AND of ``conds`` (dropped for none)."""
    cond = joined(conds)
    select.set("where", exp.Where(this=cond) if cond is not None else None)
    return select


def edited(node: exp.Expr, **args: object) -> exp.Expr:
    """A copy of ``node`` with its arguments ``args`` set (None removes one)."""
    new = node.copy()
    for key, value in args.items():
        new.set(key, value)
    return new


def plain(select: exp.Expr) -> bool:
    """A SELECT without GROUP BY, HAVING, ORDER BY, LIMIT or OFFSET."""
    return isinstance(select, exp.Select) and not any(select.args.get(k) for k in ("group", "having", "order", "limit", "offset"))


def _pragma(ctx: Context, what: str, name: str) -> list[tuple]:
    if ctx.conn is None:
        return []
    try:
        return ctx.conn.execute(f'PRAGMA {what}("{name.replace(chr(34), chr(34) * 2)}")').fetchall()
    except sqlite3.Error:
        return []


def keys(ctx: Context, table: str) -> list[frozenset[str]]:
    """The declared keys of a table (its primary key, its unique indexes), each a set of lower-cased columns."""
    info = _pragma(ctx, "table_info", table)
    out = [frozenset(r[1].lower() for r in info if r[5])]
    out += [frozenset(str(r[2]).lower() for r in _pragma(ctx, "index_info", row[1]))
            for row in _pragma(ctx, "index_list", table) if row[2]]
    return [k for k in out if k]


def nullable(ctx: Context, column: exp.Column) -> bool:
    """Whether the schema lets ``column`` hold NULL (True without a database, or when its table is unknown)."""
    table = ctx.table_of(column)
    rows = [r for r in _pragma(ctx, "table_info", table) if r[1].lower() == column.name.lower()] if table else []
    return not rows or not (rows[0][3] or rows[0][5])


def null_rejected(select: exp.Expr | None, column: exp.Expr, besides: exp.Expr | None = None) -> bool:
    """Whether a condition of ``select``'s WHERE or of an inner JOIN's ON (other than ``besides``) already keeps
    out the rows where ``column`` is NULL: a comparison, LIKE, IN or BETWEEN of it, or its IS NOT NULL."""
    if select is None:
        return False
    conds = conjuncts(where_of(select))
    for join in select.args.get("joins") or []:
        conds += [] if join.side else conjuncts(join.args.get("on"))
    text = column.sql()
    for cond in conds:
        if cond is besides:
            continue
        if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is) and cond.this.this.sql() == text:
            return True
        cond = cond.this if isinstance(cond, exp.Not) else cond
        if isinstance(cond, _REJECTING) and text in (cond.this.sql(), cond.expression.sql() if isinstance(cond, COMPARISONS) else ""):
            return True
    return False


def column_key(ctx: Context, select: exp.Expr, column: exp.Expr) -> Key | None:
    """Which table of ``select`` (by its alias) a column reads, or None when that cannot be told."""
    if not isinstance(column, exp.Column):
        return None
    here = [(alias.lower(), table) for alias, table in sources(select)]
    name = column.name.lower()
    if column.table:
        return (column.table.lower(), name) if column.table.lower() in dict(here) else None
    found = [alias for alias, table in here if len(here) == 1 or ctx.schema.has(table, name)]
    return (found[0], name) if len(found) == 1 else None


def closure(ctx: Context, select: exp.Expr, start: set[Key], by_keys: bool = True) -> set[Key]:
    """The columns ``start`` determines in ``select``: along its ON and WHERE equalities of columns and
    (``by_keys``) every column of a table once one of its declared keys is determined."""
    pairs = []
    for cond in [j.args.get("on") for j in select.args.get("joins") or []] + [where_of(select)]:
        for c in conjuncts(cond):
            a, b = (column_key(ctx, select, c.this), column_key(ctx, select, c.expression)) if isinstance(c, exp.EQ) else (None, None)
            if a and b:
                pairs += [(a, b), (b, a)]
    closed, changed = set(start), True
    while changed:
        before = len(closed)
        closed |= {b for a, b in pairs if a in closed}
        for alias, table in [(a.lower(), t) for a, t in sources(select)] if by_keys else []:
            if any(k <= {c for al, c in closed if al == alias} for k in keys(ctx, table)):
                closed |= {(alias, c.lower()) for c in ctx.schema.table_columns(table)}
        changed = len(closed) != before
    return closed


def bare_selected(select: exp.Expr) -> list[exp.Column]:
    return [e for e in select.expressions if isinstance(e, exp.Column) and not isinstance(e.this, exp.Star)]


# --- grouping --------------------------------------------------------------------------------------------------

def group_by_shown_column(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``GROUP BY key`` made ``GROUP BY c`` for a column c the SELECT shows bare (the entity grouped by its name);
    not where c and the key determine each other (ON equalities, declared keys)."""
    for i, select in positions(tree, exp.Select):
        group = select.args.get("group")
        if group is None or len(group.expressions) != 1 or not isinstance(group.expressions[0], exp.Column):
            continue
        k = group.expressions[0]
        kk = column_key(ctx, select, k)
        for c in bare_selected(select):
            ck = column_key(ctx, select, c)
            if c.sql() == k.sql() or (ck and kk and ck in closure(ctx, select, {kk}) and kk in closure(ctx, select, {ck})):
                continue
            yield f"GROUP BY {k.sql()} -> GROUP BY {c.sql()}", put(tree, i, edited(select, group=exp.Group(expressions=[c.copy()])))


def group_by_selected_added(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A column the SELECT shows bare added to its GROUP BY where the grouping does not determine it (by the
    database's declared keys and the query's equalities): the groups split by its values."""
    if ctx.conn is None:
        return
    for i, select in positions(tree, exp.Select):
        group = select.args.get("group")
        start = {column_key(ctx, select, g) for g in group.expressions} if group is not None else {None}
        if group is None or None in start:
            continue
        closed = closure(ctx, select, {k for k in start if k})
        for c in bare_selected(select):
            if column_key(ctx, select, c) in closed | {None}:
                continue
            new = edited(select, group=exp.Group(expressions=[g.copy() for g in group.expressions] + [c.copy()]))
            yield f"+ GROUP BY {c.sql()}", put(tree, i, new)


def having_pushed_to_where(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``HAVING agg(c) op v`` (sum, avg, max, min) made ``WHERE c op v``: the rows filtered, not the groups; not
    where that keeps the same groups and nothing else is aggregated (max above v, min below v)."""
    for i, select in positions(tree, exp.Select):
        having = select.args.get("having")
        whole = conjuncts(having.this if having is not None else None)
        for cond in whole:
            agg = cond.this if isinstance(cond, COMPARISONS) else None
            if (not isinstance(agg, (exp.Sum, exp.Avg, exp.Max, exp.Min)) or not isinstance(agg.this, exp.Column)
                    or not isinstance(cond.expression, (exp.Literal, exp.Neg))):
                continue
            rest = [c for c in whole if c is not cond]
            others = [a.sql() for part in [*select.expressions, select.args.get("order"), *rest] if part is not None
                      for a in part.find_all(*AGGREGATES)]
            if ((isinstance(agg, exp.Max) and isinstance(cond, (exp.GT, exp.GTE))) or (
                    isinstance(agg, exp.Min) and isinstance(cond, (exp.LT, exp.LTE)))) and all(a == agg.sql() for a in others):
                continue
            pushed = type(cond)(this=agg.this.copy(), expression=cond.expression.copy())
            new = edited(select, having=exp.Having(this=joined(rest)) if rest else None)
            yield note(cond, pushed), put(tree, i, set_where(new, conjuncts(where_of(new)) + [pushed]))


def above_average_as_having(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``WHERE c op (SELECT avg(c) FROM t)`` (sum, max, min) of an ungrouped SELECT of columns made ``GROUP BY <its
    columns> HAVING c op avg(c)``: the aggregate taken within each group, not over the table."""
    for i, select in positions(tree, exp.Select):
        shown = bare_selected(select)
        if select.args.get("group") or not shown or len(shown) != len(select.expressions):
            continue
        conds = conjuncts(where_of(select))
        for cond in conds:
            sub = cond.expression if isinstance(cond, COMPARISONS) else None
            inner = sub.this if isinstance(sub, exp.Subquery) else None
            if (not isinstance(cond.this, exp.Column) or not isinstance(inner, exp.Select) or not plain(inner)
                    or where_of(inner) is not None or inner.args.get("joins") or len(inner.expressions) != 1
                    or not isinstance(inner.expressions[0], (exp.Avg, exp.Max, exp.Min, exp.Sum))):
                continue
            having = type(cond)(this=cond.this.copy(), expression=type(inner.expressions[0])(this=cond.this.copy()))
            new = edited(select, group=exp.Group(expressions=[c.copy() for c in shown]), having=exp.Having(this=having))
            yield note(cond, having), put(tree, i, set_where(new, [c for c in conds if c is not cond]))


def group_argmax_with_ties(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``GROUP BY g ORDER BY agg LIMIT 1`` made ``GROUP BY g HAVING agg = (SELECT agg ... GROUP BY g ORDER BY agg
    LIMIT 1) ORDER BY agg``: every group tied for the most (the least), not one of them."""
    for i, select in positions(tree, exp.Select):
        order, limit = select.args.get("order"), select.args.get("limit")
        if (not select.args.get("group") or order is None or limit is None or len(order.expressions) != 1
                or select.args.get("offset") or limit.expression.sql() != "1" or not isinstance(order.expressions[0].this, AGGREGATES)):
            continue
        key = order.expressions[0].this
        cond = exp.EQ(this=key.copy(), expression=exp.Subquery(this=edited(select, expressions=[key.copy()], distinct=None)))
        having = select.args.get("having")
        new = edited(select, having=exp.Having(this=joined(conjuncts(having.this if having else None) + [cond])), limit=None)
        yield f"LIMIT 1 -> HAVING {key.sql()} = (... LIMIT 1)", put(tree, i, new)


# --- set operations ----------------------------------------------------------------------------------------------

def _requalified(cond: exp.Expr, side: exp.Select, rename: dict[str, str], bare: bool) -> exp.Expr | None:
    """``cond`` of one side with its columns named by ``rename`` (alias -> alias), its unqualified ones too when
    ``bare`` (the side reads one table); None when a column cannot be named so."""
    out = cond.copy()
    only = sources(side)[0][0].lower() if len(sources(side)) == 1 else None
    for column in list(out.find_all(exp.Column)):
        if isinstance(column.this, exp.Star) or (column.this.quoted and not column.table) or (not column.table and not bare):
            continue  # a double-quoted name is a text, as Spider's golds write them
        alias = column.table.lower() if column.table else only
        if alias not in rename:
            return None
        column.set("table", exp.to_identifier(rename[alias]))
    return out


def _shown(side: exp.Select, rename: dict[str, str]) -> str | None:
    made = _requalified(exp.Tuple(expressions=[e.copy() for e in side.expressions]), side, rename, len(sources(side)) == 1)
    return made.sql().lower() if made is not None else None


def _aliased(side: exp.Select, alias: str) -> exp.Expr:
    return edited(side.args["from_"].this, alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _sides(node: exp.Expr) -> tuple[exp.Select, exp.Expr | None, exp.Expr | None, str] | None:
    """The two plain SELECTs of a set operation as one join: (that join, the left side's condition and the right
    side's in its aliases, how: "same" tables, the wider side "left" or "right", or two one-table sides "joined"
    on the one column each shows); None when they cannot be."""
    left, right = node.this, node.expression
    if not (plain(left) and plain(right)):
        return None
    names = [[t.lower() for _a, t in sources(s)] for s in (left, right)]
    if any(not n or len(set(n)) != len(n) for n in names):
        return None
    conds = [where_of(left), where_of(right)]
    if set(names[0]) <= set(names[1]) or set(names[1]) <= set(names[0]):
        wide_left = set(names[1]) <= set(names[0])
        wide, narrow = (left, right) if wide_left else (right, left)
        rename = {a.lower(): next(w for w, t in sources(wide) if t.lower() == n.lower()) for a, n in sources(narrow)}
        if _shown(narrow, rename) is None or _shown(narrow, rename) != _shown(wide, {a.lower(): a for a, _t in sources(wide)}):
            return None
        k = 1 if wide_left else 0
        narrow_cond = conds[k]
        if narrow_cond is not None:
            conds[k] = _requalified(narrow_cond, narrow, rename, len(names[0]) != len(names[1]))
            if conds[k] is None:
                return None
        return wide, conds[0], conds[1], "same" if len(names[0]) == len(names[1]) else "left" if wide_left else "right"
    shown = [s.expressions[0] for s in (left, right) if len(s.expressions) == 1 and isinstance(s.expressions[0], exp.Column)]
    if len(names[0]) != 1 or len(names[1]) != 1 or len(shown) != 2:
        return None
    renames = [{sources(s)[0][0].lower(): alias} for s, alias in ((left, "T1"), (right, "T2"))]
    ons = [_requalified(c, s, r, True) for c, s, r in zip(shown, (left, right), renames)]
    made = [_requalified(c, s, r, True) if c is not None else None for c, s, r in zip(conds, (left, right), renames)]
    if ons[0] is None or ons[1] is None or any(m is None and c is not None for m, c in zip(made, conds)):
        return None
    both = exp.Select(expressions=[ons[0]], from_=exp.From(this=_aliased(left, "T1")),
                      joins=[exp.Join(this=_aliased(right, "T2"), on=exp.EQ(this=ons[0].copy(), expression=ons[1]))])
    return both, made[0], made[1], "joined"


def _negated(cond: exp.Expr) -> exp.Expr:
    if isinstance(cond, exp.EQ):
        return exp.NEQ(this=cond.this.copy(), expression=cond.expression.copy())
    return exp.Not(this=exp.Paren(this=cond.copy()))


def except_as_negated_join(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``A EXCEPT B`` made one join of their tables (B's, or A's and B's on the columns they show) with A's condition
    and B's negated (``= v`` made ``<> v``; without one, B's last ON): the rows with another match, not without one."""
    for i, node in positions(tree, exp.Except):
        found = _sides(node)
        if found is None or found[3] in ("same", "left"):
            continue
        wide, left_cond, right_cond, _how = found
        new = set_where(wide.copy(), conjuncts(left_cond) + ([_negated(right_cond)] if right_cond is not None else []))
        last = new.args["joins"][-1]
        if right_cond is None and not isinstance(last.args.get("on"), exp.EQ):
            continue
        if right_cond is None:
            last.set("on", _negated(last.args["on"]))
        yield f"EXCEPT -> {_negated(right_cond).sql() if right_cond is not None else last.sql()}", put(tree, i, new)


def intersect_as_either(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``A INTERSECT B`` made one SELECT (on one join of their tables) with A's condition OR B's (``c IN (v, w)``
    for two values of one column): the rows meeting either, not both."""
    for i, node in positions(tree, exp.Intersect):
        found = _sides(node)
        if found is None or found[1] is None or found[2] is None:
            continue
        wide, a, b = found[0], conjuncts(found[1]), conjuncts(found[2])
        common = [c for c in a if c.sql() in {d.sql() for d in b}]
        rest_a, rest_b = ([c for c in side if c.sql() not in {d.sql() for d in common}] for side in (a, b))
        if not rest_a or not rest_b:
            continue
        x, y = rest_a[0], rest_b[0]
        either: exp.Expr = exp.Paren(this=exp.Or(this=joined(rest_a), expression=joined(rest_b)))
        if (len(rest_a) == len(rest_b) == 1 and isinstance(x, exp.EQ) and isinstance(y, exp.EQ)
                and x.this.sql() == y.this.sql() and not join_key(x) and not join_key(y)):
            either = exp.In(this=x.this.copy(), expressions=[x.expression.copy(), y.expression.copy()])
        yield f"INTERSECT -> {either.sql()}", put(tree, i, set_where(wide.copy(), common + [either]))


def set_sides_on_one_join(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``A UNION B`` / ``A INTERSECT B`` of different tables made one join of them (the wider side's, or on the
    columns they show) with the conditions ORed / ANDed: the rows without a match lost."""
    for i, node in positions(tree, exp.Union, exp.Intersect):
        found = _sides(node)
        if found is None or found[3] == "same":
            continue
        conds = [c for c in found[1:3] if isinstance(c, exp.Expr)]
        if len(conds) < 2 and (isinstance(node, exp.Union) or found[3] != "joined"):
            continue  # that would be one side alone
        both: list[exp.Expr] = [exp.Paren(this=exp.Or(this=conds[0].copy(), expression=conds[1].copy()))] if isinstance(
            node, exp.Union) else conds
        new = set_where(found[0].copy(), both)
        yield f"{node.key.upper()} -> {new.sql()[:60]}", put(tree, i, new)


# --- subqueries ------------------------------------------------------------------------------------------------

def subquery_column_captured(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x IN (SELECT k FROM u ...)`` with k named otherwise made ``x IN (SELECT x FROM u ...)``: k written with
    the outer column's name, which SQLite reads from the outer row where u has no such column."""
    for i, node in positions(tree, exp.In):
        query = node.args.get("query")
        inner = query.this if isinstance(query, exp.Subquery) else None
        if (not isinstance(node.this, exp.Column) or not isinstance(inner, exp.Select)
                or len(inner.expressions) != 1 or not isinstance(inner.expressions[0], exp.Column)):
            continue
        k, named = inner.expressions[0], exp.column(node.this.name, quoted=node.this.this.quoted)
        kk, nk = column_key(ctx, inner, k), column_key(ctx, inner, named)
        if k.name.lower() == node.this.name.lower() or (kk and nk and nk in closure(ctx, inner, {kk}, False)) or (
                nk is None and ctx.conn is None and len(sources(inner)) > 1):
            continue  # the name reads a column of the subquery equal to k (or, without the schema, may)
        new = exp.In(this=node.this.copy(), query=exp.Subquery(this=edited(inner, expressions=[named])))
        yield f"{k.sql()} -> {node.this.name}", put(tree, i, new)


def subquery_aggregate_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``c op (SELECT max(x) FROM ...)`` (or min) made ``c op (SELECT x FROM ...)``: compared with the first row's
    value, not the extreme of all of them."""
    for i, node in positions(tree, exp.Subquery):
        inner = node.this
        if (not isinstance(node.parent, COMPARISONS) or not isinstance(inner, exp.Select) or inner.args.get("group")
                or len(inner.expressions) != 1 or not isinstance(inner.expressions[0], (exp.Max, exp.Min))):
            continue
        new = edited(inner, expressions=[inner.expressions[0].this.copy()])
        yield note(inner.expressions[0], new.expressions[0]), put(tree, i, exp.Subquery(this=new))
