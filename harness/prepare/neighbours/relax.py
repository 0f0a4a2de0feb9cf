"""Invariants that hide a question: a neighbour that relaxes one, for the golds it hides.

Every neighbour keeps every invariant of its original's data (docs/neighbours.md). Some golds ask
about exactly what one of them rules out: inn_1 books every room, so every neighbour books every
room, and "the number of rooms that do not have any reservation" answers 0 on all of them:
``SELECT 0`` is paid. For one database (``relax``):

1. ``questions`` (harness.prepare.neighbours.questions): the kept invariants a gold's question
   depends on: a *total link* (every parent row referenced) for an anti-join of the parent and its
   child (``NOT IN (SELECT ...)``, ``NOT EXISTS``, ``EXCEPT``, ``LEFT JOIN ... IS NULL``), a
   *column without NULL* for ``IS NULL`` or ``IS NOT NULL`` on it;
2. *hidden*: a gold that asks one, whose answer (its rows as a bag) is the original's on every kept
   neighbour and on ``probes`` more draws of the same generator, wherever it may be judged;
3. for each invariant the hidden golds ask (total links first, then by subject), up to
   ``attempts`` databases: a draw of the generator (every invariant kept), then that invariant
   broken (the child rows of a few parent rows deleted; a few cells set to NULL) and what that
   leaves broken repaired, proved against every other invariant (``neighbours.proof.violations``
   on ``neighbours.invariants.relax``). A gold is told apart there where it runs, may be judged
   (``judges``, ``repeated_identity``), matches itself and its known fair rewrites
   (fixtures/neighbours/rewrites.json), and answers otherwise than on the original. The first
   database telling every such gold apart is kept, else the one telling most; at most
   ``max_relaxed`` a database.

A relaxed neighbour comes after the database's others and judges only the golds it tells apart:
any other answer needs the invariant kept. The index records, per neighbour, what it relaxes and
for which golds (``relaxed``); the bundle's proof accepts exactly that.

Deterministic: the seeds are texts of the seed, the database, the invariant and the attempt; no
set of texts is iterated.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path

from bundle.contract.limits import Limits
from bundle.neighbours import invariants as inv
from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.links import repair
from bundle.neighbours.source import Draw, read_original
from bundle.scoring.index import normalize_gold
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from bundle.verify import MATCH, gold_result, judge
from harness.prepare.neighbours.distil import BUILD_STEPS, PLANS, Distilled, build_limits, focus_for
from harness.prepare.neighbours.questions import Hidden, Question, questions

REWRITES = Path(__file__).resolve().parents[3] / "fixtures" / "neighbours" / "rewrites.json"


@dataclasses.dataclass(frozen=True)
class Settings:
    seed: int = 0
    probes: int = 8  # more draws a gold's answer must stay the same on before it counts as hidden
    attempts: int = 6  # databases tried per invariant relaxed
    max_relaxed: int = 3  # relaxed neighbours per database at most
    share: tuple[float, float] = (0.1, 0.34)  # of the parent rows left unreferenced, of the cells set to NULL


# ---- whether a gold is told apart on a database -------------------------------------------------------

def _answer(result: gold_results.GoldResult) -> tuple:
    """A result's rows as a bag (order aside: the question's answer, not its listing)."""
    return result.shape.ncols, tuple(sorted(repr(r) for r in result.shape.rows))


class _Database:
    """One database's context while relaxing: its invariants, rows, golds' results and fair rewrites."""

    def __init__(self, found: Distilled, original: Path, fair: Mapping[str, tuple[str, ...]], work: Path,
                 settings: Settings) -> None:
        self.found, self.fair, self.work, self.settings = found, fair, work, settings
        self.limits: Limits = build_limits()
        conn = inv.open_read_only(str(original))
        try:
            self.source = read_original(conn)
        finally:
            conn.close()
        self.focus = focus_for(sorted(found.results), found.profile)
        self._fuzzers: list[Fuzzer] = []
        self.made = 0

    def fuzzer(self, k: int) -> Fuzzer:
        """The generator of plan ``k`` (distil's PLANS in turn), every invariant kept."""
        if not self._fuzzers:
            self._fuzzers = [Fuzzer(self.source, self.found.profile, dataclasses.replace(self.focus, **plan))
                             for plan in PLANS]
        return self._fuzzers[k % len(self._fuzzers)]

    def path(self, what: str) -> Path:
        self.made += 1
        self.work.mkdir(parents=True, exist_ok=True)
        return self.work / f"{self.found.db_id}-relax-{what}-{self.made:03d}.sqlite"

    def result(self, path: Path, gold: str, profile: inv.Profile) -> gold_results.GoldResult | None:
        """The gold's result on ``path`` where it runs and may be judged there, else None."""
        original = self.found.originals.get(gold)
        try:
            here = gold_result(gold, str(path), self.limits)
        except sql_guard.QueryFailed:
            return None
        if original is None or neighbour_proof.judges(original, here):
            return None
        conn = inv.open_read_only(str(path))
        try:
            return None if neighbour_proof.repeated_identity(conn, profile, gold) else here
        finally:
            conn.close()

    def told(self, path: Path, gold: str, profile: inv.Profile) -> gold_results.GoldResult | None:
        """The gold's result on ``path`` where it tells the gold apart: it may be judged there, matches
        itself and its fair rewrites, and answers otherwise than on the original; else None."""
        here = self.result(path, gold, profile)
        if here is None or _answer(here) == _answer(self.found.originals[gold]):
            return None
        for sql in (gold, *self.fair.get(gold, ())):
            if judge(str(path), sql, here, self.limits, neighbour=True, max_steps=BUILD_STEPS).outcome != MATCH:
                return None
        return here

    def probes(self) -> Iterator[Path]:
        """``settings.probes`` draws of the generator, every invariant kept (those breaking one skipped)."""
        for k in range(self.settings.probes):
            path = self.path("probe")
            if not self.fuzzer(k).build(str(path), Draw(f"spider-scoring-relax:{self.settings.seed}:"
                                                        f"{self.found.db_id}:probe:{k}"), vacuum=True):
                yield path


def hidden_golds(database: _Database, golds: list[str]) -> list[str]:
    """Those of ``golds`` whose answer is the original's on every kept neighbour and probe draw where
    they may be judged."""
    profile = database.found.profile
    left = [g for g in golds if g in database.found.originals]
    for path in [*database.found.files, *(database.probes() if left else ())]:
        left = [g for g in left if (r := database.result(path, g, profile)) is None
                or _answer(r) == _answer(database.found.originals[g])]
        if not left:
            break
    return left


# ---- a neighbour with one invariant relaxed -------------------------------------------------------------

def _some(rowids: list[int], draw: Draw, share: tuple[float, float], keep_one: bool) -> list[int]:
    """A few of ``rowids`` (a share of them, at least one), chosen by ``draw``, sorted."""
    most = len(rowids) - 1 if keep_one else len(rowids)
    k = min(most, max(1, round(len(rowids) * draw.uniform(*share))))
    return sorted(draw.shuffled(rowids)[:k]) if k > 0 else []


def _columns(names: tuple[str, ...]) -> str:
    quoted = ", ".join(inv.quote(c) for c in names)
    return quoted if len(names) == 1 else f"({quoted})"


def _break(conn: sqlite3.Connection, question: Question, profile: inv.Profile, draw: Draw,
           share: tuple[float, float]) -> bool:
    """Break the invariant of ``question``: delete the child rows of a few parent rows, or set a few
    cells to NULL. False where there is nothing to break."""
    if question.kind == inv.TOTAL_LINK:
        link = next(k for k in profile.links if k.describe() == question.subject)
        present = " AND ".join(f"{inv.quote(c)} IS NOT NULL" for c in link.parent_columns)
        rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {inv.quote(link.parent)} WHERE {present} ORDER BY rowid")]
        chosen = _some(rowids, draw, share, keep_one=True)
        conn.execute(f"DELETE FROM {inv.quote(link.child)} WHERE {_columns(link.child_columns)} IN (SELECT "
                     f"{', '.join(inv.quote(c) for c in link.parent_columns)} FROM {inv.quote(link.parent)} "
                     f"WHERE rowid IN ({', '.join('?' * len(chosen))}))", chosen)
    else:
        table, _, column = question.subject.partition(".")
        rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {inv.quote(table)} ORDER BY rowid")]
        chosen = _some(rowids, draw, share, keep_one=False)
        conn.execute(f"UPDATE {inv.quote(table)} SET {inv.quote(column)} = NULL WHERE rowid IN "
                     f"({', '.join('?' * len(chosen))})", chosen)
    return bool(chosen)


def _broken(conn: sqlite3.Connection, question: Question, profile: inv.Profile) -> bool:
    """Whether the database behind ``conn`` breaks the invariant of ``question`` (the relaxation shows)."""
    if question.kind == inv.TOTAL_LINK:
        link = next(k for k in profile.links if k.describe() == question.subject)
        return inv._scalar(conn, inv.unreferenced_sql(link)) > 0
    table, _, column = question.subject.partition(".")
    return inv._scalar(conn, f"SELECT count(*) - count({inv.quote(column)}) FROM {inv.quote(table)}") > 0


def loosened(path: Path, question: Question, profile: inv.Profile, repeats_allowed: frozenset[str], draw: Draw,
             share: tuple[float, float]) -> bool:
    """Relax ``question``'s invariant on the database at ``path`` (a neighbour keeping every invariant),
    repair what that leaves broken, and VACUUM: whether it now breaks that invariant and keeps every other."""
    relaxed = inv.relax(profile, [inv.Relaxed(question.kind, question.subject)])
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # the proof checks the links afterwards, as for every neighbour
        conn.execute("BEGIN")
        if not _break(conn, question, profile, draw, share):
            conn.execute("ROLLBACK")
            return False
        repair(conn, relaxed)
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        return _broken(conn, question, profile) and not neighbour_proof.violations(relaxed, conn, repeats_allowed)
    except sqlite3.Error:  # a NOT NULL the schema declares, a table without rowid
        return False
    finally:
        conn.close()


def _relaxed_neighbour(database: _Database, question: Question,
                       golds: list[str]) -> tuple[Path, dict[str, gold_results.GoldResult]] | None:
    """The first of ``settings.attempts`` databases with ``question`` relaxed that tells every one of
    ``golds`` apart, else the one telling most (None: none tells any)."""
    found, settings = database.found, database.settings
    relaxed = inv.relax(found.profile, [inv.Relaxed(question.kind, question.subject)])
    best: tuple[Path, dict[str, gold_results.GoldResult]] | None = None
    for k in range(settings.attempts):
        path = database.path("attempt")
        seed = f"spider-scoring-relax:{settings.seed}:{found.db_id}:{question.describe()}:{k}"
        draw = Draw(seed)
        if database.fuzzer(k).build(str(path), draw, vacuum=True) or \
                not loosened(path, question, found.profile, frozenset(found.repeats_allowed), draw, settings.share):
            continue
        told = {g: r for g in golds if (r := database.told(path, g, relaxed)) is not None}
        if told and (best is None or len(told) > len(best[1])):
            best = (path, told)
        if len(told) == len(golds):
            break
    return best


def fair_rewrites(db_id: str, golds: list[str], path: Path = REWRITES) -> dict[str, tuple[str, ...]]:
    """The known fair rewrites of ``golds`` (fixtures/neighbours/rewrites.json), which a relaxed
    neighbour must pay as it pays the gold."""
    if not path.is_file():
        return {}
    by_gold = {normalize_gold(g): g for g in golds}
    out: dict[str, list[str]] = {}
    for item in json.loads(path.read_text(encoding="utf-8"))["rewrites"]:
        gold = by_gold.get(normalize_gold(item["gold"])) if item["db_id"] == db_id else None
        if gold is not None:
            out.setdefault(gold, []).append(item["rewrite"])
    return {g: tuple(r) for g, r in out.items()}


def relax(found: Distilled, original: Path, work: Path, settings: Settings = Settings()) -> Distilled:
    """``found`` with a relaxed neighbour added for each invariant that hides golds of it (module
    docstring), and ``hidden`` saying what became of each such gold."""
    asked = {g: questions(g, found.profile) for g in sorted(found.originals)}
    asking = [g for g, qs in asked.items() if qs]
    if not asking:
        return found
    database = _Database(found, original, fair_rewrites(found.db_id, asking), work, settings)
    hidden = hidden_golds(database, asking)
    relaxed = dict(found.relaxed)
    added: list[tuple[Path, dict[str, gold_results.GoldResult]]] = []
    told: dict[str, tuple[Question, int]] = {}
    capped: set[str] = set()  # golds left hidden because the database has max_relaxed relaxed neighbours
    for question in sorted({q for g in hidden for q in asked[g]}, key=Question.key):
        golds = [g for g in hidden if question in asked[g] and g not in told]
        if golds and len(added) >= settings.max_relaxed:
            capped.update(golds)
        if not golds or len(added) >= settings.max_relaxed:
            continue
        made = _relaxed_neighbour(database, question, golds)
        if made is None:
            continue
        path, here = made
        kept = database.work / "relaxed" / f"{found.db_id}-relaxed-{len(added) + 1}.sqlite"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, kept)
        at = len(found.files) + len(added)
        added.append((kept, here))
        relaxed[at] = (inv.Relaxed(question.kind, question.subject, tuple(sorted(here))),)
        told.update({g: (question, at + 1) for g in here})
    sql_guard.forget_connections()
    report = tuple(_finding(found, g, asked[g], told.get(g), settings, g in capped) for g in hidden)
    files = list(found.files) + [p for p, _r in added]
    results = {g: list(per) + [r.get(g) for _p, r in added] for g, per in found.results.items()}
    return dataclasses.replace(found, files=files, results=results, relaxed=relaxed,
                               hidden=found.hidden + report)


def _finding(found: Distilled, gold: str, asks: tuple[Question, ...], told: tuple[Question, int] | None,
             settings: Settings, capped: bool = False) -> Hidden:
    seen = f"the same on its {len(found.files)} neighbours and {settings.probes} more draws"
    if told is None:
        return Hidden(found.db_id, gold, asks, None, None,
                      f"still hidden: its answer is {seen}, and no database relaxing "
                      f"{' or '.join(q.describe() for q in asks)} ({settings.attempts} tried each) tells it apart"
                      + (f", or the database has {settings.max_relaxed} relaxed neighbours already" if capped else ""))
    question, neighbour = told
    return Hidden(found.db_id, gold, asks, question, neighbour,
                  f"its answer is {seen}: {_kept(question)}; neighbour {neighbour} relaxes it and answers otherwise")


def _kept(question: Question) -> str:
    if question.kind == inv.TOTAL_LINK:
        child, _, parent = question.subject.partition(" -> ")
        return f"the original references every {parent} from {child}, and every neighbour keeps that"
    return f"{question.subject} holds no NULL in the original, nor on any neighbour"
