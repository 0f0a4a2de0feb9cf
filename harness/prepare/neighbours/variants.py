"""Neighbour queries of a gold: small edits that change what the query means, to separate by data.

Edits (each applied at every site where it fits, in order; at most ``limit`` variants a gold):

* swap one token within its family: an aggregate (count, min, max, avg, sum), a comparison
  operator, ASC/DESC, AND/OR, ``+ - * /``, LIKE/NOT LIKE, IN/NOT IN;
* replace one column by another column of the tables the gold names;
* change a literal: a number one either side, a string with its LIKE wildcards dropped or added;
* drop one clause or condition: DISTINCT, one condition of a WHERE or HAVING, GROUP BY, ORDER BY
  (with its LIMIT), LIMIT alone, or one code token that is neither structure nor a name.

A variant only matters to the neighbour databases when the original database cannot tell it
from its gold (``distil`` keeps those); variants that are the gold's text again are left out.

>>> found = variants("SELECT count(*) FROM singer WHERE age > 40", ["age", "name"], 50)
>>> [v in found for v in ("SELECT avg(*) FROM singer WHERE age > 40", "SELECT count(*) FROM singer",
...                       "SELECT count(*) FROM singer WHERE age != 40", "SELECT count(*) FROM singer WHERE age < 40")]
[True, True, True, True]
"""

from __future__ import annotations

import dataclasses

from harness.common.mutate import _drop_where, tokens  # one tokenizer for every edit of a gold

FAMILIES = (
    ("count", "min", "max", "avg", "sum"),
    ("=", "!=", "<", ">", "<=", ">="),
    ("ASC", "DESC"),
    ("AND", "OR"),
    ("+", "-", "*", "/"),
)
_STRUCTURE = {"SELECT", "FROM", "JOIN", "ON", "AS", "WHERE", "GROUP", "BY", "ORDER", "HAVING", "LIMIT", "UNION",
              "INTERSECT", "EXCEPT", "IN", "NOT", "LIKE", "BETWEEN", "AND", "OR", "(", ")", ",", ".", "*"}


def _family(text: str) -> tuple[str, ...] | None:
    for family in FAMILIES:
        if text.lower() in (f.lower() for f in family):
            return family
    return None


def _join(parts: list[str]) -> str:
    return " ".join("".join(parts).split())


_PAIRS = {">=", "<=", "!=", "<>", "=="}


def _merged(gold: str) -> list:
    """The gold's tokens, two-character operators (``>=``...) as one token."""
    out: list = []
    for tok in tokens(gold):
        if out and tok.kind == "other" and out[-1].kind == "other" and out[-1].text + tok.text in _PAIRS:
            out[-1] = dataclasses.replace(out[-1], text=out[-1].text + tok.text)
        else:
            out.append(tok)
    return out


def variants(gold: str, columns: list[str], limit: int = 400) -> list[str]:
    """Up to ``limit`` distinct neighbour queries of ``gold`` (``columns``: those it may swap in)."""
    toks = _merged(gold)
    texts = [t.text for t in toks]
    code = [i for i, t in enumerate(toks) if t.kind not in ("space", "comment")]
    out: list[str] = []
    seen = {_join(texts)}

    def add(parts: list[str]) -> None:
        text = _join(parts)
        if text not in seen and len(out) < limit:
            seen.add(text)
            out.append(text)

    def replaced(i: int, new: str) -> list[str]:
        return texts[:i] + [new] + texts[i + 1:]

    for k, i in enumerate(code):
        tok = toks[i]
        before = toks[code[k - 1]].text.upper() if k else ""
        star = tok.text == "*" and before in ("(", "SELECT", ",", ".", "DISTINCT")  # a star, not a product
        family = _family(tok.text) if tok.kind in ("word", "other") and not star else None
        if family:
            for other in family:
                if other.lower() != tok.text.lower():
                    add(replaced(i, other))
        upper = tok.text.upper()
        if upper in ("LIKE", "IN") and before != "NOT":
            add(replaced(i, "NOT " + tok.text))
        if upper == "NOT":
            add(replaced(i, ""))
        if tok.kind == "number" and tok.text.isdigit():
            add(replaced(i, str(int(tok.text) + 1)))
            add(replaced(i, str(max(int(tok.text) - 1, 0))))
        if tok.kind == "string":
            inner = tok.text[1:-1]
            if "%" in inner:
                add(replaced(i, "'" + inner.replace("%", "") + "'"))
            else:
                add(replaced(i, "'%" + inner + "%'"))
    for i in code:  # columns: every other column in place of each column reference
        tok = toks[i]
        if tok.kind == "word" and tok.text.lower() in {c.lower() for c in columns}:
            for other in columns:
                if other.lower() != tok.text.lower():
                    add(replaced(i, other))
    _drops(toks, texts, code, add)
    return out


def _drops(toks: list, texts: list[str], code: list[int], add) -> None:
    words = [(i, toks[i].text.upper()) for i in code if toks[i].kind == "word"]
    for i, word in words:
        if word == "DISTINCT":
            add(texts[:i] + texts[i + 1:])
    dropped = _drop_where(toks)
    if dropped is not None:
        add([dropped])
    top = [(i, w) for i, w in words if toks[i].depth == 0]
    starts = {w: i for i, w in reversed(top)}
    for clause, stops in (("GROUP", ("HAVING", "ORDER", "LIMIT")), ("ORDER", ()), ("LIMIT", ()),
                          ("HAVING", ("ORDER", "LIMIT"))):
        if clause in starts:
            begin = starts[clause]
            end = min([i for i, w in top if w in stops and i > begin] or [len(texts)])
            add(texts[:begin] + texts[end:])
    for i in code:
        tok = toks[i]
        if tok.kind in ("number", "string") or tok.text.upper() in _STRUCTURE or tok.kind == "word":
            continue
        add(texts[:i] + texts[i + 1:])
