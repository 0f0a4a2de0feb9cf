"""The blind near-miss families that reshape the gold's subqueries and joins (harness/audit/nearmiss/blind.py collects them).

Generators ``family(tree, ctx)`` of ``(note, edited tree)``, as in harness/audit/nearmiss/edits.py. Each is a
rewrite a writer takes for the gold and is not: a semi-join written as a join repeats rows, a join written
as a semi-join does not; ``NOT IN`` written as ``NOT EXISTS`` parts from it once the subquery gives a NULL;
"has no c" written as a join on "some non-c"; a column read from the other table of a join; a join on the
wrong pair of keys, or on none; a key looked up by hand; a filter shared with a subquery or not.

>>> import sqlglot
>>> from harness.audit.nearmiss.context import Context, render
>>> tree = sqlglot.parse_one("SELECT name FROM Owner WHERE owner_id IN (SELECT owner_id FROM Pet)", read="sqlite")
>>> [render(t) for _, t in in_as_join(tree, Context(None))]
['SELECT Owner.name FROM Owner JOIN Pet ON Owner.owner_id = Pet.owner_id']
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from harness.audit.nearmiss.context import (
    Context,
    clause,
    is_text,
    join_key,
    literal,
    owning_select,
    positions,
    render,
    scope_tables,
    sources,
)
from harness.audit.nearmiss.edits import Edit, note

PER_PLACE = 3  # edits tried at one place (other tables, other key pairs)


def cut(node: exp.Expr) -> str:
    """The node as SQLite, cut to 50 characters (for a note)."""
    text = render(node)
    return text if len(text) <= 50 else text[:47] + "..."


def copy_at(tree: exp.Expr, position: int) -> tuple[exp.Expr, exp.Expr]:
    """A copy of ``tree`` and its node at ``position`` (the walk of a copy visits the same nodes in order)."""
    copy = tree.copy()
    return copy, list(copy.walk())[position]


def conjuncts(select: exp.Expr) -> list[exp.Expr]:
    """The AND-conditions of a SELECT's WHERE (none without one)."""
    where = select.args.get("where")
    if where is None:
        return []
    return list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]


def set_where(select: exp.Expr, conditions: list[exp.Expr]) -> None:
    """The SELECT's WHERE made the AND of copies of ``conditions`` (dropped when there is none)."""
    made = exp.and_(*[c.copy() for c in conditions], copy=False) if conditions else None
    select.set("where", exp.Where(this=made) if made is not None else None)


def top_conjunct(node: exp.Expr) -> exp.Select | None:
    """The SELECT whose WHERE has ``node`` as one of its AND-conditions, or None."""
    select = owning_select(node)
    if select is None or not any(c is node for c in conjuncts(select)):
        return None
    return select


def own_columns(select: exp.Expr) -> list[exp.Column]:
    """The columns that belong to ``select`` itself (not to its subqueries), string-like names left out."""
    return [c for c in select.find_all(exp.Column) if owning_select(c) is select and not is_text(c)]


def _aliases(select: exp.Expr) -> set[str]:
    return {e.alias.lower() for e in select.expressions if isinstance(e, exp.Alias)}


def qualify_single(select: exp.Expr) -> bool:
    """Qualifies the unqualified columns of a one-table SELECT with its table's name or alias (in place);
    False when it reads several tables (then only its own qualified columns are certain)."""
    read = sources(select)
    if len(read) != 1:
        return len(read) > 1
    names = _aliases(select)
    for column in own_columns(select):
        if not column.table and column.name.lower() not in names:
            column.set("table", exp.to_identifier(read[0][0]))
    return True


def adopt(inner: exp.Select, taken: set[str], ctx: Context) -> bool:
    """Makes a subquery's tables movable into an outer SELECT whose names are ``taken`` (in place): each table
    whose name clashes gets a fresh alias, each of the subquery's own columns is qualified. False when a
    column's table cannot be told (several tables, no database) or the subquery reads anything but tables."""
    read = sources(inner)
    froms = [inner.args.get("from_")] + list(inner.args.get("joins") or [])
    if not read or len(read) != len(froms):
        return False
    renamed: dict[str, str] = {}
    used = set(taken) | {q.lower() for q, _t in read}
    for n, (qualifier, _table) in enumerate(read):
        new = qualifier
        if qualifier.lower() in taken:
            new = next(f"S{k}" for k in range(n + 1, n + 100) if f"s{k}" not in used)
            used.add(new.lower())
            source = froms[n]
            assert source is not None
            source.this.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
        renamed[qualifier.lower()] = new
    for column in own_columns(inner):
        if column.table:
            if column.table.lower() in renamed:
                column.set("table", exp.to_identifier(renamed[column.table.lower()]))
            continue
        if len(read) == 1:
            owner = read[0][0]
        else:
            table = ctx.table_of(column)
            owners = [q for q, t in read if table is not None and t.lower() == table.lower()]
            if len(owners) != 1:
                return False
            owner = owners[0]
        column.set("table", exp.to_identifier(renamed[owner.lower()]))
    return True


def _simple_inner(node: exp.Expr) -> exp.Select | None:
    """The subquery of ``x IN (SELECT k FROM ... [WHERE ...])`` when it is that plain (one column, no grouping)."""
    query = node.args.get("query")
    inner = query.this if isinstance(query, exp.Subquery) else query
    if (not isinstance(inner, exp.Select) or len(inner.expressions) != 1
            or any(inner.args.get(k) for k in ("group", "having", "order", "limit", "offset"))
            or inner.expressions[0].find(exp.AggFunc) is not None):
        return None
    return inner


def _merged(tree: exp.Expr, position: int, ctx: Context, negated: bool) -> exp.Expr | None:
    """The IN (or NOT IN) at ``position``, a condition of its SELECT's WHERE, made a join with its subquery."""
    copy, node = copy_at(tree, position)
    condition = node.parent if negated and node.parent is not None else node
    outer = top_conjunct(condition)
    inner = _simple_inner(node)
    if outer is None or inner is None:
        return None
    qualify_single(outer)
    if not adopt(inner, set(scope_tables(outer)), ctx):
        return None
    key = inner.expressions[0].unalias()
    inner_conditions = conjuncts(inner)
    rest = [c for c in conjuncts(outer) if c is not condition]
    if negated and not inner_conditions:
        on: exp.Expr = exp.NEQ(this=node.this.copy(), expression=key.copy())
    else:
        on = exp.EQ(this=node.this.copy(), expression=key.copy())
    if negated and inner_conditions:
        rest.append(exp.Not(this=exp.Paren(this=exp.and_(*[c.copy() for c in inner_conditions], copy=False))))
    elif not negated:
        rest.extend(inner_conditions)
    joins = [exp.Join(this=inner.args["from_"].this.copy(), on=on)] + [j.copy() for j in inner.args.get("joins") or []]
    outer.set("joins", list(outer.args.get("joins") or []) + joins)
    set_where(outer, rest)
    return copy


def in_as_join(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x IN (SELECT k FROM u WHERE c)`` made ``JOIN u ON x = k WHERE c``: a row once per match."""
    for i, node in positions(tree, exp.In):
        if not isinstance(node.parent, exp.Not):
            made = _merged(tree, i, ctx, negated=False)
            if made is not None:
                yield f"{cut(node)} -> JOIN", made


def not_in_as_join(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x NOT IN (SELECT k FROM u WHERE c)`` made ``JOIN u ON x = k WHERE NOT c`` (no WHERE: ``ON x <> k``):
    "has no c" read as "has some non-c"."""
    for i, node in positions(tree, exp.In):
        if isinstance(node.parent, exp.Not):
            made = _merged(tree, i, ctx, negated=True)
            if made is not None:
                yield f"{cut(node.parent)} -> JOIN ... NOT", made


def not_in_as_not_exists(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x NOT IN (SELECT k FROM u WHERE c)`` made ``NOT EXISTS (SELECT 1 FROM u WHERE c AND k = x)``: the
    two differ once k holds a NULL."""
    for i, node in positions(tree, exp.In):
        if not isinstance(node.parent, exp.Not) or _simple_inner(node) is None:
            continue
        copy, moved = copy_at(tree, i)
        outer, inner = owning_select(moved), _simple_inner(moved)
        if outer is None or inner is None or not qualify_single(outer):
            continue
        if not isinstance(moved.this, exp.Column) or not moved.this.table:
            continue
        if not adopt(inner, set(scope_tables(outer)), ctx):
            continue
        key = inner.expressions[0].unalias()
        inner.set("expressions", [exp.Literal.number(1)])
        set_where(inner, conjuncts(inner) + [exp.EQ(this=key.copy(), expression=moved.this.copy())])
        moved.parent.replace(exp.Not(this=exp.Exists(this=inner.copy())))  # type: ignore[union-attr]
        yield f"{cut(node.parent)} -> NOT EXISTS", copy


def in_as_equals(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``x IN (subquery)`` made ``x = (subquery)``, ``x NOT IN`` made ``x <> (subquery)``: its first row only."""
    for i, node in positions(tree, exp.In):
        query = node.args.get("query")
        if query is None:
            continue
        sub = query if isinstance(query, exp.Subquery) else exp.Subquery(this=query)
        copy, moved = copy_at(tree, i)
        negated = isinstance(node.parent, exp.Not) and isinstance(moved.parent, exp.Not)
        new = (exp.NEQ if negated else exp.EQ)(this=node.this.copy(), expression=sub.copy())
        (moved.parent if negated and moved.parent is not None else moved).replace(new)
        yield f"{cut(node.parent if negated and node.parent is not None else node)} -> {cut(new)}", copy


def join_condition_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One JOIN's ON dropped, its table kept: every pair of rows (``FROM a, b``)."""
    for i, node in positions(tree, exp.Join):
        if node.args.get("on") is not None and not node.args.get("side"):
            copy, moved = copy_at(tree, i)
            moved.set("on", None)
            yield f"ON {cut(node.args['on'])} dropped", copy


def column_table_swapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A qualified column read from another table of its SELECT that has a column of that name (``T1.name`` ->
    ``T2.name``), where no ON or WHERE equates the two."""
    if ctx.conn is None:
        return
    for i, node in positions(tree, exp.Column):
        select = owning_select(node)
        if not isinstance(node, exp.Column) or not node.table or select is None or clause(node) == "on" or is_text(node):
            continue
        equated = {frozenset((render(e.this).lower(), render(e.expression).lower()))
                   for e in select.find_all(exp.EQ) if join_key(e)}
        made = 0
        for qualifier, table in sources(select):
            if made >= PER_PLACE or qualifier.lower() == node.table.lower() or not ctx.schema.has(table, node.name):
                continue
            new = exp.column(node.name, table=qualifier)
            if frozenset((render(node).lower(), render(new).lower())) in equated:
                continue
            made += 1
            copy, moved = copy_at(tree, i)
            moved.replace(new)
            yield note(node, new), copy


def join_on_ids(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A JOIN's ``ON a.x = b.y`` made ``a.id = b.id`` (each table's first column) or an equality of columns of
    the same name (``a.y = b.y``, ``a.x = b.x``); declared foreign keys are left to join_key_swapped."""
    if ctx.conn is None:
        return
    declared = {frozenset(((t.lower(), c.lower()), (p.lower(), pc.lower())))
                for t, c, p, pc in ctx.schema.foreign_keys}
    for i, node in positions(tree, exp.Join):
        on, select = node.args.get("on"), owning_select(node)
        if not isinstance(on, exp.EQ) or not join_key(on) or select is None:
            continue
        left, right = on.this, on.expression
        assert isinstance(left, exp.Column) and isinstance(right, exp.Column)
        scope = scope_tables(select)
        lt, rt = scope.get(left.table.lower()), scope.get(right.table.lower())
        if lt is None or rt is None or lt.lower() == rt.lower():
            continue
        first_l, first_r = ctx.schema.table_columns(lt)[:1], ctx.schema.table_columns(rt)[:1]
        pairs = [(a, b) for a in first_l for b in first_r]
        pairs += [(right.name, right.name)] if ctx.schema.has(lt, right.name) else []
        pairs += [(left.name, left.name)] if ctx.schema.has(rt, left.name) else []
        current = (left.name.lower(), right.name.lower())
        made = 0
        for a, b in dict.fromkeys(pairs):
            key = frozenset(((lt.lower(), a.lower()), (rt.lower(), b.lower())))
            if (a.lower(), b.lower()) == current or key in declared or made >= PER_PLACE:
                continue
            made += 1
            new = exp.EQ(this=exp.column(a, table=left.table), expression=exp.column(b, table=right.table))
            copy, moved = copy_at(tree, i)
            moved.set("on", new)
            yield note(on, new), copy


def join_as_in(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``FROM a JOIN b ON a.x = b.y WHERE c(b)`` made ``FROM a WHERE a.x IN (SELECT b.y FROM b WHERE c(b))``
    where the SELECT reads nothing else of b: each row of a once, however many rows of b it matches."""
    for table, made in _semi_joins(tree, ctx, hardcode=False):
        yield f"JOIN {table} -> IN (SELECT ... FROM {table})", made


def key_hardcoded(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``FROM a JOIN b ON a.x = b.y WHERE b.c = 'v'``, read for a alone, made ``FROM a WHERE a.x = 7``: the key
    of v looked up by hand (where one key of b meets b's conditions on the database)."""
    if ctx.conn is not None:
        for table, made in _semi_joins(tree, ctx, hardcode=True):
            yield f"JOIN {table} and its conditions -> the key's value", made


def _semi_joins(tree: exp.Expr, ctx: Context, hardcode: bool) -> Iterator[tuple[str, exp.Expr]]:
    """(the table moved out, the edit) of each two-table inner join whose SELECT reads one table alone."""
    for i, node in positions(tree, exp.Select):
        joins = node.args.get("joins") or []
        read = sources(node)
        if (len(joins) != 1 or joins[0].args.get("side") or not isinstance(joins[0].this, exp.Table)
                or not join_key(joins[0].args.get("on") or exp.Null()) or len(read) != 2):
            continue
        for keep, move in ((0, 1), (1, 0)):
            made = _semi_join(tree, i, read[keep][0].lower(), read[move][0].lower(), keep, ctx, hardcode)
            if made is not None:
                yield read[move][1], made


def _side(column: exp.Column, select: exp.Expr, ctx: Context) -> str | None:
    """The qualifier (lower-cased) of the table a column of ``select`` reads, or None."""
    if column.table:
        return column.table.lower()
    table = ctx.table_of(column)
    found = [q.lower() for q, t in sources(select) if table is not None and t.lower() == table.lower()]
    return found[0] if len(found) == 1 else None


def _semi_join(tree: exp.Expr, position: int, keep: str, move: str, kept_index: int, ctx: Context,
               hardcode: bool) -> exp.Expr | None:
    """join_as_in's edit of the SELECT at ``position`` (``hardcode``: key_hardcoded's), or None."""
    copy, select = copy_at(tree, position)
    if any(isinstance(e, exp.Star) for e in select.expressions):
        return None
    on = select.args["joins"][0].args["on"]
    stays, goes = [], []
    for condition in conjuncts(select):
        sides = {_side(c, select, ctx) for c in condition.find_all(exp.Column)
                 if owning_select(c) is select and not is_text(c)}
        if sides <= {keep}:
            stays.append(condition)
        elif sides == {move}:
            goes.append(condition)
        else:
            return None
    others = [c for c in own_columns(select) if clause(c) not in ("where", "on")]
    if any(_side(c, select, ctx) != keep and c.name.lower() not in _aliases(select) for c in others):
        return None
    x, k = (on.this, on.expression) if on.this.table.lower() == keep else (on.expression, on.this)
    if x.table.lower() != keep or k.table.lower() != move:
        return None
    tables = [select.args["from_"].this, select.args["joins"][0].this]
    inner = exp.Select(expressions=[k.copy()], from_=exp.From(this=tables[1 - kept_index].copy()))
    set_where(inner, goes)
    test: exp.Expr = exp.In(this=x.copy(), query=exp.Subquery(this=inner))
    if hardcode:
        rows = ctx.rows(render(inner.distinct()), limit=2) if goes else None
        if not rows or len(rows) != 1:
            return None
        test = exp.EQ(this=x.copy(), expression=literal(rows[0][0]))
    select.set("from_", exp.From(this=tables[kept_index].copy()))
    select.set("joins", None)
    set_where(select, stays + [test])
    return copy


def subquery_filter_shared(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """The WHERE conditions of a query and of its subquery over the same table shared: the outer's copied into
    the subquery (``WHERE d = 5 AND s > (SELECT avg(s) FROM t)``: the average of d = 5 alone), or the
    subquery's into the outer (``s > (SELECT avg(s) FROM t WHERE d = 5)``: only the rows of d = 5 kept)."""
    for i, node in positions(tree, exp.Subquery):
        inner, outer = node.this, owning_select(node)
        if not isinstance(inner, exp.Select) or outer is None or clause(node) != "where" or inner.args.get("group"):
            continue
        theirs = sources(inner)
        mine = [q for q, t in sources(outer) if len(theirs) == 1 and t.lower() == theirs[0][1].lower()]
        if len(mine) != 1:
            continue
        alone = len(sources(outer)) == 1
        blocked_in = {c.name.lower() for w in [inner.args.get("where")] if w is not None for c in w.find_all(exp.Column)}
        blocked_out = {c.name.lower() for c in own_columns(outer) if clause(c) == "where"}
        into = _shared(conjuncts(outer), mine[0], alone, theirs[0][0] if theirs[0][0] != theirs[0][1] else None,
                       blocked_in)
        out_of = _shared(conjuncts(inner), theirs[0][0], True, None if alone and mine[0] == sources(outer)[0][1]
                         else mine[0], blocked_out)
        for moved, target in ((into, "subquery"), (out_of, "outer query")):
            if moved:
                copy, sub = copy_at(tree, i)
                where_of = sub.this if target == "subquery" else owning_select(sub)
                assert where_of is not None
                set_where(where_of, conjuncts(where_of) + moved)
                yield f"+ {cut(exp.and_(*moved))} in the {target}", copy


def _shared(conditions: list[exp.Expr], qualifier: str, bare: bool, to: str | None, blocked: set[str]) -> list[exp.Expr]:
    """Copies of the plain conditions (no subquery, no join key) that read only the table ``qualifier`` names
    (unqualified columns too when ``bare``) and no column of ``blocked``, qualified with ``to`` (or not)."""
    out = []
    for condition in conditions:
        columns = [c for c in condition.find_all(exp.Column) if not is_text(c)]
        if (not columns or condition.find(exp.Subquery) is not None or join_key(condition)
                or any(c.name.lower() in blocked for c in columns)
                or any(c.table.lower() != qualifier.lower() if c.table else not bare for c in columns)):
            continue
        moved = condition.copy()
        for column in moved.find_all(exp.Column):
            if not is_text(column):
                column.set("table", exp.to_identifier(to) if to else None)
        out.append(moved)
    return out
