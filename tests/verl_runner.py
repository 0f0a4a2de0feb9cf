"""The packed bundle through verl 0.9.1's own reward plumbing (CPU, no download).

    python tests/verl_runner.py BUNDLE_FOLDER VERL_ROWS_JSONL OUT_JSON [rayloop]

BUNDLE_FOLDER is the unpacked zip. verl's config tree (``trainer/config/ppo_trainer.yaml``,
composed by hydra as ``main_ppo`` does) is given ``reward.custom_reward_function.path=
BUNDLE_FOLDER/reward.py`` (and ``grader.py``) with ``name=compute_score``, and verl's own
``get_custom_reward_fn`` loads it. A batch (verl's ``DataProto``, as rollout hands it over) of the
rows with mixed responses (the gold, ``SELECT 1``, a wrong query, prose with no query) is scored by the legacy
``NaiveRewardManager``, ``BatchRewardManager`` (the batch form, plural keyword lists) and
``PrimeRewardManager`` (a process pool: ``compute_score`` pickled), by the current naive manager
from ``load_reward_manager``, by ``rate_limited`` with a stale row added (it turns errors into 0.0),
and with ``rayloop`` by ``RewardLoopManager``, whose ``RewardLoopWorker`` Ray actors load the reward
by the same path in their own processes (a local Ray instance on loopback, harness.raygrade.env),
with the ``naive`` and the ``remote`` manager (``compute_score`` sent to a ``RewardComputeWorker``
actor by cloudpickle) and with ``outcome_fields`` set through ``reward_kwargs``. OUT_JSON gets every
score, the bundle's own verdicts and outcomes (``grader`` called directly) and what its reward pays
(``reward`` called directly: the verdict under a binary bundle, the shape's value under another).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time

for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
                    "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_TELEMETRY": "1"}.items():
    os.environ[name] = value
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.raygrade.env import loopback_env, ray_environment  # noqa: E402
from trl_runner import build_tokenizer, load_file  # noqa: E402

# Ray reads its settings when imported (verl imports it): the loopback environment goes first. No idle
# workers started ahead (one a CPU by default): the actors start their own, and on a loaded machine four
# idle interpreters starting beside them held the Ray loop for many minutes.
os.environ.update(loopback_env())
# Its workers at the caller's priority, not Ray's nice 15 (tests/conftest.py says why).
os.environ.update({"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0", "RAY_worker_niceness": "0"})

GENERIC = ("verify", "reward", "grader", "scoring_entry", "sql_guard", "bundle_index", "sql", "scoring", "search", "contract")


def reward_config(path: str, extra: list[str] = ()):
    import verl
    from hydra import compose, initialize_config_dir
    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = [f"reward.custom_reward_function.path={path}", "reward.custom_reward_function.name=compute_score"]
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides + list(extra))


def responses(rows):
    """Row i: the gold, ``SELECT 1``, a wrong query on the row's tables (the gold's last word cut) or
    prose with no query."""
    out = []
    for i, row in enumerate(rows):
        gold = row["reward_model"]["ground_truth"]
        out.append([gold, "SELECT 1", gold.rsplit(" ", 1)[0] + " LIMIT 0", "I cannot tell from this schema."][i % 4])
    return out


def batch(tokenizer, rows, texts):
    """A DataProto like the one verl's trainer hands a reward manager after rollout."""
    import numpy as np
    import torch
    from verl import DataProto
    P, R = 192, 96
    prompts, resp, attn = [], [], []
    for row, text in zip(rows, texts):
        p_ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        p_ids = list(p_ids["input_ids"] if hasattr(p_ids, "keys") else p_ids)[-P:]
        r_ids = tokenizer(text, add_special_tokens=False)["input_ids"][: R - 1] + [tokenizer.eos_token_id]
        pad = tokenizer.pad_token_id
        prompts.append([pad] * (P - len(p_ids)) + p_ids)
        resp.append(r_ids + [pad] * (R - len(r_ids)))
        attn.append([0] * (P - len(p_ids)) + [1] * len(p_ids) + [1] * len(r_ids) + [0] * (R - len(r_ids)))
    prompts_t, resp_t, attn_t = torch.tensor(prompts), torch.tensor(resp), torch.tensor(attn)
    return DataProto.from_dict(
        tensors={"prompts": prompts_t, "responses": resp_t, "attention_mask": attn_t,
                 "input_ids": torch.cat([prompts_t, resp_t], dim=1),
                 "position_ids": torch.clamp(attn_t.cumsum(-1) - 1, min=0)},
        non_tensors={key: np.array([r[key] for r in rows], dtype=object)
                     for key in ("data_source", "reward_model", "extra_info")})


def managers(tokenizer, rows, texts, path):
    from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager
    from verl.workers.reward_manager.batch import BatchRewardManager
    from verl.workers.reward_manager.naive import NaiveRewardManager as LegacyNaive
    from verl.workers.reward_manager.prime import PrimeRewardManager
    cfg = reward_config(path)
    current = load_reward_manager(cfg, tokenizer)
    data = batch(tokenizer, rows, texts)

    async def run_all():
        return await asyncio.gather(*[current.run_single(data[i:i + 1]) for i in range(len(data))])
    out = {"current": [r["reward_score"] for r in current.loop.run_until_complete(run_all())],
           "current_class": type(current).__name__}
    fn = get_custom_reward_fn(cfg)
    for name, kind in (("legacy", LegacyNaive), ("batch", BatchRewardManager), ("prime", PrimeRewardManager)):
        manager = kind(tokenizer=tokenizer, num_examine=0, compute_score=fn)
        out[name] = manager(batch(tokenizer, rows, texts), return_dict=True)["reward_tensor"].sum(-1).tolist()
    asyncio.set_event_loop(asyncio.new_event_loop())  # prime closed the one it made current
    return out


def rate_limited(tokenizer, rows, texts, path):
    """verl's rate_limited manager on the rows plus a stale one: what it makes of the bundle's error."""
    import warnings

    from verl.experimental.reward_loop.reward_manager.limited import RateLimitedRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn
    stale = dict(rows[0], reward_model={"style": "rule", "ground_truth": "SELECT 'a gold this bundle never saw'"})
    manager = RateLimitedRewardManager(config=None, tokenizer=tokenizer, compute_score=get_custom_reward_fn(reward_config(path)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = manager(batch(tokenizer, rows + [stale], texts + [texts[0]]), return_dict=True)
    info = found["reward_extra_info"]
    return {"scores": found["reward_tensor"].sum(-1).tolist(), "errors": list(info.get("error", [])),
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught
                         if str(w.message).startswith("spider-scoring: a completion is unscored")]}


# name -> (the reward manager, extra config, RewardLoopWorker actors): verl's reward loop, each run in its
# own actors. Two actors once (the batch split between two processes, each loading reward.py by path, and
# put back in order); one for the others: each actor is a process importing verl and torch, and on a
# loaded machine their start is most of this file's time.
RAY_LOOPS = {
    "naive": ("naive", [], 1),
    "remote": ("remote", [], 1),  # a RewardComputeWorker actor per worker: compute_score travels by cloudpickle
    "outcome_fields": ("naive", ["+reward.custom_reward_function.reward_kwargs.outcome_fields=true"], 2),
}


def rayloop(tokenizer, rows, texts, path, work):
    import ray
    from verl.experimental.reward_loop import RewardLoopManager
    tok_dir = os.path.join(work, "tokenizer")
    tokenizer.save_pretrained(tok_dir)
    out = {}
    with ray_environment(None):
        t = time.perf_counter()
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
                 runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}})
        out["ray_init_s"] = round(time.perf_counter() - t, 1)
        try:
            for name, (manager, extra, count) in RAY_LOOPS.items():
                overrides = [f"actor_rollout_ref.model.path={tok_dir}", f"reward.num_workers={count}",
                             f"reward.reward_manager.name={manager}", *extra]
                mgr = RewardLoopManager(reward_config(path, overrides))
                found = mgr.compute_rm_score(batch(tokenizer, rows, texts))
                workers = [ray.get_actor(f"reward_loop_worker_{i}") for i in range(count)]
                out[name] = {"scores": found.batch["rm_scores"].sum(-1).tolist(), "workers": [w is not None for w in workers],
                             "extra": {k: [v.item() if hasattr(v, "item") else v for v in found.non_tensor_batch[k]]
                                       for k in found.meta_info.get("reward_extra_keys", [])}}
                for worker in workers:  # their names are taken: the next manager starts its own
                    ray.kill(worker, no_restart=True)
        finally:
            ray.shutdown()
    return out


def main() -> None:
    folder, rows_path, out_path = sys.argv[1:4]
    modes = sys.argv[4:]
    t0 = time.perf_counter()
    import verl
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8")]
    texts = responses(rows)
    tokenizer = build_tokenizer([m["content"] for r in rows for m in r["prompt"]] + texts)
    report = {"verl": verl.__version__, "loaded": {}, "direct": {}}
    with open(os.path.join(folder, "data", "index.json"), encoding="utf-8") as f:
        report["reward_shape"] = (json.load(f).get("reward_shape") or {}).get("name", "binary")
    from verl.trainer.ppo.reward import get_custom_reward_fn
    for module in ("reward", "grader"):
        fn = get_custom_reward_fn(reward_config(os.path.join(folder, f"{module}.py")))
        own = load_file(os.path.join(folder, f"{module}.py"), f"direct_{module}")
        gold = rows[0]["reward_model"]["ground_truth"]
        report["loaded"][module] = [fn(data_source="spider", solution_str=s, ground_truth=gold) for s in (gold, "SELECT 1")]
        report["direct"][module] = [own.compute_score(data_source="spider", solution_str=s, ground_truth=gold)
                                    for s in (gold, "SELECT 1")]
    report["generic_modules"] = sorted(m for m in GENERIC if m in sys.modules)
    grader = load_file(os.path.join(folder, "grader.py"), "own_grader")
    report["bundle"] = [grader.compute_score(data_source=r["data_source"], solution_str=s,
                                             ground_truth=r["reward_model"]["ground_truth"], extra_info=r["extra_info"])
                        for r, s in zip(rows, texts)]
    own_reward = load_file(os.path.join(folder, "reward.py"), "own_reward")
    report["paid"] = [own_reward.compute_score(data_source=r["data_source"], solution_str=s,
                                               ground_truth=r["reward_model"]["ground_truth"], extra_info=r["extra_info"])
                      for r, s in zip(rows, texts)]
    path = os.path.join(folder, "reward.py")
    t = time.perf_counter()
    report["managers"] = managers(tokenizer, rows, texts, path)
    report["managers_s"] = round(time.perf_counter() - t, 1)
    report["rate_limited"] = rate_limited(tokenizer, rows, texts, path)
    report["outcomes"] = [grader.grade(output=s, expected=r["reward_model"]["ground_truth"], extra_info=r["extra_info"])
                          ["outcome"] for r, s in zip(rows, texts)]
    if "rayloop" in modes:
        t = time.perf_counter()
        report["rayloop"] = rayloop(tokenizer, rows, texts, path, tempfile.mkdtemp(prefix="verl-run-"))
        report["rayloop_s"] = round(time.perf_counter() - t, 1)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
