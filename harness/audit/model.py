"""The audit's records: a row audited, and what became of each of its candidate answers."""

from __future__ import annotations

import dataclasses

from harness.audit.catalogue import Candidate
from harness.emulator.calls import Call


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """A row of the bundle's index: its id, split, database and gold."""

    id: str
    split: str
    db_id: str
    gold: str


@dataclasses.dataclass(frozen=True)
class Finding:
    """What the witnesses say of a paid candidate: the fair witness that shows it wrong (``witness``),
    or, set aside, the invariants an unfair witness that tells it from its gold breaks (``breaks``;
    empty when none does)."""

    witness: str | None = None
    breaks: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Scored:
    """One candidate of a row: the bundle's call, and the Finding when it was paid 1.0."""

    candidate: Candidate
    call: Call
    finding: Finding | None = None

    @property
    def paid(self) -> bool:
        return paid(self.call)


def paid(call: Call) -> bool:
    """Whether the bundle paid ``call`` as a match: its outcome says so (the audit asks for the outcome
    fields), else a score of 1.0 (a bare binary score). A shaped reward pays a match other values."""
    if call.kind != "scored":
        return False
    return call.outcome == "match" if call.outcome is not None else call.score == 1.0
