"""The near-miss oracle: is a near miss the reward pays shown wrong by a database keeping every invariant?

A near miss of a gold (harness.audit.nearmiss.families) that the original database and every neighbour
database pass as the gold is one of three things, and the oracle says which (``Oracle.judge``):

* ``missed``: some database keeping every invariant of the original's data (``neighbours.proof``:
  links, uniqueness, NULL-freedom, formats, names' repeats...; the columns the database's golds
  group by may repeat, as on its neighbours), on which the gold may be judged (its presupposition
  holds: ``neighbours.proof.judges``, ``repeated_identity``), gives it other rows, or makes it fail:
  a neighbour could have rejected it. The oracle returns that *witness* database, which keeps
  every invariant by construction: prepare's separation adds it as a neighbour;
* ``blocked``: only a database that gives up one kind of invariant (harness.audit.nearmiss.loosened) shows
  it wrong; the kind is named ("every parent referenced": every room of inn_1 is booked);
* ``equivalent``: no database tried tells it from the gold.

The databases tried, cheapest first, stopping for each near miss at the first that shows it wrong:

1. ``pool k``: draws of the neighbour generator focused on all the database's golds, shared by them;
2. ``boundary``: one row of a small base (the original when small, else the first pool draw the
   gold may be judged on) given a literal a query compares with, exactly, then one either side
   (``salary = 50000`` tells ``salary < 50000`` from ``salary <= 50000``);
3. ``draw k``: draws focused on the gold and its near misses (their literals as special values);
4. the separation's targeted edits of the base (harness.prepare.neighbours.edits);
5. ``doubled T`` / ``varied T``: the audit's copies of a table the gold reads (harness.audit.witnesses);
6. ``loosened K``: draws from a profile with one kind of invariant given up, to name what blocks.

Seeds are texts of the purpose, the database's SHA-256, the gold and the attempt: the measurement
(``measure``: audit, verify, prepare's summary) and prepare's build (``build``) draw different
databases, so that a figure is never measured on the databases the neighbours were built from.
Deterministic: the same inputs and purpose give the same verdicts and witnesses on any machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import shutil
import sqlite3
import threading
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

from bundle.neighbours import invariants as inv
from bundle.neighbours import mining as neighbour_mining
from bundle.neighbours import proof as neighbour_proof
from bundle.neighbours import values as nv
from bundle.neighbours.fuzz import Fuzzer
from bundle.neighbours.source import Draw, Focus, read_original
from bundle.search import counterexample as neighbour_search
from bundle.sql import gold_results
from bundle.sql import guard as sql_guard
from bundle.verify import gold_result, judge
from harness.audit import witnesses
from harness.audit.nearmiss import loosened
from harness.prepare.neighbours import edits
from harness.prepare.neighbours.distil import BUILD_STEPS, build_limits, focus_for

MISSED, BLOCKED, EQUIVALENT = "missed", "blocked", "equivalent"
SEEDS = {"measure": "spider-scoring-oracle-measure", "build": "spider-scoring-oracle-build"}
# Kinds drawn from a loosened profile to name what blocks (the others are named when a witness breaks them).
DRAWN_LOOSENED = (("every parent referenced",), ("unique", "names' repeats"), ("names' repeats",), ("not null",),
                  ("link",))  # a unique column is a name too: a repeat there gives up both


@dataclasses.dataclass(frozen=True)
class Settings:
    purpose: str = "measure"  # "measure" or "build": which seeds (module docstring)
    pool: int = 12  # draws per database, shared by its golds
    draws: int = 6  # draws per gold, focused on it and its near misses
    boundary: int = 24  # boundary edits per gold at most
    edits: int = 16  # the separation's targeted edits per gold at most
    loosened: int = 1  # draws per kind of invariant given up
    max_base_bytes: int = 1024 * 1024  # an original this small is edited and doubled itself

    def __post_init__(self) -> None:
        if self.purpose not in SEEDS:
            raise ValueError(f"purpose {self.purpose!r}: one of {', '.join(SEEDS)}")


MEASURE = Settings()  # the measurement's (audit, verify, prepare's summary)
BUILD = Settings(purpose="build", pool=36, draws=18)  # prepare's, to find what the separation closes: three times the
# measurement's draws, so that a near miss a witness is rare for is found at build time more often than it is measured


@dataclasses.dataclass(frozen=True)
class Found:
    """The oracle's verdict on one paid near miss (module docstring)."""

    kind: str  # MISSED, BLOCKED or EQUIVALENT
    witness: str = ""  # how the database that shows it wrong was made ("pool 3", "boundary: ...")
    path: Path | None = None  # that database (MISSED), while the oracle's work folder lives
    blocked_by: tuple[str, ...] = ()  # BLOCKED: the kinds of invariant that database gives up


class _Tried:
    """A database tried: its name and file; whether it keeps every invariant, and the kinds it gives
    up, are read when first asked (most databases tried show nothing wrong: no proof is needed)."""

    def __init__(self, name: str, path: Path, oracle: Oracle, *, fair: bool | None = None, keep: bool = False) -> None:
        self.name, self.path, self.keep, self._oracle, self._fair = name, path, keep, oracle, fair
        self._broken: tuple[str, ...] | None = () if fair else None

    @property
    def broken(self) -> tuple[str, ...]:
        """The kinds of invariant it gives up (empty: a fair witness)."""
        if self._broken is None:
            self._broken = self._oracle.broken(self.path)
        return self._broken


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


class Oracle:
    """The oracle for one original database; ``judge`` may be called from several threads."""

    def __init__(self, db_id: str, original: Path, golds: list[str], work: Path, settings: Settings = Settings(), *,
                 profile: inv.Profile | None = None, repeats_allowed: frozenset[str] | None = None) -> None:
        self.db_id, self.original, self.work, self.settings = db_id, original, work, settings
        self.sha256 = hashlib.sha256(original.read_bytes()).hexdigest()
        conn = inv.open_read_only(str(original))
        try:
            self.profile = profile if profile is not None else neighbour_mining.mine(conn)
            self.source = read_original(conn)
        finally:
            conn.close()
        self.golds = sorted(set(golds))
        self.focus = focus_for(self.golds, self.profile)
        self.allowed = frozenset(repeats_allowed) if repeats_allowed is not None else self.focus.grouped
        self.focus = dataclasses.replace(self.focus, grouped=self.allowed)
        self.limits = build_limits()
        self.small = original.stat().st_size <= settings.max_base_bytes
        self._lock = threading.Lock()  # the counters and the memo
        self._shared = threading.Lock()  # the databases shared by the golds (pool, doubled tables)
        self._pool: list[_Tried | None] | None = None
        self._doubled: dict[str, list[_Tried]] = {}
        self._memo: dict[tuple[str, str], Found] = {}
        self._made = 0
        self.built = 0  # databases built (pool, draws, edits, copies)

    def seed(self, *parts: object) -> str:
        return ":".join([SEEDS[self.settings.purpose], self.sha256, *map(str, parts)])

    def _path(self) -> Path:
        with self._lock:
            self._made += 1
            self.built += 1
            self.work.mkdir(parents=True, exist_ok=True)
            return self.work / f"{self.db_id}-{self._made:05d}.sqlite"

    def judge(self, gold: str, near_misses: list[str]) -> dict[str, Found]:
        """Each of ``near_misses`` (paid as ``gold`` on the original and the neighbours) classified."""
        todo = [s for s in dict.fromkeys(near_misses) if (gold, s) not in self._memo]
        if todo:
            found = self._resolve(gold, todo)
            with self._lock:
                self._memo.update({(gold, s): f for s, f in found.items()})
        return {s: self._memo[(gold, s)] for s in near_misses}

    # -- the search --------------------------------------------------------------------------------

    def _resolve(self, gold: str, todo: list[str]) -> dict[str, Found]:
        try:
            original = gold_result(gold, str(self.original), self.limits)
        except sql_guard.QueryFailed:
            return {s: Found(EQUIVALENT, "the gold fails on the original") for s in todo}
        out: dict[str, Found] = {}
        unfair: dict[str, _Tried] = {}  # near miss -> the first database giving up invariants that shows it wrong
        left = list(todo)
        tried = self._tried(gold, todo, original)
        for candidate in tried:
            here = self._judged(gold, candidate.path, original)
            told = [s for s in left if here is not None and self._told(candidate.path, s, here)]
            for s in told:
                if not candidate.broken:
                    out[s] = Found(MISSED, candidate.name, candidate.path)
                elif s not in unfair or len(candidate.broken) < len(unfair[s].broken):
                    unfair[s] = candidate
            left = [s for s in left if s not in out]
            kept = {t.path for t in unfair.values()} | {f.path for f in out.values() if f.path}
            if not candidate.keep and candidate.path not in kept:
                candidate.path.unlink(missing_ok=True)
            if not left:
                break
        tried.close()
        for s in left:
            found = unfair.get(s)
            out[s] = Found(BLOCKED, found.name, None, found.broken) if found else Found(EQUIVALENT)
        for t in unfair.values():
            if not t.keep:
                t.path.unlink(missing_ok=True)
        return out

    def _tried(self, gold: str, todo: list[str], original: gold_results.GoldResult) -> Generator[_Tried, None, None]:
        """The databases tried for ``gold``, in order (module docstring), built as they are asked for."""
        yield from (t for t in self._shared_pool() if t is not None)
        base = self.original if self.small else self._base(gold, original)
        focus = self._gold_focus(gold, todo)
        if base is not None:
            yield from self._edited(base, "boundary", self._boundary(base, gold, todo), self.settings.boundary)
        fuzzers = [Fuzzer(self.source, self.profile, dataclasses.replace(focus, **plan)) for plan in neighbour_search.PLANS]
        for k in range(self.settings.draws):
            drawn = self._draw(fuzzers[k % len(fuzzers)], f"draw {k + 1}", self.seed(_normal(gold), "draw", k))
            if drawn is not None:
                yield drawn
        if base is not None:
            yield from self._edited(base, "edit", edits.targeted(base, gold, self.profile, self.limits),
                                    self.settings.edits)
        if self.small:
            for table in self._read_tables(gold):
                yield from self._doubled_tables(table)
        for kinds in (k for k in DRAWN_LOOSENED if k[0] in loosened.held(self.profile)):
            fuzzer = Fuzzer(self.source, loosened.loosen(self.profile, *kinds), focus)
            for k in range(self.settings.loosened):
                name = f"loosened {' and '.join(kinds)} {k + 1}"
                drawn = self._draw(fuzzer, name, self.seed(_normal(gold), *kinds, k), loose=True)
                if drawn is not None:
                    yield drawn

    def _shared_pool(self) -> list[_Tried | None]:
        with self._shared:
            if self._pool is None:
                fuzzers = [Fuzzer(self.source, self.profile, dataclasses.replace(self.focus, **plan))
                           for plan in neighbour_search.PLANS]
                self._pool = [self._draw(fuzzers[k % len(fuzzers)], f"pool {k + 1}", self.seed("pool", k), keep=True)
                              for k in range(self.settings.pool)]
            return self._pool

    def _draw(self, fuzzer: Fuzzer, name: str, seed: str, *, keep: bool = False, loose: bool = False) -> _Tried | None:
        """One draw; None where it breaks an invariant of its own profile (a loosened one's: the kinds
        it gives up of the whole profile are named)."""
        path = self._path()
        try:
            with _alone():
                refused = fuzzer.build(str(path), Draw(seed))
        except (sqlite3.Error, OSError, ValueError, KeyError, MemoryError):
            refused = ["it could not be built"]
        if refused:
            path.unlink(missing_ok=True)
            return None
        return _Tried(name, path, self, fair=None if loose else True, keep=keep)

    def broken(self, path: Path) -> tuple[str, ...]:
        conn = inv.open_read_only(str(path))
        try:
            return loosened.broken_kinds(self.profile, conn, self.allowed)
        finally:
            conn.close()

    def _edited(self, base: Path, label: str, made: Iterator[tuple[str, edits.Edit]], most: int) -> Iterator[_Tried]:
        for what, edit in itertools.islice(made, most):
            path = self._path()
            shutil.copyfile(base, path)
            with _alone():
                done = edits.apply(path, edit, vacuum=False)
            if done:
                yield _Tried(f"{label}: {what} on {'the original' if base == self.original else base.stem}", path, self)
            else:
                path.unlink(missing_ok=True)

    def _base(self, gold: str, original: gold_results.GoldResult) -> Path | None:
        """The first pool draw the gold may be judged on (a large original is not edited itself)."""
        return next((t.path for t in self._shared_pool() if t is not None and self._judged(gold, t.path, original)),
                    None)

    def _literals(self, gold: str, todo: list[str]) -> tuple[set[str], dict[str, list]]:
        """The profile's column names, and the literals the gold and ``todo`` compare each with (each once, in order)."""
        names = {c.name.lower() for t in self.profile.tables for c in t.columns}
        literals: dict[str, list] = {}
        for text in [gold, *todo]:
            for name, found in nv.literals_by_column(text, names).items():
                bucket = literals.setdefault(name, [])
                bucket.extend(v for v in found if v not in bucket)
        return names, literals

    def _boundary(self, base: Path, gold: str, todo: list[str]) -> Iterator[tuple[str, edits.Edit]]:
        names, literals = self._literals(gold, todo)
        bounds = nv.between_bounds(gold, names)
        read = {t.lower() for text in [gold, *todo] for t in self._read_tables(text)}
        columns = [c for c in edits.free_columns(self.profile) if c[0].lower() in read]  # a table no query reads changes none
        conn = inv.open_read_only(str(base))
        try:
            yield from edits.boundary(conn, columns, literals, bounds, nv.comparisons_by_column(gold, names))
        finally:
            conn.close()

    def _gold_focus(self, gold: str, todo: list[str]) -> Focus:
        """What the gold and its near misses ask of a database: their literals and sorted columns, the
        gold's LIKE patterns and BETWEEN bounds (neighbour_search.focus, for several near misses)."""
        names, literals = self._literals(gold, todo)
        sort = set().union(*(nv.sort_columns(t, names) for t in [gold, *todo]))
        extreme = set().union(*(nv.extreme_columns(t, names) for t in [gold, *todo]))
        return Focus(literals, nv.literals_by_column(gold, names, patterns=True), self.allowed, frozenset(sort),
                     frozenset(extreme), nv.between_bounds(gold, names))

    def _read_tables(self, gold: str) -> list[str]:
        words = {w.lower().strip('"`[]') for w in gold.replace(",", " ").replace("(", " ").replace(")", " ").split()}
        return [t.name for t in self.profile.tables if t.name.lower() in words]

    def _doubled_tables(self, table: str) -> list[_Tried]:
        """``doubled T``, ``varied T (lower)``, ``varied T (higher)`` and ``doubled T (keys only)``
        (harness.audit.witnesses: the last repeats every value the declared keys allow), built once."""
        with self._shared:
            if table not in self._doubled:
                facts = self.profile.table(table)
                keys = witnesses.declared_keys(self.original, table)
                fresh = keys | {c.name.lower() for c in facts.columns if c.unique or c.near_unique}
                shifted = frozenset(witnesses.plain_columns(self.original, table) - fresh)
                made = []
                for name, new, shift, lower in ((f"doubled {table}", fresh, frozenset(), False),
                                                (f"varied {table} (lower)", fresh, shifted, True),
                                                (f"varied {table} (higher)", fresh, shifted, False),
                                                (f"doubled {table} (keys only)", keys, frozenset(), False)):
                    path = self._path()
                    try:
                        with _alone():
                            witnesses.doubled(self.original, path, table, new, shift, lower)
                    except (sqlite3.Error, OSError, ValueError):
                        continue
                    made.append(_Tried(name, path, self, keep=True))
                self._doubled[table] = made
            return self._doubled[table]

    def _judged(self, gold: str, path: Path, original: gold_results.GoldResult) -> gold_results.GoldResult | None:
        """The gold's result on ``path`` where it may be judged there (its presupposition holds), else None."""
        try:
            here = gold_result(gold, str(path), self.limits)
        except sql_guard.QueryFailed:
            return None
        if neighbour_proof.judges(original, here):
            return None
        conn = inv.open_read_only(str(path))
        try:
            return None if neighbour_proof.repeated_identity(conn, self.profile, gold) else here
        finally:
            conn.close()

    def _told(self, path: Path, sql: str, here: gold_results.GoldResult) -> bool:
        outcome = judge(str(path), sql, here, self.limits, neighbour=True, max_steps=BUILD_STEPS).outcome
        return outcome in neighbour_search.DECISIVE


def _alone() -> _Alone:
    return _Alone()


class _Alone:
    """No query of this process's bundle modules runs while a database is built: SQLite's heap
    ceiling is the process's (harness.audit.run.heap_alone, for the oracle's own queries)."""

    def __enter__(self) -> None:
        sql_guard.TURNS.enter_alone()

    def __exit__(self, *exc: object) -> None:
        sql_guard.TURNS.leave_alone()


Factory = Callable[[str, Path, list[str], Path], Oracle]


def factory(settings: Settings, index: dict | None = None) -> Factory:
    """Oracles that take each database's invariants from a bundle's ``index`` where it holds them (the
    profile its neighbours keep, the columns its golds may repeat), else mine them."""
    held = (index or {}).get("invariants") or {}

    def make(db_id: str, original: Path, golds: list[str], work: Path) -> Oracle:
        entry = held.get(db_id)
        if entry is None:
            return Oracle(db_id, original, golds, work, settings)
        return Oracle(db_id, original, golds, work, settings, profile=inv.from_json(entry["profile"]),
                      repeats_allowed=frozenset(entry.get("repeats_allowed", ())))
    return make
