"""The bundle the grader service serves: the pushed zip, unpacked, imported, its data checked.

Loading reuses the emulated trainer's loader (``harness.common.bundle_loader.load_bundle``): entries checked
(no unsafe path, no symlink, sizes within the pack caps), unpacked into a folder made read-only,
imported as a package under a unique name, ``TRAINER_BUNDLE_ROOT`` set. The service is *ready*
only once ``check_data`` has loaded the index and read every database once (each one's SHA-256
against the index). It runs in the gunicorn arbiter before any worker is forked, so every worker
starts with the checked data and no SQLite connection is ever shared across a fork.

Faults the bundle raises carry a stable ``code`` (bundle/contract/errors.py); ``classify`` turns
one into the HTTP error the service answers with (harness.common.outcomes.BUNDLE_ERRORS: 4xx when
the same request will fail the same way, 5xx when the service's data is at fault). Never a score.

Standard library only (with harness.common), like the image needs.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from pathlib import Path
from typing import Any, Literal

from harness.common.bundle_loader import LoadedBundle, load_bundle
from harness.common.errors import InputError
from harness.common.layout import require
from harness.common.outcomes import BUNDLE_ERRORS, UnscoredOutcome, error_code

# What an answer that is not a score says it is: the bundle's unscored outcome, or a bad request.
ServiceOutcome = Literal[UnscoredOutcome, "request_error"]

@dataclasses.dataclass(frozen=True)
class GradeError:
    """An answer that is not a score: the HTTP status and a JSON body naming the cause."""

    status: int
    error: str  # the exception's type name, or one of the service's own (e.g. "WorkerTimeout")
    outcome: ServiceOutcome  # the bundle error's unscored outcome; "request_error" for a bad request
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
        self._index_module = loaded.module("scoring.index")
        self._entry_module = loaded.module("scoring.entry")
        # the multi-turn episode (bundle/scoring/episode.py); a bundle built before it has none
        self.episodes: Any = loaded.module("scoring.episode") if (loaded.root / "scoring" / "episode.py").is_file() else None
        self.outcomes: tuple[str, ...] = tuple(getattr(loaded.module("verify"), "OUTCOMES", ()))
        self.data: dict[str, Any] | None = None  # set by check_data: what /health reports
        self._reward_shape: Any = None  # the index's reward shape (None: binary), set by check_data

    @classmethod
    def load(cls, zip_path: str | os.PathLike, workdir: str | os.PathLike | None = None) -> ServedBundle:
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
        try:
            index = self._index_module.load(os.path.realpath(self.root))
            for db_id in sorted(index.databases):
                index.database_path(db_id)
        except Exception as exc:
            if error_code(exc) is None:
                raise
            raise InputError(f"the bundle {self.loaded.zip_path} cannot be served: "
                             f"{type(exc).__name__}: {exc}") from None
        self._reward_shape = index.reward_shape
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

    def row_databases(self) -> dict[str, str]:
        """row id -> db_id, from the bundle's index (hints for the rows the service is sent)."""
        index = self._index_module.load(os.path.realpath(self.root))
        return {row_id: str(row["db_id"]) for row_id, row in index.rows_by_id.items() if row.get("db_id")}

    def limits(self) -> Any:
        """The bundle's limits in this process (its defaults, SPIDER_SCORING_* overrides)."""
        return self._entry_module.current_limits()

    def shaped(self, result: dict[str, Any], completion: str) -> float:
        """What the bundle's reward shape pays for a grader answer (its score under ``binary``)."""
        if self._reward_shape is None:
            return float(result["score"])
        return float(self._reward_shape.value(result["outcome"], completion, result.get("sql")))

    def classify(self, exc: BaseException) -> GradeError | None:
        """The HTTP error for a bundle fault (None: not one of the bundle's errors)."""
        code = error_code(exc)
        if code is None:
            return None
        known = BUNDLE_ERRORS[code]
        return GradeError(known.http_status, type(exc).__name__, known.outcome, str(exc),
                          getattr(exc, "exit_code", known.exit_code))

    def close(self) -> None:
        self.loaded.close()


def require_zip(path: str | os.PathLike) -> Path:
    """``path`` as a Path when it is a readable file; InputError saying how to make one."""
    return require(Path(path), "the bundle zip")
