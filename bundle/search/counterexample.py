"""The counterexample search: more databases for one (gold, prediction), until one tells them apart.

A prediction that matches its gold on the original database and on the distilled neighbours may
still be wrong where no neighbour looks: a few databases chosen in advance for every gold cannot
see every wrong answer. For such a match the grader (and the reward, when ``search`` says so)
judges it on further databases drawn for that gold, one at a time (``search``):

* they are drawn by ``neighbours.fuzz`` from the original, with the gold's literals as special
  values (texts around its LIKE patterns), its grouped columns, no NULL added where it sorts and
  no tie where it takes a ``min`` or ``max``; each seed is the database, the gold and the
  attempt's number. They depend on nothing the prediction says, so they are built once per gold
  and every prediction of that gold is only run on them (``search.cache``);
* a prediction that adds to the gold's focus (a literal the gold lacks, a column only it sorts by
  or takes an extreme of) is judged on a third of them fewer, and then on databases drawn with
  its additions too, seeded by the gold and those additions (not the prediction's text), and kept
  the same way for any prediction adding the same. A gold's database that is less fair to the
  prediction than one drawn for it (a NULL in a column only the prediction sorts by, a tie in a
  column only it takes an extreme of) is skipped, and one more database of its own replaces it;
* a database is used only when it keeps every invariant of the original's data
  (``neighbours.proof``), the gold runs on it, and what the gold presupposes holds there
  (``neighbours.proof.judges``: rows where the original gives it rows, no row of NULLs, no NULL
  sort key, unless the original has; ``repeated_identity``: no repeated name where the gold lists
  by names); an attempt that gives no such database is spent all the same;
* the prediction is judged on it as on a neighbour (the whole tie at a LIMIT matches too). The
  first database where the rows differ, or where the prediction fails or is over a cap, decides:
  the verdict names it (``search database 3 of concert_singer``);
* the work is counted as if every database were drawn for this prediction: at most
  ``search_databases`` databases, and ``search_steps`` SQLite VM steps for the gold's runs (the
  steps it took there, charged again on each search) and the prediction's together. When the
  budget ends, the match stands; a prediction stopped by the search's budget rather than its own
  is never a mismatch. The wall-clock guard firing is unscored, as everywhere.

So the verdict is a pure function of (completion, row, bundle, settings): the databases a search
uses are the same whether it builds them or finds them built, in any order of predictions. Where
``SPIDER_SCORING_SEARCH_CACHE`` names a folder and the task carries a fingerprint, the databases
built are kept there for later processes (``search.disk``), which read them there instead of drawing them.
A prediction whose text is the gold's (whitespace aside) is not searched: it cannot differ.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import threading
from typing import NamedTuple

from ..contract.limits import Limits
from ..neighbours import invariants as inv
from ..neighbours import proof as neighbour_proof
from ..neighbours import values as nv
from ..neighbours.fuzz import Fuzzer
from ..neighbours.source import Draw, Focus, Original
from ..sql import gold_results
from ..sql import guard as sql_guard
from ..sql import verdict as verify_mod
from . import cache
from . import disk as search_disk

SearchUnavailable = cache.SearchUnavailable  # no writable temporary folder: an infrastructure fault

# Attempts cycle through these: small databases first (cheap, and edge cases show there), then larger.
PLANS: tuple[dict, ...] = (
    {"max_rows": 8, "scale": (0.2, 0.8)},
    {"max_rows": 16, "scale": (0.3, 1.0), "special_share": 0.5, "distinct_sort": True, "twins": True},
    {"max_rows": 30, "scale": (0.5, 1.5), "null_share": 0.3},
    {"max_rows": 60, "scale": (0.8, 2.0), "twins": True},
)
DECISIVE = (verify_mod.MISMATCH, verify_mod.PREDICTION_ERROR, verify_mod.PREDICTION_OVER_CAP,
            verify_mod.PREDICTION_OVER_BUDGET)  # the answer's own fault on a fair database: it decides
OWN_SHARE = 3  # a prediction that adds to the gold's focus has this share of its databases drawn with its additions


@dataclasses.dataclass(frozen=True)
class Task:
    """One row's search: the original, its invariants and sample, and the gold."""

    db_id: str
    sha256: str  # the original's: part of every seed
    gold: str
    profile: inv.Profile
    source: Original
    fingerprint: str = ""  # ``search.disk.fingerprint``: the bundle and the original (empty: nothing kept on disk)


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


def seed(task: Task, sql: str, attempt: int) -> str:
    """A seed of the database, the gold, a prediction's text and an attempt's number (the build's
    separation draws by it: ``harness.prepare.neighbours.separate``)."""
    return f"spider-scoring-search:{task.sha256}:{_normal(task.gold)}:{_normal(sql)}:{attempt}"


def focus(task: Task, sql: str) -> Focus:
    """What the pair asks of a database: both queries' literals and sorted columns, the gold's groups
    and BETWEEN bounds (a bound the prediction compares with is no more held than the gold's).
    ``focus(task, task.gold)`` is the gold's alone, which its own databases are drawn with."""
    names = {c.name.lower() for t in task.profile.tables for c in t.columns}
    links = {(k.child.lower(), c.lower()) for k in task.profile.links for c in k.child_columns}
    schema = {t.name.lower(): tuple(c.name.lower() for c in t.columns) for t in task.profile.tables}
    literals: dict[str, list] = {}
    for text in (task.gold, sql):
        for name, found in nv.literals_by_column(text, names).items():
            bucket = literals.setdefault(name, [])
            bucket.extend(v for v in found if v not in bucket)
    return Focus(literals, nv.literals_by_column(task.gold, names, patterns=True),
                 frozenset(nv.grouped_columns(task.gold, names, links, schema)),
                 frozenset(nv.sort_columns(task.gold, names) | nv.sort_columns(sql, names)),
                 frozenset(nv.extreme_columns(task.gold, names) | nv.extreme_columns(sql, names)),
                 nv.between_bounds(task.gold, names))


class Own(NamedTuple):
    """What a prediction adds to its gold's focus, in one order whatever the prediction's text:
    literals the gold lacks ((column, values) pairs), columns only it sorts by, columns only it
    takes a ``min`` or ``max`` of."""

    literals: tuple[tuple[str, tuple], ...]
    sort_columns: tuple[str, ...]
    distinct: tuple[str, ...]


def _in_order(value: object) -> tuple[str, str]:
    return type(value).__name__, repr(value)


def own(task: Task, sql: str, gold: Focus) -> Own | None:
    """What ``sql`` adds to the gold's focus ``gold`` (``focus(task, task.gold)``), or None: nothing."""
    full = focus(task, sql)
    literals = []
    for name in sorted(full.literals):
        held = gold.literals.get(name, ())
        added = [v for v in full.literals[name] if v not in held]
        if added:
            literals.append((name, tuple(sorted(added, key=_in_order))))
    found = Own(tuple(literals), tuple(sorted(full.sort_columns - gold.sort_columns)),
                tuple(sorted(full.distinct - gold.distinct)))
    return found if any(found) else None


def with_own(gold: Focus, added: Own) -> Focus:
    """The gold's focus with a prediction's additions: the focus its own databases are drawn with."""
    literals = {name: list(values) for name, values in gold.literals.items()}
    for name, values in added.literals:
        literals.setdefault(name, []).extend(values)
    return dataclasses.replace(gold, literals=literals, sort_columns=gold.sort_columns | set(added.sort_columns),
                               distinct=gold.distinct | set(added.distinct))


def _key(task: Task, limits: Limits, added: Own | None) -> tuple:
    """A set's key: the original (its invariants and sample by identity), the gold, the settings and
    what a prediction adds (None: the gold's own set)."""
    return (id(task.profile), id(task.source), task.sha256, _normal(task.gold), limits, added)


def _set_seed(task: Task, added: Own | None, attempt: int) -> str:
    if added is None:
        return f"spider-scoring-search-gold:{task.sha256}:{_normal(task.gold)}:{attempt}"
    return f"spider-scoring-search-own:{task.sha256}:{_normal(task.gold)}:{added!r}:{attempt}"


def search(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits,
           store: cache.Store | None = None) -> verify_mod.Searched:
    """Judge (gold, ``sql``) on the gold's search databases, then on those of what ``sql`` adds to
    it, until one tells them apart or the budget ends (module docstring). ``store``: where the
    databases are kept (default: the process's)."""
    if _normal(sql) == _normal(task.gold):
        return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", 0, 0)
    store = cache.STORE if store is None else store
    gold = focus(task, task.gold)
    added = own(task, sql, gold)
    extra = max(1, limits.search_databases // OWN_SHARE) if added is not None else 0
    walk = _Walk(task, sql, original, limits, added)
    with store.lease(_key(task, limits, None), (task.profile, task.source)) as shared:
        found = walk.run(store, shared, gold, None, limits.search_databases - extra)
    if found is None and added is not None and walk.going:
        with store.lease(_key(task, limits, added), (task.profile, task.source)) as mine:
            found = walk.run(store, mine, with_own(gold, added), added, extra + walk.skipped)
    return found or verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", walk.tried, walk.steps)


def prebuild(task: Task, original: gold_results.GoldResult, limits: Limits, store: cache.Store | None = None) -> int:
    """Build the gold's own set (every database a search of one of its predictions may use from it)
    ahead of any prediction, as a search would: with a fingerprint and ``SPIDER_SCORING_SEARCH_CACHE``,
    they are kept on disk for the processes that grade later. The databases built or read. A database
    whose gold run hits the wall-clock guard ends it (the search would be unscored there)."""
    store = cache.STORE if store is None else store
    build = _Builder(task, original, limits, store, focus(task, task.gold), None)
    with store.lease(_key(task, limits, None), (task.profile, task.source)) as shared:
        for i in range(limits.search_databases):
            try:
                shared.database(i, build)
            except _Unscored:
                return i
    return limits.search_databases


class _Unscored(Exception):
    """The gold's run on a database being built hit the wall-clock guard or a broken file."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome, self.detail = outcome, detail


class _Walk:
    """One prediction's way through the sets: attempts and steps counted across them."""

    def __init__(self, task: Task, sql: str, original: gold_results.GoldResult, limits: Limits,
                 added: Own | None) -> None:
        self.task, self.sql, self.original, self.limits, self.added = task, sql, original, limits, added
        self.tried = self.steps = self.skipped = 0
        self.going = True  # False once the budget ended

    def run(self, store: cache.Store, found: cache.SearchSet, drawn: Focus, added: Own | None,
            attempts: int) -> verify_mod.Searched | None:
        """The first ``attempts`` databases of ``found`` (drawn with ``drawn``); a deciding database's
        Searched, or None."""
        limits = self.limits
        build = _Builder(self.task, self.original, limits, store, drawn, added)
        for i in range(attempts):
            if self.tried >= limits.search_databases or self.steps >= limits.search_steps:
                self.going = False
                return None
            name = f"search database {self.tried + 1} of {self.task.db_id}"
            try:
                database = found.database(i, build)
            except _Unscored as failed:
                self.tried += 1
                return verify_mod.Searched(name, failed.outcome, None, f"on {name}: {failed.detail}", self.tried,
                                           self.steps)
            if database is not None and added is None and self.added is not None and \
                    not _fair(database, self.task, drawn, self.added):
                self.skipped += 1  # drawn for the gold alone, it would judge what the prediction adds unfairly
                continue
            self.tried += 1
            if database is None:
                continue  # it breaks an invariant, or the gold cannot judge it: the attempt is spent
            outcome, detail, score, used = self._judge(database)
            self.steps += used
            if outcome in DECISIVE or outcome in verify_mod.UNSCORED:
                return verify_mod.Searched(name, outcome, score, f"on {name}: {detail}", self.tried, self.steps)
            if outcome != verify_mod.MATCH:
                self.going = False  # the search's own budget ended inside this database: the match stands
                return None
        return None

    def _judge(self, database: cache.SearchDatabase) -> tuple[str, str, float | None, int]:
        """(outcome, detail, score, steps used) on one database. The gold's steps there count as if it
        ran again; stopped by what the search has left (rather than by the prediction's own budget),
        the outcome is ``_BUDGET_ENDED``."""
        limits, gold = self.limits, database.gold
        left = limits.search_steps - self.steps
        if gold is None or gold.steps > left:
            return _BUDGET_ENDED, "", 1.0, left
        cap = max(left - gold.steps, 1)
        judged = verify_mod.judge(database.path, self.sql, gold, limits, neighbour=True, max_steps=cap)
        used = gold.steps + judged.steps
        if judged.outcome == verify_mod.PREDICTION_OVER_BUDGET and cap < limits.budget_steps(gold.steps):
            return _BUDGET_ENDED, "", 1.0, used  # stopped by the search's budget, not its own
        return judged.outcome, judged.detail, judged.score, used


_BUDGET_ENDED = "search budget ended"


class _Builder:
    """Builds the databases of one set, as ``SearchSet.database`` asks (one at a time per set)."""

    def __init__(self, task: Task, original: gold_results.GoldResult, limits: Limits, store: cache.Store,
                 drawn: Focus, added: Own | None) -> None:
        self.task, self.original, self.limits, self.store = task, original, limits, store
        self.drawn, self.added = drawn, added
        self.fuzzers: dict[int, Fuzzer] = {}
        self.listed_by = neighbour_proof.listed_by(task.profile, task.gold)  # names the gold lists by
        self.disk = search_disk.from_env() if task.fingerprint else None
        self.disk_name = search_disk.set_name((task.fingerprint, task.gold, limits, added)) if self.disk else ""

    def __call__(self, attempt: int) -> cache.SearchDatabase | None:
        """Database ``attempt`` of the set, with the gold's result there; None where the gold may not
        be judged on it. The gold may take the search's whole budget there (each search charges what
        it took against what it has left)."""
        task = self.task
        plan = attempt % len(PLANS)
        if self.disk is not None:
            found = self.disk.load(self.disk_name, attempt, lambda record, kept: _entry(record, kept, plan))
            if found is not search_disk.MISSING:
                return found  # type: ignore[return-value]
        text = _set_seed(task, self.added, attempt)
        path = self.store.path(text)
        fuzzer = self.fuzzers.get(plan)
        if fuzzer is None:
            fuzzer = self.fuzzers[plan] = Fuzzer(task.source, task.profile, dataclasses.replace(self.drawn, **PLANS[plan]))
        kept = None
        try:
            if not self._write(fuzzer, path, text):
                kept = self._judged(path, plan)
            if self.disk is not None:
                self._keep(attempt, kept)
        finally:
            if kept is None or kept.gold is None:
                cache.remove(path)
        return kept

    def _keep(self, attempt: int, kept: cache.SearchDatabase | None) -> None:
        """Keep what attempt ``attempt`` gave in the disk folder (``search.disk``)."""
        assert self.disk is not None
        if kept is None:
            self.disk.save(self.disk_name, attempt, {"kind": "none"}, None)
        elif kept.gold is None:
            self.disk.save(self.disk_name, attempt, {"kind": "over_budget"}, None)
        else:
            self.disk.save(self.disk_name, attempt, {"kind": "kept", "gold": gold_results.to_json(kept.gold)}, kept.path)

    def _write(self, fuzzer: Fuzzer, path: str, text: str) -> list[str]:
        """Build the file (``Fuzzer.build``); where the folder is full, once more after the store let
        go of every set no search holds; then an infrastructure error, never a score."""
        for first in (True, False):
            try:
                return fuzzer.build(path, Draw(text))
            except (sqlite3.OperationalError, OSError) as exc:
                cache.remove(f"{path}.{os.getpid()}.tmp")
                if not first:
                    raise cache.SearchUnavailable(
                        f"the counterexample search cannot write its databases in {self.store.folder()} ({exc}): "
                        "free space there, set TMPDIR to a roomier folder, or turn the search off "
                        "(SPIDER_SCORING_SEARCH=off)") from None
                self.store.make_room()
        return []  # not reached: the loop returns or raises

    def _judged(self, path: str, plan: int) -> cache.SearchDatabase | None:
        task, limits = self.task, self.limits
        try:
            gold = verify_mod.gold_result(task.gold, path, limits.replace(gold_max_steps=limits.search_steps))
        except sql_guard.QueryFailed as failed:
            if failed.kind in (sql_guard.WALL_GUARD, sql_guard.INFRASTRUCTURE):
                outcome = verify_mod.INFRASTRUCTURE_TIMEOUT if failed.kind == sql_guard.WALL_GUARD else \
                    verify_mod.INFRASTRUCTURE_ERROR
                raise _Unscored(outcome, f"the gold: {failed.detail}") from None  # never kept: it may differ next time
            if failed.kind == sql_guard.OVER_BUDGET:
                return cache.SearchDatabase(path, None, plan)  # over the whole budget: every search ends there
            return None  # the gold fails here (a value it cannot handle): this database cannot judge it
        if neighbour_proof.judges(self.original, gold):
            return None  # a question that does not arise here: nothing matches, or "the lowest" is unknown
        if self.listed_by:  # no name the gold lists by: no need to open the file
            conn = inv.open_read_only(path)
            try:
                if neighbour_proof.repeated_identity(conn, task.profile, task.gold, self.listed_by):
                    return None  # the gold lists by a name that repeats here: it would be judged, not the answer
            finally:
                conn.close()
        return cache.SearchDatabase(path, gold, plan)


def _entry(record: dict, path: str | None, plan: int) -> cache.SearchDatabase | None:
    """What a kept attempt gave (``_Builder._keep``): its database, read where the disk folder keeps
    it (never removed by the store), or None."""
    kind = record["kind"]
    if kind == "none":
        return None
    if kind == "over_budget":
        return cache.SearchDatabase("", None, plan)
    gold = gold_results.from_json(record["gold"]) if kind == "kept" and path is not None else None
    if gold is None:
        raise ValueError(f"a kept search database of an unknown kind {kind!r}")
    return cache.SearchDatabase(path, gold, plan, owned=False)  # type: ignore[arg-type]


def _fair(database: cache.SearchDatabase, task: Task, drawn: Focus, added: Own) -> bool:
    """Whether a database drawn for the gold alone is as fair to a prediction as one drawn with its
    additions: no NULL in a column only the prediction sorts by (distinct there too in a plan that
    draws sort keys distinct), no repeated value in a column only it takes an extreme of, where the
    generator would have kept it so (``neighbour_plan.Plan._column``)."""
    distinct_sort = bool(PLANS[database.plan].get("distinct_sort"))
    for table in task.profile.tables:
        linked = {c.lower() for k in task.profile.links_of(table.name) for c in k.child_columns}
        key = {c.lower() for c in table.key}
        for col in table.columns:
            name = col.name.lower()
            sort, extreme = name in added.sort_columns, name in added.distinct
            if not (sort or extreme):
                continue
            grouped = name in drawn.grouped and name not in key
            nulls, repeats = _column_facts(database, table.name, col.name)
            if sort and nulls:
                return False
            if repeats and name not in linked and ((extreme and not grouped) or (sort and distinct_sort)):
                return False
    return True


_facts_lock = threading.Lock()


def _column_facts(database: cache.SearchDatabase, table: str, column: str) -> tuple[bool, bool]:
    """(a NULL is there, a value repeats) in ``table.column`` of the database, read once."""
    found = database.facts.get((table, column))
    if found is None:
        conn = inv.open_read_only(database.path)
        try:
            t, c = inv.quote(table), inv.quote(column)
            nulls, repeats = conn.execute(f"SELECT count(*) - count({c}), count({c}) - count(DISTINCT {c}) "
                                          f"FROM {t}").fetchone()
        finally:
            conn.close()
        found = (bool(nulls), bool(repeats))
        with _facts_lock:
            database.facts[(table, column)] = found
    return found  # type: ignore[return-value]


_MEMO_MAX = 8_192
_memo: dict[tuple, tuple[Task, verify_mod.Searched]] = {}


def remembered(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits) -> verify_mod.Searched:
    """``search``, remembered per (database, gold, prediction text, limits): a pure function, so a
    GRPO group's repeated answers and a grader's repeated rows are judged once per process."""
    key = (id(task.profile), id(task.source), task.sha256, task.gold, _normal(sql), limits)
    found = _memo.get(key)
    if found is None:
        found = (task, search(task, sql, original, limits))  # the task keeps the identities of the key alive
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = found
    return found[1]


def forget(databases: bool = True) -> None:
    """Forget the searches remembered, and remove the databases kept unless ``databases`` is False
    (a benchmark times a cold search, or a new prediction of a gold searched before)."""
    _memo.clear()
    if databases:
        cache.STORE.forget()
