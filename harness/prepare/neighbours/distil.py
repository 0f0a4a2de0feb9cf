"""Distil a few neighbour databases that separate each gold from the queries that only look like it.

For one original database and its golds (``distil``):

1. invariants: what the original's data implies (``bundle.neighbours.mining.mine``); every
   candidate keeps all of them, or is not used (``Fuzzer.build`` reports what it breaks);
2. targets: for each gold, its neighbour queries (``variants``) that the original cannot tell from
   it (they run and return the gold's rows there, under the scorer's own comparison), plus the
   constant answer that merely repeats the gold's rows (``SELECT 6`` for "how many singers") and,
   for a gold with no rows, an empty answer;
3. candidates: ``candidates`` fuzzed databases, each from its own seeded draw, in turn from the
   ``PLANS`` (sizes, special values, distinct sort keys). On each, every gold runs as the bundle
   runs a gold. A gold is not judged on a candidate where it fails, or where what it presupposes
   fails (``neighbours.proof.judges``: it has no rows, or a row of NULLs, or a NULL sort key, where
   the original gives it none), or where a name it lists by repeats (``repeated_identity``). A
   LIMIT that cuts a tie is no reason: the comparison there also accepts the whole tie;
4. greedy choice: repeatedly keep the candidate that separates the most targets not yet separated
   (a target is separated where its rows differ from the gold's), counting also each gold it gives
   a non-empty result where none had one yet; stop when nothing is gained or at ``max_keep``.
   Where the kept ones separate less than ``enough`` of the targets, another round of
   ``candidates`` is built, while a round adds at least ``min_gain`` and up to ``max_candidates``
   (the cost is per database, at build time);
5. each gold is judged on every kept neighbour where it may be judged: one chosen for another
   gold's look-alikes tells this gold's wrong answers apart too, and a run costs the reward
   microseconds where a paid wrong answer costs the training run.

Deterministic: the same original, golds and seed give the same files, byte for byte.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from bundle.contract.limits import DEFAULT_LIMITS, Limits
from bundle.neighbours import invariants as inv
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours import values as nv
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.source import Draw, Focus, read_original
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from bundle.verify import MATCH, gold_result, judge
from harness.prepare.neighbours.questions import Hidden
from harness.prepare.neighbours.variants import variants

# Work a gold or a target may do on a candidate while distilling (candidates are small).
BUILD_STEPS = 5_000_000
# A gold with no rows on the original is met by any empty answer: giving it rows somewhere is
# worth as much as separating three look-alike queries.
NON_EMPTY_WEIGHT = 3
# Candidates are drawn in turn from these plans: the default, smaller and more pointed databases,
# distinct sort keys (no tie at a LIMIT), and larger ones.
PLANS: tuple[dict, ...] = (
    {},
    {"max_rows": 20, "scale": (0.2, 1.0), "special_share": 0.5},
    {"distinct_sort": True, "twins": True},
    {"scale": (0.8, 2.0), "null_share": 0.3},
)


@dataclasses.dataclass(frozen=True)
class Settings:
    seed: int = 0
    candidates: int = 24  # built per round
    max_candidates: int = 72  # rounds stop here, or once the kept ones separate ``enough``
    enough: float = 0.9  # share of the targets the kept neighbours should separate
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
    originals: dict[str, gold_results.GoldResult]  # gold -> its result on the original
    profile: inv.Profile
    repeats_allowed: frozenset[str]  # columns the golds need repeated (their uniqueness is dropped)
    targets: int  # targets the original could not tell from their gold
    separated: int  # of those, separated by the kept neighbours
    constants: int  # constant or empty answers the original accepted
    constants_separated: int
    candidates_built: int
    candidates_refused: int  # built but breaking an invariant: never used
    unjudged: int  # (gold, kept neighbour) pairs left out: the gold's presupposition fails there
    # neighbour (0-based) -> the invariants it relaxes for golds a kept one hides (harness.prepare.neighbours.relax)
    relaxed: dict[int, tuple[inv.Relaxed, ...]] = dataclasses.field(default_factory=dict)
    hidden: tuple[Hidden, ...] = ()  # the golds whose question a kept invariant hid, and what was done


def build_limits() -> Limits:
    """The scorer's limits with the smaller step budgets used while distilling."""
    return DEFAULT_LIMITS.replace(budget_floor_steps=BUILD_STEPS, gold_max_steps=BUILD_STEPS)


def _run(database: Path, sql: str, limits: Limits) -> sql_guard.RawResult | None:
    try:
        return sql_guard.run_query(str(database), sql, limits, budget_steps=BUILD_STEPS, wall_s=limits.wall_guard_s)
    except sql_guard.QueryFailed:
        return None


def _same(database: Path, sql: str, gold: gold_results.GoldResult, limits: Limits) -> bool:
    return judge(str(database), sql, gold, limits, neighbour=True, max_steps=BUILD_STEPS).outcome == MATCH


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


def _targets(original: Path, gold: str, here: gold_results.GoldResult, columns: list[str], settings: Settings,
             draw: Draw, limits: Limits) -> tuple[list[str], list[str]]:
    """(variants the original cannot tell from ``gold``, constant answers it accepts)."""
    found = variants(gold, columns)
    if len(found) > settings.variants_per_gold:
        found = draw.shuffled(found)[:settings.variants_per_gold]
    same = [v for v in found if _same(original, v, here, limits)]
    raw = _run(original, gold, limits)
    constant = constant_answer(raw) if raw is not None else None
    return same, [constant] if constant and _same(original, constant, here, limits) else []


def _candidate_seed(settings: Settings, db_id: str, index: int) -> str:
    return f"spider-scoring-neighbours:{settings.seed}:{db_id}:{index}"


def focus_for(golds: list[str], profile: inv.Profile) -> Focus:
    """What the golds of a database ask of its neighbours: their literals, grouped and sorted columns,
    BETWEEN bounds."""
    names = {c.name.lower() for t in profile.tables for c in t.columns}
    links = {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns}
    schema = {t.name.lower(): tuple(c.name.lower() for c in t.columns) for t in profile.tables}
    literals: dict[str, list] = {}
    grouped: set[str] = set()
    ordered: set[str] = set()
    extremes: set[str] = set()
    patterns: dict[str, list] = {}
    ranges: dict[str, list] = {}
    for gold in golds:
        grouped |= nv.grouped_columns(gold, names, links, schema)
        ordered |= nv.sort_columns(gold, names)
        extremes |= nv.extreme_columns(gold, names)
        for into, found_by_column in ((literals, nv.literals_by_column(gold, names)),
                                      (patterns, nv.literals_by_column(gold, names, True)),
                                      (ranges, nv.between_bounds(gold, names))):
            for name, found in found_by_column.items():
                bucket = into.setdefault(name, [])
                bucket.extend(v for v in found if v not in bucket)
    return Focus(literals, patterns, frozenset(grouped), frozenset(ordered), frozenset(extremes), ranges)


@dataclasses.dataclass
class Candidate:
    """A candidate neighbour: the golds it may judge (with their results) and what it separates."""

    path: Path
    golds: dict[str, gold_results.GoldResult]  # only the golds it may be used for
    separated: set[tuple[str, str]]
    non_empty: set[str]
    unjudged: set[str]  # golds whose presupposition it breaks (neighbour_proof.judges): not judged here
    refused: bool = False  # it breaks an invariant: never used

    @property
    def separated_golds(self) -> set[str]:
        return {gold for gold, _target in self.separated}


def evaluate(fuzzer: Fuzzer, path: Path, draw: Draw, originals: dict[str, gold_results.GoldResult],
             targets: dict[str, tuple[list[str], list[str]]], limits: Limits) -> Candidate:
    """Build one candidate at ``path`` and judge every gold and target on it."""
    if fuzzer.build(str(path), draw, vacuum=True):
        return Candidate(path, {}, set(), set(), set(), refused=True)
    conn = inv.open_read_only(str(path))
    try:
        repeated = {g for g in originals if neighbour_proof.repeated_identity(conn, fuzzer.profile, g)}
    finally:
        conn.close()
    usable: dict[str, gold_results.GoldResult] = {}
    separated: set[tuple[str, str]] = set()
    unjudged: set[str] = set()
    for gold, original in originals.items():
        try:
            result = gold_result(gold, str(path), limits)
        except sql_guard.QueryFailed:
            continue
        if gold in repeated or neighbour_proof.judges(original, result):
            unjudged.add(gold)
            continue
        usable[gold] = result
        same, constants = targets[gold]
        separated.update((gold, t) for t in same + constants if not _same(path, t, result, limits))
    non_empty = {g for g, r in usable.items() if r.shape.rows}
    return Candidate(path, usable, separated, non_empty, unjudged)


def distil(db_id: str, original: Path, golds: list[str], work: Path, settings: Settings = Settings()) -> Distilled:
    """Mine, build, evaluate and choose the neighbours of one database (module docstring)."""
    limits = build_limits()
    conn = inv.open_read_only(str(original))
    try:
        profile, source = neighbour_mining.mine(conn), read_original(conn)
    finally:
        conn.close()
    originals: dict[str, gold_results.GoldResult] = {}
    for gold in golds:
        try:
            originals[gold] = gold_result(gold, str(original), limits)
        except sql_guard.QueryFailed:
            pass  # Spider's few broken golds: prepare leaves them out
    columns = sorted({c.name for t in profile.tables for c in t.columns})
    draw = Draw(_candidate_seed(settings, db_id, -1))
    targets = {g: _targets(original, g, r, columns, settings, draw, limits) for g, r in originals.items()}
    focus = dataclasses.replace(focus_for(golds, profile), max_rows=settings.max_rows)
    fuzzers = [Fuzzer(source, profile, dataclasses.replace(focus, **plan)) for plan in PLANS]
    work.mkdir(parents=True, exist_ok=True)
    evaluated, chosen = _rounds(db_id, fuzzers, originals, targets, settings, work, limits)
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
    return Distilled(db_id, files, _judged_on([evaluated[i] for i in chosen], golds, originals), originals, profile,
                     focus.grouped, len(all_targets - constants), len((covered & all_targets) - constants),
                     len(constants), len(covered & constants), len(evaluated),
                     sum(c.refused for c in evaluated), sum(len(evaluated[i].unjudged) for i in chosen))


def _judged_on(kept: list[Candidate], golds: list[str],
               originals: dict[str, gold_results.GoldResult]) -> dict[str, list[gold_results.GoldResult | None]]:
    """Each gold's result on each kept neighbour, None where the gold may not be judged there
    (``evaluate``: it fails, what it presupposes does not hold, a name it lists by repeats more
    than on the original). A gold is judged on every neighbour where it may be: a neighbour chosen
    for one gold's look-alikes tells others' answers apart too, answers no list names (issue 37)."""
    del originals  # every usable neighbour is kept, whatever the gold's rows on the original
    return {gold: [c.golds.get(gold) for c in kept] for gold in golds}


def _rounds(db_id: str, fuzzers: list[Fuzzer], originals: dict[str, gold_results.GoldResult],
            targets: dict[str, tuple[list[str], list[str]]], settings: Settings, work: Path,
            limits: Limits) -> tuple[list[Candidate], list[int]]:
    """Rounds of candidates, each chosen from anew, until the kept ones separate ``enough`` of the
    targets, a round adds fewer than ``min_gain``, or ``max_candidates`` are built."""
    all_targets = {(g, t) for g, (same, consts) in targets.items() for t in same + consts}
    evaluated: list[Candidate] = []
    chosen: list[int] = []
    before = -1
    while len(evaluated) < settings.max_candidates:
        for i in range(len(evaluated), len(evaluated) + settings.candidates):
            evaluated.append(evaluate(fuzzers[i % len(fuzzers)], work / f"candidate-{i:03d}.sqlite",
                                      Draw(_candidate_seed(settings, db_id, i)), originals, targets, limits))
        chosen = _choose(evaluated, originals, settings)
        covered = len(set().union(*(evaluated[i].separated for i in chosen)) & all_targets) if chosen else 0
        if covered >= settings.enough * len(all_targets) or covered - before < settings.min_gain:
            break
        before = covered
    return evaluated, chosen


def _choose(candidates: list[Candidate], originals: dict[str, gold_results.GoldResult],
            settings: Settings) -> list[int]:
    empty = {g for g, r in originals.items() if not r.shape.rows}
    covered: set[tuple[str, str]] = set()
    chosen: list[int] = []
    while len(chosen) < settings.max_keep:
        best, best_gain = None, settings.min_gain - 1
        for i, candidate in enumerate(candidates):
            if i in chosen or candidate.refused:
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
