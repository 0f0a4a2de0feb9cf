"""The audit per reward shape: what each shape pays a degenerate policy, beside what it pays the gold.

Fed by the audit's per-candidate outcomes (harness.audit.run scores every candidate once, with its
outcome): for every preset of bundle.contract.shapes (and the bundle's own shape, when it is a
custom one), every split audited and every policy of the catalogue, the **expected reward** of a
policy that writes, on each row it applies to, one of its candidates at random: the mean over the
row's candidates of what the shape pays for each one's outcome, then the mean over the rows. A
candidate *set aside* by the audit (paid as a match, but no fair witness tells it from its gold: it
may be an equivalent rewrite) is left out, as the audit leaves it out of its counts; a candidate
paid and shown wrong is paid what the shape pays a match. Beside them, the gold itself (every row
of the split, its own text as the completion) and the two constant answers: no query at all, and
a wrong answer that runs.

**Nothing**, per shape, is what it pays a wrong answer that runs (its ``mismatch`` value: 0 for
``binary`` and ``skyrl-sql``, 0.1 for ``arctic-text2sql-r1``, 0 for ``sql-r1``). A degenerate
policy whose expected reward is above it is paid for something it did not earn: a wrong answer
taken for a right one (or, in a custom table, an outcome paid above a wrong answer that runs). A
shape whose ``nothing`` is above its least value pays *partial credit*: every degenerate policy that
runs collects it, whatever the rows (docs/reward-shapes.md). ``warnings`` names both, for the
bundle's own shape; ``verify`` and ``audit`` print them.

>>> nothing_of(reward_shapes.preset("arctic-text2sql-r1")), partial_credit(reward_shapes.preset("skyrl-sql"))
(0.1, 1.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from bundle.contract import shapes as reward_shapes
from harness.audit.catalogue import POLICIES
from harness.audit.model import AuditRow, Scored
from harness.emulator.calls import Call

GOLD, NO_QUERY, WRONG = "the gold itself", "no query at all", "a wrong answer that runs (nothing)"
EPSILON = 1e-9  # what "above nothing" must exceed: sums of floats, never a real difference


def nothing_of(shape: reward_shapes.Shape) -> float:
    """What ``shape`` pays a wrong answer that runs: the level a degenerate policy must not exceed."""
    return shape.values[reward_shapes.MISMATCH]


def partial_credit(shape: reward_shapes.Shape) -> float:
    """How much more than its least value ``shape`` pays any answer that runs, right or wrong."""
    return nothing_of(shape) - min(shape.values.values())


def partial_share(shape: reward_shapes.Shape) -> float:
    """``partial_credit`` as a share of what a match earns above the least value (its length part aside).

    >>> [round(partial_share(s), 3) for s in reward_shapes.PRESETS.values()]
    [0.0, 0.5, 0.1, 0.143]
    """
    return partial_credit(shape) / (shape.values[reward_shapes.MATCH] - min(shape.values.values()))


def shapes_of(index: Mapping) -> tuple[list[reward_shapes.Shape], str]:
    """The shapes tabulated (the presets, then the bundle's own when it is custom) and the bundle's own name."""
    own = reward_shapes.from_index(index.get("reward_shape"))
    shapes = list(reward_shapes.PRESETS.values())
    if own is not None and own.name not in reward_shapes.PRESETS:
        shapes.append(own)
    return shapes, own.name if own is not None else reward_shapes.DEFAULT


def _value(shape: reward_shapes.Shape, call: Call, text: str) -> float | None:
    if call.kind != "scored" or call.outcome not in shape.values:
        return None
    return shape.value(call.outcome, text, text)  # type: ignore[arg-type]


def _set_aside(scored: Scored) -> bool:
    return scored.paid and (scored.finding is None or scored.finding.witness is None)


def _policy_means(shape: reward_shapes.Shape, results: list[tuple[AuditRow, list[Scored]]]) -> dict[str, dict]:
    """Per policy: the rows counted, the mean reward, and the rows where some candidate is paid above nothing."""
    per_row: dict[str, list[float]] = {p.name: [] for p in POLICIES}
    above: dict[str, int] = {p.name: 0 for p in POLICIES}
    for _row, scored in results:
        values: dict[str, list[float]] = {}
        for item in scored:
            value = None if _set_aside(item) else _value(shape, item.call, item.candidate.sql)
            if value is not None:
                values.setdefault(item.candidate.policy, []).append(value)
        for policy, found in values.items():
            per_row[policy].append(statistics.fmean(found))
            above[policy] += max(found) > nothing_of(shape) + EPSILON
    return {policy: {"rows": len(means), "mean": round(statistics.fmean(means), 6) if means else None,
                     "rows_above_nothing": above[policy]} for policy, means in per_row.items()}


def section(results: list[tuple[AuditRow, list[Scored]]], golds: Mapping[AuditRow, Call], splits: tuple[str, ...],
            index: Mapping) -> dict:
    """The audit document's ``shapes``: per shape its levels, per split the gold's mean and each policy's."""
    shapes, own = shapes_of(index)
    out: dict = {"own": own, "shapes": {s.name: {"nothing": nothing_of(s), "least": min(s.values.values()),
                                                 "no_query": s.values[reward_shapes.NO_QUERY],
                                                 "partial_credit": round(partial_credit(s), 6),
                                                 "partial_share": round(partial_share(s), 6)} for s in shapes},
                 "splits": {}}
    for split in splits:
        part = [(row, scored) for row, scored in results if row.split == split]
        gold_values = {s.name: [v for row, _ in part if (v := _value(s, golds[row], row.gold)) is not None]
                       for s in shapes}
        out["splits"][split] = {
            "rows": len(part),
            "gold": {name: round(statistics.fmean(v), 6) if v else None for name, v in gold_values.items()},
            "policies": {s.name: _policy_means(s, part) for s in shapes}}
    out["warnings"] = warnings(out)
    return out


def warnings(doc: Mapping) -> list[str]:
    """What the bundle's own shape pays for nothing: each policy above it per split, and its partial credit."""
    own = doc["own"]
    if own not in doc["shapes"]:
        return []
    level = doc["shapes"][own]
    label = {p.name: p.label for p in POLICIES}
    out = []
    for split, part in doc["splits"].items():
        for policy, found in part["policies"][own].items():
            if found["mean"] is not None and found["mean"] > level["nothing"] + EPSILON:
                out.append(f"{own}, {split}: {label[policy]} earns {found['mean']:.3f} a row on average, above nothing "
                           f"({level['nothing']:g}, a wrong answer that runs): paid above it on "
                           f"{found['rows_above_nothing']} of {found['rows']} rows")
    if level["partial_credit"] > EPSILON:
        out.append(f"{own}: every answer that runs, right or wrong, is paid {level['partial_credit']:g} above the least "
                   f"this shape pays ({level['least']:g}), {level['partial_share']:.0%} of what a match earns above it: "
                   "partial credit any degenerate policy that runs collects")
    return out


def _cell(value: float | None, nothing: float) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + ("!" if value > nothing + EPSILON else " ")


def render(doc: Mapping) -> list[str]:
    """Per split, a table: the gold, no query, a wrong answer that runs, then each policy, under each shape."""
    found = doc.get("shapes")
    if not found:
        return []
    names = list(found["shapes"])
    label = {p.name: p.label for p in POLICIES}
    lines = [f"expected reward per row under each reward shape (this bundle pays {found['own']}); ! = above nothing, "
             "what the shape pays a wrong answer that runs (docs/audit.md, \"Per reward shape\")"]
    for split, part in found["splits"].items():
        head = f"{split + ' (' + str(part['rows']) + ' rows)':<56}" + "".join(f"{n[:18]:>19}" for n in names)
        lines += [head, "-" * len(head)]
        level = {n: found["shapes"][n]["nothing"] for n in names}
        fixed = [(GOLD, {n: part["gold"][n] for n in names}),
                 (NO_QUERY, {n: found["shapes"][n]["no_query"] for n in names}),
                 (WRONG, {n: found["shapes"][n]["nothing"] for n in names})]
        for text, values in fixed:
            lines.append(f"{text:<56}" + "".join(f"{_cell(values[n], level[n] if text != GOLD else float('inf')):>19}"
                                                  for n in names))
        for policy in label:
            cells = [_cell(part["policies"][n][policy]["mean"], level[n]) for n in names]
            rows = part["policies"][names[0]][policy]["rows"]
            lines.append(f"{(label[policy][:46] + f' ({rows})'):<56}" + "".join(f"{c:>19}" for c in cells))
    lines += [f"warning: {w}" for w in found.get("warnings", [])]
    return lines
