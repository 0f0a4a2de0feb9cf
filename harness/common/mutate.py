"""Mechanically mutated golds: near-misses a scorer must score 0.0 when they return different rows.

Three kinds of edit, each applied at its first site in the query (so a gold gives at most four):

* ``number``: the first numeric literal plus one (``LIMIT 1`` -> ``LIMIT 2``, ``age > 40`` -> ``age > 41``);
* ``text``: the first string literal with a character appended (``'dog'`` -> ``'dog#'``);
* ``where``: a WHERE clause loses its last AND-condition, or the whole clause when it has one;
* ``aggregate``: the first ``max``/``min``/``sum``/``avg`` swapped (max<->min, sum<->avg).

A mutation is only kept as a test case when SQLite says it returns other rows than the gold
(``differing_mutations``): two results count as the same when, after rounding numbers to 12
significant digits and ignoring row and column order, they hold the same bag of rows. That
comparison is more lenient than the scorer's, so a kept mutation must score 0.0. One exception to
"different rows": where the gold ends in ``LIMIT`` and rows tie on its ORDER BY keys, the scorer
lets any tied rows fill the limit, so a mutation returning as many rows, all among the gold's rows
without its LIMIT, may be right; such mutations are not kept.

Standard library only: it runs inside the trainer container during verification.

>>> [m.sql for m in mutations("SELECT name FROM pet WHERE age > 3 AND kind = 'dog'")]
["SELECT name FROM pet WHERE age > 4 AND kind = 'dog'", "SELECT name FROM pet WHERE age > 3 AND kind = 'dog#'", 'SELECT name FROM pet WHERE age > 3']
>>> [m.sql for m in mutations("SELECT max(T1.a) FROM t AS T1")]
['SELECT min(T1.a) FROM t AS T1']
"""

from __future__ import annotations

import collections
import dataclasses
import re
import sqlite3
import time
from pathlib import Path

# One token a match: comment, string, quoted name, number, word, or any other single character.
_TOKEN = re.compile(r"""
    (?P<comment>--[^\n]*|/\*.*?(?:\*/|$))
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])
  | (?P<number>(?<![\w.])(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?![\w.]))
  | (?P<word>[A-Za-z_][\w$]*)
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
_CLAUSE_END = {"GROUP", "ORDER", "LIMIT", "HAVING", "UNION", "INTERSECT", "EXCEPT", "WINDOW"}
_SWAP = {"max": "min", "min": "max", "sum": "avg", "avg": "sum"}


@dataclasses.dataclass(frozen=True)
class Mutation:
    kind: str  # number, text, where, aggregate
    sql: str


@dataclasses.dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    depth: int  # parenthesis depth before this token


def tokens(sql: str) -> list[_Tok]:
    out, depth = [], 0
    for match in _TOKEN.finditer(sql):
        kind, text = match.lastgroup or "other", match.group()
        if text == ")":
            depth = max(depth - 1, 0)
        out.append(_Tok(kind, text, depth))
        if text == "(":
            depth += 1
    return out


def _join(toks: list[_Tok]) -> str:
    return "".join(t.text for t in toks)


def _replace(toks: list[_Tok], i: int, text: str) -> str:
    return _join(toks[:i]) + text + _join(toks[i + 1:])


def _next_code(toks: list[_Tok], i: int) -> int | None:
    """Index of the next token after ``i`` that is not space or comment."""
    for j in range(i + 1, len(toks)):
        if toks[j].kind not in ("space", "comment"):
            return j
    return None


def _drop_where(toks: list[_Tok]) -> str | None:
    """The query without the last AND-condition of its first WHERE (or without the WHERE)."""
    start = next((i for i, t in enumerate(toks) if t.kind == "word" and t.text.upper() == "WHERE"), None)
    if start is None:
        return None
    depth, end, ands, between = toks[start].depth, len(toks), [], False
    for j in range(start + 1, len(toks)):
        t = toks[j]
        if t.depth < depth:  # the ")" closing the subquery this WHERE is in
            end = j
            break
        if t.depth == depth and t.kind == "word":
            word = t.text.upper()
            if word in _CLAUSE_END:
                end = j
                break
            if word == "BETWEEN":
                between = True  # its AND belongs to it, not to the condition list
            elif word == "AND" and between:
                between = False
            elif word == "AND":
                ands.append(j)
    cut = ands[-1] if ands else start
    tail = toks[end:]
    kept = _join(toks[:cut]).rstrip()
    return kept + (" " + _join(tail).lstrip() if tail else "")


def mutations(gold: str) -> list[Mutation]:
    """The mutated queries of a gold, at most one per kind, none equal to the gold."""
    toks = tokens(gold)
    out = []
    number = next((i for i, t in enumerate(toks) if t.kind == "number"), None)
    if number is not None:
        text = toks[number].text
        bumped = str(int(text) + 1) if text.isdigit() else repr(float(text) + 1.0)
        out.append(Mutation("number", _replace(toks, number, bumped)))
    string = next((i for i, t in enumerate(toks) if t.kind == "string"), None)
    if string is not None:
        out.append(Mutation("text", _replace(toks, string, toks[string].text[:-1] + "#'")))
    dropped = _drop_where(toks)
    if dropped is not None:
        out.append(Mutation("where", dropped))
    for i, t in enumerate(toks):
        nxt = _next_code(toks, i)
        if t.kind == "word" and t.text.lower() in _SWAP and nxt is not None and toks[nxt].text == "(":
            swapped = _SWAP[t.text.lower()]
            out.append(Mutation("aggregate", _replace(toks, i, swapped.upper() if t.text.isupper() else swapped)))
            break
    return [m for m in out if m.sql.strip() != gold.strip()]


class QueryUnusable(Exception):
    """The query failed, ran too long or returned too many rows: it says nothing about difference."""


def _value_key(value: object) -> tuple:
    if value is None:
        return (0, "")
    if isinstance(value, (int, float)):
        return (1, f"{float(value):.12g}")
    if isinstance(value, bytes):
        return (3, value.hex())
    return (2, str(value))


MAX_STEPS = 20_000_000  # SQLite VM steps a gold or mutation may take here (about a second)
WALL_GUARD_S = 120.0  # only against a machine far too slow; never reached on real golds


def result_bag(database: str | Path, sql: str, max_steps: int = MAX_STEPS,
               max_rows: int = 20_000) -> collections.Counter:
    """The query's rows as a bag of order-free rows (values sorted within each row), read-only.

    Raises QueryUnusable on an error, more than ``max_steps`` VM steps (counted, so the same on any
    machine at any load) or more than ``max_rows`` rows.
    """
    uri = "file:" + str(Path(database).resolve()) + "?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, cached_statements=0)
    deadline, calls = time.monotonic() + WALL_GUARD_S, [0]

    def meter() -> int:
        calls[0] += 1
        return 1 if calls[0] * 1000 > max_steps or time.monotonic() > deadline else 0

    conn.set_progress_handler(meter, 1000)
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchmany(max_rows + 1)
    except (sqlite3.Error, OverflowError, ValueError) as exc:
        raise QueryUnusable(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if len(rows) > max_rows:
        raise QueryUnusable(f"more than {max_rows} rows")
    return collections.Counter(tuple(sorted(_value_key(v) for v in row)) for row in rows)


def without_outer_limit(sql: str) -> str | None:
    """The query without its outermost ``LIMIT ...`` (None when it has none).

    >>> without_outer_limit("SELECT a FROM t ORDER BY b DESC LIMIT 1")
    'SELECT a FROM t ORDER BY b DESC'
    >>> without_outer_limit("SELECT a FROM (SELECT a FROM t LIMIT 2)") is None
    True
    """
    toks = tokens(sql)
    found = [i for i, t in enumerate(toks) if t.kind == "word" and t.depth == 0 and t.text.upper() == "LIMIT"]
    return _join(toks[:found[-1]]).rstrip() if found else None


def sorted_mutations(gold: str, database: str | Path, max_steps: int = MAX_STEPS) -> tuple[list[Mutation], list[Mutation]]:
    """(the mutations of ``gold`` that return other rows on ``database``, those returning the gold's).

    A mutation that fails, runs over ``max_steps`` or may fill a tied LIMIT (module docstring) is
    in neither list: it says nothing about difference.
    """
    try:
        original = result_bag(database, gold, max_steps)
        unlimited_sql = without_outer_limit(gold)
        unlimited = result_bag(database, unlimited_sql, max_steps) if unlimited_sql else None
    except QueryUnusable:
        return [], []
    differing, same = [], []
    for mutation in mutations(gold):
        try:
            rows = result_bag(database, mutation.sql, max_steps)
        except QueryUnusable:
            continue
        may_fill_tie = (unlimited is not None and sum(rows.values()) == sum(original.values())
                        and not rows - unlimited)
        if rows == original:
            same.append(mutation)
        elif not may_fill_tie:
            differing.append(mutation)
    return differing, same


def differing_mutations(gold: str, database: str | Path, max_steps: int = MAX_STEPS) -> list[Mutation]:
    """The mutations of ``gold`` that run and return rows different from the gold's on ``database``."""
    return sorted_mutations(gold, database, max_steps)[0]
