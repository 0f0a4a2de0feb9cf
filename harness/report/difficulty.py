"""Spider's difficulty levels (easy, medium, hard, extra) from the gold SQL, read with sqlparse.

The levels follow the published Spider evaluation (``eval_hardness`` of the official
``evaluation.py``), which counts three things on the outermost query:

* **component 1**: WHERE, GROUP BY, ORDER BY, LIMIT (one each when present), one per JOIN (tables
  in FROM minus one), one per OR and one per LIKE among the conditions of ON, WHERE and HAVING;
* **component 2**: nested queries used as condition values (``x IN (SELECT ...)``) in ON, WHERE
  and HAVING, plus one for a set operation (UNION, INTERSECT or EXCEPT);
* **others**: one each for more than one aggregation, more than one selected column, more than one
  WHERE condition, more than one GROUP BY column.

The official script counts on its own parse tree, and that tree gives "aggregation" a reading this
module keeps on purpose, so that levels agree with published per-level figures: a WHERE condition
counts as an aggregation when it is negated (``NOT IN``, ``NOT LIKE``), a HAVING clause adds one
per negated condition and one per AND/OR joining its conditions (its aggregate itself does not
count), a SELECT item counts when it starts with an aggregate, ORDER BY counts each aggregate of
its expressions. On Spider's dev set this gives the published 248 / 446 / 174 / 166 queries
(tests/test_difficulty.py checks every query against Spider's own parse when the data is present).

>>> difficulty("SELECT count(*) FROM singer")
'easy'
>>> difficulty("SELECT name, age FROM singer WHERE age > 30")
'medium'
>>> difficulty("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)")
'hard'
>>> difficulty("SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.id = T2.id "
...            "GROUP BY T1.stadium_id ORDER BY count(*) DESC LIMIT 1")
'extra'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import sqlparse
from sqlparse import tokens as T

LEVELS = ("easy", "medium", "hard", "extra")
AGGREGATES = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX"})
SET_OPERATIONS = frozenset({"UNION", "UNION ALL", "INTERSECT", "EXCEPT"})
CLAUSES = ("SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT")


class DifficultyError(ValueError):
    """The SQL text is not a query these rules can classify (empty, not a SELECT, unbalanced)."""


@dataclasses.dataclass(frozen=True)
class Tok:
    """A significant token: upper-cased value and whether it can be a keyword."""

    value: str
    keyword: bool  # keyword or operator (names and strings never count as clause words)


@dataclasses.dataclass(frozen=True)
class Condition:
    negated: bool
    like: bool
    nested: int  # sub-queries among its values


@dataclasses.dataclass(frozen=True)
class Counts:
    """The three counts ``eval_hardness`` compares."""

    component1: int
    component2: int
    others: int


def _tokens(sql: str) -> list[Tok]:
    out = []
    for ttype, value in sqlparse.lexer.tokenize(sql):
        if ttype in T.Whitespace or ttype in T.Comment or ttype in T.Newline:
            continue
        keyword = ttype in T.Keyword or ttype in T.Operator
        # collapse "GROUP   BY" / "LEFT\nJOIN" so clause words compare by value
        out.append(Tok(" ".join(value.upper().split()) if keyword else value.upper(), keyword))
    return out


def _depths(toks: list[Tok]) -> list[int]:
    """Parenthesis depth of each token (a parenthesis itself sits at the outer depth)."""
    depth, out = 0, []
    for tok in toks:
        if tok.value == ")":
            depth -= 1
            if depth < 0:
                raise DifficultyError("unbalanced parentheses")
        out.append(depth)
        if tok.value == "(":
            depth += 1
    if depth:
        raise DifficultyError("unbalanced parentheses")
    return out


def _split(toks: list[Tok], is_separator: Callable[[Tok], bool]) -> Iterator[list[Tok]]:
    """Top-level (depth-0) pieces of ``toks`` between separators."""
    depths, piece = _depths(toks), list[Tok]()
    for tok, depth in zip(toks, depths):
        if depth == 0 and is_separator(tok):
            yield piece
            piece = []
        else:
            piece.append(tok)
    yield piece


def _word(*words: str) -> Callable[[Tok], bool]:
    return lambda tok: tok.keyword and tok.value in words


def _is_join(tok: Tok) -> bool:
    return tok.keyword and tok.value.endswith("JOIN")


def _aggregate_calls(toks: list[Tok]) -> int:
    """Aggregate function calls at depth 0 (``count(*) + max(x)`` -> 2)."""
    depths = _depths(toks)
    return sum(1 for i, tok in enumerate(toks[:-1])
               if depths[i] == 0 and tok.value in AGGREGATES and toks[i + 1].value == "(")


def _starts_with_aggregate(toks: list[Tok]) -> bool:
    return len(toks) > 1 and toks[0].value in AGGREGATES and toks[1].value == "("


def _subqueries(toks: list[Tok]) -> int:
    """Parenthesised SELECTs directly inside ``toks`` (values such as ``IN (SELECT ...)``)."""
    depths = _depths(toks)
    return sum(1 for i, tok in enumerate(toks[:-1])
               if depths[i] == 0 and tok.value == "(" and toks[i + 1].value == "SELECT")


def _conditions(toks: list[Tok]) -> tuple[list[Condition], list[str]]:
    """Conditions and the AND/OR words joining them; BETWEEN's own AND stays in its condition."""
    conds: list[Condition] = []
    joiners: list[str] = []
    current: list[Tok] = []
    between_open = False
    for tok, depth in zip(toks, _depths(toks)):
        at_top = depth == 0 and tok.keyword
        if at_top and tok.value == "BETWEEN":
            between_open = True
        elif at_top and tok.value == "AND" and between_open:
            between_open = False
        elif at_top and tok.value in ("AND", "OR"):
            conds.append(_condition(current))
            joiners.append(tok.value)
            current = []
            continue
        current.append(tok)
    if current:
        conds.append(_condition(current))
    return conds, joiners


def _condition(toks: list[Tok]) -> Condition:
    depths = _depths(toks)
    top = [t for t, d in zip(toks, depths) if d == 0 and t.keyword]
    # NOT IN / NOT LIKE / NOT BETWEEN negate the operator; "IS NOT NULL" is lexed as one word
    negated = any(t.value == "NOT" or (t.value.startswith("NOT ") and t.value != "NOT NULL") for t in top)
    like = any(t.value in ("LIKE", "NOT LIKE") for t in top)
    return Condition(negated, like, min(_subqueries(toks), 2))


def _strip_outer_parentheses(toks: list[Tok]) -> list[Tok]:
    while len(toks) >= 2 and toks[0].value == "(" and toks[-1].value == ")" and \
            all(d > 0 for d in _depths(toks)[1:-1]):
        toks = toks[1:-1]
    return toks


def _clauses(toks: list[Tok]) -> dict[str, list[Tok]]:
    """The outermost query's clauses, by name, without their keyword."""
    depths = _depths(toks)
    found: dict[str, list[Tok]] = {}
    name = None
    for tok, depth in zip(toks, depths):
        if depth == 0 and tok.keyword and tok.value in CLAUSES and tok.value not in found:
            name = tok.value
            found[name] = []
        elif name is not None:
            found[name].append(tok)
    if "SELECT" not in found or (toks and toks[0].value != "SELECT"):
        raise DifficultyError("not a SELECT query")
    return found


def _from_parts(toks: list[Tok]) -> tuple[int, list[Tok]]:
    """Number of table units in FROM and the tokens of its ON conditions (joined with AND)."""
    units, on_tokens = 0, list[Tok]()
    for unit in _split(toks, lambda t: _is_join(t) or t.value == ","):
        units += 1
        pieces = list(_split(unit, _word("ON")))
        for on in pieces[1:]:
            if on_tokens:
                on_tokens.append(Tok("AND", True))
            on_tokens.extend(on)
    return units, on_tokens


def count_components(sql: str) -> Counts:
    """The component counts of the outermost query of ``sql`` (module docstring)."""
    toks = _tokens(sql.strip().rstrip(";"))
    while toks and toks[-1].value == ";":
        toks = toks[:-1]
    toks = _strip_outer_parentheses(toks)
    if not toks:
        raise DifficultyError("empty query")
    parts = list(_split(toks, lambda t: t.keyword and t.value in SET_OPERATIONS))
    clause = _clauses(_strip_outer_parentheses(parts[0]))
    tables, on_tokens = _from_parts(clause.get("FROM", []))
    on_conds, on_join = _conditions(on_tokens) if on_tokens else ([], [])
    where, where_join = _conditions(clause["WHERE"]) if "WHERE" in clause else ([], [])
    having, having_join = _conditions(clause["HAVING"]) if "HAVING" in clause else ([], [])
    select = list(_split(_skip_distinct(clause["SELECT"]), lambda t: t.value == ","))
    group = list(_split(clause["GROUP BY"], lambda t: t.value == ",")) if "GROUP BY" in clause else []
    order = list(_split(clause["ORDER BY"], lambda t: t.value == ",")) if "ORDER BY" in clause else []
    conds = on_conds + where + having
    component1 = sum(name in clause for name in ("WHERE", "GROUP BY", "ORDER BY", "LIMIT"))
    component1 += max(tables - 1, 0)
    component1 += (on_join + where_join + having_join).count("OR") + sum(c.like for c in conds)
    component2 = sum(c.nested for c in conds) + (1 if len(parts) > 1 else 0)
    aggregations = (sum(_starts_with_aggregate(i) for i in select) + sum(c.negated for c in where)
                    + sum(_starts_with_aggregate(i) for i in group)
                    + sum(min(_aggregate_calls(i), 2) for i in order)
                    + sum(c.negated for c in having) + len(having_join))
    others = sum((aggregations > 1, len(select) > 1, len(where) > 1, len(group) > 1))
    return Counts(component1, component2, others)


def _skip_distinct(toks: list[Tok]) -> list[Tok]:
    return toks[1:] if toks and toks[0].keyword and toks[0].value == "DISTINCT" else toks


def level_of(counts: Counts) -> str:
    """The level ``eval_hardness`` gives these counts.

    >>> level_of(Counts(component1=1, component2=0, others=0))
    'easy'
    >>> level_of(Counts(component1=1, component2=1, others=0))
    'hard'
    """
    c1, c2, others = counts.component1, counts.component2, counts.others
    if c1 <= 1 and others == 0 and c2 == 0:
        return "easy"
    if (others <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and others < 2 and c2 == 0):
        return "medium"
    if (others > 2 and c1 <= 2 and c2 == 0) or (2 < c1 <= 3 and others <= 2 and c2 == 0) or \
            (c1 <= 1 and others == 0 and c2 <= 1):
        return "hard"
    return "extra"


def difficulty(sql: str) -> str:
    """Spider's level of a gold query: easy, medium, hard or extra. DifficultyError if unreadable."""
    return level_of(count_components(sql))
