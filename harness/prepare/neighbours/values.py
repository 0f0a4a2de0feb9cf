"""Where a neighbour database's values come from: the original column, the golds' literals, mutations.

Per column (``pools``): the original's values, the literals the golds of this database compare
that column with (``name = 'x'``, ``age > 40``, ``LIKE '%x%'``, ``IN (...)``, ``BETWEEN``; a literal
whose column cannot be told is offered to every column of its kind in the tables that gold names),
and values near both: numbers one either side and doubled, texts holding a LIKE pattern's part.
Nothing here is random: ``fuzz`` draws from these pools with a seeded generator.

>>> literals_by_column("SELECT name FROM singer WHERE age > 40 AND country = 'France'", {"age", "country", "name"})
{'age': [40], 'country': ['France']}
"""

from __future__ import annotations

import re

from harness.common.mutate import tokens

# Tokens between a column and the literal it is compared with: operators, list and range glue.
_GLUE = {"=", "==", "!=", "<>", "<", ">", "<=", ">=", "LIKE", "GLOB", "IN", "NOT", "BETWEEN", "AND", "IS",
         "(", ",", "!", "-"}


def _literal(text: str, kind: str) -> object:
    if kind == "string":
        return text[1:-1].replace("''", "'")
    return int(text) if re.fullmatch(r"\d+", text) else float(text)


def literals_by_column(gold: str, columns: set[str]) -> dict[str, list]:
    """The literals of ``gold`` grouped by the column they are compared with (lower-case names).

    Walking back from a literal over operators, ``IN (...)`` lists and ``BETWEEN ... AND``, the
    first word reached is its column; literals whose column is not one of ``columns`` go under "".
    """
    code = [t for t in tokens(gold) if t.kind not in ("space", "comment")]
    out: dict[str, list] = {}
    for i, tok in enumerate(code):
        if tok.kind not in ("string", "number"):
            continue
        target = ""
        for j in range(i - 1, max(i - 16, -1), -1):
            prior = code[j]
            if prior.kind in ("string", "number") or prior.text.upper() in _GLUE:
                continue
            if prior.kind == "word" and prior.text.lower() in columns:
                target = prior.text.lower()
            elif prior.kind == "quoted" and prior.text[1:-1].lower() in columns:
                target = prior.text[1:-1].lower()
            break
        value = _literal(tok.text, tok.kind)
        bucket = out.setdefault(target, [])
        if value not in bucket:
            bucket.append(value)
    return out


def near_numbers(values: list) -> list:
    """Numbers next to each given one: one either side, doubled, and zero."""
    out: list = [0]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        out += [v - 1, v + 1, v * 2] if isinstance(v, int) else [round(v - 1, 6), round(v + 1, 6), round(v * 2, 6)]
    return out


def like_texts(pattern: str, originals: list[str]) -> list[str]:
    """Texts a LIKE pattern's parts show up in: the part alone, inside an original value, at its ends."""
    parts = [p for p in re.split(r"[%_]+", pattern) if p]
    out = []
    for part in parts:
        out.append(part)
        for base in originals[:3]:
            out += [base + " " + part, part + " " + base]
    return out
