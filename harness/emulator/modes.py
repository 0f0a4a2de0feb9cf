"""The emulated trainer's two jobs on a loaded bundle: GRPO reward steps and the evaluation grader.

* Reward mode: steps of ``prompts_per_step`` rl rows x ``group_size`` completions each, all calls of
  a step made concurrently (a thread pool, as a trainer's reward workers share one process), with
  verl's keywords and the least the trainer may pass (completion + gold). Per step: the reward
  mean, the share of rollouts scored zero and scored full, the bundle's outcome counts.
* Grader mode: one call per eval row with the envelope (``input``, ``output``, ``expected``); the
  mean score with unscored rows (an infrastructure error raised by the bundle) excluded and counted,
  as the trainer reports it.

Standard library only: this runs inside the trainer container too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

from harness.common.errors import InputError

ROLES = ("system", "user", "assistant")
# Completions used when no file is given: the gold, the gold in a fence (both score 1), a query
# with other rows and prose without SQL (both score 0). Deterministic, so runs compare.
SYNTHETIC = ("{gold}", "```sql\n{gold}\n```", "SELECT 1 WHERE 0 = 1", "I cannot answer that.")


@dataclasses.dataclass(frozen=True)
class SplitRow:
    """One chat row of a split; ``id`` is ``<split>-<line number, 5 digits>`` as in the bundle's index."""

    id: str
    split: str
    messages: tuple[dict, ...]

    @property
    def gold(self) -> str:
        return self.messages[-1]["content"]

    @property
    def question(self) -> str:
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")

    @property
    def prompt(self) -> list[dict]:
        return [dict(m) for m in self.messages[:-1]]


def row_problem(data: object) -> str | None:
    """Why a parsed JSONL line is not a well-formed chat row (None when it is)."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list) or not data["messages"]:
        return "not an object with a non-empty 'messages' list"
    for message in data["messages"]:
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            return "a message without a role in system/user/assistant and a text content"
    if data["messages"][-1]["role"] != "assistant" or not data["messages"][-1]["content"].strip():
        return "does not end with a non-empty assistant message (the gold)"
    if not any(m["role"] == "user" for m in data["messages"]):
        return "no user message (the question)"
    return None


def read_split_lenient(path: str | os.PathLike, split: str) -> tuple[list[SplitRow], list[str]]:
    """The rows of a split and a problem per malformed line ("file:line: why"); rows keep their line's id."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read split {path}: {exc}; run `make bundle` to write the splits") from None
    rows, problems = [], []
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except ValueError as exc:
            problems.append(f"{path}:{number}: not JSON ({exc})")
            continue
        problem = row_problem(data)
        if problem:
            problems.append(f"{path}:{number}: {problem}")
            continue
        rows.append(SplitRow(f"{split}-{number - 1:05d}", split, tuple(data["messages"])))
    return rows, problems


def read_split(path: str | os.PathLike, split: str) -> list[SplitRow]:
    """The rows of a split; InputError naming the first malformed line."""
    rows, problems = read_split_lenient(path, split)
    if problems:
        raise InputError(f"{problems[0]} (and {len(problems) - 1} more); regenerate the split with `make bundle`"
                         if len(problems) > 1 else f"{problems[0]}; regenerate the split with `make bundle`")
    return rows


# --- calling the bundle ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Call:
    """What one call to the bundle gave: a score, or why there is none."""

    score: float | None
    kind: str  # "scored", "unscored" (the bundle raised its infrastructure error), "crash", "bad_return"
    detail: str = ""
    outcome: str = ""  # for unscored calls: the error's outcome (gold_error / infrastructure_error)


def is_infrastructure_error(exc: BaseException) -> bool:
    """The bundle's typed "not the model's fault" error (matched by name: the class lives in the zip)."""
    return any(k.__name__ == "ScoringInfrastructureError" for k in type(exc).__mro__)


def call_score(fn: Callable[..., Any], **kwargs: Any) -> Call:
    """Call a scoring function as the trainer would, classifying what comes back."""
    try:
        value = fn(**kwargs)
    except Exception as exc:  # classified, never swallowed: reported as unscored or as a crash
        if is_infrastructure_error(exc):
            return Call(None, "unscored", f"{type(exc).__name__}: {exc}",
                        str(getattr(exc, "outcome", "infrastructure_error")))
        return Call(None, "crash", f"{type(exc).__name__}: {exc}", "crash")
    if isinstance(value, dict):  # verl accepts {"score": ...}
        value = value.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return Call(None, "bad_return", f"returned {value!r}, not a number in [0, 1]", "bad_return")
    return Call(float(value), "scored")


def _counters(loaded) -> tuple[Callable[[], dict], Callable[[], None]]:
    """The bundle's outcome telemetry (verify.outcome_counts / reset_outcome_counts), or no-ops."""
    try:
        verify = loaded.module("verify")
        return verify.outcome_counts, verify.reset_outcome_counts
    except (InputError, AttributeError):
        return dict, lambda: None


# --- reward mode ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StepStats:
    step: int
    calls: int
    scored: int
    mean: float | None
    share_zero: float | None
    share_full: float | None
    unscored: int
    crashes: int
    seconds: float
    outcomes: dict[str, int]
    first_problem: str = ""

    def line(self) -> str:
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        seen = ", ".join(f"{k} {v}" for k, v in self.outcomes.items() if v)
        extra = f"  unscored {self.unscored}" if self.unscored else ""
        extra += f"  CRASHES {self.crashes}" if self.crashes else ""
        return (f"step {self.step:3d}  {self.calls} calls  reward mean {fmt(self.mean)}  zero {fmt(self.share_zero)}"
                f"  full {fmt(self.share_full)}  {self.seconds * 1000:.0f} ms{extra}  [{seen}]")


def groups_for(rows: list[SplitRow], completions_by_row: list[list[str]] | None, group_size: int) -> list[list[str]]:
    """A group of ``group_size`` completions per row: the file's (cycled when shorter) or SYNTHETIC."""
    out = []
    for i, row in enumerate(rows):
        given = completions_by_row[i] if completions_by_row is not None else \
            [t.format(gold=row.gold) for t in SYNTHETIC]
        if not given:
            raise InputError(f"no completion for row {row.id}: give at least one per rl row")
        out.append([given[j % len(given)] for j in range(group_size)])
    return out


def reward_steps(loaded, rows: list[SplitRow], groups: list[list[str]], *, function: str = "reward",
                 prompts_per_step: int = 8, steps: int | None = None, workers: int = 8,
                 say: Callable[[str], None] = lambda line: None) -> list[StepStats]:
    """GRPO-shaped reward calls: each step takes the next ``prompts_per_step`` rows (wrapping)."""
    if not rows:
        raise InputError("the rl split has no rows: nothing to reward")
    if prompts_per_step < 1 or workers < 1:
        raise InputError("--prompts-per-step and --workers must be at least 1")
    fn = loaded.function(function)
    counts, reset = _counters(loaded)
    steps = steps if steps is not None else math.ceil(len(rows) / prompts_per_step)
    out = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for step in range(steps):
            picked = [(step * prompts_per_step + j) % len(rows) for j in range(prompts_per_step)]
            reset()
            started = time.monotonic()
            futures = [pool.submit(call_score, fn, data_source="spider", solution_str=completion,
                                   ground_truth=rows[i].gold, extra_info={"split": rows[i].split, "index": i})
                       for i in picked for completion in groups[i]]
            calls = [f.result() for f in futures]
            stats = _step_stats(step + 1, calls, time.monotonic() - started, counts())
            say(stats.line())
            out.append(stats)
    return out


def _step_stats(step: int, calls: list[Call], seconds: float, outcomes: dict[str, int]) -> StepStats:
    scores = [c.score for c in calls if c.score is not None]
    problems = [c.detail for c in calls if c.kind != "scored"]
    n = len(scores)
    return StepStats(step, len(calls), n, sum(scores) / n if n else None,
                     sum(1 for s in scores if s == 0.0) / n if n else None,
                     sum(1 for s in scores if s == 1.0) / n if n else None,
                     sum(1 for c in calls if c.kind == "unscored"),
                     sum(1 for c in calls if c.kind in ("crash", "bad_return")), seconds,
                     {k: v for k, v in outcomes.items()}, problems[0] if problems else "")


def reward_summary(stats: list[StepStats]) -> dict:
    """Totals over the steps: calls, throughput, mean reward, unscored and crashed calls."""
    calls = sum(s.calls for s in stats)
    seconds = sum(s.seconds for s in stats)
    scored = sum(s.scored for s in stats)
    total = sum((s.mean or 0.0) * s.scored for s in stats)
    outcomes: dict[str, int] = {}
    for s in stats:
        for k, v in s.outcomes.items():
            outcomes[k] = outcomes.get(k, 0) + v
    return {"steps": len(stats), "calls": calls, "seconds": seconds,
            "calls_per_s": calls / seconds if seconds else None,
            "mean": total / scored if scored else None, "scored": scored,
            "unscored": sum(s.unscored for s in stats), "crashes": sum(s.crashes for s in stats),
            "outcomes": outcomes}


# --- grader mode ----------------------------------------------------------------------------------

def grade_records(loaded, rows: list[SplitRow], completions: list[str], *, function: str = "grader",
                  say: Callable[[str], None] = lambda line: None) -> list[dict]:
    """One trainer call per eval row; a per-row record with harness.common.results.FIELDS keys each.

    The score is what ``function`` returns (what the trainer records). Outcome, explanation and the
    extracted SQL come from the module's ``grade`` when it has one, else from the outcome counters.
    """
    if len(completions) != len(rows):
        raise InputError(f"{len(completions)} completions for {len(rows)} eval rows; give one per row")
    fn = loaded.function(function)
    module_name = function.partition(":")[0]
    detail_fn = getattr(loaded.module(module_name), "grade", None)
    counts, reset = _counters(loaded)
    db_of = {str(r.get("id")): r.get("db_id", "") for r in loaded.index().get("rows", [])}
    records = []
    for row, completion in zip(rows, completions):
        kwargs = {"input": row.prompt, "output": completion, "expected": row.gold}
        reset()
        call = call_score(fn, **kwargs)
        seen = [k for k, v in counts().items() if v]
        outcome = call.outcome or (seen[0] if len(seen) == 1 else "scored")
        detail, sql = call.detail, None
        if call.kind == "scored" and callable(detail_fn):
            outcome, detail, sql = _details(detail_fn, kwargs, call.score, outcome)
        records.append({"row_id": row.id, "db_id": db_of.get(row.id, ""), "question": row.question,
                        "gold": row.gold, "completion": completion, "sql": sql, "score": call.score,
                        "outcome": outcome, "detail": detail})
    say(grader_summary(records)["line"])
    return records


def _details(detail_fn: Callable[..., Any], kwargs: dict, score: float | None,
             outcome: str) -> tuple[str, str, str | None]:
    """(outcome, explanation, sql) from the bundle's ``grade``; a disagreement with the score is said."""
    try:
        info = detail_fn(**kwargs)
    except Exception as exc:  # the score stands; the missing details are explained instead
        return outcome, f"grade() raised {type(exc).__name__}: {exc}", None
    if not isinstance(info, dict):
        return outcome, f"grade() returned {type(info).__name__}, not a dict", None
    detail = str(info.get("explanation", ""))
    if info.get("score") != score:
        detail = f"INCONSISTENT: grade() scored {info.get('score')!r}, the function {score!r}; {detail}"
    sql = info.get("sql")
    return str(info.get("outcome", outcome)), detail, sql if isinstance(sql, str) else None


def grader_summary(records: list[dict]) -> dict:
    """The evaluation summary as the trainer reports it: the mean over scored rows, unscored counted."""
    scores = [r["score"] for r in records if r["score"] is not None]
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    mean = sum(scores) / len(scores) if scores else None
    line = (f"grader: {len(records)} rows, {len(scores)} scored, {len(records) - len(scores)} unscored "
            f"(excluded from the mean), mean score {'-' if mean is None else f'{mean:.4f}'}  "
            f"[{', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))}]")
    return {"rows": len(records), "scored": len(scores), "unscored": len(records) - len(scores),
            "mean": mean, "outcomes": outcomes, "line": line}


def grade_rows(loaded, rows: list[SplitRow], completions: list[str], **options: Any) -> list:
    """``grade_records`` as harness.common.results.RowResult objects (host side: the container lacks harness.common.results)."""
    from harness.common.results import RowResult
    return [RowResult(**record) for record in grade_records(loaded, rows, completions, **options)]
