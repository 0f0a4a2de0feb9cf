"""The search aimed at the difference: the original edited where an answer differs from its gold.

An answer that matches its gold on the original and on the neighbour databases may still be wrong
where none of them looks: ``bedtype LIKE '%King%'`` for ``bedtype = 'King'`` on data holding no
longer text with King in it, ``GROUP BY Company`` for ``GROUP BY Investor`` where each investor has
one company. Lists of such near misses have blind spots, so this search works from the two texts
alone (``sql.reading``): the columns, literals and clauses where they differ give the edits
of the original to try (``search.edits``: a cell set at a literal's boundary or inside a longer
text, a row copied, a row removed, a parent left without children), one at a time, on a private
in-memory copy (``sql.sandbox``). On each edited database:

* the edit must keep every invariant of the original's data that the tables it changes carry
  (``neighbours.proof.violations``, as every neighbour does: keys, links, NULL-freedom, formats,
  names' repeats; a gold's grouped columns may repeat), else it is spent without judging;
* the gold runs there and must be judgeable (``neighbours.proof.judges``: rows where it has rows on
  the original, no row of NULLs, no NULL sort key; ``repeated_identity``: no name it lists by
  repeated more than the original repeats it);
* the answer is judged as on a neighbour (the whole tie at a LIMIT, each row once, match too). The
  first edit where the rows differ, or where the answer fails or is over a cap, decides:
  ``decided_on`` reads ``edit 3 of inn_1 (rooms.bedType of row 1 set to 'King omega')``.

Counted work, never time: at most ``difference_edits`` edits, and ``difference_steps`` units for the
gold's runs (charged on every search as if run again), the proofs' reads and the answer's runs
together; when the budget ends the match stands. What an edit gives (its proof, the gold's result
there) is kept per process and reused by every later answer of that gold, so a verdict is the same
whether it was computed or found: a pure function of (answer, row, bundle, settings).
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import threading
from typing import NamedTuple

from ..contract.limits import Limits
from ..neighbours import invariants as inv
from ..neighbours import proof as neighbour_proof
from ..neighbours import values as nv
from ..sql import gold_results
from ..sql import guard as sql_guard
from ..sql import sandbox as sql_sandbox
from ..sql import verdict as verify_mod
from ..sql.reading import Difference, Reading, difference, read
from . import counterexample as neighbour_search
from . import edits as difference_edits

EDIT_CHARGE = 200  # units charged per edit tried, besides the SQL it runs (applying, undoing, reading)
READ_UNIT = 100  # VM steps between two counts of the search's own reads
DECISIVE = (verify_mod.MISMATCH, verify_mod.PREDICTION_ERROR, verify_mod.PREDICTION_OVER_CAP,
            verify_mod.PREDICTION_OVER_BUDGET)


class Task(NamedTuple):
    """One row's search: its original and the invariants every edit keeps (``repeats_allowed``: the
    columns this gold needs repeated, ``neighbours.values.grouped_columns``; not those of the
    database's other golds, which would let a name repeat that this question treats as unique)."""

    db_id: str
    sha256: str
    path: str
    gold: str
    profile: inv.Profile
    repeats_allowed: frozenset


class _Outcome(NamedTuple):
    """What one edit gives, the same for every answer of the gold: the gold's result there (None:
    not judgeable) and the units proving it and running the gold cost."""

    gold: gold_results.GoldResult | None
    units: int


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


class _Kept:
    """What the process keeps: the edits of a (gold, difference), what each edit gives, the verdicts."""

    MAX = 65_536

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.edits: dict[tuple, tuple[list[difference_edits.Edit], int]] = {}
        self.outcomes: dict[tuple, _Outcome] = {}
        self.verdicts: dict[tuple, verify_mod.Searched] = {}
        self.baselines: dict[tuple, tuple[dict[str, tuple[int, ...]], int]] = {}
        self.proofs: dict[tuple, inv.Profile] = {}
        self.readings: dict[tuple, Reading] = {}
        self.ties: dict[tuple, tuple[bool, ...]] = {}

    def put(self, table: dict, key: tuple, value: object) -> None:
        with self.lock:
            if len(table) >= self.MAX:
                table.clear()
            table[key] = value


KEPT = _Kept()


def _schema(profile: inv.Profile) -> dict[str, tuple[str, ...]]:
    return {t.name.lower(): tuple(c.name.lower() for c in t.columns) for t in profile.tables}


def _gold_reading(task: Task) -> Reading:
    """The gold's reading (``sql.reading.read``), once per process."""
    key = (task.sha256, id(task.profile), task.gold)
    found = KEPT.readings.get(key)
    if found is None:
        found = read(task.gold, _schema(task.profile))
        KEPT.put(KEPT.readings, key, found)
    return found


def search(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits) -> verify_mod.Searched:
    """Judge (gold, ``sql``) on edits of the original aimed at where they differ (module docstring)."""
    key = (task.sha256, task.gold, _normal(sql), limits)
    found = KEPT.verdicts.get(key)
    if found is None:
        found = _search(task, sql, original, limits)
        KEPT.put(KEPT.verdicts, key, found)
    return found


def _search(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits) -> verify_mod.Searched:
    if _normal(sql) == _normal(task.gold):
        return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", 0, 0)
    diff = difference(_gold_reading(task), sql, _schema(task.profile))
    box = sql_sandbox.sandbox(task.path, limits)
    try:
        edits, units = _edits(task, diff, box, limits)
    except sql_sandbox.SandboxBroken as exc:
        return verify_mod.Searched(f"edits of {task.db_id}", verify_mod.INFRASTRUCTURE_ERROR, None, str(exc), 0, 0)
    tried = 0
    for edit in edits:
        if tried >= limits.difference_edits or units >= limits.difference_steps:
            break
        tried += 1
        name = f"edit {tried} of {task.db_id} ({edit.what})"
        try:
            outcome, judged = _try(task, edit, sql, original, box, limits, limits.difference_steps - units)
        except sql_sandbox.SandboxBroken as exc:
            return verify_mod.Searched(name, verify_mod.INFRASTRUCTURE_ERROR, None, str(exc), tried, units)
        units += outcome.units + EDIT_CHARGE
        if judged is None:
            continue
        units += judged.steps
        if judged.outcome in DECISIVE or judged.outcome in verify_mod.UNSCORED:
            return verify_mod.Searched(name, judged.outcome, judged.score, f"on {name}: {judged.detail}", tried, units)
        if judged.outcome != verify_mod.MATCH:
            break  # the search's own budget ended inside this edit: the match stands
    return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", tried, units)


def _edits(task: Task, diff: Difference, box: sql_sandbox.Sandbox,
           limits: Limits) -> tuple[list[difference_edits.Edit], int]:
    """The edits for ``diff`` and the units reading the original for them cost (kept per gold and difference)."""
    key = (task.sha256, task.gold, diff.key(), limits.difference_edits)
    found = KEPT.edits.get(key)
    if found is None:
        with _Reading(box) as reading:
            made = difference_edits.edits(box.plain, _proof(task), diff, task.gold, limits.difference_edits)
        found = (made, reading.units)
        KEPT.put(KEPT.edits, key, found)
    return found


class _Reading:
    """The search's own reads, on the copy's unguarded twin (``Sandbox.plain``), their VM steps
    counted in units."""

    def __init__(self, box: sql_sandbox.Sandbox) -> None:
        self.box, self.units = box, 0

    def __enter__(self) -> _Reading:
        self.box.plain.set_progress_handler(self._count, READ_UNIT)
        return self

    def _count(self) -> int:
        self.units += READ_UNIT
        return 0

    def __exit__(self, *exc: object) -> None:
        self.box.plain.set_progress_handler(None, 0)


def _try(task: Task, edit: difference_edits.Edit, sql: str, original: gold_results.GoldResult,
         box: sql_sandbox.Sandbox, limits: Limits, left: int) -> tuple[_Outcome, verify_mod.Judged | None]:
    """Apply ``edit``, learn what it gives (kept), judge ``sql`` there when the gold can be, undo it."""
    key = (task.sha256, task.gold, edit.statements, limits.float_digits)
    outcome = KEPT.outcomes.get(key)
    if outcome is not None and (outcome.gold is None or outcome.units >= left):
        return outcome, None  # known: it cannot judge the gold, or its work is beyond the budget left
    try:
        box.apply(edit.statements, plain=outcome is None)  # the proof reads the twin only the first time
    except (ValueError, OverflowError, sql_sandbox.sqlite3.Error):
        if outcome is None:
            outcome = _Outcome(None, 0)
            KEPT.put(KEPT.outcomes, key, outcome)
        return outcome, None  # a constraint of the schema refuses it
    try:
        if outcome is None:
            outcome = _learn(task, edit, original, box, limits)
            KEPT.put(KEPT.outcomes, key, outcome)
        gold = outcome.gold
        if gold is None or outcome.units >= left:
            return outcome, None
        cap = max(left - outcome.units - EDIT_CHARGE, 1)
        judged = verify_mod.judge(task.path, sql, gold, limits, neighbour=True, max_steps=cap, sandbox=box, fresh=True)
        if judged.outcome == verify_mod.PREDICTION_OVER_BUDGET and cap < limits.budget_steps(gold.steps):
            judged = judged._replace(outcome="search budget ended")
        return outcome, judged
    finally:
        box.undo()


def grouped(profile: inv.Profile, gold: str) -> frozenset:
    """The columns ``gold`` needs repeated (``neighbours.values.grouped_columns``, each grouped column's
    table read through the query's aliases)."""
    names = {c.name.lower() for t in profile.tables for c in t.columns}
    links = {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns}
    return frozenset(nv.grouped_columns(gold, names, links, _schema(profile)))


def kept_facts(profile: inv.Profile, gold: str) -> inv.Profile:
    """The invariants an edit keeps: the original's, but for uniqueness that small data shows by
    chance. A column of numbers whose values all differ (two drafts never share a number on four
    rows, no two singers share an age on six) may repeat, unless it is a key (declared alone, named
    as an identifier, or a link's parent) or the gold takes its ``min``/``max`` or sorts by it
    (a tie there would decide which row a bare column comes from). Names keep their repeats as on
    the original: two students called Kyle are a fact the data would have to show."""
    names = {c.name.lower() for t in profile.tables for c in t.columns}
    held = nv.extreme_columns(gold, names) | nv.sort_columns(gold, names)
    chance = {(t, c) for t, c in unique_by_chance(profile) if c.lower() not in held}
    tables = []
    for table in profile.tables:
        columns = tuple(dataclasses.replace(col, unique=False, near_unique=False) if (table.name, col.name) in chance
                        else col for col in table.columns)
        tables.append(dataclasses.replace(table, columns=columns))
    return dataclasses.replace(profile, tables=tuple(tables))


def unique_by_chance(profile: inv.Profile) -> list[tuple[str, str]]:
    """The (table, column) pairs of numbers unique on the original by chance, not as a key (declared
    alone, named as an identifier, a link's parent): ``kept_facts`` lets them repeat, for a gold
    that neither sorts by one nor takes its ``min``/``max`` (``prepare`` names them per database)."""
    parents = {(k.parent.lower(), c.lower()) for k in profile.links for c in k.parent_columns}
    out = []
    for table in profile.tables:
        key = [c.lower() for c in table.key]
        for col in table.columns:
            name = col.name.lower()
            if col.unique and col.kinds and set(col.kinds) <= {"integer", "real"} and key != [name] \
                    and not name.endswith("id") and (table.name.lower(), name) not in parents:
                out.append((table.name, col.name))
    return out


def _proof(task: Task) -> inv.Profile:
    key = (task.sha256, id(task.profile), task.gold)
    found = KEPT.proofs.get(key)
    if found is None:
        found = kept_facts(task.profile, task.gold)
        KEPT.put(KEPT.proofs, key, found)
    return found


def _learn(task: Task, edit: difference_edits.Edit, original: gold_results.GoldResult, box: sql_sandbox.Sandbox,
           limits: Limits) -> _Outcome:
    """Whether the edited copy keeps the invariants and judges the gold, and the gold's result there."""
    tables = frozenset(t.lower() for t in edit.tables)
    before, base_units = _baseline(task, tables, box)
    with _Reading(box) as reading:
        broken = _kinds(neighbour_proof.violations(_proof(task), box.plain, task.repeats_allowed, tables))
    units = reading.units + base_units
    if not _no_worse(broken, before):
        return _Outcome(None, units)
    try:
        gold = gold_results.compute(task.gold, lambda text: _gold_run(task, text, box, limits), limits.float_digits)
    except sql_guard.QueryFailed as failed:
        if failed.kind in (sql_guard.WALL_GUARD, sql_guard.INFRASTRUCTURE):
            raise sql_sandbox.SandboxBroken(f"the gold on an edited copy: {failed.detail}") from None
        return _Outcome(None, units + failed.steps)
    units += gold.steps
    if neighbour_proof.judges(original, gold):
        return _Outcome(None, units)
    extremes = _extremes(task)
    with _Reading(box) as reading:
        repeated = neighbour_proof.repeated_identity(box.plain, task.profile, task.gold)
        tied = extremes and _ties(box.plain, extremes) != _original_ties(task, extremes, box)
    units += reading.units
    return _Outcome(None if repeated or tied else gold, units)


def _extremes(task: Task) -> tuple[tuple[str, str, str], ...]:
    """(table, column, min or max) of each extreme the gold takes (``min(c)``, ``max(c)``)."""
    found = []
    for (table, column), places in sorted(_gold_reading(task).mentions.items()):
        for how in sorted({m.function for m in places if m.function in ("MIN", "MAX")}):
            found.append((table, column, how))
    return tuple(found)


def _ties(conn: sqlite3.Connection, extremes: tuple[tuple[str, str, str], ...]) -> tuple[bool, ...]:
    """Whether two rows or more hold each extreme (a tie there would decide which row a bare column
    of the gold comes from, as ``neighbours.plan`` draws a gold's extreme columns distinct)."""
    out = []
    for table, column, how in extremes:
        t, c = inv.quote(table), inv.quote(column)
        count = conn.execute(f"SELECT count(*) FROM {t} WHERE {c} = (SELECT {how}({c}) FROM {t})").fetchone()[0]
        out.append(int(count or 0) > 1)
    return tuple(out)


def _original_ties(task: Task, extremes: tuple[tuple[str, str, str], ...], box: sql_sandbox.Sandbox) -> tuple[bool, ...]:
    """``_ties`` on the original (a tie it has already is no new situation): once per process."""
    key = (task.sha256, extremes)
    found = KEPT.ties.get(key)
    if found is None:
        pending = box.pending
        box.undo()
        try:
            found = _ties(box.plain, extremes)
        finally:
            if pending:
                box.apply(pending)
        KEPT.put(KEPT.ties, key, found)
    return found  # type: ignore[no-any-return]


def _kinds(violations: list[str]) -> dict[str, tuple[int, ...]]:
    """The invariants broken, each with its counts (``_no_worse`` compares them)."""
    return {re.sub(r"\d+", "N", v): tuple(int(n) for n in re.findall(r"\d+", v)) for v in violations}


def _no_worse(broken: dict[str, tuple[int, ...]], before: dict[str, tuple[int, ...]]) -> bool:
    """Whether an edit breaks only what the original breaks, and no further: a copy of a flight whose
    code has a leading space (flight_2 names no such airport) adds no value the link misses; a model
    renamed under its cars does (car_1 misses one model already, and may miss no second)."""
    return all(kind in before and all(a <= b for a, b in zip(counts, before[kind]))
               for kind, counts in broken.items())


def _gold_run(task: Task, text: str, box: sql_sandbox.Sandbox, limits: Limits) -> tuple:
    raw = sql_guard.run_query(task.path, text, limits, budget_steps=limits.difference_steps,
                              wall_s=limits.gold_wall_guard_s, fresh=True, sandbox=box)
    return raw.columns, raw.rows, raw.steps


def _baseline(task: Task, tables: frozenset, box: sql_sandbox.Sandbox) -> tuple[dict[str, tuple[int, ...]], int]:
    """What the original itself breaks of the invariants of ``tables`` (an edit may break no more:
    flight_2's codes with a leading space break a declared key already), and the units it cost."""
    key = (task.sha256, id(task.profile), task.gold, tables, task.repeats_allowed)
    found = KEPT.baselines.get(key)
    if found is None:
        pending = box.pending
        box.undo()
        try:
            with _Reading(box) as reading:
                found = (_kinds(neighbour_proof.violations(_proof(task), box.plain, task.repeats_allowed, tables)),
                         reading.units)
        finally:
            if pending:
                box.apply(pending)
        KEPT.put(KEPT.baselines, key, found)
    return found


class Searches:
    """A row's searches after a match on the original and the neighbours, as ``verify`` calls them
    (``search(sql, known)``): the one aimed at the difference (``aimed``), then the counterexample
    search (``drawn``, ``search.counterexample``), the first database that decides ending both."""

    def __init__(self, aimed: Task | None, drawn: neighbour_search.Task | None, limits: Limits) -> None:
        self.aimed, self.drawn, self.limits = aimed, drawn, limits

    def __call__(self, sql: str, known: gold_results.GoldResult) -> verify_mod.Searched:
        first = search(self.aimed, sql, known, self.limits) if self.aimed is not None else None
        if first is not None and (first.decided_on is not None or self.drawn is None):
            return first
        assert self.drawn is not None  # one of the two is given
        then = neighbour_search.remembered(self.drawn, sql, known, self.limits)
        if first is None:
            return then
        return then._replace(databases=first.databases + then.databases, steps=first.steps + then.steps)


def forget() -> None:
    """Forget what the process keeps (a benchmark times a cold search)."""
    with KEPT.lock:
        KEPT.edits.clear()
        KEPT.outcomes.clear()
        KEPT.verdicts.clear()
        KEPT.baselines.clear()
        KEPT.proofs.clear()
        KEPT.readings.clear()
        KEPT.ties.clear()
