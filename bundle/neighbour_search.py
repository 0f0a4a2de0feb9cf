"""The counterexample search: more neighbour databases for one (gold, prediction), until one tells them apart.

A prediction that matches its gold on the original database and on the distilled neighbours may
still be wrong where no neighbour looks: a few databases chosen in advance for every gold cannot
see every wrong answer. For such a match the grader (and the reward, when ``search`` says so)
generates further databases for that very pair, one at a time (``search``):

* each is drawn by ``neighbour_fuzz`` from the original, with the gold's and the prediction's
  literals as special values (texts around LIKE patterns only for the gold's), the gold's grouped
  columns, no NULL added where either sorts and no tie where either takes a ``min`` or ``max``;
  its seed is the database, the gold and the prediction's text: the verdict stays a pure function
  of (completion, row, bundle, settings);
* it is used only when it keeps every invariant of the original's data (``neighbour_proof``), the
  gold runs on it, and what the gold presupposes holds there (``neighbour_proof.judges``: rows
  where the original gives it rows, no row of NULLs, no NULL sort key, unless the original has;
  ``repeated_identity``: no repeated name where the gold lists by names);
* the prediction is judged on it as on a neighbour (the whole tie at a LIMIT matches too). The
  first database where the rows differ, or where the prediction fails or is over a cap, decides:
  the verdict names it (``search database 3 of concert_singer``);
* the work is counted: at most ``search_databases`` databases, and ``search_steps`` SQLite VM
  steps for the gold's and the prediction's runs together, each database's generation charged
  ``BUILD_STEPS`` besides. When the budget ends, the match stands;
  a prediction stopped by the search's budget rather than its own is never a mismatch. The
  wall-clock guard firing is unscored, as everywhere.

A prediction whose text is the gold's (whitespace aside) is not searched: it cannot differ.
The databases are written to a private temporary folder (one file per thread and seed, removed
after use, with the connection that read it; the folder at exit, or by a later process when this
one was killed: ``search_folder``); where no folder is writable the search is an infrastructure
error, never a score.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading

try:
    from . import gold_results, neighbour_proof, search_folder, sql_guard
    from . import neighbour_invariants as inv
    from . import neighbour_values as nv
    from . import verify as verify_mod
    from .neighbour_fuzz import Fuzzer
    from .neighbour_source import Draw, Focus, Original
    from .scoring_errors import ScoringInfrastructureError
    from .scoring_limits import Limits
except ImportError:  # run as a standalone file
    import gold_results  # type: ignore[no-redef]
    import neighbour_invariants as inv  # type: ignore[no-redef]
    import neighbour_proof  # type: ignore[no-redef]
    import neighbour_values as nv  # type: ignore[no-redef]
    import search_folder  # type: ignore[no-redef]
    import sql_guard  # type: ignore[no-redef]
    import verify as verify_mod  # type: ignore[no-redef]
    from neighbour_fuzz import Fuzzer  # type: ignore[no-redef]
    from neighbour_source import Draw, Focus, Original  # type: ignore[no-redef]
    from scoring_errors import ScoringInfrastructureError  # type: ignore[no-redef]
    from scoring_limits import Limits  # type: ignore[no-redef]

# Attempts cycle through these: small databases first (cheap, and edge cases show there), then larger.
PLANS: tuple[dict, ...] = (
    {"max_rows": 8, "scale": (0.2, 0.8)},
    {"max_rows": 16, "scale": (0.3, 1.0), "special_share": 0.5, "distinct_sort": True, "twins": True},
    {"max_rows": 30, "scale": (0.5, 1.5), "null_share": 0.3},
    {"max_rows": 60, "scale": (0.8, 2.0), "twins": True},
)
# Generating a database and checking its invariants is work no query counts (10 to 40 ms of CPU on
# Spider's databases, 2-core machine, 2026-12-02): charged to the search's budget like a query's work.
BUILD_STEPS = 100_000
DECISIVE = (verify_mod.MISMATCH, verify_mod.PREDICTION_ERROR, verify_mod.PREDICTION_OVER_CAP,
            verify_mod.PREDICTION_OVER_BUDGET)  # the answer's own fault on a fair database: it decides


@dataclasses.dataclass(frozen=True)
class Task:
    """One row's search: the original, its invariants and sample, and the gold."""

    db_id: str
    sha256: str  # the original's: part of every seed
    gold: str
    profile: inv.Profile
    source: Original


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


def seed(task: Task, sql: str, attempt: int) -> str:
    """The seed of one attempt: the database, the gold, the prediction's text and the attempt's number."""
    return f"spider-scoring-search:{task.sha256}:{_normal(task.gold)}:{_normal(sql)}:{attempt}"


def focus(task: Task, sql: str) -> Focus:
    """What the pair asks of a database: both queries' literals and sorted columns, the gold's groups
    and BETWEEN bounds (a bound the prediction compares with is no more held than the gold's)."""
    names = {c.name.lower() for t in task.profile.tables for c in t.columns}
    links = {c.lower() for k in task.profile.links for c in k.child_columns}
    literals: dict[str, list] = {}
    for text in (task.gold, sql):
        for name, found in nv.literals_by_column(text, names).items():
            bucket = literals.setdefault(name, [])
            bucket.extend(v for v in found if v not in bucket)
    return Focus(literals, nv.literals_by_column(task.gold, names, patterns=True),
                 frozenset(nv.grouped_columns(task.gold, names, links)),
                 frozenset(nv.sort_columns(task.gold, names) | nv.sort_columns(sql, names)),
                 frozenset(nv.extreme_columns(task.gold, names) | nv.extreme_columns(sql, names)),
                 nv.between_bounds(task.gold, names))


def search(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits) -> verify_mod.Searched:
    """Generate databases for (gold, ``sql``) until one tells them apart or the budget ends (module docstring)."""
    if _normal(sql) == _normal(task.gold):
        return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", 0, 0)
    base = focus(task, sql)
    fuzzers = [Fuzzer(task.source, task.profile, dataclasses.replace(base, **plan)) for plan in PLANS]
    steps = tried = 0
    while tried < limits.search_databases and steps + BUILD_STEPS < limits.search_steps:
        name = f"search database {tried + 1} of {task.db_id}"
        text = seed(task, sql, tried)
        path = os.path.join(_folder(), f"{threading.get_ident()}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.sqlite")
        steps += BUILD_STEPS
        try:
            refused = fuzzers[tried % len(fuzzers)].build(path, Draw(text))
            there = None if refused else _judge(task, path, sql, original, limits, limits.search_steps - steps)
        finally:
            sql_guard.forget_path(path)  # its connection, page cache and prepared statements go with it
            _remove(path)
        tried += 1
        if there is None:
            continue  # it breaks an invariant, or the gold cannot judge it: the attempt is spent
        outcome, detail, score, used = there
        steps += used
        if outcome in DECISIVE or outcome in verify_mod.UNSCORED:
            return verify_mod.Searched(name, outcome, score, f"on {name}: {detail}", tried, steps)
        if outcome != verify_mod.MATCH:
            break  # the search's own budget ended inside this database: the match stands
    return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", tried, steps)


_BUDGET_ENDED = "search budget ended"


def _judge(task: Task, path: str, sql: str, original: gold_results.GoldResult, limits: Limits,
           left: int) -> tuple[str, str, float | None, int] | None:
    """(outcome, detail, score, steps used) on one database; None where the gold cannot judge it.

    The gold's runs and the prediction's may take ``left`` steps together; stopped by that (rather
    than by the prediction's own budget), the outcome is ``_BUDGET_ENDED``. The wall-clock guard
    or a broken file is unscored, as everywhere.
    """
    try:
        gold = verify_mod.gold_result(task.gold, path, limits.replace(gold_max_steps=max(left, 1)))
    except sql_guard.QueryFailed as failed:
        if failed.kind in (sql_guard.WALL_GUARD, sql_guard.INFRASTRUCTURE):
            outcome = verify_mod.INFRASTRUCTURE_TIMEOUT if failed.kind == sql_guard.WALL_GUARD else \
                verify_mod.INFRASTRUCTURE_ERROR
            return outcome, f"the gold: {failed.detail}", None, failed.steps
        if failed.kind == sql_guard.OVER_BUDGET:
            return _BUDGET_ENDED, "", 1.0, left
        return None  # the gold fails here (a value it cannot handle): this database cannot judge it
    if neighbour_proof.judges(original, gold):
        return None  # a question that does not arise here: nothing matches, or "the lowest" is unknown
    conn = inv.open_read_only(path)
    try:
        if neighbour_proof.repeated_identity(conn, task.profile, task.gold):
            return None  # the gold lists by a name that repeats here: it would be judged, not the answer
    finally:
        conn.close()
    cap = max(left - gold.steps, 1)
    judged = verify_mod.judge(path, sql, gold, limits, neighbour=True, max_steps=cap)
    used = gold.steps + judged.steps
    if judged.outcome == verify_mod.PREDICTION_OVER_BUDGET and cap < limits.budget_steps(gold.steps):
        return _BUDGET_ENDED, "", 1.0, used  # stopped by the search's budget, not its own
    return judged.outcome, judged.detail, judged.score, used


_MEMO_MAX = 8_192
_memo: dict[tuple, verify_mod.Searched] = {}


def remembered(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits) -> verify_mod.Searched:
    """``search``, remembered per (database, gold, prediction text, limits): a pure function, so a
    GRPO group's repeated answers and a grader's repeated rows search once per process."""
    key = (task.sha256, task.gold, _normal(sql), limits)
    found = _memo.get(key)
    if found is None:
        found = search(task, sql, original, limits)
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = found
    return found


def forget() -> None:
    """Forget the searches remembered (a benchmark times the search itself)."""
    _memo.clear()


def _folder() -> str:
    """The process's private folder for search databases (``search_folder``)."""
    try:
        return search_folder.folder()
    except search_folder.FolderUnavailable as exc:
        raise SearchUnavailable(f"the counterexample search needs a writable temporary folder ({exc}): set "
                                "TMPDIR to one, or turn the search off (SPIDER_SCORING_SEARCH=off)") from None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # never written (the build failed before the rename): nothing to remove


class SearchUnavailable(ScoringInfrastructureError):
    """No temporary folder can hold the search's databases: an infrastructure fault, never a score."""
