"""Comparison rules (bundle/sql/compare.py): one table row per rule, and properties against brute force."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundle.sql.compare import (
    Budget,
    CompareBudgetExceeded,
    CompareWallGuard,
    ResultShape,
    Segment,
    bag_shape,
    compare,
    compare_result,
    normalize_rows,
    rows_fit,
    value_key,
)


def ordered_shape(rows, segments, ncols=None):
    norm = tuple(normalize_rows(rows))
    segs = tuple(Segment(a, b, None if pool is None else tuple(normalize_rows(pool))) for a, b, pool in segments)
    return ResultShape(ncols if ncols is not None else len(rows[0]), norm, True, segs)


def strict(rows):
    return ordered_shape(rows, [(i, i + 1, None) for i in range(len(rows))])


BAG_CASES = [
    # (id, gold rows, predicted rows, match)
    ("same rows same order", [(1, "a"), (2, "b")], [(1, "a"), (2, "b")], True),
    ("row order is free without ORDER BY", [(1, "a"), (2, "b")], [(2, "b"), (1, "a")], True),
    ("duplicates count", [(1,), (1,), (2,)], [(1,), (2,), (2,)], False),
    ("a missing duplicate is a mismatch", [(1,), (1,)], [(1,)], False),
    ("extra row is a mismatch", [(1,)], [(1,), (2,)], False),
    ("column order is free", [(1, "a"), (2, "b")], [("a", 1), ("b", 2)], True),
    ("columns must keep their pairing", [(1, "a"), (2, "b")], [(1, "b"), (2, "a")], False),
    ("extra column is a mismatch", [(1,)], [(1, 1)], False),
    ("missing column is a mismatch", [(1, 2)], [(1,)], False),
    ("int equals float of the same value", [(1,)], [(1.0,)], True),
    ("float sums equal after rounding", [(0.3,)], [(0.1 + 0.2,)], True),
    ("a real difference in the 10th digit counts", [(0.3,)], [(0.3000000001,)], False),
    ("large ints compare exactly below 1e12", [(123456789012,)], [(123456789013,)], False),
    ("NULL is not empty text", [(None,)], [("",)], False),
    ("NULL is not zero", [(None,)], [(0,)], False),
    ("NULL equals NULL", [(None, 1)], [(None, 1)], True),
    ("text is exact: case counts", [("Alice",)], [("alice",)], False),
    ("text is exact: spaces count", [("Alice",)], [("Alice ",)], False),
    ("text '1' is not the number 1", [("1",)], [(1,)], False),
    ("blob is not text", [(b"ab",)], [("ab",)], False),
    ("blobs compare by bytes", [(b"ab",)], [(b"ab",)], True),
    ("two empty results match", [], [], True),
    ("empty prediction against rows", [(1,)], [], False),
]


@pytest.mark.parametrize("gold, pred, match", [c[1:] for c in BAG_CASES], ids=[c[0] for c in BAG_CASES])
def test_bag_rule(gold, pred, match):
    ncols = len(gold[0]) if gold else 1
    pred_ncols = len(pred[0]) if pred else ncols
    assert compare(bag_shape(gold, ncols), normalize_rows(pred), pred_ncols).match is match


ORDER_CASES = [
    # (id, gold shape, predicted rows, match)
    ("strict order: same order", strict([(1,), (2,), (3,)]), [(1,), (2,), (3,)], True),
    ("strict order: swapped rows", strict([(1,), (2,), (3,)]), [(2,), (1,), (3,)], False),
    ("tie group may come in any order", ordered_shape([("a", 9), ("b", 9), ("c", 1)], [(0, 2, None), (2, 3, None)]),
     [("b", 9), ("a", 9), ("c", 1)], True),
    ("tie group must stay in its place", ordered_shape([("a", 9), ("b", 9), ("c", 1)], [(0, 2, None), (2, 3, None)]),
     [("c", 1), ("a", 9), ("b", 9)], False),
    ("LIMIT cutting a tie accepts another member", ordered_shape([("Ava",)], [(0, 1, [("Ava",), ("Dev",)])]),
     [("Dev",)], True),
    ("LIMIT cutting a tie rejects a non-member", ordered_shape([("Ava",)], [(0, 1, [("Ava",), ("Dev",)])]),
     [("Ben",)], False),
    ("cut tie cannot repeat a member", ordered_shape([("a",), ("b",)], [(0, 2, [("a",), ("b",), ("c",)])]),
     [("a",), ("a",)], False),
    ("ordered with columns swapped", strict([(1, "x"), (2, "y")]), [("x", 1), ("y", 2)], True),
    ("ordered with columns swapped and rows out of order", strict([(1, "x"), (2, "y")]), [("y", 2), ("x", 1)], False),
]


@pytest.mark.parametrize("gold, pred, match", [c[1:] for c in ORDER_CASES], ids=[c[0] for c in ORDER_CASES])
def test_order_rule(gold, pred, match):
    assert compare(gold, normalize_rows(pred), gold.ncols).match is match


def test_mismatch_details_say_why():
    gold = bag_shape([(1, 2)])
    assert "columns" in compare(gold, normalize_rows([(1,)]), 1).detail
    assert "rows" in compare(gold, normalize_rows([(1, 2), (1, 2)]), 2).detail
    assert compare(strict([(1,), (2,)]), normalize_rows([(2,), (1,)]), 1).detail == "same rows, wrong order"


@pytest.mark.parametrize("a, b, equal", [
    (1, 1.0, True), (-0.0, 0, True), (1e15, 10 ** 15, True), (2 ** 63 - 1, float(2 ** 63), True),
    (1 / 3, 0.333333333333, True), (None, None, True), (float("inf"), float("inf"), True),
    (float("nan"), None, False), (True, 1, True), ("x", b"x", False),
], ids=repr)
def test_value_keys(a, b, equal):
    assert (value_key(a) == value_key(b)) is equal


def test_nine_by_nine_bits_is_cheap_and_right():
    # The official evaluator brute-forces 9! column orders here (minutes); refinement needs a few
    # rounds: a few thousand cell visits, far below the budget (counted, not timed).
    rows = [tuple((i >> j) & 1 if j < 5 else (i + j) % 2 for j in range(9)) for i in range(9)]
    perm = [3, 7, 0, 8, 1, 5, 2, 6, 4]
    pred = [tuple(row[perm[k]] for k in range(9)) for row in reversed(rows)]
    result = compare(bag_shape(rows), normalize_rows(pred), 9)
    assert result.match and 0 < result.cells < 10_000
    broken = list(pred)
    broken[0] = tuple(1 - v for v in broken[0])
    assert not compare(bag_shape(rows), normalize_rows(broken), 9).match


def test_regular_structures_need_individualization():
    # Incidence of two disjoint triangles vs a hexagon: every column and row has the same degree, so
    # colour refinement alone cannot tell them apart; the search must still answer correctly.
    def cycle(edges, n):
        return [tuple(1 if v in e else 0 for v in range(n)) for e in edges]
    triangles = cycle([(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)], 6)
    hexagon = cycle([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)], 6)
    assert not compare(bag_shape(triangles), normalize_rows(hexagon), 6).match
    relabel = [2, 0, 1, 5, 3, 4]
    shuffled = [tuple(row[relabel[k]] for k in range(6)) for row in triangles[::-1]]
    assert compare(bag_shape(triangles), normalize_rows(shuffled), 6).match


def test_budget_exceeded_raises():
    # Two regular structures (see above): refinement cannot decide, so the search must branch.
    triangles = [(1, 1, 0, 0, 0, 0), (0, 1, 1, 0, 0, 0), (1, 0, 1, 0, 0, 0),
                 (0, 0, 0, 1, 1, 0), (0, 0, 0, 0, 1, 1), (0, 0, 0, 1, 0, 1)]
    hexagon = [(1, 1, 0, 0, 0, 0), (0, 1, 1, 0, 0, 0), (0, 0, 1, 1, 0, 0),
               (0, 0, 0, 1, 1, 0), (0, 0, 0, 0, 1, 1), (1, 0, 0, 0, 0, 1)]
    needed = compare(bag_shape(triangles), normalize_rows(hexagon), 6).cells
    with pytest.raises(CompareBudgetExceeded):
        compare(bag_shape(triangles), normalize_rows(hexagon), 6, budget=Budget(needed - 1))
    assert not compare(bag_shape(triangles), normalize_rows(hexagon), 6, budget=Budget(needed)).match


def test_the_wall_clock_only_guards():
    # A deadline already past raises the guard's own exception: the caller reports it unscored.
    rows = [(1, 2, 3), (4, 5, 6)]
    swapped = [(3, 2, 1), (6, 5, 4)]  # columns reordered: a search is needed
    assert compare(bag_shape(rows), normalize_rows(swapped), 3).match
    with pytest.raises(CompareWallGuard):
        compare(bag_shape(rows), normalize_rows(swapped), 3, budget=Budget(10_000, deadline=time.monotonic() - 1))


# ---- properties --------------------------------------------------------------------------------

values = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([0.5, 1.0, "a", "b", "", b"a"]))


def brute_force(gold: ResultShape, pred: list[tuple], ncols: int) -> bool:
    if len(pred) != len(gold.rows) or ncols != gold.ncols:
        return False
    return any(rows_fit(gold, pred, list(p)) for p in itertools.permutations(range(ncols)))


@st.composite
def tables(draw, max_cols=4, max_rows=6):
    ncols = draw(st.integers(1, max_cols))
    rows = draw(st.lists(st.tuples(*[values] * ncols), max_size=max_rows))
    return ncols, rows


@st.composite
def gold_and_prediction(draw):
    ncols, rows = draw(tables())
    perm = draw(st.permutations(range(ncols)))
    pred = [tuple(r[perm[k]] for k in range(ncols)) for r in rows]
    pred = draw(st.permutations(pred)) if draw(st.booleans()) else pred
    if pred and draw(st.booleans()):
        i, j = draw(st.integers(0, len(pred) - 1)), draw(st.integers(0, ncols - 1))
        row = list(pred[i])
        row[j] = draw(values)
        pred[i] = tuple(row)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(rows)), max_size=3))) | {0, len(rows)})
    ordered = draw(st.booleans())
    if not ordered:
        return bag_shape(rows, ncols), normalize_rows(pred), ncols
    segments = []
    for a, b in zip(cuts, cuts[1:]):
        pool = None
        if b == len(rows) and draw(st.booleans()):
            extra = draw(st.lists(st.tuples(*[values] * ncols), max_size=2))
            pool = rows[a:b] + extra
        segments.append((a, b, pool))
    return ordered_shape(rows, segments, ncols) if rows else bag_shape(rows, ncols), normalize_rows(pred), ncols


@settings(max_examples=600, deadline=None)
@given(gold_and_prediction())
def test_matching_agrees_with_brute_force(case):
    gold, pred, ncols = case
    assert compare(gold, pred, ncols).match is brute_force(gold, pred, ncols)


@settings(max_examples=300, deadline=None)
@given(tables(max_cols=5, max_rows=8), tables(max_cols=5, max_rows=8))
def test_never_raises_on_arbitrary_results(gold, pred):
    result = compare(bag_shape(gold[1], gold[0]), normalize_rows(pred[1]), pred[0])
    assert isinstance(result.match, bool) and result.detail


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5),
                                   st.binary(max_size=3)), min_size=2, max_size=2), max_size=5))
def test_a_result_always_matches_itself_shuffled(rows):
    rows = [tuple(r) for r in rows]
    assert compare(bag_shape(rows, 2), normalize_rows([(b, a) for a, b in reversed(rows)]), 2).match


# Values sqlite3 hands back, and the look-alikes of each that the rule table calls the same or not.
_RAW = st.one_of(st.none(), st.integers(-10**13, 10**13), st.sampled_from([0, -0.0, 1.0, 2.5, 1e12, 1e13, 10**12 - 1.0, float("nan")]),
                 st.floats(allow_nan=True), st.text(max_size=3), st.binary(max_size=2))


def _look_alike(value):
    if value is None or value != value:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, float) and value == value and value.is_integer() and abs(value) < 1e15:
        return int(value)
    if isinstance(value, str):
        return value.encode()
    return value


@settings(max_examples=600, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.tuples(*[_RAW] * n), max_size=4))),
       st.sampled_from(["same", "look-alike", "reversed"]), st.sampled_from([12, 6]), st.booleans())
def test_a_raw_result_equal_to_the_golds_is_judged_as_its_normalized_rows_are(case, how, digits, ordered):
    """compare_result skips normalizing a raw result equal to the gold's plain rows: the verdict must be the
    one the rule table gives the normalized rows, for every value sqlite3 returns and its look-alikes."""
    ncols, rows = case
    pred = {"same": list(rows), "look-alike": [tuple(_look_alike(v) for v in r) for r in rows],
            "reversed": list(reversed(rows))}[how]
    shape = (ordered_shape(rows, [(i, i + 1, None) for i in range(len(rows))], ncols) if ordered and rows
             else bag_shape(rows, ncols, digits))
    if ordered and rows:
        shape = ResultShape(ncols, tuple(normalize_rows(rows, digits)), True, shape.segments)
    assert compare_result(shape, pred, ncols, digits, 10**6, None) == compare(shape, normalize_rows(pred, digits), ncols)
