"""Where an answer differs from its gold, read from the two texts: what the search aimed at it edits.

Nothing here knows a family of near misses. Each query is read into the columns it mentions, each
mention with its place (the clause, the function around it, the operator and literal beside it),
the tables it reads and its literals; ``difference`` then compares the two readings:

* a column whose places differ (used by one query only, compared otherwise, grouped by in one and
  not the other, summed in one and counted in the other...) is a *lane* of the search, with the
  literals either query compares it with, the ones the two do not share first;
* the tables either query reads, the gold's first, are where rows are added and removed;
* the columns both use alike come last: an answer may differ where the texts agree (a constant
  answer mentions nothing, so every column the gold uses is a lane of it).

The reading is lexical (``sql.text``), linear in the text and never raises: a text it cannot
follow gives fewer lanes, never a wrong verdict (an edit only ever shows a difference that is there).

>>> names = {"rooms": ("roomid", "bedtype", "beds"), "reservations": ("room", "kids")}
>>> d = difference("SELECT sum(beds) FROM rooms WHERE bedtype = 'King'",
...                "SELECT sum(beds) FROM rooms WHERE bedtype LIKE '%King%'", names)
>>> [(lane.table, lane.column, lane.literals) for lane in d.lanes]
[('rooms', 'bedtype', ('%King%', 'King'))]
>>> d.tables, [(s.table, s.column) for s in d.shared]
(('rooms',), [('rooms', 'beds')])
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import NamedTuple

from . import text as sql_text

_CLAUSES = {"SELECT", "FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "ON", "JOIN", "UNION", "INTERSECT",
            "EXCEPT", "USING"}
_FROM_END = {"WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "UNION", "INTERSECT", "EXCEPT", "ON", "USING", ")",
             "WINDOW", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL", "OUTER"}
_NOT_ALIAS = _FROM_END | {"AS", ",", "(", "SELECT"}
_OPERATORS = {"=", "==", "!=", "<>", "<", ">", "<=", ">=", "LIKE", "GLOB", "IN", "BETWEEN", "IS", "NOT", "+", "-",
              "*", "/", "%", "||", "AND", "OR", "DESC", "ASC", "DISTINCT", "EXISTS"}
MAX_TOKENS = 4_000  # longer texts are read up to here (a real query is far shorter)


class Mention(NamedTuple):
    """One place a query uses a column: its clause, the function around it, what is beside it."""

    clause: str
    function: str
    before: str
    after: str
    literal: object


class Reading(NamedTuple):
    tables: tuple[str, ...]  # tables read, in order of first mention (lower case)
    mentions: dict[tuple[str, str], list[Mention]]  # (table, column) -> its places
    literals: dict[tuple[str, str], list]  # (table, column) -> literals compared with it (patterns too)
    words: collections.Counter  # keywords, functions and operators: the query's shape


class Lane(NamedTuple):
    """A column the search edits: its table, its name and the literals either query compares it with."""

    table: str
    column: str
    literals: tuple


class Difference(NamedTuple):
    lanes: tuple[Lane, ...]  # columns whose places differ, the most different first
    tables: tuple[str, ...]  # tables either query reads, the gold's first
    shared: tuple[Lane, ...]  # columns both use alike
    shape_differs: bool  # keywords, functions or operators differ (DISTINCT, LIMIT, count, JOIN...)

    def key(self) -> tuple:
        """What the edits depend on: two answers with the same key get the same edits."""
        return (self.lanes, self.tables, self.shared, self.shape_differs)


def _literal(tok: sql_text.Token, columns: set[str]) -> object:
    if tok.kind == "string":
        return tok.text[1:-1].replace("''", "'")
    if tok.kind == "quoted" and tok.text.startswith('"') and tok.text[1:-1].lower() not in columns:
        return tok.text[1:-1].replace('""', '"')
    if tok.kind == "number" and not tok.text.lower().startswith("0x"):
        try:
            return int(tok.text) if tok.text.isdigit() else float(tok.text)
        except ValueError:
            return None
    return None


def _name(tok: sql_text.Token) -> str | None:
    if tok.kind == "word":
        return tok.text.lower()
    if tok.kind == "quoted":
        return tok.text[1:-1].lower()
    return None


def read(sql: str, schema: Mapping[str, tuple[str, ...]]) -> Reading:
    """The tables, column places, literals and shape of ``sql`` (``schema``: table -> its columns,
    lower case)."""
    code = sql_text.code_tokens(sql)[:MAX_TOKENS]
    all_columns = {c for cols in schema.values() for c in cols}
    tables, aliases = _tables(code, schema)
    mentions: dict[tuple[str, str], list[Mention]] = {}
    literals: dict[tuple[str, str], list] = {}
    words: collections.Counter = collections.Counter()
    clause, functions = "SELECT", ["", ]
    for i, tok in enumerate(code):
        upper = tok.upper
        if tok.kind == "word" and upper in _CLAUSES:
            clause = upper
        if tok.text == "(":
            functions.append(code[i - 1].upper if i and code[i - 1].kind == "word" else "")
        elif tok.text == ")" and len(functions) > 1:
            functions.pop()
        if tok.kind == "word" and (upper in _OPERATORS or upper in _CLAUSES or (i + 1 < len(code)
                                                                               and code[i + 1].text == "(")):
            words[upper] += 1
        elif tok.kind == "op" and upper in _OPERATORS:
            words[upper] += 1
        elif tok.kind == "number" and i and code[i - 1].upper in ("LIMIT", "OFFSET"):
            words[f"{code[i - 1].upper} {tok.text}"] += 1
        name = _name(tok)
        if name is None or name not in all_columns or (i + 1 < len(code) and code[i + 1].text in (".", "(")):
            continue
        qualifier = _name(code[i - 2]) if i >= 2 and code[i - 1].text == "." else None
        owners = _owners(name, qualifier, tables, aliases, schema)
        before = code[i - 3 if qualifier else i - 1].upper if i - (3 if qualifier else 1) >= 0 else ""
        after, literal = (code[i + 1].upper, None) if i + 1 < len(code) else ("", None)
        for j in range(i + 1, min(i + 5, len(code))):
            literal = _literal(code[j], all_columns)
            if literal is not None or code[j].upper not in _OPERATORS:
                break
        mention = Mention(clause, functions[-1], before, after, literal)
        for table in owners:
            mentions.setdefault((table, name), []).append(mention)
            if literal is not None:
                bucket = literals.setdefault((table, name), [])
                if literal not in bucket:
                    bucket.append(literal)
    return Reading(tuple(tables), mentions, literals, words)


def _tables(code: list[sql_text.Token], schema: Mapping[str, tuple[str, ...]]) -> tuple[list[str], dict[str, str]]:
    """The tables a query reads (after FROM and JOIN, in FROM lists) and its aliases (alias -> table)."""
    tables: list[str] = []
    aliases: dict[str, str] = {}
    for i, tok in enumerate(code):
        if tok.upper not in ("FROM", "JOIN", ","):
            continue
        if tok.text == "," and not _in_from(code, i):
            continue
        name = _name(code[i + 1]) if i + 1 < len(code) else None
        if name is None or name not in schema:
            continue
        if name not in tables:
            tables.append(name)
        j = i + 2
        if j < len(code) and code[j].upper == "AS":
            j += 1
        alias = _name(code[j]) if j < len(code) and code[j].upper not in _NOT_ALIAS else None
        if alias:
            aliases[alias] = name
    return tables, aliases


def _in_from(code: list[sql_text.Token], i: int) -> bool:
    """Whether the comma at ``i`` separates tables of a FROM list (the nearest clause word before it is FROM)."""
    depth = 0
    for j in range(i - 1, -1, -1):
        text = code[j].upper
        if text == ")":
            depth += 1
        elif text == "(":
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and code[j].kind == "word" and text in _CLAUSES | {"FROM"}:
            return text in ("FROM", "JOIN")
    return False


def _owners(name: str, qualifier: str | None, tables: list[str], aliases: dict[str, str],
            schema: Mapping[str, tuple[str, ...]]) -> list[str]:
    if qualifier is not None:
        table = aliases.get(qualifier, qualifier)
        if table in schema and name in schema[table]:
            return [table]
    found = [t for t in tables if name in schema[t]]
    return found or [t for t in schema if name in schema[t]][:1]


def difference(gold: str | Reading, answer: str, schema: Mapping[str, tuple[str, ...]]) -> Difference:
    """Where ``answer`` differs from ``gold`` (module docstring; ``gold`` may be given read already:
    ``read``); deterministic in the two texts."""
    one, two = gold if isinstance(gold, Reading) else read(gold, schema), read(answer, schema)
    scored = []
    keys = sorted(set(one.mentions) | set(two.mentions))
    for key in keys:
        a, b = collections.Counter(one.mentions.get(key, ())), collections.Counter(two.mentions.get(key, ()))
        if a == b:
            continue
        only = not a or not b  # used by one query only
        literal_a, literal_b = set(map(repr, one.literals.get(key, ()))), set(map(repr, two.literals.get(key, ())))
        scored.append((0 if only else 1 if literal_a != literal_b else 2, key))
    different = [key for _rank, key in sorted(scored)]
    lanes = tuple(Lane(t, c, _literals(one, two, (t, c))) for t, c in different)
    shared = tuple(Lane(t, c, _literals(one, two, (t, c))) for t, c in keys if (t, c) not in different)
    tables = tuple(dict.fromkeys(list(one.tables) + list(two.tables)))
    return Difference(lanes, tables, shared, one.words != two.words)


def _literals(one: Reading, two: Reading, key: tuple[str, str]) -> tuple:
    """The literals either query compares a column with: those only one of them has first, in a
    fixed order (by kind, then by text)."""
    a, b = one.literals.get(key, []), two.literals.get(key, [])
    distinct = [v for v in a if v not in b] + [v for v in b if v not in a]
    common = [v for v in a if v in b]
    order = lambda v: (type(v).__name__, repr(v))  # noqa: E731
    return tuple(sorted(distinct, key=order) + sorted(common, key=order))


_SELECT_END = {"GROUP", "ORDER", "LIMIT", "HAVING", "UNION", "INTERSECT", "EXCEPT", "WINDOW"}


def provenance(gold: str, schema: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """(table, SQL) pairs whose SQL lists the rowids of the rows of ``table`` each SELECT of ``gold``
    at its outermost level reads through its FROM and WHERE: the rows its answer comes from (a
    row copied from them is a second answer, one changed moves an answer). Nested queries are not
    followed; a text it cannot follow gives none.

    >>> for table, sql in provenance("SELECT T1.a FROM t AS T1 JOIN u ON T1.a = u.a WHERE T1.b > 2 ORDER BY 1",
    ...                              {"t": ("a", "b"), "u": ("a",)}):
    ...     print(table, sql)
    t SELECT DISTINCT t1.rowid FROM t AS T1 JOIN u ON T1.a = u.a WHERE T1.b > 2 ORDER BY 1 LIMIT 4
    u SELECT DISTINCT u.rowid FROM t AS T1 JOIN u ON T1.a = u.a WHERE T1.b > 2 ORDER BY 1 LIMIT 4
    """
    code = sql_text.code_tokens(gold)[:MAX_TOKENS]
    out: list[tuple[str, str]] = []
    depth, start = 0, None
    for i, tok in enumerate(code + [sql_text.Token("op", ";", len(gold))]):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        if depth:
            continue
        if tok.upper == "FROM" and start is None:
            start = i
        elif start is not None and (tok.text == ";" or (tok.kind == "word" and tok.upper in _SELECT_END)):
            out += _rowids(gold, code[start:i], schema)
            start = None
    return out


def _rowids(gold: str, clause: list[sql_text.Token], schema: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """The provenance queries of one FROM ... WHERE span (``provenance``)."""
    if not clause:
        return []
    tables, aliases = _tables(clause, schema)
    text = gold[clause[0].start:clause[-1].end]
    named = {table: alias for alias, table in aliases.items()}
    out = []
    for table in tables:
        ref = named.get(table, table)
        if not ref.replace("_", "").isalnum():
            continue
        out.append((table, f"SELECT DISTINCT {ref}.rowid {text} ORDER BY 1 LIMIT 4"))
    return out
