"""One-edit rewrites of a gold query, made on sqlparse's token stream (never on the raw text).

sqlparse's lexer splits the query into tokens (keywords, names, literals, comments, quoted names),
so an edit never cuts a string literal, a quoted name or a comment in two. On top of the flat token
stream this module keeps the parenthesis depth of every token, and finds clauses the way SQLite
reads them: a clause runs from its keyword to the next clause keyword at the same depth, or to the
parenthesis that closes its subquery. Each edit returns one rewrite per place it applies.

>>> q = Query("SELECT DISTINCT name FROM singer WHERE age > 40 ORDER BY age LIMIT 3")
>>> q.without_distinct(), q.without_clause("WHERE"), q.without_clause("LIMIT")
(['SELECT name FROM singer WHERE age > 40 ORDER BY age LIMIT 3'], ['SELECT DISTINCT name FROM singer ORDER BY age LIMIT 3'], \
['SELECT DISTINCT name FROM singer WHERE age > 40 ORDER BY age'])
>>> q.order_flipped(), q.comparisons_flipped()
(['SELECT DISTINCT name FROM singer WHERE age > 40 ORDER BY age DESC LIMIT 3'], \
['SELECT DISTINCT name FROM singer WHERE age < 40 ORDER BY age LIMIT 3'])
>>> Query("SELECT count(DISTINCT T1.id) FROM a AS T1 JOIN b AS T2 ON T1.x = T2.y").count_star()
['SELECT count(*) FROM a AS T1 JOIN b AS T2 ON T1.x = T2.y']
>>> Query("SELECT name FROM 'where' WHERE note = 'a WHERE b'").without_clause("WHERE")
["SELECT name FROM 'where'"]
"""

from __future__ import annotations

import dataclasses

from sqlparse import engine
from sqlparse import tokens as T

# Keywords that start a clause of a SELECT (compared on the upper-cased, space-normalized text).
CLAUSES = ("SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "WINDOW", "ORDER BY", "LIMIT",
           "UNION", "UNION ALL", "INTERSECT", "EXCEPT")
_COMPARISON_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "!=", "==": "!=", "!=": "=", "<>": "="}
_AGGREGATE_SWAP = {"max": "min", "min": "max", "sum": "avg", "avg": "sum"}


@dataclasses.dataclass(frozen=True)
class Tok:
    """One lexer token: its text, its sqlparse type and the parenthesis depth it sits at."""

    text: str
    ttype: object
    depth: int  # a "(" sits at the depth outside it, a ")" too

    @property
    def word(self) -> str:
        """Keywords upper-cased with one space between words (``GROUP  BY`` -> ``GROUP BY``); "" otherwise."""
        return " ".join(self.text.upper().split()) if self.ttype in T.Keyword else ""

    @property
    def code(self) -> bool:
        """Not white space nor a comment."""
        return not (self.ttype in T.Whitespace or self.ttype in T.Newline or self.ttype in T.Comment
                    or self.ttype in T.Text.Whitespace)


def tokenize(sql: str) -> list[Tok]:
    """The flat token stream of the first statement in ``sql``, each token with its depth.

    Lexed and split into statements as ``sqlparse.parse`` does, without its grouping: the tokens
    are the same (18,540 texts compared: Spider's golds and every audit candidate of them) and the
    grouping, which nothing here reads, was most of the audit's time."""
    first = next(iter(engine.FilterStack().run(sql)), None)
    if first is None:
        return []
    out, depth = [], 0
    for token in first.flatten():
        if token.ttype in T.Punctuation and token.value == ")":
            depth = max(depth - 1, 0)
        out.append(Tok(token.value, token.ttype, depth))
        if token.ttype in T.Punctuation and token.value == "(":
            depth += 1
    return out


def _render(parts: list[str]) -> str:
    """Token texts joined, each run of white space between tokens (never inside one) made one space."""
    out: list[str] = []
    for part in parts:
        if part.isspace() or not part:
            if out and out[-1] not in (" ", "("):
                out.append(" ")
        else:
            if part == ")" and out and out[-1] == " ":
                out.pop()  # a space left before ")" by a removal
            out.append(part)
    return "".join(out).strip()


class Query:
    """A query's tokens, and the one-edit rewrites of it (each a list: one rewrite per site)."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.toks = tokenize(sql)

    # --- reading ---------------------------------------------------------------------------------

    def next_code(self, i: int) -> int | None:
        return next((j for j in range(i + 1, len(self.toks)) if self.toks[j].code), None)

    def prev_code(self, i: int) -> int | None:
        return next((j for j in range(i - 1, -1, -1) if self.toks[j].code), None)

    def closing(self, i: int) -> int:
        """Index of the ")" that closes the "(" at ``i`` (the end of the query when unbalanced)."""
        depth = self.toks[i].depth
        return next((j for j in range(i + 1, len(self.toks)) if self.toks[j].text == ")" and self.toks[j].depth == depth),
                    len(self.toks))

    def starts(self, word: str) -> list[int]:
        """Indexes of the tokens that start a ``word`` clause (``WHERE``, ``ORDER BY``...)."""
        return [i for i, t in enumerate(self.toks) if t.word == word]

    def clause_end(self, start: int) -> int:
        """The index just past the clause starting at ``start``: the next clause keyword at its depth,
        or the ")" closing its subquery."""
        depth = self.toks[start].depth
        for j in range(start + 1, len(self.toks)):
            tok = self.toks[j]
            if tok.depth < depth or (tok.depth == depth and tok.word in CLAUSES):
                return j
        return len(self.toks)

    def spans(self, word: str) -> list[tuple[int, int]]:
        return [(i, self.clause_end(i)) for i in self.starts(word)]

    def from_tables(self, depth: int | None = 0) -> list[str]:
        """Names of the tables read in FROM and JOIN (at ``depth``; every depth when None), in order."""
        names: list[str] = []
        for start, end in self.spans("FROM"):
            if depth is not None and self.toks[start].depth != depth:
                continue
            expect = True  # a table name is expected after FROM, after JOIN and after a comma
            for j in range(start + 1, end):
                tok = self.toks[j]
                if not tok.code or tok.depth != self.toks[start].depth:
                    continue
                if expect and (tok.ttype in T.Name or tok.ttype in T.String.Symbol):  # "name": a quoted name
                    names.append(tok.text.strip('"`[]'))
                expect = tok.word.endswith("JOIN") or tok.text == ","
        return list(dict.fromkeys(names))

    # --- writing ---------------------------------------------------------------------------------

    def _without(self, start: int, end: int) -> str:
        return _render([t.text for t in self.toks[:start]] + [" "] + [t.text for t in self.toks[end:]])

    def _replaced(self, start: int, end: int, text: str) -> str:
        return _render([t.text for t in self.toks[:start]] + [text] + [t.text for t in self.toks[end:]])

    # --- the edits -------------------------------------------------------------------------------

    def without_distinct(self) -> list[str]:
        """The query with one DISTINCT removed, per site: ``SELECT DISTINCT`` and ``count(DISTINCT ...)`` alike."""
        out = []
        for i, tok in enumerate(self.toks):
            before = self.prev_code(i)
            if tok.word == "DISTINCT" and before is not None and (self.toks[before].text == "("
                                                                  or self.toks[before].word == "SELECT"):
                out.append(self._without(i, i + 1))
        return out

    def without_clause(self, word: str) -> list[str]:
        """The query without one ``word`` clause (WHERE, LIMIT, HAVING, ORDER BY; GROUP BY goes with its HAVING)."""
        out = []
        for start, end in self.spans(word):
            if word == "GROUP BY" and end < len(self.toks) and self.toks[end].word == "HAVING":
                end = self.clause_end(end)
            out.append(self._without(start, end))
        return out

    def order_flipped(self) -> list[str]:
        """Every key of one ORDER BY in the other direction (ASC <-> DESC; no direction becomes DESC)."""
        out = []
        for start, end in self.spans("ORDER BY"):
            depth, texts = self.toks[start].depth, [t.text for t in self.toks]
            keys_end = [j for j in range(start + 1, end) if self.toks[j].text == "," and self.toks[j].depth == depth]
            for last in keys_end + [end]:
                k = self.prev_code(last)
                if k is None or k <= start:
                    continue
                word = self.toks[k].text.upper()
                if self.toks[k].ttype in T.Keyword.Order and word in ("ASC", "DESC"):
                    texts[k] = "DESC" if word == "ASC" else "ASC"
                else:
                    texts[k] = texts[k] + " DESC"
            out.append(_render(texts))
        return out

    def count_star(self) -> list[str]:
        """One ``count(DISTINCT ...)`` replaced by ``count(*)``, per site."""
        out = []
        for i, tok in enumerate(self.toks):
            j = self.next_code(i)
            if tok.text.lower() == "count" and j is not None and self.toks[j].text == "(":
                k = self.next_code(j)
                if k is not None and self.toks[k].word == "DISTINCT":
                    out.append(self._replaced(j, self.closing(j) + 1, "(*)"))
        return out

    def _inside(self, words: tuple[str, ...]) -> set[int]:
        """Indexes of the tokens inside a clause among ``words`` (subqueries in it included)."""
        inside: set[int] = set()
        for word in words:
            for start, end in self.spans(word):
                inside.update(range(start + 1, end))
        return inside

    def comparisons_flipped(self) -> list[str]:
        """One comparison of a WHERE or HAVING turned around (< and >, <= and >=, = and !=), per site."""
        inside = self._inside(("WHERE", "HAVING"))
        return [self._replaced(i, i + 1, _COMPARISON_FLIP[tok.text])
                for i, tok in enumerate(self.toks)
                if i in inside and tok.ttype in T.Operator.Comparison and tok.text in _COMPARISON_FLIP]

    def aggregates_swapped(self) -> list[str]:
        """One ``max``/``min``/``sum``/``avg`` call swapped (max <-> min, sum <-> avg), per site."""
        out = []
        for i, tok in enumerate(self.toks):
            j = self.next_code(i)
            if tok.text.lower() in _AGGREGATE_SWAP and j is not None and self.toks[j].text == "(":
                swapped = _AGGREGATE_SWAP[tok.text.lower()]
                out.append(self._replaced(i, i + 1, swapped.upper() if tok.text.isupper() else swapped))
        return out

    def conditions_dropped(self) -> list[str]:
        """One AND-condition of a WHERE dropped, per condition (a WHERE that also has OR is left alone)."""
        out = []
        for start, end in self.spans("WHERE"):
            depth, between = self.toks[start].depth, False
            cuts: list[int] = []
            for j in range(start + 1, end):
                tok = self.toks[j]
                if tok.depth != depth or not tok.word:
                    continue
                if tok.word == "OR":
                    cuts = []
                    break
                if tok.word == "BETWEEN":
                    between = True  # its AND belongs to it, not to the list of conditions
                elif tok.word == "AND" and between:
                    between = False
                elif tok.word == "AND":
                    cuts.append(j)
            if not cuts:
                continue
            bounds = [start] + cuts + [end]
            for n in range(len(bounds) - 1):
                if n == 0:  # the first condition goes with the AND after it
                    out.append(self._without(start + 1, bounds[1] + 1))
                else:
                    out.append(self._without(bounds[n], bounds[n + 1]))
        return out

    def joins_dropped(self) -> list[str]:
        """One joined table (``JOIN t [AS a] ON ...``, not the first table) dropped, per join."""
        out = []
        for start, end in self.spans("FROM"):
            depth = self.toks[start].depth
            joins = [j for j in range(start + 1, end) if self.toks[j].depth == depth and self.toks[j].word.endswith("JOIN")]
            for n, j in enumerate(joins):
                stop = joins[n + 1] if n + 1 < len(joins) else end
                out.append(self._without(j, stop))
        return out
