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
  steps for the gold's and the prediction's runs together. When the budget ends, the match stands.

A prediction whose text is the gold's (whitespace aside) is not searched: it cannot differ.
The databases are written to a private temporary folder (one file per thread and seed, removed
after use; the folder at exit); where no folder is writable the search is an infrastructure error,
never a score.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading

try:
    from . import gold_results, neighbour_proof, sql_guard
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
    {"max_rows": 60, "scale": (0.8, 2.0)},
)
DECISIVE = (verify_mod.MISMATCH, verify_mod.PREDICTION_ERROR, verify_mod.PREDICTION_OVER_CAP,
            verify_mod.PREDICTION_OVER_BUDGET)


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
    """What the pair asks of a database: both queries' literals and sorted columns, the gold's groups."""
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
                 frozenset(nv.extreme_columns(task.gold, names) | nv.extreme_columns(sql, names)))


def search(task: Task, sql: str, original: gold_results.GoldResult, limits: Limits) -> verify_mod.Searched:
    """Generate databases for (gold, ``sql``) until one tells them apart or the budget ends (module docstring)."""
    if _normal(sql) == _normal(task.gold):
        return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", 0, 0)
    base = focus(task, sql)
    fuzzers = [Fuzzer(task.source, task.profile, dataclasses.replace(base, **plan)) for plan in PLANS]
    steps = 0
    for attempt in range(int(limits.search_databases)):
        name = f"search database {attempt + 1} of {task.db_id}"
        text = seed(task, sql, attempt)
        path = os.path.join(_folder(), f"{threading.get_ident()}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.sqlite")
        try:
            if fuzzers[attempt % len(fuzzers)].build(path, Draw(text)):
                continue  # it breaks an invariant: never used (neighbour_proof), the attempt is spent
            left = int(limits.search_steps) - steps
            there = _judge(task, path, sql, original, limits, left)
        finally:
            _remove(path)
        if there is None:
            continue
        judged, gold_steps = there
        steps += gold_steps + judged.steps
        if judged.outcome == verify_mod.MATCH:
            if steps >= limits.search_steps:
                break
            continue
        stopped_by_search = judged.outcome == verify_mod.PREDICTION_OVER_BUDGET and \
            left - gold_steps < limits.budget_steps(gold_steps)
        if judged.outcome in DECISIVE and not stopped_by_search:
            return verify_mod.Searched(name, judged.outcome, judged.score, f"on {name}: {judged.detail}",
                                       attempt + 1, steps)
        if judged.outcome in verify_mod.UNSCORED:
            return verify_mod.Searched(name, judged.outcome, None, f"on {name}: {judged.detail}", attempt + 1, steps)
        break
    return verify_mod.Searched(None, verify_mod.MATCH, 1.0, "", min(attempt + 1, int(limits.search_databases)), steps)


def _judge(task: Task, path: str, sql: str, original: gold_results.GoldResult, limits: Limits,
           left: int) -> tuple[verify_mod.Judged, int] | None:
    """The prediction judged on one database and the gold's steps there; None where the gold cannot judge."""
    try:
        gold = verify_mod.gold_result(task.gold, path, limits)
    except sql_guard.QueryFailed:
        return None  # the gold fails here (a value it cannot handle): this database cannot judge it
    if neighbour_proof.judges(original, gold):
        return None  # a question that does not arise here: nothing matches, or "the lowest" is unknown
    conn = inv.open_read_only(path)
    try:
        if neighbour_proof.repeated_identity(conn, task.profile, task.gold):
            return None  # the gold lists by a name that repeats here: it would be judged, not the answer
    finally:
        conn.close()
    return verify_mod.judge(path, sql, gold, limits, neighbour=True, max_steps=max(left - gold.steps, 1)), gold.steps


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


_lock = threading.Lock()
_made: list[str] = []


def _folder() -> str:
    """The process's private folder for search databases (made once, removed at exit)."""
    if _made and os.path.isdir(_made[0]):
        return _made[0]
    with _lock:
        if not (_made and os.path.isdir(_made[0])):
            try:
                found = tempfile.mkdtemp(prefix="spider-scoring-search-")
            except OSError as exc:
                raise SearchUnavailable(f"the counterexample search needs a writable temporary folder ({exc}): set "
                                        "TMPDIR to one, or turn the search off (SPIDER_SCORING_SEARCH=off)") from None
            _made[:] = [found]
            atexit.register(shutil.rmtree, found, True)
    return _made[0]


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # never written (the build failed before the rename): nothing to remove


class SearchUnavailable(ScoringInfrastructureError):
    """No temporary folder can hold the search's databases: an infrastructure fault, never a score."""
