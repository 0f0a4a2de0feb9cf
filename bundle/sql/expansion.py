"""What preparing a statement copies: each reference to a common table expression is a copy of its body.

SQLite expands a common table expression (CTE) at every reference while it prepares a statement,
and a copy's own references are expanded in turn, before any code is generated: ``c1`` reading
``c0`` twice, ``c2`` reading ``c1`` twice and so on copies ``c0`` 2**16 times at 16 levels. No
VM step counts that work, and where the copies are then discarded (SQLite 3.35+ materializes a CTE
referenced more than once and codes it once), the program-size cap (``max_program_ops``) does not
see it either: only the heap ceiling would end it, after a second or more of CPU, and again on every
database a grader judges the query on. So the copies are counted from the text before anything is
prepared (docs/bundle.md, "Cost model"): ``expansion`` gives the tokens of CTE bodies that preparing
the statement may copy, an upper bound; over ``Limits.max_expansion_tokens`` the query is refused.

The count reads SQLite's tokens as SQLite does (identifiers with ``$`` and any non-ASCII
character, the four quoting styles, a string literal standing for a name, ASCII-only case
folding, comments), and over-counts wherever the text alone cannot tell: every token naming a
CTE within its WITH clause's scope is a reference, whatever it names there. A WITH clause it
cannot read (SQLite will then refuse the statement), or references in a circle (SQLite's
"circular reference"), count nothing: SQLite decides those.

>>> nest = "WITH c0(x) AS (SELECT 1)" + "".join(
...     f", c{i}(x) AS (SELECT (SELECT x FROM c{i - 1}) + (SELECT x FROM c{i - 1}))" for i in range(1, 17))
>>> expansion(nest + " SELECT x FROM c16") > 2**16
True
>>> expansion("WITH a AS (SELECT 1) SELECT * FROM a, a AS b")  # two copies of a body of four tokens
8
>>> expansion("SELECT 'with' FROM t")
0
"""

from __future__ import annotations

import bisect
import re

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*(?:\n|\Z)|/\*.*?(?:\*/|\Z))
  | (?P<name>'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z))
  | (?P<number>[0-9][A-Za-z0-9_$\x80-\U0010ffff]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)
  | (?P<word>[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*)
  | (?P<op>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_WITH = re.compile(r"with", re.IGNORECASE)


def _key(kind: str, text: str) -> bytes | None:
    """How SQLite compares a name: unquoted, ASCII letters folded (None: not a name)."""
    if kind == "word":
        body = text
    elif kind == "name":
        quote = text[0]
        closing = "]" if quote == "[" else quote
        body = text[1:-1] if len(text) > 1 and text.endswith(closing) else text[1:]
        if quote != "[":
            body = body.replace(quote * 2, quote)
    else:
        return None
    return body.encode("utf-8", "surrogatepass").lower()  # bytes.lower folds ASCII only, as SQLite does


class _Tokens:
    """The code tokens (no space, no comment) of a text: kinds, names and matching parentheses."""

    def __init__(self, sql: str) -> None:
        found = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(sql) if m.lastgroup not in ("space", "comment")]
        self.kinds = [k or "op" for k, _ in found]
        self.texts = [t for _, t in found]
        self.keys = [_key(k or "op", t) for k, t in found]
        n = len(found)
        self.close = [n] * n  # for '(' the index of its ')', the end when unbalanced
        self.group_end = [n] * n  # the ')' of the innermost parenthesised group holding each token
        opened: list[int] = []
        for i, text in enumerate(self.texts):
            if text == "(":
                opened.append(i)
            elif text == ")" and opened:
                self.close[opened.pop()] = i
        holding: list[int] = []
        for i, text in enumerate(self.texts):
            if text == ")" and holding and self.close[holding[-1]] == i:
                holding.pop()
            self.group_end[i] = self.close[holding[-1]] if holding else n
            if text == "(":
                holding.append(i)

    def word(self, i: int, upper: str) -> bool:
        return i < len(self.texts) and self.kinds[i] == "word" and self.texts[i].upper() == upper


class _Cte:
    __slots__ = ("key", "name_at", "body", "scope")

    def __init__(self, key: bytes, name_at: int, body: tuple[int, int], scope: tuple[int, int]) -> None:
        self.key, self.name_at, self.body, self.scope = key, name_at, body, scope


def _ctes(tokens: _Tokens) -> list[_Cte] | None:
    """Every CTE of every WITH clause; None when a WITH clause cannot be read."""
    out: list[_Cte] = []
    n = len(tokens.texts)
    starts = [i for i, (kind, text) in enumerate(zip(tokens.kinds, tokens.texts))
              if kind == "word" and len(text) == 4 and text.upper() == "WITH"]
    for start in starts:
        scope_end = tokens.group_end[start]
        j = start + 1
        if tokens.word(j, "RECURSIVE"):
            j += 1
        while True:
            key = tokens.keys[j] if j < n else None
            if key is None:
                return None
            name_at = j
            j += 1
            if j < n and tokens.texts[j] == "(":
                j = tokens.close[j] + 1  # the column list
            if not tokens.word(j, "AS"):
                return None
            j += 1
            if tokens.word(j, "NOT"):
                j += 1
            if tokens.word(j, "MATERIALIZED"):
                j += 1
            if j >= n or tokens.texts[j] != "(":
                return None
            body = (j, tokens.close[j])
            out.append(_Cte(key, name_at, body, (start, scope_end)))
            j = body[1] + 1
            if j < n and tokens.texts[j] == ",":
                j += 1
                continue
            break
    return out


def expansion(sql: str, limit: int = 10**9) -> int:
    """Tokens of CTE bodies that preparing ``sql`` may copy (an upper bound; module docstring).

    Counting stops past ``limit`` (the result is then some number above it).
    """
    if not _WITH.search(sql):
        return 0
    tokens = _Tokens(sql)
    ctes = _ctes(tokens)
    if not ctes:
        return 0
    _owner_of, references = _references(tokens, ctes)
    copies = _copies(references, limit)
    if copies is None:
        return 0
    total = 0
    for cte, count in zip(ctes, copies):
        total += count * (cte.body[1] - cte.body[0] + 1)
        if total > limit:
            break
    return total


def _references(tokens: _Tokens, ctes: list[_Cte]) -> tuple[list[int], list[list[int]]]:
    """For each token, the index of the innermost CTE body holding it (-1 for none); and per CTE, the
    owners (CTE index, or -1 for the statement) of its references within its WITH clause's scope."""
    definitions = {c.name_at for c in ctes}
    where: dict[bytes, list[int]] = {}
    for i, key in enumerate(tokens.keys):
        if key is not None and i not in definitions:
            where.setdefault(key, []).append(i)
    owner_of = _owners([c.body for c in ctes], len(tokens.texts))
    references: list[list[int]] = []
    for cte in ctes:
        found = where.get(cte.key, [])
        lo, hi = bisect.bisect_left(found, cte.scope[0]), bisect.bisect_left(found, cte.scope[1])
        own = cte.body
        references.append([owner_of[i] for i in found[lo:hi] if not own[0] <= i <= own[1]])
    return owner_of, references


def _owners(bodies: list[tuple[int, int]], n: int) -> list[int]:
    """For each token, the index in ``bodies`` of the innermost CTE body holding it, -1 for none
    (bodies nest or are apart)."""
    owner = [-1] * n
    starts = {body[0]: k for k, body in enumerate(bodies)}
    holding: list[int] = []
    for i in range(n):
        while holding and i > bodies[holding[-1]][1]:
            holding.pop()
        if i in starts:
            holding.append(starts[i])
        owner[i] = holding[-1] if holding else -1
    return owner


def _copies(references: list[list[int]], limit: int) -> list[int] | None:
    """Copies of each CTE: one per reference, times the copies of the CTE holding the reference.
    None when references go round in a circle (SQLite refuses that statement itself)."""
    count: list[int | None] = [None] * len(references)
    visiting = [False] * len(references)
    for root in range(len(references)):
        stack = [root]
        while stack:
            k = stack[-1]
            if count[k] is not None:
                stack.pop()
                continue
            visiting[k] = True
            waiting = [o for o in references[k] if o >= 0 and count[o] is None]
            if waiting:
                if any(visiting[o] for o in waiting):
                    return None
                stack.extend(waiting)
                continue
            count[k] = min(sum(1 if o < 0 else count[o] for o in references[k]), limit + 1)  # type: ignore[misc]
            visiting[k] = False
            stack.pop()
    return count  # type: ignore[return-value]
