"""The scorer's exception tree: infrastructure faults, never a model's mistake.

A model's wrong, failing, slow or oversized query is a score of 0.0, not an exception. These
errors mean the environment or the data is broken; each message says what to do. Each type carries
a stable ``code`` (what callers outside the zip match on: the class itself lives in the zip, so a
harness cannot import it) and an exit code for command-line callers; the project's one table of
exit codes (docs/reference/exit-codes.md) lists them beside the harness's.

>>> issubclass(StaleBundleError, ScoringInfrastructureError)
True
"""

from __future__ import annotations


class ScoringInfrastructureError(RuntimeError):
    """Base class: the scorer could not produce a trustworthy score for this row."""

    exit_code = 20
    code = "scoring_infrastructure"
    outcome = "infrastructure_error"


class BundleDataError(ScoringInfrastructureError):
    """The bundle's data folder is missing, unreadable or inconsistent with its index."""

    exit_code = 21
    code = "bundle_data"


class DatabaseUnavailableError(BundleDataError):
    """A database the row needs is missing, corrupt or differs from the one indexed at build time."""

    exit_code = 22
    code = "database_unavailable"


class RowResolutionError(ScoringInfrastructureError):
    """The row could not be tied to exactly one database of the bundle."""

    exit_code = 23
    code = "row_resolution"


class StaleBundleError(RowResolutionError):
    """The row's gold query is not the one stored in the bundle: dataset and bundle differ."""

    exit_code = 24
    code = "stale_bundle"


class GoldQueryError(ScoringInfrastructureError):
    """The gold query itself failed, timed out or went over a cap: the row cannot be scored."""

    exit_code = 25
    code = "gold_query"
    outcome = "gold_error"


class ScoringTimeoutError(ScoringInfrastructureError):
    """The wall-clock guard fired while the query was still within its step budget.

    The machine is far too slow or overloaded for the scorer: the row is unscored, never 0.0.
    """

    exit_code = 27
    code = "scoring_timeout"
    outcome = "infrastructure_timeout"


class CallArgumentsError(ScoringInfrastructureError):
    """The caller passed arguments the scorer cannot read (no completion, no gold)."""

    exit_code = 26
    code = "call_arguments"


# Warnings use the built-in categories, so that any process can unpickle them (pytest-xdist, a
# trainer's worker pool: a class of the bundle lives under a private package name that another
# process cannot import). Their messages start with these prefixes; filter on them, e.g.
# ``warnings.filterwarnings("error", message=UNSCORED_WARNING)``.
UNSCORED_WARNING = "spider-scoring: a completion is unscored"  # RuntimeWarning: None (or a raise) for a completion
HINT_IGNORED_WARNING = "spider-scoring: the db_id hint"  # UserWarning: a hint set aside for the gold's own database
