"""The near-miss families that read the database: its values, its columns, its foreign keys.

Generators ``family(tree, ctx)`` of ``(note, edited tree)`` as in harness/audit/nearmiss/edits.py; each
gives nothing without a database (``ctx.conn`` None), except :func:`join_dropped`, which needs none.
Where a family could give many edits at one place (every other column of a table), it gives the
first :data:`PER_PLACE` in the table's declared order, so a wide table does not drown the rest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

from sqlglot import exp

from harness.audit.nearmiss.context import (
    AGGREGATES,
    COMPARISONS,
    Context,
    clause,
    edit_at,
    filtering,
    is_number,
    is_text,
    join_key,
    literal,
    owning_select,
    positions,
    put,
    render,
    scope_tables,
    set_arg,
    sources,
    text_of,
)
from harness.audit.nearmiss.edits import Edit, note

PER_PLACE = 3  # other columns tried in one place (the table's declared order)
MAX_VALUES = 50  # an IN (subquery) is replaced by its values up to this many


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _compared_column(node: exp.Expr) -> exp.Column | None:
    """The column a literal is compared with (``col < 5``, ``col BETWEEN 1 AND 5``, ``col IN (1, 2)``; a LIKE
    pattern is no value of its column)."""
    parent = node.parent
    if isinstance(parent, exp.Neg):
        node, parent = parent, parent.parent
    if isinstance(parent, (*COMPARISONS, exp.Between, exp.In)):
        other = parent.this if node is not parent.this else parent.args.get("expression")
        if isinstance(other, exp.Column) and not is_text(other):
            return other
    return None


def _neighbours(ctx: Context, column: exp.Column, value: object) -> list[object]:
    """The column's greatest value below ``value`` and least above it, on the database (SQLite's ordering)."""
    table = ctx.table_of(column)
    if table is None or not ctx.schema.has(table, column.name):
        return []
    name, source = _quoted(column.name), _quoted(table)
    out = []
    for sql in (f"SELECT max({name}) FROM {source} WHERE {name} < ?",
                f"SELECT min({name}) FROM {source} WHERE {name} > ?"):
        rows = ctx.rows(sql, (value,))
        if rows and rows[0][0] is not None:
            out.append(rows[0][0])
    return out


def _literal_value(node: exp.Expr) -> object:
    if is_text(node):
        return text_of(node)
    text = str(node.this)
    try:
        value: object = int(text)
    except ValueError:
        value = float(text)
    return -value if isinstance(node.parent, exp.Neg) else value  # type: ignore[operator]


def _replace_literal(tree: exp.Expr, ctx: Context, numbers: bool) -> Iterator[Edit]:
    if ctx.conn is None:
        return
    for i, node in positions(tree, exp.Literal, exp.Column):
        if not filtering(node) or not (is_number(node) if numbers else is_text(node)):
            continue
        column = _compared_column(node)
        if column is None:
            continue
        try:
            value = _literal_value(node)
        except ValueError:
            continue
        if isinstance(node.parent, exp.Neg):
            continue  # a negative number: its sign sits on the parent
        for other in _neighbours(ctx, column, value):
            if numbers and _one_apart(other, value):
                continue  # number_shifted's edit
            new = literal(other)
            yield note(node, new), put(tree, i, new)


def _one_apart(a: object, b: object) -> bool:
    try:
        return abs(float(a) - float(b)) == 1  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def number_neighbour(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _replace_literal(tree, ctx, numbers=True)


def text_replaced(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _replace_literal(tree, ctx, numbers=False)


def subquery_value(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A scalar subquery made its value on the database; ``x IN (subquery)`` made ``x IN (its values)``.

    Only a subquery that runs alone (not correlated with its outer query) is replaced; an IN whose
    subquery gives no row or more than MAX_VALUES is left alone."""
    if ctx.conn is None:
        return
    for i, node in positions(tree, exp.Subquery, exp.In):
        if isinstance(node, exp.In):
            query = node.args.get("query")
            if query is None:
                continue
            inner = query.this if isinstance(query, exp.Subquery) else query
            rows = ctx.rows(render(inner), limit=MAX_VALUES + 1)
            if not rows or len(rows) > MAX_VALUES or len(rows[0]) != 1:
                continue
            values = list(dict.fromkeys(r[0] for r in rows))
            new: exp.Expr = exp.In(this=node.this.copy(), expressions=[literal(v) for v in values])
            yield note(node, new), put(tree, i, new)
        elif isinstance(node.parent, (*COMPARISONS, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Between, exp.Paren)):
            rows = ctx.rows(render(node.this), limit=2)
            if rows is None or len(rows) > 1 or (rows and len(rows[0]) != 1):
                continue
            new = literal(rows[0][0]) if rows else exp.Null()
            yield note(node, new), put(tree, i, new)


def _other_columns(ctx: Context, column: exp.Column, prefer: list[str], same_affinity: bool) -> list[str]:
    """Up to PER_PLACE other columns of the column's table: those in ``prefer`` first, then declared order
    (``same_affinity``: only those of the column's type affinity)."""
    table = ctx.table_of(column)
    if table is None or not ctx.schema.has(table, column.name):
        return []
    names = ctx.schema.table_columns(table)
    ranked = [n for n in prefer if n in names] + list(names)
    out = [n for n in dict.fromkeys(ranked) if n.lower() != column.name.lower()]
    if same_affinity:
        kind = _affinity_class(ctx.schema.affinity(table, column.name))
        out = [n for n in out if _affinity_class(ctx.schema.affinity(table, n)) == kind]
    return out[:PER_PLACE]


def _affinity_class(affinity: str) -> str:
    """Numbers (INTEGER, REAL, NUMERIC) as one class; TEXT and BLOB (no declared type) as themselves."""
    return "number" if affinity in ("INTEGER", "REAL", "NUMERIC") else affinity


def _column_swaps(tree: exp.Expr, ctx: Context, wanted: Callable[[exp.Column], bool],
                  same_affinity: bool = False) -> Iterator[Edit]:
    """Each column ``wanted`` says is one to swap, replaced by each of its table's other columns (PER_PLACE)."""
    if ctx.conn is None:
        return
    for i, node in positions(tree, exp.Column):
        if not isinstance(node, exp.Column) or is_text(node) or not wanted(node):
            continue
        select = owning_select(node)
        selected = [c.name for c in (select.expressions if select is not None else []) if isinstance(c, exp.Column)]
        for name in _other_columns(ctx, node, selected, same_affinity):
            new = exp.column(name, table=node.table or None)
            yield note(node, new), put(tree, i, new)


def _selected(column: exp.Column) -> bool:
    """A plain column of a SELECT list (not inside an expression or an aggregate)."""
    return clause(column) == "select" and isinstance(column.parent, (exp.Select, exp.Alias))


def _aggregated(column: exp.Column) -> bool:
    """The column an aggregate reads (``avg(salary)``, ``count(DISTINCT name)``), wherever the aggregate is."""
    parent = column.parent.parent if isinstance(column.parent, exp.Distinct) else column.parent
    return isinstance(parent, AGGREGATES)


def _compared(column: exp.Column) -> bool:
    """The column of a WHERE condition that compares it with a value (``age > 40``, ``name LIKE 'a%'``)."""
    parent = column.parent
    return (clause(column) == "where" and isinstance(parent, (*COMPARISONS, exp.Like, exp.Between, exp.In))
            and parent.this is column and not join_key(parent))


def column_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _column_swaps(tree, ctx, _selected)


def aggregate_column_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _column_swaps(tree, ctx, _aggregated, same_affinity=True)


def condition_column_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _column_swaps(tree, ctx, _compared, same_affinity=True)


def order_key_changed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _column_swaps(tree, ctx, lambda c: isinstance(c.parent, exp.Ordered))


def group_key_changed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    yield from _column_swaps(tree, ctx, lambda c: clause(c) == "group")


def join_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One JOIN dropped with its ON; a column that named the dropped table re-pointed along the ON's equality
    (``T2.id`` -> ``T1.owner_id`` for ``ON T1.owner_id = T2.id``), else to the kept table holding that name."""
    for i, node in positions(tree, exp.Select):
        joins = node.args.get("joins") or []
        for k, join in enumerate(joins):
            if not isinstance(join.this, exp.Table):
                continue
            gone = (join.this.alias or join.this.name).lower()
            yield f"JOIN {render(join.this)} dropped", edit_at(
                tree, i, functools.partial(_drop_join, k=k, gone=gone, ctx=ctx))


def _drop_join(select: exp.Expr, k: int, gone: str, ctx: Context) -> exp.Expr:
    join = select.args["joins"][k]
    pairs: dict[str, exp.Column] = {}
    on = join.args.get("on")
    for eq in (on.find_all(exp.EQ) if on is not None else []):
        left, right = eq.this, eq.expression
        if isinstance(left, exp.Column) and isinstance(right, exp.Column):
            if left.table.lower() == gone and right.table.lower() != gone:
                pairs[left.name.lower()] = right
            elif right.table.lower() == gone and left.table.lower() != gone:
                pairs[right.name.lower()] = left
    join.pop()
    kept = scope_tables(select)
    for column in list(select.find_all(exp.Column)):
        if owning_select(column) is not select or column.table.lower() != gone:
            continue
        if column.name.lower() in pairs:
            column.replace(pairs[column.name.lower()].copy())
            continue
        holders = sorted({alias for alias, table in kept.items() if ctx.schema.has(table, column.name)})
        if holders:
            column.set("table", exp.to_identifier(holders[0]))
    return select


def join_added(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A table joined along a declared foreign key of a table the SELECT reads (at most PER_PLACE a SELECT):
    each row repeated once per matching row, or dropped where none matches."""
    if ctx.conn is None:
        return
    for i, node in positions(tree, exp.Select):
        tables = sources(node)
        read = {table.lower() for _q, table in tables}
        made = 0
        for table, column, parent, parent_column in ctx.schema.foreign_keys:
            if made >= PER_PLACE:
                break
            if table.lower() in read and parent.lower() not in read:
                mine, other, my_column, other_column = table, parent, column, parent_column
            elif parent.lower() in read and table.lower() not in read:
                mine, other, my_column, other_column = parent, table, parent_column, column
            else:
                continue
            alias = next(q for q, t in tables if t.lower() == mine.lower())
            on = exp.EQ(this=exp.column(my_column, table=alias), expression=exp.column(other_column, table=other))
            join = exp.Join(this=exp.to_table(other), on=on)
            made += 1
            yield f"+ JOIN {other} ON {render(on)}", edit_at(tree, i, functools.partial(_add_join, join=join))


def _add_join(select: exp.Expr, join: exp.Expr) -> exp.Expr:
    select.set("joins", list(select.args.get("joins") or []) + [join.copy()])
    return select


def join_key_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A JOIN's ON ``a.x = b.y`` made another declared foreign key between the same two tables."""
    if ctx.conn is None:
        return
    for i, node in positions(tree, exp.Join):
        on = node.args.get("on")
        select = owning_select(node)
        if not isinstance(on, exp.EQ) or select is None:
            continue
        left, right = on.this, on.expression
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            continue
        scope = scope_tables(select)
        lt, rt = scope.get(left.table.lower()), scope.get(right.table.lower())
        if lt is None or rt is None:
            continue
        current = {(lt.lower(), left.name.lower(), rt.lower(), right.name.lower()),
                   (rt.lower(), right.name.lower(), lt.lower(), left.name.lower())}
        for table, column, parent, parent_column in ctx.schema.foreign_keys:
            key = (table.lower(), column.lower(), parent.lower(), parent_column.lower())
            if key in current or {table.lower(), parent.lower()} != {lt.lower(), rt.lower()}:
                continue
            if table.lower() == lt.lower():
                new_left, new_right = column, parent_column
            else:
                new_left, new_right = parent_column, column
            new = exp.EQ(this=exp.column(new_left, table=left.table or None),
                         expression=exp.column(new_right, table=right.table or None))
            yield note(on, new), edit_at(tree, i, functools.partial(set_arg, key="on", value=new))


def _set_on(join: exp.Expr, on: exp.Expr) -> exp.Expr:
    join.set("on", on.copy())
    return join
