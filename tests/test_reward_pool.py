"""harness.raygrade.reward_pool: the bundle's compute_score in Ray actors the way verl's reward loop runs it.

The entry point is picklable and loads the bundle by path in whichever process calls it: the same
scores directly, in fork and spawn process pools, and in a pool of Ray actors on a local instance,
where each worker loads the bundle once and keeps its gold results for later calls.
"""

from __future__ import annotations

import multiprocessing
import pickle
import zipfile

import pytest

from conftest import require_modules
from harness.common.jsonl import read_jsonl
from harness.raygrade.env import ray_environment
from harness.raygrade.reward_pool import BundleReward, RewardWorker, score_batch, start_pool


@pytest.fixture(scope="module")
def unpacked(sample_zip, tmp_path_factory):
    folder = tmp_path_factory.mktemp("reward-pool") / "bundle"
    with zipfile.ZipFile(sample_zip) as z:
        z.extractall(folder)
    return str(folder)


@pytest.fixture(scope="module")
def items(exported_rl):
    """verl rows with responses: the gold, SELECT 1, the gold with LIMIT 0; and one stale row."""
    rows = [data for _n, data in read_jsonl(exported_rl["verl"], "verl rows", "")]
    out = []
    for i, row in enumerate(rows):
        gold = row["reward_model"]["ground_truth"]
        response = [gold, "SELECT 1", gold + " LIMIT 0"][i % 3]
        out.append({"data_source": row["data_source"], "solution_str": response, "ground_truth": gold,
                    "extra_info": row["extra_info"]})
    out.append({"data_source": "spider", "solution_str": "SELECT 1", "ground_truth": "SELECT 42 FROM nowhere",
                "extra_info": {}})
    return out


def direct(unpacked, items):
    return RewardWorker(unpacked).score(items)


def call(reward, item):
    try:
        return reward(**item)
    except Exception as exc:
        return getattr(exc, "code", repr(exc))


def test_the_worker_scores_and_leaves_a_stale_row_unscored(unpacked, items):
    scores = direct(unpacked, items)
    assert [s["score"] for s in scores[:6]] == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert scores[-1]["score"] is None and scores[-1]["error"] == "stale_bundle"


def test_the_entry_point_pickles_without_its_loaded_module(unpacked, items):
    reward = BundleReward(unpacked)
    assert reward(**items[0]) == 1.0 and reward.loaded
    copy = pickle.loads(pickle.dumps(reward))
    assert not copy.loaded and copy(**items[0]) == 1.0 and copy.loads == 1


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_fork_and_spawn_pools_give_the_same_scores(unpacked, items, method):
    reward = BundleReward(unpacked)
    expected = [call(reward, item) for item in items]  # loaded in this process first: a fork child inherits it
    pool = multiprocessing.get_context(method).Pool(2)
    try:
        assert pool.starmap(call, [(reward, item) for item in items]) == expected
    finally:
        # the workers end on the pool's own sentinels: ``with Pool`` would terminate them by SIGTERM, which
        # a handler this process inherited (ray.init sets one for its driver) can keep from ending a fork child
        pool.close()
        pool.join()


@pytest.mark.integration
def test_a_ray_actor_pool_scores_in_order_and_caches_gold_results_per_worker(unpacked, items):
    require_modules("ray")
    expected = direct(unpacked, items)
    with ray_environment(None):
        import ray
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _node_ip_address="127.0.0.1")
        try:
            pool = start_pool(ray, unpacked, 2)
            first = score_batch(ray, pool, items)
            before = ray.get([w.stats.remote() for w in pool])
            again = score_batch(ray, pool, items)
            after = ray.get([w.stats.remote() for w in pool])
        finally:
            ray.shutdown()
    assert first == again == expected
    assert len({s["pid"] for s in after}) == 2 and all(s["loads"] == 1 for s in after)
    assert all(s["gold_results_cached"] > 0 for s in before)
    assert [s["gold_results_cached"] for s in after] == [s["gold_results_cached"] for s in before]  # reused
