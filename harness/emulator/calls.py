"""One call to a bundle's scoring function, as the trainer makes it, classified.

A call gives a score in [0, 1] (or, for the reward of a bundle built with another reward shape,
within the bounds its index declares: harness.common.reward_shape); or the bundle's typed error
(recognized by its ``code``, see harness.common.outcomes), which leaves the row unscored; or
anything else, which is a crash of the bundle (or a return that is not a score). Never swallowed:
the kind says which. A dict answer (verl's ``{"score": ...}``, the bundle's outcome fields) gives
its score, and its outcome when it names one.

>>> call_score(lambda **kw: 1.0).kind, call_score(lambda **kw: 2.0).kind
('scored', 'bad_return')
>>> call_score(lambda **kw: {"score": -1.0, "outcome": "no_query"}, bounds=(-1.0, 1.0)).outcome
'no_query'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from harness.common.bundle_loader import LoadedBundle, parse_function_spec
from harness.common.errors import InputError
from harness.common.outcomes import BUNDLE_ERRORS, SCORED_OUTCOMES, CallKind, ErrorCode, Outcome, error_code
from harness.common.reward_shape import BINARY_SHAPE, DeclaredShape, declared


@dataclasses.dataclass(frozen=True)
class Call:
    """What one call to the bundle gave: a score, or why there is none."""

    score: float | None
    kind: CallKind
    detail: str = ""
    outcome: Outcome | None = None  # unscored calls: the error's outcome; faults: "crash" / "bad_return"; scored
    # calls: the outcome a dict answer names (None for a bare number)
    code: ErrorCode | None = None  # unscored calls: the bundle error's code
    decided_on: str | None = None  # scored calls: the database a dict answer says decided (its outcome fields)


UNIT = (0.0, 1.0)


def call_score(fn: Callable[..., Any], *, bounds: tuple[float, float] = UNIT, **kwargs: Any) -> Call:
    """Call a scoring function as the trainer would, classifying what comes back; a score outside
    ``bounds`` (the grader's [0, 1], or the reward shape's) is a ``bad_return``."""
    try:
        value = fn(**kwargs)
    except Exception as exc:  # classified, never swallowed: reported as unscored or as a crash
        code = error_code(exc)
        if code is not None:
            return Call(None, "unscored", f"{type(exc).__name__}: {exc}", BUNDLE_ERRORS[code].outcome, code)
        return Call(None, "crash", f"{type(exc).__name__}: {exc}", "crash")
    outcome = decided_on = None
    if isinstance(value, dict):  # verl accepts {"score": ...}
        outcome = value.get("outcome") if value.get("outcome") in SCORED_OUTCOMES else None
        decided_on = value.get("decided_on") if isinstance(value.get("decided_on"), str) else None
        value = value.get("score")
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        return Call(None, "bad_return", f"returned {value!r}, not a number in [{low:g}, {high:g}]", "bad_return")
    return Call(float(value), "scored", outcome=outcome, decided_on=decided_on)


def counters(loaded: LoadedBundle) -> tuple[Callable[[], dict], Callable[[], None]]:
    """The bundle's outcome telemetry (verify.outcome_counts / reset_outcome_counts), or no-ops."""
    try:
        verify = loaded.module("verify")
        return verify.outcome_counts, verify.reset_outcome_counts
    except (InputError, AttributeError):
        return dict, lambda: None


def shape_for(loaded: LoadedBundle, function: str = "reward") -> DeclaredShape:
    """What ``function`` (``MODULE[:FUNCTION]``) of the loaded bundle pays per outcome: the shape its
    index declares for the ``reward`` module, binary for every other (the grader is always binary)."""
    module, _name = parse_function_spec(function)
    return declared(loaded.index()) if module == "reward" else BINARY_SHAPE
