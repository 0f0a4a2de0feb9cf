"""Blind near misses, third set: near-miss families written apart from families.py's and blind.py's, held out.

The families come from the ways small text-to-SQL models (0.5B to 7B, tuned on Spider) get a query subtly wrong
on a database they have not seen: the entity grouped by the name shown, a filter on an aggregate pushed down to
the rows, "both" read as "either", EXCEPT read as a join with ``<>``, "the top 3" or "the most" read with or
without ties, the extreme of the whole table for that of the rows kept, a NULL forgotten or invented, a number
stored as text compared as text, a date compared by its year, a value spelled as the question spells it
(``'cats'``, ``'Yes'``, ``'North Carolina'``) rather than as the data stores it. Each one changes the gold's
meaning: a database keeping the schema's declared keys, NOT NULLs and foreign keys can give it other rows than
the gold, though the original database often gives the same.

The interface is families.py's: :func:`near_misses` gives :class:`harness.audit.nearmiss.families.NearMiss` items, in
the order of :data:`ALL` then of the edited node, each SQL text once, none equal to the gold (as written or as
sqlglot writes it) nor to a near miss families.py or blind.py make of it, each one run on the database when one
is given (within :data:`harness.audit.nearmiss.context.MAX_STEPS`); those of :data:`NEEDS_DATABASE` need one.

>>> [(m.family, m.sql) for m in near_misses("SELECT name FROM pets WHERE kind = 'cat'", families=["text_number_inflected"])]
[('text_number_inflected', "SELECT name FROM pets WHERE kind = 'cats'")]
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable, Iterable, Iterator

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from harness.audit.nearmiss import blind as second
from harness.audit.nearmiss import blind2_edits as E
from harness.audit.nearmiss import families as first
from harness.audit.nearmiss.context import (
    COMPARISONS,
    Context,
    clause,
    filtering,
    generate,
    is_number,
    is_text,
    join_key,
    owning_select,
    positions,
    put,
    remembered,
    text_of,
)
from harness.audit.nearmiss.edits import Edit, note
from harness.audit.nearmiss.families import NearMiss

Family = Callable[[exp.Expr, Context], Iterator[Edit]]

_DAY = re.compile(r"^(\d{4})-\d{1,2}-\d{1,2}")
_YEAR_PATTERN = re.compile(r"^%?(\d{4})%$")
_NUMERIC = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
# a value as data often codes it -> as a question (or another database) spells it; the numbers are flags
_CODES: dict[str, tuple[str | int, ...]] = {
    "t": ("True", "Yes", 1), "f": ("False", "Female", 0), "y": ("Yes", 1), "n": ("No", 0), "m": ("Male",),
    "true": ("T", 1), "false": ("F", 0), "yes": ("Y", 1), "no": ("N", 0), "male": ("M",), "female": ("F",),
    "usa": ("United States", "US"), "us": ("USA", "United States"), "united states": ("USA", "US"),
    "uk": ("United Kingdom",), "united kingdom": ("UK",), "ny": ("New York",), "new york": ("NY",),
    "ca": ("California",), "california": ("CA",),
}


# --- values as a question words them --------------------------------------------------------------------------

def _compared_texts(tree: exp.Expr) -> Iterator[tuple[int, exp.Expr, str]]:
    """(position, node, text) of each text a WHERE or HAVING compares for (in)equality or lists in IN."""
    for i, node in positions(tree, exp.Literal, exp.Column):
        if (is_text(node) and filtering(node) and isinstance(node.parent, (exp.EQ, exp.NEQ, exp.In))
                and node.arg_key in ("expression", "expressions")):
            yield i, node, text_of(node)


def _texts_made(tree: exp.Expr, respell: Callable[[str], Iterable[str]]) -> Iterator[Edit]:
    for i, node, text in _compared_texts(tree):
        for changed in dict.fromkeys(respell(text)):
            if changed and changed != text:
                yield note(node, exp.Literal.string(changed)), put(tree, i, exp.Literal.string(changed))


def coded_value_spelled(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A coded text spelled out or the other way (``'T'`` -> ``'True'``, ``'Yes'``, 1; ``'USA'`` -> ``'United
    States'``; ``'Male'`` -> ``'M'``), a lower-case text's case kept."""
    for i, node, text in _compared_texts(tree):
        for value in _CODES.get(text.lower(), ()):
            new = exp.Literal.number(value) if isinstance(value, int) else exp.Literal.string(value.lower() if text.islower() else value)
            yield note(node, new), put(tree, i, new)


def _spacings(text: str) -> Iterator[str]:
    yield re.sub(r"(?<=[A-Za-z])[-_](?=[A-Za-z])", " ", text)
    yield re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text)
    words = text.split(" ")
    if len(words) == 2 and all(w.isalpha() for w in words) and words[1][:1].islower():
        yield "".join(words)


def text_spacing_changed(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A text's word breaks written otherwise: a hyphen or underscore as a space, words run together split
    (``'NorthCarolina'`` -> ``'North Carolina'``), two words joined (``'Data base'`` -> ``'Database'``)."""
    yield from _texts_made(tree, _spacings)


def _inflected(word: str) -> Iterator[str]:
    if not (word.isalpha() and len(word) >= 3 and word[0].islower()):
        return
    if word.endswith("ies"):
        yield word[:-3] + "y"
    elif word.endswith(("ses", "xes", "ches", "shes")) or (word.endswith("s") and not word.endswith("ss")):
        yield word[:-2] if word.endswith("es") and word[-3] in "sxh" else word[:-1]
    elif word.endswith("y") and word[-2] not in "aeiou":
        yield word[:-1] + "ies"
    else:
        yield word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def text_number_inflected(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A one-word lower-case text made plural or singular as a question words it (``'cat'`` -> ``'cats'``)."""
    yield from _texts_made(tree, _inflected)


def _unpunctuated(text: str) -> Iterator[str]:
    yield re.sub(r"\s*\([^)]*\)", "", text).strip()
    yield re.sub(r"(?<=\b[A-Z])\.|(?<=[A-Za-z])\.(?=\s|$)|[!?,;:]+$", "", text)


def text_punctuation_dropped(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A text's end punctuation, abbreviation dots or parenthesized part dropped (``'Beetle!'`` -> ``'Beetle'``,
    ``'St. Paul'`` -> ``'St Paul'``, ``'x (sw)'`` -> ``'x'``), as a question words it."""
    yield from _texts_made(tree, _unpunctuated)


# --- NULLs ------------------------------------------------------------------------------------------------------

def negation_keeps_nulls(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``c <> v`` (``NOT c LIKE p``, ``c NOT IN (...)``) of a WHERE made ``(... OR c IS NULL)``: the rows without a
    value kept; not for a column declared NOT NULL or a key, nor one another condition keeps from NULL."""
    for i, node in positions(tree, exp.NEQ, exp.Not):
        inner = node if isinstance(node, exp.NEQ) else node.this
        if (clause(node) != "where" or not isinstance(inner, (exp.NEQ, exp.Like, exp.In)) or join_key(inner)
                or not isinstance(inner.this, exp.Column) or isinstance(node.parent, exp.Not)):
            continue
        if E.nullable(ctx, inner.this) and not E.null_rejected(owning_select(node), inner.this, besides=node):
            new = exp.Paren(this=exp.Or(this=node.copy(), expression=exp.Is(this=inner.this.copy(), expression=exp.Null())))
            yield note(node, new), put(tree, i, new)


def null_test_as_empty_text(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``c IS NULL`` made ``c = ''`` or ``c = 'null'``, ``c IS NOT NULL`` made ``c <> ''``."""
    for i, node in positions(tree, exp.Is, exp.Not):
        test = node.this if isinstance(node, exp.Not) else node
        if (not isinstance(test, exp.Is) or not isinstance(test.expression, exp.Null) or not filtering(node)
                or (node is test and isinstance(node.parent, exp.Not))):
            continue
        texts = [("<>", "")] if node is not test else [("=", ""), ("=", "null")]
        for op, text in texts:
            new = (exp.NEQ if op == "<>" else exp.EQ)(this=test.this.copy(), expression=exp.Literal.string(text))
            yield note(node, new), put(tree, i, new)


def aggregate_nulls_as_zero(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``avg(c)``, ``sum(c)`` or ``min(c)`` made ``avg(COALESCE(c, 0))`` (...): a missing value counted as 0; not
    for a column declared NOT NULL or a key, nor one a condition keeps from NULL."""
    for i, node in positions(tree, exp.Avg, exp.Sum, exp.Min):
        if isinstance(node.this, exp.Column) and E.nullable(ctx, node.this) and not E.null_rejected(owning_select(node), node.this):
            new = type(node)(this=exp.Coalesce(this=node.this.copy(), expressions=[exp.Literal.number(0)]))
            yield note(node, new), put(tree, i, new)


def not_null_filter_added(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``ORDER BY c ... LIMIT n`` of an ungrouped SELECT given ``WHERE c IS NOT NULL``: the rows without a value
    (first in ascending order) left out; not for a column declared NOT NULL or a key, nor one already kept from NULL."""
    for i, select in positions(tree, exp.Select):
        order = select.args.get("order")
        if order is None or select.args.get("limit") is None or select.args.get("group"):
            continue
        for key in order.expressions:
            if isinstance(key.this, exp.Column) and E.nullable(ctx, key.this) and not E.null_rejected(select, key.this):
                cond = exp.Not(this=exp.Is(this=key.this.copy(), expression=exp.Null()))
                yield f"+ WHERE {cond.sql()}", put(tree, i, E.set_where(select.copy(), E.conjuncts(E.where_of(select)) + [cond]))


def distinct_count_as_subquery(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``SELECT count(DISTINCT c) FROM ...`` made ``SELECT count(*) FROM (SELECT DISTINCT c FROM ...)``: NULL
    counted as one more value; not for a column declared NOT NULL or a key, nor one a condition keeps from NULL."""
    for i, select in positions(tree, exp.Select):
        arg = select.expressions[0].this if len(select.expressions) == 1 and isinstance(select.expressions[0], exp.Count) else None
        column = arg.expressions[0] if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1 else None
        if (not isinstance(column, exp.Column) or not E.plain(select) or not E.nullable(ctx, column)
                or E.null_rejected(select, column)):
            continue
        inner = E.edited(select, expressions=[column.copy()], distinct=exp.Distinct())
        new = exp.Select(expressions=[exp.Count(this=exp.Star())], from_=exp.From(this=exp.Subquery(this=inner)))
        yield f"{select.expressions[0].sql()} -> COUNT(*) FROM (SELECT DISTINCT ...)", put(tree, i, new)


# --- extremes and rankings --------------------------------------------------------------------------------------

def extreme_as_sorted_first(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``SELECT max(x) FROM ...`` made ``SELECT x FROM ... ORDER BY x DESC LIMIT 1`` (min: ASC): no row for no
    rows, a NULL first for min."""
    node = tree.expressions[0] if isinstance(tree, exp.Select) and len(tree.expressions) == 1 else None
    if isinstance(node, (exp.Max, exp.Min)) and E.plain(tree) and not tree.args.get("distinct") and not isinstance(node.this, exp.Star):
        desc = isinstance(node, exp.Max)
        order = exp.Order(expressions=[exp.Ordered(this=node.this.copy(), desc=desc, nulls_first=not desc)])
        yield note(node, node.this), E.edited(tree, expressions=[node.this.copy()], order=order,
                                              limit=exp.Limit(expression=exp.Literal.number(1)))


def _ranked(select: exp.Expr) -> tuple[exp.Column, bool, int] | None:
    """(the column, descending, n) of an ungrouped ``ORDER BY column LIMIT n`` without OFFSET."""
    order, limit = select.args.get("order"), select.args.get("limit")
    if (order is None or limit is None or len(order.expressions) != 1 or select.args.get("offset") or select.args.get("group")
            or any(True for e in select.expressions for _a in e.find_all(exp.AggFunc))):
        return None
    key, count = order.expressions[0], limit.expression
    if not isinstance(key.this, exp.Column) or not isinstance(count, exp.Literal) or count.is_string or not str(count.this).isdigit():
        return None
    return key.this, bool(key.args.get("desc")), int(count.this)


def argmax_over_all_rows(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A filtered or joined ``... ORDER BY c DESC LIMIT 1`` made ``... WHERE ... c = (SELECT max(c) FROM c's
    table)`` (min for ASC): the extreme of the whole table, not of the rows the query keeps."""
    for i, select in positions(tree, exp.Select):
        ranked = _ranked(select)
        table = ctx.table_of(ranked[0]) if ranked and ranked[2] == 1 else None
        if ranked is None or table is None or not (E.where_of(select) is not None or select.args.get("joins")):
            continue
        extreme = (exp.Max if ranked[1] else exp.Min)(this=exp.column(ranked[0].name, quoted=ranked[0].this.quoted))
        whole = exp.Subquery(this=exp.Select(expressions=[extreme], from_=exp.From(this=exp.to_table(table))))
        cond = exp.EQ(this=ranked[0].copy(), expression=whole)
        new = E.set_where(E.edited(select, order=None, limit=None), E.conjuncts(E.where_of(select)) + [cond])
        yield f"ORDER BY ... LIMIT 1 -> {cond.sql()}", put(tree, i, new)


def top_n_with_ties(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """``ORDER BY c LIMIT n`` (n of 2 or more) made ``WHERE c IN (SELECT c ... ORDER BY c LIMIT n) ORDER BY c``:
    every row sharing a top value, more than n when values tie."""
    for i, select in positions(tree, exp.Select):
        ranked = _ranked(select)
        if ranked is None or ranked[2] < 2:
            continue
        cond = exp.In(this=ranked[0].copy(), query=exp.Subquery(this=E.edited(select, expressions=[ranked[0].copy()], distinct=None)))
        new = E.set_where(E.edited(select, limit=None), E.conjuncts(E.where_of(select)) + [cond])
        yield f"LIMIT {ranked[2]} -> {ranked[0].sql()} IN (... LIMIT {ranked[2]})", put(tree, i, new)


# --- types, dates, the shape of the answer, joins -----------------------------------------------------------------

def _numeric_text(ctx: Context, column: exp.Column) -> bool:
    """Whether ``column`` has TEXT affinity on the database and its values (a sample) look like numbers."""
    table = ctx.table_of(column)
    if table is None or ctx.schema.affinity(table, column.name) != "TEXT":
        return False
    name = '"' + column.name.replace('"', '""') + '"'
    rows = ctx.rows(f'SELECT {name} FROM "{table}" WHERE {name} IS NOT NULL LIMIT 50') or []
    return bool(rows) and all(_NUMERIC.match(str(r[0])) for r in rows)


def text_number_cast(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A TEXT column holding numbers compared with a number, sorted, or taken max or min of, made ``CAST(c AS
    REAL)``: compared as numbers, not as texts ('10' < '9'); on the database."""
    for i, node in positions(tree, *COMPARISONS, exp.Ordered, exp.Max, exp.Min) if ctx.conn is not None else ():
        number = isinstance(node, COMPARISONS) and (is_number(node.expression) or isinstance(node.expression, exp.Neg))
        if not isinstance(node.this, exp.Column) or (isinstance(node, COMPARISONS) and not (number and filtering(node))):
            continue
        if _numeric_text(ctx, node.this):
            new = E.edited(node, this=exp.Cast(this=node.this.copy(), to=exp.DataType.build("REAL")))
            yield note(node, new), put(tree, i, new)


def _year(column: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this="strftime", expressions=[exp.Literal.string("%Y"), column.copy()])


def date_compared_by_year(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A column compared with a date text (``d < '2010-05-03'``, ``d LIKE '2010%'``, BETWEEN two dates) made its
    year compared with the year (``strftime('%Y', d) < '2010'``)."""
    for i, node in positions(tree, *COMPARISONS, exp.Like, exp.Between):
        if not filtering(node) or not isinstance(node.this, exp.Column):
            continue
        new: exp.Expr | None = None
        if isinstance(node, exp.Between):
            ends = [node.args.get("low"), node.args.get("high")]
            years = [_DAY.match(str(e.this)) if isinstance(e, exp.Literal) and e.is_string else None for e in ends]
            if years[0] and years[1]:
                new = exp.Between(this=_year(node.this), low=exp.Literal.string(years[0].group(1)), high=exp.Literal.string(years[1].group(1)))
        elif isinstance(node.expression, exp.Literal) and node.expression.is_string:
            found = (_YEAR_PATTERN if isinstance(node, exp.Like) else _DAY).match(str(node.expression.this))
            if found:
                kind = exp.EQ if isinstance(node, exp.Like) else type(node)
                new = kind(this=_year(node.this), expression=exp.Literal.string(found.group(1)))
        if new is not None:
            yield note(node, new), put(tree, i, new)


def key_column_shown(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """A GROUP BY key the outer SELECT does not show put before its columns, an ORDER BY key (a column or an
    aggregate such as count(*)) after them: one column more in every row."""
    if not isinstance(tree, exp.Select):
        return
    shown = {e.sql() for e in tree.expressions}
    group, order = tree.args.get("group"), tree.args.get("order")
    keys = [(g, True) for g in (group.expressions if group else [])] + [(o.this, False) for o in (order.expressions if order else [])]
    for key, before in keys:
        if key.sql() in shown or isinstance(key, exp.Literal):
            continue
        shown.add(key.sql())
        columns = [e.copy() for e in tree.expressions]
        yield f"+ SELECT {key.sql()}", E.edited(tree, expressions=[key.copy(), *columns] if before else [*columns, key.copy()])


def join_condition_partial(tree: exp.Expr, ctx: Context) -> Iterator[Edit]:
    """One column equality of a JOIN's ON of several (a composite key) dropped, the others kept."""
    for i, join in positions(tree, exp.Join):
        conds = E.conjuncts(join.args.get("on"))
        for dropped in conds if len(conds) > 1 else []:
            if join_key(dropped):
                yield note(dropped, None), put(tree, i, E.edited(join, on=E.joined([c for c in conds if c is not dropped])))


# name: (what it edits, the generator); the order is the order of near_misses' output.
_FAMILIES: dict[str, tuple[str, Family]] = {
    "group_by_shown_column": ("GROUP BY key made GROUP BY a column the SELECT shows bare (the name)", E.group_by_shown_column),
    "group_by_selected_added": ("a shown column the grouping does not determine added to the GROUP BY", E.group_by_selected_added),
    "having_pushed_to_where": ("HAVING agg(c) op v made WHERE c op v: rows filtered, not groups", E.having_pushed_to_where),
    "above_average_as_having": ("WHERE c op (SELECT avg(c) FROM t) made GROUP BY the shown columns HAVING c op avg(c)",
                                E.above_average_as_having),
    "group_argmax_with_ties": ("GROUP BY g ORDER BY agg LIMIT 1 made HAVING agg = (that query's top agg): ties kept",
                               E.group_argmax_with_ties),
    "key_column_shown": ("a GROUP BY or ORDER BY key the outer SELECT does not show added to its columns", key_column_shown),
    "except_as_negated_join": ("A EXCEPT B made one join of their tables with B's condition (or ON) negated", E.except_as_negated_join),
    "intersect_as_either": ("A INTERSECT B made one SELECT with A's condition OR B's (or IN (v, w))", E.intersect_as_either),
    "set_sides_on_one_join": ("A UNION / INTERSECT B of different tables made one join with the conditions ORed / ANDed",
                              E.set_sides_on_one_join),
    "join_condition_partial": ("one equality of a several-column JOIN ON dropped", join_condition_partial),
    "subquery_column_captured": ("x IN (SELECT k FROM u) made x IN (SELECT x FROM u): k named as the outer column",
                                 E.subquery_column_captured),
    "subquery_aggregate_dropped": ("c op (SELECT max(x) ...) made c op (SELECT x ...), min too", E.subquery_aggregate_dropped),
    "argmax_over_all_rows": ("a filtered or joined ORDER BY c LIMIT 1 made c = (SELECT max(c) FROM c's table)", argmax_over_all_rows),
    "top_n_with_ties": ("ORDER BY c LIMIT n (n >= 2) made c IN (SELECT c ... LIMIT n): ties kept", top_n_with_ties),
    "extreme_as_sorted_first": ("SELECT max(x) made SELECT x ORDER BY x DESC LIMIT 1 (min: ASC)", extreme_as_sorted_first),
    "distinct_count_as_subquery": ("count(DISTINCT c) made count(*) FROM (SELECT DISTINCT c ...): NULL counted",
                                   distinct_count_as_subquery),
    "negation_keeps_nulls": ("c <> v (NOT LIKE, NOT IN) made (... OR c IS NULL) for a nullable column", negation_keeps_nulls),
    "null_test_as_empty_text": ("c IS NULL made c = '' or c = 'null', IS NOT NULL made <> ''", null_test_as_empty_text),
    "aggregate_nulls_as_zero": ("avg, sum or min of a nullable c made of COALESCE(c, 0)", aggregate_nulls_as_zero),
    "not_null_filter_added": ("ORDER BY c ... LIMIT n given WHERE c IS NOT NULL, c nullable", not_null_filter_added),
    "text_number_cast": ("a TEXT column of numbers compared with a number, sorted, max or min made CAST(c AS REAL)", text_number_cast),
    "date_compared_by_year": ("a column compared with a date text made strftime('%Y', c) compared with its year", date_compared_by_year),
    "coded_value_spelled": ("a coded text spelled out or coded ('T' -> 'True', 'Yes', 1; 'USA' -> 'United States')", coded_value_spelled),
    "text_spacing_changed": ("a text's word breaks changed: - or _ as space, CamelCase split, two words joined", text_spacing_changed),
    "text_number_inflected": ("a one-word lower-case text made plural or singular ('cat' -> 'cats')", text_number_inflected),
    "text_punctuation_dropped": ("a text's end punctuation, abbreviation dots or parenthesized part dropped", text_punctuation_dropped),
}

ALL: tuple[str, ...] = tuple(_FAMILIES)
DESCRIPTIONS: dict[str, str] = {name: description for name, (description, _f) in _FAMILIES.items()}
# The families that read the database's schema or values: without a database they give nothing.
NEEDS_DATABASE: tuple[str, ...] = ("group_by_selected_added", "text_number_cast")


def near_misses(gold: str, database: pathlib.Path | None = None, *, families: Iterable[str] | None = None) -> list[NearMiss]:
    """Every near miss of this set of ``gold`` (SQLite, Spider style) in ``families`` (default :data:`ALL`).

    In the order of :data:`ALL`, then of the edited node; each SQL text once (the first family keeps it), none
    equal to the gold as written or as sqlglot writes it, none that a family of families.py or blind.py makes of
    this gold on this database; with ``database`` (read-only), each one runs there. A gold sqlglot cannot read
    gives none."""
    wanted = ALL if families is None else tuple(families)
    unknown = [name for name in wanted if name not in _FAMILIES]
    if unknown:
        raise ValueError(f"unknown blind2 near-miss families {unknown}: choose among {', '.join(ALL)}")
    return remembered("blind2", gold, database, wanted, lambda: _made(gold, database, wanted))


def _made(gold: str, database: pathlib.Path | None, wanted: tuple[str, ...]) -> list[NearMiss]:
    """``near_misses``' work, once a process per gold, database and families (``context.remembered``)."""
    try:
        tree = sqlglot.parse_one(gold.strip().rstrip(";"), read="sqlite")
    except (SqlglotError, ValueError):
        return []
    if tree is None:
        return []
    seen = {gold.strip(), generate(tree)} | {m.sql for module in (first, second) for m in module.near_misses(gold, database)}
    out: list[NearMiss] = []
    ctx = Context(database)
    try:
        for name in (n for n in ALL if n in wanted):
            for change, edited in _safely(_FAMILIES[name][1], tree, ctx):
                sql = generate(edited)
                if sql is not None and sql not in seen:
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
    except (SqlglotError, ValueError, TypeError, AttributeError, KeyError, IndexError, StopIteration):
        return
