"""One pre-push check's result: a name, passed or not, a one-line summary and the first failures."""

from __future__ import annotations

import dataclasses

MAX_SHOWN = 8  # failures listed per check; the count says how many there were


@dataclasses.dataclass
class Check:
    name: str
    passed: bool
    summary: str
    failures: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def _check(name: str, failures: list[str], ok: str, bad: str | None = None) -> Check:
    bad = bad or f"{len(failures)} failure(s)"
    return Check(name, not failures, ok if not failures else bad, failures[:MAX_SHOWN])
