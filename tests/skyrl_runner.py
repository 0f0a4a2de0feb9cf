"""skyrl-gym's own ``make`` and ``BaseTextEnv`` loop over the bundle's ``skyrl_env.py``, in .venv-skyrl.

    .venv-skyrl/bin/python tests/skyrl_runner.py ZIP ROWS_JSONL OUT_JSON

The zip is unpacked and ``skyrl_env.py`` loaded by path; ``register()`` puts ``SpiderSQLEnv`` in
skyrl-gym's registry and ``skyrl_gym.make`` builds one environment an episode from the row (as
SkyRL's generator does: ``env_config`` and ``extras`` with ``reward_spec`` and ``max_turns``). Each
episode is stepped with scripted turns until done: a look then the gold, a look then a wrong answer,
a bare wrong answer, and looks until the last turn allowed. OUT_JSON gets each episode's steps.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import zipfile


def main() -> None:
    zip_path, rows_path, out_path = sys.argv[1:4]
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv
    folder = os.path.join(tempfile.mkdtemp(prefix="skyrl-"), "spider_scoring_bundle")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    spec = importlib.util.spec_from_file_location("spider_skyrl_env", os.path.join(folder, "skyrl_env.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env_id = module.register()
    episodes = []
    for line in open(rows_path, encoding="utf-8"):
        row = json.loads(line)
        gold = row["ground_truth"]
        scripts = {"look then gold": [f"<query>{gold}</query>", f"<answer>{gold}</answer>"],
                   "look then wrong": ["<query>SELECT 1</query>", "<answer>SELECT 'no such answer'</answer>"],
                   "bare wrong": ["SELECT 'no such answer'"],
                   "looks only": [f"<query>{gold}</query>"] * 10}
        for kind, turns in scripts.items():
            extras = {"reward_spec": {"method": "rule", "ground_truth": gold}, "db_id": row.get("db_id"),
                      "max_turns": 5}
            env = skyrl_gym.make(env_id, env_config={}, extras=extras)
            assert isinstance(env, BaseTextEnv)
            env.init(row["prompt"])
            steps = []
            for turn in turns:
                out = env.step(turn)
                steps.append({"reward": out["reward"], "done": out["done"], "observations": out["observations"],
                              "metadata": out["metadata"]})
                if out["done"]:
                    break
            env.close()
            episodes.append({"kind": kind, "gold": gold, "db_id": row.get("db_id"), "steps": steps})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"skyrl_gym": skyrl_gym.__file__, "episodes": episodes}, f, indent=1)


if __name__ == "__main__":
    main()
