"""GRPO reward: execution match of a rollout's SQL against the row's gold query, once per rollout.

Entry points (each survives ``pickle`` and ``cloudpickle`` into a process that has the unpacked
bundle at the same path: bundle_package.EntryPoint):

* ``compute_score(...)``: verl keywords (``data_source, solution_str, ground_truth, extra_info``),
  verl's batch form (``solution_strs=[...]``..., one score per item) or the envelope (``input,
  output, expected``); returns 1.0 (same rows as the gold) or 0.0, or with ``outcome_fields=True``
  a dict of the score and its outcome (scoring_batch);
* ``trl_reward(completions, **columns)``: TRL's batched form, one float (or None) per completion;
* ``trl_reward_async(completions, **columns)``: the same scores from a coroutine, the work done in a
  worker thread, so that TRL, which gathers its async reward functions on one event loop, runs the
  others meanwhile.

That is the ``binary`` reward shape, the default. A bundle built with another shape
(``prepare --reward-shape``: ``skyrl-sql``, ``arctic-text2sql-r1``, ``sql-r1``, or a custom table;
reward_shapes) pays that shape's value for each outcome instead, which may lie outside [0, 1]; the
verdict, its outcome and the grader are the same under every shape.

Model mistakes score 0.0 (the shape's value for their outcome). Infrastructure faults (stale bundle, missing database, failing gold)
raise a ``contract.errors.ScoringInfrastructureError`` subclass whose message says what to do from
``compute_score``; ``trl_reward`` gives that completion None and warns (a RuntimeWarning, ``contract.errors.UNSCORED_WARNING``).
"""

from __future__ import annotations

import asyncio
import functools

try:
    from . import bundle_package
    from .scoring import batch as scoring_batch
    from .scoring import entry as scoring_entry
except ImportError:  # loaded as a file with no parent package (verl's custom_reward_function.path)
    import importlib.util as _util
    import os as _os

    _spec = _util.spec_from_file_location("_spider_scoring_bundle_package",
                                          _os.path.join(_os.path.dirname(_os.path.realpath(__file__)), "bundle_package.py"))
    _loader = _util.module_from_spec(_spec)  # type: ignore[arg-type]
    _spec.loader.exec_module(_loader)  # type: ignore[union-attr]
    bundle_package = _loader.sibling(__file__, "bundle_package")
    scoring_batch = _loader.sibling(__file__, "scoring.batch")
    scoring_entry = _loader.sibling(__file__, "scoring.entry")

_entry_point = bundle_package.entry_point(__file__)


@_entry_point
def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kwargs):
    """Score one rollout (or verl's batch of them); see the module docstring."""
    kwargs.update(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                  extra_info=extra_info)
    return scoring_batch.compute_score(kwargs)


def _is_column(values: object, size: int) -> bool:
    """A dataset column as TRL passes it: any sequence (list, tuple, array) with one item per completion."""
    if isinstance(values, (str, bytes, bytearray, dict)) or not hasattr(values, "__getitem__"):
        return False
    try:
        return len(values) == size  # type: ignore[arg-type]
    except TypeError:
        return False


@_entry_point
def trl_reward(completions, prompts=None, log_metric=None, log_extra=None, **columns) -> list:
    """TRL reward function: one score per completion; None where the row carries no gold or cannot be scored.

    Only the completions TRL passes are scored; a dataset column is never read as a completion
    (one named ``output`` or ``solution_str`` is ignored). Columns are sequences aligned with
    ``completions``; the gold is the first of ground_truth, expected, gold, reference, solution,
    answer, query, sql given, else the last assistant message of ``messages``; ``db_id`` and
    ``extra_info`` columns are hints. Identical completions of one row are scored once. A
    completion the bundle cannot score gets None and a RuntimeWarning; the others are scored.
    With TRL's ``log_metric`` / ``log_extra``, the batch's outcome shares and each completion's
    outcome and explanation are logged (scoring_batch.report).

    >>> trl_reward(["SELECT 1"], ground_truth=[None])
    [None]
    """
    size = len(completions)
    aligned = {name: values for name, values in columns.items() if _is_column(values, size)}
    have_prompts = prompts is not None and _is_column(prompts, size)
    calls = []
    for i, completion in enumerate(completions):
        row = {name: values[i] for name, values in aligned.items()}
        calls.append(scoring_batch.read_or_fault(scoring_entry.read_trl_row, completion, row,
                                                 prompts[i] if have_prompts else None))
    scored = scoring_batch.score_calls(calls)
    scoring_batch.report(scored, log_metric, log_extra)
    return [item.score for item in scored]


@_entry_point
async def trl_reward_async(completions, prompts=None, log_metric=None, log_extra=None, **columns) -> list:
    """TRL reward function, async: ``trl_reward``'s scores, computed in a worker thread.

    The event loop that awaits it is never blocked by a query: TRL gathers its async reward
    functions (an LLM judge, a format check) on one loop, and they run while the bundle scores.
    The verdicts are ``trl_reward``'s: each thread has its own connections, and nothing a verdict
    depends on is read from the clock or the thread.

    >>> import asyncio
    >>> asyncio.run(trl_reward_async(["SELECT 1"], ground_truth=[None]))
    [None]
    """
    call = functools.partial(trl_reward, completions, prompts=prompts, log_metric=log_metric, log_extra=log_extra,
                             **columns)
    return await asyncio.get_running_loop().run_in_executor(None, call)
