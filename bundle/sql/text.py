"""A small, linear-time SQLite tokenizer and the structure of a query's outermost level.

The scorer never decides what is *allowed* from the text (SQLite's authorizer does that); the text
is read only to cut a query out of model output and to find the outermost ORDER BY and LIMIT of a
gold query, which decide whether row order counts.

>>> [t.text for t in tokenize("SELECT 'a;b' -- c\\n;") if t.kind != "space"]
['SELECT', "'a;b'", '-- c\\n', ';']
>>> outer_clauses("SELECT a FROM t ORDER BY a DESC, b LIMIT 3").order_terms
('a', 'b')
"""

from __future__ import annotations

import dataclasses
import re

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*(?:\n|\Z)|/\*(?:[^*]|\*(?!/))*(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<quoted>"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z))
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|0[xX][0-9a-fA-F]+)
  | (?P<word>[^\W\d]\w*|[$@:?#]\w*)
  | (?P<op>\|\||<<|>>|<=|>=|==|!=|<>|->>|->|.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str  # space, comment, string, quoted, number, word, op
    text: str
    start: int

    @property
    def upper(self) -> str:
        return self.text.upper()

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokenize(sql: str) -> list[Token]:
    """Every character of ``sql`` belongs to exactly one token; never raises."""
    return [Token(m.lastgroup or "op", m.group(), m.start()) for m in _TOKEN.finditer(sql)]


def code_tokens(sql: str) -> list[Token]:
    """Tokens without whitespace and comments."""
    return [t for t in tokenize(sql) if t.kind not in ("space", "comment")]


_END_CANDIDATE = re.compile(r";|\n[ \t\r\f\v]*\n")
_QUOTES_OR_COMMENTS = re.compile(r"['\"`\[]|--|/\*")
# What can hide an end (strings, quoted names, comments, matched whole) or be one (groups 1, 2).
_END_SCAN = re.compile(
    r"""'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
    r"""|--[^\n]*(?:\n|\Z)|/\*(?:[^*]|\*(?!/))*(?:\*/|\Z)|(;)|(\n[ \t\r\f\v]*\n)""",
    re.DOTALL,
)


def statement_end(sql: str) -> int:
    """Index where the first statement ends: its first top-level ';' or blank line, else len(sql).

    Semicolons and blank lines inside strings, quoted names and comments do not count (the same
    reading as ``tokenize``, without building tokens).

    >>> statement_end("SELECT 1;\\nSELECT 2")
    8
    >>> statement_end("SELECT ';' -- ;\\n; x")
    16
    """
    candidate = _END_CANDIDATE.search(sql)
    if candidate is None:
        return len(sql)
    if _QUOTES_OR_COMMENTS.search(sql, 0, candidate.start()) is None:
        return candidate.start()  # nothing before it could hide it: the common case
    for found in _END_SCAN.finditer(sql):
        if found.lastindex:
            return found.start()
    return len(sql)


_COMPOUND = {"UNION", "INTERSECT", "EXCEPT"}
_CLAUSE_AFTER_SELECT_LIST = {"FROM", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT"}


@dataclasses.dataclass(frozen=True)
class OuterClauses:
    """Where the outermost query's parts are, as character offsets into the text."""

    order_terms: tuple[str, ...]  # ORDER BY expressions without ASC/DESC/COLLATE/NULLS
    is_compound: bool  # UNION / INTERSECT / EXCEPT at the outermost level
    select_list_end: int | None  # where extra result columns can be inserted (simple SELECT only)
    limit_start: int | None  # offset of the outermost LIMIT keyword
    limit: int | None  # LIMIT count when it is an integer literal
    offset: int  # OFFSET when it is an integer literal (0 otherwise)


def _depth0(tokens: list[Token]) -> list[tuple[int, Token]]:
    depth, out = 0, []
    for i, tok in enumerate(tokens):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append((i, tok))
    return out


def _strip_order_term(sql: str, toks: list[Token]) -> str:
    # Drop trailing ASC / DESC / NULLS FIRST|LAST / COLLATE name: they order, they are not the key.
    while toks:
        last = toks[-1].upper
        if last in ("ASC", "DESC", "FIRST", "LAST", "NULLS"):
            toks = toks[:-1]
        elif len(toks) >= 2 and toks[-2].upper == "COLLATE":
            toks = toks[:-2]
        else:
            break
    if not toks:
        return ""
    return sql[toks[0].start:toks[-1].end].strip()


def _int_literal(toks: list[Token]) -> int | None:
    if len(toks) == 1 and toks[0].kind == "number" and toks[0].text.isdigit():
        return int(toks[0].text)
    return None


def outer_clauses(sql: str) -> OuterClauses:
    """Analyse the outermost level of one SELECT statement (text already cut to one statement)."""
    toks = code_tokens(sql)
    top = _depth0(toks)
    words = [(i, t.upper) for i, t in top if t.kind == "word"]
    is_compound = any(w in _COMPOUND for _, w in words)
    order_at = next((k for k, (i, w) in enumerate(words)
                     if w == "ORDER" and k + 1 < len(words) and words[k + 1][1] == "BY"), None)
    limit_at = next((i for i, w in reversed(words) if w == "LIMIT"), None)
    terms: list[str] = []
    if order_at is not None:
        first = words[order_at + 1][0] + 1
        stop = limit_at if limit_at is not None and limit_at > first else len(toks)
        depth = 0
        current: list = []
        for tok in toks[first:stop]:
            depth += tok.text == "("
            depth -= tok.text == ")"
            if tok.text == "," and depth == 0:
                terms.append(_strip_order_term(sql, current))
                current = []
            else:
                current.append(tok)
        terms.append(_strip_order_term(sql, current))
    limit = None
    offset = 0
    limit_start = None
    if limit_at is not None:
        limit_start = toks[limit_at].start
        rest = toks[limit_at + 1:]
        parts: list[list[Token]] = [[]]
        sep = None
        for tok in rest:
            if tok.upper == "OFFSET" or tok.text == ",":
                sep = tok.upper
                parts.append([])
            else:
                parts[-1].append(tok)
        if sep == ",":  # LIMIT offset, count
            offset_val, limit = _int_literal(parts[0]), _int_literal(parts[1])
        else:
            limit = _int_literal(parts[0])
            offset_val = _int_literal(parts[1]) if len(parts) > 1 else 0
        offset = offset_val or 0
        if offset_val is None:
            limit = None
    select_list_end = None
    if not is_compound:
        selects = [k for k, (i, w) in enumerate(words) if w == "SELECT"]
        if selects:
            last_select = words[selects[-1]][0]
            after = [(i, w) for i, w in words if i > last_select and w in _CLAUSE_AFTER_SELECT_LIST]
            select_list_end = toks[after[0][0]].start if after else len(sql.rstrip())
    return OuterClauses(
        order_terms=tuple(t for t in terms if t),
        is_compound=is_compound,
        select_list_end=select_list_end,
        limit_start=limit_start,
        limit=limit,
        offset=offset,
    )
