"""What a bundle's index declares its reward pays per outcome (``reward_shape``), read as data.

``prepare --reward-shape`` writes the shape into ``data/index.json`` (bundle/contract/shapes.py;
docs/reward-shapes.md). The emulated trainer and the audit judge a shaped reward by that table:
they cannot import the repository's ``bundle/`` where they run (the trainer container tests the
zip's copy), and they must not let the zip's own code say what is right. An index without the key
declares ``binary``: 1.0 for a match, 0.0 for every other outcome. Standard library only.

>>> shape = declared({"reward_shape": {"name": "sql-r1", "bounds": [-1, 7.5], "bonus": "sql-r1-length",
...     "values": {"match": 6, "mismatch": 0, "no_query": -1, "prediction_error": -1, "forbidden": -1,
...                "prediction_over_budget": -1, "prediction_over_cap": -1}}})
>>> shape.pays("match", 6.7), shape.pays("mismatch", 0.0), shape.wrong(-1.0), shape.bounds
(True, True, True, (-1.0, 7.5))
>>> declared({}).name, declared({}).binary, declared({}).bounds
('binary', True, (0.0, 1.0))
"""

from __future__ import annotations

import dataclasses
import math

from harness.common.errors import InputError
from harness.common.outcomes import SCORED_OUTCOMES

MATCH = "match"
BINARY = "binary"


@dataclasses.dataclass(frozen=True)
class DeclaredShape:
    """A bundle's reward shape: its name, its value per scored outcome, and what a match may add."""

    name: str
    values: dict[str, float]
    bonus_max: float = 0.0  # sql-r1's length part: a match pays from values["match"] to this much more

    @property
    def binary(self) -> bool:
        return self.bonus_max == 0.0 and all(self.values[o] == (1.0 if o == MATCH else 0.0) for o in SCORED_OUTCOMES)

    @property
    def bounds(self) -> tuple[float, float]:
        """The least and the most the reward may return."""
        return min(self.values.values()), max(self.values.values()) + self.bonus_max

    @property
    def least(self) -> float:
        return min(self.values.values())

    def pays(self, outcome: str, score: float | None) -> bool:
        """Whether ``score`` is what this shape pays for ``outcome`` (a match: its value, up to the bonus above)."""
        if score is None or outcome not in self.values:
            return False
        low = self.values[outcome]
        high = low + (self.bonus_max if outcome == MATCH else 0.0)
        return low <= score <= high

    def wrong(self, score: float | None) -> bool:
        """Whether ``score`` is what this shape pays for some outcome other than a match."""
        return score is not None and any(score == v for o, v in self.values.items() if o != MATCH)

    def describe(self) -> str:
        low, high = self.bounds
        paid = ", ".join(f"{o} {self.values[o]:g}" for o in SCORED_OUTCOMES)
        bonus = f" (+ up to {self.bonus_max:g} on a match)" if self.bonus_max else ""
        return f"{self.name}: {paid}{bonus}; from {low:g} to {high:g}"


BINARY_SHAPE = DeclaredShape(BINARY, {o: (1.0 if o == MATCH else 0.0) for o in SCORED_OUTCOMES})


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"the bundle's index declares {what} = {value!r}, not a finite number: rebuild the bundle")
    return float(value)


def declared(index: dict) -> DeclaredShape:
    """The shape ``index`` (a bundle's data/index.json) declares; InputError when it cannot be read."""
    entry = index.get("reward_shape")
    if entry is None:
        return BINARY_SHAPE
    values = entry.get("values") if isinstance(entry, dict) else None
    if not isinstance(values, dict) or any(o not in values for o in SCORED_OUTCOMES):
        raise InputError(f"the bundle's index declares a reward_shape without a value for every outcome "
                         f"({', '.join(SCORED_OUTCOMES)}): rebuild the bundle")
    table = {o: _number(values[o], f"reward_shape.values.{o}") for o in SCORED_OUTCOMES}
    bounds = entry.get("bounds")
    top = _number(bounds[1], "reward_shape.bounds[1]") if isinstance(bounds, list) and len(bounds) == 2 else table[MATCH]
    bonus = max(0.0, top - table[MATCH]) if entry.get("bonus") else 0.0
    return DeclaredShape(str(entry.get("name") or "custom"), table, bonus)
