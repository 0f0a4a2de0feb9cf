"""Close the audit's holes at build time: a neighbour that tells a paid degenerate answer from its gold.

The audit (harness.audit) names every (database, gold, answer) a degenerate policy is paid for and
a witness shows wrong: a *hole*. For each hole, in a fixed order, ``close`` looks for one more
neighbour database of that database on which

* every invariant of the original's data holds (``neighbours.proof.violations``, as for every neighbour);
* the gold runs, what it presupposes holds (``neighbours.proof.judges``, ``repeated_identity``) and it
  matches itself;
* the answer is told apart (a mismatch, or it fails: the search's decisive outcomes);
* every equivalent rewrite of that gold the caller knows (fixtures/neighbours/rewrites.json) still matches.

Tried in turn, the first that qualifies is kept:

1. the neighbours this step added to the database before (one database often closes several holes),
   those the hole's gold is judged on already first (closing it there costs the reward no check);
2. for a near miss, the database the oracle showed it wrong on (harness.audit.nearmiss.oracle, with its
   build seeds: it keeps every invariant by construction, and the proof checks it again);
3. ``draws`` databases drawn by the bundle's generator (``bundle.neighbours.fuzz``) as the grader's
   counterexample search draws them for that very pair (``search.counterexample.focus`` and ``PLANS``:
   small databases first, the pair's literals as special values), with build-time seeds;
4. targeted edits of the first ``bases`` draws on which the gold may be judged (where none may, of
   the original itself when it is small: a gold no draw gives rows), at most ``edits.EDITS`` each
   (harness.prepare.neighbours.edits): two rows swap their values in a column holding a value of the gold's answer or a literal it
   compares with (the row the question names takes another's name); a cell holding such a value
   gets the column's next one or one none has (a row the WHERE must cut); a row gets the literal
   a dropped condition would keep; a row holding the answer is copied with fresh keys (one more
   row for a count, a group, a DISTINCT or a LIMIT); a row of a table the gold reads is deleted
   with the rows that need it. The proof decides whether an edit keeps the invariants.

A database kept is added to the database's neighbours (at most ``max_added``). Once a database's
holes are done, each of its golds is judged on every added neighbour where it may be (it runs,
what it presupposes holds, no name it lists by repeats more than on the original, and its known
fair rewrites match there), not only on those that closed one of its own holes: a database that
tells one gold's near miss apart tells other golds' wrong answers apart too (issue 37). Holes left
open are reported; ``prepare --drop-hackable`` can leave their rl rows out.

Deterministic: the seeds are texts of the database's SHA-256, the gold, the answer and the
attempt, the holes are taken in sorted order, and no set of texts is iterated.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from bundle.neighbours import invariants as inv
from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.source import Draw, read_original
from bundle.search import counterexample as neighbour_search
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from bundle.verify import MATCH, gold_result, judge
from harness.common.files import sha256_file
from harness.common.memo import Memo
from harness.common.processes import map_in_processes
from harness.prepare.neighbours import edits
from harness.prepare.neighbours.distil import BUILD_STEPS, Distilled, build_limits

NO_MEMO = Memo(None)


@dataclasses.dataclass(frozen=True)
class Settings:
    seed: int = 0
    draws: int = 12  # generator draws per hole
    bases: int = 2  # draws the gold may be judged on that are edited when none separates
    max_added: int = 24  # neighbours added per database at most
    max_original_bytes: int = 256 * 1024  # where no draw may judge the gold, a small original is edited instead


@dataclasses.dataclass(frozen=True, order=True)
class Hole:
    """A degenerate answer the audit found paid and shown wrong, or a near miss the oracle did
    (harness.audit.nearmiss.oracle): ``witness`` the database it is shown wrong on (a file that keeps every
    invariant; tried first as the new neighbour), ``witness_name`` how the oracle made it."""

    db_id: str
    gold: str
    sql: str
    policy: str = ""
    witness: str = ""
    witness_name: str = ""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What ``close`` did for one hole: the neighbour (1-based, among the database's) that closes it, or None."""

    hole: Hole
    neighbour: int | None
    how: str  # "added before", "draw 3", "draw 2, swap Rooms.bedType", ... or why it stays open


@dataclasses.dataclass
class _Added:
    path: Path
    results: dict[str, gold_results.GoldResult]  # the golds judged on it


class _Database:
    """One database's context: its invariants and rows, the golds' results, the neighbours added."""

    def __init__(self, found: Distilled, original: Path, rewrites: Mapping[str, tuple[str, ...]], work: Path) -> None:
        self.found, self.original, self.rewrites, self.work = found, original, rewrites, work
        self.sha256 = hashlib.sha256(original.read_bytes()).hexdigest()
        conn = inv.open_read_only(str(original))
        try:
            self.source = read_original(conn)
        finally:
            conn.close()
        self.limits = build_limits()
        self.added: list[_Added] = []
        self.made = 0

    def path(self) -> Path:
        self.made += 1
        self.work.mkdir(parents=True, exist_ok=True)
        return self.work / f"{self.found.db_id}-separate-{self.made:04d}.sqlite"

    def fits(self, path: Path, hole: Hole, prove: bool) -> gold_results.GoldResult | None:
        """The gold's result on ``path`` when that database closes ``hole`` (module docstring), else None."""
        profile, original = self.found.profile, self.found.originals.get(hole.gold)
        if original is None:
            return None
        conn = inv.open_read_only(str(path))
        try:
            if prove and neighbour_proof.violations(profile, conn, frozenset(self.found.repeats_allowed)):
                return None
            if neighbour_proof.repeated_identity(conn, profile, hole.gold):
                return None
        finally:
            conn.close()
        try:
            here = gold_result(hole.gold, str(path), self.limits)
        except sql_guard.QueryFailed:
            return None
        if neighbour_proof.judges(original, here) or not self._matches(path, hole.gold, here):
            return None
        told = judge(str(path), hole.sql, here, self.limits, neighbour=True, max_steps=BUILD_STEPS).outcome
        if told not in neighbour_search.DECISIVE:
            return None
        if not all(self._matches(path, fair, here) for fair in self.rewrites.get(hole.gold, ())):
            return None
        return here

    def _matches(self, path: Path, sql: str, here: gold_results.GoldResult) -> bool:
        return judge(str(path), sql, here, self.limits, neighbour=True, max_steps=BUILD_STEPS).outcome == MATCH

    def judged_on(self, path: Path, gold: str) -> gold_results.GoldResult | None:
        """The gold's result on the added neighbour at ``path`` where it may be judged there: it runs,
        what it presupposes holds, no name it lists by repeats more than on the original, it matches
        itself and every fair rewrite of it matches too; else None."""
        original = self.found.originals.get(gold)
        if original is None:
            return None
        conn = inv.open_read_only(str(path))
        try:
            if neighbour_proof.repeated_identity(conn, self.found.profile, gold):
                return None
        finally:
            conn.close()
        try:
            here = gold_result(gold, str(path), self.limits)
        except sql_guard.QueryFailed:
            return None
        if neighbour_proof.judges(original, here) or not self._matches(path, gold, here):
            return None
        if not all(self._matches(path, fair, here) for fair in self.rewrites.get(gold, ())):
            return None
        return here

    def judged_here(self, path: Path, gold: str) -> bool:
        """Whether ``gold`` runs and may be judged on ``path`` (a base for the edits)."""
        original = self.found.originals.get(gold)
        try:
            here = gold_result(gold, str(path), self.limits)
        except sql_guard.QueryFailed:
            return False
        return original is not None and not neighbour_proof.judges(original, here)


def close(distilled: Mapping[str, Distilled], originals: Mapping[str, Path], holes: list[Hole],
          rewrites: Mapping[tuple[str, str], tuple[str, ...]], work: Path,
          settings: Settings = Settings(), memo: Memo = NO_MEMO,
          processes: int | None = None) -> tuple[dict[str, Distilled], list[Outcome]]:
    """Each database's neighbours with the ones that close ``holes`` added, and what became of each hole.
    Then each gold of a database that got neighbours is judged on every added neighbour where it
    may be (``_every_check``).
    One database a process (``processes`` at a time, default one a core): each draws from seeds of its
    own, so any number gives the same. ``memo``: where each database's added neighbours are kept for
    the next build, keyed by its original, its neighbours, its holes (their witness databases by
    SHA-256), its fair answers and the settings: the same files and outcomes."""
    out = dict(distilled)
    parts: dict[str, list[Outcome]] = {}
    jobs = []
    for db_id in sorted({h.db_id for h in holes}):
        found = distilled.get(db_id)
        mine = _in_order({h for h in holes if h.db_id == db_id})
        if found is None:
            parts[db_id] = [Outcome(h, None, "the database has no neighbours (prepare --neighbours)") for h in mine]
            continue
        fair = {gold: tuple(rewrites.get((db_id, gold), ())) for gold in found.originals}
        jobs.append((found, originals[db_id], mine, fair, work / db_id, settings, memo.folder))
    jobs.sort(key=lambda job: -len(job[2]))  # the most holes first: the processes finish together
    for job, (added, results, closed) in zip(jobs, map_in_processes(_close_database, jobs, processes)):
        found = job[0]
        parts[found.db_id] = closed
        out[found.db_id] = dataclasses.replace(found, files=list(found.files) + added, results=results)
    return out, [outcome for db_id in sorted(parts) for outcome in parts[db_id]]


def _close_database(job: tuple) -> tuple[list[Path], dict[str, list], list[Outcome]]:
    """One database's holes closed (``close``): the neighbours added, every gold's results on all of
    the database's neighbours, and what became of each hole."""
    found, original, mine, fair, work, settings, folder = job
    memo = Memo(folder)
    key = _key(memo, found, original, mine, fair, settings) if memo else ""
    kept = memo.get("separation", key)
    if kept is not None:
        results, told = kept.value
        return kept.files, results, [Outcome(hole, neighbour, how) for hole, (neighbour, how) in zip(mine, told)]
    database = _Database(found, original, fair, work)
    try:
        closed = [_close_one(database, hole, settings) for hole in mine]
        settled = _every_check(database)
    finally:
        sql_guard.forget_connections()
    added = settled.files[len(found.files):]
    memo.put("separation", key, (settled.results, [(o.neighbour, o.how) for o in closed]), added)
    return added, settled.results, closed


def _every_check(database: _Database) -> Distilled:
    """The database's neighbours with those added, each gold judged on every added one where it may
    be (``_Database.judged_on``), besides the hole it was added for."""
    found = _with_added(database.found, database.added)
    base = len(database.found.files)
    results = {}
    for gold, per in found.results.items():
        row = list(per)
        for k in range(base, len(found.files)):
            if row[k] is None:
                row[k] = database.judged_on(found.files[k], gold)
        results[gold] = row
    return dataclasses.replace(found, results=results)


def _key(memo: Memo, found: Distilled, original: Path, holes: list[Hole], fair: Mapping[str, tuple[str, ...]],
         settings: Settings) -> str:
    """What one database's separation depends on (``close``), for ``memo``."""
    named = [dataclasses.replace(h, witness=sha256_file(h.witness) if h.witness else "") for h in holes]
    return memo.key("separation", sha256_file(original), [sha256_file(f) for f in found.files],
                    dataclasses.replace(found, files=[]), named, fair, settings)


def _in_order(holes: set[Hole]) -> list[Hole]:
    """The holes of one database in the order they are closed: the audit's degenerate answers first,
    then the near misses, those whose witness database shows the most of them wrong first (one
    neighbour closes them all, within ``max_added``), then in sorted order."""
    shared = collections.Counter(h.witness for h in holes if h.witness)
    return sorted(holes, key=lambda h: (bool(h.witness), -shared[h.witness] if h.witness else 0, h))


def _close_one(database: _Database, hole: Hole, settings: Settings) -> Outcome:
    base = len(database.found.files)
    # Those the gold is judged on already first: closing the hole there costs the reward no new check.
    for k in sorted(range(len(database.added)), key=lambda k: hole.gold not in database.added[k].results):
        added = database.added[k]
        here = database.fits(added.path, hole, prove=False)
        if here is not None:
            added.results.setdefault(hole.gold, here)
            return Outcome(hole, base + k + 1, "added before")
    if len(database.added) >= settings.max_added:
        return Outcome(hole, None, f"open: {settings.max_added} neighbours added to the database already")
    if hole.witness:
        path = database.path()
        shutil.copyfile(hole.witness, path)
        here = database.fits(path, hole, prove=True) if edits.apply(path, []) else None
        if here is not None:
            database.added.append(_Added(path, {hole.gold: here}))
            return Outcome(hole, base + len(database.added), f"the oracle's witness ({hole.witness_name})")
    for path, how, here in _attempts(database, hole, settings):
        if here is not None:
            database.added.append(_Added(path, {hole.gold: here}))
            return Outcome(hole, base + len(database.added), how)
    return Outcome(hole, None, f"open: no database of {settings.draws} draws and their edits separates it")


def _attempts(database: _Database, hole: Hole, settings: Settings) -> Iterator[tuple[Path, str, gold_results.GoldResult | None]]:
    """(path, how, the gold's result there when it closes the hole) for each database tried, in order."""
    task = neighbour_search.Task(database.found.db_id, database.sha256, hole.gold, database.found.profile,
                                 database.source)
    focus = neighbour_search.focus(task, hole.sql)
    fuzzers = [Fuzzer(database.source, database.found.profile, dataclasses.replace(focus, **plan))
               for plan in neighbour_search.PLANS]
    bases: list[tuple[str, Path]] = []
    for k in range(settings.draws):
        path = database.path()
        seed = f"spider-scoring-separate:{settings.seed}:{neighbour_search.seed(task, hole.sql, k)}"
        if fuzzers[k % len(fuzzers)].build(str(path), Draw(seed), vacuum=True):
            continue  # it breaks an invariant: never used
        here = database.fits(path, hole, prove=False)
        yield path, f"draw {k + 1}", here
        if here is None and len(bases) < settings.bases and database.judged_here(path, hole.gold):
            bases.append((f"draw {k + 1}", path))
    if not bases and database.original.stat().st_size <= settings.max_original_bytes:
        bases.append(("the original", database.original))  # no draw has what the gold asks about (a director who reviews)
    for name, base in bases:
        for what, edit in edits.targeted(base, hole.gold, database.found.profile, database.limits):
            path = database.path()
            shutil.copyfile(base, path)
            if edits.apply(path, edit):
                yield path, f"{name}, {what}", database.fits(path, hole, prove=True)


def _with_added(found: Distilled, added: list[_Added]) -> Distilled:
    """``found`` with the ``added`` neighbours after its own, each judging only the golds it closes a hole of."""
    if not added:
        return found
    results = {gold: list(per) + [a.results.get(gold) for a in added] for gold, per in found.results.items()}
    return dataclasses.replace(found, files=list(found.files) + [a.path for a in added], results=results)
