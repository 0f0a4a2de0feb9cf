"""One call to a bundle's scoring function, as the trainer makes it, classified.

A call gives a score in [0, 1]; or the bundle's typed error (recognized by its ``code``, see
harness.common.outcomes), which leaves the row unscored; or anything else, which is a crash of the
bundle (or a return that is not a score). Never swallowed: the kind says which.

>>> call_score(lambda **kw: 1.0).kind, call_score(lambda **kw: 2.0).kind
('scored', 'bad_return')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from harness.common.bundle_loader import LoadedBundle
from harness.common.errors import InputError
from harness.common.outcomes import BUNDLE_ERRORS, CallKind, ErrorCode, Outcome, error_code


@dataclasses.dataclass(frozen=True)
class Call:
    """What one call to the bundle gave: a score, or why there is none."""

    score: float | None
    kind: CallKind
    detail: str = ""
    outcome: Outcome | None = None  # unscored calls: the error's outcome; faults: "crash" / "bad_return"
    code: ErrorCode | None = None  # unscored calls: the bundle error's code


def call_score(fn: Callable[..., Any], **kwargs: Any) -> Call:
    """Call a scoring function as the trainer would, classifying what comes back."""
    try:
        value = fn(**kwargs)
    except Exception as exc:  # classified, never swallowed: reported as unscored or as a crash
        code = error_code(exc)
        if code is not None:
            return Call(None, "unscored", f"{type(exc).__name__}: {exc}", BUNDLE_ERRORS[code].outcome, code)
        return Call(None, "crash", f"{type(exc).__name__}: {exc}", "crash")
    if isinstance(value, dict):  # verl accepts {"score": ...}
        value = value.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return Call(None, "bad_return", f"returned {value!r}, not a number in [0, 1]", "bad_return")
    return Call(float(value), "scored")


def counters(loaded: LoadedBundle) -> tuple[Callable[[], dict], Callable[[], None]]:
    """The bundle's outcome telemetry (verify.outcome_counts / reset_outcome_counts), or no-ops."""
    try:
        verify = loaded.module("verify")
        return verify.outcome_counts, verify.reset_outcome_counts
    except (InputError, AttributeError):
        return dict, lambda: None
