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

import dataclasses
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
    code = [_as_string(t, columns) for t in tokens(gold) if t.kind not in ("space", "comment")]
    out: dict[str, list] = {}
    for i, tok in enumerate(code):
        if tok.kind not in ("string", "number"):
            continue
        if tok.kind == "number" and i and code[i - 1].text.upper() in ("LIMIT", "OFFSET"):
            continue  # a count of rows, not a value
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


def _as_string(tok, columns: set[str]):
    """A double-quoted token that names no column is a string to SQLite (Spider writes "Aberdeen")."""
    if tok.kind == "quoted" and tok.text.startswith('"') and tok.text[1:-1].lower() not in columns:
        return dataclasses.replace(tok, kind="string", text="'" + tok.text[1:-1].replace("'", "''") + "'")
    return tok


_GROUP_END = {"HAVING", "ORDER", "LIMIT", "UNION", "INTERSECT", "EXCEPT", "WINDOW", ")"}


def grouped_columns(gold: str, columns: set[str], links: set[str]) -> set[str]:
    """Columns a gold needs repeated: grouped by, with a HAVING on the groups (lower-case names).

    ``SELECT hometown FROM teacher GROUP BY hometown HAVING count(*) >= 2`` can only return rows
    where hometowns repeat: that column must not be kept unique, though the original's values are.
    Only a column of a one-table query, or a link column (``links``: foreign keys, where a
    one-to-many link repeats its parent), counts; a name grouped across a join stays unique.

    >>> sorted(grouped_columns("SELECT city FROM t GROUP BY city HAVING count(*) > 1", {"city"}, set()))
    ['city']
    >>> grouped_columns("SELECT a.n FROM a JOIN b ON a.id = b.aid GROUP BY a.n HAVING count(*) > 1", {"n"}, set())
    set()
    """
    code = [t for t in tokens(gold) if t.kind not in ("space", "comment")]
    words = [t.text.upper() for t in code]
    if "HAVING" not in words:
        return set()
    one_table = "JOIN" not in words and not any(
        w == "FROM" and i + 2 < len(words) and words[i + 2] == "," for i, w in enumerate(words))
    found: set[str] = set()
    for i, _tok in enumerate(code[:-1]):
        if words[i] == "GROUP" and words[i + 1] == "BY":
            for nxt in code[i + 2:]:
                if nxt.text.upper() in _GROUP_END:
                    break
                name = nxt.text.strip('"`[]').lower()
                if nxt.kind in ("word", "quoted") and name in columns and (one_table or name in links):
                    found.add(name)
    return found


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
