"""Distil a few neighbour databases that separate each gold from the queries that only look like it.

For one original database and its golds (``distil``):

1. targets: for each gold, its neighbour queries (``variants``) that the original cannot tell from
   it (they run and return the gold's rows there, under the scorer's own comparison), plus the
   constant answer that merely repeats the gold's rows (``SELECT 6`` for "how many singers") and,
   for a gold with no rows, an empty answer;
2. candidates: ``candidates`` fuzzed databases (``fuzz.Fuzzer``), each from its own seeded
   generator. On each, every gold runs as the bundle runs a gold; a candidate on which a gold's
   outer ``ORDER BY ... LIMIT`` cuts through a tie of its keys (the answer would hang on
   tie-breaking) or on which the gold fails is not used for that gold;
3. greedy choice: repeatedly keep the candidate that separates the most targets not yet separated
   (a target is separated where its rows differ from the gold's), counting also each gold it gives
   a non-empty result where none had one yet; stop when nothing is gained or at ``max_keep``.

Deterministic: the same original, golds and seed give the same files, byte for byte.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

from bundle import gold_results, sql_compare, sql_guard
from bundle.scoring_limits import DEFAULT_LIMITS, Limits
from bundle.verify import gold_result
from harness.prepare.neighbours.fuzz import Fuzzer
from harness.prepare.neighbours.schema import read_schema
from harness.prepare.neighbours.values import grouped_columns, literals_by_column
from harness.prepare.neighbours.variants import variants

# Work a gold or a target may do on a candidate while distilling (candidates are small).
BUILD_STEPS = 5_000_000
# A gold with no rows on the original is met by any empty answer: giving it rows somewhere is
# worth as much as separating three look-alike queries.
NON_EMPTY_WEIGHT = 3


@dataclasses.dataclass(frozen=True)
class Settings:
    seed: int = 0
    candidates: int = 24
    max_keep: int = 3
    min_gain: int = 3  # a neighbour is kept only where it separates at least this many more targets
    max_rows: int = 60
    variants_per_gold: int = 400


@dataclasses.dataclass
class Distilled:
    """The neighbours kept for one database and what every gold returns on each."""

    db_id: str
    files: list[Path]
    results: dict[str, list[gold_results.GoldResult | None]]  # gold -> per kept neighbour (None: not used)
    targets: int  # targets the original could not tell from their gold
    separated: int  # of those, separated by the kept neighbours
    constants: int  # constant or empty answers the original accepted
    constants_separated: int
    candidates_built: int


def build_limits() -> Limits:
    """The scorer's limits with the smaller step budgets used while distilling."""
    return DEFAULT_LIMITS.replace(budget_floor_steps=BUILD_STEPS, gold_max_steps=BUILD_STEPS)


def _run(database: Path, sql: str, limits: Limits) -> sql_guard.RawResult | None:
    try:
        return sql_guard.run_query(str(database), sql, limits, budget_steps=BUILD_STEPS, wall_s=limits.wall_guard_s)
    except sql_guard.QueryFailed:
        return None


def _same(gold: gold_results.GoldResult, raw: sql_guard.RawResult | None, limits: Limits) -> bool:
    if raw is None:
        return False
    try:
        return sql_compare.compare(gold.shape, sql_compare.normalize_rows(raw.rows, limits.float_digits),
                                   len(raw.columns)).match
    except (sql_compare.CompareBudgetExceeded, sql_compare.CompareWallGuard):
        return False


def _sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "x'" + value.hex() + "'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def constant_answer(raw: sql_guard.RawResult) -> str | None:
    """A query that returns exactly ``raw``'s rows whatever the data (None when over 20 rows)."""
    width = max(len(raw.columns), 1)
    if not raw.rows:
        return "SELECT " + ", ".join(["NULL"] * width) + " WHERE 0"
    if len(raw.rows) > 20:
        return None
    return " UNION ALL ".join("SELECT " + ", ".join(_sql_literal(v) for v in row) for row in raw.rows)


def _targets(original: Path, gold: str, columns: list[str], settings: Settings, rng: random.Random,
             limits: Limits) -> tuple[list[str], list[str]]:
    """(variants the original cannot tell from ``gold``, constant answers it accepts)."""
    try:
        gold_here = gold_result(gold, str(original), limits)
    except sql_guard.QueryFailed:
        return [], []
    found = variants(gold, columns)
    if len(found) > settings.variants_per_gold:
        found = rng.sample(found, settings.variants_per_gold)
    same = [v for v in found if _same(gold_here, _run(original, v, limits), limits)]
    raw = _run(original, gold, limits)
    constant = constant_answer(raw) if raw is not None else None
    constants = [constant] if constant and _same(gold_here, _run(original, constant, limits), limits) else []
    return same, constants


def _candidate_seed(settings: Settings, db_id: str, index: int) -> str:
    return f"spider-scoring-neighbours:{settings.seed}:{db_id}:{index}"


def distil(db_id: str, original: Path, golds: list[str], work: Path, settings: Settings = Settings()) -> Distilled:
    """Build, evaluate and choose the neighbours of one database (module docstring)."""
    limits = build_limits()
    schema = read_schema(original)
    columns = sorted({c.name for t in schema.tables for c in t.columns})
    literals: dict[str, list] = {}
    lowered = {c.lower() for c in columns}
    grouped: set[str] = set()
    links = {c.name.lower() for t in schema.tables for c in t.columns if c.references}
    for gold in golds:
        grouped |= grouped_columns(gold, lowered, links)
        for name, found in literals_by_column(gold, lowered).items():
            literals.setdefault(name, []).extend(v for v in found if v not in literals.get(name, []))
    rng = random.Random(_candidate_seed(settings, db_id, -1))
    targets: dict[str, tuple[list[str], list[str]]] = {g: _targets(original, g, columns, settings, rng, limits)
                                                       for g in golds}
    fuzzer = Fuzzer(schema, literals, grouped=grouped, max_rows=settings.max_rows)
    work.mkdir(parents=True, exist_ok=True)
    evaluated = [evaluate(fuzzer, work / f"candidate-{i:03d}.sqlite", random.Random(_candidate_seed(settings, db_id, i)),
                           golds, targets, limits) for i in range(settings.candidates)]
    chosen = _choose(evaluated, golds, settings, original, limits)
    files = []
    for rank, index in enumerate(chosen):
        dest = work / "kept" / f"{db_id}-{rank + 1}.sqlite"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(evaluated[index].path, dest)
        files.append(dest)
    sql_guard.forget_connections()
    all_targets = {(g, t) for g, (same, consts) in targets.items() for t in same + consts}
    covered = set().union(*(evaluated[i].separated for i in chosen)) if chosen else set()
    constants = {(g, t) for g, (_same_list, consts) in targets.items() for t in consts}
    return Distilled(db_id, files, {g: [evaluated[i].golds.get(g) for i in chosen] for g in golds},
                     len(all_targets - constants), len((covered & all_targets) - constants), len(constants),
                     len(covered & constants), len(evaluated))


@dataclasses.dataclass
class Candidate:
    """A candidate neighbour: the golds it may judge (with their results) and what it separates."""

    path: Path
    golds: dict[str, gold_results.GoldResult]  # only the golds it may be used for
    separated: set[tuple[str, str]]
    non_empty: set[str]


def evaluate(fuzzer: Fuzzer, path: Path, rng: random.Random, golds: list[str],
             targets: dict[str, tuple[list[str], list[str]]], limits: Limits) -> Candidate:
    """Build one candidate at ``path`` and judge every gold and target on it."""
    fuzzer.write(path, rng)
    usable: dict[str, gold_results.GoldResult] = {}
    separated: set[tuple[str, str]] = set()
    for gold in golds:
        try:
            result = gold_result(gold, str(path), limits)
        except sql_guard.QueryFailed:
            continue
        if any(segment.pool is not None for segment in result.shape.segments):
            continue  # a LIMIT cuts through a tie here: the gold's answer would hang on tie-breaking
        usable[gold] = result
        same, constants = targets[gold]
        for target in same + constants:
            if not _same(result, _run(path, target, limits), limits):
                separated.add((gold, target))
    non_empty = {g for g, r in usable.items() if r.shape.rows}
    return Candidate(path, usable, separated, non_empty)


def _choose(candidates: list[Candidate], golds: list[str], settings: Settings, original: Path,
            limits: Limits) -> list[int]:
    empty = set()
    for gold in golds:
        try:
            if not gold_result(gold, str(original), limits).shape.rows:
                empty.add(gold)
        except sql_guard.QueryFailed:
            pass
    covered: set[tuple[str, str]] = set()
    chosen: list[int] = []
    while len(chosen) < settings.max_keep:
        best, best_gain = None, settings.min_gain - 1
        for i, candidate in enumerate(candidates):
            if i in chosen:
                continue
            gain = len(candidate.separated - covered) + NON_EMPTY_WEIGHT * len(candidate.non_empty & empty)
            if gain > best_gain:
                best, best_gain = i, gain
        if best is None:
            break
        chosen.append(best)
        covered |= candidates[best].separated
        empty -= candidates[best].non_empty
    return chosen


