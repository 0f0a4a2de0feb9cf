"""The evaluation grader job: one trainer call per eval row, per-row results, the trainer's summary.

This is the one grading path. `grade` runs it in this process; `emulate grader` runs it in the
locked-down trainer container (or in-process). Each eval row is one call with the envelope
(``input`` = the prompt messages, ``output`` = the completion, ``expected`` = the gold), the way the
trainer evaluates. The score is what the named function returns (what the trainer records);
outcome, explanation and the extracted SQL come from the module's ``grade()``. A row the bundle
raises its typed error on is kept unscored (score null), never a 0.

The eval split must be the one the bundle was built with: every row in the index under its id with
the same gold, and no other. Otherwise the results would name another row's database, so the job
refuses to start.

Standard library only: this runs inside the trainer container too.
"""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable
from typing import Any

from harness.common.bundle_loader import LoadedBundle
from harness.common.errors import InputError, UnexpectedError
from harness.common.outcomes import OUTCOMES, Outcome
from harness.common.results import RowResult
from harness.common.rows import SplitRow, index_mismatches
from harness.emulator import grader_pool
from harness.emulator.calls import call_score, counters


def check_rows(rows: list[SplitRow], index: dict) -> None:
    """InputError unless ``rows`` are exactly the eval rows the bundle's index stores."""
    problems = index_mismatches(rows, index, ("eval",))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"the eval split does not match the bundle's index: {problems[0]}{more}. Grade with "
                         "the zip packed from the same prepared folder (`make pack`), or prepare both again")


def grade_split(loaded: LoadedBundle, rows: list[SplitRow], completions: list[str], *, function: str = "grader",
                say: Callable[[str], None] = lambda line: None, workers: int = 1) -> list[RowResult]:
    """One trainer call per eval row, in row order; a RowResult each. With ``workers`` above 1 the rows
    are graded on that many worker processes (harness.emulator.grader_pool), with the same results."""
    check_inputs(loaded.index(), rows, completions)
    if grader_pool.workers_used(workers, len(rows)) > 1:
        row_grader(loaded, function)  # a bundle without the function is refused here, as with one process
        results = grader_pool.grade_on_workers(loaded, rows, completions, workers=workers, function=function, say=say)
    else:
        results = grade_rows(loaded, rows, completions, function=function)
    say(grader_summary(results)["line"])
    return results


def check_inputs(index: dict, rows: list[SplitRow], completions: list[str]) -> None:
    """InputError unless there is one completion per row and the rows are the bundle's eval rows."""
    if len(completions) != len(rows):
        raise InputError(f"{len(completions)} completions for {len(rows)} eval rows; give one per row")
    check_rows(rows, index)


def grade_rows(loaded: LoadedBundle, rows: list[SplitRow], completions: list[str], *,
               function: str = "grader") -> list[RowResult]:
    """The calls themselves, for rows already checked (``check_inputs``): any run of eval rows, so a
    backend can grade shards of the split in several processes and put them back in order."""
    grade_one = row_grader(loaded, function)
    return [grade_one(row, completion) for row, completion in zip(rows, completions)]


def row_grader(loaded: LoadedBundle, function: str = "grader") -> Callable[[SplitRow, str], RowResult]:
    """One row's call and its RowResult, the bundle's function and index looked up once. An exception
    no call should raise (the bundle's own are classified by ``call_score``) is UnexpectedError naming the row."""
    index = loaded.index()
    fn = loaded.function(function)
    detail_fn = getattr(loaded.module(function.partition(":")[0]), "grade", None)
    counts, reset = counters(loaded)
    db_of = {str(r.get("id")): str(r.get("db_id", "")) for r in index.get("rows", [])}

    def grade_one(row: SplitRow, completion: str) -> RowResult:
        try:
            kwargs: dict[str, Any] = {"input": row.prompt, "output": completion, "expected": row.gold}
            reset()
            call = call_score(fn, **kwargs)
            detail, sql, outcome = call.detail, None, call.outcome
            verdicts: dict = {}
            if call.kind == "scored":
                seen = [k for k, v in counts().items() if v]
                outcome = seen[0] if len(seen) == 1 and seen[0] in OUTCOMES else ("match" if call.score == 1.0 else "mismatch")
                if callable(detail_fn):
                    outcome, detail, sql, verdicts = _details(detail_fn, kwargs, call.score, outcome)
            return RowResult(row.id, db_of.get(row.id, ""), row.question, row.gold, completion, sql, call.score,
                             outcome or "crash", detail, verdicts.get("original_score", call.score),
                             verdicts.get("decided_on", "original"), **verdicts.get("comparable", {}))
        except Exception as exc:
            raise row_failed(row.id, exc) from exc

    return grade_one


def row_failed(row_id: str, exc: BaseException, where: str = "") -> UnexpectedError:
    """The error for an exception no call should raise while grading ``row_id``: the row, the
    exception and its traceback, so that a failure in a worker process is as clear as one here."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    return UnexpectedError(f"grading eval row {row_id}{where} failed: {type(exc).__name__}: {exc} (a bug of the "
                           f"harness: please report it with the row and this traceback)\n{trace}")


def _details(detail_fn: Callable[..., Any], kwargs: dict, score: float | None,
             outcome: Outcome) -> tuple[Outcome, str, str | None, dict]:
    """(outcome, explanation, sql, both verdicts) from the bundle's ``grade``; a disagreement with the
    score is said. The verdicts are ``original_score``, ``decided_on`` and the leaderboards' (``comparable``)
    where the bundle gives them."""
    try:
        info = detail_fn(**kwargs)
    except Exception as exc:  # the score stands; the missing details are explained instead
        return outcome, f"grade() raised {type(exc).__name__}: {exc}", None, {}
    if not isinstance(info, dict):
        return outcome, f"grade() returned {type(info).__name__}, not a dict", None, {}
    verdicts: dict = {}
    original = info.get("original_score", score)
    if original is None or (isinstance(original, (int, float)) and not isinstance(original, bool)):
        verdicts["original_score"] = original
    if isinstance(info.get("decided_on"), str):
        verdicts["decided_on"] = info["decided_on"]
    verdicts["comparable"] = _comparable(info)
    detail = str(info.get("explanation", ""))
    if info.get("score") != score:
        detail = f"INCONSISTENT: grade() scored {info.get('score')!r}, the function {score!r}; {detail}"
    sql = info.get("sql")
    named = info.get("outcome")
    if named not in OUTCOMES:
        detail = f"grade() named the outcome {named!r}, not one of the bundle's; {detail}"
        named = outcome
    return named, detail, sql if isinstance(sql, str) else None, verdicts


def _comparable(info: dict) -> dict:
    """The leaderboards' verdicts and reasons ``grade()`` gave (a bundle from before them gives none)."""
    out: dict = {}
    for name in ("official_score", "bird_score"):
        value = info.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
            out[name] = float(value)
    for name in ("official_differs", "bird_differs", "answer"):
        if isinstance(info.get(name), str):
            out[name] = info[name]
    return out


def grader_summary(results: list[RowResult]) -> dict:
    """The evaluation summary as the trainer reports it: the mean over scored rows, unscored counted."""
    scores = [r.score for r in results if r.score is not None]
    outcomes = dict(collections.Counter(r.outcome for r in results))
    mean = sum(scores) / len(scores) if scores else None
    line = (f"grader: {len(results)} rows, {len(scores)} scored, {len(results) - len(scores)} unscored "
            f"(excluded from the mean), mean score {'-' if mean is None else f'{mean:.4f}'}  "
            f"[{', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))}]")
    faults = sum(1 for r in results if r.outcome in ("crash", "bad_return"))
    return {"rows": len(results), "scored": len(scores), "unscored": len(results) - len(scores),
            "mean": mean, "outcomes": outcomes, "faults": faults, "line": line}
