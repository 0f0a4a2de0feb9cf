"""GRPO reward: execution match of a rollout's SQL against the row's gold query, once per rollout.

Entry points:

* ``compute_score(...)``: verl keywords (``data_source, solution_str, ground_truth, extra_info``)
  or the envelope (``input, output, expected``); returns 1.0 (same rows as the gold) or 0.0.
* ``trl_reward(completions, **columns)``: TRL's batched form, one float (or None) per completion.

Model mistakes score 0.0. Infrastructure faults (stale bundle, missing database, failing gold)
raise a ``scoring_errors.ScoringInfrastructureError`` subclass whose message says what to do.
"""

from __future__ import annotations

try:
    from . import scoring_entry
except ImportError:  # run as a standalone file
    import scoring_entry  # type: ignore[no-redef]

_TRL_GOLD_COLUMNS = ("ground_truth", "gold", "solution", "answer", "query", "sql", "expected", "messages")


def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kwargs) -> float:
    """Score one rollout; see the module docstring."""
    kwargs.update(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                  extra_info=extra_info)
    return scoring_entry.score_kwargs(kwargs)


def trl_reward(completions, prompts=None, **columns) -> list:
    """TRL reward function: one score per completion; None where the row carries no gold.

    Dataset columns arrive as lists aligned with ``completions``; the gold is read from the first
    of ground_truth, gold, solution, answer, query, sql, expected, messages (last assistant turn).

    >>> trl_reward(["SELECT 1"], ground_truth=[None])
    [None]
    """
    scores = []
    for i, completion in enumerate(completions):
        row = {name: values[i] for name, values in columns.items()
               if isinstance(values, (list, tuple)) and len(values) == len(completions)}
        gold = next((row[c] for c in _TRL_GOLD_COLUMNS if row.get(c) is not None), None)
        if gold is None:
            scores.append(None)
            continue
        call = dict(row, completion=completion, ground_truth=gold)
        if prompts is not None and i < len(prompts):
            call["prompt"] = prompts[i]
        scores.append(scoring_entry.score_kwargs(call))
    return scores
