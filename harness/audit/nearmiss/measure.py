"""The near-miss measurement: which near misses of the golds the bundle pays, and which it could reject.

For the rows of the splits measured (from the bundle's index; rows whose gold is disputed are left
out and counted: a near miss of a wrong gold may be its accepted answer, docs/disputed-golds.md):

1. each distinct gold's near misses (harness.audit.nearmiss.families: a comparison at its boundary, an
   aggregate's DISTINCT, a LIMIT added...), each family in the tuning or the held-out group;
2. every distinct (database, gold, near miss) scored once by the bundle as the trainer calls it:
   the ``reward`` for train and rl rows, the ``grader`` (with its search) for eval rows
   (harness.audit.run.score_all);
3. each near miss of each row gets a kind: ``original`` (the original database already rejects
   it), ``killed`` (a neighbour database or the grader's search rejects it), or, paid, what the
   oracle (harness.audit.nearmiss.oracle) says: ``missed`` (a database keeping every invariant shows it
   wrong: a neighbour could have rejected it), ``blocked`` (only a database giving up a named kind
   of invariant does) or ``equivalent`` (none found); ``unscored`` where the bundle raised.

The kill rate is killed / (killed + missed): of the near misses the original cannot reject and
some fair database can, the share the bundle rejects. The figures are per split, per family, and
for the tuning families, the held-out ones and all (``doc``); ``Measured.missed`` keeps each
missed near miss with its witness database, which prepare's separation adds as a neighbour.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.audit import model, review_memo, run
from harness.audit.model import AuditRow
from harness.audit.nearmiss import families as families_module
from harness.audit.nearmiss import oracle
from harness.common.bundle_loader import LoadedBundle, remove_unpacked
from harness.common.cores import usable_cores
from harness.common.memo import Memo
from harness.common.processes import map_in_processes
from harness.emulator.calls import Call

FORMAT = "spider-scoring-near-misses"
VERSION = 1
ORIGINAL, KILLED, UNSCORED = "original", "killed", "unscored"
KINDS = (ORIGINAL, KILLED, oracle.MISSED, oracle.BLOCKED, oracle.EQUIVALENT, UNSCORED)
GROUPS = ("all", "tuning", "held_out")
DEFAULT_SPLITS = run.DEFAULT_SPLITS

Say = Callable[[str], None]
NO_MEMO = run.NO_MEMO


@dataclasses.dataclass(frozen=True)
class Families:
    """Where near misses come from: harness.audit.nearmiss.families's ``near_misses`` and its groups."""

    generate: Callable[..., list]  # near_misses(gold, database, *, families=None) -> [NearMiss(family, sql, note)]
    tuning: tuple[str, ...]
    held_out: tuple[str, ...]
    descriptions: Mapping[str, str]
    order: tuple[str, ...] = ()  # every family in the generator's order (default: tuning, then held out)

    def group(self, family: str) -> str:
        return "tuning" if family in self.tuning else "held_out" if family in self.held_out else "other"

    def chosen(self, which: str) -> tuple[str, ...]:
        """The families ``which`` names (``all``, ``tuning`` or ``held_out``), in the generator's order."""
        wanted = {"all": self.tuning + self.held_out, "tuning": self.tuning, "held_out": self.held_out}[which]
        return tuple(name for name in (self.order or self.tuning + self.held_out) if name in wanted)


def default_families() -> Families:
    """harness.audit.nearmiss.families (the near-miss generator)."""
    return Families(families_module.near_misses, tuple(families_module.TUNING), tuple(families_module.HELD_OUT),
                    dict(families_module.DESCRIPTIONS), tuple(families_module.ALL))


def blind_families(which: str = "blind") -> Families:
    """Families written apart from the scorer's tuning (all held out): harness.audit.nearmiss.blind (``blind``)
    or harness.audit.nearmiss.blind2 (``blind2``, whose misses are never read), each near miss one the
    families before it do not make."""
    if which == "blind2":
        from harness.audit.nearmiss import blind2 as module
    else:
        from harness.audit.nearmiss import blind as module  # type: ignore[no-redef]
    return Families(module.near_misses, (), tuple(module.ALL), dict(module.DESCRIPTIONS), tuple(module.ALL))


@dataclasses.dataclass(frozen=True)
class Item:
    """One near miss of one row, and what became of it."""

    row: AuditRow
    family: str
    sql: str
    kind: str
    found: oracle.Found | None = None


@dataclasses.dataclass
class Measured:
    doc: dict
    items: list[Item]

    def missed(self) -> list[Item]:
        return [i for i in self.items if i.kind == oracle.MISSED]


def rows_of(loaded: LoadedBundle, splits: tuple[str, ...]) -> tuple[list[AuditRow], dict[str, int]]:
    """The rows of ``splits`` whose gold is not disputed, and per split how many disputed ones were left out."""
    run.index_rows(loaded, splits)  # refuses an unknown split
    kept: list[AuditRow] = []
    disputed: collections.Counter[str] = collections.Counter()
    for r in loaded.index().get("rows", []):
        if r.get("split") not in splits:
            continue
        if r.get("disputed"):
            disputed[str(r["split"])] += 1
        else:
            kept.append(AuditRow(str(r["id"]), str(r["split"]), str(r["db_id"]), str(r["gold"])))
    return kept, {s: disputed[s] for s in splits}


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


GOLDS_A_PROCESS = 100  # fewer golds than this a process are made here, on threads: spawning one costs about a second
Made = list[tuple[str, str]] | str  # one gold's near misses as (family, sql), or why the generator failed


def generate(families: Families, files: Mapping[str, Path], golds: list[tuple[str, str]], which: tuple[str, ...],
             threads: int, memo: Memo = NO_MEMO, originals: Mapping[str, str] | None = None,
             processes: int | None = None) -> tuple[dict[tuple[str, str], list[tuple[str, str]]], list[dict]]:
    """(db_id, gold) -> its near misses as (family, sql), each text once and never the gold's; and the
    golds the generator failed on (reported, never hidden). With ``memo`` (and ``originals``: db_id ->
    the original's SHA-256), a database's are kept: they depend on its original and its golds alone.
    The default generator makes one database's a process (``processes`` at a time, default one a
    core, none beside this one under ``GOLDS_A_PROCESS`` golds each); another, here on ``threads``."""
    results: dict[tuple[str, str], Made] = {}
    keys: dict[str, tuple[str, list[tuple[str, str]]]] = {}  # db_id -> its key in ``memo``, and its golds
    if memo and originals is not None:
        for db_id in sorted({g[0] for g in golds}):
            mine = [g for g in golds if g[0] == db_id]
            keys[db_id] = (memo.key("near-misses", originals[db_id], [g[1] for g in mine], which), mine)
            kept = memo.get("near-misses", keys[db_id][0])
            if kept is not None:
                results.update(zip(mine, kept.value))
    todo = [g for g in golds if g not in results]
    by_db: dict[str, list[str]] = collections.defaultdict(list)
    for db_id, gold in todo:
        by_db[db_id].append(gold)
    count = min(processes or usable_cores(), len(by_db), len(todo) // GOLDS_A_PROCESS)
    made: dict[tuple[str, str], Made] = {}
    if count > 1 and families.generate is families_module.near_misses:  # importable in a spawned process
        order = sorted(by_db, key=lambda db_id: -len(by_db[db_id]))  # the most golds first: they finish together
        jobs = [(families.generate, files[db_id], by_db[db_id], which) for db_id in order]
        for db_id, part in zip(order, map_in_processes(_make_database, jobs, count)):
            made.update(zip([(db_id, gold) for gold in by_db[db_id]], part))
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(threads, 1)) as pool:
            made.update(zip(todo, pool.map(lambda key: _make(families.generate, files[key[0]], key[1], which), todo)))
    for key, mine in keys.values():
        if mine[0] in made:
            memo.put("near-misses", key, [made[g] for g in mine])
    results.update(made)
    results = {g: results[g] for g in golds}
    failed = [{"db_id": k[0], "gold": k[1], "error": v} for k, v in results.items() if isinstance(v, str)]
    return {k: v for k, v in results.items() if not isinstance(v, str)}, failed


def _make(make: Callable[..., list], database: Path, gold: str, which: tuple[str, ...]) -> Made:
    """One gold's near misses (``generate``), each text once and never the gold's."""
    try:
        made = make(gold, database, families=which)
    except Exception as exc:  # noqa: BLE001 - a generator fault is reported with its gold, the rest measured
        return f"{type(exc).__name__}: {exc}"
    seen, out = {_normal(gold)}, []
    for near in made:
        if _normal(near.sql) not in seen:
            seen.add(_normal(near.sql))
            out.append((near.family, near.sql))
    return out


def _make_database(job: tuple) -> list[Made]:
    """One database's golds' near misses, in a spawned process."""
    make, database, golds, which = job
    return [_make(make, database, gold, which) for gold in golds]


def _kind(call: Call, original_match: Callable[[], bool]) -> str:
    if call.kind != "scored":
        return UNSCORED
    if model.paid(call):
        return "paid"
    if call.decided_on is None:  # a bare score: ask the original database itself
        return KILLED if original_match() else ORIGINAL
    return ORIGINAL if call.decided_on == "original" or call.decided_on.startswith("original ") else KILLED


def measure(loaded: LoadedBundle, splits: tuple[str, ...] = DEFAULT_SPLITS, *, families: Families | None = None,
            which: str = "all", settings: oracle.Settings = oracle.MEASURE, threads: int = 4,
            work: Path | None = None, processes: int | None = None, memo: Memo = NO_MEMO,
            say: Say = lambda line: None) -> Measured:
    """Measure the bundle's near misses over ``splits`` (module docstring). ``which``: the families
    generated (``all``, ``tuning``, ``held_out``). ``work``: where the oracle's witness databases are
    kept for the caller (a temporary folder, removed, when None). ``processes``: the calls' and the
    oracles' (one a database; default one a core): the same figures with any number. ``memo``: where
    each database's parts are kept for the next measurement (harness.common.memo; only with the
    default generator, whose code its keys name): the same figures."""
    started = time.monotonic()
    if families is not None:
        memo = NO_MEMO  # another generator: its code is not in the keys
    families = families or default_families()
    rows, disputed = rows_of(loaded, splits)
    files = loaded.database_files()
    golds = sorted({(r.db_id, r.gold) for r in rows})
    originals = {db_id: review_memo.original_print(loaded, db_id) for db_id in {g[0] for g in golds}}
    made, failed = generate(families, files, golds, families.chosen(which), threads, memo, originals, processes)
    tasks = sorted({(run.FUNCTION_FOR_SPLIT[r.split], r.db_id, r.gold, sql) for r in rows
                    for _family, sql in made.get((r.db_id, r.gold), [])})
    say(f"near misses: {len(rows)} rows of {', '.join(splits)} ({sum(disputed.values())} with a disputed gold left "
        f"out), {sum(len(v) for v in made.values())} near misses of {len(made)} golds, {len(tasks)} calls")
    calls = run.score_all(loaded, tasks, threads, processes, memo)
    verify = loaded.module("verify").verify

    def on_original(task: run.Task) -> Callable[[], bool]:
        return lambda: verify(task[3], task[2], str(files[task[1]]), is_sql=True).outcome == "match"

    kinds = {task: _kind(call, on_original(task)) for task, call in calls.items()}
    paid: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for (_function, db_id, gold, sql), kind in kinds.items():
        if kind == "paid":
            paid[(db_id, gold)].add(sql)
    say(f"near misses: {sum(len(v) for v in paid.values())} paid as their gold on {len(paid)} golds; asking the oracle")
    scratch = work or Path(tempfile.mkdtemp(prefix="near-miss-oracle-"))
    try:
        found, oracle_work = _ask(loaded, rows, files, paid, settings, scratch, threads, processes, memo)
    finally:
        if work is None:
            remove_unpacked(scratch)
    items = [Item(r, family, sql, kinds[(run.FUNCTION_FOR_SPLIT[r.split], r.db_id, r.gold, sql)],
                  found.get((r.db_id, r.gold, sql)))
             for r in rows for family, sql in made.get((r.db_id, r.gold), [])]
    items = [dataclasses.replace(i, kind=i.found.kind) if i.kind == "paid" and i.found else i for i in items]
    work_done = {"golds": len(made), "near_misses": sum(len(v) for v in made.values()), "calls": len(calls),
                 "paid": sum(len(v) for v in paid.values()), **oracle_work, "generator_failed": failed}
    doc = document(items, families, splits, rows, disputed, settings, work_done, time.monotonic() - started)
    return Measured(doc, items)


Verdicts = tuple[dict[tuple[str, str, str], oracle.Found], int]  # one database's oracle verdicts, and the databases it built


def _ask(loaded: LoadedBundle, rows: list[AuditRow], files: Mapping[str, Path], paid: Mapping[tuple[str, str], set[str]],
         settings: oracle.Settings, work: Path, threads: int, processes: int | None = None,
         memo: Memo = NO_MEMO) -> tuple[dict[tuple[str, str, str], oracle.Found], dict]:
    """The oracle's verdict on every paid (database, gold, near miss): one oracle per database, each in
    a process of its own (``processes`` at a time, default one a core; its golds on ``threads``
    threads). An oracle draws from seeds of its own database, so the verdicts do not depend on how
    many processes there are; its witness databases are written under ``work/<db_id>``. A database's
    verdicts are kept in ``memo`` with the witness databases they name (their paths then in it)."""
    held = loaded.index().get("invariants") or {}
    golds: dict[str, list[str]] = collections.defaultdict(list)
    for r in rows:
        golds[r.db_id].append(r.gold)
    jobs = [(settings, held.get(db_id), db_id, files[db_id], golds[db_id], work / db_id,
             [(gold, sorted(paid[(db_id, gold)])) for d, gold in sorted(paid) if d == db_id], threads)
            for db_id in sorted({k[0] for k in paid})]
    keys = {job[2]: memo.key("oracle", job[0], job[1], review_memo.original_print(loaded, job[2]), job[4], job[6])
            for job in jobs} if memo else {}
    kept = {db_id: _kept_verdicts(memo, key) for db_id, key in keys.items()}
    # The most paid near misses first: the processes finish together (the verdicts are gathered by database).
    todo = sorted((job for job in jobs if kept.get(job[2]) is None), key=lambda job: -sum(len(s) for _g, s in job[6]))
    done = dict(zip([job[2] for job in todo], map_in_processes(_judge_database, todo, processes)))
    for db_id, result in done.items():
        if db_id in keys:
            _keep_verdicts(memo, keys[db_id], result)
    done.update({db_id: value for db_id, value in kept.items() if value is not None})
    out: dict[tuple[str, str, str], oracle.Found] = {}
    for job in jobs:
        out.update(done[job[2]][0])
    return out, {"oracle_databases": sum(done[job[2]][1] for job in jobs)}


def _keep_verdicts(memo: Memo, key: str, result: Verdicts) -> None:
    """One database's oracle verdicts kept, with the witness databases they name (by position)."""
    part, built = result
    files = sorted({f.path for f in part.values() if f.path is not None})
    at = {path: n for n, path in enumerate(files)}
    memo.put("oracle", key, ({k: (dataclasses.replace(f, path=None), at[f.path] if f.path is not None else None)
                              for k, f in part.items()}, built), files)


def _kept_verdicts(memo: Memo, key: str) -> Verdicts | None:
    """``_keep_verdicts``'s verdicts, each naming its witness database where the memo keeps it."""
    kept = memo.get("oracle", key)
    if kept is None:
        return None
    part, built = kept.value
    return {k: dataclasses.replace(f, path=kept.files[n]) if n is not None else f for k, (f, n) in part.items()}, built


def _judge_database(job: tuple) -> Verdicts:
    """One database's oracle on its golds' paid near misses, and how many databases it built."""
    settings, entry, db_id, original, golds, work, todo, threads = job
    made = oracle.factory(settings, {"invariants": {db_id: entry}} if entry is not None else None)(
        db_id, original, golds, work)

    def one(item: tuple[str, list[str]]) -> dict[tuple[str, str, str], oracle.Found]:
        gold, sqls = item
        return {(db_id, gold, sql): f for sql, f in made.judge(gold, sqls).items()}

    out: dict[tuple[str, str, str], oracle.Found] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(threads, 1)) as pool:
        for part in pool.map(one, todo):
            out.update(part)
    return out, made.built


def _counts() -> dict:
    return {"near_misses": 0, **{kind: 0 for kind in KINDS}, "blocked_by": {}}


def _add(counts: dict, item: Item) -> None:
    counts["near_misses"] += 1
    counts[item.kind] += 1
    if item.kind == oracle.BLOCKED and item.found is not None:
        for kind in item.found.blocked_by:
            counts["blocked_by"][kind] = counts["blocked_by"].get(kind, 0) + 1


def kill_rate(counts: Mapping) -> float | None:
    """killed / (killed + missed); None when no near miss could be killed."""
    killable = counts["killed"] + counts["missed"]
    return round(counts["killed"] / killable, 4) if killable else None


def document(items: list[Item], families: Families, splits: tuple[str, ...], rows: list[AuditRow],
             disputed: Mapping[str, int], settings: oracle.Settings, work: dict, seconds: float) -> dict:
    """The measurement's JSON document (harness.audit.nearmiss.report renders it)."""
    figures: dict[str, dict] = {s: {"rows": sum(1 for r in rows if r.split == s), "disputed_left_out": disputed.get(s, 0),
                                    "rows_with_missed": 0, "groups": {g: _counts() for g in GROUPS}, "families": {}}
                                for s in splits}
    with_missed: dict[str, set[str]] = collections.defaultdict(set)
    for item in items:
        split = figures[item.row.split]
        _add(split["families"].setdefault(item.family, _counts()), item)
        _add(split["groups"]["all"], item)
        group = families.group(item.family)
        if group in split["groups"]:
            _add(split["groups"][group], item)
        if item.kind == oracle.MISSED:
            with_missed[item.row.split].add(item.row.id)
    for name, split in figures.items():
        split["rows_with_missed"] = len(with_missed[name])
        split["families"] = dict(sorted(split["families"].items()))
        for counts in [*split["groups"].values(), *split["families"].values()]:
            counts["kill_rate"] = kill_rate(counts)
            counts["blocked_by"] = dict(sorted(counts["blocked_by"].items()))

    def entry(item: Item) -> dict:
        return {"id": item.row.id, "split": item.row.split, "db_id": item.row.db_id, "gold": item.row.gold,
                "family": item.family, "sql": item.sql, "witness": item.found.witness if item.found else ""}

    return {"format": FORMAT, "version": VERSION,
            "oracle": {"purpose": settings.purpose, **{k: v for k, v in dataclasses.asdict(settings).items()
                                                       if k != "purpose"}},
            "families": {name: {"group": families.group(name), "description": families.descriptions.get(name, "")}
                         for name in sorted({i.family for i in items} | set(families.tuning + families.held_out))},
            "splits": figures,
            "missed": [entry(i) for i in items if i.kind == oracle.MISSED],
            "blocked": [{**entry(i), "blocked_by": list(i.found.blocked_by) if i.found else []}
                        for i in items if i.kind == oracle.BLOCKED],
            "unscored": [{"id": i.row.id, "family": i.family, "sql": i.sql} for i in items if i.kind == UNSCORED],
            "work": work, "seconds": round(seconds, 1)}
