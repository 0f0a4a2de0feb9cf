"""The verdicts of the leaderboards' rules, beside the bundle's own: Spider's official execution match and BIRD's.

Published figures are computed by other rules than the bundle's (docs/grading.md, "Scores comparable
with the leaderboards"); ``comparable`` gives, for one answer already judged, the verdict each of
them gives on the original database, and why it differs from the bundle's when it does:

* **official**, as test-suite-sql-eval's ``evaluation.py --etype exec`` (its defaults: no value
  plugging, DISTINCT removed): ``> =``, ``< =`` and ``! =`` closed up, ``YEAR(CURDATE())`` read as
  2020, every DISTINCT word taken out of both queries (``count(DISTINCT x)`` too), only the first
  statement run; text read with invalid UTF-8 dropped; rows compared as Python values (``1 == 1.0``,
  ``'1' != 1``, no rounding) as bags, under any order of the columns, in order when the gold's text
  holds ``order by``; two empty results are equal;
* **bird**, as BIRD's ``calculate_ex``: both queries as written, equal when the *sets* of their rows
  are (duplicates and row order ignored, columns in their order).

Every query runs through the bundle's guarded executor with the gold's budget (the steps the gold
took as the bundle's gold runs it), and the column search is bounded by counted cells
(``limits.compare_max_cells``): an answer past either is 0 under both rules, as an error is. The
random row sample the official code draws to prune column orders is replaced by every row, which
prunes only orders that cannot match: the same verdicts, the same on every run.

>>> remove_distinct("SELECT DISTINCT name, count(distinct x) FROM t WHERE a = 'distinct'")
"SELECT  name, count( x) FROM t WHERE a = 'distinct'"
>>> official_equal([(1, 'a'), (2, 'b')], [('b', 2.0), ('a', 1)], ordered=False)
True
>>> official_equal([(1,), (1,)], [(1,)], ordered=False), bird_equal([(1,), (1,)], [(1,)])
(False, True)
"""

from __future__ import annotations

import collections
import hashlib
import re
from collections.abc import Sequence
from typing import NamedTuple

from ..contract.limits import Limits
from . import compare as sql_compare
from . import guard as sql_guard
from . import text as sql_text

OFFICIAL = "official"
BIRD = "bird"

# Why a leaderboard's verdict differs from the bundle's (docs/grading.md): the first that explains it.
DISTINCT, ROW_ORDER, DUPLICATES, COLUMN_ORDER, VALUES = "DISTINCT", "row order", "duplicates", "column order", "values"
NEIGHBOUR, SEARCH = "a neighbour", "the search"
SECOND_STATEMENT = "a second statement"  # the bundle refuses two statements; both rules run the first alone
DISPUTED = "a disputed gold"  # the bundle accepted an answer its list of disputed golds accepts, not the gold
NOT_RUN = "not run"  # the gold failed under the rule's reading (the official DISTINCT-less gold, say)

_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


class Comparable(NamedTuple):
    """The two rules' verdicts (1.0 or 0.0; None when the rule's gold did not run) and, where a
    verdict differs from the bundle's, the reason (one of this module's names), else None;
    ``answer`` names the answer's rows on the original (``answer_key``; None: it did not run)."""

    official: float | None
    bird: float | None
    official_reason: str | None
    bird_reason: str | None
    answer: str | None = None


def answer_key(rows: Sequence[tuple], digits: int) -> str:
    """16 hex digits naming a result as a bag of rows (order left out, numbers rounded to ``digits``
    as the bundle compares them): two answers with the same rows have the same key, so that
    majority voting over sampled answers (``report``) groups them.

    >>> answer_key([(1, 'a'), (2.0, 'b')], 12) == answer_key([(2, 'b'), (1.0, 'a')], 12)
    True
    """
    body = repr(sorted(sql_compare.normalize_rows(rows, digits))).encode("utf-8", "surrogateescape")
    return hashlib.sha256(body).hexdigest()[:16]


def remove_distinct(sql: str) -> str:
    """``sql`` without its DISTINCT words (not those inside strings, quoted names or comments)."""
    return "".join(t.text for t in sql_text.tokenize(sql) if not (t.kind == "word" and t.text.lower() == "distinct"))


def official_text(sql: str) -> str:
    """The query as the official evaluator runs it: the first statement, spaces closed up, DISTINCT out."""
    sql = sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    return _CUR_YEAR.sub("2020", remove_distinct(sql[:sql_text.statement_end(sql)]))


class _Cells:
    """Cells a comparison may visit (``limits.compare_max_cells``), counted as the official loop visits them."""

    def __init__(self, most: int) -> None:
        self.left = most

    def spend(self, cells: int) -> None:
        self.left -= cells
        if self.left < 0:
            raise sql_compare.CompareBudgetExceeded("the column orders to try visit more cells than compare_max_cells")


def _unordered(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def official_equal(gold: Sequence[tuple], pred: Sequence[tuple], *, ordered: bool, bag: bool = True,
                   permute: bool = True, cells: _Cells | None = None) -> bool:
    """The official ``result_eq(gold, pred, order_matters=ordered)``; ``bag=False`` compares sets of
    rows and ``permute=False`` the columns in their order (the relaxations ``reasons`` tries)."""
    if not gold and not pred:
        return True
    if (bag and len(gold) != len(pred)) or not gold or not pred:
        return False
    width = len(gold[0])
    if len(pred[0]) != width:
        return False
    cells = cells or _Cells(1 << 62)
    cells.spend(2 * width * (len(gold) + len(pred)))
    rows_g, rows_p = [_unordered(r) for r in gold], [_unordered(r) for r in pred]
    if not (rows_g == rows_p if ordered else set(rows_g) == set(rows_p)):
        return False
    by_column = [{row[i] for row in gold} for i in range(width)]
    # A column of pred can stand for a column of gold only if each of its values is among the gold column's.
    allowed = [[j for j in range(width) if all(row[j] in by_column[i] for row in pred)] if permute else [i]
               for i in range(width)]
    cells.spend(width * width * len(pred))
    gold_rows = list(gold)
    gold_set = set(gold_rows) if not ordered else None
    gold_count = collections.Counter(gold_rows) if bag and not ordered else None
    for perm in _orders(allowed, width):
        cells.spend(width * len(pred))
        moved = pred if width == 1 else [tuple(row[j] for j in perm) for row in pred]
        if ordered:
            if moved == gold_rows:
                return True
        elif set(moved) == gold_set and (gold_count is None or collections.Counter(moved) == gold_count):
            return True
    return False


def _orders(allowed: list[list[int]], width: int):
    """Each assignment of distinct pred columns to the gold's, from ``allowed``, in product order."""
    chosen: list[int] = []
    used = [False] * width

    def walk(i: int):
        if i == width:
            yield tuple(chosen)
            return
        for j in allowed[i]:
            if not used[j]:
                used[j] = True
                chosen.append(j)
                yield from walk(i + 1)
                chosen.pop()
                used[j] = False

    return walk(0)


def bird_equal(gold: Sequence[tuple], pred: Sequence[tuple]) -> bool:
    """BIRD's ``set(predicted_res) == set(ground_truth_res)``."""
    return set(pred) == set(gold)


def _readable(rows: list[tuple]) -> list[tuple]:
    """Rows as the official code reads them: text that was not UTF-8 with its bad bytes dropped (the
    guard reads it byte-exact, as surrogate escapes)."""
    def fix(v: object) -> object:
        if v.__class__ is str and any("\udc80" <= c <= "\udcff" for c in v):  # type: ignore[union-attr]
            return v.encode("utf-8", "surrogateescape").decode("utf-8", "ignore")  # type: ignore[union-attr]
        return v
    return [tuple(fix(v) for v in row) for row in rows]


class _Ran(NamedTuple):
    rows: list[tuple] | None  # None: the query failed (an error, forbidden, over its budget or a cap)
    failed: str | None


def _run(database: str, sql: str, limits: Limits, budget: int) -> _Ran:
    try:
        raw = sql_guard.run_query(database, sql, limits, budget_steps=budget, wall_s=limits.wall_guard_s,
                                  cpu_s=limits.cpu_guard(budget))
    except sql_guard.QueryFailed as failed:
        if failed.kind in (sql_guard.WALL_GUARD, sql_guard.INFRASTRUCTURE):
            raise
        return _Ran(None, failed.detail)
    return _Ran(_readable(raw.rows), None)


def official_verdict(sql: str | None, gold: str, database: str, limits: Limits, *, gold_steps: int) -> float | None:
    """The official execution match alone (1.0 or 0.0; None when the DISTINCT-less gold fails), as
    ``comparable`` computes it: what ``bench --only leaderboard`` holds beside the official code."""
    if not sql:
        return 0.0
    budget = limits.budget_steps(gold_steps)
    gold_sql = official_text(gold)
    official_gold = _run(database, gold_sql, limits, budget)
    if official_gold.rows is None:
        return None
    return _official(official_gold, _run(database, official_text(sql), limits, budget), gold_sql,
                     _Cells(int(limits.compare_max_cells)))


def _official(gold: _Ran, pred: _Ran, gold_sql: str, cells: _Cells) -> float:
    """The official verdict of two runs of the official texts (the gold's ran): 0.0 when the
    prediction failed or the column search passed its cells."""
    if pred.rows is None:
        return 0.0
    try:
        return float(official_equal(gold.rows or [], pred.rows, ordered="order by" in gold_sql.lower(), cells=cells))
    except sql_compare.CompareBudgetExceeded:
        return 0.0


def comparable(sql: str | None, gold: str, database: str, limits: Limits, *, gold_steps: int, score: float,
               original_score: float | None, decided_on: str, outcome: str, accepted: bool = False) -> Comparable:
    """Both rules' verdicts on ``sql`` (the answer the bundle read, None: no query) against ``gold``
    on the original ``database``, given the bundle's verdict (``score``, ``original_score``,
    ``decided_on``, ``outcome``; ``accepted``: it matched an accepted answer of a disputed gold, not
    the gold). Raises the guard's QueryFailed when a wall or CPU guard fires (unscored)."""
    budget = limits.budget_steps(gold_steps)
    if not sql:  # no query: 0 under every rule, as under the bundle's
        return Comparable(0.0, 0.0, None, None)
    gold_as_written = _run(database, gold, limits, budget)
    pred_as_written = _run(database, sql[:sql_text.statement_end(sql)], limits, budget)
    official_gold_sql, official_pred_sql = official_text(gold), official_text(sql)
    distinct = official_gold_sql != gold or official_pred_sql != sql[:sql_text.statement_end(sql)]
    official_gold = _run(database, official_gold_sql, limits, budget) if distinct else gold_as_written
    official_pred = _run(database, official_pred_sql, limits, budget) if distinct else pred_as_written
    ordered = "order by" in official_gold_sql.lower()
    beyond = DISPUTED if accepted else SECOND_STATEMENT if outcome == "forbidden" else \
        _beyond(score, original_score, decided_on)
    cells = _Cells(int(limits.compare_max_cells))

    official: float | None
    official_reason: str | None
    if official_gold.rows is None:
        official, official_reason = None, NOT_RUN
    elif official_pred.rows is None:
        official, official_reason = 0.0, None if score == 0.0 else DISTINCT if distinct else DISPUTED
    else:
        official = _official(official_gold, official_pred, official_gold_sql, cells)
        official_reason = None if official == score else beyond if beyond and (official == 1.0 or accepted) else \
            _official_reason(official, official_gold.rows, official_pred.rows, gold_as_written, pred_as_written,
                             ordered, distinct, cells)

    bird: float | None
    bird_reason: str | None
    if gold_as_written.rows is None:
        bird, bird_reason = None, NOT_RUN
    elif pred_as_written.rows is None:
        bird, bird_reason = 0.0, None if score == 0.0 else DISPUTED
    else:
        bird = float(bird_equal(gold_as_written.rows, pred_as_written.rows))
        bird_reason = None if bird == score else beyond if beyond and (bird == 1.0 or accepted) else \
            _bird_reason(bird, gold_as_written.rows, pred_as_written.rows, cells)
    answer = None if pred_as_written.rows is None else answer_key(pred_as_written.rows, int(limits.float_digits))
    return Comparable(official, bird, official_reason, bird_reason, answer)


def _beyond(score: float, original_score: float | None, decided_on: str) -> str | None:
    """Why the bundle refused what the original accepted: a neighbour, or the search; None otherwise."""
    if score == 0.0 and original_score == 1.0:
        return NEIGHBOUR if decided_on.startswith("neighbour") else SEARCH
    return None


def _quiet(test) -> bool | None:
    try:
        return test()
    except sql_compare.CompareBudgetExceeded:
        return None


def _official_reason(official: float, gold: list[tuple], pred: list[tuple], gold_written: _Ran, pred_written: _Ran,
                     ordered: bool, distinct: bool, cells: _Cells) -> str:
    """The first of the official rule's readings that, undone, changes its verdict."""
    verdict = official == 1.0
    if distinct:
        if gold_written.rows is None or pred_written.rows is None:
            return DISTINCT
        kept = _quiet(lambda: official_equal(gold_written.rows, pred_written.rows, ordered=ordered, cells=cells))
        if kept is not None and kept != verdict:
            return DISTINCT
    for reason, test in ((ROW_ORDER, lambda: official_equal(gold, pred, ordered=not ordered, cells=cells)),
                         (DUPLICATES, lambda: official_equal(gold, pred, ordered=ordered, bag=False, cells=cells)),
                         (COLUMN_ORDER, lambda: official_equal(gold, pred, ordered=ordered, permute=False, cells=cells))):
        found = _quiet(test)
        if found is not None and found != verdict:
            return reason
    return VALUES


def _bird_reason(bird: float, gold: list[tuple], pred: list[tuple], cells: _Cells) -> str:
    """The first of BIRD's readings that, undone, changes its verdict."""
    verdict = bird == 1.0
    for reason, test in ((DUPLICATES, lambda: official_equal(gold, pred, ordered=False, permute=False, cells=cells)),
                         (COLUMN_ORDER, lambda: official_equal(gold, pred, ordered=False, bag=False, cells=cells))):
        found = _quiet(test)
        if found is not None and found != verdict:
            return reason
    return ROW_ORDER if verdict and official_equal(gold, pred, ordered=False, cells=cells) else VALUES
