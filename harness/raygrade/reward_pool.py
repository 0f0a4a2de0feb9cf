"""A verl-style reward worker pool on Ray: the bundle's ``compute_score`` inside Ray actors.

verl's reward loop (``RewardLoopManager``) starts ``RewardLoopWorker`` Ray actors; each loads the
custom reward function by file path (``reward.custom_reward_function.path``) in its own process and
calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per response. This
module is the same pattern, small enough to copy into a trainer of your own:

* ``BundleReward(folder)`` is the entry point: a picklable callable that holds only the unpacked
  bundle's folder. It loads ``reward.py`` by path the first time it is called in a process (as
  verl does; the bundle then imports its siblings as a private package, no generic module names),
  so it can be sent to a fresh process (spawn, a Ray actor) as it is. Under fork a child may inherit
  a loaded copy: the bundle opens no database before a call and drops a parent's SQLite connections
  in a forked child (``sql.connection``), so that copy is safe to use;
* ``RewardWorker`` is the actor body: one ``BundleReward`` per process, so gold results are
  computed (or read from the bundle's index) once per worker and reused for every later response
  on the same row; ``stats()`` shows it;
* ``start_pool`` / ``score_batch``: N actors, a batch split among them, scores back in order. A row
  the bundle cannot score (its typed error, e.g. a stale bundle) comes back as ``None`` with the
  error's code, never 0.0.

Every node needs the unpacked bundle at the same path (or use the zip with harness.raygrade.backend,
which ships it through the object store).

>>> import pickle
>>> reward = pickle.loads(pickle.dumps(BundleReward("/opt/bundle")))
>>> reward.folder, reward.loaded
('/opt/bundle', False)
"""

from __future__ import annotations

import importlib.util
import os
import types
from typing import Any

from harness.common.outcomes import error_code


class BundleReward:
    """``compute_score`` of the bundle unpacked at ``folder``, loaded by path once per process."""

    def __init__(self, folder: str, module: str = "reward", function: str = "compute_score") -> None:
        self.folder, self.module_name, self.function = str(folder), module, function
        self._module: types.ModuleType | None = None
        self.loads = 0

    def __getstate__(self) -> dict:  # the loaded module never travels: each process loads its own
        return {"folder": self.folder, "module_name": self.module_name, "function": self.function}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["folder"], state["module_name"], state["function"])  # type: ignore[misc]

    @property
    def loaded(self) -> bool:
        return self._module is not None

    def module(self) -> types.ModuleType:
        if self._module is None:
            path = os.path.join(self.folder, f"{self.module_name}.py")
            spec = importlib.util.spec_from_file_location(f"spider_reward_{os.getpid()}", path)
            if spec is None or spec.loader is None:
                raise FileNotFoundError(f"no bundle module at {path}: unpack the zip there on every node")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self._module, self.loads = module, self.loads + 1
        return self._module

    def __call__(self, data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                 extra_info: Any = None, **kwargs: Any) -> float:
        fn = getattr(self.module(), self.function)
        return fn(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                  extra_info=extra_info, **kwargs)

    def gold_results_cached(self) -> int:
        """How many gold results this process holds (the bundle's per-process cache)."""
        index = self.module().scoring_entry.bundle_index
        return len(getattr(index.load(self.folder).cache, "_done", {}))


class RewardWorker:
    """The actor body: scores items ``{data_source, solution_str, ground_truth, extra_info}``."""

    def __init__(self, folder: str) -> None:
        self.reward = BundleReward(folder)
        self.calls = 0

    def score(self, items: list[dict]) -> list[dict]:
        """``{"score": float}`` per item, or ``{"score": None, "error": code, "detail": message}``."""
        out: list[dict] = []
        for item in items:
            self.calls += 1
            try:
                out.append({"score": float(self.reward(**item))})
            except Exception as exc:  # a typed bundle error is an unscored row; anything else is a bug: raise
                code = error_code(exc)
                if code is None:
                    raise
                out.append({"score": None, "error": code, "detail": f"{type(exc).__name__}: {exc}"})
        return out

    def stats(self) -> dict:
        return {"pid": os.getpid(), "calls": self.calls, "loads": self.reward.loads,
                "gold_results_cached": self.reward.gold_results_cached()}


def start_pool(ray: Any, folder: str, workers: int, num_cpus: float = 1) -> list:
    """``workers`` RewardWorker actors, spread over the cluster's nodes."""
    actor = ray.remote(num_cpus=num_cpus, scheduling_strategy="SPREAD")(RewardWorker)
    return [actor.remote(folder) for _ in range(workers)]


def score_batch(ray: Any, pool: list, items: list[dict]) -> list[dict]:
    """Every item scored by the pool (contiguous chunks, one a worker), results in item order."""
    size = -(-len(items) // len(pool)) if items else 1
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    answers = ray.get([pool[i].score.remote(chunk) for i, chunk in enumerate(chunks)])
    return [result for answer in answers for result in answer]
