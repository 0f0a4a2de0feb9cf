"""The bundle the grader service serves: the pushed zip, unpacked, imported, its data checked.

Loading reuses the emulated trainer's loader (``harness.emulate.load_bundle``): entries checked
(no unsafe path, no symlink, sizes within the pack caps), unpacked into a folder made read-only,
imported as a package under a unique name, ``TRAINER_BUNDLE_ROOT`` set. The service is *ready*
only once ``check_data`` has loaded the index and read every database once (each one's SHA-256
against the index). It runs in the gunicorn arbiter before any worker is forked, so every worker
starts with the checked data and no SQLite connection is ever shared across a fork.

Faults the bundle raises are subclasses of its own ``scoring_errors.ScoringInfrastructureError``
(taken from the loaded package, not from this checkout); ``classify`` turns one into the HTTP
error the service answers with. Never a score.

Standard library only (with harness.emulate, harness.pack, harness.errors), like the image needs.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from pathlib import Path
from typing import Any

from harness.emulate import LoadedBundle, load_bundle
from harness.errors import InputError

# Bundle error type -> HTTP status, most specific first (a subclass before its base).
# 4xx: the same request will fail the same way, retrying cannot help; 5xx: the service's data or
# process is at fault.
ERROR_STATUS: tuple[tuple[str, int], ...] = (
    ("CallArgumentsError", 400),     # the envelope has no completion or no gold
    ("StaleBundleError", 422),       # the row's gold is not in this bundle (dataset and bundle differ)
    ("RowResolutionError", 422),     # a gold stored under several databases, nothing tells them apart
    ("GoldQueryError", 422),         # the row's gold itself fails: the row cannot be scored
    ("DatabaseUnavailableError", 503),  # a database missing, unreadable or corrupt
    ("BundleDataError", 503),        # the index missing or unreadable
    ("ScoringTimeoutError", 503),    # the wall-clock guard fired within the budget: the machine is overloaded
    ("ScoringInfrastructureError", 500),
)


@dataclasses.dataclass(frozen=True)
class GradeError:
    """An answer that is not a score: the HTTP status and a JSON body naming the cause."""

    status: int
    error: str  # the exception's type name, or one of the service's own (e.g. "WorkerTimeout")
    outcome: str  # "infrastructure_error", "gold_error", or "unscored" for the service's own
    message: str
    exit_code: int | None = None

    def body(self) -> dict[str, Any]:
        """The JSON body: deliberately without ``score``, ``ok`` or ``passed``."""
        return {"error": self.error, "outcome": self.outcome, "message": self.message,
                "exit_code": self.exit_code, "status": self.status}


class ServedBundle:
    """A loaded bundle zip: its grader, its error types and what the health endpoint reports."""

    def __init__(self, loaded: LoadedBundle) -> None:
        self.loaded = loaded
        self.sha256 = loaded.sha256
        self.root = str(loaded.root)
        self._grade = loaded.function("grader:grade")
        self._errors = loaded.module("scoring_errors")
        self._index_module = loaded.module("bundle_index")
        self.outcomes: tuple[str, ...] = tuple(getattr(loaded.module("verify"), "OUTCOMES", ()))
        self.data: dict[str, Any] | None = None  # set by check_data: what /health reports

    @classmethod
    def load(cls, zip_path: str | os.PathLike, workdir: str | os.PathLike | None = None) -> "ServedBundle":
        """Unpack and import ``zip_path``, then check its data; InputError/PackError when it cannot serve."""
        loaded = load_bundle(zip_path, workdir)
        try:
            served = cls(loaded)
            served.check_data()
        except BaseException:
            loaded.close()
            raise
        return served

    @property
    def ready(self) -> bool:
        return self.data is not None

    def check_data(self) -> dict[str, Any]:
        """Load the index and verify every database once (SHA-256); InputError naming the fault."""
        base = self._errors.ScoringInfrastructureError
        try:
            index = self._index_module.load(os.path.realpath(self.root))
            for db_id in sorted(index.databases):
                index.database_path(db_id)
        except base as exc:
            raise InputError(f"the bundle {self.loaded.zip_path} cannot be served: "
                             f"{type(exc).__name__}: {exc}") from None
        described = index.describe()
        self.data = {"databases": described["databases"], "rows": described["rows"],
                     "sqlite_version_built": described["sqlite_version_built"],
                     "sqlite_version_runtime": sqlite3.sqlite_version,
                     "stored_gold_results_used": described["stored_gold_results_used"]}
        return self.data

    def health(self) -> dict[str, Any]:
        """Bundle identity for GET /health: zip SHA-256, data summary, both SQLite versions."""
        return {"sha256": self.sha256, "zip": os.path.basename(self.loaded.zip_path),
                "package": self.loaded.package, "ready": self.ready, **(self.data or {})}

    def grade(self, envelope: dict[str, Any]) -> dict[str, Any]:
        """``{"score", "outcome", "explanation", "sql"}``; raises the bundle's errors."""
        return self._grade(**envelope)

    def classify(self, exc: BaseException) -> GradeError | None:
        """The HTTP error for a bundle fault (None: not one of the bundle's errors)."""
        if not isinstance(exc, self._errors.ScoringInfrastructureError):
            return None
        for name, status in ERROR_STATUS:
            kind = getattr(self._errors, name, None)
            if isinstance(kind, type) and isinstance(exc, kind):
                return GradeError(status, type(exc).__name__, str(getattr(exc, "outcome", "infrastructure_error")),
                                  str(exc), getattr(exc, "exit_code", None))
        return GradeError(500, type(exc).__name__, "infrastructure_error", str(exc), None)  # pragma: no cover

    def close(self) -> None:
        self.loaded.close()


def require_zip(path: str | os.PathLike) -> Path:
    """``path`` as a Path when it is a readable file; InputError saying how to make one."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"bundle zip {path} does not exist: stage a bundle (`make sample-bundle` or "
                         "`make bundle`) and pack it (`make pack`), or pass --zip")
    return path
