"""The report's scores comparable with the leaderboards, and the rows where they and the bundle part.

``grade`` writes, per row, the verdicts of Spider's official execution match and of BIRD's rule on
the original database beside the bundle's (``bundle/sql/leaderboard.py``), with the reason each
differs (DISTINCT, row order, duplicates, column order, values, a neighbour, the search, a second
statement, a disputed gold). Per stage: each rule's accuracy over the rows graded with it, the
reasons counted, and every row where a rule parts from the bundle. Results graded before these
columns existed have none: their stage is left out of this table, and said to be.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

from harness.common.results import RowResult

RULES = (("official", "Spider's official", "official_score", "official_differs"),
         ("bird", "BIRD's", "bird_score", "bird_differs"))


@dataclasses.dataclass(frozen=True)
class Apart:
    """A row where a leaderboard's rule and the bundle part."""

    row_id: str
    db_id: str
    rule: str  # "Spider's official" or "BIRD's"
    bundle: float
    other: float
    reason: str
    sql: str | None


@dataclasses.dataclass(frozen=True)
class StageRules:
    label: str
    bundle: tuple[int, int]  # (right, scored)
    by_rule: tuple[tuple[str, int, int, tuple[tuple[str, int], ...]], ...]  # (rule, right, rows, reasons counted)
    apart: tuple[Apart, ...]


def of_stage(label: str, rows: Sequence[RowResult]) -> StageRules | None:
    """The stage's figures under each rule; None when no row was graded with them."""
    scored = [r for r in rows if r.scored]
    if not any(r.official_score is not None or r.bird_score is not None for r in scored):
        return None
    by_rule, apart = [], []
    for _key, name, field, why in RULES:
        graded = [r for r in scored if getattr(r, field) is not None]
        reasons: collections.Counter = collections.Counter()
        for r in graded:
            if getattr(r, field) != r.score:
                reason = getattr(r, why) or "unexplained"
                reasons[reason] += 1
                apart.append(Apart(r.row_id, r.db_id, name, float(r.score or 0.0), float(getattr(r, field)), reason,
                                   r.sql))
        by_rule.append((name, sum(1 for r in graded if getattr(r, field) == 1.0), len(graded),
                        tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))))
    return StageRules(label, (sum(1 for r in scored if r.score == 1.0), len(scored)), tuple(by_rule), tuple(apart))


def _share(right: int, n: int) -> str:
    return f"{right / n:.3f} ({right}/{n})" if n else "-"


def table(stages: Sequence[StageRules]) -> tuple[list[str], list[list[str]]]:
    """One row per stage: the bundle's accuracy, each rule's, and why they part."""
    headers = ["stage", "this bundle"]
    for _key, name, _f, _w in RULES:
        headers += [f"{name} rule", f"apart from the bundle ({name})"]
    out = []
    for s in stages:
        row = [s.label, _share(*s.bundle)]
        for _name, right, n, reasons in s.by_rule:
            row += [_share(right, n), ", ".join(f"{reason} {count}" for reason, count in reasons) or "none"]
        out.append(row)
    return headers, out


def apart_table(rows: Sequence[Apart]) -> tuple[list[str], list[list[str]]]:
    return (["row", "database", "rule", "bundle", "rule's", "why", "SQL"],
            [[a.row_id, a.db_id, a.rule, f"{a.bundle:g}", f"{a.other:g}", a.reason, a.sql or ""] for a in rows])


CAPTION = ("Each rule computed by the bundle on the original database: Spider's official execution match "
           "(DISTINCT taken out, columns in any order, rows in order only when the gold's text says \"order by\") "
           "and BIRD's (the sets of rows); the bundle's own verdict is stricter (neighbour databases, the search, "
           "DISTINCT kept).")
