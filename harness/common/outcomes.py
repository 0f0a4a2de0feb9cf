"""The closed vocabularies the harness reads and writes: outcomes, call kinds, the bundle's error codes.

The bundle defines what it returns (``bundle/verify.py`` ``OUTCOMES``) and what it raises
(``bundle/contract/errors.py``, each class with a stable ``code``). The harness cannot import the
bundle where the bundle is a zip under test (the trainer container, the service image), so the names
are stated here once, typed, and tests/test_vocabulary.py holds them equal to the bundle's. The
harness matches a bundle error by its ``code``, never by its class name.

>>> error_code(type("StaleBundleError", (Exception,), {"code": "stale_bundle"})())
'stale_bundle'
>>> BUNDLE_ERRORS["stale_bundle"].http_status, BUNDLE_ERRORS["gold_query"].outcome
(422, 'gold_error')
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

# What a scored verdict says (score 1.0 for match, 0.0 for every other).
ScoredOutcome = Literal["match", "mismatch", "no_query", "prediction_error", "forbidden", "prediction_over_budget",
                        "prediction_over_cap"]
# Not the model's doing: the row is unscored (score null), never 0.0.
UnscoredOutcome = Literal["gold_error", "infrastructure_error", "infrastructure_timeout"]
# The emulator's own: the bundle's function raised something that is not its typed error, or
# returned something that is not a score in [0, 1]. Both fail the run.
CallFault = Literal["crash", "bad_return"]
Outcome = Literal[ScoredOutcome, UnscoredOutcome, CallFault]

SCORED_OUTCOMES: tuple[str, ...] = get_args(ScoredOutcome)
UNSCORED_OUTCOMES: tuple[str, ...] = get_args(UnscoredOutcome)
CALL_FAULTS: tuple[str, ...] = get_args(CallFault)
OUTCOMES: tuple[str, ...] = SCORED_OUTCOMES + UNSCORED_OUTCOMES + CALL_FAULTS

# What one call to the bundle gave.
CallKind = Literal["scored", "unscored", "crash", "bad_return"]

ErrorCode = Literal["scoring_infrastructure", "bundle_data", "database_unavailable", "row_resolution",
                    "stale_bundle", "gold_query", "call_arguments", "scoring_timeout"]


@dataclasses.dataclass(frozen=True)
class BundleError:
    """How the harness treats one of the bundle's typed errors."""

    code: ErrorCode
    name: str  # the class in bundle/contract/errors.py, for messages and docs only
    exit_code: int  # as the class carries it
    outcome: UnscoredOutcome
    http_status: int  # what the grader service answers: 4xx the request's (no retry helps), 5xx its data
    meaning: str


BUNDLE_ERRORS: dict[str, BundleError] = {e.code: e for e in (
    BundleError("scoring_infrastructure", "ScoringInfrastructureError", 20, "infrastructure_error", 500,
                "the base class: no trustworthy score for this row"),
    BundleError("bundle_data", "BundleDataError", 21, "infrastructure_error", 503,
                "data/index.json missing, unreadable or of another version"),
    BundleError("database_unavailable", "DatabaseUnavailableError", 22, "infrastructure_error", 503,
                "a database missing, unreadable, corrupt, or not the one indexed (SHA-256)"),
    BundleError("row_resolution", "RowResolutionError", 23, "infrastructure_error", 422,
                "a gold stored under several databases and nothing tells them apart"),
    BundleError("stale_bundle", "StaleBundleError", 24, "infrastructure_error", 422,
                "the row's gold (or database) is not in the bundle: dataset and bundle differ"),
    BundleError("gold_query", "GoldQueryError", 25, "gold_error", 422,
                "the gold itself failed, timed out or went over a cap"),
    BundleError("call_arguments", "CallArgumentsError", 26, "infrastructure_error", 400,
                "no completion or no gold in the call"),
    BundleError("scoring_timeout", "ScoringTimeoutError", 27, "infrastructure_timeout", 503,
                "the wall-clock guard fired while the query was within its step budget: the machine is too slow or overloaded"),
)}
assert set(BUNDLE_ERRORS) == set(get_args(ErrorCode))


def error_code(exc: BaseException) -> ErrorCode | None:
    """The bundle error code ``exc`` carries (None: not one of the bundle's typed errors)."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code in BUNDLE_ERRORS else None  # type: ignore[return-value]
