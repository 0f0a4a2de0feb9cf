"""Blind near misses: a second, independent set of near-miss families, held out from the scorer's tuning.

harness/audit/nearmiss/families.py makes the near misses the bundle is measured (and partly tuned) on. The families
here were written apart from that list, from the mistakes published text-to-SQL systems make on Spider's dev
questions (a value matched loosely or in another case, a semi-join written as a join, ``EXCEPT`` written as
``NOT IN``, an average written as an integer division, the parentheses of an OR forgotten, a column read from
the other table of a join, the answer itself written as constants, ...), so that a scorer tuned on the first
list can be measured on mistakes it was not tuned on. No near miss here is one a family of
:data:`harness.audit.nearmiss.families.ALL` makes of the same gold (none shares a name with one either).

The interface is families.py's: :func:`near_misses` gives :class:`harness.audit.nearmiss.families.NearMiss` items, in
the order of :data:`ALL` then of the edited node, each SQL text once, none equal to the gold (as written or as
sqlglot writes it), each one prepared and run on the database when one is given (within
:data:`harness.audit.nearmiss.context.MAX_STEPS`); the families of :data:`NEEDS_DATABASE` give nothing without one.

>>> [(m.family, m.sql) for m in near_misses("SELECT name FROM emp WHERE dept = 'IT'",
...                                          families=["equals_as_contains"])]
[('equals_as_contains', "SELECT name FROM emp WHERE dept LIKE '%IT%'")]
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable, Iterable, Iterator

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from harness.audit.nearmiss import blind_edits as B
from harness.audit.nearmiss import families as existing
from harness.audit.nearmiss.context import (
    COMPARISONS,
    Context,
    clause,
    filtering,
    generate,
    is_text,
    join_key,
    literal,
    owning_select,
    positions,
    put,
    remembered,
    render,
    text_of,
)
from harness.audit.nearmiss.edits import Edit, note
from harness.audit.nearmiss.families import NearMiss

Family = Callable[[exp.Expr, Context], Iterator[Edit]]

MAX_CONSTANT_ROWS = 5  # constant_answer writes out a gold's rows up to this many
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_UNWRAPPED = (exp.Sum, exp.Avg, exp.Max, exp.Min)


def _text_compared(tree: exp.Expr, kinds: tuple[type[exp.Expr], ...]) -> Iterator[tuple[int, exp.Expr, str]]:
    """(position, comparison, its text) of each ``column <op> 'text'`` of a WHERE or HAVING, op among ``kinds``."""
    for i, node in positions(tree, *kinds):
        if filtering(node) and isinstance(node.this, exp.Column) and is_text(node.expression):
            yield i, node, text_of(node.expression)


def equals_as_contains(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``c = 'v'`` made ``c LIKE '%v%'`` (``c <> 'v'``: ``NOT c LIKE '%v%'``): any value holding v."""
    for i, node, text in _text_compared(tree, (exp.EQ, exp.NEQ)):
        new: exp.Expr = exp.Like(this=node.this.copy(), expression=exp.Literal.string(f"%{text}%"))
        if isinstance(node, exp.NEQ):
            new = exp.Not(this=new)
        yield note(node, new), put(tree, i, new)


def nocase_compare(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``c = 'Vv'`` made ``LOWER(c) = 'vv'`` (and ``<>``): the case of the column's values ignored."""
    for i, node, text in _text_compared(tree, (exp.EQ, exp.NEQ)):
        new = type(node)(this=exp.Lower(this=node.this.copy()), expression=exp.Literal.string(text.lower()))
        yield note(node, new), put(tree, i, new)


def _capitalized(text: str) -> str:
    return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))


def text_titlecased(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A text of a comparison or IN list written with capital initials (``'france'`` -> ``'France'``), as a
    writer spells a name from the question; not where that is its lower or upper case (text_case_changed)."""
    for i, node in positions(tree, exp.Literal, exp.Column):
        if not is_text(node) or not filtering(node) or not isinstance(node.parent, (*COMPARISONS, exp.In)):
            continue
        text = text_of(node)
        changed = _capitalized(text)
        if changed not in (text, text.lower(), text.upper()):
            new = exp.Literal.string(changed)
            yield note(node, new), put(tree, i, new)


def date_truncated(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A date text of a condition cut to its day or its year (``'2009-06-01 10:00'`` -> ``'2009-06-01'``,
    ``'2009'``): compared as text, a shorter one sorts before every date of that year."""
    for i, node in positions(tree, exp.Literal):
        if not node.is_string or not filtering(node) or isinstance(node.parent, exp.Like):
            continue
        text = str(node.this)
        if _DATE.match(text):
            for changed in dict.fromkeys((text[:10], text[:4])):
                if changed != text:
                    new = exp.Literal.string(changed)
                    yield note(node, new), put(tree, i, new)


def range_to_equality(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``>=`` or ``<=`` of a WHERE or HAVING made ``=`` ("at least 2" read as "2")."""
    for i, node in positions(tree, exp.GTE, exp.LTE):
        if filtering(node) and not join_key(node):
            new = exp.EQ(this=node.this.copy(), expression=node.expression.copy())
            yield note(node, new), put(tree, i, new)


def or_precedence(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """The parentheses of ``a AND (b OR c)`` dropped (SQL reads ``(a AND b) OR c``), and ``a AND b OR c``
    read as ``a AND (b OR c)``."""
    for i, node in positions(tree, exp.Paren):
        if isinstance(node.this, exp.Or) and isinstance(node.parent, exp.And) and clause(node) != "on":
            new = node.this.copy()
            yield f"({render(node.this)[:50]}) -> without parentheses", put(tree, i, new)
    for i, node in positions(tree, exp.Or):
        if clause(node) == "on":
            continue
        if isinstance(node.this, exp.And):  # a AND b OR c -> a AND (b OR c)
            low, high = node.this.this, exp.Or(this=node.this.expression.copy(), expression=node.expression.copy())
            made: exp.Expr = exp.And(this=low.copy(), expression=exp.Paren(this=high))
        elif isinstance(node.expression, exp.And):  # c OR a AND b -> (c OR a) AND b
            high = exp.Or(this=node.this.copy(), expression=node.expression.this.copy())
            made = exp.And(this=exp.Paren(this=high), expression=node.expression.expression.copy())
        else:
            continue
        yield f"{render(node)[:50]} -> regrouped", put(tree, i, made)


def where_to_having(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A WHERE condition of a grouped SELECT moved to its HAVING (tested on one row of each group)."""
    for i, node in positions(tree, exp.Select):
        if node.args.get("group") is None:
            continue
        for k, condition in enumerate(B.conjuncts(node)):
            if join_key(condition):
                continue
            copy, select = B.copy_at(tree, i)
            moved = B.conjuncts(select)[k]
            having = select.args.get("having")
            B.set_where(select, [c for c in B.conjuncts(select) if c is not moved])
            test = exp.and_(having.this.copy(), moved.copy()) if having is not None else moved.copy()
            select.set("having", exp.Having(this=test))
            yield f"WHERE {render(condition)[:50]} -> HAVING", copy


def _one_row(select: exp.Expr) -> bool:
    return (select.args.get("group") is None and bool(select.expressions)
            and all(e.find(exp.AggFunc) is not None for e in select.expressions))


def _nested(node: exp.Expr) -> bool:
    return any(isinstance(a, (exp.Subquery, exp.In, exp.Exists)) for a in _ancestors(node))


def _ancestors(node: exp.Expr) -> Iterator[exp.Expr]:
    while node.parent is not None:
        node = node.parent
        yield node


def group_added(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """An aggregate-only SELECT grouped by a column its WHERE compares with a value: one row per value met,
    and no row where none is (where the gold gives ``0``)."""
    for i, node in positions(tree, exp.Select):
        if not _one_row(node) or _nested(node):
            continue
        keys: dict[str, exp.Expr] = {}
        for condition in B.conjuncts(node):
            if isinstance(condition, (*COMPARISONS, exp.Like, exp.In, exp.Between)) and not join_key(condition):
                if isinstance(condition.this, exp.Column):
                    keys.setdefault(render(condition.this).lower(), condition.this)
        for key in keys.values():
            copy, select = B.copy_at(tree, i)
            select.set("group", exp.Group(expressions=[key.copy()]))
            yield f"+ GROUP BY {render(key)}", copy


def aggregate_unwrapped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``sum(c)``, ``avg(c)``, ``max(c)`` or ``min(c)`` of a grouped SELECT made ``c``: one row's value."""
    for i, node in positions(tree, *_UNWRAPPED):
        select = owning_select(node)
        if (select is not None and select.args.get("group") is not None and isinstance(node.this, exp.Column)
                and clause(node) in ("select", "order", "having")):
            yield note(node, node.this), put(tree, i, node.this)


def avg_integer_division(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``avg(c)`` made ``sum(c) / count(*)``: integer division on integers, NULLs counted."""
    for i, node in positions(tree, exp.Avg):
        if not isinstance(node.this, exp.Distinct):
            new = exp.Div(this=exp.Sum(this=node.this.copy()), expression=exp.Count(this=exp.Star()), typed=True)
            yield note(node, new), put(tree, i, new)


def aggregate_rounded(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A selected ``avg(c)`` made ``ROUND(avg(c), 2)``."""
    for i, node in positions(tree, exp.Avg):
        if clause(node) == "select" and not isinstance(node.parent, exp.Round):
            new = exp.Round(this=node.copy(), decimals=exp.Literal.number(2))
            yield note(node, new), put(tree, i, new)


def distinct_outside_count(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``SELECT count(DISTINCT c)`` made ``SELECT DISTINCT count(c)``: the DISTINCT on the wrong level."""
    for i, node in positions(tree, exp.Count):
        select = owning_select(node)
        inner = node.this
        if (select is None or select.args.get("distinct") or clause(node) != "select"
                or not isinstance(inner, exp.Distinct) or len(inner.expressions) != 1):
            continue
        copy, count = B.copy_at(tree, i)
        count.set("this", inner.expressions[0].copy())
        owner = owning_select(count)
        assert owner is not None
        owner.set("distinct", exp.Distinct())
        yield f"{render(node)} -> SELECT DISTINCT COUNT({render(inner.expressions[0])})", copy


def constant_answer(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """The gold replaced by its own rows on the database, written as constants (``SELECT 6``): right on that
    database, whatever the data (up to MAX_CONSTANT_ROWS rows)."""
    if ctx.conn is None:
        return
    rows = ctx.rows(render(tree), limit=MAX_CONSTANT_ROWS + 1)
    if not rows or len(rows) > MAX_CONSTANT_ROWS:
        return
    sides = [exp.Select(expressions=[literal(v) for v in row]) for row in rows]
    made: exp.Expr = sides[0]
    for side in sides[1:]:
        made = exp.Union(this=made, expression=side, distinct=False)
    yield f"the gold -> its {len(rows)} row(s) as constants", made


def _set_as_condition(tree: exp.Expr, kind: type[exp.SetOperation], negated: bool) -> Iterator[Edit]:
    for i, node in positions(tree, kind):
        left, right = node.this, node.expression
        if not (isinstance(left, exp.Select) and isinstance(right, exp.Select)) or not left.expressions:
            continue
        first = left.expressions[0].unalias()
        if first.find(exp.AggFunc) is not None or isinstance(first, exp.Star):
            continue
        copy, moved = B.copy_at(tree, i)
        new_left, new_right = moved.this.copy(), moved.expression.copy()
        new_right.set("expressions", [new_right.expressions[0].unalias().copy()])
        condition: exp.Expr = exp.In(this=first.copy(), query=exp.Subquery(this=new_right))
        if negated:
            condition = exp.Not(this=condition)
        B.set_where(new_left, B.conjuncts(new_left) + [condition])
        for key in ("order", "limit", "offset"):
            if moved.args.get(key) is not None:
                new_left.set(key, moved.args[key].copy())
        word = "NOT IN" if negated else "IN"
        if moved is copy:
            yield f"{kind.key.upper()} -> {word} (SELECT ...)", new_left
        else:
            moved.replace(new_left)
            yield f"{kind.key.upper()} -> {word} (SELECT ...)", copy


def except_as_not_in(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``A EXCEPT B`` made ``A WHERE a NOT IN (SELECT b ...)`` on their first columns."""
    yield from _set_as_condition(tree, exp.Except, negated=True)


def intersect_as_in(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``A INTERSECT B`` made ``A WHERE a IN (SELECT b ...)`` on their first columns."""
    yield from _set_as_condition(tree, exp.Intersect, negated=False)


def _plain_root(tree: exp.Expr) -> bool:
    """The gold is one SELECT of rows (no aggregate, grouping, ordering or limit): it may be split in two."""
    return (isinstance(tree, exp.Select) and not any(tree.args.get(k) for k in ("group", "having", "order", "limit"))
            and not any(e.find(exp.AggFunc) for e in tree.expressions))


def _with_where(select: exp.Expr, conditions: list[exp.Expr]) -> exp.Select:
    out = select.copy()
    B.set_where(out, conditions)
    return out  # type: ignore[return-value]


def not_in_as_except(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``SELECT a FROM t WHERE x NOT IN (s)`` made ``SELECT a FROM t EXCEPT SELECT a FROM t WHERE x IN (s)``."""
    if not _plain_root(tree):
        return
    for condition in B.conjuncts(tree):
        if isinstance(condition, exp.Not) and isinstance(condition.this, exp.In):
            rest = [c for c in B.conjuncts(tree) if c is not condition]
            made = exp.Except(this=_with_where(tree, rest), expression=_with_where(tree, rest + [condition.this]),
                              distinct=True)
            yield f"{B.cut(condition)} -> EXCEPT", made


def and_as_intersect(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``WHERE a AND b`` made ``... WHERE a INTERSECT ... WHERE b`` (join keys kept on both sides)."""
    if not _plain_root(tree):
        return
    keys = [c for c in B.conjuncts(tree) if join_key(c)]
    values = [c for c in B.conjuncts(tree) if not join_key(c)]
    for k in range(len(values) if len(values) > 2 else min(len(values) - 1, 1)):
        left = keys + [c for j, c in enumerate(values) if j != k]
        right = keys + [values[k]]
        made = exp.Intersect(this=_with_where(tree, left), expression=_with_where(tree, right), distinct=True)
        yield f"AND {B.cut(values[k])} -> INTERSECT", made


def or_as_union(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``WHERE a OR b`` (or an OR among its AND-conditions) made ``... WHERE a UNION ... WHERE b``."""
    if not _plain_root(tree):
        return
    for condition in B.conjuncts(tree):
        either = condition.this if isinstance(condition, exp.Paren) else condition
        if not isinstance(either, exp.Or):
            continue
        rest = [c for c in B.conjuncts(tree) if c is not condition]
        sides = [_with_where(tree, rest + [branch.unnest()]) for branch in either.flatten()]
        made: exp.Expr = sides[0]
        for side in sides[1:]:
            made = exp.Union(this=made, expression=side, distinct=True)
        yield f"{B.cut(either)} -> UNION", made


# name: (what it edits, the generator); the order is the order of near_misses' output.
_FAMILIES: dict[str, tuple[str, Family]] = {
    "equals_as_contains": ("c = 'v' made c LIKE '%v%' (<> made NOT LIKE)", equals_as_contains),
    "nocase_compare": ("c = 'v' made LOWER(c) = lower-cased 'v' (and <>)", nocase_compare),
    "text_titlecased": ("a text of a condition written with capital initials ('france' -> 'France')", text_titlecased),
    "date_truncated": ("a date text of a condition cut to its day or its year", date_truncated),
    "range_to_equality": (">= or <= of a WHERE or HAVING made =", range_to_equality),
    "or_precedence": ("a AND (b OR c) without its parentheses; a AND b OR c read as a AND (b OR c)", or_precedence),
    "where_to_having": ("a WHERE condition of a grouped SELECT moved to its HAVING", where_to_having),
    "group_added": ("an aggregate-only SELECT grouped by a column its WHERE compares", group_added),
    "aggregate_unwrapped": ("sum, avg, max or min of a grouped SELECT made its bare column", aggregate_unwrapped),
    "avg_integer_division": ("avg(c) made sum(c) / count(*)", avg_integer_division),
    "aggregate_rounded": ("a selected avg(c) made ROUND(avg(c), 2)", aggregate_rounded),
    "distinct_outside_count": ("SELECT count(DISTINCT c) made SELECT DISTINCT count(c)", distinct_outside_count),
    "in_as_join": ("x IN (SELECT k FROM u WHERE c) made JOIN u ON x = k WHERE c", B.in_as_join),
    "not_in_as_join": ("x NOT IN (SELECT k FROM u WHERE c) made JOIN u ON x = k WHERE NOT c (ON x <> k without c)",
                       B.not_in_as_join),
    "not_in_as_not_exists": ("x NOT IN (SELECT k ...) made NOT EXISTS (SELECT 1 ... AND k = x)", B.not_in_as_not_exists),
    "in_as_equals": ("x IN (subquery) made x = (subquery), NOT IN made <>", B.in_as_equals),
    "join_as_in": ("a JOIN b read only for a filter made a.x IN (SELECT b.y FROM b ...)", B.join_as_in),
    "key_hardcoded": ("a JOIN b read only for a filter made a.x = the one key of b meeting it, on the database",
                      B.key_hardcoded),
    "except_as_not_in": ("A EXCEPT B made A WHERE a NOT IN (SELECT b ...)", except_as_not_in),
    "intersect_as_in": ("A INTERSECT B made A WHERE a IN (SELECT b ...)", intersect_as_in),
    "not_in_as_except": ("SELECT a ... WHERE x NOT IN (s) made SELECT a ... EXCEPT SELECT a ... WHERE x IN (s)",
                         not_in_as_except),
    "and_as_intersect": ("WHERE a AND b made ... WHERE a INTERSECT ... WHERE b", and_as_intersect),
    "or_as_union": ("WHERE a OR b made ... WHERE a UNION ... WHERE b", or_as_union),
    "join_condition_dropped": ("one JOIN's ON dropped, its table kept (every pair of rows)", B.join_condition_dropped),
    "column_table_swapped": ("T1.c made T2.c, another table of the SELECT with a column c", B.column_table_swapped),
    "join_on_ids": ("a JOIN's ON made first column = first column, or same-named columns", B.join_on_ids),
    "subquery_filter_shared": ("the WHERE conditions of a query and its subquery over the same table copied "
                               "one into the other", B.subquery_filter_shared),
    "constant_answer": ("the gold replaced by its rows on the database, as constants", constant_answer),
}

ALL: tuple[str, ...] = tuple(_FAMILIES)
DESCRIPTIONS: dict[str, str] = {name: description for name, (description, _f) in _FAMILIES.items()}
# The families that read the database's values or schema: without a database they give nothing.
NEEDS_DATABASE: tuple[str, ...] = ("key_hardcoded", "column_table_swapped", "join_on_ids", "constant_answer")


def near_misses(gold: str, database: pathlib.Path | None = None, *,
                families: Iterable[str] | None = None) -> list[NearMiss]:
    """Every blind near miss of ``gold`` (SQLite, Spider style) in ``families`` (default :data:`ALL`).

    In the order of :data:`ALL`, then of the edited node; each SQL text once (the first family keeps it),
    none equal to the gold as written or as sqlglot writes it, none that a family of
    :data:`harness.audit.nearmiss.families.ALL` makes of this gold on this database (the families differ by
    construction; a value of the data can still make two edits meet: ``'porto'`` capitalized is the next
    value of its column); with ``database`` (read-only), each one runs there. A gold sqlglot cannot read
    gives none."""
    wanted = ALL if families is None else tuple(families)
    unknown = [name for name in wanted if name not in _FAMILIES]
    if unknown:
        raise ValueError(f"unknown blind near-miss families {unknown}: choose among {', '.join(ALL)}")
    return remembered("blind", gold, database, wanted, lambda: _made(gold, database, wanted))


def _made(gold: str, database: pathlib.Path | None, wanted: tuple[str, ...]) -> list[NearMiss]:
    """``near_misses``' work, once a process per gold, database and families (``context.remembered``)."""
    try:
        tree = sqlglot.parse_one(gold.strip().rstrip(";"), read="sqlite")
    except (SqlglotError, ValueError):
        return []
    if tree is None:
        return []
    seen = {gold.strip(), generate(tree)} | {m.sql for m in existing.near_misses(gold, database)}
    out: list[NearMiss] = []
    ctx = Context(database)
    try:
        for name in ALL:
            if name not in wanted:
                continue
            for change, edited in _safely(_FAMILIES[name][1], tree, ctx):
                sql = generate(edited)
                if sql is None or sql in seen:
                    continue
                seen.add(sql)
                if ctx.runs(sql):
                    out.append(NearMiss(name, sql, change))
    finally:
        ctx.close()
    return out


def _safely(family: Family, tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """The family's edits; an edit sqlglot refuses (or a shape the family did not foresee) ends them for this gold."""
    try:
        yield from family(tree, ctx)
    except (SqlglotError, ValueError, TypeError, AttributeError, KeyError, IndexError):
        return
