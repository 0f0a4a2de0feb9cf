"""The entry points survive pickle and cloudpickle into a fresh process that has only the unpacked bundle.

verl's ``remote`` reward manager sends ``compute_score`` to a Ray actor (cloudpickle) and TRL's
``AsyncGRPOTrainer`` sends ``trl_reward`` to a spawned process (pickle). A parent process loads the
bundle one of three ways (as a package, by file path as verl does, by ``import reward`` from
``TRAINER_BUNDLE_ROOT`` on ``sys.path``), scores, and pickles the entry points; a child started with
``python -I`` elsewhere, with no bundle path anywhere in its environment, unpickles and scores the
same completions. Before entry points pickled as a recipe, the child met ``ModuleNotFoundError:
No module named '_spider_scoring_<hash>'`` (cloudpickle) or the parent could not pickle at all.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from conftest import require_modules

PARENT = r"""
import importlib, importlib.util, json, os, pickle, sys
mode, folder, serializer, out = sys.argv[1:5]
if mode == "package":
    spec = importlib.util.spec_from_file_location("spider_pkg", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    sys.modules["spider_pkg"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["spider_pkg"])
    reward, grader = importlib.import_module("spider_pkg.reward"), importlib.import_module("spider_pkg.grader")
elif mode == "path":
    def by_path(name):
        spec = importlib.util.spec_from_file_location(f"custom_module_{name}", os.path.join(folder, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    reward, grader = by_path("reward"), by_path("grader")
else:
    os.environ["TRAINER_BUNDLE_ROOT"] = folder
    sys.path.insert(0, folder)
    import reward, grader
dumps = pickle.dumps if serializer == "pickle" else importlib.import_module("cloudpickle").dumps
entries = {"compute_score": reward.compute_score, "trl_reward": reward.trl_reward, "grade": grader.compute_score,
           "trl_reward_async": reward.trl_reward_async}
with open(out, "wb") as f:
    f.write(dumps(entries))
print(json.dumps(__CALLS__(entries)))
"""

CHILD = r"""
import json, pickle, sys
before = set(sys.modules)
with open(sys.argv[1], "rb") as f:
    entries = pickle.load(f)
result = __CALLS__(entries)
generic = {"verify", "reward", "grader", "scoring_entry", "bundle_index", "sql", "scoring", "search", "neighbours",
               "contract"} & set(sys.modules)
print(json.dumps({"scores": result, "generic": sorted(generic), "env": "TRAINER_BUNDLE_ROOT" in __import__("os").environ}))
"""

CALLS = r"""
def __CALLS__(entries):
    import asyncio
    gold = "SELECT count(*) FROM Owner"
    return [entries["compute_score"](data_source="spider", solution_str=gold, ground_truth=gold),
            entries["compute_score"](solution_str="SELECT 1", ground_truth=gold),
            entries["trl_reward"]([gold, "SELECT name FROM Owner", gold], ground_truth=[gold] * 3),
            entries["grade"](output=gold, expected=gold),
            asyncio.run(entries["trl_reward_async"](["SELECT name FROM Owner", gold], ground_truth=[gold] * 2))]
"""


def run(code: str, *args: str, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-c", CALLS + code, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("serializer", ["pickle", pytest.param("cloudpickle", marks=pytest.mark.integration)])
@pytest.mark.parametrize("mode", ["package", "path", "env"],
                         ids=["imported as a package", "loaded by file path (verl)", "import reward from TRAINER_BUNDLE_ROOT"])
def test_an_entry_point_scores_the_same_in_a_fresh_process_that_has_only_the_unpacked_bundle(
        sample_bundle, tmp_path, mode, serializer):
    if serializer == "cloudpickle":
        require_modules("cloudpickle")
    clean = {k: v for k, v in os.environ.items() if k not in ("TRAINER_BUNDLE_ROOT", "PYTHONPATH")}
    blob = tmp_path / "entries.pickle"
    parent = run(PARENT, mode, str(sample_bundle), serializer, str(blob), cwd=tmp_path, env=clean)
    assert parent.returncode == 0, parent.stderr[-3000:]
    expected = json.loads(parent.stdout)
    assert expected == [1.0, 0.0, [1.0, 0.0, 1.0], 1.0, [0.0, 1.0]]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    child = run(CHILD, str(blob), cwd=elsewhere, env=clean)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout)
    assert found == {"scores": expected, "generic": [], "env": False}


def test_unpickled_in_the_process_that_loaded_it_an_entry_point_is_that_module_s_own(bundle_env):
    from bundle import reward
    again = pickle.loads(pickle.dumps(reward.trl_reward))
    assert again is reward.trl_reward  # a round trip (or a fork child) shares the loaded bundle and its caches
    assert again.__name__ == "trl_reward" and "TRL reward function" in (again.__doc__ or "")
