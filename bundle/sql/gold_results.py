"""Gold results: run a gold query once, with what counts as the same rows, and (de)serialize them.

When the gold's outermost query orders its rows, the ORDER BY keys are read too, by running the
gold with the keys added as extra result columns, so that tied rows can be grouped. When a LIMIT
cuts through a tie, the gold is also run without the LIMIT to learn every member of that tie;
the rows up to the end of that tie are kept as ``with_ties``, the other fair reading of such a
question on a neighbour database (``WHERE x = (SELECT max(x) ...)`` for ``ORDER BY x DESC LIMIT 1``).
``null_keys`` says whether any key the gold sorts by is NULL (NULL sorts first).
If the keys cannot be read (a compound query ordered by an expression, say), order is strict.

Results are computed at build time and stored in the bundle's index (``to_json``), keyed by the
database's SHA-256, the gold text and the number rounding; otherwise once per process
(``GoldCache``). With the rows goes the number of SQLite VM steps the gold took: a predicted
query's step budget is derived from it (``scoring_limits.Limits.budget_steps``).
"""

from __future__ import annotations

import base64
import dataclasses
import threading
from collections.abc import Callable

from ..contract.limits import DEFAULT_LIMITS
from . import compare as sql_compare
from . import text as sql_text
from .compare import ResultShape, Segment

# run(sql) -> (column names, raw rows, VM steps); raises on failure.
Runner = Callable[[str], "tuple[tuple[str, ...], list[tuple], int]"]


@dataclasses.dataclass(frozen=True)
class GoldResult:
    """A gold's result shape, and the VM steps the gold query took to produce it."""

    shape: ResultShape
    steps: int
    with_ties: ResultShape | None = None  # the rows up to the end of a tie its LIMIT cuts (offset 0)
    null_keys: bool | None = None  # a key it sorts by is NULL (None: no ORDER BY, or keys unread)


def _unquote(name: str) -> str:
    if len(name) >= 2 and name[0] in "\"`[" and name[-1] in "\"`]":
        return name[1:-1]
    return name


def _key_columns(terms: tuple[str, ...], columns: tuple[str, ...]) -> list[int | str]:
    """Each ORDER BY term as a result-column index, or as an expression to add to the select list."""
    lowered = [c.lower() for c in columns]
    out: list[int | str] = []
    for term in terms:
        if term.isdigit() and 1 <= int(term) <= len(columns):
            out.append(int(term) - 1)
        elif _unquote(term).lower() in lowered and lowered.count(_unquote(term).lower()) == 1:
            out.append(lowered.index(_unquote(term).lower()))
        else:
            out.append(term)
    return out


def _keyed_rows(sql: str, clauses: sql_text.OuterClauses, keys: list[int | str], ncols: int,
                run: Runner, drop_limit: bool, digits: int) -> list[tuple[tuple, tuple]] | None:
    """(projected row, key tuple) pairs in the gold's order, or None when keys cannot be read."""
    extra = [k for k in keys if isinstance(k, str)]
    text = sql[:clauses.limit_start] if drop_limit and clauses.limit_start is not None else sql
    if extra:
        if clauses.select_list_end is None:
            return None
        at = clauses.select_list_end
        text = text[:at].rstrip() + ", " + ", ".join(extra) + " " + text[at:]
    _columns, rows, _steps = run(text)
    out = []
    for row in rows:
        if len(row) != ncols + len(extra):
            return None
        extra_values = iter(row[ncols:])
        key = tuple(row[k] if isinstance(k, int) else next(extra_values) for k in keys)
        out.append((tuple(row[:ncols]), tuple(sql_compare.normalize_rows([key], digits)[0])))
    return out


def _groups(keys: list[tuple]) -> list[tuple[int, int]]:
    spans, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            spans.append((start, i))
            start = i
    return spans


@dataclasses.dataclass(frozen=True)
class _Ordered:
    segments: tuple
    with_ties: ResultShape | None
    null_keys: bool


def _has_null(keys: list[tuple]) -> bool:
    return any(v[0] == sql_compare.NULL_TAG for key in keys for v in key)


def _ordered_segments(sql: str, clauses: sql_text.OuterClauses, columns: tuple[str, ...],
                      rows: list[tuple], run: Runner, digits: int) -> _Ordered | None:
    keys = _key_columns(clauses.order_terms, columns)
    if clauses.is_compound and any(isinstance(k, str) for k in keys):
        return None
    keyed = _keyed_rows(sql, clauses, keys, len(columns), run, drop_limit=False, digits=digits)
    if keyed is None or [r for r, _ in keyed] != rows:
        return None  # the keyed query does not reproduce the gold (DISTINCT, say): keep strict order
    segments = tuple(Segment(a, b) for a, b in _groups([k for _, k in keyed]))
    if clauses.limit is None or not rows:
        return _Ordered(segments, None, _has_null([k for _, k in keyed]))
    try:
        full = _keyed_rows(sql, clauses, keys, len(columns), run, drop_limit=True, digits=digits)
    except Exception:  # noqa: BLE001 - the unlimited gold is only a refinement: strict is safe
        full = None
    if full is None:
        return _Ordered(segments, None, _has_null([k for _, k in keyed]))
    full_spans = _groups([k for _, k in full])
    window = (clauses.offset, clauses.offset + len(rows))
    out = []
    for a, b in full_spans:
        lo, hi = max(a, window[0]), min(b, window[1])
        if lo >= hi:
            continue
        pool = None
        if (lo, hi) != (a, b):
            pool = tuple(sql_compare.normalize_rows([r for r, _ in full[a:b]], digits))
        out.append(Segment(lo - window[0], hi - window[0], pool))
    if sum(s.end - s.start for s in out) != len(rows):
        return _Ordered(segments, None, _has_null([k for _, k in full]))
    with_ties = None
    if window[0] == 0 and out[-1].pool is not None:
        end = next(b for a, b in full_spans if a < window[1] <= b)
        spans = tuple(Segment(a, b) for a, b in full_spans if b <= end)
        with_ties = ResultShape(len(columns), tuple(sql_compare.normalize_rows([r for r, _ in full[:end]], digits)),
                                True, spans)
    return _Ordered(tuple(out), with_ties, _has_null([k for _, k in full]))


def compute(sql: str, run: Runner, digits: int = DEFAULT_LIMITS.float_digits) -> GoldResult:
    """Run the gold (and, when it orders, its keys): its ResultShape and the steps it took."""
    columns, raw_rows, steps = run(sql)
    norm = tuple(sql_compare.normalize_rows(raw_rows, digits))
    clauses = sql_text.outer_clauses(sql_text_cut(sql))
    if not clauses.order_terms:
        return GoldResult(ResultShape(len(columns), norm, False, (Segment(0, len(norm)),)), steps)
    try:
        found = _ordered_segments(sql, clauses, columns, raw_rows, run, digits)
    except Exception:  # noqa: BLE001 - keys unreadable: order stays strict, which is safe
        found = None
    if found is None:
        return GoldResult(ResultShape(len(columns), norm, True, tuple(Segment(i, i + 1) for i in range(len(norm)))),
                          steps)
    return GoldResult(ResultShape(len(columns), norm, True, found.segments), steps, found.with_ties, found.null_keys)


def sql_text_cut(sql: str) -> str:
    return sql[: sql_text.statement_end(sql)]


# ---- JSON form, stored in the bundle's index -------------------------------------------------

def _value_to_json(key: tuple) -> object:
    tag, value = key
    if tag == sql_compare.BLOB_TAG:
        return {"blob": base64.b64encode(value).decode("ascii")}
    if tag == sql_compare.NULL_TAG:
        return None
    if tag == sql_compare.NAN_TAG:
        return {"nan": True}
    return value


def _value_from_json(value: object) -> tuple:
    if isinstance(value, dict):
        if "blob" in value:
            return (sql_compare.BLOB_TAG, base64.b64decode(value["blob"]))
        return (sql_compare.NAN_TAG, 0)
    return sql_compare.value_key(value)


def _shape_to_json(shape: ResultShape) -> dict:
    rows = [[_value_to_json(v) for v in row] for row in shape.rows]
    segs = [[s.start, s.end, None if s.pool is None else [[_value_to_json(v) for v in r] for r in s.pool]]
            for s in shape.segments]
    return {"ncols": shape.ncols, "rows": rows, "ordered": shape.ordered, "segments": segs if shape.ordered else None}


def _shape_from_json(data: dict) -> ResultShape:
    rows = tuple(tuple(_value_from_json(v) for v in row) for row in data["rows"])
    if not data["ordered"]:
        return ResultShape(int(data["ncols"]), rows, False, (Segment(0, len(rows)),))
    segs = tuple(Segment(int(a), int(b), None if pool is None else
                         tuple(tuple(_value_from_json(v) for v in r) for r in pool))
                 for a, b, pool in data["segments"])
    return ResultShape(int(data["ncols"]), rows, True, segs)


def to_json(gold: GoldResult) -> dict:
    out = {**_shape_to_json(gold.shape), "steps": gold.steps}
    if gold.with_ties is not None:
        out["with_ties"] = _shape_to_json(gold.with_ties)
    if gold.null_keys is not None:
        out["null_keys"] = gold.null_keys
    return out


def from_json(data: dict) -> GoldResult | None:
    """The stored result, or None when it lacks its step count (a bundle built before budgets)."""
    if not isinstance(data.get("steps"), int):
        return None
    ties = data.get("with_ties")
    null_keys = data.get("null_keys")
    return GoldResult(_shape_from_json(data), data["steps"], None if ties is None else _shape_from_json(ties),
                      null_keys if isinstance(null_keys, bool) else None)


class GoldCache:
    """Gold results computed at most once per (database, gold text, digits), safe across threads.

    A gold that fails is not remembered: it raises on every call (a row that cannot be scored stays
    loud), and a transient failure (the shared heap ceiling, say) does not stick.
    """

    def __init__(self) -> None:
        self._done: dict[tuple, GoldResult] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: tuple, compute: Callable[[], GoldResult]) -> tuple[GoldResult, bool]:
        """The result for ``key`` and whether it was already known (computed now: False)."""
        found = self._done.get(key)
        if found is not None:
            return found, True
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            found = self._done.get(key)
            if found is not None:
                return found, True
            found = compute()
            self._done[key] = found
            return found, False

    def peek(self, key: tuple) -> GoldResult | None:
        return self._done.get(key)

    def put(self, key: tuple, gold: GoldResult) -> None:
        self._done[key] = gold
