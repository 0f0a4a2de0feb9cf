"""Cut the SQL query out of a model's reply. Never invents one: no query found is ``None``.

Rules, applied in order (README, "Extraction rules"):

1. Chat-template tokens such as ``<|im_end|>`` are removed.
2. Reasoning is dropped: every ``<think>...</think>`` block; text before a lone ``</think>``;
   everything after an unclosed ``<think>``.
3. If the reply has a code fence (```` ``` ```` or ```` ```sql ````), the first fenced block that
   holds a statement is used; an unclosed fence (a reply cut by the token limit) runs to the end.
4. Otherwise the query starts at the first statement keyword at the start of a line (``SELECT``
   or ``WITH ... AS (`` in any case, or another statement such as ``DROP`` or ``PRAGMA`` in upper
   case, which the sandbox then refuses); failing that, at the first upper-case ``SELECT`` or ``WITH``, then at any: prose
   before it is ignored.
5. The query ends at its first ``;`` or blank line outside strings, quoted names and comments;
   prose after that is ignored. Comments inside the query are kept (SQLite ignores them).
6. Surrounding whitespace and trailing semicolons are removed. An empty result is ``None``.

>>> extract_sql("Sure! Here it is:\\n```sql\\nSELECT name FROM singer;\\n```")
'SELECT name FROM singer'
>>> extract_sql("<think>maybe SELECT 1</think>SELECT count(*) FROM t; -- done")
'SELECT count(*) FROM t'
>>> extract_sql("I cannot answer that.") is None
True
"""

from __future__ import annotations

import re

try:
    from . import sql_text
except ImportError:  # run as a standalone file
    import sql_text  # type: ignore[no-redef]

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


def _at_line_start(text: str, pos: int) -> bool:
    return not text[text.rfind("\n", 0, pos) + 1:pos].strip()


def _statement_start(text: str) -> int | None:
    leading = len(text) - len(text.lstrip())
    if _START.match(text, leading) or _OTHER_START.match(text, leading):
        return leading  # a statement keyword first: no earlier start can exist
    starts = list(_START.finditer(text))
    others = [m for m in _OTHER_START.finditer(text) if _at_line_start(text, m.start())]
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


def _cut(text: str) -> str | None:
    start = _statement_start(text)
    if start is None:
        return None
    body = text[start:]
    query = body[: sql_text.statement_end(body)].strip()
    query = query.rstrip(";").strip()
    return query or None


def extract_sql(completion: object, max_chars: int = 200_000) -> str | None:
    """The query in ``completion`` (rules above), or ``None`` when there is none.

    Reads at most ``max_chars`` characters; anything that is not a string yields ``None``.
    """
    if not isinstance(completion, str):
        return None
    text = strip_reasoning(completion[:max_chars])
    if "```" in text:
        for fence in _FENCE.finditer(text):
            found = _cut(fence.group(1))
            if found is not None:
                return found
        # Fences without a statement inside: fall back to the text around them.
        text = _FENCE.sub("\n\n", text)
    return _cut(text)
