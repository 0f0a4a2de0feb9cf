"""Cut the SQL query out of a model's reply. Never invents one: no query found is ``None``.

Rules, applied in order (docs/bundle.md, "Extraction rules"):

0. A reply longer than ``max_completion_chars`` is not read at all: it has no query. Reading only
   its beginning would let the rest change the reading behind the cut: a second statement after a
   long comment, the end of a ``<think>`` block, a fence.
1. Chat-template tokens such as ``<|im_end|>`` are removed.
2. Reasoning is dropped: every ``<think>...</think>`` block; text before a lone ``</think>``;
   everything after an unclosed ``<think>``.
3. If the reply has a code fence (```` ``` ```` or ```` ```sql ````), the first fenced block that
   holds a statement is used; an unclosed fence (a reply cut by the token limit) runs to the end.
   A fence inside a ``/* */`` comment is not a fence.
4. Otherwise the query starts at the first statement keyword at the start of a line (``SELECT``
   or ``WITH ... AS (`` in any case, or another statement such as ``DROP`` or ``PRAGMA`` in upper
   case, which the sandbox then refuses); failing that, at the first upper-case ``SELECT`` or
   ``WITH``, then at any: prose before it is ignored. A keyword inside a comment (after ``--`` on
   its line, or within ``/* */``) never starts a query.
5. The query ends at its first ``;`` or blank line outside strings, quoted names and comments.
   Comments inside the query are kept (SQLite ignores them).
6. What follows, up to the end of the block: when it starts with a statement keyword (any case,
   after whitespace, comments and more ``;``), it is returned as ``second``, and the scorer asks
   SQLite's parser whether it is a statement (then the reply is ``forbidden``: several statements)
   or prose (ignored, as any other prose after the query).
7. Surrounding whitespace and trailing semicolons are removed. An empty result is ``None``.

>>> extract_sql("Sure! Here it is:\\n```sql\\nSELECT name FROM singer;\\n```")
'SELECT name FROM singer'
>>> extract_sql("<think>maybe SELECT 1</think>SELECT count(*) FROM t; -- done")
'SELECT count(*) FROM t'
>>> extract_sql("I cannot answer that.") is None
True
>>> extract_sql("-- SELECT count(*) FROM singer") is None
True
>>> extract("SELECT count(*) FROM singer; DROP TABLE singer")
Extracted(sql='SELECT count(*) FROM singer', second='DROP TABLE singer', too_long=False)
>>> extract("SELECT 1; /*" + "x" * 200_000 + "*/ DROP TABLE singer")
Extracted(sql=None, second=None, too_long=True)
"""

from __future__ import annotations

import bisect
import dataclasses
import re

from ..contract.limits import DEFAULT_LIMITS
from . import text as sql_text

_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>")
_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:[A-Za-z0-9_+-]{1,20}[ \t]*\n|\n)?(.*?)(?:```|\Z)", re.DOTALL)
_START = re.compile(
    r"\b(?:SELECT\b|WITH\s{1,50}(?:RECURSIVE\s{1,50})?[\w\"`\[\]]{1,200}\s{0,50}"
    r"(?:\([^()]{0,2000}\)\s{0,50})?AS\s{0,50}(?:NOT\s{1,50})?(?:MATERIALIZED\s{0,50})?\()",
    re.IGNORECASE,
)
# Other statements count only upper-case at the start of a line: they are words of prose too.
_OTHER_START = re.compile(
    r"\b(?:VALUES|INSERT|UPDATE|DELETE|REPLACE|DROP|CREATE|ALTER|PRAGMA|ATTACH|DETACH|VACUUM|BEGIN|"
    r"COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|REINDEX|ANALYZE|EXPLAIN)\b(?=\s|\(|;|$)"
)


def strip_reasoning(text: str) -> str:
    """Remove template tokens and ``<think>`` reasoning (rules 1 and 2), in one linear pass."""
    if "<" not in text:
        return text
    text = _SPECIAL_TOKEN.sub("", text)
    kept: list[str] = []
    pos, inside = 0, False
    for tag in _THINK_TAG.finditer(text):
        if tag.group()[1] == "/":
            if not inside:
                kept = []  # a lone </think>: what came before was reasoning
            inside = False
        elif not inside:
            kept.append(text[pos:tag.start()])
            inside = True
        pos = tag.end()
    if not inside:
        kept.append(text[pos:])
    return "".join(kept)


# Any statement keyword, in any case: what may open a second statement after the query.
_ANY_START = re.compile(_START.pattern + "|" + _OTHER_START.pattern, re.IGNORECASE)
_FILLER = re.compile(r"(?:\s+|;|--[^\n]*(?:\n|\Z)|/\*.*?(?:\*/|\Z))*", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Extracted:
    """The query found in a reply, and the start of a possible second statement after it;
    ``too_long``: the reply was over the cap, so not read (rule 0)."""

    sql: str | None
    second: str | None = None
    too_long: bool = False


def _at_line_start(text: str, pos: int) -> bool:
    i = pos - 1
    while i >= 0 and text[i] in " \t\r\f\v":  # only the blanks just before: linear over all calls
        i -= 1
    return i < 0 or text[i] == "\n"


_COMMENT = re.compile(r"--[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL)


class Comments:
    """The SQL comments of a text (``--`` to the end of its line, ``/* */``), found in one pass.

    Quotes are not read: in prose an apostrophe is no string delimiter.

    >>> c = Comments("x -- SELECT 1\\n/* a */ SELECT 2")
    >>> c.covers(5), c.covers(22)
    (True, False)
    """

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        if "--" in text or "/*" in text:
            for m in _COMMENT.finditer(text):
                self.starts.append(m.start())
                self.ends.append(m.end())

    def _at(self, pos: int) -> int | None:
        i = bisect.bisect_right(self.starts, pos) - 1
        return i if i >= 0 and pos < self.ends[i] else None

    def covers(self, pos: int) -> bool:
        return self._at(pos) is not None

    def block_covers(self, text: str, pos: int) -> bool:
        """Whether ``pos`` is inside a ``/* */`` comment of ``text`` (the text given to __init__)."""
        i = self._at(pos)
        return i is not None and text.startswith("/*", self.starts[i])


def _statement_start(text: str) -> int | None:
    leading = len(text) - len(text.lstrip())
    if _START.match(text, leading) or _OTHER_START.match(text, leading):
        return leading  # a statement keyword first: no earlier start can exist
    comments = Comments(text)
    starts = [m for m in _START.finditer(text) if not comments.covers(m.start())]
    others = [m for m in _OTHER_START.finditer(text) if _at_line_start(text, m.start())
              and not comments.covers(m.start())]
    line_starts = sorted([m.start() for m in starts if _at_line_start(text, m.start())] +
                         [m.start() for m in others])
    if line_starts:
        return line_starts[0]
    if not starts:
        return None
    for m in starts:
        if m.group().split(None, 1)[0].isupper():
            return m.start()
    return starts[0].start()


def _second(rest: str) -> str | None:
    """What follows the query, when it begins with a statement keyword (rule 6)."""
    at = _FILLER.match(rest).end()  # type: ignore[union-attr]
    if not _ANY_START.match(rest, at):
        return None
    tail = rest[at:]
    return tail[: sql_text.statement_end(tail)].strip() or None


def _cut(text: str) -> Extracted | None:
    start = _statement_start(text)
    if start is None:
        return None
    body = text[start:]
    end = sql_text.statement_end(body)
    query = body[:end].strip().rstrip(";").strip()
    if not query:
        return None
    return Extracted(query, _second(body[end:]) if end < len(body) else None)


def extract(completion: object, max_chars: int = DEFAULT_LIMITS.max_completion_chars) -> Extracted:
    """The query in ``completion`` (rules above) and a possible second statement after it.

    A reply over ``max_chars`` characters is not read (rule 0); anything that is not a string has no query.
    """
    if not isinstance(completion, str):
        return Extracted(None)
    if len(completion) > max_chars:
        return Extracted(None, too_long=True)
    text = strip_reasoning(completion)
    if "```" in text:
        comments = Comments(text) if "/*" in text else None
        for fence in _FENCE.finditer(text):
            if comments is not None and comments.block_covers(text, fence.start()):
                continue
            found = _cut(fence.group(1))
            if found is not None:
                return found
        # Fences without a statement inside: fall back to the text around them.
        text = _FENCE.sub("\n\n", text)
    return _cut(text) or Extracted(None)


def extract_sql(completion: object, max_chars: int = DEFAULT_LIMITS.max_completion_chars) -> str | None:
    """The query in ``completion`` (rules above), or ``None`` when there is none."""
    return extract(completion, max_chars).sql
