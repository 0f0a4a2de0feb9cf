"""Close the audit's holes at build time: a neighbour that tells a paid degenerate answer from its gold.

The audit (harness.audit) names every (database, gold, answer) a degenerate policy is paid for and
a witness shows wrong: a *hole*. For each hole, in a fixed order, ``close`` looks for one more
neighbour database of that database on which

* every invariant of the original's data holds (``neighbour_proof.violations``, as for every neighbour);
* the gold runs, what it presupposes holds (``neighbour_proof.judges``, ``repeated_identity``) and it
  matches itself;
* the answer is told apart (a mismatch, or it fails: the search's decisive outcomes);
* every equivalent rewrite of that gold the caller knows (fixtures/neighbours/rewrites.json) still matches.

Tried in turn, the first that qualifies is kept:

1. the neighbours this step added to the database before (one database often closes several holes);
2. ``draws`` databases drawn by the bundle's generator (``bundle.neighbour_fuzz``) as the grader's
   counterexample search draws them for that very pair (``neighbour_search.focus`` and ``PLANS``:
   small databases first, the pair's literals as special values), with build-time seeds;
3. targeted edits of the first ``bases`` draws on which the gold may be judged (where none may, of
   the original itself when it is small: a gold no draw gives rows), at most ``EDITS`` each: two
   rows swap their values in a column holding a value of the gold's answer or a literal it
   compares with (the row the question names takes another's name); a cell holding such a value
   gets the column's next one or one none has (a row the WHERE must cut); a row gets the literal
   a dropped condition would keep; a row holding the answer is copied with fresh keys (one more
   row for a count, a group, a DISTINCT or a LIMIT); a row of a table the gold reads is deleted
   with the rows that need it. The proof decides whether an edit keeps the invariants.

A database kept is added to the database's neighbours (at most ``max_added``), and each gold is
judged there only where it closes one of that gold's holes: a check costs the reward a run on
every match, and must earn it. Holes left open are reported; ``prepare --drop-hackable`` can leave
their rl rows out.

Deterministic: the seeds are texts of the database's SHA-256, the gold, the answer and the
attempt, the holes are taken in sorted order, and no set of texts is iterated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path

from bundle import gold_results, neighbour_proof, neighbour_search, sql_guard
from bundle import neighbour_invariants as inv
from bundle import neighbour_values as nv
from bundle.neighbour_fuzz import Fuzzer
from bundle.neighbour_source import Draw, read_original
from bundle.verify import MATCH, gold_result, judge
from harness.prepare.neighbours.distil import BUILD_STEPS, Distilled, build_limits

SWAPS = 3  # columns whose values a base swaps, per base
CHANGES = 3  # rows whose value is changed, per column the gold compares with a literal or answers from
DELETES = 6  # rows deleted (one at a time) per table the gold reads, per base
EDITS = 40  # edits tried per base at most


@dataclasses.dataclass(frozen=True)
class Settings:
    seed: int = 0
    draws: int = 12  # generator draws per hole
    bases: int = 2  # draws the gold may be judged on that are edited when none separates
    max_added: int = 6  # neighbours added per database at most
    max_original_bytes: int = 256 * 1024  # where no draw may judge the gold, a small original is edited instead


@dataclasses.dataclass(frozen=True, order=True)
class Hole:
    """A degenerate answer the audit found paid and shown wrong."""

    db_id: str
    gold: str
    sql: str
    policy: str = ""


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
          settings: Settings = Settings()) -> tuple[dict[str, Distilled], list[Outcome]]:
    """Each database's neighbours with the ones that close ``holes`` added, and what became of each hole."""
    out = dict(distilled)
    outcomes: list[Outcome] = []
    for db_id in sorted({h.db_id for h in holes}):
        found = distilled.get(db_id)
        mine = sorted({h for h in holes if h.db_id == db_id})
        if found is None:
            outcomes += [Outcome(h, None, "the database has no neighbours (prepare --neighbours)") for h in mine]
            continue
        fair = {gold: tuple(rewrites.get((db_id, gold), ())) for gold in found.originals}
        database = _Database(found, originals[db_id], fair, work / db_id)
        outcomes += [_close_one(database, hole, settings) for hole in mine]
        out[db_id] = _with_added(found, database.added)
    sql_guard.forget_connections()
    return out, outcomes


def _close_one(database: _Database, hole: Hole, settings: Settings) -> Outcome:
    base = len(database.found.files)
    for k, added in enumerate(database.added):
        here = database.fits(added.path, hole, prove=False)
        if here is not None:
            added.results.setdefault(hole.gold, here)
            return Outcome(hole, base + k + 1, "added before")
    if len(database.added) >= settings.max_added:
        return Outcome(hole, None, f"open: {settings.max_added} neighbours added to the database already")
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
        for what, edit in _edits(base, hole.gold, database):
            path = database.path()
            shutil.copyfile(base, path)
            if _apply(path, edit):
                yield path, f"{name}, {what}", database.fits(path, hole, prove=True)


Edit = list[tuple[str, tuple]]  # statements and their parameters


def _edits(base: Path, gold: str, database: _Database) -> Iterator[tuple[str, Edit]]:
    """Targeted edits of ``base``, at most EDITS: swaps, then changes, in the columns holding the
    gold's values or compared with its literals, then copies and deletions of rows of the tables it reads."""
    profile = database.found.profile
    linked = {(k.child.lower(), c.lower()) for k in profile.links for c in k.child_columns} | \
             {(k.parent.lower(), c.lower()) for k in profile.links for c in k.parent_columns}
    try:
        answer = sql_guard.run_query(str(base), gold, database.limits, budget_steps=BUILD_STEPS,
                                     wall_s=database.limits.wall_guard_s).rows[:20]
    except sql_guard.QueryFailed:
        return
    values = [v for row in answer for v in row if v is not None][:40]
    words = {w.lower().strip('"`[]') for w in gold.replace(",", " ").replace("(", " ").replace(")", " ").split()}
    compared = nv.literals_by_column(gold, {c.name.lower() for t in profile.tables for c in t.columns})
    free = [(t, c.name) for t in profile.tables for c in t.columns if (t.name.lower(), c.name.lower()) not in linked]
    read = [t for t in profile.tables if t.name.lower() in words]
    conn = inv.open_read_only(str(base))
    try:
        made = itertools.chain(_swaps(conn, free, compared, values), _changes(conn, free, compared, values),
                               _copies(conn, read, values), _deletes(conn, profile, read))
        yield from itertools.islice(made, EDITS)
    finally:
        conn.close()


def _swaps(conn: sqlite3.Connection, free: list, compared: dict[str, list], values: list) -> Iterator[tuple[str, Edit]]:
    """Swaps in the columns holding a value of the gold's answer, or a literal it compares them with
    (the row the question names takes another row's key or name)."""
    found = ((f"swap {t.name}.{c}", _swap(conn, t.name, c, wanted)) for t, c in free
             for wanted in (compared.get(c.lower(), []) + values,) if wanted)
    return itertools.islice(((what, edit) for what, edit in found if edit is not None), SWAPS)


def _changes(conn: sqlite3.Connection, free: list, compared: dict[str, list], values: list) -> Iterator[tuple[str, Edit]]:
    """Cells changed: where a row holds a literal the gold compares a column with, each other column
    holding a value of its answer; then the literal's column itself, and the answer's; then rows that
    do not hold a literal given it (a row a dropped condition would keep)."""
    for t, c in free:
        for lit_col, lits in sorted(compared.items()):
            if lit_col and lit_col != c.lower() and values and any(x.name.lower() == lit_col for x in t.columns):
                yield from _changed(conn, t.name, c, f"{inv.quote(lit_col)} IN ({_marks(lits)}) AND "
                                    f"{inv.quote(c)} IN ({_marks(values)})", [*lits, *values])
    for t, c in free:
        for wanted in (compared.get(c.lower(), []), values):
            if wanted:
                yield from _changed(conn, t.name, c, f"{inv.quote(c)} IN ({_marks(wanted)})", wanted)
    for t, c in free:
        for lit in compared.get(c.lower(), []):
            for (rowid,) in _rows(conn, t.name, f"{inv.quote(c)} IS NOT ?", [lit]):
                yield f"{t.name}.{c} of row {rowid} set to {lit!r}", [(f"UPDATE {inv.quote(t.name)} SET {inv.quote(c)} = ? "
                                                                       "WHERE rowid = ?", (lit, rowid))]


def _marks(values: list) -> str:
    return ", ".join("?" * len(values))


def _rows(conn: sqlite3.Connection, table: str, where: str, params: list, limit: int = CHANGES) -> list[tuple]:
    try:
        return conn.execute(f"SELECT rowid FROM {inv.quote(table)} WHERE {where} ORDER BY rowid LIMIT {limit}",
                            params).fetchall()
    except sqlite3.Error:
        return []


def _changed(conn: sqlite3.Connection, table: str, column: str, where: str, params: list) -> Iterator[tuple[str, Edit]]:
    """For the first CHANGES rows ``where`` holds: ``column`` set to its first other value, and to one
    none has (a number past the greatest, the text with ``~2``)."""
    t, c = inv.quote(table), inv.quote(column)
    for (rowid,) in _rows(conn, table, where, params):
        other = _rows(conn, table, f"{c} IS NOT (SELECT {c} FROM {t} WHERE rowid = ?) AND {c} IS NOT NULL", [rowid], 1)
        what = f"change {table}.{column} row {rowid}"
        if other:
            yield what, [(f"UPDATE {t} SET {c} = (SELECT {c} FROM {t} WHERE rowid = ?) WHERE rowid = ?", (other[0][0], rowid))]
        yield what + " (new)", [(f"UPDATE {t} SET {c} = {_fresh(t, c)} WHERE rowid = ?", (rowid,))]


def _fresh(t: str, c: str) -> str:
    """A value of column ``c`` of table ``t`` none has: a number past the greatest, a text with ``~2``."""
    return (f"CASE WHEN typeof({c}) IN ('integer', 'real') THEN (SELECT max({c}) FROM {t} WHERE typeof({c}) IN "
            f"('integer', 'real')) + 1 WHEN {c} IS NULL THEN NULL ELSE {c} || '~2' END")


def _copies(conn: sqlite3.Connection, read: list, values: list) -> Iterator[tuple[str, Edit]]:
    """A copy of a row of a table the gold reads, its keys and unique columns fresh: one more row for
    a count, a group, a DISTINCT or a LIMIT to see. The first rows holding a value of the gold's
    answer, then the last rows."""
    for table in read:
        t = inv.quote(table.name)
        fresh = {c.lower() for c in table.key} | {c.name.lower() for c in table.columns if c.unique or c.near_unique}
        exprs = ", ".join(_fresh(t, inv.quote(c.name)) if c.name.lower() in fresh else inv.quote(c.name)
                          for c in table.columns)
        names = ", ".join(inv.quote(c.name) for c in table.columns)
        holding = " OR ".join(f"{inv.quote(c.name)} IN ({_marks(values)})" for c in table.columns) if values else "0"
        rows = _rows(conn, table.name, holding, values * len(table.columns), 2) + \
            conn.execute(f"SELECT rowid FROM {t} ORDER BY rowid DESC LIMIT 2").fetchall()
        for rowid in dict.fromkeys(r[0] for r in rows):
            yield f"copy {table.name} row {rowid}", [(f"INSERT INTO {t} ({names}) SELECT {exprs} FROM {t} WHERE rowid = ?",
                                                      (rowid,))]


def _deletes(conn: sqlite3.Connection, profile: inv.Profile, read: list) -> Iterator[tuple[str, Edit]]:
    for table in read:
        for (rowid,) in conn.execute(f"SELECT rowid FROM {inv.quote(table.name)} ORDER BY rowid LIMIT {DELETES}").fetchall():
            yield f"delete {table.name} row {rowid}", _delete(profile, table.name, rowid)


def _swap(conn: sqlite3.Connection, table: str, column: str, values: list) -> Edit | None:
    """Swap ``column``'s value in the first row holding one of ``values`` with the first row holding another."""
    t, c = inv.quote(table), inv.quote(column)
    try:
        first = conn.execute(f"SELECT rowid FROM {t} WHERE {c} IN ({_marks(values)}) ORDER BY rowid LIMIT 1",
                             values).fetchone()
        if first is None:
            return None
        other = conn.execute(f"SELECT rowid FROM {t} WHERE {c} IS NOT (SELECT {c} FROM {t} WHERE rowid = ?) "
                             f"AND {c} IS NOT NULL ORDER BY rowid LIMIT 1", (first[0],)).fetchone()
    except sqlite3.Error:
        return None
    if other is None:
        return None
    a, b = first[0], other[0]
    # Through a temporary table, so that the values keep their storage class and bytes, and a
    # unique column is never two rows' at once.
    return [("CREATE TEMP TABLE swapped AS SELECT rowid AS r, " + c + " AS v FROM " + t + " WHERE rowid IN (?, ?)", (a, b)),
            (f"UPDATE {t} SET {c} = x'7e7e7e' WHERE rowid = ?", (a,)),
            (f"UPDATE {t} SET {c} = (SELECT v FROM swapped WHERE r = ?) WHERE rowid = ?", (a, b)),
            (f"UPDATE {t} SET {c} = (SELECT v FROM swapped WHERE r = ?) WHERE rowid = ?", (b, a))]


def _delete(profile: inv.Profile, table: str, rowid: int) -> Edit:
    """Delete one row, then, as many times as there are links, every row left without its parent."""
    edit: Edit = [(f"DELETE FROM {inv.quote(table)} WHERE rowid = ?", (rowid,))]
    for _round in range(len(profile.links)):
        edit += [(f"DELETE FROM {inv.quote(k.child)} WHERE {inv.orphans_where(k)}", ()) for k in profile.links]
    return edit


def _apply(path: Path, edit: Edit) -> bool:
    """Apply ``edit`` to the database at ``path`` and VACUUM it; False when SQLite refuses a statement."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # the proof checks the links afterwards, as for every neighbour
        conn.execute("BEGIN")
        for sql, params in edit:
            conn.execute(sql, params)
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        return True
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _with_added(found: Distilled, added: list[_Added]) -> Distilled:
    """``found`` with the ``added`` neighbours after its own, each judging only the golds it closes a hole of."""
    if not added:
        return found
    results = {gold: list(per) + [a.results.get(gold) for a in added] for gold, per in found.results.items()}
    return dataclasses.replace(found, files=list(found.files) + [a.path for a in added], results=results)
