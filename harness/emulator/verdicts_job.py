"""The emulated trainer's verdicts job: every verdict of the hostile suite, a reward pass and a
grader pass, in a form two runs can be compared by (docs/emulator.md, "Verdicts on a slow CPU").

A verdict is a pure function of (completion, row, bundle): the same on a fast machine and in a
container limited to a quarter of a CPU. This job records, in order:

* ``hostile``: each hostile case on the bundle's first database, through the bundle's ``verify``
  (outcome, score and the work counted);
* ``reward``: one call per completion of each rl row's group (the file's completions, or the
  synthetic ones), with verl's keywords, one at a time (the score, or the unscored outcome);
* ``grader``: one call per eval row with the given completions (outcome, score, the database
  that decided).

Nothing timed is in the lists; ``seconds`` beside them is reported only. Standard library only:
this runs inside the trainer container too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness.common.bundle_loader import LoadedBundle
from harness.common.rows import SplitRow
from harness.emulator import grader_job, hostile
from harness.emulator.calls import call_score, shape_for


def hostile_verdicts(loaded: LoadedBundle, scratch: Path) -> list[list]:
    verify_mod = loaded.module("verify")
    files = loaded.database_files()
    first = next((r for r in loaded.index().get("rows", []) if r.get("db_id") in files), None)
    if first is None:
        return []
    database = files[first["db_id"]]
    out = []
    for case in hostile.load_cases(hostile.first_table(database), str(scratch)):
        verdict = verify_mod.verify(case.text, first["gold"], str(database), is_sql=case.is_sql)
        out.append([case.id, verdict.outcome, verdict.score, verdict.steps])
    return out


def reward_verdicts(loaded: LoadedBundle, rows: list[SplitRow], groups: list[list[str]]) -> list[list]:
    fn = loaded.function("reward")
    bounds = shape_for(loaded).bounds
    out = []
    for row, group in zip(rows, groups):
        for k, completion in enumerate(group):
            call = call_score(fn, bounds=bounds, data_source="spider", solution_str=completion, ground_truth=row.gold,
                              extra_info={"row_id": row.id})
            out.append([row.id, k, call.score, call.outcome])
    return out


def grader_verdicts(loaded: LoadedBundle, rows: list[SplitRow], completions: list[str]) -> list[list]:
    grader_job.check_inputs(loaded.index(), rows, completions)
    return [[r.row_id, r.outcome, r.score, r.decided_on] for r in grader_job.grade_rows(loaded, rows, completions)]


def all_verdicts(loaded: LoadedBundle, scratch: Path, rl: tuple[list[SplitRow], list[list[str]]],
                 eval_rows: tuple[list[SplitRow], list[str]] | None,
                 say: Callable[[str], None] = lambda line: None) -> dict:
    """The three lists, and the seconds each took (reported, never compared)."""
    out: dict = {"seconds": {}}
    parts: list[tuple[str, Callable[[], list]]] = [
        ("hostile", lambda: hostile_verdicts(loaded, scratch)),
        ("reward", lambda: reward_verdicts(loaded, *rl))]
    if eval_rows is not None:
        parts.append(("grader", lambda: grader_verdicts(loaded, *eval_rows)))
    for name, make in parts:
        started = time.monotonic()
        out[name] = make()
        out["seconds"][name] = time.monotonic() - started
        say(f"{name}: {len(out[name])} verdicts in {out['seconds'][name]:.1f} s")
    return out
