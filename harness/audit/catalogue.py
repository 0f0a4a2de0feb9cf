"""The catalogue of degenerate answers: what a policy could learn to write instead of the query.

Each policy turns a gold (its text, and its rows on the original database) into zero or more
candidate answers. A policy *applies* to a row when it gives at least one candidate; it is *paid*
on the row when the bundle scores one of them 1.0 (and a witness shows it wrong,
harness.audit.witnesses). The edits of the gold's text are sqlparse's (harness.audit.sqledit).

>>> gold = GoldRows(columns=1, rows=((6,),))
>>> [(c.policy, c.sql) for c in candidates("SELECT count(*) FROM singer", gold, ["singer", "concert"])
...  if c.policy in ("value", "table_count", "empty")]
[('value', 'SELECT 6'), ('table_count', 'SELECT count(*) FROM "concert"'), ('empty', 'SELECT NULL WHERE 0')]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from sqlparse import tokens as T

from harness.audit.sqledit import Query, tokenize

MAX_LITERAL_ROWS = 20  # the gold's own rows are written out as literals up to this many


@dataclasses.dataclass(frozen=True)
class Policy:
    """One degenerate answer: its name (the JSON key), the table's label, and the rows it applies to."""

    name: str
    label: str
    applies: str


# The table's rows, in order: the seven first, then the others a policy could learn.
POLICIES: tuple[Policy, ...] = (
    Policy("no_distinct", "the gold with its DISTINCT removed", "golds with DISTINCT (in SELECT or an aggregate)"),
    Policy("no_where", "the gold without its WHERE", "golds with a WHERE"),
    Policy("no_limit", "the gold without its LIMIT", "golds with a LIMIT"),
    Policy("order_flipped", "the gold with ORDER BY flipped", "golds with an ORDER BY"),
    Policy("value", "SELECT <the gold's value on the original database>", "one-row golds"),
    Policy("table_count", "the count of some table", "golds of one row and one column"),
    Policy("empty", "an empty answer with the right column count", "every gold"),
    Policy("constant", "a constant row (SELECT 0 or SELECT 1, the gold's column count)", "one-row golds"),
    Policy("literal_rows", f"the gold's own rows as literals (2 to {MAX_LITERAL_ROWS} rows)",
           f"golds of 2 to {MAX_LITERAL_ROWS} rows"),
    Policy("select_star", "SELECT * of a table the gold reads", "golds that read a table"),
    Policy("no_join", "the gold with one JOIN dropped", "golds with a JOIN"),
    Policy("no_group_by", "the gold without its GROUP BY (and HAVING)", "golds with a GROUP BY"),
    Policy("count_star", "count(*) for count(DISTINCT ...)", "golds with count(DISTINCT ...)"),
    Policy("comparison_flipped", "one comparison of a WHERE or HAVING reversed", "golds with a comparison"),
    Policy("condition_dropped", "one AND-condition of a WHERE dropped", "golds with two or more conditions"),
    Policy("no_order_by", "the gold without its ORDER BY", "golds with an ORDER BY"),
    Policy("aggregate_swapped", "max/min or sum/avg swapped", "golds with max, min, sum or avg"),
)
POLICY_NAMES = tuple(p.name for p in POLICIES)
FIRST_SEVEN = POLICY_NAMES[:7]  # the policies of issue 21's table, whose union the table also gives


@dataclasses.dataclass(frozen=True)
class GoldRows:
    """What the gold returns on the original database: its column count and rows (None: not read)."""

    columns: int
    rows: tuple[tuple, ...] | None


@dataclasses.dataclass(frozen=True)
class Candidate:
    policy: str
    sql: str


def literal(value: object) -> str:
    """``value`` as an SQL literal that SQLite reads back as the same value.

    >>> [literal(v) for v in (None, 3, 2.5, "it's", b"\\x01", float("inf"), "a\\x00")]
    ['NULL', '3', '2.5', "'it''s'", "X'01'", '9e999', "CAST(X'6100' AS TEXT)"]
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NULL"  # SQLite has no NaN: it stores NULL
        return repr(value) if math.isfinite(value) else ("9e999" if value > 0 else "-9e999")
    if isinstance(value, bytes):
        return "X'" + value.hex().upper() + "'"
    text = str(value)
    if "\x00" in text:  # no SQL text may hold NUL: spelled as its UTF-8 bytes, read back as text
        return "CAST(X'" + text.encode("utf-8").hex().upper() + "' AS TEXT)"
    return "'" + text.replace("'", "''") + "'"


def _row(values: tuple) -> str:
    return "SELECT " + ", ".join(literal(v) for v in values)


def _data_answers(gold: GoldRows, tables: list[str]) -> dict[str, list[str]]:
    """The answers that only repeat the gold's rows or shape (they need no edit of its text)."""
    width = max(gold.columns, 1)
    out: dict[str, list[str]] = {"empty": ["SELECT " + ", ".join(["NULL"] * width) + " WHERE 0"]}
    rows = gold.rows
    if rows is not None and len(rows) == 1:
        out["value"] = [_row(rows[0])]
        out["constant"] = [_row((k,) * width) for k in (0, 1)]
        if width == 1:
            out["table_count"] = [f'SELECT count(*) FROM "{t}"' for t in tables]
    if rows is not None and 2 <= len(rows) <= MAX_LITERAL_ROWS:
        out["literal_rows"] = [" UNION ALL ".join(_row(r) for r in rows)]
    return out


_EDITS: dict[str, Callable[[Query], list[str]]] = {
    "no_distinct": Query.without_distinct,
    "no_where": lambda q: q.without_clause("WHERE"),
    "no_limit": lambda q: q.without_clause("LIMIT"),
    "order_flipped": Query.order_flipped,
    "no_join": Query.joins_dropped,
    "no_group_by": lambda q: q.without_clause("GROUP BY"),
    "count_star": Query.count_star,
    "comparison_flipped": Query.comparisons_flipped,
    "condition_dropped": Query.conditions_dropped,
    "no_order_by": lambda q: q.without_clause("ORDER BY"),
    "aggregate_swapped": Query.aggregates_swapped,
}


def _normal(sql: str) -> tuple[str, ...]:
    """The query's code tokens, keywords upper-cased and names unquoted in lower case: two texts of
    one query (``FROM singer`` and ``FROM "singer"``) are one candidate, and the gold is none."""
    return tuple(tok.word or (tok.text.strip('"`[]').lower() if tok.ttype in T.Name or tok.ttype in T.String.Symbol
                                else tok.text)
                 for tok in tokenize(sql) if tok.code and tok.text != ";")


def candidates(gold: str, rows: GoldRows, tables: list[str]) -> list[Candidate]:
    """Every policy's candidates for ``gold``, in POLICIES order; none is the gold's text, none repeats in a policy.

    ``tables``: the database's tables (for ``table_count``).
    """
    query = Query(gold)
    found = {name: edit(query) for name, edit in _EDITS.items()}
    found["select_star"] = [f'SELECT * FROM "{t}"' for t in query.from_tables()]
    found.update(_data_answers(rows, tables))
    out = []
    for policy in POLICY_NAMES:
        seen = {_normal(gold)}
        for sql in found.get(policy, []):
            if _normal(sql) not in seen:
                seen.add(_normal(sql))
                out.append(Candidate(policy, sql))
    return out
