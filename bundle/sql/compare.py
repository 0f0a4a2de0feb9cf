"""Decide whether a predicted result holds the same rows as the gold result. Pure functions.

Rule table (README, "Comparison rules"):

====================  ======================================================================
rule                  meaning
====================  ======================================================================
bag of rows           rows are compared as a multiset: duplicates count, order does not
order                 counts only when the gold's outermost query has ORDER BY; rows whose
                      ORDER BY keys are equal (a tie) may come in any order among themselves,
                      and at a LIMIT that cuts a tie any members of the tie may fill it
columns               same number; their order is free, matched by refinement (polynomial in
                      practice, bounded by a step budget), never by trying every permutation
numbers               by value after rounding to 12 significant digits: 1 = 1.0, 0.1+0.2 = 0.3
NULL                  equal only to NULL: never to '' or 0
text, blobs           exact: case, spaces and bytes count; text '1' is not the number 1
====================  ======================================================================

>>> gold = bag_shape([(1, "a"), (2, "b")])
>>> compare(gold, normalize_rows([("b", 2.0), ("a", 1)]), 2).match
True
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Sequence

from ..contract.limits import DEFAULT_LIMITS

NULL_TAG, NUMBER_TAG, TEXT_TAG, BLOB_TAG, NAN_TAG = 0, 1, 2, 3, 4
_DIGITS = DEFAULT_LIMITS.float_digits


class CompareBudgetExceeded(Exception):
    """Matching the columns needed more work (cells visited) than the budget allows: deterministic."""


class CompareWallGuard(Exception):
    """Matching the columns was still within its budget when the wall-clock guard fired."""


class Budget:
    """Work allowed to one comparison, counted in cells visited; the wall clock only guards."""

    __slots__ = ("left", "limit", "deadline")

    def __init__(self, max_cells: int = DEFAULT_LIMITS.compare_max_cells, deadline: float | None = None) -> None:
        self.left = self.limit = max_cells
        self.deadline = deadline

    def spend(self, cells: int) -> None:
        self.left -= cells
        if self.left < 0:
            raise CompareBudgetExceeded(f"column matching needed more than {self.limit:,} cell visits")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise CompareWallGuard("column matching was within its budget when the wall-clock guard fired")

    @property
    def used(self) -> int:
        return self.limit - self.left


def _number_key(value: float, digits: int) -> tuple:
    rounded = float(f"{value:.{digits}g}")
    if rounded != rounded:
        return (NAN_TAG, 0)
    if rounded.is_integer():
        return (NUMBER_TAG, int(rounded))
    return (NUMBER_TAG, rounded)


# value_key is a pure function; the keys of floats (costly to round) are remembered, a bounded number.
_NUMBER_KEYS: dict[tuple, tuple] = {}
_NUMBER_KEYS_MAX = 65_536
_INT_LIMIT = 10 ** _DIGITS


def value_key(value: object, digits: int = _DIGITS) -> tuple:
    """A hashable, sortable key: equal keys mean "the same value" under the rule table.

    >>> value_key(1) == value_key(1.0), value_key(None) == value_key(""), value_key("1") == value_key(1)
    (True, False, False)
    """
    cls = value.__class__
    if cls is str:
        return (TEXT_TAG, value)
    if value is None:
        return (NULL_TAG, 0)
    if cls is int:
        limit = _INT_LIMIT if digits == _DIGITS else 10 ** digits
        if -limit < value < limit:  # type: ignore[operator]
            return (NUMBER_TAG, value)
    if cls is int or cls is float or cls is bool:
        memo = (value, digits)
        found = _NUMBER_KEYS.get(memo)
        if found is None:
            found = _number_key(value, digits)  # type: ignore[arg-type]
            if len(_NUMBER_KEYS) >= _NUMBER_KEYS_MAX:
                _NUMBER_KEYS.clear()
            _NUMBER_KEYS[memo] = found
        return found
    if cls is bytes or cls is bytearray or cls is memoryview:
        return (BLOB_TAG, bytes(value))  # type: ignore[arg-type,call-overload]
    return (TEXT_TAG, str(value))


def normalize_rows(rows: Sequence[Sequence[object]], digits: int = _DIGITS) -> list[tuple]:
    """Every value of every row as its ``value_key``; text and NULL, the common cases, inline."""
    key, text, null, number = value_key, TEXT_TAG, (NULL_TAG, 0), NUMBER_TAG
    limit = _INT_LIMIT if digits == _DIGITS else 10 ** digits
    return [tuple([(text, v) if v.__class__ is str else null if v is None else
                   (number, v) if v.__class__ is int and -limit < v < limit else key(v, digits) for v in row])
            for row in rows]


@dataclasses.dataclass(frozen=True)
class Segment:
    """Positions ``start:end`` of the result; their rows may come in any order.

    ``pool`` is None when those positions must hold exactly the gold's rows there; otherwise any
    ``end - start`` rows drawn from ``pool`` (a tie cut by LIMIT) are right.
    """

    start: int
    end: int
    pool: tuple | None = None


@dataclasses.dataclass(frozen=True)
class ResultShape:
    """A gold result, normalized, with what counts as "the same rows" for it."""

    ncols: int
    rows: tuple
    ordered: bool
    segments: tuple
    _counters: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # and plain()

    def plain(self, digits: int) -> list[tuple] | None:
        """The rows as sqlite3 would hand them back, where every value is text, a blob, NULL or an
        integer below ``10 ** digits`` (their keys keep the value itself); None where any value is
        something else. A raw result equal to this list (``==``) normalizes to exactly ``rows``:
        a value equal to one of these has that value's key (a float equal to such an integer is
        integral, so it rounds to it), which ``compare_result`` uses to skip normalizing a match."""
        memo = ("plain", digits)
        if memo not in self._counters:
            limit, plain = 10 ** digits, []
            for row in self.rows:
                if any(tag == NAN_TAG or tag == NUMBER_TAG and not (value.__class__ is int and -limit < value < limit)
                       for tag, value in row):
                    self._counters[memo] = None
                    return None
                plain.append(tuple([None if tag == NULL_TAG else value for tag, value in row]))
            self._counters[memo] = plain
        return self._counters[memo]  # type: ignore[no-any-return]

    def counter(self, index: int) -> collections.Counter:
        found = self._counters.get(index)
        if found is None:
            seg = self.segments[index]
            found = collections.Counter(seg.pool if seg.pool is not None else self.rows[seg.start:seg.end])
            self._counters[index] = found
        return found


def bag_shape(rows: Sequence[Sequence[object]], ncols: int | None = None, digits: int = _DIGITS) -> ResultShape:
    norm = tuple(normalize_rows(rows, digits))
    width = ncols if ncols is not None else (len(norm[0]) if norm else 0)
    return ResultShape(width, norm, False, (Segment(0, len(norm)),))


@dataclasses.dataclass(frozen=True)
class Comparison:
    match: bool
    detail: str
    cells: int = 0  # cell visits the column matching took (0: no search needed)


def _permuted(rows: Sequence[tuple], perm: Sequence[int] | None) -> list[tuple]:
    if perm is None:
        return list(rows)
    return [tuple(row[j] for j in perm) for row in rows]


def rows_fit(gold: ResultShape, pred: Sequence[tuple], perm: Sequence[int] | None) -> bool:
    """Whether ``pred`` (columns reordered by ``perm``: gold column g is pred column perm[g]) fits."""
    for index, seg in enumerate(gold.segments):
        got = collections.Counter(_permuted(pred[seg.start:seg.end], perm))
        want = gold.counter(index)
        if seg.pool is None:
            if got != want:
                return False
        elif any(want[row] < count for row, count in got.items()):
            return False
    return True


def _column_candidates(gold: ResultShape, pred: Sequence[tuple], budget: Budget) -> tuple[list, list, list[list[int]]]:
    """Column signatures (values per exact segment) of both sides, and for each gold column the
    predicted columns whose values could be its values."""
    ncols = gold.ncols
    budget.spend(2 * ncols * max(len(pred), 1))

    def signature(rows: Sequence[tuple], c: int, segs: list[Segment]) -> tuple:
        return tuple(frozenset(collections.Counter(r[c] for r in rows[s.start:s.end]).items()) for s in segs)

    exact = [s for s in gold.segments if s.pool is None]
    partial = [s for s in gold.segments if s.pool is not None]
    gold_sig = [signature(gold.rows, c, exact) for c in range(ncols)]
    pred_sig = [signature(pred, c, exact) for c in range(ncols)]
    by_sig: dict[tuple, list[int]] = {}
    for j, sig in enumerate(pred_sig):
        by_sig.setdefault(sig, []).append(j)
    partial_rows = [row for s in partial for row in pred[s.start:s.end]]
    cands = []
    for g in range(ncols):
        same = by_sig.get(gold_sig[g], [])
        if partial_rows:
            budget.spend(len(same) * len(partial_rows))
            allowed = [{row[g] for row in s.pool} for s in partial]
            same = [j for j in same if all(row[j] in allowed[k] for k, s in enumerate(partial)
                                           for row in pred[s.start:s.end])]
        cands.append(same)
    return gold_sig, pred_sig, cands


class _Search:
    """Colour refinement with individualization over the columns of two tables (exact rows only)."""

    def __init__(self, gold: ResultShape, pred: Sequence[tuple], cands: list[list[int]],
                 check: Callable[[list[int]], bool], budget: Budget) -> None:
        exact_pos = [(k, i) for k, s in enumerate(gold.segments) if s.pool is None for i in range(s.start, s.end)]
        self.g_rows = [gold.rows[i] for _, i in exact_pos]
        self.p_rows = [pred[i] for _, i in exact_pos]
        self.row_seg = [k for k, _ in exact_pos]
        self.ncols = gold.ncols
        self.cands = cands
        self.check = check
        self.budget = budget
        self.round_cells = 4 * self.ncols * max(len(self.g_rows), 1)
        self.palette: dict = {}

    def _intern(self, signature: object) -> int:
        return self.palette.setdefault(signature, len(self.palette))

    def _refine(self, gc: list[int], pc: list[int]) -> tuple | None:
        g_rc = [self._intern(("row", s)) for s in self.row_seg]
        p_rc = list(g_rc)
        cols = range(self.ncols)
        distinct = -1
        while True:
            self.budget.spend(self.round_cells)
            gc = [self._intern((gc[c], tuple(sorted(collections.Counter(
                (g_rc[r], row[c]) for r, row in enumerate(self.g_rows)).items())))) for c in cols]
            pc = [self._intern((pc[c], tuple(sorted(collections.Counter(
                (p_rc[r], row[c]) for r, row in enumerate(self.p_rows)).items())))) for c in cols]
            g_rc = [self._intern((g_rc[r], tuple(sorted((gc[c], row[c]) for c in cols))))
                    for r, row in enumerate(self.g_rows)]
            p_rc = [self._intern((p_rc[r], tuple(sorted((pc[c], row[c]) for c in cols))))
                    for r, row in enumerate(self.p_rows)]
            if collections.Counter(gc) != collections.Counter(pc) or \
                    collections.Counter(g_rc) != collections.Counter(p_rc):
                return None
            now = len(set(gc)) + len(set(g_rc))
            if now == distinct:
                return gc, pc
            distinct = now

    def run(self, gc: list[int], pc: list[int]) -> list[int] | None:
        refined = self._refine(gc, pc)
        if refined is None:
            return None
        gc, pc = refined
        classes: dict[int, tuple[list[int], list[int]]] = {}
        for c in range(self.ncols):
            classes.setdefault(gc[c], ([], []))[0].append(c)
            classes.setdefault(pc[c], ([], []))[1].append(c)
        open_classes = [v for v in classes.values() if len(v[0]) > 1]
        if not open_classes:
            perm = [0] * self.ncols
            for golds, preds in classes.values():
                perm[golds[0]] = preds[0]
            if all(perm[g] in self.cands[g] for g in range(self.ncols)):
                self.budget.spend(self.round_cells // 2)
                if self.check(perm):
                    return perm
            return None
        golds, preds = min(open_classes, key=lambda v: len(v[0]))
        g = golds[0]
        for j in preds:
            if j not in self.cands[g]:
                continue
            fresh = self._intern(("individual", len(self.palette)))
            gc2, pc2 = list(gc), list(pc)
            gc2[g], pc2[j] = fresh, fresh
            found = self.run(gc2, pc2)
            if found is not None:
                return found
        return None


# The common verdicts, made once (a Comparison is immutable): most matches take the first path below.
_SAME_ROWS = (Comparison(True, "same rows"), Comparison(True, "same rows in the gold's order"))


def compare(gold: ResultShape, pred: Sequence[tuple], pred_ncols: int, *,
            budget: Budget | None = None) -> Comparison:
    """Compare a normalized predicted result with the gold's shape.

    Raises CompareBudgetExceeded (deterministic: too much work) or CompareWallGuard (the budget's
    wall-clock guard fired first).
    """
    if pred_ncols != gold.ncols:
        return Comparison(False, f"gold has {gold.ncols} columns, prediction {pred_ncols}")
    if len(pred) != len(gold.rows):
        return Comparison(False, f"gold has {len(gold.rows)} rows, prediction {len(pred)}")
    if not pred or tuple(pred) == gold.rows or rows_fit(gold, pred, None):  # the gold's own order fits any shape
        return _SAME_ROWS[gold.ordered]
    bag_equal = collections.Counter(pred) == collections.Counter(gold.rows)
    if gold.ncols == 1:
        return Comparison(False, "same rows, wrong order" if bag_equal else "different rows")
    budget = budget or Budget()
    gold_sig, pred_sig, cands = _column_candidates(gold, pred, budget)
    missing = [g for g in range(gold.ncols) if not cands[g]]
    if missing:
        return Comparison(False, f"no predicted column holds the values of gold column {missing[0] + 1}")
    search = _Search(gold, pred, cands, lambda perm: rows_fit(gold, pred, perm), budget)
    # Columns start coloured by their values per exact segment, the same palette on both sides.
    perm = search.run([search._intern(("sig", sig)) for sig in gold_sig],
                      [search._intern(("sig", sig)) for sig in pred_sig])
    if perm is not None:
        return Comparison(True, "same rows, columns reordered", budget.used)
    return Comparison(False, "no column order gives the same rows", budget.used)


TIES_DETAIL = "its rows are the gold's with the whole tie its LIMIT cuts"
SET_DETAIL = "its rows are the gold's, each once"


def compare_result(gold: ResultShape, raw_rows: Sequence[Sequence[object]], pred_ncols: int, digits: int,
                   max_cells: int, deadline: float | None, *, other_readings: bool = False,
                   with_ties: ResultShape | None = None) -> Comparison:
    """A query's raw result (as sqlite3 returns it) against the gold's shape: normalized, then
    compared within ``max_cells`` cell visits (``deadline``, on ``time.monotonic``, only guards).

    ``other_readings``: on a neighbour or search database, where the original accepted the answer,
    two fair readings the original could not tell from the gold's also match: the gold's rows with
    the whole tie its LIMIT cuts (``with_ties``), and the gold's rows each once (where the gold
    repeats a row because a join does, and the answer repeats none). Raises as ``compare``.
    """
    if pred_ncols == gold.ncols and raw_rows == gold.plain(digits):
        return _SAME_ROWS[gold.ordered]  # what compare says of rows equal to the gold's, in its order
    rows = normalize_rows(raw_rows, digits)
    budget = Budget(max_cells, deadline)
    result = compare(gold, rows, pred_ncols, budget=budget)
    if result.match or not other_readings:
        return result
    if with_ties is not None and compare(with_ties, rows, pred_ncols, budget=budget).match:
        return Comparison(True, TIES_DETAIL)
    if not gold.ordered and len(set(rows)) == len(rows) and len(set(gold.rows)) < len(gold.rows):
        once = ResultShape(gold.ncols, tuple(dict.fromkeys(gold.rows)), False, (Segment(0, len(set(gold.rows))),))
        if compare(once, rows, pred_ncols, budget=budget).match:
            return Comparison(True, SET_DETAIL)
    return result
