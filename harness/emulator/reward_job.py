"""The emulated trainer's reward job: GRPO-shaped steps of reward calls over the rl split.

Steps of ``prompts_per_step`` rl rows x ``group_size`` completions each, all calls of a step made
concurrently (a thread pool, as a trainer's reward workers share one process), with verl's
keywords and the least the trainer may pass (completion + gold). Per step: the reward mean, the
share of rollouts scored zero and scored full, the bundle's outcome counts. Under a reward shape
(harness.common.reward_shape), "zero" is the least the shape pays and "full" what it pays a
match, and the calls may return anything within the shape's bounds.

Standard library only: this runs inside the trainer container too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import time
from collections.abc import Callable

from harness.common.bundle_loader import LoadedBundle
from harness.common.errors import InputError
from harness.common.reward_shape import BINARY_SHAPE, DeclaredShape
from harness.common.rows import SplitRow
from harness.emulator.calls import Call, call_score, counters, shape_for

# Completions used when no file is given: the gold, the gold in a fence (both score 1), a query
# with other rows and prose without SQL (both score 0). Deterministic, so runs compare.
SYNTHETIC = ("{gold}", "```sql\n{gold}\n```", "SELECT 1 WHERE 0 = 1", "I cannot answer that.")


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


def reward_steps(loaded: LoadedBundle, rows: list[SplitRow], groups: list[list[str]], *, function: str = "reward",
                 prompts_per_step: int = 8, steps: int | None = None, threads: int = 8,
                 say: Callable[[str], None] = lambda line: None) -> list[StepStats]:
    """GRPO-shaped reward calls: each step takes the next ``prompts_per_step`` rows (wrapping)."""
    if not rows:
        raise InputError("the rl split has no rows: nothing to reward")
    if prompts_per_step < 1 or threads < 1:
        raise InputError("--prompts-per-step and --threads must be at least 1")
    fn = loaded.function(function)
    shape = shape_for(loaded, function)
    counts, reset = counters(loaded)
    steps = steps if steps is not None else math.ceil(len(rows) / prompts_per_step)
    out = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        for step in range(steps):
            picked = [(step * prompts_per_step + j) % len(rows) for j in range(prompts_per_step)]
            reset()
            started = time.monotonic()
            futures = [pool.submit(call_score, fn, bounds=shape.bounds, data_source="spider", solution_str=completion,
                                   ground_truth=rows[i].gold, extra_info={"split": rows[i].split, "index": i})
                       for i in picked for completion in groups[i]]
            calls = [f.result() for f in futures]
            stats = _step_stats(step + 1, calls, time.monotonic() - started, counts(), shape)
            say(stats.line())
            out.append(stats)
    return out


def _step_stats(step: int, calls: list[Call], seconds: float, outcomes: dict[str, int],
                shape: DeclaredShape = BINARY_SHAPE) -> StepStats:
    scores = [c.score for c in calls if c.score is not None]
    problems = [c.detail for c in calls if c.kind != "scored"]
    n = len(scores)
    return StepStats(step, len(calls), n, sum(scores) / n if n else None,
                     sum(1 for s in scores if s == shape.least) / n if n else None,
                     sum(1 for s in scores if shape.pays("match", s)) / n if n else None,
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
