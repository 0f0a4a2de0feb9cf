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
        return self.call.score == 1.0
