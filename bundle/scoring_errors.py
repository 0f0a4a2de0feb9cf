"""The scorer's exception tree: infrastructure faults, never a model's mistake.

A model's wrong, failing, slow or oversized query is a score of 0.0, not an exception. These
errors mean the environment or the data is broken; each message says what to do, and each type
carries an exit code for command-line callers.

>>> issubclass(StaleBundleError, ScoringInfrastructureError)
True
"""

from __future__ import annotations


class ScoringInfrastructureError(RuntimeError):
    """Base class: the scorer could not produce a trustworthy score for this row."""

    exit_code = 3
    outcome = "infrastructure_error"


class BundleDataError(ScoringInfrastructureError):
    """The bundle's data folder is missing, unreadable or inconsistent with its index."""

    exit_code = 4


class DatabaseUnavailableError(BundleDataError):
    """A database the row needs is missing, corrupt or differs from the one indexed at build time."""

    exit_code = 5


class RowResolutionError(ScoringInfrastructureError):
    """The row could not be tied to exactly one database of the bundle."""

    exit_code = 6


class StaleBundleError(RowResolutionError):
    """The row's gold query is not the one stored in the bundle: dataset and bundle differ."""

    exit_code = 7


class GoldQueryError(ScoringInfrastructureError):
    """The gold query itself failed, timed out or went over a cap: the row cannot be scored."""

    exit_code = 8
    outcome = "gold_error"


class ScoringTimeoutError(ScoringInfrastructureError):
    """The wall-clock guard fired while the query was still within its step budget.

    The machine is far too slow or overloaded for the scorer: the row is unscored, never 0.0.
    """

    exit_code = 10
    outcome = "infrastructure_timeout"


class CallArgumentsError(ScoringInfrastructureError):
    """The caller passed arguments the scorer cannot read (no completion, no gold)."""

    exit_code = 9
