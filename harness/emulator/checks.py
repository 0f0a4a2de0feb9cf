"""The pre-push checks, run on a loaded bundle (inside the trainer container, or in-process).

Each check returns a ``Check``: a name, passed or not, a one-line summary and the first failures.
The checks, in order (README, "Pre-push verification"):

1. splits well formed: every line a chat row ending with the assistant message (the gold);
2. splits match the bundle: row ``<split>-<n>`` is in the index with the same gold, and no more;
3. eval unseen: no eval question or database in train or rl;
4. imports stdlib only: a fresh ``python3 -I -S`` imports every module of the bundle;
5. golds score 1.0: every row's gold through reward (train, rl) or grader (eval), concurrently;
   a reward built with another reward shape pays its match value instead (harness.common.reward_shape);
6. mutated golds score 0.0 (the shape's value for a wrong answer): harness.common.mutate's near-misses
   that SQLite says return other rows;
   then neighbour databases: every gold matches on all its neighbours, and the near-misses the
   original cannot tell from their gold are counted with the share the neighbours separate;
7. hostile suite: every case 0.0 with an allowed outcome (and its CPU bound, where it has one);
8. no file created while the hostile suite ran (listing of the writable places, scratch empty);
9. stale gold rejected: a row whose gold is not the bundle's raises StaleBundleError (the bundle's
   RuntimeWarning for it, provoked here on purpose, is kept in);
10. missing or corrupt database: DatabaseUnavailableError from a fresh interpreter, never a score;
11. databases unchanged: every database's SHA-256 as indexed, before and after all of the above.

Standard library only.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.common import mutate
from harness.common.bundle_loader import LoadedBundle, directory_listing
from harness.common.layout import SPLITS
from harness.common.rows import SplitRow, index_mismatches, read_split_lenient
from harness.emulator import hostile
from harness.emulator.calls import Call, call_score, shape_for
from harness.emulator.check_result import Check, _check
from harness.emulator.neighbour_checks import NAME as NEIGHBOURS
from harness.emulator.neighbour_checks import check_neighbours

PROBE = Path(__file__).resolve().parent / "probe.py"




def _norm(text: str) -> str:
    return " ".join(text.split())


# --- data checks ----------------------------------------------------------------------------------

def check_splits(split_files: dict[str, Path]) -> tuple[Check, dict[str, list[SplitRow]]]:
    rows, failures = {}, []
    for split in SPLITS:
        path = split_files.get(split)
        if path is None or not Path(path).is_file():
            failures.append(f"{split}: no {split}.jsonl given or found; run `make bundle` to write the splits")
            continue
        rows[split], problems = read_split_lenient(path, split)
        failures += problems
    counts = ", ".join(f"{s} {len(r)}" for s, r in rows.items())
    return _check("splits well formed", failures, f"{counts} rows, each ending with the gold"), rows


def check_against_index(rows: dict[str, list[SplitRow]], index: dict) -> Check:
    failures = index_mismatches([r for split_rows in rows.values() for r in split_rows], index, tuple(rows))
    found = sum(len(split_rows) for split_rows in rows.values())
    return _check("splits match the bundle", failures,
                  f"{found} rows found in the index with the same gold, none missing")


def check_eval_unseen(rows: dict[str, list[SplitRow]], index: dict) -> Check:
    """No eval database in train or rl, and no eval row (question and gold) there either.

    A question text alone may recur on another database with another gold (Spider asks "How many
    flights do we have?" of two flight databases): that is a different row, counted, not failed.
    """
    db_of = {str(r.get("id")): r.get("db_id") for r in index.get("rows", [])}
    training = [r for s in ("train", "rl") for r in rows.get(s, [])]
    train_dbs = {db_of.get(r.id) for r in training}
    train_pairs = {(_norm(r.question).lower(), _norm(r.gold).lower()) for r in training}
    train_questions = {pair[0] for pair in train_pairs}
    failures, same_text = [], 0
    for row in rows.get("eval", []):
        question = _norm(row.question).lower()
        if db_of.get(row.id) in train_dbs:
            failures.append(f"{row.id}: database {db_of.get(row.id)!r} is also used by train or rl")
        if (question, _norm(row.gold).lower()) in train_pairs:
            failures.append(f"{row.id}: question {row.question[:60]!r} with the same gold is also in train or rl")
        elif question in train_questions:
            same_text += 1
    eval_dbs = {db_of.get(r.id) for r in rows.get("eval", [])}
    note = f"; {same_text} question text(s) also asked of another database with another gold" if same_text else ""
    return _check("eval unseen", failures,
                  f"{len(eval_dbs)} eval databases, none in train or rl; no eval row in train or rl{note}")


# --- fresh-interpreter probes ---------------------------------------------------------------------

def _probe(args: list[str], env_root: Path | None = None, timeout_s: float = 120.0) -> dict:
    env = dict(os.environ)
    env.pop("TRAINER_BUNDLE_ROOT", None)
    if env_root is not None:
        env["TRAINER_BUNDLE_ROOT"] = str(env_root)
    done = subprocess.run([sys.executable, "-I", "-S", str(PROBE), *args], capture_output=True, text=True,
                          env=env, timeout=timeout_s, cwd=tempfile.gettempdir())
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"probe exited {done.returncode}: {done.stderr.strip()[-500:]}"}


def check_imports(loaded: LoadedBundle) -> Check:
    result = _probe(["imports", str(loaded.root)])
    if "error" in result:
        return Check("imports stdlib only", False, "the bundle does not import in a fresh interpreter", [result["error"]])
    outside = result["outside_stdlib"]
    return _check("imports stdlib only", [f"imports {name!r}, which is not in the standard library" for name in outside],
                  f"{len(result['modules']) + 1} modules in a fresh python {result['python']} -I -S, standard library only")


def _expect_raise(result: dict, wanted: str, what: str) -> list[str]:
    """Failures unless the probe saw the bundle raise its error with code ``wanted``."""
    if result.get("code") == wanted:
        return []
    if "raised" in result:
        return [f"{what}: raised {result['raised']} ({result.get('message', '')[:120]}), expected {wanted}"]
    return [f"{what}: {result.get('error') or 'returned ' + repr(result.get('returned'))}, expected {wanted}"]


def check_missing_database(loaded: LoadedBundle, workdir: Path) -> Check:
    """A copy of the bundle without one database, and one with it corrupted: both must raise."""
    files = loaded.database_files()
    index = loaded.index()
    gold_of = {r["db_id"]: r["gold"] for r in reversed(index.get("rows", []))}
    candidates = [d for d in files if d in gold_of]
    if not candidates:
        return Check("missing database", False, "no indexed row to probe with", [])
    db_id = min(candidates, key=lambda d: files[d].stat().st_size)  # the smallest: cheap to copy
    failures = []
    for variant in ("missing", "corrupt"):
        probe_root = Path(tempfile.mkdtemp(prefix=f"probe-{variant}-", dir=workdir))
        try:
            for entry in loaded.root.rglob("*.py"):  # the code, subpackages too; data/ holds none
                name = entry.relative_to(loaded.root)
                (probe_root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry, probe_root / name)
            (probe_root / "data" / "databases").mkdir(parents=True)
            shutil.copyfile(loaded.root / "data" / "index.json", probe_root / "data" / "index.json")
            if variant == "corrupt":
                data = bytearray(files[db_id].read_bytes())
                data[len(data) // 2] ^= 0xFF
                (probe_root / "data" / "databases" / files[db_id].name).write_bytes(bytes(data))
            result = _probe(["score", str(probe_root), gold_of[db_id]], env_root=probe_root)
            failures += _expect_raise(result, "database_unavailable", f"{variant} {db_id}.sqlite")
        finally:
            shutil.rmtree(probe_root, ignore_errors=True)
    return _check("missing database", failures,
                  f"{db_id}.sqlite missing or corrupt: DatabaseUnavailableError, not a score")


def _expected_warning(caught: warnings.WarningMessage) -> bool:
    """The bundle's own "a completion is unscored" warning for a stale gold (scoring_batch._fault)."""
    return issubclass(caught.category, RuntimeWarning) and "stale_bundle" in str(caught.message)


def _call_keeping_stale_warning(fn: Callable, **kwargs: Any) -> Call:
    """``call_score(fn, **kwargs)`` with the bundle's stale-gold RuntimeWarning kept in: this check provokes it on purpose,
    and a passing run must not tell the user that the bundle is stale. Any other warning goes out as it came
    (a real stale bundle, met outside this check, still warns)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call_score(fn, **kwargs)
    for found in caught:
        if not _expected_warning(found):
            warnings.warn_explicit(found.message, found.category, found.filename, found.lineno)
    return result


def check_stale_gold(loaded: LoadedBundle, rows: dict[str, list[SplitRow]]) -> Check:
    """A gold edited after the bundle was built must raise StaleBundleError, with or without db_id."""
    reward = loaded.function("reward")
    index = loaded.index()
    db_of = {str(r.get("id")): r.get("db_id") for r in index.get("rows", [])}
    sample = [r for s in SPLITS for r in rows.get(s, [])[:1]]
    failures = []
    for row in sample:
        edited = next((m.sql for m in mutate.mutations(row.gold)), row.gold + " -- edited")
        for extra in (None, {"db_id": db_of.get(row.id)}):
            call = _call_keeping_stale_warning(reward, solution_str=row.gold, ground_truth=edited, extra_info=extra)
            how = "with db_id" if extra else "gold only"
            if call.code != "stale_bundle":
                failures.append(f"{row.id} ({how}): {call.detail or call.score!r}, expected StaleBundleError")
    return _check("stale gold rejected", failures,
                  f"{len(sample) * 2} edited golds: StaleBundleError (unscored), never a score")


# --- scoring checks -------------------------------------------------------------------------------

def _score_all(calls: list[tuple[str, Callable, dict]], workers: int) -> list[tuple[str, Call]]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(label, pool.submit(call_score, fn, **kwargs)) for label, fn, kwargs in calls]
        return [(label, future.result()) for label, future in futures]


def _explained(grade: Callable, kwargs: dict, call: Call) -> str:
    """Why a call did not score as expected: its outcome and explanation, asked of the bundle again.

    Verdicts are deterministic, so grading the same arguments once more gives the same verdict,
    with the outcome (``prediction_over_budget``, ``mismatch``...) that a bare score lacks.
    """
    if call.kind != "scored":
        return call.detail
    try:
        answer = grade(**kwargs)
    except Exception as exc:  # noqa: BLE001 - reported as it is
        return f"{call.score!r} ({type(exc).__name__} when asked again: {exc})"
    return f"{call.score!r}, {answer.get('outcome')}: {answer.get('explanation')}"


def check_golds(loaded: LoadedBundle, rows: dict[str, list[SplitRow]], workers: int) -> Check:
    reward, grader = loaded.function("reward"), loaded.function("grader")
    shape = shape_for(loaded)
    calls: list[tuple[str, Callable, dict[str, Any]]] = []
    for split in SPLITS:
        for row in rows.get(split, []):
            if split == "eval":
                calls.append((row.id, grader, {"input": row.prompt, "output": row.gold, "expected": row.gold}))
            else:
                calls.append((row.id, reward, {"data_source": "spider", "solution_str": row.gold,
                                               "ground_truth": row.gold, "bounds": shape.bounds}))
    results = _score_all(calls, workers)
    grade = loaded.function("grader:grade")
    failures = [f"{label}: {_explained(grade, {k: v for k, v in kwargs.items() if k != 'bounds'}, call)}"
                for (label, call), (_label, fn, kwargs) in zip(results, calls)
                if not (shape.pays("match", call.score) if fn is reward else call.score == 1.0)]
    paid = "" if shape.binary else f"; reward shape {shape.name}: each reward paid the match value {shape.values['match']:g}" + \
        (f" (up to +{shape.bonus_max:g})" if shape.bonus_max else "")
    return _check("golds score 1.0", failures,
                  f"{len(results)} golds, all 1.0 (train and rl via reward, eval via grader){paid}",
                  f"{len(failures)} of {len(results)} golds do not score 1.0")


def check_mutations(loaded: LoadedBundle, workers: int, max_golds: int | None = None) -> Check:
    reward = loaded.function("reward")
    shape = shape_for(loaded)
    files = loaded.database_files()
    pairs = sorted({(r["db_id"], r["gold"]) for r in loaded.index().get("rows", [])})[:max_golds]
    calls = []
    for db_id, gold in pairs:
        for m in mutate.differing_mutations(gold, files[db_id]):
            calls.append((f"{db_id} [{m.kind}] {m.sql[:90]!r}", reward,
                          {"solution_str": m.sql, "ground_truth": gold, "extra_info": {"db_id": db_id},
                           "bounds": shape.bounds}))
    results = _score_all(calls, workers)
    failures = [f"{label}: {call.score if call.kind == 'scored' else call.detail}"
                for label, call in results if not shape.wrong(call.score)]
    kinds: dict[str, int] = {}
    for label, _call in results:
        kind = label.split("[", 1)[1].split("]", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return _check("mutated golds score 0.0", failures,
                  f"{len(results)} mutations of {len(pairs)} golds that return other rows, all 0.0 "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})",
                  f"{len(failures)} of {len(results)} mutated golds do not score 0.0")


def check_hostile(loaded: LoadedBundle, scratch: Path, watch: list[Path]) -> tuple[Check, Check]:
    """The hostile suite on the bundle's first database, and what it left in the writable places."""
    verify_mod, reward = loaded.module("verify"), loaded.function("reward")
    files = loaded.database_files()
    first = next((r for r in loaded.index().get("rows", []) if r.get("db_id") in files), None)
    if first is None:
        failed = Check("hostile suite", False, "the bundle has no indexed row to aim the suite at")
        return failed, Check("no file created", False, "not run (no hostile suite)")
    db_id, gold, database = first["db_id"], first["gold"], files[first["db_id"]]
    cases = hostile.load_cases(hostile.first_table(database), str(scratch))
    shape = shape_for(loaded)

    def score(case: hostile.HostileCase) -> tuple[str, float | None, str]:
        verify_mod.reset_outcome_counts()
        if case.is_sql:
            verdict = verify_mod.verify(case.text, gold, str(database), is_sql=True)
            return verdict.outcome, verdict.score, verdict.detail
        call = call_score(reward, bounds=shape.bounds, solution_str=case.text, ground_truth=gold,
                          extra_info={"db_id": db_id})
        seen = [k for k, n in verify_mod.outcome_counts().items() if n]
        outcome = call.outcome or (seen[0] if len(seen) == 1 else "unknown")
        # the verdict's own score: what the shape pays for a wrong answer's outcome is the verdict 0.0
        verdict_score = 0.0 if outcome != "match" and shape.pays(outcome, call.score) else call.score
        return outcome, verdict_score, call.detail

    before = directory_listing(watch)
    results = hostile.run_cases(cases, score)
    after = directory_listing(watch)
    failures = [r.describe() for r in results if not r.passed]
    costliest = max(results, key=lambda r: r.cpu_seconds)
    suite = _check("hostile suite", failures,
                   f"{len(results)} cases on {db_id}, all 0.0 within their budgets (costliest {costliest.case.id} "
                   f"{costliest.cpu_seconds:.2f} s CPU)", f"{len(failures)} of {len(results)} cases failed")
    changes = [f"created {p}" for p in sorted(set(after) - set(before))]
    changes += [f"removed {p}" for p in sorted(set(before) - set(after))]
    changes += [f"changed {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    places = ", ".join(str(p) for p in watch)
    return suite, _check("no file created", changes, f"{len(before)} entries under {places} unchanged; scratch empty")


def database_hashes(loaded: LoadedBundle) -> dict[str, str]:
    out = {}
    for db_id, path in loaded.database_files().items():
        try:
            out[db_id] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            out[db_id] = f"unreadable: {exc}"
    return out


def check_databases(loaded: LoadedBundle, before: dict[str, str]) -> Check:
    after = database_hashes(loaded)
    indexed = {d: e.get("sha256") for d, e in loaded.index().get("databases", {}).items()}
    failures = [f"{d}.sqlite: SHA-256 changed during verification" for d in before if after.get(d) != before[d]]
    failures += [f"{d}.sqlite: differs from the SHA-256 in the index" for d in after if after[d] != indexed.get(d)]
    return _check("databases unchanged", failures, f"{len(after)} databases byte-identical (SHA-256) to the index, "
                  "before and after")


def run_checks(loaded: LoadedBundle, split_files: dict[str, Path], *, workdir: Path, watch: list[Path],
               workers: int = 8, max_mutated_golds: int | None = None,
               say: Callable[[str], None] = lambda line: None) -> list[Check]:
    """Every check, in order, each timed; ``say`` gets a line as each one ends."""
    hashes = database_hashes(loaded)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=workdir))
    index = loaded.index()
    checks: list[Check] = []

    def timed(names: tuple[str, ...], make: Callable[[], Check | tuple[Check, ...]]) -> None:
        started = time.monotonic()
        try:
            made = make()
        except Exception as exc:  # a check that cannot run has failed; the others still run
            made = tuple(Check(name, False, "the check could not run", [f"{type(exc).__name__}: {exc}"])
                         for name in names)
        for n, check in enumerate(made if isinstance(made, tuple) else (made,)):
            check.seconds = time.monotonic() - started if n == 0 else 0.0  # a companion check: timed with the first
            checks.append(check)
            say(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.summary}")

    splits_check, rows = check_splits(split_files)
    checks.append(splits_check)
    say(f"{'PASS' if splits_check.passed else 'FAIL'}  {splits_check.name}: {splits_check.summary}")
    timed(("splits match the bundle",), lambda: check_against_index(rows, index))
    timed(("eval unseen",), lambda: check_eval_unseen(rows, index))
    timed(("imports stdlib only",), lambda: check_imports(loaded))
    timed(("golds score 1.0",), lambda: check_golds(loaded, rows, workers))
    timed(("mutated golds score 0.0",), lambda: check_mutations(loaded, workers, max_mutated_golds))
    timed((NEIGHBOURS,), lambda: check_neighbours(loaded, max_mutated_golds))
    timed(("hostile suite", "no file created"), lambda: check_hostile(loaded, scratch, watch + [scratch]))
    timed(("stale gold rejected",), lambda: check_stale_gold(loaded, rows))
    timed(("missing database",), lambda: check_missing_database(loaded, workdir))
    timed(("databases unchanged",), lambda: check_databases(loaded, hashes))
    shutil.rmtree(scratch, ignore_errors=True)
    return checks
