"""The audit: every catalogued degenerate answer of every row, scored by the bundle as the trainer calls it.

For a bundle zip loaded as the trainer loads it (harness.common.bundle_loader), and the rows of
the splits audited (from the bundle's index: id, split, database, gold):

1. the gold runs once on its original database (read-only, counted steps) for its rows and width;
2. each policy of harness.audit.catalogue makes its candidates;
3. every distinct (database, gold, candidate) is scored once through the bundle's ``reward``
   (train and rl rows) or ``grader`` (eval rows) ``compute_score``, with verl's keywords and the
   row's ``db_id`` as a hint, concurrently;
4. each candidate paid 1.0 is tried on the witnesses of its database (harness.audit.witnesses)
   with the bundle's own ``verify``: the first fair witness on which it is a ``mismatch`` shows it
   wrong, and the row is *hackable* by that policy. A paid candidate no fair witness tells from its
   gold is *set aside* (it may be an equivalent rewrite: it is never counted), with the invariant a
   witness would have to break to tell them apart, when one does;
5. the equivalent rewrites of the corpus whose golds the rows hold (harness.audit.rewrites) are
   scored alongside: each one not paid is a fair answer the bundle rejects;
6. every gold is scored as its own answer, and harness.audit.shapes turns the outcomes into what
   each reward shape pays every policy and the gold (the document's ``shapes``).

A call asks for the bundle's outcome fields: "paid" is the outcome ``match``, whatever a reward
shape pays for it.

The result is a plain dict (harness.audit.report renders it and checks it against a threshold).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from harness.audit import catalogue, model, report, review_memo, rewrites, shapes
from harness.audit.model import AuditRow, Finding, Scored
from harness.audit.sqledit import Query
from harness.audit.witnesses import WitnessSet
from harness.common.bundle_loader import LoadedBundle, attach_unpacked, remove_unpacked
from harness.common.cores import usable_cores
from harness.common.errors import InputError
from harness.common.memo import Memo
from harness.common.processes import map_in_processes
from harness.emulator.calls import Call, call_score, shape_for

DEFAULT_SPLITS = ("rl", "eval")
FUNCTION_FOR_SPLIT = {"train": "reward", "rl": "reward", "eval": "grader"}
TASKS_A_PROCESS = 500  # fewer calls a process than this are scored here: spawning one costs about a second
GOLD_STEPS = 50_000_000  # VM steps the gold may take here to show its rows (every gold ran within the bundle's cap)

Say = Callable[[str], None]
NO_MEMO = Memo(None)


def index_rows(loaded: LoadedBundle, splits: tuple[str, ...]) -> list[AuditRow]:
    """The rows of ``splits`` in the bundle's index, in index order (none, for splits prepared empty)."""
    unknown = [s for s in splits if s not in FUNCTION_FOR_SPLIT]
    if unknown:
        raise InputError(f"unknown split(s) {', '.join(unknown)}: audit among {', '.join(FUNCTION_FOR_SPLIT)}")
    return [AuditRow(str(r["id"]), str(r["split"]), str(r["db_id"]), str(r["gold"]))
            for r in loaded.index().get("rows", []) if r.get("split") in splits]


def gold_rows(database: Path, gold: str) -> catalogue.GoldRows:
    """The gold's width and (up to MAX_LITERAL_ROWS + 1) rows on ``database``; rows None when it fails here."""
    conn = sqlite3.connect("file:" + str(database.resolve()) + "?mode=ro&immutable=1", uri=True)
    calls = [0]

    def meter() -> int:
        calls[0] += 1
        return 1 if calls[0] * 1000 > GOLD_STEPS else 0

    conn.set_progress_handler(meter, 1000)
    try:
        cursor = conn.execute(gold)
        rows = tuple(cursor.fetchmany(catalogue.MAX_LITERAL_ROWS + 1))
        return catalogue.GoldRows(len(cursor.description or ()), rows)
    except (sqlite3.Error, OverflowError, ValueError):
        return catalogue.GoldRows(1, None)
    finally:
        conn.close()


def _tables(database: Path) -> list[str]:
    conn = sqlite3.connect("file:" + str(database.resolve()) + "?mode=ro&immutable=1", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                           "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid")]
    finally:
        conn.close()


def catalogue_of(loaded: LoadedBundle, rows: list[AuditRow],
                 memo: Memo = NO_MEMO) -> dict[tuple[str, str], list[catalogue.Candidate]]:
    """(db_id, gold) -> its candidates, each distinct gold made once (a database's kept in ``memo``:
    they depend on its original and its golds alone)."""
    files = loaded.database_files()
    golds: dict[str, list[str]] = {}
    for row in rows:
        if row.gold not in golds.setdefault(row.db_id, []):
            golds[row.db_id].append(row.gold)
    out: dict[tuple[str, str], list[catalogue.Candidate]] = {}
    for db_id, mine in golds.items():
        key = memo.key("candidates", review_memo.original_print(loaded, db_id), mine) if memo else ""
        kept = memo.get("candidates", key)
        if kept is not None:
            found = kept.value
        else:
            tables = _tables(files[db_id])
            found = [catalogue.candidates(gold, gold_rows(files[db_id], gold), tables) for gold in mine]
            memo.put("candidates", key, found)
        out.update(zip([(db_id, gold) for gold in mine], found))
    return {(row.db_id, row.gold): out[(row.db_id, row.gold)] for row in rows}


Task = tuple[str, str, str, str]  # (function, db_id, gold, sql)


def score_all(loaded: LoadedBundle, tasks: list[Task], threads: int, processes: int | None = None,
              memo: Memo = NO_MEMO) -> dict[Task, Call]:
    """Every task scored once, through the bundle's function as the trainer calls it: one database's
    tasks a process (``processes`` at a time, default one a usable core, none beside this one under
    ``TASKS_A_PROCESS`` tasks each), each on ``threads`` threads. A call's verdict is a function of
    the call and the bundle alone, so the calls are the same with any number of processes; a
    database's calls are kept in ``memo``, keyed by its part of the bundle (harness.audit.review_memo)."""
    done: dict[Task, Call] = {}
    keys: dict[str, tuple[str, list[Task]]] = {}  # db_id -> its key in ``memo``, and its tasks in key order
    if memo:
        prints = review_memo.database_prints(loaded)
        for db_id, part in _per_database(tasks).items():
            keys[db_id] = (memo.key("calls", prints[db_id], sorted(part)), sorted(part))
            kept = memo.get("calls", keys[db_id][0])
            if kept is not None:
                done.update(zip(keys[db_id][1], kept.value))
    made = _score_new(loaded, [t for t in tasks if t not in done], threads, processes)
    for key, part in keys.values():
        if part[0] in made and all(made[t].kind != "crash" for t in part):  # a fault of this run is never kept
            memo.put("calls", key, [made[t] for t in part])
    done.update(made)
    return {task: done[task] for task in tasks}


def _per_database(tasks: list[Task]) -> dict[str, list[Task]]:
    by_db: dict[str, list[Task]] = collections.defaultdict(list)
    for task in tasks:
        by_db[task[1]].append(task)
    return by_db


def _score_new(loaded: LoadedBundle, tasks: list[Task], threads: int, processes: int | None) -> dict[Task, Call]:
    """``score_all`` of ``tasks``, nothing kept."""
    by_db = _per_database(tasks)
    count = min(processes or usable_cores(), len(by_db), len(tasks) // TASKS_A_PROCESS)
    if count <= 1:
        return _score_here(loaded, tasks, threads) if tasks else {}
    parts = sorted(by_db.values(), key=len, reverse=True)  # the largest first: they finish together
    jobs = [(loaded.zip_path, loaded.sha256, str(loaded.root), loaded.package, loaded.entries, part, threads)
            for part in parts]
    done: dict[Task, Call] = {}
    for part, calls in zip(parts, map_in_processes(_score_part, jobs, count)):
        done.update(zip(part, calls))
    return {task: done[task] for task in tasks}


_ATTACHED: dict[tuple[str, str], LoadedBundle] = {}  # in a spawned process: the bundle imported once, for every job


def _score_part(job: tuple) -> list[Call]:
    """One database's calls, in a spawned process that imports the bundle this run unpacked (once)."""
    zip_path, sha256, root, package, entries, tasks, threads = job
    loaded = _ATTACHED.get((root, package))
    if loaded is None:
        loaded = _ATTACHED[(root, package)] = attach_unpacked(zip_path, sha256, root, package, entries)
    return list(_score_here(loaded, tasks, threads).values())


def _score_here(loaded: LoadedBundle, tasks: list[Task], threads: int) -> dict[Task, Call]:
    """``score_all`` in this process, on ``threads`` threads."""
    functions = {name: loaded.function(name) for name in sorted({t[0] for t in tasks})}
    bounds = {name: shape_for(loaded, name).bounds for name in functions}

    def one(task: Task) -> Call:
        function, db_id, gold, sql = task
        return call_score(functions[function], bounds=bounds[function], data_source="spider", solution_str=sql,
                          ground_truth=gold, extra_info={"db_id": db_id}, outcome_fields=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(threads, 1)) as pool:
        return dict(zip(tasks, pool.map(one, tasks)))


def _shown_wrong(verify: Callable, witnesses: WitnessSet, gold: str, sql: str) -> Finding:
    """The first fair witness on which ``sql`` is a mismatch; else what the first unfair one breaks."""
    tables = Query(gold).from_tables(None) + Query(sql).from_tables(None)
    unfair = []
    for witness in witnesses.witnesses(tables):
        if witness.broken:
            unfair.append(witness)
        elif verify(sql, gold, str(witness.path), is_sql=True).outcome == "mismatch":
            return Finding(witness.name)
    for witness in unfair + [w for w in witnesses.keys_only(tables) if w.broken]:
        if verify(sql, gold, str(witness.path), is_sql=True).outcome == "mismatch":
            return Finding(None, tuple(str(b) for b in witness.broken))
    return Finding()


def heap_alone(loaded: LoadedBundle) -> Callable[[], contextlib.AbstractContextManager]:
    """A context in which no query of the loaded bundle runs: the audit's own SQLite work (building
    witnesses) shares the process-wide heap ceiling the bundle sets, and a degenerate answer that
    fills it beside a build would fail the build (MemoryError) rather than itself."""
    turns = loaded.module("sql.guard").TURNS

    @contextlib.contextmanager
    def alone() -> Iterator[None]:
        turns.enter_alone()
        try:
            yield
        finally:
            turns.leave_alone()

    return alone


def judge_paid(loaded: LoadedBundle, paid: dict[str, set[tuple[str, str]]], golds: dict[str, list[str]],
               work: Path, threads: int, memo: Memo = NO_MEMO) -> tuple[dict[tuple[str, str, str], Finding], dict]:
    """(db_id, gold, sql) -> its Finding for every paid pair (one thread per database), and the
    witnesses built: how many, and how many break an invariant (by the invariant's kind). A
    database's part is kept in ``memo``: it depends on its original, its golds and the pairs paid."""
    verify = loaded.module("verify").verify
    files = loaded.database_files()
    alone = heap_alone(loaded)
    # A database's part: its findings, the kinds of invariant each witness built breaks, what was not built.
    Part = tuple[dict[tuple[str, str, str], Finding], list[tuple[str, ...]], dict[str, str]]

    def one_database(db_id: str) -> Part:
        key = memo.key("witnesses", review_memo.original_print(loaded, db_id), sorted(set(golds[db_id])),
                       sorted(paid[db_id])) if memo else ""
        kept = memo.get("witnesses", key)
        if kept is not None:
            return kept.value
        with alone():
            witnesses = WitnessSet(db_id, files[db_id], golds[db_id], work / db_id, alone=alone)
        found = {(db_id, gold, sql): _shown_wrong(verify, witnesses, gold, sql) for gold, sql in sorted(paid[db_id])}
        part = (found, [tuple(sorted({b.kind for b in w.broken})) for w in witnesses.built()],
                {f"{db_id}: {name}": why for name, why in witnesses.not_built.items()})
        memo.put("witnesses", key, part)
        return part

    found: dict[tuple[str, str, str], Finding] = {}
    built: list[tuple[str, ...]] = []
    not_built: dict[str, str] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(threads, 1)) as pool:
        for part, broken, missing in pool.map(one_database, sorted(paid)):
            found.update(part)
            built += broken
            not_built.update(missing)
    unfair = collections.Counter(kind for kinds in built for kind in kinds)
    return found, {"witnesses": len(built), "unfair": sum(1 for kinds in built if kinds), "unfair_by": dict(unfair),
                   "not_built": not_built}


def audit(loaded: LoadedBundle, splits: tuple[str, ...] = DEFAULT_SPLITS, *, threads: int = 4,
          processes: int | None = None, memo: Memo = NO_MEMO, say: Say = lambda line: None,
          made: Mapping[tuple[str, str], list[catalogue.Candidate]] | None = None) -> dict:
    """The audit document of ``loaded`` over ``splits`` (module docstring; harness.audit.report's shape).
    ``processes``: the calls' (``score_all``): the same document with any number. ``memo``: where
    each database's parts are kept for the next audit (harness.common.memo): the same document.
    ``made``: the rows' candidates, when the caller has them (``catalogue_of``)."""
    started = time.monotonic()
    rows = index_rows(loaded, splits)
    made = catalogue_of(loaded, rows, memo) if made is None else made
    tasks = {(FUNCTION_FOR_SPLIT[r.split], r.db_id, r.gold, c.sql) for r in rows for c in made[(r.db_id, r.gold)]}
    fair = rewrites.matching(rows, rewrites.load(), FUNCTION_FOR_SPLIT)
    say(f"audit: {len(rows)} rows of {', '.join(splits)}, {sum(len(v) for v in made.values())} candidates of "
        f"{len(made)} golds, {len(tasks)} calls, and {sum(len(v) for v in fair.values())} equivalent rewrites")
    calls = score_all(loaded, sorted(tasks | {task for found in fair.values() for task, _kind in found}), threads,
                      processes, memo)
    paid: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
    for (_function, db_id, gold, sql), call in calls.items():
        if model.paid(call):
            paid[db_id].add((gold, sql))
    golds: dict[str, list[str]] = collections.defaultdict(list)
    for row in rows:
        golds[row.db_id].append(row.gold)
    say(f"audit: {sum(len(v) for v in paid.values())} candidates paid 1.0 on {len(paid)} databases; "
        "looking for witnesses")
    work = Path(tempfile.mkdtemp(prefix="audit-witnesses-"))
    try:
        judged, witnesses = judge_paid(loaded, paid, golds, work, threads, memo)
    finally:
        remove_unpacked(work)
    results = [(row, [Scored(c, calls[(FUNCTION_FOR_SPLIT[row.split], row.db_id, row.gold, c.sql)],
                             judged.get((row.db_id, row.gold, c.sql))) for c in made[(row.db_id, row.gold)]])
               for row in rows]
    gold_task = {row: (FUNCTION_FOR_SPLIT[row.split], row.db_id, row.gold, row.gold) for row in rows}
    gold_calls = score_all(loaded, sorted(set(gold_task.values())), threads, processes, memo)
    doc = report.document(loaded, results, splits, {"calls": len(calls), **witnesses}, time.monotonic() - started)
    return {**doc, "rewrites": rewrites.section(fair, calls, splits),
            "shapes": shapes.section(results, {row: gold_calls[task] for row, task in gold_task.items()}, splits,
                                     loaded.index())}
