"""What a query says about the values a neighbour should hold: its literals, and the columns it groups or sorts by.

Read from the query's text (``sql.text``'s tokenizer), never run:

* ``literals_by_column``: the literals a query compares each column with (``name = 'x'``,
  ``age > 40``, ``LIKE '%x%'``, ``IN (...)``, ``BETWEEN``); a literal whose column cannot be told
  goes under "";
* ``grouped_columns``: columns a query needs repeated (grouped by, with a HAVING on the groups);
* ``sort_columns``: columns a query orders by (a neighbour adds no NULL there: NULL sorts first);
* ``between_bounds``: the bounds of a query's ``BETWEEN`` (a neighbour holds them only where the
  original does: "between" reads inclusive or strict);

and the values drawn near a literal (``near_numbers``, ``like_texts``, ``in_format``), with
whether a value may go into a column at all (``fits``: the storage classes and the text format
the original shows, after SQLite's type affinity).

>>> literals_by_column("SELECT name FROM singer WHERE age > 40 AND country = 'France'", {"age", "country", "name"})
{'age': [40], 'country': ['France']}
>>> sorted(sort_columns("SELECT name FROM t ORDER BY T1.age DESC, 2", {"age", "name"}))
['age']
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from ..sql import reading as difference_reading
from ..sql import text as sql_text
from .invariants import ColumnFacts, affinity, shape

# Tokens between a column and the literal it is compared with: operators, list and range glue.
_GLUE = {"=", "==", "!=", "<>", "<", ">", "<=", ">=", "LIKE", "GLOB", "IN", "NOT", "BETWEEN", "AND", "IS",
         "(", ",", "!", "-"}
_GROUP_END = {"HAVING", "ORDER", "LIMIT", "UNION", "INTERSECT", "EXCEPT", "WINDOW", ")"}
_ORDER_END = {"LIMIT", "UNION", "INTERSECT", "EXCEPT", ")", "OFFSET"}


def _code(sql: str) -> tuple[sql_text.Token, ...]:
    """The code tokens of ``sql`` (read only): a query of ordinary length is read once for the several
    questions asked of it (a gold, at every search of it); a long one each time, never kept."""
    return _code_kept(sql) if len(sql) <= _KEPT_LENGTH else tuple(sql_text.code_tokens(sql))


_KEPT_LENGTH = 1_024  # at most 512 kept: a few MB whatever the queries


@functools.lru_cache(maxsize=512)
def _code_kept(sql: str) -> tuple[sql_text.Token, ...]:
    return tuple(sql_text.code_tokens(sql))


def _name(tok: sql_text.Token, columns: set[str]) -> str | None:
    """The column a word or quoted token names, lower case; None when it names none of ``columns``."""
    if tok.kind == "word":
        text = tok.text.lower()
    elif tok.kind == "quoted":
        text = tok.text[1:-1].lower()
    else:
        return None
    return text if text in columns else None


def _literal(tok: sql_text.Token, columns: set[str]) -> object:
    """The value of a string or number token (a double-quoted text naming no column is a string)."""
    if tok.kind == "string":
        return tok.text[1:-1].replace("''", "'")
    if tok.kind == "quoted" and tok.text.startswith('"') and tok.text[1:-1].lower() not in columns:
        return tok.text[1:-1].replace('""', '"')
    if tok.kind == "number" and not tok.text.lower().startswith("0x"):
        return int(tok.text) if re.fullmatch(r"\d+", tok.text) else float(tok.text)
    return None


def literals_by_column(sql: str, columns: set[str], patterns: bool = False) -> dict[str, list]:
    """The literals of ``sql`` by the column they are compared with (lower-case names; "" when unknown).

    Walking back from a literal over operators, ``IN (...)`` lists and ``BETWEEN ... AND``, the
    first name reached is its column. ``patterns``: the LIKE (GLOB) patterns instead of the values.

    >>> literals_by_column("SELECT a FROM t WHERE b LIKE '%an%' AND c = 'x'", {"a", "b", "c"}, patterns=True)
    {'b': ['%an%']}
    """
    code = _code(sql)
    out: dict[str, list] = {}
    for i, tok in enumerate(code):
        value = _literal(tok, columns)
        if value is None or (i > 0 and code[i - 1].upper in ("LIKE", "GLOB")) != patterns:
            continue
        if tok.kind == "number" and i and code[i - 1].upper in ("LIMIT", "OFFSET"):
            continue  # a count of rows, not a value
        target = ""
        for j in range(i - 1, max(i - 16, -1), -1):
            prior = code[j]
            if _literal(prior, columns) is not None or prior.upper in _GLUE:
                continue
            target = _name(prior, columns) or ""
            break
        if tok.kind == "number" and i and code[i - 1].text == "-":
            value = -value  # type: ignore[operator]
        bucket = out.setdefault(target, [])
        if value not in bucket:
            bucket.append(value)
    return out


def between_bounds(sql: str, columns: set[str]) -> dict[str, list]:
    """The bounds of each ``BETWEEN`` of ``sql`` by the column it ranges over (lower-case names; ""
    when unknown): the values at which "between" read inclusively and read strictly differ.

    >>> between_bounds("SELECT year FROM cars WHERE T1.weight NOT BETWEEN -5 AND 4000.5", {"year", "weight"})
    {'weight': [-5, 4000.5]}
    """
    code = _code(sql)
    out: dict[str, list] = {}
    for i, tok in enumerate(code):
        if tok.upper != "BETWEEN":
            continue
        j = i - 1
        while j >= 0 and code[j].upper == "NOT":
            j -= 1
        bucket = out.setdefault((_name(code[j], columns) or "") if j >= 0 else "", [])
        found, sign = 0, 1
        for nxt in code[i + 1:]:
            value = _literal(nxt, columns)
            if value is None and nxt.text == "-":
                sign = -1
            elif value is not None:
                value = -value if sign < 0 and isinstance(value, (int, float)) else value
                if value not in bucket:
                    bucket.append(value)
                found, sign = found + 1, 1
            if found == 2 or (value is None and nxt.upper not in ("AND", "-")):
                break
    return {k: v for k, v in out.items() if v}


COMPARISONS = ("=", "==", "<", ">", "<=", ">=", "!=", "<>")


def comparisons_by_column(sql: str, columns: set[str]) -> dict[str, list[tuple[str, object]]]:
    """The comparisons ``column op literal`` of ``sql`` (lower-case column -> (op, value), each once):
    what a row must meet for the query to keep it, as far as one comparison tells.

    >>> comparisons_by_column('SELECT a FROM t WHERE t.b > 4 AND c = "x" AND b > 4', {"a", "b", "c"})
    {'b': [('>', 4)], 'c': [('=', 'x')]}
    """
    code = _code(sql)
    out: dict[str, list[tuple[str, object]]] = {}
    for name, op, lit in zip(code, code[1:], code[2:]):
        column, value = _name(name, columns), _literal(lit, columns)
        if column is not None and op.text in COMPARISONS and value is not None \
                and (op.text, value) not in out.get(column, []):
            out.setdefault(column, []).append((op.text, value))
    return out


def _one_table(words: list[str]) -> bool:
    return "JOIN" not in words and not any(w == "FROM" and i + 2 < len(words) and words[i + 2] == ","
                                           for i, w in enumerate(words))


def grouped_columns(sql: str, columns: set[str], links: set[str] | set[tuple[str, str]],
                    schema: Mapping[str, tuple[str, ...]] | None = None) -> set[str]:
    """Columns ``sql`` needs repeated: grouped by, with a HAVING on the groups (lower-case names).

    ``GROUP BY hometown HAVING count(*) >= 2`` only returns rows where hometowns repeat. Only a
    column of a one-table query, or a link column (``links``: a one-to-many link repeats its
    parent), counts; a name grouped across a join stays unique. With ``schema`` (table -> its
    columns, lower case), ``links`` are (table, column) pairs and a grouped column's table is read
    through the query's aliases: the airlines' ``T1.Airline`` (a name) is not the flights'
    ``Airline`` (a link) of the same name.

    >>> sorted(grouped_columns("SELECT city FROM t GROUP BY city HAVING count(*) > 1", {"city"}, set()))
    ['city']
    >>> grouped_columns("SELECT a.n FROM a JOIN b ON a.id = b.aid GROUP BY a.n HAVING count(*) > 1", {"n"}, set())
    set()
    >>> q = "SELECT T1.x FROM a AS T1 JOIN b AS T2 ON T1.id = T2.x GROUP BY T1.x HAVING count(*) > 1"
    >>> grouped_columns(q, {"x", "id"}, {"x"}), grouped_columns(q, {"x", "id"}, {("b", "x")}, {"a": ("id", "x"), "b": ("x",)})
    ({'x'}, set())
    """
    code = _code(sql)
    words = [t.upper for t in code]
    if "HAVING" not in words:
        return set()
    one = _one_table(words)
    if schema is not None:
        reading = difference_reading.read(sql, schema)
        return {column for (table, column), places in reading.mentions.items()
                if any(m.clause == "GROUP" for m in places) and (one or (table, column) in links)}
    found: set[str] = set()
    for i in range(len(code) - 1):
        if words[i] == "GROUP" and words[i + 1] == "BY":
            for tok in code[i + 2:]:
                if tok.upper in _GROUP_END:
                    break
                name = _name(tok, columns)
                if name and (one or name in links):
                    found.add(name)
    return found


def set_identity_columns(sql: str, columns: set[str]) -> set[str]:
    """Columns ``sql`` selects in an INTERSECT, EXCEPT or UNION: the identity of the things it
    intersects (lower-case names).

    >>> sorted(set_identity_columns("SELECT name FROM a INTERSECT SELECT name FROM b GROUP BY id", {"name", "id"}))
    ['name']
    """
    code = _code(sql)
    words = [t.upper for t in code]
    found: set[str] = set()
    if not any(w in ("INTERSECT", "EXCEPT", "UNION") for w in words):
        return found
    for i, word in enumerate(words):
        if word == "SELECT":
            for tok in code[i + 1:]:
                if tok.upper == "FROM":
                    break
                found |= {n for n in [_name(tok, columns)] if n}
    return found


def identity_columns(sql: str, columns: set[str]) -> set[str]:
    """Columns ``sql`` uses as the identity of what it lists: those it selects in an INTERSECT,
    EXCEPT or UNION, and those it groups by (lower-case names).

    >>> sorted(identity_columns("SELECT name FROM a INTERSECT SELECT name FROM b", {"name", "id"}))
    ['name']
    >>> sorted(identity_columns("SELECT name, count(*) FROM a GROUP BY id", {"name", "id"}))
    ['id']
    """
    code = _code(sql)
    words = [t.upper for t in code]
    found: set[str] = set()
    compound = any(w in ("INTERSECT", "EXCEPT", "UNION") for w in words)
    for i, word in enumerate(words):
        if compound and word == "SELECT":
            for tok in code[i + 1:]:
                if tok.upper == "FROM":
                    break
                found |= {n for n in [_name(tok, columns)] if n}
        if word == "GROUP" and i + 1 < len(words) and words[i + 1] == "BY":
            for tok in code[i + 2:]:
                if tok.upper in _GROUP_END:
                    break
                found |= {n for n in [_name(tok, columns)] if n}
    return found


def extreme_columns(sql: str, columns: set[str]) -> set[str]:
    """Columns ``sql`` takes the ``min`` or ``max`` of (lower-case names).

    >>> sorted(extreme_columns("SELECT min(T1.version), type FROM t AS T1", {"version", "type"}))
    ['version']
    """
    code = _code(sql)
    found: set[str] = set()
    for i in range(len(code) - 2):
        if code[i].upper in ("MIN", "MAX") and code[i + 1].text == "(":
            for tok in code[i + 2:]:
                if tok.text == ")":
                    break
                name = _name(tok, columns)
                if name:
                    found.add(name)
    return found


def sort_columns(sql: str, columns: set[str]) -> set[str]:
    """Columns ``sql`` orders by, at any level (lower-case names)."""
    code = _code(sql)
    found: set[str] = set()
    for i in range(len(code) - 1):
        if code[i].upper == "ORDER" and code[i + 1].upper == "BY":
            for tok in code[i + 2:]:
                if tok.upper in _ORDER_END:
                    break
                name = _name(tok, columns)
                if name:
                    found.add(name)
    return found


# ---- values near a literal ----------------------------------------------------------------------------

def near_numbers(values: list) -> list:
    """Numbers next to each given one: one either side, doubled, and zero."""
    out: list = [0]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        out += [v - 1, v + 1, v * 2] if isinstance(v, int) else [round(v - 1, 6), round(v + 1, 6), round(v * 2, 6)]
    return out


FILLERS = ("alpha", "omega")  # words around a LIKE pattern's part: made up, so that no original value is
# found inside a new text ('Brazil korea' would answer LIKE '%Brazil%' where the original has no such text)


def like_texts(pattern: str) -> list[str]:
    """Texts a LIKE pattern's parts show up in: the part alone, and between made-up words; none for a
    pattern without a wildcard (it matches its own text, case aside, and that is offered already).

    >>> like_texts("%an%"), like_texts("korea")
    (['an', 'alpha an', 'an omega', 'alpha an omega'], [])
    """
    if not re.search(r"[%_]", pattern):
        return []
    out = []
    for part in (p for p in re.split(r"[%_]+", pattern) if p):
        out += [part, f"{FILLERS[0]} {part}", f"{part} {FILLERS[1]}", f"{FILLERS[0]} {part} {FILLERS[1]}"]
    return out


def in_format(literal: str, shapes: tuple[str, ...], originals: list[str]) -> list[str]:
    """Values of a formatted column that begin with ``literal``: '2010' gives '2010-03-15' from '2008-03-15'."""
    want = shape(literal)
    return [literal + base[len(literal):] for base in originals[:5]
            if len(base) > len(literal) and shape(base).startswith(want)
            and shape(literal + base[len(literal):]) in shapes]


def _number(text: str) -> int | float | None:
    """``text`` as SQLite's numeric affinity reads it (a well-formed number, spaces aside), else None."""
    body = text.strip()
    if re.fullmatch(r"[+-]?\d+", body):
        return int(body)
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", body):
        return float(body)
    return None


def stored(value: object, declared: str) -> object:
    """``value`` as a column of type ``declared`` stores it (SQLite's type affinity).

    >>> stored("12", "INTEGER"), stored(12, "TEXT"), stored(3.0, "INT"), stored(3, "REAL"), stored("x", "INT")
    (12, '12', 3, 3.0, 'x')
    """
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    aff = affinity(declared)
    if aff == "text":
        return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    if aff not in ("integer", "numeric", "real"):
        return value
    if isinstance(value, str):
        number = _number(value)
        if number is None:
            return value
        value = number
    if aff == "real":
        return float(value)  # type: ignore[arg-type]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 63:
        return int(value)
    return value


def stored_kind(value: object, declared: str) -> str:
    """The storage class (``typeof``) ``value`` gets in a column of type ``declared``."""
    found = stored(value, declared)
    if found is None:
        return "null"
    if isinstance(found, (bytes, bytearray)):
        return "blob"
    if isinstance(found, str):
        return "text"
    return "real" if isinstance(found, float) else "integer"


def fits(col: ColumnFacts, value: object) -> bool:
    """Whether ``value`` keeps ``col``'s storage classes and text format (NULL: only where it has NULL)."""
    if value is None:
        return col.nulls
    if not col.kinds:
        return not col.nulls  # a column the original leaves all NULL stays so; an empty table's takes any
    kind = stored_kind(value, col.declared)
    if kind not in col.kinds:
        return False
    return not (col.shapes and kind == "text" and shape(str(value)) not in col.shapes)
