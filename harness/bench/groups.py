"""`bench`, GRPO-shaped batches: reward throughput with a group's duplicates scored once, and without.

A GRPO step asks the reward for groups of ``GROUP`` completions of one prompt (TRL's
``num_generations``), ``PROMPTS`` prompts a call. A sampled group often repeats a completion; the
bundle scores identical (completion text, row) pairs of one batch once (bundle/scoring/batch.py).
The duplicate rates are assumed, not measured (no sampled groups of a model are at hand offline):
each group here has 8, 4 or 2 distinct completions (0, 50 or 75% duplicates), drawn from eight
distinct variants of the row's gold (the gold, a fenced copy, lower case, DISTINCT, LIMIT 0,
``SELECT 1``, a catalogue query, prose). With: ``trl_reward`` on the batch. Without: the same call
with every repeat made distinct by trailing blanks (which no rule of extraction keeps), so that
nothing is shared and every completion is scored. Gold results are warm in both (stored or
computed once before timing), as in training after the first step. The scores with and without
sharing must be equal, or the benchmark fails.

>>> [variants("SELECT a FROM t")[i] for i in (0, 2, 5)]
['SELECT a FROM t', 'select a from t', 'SELECT 1']
>>> group(["a", "b", "c"], 8, 2)
['a', 'b', 'a', 'b', 'a', 'b', 'a', 'b']
>>> unshared(["a", "b", "a", "a"])
['a', 'b', 'a ', 'a  ']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from harness.bench.budget import best_of
from harness.common.errors import HarnessError

GROUP = 8
PROMPTS = 2  # prompts a reward call: 16 completions
ROWS = 100  # dev rows used: 50 reward calls per duplicate rate
DISTINCT = (8, 4, 2)


def variants(gold: str) -> list[str]:
    """Eight distinct completions for a row (right, wrong and empty alike)."""
    return [gold, f"```sql\n{gold}\n```", gold.lower(), gold.replace("SELECT", "SELECT DISTINCT", 1),
            f"{gold} LIMIT 0", "SELECT 1", "SELECT count(*) FROM sqlite_master", "I cannot answer that."]


def group(pool: list[str], size: int, distinct: int) -> list[str]:
    """A group of ``size`` completions with ``distinct`` different texts, repeated in turn."""
    return [pool[i % distinct] for i in range(size)]


def unshared(completions: list[str]) -> list[str]:
    """The same completions with every repeat padded by trailing blanks: no two identical."""
    seen: dict[str, int] = {}
    out = []
    for text in completions:
        seen[text] = seen.get(text, -1) + 1
        out.append(text + " " * seen[text])
    return out


def run(root: Path, rows: list[dict], repeat: int) -> dict:
    """Completions a second with and without sharing, per assumed duplicate rate (the staged dev bundle at ``root``)."""
    reward = importlib.import_module(f"{root.name}.reward")  # imported by harness.bench.calls.run
    chunks = [rows[i:i + PROMPTS] for i in range(0, len(rows) - PROMPTS + 1, PROMPTS)]
    out: dict = {"group": GROUP, "prompts_per_call": PROMPTS, "calls": len(chunks), "rates": {}}
    for distinct in DISTINCT:
        calls = [_call(chunk, distinct) for chunk in chunks]
        for completions, columns in calls:  # warm (every gold result known before timing), and the same scores
            if reward.trl_reward(completions, **columns) != reward.trl_reward(unshared(completions), **columns):
                raise HarnessError(f"scoring a group's duplicates once changed a score ({distinct} distinct a group)")
        shared = alone = 0.0
        for c, k in calls:  # interleaved: both see the same load
            shared += best_of(_call_of(reward, c, k), repeat)
            alone += best_of(_call_of(reward, unshared(c), k), repeat)
        total = sum(len(c) for c, _ in calls)
        out["rates"][str(distinct)] = {"duplicates": 1 - distinct / GROUP, "completions": total,
                                       "with_per_s": total / shared, "without_per_s": total / alone,
                                       "speedup": alone / shared}
    return out


def _call(chunk: list[dict], distinct: int) -> tuple[list[str], dict[str, list[str]]]:
    """One reward call's completions and columns (TRL passes the prompts): a group per row of ``chunk``.

    Spider repeats a gold under several questions: with its prompt, each row is its own."""
    completions = [c for r in chunk for c in group(variants(r["query"]), GROUP, distinct)]
    return completions, {"prompts": [r.get("question", "") for r in chunk for _ in range(GROUP)],
                         "ground_truth": [r["query"] for r in chunk for _ in range(GROUP)],
                         "db_id": [r["db_id"] for r in chunk for _ in range(GROUP)]}


def _call_of(reward, completions: list[str], columns: dict[str, list[str]]) -> Callable[[], object]:
    return lambda: reward.trl_reward(completions, **columns)


def print_figures(f: dict) -> None:
    print(f"GRPO batches        {f['calls']} reward calls of {f['prompts_per_call']} prompts x {f['group']} completions; "
          "duplicate rates assumed, not measured")
    for distinct, x in f["rates"].items():
        print(f"  {distinct} distinct a group ({x['duplicates']:.0%} duplicates): {x['with_per_s']:,.0f} completions/s "
              f"scoring each distinct once, {x['without_per_s']:,.0f} scoring every one, x{x['speedup']:.2f}")
