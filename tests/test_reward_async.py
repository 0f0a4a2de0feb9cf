"""``reward.trl_reward_async``: ``trl_reward``'s scores from a coroutine that never blocks its event loop
(TRL gathers async reward functions on one loop: trl.trainer.utils.is_async_callable)."""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest

from bundle import reward
from conftest import require_modules, sample_rows

GOLD = "SELECT count(*) FROM Owner"


def _batch() -> tuple[list, dict]:
    """Every sample rl/train row's gold, a wrong answer and a constant, as TRL passes them, plus a row with no gold."""
    rows = sample_rows("train")
    completions, golds, db_ids = [], [], []
    for row in rows:
        for answer in (row["query"], "SELECT 1", f"```sql\n{row['query']}\n```"):
            completions.append(answer)
            golds.append(row["query"])
            db_ids.append(row["db_id"])
    completions.append(GOLD)
    golds.append(None)
    db_ids.append(None)
    return completions, {"ground_truth": golds, "db_id": db_ids}


def test_the_async_entry_gives_the_sync_one_s_scores(bundle_env):
    completions, columns = _batch()
    sync = reward.trl_reward(completions, **columns)
    assert asyncio.run(reward.trl_reward_async(completions, **columns)) == sync
    assert 1.0 in sync and 0.0 in sync and sync[-1] is None


def test_the_async_entry_logs_what_the_sync_one_logs(bundle_env):
    completions, columns = _batch()
    logged: dict[str, list] = {"sync": [], "async": []}

    def logger(key):
        return lambda *args, **kwargs: logged[key].append(json.dumps([args, kwargs], sort_keys=True, default=str))

    reward.trl_reward(completions, log_metric=logger("sync"), log_extra=logger("sync"), **columns)
    asyncio.run(reward.trl_reward_async(completions, log_metric=logger("async"), log_extra=logger("async"), **columns))
    assert logged["sync"] and logged["async"] == logged["sync"]


def test_trl_takes_it_for_an_async_reward(bundle_env):
    require_modules("trl")
    from trl.trainer.utils import is_async_callable
    assert is_async_callable(reward.trl_reward_async) and not is_async_callable(reward.trl_reward)
    assert inspect.iscoroutinefunction(reward.trl_reward_async.__call__)
    assert reward.trl_reward_async.__name__ == "trl_reward_async"  # TRL names the metric after it


def test_the_event_loop_runs_other_work_while_the_bundle_scores(bundle_env):
    # A blocking reward would run to its end inside its first step, before the other task starts; this
    # one hands the work to a thread and awaits it, so the other task's first step comes first.
    completions, columns = _batch()
    order: list[str] = []

    async def scored():
        scores = await reward.trl_reward_async(completions, **columns)
        order.append("scored")
        return scores

    async def other():
        order.append("other")

    async def both():
        return await asyncio.gather(scored(), other())

    scores, _ = asyncio.run(both())
    assert order == ["other", "scored"] and len(scores) == len(completions)


def test_the_order_check_can_fail(bundle_env):
    completions, columns = _batch()
    order: list[str] = []

    async def blocking():
        scores = reward.trl_reward(completions, **columns)  # the sync entry, called on the loop
        order.append("scored")
        return scores

    async def other():
        order.append("other")

    async def both():
        return await asyncio.gather(blocking(), other())

    asyncio.run(both())
    assert order == ["scored", "other"]


@pytest.mark.parametrize("concurrent", [4])
def test_concurrent_awaits_score_as_one_call_does(bundle_env, concurrent):
    completions, columns = _batch()
    sync = reward.trl_reward(completions, **columns)

    async def many():
        return await asyncio.gather(*(reward.trl_reward_async(completions, **columns) for _ in range(concurrent)))

    assert asyncio.run(many()) == [sync] * concurrent
